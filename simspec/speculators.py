"""Speculative-decoding methods: one interface, one registry.

A speculator says, for the decoding sequences of one iteration, how long drafting takes (through
the cost model, from the draft's own shapes), how many query tokens each sequence sends to the
verify pass, and how much extra GPU memory it needs. Acceptance is sampled separately
(:mod:`simspec.acceptance`).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from simspec.acceptance import AcceptanceConfig
from simspec.costmodel import BatchShape, CostModel, StepCost
from simspec.errors import InputError
from simspec.presets import BYTES_PER_PARAM, EngineProfile, ModelShape, load_model


class MethodConfig(BaseModel):
    """One method to simulate, as a user writes it in a scenario file."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(description="registry name, e.g. eagle")
    k: int = Field(default=3, ge=0, le=64, description="draft tokens per step (chain length)")
    draft_model: str | None = Field(default=None, description="draft preset or config.json path")
    draft_vocab_size: int | None = Field(
        default=None, gt=0, description="EAGLE head vocabulary (EAGLE-3 drafts over a reduced one)"
    )
    acceptance: AcceptanceConfig | None = None

    @property
    def label(self) -> str:
        return self.name


class Speculator:
    """Base: plain autoregressive decoding (no draft, one query token per sequence)."""

    name: ClassVar[str] = "autoregressive"
    needs_acceptance: ClassVar[bool] = False

    def __init__(
        self, cfg: MethodConfig, target: ModelShape, cost: CostModel, engine: EngineProfile
    ) -> None:
        self.cfg, self.target, self.cost, self.engine = cfg, target, cost, engine
        self.k = 0 if not self.needs_acceptance else cfg.k
        self._draft_overhead = engine["draft_step_overhead_s"]

    @property
    def verify_tokens(self) -> int:
        """Query tokens each decoding sequence sends to the target's verify pass."""
        return self.k + 1

    def draft_cost(
        self, kv_tokens: np.ndarray, last_step_tokens: np.ndarray, kv_sum: float
    ) -> StepCost:
        """Time to draft for the decoding sequences.

        ``kv_tokens``: their context lengths (``kv_sum`` is their sum, which the caller has);
        ``last_step_tokens``: what each one's last verify step yielded (accepted drafts + 1).
        """
        return StepCost()

    def extra_weight_bytes(self) -> float:
        """Draft weights per GPU."""
        return 0.0

    def extra_kv_bytes_per_token(self) -> float:
        """Draft KV cache per token per GPU."""
        return 0.0


class Autoregressive(Speculator):
    name = "autoregressive"


class DraftModel(Speculator):
    """Leviathan/Chen: a separate small LM drafts K tokens in K sequential forwards."""

    name = "draft_model"
    needs_acceptance = True

    def __init__(
        self, cfg: MethodConfig, target: ModelShape, cost: CostModel, engine: EngineProfile
    ) -> None:
        super().__init__(cfg, target, cost, engine)
        if not cfg.draft_model:
            raise InputError(
                "methods.draft_model", "draft_model needs a draft model preset or path"
            )
        self.draft = load_model(cfg.draft_model)
        if self.draft.vocab_size != target.vocab_size:
            raise InputError(
                "methods.draft_model",
                f"draft {self.draft.id!r} has vocabulary "
                f"{self.draft.vocab_size}, target has {target.vocab_size}: "
                "draft and target must share a tokenizer",
            )

    def draft_cost(
        self, kv_tokens: np.ndarray, last_step_tokens: np.ndarray, kv_sum: float
    ) -> StepCost:
        b = len(kv_tokens)
        if b == 0 or self.k == 0:
            return StepCost()
        # K steps of one token each; context grows by one per step, so cost the mean context
        kv_mean_sum = kv_sum + b * (self.k - 1) / 2.0
        step = self.cost.forward(
            self.draft,
            BatchShape.uniform(b, 1, kv_mean_sum, b),
            overhead_s=self._draft_overhead,
        )
        return step.scaled(self.k)

    def extra_weight_bytes(self) -> float:
        return self.draft.num_params * BYTES_PER_PARAM / self.cost.tp

    def extra_kv_bytes_per_token(self) -> float:
        return self.draft.kv_bytes_per_token_per_gpu(self.cost.tp)


