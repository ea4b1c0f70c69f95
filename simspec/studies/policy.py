"""Speculation policies that follow the load, against the fixed settings they switch between.

Serving teams change speculation with concurrency: a K (or a tree budget) per band of running
requests and speculation off above a bound. A policy here is that schedule on one method; it is
simulated under the scenario's workload (typically open-loop arrivals whose rate follows a day's
shape), next to plain decoding and each fixed setting the policy uses, so the table says what
the policy buys over each.
"""

from __future__ import annotations

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from simspec.catalog.hardware import load_engine, load_gpu
from simspec.config import (
    _NUMBERS,
    MAX_TOTAL_REQUESTS,
    Deployment,
    KSchedule,
    MethodConfig,
    Scenario,
    TreeSchedule,
    WorkloadConfig,
)
from simspec.engine.metrics import RunSummary
from simspec.errors import InputError
from simspec.studies.runs import SERIAL, Runs
from simspec.studies.runs.keys import scenario_key
from simspec.studies.schedule import NO_SCHEDULE
from simspec.studies.schedule.export import schedule_of
from simspec.studies.sweep import describe_acceptance

# summary metrics copied into the table, by name
METRICS = (
    "throughput_tok_s",
    "tpot_ms_p50",
    "tpot_ms_p99",
    "ttft_ms_p99",
    "e2e_s_p50",
    "e2e_s_p99",
    "mean_accept_len",
    # the KV blocks the setting's replica holds: the draft's weights and KV take theirs
    # whether or not its schedule speculates (QA: a policy of K=0 everywhere differed from
    # plain decoding, under a load that filled the cache, with no word of why)
    "kv_blocks_total",
)
COLUMNS = [
    "setting",
    "method",
    "k",
    "tree_nodes",
    "schedule",
    "acceptance",
    *METRICS,
    "policy_tpot_gain",
    "policy_e2e_gain",
]


