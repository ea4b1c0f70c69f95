"""Draft heads on the target's last hidden state: Medusa-1/2, Hydra and ReDrafter."""

from __future__ import annotations

from simspec.config import MethodConfig
from simspec.engine.acceptance.trees import Tree, TreeShape
from simspec.engine.costmodel import StepCost
from simspec.engine.speculators.base import DraftStep, Speculator


class Medusa(Speculator):
    """Medusa: K heads on the last hidden state, each a residual block (h x h) and its own LM
    head, computed after the target's pass in one shot; a static tree of their top-k
    candidates is verified with tree attention. Heads predict independently of one another,
    so deeper heads accept less (depth_decay)."""

    name = "medusa1"
    # Teacher-forced top-1 accuracy of Medusa-1 heads falls from ~0.58 (head 1) to ~0.13
    # (head 5) in the Medusa repo's assets/medusa_acc.csv (shared/validation/README.md, Medusa
    # (c)): a factor (0.13 / 0.58) ** (1/4) = 0.688 per head.
    depth_decay = 0.688

    def _draft(self, step: DraftStep) -> StepCost:
        b = len(step.kv_tokens)
        h, v = self.target.hidden_size, self.target.vocab_size // self.cost.tp
        per_head = self.cost.gemm_time(b, h, h) + self.cost.gemm_time(b, h, v)
        return StepCost(gemm_s=step.k * per_head)  # inside the target's graph: no launch overhead

    def extra_weight_bytes(self) -> float:
        h = self.target.hidden_size
        return self._params_bytes(self.k * (h * h + h * self.target.vocab_size))


class Medusa2(Medusa):
    """Medusa-2: Medusa heads trained jointly with the base (a higher acceptance)."""

    name = "medusa2"


class Hydra(Speculator):
    """Hydra: sequentially dependent heads, each conditioned on the draft token before it
    ([hidden; embedding] -> h, then an LM head), so drafting is D small sequential steps and
    deep positions keep their acceptance; static tree like Medusa's."""

    name = "hydra"

    def _draft(self, step: DraftStep) -> StepCost:
        b, h = len(step.kv_tokens), self.target.hidden_size
        tokens = [b * w for w in [1, *self.step_widths(step.k, step.nodes)]]
        return sequential_heads(self, tokens, 2 * h, h)

    def extra_weight_bytes(self) -> float:
        h = self.target.hidden_size
        return self._params_bytes(self.k * (2 * h * h + h * self.target.vocab_size))


class ReDrafter(Speculator):
    """ReDrafter: an RNN draft head on the target's last hidden state runs a beam search of
    ``beam_width`` beams for ``k`` steps; the beams are verified together. The deduplicated
    beams are modelled as the best tree of W x k tokens with W children per node (the
    verify width is then an upper bound: prefix sharing sends fewer tokens)."""

    name = "redrafter"

    def _configure(self, cfg: MethodConfig) -> None:
        # by default the beams its only published acceptance was measured with (the catalogue's
        # redrafter defaults and config_source)
        self.beams = cfg.beam_width or self.info.defaults["beam_width"]

    def _tree_shape(self, cfg: MethodConfig, explicit: Tree | None) -> TreeShape | None:
        shape = super()._tree_shape(cfg, explicit)
        return TreeShape(self.beams * self.k, self.beams, self.k) if self.k > 0 else shape

    def _draft(self, step: DraftStep) -> StepCost:
        b, h = len(step.kv_tokens), self.target.hidden_size
        # GRU-style cell on [hidden; embedding]: three gates of (2h -> h), then the LM head;
        # one sequence's state at the first step, its beams after
        tokens = [b if i == 0 else b * self.beams for i in range(step.k)]
        return sequential_heads(self, tokens, 2 * h, 3 * h)

    def extra_weight_bytes(self) -> float:
        h = self.target.hidden_size
        return self._params_bytes(6 * h * h + h * self.target.vocab_size)


def sequential_heads(spec: Speculator, tokens: list[int], d_in: int, d_out: int) -> StepCost:
    """Drafting by a small head run once per step (``tokens``: its tokens at each step): a
    (d_in -> d_out) layer and an LM head over the step's tokens, plus the engine's per-draft-step
    overhead (Hydra, ReDrafter)."""
    h, v = spec.target.hidden_size, spec.target.vocab_size // spec.cost.tp
    total = 0.0
    for m in tokens:
        if m:
            total += spec.cost.gemm_time(m, d_in, d_out) + spec.cost.gemm_time(m, h, v)
    return StepCost(gemm_s=total, overhead_s=len(tokens) * spec.draft_overhead_s)
