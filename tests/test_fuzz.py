"""Fuzzing the input layer: random and malformed CLI values, config files, trace files, Hugging
Face configs, vLLM speculative configs and validation CSVs. Each is accepted or rejected with
one `error:` line naming the field (exit code 2), never a traceback, never half a file."""

from __future__ import annotations

import io
import json
import math
import os
import signal
import string
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from unittest.mock import patch

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from simspec.catalog.models import load_hf_config
from simspec.catalog.vllm import to_method
from simspec.cli.main import main
from simspec.errors import InputError
from tests.conftest import ROOT

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


@pytest.mark.slow
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


@pytest.mark.slow
@FUZZ
@given(JSONISH)
def test_random_config_files(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("cfg")
    cfg, out = folder / "c.json", folder / "out.csv"
    cfg.write_text(json.dumps(data))
    _one_line_or_ok(invoke(["sweep", "--config", str(cfg), *FAST, "--out", str(out)]), out)


@pytest.mark.slow
@FUZZ
@given(st.binary(max_size=200) | TEXT.map(str.encode))
def test_malformed_config_file_bytes(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("raw")
    cfg = folder / "c.yaml"
    cfg.write_bytes(data)
    _one_line_or_ok(invoke(["sweep", "--config", str(cfg), *FAST]))


@pytest.mark.slow
@FUZZ
@given(st.lists(JSONISH, max_size=4))
def test_random_trace_files(tmp_path_factory, records):
    folder = tmp_path_factory.mktemp("trace")
    trace, cfg = folder / "t.jsonl", folder / "c.yaml"
    trace.write_text("\n".join(json.dumps(r) for r in records))
    cfg.write_text(
        f"methods: [{{name: eagle3, acceptance: {{acc_len: '{trace}', acc_len_method: eagle3}}}}]\n"
    )
    _one_line_or_ok(invoke(["sweep", "--config", str(cfg), *FAST]))


@pytest.mark.slow
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
    "draft_tensor_parallel_size",
]


@pytest.mark.slow
@FUZZ
@given(st.dictionaries(st.sampled_from(VLLM_KEYS) | TEXT, JSONISH, max_size=5))
def test_random_vllm_speculative_configs(data):
    try:
        to_method(data)
    except InputError as exc:
        assert exc.field.startswith("speculative_config")
    result = invoke(["sweep", "--speculative-config", json.dumps(data), *FAST])
    _one_line_or_ok(result)


@pytest.mark.slow
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


@pytest.mark.slow
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


# -- hostile inputs: depth, size, special files, non-finite numbers ------------------
# Each was a hang, a memory blow-up or a traceback; each must be one error line, refused at once.
DEEP = "[" * 100_000 + "]" * 100_000
HUGE_INT = "1" * 5_000  # past Python's 4,300-digit limit for int(str)
LONG_PATH = "x" * 5_000  # past NAME_MAX and PATH_MAX: ENAMETOOLONG


@contextmanager
def within(seconds: int) -> Iterator[None]:
    """Fail (not stall CI) when the block runs past ``seconds``: a hang or a runaway read."""

    def stop(*_: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def refused(args: list[str], *needles: str, seconds: int = 30) -> Result:
    """``args`` fail with one ``error:`` line (exit 2) containing ``needles``, within
    ``seconds`` (a TimeoutError there is an OSError: the CLI would report it, the test fails)."""
    with within(seconds):
        result = invoke(args)
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert result.exit_code == 2, (result.exit_code, result.output[-500:])
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output[-500:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return result


def _trace_config(folder, trace) -> str:
    cfg = folder / "c.yaml"
    cfg.write_text(
        f"methods: [{{name: eagle3, acceptance: {{acc_len: '{trace}', acc_len_method: eagle3}}}}]\n"
    )
    return str(cfg)


# every entry point that reads a user's file: (arguments with {f} for the file, field named)
FILE_INPUTS = {
    "model": (["sweep", *FAST, "--model", "{f}"], "model"),
    "profile": (["sweep", *FAST, "--profile", "{f}"], "profile"),
    "config": (["sweep", *FAST, "--config", "{f}"], "--config"),
    "grid": (["sweep", *FAST, "--grid", "{f}"], "--grid"),
    "speculative-config": (["sweep", *FAST, "--speculative-config", "@{f}"], "--speculative"),
    "cases": (["validate", "--cases", "{f}", "--workers", "1"], "--cases"),
    "rate-csv": (["policy", "--config", "examples/policy.yaml", "--rate-csv", "{f}"], "--rate-csv"),
    "token-trace": (["sweep", *FAST, "--token-trace", "{f}"], "--token-trace"),
}


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("entry", sorted(FILE_INPUTS))
@pytest.mark.parametrize("special", ["/dev/zero", "fifo", "directory"])
def test_special_files_are_refused_before_reading(entry, special, tmp_path, request):
    """/dev/zero (endless), a FIFO with no writer (blocks open), a directory: not files."""
    if special == "fifo":
        path = str(request.getfixturevalue("fifo"))
    elif special == "directory":
        path = str(tmp_path)
    else:
        path = special
    args, field = FILE_INPUTS[entry]
    refused([a.replace("{f}", path) for a in args], field)


def test_special_files_as_a_trace_are_refused(tmp_path, fifo):
    for path in ("/dev/zero", fifo):
        refused(["sweep", "--config", _trace_config(tmp_path, path), *FAST], "acceptance.acc_len")


@pytest.mark.slow
def test_a_case_rows_target_model_on_dev_zero_skips_that_row(tmp_path):
    import pandas as pd

    from simspec.studies.validation.cases import read_cases

    rows = read_cases()
    rows = rows[rows.metric == "tau"].head(2).copy()
    rows.iloc[0, rows.columns.get_loc("target_model")] = "/dev/zero"
    cases, out = tmp_path / "cases.csv", tmp_path / "pred.csv"
    rows.to_csv(cases, index=False)
    with within(30):
        result = invoke(["validate", "--cases", str(cases), "--out", str(out), "--workers", "1"])
    assert result.exit_code == 0, result.output
    pred = pd.read_csv(out, keep_default_na=False)
    assert list(pred.status) == ["skipped", "ok"] and "/dev/zero" in pred.skip_reason.iloc[0]


@pytest.mark.parametrize("entry", sorted(FILE_INPUTS))
def test_a_5000_character_path_is_one_error_line(entry):
    args, field = FILE_INPUTS[entry]
    refused([a.replace("{f}", LONG_PATH) for a in args], field)


def test_a_5000_character_trace_or_output_path_is_one_error_line(tmp_path):
    refused(["sweep", "--config", _trace_config(tmp_path, LONG_PATH), *FAST], "acceptance.acc_len")
    refused(["sweep", *FAST, "--out", str(tmp_path / LONG_PATH)])


@pytest.mark.parametrize(
    ("name", "args", "field"),
    [
        ("c.json", ["sweep", *FAST, "--config", "{f}"], "--config"),
        ("c.yaml", ["sweep", *FAST, "--config", "{f}"], "--config"),
        ("config.json", ["sweep", *FAST, "--model", "{f}"], "model"),
        ("p.yaml", ["sweep", *FAST, "--profile", "{f}"], "profile"),
        ("s.json", ["sweep", *FAST, "--speculative-config", "@{f}"], "--speculative"),
    ],
)
@pytest.mark.parametrize("text", [DEEP, '{"a": ' + HUGE_INT + "}"], ids=["deep", "huge-int"])
def test_deep_nesting_and_huge_integers_in_files(tmp_path, name, args, field, text):
    path = tmp_path / name
    path.write_text(text)
    refused([a.replace("{f}", str(path)) for a in args], field)


@pytest.mark.parametrize("text", [DEEP, '{"method": ' + HUGE_INT + "}"], ids=["deep", "huge-int"])
def test_deep_nesting_and_huge_integers_inline(text):
    refused(["sweep", *FAST, "--speculative-config", text], "--speculative-config")


@pytest.mark.parametrize(
    "line",
    [
        DEEP,
        '{"prompt_len": ' + HUGE_INT + ', "output_len": 8, "acc_len": {"eagle3": [2]}}',
    ],
    ids=["deep", "huge-int"],
)
def test_deep_nesting_and_huge_integers_in_a_trace_line(tmp_path, line):
    trace = tmp_path / "t.jsonl"
    trace.write_text(line + "\n")
    refused(["sweep", "--config", _trace_config(tmp_path, trace), *FAST], "line 1")


@pytest.mark.slow
@FUZZ
@given(st.integers(1, 100) | st.integers(1, 100_000), st.sampled_from([".json", ".yaml"]))
def test_any_nesting_depth_is_read_or_refused_by_name(tmp_path_factory, depth, suffix):
    from simspec.catalog.tables import MAX_DEPTH
    from simspec.cli.flags import read_config

    cfg = tmp_path_factory.mktemp("depth") / f"c{suffix}"
    cfg.write_text('{"workload": ' + "[" * depth + "1" + "]" * depth + "}")
    try:
        read_config(cfg)
        assert depth + 1 <= MAX_DEPTH
    except InputError as exc:
        assert exc.field == "--config" and depth + 1 > MAX_DEPTH


# trace values that are not counts in [1, 2^31 - 1]: each named, with its line and field
BAD_COUNTS = [
    float("inf"),
    float("-inf"),
    float("nan"),
    1e30,
    100.7,
    2**31,
    2**32,
    2**32 + 1,
    True,
    False,
    0,
    -1,
    [3],
    "3",
    None,
]


@pytest.mark.slow
@FUZZ
@given(st.sampled_from(["prompt_len", "output_len", "acc_len"]), st.sampled_from(BAD_COUNTS))
def test_trace_counts_must_be_int32_integers(tmp_path_factory, key, value):
    from simspec.catalog.traces import load_trace

    rec = {"prompt_len": 16, "output_len": 8, "acc_len": {"eagle3": [2, 3]}}
    if key == "acc_len":
        rec["acc_len"]["eagle3"] = [2, value]
    else:
        rec[key] = value
    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    good = json.dumps({"prompt_len": 4, "output_len": 4, "acc_len": {"eagle3": [1]}})
    path.write_text(good + "\n" + json.dumps(rec) + "\n")
    with pytest.raises(InputError) as exc:
        load_trace(str(path), "eagle3")
    assert exc.value.field == "acceptance.acc_len"
    assert "line 2" in exc.value.message and key in exc.value.message


def test_acc_len_that_wraps_to_zero_as_int32_is_refused_not_replayed_forever(tmp_path):
    trace = tmp_path / "t.jsonl"  # the 30-byte hang: 4294967296 is 0 as int32
    trace.write_text('{"prompt_len": 1, "output_len": 1, "acc_len": {"eagle3": [4294967296]}}')
    refused(["sweep", "--config", _trace_config(tmp_path, trace), *FAST], "acc_len.eagle3")


@pytest.mark.parametrize("value", [True, 2**31, 2**63, 1.0, -1])
def test_token_trace_ids_must_be_int32_integers(tmp_path, value):
    from simspec.catalog.token_traces import load_token_trace

    path = tmp_path / "t.jsonl"
    rec = {"prompt_token_ids": [1, 2], "generated_token_ids": [3, value]}
    path.write_text(json.dumps(rec) + "\n")
    with pytest.raises(InputError, match="line 1: generated_token_ids"):
        load_token_trace(str(path))


def _gzip_trace_readers(monkeypatch) -> dict:
    """Both readers of a user's gzipped trace, their caps lowered to 1,000 bytes."""
    from simspec.catalog import arrival_traces, token_traces

    monkeypatch.setattr(arrival_traces, "MAX_ARRIVAL_TRACE_BYTES", 1_000)
    monkeypatch.setattr(token_traces, "MAX_TOKEN_TRACE_BYTES", 1_000)
    return {
        "arrival": arrival_traces.load_arrival_trace.__wrapped__,
        "token": token_traces.load_token_trace.__wrapped__,
    }


@pytest.mark.parametrize("reader", ["arrival", "token"])
def test_a_gzip_bomb_is_capped_after_decompression_by_every_trace_reader(
    tmp_path, monkeypatch, reader
):
    import gzip

    from simspec.catalog.tables import shown

    path = tmp_path / "bomb.jsonl.gz"
    path.write_bytes(gzip.compress(b" " * 100_000))  # 100 kB from a few hundred bytes
    assert path.stat().st_size < 1_000  # under the cap as a file: only inflating crosses it
    with pytest.raises(InputError) as err:
        _gzip_trace_readers(monkeypatch)[reader](str(path), "the.field")
    assert str(err.value) == f"the.field: {shown(path)} is larger than 1,000 bytes"


@pytest.mark.parametrize("reader", ["arrival", "token"])
@pytest.mark.parametrize("damage", ["corrupt", "truncated"])
def test_a_broken_gzip_trace_is_one_line_not_a_traceback(tmp_path, monkeypatch, reader, damage):
    import gzip

    good = gzip.compress(b'{"a": 1}\n' * 50)
    data = good[:10] + bytes(b ^ 0xFF for b in good[10:30]) + good[30:]  # bad code lengths
    path = tmp_path / "broken.jsonl.gz"
    path.write_bytes(data if damage == "corrupt" else good[:-5])
    with pytest.raises(InputError, match=r"^the\.field: cannot read .*broken\.jsonl\.gz"):
        _gzip_trace_readers(monkeypatch)[reader](str(path), "the.field")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["sweep", "--requests", "10000000"], "workload.requests"),
        (["sweep", "--batch-sizes", "100000"], "batch_sizes"),
        (["sweep", "--requests", "1000000"], "at most 2,000,000"),
        (["sweep", "--tau", "2", "--tau-k", "1000000000"], "--tau-k"),
        (
            [
                "plan",
                "--qps",
                "1",
                "--slo-ttft-ms",
                "1e3",
                "--slo-tpot-ms",
                "50",
                "--duration",
                "1e308",
            ],
            "--duration",
        ),
        (
            [
                "plan",
                "--qps",
                "1",
                "--slo-ttft-ms",
                "1e3",
                "--slo-tpot-ms",
                "50",
                "--duration",
                "inf",
            ],
            "--duration",
        ),
        (["plan", "--qps", "inf", "--slo-ttft-ms", "1e3", "--slo-tpot-ms", "50"], "--qps"),
        (["recommend", "--concurrencies", "1,100000000000000000000"], "--concurrencies"),
        # within vLLM's 1,024 running requests (the grid stops there), past the work bound
        (["recommend", "--k-max", "16", "--concurrencies", "1024,1000,900"], "concurrencies"),
        (["analytic", "--context", "1" + "0" * 23], "--context"),
        (["analytic", "--context", "1e23"], "--context"),
    ],
)
def test_every_size_has_a_bound_checked_before_work(args, needle):
    refused(args, needle)


