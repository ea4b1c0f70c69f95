#!/usr/bin/env python3
"""Time forward passes of a Llama-style decoder with random weights, for simspec calibration.

Builds the model from a Hugging Face-style config (or a built-in shape) with random weights, so
nothing is downloaded, and times per-operator kernels, whole decode / verification / prefill
steps and an EAGLE-style draft head on one GPU (or on the CPU for smoke tests). Needs only
Python 3.10 or newer, its standard library, torch and numpy: copy this one file to a bare CUDA
machine and run it (an older Python is refused before anything is timed).

    python calibration/time_forward.py --model llama-3.1-8b --cuda-graphs --out h100.csv
    python calibration/time_forward.py --model tiny --device cpu --out /tmp/t.csv

How it measures: CUDA events around each call (``time.perf_counter`` on the CPU), ``--warmup``
untimed calls then ``--repeats`` timed ones, median / p10 / p90 in milliseconds, all under
``torch.inference_mode()``. Whole-model rows build ``--layers`` decoder layers and scale the
layer part to ``num_hidden_layers`` (embedding, final norm and LM head are counted once).
``--tp N`` divides heads, KV heads (at least 1), intermediate size and vocabulary by N on one
GPU; no collectives are timed. Attention is PyTorch SDPA over a dense KV cache, not the paged
FlashAttention of vLLM or SGLang, so its times differ from a production engine's.

CSV columns (one row per timed case, in this order):

  kind                  gemm | lm_head | attention | elementwise | forward | prefill | draft_head
  op                    gemm: qkv_proj, o_proj, gate_up_proj, down_proj; lm_head: lm_head;
                        attention and forward: decode (q=1), chain, tree (attention also prefill);
                        elementwise: rmsnorm, silu_mul, rope, add; prefill: prefill;
                        draft_head: eagle_head
  num_seqs              sequences in the batch (attention, forward, prefill, draft_head)
  q_per_seq             new tokens per sequence: 1 decode, >1 verification or prefill chunk
  context_len           tokens already in each sequence's KV cache before this step
  num_tokens            tokens the op processes (forward: num_seqs * q_per_seq)
  tree                  1 when the q_per_seq tokens form a token tree (tree attention mask)
  m, k, n               GEMM shape (tokens, input width, output width), per GPU; gemm, lm_head
  time_ms_median        median time in ms; forward/prefill: whole step, all layers
  time_ms_p10           10th percentile (same scaling)
  time_ms_p90           90th percentile (same scaling)
  repeats               timed calls
  warmup                untimed calls before them
  layers_timed          decoder layers actually run (per-operator rows: 1)
  layers_total          layers the time stands for (forward/prefill: num_hidden_layers; else 1)
  scaled_to_all_layers  1 when the layer part was scaled from layers_timed to layers_total
  tp                    emulated tensor-parallel degree (shapes divided by it; no collectives)
  model                 model name (built-in name or from the config)
  hidden_size           hidden width; this and the next six are the config before the tp split
  intermediate_size     MLP width
  num_hidden_layers     decoder layers of the whole model
  num_attention_heads   query heads
  num_key_value_heads   KV heads
  head_dim              width of one head
  vocab_size            vocabulary
  draft_vocab           LM-head vocabulary of the draft head (before the tp split)
  dtype                 weight and activation dtype (bfloat16, float16, float32)
  device                cuda or cpu
  gpu_name              torch.cuda.get_device_name(), or "cpu (<processor>)"
  torch_version         torch.__version__
  cuda_version          torch.version.cuda (empty on CPU-only builds)
  cuda_graphs           1 when the case was captured in a CUDA graph and timed by replay
  attention_impl        attention path used (empty for rows without attention)
  timer                 cuda_event or perf_counter
  date_utc              ISO 8601 start time of the run
  truncated             1 when --max-seconds stopped the run before every case was timed
  script_version        version of this script

Bad arguments exit with status 2 and one line ``error: <field>: <message>``; a run in which a
case failed (other than out of memory, which is skipped) writes its CSV and exits with status 1.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path

# a bare image's Python may be older than simspec's: zip(strict=...) and the collections.abc
# types subscripted at run time below need 3.10 (QA: 3.9 timed every operator, then raised)
if sys.version_info < (3, 10):  # noqa: UP036
    version = platform.python_version()
    print(f"error: python: needs Python 3.10 or newer (this is {version})", file=sys.stderr)
    sys.exit(2)

import numpy as np
import torch
import torch.nn.functional as F

SCRIPT_VERSION = "1.0"
COLUMNS = tuple(
    """
    kind op num_seqs q_per_seq context_len num_tokens tree m k n time_ms_median time_ms_p10
    time_ms_p90 repeats warmup layers_timed layers_total scaled_to_all_layers tp model
    hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads
    head_dim vocab_size draft_vocab dtype device gpu_name torch_version cuda_version
    cuda_graphs attention_impl timer date_utc truncated script_version
    """.split()
)
GEMM_OPS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
ELEMENTWISE_OPS = ("rmsnorm", "silu_mul", "rope", "add")
# Grid choices, not model constants (no output number rests on them): tree verification is
# timed at batch sizes up to TREE_MAX_BATCH, where trees are served (SGLang's EAGLE keeps its
# default speculative batch at 48 and trees pay off at small batch); a case runs only if its
# estimated bytes (case_bytes, a lower bound that leaves out the allocator's rounding and
# SDPA's workspace) times MEMORY_SAFETY fit in free memory, so an estimate 30 % short still
# skips instead of raising out-of-memory mid-run.
TREE_MAX_BATCH = 16
MEMORY_SAFETY = 1.3
RMS_EPS = 1e-5
# config.json keys that declare layers other than attention (Nemotron-H's pattern, Falcon-H1's
# and Mamba's SSM, Jamba's attention period, Zamba's block types, Qwen3-Next's linear
# attention heads) and the layer_types that are attention: what the harness can build
HYBRID_KEYS = (
    "hybrid_override_pattern",
    "mamba_d_ssm",
    "ssm_cfg",
    "attn_layer_period",
    "layers_block_type",
    "linear_num_value_heads",
)
ATTENTION_LAYER_TYPES = frozenset({"full_attention", "sliding_attention", "attention"})
# where a multimodal or wrapped config keeps its language model's fields (Llama-4's)
NESTED_KEYS = ("text_config", "language_config", "llm_config")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class UsageError(Exception):
    """A bad argument: printed as ``error: <field>: <message>``, exit status 2."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")


