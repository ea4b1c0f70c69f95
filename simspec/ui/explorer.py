"""What the what-if explorer (app.py) computes and draws, kept out of the page so it is tested
like the rest: validated inputs in, result frames and titled plotly figures out.

Uploads are parsed as data only (JSON with ``json``, JSONL traces through
:func:`simspec.catalog.traces.load_trace`), capped in size, and every failure is an
:class:`~simspec.errors.InputError` the page shows as one message.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

import pandas as pd
import plotly.graph_objects as go
from pydantic import BaseModel, ConfigDict, Field, field_validator

from simspec.catalog.methods import DATASET_DOMAIN, TRACE_DATASETS, preset_method
from simspec.catalog.models import ModelShape, load_hf_config
from simspec.catalog.traces import first_method, load_trace
from simspec.config import (
    AcceptanceConfig,
    Deployment,
    LengthSpec,
    MethodConfig,
    Scenario,
    WorkloadConfig,
)
from simspec.engine.simulation import SimResult
from simspec.engine.speculators import SPECULATORS
from simspec.errors import InputError
from simspec.studies.runner import run_all

MAX_UPLOAD_BYTES = 2 * 1024 * 1024
MAX_LOADS = 12


class ExplorerInputs(BaseModel):
    """Everything the sidebar sets; hashable as JSON for the page's cache."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str = "llama-3.1-8b"
    gpu: str = "h100_sxm"
    tp: int = Field(default=1, ge=1, le=64)
    engine: str = "vllm"
    methods: list[str] = ["eagle3"]
    k: int | None = Field(default=None, ge=1, le=16, description="None: each method's default")
    tree_nodes: int | None = Field(
        default=None, ge=1, le=1024, description="tree methods' budget; None: the default"
    )
    acceptance: Literal["preset", "alpha", "trace"] = "preset"
    dataset: str = "sharegpt"
    alpha: float = Field(default=0.7, ge=0.0, le=1.0)
    spread: float = Field(default=0.0, ge=0.0, le=3.0)
    trace_path: str | None = None
    arrival: Literal["closed", "poisson"] = "closed"
    loads: list[float] = [1, 2, 4, 8, 16, 32, 64, 128]
    requests: int = Field(default=48, ge=8, le=5000, description="requests per run (at least)")
    lengths: Literal["dataset", "fixed", "lognormal"] = "dataset"
    prompt_mean: float = Field(default=512, ge=1, le=65536)
    output_mean: float = Field(default=256, ge=1, le=16384)
    length_cv: float = Field(default=0.5, ge=0.0, le=5.0)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int = Field(default=0, ge=0)

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
        if not v or len(v) > MAX_LOADS or any(x <= 0 or x > 4096 for x in v):
            raise ValueError(f"give 1 to {MAX_LOADS} loads, each in (0, 4096]")
        return sorted(set(v))


def parse_loads(text: str, arrival: str) -> list[float]:
    """'1, 4, 16' -> [1, 4, 16]; concurrencies must be whole numbers."""
    try:
        values = [float(x) for x in text.replace(";", ",").split(",") if x.strip()]
    except ValueError:
        raise InputError("loads", f"expected numbers separated by commas, got {text!r}") from None
    if arrival == "closed" and any(v != int(v) for v in values):
        raise InputError("loads", "concurrencies are whole numbers of requests")
    if not values or len(values) > MAX_LOADS or any(v <= 0 or v > 4096 for v in values):
        raise InputError("loads", f"give 1 to {MAX_LOADS} values, each in (0, 4096]")
    return values


def _check_size(data: bytes, what: str) -> None:
    if len(data) > MAX_UPLOAD_BYTES:
        raise InputError(what, f"the file is larger than {MAX_UPLOAD_BYTES // 1024} KiB")
    if not data:
        raise InputError(what, "the file is empty")


def _keep(data: bytes, folder: Path, suffix: str) -> Path:
    """Store an upload under a name from its content, so a changed file is never mistaken for
    an earlier one (loaders cache by path)."""
    path = folder / f"upload-{hashlib.sha256(data).hexdigest()[:16]}{suffix}"
    path.write_bytes(data)
    return path


