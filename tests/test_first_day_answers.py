"""What a first-day user reads as the answer: plan's answer first and within 80 columns, the
model list readable there too, a fleet's headroom beside its busy share, every interval inside
its quantity's range, and one unit for the validation error wherever it is shown."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from typer.testing import CliRunner

from simspec.catalog.models import model_ids
from simspec.cli.main import app
from simspec.config import FleetConfig, MethodConfig, Scenario
from simspec.engine import intervals as ci
from simspec.engine.fleet import FleetRun, WindowedLog, simulate_fleet
from simspec.engine.metrics import IterationRecord
from simspec.studies import capacity
from simspec.studies.capacity import PLAN_COLUMNS, RATE_TOLERANCE, within_noise
from simspec.studies.fleet import FleetSlo, summarize_fleet, summary_table, timeline, utilisation

# --- validation: errors in percent everywhere a person reads them -----------------------------


def _predictions() -> pd.DataFrame:
    """Three validation rows: two predicted (errors -3 % and +5 %), one skipped."""
    return pd.DataFrame(
        {
            "series": ["a", "a", "b"],
            "case_id": ["c0", "c1", "c2"],
            "metric": ["speedup"] * 3,
            "method": ["eagle3"] * 3,
            "k": [3] * 3,
            "load": [1, 2, 4],
            "measured_value": [1.5, 1.6, 2.0],
            "predicted_value": [1.455, 1.68, float("nan")],
            "rel_error": [-0.03, 0.05, float("nan")],
            "status": ["ok", "ok", "skipped"],
        }
    )


def test_the_validation_report_shows_mape_in_percent_as_the_cli_prints_it(tmp_path):
    from simspec.cli.validate import shown_table
    from simspec.studies.validation.report import write_report
    from simspec.studies.validation.summary import series_table

    pred = _predictions()
    table = series_table(pred)
    page = tmp_path / "validation.html"
    write_report(pred, table, page)
    text = page.read_text(encoding="utf-8")
    cli = shown_table(table)
    assert cli.loc[cli["series"] == "ALL", "MAPE %"].item() == pytest.approx(4.0)
    assert "<th>MAPE %</th>" in text and "<th>mape</th>" not in text
    all_row = re.search(r"<td>ALL</td>(.*?)</tr>", text, re.S)
    assert all_row is not None
    cells = re.findall(r"<td>([^<]*)</td>", all_row.group(1))
    assert cells[3:6] == ["4.0", "5.0", "1.0"]  # MAPE, max |err| and bias, in percent
    assert "MAPE 4.0% (4.0% counting each measurement once)" in text


# --- intervals inside the range of what they bound --------------------------------------------

# latencies in seconds, spread as a mixed load spreads them: many near zero, a few long
LATENCIES = arrays(
    float,
    st.integers(2 * ci.SECTIONS, 300),
    elements=st.one_of(st.floats(0.0, 1e-3), st.floats(0.0, 60.0)),
)


def test_a_tpot_median_whose_sections_disagree_keeps_a_lower_end_at_or_above_zero():
    # four tenths of the requests (in a row) decode in 30 ms steps, the rest in 1 ms: the
    # median is 1 ms and the sections' medians spread so far that a symmetric interval
    # around it reaches below zero (-9.7 ms)
    tpot = np.array([0.030] * 40 + [0.001] * 60)
    lo, hi = ci.percentile_interval(tpot, 50)
    assert lo == 0.0 and hi == pytest.approx(0.0117, rel=1e-2)
    assert ci.mean_interval(np.array([0.0] * 9 + [50.0])) == (0.0, pytest.approx(16.31, rel=1e-3))


@settings(max_examples=80, deadline=None)
@given(LATENCIES, st.sampled_from([50, 99]))
def test_a_percentile_interval_of_latencies_never_leaves_zero_to_infinity(values, q):
    lo, hi = ci.percentile_interval(values, q)
    assert 0.0 <= lo <= hi
    assert lo <= float(np.percentile(values, q)) <= hi


@settings(max_examples=80, deadline=None)
@given(
    arrays(float, ci.SECTIONS, elements=st.floats(0.0, 1e4)),
    arrays(float, ci.SECTIONS, elements=st.floats(1e-3, 1e4)),
)
def test_rates_and_speedups_have_intervals_at_or_above_zero(tokens, seconds):
    for lo, hi in (ci.mean_interval(tokens), ci.ratio_of_sums_interval(tokens, seconds)):
        assert 0.0 <= lo <= hi


@settings(max_examples=80, deadline=None)
@given(arrays(bool, st.integers(1, 400)))
def test_a_share_has_an_interval_inside_zero_to_one_around_it(hits):
    lo, hi = ci.proportion_interval(hits)
    assert 0.0 <= lo <= float(hits.mean()) <= hi <= 1.0


# --- a fleet's headroom beside its busy share, every share in [0, 1] ---------------------------


@st.composite
def iterations(draw) -> list[IterationRecord]:
    """A replica's iterations back to back (gaps of idle time between some), a few lasting
    longer than a window, each with its batch and KV blocks in use."""
    out, t = [], draw(st.floats(0.0, 1.0))
    for _ in range(draw(st.integers(1, 25))):
        t += draw(st.sampled_from([0.0, 0.0, draw(st.floats(0.0, 0.3))]))  # idle, now and then
        dur = draw(st.floats(1e-4, 0.4))
        seqs = draw(st.integers(1, MAX_SEQS))
        kv = draw(st.integers(0, KV_BLOCKS))
        out.append(IterationRecord(t, dur, seqs, 0, seqs, seqs, 0, 0, 0.0, dur, 0.0, kv, seqs, 0))
        t += dur
    return out


MAX_SEQS, KV_BLOCKS = 8, 100


@settings(max_examples=50, deadline=None)
@given(iterations(), st.sampled_from([0.01, 0.05, 0.1, 1.0]))
def test_no_window_of_a_replica_is_busy_longer_than_itself(its, window_s):
    log = WindowedLog(window_s, max_windows=10**6)
    for it in its:
        log.record(it)
    frame = log.frame(0)
    busy = frame["busy_s"].to_numpy()
    assert (busy <= window_s * (1 + 1e-9)).all()
    assert busy.sum() == pytest.approx(sum(it.duration_s for it in its))
    assert (frame["kv_block_s"] <= KV_BLOCKS * busy * (1 + 1e-9)).all()
    assert (frame["running_batch"] <= MAX_SEQS * (1 + 1e-9)).all()
    assert frame["iterations"].sum() == len(its)


def _small_fleet(window_s: float) -> FleetRun:
    """Two replicas of plain decoding behind least_outstanding on 40 short Poisson requests,
    prompts long enough that a prefill outlasts a 10 ms window."""
    wl = {
        "arrival": "poisson",
        "rate": 40.0,
        "requests": 40,
        "measure": "whole",
        "lengths_from": None,
        "prompt": {"mean": 4096},
        "output": {"mean": 24},
    }
    sc = Scenario(workload=wl, method=MethodConfig(name="autoregressive", k=0))
    return simulate_fleet(FleetConfig.uniform(sc, 2, "least_outstanding"), window_s=window_s)


def test_a_fleet_reports_kv_and_batch_occupancy_beside_its_busy_share_all_within_0_and_1():
    run = _small_fleet(0.01)
    series = timeline(run)
    shares = ["utilisation", "kv_occupancy", "batch_occupancy"]
    assert series[shares].notna().all().all()
    assert ((series[shares] >= 0) & (series[shares] <= 1)).all().all()
    assert series["utilisation"].max() == pytest.approx(1.0)  # full windows do occur
    row = summarize_fleet(run, FleetSlo(2000, 50))
    per = utilisation(run)
    for name in ("kv_occupancy", "batch_occupancy"):
        assert 0 < row[f"{name}_mean"] <= row[f"{name}_max"] <= 1
        assert row[f"{name}_max"] == pytest.approx(per[name].max())
        assert f"{name}_mean" in set(summary_table(row)["measure"])
    # the headroom the busy share hides: a busy replica, a small share of its batch slots
    assert (per["batch_occupancy"] < per["utilisation"]).all()
    for key in [k for k in row if k.endswith("_ci_low")]:
        assert row[key] >= 0, key
    assert 0 <= row["slo_attainment_ci_low"] <= row["slo_attainment_ci_high"] <= 1


# --- plan: the answer first, at 80 columns ------------------------------------------------------


def _plan_frame() -> pd.DataFrame:
    """A plan of three methods: EAGLE-3 and n-gram 3 % apart (inside the 5 % the rate search
    resolves), plain decoding well below; one GPU each replica; n-gram at vLLM's lookup 5/5."""
    na = [None, None, ""]  # prompt_lookup_min/max: only a lookup method has them; no schedule
    rows = [
        ["autoregressive", 0, *na, 8.0, 900.0, 850.0, 950.0, 31.0, 30.0, 32.0, 2100.0, 0, "tpot"],
        ["eagle3", 3, *na, 12.4, 1200.0, 1100.0, 1300.0, 24.0, 23.0, 25.0, 3100.0, 0, "unstable"],
        ["ngram", 3, 5, 5, "", 12.0, 1100.0, 1000.0, 1200.0, 26.0, 25.0, 27.0, 3000.0, 0, "ttft"],
    ]
    rows[0] += [5, 5, 0.434, True]
    rows[1] += [4, 4, 0.281, True]
    rows[2] += [4, 4, 0.291, True]
    return pd.DataFrame(rows, columns=PLAN_COLUMNS)


