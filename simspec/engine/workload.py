"""Requests to serve: how they arrive and how long their prompts and outputs are."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simspec.catalog.arrival_traces import ArrivalTrace, transformed
from simspec.catalog.token_traces import is_token_trace_file, load_token_trace
from simspec.catalog.traces import first_method, load_trace, trace_methods
from simspec.config import MAX_REQUESTS, WorkloadConfig
from simspec.errors import InputError

MAX_RATE_CSV_BYTES = 16 * 1024 * 1024  # a day at one row per second is ~2 MB


@dataclass(frozen=True)
class RequestSpecs:
    """Lengths of every request, in arrival order; ``trace_index`` is -1 without a trace."""

    prompt_len: np.ndarray
    output_len: np.ndarray
    trace_index: np.ndarray

    def __len__(self) -> int:
        return len(self.prompt_len)


def arrival_trace(cfg: WorkloadConfig) -> ArrivalTrace:
    """The requests a trace replay serves: ``arrival_trace`` windowed, rescaled and tiled as
    the workload asks (``catalog.arrival_traces.transformed``, cached), at most
    :data:`MAX_REQUESTS` of them."""
    assert cfg.arrival_trace is not None, "a replay names its trace (WorkloadConfig checks it)"
    trace = transformed(
        cfg.arrival_trace,
        cfg.trace_start_s,
        cfg.trace_end_s,
        cfg.rate_scale,
        cfg.target_qps,
        cfg.tile_s,
    )
    if len(trace) > MAX_REQUESTS:
        raise InputError(
            "workload.arrival_trace",
            f"{trace.name} as windowed, rescaled and tiled holds {len(trace):,} requests; "
            f"a run serves at most {MAX_REQUESTS:,}: shorten tile_s or the window",
        )
    return trace


def request_count(cfg: WorkloadConfig) -> int:
    """Requests a run measures: a trace replay's every request, else ``cfg.num_requests``."""
    return len(arrival_trace(cfg)) if cfg.arrival == "replay" else cfg.num_requests


