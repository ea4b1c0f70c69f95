"""vLLM's async scheduling (``scheduler.async_scheduling``, ``--async-scheduling``): the host's
time per step hides behind the GPU's for plain decoding and EAGLE/MTP, and any other
speculative method turns it off, as vLLM 0.14+ runs it (PRs #27614, #31998); engines without
an async scheduler refuse the switch by name; leaving it unset changes nothing."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from simspec.catalog.hardware import load_engine
from simspec.catalog.methods import preset_method
from simspec.catalog.models import load_model
from simspec.catalog.vllm import to_method
from simspec.cli.main import app
from simspec.config import Scenario, SchedulerConfig
from simspec.engine.build import build_cost_model, deployed_engine
from simspec.engine.costmodel import BatchShape
from simspec.errors import InputError
from simspec.studies.provenance import provenance
from simspec.studies.validation.loads import engine_async_scheduling


def scenario(method: str, on: bool | None, engine: str = "vllm") -> Scenario:
    return Scenario(
        method=preset_method(method, "sharegpt", None, "llama-3.1-8b"),
        engine=engine,
        scheduler=SchedulerConfig(async_scheduling=on),
    )


def batch1_overhead(sc: Scenario) -> float:
    """The exposed host time of a batch-1 decode forward of the scenario's target."""
    step = build_cost_model(sc).forward(load_model(sc.model), BatchShape.uniform(1, 1, 1000, 1))
    return step.overhead_s


def test_async_scheduling_hides_the_host_time_behind_a_longer_gpu_step():
    engine = load_engine("vllm")
    host = engine["step_overhead_s"] + engine["step_overhead_per_seq_s"]
    assert batch1_overhead(scenario("autoregressive", None)) == pytest.approx(host)
    # Llama-3.1-8B's batch-1 step on an H100 is ~6 ms of GPU time: the ~1.2 ms host hides
    assert batch1_overhead(scenario("autoregressive", True)) == 0.0


@pytest.mark.parametrize(
    ("method", "kept"),
    [("eagle3", True), ("eagle1", True), ("ngram", False), ("draft_model", False)],
)
def test_eagle_and_mtp_keep_async_scheduling_and_other_methods_turn_it_off(method, kept):
    assert build_cost_model(scenario(method, True)).host.overlapped is kept
    assert not build_cost_model(scenario(method, None)).host.overlapped


def test_unset_and_off_leave_the_vllm_profile_as_fitted():
    assert deployed_engine(scenario("eagle3", None)) == load_engine("vllm")
    off = deployed_engine(scenario("eagle3", False))
    assert off["overlap_schedule"] == 0 and off.overlap_spec_methods == ()
    assert (
        build_cost_model(scenario("eagle3", False)).host
        == build_cost_model(scenario("eagle3", None)).host
    )


@pytest.mark.parametrize("engine", ["sglang", "vllm-v0", "trtllm"])
def test_engines_without_an_async_scheduler_refuse_the_switch_by_name(engine):
    with pytest.raises(InputError) as err:
        build_cost_model(scenario("autoregressive", True, engine))
    assert err.value.field == "scheduler.async_scheduling"
    assert engine in str(err.value)


def test_the_cli_flag_runs_it_and_says_so():
    result = CliRunner().invoke(
        app,
        ["sweep", "--methods", "eagle3", "--batch-sizes", "1", "--requests", "4"]
        + ["--executor", "serial", "--async-scheduling"],
    )
    assert result.exit_code == 0, result.output
    assert "async scheduling" in result.output
    refused = CliRunner().invoke(app, ["sweep", "--engine", "sglang", "--async-scheduling"])
    assert refused.exit_code == 2
    assert refused.output.strip().splitlines()[-1].startswith("error: scheduler.async_scheduling")


def test_the_result_rows_say_the_engine_ran_async():
    method = preset_method("eagle3", "sharegpt", None, "llama-3.1-8b")
    on = provenance(scenario("eagle3", True), method)["engine_profile"]
    off = provenance(scenario("eagle3", None), method)["engine_profile"]
    assert on.endswith("; async scheduling)") and "async" not in off
    # a method that turns it off says so in its own rows (QA: n-gram's read "async scheduling")
    ngram = preset_method("ngram", "sharegpt", None, "llama-3.1-8b")
    row = provenance(scenario("eagle3", True), ngram)["engine_profile"]
    assert row.endswith("; async scheduling asked, which ngram turns off)")


@pytest.mark.parametrize(
    ("engine", "version", "notes", "on"),
    [
        ("vllm", "0.17.1", "", True),  # 0.14+ default
        ("vllm", "v0.14.0", "", True),
        ("vllm", "v0.13.0", "", None),  # before: the profile's own (off)
        ("vllm", "v0.11.0", "", None),
        ("vllm", "V1 (Jul 2025)", "", None),  # unstated release: the profile's
        ("vllm", "0.17.1", "serve: vllm serve X --no-async-scheduling", False),
        ("vllm", "v0.11.0", "serve: vllm serve X --async-scheduling", True),
        ("sglang", "0.17.1", "", None),
    ],
)
def test_validation_rows_run_their_vllm_versions_scheduler(engine, version, notes, on):
    got, said = engine_async_scheduling(engine, version, notes)
    assert got is on
    assert bool(said) is (on is not None)


def test_an_unpadded_drafter_batch_is_refused_not_ignored():
    cfg = {"method": "eagle3", "num_speculative_tokens": 3}
    assert to_method({**cfg, "disable_padded_drafter_batch": False})["name"] == "eagle3"
    with pytest.raises(InputError) as err:
        to_method({**cfg, "disable_padded_drafter_batch": True})
    assert err.value.field == "speculative_config.disable_padded_drafter_batch"


@pytest.mark.parametrize(("key", "value"), [("enforce_eager", True), ("quantization", "fp8")])
def test_a_drafter_setting_simspec_does_not_price_is_refused_not_ignored(key, value):
    # QA: both changed nothing, byte for byte, without a word
    cfg = {"method": "eagle3", "num_speculative_tokens": 3}
    assert to_method({**cfg, key: None if key == "quantization" else False})["name"] == "eagle3"
    with pytest.raises(InputError) as err:
        to_method({**cfg, key: value})
    assert err.value.field == f"speculative_config.{key}"


def test_the_methods_vllm_keeps_async_for_are_simspec_methods():
    from simspec.engine.speculators import SPECULATORS

    kept = load_engine("vllm").async_spec_methods
    assert kept and set(kept) <= set(SPECULATORS)


def test_a_vllm_sweep_says_which_vllm_its_host_time_is():
    args = ["sweep", "--batch-sizes", "1", "--requests", "4", "--executor", "serial"]
    said = " ".join(CliRunner().invoke(app, args).output.split())
    assert "vLLM 0.14+ schedules asynchronously by default" in said
    quiet = " ".join(CliRunner().invoke(app, [*args, "--no-async-scheduling"]).output.split())
    assert "schedules asynchronously" not in quiet


def test_plan_recommend_fleet_and_policy_take_the_flag_over_a_files_scheduler(tmp_path):
    from simspec.cli.flags import DeploymentFlags

    config = tmp_path / "s.yaml"
    config.write_text("scheduler:\n  max_num_seqs: 64\n")
    on = DeploymentFlags(async_scheduling=True).deployment(config).scheduler
    assert on.async_scheduling is True and on.max_num_seqs == 64  # merged, not replaced
    assert DeploymentFlags().deployment(config).scheduler.async_scheduling is None
