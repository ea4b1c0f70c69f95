"""The run summary, from hand-built request and iteration tables with known answers.

Percentiles of plain latencies interpolate linearly (numpy's default): the 50th of
[10, 20, 30, 40] is 25 and the 99th is 30 + 0.97 x 10 = 39.7. Inter-token latency is a
weighted percentile without interpolation: each iteration counts once per decoding sequence.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from simspec import Scenario, simulate
from simspec.config import MethodConfig, WorkloadConfig
from simspec.engine.kv_cache import MemoryPlan
from simspec.engine.metrics import ITERATION_COLUMNS, IterationLog, IterationRecord, summarize
from simspec.engine.window import Layout

NAN = float("nan")


# -- builders: one place per constructor --------------------------------------------------------
def requests_frame(rows: list[dict]) -> pd.DataFrame:
    """Requests as (arrival, first, finish, out[, unfinishable, preemptions])."""
    full = [
        {
            "arrival_s": r["arrival"],
            "first_token_s": r.get("first", NAN),
            "finish_s": r.get("finish", NAN),
            "prompt_tokens": 16,
            "output_tokens": r.get("out", 0),
            "requested_output_tokens": r.get("out", 0),
            "spec_steps": 0,
            "accepted_tokens": 0,
            "preemptions": r.get("preemptions", 0),
            "unfinishable": r.get("unfinishable", False),
        }
        for r in rows
    ]
    return pd.DataFrame(full)


def iterations_frame(rows: list[dict]) -> pd.DataFrame:
    """Iterations given by the columns that matter to a test; the rest are zero."""
    full = [{c: row.get(c, 0) for c in ITERATION_COLUMNS} for row in rows]
    return pd.DataFrame(full, columns=list(ITERATION_COLUMNS))


def everything(requests: pd.DataFrame) -> Layout:
    """Measure every request from the first arrival to the last departure (no warm-up)."""
    return Layout(0, len(requests), 0)


def closed_loop(concurrency: int, warmup: int, measured: int) -> Layout:
    """A closed loop's window: the first ``warmup`` requests cut, ``measured`` after them."""
    return Layout(warmup, measured, 1, search=False, concurrency=concurrency)


def memory_plan(num_blocks: int = 100) -> MemoryPlan:
    return MemoryPlan(8e10, 1.6e10, 0.0, 1e9, 131072.0, 16, num_blocks)


def summary(
    requests: pd.DataFrame,
    iterations: pd.DataFrame | None = None,
    plan: Layout | None = None,
    peak_blocks: int = 0,
    num_blocks: int = 100,
) -> dict[str, float]:
    if iterations is None:
        iterations = iterations_frame([{"start_s": 0.0, "duration_s": 1.0, "decode_seqs": 1}])
    plan = plan or everything(requests)
    return summarize(requests, iterations, plan, peak_blocks, memory_plan(num_blocks))


def four_requests() -> pd.DataFrame:
    """TTFT 10, 20, 30, 40 ms; then 10 more tokens each at 1, 2, 3, 4 ms per token."""
    return requests_frame(
        [
            {"arrival": 1.0, "first": 1.01, "finish": 1.02, "out": 11},
            {"arrival": 2.0, "first": 2.02, "finish": 2.04, "out": 11},
            {"arrival": 3.0, "first": 3.03, "finish": 3.06, "out": 11},
            {"arrival": 4.0, "first": 4.04, "finish": 4.08, "out": 11},
        ]
    )


# -- latencies ------------------------------------------------------------------------------------
def test_ttft_percentiles_are_first_token_minus_arrival():
    s = summary(four_requests())
    assert s.ttft_ms_p50 == pytest.approx(25.0)
    assert s.ttft_ms_p99 == pytest.approx(39.7)


def test_tpot_spreads_the_time_after_the_first_token_over_the_later_tokens():
    s = summary(four_requests())
    assert s.tpot_ms_mean == pytest.approx(2.5)
    assert s.tpot_ms_p50 == pytest.approx(2.5)
    assert s.tpot_ms_p99 == pytest.approx(3.97)


