"""The result block a serving benchmark prints, as users paste it into docs and issues, read
as measured runs (one per block; a pasted page may hold several).

vLLM's ``vllm bench serve`` prints it in ``benchmark`` (vllm/benchmarks/serve.py, commit
009e6d4a): a ``===== Serving Benchmark Result =====`` banner, then ``Label: value`` lines
(``{:<40} {:<10}``): Successful requests, Failed requests (since v0.11.1), Maximum request
concurrency (only when set), Request rate configured (RPS) (only when not inf), Benchmark
duration (s), Total input tokens, Total generated tokens, Request throughput (req/s), Output
token throughput (tok/s), then per metric a ``----`` header and Mean / Median / P99 X (ms)
(X in TTFT, TPOT, ITL, E2EL), a Speculative Decoding section (Acceptance length, and
``Position i:`` under Per-position acceptance (%)), and a closing line of ``=``.

SGLang's ``bench_serving`` prints a block of the same shape (python/sglang/bench_serving.py,
commit 0033168f, ``benchmark``) with its own labels: Traffic request rate, Max request
concurrency (``not set`` when none), Accept length, Mean / Median E2E Latency (ms).

vLLM prints the load it was asked for before the banner (``Traffic request rate``,
``Burstiness factor``, ``Maximum request concurrency``: serve.py ``benchmark``); a block reads
them from the lines above it, back to the previous block, where it does not print them itself
(QA: a run at 2 req/s pasted with its preamble was simulated as a burst).

Leading indentation, a Markdown fence or a ``# BS=8`` comment around a block is ignored; a
line the block does not know is skipped (the engines add lines over releases).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from simspec.config import MAX_RUNS
from simspec.errors import InputError
from simspec.studies.bench.measured import (
    Acceptance,
    MeasuredRun,
    check_count,
    check_number,
    check_run,
    concurrency,
    consistent,
    percentile_of,
    rate,
)

BANNER = "Serving Benchmark Result"
MAX_BLOCKS = MAX_RUNS  # runs one command simulates (config.MAX_RUNS), counted as they are found
_LINE = re.compile(r"^\s*([A-Za-z][^:]*?)\s*:\s*(\S.*?)\s*$")
_POSITION = re.compile(r"^Position (\d+)$")
# label -> (field, reader): counts, numbers, or the special traffic fields
_FIELDS: dict[str, str] = {
    "Successful requests": "completed",
    "Failed requests": "failed",
    "Burstiness factor": "burstiness",
    "Maximum request concurrency": "max_concurrency",
    "Max request concurrency": "max_concurrency",
    "Request rate configured (RPS)": "request_rate",
    "Traffic request rate": "request_rate",
    "Benchmark duration (s)": "duration",
    "Total input tokens": "total_input_tokens",
    "Total generated tokens": "total_output_tokens",
    "Request throughput (req/s)": "request_throughput_req_s",
    "Output token throughput (tok/s)": "output_throughput_tok_s",
    "Acceptance length": "accept_length",
    "Accept length": "accept_length",
}
_STATS = {"Mean": "mean", "Median": "median", "P99": "p99"}
_NAMES = {
    "TTFT": "ttft",
    "TPOT": "tpot",
    "ITL": "itl",
    "E2EL": "e2el",
    "E2E Latency": "e2el",
}
for _stat, _s in _STATS.items():
    for _label, _m in _NAMES.items():
        _FIELDS[f"{_stat} {_label} (ms)"] = f"{_s}_{_m}_ms"
_OTHER = re.compile(r"(P\d{1,2}(?:\.\d{1,3})?) (.+) \(ms\)")


def _other_percentile(label: str) -> str | None:
    """A percentile line beyond Median and P99 ("P90 TTFT (ms)", as --metric-percentiles
    prints it; SGLang's "P95 ITL (ms)") as simspec's metric name; None for another line."""
    hit = _OTHER.fullmatch(label)
    latency = _NAMES.get(hit.group(2)) if hit else None
    q = percentile_of(hit.group(1)) if hit else None
    if latency is None or q is None:
        return None
    return f"p{q:g}_{latency}_ms"  # as the simulated one is named (P90.0 -> p90)


# the lines vLLM prints above the banner that a block may leave out
PREAMBLE = ("Traffic request rate", "Burstiness factor", "Maximum request concurrency")

REQUIRED = {
    "completed": "Successful requests",
    "duration": "Benchmark duration (s)",
    "total_input_tokens": "Total input tokens",
    "total_output_tokens": "Total generated tokens",
}


def has_block(text: str) -> bool:
    return BANNER in text


def read_text_blocks(text: str, name: str, where: str) -> list[MeasuredRun]:
    """Every result block of ``text``, in order (``where`` names the file in errors)."""
    blocks = _blocks(text, where)
    if not blocks:
        raise InputError(where, f"no '{BANNER}' block")
    runs = []
    for i, (lineno, lines, above) in enumerate(blocks, start=1):
        label = name if len(blocks) == 1 else f"{name}#{i}"
        # the block's banner line: an error in it names its field's label (QA: "line 1"
        # read as the bad line, which was line 17)
        runs.append(_run(lines, label, f"{where} block at line {lineno}", above))
    return runs


def _blocks(text: str, where: str) -> list[tuple[int, list[str], list[str]]]:
    """(line number of the banner, the lines up to the closing ``====``, the lines above the
    banner back to the previous block) of each block; more than :data:`MAX_BLOCKS` are
    refused as the one past it is found."""
    out: list[tuple[int, list[str], list[str]]] = []
    current: list[str] | None = None
    above: list[str] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if BANNER in line:
            if len(out) == MAX_BLOCKS:
                raise InputError(
                    where,
                    f"more than {MAX_BLOCKS:,} result blocks; one command simulates at "
                    f"most {MAX_BLOCKS:,} runs",
                )
            current = []
            out.append((lineno, current, above))
            above = []
        elif current is not None and line and set(line) == {"="}:
            current = None  # the closing rule
        elif current is not None:
            current.append(line)
        else:
            above.append(line)
    return out


def _preamble(above: Sequence[str], where: str) -> dict[str, Any]:
    """The load vLLM printed above a block (:data:`PREAMBLE`), the last of each label."""
    out: dict[str, Any] = {}
    for line in above:
        m = _LINE.match(line)
        if m and m.group(1) in PREAMBLE:
            field = _FIELDS[m.group(1)]
            out[field] = _value(field, m.group(2), m.group(1), where)
    return out


def _run(lines: list[str], name: str, where: str, above: Sequence[str] = ()) -> MeasuredRun:
    values: dict[str, Any] = {}
    positions: dict[int, float] = {}
    sglang = False
    vllm_spec = False  # vLLM's speculative section's labels (SGLang prints "Accept length")
    for line in lines:
        m = _LINE.match(line)
        if not m:
            continue
        label, value = m.group(1), m.group(2)
        if p := _POSITION.match(label):
            pos = check_count(int(p.group(1)), label, where, most=63)
            positions[pos] = _percent(value, label, where)
            continue
        sglang = sglang or label in ("Traffic request rate", "Max request concurrency")
        vllm_spec = vllm_spec or label in ("Acceptance length", "Drafts", "Draft tokens")
        field = _FIELDS.get(label) or _other_percentile(label)
        if field is None:
            continue
        if field in values:
            raise InputError(f"{where}: {label}", "given twice in one block")
        values[field] = _value(field, value, label, where)
    for field, label in REQUIRED.items():
        if field not in values:
            raise InputError(f"{where}: {label}", "missing from the block (a truncated paste?)")
    for field, value in _preamble(above, where).items():
        values.setdefault(field, value)
    if sorted(positions) != list(range(len(positions))):
        raise InputError(f"{where}: Position", f"positions {sorted(positions)} are not 0, 1, ...")
    accept = values.pop("accept_length", None)
    acceptance = None
    if accept is not None or positions:
        acceptance = consistent(
            Acceptance(
                per_position=tuple(positions[i] for i in range(len(positions))),
                length=accept,
                source=f"{where}: the block's speculative decoding lines",
                # vLLM's block (per-position lines, or its own labels: SGLang prints an
                # "Accept length" alone) counts the steps that drafted (QA: a vLLM block
                # pasted without its position lines was read as SGLang's, TPOT 55 % low)
                drafted_steps_only=bool(positions) or (vllm_spec and not sglang),
            ),
            where,
        )
    metrics = {k: v for k, v in values.items() if k.endswith(("_ms", "_tok_s", "_req_s"))}
    run = MeasuredRun(
        name=name,
        kind="sglang-text" if sglang else "vllm-text",
        requests=values["completed"],
        duration_s=values["duration"],
        total_input_tokens=values["total_input_tokens"],
        total_output_tokens=values["total_output_tokens"],
        max_concurrency=values.get("max_concurrency"),
        request_rate=values.get("request_rate", math.inf),
        burstiness=values.get("burstiness", 1.0),
        metrics=metrics,
        acceptance=acceptance,
        failed=values.get("failed", 0),
    )
    return check_run(run, where)


def _value(field: str, text: str, label: str, where: str) -> Any:
    """A line's value as its field reads it (errors name the label as printed)."""
    at = f"{where}: {label}"
    if field == "max_concurrency":
        if text.lower() in ("not set", "none"):
            return None
        return concurrency(_parse(text, at), label, where)
    if field == "request_rate":
        return rate(text if text.lower() in ("inf", "infinity") else _parse(text, at), label, where)
    if field == "burstiness":  # "1.0 (Poisson process)", "0.5 (Gamma distribution)"
        return check_number(_parse(text.split()[0], at), label, where, positive=True)
    value = _parse(text, at)
    if field in ("completed", "total_input_tokens", "total_output_tokens", "failed"):
        return check_count(value, label, where, most=2**62)
    return check_number(value, label, where, positive=field == "duration")


def _parse(text: str, at: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(at, f"not a number: {text[:40]!r}") from None
    if not math.isfinite(value):
        raise InputError(at, f"must be finite, got {text[:40]!r}")
    return value


def _percent(text: str, label: str, where: str) -> float:
    share = check_number(_parse(text, f"{where}: {label}"), label, where) / 100.0
    if share > 1:
        raise InputError(f"{where}: {label}", f"must be a percentage in [0, 100], got {text}")
    return share
