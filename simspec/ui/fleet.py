"""The explorer's Fleet view: a production trace replayed on N replicas behind a router,
against per-request SLOs. Validated inputs in, frames and titled figures out; the page
(:mod:`simspec.ui.pages.fleet`) only gathers the inputs and shows what :func:`run_view` returns.

The replicas run the page's deployment (model, GPU, TP, engine, sampling, seed) and one method:
plain decoding or a speculative method in its preset, with the page's K, tree budget and
acceptance. Acceptance is drawn from the trace's own domain (azure-conv: sharegpt, azure-code:
instructcoder); an uploaded trace that names no dataset or domain uses the page's domain.

The default window is the first 10 minutes of the trace, so that a what-if answers while one
waits at the page. The run is measured whole (README "Measurement"): every request arriving in
the window counts.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from simspec.catalog.arrival_traces import (
    acceptance_dataset,
    load_arrival_trace,
    packaged_arrival_traces,
)
from simspec.config import (
    DEFAULT_SLO_TPOT_MS,
    DEFAULT_SLO_TTFT_MS,
    ROUTERS,
    FleetConfig,
    Scenario,
    WorkloadConfig,
)
from simspec.engine.speculators import SPECULATORS
from simspec.errors import InputError
from simspec.outputs import CLOCK_COLUMNS, csv_text
from simspec.studies import fleet as study
from simspec.studies.fleet_report import timeline_figure
from simspec.studies.provenance import provenance
from simspec.studies.runs.job import check_runnable
from simspec.ui.downloads import acceptance_given
from simspec.ui.figures import scenario_label
from simspec.ui.inputs import (
    ExplorerInputs,
    async_label,
    deployment_for,
    method_for,
    serving_columns,
)

# the page caps a fleet well below config.MAX_REPLICAS: it replays the whole fleet in its own
# process while the user waits, and the replay's time grows with the replicas
MAX_PAGE_REPLICAS = 64
DEFAULT_WINDOW = (0.0, 600.0)  # the first 10 minutes of the trace
TRACE_FIELD = "fleet trace"


class FleetInputs(BaseModel):
    """What the Fleet view sets, beside the page's deployment and method settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    trace: str = Field(default="azure-conv", description="packaged name or an upload's path")
    rate_scale: float = Field(default=1.0, gt=0.0, le=1000.0)
    start_s: float = Field(default=DEFAULT_WINDOW[0], ge=0.0)
    end_s: float | None = Field(default=DEFAULT_WINDOW[1], gt=0.0, description="None: to the end")
    replicas: int = Field(default=2, ge=1, le=MAX_PAGE_REPLICAS)
    # prefill instances in front of the replicas, which then decode only (0: none)
    prefill_replicas: int = Field(default=0, ge=0, le=MAX_PAGE_REPLICAS)
    router: str = "least_outstanding"
    method: str = "autoregressive"
    slo_ttft_ms: float = Field(default=DEFAULT_SLO_TTFT_MS, gt=0.0)
    slo_tpot_ms: float = Field(default=DEFAULT_SLO_TPOT_MS, gt=0.0)
    attainment_goal: float = Field(default=0.99, gt=0.0, le=1.0)
    window_s: float = Field(default=10.0, gt=0.0, le=3600.0, description="timeline bin (s)")

    @field_validator("router")
    @classmethod
    def _router(cls, v: str) -> str:
        if v not in ROUTERS:
            raise ValueError(f"choose {', '.join(ROUTERS)}")
        return v

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        if v not in SPECULATORS:
            raise ValueError(f"unknown method {v!r}")
        return v

    @model_validator(mode="after")
    def _window(self) -> FleetInputs:
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"the window's end ({self.end_s:g} s) must be after its start")
        return self


def trace_choices() -> list[str]:
    return [*packaged_arrival_traces(), "upload"]


def dataset_for(page: ExplorerInputs, f: FleetInputs) -> str:
    """The acceptance dataset of the replay: the trace's own domain if it names one, else the
    page's domain."""
    trace = load_arrival_trace(f.trace, TRACE_FIELD)
    return acceptance_dataset(trace, None if trace.dataset else page.dataset)


def scenario_for(page: ExplorerInputs, f: FleetInputs) -> Scenario:
    """One replica: the page's deployment replaying the trace window with the chosen method."""
    wl = WorkloadConfig(
        arrival="replay",
        arrival_trace=f.trace,
        trace_start_s=f.start_s or None,
        trace_end_s=f.end_s,
        rate_scale=None if f.rate_scale == 1.0 else f.rate_scale,
    )
    own = page.model_copy(update={"dataset": dataset_for(page, f)})
    common = deployment_for(page).model_dump(exclude={"workload"})
    return Scenario(**common, workload=wl, method=method_for(own, f.method))


def fleet_config(page: ExplorerInputs, f: FleetInputs) -> FleetConfig:
    sc = scenario_for(page, f)
    check_runnable(sc)
    if f.prefill_replicas:  # the CLI's --prefill-replicas, the KV link at its defaults
        try:
            return study.disaggregated_fleet(sc, f.replicas, f.router, f.prefill_replicas, {})
        except InputError as exc:  # by the widget's name (QA: "prefill_replicas: ...")
            raise InputError("Prefill instances", exc.message) from None
    return FleetConfig.uniform(sc, f.replicas, f.router)


