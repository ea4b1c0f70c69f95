"""Capacity planning and the recommended speculation schedule: small scenarios, known answers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from simspec.catalog.vllm import to_method
from simspec.cli.main import app
from simspec.config import AcceptanceConfig, Deployment, LengthSpec, MethodConfig, WorkloadConfig
from simspec.engine.workload import mean_output_len
from simspec.studies.capacity import Slo, max_rate, plan
from simspec.studies.schedule.bands import schedule
from simspec.studies.schedule.export import speculative_config
from simspec.studies.schedule.grid import recommend

runner = CliRunner()
# fixed short lengths and 8 turnovers of the batch (the studies measure 64): what is asked
# below is an order (which K, which budget, on or off), not a number, and holds either way
SHORT = Deployment(
    workload=WorkloadConfig(
        lengths_from=None, prompt=LengthSpec(mean=128), output=LengthSpec(mean=96), requests=32,
        turnovers=8,
    )
)  # fmt: skip


def eagle(alpha: float) -> MethodConfig:
    return MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=alpha))


@pytest.mark.slow
def test_a_method_that_never_beats_plain_decoding_is_off_everywhere():
    useless = MethodConfig(
        name="draft_model", k=2, draft_model="llama-3.2-1b", acceptance=AcceptanceConfig(alpha=0.02)
    )
    table = recommend(SHORT, useless, [1, 2], (1, 16))
    assert (table.best_k == 0).all() and (table.best_speedup == 1.0).all()
    assert schedule(table, 1024) == [[1, 1024, 0]]


@pytest.mark.slow
def test_lowering_acceptance_never_raises_the_recommended_k():
    grid = (1, 8, 64)
    high = recommend(SHORT, eagle(0.85), [1, 2, 3, 4], grid)
    low = recommend(SHORT, eagle(0.45), [1, 2, 3, 4], grid)
    assert (low.best_k.to_numpy() <= high.best_k.to_numpy()).all()
    assert high.best_k.iloc[0] >= 3  # a good draft wants a long chain alone


@pytest.mark.slow
def test_tree_budgets_are_recommended_per_band_and_shrink_with_load():
    tree = MethodConfig(
        name="eagle2", k=4, tree="dynamic", tree_topk=8, acceptance=AcceptanceConfig(alpha=0.7)
    )
    table = recommend(SHORT, tree, [8, 48], (1, 128), knob="tree_nodes")
    assert table.best_k.iloc[0] == 48  # alone, the big tree pays
    assert table.best_k.iloc[1] < 48  # under load it does not


def test_schedule_bands_cover_every_batch_size_and_merge_equal_neighbours():
    table = pd.DataFrame({"concurrency": [1, 4, 16, 64], "best_k": [4, 4, 2, 0]})
    assert schedule(table, 1024) == [[1, 15, 4], [16, 63, 2], [64, 1024, 0]]


def test_the_exported_speculative_config_reads_back_as_the_same_schedule():
    bands = [[1, 15, 4], [16, 63, 2], [64, 1024, 0]]
    cfg = speculative_config(eagle(0.7), bands)
    text = json.dumps(cfg)
    back = to_method(json.loads(text))
    assert back["name"] == "eagle3" and back["k"] == 4
    assert back["k_schedule"] == [tuple(b) for b in bands]
    assert speculative_config(MethodConfig(name="hydra", k=3), bands) is None  # not in vLLM
    # what the method ran with goes out under vLLM's keys, or vLLM runs its defaults (QA: an
    # n-gram 2..4 exported without its sizes), and the draft weights the user named stay
    ngram = MethodConfig(name="ngram", k=3, prompt_lookup_min=2, prompt_lookup_max=4)
    back = to_method(json.loads(json.dumps(speculative_config(ngram, bands))))
    assert (back["prompt_lookup_min"], back["prompt_lookup_max"]) == (2, 4)
    named = speculative_config(eagle(0.7), bands, weights="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    assert named["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    # a one-forward drafter is its base method with parallel_drafting (QA: recommend said vLLM
    # has no p_eagle method)
    parallel = speculative_config(MethodConfig(name="p_eagle", k=5), [[1, 1024, 5]], "x/y")
    assert parallel["method"] == "eagle3" and parallel["parallel_drafting"] is True
    assert to_method(json.loads(json.dumps(parallel)))["name"] == "p_eagle"
    # one band of one K is num_speculative_tokens alone: vLLM runs any table as Dynamic SD,
    # its CUDA graphs piecewise (QA: [[1, 1024, 5]] was exported)
    assert "num_speculative_tokens_per_batch_size" not in parallel
    assert parallel["num_speculative_tokens"] == 5
    off = speculative_config(eagle(0.1), [[1, 1024, 0]])
    assert off["num_speculative_tokens_per_batch_size"] == [[1, 1024, 0]]  # off says so


@pytest.mark.slow
def test_max_rate_is_higher_under_a_looser_slo_and_plan_sizes_the_fleet():
    ar = MethodConfig(name="autoregressive", k=0)
    fast = {"iterations": 4, "min_requests": 100}  # mechanics, not a precise rate
    strict, _, _ = max_rate(SHORT, ar, Slo(400, 12), duration_s=10, **fast)
    loose, s, why = max_rate(SHORT, ar, Slo(4000, 40), duration_s=10, **fast)
    assert why in ("ttft", "tpot", "unstable")  # what stopped the rate from going higher
    assert 0 < strict < loose and s is not None
    sized = {
        "target_qps": 3 * loose,
        "slo": Slo(4000, 40),
        "gpu_hour_price": 2.0,
        "duration_s": 10,
        "min_requests": 100,
    }
    row = plan(SHORT, [ar], **sized).iloc[0]
    assert (
        row.replicas == math.ceil(3 * loose / row.max_qps_per_replica) and row.gpus == row.replicas
    )
    assert row.cost_per_million_tokens > 0 and bool(row.meets_slo)
    # the tokens priced are the workload's own mean output, not one probe window's sample, so
    # methods on as many GPUs cost the same (QA: 0.0956 vs 0.0960 $/M tokens on 4 GPUs each)
    tokens_per_hour = 3 * loose * mean_output_len(SHORT.workload) * 3600
    assert row.cost_per_million_tokens == pytest.approx(row.gpus * 2.0 / tokens_per_hour * 1e6)
    # a replica over two pipeline stages holds twice the GPUs (QA: plan counted tp alone)
    staged = plan(SHORT.model_copy(update={"pp": 2, "engine": "hf"}), [ar], **sized).iloc[0]
    assert staged.gpus == 2 * staged.replicas


@pytest.mark.slow
def test_an_unreachable_slo_is_reported_not_a_crash():
    frame = plan(SHORT, [eagle(0.7)], 10.0, Slo(1.0, 0.5), 2.0, duration_s=5, min_requests=100)
    assert not frame.meets_slo.iloc[0] and pd.isna(frame.replicas.iloc[0])


@pytest.mark.slow
def test_recommend_and_plan_commands(tmp_path, short_plan_probes):
    out, js = tmp_path / "rec.csv", tmp_path / "spec.json"
    small = tmp_path / "small.yaml"  # short fixed lengths, few turnovers: the commands' plumbing
    small.write_text(
        "workload: {lengths_from: null, prompt: {mean: 128}, output: {mean: 64}, turnovers: 4}\n"
    )
    result = runner.invoke(
        app,
        [
            "recommend",
            "--config",
            str(small),
            "--concurrencies",
            "1,32",
            "--k-max",
            "2",
            "--alpha",
            "0.7",
            "--out",
            str(out),
            "--json",
            str(js),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "num_speculative_tokens_per_batch_size" in result.output
    assert to_method(json.loads(js.read_text()))["name"] == "eagle3"
    assert "replace <path to the draft weights>" in " ".join(result.output.split())
    table = pd.read_csv(out)
    assert list(table[table.point == "grid"].concurrency) == [1, 32]
    plan_out = tmp_path / "plan.csv"
    probes = tmp_path / "probes.yaml"  # plan's probes are Poisson: no closed loop's turnovers
    probes.write_text("workload: {lengths_from: null, prompt: {mean: 128}, output: {mean: 64}}\n")
    result = runner.invoke(
        app,
        [
            "plan",
            "--config",
            str(probes),
            "--qps",
            "5",
            "--slo-ttft-ms",
            "3000",
            "--slo-tpot-ms",
            "40",
            "--methods",
            "eagle3",
            "--duration",
            "5",
            "--out",
            str(plan_out),
        ],
    )
    assert result.exit_code == 0, result.output
    planned = pd.read_csv(plan_out)
    assert list(planned.method) == ["autoregressive", "eagle3"]
    # the file says what it answers: the deployment, the rate, the SLOs at their percentile
    asked = {"model": "llama-3.1-8b", "gpu": "h100_sxm", "target_qps": 5, "percentile": 99}
    assert all((planned[c] == v).all() for c, v in asked.items())
    assert (planned.slo_tpot_ms == 40).all() and (planned.gpu_hour_price == 2.5).all()
    assert {"model", "gpu", "tp"} <= set(table.columns)
    bad = runner.invoke(
        app,
        [
            "plan",
            "--qps",
            "5",
            "--slo-ttft-ms",
            "3000",
            "--slo-tpot-ms",
            "40",
            "--percentile",
            "90",
        ],
    )
    assert bad.exit_code == 2 and "--percentile" in bad.output


def test_attainment_0_is_refused_before_the_search():
    """QA: plan --trace --attainment 0 ran its schedule search (19 s) before refusing."""
    res = CliRunner().invoke(
        app, ["plan", "--trace", "azure-conv", "--window", "0:30", "--attainment", "0"]
    )
    assert res.exit_code != 0 and "--attainment: must be in (0, 1], got 0.0" in res.output
    # above 1 too, with the range it takes (QA: "the range is [-inf, 1]")
    res = CliRunner().invoke(
        app, ["plan", "--trace", "azure-conv", "--window", "0:30", "--attainment", "1.5"]
    )
    assert res.exit_code == 2 and "--attainment: must be in (0, 1], got 1.5" in res.output


def test_analytic_says_it_prices_a_tree_method_as_a_chain():
    res = CliRunner().invoke(app, ["analytic", "--method", "hydra"])
    assert res.exit_code == 0 and "the closed form prices a chain" in " ".join(res.output.split())


def test_a_schedule_grid_stops_at_the_requests_the_engine_runs_at_once(capsys):
    """SGLang runs at most 48 requests under speculative decoding by default: a band past 48
    would never run (recommend printed [66, 48, 0] for SGLang's EAGLE-3 before)."""
    from simspec.cli.plan import grid_within

    assert grid_within((1, 8, 64, 128), 48, "sglang", "eagle3") == (1, 8, 48)
    assert "runs at most 48 requests at once under eagle3" in " ".join(
        capsys.readouterr().err.split()
    )
    assert grid_within((1, 8, 64), 1024, "vllm", "eagle3") == (1, 8, 64)


def test_an_slo_one_request_at_a_time_misses_gets_rate_0_without_bisecting_toward_0():
    from simspec.studies import capacity

    ar = MethodConfig(name="autoregressive", k=0)
    rates: list[float] = []
    real = capacity._probe

    def counted(deploy, method, rate, *args, **kwargs):
        rates.append(rate)
        return real(deploy, method, rate, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(capacity, "_probe", counted)
        rate, run, why = max_rate(SHORT, ar, Slo(4000, 0.5), duration_s=10, min_requests=50)
    assert (rate, run, why) == (0.0, None, "tpot")
    assert min(rates) >= capacity.FIRST_RATE  # no probe below the doubling's first rate


def test_recommend_measures_at_the_config_files_batch_sizes(tmp_path):
    from simspec.cli.plan import file_grid

    config = tmp_path / "c.yaml"
    config.write_text("model: llama-3.1-8b\nbatch_sizes: [1, 2]\n")
    assert file_grid(config) == ("batch_sizes", "1,2")
    assert file_grid(None) is None
    config.write_text("model: llama-3.1-8b\nbatch_sizes: []\n")
    result = runner.invoke(app, ["recommend", "--config", str(config)])
    assert result.exit_code == 2 and "error: batch_sizes:" in result.output


def test_analytic_shows_no_profiles_first_alpha_as_a_scalar_row_and_refuses_an_empty_list():
    result = runner.invoke(app, ["analytic", "--alpha", "0.83,0.6,0.4"])
    assert result.exit_code == 0, result.output
    assert "0.83 " not in result.output.split("Best K per")[1].split("per-position")[0]
    assert "E = 1 + Σ Π α = 2.527" in result.output
    # the profile's speedup by depth, not E alone (QA): E at depth 2 is 1 + 0.83 + 0.83 * 0.6
    assert "drafted to depth K" in result.output and "│ 2 │ 2.33 " in result.output
    assert "best depth K = " in result.output
    deep = runner.invoke(app, ["analytic", "--alpha", ",".join(["0.9"] * 10), "--k-max", "4"])
    assert deep.exit_code == 0, deep.output
    assert "│ 10 " in deep.output  # priced to the profile's depth past --k-max
    empty = runner.invoke(app, ["analytic", "--alpha", ""])
    assert empty.exit_code == 2 and "--alpha" in empty.output


def test_policy_out_is_csv_or_parquet_like_every_other_out():
    result = runner.invoke(app, ["policy", "--config", "examples/policy.yaml", "--out", "p.json"])
    assert result.exit_code == 2 and "--out" in result.output and ".csv" in result.output


def test_a_grid_past_the_limit_and_an_empty_window_name_their_flags():
    big = runner.invoke(app, ["recommend", "--concurrencies", "99999999"])
    assert big.exit_code == 2 and "error: --concurrencies:" in big.output
    window = runner.invoke(app, ["fleet", "--trace", "azure-conv", "--window", "10:5"])
    assert window.exit_code == 2 and "error: --window:" in window.output


def test_policy_refuses_a_schedule_its_requests_never_reach(tmp_path):
    """1,500 requests at 5 req/s have all arrived by 300 s: a rate file whose 40 req/s peak
    starts at 3,600 s would never run, and the comparison would not say so (QA)."""
    day = tmp_path / "day.csv"
    day.write_text("time_s,rate\n0,5\n3600,40\n7200,5\n")
    args = ["policy", "--config", "examples/policy.yaml", "--rate-csv", str(day)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "workload.requests" in result.output and "7200 s on would never run" in result.output


def test_recommend_on_an_engine_other_than_vllm_prints_no_vllm_config_and_says_why():
    """hf and trtllm had printed a vLLM --speculative-config (TRT-LLM's batch limit in its
    last band) with no note that the engine does not ship the method (QA)."""
    args = ["recommend", "--method", "eagle3", "--concurrencies", "1", "--k-max", "2"]
    result = runner.invoke(app, [*args, "--engine", "hf"])
    assert result.exit_code == 0, result.output
    assert "--speculative-config '" not in result.output
    assert "does not read vLLM V1's Dynamic SD schedule" in result.output
    assert "does not ship" in result.output and "largest tried (2)" in result.output
    refused = runner.invoke(app, [*args, "--engine", "hf", "--json", "x.json"])
    assert refused.exit_code == 2 and "--json" in refused.output


def test_a_recommended_draft_model_config_names_the_drafts_hugging_face_id():
    from simspec.config import MethodConfig
    from simspec.studies.schedule.export import speculative_config

    m = MethodConfig(name="draft_model", k=2, draft_model="llama-3.2-1b")
    assert speculative_config(m, [[1, 8, 2]])["model"] == "meta-llama/Llama-3.2-1B-Instruct"


def test_a_tree_recommendation_names_its_columns_for_node_budgets(tmp_path):
    """A tree's setting is its node budget: the table and bands name it so (QA: speedup_k8,
    best_k and a bands column k held node budgets)."""
    out = tmp_path / "rt.csv"
    args = ["recommend", "--method", "eagle2", "--tree-budgets", "8,16", "--concurrencies", "1"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    columns = set(pd.read_csv(out).columns)
    assert {"speedup_nodes8", "speedup_nodes16", "best_nodes", "scheduled_nodes"} <= columns
    assert not any(c.startswith("speedup_k") for c in columns) and "tree_nodes" in result.output


def test_recommend_says_it_does_not_read_the_configs_draft_length():
    """QA: --speculative-config's num_speculative_tokens was dropped without a word where --k
    is refused."""
    spec = '{"method": "eagle3", "num_speculative_tokens": 5}'
    args = ["recommend", "--speculative-config", spec, "--concurrencies", "1", "--k-max", "1"]
    result = runner.invoke(app, [*args, "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "num_speculative_tokens is not read" in " ".join(result.output.split())
    assert "--k-max (1)" in " ".join(result.output.split())


def test_recommends_note_names_the_default_k_max(monkeypatch):
    """QA: without --k-max the note read '--k-max (None)'."""
    from simspec.cli import plan as cli_plan
    from simspec.errors import InputError

    def stop(*args, **kwargs):
        raise InputError("--stop", "stopped after the note")

    monkeypatch.setattr(cli_plan, "_check_read", stop)
    spec = '{"method": "eagle3", "num_speculative_tokens": 5}'
    result = runner.invoke(app, ["recommend", "--speculative-config", spec])
    text = " ".join(result.output.split())
    assert f"--k-max ({cli_plan.K_MAX})" in text and "None" not in text


def test_recommend_refuses_a_files_open_loop_workload(tmp_path):
    cfg = tmp_path / "r.yaml"
    cfg.write_text("workload: {arrival: poisson, rate: 5}\n")
    args = ["recommend", "--config", str(cfg), "--method", "eagle3", "--concurrencies", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "workload.arrival" in result.output


def test_recommend_says_to_serve_without_speculation_when_it_never_pays(tmp_path):
    """At a tiny α every band is K = 0: a config that loads a draft never to run it is not
    the answer (QA)."""
    args = ["recommend", "--method", "eagle3", "--alpha", "0.05", "--concurrencies", "1"]
    result = runner.invoke(app, [*args, "--k-max", "1", "--out", str(tmp_path / "r.csv")])
    assert result.exit_code == 0, result.output
    assert "--speculative-config '" not in result.output
    assert "serve without a --speculative-config" in result.output
    # plain decoding is the best there, its speedup exactly 1 (no interval)
    row = pd.read_csv(tmp_path / "r.csv").iloc[0]
    assert row.best_k == 0 and row.best_speedup_ci_low == row.best_speedup_ci_high == 1.0


def test_policy_refuses_bands_and_bounds_its_engine_or_loop_never_reaches(tmp_path):
    """QA: a band from 2,000 and a bound of 5,000 on a 1,024-request engine ran as fixed K=4, a
    schedule run at the default concurrency 1 applied its first band only, and a K past the
    method's was named ``methods.eagle3.k_schedule``."""
    far = tmp_path / "far.yaml"
    far.write_text(
        Path("examples/policy.yaml")
        .read_text()
        .replace("[[1, 30, 3], [31, 1024, 2]]", "[[1, 30, 3], [2000, 3000, 2]]")
    )
    result = runner.invoke(app, ["policy", "--config", str(far)])
    assert result.exit_code == 2
    assert "policy.k_schedule: band [2000, 3000, 2] starts past the 1024 requests" in " ".join(
        result.output.split()
    )
    spec = (
        '{"method": "eagle3", "num_speculative_tokens": 3, '
        '"num_speculative_tokens_per_batch_size": [[1, 8, 3], [9, 1024, 1]]}'
    )
    result = runner.invoke(app, ["policy", "--speculative-config", spec])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and text.startswith("error: --speculative-config: ")
    assert "closed loop at concurrency 1" in text and "--rate-csv" in text
    short = tmp_path / "short.yaml"
    short.write_text(Path("examples/policy.yaml").read_text().replace("  k: 3\n", "  k: 2\n"))
    result = runner.invoke(app, ["policy", "--config", str(short)])
    assert result.exit_code == 2
    assert result.output.strip().startswith("error: policy.k_schedule: K=3 exceeds k=2")
    # the fix named where it is made, not as --k, which policy refuses beside a schedule (QA)
    assert "its k in a scenario file" in " ".join(result.output.split())


def test_a_rate_schedule_without_a_request_count_runs_every_piece():
    from simspec.cli.policy import schedule_requests

    # 2 req/s for 30 s, 12 for 30, 30 for 30, then 8 for another 30: 1,560
    assert schedule_requests([(0, 2.0), (30, 12.0), (60, 30.0), (90, 8.0)]) == 1560
    assert schedule_requests([(0, 1.0)]) == 256  # a minute of 1 req/s, at least the default


def test_a_plan_says_where_its_answer_is_thin(capsys):
    """QA: 4 replicas each at the probed 12.5 req/s met the SLOs for half of 40,000 requests,
    and the plan said nothing; so is an SLO whose interval reaches past it."""
    from simspec.cli.plan import _capacity_notes

    row = {
        "method": "eagle3",
        "k": 3,
        "max_qps_per_replica": 12.5,
        "ttft_ms_at_max_ci_high": 150.0,
        "tpot_ms_at_max_ci_high": 50.1,
        "replicas": 4,
        "meets_slo": True,
    }
    _capacity_notes(pd.DataFrame([row]), 50.0, Slo(2000, 50), 60.0)
    text = " ".join(capsys.readouterr().err.split())
    assert "eagle3 K=3 (12.5 of 12.5 req/s)" in text and "simspec fleet --qps" in text
    assert "95 % interval reaches past it at the rate found: eagle3 K=3 (TPOT 50.1 ms)" in text
    # headroom, and intervals inside the SLOs: nothing to say
    roomy = {**row, "replicas": 5, "tpot_ms_at_max_ci_high": 49.0}
    _capacity_notes(pd.DataFrame([roomy]), 50.0, Slo(2000, 50), 60.0)
    assert capsys.readouterr().err == ""


def test_recommend_names_a_vllm_configs_bands_by_vllms_key():
    """QA: recommend's own --json fed back in was refused as stating k_schedule, a key the
    user never wrote."""
    from tests.refusals import one_error

    spec = (
        '{"method": "eagle3", "num_speculative_tokens": 3, '
        '"num_speculative_tokens_per_batch_size": [[1, 8, 3], [9, 1024, 1]]}'
    )
    result = runner.invoke(app, ["recommend", "--speculative-config", spec])
    line = one_error(result, "--speculative-config", "num_speculative_tokens_per_batch_size")
    assert "k_schedule" not in line


def test_a_recommend_row_carries_the_share_of_requests_left_unserved():
    """QA: recommend --max-model-len 4096 left 2 % of its requests unserved (their speedups
    over the rest) and said nothing, where sweep notes it."""
    from types import SimpleNamespace

    from simspec.studies.schedule.grid import _row

    base = SimpleNamespace(throughput_tok_s=100.0, unfinishable=19, requests=1024)
    k3 = SimpleNamespace(throughput_tok_s=90.0, unfinishable=0, requests=1024)
    row = _row(1, base, {3: k3})  # type: ignore[arg-type]
    assert row["unserved_share"] == pytest.approx(19 / 1024) and row["best_k"] == 0


def test_the_rate_a_bisection_ends_on_is_confirmed_by_a_longer_probe_or_stepped_down():
    """The highest rate that passed one noisy probe is the luckiest near the threshold (QA:
    EAGLE-3 on one H100 passed 13.5 req/s over 1,000 requests and broke both SLOs in a
    12,000-request fleet): a probe CONFIRM_FACTOR times as long confirms it, or the rate steps
    down by RATE_TOLERANCE until one does."""
    from types import SimpleNamespace

    from simspec.studies.capacity import RATE_TOLERANCE, confirmed

    slo = Slo(ttft_ms=2000, tpot_ms=50)
    asked: list[float] = []

    def long_probe(rate: float) -> SimpleNamespace:  # the p99 TPOT reaches 50 ms at 12.9/s
        asked.append(rate)
        return SimpleNamespace(
            stable=1,
            window_short=0,
            requests=100,
            unfinishable=0,
            ttft_ms_p99=200.0,
            tpot_ms_p99=50 * rate / 12.9,
        )

    rate, run, why = confirmed(long_probe, slo, 12.0, "ttft")  # holds: kept, with its reason
    assert (rate, why, asked) == (12.0, "ttft", [12.0]) and run.tpot_ms_p99 < 50
    asked.clear()
    rate, run, why = confirmed(long_probe, slo, 13.5, "ttft")
    assert rate == pytest.approx(13.5 * (1 - RATE_TOLERANCE)) and why == "tpot"
    assert asked == [13.5, rate] and run.tpot_ms_p99 <= 50
    never = confirmed(lambda r: SimpleNamespace(stable=0, window_short=0), slo, 13.5, "ttft")
    assert never == (0.0, None, "unstable")


def test_a_k0_band_that_keeps_a_draft_loaded_is_priced_as_exported():
    """vLLM loads the drafter whatever the band: under a K=0 band a draft model's weights and
    KV still share the GPU (QA: the table read 1x where the exported schedule ran 0.945x);
    n-gram holds nothing, and a schedule without a K=0 band needs no run."""
    from simspec.config import Deployment, MethodConfig, WorkloadConfig
    from simspec.studies.schedule.bands import resident_off

    deploy = Deployment(workload=WorkloadConfig(requests=64, turnovers=0))
    draft = MethodConfig(
        name="draft_model", draft_model="llama-3.2-1b", k=1, acceptance={"alpha": 0.5}
    )
    bands = [[1, 3, 1], [4, 1024, 0]]
    ((c, speedup),) = resident_off(deploy, draft, bands, [1, 4])
    # nothing gained, and under KV pressure less (its memory): 0.947x at 256 in the QA's run
    assert c == 4 and 0 < speedup <= 1.0
    ngram = MethodConfig(name="ngram", k=3, acceptance={"alpha": 0.5})
    assert resident_off(deploy, ngram, bands, [1, 4]) == []
    assert resident_off(deploy, draft, [[1, 1024, 1]], [1, 4]) == []


def test_recommends_csv_says_which_method_seed_and_lengths_it_answers(tmp_path):
    """QA: a draft_model and an eagle3 CSV were told apart by nothing."""
    from typer.testing import CliRunner

    from simspec.cli.main import app

    out = tmp_path / "r.csv"
    args = ["recommend", "--method", "eagle3", "--k-max", "1", "--concurrencies", "1"]
    result = CliRunner().invoke(app, [*args, "--seed", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    row = pd.read_csv(out).iloc[0]
    assert (row["method"], row["seed"], row["lengths_from"]) == ("eagle3", 3, "sharegpt")


def _summary(**given):
    from simspec.engine.metrics import RunSummary

    fields = {f: 1.0 for f in RunSummary.__dataclass_fields__} | {"section_e2e_s": (1.0,)}
    fields |= {"stable": 1, "window_short": 0, "requests": 100, "unfinishable": 0}
    fields |= {"ttft_ms_p99": 100.0, "tpot_ms_p99": 10.0, "ttft_ms_p50": 50.0, "tpot_ms_p50": 5.0}
    return RunSummary(**(fields | given))


def test_requests_never_served_miss_the_slo_past_what_the_percentile_leaves_out():
    """QA: plan counted requests a deployment refuses (longer than --max-model-len) as
    served: a third of them refused planned 5x the rate. They never get a first token, so
    more of them than the percentile leaves out miss the SLO at any rate (plan --trace's
    rule)."""
    slo = Slo(ttft_ms=200, tpot_ms=20)
    assert slo.missed(_summary(unfinishable=1)) == ""  # 1 % at p99: within what it leaves out
    assert slo.missed(_summary(unfinishable=2)) == "unfinishable"
    median = Slo(ttft_ms=200, tpot_ms=20, percentile=50)
    assert median.missed(_summary(unfinishable=36)) == ""
    assert median.missed(_summary(unfinishable=51)) == "unfinishable"


def test_a_tpot_target_holds_where_no_request_has_a_second_token():
    """QA: one-token outputs have no TPOT (vLLM's bench leaves them out), and plan answered
    0 QPS "limited by TPOT"; with no request served a missing TTFT still misses."""
    slo = Slo(ttft_ms=200, tpot_ms=20)
    assert slo.missed(_summary(tpot_ms_p99=float("nan"))) == ""
    assert slo.missed(_summary(tpot_ms_p99=30.0)) == "tpot"
    assert slo.missed(_summary(ttft_ms_p99=float("nan"), tpot_ms_p99=float("nan"))) == "ttft"


@pytest.mark.slow
def test_plan_says_when_the_deployment_refuses_the_workloads_long_requests(tmp_path):
    out = tmp_path / "p.csv"
    args = ["plan", "--qps", "5", "--duration", "20", "--methods", "autoregressive"]
    args += ["--executor", "serial", "--max-model-len", "1024", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    row = pd.read_csv(out).iloc[0]
    assert row.limited_by == "unfinishable" and not row.meets_slo
    assert "note: too long: more than 1% of the workload's requests" in " ".join(
        result.output.split()
    )


@pytest.mark.slow
def test_a_plan_counts_the_tokens_of_the_requests_it_serves(tmp_path):
    """QA: the unserved requests are the longest ones, and the workload's mean output over
    (1 - unserved) overstated the tokens (and understated the cost) 1.66x at --max-model-len
    1024; the served requests' own mean stands for theirs."""
    out = tmp_path / "p.csv"
    args = ["plan", "--qps", "5", "--duration", "20", "--methods", "autoregressive"]
    args += ["--executor", "serial", "--max-model-len", "1024", "--percentile", "50"]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    row = pd.read_csv(out).iloc[0]
    assert row.meets_slo and 0.2 < row.unserved_at_max < 0.5
    workload = Deployment().workload
    scaled = row.max_qps_per_replica * mean_output_len(workload) * (1 - row.unserved_at_max)
    assert row.output_tok_s_at_max < 0.8 * scaled
    assert "of the requests at their highest rate unserved" in " ".join(result.output.split())
