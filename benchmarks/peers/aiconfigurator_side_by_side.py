"""NVIDIA AIConfigurator (pip `aiconfigurator`, Apache-2.0) on the same published rows simspec
validates, so the two can be scored side by side.

AIConfigurator is not a dependency of simspec: install it in a venv of its own and point this
script at its executable. Each distinct deployment of the chosen rows is estimated once with
`aiconfigurator cli estimate --estimate-mode agg` (a steady batch of `--batch-size` requests at
the row's mean prompt/output lengths), and its TPOT, TTFT and output tokens/s are written per row
with the command that produced them.

    python benchmarks/peers/aiconfigurator_side_by_side.py \
        --aic /path/to/venv/bin/aiconfigurator \
        --cases ../shared/validation/cases_serving_gpustack.csv \
        --out benchmarks/peers/aiconfigurator_qwen3_235b_h100.csv

A burst of N requests (``static_batch``) is estimated at batch size N, halved until the
deployment holds it (AIConfigurator reports OOM past its KV capacity): it has no queue, prefill
backlog or drain, so this is its reading of the row, not a burst. ``aic_batch`` says which batch
it estimated.
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pandas as pd

# simspec ids -> AIConfigurator's
SYSTEMS = {"h100_sxm": "h100_sxm", "h200": "h200_sxm", "a100_80gb": "a100_sxm", "b200": "b200_sxm"}
HF_IDS = {
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "deepseek-r1": "deepseek-ai/DeepSeek-R1",
}
# a row served an FP8 checkpoint (its notes lead with "FP8;"): Qwen's FP8 releases are
# block-quantised (128x128), AIConfigurator's fp8_block
FP8 = ["--gemm-quant-mode", "fp8_block", "--moe-quant-mode", "fp8_block"]
FIELDS = {
    "tpot_ms": r"TPOT:\s+([\d.,]+) ms",
    "ttft_ms": r"TTFT:\s+([\d.,]+) ms",
    "throughput_tok_s": r"tokens/s:\s+([\d.,]+)",
}


def command(aic: str, row: pd.Series, batch: int) -> list[str]:
    tp = int(float(row["tp"]))
    return [
        aic, "cli", "estimate", "--estimate-mode", "agg",
        "--model-path", HF_IDS[row["target_model"]],
        "--system", SYSTEMS[row["gpu"]],
        "--backend", row["engine"],
        "--tp-size", str(tp), "--moe-tp-size", str(tp), "--moe-ep-size", "1",
        "--batch-size", str(batch),
        "--isl", str(round(float(row["prompt_len"]))),
        "--osl", str(max(2, round(float(row["output_len"])))),
        *(FP8 if row["notes"].lstrip().startswith("FP8") else []),
    ]  # fmt: skip


def estimate(cmd: list[str]) -> dict[str, float] | str:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    text = done.stdout + done.stderr
    found = {k: re.search(p, text) for k, p in FIELDS.items()}
    if not all(found.values()):
        errors = [ln for ln in text.splitlines() if ln.startswith(("Error", "RuntimeError"))]
        return (errors or [f"exit {done.returncode}, no estimate printed"])[-1]
    return {k: float(m.group(1).replace(",", "")) for k, m in found.items() if m}


def fitting_estimate(aic: str, row: pd.Series) -> tuple[dict[str, float] | str, int, str]:
    """The estimate at the row's load, or at the largest halving of it that does not OOM."""
    batch = int(float(row["load"]))
    while True:
        cmd = command(aic, row, batch)
        result = estimate(cmd)
        if isinstance(result, dict) or "OOM" not in result or batch == 1:
            return result, batch, "aiconfigurator " + " ".join(cmd[1:])
        batch //= 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aic", required=True, help="the aiconfigurator executable")
    ap.add_argument("--cases", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="qwen3-235b-a22b")
    ap.add_argument("--gpu", default="h100_sxm")
    args = ap.parse_args()
    cases = pd.read_csv(args.cases, dtype=str, keep_default_na=False)
    rows = cases[
        (cases["target_model"] == args.model)
        & (cases["gpu"] == args.gpu)
        & (cases["method"] == "autoregressive")
        & cases["metric"].isin(list(FIELDS))
        & (cases["tp"] != "")
        & (cases["prompt_len"] != "")
    ]
    out, seen = [], {}
    for _, row in rows.iterrows():
        key = " ".join(command(args.aic, row, int(float(row["load"])))[1:])
        if key not in seen:
            seen[key] = fitting_estimate(args.aic, row)
        result, batch, cmd = seen[key]
        ok = isinstance(result, dict)
        out.append(
            {
                "case_id": row["case_id"],
                "metric": row["metric"],
                "measured_value": float(row["measured_value"]),
                "aic_predicted": result[row["metric"]] if ok else float("nan"),
                "aic_batch": batch,
                "aic_error": "" if ok else result,
                "command": cmd,
            }
        )
    pd.DataFrame(out).to_csv(args.out, index=False)
    print(f"{len(out)} rows, {len(seen)} estimates: wrote {args.out}")


if __name__ == "__main__":
    main()
