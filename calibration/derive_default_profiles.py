"""Derive the default roofline efficiencies in simspec/data/profiles/*.yaml from timing tables.

Simple ratios, not a fit (the fit is calibration, issue 3). Run from the repository root:

    .venv/bin/python calibration/derive_default_profiles.py

Inputs (read-only, ../shared/calibration-data, see the SOURCE.md files there):
  * LLMServingSim v0 H100 per-layer tables, Llama-3.1-8B tp1/2 and Llama-3.1-70B tp1/2/4
    (layers.csv, latency in ns, kernel time only, one sequence prefilled with `input` tokens).
  * Vidur compute/<gpu>/*/mlp.csv (ms; per layer and per GPU shard) and
    network/<gpu>_dgx/all_reduce.csv (ms; `size` in bytes, NCCL kernel time).
Peaks come from simspec/data/gpus.yaml (datasheet numbers).
"""

from __future__ import annotations

import glob
from pathlib import Path
from statistics import median

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "calibration-data"
LSS = DATA / "llmservingsim-h100" / "llm_profile" / "perf_models" / "H100" / "meta-llama"
VIDUR = DATA / "vidur-profiling" / "data" / "profiling"
GPUS = yaml.safe_load((ROOT / "simspec" / "data" / "gpus.yaml").read_text())

BYTES = 2  # fp16/bf16
BIG_GEMM_BYTES = 100 * 2**20  # "big" GEMM: >= 100 MiB of weights per GPU shard (launch cost < ~5 %)
LSS_SHAPES = {  # (hidden, intermediate, heads, kv heads, vocab) from the models' config.json
    "Llama-3.1-8B": (4096, 14336, 32, 8, 128256),
    "Llama-3.1-70B": (8192, 28672, 64, 8, 128256),
}
LSS_MAX_TOKENS, VIDUR_MAX_TOKENS = 2048, 4096


