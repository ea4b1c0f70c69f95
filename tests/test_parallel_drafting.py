"""Parallel drafting (vLLM's ``parallel_drafting``: P-EAGLE heads, PARD drafts) proposes all K
tokens in one draft forward, verifies them as a chain of K under the unchanged acceptance rule,
and reproduces the published τ at each published K; PARD, with no published τ packaged, is
costed but refused as a method; `simspec validate` scores e2e_s rows."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.methods import (
    cannot_draft_for,
    left_out_of_all,
    method_presets,
    preset_method,
)
from simspec.catalog.models import load_model
from simspec.catalog.vllm import to_method
from simspec.cli.main import app
from simspec.config import AcceptanceConfig, LengthSpec, MethodConfig, Scenario, WorkloadConfig
from simspec.engine.acceptance.exact import expected_tokens_per_step
from simspec.engine.acceptance.inversion import alpha_profile, pooled_tau
from simspec.engine.costmodel import RooflineCostModel
from simspec.engine.simulation import simulate
from simspec.engine.speculators import SPECULATORS, DraftStep, build_speculator
from simspec.engine.speculators.parallel import PARD
from simspec.errors import InputError
from simspec.studies.runs.keys import scenario_key
from simspec.studies.validation.predict import Skip, e2e_seconds, metric_value, plan_case

TARGET = "llama-3.1-8b"
ACC = AcceptanceConfig(alpha=0.7)


def spec(name: str, k: int, target: str = TARGET, **fields):
    cost = RooflineCostModel(load_gpu("h100_sxm"), load_profile("h100_sxm"), load_engine("vllm"))
    extra = {"draft_model": "llama-3.2-1b"} if name in ("pard", "draft_model") else {}
    cfg = MethodConfig(name=name, k=k, acceptance=ACC, **extra, **fields)
    if name == "pard":  # costed, not registered (no published τ packaged)
        return PARD(cfg, load_model(target), cost, load_engine("vllm"))
    return build_speculator(cfg, load_model(target), cost, load_engine("vllm"))


def step(k: int, seqs: int = 4, accepted: int = 1) -> DraftStep:
    kv = np.full(seqs, 1024)
    return DraftStep(kv, np.full(seqs, accepted), float(kv.sum()), k)


def draft_s(name: str, k: int, **fields) -> float:
    return spec(name, k, **fields).draft_cost(step(k)).total_s


# -- one forward per step --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["pard", "p_eagle"])
def test_a_parallel_drafter_pays_one_forwards_host_overhead_whatever_k(name):
    for k in (1, 3, 8, 12):
        s = spec(name, k)
        assert s.draft_cost(step(k)).overhead_s == pytest.approx(s.draft_overhead_s)
    sequential = spec("eagle3", 8)
    assert sequential.draft_cost(step(8)).overhead_s == pytest.approx(
        8 * sequential.draft_overhead_s
    )


def test_with_one_draft_position_the_parallel_drafters_are_their_sequential_ones():
    # K=1: one forward over the tokens the last step yielded, no placeholder slot
    assert draft_s("p_eagle", 1, draft_layers=1) == pytest.approx(draft_s("eagle3", 1))
    assert draft_s("pard", 1) == pytest.approx(draft_s("draft_model", 1))


def test_draft_cost_grows_far_less_with_k_than_a_sequential_chains():
    for parallel, sequential, fields in (
        ("p_eagle", "eagle3", {"draft_layers": 1}),
        ("pard", "draft_model", {}),
    ):
        grow = draft_s(parallel, 8, **fields) / draft_s(parallel, 1, **fields)
        chain = draft_s(sequential, 8) / draft_s(sequential, 1)
        assert chain > 6 and grow < 1.5, (parallel, grow, chain)


def test_a_p_eagle_head_of_more_layers_costs_and_weighs_more():
    one, four = spec("p_eagle", 7, draft_layers=1), spec("p_eagle", 7)
    assert four.layers == 4 == method_presets()["p_eagle"]["defaults"]["draft_layers"]
    assert four.draft_cost(step(7)).total_s > one.draft_cost(step(7)).total_s
    assert four.extra_weight_bytes() > one.extra_weight_bytes()
    assert four.extra_kv_bytes_per_token() == pytest.approx(4 * one.extra_kv_bytes_per_token())


# -- verified as a chain, under the same rule ----------------------------------------------------
@pytest.mark.parametrize(
    ("parallel", "sequential"), [("pard", "draft_model"), ("p_eagle", "eagle3")]
)
def test_the_draft_is_verified_as_a_chain_of_k_under_the_unchanged_acceptance_rule(
    parallel, sequential
):
    alpha = np.array([0.8, 0.7, 0.6, 0.5, 0.4])
    for sampled in (False, True):
        ours, theirs = spec(parallel, 5), spec(sequential, 5)
        assert ours.verify_tokens == theirs.verify_tokens == 6
        assert ours.draft_plan(alpha, sampled) == theirs.draft_plan(alpha, sampled)


def test_a_tree_is_refused_as_vllm_drafts_a_chain_in_parallel():
    with pytest.raises(InputError, match="chain"):
        spec("p_eagle", 3, tree="static", tree_nodes=8)
    with pytest.raises(InputError, match="parallel_drafting"):
        to_method(
            {"method": "eagle3", "parallel_drafting": True, "speculative_token_tree": "[[0]]"}
        )


# -- acceptance from the published τ -------------------------------------------------------------
@pytest.mark.parametrize("domain", ["code", "chat"])
def test_p_eagle_tau_at_each_published_k_is_the_blogs(domain):
    preset = method_presets()["p_eagle"]["presets"][domain]
    acc = preset_method("p_eagle", preset["dataset"], target="gpt-oss-20b").acceptance
    assert acc.sourced_k == 7
    for k, published in preset["published_tau"].items():
        profile = alpha_profile(acc, int(k))
        tau = pooled_tau(expected_tokens_per_step, profile, acc.spread)
        assert tau == pytest.approx(published, abs=0.005), (domain, k)


@pytest.mark.slow
def test_a_batch1_run_of_p_eagle_accepts_the_published_tau():
    method = preset_method("p_eagle", "instructcoder", target="gpt-oss-20b").model_copy(
        update={"k": 3}
    )
    work = WorkloadConfig(
        concurrency=1,
        requests=120,
        lengths_from=None,
        prompt=LengthSpec(mean=128),
        output=LengthSpec(mean=192),
        measure="whole",
    )
    run = simulate(Scenario(method=method, workload=work)).summary
    assert run.mean_accept_len == pytest.approx(3.02, rel=0.05)


# -- where each runs -------------------------------------------------------------------------------
def test_vllms_parallel_drafting_flag_names_p_eagle_and_refuses_pard_by_name():
    assert (
        to_method({"method": "eagle3", "parallel_drafting": True, "num_speculative_tokens": 7})[
            "name"
        ]
        == "p_eagle"
    )
    assert to_method({"method": "eagle3", "parallel_drafting": False})["name"] == "eagle3"
    pard = {"method": "draft_model", "model": "amd/PARD-Llama-3.2-1B", "parallel_drafting": True}
    for cfg, says in ((pard, "no published PARD acceptance"), ({"method": "ngram"}, "eagle3")):
        with pytest.raises(InputError, match=says) as err:
            to_method({**cfg, "parallel_drafting": True})
        assert err.value.field == "speculative_config.parallel_drafting"
    assert "pard" not in SPECULATORS


def test_pard_drafts_for_the_tokenizer_families_of_its_checkpoints_only():
    assert preset_method("pard", target="llama-3.3-70b").draft_model == "llama-3.2-1b"
    assert preset_method("pard", target="qwen3-8b").draft_model == "qwen3-0.6b"
    for model in ("vicuna-13b", "gpt-oss-20b", "mixtral-8x7b"):
        assert "no packaged PARD draft" in cannot_draft_for("pard", model)
    assert cannot_draft_for("pard", "vicuna-13b", draft="vicuna-68m") is None


def test_all_offers_p_eagle_only_where_a_head_is_published():
    assert "no published p_eagle head for llama-3.1-8b" in left_out_of_all("p_eagle", TARGET)
    assert left_out_of_all("p_eagle", "gpt-oss-20b") is None
    assert left_out_of_all("p_eagle", "gpt-oss-120b") is None


@pytest.mark.parametrize(
    ("args", "field", "says"),
    [
        (["--methods", "p_eagle"], "--methods", "no published p_eagle head"),
        (["--methods", "pard"], "--methods", "unknown method 'pard'"),
        # QA: the paths past --methods ran gpt-oss-20b's head on llama-3.1-8b
        (
            ["--speculative-config", '{"method": "eagle3", "parallel_drafting": true}'],
            "methods.p_eagle",
            "no published p_eagle head",
        ),
    ],
)
def test_the_cli_refuses_each_where_it_cannot_run_naming_why(args, field, says):
    res = CliRunner().invoke(app, ["sweep", *args, "--batch-sizes", "1"])
    assert res.exit_code == 2
    line = res.output.strip().splitlines()[-1]
    assert line.startswith(f"error: {field}: ") and says in line


# -- validate scores e2e_s -------------------------------------------------------------------------
ROW = {
    "case_id": "e",
    "metric": "e2e_s",
    "method": "autoregressive",
    "target_model": TARGET,
    "gpu": "h100_sxm",
    "engine": "vllm",
    "load_kind": "concurrency",
    "load": "2",
    "prompt_len": "512",
    "output_len": "128",
    "measured_value": "1.5",
}


def test_an_e2e_row_is_scored_on_the_statistic_its_notes_name():
    median = plan_case({**ROW, "notes": "Median E2EL (ms) 1500"})
    assert median.statistic == "median" and any("E2E: the median" in a for a in median.assumptions)
    assert plan_case({**ROW, "notes": "Mean E2EL (ms) 1500"}).statistic == "mean"
    # the measured figure is the one named first; the other printed beside it is an aside (QA:
    # any "median" in the notes had scored a mean on the median)
    beside = plan_case({**ROW, "notes": "'Mean E2EL (ms): 1800.00' (median 1500.00)"})
    assert beside.statistic == "mean"
    unstated = plan_case(ROW)
    assert unstated.statistic == "mean" and any("E2E: the mean" in a for a in unstated.assumptions)


def test_the_e2e_mean_is_the_measured_requests_latency_over_their_count():
    run = SimpleNamespace(
        requests=4, unfinishable=0, section_e2e_s=(1.0, 2.0, 3.0, 6.0), e2e_s_p50=2.5
    )
    assert e2e_seconds(run, "mean") == 3.0
    assert e2e_seconds(run, "median") == 2.5
    with pytest.raises(Skip, match="no measured request"):
        e2e_seconds(SimpleNamespace(requests=0, unfinishable=0, section_e2e_s=()), "mean")


def test_an_e2e_row_is_predicted_from_its_run():
    plan = plan_case({**ROW, "load": "1", "load_kind": "single"})
    summary = simulate(plan.scenario).summary
    runs = {scenario_key(plan.scenario.model_dump_json()): summary}
    value, _ = metric_value(plan, runs)
    assert value == pytest.approx(sum(summary.section_e2e_s) / summary.requests)
    # one request alone: its prefill then 128 decode steps of about a TPOT each
    assert value == pytest.approx(127 * summary.tpot_ms_mean / 1e3, rel=0.1)


def test_analytic_refuses_a_head_the_model_does_not_have():
    res = CliRunner().invoke(app, ["analytic", "--method", "p_eagle"])
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1].startswith("error: methods.p_eagle: no published")


def test_recommend_writes_a_parallel_drafters_config_as_json(tmp_path):
    """p_eagle exports as eagle3 with parallel_drafting, printed and written alike (QA: --json
    was refused, "vLLM has no p_eagle method", beside the config it printed)."""
    import json

    out = tmp_path / "c.json"
    args = ["recommend", "--model", "gpt-oss-20b", "--method", "p_eagle", "--k-max", "2"]
    result = CliRunner().invoke(app, [*args, "--concurrencies", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    cfg = json.loads(out.read_text())
    assert cfg["method"] == "eagle3" and cfg["parallel_drafting"] is True
