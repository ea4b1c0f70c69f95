"""Fit the MoE / MLA kernel constants simspec packages to AIConfigurator's measured tables.

    python calibration/fit_moe_kernels.py [--shared ../shared] [--aic-core WHEEL]

Reads ``<shared>/calibration-data/moe-serving/`` (converted from ai-dynamo/aiconfigurator at
095f58a, Apache-2.0; see its SOURCE.md section 6) and writes

- ``simspec/data/moe_kernels.yaml``: per (GPU, framework, kernel, dtype) the constants of
  :func:`simspec.engine.costmodel.kernels.grouped_gemm_time`, from
  ``aiconfigurator_moe_1node.csv`` (balanced routing; vLLM and SGLang at moe_ep_size 1 only,
  since their EP>1 collectors compute non-local assignments, SOURCE.md section 6), the block M
  chosen from 16/32/64/128 by the best median error;
- ``simspec/data/mla_kernels.yaml``: per (GPU, framework, KV dtype) the constants of
  :func:`simspec.engine.costmodel.kernels.mla_decode_time`, from
  ``aiconfigurator_mla_decode_attention.csv``;
- the ``deepep`` section of ``simspec/data/alltoall.yaml``: per GPU a (latency, bandwidth) for
  DeepEP's low-latency and normal dispatch and combine, from
  ``aiconfigurator_deepep_{ll,normal}_1node.csv``.

With ``--aic-core WHEEL`` (the aiconfigurator-core 0.12.0 wheel, ``calibration/aic_wheel.py``),
A100 SXM's MoE tables are fitted too: ``systems/data/a100_sxm/moe/{vllm/0.14.0, sglang/0.5.10,
trtllm/1.0.0}/moe_perf.parquet``, converted as SOURCE.md section 6 converts the others (the
seven model shapes, moe_tp x moe_ep <= 8, latency in ms): bf16 experts, and SGLang's Marlin
W4A16 ones, whose kernel times vLLM's FP8 experts on Ampere (MARLIN_FP8).

Every fit is least squares on log(predicted / measured); each entry records its rows and the
median and max |relative error| over them.
"""

from __future__ import annotations

import argparse
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import least_squares

from simspec.catalog.hardware import load_gpu
from simspec.catalog.kernel_tables import DeepEpFit, GroupedGemmFit, MlaDecodeFit
from simspec.catalog.precision import weight_only_name
from simspec.engine.costmodel.kernels import deepep_time, grouped_gemm_time, mla_decode_time
from simspec.engine.costmodel.moe_routing import routing_ratio
from simspec.engine.costmodel.work import distinct_experts
from simspec.outputs import write_text_atomic

try:
    from calibration.aic_wheel import A100_FRAMEWORKS, AIC_VERSION, a100_tables  # as a package
except ImportError:  # run as a script: calibration/ is sys.path[0]
    from aic_wheel import A100_FRAMEWORKS, AIC_VERSION, a100_tables

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "simspec" / "data"
TABLES = "calibration-data/moe-serving"

