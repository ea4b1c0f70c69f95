"""The measured-kernel terms of large MoE / MLA models: grouped GEMMs padded per expert and run
in waves, MLA decode tiles, DeepEP's two kernels, which table each (GPU, engine, dtype) takes,
and the fits reproducing their tables."""

from __future__ import annotations

import csv

import pytest

from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.kernel_tables import (
    DeepEpFit,
    GroupedGemmFit,
    MlaDecodeFit,
    borrowed_moe_fit,
    deepep_fits,
    deepep_low_latency_limit,
    mla_decode_fit,
    moe_kernel_fit,
)
from simspec.catalog.models import load_model
from simspec.catalog.precision import load_precision, weight_only_name
from simspec.catalog.servers import cross_node_note
from simspec.catalog.tables import packaged_table
from simspec.engine.costmodel import BatchShape, RooflineCostModel
from simspec.engine.costmodel.kernels import deepep_time, grouped_gemm_time, mla_decode_time
from simspec.engine.costmodel.moe import dispatch_combine_time
from simspec.engine.costmodel.work import distinct_experts

WANTED = ("H200 SXM", "SGLang", "fp8_block", "Kimi-K2", "8")
COMPUTE_ONLY = GroupedGemmFit("k", 64, 128, 0.0, 0.0, 1.0, 1e12, "bf16", 2.0, 132)


def _gemm(pairs: float, touched: float) -> float:
    return grouped_gemm_time(COMPUTE_ONLY, 4096, 512, pairs, touched, 132, 1e15, 4e12, 2.0)


def test_each_touched_expert_pads_its_tokens_to_the_block():
    # 1 or 64 tokens per expert fill one 64-row block: the same MMA work; 65 need two (64
    # experts' tiles fill whole waves, so twice the blocks take twice the waves)
    assert _gemm(64, 64) == pytest.approx(_gemm(64 * 64, 64))
    assert _gemm(64 * 65, 64) == pytest.approx(2 * _gemm(64 * 64, 64))


def test_tiles_run_in_whole_waves_over_the_sms():
    # per expert block: 1024/128 gate-up tiles and 4096/128 down tiles; 2 to 4 experts' tiles
    # fill one wave of 132 SMs, 5 experts' down tiles (160) take two: the down GEMM's K of 512
    # against the gate-up's 4096 makes its second wave 1/8 of the first step
    one = _gemm(2, 2)
    assert _gemm(4, 4) == pytest.approx(one)
    assert _gemm(5, 5) == pytest.approx(one * (4096 + 2 * 512) / (4096 + 512))


def test_a_triton_fused_moe_runs_its_small_tile_at_decode_sizes():
    # vLLM's and SGLang's Triton fused_moe pick BLOCK_SIZE_M by the token count M: for bf16
    # experts 16 rows up to E tokens (get_default_config), the fit's block_m beyond
    fit = GroupedGemmFit("k", 128, 128, 0.0, 0.0, 1.0, 1e12, "bf16", 2.0, 132, small_block_m=16)
    big = GroupedGemmFit("k", 128, 128, 0.0, 0.0, 1.0, 1e12, "bf16", 2.0, 132)
    small = GroupedGemmFit("k", 16, 128, 0.0, 0.0, 1.0, 1e12, "bf16", 2.0, 132)

    def t(f: GroupedGemmFit, tokens: float, experts: float) -> float:
        k = 2 if experts < 16 else 8
        touched = distinct_experts(int(experts), k, tokens)
        return grouped_gemm_time(
            f, 4096, 512, tokens * k, touched, 132, 1e15, 4e12, 2.0, tokens, experts
        )

    for tokens in (1, 8, 128):
        assert t(fit, tokens, 128) == pytest.approx(t(small, tokens, 128))
        assert t(fit, tokens, 128) < t(big, tokens, 128)
    assert t(fit, 129, 128) == pytest.approx(t(big, 129, 128))  # past E tokens
    assert t(fit, 9, 8) == pytest.approx(t(big, 9, 8))  # Mixtral's 8 experts
    # no token count given (a caller that times pairs alone): the fit's block_m
    assert grouped_gemm_time(fit, 4096, 512, 8, 8, 132, 1e15, 4e12, 2.0) == pytest.approx(
        grouped_gemm_time(big, 4096, 512, 8, 8, 132, 1e15, 4e12, 2.0)
    )


