"""The stored replays of the packaged token traces (simspec/engine/lookup/packaged.py) are the
replays the code computes, bit for bit, and are used only for exactly what they store."""

from __future__ import annotations

import pytest

from simspec.catalog.token_traces import load_token_trace, packaged_token_traces
from simspec.engine.lookup import packaged
from simspec.engine.lookup.proposers import REPLAYERS, LookupProposer, ReplayTable, replay_table

STORED = [(t, p, k) for t in packaged_token_traces() for p, k in packaged.STORED]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("trace", "proposer", "k"), STORED, ids=[packaged.file_name(*s) for s in STORED]
)
def test_a_stored_replay_is_the_replay(trace, proposer, k):
    stored = packaged.load(trace, proposer, k)
    assert stored is not None, "missing or stale: python tools/packaged_replays.py --write"
    fresh = ReplayTable.of(LookupProposer(*proposer).replay(load_token_trace(trace), k))
    for field in ("offsets", "lengths", "proposed", "accepted"):
        a, b = getattr(stored, field), getattr(fresh, field)
        assert a.dtype == b.dtype and (a == b).all(), field


def test_only_the_stored_settings_and_files_are_read(monkeypatch):
    suffix, k = packaged.STORED[0]
    assert packaged.load("gsm8k", suffix, k) is not None
    assert packaged.load("gsm8k", suffix, k - 1) is None  # another K replays
    tuned = ("suffix", (("max_tree_depth", 16),), False)
    assert packaged.load("gsm8k", tuned, k) is None  # other settings replay
    # a study's proposer reads the stored replay, never replaying
    replay_table.cache_clear()
    monkeypatch.setitem(REPLAYERS, "suffix", None)  # would fail if called
    read = replay_table("gsm8k", LookupProposer(*suffix), k)
    assert (read.accepted == packaged.load("gsm8k", suffix, k).accepted).all()
    replay_table.cache_clear()
    assert packaged.load("some/file.tokens.jsonl.gz", suffix, k) is None
    # a token file that changed since the replay was stored: not used
    monkeypatch.setattr(packaged, "_sha256", lambda trace: "0" * 64)
    assert packaged.load("gsm8k", suffix, k) is None
