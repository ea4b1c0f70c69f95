"""One metrics collector: per-iteration records and the summary of a run."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple, Protocol

import numpy as np
import pandas as pd

from simspec.engine import intervals as ci
from simspec.engine.controls import Controls, controlled
from simspec.engine.kv_cache import MemoryPlan
from simspec.engine.window import Layout, Window, steady_window


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
    # running sequences past their first token that a step decoding nobody kept waiting
    # (SGLang's prefill-only steps): the gap to their next token grows by it (token_gaps)
    waiting_seqs: int = 0


ITERATION_COLUMNS = IterationRecord._fields


class IterationSink(Protocol):
    """What a replica hands each iteration's record to: the run's :class:`IterationLog`, or a
    fleet's windowed sums."""

    def record(self, row: IterationRecord) -> None: ...

    def record_block(self, columns: tuple[np.ndarray, ...]) -> None:
        """A run of iterations at once, after those recorded so far: one array per field of
        :class:`IterationRecord`, in its order, each as long as the run (int64 or float64, as
        the rows' Python numbers would make the column)."""

    def hold(self, start: float, end: float, blocks: int) -> None:
        """KV blocks held between iterations, from ``start`` to ``end`` (an idle replica's)."""


class IterationLog:
    """Appends one record per iteration, or a run's columns at once; a DataFrame only at the
    end (cheap on the hot loop)."""

    def __init__(self) -> None:
        self.rows: list[IterationRecord] = []
        # (rows recorded before it, its columns): the runs recorded at once, in order
        self._blocks: list[tuple[int, tuple[np.ndarray, ...]]] = []

    def record(self, row: IterationRecord) -> None:
        self.rows.append(row)

    def record_block(self, columns: tuple[np.ndarray, ...]) -> None:
        self._blocks.append((len(self.rows), columns))

    def hold(self, start: float, end: float, blocks: int) -> None:
        """Nothing: the iteration table has a row per iteration, none for idle time."""

    def frame(self) -> pd.DataFrame:
        if not self.rows and not self._blocks:
            return pd.DataFrame.from_records(self.rows, columns=list(ITERATION_COLUMNS))
        # column by column: faster than from_records, with the same dtypes (a column of rows
        # is int64 or float64 as its Python numbers are, and so is each block's)
        parts: list[list[np.ndarray]] = [[] for _ in ITERATION_COLUMNS]
        done = 0
        for at, block in [*self._blocks, (len(self.rows), None)]:
            if at > done:
                segment = zip(*self.rows[done:at], strict=True)
                for part, values in zip(parts, segment, strict=True):
                    part.append(np.array(values))
                done = at
            if block is not None:
                for part, column in zip(parts, block, strict=True):
                    part.append(column)
        return pd.DataFrame(
            {
                name: part[0] if len(part) == 1 else np.concatenate(part)
                for name, part in zip(ITERATION_COLUMNS, parts, strict=True)
            }
        )


