"""Real per-request, per-position acceptance traces (the ``acc_len`` JSONL format).

``acc_len[t]`` is the number of tokens a speculative step starting at output position ``t``
produces with a long draft (accepted + 1); a chain of K yields ``min(acc_len[t], K + 1)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np

from simspec.errors import InputError

PACKAGED_DIR = "llama3.1-8b-instruct-h100"
MAX_TRACE_BYTES = 200 * 1024 * 1024


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


def _resolve(ref: str, field: str = "acceptance.trace") -> tuple[str, str]:
    """Return (display name, text) for a packaged dataset name or a JSONL path."""
    if ref in packaged_traces():
        f = resources.files("simspec").joinpath("data", "traces", PACKAGED_DIR, f"{ref}.jsonl")
        return f"{PACKAGED_DIR}/{ref}", f.read_text(encoding="utf-8")
    path = Path(ref)
    if not path.is_file():
        raise InputError(
            field,
            f"no trace {ref!r}: give a packaged one ({', '.join(packaged_traces())}) "
            "or the path of an acc_len JSONL file",
        )
    if path.stat().st_size > MAX_TRACE_BYTES:
        raise InputError(field, f"{ref!r} is larger than {MAX_TRACE_BYTES} bytes")
    try:
        return str(path), path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(field, f"cannot read {ref!r}: {exc}") from None


@cache
def load_trace(ref: str, method: str, field: str = "acceptance.trace") -> AcceptanceTrace:
    """Load the ``acc_len[method]`` arrays of a trace; every line is checked, and an error
    names ``field``, the setting that chose the file (acceptance.trace or workload.trace)."""
    name, text = _resolve(ref, field)
    prompts, outputs, arrays = [], [], []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name} line {lineno}"
        try:
            rec = json.loads(line)
            arr = rec["acc_len"][method]
            prompt, output = _integer(rec["prompt_len"]), _integer(rec["output_len"])
        except json.JSONDecodeError as exc:
            raise InputError(field, f"{where}: not JSON ({exc.msg})") from None
        except (KeyError, TypeError):
            raise InputError(
                field,
                f"{where}: needs prompt_len, output_len and acc_len.{method}",
            ) from None
        except ValueError:
            raise InputError(field, f"{where}: lengths must be integers") from None
        if not isinstance(arr, list) or not arr:
            raise InputError(field, f"{where}: acc_len.{method} must be a non-empty list")
        if not all(type(v) is int and v >= 1 for v in arr):
            raise InputError(field, f"{where}: acc_len values must be integers >= 1")
        if prompt < 1 or output < 1:
            raise InputError(field, f"{where}: prompt_len and output_len must be >= 1")
        prompts.append(prompt)
        outputs.append(output)
        arrays.append(np.asarray(arr).astype(np.int32))
    if not arrays:
        raise InputError(field, f"{name} holds no requests")
    lengths = np.array([len(a) for a in arrays], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return AcceptanceTrace(
        name, method, np.array(prompts), np.array(outputs), offsets, lengths, np.concatenate(arrays)
    )


def _integer(value: object) -> int:
    """A JSON integer as is: 100.7 or ``true`` is no length (``int()`` would make 100 or 1)."""
    if type(value) is not int:
        raise ValueError(value)
    return value


def replay_tau(trace: AcceptanceTrace, k: int, start: int = 0) -> float:
    """Tokens per step a chain of K implies, pooled over requests (steps start at ``start``).

    This is the statistic a simulation replaying the trace must reproduce; the last step of a
    request is cut at the request's end, as in generation.
    """
    tokens = steps = 0
    for i in range(trace.num_requests):
        acc = trace.request(i)
        t = start
        while t < len(acc):
            made = min(int(acc[t]), k + 1, len(acc) - t)
            t += made
            tokens += made
            steps += 1
    return tokens / steps if steps else float("nan")


def first_method(ref: str) -> str:
    """The first ``acc_len`` key of a trace file (for reading lengths only)."""
    name, text = _resolve(ref, "workload.trace")
    for line in text.splitlines():
        if line.strip():
            try:
                keys = list(json.loads(line)["acc_len"])
            except (json.JSONDecodeError, KeyError, TypeError):
                break
            if keys:
                return keys[0]
    raise InputError("workload.trace", f"{name}: first record has no acc_len methods")