def test_rates_inside_the_search_tolerance_are_within_noise_of_each_other():
    assert RATE_TOLERANCE == 0.05
    assert within_noise([8.0, 12.4, 12.0]) == [[], [2], [1]]
    assert within_noise([10.0, 10.5, 11.0]) == [[1], [0, 2], [1]]  # not transitive
    assert within_noise([0.0, 0.0]) == [[], []]  # neither met the SLOs: no tie to speak of


def test_plan_at_80_columns_prints_a_whole_answer_table_before_the_detail(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    frame = _plan_frame()
    monkeypatch.setattr(capacity, "plan", lambda *a, **k: frame.copy())
    args = ["plan", "--qps", "40", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "50"]
    res = CliRunner().invoke(app, [*args, "--methods", "eagle3,ngram"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    answer, detail = out.split("Detail: capacity for", 1)
    assert "Answer: capacity for 40 req/s" in answer and "(continued)" not in answer
    assert max(len(line) for line in answer.splitlines()) <= 80 and "…" not in answer
    rows = {
        r[0]: r
        for r in re.findall(
            r"│ (\S+(?: K=\d)?) +│ (.+?) +│ (.+?) +│ (.+?) +│ (.+?) +│ (.*?) *│", answer
        )
    }
    assert rows["autoregressive"][1:] == ("5 = 5x1", "0.434", "8", "TPOT p99", "")
    assert rows["eagle3 K=3"][1:] == ("4 = 4x1", "0.281", "12.4", "queue grows", "yes")
    assert rows["ngram K=3"][1:] == ("4 = 4x1", "0.291", "12", "TTFT p99", "yes")
    assert "within noise: eagle3 K=3 and ngram K=3" in res.stderr and "5%" in res.stderr
    # the lookup sizes, a schedule no method ran and the unserved share (a note's) stay in
    # the CSV
    kept = ("schedule", "unserved_at_max")
    console = [c for c in PLAN_COLUMNS if not c.startswith("prompt_lookup") and c not in kept]
    assert " schedule " not in detail
    for col in console:  # the detail follows, whole
        assert f" {col} " in detail, col


# --- the model list at 80 columns -----------------------------------------------------------------


def test_models_at_80_columns_keeps_each_model_whole_on_one_line_and_names_what_it_left_out(
    monkeypatch,
):
    monkeypatch.setenv("COLUMNS", "80")
    res = CliRunner().invoke(app, ["models"])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert max(len(line) for line in out.splitlines()) <= 80 and "…" not in out
    for m in model_ids():
        assert len(re.findall(rf"^│ {re.escape(m)} +│.*│ (\d+|>\d+) +│$", out, re.M)) == 1, m
    assert "│ 671.0B " in out and "│ 69 KiB " in out  # numbers one compares models by stay
    assert "left out at 80 columns: layout, weights" in res.stderr and "--wide" in res.stderr


def test_models_wide_shows_every_column_with_each_model_on_one_line(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    res = CliRunner().invoke(app, ["models", "--wide"])
    assert res.exit_code == 0, res.output
    assert "left out" not in res.stderr and "…" not in res.stdout
    rows = [line for line in res.stdout.splitlines() if line.startswith("│ deepseek-v3 ")]
    assert len(rows) == 1 and "MoE 256 experts top 8 on 58 of 61 layers, MLA" in rows[0]
    assert " fp8 " in rows[0]
