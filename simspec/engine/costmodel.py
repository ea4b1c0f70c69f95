"""Time of one forward pass: a per-operator roofline (:meth:`RooflineCostModel.forward`).

A batch is described per sequence by (new query tokens, tokens already in KV). The query axis
matters: a verify step feeds K+1 (or tree-size) tokens per sequence. Each operator costs

    latency + smoothmax(FLOPs / (peak * compute_eff), bytes / (bandwidth * memory_eff); sharpness)

where ``smoothmax(a, b; p) = (a**p + b**p) ** (1/p)``: a pure roofline is p -> infinity, and real
kernels bend more gently near the ridge point. Attention has its own latency for decode-only
batches (one new token per sequence), whose kernel path is lighter than verify or prefill.

The FLOP and byte counts live here, once (:func:`gemm_work`, :func:`attention_work`,
:func:`elementwise_bytes`), so the calibration fit (``simspec.studies.calibration``) and the
simulator count the same work. The per-operator constants come from a
:class:`~simspec.catalog.hardware.HardwareProfile` fitted to timing tables; the per-step host
overhead from an :class:`~simspec.catalog.hardware.EngineProfile`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from simspec.catalog.hardware import EngineProfile, GpuSpec, HardwareProfile
from simspec.catalog.models import BYTES_PER_PARAM, ModelShape
from simspec.catalog.precision import (
    PrecisionSpec,
    compute_flops,
    effective_precision,
    gemm_speed_ratio,
)

Num = TypeVar("Num", float, np.ndarray)

# Elementwise kernels per decoder layer in vLLM: two fused residual-add + RMSNorm, RoPE on Q and
# K, SiLU-and-mul (vllm/model_executor/models/llama.py, LlamaDecoderLayer, which passes the
# residual into RMSNorm so the add is fused). Each pays the profile's per-kernel latency.
ELEMENTWISE_KERNELS_PER_LAYER = 4
# Small kernels a MoE layer adds in vLLM's fused MoE (vllm/model_executor/layers/fused_moe/
# fused_moe.py): the top-k routing (topk_softmax or grouped_topk), moe_align_block_size (sort the
# tokens by expert) and moe_sum (combine the k outputs); each pays the per-kernel latency.
MOE_KERNELS_PER_LAYER = 3


def roofline_time(
    flops: Num,
    nbytes: Num,
    compute_rate: float,
    memory_rate: float,
    latency: float,
    sharpness: float,
) -> Num:
    """``latency + smoothmax(flops / compute_rate, nbytes / memory_rate)``; works on arrays."""
    a, b = flops / compute_rate, nbytes / memory_rate
    return latency + (a**sharpness + b**sharpness) ** (1.0 / sharpness)


def gemm_work(m: Num, k: Num, n: Num, weight_bytes: float = BYTES_PER_PARAM) -> tuple[Num, Num]:
    """FLOPs and bytes of an (m x k) @ (k x n) matmul: weights at ``weight_bytes`` per element
    (bf16: 2; the precision's, simspec.catalog.precision) plus bf16 input and output."""
    if weight_bytes == BYTES_PER_PARAM:  # the bf16 expression, unchanged to the last bit
        return 2.0 * m * k * n, BYTES_PER_PARAM * (k * n + m * (k + n))
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
    if kv_bytes == BYTES_PER_PARAM:  # the bf16 expression, unchanged to the last bit
        nbytes = BYTES_PER_PARAM * (2.0 * kv_dim * (sum_kv + num_tokens) + 2.0 * q_dim * num_tokens)
    else:
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
    Prefill chunks longer than 128 tokens take the compute-friendly path in vLLM (K and V
    up-projected per head), which this counts as the absorbed one: an overestimate of prefill
    attention FLOPs (about 3.4x for DeepSeek-V3), not of decode or verify.
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


def elementwise_bytes(tokens: Num, hidden: int, q_dim: int, kv_dim: int, inter: int) -> Num:
    """Bytes one decoder layer's elementwise kernels move: two RMSNorms (read + write h), two
    residual adds (read 2h, write h), RoPE on Q and K (read + write), SiLU-and-mul (read 2i,
    write i)."""
    return BYTES_PER_PARAM * tokens * (4 * hidden + 6 * hidden + 2 * (q_dim + kv_dim) + 3 * inter)


# BatchShape and StepCost are values: never mutate one. They are not ``frozen`` because the hot
# loop builds several per iteration and a frozen dataclass's __init__ costs four times as much.
@dataclass(slots=True)
class BatchShape:
    """What one forward pass computes, reduced to the sums a per-operator model needs.

    Build it from per-sequence arrays (new query tokens, tokens already in KV) with :meth:`of`,
    or from totals with :meth:`uniform` when every sequence sends the same number of tokens (the
    common decode/verify case, which then costs no per-sequence work on the hot loop).
    """

    num_seqs: int
    num_tokens: int  # sum of q_i
    sum_q_sq: float  # sum of q_i^2 (causal attention among the new tokens)
    sum_q_kv: float  # sum of q_i * kv_i (new tokens attending to cached ones)
    sum_kv: float  # cached tokens read
    logit_tokens: int  # rows that need LM-head logits (all verify positions, last prefill token)

    @classmethod
    def of(
        cls,
        q_tokens: np.ndarray,
        kv_tokens: np.ndarray,
        logit_tokens: int,
        kv_sum: float | None = None,
    ) -> BatchShape:
        """``kv_sum``: ``kv_tokens.sum()`` when the caller has it (the hot loop does)."""
        q, kv = _counts(q_tokens), _counts(kv_tokens)
        if q.shape != kv.shape or q.ndim != 1:
            raise ValueError("q_tokens and kv_tokens must be 1-D arrays of equal length")
        sum_kv = float(kv.sum()) if kv_sum is None else kv_sum
        return cls(
            len(q), int(q.sum()), float(q.dot(q)), float(q.dot(kv)), sum_kv, int(logit_tokens)
        )

    @classmethod
    def uniform(cls, num_seqs: int, q_per_seq: int, kv_sum: float, logit_tokens: int) -> BatchShape:
        q = q_per_seq
        return cls(
            num_seqs, num_seqs * q, float(num_seqs * q * q), q * kv_sum, kv_sum, int(logit_tokens)
        )

    def __add__(self, other: BatchShape) -> BatchShape:
        """Both batches in one forward. The sums are of token counts, so integers: a float64
        sum of them is exact (below 2**53), equal to summing the concatenated arrays."""
        return BatchShape(
            self.num_seqs + other.num_seqs,
            self.num_tokens + other.num_tokens,
            self.sum_q_sq + other.sum_q_sq,
            self.sum_q_kv + other.sum_q_kv,
            self.sum_kv + other.sum_kv,
            self.logit_tokens + other.logit_tokens,
        )


_INT64 = np.dtype(np.int64)


def _counts(x: np.ndarray) -> np.ndarray:
    """Token counts as int64 (exact sums, and the same floats as float64 sums below 2**53);
    anything else as float64."""
    if type(x) is np.ndarray and x.dtype is _INT64:  # the hot loop's arrays, as they are
        return x
    x = np.asarray(x)
    return x.astype(np.int64, copy=False) if x.dtype.kind in "iub" else x.astype(np.float64)


@dataclass(slots=True)
class StepCost:
    """Seconds per component of one forward pass."""

    gemm_s: float = 0.0
    attention_s: float = 0.0
    lm_head_s: float = 0.0
    elementwise_s: float = 0.0
    communication_s: float = 0.0
    overhead_s: float = 0.0

    @property
    def total_s(self) -> float:
        return (
            self.gemm_s
            + self.attention_s
            + self.lm_head_s
            + self.elementwise_s
            + self.communication_s
            + self.overhead_s
        )

    def plus(self, other: StepCost, times: float = 1) -> StepCost:
        """``self + times * other`` in one object (the draft cost adds K - 1 equal steps to its
        first one every iteration)."""
        return StepCost(
            self.gemm_s + other.gemm_s * times,
            self.attention_s + other.attention_s * times,
            self.lm_head_s + other.lm_head_s * times,
            self.elementwise_s + other.elementwise_s * times,
            self.communication_s + other.communication_s * times,
            self.overhead_s + other.overhead_s * times,
        )

    def scaled(self, factor: float) -> StepCost:
        return StepCost().plus(self, times=factor)


class RooflineCostModel:
    """Per-operator roofline for decoders under tensor parallelism ``tp``: the one cost model
    the simulator asks for GPU time (:meth:`forward`, :meth:`gemm_time`).

    Llama-style dense models take the original path bit for bit. Mixture-of-experts layers,
    MLA attention and sliding-window layers take :meth:`_dense_general` and
    :meth:`_attention_general`: per MoE layer the router GEMM, the shared expert, and the
    routed experts as two grouped GEMMs (gate-up, down) that read every distinct expert the
    step's tokens touch (:func:`distinct_experts`) once and compute every routed token, costed
    with the profile's GEMM constants (fitted on dense GEMMs and transferred to vLLM's fused
    MoE kernels); ``ep`` GPUs holding whole experts exchange the tokens by all-to-all
    (``alltoall`` = (latency s, bandwidth B/s) of one transfer,
    :func:`~simspec.catalog.hardware.load_alltoall`).
    """

    def __init__(
        self,
        gpu: GpuSpec,
        profile: HardwareProfile,
        engine: EngineProfile,
        tp: int = 1,
        step_overhead_s: float | None = None,
        pp: int = 1,
        ep: int = 1,
        alltoall: tuple[float, float] | None = None,
        precision: PrecisionSpec | None = None,
        precision_model: str | None = None,
        kv_bytes: float = BYTES_PER_PARAM,
        expert_precision: PrecisionSpec | None = None,
    ) -> None:
        """``precision``: the weights of the model whose id is ``precision_model`` (the served
        target; None: bf16); every other model (draft heads, draft models) runs bf16.
        ``kv_bytes``: bytes per cached K/V element (the KV-cache dtype), for every model."""
        self.gpu, self.profile, self.engine, self.tp = gpu, profile, engine, tp
        # FP8 on a GPU without FP8 tensor cores runs weight-only, as vLLM does
        eff = effective_precision(precision, gpu) if precision is not None else None
        self.precision = None if eff is None or eff.name == "bf16" else eff
        self.precision_model = precision_model
        # models whose layer GEMMs run at the target's precision: the target, and the MTP
        # modules shipped in its checkpoint (quantize_like_target)
        self._quantized = {precision_model}
        # the routed experts' precision (GPT-OSS: MXFP4 experts beside bf16 layers); None: the
        # layers' own
        eff_experts = (
            effective_precision(expert_precision, gpu) if expert_precision is not None else None
        )
        self.expert_precision = eff_experts
        self.kv_bytes = kv_bytes
        self.pp = pp  # sequential layer stages: each boundary sends the hidden states on
        self.ep = ep  # GPUs the experts are spread over whole (1: each expert sliced over tp)
        self._a2a = alltoall or (0.0, gpu.interconnect_bandwidth_bytes_s)
        flops, bw, p = gpu.bf16_dense_flops, gpu.hbm_bandwidth_bytes_s, profile
        self._gemm = (
            flops * p["gemm_compute_efficiency"],
            bw * p["gemm_memory_efficiency"],
            p["gemm_latency_s"],
            p["gemm_sharpness"],
        )
        self._attn = (
            flops * p["attention_compute_efficiency"],
            bw * p["attention_memory_efficiency"],
            p["attention_latency_s"],
            p["attention_sharpness"],
        )
        self._attn_decode_latency = p["attention_decode_latency_s"]
        self._elem_m = bw * p["elementwise_memory_efficiency"]
        self._elem_lat = p["elementwise_latency_s"]
        self._ar_lat = p["allreduce_latency_s"]
        self._ar_bw = gpu.interconnect_bandwidth_bytes_s * p["allreduce_bandwidth_efficiency"]
        self._step_overhead = (
            engine["step_overhead_s"] if step_overhead_s is None else step_overhead_s
        )
        # eager engines launch every kernel from Python: a layer costs at least this much host
        # time, and the GPU waits when its own work is shorter (0 under CUDA graphs)
        self._layer_launch = engine["layer_launch_s"]
        self._models: dict[int, _ModelTerms] = {}  # by id(model); the entry keeps it alive

    # -- operators -------------------------------------------------------------------------
    def gemm_time(
        self, tokens: int, d_in: int, d_out: int, precision: PrecisionSpec | None = None
    ) -> float:
        """Time of one dense (tokens x d_in) @ (d_in x d_out) matmul on one GPU shard, with bf16
        weights or (``precision``, as :func:`effective_precision` gives it) quantised ones."""
        if precision is None:
            return roofline_time(*gemm_work(tokens, d_in, d_out), *self._gemm)
        return self._quantized_gemm_time(tokens, d_in, d_out, precision)

    def precision_of(self, model: ModelShape) -> PrecisionSpec | None:
        """The weight precision ``model``'s layer GEMMs run at (None: bf16)."""
        return self.precision if model.id in self._quantized else None

    def quantize_like_target(self, model: ModelShape) -> None:
        """``model`` (an MTP module of the checkpoint) runs at the target's precision."""
        self._quantized.add(model.id)

    def _quantized_gemm_time(
        self, tokens: int, d_in: int, d_out: int, spec: PrecisionSpec
    ) -> float:
        """The roofline at the precision's weight bytes and compute peak (the profile's bf16
        fractions of peak, an assumption), replaced by the measured speed over bf16 where a
        kernel table covers this GPU's architecture and token count; above the largest
        measured count the last measured ratio holds, but never past the roofline."""
        _, rate_m, latency, sharpness = self._gemm
        rate_c = compute_flops(spec, self.gpu) * self.profile["gemm_compute_efficiency"]
        flops, nbytes = gemm_work(tokens, d_in, d_out, spec.weight_bytes)
        roof = roofline_time(flops, nbytes, rate_c, rate_m, latency, sharpness)
        ratio = gemm_speed_ratio(spec, self.gpu, tokens)
        if ratio is None:
            return roof
        measured = roofline_time(*gemm_work(tokens, d_in, d_out), *self._gemm) / ratio
        curve = spec.curve(self.gpu.arch)
        if curve is not None and tokens > curve.max_tokens:
            return max(measured, roof)
        return measured

    def allreduce_time(self, nbytes: float) -> float:
        """Ring all-reduce across ``tp`` GPUs; zero without tensor parallelism."""
        return self._ring_time(nbytes, passes=2)

    def allgather_time(self, nbytes: float) -> float:
        """Ring all-gather of ``nbytes`` in total (e.g. vocab-sharded logits)."""
        return self._ring_time(nbytes, passes=1)

    def _ring_time(self, nbytes: float, passes: int) -> float:
        if self.tp == 1 or nbytes <= 0:
            return 0.0
        return self._ar_lat + passes * (self.tp - 1) / self.tp * nbytes / self._ar_bw

    def _shard(self, model: ModelShape) -> tuple[int, int, int]:
        """Per-GPU query width, KV width and MLP width (KV heads replicate when fewer than tp)."""
        tp = self.tp
        q = model.q_dim // tp
        kv = model.kv_dim_per_gpu(tp)
        return q, kv, model.intermediate_size // tp

    def forward(
        self,
        model: ModelShape,
        batch: BatchShape,
        overhead_s: float | None = None,
        layers: int | None = None,
        extra_gemm_s: float = 0.0,
    ) -> StepCost:
        """Time of one forward of ``model`` (or its first ``layers`` layers) over ``batch``;
        ``extra_gemm_s`` is GEMM time outside the model's layers in the same pass (EAGLE's fc)."""
        n_layers = model.num_hidden_layers if layers is None else layers
        t = batch.num_tokens
        overhead = self._step_overhead if overhead_s is None else overhead_s
        if t == 0:
            return StepCost(gemm_s=extra_gemm_s, overhead_s=overhead)
        terms = self._models.get(id(model))
        if terms is None or terms.model is not model:  # first use, or a recycled id
            terms = self._models[id(model)] = _ModelTerms(
                model, *self._shard(model), plain=model.is_plain
            )
        key = (t, batch.logit_tokens, n_layers)
        dense = terms.dense.get(key)
        if dense is None:
            dense = terms.dense[key] = self._dense(model, terms, *key)
        gemm, elementwise, comm, lm_head = dense
        if not terms.plain:
            attention = self._attention_general(model, terms, batch, n_layers)
        else:
            q_dim, kv_dim = terms.q_dim, terms.kv_dim
            flops, nbytes = attention_work(
                q_dim, kv_dim, t, batch.sum_q_sq, batch.sum_q_kv, batch.sum_kv, self.kv_bytes
            )
            rate_c, rate_m, latency, p = self._attn
            if batch.sum_q_sq == t:  # every sequence sends one token: the decode kernel path
                latency = self._attn_decode_latency
            a, b = flops / rate_c, nbytes / rate_m
            # roofline_time, inlined on the hot loop; p == 1 (a plain sum) skips two pow calls
            # and gives the same floats, since x ** 1.0 == x exactly
            attention = n_layers * (latency + (a + b if p == 1.0 else (a**p + b**p) ** (1.0 / p)))
        if self._layer_launch:
            gpu = gemm + extra_gemm_s + attention + lm_head + elementwise + comm
            overhead += max(0.0, n_layers * self._layer_launch - gpu)
        return StepCost(gemm + extra_gemm_s, attention, lm_head, elementwise, comm, overhead)

    def _dense(
        self, model: ModelShape, terms: _ModelTerms, t: int, logit_tokens: int, n_layers: int
    ) -> tuple[float, float, float, float]:
        """Everything that depends only on token counts (``forward`` caches it in ``terms``)."""
        if not terms.plain:
            return self._dense_general(model, terms, t, logit_tokens, n_layers)
        h = model.hidden_size
        q_dim, kv_dim, inter = terms.q_dim, terms.kv_dim, terms.inter
        w = self.precision_of(model)  # the LM head stays bf16, as vLLM leaves it unquantised
        gemm = (
            self.gemm_time(t, h, q_dim + 2 * kv_dim, w)
            + self.gemm_time(t, q_dim, h, w)
            + self.gemm_time(t, h, 2 * inter, w)
            + self.gemm_time(t, inter, h, w)
        )
        elem_bytes = elementwise_bytes(t, h, q_dim, kv_dim, inter)
        embed_bytes = BYTES_PER_PARAM * t * h
        elementwise = (n_layers * elem_bytes + embed_bytes) / self._elem_m
        elementwise += (n_layers * ELEMENTWISE_KERNELS_PER_LAYER + 1) * self._elem_lat
        comm = n_layers * 2 * self.allreduce_time(BYTES_PER_PARAM * t * h)
        comm += self.allgather_time(BYTES_PER_PARAM * logit_tokens * model.vocab_size)
        if self.pp > 1 and n_layers > 1:  # a draft head's one layer stays on its stage
            comm += (self.pp - 1) * (self._ar_lat + BYTES_PER_PARAM * t * h / self._ar_bw)
        vocab = model.vocab_size // self.tp
        lm_head = self.gemm_time(logit_tokens, h, vocab) if logit_tokens else 0.0
        return (n_layers * gemm, elementwise, comm, lm_head)

    # -- MoE, MLA and sliding-window models ----------------------------------------------
    def _dense_general(
        self, model: ModelShape, terms: _ModelTerms, t: int, logit_tokens: int, n_layers: int
    ) -> tuple[float, float, float, float]:
        """The token-count terms of a model with MoE layers, MLA or windowed layers: each
        layer's attention projections, its MLP (dense, or router + shared + routed experts),
        elementwise kernels and communication; the LM head as for a dense model."""
        h, tp = model.hidden_size, self.tp
        n_moe = model.moe_layers_in(n_layers)
        n_dense = n_layers - n_moe
        w = self.precision_of(model)
        proj = self._attention_projections(model, t, w)
        inter = terms.inter
        dense_mlp = self.gemm_time(t, h, 2 * inter, w) + self.gemm_time(t, inter, h, w)
        gemm = n_layers * proj + n_dense * dense_mlp
        if n_moe:
            gemm += n_moe * self._moe_mlp(model, t, w)
        # elementwise: the dense layers' kernels as today; a MoE layer's gated activation runs
        # over the k routed widths and the shared one, plus its routing kernels
        q_dim, kv_dim = terms.q_dim, terms.kv_dim
        moe_inter = (
            model.num_experts_per_tok * model.moe_intermediate_size
            + model.shared_expert_intermediate_size
        ) // tp
        elem_bytes = n_dense * elementwise_bytes(t, h, q_dim, kv_dim, inter)
        elem_bytes += n_moe * elementwise_bytes(t, h, q_dim, kv_dim, moe_inter)
        embed_bytes = BYTES_PER_PARAM * t * h
        elementwise = (elem_bytes + embed_bytes) / self._elem_m
        kernels = n_layers * ELEMENTWISE_KERNELS_PER_LAYER + n_moe * MOE_KERNELS_PER_LAYER + 1
        elementwise += kernels * self._elem_lat
        # communication: the attention all-reduce every layer; the MLP's all-reduce, or on a
        # MoE layer under expert parallelism the dispatch and combine all-to-all
        reduce = self.allreduce_time(BYTES_PER_PARAM * t * h)
        if self.ep > 1:
            comm = n_layers * reduce + n_dense * reduce + n_moe * 2 * self._alltoall(model, t)
        else:
            comm = n_layers * 2 * reduce
        comm += self.allgather_time(BYTES_PER_PARAM * logit_tokens * model.vocab_size)
        if self.pp > 1 and n_layers > 1:
            comm += (self.pp - 1) * (self._ar_lat + BYTES_PER_PARAM * t * h / self._ar_bw)
        vocab = model.vocab_size // tp
        lm_head = self.gemm_time(logit_tokens, h, vocab) if logit_tokens else 0.0
        return (gemm, elementwise, comm, lm_head)

    def _attention_projections(
        self, model: ModelShape, t: int, w: PrecisionSpec | None = None
    ) -> float:
        """One layer's attention GEMMs on one GPU. GQA: fused QKV and O. MLA (vLLM
        deepseek_v2.py and backends/mla/common.py, decode path): the replicated fused q_a/kv_a
        down projection, q_b per GPU's heads (or one q_proj), W_UK absorbing each head's query
        into the latent and W_UV expanding each head's output from it (batched over the heads),
        then O. The projections run at the weights' precision ``w``; the absorbed W_UK/W_UV
        are bf16 (vLLM dequantises kv_b_proj into them when the weights load)."""
        h, tp = model.hidden_size, self.tp
        if not model.is_mla:
            q, kv = model.q_dim // tp, model.kv_dim_per_gpu(tp)
            return self.gemm_time(t, h, q + 2 * kv, w) + self.gemm_time(t, q, h, w)
        heads = max(model.num_attention_heads // tp, 1)
        q_head = model.qk_nope_head_dim + model.qk_rope_head_dim
        latent, rank = model.kv_dim, model.kv_lora_rank
        if model.q_lora_rank:
            down = self.gemm_time(t, h, model.q_lora_rank + latent, w)
            up = self.gemm_time(t, model.q_lora_rank, heads * q_head, w)
        else:
            down = self.gemm_time(t, h, latent, w)
            up = self.gemm_time(t, h, heads * q_head, w)
        absorb = self._batched_gemm_time(heads, t, model.qk_nope_head_dim, rank)
        expand = self._batched_gemm_time(heads, t, rank, model.v_head_dim)
        return down + up + absorb + expand + self.gemm_time(t, heads * model.v_head_dim, h, w)

    def _batched_gemm_time(self, batch: int, m: int, k: int, n: int) -> float:
        """``batch`` independent (m x k) @ (k x n) matmuls in one kernel (torch.bmm)."""
        flops, nbytes = gemm_work(m, k, n)
        return roofline_time(batch * flops, batch * nbytes, *self._gemm)

    def _moe_mlp(self, model: ModelShape, t: int, w: PrecisionSpec | None = None) -> float:
        """One MoE layer's MLP on one GPU: the router (replicated, bf16: vLLM builds the gate
        unquantised), the shared expert (sliced over tp, at the layers' precision ``w``) and the
        routed experts."""
        h, tp = model.hidden_size, self.tp
        total = self.gemm_time(t, h, model.num_experts)
        shared = model.shared_expert_intermediate_size // tp
        if shared:
            total += self.gemm_time(t, h, 2 * shared, w) + self.gemm_time(t, shared, h, w)
        return total + self.routed_experts_time(model, t)

    def routed_experts_time(self, model: ModelShape, t: int) -> float:
        """The routed experts of one MoE layer for ``t`` tokens on one GPU: two grouped GEMMs
        (vLLM fused_moe: w13 = gate and up, then w2 = down) that stream the weights of every
        distinct expert the tokens touch once and multiply every (token, expert) pair. Sliced
        experts (ep 1): each GPU holds 1/tp of every expert. Whole experts (ep GPUs): each holds
        1/ep of them and, routing being uniform, gets 1/ep of the pairs and distinct experts."""
        k = model.num_experts_per_tok
        return self.grouped_experts_time(
            model, float(t * k), distinct_experts(model.num_experts, k, t)
        )

    def grouped_experts_time(self, model: ModelShape, pairs: float, touched: float) -> float:
        """The routed-expert GEMMs of one MoE layer for ``pairs`` (token, expert) pairs over
        ``touched`` distinct experts (whole batch), on one GPU (see
        :meth:`routed_experts_time`)."""
        h = model.hidden_size
        if self.ep > 1:
            width, touched, pairs = model.moe_intermediate_size, touched / self.ep, pairs / self.ep
        else:
            width = model.moe_intermediate_size // self.tp
        spec = self.experts_precision_of(model)
        rate_c, rate_m, latency, sharpness = self._gemm
        wbytes = BYTES_PER_PARAM
        if spec is not None:  # the roofline at the precision's weight bytes and peak
            wbytes = spec.weight_bytes
            rate_c = compute_flops(spec, self.gpu) * self.profile["gemm_compute_efficiency"]
        abytes = BYTES_PER_PARAM
        up = roofline_time(
            2.0 * pairs * h * 2 * width,
            touched * h * 2 * width * wbytes + abytes * pairs * (h + 2 * width),
            rate_c,
            rate_m,
            latency,
            sharpness,
        )
        down = roofline_time(
            2.0 * pairs * width * h,
            touched * width * h * wbytes + abytes * pairs * (width + h),
            rate_c,
            rate_m,
            latency,
            sharpness,
        )
        return up + down

    def experts_precision_of(self, model: ModelShape) -> PrecisionSpec | None:
        """The routed experts' precision: their own where the checkpoint stores them apart
        (GPT-OSS's MXFP4), else the layers'; None: bf16."""
        if model.id not in self._quantized:
            return None
        spec = self.expert_precision or self.precision
        return None if spec is None or spec.name == "bf16" else spec

    def _alltoall(self, model: ModelShape, t: int) -> float:
        """One all-to-all of a MoE layer under expert parallelism (dispatch, or combine): the
        step's tokens split evenly over the ep GPUs, each token's hidden state sent to the
        GPUs of its k experts, (ep - 1)/ep of them remote (uniform routing), over point-to-point
        NVLink transfers running side by side (DeepEP / vLLM's all2all backends)."""
        ep, k = self.ep, model.num_experts_per_tok
        nbytes = BYTES_PER_PARAM * (t / ep) * k * model.hidden_size * (ep - 1) / ep
        latency, bandwidth = self._a2a
        return latency + nbytes / bandwidth if nbytes > 0 else 0.0

    def _attention_general(
        self, model: ModelShape, terms: _ModelTerms, batch: BatchShape, n_layers: int
    ) -> float:
        """Attention of a model with MLA or sliding-window layers: full layers over the whole
        context, windowed layers over at most ``sliding_window`` tokens per sequence (the
        pairs and cached tokens clipped to the window: exact when every context is past the
        window or within it, an upper bound otherwise)."""
        t = batch.num_tokens
        n_win = model.sliding_layers_in(n_layers)
        total = 0.0
        if n_layers - n_win:
            total += (n_layers - n_win) * self._attention_layer(model, terms, batch)
        if n_win:
            w = model.sliding_window
            pairs = batch.sum_q_kv + (batch.sum_q_sq + t) / 2.0
            clipped = BatchShape(
                batch.num_seqs,
                t,
                0.0,
                min(pairs, float(t * w)) - t / 2.0,  # keeps pairs = clipped count below
                min(batch.sum_kv, float(batch.num_seqs * w)),
                batch.logit_tokens,
            )
            total += n_win * self._attention_layer(
                model, terms, clipped, decode=batch.sum_q_sq == t
            )
        return total

    def _attention_layer(
        self, model: ModelShape, terms: _ModelTerms, batch: BatchShape, decode: bool | None = None
    ) -> float:
        """One layer's attention kernel on one GPU."""
        t = batch.num_tokens
        if model.is_mla:
            heads = max(model.num_attention_heads // self.tp, 1)
            flops, nbytes = mla_attention_work(
                heads,
                model.kv_dim,
                model.kv_lora_rank,
                t,
                batch.sum_q_sq,
                batch.sum_q_kv,
                batch.sum_kv,
                self.kv_bytes,
            )
        else:
            flops, nbytes = attention_work(
                terms.q_dim,
                terms.kv_dim,
                t,
                batch.sum_q_sq,
                batch.sum_q_kv,
                batch.sum_kv,
                self.kv_bytes,
            )
        rate_c, rate_m, latency, p = self._attn
        if batch.sum_q_sq == t if decode is None else decode:
            latency = self._attn_decode_latency
        return roofline_time(flops, nbytes, rate_c, rate_m, latency, p)


@dataclass(slots=True)
class _ModelTerms:
    """What the roofline reuses for one model: per-GPU widths (:meth:`RooflineCostModel._shard`)
    and the token-count-only terms by (tokens, logit rows, layers), which the hot loop repeats."""

    model: ModelShape
    q_dim: int
    kv_dim: int
    inter: int
    plain: bool = True  # a Llama-style dense model: the original, bit-identical path
    dense: dict[tuple[int, int, int], tuple[float, float, float, float]] = field(
        default_factory=dict
    )
