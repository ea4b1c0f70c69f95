"""Shared fixtures: paths to the read-only ../shared data and small scenarios."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="session")
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is not present")
    return SHARED


class Told:
    """What a study told its progress (:class:`simspec.studies.runs.Progress`): each step's
    label, how many steps it added, and each (done, total)."""

    def __init__(self) -> None:
        self.labels: list[str] = []
        self.added = 0
        self.points: list[tuple[int, int]] = []

    def step(self, label: str) -> None:
        self.labels.append(label)

    def grow(self, more: int) -> None:
        self.added += more

    def at(self, done: int, total: int) -> None:
        self.points.append((done, total))


def swept(
    cfg: Any,
    journal: Path | None = None,
    resume: bool = False,
    warn: Callable[[str], None] | None = None,
    **settings: Any,
) -> pd.DataFrame:
    """``run_sweep(cfg)`` on ``Runs(**settings)``, its finished runs streamed to ``journal``
    (``resume``: starting from those it holds), as ``simspec sweep --out`` runs it."""
    from simspec.studies.runs import Runs
    from simspec.studies.runs.journal import RunCache
    from simspec.studies.sweep import run_sweep

    with RunCache(journal, resume, warn) as cache:
        return run_sweep(cfg, runs=Runs(**settings, cache=cache))


@pytest.fixture
def short_plan_probes(monkeypatch):
    """``simspec plan``'s probes at 100 requests instead of its floor of 1,000 (what a p99
    needs): for tests of which methods and settings a plan runs, not of the rate it finds."""
    from simspec.studies import capacity

    monkeypatch.setattr(capacity, "plan", functools.partial(capacity.plan, min_requests=100))


def slow_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The tests marked slow first, each part in the order collected. pytest-xdist hands each
    worker the next test (or group) as it runs low, in this order: the long tests start while
    there is other work to run beside them, and the short ones fill the end, where a long test
    left for last kept one worker busy while the other had nothing to do (test_window.py,
    collected last, holds one of the suite's longest). Within each part a module's tests stay
    together, so a module-scoped fixture is still built once per part on a worker."""
    return sorted(items, key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Keep ``--dist loadgroup`` working on pytest 9: pytest-xdist (3.8) names each item of an
    ``xdist_group`` by setting ``item._nodeid`` to ``nodeid@group`` on the worker, which
    pytest 9 no longer reads (its ids live in ``item._id``), so every group was scattered over
    the workers and a run shared by a group ran once per worker. Older pytest reads
    ``_nodeid`` itself and has no ``coerce_node_id``: nothing to do there."""
    items[:] = slow_first(items)
    try:
        from _pytest.nodes import coerce_node_id
    except ImportError:
        return
    for item in items:
        grouped = getattr(item, "_nodeid", None)
        if grouped and grouped != item.nodeid and "@" in grouped:
            item._id = coerce_node_id(grouped)


# a small Llama-shaped config.json, as tests write it to a file and read it back
TINY_CONFIG = {
    "model_type": "llama",
    "hidden_size": 512,
    "intermediate_size": 1024,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
}
