"""What a case row's notes say, read as they say it: the weights' precision beside a cache's,
the statistic a latency row measured, a length stated alone, and which rows are one
measurement in the error summary."""

from __future__ import annotations

import pandas as pd
import pytest

from simspec.studies.validation.cases import read_cases
from simspec.studies.validation.predict import Skip, plan_case
from simspec.studies.validation.summary import unique_mape


@pytest.fixture(scope="module")
def row() -> dict[str, str]:
    cases = read_cases()
    found = cases[cases.case_id == "pr16937-ar-tput"].iloc[0].to_dict()
    return {k: ("" if pd.isna(v) else str(v)) for k, v in found.items()}


def test_an_fp8_kv_cache_leading_the_notes_leaves_the_weights_bf16(row):
    """QA: "FP8 KV cache; BF16 weights" ran FP8 weights, 43 % faster."""
    plan = plan_case({**row, "notes": "FP8 KV cache; BF16 weights"})
    assert plan.scenario.precision in (None, "bf16")
    assert plan_case({**row, "notes": "FP8; mean of 3"}).scenario.precision == "fp8"


@pytest.mark.parametrize(
    "notes", ["nvfp4 weights (ModelOpt checkpoint)", "INT8 weights (W8A8 smoothquant)"]
)
def test_a_precision_simspec_does_not_price_is_refused_whatever_its_case(row, notes):
    """QA: both rows ran at the preset's bf16, silently."""
    with pytest.raises(Skip, match="the notes give"):
        plan_case({**row, "notes": notes})
    plan_case({**row, "notes": "INT8 KV cache"})  # the cache's, not the weights'


@pytest.mark.parametrize(
    ("notes", "statistic"),
    [
        ("'Mean TTFT (ms): 20' (median TTFT 15)", "mean"),
        ("median TTFT; mean TTFT 20", "median"),
        ("'Mean TPOT (ms): 7.5' (median TPOT 7.1)", "mean"),
        ("median TPOT; median ITL 11.93 ms", "median"),
    ],
)
def test_a_latency_row_is_scored_on_the_statistic_its_notes_name_first(row, notes, statistic):
    metric = "ttft_ms" if "TTFT" in notes else "tpot_ms"
    lengths = {"prompt_len": "512", "output_len": "128", "metric": metric, "measured_value": "9"}
    assert plan_case({**row, **lengths, "notes": notes}).statistic == statistic


def test_a_length_stated_alone_is_kept_and_the_other_taken_from_the_trace(row):
    """QA: a 1,000-token prompt_len ran ShareGPT's prompts."""
    wl = plan_case({**row, "prompt_len": "1000", "output_len": ""}).scenario.workload
    assert wl.lengths_from is None and wl.prompt.mean == 1000 and wl.prompt.dist == "fixed"
    assert wl.output.dist == "lognormal"


def test_rows_of_other_setups_are_other_measurements_in_the_summary():
    """QA: a row at another TP with the same value was dropped as a duplicate."""
    base = {"status": "ok", "metric": "speedup", "method": "eagle3", "measured_value": 2.0}
    rows = pd.DataFrame([{**base, "tp": 1, "rel_error": 0.0}, {**base, "tp": 2, "rel_error": 0.4}])
    assert unique_mape(rows) == pytest.approx(0.2)
    assert unique_mape(rows.assign(tp=1)) == 0.0
    # a tree-shape sweep: one K and budget at two top-k (QA: counted as one measurement)
    trees = pd.DataFrame(
        [{**base, "tree_topk": 4, "rel_error": 0.4}, {**base, "tree_topk": 8, "rel_error": 0.2}]
    )
    assert unique_mape(trees) == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("cells", "why"),
    [
        ({"prompt_len": "abc", "output_len": "200"}, "prompt_len 'abc' is not a positive number"),
        ({"prompt_len": "0", "output_len": "200"}, "prompt_len '0' is not a positive number"),
        ({"load": "abc"}, "load 'abc' is not a positive number"),
    ],
)
def test_a_cell_that_is_not_a_number_is_refused_not_read_as_unstated(row, cells, why):
    with pytest.raises(Skip, match=why):
        plan_case({**row, **cells})


def test_a_research_harness_speedup_is_a_ratio_of_mean_per_question_speeds():
    """QA: EAGLE's and Spec-Bench's speed.py average each question's tokens/time, then divide;
    simspec had scored those rows as total tokens over total time (PLD: 1.5x against 2.4x)."""
    from simspec.engine.metrics import RunSummary
    from simspec.studies.runs.keys import scenario_key
    from simspec.studies.validation.predict import metric_value

    cases = read_cases()
    found = cases[cases.case_id == "sb-a100-v7b-pld-mtb"].iloc[0].to_dict()
    spec_bench = {k: ("" if pd.isna(v) else str(v)) for k, v in found.items()}
    plan = plan_case(spec_bench)
    assert plan.statistic == "request_speed"
    assert any("speeds.append(tokens / times)" in a for a in plan.assumptions)
    # a batch-1 HF row from a harness whose speed.py was not read keeps the throughput ratio
    other = plan_case({**spec_bench, "source": "Medusa (Cai et al.) Sec. 3.1"})
    assert other.statistic == "throughput"
    # the ratio of the two runs' mean per-request speeds, not of their throughputs
    fields = {f: 1.0 for f in RunSummary.__dataclass_fields__} | {"section_e2e_s": (1.0,)}
    own = RunSummary(**{**fields, "throughput_tok_s": 10.0, "request_speed_mean_tok_s": 30.0})
    base = RunSummary(**{**fields, "throughput_tok_s": 8.0, "request_speed_mean_tok_s": 12.0})
    key = scenario_key
    runs = {key(plan.scenario.model_dump_json()): own, key(plan.baseline.model_dump_json()): base}
    assert metric_value(plan, runs)[0] == pytest.approx(2.5)


def test_a_mean_latency_is_over_the_served_requests():
    """QA: an unserved request counted as 0 s in the mean end-to-end latency."""
    from simspec.engine.metrics import RunSummary
    from simspec.studies.validation.predict import e2e_seconds

    fields = {f: 1.0 for f in RunSummary.__dataclass_fields__}
    run = RunSummary(**{**fields, "requests": 4, "unfinishable": 1, "section_e2e_s": (3.0, 3.0)})
    assert e2e_seconds(run, "mean") == pytest.approx(2.0)


def test_a_latency_no_llm_step_reaches_is_skipped_as_a_unit_slip(row):
    """QA: a TPOT of 0.00728 (seconds, in the ms column) was scored at +105,957 % and carried
    the file's MAPE."""
    from simspec.studies.validation.predict import Skip

    lengths = {"prompt_len": "512", "output_len": "128"}
    with pytest.raises(Skip, match="below 0.1 ms, no LLM step's: a value in seconds"):
        plan_case({**row, **lengths, "metric": "tpot_ms", "measured_value": "0.00728"})
    with pytest.raises(Skip, match="below 1 ms"):
        plan_case({**row, **lengths, "metric": "ttft_ms", "measured_value": "0.05"})
    assert plan_case({**row, **lengths, "metric": "tpot_ms", "measured_value": "7.28"})
