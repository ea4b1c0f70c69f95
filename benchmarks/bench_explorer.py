"""Where the explorer's what-if spends its time (issue 18). Run by hand; not a test.

    python benchmarks/bench_explorer.py            # the default what-if: import, cold, warm
    python benchmarks/bench_explorer.py --workers 2 --executor process

Times, in one fresh process: importing the page's modules; the first what-if (cold: the
trace, cost-model and replay caches fill); the same what-if again with a new seed (warm: what
a widget change costs, the page's own cache bypassed). The what-if is the issue's: one method
(EAGLE-3) at the eight default concurrencies. Target: warm <= 2 s on 2 cores.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=None, help="default: the page's choice")
    ap.add_argument("--methods", default="eagle3")
    ap.add_argument("--repeat", type=int, default=3, help="warm runs (the best is reported)")
    args = ap.parse_args()

    t0 = time.perf_counter()
    from simspec.ui import explorer  # the page's own import chain (app.py adds streamlit)

    t_import = time.perf_counter() - t0
    inp = explorer.ExplorerInputs(methods=args.methods.split(","))
    t0 = time.perf_counter()
    explorer.run(inp, workers=args.workers)
    t_cold = time.perf_counter() - t0
    warm = []
    for seed in range(1, args.repeat + 1):
        t0 = time.perf_counter()
        explorer.run(inp.model_copy(update={"seed": seed}), workers=args.workers)
        warm.append(time.perf_counter() - t0)
    print(f"import simspec.ui.explorer: {t_import:.2f} s")
    print(f"first what-if (cold):       {t_cold:.2f} s")
    print(
        f"what-if again (warm):       {min(warm):.2f} s best of {len(warm)} "
        f"({', '.join(f'{w:.2f}' for w in warm)})"
    )


if __name__ == "__main__":
    main()