def test_a_lone_token_on_h200_costs_what_the_table_measured_not_a_padded_tile(shared):
    """QA: H200's vLLM bf16 fit ran a lone token as 128 padded rows, Qwen3-235B-A22B's experts
    at TP8 48.6 us against 36.6 measured and H100's 35.3: an H200 slower than an H100 at batch 1
    for every bf16 MoE on vLLM."""
    path = shared / "calibration-data/moe-serving/aiconfigurator_moe_1node.csv"
    kernel = "vllm_unquantizedfusedmoe_triton_tritonexperts"
    rows = {}
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            if (r["kernel_source"], r["moe_dtype"], r["model_shape"]) != (
                kernel,
                "bfloat16",
                "Qwen3-235B-A22B",
            ) or (r["moe_tp_size"], r["moe_ep_size"], r["distribution"], r["num_tokens"]) != (
                "8",
                "1",
                "balanced",
                "1",
            ):
                continue
            rows[r["gpu"]] = float(r["latency"]) * 1e-3
    times = {}
    for gpu_id, table in (("h100_sxm", "H100 SXM"), ("h200", "H200 SXM")):
        fit, gpu = moe_kernel_fit(gpu_id, "vllm", "bf16"), load_gpu(gpu_id)
        assert fit is not None and fit.small_block_m == 16
        times[gpu_id] = grouped_gemm_time(
            fit, 4096, 1536 // 8, 8.0, 8.0, fit.sms, gpu.bf16_dense_flops,
            gpu.hbm_bandwidth_bytes_s, fit.weight_bytes, 1.0, 128.0,
        )  # fmt: skip
        assert times[gpu_id] == pytest.approx(rows[table], rel=0.15)
    assert times["h200"] < times["h100_sxm"] * 1.05


def test_weight_streaming_bounds_few_tokens():
    fit = GroupedGemmFit("k", 64, 128, 1e-5, 0.0, 1.0, 1.0, "bf16", 2.0, 132)
    t = grouped_gemm_time(fit, 4096, 1024, 8, 8, 132, 1e18, 4e12, 2.0)
    weights = 8 * 3 * 4096 * 1024 * 2.0
    assert t == pytest.approx(1e-5 + (weights + 2.0 * 8 * (2 * 4096 + 3 * 1024)) / 4e12)


def test_mla_decode_pads_heads_to_the_tile_and_pays_per_sequence():
    fit = MlaDecodeFit("k", 64, 1e-5, 1e-7, 1.0, 1e9)  # compute-bound

    def t(seqs: int, rows: float) -> float:
        return mla_decode_time(fit, seqs, rows, seqs * 1000.0, 576, 512, 2.0, 1e15, 4.8e12)

    assert t(1, 16) == pytest.approx(t(1, 64))  # 16 heads per GPU cost a 64-row tile
    assert t(1, 65) > t(1, 64)
    assert t(2, 16) - 2 * t(1, 16) == pytest.approx(-1e-5)  # one fixed cost, two sequences


def test_deepep_takes_low_latency_for_decode_sized_batches_and_normal_above():
    ll = DeepEpFit(1e-5, 2e11, 1.0)
    normal = DeepEpFit(3e-5, 8e11, 2.0)
    fits = {
        "low_latency_dispatch": ll,
        "low_latency_combine": ll,
        "normal_dispatch": normal,
        "normal_combine": normal,
    }
    m = load_model("deepseek-v3")
    small = dispatch_combine_time(m, 8 * 128, 8, (0.0, 1.0), fits, 128)
    assert small == pytest.approx(2 * deepep_time(ll, 128, m.hidden_size, 8))
    big = dispatch_combine_time(m, 8 * 129, 8, (0.0, 1.0), fits, 128)
    assert big == pytest.approx(2 * deepep_time(normal, 129, m.hidden_size, 8))


