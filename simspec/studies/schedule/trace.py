"""The recommended speculation schedule for a replayed trace's traffic (``plan --trace``).

``recommend`` measures closed loops at a grid of concurrencies; a replayed trace has no
concurrency of its own, so the schedule is found on closed loops whose request lengths follow
the trace window's: lognormal with the window's mean and coefficient of variation of prompt and
output lengths, clipped to the longest seen (the lognormal is the usual fit for LLM request
lengths, and it keeps the heavy tail that fills KV caches; ``basis: estimate``, the trace's
exact length pairs are not replayed in the closed loop). Acceptance is the method's own preset,
the same as the fleet's replicas draw.

The grid is small by default (``SCHEDULE_GRID``: 1, 4, 16, 64 concurrent requests) so the
schedule costs seconds, not the minutes of ``simspec recommend``'s full grid; the band edges
between grid points are still found by bisection (:mod:`simspec.studies.schedule.bands`).
"""

from __future__ import annotations

import numpy as np

from simspec.config import Deployment, LengthSpec, MethodConfig, WorkloadConfig
from simspec.engine.workload import arrival_trace
from simspec.studies.runs import SERIAL, Runs
from simspec.studies.schedule import NO_SCHEDULE
from simspec.studies.schedule.bands import recommend_bands
from simspec.studies.schedule.grid import recommend_grid

SCHEDULE_GRID = (1, 4, 16, 64)


def lengths_like(values: np.ndarray) -> LengthSpec:
    """A lognormal at the lengths' mean and CV, clipped to their range."""
    mean = float(values.mean())
    cv = float(values.std() / mean) if mean > 0 else 0.0
    return LengthSpec(
        dist="lognormal",
        mean=max(mean, 1.0),
        cv=min(cv, 10.0),
        min=int(values.min()),
        max=int(values.max()),
    )


def closed_like(deploy: Deployment) -> Deployment:
    """``deploy`` with its trace replay replaced by a closed loop of the window's lengths."""
    trace = arrival_trace(deploy.workload)
    wl = WorkloadConfig(
        arrival="closed",
        lengths_from=None,
        prompt=lengths_like(trace.prompt_len),
        output=lengths_like(trace.output_len),
    )
    return deploy.model_copy(update={"workload": wl})


def recommended(
    deploy: Deployment,
    method: MethodConfig,
    max_batch: int,
    grid: tuple[int, ...] = SCHEDULE_GRID,
    requests_per_run: int | None = None,
    *,
    runs: Runs = SERIAL,
) -> MethodConfig:
    """``method`` with the schedule ``recommend`` picks for the trace window's lengths: a K
    per band of running requests (vLLM Dynamic SD, ``k_schedule``; K at the largest band's),
    or a tree budget per band (``tree_schedule``). Bands run from 1 to ``max_batch``."""
    knob, values = recommend_grid(method)
    rec = recommend_bands(
        closed_like(deploy), method, values, grid, max_batch, knob, requests_per_run, runs=runs
    )
    bands = [(int(s), int(e), int(v)) for s, e, v in rec.bands]
    top = max((v for _, _, v in bands), default=0)
    if knob == "k":
        update = {**NO_SCHEDULE, "k": max(top, 1), "k_schedule": bands}
    else:
        update = {**NO_SCHEDULE, "tree_nodes": max(top, method.k), "tree_schedule": bands}
    return MethodConfig.model_validate(method.model_dump() | update)
