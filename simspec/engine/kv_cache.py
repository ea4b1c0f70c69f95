"""GPU memory plan and the paged KV block pool.

Capacity follows vLLM: ``gpu_memory_utilization`` of device memory, minus the weights of the
target and the draft (both sharded over TP), minus an activation reserve, divided into blocks of
``block_size`` tokens whose size covers the target's and the draft's KV for those tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from simspec.catalog.hardware import EngineProfile, GpuSpec
from simspec.catalog.models import BYTES_PER_PARAM, ModelShape
from simspec.errors import ScenarioError

GIB = 1024**3


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU bytes by use, and the resulting number of KV blocks."""

    usable_bytes: float
    weight_bytes: float
    draft_bytes: float
    activation_bytes: float
    kv_bytes_per_token: float
    block_size: int
    num_blocks: int


def target_weight_bytes(target: ModelShape, weight_bytes: float = BYTES_PER_PARAM) -> float:
    """Bytes of the target's weights: decoder layers at ``weight_bytes`` each, the embedding
    and LM head in bf16 (vLLM's FP8 and GPTQ/AWQ methods quantise LinearBase layers only; the
    vocab embedding and ParallelLMHead stay unquantised unless a config says otherwise)."""
    if weight_bytes == BYTES_PER_PARAM:  # the bf16 expression, unchanged to the last bit
        return target.num_params * BYTES_PER_PARAM
    dense = target.num_params - target.num_hidden_layers * target.layer_params
    return target.num_hidden_layers * target.layer_params * weight_bytes + dense * BYTES_PER_PARAM


def activation_reserve(target: ModelShape, tp: int, max_tokens: int, max_logit_rows: int) -> float:
    """Peak activations of the largest forward (what vLLM's profiling run measures).

    Estimated from shapes: one layer's widest intermediates for ``max_tokens`` tokens in bf16,
    plus fp32 logits for every row the sampler may see. Not measured; calibration may replace it.
    """
    h, inter = target.hidden_size, target.intermediate_size // tp
    per_token = (4 * h + 3 * inter + (target.q_dim + 2 * target.kv_dim) // tp) * BYTES_PER_PARAM
    logits = max_logit_rows * target.vocab_size / tp * 4
    return max_tokens * per_token + logits


@dataclass(frozen=True)
class MemoryDemand:
    """What a run needs of GPU memory besides the target's weights and KV cache: the draft's
    weights and KV per token (per GPU, from the speculator), and the tokens and logit rows of
    its largest forward (the activation reserve)."""

    draft_bytes: float
    draft_kv_per_token: float
    max_tokens: int
    max_logit_rows: int


def plan_memory(
    gpu: GpuSpec,
    engine: EngineProfile,
    target: ModelShape,
    demand: MemoryDemand,
    tp: int = 1,
    pp: int = 1,
    weight_bytes: float = BYTES_PER_PARAM,
    kv_bytes: float = BYTES_PER_PARAM,
) -> MemoryPlan:
    """The KV blocks left per GPU once the target's weights (over ``tp``), the draft and the
    activation reserve are placed; a ScenarioError when none are. ``weight_bytes``: bytes per
    weight of the target's decoder layers (its precision); ``kv_bytes``: per cached K/V
    element (the KV-cache dtype; ``demand`` already counts the draft's at that dtype)."""
    draft_bytes = demand.draft_bytes
    # layers split over pp GPUs pool their memory (weights and KV divide with the layers)
    usable = gpu.memory_bytes * engine["gpu_memory_utilization"] * pp
    weights = target_weight_bytes(target, weight_bytes) / tp
    act = activation_reserve(target, tp, demand.max_tokens, demand.max_logit_rows)
    kv_per_token = target.kv_bytes_per_token_per_gpu(tp, dtype_bytes=kv_bytes)
    kv_per_token += demand.draft_kv_per_token
    block = int(engine["block_size"])
    free = usable - weights - draft_bytes - act
    blocks = int(free // (kv_per_token * block)) if free > 0 else 0
    if blocks <= 0:
        where = f"over {pp} GPUs" if pp > 1 else "per GPU"
        raise ScenarioError(
            f"{target.id} does not fit on {gpu.id} at tp={tp}: weights {weights / GIB:.1f} GiB + "
            f"draft {draft_bytes / GIB:.1f} GiB + activations {act / GIB:.1f} GiB exceed the "
            f"{usable / GIB:.1f} GiB usable {where}; raise tp or pp, or pick a larger GPU"
        )
    return MemoryPlan(usable, weights, draft_bytes, act, kv_per_token, block, blocks)


class BlockPool:
    """Counts of free KV blocks; requests hold whole blocks (no block ids needed)."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.free = num_blocks
        self.peak_used = 0

    @property
    def used(self) -> int:
        return self.num_blocks - self.free

    def allocate(self, n: int) -> None:
        if n > self.free:
            raise RuntimeError(f"allocating {n} blocks with {self.free} free")  # scheduler bug
        self.free -= n
        self.peak_used = max(self.peak_used, self.num_blocks - self.free)

    def release(self, n: int) -> None:
        self.free += n
        if self.free > self.num_blocks:
            raise RuntimeError("released more blocks than allocated")  # scheduler bug
