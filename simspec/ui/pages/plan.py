"""The "Plan & schedule" tab: the capacity plan for a target rate, and the speculation schedule
(K, or a tree budget, per concurrency) as vLLM's ``--speculative-config``.

Two buttons, two results: each is kept in the session, keyed by everything it was computed
from, so pressing one button does not wipe the other's table, and a changed input hides a
result that no longer describes the page. Each answer is also kept across reruns and sessions
by its inputs (:func:`~simspec.ui.pages.progress.keep_answer`): asking again costs nothing."""

from __future__ import annotations

import json
from dataclasses import replace

import streamlit as st

from simspec.config import DEFAULT_PRECISION_TARGET, MAX_PRECISION_TARGET, check_precision_target
from simspec.engine import window
from simspec.studies import capacity
from simspec.studies.capacity import Slo
from simspec.studies.metrics import UNSERVED_WHY
from simspec.studies.schedule import export
from simspec.ui import runs
from simspec.ui.downloads import plan_csv, schedule_csv
from simspec.ui.inputs import ExplorerInputs
from simspec.ui.pages.kept import kept as kept_widget
from simspec.ui.pages.progress import keep_answer, stages


def plan_and_schedule(inputs: ExplorerInputs, slo: Slo) -> None:
    left, right = st.columns(2)
    with left:
        capacity_plan(inputs, slo)
    with right:
        speculation_schedule(inputs)


def capacity_plan(inputs: ExplorerInputs, slo: Slo) -> None:
    st.subheader("Capacity plan")
    qps = st.number_input("Target requests/s", 0.1, 100000.0, **kept_widget("plan_qps", 20.0))
    price = st.number_input(
        "GPU-hour price ($)", 0.0, 100.0, **kept_widget("plan_price", capacity.GPU_HOUR_PRICE)
    )
    key = ("plan", inputs.model_dump_json(), qps, price, slo)
    if st.button("Compute plan (bisection on the arrival rate, ~20 s per method)"):
        with st.spinner("planning…"):
            text = json.dumps(
                [inputs.model_dump(mode="json"), qps, price, slo.ttft_ms, slo.tpot_ms]
            )
            frame = keep_answer("plan", text, lambda: runs.plan(inputs, qps, slo, price))
            st.session_state["plan"] = (key, frame)
    kept = st.session_state.get("plan")
    if kept is None or kept[0] != key:
        return
    frame = kept[1]
    st.dataframe(frame, hide_index=True, width="stretch")
    # the requests the deployment never serves, as the CLI's notes say them (QA: the tab showed
    # "unfinishable" with no word)
    if "limited_by" in frame and (frame["limited_by"] == "unfinishable").any():
        st.warning(
            "unfinishable: more of the workload's requests than the SLO percentile leaves out "
            f"are {UNSERVED_WHY}; they never get a first token, so no rate meets the SLO: raise "
            "the max model length, give the GPU more room, or shorten the workload."
        )
    lost = frame.get("unserved_at_max")
    if lost is not None and (lost.fillna(0) > 0).any():
        st.info(
            f"up to {float(lost.max()):.1%} of the requests at a method's highest rate are "
            f"never served ({UNSERVED_WHY}): the rate counts them as arrivals, the latencies, "
            "tokens and cost are over the rest (unserved_at_max)."
        )
    st.download_button(
        "Download plan CSV",
        plan_csv(frame, inputs, qps, slo, price, capacity.PLAN_DURATION_S),
        "plan.csv",
        "text/csv",
    )


def speculation_schedule(inputs: ExplorerInputs) -> None:
    st.subheader("Speculation schedule (vLLM Dynamic SD)")
    method = st.selectbox("Method", inputs.methods)
    target = st.number_input(
        "Precision target (± share of each speedup; 0: the sidebar's requests and turnovers)",
        0.0,
        MAX_PRECISION_TARGET,
        step=0.005,
        format="%.3f",
        help="as simspec recommend --precision-target: every K of a concurrency runs until "
        "its speedup's 95 % interval is within this share either side, from "
        f"{window.FLOOR_TURNOVERS} turnovers; 0 runs the sidebar's fixed length instead",
        **kept_widget("schedule_target", DEFAULT_PRECISION_TARGET),
    )
    try:
        check_precision_target(target)
    except ValueError as e:
        st.error(f"Precision target: {e}")
        return
    key = ("schedule", inputs.model_dump_json(), method, target)
    if st.button("Recommend K per concurrency"):

        def compute() -> runs.Schedule:
            title = "Simulating every K at every concurrency, then the crossovers"
            with stages(title) as progress:
                return runs.schedule(inputs, method, replace(runs.RUNS, progress=progress), target)

        text = json.dumps([inputs.model_dump(mode="json"), method, target])
        st.session_state["schedule"] = (key, keep_answer("schedule", text, compute))
    kept = st.session_state.get("schedule")
    if kept is None or kept[0] != key:
        return
    sched: runs.Schedule = kept[1]
    rec = sched.recommended
    st.dataframe(rec.table, width="stretch")
    st.caption("Bands, and how far each band's setting is from the fastest at its edges (%)")
    st.dataframe(rec.band_table, hide_index=True, width="stretch")
    st.download_button(
        "Download schedule CSV",
        schedule_csv(rec.table, inputs, method, target),
        "schedule.csv",
        "text/csv",
    )
    if sched.knob == "tree_nodes":  # a budget per band: simspec's tree_schedule, not vLLM's
        st.code(f"tree_schedule: {rec.bands}")
        return
    cfg = export.speculative_config(sched.method, rec.bands)
    st.code(f"num_speculative_tokens_per_batch_size: {rec.bands}")
    if cfg is not None:
        text = export.speculative_config_json(cfg)
        st.code(f"--speculative-config '{text}'")
        st.download_button("Download JSON", text, "speculative-config.json", "application/json")