def test_e2e_percentiles_are_finish_minus_arrival_in_seconds():
    # end to end: 20, 40, 60, 80 ms
    s = summary(four_requests())
    assert s.e2e_s_p50 == pytest.approx(0.05)
    assert s.e2e_s_p90 == pytest.approx(0.074)
    assert s.e2e_s_p99 == pytest.approx(0.0794)


def test_a_one_token_request_has_no_time_per_output_token():
    req = requests_frame(
        [
            {"arrival": 0.0, "first": 0.1, "finish": 0.1, "out": 1},
            {"arrival": 0.0, "first": 0.1, "finish": 0.11, "out": 3},  # 5 ms per later token
        ]
    )
    assert summary(req).tpot_ms_mean == pytest.approx(5.0)
    only_one = requests_frame([{"arrival": 0.0, "first": 0.1, "finish": 0.1, "out": 1}])
    assert math.isnan(summary(only_one).tpot_ms_p50)


# -- unfinishable requests --------------------------------------------------------------------
def test_unfinishable_requests_are_counted_but_left_out_of_latencies_and_lengths():
    req = requests_frame(
        [
            {"arrival": 0.0, "first": 0.01, "finish": 0.05, "out": 5},
            {"arrival": 0.0, "first": 0.03, "finish": 0.07, "out": 7},
            {"arrival": 0.0, "unfinishable": True},
        ]
    )
    s = summary(req)
    assert s.requests == 3 and s.unfinishable == 1
    assert s.ttft_ms_p50 == pytest.approx(20.0)
    assert s.e2e_s_p99 == pytest.approx(0.0698)
    assert s.output_tokens_mean == pytest.approx(6.0)


# -- throughput and the steady window -----------------------------------------------------------
TWO_SECONDS = iterations_frame(
    [
        {"start_s": 0.0, "duration_s": 1.0, "output_tokens": 10, "decode_seqs": 1},
        {"start_s": 1.0, "duration_s": 1.0, "output_tokens": 30, "decode_seqs": 1},
    ]
)


def test_a_study_of_everything_takes_every_output_token_over_the_makespan():
    s = summary(four_requests(), TWO_SECONDS)
    assert s.makespan_s == 2.0
    assert s.throughput_tok_s == pytest.approx(20.0)


def test_a_closed_loop_throughput_is_littles_law_over_the_measured_requests():
    # concurrency 2; the first request is warm-up; the next two are measured: 5 + 7 tokens
    # over 1.0 + 2.0 s of latency, at 2 in flight -> 2 x 12 / 3 = 8 tokens/s
    req = requests_frame(
        [
            {"arrival": 0.0, "first": 0.1, "finish": 0.5, "out": 50},
            {"arrival": 0.5, "first": 0.6, "finish": 1.5, "out": 5},
            {"arrival": 1.0, "first": 1.1, "finish": 3.0, "out": 7},
            {"arrival": 1.5, "first": 1.6, "finish": 3.5, "out": 9},
        ]
    )
    s = summary(req, TWO_SECONDS, closed_loop(2, warmup=1, measured=2))
    assert s.requests == 2 and s.warmup_requests == 1
    assert s.throughput_tok_s == pytest.approx(8.0)
    assert s.output_tokens_mean == pytest.approx(6.0)
    assert s.window_start_s == 0.5 and s.window_s == pytest.approx(1.0)  # to the next arrival


def test_a_request_that_never_fits_adds_no_latency_and_no_tokens_to_the_closed_loop():
    req = requests_frame(
        [
            {"arrival": 0.0, "first": 0.1, "finish": 1.0, "out": 4},
            {"arrival": 1.0, "unfinishable": True},
            {"arrival": 1.0, "first": 1.1, "finish": 2.0, "out": 4},
        ]
    )
    s = summary(req, TWO_SECONDS, closed_loop(1, warmup=0, measured=3))
    assert s.throughput_tok_s == pytest.approx(1 * 8 / 2.0) and s.unfinishable == 1


def test_no_iterations_means_no_time_and_no_throughput():
    s = summary(requests_frame([{"arrival": 0.0, "unfinishable": True}]), iterations_frame([]))
    assert s.makespan_s == 0.0 and s.iterations == 0
    assert math.isnan(s.throughput_tok_s)


