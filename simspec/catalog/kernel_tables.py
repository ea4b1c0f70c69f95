"""Fitted kernel constants for large MoE / MLA models, read from the packaged data: the routed
experts' grouped GEMMs (``moe_kernels.yaml``), MLA decode attention (``mla_kernels.yaml``) and
DeepEP dispatch/combine (the ``deepep`` section of ``alltoall.yaml``). Each was fitted by
``calibration/fit_moe_kernels.py`` to AIConfigurator's measured tables; each lookup answers None
where no table covers the (GPU, engine, dtype), and the cost model then keeps its roofline."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from simspec.catalog.tables import packaged_table


@dataclass(frozen=True, slots=True)
class GroupedGemmFit:
    """One MoE kernel family on one GPU at one dtype (see
    :func:`~simspec.engine.costmodel.kernels.grouped_gemm_time`)."""

    kernel: str
    block_m: int
    block_n: int
    fixed_s: float
    per_pair_s: float
    compute_efficiency: float
    memory_efficiency: float
    compute: str  # the tensor-core dtype whose peak applies: bf16, fp8 or fp4
    weight_bytes: float
    sms: int
    # served over balanced routing by routed pairs per expert, (x, ratio) nodes
    # (:mod:`simspec.engine.costmodel.moe_routing`); empty: the fit was not made on balanced
    # routing, and the uniform expectation of touched experts stands
    routing: tuple[tuple[float, float], ...] = ()
    # the tile rows of a batch of at most as many tokens as the GPU's experts (the Triton
    # fused_moe picks its tile by the token count: kernels.grouped_gemm_time); 0: block_m always
    small_block_m: int = 0


@dataclass(frozen=True, slots=True)
class MlaDecodeFit:
    """MLA decode attention on one GPU under one engine and KV-cache dtype (see
    :func:`~simspec.engine.costmodel.kernels.mla_decode_time`)."""

    kernel: str
    block_m: int
    fixed_s: float
    per_seq_s: float
    compute_efficiency: float
    memory_efficiency: float


@dataclass(frozen=True, slots=True)
class DeepEpFit:
    """One DeepEP kernel (low-latency or normal) in one direction on one GPU type."""

    latency_s: float
    bandwidth_bytes_s: float
    bytes_per_element: float


def _key(*parts: str) -> str:
    return "/".join(parts)


@cache
def moe_kernel_fit(
    gpu: str, engine: str, precision: str, model_type: str = "", ep: int = 1
) -> GroupedGemmFit | None:
    """The grouped-GEMM fit of the kernel ``engine`` runs by default for experts at
    ``precision`` on ``gpu`` (simspec ids) for a model of ``model_type`` (its config key) at
    expert parallelism ``ep``; None where no table covers them. An engine that picks its own
    kernel for that architecture at EP 1 (``model_defaults``: SGLang's triton_kernels for
    GPT-OSS) is timed by that kernel's fit, whichever framework's table measured it. An engine
    version profile (engines.yaml ``base``) whose own table stops short runs its engine's."""
    table: dict[str, Any] = packaged_table("moe_kernels.yaml")
    g = table["gpus"].get(gpu)
    framework = table["engines"].get(engine)
    # an architecture that ships the precision in its own format (gpt-oss's MXFP4 as int4-w)
    dtype = table.get("model_dtypes", {}).get(f"{precision}/{model_type}")
    dtype = dtype or table["dtypes"].get(precision)
    if g is None or framework is None or dtype is None:
        return None
    owner = table.get("model_defaults", {}).get(_key(g["table"], framework, dtype, model_type))
    if owner is not None and ep == 1:
        framework, kernel = owner.split("/", 1)
        return _grouped_fit(table, g, framework, kernel, dtype)
    kernel = table["defaults"].get(_key(g["table"], framework, dtype))
    if kernel is None:
        from simspec.catalog.hardware import load_engine

        base = load_engine(engine).base
        return moe_kernel_fit(gpu, base, precision, model_type, ep) if base else None
    # a kernel that runs the experts at other activations (MXFP4 x MXFP8) has that dtype's fit
    runs_as = table.get("runs_as", {}).get(_key(g["table"], framework, dtype), dtype)
    return _grouped_fit(table, g, framework, str(kernel), runs_as)


