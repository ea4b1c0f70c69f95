"""The values at the cost model's seam: what one forward computes (:class:`BatchShape`) and what
it costs, per component (:class:`StepCost`).

Both are values: never mutate one. They are not ``frozen`` because the hot loop builds several
per iteration and a frozen dataclass's __init__ sets every field through ``object.__setattr__``,
which is much slower.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def one_token_each(sum_q_sq: float, tokens: float) -> bool:
    """Whether every sequence of a batch sends one query token (sum q^2 = sum q, which no
    other mix reaches, as each q >= 1), within float rounding: a data-parallel rank's share
    of a decode batch is scaled sums (QA: a rank's 7 of 51 decodes summed to
    7.000000000000001, not 7, and took the prefill kernel's latency)."""
    return sum_q_sq <= tokens * (1.0 + 1e-9)


@dataclass(slots=True)
class BatchShape:
    """What one forward pass computes, reduced to the sums a per-operator model needs.

    Build it from per-sequence arrays (new query tokens, tokens already in KV) with :meth:`of`,
    or from totals with :meth:`uniform` when every sequence sends the same number of tokens (the
    common decode/verify case, which then costs no per-sequence work on the hot loop).
    """

    num_seqs: int
    num_tokens: int  # sum of q_i
    sum_q_sq: float  # sum of q_i^2 (causal attention among the new tokens)
    sum_q_kv: float  # sum of q_i * kv_i (new tokens attending to cached ones)
    sum_kv: float  # cached tokens read
    logit_tokens: int  # rows that need LM-head logits (all verify positions, last prefill token)
    # the part of the sums that is prompt chunks (``of(..., prefill=True)``), which MLA runs
    # on another kernel path than decodes and verifies (AttentionKernels.time)
    pre_seqs: int = 0
    pre_tokens: int = 0
    pre_q_sq: float = 0.0
    pre_q_kv: float = 0.0
    pre_kv: float = 0.0

    @classmethod
    def of(
        cls,
        q_tokens: np.ndarray,
        kv_tokens: np.ndarray,
        logit_tokens: int,
        kv_sum: float | None = None,
        prefill: bool = False,
    ) -> BatchShape:
        """``kv_sum``: ``kv_tokens.sum()`` when the caller has it (the hot loop does).
        ``prefill``: the sequences are prompt chunks (their sums are also the pre_* ones)."""
        q, kv = _counts(q_tokens), _counts(kv_tokens)
        if q.shape != kv.shape or q.ndim != 1:
            raise ValueError("q_tokens and kv_tokens must be 1-D arrays of equal length")
        if len(q) == 1 and q.dtype is _INT64 and kv.dtype is _INT64:
            # one sequence (a closed loop's new prompt): its counts as Python ints, the same
            # exact products and floats as the int64 sums, without numpy's per-call cost
            q0, kv0 = int(q[0]), int(kv[0])
            sum_kv = float(kv0) if kv_sum is None else kv_sum
            shape = cls(1, q0, float(q0 * q0), float(q0 * kv0), sum_kv, int(logit_tokens))
        else:
            sum_kv = float(kv.sum()) if kv_sum is None else kv_sum
            shape = cls(
                len(q), int(q.sum()), float(q.dot(q)), float(q.dot(kv)), sum_kv, int(logit_tokens)
            )
        if prefill:
            shape.pre_seqs, shape.pre_tokens = shape.num_seqs, shape.num_tokens
            shape.pre_q_sq, shape.pre_q_kv, shape.pre_kv = shape.sum_q_sq, shape.sum_q_kv, sum_kv
        return shape

    @classmethod
    def uniform(cls, num_seqs: int, q_per_seq: int, kv_sum: float, logit_tokens: int) -> BatchShape:
        q = q_per_seq
        return cls(
            num_seqs, num_seqs * q, float(num_seqs * q * q), q * kv_sum, kv_sum, int(logit_tokens)
        )

    def with_logits(self, logit_tokens: int) -> BatchShape:
        """The same forward with ``logit_tokens`` rows of logits (the sums unchanged)."""
        return BatchShape(
            self.num_seqs, self.num_tokens, self.sum_q_sq, self.sum_q_kv, self.sum_kv,
            logit_tokens, self.pre_seqs, self.pre_tokens, self.pre_q_sq, self.pre_q_kv,
            self.pre_kv,
        )  # fmt: skip

    def __add__(self, other: BatchShape) -> BatchShape:
        """Both batches in one forward. The sums are of token counts, so integers: a float64
        sum of them is exact (below 2**53), equal to summing the concatenated arrays."""
        return BatchShape(
            self.num_seqs + other.num_seqs,
            self.num_tokens + other.num_tokens,
            self.sum_q_sq + other.sum_q_sq,
            self.sum_q_kv + other.sum_q_kv,
            self.sum_kv + other.sum_kv,
            self.logit_tokens + other.logit_tokens,
            self.pre_seqs + other.pre_seqs,
            self.pre_tokens + other.pre_tokens,
            self.pre_q_sq + other.pre_q_sq,
            self.pre_q_kv + other.pre_q_kv,
            self.pre_kv + other.pre_kv,
        )

    def expanded(self) -> BatchShape:
        """This verify as vLLM V0's batch-expansion scorer runs it (BatchExpansionTop1Scorer,
        vllm/spec_decode/batch_expansion.py): each query token a single-token sequence of its
        own, the j-th of a sequence reading that sequence's context plus j tokens, so a
        sequence's context is read once per token it verifies. From the sums alone: a
        sequence of q tokens and context c becomes q rows reading c + 0..q-1 tokens, so the
        rows read ``sum_q_kv + (sum_q_sq - num_tokens) / 2`` tokens in all. The prompt chunks'
        part stays as it is (they are not expanded)."""
        rest, pre = self.split_prefill()
        reads = rest.sum_q_kv + (rest.sum_q_sq - rest.num_tokens) / 2.0
        t = rest.num_tokens
        flat = BatchShape(t, t, float(t), reads, reads, rest.logit_tokens)
        return flat if not self.pre_seqs else flat + as_prefill(pre)

    def split_prefill(self) -> tuple[BatchShape, BatchShape]:
        """(the decodes and verifies, the prompt chunks) as two shapes."""
        pre = BatchShape(
            self.pre_seqs, self.pre_tokens, self.pre_q_sq, self.pre_q_kv, self.pre_kv, 0
        )
        rest = BatchShape(
            self.num_seqs - self.pre_seqs,
            self.num_tokens - self.pre_tokens,
            self.sum_q_sq - self.pre_q_sq,
            self.sum_q_kv - self.pre_q_kv,
            self.sum_kv - self.pre_kv,
            self.logit_tokens,
        )
        return rest, pre


def as_prefill(shape: BatchShape) -> BatchShape:
    """``shape`` (prompt chunks, no logits) marked as prompt chunks again."""
    return BatchShape(
        shape.num_seqs, shape.num_tokens, shape.sum_q_sq, shape.sum_q_kv, shape.sum_kv, 0,
        shape.num_seqs, shape.num_tokens, shape.sum_q_sq, shape.sum_q_kv, shape.sum_kv,
    )  # fmt: skip


_INT64 = np.dtype(np.int64)


def _counts(x: np.ndarray) -> np.ndarray:
    """Token counts as int64 (exact sums, and the same floats as float64 sums below 2**53);
    anything else as float64."""
    if type(x) is np.ndarray and x.dtype is _INT64:  # the hot loop's arrays, as they are
        return x
    x = np.asarray(x)
    return x.astype(np.int64, copy=False) if x.dtype.kind in "iub" else x.astype(np.float64)


@dataclass(slots=True)
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

    def plus(self, other: StepCost, times: float = 1) -> StepCost:
        """``self + times * other`` in one object (the draft cost adds K - 1 equal steps to its
        first one every iteration)."""
        return StepCost(
            self.gemm_s + other.gemm_s * times,
            self.attention_s + other.attention_s * times,
            self.lm_head_s + other.lm_head_s * times,
            self.elementwise_s + other.elementwise_s * times,
            self.communication_s + other.communication_s * times,
            self.overhead_s + other.overhead_s * times,
        )

    def scaled(self, factor: float) -> StepCost:
        return StepCost().plus(self, times=factor)
