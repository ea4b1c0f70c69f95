"""A scenario file with flags on top: reading the file, the one rule (a flag given wins), and
flags declared as a typed dataclass instead of a long parameter list."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simspec.catalog.tables import parse_json_or_yaml, read_input_text
from simspec.cli import options as opt
from simspec.cli.common import fail, spelling
from simspec.cli.method_flags import MethodFlags, preset_dataset
from simspec.config import (
    SERVING_FIELDS,
    Deployment,
    MethodConfig,
    current_spellings,
    deployment_fields,
)
from simspec.errors import InputError

MAX_CONFIG_BYTES = 1024 * 1024


def read_config(path: Path, flag: str = "--config") -> dict[str, Any]:
    """A YAML (or, by suffix, JSON) scenario file as a mapping of its fields, older spellings
    under their current names (a flag then replaces the field whichever spelling the file
    used)."""
    text = read_input_text(path, flag, MAX_CONFIG_BYTES)
    data = parse_json_or_yaml(text, path, flag)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(flag, "the file must hold a mapping of scenario fields")
    odd = [k for k in data if not isinstance(k, str)]
    if odd:
        raise InputError(flag, f"field names must be text, got {odd[0]!r}")
    return current_spellings(data)


def given(**flags: Any) -> dict[str, Any]:
    """The flags a user gave (None = not given), by the scenario field each one sets."""
    return {field: value for field, value in flags.items() if value is not None}


def overlay(file: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """A scenario file's fields with the given flags on top. A flag always wins; a section
    (``workload: {...}``) merges field by field, so a flag replaces only the field it sets."""
    out = dict(file)
    for field, value in flags.items():
        section = file.get(field) or {}
        if not isinstance(value, dict):
            out[field] = value
        elif isinstance(section, dict):
            out[field] = {**section, **value}
        # else the file's section is no mapping: left for the schema to reject by name
    return out


def with_preset_ids(data: dict[str, Any]) -> dict[str, Any]:
    """A scenario's model (and a grid's model axis) named by a Hugging Face id of a preset, as
    that preset (:func:`~simspec.catalog.models.preset_id`): presets and results use one name."""
    from simspec.catalog.models import id_precision, preset_id

    out = dict(data)
    if isinstance(out.get("model"), str):
        # a preset's -FP8 checkpoint id runs the preset at fp8 unless a precision is given
        if out.get("precision") is None and (weights := id_precision(out["model"])):
            out["precision"] = weights
        out["model"] = preset_id(out["model"])
    grid = out.get("grid")
    if isinstance(grid, dict) and isinstance(grid.get("model"), list):
        models = [preset_id(m) if isinstance(m, str) else m for m in grid["model"]]
        out["grid"] = {**grid, "model": models}
    return out


def with_profile_gpu(data: dict[str, Any]) -> dict[str, Any]:
    """A hardware profile given without a GPU runs on the GPU it was fitted on (QA: ``sweep
    --profile a100.yaml`` ran its A100 constants on the default H100's peaks, where validate
    applies a profile only to rows on its own GPU). Not for ``compare`` and ``calibrate
    bench``, whose runs' own gpu metadata says where they ran."""
    if not data.get("profile") or "gpu" in data:
        return data
    from simspec.catalog.hardware import load_profile

    return {**data, "gpu": load_profile(str(data["profile"])).gpu}