def borrowed_moe_fit(
    gpu: str, engine: str, precision: str, model_type: str = "", ep: int = 1
) -> tuple[str, GroupedGemmFit] | None:
    """For an NVIDIA GPU without a fit of its own (:func:`moe_kernel_fit` None): the fit of the
    nearest GPU with tables that is at least as fast in HBM bandwidth and in the tensor peak the
    kernel computes at (the smallest product of the two ratios), else, above every tabled GPU,
    of the nearest one it is at least as fast as; as (its id, the fit), None where there is
    neither (and for AMD GPUs: the tables time NVIDIA kernels). The cost model prices the
    kernel with that GPU's measured efficiencies and fixed costs at this GPU's own peaks, so a
    weaker GPU is never priced faster than a stronger one's measurement, nor a stronger one
    slower than a weaker one's (QA: the roofline put an A100, an H100 PCIe and a B300 ahead of
    the H100 SXM and B200 tables, up to 1.55x, and a GB200 behind B200's). The fit keeps the
    other GPU's SM count for its waves."""
    from simspec.catalog.hardware import borrows_moe_fits, load_gpu

    mine = load_gpu(gpu)
    if not borrows_moe_fits(mine):
        return None
    faster: tuple[float, str, GroupedGemmFit] | None = None
    slower: tuple[float, str, GroupedGemmFit] | None = None
    for other_id in packaged_table("moe_kernels.yaml")["gpus"]:
        if other_id == gpu:
            continue
        fit = moe_kernel_fit(other_id, engine, precision, model_type, ep)
        if fit is None:
            continue
        other = load_gpu(other_id)
        own_peak, their_peak = tensor_peak(mine, fit.compute), tensor_peak(other, fit.compute)
        if own_peak is None or their_peak is None:
            continue
        bandwidth = other.hbm_bandwidth_bytes_s / mine.hbm_bandwidth_bytes_s
        peak = their_peak / own_peak
        if bandwidth >= 1 and peak >= 1 and (faster is None or bandwidth * peak < faster[0]):
            faster = (bandwidth * peak, other_id, fit)
        if bandwidth <= 1 and peak <= 1 and (slower is None or bandwidth * peak > slower[0]):
            slower = (bandwidth * peak, other_id, fit)
    best = faster or slower
    return None if best is None else (best[1], best[2])


def tensor_peak(gpu: Any, compute: str) -> float | None:
    """The dense tensor peak (FLOP/s) of ``gpu`` at a kernel's compute dtype; None: it has none."""
    return {
        "bf16": gpu.bf16_dense_flops,
        "fp8": gpu.fp8_dense_flops,
        "fp4": gpu.fp4_dense_flops,
    }.get(compute)


def _grouped_fit(
    table: dict[str, Any], g: dict[str, Any], framework: str, kernel: str, dtype: str
) -> GroupedGemmFit | None:
    """The fit of ``kernel`` as ``framework``'s table measured it at ``dtype`` on GPU ``g``."""
    fit = table["fits"].get(_key(g["table"], framework, kernel, dtype))
    if fit is None:
        return None
    return GroupedGemmFit(
        kernel=kernel,
        block_m=int(fit["block_m"]),
        block_n=int(fit["block_n"]),
        fixed_s=float(fit["fixed_s"]),
        per_pair_s=float(fit["per_pair_s"]),
        compute_efficiency=float(fit["compute_efficiency"]),
        memory_efficiency=float(fit["memory_efficiency"]),
        compute=str(fit["compute"]),
        weight_bytes=float(fit["weight_bytes"]),
        sms=int(g["sms"]),
        routing=_routing(table, framework, fit),
        small_block_m=int(fit.get("small_block_m", 0)),
    )


