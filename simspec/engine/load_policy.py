"""The load policy: which draft length and tree budget a step uses at the batch size it runs at.

Speculation pays off less as the batch grows (the verify pass turns compute-bound), so engines
shorten or switch off the draft under load: vLLM's Dynamic SD schedule of K by batch size, its
``speculative_disable_by_batch_size``, and a tree's node budget by batch size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from simspec.config import MethodConfig

Schedule = tuple[tuple[int, int, int], ...]  # (first batch size, last batch size, value)


class StepShape(NamedTuple):
    """One iteration's draft: its length (a tree's depth), its tree budget (None: a chain) and
    the query tokens each decoding sequence sends to the verify pass."""

    k: int
    nodes: int | None
    width: int


@dataclass(frozen=True)
class LoadPolicy:
    """A method's draft length ``k`` and tree budget ``nodes`` (None: a chain), and the
    schedules that change them with the batch size."""

    k: int
    nodes: int | None = None
    k_schedule: Schedule = ()
    tree_schedule: Schedule = ()
    disable_at: int | None = None  # speculation off from this many running requests

    @classmethod
    def of(cls, cfg: MethodConfig, k: int, nodes: int | None) -> LoadPolicy:
        return cls(
            k,
            nodes,
            tuple(cfg.k_schedule or ()),
            tuple(cfg.tree_schedule or ()),
            cfg.disable_by_batch_size,
        )

    @property
    def varies(self) -> bool:
        """Whether the draft changes with the batch size (a schedule, or speculation off past
        a batch size)."""
        return bool(self.k_schedule or self.tree_schedule or self.disable_at)

    @property
    def budgets(self) -> list[int]:
        """Tree node budgets a run may use: the method's own, and those of its tree schedule."""
        if self.nodes is None:
            return []
        return sorted({self.nodes, *(n for _, _, n in self.tree_schedule if n > 0)})

    def shape_for(self, batch_size: int) -> tuple[int, int | None]:
        """(draft length, tree budget) at ``batch_size``; (0, None) turns speculation off. A
        tree's depth stays; a K schedule only turns it on or off."""
        if self.k == 0 or (self.disable_at and batch_size >= self.disable_at):
            return 0, None
        k = self.k
        # vLLM's dense lookup (build_dynamic_sd_schedule_lookup, vllm/v1/spec_decode/dynamic/
        # utils.py): bands start at 1 (config.check_schedule), a batch size between two bands
        # or past the last takes the K of the band before it, each K at most
        # num_speculative_tokens (a larger one is refused: Speculator)
        band = max((b for b in self.k_schedule if b[0] <= batch_size), default=None)
        if band is not None:
            scheduled = min(band[2], self.k)
            k = scheduled if self.nodes is None else (self.k if scheduled else 0)
        if self.nodes is None or k == 0:
            return k, None
        nodes = self.nodes
        for start, end, scheduled in self.tree_schedule:
            if start <= batch_size <= end:
                nodes = scheduled
        return (k, nodes) if nodes else (0, None)
