"""recommend's band edges sit where the two settings' throughput curves cross (bisection on the
concurrency), not at the next grid point; small fixed-length runs, a second or two each."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import Told
from typer.testing import CliRunner

from simspec.catalog.vllm import to_method
from simspec.cli.main import app
from simspec.config import AcceptanceConfig, Deployment, LengthSpec, MethodConfig, WorkloadConfig
from simspec.studies.runs import Runs
from simspec.studies.schedule.bands import probes, recommend_bands, schedule
from simspec.studies.schedule.export import speculative_config

runner = CliRunner()
# 8 turnovers of the batch (recommend measures 64): where the curves cross moves a little with
# a shorter run, and what is asked is how the bisection places the edge, wherever it is
SHORT = Deployment(
    workload=WorkloadConfig(
        lengths_from=None, prompt=LengthSpec(mean=128), output=LengthSpec(mean=96), turnovers=8
    )
)


def _row(table: pd.DataFrame, c: int) -> pd.Series:
    return table.set_index("concurrency").loc[c]


@pytest.mark.slow
def test_a_crossover_lies_between_the_grid_points_and_the_curves_order_as_claimed():
    eagle = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))
    told = Told()
    rec = recommend_bands(SHORT, eagle, [3, 4], (1, 64), 1024, runs=Runs(progress=told))
    labels = told.labels
    (x,) = rec.crossovers
    assert (x.below, x.above) == (4, 3)  # a long chain alone, a shorter one under load
    assert 1 < x.last < x.first < 64 and x.first == x.last + 1
    last, first = _row(rec.table, x.last), _row(rec.table, x.first)
    assert last.speedup_k4 >= last.speedup_k3 and first.speedup_k3 > first.speedup_k4
    assert rec.bands == [[1, x.last, 4], [x.first, 1024, 3]]
    # bounded: at most ceil(log2(63)) probes, then the two edges
    assert sum(label.startswith("crossover k=") for label in labels) <= probes(63) == 6
    assert set(rec.table.point) == {"grid", "crossover"}
    assert (rec.band_table.loss_at_start_pct.fillna(0) >= 0).all()
    assert rec.band_table.loss_at_end_pct.iloc[0] == 0.0  # K=4 is the fastest at its edge
    # the vLLM form carries the bisected edges
    cfg = json.loads(json.dumps(speculative_config(eagle, rec.bands)))
    assert cfg["num_speculative_tokens_per_batch_size"] == [[1, x.last, 4], [x.first, 1024, 3]]
    assert to_method(cfg)["k_schedule"] == [(1, x.last, 4), (x.first, 1024, 3)]


@pytest.mark.slow
def test_the_edge_where_speculation_turns_off_is_bisected_too():
    weak = MethodConfig(
        name="draft_model", k=1, draft_model="llama-3.2-1b", acceptance=AcceptanceConfig(alpha=0.4)
    )
    rec = recommend_bands(SHORT, weak, [1], (1, 64), 1024)
    (x,) = rec.crossovers
    assert (x.below, x.above) == (1, 0) and 1 < x.last < x.first < 64
    assert _row(rec.table, x.last).speedup_k1 >= 1.0 > _row(rec.table, x.first).speedup_k1
    assert rec.bands == [[1, x.last, 1], [x.first, 1024, 0]]


def test_without_crossovers_a_setting_holds_from_its_grid_point():
    table = pd.DataFrame({"concurrency": [1, 4, 16, 64], "best_k": [4, 4, 2, 0]})
    assert schedule(table, 1024) == [[1, 15, 4], [16, 63, 2], [64, 1024, 0]]
    assert probes(1) == 0 and probes(2) == 1 and probes(64) == 6


@pytest.mark.slow
def test_recommend_cli_takes_the_files_method_and_writes_the_bisected_schedule(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text(
        "workload: {lengths_from: null, prompt: {mean: 128}, output: {mean: 96}, turnovers: 8}\n"
        "method: {name: eagle3, k: 3, acceptance: {alpha: 0.7}}\n"
    )
    out, js = tmp_path / "rec.csv", tmp_path / "spec.json"
    args = ["recommend", "--config", str(cfg), "--concurrencies", "1,64", "--k-max", "4"]
    result = runner.invoke(app, [*args, "--out", str(out), "--json", str(js)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out)
    edges = table[table.point == "crossover"]
    assert len(edges) == 2 and ((1 < edges.concurrency) & (edges.concurrency < 64)).all()
    assert {"scheduled_k", "loss_pct"} <= set(table.columns)
    # each row's run length: the file's 8 turnovers of the batch at 64
    assert table.set_index("concurrency").requests[64] == 8 * 64
    bands = json.loads(js.read_text())["num_speculative_tokens_per_batch_size"]
    assert [b[1] for b in bands[:-1]] == [int(edges.concurrency.min())]
    assert "loss_at_start_pct" in result.output


def test_a_schedule_that_is_off_everywhere_writes_no_speculative_config(tmp_path):
    """QA: --json wrote a config that loads a draft and never runs it, while the console said
    to serve without one."""
    cfg = tmp_path / "s.yaml"
    cfg.write_text(
        "workload: {lengths_from: null, prompt: {mean: 64}, output: {mean: 32}, turnovers: 4}\n"
        "method: {name: eagle3, k: 1, acceptance: {alpha: 0.05}}\n"
    )
    js = tmp_path / "spec.json"
    args = ["recommend", "--config", str(cfg), "--concurrencies", "8", "--k-max", "1"]
    result = runner.invoke(app, [*args, "--json", str(js)])
    assert result.exit_code == 0, result.output
    assert "serve without a --speculative-config" in " ".join(result.output.split())
    assert "was not written" in " ".join(result.output.split()) and not js.exists()


def test_recommend_refuses_a_k_it_would_replace_and_a_schedule_it_would_overwrite(tmp_path):
    bad = runner.invoke(app, ["recommend", "--k", "4"])
    assert bad.exit_code == 2 and "--k" in bad.output and "--k-max" in bad.output
    spec = '{"method": "eagle3", "num_speculative_tokens": 3, "disable_by_batch_size": 8}'
    bad = runner.invoke(app, ["recommend", "--speculative-config", spec])
    assert bad.exit_code == 2 and "--speculative-config" in bad.output
    cfg = tmp_path / "two.yaml"
    cfg.write_text("methods: [{name: eagle3}, {name: ngram}]\n")
    bad = runner.invoke(app, ["recommend", "--config", str(cfg)])
    assert bad.exit_code == 2 and "--method" in bad.output


def test_recommend_refuses_a_tree_budget_the_tree_cannot_draft():
    """A depth-2 dynamic tree of top-10 drafts at most 10 + 10^2 candidates: a larger budget
    would cost a verify pass wider than any tree acceptance walks."""
    bad = runner.invoke(app, ["recommend", "--methods", "eagle2", "--k", "2",
                              "--tree-budgets", "8,200"])  # fmt: skip
    assert bad.exit_code == 2 and "--tree-budgets" in bad.output and "110" in bad.output


def test_an_mtp_config_names_no_draft_weights():
    """vLLM drafts MTP with the target's own layers (no ``model`` to give); EAGLE needs one."""
    from simspec.config import MethodConfig
    from simspec.studies.schedule.export import speculative_config

    assert "model" not in speculative_config(MethodConfig(name="mtp", k=1), [[1, 64, 1]])
    assert "model" in speculative_config(MethodConfig(name="eagle3", k=3), [[1, 64, 3]])