@dataclass(frozen=True)
class RunSummary:
    """What one run measured over its steady window (:mod:`simspec.engine.window`): latency
    percentiles, throughput, acceptance and where the time went, each headline figure with a
    95 % interval (``*_ci_low``/``*_ci_high``, :mod:`simspec.engine.intervals`), plus counts.
    Milliseconds per token (``ttft``, ``tpot``, ``itl``), seconds per request (``e2e``)."""

    requests: int  # measured (in the window)
    output_tokens_mean: float
    unfinishable: int
    makespan_s: float
    throughput_tok_s: float
    ttft_ms_p50: float
    ttft_ms_p99: float
    ttft_ms_mean: float  # what vllm bench serve prints first ("Mean TTFT (ms)")
    tpot_ms_mean: float
    tpot_ms_p50: float
    tpot_ms_p99: float
    itl_ms_p50: float
    itl_ms_p99: float
    e2e_s_p50: float
    e2e_s_p90: float
    e2e_s_p99: float
    mean_accept_len: float  # tokens per speculative step, bonus included (1 without speculation)
    # the mean over requests of each one's output tokens / its latency: the research harnesses'
    # speed (EAGLE's and Spec-Bench's evaluation/speed.py, "speeds.append(tokens / times)"),
    # whose speedup is a ratio of two such means, not of total tokens over total time
    request_speed_mean_tok_s: float
    no_proposal_frac: float  # share of speculative steps that proposed nothing (lookup replay)
    mean_verify_tokens: float  # query tokens per decoding sequence per step (1 without drafts)
    draft_time_frac: float
    verify_time_frac: float
    overhead_time_frac: float
    preemptions: int
    kv_blocks_total: int
    kv_block_size: int  # tokens per KV block: the engine's (vLLM 16; its MLA backends 64/128)
    kv_blocks_peak: int
    iterations: int
    kv_blocks_in_use_end: int  # 0 once every request has left: no block leaks
    throughput_tok_s_ci_low: float
    throughput_tok_s_ci_high: float
    ttft_ms_p50_ci_low: float
    ttft_ms_p50_ci_high: float
    ttft_ms_p99_ci_low: float
    ttft_ms_p99_ci_high: float
    tpot_ms_p50_ci_low: float
    tpot_ms_p50_ci_high: float
    tpot_ms_p99_ci_low: float
    tpot_ms_p99_ci_high: float
    e2e_s_p50_ci_low: float
    e2e_s_p50_ci_high: float
    simulated_requests: int  # warm-up, measured and tail
    warmup_requests: int  # cut by MSER-5 before the window
    window_short: int  # measured requests missing: the warm-up outran its allowance
    window_start_s: float
    window_s: float
    mean_waiting: float  # requests waiting for their first token, time-averaged over the window
    stable: int  # 1 unless the waiting requests pile up over the window (open loop)
    # end-to-end seconds of the measured requests in each of the consecutive sections
    # (arrival order; ``intervals.SECTIONS``, fewer in a closed loop shorter than 32 turnovers:
    # ``intervals.closed_sections``): two closed-loop runs over the same requests pair them
    # for a speedup's interval
    section_e2e_s: tuple[float, ...]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def as_json_dict(self) -> dict[str, Any]:
        """:meth:`as_dict` with undefined measures (NaN) as ``None``: strict JSON."""
        return {
            k: (list(v) if isinstance(v, tuple) else None if v != v else v)
            for k, v in asdict(self).items()
        }

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
        # each value checked against its own field's type (mypy cannot follow that per key)
        checked: dict[str, Any] = {
            f.name: _checked(f.name, f.type, values[f.name]) for f in fields(cls)
        }
        return cls(**checked)

    @classmethod
    def may_be_undefined(cls, name: str) -> bool:
        """Whether a field may be NaN: an interval (too few requests for sections) or a level
        only an open loop measures. Every other measure of a kept run is a finite number."""
        return name.endswith(("_ci_low", "_ci_high")) or name == "mean_waiting"


def _checked(name: str, kind: Any, value: Any) -> int | float | tuple[float, ...]:
    """``value`` as the field's type, if it is a finite number of that kind (``None`` or NaN
    only where :meth:`RunSummary.may_be_undefined`; a list of them for a tuple field)."""
    if kind in ("tuple[float, ...]",):
        if not isinstance(value, list) or len(value) > 1024:
            raise ValueError(f"{name} must be a list of numbers")
        return tuple(float(_number(name, float, v)) for v in value)
    return _number(name, kind, value)


def _number(name: str, kind: Any, value: Any) -> int | float:
    """``value`` as a finite number of the field's kind (``int``: a count), or NaN where the
    field may be undefined."""
    if RunSummary.may_be_undefined(name) and (value is None or value != value):
        return float("nan")
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


