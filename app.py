"""simspec what-if explorer: does speculative decoding pay for my model, GPU and traffic?

    streamlit run app.py

The page only gathers inputs and shows results; everything it computes lives in
simspec.ui and simspec.studies (capacity, schedule, analytic; tested there). Any
bad input becomes one message on the page, never a traceback.
"""

from __future__ import annotations

import streamlit as st
from pydantic import ValidationError

from simspec.catalog.hardware import engine_ids, gpu_ids, load_engine
from simspec.catalog.methods import method_info
from simspec.catalog.models import model_ids
from simspec.config import ROUTERS, Deployment
from simspec.engine.speculators import SPECULATORS
from simspec.errors import InputError, ScenarioError, validation_message
from simspec.studies import analytic, capacity
from simspec.studies.schedule import bands as bands_study
from simspec.studies.schedule import export, grid
from simspec.ui import downloads, figures, runs, uploads
from simspec.ui import fleet as fleet_ui
from simspec.ui import inputs as ui_inputs

SPEC_METHODS = [m for m in SPECULATORS if m != "autoregressive"]
DEFAULT = ui_inputs.ExplorerInputs()  # the CLI's defaults


@st.cache_data(show_spinner=False, max_entries=64)
def simulate_cached(inputs_json: str) -> dict:
    return runs.run(ui_inputs.ExplorerInputs.model_validate_json(inputs_json))


@st.cache_data(show_spinner=False, max_entries=16)
def analytic_cached(deploy_json: str, method: str, context: int):
    deploy = Deployment.model_validate_json(deploy_json)
    return analytic.analytic_table(analytic.batch1_costs(deploy, method, 8, context))


def problem(message: str) -> None:
    st.error(message)
    st.stop()


def sidebar() -> ui_inputs.ExplorerInputs:
    sb = st.sidebar
    sb.header("Deployment")
    model = sb.selectbox("Model", model_ids(), index=model_ids().index(DEFAULT.model))
    upload = sb.file_uploader(
        "…or a Hugging Face config.json", type=["json"], max_upload_size=uploads.MAX_UPLOAD_MB
    )
    model_name = None
    if upload is not None:
        model, shape, model_name = uploads.save_config_upload(upload.getvalue(), upload.name)
        sb.caption(
            f"uploaded {model_name}: hidden {shape.hidden_size}, {shape.num_hidden_layers} layers"
        )
    gpu = sb.selectbox("GPU", gpu_ids(), index=gpu_ids().index(DEFAULT.gpu))
    tp = sb.selectbox("Tensor parallel", [1, 2, 4, 8], index=[1, 2, 4, 8].index(DEFAULT.tp))
    engine = sb.selectbox("Engine profile", engine_ids(), index=engine_ids().index(DEFAULT.engine))

    sb.header("Speculation")
    offered, left_out = ui_inputs.offered_methods(model)
    methods = sb.multiselect(
        "Methods", offered, default=[m for m in DEFAULT.methods if m in offered]
    )
    for name, why in left_out.items():
        sb.caption(f"{name} not offered: {why}")
    k_mode = sb.radio("Draft length", ["method default", "set K"], horizontal=True)
    k = sb.slider("K (chain length or tree depth)", 1, 10, 3) if k_mode == "set K" else None
    nodes = sb.number_input("Tree budget (nodes; 0 = each tree method's default)", 0, 1024, 0)
    acceptance = sb.radio(
        "Acceptance",
        ["preset", "alpha", "tau", "trace"],
        horizontal=True,
        help="preset: published τ or measured traces for the domain; alpha or tau: your own "
        "measurement (τ = tokens per step, bonus included, at the K you measured it)",
    )
    names = list(ui_inputs.domains())
    dataset = sb.selectbox(
        "Domain (preset and request lengths)",
        names,
        index=list(ui_inputs.domains().values()).index(DEFAULT.dataset),
    )
    alpha, tau, tau_k, spread, trace_path = 0.7, DEFAULT.tau, None, 0.0, None
    if acceptance == "alpha":
        alpha = sb.slider("Mean acceptance α per position", 0.0, 1.0, 0.7, 0.01)
    elif acceptance == "tau":
        tau_k = int(sb.number_input("K τ was measured at", 1, 16, 3))
        tau = sb.number_input(
            "Measured τ (tokens per step)", 1.0, tau_k + 1.0, min(tau, tau_k + 1.0)
        )
    if acceptance in ("alpha", "tau"):
        spread = sb.slider("Spread across requests (logit std)", 0.0, 2.0, 0.0, 0.1)
    elif acceptance == "trace":
        trace = sb.file_uploader(
            "Acceptance trace (.jsonl, acc_len format)",
            type=["jsonl"],
            max_upload_size=uploads.MAX_UPLOAD_MB,
        )
        if trace is None:
            problem("Upload an acceptance trace, or choose preset, alpha or tau acceptance.")
        trace_path = uploads.save_trace_upload(trace.getvalue(), trace.name)
    temperature = sb.slider("Sampling temperature", 0.0, 2.0, DEFAULT.temperature, 0.05)
    top_p = sb.slider("top-p", 0.05, 1.0, DEFAULT.top_p, 0.05)

    sb.header("Workload")
    arrival = sb.radio(
        "Load",
        ["closed", "poisson"],
        horizontal=True,
        format_func=lambda a: {"closed": "concurrency", "poisson": "QPS"}[a],
    )
    default = ",".join(f"{v:g}" for v in DEFAULT.loads) if arrival == "closed" else "1,4,8,16"
    loads = ui_inputs.parse_loads(sb.text_input("Loads (comma list)", default), arrival)
    lengths = sb.radio("Request lengths", ["dataset", "fixed", "lognormal"], horizontal=True)
    prompt_mean, output_mean = 512.0, 256.0
    if lengths != "dataset":
        prompt_mean = sb.number_input("Prompt tokens (mean)", 1.0, 65536.0, 512.0)
        output_mean = sb.number_input("Output tokens (mean)", 1.0, 16384.0, 256.0)
    requests = sb.number_input(
        "Requests measured per run (more: tighter intervals, slower)",
        8,
        5000,
        DEFAULT.requests,
        help="measured in the steady window, after a warm-up; the CLI's default",
    )
    turnovers = sb.number_input(
        "Closed loop: batch turnovers measured (at least)",
        0,
        1024,
        DEFAULT.turnovers,
        help="a closed loop measures at least this many × concurrency requests (the CLI's "
        "default: 64, which holds a batch-64 speedup within ~0.3 % run to run); fewer answer "
        "faster with wider error bars",
    )
    return ui_inputs.ExplorerInputs(
        model=model,
        model_name=model_name,
        gpu=gpu,
        tp=tp,
        engine=engine,
        methods=methods or DEFAULT.methods,
        k=k,
        tree_nodes=int(nodes) or None,
        acceptance=acceptance,
        dataset=ui_inputs.domains()[dataset],
        alpha=alpha,
        tau=tau,
        tau_k=tau_k,
        spread=spread,
        trace_path=trace_path,
        arrival=arrival,
        loads=loads,
        lengths=lengths,
        prompt_mean=prompt_mean,
        output_mean=output_mean,
        requests=int(requests),
        turnovers=int(turnovers),
        temperature=temperature,
        top_p=top_p,
    )


