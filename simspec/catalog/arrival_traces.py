"""Arrival traces: when real requests arrived and how long their prompts and outputs were.

A production log replayed as an open-loop workload (``workload.arrival: replay``). Two are
packaged by name (``azure-conv``, ``azure-code``: ``simspec/data/workload_traces/SOURCE.md``,
CC-BY 4.0); any other is read by path, CSV, Parquet or JSONL, in one of two schemas:

* Azure's, as published: ``TIMESTAMP`` (date and time text), ``ContextTokens``,
  ``GeneratedTokens``; times become seconds from the first row;
* plain: ``arrival_s`` (seconds), ``prompt_len``, ``output_len``, optionally ``dataset``
  (a packaged acceptance dataset, e.g. sharegpt) or ``domain`` (chat, code, math,
  summarisation) per row.

Every row is checked; a bad one is an InputError naming the row and the column. Times must not
go backwards (a row earlier than the one before it is refused, not re-sorted: a log out of
order is more likely a wrong column or a merged file than what the user meant to replay).
A prompt of 0 tokens or an output of 0 tokens is refused (no engine serves either).

Transformations (:func:`window`, :func:`rescale`, :func:`tile`) are pure functions on the
frozen :class:`ArrivalTrace`; :func:`transformed` applies them in the order the workload's
fields state them (window in the trace's own seconds, then rescale, then tile).
"""

from __future__ import annotations

import gzip
import io
import math
import os
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources

import numpy as np
import pandas as pd
import yaml

from simspec.catalog.tables import packaged_text, read_input, read_input_gzip, shown
from simspec.errors import InputError

MAX_ARRIVAL_TRACE_BYTES = 512 * 1024 * 1024  # uncompressed; the Azure hour is 0.7 MB
MAX_LENGTH = 2**31 - 1  # token counts are int32 in every engine
FIELD = "workload.arrival_trace"
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
PLAIN_COLUMNS = ("arrival_s", "prompt_len", "output_len")
# a domain named in a file -> the packaged acceptance dataset of that domain (the inverse of
# catalog.methods.DATASET_DOMAIN over its packaged TRACE_DATASETS; kept here, below methods)
DOMAIN_DATASET = {
    "chat": "sharegpt",
    "conversation": "sharegpt",
    "code": "instructcoder",
    "coding": "instructcoder",
    "math": "gsm8k",
    "summarisation": "cnn",
    "summarization": "cnn",
}
PACKAGED_DATASETS = ("sharegpt", "instructcoder", "gsm8k", "cnn")


@dataclass(frozen=True, eq=False)
class ArrivalTrace:
    """Requests in arrival order: times (s, from the trace's origin), lengths, and the
    acceptance dataset of each request (None: the trace names none)."""

    name: str
    source: str
    arrival_s: np.ndarray  # float64, non-decreasing, >= 0
    prompt_len: np.ndarray  # int64 >= 1
    output_len: np.ndarray  # int64 >= 1
    domain: np.ndarray | None = None  # per request: a packaged dataset name (object array)
    duration_s: float = 0.0  # the span one copy covers (tiling repeats it back to back)

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def mean_rate(self) -> float:
        """Requests per second over the trace's span."""
        return len(self) / self.duration_s if self.duration_s > 0 else math.inf

    @property
    def dataset(self) -> str | None:
        """The one acceptance dataset every request maps to (None: none named, or mixed)."""
        if self.domain is None or not len(self.domain):
            return None
        first = self.domain[0]
        return first if (self.domain == first).all() else None


def packaged_arrival_traces() -> list[str]:
    return sorted(_catalogue())


@cache
def _catalogue() -> dict[str, dict]:
    """``simspec/data/workload_traces/traces.yaml``: each packaged trace's file, acceptance
    dataset and source."""
    return yaml.safe_load(packaged_text("workload_traces", "traces.yaml"))


def _span(arrival: np.ndarray) -> float:
    """One copy's duration: the first-to-last span plus one mean gap, so that copies laid back
    to back keep the mean rate ((n - 1) gaps per span) and never put two requests at once."""
    n = len(arrival)
    if n < 2:
        return 1.0 if n else 0.0
    span = float(arrival[-1] - arrival[0])
    return span * n / (n - 1) if span > 0 else 1.0


@cache
def load_arrival_trace(ref: str, field: str = FIELD) -> ArrivalTrace:
    """A packaged trace by name (``azure-conv``, ``azure-code``) or a CSV/Parquet/JSONL file
    (optionally gzipped), every row checked (``field``: the setting errors name)."""
    table = _catalogue()
    if ref in table:
        meta = table[ref]
        raw = resources.files("simspec").joinpath("data", "workload_traces", meta["file"])
        frame = _parse(gzip.decompress(raw.read_bytes()), meta["file"], ref, field)
        trace = _from_frame(frame, ref, meta["source"], field)
        domain = np.full(len(trace), meta["dataset"], dtype=object)
        return replace(trace, domain=domain)
    if not os.path.lexists(ref):  # os.path: a too-long name is just not there
        raise InputError(
            field,
            f"no arrival trace {shown(ref)}: give a packaged one "
            f"({', '.join(packaged_arrival_traces())}) or the path of a CSV, Parquet or JSONL "
            f"file with columns {', '.join(AZURE_COLUMNS)} or {', '.join(PLAIN_COLUMNS)}",
        )
    read = read_input_gzip if ref.endswith(".gz") else read_input
    raw = read(ref, field, MAX_ARRIVAL_TRACE_BYTES)
    name = os.path.basename(ref)
    frame = _parse(raw, ref.removesuffix(".gz"), name, field)
    return _from_frame(frame, name, str(ref), field)


