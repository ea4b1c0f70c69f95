"""FLOP and byte counts of the operators a forward pass runs, counted once here so that the
calibration fit (:mod:`simspec.studies.calibration`) and the simulator count the same work."""

from __future__ import annotations

import math
from functools import cache
from typing import TypeVar

import numpy as np

from simspec.catalog.models import BYTES_PER_PARAM

Num = TypeVar("Num", float, np.ndarray)

# Elementwise kernels per decoder layer in vLLM: two fused residual-add + RMSNorm, RoPE on Q and
# K, SiLU-and-mul (vllm/model_executor/models/llama.py, LlamaDecoderLayer, which passes the
# residual into RMSNorm so the add is fused). Each pays the profile's per-kernel latency.
ELEMENTWISE_KERNELS_PER_LAYER = 4


def gemm_work(m: Num, k: Num, n: Num, weight_bytes: float = BYTES_PER_PARAM) -> tuple[Num, Num]:
    """FLOPs and bytes of an (m x k) @ (k x n) matmul: weights at ``weight_bytes`` per element
    (bf16: 2; the precision's, simspec.catalog.precision) plus bf16 input and output."""
    return 2.0 * m * k * n, weight_bytes * k * n + BYTES_PER_PARAM * m * (k + n)


def attention_work(
    q_dim: Num,
    kv_dim: Num,
    num_tokens: Num,
    sum_q_sq: Num,
    sum_q_kv: Num,
    sum_kv: Num,
    kv_bytes: float = BYTES_PER_PARAM,
) -> tuple[Num, Num]:
    """FLOPs and bytes of causal attention of ``num_tokens`` new tokens over their sequences'
    caches (per layer, per GPU shard).

    New token i of a sequence attends to its cached tokens plus i new ones, so there are
    sum_i q_i * (kv_i + (q_i + 1) / 2) query-key pairs, each costing QK^T and PV (4 * q_dim
    FLOPs). Bytes: K and V of every context token (cached and new) read once, Q read and O
    written. K and V are ``kv_bytes`` per element (the KV-cache dtype); Q and O bf16.
    """
    pairs = sum_q_kv + (sum_q_sq + num_tokens) / 2.0
    flops = 4.0 * q_dim * pairs
    nbytes = kv_bytes * 2.0 * kv_dim * (sum_kv + num_tokens)
    nbytes += BYTES_PER_PARAM * 2.0 * q_dim * num_tokens
    return flops, nbytes


def mla_attention_work(
    heads: int,
    latent: int,
    value_latent: int,
    num_tokens: Num,
    sum_q_sq: Num,
    sum_q_kv: Num,
    sum_kv: Num,
    kv_bytes: float = BYTES_PER_PARAM,
) -> tuple[Num, Num]:
    """FLOPs and bytes of absorbed multi-head latent attention (per layer, per GPU shard).

    vLLM's MLA decode path (vllm/v1/attention/backends/mla/common.py, "Data-Movement Friendly
    Approach"; FlashMLA takes verify steps of up to 128 query tokens on the same path,
    reorder_batch_threshold 128 in backends/mla/flashmla.py) attends like multi-query
    attention: each of the GPU's ``heads`` scores its query, absorbed into the latent, against
    the one cached latent of ``latent`` = kv_lora_rank + qk_rope_head_dim per token, and sums
    the latents (``value_latent`` = kv_lora_rank) by the scores. The latent cache is read once
    per sequence for all heads; Q (latent width) is read and O (value latent) written.
    Prompt chunks take the compute-friendly path instead (K and V up-projected per head:
    AttentionKernels._mla_prefill); this formula would count about 3.4x their attention
    FLOPs for DeepSeek-V3.
    """
    pairs = sum_q_kv + (sum_q_sq + num_tokens) / 2.0
    flops = 2.0 * heads * (latent + value_latent) * pairs
    nbytes = kv_bytes * latent * (sum_kv + num_tokens)
    nbytes += BYTES_PER_PARAM * heads * (latent + value_latent) * num_tokens
    return flops, nbytes


