"""The one place that runs many scenarios: serially, on a local process pool, or on Ray, each
distinct scenario once, finished runs kept by content.

Every run is a seeded, self-contained scenario (shipped as its JSON), so which worker runs it
and in which order cannot change its numbers: the executors differ only in speed. A run's key
is a hash of that JSON, so the same scenario asked for twice (two rows of a case table, a
baseline two sweep points share, a repeated probe) runs once, and a :class:`RunCache` backed by
a file lets a stopped study resume where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TextIO

from simspec.config import Scenario
from simspec.engine.metrics import RunSummary
from simspec.engine.simulation import SimResult, simulate
from simspec.errors import InputError, ScenarioError
from simspec.outputs import write_text_atomic

Executor = Literal["serial", "process", "ray"]
Errors = Literal["raise", "keep"]
Measure = Callable[[SimResult], Any]


@dataclass(frozen=True)
class Failed:
    """A scenario that could not run, with the one-line reason: the caller skips only what
    needs it (a validation row), the rest go on."""

    reason: str


def scenario_key(scenario_json: str) -> str:
    """A run's address: SHA-256 of its scenario's canonical JSON (``model_dump_json``), cut to
    20 hex digits (80 bits: no two scenarios of any study share one; the same keys earlier
    versions wrote to a sweep's ``OUT.partial``, so those still resume)."""
    return hashlib.sha256(scenario_json.encode()).hexdigest()[:20]


def summary_of(result: SimResult) -> RunSummary:
    """What a run is kept for unless the caller asks for more: its summary."""
    return result.summary


def run_one(scenario_json: str, errors: Errors = "raise", measure: Measure = summary_of) -> Any:
    """``measure`` of one scenario's run (its summary by default). With ``errors="keep"`` a
    scenario that cannot run gives a :class:`Failed` instead of raising, so nothing one
    scenario does stops the others. Module-level, so process pools and Ray can ship it."""
    try:
        return measure(simulate(Scenario.model_validate_json(scenario_json)))
    except (InputError, ScenarioError) as exc:
        if errors == "raise":
            raise
        return Failed(str(exc))
    except Exception as exc:  # noqa: BLE001 (one scenario's failure must not stop the rest)
        if errors == "raise":
            raise
        return Failed(f"simulation failed: {type(exc).__name__}: {exc}")


class RunCache:
    """Finished runs by content: scenario key -> summary, in memory and, given a ``path``,
    appended to that JSONL file as each finishes (one ``{"key": ..., "summary": {...}}`` line,
    flushed), so a stopped study keeps them.

    ``resume``: start from the runs the file already holds; otherwise from none. Either way an
    existing file is rewritten with just the complete entries kept (a line cut by the stop must
    not swallow the next one appended after it). A new file is created with the first run
    added: a study that runs nothing leaves none."""

    def __init__(self, path: Path | None = None, resume: bool = False) -> None:
        self.path = path
        self._runs: dict[str, RunSummary] = read_runs(path) if resume else {}
        self._sink: TextIO | None = None
        if path is not None and path.exists():
            write_text_atomic(path, "".join(_line(k, v) for k, v in self._runs.items()))

    def __contains__(self, key: str) -> bool:
        return key in self._runs

    def __len__(self) -> int:
        return len(self._runs)

    def get(self, key: str) -> RunSummary | None:
        return self._runs.get(key)

    def add(self, key: str, summary: RunSummary) -> None:
        self._runs[key] = summary
        if self.path is not None:
            self._sink = self._sink or self.path.open("a", encoding="utf-8")
            self._sink.write(_line(key, summary))
            self._sink.flush()

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()
            self._sink = None

    def __enter__(self) -> RunCache:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _line(key: str, summary: RunSummary) -> str:
    return json.dumps({"key": key, "summary": summary.as_dict()}) + "\n"


def read_runs(path: Path | None) -> dict[str, RunSummary]:
    """The summaries a :class:`RunCache` file holds; a truncated last line is ignored."""
    if path is None or not path.exists():
        return {}
    done = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
            done[entry["key"]] = RunSummary.from_dict(entry["summary"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
    return done


def run_all(
    scenarios: Sequence[Scenario | str],
    executor: Executor = "process",
    workers: int | None = None,
    ray_address: str | None = None,
    *,
    cache: RunCache | None = None,
    errors: Errors = "raise",
    measure: Measure = summary_of,
    on_result: Callable[[str, Any], None] | None = None,
) -> list[Any]:
    """The outcome of each scenario (a :class:`~simspec.config.Scenario` or its JSON), in the
    order given.

    They are submitted in that order (put the longest first, so the workers finish together)
    and each distinct one runs once; those ``cache`` holds do not run at all, and fresh
    summaries are added to it as they finish. ``on_result(key, outcome)`` sees each fresh run
    in completion order. ``errors`` and ``measure`` are :func:`run_one`'s; a cache keeps
    summaries, so it goes only with the default measure."""
    if cache is not None and measure is not summary_of:
        raise ValueError("a RunCache keeps summaries: use it only with the default measure")
    texts = [s if isinstance(s, str) else s.model_dump_json() for s in scenarios]
    keys = [scenario_key(t) for t in texts]
    out: dict[str, Any] = {}
    todo: dict[str, str] = {}
    for key, text in zip(keys, texts, strict=True):
        if cache is not None and key in cache:
            out[key] = cache.get(key)
        else:
            todo.setdefault(key, text)
    for key, outcome in _execute(todo, executor, workers, ray_address, errors, measure):
        out[key] = outcome
        if cache is not None and not isinstance(outcome, Failed):
            cache.add(key, outcome)
        if on_result:
            on_result(key, outcome)
    return [out[key] for key in keys]


def run(scenario: Scenario, cache: RunCache | None = None) -> RunSummary:
    """One scenario's summary, here and now (a probe whose next step depends on it)."""
    return run_all([scenario], "serial", cache=cache)[0]


def _execute(
    todo: dict[str, str],
    executor: Executor,
    workers: int | None,
    ray_address: str | None,
    errors: Errors,
    measure: Measure,
) -> Iterator[tuple[str, Any]]:
    """``(key, outcome)`` for every ``key -> scenario JSON``, in completion order."""
    if executor not in ("serial", "process", "ray"):
        raise InputError(
            "--executor", f"unknown executor {executor!r}; choose serial, process or ray"
        )
    if not todo:
        return
    workers = workers or os.cpu_count() or 1
    if executor == "serial" or (executor == "process" and (workers == 1 or len(todo) == 1)):
        for key, sc in todo.items():
            yield key, run_one(sc, errors, measure)
    elif executor == "process":
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(run_one, sc, errors, measure): key for key, sc in todo.items()}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
    else:
        yield from _ray(todo, workers, ray_address, errors, measure)


def _ray(
    todo: dict[str, str], workers: int, address: str | None, errors: Errors, measure: Measure
) -> Iterator[tuple[str, Any]]:
    try:
        import ray
    except ImportError:
        raise InputError("--executor", 'ray is not installed: pip install -e ".[ray]"') from None
    started = False
    if not ray.is_initialized():
        try:
            quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
            if address:
                ray.init(address=address, **quiet)
            else:
                ray.init(num_cpus=workers, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError("--ray-address", f"cannot start or reach Ray: {exc}") from None
        started = True
    try:
        remote = ray.remote(run_one)
        pending = {remote.remote(sc, errors, measure): key for key, sc in todo.items()}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield pending.pop(ref), ray.get(ref)
    finally:
        if started:
            ray.shutdown()
