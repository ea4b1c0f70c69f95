"""What a run ran with and what its numbers rest on, read from the data simspec already holds.

Every command that runs a method writes :func:`provenance` into each row of its table (weights
as the GPU runs them, KV-cache dtype, engine profile, acceptance source) and prints
:func:`rests_on` under its table: whose acceptance it replays (the acceptance presets'
``target_model``, simspec/data/method_presets.yaml), whether the GPU's hardware profile was
fitted on that GPU (the profile's ``transferred_from``, simspec/data/profiles), and how many
packaged validation cases (simspec/data/validation/cases.csv) ran this model or its
architecture. The line is printed even when there is nothing to caveat, so that users learn
to look for it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import pandas as pd

from simspec.catalog.hardware import (
    EngineProfile,
    GpuSpec,
    HardwareProfile,
    load_engine,
    load_gpu,
    load_profile,
)
from simspec.catalog.methods import PROXIES, TRACES_SOURCE, method_presets
from simspec.catalog.models import ModelShape, load_model, preset_id
from simspec.catalog.precision import (
    effective_precision,
    engine_kv_cache_dtype,
    kv_cache_bytes,
    load_precision,
)
from simspec.catalog.tables import packaged_table, shown
from simspec.catalog.traces import packaged_traces
from simspec.config import AcceptanceConfig, Deployment, MethodConfig, SchedulerConfig
from simspec.engine.build import EAGLE_DRAFTERS, deployed_engine
from simspec.engine.kv_cache import uniform_kv, uniform_kv_reason
from simspec.engine.layout import BLOCK_CHECKED_ENGINES, ParallelLayout
from simspec.errors import InputError

PROVENANCE_COLUMNS = (
    "precision",
    "kv_cache_dtype",
    "engine_profile",
    "hardware_profile",
    "acceptance_source",
)


def provenance(deploy: Deployment, method: MethodConfig) -> dict[str, str]:
    """The columns every result row carries (:data:`PROVENANCE_COLUMNS`), so that a CSV read
    on its own says what it ran with."""
    return {
        **_deployment_columns(deploy, method.name),
        "acceptance_source": acceptance_source(method),
    }


def _deployment_columns(deploy: Deployment, method: str | None = None) -> dict[str, str]:
    """The provenance columns that depend on the deployment (and, for the engine profile, on
    ``method``: :func:`engine_profile`), worked out once for a run's rows."""
    return {
        "precision": weights(deploy.precision, load_model(deploy.model), load_gpu(deploy.gpu)),
        "kv_cache_dtype": kv_dtype(
            engine_kv_cache_dtype(
                deploy.kv_cache_dtype,
                load_engine(deploy.engine).family,
                load_model(deploy.model).is_sparse,
                load_gpu(deploy.gpu).arch,
            )
        ),
        "engine_profile": engine_profile(deploy, method),
        # QA: a results file could not say which hardware profile (a user's file) it ran on
        "hardware_profile": _profile_part(deploy),
    }


def engine_profile(deploy: Deployment, method: str | None = None) -> str:
    """The engine profile as ``method`` (None: the deployment as a whole) runs it: async
    scheduling said off for a method that turns it off (vLLM keeps it under EAGLE and MTP
    alone: QA, the n-gram and suffix rows of an --async-scheduling sweep read "async
    scheduling")."""
    engine = deployed_engine(deploy)
    about = [engine.description] if engine.description else []
    if engine.async_scheduling:
        off = method is not None and engine.overlap_off_by(method)
        about.append(
            f"async scheduling asked, which {method} turns off" if off else "async scheduling"
        )
    if deploy.disaggregation_mode == "decode":  # QA: a CSV could not tell a decode instance
        about.append("decode instance of a prefill/decode-disaggregated deployment")
    return f"{engine.id} ({'; '.join(about)})" if about else engine.id