# simspec GPU id -> the table's GPU name and its SM count (NVIDIA H100 whitepaper: 132 SMs on
# H100 SXM5, and H200 is the same GH100 die; B200: 148 SMs, NVIDIA Blackwell datasheet)
GPUS = {
    "h100_sxm": ("H100 SXM", 132),
    "h200": ("H200 SXM", 132),
    "b200": ("B200 SXM", 148),
}
# A100 SXM4 80GB, from the aiconfigurator-core wheel (--aic-core): 108 SMs (NVIDIA A100 Tensor
# Core GPU Architecture whitepaper, "The A100 SXM4 ... 108 SMs"); MoE fits only (the wheel's
# A100 MLA and DeepEP tables are not read)
A100 = {"a100_80gb": ("A100 SXM", 108)}
# SOURCE.md section 6's seven (hidden, intermediate, experts, top-k) shapes, by the name its
# model_shape column gives them
SHAPES = {
    (7168, 2048, 256, 8): "DeepSeek-V3/R1",
    (7168, 2048, 384, 8): "Kimi-K2",
    (4096, 1536, 128, 8): "Qwen3-235B-A22B",
    (2048, 768, 128, 8): "Qwen3-30B-A3B",
    (2880, 2880, 128, 4): "gpt-oss-120b",
    (2880, 2880, 32, 4): "gpt-oss-20b",
    (4096, 14336, 8, 2): "Mixtral-8x7B",
}
ENGINES = {"vllm": "VLLM", "sglang": "SGLang", "trtllm": "TRTLLM"}
# simspec precision -> the table's MoE dtype: fp8 checkpoints of the MoE models simspec ships
# (DeepSeek-V3/R1, Qwen3 FP8) are block-scaled 128x128; int4-w is a GPTQ/AWQ/compressed-tensors
# W4A16 checkpoint, whose experts vLLM runs through Marlin (CompressedTensorsWNA16MarlinMoEMethod,
# GPTQ/AWQ Marlin MoE) and SGLang through its Marlin MoE (or FlashInfer's TRT-LLM W4A16 MoE on
# SM100), the table's int4_wo rows; nvfp4 is ModelOpt's W4A4 (nvidia/DeepSeek-R1-FP4 and the
# like), the table's nvfp4 rows
DTYPES = {"bf16": "bfloat16", "fp8": "fp8_block", "int4-w": "int4_wo", "nvfp4": "nvfp4"}
# a precision whose experts one architecture ships in another format: (precision, model_type) ->
# the table's dtype (moe_kernels.yaml ``model_dtypes``). simspec reads gpt-oss's MXFP4 experts
# as int4-w (weight-only, bf16 activations on Hopper), run by the engines' MXFP4 kernels, not
# Marlin W4A16 (QA: every int4-w MoE had been timed by gpt-oss's MXFP4 kernels)
MODEL_DTYPES = {("int4-w", "gpt_oss"): "w4a16_mxfp4"}
# FP8 weights on a GPU without FP8 tensor cores (precision.yaml fp8 weight_only: W8A16 through
# Marlin): no table dtype of its own, timed as MARLIN_FP8 says
DTYPES[weight_only_name("fp8")] = "fp8_w8a16"
# the table's dtype -> (tensor-core dtype of its MMA, bytes per weight with scales)
DTYPE_COST = {
    "bfloat16": ("bf16", 2.0),
    "fp8": ("fp8", 1.0),
    "fp8_block": ("fp8", 1.0 + 4.0 / (128 * 128)),
    "w4a16_mxfp4": ("bf16", 0.5 + 1.0 / 32),
    "w4a8_mxfp4_mxfp8": ("fp8", 0.5 + 1.0 / 32),
    "int4_wo": ("bf16", 0.5 + 2.0 / 128),
    "nvfp4": ("fp4", 0.5 + 1.0 / 16),
}
# the kernel each engine runs by default, first match in the table wins:
# - vLLM Hopper: fused_moe/oracle/fp8.py select_fp8_moe_backend prefers DeepGEMM on SM90
#   (TritonOrDeepGemmExperts, falling back to Triton where DeepGEMM's shapes do not fit); the
#   table has no vLLM DeepGEMM rows on Hopper, so its Triton experts stand in (vLLM PR #13932
#   measured DeepGEMM 1.6-2x faster than Triton at 128-2048 tokens on H100: an upper bound
#   there). Unquantised and MXFP4 experts: Triton (UnquantizedFusedMoEMethod, the OAI Triton
#   MXFP4 kernels). Blackwell: FlashInfer TRT-LLM experts (the oracle's SM100 priority).
# - SGLang: --moe-runner-backend auto runs fused_moe_triton on Hopper
#   (python/sglang/srt/layers/moe/fused_moe_triton); on B200 the flashinfer_trtllm runner
#   server_args.py selects for DeepSeek/gpt-oss on SM100, Triton otherwise.
# - TRT-LLM (PyTorch backend, 1.0-1.2): MoeConfig.backend defaults to "CUTLASS"
#   (tensorrt_llm/llmapi/llm_args.py, indexed copies; later copies default to "AUTO", which
#   resolves per model), the CutlassFusedMoE the table calls moe_torch_flow_cutlass. Where the
#   table has no CUTLASS rows for a dtype it times the kernel TRT-LLM runs for it instead:
#   DeepGEMM for block-FP8 on B200, the Triton path (moe_torch_flow) for MXFP4 on Hopper.
DEFAULT_KERNELS = {
    "VLLM": [
        "vllm_fp8moe_triton_tritonexperts",
        "vllm_unquantizedfusedmoe_triton_tritonexperts",
        "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic",
        "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
        "vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts",
        "vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic",
        # NVFP4 experts on SM100: FlashInfer TRT-LLM first (vLLM logs "Using
        # 'FLASHINFER_TRTLLM' NvFp4 MoE backend out of potential backends: ['FLASHINFER_TRTLLM',
        # 'MARLIN']"; ModelOpt and compressed-tensors NVFP4 share that backend selection); the
        # table's only vLLM nvfp4 family, measured through a compressed-tensors checkpoint
        "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_trtllm_trtllmnvfp4expertsmonolithic",
        # the 0.14.0 collector's name for the Triton fused_moe (A100: UnquantizedFusedMoEMethod
        # runs it on Ampere, vllm/model_executor/layers/fused_moe/fused_moe.py)
        "vllm_fused_moe",
        # W4A16 int4 experts: Marlin (CompressedTensorsWNA16MarlinMoEMethod, fused_marlin_moe)
        "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts",
    ],
    "SGLang": ["sglang_flashinfer_trtllm_moe", "sglang_fused_moe_triton", "sglang_marlin_moe"],
    "TRTLLM": ["moe_torch_flow_cutlass", "deepgemm", "moe_torch_flow"],
}
# vLLM's and SGLang's DeepSeek-V3/R1 rows stream 256 experts' fp8 weights at up to 8.3 TB/s on
# H200 (4.8 TB/s HBM) at 32-128 tokens, where TRT-LLM's and both engines' Kimi-K2 rows (same
# expert shape, 384 experts) stay at 4.0-4.6 TB/s: their collectors' balanced workload goes
# through DeepSeek's group-limited top-k (4 of 8 groups) and touches half the experts, which
# a served batch (each token its own groups) does not. Those rows are left out of the fit.
DEEPSEEK = "DeepSeek-V3/R1"
# MXFP4 experts (gpt-oss) with MXFP8 activations where an engine runs them so by default: the
# (GPU, engine, dtype) -> the table dtype whose fit times them (moe_kernels.yaml ``runs_as``).
# - SGLang on SM100: python/sglang/srt/server_args.py (GptOssForCausalLM branch) sets
#   --moe-runner-backend auto to flashinfer_mxfp4 for an mxfp4 checkpoint on Blackwell,
#   and --flashinfer-mxfp4-moe-precision defaults to "default", under which
#   layers/quantization/mxfp4.py Mxfp4MoEMethod.apply quantises the activations with
#   mxfp8_quantize before trtllm_fp4_block_scale_moe ("bf16" keeps them bf16); indexed copies
#   of sgl-project/sglang, find_string 'self.moe_runner_backend = "flashinfer_mxfp4"' and
#   'elif self.flashinfer_mxfp4_moe_precision == "default"'.
# - TRT-LLM on SM100: tensorrt_llm/_torch/model_config.py ModelConfig.get_mxfp4_quant_algo
#   (NVIDIA/TensorRT-LLM, indexed copies, find_string "def get_mxfp4_quant_algo") returns
#   W4A8_MXFP4_MXFP8 for get_sm_version() >= 100 and every MoE backend but TRITON
#   (W4A8_MXFP4_FP8, also fp8 activations), W4A16_MXFP4 below SM100, unless
#   ModelConfig.override_quant_algo() names another.
# - vLLM keeps bf16 activations on SM100 (Mxfp4Backend.SM100_FI_MXFP4_BF16 unless
#   VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1: precision.yaml int4-w says where), and all three run
#   W4A16 on Hopper (Triton / OAI triton_kernels), so they keep w4a16_mxfp4.
RUNS_AS = {
    ("B200 SXM", "SGLang", "w4a16_mxfp4"): "w4a8_mxfp4_mxfp8",
    ("B200 SXM", "TRTLLM", "w4a16_mxfp4"): "w4a8_mxfp4_mxfp8",
}
# An engine that picks another MoE kernel for one architecture than for the dtype in general,
# at expert parallelism 1: (GPU, framework, dtype, model_type) -> (framework, kernel) of the
# fit that times it (moe_kernels.yaml ``model_defaults``).
# - SGLang on Hopper runs GPT-OSS's MXFP4 experts with OpenAI's triton_kernels (matmul_ogs):
#   python/sglang/srt/server_args.py, ServerArgs._handle_model_specific_adjustments, the
#   GptOssForCausalLM branch: with --moe-runner-backend auto, Blackwell and MXFP4 take
#   flashinfer_mxfp4, else "elif self.ep_size == 1 and is_triton_kernels_available():
#   self.moe_runner_backend = 'triton_kernel'" (indexed copies of sgl-project/sglang,
#   find_string "enabling triton_kernels MOE kernel"). AIConfigurator's SGLang collector timed
#   sglang_fused_moe_triton for w4a16_mxfp4 instead, SGLang's kernel for other int4 experts;
#   the triton_kernels MoE it runs for GPT-OSS is the one vLLM's OAITritonExperts call
#   (vllm/model_executor/layers/fused_moe/gpt_oss_triton_kernels_moe.py, triton_kernels
#   matmul_ogs), so that measured fit times it. At EP > 1 SGLang keeps its fused Triton MoE.
MODEL_DEFAULTS = {
    (gpu, "SGLang", "w4a16_mxfp4", "gpt_oss"): (
        "VLLM",
        "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic",
    )
    for gpu in ("H100 SXM", "H200 SXM")
}
# vLLM V0 (releases before 0.8, early 2025) ran an older Triton fused MoE: vLLM PR #13932
# (2025-02-26) timed it with benchmark_moe.py on DeepSeek-V3's block-FP8 experts on H100 at
# TP 1-8 and 128-2048 tokens, about 3x the time AIConfigurator measured for vLLM's Triton
# experts later. Its framework key is the engine profile ``vllm-v0``; dtypes and GPUs the table
# does not cover run vLLM's fits (the profile's ``base`` in engines.yaml).
V0_TABLE = "vllm_pr13932_fused_moe_deepgemm_vs_triton_h100.csv"
V0_FRAMEWORK = "VLLM-V0"
V0_KERNEL = "vllm_fused_moe_triton_2025_02"
BLOCK_MS = (16, 32, 64, 128)
# The Triton fused_moe kernels pick their tile by the batch's token count M (vLLM
# try_get_optimal_moe_config: the tuned config nearest M, else get_default_config, whose
# unquantized branch runs BLOCK_SIZE_M 16 where M <= E, the layer's experts, and 64 beyond;
# SGLang's fused_moe_triton keeps the same default). Their bf16 fits take those two tiles
# (SMALL_BLOCK_M up to E tokens, DEFAULT_BLOCK_M beyond) instead of one fitted tile at every
# size, which made a lone token pay 128 padded rows on H200's vLLM bf16 fit (QA: Qwen3-235B's
# experts at TP8, 1 token, 48.6 us predicted against 36.6 measured, above H100's 35.3). The
# default's tiles fit the tables as well as the best single tile (median error per family
# within 0.01 of it; H200 vLLM's largest error 0.43 -> 0.31), where a fitted large tile beside
# the small one overshot Mixtral's few experts on A100 (+27 % median). Block-FP8 experts keep one
# fitted tile: get_default_config's branch for them ran a fixed 64 rows (16 up to 64 tokens
# only in later releases), and a small tile there fits the tables' lone tokens worse (Kimi-K2's
# experts on H200 under SGLang, 1 token: 35 us against 51 measured). DeepGEMM aligns each
# expert's rows to its block M whatever the batch, and the CUTLASS / FlashInfer kernels pick
# tiles of their own: one fitted tile stands for them.
TRITON_FUSED_MOE = {
    "vllm_unquantizedfusedmoe_triton_tritonexperts",
    "vllm_fused_moe",
    "sglang_fused_moe_triton",
}
SMALL_TILE_DTYPES = {"bfloat16"}
DEFAULT_BLOCK_M = 64
SMALL_BLOCK_M = 16
BLOCK_N = 128
MLA_BLOCK_M = 64  # FlashMLA and FlashAttention-3's MLA decode tile: 64 query rows
MLA_LATENT, MLA_VALUE = 576, 512  # DeepSeek-V3's kv_lora_rank + rope, kv_lora_rank
# DeepEP's Buffer default num_sms (deep_ep/buffer.py), which SGLang's DeepEPBuffer keeps unless
# --deepep-config says otherwise
DEEPEP_NORMAL_SMS = 20
# SGLang's low-latency buffer holds SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK tokens
# (default 128); --deepep-mode auto runs low-latency for decode batches, normal for extend
DEEPEP_LL_MAX_TOKENS = 128
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128  # fp8 with one fp32 scale per 128 elements
BF16_BYTES = 2.0


