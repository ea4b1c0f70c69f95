"""Per-request state as columns (numpy arrays), so an iteration updates the batch at once."""

from __future__ import annotations

import numpy as np

from simspec.engine.workload import RequestSpecs

_FOLD_EVERY = 1024  # buffered speculative steps; a few MiB at most


class RequestTable:
    """Counters of every request, indexed by request id (arrival order).

    ``computed`` counts tokens whose KV is in the cache. ``decoding`` is set when a request's
    prompt (or, after a preemption, its recomputation) has been prefilled, and cleared by a
    preemption: ``num_tokens - computed == 1`` alone cannot tell a decode from a prefill whose
    last chunk is one token.

    ``spec_steps`` and ``accepted`` are reported, never read by the engine, so
    :meth:`add_spec_step` buffers each step and folds a thousand of them in with one scatter-add
    (two scatter-adds per iteration would weigh on the hot loop). Reading either column folds
    first, so it is always exact.
    """

    def __init__(self, specs: RequestSpecs) -> None:
        n = len(specs)
        self.prompt_len = specs.prompt_len.astype(np.int64)
        self.output_len = specs.output_len.astype(np.int64)
        self.trace_index = specs.trace_index
        self.arrival = np.full(n, np.nan)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.generated = np.zeros(n, dtype=np.int64)
        # tokens a request had produced before the run started (a closed loop's stationary
        # start: see workload.stationary_cohort); no iteration of the run emitted them
        self.before_start = np.zeros(n, dtype=np.int64)
        self.computed = np.zeros(n, dtype=np.int64)
        self.decoding = np.zeros(n, dtype=bool)
        self.blocks = np.zeros(n, dtype=np.int64)
        self._spec_steps = np.zeros(n, dtype=np.int64)
        self._accepted = np.zeros(n, dtype=np.int64)  # draft tokens kept, over all steps
        self._steps: list[tuple[np.ndarray, np.ndarray]] = []  # (ids, emitted) not yet folded
        # tokens the last verify step yielded (accepted drafts + 1), for EAGLE's next draft
        self.last_step_tokens = np.ones(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.unfinishable = np.zeros(n, dtype=bool)
        self._ones = np.ones(max(n, 1), dtype=np.int64)  # read only: see total()

    def __len__(self) -> int:
        return len(self.prompt_len)

    def num_tokens(self, rids: np.ndarray | int) -> np.ndarray | int:
        return self.prompt_len[rids] + self.generated[rids]

    def total(self, counts: np.ndarray) -> int:
        """The sum of ``counts``, int64 values of at most one per request (tokens or blocks of
        a batch): a dot with ones, the same integer at about half the cost of numpy's sum on
        an array this short, which the hot loop takes a few times per iteration."""
        return int(counts.dot(self._ones[: len(counts)]))

    def add_spec_step(self, rids: np.ndarray, emitted: np.ndarray) -> None:
        """One speculative step of ``rids`` emitted ``emitted`` tokens each (arrays not mutated
        afterwards: they are kept until folded)."""
        self._steps.append((rids, emitted))
        if len(self._steps) >= _FOLD_EVERY:
            self._fold_steps()

    def add_spec_steps(
        self, rids: int | np.ndarray, steps: int, accepted: int | np.ndarray
    ) -> None:
        """``steps`` speculative steps of each of ``rids`` (distinct ids), which kept
        ``accepted`` drafts in all (what :meth:`add_spec_step` would fold in for them step
        by step: integer sums)."""
        self._spec_steps[rids] += steps
        self._accepted[rids] += accepted

    @property
    def spec_steps(self) -> np.ndarray:
        self._fold_steps()
        return self._spec_steps

    @property
    def accepted(self) -> np.ndarray:
        self._fold_steps()
        return self._accepted

    def _fold_steps(self) -> None:
        if self._steps:
            rids = np.concatenate([r for r, _ in self._steps])
            emitted = np.concatenate([e for _, e in self._steps])
            self._steps.clear()
            np.add.at(self._spec_steps, rids, 1)
            np.add.at(self._accepted, rids, emitted - 1)
