"""The sidebar: the deployment, speculation and workload widgets, read into one validated
:class:`~simspec.ui.inputs.ExplorerInputs`, and the SLOs the plan, latency and fleet views
judge by. Each widget starts at the CLI's default, but the run length: the page measures a
fixed length where the CLI measures to a precision (simspec.ui.inputs says why)."""

from __future__ import annotations

from typing import Any, NoReturn

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from simspec.catalog.hardware import engine_ids, gpu_ids, load_engine
from simspec.catalog.methods import method_info
from simspec.catalog.models import model_ids
from simspec.catalog.precision import KV_CACHE_DTYPES
from simspec.config import (
    DEFAULT_SLO_TPOT_MS,
    DEFAULT_SLO_TTFT_MS,
    Deployment,
    SchedulerConfig,
)
from simspec.studies.capacity import Slo
from simspec.ui import uploads
from simspec.ui.choices import (
    disaggregation_choices,
    dp_choices,
    ep_choices,
    kv_cache_label,
    precision_caveat,
    precision_choices,
    precision_label,
    tp_choices,
)
from simspec.ui.inputs import (
    ExplorerInputs,
    domains,
    markdown_text,
    offered_methods,
    parse_loads,
)
from simspec.ui.pages.kept import CHOSEN, clamp, kept, remember, remembered

DEFAULT = ExplorerInputs()  # the CLI's defaults
SERVING_LABELS = {
    "null": "one replica (prefill and decode)",
    "decode": "decode instance (prefill/decode disaggregated)",
}


def field_help(field: str, flag: str) -> str:
    """A deployment widget's help: the field's description, as ``flag``'s --help has it."""
    return f"{Deployment.model_fields[field].description} (the CLI's {flag})"


# each deployment widget's help is its flag's (the Deployment field's description)
EP_HELP = field_help("ep", "--ep")
DP_HELP = field_help("dp", "--dp")
PRECISION_HELP = field_help("precision", "--precision")
KV_HELP = field_help("kv_cache_dtype", "--kv-cache-dtype")
PD_HELP = field_help("disaggregation_mode", "--disaggregation-mode")
MAX_LEN_FIELD = SchedulerConfig.model_fields["max_model_len"]
MAX_LEN_HELP = f"{MAX_LEN_FIELD.description} (the CLI's --max-model-len)"
ASYNC_HELP = (
    f"{SchedulerConfig.model_fields['async_scheduling'].description} (the CLI's --async-scheduling)"
)


def _at(choices: list[Any], value: Any) -> int:
    """The index of ``value`` among ``choices`` (a selectbox's default)."""
    return list(choices).index(value)


def problem(message: str) -> NoReturn:
    """Show ``message`` as the page's one error and draw nothing more."""
    st.error(message)
    st.stop()


def sidebar() -> ExplorerInputs:
    sb = st.sidebar
    deployment = _deployment(sb)
    speculation = _speculation(sb, deployment["model"], deployment["engine"], deployment["dp"])
    return ExplorerInputs(**deployment, **speculation, **_workload(sb))


def slos() -> Slo:
    """The latency targets, at p99 (drawn after the inputs are checked)."""
    ttft = st.sidebar.number_input(
        "SLO: TTFT p99 (ms)", 10.0, 60000.0, **kept("slo_ttft", DEFAULT_SLO_TTFT_MS)
    )
    tpot = st.sidebar.number_input(
        "SLO: TPOT p99 (ms)", 1.0, 1000.0, **kept("slo_tpot", DEFAULT_SLO_TPOT_MS)
    )
    return Slo(ttft, tpot)


