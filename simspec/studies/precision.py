"""Run length from the precision asked for (README "Measurement"): a closed-loop study measures
each cell at a few lengths until the 95 % interval of what it reports is within a relative
half-width, the precision target.

What a cell reports is a speedup: the method's run and its baseline's over the very same
requests (one workload, one seed), paired section by section. Both must therefore have the same
length, so they are extended together: a cell runs method and baseline at ``n`` measured
requests, and when the speedup's interval is wider than the target both run again, longer. The
lengths are a fixed lattice, ``floor(c) x 2^k`` up to ``cap(c)``, so that the methods of one
concurrency that need the same length share one baseline run (a run's key is its scenario).

Why reruns and not one run that goes on: a run's requests are not a prefix-stable sequence of
its length. Its lengths are drawn for the whole run at once (fixed or lognormal lengths draw
every prompt, then every output), and the closed loop's stationary start draws its cohort from
all of them, so a run of 2n requests is another sample than a run of n plus n more. Each length
is a complete seeded run, so which length a cell stops at depends only on its config and seed,
never on the executor or the pool size, and the table is the same bytes whichever ran it.

Cost: the next length is the lattice's first at or above the one the interval predicts
(``n x (half-width / target)^2``: a half-width falls as one over the root of the requests
measured), so a cell runs once or twice, at most ``1 + 2 + 4`` floors = 1.75 x its cap.

Stopping at the first length whose interval meets the target looks at the interval up to three
times; each look is a 95 % interval of its own run (no look reuses another's requests), and the
study reports the last one's, so the reported interval is one run's own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simspec.config import (
    DEFAULT_MEASURED,
    DEFAULT_TURNOVERS,
    MAX_REQUESTS,
    MAX_TOTAL_REQUESTS,
    Scenario,
)
from simspec.engine import intervals
from simspec.engine.metrics import RunSummary
from simspec.studies.runs import Runs

# The default: a speedup known to +-1 % (relative), the spread the measurement rule was built
# to resolve (tests/test_window.py: 256 to 12,288 requests and eight seeds agree within 1 %).
DEFAULT_PRECISION_TARGET = 0.01
# Tighter than +-0.1 % no default-length study gets: at batch 1 on ShareGPT a speedup is known
# to +-7 % from 256 requests (EAGLE-3; n-gram +-12 %), and the half-width falls as 1/sqrt(n), so
# +-0.1 % needs ~1.25 million requests, past MAX_REQUESTS; any target below runs every cell to
# its cap.
MIN_PRECISION_TARGET = 0.001
# Looser than +-50 % says nothing about a speedup (1.0x and 2.0x inside one interval).
MAX_PRECISION_TARGET = 0.5
# The floor: 16 turnovers of the batch (at least DEFAULT_MEASURED requests, as today's shortest
# run). Ten sections then hold 1.6 turnovers each; at batch 64 the paired half-width at 16 and
# at 64 turnovers is 1.48 % and 0.74 % (EAGLE-3, ShareGPT, seed 0), the 1/sqrt(n) of sections
# that are close to independent (ones that correlated would narrow the short run's interval
# more than the long one's); tests/test_precision_target.py checks that a cell stopped at the
# floor agrees with a 12,288-request run and with eight seeds within its interval.
FLOOR_TURNOVERS = 16
# The cap: four floors, which at batch >= 16 is the fixed 64 turnovers (DEFAULT_TURNOVERS) runs
# measured before there was a target, and at batch <= 4 is 1,024 requests (four times the fixed
# 256). Longer runs cost what the target cannot justify by default: at batch 1 a request costs
# ~20 ms of CPU (one engine step per token or speculative step), and n-gram's +-1 % there needs
# ~40,000 requests (13 CPU-minutes a run). Give --requests N for a longer fixed run.
CAP_FLOORS = DEFAULT_TURNOVERS // FLOOR_TURNOVERS


def check_target(v: float) -> float:
    """``v`` if it is a precision target: 0 (a fixed length) or in the range above."""
    low, high = MIN_PRECISION_TARGET, MAX_PRECISION_TARGET
    if not (v == 0 or low <= v <= high):
        raise ValueError(
            f"must be 0 (a fixed length) or in [{low:g}, {high:g}] (a relative half-width: "
            "0.01 is +-1 %)"
        )
    return v


def floor_requests(concurrency: int) -> int:
    """Measured requests of a cell's first run at ``concurrency``."""
    return min(max(DEFAULT_MEASURED, FLOOR_TURNOVERS * concurrency), MAX_REQUESTS)


