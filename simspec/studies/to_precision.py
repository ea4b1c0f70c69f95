"""Run lengths from the precision asked for: a closed-loop cell measured until the 95 %
interval of what it reports is within a target (``simspec sweep``, ``simspec recommend``).

A cell reports a speedup: its method's run and its baseline's over the very same requests (one
workload, one seed), paired section by section, so both have one length and are extended
together: when the interval is wider than the target, both run again, longer, at a length of
a fixed lattice (simspec.engine.window.next_length), so that the methods of one concurrency
that need the same length share one baseline run (a run's key is its scenario).

Reruns, not one run that goes on: a run's requests are not a prefix-stable sequence of its
length (fixed or lognormal lengths draw every prompt, then every output; the stationary
start draws its cohort from all of them), so a run of 2n requests is another sample than n
plus n more. Each length is a complete seeded run: which length a cell stops at depends only
on its config and seed, never on the executor or the pool size, and the table is the same
bytes whichever ran it. The reported interval is the last run's own (no run reuses another's
requests).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

import numpy as np

from simspec.config import MAX_TOTAL_REQUESTS, Scenario
from simspec.engine import intervals, window
from simspec.engine.metrics import RunSummary
from simspec.studies.runs import Runs
from simspec.studies.runs.keys import scenario_key


def paired_interval(run: RunSummary, base: RunSummary) -> tuple[float, float]:
    """95 % interval of ``run``'s speedup over ``base``. Both closed loops at one concurrency
    measure the same requests (one seed, one workload), so their per-section latencies pair
    (Little's law: the speedup is the ratio of summed latencies); the baseline against itself
    is exactly 1."""
    if run is base:
        return 1.0, 1.0
    return intervals.ratio_of_sums_interval(
        np.array(base.section_e2e_s), np.array(run.section_e2e_s)
    )


def paired_half_width(run: RunSummary, base: RunSummary | None) -> float:
    """Half the 95 % interval of what a cell reports, over its value: ``run``'s speedup over
    ``base`` (:func:`paired_interval`, the sweep's ``speedup_ci_*``), or with no ``base``, the
    run's own throughput (a study of the baseline alone). NaN where it is undefined."""
    if base is None:
        value = run.throughput_tok_s
        low, high = run.throughput_tok_s_ci_low, run.throughput_tok_s_ci_high
    else:
        value = run.throughput_tok_s / base.throughput_tok_s
        low, high = paired_interval(run, base)
    return intervals.relative_half_width(low, high, value)


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


@dataclass
class Budget:
    """New requests a command may still simulate across its calls of :func:`run_to_target`
    (MAX_TOTAL_REQUESTS for the whole command, not per call: recommend makes one for its grid,
    one per bisection round and one for its edges)."""

    left: int = MAX_TOTAL_REQUESTS


def run_to_target(
    pairs: list[Pair],
    target: float,
    runs: Runs,
    label: Callable[[str], str] = str,
    budget: int | Budget = MAX_TOTAL_REQUESTS,
    *,
    group: Callable[[Pair], Hashable] | None = None,
    start: Mapping[str, int] | None = None,
) -> dict[str, Reached]:
    """Run every pair until its interval is within ``target`` or its run reached the cap.

    Each round runs what the pairs still short of the target need, longest first, through
    ``runs`` (each distinct scenario once, the cache's not at all); ``label(pair key)`` names a
    pair's runs in the progress. A round that would take the command past MAX_TOTAL_REQUESTS
    new requests (``budget``: a number for this call, or a :class:`Budget` several calls
    share) does not start (its pairs keep the interval they reached, as at the cap).

    ``group``: pairs of one group (say, every setting at one concurrency) run at one length:
    while one of them is short of the target, all run again at the longest length any of them
    asks for, so what they report (speedups over one shared baseline run) compares like with
    like. ``start``: a pair's first length, at least its floor (a length of the lattice)."""
    budget = budget if isinstance(budget, Budget) else Budget(budget)
    start = start or {}
    length = {p.key: max(window.floor_requests(p.concurrency), start.get(p.key, 0)) for p in pairs}
    key_of = group or (lambda p: p.key)
    reached: dict[str, Reached] = {}
    active = pairs
    first = True
    while active:
        # each pair's scenarios at this round's length (its run's, then its baseline's), once
        sized = {
            p.key: [with_length(t, length[p.key]) for t in (p.run, p.base) if t is not None]
            for p in active
        }
        texts: dict[str, tuple[int, int]] = {}  # scenario -> (concurrency, measured requests)
        for p in active:
            for text in sized[p.key]:
                texts[text] = (p.concurrency, length[p.key])
        more = sum(n for _, n in texts.values())
        if not first and more > budget.left:
            break
        if not first:
            runs.grow(len(active))
        budget.left -= more
        # the longest runs first, so the pool's workers finish together: low concurrency (most
        # iterations per request), then the most requests
        order = sorted(texts, key=lambda t: (texts[t][0], -texts[t][1]))
        told = _Told(runs, sized, {p.key: f"{label(p.key)} n={length[p.key]}" for p in active})
        summaries = dict(zip(order, runs.all(order, on_result=told), strict=True))
        told.rest()
        wanted: dict[Hashable, int] = {}  # each group's next length, where one asks for more
        for p in active:
            n = length[p.key]
            run, *rest = (summaries[text] for text in sized[p.key])
            base = rest[0] if rest else None
            half = paired_half_width(run, base)
            reached[p.key] = Reached(run, base, n, half)
            if half <= target or n >= window.cap_requests(p.concurrency):
                continue
            g = key_of(p)
            wanted[g] = max(wanted.get(g, 0), window.next_length(n, half, target, p.concurrency))
        active = [p for p in active if key_of(p) in wanted]
        for p in active:
            length[p.key] = wanted[key_of(p)]
        first = False
    return reached


class _Told:
    """Tells ``runs`` of each pair of a round once both its runs are in (an ``on_result`` for
    :meth:`Runs.all`, which sees fresh runs as they finish), so a progress bar moves through a
    round instead of jumping at its end; :meth:`rest` tells the pairs whose runs were at hand
    (cache or memo). One step per pair per round, whatever the order runs finish in."""

    def __init__(self, runs: Runs, sized: dict[str, list[str]], names: dict[str, str]) -> None:
        """``sized``: each pair's scenarios this round; ``names``: each pair's label."""
        self.runs = runs
        self.names = names
        self.told: set[str] = set()
        self.pending = {
            pair: {key for key in map(scenario_key, texts) if not runs.holds(key)}
            for pair, texts in sized.items()
        }

    def __call__(self, key: str, _: object) -> None:
        for pair, left in self.pending.items():
            if key in left:
                left.discard(key)
                if not left:
                    self._tell(pair)

    def rest(self) -> None:
        """Every run of the round is in: tell the pairs not told yet, in order."""
        for pair in self.pending:
            self._tell(pair)

    def _tell(self, pair: str) -> None:
        if pair not in self.told:
            self.told.add(pair)
            self.runs.step(self.names[pair])
