"""Run independent simulations serially, on a local process pool, or on a Ray cluster.

Every run is a seeded, self-contained scenario (given as its JSON), so which worker runs it
and in which order cannot change its numbers: the executors differ only in speed. Results come
back as they finish, for callers that stream them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Literal

from simspec.config import Scenario
from simspec.engine.simulation import simulate
from simspec.errors import InputError

Executor = Literal["serial", "process", "ray"]


def run_one(scenario_json: str) -> dict[str, float]:
    """The summary of one scenario (module-level, so process pools and Ray can ship it)."""
    return simulate(Scenario.model_validate_json(scenario_json)).summary


def run_all(
    scenarios: dict[str, str],
    executor: Executor = "process",
    workers: int | None = None,
    ray_address: str | None = None,
) -> Iterator[tuple[str, dict[str, float]]]:
    """``(key, summary)`` for every ``key -> scenario JSON``, in completion order."""
    if not scenarios:
        return
    if executor == "serial" or (executor == "process" and (workers == 1 or len(scenarios) == 1)):
        for key, sc in scenarios.items():
            yield key, run_one(sc)
    elif executor == "process":
        with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
            futures = {pool.submit(run_one, sc): key for key, sc in scenarios.items()}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
    elif executor == "ray":
        yield from _ray(scenarios, workers, ray_address)
    else:
        raise InputError(
            "--executor", f"unknown executor {executor!r}; choose serial, process or ray"
        )


def _ray(
    scenarios: dict[str, str], workers: int | None, address: str | None
) -> Iterator[tuple[str, dict[str, float]]]:
    try:
        import ray
    except ImportError:
        raise InputError("--executor", 'ray is not installed: pip install -e ".[ray]"') from None
    started = False
    if not ray.is_initialized():
        try:
            quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
            if address:
                ray.init(address=address, **quiet)
            else:
                ray.init(num_cpus=workers or os.cpu_count() or 1, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError("--ray-address", f"cannot start or reach Ray: {exc}") from None
        started = True
    try:
        remote = ray.remote(run_one)
        pending = {remote.remote(sc): key for key, sc in scenarios.items()}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield pending.pop(ref), ray.get(ref)
    finally:
        if started:
            ray.shutdown()