def test_an_edge_a_third_setting_wins_is_named():
    """QA: eagle2's budgets ran 64 then 8 while 32 was 7-8 % faster at both edges, and the How
    note said the band's settings were within ±2 % there."""
    from simspec.studies.schedule.bands import outsiders

    table = pd.DataFrame(
        {
            "concurrency": [1, 3, 4, 16],
            "point": ["grid", "crossover", "crossover", "grid"],
            "best_nodes": [64, 32, 32, 8],
            "scheduled_nodes": [64, 64, 8, 8],
            "loss_pct": [0.0, 7.2, 7.9, 0.0],
        }
    )
    bands = [[1, 3, 64], [4, 1024, 8]]
    assert outsiders(table, bands) == [(3, 32, 64, 7.2), (4, 32, 8, 7.9)]
    # within the interval, or a setting with a band of its own: nothing to say
    close = table.assign(loss_pct=[0.0, 1.5, 0.0, 0.0], best_nodes=[64, 32, 8, 8])
    assert outsiders(close, bands) == []
    assert outsiders(table.assign(best_nodes=[64, 8, 64, 8]), bands) == []


# the same short lengths with no fixed run length: recommend measures to a precision target
AIMED = Deployment(
    workload=WorkloadConfig(
        lengths_from=None, prompt=LengthSpec(mean=128), output=LengthSpec(mean=96)
    )
)