def lss_gemms() -> list[dict]:
    """Linear layers of the LLMServingSim H100 tables at 1 and 2048 tokens."""
    rows = []
    for f in sorted(LSS.glob("*/tp*/layers.csv")):
        model, tp = f.parts[-3], int(f.parts[-2][2:])
        h, inter, nh, nkv, vocab = LSS_SHAPES[model]
        hd = h // nh
        shapes = {
            "q_proj": (h, nh * hd // tp),
            "k_proj": (h, nkv * hd // tp),
            "v_proj": (h, nkv * hd // tp),
            "o_proj": (nh * hd // tp, h),
            "gate_proj": (h, inter // tp),
            "up_proj": (h, inter // tp),
            "down_proj": (inter // tp, h),
            "lm_head": (h, vocab // tp),
        }
        d = pd.read_csv(f).groupby(["layer_name", "input"])["latency(ns)"].median() * 1e-9
        for op, (k, n) in shapes.items():
            rows.append(
                dict(
                    src=f"lss {model} tp{tp}",
                    op=op,
                    k=k,
                    n=n,
                    t1=d[(op, 1)],
                    tmax=d[(op, LSS_MAX_TOKENS)],
                    tokens=LSS_MAX_TOKENS,
                )
            )
    return rows


def vidur_files(gpu: str) -> list[str]:
    """Gated-MLP (Llama-style) models only; phi-2 has a plain MLP and TP1 only."""
    return [
        f
        for f in sorted(glob.glob(str(VIDUR / "compute" / gpu / "*" / "*" / "mlp.csv")))
        if "phi-2" not in f
    ]


def vidur_gemms(gpu: str) -> list[dict]:
    """QKV, O, fused gate+up and down projections at 1 and 4096 tokens, median of repeats."""
    rows = []
    for f in vidur_files(gpu):
        d = pd.read_csv(f)
        for tp, g in d.groupby("num_tensor_parallel_workers"):
            r = g.iloc[0]
            h, nh, nkv = int(r.n_embd), int(r.n_head), int(r.n_kv_head)
            inter, hd = int(r.n_expanded_embd), h // nh
            shapes = {
                "attn_pre_proj": (h, (nh + 2 * nkv) * hd // tp),
                "attn_post_proj": (nh * hd // tp, h),
                "mlp_up_proj": (h, 2 * inter // tp),
                "mlp_down_proj": (inter // tp, h),
            }
            for op, (k, n) in shapes.items():
                t = g.groupby("num_tokens")[f"time_stats.{op}.median"].median() * 1e-3  # repeats
                rows.append(
                    dict(
                        src=f"vidur {Path(f).parent.name} tp{tp}",
                        op=op,
                        k=k,
                        n=n,
                        t1=t[1],
                        tmax=t[VIDUR_MAX_TOKENS],
                        tokens=VIDUR_MAX_TOKENS,
                    )
                )
    return rows


def gemm_efficiencies(rows: list[dict], gpu: str) -> tuple[float, float, int]:
    """Median weight-streaming rate at 1 token and median FLOP rate at the largest token count."""
    big = [r for r in rows if BYTES * r["k"] * r["n"] >= BIG_GEMM_BYTES]
    bw, peak = GPUS[gpu]["hbm_bandwidth_bytes_s"], GPUS[gpu]["bf16_dense_flops"]
    mem = median(BYTES * r["k"] * r["n"] / r["t1"] / bw for r in big)
    comp = median(2 * r["tokens"] * r["k"] * r["n"] / r["tmax"] / peak for r in big)
    return mem, comp, len(big)


def elementwise_efficiency(vidur_gpu: str, gpu: str) -> float:
    """Bytes of all timed elementwise ops of a layer over their summed time, at 4096 tokens.

    Same byte counts as simspec.costmodel: RMSNorm read+write (2 x n x h), SiLU-and-mul
    (read 2i, write i), residual add (3 x n x h), RoPE on Q and K (read+write).
    Median over models and TP degrees.
    """
    effs = []
    n = VIDUR_MAX_TOKENS
    for f in vidur_files(vidur_gpu):
        d = pd.read_csv(f)
        for tp, g in d.groupby("num_tensor_parallel_workers"):
            r = g[g.num_tokens == n].median(numeric_only=True)  # some token counts are repeated
            h, hd = int(r.n_embd), int(r.n_embd) // int(r.n_head)
            q, kv = int(r.n_head) * hd // tp, int(r.n_kv_head) * hd // tp
            inter = int(r.n_expanded_embd) // tp
            nbytes = BYTES * n * (2 * h + 2 * h + 3 * inter + 3 * h + 2 * (q + kv))
            ops = ["input_layernorm", "post_attention_layernorm", "mlp_act", "add", "attn_rope"]
            secs = sum(r[f"time_stats.{op}.median"] for op in ops) * 1e-3
            effs.append(nbytes / secs / GPUS[gpu]["hbm_bandwidth_bytes_s"])
    return median(effs)


def attention_prefill_efficiency() -> tuple[float, list[float]]:
    """LLMServingSim `attn` rows at 2048 tokens (causal self-attention, no KV): FLOP/s / peak."""
    effs = []
    n = LSS_MAX_TOKENS
    for f in sorted(LSS.glob("*/tp*/layers.csv")):
        model, tp = f.parts[-3], int(f.parts[-2][2:])
        h, _, nh, _, _ = LSS_SHAPES[model]
        q_dim = nh * (h // nh) // tp
        d = pd.read_csv(f)
        t = d[(d.layer_name == "attn") & (d.input == n)]["latency(ns)"].iloc[0] * 1e-9
        flops = 4.0 * q_dim * n * (n + 1) / 2  # QK^T and PV over the causal triangle
        effs.append(flops / t / GPUS["h100_sxm"]["bf16_dense_flops"])
    return median(effs), effs


def allreduce(network: str, gpu: str) -> tuple[float, float, dict]:
    """Latency: median NCCL time for messages <= 1 MiB (flat region). Bandwidth: ring bus bytes
    2(n-1)/n * size over (time - latency) for messages >= 60 MiB, over the per-direction NVLink
    bandwidth (the alpha-beta form simspec.costmodel uses). Medians per worker count, then over
    the single-node worker counts."""
    d = pd.read_csv(VIDUR / "network" / network / "all_reduce.csv")
    d = d[d.num_workers == d.devices_per_node]
    link = GPUS[gpu]["interconnect_bandwidth_bytes_s"]
    per_n = {}
    for n, g in d.groupby("num_workers"):
        t = g.groupby("size")["time_stats.all_reduce.median"].median() * 1e-3
        lat = float(t[t.index <= 2**20].median())
        big = t[t.index >= 60 * 2**20]
        bus = 2 * (n - 1) / n * big.index.to_numpy()
        eff = float(median(bus / (big.to_numpy() - lat) / link))
        eff_raw = float(median(bus / big.to_numpy() / link))
        per_n[int(n)] = (lat, eff, eff_raw)
    lat = median(v[0] for v in per_n.values())
    eff = median(v[1] for v in per_n.values())
    return lat, eff, per_n


def main() -> None:
    for gpu, rows in (
        ("h100_sxm", lss_gemms() + vidur_gemms("h100")),
        ("a100_80gb", vidur_gemms("a100")),
    ):
        mem, comp, nbig = gemm_efficiencies(rows, gpu)
        mib = BIG_GEMM_BYTES / 2**20
        print(f"[{gpu}] big GEMMs (>= {mib:.0f} MiB/shard): {nbig} of {len(rows)}")
        for src in ("lss", "vidur"):
            sub = [r for r in rows if r["src"].startswith(src)]
            if sub:
                m, c, k = gemm_efficiencies(sub, gpu)
                print(
                    f"  {src:5s}: {k:3d} big GEMMs  mem_eff@1tok={m:.3f}  compute_eff@max={c:.3f}"
                )
        print(f"  gemm_memory_efficiency        = {mem:.3f}")
        print(f"  gemm_compute_efficiency       = {comp:.3f}")
        vid = "h100" if gpu == "h100_sxm" else "a100"
        print(f"  elementwise_memory_efficiency = {elementwise_efficiency(vid, gpu):.3f}")
        lat, eff, per_n = allreduce(f"{vid}_dgx", gpu)
        for n, (lat_n, e, er) in per_n.items():
            print(
                f"    all-reduce n={n}: latency={lat_n * 1e6:.1f} us  bw_eff={e:.3f} (without "
                f"subtracting latency {er:.3f})"
            )
        print(f"  allreduce_latency_s           = {lat:.2e}")
        print(f"  allreduce_bandwidth_efficiency= {eff:.3f}")
    att, effs = attention_prefill_efficiency()
    print(f"[h100_sxm] attention prefill @2048 tok per file: {[round(float(e), 3) for e in effs]}")
    print(f"  attention_compute_efficiency  = {att:.3f}")


if __name__ == "__main__":
    main()
