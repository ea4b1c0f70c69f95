"""What the what-if explorer (app.py) computes and draws, kept out of the page so it is tested
like the rest: validated inputs in, result frames and titled plotly figures out.

Uploads live in :mod:`simspec.ui.uploads`. Defaults are the CLI's (the ``Deployment`` fields and
``simspec sweep``'s methods and batch sizes); every figure's title names the model, GPU, TP and
engine, and every download carries the scenario it came from (issue 18).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from pydantic import BaseModel, ConfigDict, Field, field_validator

from simspec.catalog.methods import (
    DATASET_DOMAIN,
    TRACE_DATASETS,
    default_methods,
    measured_acceptance,
    missing_draft_layers,
    preset_method,
)
from simspec.catalog.traces import first_method
from simspec.config import (
    DEFAULT_MEASURED,
    DEFAULT_TURNOVERS,
    SAMPLING_FIELDS,
    SERVING_FIELDS,
    AcceptanceConfig,
    Deployment,
    LengthSpec,
    MethodConfig,
    Scenario,
    WorkloadConfig,
    deployment_fields,
)
from simspec.engine.intervals import ratio_of_sums_interval
from simspec.engine.simulation import SimResult
from simspec.engine.speculators import SPECULATORS
from simspec.errors import InputError
from simspec.studies.metrics import RUN_INTERVALS, RUN_METRICS
from simspec.studies.model_facts import model_facts
from simspec.studies.runs import Runs
from simspec.studies.runs.executors import KeptPool
from simspec.studies.runs.job import check_runnable
from simspec.studies.runs.memo import Memo
from simspec.studies.sweep import DEFAULT_BATCH_SIZES

MAX_LOADS = 12
_DEPLOY = Deployment.model_fields
# the CLI's defaults (simspec sweep): its speculative methods, batch sizes and dataset
DEFAULT_METHODS = [m.name for m in default_methods() if m.name != "autoregressive"]
DEFAULT_DATASET = WorkloadConfig.model_fields["trace"].default


class ExplorerInputs(BaseModel):
    """Everything the sidebar sets; hashable as JSON for the page's cache."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str = _DEPLOY["model"].default
    model_name: str | None = Field(
        default=None, max_length=80, description="an uploaded config's model name, for titles"
    )
    gpu: str = _DEPLOY["gpu"].default
    tp: int = Field(default=_DEPLOY["tp"].default, ge=1, le=64)
    engine: str = _DEPLOY["engine"].default
    methods: list[str] = DEFAULT_METHODS
    k: int | None = Field(default=None, ge=1, le=16, description="None: each method's default")
    tree_nodes: int | None = Field(
        default=None, ge=1, le=1024, description="tree methods' budget; None: the default"
    )
    acceptance: Literal["preset", "alpha", "tau", "trace"] = "preset"
    dataset: str = DEFAULT_DATASET
    alpha: float = Field(default=0.7, ge=0.0, le=1.0)
    tau: float = Field(default=3.0, ge=1.0, le=65.0, description="measured tokens per step")
    tau_k: int | None = Field(
        default=None, ge=1, le=64, description="the K tau was measured at; None: the method's"
    )
    spread: float = Field(default=0.0, ge=0.0, le=3.0)
    trace_path: str | None = None
    arrival: Literal["closed", "poisson"] = "closed"
    loads: list[float] = [float(b) for b in DEFAULT_BATCH_SIZES]
    requests: int = Field(
        default=DEFAULT_MEASURED, ge=8, le=5000, description="requests measured per run"
    )
    turnovers: int = Field(
        default=DEFAULT_TURNOVERS,
        ge=0,
        le=1024,
        description="closed loop: measure at least this many x concurrency requests",
    )
    lengths: Literal["dataset", "fixed", "lognormal"] = "dataset"
    prompt_mean: float = Field(default=512, ge=1, le=65536)
    output_mean: float = Field(default=256, ge=1, le=16384)
    length_cv: float = Field(default=0.5, ge=0.0, le=5.0)
    temperature: float = Field(default=_DEPLOY["temperature"].default, ge=0.0, le=2.0)
    top_p: float = Field(default=_DEPLOY["top_p"].default, gt=0.0, le=1.0)
    seed: int = Field(default=_DEPLOY["seed"].default, ge=0)

    @field_validator("methods")
    @classmethod
    def _methods(cls, v: list[str]) -> list[str]:
        unknown = [m for m in v if m not in SPECULATORS]
        if unknown:
            raise ValueError(f"unknown method {unknown[0]!r}")
        if not [m for m in v if m != "autoregressive"]:
            raise ValueError("pick at least one speculative method")
        return v

    @field_validator("loads")
    @classmethod
    def _loads(cls, v: list[float]) -> list[float]:
        if not v or len(v) > MAX_LOADS or any(not 0 < x <= 4096 for x in v):
            raise ValueError(f"give 1 to {MAX_LOADS} loads, each in (0, 4096]")
        return sorted(set(v))


