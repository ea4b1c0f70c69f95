"""Golden numbers: every case of ``tests/golden/cases.py`` against the values recorded in
``tests/golden/*.json``, within ``cases.RTOL`` (relative). A failure lists each metric that
moved. Re-record on purpose with ``python tools/golden.py --update`` (it prints the diff)."""

from __future__ import annotations

import pytest

from tests.golden import cases

# over a second or so each (the rest, under a second, stay in the edit loop: -m "not slow")
SLOW = {
    "cli_sweep_default", "study_plan", "study_recommend", "study_fleet",
    "ar_closed", "eagle3_chain", "poisson", "hf_pp2_preemption", "mixtral_tp2_poisson",
    "medusa1_alpha_profile", "deepseek_v3_mla_mtp",
}  # fmt: skip
# checked one series of the packaged table at a time (test_golden_validate_series)
BY_SERIES = "cli_validate"


def _param(name: str):
    marks = [pytest.mark.golden] + ([pytest.mark.slow] if name in SLOW else [])
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_param(n) for n in cases.names() if n != BY_SERIES])
def test_golden(name: str):
    old = cases.recorded(name)
    assert old is not None, f"no recorded values for {name}: run python tools/golden.py --update"
    moved = cases.compare(old, cases.compute(name))
    assert not moved, f"{len(moved)} golden metric(s) of {name} moved:\n" + "\n".join(moved[:40])


@pytest.mark.golden
@pytest.mark.slow
@pytest.mark.parametrize("series", cases.validate_series_names())
def test_golden_validate_series(series: str):
    """cli_validate's recorded numbers of one series' rows, predicted from those rows alone
    (see cases.validate_series: each row is predicted as in the whole table)."""
    old = cases.recorded(BY_SERIES)
    assert old is not None, f"no recorded values for {BY_SERIES}: run python tools/golden.py"
    rows = cases.series_rows(series)
    moved = cases.compare(cases.of_rows(old, rows), cases.validate_series(series))
    assert not moved, (
        f"{len(moved)} golden metric(s) of {BY_SERIES} ({series}) moved:\n" + "\n".join(moved[:40])
    )


@pytest.mark.golden
def test_the_series_checks_cover_every_recorded_validate_number():
    """Between them the series tests check all of cli_validate: every row of the packaged table
    is in one series, and every recorded metric is of a row of the table."""
    old = cases.recorded(BY_SERIES)
    assert old is not None
    table = range(len(cases.packaged_cases()))
    by_series = sorted(i for s in cases.validate_series_names() for i in cases.series_rows(s))
    assert by_series == list(table)
    assert {cases.recorded_row(k) for k in old} == set(table)
