"""Run one scenario: build a replica, let requests arrive, collect the tables and summary.

The replica is built by :mod:`simspec.engine.build`; the iteration itself is
:meth:`simspec.engine.replica.Replica.run`. Requests arrive through a SimPy process (Poisson,
or a piecewise rate) or, in a closed loop, the moment one leaves: then the replica's own
iterations are the only events, and it steps without SimPy (``Replica.run_alone``).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import simpy

from simspec.config import MethodConfig, Scenario
from simspec.engine.build import (
    acceptance_sampler,
    longest_request,
    past_budget,
    past_context,
    relaxation_time,
    setup_replica,
)
from simspec.engine.controls import dataset_controls, with_request_draws
from simspec.engine.kv_cache import MemoryPlan
from simspec.engine.metrics import IterationLog, RunSummary, summarize
from simspec.engine.replica import Replica, ReplicaSetup, StepClock
from simspec.engine.requests import RequestTable
from simspec.engine.window import layout
from simspec.engine.workload import arrival_gaps, generate_requests, stationary_cohort
from simspec.errors import InputError, ScenarioError


@dataclass
class SimResult:
    """Everything one run produced: per-request and per-iteration records plus a summary."""

    scenario: Scenario
    requests: pd.DataFrame
    iterations: pd.DataFrame
    summary: RunSummary
    memory: MemoryPlan


def check(sc: Scenario) -> None:
    """Raise the error ``simulate(sc)`` would raise while setting up (an unknown preset, a
    draft of another tokenizer, a model that does not fit), without running anything: sweeps
    check every cell before the first run."""
    setup_replica(sc)


def open_arrivals(
    env: simpy.Environment, replica: Replica, gaps: Iterable[float], watch: Watch
) -> Generator[simpy.Event, None, None]:
    """The SimPy process of an open workload: each request arrives ``gap`` seconds after the
    one before it, whatever the replica is doing, until ``watch`` says the measured requests
    have all left."""
    for rid, gap in enumerate(gaps):
        yield env.timeout(gap)
        if watch.done:
            break
        replica.arrive(rid)


class Watch:
    """Counts down the first ``watched`` requests (warm-up and measured) as they leave: the
    tail's arrivals stop once all have left (:mod:`simspec.engine.window`)."""

    def __init__(self, watched: int) -> None:
        self.watched, self.left = watched, watched

    def leave(self, rid: int) -> None:
        if rid < self.watched:
            self.left -= 1

    @property
    def done(self) -> bool:
        return self.left <= 0


class ClosedLoop:
    """A closed workload: ``concurrency`` requests arrive at once, and every request that leaves
    lets the next one in at that moment, until ``watch`` says the measured requests have all
    left. Not a SimPy process: the new request must be queued before the replica schedules its
    next iteration, which it does without yielding."""

    def __init__(self, replica: Replica, num_requests: int, watch: Watch) -> None:
        self.replica, self.num_requests, self.released = replica, num_requests, 0
        self.watch = watch
        # releases asked for while one is under way (a request that leaves at once, never
        # fitting, asks for the next): served by the loop in release, not by recursion
        self._owed, self._releasing = 0, False

    def start(self, concurrency: int, ages: np.ndarray) -> None:
        """Fill the slots: request i < ``len(ages)`` already decoding with ``ages[i]`` tokens
        produced (a stationary start; 0: in its prefill, as a new request), the rest new."""
        for _ in range(min(concurrency, self.num_requests)):
            rid = self.released
            if rid < len(ages) and ages[rid] > 0:
                self.released += 1
                self.replica.resume(rid, int(ages[rid]))
            else:
                self.release()

    def release(self, finished: int = -1) -> None:
        """Let the next request in (``finished``: the one that left, if any)."""
        if finished >= 0:
            self.watch.leave(finished)
        self._owed += 1
        if self._releasing:
            return
        self._releasing = True
        try:
            while self._owed and self.released < self.num_requests and not self.watch.done:
                self._owed -= 1
                self.released += 1
                self.replica.arrive(self.released - 1)
        finally:
            self._owed, self._releasing = 0, False


