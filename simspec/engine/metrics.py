"""One metrics collector: per-iteration records and the summary of a run."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from simspec.config import WorkloadConfig
from simspec.engine.kv_cache import MemoryPlan


class IterationRecord(NamedTuple):
    """One engine iteration: when it ran, what it computed and where its time went."""

    start_s: float
    duration_s: float
    decode_seqs: int
    prefill_seqs: int
    query_tokens: int  # tokens the verify forward computed (verify chains/trees, prefill chunks)
    output_tokens: int  # tokens the iteration emitted
    spec_tokens: int  # tokens speculative steps emitted (accepted drafts + 1 each)
    spec_seqs: int  # sequences that took a speculative step
    draft_s: float  # drafting, with the host work of a speculative step
    verify_s: float  # the target forward without its host overhead
    overhead_s: float  # the target forward's host overhead
    kv_blocks_used: int
    decode_tokens: int  # of query_tokens, those of decoding sequences (verify widths)
    no_proposal_seqs: int  # speculative sequences whose lookup proposed nothing (verify 1)


ITERATION_COLUMNS = IterationRecord._fields


class IterationLog:
    """Appends one record per iteration; a DataFrame only at the end (cheap on the hot loop)."""

    def __init__(self) -> None:
        self.rows: list[IterationRecord] = []

    def record(self, row: IterationRecord) -> None:
        self.rows.append(row)

    def frame(self) -> pd.DataFrame:
        if not self.rows:
            return pd.DataFrame.from_records(self.rows, columns=list(ITERATION_COLUMNS))
        # column by column: a third faster than from_records, with the same dtypes
        columns = zip(ITERATION_COLUMNS, zip(*self.rows, strict=True), strict=True)
        return pd.DataFrame({name: np.array(values) for name, values in columns})


@dataclass(frozen=True)
class RunSummary:
    """What one run measured: latency percentiles, throughput, acceptance and where the time
    went (over the steady window: see :func:`steady_window`), plus counts. Milliseconds per
    token (``ttft``, ``tpot``, ``itl``), seconds per request (``e2e``)."""

    requests: int
    output_tokens_mean: float
    unfinishable: int
    makespan_s: float
    throughput_tok_s: float
    ttft_ms_p50: float
    ttft_ms_p99: float
    tpot_ms_mean: float
    tpot_ms_p50: float
    tpot_ms_p99: float
    itl_ms_p50: float
    itl_ms_p99: float
    e2e_s_p50: float
    e2e_s_p90: float
    e2e_s_p99: float
    mean_accept_len: float  # tokens per speculative step, bonus included (1 without speculation)
    no_proposal_frac: float  # share of speculative steps that proposed nothing (lookup replay)
    mean_verify_tokens: float  # query tokens per decoding sequence per step (1 without drafts)
    draft_time_frac: float
    verify_time_frac: float
    overhead_time_frac: float
    preemptions: int
    kv_blocks_total: int
    kv_blocks_peak: int
    iterations: int
    kv_blocks_in_use_end: int  # 0 once every request has left: no block leaks

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Any) -> RunSummary:
        """From :meth:`as_dict` (a JSON line of a run cache, which a person or a cut write may
        have damaged). Every field must be there and nothing else; counts are integers >= 0
        (an integral float is one), measures finite numbers: a missing, null, string, boolean,
        NaN or infinite value raises ``ValueError``, so no damaged entry becomes a result."""
        if not isinstance(values, dict):
            raise ValueError("a run summary is a JSON object")
        names = [f.name for f in fields(cls)]
        if set(values) != set(names):
            odd = sorted(set(values) ^ set(names))
            raise ValueError(f"a run summary has exactly its fields (not {', '.join(odd)})")
        return cls(**{f.name: _checked(f.name, f.type, values[f.name]) for f in fields(cls)})


def _checked(name: str, kind: Any, value: Any) -> int | float:
    """``value`` as the field's type, if it is a finite number of that kind."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, not {type(value).__name__}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        finite = False
    if not finite:
        raise ValueError(f"{name} must be finite, not {value}")
    if kind in ("int", int):
        if value != int(value) or value < 0:
            raise ValueError(f"{name} must be a count (an integer >= 0), not {value}")
        return int(value)
    return float(value)


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def _weighted_pct(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The q-th percentile of ``values`` each counted ``weights`` times (no interpolation)."""
    if not (weights > 0).any():
        return float("nan")
    return float(np.percentile(values, q, weights=weights, method="inverted_cdf"))


def steady_window(requests: pd.DataFrame, wl: WorkloadConfig, makespan: float) -> float:
    """End of the window in which a closed loop holds its full concurrency.

    The closed loop stays at N in flight until the last request is released; after that the
    batch drains and throughput falls, which is not the load being asked about.
    """
    if wl.arrival == "closed" and len(requests) > wl.concurrency:
        last = float(requests["arrival_s"].max())
        if last > 0:
            return last
    return makespan


def summarize(
    requests: pd.DataFrame,
    iterations: pd.DataFrame,
    wl: WorkloadConfig,
    peak_blocks: int,
    memory: MemoryPlan,
    blocks_in_use_end: int = 0,
) -> RunSummary:
    """Latency percentiles, throughput and acceptance of a finished run."""
    ok = requests[~requests["unfinishable"]]
    end = iterations["start_s"] + iterations["duration_s"]
    makespan = float(end.max()) if len(iterations) else 0.0
    window = steady_window(ok, wl, makespan)
    in_window = end <= window + 1e-12
    tokens = float(iterations.loc[in_window, "output_tokens"].sum())
    throughput = tokens / window if window > 0 else float("nan")

    ttft = (ok["first_token_s"] - ok["arrival_s"]).to_numpy()
    e2e = (ok["finish_s"] - ok["arrival_s"]).to_numpy()
    multi = ok[ok["output_tokens"] > 1]
    tpot = ((multi["finish_s"] - multi["first_token_s"]) / (multi["output_tokens"] - 1)).to_numpy()
    # a decoding sequence waits one iteration between token chunks
    itl_vals = iterations["duration_s"].to_numpy()
    itl_w = iterations["decode_seqs"].to_numpy().astype(float)
    spec_steps = float(iterations["spec_seqs"].sum())
    decode_steps = float(iterations["decode_seqs"].sum())
    busy = float(iterations["duration_s"].sum())
    return RunSummary(
        requests=len(requests),
        output_tokens_mean=float(ok["output_tokens"].mean()) if len(ok) else float("nan"),
        unfinishable=int(requests["unfinishable"].sum()),
        makespan_s=makespan,
        throughput_tok_s=throughput,
        ttft_ms_p50=1e3 * _pct(ttft, 50),
        ttft_ms_p99=1e3 * _pct(ttft, 99),
        tpot_ms_mean=1e3 * float(np.mean(tpot)) if len(tpot) else float("nan"),
        tpot_ms_p50=1e3 * _pct(tpot, 50),
        tpot_ms_p99=1e3 * _pct(tpot, 99),
        itl_ms_p50=1e3 * _weighted_pct(itl_vals, itl_w, 50),
        itl_ms_p99=1e3 * _weighted_pct(itl_vals, itl_w, 99),
        e2e_s_p50=_pct(e2e, 50),
        e2e_s_p90=_pct(e2e, 90),
        e2e_s_p99=_pct(e2e, 99),
        mean_accept_len=(
            float(iterations["spec_tokens"].sum()) / spec_steps if spec_steps else 1.0
        ),
        no_proposal_frac=(
            float(iterations["no_proposal_seqs"].sum()) / spec_steps if spec_steps else 0.0
        ),
        mean_verify_tokens=(
            float(iterations["decode_tokens"].sum()) / decode_steps if decode_steps else 1.0
        ),
        draft_time_frac=float(iterations["draft_s"].sum()) / busy if busy else 0.0,
        verify_time_frac=float(iterations["verify_s"].sum()) / busy if busy else 0.0,
        overhead_time_frac=float(iterations["overhead_s"].sum()) / busy if busy else 0.0,
        preemptions=int(requests["preemptions"].sum()),
        kv_blocks_total=int(memory.num_blocks),
        kv_blocks_peak=int(peak_blocks),
        iterations=len(iterations),
        kv_blocks_in_use_end=int(blocks_in_use_end),
    )
