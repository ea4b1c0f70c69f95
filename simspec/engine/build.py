"""Build one replica from a scenario: its cost model, speculator, scheduler limits, memory plan
and acceptance sampler, with every check that can refuse the scenario before anything runs.

A single run (:mod:`simspec.engine.simulation`) and a fleet (:mod:`simspec.engine.fleet`)
build each replica with these same steps, so a fleet of one replica is a single run, request
for request.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from simspec.catalog.hardware import (
    EngineProfile,
    GpuSpec,
    Sourced,
    load_alltoall,
    load_engine,
    load_gpu,
    load_profile,
)
from simspec.catalog.methods import (
    draft_target_refusal,
    engine_picked_shape,
    engine_refuses,
    sampled_from_trace,
    stated_topk,
)
from simspec.catalog.models import BYTES_PER_PARAM, ModelShape, load_model
from simspec.catalog.precision import (
    PrecisionSpec,
    check_engine_runs,
    effective_precision,
    engine_kv_cache_dtype,
    kv_cache_bytes,
    load_precision,
)
from simspec.catalog.sampling import factor
from simspec.config import Deployment, LengthSpec, Scenario, SchedulerConfig, WorkloadConfig
from simspec.engine.acceptance.inversion import run_alpha_profile
from simspec.engine.acceptance.samplers import AcceptanceSampler, build_sampler
from simspec.engine.costmodel import BatchShape, RooflineCostModel
from simspec.engine.kv_cache import MAX_GPUS, MemoryPlan, plan_memory, uniform_kv
from simspec.engine.layout import BLOCK_CHECKED_ENGINES, ParallelLayout
from simspec.engine.memory_share import engine_share
from simspec.engine.replica import ReplicaSetup
from simspec.engine.requests import RequestTable
from simspec.engine.speculators import Speculator, build_speculator
from simspec.engine.speculators.draft_model import DraftModel
from simspec.engine.speculators.lookup import LookupSpeculator
from simspec.engine.workload import generate_requests
from simspec.errors import InputError, ScenarioError

# the orders a disaggregated deployment runs its prefill and KV transfer in, one per engine
# (engines.yaml): SGLang's decode instance preallocates first, vLLM's and TRT-LLM's pull after
# admitting (simspec.engine.disaggregation)
PD_ORDERS = ("pd_prealloc_before_prefill", "pd_pull_after_admission")


def no_pd(engine: EngineProfile) -> str:
    """Why ``engine`` runs no decode instance here: none in the engine (HF, gpt-fast), or one
    whose order of prefill and KV transfer simspec does not model (its pd_disaggregation
    source says how it runs: vLLM V0)."""
    why = engine.params.get("pd_disaggregation")
    if why is None:
        return (
            f"engine {engine.id} runs no prefill/decode-disaggregated deployment (engines.yaml "
            "pd_disaggregation)"
        )
    return f"engine {engine.id}'s decode instance is not modelled: {' '.join(why.source.split())}"


def deployed_engine(sc: Deployment) -> EngineProfile:
    """The deployment's engine profile as its scheduler settings run it (async scheduling)."""
    return load_engine(sc.engine).with_async_scheduling(sc.scheduler.async_scheduling)


def build_cost_model(sc: Scenario, target: ModelShape | None = None) -> RooflineCostModel:
    gpu, engine = load_gpu(sc.gpu), deployed_engine(sc)
    latency, bandwidth, basis = load_alltoall(sc.gpu)
    if basis != "measured":  # a share of the GPU's link: on a mesh, of the links to its peers
        bandwidth *= gpu.link_bytes_s(sc.ep) / gpu.interconnect_bandwidth_bytes_s
    target = target or load_model(sc.model)
    check_attention_tp(target, sc.tp, sc.dp)
    precision = weight_precision(sc, target)
    experts = expert_precision(sc, target, precision)
    layout = ParallelLayout(sc.tp, sc.ep, sc.dp, engine.dp_attention)
    check_fp8_blocks(target, layout, engine, sc.precision)
    field = "precision" if sc.precision is not None else "model.quantization_config"
    for spec in (precision, experts):
        if spec is not None:  # a precision this engine has no kernel for on this GPU
            check_engine_runs(spec, gpu, sc.engine, field)
    return RooflineCostModel(
        gpu,
        load_profile(sc.profile or sc.gpu),
        engine,
        sc.tp,
        pp=sc.pp,
        ep=sc.ep,
        alltoall=(latency, bandwidth),
        precision=None if precision.name == "bf16" else precision,
        precision_model=target.id,
        kv_bytes=kv_cache_bytes(
            engine_kv_cache_dtype(sc.kv_cache_dtype, engine.family, target.is_sparse, gpu.arch)
        ),
        expert_precision=experts,
        speculative=overlap_off(sc, engine, target),
        dp=sc.dp,
        graph_max_tokens=graph_tokens_cap(sc, engine, gpu),
    )


def overlap_off(sc: Scenario, engine: EngineProfile, target: ModelShape) -> bool:
    """Whether the scenario's method turns the engine's overlap scheduler off: any method
    outside its ``overlap_spec_methods``, and under one a tree given wider than
    ``overlap_topk_max`` (SGLang spec v2: an explicit top-k > 1 runs spec v1; the engine's
    own shape for the model, picked after that check, keeps it); and SGLang's radix cache over
    Gated DeltaNet states (:func:`mamba_no_buffer`), which turns it off for every method."""
    if engine.overlap_off_by(sc.method.name):
        return True
    if mamba_no_buffer(sc, engine, target):
        return True
    return explicit_wide_tree(sc, engine, target)


def prefix_caching(sc: Scenario, engine: EngineProfile, target: ModelShape) -> bool:
    """Whether the replica keeps prompts' KV cached (vLLM --enable-prefix-caching, SGLang's
    radix cache): the deployment's setting, else the engine's default (an engine without the
    parameter has none; vLLM's is off for a model with Gated DeltaNet layers). SGLang refuses
    speculation over Gated DeltaNet states with its radix cache on (engines.yaml
    ``mamba_no_buffer``): a deployment that asks for both is refused, and one that leaves it
    unset runs as the server only starts, with --disable-radix-cache."""
    stated = sc.scheduler.enable_prefix_caching
    if sc.disaggregation_mode == "decode" and engine.flag("pd_decode_chunk_cache"):
        return False  # SGLang's decode server: a chunk cache whatever was asked
    spec_refuses = (
        engine.flag("mamba_no_buffer")
        and bool(target.linear_layers)
        and sc.method.name != "autoregressive"
    )
    if spec_refuses:
        if stated:
            raise InputError(
                "scheduler.enable_prefix_caching",
                f"SGLang refuses speculative decoding on {target.architecture} with its "
                "radix cache on (mamba no_buffer: ServerArgs._handle_mamba_radix_cache, 0.5.10): "
                "set it false (--disable-radix-cache)",
            )
        return False
    if stated is not None:
        return stated
    param = engine.params.get("prefix_caching")
    if target.linear_layers and "prefix_caching_linear_attention" in engine.params:
        param = engine.params["prefix_caching_linear_attention"]  # vLLM: off for them
    return bool(param is not None and param.value)


