"""``simspec recommend``'s grid: every setting (a draft length K, or a tree's node budget) and
plain decoding, run closed-loop at each of a grid of concurrencies, and the best setting at
each. The grid's defaults live here, once: the CLI's options, the explorer and the schedule
for a replayed trace all read them.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from simspec.config import (
    MAX_RUNS,
    MAX_TOTAL_REQUESTS,
    Deployment,
    MethodConfig,
    Scenario,
    WorkloadConfig,
)
from simspec.engine.metrics import RunSummary
from simspec.errors import InputError
from simspec.studies.runs import SERIAL, Runs
from simspec.studies.runs.keys import scenario_key
from simspec.studies.schedule import NO_SCHEDULE
from simspec.studies.to_precision import Budget, Pair, paired_interval, run_to_target

# concurrencies the grid runs at
DEFAULT_CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# what recommend chooses between: every K from 1 to K_MAX for a chain, these node budgets for
# a tree
K_MAX = 5
TREE_BUDGETS = (8, 16, 32, 64)


def recommend_grid(method: MethodConfig) -> tuple[str, list[int]]:
    """What recommend varies for ``method`` by default: K for a chain, the node budget (at
    least the tree's depth) for a tree."""
    if method.tree in (None, "chain"):
        return "k", list(range(1, K_MAX + 1))
    return "tree_nodes", [b for b in TREE_BUDGETS if b >= method.k] or [method.k]


def recommend(
    deploy: Deployment,
    method: MethodConfig,
    ks: list[int],
    concurrencies: tuple[int, ...] = DEFAULT_CONCURRENCIES,
    requests_per_run: int | None = None,
    knob: str = "k",
    *,
    runs: Runs = SERIAL,
    label: str = "concurrency {}",
    precision_target: float = 0.0,
    start: Mapping[int, int] | None = None,
    budget: Budget | None = None,
) -> pd.DataFrame:
    """Speedup of every value of ``knob`` (K, or ``tree_nodes`` for a tree's budget) at every
    concurrency (closed loop, the deployment's workload and seed), and the best value per
    concurrency in ``best_k`` (0 when nothing beats plain decoding), and the requests each run
    there measured (``requests``). Every concurrency's runs
    go to ``runs`` at once (a pool stays busy to the end, instead of waiting at each
    concurrency for its slowest run), lowest concurrency first (the longest runs: most
    iterations per request); one plain-decoding run per concurrency is the baseline of every
    setting there. ``runs`` is told of each concurrency done (``label``), in order.

    ``precision_target`` > 0 (and no ``requests_per_run``, which fixes the length): each
    setting's speedup is measured until its 95 % interval is within that share either side
    (:func:`~simspec.studies.to_precision.run_to_target`, as a sweep's cells), every setting
    of a concurrency at one length (the longest any of them needs, from ``start``'s length
    there or the floor) against one plain-decoding run of that length, so the best setting is
    picked among like runs; the deployment's stated requests and turnovers give way to it, and
    ``budget`` bounds the new requests; ``runs`` is then told of each setting's run (``label``
    and its K)."""
    if precision_target and not requests_per_run:
        return _to_precision(
            deploy,
            method,
            ks,
            concurrencies,
            knob,
            precision_target,
            runs=runs,
            label=label,
            start=start or {},
            budget=budget or Budget(),
        )
    rows = []
    common = deploy.model_dump(exclude={"workload"})
    # the whole grid is sized before the first run
    loads = [closed_load(deploy, c, requests_per_run) for c in concurrencies]
    total = (len(ks) + 1) * sum(wl.num_requests for wl in loads)
    if total > MAX_TOTAL_REQUESTS or (len(ks) + 1) * len(loads) > MAX_RUNS:
        raise InputError(
            "concurrencies",
            f"{total:,} requests over {(len(ks) + 1) * len(loads):,} runs; at most "
            f"{MAX_TOTAL_REQUESTS:,} requests and {MAX_RUNS:,} runs",
        )
    tried = [setting(method, knob, k) for k in ks]
    per_c = [
        [
            Scenario(**common, workload=wl),
            *(Scenario(**common, method=m, workload=wl) for m in tried),
        ]
        for wl in loads
    ]
    told = InOrder(runs, [label.format(c) for c in concurrencies], per_c)
    flat = runs.all([sc for scs in per_c for sc in scs], on_result=told)
    told.rest()
    width = len(ks) + 1
    for i, c in enumerate(concurrencies):
        base, *summaries = flat[i * width : (i + 1) * width]
        rows.append(
            _row(c, base, dict(zip(ks, summaries, strict=True))) | {"requests": base.requests}
        )
    return pd.DataFrame(rows)


def _row(c: int, base: RunSummary, by_k: dict[int, RunSummary]) -> dict[str, float]:
    """A concurrency's row: each setting's speedup over ``base``, the best setting (0: none
    beats plain decoding), its speedup and that speedup's 95 % interval (paired with the
    baseline's sections, as a sweep's ``speedup_ci_*``; plain decoding's is exactly 1)."""
    row: dict[str, float] = {"concurrency": c}
    for k, s in by_k.items():
        row[f"speedup_k{k}"] = s.throughput_tok_s / base.throughput_tok_s
    # the largest share of a run's measured requests left unserved (longer than the context
    # served or the KV cache): the speedups are over the rest (QA: recommend said nothing)
    row["unserved_share"] = max(
        s.unfinishable / s.requests if s.requests else 0.0 for s in (base, *by_k.values())
    )
    best_k, best = max(((k, row[f"speedup_k{k}"]) for k in by_k), key=lambda kv: kv[1])
    low, high = paired_interval(by_k[best_k], base) if best > 1.0 else (1.0, 1.0)
    return row | {
        "best_k": best_k if best > 1.0 else 0,
        "best_speedup": max(best, 1.0),
        "best_speedup_ci_low": low,
        "best_speedup_ci_high": high,
    }


def _to_precision(
    deploy: Deployment,
    method: MethodConfig,
    ks: list[int],
    concurrencies: tuple[int, ...],
    knob: str,
    target: float,
    *,
    runs: Runs,
    label: str,
    start: Mapping[int, int],
    budget: Budget,
) -> pd.DataFrame:
    """:func:`recommend` with each setting's speedup measured to ``target``: one pair per
    setting and concurrency (the setting's run, plain decoding's of the same length), the
    pairs of a concurrency run to one length."""
    common = deploy.model_dump(exclude={"workload"})
    plain = setting(method, knob, 0)
    pairs = []
    for c in concurrencies:
        wl = closed_load(deploy, c)
        base = Scenario(**common, method=plain, workload=wl).model_dump_json()
        for k in ks:
            own = Scenario(**common, method=setting(method, knob, k), workload=wl)
            pairs.append(Pair(f"{c}:{k}", c, own.model_dump_json(), base))
    runs.grow(len(concurrencies) * (len(ks) - 1))  # told per setting, not per concurrency
    reached = run_to_target(
        pairs,
        target,
        runs,
        lambda key: f"{label.format(key.split(':')[0])} {knob}={key.split(':')[1]}",
        budget,
        group=lambda p: p.concurrency,
        start={p.key: start.get(p.concurrency, 0) for p in pairs},
    )
    rows = []
    for c in concurrencies:
        # every setting of a concurrency ran at one length against one baseline run
        # (run_to_target's group)
        first = reached[f"{c}:{ks[0]}"]
        assert first.base is not None  # every pair has its baseline
        by_k = {k: reached[f"{c}:{k}"].run for k in ks}
        rows.append(_row(c, first.base, by_k) | {"requests": first.requests})
    return pd.DataFrame(rows)


class InOrder:
    """Tells ``runs`` each label once every run of its group (scenarios) and of every group
    before it has an outcome, so the labels come in order whichever worker finishes first; an
    ``on_result`` for :meth:`Runs.all`. Runs the cache or memo of ``runs`` already holds are
    done from the start (no outcome will come for them)."""

    def __init__(self, runs: Runs, labels: list[str], groups: list[list[Scenario]]) -> None:
        self.runs = runs
        self.labels = labels
        self.pending = [{scenario_key(sc.model_dump_json()) for sc in g} for g in groups]
        for left in self.pending:
            left -= {key for key in left if runs.holds(key)}
        self.told = 0
        self._tell()

    def __call__(self, key: str, _: object) -> None:
        for left in self.pending:
            left.discard(key)
        self._tell()

    def rest(self) -> None:
        """Every group done (:meth:`Runs.all` has returned)."""
        for left in self.pending:
            left.clear()
        self._tell()

    def _tell(self) -> None:
        while self.told < len(self.labels) and not self.pending[self.told]:
            self.runs.step(self.labels[self.told])
            self.told += 1


def closed_load(
    deploy: Deployment, concurrency: int, requests_per_run: int | None = None
) -> WorkloadConfig:
    """The closed loop recommend runs at ``concurrency``: the deployment's lengths, and
    ``requests_per_run`` measured requests (default: the deployment's, and the measurement
    rule's floor of ``turnovers`` x concurrency in any case). Validated, not model_copy'd: a
    concurrency of 1e20 is refused, not simulated."""
    return WorkloadConfig.model_validate(
        deploy.workload.model_dump()
        | {
            "arrival": "closed",
            "concurrency": concurrency,
            "requests": requests_per_run or deploy.workload.requests,
        }
    )


def setting(method: MethodConfig, knob: str, value: int) -> MethodConfig:
    """``method`` at one value of ``knob`` (K, or a tree's node budget), without a schedule of
    its own; 0 is speculation off, plain decoding."""
    if value == 0:
        return MethodConfig(name="autoregressive", k=0)
    return MethodConfig.model_validate(method.model_dump() | {knob: value, **NO_SCHEDULE})
