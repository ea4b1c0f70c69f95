"""Presets as data: GPUs, model shapes, hardware profiles and engine profiles.

Every value lives in a YAML file under ``simspec/data`` next to the source it was read from;
this module only validates and loads them. A model can also come from a Hugging Face
``config.json`` given by path.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simspec.errors import InputError

BYTES_PER_PARAM = 2  # bf16/fp16 weights and KV cache


class GpuSpec(BaseModel):
    """Datasheet numbers for one GPU (per device)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    name: str
    bf16_dense_flops: float = Field(gt=0)
    hbm_bandwidth_bytes_s: float = Field(gt=0)
    memory_bytes: float = Field(gt=0)
    interconnect_bandwidth_bytes_s: float = Field(gt=0)
    source: str


class ModelShape(BaseModel):
    """Shapes of a Llama-style decoder (names follow Hugging Face ``config.json``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    id: str
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    max_position_embeddings: int = Field(default=4096, gt=0)
    hf_id: str = ""
    source: str = ""

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            if "num_key_value_heads" not in data or data["num_key_value_heads"] is None:
                data["num_key_value_heads"] = data.get("num_attention_heads")
            hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
            # only from numbers: anything else is left for validation to name
            if (
                data.get("head_dim") is None
                and type(hidden) is int
                and type(heads) is int
                and heads > 0
            ):
                data["head_dim"] = hidden // heads
        return data

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """Weights of one decoder layer: QKV, O, gate+up, down (norm weights are negligible)."""
        h, i = self.hidden_size, self.intermediate_size
        return h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h + 3 * h * i

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        head = 0 if self.tie_word_embeddings else self.embedding_params
        return self.num_hidden_layers * self.layer_params + self.embedding_params + head

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for every layer, before tensor-parallel sharding."""
        return 2 * self.num_hidden_layers * self.kv_dim * BYTES_PER_PARAM

    def kv_dim_per_gpu(self, tp: int) -> int:
        """KV width on one GPU: heads split over tp, replicated when there are fewer than tp."""
        return max(self.num_key_value_heads // tp, 1) * self.head_dim

    def kv_bytes_per_token_per_gpu(self, tp: int, layers: int | None = None) -> int:
        """K and V of ``layers`` (default: all) layers for one token on one GPU."""
        n = self.num_hidden_layers if layers is None else layers
        return 2 * n * self.kv_dim_per_gpu(tp) * BYTES_PER_PARAM


class Sourced(BaseModel):
    """A number with the place it came from.

    ``basis`` says how it was obtained: ``measured`` (fitted to timing tables), ``datasheet``
    (a vendor number or derived from one), ``transferred`` (fitted on another GPU and applied
    here), ``assumed`` or ``estimate``; empty where the source says it all.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    value: float
    source: str
    basis: str = ""


class SourcedParams(BaseModel):
    """A named set of sourced numbers; subclasses list the keys they require."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    params: dict[str, Sourced]
    REQUIRED: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _require(self) -> SourcedParams:
        missing = [k for k in self.REQUIRED if k not in self.params]
        if missing:
            raise ValueError(f"params is missing {', '.join(missing)}")
        return self

    def __getitem__(self, key: str) -> float:
        return self.params[key].value


class HardwareProfile(SourcedParams):
    """Per-operator cost constants for one GPU (see :mod:`simspec.costmodel` for the form).

    ``simspec calibrate fit`` writes these from timing tables; ``provenance`` names the tables
    (files, commits, date) and ``fit`` holds each operator's fit and held-out error.
    """

    gpu: str
    status: str = ""
    provenance: dict[str, Any] = Field(default_factory=dict)
    fit: dict[str, dict[str, Any]] = Field(default_factory=dict)
    REQUIRED: ClassVar[tuple[str, ...]] = (
        "gemm_latency_s",
        "gemm_compute_efficiency",
        "gemm_memory_efficiency",
        "gemm_sharpness",
        "attention_latency_s",
        "attention_compute_efficiency",
        "attention_memory_efficiency",
        "attention_sharpness",
        "attention_decode_latency_s",
        "elementwise_latency_s",
        "elementwise_memory_efficiency",
        "allreduce_latency_s",
        "allreduce_bandwidth_efficiency",
    )

    @model_validator(mode="after")
    def _values_in_range(self) -> HardwareProfile:
        for key, p in self.params.items():
            if key.endswith("efficiency") and not 0 < p.value <= 1:
                raise ValueError(f"{key} must be in (0, 1], got {p.value}")
            if key.endswith("_latency_s") and not 0 <= p.value < 1:
                raise ValueError(f"{key} must be in [0, 1) seconds, got {p.value}")
            if key.endswith("sharpness") and not 1 <= p.value <= 64:
                raise ValueError(f"{key} must be in [1, 64], got {p.value}")
        return self


class EngineProfile(SourcedParams):
    """Host-side costs and scheduler defaults of a serving engine."""

    id: str
    description: str = ""
    REQUIRED: ClassVar[tuple[str, ...]] = (
        "step_overhead_s",
        "layer_launch_s",
        "draft_step_overhead_s",
        "spec_step_overhead_s",
        "overlap_schedule",
        "spec_disables_overlap",
        "ngram_cpu_s_per_seq",
        "gpu_memory_utilization",
        "block_size",
        "max_num_seqs",
        "max_num_batched_tokens",
    )

    def step_overhead(self, speculative: bool) -> float:
        """Host time per engine step that the GPU waits for: none when an overlap scheduler
        prepares the next step while this one runs, unless speculation turns overlap off."""
        overlapped = self["overlap_schedule"] and not (
            speculative and self["spec_disables_overlap"]
        )
        return 0.0 if overlapped else self["step_overhead_s"]


def _data_text(*parts: str) -> str:
    return resources.files("simspec").joinpath("data", *parts).read_text(encoding="utf-8")


@cache
def _table(name: str) -> dict[str, dict[str, Any]]:
    return yaml.safe_load(_data_text(name))


def gpu_ids() -> list[str]:
    return sorted(_table("gpus.yaml"))


def model_ids() -> list[str]:
    return sorted(_table("models.yaml"))


def engine_ids() -> list[str]:
    return sorted(_table("engines.yaml"))


def load_gpu(gpu_id: str) -> GpuSpec:
    table = _table("gpus.yaml")
    if gpu_id not in table:
        raise InputError("gpu", f"unknown GPU {gpu_id!r}; choose one of {', '.join(sorted(table))}")
    return GpuSpec(id=gpu_id, **table[gpu_id])


def load_model(ref: str) -> ModelShape:
    """A preset id (e.g. ``llama-3.1-8b``) or a path to a Hugging Face ``config.json``."""
    table = _table("models.yaml")
    if ref in table:
        return ModelShape(id=ref, **table[ref])
    path = Path(ref)
    if path.suffix == ".json" or path.exists():
        return load_hf_config(path)
    raise InputError(
        "model",
        f"unknown model {ref!r}; choose a preset ({', '.join(sorted(table))}) "
        "or give a path to a Hugging Face config.json",
    )


def load_hf_config(path: Path) -> ModelShape:
    """Read the shapes of a Llama-style model from its Hugging Face ``config.json``."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("model", f"config file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError("model", f"cannot read {str(path)!r} as JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise InputError("model", f"{str(path)!r} must hold a JSON object")
    if "text_config" in raw and isinstance(raw["text_config"], dict):
        raw = {**raw, **raw["text_config"]}
    aliases = {"n_layer": "num_hidden_layers", "n_head": "num_attention_heads"}
    for old, new in aliases.items():
        raw.setdefault(new, raw.get(old))
    needed = (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "vocab_size",
    )
    missing = [k for k in needed if raw.get(k) is None]
    if missing:
        raise InputError("model", f"{str(path)!r} lacks {', '.join(missing)}")
    name = raw.get("_name_or_path") or Path(path).parent.name or Path(path).stem
    try:
        return ModelShape(
            id=str(name),
            source=f"Hugging Face config.json at {path}",
            **{
                k: v
                for k, v in raw.items()
                if k in ModelShape.model_fields and k not in ("id", "source")
            },
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        raise InputError(f"model.{field}", err["msg"]) from None


def load_profile(ref: str) -> HardwareProfile:
    """The packaged profile of a GPU id, or a profile YAML file given by path."""
    path = Path(ref)
    try:
        if path.suffix in (".yaml", ".yml", ".json") or path.exists():
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        else:
            raw = yaml.safe_load(_data_text("profiles", f"{ref}.yaml"))
    except FileNotFoundError:
        raise InputError("profile", f"no hardware profile {ref!r}") from None
    except (OSError, yaml.YAMLError) as exc:
        raise InputError("profile", f"cannot read {ref!r}: {exc}") from None
    try:
        return HardwareProfile(**raw)
    except (TypeError, ValidationError, ValueError) as exc:
        raise InputError("profile", f"invalid profile {ref!r}: {_first_error(exc)}") from None


def load_engine(engine_id: str) -> EngineProfile:
    table = _table("engines.yaml")
    if engine_id not in table:
        raise InputError(
            "engine", f"unknown engine {engine_id!r}; choose one of {', '.join(sorted(table))}"
        )
    return EngineProfile(id=engine_id, **table[engine_id])


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        return f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}"
    return str(exc)
