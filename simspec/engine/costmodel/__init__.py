"""Time of one forward pass: a per-operator roofline
(:meth:`~simspec.engine.costmodel.model.RooflineCostModel.forward`).

A batch is described per sequence by (new query tokens, tokens already in KV). The query axis
matters: a verify step feeds K+1 (or tree-size) tokens per sequence. Each operator costs a
roofline (:mod:`~simspec.engine.costmodel.roofline`) of the FLOPs and bytes it moves
(:mod:`~simspec.engine.costmodel.work`, shared with the calibration fit in
``simspec.studies.calibration``); attention has its own latency for decode-only batches (one
new token per sequence), whose kernel path is lighter than verify or prefill. The per-operator
constants come from a :class:`~simspec.catalog.hardware.HardwareProfile` fitted to timing
tables; the per-step host overhead from an :class:`~simspec.catalog.hardware.EngineProfile`.

    work.py       FLOP and byte counts
    shapes.py     BatchShape (what a forward computes), StepCost (what it costs)
    roofline.py   the roofline and the operator times (GEMMs, elementwise, collectives)
    attention.py  attention projections and kernels: dense, MLA, windowed
    moe.py        router, shared and routed experts, all-to-all
    kernels.py    measured-kernel terms: grouped GEMMs, MLA decode, DeepEP (fitted tables)
    model.py      RooflineCostModel: one forward, composed from them
    dp_attention.py  one forward under data-parallel attention: the busiest rank's attention,
                  the MoE over every rank's tokens
"""

from simspec.engine.costmodel.model import RooflineCostModel
from simspec.engine.costmodel.moe import MOE_KERNELS_PER_LAYER
from simspec.engine.costmodel.roofline import OperatorTimes, roofline_time
from simspec.engine.costmodel.shapes import BatchShape, StepCost
from simspec.engine.costmodel.work import (
    ELEMENTWISE_KERNELS_PER_LAYER,
    attention_work,
    distinct_experts,
    elementwise_bytes,
    gemm_work,
    mla_attention_work,
)

__all__ = [
    "ELEMENTWISE_KERNELS_PER_LAYER",
    "MOE_KERNELS_PER_LAYER",
    "BatchShape",
    "OperatorTimes",
    "RooflineCostModel",
    "StepCost",
    "attention_work",
    "distinct_experts",
    "elementwise_bytes",
    "gemm_work",
    "mla_attention_work",
    "roofline_time",
]
