"""What one operator timing sample is, whichever table it came from.

Every loader returns rows of :data:`COLUMNS`: which operator family (``gemm``, ``attention``,
``elementwise``, ``allreduce``), the work it did as the cost model counts it
(:func:`simspec.engine.costmodel.gemm_work` and friends, so fit and simulation agree), and the
measured seconds. ``group`` names what a held-out split may leave out (a model, a TP degree, a
worker count).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from simspec.engine.costmodel import gemm_work

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