def plain_setup(sc: Scenario, setup: ReplicaSetup) -> ReplicaSetup:
    """The deployment's setup under plain decoding, whose relaxation time sets an open loop's
    warm-up: the same for every method, so a method's run and its baseline's measure the same
    requests (QA: a draft's memory shortened EAGLE-3's warm-up, 612 against 638 requests,
    and shifted its window off the baseline's)."""
    if sc.method.name == "autoregressive":
        return setup
    try:
        plain = MethodConfig(name="autoregressive", k=0)
        return setup_replica(sc.model_copy(update={"method": plain}))
    except (InputError, ScenarioError):  # the plain deployment refused: the method's own
        return setup


def simulate(sc: Scenario) -> SimResult:
    """Run one scenario to completion (every request finishes or is reported unfinishable)."""
    setup = setup_replica(sc)
    seeds = np.random.SeedSequence(sc.seed).spawn(3)
    rng_workload, rng_accept, rng_arrival = (np.random.default_rng(s) for s in seeds)
    wl = sc.workload
    open_loop = wl.arrival == "poisson" and wl.rate_schedule is None
    plan = layout(wl, relaxation_time(plain_setup(sc, setup), wl) if open_loop else 0.0)
    specs = generate_requests(wl, rng_workload, plan.total)
    acceptance = acceptance_sampler(sc, setup.speculator, len(specs), rng_accept)
    ages = np.zeros(0, dtype=np.int64)
    controls = None
    stationary = wl.arrival == "closed" and not plan.search
    if stationary:  # a closed loop that starts in its steady state (engine.window)
        k = setup.speculator.step_shape(wl.concurrency).k  # the draft a full loop runs
        taus = getattr(acceptance, "step_tokens", None) if k else None

        def per_step(trace_index: np.ndarray) -> np.ndarray | None:
            """Tokens per step of each request's own record (None: not replayed)."""
            return None if taus is None else taus(trace_index, k)

        specs, ages = stationary_cohort(
            specs, wl.concurrency, rng_workload, per_step(specs.trace_index)
        )
        controls = dataset_controls(wl, specs, per_step)
    table = RequestTable(specs)
    # a drawn or replayed request longer than the model's context is never served (vLLM's
    # server refuses a prompt whose prompt + max_tokens pass max_model_len); fixed lengths
    # past it were refused before the run (build.check_fixed_lengths)
    past_context(table, longest_request(sc, setup.target))
    past_budget(table, setup)
    log = IterationLog()
    watch = Watch(plan.watched)
    if wl.arrival == "closed":
        replica = Replica(StepClock(), setup, table, acceptance, log)
        loop = ClosedLoop(replica, len(table), watch)
        replica.on_finish = loop.release
        loop.start(wl.concurrency, ages)
        replica.run_alone()
    else:
        env = simpy.Environment()
        replica = Replica(env, setup, table, acceptance, log)
        replica.on_finish = watch.leave
        gaps = arrival_gaps(wl, len(table), rng_arrival)
        env.process(open_arrivals(env, replica, gaps, watch))
        env.process(replica.run())
        env.run()
    released = int(np.isfinite(table.arrival).sum())  # arrivals stop once the measured left
    if table.unfinishable[:released].all():
        raise ScenarioError(
            f"workload: no request fits {sc.model} on {sc.gpu} at tp={sc.tp} (each is longer "
            "than the KV cache or the model's context): shorten the requests or raise tp"
        )

    draws = getattr(acceptance, "request_draws", None)
    if stationary and draws is not None:
        controls = with_request_draws(controls, draws(), specs)
    requests = request_frame(table).iloc[:released]
    iterations = log.frame()
    # every block is back once all requests have left: kv_blocks_in_use_end checks that
    pool = replica.pool
    summary = summarize(
        requests, iterations, plan, pool.peak_used, setup.memory, pool.used, controls
    )
    return SimResult(sc, requests, iterations, summary, setup.memory)


def request_frame(t: RequestTable) -> pd.DataFrame:
    """One row per request: the columns of :attr:`SimResult.requests` (a fleet's too)."""
    return pd.DataFrame(
        {
            "arrival_s": t.arrival,
            "first_token_s": t.first_token,
            "finish_s": t.finish,
            "prompt_tokens": t.prompt_len,
            "output_tokens": t.generated,
            "tokens_before_start": t.before_start,
            "requested_output_tokens": t.output_len,
            "spec_steps": t.spec_steps,
            "accepted_tokens": t.accepted,
            "preemptions": t.preemptions,
            "unfinishable": t.unfinishable,
        }
    )
