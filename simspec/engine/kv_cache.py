"""GPU memory plan and the paged KV block pool.

Capacity follows vLLM: ``gpu_memory_utilization`` of device memory, minus the weights of the
target (in their stored precision, sharded over TP, experts over TP or EP) and the draft, minus an
activation reserve (TRT-LLM, ``kv_memory_of_free``: that fraction of what is left after them),
divided into blocks of ``block_size`` tokens whose size covers the target's
and the draft's KV for those tokens (full-attention layers; MLA's latent, whole on every GPU).
Under data-parallel attention (``dp`` ranks) each rank caches only its own requests.

Sliding-window (and chunked-local) layers share that memory, as in vLLM's hybrid KV cache
manager: every layer's blocks come from one pool (vllm/v1/core/kv_cache_utils.py
get_kv_cache_config_from_groups: one tensor per group slot, shared by a layer of each group), and
a windowed layer's manager frees the blocks that leave its window (SlidingWindowSpec /
ChunkedLocalAttentionSpec in vllm/v1/kv_cache_interface.py: at most the window, or chunk, plus
the tokens being scheduled, per request; simspec counts the window and one block, not a prefill
chunk's tokens within its own step). Nothing is reserved per possible sequence up front.
Under vLLM V1 (engines.yaml ``hybrid_kv_pool``) the scheduler counts it so, sequence by sequence:
a block of the pool is one block of the full-attention layers, and each running sequence also
holds its windowed layers' blocks, as many as its tokens fill up to a window
(:class:`WindowBlocks`; SlidingWindowManager.remove_skipped_blocks frees those before
``get_num_skipped_tokens``: computed tokens - sliding_window + 1). Other engines' pools are
sized once: a cached token also costs its windowed-layer KV until the running sequences (at
most ``max_num_seqs``) each hold a full window (:func:`kv_blocks`).

Gated DeltaNet layers (Qwen3-Next, Qwen3.5) hold no KV but a fixed recurrent state per running
sequence, whatever its context, and under speculative decoding one more per verify position
(:func:`linear_state_bytes`). The states bound how many sequences run at once
(:func:`linear_state_split`): SGLang gives them ``mamba_full_memory_ratio`` / (1 + ratio) of
the memory left after weights and activations and caps its running requests at a third of the
states that hold under its default radix cache, all of them without it (model_runner's
hybrid-GDN memory split, ServerArgs.mamba_full_memory_ratio 0.9), or, with a running limit set
and the radix cache off (as speculation runs), allocates exactly that many requests' states;
vLLM V1 draws them from the KV pool request by request (MambaSpec pages beside attention pages,
one per layer group and verify slot), which the scheduler counts so (:class:`WindowBlocks`'
``fixed`` blocks a running sequence); for an engine without that pool simspec sets aside the
states of ``max_num_seqs`` sequences, or of as many as half that memory holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simspec.catalog.hardware import EngineProfile, GpuSpec
from simspec.catalog.models import BYTES_PER_PARAM, ModelShape
from simspec.engine.layout import BLOCK_CHECKED_ENGINES, ParallelLayout
from simspec.engine.memory_share import engine_share
from simspec.errors import ScenarioError

GIB = 1024**3


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU bytes by use, and the resulting number of KV blocks."""

    usable_bytes: float
    weight_bytes: float
    draft_bytes: float
    activation_bytes: float
    kv_bytes_per_token: float
    block_size: int
    num_blocks: int
    window_bytes: float = 0.0  # windowed layers' KV when the pool is full (within the KV share)
    # windowed layers' blocks each running sequence takes from the pool as its tokens grow
    # (vLLM V1's hybrid pool); None: the pool's blocks are full-attention blocks alone
    window: WindowBlocks | None = None
    # every attention layer caches every token (MemoryDemand.uniform_kv): a block's tokens are
    # in the windowed layers too
    uniform_kv: bool = False
    # Gated DeltaNet states of the running sequences (set aside before the KV blocks; in vLLM
    # V1's pool, ``window``, what the demand's sequences' states would take of it), and the
    # running sequences they hold per rank (0: no such layers, or no cap but the pool's)
    state_bytes: float = 0.0
    state_seqs: int = 0
    # data-parallel attention ranks: each holds its own requests' KV in num_blocks / dp blocks
    dp: int = 1

    def seq_blocks(self, tokens: int) -> int:
        """Blocks of the pool one sequence of ``tokens`` tokens holds (its windowed layers'
        too, where they take blocks from the pool)."""
        full = -(-tokens // self.block_size)
        return full if self.window is None else self.window.units(full)

    def seq_tokens(self) -> int:
        """The most tokens one sequence can hold in one rank's share of the pool."""
        blocks = self.num_blocks // self.dp
        full = blocks if self.window is None else self.window.full_of(blocks)
        return full * self.block_size


@dataclass(frozen=True)
class WindowBlocks:
    """What a running sequence takes from a pool counted in full-attention blocks beside its
    tokens' blocks: its windowed layers' blocks, as many blocks of tokens as it has up to
    ``per_seq`` (its window, or chunk, plus one block: :func:`window_tokens`), each costing
    ``ratio`` pool blocks (the windowed layers' KV per token over the full-attention layers'
    and the draft's), rounded up per sequence; and ``fixed`` pool blocks from its first token
    on, whatever its length (its recurrent states: vLLM's MambaSpec pages, one per Gated
    DeltaNet layer group and verify slot)."""

    per_seq: int
    ratio: float
    fixed: int = 0

    def table(self) -> np.ndarray:
        """Pool blocks a sequence holds for ``h`` blocks of tokens, ``h`` = 0 .. the last
        that changes what it holds beside them (per_seq, at least 1); past it one pool block a
        block of tokens (the round-off's 1e-9 keeps a whole ratio whole)."""
        h = np.arange(max(self.per_seq, 1) + 1, dtype=np.int64)
        window = np.ceil(self.ratio * np.minimum(h, self.per_seq) - 1e-9).astype(np.int64)
        return h + window + self.fixed * (h > 0)

    def units(self, full: int) -> int:
        """Pool blocks of a sequence with ``full`` blocks of tokens."""
        window = math.ceil(self.ratio * min(full, self.per_seq) - 1e-9)
        return full + window + (self.fixed if full > 0 else 0)

    def full_of(self, units: int) -> int:
        """The most blocks of tokens a sequence holds within ``units`` pool blocks."""
        table = self.table()
        if units >= table[-1]:
            return len(table) - 1 + units - int(table[-1])
        return int(np.searchsorted(table, units, side="right")) - 1


def target_weight_bytes(target: ModelShape, weight_bytes: float = BYTES_PER_PARAM) -> float:
    """Bytes of the target's weights on one GPU: linear layers (routed experts included) at
    ``weight_bytes`` each, the embedding and LM head in bf16 (vLLM's FP8 and GPTQ/AWQ methods
    quantise LinearBase layers only; the vocab embedding and ParallelLMHead stay unquantised
    unless a config says otherwise: GPTQ/AWQ "lm_head", ModelShape.lm_head_bytes)."""
    return target.weight_bytes_per_gpu(1, 1, weight_bytes, weight_bytes)


def activation_reserve(target: ModelShape, tp: int, max_tokens: int, max_logit_rows: int) -> float:
    """Peak activations of the largest forward (what vLLM's profiling run measures).

    Estimated from shapes: one layer's widest intermediates for ``max_tokens`` tokens in bf16,
    plus fp32 logits over the whole vocabulary for every row the sampler may see: every tensor-
    parallel rank holds them whole, the LM head's slices being all-gathered (vLLM V1:
    ``LogitsProcessor._gather_logits`` all-gathers where ``Platform.use_all_gather()``, true
    under V1, and each rank runs the sampler; vllm/model_executor/layers/logits_processor.py
    and platforms/interface.py, 0.11.0 wheel). Not measured; calibration may replace it.
    """
    routed = target.num_experts_per_tok * target.moe_intermediate_size
    widest = max(target.intermediate_size, routed + target.shared_expert_intermediate_size)
    h, inter = target.hidden_size, widest // tp  # a MoE layer's k routed widths per token
    per_token = (4 * h + 3 * inter + (target.q_dim + 2 * target.kv_dim) // tp) * BYTES_PER_PARAM
    logits = max_logit_rows * target.vocab_size * 4
    return max_tokens * per_token + logits


@dataclass(frozen=True)
class MemoryDemand:
    """What a run needs of GPU memory besides the target's weights and KV cache: the draft's
    weights and KV per token (per GPU, from the speculator), and the tokens and logit rows of
    its largest forward (the activation reserve)."""

    draft_bytes: float
    draft_kv_per_token: float
    max_tokens: int
    max_logit_rows: int
    max_seqs: int = 0  # sequences at once: each holds at most a window in windowed layers
    verify_tokens: int = 1  # query tokens a decoding sequence verifies at once (1: no draft)
    # every attention layer caches every token: vLLM's hybrid KV cache manager is off for the
    # run (disable_hybrid_kv_cache_manager; uniform_kv says where)
    uniform_kv: bool = False
    # SGLang's recurrent-state slots per running request where it sizes them by its memory
    # split (_calculate_mamba_ratio: 3 under the no_buffer radix cache, else 1), and the running
    # requests whose states it allocates outright instead (max_running_requests set with the
    # radix cache off; 0: the split): linear_state_split
    state_ratio: int = 1
    state_running: int = 0


def uniform_kv(engine: EngineProfile, target: ModelShape, mode: str = "null") -> bool:
    """Whether vLLM V1 turns its hybrid KV cache manager off for a run, so that windowed layers
    cache every token as full attention does (unify_hybrid_kv_cache_specs):
    - for chunked local attention (Llama-4): always under an EAGLE-style drafter ("Hybrid KV
      cache manager is not yet supported with chunked local attention + eagle",
      VllmConfig.__post_init__), and without one unless
      VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE, off by default from vLLM PR #21761
      (July 2025, in 0.10.1, the release the vllm profile was fitted on; a later PR turned
      the default on);
    - on a decode instance (``mode`` "decode"), whose --kv-transfer-config turned it off
      whatever the connector until vLLM PR #41847 (May 2026; vLLM issue #42024: gpt-oss-120b's
      KV capacity halved under NixlConnector).
    Gated DeltaNet states always take the hybrid pool (a Mamba-style model needs it)."""
    if not engine.flag("hybrid_kv_pool") or not target.sliding_layers:
        return False
    return target.chunked_attention or mode == "decode"


def uniform_kv_reason(mode: str = "null") -> str:
    """Why vLLM's hybrid KV cache manager is off where :func:`uniform_kv` says it is, for the
    notes and model facts that say so."""
    if mode == "decode":
        return (
            "a decode instance's KV connector (--kv-transfer-config) turned it off before vLLM "
            "PR #41847"
        )
    return "vLLM turns it off for chunked local attention by default since PR #21761"


def linear_state_bytes(
    target: ModelShape, engine: EngineProfile, tp: int, seqs: int, verify_tokens: int = 1
) -> float:
    """Bytes one GPU keeps for the Gated DeltaNet states of ``seqs`` running sequences: each
    sequence's SSM and conv states (:meth:`ModelShape.linear_state_bytes_per_gpu`, the SSM
    state in the engine's dtype) times the states it holds (one, plus one per verify position
    under speculative decoding: :func:`~simspec.engine.costmodel.linear_attention.state_slots`);
    0 without such layers."""
    if not target.linear_layers or seqs <= 0:
        return 0.0
    from simspec.engine.costmodel.linear_attention import ssm_state_bytes, state_slots

    ssm, conv = target.linear_state_bytes_per_gpu(tp, ssm_state_bytes(target, engine.family))
    return seqs * state_slots(engine.family, verify_tokens) * (ssm + conv)


def window_tokens(target: ModelShape, block_size: int) -> int:
    """The most tokens a sequence keeps in a windowed layer: the window (or chunk) plus the
    block being filled (SlidingWindowSpec.max_memory_usage_bytes adds a block because a window
    need not start on a block boundary); 0 without windowed layers."""
    return target.sliding_window + block_size if target.sliding_layers else 0


def kv_blocks(
    free: float, block: int, per_token: float, window_per_token: float, window_cap: int
) -> int:
    """Blocks of ``block`` tokens that ``free`` bytes hold when each token costs ``per_token``
    (full-attention layers and the draft) plus ``window_per_token`` (windowed layers) for up to
    ``window_cap`` tokens, the most the windowed layers keep (running sequences times
    :func:`window_tokens`): below that cap every cached token may lie inside its sequence's
    window; past it only the full-attention layers grow. A model with windowed layers only is
    counted below the cap."""
    both = per_token + window_per_token
    if free <= window_cap * both or per_token <= 0:
        return int(free // (both * block))
    return int((free - window_cap * window_per_token) // (per_token * block))


# the model types of the architectures SGLang gives a hybrid sliding-window pool
# (model_config.py is_hybrid_swa_model: Llama4ForConditionalGeneration, GptOssForCausalLM,
# MiMoV2FlashForCausalLM, Step3p5ForCausalLM, Gemma4ForCausalLM / ForConditionalGeneration)
SGLANG_HYBRID_SWA = ("llama4", "llama4_text", "gpt_oss", "mimo_v2_flash", "step3p5", "gemma4")


def kv_blocks_sglang(
    free: float,
    block: int,
    per_token: float,
    window_per_token: float,
    target: ModelShape,
    ratio: float,
) -> int:
    """Blocks of the full-attention pool SGLang sizes from ``free`` bytes for a model with
    windowed layers: under its hybrid pool (SGLANG_HYBRID_SWA) the windowed layers get
    ``ratio`` times the full layers' tokens from the same budget (model_runner: full tokens =
    total / (ratio x swa layers + full layers)), whatever the window; any other model caches
    every token in every layer. The windowed pool binding first (sequences mostly shorter than
    the window) is not modelled."""
    share = sglang_window_share(target, ratio)
    return int(free // ((per_token + share * window_per_token) * block))


def sglang_window_share(target: ModelShape, ratio: float) -> float:
    """The windowed layers' tokens per full-layer token in SGLang's pool: ``ratio`` under its
    hybrid pool, else 1 (every layer caches every token)."""
    return ratio if target.model_type in SGLANG_HYBRID_SWA else 1.0


# SGLang's default share of the memory after weights and activations that Gated DeltaNet states
# get, as ratio / (1 + ratio) (python/sglang/srt/server_args.py ServerArgs
# mamba_full_memory_ratio = 0.9; model_runner's hybrid-GDN budget "total_rest_memory *
# mamba_full_memory_ratio / (1 + mamba_full_memory_ratio)")
SGLANG_MAMBA_FULL_MEMORY_RATIO = 0.9
# the most of that memory simspec lets vLLM's states take when max_num_seqs sequences' would
# exceed it (an assumption: vLLM shares one pool between states and KV pages as requests come)
VLLM_STATE_SHARE = 0.5


def linear_state_split(
    target: ModelShape, engine: EngineProfile, tp: int, free: float, seqs: int, demand: MemoryDemand
) -> tuple[float, int]:
    """(bytes, sequences): the memory one GPU sets aside for Gated DeltaNet states out of
    ``free`` bytes, and the running sequences (at most ``seqs``) whose states it holds; (0, 0)
    without such layers (see the module's docstring for each engine's rule). SGLang
    (model_runner_kv_cache_mixin.py, 0.5.10 wheel): ``demand.state_running`` > 0
    (max_running_requests set, radix cache off) allocates that many requests' states and their
    intermediate ones (handle_max_mamba_cache); else the memory split's slots, of which a
    running request takes ``demand.state_ratio`` (_resolve_max_num_reqs:
    max_mamba_cache_size // ratio)."""
    per_seq = linear_state_bytes(target, engine, tp, 1, demand.verify_tokens)
    if per_seq <= 0 or free <= 0:
        return 0.0, 0
    if engine.family == "sglang":
        if running := demand.state_running:
            return running * per_seq, min(seqs, running)
        ratio = SGLANG_MAMBA_FULL_MEMORY_RATIO
        budget = free * ratio / (1 + ratio)
        return budget, min(seqs, int(budget // per_seq) // max(demand.state_ratio, 1))
    held = min(seqs, int(free * VLLM_STATE_SHARE // per_seq))
    return held * per_seq, held


# vLLM's MXFP4 MoE backend pads each GPU's expert slices to the kernel's tiles when it creates
# the weights (Mxfp4MoEMethod.create_weights, vllm/model_executor/layers/quantization/mxfp4.py):
# (intermediate alignment, hidden alignment) by the backend get_mxfp4_backend picks on the
# architecture by default. Marlin (no triton_kernels below SM90; "n % 256 == 0 and k % 128 ==
# 0"): 128 and 256; Triton (Hopper): 64, hidden as it is; FlashInfer TRT-LLM MXFP4 x BF16
# (Blackwell with flashinfer, SM100_FI_MXFP4_BF16): 256 and 256.
# Hopper's Triton backend needs the optional triton_kernels package and torch >= 2.8
# (get_mxfp4_backend / Mxfp4MoEMethod._should_use_marlin in the 0.11.0 and 0.10.1 wheels): the
# 0.10.1 wheel pins torch 2.7.1, so it runs Marlin there (its padding; gpt-oss-120b "Model
# loading took 65.9651 GiB" on one H100 and did not start, vLLM issue #23278). The vllm profile
# times the Triton kernel (moe_kernels.yaml: AIConfigurator's later vLLM), so it pads as that
# kernel does; a run of an older vLLM holds ~5 GiB less KV for gpt-oss-120b on one H100.
VLLM_MXFP4_PADDING = {
    "ampere": (128, 256),
    "ada": (128, 256),
    "hopper": (64, 1),
    "blackwell": (256, 256),
}


def mxfp4_pad_bytes(
    target: ModelShape,
    engine: EngineProfile,
    gpu: GpuSpec,
    tp: int,
    ep: int,
    expert_bytes: float | None,
) -> float:
    """The bytes one GPU's routed experts gain from vLLM padding gpt-oss's MXFP4 experts to
    its kernel's tiles (VLLM_MXFP4_PADDING): 0 for another model, engine or architecture (QA:
    gpt-oss-120b's experts on an A100 hold 9 % more than their shape, 5.1 GiB, about half the
    KV cache left). The kernel timings were measured on the padded layers already."""
    align = VLLM_MXFP4_PADDING.get(gpu.arch)
    if target.model_type != "gpt_oss" or engine.family != "vllm" or align is None:
        return 0.0
    inter = target.moe_intermediate_size // (tp if ep == 1 else 1)
    hidden = target.hidden_size
    padded = -(-inter // align[0]) * align[0] * (-(-hidden // align[1]) * align[1])
    own = target.stored_bytes(target.expert_weight_dtype or target.weight_dtype)
    per_weight = expert_bytes if expert_bytes is not None else own  # None: the checkpoint's
    routed = target.routed_bytes_per_gpu(tp, ep, per_weight)
    return routed * (padded / (inter * hidden) - 1.0)


def plan_memory(
    gpu: GpuSpec,
    engine: EngineProfile,
    target: ModelShape,
    demand: MemoryDemand,
    tp: int = 1,
    pp: int = 1,
    ep: int = 1,
    weight_bytes: float | None = None,
    kv_bytes: float = BYTES_PER_PARAM,
    expert_bytes: float | None = None,
    dp: int = 1,
    *,
    share_given: bool = False,
) -> MemoryPlan:
    """The KV blocks left per GPU once the target's weights (over ``tp``; experts over ``ep``
    when expert-parallel; under ``dp`` attention ranks as :class:`ParallelLayout` places
    them), the draft and the activation reserve are placed, each block's
    tokens also holding the windowed layers' KV up to a window per running sequence
    (:func:`kv_blocks`); a ScenarioError when none are, saying how many GPUs the model needs.
    ``weight_bytes``/``expert_bytes``: bytes per weight of the target's linear layers and
    routed experts (its precision; None: the checkpoint's own); ``kv_bytes``: per cached K/V
    element (the KV-cache dtype; ``demand`` already counts the draft's at that dtype).

    Under DP attention each of the ``dp`` ranks caches only its own requests, over its tp/dp
    GPUs (MLA's latent no longer repeated on every GPU of the tp group): the plan's blocks are
    the ranks' pools together, each rank sized for its share of the token budget and
    sequences. ``share_given``: the deployment set the engine's memory share itself (a
    refusal then names it)."""
    draft_bytes = demand.draft_bytes
    # layers split over pp GPUs pool their memory (weights and KV divide with the layers)
    usable = gpu.budget_bytes * pp * _total_share(engine)
    layout = ParallelLayout(tp, ep, dp, engine.dp_attention)
    weights = layout.weight_bytes_per_gpu(target, weight_bytes, expert_bytes)
    weights += mxfp4_pad_bytes(target, engine, gpu, tp, ep, expert_bytes)
    a_tp = layout.attn_tp
    # SGLang's share holds only weights and KV pool: its activations live outside it. Each
    # of the pp stages runs the whole token budget through its layers and holds its own
    # activations (QA: reserved once, Llama-3.1-70B on two H100s had 35 % more KV than its
    # stages hold)
    act = (
        0.0
        if engine.flag("activations_in_share")
        else pp
        * activation_reserve(
            target, a_tp, -(-demand.max_tokens // dp), -(-demand.max_logit_rows // dp)
        )
    )
    block = kv_block_size(engine, target, gpu, a_tp, kv_bytes)
    kv_per_token = target.kv_bytes_per_token_per_gpu(a_tp, dtype_bytes=kv_bytes)
    # SGLang sizes its pool from the target's KV alone and places the draft (weights and a KV
    # pool of as many tokens) in the memory outside mem_fraction_static, which its reserve
    # grows for drafting (draft_outside_share)
    outside = engine.flag("draft_outside_share")
    if not outside:
        kv_per_token += demand.draft_kv_per_token
    window_per_token = target.window_kv_bytes_per_token_per_gpu(a_tp, kv_bytes)
    window_cap = -(-demand.max_seqs // dp) * window_tokens(target, block)
    free = (usable - weights - (0.0 if outside else draft_bytes) - act) * _free_share(engine)
    # vLLM V1: the windowed layers' blocks and the recurrent states leave the one pool sequence
    # by sequence, as the scheduler counts them (WindowBlocks); a pool of windowed layers alone
    # keeps kv_blocks
    hybrid = (
        (window_per_token > 0 or bool(target.linear_layers))
        and kv_per_token > 0
        and engine.flag("hybrid_kv_pool")
        and not demand.uniform_kv
    )
    if demand.uniform_kv:  # the windowed layers keep every token: no window is ever full
        window_cap = 1 << 62
    seq_state = linear_state_bytes(target, engine, a_tp, 1, demand.verify_tokens)
    if hybrid:
        state, state_seqs = 0.0, 0
    else:
        state, state_seqs = linear_state_split(
            target, engine, a_tp, free, -(-demand.max_seqs // dp), demand
        )
    if demand.state_running and state >= free:
        # SGLang allocates a set running limit's states outright (handle_max_mamba_cache):
        # past the memory, the limit is what to lower (QA: blamed on the token budget)
        raise ScenarioError(
            f"{target.id} on {gpu.id} at tp={tp}: the recurrent states of "
            f"{demand.state_running} running requests ({state / GIB:.1f} GiB, SGLang allocating "
            "those of max_running_requests outright with its radix cache off) exceed the "
            f"{free / GIB:.1f} GiB the weights and activations leave: lower --max-num-seqs"
        )
    free -= state
    swa = engine.params.get("swa_full_tokens_ratio") if window_per_token > 0 else None
    window_blocks = None
    if swa is not None:  # SGLang: a windowed pool beside the full one, or none (kv_blocks_sglang)
        blocks = kv_blocks_sglang(free, block, kv_per_token, window_per_token, target, swa.value)
    elif hybrid:
        blocks = int(free // (kv_per_token * block))
        per_seq = -(-window_tokens(target, block) // block) if window_per_token > 0 else 0
        page = kv_per_token * block
        fixed = math.ceil(seq_state / page - 1e-9) if seq_state > 0 else 0
        window_blocks = WindowBlocks(per_seq, window_per_token / kv_per_token, fixed)
        if blocks <= fixed:
            blocks = 0  # not one sequence's recurrent state and a block of its tokens fit
        else:  # for display: the states of the demand's sequences, at most the pool
            state = min(-(-demand.max_seqs // dp) * fixed, blocks) * page if fixed else 0.0
    else:
        blocks = kv_blocks(free, block, kv_per_token, window_per_token, window_cap)
    blocks = blocks if free > 0 else 0
    if target.linear_layers and state_seqs < 1 and not hybrid:
        blocks = 0  # not one sequence's recurrent state fits
    if blocks <= 0:
        where = f"over {pp} GPUs" if pp > 1 else "per GPU"
        need = min_gpus(gpu, engine, target, weight_bytes=weight_bytes, expert_bytes=expert_bytes)
        # what no token budget changes: the weights (and the draft's, where they share the
        # memory). QA: weights alone past the usable memory were blamed on the activations
        held = weights + (0.0 if outside else draft_bytes)
        # the layout's own weights, where data-parallel attention copies the attention,
        # embeddings and LM head onto every GPU of its ranks (min_gpus counts dp = 1)
        flat = ParallelLayout(tp, ep, 1, engine.dp_attention).weight_bytes_per_gpu(
            target, weight_bytes, expert_bytes
        ) + (held - layout.weight_bytes_per_gpu(target, weight_bytes, expert_bytes))
        # (whatever dp=1 would hold: the copies and the share a lower dp leaves are the
        # remedy to name first; QA, "raise tp" at tp=16, dp=16, where tp=32 is refused and
        # dp=4 fits)
        ranks = dp > 1 and held >= usable
        share = _total_share(engine)
        # a memory share the deployment set below what the weights need (QA: "it needs 16
        # GPUs" at --gpu-memory-utilization 0.5, the flag never named)
        lowered = (
            share_given and held >= usable and not ranks and not engine.flag("kv_memory_of_free")
        )
        flag = "--mem-fraction-static" if engine.family == "sglang" else "--gpu-memory-utilization"
        budget = need is not None and need <= tp and held < usable and not lowered
        # the draft's weights are what pass it, where the target's alone fit (min_gpus counts
        # the target alone: QA, "it needs 1 GPU" for a 70B draft beside an 8B target at tp=1)
        drafted = (
            not budget and not ranks and not lowered and draft_bytes > 0 and not outside
            and weights < usable and need is not None and need <= tp
        )  # fmt: skip
        tipped = ("the draft's weights and " if draft_bytes > 0 else "") + (
            "the activations of the run's token budget"
        )
        fix = (
            f"data-parallel attention holds a tp={a_tp} group's attention, embeddings and "
            f"LM head on each GPU of its dp={dp} ranks (weights {flat / GIB:.1f} GiB per GPU "
            "at dp=1)"
            if ranks
            else f"{flag} {share:g} leaves {usable / GIB:.1f} GiB of the "
            f"{gpu.budget_bytes * pp / GIB:.1f} GiB"
            + (f" (at that share it needs {need} {gpu.id} GPUs, tp={need})" if need else "")
            if lowered
            else f"the draft's weights pass it beside the target's (the target alone fits at "
            f"tp={need})"
            if drafted
            else f"{tipped} tip it over (plain decoding at the engine's default budget fits at "
            f"tp={need})"
            if budget
            else f"it needs {need} {gpu.id} GPUs at the least (tp={need})"
            if need is not None
            else f"it does not fit on {MAX_GPUS} {gpu.id} GPUs"
            if (limit := target.largest_attention_tp(MAX_GPUS)) == MAX_GPUS
            else f"tensor parallelism stops at tp={limit} (its "
            f"{target.num_attention_heads} attention heads) and it does not fit there"
        )
        at = f"tp={tp}, dp={dp}" if dp > 1 else f"tp={tp}"
        staged = engine.flag("sequential_stages")  # only HF's pp is modelled (build.check_stages)
        if ranks:
            remedy = "lower dp (--dp), raise tp, or "
        elif lowered:
            remedy = f"raise {flag} or tp, or "
        elif drafted:
            remedy = "raise tp, use a smaller draft, or "
        elif budget:  # QA: "raise tp" where tp already held the model and no draft ran
            remedy = "lower the token budget (--max-num-batched-tokens) or " + (
                "use a smaller draft, or " if draft_bytes > 0 else ""
            )
        elif "stops at" in fix:
            remedy = "raise pp, or " if staged else ""
        else:
            remedy = "raise tp or pp, or " if staged else "raise tp, or "
        raise ScenarioError(
            f"{target.id} does not fit on {gpu.id} at {at}: weights {weights / GIB:.1f} GiB + "
            + (f"draft {draft_bytes / GIB:.1f} GiB + " if draft_bytes > 0 else "")
            + f"activations {act / GIB:.1f} GiB exceed the "
            f"{usable / GIB:.1f} GiB usable {where} ({target.num_params / 1e9:.1f}B parameters"
            f"{_per_weight(weight_bytes, expert_bytes)}); {fix}: "
            f"{remedy}pick a larger GPU"
        )
    if outside:
        draft_kv = demand.draft_kv_per_token * blocks * block
        at = f"{target.id} on {gpu.id} at tp={tp}"
        _check_draft_outside(gpu, pp, usable, draft_bytes, draft_kv, at)
    if swa is not None:  # what the windowed layers' pool holds beside the full one
        window = sglang_window_share(target, swa.value) * blocks * block * window_per_token
    elif window_blocks is not None:  # a full window for each of the demand's sequences, at most
        # what the pool holds
        window = min(window_cap * window_per_token, blocks * block * kv_per_token)
    else:
        window = min(blocks * block, window_cap) * window_per_token
    return MemoryPlan(
        usable,
        weights,
        draft_bytes,
        act,
        kv_per_token,
        block,
        blocks * dp,
        window,
        state_bytes=state,
        state_seqs=state_seqs * dp,
        dp=dp,
        window=window_blocks,
        uniform_kv=demand.uniform_kv,
    )


def _check_draft_outside(
    gpu: GpuSpec, pp: int, usable: float, draft_bytes: float, draft_kv: float, at: str
) -> None:
    """SGLang loads the draft after sizing the target's pool, into the memory outside
    mem_fraction_static: a draft whose weights and KV (as many tokens as the target's pool)
    exceed all of it cannot start (the server runs out of memory loading it)."""
    outside = gpu.budget_bytes * pp - usable
    if draft_bytes + draft_kv > outside:
        raise ScenarioError(
            f"scheduler.gpu_memory_utilization: SGLang places the draft outside "
            f"mem_fraction_static, and for {at}: its weights {draft_bytes / GIB:.1f} GiB + KV "
            f"{draft_kv / GIB:.1f} GiB (a pool of as many tokens as the target's) exceed the "
            f"{outside / GIB:.1f} GiB left there per GPU: lower --mem-fraction-static, or use a "
            "smaller draft"
        )


def kv_block_size(
    engine: EngineProfile,
    target: ModelShape,
    gpu: GpuSpec,
    tp: int = 1,
    kv_bytes: float = BYTES_PER_PARAM,
) -> int:
    """Tokens per KV block: the engine's, or for an MLA model the block its MLA backend on
    this GPU forces (vLLM: FlashMLA's 64 on Hopper, CUTLASS MLA's 128 on Blackwell, and
    FlashMLASparse's 64 for a sparse-attention model on any GPU). vLLM gives a model with
    Gated DeltaNet layers an attention block whose page holds one layer's recurrent state,
    in multiples of 16 tokens (:func:`hybrid_block_size`; ``tp``: attention GPUs, ``kv_bytes``
    per cached element)."""
    if target.linear_layers and engine.family == "vllm":
        return max(int(engine["block_size"]), hybrid_block_size(target, engine, tp, kv_bytes))
    if not target.kv_lora_rank:
        return int(engine["block_size"])
    key = "mla_block_size_sparse" if target.index_topk else f"mla_block_size_{gpu.arch}"
    forced = engine.params.get(key)
    return int(forced.value) if forced is not None else int(engine["block_size"])


def hybrid_block_size(target: ModelShape, engine: EngineProfile, tp: int, kv_bytes: float) -> int:
    """vLLM's attention block for a model with Gated DeltaNet layers: one pool holds both
    kinds of page, so the attention page (block x one layer's K and V of a token) is raised
    to hold one layer's recurrent state, 16 x cdiv(state page, 16 x token page)
    (HybridAttentionMambaModelConfig.verify_and_update_config, vllm/model_executor/models/
    config.py; the form without prefix caching's chunk alignment): 272 tokens for
    Qwen3-Next at tp 4 (QA: simspec kept 16; vLLM logs "Setting attention block size to 784
    tokens" for Qwen3.5-27B)."""
    from simspec.engine.costmodel.linear_attention import ssm_state_bytes

    ssm, conv = target.linear_state_bytes_per_gpu(tp, ssm_state_bytes(target, engine.family))
    state_page = (ssm + conv) / len(target.linear_layers)
    token_page = target.kv_dim_per_gpu(tp) * 2 * kv_bytes
    align = 16  # kernel_block_alignment_size: the attention backends' 16-token blocks
    return align * -(-int(state_page) // int(align * token_page))


MAX_GPUS = 64  # Deployment.tp's bound
MIN_KV_TOKENS = 4096  # "some KV": one 4,096-token sequence


def min_gpus(
    gpu: GpuSpec,
    engine: EngineProfile,
    target: ModelShape,
    seq_tokens: int = MIN_KV_TOKENS,
    weight_bytes: float | None = None,
    expert_bytes: float | None = None,
) -> int | None:
    """The fewest GPUs (a power-of-two tp) whose memory holds the target's weights, the
    activation reserve of the engine's token budget and the KV of one ``seq_tokens``-token
    sequence (in windowed layers, at most its window), per :func:`plan_memory`; None past
    :data:`MAX_GPUS`."""
    tokens = int(engine.batch_defaults(gpu)[1])  # the prefill chunk on this GPU's memory
    windowed = min(seq_tokens, window_tokens(target, kv_block_size(engine, target, gpu)))
    tp = 1
    while tp <= MAX_GPUS:
        if target.attention_tp_refusal(tp) or (  # no engine splits its heads this way,
            weight_bytes is None  # or the checkpoint's FP8 scale blocks (build.check_fp8_blocks)
            and engine.family in BLOCK_CHECKED_ENGINES
            and ParallelLayout(tp, style=engine.dp_attention).block_refusal(target)
        ):
            tp *= 2
            continue
        # SGLang derives its share per tp (engine_share, for plain decoding)
        share = 1.0 if engine.flag("kv_memory_of_free") else engine_share(
            engine, gpu, target, tp=tp, chunk=tokens
        )  # fmt: skip
        usable = gpu.budget_bytes * share
        act = (
            0.0
            if engine.flag("activations_in_share")
            else activation_reserve(target, tp, tokens, 1)
        )
        kv = seq_tokens * target.kv_bytes_per_token_per_gpu(tp)
        kv += windowed * target.window_kv_bytes_per_token_per_gpu(tp)
        kv += linear_state_bytes(target, engine, tp, 1)
        kv /= _free_share(engine)
        weights = target.weight_bytes_per_gpu(tp, 1, weight_bytes, expert_bytes)
        weights += mxfp4_pad_bytes(target, engine, gpu, tp, 1, expert_bytes)
        if weights + act + kv <= usable:
            return tp
        tp *= 2
    return None


def _total_share(engine: EngineProfile) -> float:
    """The share of device memory the engine may fill: ``gpu_memory_utilization`` (vLLM,
    SGLang), or all of it where that fraction applies to what the weights and activations
    leave (``kv_memory_of_free``: TRT-LLM's free_gpu_memory_fraction)."""
    return 1.0 if engine.flag("kv_memory_of_free") else engine["gpu_memory_utilization"]


def _free_share(engine: EngineProfile) -> float:
    """The share of the memory left after weights and activations that holds KV."""
    return engine["gpu_memory_utilization"] if engine.flag("kv_memory_of_free") else 1.0


def _per_weight(weight_bytes: float | None, expert_bytes: float | None) -> str:
    if weight_bytes is None:
        return ""
    text = f", {weight_bytes:g} B/weight"
    if expert_bytes is not None and expert_bytes != weight_bytes:
        text += f", experts {expert_bytes:g}"
    return text


class BlockPool:
    """Counts of free KV blocks; requests hold whole blocks (no block ids needed)."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.free = num_blocks
        self.peak_used = 0

    @property
    def used(self) -> int:
        return self.num_blocks - self.free

    def allocate(self, n: int) -> None:
        if n > self.free:
            raise RuntimeError(f"allocating {n} blocks with {self.free} free")  # scheduler bug
        self.free -= n
        used = self.num_blocks - self.free
        if used > self.peak_used:  # max() without the builtin's call: taken every step
            self.peak_used = used

    def release(self, n: int) -> None:
        self.free += n
        if self.free > self.num_blocks:
            raise RuntimeError("released more blocks than allocated")  # scheduler bug
