"""The fleet: requests conserved across the router, a fleet of one is the single-replica run,
state-free routers shard exactly, and least-outstanding routing beats random under bursts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simspec.catalog.methods import preset_method
from simspec.config import ROUTERS, FleetConfig, Scenario, SchedulerConfig, WorkloadConfig
from simspec.engine.fleet import simulate_fleet
from simspec.engine.simulation import simulate
from simspec.errors import InputError
from simspec.studies.fleet import (
    FleetSlo,
    per_request,
    run_fleet,
    summarize_fleet,
    timeline,
    utilisation,
)
from simspec.studies.runs import Runs

POISSON = WorkloadConfig(arrival="poisson", rate=12.0, requests=300, measure="whole")


def _eagle(wl: WorkloadConfig = POISSON) -> Scenario:
    return Scenario(workload=wl, method=preset_method("eagle3", "sharegpt"))


@pytest.mark.slow
@pytest.mark.parametrize("router", ROUTERS)
def test_requests_are_conserved_across_the_router(router: str) -> None:
    run = simulate_fleet(FleetConfig.uniform(_eagle(), 3, router))
    q = run.requests
    assert list(q["request"]) == list(range(POISSON.num_requests))  # each routed once
    assert set(q["replica"]) <= {0, 1, 2}
    finished = q["finish_s"].notna()
    assert (finished | q["unfinishable"]).all()  # every request finishes or is unfinishable
    assert all(s.kv_blocks_in_use_end == 0 for s in run.replicas)  # no blocks leak


@pytest.mark.slow
@pytest.mark.parametrize("router", ["round_robin", "least_kv"])
def test_a_fleet_of_one_is_the_single_replica_run(router: str) -> None:
    sc = _eagle()
    single = simulate(sc).requests.reset_index(drop=True)
    fleet = simulate_fleet(FleetConfig.uniform(sc, 1, router)).requests
    pd.testing.assert_frame_equal(fleet.drop(columns=["request", "replica"]), single)


@pytest.mark.slow
@pytest.mark.parametrize("router", ["round_robin", "random"])
def test_state_free_routers_shard_exactly(router: str) -> None:
    cfg = FleetConfig.uniform(_eagle(), 4, router)
    slo = FleetSlo(200, 30)
    serial = per_request(run_fleet(cfg), slo)
    sharded = per_request(run_fleet(cfg, runs=Runs("process", workers=2)), slo)
    pd.testing.assert_frame_equal(sharded, serial)


def test_each_replica_draws_its_own_acceptance() -> None:
    """QA: every replica replayed one stream, so the k-th request of each drew the same
    acceptance record and decisions: identical requests on four replicas ran in lockstep."""
    same = WorkloadConfig(
        arrival="poisson", rate=40.0, requests=16, measure="whole",
        lengths_from=None, prompt={"mean": 64}, output={"mean": 96},
    )  # fmt: skip
    q = simulate_fleet(FleetConfig.uniform(_eagle(same), 4, "round_robin")).requests
    steps = q.pivot_table(index=q["request"] // 4, columns="replica", values="spec_steps")
    assert not (steps.nunique(axis=1) == 1).all()  # the k-th requests differ somewhere


def test_least_kv_spreads_a_burst_its_blocks_do_not_yet_tell_apart(tmp_path) -> None:
    """Routed requests hold no blocks until admitted, so a burst's free-block counts tie; by
    index replica 0 took 25 of 40 (QA). Ties go to the fewest outstanding."""
    rows = [(5.0 * b, 200, 50) for b in range(5) for _ in range(8)]
    path = tmp_path / "burst.csv"
    pd.DataFrame(rows, columns=["arrival_s", "prompt_len", "output_len"]).to_csv(path, index=False)
    wl = WorkloadConfig(arrival="replay", arrival_trace=str(path), measure="whole")
    run = simulate_fleet(FleetConfig.uniform(Scenario(workload=wl), 4, "least_kv"))
    assert run.requests["replica"].value_counts().tolist() == [10, 10, 10, 10]


def test_a_state_aware_router_refuses_a_shard() -> None:
    with pytest.raises(InputError, match="router"):
        simulate_fleet(FleetConfig.uniform(_eagle(), 2, "least_outstanding"), only=[0])


@pytest.mark.slow
def test_heterogeneous_replicas_run_their_own_methods() -> None:
    plain = Scenario(workload=POISSON)
    run = simulate_fleet(FleetConfig(replicas=[_eagle(), plain], router="round_robin"))
    q = run.requests
    assert (q.loc[q["replica"] == 0, "spec_steps"] > 0).all()
    assert (q.loc[q["replica"] == 1, "spec_steps"] == 0).all()
    k = run.windows.groupby("replica")["active_k"].max()
    assert k[0] > 0 and k[1] == 0


def test_replicas_must_share_the_workload() -> None:
    other = Scenario(workload=POISSON.model_copy(update={"rate": 3.0}))
    with pytest.raises(ValueError, match="workload"):
        FleetConfig(replicas=[_eagle(), other])
    with pytest.raises(ValueError, match="open arrivals"):
        FleetConfig(replicas=[Scenario()])


@pytest.mark.slow
def test_least_outstanding_beats_random_on_bursts() -> None:
    # bursts of 50 req/s for 3 s every 12 s, 2 req/s between them, on three replicas of
    # Llama-3.1-8B (plain decoding, ShareGPT lengths) capped at 32 running requests each: a
    # burst overfills the fleet, a lull drains it (measured: p99 TTFT 7.4 s random, 5.2 s LOR)
    schedule = [(float(t + dt), r) for t in range(0, 300, 12) for dt, r in ((0, 50.0), (3, 2.0))]
    wl = WorkloadConfig(arrival="poisson", rate_schedule=schedule, requests=600, measure="whole")
    sc = Scenario(workload=wl, scheduler=SchedulerConfig(max_num_seqs=32))
    p99 = {}
    for router in ("random", "least_outstanding"):
        run = simulate_fleet(FleetConfig.uniform(sc, 3, router))
        p99[router] = summarize_fleet(run, FleetSlo(1000, 100))["ttft_ms_p99"]
    assert p99["least_outstanding"] < 0.85 * p99["random"]


@pytest.mark.slow
def test_timeline_and_summary_are_consistent() -> None:
    run = simulate_fleet(FleetConfig.uniform(_eagle(), 2, "power_of_two"), window_s=5.0)
    slo = FleetSlo(200, 30)
    row = summarize_fleet(run, slo)
    table = per_request(run, slo)
    assert row["requests"] == len(table) == POISSON.num_requests
    assert row["slo_attainment"] == pytest.approx(table["met_slo"].mean())
    tl = timeline(run)
    fleet = tl[tl["replica"] == -1]
    assert fleet["arrivals"].sum() == POISSON.num_requests
    emitted = run.requests["output_tokens"].sum() - run.requests["tokens_before_start"].sum()
    assert (fleet["tokens_s"] * fleet["span_s"]).sum() == pytest.approx(emitted)
    assert (tl["queue_depth"] >= 0).all()
    assert np.isfinite(row["ttft_ms_p99_ci_low"])


def test_throughput_after_a_warmup_counts_every_token_made_after_it() -> None:
    """Requests that arrived before the warm-up still decode after it: their tokens count in
    the time they are divided by (QA: throughput read 18 % under the timeline's)."""
    cfg = FleetConfig.uniform(_eagle(), 2, "power_of_two")
    run = simulate_fleet(cfg, window_s=5.0)
    row = summarize_fleet(run, FleetSlo(200, 30), warmup_s=10.0)
    tl = timeline(run)
    fleet = tl[(tl["replica"] == -1) & (tl["time_s"] >= 10.0)]
    made = (fleet["tokens_s"] * fleet["span_s"]).sum()
    assert row["throughput_tok_s"] == pytest.approx(made / (row["makespan_s"] - 10.0), rel=0.02)
    # and the timeline's windows do not move it (QA: 845.6 tok/s at 10 s windows, 891.2 at 1 s)
    fine = summarize_fleet(simulate_fleet(cfg, window_s=1.0), FleetSlo(200, 30), warmup_s=10.0)
    assert fine["throughput_tok_s"] == row["throughput_tok_s"]


def test_the_last_window_is_measured_over_the_part_the_run_lasts() -> None:
    """The run ends inside its last window: that window's rates and shares are over the
    seconds it lasted, not the whole window (QA: a false drop in tokens/s and busy share at the
    end of every run)."""
    wl = WorkloadConfig(arrival="poisson", rate=4.0, requests=40, measure="whole")
    run = simulate_fleet(FleetConfig.uniform(Scenario(workload=wl), 1, "round_robin"), window_s=7.0)
    tl = timeline(run)
    fleet = tl[tl["replica"] == -1].reset_index(drop=True)
    end = float(run.requests["finish_s"].max())
    assert (fleet["span_s"].iloc[:-1] == 7.0).all()
    assert fleet["span_s"].iloc[-1] == pytest.approx(end - fleet["time_s"].iloc[-1])
    assert 0.0 < fleet["span_s"].iloc[-1] < 7.0
    last = run.windows.iloc[-1]  # one replica: its windows are the fleet's
    assert fleet["tokens_s"].iloc[-1] == pytest.approx(
        last["output_tokens"] / fleet["span_s"].iloc[-1]
    )
    assert fleet["utilisation"].iloc[-1] == pytest.approx(
        min(last["busy_s"] / fleet["span_s"].iloc[-1], 1.0)
    )
    assert tl.groupby("time_s")["span_s"].nunique().eq(1).all()


def test_the_timeline_counts_an_unfinishable_arrival() -> None:
    """Every arrival is in the timeline, one no replica can hold too, and its windows reach
    the last arrival (QA: the arrival at 2 s of a 200k-token prompt was missing)."""
    wl = WorkloadConfig(arrival="poisson", rate=2.0, requests=20, measure="whole")
    base = Scenario(workload=wl, method=preset_method("eagle3", "sharegpt"))
    run = simulate_fleet(FleetConfig.uniform(base, 1, "round_robin"), window_s=1.0)
    run.requests.loc[run.requests.index[-1], "unfinishable"] = True  # as if too long
    tl = timeline(run)
    fleet = tl[tl["replica"] == -1]
    assert fleet["arrivals"].sum() == 20
    assert fleet["time_s"].max() + 1.0 > run.requests["arrival_s"].max()


def test_smallest_fleet_searches_doubling_then_bisection(monkeypatch) -> None:
    from simspec.studies import capacity

    tried: list[int] = []

    def probe(cfg: FleetConfig) -> int:  # stands in for a run: the fleet's size
        tried.append(len(cfg.replicas))
        return len(cfg.replicas)

    # a fleet meets the attainment from 5 replicas on
    monkeypatch.setattr(capacity, "summarize_fleet", lambda n, slo: {"slo_attainment": n >= 5})
    n, _ = capacity.smallest_fleet(_eagle(), "round_robin", FleetSlo(1, 1), 0.99, probe=probe)
    assert n == 5 and tried == [1, 2, 4, 8, 6, 5]


def test_smallest_fleet_stops_where_no_replica_can_finish_enough(monkeypatch) -> None:
    """QA: a trace with more requests than 1 - attainment longer than the context replayed
    fleets of 1, 2, 4 ... 256 replicas before saying none."""
    from simspec.studies import capacity

    tried: list[int] = []

    def probe(cfg: FleetConfig) -> int:
        tried.append(len(cfg.replicas))
        return len(cfg.replicas)

    unfinishable = {"slo_attainment": 0.9, "requests": 100, "unfinishable": 10}
    monkeypatch.setattr(capacity, "summarize_fleet", lambda n, slo: unfinishable)
    n, s = capacity.smallest_fleet(_eagle(), "round_robin", FleetSlo(1, 1), 0.99, probe=probe)
    assert (n, s) == (None, None) and tried == [1]
    # within the share the attainment leaves: the search goes on
    monkeypatch.setattr(
        capacity, "summarize_fleet", lambda n, slo: {**unfinishable, "slo_attainment": n >= 2}
    )
    tried.clear()
    assert (
        capacity.smallest_fleet(_eagle(), "round_robin", FleetSlo(1, 1), 0.8, probe=probe)[0] == 2
    )


def test_a_fleet_plan_bills_the_arrivals_span_not_the_drain(monkeypatch) -> None:
    """QA: two methods on one GPU each, serving the same requests and tokens, cost 0.413 and
    0.392 $/M because one drained its last requests 1.2 s later."""
    from simspec.studies import capacity

    made = 39_180.0

    def fleet(makespan: float) -> dict:
        return {
            "throughput_tok_s": made / makespan,
            "makespan_s": makespan,
            "measured_from_s": 0.0,
            "arrival_span_s": 20.0,
            "slo_attainment": 1.0,
            "ttft_ms_p99": 1.0,
            "tpot_ms_p99": 1.0,
            "goodput_req_s": 1.0,
        }

    spans = iter([23.32, 22.14])
    monkeypatch.setattr(capacity, "smallest_fleet", lambda *a, **k: (1, fleet(next(spans))))
    methods = [preset_method("autoregressive"), preset_method("eagle3")]
    from simspec.config import Deployment

    deploy = Deployment(**_eagle().model_dump(exclude={"method"}))
    table = capacity.plan_fleet(deploy, methods, "round_robin", FleetSlo(1, 1), 0.99, 2.5)
    cost = table["cost_per_million_tokens"]
    assert cost[0] == cost[1] == pytest.approx(1 * 2.5 * 20.0 / 3600 / made * 1e6)
    # the summary's span: from the first arrival measured after the warm-up to the last
    run = run_fleet(FleetConfig.uniform(_eagle(), 2, "round_robin"))
    row = summarize_fleet(run, FleetSlo(2000, 50), warmup_s=1.0)
    arrivals = run.requests["arrival_s"]
    first = arrivals[arrivals >= 1.0].min()
    assert row["arrival_span_s"] == arrivals.max() - first


def test_fleet_command_writes_its_outputs(tmp_path) -> None:
    from typer.testing import CliRunner

    from simspec.cli.main import app

    out, summary, tl, report = (tmp_path / n for n in ("r.csv", "s.json", "t.csv", "r.html"))
    args = ["fleet", "--trace", "azure-code", "--window", "0:120", "--replicas", "2"]
    args += ["--router", "round_robin", "--method", "eagle3", "--slo-ttft-ms", "2000"]
    args += ["--slo-tpot-ms", "50", "--out", str(out), "--summary", str(summary)]
    args += ["--timeline", str(tl), "--report", str(report)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out)
    assert list(table.columns[:2]) == ["request", "replica"] and table["met_slo"].dtype == bool
    assert "slo_attainment" in summary.read_text() and report.read_text().startswith("<!doctype")
    import json

    asked = json.loads(summary.read_text())  # a summary read on its own says what it answers
    assert asked["router"] == "round_robin" and asked["method"] == "eagle3"
    assert asked["slo_ttft_ms"] == 2000 and asked["arrivals"] == "azure-code (window 0:120 s)"
    assert (asked["trace_start_s"], asked["trace_end_s"], asked["target_qps"]) == (0, 120, None)
    # the same run writes the same report, byte for byte (QA: plotly's random div id)
    again = tmp_path / "again.html"
    rerun = [a if a != str(report) else str(again) for a in args]
    assert CliRunner().invoke(app, rerun).exit_code == 0
    assert again.read_bytes() == report.read_bytes()
    assert asked["model"] == "llama-3.1-8b" and asked["seed"] == 0
    # each replica's row as the printed per-replica table has it (QA: the fleet's alone)
    replicas = asked["replicas"]
    assert [r["replica"] for r in replicas] == [0, 1]
    assert sum(r["requests"] for r in replicas) == len(table)
    assert all(0.0 <= r["utilisation"] <= 1.0 for r in replicas)
    bad = CliRunner().invoke(app, ["fleet", "--slo-ttft-ms", "1", "--slo-tpot-ms", "1"])
    assert bad.exit_code == 2
    # clock times in full: an hour's trace at 6 digits is 10 ms (QA: TTFT recomputed 9.9 ms off)
    done = table[~table["unfinishable"]]
    ttft = (done["first_token_s"] - done["arrival_s"]) * 1e3
    assert np.allclose(ttft, done["ttft_ms"], rtol=1e-5, atol=1e-6)
    # one path for two outputs would keep only the last written (QA): refused before the run
    same = [*args[:-8], "--out", str(tmp_path / "x.csv"), "--timeline", str(tmp_path / "x.csv")]
    dup = CliRunner().invoke(app, same)
    assert dup.exit_code == 2 and "--timeline" in dup.output and "--out" in dup.output
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.slow
def test_plan_trace_plans_the_recommended_schedule_too(tmp_path) -> None:
    from typer.testing import CliRunner

    from simspec.cli.main import app

    out = tmp_path / "plan.csv"
    args = ["plan", "--trace", "azure-code", "--window", "0:60", "--methods", "eagle3"]
    args += ["--schedule-grid", "1,4", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "50"]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out, keep_default_na=False)
    assert list(frame["method"]) == [
        "autoregressive",
        "eagle3",
        "eagle3 (recommended schedule)",
    ]
    assert list(frame["schedule"][:2]) == ["", ""]
    schedule = frame["schedule"].iloc[2]
    assert schedule.startswith("k_schedule: [[1, ") and schedule.endswith("]]")
    assert frame["replicas"].iloc[2] >= 1
    bad_args = [*args[:7], "--schedule-grid", "0,4", "--slo-ttft-ms", "1", "--slo-tpot-ms", "1"]
    bad = CliRunner().invoke(app, bad_args)
    assert bad.exit_code != 0 and "--schedule-grid" in bad.output


