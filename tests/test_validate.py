"""`simspec validate`: the output contract, no row dropped, engine profiles, and a loose bound on
the packaged cases' error so that a regression fails CI."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import Told
from typer.testing import CliRunner

from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.models import load_model
from simspec.cli.main import app
from simspec.engine.costmodel import BatchShape, RooflineCostModel
from simspec.errors import InputError
from simspec.studies.runs import SERIAL, Runs
from simspec.studies.validation.cases import COLUMNS, read_cases
from simspec.studies.validation.run import OUTPUT_COLUMNS, validate
from tests.golden import cases as golden

PACKAGED = resources.files("simspec").joinpath("data", "validation")
# one row of each kind: a plain-decoding TPOT, an engine speedup, an HF speedup with its τ, a
# trace-replay τ, a row on an unknown GPU, and an unknown method
SAMPLE = [
    "gps8b-c1-ar-vllmbf16-tpot",
    "e3t3-e3-bs8",
    "e3t1-l31-8b-e3-mtb-t0",
    "trace-sgpt-e3-k3",
    "e2t1-v7b-e2-mtb-t0",
    "sb-a100-v7b-samd",
]


@pytest.fixture(scope="module")
def packaged_cases() -> pd.DataFrame:
    with resources.as_file(PACKAGED.joinpath("cases.csv")) as path:
        return read_cases(path)


def _sample(cases: pd.DataFrame, tmp_path: Path) -> Path:
    rows = cases[cases["case_id"].isin(SAMPLE)].copy()
    # and one row whose number is text, as some sources give it
    bad = rows.iloc[[0]].copy()
    bad["case_id"], bad["measured_value"] = "text-value", "~1.5"
    path = tmp_path / "cases.csv"
    pd.concat([rows, bad]).to_csv(path, index=False)
    return path


@pytest.mark.slow
def test_validate_writes_every_row_with_the_output_columns(packaged_cases, tmp_path):
    cases = _sample(packaged_cases, tmp_path)
    out = tmp_path / "pred.csv"
    report = tmp_path / "report.html"
    res = CliRunner().invoke(
        app,
        [
            "validate",
            "--cases",
            str(cases),
            "--out",
            str(out),
            "--report",
            str(report),
            "--workers",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    given = pd.read_csv(cases, dtype=str, keep_default_na=False)
    pred = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert list(pred["case_id"]) == list(given["case_id"])  # no row dropped, order kept
    assert list(pred.columns) == list(given.columns) + list(OUTPUT_COLUMNS)
    pd.testing.assert_frame_equal(pred[given.columns], given)  # inputs written back unchanged
    status = dict(zip(pred["case_id"], pred["status"], strict=True))
    reason = dict(zip(pred["case_id"], pred["skip_reason"], strict=True))
    for case in (
        "gps8b-c1-ar-vllmbf16-tpot",
        "e3t3-e3-bs8",
        "e3t1-l31-8b-e3-mtb-t0",
        "trace-sgpt-e3-k3",
    ):
        assert status[case] == "ok" and reason[case] == ""
    assert (
        status["e2t1-v7b-e2-mtb-t0"] == "skipped"
        and "gpu 'unknown' not stated: give it with --assume gpu=" in reason["e2t1-v7b-e2-mtb-t0"]
    )
    assert "method 'other'" in reason["sb-a100-v7b-samd"]
    assert "measured_value '~1.5'" in reason["text-value"]
    ok = pred[pred["status"] == "ok"]
    rel = pd.to_numeric(ok["rel_error"])
    value = pd.to_numeric(ok["predicted_value"])
    measured = pd.to_numeric(ok["measured_value"])
    assert ((value - measured) / measured - rel).abs().max() < 1e-4
    assert "MAPE" in res.output and "ALL" in res.output
    page = report.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and "plotly" in page


def test_a_file_without_required_columns_is_one_clear_error(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("case_id,metric\nx,speedup\n", encoding="utf-8")
    out = tmp_path / "pred.csv"
    res = CliRunner().invoke(app, ["validate", "--cases", str(bad), "--out", str(out)])
    assert res.exit_code == 2
    assert "--cases" in res.output and "lacks columns" in res.output
    assert not out.exists()


def test_any_columns_beyond_the_contract_are_optional(tmp_path):
    """Users bring their own tables: only the required columns must be there."""
    path = tmp_path / "mine.csv"
    path.write_text(
        "case_id,metric,method,target_model,gpu,engine,load_kind,load,measured_value,my_note\n"
        "a,tpot_ms,autoregressive,llama-3.1-8b,h100_sxm,vllm,concurrency,2,7.4,hello\n",
        encoding="utf-8",
    )
    pred = validate(read_cases(path), runs=SERIAL)
    assert pred.loc[0, "status"] == "ok", pred.loc[0, "skip_reason"]
    assert pred.loc[0, "my_note"] == "hello" and set(COLUMNS) <= set(pred.columns)
    assert abs(pred.loc[0, "rel_error"]) < 0.10


def test_overlap_hides_the_step_overhead_until_speculation_turns_it_off():
    sglang, vllm = load_engine("sglang"), load_engine("vllm")
    assert sglang.step_overhead(speculative=False) == 0.0
    assert sglang.step_overhead(speculative=True) == sglang["step_overhead_s"] > 0
    assert vllm.step_overhead(False) == vllm.step_overhead(True) == vllm["step_overhead_s"]


def test_an_eager_step_waits_for_its_kernel_launches():
    """HF eager: a small batch is host-bound (layers x launch time); a large one GPU-bound."""
    gpu, hf = load_gpu("a100_80gb"), load_engine("hf")
    cost = RooflineCostModel(gpu, load_profile("a100_80gb"), hf)
    model = load_model("llama-2-7b")
    small = cost.forward(model, BatchShape.uniform(1, 1, 512, 1)).total_s
    assert small == pytest.approx(model.num_hidden_layers * hf["layer_launch_s"], rel=1e-9)
    graphs = RooflineCostModel(gpu, load_profile("a100_80gb"), load_engine("gpt-fast"))
    big = BatchShape.uniform(64, 16, 64 * 2048, 64 * 16)
    gpu_only = graphs.forward(model, big, overhead_s=0.0).total_s
    assert cost.forward(model, big).total_s == pytest.approx(gpu_only, rel=1e-9)


def _recorded_predictions(cases: pd.DataFrame) -> pd.DataFrame:
    """The packaged table with each row's status and relative error as the cli_validate golden
    numbers hold them."""
    old = golden.recorded("cli_validate")
    assert old is not None

    def column(name: str) -> list:
        return [old.get(f"validate[{i}].{name}") for i in range(len(cases))]

    rel = [np.nan if v is None else v for v in column("rel_error")]
    return cases.assign(status=column("status"), rel_error=np.array(rel, dtype=float))


def test_packaged_cases_error_does_not_regress(packaged_cases):
    """The whole packaged table: predicted rows and overall MAPE against the figure recorded in
    the repo, and the issue's plain-decoding target (vLLM H100 TPOT, batch 1-8, within 10%).
    The predictions are the cli_validate golden numbers: tests/test_golden.py's series tests
    hold today's code to each of them (relative 1e-9) and find every row there, so this reads
    them rather than running the suite's costliest table a second time; a change that moves
    them is re-recorded (tools/golden.py --update cli_validate) and then checked here."""
    recorded = json.loads(PACKAGED.joinpath("recorded.json").read_text(encoding="utf-8"))
    pred = _recorded_predictions(packaged_cases)
    ok = pred[pred["status"] == "ok"]
    assert len(pred) == len(packaged_cases)
    assert len(ok) >= recorded["ok"]
    mape = float(ok["rel_error"].abs().mean())
    assert mape <= recorded["mape"] + 0.005, f"overall MAPE {mape:.4f} > recorded"
    tpot = ok[
        (ok["metric"] == "tpot_ms")
        & (ok["method"] == "autoregressive")
        & (ok["engine"] == "vllm")
        & (ok["gpu"] == "h100_sxm")
        & (ok["load_kind"] == "concurrency")
    ]
    assert len(tpot) >= 4
    assert tpot["rel_error"].abs().max() < 0.10


def test_layer_split_pools_memory_and_keeps_the_step_time():
    """pp GPUs running the layers in order (HF device_map='auto'): a 13B fp16 model that one
    24 GB RTX 3090 cannot hold fits on two, and a batch-1 step costs what one GPU's would plus
    one hop of the hidden state."""
    from simspec.config import Scenario
    from simspec.engine.build import build_cost_model
    from simspec.engine.simulation import check
    from simspec.errors import ScenarioError

    one = Scenario(model="vicuna-13b", gpu="rtx3090", engine="hf")
    with pytest.raises(ScenarioError, match="raise tp or pp"):
        check(one)
    two = one.model_copy(update={"pp": 2})
    check(two)
    model, batch = load_model("vicuna-13b"), BatchShape.uniform(1, 1, 512, 1)
    split = build_cost_model(two).forward(model, batch, overhead_s=0.0)
    whole = build_cost_model(one).forward(model, batch, overhead_s=0.0)
    hop = split.communication_s - whole.communication_s
    assert 0 < hop < 1e-4
    assert split.gemm_s == whole.gemm_s and split.attention_s == whole.attention_s


def test_outputs_get_a_new_files_mode(tmp_path):
    """Written atomically through a private temp file, yet readable as any new file would be."""
    import os

    from simspec.outputs import write_text_atomic

    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "out.csv", "a\n")
    finally:
        os.umask(old)
    assert (tmp_path / "out.csv").stat().st_mode & 0o777 == 0o644


def test_a_step_time_row_costs_one_decode_step(tmp_path):
    path = tmp_path / "steps.csv"
    path.write_text(
        "case_id,metric,method,target_model,gpu,engine,load_kind,load,context_len,measured_value\n"
        "s,step_time_ms,autoregressive,llama-3.1-8b,h100_sxm,vllm,static_batch,1,1024,7.15\n"
        "t,step_time_ms,autoregressive,llama-3.1-8b,h100_sxm,vllm,static_batch,1,,7.15\n",
        encoding="utf-8",
    )
    pred = validate(read_cases(path), runs=SERIAL)
    assert pred.loc[0, "status"] == "ok" and abs(pred.loc[0, "rel_error"]) < 0.10
    assert "context_len" in pred.loc[1, "skip_reason"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_scenario_that_cannot_run_skips_only_its_rows(tmp_path, workers):
    """The 70B model does not fit one H100 (its row says tp 1): its row says why; the others,
    the same scenario asked for twice among them, are predicted, and that scenario runs once."""
    path = tmp_path / "cases.csv"
    path.write_text(
        "case_id,metric,method,target_model,gpu,tp,engine,load_kind,load,measured_value\n"
        "a,tpot_ms,autoregressive,llama-3.1-8b,h100_sxm,1,vllm,concurrency,2,7.4\n"
        "big,tpot_ms,autoregressive,llama-3.1-70b,h100_sxm,1,vllm,concurrency,2,20\n"
        "b,throughput_tok_s,autoregressive,llama-3.1-8b,h100_sxm,1,vllm,concurrency,2,250\n",
        encoding="utf-8",
    )
    told = Told()
    pred = validate(read_cases(path), runs=Runs("process", workers, progress=told))
    seen = told.points
    status = dict(zip(pred["case_id"], pred["status"], strict=True))
    assert status == {"a": "ok", "big": "skipped", "b": "ok"}
    assert "does not fit" in pred.loc[1, "skip_reason"]
    assert seen[-1] == (2, 2) and len(seen) == 2  # two distinct scenarios for three rows


def _ok_rows(series: list[str], loads: list[float], measured: list[float]) -> pd.DataFrame:
    n = len(series)
    return pd.DataFrame(
        {
            "series": series,
            "case_id": [f"c{i}" for i in range(n)],
            "metric": ["speedup"] * n,
            "method": ["eagle3"] * n,
            "k": [3] * n,
            "load": loads,
            "measured_value": measured,
            "predicted_value": [m * 0.97 for m in measured],
            "rel_error": [-0.03] * n,
            "status": ["ok"] * n,
        }
    )


def test_validate_prints_errors_in_percent():
    from simspec.cli.validate import shown_table
    from simspec.studies.validation.summary import series_table

    shown = shown_table(series_table(_ok_rows(["a", "a"], [1, 2], [1.5, 1.6])))
    assert shown.loc[shown["series"] == "ALL", "MAPE %"].item() == pytest.approx(3.0)
    assert "mape" not in shown.columns and "bias %" in shown.columns


def test_the_all_row_has_no_trend_when_no_series_varies_load():
    from simspec.studies.validation.summary import series_table

    # two series of two load levels each: together four levels, but no one series' sweep
    table = series_table(_ok_rows(["a", "a", "b", "b"], [1, 2, 4, 8], [1.2, 1.4, 1.6, 1.8]))
    assert table["trend_rho"].isna().all()


def test_a_sweep_of_constant_values_has_no_trend_and_no_warning():
    import warnings

    from simspec.studies.validation.summary import series_table

    # one series over three loads whose measured value never changes: no rank order to
    # correlate (QA: SciPy's ConstantInputWarning reached the validate output)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = series_table(_ok_rows(["a"] * 3, [1, 16, 64], [1.5, 1.5, 1.5]))
    assert table["trend_rho"].isna().all()


def test_spearman_rho_is_scipys_bit_for_bit():
    from scipy.stats import spearmanr

    from simspec.studies.validation.summary import spearman_rho

    rng = np.random.default_rng(7)
    for n in (3, 4, 7, 15, 40):
        for ties in (False, True):
            a, b = rng.normal(size=n), rng.normal(size=n)
            if ties:  # measured values read from a plot repeat; predictions can too
                a, b = np.round(a * 2) / 2, np.round(b)
            if len(set(a)) < 2 or len(set(b)) < 2:
                continue
            index = pd.RangeIndex(10, 10 + n)  # a sweep's rows keep the table's index
            got = spearman_rho(pd.Series(a, index=index), pd.Series(b, index=index))
            assert got == spearmanr(a, b).statistic
    with_nan = pd.Series([1.0, np.nan, 3.0])
    assert np.isnan(spearman_rho(with_nan, pd.Series([1.0, 2.0, 3.0])))


def test_a_one_point_panel_shows_a_small_miss_small():
    from simspec.studies.validation.report import panel_range, predicted_vs_measured

    rows = _ok_rows(["a"], [1], [1.66]).assign(predicted_value=[1.60])
    fig = predicted_vs_measured(rows.assign(measured=[1.66]))
    lo, hi = fig.layout.yaxis.range
    assert lo == 0 and 1.66 < hi < 2.0 and tuple(fig.layout.xaxis.range) == (lo, hi)
    assert panel_range(np.array([-2.0, -1.0])) == pytest.approx([-2.6, -0.4])


def test_a_row_on_a_gpu_without_timings_says_its_profile_is_transferred():
    from simspec.studies.validation.predict import plan_case

    row = {
        "metric": "tpot_ms", "method": "autoregressive", "target_model": "llama-3.1-8b",
        "engine": "vllm", "load_kind": "concurrency", "load": "2", "measured_value": "7",
    }  # fmt: skip
    h200 = plan_case({**row, "gpu": "h200"}).assumptions
    assert any(
        "transferred (gemm, attention, elementwise, allreduce from h100_sxm)" in a for a in h200
    )
    assert not any("transferred" in a for a in plan_case({**row, "gpu": "h100_sxm"}).assumptions)


@pytest.mark.parametrize(
    ("notes", "model", "precision"),
    [
        ("fp8; precision stated in lower case", "qwen3-8b", "fp8"),
        ("int4 weights; draft config not stated", "llama-2-7b", "int4-w"),
        ("draft X-FP8; FP8 target (baseline is the same FP8 checkpoint)", "qwen3-8b", "fp8"),
        ("block-FP8 weights as released", "deepseek-v3", None),  # the preset's own checkpoint
        ("draft lmsys/EAGLE3-gpt-oss-120b-bf16 (SpecForge)", "gpt-oss-120b", None),  # a name
    ],
)
def test_a_precision_the_notes_state_in_words_is_read(notes, model, precision):
    """QA: 'int4 weights' ran at bf16 and a lower-case tag was missed, without a note."""
    from simspec.studies.validation.setups import notes_precision

    got, why, said = notes_precision(notes, model)
    assert got == precision and why is None
    assert bool(said) is ("bf16 (" not in notes)


def test_a_stated_k_holds_whatever_the_shape_cell_says_and_a_bad_one_is_refused(shared):
    """QA: k was dropped when spec_shape was empty or 'Chain', and '3.5' read as unstated;
    one length without the other ran the trace's lengths without a word."""
    import pandas as pd

    from simspec.studies.validation.predict import Skip, plan_case

    cases = pd.read_csv(shared / "validation" / "cases.csv", dtype=str, keep_default_na=False)
    row = {**cases[cases.case_id == "e3t3-e3-bs2"].iloc[0].to_dict(), "engine": "vllm"}
    for shape in ("", "Chain", "chain"):
        assert plan_case({**row, "spec_shape": shape, "k": "5"}).scenario.method.k == 5
    with pytest.raises(Skip, match="k '3.5' is not a whole number"):
        plan_case({**row, "k": "3.5"})
    one = plan_case({**row, "prompt_len": "", "output_len": "727.6"})
    assert any("output_len 727.6 without prompt_len" in a for a in one.assumptions)


