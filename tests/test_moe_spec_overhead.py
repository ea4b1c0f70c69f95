"""What a speculative step costs on a MoE target beside a decode step: a served batch routes
its tokens skewed, as the measured MoE tables time it (simspec.engine.costmodel.moe_routing),
so a verify pass of b x (K+1) tokens touches fewer experts than uniform routing would."""

from __future__ import annotations

import csv
import math
import statistics

import pytest

from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.kernel_tables import moe_kernel_fit
from simspec.catalog.models import load_model
from simspec.catalog.precision import load_precision
from simspec.engine.costmodel import BatchShape, RooflineCostModel
from simspec.engine.costmodel.kernels import grouped_gemm_time
from simspec.engine.costmodel.moe import grouped_experts_time, routed_experts_time
from simspec.engine.costmodel.moe_routing import routing_ratio, served_touched
from simspec.engine.costmodel.work import distinct_experts

NODES = ((0.25, 1.0), (1.0, 0.5), (4.0, 1.0))


def test_routing_ratio_is_the_nodes_interpolated_in_log_pairs_per_expert():
    assert routing_ratio(NODES, 1.0) == 0.5
    # halfway between 0.25 and 1.0 in log x is 0.5
    assert routing_ratio(NODES, 0.5) == pytest.approx(0.75)
    assert routing_ratio(NODES, 2.0) == pytest.approx(0.75)


def test_routing_ratio_holds_the_end_nodes_outside_the_measured_range():
    assert routing_ratio(NODES, 1e-4) == 1.0
    assert routing_ratio(NODES, 1e4) == 1.0
    assert routing_ratio((), 1.0) == 1.0  # no nodes: no correction


def test_balanced_layout_touches_one_expert_per_pair_until_all_are_touched():
    assert served_touched(128, 32.0) == 32.0
    assert served_touched(128, 512.0) == 128.0


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
def test_every_engines_measured_moe_kernel_carries_the_served_routing(engine):
    fit = moe_kernel_fit("h200", engine, "fp8")
    assert fit is not None and len(fit.routing) >= 10
    xs = [x for x, _ in fit.routing]
    assert xs == sorted(xs)
    # a decode step of a few tokens routes as the balanced layout; around one pair per
    # expert the skewed batch reads far fewer experts' weights
    assert routing_ratio(fit.routing, 0.05) == pytest.approx(1.0, abs=0.08)
    assert routing_ratio(fit.routing, 1.0) < 0.7


def test_a_kernel_fitted_on_uniform_routing_keeps_uniform_routing():
    # vLLM V0's fit is on benchmark_moe.py's random gating (calibration/fit_moe_kernels.py
    # fit_v0): its touched experts are the uniform expectation already
    fit = moe_kernel_fit("h200", "vllm-v0", "fp8")
    assert fit is not None and fit.routing == ()


def _cost(model: str, tp: int, engine: str = "sglang", ep: int = 1) -> RooflineCostModel:
    gpu = load_gpu("h200")
    m = load_model(model)
    spec = load_precision(getattr(m, "weight_dtype", "bf16"), "precision")
    return RooflineCostModel(
        gpu,
        load_profile("h200"),
        load_engine(engine),
        tp,
        ep=ep,
        precision=None if spec.name == "bf16" else spec,
        precision_model=m.id,
    )


def _uniform(cost: RooflineCostModel, model, tokens: int) -> float:
    """The routed experts as uniform routing would touch them (the old expectation)."""
    k = model.num_experts_per_tok
    touched = distinct_experts(model.num_experts, k, tokens)
    spec = cost.experts_precision_of(model)
    kernel = cost.moe_kernel(spec, model)
    return grouped_experts_time(cost.ops, model, float(tokens * k), touched, 1, spec, kernel)