def rates(gpu_id: str, compute: str) -> tuple[float, float]:
    gpu = load_gpu(gpu_id)
    peak = {
        "bf16": gpu.bf16_dense_flops,
        "fp8": gpu.fp8_dense_flops,
        "fp4": gpu.fp4_dense_flops,
    }[compute]
    return float(peak or gpu.bf16_dense_flops), gpu.hbm_bandwidth_bytes_s


def summary(err: np.ndarray) -> dict[str, float]:
    a = np.abs(err)
    return {
        "median_abs_error": round(float(np.median(a)), 4),
        "max_abs_error": round(float(a.max()), 4),
    }


# -- MoE grouped GEMMs ---------------------------------------------------------------------------
MoeRow = tuple[int, int, float, float, float, float, float]


def moe_rows(df: pd.DataFrame) -> list[MoeRow]:
    """(hidden, width, pairs, touched, seconds, tokens, experts) per row, per GPU rank:
    balanced routing sends tokens*k pairs to min(E, tokens*k) experts evenly, 1/ep of them
    (and of the E experts) on each rank, whose kernel runs over all the tokens."""
    out = []
    for r in df.itertuples():
        pairs = r.num_tokens * r.topk
        touched = min(r.num_experts, pairs)
        out.append(
            (
                r.hidden_size,
                r.inter_size // r.moe_tp_size,
                pairs / r.moe_ep_size,
                touched / r.moe_ep_size,
                r.latency * 1e-3,
                float(r.num_tokens),
                r.num_experts / r.moe_ep_size,
            )
        )
    return out


# the logits of the compute efficiency each MoE fit starts from (sigmoid: 0.12, 0.5, 0.88)
MOE_STARTS = (-2.0, 0.0, 2.0)


