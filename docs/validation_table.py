"""Refresh the README's validation table and the recorded summary CI compares against.

    simspec validate --out /tmp/predictions.csv
    python docs/validation_table.py /tmp/predictions.csv [--record]

Prints the per-series markdown table; --record also rewrites
simspec/data/validation/recorded.json (do that only with the change that moved the numbers, and
say why in its commit).
"""

from __future__ import annotations

import argparse
import json
from datetime import date
from pathlib import Path

import pandas as pd

from simspec.studies.validation.summary import series_table, unique_mape

RECORDED = Path(__file__).resolve().parent.parent / "simspec/data/validation/recorded.json"


def _pct(v: float) -> str:
    return "" if pd.isna(v) else f"{100 * v:.1f} %"


def read_predictions(path: Path) -> pd.DataFrame:
    """`simspec validate --out`'s CSV with its numeric columns as numbers."""
    pred = pd.read_csv(path, dtype=str, keep_default_na=False)
    for col in ("predicted_value", "predicted_tau", "rel_error"):
        pred[col] = pd.to_numeric(pred[col], errors="coerce")
    return pred


def markdown_table(pred: pd.DataFrame) -> str:
    """The README's per-series table: every series with a predicted row, and the total."""
    lines = [
        "| series | rows | predicted | MAPE | max error | bias | trend ρ |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in series_table(pred).itertuples():
        if r.ok or r.series == "ALL":
            rho = "" if pd.isna(r.trend_rho) else f"{r.trend_rho:.2f}"
            lines.append(
                f"| {r.series} | {r.rows} | {r.ok} | {_pct(r.mape)} | "
                f"{_pct(r.max_abs_error)} | {_pct(r.bias)} | {rho} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("predictions", type=Path)
    ap.add_argument("--record", action="store_true", help="rewrite recorded.json")
    args = ap.parse_args()
    pred = read_predictions(args.predictions)
    print(markdown_table(pred))
    table = series_table(pred)
    if args.record:
        total = table.iloc[-1]
        record = {
            "note": f"summary of `simspec validate` on simspec/data/validation/cases.csv, "
            f"{date.today()}; tests/test_validate.py fails if the overall MAPE rises above "
            "mape + 0.005 or fewer rows are predicted",
            "rows": int(total["rows"]),
            "ok": int(total["ok"]),
            "mape": round(float(total["mape"]), 4),
            "unique_mape": round(unique_mape(pred), 4),
            "series": {
                r.series: {"ok": int(r.ok), "mape": None if pd.isna(r.mape) else round(r.mape, 4)}
                for r in table.itertuples()
                if r.series != "ALL"
            },
        }
        RECORDED.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