def test_under_a_precision_target_each_speedup_and_probe_runs_to_it_and_the_edges_agree():
    """issue 26: recommend measures each setting until its speedup's interval is within the
    target (from 16 turnovers, not the fixed 64), compares each probe's two settings as a
    pair, and its bands still sit where the table says the curves cross; the progress is told
    of every setting's run."""
    from simspec.engine import window

    eagle = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))
    told = Told()
    runs = Runs(progress=told)
    rec = recommend_bands(AIMED, eagle, [3, 4], (1, 64), 1024, runs=runs, precision_target=0.05)
    (x,) = rec.crossovers
    assert (x.below, x.above) == (4, 3) and 1 < x.last < x.first < 64
    last, first = _row(rec.table, x.last), _row(rec.table, x.first)
    assert last.speedup_k4 >= last.speedup_k3 and first.speedup_k3 > first.speedup_k4
    assert rec.bands == [[1, x.last, 4], [x.first, 1024, 3]]
    # every run at a length of the precision lattice (each label ends "n=<requests>"), none at
    # the fixed 64 turnovers' 4,096 requests of concurrency 64
    import re

    ran = [re.search(r"concurrency (\d+).* n=(\d+)$", label) for label in told.labels]
    assert ran and all(ran)
    lengths = [(int(m.group(1)), int(m.group(2))) for m in ran if m]
    assert all(window.floor_requests(c) <= n <= window.cap_requests(c) for c, n in lengths)
    assert max(n for c, n in lengths if c == 64) < 64 * 64
    # the table says the one length each concurrency's settings ran at
    for c, n in zip(rec.table.concurrency, rec.table.requests, strict=True):
        assert (int(c), int(n)) in lengths
    assert sum(label.startswith("concurrency ") for label in told.labels) >= 4
    assert sum(label.startswith("crossover k=") for label in told.labels) <= probes(63)
    # each row's best speedup comes with its interval, within the target (or at the cap)
    for _, row in rec.table.iterrows():
        low, high = row.best_speedup_ci_low, row.best_speedup_ci_high
        assert low < row.best_speedup < high
        assert (high - low) / 2 / row.best_speedup <= 0.05 or row.requests == window.cap_requests(
            int(row.concurrency)
        )


def test_recommend_precision_target_flag_checks_its_range_and_replaces_a_files_length(tmp_path):
    bad = runner.invoke(app, ["recommend", "--precision-target", "0.7"])
    assert bad.exit_code == 2 and "--precision-target" in bad.output and "0.5" in bad.output
    cfg = tmp_path / "fixed.yaml"
    cfg.write_text(
        "workload: {lengths_from: null, prompt: {mean: 64}, output: {mean: 32}, turnovers: 8}\n"
        "method: {name: eagle3, k: 1, acceptance: {alpha: 0.7}}\n"
    )
    args = ["recommend", "--config", str(cfg), "--concurrencies", "4", "--k-max", "1"]
    fixed = runner.invoke(app, args)  # the file's length stands without the flag
    assert fixed.exit_code == 0, fixed.output
    assert "at a fixed length (the --config file's" in " ".join(fixed.output.split())
    # on the command line the flag replaces the file's length, as in a sweep
    aimed = runner.invoke(app, [*args, "--precision-target", "0.05"])
    assert aimed.exit_code == 0, aimed.output
    assert "measured to ±5 % (--precision-target" in " ".join(aimed.output.split())


