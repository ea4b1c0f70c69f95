"""Hostile input to fleet and plan: a span that would not fit, requests that cannot finish, a
warm-up past every arrival, flags plan --trace has no use for, and infinities. Each ends in
one line and exit 2 before the work, in bounded memory; an interval stays a share."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from simspec.cli.main import app
from simspec.config import FleetConfig, Scenario, WorkloadConfig
from simspec.engine.fleet import WindowedLog, check_span, max_windows, simulate_fleet
from simspec.engine.intervals import proportion_interval
from simspec.engine.metrics import IterationRecord
from simspec.errors import InputError
from simspec.studies.fleet import FleetSlo, summarize_fleet, timeline

runner = CliRunner()
SLO = ["--slo-ttft-ms", "2000", "--slo-tpot-ms", "50"]
MEMORY_CAP = 2 * 1024**3


def trace(tmp_path: Path, rows: list[tuple[float, int, int]], name: str = "t.csv") -> str:
    """A plain arrival trace of ``rows`` (arrival_s, prompt_len, output_len), chat domain."""
    body = "".join(f"{a},{p},{o},conversation\n" for a, p, o in rows)
    path = tmp_path / name
    path.write_text("arrival_s,prompt_len,output_len,domain\n" + body)
    return str(path)


SMALL = [(0.0, 100, 20), (0.5, 200, 30), (1.0, 50, 10)]
POISSON = WorkloadConfig(arrival="poisson", rate=1.0, requests=3, measure="whole")


CHILD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))
from typer.testing import CliRunner
from simspec.cli.main import app
results = []
for args in json.loads(sys.argv[1]):
    r = CliRunner().invoke(app, args)
    results.append([r.exit_code, r.output, repr(r.exception)])
print(json.dumps(results))
"""