def test_a_verify_pass_on_a_wide_moe_reads_fewer_experts_than_uniform_routing():
    # Kimi-K2 (384 experts, top-8) at TP8, 8 sequences: a decode step routes 64 pairs
    # (x = 0.17), a 3-1-4 verify pass 256 (x = 0.67)
    model = load_model("kimi-k2")
    cost = _cost("kimi-k2", 8)
    decode, verify = cost.routed_experts_time(model, 8), cost.routed_experts_time(model, 32)
    assert decode == pytest.approx(_uniform(cost, model, 8), rel=0.1)
    # uniform routing touches 187 of 384 experts; the balanced layout's 256 at the measured
    # power-law ratio of 0.6 at x = 0.67 stream about 155 experts' weights
    assert verify < 0.85 * _uniform(cost, model, 32)
    # the verify pass still costs more than the decode step it replaces
    assert verify > decode


def test_served_routing_reproduces_the_power_law_rows_it_was_fitted_from(shared):
    """SGLang fused_moe_triton on H200 at every shape and TP of the table (vLLM/SGLang at EP 1,
    without the group-limited DeepSeek rows): the balanced fit times the routing ratio within
    35 % of the measured power_law_1.2 latency at a median under 15 %, and closer to it than
    the balanced prediction itself where the two differ most (0.5-2 pairs per expert)."""
    gpu = load_gpu("h200")
    path = shared / "calibration-data/moe-serving/aiconfigurator_moe_1node.csv"
    fits = {d: moe_kernel_fit("h200", "sglang", d) for d in ("bf16", "fp8", "int4-w")}
    dtypes = {"bfloat16": "bf16", "fp8_block": "fp8", "w4a16_mxfp4": "int4-w"}
    served, balanced = [], []
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            if (r["gpu"], r["framework"], r["moe_ep_size"]) != ("H200 SXM", "SGLang", "1"):
                continue
            if r["distribution"] != "power_law_1.2" or r["model_shape"] == "DeepSeek-V3/R1":
                continue
            fit = fits.get(dtypes.get(r["moe_dtype"], ""))
            if fit is None or r["kernel_source"] != fit.kernel:
                continue
            e, k, t = int(r["num_experts"]), int(r["topk"]), int(r["num_tokens"])
            pairs = float(t * k)
            peak = {"fp8": gpu.fp8_dense_flops}.get(fit.compute, gpu.bf16_dense_flops)
            width = int(r["inter_size"]) // int(r["moe_tp_size"])
            bal = grouped_gemm_time(
                fit, int(r["hidden_size"]), width, pairs, served_touched(e, pairs), fit.sms,
                float(peak), gpu.hbm_bandwidth_bytes_s, fit.weight_bytes,
            )  # fmt: skip
            measured = float(r["latency"]) * 1e-3
            x = pairs / e
            served.append((x, bal * routing_ratio(fit.routing, x) / measured - 1))
            balanced.append((x, bal / measured - 1))
    assert len(served) > 500
    errors = [abs(err) for _, err in served]
    assert statistics.median(errors) < 0.15
    mid = [abs(err) for x, err in served if 0.5 <= x <= 2.0]
    mid_balanced = [abs(err) for x, err in balanced if 0.5 <= x <= 2.0]
    assert statistics.median(mid) < statistics.median(mid_balanced)


def test_expert_parallel_layers_keep_uniform_routing():
    # the EP>1 rows of the vLLM and SGLang tables are not fitted (their collectors compute
    # non-local assignments): whole experts per GPU keep the uniform expectation
    model = load_model("qwen3-235b-a22b")
    cost = _cost("qwen3-235b-a22b", 8, ep=8)
    spec = cost.experts_precision_of(model)
    kernel = cost.moe_kernel(spec, model)
    k = model.num_experts_per_tok
    touched = distinct_experts(model.num_experts, k, 32)
    expected = grouped_experts_time(cost.ops, model, 32.0 * k, touched, 8, spec, kernel)
    assert routed_experts_time(cost.ops, model, 32, 8, spec, kernel) == expected


def test_a_dense_models_step_has_no_routing_to_change():
    cost = _cost("llama-3.1-8b", 1)
    m = load_model("llama-3.1-8b")
    step = cost.forward(m, BatchShape.uniform(8, 4, 8 * 1000.0, 32))
    assert math.isfinite(step.total_s) and step.total_s > 0
    assert not m.is_moe
