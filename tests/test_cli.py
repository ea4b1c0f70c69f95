"""The command line: the default sweep, config files, and one-line errors with exit code 2."""

import subprocess
import sys
from concurrent.futures.process import BrokenProcessPool

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from simspec.cli.common import one_line_errors
from simspec.cli.main import app
from simspec.cli.sweep_flags import SweepFlags
from simspec.config import Deployment, LengthSpec
from simspec.errors import InputError, ScenarioError
from simspec.studies.sweep import COLUMNS

runner = CliRunner()
FAST = ["--batch-sizes", "1,8", "--requests", "16"]
REQUIRED = [
    "model",
    "gpu",
    "tp",
    "method",
    "k",
    "batch_size",
    "speedup",
    "throughput_tok_s",
    "tpot_ms_p50",
    "tpot_ms_p99",
    "ttft_ms_p50",
    "mean_accept_len",
    "draft_time_frac",
    "verify_time_frac",
    "requests",
    "seed",
]


def sweep(*args):
    return runner.invoke(app, ["sweep", *args])


@pytest.mark.slow
def test_sweep_prints_speedup_table_and_writes_the_documented_csv(tmp_path):
    out = tmp_path / "speedup.csv"
    result = sweep(*FAST, "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "Speedup over autoregressive" in result.output
    frame = pd.read_csv(out)
    assert list(frame.columns) == COLUMNS and set(REQUIRED) <= set(frame.columns)
    assert set(frame.method) == {"autoregressive", "eagle3", "ngram"}
    assert sorted(frame.batch_size.unique()) == [1, 8]
    assert (frame[frame.method == "autoregressive"].speedup == 1.0).all()


@pytest.mark.slow
def test_same_flags_and_seed_write_identical_csv(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    assert sweep(*FAST, "--seed", "5", "--out", str(a)).exit_code == 0
    assert sweep(*FAST, "--seed", "5", "--out", str(b)).exit_code == 0
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.slow
def test_config_file_sets_what_flags_set_and_flags_override_it(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text(
        "batch_sizes: [2]\nseed: 3\nworkload: {requests: 12, lengths_from: gsm8k}\n"
        "methods:\n  - {name: autoregressive}\n"
        "  - {name: draft_model, k: 2, draft_model: llama-3.2-1b, acceptance: {alpha: 0.6}}\n"
    )
    out = tmp_path / "o.csv"
    result = sweep("--config", str(cfg), "--k", "4", "--out", str(out))
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert set(frame.method) == {"autoregressive", "draft_model"}
    assert frame.seed.unique().tolist() == [3] and frame.batch_size.unique().tolist() == [2]
    assert frame[frame.method == "draft_model"].k.item() == 4


@pytest.mark.slow
def test_json_config_and_alpha_override(tmp_path):
    cfg = tmp_path / "s.json"
    cfg.write_text('{"batch_sizes": [1], "workload": {"requests": 8}}')
    out = tmp_path / "o.csv"
    result = sweep("--config", str(cfg), "--methods", "eagle3", "--alpha", "0.5", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert pd.read_csv(out).acceptance.tolist() == ["alpha=0.5"]


BAD_INPUTS = [
    (["--model", "gpt-17"], "model"),
    (["--gpu", "tpu_v9"], "gpu"),
    (["--batch-sizes", "0,4"], "batch_sizes"),
    (["--batch-sizes", "-3"], "batch_sizes"),
    (["--batch-sizes", "a,b"], "--batch-sizes"),
    (["--alpha", "1.5"], "alpha"),
    (["--alpha", "-0.2"], "alpha"),
    (["--k", "-1"], "k"),
    (["--tp", "3"], "tp"),
    (["--methods", "medusa9"], "--methods"),
    (["--methods", "draft_model", "--draft-model", "qwen3-0.6b"], "draft_model"),
    (["--dataset", "nosuch"], "--dataset"),
    (["--requests", "0"], "requests"),
    (["--engine", "tgi"], "engine"),
    (["--tau", "9", "--tau-k", "3"], "tau"),
]


@pytest.mark.parametrize(("args", "field"), BAD_INPUTS)
def test_bad_input_exits_2_with_one_line_naming_the_field_and_writes_nothing(tmp_path, args, field):
    out = tmp_path / "never.csv"
    result = sweep(*FAST, *args, "--out", str(out))
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and field in lines[0], result.output
    assert "Traceback" not in result.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_unreadable_trace_and_config_files_are_clear_errors(tmp_path):
    bad_trace = tmp_path / "t.jsonl"
    bad_trace.write_text('{"id": 1, "prompt_len": 5}\n')
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "methods:\n  - name: eagle3\n"
        f"    acceptance: {{acc_len: {bad_trace}, acc_len_method: eagle3}}\n"
    )
    result = sweep(*FAST, "--config", str(cfg))
    assert result.exit_code == 2 and "acceptance.acc_len" in result.output
    for text in ["batch_sizes: [1", "- just\n- a list\n", "unknown_field: 3\n"]:
        cfg.write_text(text)
        result = sweep("--config", str(cfg))
        assert result.exit_code == 2 and result.output.startswith("error:"), result.output
    assert sweep("--config", str(tmp_path / "missing.yaml")).exit_code == 2


def test_model_that_does_not_fit_is_a_clear_error():
    result = sweep(*FAST, "--model", "llama-3.1-70b")
    assert result.exit_code == 2 and "does not fit" in result.output


def test_help_explains_every_option():
    result = runner.invoke(app, ["sweep", "--help"])
    assert result.exit_code == 0
    for option in [
        "--config",
        "--model",
        "--gpu",
        "--tp",
        "--methods",
        "--k",
        "--batch-sizes",
        "--alpha",
        "--tau",
        "--dataset",
        "--out",
        "--seed",
    ]:
        assert option in result.output


@pytest.mark.slow
def test_installed_console_script_reports_bad_input_without_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "simspec.cli", "sweep", "--gpu", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "gpu" in proc.stderr


def _raise(exc: BaseException) -> None:
    raise exc


ERRORS = [
    (lambda: Deployment(tp=3), "error: tp: "),
    (lambda: _raise(InputError("--out", "bad\nname")), "error: --out: bad\\nname"),
    (lambda: _raise(ScenarioError("model does not fit")), "error: model does not fit"),
    (lambda: open("/nonexistent/dir/x.csv"), "error: cannot read or write a file: "),
    (lambda: _raise(BrokenProcessPool("gone")), "error: a worker process died"),
]


@pytest.mark.parametrize(("cause", "start"), ERRORS)
def test_every_command_error_is_one_line_and_exit_2(cause, start):
    @one_line_errors
    def command() -> None:
        cause()

    tiny = typer.Typer()
    tiny.command()(command)
    result = runner.invoke(tiny, [])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(start), result.output
    assert "Traceback" not in result.output


def test_an_output_file_that_cannot_be_written_names_its_flag(tmp_path):
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "t.csv"  # its folder is a file
    result = runner.invoke(app, ["analytic", "--k-max", "2", "--csv", str(out)])
    last = result.output.splitlines()[-1]  # after the tables it printed
    assert result.exit_code == 2 and last.startswith(f"error: --csv: cannot write {str(out)!r}")


def test_flags_override_a_scenario_file_field_by_field(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text(
        "seed: 3\ngpu: h200\nscheduler: {max_num_seqs: 8}\n"
        "workload: {requests: 12, lengths_from: gsm8k}\n"
    )
    flags = SweepFlags(seed=5, requests=20, max_num_batched_tokens=4096)
    cfg_sweep = flags.sweep_config(cfg)
    assert (cfg_sweep.seed, cfg_sweep.gpu) == (5, "h200")
    assert (cfg_sweep.workload.requests, cfg_sweep.workload.lengths_from) == (20, "gsm8k")
    assert (cfg_sweep.scheduler.max_num_seqs, cfg_sweep.scheduler.max_num_batched_tokens) == (
        8,
        4096,
    )
    fixed = SweepFlags(prompt_len=64, output_len=8).sweep_config(cfg).workload  # the trace's
    assert fixed.lengths_from is None and fixed.prompt == LengthSpec(dist="fixed", mean=64)
    lengths = tmp_path / "l.yaml"  # a file's own fixed lengths: a flag replaces its side only
    lengths.write_text(
        "workload: {lengths_from: null, prompt: {dist: lognormal, mean: 300, cv: 1}}\n"
    )
    mixed = SweepFlags(output_len=8).sweep_config(lengths).workload
    assert mixed.prompt.dist == "lognormal" and mixed.output == LengthSpec(mean=8)


def test_models_refuses_a_layout_without_a_model_and_one_a_run_would_refuse():
    bare = runner.invoke(app, ["models", "--tp", "8", "--ep", "8"])
    assert bare.exit_code == 2 and "error: --tp:" in bare.output
    trt = runner.invoke(
        app, ["models", "qwen3-30b-a3b", "--engine", "trtllm", "--tp", "4", "--dp", "2"]
    )
    assert trt.exit_code == 2 and "error: dp:" in trt.output and "trtllm" in trt.output


def test_models_says_what_a_windowed_models_window_layers_hold():
    result = runner.invoke(app, ["models", "gpt-oss-120b", "--tp", "2"])
    assert result.exit_code == 0, result.output
    assert "the windowed layers hold" in " ".join(result.output.split())


def test_a_speedup_table_too_wide_for_a_pipe_keeps_every_interval_whole(tmp_path):
    """QA: piped at 80 columns, the methods-as-rows table cut every interval to "±0.…"; the
    batch sizes that do not fit go to a continuation table instead."""
    cfg = tmp_path / "w.yaml"
    cfg.write_text(
        "batch_sizes: [1, 2, 4, 8, 16, 32]\n"
        "workload: {requests: 8, turnovers: 0}\n"
        "methods:\n"
        "  - {name: autoregressive}\n"
        "  - {name: eagle3, k: 3, acceptance: {alpha: 0.7}}\n"
        "  - {name: eagle3, k: 5, acceptance: {alpha: 0.7}}\n"
        "  - {name: eagle2, k: 6, tree: dynamic, tree_nodes: 60, tree_topk: 10, "
        "acceptance: {alpha: 0.7}}\n"
    )
    result = CliRunner().invoke(app, ["sweep", "--config", str(cfg), "--executor", "serial"])
    assert result.exit_code == 0, result.output
    assert "…" not in result.output and "(continued)" in result.output


def test_models_name_refuses_wide_which_it_does_not_read():
    """QA: `simspec models NAME --wide` dropped the flag silently."""
    out = CliRunner().invoke(app, ["models", "llama-3.1-8b", "--wide"])
    assert out.exit_code == 2
    assert out.output.strip().splitlines()[-1].startswith("error: --wide: ")