def capped(cases: list[list[str]], cwd: Path) -> list[tuple[int, str, str]]:
    """``simspec ARGS`` for each of ``cases`` in one child process under a 2 GB address-space
    cap and a timeout (one interpreter start for all: it is most of the time): a run whose
    memory grows with the span fails there instead of taking the machine. Per case: exit
    code, output, and the exception a crash left."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    code = CHILD.replace("CAP", str(MEMORY_CAP))
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=cwd,
        env=env,
        check=True,
    )
    return [tuple(r) for r in json.loads(proc.stdout.splitlines()[-1])]


def one_error_line(text: str) -> str:
    lines = [x for x in text.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    return lines[0]


# -- a fleet's span over its windows is bounded before the run ----------------------------------


TRACE_SPANS = {  # each flag within its own bound; the span over the windows is not
    # 29 days at 10 ms windows (an arrival at 1e9 s the trace reader refuses itself: a trace
    # spans at most 30 days, tests/test_hostile_traces.py)
    "arrival-29-days": ([(0.0, 100, 20), (0.5, 200, 30), (2.5e6, 50, 10)], ["--window-s", "0.01"]),
    "a-month-of-tiles-at-10ms": (
        [(0.0, 100, 20), (500.0, 200, 30), (999.0, 50, 10)],
        ["--tile", "2592000", "--window-s", "0.01"],
    ),
    # stretched to 17 days (--target-qps 1e-6 would stretch past the 30 days a trace may span,
    # which the trace reader refuses itself)
    "target-qps-2e-5": (
        [(float(i), 100, 20) for i in range(30)],
        ["--target-qps", "2e-5", "--window-s", "0.01"],
    ),
}
POISSON_SPAN = ["--qps", "0.001", "--requests", "30", "--window-s", "0.01"]


@pytest.mark.slow  # a CLI subprocess under a memory cap: seconds of start-up
def test_a_span_past_the_timeline_is_refused_before_the_run_in_bounded_memory(tmp_path):
    cases, outs = [], []
    for name, (rows, flags) in TRACE_SPANS.items():
        outs.append(tmp_path / f"{name}.csv")
        path = trace(tmp_path, rows, f"{name}-trace.csv")
        cases.append(["fleet", "--trace", path, *SLO, *flags, "--out", str(outs[-1])])
    outs.append(tmp_path / "poisson.csv")
    cases.append(["fleet", *POISSON_SPAN, *SLO, "--out", str(outs[-1])])
    names = [*TRACE_SPANS, "poisson"]
    for name, out, (code, output, crash) in zip(names, outs, capped(cases, tmp_path), strict=True):
        assert code == 2, f"{name}: {crash} {output[-500:]}"
        line = one_error_line(output)
        assert line.startswith("error: --window-s: the arrivals span"), name
        assert "give --window-s >=" in line and not out.exists()
        if name == "poisson":  # the flags that set the span
            assert "--requests 30 at --qps 0.001" in line
        else:
            assert "--tile" in line and "--target-qps" in line


@pytest.mark.parametrize("last_s", [2e4, 3.3e7, 1e9, 7.77e12])
@pytest.mark.parametrize("replicas", [1, 3, 1024])
def test_the_window_the_error_asks_for_fits(last_s, replicas):
    cfg = FleetConfig.uniform(Scenario(workload=POISSON), replicas, "round_robin")
    gaps = np.array([0.0, last_s / 2, last_s / 2])
    with pytest.raises(InputError, match="give --window-s >= ") as exc:
        check_span(cfg, gaps, 0.01)
    asked = float(exc.value.message.split("give --window-s >= ")[1].split(",")[0])
    check_span(cfg, gaps, asked)  # fits
    assert last_s // asked + 1 <= max_windows(replicas)


def test_a_queue_draining_past_the_timeline_is_refused_as_it_happens():
    log = WindowedLog(window_s=1.0, max_windows=5)
    log.record(_iteration(start_s=0.5, duration_s=1.0))  # its time split over windows 0, 1
    before = dataclasses.asdict(log)
    with pytest.raises(InputError, match="--window-s: the run still computes at 5.5 s"):
        log.record(_iteration(start_s=4.0, duration_s=1.5))  # starts inside, ends past
    assert dataclasses.asdict(log) == before and len(log.busy_s) == 2  # nothing logged


def _iteration(start_s: float, duration_s: float) -> IterationRecord:
    return IterationRecord(start_s, duration_s, 1, 0, 1, 1, 0, 0, 0.0, duration_s, 0.0, 1, 1, 0)


def _replay(path: str) -> Scenario:
    return Scenario(workload=WorkloadConfig(arrival="replay", arrival_trace=path))


# -- a run where no request can finish ---------------------------------------------------------


@pytest.mark.parametrize(
    "prompt, output", [(2_147_483_647, 20), (100, 200_000)], ids=["prompt", "output"]
)
def test_a_trace_no_request_of_which_can_finish_is_one_line_naming_the_context(
    tmp_path, prompt, output
):
    path = trace(tmp_path, [(0.0, prompt, output), (0.5, prompt, output)])
    out = tmp_path / "r.csv"
    result = runner.invoke(app, ["fleet", "--trace", path, *SLO, "--out", str(out)])
    assert result.exit_code == 2
    line = one_error_line(result.output)
    assert "no request of the run can finish: 2 of 2 are longer" in line
    assert "context, 131,072 tokens" in line and not out.exists()


@pytest.mark.parametrize("prefill", [[], ["--prefill-replicas", "1"]], ids=["whole", "pd"])
def test_prompts_past_an_engines_whole_prompt_budget_name_the_budget_not_the_kv(tmp_path, prefill):
    """TensorRT-LLM admits a prompt whole, never past max_num_tokens (QA: 9,000-token
    prompts were blamed on the KV cache, with "raise tp")."""
    path = trace(tmp_path, [(0.0, 9000, 16), (2.0, 9000, 16)])
    result = runner.invoke(app, ["fleet", "--engine", "trtllm", "--trace", path, *prefill])
    assert result.exit_code == 2
    line = one_error_line(result.output)
    assert "2 of 2 have prompts longer than the token budget (8,192)" in line
    assert "--max-num-batched-tokens" in line and "raise tp" not in line


def test_a_max_model_len_below_every_request_is_named_not_the_kv_cache(tmp_path):
    """QA: it read "need more KV cache than a replica holds ...: raise tp"."""
    path = trace(tmp_path, [(0.0, 80, 40), (0.5, 80, 40)])
    args = ["fleet", "--trace", path, *SLO, "--max-model-len", "100"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "r.csv")])
    assert result.exit_code == 2
    line = one_error_line(result.output)
    assert "2 of 2 are longer (prompt + output) than the max_model_len of 100 tokens" in line


def test_a_fleet_that_refused_some_requests_says_why(tmp_path):
    """QA: only "unfinishable 1" in the summary; sweep says why, and now fleet does."""
    path = trace(tmp_path, [(0.0, 80, 40), (0.5, 200, 40), (1.0, 80, 40)])
    args = ["fleet", "--trace", path, *SLO, "--max-model-len", "150"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "note: 1 of 3 requests went unserved" in " ".join(result.output.split())


def test_the_timeline_of_a_run_with_no_finished_request_has_no_nan_cast(tmp_path):
    path = trace(tmp_path, [(0.0, 2_147_483_647, 20), (3.0, 2_147_483_647, 20)])
    run = simulate_fleet(FleetConfig.uniform(_replay(path), 2, "round_robin"))
    series = timeline(run)
    # every arrival counts, an unfinishable one too (QA: the timeline had dropped them)
    assert series.loc[series["replica"] == -1, "arrivals"].sum() == 2
    assert np.isfinite(series["utilisation"]).all() and (series["queue_depth"] == 0).all()


# -- plan --trace: only the flags it reads, a stated percentile, a finite price ----------------


PLAN_TRACE = ["plan", "--trace", "azure-code", "--window", "0:30", *SLO]


@pytest.mark.parametrize(
    "flags, field, why",
    [
        (["--duration", "30"], "--duration", "--window"),
        (["--percentile", "50"], "--percentile", "--attainment"),
        (["--percentile", "75"], "--percentile", "--attainment"),
        (["--gpu-hour-price", "inf"], "--gpu-hour-price", "finite number > 0"),
        (["--gpu-hour-price", "0"], "--gpu-hour-price", "finite number > 0"),
        (["--slo-tpot-ms", "inf"], "--slo-tpot-ms", "finite number of ms >= 0.1"),
    ],
)
def test_plan_trace_refuses_what_it_would_ignore_or_print_as_inf(flags, field, why):
    result = runner.invoke(app, [*PLAN_TRACE, *flags])
    assert result.exit_code == 2
    line = one_error_line(result.output)
    assert line.startswith(f"error: {field}: ") and why in line


@pytest.mark.parametrize(
    "flags, line",
    [
        (["--percentile", "75"], "error: --percentile: choose 50 or 99 (got 75)"),
        (
            ["--gpu-hour-price", "inf"],
            "error: --gpu-hour-price: must be a finite number > 0, got inf",
        ),
        (
            ["--slo-ttft-ms", "inf"],
            "error: --slo-ttft-ms: must be a finite number of ms >= 1, got inf",
        ),
    ],
)
def test_plan_refuses_a_percentile_outside_50_99_and_infinite_numbers(flags, line):
    result = runner.invoke(app, ["plan", "--qps", "1", *SLO, *flags])
    assert result.exit_code == 2 and one_error_line(result.output) == line


# -- warm-up and the attainment's interval -----------------------------------------------------


def test_a_warmup_past_every_arrival_is_refused_naming_the_span(tmp_path):
    summary = tmp_path / "s.json"
    args = ["fleet", "--trace", trace(tmp_path, SMALL), *SLO, "--summary", str(summary)]
    result = runner.invoke(app, [*args, "--warmup-s", "1e300"])
    assert result.exit_code == 2 and not summary.exists()
    line = one_error_line(result.output)
    assert line.startswith("error: --warmup-s: 1e+300 s leaves no request to measure")
    assert "the last arrives at 1 s" in line


def test_summarize_refuses_a_warmup_that_leaves_no_request(tmp_path):
    run = simulate_fleet(FleetConfig.uniform(_replay(trace(tmp_path, SMALL)), 1, "round_robin"))
    with pytest.raises(InputError, match="--warmup-s"):
        summarize_fleet(run, FleetSlo(2000, 50), warmup_s=5.0)


def test_slo_attainment_over_three_requests_has_an_interval_inside_0_1(tmp_path):
    summary = tmp_path / "s.json"
    args = ["fleet", "--trace", trace(tmp_path, SMALL), "--slo-ttft-ms", "9"]
    result = runner.invoke(app, [*args, "--slo-tpot-ms", "50", "--summary", str(summary)])
    assert result.exit_code == 0, result.output
    row = json.loads(summary.read_text())
    low, value, high = (row[f"slo_attainment{s}"] for s in ("_ci_low", "", "_ci_high"))
    assert 0 <= low < value < high <= 1  # 2 of 3 within a 9 ms TTFT


def test_the_attainment_interval_is_wilsons_with_width_at_a_share_of_one():
    # scipy.stats.binomtest(k, n).proportion_ci(method="wilson") for 2 of 3 and 90 of 100
    two_of_three, ninety_of_100 = (0.207660, 0.938508), (0.825634, 0.944771)
    assert proportion_interval(np.array([True, False, True])) == pytest.approx(
        two_of_three, abs=1e-6
    )
    low, high = proportion_interval(np.ones(456, dtype=bool))
    assert 0.99 < low < 1.0 and high == 1.0
    # independent-looking outcomes get Wilson's own; a burst of misses (correlated
    # neighbours) widens it, still inside [0, 1]
    mixed = np.array([True] * 9 + [False])
    assert proportion_interval(np.tile(mixed, 10)) == pytest.approx(ninety_of_100, abs=1e-6)
    low, high = proportion_interval(np.array([True] * 90 + [False] * 10))
    assert 0 <= low < ninety_of_100[0] and ninety_of_100[1] < high <= 1


# -- non-finite numbers say the range they are outside -----------------------------------------


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--window-s", "must be a finite number of seconds >= 0.01"),
        ("--warmup-s", "must be a finite number of seconds >= 0"),
        ("--slo-ttft-ms", "must be a finite number of ms >= 1"),
        ("--slo-tpot-ms", "must be a finite number of ms >= 0.1"),
    ],
)
def test_fleet_says_an_infinite_number_is_not_finite(tmp_path, flag, message):
    args = ["fleet", "--trace", trace(tmp_path, SMALL), *SLO, flag, "inf"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert one_error_line(result.output) == f"error: {flag}: {message}, got inf"


@pytest.mark.parametrize(
    ("command", "body", "field"),
    [
        ("fleet", "workload: {arrival: closed, concurrency: 8}", "workload.arrival"),
        ("fleet", "workload: {concurrency: 8}", "workload.concurrency"),
        ("fleet", "workload: {measure: steady}", "workload.measure"),
        ("plan", "workload: {arrival: closed, concurrency: 8}", "workload.arrival"),
        ("plan", "workload: {requests: 100}", "workload.requests"),
        ("plan", "batch_sizes: [1, 2]", "batch_sizes"),
        # fields a Poisson run reads not (QA: fleet --qps ran a file's turnovers,
        # warmup_requests and batch_sizes, and plan's probes its turnovers, without a word)
        ("fleet", "workload: {turnovers: 5}", "workload.turnovers"),
        ("fleet", "workload: {warmup_requests: 40}", "workload.warmup_requests"),
        ("fleet", "batch_sizes: [1, 4]", "batch_sizes"),
        ("plan", "workload: {turnovers: 5}", "workload.turnovers"),
        # it replaces the rate: fleet ran the file's schedule, its summary saying --qps (QA)
        ("fleet", "workload: {rate_schedule: [[0, 2], [10, 20]]}", "workload.rate_schedule"),
    ],
)
def test_qps_runs_refuse_a_config_field_they_would_replace(tmp_path, command, body, field):
    config = tmp_path / "c.yaml"
    config.write_text(f"model: llama-3.1-8b\n{body}\n")
    result = runner.invoke(app, [command, "--config", str(config), "--qps", "4"])
    assert result.exit_code == 2
    assert one_error_line(result.output).startswith(f"error: {field}: the --config file")


def test_fleet_qps_runs_the_config_files_request_count():
    from simspec.cli.fleet import FLEET_REQUESTS, poisson_workload

    assert poisson_workload({"requests": 100}, 4.0, None, None)["requests"] == 100
    assert poisson_workload({"requests": 100}, 4.0, 50, None)["requests"] == 50
    assert poisson_workload(None, 4.0, None, None)["requests"] == FLEET_REQUESTS


def test_a_files_methods_list_is_refused_naming_the_file_not_a_flag(tmp_path):
    """A fleet runs one method: a --config listing two is refused naming its methods, not
    the --method flag nobody gave (QA)."""
    cfg = tmp_path / "f.yaml"
    cfg.write_text("model: llama-3.1-8b\nmethods:\n  - {name: eagle3}\n  - {name: ngram}\n")
    result = runner.invoke(app, ["fleet", "--config", str(cfg), "--qps", "2", "--requests", "20"])
    assert result.exit_code == 2
    assert result.output.startswith("error: methods:") and "--method" not in result.output


@pytest.mark.parametrize(
    "flags",
    [
        ["--method", "mtp"],
        ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}'],
    ],
)
def test_fleet_refuses_mtp_on_a_model_without_mtp_layers(tmp_path, flags):
    """MTP drafts with the model's own multi-token-prediction layers: a fleet of a model
    that has none is refused as sweep and plan refuse it (QA: fleet ran it, rc 0, with a
    made-up speedup), and nothing is written."""
    out = tmp_path / "f.csv"
    args = ["fleet", "--model", "llama-3.1-8b", *flags, "--qps", "2", "--requests", "20"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 2
    assert result.output.startswith("error: methods.mtp: llama-3.1-8b declares no multi-token")
    assert not out.exists()


# -- a --tile shorter than the trace: the cut is named, with what it left out ------------------


FOUR = [(0.0, 100, 20), (1.0, 200, 30), (2.0, 50, 10), (3.0, 80, 12)]


@pytest.mark.parametrize("command", ["fleet", "plan"])
def test_a_tile_shorter_than_the_trace_names_the_cut_and_what_it_left_out(tmp_path, command):
    args = [command, "--trace", trace(tmp_path, FOUR), "--tile", "1.5", *SLO]
    if command == "plan":
        args += ["--concurrencies", "none", "--methods", "autoregressive"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "--tile 1.5 s is shorter than the trace as windowed and rescaled" in text
    assert "the replay stops at 1.5 s, 2 of its 4 requests" in text


def test_a_tile_that_repeats_the_trace_says_nothing_of_a_cut(tmp_path):
    result = runner.invoke(app, ["fleet", "--trace", trace(tmp_path, FOUR), "--tile", "8", *SLO])
    assert result.exit_code == 0, result.output
    assert "shorter than the trace" not in result.output


def test_a_files_router_names_the_flag_that_sets_it(tmp_path):
    """QA: a scenario file's "router: random" read "Extra inputs are not permitted" alone."""
    cfg = tmp_path / "f.yaml"
    cfg.write_text("router: random\n")
    result = runner.invoke(app, ["fleet", "--config", str(cfg), "--qps", "1", "--requests", "10"])
    assert result.exit_code == 2
    assert "router: Extra inputs are not permitted: the fleet's router is the --router flag" in (
        " ".join(result.output.split())
    )