def test_which_table_each_deployment_takes():
    assert moe_kernel_fit("h200", "sglang", "fp8").kernel == "sglang_fused_moe_triton"
    assert moe_kernel_fit("h100_sxm", "vllm", "fp8").kernel == "vllm_fp8moe_triton_tritonexperts"
    assert "flashinfer_trtllm" in moe_kernel_fit("b200", "vllm", "fp8").kernel
    # A100: the aiconfigurator-core wheel's bf16 tables; vLLM runs FP8 checkpoints' experts
    # weight-only through Marlin there (fused_marlin_moe, W8A16): the wheel's Marlin W4A16
    # fit at one byte per weight (plus a bf16 scale per 128); SGLang's FP8 path: roofline
    assert moe_kernel_fit("a100_80gb", "vllm", "bf16").kernel == "vllm_fused_moe"
    assert moe_kernel_fit("a100_80gb", "trtllm", "bf16").kernel == "moe_torch_flow"
    marlin = moe_kernel_fit("a100_80gb", "vllm", weight_only_name("fp8"))
    w4 = packaged_table("moe_kernels.yaml")["fits"]["A100 SXM/SGLang/sglang_marlin_moe/int4_wo"]
    assert marlin.kernel == "vllm_fused_marlin_moe_w8a16" and marlin.compute == "bf16"
    assert marlin.weight_bytes == pytest.approx(1 + 2 / 128)
    assert marlin.memory_efficiency == w4["memory_efficiency"] and w4["weight_bytes"] < 0.6
    assert moe_kernel_fit("a100_80gb", "sglang", weight_only_name("fp8")) is None
    # the cost model asks for what the GPU runs: FP8 on Ampere is its weight-only form
    qwen = load_model("qwen3-30b-a3b")
    cost = RooflineCostModel(
        load_gpu("a100_80gb"), load_profile("a100_80gb"), load_engine("vllm"), tp=1,
        precision=load_precision("fp8"), precision_model="qwen3-30b-a3b",
    )  # fmt: skip
    assert cost.moe_kernel(cost.experts_precision_of(qwen), qwen) == marlin
    assert moe_kernel_fit("h200", "hf", "bf16") is None
    # a GPTQ/AWQ int4 MoE runs Marlin W4A16 (vLLM CompressedTensorsWNA16MarlinMoEMethod,
    # SGLang's Marlin MoE); only gpt-oss's int4-w is MXFP4 (QA: every int4-w MoE was timed by
    # gpt-oss's MXFP4 kernels)
    marlin_vllm = "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts"
    assert moe_kernel_fit("h100_sxm", "vllm", "int4-w", "qwen3_moe").kernel == marlin_vllm
    assert moe_kernel_fit("h200", "sglang", "int4-w", "kimi_k2").kernel == "sglang_marlin_moe"
    assert "mxfp4" in moe_kernel_fit("h100_sxm", "vllm", "int4-w", "gpt_oss").kernel
    assert moe_kernel_fit("h100_sxm", "trtllm", "int4-w", "qwen3_moe") is None  # roofline
    assert mla_decode_fit("h200", "sglang", 2.0).kernel == "flash_attention"
    assert mla_decode_fit("h200", "vllm", 2.0) is None  # vLLM's FlashMLA is not in the table
    assert deepep_fits("h200", 8) is not None
    assert deepep_fits("h200", 4) is None  # the tables are one 8-GPU node, or DeepEP's README
    assert deepep_fits("h200", 24) is None  # internode sizes: 16 to 256 GPUs
    assert deepep_low_latency_limit() == 128


def test_sglang_runs_gpt_oss_experts_with_triton_kernels_at_ep1_on_hopper():
    """SGLang picks OpenAI's triton_kernels for GPT-OSS at EP 1 (server_args.py), the kernel
    vLLM's OAITritonExperts call: that fit times it, with its own table's routing. Other int4
    experts, and GPT-OSS under expert parallelism, keep SGLang's fused Triton MoE."""
    oai = "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"
    for gpu in ("h100_sxm", "h200"):
        fit = moe_kernel_fit(gpu, "sglang", "int4-w", "gpt_oss", 1)
        assert fit is not None and fit == moe_kernel_fit(gpu, "vllm", "int4-w", "gpt_oss", 1)
        assert fit.kernel == oai
        assert moe_kernel_fit(gpu, "sglang", "int4-w", "gpt_oss", 2).kernel != oai
        assert moe_kernel_fit(gpu, "sglang", "int4-w", "qwen3_moe", 1).kernel != oai
    # Blackwell keeps SGLang's FlashInfer MXFP4 kernel
    assert "flashinfer" in moe_kernel_fit("b200", "sglang", "int4-w", "gpt_oss", 1).kernel
    # the cost model asks with the model's architecture and its EP size
    gpt_oss = load_model("gpt-oss-120b")
    cost = RooflineCostModel(
        load_gpu("h200"), load_profile("h200"), load_engine("sglang"), tp=4,
        precision=load_precision("int4-w"), precision_model="gpt-oss-120b",
    )  # fmt: skip
    assert cost.moe_kernel(cost.experts_precision_of(gpt_oss), gpt_oss).kernel == oai