def parse_loads(text: str, arrival: str) -> list[float]:
    """'1, 4, 16' -> [1, 4, 16]; finite, positive, and whole numbers for concurrencies."""
    try:
        values = [float(x) for x in text.replace(";", ",").split(",") if x.strip()]
    except ValueError:
        raise InputError("loads", f"expected numbers separated by commas, got {text!r}") from None
    if not values or len(values) > MAX_LOADS or any(not 0 < v <= 4096 for v in values):
        raise InputError("loads", f"give 1 to {MAX_LOADS} values, each in (0, 4096]")
    if arrival == "closed" and any(not math.isfinite(v) or v != int(v) for v in values):
        raise InputError("loads", "concurrencies are whole numbers of requests")
    return values


def workload_for(inp: ExplorerInputs, load: float) -> WorkloadConfig:
    """The workload at one load: a closed loop of ``load`` requests or Poisson arrivals at
    ``load`` per second, measured by the CLI's rule (README "Measurement")."""
    if inp.lengths == "dataset":
        lengths = {"trace": inp.dataset}
    else:
        dist = "fixed" if inp.lengths == "fixed" else "lognormal"
        lengths = {
            "trace": None,
            "prompt": LengthSpec(dist=dist, mean=inp.prompt_mean, cv=inp.length_cv),
            "output": LengthSpec(dist=dist, mean=inp.output_mean, cv=inp.length_cv),
        }
    if inp.arrival == "closed":
        n = int(load)
        return WorkloadConfig(
            arrival="closed",
            concurrency=n,
            requests=inp.requests,
            turnovers=inp.turnovers,
            **lengths,
        )
    return WorkloadConfig(arrival="poisson", rate=load, requests=inp.requests, **lengths)


def method_for(inp: ExplorerInputs, name: str) -> MethodConfig:
    """A method in its preset configuration, with the page's K, tree budget and acceptance."""
    if name == "autoregressive":
        return MethodConfig(name=name, k=0)
    m = preset_method(name, inp.dataset, None, inp.model)
    update: dict = {}
    if inp.k is not None:
        update["k"] = inp.k
    if inp.tree_nodes is not None and m.tree in ("static", "dynamic"):
        update["tree_nodes"] = max(inp.tree_nodes, update.get("k", m.k))
    if inp.acceptance in ("alpha", "tau"):
        shape = m.model_dump(exclude_none=True) | update
        given = {"alpha": inp.alpha} if inp.acceptance == "alpha" else {"tau": inp.tau}
        measured = measured_acceptance(shape, **given, tau_k=inp.tau_k) or {}
        update["acceptance"] = AcceptanceConfig(**measured, spread=inp.spread)
    elif inp.acceptance == "trace" and inp.trace_path:
        if m.tree not in (None, "chain"):
            update["tree"] = "chain"
        update["acceptance"] = AcceptanceConfig(
            trace=inp.trace_path, trace_method=first_method(inp.trace_path)
        )
    return m.model_copy(update=update)