def save_config_upload(data: bytes, name: str, folder: Path) -> tuple[str, ModelShape]:
    """A Hugging Face config.json, read as JSON data only; returns its stored path (what the
    scenario's ``model`` takes) and the shapes read from it."""
    _check_size(data, "model config")
    if not name.endswith(".json"):
        raise InputError("model config", f"expected a .json file, got {name!r}")
    try:
        json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError("model config", f"not valid JSON ({exc})") from None
    path = _keep(data, folder, ".json")
    return str(path), load_hf_config(path)


def save_trace_upload(data: bytes, name: str, folder: Path) -> str:
    """An acceptance trace in the shared/acceptance-traces JSONL format, validated and kept in
    ``folder`` for the runs; returns its path."""
    _check_size(data, "acceptance trace")
    if not name.endswith(".jsonl"):
        raise InputError("acceptance trace", f"expected a .jsonl file, got {name!r}")
    path = str(_keep(data, folder, ".jsonl"))
    try:
        load_trace(path, first_method(path))
    except InputError as exc:
        raise InputError("acceptance trace", exc.message) from None
    return path


def workload_for(inp: ExplorerInputs, load: float) -> WorkloadConfig:
    """The workload at one load: a closed loop of ``load`` requests (run with at least twice
    that many, so it fills) or Poisson arrivals at ``load`` per second."""
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
            arrival="closed", concurrency=n, requests=max(inp.requests, 2 * n), **lengths
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
    if inp.acceptance == "alpha":
        update["acceptance"] = AcceptanceConfig(alpha=inp.alpha, spread=inp.spread)
    elif inp.acceptance == "trace" and inp.trace_path:
        if m.tree not in (None, "chain"):
            update["tree"] = "chain"
        update["acceptance"] = AcceptanceConfig(
            trace=inp.trace_path, trace_method=first_method(inp.trace_path)
        )
    return m.model_copy(update=update)


# the summary metrics the page shows, per method and load
SUMMARY_COLUMNS = (
    "throughput_tok_s",
    "tpot_ms_p50",
    "tpot_ms_p99",
    "ttft_ms_p50",
    "ttft_ms_p99",
    "e2e_s_p50",
    "mean_accept_len",
    "no_proposal_frac",
    "mean_verify_tokens",
)


def deployment_for(inp: ExplorerInputs, load: float = 1) -> Deployment:
    """The page's deployment (model, GPU, TP, engine, sampling, seed) at one load."""
    return Deployment(
        model=inp.model,
        gpu=inp.gpu,
        tp=inp.tp,
        engine=inp.engine,
        temperature=inp.temperature,
        top_p=inp.top_p,
        seed=inp.seed,
        workload=workload_for(inp, load),
    )


def scenario_for(inp: ExplorerInputs, load: float, method: MethodConfig) -> Scenario:
    """The page's deployment running ``method`` at one load."""
    return Scenario(**dict(deployment_for(inp, load)), method=method)


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
    return {c: getattr(s, c) for c in SUMMARY_COLUMNS}, parts, tau


def run(inp: ExplorerInputs, workers: int | None = None) -> dict[str, pd.DataFrame]:
    """Simulate autoregressive and every chosen method at every load, on ``workers``
    processes (default: every CPU; each run is seeded, so the numbers do not depend on it).

    Returns ``summary`` (one row per method and load, with speedup), ``breakdown`` (mean ms per
    iteration in drafting, verifying and host overhead) and ``acceptance`` (each request's mean
    tokens per speculative step)."""
    names = ["autoregressive", *[m for m in inp.methods if m != "autoregressive"]]
    methods = {name: method_for(inp, name) for name in names}
    cells = [(load, name) for load in inp.loads for name in names]
    # the slowest cells (lowest load: the most iterations per request) start first
    order = sorted(range(len(cells)), key=lambda i: cells[i][0])
    done = run_all(
        [scenario_for(inp, cells[i][0], methods[cells[i][1]]) for i in order],
        "process",
        workers,
        measure=_measure,
    )
    results = {i: result for i, result in zip(order, done, strict=True)}
    rows, parts, accept = [], [], []
    for i, (load, name) in enumerate(cells):
        metrics, breakdown, taus = results[i]
        rows.append({"method": name, "k": methods[name].k, "load": load, **metrics})
        parts.append({"method": name, "load": load, **breakdown})
        if name != "autoregressive":
            accept += [{"method": name, "load": load, "tau": t} for t in taus]
    summary = pd.DataFrame(rows)
    base = summary[summary.method == "autoregressive"].set_index("load").throughput_tok_s
    summary.insert(3, "speedup", summary.throughput_tok_s / summary.load.map(base))
    return {
        "summary": summary,
        "breakdown": pd.DataFrame(parts),
        "acceptance": pd.DataFrame(accept, columns=["method", "load", "tau"]),
    }


