"""A mixture-of-experts layer's MLP on one GPU: the router GEMM, the shared expert, and the
routed experts as two grouped GEMMs (gate-up, down) that read every distinct expert the step's
tokens touch (:func:`~simspec.engine.costmodel.work.distinct_experts`) once and compute every
routed token. Where a measured table covers the (GPU, engine, experts' dtype) they are timed
as the engine's own MoE kernel runs them (:func:`~simspec.engine.costmodel.kernels.
grouped_gemm_time`: block padding per expert, waves over the SMs, the routing kernels' cost);
elsewhere with the profile's GEMM constants (fitted on dense GEMMs). Under expert parallelism
``ep`` GPUs hold whole experts and exchange the tokens by all-to-all: DeepEP's kernels where
their table covers the GPU and EP size, else one fitted point-to-point link."""

from __future__ import annotations

import bisect
import math

from simspec.catalog.kernel_tables import DeepEpFit, GroupedGemmFit, tensor_peak
from simspec.catalog.models import BYTES_PER_PARAM, ModelShape
from simspec.catalog.precision import PrecisionSpec
from simspec.engine.costmodel.kernels import deepep_time, grouped_gemm_time
from simspec.engine.costmodel.moe_routing import routing_ratio, served_touched
from simspec.engine.costmodel.roofline import OperatorTimes, roofline_time
from simspec.engine.costmodel.work import busiest_rank_experts, distinct_experts

# Small kernels a MoE layer adds in vLLM's fused MoE (vllm/model_executor/layers/fused_moe/
# fused_moe.py): the top-k routing (topk_softmax or grouped_topk), moe_align_block_size (sort the
# tokens by expert) and moe_sum (combine the k outputs); each pays the per-kernel latency.
# A fitted MoE kernel (``kernel`` below) has them in its own fixed and per-pair cost.
MOE_KERNELS_PER_LAYER = 3


