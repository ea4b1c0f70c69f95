"""End-to-end sanity: simulate published plain-decoding measurements with a profile.

Operator fits can each be good and the sum still miss (host overhead, kernels the tables do
not time). This runs the simulator on the autoregressive TPOT and batch-1 throughput rows of a
validation table (the ``../shared/validation/cases.csv`` columns) and reports the error.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simspec.config import Scenario
from simspec.studies.runs import SERIAL, Runs
from simspec.studies.validation.predict import Skip, plan_case

MAX_CONCURRENCY = 64  # closed-loop rows above this are throughput tests, not step times


# the engine whose host costs come from a fitted step-time model (SpecDecode-Bench), so its rows
# check the calibrated GPU side end to end; `simspec validate` covers every engine
ENGINES = ("vllm",)


def step_time_rows(cases: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """``cases`` as :func:`~simspec.studies.validation.cases.read_cases` reads them (text
    cells): plain-decoding TPOT rows, and batch-1 throughput rows (1000 / TPOT), on ``gpu`` in an
    engine simspec has a profile for, under a single request or a closed loop of at most
    :data:`MAX_CONCURRENCY`."""
    c = cases
    load = pd.to_numeric(c["load"], errors="coerce")
    load_ok = (c["load_kind"] == "single") | (
        (c["load_kind"] == "concurrency") & (load <= MAX_CONCURRENCY)
    )
    metric_ok = (c["metric"] == "tpot_ms") | ((c["metric"] == "throughput_tok_s") & (load == 1))
    keep = (c["method"] == "autoregressive") & (c["gpu"] == gpu) & load_ok & metric_ok
    keep &= c["engine"].isin(ENGINES)
    return c[keep].reset_index(drop=True)


def _scenario(row: pd.Series, profile: str | None) -> Scenario | str:
    """The row's scenario as ``simspec validate`` builds it, on the given hardware profile; or
    why validate skips it (the report then skips it too: QA, one unreadable row had aborted
    the whole report)."""
    cells = {k: "" if pd.isna(v) else str(v) for k, v in row.items()}
    try:
        plan = plan_case(cells)
    except Skip as exc:
        return str(exc)
    return plan.scenario.model_copy(update={"profile": profile})


def check_step_times(
    rows: pd.DataFrame, profile: str | None = None, *, runs: Runs = SERIAL
) -> pd.DataFrame:
    """Measured against simulated TPOT (ms) per row, with the row's engine profile. A batch-1
    throughput row is scored as throughput (its ms per token, 1000 / tokens per second, both
    sides: it counts the prompt's time, which a TPOT leaves out; QA: it had been scored against
    the simulated TPOT). Rows validate skips are left out, each with its reason in
    ``attrs["skipped"]``; the load is the one the row's scenario runs (a ``single`` row's 1)."""
    out = []
    planned = [(row, _scenario(row, profile)) for _, row in rows.iterrows()]
    skipped = [(str(row["case_id"]), sc) for row, sc in planned if isinstance(sc, str)]
    kept = [(row, sc) for row, sc in planned if not isinstance(sc, str)]
    summaries = runs.all([sc for _, sc in kept])
    for (row, sc), summary in zip(kept, summaries, strict=True):
        measured = float(row["measured_value"])
        predicted = summary.tpot_ms_mean
        if row["metric"] == "throughput_tok_s":
            # one request: ms per output token, its prompt's time included, on both sides
            measured, predicted = 1e3 / measured, 1e3 / summary.throughput_tok_s
        out.append(
            {
                "case_id": row["case_id"],
                "model": row["target_model"],
                "engine": row["engine"],
                "load": sc.workload.concurrency or 1,
                "measured_tpot_ms": round(measured, 3),
                "predicted_tpot_ms": round(predicted, 3),
                "rel_error": round((predicted - measured) / measured, 4),
            }
        )
    frame = pd.DataFrame(out)
    if not frame.empty:
        frame.attrs["mape"] = float(np.abs(frame["rel_error"]).mean())
    frame.attrs["skipped"] = skipped
    return frame
