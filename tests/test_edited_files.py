"""A file read by path is read again once it changes: the trace loaders remember a file's
contents per (device, inode, size, modification time), not per path (QA: a process that ran an
acceptance trace kept its first contents for every later run of the same path, so an API user
who edited the file, or a kept pool worker, got the old numbers)."""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path

from simspec.catalog.arrival_traces import load_arrival_trace, transformed
from simspec.catalog.tables import file_stamp
from simspec.catalog.token_traces import load_token_trace
from simspec.catalog.traces import PACKAGED_DIR, load_trace
from simspec.engine.lookup.proposers import LookupProposer, replay_table


def _packaged(*parts: str) -> Path:
    return Path(str(resources.files("simspec").joinpath("data", "traces", PACKAGED_DIR, *parts)))


def _rewrite(path: Path, text: str) -> None:
    """Replace ``path``'s contents and move its modification time on (a same-second rewrite
    of the same size would keep the stamp on a coarse clock)."""
    before = path.stat().st_mtime_ns
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(before + 10**9, before + 10**9))


def test_an_edited_acceptance_trace_is_read_again(tmp_path):
    lines = _packaged("sharegpt.jsonl").read_text(encoding="utf-8").splitlines()
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines[:60]) + "\n", encoding="utf-8")
    first = load_trace(str(path), "eagle3")
    assert load_trace(str(path), "eagle3") is first  # unchanged: remembered
    _rewrite(path, "\n".join(lines[-20:]) + "\n")
    again = load_trace(str(path), "eagle3")
    assert len(again.prompt_len) == 20 and len(first.prompt_len) == 60


def test_an_edited_token_trace_and_its_replay_are_read_again(tmp_path):
    path = tmp_path / "tokens.jsonl.gz"
    shutil.copy(_packaged("tokens", "gsm8k.tokens.jsonl.gz"), path)
    first = load_token_trace(str(path))
    proposer = LookupProposer("vllm_ngram", (("prompt_lookup_min", 2), ("prompt_lookup_max", 4)))
    replayed = replay_table(str(path), proposer, 3)
    before = path.stat().st_mtime_ns
    shutil.copy(_packaged("tokens", "cnn.tokens.jsonl.gz"), path)
    os.utime(path, ns=(before + 10**9, before + 10**9))
    again = load_token_trace(str(path))
    assert again.prompts[0].tolist() != first.prompts[0].tolist()
    assert replay_table(str(path), proposer, 3) is not replayed


def test_an_edited_arrival_trace_is_read_again(tmp_path):
    path = tmp_path / "arrivals.csv"
    path.write_text("arrival_s,prompt_len,output_len\n0,10,5\n1,20,6\n", encoding="utf-8")
    assert len(load_arrival_trace(str(path))) == 2
    assert len(transformed(str(path))) == 2
    _rewrite(path, "arrival_s,prompt_len,output_len\n0,10,5\n1,20,6\n2,30,7\n")
    assert len(load_arrival_trace(str(path))) == 3
    assert len(transformed(str(path))) == 3


def test_a_packaged_name_or_a_missing_path_has_no_stamp(tmp_path):
    assert file_stamp("sharegpt") is None or Path("sharegpt").is_file()
    assert file_stamp(str(tmp_path / "gone.jsonl")) is None
    assert file_stamp("a\0b") is None and file_stamp(str(tmp_path)) is None