# -- model shapes ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelShape:
    """The config.json fields that set kernel shapes."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rope_theta: float = 10000.0


MODELS = {
    # made up: small enough that the CPU smoke run takes seconds
    "tiny": ModelShape("tiny", 64, 128, 2, 4, 2, 16, 256),
    # meta-llama/Llama-3.1-8B config.json (its llama3 rope_scaling changes values, not shapes)
    "llama-3.1-8b": ModelShape("llama-3.1-8b", 4096, 14336, 32, 32, 8, 128, 128256, 500000.0),
    # meta-llama/Llama-3.1-70B config.json
    "llama-3.1-70b": ModelShape("llama-3.1-70b", 8192, 28672, 80, 64, 8, 128, 128256, 500000.0),
    # meta-llama/Llama-2-7b-hf config.json
    "llama-2-7b": ModelShape("llama-2-7b", 4096, 11008, 32, 32, 32, 128, 32000, 10000.0),
}


def load_config(path: str) -> ModelShape:
    """Read the shape fields of a Hugging Face config.json."""
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError("--config", f"cannot read {path}: {exc}") from None
    if not isinstance(cfg, dict):
        raise UsageError("--config", f"{path} is not a JSON object")

    def positive(key: str, default: int | None = None) -> int:
        value = cfg.get(key)
        if value is None and default is not None:
            return default
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise UsageError("--config", f"{key} must be a positive integer, got {value!r}")
        return value

    # the harness builds dense GQA decoder layers: a config with routed experts or a latent
    # KV would be timed as a dense model under its name (QA), so it is refused instead
    for key in ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"):
        if isinstance(cfg.get(key), int) and cfg[key] > 0:
            raise UsageError(
                "--config",
                f"{path} is a MoE model ({key} {cfg[key]}): this script times dense GQA layers "
                "only; MoE layers are priced from measured kernel tables "
                "(calibration/fit_moe_kernels.py)",
            )
    # layers that are not attention (Mamba, Gated DeltaNet, linear attention): timed as GQA
    # layers they would be priced wrong under the model's name (QA: Nemotron-H, Falcon-H1)
    hybrid = [k for k in HYBRID_KEYS if cfg.get(k)]
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list):
        other = sorted({str(t) for t in layer_types} - ATTENTION_LAYER_TYPES)
        if other:
            hybrid.append(f"layer_types {', '.join(other)}")
    if hybrid:
        raise UsageError(
            "--config",
            f"{path} has layers other than attention ({hybrid[0]}): this script times dense "
            "GQA layers only",
        )
    for key in NESTED_KEYS:
        if isinstance(cfg.get(key), dict) and "hidden_size" not in cfg:
            raise UsageError(
                "--config",
                f"{path} nests its language model's shape under {key}: give that part's "
                "config.json fields at the top level",
            )
    if "hidden_size" not in cfg and "d_model" in cfg:
        raise UsageError(
            "--config",
            f"{path} names its width d_model (another architecture's config): give "
            "hidden_size and the Llama-style fields",
        )
    if cfg.get("kv_lora_rank"):
        raise UsageError(
            "--config",
            f"{path} uses multi-head latent attention (kv_lora_rank {cfg['kv_lora_rank']}): this "
            "script times GQA attention only; MLA is priced from measured kernel tables",
        )
    hidden, heads = positive("hidden_size"), positive("num_attention_heads")
    theta = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta")
    name = cfg.get("_name_or_path") or Path(path).resolve().parent.name or "custom"
    return ModelShape(
        name=str(name),
        hidden_size=hidden,
        intermediate_size=positive("intermediate_size"),
        num_hidden_layers=positive("num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=positive("num_key_value_heads", heads),
        head_dim=positive("head_dim", hidden // heads),
        vocab_size=positive("vocab_size"),
        rope_theta=float(theta or 10000.0),
    )


@dataclass(frozen=True)
class Shard:
    """Per-GPU widths under emulated tensor parallelism (KV heads replicate below 1 per GPU)."""

    hidden: int
    inter: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    draft_vocab: int

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    def gemm_shape(self, op: str) -> tuple[int, int]:
        """(k, n) of a layer GEMM or the LM head: input and output width."""
        return {
            "qkv_proj": (self.hidden, self.q_dim + 2 * self.kv_dim),
            "o_proj": (self.q_dim, self.hidden),
            "gate_up_proj": (self.hidden, 2 * self.inter),
            "down_proj": (self.inter, self.hidden),
            "lm_head": (self.hidden, self.vocab),
        }[op]


def shard(shape: ModelShape, tp: int, draft_vocab: int) -> Shard:
    """Divide a model by ``tp`` like Vidur's and LLMServingSim's profilers (padded vocab split)."""
    if shape.num_attention_heads % shape.num_key_value_heads:
        raise UsageError("--config", "num_attention_heads is not a multiple of num_key_value_heads")
    if shape.num_attention_heads % tp:
        raise UsageError("--tp", f"{tp} does not divide {shape.num_attention_heads} heads")
    heads = shape.num_attention_heads // tp
    kv_heads = max(1, shape.num_key_value_heads // tp)
    if heads % kv_heads:
        raise UsageError("--tp", f"{heads} heads per GPU do not group over {kv_heads} KV heads")
    return Shard(
        hidden=shape.hidden_size,
        inter=math.ceil(shape.intermediate_size / tp),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=shape.head_dim,
        vocab=math.ceil(shape.vocab_size / tp),
        draft_vocab=math.ceil(draft_vocab / tp),
    )


# -- attention masks ---------------------------------------------------------------------------
def tree_parents(num_nodes: int, seed: int) -> list[int]:
    """A seeded random token tree: node 0 is the root, node i's parent is uniform over 0..i-1."""
    rng = random.Random(seed * 1_000_003 + num_nodes)
    return [-1] + [rng.randrange(i) for i in range(1, num_nodes)]


def tree_depths(parents: Sequence[int]) -> list[int]:
    """Depth of each node (root 0): a drafted token's position is context + depth."""
    depths: list[int] = []
    for p in parents:
        depths.append(0 if p < 0 else depths[p] + 1)
    return depths


