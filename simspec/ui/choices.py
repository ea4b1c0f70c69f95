"""What each sidebar widget offers: the parallel degrees, precisions and KV-cache dtypes the
deployment takes on the chosen GPU and engine, and how the page names them (the checks are the
CLI's: a choice offered here is one the command line runs)."""

from __future__ import annotations

from collections.abc import Callable

from annotated_types import Le

from simspec.catalog.hardware import load_engine, load_gpu
from simspec.catalog.models import load_model
from simspec.catalog.precision import (
    PRECISIONS,
    check_engine_runs,
    effective_precision,
    load_precision,
    precision_note,
)
from simspec.config import Deployment, check_tp
from simspec.errors import InputError
from simspec.studies.model_facts import precision as checkpoint_precision

_DEPLOY = Deployment.model_fields


def _accepts(check: Callable[[int], object], value: int) -> bool:
    try:
        check(value)
    except ValueError:
        return False
    return True


def tp_choices() -> list[int]:
    """The tensor-parallel degrees ``--tp`` takes: the Deployment's powers of two up to its
    bound (64, eight 8-GPU nodes; DeepSeek-V3 in bf16 activations on H100s needs 16, two)."""
    top = next(m.le for m in _DEPLOY["tp"].metadata if isinstance(m, Le))
    return [tp for tp in range(1, top + 1) if _accepts(check_tp, tp)]


def ep_choices(model: str, tp: int) -> list[int]:
    """Expert parallelism the deployment takes at ``tp``: 1 (experts sliced over the tp GPUs),
    or tp (whole experts spread over them) for a model that has experts."""
    return [1, tp] if tp > 1 and load_model(model).is_moe else [1]


def dp_choices(engine: str, tp: int, model: str | None = None) -> list[int]:
    """Data-parallel attention ranks at ``tp``: the divisors of tp on an engine that runs DP
    attention (sglang, vllm) for ``model`` with experts (None: any), else 1 (QA: a dense
    model was offered DP 2, then refused it)."""
    if not load_engine(engine).dp_attention or (model is not None and not load_model(model).is_moe):
        return [1]
    return [d for d in range(1, tp + 1) if tp % d == 0]


def disaggregation_choices(engine: str) -> list[str]:
    """The serving modes ``engine`` runs: one replica that prefills and decodes, and the decode
    instance of a prefill/decode-disaggregated deployment where the engine serves one
    (engines.yaml ``pd_disaggregation``)."""
    return ["null", "decode"] if load_engine(engine).flag("pd_disaggregation") else ["null"]


def precision_choices(gpu: str, engine: str | None = None) -> list[str | None]:
    """The weight precisions ``--precision`` takes that ``gpu`` runs (FP8 weight-only where it
    has no FP8 tensor cores; NVFP4 weight-only there only under an engine with that kernel,
    when ``engine`` is given), after None: the checkpoint's own, the CLI's default."""
    spec = load_gpu(gpu)
    runs: list[str | None] = [None]
    for name in PRECISIONS:
        try:
            effective_precision(load_precision(name), spec)
            if engine is not None:
                check_engine_runs(load_precision(name), spec, engine, "precision")
        except InputError:
            continue
        runs.append(name)
    return runs


def precision_label(model: str, precision: str | None) -> str:
    """A precision choice as the page names it: None is the checkpoint's, by its dtype."""
    if precision is None:
        return f"checkpoint's ({checkpoint_precision(load_model(model))})"
    return precision


def precision_caveat(precision: str | None, gpu: str) -> str:
    """How ``gpu`` runs ``precision`` when that is not what its name says, or when no kernel
    timings back it, as the sweep notes it; "" when nothing needs saying (the checkpoint's)."""
    if precision is None:
        return ""
    return precision_note(load_precision(precision), load_gpu(gpu))


def kv_cache_label(dtype: str) -> str:
    """A KV-cache dtype as the page names it: auto is the model's activation dtype."""
    return "auto (the model's, bf16)" if dtype == "auto" else dtype