def mamba_no_buffer(sc: Scenario, engine: EngineProfile, target: ModelShape) -> bool:
    """Whether SGLang's no_buffer strategy turns the overlap scheduler off for a model with
    Gated DeltaNet layers (engines.yaml ``mamba_no_buffer``): with the radix cache asked for,
    as a decode instance asks it before its chunk cache replaces it (``pd_decode_chunk_cache``:
    that instance then runs every state slot, :func:`prefix_caching`)."""
    if not (engine.flag("mamba_no_buffer") and target.linear_layers):
        return False
    asked = sc.scheduler.enable_prefix_caching
    return asked is not False and sc.method.name == "autoregressive"


def explicit_wide_tree(sc: Scenario, engine: EngineProfile, target: ModelShape) -> bool:
    """Whether the method drafts a tree wider than the engine's ``overlap_topk_max`` in a
    shape other than the one the engine picks for the model itself."""
    limit, m = engine.overlap_topk_max, sc.method
    if limit is None or m.name == "autoregressive" or m.tree in (None, "chain"):
        return False
    # the top-k the tree drafts with, stated or not (QA: 16 nodes at depth 4 drafts at 10)
    if stated_topk(m.tree_topk, m.tree_nodes or m.k, m.k) <= limit:
        return False
    picked = engine_picked_shape(m.name, engine.id, target.architecture)
    return not (picked and picked[0] and m.model_dump(include=set(picked[0])) == picked[0])


def batch_limits(sc: Scenario, engine: EngineProfile, gpu: GpuSpec) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) of one engine core: the deployment's, else the
    engine's defaults on ``gpu`` (for the method: SGLang's 48 under speculation), an unset
    max_num_seqs lowered to the budget where the engine does so (vLLM V1:
    engines.yaml default_seqs_within_budget)."""
    return scheduler_limits(engine, gpu, sc.scheduler, sc.method.name)


def scheduler_limits(
    engine: EngineProfile, gpu: GpuSpec, scheduler: SchedulerConfig, method: str
) -> tuple[int, int]:
    """:func:`batch_limits` of ``scheduler``'s settings for ``method``, without a scenario (a
    sweep's notes ask it of its engine's defaults)."""
    seqs = engine.max_seqs_for(method, scheduler.max_num_seqs, gpu)
    tokens = int(scheduler.max_num_batched_tokens or engine.batch_defaults(gpu)[1])
    if scheduler.max_num_seqs is None and engine.flag("default_seqs_within_budget"):
        seqs = min(seqs, tokens)  # V1 lowers its default to the budget
    return seqs, tokens


def graph_tokens_cap(sc: Scenario, engine: EngineProfile, gpu: GpuSpec) -> float | None:
    """vLLM V1's largest CUDA graph for this deployment, min(max_num_seqs x (1 + K) x 2,
    max_num_batched_tokens) (engines.yaml graph_size_from_max_num_seqs; the engine's own 512
    caps it in graph_limits); None where the engine sizes its graphs otherwise."""
    if not engine.flag("graph_size_from_max_num_seqs"):
        return None
    seqs, budget = batch_limits(sc, engine, gpu)
    m = sc.method
    drafts = 0 if m.name == "autoregressive" else len(m.tree_paths or ()) or m.tree_nodes or m.k
    return float(min(seqs * (1 + drafts) * 2, budget))


def draft_cost_model(
    sc: Scenario, target: ModelShape, cost: RooflineCostModel
) -> RooflineCostModel | None:
    """The draft's own cost model where it runs on fewer GPUs than the target (``draft_tp``
    below ``tp``): vLLM V0's SmallerTpProposerWorker runs the draft network on rank 0 alone,
    whole, in a TP group of its own (engines.yaml draft_tp_below_target), so its forwards
    are priced on draft_tp GPUs with no expert or attention data parallelism. None: the draft
    runs at the target's tensor parallelism, under ``cost``."""
    if not check_draft_tp(sc):
        return None
    alone = sc.model_copy(update={"tp": sc.method.draft_tp, "ep": 1, "dp": 1, "pp": 1})
    return build_cost_model(alone, target)


def check_draft_model(sc: Scenario, target: ModelShape, spec: DraftModel) -> None:
    """A separate draft model as the engines run it: within the context the deployment
    serves, and at its own checkpoint's precision.

    vLLM V1 stops drafting for a whole batch once one of its sequences passes the draft's
    context (gpu_model_runner ``_input_fits_in_drafter``, vLLM PR #24662; TensorRT-LLM stops
    drafting for those requests, PR #4879), which simspec does not model: a draft whose
    context is shorter than the deployment's is refused by name (QA: vicuna-68m's 2,048
    positions drafted for Llama-2-7B's 3,500-token requests at 1.6x). Its weights run at the
    precision its config.json stores them in (vLLM loads a draft with its own
    quantization_config; QA: an FP8 draft was priced in bf16, to the digit)."""
    draft, context = spec.draft, max_model_len(sc, target)
    if draft.max_position_embeddings < context:
        raise InputError(
            "methods.draft_model",
            f"draft {draft.id} serves {draft.max_position_embeddings:,} positions, fewer than "
            f"the {context:,} the deployment serves (max_model_len): vLLM drafts nothing for a "
            "batch once one sequence passes the draft's context (PR #24662), which simspec "
            f"does not model: give --max-model-len {draft.max_position_embeddings} or less, "
            "or a draft with a longer context",
        )
    if draft.weight_dtype == "bf16" and draft.expert_weight_dtype is None:
        return
    gpu, field = spec.cost.gpu, "methods.draft_model"
    stored = [checkpoint_precision(draft, draft.weight_dtype)]
    if draft.expert_weight_dtype is not None:
        stored.append(checkpoint_precision(draft, draft.expert_weight_dtype))
    for each in stored:  # a precision the engine has no kernel for on this GPU, as the target's
        check_engine_runs(each, gpu, sc.engine, field)
    effective = [effective_precision(each, gpu) for each in stored]
    spec.cost.run_at_own_precision(
        draft, effective[0], effective[1] if len(effective) > 1 else None
    )


