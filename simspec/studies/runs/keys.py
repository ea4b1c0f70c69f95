"""A run's address: the content of its scenario and of every file the scenario names.

Every run is a seeded, self-contained scenario (shipped as its JSON), so the same scenario asked
for twice (two rows of a case table, a baseline two sweep points share, a repeated probe) is one
run, and a result kept under its key is never reused for a file edited since.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from simspec.catalog.tables import file_stamp


def scenario_key(scenario_json: str) -> str:
    """A run's address: SHA-256 of its scenario's canonical JSON (``model_dump_json``) and, when
    it names files, of each one's path and bytes, cut to 20 hex digits (80 bits: no two
    scenarios of any study share one). A scenario that names no file is keyed by its JSON
    alone; one whose profile, model config or trace was edited gets a new key, so a resumed
    sweep runs it again instead of reusing a result of the old file."""
    text = scenario_json + "".join(
        f"\n{ref}\0{digest}" for ref, digest in referenced_files(scenario_json)
    )
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def referenced_files(scenario_json: str) -> list[tuple[str, str]]:
    """``(string, content digest)`` for every string in the scenario that names a regular file:
    any field may be a path (model, profile, draft model, traces, token traces), and hashing one
    more file than a run reads only costs a re-run."""
    try:
        data = json.loads(scenario_json)
    except (ValueError, RecursionError):
        return []
    refs = sorted({s for s in _strings(data) if file_stamp(s) is not None})
    return [(ref, file_digest(ref)) for ref in refs]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


# Files larger than this are fingerprinted by size and modification time instead of read (no
# input simspec loads comes near it; see the loaders' caps).
MAX_HASHED_BYTES = 1 << 30
_digests: dict[tuple[str, int, int, int, int], str] = {}


def file_digest(ref: str) -> str:
    """SHA-256 of a file's bytes, remembered while its size, time and inode stay the same."""
    stamp = file_stamp(ref)  # (device, inode, size, mtime): the loaders' cache key too
    if stamp is None:  # gone since it was listed
        return "missing"
    sig = (ref, *stamp)
    if sig not in _digests:
        size, mtime_ns = stamp[2], stamp[3]
        if size > MAX_HASHED_BYTES:
            _digests[sig] = f"size={size},mtime_ns={mtime_ns}"
        else:
            h = hashlib.sha256()
            try:
                with open(ref, "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        h.update(chunk)
            except OSError:
                return "unreadable"
            _digests[sig] = h.hexdigest()
    return _digests[sig]
