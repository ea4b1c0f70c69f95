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
    """The all-reduce and all-gather of one engine on ``tp`` GPUs of one GPU kind. A curve the
    tables lack at this GPU count (GB300's custom kernels reach 16, its NCCL table 4:
    engine_collectives fills NCCL from its HGX sibling) answers None: the caller's ring
    formula stands for it."""

    def __init__(
        self,
        curves: dict[str, dict[int, list[list[float]]]],
        tp: int,
        custom: str,
        custom_max_bytes: float,
    ) -> None:
        def curve(name: str) -> Curve | None:
            points = curves.get(name, {}).get(tp)
            return Curve.of(points) if points else None

        self.nccl_allreduce = curve("nccl_all_reduce")
        self.nccl_allgather = curve("nccl_all_gather")
        self.custom_max_bytes = custom_max_bytes
        self.custom_graph = self.custom_eager = None
        if custom:
            self.custom_graph = curve(f"{custom}_graph")
            # TRT-LLM's op was measured graph-captured only: an eager forward runs the same
            # kernels, its launches charged as the engine's layer_launch_s
            self.custom_eager = curve(f"{custom}_eager") or self.custom_graph
            if custom in own_switch_allreduce():  # it hands large messages to NCCL itself
                self.custom_max_bytes = math.inf

    @property
    def covered(self) -> bool:
        """Whether any curve times this GPU count."""
        return any((self.nccl_allreduce, self.nccl_allgather, self.custom_graph))

    def allreduce_time(self, nbytes: float, graphed: bool = True) -> float | None:
        """One all-reduce of ``nbytes``: the engine's custom kernel below its switch size
        (replayed from a CUDA graph, or launched eagerly), else NCCL; None where the tables
        time neither at this GPU count."""
        if self.custom_graph is not None and nbytes < self.custom_max_bytes:
            curve = self.custom_graph if graphed else self.custom_eager
            assert curve is not None
            return curve.time(nbytes)
        return None if self.nccl_allreduce is None else self.nccl_allreduce.time(nbytes)

    def floor_time(self, nbytes: float) -> float | None:
        """Where NCCL is not timed at this count but the engine's kernel is (GB300 under SGLang
        at 16 GPUs; at 8 NCCL takes B300's curve, NCCL_SIBLINGS): the kernel's time at its
        switch size, below which no larger message is timed by the ring formula that stands in
        for NCCL (QA: 8 MiB cost 50.5 us, 1 byte less 56.7); None otherwise."""
        if self.nccl_allreduce is not None or self.custom_graph is None:
            return None
        return self.custom_graph.time(min(nbytes, self.custom_max_bytes))

    def allgather_time(self, nbytes: float) -> float | None:
        """One NCCL all-gather producing ``nbytes`` in all (nccl-tests' size convention);
        None where the tables lack this GPU count."""
        return None if self.nccl_allgather is None else self.nccl_allgather.time(nbytes)


# GB200 and GB300 NVL72: their NCCL tables stop at 4 GPUs (one compute tray: collectives.yaml);
# a group of 8 or more runs NCCL over the same NVLink 5 switch fabric as an HGX B200/B300 (900
# GB/s a GPU, gpus.yaml) at the same NCCL release the tables hold (2.29.2), so it takes their
# measured NCCL curves at that count, not the ring formula's 29.7 us latency transferred from
# the H100 profile (QA: GB200 at tp 8 all-reduced in 5.6 ms a step where B200 took 1.0)
NCCL_SIBLINGS = {"gb200": "b200", "gb300": "b300"}


def engine_collectives(gpu_id: str, tp: int, custom: str) -> Collectives | None:
    """The measured collectives of ``tp`` GPUs of ``gpu_id`` under an engine whose custom
    all-reduce is ``custom`` ("" for NCCL only); None where the tables cover neither the GPU
    nor that GPU count (tp 1, 6, > 8; GB300's custom kernels reach 16): the caller keeps its
    ring formula, as it does for a collective the tables lack at a count they cover."""
    loaded = load_collectives(gpu_id) if tp > 1 else None
    if loaded is None:
        return None
    max_bytes, curves = loaded
    sibling = load_collectives(NCCL_SIBLINGS[gpu_id]) if gpu_id in NCCL_SIBLINGS else None
    if sibling is not None:  # NCCL counts this GPU's tables lack, from its sibling's
        curves = dict(curves)
        for name in ("nccl_all_reduce", "nccl_all_gather"):
            theirs = sibling[1].get(name, {})
            if tp not in curves.get(name, {}) and tp in theirs:
                curves[name] = {**curves.get(name, {}), tp: theirs[tp]}
    # a count only the engine's own kernel was timed at keeps that kernel (QA: GB300 at tp 8
    # under TRT-LLM ran the ring formula's transferred 29.7 us latency for a measured 4.4 us)
    found = Collectives(curves, tp, custom, max_bytes)
    return found if found.covered else None


def node_floor(gpu_id: str, tp: int, gpus_per_node: int) -> Collectives | None:
    """NCCL's measured collectives of one whole server, for a group of ``tp`` GPUs that spans
    several (``tp`` > ``gpus_per_node``): the engines' custom all-reduce is off there (vLLM and
    SGLang ``CustomAllreduce``: "Custom allreduce is disabled because this process group spans
    across nodes", vllm/distributed/device_communicators/custom_all_reduce.py), and an
    all-reduce over several servers reduces within each first, so it takes at least as long as
    NCCL's over one server's GPUs. The ring formula that times such a group is floored at it
    (QA: TP16 on two B200 servers all-reduced 64 MiB in 208 us, TP8 in one 279 us)."""
    if tp <= gpus_per_node:
        return None
    return engine_collectives(gpu_id, gpus_per_node, "")
