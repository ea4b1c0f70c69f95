"""The host's share of an engine step: its CPU work (scheduling, input preparation, sampling,
output processing) as a fixed part plus a part per sequence, whether an overlap scheduler hides
it behind the GPU, and whether the forward replays a CUDA graph or launches its kernels eagerly.

The constants and the engine code they follow are in ``simspec/data/engines.yaml``; this module
only applies them:

- step host time = ``step_overhead_s + step_overhead_per_seq_s * sequences``;
- exposed = all of it, or under an overlap scheduler (SGLang's, unless speculation turns it
  off) only what outlasts the GPU's forward: the step takes max(host, GPU);
- a forward is replayed from a CUDA graph when it fits the engine's capture limit (vLLM:
  ``max_cudagraph_capture_size`` tokens; SGLang: ``cuda_graph_max_bs`` decode or verify
  requests, extend batches never; TRT-LLM: decode batches of a captured size only), padded up
  to the next captured size where the engine pads (vLLM); any other runs eager and pays
  ``layer_launch_s`` per layer of host launches.
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass

from simspec.catalog.hardware import EngineProfile, GpuSpec
from simspec.engine.costmodel.shapes import BatchShape, StepCost
from simspec.engine.costmodel.trtllm import capture_batch_sizes


@functools.cache
def capture_sizes(max_tokens: int) -> tuple[int, ...]:
    """vLLM's default CUDA-graph capture sizes up to ``max_tokens``: 1, 2, 4, then every 8 below
    256, then every 16 (vllm/config/vllm.py ``_set_cudagraph_sizes``; compilation.py documents
    the same list)."""
    sizes = [s for s in (1, 2, 4) if s <= max_tokens]
    sizes += range(8, min(max_tokens + 1, 256), 8)
    sizes += range(256, max_tokens + 1, 16)
    return tuple(sizes)


@dataclass(frozen=True, slots=True)
class HostModel:
    """One engine's host costs per step, as the cost model's forward applies them."""

    fixed_s: float
    per_seq_s: float
    overlapped: bool
    layer_launch_s: float
    graph_max_tokens: float
    graph_max_seqs: float
    graph_decode_only: bool
    pad: bool
    # the only batch sizes a graph replays (TRT-LLM without padding); None: any up to the limit
    graph_sizes: frozenset[int] | None = None
    # a calibrated deployment's multiplier on kernel time (HardwareProfile.gpu_time_scale);
    # it rides here because step_cost is where a forward's kernel times are summed
    gpu_scale: float = 1.0

    @classmethod
    def of(
        cls,
        engine: EngineProfile,
        tp: int,
        speculative: bool = False,
        step_overhead_s: float | None = None,
        gpu_scale: float = 1.0,
        gpu: GpuSpec | None = None,
        graph_max_tokens: float | None = None,
    ) -> HostModel:
        """``step_overhead_s``: a fixed exposed host time instead of the engine's (no per-
        sequence part, no overlap); ``gpu_scale``: the kernels' time multiplier;
        ``graph_max_tokens``: the deployment's cap on a graph's tokens (and so sequences)."""
        max_tokens, max_seqs = engine.graph_limits(tp, gpu)
        if graph_max_tokens is not None:
            max_tokens = min(max_tokens, graph_max_tokens)
            max_seqs = min(max_seqs, graph_max_tokens)
        explicit = step_overhead_s is not None
        return cls(
            fixed_s=engine["step_overhead_s"] if step_overhead_s is None else step_overhead_s,
            per_seq_s=0.0 if explicit else engine["step_overhead_per_seq_s"],
            overlapped=not explicit and engine.overlaps(speculative),
            layer_launch_s=engine["layer_launch_s"],
            graph_max_tokens=max_tokens,
            graph_max_seqs=max_seqs,
            graph_decode_only=bool(engine["cuda_graph_decode_only"]),
            pad=bool(engine["pad_to_capture_size"]),
            graph_sizes=(
                capture_batch_sizes(int(max_seqs))
                if engine.flag("cuda_graph_exact_sizes")
                else None
            ),
            gpu_scale=gpu_scale,
        )

    def exposed(self, num_seqs: int, gpu_s: float) -> float:
        """Host seconds of a step over ``num_seqs`` sequences that the GPU waits for, given the
        forward's own ``gpu_s``."""
        host = self.fixed_s + self.per_seq_s * num_seqs
        return max(0.0, host - gpu_s) if self.overlapped else host

    def step_cost(
        self,
        terms: tuple[float, float, float, float],
        attention: float,
        extra_gemm_s: float,
        overhead_s: float | None,
        num_seqs: int,
        n_layers: int,
        graphed: bool,
    ) -> StepCost:
        """One forward's cost from its token terms (GEMMs, elementwise, communication, LM
        head), its attention and its host time: a forward outside a CUDA graph launches its
        kernels from Python, so a layer costs at least ``layer_launch_s`` of host time and the
        GPU waits when its own work is shorter; ``overhead_s``: a fixed host time instead of
        the engine's for ``num_seqs`` sequences."""
        gemm, elementwise, comm, lm_head = terms
        if self.gpu_scale != 1.0:
            g = self.gpu_scale
            gemm, elementwise, comm, lm_head = gemm * g, elementwise * g, comm * g, lm_head * g
            attention, extra_gemm_s = attention * g, extra_gemm_s * g
        gpu = gemm + extra_gemm_s + attention + lm_head + elementwise + comm
        launch = 0.0 if graphed else max(0.0, n_layers * self.layer_launch_s - gpu)
        if overhead_s is None:
            overhead = self.exposed(num_seqs, gpu + launch) + launch
        else:
            overhead = overhead_s + launch
        return StepCost(gemm + extra_gemm_s, attention, lm_head, elementwise, comm, overhead)

    def graphed(self, batch: BatchShape) -> bool:
        """Whether the engine replays this forward from a CUDA graph. A batch with more tokens
        than rows that need logits holds a prefill (or draft-extend) chunk, which SGLang runs
        outside its graphs (cuda_graph_runner ``can_run``: decode and target-verify only)."""
        if batch.num_tokens > self.graph_max_tokens or batch.num_seqs > self.graph_max_seqs:
            return False
        if self.graph_sizes is not None and batch.num_seqs not in self.graph_sizes:
            return False  # TRT-LLM without padding: no graph of that size (costmodel.trtllm)
        return not (self.graph_decode_only and batch.num_tokens > batch.logit_tokens)

    def padded(self, tokens: int) -> int:
        """The tokens a graphed forward computes: vLLM pads the batch up to the next captured
        size (gpu_model_runner pads num_input_tokens to the cudagraph batch size)."""
        if not self.pad:
            return tokens
        sizes = capture_sizes(int(self.graph_max_tokens))
        i = bisect.bisect_left(sizes, tokens)
        return sizes[i] if i < len(sizes) else tokens