def _routing(
    table: dict[str, Any], framework: str, fit: dict[str, Any]
) -> tuple[tuple[float, float], ...]:
    """The framework's served-routing ratio nodes for a kernel fitted on balanced routing;
    none for a fit on uniform routing (vLLM V0's, which carries ``fitted``)."""
    if "fitted" in fit:
        return ()
    nodes = table.get("routing", {}).get(framework, [])
    return tuple((float(x), float(r)) for x, r in nodes)


@cache
def mla_decode_fit(gpu: str, engine: str, kv_bytes: float) -> MlaDecodeFit | None:
    """The MLA decode-attention fit for ``engine`` on ``gpu`` with a KV cache of ``kv_bytes``
    per element (1: fp8, 2: bf16); None where no table covers them."""
    table: dict[str, Any] = packaged_table("mla_kernels.yaml")
    g = table["gpus"].get(gpu)
    framework = table["engines"].get(engine)
    kv = {1.0: "fp8", 2.0: "bfloat16"}.get(float(kv_bytes))
    if g is None or framework is None or kv is None:
        return None
    fit = table["fits"].get(_key(g, framework, kv))
    if fit is None:
        return None
    return MlaDecodeFit(
        kernel=str(fit["kernel"]),
        block_m=int(fit["block_m"]),
        fixed_s=float(fit["fixed_s"]),
        per_seq_s=float(fit["per_seq_s"]),
        compute_efficiency=float(fit["compute_efficiency"]),
        memory_efficiency=float(fit["memory_efficiency"]),
    )


@cache
def deepep_fits(gpu: str, ep: int) -> dict[str, DeepEpFit] | None:
    """DeepEP's kernels on ``gpu`` at expert-parallel size ``ep``, keyed
    ``{low_latency,normal}_{dispatch,combine}`` (with ``max_low_latency_tokens``' threshold
    read by :func:`deepep_low_latency_limit`); None where no table covers them (one 8-GPU node:
    ep 8; past it, DeepEP's internode low-latency times at 16-256 GPUs, of which simspec's tp
    reaches 64, the normal kernels no faster per element than those)."""
    table: dict[str, Any] = packaged_table("alltoall.yaml").get("deepep", {})
    fits = table.get("fits", {}).get(table.get("gpus", {}).get(gpu, ""))
    internode = table.get("internode_low_latency", {})
    if fits is None or (ep not in table.get("ep", []) and ep not in internode.get("ep", {})):
        return None
    out = {
        name: DeepEpFit(
            float(f["latency_s"]), float(f["bandwidth_bytes_s"]), float(f["bytes_per_element"])
        )
        for name, f in fits.items()
    }
    if ep in table.get("ep", []):
        return out
    # past one server: the low-latency kernels at DeepEP's internode times (its README at the
    # reference shape), from this GPU's own fixed cost; the normal ones no faster per element
    ref = internode["ep"][ep]
    for phase in ("dispatch", "combine"):
        own = out[f"low_latency_{phase}"]
        elements = internode["tokens_per_rank"] * internode["top_k"] * internode["hidden"]
        nbytes = elements * own.bytes_per_element
        rate = nbytes / max(float(ref[f"{phase}_s"]) - own.latency_s, 1e-9)
        low = out[f"low_latency_{phase}"] = DeepEpFit(own.latency_s, rate, own.bytes_per_element)
        # the normal kernels move the same elements over the same network: never faster per
        # element than the low-latency ones here (a prompt step above the low-latency limit
        # had cost less than a decode below it)
        normal = out[f"normal_{phase}"]
        per_element = min(
            normal.bandwidth_bytes_s / normal.bytes_per_element,
            low.bandwidth_bytes_s / low.bytes_per_element,
        )
        out[f"normal_{phase}"] = DeepEpFit(
            max(normal.latency_s, low.latency_s),
            per_element * normal.bytes_per_element,
            normal.bytes_per_element,
        )
    return out


def deepep_low_latency_limit() -> int:
    """Tokens per rank up to which the low-latency kernels run (see alltoall.yaml)."""
    return int(packaged_table("alltoall.yaml")["deepep"]["max_low_latency_tokens_per_rank"])
