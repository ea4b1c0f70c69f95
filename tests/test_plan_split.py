"""plan --trace --disaggregate: beside each method's smallest colocated fleet, the smallest
prefill/decode split that meets the attainment (capacity.smallest_split), searched by role."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from simspec.cli.main import app
from simspec.config import AcceptanceConfig, FleetConfig, MethodConfig, Scenario, WorkloadConfig
from simspec.studies import capacity
from simspec.studies.fleet import FleetSlo
from tests.refusals import one_error

runner = CliRunner()
TRACE = ["plan", "--trace", "azure-code", "--window", "0:120", "--methods", "eagle3"]
TRACE += ["--concurrencies", "none"]


def _eagle() -> Scenario:
    wl = WorkloadConfig(arrival="poisson", rate=4.0, requests=40, measure="whole")
    eagle = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))
    return Scenario(workload=wl, method=eagle)


def _sized(cfg: FleetConfig) -> tuple[int, int]:
    """Stands in for a run: the fleet's (prefill, decode) instances."""
    return (cfg.prefill.replicas if cfg.prefill else 0, len(cfg.replicas))


def test_the_split_search_doubles_both_pools_then_bisects_decode_then_prefill(monkeypatch):
    tried: list[tuple[int, int]] = []

    def probe(cfg: FleetConfig) -> tuple[int, int]:
        assert all(r.disaggregation_mode == "decode" for r in cfg.replicas)
        tried.append(_sized(cfg))
        return _sized(cfg)

    # a split meets the attainment from 3 prefill and 2 decode instances on
    def summarize(size, slo):
        return {"slo_attainment": float(size[0] >= 3 and size[1] >= 2)}

    monkeypatch.setattr(capacity, "summarize_fleet", summarize)
    split, s, smaller = capacity.smallest_split(
        _eagle(), "round_robin", FleetSlo(1, 1), 0.99, {}, probe=probe
    )
    assert split == (3, 2) and s == {"slo_attainment": 1.0} and smaller == (2, 2)
    # (1,1) (2,2) (4,4) doubled; decode bisected on 1..4 at 4 prefill: (4,2) (4,1);
    # prefill bisected on 1..4 at 2 decode: (2,2) is known, (3,2); a third decode instance
    # would have to spare two prefill ones: (1,3) misses
    assert tried == [(1, 1), (2, 2), (4, 4), (4, 2), (4, 1), (3, 2), (1, 3)]


def test_a_decode_instance_more_is_taken_where_it_spares_two_prefill_ones(monkeypatch):
    # the prefill a split needs falls as its decode pool grows: 4 with 2 decode, 1 with 3
    def summarize(size, slo):
        p, d = size
        return {"slo_attainment": float(d >= 2 and p >= (4 if d == 2 else 1))}

    tried: list[tuple[int, int]] = []

    def probe(cfg: FleetConfig) -> tuple[int, int]:
        tried.append(_sized(cfg))
        return _sized(cfg)

    monkeypatch.setattr(capacity, "summarize_fleet", summarize)
    split, _, smaller = capacity.smallest_split(
        _eagle(), "round_robin", FleetSlo(1, 1), 0.99, {}, probe=probe
    )
    # role by role: (4, 2), 6 in all; a third decode instance spares three prefill ones
    assert split == (1, 3)
    # what it is limited by: the most prefill that missed with 2 decode instances, (3, 2),
    # not (4, 2), which met it (QA)
    assert smaller == (3, 2)
    assert tried[-3:] == [(3, 2), (2, 3), (1, 3)]


def test_no_split_past_the_cap_and_none_where_no_decode_instance_can_finish(monkeypatch):
    monkeypatch.setattr(capacity, "summarize_fleet", lambda size, slo: {"slo_attainment": 0.0})
    slo, sc = FleetSlo(1, 1), _eagle()
    assert capacity.smallest_split(sc, "round_robin", slo, 0.9, {}, 4, probe=_sized) == (
        None,
        None,
        None,
    )
    unfinishable = {"slo_attainment": 0.5, "requests": 10, "unfinishable": 5}
    tried: list[tuple[int, int]] = []

    def probe(cfg: FleetConfig) -> tuple[int, int]:
        tried.append(_sized(cfg))
        return _sized(cfg)

    monkeypatch.setattr(capacity, "summarize_fleet", lambda size, slo: unfinishable)
    assert capacity.smallest_split(sc, "round_robin", slo, 0.9, {}, probe=probe) == (
        None,
        None,
        None,
    )
    assert tried == [(1, 1)]  # more replicas never finish them