def test_every_default_kernel_states_a_residual_within_a_fifth():
    table = packaged_table("moe_kernels.yaml")
    for key, kernel in table["defaults"].items():
        gpu, framework, dtype = key.split("/")
        fit = table["fits"][f"{gpu}/{framework}/{kernel}/{dtype}"]
        assert fit["median_abs_error"] <= 0.2, key
        # the AIConfigurator families; vLLM PR #13932's table has 24 rows and fits one term
        assert fit["rows"] >= (20 if "fitted" in fit else 100), key


def test_a100_fits_without_balanced_rows_time_served_routing():
    """The wheel's A100 vLLM and TRT-LLM MoE tables time power-law routing only: their fits
    are on those rows over the framework's routing ratio, so the cost model's balanced fit
    times the ratio gives back the served (power-law) latency, as for every other fit."""
    table = packaged_table("moe_kernels.yaml")
    assert table["gpus"]["a100_80gb"] == {"table": "A100 SXM", "sms": 108}
    for framework, kernel in (("VLLM", "vllm_fused_moe"), ("TRTLLM", "moe_torch_flow")):
        fit = table["fits"][f"A100 SXM/{framework}/{kernel}/bfloat16"]
        assert fit["distribution"].startswith("power_law_1.2")
    fit = table["fits"]["A100 SXM/SGLang/sglang_fused_moe_triton/bfloat16"]
    assert "distribution" not in fit  # SGLang's A100 table has balanced rows
    assert moe_kernel_fit("a100_80gb", "vllm", "bf16").routing == tuple(
        tuple(n) for n in table["routing"]["VLLM"]
    )


def test_deepseek_on_h200_sglang_runs_the_measured_kernels():
    gpu, engine = load_gpu("h200"), load_engine("sglang")
    cost = RooflineCostModel(
        gpu, load_profile("h200"), engine, tp=8, precision=load_precision("fp8"),
        precision_model="deepseek-v3",
    )  # fmt: skip
    m = load_model("deepseek-v3")
    assert cost.moe_kernel(cost.experts_precision_of(m), m) is not None
    # batch 1 reads 8 experts' 1/8 slices: the measured kernel's fixed cost shows
    assert cost.routed_experts_time(m, 1) > 20e-6
    # the decode attention kernel's fixed cost per layer
    one = cost.forward(m, BatchShape.uniform(1, 1, 1000.0, 1)).attention_s
    assert one > m.num_hidden_layers * 10e-6


@pytest.mark.slow
def test_packaged_fit_reproduces_its_table_at_deepseeks_expert_shape(shared):
    """SGLang fused_moe_triton, fp8 block-scaled experts of DeepSeek-V3's shape (Kimi-K2's
    rows: the DeepSeek ones touch half the experts, calibration/fit_moe_kernels.py), TP8,
    balanced routing, on H200: the packaged fit within 30% at every token count of
    aiconfigurator_moe_1node.csv."""
    fit = moe_kernel_fit("h200", "sglang", "fp8")
    gpu = load_gpu("h200")
    path = shared / "calibration-data/moe-serving/aiconfigurator_moe_1node.csv"
    checked = 0
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            key = (r["gpu"], r["framework"], r["moe_dtype"], r["model_shape"], r["moe_tp_size"])
            if key != WANTED or (r["moe_ep_size"], r["distribution"]) != ("1", "balanced"):
                continue
            tokens = int(r["num_tokens"])
            pairs = tokens * 8
            predicted = grouped_gemm_time(
                fit, 7168, 256, pairs, min(384, pairs), fit.sms, gpu.fp8_dense_flops,
                gpu.hbm_bandwidth_bytes_s, fit.weight_bytes, tokens, 384,
            )  # fmt: skip
            assert predicted == pytest.approx(float(r["latency"]) * 1e-3, rel=0.3), r
            checked += 1
    assert checked >= 20