def token_gaps(
    durations: np.ndarray, decode_seqs: np.ndarray, waiting_seqs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The gaps between a sequence's token chunks (ITL, as ``vllm bench serve`` and SGLang's
    ``bench_serving`` time them) and how many sequences wait each: a decoding iteration's
    duration, plus the steps since the previous decoding one that decoded nobody while
    sequences past their first token waited (SGLang's prefill-only steps:
    ``get_next_batch_to_run`` runs a prefill batch instead of decoding), weighted by the
    sequences that decode. A sequence admitted by those steps is charged the later ones too
    (a small overcount of its first gap)."""
    durations = np.asarray(durations, dtype=np.float64)
    decoding = np.asarray(decode_seqs) > 0
    if not decoding.any():
        return np.zeros(0), np.zeros(0)
    stalls = np.where(~decoding & (np.asarray(waiting_seqs) > 0), durations, 0.0)
    stalled = np.cumsum(stalls)
    at = np.flatnonzero(decoding)
    waited = np.diff(stalled[at], prepend=stalled[at[0]])  # since the previous decoding step
    return durations[at] + waited, np.asarray(decode_seqs, dtype=np.float64)[at]


def _weighted_pct(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The q-th percentile of ``values`` each counted ``weights`` times (no interpolation)."""
    if not (weights > 0).any():
        return float("nan")
    return float(np.percentile(values, q, weights=weights, method="inverted_cdf"))


def _waiting(requests: pd.DataFrame, w: Window) -> np.ndarray:
    """Requests arrived and still waiting for their first token, time-averaged in each section
    of the window (a request that never fits leaves as it arrives). An overloaded engine
    admits more slowly than requests arrive, so this is where the excess piles up."""
    arrival = requests["arrival_s"].to_numpy()
    first = requests["first_token_s"].to_numpy().copy()
    never = requests["unfinishable"].to_numpy()
    first[never] = arrival[never]
    arrival = np.sort(arrival[np.isfinite(arrival)])
    first = np.sort(np.where(np.isnan(first), np.inf, first))
    if not w.span_s > 0:
        return np.array([])
    grid = np.linspace(w.start_s, w.end_s, 20 * ci.SECTIONS, endpoint=False)
    level = np.searchsorted(arrival, grid, "right") - np.searchsorted(first, grid, "right")
    return level.reshape(ci.SECTIONS, -1).mean(axis=1).astype(float)


def _short_of_offered(ok: pd.DataFrame, served: np.ndarray, w: Window) -> bool:
    """Whether an open loop's window served clearly fewer tokens than its arrivals asked for:
    section by section, the tokens the arrivals ask for less those served, whose mean is above
    0 at 95 % (the sections carry the arrivals' own noise) and more than a twentieth of the
    asked (the share ``rising`` asks of a growing queue). An engine with room in its running
    batch (vLLM's 1,024 sequences) admits an overload there, its waiting queue empty, and
    serves it ever more slowly (QA: 24 % past capacity read stable at 256 requests, its TTFT
    p99 148 ms). ``served``: the tokens per second each section emitted (``_section_rates``)."""
    if not w.span_s > 0 or not len(ok) or not len(served):
        return False
    edges = np.linspace(w.start_s, w.end_s, ci.SECTIONS + 1)
    asked = np.histogram(
        ok["arrival_s"].to_numpy(), bins=edges, weights=ok["requested_output_tokens"].to_numpy()
    )[0] / (w.span_s / ci.SECTIONS)
    gap = asked - served
    low, _ = ci.mean_interval(gap)
    return bool(low > 0 and float(np.mean(gap)) > 0.05 * float(np.mean(asked)))


def _section_rates(iterations: pd.DataFrame, w: Window) -> np.ndarray:
    """Output tokens per second in each of the window's equal time sections."""
    if not w.span_s > 0:
        return np.array([])
    end = (iterations["start_s"] + iterations["duration_s"]).to_numpy()
    tokens = iterations["output_tokens"].to_numpy().astype(float)
    edges = np.linspace(w.start_s, w.end_s, ci.SECTIONS + 1)
    per = np.histogram(end, bins=edges, weights=tokens)[0]
    return per / (w.span_s / ci.SECTIONS)


