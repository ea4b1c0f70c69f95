"""Every figure of the explorer, from the result frames (:mod:`simspec.ui.runs`) and the
page's inputs: plotly, one colour per method in every chart, and each title ending with the
model, GPU, TP and engine it came from, so a saved chart says what it shows.
"""

from __future__ import annotations

import html

import pandas as pd
import plotly.graph_objects as go

from simspec.engine.speculators import SPECULATORS
from simspec.ui.inputs import ExplorerInputs


def load_label(inp: ExplorerInputs) -> str:
    return "concurrent requests" if inp.arrival == "closed" else "arrival rate (requests/s)"


def load_unit(inp: ExplorerInputs) -> str:
    """A load's unit after its number ("8 concurrent", "4 req/s")."""
    return "concurrent" if inp.arrival == "closed" else "req/s"


def scenario_label(inp: ExplorerInputs) -> str:
    """Model, GPU, TP (and EP, DP), engine, and a precision or KV-cache dtype the page sets,
    as every title ends (an upload by its model's name). Plotly titles read a subset of HTML
    (``<a href>`` among it), so the name's ``<``, ``>`` and ``&`` are written as entities: a
    config's name is shown, never followed."""
    model = html.escape(inp.model_name or inp.model, quote=False)
    label = f"{model} · {inp.gpu} · TP {inp.tp}"
    label += f" EP {inp.ep}" if inp.ep > 1 else ""
    label += f" DP {inp.dp}" if inp.dp > 1 else ""
    label += f" · {inp.engine}"
    if inp.precision is not None:
        label += f" · {inp.precision} weights"
    if inp.kv_cache_dtype != "auto":
        label += f" · {inp.kv_cache_dtype} KV"
    if inp.async_scheduling is not None:  # the page set it: the engine's default otherwise
        label += " · async scheduling" if inp.async_scheduling else " · sync scheduling"
    return label


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
        "output throughput (tokens/s per replica)",  # a replica's tp GPUs together (QA)
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