def with_provenance(
    frame: pd.DataFrame, deploy: Deployment, methods: list[MethodConfig]
) -> pd.DataFrame:
    """``frame`` with :data:`PROVENANCE_COLUMNS` appended, row i run with ``methods[i]`` (one
    method for every row: the list holds it once)."""
    sources = [acceptance_source(m) for m in methods]
    profiles = {
        name: engine_profile(deploy, name) for name in dict.fromkeys(m.name for m in methods)
    }
    engines = [profiles[m.name] for m in methods]  # async said off where the method turns it off
    if len(sources) == 1:
        sources *= len(frame)
        engines *= len(frame)
    columns: dict[str, str | list[str]] = {**_deployment_columns(deploy), "engine_profile": engines}
    return frame.assign(**columns, acceptance_source=sources)[
        [*frame.columns, *(c for c in PROVENANCE_COLUMNS if c not in frame.columns)]
    ]


def weights(precision: str | None, model: ModelShape, gpu: GpuSpec | None = None) -> str:
    """The weights' precision as the run uses it: the deployment's, else the checkpoint's
    (experts apart where it stores them apart), as ``gpu`` runs it (FP8 without FP8 tensor
    cores runs weight-only), the rule :mod:`simspec.engine.build` applies."""

    def on_gpu(name: str) -> str:
        return effective_precision(load_precision(name), gpu).name if gpu else name

    if precision is not None:
        return on_gpu(precision)
    expert = model.expert_weight_dtype
    if expert and expert != model.weight_dtype:
        return f"{on_gpu(model.weight_dtype)} (experts {on_gpu(expert)})"
    return on_gpu(model.weight_dtype)


def kv_dtype(kv_cache_dtype: str) -> str:
    """The KV cache's dtype as sized: ``auto`` is the model's activation dtype, bf16."""
    if kv_cache_dtype != "auto":
        return kv_cache_dtype
    return "bf16" if kv_cache_bytes("auto") == 2 else kv_cache_dtype


def acceptance_source(method: MethodConfig) -> str:
    """Where the method's acceptance comes from: its preset's source, or what the user gave."""
    if method.name == "autoregressive":
        return "none (plain decoding drafts nothing)"
    acc = method.acceptance
    if acc is None:
        return "none"
    return acc.source or f"as given ({_given(acc)})"


def _given(acc: AcceptanceConfig) -> str:
    if acc.acc_len is not None:
        return f"acc_len trace {shown(acc.acc_len)}"
    if acc.tokens is not None:
        return f"token trace {shown(acc.tokens)}"
    if acc.tau is not None:
        return f"tau {acc.tau:g} at k={acc.tau_k}"
    return f"alpha {acc.alpha}"


# -- the lines under a table ---------------------------------------------------------------------


def ran_with(deploy: Deployment, methods: Iterable[str] = ()) -> str:
    """One line: the weights as the GPU runs them, the KV-cache dtype and the engine profile,
    and which of ``methods`` turn an asked-for async scheduler off (QA: recommend's ngram read
    "async scheduling" where its own CSV said ngram turns it off)."""
    row = provenance(deploy, MethodConfig(name="autoregressive", k=0))
    line = (
        f"ran with: {row['precision']} weights, {row['kv_cache_dtype']} KV cache, engine "
        f"{row['engine_profile']}"
    )
    engine = deployed_engine(deploy)
    off = [
        m for m in dict.fromkeys(methods) if engine.async_scheduling and engine.overlap_off_by(m)
    ]
    return line + (f"; {', '.join(off)} turn{'s' if len(off) == 1 else ''} it off" if off else "")


def async_note(engine_id: str, async_scheduling: bool | None) -> str | None:
    """What a vLLM profile's host wait means to a user of vLLM 0.14+ (None where it does not
    apply): the profile waits for the host every step, as 0.10-0.13 ran, unless told; sweep,
    recommend and the explorer say it alike."""
    from simspec.catalog.hardware import load_engine

    if load_engine(engine_id).async_spec_methods is None or async_scheduling is not None:
        return None
    return (
        f"engine {engine_id} waits for the host every step, as vLLM 0.10-0.13 ran; vLLM 0.14+ "
        "schedules asynchronously by default: --async-scheduling"
    )


