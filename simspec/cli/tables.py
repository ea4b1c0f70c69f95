"""Result tables: printed for a reader, written whole (or not at all) for a program."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from simspec.cli.common import writing
from simspec.errors import InputError, one_line
from simspec.outputs import write_bytes_atomic, write_text_atomic


def check_suffix(out: Path | None, flag: str, suffixes: tuple[str, ...]) -> None:
    """Refuse, before any work, an output name whose suffix is not a format the command
    writes (``--out x.txt`` would get CSV bytes under a name that says otherwise)."""
    if out is not None and out.suffix not in suffixes:
        raise InputError(flag, f"write {' or '.join(suffixes)} (got {str(out)!r})")


def safe_title(title: str) -> str:
    """A table title as plain text: control characters escaped (a file name may hold them)
    and rich markup shown, not interpreted."""
    return escape(one_line(title))


def print_frame(frame: pd.DataFrame, title: str, width: int | None = None) -> None:
    """A data frame as a table on stdout; with ``width``, a file or pipe gets that width and
    the first column never wraps (long names stay whole)."""
    table = Table(title=safe_title(title))
    for col in frame.columns:
        table.add_column(str(col), no_wrap=width is not None and col == frame.columns[0])
    for row in frame.itertuples(index=False):
        table.add_row(*(number(v) if isinstance(v, float) else str(v) for v in row))
    console = Console()
    if width is not None and not console.is_terminal:
        console = Console(width=width)
    console.print(table)


def number(v: float) -> str:
    """Readable in a table: thousands with separators, small values to 3 significant digits."""
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.1f}" if abs(v) >= 100 else f"{v:.3g}"


def write_frame(frame: pd.DataFrame, out: Path, flag: str = "--out") -> None:
    """CSV (or Parquet by suffix), written whole or not at all."""
    with writing(out, flag):
        if out.suffix == ".parquet":
            write_bytes_atomic(out, frame.to_parquet(index=False))
        else:
            write_text_atomic(out, frame.to_csv(index=False, float_format="%.6g"))


def write_text(out: Path, text: str, flag: str = "--out") -> None:
    """A text output (CSV, JSON), written whole or not at all."""
    with writing(out, flag):
        write_text_atomic(out, text)