@pytest.mark.slow
def test_the_edges_rank_the_two_settings_as_their_probe_did():
    """QA: under a tight target a probe ran K=2 against K=1 at 2,688 requests and put K=2
    ahead, while the edge's K=1 row came from a pair stopped at 672 and put K=1 ahead (best_k
    1, scheduled 2, a loss at the band's own edge). The edges start at the probe's length and
    every setting of a concurrency runs at one length, so the rows agree with the bands."""
    weaker = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.5))
    rec = recommend_bands(AIMED, weaker, [1, 2], (1, 32, 128), 1024, precision_target=0.005)
    for x in rec.crossovers:
        last, first = _row(rec.table, x.last), _row(rec.table, x.first)
        assert last[f"speedup_k{x.below}"] >= last[f"speedup_k{x.above}"]
        assert first[f"speedup_k{x.above}"] > first[f"speedup_k{x.below}"]
    edges = rec.table[rec.table.point == "crossover"]
    assert len(edges) and (edges.loss_pct == 0).all() and (edges.best_k == edges.scheduled_k).all()


def test_a_sweep_files_precision_target_is_recommends_too(tmp_path):
    """QA: a --config file with a sweep's precision_target was refused as no deployment
    field, with a hint naming that very field; recommend reads it as its flag, and a fixed
    length beside it in the file is refused, as in a sweep's file."""
    aimed = tmp_path / "aimed.yaml"
    aimed.write_text(
        "workload: {lengths_from: null, prompt: {mean: 64}, output: {mean: 32}}\n"
        "method: {name: eagle3, k: 1, acceptance: {alpha: 0.7}}\nprecision_target: 0.05\n"
    )
    args = ["recommend", "--config", str(aimed), "--concurrencies", "4", "--k-max", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "measured to ±5 % (--precision-target" in " ".join(result.output.split())
    both = tmp_path / "both.yaml"
    both.write_text(aimed.read_text().replace("mean: 32}", "mean: 32}, turnovers: 8"))
    bad = runner.invoke(app, ["recommend", "--config", str(both)])
    assert bad.exit_code == 2 and "precision_target" in bad.output
    assert "exclude each other" in " ".join(bad.output.split())
    # the default turnovers beside a target, as a dumped sweep config writes every field: a
    # sweep takes it, and so does recommend (one rule: studies.sweep.written_length)
    dumped = tmp_path / "dumped.yaml"
    dumped.write_text(aimed.read_text().replace("mean: 32}", "mean: 32}, turnovers: 64"))
    from simspec.studies.sweep import written_length

    assert written_length({"turnovers": 64}) == (True, False)
    result = runner.invoke(app, ["recommend", "--config", str(dumped), *args[3:]])
    assert result.exit_code == 0, result.output
    assert "measured to ±5 % (--precision-target" in " ".join(result.output.split())
    wide = tmp_path / "wide.yaml"
    wide.write_text("method: {name: eagle3}\nprecision_target: 0.9\n")
    bad = runner.invoke(app, ["recommend", "--config", str(wide)])
    assert bad.exit_code == 2 and "precision_target" in bad.output and "0.5" in bad.output


def test_recommend_refuses_a_method_whose_draft_length_k_does_not_set():
    """Lookahead drafts lookahead_ngram - 1 tokens whatever K is: its K columns were one run
    three times and "best K 1" the first of a tie (QA). Refused, as analytic refuses it."""
    result = runner.invoke(app, ["recommend", "--method", "lookahead", "--concurrencies", "1"])
    assert result.exit_code == 2
    assert "recommend chooses K, which lookahead does not read" in result.output


def test_a_dynamic_sd_schedule_is_refused_for_vllm_v0(tmp_path):
    """num_speculative_tokens_per_batch_size is vLLM V1's Dynamic SD: recommend writes none for
    vllm-v0, and sweep does not simulate one given to it (QA: both did)."""
    out = tmp_path / "c.json"
    args = ["recommend", "--engine", "vllm-v0", "--concurrencies", "1", "--json", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "engine vllm-v0 does not read it" in result.output
    assert not out.exists()
    cfg = {"method": "eagle3", "num_speculative_tokens": 3,
           "num_speculative_tokens_per_batch_size": [[1, 12, 3], [13, 256, 1]]}  # fmt: skip
    spec = json.dumps(cfg)
    sweep = ["sweep", "--concurrencies", "1", "--speculative-config", spec]
    refused = runner.invoke(app, [*sweep, "--engine", "vllm-v0"])
    assert refused.exit_code == 2 and "never reads" in refused.output