def rests_on(deploy: Deployment, methods: Iterable[MethodConfig]) -> str:
    """One line: whose acceptance the methods replay, how the GPU's profile was obtained and
    how many validation cases back the model ("rests on: ..."; printed even when none of it
    is a caveat)."""
    model = load_model(deploy.model)
    parts = [_acceptance_part(model.id, list(methods)), _profile_part(deploy)]
    parts.append(_validation_part(model))
    return "rests on: " + "; ".join(parts)


DECODE_INSTANCE_NOTE = (
    "the decode instance of a prefill/decode-disaggregated deployment: each request arrives "
    "with its prompt's KV and first token, which it delivers once a slot and its blocks are "
    "free (its TTFT here is that wait); the prefill instance and the KV transfer are "
    "simulated only by a fleet with prefill instances (simspec fleet --prefill-replicas), and "
    "a preempted request recomputes its prompt here"
)


# vLLM's decode instance samples the first token itself (engines.yaml
# pd_decode_recomputes_last_token)
RECOMPUTE_NOTE = (
    "; on this engine the first token is the decode instance's own, sampled in a step that "
    "recomputes the prompt's last token, so its TTFT adds that step"
)


def deployment_notes(deploy: Deployment) -> list[str]:
    """What the deployment itself leaves out, for every command's footer: GPUs that span
    several servers (QA: only sweep, models and validate said so, and tp 16 read faster than
    tp 8 under analytic), and a decode instance's TTFT."""
    from simspec.catalog.hardware import load_gpu
    from simspec.catalog.servers import cross_node_note

    notes = []
    gpu = load_gpu(deploy.gpu)
    if note := cross_node_note(gpu, deploy.tp * deploy.pp, deploy.ep, deploy.engine):
        notes.append(f"note: {note}")
    engine = deployed_engine(deploy)
    if deploy.disaggregation_mode == "decode":
        recompute = engine.flag("pd_decode_recomputes_last_token")
        notes.append(f"note: {DECODE_INSTANCE_NOTE}" + (RECOMPUTE_NOTE if recompute else ""))
    if note := uniform_kv_note(engine, load_model(deploy.model), deploy.disaggregation_mode):
        notes.append(f"note: {note}")
    if note := fp8_blocks_note(deploy, engine):
        notes.append(f"note: {note}")
    if note := kv_quant_note(deploy):
        notes.append(f"note: {note}")
    if note := mla_fp8_kv_note(deploy, engine):
        notes.append(f"note: {note}")
    model, mode = load_model(deploy.model), deploy.disaggregation_mode
    if note := mamba_radix_note(engine, model, deploy.scheduler, mode):
        notes.append(f"note: {note}")
    return notes


def mamba_radix_note(
    engine: EngineProfile, model: ModelShape, scheduler: SchedulerConfig, mode: str = "null"
) -> str | None:
    """What SGLang's radix cache does to a model with Gated DeltaNet layers (engines.yaml
    ``mamba_no_buffer``), where the deployment leaves the cache on; None elsewhere (QA: 738
    requests ran at once where SGLang runs 246). ``mode``: the deployment's
    disaggregation_mode (a decode instance's chunk cache replaces it)."""
    if not (engine.flag("mamba_no_buffer") and model.linear_layers):
        return None
    if scheduler.enable_prefix_caching is False:
        return None
    if mode == "decode" and engine.flag("pd_decode_chunk_cache"):
        return (
            f"SGLang 0.5.10 turns the overlap scheduler off for {model.id}'s Gated DeltaNet "
            "states (mamba no_buffer) before a decode instance's chunk cache replaces its radix "
            "cache: plain decoding runs without overlap, every state slot running"
        )
    return (
        f"SGLang 0.5.10 keeps {model.id}'s radix cache over its Gated DeltaNet states by the "
        "no_buffer strategy: the overlap scheduler off and a third of the state slots running; "
        "speculative decoding, which that cache refuses, runs with --disable-radix-cache "
        "(scheduler.enable_prefix_caching false)"
    )