def check_draft_tp(sc: Scenario) -> bool:
    """Whether the scenario's draft runs on GPUs of its own; a ``draft_tp`` the engine does
    not run is an InputError naming the field."""
    # the engine's tensor_parallel_size: a DP attention rank's under --dp (vLLM --data-
    # parallel-size D --tensor-parallel-size N/D)
    draft_tp, tp = sc.method.draft_tp, sc.tp // sc.dp
    if draft_tp is None or draft_tp == tp:
        return False
    field = f"methods.{sc.method.name}.draft_tp"
    engine = deployed_engine(sc)
    if not engine.flag("draft_tp_below_target"):
        raise InputError(
            field,
            f"engine {engine.id} runs the draft at the target's tensor parallelism ("
            f"{tp}; simspec/data/engines.yaml draft_tp_below_target says why): leave "
            "draft_tp (vLLM's draft_tensor_parallel_size) unset, or run engine vllm-v0, "
            "whose SmallerTpProposerWorker runs a draft at 1",
        )
    if draft_tp != 1:
        # SpeculativeConfig._verify_and_get_draft_tp: "must be 1 or the target's"
        raise InputError(
            field, f"vLLM takes 1 or the target's tensor parallelism ({tp}), not {draft_tp}"
        )
    return True


def weight_precision(sc: Scenario, target: ModelShape) -> PrecisionSpec:
    """The deployment's precision, else the checkpoint's own (``weight_dtype``, read from its
    config.json's quantization_config; bf16 when it has none)."""
    if sc.precision is not None:
        return load_precision(sc.precision, "precision")
    return checkpoint_precision(target, getattr(target, "weight_dtype", "bf16"))


def checkpoint_precision(target: ModelShape, dtype: str) -> PrecisionSpec:
    """The precision of weights stored as ``dtype`` in ``target``'s checkpoint: the packaged
    one, with int4's bytes at the checkpoint's own scale group (ModelShape.stored_bytes)."""
    spec = load_precision(dtype, "model.quantization_config")
    stored = target.stored_bytes(dtype)
    return spec if stored == spec.weight_bytes else spec.model_copy(update={"weight_bytes": stored})


def expert_precision(
    sc: Scenario, target: ModelShape, layers: PrecisionSpec
) -> PrecisionSpec | None:
    """The routed experts' precision where the checkpoint stores them apart from the other
    layers (GPT-OSS: MXFP4 experts, read as int4-w, beside bf16 attention) and the deployment
    names none; None: the layers' own."""
    if sc.precision is not None or not target.expert_weight_dtype:
        return None
    return checkpoint_precision(target, target.expert_weight_dtype)