def main() -> None:
    st.title("Does speculative decoding pay?")
    inputs = sidebar()
    with st.expander("Model", expanded=False):
        st.markdown("\n".join(f"- **{k}**: {v}" for k, v in ui_inputs.model_info(inputs)))
    try:
        ui_inputs.check_inputs(inputs)
    except (InputError, ScenarioError) as exc:
        problem(str(exc))
    slo_ttft = st.sidebar.number_input("SLO: TTFT p99 (ms)", 10.0, 60000.0, 2000.0)
    slo_tpot = st.sidebar.number_input("SLO: TPOT p99 (ms)", 1.0, 1000.0, 50.0)
    with st.spinner("simulating…"):
        res = simulate_cached(inputs.model_dump_json())
    summary = res["summary"]
    tabs = st.tabs(
        [
            "Speedup",
            "Throughput vs TPOT",
            "Latency",
            "Time per step",
            "Acceptance",
            "Table",
            "Plan & schedule",
            "Analytic",
            "Fleet",
        ]
    )
    with tabs[0]:
        st.plotly_chart(figures.speedup_figure(summary, inputs), width="stretch")
        column, _, _ = figures.headline(inputs)
        spec = summary[summary.method != "autoregressive"]
        best = spec.loc[spec[column].idxmax()]
        what = "throughput" if column == "speedup" else "TPOT p50"
        st.caption(
            f"Best: {best.method} (K={best.k}) at {best.load:g}: {best[column]:.2f}× on "
            f"{what}. Below the dashed line speculation is worse than plain decoding; error "
            "bars are 95 % intervals (README: Measurement)."
        )
        unstable = summary[summary.stable == 0]
        if len(unstable):
            st.warning(
                f"{len(unstable)} run(s) do not keep up with the arrival rate (the waiting "
                "queue grows over the window): their latencies grow with run length."
            )
    with tabs[1]:
        st.plotly_chart(figures.throughput_tpot_figure(summary, inputs), width="stretch")
    with tabs[2]:
        st.plotly_chart(figures.latency_figure(summary, inputs), width="stretch")
        st.plotly_chart(figures.ttft_figure(summary, inputs), width="stretch")
        ok = summary[(summary.ttft_ms_p99 <= slo_ttft) & (summary.tpot_ms_p99 <= slo_tpot)]
        st.caption(
            f"{len(ok)} of {len(summary)} runs meet TTFT p99 ≤ {slo_ttft:g} ms and "
            f"TPOT p99 ≤ {slo_tpot:g} ms."
        )
    with tabs[3]:
        st.plotly_chart(figures.breakdown_figure(res["breakdown"], inputs), width="stretch")
    with tabs[4]:
        st.plotly_chart(figures.acceptance_figure(res["acceptance"], inputs), width="stretch")
    with tabs[5]:
        st.dataframe(summary, width="stretch")
        st.download_button(
            "Download CSV",
            downloads.results_csv(summary, inputs),
            "simspec-results.csv",
            "text/csv",
        )
    with tabs[6]:
        plan_and_schedule(inputs, slo_ttft, slo_tpot)
    with tabs[7]:
        analytic_view(inputs)
    with tabs[8]:
        fleet_view(inputs, slo_ttft, slo_tpot)


