"""A self-contained plotly page: predicted against measured per series, and the errors."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from simspec.outputs import write_text_atomic
from simspec.studies.validation.summary import PERCENT_COLUMNS, mape_line, percent_table


def write_report(
    pred: pd.DataFrame, table: pd.DataFrame, out: Path, csv_path: Path | None = None
) -> None:
    """Write ``out`` whole (plotly.js inlined: opens offline). Errors are in percent, as
    the CLI prints them: the per-series table of :func:`percent_table` and the histogram.
    ``csv_path``: the predictions file beside it, named where the page sends the reader."""
    ok = pred[pred["status"] == "ok"].copy()
    ok["measured"] = pd.to_numeric(ok["measured_value"], errors="coerce")
    fig = predicted_vs_measured(ok)
    hist = go.Figure(go.Histogram(x=100 * ok["rel_error"].astype(float), nbinsx=40))
    hist.update_layout(
        title="Relative error of every predicted row",
        xaxis_title="(predicted - measured) / measured, %",
        yaxis_title="rows",
    )
    body = [
        "<h1>simspec validate</h1>",
        f"<p>{len(pred)} rows: {len(ok)} predicted, {len(pred) - len(ok)} skipped "
        f"(reasons in the skip_reason column of "
        f"{html.escape(str(csv_path)) if csv_path else 'the predictions CSV'}).</p>",
        f"<p>{html.escape(mape_line(pred, table))}.</p>",
        series_html(table),
        fig.to_html(full_html=False, include_plotlyjs=True, div_id="simspec-validation"),
        hist.to_html(full_html=False, include_plotlyjs=False, div_id="simspec-errors"),
    ]
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>simspec validate</title>"
        "</head><body style='font-family:sans-serif'>" + "\n".join(body) + "</body></html>"
    )
    write_text_atomic(out, page)


def series_html(table: pd.DataFrame) -> str:
    """The per-series table as HTML: errors in percent to one decimal, rho to two."""
    shown = percent_table(table)
    percent = dict.fromkeys(PERCENT_COLUMNS.values(), lambda v: f"{v:.1f}")
    return shown.to_html(
        index=False, formatters={**percent, "trend rho": lambda v: f"{v:.2f}"}, na_rep=""
    )


def predicted_vs_measured(ok: pd.DataFrame) -> go.Figure:
    """One panel per metric: predicted against measured, each series its own colour, the
    y = x line, and both axes on one fixed scale (:func:`panel_range`)."""
    metrics = sorted(ok["metric"].unique()) or ["speedup"]
    fig = make_subplots(
        rows=len(metrics),
        cols=1,
        subplot_titles=metrics,
        vertical_spacing=0.25 / max(len(metrics), 1),
    )
    for i, metric in enumerate(metrics, start=1):
        rows = ok[ok["metric"] == metric]
        for series, part in rows.groupby("series"):
            fig.add_trace(
                go.Scatter(
                    x=part["measured"],
                    y=part["predicted_value"],
                    mode="markers",
                    name=series,
                    legendgroup=series,
                    showlegend=i == 1 or series not in _first_series(ok, i),
                    text=part["case_id"],
                    hovertemplate="%{text}<br>measured %{x:.3g}"
                    "<br>predicted %{y:.3g}<extra>" + html.escape(series) + "</extra>",
                ),
                row=i,
                col=1,
            )
        if len(rows):
            lo = float(min(rows["measured"].min(), rows["predicted_value"].min()))
            hi = float(max(rows["measured"].max(), rows["predicted_value"].max()))
            fig.add_trace(
                go.Scatter(
                    x=[lo, hi],
                    y=[lo, hi],
                    mode="lines",
                    showlegend=False,
                    line={"dash": "dot", "color": "grey"},
                    hoverinfo="skip",
                ),
                row=i,
                col=1,
            )
        values = pd.concat([rows["measured"], rows["predicted_value"].astype(float)])
        scale = panel_range(values.to_numpy(dtype=float))
        fig.update_xaxes(title_text="measured", range=scale, row=i, col=1)
        fig.update_yaxes(title_text="predicted", range=scale, row=i, col=1)
    fig.update_layout(height=420 * len(metrics), title="Predicted vs measured (y = x dotted)")
    return fig


def panel_range(values: np.ndarray) -> list[float]:
    """An axis range that shows a miss at its true size: from 0 to 15 % past the largest value
    when all are positive (so 1.60 against 1.66 is two close points, not opposite corners, as
    autoscaling makes a panel of one or two points), else ±30 % of the largest magnitude
    around the values."""
    finite = values[np.isfinite(values)]
    if not len(finite):
        return [0.0, 1.0]
    lo, hi = float(finite.min()), float(finite.max())
    if lo >= 0:
        return [0.0, hi * 1.15 if hi > 0 else 1.0]
    pad = 0.3 * max(abs(lo), abs(hi))
    return [lo - pad, hi + pad]


def _first_series(ok: pd.DataFrame, row: int) -> set[str]:
    """Series already in the legend from an earlier subplot."""
    metrics = sorted(ok["metric"].unique())
    return set(ok[ok["metric"].isin(metrics[: row - 1])]["series"])
