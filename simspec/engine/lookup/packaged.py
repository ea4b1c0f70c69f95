"""Replays of the packaged token traces by the lookup proposers that are slow to replay, stored.

A replay is a pure function of (token trace, proposer, settings, k), and two proposers emulate
their engine's data structure in Python: SuffixDecoding's trees (:mod:`.suffix`, 0.7-6.3 s a
trace on one core) and SGLang's n-gram trie (:mod:`.sglang_ngram`, 1.2-4.9 s). A study, the
explorer or a worker process of the pool would pay that before its first step. Their replays at
the methods' defaults (``STORED``) on the four packaged traces ship as computed arrays, written
by ``python tools/packaged_replays.py --write`` and checked against a fresh replay, bit for
bit, by ``--check`` and tests/test_packaged_replays.py. A stored replay names the SHA-256 of
the token file it replayed; one whose file differs is not used (the replay runs).
"""

from __future__ import annotations

import hashlib
import io
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

import numpy as np

from simspec.catalog.token_traces import packaged_token_traces, token_trace_file
from simspec.catalog.traces import PACKAGED_DIR
from simspec.engine.lookup.replay import ReplayTable

# A proposer as proposers.LookupProposer names it: (kind, its settings, padded)
Key = tuple[str, tuple[tuple[str, int | float], ...], bool]

# (proposer, k) stored for every packaged trace: the defaults a study runs. suffix: K = the
# method's default 24 (= max_tree_depth, vLLM's num_speculative_tokens default for suffix);
# SGLang's n-gram: the ngram method's default K = 3 with SGLang's own trie settings.
STORED: tuple[tuple[Key, int], ...] = (
    (("suffix", (), False), 24),
    (("sglang_ngram", (), True), 3),
)


def _root() -> Traversable:
    return resources.files("simspec").joinpath(f"data/traces/{PACKAGED_DIR}/replays")


def file_name(trace: str, proposer: Key, k: int) -> str:
    return f"{trace}.{proposer[0]}-k{k}.npz"


@cache
def _sha256(trace: str) -> str:
    return hashlib.sha256(token_trace_file(trace).read_bytes()).hexdigest()


def load(trace: str, proposer: Key, k: int) -> ReplayTable | None:
    """The stored replay of packaged ``trace`` by ``proposer`` at ``k``; None where none is
    stored or its token file changed since."""
    if (proposer, k) not in STORED or trace not in packaged_token_traces():
        return None
    f = _root().joinpath(file_name(trace, proposer, k))
    if not f.is_file():
        return None
    with np.load(io.BytesIO(f.read_bytes())) as z:
        if str(z["tokens_sha256"]) != _sha256(trace):
            return None
        return ReplayTable.flat(z["lengths"], z["proposed"], z["accepted"])


def to_bytes(trace: str, table: ReplayTable) -> bytes:
    """``table`` (the replay of packaged ``trace``) as the stored file's bytes."""
    top = int(max(table.proposed.max(initial=0), table.accepted.max(initial=0)))
    small = np.uint8 if top <= np.iinfo(np.uint8).max else np.uint16
    buf = io.BytesIO()
    np.savez_compressed(
        buf,
        tokens_sha256=np.array(_sha256(trace)),
        lengths=table.lengths.astype(np.uint32),
        proposed=table.proposed.astype(small),
        accepted=table.accepted.astype(small),
    )
    return buf.getvalue()
