"""Studies reuse work: each distinct scenario runs once (one plain-decoding baseline per
concurrency, shared by every K and every band probe), and where the runs go (here, or a process
pool, the default on more than one CPU) never changes the answer."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import Told
from typer.testing import CliRunner

from simspec.cli import common
from simspec.cli.main import app
from simspec.config import AcceptanceConfig, Deployment, LengthSpec, MethodConfig, WorkloadConfig
from simspec.errors import InputError
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


def test_recommend_runs_each_scenario_once_and_one_baseline_per_concurrency(simulated):
    rec = recommend_bands(TINY, EAGLE, [1, 3], (1, 2, 8), 256)
    assert len(simulated) == len(set(simulated))  # no scenario ran twice
    # every concurrency of the table (grid points and band edges) has exactly one plain run,
    # shared by every K there and by the probes; a probe may add one where it turns
    # speculation off between edges
    concurrencies = set(rec.table.concurrency.astype(int))
    assert len(_plain(simulated)) >= len(concurrencies)
    per_setting = len(concurrencies) * 3  # plain, K=1, K=3 at each
    probes = sum(1 for _ in rec.crossovers)
    assert len(simulated) <= per_setting + 2 * 3 * probes


def test_recommend_table_is_the_same_here_and_on_a_pool():
    here = recommend_bands(TINY, EAGLE, [1, 3], (1, 2, 8), 256)
    told = Told()
    pool = recommend_bands(
        TINY, EAGLE, [1, 3], (1, 2, 8), 256, runs=Runs("process", workers=2, progress=told)
    )
    pd.testing.assert_frame_equal(here.table, pool.table)
    assert here.bands == pool.bands and here.crossovers == pool.crossovers
    # the grid's concurrencies are told in order, whichever worker finished first
    assert told.labels[:3] == ["concurrency 1", "concurrency 2", "concurrency 8"]


def test_sweep_runs_one_baseline_per_batch_size_for_every_method(simulated):
    cfg = SweepConfig(
        workload=TINY.workload,
        methods=[EAGLE, MethodConfig(name="eagle3", k=1, acceptance=EAGLE.acceptance)],
        batch_sizes=[1, 4],
    )
    frame = run_sweep(cfg)
    assert len(_plain(simulated)) == 2 and len(simulated) == 2 * 3 == len(set(simulated))
    assert len(frame) == 4


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
