"""The bands of a speculation schedule: where each draft length (or tree budget) takes over.

``recommend``'s grid (:func:`simspec.studies.schedule.grid.recommend`) says which K is best
at each grid concurrency. Between two grid points whose best K differ, the two settings'
throughput curves cross somewhere; holding the lower point's K up to the next grid point (as a
grid alone must) runs it past that crossing, where it already loses. :func:`find_crossovers`
finds the crossing by bisection on the integer concurrency, each probe the two settings run
closed-loop under the grid's own workload rule (:func:`~.grid.closed_load`) and seed, so a
change over a gap of g concurrencies costs at most ceil(log2 g) probes of two runs, plus every
setting at the two concurrencies either side of the edge (:func:`edge_rows`), which say how far
each band's K is from the best there (:func:`band_table`).

The crossing found is the one bisection finds: where the curves cross more than once between
two grid points, one of the crossings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from simspec.config import MAX_RUNS, MAX_TOTAL_REQUESTS, Deployment, MethodConfig, Scenario
from simspec.errors import InputError
from simspec.studies.runs import SERIAL, Runs
from simspec.studies.schedule.grid import closed_load, recommend, setting
from simspec.studies.to_precision import Budget, Pair, run_to_target

BAND_COLUMNS = ["start_bs", "end_bs", "k", "loss_at_start_pct", "loss_at_end_pct"]


@dataclass(frozen=True)
class Crossover:
    """Where ``above`` (best at the upper grid point ``between[1]``) takes over from ``below``
    (best at ``between[0]``): ``below`` is at least as fast at ``last``, ``above`` faster at
    ``first`` = ``last`` + 1. A setting is a K (or a tree budget); 0 is plain decoding."""

    below: int
    above: int
    last: int
    first: int
    between: tuple[int, int]
    # measured requests of the probe at each concurrency it ran (under a precision target: the
    # length its pair reached; empty at a fixed length), where the edges start theirs
    lengths: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Recommended:
    """What ``recommend`` answers: the speedup table (grid points and crossover edges, in
    ``point``), the crossovers, and the bands with their losses at the edges."""

    table: pd.DataFrame
    crossovers: list[Crossover]
    bands: list[list[int]]
    band_table: pd.DataFrame


def probes(gap: int) -> int:
    """Bisection probes between two grid points ``gap`` apart: ceil(log2 gap), 0 for
    neighbours (the crossing is the upper point itself)."""
    return math.ceil(math.log2(gap)) if gap > 1 else 0


def check_size(
    deploy: Deployment, grid: tuple[int, ...], settings: int, requests_per_run: int | None
) -> None:
    """The grid and, at worst (a change between every two grid points), its crossovers, within
    the bounds of one command: each change costs its probes' two runs and ``settings`` (every
    K and plain decoding) at each of its two edges."""
    size = {c: closed_load(deploy, c, requests_per_run).num_requests for c in grid}
    runs = settings * len(grid)
    requests = settings * sum(size.values())
    for low, high in zip(grid, grid[1:], strict=False):
        extra = 2 * probes(high - low) + 2 * settings
        runs += extra
        requests += extra * size[high]
    if requests > MAX_TOTAL_REQUESTS or runs > MAX_RUNS:
        raise InputError(
            "concurrencies",
            f"up to {requests:,} requests over {runs:,} runs with the crossovers; at most "
            f"{MAX_TOTAL_REQUESTS:,} requests and {MAX_RUNS:,} runs",
        )


def changes(table: pd.DataFrame) -> list[tuple[int, int, int, int]]:
    """(lower grid point, upper grid point, best setting at each) wherever the best setting
    changes between neighbouring grid points of ``table``."""
    cs = [int(c) for c in table.concurrency]
    best = [int(k) for k in table.best_k]
    pairs = zip(cs, cs[1:], best, best[1:], strict=False)
    return [(c0, c1, k0, k1) for c0, c1, k0, k1 in pairs if k0 != k1]


def find_crossovers(
    deploy: Deployment,
    method: MethodConfig,
    table: pd.DataFrame,
    knob: str = "k",
    requests_per_run: int | None = None,
    *,
    runs: Runs = SERIAL,
    precision_target: float = 0.0,
    budget: Budget | None = None,
) -> list[Crossover]:
    """Between every two neighbouring grid points of ``table`` (the grid's
    :func:`~simspec.studies.schedule.grid.recommend` table) whose best setting differs, the
    concurrency where the upper one's setting takes over: bisection on the integer
    concurrency, each probe both settings at the midpoint (same workload rule and seed as the
    grid), each told to ``runs``. The bisections step together: each round's probes, one per
    unfinished crossover, go to ``runs`` at once (a pool runs them side by side); a probe's
    outcome depends on its scenario alone, so each bisection takes the path it takes alone.
    With ``precision_target`` > 0 a probe runs the two settings until the 95 % interval of
    their throughput ratio is within it (:func:`~simspec.studies.to_precision.run_to_target`,
    the lower setting as the pair's baseline)."""
    common = deploy.model_dump(exclude={"workload"})
    found = changes(table)
    brackets = [[c0, c1] for c0, c1, _, _ in found]  # [last, first] of each
    lengths: list[dict[int, int]] = [{} for _ in found]  # each probe's length, by concurrency
    target = 0.0 if requests_per_run else precision_target
    budget = budget or Budget()

    def named(i: int) -> str:
        _, _, below, above = found[i]
        return f"crossover {knob}={below}->{above}: concurrency {mids[i]}"

    while todo := [i for i, (last, first) in enumerate(brackets) if first - last > 1]:
        mids = {i: (brackets[i][0] + brackets[i][1]) // 2 for i in todo}
        pairs = []
        for i in todo:
            wl = closed_load(deploy, mids[i], requests_per_run)
            pairs += [
                Scenario(**common, method=setting(method, knob, found[i][b]), workload=wl)
                for b in (2, 3)
            ]
        if target:
            probe = [
                Pair(
                    str(i),
                    mids[i],
                    pairs[2 * n + 1].model_dump_json(),
                    pairs[2 * n].model_dump_json(),
                )
                for n, i in enumerate(todo)
            ]
            reached = run_to_target(probe, target, runs, lambda key: named(int(key)), budget)
            outcomes = [r for i in todo for r in (reached[str(i)].base, reached[str(i)].run)]
            for i in todo:
                lengths[i][mids[i]] = reached[str(i)].requests
        else:
            outcomes = runs.all(pairs)
        for n, i in enumerate(todo):
            slow, fast = outcomes[2 * n], outcomes[2 * n + 1]
            if fast.throughput_tok_s > slow.throughput_tok_s:
                brackets[i][1] = mids[i]
            else:
                brackets[i][0] = mids[i]
            if not target:  # run_to_target told each probe itself
                runs.step(named(i))
    return [
        Crossover(below, above, last, first, (c0, c1), tuple(sorted(reached_at.items())))
        for (c0, c1, below, above), (last, first), reached_at in zip(
            found, brackets, lengths, strict=True
        )
    ]


def edge_rows(
    deploy: Deployment,
    method: MethodConfig,
    ks: list[int],
    crossovers: list[Crossover],
    grid: tuple[int, ...],
    knob: str = "k",
    requests_per_run: int | None = None,
    *,
    runs: Runs = SERIAL,
    precision_target: float = 0.0,
    budget: Budget | None = None,
) -> pd.DataFrame:
    """Every setting at both sides of each crossover that is not a grid point, as rows of
    :func:`~simspec.studies.schedule.grid.recommend` (the runs a probe made there come from
    the cache of ``runs``; the edges' other runs go to ``runs`` at once), each edge told to
    ``runs``."""
    edges = tuple(sorted({c for x in crossovers for c in (x.last, x.first)} - set(grid)))
    if not edges:
        return pd.DataFrame()
    label = "crossover edge: concurrency {}"
    # under a precision target every setting at an edge starts at the length its probe
    # reached there, so the edge's row ranks the two settings as the bisection did (QA: a probe
    # at 2,688 requests put K=2 ahead, the edge's K=1 pair at 672 put it behind)
    start = {c: n for x in crossovers for c, n in x.lengths}
    return recommend(
        deploy,
        method,
        ks,
        edges,
        requests_per_run,
        knob,
        runs=runs,
        label=label,
        precision_target=precision_target,
        start=start,
        budget=budget,
    )


def schedule(
    table: pd.DataFrame, max_batch: int, crossovers: list[Crossover] | tuple = ()
) -> list[list[int]]:
    """Bands of running requests with their setting (vLLM's ``[[start_bs, end_bs, K], ...]``):
    each grid point's best setting holds from where it takes over from the previous one (its
    crossover, else the grid point itself) up to where the next takes over; the first band
    starts at 1, the last runs to ``max_batch``; equal neighbours merge. Only the grid rows of
    ``table`` (``point`` = grid, where it has that column) make bands."""
    grid = table[table.point == "grid"] if "point" in table.columns else table
    takes_over = {x.between[1]: x.first for x in crossovers}
    bands: list[list[int]] = []
    for c, k in zip(grid.concurrency.astype(int), grid.best_k.astype(int), strict=True):
        if bands and bands[-1][2] == k:
            continue
        start = takes_over.get(c, c) if bands else 1
        if bands:
            bands[-1][1] = start - 1
        bands.append([start, max_batch, k])
    return bands


def loss_pct(row: pd.Series, k: int) -> float:
    """How far setting ``k`` is from the fastest one in ``row`` (one concurrency of the table):
    100 x (1 - its speedup / the best speedup there), plain decoding's speedup being 1."""
    speedups = row[[col for col in row.index if str(col).startswith("speedup_k")]]
    best = max(1.0, float(speedups.max()))
    own = 1.0 if k == 0 else float(row[f"speedup_k{k}"])
    return 100.0 * (1.0 - own / best)


def band_of(bands: list[list[int]], concurrency: int) -> int:
    """The setting the bands run at ``concurrency`` (past the last band: its setting)."""
    return next((k for start, end, k in bands if start <= concurrency <= end), bands[-1][2])


def with_schedule(table: pd.DataFrame, bands: list[list[int]]) -> pd.DataFrame:
    """``table`` with the setting the schedule runs at each concurrency (``scheduled_k``) and
    how far it is from the fastest there (``loss_pct``)."""
    scheduled = [band_of(bands, int(c)) for c in table.concurrency]
    losses = [loss_pct(row, k) for (_, row), k in zip(table.iterrows(), scheduled, strict=True)]
    return table.assign(scheduled_k=scheduled, loss_pct=losses)


# a crossover edge where a third setting beats the band's by more than a run's interval
# (README Measurement: about ±2 %) is one the bisection between the two grid winners missed
OUTSIDER_LOSS_PCT = 2.0


def outsiders(table: pd.DataFrame, bands: list[list[int]]) -> list[tuple[int, int, int, float]]:
    """The crossover edges of a :class:`Recommended` table where the fastest setting has no
    band in ``bands`` and the scheduled one loses more than OUTSIDER_LOSS_PCT to it, as
    (concurrency, fastest setting, scheduled setting, loss %): the bisection compares the two
    grid points' winners only, so a setting that wins between them has no band (QA: eagle2's
    budgets 64 then 8, where 32 was fastest at both edges, 7-8 % ahead)."""
    if "point" not in table.columns:
        return []
    best = next(c for c in table.columns if str(c).startswith("best_"))
    scheduled = next(c for c in table.columns if str(c).startswith("scheduled_"))
    banded = {setting for _, _, setting in bands}
    rows = table[
        (table.point == "crossover")
        & ~table[best].isin(banded)
        & (table.loss_pct > OUTSIDER_LOSS_PCT)
    ]
    return [
        (int(r.concurrency), int(r[best]), int(r[scheduled]), float(r.loss_pct))
        for _, r in rows.iterrows()
    ]


def band_table(table: pd.DataFrame, bands: list[list[int]]) -> pd.DataFrame:
    """Each band with its setting's :func:`loss_pct` at its first and last concurrency; blank
    where nothing ran there (the first band's start below the grid, the last band's end above
    it)."""
    rows = table.drop_duplicates("concurrency").set_index("concurrency")

    def loss(c: int, k: int) -> float:
        return loss_pct(rows.loc[c], k) if c in rows.index else float("nan")

    return pd.DataFrame(
        [[s, e, k, loss(s, k), loss(e, k)] for s, e, k in bands], columns=BAND_COLUMNS
    )


def recommend_bands(
    deploy: Deployment,
    method: MethodConfig,
    ks: list[int],
    grid: tuple[int, ...],
    max_batch: int,
    knob: str = "k",
    requests_per_run: int | None = None,
    *,
    runs: Runs = SERIAL,
    precision_target: float = 0.0,
) -> Recommended:
    """The grid, its crossovers and the bands between them. ``runs`` is told of each grid
    point, probe and edge done, and, once the grid has run, how many probes and edges may
    follow (at most: a bisection can end a step early); its cache (a fresh one by default)
    lets the edges reuse the probes' runs. ``precision_target`` > 0 (with no
    ``requests_per_run``): every speedup and every probe's comparison measured until its 95 %
    interval is within that share either side, from the floor (``window.floor_requests``)
    up to the cap (``window.cap_requests``; the fixed length otherwise: ``deploy``'s requests
    and turnovers);
    ``runs`` is then told of each setting's run rather than of each concurrency."""
    check_size(deploy, grid, len(ks) + 1, requests_per_run)
    target = 0.0 if requests_per_run else precision_target
    budget = Budget()  # MAX_TOTAL_REQUESTS over the grid, every probe and the edges
    runs = runs.cached()
    table = recommend(
        deploy,
        method,
        ks,
        grid,
        requests_per_run,
        knob,
        runs=runs,
        precision_target=target,
        budget=budget,
    )
    runs.grow(sum(probes(c1 - c0) + 2 for c0, c1, _, _ in changes(table)))
    crossovers = find_crossovers(
        deploy,
        method,
        table,
        knob,
        requests_per_run,
        runs=runs,
        precision_target=target,
        budget=budget,
    )
    edges = edge_rows(
        deploy,
        method,
        ks,
        crossovers,
        grid,
        knob,
        requests_per_run,
        runs=runs,
        precision_target=target,
        budget=budget,
    )
    full = table.assign(point="grid")
    if len(edges):
        full = pd.concat([full, edges.assign(point="crossover")], ignore_index=True)
        full = full.sort_values("concurrency", kind="stable", ignore_index=True)
    bands = schedule(full, max_batch, crossovers)
    shown, edges_shown = with_schedule(full, bands), band_table(full, bands)
    if knob != "k":  # a tree's setting is its node budget, named so (QA: speedup_k8, best_k)
        shown, edges_shown = named_for(shown, knob), named_for(edges_shown, knob)
    return Recommended(shown, crossovers, bands, edges_shown)


def named_for(table: pd.DataFrame, knob: str) -> pd.DataFrame:
    """``table``'s K columns named for the setting ``knob`` (``tree_nodes``: speedup_nodes8,
    best_nodes, scheduled_nodes, and the bands' tree_nodes)."""
    short = "nodes" if knob == "tree_nodes" else knob

    def renamed(col: object) -> object:
        text = str(col)
        if text.startswith("speedup_k"):
            return f"speedup_{short}{text.removeprefix('speedup_k')}"
        return {"best_k": f"best_{short}", "scheduled_k": f"scheduled_{short}", "k": knob}.get(
            text, col
        )

    return table.rename(columns=renamed)


def resident_off(
    deploy: Deployment,
    method: MethodConfig,
    bands: list[list[int]],
    concurrencies: list[int],
    *,
    runs: Runs = SERIAL,
) -> list[tuple[int, float]]:
    """(concurrency, speedup over plain decoding) of the schedule ``bands`` as exported, at
    each of ``concurrencies`` that a K=0 band covers, for a method whose draft stays loaded
    there (its weights or KV: a draft model, an EAGLE head, MTP modules); [] for one that
    holds nothing (n-gram) or a schedule with no K=0 band. The grid prices K=0 as plain
    decoding without the draft (speedup 1), but vLLM keeps the drafter loaded under a K=0
    band (QA: a draft model's K=0 band at 256 ran 0.945x, its KV pool a quarter smaller)."""
    from simspec.engine.build import setup_replica

    off = [c for c in concurrencies if band_of(bands, c) == 0]
    top = max(k for _, _, k in bands)
    if not off or top == 0:
        return []
    scheduled = MethodConfig.model_validate(
        method.model_dump() | {"k": top, "k_schedule": [tuple(b) for b in bands]}
    )
    common = deploy.model_dump(exclude={"workload", "method"})
    spec = setup_replica(Scenario(**common, method=scheduled)).speculator
    if spec.extra_weight_bytes() <= 0 and spec.extra_kv_bytes_per_token() <= 0:
        return []
    scenarios = []
    for c in off:
        wl = closed_load(deploy, c)
        scenarios += [
            Scenario(**common, workload=wl),
            Scenario(**common, method=scheduled, workload=wl),
        ]
    outcomes = runs.all(scenarios)
    return [
        (c, outcomes[2 * i + 1].throughput_tok_s / outcomes[2 * i].throughput_tok_s)
        for i, c in enumerate(off)
    ]