def _deployment(sb: DeltaGenerator) -> dict[str, Any]:
    sb.header("Deployment")
    model = sb.selectbox(
        "Model", model_ids(), **kept("model", _at(model_ids(), DEFAULT.model), "index")
    )
    upload = sb.file_uploader(
        "…or a Hugging Face config.json", type=["json"], max_upload_size=uploads.MAX_UPLOAD_MB
    )
    model_name = None
    if upload is not None:
        model, shape, model_name = uploads.save_config_upload(upload.getvalue(), upload.name)
        sb.caption(  # the name is the config's own _name_or_path: shown as text
            f"uploaded {markdown_text(model_name)}: hidden {shape.hidden_size}, "
            f"{shape.num_hidden_layers} layers"
        )
    gpu = sb.selectbox("GPU", gpu_ids(), **kept("gpu", _at(gpu_ids(), DEFAULT.gpu), "index"))
    tps = tp_choices()
    tp = sb.selectbox(
        "Tensor parallel",
        tps,
        **kept("tp", _at(tps, DEFAULT.tp), "index"),
        help="GPUs per replica; past 8 a replica spans nodes (TP 16: two 8-GPU nodes)",
    )
    engine = sb.selectbox(
        "Engine profile", engine_ids(), **kept("engine", _at(engine_ids(), DEFAULT.engine), "index")
    )
    eps, dps = ep_choices(model, tp), dp_choices(engine, tp, model)
    ep, dp, mode = DEFAULT.ep, DEFAULT.dp, DEFAULT.disaggregation_mode
    if len(eps) > 1:
        pick = remembered("ep", eps, DEFAULT.ep)
        ep = remember(
            "ep", sb.selectbox("Expert parallel", eps, help=EP_HELP, **pick), eps, DEFAULT.ep
        )
    if len(dps) > 1:
        pick = remembered("dp", dps, DEFAULT.dp)
        dp = remember(
            "dp",
            sb.selectbox("Data-parallel attention", dps, help=DP_HELP, **pick),
            dps,
            DEFAULT.dp,
        )
    modes = disaggregation_choices(engine)
    if len(modes) > 1:
        pick = remembered("serving", modes, DEFAULT.disaggregation_mode)
        mode = remember(
            "serving",
            sb.selectbox("Serving", modes, format_func=SERVING_LABELS.get, help=PD_HELP, **pick),
            modes,
            DEFAULT.disaggregation_mode,
        )
    precisions = precision_choices(gpu, engine)
    precision = remember(
        "precision",
        sb.selectbox(
            "Weight precision",
            precisions,
            format_func=lambda p: precision_label(model, p),
            help=PRECISION_HELP,
            **remembered("precision", precisions, DEFAULT.precision),
        ),
        precisions,
        DEFAULT.precision,
    )
    if note := precision_caveat(precision, gpu):
        sb.caption(note)
    kv_cache_dtype = sb.selectbox(
        "KV-cache dtype",
        KV_CACHE_DTYPES,
        **kept("kv_cache_dtype", _at(KV_CACHE_DTYPES, DEFAULT.kv_cache_dtype), "index"),
        format_func=kv_cache_label,
        help=KV_HELP,
    )
    async_scheduling = None
    if load_engine(engine).async_spec_methods is not None:
        async_scheduling = sb.checkbox(
            "Async scheduling (vLLM 0.14+ default)",
            help=ASYNC_HELP,
            **kept("async_scheduling", False),
        )
    context = sb.number_input(
        "Max model len (0: the model's context)",
        0,
        10_000_000,
        step=1024,
        **kept("max_model_len", 0),
        help=MAX_LEN_HELP,
    )
    shortest = next(m.ge for m in MAX_LEN_FIELD.metadata if hasattr(m, "ge"))
    if 0 < context < shortest:  # QA: refused as "max_model_len: Input should be ..."
        problem(f"Max model len: at least {shortest} tokens, or 0 for the model's context.")
    return {
        "max_model_len": int(context) or None,
        "model": model,
        "model_name": model_name,
        "gpu": gpu,
        "tp": tp,
        "ep": ep,
        "dp": dp,
        "engine": engine,
        "disaggregation_mode": mode,
        "precision": precision,
        "kv_cache_dtype": kv_cache_dtype,
        "async_scheduling": async_scheduling,
    }


def _methods(sb: DeltaGenerator, offered: list[str]) -> list[str]:
    """The Methods multiselect, its last choice kept in plain session state (no cleanup
    deletes it) and chosen again where the model offers it: an error above it (a bad upload)
    no longer resets it to the defaults (QA: a choice of suffix came back as EAGLE-3 and
    n-gram without a word). A choice the model does not offer is kept for one that does."""
    default = [m for m in DEFAULT.methods if m in offered]
    saved: list[str] | None = st.session_state.get(CHOSEN + "methods")
    value = default if saved is None else [m for m in saved if m in offered]
    if saved and not value:  # none of them offered here: the defaults stand in
        value = default
    methods = sb.multiselect("Methods", offered, default=value, key=f"{CHOSEN}methods:{offered!r}")
    st.session_state[CHOSEN + "methods"] = methods + [m for m in saved or [] if m not in offered]
    return methods


