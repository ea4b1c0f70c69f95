"""Arrival traces: when real requests arrived and how long their prompts and outputs were.

A production log replayed as an open-loop workload (``workload.arrival: replay``). Two are
packaged by name (``azure-conv``, ``azure-code``: ``simspec/data/workload_traces/SOURCE.md``,
CC-BY 4.0); any other is read by path, CSV, Parquet or JSONL, in one of two schemas:

* Azure's, as published: ``TIMESTAMP`` (date and time text), ``ContextTokens``,
  ``GeneratedTokens``; times become seconds from the first row;
* plain: ``arrival_s`` (seconds), ``prompt_len``, ``output_len``, optionally ``dataset``
  (a packaged acceptance dataset, e.g. sharegpt) or ``domain`` (chat, code, math,
  summarisation) per row.

A file names each column once and holds one schema: a column given twice, or Azure's columns
beside the plain ones (or ``dataset`` beside ``domain``), is refused rather than one chosen.
A file is read within stated bounds before its rows are: at most 512 MB (inflated),
:data:`MAX_ARRIVAL_ROWS` rows, :data:`MAX_COLUMNS` columns, a CSV header or JSONL record of
at most :data:`MAX_LINE_BYTES`; a Parquet file by its footer first (rows, columns, inflated
size), and only the columns used.

Every row is checked; a bad one is an InputError naming the row and the column. A count is a
whole number (``true`` is not one token). Times are seconds in ``[0, MAX_CLOCK_S]`` (Azure's
with a UTC offset are read as instants, so offsets may differ from row to row) spanning at
most :data:`~simspec.config.MAX_TRACE_S`, as a rescaled replay must. Times must not
go backwards (a row earlier than the one before it is refused, not re-sorted: a log out of
order is more likely a wrong column or a merged file than what the user meant to replay).
A prompt of 0 tokens or an output of 0 tokens is refused (no engine serves either).

Transformations (:func:`window`, :func:`rescale`, :func:`tile`) are pure functions on the
frozen :class:`ArrivalTrace`; :func:`transformed` applies them in the order the workload's
fields state them (window in the trace's own seconds, then rescale, then tile).
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from simspec.catalog.tables import (
    file_cache,
    packaged_yaml,
    parse_json,
    read_input,
    read_input_gzip,
    shown,
)
from simspec.config import MAX_REQUESTS, MAX_TRACE_S
from simspec.errors import InputError

MAX_ARRIVAL_TRACE_BYTES = 512 * 1024 * 1024  # uncompressed; the Azure hour is 0.7 MB
# Ten runs' worth of requests (config.MAX_REQUESTS a run): a longer log can still be windowed
# into runs, and its three numeric columns take 240 MB as float64. A Parquet file of 800 KB
# can hold 60 million rows (5 GB once read), so its footer's count is checked first.
MAX_ARRIVAL_ROWS = 10_000_000
# A trace needs 3 or 4 columns and a serving log has tens; a header of a million columns took
# minutes and gigabytes to parse. A CSV header or a JSONL record is one line of at most
# MAX_LINE_BYTES (256 names of 256 bytes each).
MAX_COLUMNS = 256
MAX_LINE_BYTES = 64 * 1024
# A Parquet text cell, in bytes (a timestamp is at most 35 with nanoseconds and an offset):
# a dictionary-encoded column repeats one value on every row, so one megabyte-long value
# would inflate to terabytes; each distinct value is measured before any row is decoded.
MAX_TEXT_BYTES = 64
# arrival_s may be seconds from the log's start or a Unix clock (1.7e9 in 2024); up to 1e10
# (the year 2286) a float64 still tells apart arrivals 2 microseconds apart, beyond it the gaps
# are rounded away (at 1e15 to an eighth of a second).
MAX_CLOCK_S = 1e10
MAX_LENGTH = 2**31 - 1  # token counts are int32 in every engine
FIELD = "workload.arrival_trace"
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
PLAIN_COLUMNS = ("arrival_s", "prompt_len", "output_len")
DOMAIN_COLUMNS = ("dataset", "domain")
KNOWN_COLUMNS = AZURE_COLUMNS + PLAIN_COLUMNS + DOMAIN_COLUMNS
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
    catalogue: dict[str, dict] = packaged_yaml("workload_traces", "traces.yaml")
    return catalogue


def _span(arrival: np.ndarray) -> float:
    """One copy's duration: the first-to-last span plus one mean gap, so that copies laid back
    to back keep the mean rate ((n - 1) gaps per span) and never put two requests at once."""
    n = len(arrival)
    if n < 2:
        return 1.0 if n else 0.0
    span = float(arrival[-1] - arrival[0])
    return span * n / (n - 1) if span > 0 else 1.0


@file_cache()
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


def _cut(text: object, width: int = 40) -> str:
    """A value as an error message quotes it: at most ``width`` characters (a cell of 100 MB
    stays a readable line)."""
    text = str(text)
    return text if len(text) <= width else text[: width - 13] + "..." + text[-10:]


def _listed(names: list[str], most: int = 8) -> str:
    """Column names as an error message lists them: the first ``most``, then how many more."""
    head = ", ".join(_cut(repr(n)) for n in names[:most]) or "none"
    return head + (f" and {len(names) - most:,} more" if len(names) > most else "")


@contextmanager
def _reading(name: str, field: str) -> Iterator[None]:
    """pandas and pyarrow raise many types for a bad file: each becomes one InputError."""
    try:
        yield
    except InputError:
        raise
    except Exception as exc:
        text = " ".join(str(exc)[:400].split())[:200]
        raise InputError(field, f"cannot read {name} as a table ({text})") from None


def _parse(raw: bytes, path: str, name: str, field: str) -> pd.DataFrame:
    """The columns the trace uses (:func:`_schema`), from a Parquet, JSONL or CSV file by
    its extension."""
    lower = path.lower()
    if lower.endswith((".parquet", ".pq")):
        return _parquet(raw, name, field)
    if lower.endswith((".jsonl", ".ndjson")):
        return _jsonl(raw, name, field)
    return _csv(raw, name, field)


def _schema(columns: list[str], name: str, field: str) -> list[str]:
    """The columns to read: Azure's or the plain ones, and ``dataset`` or ``domain`` if
    there. A column named twice, or both schemas (or both domain columns) in one file, is
    refused: reading one of them would replay numbers the user may not have meant."""
    _check_columns(len(columns), name, field)
    known = [c for c in columns if c in KNOWN_COLUMNS]
    twice = next((c for i, c in enumerate(known) if c in known[:i]), None)
    if twice is not None:
        raise InputError(field, f"{name} names column {twice} twice: keep one")
    azure = [c for c in AZURE_COLUMNS if c in known]
    plain = [c for c in PLAIN_COLUMNS if c in known]
    if azure and plain:
        raise InputError(
            field,
            f"{name} has Azure columns ({', '.join(azure)}) and plain ones ({', '.join(plain)}): "
            "which times and lengths to replay is ambiguous; keep one set",
        )
    if all(c in known for c in DOMAIN_COLUMNS):
        raise InputError(field, f"{name} has both a dataset and a domain column: keep one")
    for schema in (AZURE_COLUMNS, PLAIN_COLUMNS):
        if all(c in known for c in schema):
            return [*schema, *(c for c in DOMAIN_COLUMNS if c in known)]
    raise InputError(
        field,
        f"{name} needs columns {', '.join(AZURE_COLUMNS)} (Azure) or "
        f"{', '.join(PLAIN_COLUMNS)} (plain); it has {_listed(columns)}",
    )


def _check_columns(count: int, name: str, field: str) -> None:
    if count > MAX_COLUMNS:
        raise InputError(
            field, f"{name} has {count:,} columns; an arrival trace has at most {MAX_COLUMNS}"
        )


def _check_rows(rows: int, name: str, field: str) -> None:
    if rows > MAX_ARRIVAL_ROWS:
        raise InputError(
            field,
            f"{name} holds {rows:,} rows; an arrival trace is read with at most "
            f"{MAX_ARRIVAL_ROWS:,} (window a longer log into files)",
        )


_LINE_END = re.compile(rb"[\r\n]")


def _csv(raw: bytes, name: str, field: str) -> pd.DataFrame:
    """A CSV's used columns as text, its header and row count checked before any row is
    parsed (lines counted: a newline inside a quoted cell counts as a row too)."""
    body = raw.removeprefix(b"\xef\xbb\xbf").lstrip(b"\r\n")  # as pandas: no BOM, blank lines
    end = _LINE_END.search(body, 0, MAX_LINE_BYTES + 1)  # pandas ends a line at \r too
    if end is None and len(body) > MAX_LINE_BYTES:
        raise InputError(
            field, f"{name}: the header (first line) is longer than {MAX_LINE_BYTES:,} bytes"
        )
    try:
        line = body[: len(body) if end is None else end.start()].decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(field, f"{name}: the header (first line) is not UTF-8 text") from None
    with _reading(name, field):
        header = next(csv.reader([line]), [])
    columns = _schema(header, name, field)
    lines = max(body.count(b"\n"), body.count(b"\r")) + (not body.endswith((b"\n", b"\r")))
    _check_rows(lines - 1, name, field)
    with _reading(name, field), warnings.catch_warnings():
        # every column parsed, then the used ones kept: with usecols pandas drops a row's
        # cells past the header's count without a word (an unquoted comma shifts a row); a
        # first row longer than the header would make pandas read its leading cells as an
        # index and shift the rest (QA: "0,10,10,5,6" read as prompt 5, output 6), so no index
        # is inferred and a longer row is an error, by pandas' tokenizer or its warning
        warnings.simplefilter("error", pd.errors.ParserWarning)
        try:
            frame = pd.read_csv(io.BytesIO(raw), dtype=str, keep_default_na=False, index_col=False)
        except pd.errors.ParserWarning:
            raise InputError(
                field,
                f"{name}: a row has more cells than the header's {len(header)} (an unquoted "
                "comma?)",
            ) from None
        return frame[list(columns)]


def _jsonl(raw: bytes, name: str, field: str) -> pd.DataFrame:
    """A JSONL file's used keys, each line one JSON object read by the strict reader (a key
    given twice on a line is refused, not the last one kept)."""
    _check_rows(raw.count(b"\n") + (not raw.endswith(b"\n")), name, field)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(field, f"{name} is not UTF-8 text") from None
    seen: dict[str, None] = {}  # every key, in order: the file's columns
    values: dict[str, list[object]] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name} line {lineno}"
        if len(line) > MAX_LINE_BYTES:
            raise InputError(field, f"{where} is longer than {MAX_LINE_BYTES:,} characters")
        record = parse_json(line, field, where, walk=False)  # cells are checked by column
        if not isinstance(record, dict):
            raise InputError(field, f"{where}: a record is one JSON object {{...}}")
        if not values:  # the first record names the schema every record needs: refused early
            used = _schema(list(record), where, field)
            values = {c: [] for c in dict.fromkeys([*used, *DOMAIN_COLUMNS])}
        seen.update(dict.fromkeys(record))
        _check_columns(len(seen), name, field)
        for column, cells in values.items():
            cells.append(record.get(column))
    columns = _schema(list(seen), name, field)  # no record: "it has none"
    return pd.DataFrame({c: pd.Series(values[c], dtype=object) for c in columns})


def _is_text(kind: Any) -> bool:
    """Whether a Parquet column's Arrow type holds text or bytes (or a dictionary of them)."""
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind)


