"""Wall time of the engine's hot loop: 10,000 requests, closed loop at concurrency 64, EAGLE K=3.

Target: <= 1.0 s on a 2-core machine (issue "Answers in seconds"; it was <= 2 s). Run by hand:

    python benchmarks/bench_engine.py [--requests 10000] [--repeat 3] [--profile]

Prints seconds per run, iterations simulated and iterations per second. Not a test.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import time

from simspec.catalog.methods import default_methods
from simspec.config import Scenario, WorkloadConfig
from simspec.engine.simulation import simulate


def scenario(requests: int) -> Scenario:
    eagle = next(m for m in default_methods() if m.name == "eagle3")
    return Scenario(method=eagle, workload=WorkloadConfig(concurrency=64, requests=requests))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3, choices=range(1, 21), metavar="1..20")
    ap.add_argument("--profile", action="store_true", help="print the top of a cProfile")
    args = ap.parse_args()
    sc = scenario(args.requests)
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"machine: {os.cpu_count()} cores ({platform.processor() or platform.machine()}), load "
        f"{load}; python {platform.python_version()}"
    )
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        simulate(sc)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)
        return
    best = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        result = simulate(sc)
        best = min(best, time.perf_counter() - t0)
    n_it, n = result.summary.iterations, result.summary.simulated_requests
    # the measurement rule raises a closed loop to 64 turnovers (4,096 requests here): the
    # count printed is the one simulated (QA: --requests 2000 printed 2000)
    print(
        f"{n} requests, concurrency 64, EAGLE K=3 (ShareGPT trace): "
        f"best of {args.repeat}: {best:.2f} s, {n_it} iterations, {n_it / best:,.0f} it/s"
    )


if __name__ == "__main__":
    main()
