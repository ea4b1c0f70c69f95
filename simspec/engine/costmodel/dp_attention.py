"""One forward under data-parallel attention (``dp`` attention ranks of ``tp/dp`` GPUs;
:class:`~simspec.engine.layout.ParallelLayout`): the step of the busiest rank, since every rank
steps together.

Ranks step in lockstep because the MoE layers span all of them: SGLang's ranks agree on their
token counts before every forward and a rank without requests runs an idle batch (the
scheduler's ``prepare_mlp_sync_batch`` with ``get_idle_batch``); vLLM's DP engine cores run a
dummy batch while any other rank has work (vllm/v1/engine/core.py at ac3cb2e,
``DPEngineCoreProc.run_busy_loop``: ``execute_dummy_batch``).

A rank runs its own requests' attention: the projections over its tp/dp GPUs, the kernel over
its own KV cache. The MoE layers take every rank's tokens: dispatched to their experts and
combined back under expert parallelism (SGLang: DeepEP's kernels where measured; vLLM: its
default all-gather and reduce-scatter of every rank's tokens), or gathered from all
ranks and scattered back after the layer, which runs sliced over all tp GPUs. How SGLang
gathers follows ``DpPaddingMode.get_dp_padding_mode`` (python/sglang/srt/layers/dp_attention.py
at 0016109): in CUDA graphs every rank is padded to the busiest (``MAX_LEN``, an all-gather);
a step with a prompt chunk on any rank gathers only the real tokens (``SUM_LEN``: each rank
writes its rows into a zeroed buffer of the summed length, summed by an all-reduce); an eager
decode takes ``MAX_LEN`` where ``sum x 2 > max x dp``, else ``SUM_LEN``. vLLM pads every rank
to the busiest (``get_dp_padding`` in the V1 model runner). Dense layers and the LM head run
per rank or gathered as the engine lays them out (:mod:`simspec.engine.layout`).

Requests spread evenly over the ranks, as the engines' controllers assign them: SGLang round-
robins by default (data_parallel_controller.py ``round_robin_scheduler``, at 000a3db); vLLM
sends each to the rank with the least ``4 x waiting + running`` (vllm/v1/engine/core_client.py
``DPLBAsyncMPClient.get_core_engine_for_request``, at 364631a). The busiest rank then holds
ceil(n / dp) of n sequences, with their mean share of the batch's tokens and context.
"""

from __future__ import annotations

import math
from typing import Protocol

from simspec.catalog.kernel_tables import DeepEpFit, GroupedGemmFit, deepep_low_latency_limit
from simspec.catalog.layer_kernels import LayerKernels
from simspec.catalog.models import BYTES_PER_PARAM, ModelShape
from simspec.catalog.precision import PrecisionSpec
from simspec.engine.costmodel.attention import AttentionKernels, projection_time
from simspec.engine.costmodel.elementwise import elementwise_work
from simspec.engine.costmodel.host import HostModel
from simspec.engine.costmodel.moe import (
    dispatch_combine_time,
    fresh_tokens,
    moe_mlp_time,
    routed_experts_time,
)
from simspec.engine.costmodel.roofline import OperatorTimes
from simspec.engine.costmodel.shapes import BatchShape, StepCost, as_prefill
from simspec.engine.layout import ParallelLayout

# seconds of (GEMMs, elementwise kernels, communication, LM head) of one forward
TokenTerms = tuple[float, float, float, float]


class CostModel(Protocol):
    """What a forward under DP attention reads of the cost model
    (:class:`~simspec.engine.costmodel.model.RooflineCostModel`)."""

    layout: ParallelLayout
    ops: OperatorTimes  # one GPU of all tp
    attn_ops: OperatorTimes  # one GPU of an attention rank's tp/dp
    host: HostModel
    alltoall: tuple[float, float]
    deepep: dict[str, DeepEpFit] | None

    def precision_of(self, model: ModelShape) -> PrecisionSpec | None: ...

    def experts_precision_of(self, model: ModelShape) -> PrecisionSpec | None: ...

    def lm_head_precision(self, model: ModelShape) -> PrecisionSpec | None: ...

    def moe_kernel(
        self, experts: PrecisionSpec | None, model: ModelShape
    ) -> GroupedGemmFit | None: ...

    def extra_kernels(self, model: ModelShape) -> LayerKernels: ...