def test_vllm_v0_is_vllm_with_its_older_moe_kernel():
    v0, v1 = load_engine("vllm-v0"), load_engine("vllm")
    assert v0.custom_allreduce == v1.custom_allreduce
    # every parameter vLLM's but V0's default of no prefix caching, its scheduler's defaults
    # (256 sequences and a 2048-token budget on every GPU, prefill-first without chunked
    # prefill, a block watermark), V1's budget-edge draft trim and its drafters' lookahead KV,
    # V0's draft on fewer GPUs, its CUDA graphs (decode-only batches up to 256), its draft's
    # prompt pass apart from the decodes' first draft forward, unpadded, its verify by batch
    # expansion; no hybrid KV cache manager; no async scheduler; no decode instance simspec
    # models (V0's experimental disaggregated prefill ran another order)
    own = {"prefix_caching", "small_gpu_max_num_seqs", "small_gpu_max_num_batched_tokens"}
    own |= {"hybrid_kv_pool", "pd_disaggregation"}
    own |= {"cuda_graph_max_tokens", "cuda_graph_max_seqs", "cuda_graph_max_seqs_tp4"}
    own |= {"cuda_graph_decode_only"}
    own |= {"max_num_seqs", "max_num_batched_tokens", "v0_scheduler", "admission_watermark"}
    own |= {"trim_drafts_at_budget", "draft_lookahead_slots", "draft_tp_below_target"}
    own |= {"decode_asks_proposed", "default_seqs_within_budget", "graph_size_from_max_num_seqs"}
    own |= {"draft_prompt_in_first_pass", "draft_first_pass_padded", "verify_by_batch_expansion"}
    assert {k: v for k, v in v0.params.items() if k not in own} == {
        k: v for k, v in v1.params.items() if k not in own
    }
    assert v0.async_spec_methods is None and v1.async_spec_methods
    assert v0["prefix_caching"] == 0 and v1["prefix_caching"] == 1
    assert v0.family == "vllm"  # per-engine tables it has none of (kernel counts) are vLLM's
    old, new = moe_kernel_fit("h200", "vllm-v0", "fp8"), moe_kernel_fit("h200", "vllm", "fp8")
    assert old is not None and new is not None
    assert old.kernel == "vllm_fused_moe_triton_2025_02"
    # vLLM PR #13932's rows ran about 3x the later kernel's time: the weight stream is slower
    assert 2.5 < new.memory_efficiency / old.memory_efficiency < 4.0
    # a dtype the era table does not cover runs the later kernel
    assert moe_kernel_fit("h200", "vllm-v0", "bf16") == moe_kernel_fit("h200", "vllm", "bf16")


