"""What a model is, in the few facts a user checks before trusting a prediction: parameters
(total and active per token), attention, expert layout, MTP modules, weight precision, KV cache
per token and the GPUs it needs (``simspec models``, the sweep's header, the explorer)."""

from __future__ import annotations

import dataclasses

from simspec.catalog.expert_locality import adjacent_expert_reuse, reuse_origin
from simspec.catalog.hardware import load_engine, load_gpu
from simspec.catalog.models import ModelShape, load_model
from simspec.catalog.precision import (
    engine_kv_cache_dtype,
    kv_cache_bytes,
    load_precision,
)
from simspec.catalog.servers import cross_node_note
from simspec.engine.build import (
    check_attention_tp,
    check_dp_attention,
    check_engine_gpu,
    check_engine_model,
    check_ep,
    check_fp8_blocks,
    check_linear_layers,
    context_refused,
    with_memory_share,
)
from simspec.engine.kv_cache import (
    GIB,
    MAX_GPUS,
    MIN_KV_TOKENS,
    MemoryDemand,
    min_gpus,
    mxfp4_pad_bytes,
    plan_memory,
    uniform_kv,
    uniform_kv_reason,
)
from simspec.engine.layout import BLOCK_CHECKED_ENGINES, ParallelLayout
from simspec.engine.memory_share import engine_share, sglang_vision_factor
from simspec.errors import ScenarioError


def billions(n: float) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def summary_line(model: ModelShape, deployed: str | None = None) -> str:
    """One line: total and active parameters, layout, precision (the ``deployed`` one where a
    deployment names it, else the checkpoint's)."""
    parts = [f"{billions(model.num_params)} parameters"]
    if model.is_moe:
        parts.append(f"{billions(model.active_params)} active per token")
    parts.append(layout(model))
    parts.append(f"{precision(model, deployed)} weights")
    if model.num_nextn_predict_layers:
        parts.append(f"{model.num_nextn_predict_layers} MTP module(s)")
    return f"{model.id}: " + ", ".join(parts)


def layout(model: ModelShape) -> str:
    if not model.is_moe:
        return f"dense, {model.attention_kind}"
    moe = model.moe_layers_in()
    return (
        f"MoE {model.num_experts} experts top {model.num_experts_per_tok} on {moe} of "
        f"{model.num_hidden_layers} layers, {model.attention_kind}"
    )


def precision(model: ModelShape, deployed: str | None = None) -> str:
    """The weights' precision: ``deployed`` (a deployment's --precision, which the experts
    follow too: simspec.engine.build) where given, else the checkpoint's."""
    if deployed is not None:
        return deployed
    expert = model.expert_weight_dtype
    if expert and expert != model.weight_dtype:
        return f"{model.weight_dtype} (experts {expert})"
    return model.weight_dtype