def moe_mlp_time(
    ops: OperatorTimes,
    model: ModelShape,
    tokens: int,
    ep: int,
    w: PrecisionSpec | None = None,
    experts: PrecisionSpec | None = None,
    kernel: GroupedGemmFit | None = None,
    fresh: float | None = None,
    scattered: bool = False,
) -> float:
    """One MoE layer's MLP on one GPU: the router (replicated, bf16: vLLM builds the gate
    unquantised), the shared expert (sliced over tp, at the layers' precision ``w``) and the
    routed experts (at ``experts``; None: bf16; timed by ``kernel`` where given; ``fresh``:
    :func:`routed_experts_time`). ``scattered``: SGLang's all-to-all backend (DeepEP) without
    DP attention, where each of the tp GPUs keeps its share of the tokens (the sparse layer's
    ``ScatterMode.SCATTERED``, python/sglang/srt/layers/communicator.py), routes them and runs
    the shared expert whole on them (``DeepseekV2MoE`` builds it at tp_size 1 under DeepEP);
    the routed experts take every token, dispatched to the GPU that holds each expert."""
    h, t = model.hidden_size, tokens
    rows = -(-t // ops.tp) if scattered else t
    total = ops.gemm_time(rows, h, model.num_experts)
    shared = model.shared_expert_intermediate_size // (1 if scattered else ops.tp)
    if shared:
        total += ops.mlp_time(rows, h, shared, w)
    return total + routed_experts_time(ops, model, t, ep, experts, kernel, fresh)


def excess_reuse(reuse: float, k: int, experts: int) -> float:
    """The share of a token's experts that repeat the preceding token's beyond chance: a
    measured ``reuse`` counts the k/E an independent draw repeats too, and
    :func:`fresh_tokens`' independent draws already repeat at that rate, so only the excess,
    (reuse - k/E) / (1 - k/E), is taken off (0 at or below chance). Taken whole, a router
    measured at exactly chance would read fewer experts than an unmeasured one (Mixtral, k/E =
    0.25: 12 % fewer for two tokens)."""
    chance = k / experts if experts else 0.0
    if reuse <= chance or chance >= 1.0:
        return 0.0
    return (reuse - chance) / (1.0 - chance)


def fresh_tokens(tokens: float, seqs: int, reuse: float) -> float:
    """How many independently routed tokens read as many distinct experts as ``tokens``
    tokens of ``seqs`` sequences whose router reuses the share ``reuse`` of the preceding
    token's experts beyond chance (:func:`excess_reuse` of simspec/data/expert_locality.yaml's
    share): a sequence's first token in the
    forward routes afresh, each later one adds (1 - reuse) of its experts. A decode step (one
    token a sequence) or a model without measured reuse keeps ``tokens``."""
    if reuse <= 0.0 or tokens <= seqs:
        return float(tokens)
    return tokens - reuse * (tokens - seqs)


def routed_experts_time(
    ops: OperatorTimes,
    model: ModelShape,
    tokens: int,
    ep: int,
    experts: PrecisionSpec | None = None,
    kernel: GroupedGemmFit | None = None,
    fresh: float | None = None,
) -> float:
    """The routed experts of one MoE layer for ``tokens`` tokens on one GPU: two grouped
    GEMMs (vLLM fused_moe: w13 = gate and up, then w2 = down) that stream the weights of every
    distinct expert the tokens touch once and multiply every (token, expert) pair. Sliced
    experts (ep 1): each GPU holds 1/tp of every expert. Whole experts (ep GPUs): each holds
    1/ep of them, routing being uniform, and the layer takes as long as the rank that holds
    the most of the distinct experts touched (:func:`~simspec.engine.costmodel.work.
    busiest_rank_experts`), with its share of the pairs.
    Where a measured kernel times sliced experts, the tokens route as a served batch does,
    skewed (:mod:`~simspec.engine.costmodel.moe_routing`), instead of uniformly. ``fresh``
    (:func:`fresh_tokens`; None: ``tokens``): the independently routed tokens that touch as
    many experts as these do, consecutive tokens of a sequence sharing experts; every pair is
    still multiplied."""
    k = model.num_experts_per_tok
    pairs = float(tokens * k)
    drawn = float(tokens) if fresh is None else fresh
    if kernel is not None and kernel.routing and ep == 1:
        # a served batch routes skewed, as the measured tables time it (moe_routing), and no
        # smaller batch of it costs more (served_envelope)
        return served_envelope(ops, model, pairs, drawn * k, experts, kernel)
    touched = distinct_experts(model.num_experts, k, drawn)
    return grouped_experts_time(ops, model, pairs, touched, ep, experts, kernel)


# how far below a batch the envelope looks (a factor of its routed pairs): the ratio's dips
# span one to three of its measured sizes (a factor of 2 to 3), but where the kernel's fixed
# cost dominates (small expert slices) the balanced time hardly grows over them while the
# ratio, a median over the tables' rows, takes a share of that fixed cost too: at a span of 4
# Mixtral's experts on 8 x B200 (TRT-LLM, NVFP4) cost 54.4 us for 1 token and 47.3 for 5 (QA).
# 64 reaches from a verify's sizes (x ~ 0.3-2) down past the smallest measured size
ENVELOPE_SPAN = 64.0
# the smaller batches the envelope weighs, besides the measured routing sizes: a grid of this
# many points an octave of routed pairs per expert, fixed in absolute terms (2^(k/n)) so that a
# batch that grows past a measured size keeps weighing the points below it (QA: sampling
# between the last size and the batch only, gpt-oss-120b's experts fell 10 % from 2,560 to
# 2,570 tokens, crossing a size)
ENVELOPE_GRID = 8


def served_envelope(
    ops: OperatorTimes,
    model: ModelShape,
    pairs: float,
    drawn_pairs: float,
    experts: PrecisionSpec | None,
    kernel: GroupedGemmFit,
) -> float:
    """The routed experts' time of a served (skewed) batch of ``pairs`` routed pairs
    (``drawn_pairs`` of them drawn independently), at least that of any smaller batch of
    the same mix: the measured served-over-balanced ratio (moe_routing) falls faster than
    the balanced time rises over some sizes, and its nodes carry the tables' noise, so the
    product alone made a batch up to 13 % cheaper than a smaller one (QA: Mixtral at 306
    routed tokens). More tokens under one routing law never stream fewer expert weights nor
    multiply fewer pairs, so the time is the largest over the measured sizes down to
    ENVELOPE_SPAN times smaller and a fixed grid of sizes between them."""
    e = model.num_experts
    x = drawn_pairs / e
    sizes = [node for node, _ in kernel.routing]
    # the tile the kernel runs is the one the batch's own M picks (vLLM's and SGLang's
    # get_default_config read the real token count): the scaled sizes below stand for the
    # routing ratio's measured points, not for batches that would pick another tile (QA: a
    # padded row's fractional share scaled 128 tokens to 128.8, past Qwen3's 128 experts, and
    # quadrupled the compute of 127 sequences on an H20 against 128)
    tile = pairs / model.num_experts_per_tok

    def measured(scale: float) -> float:
        touched = served_touched(e, drawn_pairs * scale)
        ratio = routing_ratio(kernel.routing, drawn_pairs * scale / e)
        return ratio * grouped_experts_time(
            ops, model, pairs * scale, touched, 1, experts, kernel, tile_tokens=tile
        )

    def served(scale: float) -> float:
        """The served time at ``scale`` of the batch: the ratio times the balanced time at a
        measured routing size, and between two sizes interpolated in log-log from theirs. The
        balanced time steps where the mean pairs per expert pass a multiple of the kernel's
        block (every expert padded one more block at once), the served one does not (random
        routing spreads the loads): the ratio, measured at the sizes only, was applied between
        them to a balanced time that had stepped (QA: gpt-oss-120b's experts +55 % from 2,048
        to 2,049 tokens)."""
        at = x * scale
        i = bisect.bisect_left(sizes, at)
        if i == len(sizes) and kernel.block_m:
            # past the last size the ratio is held: between whole blocks of pairs per expert,
            # where the balanced time has no padding to step by
            block = float(kernel.block_m)
            lo = max(sizes[-1], math.floor(at / block) * block)
            hi = (math.floor(at / block) + 1) * block
        elif i == 0 or i == len(sizes) or sizes[i] == at:
            return measured(scale)
        else:
            lo, hi = sizes[i - 1], sizes[i]
        if at <= lo:
            return measured(scale)
        w = math.log(at / lo) / math.log(hi / lo)
        return math.exp((1 - w) * math.log(measured(lo / x)) + w * math.log(measured(hi / x)))

    if x <= 0:
        return measured(1.0)
    low = x / ENVELOPE_SPAN
    points = {node for node, _ in kernel.routing if low <= node < x}
    first = math.ceil(math.log2(low) * ENVELOPE_GRID)
    last = math.floor(math.log2(x) * ENVELOPE_GRID)
    points.update(2.0 ** (k / ENVELOPE_GRID) for k in range(first, last + 1))
    return max([served(1.0), *(served(p / x) for p in points if p < x)])


def grouped_experts_time(
    ops: OperatorTimes,
    model: ModelShape,
    pairs: float,
    touched: float,
    ep: int,
    experts: PrecisionSpec | None = None,
    kernel: GroupedGemmFit | None = None,
    tile_tokens: float | None = None,
) -> float:
    """The routed-expert GEMMs of one MoE layer for ``pairs`` (token, expert) pairs over
    ``touched`` distinct experts (whole batch), on one GPU (see :func:`routed_experts_time`):
    as the fitted ``kernel`` times them, else at the roofline of the experts' precision
    (weight bytes and compute peak). ``tile_tokens``: the M the kernel picks its tile by
    (None: the pairs' tokens), the batch's own where a served envelope scales the pairs."""
    h = model.hidden_size
    # the kernel's M (every token the layer routes: an EP rank's kernel runs over the batch's
    # tokens gathered, vLLM's naive all-to-all) and the experts on this GPU
    tokens, local = pairs / model.num_experts_per_tok, float(model.num_experts)
    if tile_tokens is not None:
        tokens = tile_tokens
    if ep > 1:
        # the busiest rank's experts and pairs (the layer waits for it: busiest_rank_experts;
        # QA: the mean rank's had a lone top-1 token read 1/ep of an expert, EP8 faster than
        # TP8 at batch 1); its pairs grow as its experts do, to the mean once every expert
        # is touched
        busiest = busiest_rank_experts(model.num_experts, ep, touched)
        share = busiest / (touched / ep) if touched > 0 else 1.0
        width, touched, pairs = model.moe_intermediate_size, busiest, pairs / ep * share
        local /= ep
    else:
        width = model.moe_intermediate_size // ops.tp
    if kernel is not None:
        gpu = ops.gpu
        rate = float(tensor_peak(gpu, kernel.compute) or gpu.bf16_dense_flops)
        memory_rate = gpu.hbm_bandwidth_bytes_s
        return grouped_gemm_time(
            kernel, h, width, pairs, touched, kernel.sms, rate, memory_rate,
            kernel.weight_bytes, tokens, local,
        )  # fmt: skip
    g = ops.gemm
    rate_c, wbytes = g.compute_rate, float(BYTES_PER_PARAM)
    if experts is not None:
        rate_c, wbytes = ops.compute_rate_at(experts), experts.weight_bytes
    abytes = BYTES_PER_PARAM
    up = roofline_time(
        2.0 * pairs * h * 2 * width,
        touched * h * 2 * width * wbytes + abytes * pairs * (h + 2 * width),
        rate_c,
        g.memory_rate,
        g.latency,
        g.sharpness,
    )
    down = roofline_time(
        2.0 * pairs * width * h,
        touched * width * h * wbytes + abytes * pairs * (width + h),
        rate_c,
        g.memory_rate,
        g.latency,
        g.sharpness,
    )
    return up + down


def alltoall_time(model: ModelShape, tokens: int, ep: int, link: tuple[float, float]) -> float:
    """One all-to-all of a MoE layer under expert parallelism (dispatch, or combine): the
    step's tokens split evenly over the ep GPUs, each token's hidden state sent to the GPUs of
    its k experts, (ep - 1)/ep of them remote (uniform routing), over point-to-point NVLink
    transfers running side by side (DeepEP / vLLM's all2all backends). ``link``: (latency s,
    bandwidth B/s) of one transfer (:func:`~simspec.catalog.hardware.load_alltoall`)."""
    k = model.num_experts_per_tok
    nbytes = BYTES_PER_PARAM * (tokens / ep) * k * model.hidden_size * (ep - 1) / ep
    latency, bandwidth = link
    return latency + nbytes / bandwidth if nbytes > 0 else 0.0


def dispatch_combine_time(
    model: ModelShape,
    tokens: int,
    ep: int,
    link: tuple[float, float],
    deepep: dict[str, DeepEpFit] | None = None,
    low_latency_limit: int = 0,
) -> float:
    """One MoE layer's dispatch and combine under expert parallelism. With ``deepep`` (DeepEP's
    fitted kernels, :func:`~simspec.catalog.kernel_tables.deepep_fits`): each GPU sends its
    share of the step's tokens to the GPUs of their k experts, by the low-latency kernels up to
    ``low_latency_limit`` tokens per GPU (SGLang --deepep-mode auto runs them for decode
    batches, whose buffer holds that many tokens per rank) and the normal kernels above it.
    Without: two point-to-point all-to-alls (:func:`alltoall_time`)."""
    if deepep is None:
        return 2 * alltoall_time(model, tokens, ep, link)
    per_rank = tokens / ep
    mode = "low_latency" if per_rank <= low_latency_limit else "normal"
    h, k = model.hidden_size, model.num_experts_per_tok
    return deepep_time(deepep[f"{mode}_dispatch"], per_rank, h, k) + deepep_time(
        deepep[f"{mode}_combine"], per_rank, h, k
    )
