"""Weight precision and KV-cache dtype in the cost model and the memory plan: every expected
ratio is read from simspec/data/precision.yaml or gpus.yaml, none is tuned here."""

from __future__ import annotations

import pytest

from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.models import load_model
from simspec.catalog.precision import load_precision
from simspec.config import Scenario
from simspec.engine.build import build_cost_model
from simspec.engine.costmodel import RooflineCostModel
from simspec.engine.kv_cache import MemoryDemand, plan_memory, target_weight_bytes

MODEL = load_model("llama-3.1-8b")
H, INTER = MODEL.hidden_size, MODEL.intermediate_size


def cost(gpu: str, precision: str | None = None) -> RooflineCostModel:
    spec = load_precision(precision) if precision else None
    return RooflineCostModel(
        load_gpu(gpu), load_profile(gpu), load_engine("vllm"), precision=spec,
        precision_model=MODEL.id,
    )  # fmt: skip


def speedup(gpu: str, precision: str, tokens: int) -> float:
    """bf16 time / precision time of the MLP up-projection at ``tokens`` rows."""
    base, quant = cost(gpu), cost(gpu, precision)
    return base.gemm_time(tokens, H, 2 * INTER) / quant.gemm_time(
        tokens, H, 2 * INTER, quant.precision_of(MODEL)
    )


def test_bf16_is_the_unquantised_path_exactly():
    assert cost("h100_sxm", "bf16").precision is None
    assert cost("h100_sxm", "bf16").gemm_time(7, H, INTER) == cost("h100_sxm").gemm_time(
        7, H, INTER
    )


def test_fp8_on_h100_follows_the_measured_kernels_by_batch():
    curve = load_precision("fp8").curve("hopper")
    assert curve is not None
    # memory-bound decode (M = 1) and compute-bound prefill (M = 8192): the measured ratios
    assert speedup("h100_sxm", "fp8", 1) == pytest.approx(curve.ratio(1))
    assert speedup("h100_sxm", "fp8", 8192) == pytest.approx(curve.ratio(8192))
    assert speedup("h100_sxm", "fp8", 1) > 1.5


def test_fp8_without_a_measured_curve_reaches_the_datasheet_peak_ratio_when_compute_bound():
    """B200 has FP8 tensor cores but no kernel table here: the roofline at the FP8 peak,
    so a large GEMM runs at about the datasheet's FP8 / BF16 peak ratio."""
    gpu = load_gpu("b200")
    assert gpu.fp8_dense_flops is not None
    peak_ratio = gpu.fp8_dense_flops / gpu.bf16_dense_flops
    assert speedup("b200", "fp8", 65536) == pytest.approx(peak_ratio, rel=0.05)
    assert 1.0 < speedup("b200", "fp8", 1) <= 2.0  # half the weight bytes, bf16 activations


def test_fp8_on_a100_runs_weight_only():
    """No FP8 tensor cores: W8A16 at the bf16 peak (vLLM's FP8 Marlin). Half the weight bytes
    pay when memory-bound; compute-bound it runs at the Marlin kernel's measured speed, below
    cuBLAS bf16's (the int4-w table's large-M rows)."""
    cm = cost("a100_80gb", "fp8")
    assert cm.precision is not None and cm.precision.compute == "bf16"
    assert speedup("a100_80gb", "fp8", 1) > 1.5
    marlin = load_precision("int4-w").curve("ampere")
    assert marlin is not None
    assert speedup("a100_80gb", "fp8", 65536) == pytest.approx(marlin.ratio(65536), rel=0.01)


@pytest.mark.parametrize("tokens", [1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 16384])
def test_fp8_weight_only_is_never_faster_than_the_int4_marlin_kernel_it_shares(tokens: int):
    """vLLM's FP8 Marlin GEMM is the GPTQ/AWQ Marlin kernel with twice the weight bytes."""
    assert speedup("a100_80gb", "fp8", tokens) <= speedup("a100_80gb", "int4-w", tokens) + 1e-12