def tree_mask(parents: Sequence[int]) -> torch.Tensor:
    """[q, q] bool: node i sees itself and its ancestors (parents precede their children)."""
    q = len(parents)
    mask = torch.zeros(q, q, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            mask[i] = mask[p]
        mask[i, i] = True
    return mask


def verify_mask(q: int, ctx: int, parents: Sequence[int] | None = None) -> torch.Tensor:
    """[q, ctx + q] bool for q new tokens after ctx cached ones: all see the context, then
    causally (bottom-right aligned) for a chain, or their ancestors for a tree."""
    new = tree_mask(parents) if parents is not None else torch.ones(q, q).tril().bool()
    return torch.cat([torch.ones(q, ctx, dtype=torch.bool), new], dim=1)


# -- attention ---------------------------------------------------------------------------------
Attention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def _pack(q: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """[B, L, H, D] -> [B, Hkv, G*L, D]: the G query heads of a KV head share its K and V, so
    GQA runs as plain SDPA without copying K/V (head h reads KV head h // G)."""
    b, length, heads, d = q.shape
    g = heads // kv_heads
    return q.view(b, length, kv_heads, g, d).permute(0, 2, 3, 1, 4).reshape(b, kv_heads, -1, d)


def _unpack(o: torch.Tensor, length: int) -> torch.Tensor:
    """Inverse of :func:`_pack`, flattened to [B, L, H*D] for o_proj."""
    b, kv_heads, gl, d = o.shape
    g = gl // length
    return o.view(b, kv_heads, g, length, d).permute(0, 3, 1, 2, 4).reshape(b, length, -1)


def packed_attention(mask: torch.Tensor | None, s: Shard, device: torch.device) -> Attention:
    """SDPA with packed GQA; ``mask`` is [L, S] bool or None (decode: every key visible)."""
    # packed row g*L + i is query i, so the mask repeats once per query head of a group
    group_mask = None if mask is None else mask.to(device).repeat(s.group, 1)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        o = F.scaled_dot_product_attention(_pack(q, s.kv_heads), k, v, attn_mask=group_mask)
        return _unpack(o, q.shape[1])

    return attend


def native_causal_attention(q_len: int, kv_len: int) -> Attention:
    """SDPA with enable_gqa and a lower-right causal bias, which dispatches to FlashAttention
    without materialising a mask (torch >= 2.5 on CUDA)."""
    from torch.nn.attention.bias import causal_lower_right

    bias = causal_lower_right(q_len, kv_len)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=bias, enable_gqa=True)
        return o.transpose(1, 2).reshape(q.shape[0], q.shape[1], -1)

    return attend


def native_causal_works(s: Shard, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether :func:`native_causal_attention` runs and agrees with the packed masked path here
    (older torch lacks enable_gqa in CausalBias; some kernels reject GQA)."""
    if device.type != "cuda":
        return False
    try:
        for q_len, ctx in ((5, 7), (5, 0)):
            q = torch.randn(2, q_len, s.heads, s.head_dim, device=device, dtype=dtype)
            kv_shape = (2, s.kv_heads, ctx + q_len, s.head_dim)
            k = torch.randn(kv_shape, device=device, dtype=dtype)
            v = torch.randn(kv_shape, device=device, dtype=dtype)
            want = packed_attention(verify_mask(q_len, ctx), s, device)(q, k, v)
            got = native_causal_attention(q_len, ctx + q_len)(q, k, v)
            if not torch.allclose(got.float(), want.float(), atol=3e-2, rtol=3e-2):
                return False
        torch.cuda.synchronize()
    except (RuntimeError, TypeError, ValueError, ImportError, AttributeError):
        return False
    return True


def make_attention(
    mode: str,
    q_len: int,
    ctx: int,
    s: Shard,
    device: torch.device,
    parents: list[int] | None = None,
    native_causal: bool = False,
) -> tuple[Attention, str]:
    """The attention callable for one case (mode: decode, chain, tree or prefill) and the name
    recorded in ``attention_impl``."""
    if mode == "decode":
        return packed_attention(None, s, device), "torch_sdpa:gqa_packed"
    if mode in ("chain", "prefill") and native_causal:
        impl = "torch_sdpa:enable_gqa+causal_lower_right"
        return native_causal_attention(q_len, ctx + q_len), impl
    mask = verify_mask(q_len, ctx, parents if mode == "tree" else None)
    return packed_attention(mask, s, device), "torch_sdpa:gqa_packed+bool_mask"


# -- the model ---------------------------------------------------------------------------------
def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """RMSNorm (torch's fused op where it has one)."""
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), weight, RMS_EPS)
    var = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(var + RMS_EPS)).to(x.dtype) * weight


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up on the fused gate_up output."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, rotate-half (NeoX / Hugging Face Llama) layout."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


@dataclass
class LayerWeights:
    input_norm: torch.Tensor
    qkv: torch.Tensor
    o: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor


