"""Which proposer replays a lookup method, and the cached replay of a whole token trace.

A replay is a pure function of (token trace, proposer, settings, k), so it is computed once per
process and kept (:func:`replay_table`): a sweep's runs of one method share it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simspec.catalog.tables import file_cache
from simspec.catalog.token_traces import TokenTrace, load_token_trace
from simspec.catalog.traces import walk_tau
from simspec.config import MAX_K
from simspec.engine.lookup import packaged
from simspec.engine.lookup.ngram import replay_pld, replay_vllm_ngram
from simspec.engine.lookup.replay import ReplayTable, StreamReplay

# (trace, k, **settings): a proposer's settings are its replay's keyword arguments, by name
Replayer = Callable[..., list[StreamReplay]]

# The two shims below forward a LookupProposer's settings by name to a replay that checks them
# (the speculator that builds the proposer names them), hence ``Any``.


def _sglang(trace: TokenTrace, k: int, **settings: Any) -> list[StreamReplay]:
    """SGLang's trie with ``k`` draft nodes: ``speculative_num_draft_tokens`` = k + 1 (the
    root, the last sampled token, is one of them: ``Param::get_draft_token_num``)."""
    from simspec.engine.lookup.sglang_ngram import replay_sglang_ngram  # only when asked for

    return replay_sglang_ngram(trace, k + 1, **settings)


def _suffix(trace: TokenTrace, k: int, **settings: Any) -> list[StreamReplay]:
    from simspec.engine.lookup.suffix import SuffixSettings, replay_suffix  # only when asked for

    return replay_suffix(trace, k, SuffixSettings(**settings))


REPLAYERS: dict[str, Replayer] = {
    "vllm_ngram": replay_vllm_ngram,
    "pld": replay_pld,
    "sglang_ngram": _sglang,
    "suffix": _suffix,
}


@dataclass(frozen=True)
class LookupProposer:
    """A proposer and its settings (hashable: the replay cache's key). ``padded``: the engine
    pads every sequence's draft to the step's full width (SGLang's n-gram) instead of verifying
    only what it proposed."""

    kind: str
    params: tuple[tuple[str, int | float], ...] = ()
    padded: bool = False

    def replay(self, trace: TokenTrace, k: int) -> list[StreamReplay]:
        return REPLAYERS[self.kind](trace, k, **dict(self.params))


@file_cache(maxsize=32)
def replay_table(trace_ref: str, proposer: LookupProposer, k: int) -> ReplayTable:
    """The replay of every request of the token trace ``trace_ref`` at draft length ``k``: the
    stored one where the package holds it (:mod:`simspec.engine.lookup.packaged`)."""
    stored = packaged.load(trace_ref, (proposer.kind, proposer.params, proposer.padded), k)
    if stored is not None:
        return stored
    return ReplayTable.of(proposer.replay(load_token_trace(trace_ref), k))


def chain_tau(table: ReplayTable, start: int = 1) -> float:
    """Tokens per step of a chain walk over every request (a step at ``t`` yields
    ``accepted[t] + 1``), from output position ``start``: the statistic a simulation replaying
    the table must reproduce."""
    made_at = (
        table.accepted[off : off + n] + 1
        for off, n in zip(table.offsets.tolist(), table.lengths.tolist(), strict=True)
    )
    return walk_tau(made_at, MAX_K + 1, start)  # a replay accepts at most K <= MAX_K