# -- inter-token latency ------------------------------------------------------------------------
def test_itl_percentiles_count_each_iteration_once_per_decoding_sequence():
    # nine sequences wait 1 ms, one waits 10 ms: the median wait is 1 ms (not 5.5)
    its = iterations_frame(
        [
            {"start_s": 0.0, "duration_s": 0.001, "decode_seqs": 9},
            {"start_s": 0.001, "duration_s": 0.010, "decode_seqs": 1},
        ]
    )
    s = summary(four_requests(), its)
    assert s.itl_ms_p50 == pytest.approx(1.0)
    assert s.itl_ms_p99 == pytest.approx(10.0)


def test_an_iteration_without_decodes_is_no_inter_token_latency():
    its = iterations_frame(
        [
            {"start_s": 0.0, "duration_s": 0.100, "prefill_seqs": 4},
            {"start_s": 0.1, "duration_s": 0.002, "decode_seqs": 3},
        ]
    )
    assert summary(four_requests(), its).itl_ms_p99 == pytest.approx(2.0)
    prefill_only = iterations_frame([{"start_s": 0.0, "duration_s": 0.1, "prefill_seqs": 4}])
    assert math.isnan(summary(four_requests(), prefill_only).itl_ms_p50)


# -- acceptance, time split, counts ---------------------------------------------------------------
def test_mean_accept_length_is_tokens_per_speculative_sequence_step():
    its = iterations_frame(
        [
            {"start_s": 0.0, "duration_s": 1.0, "spec_tokens": 6, "spec_seqs": 2},
            {"start_s": 1.0, "duration_s": 1.0, "spec_tokens": 9, "spec_seqs": 3},
            {"start_s": 2.0, "duration_s": 1.0, "decode_seqs": 4},  # speculation off
        ]
    )
    assert summary(four_requests(), its).mean_accept_len == pytest.approx(3.0)
    assert summary(four_requests(), TWO_SECONDS).mean_accept_len == 1.0  # plain decoding


def test_time_fractions_split_the_busy_time():
    its = iterations_frame(
        [
            {"start_s": 0.0, "duration_s": 1.0, "draft_s": 0.2, "verify_s": 0.7, "overhead_s": 0.1},
            {"start_s": 1.0, "duration_s": 3.0, "draft_s": 0.0, "verify_s": 2.5, "overhead_s": 0.5},
        ]
    )
    s = summary(four_requests(), its)
    assert s.draft_time_frac == pytest.approx(0.05)
    assert s.verify_time_frac == pytest.approx(0.8)
    assert s.overhead_time_frac == pytest.approx(0.15)


def test_counts_come_from_the_tables_and_the_memory_plan():
    req = requests_frame(
        [
            {"arrival": 0.0, "first": 0.1, "finish": 0.2, "out": 2, "preemptions": 2},
            {"arrival": 0.0, "first": 0.1, "finish": 0.2, "out": 2, "preemptions": 1},
        ]
    )
    s = summary(req, TWO_SECONDS, peak_blocks=37, num_blocks=120)
    assert s.preemptions == 3
    assert s.kv_blocks_total == 120 and s.kv_blocks_peak == 37
    assert s.iterations == 2


# -- the iteration log -----------------------------------------------------------------------
def logged(rows: list[tuple]) -> pd.DataFrame:
    """Rows recorded in column order, then the frame (the one place that calls ``record``)."""
    log = IterationLog()
    for row in rows:
        log.record(IterationRecord(*row))
    return log.frame()


def test_the_iteration_log_keeps_one_row_per_iteration_in_order():
    rows = [
        (0.0, 0.5, 2, 1, 9, 4, 3, 2, 0.1, 0.3, 0.1, 7, 8, 0, 0),
        (0.5, 0.25, 3, 0, 12, 5, 5, 3, 0.05, 0.15, 0.05, 9, 12, 1, 0),
    ]
    frame = logged(rows)
    assert list(frame.columns) == list(ITERATION_COLUMNS)
    assert [tuple(r) for r in frame.itertuples(index=False)] == rows
    assert frame["decode_seqs"].dtype == np.int64 and frame["start_s"].dtype == np.float64


def test_an_empty_iteration_log_is_an_empty_frame_with_every_column():
    frame = logged([])
    assert len(frame) == 0 and list(frame.columns) == list(ITERATION_COLUMNS)


