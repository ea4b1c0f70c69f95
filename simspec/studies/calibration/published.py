"""Published operator timing tables -> samples: Vidur's profiles and LLMServingSim's.

* Vidur operator profiles (``compute/<gpu>/<org>/<model>/mlp.csv``, ms, per layer and GPU shard;
  ``network/<gpu>_dgx/all_reduce.csv``, ms, NCCL kernel time): github.com/microsoft/vidur.
* LLMServingSim v0 per-layer tables (``perf_models/H100/<org>/<model>/tp<N>/layers.csv``, ns,
  summed GPU kernel time): GEMM rows only; its norm/activation rows are HF eager multi-kernel
  modules and its attention kernel is a non-production FA2 varlen path (see its SOURCE.md).
* LLMServingSim vLLM-0.19 profiles (``profiler/perf/H100/<org>/<model>/bf16/tp<N>/``, µs):
  ``attention.csv`` (production vLLM attention kernel) and the ``lm_head`` rows of
  ``per_sequence.csv``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simspec.catalog.models import BYTES_PER_PARAM
from simspec.engine.costmodel import attention_work
from simspec.studies.calibration.schema import COLUMNS, Origin, Shape, read_table

# Where each table layout comes from (the SOURCE.md files in shared/calibration-data).
KNOWN_SOURCES = {
    "vidur": "github.com/microsoft/vidur at 7d47513363ec447a741ac5e47241580b47724fbf (MIT)",
    "llmservingsim-v0": "github.com/casys-kaist/LLMServingSim at "
    "9e3f0ece7cab1393f176a74d38601ef07103f2d3 (MIT), v0 profiler perf_models",
    "llmservingsim-vllm": "github.com/casys-kaist/LLMServingSim pull request #34 at "
    "5f18d86bf100a3d50b012693c2efd1064268ab9a (MIT), vLLM 0.19 profiler",
}

# Shapes the table files do not carry, from each model's Hugging Face config.json.
LSS_SHAPES = {
    # meta-llama/Llama-3.1-8B and -70B config.json
    "Llama-3.1-8B": Shape(4096, 14336, 32, 8, 128, 128256),
    "Llama-3.1-70B": Shape(8192, 28672, 64, 8, 128, 128256),
}
# Qwen3.6-35B-A3B (model_type qwen3_5_moe): hidden 2048, full-attention layers with 16 query
# heads, 2 KV heads (llmservingsim-h100/SOURCE.md) of head_dim 256 and vocab 248320 (public
# qwen3_5_moe configs; vocab also in SOURCE.md's lm_head table). Only attention and lm_head are
# used: its MLP is MoE and its other layers are linear attention.
QWEN36 = Shape(2048, 512, 16, 2, 256, 248320)

# Vidur's mlp.csv timing groups -> our operator family and, for elementwise ops, the bytes the
# kernel reads and writes per token (h: hidden, q/kv: per-GPU widths, i: per-GPU MLP width).
VIDUR_GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
# Vidur times the residual ``add`` as its own ~1 µs kernel; vLLM fuses it into RMSNorm
# (simspec.engine.costmodel.ELEMENTWISE_KERNELS_PER_LAYER), so it is left out of the per-kernel fit.
VIDUR_ELEMENTWISE = {
    "input_layernorm": lambda h, q, kv, i: 2 * h,
    "post_attention_layernorm": lambda h, q, kv, i: 2 * h,
    "attn_rope": lambda h, q, kv, i: 2 * (q + kv),
    "mlp_act": lambda h, q, kv, i: 3 * i,
}


def vidur_compute(path: Path) -> pd.DataFrame:
    """GEMM and elementwise samples from one Vidur ``mlp.csv`` (median of repeated rows)."""
    d = read_table(path)
    for col in [c for c in d.columns if c.startswith("time_stats.")]:
        # a cell that is not a number is named, not the column left out of the median (QA: one
        # text cell dropped every mlp_act sample without a word)
        values = pd.to_numeric(d[col], errors="coerce")
        bad = values.isna() & d[col].notna()
        if bad.any():
            row = int(bad.to_numpy().argmax())
            raise ValueError(f"{col}, row {row + 1}: {d[col].iloc[row]!r} is not a number")
        d[col] = values
    if d.empty:  # QA: "(No objects to concatenate)"
        raise ValueError("the table has no rows")
    workers = pd.to_numeric(d["num_tensor_parallel_workers"], errors="coerce")
    if not (workers >= 1).all():  # QA: "(integer division or modulo by zero)"
        row = int((~(workers >= 1)).to_numpy().argmax())
        raise ValueError(
            f"num_tensor_parallel_workers, row {row + 1}: "
            f"{str(d['num_tensor_parallel_workers'].iloc[row])!r} is not a count of GPUs (1 or "
            "more)"
        )
    model = path.parent.name
    source = f"vidur:{'/'.join(path.parts[-5:])}"
    out = []
    for tp, g in d.groupby("num_tensor_parallel_workers"):
        tp = int(tp)
        origin = Origin(source, model, tp)
        g = g.groupby("num_tokens").median(numeric_only=True)
        r = g.iloc[0]
        shape = Shape(
            int(r.n_embd),
            int(r.n_expanded_embd),
            int(r.n_head),
            int(r.n_kv_head),
            int(r.n_embd) // int(r.n_head),
            int(r.vocab_size),
            bool(r.use_gated_mlp),
        )
        q, kv, i = shape.widths(tp)
        h = shape.hidden
        dims = {
            "attn_pre_proj": (h, q + 2 * kv),
            "attn_post_proj": (q, h),
            "mlp_up_proj": (h, (2 if shape.gated else 1) * i),
            "mlp_down_proj": (i, h),
        }
        tokens = g.index.to_numpy(dtype=float)
        for op, (k, n) in dims.items():
            t = g[f"time_stats.{op}.median"].to_numpy() * 1e-3
            out.append(origin.gemm(op, tokens, k, n, t))
        for op, per_token in VIDUR_ELEMENTWISE.items():
            col = f"time_stats.{op}.median"
            if col not in g:  # phi-2 has no post_attention_layernorm
                continue
            nbytes = BYTES_PER_PARAM * tokens * per_token(h, q, kv, i)
            t = g[col].to_numpy() * 1e-3
            out.append(origin.samples("elementwise", op, tokens, 0.0, nbytes, t))
    return pd.concat(out, ignore_index=True)


def vidur_allreduce(path: Path) -> pd.DataFrame:
    """Single-node NCCL all-reduce samples; ``bytes`` is the ring's bus bytes 2(n-1)/n * size."""
    d = read_table(path)
    d = d[d.num_workers == d.devices_per_node]
    g = d.groupby(["num_workers", "size"])["time_stats.all_reduce.median"].median().reset_index()
    n = g.num_workers.to_numpy(dtype=float)
    size = g["size"].to_numpy(dtype=float)
    origin = Origin(f"vidur:{'/'.join(path.parts[-3:])}", "", g.num_workers.astype(int))
    return origin.samples(
        "allreduce",
        "all_reduce",
        size,
        0.0,
        2 * (n - 1) / n * size,
        g["time_stats.all_reduce.median"].to_numpy() * 1e-3,
        group=[f"n={int(x)}" for x in n],
    )


