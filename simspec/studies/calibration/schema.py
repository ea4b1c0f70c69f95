"""What one operator timing sample is, whichever table it came from.

Every loader returns rows of :data:`COLUMNS`: which operator family (``gemm``, ``attention``,
``elementwise``, ``allreduce``), the work it did as the cost model counts it
(:func:`simspec.engine.costmodel.gemm_work` and friends, so fit and simulation agree), and the
measured seconds. ``group`` names what a held-out split may leave out (a model, a TP degree, a
worker count).

Every table file is read by :func:`read_table` (or :func:`table_bytes`): a regular file of at
most :data:`MAX_TABLE_BYTES`, parsed as CSV, each failure one :class:`InputError` naming it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simspec.catalog.tables import read_input, shown
from simspec.engine.costmodel import gemm_work
from simspec.errors import InputError, one_line

# The largest timing table under shared/calibration-data is 12.1 MB
# (moe-serving/aiconfigurator_moe_1node.csv; the largest a loader uses, an LLMServingSim
# attention.csv, is 3.3 MB). Five times that leaves room for a longer profile; a file past it
# (a 3 GB sparse CSV, /dev/zero behind a link) is refused before a byte is read.
MAX_TABLE_BYTES = 64 * 1024 * 1024
# The widest real table has 58 columns (Vidur's mlp.csv). A header is checked before pandas
# parses the file: a 64 MB line of commas would otherwise become millions of columns.
MAX_TABLE_COLUMNS = 1_000


def table_bytes(path: Path) -> bytes:
    """A timing table's bytes: a regular file (not a FIFO or a device, even behind a symbolic
    link) of at most :data:`MAX_TABLE_BYTES`."""
    return read_input(path, "timings", MAX_TABLE_BYTES)


def read_table(path: Path) -> pd.DataFrame:
    """A timing table's CSV as a frame; a file that is not one is an InputError naming it."""
    data = table_bytes(path)
    header = data.split(b"\n", 1)[0]
    if header.count(b",") >= MAX_TABLE_COLUMNS:
        raise InputError(
            "timings",
            f"{shown(path)} has more than {MAX_TABLE_COLUMNS:,} columns: not a timing table",
        )
    try:
        # utf-8-sig: a spreadsheet's byte-order mark is not part of the first column's name
        return pd.read_csv(io.BytesIO(data), encoding="utf-8-sig")
    except ValueError as exc:  # pandas' ParserError and EmptyDataError, UnicodeDecodeError
        raise InputError("timings", f"{shown(path)} is not a CSV table ({brief(exc)})") from None


def brief(exc: BaseException) -> str:
    """An exception's text as part of one error line: a cell of a user's table may be
    megabytes long, and a message quoting it is cut to 200 characters."""
    text = one_line(str(exc))
    return text if len(text) <= 200 else text[:197] + "..."


COLUMNS = [
    "operator",
    "op",
    "source",
    "model",
    "tp",
    "group",
    "tokens",
    "flops",
    "bytes",
    "time_s",
    "decode_only",  # attention over one new token per sequence (a different kernel path)
]


def samples_frame(columns: dict[str, Any]) -> pd.DataFrame:
    """Samples from column values (scalars are repeated), in :data:`COLUMNS` order; a sample is
    not decode-only unless said."""
    df = pd.DataFrame({"decode_only": False, **columns})
    return df[COLUMNS]


@dataclass(frozen=True)
class Origin:
    """Where a batch of samples comes from: the table, the model and the TP degree (one for
    all, or one per sample). Their ``group`` is the model unless given."""

    source: str
    model: str
    tp: Any

    def samples(
        self,
        operator: str,
        op: Any,
        tokens: Any,
        flops: Any,
        nbytes: Any,
        time_s: Any,
        group: Any = None,
        decode_only: Any = False,
    ) -> pd.DataFrame:
        return samples_frame(
            {
                "decode_only": decode_only,
                "operator": operator,
                "op": op,
                "source": self.source,
                "model": self.model,
                "tp": self.tp,
                "group": self.model if group is None else group,
                "tokens": tokens,
                "flops": flops,
                "bytes": nbytes,
                "time_s": time_s,
            }
        )

    def gemm(self, op: str, m: Any, k: float, n: float, time_s: Any) -> pd.DataFrame:
        """GEMM samples of ``m`` rows by a ``k`` x ``n`` weight."""
        m = np.asarray(m, dtype=float)
        flops, nbytes = gemm_work(m, float(k), float(n))
        return self.samples("gemm", op, m, flops, nbytes, np.asarray(time_s, float))


@dataclass(frozen=True)
class Shape:
    """The few shape numbers the tables need (per-GPU widths come from these and tp)."""

    hidden: int
    inter: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    gated: bool = True

    def widths(self, tp: int) -> tuple[int, int, int]:
        """Per-GPU query width, KV width (KV heads replicate below one per GPU), MLP width."""
        kv = max(self.kv_heads // tp, 1) * self.head_dim
        return self.heads * self.head_dim // tp, kv, self.inter // tp
