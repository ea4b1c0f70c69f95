"""Time of one forward pass: a per-operator roofline behind one small interface.

A batch is described per sequence by (new query tokens, tokens already in KV). The query axis
matters: a verify step feeds K+1 (or tree-size) tokens per sequence. Each operator costs
``max(FLOPs / (peak * compute_eff), bytes / (bandwidth * memory_eff))``; the efficiencies live in
a :class:`~simspec.presets.HardwareProfile` file (fitted by calibration), the per-step host
overhead in an :class:`~simspec.presets.EngineProfile`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Protocol

import numpy as np

from simspec.presets import BYTES_PER_PARAM, EngineProfile, GpuSpec, HardwareProfile, ModelShape


@dataclass(frozen=True)
class BatchShape:
    """What one forward pass computes: per sequence, new tokens and tokens already cached."""

    q_tokens: np.ndarray
    kv_tokens: np.ndarray
    logit_tokens: int  # rows that need LM-head logits (all verify positions, last prefill token)

    @property
    def num_tokens(self) -> int:
        return int(self.q_tokens.sum())


@dataclass(frozen=True)
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
        return StepCost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def scaled(self, factor: float) -> StepCost:
        return StepCost(*(getattr(self, f.name) * factor for f in fields(self)))


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
        h = model.hidden_size
        q_dim, kv_dim, inter = self._shard(model)
        overhead = self.engine["step_overhead_s"] if overhead_s is None else overhead_s
        if t == 0:
            return StepCost(overhead_s=overhead)

        gemm = (
            self.gemm_time(t, h, q_dim + 2 * kv_dim)
            + self.gemm_time(t, q_dim, h)
            + self.gemm_time(t, h, 2 * inter)
            + self.gemm_time(t, inter, h)
        )

        q = batch.q_tokens.astype(np.float64)
        ctx = batch.kv_tokens.astype(np.float64) + q
        # causal: new token i attends to the cached tokens plus i of the new ones
        attn_flops = 4.0 * q_dim * float(np.dot(q, ctx - (q - 1.0) / 2.0))
        attn_bytes = BYTES_PER_PARAM * (2.0 * kv_dim * float(ctx.sum()) + 2.0 * q_dim * t)
        attention = max(attn_flops / self._attn_c, attn_bytes / self._attn_m)

        # two RMSNorms, two residual adds, RoPE on Q and K, SiLU-and-mul: read + write each
        elem_bytes = BYTES_PER_PARAM * t * (4 * h + 6 * h + 2 * (q_dim + kv_dim) + 3 * inter)
        elementwise = elem_bytes / self._elem_m
        comm = 2 * self.allreduce_time(BYTES_PER_PARAM * t * h)

        vocab = model.vocab_size // self.tp
        lm_head = self.gemm_time(batch.logit_tokens, h, vocab) if batch.logit_tokens else 0.0
        lm_comm = self.allgather_time(BYTES_PER_PARAM * batch.logit_tokens * model.vocab_size)
        embed = BYTES_PER_PARAM * t * h / self._elem_m

        return StepCost(
            gemm_s=n_layers * gemm,
            attention_s=n_layers * attention,
            lm_head_s=lm_head,
            elementwise_s=n_layers * elementwise + embed,
            communication_s=n_layers * comm + lm_comm,
            overhead_s=overhead,
        )