class Policy(BaseModel):
    """K or tree budget per band of running requests ([[start, end, value], ...]; 0 = off), and
    speculation off from ``disable_by_batch_size`` running requests up."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _numbers = _NUMBERS
    # the method's own checks: the policy is copied onto it without validation (settings())
    k_schedule: KSchedule = None
    tree_schedule: TreeSchedule = None
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
    base = cfg.method.model_copy(update=dict(NO_SCHEDULE))
    # a K schedule gives every batch size a K (its bands start at 1, vLLM's lookup carries a
    # band's K over gaps and past the last): the method's own K only without one
    scheduled = {k for _, _, k in cfg.policy.k_schedule or () if k > 0}
    ks = sorted(scheduled if cfg.policy.k_schedule else {base.k})
    budgets = sorted({n for _, _, n in cfg.policy.tree_schedule or () if n > 0})
    if cfg.policy.tree_schedule and base.tree in (None, "chain"):
        # QA: refused as methods.eagle3.tree_nodes, a field the file never wrote
        raise InputError(
            "policy.tree_schedule",
            f"{base.name} drafts a chain here, whose length k_schedule sets: node budgets shape "
            "a tree (give the method tree: static or dynamic, or a k_schedule)",
        )
    if budgets:
        fixed = [(f"fixed {n} nodes", base.model_copy(update={"tree_nodes": n})) for n in budgets]
    else:
        fixed = [(f"fixed K={k}", base.model_copy(update={"k": k})) for k in ks]
    return [
        ("autoregressive", MethodConfig(name="autoregressive", k=0)),
        *fixed,
        # validated, not model_copy'd: the merged method is checked as a whole
        ("policy", MethodConfig.model_validate(base.model_dump() | cfg.policy.model_dump())),
    ]


def most_running(cfg: PolicyConfig) -> tuple[int, str]:
    """The most requests the policy's batch-size test can ever count, and why: the engine's
    max_num_seqs for the method (the replica asks the draft for min(running + waiting,
    max_num_seqs), Replica._reserve), and in a closed loop no more than its concurrency."""
    gpu = load_gpu(cfg.gpu)
    most = load_engine(cfg.engine).max_seqs_for(cfg.method.name, cfg.scheduler.max_num_seqs, gpu)
    why = f"the {most} requests engine {cfg.engine} runs at once (max_num_seqs)"
    wl = cfg.workload
    if wl.arrival == "closed" and wl.concurrency < most:
        most = wl.concurrency
        why = (
            f"the {most} request{'s' if most > 1 else ''} a closed loop at concurrency {most} "
            "holds (run the policy under arrivals that vary: --rate-csv, or a --config workload)"
        )
    return most, why


def check_reachable(cfg: PolicyConfig) -> None:
    """Refuse a band or threshold the run can never reach: it would compare a policy that never
    switches with the setting it stays on, and list settings it never uses (QA: a band from
    2,000 and a threshold of 5,000 on a 1,024-request engine ran as fixed K=4, and a schedule
    run at the default concurrency 1 applied its first band only)."""
    most, why = most_running(cfg)
    pol = cfg.policy
    for field, bands in (("k_schedule", pol.k_schedule), ("tree_schedule", pol.tree_schedule)):
        for band in bands or ():
            if band[0] > most:
                raise InputError(
                    f"policy.{field}",
                    f"band {list(band)} starts past {why}: it never applies",
                )
    if pol.disable_by_batch_size is not None and pol.disable_by_batch_size > most:
        raise InputError(
            "policy.disable_by_batch_size",
            f"{pol.disable_by_batch_size} is past {why}: speculation would never turn off",
        )


def run_policy(cfg: PolicyConfig, *, runs: Runs = SERIAL) -> pd.DataFrame:
    """Simulate every setting on the same workload and seed (a setting the cache of ``runs``
    holds is not run again; ``runs`` is told of each setting done); gains are the policy's
    median TPOT and median end-to-end latency relative to each setting's (> 1: the policy is
    faster)."""
    check_reachable(cfg)
    common = cfg.model_dump(exclude={"method", "policy"})
    chosen = settings(cfg)
    scenarios = [Scenario(**common, method=method) for _, method in chosen]
    labels: dict[str, list[str]] = {}  # two settings may be the same run
    for (label, _), sc in zip(chosen, scenarios, strict=True):
        labels.setdefault(scenario_key(sc.model_dump_json()), []).append(label)
    check_total(cfg.workload, len(labels))

    def finished(key: str, _: RunSummary) -> None:
        for label in labels[key]:
            runs.step(label)

    summaries = runs.all(scenarios, on_result=finished)
    rows = [
        {
            "setting": label,
            "method": method.name,
            "k": method.k if method.name != "autoregressive" else 0,
            "tree_nodes": method.tree_nodes,
            "schedule": _schedule(method),
            "acceptance": describe_acceptance(method),
            **{c: getattr(s, c) for c in METRICS},
        }
        for (label, method), s in zip(chosen, summaries, strict=True)
    ]
    frame = pd.DataFrame(rows)
    policy = frame[frame.setting == "policy"].iloc[0]
    frame["policy_tpot_gain"] = frame.tpot_ms_p50 / policy.tpot_ms_p50
    frame["policy_e2e_gain"] = frame.e2e_s_p50 / policy.e2e_s_p50
    return frame[COLUMNS]


def check_total(workload: WorkloadConfig, runs: int) -> None:
    """The requests every setting's run serves together stay within the one-command bound,
    as a sweep's and recommend's do (QA: a policy of 6 settings x 1M requests started)."""
    from simspec.engine.workload import request_count

    each = request_count(workload)
    if each * runs > MAX_TOTAL_REQUESTS:
        raise InputError(
            "workload.requests",
            f"{runs} settings x {each:,} requests = {each * runs:,} requests; one command "
            f"runs at most {MAX_TOTAL_REQUESTS:,}: fewer requests (a shorter rate schedule or "
            "trace window), or fewer K bands",
        )


def _schedule(method: MethodConfig) -> str:
    """What varies a setting's K or tree budget with the running requests, as text ('' for a
    fixed one): its bands, and where speculation turns off (QA: the policy row read K=3 like
    the fixed K=3 row, its schedule in no column)."""
    parts = [schedule_of(method)] if schedule_of(method) else []
    if method.disable_by_batch_size:
        parts.append(f"disable_by_batch_size: {method.disable_by_batch_size}")
    return "; ".join(parts)
