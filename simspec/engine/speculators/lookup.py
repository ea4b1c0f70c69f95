"""Drafting by lookup, with no draft model: n-gram / prompt lookup, suffix trees, Lookahead."""

from __future__ import annotations

import numpy as np

from simspec.catalog.hardware import EngineProfile, load_engine
from simspec.catalog.vllm import lookup_sizes
from simspec.config import MethodConfig
from simspec.engine.acceptance.samplers import DraftPlan
from simspec.engine.costmodel import StepCost
from simspec.engine.lookup.proposers import LookupProposer
from simspec.engine.speculators.base import DraftStep, Speculator

# Spec-Bench evaluation/inference_pld.py: draft_matching_window_size=3, n from 3 down to 1
PLD_MAX_NGRAM = 3


def matched_sizes(cfg: MethodConfig, engine: str) -> tuple[int, int] | None:
    """The n-gram sizes (shortest, longest) the lookup of ``cfg`` matches on ``engine``: vLLM's
    n-gram its prompt_lookup_min/max (vLLM's default 5/5 where unset), PLD 1 to 3; None where
    no n-gram sizes apply (SGLang's n-gram walks a trie, suffix decoding suffix trees)."""
    profile = load_engine(engine)
    if cfg.name == "ngram" and profile.engine_kernels != "sglang":
        return lookup_sizes(
            cfg.prompt_lookup_min, cfg.prompt_lookup_max, cfg.name, profile.ngram_size_defaults
        )
    if cfg.name == "pld":
        return 1, PLD_MAX_NGRAM
    return None


def lookup_cost(engine: EngineProfile, seqs: int) -> StepCost:
    """Host time of an n-gram lookup for ``seqs`` decoding sequences (no GPU work)."""
    return StepCost(overhead_s=engine["ngram_cpu_s_per_seq"] * seqs)


class LookupSpeculator(Speculator):
    """A drafter that looks its drafts up in tokens already seen, on the CPU. With a token
    trace (``acceptance.tokens``) its proposer is replayed exactly
    (:attr:`proposer`, :mod:`simspec.engine.lookup`): a sequence whose lookup finds nothing
    verifies one token. With an ``acc_len`` trace or a τ, every decoding sequence is charged a
    full chain of K (an upper bound: those sources do not record the misses)."""

    @property
    def proposer(self) -> LookupProposer:
        raise NotImplementedError

    def draft_plan(self, alpha: np.ndarray | None, sampled: bool) -> DraftPlan:
        plan = super().draft_plan(alpha, sampled)
        acc = self.cfg.acceptance
        if acc is None or acc.tokens is None:
            return plan
        return DraftPlan(plan.depth, plan.decay, plan.tree, plan.alpha, sampled, self.proposer)

    def _draft(self, step: DraftStep) -> StepCost:
        # the lookup runs for every decoding sequence, whether or not it finds a match
        return lookup_cost(self.engine, len(step.kv_tokens))

    def lookup_s(self, seqs: int, k: int) -> float | None:
        """:meth:`draft_s` of any step of ``seqs`` decoding sequences drafting ``k``: the
        lookup's host time, which depends on nothing else; None for a family with a draft
        cost of its own."""
        if type(self)._draft is not LookupSpeculator._draft:
            return None
        return 0.0 if seqs == 0 or k == 0 else float(self.engine["ngram_cpu_s_per_seq"] * seqs)

    def draft_s(self, step: DraftStep) -> float:
        """:meth:`draft_cost`'s ``total_s`` with no ``StepCost`` built: the lookup's host time
        (the other fields are zeros, so their sum is this float)."""
        own = self.lookup_s(len(step.kv_tokens), step.k)
        return super().draft_s(step) if own is None else own


