"""Parallel drafting: one draft forward proposes all K tokens (vLLM's ``parallel_drafting``).

vLLM runs it for a separate draft model (``method: draft_model``, AMD's PARD drafts) and for an
EAGLE-3 head (``method: eagle3``, AWS's P-EAGLE heads) with one flag. The drafter's input is
each request's tokens from the last verify step, the token the target just sampled, and K-1
placeholder slots (the draft config's ``pard_token`` / ``mask_token_id``; an EAGLE head also
gets a learned ``mask_hidden`` state in them); one forward samples a draft token at each of the
K positions and returns (vllm/v1/spec_decode/llm_base_proposer.py @ 00c4f22:
``extra_slots_per_request = num_speculative_tokens`` with parallel drafting, and ``propose``
returns after the first forward ``if self.num_speculative_tokens == 1 or
self.parallel_drafting``). The drafter therefore runs once per step whatever K, over K-1 more
tokens per sequence than a sequential drafter's first step: its cost grows with K only through
those tokens, while a sequential drafter's grows by a forward per token.

As for the sequential EAGLE heads here, the forward takes each sequence's accepted tokens
(last_step_tokens), or, where the engine pads its drafter batch (vLLM V1's default,
``Speculator.padded_first``), the whole verify width, the rejected draft positions included
(computed, not written to the KV cache).
"""

from __future__ import annotations

import numpy as np

from simspec.config import MethodConfig
from simspec.engine.costmodel import BatchShape, StepCost
from simspec.engine.speculators.base import DraftStep
from simspec.engine.speculators.draft_model import DraftModel
from simspec.engine.speculators.eagle import Eagle3

# P-EAGLE heads as AWS publishes them: "a 4-layer P-EAGLE for GPT-OSS 20B as the target model,
# with number of parallel-token prediction as 10" (huggingface.co/amazon/gpt-oss-20b-p-eagle
# model card; the GPT-OSS-120B long-context head: 4 layers, 8 positions). The packaged
# acceptance is the GPT-OSS-20B head's (method_presets.yaml, p_eagle).
P_EAGLE_LAYERS = 4


def parallel_batch(step: DraftStep, logits_per_seq: int, padded: int = 0) -> BatchShape:
    """One drafter forward over each sequence's tokens from the last verify step (``padded``
    a sequence where the engine pads them to the verify width) plus its K-1 placeholder slots,
    sampling ``logits_per_seq`` positions per sequence."""
    b, k = len(step.kv_tokens), step.k
    fed = np.full(b, padded) if padded else np.asarray(step.last_step_tokens)
    q = fed + (k - 1)
    kv = np.asarray(step.kv_tokens) + (k - 1)
    return BatchShape.of(q, kv, b * logits_per_seq, kv_sum=step.kv_sum + b * (k - 1))


class PARD(DraftModel):
    """PARD (AMD, arXiv 2504.18583): a small draft LM adapted to predict K tokens from K-1 mask
    tokens in one forward; target-independent, so one draft serves a tokenizer family. vLLM:
    ``{"method": "draft_model", "parallel_drafting": true}`` with a PARD checkpoint.

    Not in the registry yet: every method ships a sourced acceptance (tests/test_methods.py), and
    no published PARD τ per K is packaged (method_presets.yaml, pard.no_acceptance). Registering
    it is adding this class to ``SPECULATORS`` once ``pard.presets`` has a sourced row."""

    name = "pard"

    def _draft(self, step: DraftStep) -> StepCost:
        batch = parallel_batch(step, step.k, self.padded_first(step.k, step.nodes))
        return self.cost.forward(self.draft, batch, overhead_s=self.draft_overhead_s)


class PEagle(Eagle3):
    """P-EAGLE (AWS, arXiv 2602.01469): an EAGLE-3 head (target features fused by an fc, own
    draft vocabulary) of ``draft_layers`` decoder layers that predicts all K tokens in one
    forward, its later positions fed a learned mask embedding and hidden state. vLLM:
    ``{"method": "eagle3", "parallel_drafting": true}`` with a P-EAGLE checkpoint."""

    name = "p_eagle"

    def _configure(self, cfg: MethodConfig) -> None:
        super()._configure(cfg)
        self.layers = cfg.draft_layers or P_EAGLE_LAYERS
        self.head = self.head.model_copy(update={"num_hidden_layers": self.layers})

    def _draft(self, step: DraftStep) -> StepCost:
        return self._step(parallel_batch(step, step.k, self.padded_first(step.k, step.nodes)))

    def extra_weight_bytes(self) -> float:
        h = self.target.hidden_size
        params = self.layers * self.head.layer_params + self.fused_features * h * h
        params += self._wide_qkv_params()  # its first layer's
        if self.head.vocab_size != self.target.vocab_size:
            params += self.head.vocab_size * h
        return self._params_bytes(params)

    def extra_kv_bytes_per_token(self) -> float:
        # each attention rank caches its own requests over its tp/dp GPUs, as the target
        return self.head.kv_bytes_per_token_per_gpu(
            self.cost.layout.attn_tp, layers=self.layers, dtype_bytes=self.cost.kv_bytes
        )