class ModelTerms(Protocol):
    """What the cost model keeps per model (``model._ModelTerms``)."""

    model: ModelShape
    attention: AttentionKernels
    reuse: float
    dp_by_tokens: dict[tuple[int, int, int, int, bool, float | None, bool], TokenTerms]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def rank_share(batch: BatchShape, dp: int) -> BatchShape:
    """The busiest of ``dp`` ranks' share of ``batch``: ceil(n / dp) of its n sequences. A
    request lives on one rank, so the rank that holds the batch's largest sequence (a prefill
    chunk among decodes) runs all of its tokens; the largest is estimated from the sums as the
    token-weighted mean q (sum q^2 / sum q: exact for a uniform batch, within the decodes'
    share of a prefill chunk among decodes, never above the true largest), the rank's other
    sequences at the rest's mean. The rank runs whichever is more: that, or its sequences'
    mean share (token counts rounded up; context and logit rows by its share of sequences)."""
    n = batch.num_seqs
    held = _ceil_div(n, dp)
    if held >= n:
        return batch
    if batch.pre_tokens:
        return _with_largest_chunk(batch, held, dp)
    f = held / n
    tokens, q_sq = batch.num_tokens, batch.sum_q_sq
    largest = q_sq / tokens if tokens else 0.0
    rest = (held - 1) / (n - 1)
    with_largest = largest + rest * (tokens - largest)
    if with_largest <= tokens * f:  # a uniform batch: the mean share, as before
        return _mean_share(batch, held)
    share = with_largest / tokens
    return BatchShape(
        held,
        math.ceil(with_largest),
        largest * largest + rest * (q_sq - largest * largest),
        batch.sum_q_kv * share,
        batch.sum_kv * f,
        _ceil_div(batch.logit_tokens * held, n),
    )


def _mean_share(batch: BatchShape, held: int) -> BatchShape:
    """``held`` of the batch's sequences at their mean share of every sum (token counts and
    logit rows rounded up)."""
    n = batch.num_seqs
    f = held / n
    return BatchShape(
        held,
        _ceil_div(batch.num_tokens * held, n),
        batch.sum_q_sq * f,
        batch.sum_q_kv * f,
        batch.sum_kv * f,
        _ceil_div(batch.logit_tokens * held, n),
        min(round(batch.pre_seqs * f), held),
        _ceil_div(batch.pre_tokens * held, n),
        batch.pre_q_sq * f,
        batch.pre_q_kv * f,
        batch.pre_kv * f,
    )


def _with_largest_chunk(batch: BatchShape, held: int, dp: int) -> BatchShape:
    """:func:`rank_share` of a batch with prompt chunks: the rank holding the largest chunk runs
    all of it over its own context (the chunks' token-weighted mean size, sum q^2 / sum q, and
    mean context, sum q*kv / sum q: exact for equal chunks), with its share of the other chunks
    where there are more than ranks (ceil(chunks / dp) in all, the rest at the chunks' mean)
    and then of the decodes (its other sequences), unless its sequences' mean share of the
    whole batch is more. Under SGLang's DP attention without speculation the chunk's rank runs
    no decodes (Scheduler.ranks_apart): the decodes it is priced with are its neighbours', a
    little dear. (Review: the chunks' sums scaled by the rank's share of sequences priced a
    1,024-token chunk at 16k context among 56 decodes at 256 ms, the chunk alone at 333 ms;
    several chunks, each on its own rank, were priced as if some shared one.)"""
    rest, pre = batch.split_prefill()
    size = pre.sum_q_sq / pre.num_tokens
    context = pre.sum_q_kv / pre.num_tokens
    tokens = math.ceil(size)
    out = BatchShape(1, tokens, size * size, size * context, context, 0, 1, tokens)
    out.pre_q_sq, out.pre_q_kv, out.pre_kv = size * size, size * context, context
    more_chunks = min(_ceil_div(pre.num_seqs, dp), held) - 1
    for part, take in ((pre, more_chunks), (rest, held - 1 - more_chunks)):
        take = min(take, part.num_seqs)
        if take <= 0:
            continue
        g = take / part.num_seqs
        share = BatchShape(
            take,
            _ceil_div(part.num_tokens * take, part.num_seqs),
            part.sum_q_sq * g,
            part.sum_q_kv * g,
            part.sum_kv * g,
            0,
        )
        if part is pre:  # prompt chunks: their kernel path
            share = as_prefill(share)
        out = out + share
    mean = _mean_share(batch, held)
    if out.num_tokens < mean.num_tokens:  # the mean share is more
        return mean
    out.logit_tokens = mean.logit_tokens
    return out


