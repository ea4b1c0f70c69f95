"""The share of GPU memory an engine fills (vLLM --gpu-memory-utilization, SGLang
--mem-fraction-static, trtllm-serve --kv_cache_free_gpu_memory_fraction) as a deployment field:
it sizes the KV cache, a bad value is refused naming the field, and a validation row's serve
command sets it instead of running the profile's silently."""

from __future__ import annotations

from pathlib import Path

import pytest
from refusals import one_error
from typer.testing import CliRunner

from simspec.cli.main import app
from simspec.config import Scenario
from simspec.engine.build import setup_replica
from simspec.studies.validation.cases import read_cases
from simspec.studies.validation.predict import plan_case
from simspec.studies.validation.setups import serve_limits


def blocks(**scheduler: float) -> int:
    return setup_replica(Scenario(scheduler=scheduler)).memory.num_blocks


def test_a_smaller_share_leaves_fewer_kv_blocks_and_unset_is_the_profiles():
    default = blocks()
    assert blocks(gpu_memory_utilization=0.9) == default  # vllm's profile value
    assert blocks(gpu_memory_utilization=0.5) < blocks(gpu_memory_utilization=0.8) < default


def test_under_trtllm_the_share_is_of_the_memory_the_weights_leave():
    def trt(share: float | None) -> int:
        scheduler = {} if share is None else {"gpu_memory_utilization": share}
        return setup_replica(Scenario(engine="trtllm", scheduler=scheduler)).memory.num_blocks

    assert trt(0.9) == trt(None)
    # KV takes that share of the free memory: half the share, about half the blocks
    assert trt(0.45) == pytest.approx(trt(0.9) / 2, rel=0.01)


@pytest.mark.parametrize("value", ["0", "1.5", "-0.2"])
def test_a_share_outside_0_to_1_is_refused_naming_the_field(value: str):
    res = CliRunner().invoke(app, ["sweep", "--gpu-memory-utilization", value, "--quiet"])
    one_error(res, "gpu_memory_utilization")


def test_sglangs_spelling_sets_the_same_field():
    # 5 % of an 80 GB H100 (4 GiB) cannot hold Llama-3.1-8B's 15 GiB of weights
    args = ["sweep", "--methods", "autoregressive", "--batch-sizes", "1", "--requests", "8"]
    for flag in ("--mem-fraction-static", "--gpu-memory-utilization"):
        res = CliRunner().invoke(app, [*args, flag, "0.05", "--quiet"])
        one_error(res, "does not fit", "4.0 GiB usable per GPU")


def test_every_engines_spelling_in_a_serve_command_is_read():
    assert serve_limits("vllm serve X -tp 8 --gpu-memory-utilization 0.85") == {
        "gpu_memory_utilization": 0.85
    }
    assert serve_limits("--mem-fraction-static=0.7") == {"gpu_memory_utilization": 0.7}
    assert serve_limits("--kv_cache_free_gpu_memory_fraction 0.8") == {
        "gpu_memory_utilization": 0.8
    }
    assert serve_limits("vllm serve X") == {}


def test_a_validation_row_runs_the_share_its_serve_command_sets_and_says_so(shared: Path):
    cases = read_cases(shared / "validation" / "cases_serving_gpustack.csv")
    rows = cases[cases.notes.str.contains("--gpu-memory-utilization 0.85", regex=False)]
    assert len(rows)
    plan = plan_case(rows.to_dict("records")[0])
    assert plan.scenario.scheduler.gpu_memory_utilization == 0.85
    assert any("gpu_memory_utilization 0.85" in a for a in plan.assumptions)
