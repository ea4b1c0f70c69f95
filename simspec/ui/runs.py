"""The explorer's runs: the what-if (every chosen method at every load, beside plain decoding)
through the studies' one :class:`~simspec.studies.runs.Runs`, on a pool kept for the page's
lifetime and a memo of finished runs, and the frames the page shows of it; the capacity plan
and the speculation schedule of the page's deployment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from simspec.catalog.hardware import load_engine, load_gpu
from simspec.config import MethodConfig
from simspec.engine.intervals import ratio_of_sums_interval
from simspec.engine.simulation import SimResult
from simspec.studies import capacity
from simspec.studies.metrics import RUN_INTERVALS, RUN_METRICS
from simspec.studies.runs import Runs
from simspec.studies.runs.executors import KeptPool
from simspec.studies.runs.keys import scenario_key
from simspec.studies.runs.memo import Memo
from simspec.studies.schedule import bands, grid
from simspec.studies.sweep import WIDE_INTERVAL, wide_intervals
from simspec.ui.inputs import ExplorerInputs, deployment_for, method_for, scenario_for

# the summary metrics the page shows, per method and load: the studies' metrics and intervals
# (simspec.studies.metrics) less the detail only the sweep's CSV keeps, and whether the run was
# stable
_SWEEP_ONLY = ("itl_", "draft_time", "verify_time", "overhead_time", "preemptions")
_SWEEP_ONLY += ("kv_blocks", "ttft_ms_p50_ci", "e2e_s_p50_ci")
SUMMARY_COLUMNS = (
    *(c for c in (*RUN_METRICS, *RUN_INTERVALS) if not c.startswith(_SWEEP_ONLY)),
    "stable",
)


def _measure(res: SimResult) -> tuple[dict[str, float], dict[str, float], list[float]]:
    """What the page keeps of one run: its summary metrics, the mean ms per iteration in
    drafting, verifying and host overhead, and each request's τ (module-level: pools ship it)."""
    s, it = res.summary, res.iterations
    parts = {
        "draft_ms": 1e3 * it.draft_s.mean(),
        "verify_ms": 1e3 * it.verify_s.mean(),
        "overhead_ms": 1e3 * it.overhead_s.mean(),
    }
    req = res.requests[res.requests.spec_steps > 0]
    tau = ((req.accepted_tokens + req.spec_steps) / req.spec_steps).tolist()
    metrics = {c: getattr(s, c) for c in SUMMARY_COLUMNS}
    metrics["measured_requests"] = s.requests  # the window's, by load (the CSV's scenario: a floor)
    metrics["section_e2e_s"] = s.section_e2e_s  # pairs two runs for a speedup's interval
    return metrics, parts, tau


# A what-if with fewer new runs than this runs in the page's own process: starting even a warm
# pool's round trips costs more than a few short runs (benchmarks/bench_explorer.py).
SERIAL_BELOW = 4
# One process pool for the page's lifetime, shared by every rerun and session: its workers keep
# their caches (traces, replays, cost models) from one what-if to the next, and its fork server
# imports this module once (and app.py, which then draws nothing).
POOL = KeptPool(preload=("simspec.ui.runs",))
# Finished runs by scenario (runs are seeded and uploads are named by their content, so an equal
# scenario is an equal result): a widget change re-runs only what it changed; the
# plain-decoding baseline, about half of a what-if's work, is reused across methods and K.
MEMO = Memo()
RUNS = Runs("kept", pool=POOL, memo=MEMO, serial_below=SERIAL_BELOW)


def forget_runs() -> None:
    """Drop the remembered runs (benchmarks and tests that must simulate again)."""
    MEMO.clear()


def run(inp: ExplorerInputs, runs: Runs = RUNS) -> dict[str, pd.DataFrame]:
    """Simulate autoregressive and every chosen method at every load on ``runs`` (default: the
    page's pool, except runs this process has already done, and in this process when few runs
    are left); each run is seeded, so the numbers do not depend on where it ran. The progress
    of ``runs`` is told how many runs are new, then each as it finishes, by its :func:`stage`.

    Returns ``summary`` (one row per method and load, with speedup), ``breakdown`` (mean ms per
    iteration in drafting, verifying and host overhead) and ``acceptance`` (each request's mean
    tokens per speculative step)."""
    names = ["autoregressive", *[m for m in inp.methods if m != "autoregressive"]]
    methods = {name: method_for(inp, name) for name in names}
    cells = [(load, name) for load in inp.loads for name in names]
    # the slowest cells (lowest load: the most iterations per request) start first
    order = sorted(range(len(cells)), key=lambda i: cells[i][0])
    texts = [scenario_for(inp, cells[i][0], methods[cells[i][1]]).model_dump_json() for i in order]
    keys = [scenario_key(t) for t in texts]
    stages = {key: stage(inp, *cells[i]) for key, i in zip(keys, order, strict=True)}
    fresh = {k for k in keys if runs.memo is None or not runs.memo.get(k, _measure)[0]}
    if fresh:
        runs.at(0, len(fresh))
    outcomes = runs.all(texts, measure=_measure, on_result=lambda key, _: runs.step(stages[key]))
    results = dict(zip(order, outcomes, strict=True))
    rows, parts, accept = [], [], []
    for i, (load, name) in enumerate(cells):
        metrics, breakdown, taus = results[i]
        rows.append({"method": name, "k": methods[name].k, "load": load, **metrics})
        parts.append({"method": name, "load": load, **breakdown})
        if name != "autoregressive":
            accept += [{"method": name, "load": load, "tau": t} for t in taus]
    return {
        "summary": _with_speedups(pd.DataFrame(rows), closed=inp.arrival == "closed"),
        "breakdown": pd.DataFrame(parts),
        "acceptance": pd.DataFrame(accept, columns=["method", "load", "tau"]),
    }