def attainment_by_window(table: pd.DataFrame, window_s: float) -> pd.DataFrame:
    """Per window of arrival time: requests arriving, and the share of them meeting both SLOs
    (a burst shows as a dip)."""
    win = (table["arrival_s"] // window_s).astype(int)
    grouped = table.groupby(win)["met_slo"]
    out = pd.DataFrame({"requests": grouped.size(), "attainment": grouped.mean()})
    out.index = out.index * window_s
    return out.rename_axis("time_s").reset_index()


def run_view(page: ExplorerInputs, f: FleetInputs) -> dict[str, Any]:
    """The fleet's run, in this process: ``summary`` (measure, value, interval), ``row`` (the
    summary as a dict), ``utilisation`` (per replica), ``requests`` (per request, with
    ``met_slo``), ``timeline`` (per window, fleet = replica -1), ``attainment`` (per window)."""
    cfg = fleet_config(page, f)
    slo = study.FleetSlo(f.slo_ttft_ms, f.slo_tpot_ms)
    run = study.run_fleet(cfg, window_s=f.window_s)
    table = study.per_request(run, slo)
    row = study.summarize_fleet(run, slo, table)
    return {
        "summary": study.summary_table(row),
        "row": row,
        "utilisation": study.utilisation(run),
        "requests": table,
        "timeline": study.timeline(run),
        "attainment": attainment_by_window(table, f.window_s),
    }


def label(page: ExplorerInputs, f: FleetInputs) -> str:
    """What the fleet is, for titles: replicas, router, method, trace and window."""
    trace = f.trace if f.trace in packaged_arrival_traces() else "uploaded trace"
    end = "end" if f.end_s is None else f"{f.end_s:g}"
    scale = "" if f.rate_scale == 1.0 else f" at {f.rate_scale:g}x"
    count = f"{f.replicas} replicas"
    if f.prefill_replicas:
        count = f"{f.prefill_replicas} prefill + {f.replicas} decode instances"
    return f"{count}, {f.router}, {f.method} · {trace} [{f.start_s:g}, {end}) s{scale}"


def timeline(frames: dict[str, Any], page: ExplorerInputs, f: FleetInputs) -> go.Figure:
    fig = timeline_figure(frames["timeline"])
    fig.update_layout(
        title={"text": f"Fleet timelines<br><sup>{label(page, f)} · {scenario_label(page)}</sup>"},
        margin={"t": 90},
    )
    return fig


def attainment_figure(frames: dict[str, Any], page: ExplorerInputs, f: FleetInputs) -> go.Figure:
    """Share of requests meeting both SLOs per window of arrivals (line), the requests that
    arrived in it (bars, right axis), and the goal (dashed)."""
    a = frames["attainment"]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=a.time_s, y=a.requests, name="requests arriving", yaxis="y2",
            marker={"color": "#c7c7c7"}, opacity=0.5,
        )
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(x=a.time_s, y=a.attainment, mode="lines+markers", name="SLO attainment")
    )
    fig.add_hline(y=f.attainment_goal, line_dash="dash", annotation_text="goal")
    fig.update_layout(
        title={
            "text": f"Requests within TTFT ≤ {f.slo_ttft_ms:g} ms and TPOT ≤ "
            f"{f.slo_tpot_ms:g} ms, per {f.window_s:g} s of arrivals<br><sup>"
            f"{label(page, f)} · {scenario_label(page)}</sup>"
        },
        xaxis_title="arrival time (s)",
        yaxis={"title": "share meeting both SLOs", "range": [0, 1.05]},
        yaxis2={"title": "requests", "overlaying": "y", "side": "right", "showgrid": False},
        height=440,
        margin={"t": 90},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def fleet_columns(page: ExplorerInputs, f: FleetInputs) -> dict[str, object]:
    """The fleet's scenario, as leading CSV columns: its acceptance as given (alpha or tau
    and spread), the dataset it rests on (the trace's domain), sampling and each method's
    provenance, so the file read on its own says what ran (QA)."""
    fleet_page = page.model_copy(update={"dataset": dataset_for(page, f)})
    m = method_for(fleet_page, f.method)
    origin = provenance(deployment_for(fleet_page), m)
    return {
        "model": page.model_name or page.model,
        "gpu": page.gpu,
        "tp": page.tp,
        "engine": page.engine,
        "method": f.method,
        "k": m.k,
        "tree": m.tree or "",
        "tree_nodes": m.tree_nodes or "",
        "acceptance": page.acceptance,
        **acceptance_given(page),
        "acceptance_dataset": fleet_page.dataset,
        "acceptance_source": origin["acceptance_source"],
        "engine_profile": origin["engine_profile"],
        # the results, plan and schedule CSVs carry it (QA: this one did not)
        "hardware_profile": origin["hardware_profile"],
        "temperature": page.temperature,
        "top_p": page.top_p,
        "trace": f.trace if f.trace in packaged_arrival_traces() else "upload",
        "trace_start_s": f.start_s,
        "trace_end_s": f.end_s if f.end_s is not None else np.nan,
        "rate_scale": f.rate_scale,
        "replicas": f.replicas,
        "prefill_replicas": f.prefill_replicas,
        "router": f.router,
        "slo_ttft_ms": f.slo_ttft_ms,
        "slo_tpot_ms": f.slo_tpot_ms,
        "seed": page.seed,
        # it changes the fleet's steps as it does the what-if's (QA: the CSV did not say)
        "async_scheduling": async_label(page),
        **serving_columns(page),
        # the replicas behind prefill instances decode only (QA: the column said null)
        **({"disaggregation_mode": "decode"} if f.prefill_replicas else {}),
    }


def requests_csv(table: pd.DataFrame, page: ExplorerInputs, f: FleetInputs) -> str:
    out = table.copy()
    for i, (key, value) in enumerate(fleet_columns(page, f).items()):
        out.insert(i, key, value)
    # clock times in full, as simspec fleet --out writes them (QA: 3456.789123 s read 3456.79)
    return csv_text(out, CLOCK_COLUMNS)