def _longest(cells: Any) -> int:
    """The longest value, in bytes, of a dictionary-encoded Arrow column's dictionaries."""
    import pyarrow.compute as pc

    return max(
        (pc.max(pc.binary_length(c.dictionary)).as_py() or 0 for c in cells.chunks), default=0
    )


def _parquet(raw: bytes, name: str, field: str) -> pd.DataFrame:
    """A Parquet file's used columns, its footer checked before any page is read: the rows,
    the columns, what the pages inflate to, each used column's type, and the length of every
    distinct text value (read as a dictionary, so that no row is decoded before)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(
            field, f"{name}: reading Parquet needs pyarrow (pip install simspec[parquet])"
        ) from None
    with _reading(name, field):
        footer = pq.ParquetFile(io.BytesIO(raw))
        schema, meta = footer.schema_arrow, footer.metadata
        inflated = sum(meta.row_group(g).total_byte_size for g in range(meta.num_row_groups))
    columns = _schema(schema.names, name, field)
    _check_rows(meta.num_rows, name, field)
    if inflated > MAX_ARRIVAL_TRACE_BYTES:
        raise InputError(
            field,
            f"{name} inflates to {inflated:,} bytes; an arrival trace is at most "
            f"{MAX_ARRIVAL_TRACE_BYTES:,}",
        )
    for column in columns:
        kind = schema.field(column).type
        if pa.types.is_nested(kind.value_type if pa.types.is_dictionary(kind) else kind):
            raise InputError(field, f"{name} column {column} holds {kind}, not numbers or text")
    texts = [c for c in columns if _is_text(schema.field(c).type)]
    with _reading(name, field):
        table = pq.ParquetFile(io.BytesIO(raw), read_dictionary=texts).read(columns=columns)
        for at, column in enumerate(table.column_names):
            cells = table.column(column)
            if not pa.types.is_dictionary(cells.type):
                continue
            longest = _longest(cells) if column in texts else 0
            if longest > MAX_TEXT_BYTES:
                raise InputError(
                    field,
                    f"{name} column {column} holds a value of {longest:,} bytes; a cell of an "
                    f"arrival trace is at most {MAX_TEXT_BYTES}",
                )
            # decoded only now, each value known to be short
            table = table.set_column(at, column, cells.cast(cells.type.value_type))
        return table.to_pandas()


def _from_frame(frame: pd.DataFrame, name: str, source: str, field: str) -> ArrivalTrace:
    """The trace the chosen columns hold (:func:`_schema` chose Azure's or the plain ones)."""
    if "TIMESTAMP" in frame.columns:
        column = "TIMESTAMP"
        times = _azure_seconds(frame["TIMESTAMP"], name, field)
        prompt = _lengths(frame["ContextTokens"], name, "ContextTokens", field)
        output = _lengths(frame["GeneratedTokens"], name, "GeneratedTokens", field)
    else:
        column = "arrival_s"
        times = _numbers(frame["arrival_s"], name, "arrival_s", field)
        prompt = _lengths(frame["prompt_len"], name, "prompt_len", field)
        output = _lengths(frame["output_len"], name, "output_len", field)
    if not len(times):
        raise InputError(field, f"{name} holds no requests")
    back = np.flatnonzero(np.diff(times) < 0)
    if len(back):
        raise InputError(
            field,
            f"{name} row {back[0] + 2} column {column}: earlier than the row before it "
            "(times must not go backwards: sort the file by time)",
        )
    times = times - times[0]
    far = np.flatnonzero(times > MAX_TRACE_S)
    if len(far):
        raise InputError(
            field,
            f"{_where(name, far, column)}: {times[far[0]]:.4g} s after the first request; a "
            f"trace spans at most {MAX_TRACE_S:.0f} s (30 days, as a window or tile may)",
        )
    domain = _domains(frame, name, field)
    return ArrivalTrace(name, source, times, prompt, output, domain, _span(times))


def _where(name: str, rows: np.ndarray, column: str) -> str:
    return f"{name} row {int(rows[0]) + 1} column {column}"


def _cell(col: pd.Series, rows: np.ndarray) -> str:
    """The first of ``rows``' cells as an error message quotes it (a numpy scalar as the
    plain value it holds: ``True``, not ``np.True_``)."""
    value = col.iloc[int(rows[0])]
    return _cut(repr(value.item() if isinstance(value, np.generic) else value))


# a time of day followed by an offset (Z, +05, +0500, +05:00): ISO 8601's extended form
_OFFSET = re.compile(r"\d:\d\d(?::\d\d(?:[.,]\d+)?)?\s*(?:[zZ]|[+-]\d\d(?::?\d\d)?)\s*$")


def _azure_seconds(col: pd.Series, name: str, field: str) -> np.ndarray:
    """Seconds from the first row. Times with UTC offsets are instants, so offsets may differ
    from row to row (read in UTC); a time without one beside times with one is refused, as
    its instant is unknown."""
    text = col.astype(str)
    try:
        stamps = pd.to_datetime(text, format="ISO8601", errors="coerce")
    except ValueError:  # "Mixed timezones detected": offsets that differ, or some missing
        with_offset = text.str.contains(_OFFSET).to_numpy(dtype=bool)
        if not with_offset.all():
            bare, given = np.flatnonzero(~with_offset), np.flatnonzero(with_offset)
            raise InputError(
                field,
                f"{_where(name, bare, 'TIMESTAMP')}: {_cell(col, bare)} has no "
                f"UTC offset but row {given[0] + 1} has one: give every time an offset, or none",
            ) from None
        with _reading(name, field):
            stamps = pd.to_datetime(text, format="ISO8601", errors="coerce", utc=True)
    bad = np.flatnonzero(stamps.isna().to_numpy())
    if len(bad):
        raise InputError(
            field,
            f"{_where(name, bad, 'TIMESTAMP')}: not a date and time ({_cell(col, bad)}): "
            "the Azure layout's TIMESTAMP is ISO 8601 (2023-11-16 18:15:46.6805900); a trace "
            "timed in seconds takes the columns arrival_s, prompt_len, output_len",
        )
    delta = (stamps - stamps.iloc[0]).to_numpy()
    seconds = delta / np.timedelta64(1, "s")  # any span, in float; refused later if too long
    if np.all(np.abs(seconds) < 9e9):  # whole nanoseconds fit an int64: seconds from them
        seconds = delta.astype("timedelta64[ns]").astype(np.int64).astype(np.float64) / 1e9
    return seconds


def _cell_number(value: object) -> object:
    """A JSON or Parquet cell as ``to_numeric`` may read it: a bool is no count (``true``
    would replay 1 token), nor is a list, and an integer past a float's range is none."""
    if isinstance(value, bool | np.bool_ | list | dict):
        return None
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return None
    return value


def _is_clock(col: pd.Series) -> bool:
    """A duration or date-time column (numpy's or Arrow's), whose numbers are its storage
    unit's ticks, not seconds or tokens."""
    kind = col.dtype
    if isinstance(kind, pd.ArrowDtype):
        import pyarrow as pa

        arrow = kind.pyarrow_dtype
        return bool(pa.types.is_duration(arrow) or pa.types.is_temporal(arrow))
    return bool(
        pd.api.types.is_timedelta64_dtype(kind) or pd.api.types.is_datetime64_any_dtype(kind)
    )


def _floats(col: pd.Series) -> np.ndarray:
    """The column as float64, NaN where a cell is not a number (text is parsed; a duration
    or date-time is no count)."""
    if pd.api.types.is_bool_dtype(col.dtype) or _is_clock(col):
        return np.full(len(col), np.nan)
    if col.dtype == object:
        col = col.map(_cell_number)
    return pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _numbers(col: pd.Series, name: str, column: str, field: str) -> np.ndarray:
    if _is_clock(col) and pd.api.types.is_timedelta64_dtype(col.dtype):
        # a duration column (df.ts - df.ts[0]) in seconds, not its storage unit's ticks (QA:
        # a Parquet duration[us] replayed 1 s as 1,000,000 s)
        values = col.dt.total_seconds().to_numpy(dtype=np.float64, na_value=np.nan)
    elif _is_clock(col):
        raise InputError(
            field,
            f"{name} column {column} holds "
            + ("durations" if "duration" in str(col.dtype) else "dates and times")
            + f" ({col.dtype}): give seconds from the first request as numbers (or a "
            "duration column), or name it TIMESTAMP as the Azure traces do",
        )
    else:
        values = _floats(col)
    bad = np.flatnonzero(~(np.isfinite(values) & (values >= 0) & (values <= MAX_CLOCK_S)))
    if len(bad):
        raise InputError(
            field,
            f"{_where(name, bad, column)}: must be a number of seconds in [0, {MAX_CLOCK_S:g}], "
            f"got {_cell(col, bad)}",
        )
    return values


def _lengths(col: pd.Series, name: str, column: str, field: str) -> np.ndarray:
    values = _floats(col)
    ok = np.isfinite(values) & (values >= 1) & (values <= MAX_LENGTH)
    ok[ok] = values[ok] == np.floor(values[ok])
    bad = np.flatnonzero(~ok)
    if len(bad):
        raise InputError(
            field,
            f"{_where(name, bad, column)}: must be a whole number of tokens in "
            f"[1, {MAX_LENGTH}], got {_cell(col, bad)}",
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
            f"{_where(name, bad, column)}: {_cell(frame[column], bad)} is not one "
            f"of {', '.join(sorted(allowed))}",
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
    ``start_s`` is the new origin (the gap before the first kept request stays). An end past
    the trace is refused (QA: cut to the trace without a word, a --tile then repeated the
    shorter window)."""
    if end_s is not None and end_s > trace.duration_s:
        raise InputError(
            "workload.trace_end_s",
            f"{end_s:g} s is past the end of {trace.name} ({trace.duration_s:g} s): end the "
            f"window at most there (or leave its end out), and --tile to repeat it",
        )
    end = trace.duration_s if end_s is None else end_s
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
    keep their shape), or scaled so the mean rate is ``target_qps`` requests/s: the n
    arrivals then span (n - 1) / target_qps s, whatever quiet time a window leaves after its
    last arrival (a window's duration would offer more than was asked: QA, azure-code 0:60 at
    10 req/s ran 15)."""
    if rate_scale is not None and target_qps is not None:
        raise InputError("workload.target_qps", "give rate_scale or target_qps, not both")
    if target_qps is not None:
        n = len(trace)
        span = float(trace.arrival_s[-1] - trace.arrival_s[0]) if n > 1 else 0.0
        if n > 1 and span == 0.0:
            # scaling gaps of zero leaves them zero: the asked rate would not run (QA)
            raise InputError(
                "workload.target_qps",
                f"every one of the {n} requests of {trace.name} arrives at the same moment: "
                "rescaling its gaps cannot give it a rate; run it as the burst it is, or use "
                "a Poisson arrival at that rate",
            )
        rate = (n - 1) / span if span > 0 else trace.mean_rate
        rate_scale = target_qps / rate
    if rate_scale is None or rate_scale == 1.0:
        return trace
    if not (math.isfinite(rate_scale) and rate_scale > 0):
        raise InputError("workload.rate_scale", f"must be a number > 0, got {rate_scale!r}")
    span = float(trace.arrival_s[-1]) if len(trace) else 0.0
    if span / rate_scale > MAX_TRACE_S:  # the bound the trace itself is held to
        flag, given = (
            ("workload.rate_scale", rate_scale)
            if target_qps is None
            else ("workload.target_qps", target_qps)
        )
        raise InputError(
            flag,
            f"{given:g} stretches the {span:.4g} s of {trace.name} to {span / rate_scale:.4g} s; "
            f"a replay spans at most {MAX_TRACE_S:.0f} s (30 days): give at least "
            f"{given * span / rate_scale / MAX_TRACE_S:.4g}",
        )
    arrivals, duration = trace.arrival_s / rate_scale, trace.duration_s / rate_scale
    if target_qps is not None and len(trace):
        # the period a copy takes when tiled: n arrivals at the asked rate (the window's own
        # length, scaled, brought its quiet tail back in every copy: QA, azure-code 0:60 at
        # 10 req/s tiled to 60 s ran 6.5 req/s); the lead before the first arrival is kept up
        # to one mean gap, the rest of the gap that closes the period (QA: a longer lead
        # stretched the period past n / target_qps, 9.67 req/s asked 10)
        lead = float(arrivals[0])
        arrivals = arrivals - lead + min(lead, 1.0 / target_qps)
        duration = len(trace) / target_qps
    return replace(trace, arrival_s=arrivals, duration_s=duration)


def tile(trace: ArrivalTrace, horizon_s: float) -> ArrivalTrace:
    """Copies of the trace laid back to back (each offset by its duration) up to
    ``horizon_s``: requests arriving before the horizon are kept."""
    if not (math.isfinite(horizon_s) and horizon_s > 0):
        raise InputError("workload.tile_s", f"must be a number > 0, got {horizon_s!r}")
    copies = max(1, math.ceil(horizon_s / trace.duration_s))
    if (copies - 1) * len(trace) > MAX_REQUESTS:  # refused before the copies are laid out
        raise InputError(
            "workload.tile_s",
            f"{horizon_s:g} s is {copies:,} copies of {trace.name} ({len(trace):,} requests in "
            f"{trace.duration_s:.4g} s); a run serves at most {MAX_REQUESTS:,} requests: "
            "shorten tile_s",
        )
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


@file_cache()
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