# the summary metrics the page shows, per method and load: the studies' metrics and intervals
# (simspec.studies.metrics) less the detail only the sweep's CSV keeps, and whether the run was
# stable
_SWEEP_ONLY = ("itl_", "draft_time", "verify_time", "overhead_time", "preemptions")
_SWEEP_ONLY += ("unfinishable", "kv_blocks", "ttft_ms_p50_ci", "e2e_s_p50_ci")
SUMMARY_COLUMNS = (
    *(c for c in (*RUN_METRICS, *RUN_INTERVALS) if not c.startswith(_SWEEP_ONLY)),
    "stable",
)


def deployment_for(inp: ExplorerInputs, load: float = 1) -> Deployment:
    """The page's deployment (model, GPU, TP, engine, sampling, seed) at one load."""
    fields = deployment_fields(inp, (*SERVING_FIELDS, *SAMPLING_FIELDS))
    return Deployment(**fields, workload=workload_for(inp, load))


def scenario_for(inp: ExplorerInputs, load: float, method: MethodConfig) -> Scenario:
    """The page's deployment running ``method`` at one load."""
    return Scenario(**dict(deployment_for(inp, load)), method=method)


def model_info(inp: ExplorerInputs) -> list[tuple[str, str]]:
    """The chosen model's facts (parameters, active per token, layout, precision, KV per
    token, GPUs needed on the chosen GPU), as ``simspec models NAME`` prints them."""
    return [(k, v) for k, v in model_facts(inp.model, inp.gpu, inp.engine) if k != "source"]


def offered_methods(model: str) -> tuple[list[str], dict[str, str]]:
    """The speculative methods the page offers for ``model``, and those it leaves out with
    why (mtp needs the model's own MTP layers)."""
    offered, left = [], {}
    for name in SPECULATORS:
        if name == "autoregressive":
            continue
        why = missing_draft_layers(name, model)
        if why:
            left[name] = why
        else:
            offered.append(name)
    return offered, left


def check_inputs(inp: ExplorerInputs) -> None:
    """Refuse, before any run, what cannot run: a method the model lacks the layers for, or a
    model that does not fit the GPUs (one line, from the memory plan)."""
    for name in ["autoregressive", *inp.methods]:
        check_runnable(scenario_for(inp, inp.loads[0], method_for(inp, name)))


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
    metrics["section_e2e_s"] = s.section_e2e_s  # pairs two runs for a speedup's interval
    return metrics, parts, tau


# A what-if with fewer new runs than this runs in the page's own process: starting even a warm
# pool's round trips costs more than a few short runs (benchmarks/bench_explorer.py).
SERIAL_BELOW = 4
# One process pool for the page's lifetime, shared by every rerun and session: its workers keep
# their caches (traces, replays, cost models) from one what-if to the next, and its fork server
# imports this module once (and app.py, which then draws nothing).
POOL = KeptPool(preload=("simspec.ui.explorer",))
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
    are left); each run is seeded, so the numbers do not depend on where it ran.

    Returns ``summary`` (one row per method and load, with speedup), ``breakdown`` (mean ms per
    iteration in drafting, verifying and host overhead) and ``acceptance`` (each request's mean
    tokens per speculative step)."""
    names = ["autoregressive", *[m for m in inp.methods if m != "autoregressive"]]
    methods = {name: method_for(inp, name) for name in names}
    cells = [(load, name) for load in inp.loads for name in names]
    # the slowest cells (lowest load: the most iterations per request) start first
    order = sorted(range(len(cells)), key=lambda i: cells[i][0])
    scenarios = [scenario_for(inp, cells[i][0], methods[cells[i][1]]) for i in order]
    results = dict(zip(order, runs.all(scenarios, measure=_measure), strict=True))
    rows, parts, accept = [], [], []
    for i, (load, name) in enumerate(cells):
        metrics, breakdown, taus = results[i]
        rows.append({"method": name, "k": methods[name].k, "load": load, **metrics})
        parts.append({"method": name, "load": load, **breakdown})
        if name != "autoregressive":
            accept += [{"method": name, "load": load, "tau": t} for t in taus]
    summary = pd.DataFrame(rows)
    by_load = summary[summary.method == "autoregressive"].set_index("load")
    summary.insert(
        3, "speedup", summary.throughput_tok_s / summary.load.map(by_load.throughput_tok_s)
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
    summary.insert(4, "speedup_ci_low", [lo for lo, _ in intervals])
    summary.insert(5, "speedup_ci_high", [hi for _, hi in intervals])
    summary = summary.drop(columns="section_e2e_s")
    return {
        "summary": summary,
        "breakdown": pd.DataFrame(parts),
        "acceptance": pd.DataFrame(accept, columns=["method", "load", "tau"]),
    }


def load_label(inp: ExplorerInputs) -> str:
    return "concurrent requests" if inp.arrival == "closed" else "arrival rate (requests/s)"


def scenario_label(inp: ExplorerInputs) -> str:
    """Model, GPU, TP and engine, as every title ends (an upload by its model's name)."""
    return f"{inp.model_name or inp.model} · {inp.gpu} · TP {inp.tp} · {inp.engine}"


# One colour per method, the same in every chart and tab (the registry's order, so adding a
# method never moves the others); plain decoding is grey.
_PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
    "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173",
)  # fmt: skip
METHOD_COLOURS = {"autoregressive": "#7f7f7f"} | dict(
    zip([m for m in SPECULATORS if m != "autoregressive"], _PALETTE, strict=False)
)