def with_flags(
    flags_type: type, omit: tuple[str, ...] = ()
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a command whose ``flags`` parameter is a dataclass of options: typer sees each
    of its fields as an option (in their place, in field order), and the command receives
    them as one typed ``flags`` object. ``omit``: fields the command cannot use, not offered
    (they keep their defaults)."""
    hints = typing.get_type_hints(flags_type, include_extras=True)
    names = {f.name for f in dataclasses.fields(flags_type)}
    unknown = set(omit) - names
    assert not unknown, f"with_flags: {flags_type.__name__} has no field {sorted(unknown)}"
    fields = [f for f in dataclasses.fields(flags_type) if f.name not in omit]
    options = [
        inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name]
        )
        for f in fields
    ]
    spellings = {f.name: spelling(f.name, hints[f.name]) for f in fields}

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        params = list(inspect.signature(command, eval_str=True).parameters.values())
        at = [p.name for p in params].index("flags")
        params[at : at + 1] = options

        @functools.wraps(command)
        def run(**kwargs: Any) -> Any:
            values = {f.name: kwargs.pop(f.name) for f in fields}
            for name, value in values.items():
                if isinstance(value, str) and not value.strip():
                    # QA: --speculative-config '' ran the default methods, as if not given
                    fail(
                        f"{spellings[name]}: is empty: give a value, or leave the flag out for "
                        "its default"
                    )
            return command(flags=flags_type(**values), **kwargs)

        run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]
        )
        return run

    return decorate


def scheduler_limits(flags: Any) -> dict[str, Any]:
    """The engine settings a command's ``--max-num-seqs`` / ``--max-num-batched-tokens`` /
    ``--gpu-memory-utilization`` / ``--async-scheduling`` / ``--max-model-len`` /
    ``--reserved-decode-tokens`` set (only those
    given): a scenario's ``scheduler`` fields."""
    return given(
        max_num_seqs=flags.max_num_seqs,
        max_num_batched_tokens=flags.max_num_batched_tokens,
        gpu_memory_utilization=flags.gpu_memory_utilization,
        async_scheduling=flags.async_scheduling,
        max_model_len=flags.max_model_len,
        reserved_decode_tokens=flags.reserved_decode_tokens,
    )


@dataclasses.dataclass(frozen=True)
class SchedulerFlags:
    """The engine's limits, on top of a scenario file's ``scheduler:`` (:func:`scheduler_limits`):
    the flags of every command that builds a deployment and runs it."""

    max_num_seqs: opt.MaxNumSeqs = None
    max_num_batched_tokens: opt.MaxNumBatchedTokens = None
    gpu_memory_utilization: opt.GpuMemoryUtilization = None
    max_model_len: opt.MaxModelLen = None
    async_scheduling: opt.AsyncScheduling = None
    reserved_decode_tokens: opt.ReservedDecodeTokens = None


@dataclasses.dataclass(frozen=True)
class ServingFlags:
    """What is served on what: the flags of every command that builds a deployment."""

    model: opt.Model = None
    gpu: opt.Gpu = None
    tp: opt.Tp = None
    ep: opt.Ep = None
    dp: opt.Dp = None
    engine: opt.Engine = None
    disaggregation_mode: opt.DisaggregationMode = None
    precision: opt.Precision = None
    kv_cache_dtype: opt.KvCacheDtype = None

    def serving_fields(self) -> dict[str, Any]:
        """The deployment fields these flags set (only those given)."""
        return deployment_fields(self, SERVING_FIELDS)


@dataclasses.dataclass(frozen=True)
class DeploymentFlags(MethodFlags, SchedulerFlags, ServingFlags):
    """The deployment and method flags of ``plan``, ``recommend``, ``fleet`` and ``policy``,
    which go on top of --config."""

    dataset: opt.Dataset = None
    temperature: opt.Temperature = None
    seed: opt.Seed = None
    profile: opt.Profile = None

    def deployment(self, config: Path | None) -> Deployment:
        """The scenario file's deployment with these flags on top; --token-trace, else
        --dataset, sets workload.lengths_from (a file's methods are :meth:`planned`'s)."""
        return self._deployment(self._scenario(config))

    def planned(
        self,
        config: Path | None,
        names: list[str] | None,
        default: list[str],
        flag: str,
        study_keys: tuple[str, ...] = (),
    ) -> tuple[Deployment, list[MethodConfig]]:
        """The deployment, and the methods to run on it (:meth:`MethodFlags.chosen`: the
        file's, unless ``names`` from ``flag`` or --speculative-config replace them).
        ``study_keys``: a study's own fields the command reads from the file itself (recommend's
        precision_target), not a deployment's; any other stays an error naming it."""
        data = self._scenario(config)
        dataset = preset_dataset(data.get("workload"), self.dataset)
        methods = self.chosen(data, names, default, dataset, flag)
        rest = {k: v for k, v in data.items() if k not in study_keys}
        return self._deployment(rest), [MethodConfig(**m) for m in methods]

    def _scenario(self, config: Path | None, replay: bool = False) -> dict[str, Any]:
        """The scenario file's fields with the deployment flags on top; ``replay``: the
        arrivals replay a trace, whose lengths are the requests' (--token-trace and --dataset
        then name acceptance only, not the workload's lengths)."""
        data = read_config(config) if config else {}
        flags = {
            **self.serving_fields(),
            **given(temperature=self.temperature, seed=self.seed, profile=self.profile),
        }
        if limits := scheduler_limits(self):  # merged into the file's scheduler section
            flags["scheduler"] = limits
        trace = self.checked_token_trace() or self.dataset
        if trace and not replay:
            flags["workload"] = {"lengths_from": trace}
        return with_profile_gpu(with_preset_ids(overlay(data, flags)))

    @staticmethod
    def _deployment(data: dict[str, Any]) -> Deployment:
        """The deployment a scenario's fields describe: its methods and a sweep's batch sizes
        are not a deployment's."""
        rest = {k: v for k, v in data.items() if k not in ("methods", "method", "batch_sizes")}
        return Deployment(**rest)