def mla_fp8_kv_note(deploy: Deployment, engine: EngineProfile) -> str | None:
    """Where an MLA model's FP8 KV cache decodes slower than its bf16 one in the engine's
    measured MLA table on this GPU (its fitted share of HBM bandwidth under half of bf16's,
    FP8 halving the bytes), that it is the measurement (QA: SGLang on H100 and H200, fp8 KV
    2-3.5x slower than bf16 at long context, with no word); None elsewhere."""
    from simspec.catalog.kernel_tables import mla_decode_fit

    if deploy.kv_cache_dtype != "fp8" or not load_model(deploy.model).is_mla:
        return None
    fp8 = mla_decode_fit(deploy.gpu, engine.engine_kernels, 1.0)
    bf16 = mla_decode_fit(deploy.gpu, engine.engine_kernels, 2.0)
    if fp8 is None or bf16 is None or 2 * fp8.memory_efficiency >= bf16.memory_efficiency:
        return None
    return (
        f"{engine.family}'s MLA decode with an FP8 KV cache on {deploy.gpu} is timed by "
        f"AIConfigurator's measured table ({fp8.kernel}) at {fp8.memory_efficiency:.0%} of HBM "
        f"bandwidth against {bf16.memory_efficiency:.0%} for bf16: in that measurement FP8 KV "
        "decodes slower than bf16 once attention dominates, and simspec prices it so (the "
        "cache still holds twice the tokens; simspec/data/mla_kernels.yaml)"
    )


def kv_quant_note(deploy: Deployment) -> str | None:
    """Where the checkpoint states an FP8 KV cache that ``auto`` does not run (QA: a ModelOpt
    checkpoint's kv_cache_quant_algo was read as nothing, its KV priced at twice the bytes
    vLLM holds)."""
    model = load_model(deploy.model)
    if deploy.kv_cache_dtype != "auto" or model.kv_cache_quant is None:
        return None
    return (
        f"{model.id}'s checkpoint states a {model.kv_cache_quant.upper()} KV cache (ModelOpt "
        "kv_cache_quant_algo), which vLLM serves by default since PR #29980 (December 2025: "
        "resolve_kv_cache_dtype_string); simspec's auto runs it in bf16: give "
        "--kv-cache-dtype fp8 to run it as those releases do"
    )


# the scale blocks FP8 releases of bf16 models ship with (DeepSeek-V3's and Qwen3's FP8
# checkpoints: quantization_config.weight_block_size [128, 128])
RELEASED_FP8_BLOCK = (128, 128)


def fp8_blocks_note(deploy: Deployment, engine: EngineProfile) -> str | None:
    """Where ``--precision fp8`` turns a bf16 checkpoint's weights to FP8 at a layout that a
    block-scaled FP8 release could not load (``build.check_fp8_blocks`` refuses that for a
    checkpoint that is one), what simspec prices instead; None elsewhere (QA: qwen3-235b at
    tp=8 and fp8 ran without a word, where minimax-m2's own FP8 checkpoint is refused)."""
    if deploy.precision != "fp8" or engine.family not in BLOCK_CHECKED_ENGINES:
        return None
    target = load_model(deploy.model)
    if target.weight_dtype == "fp8" or not (target.intermediate_size or target.is_moe):
        return None
    blocked = target.model_copy(update={"weight_block_size": RELEASED_FP8_BLOCK})
    layout = ParallelLayout(deploy.tp, deploy.ep, deploy.dp, engine.dp_attention)
    why = layout.block_refusal(blocked)
    if why is None:
        return None
    return (
        f"--precision fp8: {why}, so an FP8 release with 128 x 128 scale blocks would not "
        "load here (vLLM and SGLang refuse it); simspec prices FP8 weights all the same, as "
        "online FP8 quantization of the bf16 checkpoint (per-tensor scales, any tp) would "
        "hold them, its MoE kernel timed on the block-scaled one"
    )


def uniform_kv_note(engine: EngineProfile, model: ModelShape, mode: str) -> str | None:
    """Where vLLM turns its hybrid KV cache manager off (kv_cache.uniform_kv), what that does;
    None elsewhere (QA: a decode instance's pool halved with no word)."""
    if not uniform_kv(engine, model, mode):
        return None
    return (
        f"vLLM's hybrid KV cache manager is off for {model.id} here ({uniform_kv_reason(mode)}): "
        "every layer, the "
        "windowed ones too, caches every token, so the KV cache holds fewer tokens"
    )


