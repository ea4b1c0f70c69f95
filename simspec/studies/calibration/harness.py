"""Our own timing harness's CSV (``calibration/time_forward.py``) -> samples.

Recognised by its ``kind`` column; one row per timed operator with the shapes it ran at. Its
whole-step rows are a held-out check
(:func:`simspec.studies.calibration.report.forward_check`), not fit samples.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from simspec.catalog.models import BYTES_PER_PARAM
from simspec.catalog.tables import shown
from simspec.engine.costmodel import attention_work, gemm_work
from simspec.errors import InputError
from simspec.studies.calibration.schema import (
    COLUMNS,
    MAX_TABLE_COLUMNS,
    Shape,
    brief,
    read_table,
    samples_frame,
    table_bytes,
)

# the harness's whole-forward rows: the fit leaves them out (they check it)
WHOLE_FORWARD_KINDS = ("forward", "prefill", "draft_head")
HARNESS_KINDS = {
    "gemm": "gemm",
    "lm_head": "gemm",
    "attention": "attention",
    "elementwise": "elementwise",
}
# bytes per token, as in published.VIDUR_ELEMENTWISE (the residual ``add`` left out likewise)
HARNESS_ELEMENTWISE = {
    "rmsnorm": lambda h, q, kv, i: 2 * h,
    "rope": lambda h, q, kv, i: 2 * (q + kv),
    "silu_mul": lambda h, q, kv, i: 3 * i,
}


HARNESS_COLUMNS = (
    "kind",
    "op",
    "num_seqs",
    "q_per_seq",
    "context_len",
    "num_tokens",
    "m",
    "k",
    "n",
    "time_ms_median",
    "tp",
    "model",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
)


# the columns that tell the harness's CSV from the other timing tables: no other table simspec
# reads has a "kind" column. Read by name, so a table saved again with its columns reordered,
# an index column or a byte-order mark is still one (QA: such a file was refused as "not a
# timing table simspec knows" for not starting with "kind,"); what else it lacks is refused
# by name in harness_csv
HARNESS_MARK = "kind"


def is_harness_csv(path: Path) -> bool:
    """Whether ``path`` is our harness's CSV: its header names :data:`HARNESS_MARK`."""
    header = table_bytes(path).split(b"\n", 1)[0].decode("utf-8-sig", errors="replace")
    # the first columns only: a 60 MB line of commas is refused by read_table, not split here
    names = header.split(",", MAX_TABLE_COLUMNS)[:MAX_TABLE_COLUMNS]
    return HARNESS_MARK in {c.strip().strip('"') for c in names}


# the harness's 16-bit dtypes: its byte counts price every weight and activation at 2 bytes
HARNESS_DTYPES = ("bfloat16", "float16")


def harness_csv(path: Path, gpu: str | None = None) -> pd.DataFrame:
    """Per-operator samples from a ``calibration/time_forward.py`` CSV; ``gpu``: the GPU the
    profile is fitted for, which its ``gpu_name`` column must name."""
    d = read_table(path)
    missing = [c for c in HARNESS_COLUMNS if c not in d.columns]
    if missing:
        raise InputError("timings", f"{shown(path)} lacks columns {', '.join(missing)}")
    if gpu is not None and "gpu_name" not in d.columns:
        # the harness writes the GPU that timed it; without it the table cannot say where it
        # was taken, and any --gpu would fit it (QA: an A100 table with its gpu_name column
        # dropped was fitted as an h100_sxm profile without a word)
        raise InputError(
            "timings",
            f"{shown(path)} has no gpu_name column, which calibration/time_forward.py writes "
            "(the GPU that timed each row): a table that does not say where it was timed "
            "cannot be fitted to a GPU's profile",
        )
    # the whole-forward rows (forward, prefill, draft_head) check the fit (simspec calibrate
    # report); any other kind is not the harness's, and dropping it would leave a fit short
    # of samples with no word why (QA: kind=GEMM in capitals)
    unknown = sorted(set(d.kind.astype(str)) - set(HARNESS_KINDS) - set(WHOLE_FORWARD_KINDS))
    if unknown:
        raise InputError(
            "timings",
            f"{shown(path)} has rows of kind {', '.join(map(repr, unknown))}, which "
            f"calibration/time_forward.py does not write: kinds are "
            f"{', '.join([*HARNESS_KINDS, *WHOLE_FORWARD_KINDS])}",
        )
    out = []
    for line, r in d[d.kind.isin(HARNESS_KINDS)].iterrows():
        try:
            sample = _harness_sample(r, path)
        except (ValueError, TypeError, ZeroDivisionError, OverflowError) as exc:
            raise InputError("timings", f"{shown(path)} row {line + 1}: {brief(exc)}") from None
        if sample is not None:
            out.append(sample)
    if not out:
        raise InputError(
            "timings", f"{shown(path)} has no per-operator rows (gemm, attention, ...)"
        )
    # after the rows: a malformed row is named by its line before its blank cells are
    check_origin(d, path, gpu)
    return samples_frame({c: [row[c] for row in out] for c in COLUMNS})


