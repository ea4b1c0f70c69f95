"""Speedup by batch size and method: many closed-loop scenarios against one baseline each."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
from pydantic import Field, field_validator

from simspec.scenario import Deployment, Scenario, default_methods
from simspec.simulation import simulate
from simspec.speculators import MethodConfig

DEFAULT_BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64, 128]

# Summary metrics copied into the sweep CSV (see README.md for their meaning).
METRIC_COLUMNS = (
    "throughput_tok_s", "tpot_ms_p50", "tpot_ms_p99", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50",
    "itl_ms_p99", "e2e_s_p50", "mean_accept_len", "draft_time_frac", "verify_time_frac",
    "overhead_time_frac", "preemptions", "unfinishable", "kv_blocks_total",
)  # fmt: skip
# Column order of the CSV written by ``simspec sweep --out``.
COLUMNS = [
    "model", "gpu", "tp", "engine", "temperature", "top_p", "method", "k", "batch_size",
    "speedup", "tpot_ratio",
    *METRIC_COLUMNS, "requests", "seed", "acceptance",
]  # fmt: skip


class SweepConfig(Deployment):
    """A grid of closed-loop runs: every method at every batch size (concurrency)."""

    methods: list[MethodConfig] = Field(default_factory=default_methods)
    batch_sizes: list[int] = Field(default_factory=lambda: list(DEFAULT_BATCH_SIZES))

    @field_validator("batch_sizes")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if not v or any(b < 1 or b > 100_000 for b in v):
            raise ValueError("batch sizes must be integers in [1, 100000]")
        return v

    @field_validator("methods")
    @classmethod
    def _some(cls, v: list[MethodConfig]) -> list[MethodConfig]:
        if not v:
            raise ValueError("give at least one method")
        return v

    def scenario(self, method: MethodConfig, batch_size: int) -> Scenario:
        wl = self.workload.model_copy(update={"arrival": "closed", "concurrency": batch_size})
        common = self.model_dump(exclude={"methods", "batch_sizes", "workload"})
        return Scenario(**common, method=method, workload=wl)

    def runs(self) -> list[tuple[MethodConfig, int]]:
        """Every (method, batch size) cell; the autoregressive baseline runs once per size."""
        baseline = MethodConfig(name="autoregressive", k=0)
        others = [m for m in self.methods if m.name != "autoregressive"]
        return [(m, b) for b in self.batch_sizes for m in [baseline, *others]]


def describe_acceptance(m: MethodConfig) -> str:
    a = m.acceptance
    if a is None:
        return ""
    if a.trace is not None:
        return f"trace:{a.trace}/{a.trace_method}"
    if a.tau is not None:
        return f"tau={a.tau}@k={a.tau_k}"
    return f"alpha={a.alpha}"


def run_sweep(cfg: SweepConfig, progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Simulate every cell and report speedup = throughput / autoregressive throughput."""
    want_baseline = any(m.name == "autoregressive" for m in cfg.methods)
    rows = []
    baseline: dict[int, dict[str, float]] = {}
    for method, bs in cfg.runs():
        result = simulate(cfg.scenario(method, bs))
        s = result.summary
        if method.name == "autoregressive":
            baseline[bs] = s
            if not want_baseline:
                if progress:
                    progress(f"autoregressive bs={bs}")
                continue
        base = baseline[bs]
        rows.append(
            {
                "model": cfg.model,
                "gpu": cfg.gpu,
                "tp": cfg.tp,
                "engine": cfg.engine,
                "temperature": cfg.temperature,
                "top_p": cfg.top_p,
                "method": method.name,
                "k": method.k if method.name != "autoregressive" else 0,
                "batch_size": bs,
                "speedup": s["throughput_tok_s"] / base["throughput_tok_s"],
                "tpot_ratio": base["tpot_ms_p50"] / s["tpot_ms_p50"],
                **{c: s[c] for c in METRIC_COLUMNS},
                "requests": int(s["requests"]),
                "seed": cfg.seed,
                "acceptance": describe_acceptance(method),
            }
        )
        if progress:
            progress(f"{method.name} bs={bs}")
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("preemptions", "unfinishable", "kv_blocks_total"):
        frame[col] = frame[col].astype(int)
    return frame
