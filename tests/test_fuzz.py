"""Fuzzing the input layer: random and malformed CLI values, config files, trace files, Hugging
Face configs, vLLM speculative configs and validation CSVs. Each is accepted or rejected with
one `error:` line naming the field (exit code 2), never a traceback, never half a file."""

from __future__ import annotations

import io
import json
import os
import string
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simspec.catalog.models import load_hf_config
from simspec.catalog.vllm import to_method
from simspec.cli.main import main
from simspec.errors import InputError

FAST = [
    "--batch-sizes",
    "1",
    "--requests",
    "2",
    "--prompt-len",
    "16",
    "--output-len",
    "8",
    "--executor",
    "serial",
    "--quiet",
]
# SIMSPEC_FUZZ_EXAMPLES=500 pytest tests/test_fuzz.py digs deeper by hand; CI tries 40 each
FUZZ = settings(
    max_examples=int(os.environ.get("SIMSPEC_FUZZ_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
TEXT = st.text(alphabet=string.printable, max_size=40)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**9), 10**9) | st.floats(allow_nan=True) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


@dataclass
class Result:
    exit_code: int
    output: str


def invoke(args: list[str]) -> Result:
    """The installed entry point (``simspec.cli.main``), in process: usage errors too become
    one line there."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), patch.object(sys, "argv", ["simspec", *args]):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return Result(code, out.getvalue() + err.getvalue())


def _one_line_or_ok(result: Result, out=None) -> None:
    assert "Traceback" not in result.output
    if result.exit_code == 0:
        return
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    if out is not None:
        assert not out.exists()


@FUZZ
@given(
    st.sampled_from(
        [
            "--batch-sizes",
            "--k",
            "--alpha",
            "--model",
            "--gpu",
            "--tp",
            "--temperature",
            "--top-p",
            "--tau",
            "--dataset",
            "--seed",
            "--requests",
            "--methods",
            "--engine",
        ]
    ),
    TEXT,
)
def test_random_cli_values(tmp_path_factory, flag, value):
    out = tmp_path_factory.mktemp("cli") / "out.csv"
    result = invoke(["sweep", *FAST, flag, value, "--out", str(out)])
    _one_line_or_ok(result, out)


@FUZZ
@given(JSONISH)
def test_random_config_files(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("cfg")
    cfg, out = folder / "c.json", folder / "out.csv"
    cfg.write_text(json.dumps(data))
    _one_line_or_ok(invoke(["sweep", "--config", str(cfg), *FAST, "--out", str(out)]), out)


@FUZZ
@given(st.binary(max_size=200) | TEXT.map(str.encode))
def test_malformed_config_file_bytes(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("raw")
    cfg = folder / "c.yaml"
    cfg.write_bytes(data)
    _one_line_or_ok(invoke(["sweep", "--config", str(cfg), *FAST]))


@FUZZ
@given(st.lists(JSONISH, max_size=4))
def test_random_trace_files(tmp_path_factory, records):
    folder = tmp_path_factory.mktemp("trace")
    trace, cfg = folder / "t.jsonl", folder / "c.yaml"
    trace.write_text("\n".join(json.dumps(r) for r in records))
    cfg.write_text(
        f"methods: [{{name: eagle3, acceptance: {{trace: '{trace}', trace_method: eagle3}}}}]\n"
    )
    _one_line_or_ok(invoke(["sweep", "--config", str(cfg), *FAST]))


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "vocab_size",
                "head_dim",
                "text_config",
            ]
        )
        | TEXT,
        JSONISH,
        max_size=8,
    )
)
def test_random_hugging_face_configs(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("hf") / "config.json"
    path.write_text(json.dumps(data))
    try:
        load_hf_config(path)
    except InputError as exc:
        assert exc.field.startswith("model")


VLLM_KEYS = [
    "method",
    "num_speculative_tokens",
    "model",
    "num_speculative_tokens_per_batch_size",
    "speculative_token_tree",
    "disable_by_batch_size",
    "prompt_lookup_max",
]


@FUZZ
@given(st.dictionaries(st.sampled_from(VLLM_KEYS) | TEXT, JSONISH, max_size=5))
def test_random_vllm_speculative_configs(data):
    try:
        to_method(data)
    except InputError as exc:
        assert exc.field.startswith("speculative_config")
    result = invoke(["sweep", "--speculative-config", json.dumps(data), *FAST])
    _one_line_or_ok(result)


@FUZZ
@given(st.lists(st.lists(TEXT, min_size=1, max_size=6), max_size=5))
def test_random_validation_csvs(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("csv") / "cases.csv"
    path.write_text("\n".join(",".join(r) for r in rows))
    _one_line_or_ok(invoke(["calibrate", "report", "--cases", str(path)]))


@pytest.mark.parametrize("flag", ["--speculative-config", "--config", "--grid"])
def test_missing_files_and_bad_json_text(tmp_path, flag):
    value = "{not json" if flag == "--speculative-config" else str(tmp_path / "missing.yaml")
    _one_line_or_ok(invoke(["sweep", *FAST, flag, value]))


# plausible cells for `simspec validate` (and junk): rows must each come out ok or skipped
_CELLS = {
    "metric": ["speedup", "tau", "tpot_ms", "throughput_tok_s", "step_time_ms", "latency"],
    "method": ["autoregressive", "eagle3", "eagle2", "medusa1", "pld", "draft_model", "other"],
    "target_model": ["llama-3.1-8b", "vicuna-7b", "llama-2-7b", "other"],
    "draft_model": ["", "vicuna-68m", "llama-3.2-1b", "self", "unknown"],
    "gpu": ["h100_sxm", "a100_80gb", "rtx3090", "unknown", ""],
    "tp": ["", "1", "2", "3", "0"],
    "num_gpus": ["", "1", "4"],
    "engine": ["vllm", "sglang", "hf", "gpt-fast", "trtllm"],
    "load_kind": ["single", "static_batch", "concurrency", "qps", "poisson"],
    "load": ["1", "2", "4", "0.5", "", "-3", "1e12"],
    "temperature": ["", "0", "1", "0.7", "9"],
    "dataset": ["mt-bench", "gsm8k", "sharegpt", "humaneval", "mixed", "weird"],
    "prompt_len": ["32", "128", "", "0"],
    "output_len": ["16", "64", "", "-1"],
    "spec_shape": ["chain", "tree", "none", ""],
    "k": ["", "0", "1", "3", "7", "99"],
    "tree_nodes": ["", "16", "60", "5000"],
    "tree_topk": ["", "4", "10", "100"],
    "measured_tau": ["", "1.5", "3.2", "9", "~2"],
    "measured_value": ["1.5", "7.2", "150", "0", "~1.5", "1.64-1.80", ""],
    "baseline": ["same-engine-no-spec", "hf-vanilla", "other: x", ""],
    "uses_trace": ["no", "yes", ""],
}


@FUZZ
@given(
    st.lists(
        st.fixed_dictionaries({c: st.sampled_from(v) | TEXT for c, v in _CELLS.items()}),
        min_size=1,
        max_size=3,
    )
)
def test_random_validate_rows(tmp_path_factory, rows):
    import pandas as pd

    from simspec.studies.validation.cases import COLUMNS

    tmp = tmp_path_factory.mktemp("validate")
    cases, out = tmp / "cases.csv", tmp / "pred.csv"
    frame = pd.DataFrame([{**{c: "" for c in COLUMNS}, **r} for r in rows])
    frame["case_id"] = [f"r{i}" for i in range(len(rows))]
    frame.to_csv(cases, index=False)
    given = pd.read_csv(cases, dtype=str, keep_default_na=False)  # as any CSV reader sees it
    result = invoke(["validate", "--cases", str(cases), "--out", str(out), "--workers", "1"])
    _one_line_or_ok(result, out)
    if result.exit_code == 0:
        pred = pd.read_csv(out, dtype=str, keep_default_na=False)
        assert list(pred["case_id"]) == list(given["case_id"])
        assert set(pred["status"]) <= {"ok", "skipped"}
        assert (pred.loc[pred["status"] == "skipped", "skip_reason"] != "").all()