def test_a_1000_by_1000_grid_is_refused_before_any_point_is_built(tmp_path):
    grid = tmp_path / "g.yaml"
    axis = ", ".join(str(i) for i in range(1000))
    top_p = ", ".join(f"{0.5 + i / 2000:.4f}" for i in range(1000))  # distinct (QA)
    grid.write_text(f"grid:\n  seed: [{axis}]\n  top_p: [{top_p}]\n")
    refused(["sweep", "--grid", str(grid)], "grid", "1,000,000 grid points", seconds=10)


def test_recommend_validates_the_concurrency_a_model_copy_would_skip():
    from simspec.config import Deployment, MethodConfig
    from simspec.studies.schedule.grid import recommend

    # 20,000 passed the old cap (100,000) and ran for minutes; the bound is 16,384
    with within(30), pytest.raises(ValidationError):
        recommend(Deployment(), MethodConfig(name="eagle3"), [1], (20_000,))


def test_plan_refuses_non_finite_rates_and_durations_from_any_caller():
    from simspec.config import Deployment
    from simspec.studies import capacity

    slo = capacity.Slo(1e3, 50.0)
    for qps, duration in [(math.inf, 60.0), (math.nan, 60.0), (1.0, math.inf), (1.0, 1e308)]:
        with pytest.raises(InputError):
            capacity.plan(Deployment(), [], qps, slo, 2.5, duration)


