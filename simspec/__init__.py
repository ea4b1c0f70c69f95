"""simspec: wall-clock speedup of speculative decoding under continuous batching.

The public API, layer by layer (each imports only the ones above it in this list):

- ``simspec.config``: every input schema (:class:`Scenario`, :class:`Deployment`, ...).
- ``simspec.catalog``: presets as data: hardware, models, methods, traces, vLLM configs.
- ``simspec.engine``: one replica in SimPy: workload, scheduler, speculators and acceptance,
  cost model, metrics (:func:`simulate`).
- ``simspec.studies``: what is built from many runs: sweeps, capacity planning, speculation
  schedules, validation, calibration; each takes one ``Runs`` (``simspec.studies.runs``): where
  its runs execute, the runs it reuses, whom it tells.
- ``simspec.cli`` and ``simspec.ui``: the ``simspec`` command and the Streamlit explorer.

Run one scenario::

    from simspec import Scenario, simulate, preset_method

    work = {"concurrency": 16, "requests": 64, "turnovers": 0}  # exactly 64 measured
    sc = Scenario(method=preset_method("eagle3"), workload=work)
    print(simulate(sc).summary.throughput_tok_s)

(Without ``turnovers: 0`` a closed loop measures at least 64 x its concurrency: README
"Measurement".)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from simspec.catalog.methods import preset_method
from simspec.config import (
    AcceptanceConfig,
    Deployment,
    LengthSpec,
    MethodConfig,
    Scenario,
    SchedulerConfig,
    WorkloadConfig,
)
from simspec.engine.simulation import SimResult, simulate

if TYPE_CHECKING:
    from simspec.studies.runs import Runs
    from simspec.studies.sweep import SweepConfig

__all__ = [
    "AcceptanceConfig",
    "Deployment",
    "LengthSpec",
    "MethodConfig",
    "Runs",
    "Scenario",
    "SchedulerConfig",
    "SimResult",
    "SweepConfig",
    "WorkloadConfig",
    "preset_method",
    "simulate",
    "sweep",
    "validate",
]


def sweep(cfg: SweepConfig | dict[str, Any], **options: Any):
    """Speedup of every method over plain decoding at every batch size (a DataFrame); the
    options are :func:`simspec.studies.sweep.run_sweep`'s, e.g. ``runs=Runs("process",
    workers=2)`` (:class:`simspec.Runs`: executor, workers, a journal's cache, ...)."""
    from simspec.studies.sweep import SweepConfig, run_sweep

    return run_sweep(SweepConfig.model_validate(cfg), **options)


def validate(cases: str | Path | None = None, **options: Any):
    """Predictions for a table of published measurements (default: the packaged cases), one
    row per case with the predicted value, its relative error and a status; the options are
    :func:`simspec.studies.validation.run.validate`'s (``runs``, ``assume``, ``assume_gpu``,
    ``profile``)."""
    from simspec.studies.validation.cases import read_cases
    from simspec.studies.validation.run import validate as run

    return run(read_cases(None if cases is None else Path(cases)), **options)


def __getattr__(name: str) -> Any:
    # the studies load only when asked for: ``import simspec.engine`` stays engine-only
    if name == "SweepConfig":
        from simspec.studies.sweep import SweepConfig

        return SweepConfig
    if name == "Runs":
        from simspec.studies.runs import Runs

        return Runs
    raise AttributeError(f"module 'simspec' has no attribute {name!r}")
