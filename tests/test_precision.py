"""Precision data (simspec/data/precision.yaml) and its loader: names, sources, the weight-only
fallback on GPUs without FP8 tensor cores, and KV-cache dtype bytes."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from simspec.catalog.hardware import gpu_ids, load_gpu
from simspec.catalog.precision import (
    PRECISIONS,
    compute_flops,
    effective_precision,
    gemm_speed_ratio,
    kv_cache_bytes,
    load_precision,
    normalize_kv_cache_dtype,
)
from simspec.errors import InputError

RAW = yaml.safe_load(resources.files("simspec").joinpath("data", "precision.yaml").read_text())


def test_an_unknown_precision_names_the_field_and_the_choices():
    with pytest.raises(InputError) as err:
        load_precision("int3", field="deployment.precision")
    assert err.value.field == "deployment.precision"
    assert all(p in str(err.value) for p in PRECISIONS)


def test_an_unknown_kv_cache_dtype_names_the_field_and_the_choices():
    with pytest.raises(InputError) as err:
        normalize_kv_cache_dtype("int8")
    assert err.value.field == "kv_cache_dtype" and "fp8_e4m3" in str(err.value)


def test_every_precision_and_every_measured_table_says_where_it_came_from():
    for name in PRECISIONS:
        spec = load_precision(name)
        assert len(spec.source) > 20
        for curve in spec.curves.values():
            assert curve.sources and all(len(s) > 80 for s in curve.sources)
            assert list(curve.tokens) == sorted(curve.tokens)
    for entry in RAW["precisions"].values():  # every raw table has its source next to it
        for tables in (entry.get("curves") or {}).values():
            assert all(t.get("source") and (t.get("tflops") or t.get("speedup")) for t in tables)
    assert all(e.get("source") for e in RAW["kv_cache_dtypes"].values())


def test_bytes_per_weight_follow_the_formats():
    assert load_precision("bf16").weight_bytes == 2.0
    assert load_precision("fp8").weight_bytes == 1.0
    assert load_precision("int4-w").weight_bytes == pytest.approx((4 + 16 / 128) / 8)


def test_fp8_runs_weight_only_where_the_gpu_has_no_fp8_tensor_cores():
    fp8 = load_precision("fp8")
    for g in gpu_ids():
        gpu = load_gpu(g)
        eff = effective_precision(fp8, gpu)
        if gpu.fp8_dense_flops is None:  # Ampere: vLLM's FP8 Marlin, W8A16
            assert eff.compute == "bf16" and eff.weight_bytes == 1.0
            assert compute_flops(fp8, gpu) == gpu.bf16_dense_flops
        else:
            assert eff is fp8 and compute_flops(fp8, gpu) == gpu.fp8_dense_flops


def test_the_measured_ratio_is_read_by_architecture_and_held_at_the_ends():
    fp8, h100, b200 = load_precision("fp8"), load_gpu("h100_sxm"), load_gpu("b200")
    curve = fp8.curve("hopper")
    assert curve is not None
    assert gemm_speed_ratio(fp8, h100, 1) == curve.ratios[0]
    assert gemm_speed_ratio(fp8, h100, 10**7) == curve.ratios[-1]
    lo, hi = sorted(curve.ratios[1:3])
    assert lo <= gemm_speed_ratio(fp8, h100, 32) <= hi  # between the M = 16 and 64 cells
    assert gemm_speed_ratio(fp8, b200, 64) is None  # no Blackwell table: the roofline decides
    assert gemm_speed_ratio(load_precision("bf16"), b200, 64) == 1.0


def test_kv_cache_dtype_bytes_and_vllm_spellings():
    assert kv_cache_bytes("auto") == 2.0 and kv_cache_bytes("auto", activation_bytes=4) == 4
    assert kv_cache_bytes("bf16") == 2.0
    assert kv_cache_bytes("fp8") == kv_cache_bytes("fp8_e4m3") == kv_cache_bytes("fp8_e5m2") == 1
    assert normalize_kv_cache_dtype("bfloat16") == "bf16"
