"""Drafting by lookup, with no draft model: n-gram / prompt lookup, suffix trees, Lookahead."""

from __future__ import annotations

from simspec.catalog.hardware import EngineProfile
from simspec.config import MethodConfig
from simspec.engine.costmodel import StepCost
from simspec.engine.speculators.base import DraftStep, Speculator


def lookup_cost(engine: EngineProfile, seqs: int) -> StepCost:
    """Host time of an n-gram lookup for ``seqs`` decoding sequences (no GPU work)."""
    return StepCost(overhead_s=engine["ngram_cpu_s_per_seq"] * seqs)


class NGram(Speculator):
    """Prompt lookup: match the last n-gram in the prompt and output so far, on the CPU.

    Every decoding sequence is charged a full chain of K in the verify pass (an upper bound:
    an engine sends fewer tokens when no n-gram matches; the traces do not record misses).
    """

    name = "ngram"

    def _draft(self, step: DraftStep) -> StepCost:
        return lookup_cost(self.engine, len(step.kv_tokens))


class PLD(NGram):
    """Prompt lookup decoding (Saxena), the n-gram lookup of the HF / Spec-Bench papers."""

    name = "pld"


class Suffix(NGram):
    """SuffixDecoding: a suffix tree over the prompt and earlier outputs proposes
    continuations on the CPU; costed like prompt lookup, with K the speculation cap."""

    name = "suffix"


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
