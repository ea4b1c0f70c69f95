"""The what-if's results: its run (shown by stage as it goes, kept per inputs for every rerun),
the chart tabs and the table with its download."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import streamlit as st

from simspec.studies.capacity import Slo
from simspec.studies.metrics import unserved_text
from simspec.ui import figures, runs
from simspec.ui.downloads import results_csv
from simspec.ui.inputs import ExplorerInputs, engine_caveats, markdown_text, provenance_lines
from simspec.ui.pages.progress import keep_answer, stages

TABS = ["Speedup", "Throughput vs TPOT", "Latency", "Time per step", "Acceptance", "Table"]


def simulate(inputs: ExplorerInputs) -> dict[str, pd.DataFrame]:
    """The what-if, kept by its inputs; while it runs, a box names each run as it finishes
    (baseline, method i of n, at which batch size) with a bar of runs done."""

    def compute() -> dict[str, pd.DataFrame]:
        with stages("Simulating plain decoding and each method at each load") as progress:
            return runs.run(inputs, replace(runs.RUNS, progress=progress))

    return keep_answer("what-if", inputs.model_dump_json(), compute)


def show(tabs: list, res: dict[str, pd.DataFrame], inputs: ExplorerInputs, slo: Slo) -> None:
    """Fill the result tabs (one per name in :data:`TABS`, in order)."""
    summary = res["summary"]
    with tabs[0]:
        speedup(summary, inputs)
    with tabs[1]:
        st.plotly_chart(figures.throughput_tpot_figure(summary, inputs), width="stretch")
    with tabs[2]:
        latency(summary, inputs, slo)
    with tabs[3]:
        st.plotly_chart(figures.breakdown_figure(res["breakdown"], inputs), width="stretch")
    with tabs[4]:
        st.plotly_chart(figures.acceptance_figure(res["acceptance"], inputs), width="stretch")
    with tabs[5]:
        st.dataframe(summary, width="stretch")
        st.download_button(
            "Download CSV", results_csv(summary, inputs), "simspec-results.csv", "text/csv"
        )


def best_caption(spec: pd.DataFrame, column: str, what: str, unit: str) -> str:
    """The best speculative point in words, and none called best where no run beats plain
    decoding at the two decimals shown (QA: "Best: ngram (K=3): 1.00×" where nothing drafted
    and EAGLE-3 ran at 0.96×)."""
    best = spec.loc[spec[column].idxmax()]
    where = f"{best.method} (K={best.k}) at {best.load:g} {unit}: {best[column]:.2f}×"
    below = "Below the dashed line speculation is worse than plain decoding"
    if round(float(best[column]), 2) <= 1.0:
        none = f"No method is faster than plain decoding on {what} here"
        return f"{none} (the highest: {where}). {below}"
    return f"Best: {where} on {what}. {below}"


def speedup(summary: pd.DataFrame, inputs: ExplorerInputs) -> None:
    """The headline chart, its best point in words, and a warning for runs that fall behind."""
    st.plotly_chart(figures.speedup_figure(summary, inputs), width="stretch")
    column, _, _ = figures.headline(inputs)
    spec = summary[summary.method != "autoregressive"]
    what = "throughput" if column == "speedup" else "TPOT p50"
    bars = (
        "; error bars are 95 % intervals (README: Measurement)"
        if column == "speedup" and inputs.arrival == "closed"
        else ""
    )
    if spec[column].notna().any():
        st.caption(best_caption(spec, column, what, figures.load_unit(inputs)) + bars + ".")
    else:  # one-token outputs have no TPOT: nothing to rank on
        st.caption(f"No run has a {what} to compare (outputs of one token have no TPOT).")
    for caveat in engine_caveats(inputs):
        st.caption(caveat)
    for line in provenance_lines(inputs):  # what the numbers rest on, as the CLI says it
        st.caption(markdown_text(line))
    unserved = summary[summary.unfinishable > 0] if "unfinishable" in summary else summary[:0]
    if len(unserved):  # as the sweep's note says it (QA: the page said nothing)
        share = (unserved.unfinishable / unserved.measured_requests).max()
        st.warning(unserved_text(len(unserved), share) + ".")
    unstable = summary[summary.stable == 0]
    if len(unstable):
        st.warning(
            f"{len(unstable)} run(s) do not keep up with the arrival rate (the waiting "
            "queue grows, or fewer tokens are served than arrive, over the window): their "
            "latencies grow with run length."
        )
    if wide := runs.wide_interval_text(summary):
        st.warning(wide)


def latency(summary: pd.DataFrame, inputs: ExplorerInputs, slo: Slo) -> None:
    """TPOT and TTFT against the load, and how many runs meet both SLOs."""
    st.plotly_chart(figures.latency_figure(summary, inputs), width="stretch")
    st.plotly_chart(figures.ttft_figure(summary, inputs), width="stretch")
    # one-token outputs have no TPOT, so none to miss (as the fleet's SLO count reads it)
    tpot_ok = (summary.tpot_ms_p99 <= slo.tpot_ms) | summary.tpot_ms_p99.isna()
    ok = summary[(summary.ttft_ms_p99 <= slo.ttft_ms) & tpot_ok]
    st.caption(
        f"{len(ok)} of {len(summary)} runs meet TTFT p99 ≤ {slo.ttft_ms:g} ms and "
        f"TPOT p99 ≤ {slo.tpot_ms:g} ms."
    )