def test_a_yaml_alias_bomb_in_a_profile_fit_is_refused(tmp_path):
    packaged = yaml.safe_load((ROOT / "simspec/data/profiles/h100_sxm.yaml").read_text())
    lol = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)
    )
    text = yaml.safe_dump({k: v for k, v in packaged.items() if k != "fit"})
    text += "fit:\n" + "".join(f"  {line}\n" for line in lol.splitlines())
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    refused(["sweep", *FAST, "--profile", str(path)], "profile", "aliases", seconds=10)


@pytest.mark.parametrize("text", ["-" * 5_001 + "1", "(" * 5_000 + ")" * 5_000])
def test_a_pathological_speculative_token_tree_is_one_error_line(text):
    cfg = json.dumps(
        {"method": "eagle", "num_speculative_tokens": 3, "speculative_token_tree": text}
    )
    with pytest.raises(InputError, match="speculative_token_tree"):
        to_method(json.loads(cfg))
    refused(["sweep", *FAST, "--speculative-config", cfg], "speculative_token_tree")


def test_a_policy_k_schedule_with_a_negative_k_is_one_error_line(tmp_path):
    cfg = tmp_path / "p.yaml"
    cfg.write_text(
        "method: {name: eagle3, k: 3}\npolicy: {k_schedule: [[1, 8, -3]]}\n"
        "workload: {requests: 4, lengths_from: null, prompt: {mean: 16}, output: {mean: 8}}\n"
    )
    refused(["policy", "--config", str(cfg)], "policy.k_schedule")