def dp_forward(
    cost: CostModel,
    terms: ModelTerms,
    batch: BatchShape,
    overhead_s: float | None,
    n_layers: int,
    extra_gemm_s: float,
) -> StepCost:
    """:meth:`RooflineCostModel.forward` under DP attention: the busiest rank's attention
    and host time (each rank's scheduler handles its own sequences), the MoE over every rank's
    tokens."""
    host, dp = cost.host, cost.layout.dp
    rank = rank_share(batch, dp)
    graphed = host.graphed(rank)
    t = host.padded(rank.num_tokens) if graphed else rank.num_tokens
    # the routed experts' tokens that route afresh over all ranks (None: all of them)
    fresh = None
    if terms.reuse:
        fresh = fresh_tokens(batch.num_tokens, batch.num_seqs, terms.reuse)
    extend = bool(batch.pre_tokens)
    key = (t, batch.num_tokens, rank.logit_tokens, n_layers, graphed, fresh, extend)
    by_tokens = terms.dp_by_tokens.get(key)
    if by_tokens is None:
        by_tokens = terms.dp_by_tokens[key] = dp_token_terms(cost, terms.model, *key)
    attention = terms.attention.time(rank, n_layers)
    return host.step_cost(
        by_tokens, attention, extra_gemm_s, overhead_s, rank.num_seqs, n_layers, graphed
    )


def padded_fresh(fresh: float | None, total: int, gathered: int) -> float | None:
    """The tokens routing afresh among ``gathered`` rows of which ``total`` are the ranks' real
    tokens (``fresh`` of them afresh; None: every row afresh): the padding rows at the real
    rows' share, as a padded CUDA graph's rows are priced (RooflineCostModel._shape_terms). A
    rank pads from its own input buffer, which vLLM reuses between steps (gpu_model_runner
    ``_dummy_run`` reads ``self.input_ids`` as it stands; an idle rank's dummy batch runs
    through ``execute_dummy_batch``): earlier tokens of its sequences, not independent ones.
    Counted wholly afresh, a batch whose ranks were all busy read fewer experts than one rank's
    sequence padded to the same rows, and an EAGLE-3 verify under vLLM DP 8 got faster from
    concurrency 1 to 8 (QA: Qwen3-235B-A22B on H200, 29.5 to 28.5 ms a step)."""
    if fresh is None or total <= 0:
        return None
    return fresh * gathered / total


