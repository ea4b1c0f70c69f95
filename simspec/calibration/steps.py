"""End-to-end sanity: simulate published plain-decoding measurements with a profile.

Operator fits can each be good and the sum still miss (host overhead, kernels the tables do
not time). This runs the simulator on the autoregressive TPOT and batch-1 throughput rows of a
validation table (the ``../shared/validation/cases.csv`` columns) and reports the error.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simspec.scenario import Scenario
from simspec.simulation import simulate
from simspec.workload import LengthSpec, WorkloadConfig

# the columns of the validation-case table (../shared/validation/cases.csv) this check reads
CASE_COLUMNS = ("case_id", "metric", "method", "target_model", "gpu", "tp", "engine",
                "load_kind", "load", "prompt_len", "output_len", "measured_value")  # fmt: skip
MAX_CONCURRENCY = 64  # closed-loop rows above this are throughput tests, not step times


ENGINES = ("vllm",)  # engines with a packaged engine profile (simspec/data/engines.yaml)


def step_time_rows(cases: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """Plain-decoding TPOT rows, and batch-1 throughput rows (1000 / TPOT), on ``gpu`` in an
    engine simspec has a profile for, under a single request or a closed loop of at most
    :data:`MAX_CONCURRENCY`."""
    c = cases
    load_ok = (c["load_kind"] == "single") | (
        (c["load_kind"] == "concurrency") & (c["load"] <= MAX_CONCURRENCY)
    )
    metric_ok = (c["metric"] == "tpot_ms") | (
        (c["metric"] == "throughput_tok_s") & (c["load"] == 1)
    )
    keep = (c["method"] == "autoregressive") & (c["gpu"] == gpu) & load_ok & metric_ok
    keep &= c["engine"].isin(ENGINES)
    return c[keep].reset_index(drop=True)


def _scenario(row: pd.Series, profile: str | None) -> Scenario:
    conc = int(row["load"])
    known = pd.notna(row.get("prompt_len")) and pd.notna(row.get("output_len"))
    workload = WorkloadConfig(
        concurrency=conc,
        requests=max(8, 3 * conc),
        # unknown lengths: the packaged ShareGPT length trace (simspec.workload's default)
        trace=None if known else "sharegpt",
        prompt=LengthSpec(mean=float(row["prompt_len"])) if known else LengthSpec(),
        output=LengthSpec(mean=float(row["output_len"])) if known else LengthSpec(),
    )
    tp = int(row["tp"]) if pd.notna(row.get("tp")) else 1
    return Scenario(model=row["target_model"], gpu=row["gpu"], tp=tp, engine=row["engine"],
                    profile=profile, workload=workload)  # fmt: skip


def check_step_times(rows: pd.DataFrame, profile: str | None = None) -> pd.DataFrame:
    """Measured against simulated TPOT (ms) per row, with the row's engine profile."""
    out = []
    for _, row in rows.iterrows():
        summary = simulate(_scenario(row, profile)).summary
        measured = float(row["measured_value"])
        if row["metric"] == "throughput_tok_s":
            measured = 1e3 / measured  # one request: ms per output token
        predicted = summary["tpot_ms_mean"]
        out.append(
            {
                "case_id": row["case_id"],
                "model": row["target_model"],
                "engine": row["engine"],
                "load": int(row["load"]),
                "measured_tpot_ms": round(measured, 3),
                "predicted_tpot_ms": round(predicted, 3),
                "rel_error": round((predicted - measured) / measured, 4),
            }
        )
    frame = pd.DataFrame(out)
    if not frame.empty:
        frame.attrs["mape"] = float(np.abs(frame["rel_error"]).mean())
    return frame