@pytest.mark.parametrize(
    ("notes", "statistic"),
    [
        ("BF16; mean request latency ratio", "mean"),
        ("BF16; speedup = baseline TPOT / spec TPOT", "tpot"),
        ("BF16; output throughput ratio", "throughput"),
        ("BF16", "median"),
    ],
)
def test_a_speedup_at_a_request_rate_is_the_ratio_its_notes_name(notes, statistic):
    """QA: every open-loop speedup was the median-latency ratio, whatever the row said."""
    from simspec.studies.validation.predict import SPEEDUP_RATIOS, open_loop_speedup

    assert open_loop_speedup(notes) == statistic and statistic in SPEEDUP_RATIOS


def test_tp_and_num_gpus_that_disagree_or_are_not_whole_are_refused(shared):
    """QA: tp 2 on num_gpus 1, tp 1 on num_gpus 4 and tp '1.5' all ran without a note."""
    import pandas as pd

    from simspec.studies.validation.predict import Skip, plan_case

    cases = pd.read_csv(shared / "validation" / "cases.csv", dtype=str, keep_default_na=False)
    row = cases[cases.case_id == "e3t3-e3-bs2"].iloc[0].to_dict()
    for tp, gpus, why in (("2", "1", "disagree"), ("1", "4", "disagree"), ("1.5", "", "whole")):
        with pytest.raises(Skip, match=why):
            plan_case({**row, "tp": tp, "num_gpus": gpus})
    assert plan_case({**row, "tp": "2", "num_gpus": "2"}).scenario.tp == 2