def cut_short(paths: list[str]) -> list[str]:
    """The harness tables among ``paths`` whose run stopped at its time budget (their
    ``truncated`` column): they time fewer sizes than the grid asked for."""
    out = []
    for p in paths:
        path = Path(p)
        if not is_harness_csv(path):
            continue
        d = read_table(path)
        if "truncated" in d.columns and (pd.to_numeric(d["truncated"], errors="coerce") == 1).any():
            out.append(p)
    return out


def check_origin(d: pd.DataFrame, path: Path, gpu: str | None) -> None:
    """Refuse timings a GPU profile cannot rest on: taken on a CPU (the harness's smoke run),
    in a dtype its 2-byte prices do not describe, or on a GPU other than ``gpu`` (by the
    family in its ``gpu_name``: H100 for h100_sxm, A100 for a100_80gb...). An empty cell in
    one of those columns is refused too: it would pass any check (QA: a table with its
    gpu_name blanked fitted an A100's timings as a calibrated H200)."""
    for col in ("device", "dtype", "gpu_name"):
        if col in d.columns:
            cells = d[col]
            blank = int((cells.isna() | (cells.astype(str).str.strip() == "")).sum())
            if blank:
                raise InputError(
                    "timings",
                    f"{shown(path)} has {blank} row(s) with no {col}: the harness writes it "
                    "on every row, and the fit checks the timings' origin by it; fill it or "
                    "drop those rows",
                )
    if "device" in d.columns:
        devices = sorted({str(v) for v in d["device"].dropna()} - {"cuda"})
        if devices:
            raise InputError(
                "timings",
                f"{shown(path)} was timed on {', '.join(devices)} (its device column): a GPU "
                "profile needs timings taken on that GPU (time_forward.py --device cuda)",
            )
    if "dtype" in d.columns:
        dtypes = sorted({str(v) for v in d["dtype"].dropna()} - set(HARNESS_DTYPES))
        if dtypes:
            raise InputError(
                "timings",
                f"{shown(path)} was timed in {', '.join(dtypes)} (its dtype column): the fit "
                f"prices 2-byte weights and activations, so it reads {' or '.join(HARNESS_DTYPES)}"
                " tables only",
            )
    if gpu is None or "gpu_name" not in d.columns:
        return
    names = sorted({str(v) for v in d["gpu_name"].dropna()})
    other = [n for n in names if not names_gpu(n, gpu)]
    if other:
        needed, excluded = DEVICE_TOKENS[gpu]
        part = f"a {' '.join(needed)}" + (f" (not {'/'.join(excluded)})" if excluded else "")
        raise InputError(
            "timings",
            f"{shown(path)} was timed on {', '.join(other)} (its gpu_name column), not {part}, "
            f"the GPU --gpu {gpu} describes: give the --gpu it was taken on",
        )