def test_the_schedule_closed_loop_follows_the_trace_windows_lengths() -> None:
    from simspec.config import Deployment
    from simspec.studies.schedule.trace import closed_like

    wl = WorkloadConfig(arrival="replay", arrival_trace="azure-conv", trace_end_s=120.0)
    closed = closed_like(Deployment(workload=wl)).workload
    assert closed.arrival == "closed" and closed.lengths_from is None
    assert closed.prompt.dist == "lognormal" and 500 < closed.prompt.mean < 2000
    assert 1 <= closed.output.min <= closed.output.mean <= closed.output.max


def test_plan_trace_refuses_a_pool_it_would_not_use() -> None:
    """With --concurrencies none no closed loop runs, and the fleets replay in this process:
    --executor and --workers would change nothing (QA)."""
    from typer.testing import CliRunner

    from simspec.cli.main import app

    args = ["plan", "--trace", "azure-code", "--window", "0:30", "--concurrencies", "none"]
    result = CliRunner().invoke(app, [*args, "--executor", "process", "--workers", "2"])
    assert result.exit_code == 2 and "--executor" in result.output


def test_fleet_takes_a_ray_address_only_with_ray() -> None:
    """QA: fleet --executor ray ran on a local Ray only; sweep's --ray-address was missing."""
    from typer.testing import CliRunner

    from simspec.cli.main import app

    result = CliRunner().invoke(
        app, ["fleet", "--qps", "5", "--requests", "8", "--ray-address", "auto"]
    )
    assert result.exit_code == 2 and "--ray-address" in result.output


