"""How often a sweep cell's 95 % intervals hold the value of one long run (README: Measurement).

    python tools/interval_coverage.py                    # EAGLE-3, batch 8, 20 seeds of 128
    python tools/interval_coverage.py --batch 32 --requests 512 --seeds 16
    python tools/interval_coverage.py --alpha 0.7        # a parametric acceptance instead

Each seed runs plain decoding and the method at a fixed length (``--requests``; 16 turnovers
is where a sweep's precision target may stop a cell); the reference is one run of
``--long`` requests on another seed. Printed per quantity (the speedup, the method's and plain
decoding's throughput, the method's p50 and p99 TPOT and TTFT): how many seeds' intervals hold
the reference, the mean half-width against 1.96 standard deviations of the seeds' values (above
1: conservative), and the seeds' mean bias. Slow by design (seconds per seed); never part of
the test suite.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import simspec  # after the path above


def cell(method: str | dict, batch: int, requests: int, seed: int) -> dict[str, tuple]:
    """(value, low, high) of each quantity for one seed at one length."""
    cfg = {
        "methods": ["autoregressive", method],
        "batch_sizes": [batch],
        "precision_target": 0,
        # exactly these requests: the 64-turnover floor would raise them (QA: "256" ran 1,024)
        "workload": {"requests": requests, "turnovers": 0},
        "seed": seed,
    }
    rows = simspec.sweep(cfg).set_index("method")
    name = method if isinstance(method, str) else method["name"]
    spec, plain = rows.loc[name], rows.loc["autoregressive"]
    return {
        "speedup": (spec.speedup, spec.speedup_ci_low, spec.speedup_ci_high),
        "throughput": (spec.throughput_tok_s, spec.throughput_tok_s_ci_low,
                       spec.throughput_tok_s_ci_high),
        "baseline throughput": (plain.throughput_tok_s, plain.throughput_tok_s_ci_low,
                                plain.throughput_tok_s_ci_high),
        **{f"{m} {q}": (spec[f"{m}_ms_{q}"], spec[f"{m}_ms_{q}_ci_low"],
                        spec[f"{m}_ms_{q}_ci_high"])
           for m in ("tpot", "ttft") for q in ("p50", "p99")},
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--method", default="eagle3")
    ap.add_argument("--alpha", type=float, help="a parametric acceptance (default: the preset)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--long", type=int, default=8192, help="requests of the reference run")
    args = ap.parse_args()
    method: str | dict = args.method
    if args.alpha is not None:
        method = {"name": args.method, "acceptance": {"alpha": args.alpha}}
    truth = {q: v[0] for q, v in cell(method, args.batch, args.long, 10_000).items()}
    seeds = [cell(method, args.batch, args.requests, s) for s in range(args.seeds)]
    print(f"{args.method} at batch {args.batch}: {args.seeds} seeds of {args.requests} requests "
          f"against {args.long}")  # fmt: skip
    for q, ref in truth.items():
        values = np.array([s[q][0] for s in seeds])
        held = sum(lo <= ref <= hi for _, lo, hi in (s[q] for s in seeds))
        half = np.mean([(hi - lo) / 2 for _, lo, hi in (s[q] for s in seeds)])
        spread = 1.96 * float(np.std(values, ddof=1))
        print(f"  {q}: held {held}/{args.seeds}, half-width {half / spread:.2f}x 1.96 sd, "
              f"bias {100 * (values.mean() / ref - 1):+.2f} %")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
