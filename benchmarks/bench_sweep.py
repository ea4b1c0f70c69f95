"""Sweep and scaling benchmarks (issue "Sweeps at scale"). Run by hand; not a test.

    python benchmarks/bench_sweep.py grid      # 32 trace-driven points: <= 10 s target
    python benchmarks/bench_sweep.py scaling   # time vs requests, 1k..100k: linear fit and R^2
    python benchmarks/bench_sweep.py memory    # peak memory of one 100k-request run

grid: 300 requests (turnovers=0: no 64-turnover minimum) x concurrency {1, 16, 64, 128} x
{eagle3, ngram} x the 4 packaged datasets, acceptance replayed from the traces; the
autoregressive baselines (16 more runs) are counted in the total and reported apart. scaling:
EAGLE-3 K=3 at concurrency 64.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import time

import numpy as np

from simspec.catalog.methods import preset_method
from simspec.config import Scenario, WorkloadConfig
from simspec.engine.simulation import simulate
from simspec.studies.runs import Runs
from simspec.studies.sweep import SweepConfig, run_sweep


def grid(executor: str) -> None:
    cfg = SweepConfig(
        methods=[preset_method("eagle3"), preset_method("ngram")],
        batch_sizes=[1, 16, 64, 128],
        workload=WorkloadConfig(requests=300, turnovers=0),
        grid={"dataset": ["sharegpt", "instructcoder", "gsm8k", "cnn"]},
    )
    t0 = time.perf_counter()
    frame = run_sweep(cfg, runs=Runs(executor))  # type: ignore[arg-type]
    total = time.perf_counter() - t0
    print(f"{len(frame)} method points (+16 baselines), executor {executor}: {total:.2f} s")


def scaling() -> None:
    eagle = preset_method("eagle3")
    sizes = [1_000, 3_000, 10_000, 30_000, 100_000]
    secs = []
    for n in sizes:
        # turnovers=0: exactly n requests (the 64-turnover rule would raise 1k and 3k to 4,096)
        work = WorkloadConfig(concurrency=64, requests=n, turnovers=0)
        sc = Scenario(method=eagle, workload=work)
        t0 = time.perf_counter()
        simulate(sc)
        secs.append(time.perf_counter() - t0)
        print(f"{n:>7} requests: {secs[-1]:.2f} s")
    slope, intercept = np.polyfit(sizes, secs, 1)
    pred = slope * np.array(sizes) + intercept
    r2 = 1 - np.sum((np.array(secs) - pred) ** 2) / np.sum((secs - np.mean(secs)) ** 2)
    print(f"linear fit: {slope * 1e6:.1f} us per request + {intercept:.2f} s, R^2 = {r2:.4f}")


def memory() -> None:
    sc = Scenario(
        method=preset_method("eagle3"), workload=WorkloadConfig(concurrency=64, requests=100_000)
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    simulate(sc)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak resident memory: {peak / 1024:.0f} MiB (before the run {before / 1024:.0f} MiB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["grid", "scaling", "memory"])
    ap.add_argument("--executor", default="process", choices=["serial", "process", "ray"])
    args = ap.parse_args()
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"machine: {os.cpu_count()} cores ({platform.machine()}), load {load}; "
        f"python {platform.python_version()}"
    )
    {"grid": lambda: grid(args.executor), "scaling": scaling, "memory": memory}[args.what]()


if __name__ == "__main__":
    main()
