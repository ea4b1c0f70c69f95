"""Validated scenarios: what is deployed (model, hardware, engine, workload, limits, seed) and
which method runs on it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from simspec.acceptance import AcceptanceConfig
from simspec.speculators import MethodConfig
from simspec.workload import WorkloadConfig


class SchedulerConfig(BaseModel):
    """Engine limits; unset values take the engine profile's defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_num_seqs: int | None = Field(default=None, ge=1, le=100_000)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=10_000_000)


class Deployment(BaseModel):
    """What is served and how: model, hardware, engine, workload, scheduler limits, seed."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str = Field(default="llama-3.1-8b", description="model preset or config.json path")
    gpu: str = Field(default="h100_sxm", description="GPU preset")
    tp: int = Field(default=1, ge=1, le=64, description="tensor-parallel degree")
    engine: str = Field(default="vllm", description="engine profile")
    profile: str | None = Field(default=None, description="hardware profile id or YAML path")
    workload: WorkloadConfig = WorkloadConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    seed: int = Field(default=0, ge=0, le=2**32 - 1)

    @field_validator("tp")
    @classmethod
    def _tp(cls, v: int) -> int:
        return check_tp(v)


class Scenario(Deployment):
    """One simulation: a deployment running one method."""

    method: MethodConfig = MethodConfig(name="autoregressive", k=0)


def check_tp(tp: int) -> int:
    """Tensor parallelism splits heads evenly: a power of two, as engines require."""
    if tp & (tp - 1):
        raise ValueError("must be a power of two (1, 2, 4, 8, ...)")
    return tp


# Packaged acceptance presets: traces of Llama-3.1-8B-Instruct measured on one H100 in vLLM
# (simspec/data/traces/SOURCE.md), so they hold for that target only.
_TRACE_SOURCE = "{} trace, Liu et al. arXiv 2601.11580 (SpecDecode-Bench data)"
# EAGLE-3 drafts over a reduced vocabulary: draft_vocab_size 32000 in the EAGLE-3 head config for
# Llama-3.1-8B (SpecForge configs/llama3-8B-eagle3.json; see simspec/data/engines.yaml).
EAGLE3_DRAFT_VOCAB = 32000
DEFAULT_K = 3
DEFAULT_DRAFT_MODEL = "llama-3.2-1b"


def preset_method(
    name: str, dataset: str = "sharegpt", draft_model: str = DEFAULT_DRAFT_MODEL
) -> MethodConfig:
    """A method with its packaged acceptance for ``dataset`` where one exists (draft_model has
    none: no published acceptance for a draft pair of these targets is packaged)."""
    if name == "autoregressive":
        return MethodConfig(name=name, k=0)
    if name == "eagle":
        acc = AcceptanceConfig(
            trace=dataset, trace_method="eagle3", source=_TRACE_SOURCE.format("EAGLE-3")
        )
        return MethodConfig(
            name=name, k=DEFAULT_K, draft_vocab_size=EAGLE3_DRAFT_VOCAB, acceptance=acc
        )
    if name == "ngram":
        acc = AcceptanceConfig(
            trace=dataset, trace_method="ngram", source=_TRACE_SOURCE.format("n-gram")
        )
        return MethodConfig(name=name, k=DEFAULT_K, acceptance=acc)
    return MethodConfig(name=name, k=DEFAULT_K, draft_model=draft_model)


def default_methods(dataset: str = "sharegpt") -> list[MethodConfig]:
    """The embedded default sweep: plain decoding, EAGLE-3 and n-gram lookup at K=3."""
    return [preset_method(n, dataset) for n in ("autoregressive", "eagle", "ngram")]
