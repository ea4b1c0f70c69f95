"""The roofline cost model: memory-bound decode, compute-bound prefill, the query-length axis."""

import numpy as np
import pytest

from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.models import BYTES_PER_PARAM, load_model
from simspec.engine.costmodel import BatchShape, RooflineCostModel


def cost_model(tp=1, gpu="h100_sxm"):
    return RooflineCostModel(load_gpu(gpu), load_profile(gpu), load_engine("vllm"), tp)


def batch(q, kv, n):
    return BatchShape.of(np.full(n, q), np.full(n, kv), n * q)


def test_batch1_decode_is_weight_streaming_bound():
    cm, model = cost_model(), load_model("llama-3.1-8b")
    step = cm.forward(model, batch(1, 512, 1))
    gpu = cm.gpu
    weight_time = model.num_params * BYTES_PER_PARAM / gpu.hbm_bandwidth_bytes_s
    gpu_time = step.total_s - step.overhead_s
    # reading every weight once at no better than datasheet bandwidth
    assert weight_time < gpu_time < 2.0 * weight_time / cm.profile["gemm_memory_efficiency"]


def test_breakdown_adds_up_to_total():
    step = cost_model(tp=2).forward(load_model("llama-3.1-70b"), batch(4, 1000, 8))
    parts = (
        step.gemm_s
        + step.attention_s
        + step.lm_head_s
        + step.elementwise_s
        + step.communication_s
        + step.overhead_s
    )
    assert step.total_s == pytest.approx(parts)
    assert step.communication_s > 0


def test_verify_of_k_plus_one_tokens_costs_little_more_than_decode_at_small_batch():
    cm, model = cost_model(), load_model("llama-3.1-8b")
    decode = cm.forward(model, batch(1, 1024, 4)).total_s
    verify = cm.forward(model, batch(4, 1024, 4)).total_s
    assert decode < verify < 1.3 * decode


def test_verify_gemms_grow_with_query_tokens_once_compute_bound():
    cm, model = cost_model(), load_model("llama-3.1-8b")
    small = cm.forward(model, batch(1, 1024, 256)).gemm_s
    large = cm.forward(model, batch(8, 1024, 256)).gemm_s
    assert large > 3.0 * small


def test_attention_above_its_kernel_latency_grows_with_context():
    cm, model = cost_model(), load_model("llama-3.1-8b")
    floor = model.num_hidden_layers * cm.profile["attention_latency_s"]
    short = cm.forward(model, batch(1, 128, 32)).attention_s - floor
    long = cm.forward(model, batch(1, 8192, 32)).attention_s - floor
    assert long > 20 * short  # 64x the KV bytes


def test_no_communication_without_tensor_parallelism():
    assert cost_model().forward(load_model("llama-3.1-8b"), batch(1, 10, 3)).communication_s == 0


def test_uniform_batch_equals_the_same_batch_built_from_arrays():
    kv = np.array([10, 500, 3000, 7])
    assert BatchShape.uniform(4, 4, float(kv.sum()), 16) == BatchShape.of(np.full(4, 4), kv, 16)
