"""Real per-request, per-position acceptance traces (the ``acc_len`` JSONL format).

``acc_len[t]`` is the number of tokens a speculative step starting at output position ``t``
produces with a long draft (accepted + 1); a chain of K yields ``min(acc_len[t], K + 1)``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from simspec.catalog.tables import file_cache, parse_json, read_input_text, shown
from simspec.errors import InputError

PACKAGED_DIR = "llama3.1-8b-instruct-h100"
MAX_TRACE_BYTES = 200 * 1024 * 1024
MAX_COUNT = 2**31 - 1  # lengths and acc_len are stored as int32


@dataclass(frozen=True)
class AcceptanceTrace:
    """One method's acceptance arrays for every request of a trace file, stored flat."""

    name: str
    method: str
    prompt_len: np.ndarray  # (n,)
    output_len: np.ndarray  # (n,) the length recorded in the file
    offsets: np.ndarray  # (n,) start of each request's array in ``acc``
    lengths: np.ndarray  # (n,) length of each request's array
    acc: np.ndarray  # flat int32 acc_len values

    @property
    def num_requests(self) -> int:
        return len(self.lengths)

    def request(self, i: int) -> np.ndarray:
        return self.acc[self.offsets[i] : self.offsets[i] + self.lengths[i]]


def packaged_traces() -> list[str]:
    root = resources.files("simspec").joinpath("data", "traces", PACKAGED_DIR)
    return sorted(
        p.name.removesuffix(".jsonl") for p in root.iterdir() if p.name.endswith(".jsonl")
    )


def _resolve(ref: str, field: str = "acceptance.acc_len") -> tuple[str, str]:
    """Return (display name, text) for a packaged dataset name or a JSONL path."""
    if ref in packaged_traces():
        f = resources.files("simspec").joinpath("data", "traces", PACKAGED_DIR, f"{ref}.jsonl")
        return f"{PACKAGED_DIR}/{ref}", f.read_text(encoding="utf-8")
    path = Path(ref)
    if not os.path.lexists(ref):  # os.path: a too-long name is just not there
        raise InputError(
            field,
            f"no trace {shown(ref)}: give a packaged one ({', '.join(packaged_traces())}) "
            "or the path of an acc_len JSONL file",
        )
    if ref.endswith(".gz"):  # QA: refused as "not UTF-8 text"
        raise InputError(
            field,
            f"{shown(ref)}: an acc_len trace is read as plain JSONL: gunzip it (only token "
            "traces, prompt_token_ids and generated_token_ids, may be gzipped)",
        )
    return str(path), read_input_text(path, field, MAX_TRACE_BYTES)


def _count(value: object, where: str, key: str, field: str = "acceptance.acc_len") -> int:
    """A JSON count in [1, 2^31 - 1]: a bool, a float (``1e30``, ``Infinity``, ``100.7``) or a
    value past int32 (``4294967296`` would wrap to 0 and replay forever) is refused."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise InputError(
            field,
            f"{where}: {key} must be an integer in [1, {MAX_COUNT}], got {value!r}",
        )
    return value


def _counts(values: list, where: str, key: str, field: str) -> np.ndarray:
    """:func:`_count` over a list, vectorised (a trace holds millions of values)."""
    if not all(type(v) is int for v in values):  # bool and float are not int here
        _count(next(v for v in values if type(v) is not int), where, key, field)
    try:
        arr = np.array(values, dtype=np.int64)
    except OverflowError:
        arr = None
    if arr is None or arr.min() < 1 or arr.max() > MAX_COUNT:
        _count(next(v for v in values if not 1 <= v <= MAX_COUNT), where, key, field)
    return arr.astype(np.int32)


@file_cache()
def load_trace(ref: str, method: str, field: str = "acceptance.acc_len") -> AcceptanceTrace:
    """Load the ``acc_len[method]`` arrays of a trace; every line is checked, and an error
    names ``field``, the setting that chose the file (acceptance.acc_len or
    workload.lengths_from)."""
    name, text = _resolve(ref, field)
    prompts, outputs, arrays = [], [], []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name} line {lineno}"
        rec = parse_json(line, field, where, walk=False)  # fields checked below
        try:
            arr = rec["acc_len"][method]
            raw_prompt, raw_output = rec["prompt_len"], rec["output_len"]
        except (KeyError, TypeError, IndexError):
            raise InputError(
                field,
                f"{where}: needs prompt_len, output_len and acc_len.{method}",
            ) from None
        prompt = _count(raw_prompt, where, "prompt_len", field)
        output = _count(raw_output, where, "output_len", field)
        if not isinstance(arr, list) or not arr:
            raise InputError(field, f"{where}: acc_len.{method} must be a non-empty list")
        prompts.append(prompt)
        outputs.append(output)
        arrays.append(_counts(arr, where, f"acc_len.{method} values", field))
    if not arrays:
        raise InputError(field, f"{name} holds no requests")
    lengths = np.array([len(a) for a in arrays], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return AcceptanceTrace(
        name, method, np.array(prompts), np.array(outputs), offsets, lengths, np.concatenate(arrays)
    )


def replay_tau(trace: AcceptanceTrace, k: int, start: int = 0) -> float:
    """Tokens per step a chain of K implies, pooled over requests (steps start at ``start``).

    This is the statistic a simulation replaying the trace must reproduce; the last step of a
    request is cut at the request's end, as in generation.
    """
    return walk_tau((trace.request(i) for i in range(trace.num_requests)), k + 1, start)


def walk_tau(step_tokens: Iterable[np.ndarray], cap: int, start: int = 0) -> float:
    """Tokens per step of a chain walk over requests whose ``step_tokens[t]`` says what a step
    starting at output position ``t`` yields: at most ``cap``, cut at the request's end; the
    next step starts where it ends."""
    tokens = steps = 0
    for made_at in step_tokens:
        n, t = len(made_at), start
        while t < n:
            made = min(int(made_at[t]), cap, n - t)
            tokens, steps, t = tokens + made, steps + 1, t + made
    return tokens / steps if steps else float("nan")


def trace_methods(ref: str) -> list[str]:
    """The ``acc_len`` keys of a trace file's first record (the methods it records), read
    once; a record without any, or with an empty first key, is refused naming the file."""
    name, text = _resolve(ref, "workload.lengths_from")
    for line in text.splitlines():
        if line.strip():
            try:
                keys = list(parse_json(line, "workload.lengths_from")["acc_len"])
            except (InputError, KeyError, TypeError, IndexError):
                break
            if keys and not keys[0].strip():
                raise InputError(
                    "workload.lengths_from",
                    f"{name}: the first record's acc_len key {keys[0]!r} is empty: name the method",
                )
            if keys:
                return keys
    raise InputError("workload.lengths_from", f"{name}: first record has no acc_len methods")


def first_method(ref: str) -> str:
    """The first ``acc_len`` key of a trace file (for reading lengths only)."""
    return trace_methods(ref)[0]