def plan_and_schedule(inputs: ui_inputs.ExplorerInputs, slo_ttft: float, slo_tpot: float) -> None:
    """Two buttons, two results: each is kept in the session (keyed by everything it was
    computed from), so pressing one button no longer wipes the other's table."""
    left, right = st.columns(2)
    with left:
        st.subheader("Capacity plan")
        qps = st.number_input("Target requests/s", 0.1, 100000.0, 20.0)
        price = st.number_input("GPU-hour price ($)", 0.0, 100.0, capacity.GPU_HOUR_PRICE)
        key = ("plan", inputs.model_dump_json(), qps, price, slo_ttft, slo_tpot)
        if st.button("Compute plan (bisection on the arrival rate, ~20 s per method)"):
            with st.spinner("planning…"):
                methods = [
                    ui_inputs.method_for(inputs, m) for m in ["autoregressive", *inputs.methods]
                ]
                frame = capacity.plan(
                    ui_inputs.deployment_for(inputs),
                    methods,
                    qps,
                    capacity.Slo(slo_ttft, slo_tpot),
                    price,
                    duration_s=capacity.PLAN_DURATION_S,
                )
            st.session_state["plan"] = (key, runs.plan_view(frame))
        kept = st.session_state.get("plan")
        if kept is not None and kept[0] == key:
            frame = kept[1]
            st.dataframe(frame, hide_index=True, width="stretch")
            plan_csv = downloads.with_scenario(frame, inputs).assign(
                target_qps=qps, slo_ttft_ms=slo_ttft, slo_tpot_ms=slo_tpot
            )
            st.download_button(
                "Download plan CSV", plan_csv.to_csv(index=False), "plan.csv", "text/csv"
            )
    with right:
        st.subheader("Speculation schedule (vLLM Dynamic SD)")
        method = st.selectbox("Method", inputs.methods)
        key = ("schedule", inputs.model_dump_json(), method)
        if st.button("Recommend K per concurrency"):
            base = ui_inputs.method_for(inputs, method)
            knob, values = grid.recommend_grid(base)
            max_seqs = int(load_engine(inputs.engine)["max_num_seqs"])
            with st.spinner("simulating every K at every concurrency, then the crossovers…"):
                rec = bands_study.recommend_bands(
                    ui_inputs.deployment_for(inputs),
                    base,
                    values,
                    grid.DEFAULT_CONCURRENCIES,
                    max_seqs,
                    knob,
                )
            st.session_state["schedule"] = (key, rec, base, knob)
        kept = st.session_state.get("schedule")
        if kept is not None and kept[0] == key:
            _, rec, base, knob = kept
            table, bands = rec.table, rec.bands
            st.dataframe(table, width="stretch")
            st.caption(
                "Bands, and how far each band's setting is from the fastest at its edges (%)"
            )
            st.dataframe(rec.band_table, hide_index=True, width="stretch")
            st.download_button(
                "Download schedule CSV",
                downloads.schedule_csv(table, inputs, method),
                "schedule.csv",
                "text/csv",
            )
            if knob == "tree_nodes":  # a budget per band: simspec's tree_schedule, not vLLM's
                st.code(f"tree_schedule: {bands}")
                return
            cfg = export.speculative_config(base, bands)
            st.code(f"num_speculative_tokens_per_batch_size: {bands}")
            if cfg is not None:
                text = export.speculative_config_json(cfg)
                st.code(f"--speculative-config '{text}'")
                st.download_button(
                    "Download JSON", text, "speculative-config.json", "application/json"
                )


