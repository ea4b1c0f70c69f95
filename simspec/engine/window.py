"""Which requests and which span of time a run's summary measures: the steady-state window.

A run is laid out as ``warm-up allowance + measured + tail`` requests (:func:`layout`). The
engine starts empty (or, in a closed loop, with every slot prefilling at once), so the first
requests see a transient; the last ones, once arrivals stop, see a batch that drains. Neither is
the load being asked about, so:

* **warm-up**: MSER-5 (White, Simulation 69(6), 1997; the method Hoad, Robinson & Davies,
  JORS 61(6), 2010 found the most reliable automatic truncation rule) on each request's
  normalised latency (end-to-end seconds per output token, in arrival order) picks the cut; it
  is searched within the warm-up allowance, and a cut past it is reported (``window_short``).
* **measured**: the ``requests`` requests that arrive from the cut on. Throughput counts the
  tokens emitted between the first measured arrival and the arrival after the last measured
  one; latency percentiles are over the measured requests.
* **tail**: arrivals go on until every request up to the end of the measured range has left
  (at most ``tail`` more), so the last measured requests finish under the same load.

A run with a rate schedule is a transient by design (a load that changes over the run): it has
no warm-up or tail and measures every request, as ``measure: whole`` asks of any run. So is a
replayed trace (``arrival: replay``): every request of its chosen window is measured, from an
empty engine to the last departure (choose ``trace_start_s`` to leave out a span).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simspec.config import DEFAULT_MEASURED, DEFAULT_TURNOVERS, MAX_REQUESTS, WorkloadConfig

MSER_BATCH = 5  # MSER-5: the rule is applied to means of 5 consecutive observations
MAX_WARMUP = 200_000  # open-loop warm-up requests (at 1e6 req/s a relaxation is cut short)


@dataclass(frozen=True)
class Layout:
    """Request counts of one run, in arrival order: ``warmup`` (the allowance within which
    the warm-up cut is searched), ``measured``, then at most ``tail`` arrivals that only keep
    the load up while the measured requests finish."""

    warmup: int
    measured: int
    tail: int
    search: bool = True  # find the cut by MSER-5 within the allowance; else cut at ``warmup``
    concurrency: int = 0  # a closed loop's, else 0 (an open loop)

    @property
    def total(self) -> int:
        return self.warmup + self.measured + self.tail

    @property
    def watched(self) -> int:
        """Arrivals continue until the first ``watched`` requests have all left."""
        return self.warmup + self.measured


def layout(wl: WorkloadConfig, relaxation_s: float = 0.0) -> Layout:
    """The run's request counts (README "Measurement").

    Closed loop: the run starts in its stationary state (``workload.stationary_cohort``), so
    the warm-up is just that initial cohort (``concurrency`` requests); the measured requests
    follow, and a tail of at most ``concurrency`` plus a quarter of the measured count keeps
    every slot busy until they have all left.

    Open loop (Poisson at a fixed rate): an empty engine fills up with long requests slowly
    (with ShareGPT's outputs, the KV cache of an H100 near capacity takes two minutes to fill),
    so the warm-up is ``relaxation_s`` seconds of arrivals, the time the longest requests take
    to pass through a busy engine (:func:`simspec.engine.build.relaxation_time`); a tail
    of a quarter of the measured count follows.

    ``warmup_requests`` replaces either warm-up by an allowance within which MSER-5 finds the
    cut (and, in a closed loop, turns the stationary start off)."""
    if wl.arrival == "replay":  # a replayed trace: every request of its window, whole
        from simspec.engine.workload import request_count

        return Layout(0, request_count(wl), 0)
    n = wl.num_requests
    if wl.rate_schedule is not None or wl.measure == "whole":
        return Layout(0, n, 0)
    quarter = math.ceil(n / 4)
    if wl.arrival == "closed":
        c = wl.concurrency
        if wl.warmup_requests is None:
            return Layout(c, n, c + quarter, search=False, concurrency=c)
        return Layout(wl.warmup_requests, n, c + quarter, concurrency=c)
    if wl.warmup_requests is not None:
        return Layout(wl.warmup_requests, n, quarter)
    warmup = min(math.ceil(wl.rate * relaxation_s), MAX_WARMUP)
    return Layout(warmup, n, quarter, search=False)


# Run lengths of a study measured to a precision target (simspec.studies.to_precision,
# run_to_target): a closed loop at concurrency c runs floor(c) x 2^k measured requests, up to
# cap(c). The floor: 32 turnovers of the batch (at least DEFAULT_MEASURED requests, as the
# shortest fixed run), so that each of the ten sections holds 3.2 turnovers. A request's
# latency is set by the requests running beside it, so neighbouring sections correlate where
# they are short, and batch means then narrow the interval below the run-to-run spread (Law,
# Simulation Modeling and Analysis, 5th ed., 9.5.3: batches long enough to be nearly
# independent). Measured with tools/interval_coverage.py (EAGLE-3, ShareGPT, Llama-3.1-8B on an
# H100, 12 seeds at exactly that length against one long run; README Measurement): at 16
# turnovers the intervals held the long run's speedup in 10 of 12 seeds at batch 8, 16 and 32,
# their half-widths 0.60-1.01x the seeds' 1.96 standard deviations, and its throughput in 7-10
# of 12 (0.48-0.84x); at 32 turnovers 10, 12, 12 and 12 of 12 at batch 8, 16, 32 and 64
# (1.00-1.45x), the throughput's 11, 12, 12 and 12 (0.86-1.03x). (An earlier check that found
# 16 turnovers enough had run 64: its requests were raised to the fixed length's floor.)
FLOOR_TURNOVERS = 32
# The cap: the fixed 64 turnovers (DEFAULT_TURNOVERS) a closed loop measured before there was a
# target (the same run, to the byte), and at batch 16 and below at least 1,024 requests (four
# times the fixed 256). Longer would cost what no default can: at batch 1 a request costs
# ~20 ms of CPU (a step per token or speculative step), and n-gram's +-1 % there needs ~40,000
# requests (~13 CPU-minutes a run); --requests N runs longer.
CAP_MEASURED = 4 * DEFAULT_MEASURED


def floor_requests(concurrency: int) -> int:
    """Measured requests of a closed loop's first run under a precision target."""
    return min(max(DEFAULT_MEASURED, FLOOR_TURNOVERS * concurrency), MAX_REQUESTS)


def cap_requests(concurrency: int) -> int:
    """The most measured requests a closed loop's run reaches under a precision target."""
    return min(max(CAP_MEASURED, DEFAULT_TURNOVERS * concurrency), MAX_REQUESTS)


def next_length(n: int, half: float, target: float, concurrency: int) -> int:
    """The run length after ``n`` requests whose interval's relative half-width ``half``
    missed ``target``: the first of ``floor x 2^k`` (at most the cap) at or above the length
    the half-width predicts (``n x (half / target)^2``: it falls as one over the root of the
    requests measured), at least one step longer. An undefined half-width (too few requests
    for sections) doubles. Jumping there, a study runs a cell once or twice, and at most
    ``1 + 2 + 4`` floors = 1.75 x its cap."""
    want = n * (half / target) ** 2 if math.isfinite(half) else 2 * n
    cap = cap_requests(concurrency)
    length = 2 * n
    while length < want and length < cap:
        length *= 2
    return min(length, cap)


@dataclass(frozen=True)
class Window:
    """The measured requests (``first`` .. ``first + count - 1`` in arrival order) and the
    span of time ``[start_s, end_s]`` whose emitted tokens give the throughput."""

    first: int
    count: int
    start_s: float
    end_s: float
    short: int  # measured requests missing because the warm-up ran past its allowance

    @property
    def span_s(self) -> float:
        return self.end_s - self.start_s


def mser_cut(series: np.ndarray, batch: int = MSER_BATCH) -> int:
    """MSER truncation point (in observations) of ``series``: the d minimising the squared
    standard error of the mean of what is left, ``sum((z_i - mean)^2) / (m - d)^2`` over the
    batch means z, for d up to half the batches (the rule's own bound)."""
    m = len(series) // batch
    if m < 4:
        return 0
    z = series[: m * batch].reshape(m, batch).mean(axis=1)
    # suffix sums: the mean and spread of z[d:] for every d at once
    s1 = np.cumsum(z[::-1])[::-1]
    s2 = np.cumsum((z * z)[::-1])[::-1]
    left = np.arange(m, 0, -1, dtype=float)  # m - d
    sse = s2 - s1 * s1 / left
    stat = sse / (left * left)
    d = int(np.argmin(stat[: m // 2 + 1]))
    return d * batch


def steady_window(requests: pd.DataFrame, plan: Layout, makespan: float) -> Window:
    """The window of a finished run laid out as ``plan`` (see the module docstring)."""
    arrival = requests["arrival_s"].to_numpy()
    n = len(arrival)
    cut = 0 if plan.search else min(plan.warmup, n)
    excess = 0  # requests the transient runs on past the allowance, into the measured ones
    if plan.warmup > 0 and plan.search:
        span = min(plan.watched, n)
        ok = ~requests["unfinishable"].to_numpy()[:span]
        out = np.maximum(requests["output_tokens"].to_numpy()[:span], 1)
        e2e = requests["finish_s"].to_numpy()[:span] - arrival[:span]
        norm = (e2e / out)[ok]
        wanted, allowed = mser_cut(norm), int(ok[: plan.warmup].sum())
        cut_in_ok = min(wanted, allowed)  # within the allowance; what it wanted past it is said
        excess = max(0, wanted - allowed)  # (QA: clamped without a word, window_short 0)
        cut = int(np.flatnonzero(ok)[cut_in_ok]) if cut_in_ok and ok.any() else 0
    last = min(cut + plan.measured, plan.watched, n)
    count = last - cut
    start = float(arrival[cut]) if n and cut else 0.0  # no cut: from the run's start
    if plan.warmup == 0 and plan.tail == 0:
        end = makespan  # a transient study: everything, to the last departure
    elif last < n and np.isfinite(arrival[last]):
        end = float(arrival[last])  # the next arrival after the measured ones
    else:
        end = makespan
    if not end > start:
        end = makespan
    return Window(cut, count, start, end, plan.measured - count + excess)