def summarize(
    requests: pd.DataFrame,
    iterations: pd.DataFrame,
    plan: Layout,
    peak_blocks: int,
    memory: MemoryPlan,
    blocks_in_use_end: int = 0,
    controls: Controls | None = None,
) -> RunSummary:
    """Latency percentiles, throughput and acceptance of a finished run, over its window.

    A closed loop with ``controls`` (its requests' known lengths and steps, in request order)
    reports its throughput, its latency sections and their intervals from the controlled
    latencies and tokens (:mod:`simspec.engine.controls`); percentiles stay the requests' own."""
    end = iterations["start_s"] + iterations["duration_s"]
    makespan = float(end.max()) if len(iterations) else 0.0
    w = steady_window(requests, plan, makespan)
    measured = requests.iloc[w.first : w.first + w.count]
    ok = measured[~measured["unfinishable"]]
    in_window = ((end >= w.start_s - 1e-12) & (end <= w.end_s + 1e-12)).to_numpy()
    it = iterations[in_window] if len(iterations) else iterations
    # every measured request's latency, 0 for one that never fit (it leaves as it arrives)
    lat = (measured["finish_s"] - measured["arrival_s"]).fillna(0.0).to_numpy()
    made = measured["output_tokens"].to_numpy().astype(float)
    tau = None  # the iterations' tokens per speculative step, unless controlled below
    # each served request's speed (its tokens over its latency), under the same controls as
    # the throughput where the run has them
    served = (lat > 0) & ~measured["unfinishable"].to_numpy()
    speeds = made[served] / lat[served]
    if plan.concurrency and controls is not None:
        x = controls.values[w.first : w.first + w.count]
        speeds = controlled(speeds, x[served], controls.means)
        lat = controlled(lat, x, controls.means)
        # the tokens only where their mean is known (the records'); else they stay the
        # requests' own, which a method's run and its baseline's share exactly
        if controls.knows_tokens:
            made = controlled(made, x, controls.means)
        # tokens per speculative step under the same controls: the throughput speaks for the
        # records' whole population, and so must the tau beside it (QA: a batch-1 speedup
        # above its own tau, 1.281 against 1.252, the window's requests against the records)
        steps = measured["spec_steps"].to_numpy().astype(float)
        if steps.sum() > 0:
            emitted = steps + measured["accepted_tokens"].to_numpy().astype(float)
            per_step = controlled(emitted, x, controls.means).sum()
            tau = float(per_step / controlled(steps, x, controls.means).sum())
    # a closed loop's sections long enough to be nearly independent (ci.closed_sections)
    b = ci.closed_sections(plan.measured, plan.concurrency) if plan.concurrency else ci.SECTIONS
    parts = ci.sections(len(lat), b)
    section_e2e = tuple(float(lat[p].sum()) for p in parts)
    rates = np.zeros(0)  # an open loop's tokens per second by section (below)
    if plan.concurrency:
        # a closed loop holds ``concurrency`` requests at every moment: by Little's law its
        # throughput is concurrency x tokens / latency summed over the same requests, which
        # two methods share (so their ratio pairs, see intervals.ratio_of_sums_interval)
        throughput = plan.concurrency * made.sum() / lat.sum() if lat.sum() > 0 else float("nan")
        lo, hi = ci.ratio_of_sums_interval(
            np.array([made[p].sum() for p in parts]), np.array(section_e2e)
        )
        thr_ci = (plan.concurrency * lo, plan.concurrency * hi)
    else:
        tokens = float(it["output_tokens"].sum())
        throughput = tokens / w.span_s if w.span_s > 0 else float("nan")
        rates = _section_rates(iterations, w)
        thr_ci = ci.mean_interval(rates) if len(rates) else (float("nan"), float("nan"))
        if tokens == 0 and len(ok):
            # a window shorter than a step (arrivals far faster than the engine steps: an
            # overloaded rate) holds no step's tokens, and had read 0 tok/s (QA): the
            # engine's tokens while the measured requests were in it instead
            last = float(ok["finish_s"].max())
            kept = ((end >= w.start_s - 1e-12) & (end <= last + 1e-12)).to_numpy()
            took = last - w.start_s
            made_then = float(iterations["output_tokens"][kept].sum())
            throughput = made_then / took if took > 0 else float("nan")
            thr_ci = (float("nan"), float("nan"))

    ttft = (ok["first_token_s"] - ok["arrival_s"]).to_numpy()
    e2e = (ok["finish_s"] - ok["arrival_s"]).to_numpy()
    multi = ok[ok["output_tokens"] > 1]
    tpot = ((multi["finish_s"] - multi["first_token_s"]) / (multi["output_tokens"] - 1)).to_numpy()
    itl_vals, itl_w = token_gaps(
        it["duration_s"].to_numpy(), it["decode_seqs"].to_numpy(), it["waiting_seqs"].to_numpy()
    )
    spec_steps = float(it["spec_seqs"].sum())
    decode_steps = float(it["decode_seqs"].sum())
    busy = float(it["duration_s"].sum())
    level = _waiting(requests, w) if plan.tail > 0 and not plan.concurrency else np.array([])

    def pct_ci(x: np.ndarray, q: float, scale: float) -> tuple[float, float]:
        lo, hi = ci.percentile_interval(x, q)
        return scale * lo, scale * hi

    ttft50, ttft99 = pct_ci(ttft, 50, 1e3), pct_ci(ttft, 99, 1e3)
    tpot50, tpot99 = pct_ci(tpot, 50, 1e3), pct_ci(tpot, 99, 1e3)
    e2e50 = pct_ci(e2e, 50, 1.0)
    return RunSummary(
        requests=len(measured),
        output_tokens_mean=float(ok["output_tokens"].mean()) if len(ok) else float("nan"),
        unfinishable=int(measured["unfinishable"].sum()),
        makespan_s=makespan,
        throughput_tok_s=throughput,
        ttft_ms_p50=1e3 * _pct(ttft, 50),
        ttft_ms_p99=1e3 * _pct(ttft, 99),
        ttft_ms_mean=1e3 * float(np.mean(ttft)) if len(ttft) else float("nan"),
        tpot_ms_mean=1e3 * float(np.mean(tpot)) if len(tpot) else float("nan"),
        tpot_ms_p50=1e3 * _pct(tpot, 50),
        tpot_ms_p99=1e3 * _pct(tpot, 99),
        itl_ms_p50=1e3 * _weighted_pct(itl_vals, itl_w, 50),
        itl_ms_p99=1e3 * _weighted_pct(itl_vals, itl_w, 99),
        e2e_s_p50=_pct(e2e, 50),
        e2e_s_p90=_pct(e2e, 90),
        e2e_s_p99=_pct(e2e, 99),
        mean_accept_len=(
            tau
            if tau is not None
            else float(it["spec_tokens"].sum()) / spec_steps
            if spec_steps
            else 1.0
        ),
        request_speed_mean_tok_s=float(np.mean(speeds)) if len(speeds) else float("nan"),
        no_proposal_frac=(float(it["no_proposal_seqs"].sum()) / spec_steps if spec_steps else 0.0),
        mean_verify_tokens=(
            float(it["decode_tokens"].sum()) / decode_steps if decode_steps else 1.0
        ),
        draft_time_frac=float(it["draft_s"].sum()) / busy if busy else 0.0,
        verify_time_frac=float(it["verify_s"].sum()) / busy if busy else 0.0,
        overhead_time_frac=float(it["overhead_s"].sum()) / busy if busy else 0.0,
        preemptions=int(measured["preemptions"].sum()),
        kv_blocks_total=int(memory.num_blocks),
        kv_block_size=int(memory.block_size),
        kv_blocks_peak=int(peak_blocks),
        iterations=len(iterations),
        kv_blocks_in_use_end=int(blocks_in_use_end),
        throughput_tok_s_ci_low=thr_ci[0],
        throughput_tok_s_ci_high=thr_ci[1],
        ttft_ms_p50_ci_low=ttft50[0],
        ttft_ms_p50_ci_high=ttft50[1],
        ttft_ms_p99_ci_low=ttft99[0],
        ttft_ms_p99_ci_high=ttft99[1],
        tpot_ms_p50_ci_low=tpot50[0],
        tpot_ms_p50_ci_high=tpot50[1],
        tpot_ms_p99_ci_low=tpot99[0],
        tpot_ms_p99_ci_high=tpot99[1],
        e2e_s_p50_ci_low=e2e50[0],
        e2e_s_p50_ci_high=e2e50[1],
        simulated_requests=len(requests),
        warmup_requests=w.first,
        window_short=w.short,
        window_start_s=w.start_s,
        window_s=w.span_s,
        mean_waiting=float(level.mean()) if len(level) else float("nan"),
        # piling up: a rise of more than a twentieth of the window's arrivals
        stable=int(
            not len(level)
            or not (ci.rising(level, 0.05 * w.count) or _short_of_offered(ok, rates, w))
        ),
        section_e2e_s=section_e2e,
    )
