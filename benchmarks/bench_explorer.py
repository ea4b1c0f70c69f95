"""Where the explorer's what-if spends its time. Run by hand; not a test.

    python benchmarks/bench_explorer.py                 # one method's what-if: import, cold, warm
    python benchmarks/bench_explorer.py --methods eagle3,ngram   # the page's default (the CLI's)

Times, in one fresh process: importing the page's modules (Streamlit and simspec.ui); starting
the worker pool; the first what-if (cold: traces, cost models and replays load in every
process); the same what-if again with a new seed and nothing remembered (warm: every run
anew); moving the K slider (warm: the plain-decoding baseline is remembered, only the method's
runs are new); and the same runs one after another in this process, for the split
between simulation and pool. The what-if: one method (EAGLE-3) at the eight default
concurrencies, the page's default requests per run. Target: warm <= 2 s on 2 cores.

Also runs against an older checkout (``PYTHONPATH=<old tree>``, where the page's logic was one
``simspec.ui.explorer`` module): what that lacks is skipped.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--methods", default="eagle3")
    ap.add_argument("--repeat", type=int, default=3, help="warm runs (the best is reported)")
    args = ap.parse_args()

    t0 = time.perf_counter()
    import streamlit  # noqa: F401  (the page imports it first)

    t_st = time.perf_counter() - t0
    t0 = time.perf_counter()
    try:
        from simspec.ui import inputs, runs
    except ImportError:  # an older checkout
        from simspec.ui import explorer as inputs

        runs = inputs
    import simspec.ui.figures  # noqa: F401  (the page draws with it)

    t_import = time.perf_counter() - t0
    inp = inputs.ExplorerInputs(methods=args.methods.split(","))
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"import streamlit:           {t_st:.2f} s")
    print(f"import simspec.ui:          {t_import:.2f} s")
    start = runs.POOL.get if hasattr(runs, "POOL") else getattr(runs, "worker_pool", None)
    if start is not None:
        pool = start()
        t = _timed(lambda: list(pool.map(abs, range(2 * (os.cpu_count() or 1)))))
        print(f"start the kept pool:        {t:.2f} s (fork server + workers, once per page)")
    print(f"first what-if (cold):       {_timed(lambda: runs.run(inp)):.2f} s")
    forget = getattr(runs, "forget_runs", lambda: None)
    warm = []
    for s in range(1, args.repeat + 1):
        forget()
        warm.append(_timed(lambda s=s: runs.run(inp.model_copy(update={"seed": s}))))
    shown = ", ".join(f"{w:.2f}" for w in warm)
    best = f"{min(warm):.2f} s best of {len(warm)}"
    print(f"what-if again (warm):       {best} ({shown}), all runs anew")
    k_moves = [
        _timed(lambda k=k: runs.run(inp.model_copy(update={"seed": 1, "k": k}))) for k in (2, 4, 5)
    ]
    shown = ", ".join(f"{w:.2f}" for w in k_moves)
    print(f"K moved (warm):             {min(k_moves):.2f} s best of 3 ({shown})")
    forget()
    cpu = time.process_time()  # the first warm what-if's runs (seed 1), one after another here
    seed1 = inp.model_copy(update={"seed": 1})
    if hasattr(runs, "RUNS"):
        serial = _timed(lambda: runs.run(seed1, replace(runs.RUNS, executor="serial")))
    else:
        serial = _timed(lambda: runs.run(seed1, workers=1))
    cpu = time.process_time() - cpu
    print(f"the same runs in-process:   {serial:.2f} s, {cpu:.2f} s of CPU (the simulation alone)")


if __name__ == "__main__":
    main()
