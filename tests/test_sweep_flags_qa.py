"""Sweep flags against each other and against a scenario file, and what the sweep says of
them (QA, stop 61): a dataset flag never loses quietly to a token trace or to a file's fixed
lengths, the sampling note follows where acceptance was measured, a check's error is the first
cell's whatever the string hashing, draft_tp is blank at the target's tp, a refusal names a
--config file only where the command reads one, and --assume-gpu is named as typed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from simspec.cli.main import app
from simspec.cli.sweep_flags import SweepFlags
from simspec.config import Scenario
from tests.conftest import ROOT
from tests.refusals import one_error

runner = CliRunner()
SMALL = ["--executor", "serial", "--batch-sizes", "1", "--requests", "16"]
CASES = ROOT.parent / "shared" / "validation" / "cases.csv"


def _file(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_dataset_beside_a_token_trace_of_another_is_refused():
    result = runner.invoke(
        app, ["sweep", *SMALL, "--dataset", "gsm8k", "--token-trace", "sharegpt"]
    )
    one_error(result, "--token-trace", "'sharegpt'", "'gsm8k'", "give one of them")


def test_the_dataset_flag_replaces_a_files_fixed_lengths(tmp_path):
    workload = {"requests": 16, "prompt": {"mean": 100}, "output": {"mean": 50}}
    config = _file(tmp_path, {"batch_sizes": [1], "workload": workload})
    cfg = SweepFlags(dataset="gsm8k").sweep_config(config)
    assert cfg.workload.lengths_from == "gsm8k"
    assert cfg.workload.prompt is None or cfg.workload.prompt.mean != 100


@pytest.mark.parametrize(
    ("run_t", "line"),
    [
        (1.0, "acceptance measured at T=1, top-p=1, as the run samples: used as measured"),
        (0.0, "sampling at T=0, top-p=1: acceptance measured at T=1, top-p=1 x"),
    ],
)
def test_the_sampling_note_follows_where_acceptance_was_measured(tmp_path, run_t, line):
    """QA: an α measured at T=1 and run at T=1 was noted "x 0.845 of greedy" and ran
    unscaled; run at T=0 it was scaled up without a note."""
    eagle = {"name": "eagle3", "acceptance": {"alpha": 0.8, "temperature": 1.0}}
    data = {"batch_sizes": [1], "temperature": run_t, "workload": {"requests": 16}}
    config = _file(tmp_path, data | {"methods": [{"name": "autoregressive"}, eagle]})
    result = runner.invoke(app, ["sweep", "--executor", "serial", "--config", str(config)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert line in text and "of greedy" not in text


def test_cells_are_checked_in_the_sweeps_order(monkeypatch):
    """QA: the cells were checked in a set's order, so which refusal was named changed with
    the interpreter's string hashing."""
    import simspec.studies.sweep as sweep

    seen: list[str] = []
    monkeypatch.setattr(sweep, "check_runnable", lambda sc: seen.append(sc.model))
    names = ["llama-3.1-8b", "qwen3-8b", "llama-3.1-70b", "qwen3-8b"]
    todo = [SimpleNamespace(scenario_json=Scenario(model=m).model_dump_json()) for m in names]
    sweep.check_cells(todo)  # type: ignore[arg-type]
    assert seen == ["llama-3.1-8b", "qwen3-8b", "llama-3.1-70b"]


def test_draft_tp_is_blank_where_the_draft_runs_at_the_targets_tp(tmp_path):
    eagle = {"name": "eagle3", "draft_tp": 1}
    config = _file(tmp_path, {"batch_sizes": [1], "methods": [eagle], "workload": {"requests": 16}})
    out = tmp_path / "t.csv"
    args = ["sweep", "--executor", "serial", "--config", str(config), "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out)
    assert table.draft_tp.isna().all() and "draft TP" not in result.output


def test_a_refusal_names_a_config_file_only_where_the_command_reads_one(tmp_path):
    if not CASES.exists():
        pytest.skip("../shared is not here")
    rows = pd.read_csv(CASES, dtype=str, keep_default_na=False).head(1)
    cases = tmp_path / "c.csv"
    rows.to_csv(cases, index=False)
    out = tmp_path / "x.csv"
    args = ["validate", "--workers", "1", "--cases", str(cases), "--profile", "nope"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    line = one_error(result, "profile", "(the flag --profile)")
    assert "--config" not in line
    sweep = runner.invoke(app, ["sweep", "--profile", "nope"])
    assert "(the flag --profile, or profile in a --config file)" in " ".join(sweep.output.split())


def test_a_row_filled_by_assume_gpu_names_that_flag():
    if not CASES.exists():
        pytest.skip("../shared is not here")
    from simspec.studies.validation.predict import plan_case

    rows = pd.read_csv(CASES, dtype=str, keep_default_na=False)
    row = rows[rows.gpu == "unknown"].iloc[0].to_dict()
    plan = plan_case(row, "h200")
    assert "gpu not stated: h200 assumed (--assume-gpu h200)" in plan.assumptions
    plan = plan_case(row, assume={"gpu": "h200"})
    assert "gpu not stated: h200 assumed (--assume gpu=h200)" in plan.assumptions


def test_fixed_length_flags_stay_beside_a_dataset_flag():
    """QA: the dataset flag's replacement of a file's fixed lengths dropped --prompt-len and
    --output-len too, running the default 512/256 tokens under a "fixed lengths" title."""
    cfg = SweepFlags(dataset="gsm8k", prompt_len=100, output_len=50).sweep_config(None)
    assert cfg.workload.lengths_from is None
    assert (cfg.workload.prompt.mean, cfg.workload.output.mean) == (100, 50)


@pytest.mark.parametrize(
    ("command", "body"),
    [
        (["sweep", "--concurrencies", "1"], "methods:\n  - {name: eagle3, k: 0}\n"),
        (["fleet", "--qps", "2", "--requests", "20"], "method: {name: eagle3, k: 0}\n"),
    ],
)
def test_a_files_speculative_method_at_k_0_is_refused_as_k_0_is(tmp_path, command, body):
    """K = 0 drafts nothing: a file's speculative method at k: 0 is refused naming its field,
    as --k 0, a grid's k: [0] and num_speculative_tokens: 0 are (QA: it ran, "K=0 1.00x")."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(body)
    result = runner.invoke(app, [command[0], "--config", str(cfg), *command[1:]])
    one_error(result, "methods.eagle3.k: must be 1 to 64 (got 0)")


def test_a_default_tree_the_engine_drafts_as_a_chain_is_said():
    """QA: medusa1 and eagle1 ran as chains on vllm (no speculative_token_tree) while
    `simspec methods` showed their default trees, and the sweep said nothing."""
    from simspec.catalog.methods import preset_method
    from simspec.studies.sweep import picked_shape_notes

    methods = [preset_method(n, "sharegpt", None, "llama-3.1-8b", "vllm") for n in
               ("medusa1", "eagle3")]  # fmt: skip
    assert methods[0].tree == "chain"
    (line,) = picked_shape_notes("llama-3.1-8b", "vllm", methods)
    assert line.startswith("note: medusa1: the engine drafts a chain unless its config gives")
    assert "static tree runs as a chain of 4" in line
    tree = preset_method("medusa1", "sharegpt", None, "llama-3.1-8b", "sglang")
    assert not any("medusa1" in n for n in picked_shape_notes("llama-3.1-8b", "sglang", [tree]))