def test_a_cell_past_a_bound_is_skipped_naming_the_cell_and_the_range(shared, tmp_path):
    """QA: a load of 1e12 skipped the row with a raw pydantic dump naming WorkloadConfig."""
    import pandas as pd
    from typer.testing import CliRunner

    from simspec.cli.main import app

    cases = pd.read_csv(shared / "validation" / "cases.csv", dtype=str, keep_default_na=False)
    path, out = tmp_path / "big.csv", tmp_path / "out.csv"
    cases[cases.case_id == "e3t3-e3-bs2"].assign(load="1e12").to_csv(path, index=False)
    res = CliRunner().invoke(app, ["validate", "--cases", str(path), "--out", str(out)])
    assert res.exit_code == 0, res.output
    (why,) = pd.read_csv(out).skip_reason
    assert why.startswith("load past simspec's bounds") and "16384" in why


@pytest.mark.parametrize(
    ("cell", "value", "why"),
    [
        ("k", "65", "k 65 is past the longest draft simspec runs (64)"),
        ("tp", "0", "tp '0' is not a count of GPUs (a whole number, 1 or more)"),
    ],
)
def test_a_count_cell_out_of_range_is_skipped_naming_that_cell(shared, tmp_path, cell, value, why):
    """QA: k 65 was skipped as "tau_k: Input should be less than or equal to 64" (a field the
    row never wrote), and tp 0 as "not a whole number of GPUs"."""
    from typer.testing import CliRunner

    from simspec.cli.main import app

    cases = pd.read_csv(shared / "validation" / "cases.csv", dtype=str, keep_default_na=False)
    path, out = tmp_path / "c.csv", tmp_path / "out.csv"
    cases[cases.case_id == "e3t3-e3-bs2"].assign(**{cell: value}).to_csv(path, index=False)
    res = CliRunner().invoke(app, ["validate", "--cases", str(path), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert list(pd.read_csv(out).skip_reason) == [why]


HEAD = "case_id,metric,method,target_model,gpu,tp,engine,load_kind,load,measured_value\n"
ROW_REST = ",tpot_ms,autoregressive,llama-3.1-8b,h100_sxm,1,vllm,concurrency,2,7.4"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        # a spreadsheet's trailing comma on every row: read as written, not shifted a column
        (HEAD + ",\n".join(["a" + ROW_REST, "b" + ROW_REST]) + ",\n", None),
        (HEAD.rstrip("\n") + ",measured_value\n" + "a" + ROW_REST + ",999\n", "twice"),
        (HEAD + "a" + ROW_REST + "\n" + "a" + ROW_REST + "\n", "more than one row"),
    ],
)
def test_a_case_file_is_read_as_written_or_refused(tmp_path, text, words):
    """QA: a trailing comma had shifted every column (each row skipped for a false reason), a
    repeated column and a repeated case_id had run silently."""
    path = tmp_path / "cases.csv"
    path.write_text(text, encoding="utf-8")
    if words is None:
        frame = read_cases(path)
        assert list(frame.case_id) == ["a", "b"] and set(frame.metric) == {"tpot_ms"}
        return
    with pytest.raises(InputError, match=words):
        read_cases(path)


