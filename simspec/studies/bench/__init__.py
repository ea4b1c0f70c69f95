"""The engines' own benchmark results, read as measured runs (:class:`MeasuredRun`), and what
simspec predicts for the same workload (``simspec compare``).

One module per format: vLLM's ``--save-result`` JSON (:mod:`.vllm_json`), the result block
vLLM and SGLang print (:mod:`.text_block`), SGLang's ``--output-file`` JSONL
(:mod:`.sglang_jsonl`), vLLM's Prometheus ``/metrics`` text (:mod:`.prometheus`). A file's
format is told by its content, not its name: the printed banner, the Prometheus counter names,
else JSON (one document, or one object per line).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any

from simspec.catalog.tables import parse_json, read_input, read_input_text, shown
from simspec.config import MAX_RUNS
from simspec.errors import InputError
from simspec.studies.bench.measured import Acceptance, MeasuredRun
from simspec.studies.bench.prometheus import acceptance_from, is_metrics_dump, read_counters
from simspec.studies.bench.sglang_jsonl import read_sglang_result
from simspec.studies.bench.text_block import has_block, read_text_blocks
from simspec.studies.bench.vllm_json import is_vllm_result, read_vllm_result

__all__ = [
    "Acceptance",
    "MeasuredRun",
    "read_metrics",
    "read_result",
    "read_result_file",
    "read_results",
]

# A --save-detailed run keeps each request's ITLs (~200 floats of ~20 characters for a ShareGPT
# reply) and its text (~1 KB): ~6 KB a request, so 10,000 requests are ~60 MB. 256 MiB holds
# ~40,000, and parsing it takes about twice that in memory.
MAX_RESULT_BYTES = 256 * 1024 * 1024
# A /metrics page of one server is tens of KB (every histogram of every engine): 16 MiB is
# hundreds of engines' worth.
MAX_METRICS_BYTES = 16 * 1024 * 1024


def read_result(path: str | os.PathLike, field: str = "RESULT") -> list[MeasuredRun]:
    """The measured runs of one result file (``field``: the argument that named it)."""
    return read_result_file(path, field)[0]


def read_results(paths: list[str | os.PathLike], field: str = "RESULT") -> list[MeasuredRun]:
    """The runs of several result files, each named by its file's name, or by its path where
    two files share a name (a/result.json, b/result.json): tables and reports key runs by
    name, so two of one name would be read as one."""
    names = [os.path.basename(str(p)) or str(p) for p in paths]
    out = []
    seen: dict[str, str | os.PathLike] = {}
    for path, name in zip(paths, names, strict=True):
        runs, digest = read_result_file(path, field)
        check_distinct(path, digest, seen, field)
        if names.count(name) > 1:
            whole = str(path)
            runs = [dataclasses.replace(r, name=whole + r.name[len(name) :]) for r in runs]
        out.extend(runs)
    check_distinct_runs(out, field)
    return out


def read_result_file(
    path: str | os.PathLike, field: str = "RESULT"
) -> tuple[list[MeasuredRun], str]:
    """The measured runs of one result file and the sha256 of the bytes they were read from
    (a calibrated profile names the files it was fitted to by their hashes)."""
    data = read_input(path, field, MAX_RESULT_BYTES)
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark (Windows editors) is not text
    except UnicodeDecodeError:
        raise InputError(field, f"{shown(path)} is not UTF-8 text") from None
    return _runs_of(text, path, field), hashlib.sha256(data).hexdigest()


def check_distinct(
    path: str | os.PathLike, digest: str, seen: dict[str, str | os.PathLike], field: str
) -> None:
    """Refuse a result file whose bytes an earlier one already gave (the same file twice, or a
    copy): its runs would count twice in every mean and fit (QA: ``compare a.json a.json``
    printed each run twice under one name). ``seen`` maps each digest to its first path."""
    if digest not in seen:
        seen[digest] = path
        return
    first = seen[digest]
    same = "is given twice" if str(first) == str(path) else f"holds the bytes of {shown(first)}"
    raise InputError(
        field, f"{shown(path)} {same}: its runs would count twice; give each result once"
    )


def check_distinct_runs(runs: list[MeasuredRun], field: str = "RESULT") -> None:
    """Refuse one run given twice in two forms (a --save-result JSON and the block the same
    benchmark printed): the same requests, tokens and load, and a duration within the 10 ms a
    printed block rounds to; its numbers would count twice in every mean and fit (QA:
    calibrate bench bs8.json bs8.txt fitted three runs)."""
    seen: dict[tuple[Any, ...], list[MeasuredRun]] = {}
    for run in runs:
        key = (
            run.requests, run.total_input_tokens, run.total_output_tokens,
            run.max_concurrency, run.request_rate,
        )  # fmt: skip
        for other in seen.setdefault(key, []):
            if abs(other.duration_s - run.duration_s) <= 0.01:
                raise InputError(
                    field,
                    f"{run.name} is the run {other.name} holds (the same requests, tokens, load "
                    f"and a {run.duration_s:g} s duration): its numbers would count twice; "
                    "give each run once",
                )
        seen[key].append(run)


def _runs_of(text: str, path: str | os.PathLike, field: str) -> list[MeasuredRun]:
    where = shown(path)
    name = os.path.basename(str(path)) or str(path)
    if has_block(text):
        return read_text_blocks(text, name, where)
    if is_metrics_dump(text):
        raise InputError(
            field,
            f"{where} is a /metrics dump, not a benchmark result: give it with --spec-metrics",
        )
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise InputError(field, f"{where} is empty")
    if len(lines) > 1 and _object_line(lines[0][1]):
        if len(lines) > MAX_RUNS:  # refused before 256 MiB of lines become objects
            raise InputError(
                field,
                f"{where} holds {len(lines):,} runs; one command simulates at most {MAX_RUNS:,}",
            )
        # --append-result (vLLM) and --output-file (SGLang) append one object per run
        return [
            _one(parse_json(line, field, f"{where} line {n}"), f"{name}#{i}", f"{where} line {n}")
            for i, (n, line) in enumerate(lines, start=1)
        ]
    first = lines[0][1].lstrip()
    if not first.startswith(("{", "[")):
        # QA: a CSV or a log was refused as "not valid JSON (Expecting value at position 0)"
        raise InputError(
            field,
            f"{where} is not a benchmark result simspec reads: give vllm bench serve's "
            "--save-result JSON (or its printed '============ Serving Benchmark Result' block), "
            "or SGLang bench_serving's --output-file JSONL",
        )
    return [_one(parse_json(text, field, where), name, where)]


def _one(data: Any, name: str, where: str) -> MeasuredRun:
    if isinstance(data, dict) and not is_vllm_result(data):
        return read_sglang_result(data, name, where)
    return read_vllm_result(data, name, where)


def _object_line(line: str) -> bool:
    """Whether one line is a whole JSON object by itself (a JSONL file's first line; a
    pretty-printed document's first line is a lone ``{``)."""
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):
        return False


def read_metrics(paths: list[str | os.PathLike], field: str = "--spec-metrics") -> Acceptance:
    """The acceptance of one ``/metrics`` dump (counters since the server started), or of two
    (the run's: the second minus the first)."""
    if not 1 <= len(paths) <= 2:
        raise InputError(field, f"give one dump, or two (before and after); got {len(paths)}")
    dumps = []
    for path in paths:
        text = read_input_text(path, field, MAX_METRICS_BYTES)
        dumps.append(read_counters(text, f"{field} {shown(path)}"))
    counters = dumps[-1].minus(dumps[0]) if len(dumps) == 2 else dumps[0]
    return acceptance_from(counters, f"{field} {' - '.join(shown(p) for p in reversed(paths))}")
