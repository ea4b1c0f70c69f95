"""The one place that runs many scenarios: :class:`Runs`, the settings every study takes.

A run's key is the content of its scenario and of the files it names (:mod:`.keys`), so each
distinct scenario runs once; finished summaries are kept by that key in a :class:`RunCache`
(:mod:`.journal`), which a file backs so a stopped study resumes where it stopped; measured
outcomes of any kind can be remembered in memory for a long-lived caller (:mod:`.memo`); the
runs execute here, on a process pool, on a pool kept across calls, or on Ray
(:mod:`.executors`); one run is :func:`~.job.run_one`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, replace
from typing import Any, Protocol

from simspec.config import Scenario
from simspec.engine.metrics import RunSummary
from simspec.errors import InputError
from simspec.studies.runs import executors
from simspec.studies.runs.executors import EXECUTORS, Executor, Job, KeptPool, Outcomes
from simspec.studies.runs.job import Errors, Failed, Measure, run_one, summary_of
from simspec.studies.runs.journal import RunCache
from simspec.studies.runs.keys import scenario_key
from simspec.studies.runs.memo import Memo


class Progress(Protocol):
    """What a study tells as it goes (the CLI's progress bar is one)."""

    def step(self, label: str) -> None:
        """One more done; ``label`` says which."""

    def grow(self, more: int) -> None:
        """``more`` steps to do than first said (a study that learns its size as it goes)."""

    def at(self, done: int, total: int) -> None:
        """``done`` of ``total`` done."""


@dataclass(frozen=True)
class Runs:
    """How a study runs its scenarios: where (``executor``: serial, a ``process`` pool of
    ``workers`` started for the study, the ``kept`` pool ``pool`` shared across calls, or
    ``ray`` at ``ray_address``), which finished summaries it reuses and keeps (``cache``),
    which measured outcomes it remembers in memory (``memo``), and whom it tells
    (``progress``). On a pool, fewer new runs than ``serial_below`` run in this process:
    starting a pool, or even a kept pool's round trips, costs more than a few short runs."""

    executor: Executor = "serial"
    workers: int | None = None
    ray_address: str | None = None
    cache: RunCache | None = None
    memo: Memo | None = None
    progress: Progress | None = None
    pool: KeptPool | None = None
    serial_below: int = 2

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise InputError(
                "--executor",
                f"unknown executor {self.executor!r}; choose {', '.join(EXECUTORS)}",
            )

    def all(
        self,
        scenarios: Sequence[Scenario | str],
        *,
        errors: Errors = "raise",
        measure: Measure = summary_of,
        on_result: Callable[[str, Any], None] | None = None,
    ) -> list[Any]:
        """The outcome of each scenario (a :class:`~simspec.config.Scenario` or its JSON), in
        the order given.

        They are submitted in that order (put the longest first, so the workers finish
        together) and each distinct one runs once; those the cache or the memo holds do not
        run at all, and fresh outcomes are added to them as they finish. ``on_result(key,
        outcome)`` sees each fresh run in completion order. ``errors`` and ``measure`` are
        :func:`~.job.run_one`'s; a cache keeps summaries, so it goes only with the default
        measure."""
        cache = self.cache
        if cache is not None and measure is not summary_of:
            raise ValueError("a RunCache keeps summaries: use it only with the default measure")
        texts = [s if isinstance(s, str) else s.model_dump_json() for s in scenarios]
        keys = [scenario_key(t) for t in texts]
        out: dict[str, Any] = {}
        todo: dict[str, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key in out or key in todo:
                continue
            if cache is not None and key in cache:
                out[key] = cache.get(key)
                continue
            if self.memo is not None:
                known, outcome = self.memo.get(key, measure)
                if known:
                    out[key] = outcome
                    continue
            todo[key] = text
        job = functools.partial(run_one, errors=errors, measure=measure)
        with closing(self._execute(todo, job)) as outcomes:  # stops a pool on any raise
            for key, outcome in outcomes:
                out[key] = outcome
                if not isinstance(outcome, Failed):
                    if cache is not None:
                        cache.add(key, outcome)
                    if self.memo is not None:
                        self.memo.add(key, measure, outcome)
                if on_result:
                    on_result(key, outcome)
        return [out[key] for key in keys]

    def holds(self, key: str, measure: Measure = summary_of) -> bool:
        """Whether the outcome of the run ``key`` (:func:`~.keys.scenario_key`) is at hand, in
        the cache or the memo: :meth:`all` will not run it."""
        if self.cache is not None and key in self.cache:
            return True
        return self.memo is not None and self.memo.get(key, measure)[0]

    def one(self, scenario: Scenario) -> RunSummary:
        """One scenario's summary, here and now (a probe whose next step depends on it)."""
        return replace(self, executor="serial").all([scenario])[0]

    def map(self, job: Job, payloads: Sequence[str]) -> list[Any]:
        """``job(payload)`` for each payload (text), in the order given, on this executor: for
        work that is not one scenario (a shard of a fleet). ``job`` must be picklable (module
        level, or a partial of one)."""
        todo = {str(i): p for i, p in enumerate(payloads)}
        with closing(self._execute(todo, job)) as outcomes:
            out = dict(outcomes)
        return [out[str(i)] for i in range(len(payloads))]

    def _execute(self, todo: dict[str, str], job: Job) -> Outcomes:
        workers = self.workers or os.cpu_count() or 1
        few = workers == 1 or len(todo) < self.serial_below
        if not todo or self.executor == "serial" or (self.executor != "ray" and few):
            return executors.serial(todo, job)
        if self.executor == "process":
            return executors.pooled(todo, job, workers)
        if self.executor == "kept":
            return executors.kept(todo, job, self.pool or executors.KEPT)
        return executors.on_ray(todo, job, workers, self.ray_address)

    def cached(self) -> Runs:
        """These settings with a fresh in-memory cache when they have none: a study whose
        steps ask for the same run again (a repeated probe) shares it."""
        return self if self.cache is not None else replace(self, cache=RunCache())

    def quiet(self) -> Runs:
        """These settings telling no one (a step of a study that reports its own progress)."""
        return replace(self, progress=None)

    def step(self, label: str) -> None:
        if self.progress is not None:
            self.progress.step(label)

    def grow(self, more: int) -> None:
        if self.progress is not None:
            self.progress.grow(more)

    def at(self, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress.at(done, total)


# the defaults studies start from: runs one after another in this process, or on a pool of
# every CPU started for the study
SERIAL = Runs()
PROCESS = Runs("process")