def dataset_notes(deploy: Deployment, methods: Iterable[MethodConfig]) -> list[str]:
    """A note per method whose acceptance replays another packaged dataset than the one the
    requests' lengths come from (QA: ``--dataset gsm8k`` over a --config file that states
    ShareGPT's acceptance switched the lengths only, with no word)."""
    lengths = deploy.workload.lengths_from
    packaged = packaged_traces()
    if lengths not in packaged:
        return []
    notes = []
    for m in methods:
        acc = m.acceptance
        if acc is None or acc.acc_len is None or acc.acc_len == lengths:
            continue
        if acc.acc_len in packaged:
            notes.append(
                f"note: {m.name} replays {acc.acc_len}'s acceptance while the requests' lengths "
                f"come from {lengths}: the acceptance stated in the config is kept (state "
                f"acc_len: {lengths} to replay that dataset's)"
            )
    return list(dict.fromkeys(notes))  # one per method name (a sweep runs several K)


def verify_notes(deploy: Deployment, methods: Iterable[MethodConfig]) -> list[str]:
    """A note per method its engine verifies greedily although the run samples (QA: TRT-LLM's
    one-model EAGLE-3 at T=1 was priced at 0.845 of greedy acceptance, where the server takes
    the argmax): its acceptance is greedy's, the sampling factor does not apply to it."""
    from simspec.config import Scenario
    from simspec.engine.build import greedy_verify_note

    if deploy.temperature == 0:
        return []
    fields = {name: getattr(deploy, name) for name in Deployment.model_fields}
    notes = (greedy_verify_note(Scenario(**fields, method=m)) for m in methods)
    return list(dict.fromkeys(f"note: {n}" for n in notes if n))


# vLLM's first release whose idle data-parallel ranks run the EAGLE/MTP drafter's K forwards
# (EagleProposer.dummy_run loops over num_speculative_tokens with num_tokens_across_dp, PR
# #26086; the 0.11.0, 0.11.1 and 0.11.2 wheels run one forward, against K on a busy rank, whose
# DP all-reduces then fall out of step: "This results in hanging", the PR's description)
VLLM_DP_SPEC_SINCE = "0.12.0"


def release_notes(deploy: Deployment, methods: Iterable[MethodConfig]) -> list[str]:
    """A note per method that earlier releases of the deployment's engine refuse or hang on,
    where simspec's profile spans releases (vllm): an EAGLE head on a target whose class gained
    what it reads later (:func:`~simspec.catalog.methods.draft_target_since`), and EAGLE-style
    drafting of K > 1 beside data-parallel ranks (:data:`VLLM_DP_SPEC_SINCE`) (QA: both ran
    with no word)."""
    from simspec.catalog.methods import draft_target_since

    engine = load_engine(deploy.engine)
    model = load_model(deploy.model)
    notes = []
    for m in methods:
        if since := draft_target_since(m.name, engine.id, model.architecture):
            notes.append(
                f"note: {engine.id} releases before {since} refuse {m.name} on "
                f"{model.architecture} (its class lacks what the head reads there: "
                "simspec/data/draft_targets.yaml); the prediction is for later ones"
            )
        if m.name == "mtp" and engine.family == "vllm" and not engine.disables_by_batch_size:
            # vLLM V1's proposer (vllm-v0, the one profile with V0's disable_by_batch_size,
            # runs V0's speculative worker)
            notes.extend(eager_drafter_notes(model.architecture))
        drafts_k = m.name in EAGLE_DRAFTERS and m.k > 1
        if engine.dp_attention == "vllm" and deploy.dp > 1 and drafts_k:
            notes.append(
                f"note: vLLM releases before {VLLM_DP_SPEC_SINCE} hang with {m.name} at K > 1 "
                "beside data-parallel ranks (an idle rank's drafter ran one forward against K "
                f"on a busy one: PR #26086); the prediction is for {VLLM_DP_SPEC_SINCE} and later"
            )
    return list(dict.fromkeys(notes))