def test_a_load_beside_single_says_it_is_not_read():
    from simspec.studies.validation.predict import plan_case

    row = {
        "case_id": "x",
        "metric": "tpot_ms",
        "method": "autoregressive",
        "target_model": "llama-3.1-8b",
        "gpu": "h100_sxm",
        "tp": "1",
        "engine": "vllm",
        "load_kind": "single",
        "load": "8",
        "measured_value": "7",
    }
    said = [a for a in plan_case(row).assumptions if a.startswith("load_kind single")]
    assert said and "load 8 is not read" in said[0]
    assert not [a for a in plan_case(row | {"load": "1"}).assumptions if "single" in a]


def test_cells_validate_would_otherwise_drop_are_read_or_refused(shared):
    """QA: tree cells beside an empty or chain spec_shape, a uses_trace of 'y', a measured_tau
    of '~3.1', a context_len without prompt_len and an unstated draft were each dropped or
    defaulted without a word."""
    import pandas as pd

    from simspec.studies.validation.predict import Skip, plan_case

    cases = pd.read_csv(shared / "validation" / "cases.csv", dtype=str, keep_default_na=False)
    row = {**cases[cases.case_id == "e3t3-e3-bs2"].iloc[0].to_dict(), "engine": "sglang"}
    tree = plan_case({**row, "spec_shape": "", "k": "4", "tree_nodes": "9", "tree_topk": "2"})
    assert tree.scenario.method.tree_topk == 2 and tree.scenario.method.k == 4
    assert tree.scenario.method.tree_nodes == 8  # SGLang's num-draft-tokens counts the root
    assert any("spec_shape unstated: a tree" in a for a in tree.assumptions)
    with pytest.raises(Skip, match="a chain has no tree budget"):
        plan_case({**row, "spec_shape": "chain", "tree_nodes": "9"})
    with pytest.raises(Skip, match="uses_trace 'y' is not yes or no"):
        plan_case({**row, "uses_trace": "y"})
    for tau in ("~3.1", "3.0-3.2"):
        with pytest.raises(Skip, match="measured_tau .* is not one number"):
            plan_case({**row, "measured_tau": tau})
    long = plan_case({**row, "prompt_len": "", "output_len": "", "context_len": "20000"})
    assert long.scenario.workload.prompt.mean == 20000
    assert any("context_len 20000 as the prompt" in a for a in long.assumptions)
    draft = {**row, "method": "draft_model", "draft_model": "unknown", "engine": "vllm"}
    assert any("draft_model unstated" in a for a in plan_case(draft).assumptions)