def method_colour(name: str) -> str:
    return METHOD_COLOURS.get(name, "#000000")


def _titled(
    fig: go.Figure, title: str, inp: ExplorerInputs, x: str, y: str, log_x: bool = False
) -> go.Figure:
    fig.update_layout(
        title={"text": f"{title}<br><sup>{scenario_label(inp)}</sup>"},
        xaxis_title=x,
        yaxis_title=y,
        height=440,
        legend_title_text="method",
        margin={"t": 80},
    )
    if log_x:
        fig.update_xaxes(type="log")
    return fig


def _against_load(fig: go.Figure, inp: ExplorerInputs, title: str, y: str) -> go.Figure:
    """A figure whose x axis is the load, on a log scale (loads double), ticked at the loads
    themselves: plotly's own log ticks label every digit ("8 9 1 2 3 ... 10 2 3")."""
    fig = _titled(fig, title, inp, load_label(inp), y, log_x=True)
    fig.update_xaxes(tickvals=list(inp.loads), ticktext=[f"{v:g}" for v in inp.loads])
    return fig


def _line_per_method(frame: pd.DataFrame, y: str) -> go.Figure:
    fig = go.Figure()
    for name, part in frame.groupby("method", sort=False):
        fig.add_trace(
            go.Scatter(
                x=part.load,
                y=part[y],
                mode="lines+markers",
                name=name,
                line={"color": method_colour(name)},
            )
        )
    return fig


def headline(inp: ExplorerInputs) -> tuple[str, str, str]:
    """(column, chart title, axis title) of the page's headline: throughput at a fixed
    concurrency under a closed loop; under Poisson arrivals, where every method serves the
    offered rate, time per output token."""
    if inp.arrival == "closed":
        return "speedup", "Throughput speedup over plain decoding (closed loop)", "speedup (×)"
    return (
        "tpot_ratio",
        "Latency gain over plain decoding: TPOT p50 ratio (open loop)",
        "plain decoding's TPOT p50 / method's (×)",
    )


def speedup_figure(summary: pd.DataFrame, inp: ExplorerInputs) -> go.Figure:
    column, title, axis = headline(inp)
    spec = summary[summary.method != "autoregressive"]
    fig = _line_per_method(spec, column)
    if column == "speedup" and "speedup_ci_low" in spec:  # 95 % intervals (paired runs)
        for trace, (_, part) in zip(fig.data, spec.groupby("method", sort=False), strict=True):
            trace.error_y = {
                "type": "data",
                "symmetric": False,
                "array": (part.speedup_ci_high - part.speedup).to_numpy(),
                "arrayminus": (part.speedup - part.speedup_ci_low).to_numpy(),
            }
    fig.add_hline(y=1.0, line_dash="dash", annotation_text="plain decoding")
    return _against_load(fig, inp, title, axis)


