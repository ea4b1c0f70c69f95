"""A prefill/decode-disaggregated fleet (FleetConfig.prefill, ``simspec fleet
--prefill-replicas``): prefill instances run each prompt and its first token, the KV crosses
to a decode instance, and the client's first token is the decode instance's admission."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from simspec.cli.main import app
from simspec.config import (
    AcceptanceConfig,
    FleetConfig,
    MethodConfig,
    PrefillPool,
    Scenario,
    WorkloadConfig,
)
from simspec.engine.build import setup_replica
from simspec.engine.disaggregation import prefill_scenario, transfer_s
from simspec.engine.fleet import simulate_fleet
from simspec.errors import InputError
from simspec.studies.fleet import FleetSlo, per_request, run_fleet, utilisation
from tests.refusals import one_error

runner = CliRunner()
WL = WorkloadConfig(arrival="poisson", rate=6.0, requests=120, measure="whole")


def pd_fleet(**pool) -> FleetConfig:
    eagle = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))
    sc = Scenario(workload=WL, disaggregation_mode="decode", method=eagle)
    return FleetConfig(replicas=[sc] * 2, prefill=PrefillPool(replicas=1, **pool))


def test_every_request_is_prefilled_once_sent_once_and_decoded_after_it_lands():
    run = run_fleet(pd_fleet())
    q = run.requests
    assert len(q) == 120 and not q.unfinishable.any()
    assert (q.prefill_replica == 0).all() and set(q.replica) <= {1, 2}
    assert (q.arrival_s < q.prefill_done_s).all()
    assert (q.prefill_done_s < q.kv_landed_s).all() and (q.kv_landed_s <= q.first_token_s).all()
    assert (q.output_tokens == q.requested_output_tokens).all()
    table = utilisation(run)
    assert list(table.role) == ["prefill", "decode", "decode"]
    assert list(table.requests) == [120, int((q.replica == 1).sum()), int((q.replica == 2).sum())]
    # the prefill instance never decodes: one iteration per prompt chunk at most, little busy
    assert table.busy_s[0] < min(table.busy_s[1], table.busy_s[2])


def test_a_transfer_takes_the_link_latency_plus_the_prompts_kv_over_the_bandwidth():
    cfg = pd_fleet(kv_transfer_gbps=100.0, kv_transfer_latency_ms=5.0)
    q = run_fleet(cfg).requests
    kv = setup_replica(prefill_scenario(cfg.replicas[0])).memory.kv_bytes_per_token
    expected = [transfer_s(int(p), kv, 100.0, 0.005) for p in q.prompt_tokens]
    assert list(q.kv_landed_s - q.prefill_done_s) == pytest.approx(expected, rel=1e-9)
    slow = run_fleet(pd_fleet(kv_transfer_latency_ms=500.0)).requests
    ttft = per_request(run_fleet(pd_fleet()), FleetSlo(2000, 50)).ttft_ms
    slow_ttft = per_request(
        run_fleet(pd_fleet(kv_transfer_latency_ms=500.0)), FleetSlo(2000, 50)
    ).ttft_ms
    assert slow_ttft.median() > ttft.median() + 450
    assert len(slow) == 120


def test_the_same_seed_gives_the_same_run():
    a, b = run_fleet(pd_fleet()).requests, run_fleet(pd_fleet()).requests
    pd.testing.assert_frame_equal(a, b)


def test_prefill_instances_need_decode_instances_behind_them():
    sc = Scenario(workload=WL)
    with pytest.raises(ValueError, match="disaggregation_mode: a fleet with prefill instances"):
        FleetConfig(replicas=[sc], prefill=PrefillPool(replicas=1))


def test_the_cli_runs_a_disaggregated_fleet_and_refuses_a_link_without_one(tmp_path):
    out = tmp_path / "r.csv"
    args = ["fleet", "--qps", "6", "--requests", "60", "--replicas", "2"]
    result = runner.invoke(app, [*args, "--prefill-replicas", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "1 prefill + 2 decode x llama-3.1-8b" in text and "prefill/decode:" in text
    table = pd.read_csv(out)
    assert {"prefill_replica", "prefill_done_s", "kv_landed_s"} <= set(table.columns)
    one_error(runner.invoke(app, [*args, "--kv-transfer-gbps", "100"]), "--kv-transfer-gbps")
    bad = runner.invoke(app, [*args, "--prefill-replicas", "1", "--kv-transfer-gbps", "0"])
    one_error(bad, "--kv-transfer-gbps", "greater than 0")
    hf = runner.invoke(app, [*args, "--prefill-replicas", "1", "--engine", "hf"])
    one_error(hf, "--prefill-replicas", "engine hf runs no prefill/decode", "sglang")


def test_the_plain_fleet_never_runs_a_disaggregated_one_as_if_it_had_no_prefill():
    with pytest.raises(InputError, match="simulate_disaggregated"):
        simulate_fleet(pd_fleet())
