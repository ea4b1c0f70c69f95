"""Weight precisions and KV-cache dtypes: bytes per element, compute dtype, and the measured GEMM
speed of each precision relative to bf16 (data and sources: simspec/data/precision.yaml).

The cost model (:mod:`simspec.engine.costmodel`) asks :func:`effective_precision` what a GPU
actually runs (FP8 weights on a GPU without FP8 tensor cores run weight-only, as vLLM's FP8
Marlin path does) and :func:`gemm_speed_ratio` how much faster than bf16 the measured kernels
were at that many tokens; the KV plan asks :func:`kv_cache_bytes`.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from functools import cache
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from simspec.catalog.hardware import GpuSpec, gpu_ids, load_gpu
from simspec.catalog.tables import packaged_table
from simspec.config import KV_CACHE_ALIASES, KvCacheDtype, WeightPrecision
from simspec.errors import InputError

Compute = Literal["bf16", "fp8", "fp4"]
PRECISIONS: tuple[str, ...] = get_args(WeightPrecision)
KV_CACHE_DTYPES: tuple[str, ...] = get_args(get_args(KvCacheDtype)[0])


class SpeedCurve(BaseModel):
    """(bf16 GEMM time) / (time at a precision) by token count, on one GPU architecture: the
    geometric mean, at each measured M, of the published tables that measured it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    arch: str
    tokens: tuple[float, ...]  # ascending
    ratios: tuple[float, ...]
    sources: tuple[str, ...]

    @property
    def max_tokens(self) -> float:
        return self.tokens[-1]

    def ratio(self, tokens: float) -> float:
        """Linear in log2(M) between measured M; the end values held outside them."""
        ts, rs = self.tokens, self.ratios
        if tokens <= ts[0]:
            return rs[0]
        if tokens >= ts[-1]:
            return rs[-1]
        i = bisect_right(ts, tokens)
        x0, x1 = math.log2(ts[i - 1]), math.log2(ts[i])
        w = (math.log2(tokens) - x0) / (x1 - x0)
        return rs[i - 1] + w * (rs[i] - rs[i - 1])


class PrecisionSpec(BaseModel):
    """One weight precision as a GPU runs it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    weight_bytes: float = Field(gt=0)
    compute: Compute
    source: str
    curves: dict[str, SpeedCurve] = Field(default_factory=dict)
    weight_only: PrecisionSpec | None = None  # what runs where compute dtype has no tensor cores
    # architectures whose tensor cores take this format (None: any with the compute dtype's);
    # on a weight-only form, the architectures its kernel runs on
    native_archs: tuple[str, ...] | None = None
    # engine profiles that run the weight-only form (None: every engine, as for FP8 on Ampere)
    engines: tuple[str, ...] | None = None
    # what a run at this precision should know about its kernel data ("" : nothing), said with
    # the run's notes where it runs as named
    caveat: str = ""
    # a precision whose measured GEMM time this one's never beats at the same M: the same
    # kernel moving at least as many bytes (FP8 weight-only runs int4-w's Marlin kernel)
    never_faster_than: str | None = None
    # checkpoints at this precision keep the model's MTP modules unquantized, in bf16
    mtp_unquantized: bool = False

    def curve(self, arch: str) -> SpeedCurve | None:
        return self.curves.get(arch)


def precision_ids() -> list[str]:
    return list(PRECISIONS)


def load_precision(name: str, field: str = "precision") -> PrecisionSpec:
    """The packaged precision ``name``; an InputError naming ``field`` for any other."""
    spec = _precisions().get(name) if isinstance(name, str) else None
    if spec is None:
        raise InputError(
            field, f"unknown precision {name!r}; choose one of {', '.join(PRECISIONS)}"
        )
    return spec


def has_fp8_tensor_cores(gpu: GpuSpec) -> bool:
    """Whether the GPU multiplies FP8 natively (gpus.yaml fp8_dense_flops is not null)."""
    return gpu.fp8_dense_flops is not None


def runs_natively(spec: PrecisionSpec, gpu: GpuSpec) -> bool:
    """Whether ``gpu``'s tensor cores multiply ``spec``'s compute dtype (and, for a format
    tied to an architecture, as NVFP4 is to Blackwell, whether it is that architecture)."""
    peak = {"bf16": gpu.bf16_dense_flops, "fp8": gpu.fp8_dense_flops, "fp4": gpu.fp4_dense_flops}
    if peak[spec.compute] is None:
        return False
    return spec.native_archs is None or gpu.arch in spec.native_archs


def effective_precision(spec: PrecisionSpec, gpu: GpuSpec) -> PrecisionSpec:
    """What ``gpu`` runs for ``spec``: FP8 (FP4) weights on a GPU without FP8 (FP4) tensor
    cores run weight-only (bf16 compute), as vLLM's FP8 (FP4) Marlin kernels do; else
    ``spec``."""
    if not runs_natively(spec, gpu):
        only = spec.weight_only
        if only is None or (only.native_archs is not None and gpu.arch not in only.native_archs):
            raise InputError(
                "precision",
                f"{_why_not_native(spec, gpu)} and no kernel runs {spec.name} weight-only there",
            )
        return only
    return spec


def _why_not_native(spec: PrecisionSpec, gpu: GpuSpec) -> str:
    """Why ``gpu`` does not multiply ``spec`` on its tensor cores: none of that dtype, or
    cores of that width that take another format (QA: an MI355X, whose FP4 cores take MXFP4,
    was said to have none for NVFP4)."""
    peak = {"bf16": gpu.bf16_dense_flops, "fp8": gpu.fp8_dense_flops, "fp4": gpu.fp4_dense_flops}
    if peak[spec.compute] is None:
        return f"{gpu.id} ({gpu.arch}) has no {spec.compute.upper()} tensor cores for {spec.name}"
    archs = ", ".join(spec.native_archs or ())
    return (
        f"{gpu.id} ({gpu.arch})'s {spec.compute.upper()} tensor cores do not take {spec.name} "
        f"(it runs natively on {archs} only)"
    )


def _native_gpus(spec: PrecisionSpec) -> list[str]:
    """The catalog's GPUs that multiply ``spec`` on their own tensor cores."""
    return [g for g in gpu_ids() if runs_natively(spec, load_gpu(g))]


