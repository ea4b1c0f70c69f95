"""Wall time of fleet runs on the packaged Azure conversation trace (issue 17, "Done when").

Targets (2 cores): the full conversation hour on the fleet ``plan --trace azure-conv`` picks
for Llama-3.1-8B on H100 with EAGLE-3 <= 60 s; Llama-3.1-70B on one 4xH100 (TP4) replica <= 120 s;
time linear in requests (the hour vs 4 tiled hours); a sharded 24-hour tiled run on the
process pool gives the same per-request table as the serial run. Run by hand:

    python benchmarks/bench_fleet.py [--cases 8b,70b,linear,shard] [--replicas 2] [--hours 24]

Prints seconds, requests and requests/s per case. Not a test.
"""

from __future__ import annotations

import argparse
import os
import time

from simspec.catalog.methods import preset_method
from simspec.config import FleetConfig, Scenario, WorkloadConfig
from simspec.studies.fleet import FleetSlo, per_request, run_fleet
from simspec.studies.runs import Runs


def scenario(model: str, tp: int, tile_s: float | None = None) -> Scenario:
    wl = WorkloadConfig(arrival="replay", arrival_trace="azure-conv", tile_s=tile_s)
    return Scenario(model=model, tp=tp, workload=wl, method=preset_method("eagle3", "sharegpt"))


def timed(cfg: FleetConfig, executor: str = "serial", workers: int | None = None):
    start = time.perf_counter()
    run = run_fleet(cfg, runs=Runs(executor, workers))  # type: ignore[arg-type]
    return time.perf_counter() - start, run


def report(name: str, seconds: float, requests: int) -> None:
    print(f"{name:<40} {seconds:8.1f} s  {requests:>9,} requests  {requests / seconds:8.0f} req/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="8b,70b,linear,shard")
    ap.add_argument("--replicas", type=int, default=1, help="8B fleet (plan --trace picks 1)")
    ap.add_argument("--replicas-70b", type=int, default=1)
    ap.add_argument("--hours", type=float, default=24.0, help="the sharded run's tiled hours")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} cores, load {load}")
    cases = args.cases.split(",")
    slo = FleetSlo(2000, 50)
    if "8b" in cases or "linear" in cases:
        cfg = FleetConfig.uniform(scenario("llama-3.1-8b", 1), args.replicas, "least_outstanding")
        s, run = timed(cfg)
        report(f"8B x{args.replicas}, the hour", s, len(run.requests))
    if "70b" in cases:
        cfg = FleetConfig.uniform(
            scenario("llama-3.1-70b", 4), args.replicas_70b, "least_outstanding"
        )
        s, run = timed(cfg)
        report(f"70B tp4 x{args.replicas_70b}, the hour", s, len(run.requests))
    if "linear" in cases:
        cfg = FleetConfig.uniform(
            scenario("llama-3.1-8b", 1, 4 * 3600.0), args.replicas, "least_outstanding"
        )
        s4, run4 = timed(cfg)
        report(f"8B x{args.replicas}, 4 tiled hours", s4, len(run4.requests))
    if "shard" in cases:
        cfg = FleetConfig.uniform(
            scenario("llama-3.1-8b", 1, args.hours * 3600.0), 2 * args.workers, "round_robin"
        )
        s1, serial = timed(cfg)
        report(f"8B x{2 * args.workers} rr, {args.hours:g} h serial", s1, len(serial.requests))
        s2, sharded = timed(cfg, "process", args.workers)
        report(f"... sharded on {args.workers} processes", s2, len(sharded.requests))
        same = per_request(serial, slo).equals(per_request(sharded, slo))
        print(f"sharded per-request table identical to serial: {same}")


if __name__ == "__main__":
    main()
