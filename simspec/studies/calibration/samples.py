"""Timing tables -> per-operator samples the cost model can be fitted to: which known table
layouts lie under a directory, for which GPU, read by their loaders.

Known layouts: Vidur operator profiles and LLMServingSim's v0 and vLLM-profiler tables
(:mod:`simspec.studies.calibration.published`), and our own harness CSV
(:mod:`simspec.studies.calibration.harness`). Every loader returns rows of
:data:`~simspec.studies.calibration.schema.COLUMNS` (re-exported here: it is what
:func:`discover` returns).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from simspec.errors import InputError
from simspec.studies.calibration.harness import harness_csv, is_harness_csv
from simspec.studies.calibration.published import (
    lss_layers,
    vidur_allreduce,
    vidur_compute,
    vllm_profile,
)
from simspec.studies.calibration.schema import COLUMNS

__all__ = ["COLUMNS", "GPU_DIRS", "discover", "is_harness_csv"]

# Which GPU a shared-data path belongs to: the directory names the tables use.
GPU_DIRS = {
    "h100_sxm": ("h100", "H100", "h100_dgx"),
    "a100_80gb": ("a100", "a100_dgx"),
    "h200": ("h200", "H200"),
}


def discover(paths: list[Path], gpu: str) -> tuple[pd.DataFrame, list[str]]:
    """All samples for ``gpu`` under ``paths`` (files or directories) and the files used."""
    frames, used = [], []
    dirs = GPU_DIRS.get(gpu, (gpu,))
    for root in paths:
        if not root.exists():
            raise InputError("timings", f"{root} does not exist")
        files = [root] if root.is_file() else sorted(root.rglob("*.csv"))
        for f in files:
            loaded = _load_known(f, dirs, explicit=root.is_file())
            if loaded is not None and not loaded.empty:
                frames.append(loaded)
                used.append(str(f))
    if not frames:
        raise InputError(
            "timings", f"no timing tables for GPU {gpu!r} under {', '.join(map(str, paths))}"
        )
    return pd.concat(frames, ignore_index=True), used


def _load_known(f: Path, gpu_dirs: tuple[str, ...], explicit: bool) -> pd.DataFrame | None:
    parts = set(f.parts)
    on_gpu = explicit or bool(parts & set(gpu_dirs))
    if f.suffix == ".csv" and is_harness_csv(f):
        return harness_csv(f)
    if not on_gpu:
        return None
    if f.name == "mlp.csv" and "compute" in parts:
        # phi-2 is not Llama-style (plain MLP, partial rotary): its byte counts would be wrong
        return None if "phi-2" in parts else vidur_compute(f)
    if f.name == "all_reduce.csv" and any(re.fullmatch(r".+_dgx", p) for p in f.parts):
        return vidur_allreduce(f)
    if f.name == "layers.csv" and "perf_models" in parts:
        return lss_layers(f)
    if f.name == "attention.csv" and "perf" in parts and "bf16" in parts:
        if f.parent.parts[-3] == "Qwen3.6-35B-A3B":
            return vllm_profile(f.parent)
    if explicit:
        raise InputError("timings", f"{f}: not a timing table simspec knows")
    return None
