"""A fleet run's timelines as one self-contained HTML page (plotly, its library inlined so the
page opens offline)."""

from __future__ import annotations

import html
from typing import Any

import pandas as pd

PANELS = (
    ("arrivals", "arrivals per window"),
    ("queue_depth", "waiting for a first token"),
    ("running_batch", "running batch"),
    ("active_k", "active draft length"),
    ("tokens_s", "output tokens/s"),
    ("utilisation", "busy share"),
    ("kv_occupancy", "share of KV blocks in use"),
    ("batch_occupancy", "share of batch slots (max_num_seqs) in use"),
)


def timeline_figure(series: pd.DataFrame) -> Any:
    """The fleet's and each replica's time series, one panel per measure (replica -1 is the
    fleet: summed counts, mean draft length, busy share and occupancies)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=len(PANELS), cols=1, shared_xaxes=True, subplot_titles=[t for _, t in PANELS]
    )
    for replica, part in series.groupby("replica", sort=True):
        name = "fleet" if replica == -1 else f"replica {replica}"
        for row, (column, _) in enumerate(PANELS, start=1):
            fig.add_trace(
                go.Scatter(
                    x=part["time_s"],
                    y=part[column],
                    name=name,
                    legendgroup=name,
                    showlegend=row == 1,
                    line={"width": 2.5 if replica == -1 else 1},
                    visible=True if replica == -1 else "legendonly",
                ),
                row=row,
                col=1,
            )
    fig.update_xaxes(title_text="time (s)", row=len(PANELS), col=1)
    fig.update_layout(height=220 * len(PANELS), margin={"t": 40})
    return fig


def report_html(series: pd.DataFrame, summary: dict[str, Any], title: str) -> str:
    """The page: the title, the summary as a table, the timelines."""
    rows = "".join(
        f"<tr><td>{html.escape(str(k))}</td><td>{_cell(v)}</td></tr>" for k, v in summary.items()
    )
    figure = timeline_figure(series).to_html(
        full_html=False, include_plotlyjs=True, div_id="simspec-fleet-timeline"
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title></head><body>"
        f"<h2>{html.escape(title)}</h2><table>{rows}</table>{figure}</body></html>\n"
    )


def _cell(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else html.escape(str(v))