def lss_layers(path: Path, max_points: int = 64) -> pd.DataFrame:
    """GEMM samples (q/k/v/o/gate/up/down/lm_head) from an LLMServingSim v0 ``layers.csv``.

    The 2048 token counts per layer are thinned to ``max_points`` log-spaced ones so this
    source does not outweigh the others in the fit.
    """
    model, tp = path.parts[-3], int(path.parts[-2][2:])
    shape = LSS_SHAPES.get(model)
    if shape is None:  # Mixtral: MoE experts, not a Llama-style MLP
        return pd.DataFrame(columns=COLUMNS)
    q, kv, i = shape.widths(tp)
    h = shape.hidden
    dims = {
        "q_proj": (h, q),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
        "lm_head": (h, shape.vocab // tp),
    }
    d = read_table(path)
    top = float(d.input.max())
    if not 1 <= top <= 2**31 - 1:  # token counts are int32; past them the cast to int wraps
        raise ValueError(f"input must hold token counts in [1, 2**31 - 1] (the largest is {top})")
    counts = np.unique(d.input.to_numpy())
    if len(counts) <= max_points:  # few already: every one (QA: a power-of-two table lost half)
        keep = counts
    else:  # the log-spaced counts, each the nearest the table has where it lacks that one
        targets = np.unique(np.geomspace(1, top, max_points).round().astype(int))
        there = np.isin(targets, counts)
        gaps = np.log(targets[~there])[:, None] - np.log(counts.astype(float))[None, :]
        keep = np.union1d(targets[there], counts[np.abs(gaps).argmin(axis=1)])
    d = d[d.input.isin(keep)].groupby(["layer_name", "input"])["latency(ns)"].median()
    origin = Origin(f"llmservingsim-v0:{'/'.join(path.parts[-4:])}", model, tp)
    out = []
    for op, (k, n) in dims.items():
        s = d[op]
        out.append(origin.gemm(op, s.index.to_numpy(), k, n, s.to_numpy() * 1e-9))
    return pd.concat(out, ignore_index=True)


def vllm_profile(folder: Path, shape: Shape = QWEN36) -> pd.DataFrame:
    """Attention and lm_head samples from one LLMServingSim vLLM-profiler ``tp<N>`` folder."""
    tp = int(folder.name[2:])
    model = folder.parts[-3]
    origin = Origin(f"llmservingsim-vllm:{'/'.join(folder.parts[-5:])}", model, tp)
    per_seq = read_table(folder / "per_sequence.csv")
    lm = per_seq[per_seq.layer == "lm_head"]
    head = origin.gemm("lm_head", lm.sequences, shape.hidden, shape.vocab // tp, lm.time_us * 1e-6)
    a = read_table(folder / "attention.csv")
    c, kp = a.prefill_chunk.to_numpy(float), a.kv_prefill.to_numpy(float)
    nd, kd = a.n_decode.to_numpy(float), a.kv_decode.to_numpy(float)
    tokens = c + nd
    q, kv, _ = shape.widths(tp)
    flops, nbytes = attention_work(q, kv, tokens, c * c + nd, c * kp + nd * kd, kp + nd * kd)
    op = np.where(c > 0, np.where(nd > 0, "mixed", "prefill"), "decode")
    # group by kind too: the 1440 mixed prefill+decode rows must not drown the 80 decode ones
    attention = origin.samples(
        "attention",
        op,
        tokens,
        flops,
        nbytes,
        a.time_us.to_numpy() * 1e-6,
        group=[f"{model} tp{tp} {o}" for o in op],
        decode_only=(c == 0),
    )
    return pd.concat([head, attention[attention.tokens > 0]], ignore_index=True)
