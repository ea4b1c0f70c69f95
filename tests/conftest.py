"""Shared fixtures: paths to the read-only ../shared data and small scenarios."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="session")
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared is not present")
    return SHARED


@pytest.fixture
def short_plan_probes(monkeypatch):
    """``simspec plan``'s probes at 100 requests instead of its floor of 1,000 (what a p99
    needs): for tests of which methods and settings a plan runs, not of the rate it finds."""
    from simspec.studies import planning

    monkeypatch.setattr(planning, "plan", functools.partial(planning.plan, min_requests=100))
