"""A self-contained plotly page for ``simspec compare``: measured and predicted of each metric
by the runs' load (concurrency of a closed loop, else request rate), and the table."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from simspec.outputs import write_text_atomic
from simspec.studies.bench.compare import Plan
from simspec.studies.bench.measured import ordered


def write_compare_report(frame: pd.DataFrame, plans: list[Plan], out: Path) -> None:
    """Write ``out`` whole (plotly.js inlined: opens offline)."""
    notes = "".join(
        f"<li><b>{html.escape(p.run.name)}</b>: {html.escape('; '.join(p.notes))}</li>"
        for p in plans
    )
    body = [
        "<h1>simspec compare</h1>",
        f"<p>{len(plans)} measured run(s), each simulated with its own workload.</p>",
        f"<ul>{notes}</ul>",
        by_load(frame, plans).to_html(
            full_html=False, include_plotlyjs=True, div_id="simspec-compare"
        ),
        frame.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep=""),
    ]
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>simspec compare</title>"
        "</head><body style='font-family:sans-serif'>" + "\n".join(body) + "</body></html>"
    )
    write_text_atomic(out, page)


def by_load(frame: pd.DataFrame, plans: list[Plan]) -> go.Figure:
    """One panel per metric: measured (solid) and predicted (dashed) against the load, closed
    loops and request rates as separate curves."""
    load = {p.run.name: p.run.load for p in plans}
    closed = {p.run.name: p.run.closed for p in plans}
    metrics = ordered(set(frame["metric"])) or ["mean_tpot_ms"]
    fig = make_subplots(
        rows=len(metrics),
        cols=1,
        subplot_titles=metrics,
        vertical_spacing=0.3 / max(len(metrics), 1),
    )
    data = frame.assign(x=frame["run"].map(load), closed=frame["run"].map(closed)).sort_values("x")
    for i, metric in enumerate(metrics, start=1):
        rows = data[data["metric"] == metric]
        for is_closed, part in rows.groupby("closed"):
            kind = "concurrency" if is_closed else "request rate"
            for column, dash in (("measured", "solid"), ("predicted", "dash")):
                fig.add_trace(
                    go.Scatter(
                        x=part["x"],
                        y=part[column],
                        mode="lines+markers",
                        name=f"{column} ({kind})",
                        legendgroup=f"{column}{kind}",
                        showlegend=i == 1,
                        line={"dash": dash},
                        text=part["run"],
                        hovertemplate="%{text}<br>%{x:g}: %{y:.4g}<extra>" + column + "</extra>",
                    ),
                    row=i,
                    col=1,
                )
        fig.update_yaxes(title_text=metric, rangemode="tozero", row=i, col=1)
        fig.update_xaxes(title_text=_x_title(data), row=i, col=1)
    fig.update_layout(height=320 * len(metrics), title="Measured (solid) and predicted (dashed)")
    return fig


def _x_title(data: pd.DataFrame) -> str:
    kinds = set(data["closed"])
    if kinds == {True}:
        return "concurrency"
    if kinds == {False}:
        return "request rate (req/s)"
    return "concurrency (closed loop) or request rate (req/s)"
