"""Kernel-level times where the real kernels depart from the roofline, with constants fitted to
measured tables (:mod:`simspec.catalog.kernel_tables`; fitted by
``calibration/fit_moe_kernels.py``, which times the same formulas).

- :func:`grouped_gemm_time`: a MoE layer's routed experts as a fused / grouped GEMM kernel runs
  them (vLLM fused_moe Triton, SGLang fused_moe_triton, DeepGEMM, TRT-LLM / FlashInfer CUTLASS).
  Each touched expert's tokens form row blocks of the kernel's block M (vLLM
  ``moe_align_block_size`` pads every expert's token list to BLOCK_SIZE_M, fused_moe.py;
  DeepGEMM's contiguous layout aligns each group to its block M), so at few tokens per expert
  the tensor cores multiply mostly padding; the output tiles run in waves over the SMs (a
  partial last wave costs a whole one); the weights of every touched expert stream once; and
  the routing kernels (top-k, align, activation, sum) add a fixed cost and one per routed pair.
  The Triton fused_moe of vLLM and SGLang picks its tile by the batch's token count M
  (``try_get_optimal_moe_config``: the tuned config nearest M, else ``get_default_config``,
  whose unquantized branch runs 16 rows where M <= E, the layer's experts), so a fit of that
  kernel for bf16 experts carries that small tile (``small_block_m``) beside the one its
  larger batches run.
- :func:`mla_decode_time`: MLA decode attention (FlashAttention-3 / FlashMLA / TRT-LLM MLA):
  the query heads (times the query tokens of a verify step) are one tile of block-M rows per
  sequence, padded (FlashMLA and FA3 use 64-row tiles), and every sequence pays a fixed
  scheduling cost; the latent stream and the padded FLOPs overlap (the slower one counts).
- :func:`deepep_time`: one DeepEP dispatch or combine (a fixed cost plus bytes over a fitted
  bandwidth).
"""

from __future__ import annotations

import math

from simspec.catalog.kernel_tables import DeepEpFit, GroupedGemmFit, MlaDecodeFit


def grouped_gemm_time(
    fit: GroupedGemmFit,
    hidden: int,
    width: int,
    pairs: float,
    touched: float,
    sms: int,
    compute_rate: float,
    memory_rate: float,
    weight_bytes: float,
    tokens: float = 0.0,
    experts: float = 0.0,
) -> float:
    """Seconds of one MoE layer's routed experts on one GPU: ``pairs`` (token, expert) pairs
    over ``touched`` experts whose gate-up GEMM is (hidden x 2 width) and down GEMM (width x
    hidden), at the GPU's peak ``compute_rate`` (FLOP/s) and ``memory_rate`` (B/s) for the
    kernel's dtype. ``tokens`` (the kernel's M) and ``experts`` (the experts on this GPU) pick
    the fit's small tile where it has one (0: its block_m)."""
    if pairs <= 0 or touched <= 0:
        return 0.0
    block_m, block_n = fit.block_m, fit.block_n
    if fit.small_block_m and 0 < tokens <= experts:
        block_m = fit.small_block_m
    row_blocks = touched * math.ceil(pairs / touched / block_m - 1e-9)
    per_sm = compute_rate * fit.compute_efficiency / sms
    compute = 0.0
    for d_in, d_out in ((hidden, 2 * width), (width, hidden)):
        tiles = row_blocks * math.ceil(d_out / block_n)
        waves = math.ceil(tiles / sms - 1e-9)
        compute += waves * 2.0 * block_m * block_n * d_in / per_sm
    nbytes = touched * 3.0 * hidden * width * weight_bytes + 2.0 * pairs * (2 * hidden + 3 * width)
    memory = nbytes / (memory_rate * fit.memory_efficiency)
    return fit.fixed_s + fit.per_pair_s * pairs + max(compute, memory)


def mla_decode_time(
    fit: MlaDecodeFit,
    seqs: int,
    rows_per_seq: float,
    sum_kv: float,
    latent: int,
    value_latent: int,
    kv_bytes: float,
    compute_rate: float,
    memory_rate: float,
) -> float:
    """Seconds of one layer's MLA decode attention on one GPU: ``seqs`` sequences, each with
    ``rows_per_seq`` query rows (heads per GPU x query tokens), reading ``sum_kv`` cached
    latents in all."""
    if seqs <= 0:
        return 0.0
    rows = math.ceil(rows_per_seq / fit.block_m - 1e-9) * fit.block_m
    flops = 2.0 * rows * (latent + value_latent) * sum_kv
    nbytes = kv_bytes * latent * sum_kv
    memory = nbytes / (memory_rate * fit.memory_efficiency)
    return (
        fit.fixed_s
        + fit.per_seq_s * seqs
        + max(memory, flops / (compute_rate * fit.compute_efficiency))
    )


def deepep_time(fit: DeepEpFit, tokens_per_rank: float, hidden: int, top_k: int) -> float:
    """Seconds of one DeepEP dispatch or combine for ``tokens_per_rank`` tokens of ``hidden``
    elements, each sent to ``top_k`` experts, at ``fit.bytes_per_element``."""
    if tokens_per_rank <= 0:
        return 0.0
    nbytes = tokens_per_rank * top_k * hidden * fit.bytes_per_element
    return fit.latency_s + nbytes / fit.bandwidth_bytes_s
