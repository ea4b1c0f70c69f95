"""The explorer's compare view: an uploaded benchmark result, each run simulated on the
sidebar's deployment (``simspec compare``'s plans and report figure)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from simspec.catalog.hardware import load_engine
from simspec.catalog.models import load_model, preset_id
from simspec.config import deployment_fields
from simspec.errors import InputError
from simspec.studies.bench import read_result
from simspec.studies.bench.calibrate import runs_gpu, unknown_gpu
from simspec.studies.bench.compare import Plan, check_runs, compare, plan_run, sglang_runs
from simspec.studies.bench.measured import MeasuredRun
from simspec.studies.bench.report import by_load
from simspec.ui.inputs import ExplorerInputs

# A page answers in seconds: a run of GPUStack's size (100 requests of ~220 tokens at
# concurrency 1) simulates in ~3 s on one core, so 16 runs are under a minute; more runs are
# what the command line (simspec compare) is for.
MAX_PAGE_RUNS = 16


@dataclass(frozen=True)
class Compared:
    """Measured against predicted: one row per run and metric, the figure, and each run's
    notes (what was assumed to simulate it)."""

    frame: pd.DataFrame
    figure: go.Figure
    notes: list[str]


def compare_upload(
    result: str, inputs: ExplorerInputs, method: str = "autoregressive", profile: str | None = None
) -> Compared:
    """Every run of the stored upload ``result`` on the sidebar's deployment (the model the
    file names where it is a preset, else the sidebar's), on ``profile`` where given."""
    runs = read_result(result, "benchmark result")
    if len(runs) > MAX_PAGE_RUNS:
        raise InputError(
            "benchmark result",
            f"{len(runs)} runs; the page compares at most {MAX_PAGE_RUNS} (simspec compare "
            "takes more)",
        )
    check_runs(runs)
    if method == "autoregressive" and (spec := next((r for r in runs if r.acceptance), None)):
        # QA: the refusal named --method, a flag the page does not have
        raise InputError(
            "method",
            f"{spec.name} measured speculative decoding; this tab compares plain decoding "
            "only: run simspec compare --method METHOD on the file",
        )
    base = deployment_fields(inputs)
    notes = _file_deployment(runs, base, inputs)
    engine = str(base.get("engine", inputs.engine))
    if inputs.async_scheduling is not None and load_engine(engine).async_spec_methods is None:
        # QA: the file's SGLang engine took the sidebar's vLLM switch and refused the comparison
        notes.append(
            f"the sidebar's async-scheduling switch is vLLM's (--async-scheduling): not applied "
            f"to engine {engine}, which has no such switch"
        )
    elif inputs.async_scheduling is not None:  # the sidebar's switch, as compare's flag sets it
        base["scheduler"] = {"async_scheduling": inputs.async_scheduling}
    if inputs.max_model_len is not None:  # the sidebar's context, as --max-model-len sets it
        base["scheduler"] = {**base.get("scheduler", {}), "max_model_len": inputs.max_model_len}
    if profile is not None:
        base["profile"] = profile
    with tempfile.TemporaryDirectory(prefix="simspec-compare-") as tmp:
        plans = [plan_run(r, _deployment(r, base), method, None, None, Path(tmp)) for r in runs]
        frame = compare(plans)
    notes += [f"{p.run.name}: {'; '.join(p.notes)}" for p in plans]
    return Compared(frame, by_load(frame, plans), notes)


def _file_deployment(
    runs: list[MeasuredRun], base: dict[str, object], inputs: ExplorerInputs
) -> list[str]:
    """What the file says of its deployment, taken over the sidebar as ``simspec compare``
    takes it over its defaults (QA: the page simulated an A100 run on the sidebar's H100 and
    SGLang runs on vLLM, saying nothing): the GPU its metadata names, SGLang's engine for
    SGLang output. Returns the notes that say so, and the model where the file names none."""
    notes = []
    label = runs_gpu(runs, None, "comparison")
    if label is not None and label != base.get("gpu"):
        notes.append(f"gpu {label}, as the runs' gpu metadata says (not the sidebar's)")
        base["gpu"] = label
    elif (named := unknown_gpu(runs)) is not None:
        notes.append(f"the runs name GPU {named!r}, no simspec GPU id: simulated on {inputs.gpu}")
    if sglang_runs(runs) and base.get("engine") != "sglang":
        notes.append("engine sglang, as the runs' SGLang bench output says (not the sidebar's)")
        base["engine"] = "sglang"
    if any(r.model is None for r in runs):
        notes.append(f"model {inputs.model}, the sidebar's: the file names none")
    return notes


def _deployment(run: MeasuredRun, base: dict[str, object]) -> dict[str, object]:
    """The sidebar's deployment, its model left for the file's to fill where that is a
    preset (plan_run reads it then)."""
    if run.model is None:
        return base
    try:
        load_model(preset_id(run.model))
    except InputError:
        return base
    return {k: v for k, v in base.items() if k != "model"}


def shown(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows as the page shows them: the error in percent."""
    out = frame[["run", "load", "metric", "measured", "predicted", "rel_error"]].copy()
    out["rel_error"] = 100 * out["rel_error"].astype(float)
    return out.rename(columns={"rel_error": "error %"})


__all__ = ["MAX_PAGE_RUNS", "Compared", "Plan", "compare_upload", "shown"]
