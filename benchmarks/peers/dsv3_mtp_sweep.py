"""DeepSeek-V3 on 8xH200 (TP8) under SGLang, batch 1/8/32/64, without and with MTP (K=1,
alpha 0.85): TPOT and the MTP speedup from AIConfigurator and from simspec, beside the published
SGLang numbers (cases_moe_serving.csv: PR #3582 at batch 1, the SGLang docs at batch 1 and 32).

    python benchmarks/peers/dsv3_mtp_sweep.py --aic /path/to/venv/bin/aiconfigurator

Both tools see the same closed loop: a batch of B requests of 512 prompt and 256 output tokens
(simspec's default workload lengths), 8 turnovers for simspec. AIConfigurator is told the MTP
acceptance as --nextn-accepted 0.85; simspec as alpha 0.85.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from aiconfigurator_side_by_side import Deployment, Estimator

from simspec import Scenario, simulate

BATCHES = (1, 8, 32, 64)
ALPHA = 0.85
ISL, OSL = 512, 256
# published (cases_moe_serving.csv): sglpr3582-dsv3-nextn-bs1(-tput): 77 tok/s with NextN at
# batch 1 and a 1.76x speedup, so 1000/77 = 13.0 ms MTP and 1.76 x 13.0 = 22.9 ms without;
# sgldocs-dsv3-mtp-bs1/bs32: 1.8x at batch 1, 1.5x at batch 32 (H200 TP8)
PUBLISHED = {
    1: "AR ~22.9 ms, MTP ~13.0 ms, 1.76x (PR #3582); 1.8x (docs)",
    32: "1.5x (docs)",
}


def simspec_tpot(batch: int, mtp: bool) -> tuple[float, float]:
    method = {"name": "mtp", "k": 1, "acceptance": {"alpha": ALPHA}} if mtp else {
        "name": "autoregressive", "k": 0}  # fmt: skip
    sc = Scenario.model_validate(
        {
            "model": "deepseek-v3",
            "gpu": "h200",
            "tp": 8,
            "engine": "sglang",
            "workload": {"concurrency": batch, "turnovers": 8, "prompt": {"mean": ISL},
                         "output": {"mean": OSL}},
            "method": method,
        }
    )  # fmt: skip
    s = simulate(sc).summary
    return s.tpot_ms_mean, s.throughput_tok_s


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--aic", required=True, help="the aiconfigurator executable")
    ap.add_argument("--cache", type=Path, help="JSON of every estimate, reused across runs")
    ap.add_argument("--raw", type=Path, help="a folder for each call's full output")
    args = ap.parse_args()
    est = Estimator(args.aic, args.cache, args.raw, 300.0)
    ar = Deployment("deepseek-ai/DeepSeek-V3", "h200_sxm", "sglang", 8, 1, ISL, OSL, False)
    mtp = replace(ar, nextn=1, accepted=ALPHA)
    print(
        "| batch | AIC TPOT AR / MTP (ms) | AIC speedup | simspec TPOT AR / MTP (ms) "
        "| simspec speedup | published |"
    )
    print("|---|---|---|---|---|---|")
    for b in BATCHES:
        a, _ = est(ar, b)
        m, _ = est(mtp, b)
        aic = (
            f"{a['tpot_ms']:.1f} / {m['tpot_ms']:.1f} | "
            f"{m['throughput_tok_s'] / a['throughput_tok_s']:.2f}"
            if isinstance(a, dict) and isinstance(m, dict)
            else f"refused: {a if isinstance(a, str) else m} |"
        )
        (sa, ta), (sm, tm) = simspec_tpot(b, False), simspec_tpot(b, True)
        sim = f"{sa:.1f} / {sm:.1f} | {tm / ta:.2f}"
        print(f"| {b} | {aic} | {sim} | {PUBLISHED.get(b, '')} |", flush=True)


if __name__ == "__main__":
    main()