class NGram(LookupSpeculator):
    """n-gram lookup as the engine runs it. vLLM V1 (and engines without their own): the
    longest suffix of ``prompt_lookup_min..max`` tokens found earlier in prompt + output, its
    earliest occurrence, at most K following tokens, a sequence verifying only what it proposed
    (:func:`simspec.engine.lookup.ngram.replay_vllm_ngram`). SGLang: a trie shared by all
    requests, a BFS draft tree of K nodes, every sequence verifying K + 1 tokens, padded
    whether or not anything matched (:mod:`simspec.engine.lookup.sglang_ngram`)."""

    name = "ngram"

    def _configure(self, cfg: MethodConfig) -> None:
        low, high = lookup_sizes(
            cfg.prompt_lookup_min, cfg.prompt_lookup_max, self.name, self.engine.ngram_size_defaults
        )
        self.lookup_min, self.lookup_max = low, high

    @property
    def proposer(self) -> LookupProposer:
        if self.engine.engine_kernels == "sglang":
            # SGLang's defaults (max_trie_depth 18, BFS breadth 1..10) are replay_sglang_ngram's
            return LookupProposer("sglang_ngram", padded=True)
        return LookupProposer(
            "vllm_ngram",
            (("prompt_lookup_min", self.lookup_min), ("prompt_lookup_max", self.lookup_max)),
        )


class PLD(LookupSpeculator):
    """Prompt lookup decoding (Saxena), the n-gram lookup of the HF / Spec-Bench papers: n from
    3 down to 1, only a match with K tokens after it proposes, exactly K
    (:func:`simspec.engine.lookup.ngram.replay_pld`)."""

    name = "pld"

    @property
    def proposer(self) -> LookupProposer:
        return LookupProposer("pld", (("max_ngram_size", PLD_MAX_NGRAM),))


class Suffix(LookupSpeculator):
    """SuffixDecoding as vLLM runs it (Arctic Inference's suffix trees): a tree over the
    request's prompt and output and a global one over earlier requests' outputs; the draft
    follows the most frequent continuation of the best-scoring match, up to
    ``max_spec_factor`` tokens per matched token and K in all; a sequence verifies only what it
    proposed (:mod:`simspec.engine.lookup.suffix`)."""

    name = "suffix"

    @property
    def proposer(self) -> LookupProposer:
        cfg = self.cfg
        given = {
            "max_tree_depth": cfg.suffix_decoding_max_tree_depth,
            "max_cached_requests": cfg.suffix_decoding_max_cached_requests,
            "max_spec_factor": cfg.suffix_decoding_max_spec_factor,
            "min_token_prob": cfg.suffix_decoding_min_token_prob,
        }
        return LookupProposer("suffix", tuple((k, v) for k, v in given.items() if v is not None))


class Lookahead(Speculator):
    """Lookahead decoding: no draft model. Every target step also runs a Jacobi lookahead
    branch (window W over N-1 future positions) and verifies G n-gram candidates of N-1 tokens
    from its pool, so the verify pass widens to 1 + (W + G)(N - 1) tokens per sequence; one
    step accepts at most N - 1 drafts."""

    name = "lookahead"

    def _configure(self, cfg: MethodConfig) -> None:
        # by default Spec-Bench's runs, the source of its presets (the catalogue's lookahead
        # defaults and config_source)
        defaults = self.info.defaults
        self.window = cfg.lookahead_window or defaults["lookahead_window"]
        self.ngram = cfg.lookahead_ngram or defaults["lookahead_ngram"]
        guesses = cfg.lookahead_guesses
        self.guesses = defaults["lookahead_guesses"] if guesses is None else guesses
        self.k = self.ngram - 1

    def verify_tokens_for(self, k: int, nodes: int | None = None) -> int:
        return 1 if k == 0 else 1 + (self.window + self.guesses) * (self.ngram - 1)

    def _draft(self, step: DraftStep) -> StepCost:
        # n-gram pool bookkeeping on the CPU, like prompt lookup's
        return lookup_cost(self.engine, len(step.kv_tokens))
