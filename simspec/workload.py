"""Requests to serve: how they arrive and how long their prompts and outputs are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from simspec.traces import first_method, load_trace


class LengthSpec(BaseModel):
    """A token-length distribution, clipped to [min, max] and rounded to integers."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    dist: Literal["fixed", "uniform", "lognormal"] = "fixed"
    mean: float = Field(default=256.0, ge=1.0, le=1e6)
    cv: float = Field(default=0.0, ge=0.0, le=10.0, description="lognormal: std / mean")
    low: float | None = Field(default=None, ge=1.0, description="uniform: lower bound")
    high: float | None = Field(default=None, ge=1.0, description="uniform: upper bound")
    min: int = Field(default=1, ge=1)
    max: int = Field(default=1_000_000, ge=1)

    @model_validator(mode="after")
    def _check(self) -> LengthSpec:
        if self.dist == "uniform" and (
            self.low is None or self.high is None or self.low > self.high
        ):
            raise ValueError("uniform lengths need low <= high")
        if self.min > self.max:
            raise ValueError("min must be <= max")
        return self

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.dist == "fixed":
            x = np.full(n, self.mean)
        elif self.dist == "uniform":
            x = rng.uniform(self.low, self.high + 1.0, size=n)
        else:
            sigma2 = np.log1p(self.cv**2)
            x = rng.lognormal(np.log(self.mean) - sigma2 / 2.0, np.sqrt(sigma2), size=n)
        return np.clip(np.floor(x), self.min, self.max).astype(np.int64)


class WorkloadConfig(BaseModel):
    """Arrivals (closed loop at fixed concurrency, or Poisson) and request lengths."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    arrival: Literal["closed", "poisson"] = Field(
        default="closed", description="closed: N in flight, a finished one replaced at once"
    )
    concurrency: int = Field(default=1, ge=1, le=100_000, description="closed loop: N")
    rate: float = Field(default=1.0, gt=0.0, le=1e6, description="poisson: requests per second")
    rate_schedule: list[tuple[float, float]] | None = Field(
        default=None,
        description="poisson with a rate that changes over the run: [[start_s, rate], ...], "
        "piecewise constant from each start (the first at 0); replaces rate",
    )
    requests: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="requests to simulate; default max(100, 4 x concurrency)",
    )
    trace: str | None = Field(
        default="sharegpt", description="take prompt/output lengths from this acc_len trace"
    )
    trace_output_method: str | None = Field(
        default=None, description="use len(acc_len[method]) as output length instead of output_len"
    )
    prompt: LengthSpec = LengthSpec(dist="fixed", mean=512)
    output: LengthSpec = LengthSpec(dist="fixed", mean=256)

    @model_validator(mode="after")
    def _schedule(self) -> WorkloadConfig:
        sched = self.rate_schedule
        if sched is None:
            return self
        if not sched or sched[0][0] != 0.0:
            raise ValueError("rate_schedule must start at time 0")
        times = [t for t, _ in sched]
        if times != sorted(times) or len(set(times)) != len(times):
            raise ValueError("rate_schedule times must increase")
        if any(not (0.0 <= r <= 1e6) for _, r in sched) or sched[-1][1] <= 0.0:
            raise ValueError("rates must be in [0, 1e6] and the last one > 0")
        return self

    @property
    def num_requests(self) -> int:
        if self.requests is not None:
            return self.requests
        n = self.concurrency if self.arrival == "closed" else 1
        return max(100, 4 * n)


@dataclass(frozen=True)
class RequestSpecs:
    """Lengths of every request, in arrival order; ``trace_index`` is -1 without a trace."""

    prompt_len: np.ndarray
    output_len: np.ndarray
    trace_index: np.ndarray

    def __len__(self) -> int:
        return len(self.prompt_len)


def generate_requests(cfg: WorkloadConfig, rng: np.random.Generator) -> RequestSpecs:
    """Draw request lengths; a trace is walked in shuffled passes so every record is used."""
    n = cfg.num_requests
    if cfg.trace is None:
        return RequestSpecs(
            cfg.prompt.sample(n, rng), cfg.output.sample(n, rng), np.full(n, -1, dtype=np.int64)
        )
    # lengths do not depend on the method key, so any key of the file will do
    trace = load_trace(cfg.trace, cfg.trace_output_method or first_method(cfg.trace))
    passes = -(-n // trace.num_requests)
    order = np.concatenate([rng.permutation(trace.num_requests) for _ in range(passes)])[:n]
    output = trace.lengths[order] if cfg.trace_output_method else trace.output_len[order]
    return RequestSpecs(trace.prompt_len[order].astype(np.int64), output.astype(np.int64), order)


def arrival_gaps(cfg: WorkloadConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """Seconds between successive Poisson arrivals (a piecewise-constant rate when the config
    has a schedule: a gap that crosses into the next piece restarts there at its rate, which is
    exact because exponential gaps are memoryless)."""
    if cfg.rate_schedule is None:
        return rng.exponential(1.0 / cfg.rate, size=n)
    starts = [t for t, _ in cfg.rate_schedule] + [np.inf]
    rates = [r for _, r in cfg.rate_schedule]
    times = np.empty(n)
    t, piece = 0.0, 0
    for i in range(n):
        while True:
            gap = rng.exponential(1.0 / rates[piece]) if rates[piece] > 0 else np.inf
            if t + gap < starts[piece + 1]:
                t += gap
                break
            t, piece = starts[piece + 1], piece + 1
        times[i] = t
    return np.diff(times, prepend=0.0)


def read_rate_csv(path: str) -> list[tuple[float, float]]:
    """A day's traffic shape from a CSV with columns ``time_s`` and ``rate`` (requests/s)."""
    import pandas as pd

    from simspec.errors import InputError

    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise InputError("rate_csv", f"cannot read {path!r} as CSV ({exc})") from None
    if not {"time_s", "rate"} <= set(frame.columns):
        raise InputError("rate_csv", f"{path!r} needs columns time_s and rate")
    try:
        rows = [(float(t), float(r)) for t, r in zip(frame.time_s, frame.rate, strict=True)]
    except (TypeError, ValueError):
        raise InputError("rate_csv", f"{path!r}: time_s and rate must be numbers") from None
    if not rows or any(not np.isfinite(v) for row in rows for v in row):
        raise InputError("rate_csv", f"{path!r}: needs finite numbers in at least one row")
    return rows
