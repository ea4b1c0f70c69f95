"""Golden numbers: every case of ``tests/golden/cases.py`` against the values recorded in
``tests/golden/*.json``, within ``cases.RTOL`` (relative). A failure lists each metric that
moved. Re-record on purpose with ``python tools/golden.py --update`` (it prints the diff)."""

from __future__ import annotations

import pytest

from tests.golden import cases

# over a second or so each (the rest, under a second, stay in the edit loop: -m "not slow")
SLOW = {
    "cli_sweep_default", "cli_validate", "study_plan", "study_recommend", "study_fleet",
    "ar_closed", "eagle3_chain", "poisson", "hf_pp2_preemption", "mixtral_tp2_poisson",
    "medusa1_alpha_profile", "deepseek_v3_mla_mtp",
}  # fmt: skip
# the golden validate run is the one tests/test_validate.py reads: both on one xdist worker
GROUPS = {"cli_validate": cases.VALIDATE_GROUP}


def _param(name: str):
    marks = [pytest.mark.golden] + ([pytest.mark.slow] if name in SLOW else [])
    if name in GROUPS:
        marks.append(pytest.mark.xdist_group(GROUPS[name]))
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_param(n) for n in cases.names()])
def test_golden(name: str):
    old = cases.recorded(name)
    assert old is not None, f"no recorded values for {name}: run python tools/golden.py --update"
    moved = cases.compare(old, cases.compute(name))
    assert not moved, f"{len(moved)} golden metric(s) of {name} moved:\n" + "\n".join(moved[:40])