def model_facts(
    ref: str,
    gpu_id: str = "h100_sxm",
    engine_id: str = "vllm",
    layout: ParallelLayout | None = None,
    weight_precision: str | None = None,
    kv_cache_dtype: str = "auto",
    mode: str = "null",
) -> list[tuple[str, str]]:
    """(label, value) pairs describing model ``ref`` and what it needs of ``gpu_id`` GPUs;
    with ``layout`` (its style is the engine's), what each GPU holds in that layout, its
    weights at ``weight_precision`` (None: the checkpoint's) and its KV cache in
    ``kv_cache_dtype``, served in ``mode`` (Deployment.disaggregation_mode)."""
    model = load_model(ref)
    gpu, engine = load_gpu(gpu_id), load_engine(engine_id)
    check_engine_gpu(engine, gpu)
    check_engine_model(engine, model, gpu, weight_precision)
    if layout is not None:  # the layouts a run refuses, refused here by the same names
        check_ep(model, layout.ep, engine)
        check_attention_tp(model, layout.tp, layout.dp)
        lay = ParallelLayout(layout.tp, layout.ep, layout.dp, engine.dp_attention)
        check_fp8_blocks(model, lay, engine, weight_precision)
        check_dp_attention(layout.dp, engine.id, engine.dp_attention, model)
        check_linear_layers(model, engine.id, layout.dp)
    facts = [("model", model.id), ("architecture", model.model_type)]
    facts.append(("parameters", f"{billions(model.num_params)} total"))
    if model.is_moe:
        without = model.active_params - model.embedding_params
        facts.append(
            (
                "active per token",
                f"{billions(model.active_params)} ({billions(without)} without the embedding "
                "table)",
            )
        )
    facts.append(("layers", _layers(model)))
    facts.append(("attention", _attention(model)))
    if model.is_moe:
        facts.append(("experts", _experts(model)))
    mtp = model.num_nextn_predict_layers
    unserved = f"none run as drafts: {model.mtp_unserved}" if model.mtp_unserved else "none"
    facts.append(("MTP modules", f"{mtp} (num_nextn_predict_layers)" if mtp else unserved))
    facts.append(("weights", precision(model, weight_precision)))
    if model.vision_tower is not None:
        layers, hidden = model.vision_tower
        # QA: a multimodal config read through its text_config left the tower out unsaid
        facts.append(
            (
                "vision tower",
                f"{layers} layers of {hidden} (vision_config): not run, its weights not "
                "counted (simspec serves text only; SGLang's default share is lowered for it, "
                "below); vLLM loads it unless --limit-mm-per-prompt sets every modality to 0, "
                "leaving that much less for the KV cache",
            )
        )
    # the engine's own FP8 cache for a sparse-attention model at auto, as the layout says it
    run_dtype = engine_kv_cache_dtype(kv_cache_dtype, engine.family, model.is_sparse, gpu.arch)
    facts.append(("KV cache per token", _kv(model, run_dtype)))
    if model.linear_layers:
        facts.append(("recurrent state per sequence", _recurrent_state(model, engine)))
    facts.append(("GPUs needed", _gpus(model, gpu, engine, weight_precision)))
    if layout is not None:
        facts += layout_facts(model, gpu, engine, layout, weight_precision, kv_cache_dtype, mode)
    if model.source:
        facts.append(("source", model.source))
    return facts


def _layers(model: ModelShape) -> str:
    n, moe = model.num_hidden_layers, model.moe_layers_in()
    if not moe:
        return f"{n} dense"
    return f"{n}: {n - moe} dense, {moe} MoE"


def _attention(model: ModelShape) -> str:
    if model.is_mla:
        text = (
            f"MLA, {model.num_attention_heads} heads; one latent of {model.kv_lora_rank} + "
            f"{model.qk_rope_head_dim} per token and layer shared by all heads"
        )
        if model.is_sparse:
            text += (
                f"; sparse: an indexer of {model.index_n_heads} x {model.index_head_dim} picks "
                f"the top {model.index_topk} past tokens per query"
            )
        return text
    kind = model.attention_kind.split(", Gated DeltaNet")[0]  # said in full below
    text = (
        f"{kind}, {model.num_attention_heads} query / "
        f"{model.num_key_value_heads} KV heads of {model.head_dim}"
    )
    if model.attn_output_gate:
        text += ", output gate"
    if model.linear_layers:
        full = model.num_hidden_layers - len(model.linear_layers)
        text += (
            f" on {full} layers; {len(model.linear_layers)} Gated DeltaNet layers of "
            f"{model.linear_num_key_heads} key / {model.linear_num_value_heads} value heads of "
            f"{model.linear_key_head_dim} / {model.linear_value_head_dim}, conv1d of "
            f"{model.linear_conv_kernel_dim} taps"
        )
    return text


def _experts(model: ModelShape) -> str:
    text = (
        f"{model.num_experts} routed of width {model.moe_intermediate_size}, top "
        f"{model.num_experts_per_tok}"
    )
    if model.shared_expert_intermediate_size:
        text += f", shared MLP of {model.shared_expert_intermediate_size}"
    text += f"; dense MLP {model.intermediate_size}"
    if reuse := adjacent_expert_reuse(model.id):
        origin = reuse_origin(model.id)
        basis = "measured" if origin is None else f"transferred from {origin}"
        text += (
            f"; router reuses {reuse * 100:.0f} % of the previous token's experts ({basis}: "
            "simspec/data/expert_locality.yaml)"
        )
    return text


