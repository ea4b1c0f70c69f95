"""The roofline cost model: memory-bound decode, compute-bound prefill, the query-length axis."""

import numpy as np
import pytest

from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.models import BYTES_PER_PARAM, load_model
from simspec.engine.costmodel import BatchShape, RooflineCostModel, roofline_time


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


def test_roofline_time_is_latency_plus_a_smooth_max_of_compute_and_memory_time():
    # 6 s of compute and 8 s of memory traffic after a 0.5 s launch
    assert roofline_time(6.0, 8.0, 1.0, 1.0, 0.5, 2.0) == pytest.approx(0.5 + 10.0)  # 3-4-5
    assert roofline_time(6.0, 8.0, 1.0, 1.0, 0.5, 1.0) == pytest.approx(0.5 + 14.0)  # the sum
    assert roofline_time(6.0, 8.0, 1.0, 1.0, 0.5, 64.0) == pytest.approx(0.5 + 8.0)  # the max
    # rates divide: 12 FLOPs at 2 FLOP/s and 32 bytes at 4 bytes/s are the same 6 s and 8 s
    assert roofline_time(12.0, 32.0, 2.0, 4.0, 0.0, 2.0) == pytest.approx(10.0)


def test_tensor_parallelism_halves_weight_bound_gemm_time_and_adds_communication():
    model, shape = load_model("llama-3.1-70b"), batch(4, 1000, 8)
    one, two = cost_model(tp=1).forward(model, shape), cost_model(tp=2).forward(model, shape)
    # 32 tokens are far below the ridge point: GEMM time follows the weight bytes per GPU
    assert 0.45 * one.gemm_s < two.gemm_s < 0.55 * one.gemm_s
    assert one.communication_s == 0 < two.communication_s
    gemms = [cost_model(tp=tp).forward(model, shape).gemm_s for tp in (1, 2, 4, 8)]
    assert gemms == sorted(gemms, reverse=True)


def test_step_time_never_falls_as_query_tokens_or_context_grow():
    cm, model = cost_model(), load_model("llama-3.1-8b")
    queries, contexts = (1, 2, 4, 8, 16, 64), (0, 16, 512, 4096, 32768)
    times = np.array(
        [[cm.forward(model, batch(q, kv, 8)).total_s for kv in contexts] for q in queries]
    )
    assert (np.diff(times, axis=0) > 0).all()  # more tokens per sequence
    assert (np.diff(times, axis=1) > 0).all()  # longer caches


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