def fit_moe_family(
    rows: list[MoeRow], sms, rate_c, rate_m, compute, wbytes, kernel, dtype
) -> tuple[dict, np.ndarray]:
    best: tuple[float, dict, np.ndarray] | None = None
    measured = np.array([r[4] for r in rows])
    small = SMALL_BLOCK_M if kernel in TRITON_FUSED_MOE and dtype in SMALL_TILE_DTYPES else 0
    for block_m in (DEFAULT_BLOCK_M,) if small else BLOCK_MS:

        def make(x: np.ndarray, block_m: int = block_m) -> GroupedGemmFit:
            return GroupedGemmFit(
                kernel, block_m, BLOCK_N, *np.exp(x[:2]), *(1 / (1 + np.exp(-x[2:]))),
                compute, wbytes, sms, small_block_m=small,
            )  # fmt: skip

        def resid(x: np.ndarray, make=make) -> np.ndarray:
            f = make(x)
            pred = [
                grouped_gemm_time(f, h, w, p, t, sms, rate_c, rate_m, wbytes, m, e)
                for h, w, p, t, _, m, e in rows
            ]
            return np.log(np.array(pred) / measured)

        # from several compute-efficiency starts, the lowest cost: the tile and wave steps
        # make the landscape piecewise, and from one start a last-bit difference (BLAS, CPU)
        # switched B200 SGLang NVFP4 between two minima (QA: compute efficiency 0.42 or 1.0)
        sol = min(
            (
                least_squares(resid, np.array([math.log(2e-5), math.log(1e-8), start, 0.0]))
                for start in MOE_STARTS
            ),
            key=lambda s: s.cost,
        )
        err = np.exp(sol.fun) - 1
        med = float(np.median(np.abs(err)))
        if best is None or med < best[0]:
            f = make(sol.x)
            fit = {
                "block_m": block_m,
                "block_n": BLOCK_N,
                "fixed_s": float(f"{f.fixed_s:.4e}"),
                "per_pair_s": float(f"{f.per_pair_s:.4e}"),
                "compute_efficiency": round(float(f.compute_efficiency), 4),
                "memory_efficiency": round(float(f.memory_efficiency), 4),
                "compute": compute,
                "weight_bytes": round(wbytes, 6),
            }
            if small:
                fit["small_block_m"] = small
            best = (med, fit, err)
    assert best is not None
    return best[1], best[2]


def read_aic_a100_moe(wheel: Path) -> pd.DataFrame:
    """A100 SXM's MoE rows from the aiconfigurator-core wheel, in the columns of
    ``aiconfigurator_moe_1node.csv`` (SOURCE.md section 6's filters: its seven shapes,
    moe_tp x moe_ep <= 8): bf16 experts, and the SGLang table's Marlin W4A16 rows, whose
    kernel also times FP8 experts on Ampere (see MARLIN_FP8)."""
    frames = []
    with a100_tables(wheel) as table:
        for source in A100_FRAMEWORKS:
            frames.append(table(f"moe/{source}/moe_perf.parquet"))
    df = pd.concat(frames, ignore_index=True)
    shape = list(zip(df.hidden_size, df.inter_size, df.num_experts, df.topk, strict=True))
    df = df.assign(gpu=A100["a100_80gb"][0], model_shape=[SHAPES.get(s) for s in shape])
    keep = df.model_shape.notna() & (df.moe_tp_size * df.moe_ep_size <= 8)
    return df[keep & df.moe_dtype.isin(["bfloat16", "int4_wo"])].reset_index(drop=True)


# vLLM runs an FP8 checkpoint's experts weight-only on GPUs without FP8 tensor cores:
# Fp8MoEMethod sets use_marlin = not current_platform.has_device_capability(89) and apply()
# calls fused_marlin_moe(..., quant_type_id=scalar_types.float8_e4m3fn.id), block-scaled
# checkpoints too, their 128x128 blocks repeated into per-128 group scales
# (vllm/model_executor/layers/quantization/fp8.py and utils/marlin_utils_fp8.py
# prepare_moe_fp8_layer_for_marlin, the 0.11.0 wheel). fused_marlin_moe runs
# moe_wna16_marlin_gemm with 8-bit weights: the kernel SGLang's fused_marlin_moe runs with
# 4-bit ones (sglang/srt/layers/moe/fused_moe_triton/fused_marlin_moe.py, 0.5.10 wheel: its JIT
# port moe_wna16_marlin_gemm), which the wheel times on A100. So the A100 FP8 experts take
# that fit's tiles and efficiencies (an assumption: the same bf16 MMA pipeline, a different
# dequantisation) at FP8's bytes: one per weight plus a bf16 scale per 128.
MARLIN_FP8 = {
    ("A100 SXM", "VLLM", "fp8_w8a16"): ("SGLang", "sglang_marlin_moe", "int4_wo"),
}
MARLIN_FP8_KERNEL = "vllm_fused_marlin_moe_w8a16"
MARLIN_FP8_BYTES = 1.0 + 2.0 / 128


def marlin_fp8(fits: dict, defaults: dict) -> None:
    """The A100 FP8 Marlin entries (MARLIN_FP8), into ``fits`` and ``defaults``."""
    for (gpu, fw, dtype), (owner, kernel, measured) in MARLIN_FP8.items():
        source = f"{gpu}/{owner}/{kernel}/{measured}"
        if source not in fits:
            continue
        fits[f"{gpu}/{fw}/{MARLIN_FP8_KERNEL}/{dtype}"] = {
            **fits[source],
            "weight_bytes": round(MARLIN_FP8_BYTES, 6),
            "transferred_from": source,
        }
        defaults[f"{gpu}/{fw}/{dtype}"] = MARLIN_FP8_KERNEL


def served_as_balanced(fam: pd.DataFrame, nodes: list[list[float]]) -> pd.DataFrame:
    """A family's power_law_1.2 rows divided by its framework's served-over-balanced ratio at
    each row's routed pairs per expert: the balanced latency the cost model multiplies back by
    that ratio (moe_routing), for a table that timed no balanced routing (the wheel's A100
    vLLM and TRT-LLM MoE tables hold power-law rows only)."""
    skew = fam[fam.distribution == SERVED_DISTRIBUTION]
    nodes_t = tuple((float(x), float(r)) for x, r in nodes)
    x = skew.num_tokens * skew.topk / skew.num_experts
    ratio = np.array([routing_ratio(nodes_t, float(v)) for v in x])
    return skew.assign(latency=skew.latency.to_numpy() / ratio)