def distinct_experts(
    experts: int, top_k: int, tokens: float, popularity: np.ndarray | None = None
) -> float:
    """Expected number of distinct experts ``tokens`` tokens route to, each choosing ``top_k``
    of ``experts``.

    Uniform routing (the default): an expert is missed by one token with probability
    1 - k/E, so E * (1 - (1 - k/E)**N) are touched. ``popularity`` (a per-expert share of the
    routed tokens, summing to 1) is the hook for a measured routing skew: expert e is then
    missed with probability 1 - k * p_e per token (capped at 1). No packaged model has a
    measured skew, so simspec routes uniformly, which touches the most experts for N tokens
    (an upper bound on the weights a step reads).
    """
    if tokens <= 0:
        return 0.0
    if popularity is None:
        return experts * (1.0 - (1.0 - top_k / experts) ** tokens)
    hit = np.minimum(top_k * np.asarray(popularity, dtype=np.float64), 1.0)
    return float(np.sum(1.0 - (1.0 - hit) ** tokens))


def busiest_rank_experts(experts: int, ep: int, touched: float) -> float:
    """Expected distinct experts on the busiest of ``ep`` GPUs that hold the ``experts`` whole
    (as evenly as vLLM splits them), when ``touched`` distinct experts
    (:func:`distinct_experts`) fall among them as a uniformly random subset. Under expert
    parallelism the MoE layer ends when its slowest rank does: vLLM's FusedMoE with
    --enable-expert-parallel sums the ranks' outputs in the
    all-reduce after the experts, DeepEP's combine gathers from every rank, and DeepSeek-V3's
    report (arXiv 2412.19437, section 3.4) balances the experts over GPUs (EPLB) because the
    most loaded GPU sets the time. One token of top-1 routing reads a whole expert on one GPU
    (the mean, 1/ep of one, would have it read a slice, as tensor parallelism does).
    Between whole counts the expectation is interpolated linearly."""
    if ep <= 1 or touched <= 0:
        return max(touched, 0.0)
    low = int(touched)
    frac = touched - low
    below = _busiest(experts, ep, low)
    return below if frac == 0 else (1 - frac) * below + frac * _busiest(experts, ep, low + 1)


@cache
def _busiest(experts: int, ep: int, drawn: int) -> float:
    """E[max over ranks] of a multivariate hypergeometric draw of ``drawn`` of ``experts``
    items in ``ep`` groups, sized as vLLM's expert map splits them (experts // ep each, one
    more on the first experts % ep ranks: ``determine_expert_map``): the sum over m of
    P(max > m), where P(max <= m) is the x^drawn coefficient of the product over groups of
    sum_{j <= m} C(size, j) x^j, over C(experts, drawn). Each group's terms are scaled by
    C(experts, drawn)^(-1/ep), in logs, so the product is a probability and no count
    overflows a float (QA: 2,048 experts raised an OverflowError)."""
    base, extra = divmod(experts, ep)
    sizes = [base + 1] * extra + [base] * (ep - extra)
    drawn = min(drawn, experts)
    if drawn <= 0:
        return 0.0
    share = _log_comb(experts, drawn) / ep
    # each group size's scaled terms C(size, j) / C(experts, drawn)^(1/ep), j = 0..size
    terms = {
        size: np.exp(np.array([_log_comb(size, j) for j in range(size + 1)]) - share)
        for size in set(sizes)
    }
    floor = -(-drawn // ep)  # the busiest group holds at least this many
    expected = float(floor)
    for m in range(floor, max(sizes)):
        poly = np.ones(1)
        for size in sizes:
            poly = np.convolve(poly, terms[size][: m + 1])[: drawn + 1]
        at_most = float(poly[drawn]) if len(poly) > drawn else 0.0
        expected += 1.0 - at_most
        if at_most > 1.0 - 1e-12:
            break
    return expected


def _log_comb(n: int, k: int) -> float:
    """log C(n, k), for counts past a float's range."""
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def elementwise_bytes(tokens: Num, hidden: int, q_dim: int, kv_dim: int, inter: int) -> Num:
    """Bytes one decoder layer's elementwise kernels move: two residual adds, each fused into
    the RMSNorm after it (read the input and the residual, write both: 4h; vLLM's
    fused_add_rms_norm, SGLang's RMSNorm.forward with a residual; QA: priced as a norm of 2h
    and an add of 3h apart, 10h a layer for 8h), RoPE on Q and K (read + write), SiLU-and-mul
    (read 2i, write i)."""
    return BYTES_PER_PARAM * tokens * (8 * hidden + 2 * (q_dim + kv_dim) + 3 * inter)