def check_engine_runs(spec: PrecisionSpec, gpu: GpuSpec, engine: str, field: str) -> None:
    """An InputError naming ``field`` where ``engine`` has no kernel for what ``gpu`` runs of
    ``spec``: NVFP4 on a GPU without FP4 tensor cores runs weight-only under vLLM (its FP4
    Marlin kernel) and nowhere else, FP8 without FP8 tensor cores under vLLM and SGLang
    (precision.yaml says why)."""
    eff = effective_precision(spec, gpu)
    if eff.engines is None or engine in eff.engines:
        return
    natives = ", ".join(_native_gpus(spec)) or "none in the catalog"
    raise InputError(
        field,
        f"{_why_not_native(spec, gpu)}, and engine {engine} has no weight-only kernel for it; "
        f"only {', '.join(eff.engines)} run {spec.name} weight-only there (--engine "
        f"{eff.engines[0]}), or choose a GPU that runs it natively ({natives})",
    )


def precision_note(spec: PrecisionSpec, gpu: GpuSpec) -> str:
    """One line on how ``gpu`` runs ``spec`` when that is not what its name says, or when no
    kernel timings back it ("" for bf16, and for a measured precision run natively)."""
    if spec.name == "bf16":
        return ""
    eff = effective_precision(spec, gpu)
    parts = []
    if eff is not spec:
        bits = "W8A16" if spec.compute == "fp8" else "W4A16"
        parts.append(
            f"{gpu.id} has no {spec.compute.upper()} tensor cores: {spec.name} weights run "
            f"weight-only ({bits}, bf16 compute), as vLLM's {spec.compute.upper()} Marlin "
            "kernel runs them"
        )
    if eff is spec and spec.caveat:
        parts.append(spec.caveat)
    if eff.curve(gpu.arch) is None:
        bound = ""
        if eff.never_faster_than is not None:
            bound = f", never faster than {eff.never_faster_than}'s measured kernel (the same one)"
        parts.append(
            f"no {eff.name} kernel timings for {gpu.arch} GPUs: its GEMMs are the roofline at "
            f"{eff.weight_bytes:g} bytes per weight and the {eff.compute} peak{bound}"
        )
    return "; ".join(parts)


def compute_flops(spec: PrecisionSpec, gpu: GpuSpec) -> float:
    """Dense tensor peak the GEMMs of ``spec`` run at on ``gpu`` (after the weight-only
    fallback): the FP8 (FP4) peak for FP8 (FP4) compute, else the bf16 peak."""
    eff = effective_precision(spec, gpu)
    if eff.compute == "fp8":
        assert gpu.fp8_dense_flops is not None  # effective_precision checked it
        return gpu.fp8_dense_flops
    if eff.compute == "fp4":
        assert gpu.fp4_dense_flops is not None  # likewise
        return gpu.fp4_dense_flops
    return gpu.bf16_dense_flops


def gemm_speed_ratio(spec: PrecisionSpec, gpu: GpuSpec, tokens: float) -> float | None:
    """Measured (bf16 GEMM time) / (time at ``spec``) at ``tokens`` rows on ``gpu``'s
    architecture, or None where no kernel was measured there (the roofline then decides).
    Above the largest measured M this is the last measured value; the cost model never lets it
    exceed what the precision's roofline allows. bf16 is 1.0 by definition."""
    eff = effective_precision(spec, gpu)
    if eff.name == "bf16":
        return 1.0
    curve = eff.curve(gpu.arch)
    return None if curve is None else curve.ratio(tokens)


