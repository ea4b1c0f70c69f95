"""The "Fleet" tab: a production trace replayed on N replicas of the sidebar's deployment
behind a router (:mod:`simspec.ui.fleet`). Its own widgets pick the trace, the window, the
fleet and the method; the deployment, method settings and SLOs are the page's. The replay is
kept in the session, keyed by everything it came from."""

from __future__ import annotations

import streamlit as st
from pydantic import ValidationError

from simspec.config import ROUTERS
from simspec.errors import InputError, ScenarioError, validation_message
from simspec.studies.capacity import Slo
from simspec.ui import fleet, uploads
from simspec.ui.inputs import ExplorerInputs
from simspec.ui.pages.kept import kept


def fleet_inputs(inputs: ExplorerInputs, slo: Slo) -> fleet.FleetInputs | None:
    """The Fleet view's own widgets; None until an uploaded trace is given."""
    d = fleet.FleetInputs()
    left, mid, right = st.columns(3)
    with left:
        choices = fleet.trace_choices()
        # the CLI's and README's default trace, not the alphabet's first (QA: azure-code)
        first = choices.index(d.trace) if d.trace in choices else 0
        choice = st.selectbox("Arrival trace", choices, index=first)
        trace = choice
        if choice == "upload":
            up = st.file_uploader(
                "Arrival trace (CSV or Parquet: TIMESTAMP, ContextTokens, GeneratedTokens, or "
                "arrival_s, prompt_len, output_len[, dataset|domain])",
                type=["csv", "parquet"],
                max_upload_size=uploads.MAX_UPLOAD_MB,
            )
            if up is None:
                st.info("Upload an arrival trace, or pick a packaged one.")
                return None
            trace = uploads.save_arrival_trace_upload(up.getvalue(), up.name)
        scale = st.number_input(
            "Rate scale (× the trace's rate, bursts kept)", 0.01, 1000.0, **kept("fleet_scale", 1.0)
        )
        start = st.number_input(
            "Window start (s of the trace)", 0.0, 1e6, **kept("fleet_start", d.start_s)
        )
        end = st.number_input(
            "Window end (s; 0 = to the end)", 0.0, 1e6, **kept("fleet_end", d.end_s or 0.0)
        )
    with mid:
        replicas = st.number_input(
            "Replicas", 1, fleet.MAX_PAGE_REPLICAS, **kept("fleet_replicas", d.replicas)
        )
        prefill = st.number_input(
            "Prefill instances (0: none; else the replicas decode only)",
            0,
            fleet.MAX_PAGE_REPLICAS,
            **kept("fleet_prefill", d.prefill_replicas),
            help="prefill/decode disaggregation, as simspec fleet --prefill-replicas: the KV "
            "crosses at 400 Gb/s per GPU (README: Layouts)",
        )
        router = st.selectbox(
            "Router", list(ROUTERS), **kept("fleet_router", list(ROUTERS).index(d.router), "index")
        )
        method = st.selectbox(
            "Method (the page's K and acceptance)", ["autoregressive", *inputs.methods]
        )
    with right:
        goal = st.number_input(
            "Attainment goal", 0.01, 1.0, **kept("fleet_goal", d.attainment_goal)
        )
        window_s = st.number_input(
            "Timeline window (s)", 1.0, 3600.0, **kept("fleet_window", d.window_s)
        )
        st.caption(
            f"SLOs (sidebar): TTFT ≤ {slo.ttft_ms:g} ms, TPOT ≤ {slo.tpot_ms:g} ms per request"
        )
    return fleet.FleetInputs(
        trace=trace,
        rate_scale=scale,
        start_s=start,
        end_s=end or None,
        replicas=int(replicas),
        prefill_replicas=int(prefill),
        router=router,
        method=method,
        slo_ttft_ms=slo.ttft_ms,
        slo_tpot_ms=slo.tpot_ms,
        attainment_goal=goal,
        window_s=window_s,
    )


def fleet_view(inputs: ExplorerInputs, slo: Slo) -> None:
    """The widgets, the replay button, and the kept replay if it is of these inputs. A bad
    fleet input is a message in this tab: the other tabs stay."""
    st.caption(
        "Replays a production trace on N replicas of the sidebar's deployment behind a router. "
        "The default window, the first 10 minutes, answers in a few seconds; the whole hour "
        "takes about six times as long. Every request of the window counts (measured whole)."
    )
    try:
        f = fleet_inputs(inputs, slo)
        if f is None:
            return
        key = ("fleet", inputs.model_dump_json(), f.model_dump_json())
        if st.button("Replay the trace on the fleet"):
            with st.spinner("replaying…"):
                st.session_state["fleet"] = (key, fleet.run_view(inputs, f))
    except (InputError, ScenarioError) as exc:
        st.error(str(exc))
        return
    except ValidationError as exc:
        st.error(validation_message(exc))
        return
    kept = st.session_state.get("fleet")
    if kept is None or kept[0] != key:
        return
    res = kept[1]
    row = res["row"]
    st.markdown(
        f"**{row['slo_attainment']:.1%}** of {row['requests']:,} requests within both SLOs "
        f"(goal {f.attainment_goal:.0%}); goodput {row['goodput_req_s']:.2f} requests/s; "
        f"TTFT p99 {row['ttft_ms_p99']:.0f} ms, TPOT p99 {row['tpot_ms_p99']:.1f} ms."
    )
    left, right = st.columns(2)
    with left:
        st.dataframe(res["summary"], hide_index=True, width="stretch")
    with right:
        st.dataframe(res["utilisation"], hide_index=True, width="stretch")
    st.plotly_chart(fleet.attainment_figure(res, inputs, f), width="stretch")
    st.plotly_chart(fleet.timeline(res, inputs, f), width="stretch")
    st.caption(
        "Intervals: 95 %, sectioning over arrival order. Timelines: replica -1 is the fleet."
    )
    st.download_button(
        "Download per-request CSV",
        fleet.requests_csv(res["requests"], inputs, f),
        "fleet-requests.csv",
        "text/csv",
    )