def fit_moe(df: pd.DataFrame, gpus: dict, routing: dict[str, list[list[float]]]) -> dict:
    inv = {v[0]: k for k, v in gpus.items()}
    fits, defaults, imbalance = {}, {}, {}
    for (gpu, fw, kernel, dtype), fam in df.groupby(
        ["gpu", "framework", "kernel_source", "moe_dtype"]
    ):
        if gpu not in inv or dtype not in DTYPE_COST:
            continue
        own = fam
        if fw in ("VLLM", "SGLang"):
            own = fam[(fam.moe_ep_size == 1) & (fam.model_shape != DEEPSEEK)]
        bal = own[own.distribution == "balanced"]
        served = len(bal) < 20
        if served:
            bal = served_as_balanced(own, routing[str(fw)])
        if len(bal) < 20:
            continue
        compute, wbytes = DTYPE_COST[dtype]
        rate_c, rate_m = rates(inv[gpu], compute)
        fit, err = fit_moe_family(
            moe_rows(bal), gpus[inv[gpu]][1], rate_c, rate_m, compute, wbytes, kernel, dtype
        )
        key = f"{gpu}/{fw}/{kernel}/{dtype}"
        fits[key] = {**fit, "rows": len(bal), **summary(err)}
        if served:
            fits[key]["distribution"] = f"{SERVED_DISTRIBUTION} over the framework's routing"
        else:
            imbalance[key] = power_law_ratio(fam)
        print(f"{key:100s} n={len(bal):4d} bm={fit['block_m']:3d} {summary(err)}")
    runs_as = {}
    for gpu in [g for g in inv if g in set(df.gpu)]:
        for fw, order in DEFAULT_KERNELS.items():
            for dtype in dict.fromkeys([*DTYPES.values(), *MODEL_DTYPES.values()]):
                fit_dtype = RUNS_AS.get((gpu, fw, dtype), dtype)
                for kernel in order:
                    if f"{gpu}/{fw}/{kernel}/{fit_dtype}" in fits:
                        defaults[f"{gpu}/{fw}/{dtype}"] = kernel
                        if fit_dtype != dtype:
                            runs_as[f"{gpu}/{fw}/{dtype}"] = fit_dtype
                        break
    marlin_fp8(fits, defaults)
    model_defaults = {}
    for (gpu, fw, dtype, model_type), (owner, kernel) in MODEL_DEFAULTS.items():
        assert f"{gpu}/{owner}/{kernel}/{dtype}" in fits, (gpu, owner, kernel, dtype)
        model_defaults[f"{gpu}/{fw}/{dtype}/{model_type}"] = f"{owner}/{kernel}"
    return {
        "fits": fits,
        "defaults": defaults,
        "model_defaults": model_defaults,
        "runs_as": runs_as,
        "imbalance": imbalance,
    }


def fit_v0(src: Path, v1: dict) -> tuple[dict, dict]:
    """(fits, defaults) of vLLM V0's Triton fused MoE from vLLM PR #13932's H100 table
    (benchmark_moe.py gates randomly: uniform routing, so the expected distinct experts).

    Every row touches nearly all 256 experts (128+ tokens x top-8), so the table pins only the
    weight stream: memory_efficiency is fitted; block_m, the fixed and per-pair costs and the
    compute efficiency are the same kernel family's fit on the later vLLM (``v1``, the H100
    Triton fp8 experts), whose launch and routing kernels the rows cannot separate. H200 is
    the same GH100 die: the H100 fractions stand for it, as the h200 hardware profile's do
    (an assumption: no H200 table of that kernel)."""
    df = pd.read_csv(src / V0_TABLE)
    rows = [
        (
            int(r.k),
            int(r.n_per_tp) // 2,  # n_per_tp is the gate-up width: 2 x intermediate / tp
            float(r.batch_tokens * r.topk),
            distinct_experts(int(r.num_experts), int(r.topk), float(r.batch_tokens)),
            float(r.triton_us) * 1e-6,
            float(r.batch_tokens),
            float(r.num_experts),
        )
        for r in df.itertuples()
    ]
    compute, wbytes = DTYPE_COST["fp8_block"]
    rate_c, rate_m = rates("h100_sxm", compute)
    sms = GPUS["h100_sxm"][1]
    base = v1["H100 SXM/VLLM/vllm_fp8moe_triton_tritonexperts/fp8_block"]
    measured = np.array([r[4] for r in rows])

    def make(x: np.ndarray) -> GroupedGemmFit:
        return GroupedGemmFit(
            V0_KERNEL, base["block_m"], base["block_n"], base["fixed_s"], base["per_pair_s"],
            base["compute_efficiency"], float(1 / (1 + np.exp(-x[0]))), compute, wbytes, sms,
            small_block_m=int(base.get("small_block_m", 0)),
        )  # fmt: skip

    def resid(x: np.ndarray) -> np.ndarray:
        f = make(x)
        pred = [
            grouped_gemm_time(f, h, w, p, t, sms, rate_c, rate_m, wbytes, m, e)
            for h, w, p, t, _, m, e in rows
        ]
        return np.log(np.array(pred) / measured)

    sol = least_squares(resid, np.array([0.0]))
    err = np.exp(sol.fun) - 1
    fit = {**base, "memory_efficiency": round(float(make(sol.x).memory_efficiency), 4)}
    fit["fitted"] = "memory_efficiency (the rest: H100 SXM/VLLM/vllm_fp8moe_triton_tritonexperts)"
    print(f"{V0_FRAMEWORK}/{V0_KERNEL} n={len(rows)} {summary(err)} {fit}")
    fits, defaults = {}, {}
    for gpu in ("h100_sxm", "h200"):
        name = GPUS[gpu][0]
        entry = {**fit, "rows": len(rows), **summary(err)}
        if gpu != "h100_sxm":
            entry["transferred_from"] = GPUS["h100_sxm"][0]
        fits[f"{name}/{V0_FRAMEWORK}/{V0_KERNEL}/fp8_block"] = entry
        defaults[f"{name}/{V0_FRAMEWORK}/fp8_block"] = V0_KERNEL
    return fits, defaults


# The routing a served batch's MoE layers are timed at: AIConfigurator's MOEModel
# (ai-dynamo/aiconfigurator src/aiconfigurator/sdk/models/moe.py at 28db912) sets
# _power_law_alpha = 1.2 and ModelConfig.workload_distribution defaults to "power_law"
# (sdk/config.py), so it estimates served layers from its collectors' power_law_1.2 rows, not
# from the balanced ones the kernel constants are fitted on.
SERVED_DISTRIBUTION = "power_law_1.2"
# half-octave bins of routed pairs per expert (tokens x top-k / experts): the table's token
# counts (1, 2, 4, 8, 16, 32, 48, ...) over its seven expert counts land a few points per bin
ROUTING_BIN_EDGES = tuple(2.0 ** (i / 2) for i in range(-10, 15))
ROUTING_MIN_ROWS = 20  # a bin with fewer paired rows gives no node


def fit_routing(src: Path) -> dict[str, list[list[float]]]:
    """Per framework, the latency of SERVED_DISTRIBUTION over balanced routing at the same
    point, as nodes (pairs per expert, median ratio) by half-octave bin: vLLM and SGLang at
    moe_ep_size 1 (as their kernel fits), without the DeepSeek-V3/R1 rows (group-limited
    routing, see DEEPSEEK), over every GPU and dtype; TRT-LLM at every TP x EP. Below one pair
    per expert the skewed batch touches fewer experts (less weight read); above a few the
    hottest expert's extra rows cost more than the balanced layout's."""
    df = pd.read_csv(src / "aiconfigurator_moe_1node.csv")
    df = df[df.model_shape != DEEPSEEK]
    out = {}
    for fw, fam in df.groupby("framework"):
        if fw in ("VLLM", "SGLang"):
            fam = fam[fam.moe_ep_size == 1]
        keys = ["gpu", "kernel_source", "moe_dtype", "model_shape", "moe_tp_size", "moe_ep_size"]
        keys.append("num_tokens")
        bal = fam[fam.distribution == "balanced"].set_index(keys)
        skew = fam[fam.distribution == SERVED_DISTRIBUTION].set_index(keys).latency
        both = bal.assign(ratio=skew / bal.latency).dropna(subset=["ratio"])
        x = both.index.get_level_values("num_tokens") * both.topk / both.num_experts
        both = both.assign(x=np.asarray(x, dtype=float))
        nodes = []
        for lo, hi in itertools.pairwise(ROUTING_BIN_EDGES):
            b = both[(both.x > lo) & (both.x <= hi)]
            if len(b) >= ROUTING_MIN_ROWS:
                nodes.append([round(float(b.x.median()), 4), round(float(b.ratio.median()), 4)])
        out[str(fw)] = nodes
        print(f"routing {fw}: {nodes}")
    return out