def _parse(raw: bytes, path: str, name: str, field: str) -> pd.DataFrame:
    """The file's table (Parquet, JSONL or CSV by its extension)."""
    lower = path.lower()
    try:
        if lower.endswith((".parquet", ".pq")):
            try:
                import pyarrow  # noqa: F401  (pandas reads Parquet through it)
            except ImportError:
                raise InputError(
                    field, f"{name}: reading Parquet needs pyarrow (pip install simspec[parquet])"
                ) from None
            return pd.read_parquet(io.BytesIO(raw))
        if lower.endswith((".jsonl", ".ndjson")):
            return pd.read_json(io.BytesIO(raw), lines=True, dtype=False)
        return pd.read_csv(io.BytesIO(raw), dtype=str, keep_default_na=False)
    except InputError:
        raise
    except Exception as exc:  # pandas/pyarrow raise many types for a bad file
        text = " ".join(str(exc).split())[:200]
        raise InputError(field, f"cannot read {name} as a table ({text})") from None


def _from_frame(frame: pd.DataFrame, name: str, source: str, field: str) -> ArrivalTrace:
    cols = set(frame.columns)
    if set(AZURE_COLUMNS) <= cols:
        times = _azure_seconds(frame["TIMESTAMP"], name, field)
        prompt = _lengths(frame["ContextTokens"], name, "ContextTokens", field)
        output = _lengths(frame["GeneratedTokens"], name, "GeneratedTokens", field)
    elif set(PLAIN_COLUMNS) <= cols:
        times = _numbers(frame["arrival_s"], name, "arrival_s", field)
        prompt = _lengths(frame["prompt_len"], name, "prompt_len", field)
        output = _lengths(frame["output_len"], name, "output_len", field)
    else:
        raise InputError(
            field,
            f"{name} needs columns {', '.join(AZURE_COLUMNS)} (Azure) or "
            f"{', '.join(PLAIN_COLUMNS)} (plain); it has {', '.join(map(str, frame.columns))}",
        )
    if not len(times):
        raise InputError(field, f"{name} holds no requests")
    back = np.flatnonzero(np.diff(times) < 0)
    if len(back):
        col = "TIMESTAMP" if "TIMESTAMP" in cols and set(AZURE_COLUMNS) <= cols else "arrival_s"
        raise InputError(
            field,
            f"{name} row {back[0] + 2} column {col}: earlier than the row before it "
            "(times must not go backwards: sort the file by time)",
        )
    times = times - times[0]
    domain = _domains(frame, name, field)
    return ArrivalTrace(name, source, times, prompt, output, domain, _span(times))


def _where(name: str, rows: np.ndarray, column: str) -> str:
    return f"{name} row {int(rows[0]) + 1} column {column}"


def _azure_seconds(col: pd.Series, name: str, field: str) -> np.ndarray:
    stamps = pd.to_datetime(col.astype(str), format="ISO8601", errors="coerce")
    bad = np.flatnonzero(stamps.isna().to_numpy())
    if len(bad):
        raise InputError(
            field, f"{_where(name, bad, 'TIMESTAMP')}: not a date and time ({col.iloc[bad[0]]!r})"
        )
    ns = stamps.to_numpy().astype("datetime64[ns]").astype(np.int64)
    return (ns - ns[0]).astype(np.float64) / 1e9


def _numbers(col: pd.Series, name: str, column: str, field: str) -> np.ndarray:
    values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
    if len(bad):
        raise InputError(
            field,
            f"{_where(name, bad, column)}: must be a finite number >= 0, got {col.iloc[bad[0]]!r}",
        )
    return values


def _lengths(col: pd.Series, name: str, column: str, field: str) -> np.ndarray:
    values = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    ok = np.isfinite(values) & (values >= 1) & (values <= MAX_LENGTH)
    ok[ok] = values[ok] == np.floor(values[ok])
    bad = np.flatnonzero(~ok)
    if len(bad):
        raise InputError(
            field,
            f"{_where(name, bad, column)}: must be a whole number of tokens in "
            f"[1, {MAX_LENGTH}], got {col.iloc[bad[0]]!r}",
        )
    return values.astype(np.int64)


