"""Predict every row of a case table: plan, simulate each distinct scenario once, score.

Every input row comes out, in order, with ``predicted_value``, ``predicted_tau``,
``rel_error``, ``status`` (ok / skipped), ``skip_reason`` and how acceptance was chosen.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import pandas as pd

from simspec.studies.validation.predict import (
    CasePlan,
    Skip,
    metric_value,
    plan_case,
    run_safely,
    scenario_key,
)

OUTPUT_COLUMNS = (
    "predicted_value",
    "predicted_tau",
    "rel_error",
    "status",
    "skip_reason",
    "acceptance_source",
    "assumptions",
)


def validate(
    cases: pd.DataFrame,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    assume_gpu: str | None = None,
) -> pd.DataFrame:
    """``cases`` (text cells, as :func:`~simspec.studies.validation.cases.read_cases` gives) with
    the
    prediction columns added. ``workers``: processes (1 = serial; default all cores);
    ``assume_gpu``: the GPU for rows whose GPU is not stated (else they are skipped)."""
    plans: list[CasePlan | str] = []
    for row in cases.to_dict("records"):
        try:
            plans.append(plan_case(row, assume_gpu))
        except Skip as exc:
            plans.append(str(exc))
        except Exception as exc:  # noqa: BLE001 (a row's bad cell must not stop the table)
            plans.append(f"cannot plan this row: {type(exc).__name__}: {exc}")
    todo: dict[str, str] = {}
    for plan in plans:
        if isinstance(plan, CasePlan) and plan.metric != "step_time_ms":
            for sc in (plan.scenario, plan.baseline):
                if sc is not None:
                    todo.setdefault(scenario_key(sc), sc.model_dump_json())
    runs = _run_all(todo, workers, progress)

    out = cases.copy()
    cols: dict[str, list] = {c: [] for c in OUTPUT_COLUMNS}
    for plan in plans:
        value, tau, reason = math.nan, math.nan, ""
        source, notes = "", ""
        if isinstance(plan, str):
            reason = plan
        else:
            source, notes = plan.acceptance_source, "; ".join(plan.assumptions)
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
        cols["rel_error"].append((value - measured) / measured if ok else math.nan)
        cols["status"].append("ok" if ok else "skipped")
        cols["skip_reason"].append(_single_spaced(reason))
        cols["acceptance_source"].append(source)
        cols["assumptions"].append(notes)
    for col, values in cols.items():
        out[col] = values
    return out


def _run_all(
    todo: dict[str, str], workers: int | None, progress: Callable[[int, int], None] | None
) -> dict[str, dict[str, float] | str]:
    runs: dict[str, dict[str, float] | str] = {}
    workers = workers or os.cpu_count() or 1
    keys = list(todo)
    if workers == 1 or len(keys) <= 1:
        for i, key in enumerate(keys):
            runs[key] = run_safely(todo[key])
            if progress:
                progress(i + 1, len(keys))
        return runs
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for i, (key, result) in enumerate(
            zip(keys, pool.map(run_safely, [todo[k] for k in keys], chunksize=4), strict=True)
        ):
            runs[key] = result
            if progress:
                progress(i + 1, len(keys))
    return runs


def _single_spaced(text: str) -> str:
    return " ".join(str(text).split())