def _kv(model: ModelShape, kv_dtype: str = "auto") -> str:
    """K and V per token at tp=1, in the cache's dtype (``auto``: the model's bf16), and the
    format the checkpoint states for it where ``auto`` does not run that."""
    text = _kv_bytes(model, kv_dtype)
    if kv_dtype == "auto" and model.kv_cache_quant:
        text += (
            f"; the checkpoint states {model.kv_cache_quant.upper()} (ModelOpt "
            "kv_cache_quant_algo), as vLLM serves it by default: --kv-cache-dtype fp8"
        )
    return text


def _kv_bytes(model: ModelShape, kv_dtype: str) -> str:
    """:func:`_kv`'s figure itself."""
    nbytes = kv_cache_bytes(kv_dtype)
    dtype = "bf16" if kv_dtype == "auto" else kv_dtype
    kib = model.kv_bytes_per_token_per_gpu(1, dtype_bytes=nbytes) / 1024
    if model.is_sparse:
        return (
            f"{kib:.1f} KiB in {dtype} (the latent, and the indexer's "
            f"{model.indexer_cache_bytes_per_token}-byte FP8 key per layer: the same on every "
            "GPU under TP)"
        )
    if model.is_mla:
        return f"{kib:.1f} KiB in {dtype} (the latent: the same on every GPU under TP)"
    if model.sliding_layers:
        # both kinds named with their bytes (QA: a model windowed in every layer read "0.0 KiB")
        full = model.num_hidden_layers - len(model.sliding_layers) - len(model.linear_layers)
        window = model.window_kv_bytes_per_token_per_gpu(1, dtype_bytes=nbytes) / 1024
        return (
            f"{kib:.1f} KiB in {dtype} at tp=1 in the {full} full-attention layers, and "
            f"{window:.1f} KiB in the {len(model.sliding_layers)} windowed layers, which hold "
            f"at most {model.sliding_window} tokens per sequence (KV heads split over TP)"
        )
    return f"{kib:.1f} KiB in {dtype} at tp=1 (KV heads split over TP)"


def _recurrent_state(model: ModelShape, engine) -> str:
    """The Gated DeltaNet layers' fixed state per sequence, whatever its context."""
    from simspec.engine.costmodel.linear_attention import ssm_state_bytes

    width = ssm_state_bytes(model, engine.family)
    ssm, conv = model.linear_state_bytes_per_gpu(1, width)
    return (
        f"{(ssm + conv) / 2**20:.1f} MiB at tp=1 in the {len(model.linear_layers)} Gated "
        f"DeltaNet layers (SSM {model.linear_num_value_heads} x "
        f"{model.linear_value_head_dim} x {model.linear_key_head_dim} per layer in "
        f"{'fp32' if width == 4 else 'bf16'} as {engine.id} keeps it, conv window "
        f"{model.linear_conv_kernel_dim - 1} x {model.linear_conv_dim} in bf16), whatever its "
        "context; no KV in those layers; under speculative decoding one more per verify "
        "position"
    )