def check_attention_tp(target: ModelShape, tp: int, dp: int = 1) -> None:
    """Attention over tp / dp GPUs must split the model's heads evenly, as the engines require
    (ModelShape.attention_tp_refusal)."""
    if why := target.attention_tp_refusal(tp // dp):
        top = target.largest_attention_tp(MAX_GPUS)
        allowed = ", ".join(str(2**i) for i in range(top.bit_length()))
        raise InputError(
            "tp" if dp == 1 else "dp",
            f"{why} (vLLM and SGLang refuse it): attention over "
            f"{'tp' if dp == 1 else 'tp/dp'} = {allowed} GPUs",
        )


def check_fp8_blocks(
    target: ModelShape, layout: ParallelLayout, engine: EngineProfile, stated: str | None
) -> None:
    """A block-scaled FP8 checkpoint loads only where each GPU's slice of every MLP holds
    whole scale blocks (:meth:`ParallelLayout.block_refusal`); a ``stated`` weight precision
    other than the checkpoint's is another checkpoint, not checked."""
    if engine.family not in BLOCK_CHECKED_ENGINES or stated not in (None, target.weight_dtype):
        return
    why = layout.block_refusal(target)
    if why is None:
        return
    fits = [
        n
        for n in (2**i for i in range(MAX_GPUS.bit_length()))
        if n <= layout.tp and not ParallelLayout(n, style=layout.style).block_refusal(target)
    ]
    fixes = [f"tp {fits[-1]} or fewer"] if fits else []
    whole = ParallelLayout(layout.tp, layout.tp, layout.dp, layout.style)
    if target.is_moe and layout.ep == 1 and not whole.block_refusal(target):
        fixes.append(
            f"ep {layout.tp} (whole experts a GPU: vLLM --enable-expert-parallel, SGLang --ep-size)"
        )
    raise InputError(
        "tp",
        f"{why}: vLLM and SGLang refuse to load it"
        + (f"; use {' or '.join(fixes)}" if fixes else ""),
    )


# engines that place whole experts per GPU: vLLM --enable-expert-parallel, SGLang --ep-size,
# TensorRT-LLM moe_expert_parallel_size; Hugging Face's device_map and gpt-fast have none
EP_ENGINES = ("vllm", "sglang", "trtllm")


def _largest_power_of_two(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def check_ep(target: ModelShape, ep: int, engine: EngineProfile | None = None) -> None:
    """Expert parallelism needs experts, at least one whole expert a GPU, and an engine that
    runs it."""
    if ep > 1 and engine is not None and engine.family not in EP_ENGINES:
        raise InputError(
            "ep",
            f"engine {engine.id} has no expert parallelism (it runs on "
            f"{', '.join(EP_ENGINES)} and their versions): use ep 1",
        )
    if ep > 1 and not target.is_moe:
        raise InputError("ep", f"{target.id} has no experts to spread (a dense model): use ep 1")
    if ep > target.num_experts > 0:
        raise InputError(
            "ep",
            f"{target.id} has {target.num_experts} experts a layer: ep={ep} would leave GPUs "
            f"with none (whole experts per GPU); ep is 1 or tp, so use ep 1, or tp "
            f"{_largest_power_of_two(target.num_experts)} or fewer with ep = tp",
        )
    if ep > 1 and engine is not None and engine.family == "sglang" and target.num_experts % ep:
        # SGLang places the same number of experts on every GPU: FusedMoE asserts
        # "(num_experts - num_fused_shared_experts) % self.moe_ep_size == 0", and DeepEP's
        # dispatcher likewise (layers/moe/fused_moe_triton/layer.py, token_dispatcher/
        # deepep.py, 0.5.10); vLLM spreads the rest unevenly (determine_expert_map)
        raise InputError(
            "ep",
            f"engine {engine.id} needs the {target.num_experts} experts of {target.id} split "
            f"evenly: ep={ep} does not divide them; give an ep that does, or run on vllm",
        )


def setup_replica(sc: Scenario, pd_role: str | None = None) -> ReplicaSetup:
    """What ``sc`` resolves to before anything runs. ``pd_role`` "prefill": the scenario is a
    disaggregated deployment's prefill instance (its disaggregation_mode is null: it serves
    whole requests), whose engine may size its memory otherwise (SGLang captures no piecewise
    CUDA graphs there: :func:`~simspec.engine.memory_share.sglang_piecewise_graphs`)."""
    target = load_model(sc.model)
    check_ep(target, sc.ep, load_engine(sc.engine))
    engine = deployed_engine(sc)
    if why := engine_refuses(sc.method.name, engine.id):
        raise InputError("methods.name", f"{sc.method.name} {why}")
    if sc.method.tree in ("static", "dynamic") and engine.flag("chains_only"):
        # QA: a 60-node EAGLE-3 tree ran on trtllm at 2.85x where its server drafts chains
        raise InputError(
            f"methods.{sc.method.name}.tree",
            f"engine {engine.id} drafts chains only (engines.yaml chains_only says why): "
            "give tree: chain (K tokens a step), or run the tree on vllm or sglang",
        )
    engine.check_load_policy(sc.method.disable_by_batch_size)
    served_on = load_gpu(sc.gpu)
    check_engine_gpu(engine, served_on)
    check_engine_model(engine, target, served_on, sc.precision)
    check_stages(sc.pp, engine, sc.tp, served_on.gpus_per_node)
    if sc.disaggregation_mode == "decode" and not engine.flag("pd_disaggregation"):
        raise InputError(
            "disaggregation_mode",
            no_pd(engine) + ": use disaggregation_mode null, or vllm, sglang or trtllm",
        )
    if sc.disaggregation_mode == "decode":
        orders = [f for f in PD_ORDERS if engine.flag(f)]
        if len(orders) != 1:  # either order or none would run one the engine does not state
            raise InputError(
                "engine",
                f"engine {engine.id} states "
                + (" and ".join(orders) if orders else "neither " + " nor ".join(PD_ORDERS))
                + ": a disaggregated deployment runs exactly one order of prefill and KV "
                "transfer (engines.yaml)",
            )
    check_dp_attention(sc.dp, engine.id, engine.dp_attention, target)
    if sc.dp > 1 and (why := engine.dp_attention_refused.get(sc.method.name)):
        raise InputError("dp", f"{sc.method.name} on engine {engine.id}: {why}; use dp 1")
    if why := draft_target_refusal(sc.method.name, engine.id, target.architecture):
        raise InputError("method", f"{sc.method.name} on {target.id}: {why}")
    check_linear_layers(target, sc.engine, sc.dp)
    cost = build_cost_model(sc, target)
    spec = build_speculator(sc.method, target, cost, engine, draft_cost_model(sc, target, cost))
    if isinstance(spec, DraftModel):
        check_draft_model(sc, target, spec)
    gpu = cost.gpu
    max_seqs, max_tokens = batch_limits(sc, engine, gpu)
    max_model_len(sc, target)  # a context past the model's is refused here, by name
    v0 = v0_unchunked(sc, target, engine)
    chunked = sc.scheduler.enable_chunked_prefill
    # the setting is the deployment's only where the engine leaves it to the server (trtllm);
    # elsewhere only the engine's own choice (vLLM V1 and SGLang chunk) may be stated
    if chunked is not None and not engine.flag("whole_prompts") and not (chunked and not v0):
        raise InputError(
            "scheduler.enable_chunked_prefill",
            f"engine {engine.id} decides chunked prefill itself here (vLLM V1 and SGLang chunk, "
            "vLLM V0 as its defaults decide); the setting is modelled for engine trtllm",
        )
    # a prompt enters whole or waits: V0 without chunked prefill, TensorRT-LLM's default
    whole_prompts = v0 or (engine.flag("whole_prompts") and chunked is not True)
    if v0 and sc.scheduler.max_num_batched_tokens is None:
        # V0 without chunked prefill: SchedulerConfig's max(max_model_len, 2048)
        max_tokens = max(max_model_len(sc, target), V0_MIN_BUDGET)
    elif v0 and max_tokens < (context := max_model_len(sc, target)):
        # a prompt enters whole, so V0 refuses a budget no full-length sequence fits
        # (SchedulerConfig._verify_args: "max_num_batched_tokens (...) is smaller than
        # max_model_len (...). This effectively limits the maximum sequence length to
        # max_num_batched_tokens and makes vLLM reject longer sequences"; QA: ran, and every
        # request was refused as longer than the KV cache)
        raise InputError(
            "scheduler.max_num_batched_tokens",
            f"{max_tokens} is below max_model_len {context}, which vLLM V0 refuses without "
            f"chunked prefill: give at least {context}, or --max-model-len {max_tokens} or less",
        )
    if engine.dp_attention == "vllm":
        max_tokens = max_tokens * sc.dp  # per rank, as max_num_seqs (replica_running_limit)
    elif sc.dp > 1 and max_seqs < sc.dp:
        raise InputError(
            "scheduler.max_num_seqs",
            f"{max_seqs} running requests over dp={sc.dp} ranks leave a rank none "
            f"(SGLang divides --max-running-requests by dp and refuses 0): give at least "
            f"{sc.dp}",
        )
    max_seqs = replica_running_limit(engine, max_seqs, sc.dp)
    if sc.dp > 1 and engine.family == "vllm" and sc.method.k_schedule:
        raise InputError("method.k_schedule", DYNAMIC_SD_UNDER_DP.format(dp=sc.dp))
    if engine.family == "vllm" and max_tokens < max_seqs:
        # vLLM refuses to start (SchedulerConfig._verify_args): every sequence a step runs
        # takes at least one token of the budget
        raise InputError(
            "scheduler.max_num_batched_tokens",
            f"{max_tokens} is below max_num_seqs {max_seqs}, which vLLM refuses "
            "(max_num_batched_tokens must be greater than or equal to max_num_seqs): raise "
            "--max-num-batched-tokens or lower --max-num-seqs",
        )
    if max_tokens < spec.verify_tokens and not engine.flag("prefill_first"):
        # (SGLang's decode batch is not bounded by its prefill chunk: Scheduler.decode_budget)
        raise ScenarioError(
            f"scheduler.max_num_batched_tokens: {max_tokens} cannot hold one sequence's verify "
            f"step of {spec.verify_tokens} tokens: give at least {spec.verify_tokens} "
            "(--max-num-batched-tokens, or scheduler.max_num_batched_tokens in a --config file)"
        )
    demand = spec.memory_demand(max_seqs, max_tokens)
    if uniform_kv(engine, target, sc.disaggregation_mode):
        demand = dataclasses.replace(demand, uniform_kv=True)
    if sc.workload.arrival == "closed" and sc.workload.concurrency < max_seqs:
        # a closed loop never runs more than its concurrency: only so many sequences hold a
        # window in windowed layers or a recurrent state (vLLM allocates both from its one
        # pool as requests run, none up front: QA, gpt-oss at batch 64 had lost half its KV
        # blocks to windows for vLLM's 1,024 max_num_seqs, and preempted). Under vLLM V1 the
        # scheduler counts the windows sequence by sequence (kv_cache.WindowBlocks), in an
        # open loop too; a pool sized once, and the recurrent states, read this
        demand = dataclasses.replace(demand, max_seqs=sc.workload.concurrency)
    prefix = prefix_caching(sc, engine, target)
    if target.linear_layers and "mamba_running_ratio" in engine.params:
        # SGLang sizes the recurrent states itself (engines.yaml mamba_running_ratio): a third
        # of them run under its no_buffer radix cache; without the cache, a running limit set
        # (by the deployment, or 48 under speculation) is the states it allocates
        ratio = int(engine["mamba_running_ratio"]) if prefix else 1
        stated = sc.scheduler.max_num_seqs is not None or sc.method.name != "autoregressive"
        demand = dataclasses.replace(
            demand, state_ratio=ratio, state_running=0 if prefix or not stated else max_seqs
        )
    weight_bytes = cost.precision.weight_bytes if cost.precision else BYTES_PER_PARAM
    experts = cost.experts_precision_of(target)
    memory = plan_memory(
        cost.gpu,
        with_memory_share(engine, deployment_share(sc, engine, target, gpu, max_tokens, pd_role)),
        target,
        demand,
        sc.tp,
        sc.pp,
        sc.ep,
        weight_bytes,
        cost.kv_bytes,
        experts.weight_bytes if experts else BYTES_PER_PARAM,
        sc.dp,
        share_given=sc.scheduler.gpu_memory_utilization is not None,
    )
    check_fixed_lengths(sc, target, memory, max_tokens if whole_prompts else None)
    if engine.flag("context_must_fit_kv"):
        check_context_fits(sc, target, memory)
    if (
        engine.flag("max_running_from_pool")
        and sc.scheduler.max_num_seqs is None
        and sc.method.name == "autoregressive"
    ):
        max_seqs = pool_running_cap(memory, max_model_len(sc, target))
    if memory.state_seqs:  # the recurrent states bound the running sequences
        max_seqs = min(max_seqs, memory.state_seqs)
    reserve = transfer_reserve(sc, engine)
    if reserve is not None and reserve[0] >= memory.seq_tokens():
        raise InputError(
            "scheduler.reserved_decode_tokens",
            f"{reserve[0]} tokens kept free per request leave no room in the "
            f"{memory.seq_tokens()} tokens one rank's KV cache holds: give less (SGLang's "
            "default is 512)",
        )
    return ReplicaSetup(
        target,
        cost,
        spec,
        max_seqs,
        max_tokens,
        memory,
        prefix,
        engine.flag("guaranteed_no_evict"),
        engine.flag("prefill_first") or v0,
        decode_reserve(engine, sc.dp),
        # only a chain's verify (1 + K tokens, each a prefix) trims: a tree's nodes, or
        # lookahead's branches, are no prefix, and such a decode waits for a step it fits
        engine.flag("trim_drafts_at_budget")
        and spec.tree is None
        and spec.verify_tokens == spec.k + 1,
        # num_speculative_tokens (a tree's nodes) for the drafters vLLM gives lookahead KV
        spec.verify_tokens - 1
        if engine.flag("draft_lookahead_slots") and sc.method.name in LOOKAHEAD_DRAFTERS
        else 0,
        chunk_prompts=not whole_prompts,
        admission_watermark=engine["admission_watermark"]
        if "admission_watermark" in engine.params
        else 0.0,
        retract_by_progress=engine.flag("retract_fewest_outputs"),
        requeue_at_back=engine.flag("requeue_at_back"),
        cache_prompt_only=engine.flag("retract_caches_prompt_only"),
        # vLLM V1's use_eagle() drafters (eagle, eagle3, mtp) recompute a hit's last block
        drop_last_hit=engine.flag("draft_lookahead_slots") and sc.method.name in EAGLE_DRAFTERS,
        decode_instance=sc.disaggregation_mode == "decode",
        recompute_first=sc.disaggregation_mode == "decode"
        and engine.flag("pd_decode_recomputes_last_token"),
        transfer_reserve=reserve,
    )


# vLLM turns a Dynamic SD table off under data parallelism and runs num_speculative_tokens at
# every batch size: each DP rank would pick its own K from its own batch and the ranks' steps
# diverge (vllm/config/vllm.py VllmConfig._maybe_disable_dynamic_sd_for_data_parallel, "causing
# DP divergence and deadlocks"; QA: simspec had run the table at dp=2)
DYNAMIC_SD_UNDER_DP = (
    "vLLM turns num_speculative_tokens_per_batch_size off at dp={dp} (data parallelism: each "
    "rank would pick its own K and the ranks diverge; vllm/config/vllm.py "
    "_maybe_disable_dynamic_sd_for_data_parallel) and runs num_speculative_tokens at every "
    "batch size: compare fixed K (sweep --k), or schedule K at dp=1"
)


def replica_running_limit(engine: EngineProfile, max_seqs: int, dp: int) -> int:
    """The requests a replica of ``dp`` attention ranks runs at once under a running limit
    of ``max_seqs`` as the engine reads the flag: each vLLM DP engine core applies its own
    limits (the flags are per rank); SGLang divides --max-running-requests (and
    --chunked-prefill-size) by dp (server_args.py at 469c63e, _handle_data_parallelism), each
    rank taking max_running_requests // dp (its scheduler asserts "max_running_request is zero"
    when that is 0), so the replica runs a multiple of dp."""
    if engine.dp_attention == "vllm":
        return max_seqs * dp
    if dp > 1:
        return max_seqs - max_seqs % dp
    return max_seqs


def transfer_reserve(sc: Scenario, engine: EngineProfile) -> tuple[int, int] | None:
    """SGLang's decode-instance admission (tokens reserved to decode per request held, the
    output clip), from the scenario's ``reserved_decode_tokens`` or the profile's
    ``pd_reserved_decode_tokens``; None off a decode instance or on an engine without it.
    The field given where the engine or mode has no such rule is refused, not ignored."""
    given = sc.scheduler.reserved_decode_tokens
    own = engine.params.get("pd_reserved_decode_tokens")
    if sc.disaggregation_mode != "decode" or own is None:
        if given is not None:
            raise InputError(
                "scheduler.reserved_decode_tokens",
                "it is SGLang's decode-instance reservation: give it with engine sglang (or "
                "sglang-v2) and disaggregation_mode decode, or leave it unset",
            )
        return None
    clip = int(engine["decode_reserve_clip"])
    return (int(own.value) if given is None else given), clip


# V0's budget without chunked prefill is at least this (SchedulerConfig.__post_init__: "If
# max_model_len is too short, use 2048 as the default value"), and it turns chunked prefill on
# by default only for contexts past this many tokens (_set_default_args_v0: use_long_context)
V0_MIN_BUDGET = 2048
V0_LONG_CONTEXT = 32768


def pool_running_cap(memory: MemoryPlan, context: int) -> int:
    """SGLang's running-request cap when none is given (engines.yaml max_running_from_pool):
    per DP rank, its KV tokens over the context times 512, clamped to [2048, 4096] and at most
    half its tokens; the replica runs dp ranks of it."""
    tokens = memory.num_blocks * memory.block_size // memory.dp
    per_rank = min(max(int(tokens / context * 512), 2048), 4096)
    return max(1, min(per_rank, tokens // 2)) * memory.dp


def max_model_len(sc: Deployment, target: ModelShape) -> int:
    """The context the engine is started with: ``scheduler.max_model_len``, else the model's.
    Past the model's own it is refused, as vLLM refuses it (ModelConfig's max_model_len check,
    unless VLLM_ALLOW_LONG_MAX_MODEL_LEN)."""
    given = sc.scheduler.max_model_len
    if given is not None and given > target.max_position_embeddings:
        raise InputError(
            "scheduler.max_model_len",
            f"{given} exceeds {target.id}'s context of {target.max_position_embeddings} tokens "
            "(max_position_embeddings), which vLLM and SGLang refuse: give at most that",
        )
    return int(given or target.max_position_embeddings)


def longest_request(sc: Deployment, target: ModelShape) -> int:
    """The most tokens (prompt + output) one request may ask: vLLM's server refuses one past
    max_model_len; SGLang's refuses one that reaches its context
    (TokenizerManager._validate_one_request: ``max_new_tokens + input_token_num >=
    context_len``, python/sglang/srt/managers/tokenizer_manager.py at 0.5.10; QA: 2048 + 2048
    at a 4096 context ran)."""
    context = max_model_len(sc, target)
    return context - 1 if load_engine(sc.engine).family == "sglang" else context


def v0_unchunked(sc: Scenario, target: ModelShape, engine: EngineProfile) -> bool:
    """Whether vLLM V0 runs this deployment without chunked prefill, as its defaults decide
    (engines.yaml v0_scheduler): on only for a model past 32,768 tokens of context with no
    sliding window, no MLA and no speculative config. Off, V0 prefills whole prompts in steps
    of their own within a budget of max(max_model_len, 2048)."""
    if not engine.flag("v0_scheduler"):
        return False
    chunked = (
        max_model_len(sc, target) > V0_LONG_CONTEXT
        and not target.kv_lora_rank
        and not target.sliding_window
        and sc.method.name == "autoregressive"
    )
    return not chunked


# the methods vLLM V1 runs as use_eagle() (eagle, eagle3, mtp) or uses_draft_model()
LOOKAHEAD_DRAFTERS = ("eagle1", "eagle2", "eagle3", "mtp", "p_eagle", "draft_model", "pard")
# SpeculativeConfig.use_eagle(): "return self.method in ("eagle", "eagle3", "mtp")"
EAGLE_DRAFTERS = ("eagle1", "eagle2", "eagle3", "mtp")


def decode_reserve(engine: EngineProfile, dp: int = 1) -> tuple[float, float, float, int] | None:
    """SGLang's admission reservation as the scheduler takes it (initial ratio, least ratio,
    decay a decode step, clip), from the profile's ``decode_reserve_*``; None where the
    engine has none (vLLM, TRT-LLM: their own admission rules)."""
    if "decode_reserve_init" not in engine.params:
        return None
    init = engine["decode_reserve_init"]
    if dp > 1 and "decode_reserve_dp_factor" in engine.params:  # SGLang under DP attention
        init *= engine["decode_reserve_dp_factor"]
    least = init * engine["decode_reserve_least_factor"]
    decay = (init - least) / engine["decode_reserve_decay_steps"]
    return init, least, decay, int(engine["decode_reserve_clip"])


def deployment_share(
    sc: Scenario,
    engine: EngineProfile,
    target: ModelShape,
    gpu: GpuSpec,
    chunk: int,
    pd_role: str | None = None,
) -> float:
    """The memory share a deployment runs at: its own ``gpu_memory_utilization``, else the one
    the engine derives for it (SGLang's mem_fraction_static from its reserve, at the
    deployment's chunk: :func:`~simspec.engine.memory_share.engine_share`)."""
    if sc.scheduler.gpu_memory_utilization is not None:
        return sc.scheduler.gpu_memory_utilization
    return engine_share(
        engine, gpu, target, tp=sc.tp, chunk=chunk, method=sc.method.name, pp=sc.pp, dp=sc.dp,
        ep=sc.ep, pd_mode=pd_role or sc.disaggregation_mode,
    )  # fmt: skip


def with_memory_share(engine: EngineProfile, share: float | None) -> EngineProfile:
    """``engine`` with the deployment's ``gpu_memory_utilization`` (None: as it is)."""
    if share is None:
        return engine
    given = Sourced(value=share, source="the deployment's (simspec.engine.build.deployment_share)")
    fixed = Sourced(value=0, source="a share given or derived for the deployment stands")
    params = {**engine.params, "gpu_memory_utilization": given}
    if "mem_fraction_by_reserve" in params:  # the share is this one, not derived again
        params["mem_fraction_by_reserve"] = fixed
    return engine.model_copy(update={"params": params})


def check_engine_gpu(engine: EngineProfile, gpu: GpuSpec) -> None:
    """An engine runs only on the GPUs it is built for (engines.yaml ``gpu_archs``:
    TensorRT-LLM on NVIDIA's)."""
    if engine.gpu_archs and gpu.arch not in engine.gpu_archs:
        raise InputError(
            "engine",
            f"engine {engine.id} does not run on {gpu.id} ({gpu.name}, {gpu.arch}): it runs on "
            f"{', '.join(engine.gpu_archs)} GPUs; pick another engine (vllm, sglang) or GPU",
        )


def check_engine_model(
    engine: EngineProfile, target: ModelShape, gpu: GpuSpec, stated: str | None = None
) -> None:
    """An engine serves only the model classes it registers (engines.yaml ``architectures``:
    vLLM V0's) and runs some checkpoint formats only on some GPUs (``format_archs``:
    TensorRT-LLM's MXFP4 MoE on Hopper and Blackwell); a ``stated`` weight precision is
    another checkpoint than the format's, not checked. QA: gpt-oss ran on vllm-v0, and on
    trtllm on an A100."""
    if engine.architectures and target.architecture not in ("", *engine.architectures):
        raise InputError(
            "engine",
            f"engine {engine.id} does not serve {target.id} ({target.architecture}): "
            f"{engine.architectures_source}; run it on vllm",
        )
    archs = engine.format_archs.get(target.quant_method)
    if archs and stated is None and gpu.arch not in archs:
        raise InputError(
            "engine",
            f"engine {engine.id} runs {target.id}'s {target.quant_method} checkpoint on "
            f"{', '.join(archs)} GPUs only, not on {gpu.id} ({gpu.arch}): "
            f"{engine.format_archs_source}; pick another engine (vllm) or GPU",
        )


def check_stages(pp: int, engine: EngineProfile, tp: int = 1, gpus_per_node: int = 8) -> None:
    """Pipeline stages as Hugging Face runs them (one batch through the layers in order) are
    the only ones modelled: a serving engine keeps ``pp`` batches in flight (engines.yaml
    ``sequential_stages``), so its throughput under load would be up to pp times simspec's.
    Hugging Face's stages are one process's devices (device_map='auto'): on one server, and
    not beside tensor parallelism (transformers refuses "`tp_plan` and `device_map` are
    mutually exclusive")."""
    if pp > 1 and not engine.flag("sequential_stages"):
        raise InputError(
            "pp",
            f"engine {engine.id} runs its {pp} pipeline stages with {pp} batches in flight "
            "(vLLM's batch queue, SGLang's and TensorRT-LLM's micro-batches), which simspec "
            "does not model: use pp 1 and raise tp (past one server, tensor parallelism "
            "across servers, whose all-reduces simspec prices at the server's interconnect, "
            "a lower bound), or engine hf (device_map='auto': the stages one after another)",
        )
    if pp > 1 and tp > 1:
        raise InputError(
            "pp",
            f"engine {engine.id} spreads a model over devices by device_map or shards it by "
            'tp_plan, not both (transformers: "`tp_plan` and `device_map` are mutually '
            'exclusive"): use tp 1 with pp, or pp 1',
        )
    if pp > gpus_per_node:
        raise InputError(
            "pp",
            f"{pp} stages under engine {engine.id} are one process's devices (device_map="
            f"'auto'), on one server of {gpus_per_node} GPUs: at most pp {gpus_per_node}",
        )


def check_dp_attention(
    dp: int, engine_id: str, style: str, target: ModelShape | None = None
) -> None:
    """Data-parallel attention needs an engine that runs it (none of them is one that runs
    pipeline stages one after another, :func:`check_stages`) and a model with experts: its
    ranks step together only because the MoE layers span them. vLLM runs the ranks of a dense
    model as independent replicas in its later releases (vllm/v1/engine/core.py
    ``run_engine_core``: "Non-MoE DP ranks are completely independent, so treat like DP=1");
    0.11.0 still ran them as one lockstep DPEngineCoreProc, padding each step to the busiest
    rank (QA), which simspec does not model for a dense model; SGLang's --enable-dp-attention
    serves the DeepSeek and Qwen MoE families (its server_args help)."""
    if dp == 1:
        return
    if not style:
        raise InputError(
            "dp",
            f"simspec models no data-parallel attention for engine {engine_id}: use dp 1, or "
            "engine sglang (--enable-dp-attention) or vllm (--data-parallel-size)",
        )
    if target is not None and not target.is_moe:
        raise InputError(
            "dp",
            f"{target.id} has no experts (a dense model): simspec models data-parallel ranks "
            "that step together through MoE layers only (vLLM's later releases run a dense "
            "model's ranks as independent replicas); use dp 1, and for replicas `simspec fleet` "
            "with dp replicas of tp/dp GPUs each",
        )


# engines whose Gated DeltaNet state handling (its dtype, its slots per verify position, its
# share of memory) simspec follows: simspec/engine/kv_cache.py and costmodel/linear_attention.py
LINEAR_ATTENTION_ENGINES = ("vllm", "sglang")


def check_linear_layers(target: ModelShape, engine: str, dp: int) -> None:
    """Gated DeltaNet layers are priced on the one-rank forward, as vLLM V1 and SGLang keep
    their states: data-parallel attention's per-rank split of them, and another engine's state
    handling, are not modelled."""
    if not target.linear_layers:
        return
    profile = load_engine(engine)
    if profile.engine_kernels not in LINEAR_ATTENTION_ENGINES:
        raise InputError(
            "engine",
            f"{target.id}'s Gated DeltaNet states are modelled as "
            f"{' and '.join(LINEAR_ATTENTION_ENGINES)} keep them (dtype, one per verify "
            f"position, share of memory); {engine} is not one of them",
        )
    if unmodelled := profile.params.get("linear_states_unmodelled"):
        raise InputError(
            "engine",
            f"{target.id} on {engine}: {' '.join(unmodelled.source.split())}",
        )
    if dp > 1:
        raise InputError(
            "dp",
            f"{target.id}'s Gated DeltaNet layers are not modelled under data-parallel "
            "attention: use dp 1",
        )


def check_fixed_lengths(
    sc: Scenario, target: ModelShape, memory: MemoryPlan, whole_budget: int | None = None
) -> None:
    """Fixed (or uniform) lengths no request could be served with are refused before the run:
    past the context the engine serves (:func:`max_model_len`; vLLM rejects a prompt longer
    than max_model_len), past the KV cache, or (``whole_budget``: an engine that admits a
    prompt whole) a prompt past the token budget, every request would be left unfinishable
    and the run would report an empty table."""
    wl = sc.workload
    if wl.lengths_from is not None or wl.arrival == "replay":  # per request: past_context
        return
    fixed_one = wl.output.dist == "fixed" and _shortest(wl.output) <= 1
    if sc.disaggregation_mode == "decode" and fixed_one:  # QA: every cell read "nan"
        raise InputError(
            "workload.output",
            "a decode instance receives each request's first token from the prefill "
            "instance: outputs of 1 token leave nothing to decode here; give at least 2",
        )
    if whole_budget is not None and _shortest(wl.prompt) > whole_budget:
        raise ScenarioError(
            f"workload: prompts of at least {_shortest(wl.prompt)} tokens exceed the token "
            f"budget of {whole_budget} (scheduler.max_num_batched_tokens), and engine "
            f"{sc.engine} admits a prompt whole, without chunked prefill (TensorRT-LLM "
            "rejects such a request): raise --max-num-batched-tokens or shorten the prompts"
        )
    shortest = _shortest(wl.prompt) + _shortest(wl.output)
    what = f"requests of at least {shortest} tokens (prompt + output)"
    context = max_model_len(sc, target)
    if shortest > longest_request(sc, target):
        given = sc.scheduler.max_model_len is not None
        raise ScenarioError(
            f"workload: {what} exceed {target.id}'s context of {context} tokens "
            + (
                "(SGLang refuses a request that reaches it) "
                if context > longest_request(sc, target)
                else ""
            )
            + ("(scheduler.max_model_len)" if given else "(max_position_embeddings)")
        )
    capacity = memory.seq_tokens()  # one rank's cache (its windowed layers' share taken)
    if shortest > capacity:
        at = f"tp={sc.tp}, dp={sc.dp} (one rank's cache)" if sc.dp > 1 else f"tp={sc.tp}"
        raise ScenarioError(
            f"workload: {what} exceed the KV cache of {capacity} tokens on "
            f"{sc.gpu} at {at}: raise tp, give the cache more of the GPU "
            "(gpu_memory_utilization), or pick a larger GPU"
        )


def check_context_fits(sc: Scenario, target: ModelShape, memory: MemoryPlan) -> None:
    """vLLM refuses to start when one request of max_model_len tokens does not fit in the KV
    cache (V1 check_enough_kv_cache_memory, V0 raise_if_cache_size_invalid), saying how long a
    context would. Refused only where it would not fit even without the activation reserve,
    which simspec estimates from shapes (kv_cache.activation_reserve) where vLLM measures it:
    near the edge the estimate decides nothing (GPUStack served Qwen3-32B at its 40,960-token
    default on one H100 under vLLM 0.11, where the estimate leaves 34,560). A model with
    windowed or linear-attention layers is checked where the pool counts one request's
    windows and states as vLLM V1's does (its max_memory_usage_bytes per layer group:
    ``MemoryPlan.seq_tokens``); in a pool sized once for many sequences it is not."""
    context = max_model_len(sc, target)
    capacity = context_refused(target, memory, context)
    if capacity is None:
        return
    given = sc.scheduler.max_model_len is not None
    what = "max_model_len" if given else f"{target.id}'s max_position_embeddings, vLLM's default"
    at = f"tp={sc.tp}, dp={sc.dp} (one rank's cache)" if sc.dp > 1 else f"tp={sc.tp}"
    raise InputError(
        "scheduler.max_model_len",
        f"a context of {context} tokens ({what}) exceeds the {capacity} tokens the KV cache "
        f"holds on {sc.gpu} at {at}, and vLLM refuses to start so: give --max-model-len "
        f"{capacity} or less, or raise tp or --gpu-memory-utilization",
    )


def context_refused(target: ModelShape, memory: MemoryPlan, context: int) -> int | None:
    """The tokens one rank's KV cache holds where vLLM would surely not start at ``context``
    (past them and what simspec's estimated activations would hold too), else None; never for
    a model with windowed or linear-attention layers in a pool sized once for many sequences
    (vLLM V1's hybrid pool counts one request's windows and states, and a uniform one caches
    every token in every layer: :func:`check_context_fits`)."""
    counted = memory.window is not None or (memory.uniform_kv and not target.linear_layers)
    if (target.sliding_layers or target.linear_layers) and not counted:
        return None
    capacity = memory.seq_tokens()
    room = capacity + int(memory.activation_bytes // memory.kv_bytes_per_token)
    return capacity if context > room else None


def past_budget(table: RequestTable, setup: ReplicaSetup) -> None:
    """Requests whose prompt an engine that admits prompts whole can never admit (longer than
    its token budget: TensorRT-LLM's LLM._check_arguments rejects them) are unfinishable."""
    if not setup.chunk_prompts:
        table.unfinishable |= table.prompt_len > setup.max_tokens


def past_context(table: RequestTable, context: int) -> None:
    """Requests longer than the context the engine serves (prompt + output past ``context``,
    :func:`max_model_len`: vLLM's server refuses a request whose prompt + max_tokens pass
    max_model_len) are counted unfinishable, each, as :func:`check_fixed_lengths` refuses fixed
    ones (a run where every request is too long is refused after it)."""
    table.unfinishable |= table.prompt_len + table.output_len > context


def _shortest(spec: LengthSpec) -> int:
    """The shortest length ``spec`` draws (LengthSpec.sample: a fixed mean rounded, a uniform
    draw floored, then clipped)."""
    if spec.dist == "fixed":
        low = float(np.rint(spec.mean))
    else:
        low = math.ceil(spec.low or spec.min) if spec.dist == "uniform" else spec.min
    return int(min(max(low, spec.min), spec.max))


def run_sampling(sc: Scenario) -> tuple[float, float]:
    """(temperature, top-p) the engine verifies the scenario's drafts at: the requests', or
    greedy where the engine verifies this method by the target's argmax whatever they ask
    (EngineProfile.verifies_greedily: TensorRT-LLM's one-model path, SGLang on ROCm)."""
    engine = deployed_engine(sc)
    if sc.temperature > 0 and engine.verifies_greedily(sc.method.name, load_gpu(sc.gpu).arch):
        return 0.0, 1.0
    return sc.temperature, sc.top_p


def greedy_verify_note(sc: Scenario) -> str | None:
    """What a sampling run's acceptance is where its engine verifies greedily; None elsewhere."""
    if sc.temperature == 0 or run_sampling(sc)[0] == sc.temperature:
        return None
    engine = deployed_engine(sc)
    return (
        f"{sc.method.name} on {engine.id} ({sc.gpu}) verifies greedily at any temperature: "
        f"{engine.greedy_verify_source}; its acceptance is greedy's at T={sc.temperature:g}"
    )


def acceptance_sampler(
    sc: Scenario, spec: Speculator, num_requests: int, rng: np.random.Generator
) -> AcceptanceSampler | None:
    """The run's acceptance sampler: the method's acceptance, moved to the run's temperature
    and top-p, on the draft structure its speculator plans."""
    if not spec.needs_acceptance:
        return None
    acc = sc.method.acceptance
    # build_speculator refuses a method that needs an acceptance and has none
    assert acc is not None
    temperature, top_p = run_sampling(sc)
    # greedy decoding (temperature 0) takes the argmax whatever top-p says: top-p moves
    # acceptance only where the run samples
    sampling = temperature != acc.temperature or (temperature > 0 and top_p != acc.top_p)
    if acc.acc_len is not None and sampling:
        acc = sampled_from_trace(acc, spec.max_accept, spec.info.drafter)
    # build_speculator lets token streams replay only a lookup speculator
    keep = 1.0
    if acc.tokens is not None and sampling and isinstance(spec, LookupSpeculator):
        # the streams were generated greedily: a sampling run proposes where the replay does
        # (a lookup matches the text, whatever sampled it) and keeps each greedily accepted
        # draft with the temperature model's chance, at most 1 (README: lookup)
        keep = min(1.0, factor(temperature, top_p))
    profile = None
    if acc.acc_len is None and acc.tokens is None:  # a static tree is built for the mean α
        try:
            profile = run_alpha_profile(acc, spec.max_accept, spec.depth_decay, temperature, top_p)
        except ValueError as exc:  # a τ the method's chain or tree cannot yield
            raise InputError(f"methods.{sc.method.name}.acceptance", str(exc)) from None
    # tree candidates are verified by recursive rejection when the run samples
    plan = spec.draft_plan(profile, sampled=temperature > 0)
    if keep < 1.0:
        plan = dataclasses.replace(plan, keep=keep)
    return build_sampler(acc, plan, num_requests, rng, lengths_from=sc.workload.lengths_from)


def relaxation_time(setup: ReplicaSetup, wl: WorkloadConfig) -> float:
    """Seconds an empty engine takes to fill with the mix of requests it holds in steady
    state: the 99th-percentile output length times the step of plain decoding over a full
    batch (the most sequences the engine runs, or the KV cache holds at the mean request
    length). A speculative step yields more tokens, so this bounds its time from above."""
    rng = np.random.default_rng(0)  # lengths only; the run's own streams are untouched
    probe = generate_requests(wl, rng, 1000)
    context = float(np.mean(probe.prompt_len) + np.mean(probe.output_len))
    memory = setup.memory
    held = memory.num_blocks * memory.block_size / max(context, 1.0)
    if memory.window is not None:  # each sequence's windowed layers take their share too
        held = memory.num_blocks / memory.seq_blocks(max(int(context), 1))
    batch = int(max(1, min(setup.max_seqs, held)))
    step = setup.cost.forward(
        setup.target, BatchShape.uniform(batch, 1, batch * context, batch)
    ).total_s
    return float(np.percentile(probe.output_len, 99)) * step
