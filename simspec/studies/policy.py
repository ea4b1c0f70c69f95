"""Speculation policies that follow the load, against the fixed settings they switch between.

Serving teams change speculation with concurrency: a K (or a tree budget) per band of running
requests and speculation off above a bound. A policy here is that schedule on one method; it is
simulated under the scenario's workload (typically open-loop arrivals whose rate follows a day's
shape), next to plain decoding and each fixed setting the policy uses, so the table says what
the policy buys over each.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from simspec.config import Deployment, MethodConfig, Scenario
from simspec.engine.simulation import simulate

COLUMNS = [
    "setting",
    "method",
    "k",
    "tree_nodes",
    "throughput_tok_s",
    "tpot_ms_p50",
    "tpot_ms_p99",
    "ttft_ms_p99",
    "e2e_s_p50",
    "e2e_s_p99",
    "mean_accept_len",
    "policy_tpot_gain",
    "policy_e2e_gain",
]


class Policy(BaseModel):
    """K or tree budget per band of running requests ([[start, end, value], ...]; 0 = off), and
    speculation off from ``disable_by_batch_size`` running requests up."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    k_schedule: list[tuple[int, int, int]] | None = None
    tree_schedule: list[tuple[int, int, int]] | None = None
    disable_by_batch_size: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _something(self) -> Policy:
        if not (self.k_schedule or self.tree_schedule or self.disable_by_batch_size):
            raise ValueError("give k_schedule, tree_schedule or disable_by_batch_size")
        return self


class PolicyConfig(Deployment):
    """One method, one policy, one workload."""

    method: MethodConfig
    policy: Policy


def settings(cfg: PolicyConfig) -> list[tuple[str, MethodConfig]]:
    """Plain decoding, each fixed setting the policy switches between, and the policy."""
    base = cfg.method.model_copy(
        update={"k_schedule": None, "tree_schedule": None, "disable_by_batch_size": None}
    )
    out = [("autoregressive", MethodConfig(name="autoregressive", k=0))]
    ks = sorted({k for _, _, k in cfg.policy.k_schedule or () if k > 0} | {base.k})
    budgets = sorted({n for _, _, n in cfg.policy.tree_schedule or () if n > 0})
    if budgets:
        for n in budgets:
            out.append((f"fixed {n} nodes", base.model_copy(update={"tree_nodes": n})))
    else:
        for k in ks:
            out.append((f"fixed K={k}", base.model_copy(update={"k": k})))
    policy = base.model_copy(update=cfg.policy.model_dump())
    out.append(("policy", policy))
    return out


def run_policy(cfg: PolicyConfig, progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Simulate every setting on the same workload and seed; gains are the policy's median
    TPOT and median end-to-end latency relative to each setting's (> 1: the policy is faster)."""
    common = cfg.model_dump(exclude={"method", "policy"})
    rows = []
    for label, method in settings(cfg):
        s = simulate(Scenario(**common, method=method)).summary
        k = method.k if method.name != "autoregressive" else 0
        metrics = {c: s[c] for c in COLUMNS[4:11]}
        rows.append(
            {
                "setting": label,
                "method": method.name,
                "k": k,
                "tree_nodes": method.tree_nodes,
                **metrics,
            }
        )
        if progress:
            progress(label)
    frame = pd.DataFrame(rows)
    policy = frame[frame.setting == "policy"].iloc[0]
    frame["policy_tpot_gain"] = frame.tpot_ms_p50 / policy.tpot_ms_p50
    frame["policy_e2e_gain"] = frame.e2e_s_p50 / policy.e2e_s_p50
    return frame[COLUMNS]
