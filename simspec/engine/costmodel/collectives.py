"""Tensor-parallel all-reduce and all-gather as the engines run them inside one node: measured
curves per GPU, GPU count and kernel (``simspec/data/collectives.yaml``, fitted by
``calibration/fit_collectives.py`` to AIConfigurator's tables).

The engines reduce a message below 8 MiB with their own one-/two-shot kernel over NVLink
peer memory (vLLM ``CustomAllreduce.should_custom_ar``: ``inp_size < max_size``, max_size
8192 * 1024 in vllm/distributed/device_communicators/custom_all_reduce.py; SGLang
``CustomAllreduce._MAX_CAR_SIZE = 8192 * 1024`` in sglang/srt/distributed/device_communicators/
custom_all_reduce.py), and larger ones with NCCL; TRT-LLM's AllReduce op (strategy AUTO) makes
that choice itself, and its measured curve covers every size. A decode step's messages (hidden
x tokens x 2 bytes: 14 KiB per token for DeepSeek-V3) sit on the flat, latency-bound part of the
curves; a prefill chunk's reach the bandwidth-bound part. Inside a CUDA graph the custom kernel
is replayed; outside one (a forward above the capture limit) it is launched from Python, which
the ``*_eager`` curves measure.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from simspec.catalog.hardware import load_collectives, own_switch_allreduce


@dataclass(frozen=True, slots=True)
class Curve:
    """Measured (bytes, seconds) points of one collective, interpolated log-log; below the
    smallest size the smallest's time (latency-bound), above the largest the last segment's
    bandwidth (bandwidth-bound)."""

    log_sizes: tuple[float, ...]
    log_times: tuple[float, ...]

    @classmethod
    def of(cls, points: list[list[float]]) -> Curve:
        pts = sorted(points)
        return cls(tuple(math.log(s) for s, _ in pts), tuple(math.log(t) for _, t in pts))

    def time(self, nbytes: float) -> float:
        xs, ys = self.log_sizes, self.log_times
        x = math.log(nbytes)
        if x <= xs[0]:
            return math.exp(ys[0])
        if x >= xs[-1]:  # linear in bytes past the last point: the last segment's bandwidth
            t0, t1 = math.exp(ys[-2]), math.exp(ys[-1])
            slope = (t1 - t0) / (math.exp(xs[-1]) - math.exp(xs[-2]))
            return t1 + max(slope, 0.0) * (nbytes - math.exp(xs[-1]))
        i = bisect.bisect_right(xs, x)
        f = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
        return math.exp(ys[i - 1] + f * (ys[i] - ys[i - 1]))


class Collectives:
    """The all-reduce and all-gather of one engine on ``tp`` GPUs of one GPU kind."""

    def __init__(
        self,
        curves: dict[str, dict[int, list[list[float]]]],
        tp: int,
        custom: str,
        custom_max_bytes: float,
    ) -> None:
        self.nccl_allreduce = Curve.of(curves["nccl_all_reduce"][tp])
        self.nccl_allgather = Curve.of(curves["nccl_all_gather"][tp])
        self.custom_max_bytes = custom_max_bytes
        self.custom_graph = self.custom_eager = None
        if custom:
            self.custom_graph = Curve.of(curves[f"{custom}_graph"][tp])
            # TRT-LLM's op was measured graph-captured only: an eager forward runs the same
            # kernels, its launches charged as the engine's layer_launch_s
            eager = curves.get(f"{custom}_eager")
            self.custom_eager = Curve.of(eager[tp]) if eager else self.custom_graph
            if custom in own_switch_allreduce():  # it hands large messages to NCCL itself
                self.custom_max_bytes = math.inf

    def allreduce_time(self, nbytes: float, graphed: bool = True) -> float:
        """One all-reduce of ``nbytes``: the engine's custom kernel below its switch size
        (replayed from a CUDA graph, or launched eagerly), else NCCL."""
        if self.custom_graph is not None and nbytes < self.custom_max_bytes:
            curve = self.custom_graph if graphed else self.custom_eager
            assert curve is not None
            return curve.time(nbytes)
        return self.nccl_allreduce.time(nbytes)

    def allgather_time(self, nbytes: float) -> float:
        """One NCCL all-gather producing ``nbytes`` in all (nccl-tests' size convention)."""
        return self.nccl_allgather.time(nbytes)


def engine_collectives(gpu_id: str, tp: int, custom: str) -> Collectives | None:
    """The measured collectives of ``tp`` GPUs of ``gpu_id`` under an engine whose custom
    all-reduce is ``custom`` ("" for NCCL only); None where the tables cover neither the GPU
    nor that GPU count (tp 1, 6, > 8): the caller keeps its ring formula."""
    loaded = load_collectives(gpu_id) if tp > 1 else None
    if loaded is None:
        return None
    max_bytes, curves = loaded
    if tp not in curves["nccl_all_reduce"]:
        return None
    return Collectives(curves, tp, custom, max_bytes)