def stage(inp: ExplorerInputs, load: float, name: str) -> str:
    """What one run of the what-if is, as its progress names it: plain decoding is the
    baseline, each chosen method "method i of n", at its batch size (or arrival rate)."""
    spec = [m for m in inp.methods if m != "autoregressive"]
    what = (
        "baseline" if name == "autoregressive" else f"method {spec.index(name) + 1} of {len(spec)}"
    )
    at = f"batch size {load:g}" if inp.arrival == "closed" else f"{load:g} requests/s"
    return f"{what} ({name}) at {at}"


def _with_speedups(summary: pd.DataFrame, closed: bool = True) -> pd.DataFrame:
    """Each row against plain decoding at its load: the throughput speedup with its 95 %
    interval (the two runs paired by section) and the TPOT p50 ratio. The interval is the
    summed latencies' ratio, which is the throughput ratio only in a closed loop (Little's
    law); under Poisson arrivals both serve the offered rate, so no interval is given."""
    by_load = summary[summary.method == "autoregressive"].set_index("load")
    # under Poisson arrivals both serve the offered rate, so the ratio of throughputs is mostly
    # noise and is no speedup: named for what it is (QA: 0.84 and 1.31 read as speedups)
    summary.insert(
        3,
        "speedup" if closed else "throughput_ratio",
        summary.throughput_tok_s / summary.load.map(by_load.throughput_tok_s),
    )
    # under a closed loop the headline is throughput at a fixed concurrency; under Poisson
    # arrivals both serve the offered rate, and the gain is in latency (TPOT p50 ratio)
    summary.insert(4, "tpot_ratio", summary.load.map(by_load.tpot_ms_p50) / summary.tpot_ms_p50)
    intervals = [
        ratio_of_sums_interval(np.array(base), np.array(own))
        for base, own in zip(
            summary.load.map(by_load.section_e2e_s), summary.section_e2e_s, strict=True
        )
    ]
    if closed:
        summary.insert(4, "speedup_ci_low", [lo for lo, _ in intervals])
        summary.insert(5, "speedup_ci_high", [hi for _, hi in intervals])
    return summary.drop(columns="section_e2e_s")


def wide_interval_text(summary: pd.DataFrame) -> str:
    """What the sweep's note says of speedups whose 95 % interval is wider than ±2 %, for the
    page ('' when none is; QA: the page showed them, error bars alone, without a word)."""
    spec = summary[summary.method != "autoregressive"]
    if "speedup_ci_low" not in spec or not len(wide := wide_intervals(spec)):
        return ""
    return (
        f"{len(wide)} speedup(s) known only to more than ±{WIDE_INTERVAL:.0%} (their error "
        "bars): raise the requests measured or the turnovers for a longer window."
    )


def plan_view(frame: pd.DataFrame) -> pd.DataFrame:
    """The capacity plan with its answer first: replicas and GPUs, then the method and why."""
    first = ["replicas", "gpus", "method"]
    return frame[first + [c for c in frame.columns if c not in first]]


def plan(
    inp: ExplorerInputs, target_qps: float, slo: capacity.Slo, gpu_hour_price: float
) -> pd.DataFrame:
    """The capacity plan of plain decoding and every chosen method for ``target_qps`` within
    ``slo`` (:func:`~simspec.studies.capacity.plan`, the CLI's probe duration), answer first."""
    methods = [method_for(inp, m) for m in ["autoregressive", *inp.methods]]
    frame = capacity.plan(
        deployment_for(inp),
        methods,
        target_qps,
        slo,
        gpu_hour_price,
        duration_s=capacity.PLAN_DURATION_S,
    )
    return plan_view(frame)


@dataclass(frozen=True)
class Schedule:
    """A recommended speculation schedule: the method as the page sets it, the knob its grid
    varies (``k``, or ``tree_nodes`` for a tree) and what the study recommends."""

    method: MethodConfig
    knob: str
    recommended: bands.Recommended


def schedule(
    inp: ExplorerInputs, name: str, runs: Runs = RUNS, precision_target: float = 0.0
) -> Schedule:
    """Every setting of ``name``'s knob at the CLI's concurrencies, the crossovers and the
    bands (:func:`~simspec.studies.schedule.bands.recommend_bands`, as ``simspec recommend``
    runs them): each speedup measured to ``precision_target`` (a share either side, as
    ``--precision-target``), or with 0 at a fixed length, the page's requests and turnovers;
    on ``runs`` (default: the page's pool; seeded runs, the same numbers as in process), whose
    progress is told each grid concurrency (each setting's run under a target), then each
    crossover probe and edge."""
    base = method_for(inp, name)
    knob, values = grid.recommend_grid(base)
    max_seqs = load_engine(inp.engine).max_seqs_for(base.name, None, load_gpu(inp.gpu))
    runs.at(0, len(grid.DEFAULT_CONCURRENCIES))
    rec = bands.recommend_bands(
        deployment_for(inp),
        base,
        values,
        grid.DEFAULT_CONCURRENCIES,
        max_seqs,
        knob,
        runs=runs,
        precision_target=precision_target,
    )
    return Schedule(base, knob, rec)
