"""Time of one forward pass: a per-operator roofline behind one small interface.

A batch is described per sequence by (new query tokens, tokens already in KV). The query axis
matters: a verify step feeds K+1 (or tree-size) tokens per sequence. Each operator costs
``max(FLOPs / (peak * compute_eff), bytes / (bandwidth * memory_eff))``; the efficiencies live in
a :class:`~simspec.presets.HardwareProfile` file (fitted by calibration), the per-step host
overhead in an :class:`~simspec.presets.EngineProfile`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from simspec.presets import BYTES_PER_PARAM, EngineProfile, GpuSpec, HardwareProfile, ModelShape


@dataclass(frozen=True, slots=True)
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
    def of(cls, q_tokens: np.ndarray, kv_tokens: np.ndarray, logit_tokens: int) -> BatchShape:
        q = np.asarray(q_tokens, dtype=np.float64)
        kv = np.asarray(kv_tokens, dtype=np.float64)
        if q.shape != kv.shape or q.ndim != 1:
            raise ValueError("q_tokens and kv_tokens must be 1-D arrays of equal length")
        return cls(len(q), int(q.sum()), float(q @ q), float(q @ kv), float(kv.sum()),
                   int(logit_tokens))  # fmt: skip

    @classmethod
    def uniform(cls, num_seqs: int, q_per_seq: int, kv_sum: float, logit_tokens: int) -> BatchShape:
        q = q_per_seq
        return cls(num_seqs, num_seqs * q, float(num_seqs * q * q), q * kv_sum, kv_sum,
                   int(logit_tokens))  # fmt: skip


@dataclass(frozen=True, slots=True)
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

    def __add__(self, other: StepCost) -> StepCost:
        return StepCost(
            self.gemm_s + other.gemm_s,
            self.attention_s + other.attention_s,
            self.lm_head_s + other.lm_head_s,
            self.elementwise_s + other.elementwise_s,
            self.communication_s + other.communication_s,
            self.overhead_s + other.overhead_s,
        )

    def scaled(self, factor: float) -> StepCost:
        return StepCost(
            self.gemm_s * factor,
            self.attention_s * factor,
            self.lm_head_s * factor,
            self.elementwise_s * factor,
            self.communication_s * factor,
            self.overhead_s * factor,
        )


class CostModel(Protocol):
    """The one interface the simulator uses for GPU time."""

    tp: int

    def forward(
        self,
        model: ModelShape,
        batch: BatchShape,
        overhead_s: float | None = None,
        layers: int | None = None,
    ) -> StepCost:
        """Time of one forward of ``model`` (or its first ``layers`` layers) over ``batch``."""
        ...

    def gemm_time(self, tokens: int, d_in: int, d_out: int) -> float:
        """Time of one dense (tokens x d_in) @ (d_in x d_out) matmul on one GPU shard."""
        ...


class RooflineCostModel:
    """Per-operator roofline for Llama-style decoders under tensor parallelism ``tp``."""

    def __init__(
        self, gpu: GpuSpec, profile: HardwareProfile, engine: EngineProfile, tp: int = 1
    ) -> None:
        self.gpu, self.profile, self.engine, self.tp = gpu, profile, engine, tp
        self._flops = gpu.bf16_dense_flops
        self._bw = gpu.hbm_bandwidth_bytes_s
        self._gemm_c = self._flops * profile["gemm_compute_efficiency"]
        self._gemm_m = self._bw * profile["gemm_memory_efficiency"]
        self._attn_c = self._flops * profile["attention_compute_efficiency"]
        self._attn_m = self._bw * profile["attention_memory_efficiency"]
        self._elem_m = self._bw * profile["elementwise_memory_efficiency"]
        self._ar_lat = profile["allreduce_latency_s"]
        self._ar_bw = gpu.interconnect_bandwidth_bytes_s * profile["allreduce_bandwidth_efficiency"]
        self._step_overhead = engine["step_overhead_s"]
        self._cache: dict[int, tuple[ModelShape, dict[tuple[int, int, int], tuple]]] = {}

    # -- operators -------------------------------------------------------------------------
    def gemm_time(self, tokens: int, d_in: int, d_out: int) -> float:
        flops = 2.0 * tokens * d_in * d_out
        nbytes = BYTES_PER_PARAM * (d_in * d_out + tokens * (d_in + d_out))
        return max(flops / self._gemm_c, nbytes / self._gemm_m)

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
        kv = max(model.num_key_value_heads // tp, 1) * model.head_dim
        return q, kv, model.intermediate_size // tp

    def forward(
        self,
        model: ModelShape,
        batch: BatchShape,
        overhead_s: float | None = None,
        layers: int | None = None,
    ) -> StepCost:
        n_layers = model.num_hidden_layers if layers is None else layers
        t = batch.num_tokens
        overhead = self._step_overhead if overhead_s is None else overhead_s
        if t == 0:
            return StepCost(overhead_s=overhead)
        gemm, elementwise, comm, lm_head = self._dense(model, t, batch.logit_tokens, n_layers)
        q_dim, kv_dim, _ = self._shard(model)
        # causal: new token i of a sequence attends to its cached tokens plus i new ones, so
        # sum_i q_i * (kv_i + (q_i + 1) / 2) query-key pairs; K and V of every context token read
        pairs = batch.sum_q_kv + (batch.sum_q_sq + t) / 2.0
        attn_flops = 4.0 * q_dim * pairs
        attn_bytes = BYTES_PER_PARAM * (2.0 * kv_dim * (batch.sum_kv + t) + 2.0 * q_dim * t)
        attention = n_layers * max(attn_flops / self._attn_c, attn_bytes / self._attn_m)
        return StepCost(gemm, attention, lm_head, elementwise, comm, overhead)

    def _dense(self, model: ModelShape, t: int, logit_tokens: int, n_layers: int) -> tuple:
        """Everything that depends only on token counts (cached: the hot loop repeats them)."""
        per_model = self._cache.get(id(model))
        if per_model is None or per_model[0] is not model:
            per_model = self._cache[id(model)] = (model, {})
        key = (t, logit_tokens, n_layers)
        hit = per_model[1].get(key)
        if hit is not None:
            return hit
        h = model.hidden_size
        q_dim, kv_dim, inter = self._shard(model)
        gemm = (
            self.gemm_time(t, h, q_dim + 2 * kv_dim)
            + self.gemm_time(t, q_dim, h)
            + self.gemm_time(t, h, 2 * inter)
            + self.gemm_time(t, inter, h)
        )
        # two RMSNorms, two residual adds, RoPE on Q and K, SiLU-and-mul: read + write each
        elem_bytes = BYTES_PER_PARAM * t * (4 * h + 6 * h + 2 * (q_dim + kv_dim) + 3 * inter)
        embed_bytes = BYTES_PER_PARAM * t * h
        elementwise = (n_layers * elem_bytes + embed_bytes) / self._elem_m
        comm = n_layers * 2 * self.allreduce_time(BYTES_PER_PARAM * t * h)
        comm += self.allgather_time(BYTES_PER_PARAM * logit_tokens * model.vocab_size)
        vocab = model.vocab_size // self.tp
        lm_head = self.gemm_time(logit_tokens, h, vocab) if logit_tokens else 0.0
        result = (n_layers * gemm, elementwise, comm, lm_head)
        per_model[1][key] = result
        return result