def test_only_fp8_weight_only_carries_the_marlin_bound():
    """Native FP8 (Hopper's tensor cores) keeps its own measured curve, unbounded."""
    assert load_precision("fp8").never_faster_than is None
    only = load_precision("fp8").weight_only
    assert only is not None and only.never_faster_than == "int4-w"
    assert load_precision(only.never_faster_than).never_faster_than is None  # no chain


def test_int4_weights_speed_up_batch_1_and_the_advantage_shrinks_with_batch():
    for gpu in ("a100_80gb", "h100_sxm"):
        curve = load_precision("int4-w").curve(load_gpu(gpu).arch)
        assert curve is not None
        one, mid, big = (speedup(gpu, "int4-w", m) for m in (1, 256, 4096))
        assert one == pytest.approx(curve.ratio(1))
        assert one > mid > big, gpu
    # the A100 table itself goes below 1 at large batch (Marlin under cuBLAS fp16)
    assert speedup("a100_80gb", "int4-w", 4096) < 1.0


def test_draft_models_keep_bf16_weights():
    cm = cost("h100_sxm", "fp8")
    head = MODEL.model_copy(update={"id": f"{MODEL.id}-eagle3", "num_hidden_layers": 1})
    assert cm.precision_of(MODEL) is not None and cm.precision_of(head) is None


def test_quantised_weights_leave_more_memory_for_the_kv_cache():
    gpu, engine = load_gpu("h100_sxm"), load_engine("vllm")
    demand = MemoryDemand(0.0, 0.0, 8192, 256)
    bf16 = plan_memory(gpu, engine, MODEL, demand)
    fp8 = plan_memory(gpu, engine, MODEL, demand, weight_bytes=1.0)
    layers = MODEL.num_hidden_layers * MODEL.layer_params
    assert bf16.weight_bytes - fp8.weight_bytes == pytest.approx(layers * 1.0)
    assert target_weight_bytes(MODEL, 1.0) == layers + (MODEL.num_params - layers) * 2
    assert fp8.num_blocks > bf16.num_blocks


def test_an_fp8_kv_cache_holds_twice_the_tokens():
    gpu, engine = load_gpu("h100_sxm"), load_engine("vllm")
    demand = MemoryDemand(0.0, 0.0, 8192, 256)
    bf16 = plan_memory(gpu, engine, MODEL, demand)
    fp8 = plan_memory(gpu, engine, MODEL, demand, kv_bytes=1)
    assert fp8.kv_bytes_per_token * 2 == bf16.kv_bytes_per_token
    assert fp8.num_blocks in (2 * bf16.num_blocks, 2 * bf16.num_blocks + 1)


def test_a_scenario_names_its_precision_and_kv_dtype_in_vllm_spelling():
    sc = Scenario(precision="fp8", kv_cache_dtype="fp8_e4m3")
    cm = build_cost_model(sc)
    assert sc.kv_cache_dtype == "fp8" and cm.kv_bytes == 1
    assert cm.precision is not None and cm.precision_model == "llama-3.1-8b"
    default = build_cost_model(Scenario())  # no quantization_config: the checkpoint's bf16
    assert default.precision is None and default.kv_bytes == 2


@pytest.mark.parametrize("tokens", [1, 8, 64, 512, 4096])
def test_weight_only_moe_experts_are_never_faster_than_the_kernel_they_share(tokens: int):
    """NVFP4 on Hopper runs weight-only through the Marlin kernel int4-w's table times: its
    MoE experts, which no table times at nvfp4 there, run that kernel at nvfp4's bytes (QA:
    the roofline put them under int4-w's measured kernel, and under bf16)."""
    moe = load_model("qwen3-235b-a22b")

    def experts(precision: str) -> float:
        spec = load_precision(precision)
        cm = RooflineCostModel(
            load_gpu("h100_sxm"), load_profile("h100_sxm"), load_engine("vllm"), tp=8,
            precision=spec, precision_model=moe.id,
        )  # fmt: skip
        return cm.routed_experts_time(moe, tokens)

    assert experts("nvfp4") >= experts("int4-w")