def _gpus(model: ModelShape, gpu, engine, weight_precision: str | None = None) -> str:
    """The fewest GPUs that hold ``model`` at ``weight_precision`` (None: the checkpoint's)."""
    nbytes = None if weight_precision is None else load_precision(weight_precision).weight_bytes
    need = min_gpus(gpu, engine, model, weight_bytes=nbytes, expert_bytes=nbytes)
    if need is None:
        if weight_precision is None and engine.family in BLOCK_CHECKED_ENGINES:
            refused = [
                n
                for n in (2**i for i in range(1, MAX_GPUS.bit_length()))
                if ParallelLayout(n, style=engine.dp_attention).block_refusal(model)
            ]
            if refused:  # past some tp its FP8 scale blocks split
                why = ParallelLayout(refused[0]).block_refusal(model) or ""
                whole = "; try ep = tp (--tp N --ep N)" if "routed experts" in why else ""
                return (
                    f"more than tp={refused[0] // 2} on {gpu.id}: its FP8 scale blocks stop "
                    f"tp={refused[0]} and above ({why}){whole}"
                )
        limit = model.largest_attention_tp(MAX_GPUS)
        if limit < MAX_GPUS:  # past the heads, tensor parallelism stops
            return (
                f"more than tp={limit} on {gpu.id}, the most GPUs its "
                f"{model.num_attention_heads} attention heads split over (engines refuse "
                "more): shard it another way, or at a smaller precision"
            )
        return f"more than {MAX_GPUS} {gpu.id}"
    weights = model.weight_bytes_per_gpu(need, 1, nbytes, nbytes)
    weights = (weights + mxfp4_pad_bytes(model, engine, gpu, need, 1, nbytes)) / GIB
    share = engine_share(engine, gpu, model, tp=need, chunk=engine.batch_defaults(gpu)[1])
    name = "mem_fraction_static" if engine.flag("mem_fraction_by_reserve") else (
        # TRT-LLM's share is of what the weights and activations leave (QA: labelled as vLLM's)
        "kv_cache_free_gpu_memory_fraction" if engine.flag("kv_memory_of_free")
        else "gpu_memory_utilization"
    )  # fmt: skip
    servers = ""
    if need > gpu.gpus_per_node:  # QA: only --tp said that such a tp spans servers
        servers = (
            f"; {need} GPUs span {-(-need // gpu.gpus_per_node)} servers, whose all-reduces "
            "simspec prices at one server's interconnect, not the network between them (a "
            "lower bound; engines usually run "
            "tp = GPUs per server and pipeline stages across servers, which simspec models "
            "for hf only)"
        )
    return (
        f"{need} x {gpu.id} at the least (tp={need}: {weights:.1f} GiB of weights per GPU"
        f"{f' in {weight_precision}' if weight_precision else ''}, "
        f"plus activations and KV for one {MIN_KV_TOKENS:,}-token sequence, at "
        f"{name} {share:g}){servers}"
    )