def eager_drafter_notes(architecture: str) -> list[str]:
    """Where vLLM drafts ``architecture``'s MTP layers with a class it runs without CUDA graphs
    (simspec/data/draft_graphs.yaml): in every release read, or before the one that decorated
    it. simspec prices the drafter as graphed, so the speedup is an upper bound there."""
    table = packaged_table("draft_graphs.yaml")["vllm"]
    entry = table["mtp"].get(architecture)
    if entry is None:
        return []
    since = entry.get("compiled_since")
    when = (
        f"in every release read (through {table['read_through']})"
        if since is None
        else f"before {since}"
    )
    return [
        f"note: vLLM runs {architecture}'s MTP drafter ({entry['drafter']}) without CUDA graphs "
        f"{when}: each draft forward launches its kernels from Python, where simspec prices it "
        "as a graphed drafter (no eager MoE drafter's host time is measured), so the MTP "
        "speedup there is an upper bound (simspec/data/draft_graphs.yaml)"
    ]


def _acceptance_part(model: str, methods: list[MethodConfig]) -> str:
    """Methods grouped by the model their acceptance was measured on."""
    groups: dict[str, list[str]] = {}
    for m in methods:
        if m.name == "autoregressive" or m.acceptance is None:
            continue
        name = m.name + _qualifier(m.acceptance, m.k) + _borrowed(m)
        where = _measured_on(m, model)
        if name not in groups.setdefault(where, []):
            groups[where].append(name)
    if not groups:
        return "plain decoding (no acceptance)"
    return "; ".join(where.format(", ".join(names)) for where, names in groups.items())


def _borrowed(m: MethodConfig) -> str:
    """ " (KEY's records)" for a method replaying another method's records of a user's trace
    file (QA: the page read "eagle3, ngram acceptance from 'mytrace.jsonl'" while ngram
    replayed eagle3's records, said only in the CSV)."""
    acc = m.acceptance
    if acc is None or acc.acc_len is None or acc.acc_len in packaged_traces():
        return ""
    key = acc.acc_len_method
    return f" ({key}'s records)" if key and key != m.name else ""


def _measured_on(m: MethodConfig, model: str) -> str:
    """Whose acceptance ``m`` runs, as a template for the methods' names: "own {}
    acceptance" (measured on this model), "llama-3.1-8b's {} acceptance", "given {}
    acceptance" or "{} acceptance from FILE"."""
    acc = m.acceptance
    assert acc is not None  # the caller skips methods without one
    trace = acc.acc_len or acc.tokens
    if trace is not None and trace not in packaged_traces():
        return "{} acceptance from " + shown(Path(trace).name).replace("{", "{{").replace("}", "}}")
    origin = acceptance_model(m.name, acc)
    if origin is None:
        return "given {} acceptance"
    return "own {} acceptance" if origin == preset_id(model) else origin + "'s {} acceptance"


def _qualifier(acc: AcceptanceConfig, k: int | None = None) -> str:
    """What the preset stands in for, in a word, from the labels its source carries. A
    profile measured to ``sourced_k`` positions and extrapolated beyond is "extrapolated" only
    for a run that drafts deeper (``k``; QA: MTP at K = 1 had read extrapolated)."""
    source = acc.source
    if source.startswith("proxy"):
        return " (proxy)"
    if acc.sourced_k is not None and k is not None:
        if k > acc.sourced_k:
            return " (extrapolated)"
    elif "extrapolat" in source:
        return " (extrapolated)"
    if "(only preset:" in source or "(overall: no" in source:
        return " (other domain)"
    if source.startswith("measured with a different draft pair"):
        return " (other draft)"
    return ""


def acceptance_model(method: str, acc: AcceptanceConfig) -> str | None:
    """The target model a packaged acceptance was measured on (a preset's ``target_model``),
    or None for an acceptance the user gave (no preset's source is in its own)."""
    if acc.acc_len in packaged_traces() or acc.tokens in packaged_traces():
        return _traces_model()
    if TRACES_SOURCE in acc.source:  # a packaged trace read as a tree's chain α
        return _traces_model()
    if not acc.source:
        return None
    names = [method, *([PROXIES[method][0]] if method in PROXIES else [])]
    for entry in (e for name in names for e in _entries(name)):
        if entry.get("source") and entry["source"] in acc.source and entry.get("target_model"):
            return str(entry["target_model"])
    return None


