"""How well simspec's MoE cost predicts measured expert timings on H100 (nothing is fitted here:
the GEMM constants are the packaged h100_sxm profile's, fitted on dense Llama/Vidur layers).

Two held-out tables in ../shared/calibration-data/llmservingsim-h100 (SOURCE.md there):

1. ``llm_profile/perf_models/H100/mistralai/Mixtral-8x7B-v0.1/tp1/layers.csv``: one expert's
   ``expert.w1``/``expert.w3``/``expert.w2`` (HF eager nn.Linear, fp16) at 1..2048 tokens.
   Compared with :meth:`RooflineCostModel.gemm_time` for the same GEMM: does the dense GEMM
   roofline carry over to an expert's shapes? (The tp2/tp4 files time the same whole experts,
   within 3 %: that profiler slices attention and dense MLPs, not experts, so they add nothing.)
2. ``profiler/perf/H100/Qwen/Qwen3.6-35B-A3B/bf16/tp1/moe.csv``: vLLM 0.19's fused MoE of
   Qwen3.6-35B-A3B (hidden 2048, 256 experts of 512, top 8: the table's ``activated_experts``
   reach 256 and the per-expert streaming time, ~1.95 us for 3 x 2048 x 512 bf16 weights, fits a
   512 width) by tokens and distinct experts touched, eager mode, one measured iteration.
   Compared with :meth:`RooflineCostModel.grouped_experts_time` (pairs = tokens x 8, touched =
   activated_experts) plus the router GEMM and the MoE layer's small kernels; the table does not
   say whether the shared expert (512 wide) is inside the timed region, so both are printed.

    python calibration/compare_moe.py [SHARED_DIR]
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path

from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.models import ModelShape
from simspec.engine.costmodel import MOE_KERNELS_PER_LAYER, RooflineCostModel

QWEN36 = ModelShape(
    id="qwen3.6-35b-a3b-moe-layer",
    model_type="qwen3_moe",
    hidden_size=2048,
    intermediate_size=512,
    num_hidden_layers=1,
    num_attention_heads=16,
    num_key_value_heads=2,
    head_dim=256,
    vocab_size=248320,
    num_experts=256,
    num_experts_per_tok=8,
    moe_intermediate_size=512,
    moe_layers=(0,),
)
MIXTRAL = {"hidden": 4096, "inter": 14336}


def cost(tp: int = 1) -> RooflineCostModel:
    gpu = load_gpu("h100_sxm")
    return RooflineCostModel(gpu, load_profile("h100_sxm"), load_engine("vllm"), tp=tp)


def summary(errors: list[float]) -> str:
    mags = sorted(abs(e) for e in errors)
    return (
        f"median |err| {statistics.median(mags):.1%}, p90 {mags[int(0.9 * (len(mags) - 1))]:.1%}, "
        f"mean signed {statistics.fmean(errors):+.1%} over {len(errors)} rows"
    )


def mixtral(shared: Path) -> None:
    base = shared / "calibration-data/llmservingsim-h100/llm_profile/perf_models/H100"
    for tp in (1,):
        path = base / f"mistralai/Mixtral-8x7B-v0.1/tp{tp}/layers.csv"
        c, h, i = cost(tp), MIXTRAL["hidden"], MIXTRAL["inter"] // tp
        shapes = {"expert.w1": (h, i), "expert.w3": (h, i), "expert.w2": (i, h)}
        by_regime: dict[str, list[float]] = {"<=64 tokens": [], ">64 tokens": []}
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                if row["layer_name"] not in shapes:
                    continue
                n = int(row["input"])
                measured = int(row["latency(ns)"]) * 1e-9
                predicted = c.gemm_time(n, *shapes[row["layer_name"]])
                by_regime["<=64 tokens" if n <= 64 else ">64 tokens"].append(
                    predicted / measured - 1
                )
        for regime, errs in by_regime.items():
            print(f"Mixtral expert GEMMs, tp={tp}, {regime}: {summary(errs)}")


def qwen36(shared: Path) -> None:
    path = shared / (
        "calibration-data/llmservingsim-h100/profiler/perf/H100/Qwen/Qwen3.6-35B-A3B/bf16/tp1/"
        "moe.csv"
    )
    c = cost(1)
    h, k = QWEN36.hidden_size, QWEN36.num_experts_per_tok
    small = MOE_KERNELS_PER_LAYER * c.profile["elementwise_latency_s"]
    for with_shared in (False, True):
        rows: dict[str, list[float]] = {"weight-bound (tokens <= 64)": [], "tokens > 64": []}
        detail = []
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                n, touched = int(row["tokens"]), int(row["activated_experts"])
                measured = float(row["time_us"]) * 1e-6
                predicted = c.grouped_experts_time(QWEN36, float(n * k), float(touched))
                predicted += c.gemm_time(n, h, QWEN36.num_experts) + small
                if with_shared:
                    predicted += c.gemm_time(n, h, 2 * 512) + c.gemm_time(n, 512, h)
                err = predicted / measured - 1
                rows["weight-bound (tokens <= 64)" if n <= 64 else "tokens > 64"].append(err)
                detail.append((n, touched, measured * 1e6, predicted * 1e6))
        label = "with" if with_shared else "without"
        for regime, errs in rows.items():
            print(f"Qwen3.6 fused MoE, {label} the shared expert, {regime}: {summary(errs)}")
        if not with_shared:
            for n, touched, m, p in detail:
                if touched in (8, 64, 256) and n in (1, 8, 32, 256, 1024):
                    print(
                        f"  tokens {n:5d}, experts {touched:3d}: measured {m:6.1f} us, "
                        f"predicted {p:6.1f} us"
                    )


def main() -> None:
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[2] / "shared"
    mixtral(shared)
    qwen36(shared)


if __name__ == "__main__":
    main()