def test_the_v0_fit_reproduces_vllm_pr13932(shared):
    table = "vllm_pr13932_fused_moe_deepgemm_vs_triton_h100.csv"
    path = shared / "calibration-data/moe-serving" / table
    fit, gpu = moe_kernel_fit("h100_sxm", "vllm-v0", "fp8"), load_gpu("h100_sxm")
    assert fit is not None
    with path.open() as f:
        rows = list(csv.DictReader(f))
    errors = []
    for r in rows:
        tokens = int(r["batch_tokens"])
        pred = grouped_gemm_time(
            fit, 7168, int(r["n_per_tp"]) // 2, tokens * 8.0, distinct_experts(256, 8, tokens),
            132, gpu.fp8_dense_flops, gpu.hbm_bandwidth_bytes_s, fit.weight_bytes,
        )  # fmt: skip
        errors.append(abs(pred / (float(r["triton_us"]) * 1e-6) - 1))
    assert sorted(errors)[len(errors) // 2] < 0.08  # the packaged median error is 5 %


@pytest.mark.parametrize(
    ("model", "gpu", "engine", "tp", "top"),
    [
        ("mixtral-8x7b", "h100_sxm", "vllm", 2, 1500),
        ("qwen3-235b-a22b", "h200", "vllm", 4, 1500),
        # a prefill chunk crossing a measured routing size (QA: 2,560 -> 2,570 tokens, -10 %)
        ("gpt-oss-120b", "h100_sxm", "vllm", 1, 3000),
        # a kernel whose fixed cost dominates (QA: 1 token 54.4 us, 5 tokens 47.3 us)
        ("mixtral-8x7b", "b200", "trtllm", 8, 300),
    ],
)
def test_a_bigger_served_batch_never_costs_less_in_its_experts(model, gpu, engine, tp, top):
    """The served-over-balanced routing ratio falls faster than the balanced time rises over
    some sizes, and its nodes carry the tables' noise: a batch had cost up to 13 % less than
    a smaller one (QA: Mixtral at 306 routed tokens). The routed experts' time is now at least
    any smaller batch's (moe.served_envelope)."""
    from simspec.config import Scenario
    from simspec.engine.build import build_cost_model

    precision = "nvfp4" if gpu == "b200" else None
    sc = Scenario(model=model, gpu=gpu, engine=engine, tp=tp, precision=precision)
    cost, shape = build_cost_model(sc), load_model(model)
    times = [cost.routed_experts_time(shape, t) for t in range(1, top)]
    assert all(b >= a * (1 - 1e-9) for a, b in zip(times, times[1:], strict=False))


def test_an_mla_verify_never_costs_less_for_more_query_tokens():
    """QA: with an fp8 cache SGLang's verify fell 31 % from 16 to 17 tokens a sequence, where
    the decode kernel gives way to the roofline; and the fp8 fits, started at one point, had
    stuck FLOP-bound at 7 % of peak, 60 % over the measured 128-head rows."""
    from simspec import Scenario
    from simspec.catalog.tables import packaged_table
    from simspec.engine.build import build_cost_model
    from simspec.engine.costmodel.shapes import BatchShape

    model = load_model("deepseek-v3")
    for kv in ("auto", "fp8"):
        sc = Scenario(model="deepseek-v3", gpu="h200", tp=8, engine="sglang", kv_cache_dtype=kv)
        cost = build_cost_model(sc)
        times = [
            cost.forward(model, BatchShape.uniform(32, q, 32 * 2000.0, 32 * q)).attention_s
            for q in (1, 4, 15, 16, 17, 32)
        ]
        assert times == sorted(times), (kv, times)
    fits = packaged_table("mla_kernels.yaml")["fits"]
    for gpu in ("H100 SXM", "H200 SXM"):
        assert fits[f"{gpu}/SGLang/fp8"]["median_abs_error"] < 0.05


def test_deepep_across_servers_takes_the_readmes_internode_low_latency_times():
    """EP16-64 over several servers: DeepEP's README times its low-latency kernels (after PR
    #173, H800, one 400 Gb/s NIC a GPU) at 128 tokens a rank, hidden 7168, top-8: a dispatch
    of that shape costs what it printed, from the GPU's own fixed cost; fewer tokens cost
    less; the normal kernels are never faster per element (QA: the one-server fits had priced
    16 GPUs' dispatch at 37 us against DeepEP's 118)."""
    from simspec.catalog.hardware import load_gpu

    one, two = deepep_fits("h200", 8), deepep_fits("h200", 16)
    assert deepep_time(two["low_latency_dispatch"], 128, 7168, 8) == pytest.approx(118e-6)
    assert deepep_time(two["low_latency_combine"], 128, 7168, 8) == pytest.approx(195e-6)
    assert two["low_latency_dispatch"].latency_s == one["low_latency_dispatch"].latency_s
    assert deepep_time(two["low_latency_dispatch"], 4, 7168, 8) < 20e-6
    for phase in ("dispatch", "combine"):
        low, normal = two[f"low_latency_{phase}"], two[f"normal_{phase}"]
        assert deepep_time(normal, 129, 7168, 8) >= deepep_time(low, 128, 7168, 8)
    assert deepep_time(deepep_fits("h200", 64)["low_latency_combine"], 128, 7168, 8) == (
        pytest.approx(314e-6)
    )
    note = cross_node_note(load_gpu("h200"), 16, 16, "sglang")
    assert "internode low-latency times" in note and "lower bound" in note
    assert "DeepEP" not in cross_node_note(load_gpu("h200"), 16, 1, "sglang")  # TP16 alone
    # vLLM's default all-to-all is not DeepEP's (all-gather and reduce-scatter)
    assert "DeepEP" not in cross_node_note(load_gpu("h200"), 16, 16, "vllm")


@pytest.mark.parametrize(
    ("weaker", "stronger", "model", "engine", "precision", "tp"),
    [
        ("a100_80gb", "h100_sxm", "gpt-oss-120b", "trtllm", "int4-w", 2),
        ("h100_pcie", "h100_sxm", "gpt-oss-20b", "trtllm", None, 1),
        ("b300", "b200", "qwen3-30b-a3b", "sglang", None, 2),
        # above every tabled GPU: the nearest below's fit at its own peaks, never slower
        ("b200", "gb200", "qwen3-30b-a3b", "vllm", None, 1),
    ],
)
def test_a_gpu_without_moe_tables_is_never_priced_faster_than_a_stronger_ones(
    weaker, stronger, model, engine, precision, tp
):
    """QA: the roofline fallback of a GPU with no MoE kernel table put an A100, an H100 PCIe
    and a B300 ahead of the H100 SXM and B200 tables (up to 1.55x); such a GPU takes the
    nearest tabled GPU at least as fast's fit, at its own peaks."""
    m = load_model(model)
    batch = BatchShape.uniform(1, 1, 512.0, 1)
    step = {}
    for gpu in (weaker, stronger):
        prec = load_precision(precision) if precision else None
        cost = RooflineCostModel(
            load_gpu(gpu), load_profile(gpu), load_engine(engine), tp=tp,
            precision=prec, precision_model=model if prec else None,
        )  # fmt: skip
        step[gpu] = cost.forward(m, batch).gemm_s
    assert step[weaker] >= step[stronger]
    untabled, tabled = (stronger, weaker) if stronger == "gb200" else (weaker, stronger)
    found = borrowed_moe_fit(untabled, engine, precision or "bf16", m.model_type)
    assert found is not None and found[0] == tabled
    assert "MoE kernels no table of this GPU covers take the fits of the nearest" in (
        load_profile(untabled).transferred_note()
    )


def test_a_gpu_borrows_a_fit_at_its_own_dtype_before_a_floor_dtype():
    """QA: FP8 weight-only experts on an A100-40GB took H100's int4 Marlin fit through the
    never_faster_than floor, not A100-80GB's measured W8A16 fit; AMD GPUs borrow none."""
    qwen = load_model("qwen3-30b-a3b")
    cost = RooflineCostModel(
        load_gpu("a100_40gb"), load_profile("a100_40gb"), load_engine("vllm"), tp=1,
        precision=load_precision("fp8"), precision_model="qwen3-30b-a3b",
    )  # fmt: skip
    fit = cost.moe_kernel(cost.experts_precision_of(qwen), qwen)
    assert fit == moe_kernel_fit("a100_80gb", "vllm", weight_only_name("fp8"))
    assert borrowed_moe_fit("mi300x", "vllm", "bf16", "qwen3_moe") is None


@pytest.mark.parametrize(("model", "tp", "sizes"), [("qwen3-30b-a3b", 1, range(124, 132))])
def test_one_more_sequence_never_makes_the_experts_cheaper_on_a_compute_bound_gpu(model, tp, sizes):
    """QA: on an H20, 127 sequences of Qwen3-30B-A3B cost 2x what 128 did: the padded row's
    fractional fresh share, scaled to a routing node, put the tile choice past the experts'
    count. The kernel's tile follows the batch's own M."""
    from simspec.config import Scenario
    from simspec.engine.build import build_cost_model

    m = load_model(model)
    cost = build_cost_model(Scenario(model=model, gpu="h20", tp=tp))
    steps = [cost.forward(m, BatchShape.uniform(s, 1, s * 1024.0, s)).gemm_s for s in sizes]
    # (the served-routing ratio between its nodes may take off a few parts in 10^5)
    assert all(b >= a * (1 - 1e-3) for a, b in zip(steps, steps[1:], strict=False))


def test_an_fp8_kv_mla_decode_measured_slower_than_bf16_is_said():
    """QA: SGLang's MLA decode table on Hopper times FP8 KV at 6-8 % of HBM bandwidth against
    83-85 % for bf16, so an FP8 cache decoded 2-3.5x slower at long context with no word; the
    footer says it is the measurement. Where FP8 is not slower (TRT-LLM, B200) nothing."""
    from simspec.config import Deployment
    from simspec.studies.provenance import deployment_notes, mla_fp8_kv_note

    def note(engine: str, gpu: str, kv: str = "fp8") -> str | None:
        deploy = Deployment(model="deepseek-v3", gpu=gpu, tp=8, engine=engine, kv_cache_dtype=kv)
        return mla_fp8_kv_note(deploy, load_engine(engine))

    said = note("sglang", "h200")
    assert said is not None and "6% of HBM bandwidth against 83% for bf16" in said
    assert note("sglang", "h200", "auto") is None and note("trtllm", "h200") is None
    assert note("sglang", "b200") is None and note("vllm", "h200") is None
    deploy = Deployment(
        model="deepseek-v3", gpu="h200", tp=8, engine="sglang", kv_cache_dtype="fp8"
    )
    assert any("MLA decode with an FP8 KV cache" in n for n in deployment_notes(deploy))
