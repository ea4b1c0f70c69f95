"""The elementwise work of one forward on one GPU: the kernels every layer launches besides its
GEMMs, attention and collectives (norms, RoPE, activations, routing when no measured MoE kernel
times it, and the engine's extra kernels of :mod:`simspec.catalog.layer_kernels`), counted
once here for the tensor-parallel forward and the data-parallel-attention one."""

from __future__ import annotations

from simspec.catalog.layer_kernels import LayerKernels
from simspec.catalog.models import BYTES_PER_PARAM, ModelShape
from simspec.engine.costmodel.moe import MOE_KERNELS_PER_LAYER
from simspec.engine.costmodel.work import ELEMENTWISE_KERNELS_PER_LAYER, elementwise_bytes


def elementwise_work(
    model: ModelShape,
    tokens: int,
    tp: int,
    n_layers: int,
    measured_moe: bool,
    extra: LayerKernels,
) -> tuple[float, int]:
    """(bytes, kernel launches) of the elementwise kernels of ``n_layers`` layers of ``model``
    over ``tokens`` tokens on one GPU of a group of ``tp`` (the embedding lookup included).

    A MoE layer's gated activation runs over the k routed widths and the shared one, and its
    routing adds kernels, unless a measured MoE kernel (``measured_moe``) times both itself;
    ``extra`` adds the kernels the engine launches beyond these (latent norms, FP8 activation
    quant, q/k norms, ...; none for a dense Llama layer)."""
    t, h = tokens, model.hidden_size
    n_moe = model.moe_layers_in(n_layers)
    n_dense = n_layers - n_moe
    q_dim, kv_dim = model.q_dim // tp, model.kv_dim_per_gpu(tp)
    nbytes = n_dense * elementwise_bytes(t, h, q_dim, kv_dim, model.intermediate_size // tp)
    kernels = n_layers * ELEMENTWISE_KERNELS_PER_LAYER + 1  # + the embedding lookup
    if n_moe:
        routed = 0 if measured_moe else model.num_experts_per_tok * model.moe_intermediate_size
        moe_inter = (routed + model.shared_expert_intermediate_size) // tp
        nbytes += n_moe * elementwise_bytes(t, h, q_dim, kv_dim, moe_inter)
        kernels += 0 if measured_moe else n_moe * MOE_KERNELS_PER_LAYER
    if not extra.none:
        unmeasured = 0 if measured_moe else 1
        kernels += n_layers * extra.layer + n_dense * extra.dense
        kernels += n_moe * (extra.moe + unmeasured * extra.moe_unmeasured)
        nbytes += t * (
            n_layers * extra.layer_bytes
            + n_dense * extra.dense_bytes
            + n_moe * (extra.moe_bytes + unmeasured * extra.moe_unmeasured_bytes)
        )
    return nbytes + BYTES_PER_PARAM * t * h, kernels
