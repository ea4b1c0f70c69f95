"""Self-speculation: the target's own early layers draft (LayerSkip)."""

from __future__ import annotations

from simspec.config import MethodConfig
from simspec.engine.costmodel import StepCost
from simspec.engine.speculators.base import DraftStep, Speculator
from simspec.errors import InputError


class SelfSpec(Speculator):
    """LayerSkip-style self-speculation: the target's first ``draft_layers`` layers plus its LM
    head draft K tokens; no extra weights, and the draft's KV is the target's for those layers."""

    name = "self_spec"

    def _configure(self, cfg: MethodConfig) -> None:
        layers = self.target.num_hidden_layers
        # LayerSkip's Llama-2-7B example exits at layer 8 of 32 (its README's --exit_layer 8)
        self.layers = cfg.draft_layers or max(1, layers // 4)
        if self.layers >= layers:
            raise InputError(
                f"methods.{self.name}.draft_layers", f"must be < the target's {layers} layers"
            )

    def _draft(self, step: DraftStep) -> StepCost:
        return self._lm_steps(self.target, step, layers=self.layers)
