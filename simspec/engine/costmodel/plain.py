"""One forward of a plain decoder for the hot loop: :meth:`RooflineCostModel.forward`'s floats,
in its order, from a batch's sums, without the objects a forward builds on the way.

An engine iteration runs three forwards (EAGLE's two draft passes and the verify pass), and
most of their cost in Python is not arithmetic but the calls and values around it: the
``BatchShape`` in, the attention kernel's three nested calls, the host's step cost and the
``StepCost`` out. :class:`PlainForward` does the same operations on the same operands for the
case that covers the hot loop (full GQA attention: no MLA, sparse attention, sliding window or
Gated DeltaNet layers; no data-parallel attention; no calibrated kernel-time scale), so every
result is bit-identical to ``forward``'s (``tests/test_step_columns.py`` checks it shape by
shape); a model outside that case gets no ``PlainForward`` (:meth:`RooflineCostModel.plain`
says None) and keeps ``forward``.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from simspec.catalog.models import BYTES_PER_PARAM, ModelShape
from simspec.engine.costmodel.attention import AttentionKernels
from simspec.engine.costmodel.host import HostModel
from simspec.engine.costmodel.shapes import BatchShape, one_token_each
from simspec.engine.layout import ParallelLayout

# seconds of (GEMMs, elementwise kernels, communication, LM head) of one forward
TokenTerms = tuple[float, float, float, float]


class ModelTerms(Protocol):
    """What the cost model keeps per model (``model._ModelTerms``) that a plain forward reads."""

    @property
    def model(self) -> ModelShape: ...

    @property
    def attention(self) -> AttentionKernels: ...

    @property
    def recurrent(self) -> object | None: ...


class CostModel(Protocol):
    """What a plain forward reads of the cost model
    (:class:`~simspec.engine.costmodel.model.RooflineCostModel`, which builds it: a protocol,
    so this module never imports that one back)."""

    layout: ParallelLayout
    host: HostModel

    # ``terms`` is the cost model's own per-model record, the one it handed a PlainForward
    def _shape_terms(
        self, terms: Any, batch: BatchShape, n_layers: int
    ) -> tuple[TokenTerms, bool]: ...


# (GEMMs with any extra GEMM, attention, LM head, elementwise, communication, host overhead):
# StepCost's fields, in its order
Parts = tuple[float, float, float, float, float, float]
# the same fields of a run of forwards (PlainForward.parts_many): an array each, or one float
# where the field does not vary along the run
Field = np.ndarray | float
PartsArrays = tuple[Field, Field, Field, Field, Field, Field]


class PlainForward:
    """``forward(model, batch, layers=layers)`` of one model, as plain floats. Built by
    :meth:`RooflineCostModel.plain`, which checks that the model is a plain one."""

    __slots__ = (
        "cost",
        "terms",
        "layers",
        "flops_per_pair",
        "kv_bytes_per_token",
        "q_bytes_per_token",
        "compute_rate",
        "memory_rate",
        "latency",
        "decode_latency",
        "sharpness",
        "host_fixed_s",
        "host_per_seq_s",
        "overlapped",
        "launch_s",
        "by_shape",
        "fixed",
    )

    def __init__(self, cost: CostModel, terms: ModelTerms, layers: int) -> None:
        attn, host = terms.attention, cost.host
        self.cost, self.terms, self.layers = cost, terms, layers
        # attention_work's constant factors, multiplied first as its expressions do
        # (Python evaluates ``4.0 * q_dim * pairs`` as ``(4.0 * q_dim) * pairs``)
        self.flops_per_pair = 4.0 * attn.q_dim
        self.kv_bytes_per_token = attn.kv_bytes * 2.0 * attn.kv_dim
        self.q_bytes_per_token = BYTES_PER_PARAM * 2.0 * attn.q_dim
        self.compute_rate, self.memory_rate = attn.compute_rate, attn.memory_rate
        self.latency, self.decode_latency = attn.latency, attn.decode_latency
        self.sharpness = attn.sharpness
        self.host_fixed_s, self.host_per_seq_s = host.fixed_s, host.per_seq_s
        self.overlapped = host.overlapped
        self.launch_s = layers * host.layer_launch_s  # as step_cost's n_layers * layer_launch_s
        # (GEMMs, elementwise, communication, LM head, graphed) by (tokens, logit rows, seqs)
        self.by_shape: dict[tuple[int, int, int], tuple[float, float, float, float, bool]] = {}
        # at's answers by its arguments: a closed loop's steady batches repeat a few shapes
        self.fixed: dict[tuple[int, int, int, float, int, float | None, float], FixedForward] = {}

    def parts(
        self,
        num_tokens: int,
        logit_tokens: int,
        num_seqs: int,
        sum_q_sq: float,
        sum_q_kv: float,
        sum_kv: float,
        overhead_s: float | None = None,
        extra_gemm_s: float = 0.0,
    ) -> Parts:
        """The ``StepCost`` fields of a forward over a batch with these sums (the
        :class:`BatchShape` fields); their sum in field order is its ``total_s``, and equals
        ``gpu + overhead`` bit for bit, since the first five are summed in the same order."""
        t = num_tokens
        if t == 0:  # nothing runs: forward's own early answer, the host's time alone
            idle = self.cost.host.exposed(0, extra_gemm_s) if overhead_s is None else overhead_s
            return (extra_gemm_s, 0.0, 0.0, 0.0, 0.0, idle)
        key = (t, logit_tokens, num_seqs)
        hit = self.by_shape.get(key)
        if hit is None:
            hit = self.by_shape[key] = self._shape(t, logit_tokens, num_seqs)
        gemm, elementwise, comm, lm_head, graphed = hit
        # AttentionKernels.time over every layer: attention_work, then roofline_time
        attention = 0.0
        if self.layers > 0:
            latency = self.decode_latency if one_token_each(sum_q_sq, t) else self.latency
            pairs = sum_q_kv + (sum_q_sq + t) / 2.0
            flops = self.flops_per_pair * pairs
            nbytes = self.kv_bytes_per_token * (sum_kv + t)
            nbytes += self.q_bytes_per_token * t
            a, b = flops / self.compute_rate, nbytes / self.memory_rate
            s = self.sharpness
            one = latency + (a + b) if s == 1.0 else latency + (a**s + b**s) ** (1.0 / s)
            attention = self.layers * one
        # HostModel.step_cost at a kernel-time scale of 1
        gemm += extra_gemm_s
        gpu = gemm + attention + lm_head + elementwise + comm
        launch = 0.0 if graphed else max(0.0, self.launch_s - gpu)
        if overhead_s is None:
            host = self.host_fixed_s + self.host_per_seq_s * num_seqs
            exposed = max(0.0, host - (gpu + launch)) if self.overlapped else host
            overhead = exposed + launch
        else:
            overhead = overhead_s + launch
        return (gemm, attention, lm_head, elementwise, comm, overhead)

    def parts_many(
        self,
        num_tokens: int,
        logit_tokens: int,
        num_seqs: int,
        sum_q_sq: float,
        width: int,
        sum_kv: np.ndarray,
        overhead_s: float | None = None,
        extra_gemm_s: float = 0.0,
    ) -> PartsArrays | None:
        """:meth:`parts` of a run of forwards of one shape whose context sums ``sum_kv`` (an
        array, one per forward; ``sum_q_kv`` is ``width * sum_kv``) differ, as arrays: the
        same IEEE operations on the same operands, element by element, so each element is
        :meth:`parts`' float (numpy's elementwise ``+ - * /`` and ``maximum`` are the scalar
        operations). None where the attention roofline's sharpness is not 1 (its powers may
        round differently in numpy's vectorised ``power``): the caller steps :meth:`parts`."""
        if num_tokens == 0 or self.sharpness != 1.0:
            return None
        fixed = self.at(
            num_tokens, logit_tokens, num_seqs, sum_q_sq, width, overhead_s, extra_gemm_s
        )
        assert fixed is not None  # num_tokens > 0
        return fixed.parts_many(sum_kv)

    def at(
        self,
        num_tokens: int,
        logit_tokens: int,
        num_seqs: int,
        sum_q_sq: float,
        width: int,
        overhead_s: float | None = None,
        extra_gemm_s: float = 0.0,
    ) -> FixedForward | None:
        """:meth:`parts` of forwards of one shape whose context sum alone changes (``sum_q_kv``
        is ``width * sum_kv``), as an object that answers for each context sum: a run of
        steps of one batch prices each step with a few float operations, not a call that
        looks its shape up again. None for an empty forward (the caller keeps :meth:`parts`)."""
        t = num_tokens
        if t == 0:
            return None
        args = (t, logit_tokens, num_seqs, sum_q_sq, width, overhead_s, extra_gemm_s)
        fixed = self.fixed.get(args)
        if fixed is None:
            key = (t, logit_tokens, num_seqs)
            hit = self.by_shape.get(key)
            if hit is None:
                hit = self.by_shape[key] = self._shape(t, logit_tokens, num_seqs)
            fixed = FixedForward(self, t, num_seqs, sum_q_sq, width, overhead_s, extra_gemm_s, hit)
            self.fixed[args] = fixed
        return fixed

    def _shape(
        self, t: int, logit_tokens: int, num_seqs: int
    ) -> tuple[float, float, float, float, bool]:
        """The count-only terms and graph verdict, from the cost model's own caches."""
        batch = BatchShape(num_seqs, t, 0.0, 0.0, 0.0, logit_tokens)
        (gemm, elementwise, comm, lm_head), graphed = self.cost._shape_terms(
            self.terms, batch, self.layers
        )
        return gemm, elementwise, comm, lm_head, graphed