def _entries(method: str) -> list[dict]:
    """A method's presets and their alternatives (each may name its target_model)."""
    presets = (method_presets().get(method) or {}).get("presets") or {}
    out = []
    for preset in presets.values():
        out.append(preset)
        out += [a for a in preset.get("alternatives") or [] if isinstance(a, dict)]
    return out


@cache
def _traces_model() -> str | None:
    """The target the packaged acceptance traces were recorded on: the target_model of the
    presets that replay them."""
    for entry in method_presets().values():
        for preset in (entry.get("presets") or {}).values():
            if ("acc_len" in preset or "tokens" in preset) and preset.get("target_model"):
                return str(preset["target_model"])
    return None


def deployment_fitted_on(profile: HardwareProfile) -> tuple[str, int] | None:
    """The (model, tp) a profile's deployment constants were fitted on (``calibrate bench``
    records them), or None where it has none or does not say."""
    fit = profile.deployment.fit if profile.deployment is not None else {}
    model, tp = fit.get("model"), fit.get("tp")
    if isinstance(model, str) and isinstance(tp, int):
        return model, tp
    return None


def _profile_part(deploy: Deployment) -> str:
    """How the hardware profile was obtained: fitted on the GPU, or transferred from another."""
    profile = load_profile(deploy.profile or deploy.gpu)
    sources: dict[str, list[str]] = {}
    for op, fit in profile.fit.items():
        if "transferred_from" in fit:
            sources.setdefault(str(fit["transferred_from"]), []).append(op)
    own = profile.gpu == deploy.gpu
    name = f"{profile.gpu} profile" + ("" if own else f" on {deploy.gpu}")
    if deploy.profile is not None and deploy.profile != profile.gpu:
        # a file the user gave (QA: a calibrate bench profile read "h100_sxm's own profile"):
        # named, with what it is (its status says fitted or to benchmark runs, or suspect)
        name = f"profile {shown(deploy.profile)} ({profile.gpu}: {profile.status or 'no status'})"
        if not own:  # QA: another GPU's profile ran without a word that it is another's
            name += f", fitted on {profile.gpu} and applied to {deploy.gpu}'s datasheet peaks"
        if (fitted := deployment_fitted_on(profile)) and fitted != (deploy.model, deploy.tp):
            # a deployment's host constants are that server's (QA: fitted on qwen3-8b at tp=1,
            # they ran under llama-3.1-70b at tp=4 without a word)
            name += (
                f"; its deployment constants fitted on {fitted[0]} at tp={fitted[1]}, applied "
                f"to {deploy.model} at tp={deploy.tp}"
            )
    elif profile.status.startswith("suspect"):  # constants pinned at their ranges' edges
        name = f"{name} ({profile.status})"
    if not sources:
        return f"{profile.gpu}'s own profile" if own and name == f"{profile.gpu} profile" else name
    if len(sources) == 1 and len(next(iter(sources.values()))) == len(profile.fit):
        return f"{name} from {next(iter(sources))}"
    parts = [f"{', '.join(ops)} from {src}" for src, ops in sources.items()]
    return f"{name}: {'; '.join(parts)}"


def _validation_part(model: ModelShape) -> str:
    """How many packaged validation cases ran this model, else models of its architecture."""
    counts = _validation_counts()
    own = counts.get(model.id, 0)
    if own:
        return f"{own} validation cases of this model"
    family = sum(n for target, n in counts.items() if _architecture(target) == model.model_type)
    if family:
        return f"no validation case of this model, {family} of {model.model_type} models"
    return f"no validation case of any {model.model_type} model"


@cache
def _validation_counts() -> dict[str, int]:
    from simspec.studies.validation.cases import read_cases

    return dict(Counter(read_cases()["target_model"]))


@cache
def _architecture(target: str) -> str | None:
    """A validation case's target as an architecture (None for a target that is no preset)."""
    try:
        return load_model(target).model_type
    except InputError:
        return None
