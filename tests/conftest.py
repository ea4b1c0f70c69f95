"""Shared fixtures: paths to the read-only ../shared data and small scenarios."""

from __future__ import annotations

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
