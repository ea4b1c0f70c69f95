"""Timing tables -> per-operator samples the cost model can be fitted to: which known table
layouts lie under a directory, for which GPU, read by their loaders.

Known layouts: Vidur operator profiles and LLMServingSim's v0 and vLLM-profiler tables
(:mod:`simspec.studies.calibration.published`), and our own harness CSV
(:mod:`simspec.studies.calibration.harness`). Every loader returns rows of
:data:`~simspec.studies.calibration.schema.COLUMNS` (re-exported here: it is what
:func:`discover` returns).

A directory may hold anything: every file is read through
:func:`~simspec.studies.calibration.schema.read_table` (regular files of a bounded size only),
and a table a loader cannot read is one InputError naming the file, not a traceback.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from simspec.catalog.tables import shown
from simspec.errors import InputError
from simspec.studies.calibration.harness import harness_csv, is_harness_csv
from simspec.studies.calibration.published import (
    lss_layers,
    vidur_allreduce,
    vidur_compute,
    vllm_profile,
)
from simspec.studies.calibration.schema import COLUMNS, brief, table_bytes

__all__ = ["COLUMNS", "GPU_DIRS", "discover", "is_harness_csv"]

# Which GPU a shared-data path belongs to: the directory names the tables use.
GPU_DIRS = {
    "h100_sxm": ("h100", "H100", "h100_dgx"),
    "a100_80gb": ("a100", "a100_dgx"),
    "h200": ("h200", "H200"),
}


def discover(paths: list[Path], gpu: str) -> tuple[pd.DataFrame, list[str]]:
    """All samples for ``gpu`` under ``paths`` (files or directories) and the files used.

    A path that is not a directory is read as a table, whatever it is (a FIFO or a device is
    refused by name); a directory's ``*.csv`` files are searched (its links to directories
    are not followed, so a link loop cannot make the search endless)."""
    frames, used = [], []
    dirs = GPU_DIRS.get(gpu, (gpu,))
    seen: set[Path] = set()
    parts: set[str] = set()  # the folders searched: which GPUs' tables lie there
    for root in paths:
        if not os.path.lexists(root):
            raise InputError("timings", f"{shown(root)} does not exist")
        explicit = not root.is_dir()
        files = [root] if explicit else sorted(root.rglob("*.csv"))
        for f in files:
            # a table given twice (or inside a directory also given) is read once: counted
            # twice it would pass the minimum-sample guard with half the samples (QA)
            if (real := f.resolve()) in seen:
                continue
            seen.add(real)
            parts.update(f.parts)
            loaded = _load_known(f, dirs, explicit, gpu)
            if loaded is not None and not loaded.empty:
                frames.append(loaded)
                used.append(str(f))
    if not frames:
        under = ", ".join(shown(p) for p in paths[:3]) + (" ..." if len(paths) > 3 else "")
        # the GPUs whose folders the search met (QA: --gpu a100_40gb over a100_80gb's tables
        # said only that there were none)
        theirs = [g for g, names in GPU_DIRS.items() if g != gpu and parts & set(names)]
        hint = (
            f": the tables there are {' and '.join(theirs)}'s (--gpu {theirs[0]})" if theirs else ""
        )
        raise InputError("timings", f"no timing tables for GPU {gpu!r} under {under}{hint}")
    return pd.concat(frames, ignore_index=True), used


def _load_known(
    f: Path, gpu_dirs: tuple[str, ...], explicit: bool, gpu: str
) -> pd.DataFrame | None:
    """``f``'s samples by its layout, None for a file of no known layout under a directory
    (an explicit file of none is refused)."""
    layout = _layout(f, gpu_dirs, explicit, gpu)
    if layout is None:
        return None
    name, load = layout
    try:
        with np.errstate(all="ignore"):  # an overflow becomes inf, refused below by name
            samples = load(f)
    except InputError:
        raise
    except (KeyError, AttributeError, IndexError, TypeError, ValueError, ArithmeticError) as exc:
        # a loader reads its layout's columns without asking: a file that only looks like
        # one (by its name and place) lacks them or holds text where numbers belong
        raise InputError(
            "timings", f"{shown(f)} is not a {name} table simspec can read ({_why(exc)})"
        ) from None
    return _sound(samples, f)


def _sound(samples: pd.DataFrame, f: Path) -> pd.DataFrame:
    """``samples`` if every one has a finite positive time and finite non-negative work (every
    sample of the shared tables does); a table of 1e308-token rows is refused by name, not
    fitted to infinities or reported as NaN."""
    try:
        values = samples[["tokens", "flops", "bytes", "time_s"]].to_numpy(dtype=float)
    except (TypeError, ValueError):
        raise InputError("timings", f"{shown(f)}: a size or time is not a number") from None
    bad = ~np.isfinite(values).all(axis=1) | (values[:, 3] <= 0) | (values[:, 1:3] < 0).any(axis=1)
    if bad.any():
        raise InputError(
            "timings",
            f"{shown(f)}: {int(bad.sum())} row(s) give a time that is not > 0 or a size that is "
            "negative or not finite",
        )
    return samples


def _why(exc: Exception) -> str:
    """What a loader's exception says about the table: a column (or row label) it lacks, or
    the exception's own words."""
    if isinstance(exc, KeyError):
        return f"missing {brief(exc)}"
    if isinstance(exc, AttributeError) and exc.name:  # a column read as frame.name
        return f"missing column {exc.name!r}"
    return brief(exc)