def normalize_kv_cache_dtype(value: str, field: str = "kv_cache_dtype") -> str:
    """``auto``, ``bf16`` or ``fp8``, accepting vLLM's spellings (``bfloat16``, ``fp8_e4m3``,
    ``fp8_e5m2``)."""
    name = KV_CACHE_ALIASES.get(value, value) if isinstance(value, str) else value
    if name not in KV_CACHE_DTYPES:
        allowed = [*KV_CACHE_DTYPES, *KV_CACHE_ALIASES]
        raise InputError(
            field, f"unknown KV cache dtype {value!r}; choose one of {', '.join(allowed)}"
        )
    return name


def engine_kv_cache_dtype(kv_cache_dtype: str, engine_family: str, sparse: bool, arch: str) -> str:
    """``kv_cache_dtype`` as the engine runs it: ``auto`` is the activations' dtype, but for a
    DeepSeek sparse-attention (DSA) model (``sparse``) the engines pick an FP8 cache
    themselves: vLLM on every GPU (DeepseekV32ForCausalLM.verify_and_update_config turns
    "auto" into "fp8_ds_mla"; vllm/model_executor/models/config.py, 0.11.0 wheel), SGLang on
    Blackwell (ServerArgs._set_default_nsa_kv_cache_dtype: "fp8_e4m3" on SM 10 and above,
    "bfloat16" below; 0.5.10 wheel) (QA: DeepSeek-V3.2's cache sized in bf16 on vLLM, 1.63x
    too few tokens)."""
    name = normalize_kv_cache_dtype(kv_cache_dtype)
    if name != "auto" or not sparse:
        return name
    if engine_family == "vllm" or (engine_family == "sglang" and arch == "blackwell"):
        return "fp8"
    return name


def kv_cache_bytes(kv_cache_dtype: str, activation_bytes: float = 2) -> float:
    """Bytes per cached K or V element: ``auto`` is the model's activation dtype. Whole
    numbers stay ints, so a bf16 cache sizes exactly as it did before this option existed."""
    name = normalize_kv_cache_dtype(kv_cache_dtype)
    nbytes = packaged_table("precision.yaml")["kv_cache_dtypes"][name]["bytes"]
    return activation_bytes if nbytes is None else nbytes


@cache
def _precisions() -> dict[str, PrecisionSpec]:
    raw = packaged_table("precision.yaml")["precisions"]
    return {name: _spec(name, entry) for name, entry in raw.items()}


def weight_only_name(name: str) -> str:
    """The name of ``name``'s weight-only form (what a GPU without its tensor cores runs), as
    kernel tables key it (moe_kernels.yaml dtypes)."""
    return f"{name} (weight-only)"


def _spec(name: str, entry: dict) -> PrecisionSpec:
    only = entry.get("weight_only")
    return PrecisionSpec(
        name=name,
        weight_bytes=entry["weight_bytes"],
        compute=entry["compute"],
        source=" ".join(str(entry["source"]).split()),
        curves={arch: _curve(arch, tables) for arch, tables in (entry.get("curves") or {}).items()},
        # the weight-only form reads the same checkpoints
        weight_only=_spec(
            weight_only_name(name),
            {**only, "mtp_unquantized": entry.get("mtp_unquantized", False)},
        )
        if only
        else None,
        native_archs=tuple(entry["native_archs"]) if "native_archs" in entry else None,
        engines=tuple(entry["engines"]) if "engines" in entry else None,
        caveat=" ".join(str(entry.get("caveat", "")).split()),
        never_faster_than=entry.get("never_faster_than"),
        mtp_unquantized=bool(entry.get("mtp_unquantized", False)),
    )


def _curve(arch: str, tables: list[dict]) -> SpeedCurve:
    """Pool the tables: at each M the geometric mean of every cell measured there."""
    logs: dict[float, list[float]] = {}
    for table in tables:
        # same FLOPs on both sides: the ratio of rates is the inverse ratio of times
        rows = [(m, p / b) for m, b, p in table.get("tflops", [])]
        rows += [(m, s) for m, s in table.get("speedup", [])]
        for m, r in rows:
            logs.setdefault(float(m), []).append(math.log(r))
    tokens = tuple(sorted(logs))
    ratios = tuple(math.exp(sum(logs[m]) / len(logs[m])) for m in tokens)
    sources = tuple(" ".join(str(t["source"]).split()) for t in tables)
    return SpeedCurve(arch=arch, tokens=tokens, ratios=ratios, sources=sources)