def load_label(inp: ExplorerInputs) -> str:
    return "concurrent requests" if inp.arrival == "closed" else "arrival rate (requests/s)"


def _titled(fig: go.Figure, title: str, x: str, y: str, log_x: bool = False) -> go.Figure:
    fig.update_layout(
        title=title,
        xaxis_title=x,
        yaxis_title=y,
        height=420,
        legend_title_text="method",
        margin={"t": 60},
    )
    if log_x:
        fig.update_xaxes(type="log")
    return fig


def _against_load(fig: go.Figure, inp: ExplorerInputs, title: str, y: str) -> go.Figure:
    """A figure whose x axis is the load, on a log scale (loads double)."""
    return _titled(fig, title, load_label(inp), y, log_x=True)


def _line_per_method(frame: pd.DataFrame, y: str) -> go.Figure:
    fig = go.Figure()
    for name, part in frame.groupby("method", sort=False):
        fig.add_trace(go.Scatter(x=part.load, y=part[y], mode="lines+markers", name=name))
    return fig


def speedup_figure(summary: pd.DataFrame, inp: ExplorerInputs) -> go.Figure:
    fig = _line_per_method(summary[summary.method != "autoregressive"], "speedup")
    fig.add_hline(y=1.0, line_dash="dash", annotation_text="plain decoding")
    title = f"Speedup over plain decoding: {inp.model} on {inp.gpu} x{inp.tp}"
    return _against_load(fig, inp, title, "speedup (×)")


def throughput_tpot_figure(summary: pd.DataFrame, inp: ExplorerInputs) -> go.Figure:
    fig = go.Figure()
    for name, part in summary.groupby("method", sort=False):
        fig.add_trace(
            go.Scatter(
                x=part.tpot_ms_p50,
                y=part.throughput_tok_s,
                name=name,
                mode="lines+markers",
                text=[f"load {v:g}" for v in part.load],
            )
        )
    return _titled(
        fig,
        "Throughput against time per output token (each point a load)",
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
                    line={"dash": dash},
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
        fig, "Mean time per engine iteration", f"method @ {load_label(inp)}", "ms per iteration"
    )


def acceptance_figure(acceptance: pd.DataFrame, inp: ExplorerInputs) -> go.Figure:
    fig = go.Figure()
    for name, part in acceptance.groupby("method", sort=False):
        fig.add_trace(go.Histogram(x=part.tau, name=name, opacity=0.6, nbinsx=30))
    fig.update_layout(barmode="overlay")
    return _titled(
        fig,
        "Acceptance per request: mean tokens per speculative step",
        "tokens per step (τ, bonus included)",
        "requests",
    )


def results_csv(summary: pd.DataFrame) -> str:
    return summary.to_csv(index=False, float_format="%.6g")


def domains() -> dict[str, str]:
    """Packaged datasets by the domain their presets stand for."""
    return {f"{ds} ({DATASET_DOMAIN[ds]})": ds for ds in TRACE_DATASETS}


def analytic_figures(table: pd.DataFrame, title: str) -> tuple[go.Figure, go.Figure]:
    """Heatmaps of E and of batch-1 speedup over α × K (simspec.studies.analytic)."""
    e = table.pivot(index="k", columns="alpha", values="expected_tokens")
    s = table.pivot(index="k", columns="alpha", values="speedup")
    fe = go.Figure(
        go.Heatmap(
            z=e.values, x=e.columns, y=e.index, colorscale="Viridis", colorbar={"title": "tokens"}
        )
    )
    fs = go.Figure(
        go.Heatmap(
            z=s.values, x=s.columns, y=s.index, colorscale="RdBu", zmid=1.0, colorbar={"title": "×"}
        )
    )
    x = "acceptance α (per position, i.i.d.)"
    return (
        _titled(fe, f"Expected tokens per target step E, {title}", x, "draft tokens K"),
        _titled(fs, f"Batch-1 speedup, {title}", x, "draft tokens K"),
    )
