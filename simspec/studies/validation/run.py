"""Predict every row of a case table: plan, simulate each distinct scenario once, score.

Every input row comes out, in order, with ``predicted_value``, ``predicted_tau``, the run's
``no_proposal_frac`` and ``mean_verify_tokens`` (what a lookup replay proposed),
``rel_error``, ``status`` (ok / skipped), ``skip_reason`` and how acceptance was chosen.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pandas as pd
from pydantic import ValidationError

from simspec.catalog.hardware import HardwareProfile, load_profile
from simspec.config import Scenario
from simspec.engine.metrics import RunSummary
from simspec.errors import validation_message
from simspec.studies.runs import PROCESS, Runs
from simspec.studies.runs.keys import scenario_key
from simspec.studies.validation.assume import assumed_cells, assumed_flags, fill_unstated
from simspec.studies.validation.predict import CasePlan, Skip, metric_value, plan_case


def on_profile(plan: CasePlan, ref: str, profile: HardwareProfile) -> CasePlan:
    """``plan`` with ``profile`` where it describes the row's GPU and engine: a profile is one
    GPU's, and a calibrated deployment's host constants are one engine's."""

    def fits(sc: Scenario) -> bool:
        engine = profile.deployment.engine if profile.deployment else sc.engine
        return sc.gpu == profile.gpu and sc.engine == engine

    own, base = fits(plan.scenario), plan.baseline is not None and fits(plan.baseline)
    if not (own or base):
        return plan
    # each run the profile describes takes it: a speedup whose baseline is another engine's
    # server (other: ...) may have that one alone (QA: a vLLM-calibrated profile reached the
    # plain-decoding rows but not the same vLLM baseline inside an SGLang row's speedup)
    scenario = plan.scenario.model_copy(update={"profile": ref}) if own else plan.scenario
    baseline = plan.baseline
    if base:
        assert baseline is not None
        baseline = baseline.model_copy(update={"profile": ref})
    which = (
        ""
        if own and (base or plan.baseline is None)
        else (" (the speculative run)" if own else " (the baseline)")
    )
    notes = [*plan.assumptions, f"hardware profile {ref}{which}"]
    return replace(plan, scenario=scenario, baseline=baseline, assumptions=notes)


OUTPUT_COLUMNS = (
    "predicted_value",
    "predicted_tau",
    "no_proposal_frac",
    "mean_verify_tokens",
    "rel_error",
    "status",
    "skip_reason",
    "acceptance_source",
    "assumptions",
)


# the row's cell behind a workload field a bound refuses
ROW_CELLS = {
    "concurrency": "load",
    "requests": "load",
    "rate": "load",
    "mean": "prompt_len or output_len",
}


def validate(
    cases: pd.DataFrame,
    *,
    runs: Runs = PROCESS,
    assume_gpu: str | None = None,
    assume: Mapping[str, str] | None = None,
    profile: str | None = None,
) -> pd.DataFrame:
    """``cases`` (text cells, as :func:`~simspec.studies.validation.cases.read_cases` gives) with
    the prediction columns added. ``runs``: where the scenarios run (default: a pool of every
    core), told how many of them are done; ``assume``: cells to fill where a row leaves them
    unstated (``{"gpu": "h200"}``, checked by
    :func:`~simspec.studies.validation.assume.parse_assumptions`; else such rows may be
    skipped), ``assume_gpu`` the same for the GPU alone. Each distinct scenario runs once; one
    that cannot run skips only the rows that need it. ``profile``: a hardware profile (id or
    file) for the rows on its GPU (and, for one calibrated to a deployment, its engine), each
    such row saying so; the other rows keep their GPU's own."""
    prof = load_profile(profile) if profile is not None else None
    plans: list[CasePlan | str] = []
    rows = cases.to_dict("records")
    for row in rows:
        try:
            plan = plan_case(row, assume_gpu, assume=assume)
            plans.append(on_profile(plan, profile, prof) if prof and profile else plan)
        except Skip as exc:
            plans.append(str(exc))
        except ValidationError as exc:  # a cell past a bound: the row's cell and its range
            field, _, why = validation_message(exc).partition(": ")
            plans.append(f"{ROW_CELLS.get(field, field)} past simspec's bounds: {why}")
        except Exception as exc:  # a row's bad cell must not stop the table
            plans.append(f"cannot plan this row: {type(exc).__name__}: {exc}")
    scenarios = [
        sc.model_dump_json()
        for plan in plans
        if isinstance(plan, CasePlan) and plan.metric != "step_time_ms"
        for sc in (plan.scenario, plan.baseline)
        if sc is not None
    ]
    total = len(set(scenarios))
    finished = itertools.count(1)

    def count(_key: str, _outcome: Any) -> None:
        runs.at(next(finished), total)

    outcomes = runs.all(scenarios, errors="keep", on_result=count)
    runs = dict(zip(map(scenario_key, scenarios), outcomes, strict=True))

    out = cases.copy()
    cols: dict[str, list] = {c: [] for c in OUTPUT_COLUMNS}
    filled = assumed_cells(assume, assume_gpu)  # as plan_case fills the row's unstated cells
    for row, plan in zip(rows, plans, strict=True):
        value, tau, reason = math.nan, math.nan, ""
        no_proposal, verify = math.nan, math.nan
        source, notes = "", ""
        if isinstance(plan, str):
            # the cells --assume filled stay said: the skip may stem from one of them
            flags = assumed_flags(assume, assume_gpu)
            reason, notes = plan, "; ".join(fill_unstated(row, filled, flags)[1])
        else:
            source, notes = plan.acceptance_source, "; ".join(plan.assumptions)
            own = runs.get(scenario_key(plan.scenario.model_dump_json()))
            if isinstance(own, RunSummary):
                no_proposal, verify = own.no_proposal_frac, own.mean_verify_tokens
            try:
                value, tau = metric_value(plan, runs)
                if not math.isfinite(value):
                    value, reason = math.nan, "the simulation gave no value for this metric"
            except Skip as exc:
                reason = str(exc)
        measured = plan.measured if isinstance(plan, CasePlan) else math.nan
        ok = not reason
        cols["predicted_value"].append(value)
        cols["predicted_tau"].append(tau)
        cols["no_proposal_frac"].append(no_proposal)
        cols["mean_verify_tokens"].append(verify)
        cols["rel_error"].append((value - measured) / measured if ok else math.nan)
        cols["status"].append("ok" if ok else "skipped")
        cols["skip_reason"].append(_single_spaced(reason))
        cols["acceptance_source"].append(source)
        cols["assumptions"].append(notes)
    for col, values in cols.items():
        out[col] = values
    return out


def _single_spaced(text: str) -> str:
    return " ".join(str(text).split())
