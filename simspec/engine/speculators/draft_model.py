"""A separate draft model (Leviathan et al.; Chen et al.)."""

from __future__ import annotations

from simspec.catalog.methods import own_tokenizer
from simspec.catalog.models import load_model
from simspec.config import MethodConfig
from simspec.engine.costmodel import BatchShape, StepCost
from simspec.engine.speculators.base import DraftStep, Speculator
from simspec.errors import InputError


class DraftModel(Speculator):
    """Leviathan/Chen: a separate small LM drafts K tokens in K sequential forwards, with its
    own weights and KV cache; it must share the target's tokenizer."""

    name = "draft_model"

    def _configure(self, cfg: MethodConfig) -> None:
        if not cfg.draft_model:
            raise InputError(
                "methods.draft_model", "draft_model needs a draft model preset or path"
            )
        self.draft = load_model(cfg.draft_model, "draft_model")
        ours, theirs = own_tokenizer(self.target.model_type), own_tokenizer(self.draft.model_type)
        if ours != theirs:  # the same count of tokens, other tokens (QA: vicuna-68m for Mixtral)
            raise InputError(
                "methods.draft_model",
                f"draft {self.draft.id!r} ({theirs or self.draft.model_type + ' tokenizer'}) and "
                f"target {self.target.id!r} ({ours or self.target.model_type + ' tokenizer'}) do "
                "not share a tokenizer, whatever their vocabulary sizes: the engines verify the "
                "draft's token ids as the target's (method_presets.yaml draft_model "
                "own_tokenizer)",
            )
        if self.draft.vocab_size != self.target.vocab_size:
            raise InputError(
                "methods.draft_model",
                f"draft {self.draft.id!r} has vocabulary "
                f"{self.draft.vocab_size}, target has {self.target.vocab_size}: "
                "draft and target must share a tokenizer",
            )

    def _draft(self, step: DraftStep) -> StepCost:
        """K forwards of the draft model. The first takes every token the last verify step
        yielded (a + 1 a sequence), whose KV the draft has not cached yet: SGLang's STANDALONE
        worker is its EAGLE worker (forward_draft_extend), and vLLM's draft-model proposer runs
        its first forward over the verified tokens, padded to the verify width
        (:meth:`Speculator.first_shape`), as :meth:`EagleHead._draft`; the other K - 1 take one
        token each, at their mean context (QA: all K were priced at one token, the first ~16 %
        low at batch 256)."""
        b, k, kv_sum = len(step.kv_tokens), step.k, step.kv_sum
        first = self.first_shape(step)  # padded to the verify width where the engine pads it
        over = self.draft_overhead_s
        total = self.cost.forward(self.draft, first, overhead_s=over)
        if k > 1:
            later = BatchShape.uniform(b, 1, kv_sum + b * k / 2.0, b)
            total = total.plus(self.cost.forward(self.draft, later, overhead_s=over), times=k - 1)
        return total

    def prompt_s(self, prompt: BatchShape, decoding: DraftStep | None = None) -> float:
        """The draft model prefills every prompt chunk the target does, into its own KV
        cache (as :meth:`EagleHead.prompt_s`: vLLM's draft-model proposer runs its first
        forward over the step's scheduled tokens, the ``decoding`` sequences' included; SGLang's
        STANDALONE worker is its EAGLE worker, with forward_draft_extend)."""
        over = self.draft_overhead_s

        def forward_s(batch: BatchShape, overhead_s: float | None) -> float:
            o = over if overhead_s is None else overhead_s
            return self.cost.forward(self.draft, batch, overhead_s=o).total_s

        return self._prompt_pass_s(forward_s, prompt, decoding)

    def extra_weight_bytes(self) -> float:
        if self.draft.weight_dtype == "bf16" and self.draft.expert_weight_dtype is None:
            return self._params_bytes(self.draft.num_params)
        # stored quantised: its weights at their own bytes (build.check_draft_model prices its
        # forwards so), sliced as a bf16 draft's are
        return self.draft.weight_bytes_per_gpu(self.cost.layout.dense_tp)

    def extra_kv_bytes_per_token(self) -> float:
        # each attention rank caches its own requests over its tp/dp GPUs, as the target
        return self.draft.kv_bytes_per_token_per_gpu(
            self.cost.layout.attn_tp, dtype_bytes=self.cost.kv_bytes
        )