def test_a_step_that_decodes_nobody_lengthens_the_gap_of_every_sequence_it_kept_waiting():
    """SGLang runs a prefill batch instead of decoding: the running sequences' next token comes
    a prefill later, as bench_serving's per-chunk ITL times it; a prefill with nobody waiting
    (the first request, or one alone at concurrency 1) adds nothing."""
    from simspec.engine.metrics import token_gaps

    durations = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    decode = np.array([0, 4, 0, 3, 0, 5])
    waiting = np.array([0, 0, 3, 0, 0, 0])  # the prefill at 2 kept 3 waiting, the one at 4 none
    gaps, weights = token_gaps(durations, decode, waiting)
    assert gaps.tolist() == [2.0, 4.0 + 3.0, 6.0] and weights.tolist() == [4, 3, 5]


def test_sglang_itl_counts_the_prefill_steps_its_decodes_wait_through():
    """Poisson arrivals on SGLang (prefill first): the p99 ITL is the gap over a prefill step,
    far above a decode step's; vLLM's mixed steps keep every decode going."""
    sc = Scenario(
        engine="sglang",
        method=MethodConfig(name="autoregressive", k=0),
        workload=WorkloadConfig(
            arrival="poisson", rate=12, requests=200, lengths_from=None,
            prompt={"mean": 1024}, output={"mean": 128},
        ),
    )  # fmt: skip
    res = simulate(sc)
    it = res.iterations
    assert (it.waiting_seqs[it.decode_seqs == 0] > 0).any()
    decode_step = it.duration_s[it.decode_seqs > 0].quantile(0.99) * 1e3
    assert res.summary.itl_ms_p99 > 1.5 * decode_step


def test_an_overloaded_rate_reports_the_engines_tokens_not_zero():
    """Arrivals far faster than a step leave a window too short to hold steps' tokens: the
    throughput is the engine's while the measured requests were in it, never 0 (QA: 4,096
    req/s read 0.0 tok/s beside a TPOT of 48 ms)."""
    from simspec.config import LengthSpec, Scenario, WorkloadConfig
    from simspec.engine.simulation import simulate

    fixed = {"lengths_from": None, "prompt": LengthSpec(dist="fixed", mean=32)}
    wl = WorkloadConfig(
        arrival="poisson", rate=4096, requests=8, output=LengthSpec(dist="fixed", mean=8), **fixed
    )
    s = simulate(Scenario(workload=wl)).summary
    assert s.throughput_tok_s > 1000 and s.tpot_ms_p50 > 0


def _rows(n: int, start: float) -> list[IterationRecord]:
    return [
        IterationRecord(
            start + 0.1 * i, 0.1, 4, i % 2, 16, 5, 5, 4, 1e-3, 2e-2, 1e-4, 40 + i, 16, i % 3, 0
        )  # fmt: skip
        for i in range(n)
    ]


def test_a_run_recorded_as_columns_frames_as_its_rows_would():
    """IterationLog.record_block (a run of steps computed at once) between rows gives the
    same table, values and dtypes, as recording every row."""
    first, run, last = _rows(3, 0.0), _rows(4, 1.0), _rows(2, 2.0)
    rows = IterationLog()
    for row in first + run + last:
        rows.record(row)
    mixed = IterationLog()
    for row in first:
        mixed.record(row)
    mixed.record_block(tuple(np.array(column) for column in zip(*run, strict=True)))
    for row in last:
        mixed.record(row)
    pd.testing.assert_frame_equal(mixed.frame(), rows.frame(), check_exact=True)
    only = IterationLog()
    only.record_block(tuple(np.array(column) for column in zip(*run, strict=True)))
    want = IterationLog()
    for row in run:
        want.record(row)
    pd.testing.assert_frame_equal(only.frame(), want.frame(), check_exact=True)


def test_a_fleet_window_folds_a_run_recorded_as_columns_row_by_row():
    from simspec.engine.fleet import WindowedLog

    run = _rows(30, 0.0)
    rows, block = WindowedLog(1.0, 100), WindowedLog(1.0, 100)
    for row in run:
        rows.record(row)
    block.record_block(tuple(np.array(column) for column in zip(*run, strict=True)))
    assert block == rows
