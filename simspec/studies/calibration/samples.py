"""Timing tables -> per-operator samples the cost model can be fitted to.

Every loader returns rows of one schema (:data:`COLUMNS`): which operator family (``gemm``,
``attention``, ``elementwise``, ``allreduce``), the work it did as the cost model counts it
(:func:`simspec.engine.costmodel.gemm_work` and friends, so fit and simulation agree), and the
measured
seconds. ``group`` names what a held-out split may leave out (a model, a TP degree, a worker
count).

Known layouts, found by :func:`discover` under a directory:

* Vidur operator profiles (``compute/<gpu>/<org>/<model>/mlp.csv``, ms, per layer and GPU shard;
  ``network/<gpu>_dgx/all_reduce.csv``, ms, NCCL kernel time): github.com/microsoft/vidur.
* LLMServingSim v0 per-layer tables (``perf_models/H100/<org>/<model>/tp<N>/layers.csv``, ns,
  summed GPU kernel time): GEMM rows only; its norm/activation rows are HF eager multi-kernel
  modules and its attention kernel is a non-production FA2 varlen path (see its SOURCE.md).
* LLMServingSim vLLM-0.19 profiles (``profiler/perf/H100/<org>/<model>/bf16/tp<N>/``, µs):
  ``attention.csv`` (production vLLM attention kernel) and the ``lm_head`` rows of
  ``per_sequence.csv``.
* Our own harness CSV (``calibration/time_forward.py``), recognised by its ``kind`` column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from simspec.catalog.models import BYTES_PER_PARAM
from simspec.engine.costmodel import attention_work, gemm_work
from simspec.errors import InputError

# Where each table layout comes from (the SOURCE.md files in shared/calibration-data).
KNOWN_SOURCES = {
    "vidur": "github.com/microsoft/vidur at 7d47513363ec447a741ac5e47241580b47724fbf (MIT)",
    "llmservingsim-v0": "github.com/casys-kaist/LLMServingSim at "
    "9e3f0ece7cab1393f176a74d38601ef07103f2d3 (MIT), v0 profiler perf_models",
    "llmservingsim-vllm": "github.com/casys-kaist/LLMServingSim pull request #34 at "
    "5f18d86bf100a3d50b012693c2efd1064268ab9a (MIT), vLLM 0.19 profiler",
}

COLUMNS = [
    "operator",
    "op",
    "source",
    "model",
    "tp",
    "group",
    "tokens",
    "flops",
    "bytes",
    "time_s",
    "decode_only",  # attention over one new token per sequence (a different kernel path)
]


@dataclass(frozen=True)
class Shape:
    """The few shape numbers the tables need (per-GPU widths come from these and tp)."""

    hidden: int
    inter: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    gated: bool = True

    def widths(self, tp: int) -> tuple[int, int, int]:
        """Per-GPU query width, KV width (KV heads replicate below one per GPU), MLP width."""
        kv = max(self.kv_heads // tp, 1) * self.head_dim
        return self.heads * self.head_dim // tp, kv, self.inter // tp


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


def _frame(rows: dict[str, object]) -> pd.DataFrame:
    df = pd.DataFrame({"decode_only": False, **rows})
    return df[COLUMNS]


def _gemm_rows(op, source, model, tp, m, k, n, time_s) -> pd.DataFrame:
    m = np.asarray(m, dtype=float)
    flops, nbytes = gemm_work(m, float(k), float(n))
    return _frame(
        dict(
            operator="gemm",
            op=op,
            source=source,
            model=model,
            tp=tp,
            group=model,
            tokens=m,
            flops=flops,
            bytes=nbytes,
            time_s=np.asarray(time_s, float),
        )
    )


def vidur_compute(path: Path) -> pd.DataFrame:
    """GEMM and elementwise samples from one Vidur ``mlp.csv`` (median of repeated rows)."""
    d = pd.read_csv(path)
    model = path.parent.name
    source = f"vidur:{'/'.join(path.parts[-5:])}"
    out = []
    for tp, g in d.groupby("num_tensor_parallel_workers"):
        tp = int(tp)
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
            out.append(_gemm_rows(op, source, model, tp, tokens, k, n, t))
        for op, per_token in VIDUR_ELEMENTWISE.items():
            col = f"time_stats.{op}.median"
            if col not in g:  # phi-2 has no post_attention_layernorm
                continue
            nbytes = BYTES_PER_PARAM * tokens * per_token(h, q, kv, i)
            out.append(
                _frame(
                    dict(
                        operator="elementwise",
                        op=op,
                        source=source,
                        model=model,
                        tp=tp,
                        group=model,
                        tokens=tokens,
                        flops=0.0,
                        bytes=nbytes,
                        time_s=g[col].to_numpy() * 1e-3,
                    )
                )
            )
    return pd.concat(out, ignore_index=True)


def vidur_allreduce(path: Path) -> pd.DataFrame:
    """Single-node NCCL all-reduce samples; ``bytes`` is the ring's bus bytes 2(n-1)/n * size."""
    d = pd.read_csv(path)
    d = d[d.num_workers == d.devices_per_node]
    g = d.groupby(["num_workers", "size"])["time_stats.all_reduce.median"].median().reset_index()
    n = g.num_workers.to_numpy(dtype=float)
    size = g["size"].to_numpy(dtype=float)
    return _frame(
        dict(
            operator="allreduce",
            op="all_reduce",
            source=f"vidur:{'/'.join(path.parts[-3:])}",
            model="",
            tp=g.num_workers.astype(int),
            group=[f"n={int(x)}" for x in n],
            tokens=size,
            flops=0.0,
            bytes=2 * (n - 1) / n * size,
            time_s=g["time_stats.all_reduce.median"].to_numpy() * 1e-3,
        )
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
    d = pd.read_csv(path)
    keep = np.unique(np.geomspace(1, d.input.max(), max_points).round().astype(int))
    d = d[d.input.isin(keep)].groupby(["layer_name", "input"])["latency(ns)"].median()
    source = f"llmservingsim-v0:{'/'.join(path.parts[-4:])}"
    out = []
    for op, (k, n) in dims.items():
        s = d[op]
        out.append(_gemm_rows(op, source, model, tp, s.index.to_numpy(), k, n, s.to_numpy() * 1e-9))
    return pd.concat(out, ignore_index=True)


def vllm_profile(folder: Path, shape: Shape = QWEN36) -> pd.DataFrame:
    """Attention and lm_head samples from one LLMServingSim vLLM-profiler ``tp<N>`` folder."""
    tp = int(folder.name[2:])
    model = folder.parts[-3]
    source = f"llmservingsim-vllm:{'/'.join(folder.parts[-5:])}"
    out = []
    per_seq = pd.read_csv(folder / "per_sequence.csv")
    lm = per_seq[per_seq.layer == "lm_head"]
    out.append(
        _gemm_rows(
            "lm_head",
            source,
            model,
            tp,
            lm.sequences,
            shape.hidden,
            shape.vocab // tp,
            lm.time_us * 1e-6,
        )
    )
    a = pd.read_csv(folder / "attention.csv")
    c, kp = a.prefill_chunk.to_numpy(float), a.kv_prefill.to_numpy(float)
    nd, kd = a.n_decode.to_numpy(float), a.kv_decode.to_numpy(float)
    tokens = c + nd
    q, kv, _ = shape.widths(tp)
    flops, nbytes = attention_work(q, kv, tokens, c * c + nd, c * kp + nd * kd, kp + nd * kd)
    op = np.where(c > 0, np.where(nd > 0, "mixed", "prefill"), "decode")
    # group by kind too: the 1440 mixed prefill+decode rows must not drown the 80 decode ones
    df = _frame(
        dict(
            decode_only=(c == 0),
            operator="attention",
            op=op,
            source=source,
            model=model,
            tp=tp,
            group=[f"{model} tp{tp} {o}" for o in op],
            tokens=tokens,
            flops=flops,
            bytes=nbytes,
            time_s=a.time_us.to_numpy() * 1e-6,
        )
    )
    out.append(df[df.tokens > 0])
    return pd.concat(out, ignore_index=True)


HARNESS_KINDS = {
    "gemm": "gemm",
    "lm_head": "gemm",
    "attention": "attention",
    "elementwise": "elementwise",
}
HARNESS_ELEMENTWISE = {  # bytes per token, as in VIDUR_ELEMENTWISE (``add`` left out likewise)
    "rmsnorm": lambda h, q, kv, i: 2 * h,
    "rope": lambda h, q, kv, i: 2 * (q + kv),
    "silu_mul": lambda h, q, kv, i: 3 * i,
}


HARNESS_COLUMNS = (
    "kind",
    "op",
    "num_seqs",
    "q_per_seq",
    "context_len",
    "num_tokens",
    "m",
    "k",
    "n",
    "time_ms_median",
    "tp",
    "model",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
)


def harness_csv(path: Path) -> pd.DataFrame:
    """Per-operator samples from a ``calibration/time_forward.py`` CSV (its whole-step rows are
    a held-out check, :func:`simspec.studies.calibration.report.forward_check`, not fit samples)."""
    d = pd.read_csv(path)
    missing = [c for c in HARNESS_COLUMNS if c not in d.columns]
    if missing:
        raise InputError("timings", f"{path} lacks columns {', '.join(missing)}")
    out = []
    for line, r in d[d.kind.isin(HARNESS_KINDS)].iterrows():
        try:
            sample = _harness_sample(r, path)
        except (ValueError, TypeError, ZeroDivisionError) as exc:
            raise InputError("timings", f"{path} row {line + 1}: {exc}") from None
        if sample is not None:
            out.append(sample)
    if not out:
        raise InputError("timings", f"{path} has no per-operator rows (gemm, attention, ...)")
    return _frame({c: [row[c] for row in out] for c in COLUMNS})


def _harness_sample(r: pd.Series, path: Path) -> dict[str, object] | None:
    tp = int(r.tp)
    shape = Shape(
        int(r.hidden_size),
        int(r.intermediate_size),
        int(r.num_attention_heads),
        int(r.num_key_value_heads),
        int(r.head_dim),
        int(r.vocab_size),
    )
    q, kv, i = shape.widths(tp)
    t = float(r.time_ms_median) * 1e-3
    if not t > 0:
        raise ValueError(f"time_ms_median must be > 0, got {r.time_ms_median}")
    kind = HARNESS_KINDS[r.kind]
    if kind == "gemm":
        flops, nbytes = gemm_work(float(r.m), float(r.k), float(r.n))
    elif kind == "attention":
        b, qs, ctx = float(r.num_seqs), float(r.q_per_seq), float(r.context_len)
        flops, nbytes = attention_work(q, kv, b * qs, b * qs * qs, b * qs * ctx, b * ctx)
    else:
        per_token = HARNESS_ELEMENTWISE.get(r.op)
        if per_token is None:  # the residual add: fused into RMSNorm in vLLM
            return None
        flops = 0.0
        nbytes = BYTES_PER_PARAM * float(r.num_tokens) * per_token(shape.hidden, q, kv, i)
    if not (np.isfinite(flops) and np.isfinite(nbytes) and nbytes > 0):
        raise ValueError("shape columns give no work (empty or non-positive sizes)")
    return dict(
        operator=kind,
        op=r.op,
        source=f"harness:{path.name}",
        model=r.model,
        tp=tp,
        group=f"{r.model} {r.op}",
        tokens=float(r.num_tokens),
        flops=flops,
        bytes=nbytes,
        time_s=t,
        decode_only=kind == "attention" and int(r.q_per_seq) == 1,
    )


# Which GPU a shared-data path belongs to: the directory names the tables use.
GPU_DIRS = {
    "h100_sxm": ("h100", "H100", "h100_dgx"),
    "a100_80gb": ("a100", "a100_dgx"),
    "h200": ("h200", "H200"),
}


def is_harness_csv(path: Path) -> bool:
    with path.open(encoding="utf-8") as f:
        return f.readline().startswith("kind,")


def discover(paths: list[Path], gpu: str) -> tuple[pd.DataFrame, list[str]]:
    """All samples for ``gpu`` under ``paths`` (files or directories) and the files used."""
    frames, used = [], []
    dirs = GPU_DIRS.get(gpu, (gpu,))
    for root in paths:
        if not root.exists():
            raise InputError("timings", f"{root} does not exist")
        files = [root] if root.is_file() else sorted(root.rglob("*.csv"))
        for f in files:
            loaded = _load_known(f, dirs, explicit=root.is_file())
            if loaded is not None and not loaded.empty:
                frames.append(loaded)
                used.append(str(f))
    if not frames:
        raise InputError(
            "timings", f"no timing tables for GPU {gpu!r} under {', '.join(map(str, paths))}"
        )
    return pd.concat(frames, ignore_index=True), used


def _load_known(f: Path, gpu_dirs: tuple[str, ...], explicit: bool) -> pd.DataFrame | None:
    parts = set(f.parts)
    on_gpu = explicit or bool(parts & set(gpu_dirs))
    if f.suffix == ".csv" and is_harness_csv(f):
        return harness_csv(f)
    if not on_gpu:
        return None
    if f.name == "mlp.csv" and "compute" in parts:
        # phi-2 is not Llama-style (plain MLP, partial rotary): its byte counts would be wrong
        return None if "phi-2" in parts else vidur_compute(f)
    if f.name == "all_reduce.csv" and any(re.fullmatch(r".+_dgx", p) for p in f.parts):
        return vidur_allreduce(f)
    if f.name == "layers.csv" and "perf_models" in parts:
        return lss_layers(f)
    if f.name == "attention.csv" and "perf" in parts and "bf16" in parts:
        if f.parent.parts[-3] == "Qwen3.6-35B-A3B":
            return vllm_profile(f.parent)
    if explicit:
        raise InputError("timings", f"{f}: not a timing table simspec knows")
    return None
