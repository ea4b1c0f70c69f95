"""Error per series and overall, and whether a load sweep's predicted trend is the measured one.

A measurement reported by two sources (e.g. one τ in both the EAGLE-2 and EAGLE-3 tables)
appears twice in the case table; the overall figure counts it once (``unique_mape``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

# the scenario of a measurement: rows equal in all of these (and the value) are one number
SAME_MEASUREMENT = (
    "metric",
    "method",
    "target_model",
    "draft_model",
    "engine",
    "load_kind",
    "load",
    "temperature",
    "dataset",
    "k",
    "tree_nodes",
    # the draft's shape beyond K and its nodes, and what a row states beside its value (QA: a
    # tree-shape sweep's rows of one K and budget at topk 1, 4 and 8 were counted as one)
    "tree_topk",
    "spec_shape",
    "context_len",
    "measured_tau",
    # the setup: rows on another GPU, TP, baseline or lengths are other measurements even where
    # the value is the same (QA: a user's rows at another TP were dropped as duplicates)
    "gpu",
    "num_gpus",
    "tp",
    "baseline",
    "prompt_len",
    "output_len",
    "engine_version",
    "measured_value",
)


def series_table(pred: pd.DataFrame) -> pd.DataFrame:
    """Per series: rows, predicted, skipped, MAPE, max |error|, mean signed error, and the
    rank correlation of predicted with measured over load (series that vary load only)."""
    out = []
    for name, rows in pred.groupby("series", sort=True):
        out.append({"series": name, **_stats(rows)})
    frame = pd.DataFrame(out)
    total = {"series": "ALL", **_stats(pred)}
    return pd.concat([frame, pd.DataFrame([total])], ignore_index=True)


def _stats(rows: pd.DataFrame) -> dict[str, float | int | str]:
    ok = rows[rows["status"] == "ok"]
    err = ok["rel_error"].astype(float)
    return {
        "rows": len(rows),
        "ok": len(ok),
        "skipped": len(rows) - len(ok),
        "mape": float(err.abs().mean()) if len(ok) else math.nan,
        "max_abs_error": float(err.abs().max()) if len(ok) else math.nan,
        "bias": float(err.mean()) if len(ok) else math.nan,
        "trend_rho": trend_rho(ok),
    }


def trend_rho(ok: pd.DataFrame) -> float:
    """Mean Spearman ρ between predicted and measured across load, over each (series, metric,
    method, K) sweep with at least three load levels; NaN when nothing in the rows varies load.
    A sweep never mixes series: the overall row is the mean of the series' own sweeps, not a
    correlation across unrelated setups that happen to share a method and K."""
    rhos = []
    keys = [k for k in ("series", "metric", "method", "k") if k in ok.columns]
    for _, sweep in ok.groupby(keys, dropna=False):
        load = pd.to_numeric(sweep["load"], errors="coerce")
        if load.nunique() < 3:
            continue
        measured = pd.to_numeric(sweep["measured_value"], errors="coerce")
        predicted = sweep["predicted_value"].astype(float)
        if measured.nunique() < 2 or predicted.nunique() < 2:
            continue  # a constant side has no rank order: ρ is undefined (QA: SciPy warned)
        rho = spearman_rho(measured, predicted)
        if np.isfinite(rho):
            rhos.append(float(rho))
    return float(np.mean(rhos)) if rhos else math.nan


def spearman_rho(a: pd.Series, b: pd.Series) -> float:
    """Spearman's ρ of two equal-length samples as ``scipy.stats.spearmanr`` computes it:
    Pearson's r (``np.corrcoef``) of their average ranks, NaN where either holds a NaN. Written
    here because importing ``scipy.stats`` took ~0.3 s of every ``simspec validate``, for
    this one statistic (tests/test_validate.py checks it equals SciPy's bit for bit)."""
    x = np.column_stack([a.to_numpy(dtype=float), b.to_numpy(dtype=float)])
    if np.isnan(x).any():
        return math.nan
    ranks = np.column_stack([pd.Series(col).rank(method="average").to_numpy() for col in x.T])
    return float(np.corrcoef(ranks, rowvar=False)[1, 0])


# the per-series table's errors as people read them: in percent, as the CLI's summary line, the
# HTML report and the README state them (the predictions CSV keeps rel_error a fraction)
PERCENT_COLUMNS = {"mape": "MAPE %", "max_abs_error": "max |err| %", "bias": "bias %"}


def percent_table(table: pd.DataFrame) -> pd.DataFrame:
    """The per-series table as shown (CLI and HTML report): errors in percent, under headers
    that say so, and rho as a correlation."""
    shown = table.copy()
    for col in PERCENT_COLUMNS:
        shown[col] = 100 * shown[col].astype(float)
    return shown.rename(columns={**PERCENT_COLUMNS, "trend_rho": "trend rho"})


def mape_line(pred: pd.DataFrame, table: pd.DataFrame) -> str:
    """The overall error in one sentence, in percent (the CLI prints it, the report heads
    its table with it)."""
    ok = int(table.iloc[-1]["ok"])
    if ok == 0:
        return f"0 of {len(pred)} rows predicted: no error to report (each row says why)"
    line = (
        f"{ok} of {len(pred)} rows predicted; MAPE {table.iloc[-1]['mape']:.1%} "
        f"({unique_mape(pred):.1%} counting each measurement once"
    )
    own = own_source_rows(pred)
    if own.any():
        rest = pred[(pred["status"] == "ok") & ~own]
        rest_mape = float(rest["rel_error"].astype(float).abs().mean()) if len(rest) else math.nan
        line += (
            f"; {rest_mape:.1%} without the {int(own.sum())} rows predicted from their own "
            "measurement: a tau row from the preset copied from it or the trace it was "
            "measured on, which checks the acceptance model, not a prediction"
        )
    return line + ")"


def own_source_rows(pred: pd.DataFrame) -> pd.Series:
    """The predicted rows whose acceptance is their own measurement (predict.OWN_SOURCE)."""
    from simspec.studies.validation.predict import OWN_SOURCE

    if "acceptance_source" not in pred.columns:
        return pd.Series(False, index=pred.index)
    source = pred["acceptance_source"].fillna("").astype(str)
    return (pred["status"] == "ok") & source.str.endswith(OWN_SOURCE)


def unique_mape(pred: pd.DataFrame) -> float:
    """MAPE with each measurement counted once (duplicates across sources dropped)."""
    ok = pred[pred["status"] == "ok"]
    cols = [c for c in SAME_MEASUREMENT if c in ok.columns]
    once = ok.drop_duplicates(subset=cols)
    return float(once["rel_error"].astype(float).abs().mean()) if len(once) else math.nan
