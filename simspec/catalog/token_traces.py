"""Token traces: the prompt and the target's generated token ids of real requests.

A token-trace file is JSONL (optionally gzipped), one request per line:
``{"id": ..., "prompt_token_ids": [...], "generated_token_ids": [...]}`` (``id`` optional). Lookup
drafters are deterministic functions of these streams, so :mod:`simspec.engine.lookup` replays
them exactly. Four are packaged by dataset name (``data/traces/SOURCE.md``); any other file is
read by path (``calibration/capture_tokens.py`` writes one from a run of your own model).
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import numpy as np

from simspec.catalog.tables import file_cache, parse_json, read_input, read_input_gzip, shown
from simspec.catalog.traces import PACKAGED_DIR
from simspec.errors import InputError

MAX_TOKEN_TRACE_BYTES = 512 * 1024 * 1024  # uncompressed
MAX_TOKEN_ID = 2**31 - 1  # vocabularies are ~10^5; ids are int32 in every engine
_SUFFIX = ".tokens.jsonl.gz"


@dataclass(frozen=True, eq=False)
class TokenTrace:
    """Every request's prompt and generated token ids, in file order."""

    name: str
    ids: tuple[str, ...]
    prompts: tuple[np.ndarray, ...]  # int64 token ids
    outputs: tuple[np.ndarray, ...]  # int64 token ids, the target's output

    @property
    def num_requests(self) -> int:
        return len(self.prompts)

    @property
    def prompt_len(self) -> np.ndarray:
        return np.array([len(p) for p in self.prompts], dtype=np.int64)

    @property
    def output_len(self) -> np.ndarray:
        return np.array([len(o) for o in self.outputs], dtype=np.int64)


def _packaged_root() -> Traversable:
    return resources.files("simspec").joinpath("data", "traces", PACKAGED_DIR, "tokens")


def token_trace_file(ref: str) -> Traversable:
    """The packaged token file of dataset ``ref``."""
    return _packaged_root().joinpath(ref + _SUFFIX)


def packaged_token_traces() -> list[str]:
    return sorted(
        p.name.removesuffix(_SUFFIX) for p in _packaged_root().iterdir() if p.name.endswith(_SUFFIX)
    )


# how far is_token_trace_file looks for a file's first record: past this many blank lines, and
# into this many bytes of it (a long conversation's ids run to megabytes)
FIRST_RECORD_LINES = 1000
FIRST_RECORD_BYTES = 64 << 20


def is_token_trace_file(ref: str) -> bool:
    """Whether ``ref`` is a token-trace file (gzipped, or JSONL whose first record has
    ``prompt_token_ids``) rather than a packaged name or an ``acc_len`` trace."""
    path = Path(ref)
    if ref in packaged_token_traces() or not os.path.isfile(ref):  # os.path: never raises
        return False
    if ref.endswith(".gz"):
        return True
    try:
        with path.open("rb") as f:
            # the first record, however its keys are ordered and past blank lines (QA: one
            # with generated_token_ids first, or over 4 KB, was read as an acc_len trace)
            for _ in range(FIRST_RECORD_LINES):
                line = f.readline(FIRST_RECORD_BYTES)
                if not line:
                    return False
                if line.strip():
                    return b'"prompt_token_ids"' in line
    except OSError:
        return False
    return False


def _read(ref: str, field: str) -> tuple[str, bytes]:
    """(display name, raw JSONL bytes) of a packaged dataset name or a path."""
    if ref in packaged_token_traces():
        data = token_trace_file(ref).read_bytes()
        return f"{PACKAGED_DIR}/tokens/{ref}", gzip.decompress(data)
    path = Path(ref)
    if not os.path.lexists(ref):  # os.path: a too-long name is just not there
        raise InputError(
            field,
            f"no token trace {shown(ref)}: give a packaged one "
            f"({', '.join(packaged_token_traces())}) "
            "or the path of a JSONL(.gz) file with prompt_token_ids and generated_token_ids",
        )
    read = read_input_gzip if ref.endswith(".gz") else read_input
    return str(path), read(path, field, MAX_TOKEN_TRACE_BYTES)


def _ids(value: object, where: str, key: str, field: str, allow_empty: bool) -> np.ndarray:
    if not isinstance(value, list) or (not value and not allow_empty):
        raise InputError(field, f"{where}: {key} must be a non-empty list of token ids")
    bad = f"{where}: {key} must hold integers in [0, {MAX_TOKEN_ID}]"
    if not all(type(v) is int for v in value):  # a bool or a float is no token id
        raise InputError(field, bad)
    try:
        arr = np.array(value, dtype=np.int64)
    except OverflowError:
        raise InputError(field, bad) from None
    if len(arr) and (arr.min() < 0 or arr.max() > MAX_TOKEN_ID):
        raise InputError(field, bad)
    return arr


@file_cache()
def load_token_trace(ref: str, field: str = "acceptance.tokens") -> TokenTrace:
    """Load and check every line of a token trace (``field``: the input named in errors)."""
    name, raw = _read(ref, field)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(field, f"{name}: not UTF-8 text") from None
    ids, prompts, outputs = [], [], []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name} line {lineno}"
        rec = parse_json(line, field, where, walk=False)  # each field's type is checked below
        if not isinstance(rec, dict) or not {"prompt_token_ids", "generated_token_ids"} <= set(rec):
            gz = " (a .gz file is read as a token trace; an acc_len trace is plain JSONL)"
            raise InputError(
                field,
                f"{where}: needs prompt_token_ids and generated_token_ids"
                + (gz if name.endswith(".gz") else ""),
            )
        prompts.append(_ids(rec["prompt_token_ids"], where, "prompt_token_ids", field, False))
        outputs.append(_ids(rec["generated_token_ids"], where, "generated_token_ids", field, False))
        ids.append(str(rec.get("id", len(ids))))
    if not prompts:
        raise InputError(field, f"{name} holds no requests")
    return TokenTrace(name, tuple(ids), tuple(prompts), tuple(outputs))
