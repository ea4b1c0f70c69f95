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
    """Per-operator roofline for Llama-style decoders under tensor parallelism ``tp``: the one
    cost model the simulator asks for GPU time (:meth:`forward`, :meth:`gemm_time`)."""

    def __init__(
        self,
        gpu: GpuSpec,
        profile: HardwareProfile,
        engine: EngineProfile,
        tp: int = 1,
        step_overhead_s: float | None = None,
        pp: int = 1,
        precision: PrecisionSpec | None = None,
        precision_model: str | None = None,
        kv_bytes: float = BYTES_PER_PARAM,
    ) -> None:
        """``precision``: the weights of the model whose id is ``precision_model`` (the served
        target; None: bf16); every other model (draft heads, draft models) runs bf16.
        ``kv_bytes``: bytes per cached K/V element (the KV-cache dtype), for every model."""
        self.gpu, self.profile, self.engine, self.tp = gpu, profile, engine, tp
        # FP8 on a GPU without FP8 tensor cores runs weight-only, as vLLM does
        eff = effective_precision(precision, gpu) if precision is not None else None
        self.precision = None if eff is None or eff.name == "bf16" else eff
        self.precision_model = precision_model
        self.kv_bytes = kv_bytes
        self.pp = pp  # sequential layer stages: each boundary sends the hidden states on
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
        return self.precision if model.id == self.precision_model else None

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
            terms = self._models[id(model)] = _ModelTerms(model, *self._shard(model))
        key = (t, batch.logit_tokens, n_layers)
        dense = terms.dense.get(key)
        if dense is None:
            dense = terms.dense[key] = self._dense(model, terms, *key)
        gemm, elementwise, comm, lm_head = dense
        q_dim, kv_dim = terms.q_dim, terms.kv_dim
        flops, nbytes = attention_work(
            q_dim, kv_dim, t, batch.sum_q_sq, batch.sum_q_kv, batch.sum_kv, self.kv_bytes
        )
        rate_c, rate_m, latency, p = self._attn
        if batch.sum_q_sq == t:  # every sequence sends one token: the decode kernel path
            latency = self._attn_decode_latency
        a, b = flops / rate_c, nbytes / rate_m
        # roofline_time, inlined on the hot loop; p == 1 (a plain sum) skips two pow calls and
        # gives the same floats, since x ** 1.0 == x exactly
        attention = n_layers * (latency + (a + b if p == 1.0 else (a**p + b**p) ** (1.0 / p)))
        if self._layer_launch:
            gpu = gemm + extra_gemm_s + attention + lm_head + elementwise + comm
            overhead += max(0.0, n_layers * self._layer_launch - gpu)
        return StepCost(gemm + extra_gemm_s, attention, lm_head, elementwise, comm, overhead)

    def _dense(
        self, model: ModelShape, terms: _ModelTerms, t: int, logit_tokens: int, n_layers: int
    ) -> tuple[float, float, float, float]:
        """Everything that depends only on token counts (``forward`` caches it in ``terms``)."""
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


@dataclass(slots=True)
class _ModelTerms:
    """What the roofline reuses for one model: per-GPU widths (:meth:`RooflineCostModel._shard`)
    and the token-count-only terms by (tokens, logit rows, layers), which the hot loop repeats."""

    model: ModelShape
    q_dim: int
    kv_dim: int
    inter: int
    dense: dict[tuple[int, int, int], tuple[float, float, float, float]] = field(
        default_factory=dict
    )