def power_law_ratio(fam: pd.DataFrame) -> dict[str, float]:
    """Median latency of power-law routing over balanced at the same point, by EP size: what
    the hottest expert (and, under EP, the hottest GPU) costs."""
    keys = ["moe_tp_size", "moe_ep_size", "model_shape", "num_tokens"]
    bal = fam[fam.distribution == "balanced"].set_index(keys).latency
    out = {}
    for dist in ("power_law_1.01", "power_law_1.2"):
        pl = fam[fam.distribution == dist].set_index(keys).latency
        ratio = (pl / bal).dropna()
        for ep, r in ratio.groupby(level="moe_ep_size"):
            out[f"{dist}_ep{ep}"] = round(float(r.median()), 3)
    return out


# -- MLA decode attention -----------------------------------------------------------------------
def mla_make(x: np.ndarray, kernel: str) -> MlaDecodeFit:
    return MlaDecodeFit(kernel, MLA_BLOCK_M, *np.exp(x[:2]), *(1 / (1 + np.exp(-x[2:]))))


def mla_resid(x, kernel, seqs, heads, sum_kv, measured, kvb, rate_c, rate_m) -> np.ndarray:
    f = mla_make(x, kernel)
    pred = [
        mla_decode_time(f, int(b), h, s, MLA_LATENT, MLA_VALUE, kvb, rate_c, rate_m)
        for b, h, s in zip(seqs, heads, sum_kv, strict=True)
    ]
    return np.log(np.array(pred) / measured)


# the logits of the efficiencies each MLA fit starts from (sigmoid: 0.12, 0.5, 0.88 and 0.018)
MLA_STARTS = (-2.0, 0.0, 2.0, -4.0)


def fit_mla(src: Path) -> dict:
    df = pd.read_csv(src / "aiconfigurator_mla_decode_attention.csv")
    inv = {v[0]: k for k, v in GPUS.items()}
    fits = {}
    for (gpu, fw, kernel, kv), fam in df.groupby(
        ["gpu", "framework", "kernel_source", "kv_cache_dtype"]
    ):
        if gpu not in inv:
            continue
        rate_c, rate_m = rates(inv[gpu], "bf16")
        kvb = 1.0 if kv == "fp8" else 2.0
        seqs = fam.batch_size.to_numpy()
        heads = fam.num_heads.to_numpy().astype(float)
        sum_kv = (seqs * (fam.step.to_numpy() + 1)).astype(float)
        measured = fam.latency.to_numpy() * 1e-3

        data = (kernel, seqs, heads, sum_kv, measured, kvb, rate_c, rate_m)
        # from several starts, the lowest cost: the max() of the two terms has no gradient
        # for the one that never binds, so a single start at 50 % / 50 % left SGLang's fp8
        # tables FLOP-bound at 7 % of peak with the memory term stuck at its start, 60 % over
        # the measured 128-head rows (QA); the starts are fixed, so the fit is repeatable
        sol = min(
            (
                least_squares(
                    mla_resid, np.array([math.log(1e-5), math.log(1e-7), c, m]), args=data
                )
                for c in MLA_STARTS
                for m in MLA_STARTS
            ),
            key=lambda s: float(s.cost),
        )
        f = mla_make(sol.x, kernel)
        err = np.exp(sol.fun) - 1
        key = f"{gpu}/{fw}/{kv}"
        fits[key] = {
            "kernel": kernel,
            "block_m": MLA_BLOCK_M,
            "fixed_s": float(f"{f.fixed_s:.4e}"),
            "per_seq_s": float(f"{f.per_seq_s:.4e}"),
            "compute_efficiency": round(float(f.compute_efficiency), 4),
            "memory_efficiency": round(float(f.memory_efficiency), 4),
            "rows": len(fam),
            **summary(err),
        }
        print(f"{key:40s} {kernel:16s} {fits[key]}")
    return fits


# -- DeepEP ---------------------------------------------------------------------------------------
def fit_line(x: np.ndarray, t: np.ndarray, per_element: float) -> tuple[dict, np.ndarray]:
    """latency + bytes / bandwidth, least squares on the relative error (weights 1/t)."""
    a = np.stack([np.ones_like(x), x], axis=1) / t[:, None]
    (lat, inv_bw), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    f = DeepEpFit(float(lat), float(1.0 / inv_bw), per_element)
    err = np.array([deepep_time(f, xi / per_element, 1, 1) for xi in x]) / t - 1
    return {
        "latency_s": float(f"{f.latency_s:.4e}"),
        "bandwidth_bytes_s": float(f"{f.bandwidth_bytes_s:.4e}"),
        "bytes_per_element": round(per_element, 6),
        **summary(err),
    }, err


def fit_deepep(src: Path) -> dict:
    ll = pd.read_csv(src / "aiconfigurator_deepep_ll_1node.csv")
    normal = pd.read_csv(src / "aiconfigurator_deepep_normal_1node.csv")
    normal = normal[
        (normal.dispatch_sms == DEEPEP_NORMAL_SMS) & (normal.combine_sms == DEEPEP_NORMAL_SMS)
    ]
    fits: dict[str, dict] = {}
    for gpu in GPUS.values():
        g = {}
        sub = ll[ll.gpu == gpu[0]]
        elems = (sub.num_token * sub.num_topk * sub.hidden_size).to_numpy().astype(float)
        for name, col, per in (
            ("low_latency_dispatch", "dispatch_avg_t_us", FP8_DISPATCH_BYTES),
            ("low_latency_combine", "combine_avg_t_us", BF16_BYTES),
        ):
            g[name], _ = fit_line(elems * per, sub[col].to_numpy() * 1e-6, per)
            g[name]["rows"] = len(sub)
        sub = normal[normal.gpu == gpu[0]]
        elems = (sub.num_token * sub.num_topk * sub.hidden_size).to_numpy().astype(float)
        for name, cols in (
            ("normal_dispatch", ("dispatch_transmit_us", "dispatch_notify_us")),
            ("normal_combine", ("combine_transmit_us", "combine_notify_us")),
        ):
            t = (sub[cols[0]] + sub[cols[1]]).to_numpy() * 1e-6
            g[name], _ = fit_line(elems * BF16_BYTES, t, BF16_BYTES)
            g[name]["rows"] = len(sub)
        fits[gpu[0]] = g
        print(
            gpu[0],
            {
                k: (v["latency_s"], v["bandwidth_bytes_s"], v["median_abs_error"])
                for k, v in g.items()
            },
        )
    return fits