class FixedForward:
    """:meth:`PlainForward.parts` at one shape (tokens, logit rows, sequences, sum of q^2, a
    query width), its context sum left free (:meth:`PlainForward.at`): the operands that do
    not depend on it computed once, by the same operations, and the rest in ``parts``' order
    on the same operands, so each answer is ``parts``' float bit for bit
    (``tests/test_step_columns.py``)."""

    __slots__ = (
        "width",
        "half_pairs",
        "tokens",
        "q_bytes",
        "latency",
        "gemm",
        "elementwise",
        "comm",
        "lm_head",
        "graphed",
        "overhead_s",
        "host",
        "plain",
    )

    def __init__(
        self,
        plain: PlainForward,
        t: int,
        num_seqs: int,
        sum_q_sq: float,
        width: int,
        overhead_s: float | None,
        extra_gemm_s: float,
        hit: tuple[float, float, float, float, bool],
    ) -> None:
        gemm, self.elementwise, self.comm, self.lm_head, self.graphed = hit
        self.plain, self.width, self.tokens = plain, width, t
        self.latency = plain.decode_latency if one_token_each(sum_q_sq, t) else plain.latency
        self.half_pairs = (sum_q_sq + t) / 2.0
        self.q_bytes = plain.q_bytes_per_token * t
        self.gemm = gemm + extra_gemm_s  # parts' ``gemm += extra_gemm_s``
        self.overhead_s = overhead_s
        # HostModel's exposed host time before the GPU's is known
        self.host = plain.host_fixed_s + plain.host_per_seq_s * num_seqs

    def parts(self, sum_kv: float) -> Parts:
        """``PlainForward.parts(t, logits, seqs, sum_q_sq, width * sum_kv, sum_kv, ...)``."""
        p = self.plain
        attention = 0.0
        if p.layers > 0:
            pairs = self.width * sum_kv + self.half_pairs
            flops = p.flops_per_pair * pairs
            nbytes = p.kv_bytes_per_token * (sum_kv + self.tokens)
            nbytes += self.q_bytes
            a, b = flops / p.compute_rate, nbytes / p.memory_rate
            s = p.sharpness
            one = self.latency + (a + b) if s == 1.0 else self.latency + (a**s + b**s) ** (1.0 / s)
            attention = p.layers * one
        gemm, lm_head, elementwise, comm = self.gemm, self.lm_head, self.elementwise, self.comm
        gpu = gemm + attention + lm_head + elementwise + comm
        launch = 0.0 if self.graphed else max(0.0, p.launch_s - gpu)
        if self.overhead_s is None:
            exposed = max(0.0, self.host - (gpu + launch)) if p.overlapped else self.host
            overhead = exposed + launch
        else:
            overhead = self.overhead_s + launch
        return (gemm, attention, lm_head, elementwise, comm, overhead)

    def parts_many(self, sum_kv: np.ndarray) -> PartsArrays:
        """:meth:`parts` of a run of forwards whose context sums ``sum_kv`` differ, as arrays
        (:meth:`PlainForward.parts_many`, which checks the roofline's sharpness is 1): the same
        operations element by element (numpy's elementwise ``+ - * /`` and ``maximum`` are
        the scalar ones); a field that does not vary stays a float."""
        p = self.plain
        attention: np.ndarray | float = 0.0
        if p.layers > 0:
            pairs = self.width * sum_kv + self.half_pairs
            flops = p.flops_per_pair * pairs
            nbytes = p.kv_bytes_per_token * (sum_kv + self.tokens)
            nbytes = nbytes + self.q_bytes
            one = self.latency + (flops / p.compute_rate + nbytes / p.memory_rate)
            attention = p.layers * one
        gemm, lm_head, elementwise, comm = self.gemm, self.lm_head, self.elementwise, self.comm
        gpu = gemm + attention + lm_head + elementwise + comm
        launch = 0.0 if self.graphed else np.maximum(0.0, p.launch_s - gpu)
        if self.overhead_s is None:
            exposed = np.maximum(0.0, self.host - (gpu + launch)) if p.overlapped else self.host
            overhead = exposed + launch
        else:
            overhead = self.overhead_s + launch
        return (gemm, attention, lm_head, elementwise, comm, overhead)

    def time(self, sum_kv: float) -> tuple[float, float]:
        """The forward's seconds (its fields summed in ``StepCost``'s order) and, of them, the
        host overhead's."""
        g, a, lm, e, c, o = self.parts(sum_kv)
        return g + a + lm + e + c + o, o


def plain_model(cost: CostModel, model: ModelShape, terms: ModelTerms) -> bool:
    """Whether ``model``'s forwards on ``cost`` take only the paths :class:`PlainForward`
    repeats: full GQA attention in every layer, one attention rank, no kernel-time scale."""
    attn = terms.attention
    return (
        type(attn) is AttentionKernels  # not a subclass (sparse attention's indexer)
        and cost.layout.dp == 1
        and cost.host.gpu_scale == 1.0
        and terms.recurrent is None
        and attn.mla is None
        and attn.mla_fit is None
        and not attn.windowed
        and not model.linear_layers
    )
