"""Studies reuse work: each distinct scenario runs once (one plain-decoding baseline per
concurrency, shared by every K and every band probe), and where the runs go (here, or a process
pool, the default on more than one CPU) never changes the answer."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import Told
from typer.testing import CliRunner

from simspec.cli import common
from simspec.cli.main import app
from simspec.config import AcceptanceConfig, Deployment, LengthSpec, MethodConfig, WorkloadConfig
from simspec.errors import InputError, ScenarioError
from simspec.studies import capacity
from simspec.studies.runs import Runs, job
from simspec.studies.schedule.bands import recommend_bands
from simspec.studies.sweep import SweepConfig, run_sweep

runner = CliRunner()
# short fixed lengths and few turnovers: what is asked is which runs a study makes, not the
# speedups they measure
TINY = Deployment(
    workload=WorkloadConfig(
        lengths_from=None, prompt=LengthSpec(mean=64), output=LengthSpec(mean=32), turnovers=2
    )
)
EAGLE = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))
# a weak drafter: worth running alone, not under load, so its band ends inside the grid
WEAK = MethodConfig(
    name="draft_model", k=1, draft_model="llama-3.2-1b", acceptance=AcceptanceConfig(alpha=0.4)
)


@pytest.fixture
def simulated(monkeypatch) -> list[str]:
    """The JSON of every scenario simulated in this process, in order."""
    ran: list[str] = []
    real = job.simulate

    def spy(sc):
        ran.append(sc.model_dump_json())
        return real(sc)

    monkeypatch.setattr(job, "simulate", spy)
    return ran


def _plain(scenarios: list[str]) -> list[str]:
    return [s for s in scenarios if '"name":"autoregressive"' in s]


def _concurrency(scenario: str) -> int:
    return int(json.loads(scenario)["workload"]["concurrency"])


@pytest.mark.slow
def test_recommend_runs_each_scenario_once_and_one_baseline_per_concurrency(simulated):
    rec = recommend_bands(TINY, WEAK, [1, 2], (1, 64), 256)
    (x,) = rec.crossovers
    assert (x.below, x.above) == (1, 0)  # speculation turns off: plain decoding is probed too
    assert len(simulated) == len(set(simulated))  # no scenario ran twice
    # one plain run per concurrency that ran anything: the baseline of every K there, and the
    # probe's own setting 0 where the bisection went
    plain = [_concurrency(s) for s in _plain(simulated)]
    assert sorted(plain) == sorted({_concurrency(s) for s in simulated})
    # plain, K=1 and K=2 at each concurrency of the table (grid points and edges), and the
    # two crossing settings at each probe between them: nothing else
    table = set(rec.table.concurrency.astype(int))
    probes = {_concurrency(s) for s in simulated} - table
    assert len(simulated) == 3 * len(table) + 2 * len(probes)


@pytest.mark.slow
def test_recommend_table_is_the_same_here_and_on_a_pool():
    here = recommend_bands(TINY, WEAK, [1, 2], (1, 64), 256)
    told = Told()
    pool = recommend_bands(
        TINY, WEAK, [1, 2], (1, 64), 256, runs=Runs("process", workers=2, progress=told)
    )
    pd.testing.assert_frame_equal(here.table, pool.table)
    pd.testing.assert_frame_equal(here.band_table, pool.band_table)
    assert here.bands == pool.bands and here.crossovers == pool.crossovers
    # the grid's concurrencies are told in order, whichever worker finished first, then each
    # probe and each edge
    assert told.labels[:2] == ["concurrency 1", "concurrency 64"]
    assert sum(label.startswith("crossover k=1->0") for label in told.labels) == 6
    (x,) = pool.crossovers
    assert told.labels[-2:] == [f"crossover edge: concurrency {c}" for c in (x.last, x.first)]


def test_sweep_runs_one_baseline_per_batch_size_for_every_method(simulated):
    cfg = SweepConfig(
        workload=TINY.workload,
        methods=[EAGLE, MethodConfig(name="eagle3", k=1, acceptance=EAGLE.acceptance)],
        batch_sizes=[1, 4],
    )
    frame = run_sweep(cfg)
    assert len(_plain(simulated)) == 2 and len(simulated) == 2 * 3 == len(set(simulated))
    assert len(frame) == 4


@pytest.mark.slow
def test_plan_finds_the_same_rates_here_and_with_its_methods_side_by_side_on_a_pool():
    short = Deployment(
        workload=WorkloadConfig(
            lengths_from=None, prompt=LengthSpec(mean=64), output=LengthSpec(mean=32)
        )
    )
    methods = [MethodConfig(name="autoregressive", k=0), EAGLE]
    slo = capacity.Slo(ttft_ms=2000.0, tpot_ms=50.0)
    args = (short, methods, 40.0, slo, 2.5, 5.0)
    here = capacity.plan(*args, min_requests=50)
    pool = capacity.plan(*args, runs=Runs("process", workers=2), min_requests=50)
    pd.testing.assert_frame_equal(here, pool)


def test_studies_run_on_a_pool_by_default_where_there_is_more_than_one_cpu(monkeypatch):
    monkeypatch.setattr(common.os, "cpu_count", lambda: 2)
    assert common.default_executor(None, None) == "process"
    monkeypatch.setattr(common.os, "cpu_count", lambda: 1)
    assert common.default_executor(None, None) == "serial"
    assert common.default_executor("serial", None) == "serial"
    with pytest.raises(InputError, match="--workers"):
        common.default_executor("serial", 2)
    with pytest.raises(InputError, match="--executor"):
        common.default_executor("ray", None)


@pytest.mark.parametrize("command", [["recommend"], ["plan", "--qps", "1"]])
def test_a_study_refuses_an_executor_it_has_not_and_workers_without_a_pool(command):
    bad = runner.invoke(app, [*command, "--executor", "ray"])
    assert bad.exit_code == 2 and "error: --executor: choose serial or process" in bad.output
    bad = runner.invoke(app, [*command, "--executor", "serial", "--workers", "2"])
    assert bad.exit_code == 2 and "error: --workers:" in bad.output


def _fake_probe(threshold: float, asked: list[float]):
    """A replica whose p99 TTFT meets a 2 s SLO below ``threshold`` requests/s."""

    def probe(rate: float):
        asked.append(rate)
        return SimpleNamespace(
            stable=True,
            window_short=0,
            requests=100,
            unfinishable=0,
            ttft_ms_p99=100.0 if rate < threshold else 9000.0,
            tpot_ms_p99=10.0,
        )

    return probe


@pytest.mark.parametrize("threshold", [0.1, 0.3, 3.0, 12.7, 5000.0])
def test_the_doubling_ends_on_the_same_bracket_from_any_start(threshold):
    slo = capacity.Slo(ttft_ms=2000.0, tpot_ms=50.0)
    brackets = []
    for start in range(0, 19):
        asked: list[float] = []
        lo, best, hi, why = capacity.doubling_bracket(_fake_probe(threshold, asked), slo, start)
        brackets.append((lo, best is None, hi, why))
        assert len(asked) == len(set(asked))  # no rate probed twice
    assert len(set(brackets)) == 1
    lo, no_run, hi, why = brackets[0]
    assert lo < threshold <= hi and hi == (2 * lo or 0.25) and why == "ttft"
    assert no_run == (lo == 0)


def test_a_start_at_the_threshold_probes_only_the_bracket():
    slo = capacity.Slo(ttft_ms=2000.0, tpot_ms=50.0)
    asked: list[float] = []
    capacity.doubling_bracket(_fake_probe(12.7, asked), slo, 5)  # 8 req/s holds, 16 does not
    assert asked == [8.0, 16.0]
    asked.clear()
    capacity.doubling_bracket(_fake_probe(12.7, asked), slo, 0)  # the doubling from 0.25/s
    assert asked == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]


def test_a_slo_that_holds_at_every_rate_is_refused_from_any_start():
    slo = capacity.Slo(ttft_ms=2000.0, tpot_ms=50.0)
    for start in (0, 18, 40):
        asked: list[float] = []
        with pytest.raises(ScenarioError, match="too loose"):
            capacity.doubling_bracket(_fake_probe(math.inf, asked), slo, start)
        assert max(asked) == 0.25 * 2**18 <= capacity.TOP_RATE  # as the doubling from 0.25/s