Loader = Callable[[Path], pd.DataFrame]


def _layout(
    f: Path, gpu_dirs: tuple[str, ...], explicit: bool, gpu: str
) -> tuple[str, Loader] | None:
    """Which known table ``f`` is (by its header or its place), and its loader."""
    parts = set(f.parts)
    harness = f.suffix == ".csv" and is_harness_csv(f)
    if harness and b"gpu_name" in table_bytes(f).split(b"\n", 1)[0]:
        # the harness's own gpu_name column says where it was timed (check_origin), whatever
        # folder it was copied to (QA: an H100 table under a100/ was refused by the folder)
        return "harness", lambda path: harness_csv(path, gpu)
    others = {d for g, names in GPU_DIRS.items() if g != gpu for d in names} - set(gpu_dirs)
    if explicit and parts & others:
        # a file named outright under another GPU's folder (QA: an A100 mlp.csv fitted as the
        # default h100_sxm, "gemm_compute_efficiency 0.23"): refused, as a folder's would be
        # skipped
        theirs = next(g for g, names in GPU_DIRS.items() if parts & set(names) - set(gpu_dirs))
        raise InputError(
            "timings",
            f"{shown(f)} lies under {theirs}'s folder, not {gpu}'s: fit it with --gpu {theirs}",
        )
    on_gpu = explicit or bool(parts & set(gpu_dirs))
    if harness:
        return "harness", lambda path: harness_csv(path, gpu)
    if not on_gpu:
        return None
    if f.name == "mlp.csv" and "compute" in parts:
        # phi-2 is not Llama-style (plain MLP, partial rotary): its byte counts would be wrong
        if "phi-2" not in parts:
            return "Vidur mlp.csv", vidur_compute
        if explicit:  # QA: named outright, it was "no timing tables for GPU 'h100_sxm'"
            raise InputError(
                "timings",
                f"{shown(f)}: phi-2's table is left out of every fit (a plain MLP with partial "
                "rotary, not the Llama-style layer simspec counts the bytes of)",
            )
        return None
    if f.name == "all_reduce.csv" and any(re.fullmatch(r".+_dgx", p) for p in f.parts):
        return "Vidur all_reduce.csv", vidur_allreduce
    if f.name == "layers.csv" and "perf_models" in parts:
        return "LLMServingSim layers.csv", lss_layers
    if f.name == "attention.csv" and "perf" in parts and "bf16" in parts:
        if len(f.parts) >= 4 and f.parent.parts[-3] == "Qwen3.6-35B-A3B":
            return "LLMServingSim vLLM profile", lambda a: vllm_profile(a.parent)
    if explicit:
        # what is known is by header or by place: said, so a copy that left its folder can be
        # put back (QA: a layers.csv copied out of perf_models/ was "not ... simspec knows")
        raise InputError(
            "timings",
            f"{shown(f)}: not a timing table simspec knows. It knows the harness's CSV "
            "(calibration/time_forward.py: a kind column) anywhere, and by their place "
            "Vidur's compute/.../mlp.csv and <gpu>_dgx/.../all_reduce.csv, LLMServingSim's "
            "perf_models/.../layers.csv and a vLLM profile's perf/.../bf16/attention.csv: "
            "keep a copy in its folder layout",
        )
    return None
