"""TensorRT-LLM's CUDA-graph batch sizes (PyTorch backend): which decode batches replay a
captured graph when padding is off, its default.

With ``CudaGraphConfig(enable_padding=False)`` the engine captures one graph per listed batch
size and replays it only for a batch of exactly that many requests; any other decode batch
runs eagerly (BaseCudaGraphConfig._generate_cuda_graph_batch_sizes in
tensorrt_llm/llmapi/llm_args.py at 0004396720054fd8e205cbf616f21f0b57c6b412).
"""

from __future__ import annotations

import functools
import math


@functools.cache
def capture_batch_sizes(max_batch_size: int) -> frozenset[int]:
    """The default unpadded capture list up to ``max_batch_size``: 1-31, 32, 64, 128, then
    powers of two from 256 below it, and ``max_batch_size`` itself."""
    sizes = [*range(1, 32), 32, 64, 128]
    if max_batch_size > 1:
        sizes += [2**i for i in range(8, math.ceil(math.log2(max_batch_size)))]
    kept = {s for s in sizes if s <= max_batch_size}
    kept.add(max_batch_size)
    return frozenset(kept)
