"""The validation-case table: the columns of ``shared/validation/cases.csv`` as an input
contract, read defensively so that one bad cell skips one row, never the file.

Cells are kept as the text the user wrote (every input column is written back unchanged); the
numbers a prediction needs are parsed per row by :func:`number`.
"""

from __future__ import annotations

import csv
import difflib
import io
import math
import warnings
from importlib import resources
from pathlib import Path

import pandas as pd

from simspec.catalog.tables import read_input
from simspec.errors import InputError

# every column of the contract (shared/validation/README.md, "cases.csv"), in its order
COLUMNS = (
    "case_id",
    "series",
    "source",
    "metric",
    "method",
    "target_model",
    "draft_model",
    "gpu",
    "num_gpus",
    "tp",
    "engine",
    "engine_version",
    "load_kind",
    "load",
    "temperature",
    "dataset",
    "prompt_len",
    "output_len",
    "context_len",
    "spec_shape",
    "k",
    "tree_nodes",
    "tree_topk",
    "measured_tau",
    "measured_value",
    "baseline",
    "uses_trace",
    "notes",
)
# without these a row cannot even be named or predicted; the rest may be absent or empty
REQUIRED = (
    "case_id",
    "metric",
    "method",
    "target_model",
    "gpu",
    "engine",
    "load_kind",
    "measured_value",
)
# e2e_s: seconds from a request's arrival to its last token (vllm bench serve's E2EL, which it
# prints in ms: a row gives it divided by 1,000)
METRICS = (
    "speedup",
    "tau",
    "tpot_ms",
    "ttft_ms",
    "e2e_s",
    "throughput_tok_s",
    "step_time_ms",
)
LOAD_KINDS = ("single", "static_batch", "concurrency", "qps")
MAX_BYTES = 64 * 1024 * 1024  # a case table is a few hundred rows; refuse anything absurd


def read_cases(path: Path | None = None) -> pd.DataFrame:
    """All rows, every cell as text ("" when empty); missing optional columns are added empty.
    Without ``path``, the packaged copy of ``shared/validation/cases.csv``.

    Raises InputError naming ``--cases`` when the file cannot be read as CSV or lacks a
    required column."""
    if path is None:
        packaged = resources.files("simspec").joinpath("data", "validation", "cases.csv")
        with resources.as_file(packaged) as local:
            return read_cases(local)
    data = read_input(path, "--cases", MAX_BYTES)
    try:
        # index_col=False: a row with one field more than the header (a spreadsheet's trailing
        # comma) must not turn its first column into the index and shift the rest (QA)
        with warnings.catch_warnings():  # the trailing field's "loss of data" is an empty one
            warnings.simplefilter("ignore", pd.errors.ParserWarning)
            frame = pd.read_csv(
                io.BytesIO(data), dtype=str, keep_default_na=False, na_filter=False, index_col=False
            )
        # the header as written: pandas renames a repeated name "x.1", which would hide it
        header = next(csv.reader(io.StringIO(data.decode("utf-8-sig"), newline="")))
    except (
        OSError,
        pd.errors.ParserError,
        pd.errors.EmptyDataError,
        UnicodeDecodeError,
        csv.Error,
    ) as exc:
        raise InputError("--cases", f"cannot read {str(path)!r} as CSV ({exc})") from None
    except StopIteration:
        header = []
    names = [h.strip() for h in header]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InputError("--cases", f"{str(path)!r} has the column {repeated[0]!r} twice")
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise InputError(
            "--cases",
            f"{str(path)!r} lacks columns {', '.join(missing)} "
            f"(the contract: {', '.join(COLUMNS)})",
        )
    for col in frame.columns:  # a misspelt contract column would be read as empty (QA)
        if col not in COLUMNS and (near := _spelt_as(col)):
            raise InputError(
                "--cases",
                f"{str(path)!r} has the column {col!r}, which validate does not read: the "
                f"contract spells it {near!r}",
            )
    if frame.columns.duplicated().any():
        dup = frame.columns[frame.columns.duplicated()][0]
        raise InputError("--cases", f"{str(path)!r} has the column {dup!r} twice")
    for col in COLUMNS:
        if col not in frame.columns:
            frame[col] = ""
    ids = frame["case_id"]
    twice = ids[ids.duplicated() & (ids != "")]
    if len(twice):  # each row's output line is keyed by it (QA: two rows of one id ran)
        raise InputError(
            "--cases", f"{str(path)!r} gives case_id {twice.iloc[0]!r} to more than one row"
        )
    return frame


def _spelt_as(column: str) -> str | None:
    """The contract column ``column`` is a misspelling of (another case, a missing or extra
    underscore or letter), else None: a column of other data is left alone."""
    squeezed = column.lower().replace("_", "").replace(" ", "")
    for name in COLUMNS:
        if squeezed == name.replace("_", ""):
            return name
    close = difflib.get_close_matches(column.lower(), COLUMNS, n=1, cutoff=0.85)
    return close[0] if close else None


def number(text: str) -> float | None:
    """A finite number, or None for an empty cell or text ("~1.5", "1.64-1.80", ">2")."""
    text = str(text).strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def whole(text: str) -> int | None:
    """A whole number (given as "3" or "3.0"), else None."""
    value = number(text)
    return int(value) if value is not None and value == int(value) else None
