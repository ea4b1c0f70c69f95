"""Every answer is labelled: a grid sweep shows every grid point, every output names the
precision, KV-cache dtype, engine profile and acceptance source it ran with, and every run
states in one line what its numbers rest on."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from simspec.catalog.methods import preset_method
from simspec.cli.main import app
from simspec.config import Deployment, MethodConfig
from simspec.studies.provenance import PROVENANCE_COLUMNS, rests_on

runner = CliRunner()
TINY = ["--batch-sizes", "1", "--requests", "8", "--turnovers", "1", "--executor", "serial"]
SMALL_WORKLOAD = "workload: {requests: 8, turnovers: 1}\n"


def lines_starting(output: str, prefix: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(prefix)]


# -- a grid sweep prints every grid point ---------------------------------------------------------


def test_every_cell_of_every_grid_point_is_printed(capsys):
    from simspec.cli.sweep import _print_points
    from simspec.studies.sweep import SweepConfig, cells

    cfg = SweepConfig(
        methods=[{"name": "eagle3", "acceptance": {"alpha": 0.6}}],
        batch_sizes=[1, 4],
        grid={"gpu": ["h100_sxm", "a100_80gb"], "seed": [0, 1], "k": [1, 2]},
    )
    rows, runs = [], {}  # a run shared by two points (the baseline of each K) has one speedup
    for c in cells(cfg):
        p = c.point
        speedup = runs.setdefault(c.scenario_json, 1 + len(runs) / 100)
        rows.append(
            {
                **{axis: getattr(p, axis) for axis in ("model", "gpu", "tp", "engine", "seed")},
                **{"temperature": p.temperature, "top_p": p.top_p, "dataset": "sharegpt"},
                **{"method": c.method.name, "k": c.method.k, "tree": "", "tree_nodes": 0},
                **{"batch_size": c.batch_size, "speedup": speedup, "acceptance": ""},
            }
        )
    frame = pd.DataFrame(rows)
    _print_points(frame, cfg)
    shown = capsys.readouterr()
    tables = shown.out.split("Speedup over autoregressive")[1:]
    assert len(tables) == 4  # GPU x seed; each table a column per K
    for table, (gpu, seed) in zip(
        tables, [(g, s) for g in ("h100_sxm", "a100_80gb") for s in (0, 1)], strict=True
    ):
        assert gpu in table and f"seed {seed}" in table
        mine = frame[(frame.gpu == gpu) & (frame.seed == seed)]
        for speedup in mine.speedup:
            assert f"{speedup:.2f}x" in table
    assert len(lines_starting(shown.err, "rests on:")) == 4


@pytest.mark.slow
def test_a_grid_sweep_prints_a_table_for_each_grid_point_with_every_cell(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "batch_sizes: [1]\n"
        + SMALL_WORKLOAD
        + "methods: [{name: eagle3, acceptance: {alpha: 0.6}}]\n"
        "grid: {gpu: [h100_sxm, a100_80gb], k: [1, 2]}\n"
    )
    out = tmp_path / "r.csv"
    result = runner.invoke(
        app, ["sweep", "--grid", str(grid), "--executor", "serial", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    # one table per GPU; the K axis gives each table a column per K
    assert result.output.count("Speedup over autoregressive") == 2
    assert "a100_80gb" in result.output.split("Speedup over autoregressive")[2]
    tables = result.output.split("Speedup over autoregressive")[1:]
    for gpu, table in zip(["h100_sxm", "a100_80gb"], tables, strict=True):
        rows = frame[(frame.gpu == gpu) & (frame.method == "eagle3")]
        assert sorted(rows.k) == [1, 2]
        for speedup in rows.speedup:
            assert f"{speedup:.2f}x" in table, (gpu, speedup)
    assert len(lines_starting(result.output, "rests on:")) == 2


# -- every output names what it ran with ----------------------------------------------------------


def test_the_model_line_names_the_precision_the_run_used_not_the_checkpoints(tmp_path):
    args = ["sweep", "--methods", "eagle3", "--precision", "fp8", "--kv-cache-dtype", "fp8"]
    result = runner.invoke(app, [*args, *TINY, "--out", str(tmp_path / "r.csv")])
    assert result.exit_code == 0, result.output
    assert "llama-3.1-8b: 8.0B parameters, dense, GQA, fp8 weights" in result.output
    assert "bf16 weights" not in result.output
    assert lines_starting(result.output, "ran with: fp8 weights, fp8 KV cache, engine vllm")
    frame = pd.read_csv(tmp_path / "r.csv")
    assert set(frame.precision) == {"fp8"} and set(frame.kv_cache_dtype) == {"fp8"}


def test_the_sweep_csv_names_precision_kv_dtype_engine_profile_and_acceptance_source(tmp_path):
    out = tmp_path / "r.csv"
    args = [
        "sweep",
        "--methods",
        "autoregressive,eagle3",
        "--gpu",
        "a100_80gb",
        "--precision",
        "fp8",
    ]
    result = runner.invoke(app, [*args, *TINY, "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out).set_index("method")
    # an A100 has no FP8 tensor cores: the FP8 weights run weight-only, and the row says so
    assert set(frame.precision) == {"fp8 (weight-only)"}
    assert set(frame.kv_cache_dtype) == {"bf16"}  # auto: the model's activation dtype
    assert set(frame.engine_profile) == {"vllm (vLLM V1, CUDA graphs, chunked prefill)"}
    assert frame.acceptance_source["eagle3"].startswith("eagle3 trace sharegpt")
    assert frame.acceptance_source["autoregressive"].startswith("none")


def test_the_recommend_csv_names_what_it_ran_with(tmp_path):
    config, out = tmp_path / "c.yaml", tmp_path / "r.csv"
    config.write_text(SMALL_WORKLOAD)
    args = ["recommend", "--k-max", "1", "--concurrencies", "1", "--config", str(config)]
    result = runner.invoke(app, [*args, "--kv-cache-dtype", "fp8", "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert set(PROVENANCE_COLUMNS) <= set(frame.columns)
    assert set(frame.kv_cache_dtype) == {"fp8"} and set(frame.precision) == {"bf16"}
    assert all(s.startswith("eagle3 trace") for s in frame.acceptance_source)
    assert len(lines_starting(result.output, "rests on: own eagle3 acceptance")) == 1


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_the_fleet_summary_names_what_it_ran_with(tmp_path, suffix):
    summary = tmp_path / f"s{suffix}"
    args = ["fleet", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--qps", "1"]
    args += ["--requests", "4", "--method", "eagle3", "--precision", "fp8"]
    result = runner.invoke(app, [*args, "--summary", str(summary)])
    assert result.exit_code == 0, result.output
    if suffix == ".json":
        row = json.loads(summary.read_text())
    else:
        row = pd.read_csv(summary).iloc[0].to_dict()
    assert row["precision"] == "fp8" and row["kv_cache_dtype"] == "bf16"
    assert row["engine_profile"].startswith("vllm (")
    assert row["acceptance_source"].startswith("eagle3 trace sharegpt")
    assert len(lines_starting(result.output, "rests on: own eagle3 acceptance")) == 1


def test_the_plan_csv_names_what_each_method_ran_with(tmp_path, monkeypatch):
    from simspec.studies import capacity

    def plan_without_probes(deploy, methods, *args, **kwargs):  # the columns, not the search
        rows = [{c: 1.0 for c in capacity.PLAN_COLUMNS} | {"method": m.name} for m in methods]
        return pd.DataFrame(rows, columns=capacity.PLAN_COLUMNS)

    monkeypatch.setattr(capacity, "plan", plan_without_probes)
    out = tmp_path / "p.csv"
    args = ["plan", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "50", "--qps", "1"]
    args += ["--methods", "eagle3", "--engine", "vllm-v0"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out).set_index("method")
    assert list(frame.index) == ["autoregressive", "eagle3"]
    assert frame.engine_profile.iloc[0].startswith("vllm-v0 (vLLM V0")
    assert frame.acceptance_source["eagle3"].startswith("eagle3 trace sharegpt")
    assert frame.acceptance_source["autoregressive"].startswith("none")
    assert set(frame.precision) == {"bf16"} and set(frame.kv_cache_dtype) == {"bf16"}
    assert len(lines_starting(result.output, "rests on: own eagle3 acceptance")) == 1


def _ar() -> MethodConfig:
    return MethodConfig(name="autoregressive", k=0)


# -- every run states what its numbers rest on ----------------------------------------------------


def test_eagle3_on_deepseek_v3_says_it_replays_llama_3_1_8b_acceptance():
    line = rests_on(Deployment(model="deepseek-v3", gpu="h200", tp=8), [preset_method("eagle3")])
    assert line.startswith("rests on: llama-3.1-8b's eagle3 acceptance;")


def test_a_methods_own_models_acceptance_is_called_its_own():
    line = rests_on(Deployment(), [_ar(), preset_method("eagle3"), preset_method("ngram")])
    assert line.startswith("rests on: own eagle3, ngram acceptance;")
    assert len(line) <= 100  # the default run's line fits a wide terminal


def test_a_transferred_gpu_profile_names_the_gpu_it_came_from():
    assert "b200 profile from h100_sxm" in rests_on(Deployment(gpu="b200"), [_ar()])
    assert "a100_80gb profile: attention from h100_sxm" in rests_on(
        Deployment(gpu="a100_80gb"), [_ar()]
    )
    assert "h100_sxm's own profile" in rests_on(Deployment(), [_ar()])


def test_a_model_family_without_validation_cases_says_so():
    line = rests_on(Deployment(model="qwen3-30b-a3b"), [_ar()])
    assert line.endswith("no validation case of any qwen3_moe model")
    assert rests_on(Deployment(), [_ar()]).endswith("validation cases of this model")


def test_a_proxy_and_a_given_acceptance_are_labelled_as_such():
    given = MethodConfig(name="eagle3", acceptance={"alpha": 0.6})
    line = rests_on(Deployment(), [preset_method("medusa2"), given])
    assert "vicuna-13b's medusa2 (proxy) acceptance" in line
    assert "given eagle3 acceptance" in line


def test_plain_decoding_rests_on_no_acceptance_but_still_prints_the_line():
    line = rests_on(Deployment(), [_ar()])
    assert line.startswith("rests on: plain decoding (no acceptance);")


def test_the_closed_form_too_says_what_it_rests_on():
    result = runner.invoke(app, ["analytic", "--method", "eagle3", "--gpu", "b200"])
    assert result.exit_code == 0, result.output
    (line,) = lines_starting(result.output, "rests on:")
    assert "given eagle3 acceptance" in line and "b200 profile from h100_sxm" in line


def test_acceptance_of_another_dataset_than_the_lengths_is_said():
    """QA: --dataset gsm8k over a --config file stating ShareGPT's acceptance switched the
    request lengths only, with no word."""
    from simspec.config import AcceptanceConfig, Deployment, MethodConfig, WorkloadConfig
    from simspec.studies.provenance import dataset_notes

    eagle = MethodConfig(
        name="eagle3", k=3, acceptance=AcceptanceConfig(acc_len="sharegpt", acc_len_method="eagle3")
    )
    on = Deployment(workload=WorkloadConfig(lengths_from="gsm8k"))
    (note,) = dataset_notes(on, [eagle])
    assert "replays sharegpt's acceptance" in note and "come from gsm8k" in note
    assert dataset_notes(Deployment(), [eagle]) == []  # sharegpt's lengths, sharegpt's records
    alpha = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))
    assert dataset_notes(on, [alpha]) == []


def test_a_method_replaying_another_methods_records_of_a_users_trace_says_so(tmp_path):
    from simspec.config import AcceptanceConfig, Deployment, MethodConfig
    from simspec.studies.provenance import rests_on

    trace = tmp_path / "mytrace.jsonl"
    trace.write_text('{"prompt_len": 10, "output_len": 4, "acc_len": {"eagle3": [2, 3]}}\n')
    acc = AcceptanceConfig(acc_len=str(trace), acc_len_method="eagle3")
    methods = [MethodConfig(name=n, k=3, acceptance=acc) for n in ("eagle3", "ngram")]
    line = rests_on(Deployment(), methods)
    assert "eagle3, ngram (eagle3's records) acceptance from 'mytrace.jsonl'" in line