def generate_requests(
    cfg: WorkloadConfig, rng: np.random.Generator, n: int | None = None
) -> RequestSpecs:
    """Draw the lengths of ``n`` requests (default: the measured count); a trace is walked
    in shuffled passes so every record is used. A trace replay's requests are the trace's, in
    its order (the first ``n`` of them; ``trace_index`` -1: their acceptance records are
    drawn at random from the method's acceptance trace)."""
    if cfg.arrival == "replay":
        trace = arrival_trace(cfg)
        n = len(trace) if n is None else min(n, len(trace))
        return RequestSpecs(
            trace.prompt_len[:n].copy(), trace.output_len[:n].copy(), np.full(n, -1, np.int64)
        )
    n = cfg.num_requests if n is None else n
    if cfg.lengths_from is None:
        return RequestSpecs(
            cfg.prompt.sample(n, rng), cfg.output.sample(n, rng), np.full(n, -1, dtype=np.int64)
        )
    prompt, output = record_lengths(cfg)
    passes = -(-n // len(prompt))
    order = np.concatenate([rng.permutation(len(prompt)) for _ in range(passes)])[:n]
    return RequestSpecs(prompt[order].astype(np.int64), output[order].astype(np.int64), order)


def record_lengths(cfg: WorkloadConfig) -> tuple[np.ndarray, np.ndarray]:
    """The prompt and output lengths of every record ``cfg.lengths_from`` holds, in the
    trace's order: the finite set a run's requests are drawn from (each record equally
    often, :func:`generate_requests`), so their means are the workload's own."""
    assert cfg.lengths_from is not None
    if is_token_trace_file(cfg.lengths_from):  # a user's token trace: lengths from its streams
        tokens = load_token_trace(cfg.lengths_from, "workload.lengths_from")
        return tokens.prompt_len, tokens.output_len
    # lengths do not depend on the method key, so any key of the file will do
    method = cfg.lengths_from_method or first_method(cfg.lengths_from)
    if cfg.lengths_from_method is not None:
        known = trace_methods(cfg.lengths_from)
        if method not in known:  # by its own field, with the choices (QA: blamed lengths_from)
            raise InputError(
                "workload.lengths_from_method",
                f"{method!r} is not a method {cfg.lengths_from} records: {', '.join(known)}",
            )
    records = load_trace(cfg.lengths_from, method, "workload.lengths_from")
    output = records.lengths if cfg.lengths_from_method else records.output_len
    return records.prompt_len, output


# draws that stand for a drawn length distribution's mean (:func:`mean_output_len`): a
# lognormal of cv 2 then has its mean to ~1 %, and a fixed seed gives the same number every time
MEAN_DRAWS = 100_000


def mean_output_len(cfg: WorkloadConfig) -> float:
    """The workload's own mean output length, the same for every run of it: a trace's records
    (each drawn equally often) or a replay's requests exactly, a drawn distribution (floored
    and clipped as drawn) over :data:`MEAN_DRAWS` draws of a fixed seed. A study that prices
    the workload's tokens uses it, not one run's window (QA: two methods on the same GPUs
    were priced 0.0956 and 0.0960 $/M tokens by their windows' sampled means)."""
    if cfg.arrival == "replay":
        return float(arrival_trace(cfg).output_len.mean())
    if cfg.lengths_from is not None:
        return float(record_lengths(cfg)[1].mean())
    if cfg.output.dist == "fixed":
        return float(cfg.output.sample(1, np.random.default_rng(0))[0])
    return float(cfg.output.sample(MEAN_DRAWS, np.random.default_rng(0)).mean())


def stationary_cohort(
    specs: RequestSpecs,
    n: int,
    rng: np.random.Generator,
    step_tokens: np.ndarray | None = None,
) -> tuple[RequestSpecs, np.ndarray]:
    """``specs`` with its first ``n`` requests replaced by what a closed loop holds in its
    slots at a random moment of steady state, and the tokens each has already produced, so a
    closed-loop run starts there instead of relaxing to it (with ShareGPT's heavy-tailed
    outputs, relaxing from an empty engine takes ~100 s of simulated time, longer than a run of
    a few hundred requests lasts).

    By the inspection paradox of renewal theory, the request in a slot at a random moment is
    drawn with probability proportional to its lifetime, and has lived a uniform share of it.
    A request's lifetime is taken as its number of decode steps (the prefill is a small share;
    every sequence in a batch waits the same step time): its output length divided by its own
    tokens per step, ``step_tokens`` (known when it replays its own acceptance record or token
    stream; else the same for all). Each slot holds a request drawn from ``specs`` with that
    weight that has produced ``age ~ U{0, ..., output_len - 1}`` tokens (the discrete
    renewal residual; one of age 0 resumes decoding before its first output token is counted).
    These requests are warm-up, never measured."""
    n = min(n, len(specs))
    out = specs.output_len
    life = out / step_tokens if step_tokens is not None else out.astype(float)
    if n == 0 or life.sum() <= 0:
        return specs, np.zeros(0, dtype=np.int64)
    pick = rng.choice(len(specs), size=n, p=life / life.sum())
    age = np.floor(rng.random(n) * out[pick]).astype(np.int64)  # 0 .. output_len - 1
    prompt, output, index = specs.prompt_len.copy(), out.copy(), specs.trace_index.copy()
    prompt[:n], output[:n], index[:n] = specs.prompt_len[pick], out[pick], specs.trace_index[pick]
    return RequestSpecs(prompt, output, index), age


def arrival_gaps(cfg: WorkloadConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """Seconds between successive Poisson arrivals (a piecewise-constant rate when the config
    has a schedule: a gap that crosses into the next piece restarts there at its rate, which is
    exact because exponential gaps are memoryless). A trace replay's gaps are the trace's
    own (the first from time 0 to its first arrival); ``rng`` is not drawn from."""
    if cfg.arrival == "replay":
        return np.diff(arrival_trace(cfg).arrival_s[:n], prepend=0.0)
    if cfg.rate_schedule is None:
        gaps = rng.exponential(1.0 / cfg.rate, size=n)
        if cfg.arrivals_end_at_rate and n:  # vllm bench serve: the last sent at n / rate
            gaps *= (n / cfg.rate) / gaps.sum()
        return gaps
    starts = [t for t, _ in cfg.rate_schedule] + [np.inf]
    rates = [r for _, r in cfg.rate_schedule]
    times = np.empty(n)
    t, piece = 0.0, 0
    for i in range(n):
        while True:
            gap = rng.exponential(1.0 / rates[piece]) if rates[piece] > 0 else np.inf
            if t + gap < starts[piece + 1]:
                t += gap
                break
            t, piece = starts[piece + 1], piece + 1
        times[i] = t
    return np.diff(times, prepend=0.0)


def read_rate_csv(path: str) -> list[tuple[float, float]]:
    """A day's traffic shape from a CSV with columns ``time_s`` and ``rate`` (requests/s).
    Every refusal names the flag, the file and the line (QA: "rate_csv: time_s and rate must
    be numbers", no line; a last rate of 0 refused later as "workload: rates must be ...")."""
    import io

    import pandas as pd

    from simspec.catalog.tables import read_input, shown
    from simspec.config import MIN_RATE
    from simspec.errors import InputError

    flag = "--rate-csv"
    data = read_input(path, flag, MAX_RATE_CSV_BYTES)
    try:
        frame = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise InputError(flag, f"cannot read {shown(path)} as CSV ({exc})") from None
    if not {"time_s", "rate"} <= set(frame.columns):
        found = ", ".join(map(str, frame.columns[:8])) or "none"
        raise InputError(
            flag, f"{shown(path)} needs columns time_s and rate (comma-separated); found: {found}"
        )
    for name in ("time_s", "rate"):  # pandas reads a repeated column as NAME.1 (QA: unsaid)
        if f"{name}.1" in frame.columns:
            raise InputError(flag, f"{shown(path)}: column {name} appears twice: keep one")
    # each row's line in the file, past the blank lines the reader skips (QA: numbered as if
    # there were none)
    text = data.decode("utf-8", errors="replace").splitlines()
    filled = [n for n, line in enumerate(text, start=1) if line.strip()][1:]
    rows = []
    lines = []
    for k, (t, r) in enumerate(zip(frame.time_s, frame.rate, strict=True)):
        i = filled[k] if k < len(filled) else k + 2
        lines.append(i)
        try:
            rows.append((float(t), float(r)))
        except ValueError:
            raise InputError(
                flag, f"{shown(path)}: line {i} ({t!r}, {r!r}): time_s and rate must be numbers"
            ) from None
    if not rows:
        raise InputError(flag, f"{shown(path)}: has no rows (time_s, rate)")
    for j, (i, row) in enumerate(zip(lines, rows, strict=True)):
        if not all(np.isfinite(v) for v in row):
            raise InputError(
                flag,
                f"{shown(path)}: line {i} ({row[0]:g}, {row[1]:g}): every time_s and rate "
                "must be a finite number",
            )
        if j and row[0] <= rows[j - 1][0]:  # QA: unsorted read as "must start at 0"
            raise InputError(
                flag,
                f"{shown(path)}: line {i}: time_s {row[0]:g} after {rows[j - 1][0]:g}: the "
                "times must increase, one row per change of rate",
            )
        if not (row[1] == 0.0 or MIN_RATE <= row[1] <= 1e6):
            raise InputError(
                flag,
                f"{shown(path)}: line {i}: rate {row[1]:g} requests/s: rates are 0 (off) or "
                f"in [{MIN_RATE:g}, 1e6]",
            )
    if rows[0][0] != 0.0:
        first = rows[0][0]
        raise InputError(flag, f"{shown(path)}: the first time_s must be 0, got {first:g}")
    if rows[-1][1] == 0.0:
        raise InputError(
            flag,
            f"{shown(path)}: line {lines[-1]}: the last rate is 0: it holds to the end of "
            "the run, which then never ends; end on a rate > 0",
        )
    return rows