def throughput_tpot_figure(summary: pd.DataFrame, inp: ExplorerInputs) -> go.Figure:
    fig = go.Figure()
    for name, part in summary.groupby("method", sort=False):
        fig.add_trace(
            go.Scatter(
                x=part.tpot_ms_p50,
                y=part.throughput_tok_s,
                name=name,
                mode="lines+markers",
                line={"color": method_colour(name)},
                text=[f"load {v:g}" for v in part.load],
            )
        )
    return _titled(
        fig,
        "Throughput against time per output token (each point a load)",
        inp,
        "TPOT p50 (ms)",
        "output throughput (tokens/s)",
    )


def latency_figure(summary: pd.DataFrame, inp: ExplorerInputs) -> go.Figure:
    fig = go.Figure()
    for name, part in summary.groupby("method", sort=False):
        for col, dash in (("tpot_ms_p50", "solid"), ("tpot_ms_p99", "dot")):
            fig.add_trace(
                go.Scatter(
                    x=part.load,
                    y=part[col],
                    mode="lines+markers",
                    line={"dash": dash, "color": method_colour(name)},
                    name=f"{name} {col[8:]}",
                )
            )
    return _against_load(
        fig, inp, "Time per output token, p50 (solid) and p99 (dotted)", "TPOT (ms)"
    )


def ttft_figure(summary: pd.DataFrame, inp: ExplorerInputs) -> go.Figure:
    fig = _line_per_method(summary, "ttft_ms_p99")
    return _against_load(fig, inp, "Time to first token, p99", "TTFT p99 (ms)")


def breakdown_figure(breakdown: pd.DataFrame, inp: ExplorerInputs) -> go.Figure:
    b = breakdown.copy()
    b["case"] = b.method + " @ " + b.load.map(lambda v: f"{v:g}")
    fig = go.Figure()
    for col, label in (
        ("draft_ms", "drafting"),
        ("verify_ms", "target forward (verify)"),
        ("overhead_ms", "host overhead"),
    ):
        fig.add_trace(go.Bar(x=b.case, y=b[col], name=label))
    fig.update_layout(barmode="stack")
    return _titled(
        fig,
        "Mean time per engine iteration",
        inp,
        f"method @ {load_label(inp)}",
        "ms per iteration",
    )


def acceptance_figure(acceptance: pd.DataFrame, inp: ExplorerInputs) -> go.Figure:
    fig = go.Figure()
    for name, part in acceptance.groupby("method", sort=False):
        fig.add_trace(
            go.Histogram(
                x=part.tau,
                name=name,
                opacity=0.6,
                nbinsx=30,
                marker={"color": method_colour(name)},
            )
        )
    fig.update_layout(barmode="overlay")
    return _titled(
        fig,
        "Acceptance per request: mean tokens per speculative step",
        inp,
        "tokens per step (τ, bonus included)",
        "requests",
    )


# -- downloads: each says what it is ------------------------------------------------------------
def scenario_columns(inp: ExplorerInputs) -> dict[str, object]:
    """The scenario a result came from, as leading CSV columns."""
    cols: dict[str, object] = {
        "model": inp.model_name or inp.model,
        "gpu": inp.gpu,
        "tp": inp.tp,
        "engine": inp.engine,
        "dataset": inp.dataset,
        "acceptance": inp.acceptance,
    }
    if inp.acceptance == "alpha":
        cols |= {"alpha": inp.alpha, "alpha_spread": inp.spread}
    elif inp.acceptance == "tau":
        cols |= {"tau": inp.tau, "tau_k": inp.tau_k or "method's K", "tau_spread": inp.spread}
    cols |= {
        "temperature": inp.temperature,
        "top_p": inp.top_p,
        "arrival": inp.arrival,
        "lengths": inp.lengths,
    }
    if inp.lengths != "dataset":
        cols |= {"prompt_mean": inp.prompt_mean, "output_mean": inp.output_mean}
        if inp.lengths == "lognormal":
            cols["length_cv"] = inp.length_cv
    return cols | {"requests": inp.requests, "seed": inp.seed}


