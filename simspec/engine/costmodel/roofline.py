"""The roofline and the operator times it gives on one GPU of a tensor-parallel group: dense and
quantised GEMMs, batched GEMMs, elementwise kernels, and the collectives and point-to-point hops
between GPUs (measured curves where :mod:`~simspec.engine.costmodel.collectives` covers the GPU,
else a ring over the profile's link constants).

Each operator costs

    latency + smoothmax(FLOPs / (peak * compute_eff), bytes / (bandwidth * memory_eff); sharpness)

where ``smoothmax(a, b; p) = (a**p + b**p) ** (1/p)``: a pure roofline is p -> infinity, and real
kernels bend more gently near the ridge point. The constants come from a
:class:`~simspec.catalog.hardware.HardwareProfile` fitted to timing tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from simspec.catalog.hardware import GpuSpec, HardwareProfile
from simspec.catalog.precision import (
    PrecisionSpec,
    compute_flops,
    effective_precision,
    gemm_speed_ratio,
    load_precision,
)
from simspec.engine.costmodel.collectives import Collectives
from simspec.engine.costmodel.work import Num, gemm_work


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
    if sharpness == 1.0:  # a plain sum: the same floats (x ** 1.0 == x) without two pow calls
        return latency + (a + b)
    return latency + (a**sharpness + b**sharpness) ** (1.0 / sharpness)


@dataclass(frozen=True, slots=True)
class Roofline:
    """One operator family's fitted constants: FLOP/s and B/s it reaches, the latency every
    kernel pays, and how sharply it bends at the ridge point."""

    compute_rate: float
    memory_rate: float
    latency: float
    sharpness: float

    def time(self, flops: float, nbytes: float) -> float:
        return roofline_time(
            flops, nbytes, self.compute_rate, self.memory_rate, self.latency, self.sharpness
        )


class OperatorTimes:
    """Seconds each operator takes on one GPU of a group of ``tp`` (tensor parallelism), from
    the GPU's peaks and the profile's fractions of them; ``collectives``: the measured
    all-reduce/all-gather curves of this GPU, GPU count and engine (None: the ring formula);
    ``floor``: one server's NCCL curves, below which a group spanning servers is not timed."""

    def __init__(
        self,
        gpu: GpuSpec,
        profile: HardwareProfile,
        tp: int = 1,
        collectives: Collectives | None = None,
        floor: Collectives | None = None,
    ) -> None:
        self.gpu, self.profile, self.tp = gpu, profile, tp
        self.collectives = collectives
        # a group over several servers: one server's measured NCCL bounds its ring formula
        # from below (collectives.node_floor)
        self.floor = floor
        flops, bw, p = gpu.bf16_dense_flops, gpu.hbm_bandwidth_bytes_s, profile
        self.gemm = Roofline(
            flops * p["gemm_compute_efficiency"],
            bw * p["gemm_memory_efficiency"],
            p["gemm_latency_s"],
            p["gemm_sharpness"],
        )
        self.attention = Roofline(
            flops * p["attention_compute_efficiency"],
            bw * p["attention_memory_efficiency"],
            p["attention_latency_s"],
            p["attention_sharpness"],
        )
        # a decode-only batch (one new token per sequence) takes a lighter attention kernel path
        self.attention_decode_latency = p["attention_decode_latency_s"]
        self.elementwise_rate = bw * p["elementwise_memory_efficiency"]
        self.elementwise_latency = p["elementwise_latency_s"]
        self.link_latency = p["allreduce_latency_s"]
        # a ring over the tp GPUs, and a point-to-point send (a pipeline stage's hand-off),
        # at the links they use (GpuSpec.link_bytes_s: all of a switch's, a mesh's to peers)
        self.link_bandwidth = gpu.link_bytes_s(tp) * p["allreduce_bandwidth_efficiency"]
        self.hop_bandwidth = gpu.link_bytes_s(2) * p["allreduce_bandwidth_efficiency"]

    # -- GEMMs ---------------------------------------------------------------------------------
    def gemm_time(
        self, tokens: int, d_in: int, d_out: int, precision: PrecisionSpec | None = None
    ) -> float:
        """One dense (tokens x d_in) @ (d_in x d_out) matmul, with bf16 weights or
        (``precision``, as :func:`~simspec.catalog.precision.effective_precision` gives it)
        quantised ones."""
        if precision is None:
            return self.gemm.time(*gemm_work(tokens, d_in, d_out))
        return self.quantized_gemm_time(tokens, d_in, d_out, precision)

    def quantized_gemm_time(self, tokens: int, d_in: int, d_out: int, spec: PrecisionSpec) -> float:
        """The roofline at the precision's weight bytes and compute peak (the profile's bf16
        fractions of peak, an assumption), replaced by the measured speed over bf16 where a
        kernel table covers this GPU's architecture and token count; above the largest
        measured count the last measured ratio holds. Never past the roofline: a ratio
        measured on another shape or GPU also divided the GEMM's fixed latency, which put a
        small-M quantized GEMM below the latency every GEMM pays (QA: an fp8 4096x768 GEMM on
        an H100 at 4.5 us, under the fitted 6.0 us)."""
        g = self.gemm
        flops, nbytes = gemm_work(tokens, d_in, d_out, spec.weight_bytes)
        roof = roofline_time(
            flops, nbytes, self.compute_rate_at(spec), g.memory_rate, g.latency, g.sharpness
        )
        ratio = gemm_speed_ratio(spec, self.gpu, tokens)
        if ratio is None:
            time = roof
        else:
            time = max(self.gemm.time(*gemm_work(tokens, d_in, d_out)) / ratio, roof)
        if spec.never_faster_than is not None:
            floor = effective_precision(load_precision(spec.never_faster_than), self.gpu)
            time = max(time, self.quantized_gemm_time(tokens, d_in, d_out, floor))
        return time

    def compute_rate_at(self, spec: PrecisionSpec) -> float:
        """FLOP/s GEMMs reach at ``spec``: its peak times the profile's (bf16) fraction."""
        return compute_flops(spec, self.gpu) * self.profile["gemm_compute_efficiency"]

    def batched_gemm_time(self, batch: int, m: int, k: int, n: int) -> float:
        """``batch`` independent bf16 (m x k) @ (k x n) matmuls in one kernel (torch.bmm)."""
        flops, nbytes = gemm_work(m, k, n)
        return self.gemm.time(batch * flops, batch * nbytes)

    def mlp_time(
        self, tokens: int, hidden: int, width: int, precision: PrecisionSpec | None = None
    ) -> float:
        """A gated MLP of ``width`` on this GPU: the fused gate-up GEMM, then the down one."""
        return self.gemm_time(tokens, hidden, 2 * width, precision) + self.gemm_time(
            tokens, width, hidden, precision
        )

    # -- elementwise kernels -------------------------------------------------------------------
    def elementwise_time(self, nbytes: float, kernels: int) -> float:
        """``kernels`` memory-bound kernels moving ``nbytes`` in all."""
        return nbytes / self.elementwise_rate + kernels * self.elementwise_latency

    # -- between GPUs --------------------------------------------------------------------------
    def allreduce_time(self, nbytes: float, graphed: bool = True) -> float:
        """All-reduce across ``tp`` GPUs, inside a CUDA graph or launched eagerly (``graphed``):
        the measured curves where they cover the GPU, else a ring; zero without tensor
        parallelism."""
        if self.collectives is not None and nbytes > 0:
            measured = self.collectives.allreduce_time(nbytes, graphed)
            if measured is not None:
                return measured
            if (kernel := self.collectives.floor_time(nbytes)) is not None:
                return max(self._ring_time(nbytes, passes=2), kernel)
        ring = self._ring_time(nbytes, passes=2)
        below = self.floor.allreduce_time(nbytes) if self.floor is not None and nbytes > 0 else None
        return ring if below is None else max(ring, below)

    def allgather_time(self, nbytes: float) -> float:
        """All-gather of ``nbytes`` in total (e.g. vocab-sharded logits): measured, else ring."""
        if self.collectives is not None and nbytes > 0:
            measured = self.collectives.allgather_time(nbytes)
            if measured is not None:
                return measured
        ring = self._ring_time(nbytes, passes=1)
        below = self.floor.allgather_time(nbytes) if self.floor is not None and nbytes > 0 else None
        return ring if below is None else max(ring, below)

    def _ring_time(self, nbytes: float, passes: int) -> float:
        if self.tp == 1 or nbytes <= 0:
            return 0.0
        return self.link_latency + passes * (self.tp - 1) / self.tp * nbytes / self.link_bandwidth

    def hop_time(self, nbytes: float) -> float:
        """One point-to-point send of ``nbytes`` (a pipeline stage hands its hidden states on)."""
        return self.link_latency + nbytes / self.hop_bandwidth