def layout_facts(
    model: ModelShape,
    gpu,
    engine,
    layout: ParallelLayout,
    weight_precision: str | None = None,
    kv_cache_dtype: str = "auto",
    mode: str = "null",
) -> list[tuple[str, str]]:
    """What one GPU holds in ``layout`` (weights by part at ``weight_precision``, the checkpoint's
    when None, as a deployment's precision sets every linear layer and expert; KV per token
    in ``kv_cache_dtype``) and the tokens the replica's KV cache then holds, at the engine's
    default limits (no draft)."""
    lay = ParallelLayout(layout.tp, layout.ep, layout.dp, engine.dp_attention)
    name = f"tp={lay.tp}" + (f", ep={lay.ep}" if lay.ep > 1 else "")
    if lay.dp > 1:
        name += f", dp={lay.dp} (attention over {lay.attn_tp} GPU(s) per rank, {engine.id})"
    nbytes = None if weight_precision is None else load_precision(weight_precision).weight_bytes
    # the engine's own FP8 cache for a sparse-attention model at auto (QA)
    kv_dtype = engine_kv_cache_dtype(kv_cache_dtype, engine.family, model.is_sparse, gpu.arch)
    kv_bytes = kv_cache_bytes(kv_dtype)
    parts = lay.weight_parts(model, nbytes, nbytes)
    # the tiles vLLM pads gpt-oss's MXFP4 experts to, which the memory plan counts (QA: tp 8
    # and ep 8 printed one breakdown beside KV caches 0.47 GiB apart)
    if pad := mxfp4_pad_bytes(model, engine, gpu, lay.tp, lay.ep, nbytes):
        parts = {**parts, "MXFP4 tile padding": pad}
    shown = ", ".join(f"{k} {v / GIB:.2f}" for k, v in parts.items() if v)
    held_in = f" in {weight_precision}" if weight_precision else ""
    facts = [
        (
            f"per GPU at {name}",
            f"weights {sum(parts.values()) / GIB:.1f} GiB{held_in} ({shown})",
        )
    ]
    kv = model.kv_bytes_per_token_per_gpu(lay.attn_tp, dtype_bytes=kv_bytes)
    held = "each rank caches its own requests" if lay.dp > 1 else "every GPU caches every request"
    if uniform_kv(engine, model, mode):
        # the windowed layers cache every token too: the pool's tokens cost theirs as well
        # (QA: Llama-4 Maverick showed 6.0 KiB, the full-attention layers', beside a capacity
        # counted at 24.0)
        kv += model.window_kv_bytes_per_token_per_gpu(lay.attn_tp, dtype_bytes=kv_bytes)
        held += ", every layer every token"
    kv_name = "bf16" if kv_dtype == "auto" else kv_dtype  # auto: the activations' bf16
    facts.append(("KV per token per GPU", f"{kv / 1024:.1f} KiB in {kv_name} ({held})"))
    scale = lay.dp if engine.dp_attention == "vllm" else 1  # vLLM's limits are per DP rank
    seqs, tokens = engine.batch_defaults(gpu)
    demand = MemoryDemand(0.0, 0.0, tokens * scale, seqs * scale, seqs * scale)
    demand = dataclasses.replace(demand, uniform_kv=uniform_kv(engine, model, mode))
    share = engine_share(
        engine, gpu, model, tp=lay.tp, chunk=tokens * scale, dp=lay.dp, ep=lay.ep, pd_mode=mode
    )
    try:
        plan = plan_memory(
            gpu,
            with_memory_share(engine, share),
            model,
            demand,
            lay.tp,
            1,
            lay.ep,
            nbytes,
            kv_bytes,
            nbytes,
            lay.dp,
        )
    except ScenarioError as exc:  # does not fit: said as the layout's KV cache fact
        facts.append(("KV cache", str(exc)))
        return facts
    tokens = plan.num_blocks * plan.block_size
    ranks = f" in all ({tokens // lay.dp:,} per rank)" if lay.dp > 1 else ""
    # the windowed layers' share of the pool when every running sequence holds a full window
    windowed = (
        f"; the windowed layers hold {plan.window_bytes / GIB:.1f} GiB per GPU of it"
        if plan.window_bytes
        else ""
    )
    if plan.uniform_kv:  # vLLM's hybrid KV cache manager off: the windows cache every token
        windowed = (
            f"; every layer caches every token (vLLM's hybrid KV cache manager is off here: "
            f"{uniform_kv_reason(mode)}), the windowed layers {plan.window_bytes / GIB:.1f} GiB "
            "per GPU of it"
        )
    if plan.window is not None:  # vLLM V1's hybrid pool: windows and states leave it as
        # sequences run
        parts = []
        if plan.window.per_seq:
            parts.append(
                f"the windowed layers hold up to {plan.window_bytes / GIB:.1f} GiB per GPU of it "
                f"when {demand.max_seqs:,} sequences each keep a full window"
            )
        if plan.window.fixed:
            parts.append(
                f"each running sequence's recurrent states take {plan.window.fixed} blocks of "
                f"it ({plan.state_bytes / GIB:.1f} GiB per GPU for {demand.max_seqs:,})"
            )
        windowed = "; " + ", and ".join(parts) + ", taken sequence by sequence"
    facts.append(
        (
            "KV cache",
            f"{tokens:,} tokens{ranks}"
            + (" of the full-attention layers" if plan.window is not None else "")
            + ", "
            + (
                f"SGLang's share {share:.4g} less the weights"
                + (
                    f" (its default lowered x{vision:.3f} for the vision tower, "
                    "adjust_mem_fraction_for_vlm)"
                    if (vision := sglang_vision_factor(model)) != 1.0
                    else ""
                )
                if engine.flag("activations_in_share")
                else f"after {plan.activation_bytes / GIB:.1f} GiB of activations per GPU"
            )
            + windowed,
        )
    )
    context = model.max_position_embeddings
    refused = context_refused(model, plan, context)
    if engine.flag("context_must_fit_kv") and refused is not None:  # as a run is refused
        facts.append(
            (
                "Context",
                f"vLLM will not start at {model.id}'s {context:,}-token context here (its KV "
                f"holds {refused:,} per rank): give --max-model-len {refused} or less",
            )
        )
    if note := cross_node_note(gpu, lay.tp, lay.ep, engine.id):
        facts.append(("Servers", note))
    return facts
