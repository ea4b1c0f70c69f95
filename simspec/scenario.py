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


# Acceptance of the embedded default methods, replayed from real Llama-3.1-8B-Instruct traces
# measured on one H100 in vLLM (see simspec/data/traces/SOURCE.md).
def default_methods(dataset: str = "sharegpt") -> list[MethodConfig]:
    return [
        MethodConfig(name="autoregressive", k=0),
        MethodConfig(
            name="eagle",
            k=3,
            draft_vocab_size=32000,
            acceptance=AcceptanceConfig(
                trace=dataset,
                trace_method="eagle3",
                source="EAGLE-3 trace, Liu et al. arXiv 2601.11580 (SpecDecode-Bench data)",
            ),
        ),
        MethodConfig(
            name="ngram",
            k=3,
            acceptance=AcceptanceConfig(
                trace=dataset,
                trace_method="ngram",
                source="n-gram trace, Liu et al. arXiv 2601.11580 (SpecDecode-Bench data)",
            ),
        ),
    ]