def _domains(frame: pd.DataFrame, name: str, field: str) -> np.ndarray | None:
    """Each row's acceptance dataset, from a ``dataset`` or a ``domain`` column (None: the
    file has neither)."""
    if "dataset" in frame.columns:
        column, allowed = "dataset", {d: d for d in PACKAGED_DATASETS}
    elif "domain" in frame.columns:
        column, allowed = "domain", DOMAIN_DATASET
    else:
        return None
    raw = frame[column].astype(str).str.strip().str.lower().to_numpy(dtype=object)
    known = np.array([v in allowed for v in raw], dtype=bool)
    bad = np.flatnonzero(~known)
    if len(bad):
        raise InputError(
            field,
            f"{_where(name, bad, column)}: {frame[column].iloc[bad[0]]!r} is not one of "
            f"{', '.join(sorted(allowed))}",
        )
    return np.array([allowed[v] for v in raw], dtype=object)


def acceptance_dataset(trace: ArrivalTrace, given: str | None = None) -> str:
    """The packaged dataset whose acceptance a replay's requests draw from: ``given`` (the
    user's choice) if set, else the one the trace names for every request. A trace that names
    none, or several, is an error: simspec draws one method acceptance per run."""
    if given:
        return given
    if trace.dataset is not None:
        return trace.dataset
    if trace.domain is None:
        why = "names no domain (no dataset or domain column)"
    else:
        why = f"mixes domains ({', '.join(sorted(set(trace.domain)))})"
    raise InputError(
        "dataset",
        f"arrival trace {trace.name} {why}: name the acceptance dataset "
        f"({', '.join(PACKAGED_DATASETS)}), or split the file by domain",
    )


# -- transformations (pure) ------------------------------------------------------------------


def window(trace: ArrivalTrace, start_s: float = 0.0, end_s: float | None = None) -> ArrivalTrace:
    """The requests arriving in ``[start_s, end_s)`` of the trace's seconds, times shifted so
    ``start_s`` is the new origin (the gap before the first kept request stays)."""
    end = trace.duration_s if end_s is None else min(end_s, trace.duration_s)
    if not 0.0 <= start_s < end:
        raise InputError(
            "workload.trace_start_s",
            f"window [{start_s:g}, {end:g}) s is empty: the trace covers [0, "
            f"{trace.duration_s:g}) s",
        )
    keep = (trace.arrival_s >= start_s) & (trace.arrival_s < end)
    if not keep.any():
        raise InputError(
            "workload.trace_start_s",
            f"no request of {trace.name} arrives in [{start_s:g}, {end:g}) s",
        )
    return replace(
        trace,
        arrival_s=trace.arrival_s[keep] - start_s,
        prompt_len=trace.prompt_len[keep],
        output_len=trace.output_len[keep],
        domain=None if trace.domain is None else trace.domain[keep],
        duration_s=end - start_s,
    )


def rescale(
    trace: ArrivalTrace, rate_scale: float | None = None, target_qps: float | None = None
) -> ArrivalTrace:
    """The same arrivals ``rate_scale`` times as fast (every gap divided by it, so the bursts
    keep their shape), or scaled so the mean rate is ``target_qps`` requests/s."""
    if rate_scale is not None and target_qps is not None:
        raise InputError("workload.target_qps", "give rate_scale or target_qps, not both")
    if target_qps is not None:
        rate_scale = target_qps / trace.mean_rate
    if rate_scale is None or rate_scale == 1.0:
        return trace
    if not (math.isfinite(rate_scale) and rate_scale > 0):
        raise InputError("workload.rate_scale", f"must be a number > 0, got {rate_scale!r}")
    return replace(
        trace, arrival_s=trace.arrival_s / rate_scale, duration_s=trace.duration_s / rate_scale
    )


def tile(trace: ArrivalTrace, horizon_s: float) -> ArrivalTrace:
    """Copies of the trace laid back to back (each offset by its duration) up to
    ``horizon_s``: requests arriving before the horizon are kept."""
    if not (math.isfinite(horizon_s) and horizon_s > 0):
        raise InputError("workload.tile_s", f"must be a number > 0, got {horizon_s!r}")
    copies = max(1, math.ceil(horizon_s / trace.duration_s))
    offsets = np.repeat(np.arange(copies) * trace.duration_s, len(trace))
    times = np.tile(trace.arrival_s, copies) + offsets
    keep = times < horizon_s
    return replace(
        trace,
        arrival_s=times[keep],
        prompt_len=np.tile(trace.prompt_len, copies)[keep],
        output_len=np.tile(trace.output_len, copies)[keep],
        domain=None if trace.domain is None else np.tile(trace.domain, copies)[keep],
        duration_s=horizon_s,
    )


@cache
def transformed(
    ref: str,
    start_s: float | None = None,
    end_s: float | None = None,
    rate_scale: float | None = None,
    target_qps: float | None = None,
    tile_s: float | None = None,
) -> ArrivalTrace:
    """``ref`` loaded, then windowed, rescaled and tiled (each step only when asked)."""
    trace = load_arrival_trace(ref)
    if start_s is not None or end_s is not None:
        trace = window(trace, start_s or 0.0, end_s)
    trace = rescale(trace, rate_scale, target_qps)
    if tile_s is not None:
        trace = tile(trace, tile_s)
    if not len(trace):
        raise InputError("workload.tile_s", f"no request of {trace.name} arrives before it")
    return trace