def test_plan_fleet_prices_a_split_on_both_pools_and_says_which_layout(monkeypatch):
    summary = {
        "slo_attainment": 1.0,
        "ttft_ms_p99": 100.0,
        "tpot_ms_p99": 10.0,
        "goodput_req_s": 1.0,
        "throughput_tok_s": 100.0,
        "makespan_s": 36.0,
        "measured_from_s": 0.0,
        "arrival_span_s": 36.0,
    }
    monkeypatch.setattr(capacity, "smallest_fleet", lambda *a, **k: (4, summary))
    monkeypatch.setattr(capacity, "smallest_split", lambda *a, **k: ((2, 1), summary, (1, 1)))
    sc = _eagle().model_copy(update={"tp": 2})
    deploy_fields = sc.model_dump(exclude={"method"})
    from simspec.config import Deployment

    deploy = Deployment(**deploy_fields)
    table = capacity.plan_fleet(
        deploy, [sc.method], "round_robin", FleetSlo(1, 1), 0.99, 2.5, disaggregate={}
    )
    assert list(table.columns) == capacity.FLEET_PLAN_COLUMNS
    assert list(table.layout) == ["colocated", "disaggregated"]
    assert list(table.prefill_replicas) == [0, 2] and list(table.replicas) == [4, 1]
    assert list(table.gpus) == [8, 6]  # (prefill + decode) x tp
    # the same tokens over the same span: cost in proportion to the GPUs
    cost = table.cost_per_million_tokens
    assert cost[1] / cost[0] == pytest.approx(6 / 8)
    plain = capacity.plan_fleet(deploy, [sc.method], "round_robin", FleetSlo(1, 1), 0.99, 2.5)
    assert list(plain.layout) == ["colocated"]


def test_the_cli_plans_a_split_beside_each_colocated_fleet(tmp_path):
    out = tmp_path / "plan.csv"
    result = runner.invoke(app, [*TRACE, "--disaggregate", "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "P+" in text and "How, disaggregated" in text
    table = pd.read_csv(out)
    assert list(table.layout) == ["colocated", "disaggregated"] * 2
    split = table[table.layout == "disaggregated"]
    assert (split.prefill_replicas >= 1).all() and (split.replicas >= 1).all()
    assert (split.gpus == split.prefill_replicas + split.replicas).all()
    assert table.acceptance_source.notna().all()
    assert (table.kv_transfer_gbps == 400.0).all() and (table.kv_transfer_latency_ms == 0).all()


def test_a_config_files_disaggregation_mode_is_refused_too(tmp_path):
    """QA: disaggregation_mode: decode in a --config file made the colocated rows decode-only,
    where the flag was refused."""
    cfg = tmp_path / "d.yaml"
    cfg.write_text("disaggregation_mode: decode\n")
    result = runner.invoke(app, [*TRACE, "--disaggregate", "--config", str(cfg)])
    one_error(result, "disaggregation_mode", "--config file", "each instance in its role")


def test_the_cli_refuses_what_a_split_plan_cannot_read():
    qps = runner.invoke(app, ["plan", "--qps", "2", "--disaggregate"])
    one_error(qps, "--disaggregate", "give --trace")
    link = runner.invoke(app, [*TRACE, "--kv-transfer-gbps", "100"])
    one_error(link, "--kv-transfer-gbps", "--disaggregate")
    bad = runner.invoke(app, [*TRACE, "--disaggregate", "--kv-transfer-gbps", "0"])
    one_error(bad, "--kv-transfer-gbps", "greater than 0")
    hf = runner.invoke(app, [*TRACE, "--disaggregate", "--engine", "hf"])
    one_error(hf, "--disaggregate", "engine hf runs no prefill/decode")
    for mode in ("null", "decode"):  # QA: decode made the colocated rows decode-only
        given = runner.invoke(app, [*TRACE, "--disaggregate", "--disaggregation-mode", mode])
        one_error(given, "--disaggregation-mode", "each instance in its role")


def test_a_search_stopped_by_requests_too_long_says_so():
    """QA: a search that stopped at its first fleet for requests too long read "limited by
    TPOT", the SLO that fleet missed most, beside "none <= 256"."""
    too_long = {(0, 1): 0.05}  # 5 % of the requests never finish on a replica
    assert capacity._none_met({(0, 1): "tpot"}, too_long, 0.99) == "unfinishable"
    # within what the attainment leaves: what the largest fleet tried missed
    limits = {(0, 1): "tpot", (0, 2): "ttft"}
    assert capacity._none_met(limits, {(0, 1): 0.005, (0, 2): 0.005}, 0.99) == "ttft"
    assert capacity._none_met({(0, 1): "tpot"}, {(0, 1): 0.0}, 0.99) == "tpot"  # (QA: a cap)


def test_a_prefill_or_decode_instance_alone_is_not_planned(tmp_path):
    """QA: plan --trace with --disaggregation-mode decode (no --disaggregate) sized a
    decode-only fleet, 1 GPU where the colocated one took 3, in a row labelled colocated;
    plan --qps priced decode instances alone the same way."""
    qps = runner.invoke(app, ["plan", "--qps", "5", "--disaggregation-mode", "decode"])
    one_error(qps, "--disaggregation-mode", "a plan prices whole deployments")
    trace = runner.invoke(app, [*TRACE, "--disaggregation-mode", "decode"])
    one_error(trace, "--disaggregation-mode", "plan --trace --disaggregate sizes")
    cfg = tmp_path / "d.yaml"
    cfg.write_text("disaggregation_mode: decode\n")
    filed = runner.invoke(app, ["plan", "--qps", "5", "--config", str(cfg)])
    one_error(filed, "disaggregation_mode", "a plan prices whole deployments")