# DeepEP's README table of its low-latency kernels across servers, after PR #173 put the
# intranode peers on NVLink (H800, one ConnectX-7 400 Gb/s InfiniBand NIC per GPU; DeepSeek-V3's
# shape: 128 tokens per rank, hidden 7168, top-8; fp8 dispatch, bf16 combine)
INTERNODE_TABLE, INTERNODE_README = "deepep_readme_h800_sm100.csv", "v1_low_latency_after_pr173"


def fit_deepep_internode(src: Path) -> dict:
    """Per EP size past one server, the README's low-latency dispatch and combine times at its
    reference shape: simspec prices another token count as the GPU's own intranode fixed cost
    plus bytes at the rate that reaches the README's time (kernel_tables.deepep_fits)."""
    df = pd.read_csv(src / INTERNODE_TABLE)
    rows = df[(df.table == INTERNODE_README) & (df.ep_size > 8)]
    ref = rows.iloc[0]
    assert (rows.tokens_per_batch == ref.tokens_per_batch).all()
    assert (rows.hidden == ref.hidden).all() and (rows.topk == ref.topk).all()
    by_ep = {}
    for ep, sub in rows.groupby("ep_size"):
        phase = dict(zip(sub.phase, sub.latency_us, strict=True))
        by_ep[int(ep)] = {
            "dispatch_s": round(float(phase["dispatch"]) * 1e-6, 9),
            "combine_s": round(float(phase["combine"]) * 1e-6, 9),
        }
    print("internode low-latency", by_ep)
    return {
        "source": (
            f"../shared/calibration-data/moe-serving/{INTERNODE_TABLE}, table "
            f"{INTERNODE_README} (DeepEP README at commit {ref.readme_commit}, {ref.readme_date}; "
            f"{ref.gpu}, {ref.nic}; MIT)"
        ),
        "tokens_per_rank": int(ref.tokens_per_batch),
        "hidden": int(ref.hidden),
        "top_k": int(ref.topk),
        "ep": by_ep,
    }


# -- output ---------------------------------------------------------------------------------------
COMMAND = "python calibration/fit_moe_kernels.py --shared ../shared [--aic-core WHEEL]"
PROVENANCE = f"""\
# Written by {COMMAND}
# (re-runnable; do not edit by hand) from ../shared/{TABLES}/
# {{table}}: AIConfigurator's measured performance database (github.com/ai-dynamo/aiconfigurator
# at 095f58a, aic-core/src/aiconfigurator_core/systems/data, Apache-2.0, Copyright (c) 2025-2026
# NVIDIA CORPORATION & AFFILIATES; constants fitted here, no rows copied).
"""


def yaml_text(header: str, body: dict) -> str:
    return header + yaml.safe_dump(body, sort_keys=False, width=100)


MOE_HEADER = (
    PROVENANCE.format(table="aiconfigurator_moe_1node.csv")
    + """\
# The routed experts of one MoE layer on one GPU, as the kernel each engine runs times them
# (simspec.engine.costmodel.kernels.grouped_gemm_time): fixed_s + per_pair_s * pairs +
# max(compute, memory), compute = the output tiles (each touched expert's tokens padded to
# block_m rows, block_n columns) in waves over the GPU's SMs at compute_efficiency of the
# dtype's peak; memory = every touched expert's weights (weight_bytes each, scales included)
# at memory_efficiency of HBM bandwidth. small_block_m (the Triton fused_moe kernels' bf16
# fits, whose block_m is then get_default_config's 64): the tile rows of a batch of at most as
# many tokens as the GPU's experts, as those kernels pick their tile by the token count (the
# script's TRITON_FUSED_MOE says why). Fitted on balanced routing, least squares on
# log(predicted/measured); vLLM and SGLang rows at moe_ep_size 1 only (their EP>1 collectors
# compute non-local assignments, SOURCE.md section 6) and without their DeepSeek-V3/R1 rows
# (which touch half the experts: see DEEPSEEK in the script); TRT-LLM rows at every TP x EP.
# median_abs_error / max_abs_error: |predicted/measured - 1| over the family's rows.
# model_dtypes: "<precision>/<model_type>" -> the table's dtype where one architecture ships
# that precision in another format (gpt-oss's MXFP4 experts, read as int4-w: MODEL_DTYPES).
# defaults: the kernel each engine runs by default (calibration/fit_moe_kernels.py
# DEFAULT_KERNELS says why); a (GPU, engine, dtype) not listed keeps the roofline.
# model_defaults: "<GPU>/<engine>/<dtype>/<model_type>" -> "<framework>/<kernel>" of the fit
# that times the kernel the engine picks for that architecture at expert parallelism 1 (the
# script's MODEL_DEFAULTS cites the engine code: SGLang runs GPT-OSS with triton_kernels).
# runs_as: a (GPU, engine, dtype) whose default kernel runs at another of the table's dtypes,
# timed by that dtype's fit (MXFP4 experts x MXFP8 activations: the script's RUNS_AS says why).
# imbalance: median latency under power-law routing over balanced, by EP size (a summary;
# ``routing`` below is what runs).
# routing: per framework, nodes (routed pairs per expert, latency under power_law_1.2 routing
# over balanced) by half-octave bin, median over the framework's rows (fit_routing says which).
# A served batch's routed experts at EP 1 are timed as the fit times balanced routing (each
# expert min(E, pairs) touched) times this ratio, interpolated in log pairs per expert and held
# at the end nodes (simspec.engine.costmodel.moe_routing): AIConfigurator's MOEModel estimates
# served layers at power_law_1.2 (sdk/models/moe.py _power_law_alpha at 28db912).
# VLLM-V0 (engine profile vllm-v0): vLLM V0's Triton fused MoE, fitted to
# ../shared/calibration-data/moe-serving/vllm_pr13932_fused_moe_deepgemm_vs_triton_h100.csv
# (vLLM PR #13932, 2025-02-26, benchmark_moe.py, DeepSeek-V3 block-FP8 on H100, its triton_us
# column); H200 transferred from the H100 fit. A (GPU, dtype) with no VLLM-V0 default runs the
# vllm profile's kernel (engines.yaml: vllm-v0's base).
"""
)