class Eagle(Speculator):
    """EAGLE chain: one decoder layer on (feature, token) plus an LM head, run K times.

    The first draft step consumes the features of every token the last verify accepted (a+1
    query tokens per sequence); later steps feed one token each. The head reuses the target's
    LM head unless ``draft_vocab_size`` gives it its own smaller one (EAGLE-3).
    """

    name = "eagle"
    needs_acceptance = True

    def __init__(
        self, cfg: MethodConfig, target: ModelShape, cost: CostModel, engine: EngineProfile
    ) -> None:
        super().__init__(cfg, target, cost, engine)
        vocab = cfg.draft_vocab_size or target.vocab_size
        self.head = target.model_copy(
            update={"num_hidden_layers": 1, "vocab_size": vocab, "id": f"{target.id}-eagle-head"}
        )
        self._fc_by_tokens: dict[int, float] = {}  # the hot loop repeats a few counts

    def draft_cost(
        self, kv_tokens: np.ndarray, last_step_tokens: np.ndarray, kv_sum: float
    ) -> StepCost:
        b = len(kv_tokens)
        if b == 0 or self.k == 0:
            return StepCost()
        # step 1 feeds the features of every token the last verify step yielded (a + 1 each)
        first = self._step(BatchShape.of(last_step_tokens, kv_tokens, b, kv_sum=kv_sum))
        if self.k == 1:
            return first
        # steps 2..K feed one token each; the context grows by one per step (costed at its mean)
        later = self._step(BatchShape.uniform(b, 1, kv_sum + b * self.k / 2.0, b))
        return first.plus(later, times=self.k - 1)

    def _step(self, batch: BatchShape) -> StepCost:
        """One pass of the head, with the fc over [feature; embedding] that feeds it."""
        tokens = batch.num_tokens
        fc = self._fc_by_tokens.get(tokens)
        if fc is None:
            h = self.target.hidden_size
            fc = self._fc_by_tokens[tokens] = self.cost.gemm_time(tokens, 2 * h, h)
        return self.cost.forward(self.head, batch, overhead_s=self._draft_overhead, extra_gemm_s=fc)

    def extra_weight_bytes(self) -> float:
        h = self.target.hidden_size
        params = self.head.layer_params + 2 * h * h
        if self.head.vocab_size != self.target.vocab_size:
            params += self.head.vocab_size * h
        return params * BYTES_PER_PARAM / self.cost.tp

    def extra_kv_bytes_per_token(self) -> float:
        return self.head.kv_bytes_per_token_per_gpu(self.cost.tp, layers=1)


class NGram(Speculator):
    """Prompt lookup: match the last n-gram in the prompt and output so far, on the CPU.

    Every decoding sequence is charged a full chain of K in the verify pass (an upper bound:
    an engine sends fewer tokens when no n-gram matches; the traces do not record misses).
    """

    name = "ngram"
    needs_acceptance = True

    def draft_cost(
        self, kv_tokens: np.ndarray, last_step_tokens: np.ndarray, kv_sum: float
    ) -> StepCost:
        return StepCost(overhead_s=self.engine["ngram_cpu_s_per_seq"] * len(kv_tokens))


SPECULATORS: dict[str, type[Speculator]] = {
    cls.name: cls for cls in (Autoregressive, DraftModel, Eagle, NGram)
}


def build_speculator(
    cfg: MethodConfig, target: ModelShape, cost: CostModel, engine: EngineProfile
) -> Speculator:
    if cfg.name not in SPECULATORS:
        raise InputError(
            "methods.name", f"unknown method {cfg.name!r}; choose one of {', '.join(SPECULATORS)}"
        )
    spec = SPECULATORS[cfg.name](cfg, target, cost, engine)
    if spec.needs_acceptance and cfg.acceptance is None:
        raise InputError(
            f"methods.{cfg.name}.acceptance", "needs an acceptance model (alpha, tau or trace)"
        )
    return spec