def test_a_misspelt_contract_column_is_refused_naming_the_spelling(tmp_path):
    """QA: 'measuredtau' and 'K' were read as other data, and the row ran on the preset."""
    path = tmp_path / "typo.csv"
    header = ",".join(c if c != "measured_tau" else "measuredtau" for c in COLUMNS)
    path.write_text(header + "\n")
    with pytest.raises(InputError, match="'measuredtau'.*spells it 'measured_tau'"):
        read_cases(path)


def test_a_profile_no_row_takes_is_said(packaged_cases, tmp_path):
    """QA: --profile h200 over rows all on h100_sxm changed nothing, without a word."""
    path, out = tmp_path / "one.csv", tmp_path / "out.csv"
    packaged_cases[packaged_cases.case_id == "sb-a100-v7b-samd"].to_csv(path, index=False)
    args = ["validate", "--cases", str(path), "--out", str(out), "--profile", "h200"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "--profile h200 describes h200: no row runs there" in " ".join(res.output.split())


def test_rows_predicted_from_their_own_measurement_are_flagged_and_left_out(packaged_cases):
    """A tau row whose preset was copied from it, or measured on the trace (or token streams)
    it is predicted from, checks the acceptance model: its acceptance_source says so and the
    summary line gives the MAPE without it (QA: 25 such rows held the packaged file's MAPE at
    18.2 % against 20.1 %)."""
    from simspec.studies.validation.predict import OWN_SOURCE
    from simspec.studies.validation.summary import mape_line, own_source_rows, series_table

    old = golden.recorded("cli_validate")
    assert old is not None
    n = len(packaged_cases)
    pred = _recorded_predictions(packaged_cases).assign(
        acceptance_source=[old.get(f"validate[{i}].acceptance_source") for i in range(n)],
        predicted_value=[old.get(f"validate[{i}].predicted_value") for i in range(n)],
    )
    own = own_source_rows(pred)
    ids = set(pred.loc[own, "case_id"])
    assert "e1t2-v13b-t0" in ids and "e1t2-v7b-t0" not in ids  # another model: a prediction
    assert {"trace-sgpt-e3-k3", "trace-ic-ng-k5"} <= ids
    assert (pred.loc[own, "metric"] == "tau").all()
    assert pred.loc[own, "acceptance_source"].str.endswith(OWN_SOURCE).all()
    line = mape_line(pred, series_table(pred))
    rest = pred[(pred["status"] == "ok") & ~own]["rel_error"].abs().mean()
    assert f"{rest:.1%} without the {int(own.sum())} rows predicted from their own" in line