def cap_requests(concurrency: int) -> int:
    """The most measured requests a cell's run reaches (``CAP_FLOORS`` floors, or MAX_REQUESTS)."""
    return min(CAP_FLOORS * floor_requests(concurrency), MAX_REQUESTS)


def next_length(n: int, half: float, target: float, concurrency: int) -> int:
    """The lattice length (a floor times a power of two, at most the cap) at or above the
    length whose interval the half-width ``half`` at ``n`` requests predicts to meet
    ``target``; at least one step longer. An undefined half-width (too few requests for
    sections) doubles."""
    want = n * (half / target) ** 2 if math.isfinite(half) else 2 * n
    cap = cap_requests(concurrency)
    length = 2 * n
    while length < want and length < cap:
        length *= 2
    return min(length, cap)


def relative_half_width(run: RunSummary, base: RunSummary | None) -> float:
    """Half the 95 % interval of what a cell reports, over its value: ``run``'s speedup over
    ``base`` (paired by sections, as the sweep's ``speedup_ci_*``), or with no ``base``, the
    run's own throughput (a study of the baseline alone). NaN where it is undefined."""
    if base is None:
        value = run.throughput_tok_s
        low, high = run.throughput_tok_s_ci_low, run.throughput_tok_s_ci_high
    else:
        value = run.throughput_tok_s / base.throughput_tok_s
        low, high = intervals.ratio_of_sums_interval(
            np.array(base.section_e2e_s), np.array(run.section_e2e_s)
        )
    half = (high - low) / 2 / value if value else math.nan
    return half if math.isfinite(half) else math.nan


def with_length(scenario_json: str, n: int) -> str:
    """The scenario measuring exactly ``n`` requests (no turnover rule on top)."""
    sc = Scenario.model_validate_json(scenario_json)
    wl = sc.workload.model_copy(update={"requests": n, "turnovers": 0})
    return sc.model_copy(update={"workload": wl}).model_dump_json()


@dataclass(frozen=True)
class Pair:
    """What one cell reports: its method's scenario and its baseline's (None: the cell is the
    baseline itself, and reports its throughput), at any length."""

    key: str
    concurrency: int
    run: str
    base: str | None


@dataclass(frozen=True)
class Reached:
    """A cell's final runs: the method's, its baseline's (same length), the length and the
    interval's relative half-width there."""

    run: RunSummary
    base: RunSummary | None
    requests: int
    half: float


def run_to_target(
    pairs: list[Pair],
    target: float,
    runs: Runs,
    label: Callable[[str], str] = str,
) -> dict[str, Reached]:
    """Run every pair until its interval is within ``target`` or its run reached the cap.

    Each round runs what the pairs still short of the target need, longest first, through
    ``runs`` (each distinct scenario once, the cache's not at all); ``label(pair key)`` names a
    pair's runs in the progress. A round that would take the command past MAX_TOTAL_REQUESTS
    new requests does not start (its pairs keep the interval they reached, as at the cap)."""
    length = {p.key: floor_requests(p.concurrency) for p in pairs}
    reached: dict[str, Reached] = {}
    spent = 0
    active = pairs
    first = True
    while active:
        texts: dict[str, int] = {}  # scenario -> measured requests
        for p in active:
            n = length[p.key]
            texts[with_length(p.run, n)] = n
            if p.base is not None:
                texts[with_length(p.base, n)] = n
        more = sum(texts.values())
        if not first and spent + more > MAX_TOTAL_REQUESTS:
            break
        if not first:
            runs.grow(len(active))
        spent += more
        order = sorted(texts, key=lambda t: -texts[t])  # longest first: the workers end together
        summaries = dict(zip(order, runs.all(order), strict=True))
        nxt = []
        for p in active:
            n = length[p.key]
            run = summaries[with_length(p.run, n)]
            base = summaries[with_length(p.base, n)] if p.base is not None else None
            half = relative_half_width(run, base)
            reached[p.key] = Reached(run, base, n, half)
            runs.step(f"{label(p.key)} n={n}")
            if half <= target or n >= cap_requests(p.concurrency):
                continue
            length[p.key] = next_length(n, half, target, p.concurrency)
            nxt.append(p)
        active = nxt
        first = False
    return reached