def analytic_view(inputs: ui_inputs.ExplorerInputs) -> None:
    chains = [m for m in inputs.methods if method_info(m).shapes[0] == "chain"] or ["eagle3"]
    method = st.selectbox("Chain method for the closed form", chains)
    context = st.slider("Tokens in the KV cache", 64, 32768, 1024, 64)
    table = analytic_cached(ui_inputs.deployment_for(inputs).model_dump_json(), method, context)
    fe, fs = figures.analytic_figures(table, inputs, method)
    st.plotly_chart(fe, width="stretch")
    st.plotly_chart(fs, width="stretch")
    st.dataframe(analytic.best_k(table), width="stretch")


def fleet_inputs(inputs: ui_inputs.ExplorerInputs, slo_ttft: float, slo_tpot: float):
    """The Fleet view's own widgets (the deployment, method settings and SLOs are the page's)."""
    d = fleet_ui.FleetInputs()
    left, mid, right = st.columns(3)
    with left:
        choice = st.selectbox("Arrival trace", fleet_ui.trace_choices())
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
        scale = st.number_input("Rate scale (× the trace's rate, bursts kept)", 0.01, 1000.0, 1.0)
        start = st.number_input("Window start (s of the trace)", 0.0, 1e6, d.start_s)
        end = st.number_input("Window end (s; 0 = to the end)", 0.0, 1e6, d.end_s or 0.0)
    with mid:
        replicas = st.number_input("Replicas", 1, fleet_ui.MAX_PAGE_REPLICAS, d.replicas)
        router = st.selectbox("Router", list(ROUTERS), index=list(ROUTERS).index(d.router))
        method = st.selectbox(
            "Method (the page's K and acceptance)", ["autoregressive", *inputs.methods]
        )
    with right:
        goal = st.number_input("Attainment goal", 0.01, 1.0, d.attainment_goal)
        window_s = st.number_input("Timeline window (s)", 1.0, 3600.0, d.window_s)
        st.caption(f"SLOs (sidebar): TTFT ≤ {slo_ttft:g} ms, TPOT ≤ {slo_tpot:g} ms per request")
    return fleet_ui.FleetInputs(
        trace=trace,
        rate_scale=scale,
        start_s=start,
        end_s=end or None,
        replicas=int(replicas),
        router=router,
        method=method,
        slo_ttft_ms=slo_ttft,
        slo_tpot_ms=slo_tpot,
        attainment_goal=goal,
        window_s=window_s,
    )


def fleet_view(inputs: ui_inputs.ExplorerInputs, slo_ttft: float, slo_tpot: float) -> None:
    """A trace replayed on a fleet: kept in the session, keyed by everything it came from."""
    st.caption(
        "Replays a production trace on N replicas of the sidebar's deployment behind a router. "
        "The default window, the first 10 minutes, answers in a few seconds; the whole hour "
        "takes about six times as long. Every request of the window counts (measured whole)."
    )
    try:
        f = fleet_inputs(inputs, slo_ttft, slo_tpot)
        if f is None:
            return
        key = ("fleet", inputs.model_dump_json(), f.model_dump_json())
        if st.button("Replay the trace on the fleet"):
            with st.spinner("replaying…"):
                st.session_state["fleet"] = (key, fleet_ui.run_view(inputs, f))
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
    st.plotly_chart(fleet_ui.attainment_figure(res, inputs, f), width="stretch")
    st.plotly_chart(fleet_ui.timeline(res, inputs, f), width="stretch")
    st.caption(
        "Intervals: 95 %, sectioning over arrival order. Timelines: replica -1 is the fleet."
    )
    st.download_button(
        "Download per-request CSV",
        fleet_ui.requests_csv(res["requests"], inputs, f),
        "fleet-requests.csv",
        "text/csv",
    )


# The simulation pool's workers start from a fork server that imports this file as
# ``__mp_main__`` (multiprocessing re-imports the main script): only Streamlit, which runs it
# as ``__main__``, draws the page.
if __name__ == "__main__":
    st.set_page_config(page_title="simspec explorer", layout="wide")
    try:
        main()
    except (InputError, ScenarioError) as exc:
        st.error(str(exc))
    except ValidationError as exc:
        st.error(validation_message(exc))
    except (OSError, ValueError, ArithmeticError, RuntimeError) as exc:  # not a traceback
        st.error(f"simspec could not run this scenario: {type(exc).__name__}: {exc}")