def dp_token_terms(
    cost: CostModel,
    model: ModelShape,
    t: int,
    total: int,
    logits: int,
    n_layers: int,
    graphed: bool = True,
    fresh: float | None = None,
    extend: bool = False,
) -> TokenTerms:
    """(GEMMs, elementwise, communication, LM head) seconds of one forward on the busiest
    rank's GPU: ``t`` tokens and ``logits`` logit rows on that rank, ``total`` tokens over all
    ranks (what the routed experts compute; ``fresh`` of them route afresh, None: all);
    ``extend``: a prompt chunk is in the step (SGLang then gathers the summed length)."""
    lay, ops, attn = cost.layout, cost.ops, cost.attn_ops
    h, dp, a_tp = model.hidden_size, lay.dp, lay.attn_tp
    n_moe = model.moe_layers_in(n_layers)
    n_dense = n_layers - n_moe
    w = cost.precision_of(model)
    hidden = BYTES_PER_PARAM * h
    gathered = t * dp  # every rank's tokens, padded to the busiest rank's (MAX_LEN)
    if lay.style == "sglang" and not graphed and (extend or 2 * total <= gathered):
        # SUM_LEN: the real tokens in a zeroed buffer, summed across the GPUs; the layer's
        # partial outputs summed the same way before each rank takes its rows back
        gathered = total
        exchange = 2 * ops.allreduce_time(hidden * gathered, graphed)
    else:
        # a layer over all tp GPUs: gather every rank's tokens, then reduce-scatter its
        # output (a ring reduce-scatter moves what the all-gather does)
        exchange = 2 * ops.allgather_time(hidden * gathered)
    attn_reduce = attn.allreduce_time(hidden * t, graphed)
    gemm = n_layers * projection_time(attn, model, t, w)
    comm = n_layers * attn_reduce
    if n_dense:
        if lay.gathered:
            gemm += n_dense * ops.mlp_time(gathered, h, model.intermediate_size // lay.tp, w)
            comm += n_dense * exchange
        else:
            gemm += n_dense * attn.mlp_time(t, h, model.intermediate_size // a_tp, w)
            comm += n_dense * attn_reduce
    kernel = None
    if n_moe:
        experts = cost.experts_precision_of(model)
        kernel = cost.moe_kernel(experts, model)
        if lay.ep > 1:
            # each GPU routes its own tokens (a rank's split over its GPUs)
            local = _ceil_div(t, a_tp)
            layer = ops.gemm_time(local, h, model.num_experts)
            shared = model.shared_expert_intermediate_size
            if shared:
                rows = local if lay.shared_tp == 1 else t
                layer += ops.mlp_time(rows, h, shared // lay.shared_tp, w)
            # vLLM pads every rank's batch to the busiest rank's (gpu_model_runner
            # get_dp_padding), and the padding rows are routed too; SGLang's DeepEP dispatch
            # sends only the real tokens
            routed, more = total, fresh
            if lay.style == "vllm":
                routed, more = gathered, padded_fresh(fresh, total, gathered)
            layer += routed_experts_time(ops, model, routed, lay.ep, experts, kernel, more)
            if lay.style == "vllm":
                # vLLM's default all2all backend gathers every rank's tokens to every GPU and
                # reduce-scatters the experts' outputs back (VLLM_ALL2ALL_BACKEND
                # "allgather_reducescatter", vllm/envs.py at v0.11.0); DeepEP's kernels run only
                # where a deployment asks for them (QA: priced with SGLang's DeepEP tables);
                # the rank's GPUs then sum their slices of the shared expert and of the
                # experts' output by an all-reduce of their own (deepseek_v2.py
                # DeepseekV2MoE.forward: "elif self.tp_size > 1: ...
                # maybe_all_reduce_tensor_model_parallel"; none at one GPU a rank)
                comm += n_moe * (exchange + attn_reduce)
            else:
                limit = deepep_low_latency_limit() if cost.deepep else 0
                comm += n_moe * dispatch_combine_time(
                    model, local * lay.ep, lay.ep, cost.alltoall, cost.deepep, limit
                )
            gemm += n_moe * layer
        else:
            # the gathered rows: every rank's tokens padded to the busiest rank's
            more = padded_fresh(fresh, total, gathered)
            gemm += n_moe * moe_mlp_time(ops, model, gathered, 1, w, experts, kernel, more)
            comm += n_moe * exchange
    # elementwise kernels as on one GPU of a tp/dp group running the rank's tokens (a gathered
    # layer's activations over all GPUs amount to the same bytes per GPU)
    nbytes, kernels = elementwise_work(
        model, t, a_tp, n_layers, kernel is not None, cost.extra_kernels(model)
    )
    elementwise = ops.elementwise_time(nbytes, kernels)
    lm_head, head_w = 0.0, cost.lm_head_precision(model)
    if lay.gathered:  # every rank's logit rows over the vocab shards of all tp GPUs
        rows = logits * dp
        if rows:
            lm_head = ops.gemm_time(rows, h, model.vocab_size // lay.tp, head_w)
            comm += ops.allgather_time(hidden * rows)
        comm += ops.allgather_time(BYTES_PER_PARAM * rows * model.vocab_size)
    else:
        if logits:
            lm_head = attn.gemm_time(logits, h, model.vocab_size // a_tp, head_w)
        comm += attn.allgather_time(BYTES_PER_PARAM * logits * model.vocab_size)
    return (gemm, elementwise, comm, lm_head)