AIC_MOE_HEADER = f"""\
# A100 SXM (--aic-core): aiconfigurator-core {AIC_VERSION} (the PyPI wheel, Apache-2.0,
# (c) 2025-2026 NVIDIA CORPORATION & AFFILIATES), systems/data/a100_sxm/moe/{{vllm/0.14.0,
# sglang/0.5.10, trtllm/1.0.0}}/moe_perf.parquet, NVIDIA A100-SXM4-80GB, bf16 experts,
# filtered as SOURCE.md section 6 filters the others. vLLM's and TRT-LLM's A100 tables time
# power-law routing only: their fits (marked distribution) are on the power_law_1.2 rows
# divided by the framework's routing ratio below, which the cost model multiplies back. vLLM
# runs FP8 experts on A100 weight-only through Marlin (fused_marlin_moe, W8A16): timed by the
# SGLang table's Marlin W4A16 fit (the same moe_wna16_marlin_gemm kernel) at FP8's bytes, one
# per weight plus a bf16 scale per 128 (marked transferred_from; MARLIN_FP8 says why).
"""

MLA_HEADER = (
    PROVENANCE.format(table="aiconfigurator_mla_decode_attention.csv")
    + """\
# MLA decode attention, one layer on one GPU (simspec.engine.costmodel.kernels.mla_decode_time):
# fixed_s + per_seq_s * sequences + max(latent bytes / (memory_efficiency * HBM), FLOPs over
# the query rows padded to block_m per sequence / (compute_efficiency * bf16 peak)). Keyed
# "<gpu>/<framework>/<kv cache dtype>"; kernels as the table names them (SGLang: FA3 on Hopper,
# trtllm_mla on B200). median_abs_error / max_abs_error: |predicted/measured - 1| over all rows
# (batch 1-1024, context 2-131072, 1-128 heads per GPU).
"""
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    ap.add_argument(
        "--aic-core", type=Path, help=f"the aiconfigurator-core {AIC_VERSION} wheel (A100 SXM)"
    )
    args = ap.parse_args()
    src = args.shared / TABLES
    df = pd.read_csv(src / "aiconfigurator_moe_1node.csv")
    gpus, header = dict(GPUS), MOE_HEADER
    if args.aic_core is not None:
        df = pd.concat([df, read_aic_a100_moe(args.aic_core)], ignore_index=True)
        gpus, header = {**GPUS, **A100}, MOE_HEADER + AIC_MOE_HEADER
    # the routing ratios from the shared tables alone (every GPU's served-over-balanced ratio
    # there; the A100 tables' own balanced rows, SGLang's only, do not move them)
    routing = fit_routing(src)
    moe = fit_moe(df, gpus, routing)
    v0_fits, v0_defaults = fit_v0(src, moe["fits"])
    # every table is fitted before any file is written, and each is written whole (a temporary
    # file renamed over it): a failing fit leaves the packaged data as it was (QA)
    out: dict[Path, str] = {}
    out[DATA / "moe_kernels.yaml"] = yaml_text(
        header,
        {
            "gpus": {k: {"table": v[0], "sms": v[1]} for k, v in gpus.items()},
            "engines": {**ENGINES, "vllm-v0": V0_FRAMEWORK},
            "dtypes": DTYPES,
            "model_dtypes": {f"{p}/{m}": d for (p, m), d in MODEL_DTYPES.items()},
            "defaults": {**moe["defaults"], **v0_defaults},
            "model_defaults": moe["model_defaults"],
            "runs_as": moe["runs_as"],
            "fits": {**moe["fits"], **v0_fits},
            "imbalance": moe["imbalance"],
            "routing": routing,
        },
    )
    mla = fit_mla(src)
    out[DATA / "mla_kernels.yaml"] = yaml_text(
        MLA_HEADER,
        {"gpus": {k: v[0] for k, v in GPUS.items()}, "engines": ENGINES, "fits": mla},
    )
    deepep = fit_deepep(src)
    path = DATA / "alltoall.yaml"
    text = path.read_text(encoding="utf-8").split("\n# -- DeepEP")[0].rstrip("\n") + "\n"
    table = "aiconfigurator_deepep_{ll,normal}_1node.csv"
    header = "\n# -- DeepEP --\n" + PROVENANCE.format(table=table)
    header += DEEPEP_HEADER
    section = {
        "deepep": {
            "ep": [8],
            "max_low_latency_tokens_per_rank": DEEPEP_LL_MAX_TOKENS,
            "normal_num_sms": DEEPEP_NORMAL_SMS,
            "gpus": {k: v[0] for k, v in GPUS.items()},
            "fits": deepep,
            "internode_low_latency": fit_deepep_internode(src),
        }
    }
    out[path] = text + header + yaml.safe_dump(section, sort_keys=False, width=100)
    for target, body in out.items():
        write_text_atomic(target, body)


DEEPEP_HEADER = """\
# DeepEP (github.com/deepseek-ai/DeepEP, MIT) dispatch and combine on one 8-GPU node (EP8),
# collected by AIConfigurator through SGLang 0.5.12: time = latency_s + bytes / bandwidth,
# bytes = tokens per rank x top-k x hidden x bytes_per_element (low-latency dispatch: fp8 with
# per-128 scales; combine and normal kernels: bf16). Normal kernels at num_sms 20 (DeepEP's
# Buffer default), time = transmit + notify. Which kernel runs: SGLang --moe-a2a-backend deepep
# with --deepep-mode auto takes low-latency for decode batches and normal for extend
# (DeepEPMode.resolve); vLLM --all2all-backend deepep_low_latency / deepep_high_throughput.
# simspec takes low-latency up to max_low_latency_tokens_per_rank (SGLang's
# SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK default) and normal above it. An EP size or GPU
# not listed keeps the point-to-point fit above.
# internode_low_latency: DeepEP's README times of its low-latency kernels over several servers
# (after PR #173: NVLink within a server, RDMA between; H800 with one 400 Gb/s NIC per GPU) at
# its reference shape, per EP size. An EP group of that size across servers prices a
# low-latency dispatch (combine) as its GPU's own fixed cost above plus bytes at the rate that
# reaches the README's time at the reference shape (the kernels are bandwidth-bound there:
# DeepEP prints ~40-60 GB/s of RDMA); its normal kernels at the one-server fits, never faster
# per element than the low-latency ones (kernel_tables.deepep_fits; the README's internode
# normal table is of RDMA bytes per remote server, which the routing decides). H100/H200/B200
# servers with one such NIC per GPU are assumed (transferred); simspec's tp reaches EP64.
"""


if __name__ == "__main__":
    main()