def test_a_dataset_flag_that_contradicts_the_traces_column_is_refused(tmp_path):
    """The trace's dataset/domain column says each request's dataset, as --dataset's help
    says (QA: plan --trace FILE --dataset sharegpt replaced a gsm8k column without a word)."""
    path = tmp_path / "gsm.csv"
    path.write_text("arrival_s,prompt_len,output_len,dataset\n0,100,20,gsm8k\n0.5,90,30,gsm8k\n")
    args = ["fleet", "--trace", str(path), "--method", "eagle3", *SLO]
    result = runner.invoke(app, [*args, "--dataset", "sharegpt"])
    assert result.exit_code == 2 and "--dataset" in result.output and "(gsm8k)" in result.output
    assert runner.invoke(app, [*args, "--dataset", "gsm8k"]).exit_code == 0


@pytest.mark.parametrize("command", ["plan", "fleet"])
def test_an_slo_below_its_least_says_the_one_range_inf_included(command):
    """QA: typer's range said "[0.1, inf]" for --slo-tpot-ms 0.05, and inf was then refused
    as "must be a finite number > 0": one range, in one message."""
    result = runner.invoke(app, [command, "--qps", "2", "--slo-tpot-ms", "0.05"])
    assert result.exit_code == 2
    assert one_error_line(result.output) == (
        "error: --slo-tpot-ms: must be a finite number of ms >= 0.1, got 0.05"
    )
