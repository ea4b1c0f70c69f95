"""GPT-OSS's MXFP4 experts as each engine runs them by default: MXFP4 x MXFP8 on Blackwell
under SGLang and TensorRT-LLM, MXFP4 x BF16 under vLLM, W4A16 on Hopper under all three. Every
expected fit is read from simspec/data/moe_kernels.yaml, none is tuned here."""

from __future__ import annotations

import pytest

from calibration import fit_moe_kernels
from simspec.catalog.kernel_tables import GroupedGemmFit
from simspec.catalog.models import load_model
from simspec.catalog.tables import packaged_table
from simspec.config import Scenario
from simspec.engine.build import build_cost_model
from simspec.engine.costmodel.moe import routed_experts_time

GPT_OSS = load_model("gpt-oss-120b")
TABLE = packaged_table("moe_kernels.yaml")


def gpt_oss_cost(gpu: str, engine: str):
    return build_cost_model(Scenario(model="gpt-oss-120b", gpu=gpu, engine=engine))


def experts_fit(gpu: str, engine: str):
    """The fit the cost model times gpt-oss-120b's routed experts with."""
    cm = gpt_oss_cost(gpu, engine)
    return cm.moe_kernel(cm.experts_precision_of(GPT_OSS), GPT_OSS)


def table_fit(gpu: str, framework: str, kernel: str, dtype: str) -> dict:
    return TABLE["fits"][f"{gpu}/{framework}/{kernel}/{dtype}"]


def same(fit, row: dict) -> bool:
    return (
        fit.compute == row["compute"]
        and fit.compute_efficiency == row["compute_efficiency"]
        and fit.per_pair_s == row["per_pair_s"]
        and fit.weight_bytes == row["weight_bytes"]
    )


@pytest.mark.parametrize(
    ("engine", "framework", "kernel"),
    [
        ("sglang", "SGLang", "sglang_flashinfer_trtllm_moe"),
        ("trtllm", "TRTLLM", "moe_torch_flow"),
    ],
)
def test_sglang_and_trtllm_run_gpt_oss_experts_on_b200_with_mxfp8_activations(
    engine, framework, kernel
):
    fit = experts_fit("b200", engine)
    assert fit is not None and fit.kernel == kernel
    assert same(fit, table_fit("B200 SXM", framework, kernel, "w4a8_mxfp4_mxfp8"))
    # the GEMMs then run at the FP8 tensor-core peak, the weights still MXFP4's 4.25 bits
    assert fit.compute == "fp8" and fit.weight_bytes == 0.53125


def test_vllm_runs_gpt_oss_experts_on_b200_with_bf16_activations():
    kernel = "vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic"
    fit = experts_fit("b200", "vllm")
    assert fit is not None and fit.kernel == kernel
    assert same(fit, table_fit("B200 SXM", "VLLM", kernel, "w4a16_mxfp4"))
    assert fit.compute == "bf16"


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200"])
@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_on_hopper_every_engine_keeps_the_w4a16_kernel(gpu, engine):
    """W4A16 on Hopper; GPT-OSS's own kernel where the engine picks one for it (SGLang:
    triton_kernels, ``model_defaults``), else the engine's default for the dtype."""
    table_gpu = TABLE["gpus"][gpu]["table"]
    framework = TABLE["engines"][engine]
    kernel = TABLE["defaults"][f"{table_gpu}/{framework}/w4a16_mxfp4"]
    own = TABLE["model_defaults"].get(f"{table_gpu}/{framework}/w4a16_mxfp4/gpt_oss")
    if own is not None:
        framework, kernel = own.split("/", 1)
    fit = experts_fit(gpu, engine)
    assert fit is not None and fit.kernel == kernel and fit.compute == "bf16"
    assert same(fit, table_fit(table_gpu, framework, kernel, "w4a16_mxfp4"))


def test_only_the_sourced_engine_gpu_pairs_run_as_another_dtype():
    assert TABLE["runs_as"] == {
        "B200 SXM/SGLang/w4a16_mxfp4": "w4a8_mxfp4_mxfp8",
        "B200 SXM/TRTLLM/w4a16_mxfp4": "w4a8_mxfp4_mxfp8",
    }
    # the packaged table is what the fit script writes from its RUNS_AS
    assert {"/".join(k): v for k, v in fit_moe_kernels.RUNS_AS.items()} == TABLE["runs_as"]


def test_every_runs_as_kernel_has_a_fit_within_a_fifth_at_that_dtype():
    for key, dtype in TABLE["runs_as"].items():
        gpu, framework, _ = key.split("/")
        row = table_fit(gpu, framework, TABLE["defaults"][key], dtype)
        assert row["median_abs_error"] <= 0.2 and row["rows"] >= 100, key


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
@pytest.mark.parametrize("tokens", [1, 64, 1024])
def test_mxfp8_activations_make_a_b200_step_s_experts_faster_than_bf16_ones(engine, tokens):
    """AIConfigurator measured SGLang's MXFP4 x MXFP8 kernel faster than its MXFP4 x BF16 one
    on gpt-oss-120b's experts at every token count (1.2x at 1 token, 2.7x at 4096): the
    cost model's experts now take the faster fit."""
    cm = gpt_oss_cost("b200", engine)
    framework = TABLE["engines"][engine]
    kernel = TABLE["defaults"][f"B200 SXM/{framework}/w4a16_mxfp4"]
    bf16_acts = as_fit(kernel, table_fit("B200 SXM", framework, kernel, "w4a16_mxfp4"))
    w4a16 = routed_experts_time(cm.ops, GPT_OSS, tokens, cm.ep, None, bf16_acts)
    assert cm.routed_experts_time(GPT_OSS, tokens) < w4a16


def as_fit(kernel: str, row: dict) -> GroupedGemmFit:
    return GroupedGemmFit(
        kernel=kernel,
        block_m=int(row["block_m"]),
        block_n=int(row["block_n"]),
        fixed_s=float(row["fixed_s"]),
        per_pair_s=float(row["per_pair_s"]),
        compute_efficiency=float(row["compute_efficiency"]),
        memory_efficiency=float(row["memory_efficiency"]),
        compute=str(row["compute"]),
        weight_bytes=float(row["weight_bytes"]),
        sms=int(TABLE["gpus"]["b200"]["sms"]),
    )