class Model:
    """A Llama-style decoder with random weights, per-GPU shapes, ``layers`` decoder layers."""

    def __init__(
        self, s: Shard, layers: int, theta: float, device: torch.device, dtype: torch.dtype
    ) -> None:
        self.s, self.theta, self.device, self.dtype = s, theta, device, dtype
        self.embed = self.weight(s.vocab, s.hidden)
        self.layers = [self.new_layer() for _ in range(layers)]
        self.final_norm = self.ones(s.hidden)
        self.lm_head = self.weight(s.vocab, s.hidden)

    def weight(self, n: int, k: int) -> torch.Tensor:
        """Random [n, k] weight scaled by 1/sqrt(k) so activations stay O(1)."""
        return torch.randn(n, k, device=self.device, dtype=self.dtype).mul_(k**-0.5)

    def ones(self, n: int) -> torch.Tensor:
        return torch.ones(n, device=self.device, dtype=self.dtype)

    def new_layer(self) -> LayerWeights:
        s = self.s
        return LayerWeights(
            input_norm=self.ones(s.hidden),
            qkv=self.weight(s.q_dim + 2 * s.kv_dim, s.hidden),
            o=self.weight(s.hidden, s.q_dim),
            post_norm=self.ones(s.hidden),
            gate_up=self.weight(2 * s.inter, s.hidden),
            down=self.weight(s.hidden, s.inter),
        )

    def rope(self, positions: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin, [len(positions), 1, head_dim], broadcasting over batch and heads."""
        d = self.s.head_dim
        inv_freq = self.theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        freqs = torch.tensor(positions, dtype=torch.float64)[:, None] * inv_freq[None]
        emb = torch.cat([freqs, freqs], dim=-1)[:, None, :]
        return emb.cos().to(self.device, self.dtype), emb.sin().to(self.device, self.dtype)

    def new_cache(self, batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A dense, pre-filled K and V cache for one layer, [B, H_kv, length, D]."""
        shape = (batch, self.s.kv_heads, length, self.s.head_dim)
        return (
            torch.randn(shape, device=self.device, dtype=self.dtype),
            torch.randn(shape, device=self.device, dtype=self.dtype),
        )

    def layer(
        self,
        x: torch.Tensor,
        w: LayerWeights,
        rope: tuple[torch.Tensor, torch.Tensor],
        cache: tuple[torch.Tensor, torch.Tensor],
        ctx: int,
        attn: Attention,
    ) -> torch.Tensor:
        """One decoder layer on x [B, L, hidden]; writes the L new K/V at cache[ctx:ctx+L]."""
        s, (b, length, _) = self.s, x.shape
        qkv = F.linear(rms_norm(x, w.input_norm), w.qkv)
        q, k, v = qkv.split([s.q_dim, s.kv_dim, s.kv_dim], dim=-1)
        q = apply_rope(q.view(b, length, s.heads, s.head_dim), *rope)
        k = apply_rope(k.view(b, length, s.kv_heads, s.head_dim), *rope)
        v = v.view(b, length, s.kv_heads, s.head_dim)
        cache[0][:, :, ctx : ctx + length] = k.transpose(1, 2)
        cache[1][:, :, ctx : ctx + length] = v.transpose(1, 2)
        x = x + F.linear(attn(q, *cache), w.o)
        return x + F.linear(silu_mul(F.linear(rms_norm(x, w.post_norm), w.gate_up)), w.down)

    def logits(
        self, x: torch.Tensor, last_only: bool, lm_head: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Final norm and LM head on every position, or on each sequence's last one (prefill)."""
        if last_only:
            x = x[:, -1]
        head = self.lm_head if lm_head is None else lm_head
        return F.linear(rms_norm(x, self.final_norm), head)

    def step(
        self,
        ids: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        caches: list[tuple[torch.Tensor, torch.Tensor]],
        ctx: int,
        attn: Attention,
        last_only: bool,
    ) -> torch.Tensor:
        """One engine step: embedding, every built layer, final norm, LM head."""
        x = F.embedding(ids, self.embed)
        for w, cache in zip(self.layers, caches, strict=True):
            x = self.layer(x, w, rope, cache, ctx, attn)
        return self.logits(x, last_only)

    def edges(self, ids: torch.Tensor, last_only: bool) -> torch.Tensor:
        """The step without its layers, timed to scale only the layer part to all layers."""
        return self.logits(F.embedding(ids, self.embed), last_only)

    def gemm_weight(self, op: str) -> torch.Tensor:
        """The [n, k] weight of a GEMM in :data:`GEMM_OPS` (first layer) or of the LM head."""
        if op == "lm_head":
            return self.lm_head
        w = self.layers[0]
        return {"qkv_proj": w.qkv, "o_proj": w.o, "gate_up_proj": w.gate_up, "down_proj": w.down}[
            op
        ]


class DraftHead:
    """EAGLE-style draft head (EAGLE-1/2 layout): fc [2h -> h] over concat(target feature,
    token embedding), one decoder layer, then an LM head over the full or a reduced vocabulary
    (EAGLE-3 drafts over 32000 tokens). Shares the target's embedding."""

    def __init__(self, target: Model) -> None:
        s = target.s
        self.target = target
        self.fc = target.weight(s.hidden, 2 * s.hidden)
        self.layer = target.new_layer()
        same_vocab = s.draft_vocab == s.vocab
        self.lm_head = target.lm_head if same_vocab else target.weight(s.draft_vocab, s.hidden)

    def step(
        self,
        feature: torch.Tensor,
        ids: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        cache: tuple[torch.Tensor, torch.Tensor],
        ctx: int,
        attn: Attention,
    ) -> torch.Tensor:
        """One drafting step: q=1 per sequence on top of the draft's own KV cache."""
        t = self.target
        x = F.linear(torch.cat([feature, F.embedding(ids, t.embed)], dim=-1), self.fc)
        x = t.layer(x, self.layer, rope, cache, ctx, attn)
        return t.logits(x, False, self.lm_head)


# -- cases -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Grid:
    """The sizes to sweep (see the --batch-sizes etc. options)."""

    batch_sizes: list[int]
    q_per_seq: list[int]
    tree_sizes: list[int]
    context_lens: list[int]
    prefill_chunks: list[int]
    prefill_contexts: list[int]
    gemm_tokens: list[int]
    max_tokens: int


@dataclass(frozen=True)
class Case:
    """One timed measurement; ``group`` orders and labels progress."""

    group: str
    kind: str
    op: str
    num_tokens: int
    num_seqs: int | None = None
    q_per_seq: int | None = None
    context_len: int | None = None
    tree: int = 0
    m: int | None = None
    k: int | None = None
    n: int | None = None

    def describe(self) -> str:
        parts = [f"{self.kind}/{self.op}", f"tokens={self.num_tokens}"]
        if self.num_seqs is not None:
            parts += [f"B={self.num_seqs}", f"q={self.q_per_seq}", f"ctx={self.context_len}"]
        if self.m is not None:
            parts += [f"m={self.m}", f"k={self.k}", f"n={self.n}"]
        return " ".join(parts)


def sequence_shapes(g: Grid, mode: str) -> list[tuple[int, int, int]]:
    """(batch, q per sequence, context) in a fixed order, within --max-tokens."""
    if mode == "prefill":
        shapes = [(1, c, ctx) for ctx in g.prefill_contexts for c in g.prefill_chunks]
    elif mode == "tree":
        batches = [b for b in g.batch_sizes if b <= TREE_MAX_BATCH]
        shapes = [(b, q, c) for q in g.tree_sizes for b in batches for c in g.context_lens]
    else:
        qs = [q for q in g.q_per_seq if (q == 1) == (mode == "decode")]
        shapes = [(b, q, c) for q in qs for b in g.batch_sizes for c in g.context_lens]
    return [(b, q, c) for b, q, c in shapes if b * q <= g.max_tokens]


def attention_mode(c: Case) -> str:
    """How a case's new tokens attend: decode, chain, tree or prefill (causal, LM head on the
    last token); the draft head drafts one token per sequence, like decode."""
    if c.op == "prefill":
        return "prefill"
    if c.tree:
        return "tree"
    return "chain" if c.q_per_seq > 1 else "decode"


def seq_case(group: str, kind: str, op: str, b: int, q: int, ctx: int) -> Case:
    tree = int(op == "tree")
    return Case(group, kind, op, b * q, num_seqs=b, q_per_seq=q, context_len=ctx, tree=tree)


def build_cases(g: Grid, s: Shard) -> list[Case]:
    """Every case, most valuable first: the per-operator rows a cost model is fitted on, then
    decode, verification, tree, prefill and draft-head steps."""
    cases = []
    tokens = [t for t in g.gemm_tokens if t <= g.max_tokens]
    for op in (*GEMM_OPS, "lm_head"):
        k, n = s.gemm_shape(op)
        kind = "lm_head" if op == "lm_head" else "gemm"
        cases += [Case(kind, kind, op, t, m=t, k=k, n=n) for t in tokens]
    for mode in ("decode", "chain", "tree", "prefill"):
        cases += [seq_case("attention", "attention", mode, *x) for x in sequence_shapes(g, mode)]
    for op in ELEMENTWISE_OPS:
        cases += [Case("elementwise", "elementwise", op, t) for t in tokens]
    for mode in ("decode", "chain", "tree"):
        shapes = sequence_shapes(g, mode)
        cases += [seq_case(f"forward {mode}", "forward", mode, *x) for x in shapes]
    cases += [seq_case("prefill", "prefill", "prefill", *x) for x in sequence_shapes(g, "prefill")]
    shapes = [(b, 1, c) for b in g.batch_sizes for c in g.context_lens if b <= g.max_tokens]
    cases += [seq_case("draft_head", "draft_head", "eagle_head", *x) for x in shapes]
    return cases


def case_bytes(c: Case, s: Shard, layers: int, elem: int) -> int:
    """Rough bytes a case allocates beyond the model's weights (KV cache, activations, logits,
    packed mask), to skip what cannot fit before trying it."""
    t = c.num_tokens
    if c.kind in ("gemm", "lm_head"):
        return elem * t * (c.k + c.n)
    if c.kind == "elementwise":
        return elem * t * 4 * max(s.hidden, s.inter, s.q_dim)
    b, q, ctx = c.num_seqs, c.q_per_seq, c.context_len
    n_layers = layers if c.kind in ("forward", "prefill") else 1
    kv = n_layers * 2 * b * s.kv_dim * (ctx + q) * elem
    acts = t * (8 * s.hidden + 2 * (s.q_dim + 2 * s.kv_dim) + 4 * s.inter) * elem
    mask = s.group * q * (ctx + q) * (elem + 1) if c.op != "decode" else 0
    rows = b if c.op == "prefill" else t
    vocab = s.draft_vocab if c.kind == "draft_head" else s.vocab
    logits = 0 if c.kind == "attention" else rows * vocab * elem
    return kv + acts + mask + logits


# -- timing ------------------------------------------------------------------------------------
def time_cpu(fn: Callable[[], object], warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def time_cuda(fn: Callable[[], object], warmup: int, repeats: int) -> list[float]:
    """Event pairs around each call; one synchronize at the end so launches stay queued."""
    for _ in range(warmup):
        fn()
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(repeats)
    ]
    torch.cuda.synchronize()
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def capture_graph(fn: Callable[[], object], warmup: int) -> torch.cuda.CUDAGraph:
    """Warm up on a side stream, then capture one call (the PyTorch CUDA graphs recipe)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(max(warmup, 1)):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def first_line(exc: BaseException) -> str:
    """An exception's first line, for one-line progress messages."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass(frozen=True)
class Timer:
    """Times a zero-argument call the way the run asks (device, warm-up, repeats, graphs)."""

    device: torch.device
    warmup: int
    repeats: int
    cuda_graphs: bool

    def __call__(self, fn: Callable[[], object]) -> tuple[list[float], bool]:
        """Times of ``fn`` in ms, and whether they are CUDA graph replays."""
        if self.device.type != "cuda":
            return time_cpu(fn, self.warmup, self.repeats), False
        if self.cuda_graphs:
            try:
                graph = capture_graph(fn, self.warmup)
            except torch.cuda.OutOfMemoryError:
                raise
            except RuntimeError as exc:  # keep the case, timed eagerly (its row says so)
                torch.cuda.synchronize()
                print(
                    f"  cuda graph capture failed, timed eagerly: {first_line(exc)}",
                    file=sys.stderr,
                )
            else:
                return time_cuda(graph.replay, self.warmup, self.repeats), True
        return time_cuda(fn, self.warmup, self.repeats), False


def quantiles(times: Sequence[float]) -> tuple[float, float, float]:
    """Median, p10, p90."""
    p10, med, p90 = np.percentile(np.asarray(times), [10, 50, 90])
    return float(med), float(p10), float(p90)


def scale_layers(full: list[float], edges: list[float], ratio: float) -> list[float]:
    """Whole-model times from ``full`` (L layers): scale the part above the median of the
    layer-free step by ``ratio``; monotone in ``full``, so quantiles keep their order."""
    base = float(np.median(edges))
    return [base + max(f - base, 0.0) * ratio for f in full]


# -- running -----------------------------------------------------------------------------------
@dataclass
class Prepared:
    """A case ready to time: the call, the layer-free call (when layers are scaled), and the
    attention path it uses."""

    fn: Callable[[], object]
    edges: Callable[[], object] | None = None
    attention_impl: str = ""


class Bench:
    """Turns cases into callables over one random-weight model."""

    def __init__(self, model: Model, shape: ModelShape, seed: int, native_causal: bool) -> None:
        self.model, self.shape, self.seed, self.native_causal = model, shape, seed, native_causal
        self._draft: DraftHead | None = None

    def randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(shape, device=self.model.device, dtype=self.model.dtype)

    def prepare(self, c: Case) -> Prepared:
        if c.kind in ("gemm", "lm_head"):
            return self.gemm(c)
        if c.kind == "elementwise":
            return self.elementwise(c)
        return self.sequences(c)

    def gemm(self, c: Case) -> Prepared:
        weight, x = self.model.gemm_weight(c.op), self.randn(c.m, c.k)
        return Prepared(lambda: F.linear(x, weight))

    def elementwise(self, c: Case) -> Prepared:
        s, t, w0 = self.model.s, c.num_tokens, self.model.layers[0]
        if c.op == "rmsnorm":
            x = self.randn(t, s.hidden)
            return Prepared(lambda: rms_norm(x, w0.input_norm))
        if c.op == "silu_mul":
            gu = self.randn(t, 2 * s.inter)
            return Prepared(lambda: silu_mul(gu))
        if c.op == "rope":
            q, k = self.randn(t, s.heads, s.head_dim), self.randn(t, s.kv_heads, s.head_dim)
            cos, sin = self.model.rope(list(range(t)))
            return Prepared(lambda: (apply_rope(q, cos, sin), apply_rope(k, cos, sin)))
        a, b = self.randn(t, s.hidden), self.randn(t, s.hidden)
        return Prepared(lambda: a + b)

    def sequences(self, c: Case) -> Prepared:
        """Attention, forward, prefill and draft-head cases: a batch of equal sequences."""
        m, s = self.model, self.model.s
        b, q, ctx = c.num_seqs, c.q_per_seq, c.context_len
        parents = tree_parents(q, self.seed) if c.tree else None
        positions = [ctx + d for d in tree_depths(parents)] if parents else range(ctx, ctx + q)
        mode = attention_mode(c)
        attn, impl = make_attention(mode, q, ctx, s, m.device, parents, self.native_causal)
        if c.kind == "attention":
            kc, vc = m.new_cache(b, ctx + q)
            x = self.randn(b, q, s.heads, s.head_dim)
            return Prepared(lambda: attn(x, kc, vc), attention_impl=impl)
        ids = torch.randint(0, s.vocab, (b, q), device=m.device)
        rope = m.rope(positions)
        if c.kind == "draft_head":
            draft = self.draft()
            feature, cache = self.randn(b, q, s.hidden), m.new_cache(b, ctx + q)
            return Prepared(lambda: draft.step(feature, ids, rope, cache, ctx, attn), None, impl)
        caches = [m.new_cache(b, ctx + q) for _ in m.layers]
        last = c.kind == "prefill"
        scaled = len(m.layers) < self.shape.num_hidden_layers
        return Prepared(
            lambda: m.step(ids, rope, caches, ctx, attn, last),
            (lambda: m.edges(ids, last)) if scaled else None,
            impl,
        )

    def draft(self) -> DraftHead:
        if self._draft is None:
            self._draft = DraftHead(self.model)
        return self._draft


def free_bytes(device: torch.device) -> float:
    """Free device memory (CUDA) or available RAM (CPU, Linux), inf when unknown."""
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return math.inf


@dataclass
class Outcome:
    """Rows timed so far and what happened to the other cases."""

    rows: list[dict]
    skipped: int = 0
    failed: int = 0
    truncated: bool = False
    interrupted: bool = False  # Ctrl-C, not the --max-seconds budget


def run_cases(
    cases: list[Case], bench: Bench, timer: Timer, meta: dict, max_seconds: float, t0: float
) -> Outcome:
    """Time cases in order; skip what does not fit; stop starting cases past the budget."""
    out, device, group = Outcome([]), timer.device, None
    s, layers = bench.model.s, len(bench.model.layers)
    elem = torch.finfo(bench.model.dtype).bits // 8
    for i, c in enumerate(cases):
        elapsed = time.perf_counter() - t0
        if max_seconds and elapsed > max_seconds:
            out.truncated = True
            print(
                f"budget of {max_seconds:g} s reached: {len(cases) - i} cases not timed", flush=True
            )
            break
        if c.group != group:
            group = c.group
            n = sum(x.group == group for x in cases)
            print(f"[{elapsed:7.1f}s] {group}: {n} cases", file=sys.stderr, flush=True)
        need = case_bytes(c, s, layers, elem) * MEMORY_SAFETY
        if need > free_bytes(device):
            out.skipped += 1
            print(f"  skip {c.describe()}: needs ~{need / 2**30:.1f} GiB", file=sys.stderr)
            continue
        try:
            out.rows.append(time_case(c, bench, timer, meta))
        except torch.cuda.OutOfMemoryError:
            out.skipped += 1
            print(f"  skip {c.describe()}: out of memory", file=sys.stderr, flush=True)
        except Exception as exc:
            # any failed case: the rest are still timed and written (QA: a TypeError escaped
            # after the per-operator cases, and the run wrote no CSV)
            out.failed += 1
            why = f"{type(exc).__name__}: {first_line(exc)}"
            print(f"  FAILED {c.describe()}: {why}", file=sys.stderr, flush=True)
        except KeyboardInterrupt:
            out.truncated = out.interrupted = True
            print("interrupted: writing what was timed", flush=True)
            break
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return out


def time_case(c: Case, bench: Bench, timer: Timer, meta: dict) -> dict:
    """One CSV row; whole-model rows scale their layer part to every layer."""
    prep = bench.prepare(c)
    times, graphed = timer(prep.fn)
    whole = c.kind in ("forward", "prefill")
    layers_timed = len(bench.model.layers) if whole else 1
    layers_total = bench.shape.num_hidden_layers if whole else 1
    if prep.edges is not None:
        edge_times, _ = timer(prep.edges)
        times = scale_layers(times, edge_times, layers_total / layers_timed)
    med, p10, p90 = quantiles(times)
    row = {f.name: getattr(c, f.name) for f in fields(Case) if f.name in COLUMNS}
    row.update(meta)
    row.update(
        time_ms_median=med,
        time_ms_p10=p10,
        time_ms_p90=p90,
        layers_timed=layers_timed,
        layers_total=layers_total,
        scaled_to_all_layers=int(layers_timed < layers_total),
        cuda_graphs=int(graphed),
        attention_impl=prep.attention_impl,
    )
    return row


def write_csv(path: str, rows: list[dict], truncated: bool) -> None:
    """Atomically: write PATH.tmp, then rename over PATH."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        for row in rows:
            cells = {k: ("" if row.get(k) is None else row[k]) for k in COLUMNS}
            for key in ("time_ms_median", "time_ms_p10", "time_ms_p90"):
                cells[key] = f"{row[key]:.6g}"
            cells["truncated"] = int(truncated)
            writer.writerow(cells)
    os.replace(tmp, path)


def run_meta(args: argparse.Namespace, shape: ModelShape, device: torch.device) -> dict:
    """The columns that are the same on every row."""
    if device.type == "cuda":
        gpu = torch.cuda.get_device_name(device)
    else:
        gpu = f"cpu ({platform.processor()})" if platform.processor() else "cpu"
    return dict(
        repeats=args.repeats,
        warmup=args.warmup,
        tp=args.tp,
        model=shape.name,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        head_dim=shape.head_dim,
        vocab_size=shape.vocab_size,
        draft_vocab=args.draft_vocab,
        dtype=str(args.dtype).removeprefix("torch."),
        device=device.type,
        gpu_name=gpu,
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda or "",
        timer="cuda_event" if device.type == "cuda" else "perf_counter",
        date_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        script_version=SCRIPT_VERSION,
    )


# -- command line ------------------------------------------------------------------------------
GPU_GRID = dict(
    batch_sizes=[1, 2, 4, 8, 16, 32, 64, 128],
    q_per_seq=[1, 2, 4, 8, 16, 32, 64],
    tree_sizes=[16, 32, 64],
    context_lens=[128, 512, 2048, 8192],
    prefill_chunks=[128, 512, 1024, 2048, 4096],
    prefill_contexts=[0, 2048],
    gemm_tokens=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
)
QUICK_GRID = dict(
    batch_sizes=[1, 8, 64],
    q_per_seq=[1, 4],
    tree_sizes=[16],
    context_lens=[512, 4096],
    prefill_chunks=[512, 2048],
    prefill_contexts=[0, 2048],
    gemm_tokens=[1, 16, 128, 1024, 4096],
)
CPU_GRID = dict(
    batch_sizes=[1, 4],
    q_per_seq=[1, 4],
    tree_sizes=[8],
    context_lens=[64, 256],
    prefill_chunks=[32, 128],
    prefill_contexts=[0, 256],
    gemm_tokens=[1, 16, 128],
)
LIST_FLAGS = {  # Grid field -> (flag, smallest allowed value, help)
    "batch_sizes": ("--batch-sizes", 1, "sequences per step (attention, forward, draft head)"),
    "q_per_seq": ("--q-per-seq", 1, "new tokens per sequence: 1 decode, >1 chain verification"),
    "tree_sizes": ("--tree-sizes", 1, f"token-tree sizes verified at batch <= {TREE_MAX_BATCH}"),
    "context_lens": ("--context-lens", 0, "cached tokens per sequence before the step"),
    "prefill_chunks": ("--prefill-chunks", 1, "prompt chunk sizes, one sequence"),
    "prefill_contexts": ("--prefill-contexts", 0, "cached tokens before a prefill chunk"),
    "gemm_tokens": ("--gemm-tokens", 1, "token counts of the GEMM and elementwise rows"),
}


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, ``error: <field>: <message>``, exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        field, _, rest = message.partition(": ")
        if field.startswith("argument "):
            field = field.removeprefix("argument ").split("/")[0]
        else:
            field, rest = "arguments", message
        raise UsageError(field, rest)


def _csv_list(values: list[int]) -> str:
    return ",".join(map(str, values))


def build_parser() -> Parser:
    p = Parser(
        prog="time_forward.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "examples:\n"
            "  time_forward.py --model llama-3.1-8b --cuda-graphs --out h100_llama-3.1-8b.csv\n"
            "  time_forward.py --model llama-3.1-8b --quick --out /tmp/quick.csv\n"
            "  time_forward.py --config path/to/config.json --tp 2 --list\n"
            "  time_forward.py --model tiny --device cpu --out /tmp/t.csv\n"
            "The CSV columns are listed in the module docstring and calibration/README.md."
        ),
    )
    m = p.add_argument_group("model")
    m.add_argument(
        "--model", help=f"built-in shape: {', '.join(MODELS)} (this or --config is required)"
    )
    m.add_argument(
        "--config",
        metavar="PATH",
        help="Hugging Face config.json to take shapes from (this or --model is required)",
    )
    m.add_argument("--tp", type=int, default=1, help="emulated tensor parallelism (default: 1)")
    m.add_argument(
        "--layers",
        type=int,
        help="decoder layers to build; whole-model times are scaled to all "
        "(default: min(num_hidden_layers, 4))",
    )
    m.add_argument(
        "--draft-vocab", type=int, help="draft head LM-head vocabulary (default: model's)"
    )
    d = p.add_argument_group("device")
    d.add_argument(
        "--device", choices=("auto", "cuda", "cpu"), default="auto", help="(default: auto)"
    )
    d.add_argument(
        "--dtype", choices=tuple(DTYPES), help="(default: bf16 on CUDA, fp32 on the CPU)"
    )
    d.add_argument("--cuda-graphs", action="store_true", help="time CUDA graph replays")
    g = p.add_argument_group("grid (comma-separated integers)")
    for name, (flag, _, text) in LIST_FLAGS.items():
        g.add_argument(
            flag,
            dest=name,
            metavar="LIST",
            help=f"{text} (default: {_csv_list(GPU_GRID[name])} on CUDA; "
            f"{_csv_list(CPU_GRID[name])} on the CPU; --quick: {_csv_list(QUICK_GRID[name])})",
        )
    g.add_argument(
        "--max-tokens",
        type=int,
        default=8192,
        help="skip cases with more tokens per step (default: %(default)s)",
    )
    g.add_argument("--quick", action="store_true", help="small grid for a fast smoke run")
    t = p.add_argument_group("timing")
    t.add_argument("--warmup", type=int, default=5, help="untimed calls (default: %(default)s)")
    t.add_argument("--repeats", type=int, default=20, help="timed calls (default: %(default)s)")
    t.add_argument(
        "--max-seconds",
        type=float,
        help="stop starting cases after this long; 0: no limit (default: 420 on CUDA, none on CPU)",
    )
    t.add_argument("--seed", type=int, default=0, help="torch and tree seed (default: 0)")
    o = p.add_argument_group("output")
    o.add_argument("--out", metavar="PATH", help="CSV to write (required unless --list)")
    o.add_argument(
        "--list",
        action="store_true",
        help="print the cases and their count, time none (with --device cuda: a GPU run's "
        "cases, on any machine)",
    )
    return p


def parse_list(flag: str, text: str, smallest: int) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or min(values) < smallest:
        kind = "positive" if smallest > 0 else "non-negative"
        raise UsageError(flag, f"expected {kind} integers separated by commas, got {text!r}")
    return list(dict.fromkeys(values))  # a size given twice is timed once (QA: 1,1,2)


def resolve_device(args: argparse.Namespace) -> torch.device:
    if args.device == "cuda" and not torch.cuda.is_available():
        if args.list:  # the GPU run's grid, printed where it will not run (QA: refused)
            return torch.device("cuda")
        raise UsageError("--device", "CUDA is not available")
    if args.device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if args.list:
            return torch.device("cpu")  # what a run here would time; nothing is timed
        # said, not a silent CPU run of a real model for hours (QA): a CPU table is a smoke
        # test, which simspec calibrate fit refuses
        print(
            "time_forward.py: no CUDA device: timing on the CPU, a smoke test that simspec "
            "calibrate fit refuses (give --device cuda on a GPU machine)",
            file=sys.stderr,
        )
        return torch.device("cpu")
    return torch.device(args.device)


def resolve(args: argparse.Namespace) -> tuple[ModelShape, Shard, Grid, torch.device]:
    """Check the arguments and fill in device-dependent defaults; raises UsageError."""
    if (args.model is None) == (args.config is None):
        raise UsageError("--model", "give exactly one of --model and --config")
    if args.model is not None and args.model not in MODELS:
        raise UsageError("--model", f"unknown model {args.model!r} (known: {', '.join(MODELS)})")
    shape = MODELS[args.model] if args.model else load_config(args.config)
    device = resolve_device(args)
    cuda = device.type == "cuda"
    for flag, value, smallest in (
        ("--tp", args.tp, 1),
        ("--max-tokens", args.max_tokens, 1),
        ("--warmup", args.warmup, 0),
        ("--repeats", args.repeats, 1),
        ("--seed", args.seed, 0),
        ("--max-seconds", args.max_seconds if args.max_seconds is not None else 0, 0),
    ):
        if value < smallest:
            raise UsageError(flag, f"must be at least {smallest}, got {value}")
    if args.cuda_graphs and not cuda:
        raise UsageError("--cuda-graphs", "needs a CUDA device (this run is on the CPU)")
    args.layers = args.layers if args.layers is not None else min(shape.num_hidden_layers, 4)
    if not 1 <= args.layers <= shape.num_hidden_layers:
        raise UsageError("--layers", f"must be in 1..{shape.num_hidden_layers}, got {args.layers}")
    args.draft_vocab = args.draft_vocab if args.draft_vocab is not None else shape.vocab_size
    if args.draft_vocab < 1:
        raise UsageError("--draft-vocab", f"must be positive, got {args.draft_vocab}")
    args.dtype = DTYPES[args.dtype or ("bf16" if cuda else "fp32")]
    if args.max_seconds is None:
        args.max_seconds = 420.0 if cuda else 0.0
    base = QUICK_GRID if args.quick else GPU_GRID if cuda else CPU_GRID
    lists = {
        name: parse_list(flag, getattr(args, name), smallest)
        if getattr(args, name) is not None
        else base[name]
        for name, (flag, smallest, _) in LIST_FLAGS.items()
    }
    grid = Grid(**lists, max_tokens=args.max_tokens)
    per_gpu = shard(shape, args.tp, args.draft_vocab)
    if args.out is None and not args.list:
        raise UsageError("--out", "required (or use --list)")
    if args.out is not None and not args.list:
        check_writable(args.out)
    return shape, per_gpu, grid, device


def check_writable(path: str) -> None:
    """Refuse an --out the table could not be written to, before minutes of timing (QA: a
    folder given as --out failed only at the end, the run's rows left in PATH.tmp)."""
    out = Path(path)
    if out.is_dir():
        raise UsageError("--out", f"{path} is a folder: give a file path (e.g. {path}/h100.csv)")
    folder = out.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the nearest existing folder: write_csv creates the rest
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError("--out", f"cannot write under {folder}")
    if out.exists() and not os.access(out, os.W_OK):
        raise UsageError("--out", f"{path} is not writable")
    if folder == out.parent:  # write_csv's own temporary file, made and removed: os.access
        # says yes to root whatever the file system allows (QA: /proc as root)
        probe = Path(path + ".tmp")
        try:
            probe.touch(exist_ok=False)
        except FileExistsError:
            return
        except OSError as exc:
            raise UsageError("--out", f"cannot write {path}: {exc.strerror or exc}") from None
        probe.unlink(missing_ok=True)


def print_header(
    args: argparse.Namespace, shape: ModelShape, meta: dict, n_cases: int, native: bool
) -> None:
    """What was run, how, and the caveats that go with the numbers."""
    print(
        f"time_forward.py {SCRIPT_VERSION}: {shape.name} on {meta['gpu_name']}, {meta['dtype']}, "
        f"torch {meta['torch_version']}, cuda graphs {'on' if args.cuda_graphs else 'off'}"
    )
    if args.layers < shape.num_hidden_layers:
        print(
            f"layers: built {args.layers} of {shape.num_hidden_layers}; forward/prefill times "
            f"scale the layer part by {shape.num_hidden_layers / args.layers:g} (embedding, "
            "final norm and LM head counted once)"
        )
    if args.tp > 1:
        print(
            f"tp={args.tp} emulated on one device: shapes divided by {args.tp}; "
            "no collectives timed"
        )
    causal = "enable_gqa + lower-right causal bias" if native else "packed GQA + bool mask"
    print(f"attention: torch SDPA on a dense KV cache; chain/prefill use {causal}")
    budget = f"{args.max_seconds:g} s budget" if args.max_seconds else "no time budget"
    print(f"cases: {n_cases} ({budget})", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    t0 = time.perf_counter()
    try:
        args = build_parser().parse_args(argv)
        shape, s, grid, device = resolve(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cases = build_cases(grid, s)
    if args.list:
        for c in cases:
            print(c.describe())
        print(f"{len(cases)} cases (cases that do not fit in memory are skipped when timing)")
        return 0
    torch.manual_seed(args.seed)
    meta = run_meta(args, shape, device)
    with torch.inference_mode():
        native = native_causal_works(s, device, args.dtype)
        print_header(args, shape, meta, len(cases), native)
        model = Model(s, args.layers, shape.rope_theta, device, args.dtype)
        timer = Timer(device, args.warmup, args.repeats, args.cuda_graphs)
        bench = Bench(model, shape, args.seed, native)
        outcome = run_cases(cases, bench, timer, meta, args.max_seconds, t0)
    try:
        write_csv(args.out, outcome.rows, outcome.truncated)
    except OSError as exc:  # QA: a full disk or an unwritable --out lost the run in a traceback
        kept = save_elsewhere(outcome, exc)
        print(f"error: --out: could not write {args.out} ({exc.strerror or exc}); {kept}",
              file=sys.stderr)  # fmt: skip
        return 2
    took = time.perf_counter() - t0
    cut = ", interrupted" if outcome.interrupted else ", truncated by --max-seconds"
    print(
        f"wrote {len(outcome.rows)} rows to {args.out} in {took:.1f} s "
        f"({outcome.skipped} skipped, {outcome.failed} failed"
        f"{cut if outcome.truncated else ''})"
    )
    if outcome.interrupted:
        return 130  # as a shell reports SIGINT: the table is partial (QA: it exited 0)
    return 1 if outcome.failed or not outcome.rows else 0


def save_elsewhere(outcome: Outcome, exc: OSError) -> str:
    """Where the rows of a run whose --out could not be written went instead: a file in the
    system's temporary folder, so minutes of GPU time are not lost with the error."""
    import tempfile

    if not outcome.rows:
        return "no rows were timed"
    fd, spare = tempfile.mkstemp(prefix="time_forward-", suffix=".csv")
    os.close(fd)
    try:
        write_csv(spare, outcome.rows, outcome.truncated)
    except OSError:
        return "the rows could not be saved elsewhere either"
    return f"its {len(outcome.rows)} rows are in {spare}"


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # before the first case: nothing timed, nothing written
        print("interrupted before any case was timed: nothing written", file=sys.stderr)
        sys.exit(130)