# The words of a device name (torch.cuda.get_device_name, the driver's product name as
# nvidia-smi --query-gpu=name prints it: "NVIDIA H100 80GB HBM3" for the SXM5 part, "NVIDIA H100
# PCIe", "NVIDIA H100 NVL", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA H200",
# "NVIDIA GB200") that name each packaged GPU: all of the first present as whole words, none of
# the second. Whole words, so "H20" is not H200 nor "B200" GB200; PCIe and NVL parts run at other
# clocks, power and bandwidth than the SXM ones gpus.yaml describes.
DEVICE_TOKENS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "h100_sxm": (("H100",), ("PCIE", "NVL")),
    "h100_pcie": (("H100", "PCIE"), ()),
    "h200": (("H200",), ("NVL",)),
    "h20": (("H20",), ()),
    "a100_80gb": (("A100", "80GB"), ("PCIE",)),
    "a100_40gb": (("A100", "40GB"), ("PCIE",)),
    "b200": (("B200",), ()),
    "gb200": (("GB200",), ()),
    "b300": (("B300",), ()),
    "gb300": (("GB300",), ()),
    "l40s": (("L40S",), ()),
    "rtx3090": (("3090",), ()),
    "mi300x": (("MI300X",), ()),
    "mi355x": (("MI355X",), ()),
}


def names_gpu(device_name: str, gpu: str) -> bool:
    """Whether a timing table's ``gpu_name`` names packaged GPU ``gpu`` (:data:`DEVICE_TOKENS`,
    which holds every packaged GPU: a test keeps it so)."""
    words = set(re.findall(r"[A-Z0-9]+", device_name.upper()))
    needed, excluded = DEVICE_TOKENS[gpu]
    return all(w in words for w in needed) and not any(w in words for w in excluded)


def _cell(r: pd.Series, column: str, smallest: float = 1.0, strict: bool = False) -> float:
    """A row's ``column`` as a finite number of at least ``smallest``, or an error naming the
    column (QA: a text cell had read "could not convert string to float", a zero tp "integer
    division or modulo by zero", a NaN size "shape columns give no work")."""
    value = r[column]
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{column} must be a number, got {value!r}") from None
    bound = number > smallest if strict else number >= smallest
    if not (math.isfinite(number) and bound):
        sign = ">" if strict else ">="
        raise ValueError(f"{column} must be a finite number {sign} {smallest:g}, got {value!r}")
    return number


def _harness_sample(r: pd.Series, path: Path) -> dict[str, object] | None:
    tp = int(_cell(r, "tp"))
    widths = ("hidden_size", "intermediate_size", "num_attention_heads")
    heads = ("num_key_value_heads", "head_dim", "vocab_size")
    shape = Shape(*(int(_cell(r, c)) for c in (*widths, *heads)))
    q, kv, i = shape.widths(tp)
    t = _cell(r, "time_ms_median", 0.0, strict=True) * 1e-3
    kind = HARNESS_KINDS[r.kind]
    if kind == "gemm":
        flops, nbytes = gemm_work(_cell(r, "m"), _cell(r, "k"), _cell(r, "n"))
    elif kind == "attention":
        b, qs = _cell(r, "num_seqs"), _cell(r, "q_per_seq")
        ctx = _cell(r, "context_len", 0.0)
        flops, nbytes = attention_work(q, kv, b * qs, b * qs * qs, b * qs * ctx, b * ctx)
    else:
        per_token = HARNESS_ELEMENTWISE.get(r.op)
        if per_token is None:  # the residual add: fused into RMSNorm in vLLM
            return None
        flops = 0.0
        tokens = _cell(r, "num_tokens")
        nbytes = BYTES_PER_PARAM * tokens * per_token(shape.hidden, q, kv, i)
    if not (np.isfinite(flops) and np.isfinite(nbytes) and flops >= 0 and nbytes > 0):
        raise ValueError("shape columns give no work (empty or non-positive sizes)")
    return dict(
        operator=kind,
        op=r.op,
        source=f"harness:{path.name}",
        model=r.model,
        tp=tp,
        group=f"{r.model} {r.op}",
        tokens=_cell(r, "num_tokens"),
        flops=flops,
        bytes=nbytes,
        time_s=t,
        decode_only=kind == "attention" and int(r.q_per_seq) == 1,
    )