def test_a_command_line_byte_that_is_not_utf8_is_one_error_line():
    # what Python makes of `--gpu $'\xff\xfe'` (surrogate escapes)
    refused(["sweep", *FAST, "--gpu", os.fsdecode(b"\xff\xfe")], "gpu", "UTF-8")


@pytest.mark.slow
def test_a_validate_row_at_1e_300_qps_skips_only_that_row(tmp_path):
    import pandas as pd

    from simspec.studies.validation.cases import read_cases

    every = read_cases()
    row = every[(every.load_kind == "qps") & (every.metric == "speedup")].head(1).copy()
    row["target_model"], row["method"], row["draft_model"] = "llama-3.1-8b", "eagle3", ""
    row["metric"], row["baseline"], row["load"] = "speedup", "same-engine-no-spec", "1e-300"
    row["case_id"] = "tiny-rate"
    other = every[every.metric == "tau"].head(1)
    cases, out = tmp_path / "cases.csv", tmp_path / "pred.csv"
    pd.concat([row, other]).to_csv(cases, index=False)
    result = invoke(["validate", "--cases", str(cases), "--out", str(out), "--workers", "1"])
    assert result.exit_code == 0, result.output[-800:]
    pred = pd.read_csv(out, keep_default_na=False)
    assert list(pred.status) == ["skipped", "ok"]
    assert "below simspec's lowest" in pred.skip_reason.iloc[0]


def test_calibrate_report_on_a_harness_table_with_no_whole_steps(tmp_path):
    cols = (
        "kind,op,num_seqs,q_per_seq,context_len,num_tokens,m,k,n,time_ms_median,tp,model,"
        "hidden_size,intermediate_size,num_attention_heads,num_key_value_heads,head_dim,vocab_size,"
        "gpu_name"
    )
    rows = [
        f"gemm,qkv_proj,{m},1,0,{m},{m},4096,6144,{0.01 * m},1,llama,4096,14336,32,8,128,128256,"
        "NVIDIA H100 80GB HBM3"
        for m in (1, 8, 64)
    ]
    harness = tmp_path / "h.csv"
    harness.write_text(cols + "\n" + "\n".join(rows) + "\n")
    result = invoke(["calibrate", "report", "--timings", str(harness)])
    assert result.exit_code == 0, result.output[-800:]
    assert "Whole steps" not in result.output


def test_an_unwritable_output_is_one_error_line_with_nothing_printed():
    # /sys refuses new files even to root (a read-only folder would not stop root)
    refused(["analytic", "--csv", "/sys/simspec-test.csv"], "--csv")
    refused(["analytic", "--html", "/sys/simspec-test.html"], "--html")