def test_goodput_and_throughput_run_from_the_first_arrival() -> None:
    """QA: a trace window whose first request came 73 s in divided its goodput by those quiet
    seconds too (25 % low), where the README and vLLM's benchmark start at the first
    arrival."""
    run = run_fleet(FleetConfig.uniform(_eagle(), 2, "round_robin"))
    q = run.requests
    row = summarize_fleet(run, FleetSlo(2000, 50))
    first = float(q["arrival_s"].min())
    assert first > 0 and row["measured_from_s"] == first
    span = row["makespan_s"] - first
    assert row["goodput_req_s"] == pytest.approx(len(q) * row["slo_attainment"] / span)
    assert row["arrival_span_s"] == pytest.approx(float(q["arrival_s"].max()) - first)
    # and so do the busy and occupied shares (QA: utilisation read 25 % low too)
    busy = [s.busy_s / span for s in run.replicas]
    assert row["utilisation_mean"] == pytest.approx(float(np.mean(busy)))
    assert list(utilisation(run)["utilisation"]) == pytest.approx(busy)
    # a warm-up past the first arrival: the clock starts at the first arrival it measures,
    # not at its end (QA: a warm-up ending 173 s before the next arrival read 32 % low goodput)
    after = float(q["arrival_s"][q["arrival_s"] >= 1.0].min())
    assert after > 1.0
    warm = summarize_fleet(run, FleetSlo(2000, 50), warmup_s=1.0)
    assert warm["measured_from_s"] == after
    measured = q[q["arrival_s"] >= 1.0]
    good = float(warm["slo_attainment"]) * len(measured)
    assert warm["goodput_req_s"] == pytest.approx(good / (warm["makespan_s"] - after))


def test_a_report_that_fails_leaves_no_other_output(tmp_path, monkeypatch) -> None:
    """QA: the tables were written before the HTML report was built, so a report that failed
    left them behind for a command that had failed."""
    from typer.testing import CliRunner

    from simspec.cli.main import app
    from simspec.studies import fleet_report

    def broken(*args, **kwargs):
        raise OSError("report failed")

    monkeypatch.setattr(fleet_report, "report_html", broken)
    out, report = tmp_path / "r.csv", tmp_path / "r.html"
    args = ["fleet", "--qps", "4", "--requests", "20", "--out", str(out), "--report", str(report)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and not out.exists() and not report.exists()
