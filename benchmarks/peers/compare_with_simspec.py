"""AIConfigurator's predictions (aiconfigurator_side_by_side.py) against simspec's on the same
published rows: rows each tool predicts and its mean |error| per metric, per series, overall,
and at the two ends of the load (batch 1 vs high load).

One command, from the repository root with the simspec under test on PYTHONPATH:

    python benchmarks/peers/compare_with_simspec.py --out-dir /tmp/peers

runs `simspec validate --out` on each case table with the same --assume the AIConfigurator CSV
was made with (SUITES), then joins. --reuse takes the simspec CSVs already in --out-dir;
--markdown prints the tables as markdown (README.md's).

The ends: a row is "batch 1" when one request is in flight (load_kind single, or a load of 1
that is not a rate); "high load" when it is a burst (a static batch its notes say was sent at
once), a closed loop or static batch of 32 or more, or a Poisson rate (qps); "middle" otherwise.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd

from simspec.studies.validation.assume import fill_unstated, parse_assumptions
from simspec.studies.validation.setups import sent_as_burst

HERE = Path(__file__).parent
# the shared tables beside the repository (its parent's shared/validation), wherever it runs
CASES = HERE.resolve().parents[2] / "shared" / "validation"
# (name, case table, --assume as simspec's validate run uses them, AIConfigurator's CSV)
SUITES = [
    (
        "moe_serving",
        CASES / "cases_moe_serving.csv",
        ["gpu=h200", "load_kind=single"],
        HERE / "aiconfigurator_moe_serving.csv",
    ),
    (
        "gpustack",
        CASES / "cases_serving_gpustack.csv",
        ["gpu=a100_80gb"],
        HERE / "aiconfigurator_gpustack.csv",
    ),
]
METRICS = ["tpot_ms", "throughput_tok_s", "ttft_ms", "speedup"]
HIGH_LOAD = 32


def end(row: dict[str, str]) -> str:
    """Which end of the load a (filled) row sits at."""
    kind, load = row["load_kind"], pd.to_numeric(row["load"], errors="coerce")
    if kind == "qps":
        return "high load"
    if kind == "single" or load == 1:
        return "batch 1"
    if (kind == "static_batch" and sent_as_burst(row["notes"])) or load >= HIGH_LOAD:
        return "high load"
    return "middle"


def run_simspec(cases: Path, assume: list[str], out: Path) -> None:
    flags = [f for a in assume for f in ("--assume", a)]
    cmd = [sys.executable, "-m", "simspec.cli", "validate", "--cases", str(cases), *flags]
    print("$ simspec " + " ".join(cmd[3:] + ["--out", str(out)]), flush=True)
    subprocess.run([*cmd, "--out", str(out)], check=True, stdout=subprocess.DEVNULL)


def joined(cases: Path, assume: list[str], aic_csv: Path, simspec_csv: Path) -> pd.DataFrame:
    """One line per case row: measured, each tool's prediction (NaN where it has none)."""
    assumed = parse_assumptions(assume)
    rows = pd.read_csv(cases, dtype=str, keep_default_na=False).to_dict("records")
    frame = pd.DataFrame(
        {
            "case_id": r["case_id"],
            "series": r["series"],
            "metric": r["metric"],
            "end": end(fill_unstated(r, assumed)[0]),
            "measured": float(r["measured_value"] or "nan"),
        }
        for r in rows
    )
    aic = pd.read_csv(aic_csv)
    aic = aic.loc[aic["aic_status"] == "ok", ["case_id", "aic_predicted"]]
    sim = pd.read_csv(simspec_csv)
    sim = sim.loc[sim["status"] == "ok", ["case_id", "predicted_value"]]
    frame = frame.merge(aic, on="case_id", how="left").merge(sim, on="case_id", how="left")
    return frame.rename(columns={"aic_predicted": "aic", "predicted_value": "simspec"})


def mape(pred: pd.Series, measured: pd.Series) -> float:
    ok = pred.notna()
    if not ok.any():
        return math.nan
    return float((100 * (pred[ok] - measured[ok]).abs() / measured[ok]).mean())


def summary(frame: pd.DataFrame, by: str | None) -> pd.DataFrame:
    """Per group (and ALL): rows, each tool's predicted count and MAPE per metric, and both
    tools' MAPE on the rows both predict."""
    groups = [] if by is None else list(frame.groupby(by, sort=True))
    out = []
    for name, g in [*groups, ("ALL", frame)]:
        line: dict = {"group": name, "rows": len(g)}
        both = g[g["aic"].notna() & g["simspec"].notna()]
        for tool in ("aic", "simspec"):
            line[f"{tool} n"] = int(g[tool].notna().sum())
            line[f"{tool} MAPE"] = mape(g[tool], g["measured"])
        line["both n"] = len(both)
        line["aic on both"] = mape(both["aic"], both["measured"])
        line["simspec on both"] = mape(both["simspec"], both["measured"])
        for metric in METRICS:
            m = both[both["metric"] == metric]
            line[f"{metric}: n, aic / simspec"] = (
                f"{len(m)}: {mape(m['aic'], m['measured']):.1f} / "
                f"{mape(m['simspec'], m['measured']):.1f}"
                if len(m)
                else ""
            )
        out.append(line)
    return pd.DataFrame(out)


def cell(value: object) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.1f}"
    return "" if value is None else str(value)


def show(title: str, table: pd.DataFrame, markdown: bool) -> None:
    print(f"\n{title}")
    if not markdown:
        print(table.map(cell).to_string(index=False))
        return
    print("| " + " | ".join(table.columns) + " |")
    print("|" + "---|" * len(table.columns))
    for values in table.itertuples(index=False):
        print("| " + " | ".join(cell(v) for v in values) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--out-dir", type=Path, required=True, help="for simspec's validate CSVs")
    ap.add_argument("--reuse", action="store_true", help="take the simspec CSVs already there")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    missing = [str(c) for _, c, _, a in SUITES for c in (c, a) if not c.is_file()]
    if missing:  # QA: a CalledProcessError or FileNotFoundError traceback
        raise SystemExit(f"error: no {missing[0]} (the shared case tables sit beside the repo)")
    frames = []
    for name, cases, assume, aic_csv in SUITES:
        sim_csv = args.out_dir / f"simspec_{name}.csv"
        if not (args.reuse and sim_csv.exists()):
            run_simspec(cases, assume, sim_csv)
        frame = joined(cases, assume, aic_csv, sim_csv).assign(suite=name)
        frames.append(frame)
        note = f"{name}: {', '.join(assume)}"
        show(f"{note} -- per series (MAPE %)", summary(frame, "series"), args.markdown)
        show(f"{note} -- by end of the load", summary(frame, "end"), args.markdown)
    every = pd.concat(frames, ignore_index=True)
    every.to_csv(args.out_dir / "side_by_side.csv", index=False)
    show("both tables -- by suite", summary(every, "suite"), args.markdown)
    show("both tables -- by end of the load", summary(every, "end"), args.markdown)
    show("both tables -- by metric", summary(every, "metric"), args.markdown)


if __name__ == "__main__":
    main()