def method_settings(inp: ExplorerInputs, name: str) -> dict[str, object]:
    """The settings a method ran with (K, tree shape and budget)."""
    m = method_for(inp, name)
    return {"k": m.k, "tree": m.tree or "", "tree_nodes": m.tree_nodes or ""}


def with_scenario(frame: pd.DataFrame, inp: ExplorerInputs, settings: bool = True) -> pd.DataFrame:
    """``frame`` with the scenario's columns first and, where it has a ``method`` column (and
    ``settings``), each method's settings beside it."""
    out = frame.copy()
    if settings and "method" in out.columns:
        per = {m: method_settings(inp, m) for m in out.method.unique()}
        at = list(out.columns).index("method") + 1
        for key in ("k", "tree", "tree_nodes"):
            if key not in out.columns:
                out.insert(at, key, out.method.map(lambda m, key=key: per[m][key]))
                at += 1
    for i, (key, value) in enumerate(scenario_columns(inp).items()):
        out.insert(i, key, value)
    return out


def results_csv(summary: pd.DataFrame, inp: ExplorerInputs) -> str:
    return with_scenario(summary, inp).to_csv(index=False, float_format="%.6g")


def schedule_csv(table: pd.DataFrame, inp: ExplorerInputs, method: str) -> str:
    """The recommend table (speedup per K per concurrency) with the scenario and the method's
    tree settings; K is the table's own axis."""
    settings = method_settings(inp, method)
    head = {"method": method, "tree": settings["tree"], "tree_nodes": settings["tree_nodes"]}
    out = table.copy()
    for i, (key, value) in enumerate(head.items()):
        out.insert(i, key, value)
    return with_scenario(out, inp, settings=False).to_csv(index=False, float_format="%.6g")


def plan_view(frame: pd.DataFrame) -> pd.DataFrame:
    """The capacity plan with its answer first: replicas and GPUs, then the method and why."""
    first = ["replicas", "gpus", "method"]
    return frame[first + [c for c in frame.columns if c not in first]]


def domains() -> dict[str, str]:
    """Packaged datasets by the domain their presets stand for."""
    return {f"{ds} ({DATASET_DOMAIN[ds]})": ds for ds in TRACE_DATASETS}


def diverging_scale(lo: float, hi: float, mid: float = 1.0) -> list[list]:
    """Red below ``mid``, white at it, blue above, over [lo, hi] (the data's range): plotly's
    ``zmid`` alone widens the bar symmetrically (a 0.5-4x map read -2 to 4x)."""
    red, white, blue = "#b2182b", "#f7f7f7", "#2166ac"
    if hi <= lo:
        return [[0.0, white], [1.0, white]]
    f = min(max((mid - lo) / (hi - lo), 0.0), 1.0)
    if f <= 0.0:
        return [[0.0, white], [1.0, blue]]
    if f >= 1.0:
        return [[0.0, red], [1.0, white]]
    return [[0.0, red], [f, white], [1.0, blue]]


def analytic_figures(
    table: pd.DataFrame, inp: ExplorerInputs, method: str
) -> tuple[go.Figure, go.Figure]:
    """Heatmaps of E and of batch-1 speedup over α × K (simspec.studies.analytic)."""
    e = table.pivot(index="k", columns="alpha", values="expected_tokens")
    s = table.pivot(index="k", columns="alpha", values="speedup")
    fe = go.Figure(
        go.Heatmap(
            z=e.values, x=e.columns, y=e.index, colorscale="Viridis", colorbar={"title": "tokens"}
        )
    )
    lo, hi = float(s.min().min()), float(s.max().max())
    fs = go.Figure(
        go.Heatmap(
            z=s.values,
            x=s.columns,
            y=s.index,
            zmin=lo,
            zmax=hi,
            colorscale=diverging_scale(lo, hi),
            colorbar={"title": "×", "ticksuffix": "×"},
        )
    )
    x = "acceptance α (per position, i.i.d.)"
    return (
        _titled(fe, f"Expected tokens per target step E, {method}", inp, x, "draft tokens K"),
        _titled(fs, f"Batch-1 speedup, {method} (white: 1×)", inp, x, "draft tokens K"),
    )