def _speculation(sb: DeltaGenerator, model: str, engine: str, dp: int) -> dict[str, Any]:
    sb.header("Speculation")
    offered, left_out = offered_methods(model, engine, dp)
    methods = _methods(sb, offered)
    for name, why in left_out.items():
        sb.caption(f"{name} not offered: {markdown_text(uploads.as_uploaded(why))}")
    k_mode = sb.radio(
        "Draft length", ["method default", "set K"], horizontal=True, **kept("k_mode", 0, "index")
    )
    k = (
        sb.slider("K (chain length or tree depth)", 1, 10, **kept("k", 3))
        if k_mode == "set K"
        else None
    )
    nodes = sb.number_input(
        "Tree budget (nodes; 0 = each tree method's default)", 0, 1024, **kept("nodes", 0)
    )
    chains = [m for m in methods if len(method_info(m).shapes) == 1]
    if nodes and chains:  # QA: the budget ran unread, and the numbers did not move
        sb.caption(
            f"The tree budget does not apply to {', '.join(chains)}: "
            f"{'it drafts' if len(chains) == 1 else 'they draft'} a chain only."
        )
    acceptance = sb.radio(
        "Acceptance",
        ["preset", "alpha", "tau", "trace"],
        horizontal=True,
        **kept("acceptance", 0, "index"),
        help="preset: published τ or measured traces for the domain; alpha or tau: your own "
        "measurement (τ = tokens per step, bonus included, at the K you measured it)",
    )
    by_label = domains()
    dataset = sb.selectbox(
        "Domain (preset and request lengths)",
        list(by_label),
        **kept("dataset", list(by_label.values()).index(DEFAULT.dataset), "index"),
    )
    alpha, tau, tau_k, trace_path = 0.7, DEFAULT.tau, None, None
    spread: float | None = 0.0
    if acceptance == "alpha":
        alpha = sb.slider(
            "Mean acceptance α per position", 0.0, 1.0, step=0.01, **kept("alpha", 0.7)
        )
    elif acceptance == "tau":
        # empty: each method's own K, as the command line's --tau without --tau-k reads it
        given_k = sb.number_input(
            "K τ was measured at", 1, 16, placeholder="each method's K", **kept("tau_k", None)
        )
        tau_k = None if given_k is None else int(given_k)
        top = (tau_k or 16) + 1.0  # a τ past a method's K + 1 is refused by its run
        # kept across a change of K τ, within its new bound (QA: it had jumped back to 3.0)
        clamp("tau", 1.0, top)
        tau = sb.number_input(
            "Measured τ (tokens per step)", 1.0, top, **kept("tau", min(tau, top))
        )
    measured_spread = acceptance == "tau" and sb.checkbox(
        "Spread across requests as the traces measured it",
        help="Requests differ in acceptance as the packaged traces of each method's drafter "
        "and this domain measured (the CLI's --tau does the same); off: give the spread",
        **kept("measured_spread", True),
    )
    if measured_spread:
        spread = None
    elif acceptance in ("alpha", "tau"):
        spread = sb.slider(
            "Spread across requests (logit std)", 0.0, 2.0, step=0.1, **kept("spread", 0.0)
        )
    elif acceptance == "trace":
        trace = sb.file_uploader(
            "Acceptance trace (.jsonl, acc_len format)",
            type=["jsonl"],
            max_upload_size=uploads.MAX_UPLOAD_MB,
        )
        if trace is None:
            problem("Upload an acceptance trace, or choose preset, alpha or tau acceptance.")
        trace_path = uploads.save_trace_upload(trace.getvalue(), trace.name)
    temperature = sb.slider(
        "Sampling temperature", 0.0, 2.0, step=0.05, **kept("temperature", DEFAULT.temperature)
    )
    top_p = sb.slider("top-p", 0.05, 1.0, step=0.05, **kept("top_p", DEFAULT.top_p))
    return {
        "methods": methods,
        "k": k,
        "tree_nodes": int(nodes) or None,
        "acceptance": acceptance,
        "dataset": by_label[dataset],
        "alpha": alpha,
        "tau": tau,
        "tau_k": tau_k,
        "spread": spread,
        "trace_path": trace_path,
        "temperature": temperature,
        "top_p": top_p,
    }


def _workload(sb: DeltaGenerator) -> dict[str, Any]:
    sb.header("Workload")
    arrival = sb.radio(
        "Load",
        ["closed", "poisson"],
        horizontal=True,
        format_func=lambda a: {"closed": "concurrency", "poisson": "QPS"}[a],
        **kept("arrival", 0, "index"),
    )
    default = ",".join(f"{v:g}" for v in DEFAULT.loads) if arrival == "closed" else "1,4,8,16"
    # one kept list per kind of load: concurrencies are not rates
    loads = parse_loads(
        sb.text_input("Loads (comma list)", **kept(f"loads_{arrival}", default)), arrival
    )
    lengths = sb.radio(
        "Request lengths",
        ["dataset", "fixed", "lognormal"],
        horizontal=True,
        **kept("lengths", 0, "index"),
    )
    prompt_mean, output_mean = 512.0, 256.0
    if lengths != "dataset":
        prompt_mean = sb.number_input("Prompt tokens (mean)", 1.0, 65536.0, **kept("prompt", 512.0))
        output_mean = sb.number_input("Output tokens (mean)", 1.0, 16384.0, **kept("output", 256.0))
    requests = sb.number_input(
        "Requests measured per run (more: tighter intervals, slower)",
        8,
        5000,
        **kept("requests", DEFAULT.requests),
        help="measured in the steady window, after a warm-up: a fixed length, as "
        "simspec sweep --precision-target 0 runs (the CLI's default instead measures until "
        "each speedup is known to ±2 %)",
    )
    turnovers = sb.number_input(
        "Closed loop: batch turnovers measured (at least)",
        0,
        1024,
        **kept("turnovers", DEFAULT.turnovers),
        help="a closed loop measures at least this many × concurrency requests (simspec "
        "sweep --precision-target 0 --turnovers 64 runs the same; 64 holds a batch-64 speedup "
        "within ~0.3 % run to run); fewer answer faster with wider error bars",
    )
    return {
        "arrival": arrival,
        "loads": loads,
        "lengths": lengths,
        "prompt_mean": prompt_mean,
        "output_mean": output_mean,
        "requests": int(requests),
        "turnovers": int(turnovers),
    }
