"""A first day without surprises: no flag is read in one mode and dropped in another, the
commands share one vocabulary (--method or --methods, --concurrencies, --seed, the deployment
flags, the explorer's SLOs), --model takes a Hugging Face snapshot folder, a script names
methods as the command line does, and a plain arrival trace replays with plain decoding."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from simspec.catalog.methods import preset_method
from simspec.catalog.models import load_hf_config, load_model
from simspec.cli.flags import with_preset_ids
from simspec.cli.main import app
from simspec.config import DEFAULT_SLO_TPOT_MS, DEFAULT_SLO_TTFT_MS

runner = CliRunner()


def refused(args: list[str], flag: str) -> str:
    """Run ``simspec ARGS``; assert one ``error: FLAG: ...`` line and exit 2; return it."""
    result = runner.invoke(app, args)
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: "), result.output
    return lines[0]


def ran(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output


def arrivals(tmp_path: Path, domain: bool = True) -> str:
    """Three requests in a second; with a domain column (chat), or the plain three columns."""
    rows = [(0.0, 100, 20), (0.5, 200, 30), (1.0, 50, 10)]
    head = "arrival_s,prompt_len,output_len" + (",domain" if domain else "")
    body = "".join(f"{a},{p},{o}" + (",conversation" if domain else "") + "\n" for a, p, o in rows)
    path = tmp_path / ("chat.csv" if domain else "plain.csv")
    path.write_text(head + "\n" + body)
    return str(path)


def snapshot(tmp_path: Path, repo: str = "models--acme--Tiny-8B") -> Path:
    """A Hub cache snapshot folder holding the config.json of Llama-3.1-8B's shapes."""
    entry = yaml.safe_load(
        (Path(__file__).parents[1] / "simspec" / "data" / "models.yaml").read_text()
    )["llama-3.1-8b"]
    config = {k: v for k, v in entry.items() if k not in ("hf_ids", "source")}
    folder = tmp_path / repo / "snapshots" / "0e9e39f2"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    return folder


# -- item 1: a flag the chosen mode does not read is an error naming it ----------------------


def test_plan_trace_refuses_qps_and_names_what_sets_the_rate(tmp_path):
    line = refused(["plan", "--trace", arrivals(tmp_path), "--qps", "40"], "--qps")
    assert "--target-qps" in line and "--rate-scale" in line


@pytest.mark.parametrize(
    ("flags", "flag", "instead"),
    [(["--qps", "100"], "--qps", "--target-qps"), (["--requests", "50"], "--requests", "--window")],
)
def test_fleet_trace_refuses_the_poisson_flags(tmp_path, flags, flag, instead):
    assert instead in refused(["fleet", "--trace", arrivals(tmp_path), *flags], flag)


@pytest.mark.parametrize(
    "flags", [["--window", "0:10"], ["--tile", "60"], ["--rate-scale", "2"], ["--target-qps", "3"]]
)
def test_fleet_without_trace_names_the_trace_flag_it_would_drop(flags):
    assert "--trace" in refused(["fleet", "--qps", "1", *flags], flags[0])


@pytest.mark.parametrize(
    "flags",
    [
        ["--window", "0:10"],
        ["--tile", "60"],
        ["--rate-scale", "2"],
        ["--target-qps", "3"],
        ["--attainment", "0.9"],
        ["--router", "random"],
        ["--concurrencies", "1,4"],
        ["--schedule-grid", "1,4"],
    ],
)
def test_plan_without_trace_refuses_what_only_a_replay_reads(flags):
    assert "give --trace" in refused(["plan", "--qps", "1", *flags], flags[0])


@pytest.mark.parametrize(
    ("flags", "flag"),
    [
        (["--method", "eagle2", "--k-max", "3"], "--k-max"),
        (["--method", "eagle2", "--json", "x.json"], "--json"),
        (["--method", "eagle3", "--tree-budgets", "8,16"], "--tree-budgets"),
        # lookahead's draft length is not K: recommend has no K to choose for it (QA)
        (["--method", "lookahead", "--json", "x.json"], "--method"),
    ],
)
def test_recommend_refuses_a_knob_the_method_does_not_read(flags, flag):
    refused(["recommend", *flags], flag)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["sweep", "--executor", "serial", "--workers", "2"], "--workers"),
        (["sweep", "--executor", "process", "--ray-address", "auto"], "--ray-address"),
        (["fleet", "--qps", "1", "--workers", "2"], "--workers"),
        (["fleet", "--qps", "1", "--replicas", "2", "--executor", "process"], "--executor"),
        (["analytic", "--alpha", "0.8,0.7", "--compare"], "--compare"),
        (["validate", "--assume-gpu", "h100_sxm", "--assume", "gpu=h200"], "--assume-gpu"),
    ],
)
def test_run_settings_that_would_not_take_effect_are_refused(args, flag):
    refused(args, flag)


def test_fleet_trace_refuses_a_token_trace_no_method_replays(tmp_path):
    args = ["fleet", "--trace", arrivals(tmp_path), "--token-trace", "sharegpt"]
    line = refused(args, "--token-trace")
    assert "ngram" in line


def test_plan_trace_plans_the_config_files_methods(tmp_path, monkeypatch):
    from simspec.studies import capacity

    planned: list[str] = []

    def plan_fleet(deploy, methods, *args, **kwargs):
        planned.extend(m.name for m in methods)
        rows = [dict.fromkeys(capacity.FLEET_PLAN_COLUMNS) | {"method": m.name} for m in methods]
        return pd.DataFrame(rows, columns=capacity.FLEET_PLAN_COLUMNS).assign(meets_slo=False)

    monkeypatch.setattr(capacity, "plan_fleet", plan_fleet)
    cfg = tmp_path / "s.yaml"
    cfg.write_text("methods:\n  - {name: pld}\n")
    args = ["plan", "--trace", arrivals(tmp_path), "--config", str(cfg)]
    ran([*args, "--concurrencies", "none"])
    assert planned == ["autoregressive", "pld"]


# -- item 7: one vocabulary ---------------------------------------------------------------------


def test_fleet_takes_methods_as_well_as_method(tmp_path):
    out = tmp_path / "r.csv"
    ran(["fleet", "--trace", arrivals(tmp_path), "--methods", "ngram", "--out", str(out)])
    assert len(pd.read_csv(out)) == 3


def test_analytic_says_when_the_best_k_is_the_largest_tried():
    """QA: α 0.9's best K was --k-max's 8 (10 at --k-max 32) without a word."""
    capped = runner.invoke(app, ["analytic", "--alpha", "0.95", "--k-max", "3"])
    assert capped.exit_code == 0, capped.output
    assert "the best K at α 0.7, 0.9, 0.95 is the largest tried (3)" in " ".join(
        capped.output.split()
    )
    roomy = runner.invoke(app, ["analytic", "--alpha", "0.6", "--k-max", "32"])
    assert roomy.exit_code == 0 and "largest tried" not in roomy.output


@pytest.mark.parametrize(
    ("base", "preset"),
    [("meta-llama/Llama-3.1-8B", "llama-3.1-8b"), ("meta-llama/Llama-2-7b-hf", "llama-2-7b")],
)
def test_a_presets_base_repo_is_refused_naming_the_preset(base, preset):
    """QA: the base repo of a preset was refused like any unknown id."""
    result = runner.invoke(app, ["models", base])
    assert result.exit_code == 2
    assert f"is the base model of preset {preset}" in " ".join(result.output.split())


def test_analytic_takes_methods_as_well_as_method():
    assert "Best K per" in ran(["analytic", "--methods", "EAGLE3"])


@pytest.mark.parametrize(
    ("command", "why"),
    [
        (["fleet", "--qps", "1"], "a fleet's replicas run one method"),
        (["recommend"], "recommend schedules one method"),
        (["analytic"], "one method's draft"),
    ],
)
@pytest.mark.parametrize("flag", ["--method", "--methods"])
def test_a_list_for_a_one_method_command_says_why(command, why, flag):
    line = refused([*command, flag, "eagle3,ngram"], flag)
    assert why in line and "(got 2: eagle3, ngram)" in line


def test_sweep_and_plan_take_method_as_well_as_methods():
    refused(["sweep", "--method", "eagle9"], "--method")
    refused(["plan", "--qps", "1", "--method", "eagle9"], "--method")


@pytest.mark.parametrize("command", ["sweep", "recommend", "plan"])
def test_concurrencies_is_the_one_documented_name_of_a_concurrency_list(command):
    shown = runner.invoke(app, [command, "--help"], terminal_width=200).output
    options = [line.split()[0] for line in shown.splitlines() if line.startswith("  --")]
    assert "--concurrencies" in options
    assert "--batch-sizes" not in options and "--schedule-grid" not in options
    assert "also spelled --batch-sizes or --schedule-grid" in " ".join(shown.split())


@pytest.mark.parametrize("alias", ["--batch-sizes", "--schedule-grid"])
def test_the_other_names_of_a_concurrency_list_are_accepted_and_named_in_errors(alias):
    for command in (["sweep"], ["recommend"], ["plan", "--trace", "azure-code"]):
        refused([*command, alias, "0,x"], alias)
        line = refused([*command, "--concurrencies", "1", alias, "2"], alias)
        assert "another name for --concurrencies" in line


def test_sweep_runs_at_the_concurrencies_given(tmp_path):
    out = tmp_path / "s.csv"
    args = ["sweep", "--concurrencies", "2", "--methods", "ngram", "--requests", "4"]
    ran([*args, "--turnovers", "1", "--executor", "serial", "--quiet", "--out", str(out)])
    assert set(pd.read_csv(out).batch_size) == {2}


def test_plan_takes_a_seed(monkeypatch, tmp_path):
    from simspec.studies import capacity

    seeds: list[int] = []

    def plan(deploy, methods, *args, **kwargs):
        seeds.append(deploy.seed)
        rows = [
            dict.fromkeys(capacity.PLAN_COLUMNS, 0)
            | {"method": m.name, "k": m.k, "limited_by": "ttft", "meets_slo": False}
            for m in methods
        ]
        return pd.DataFrame(rows, columns=capacity.PLAN_COLUMNS)

    monkeypatch.setattr(capacity, "plan", plan)
    ran(["plan", "--qps", "1", "--methods", "ngram", "--seed", "7"])
    assert seeds == [7]


def test_policy_runs_from_the_deployment_flags_without_a_config(monkeypatch):
    from simspec.cli.policy import SHOWN
    from simspec.studies import policy

    seen = []

    def run_policy(cfg):
        seen.append(cfg)
        return pd.DataFrame([dict.fromkeys(SHOWN, 1.0) | {"setting": "policy"}])

    monkeypatch.setattr(policy, "run_policy", run_policy)
    spec = {"method": "eagle3", "num_speculative_tokens": 3}
    spec["num_speculative_tokens_per_batch_size"] = [[1, 4, 3], [5, 512, 1]]
    args = ["policy", "--model", "qwen3-8b", "--gpu", "h200", "--seed", "3"]
    ran([*args, "--speculative-config", json.dumps(spec)])
    (cfg,) = seen
    assert (cfg.model, cfg.gpu, cfg.seed, cfg.method.name) == ("qwen3-8b", "h200", 3, "eagle3")
    assert [list(band) for band in cfg.policy.k_schedule] == [[1, 4, 3], [5, 512, 1]]
    assert "--speculative-config" in refused(["policy", "--model", "qwen3-8b"], "--config")


def test_fleet_and_plan_default_to_the_explorers_slos(tmp_path):
    from simspec.ui.fleet import FleetInputs

    assert (FleetInputs().slo_ttft_ms, FleetInputs().slo_tpot_ms) == (2000.0, 50.0)
    assert (DEFAULT_SLO_TTFT_MS, DEFAULT_SLO_TPOT_MS) == (2000.0, 50.0)
    for command in ("fleet", "plan"):
        shown = runner.invoke(app, [command, "--help"], terminal_width=200).output
        text = " ".join(shown.split())
        assert "(ms, finite, >= 1), the explorer's default [default: 2000.0]" in text
        assert "(ms, finite, >= 0.1), the explorer's default [default: 50.0]" in text
    output = ran(["fleet", "--trace", arrivals(tmp_path)])
    assert "TTFT <= 2000 ms, TPOT <= 50 ms" in " ".join(output.split())


# -- item 8: a snapshot folder as --model; method names in Python -------------------------------


def test_a_snapshot_folder_reads_its_config_json(tmp_path):
    folder = snapshot(tmp_path)
    shape = load_model(str(folder))
    assert shape == load_hf_config(folder / "config.json")
    assert shape.id == "acme/Tiny-8B"  # the Hub cache's repo, not the revision's hash
    assert "acme/Tiny-8B" in ran(["models", str(folder)])


def test_a_scenario_names_the_config_json_a_folder_holds(tmp_path):
    """A run's key hashes the files a scenario names: the folder's config.json is named."""
    folder = snapshot(tmp_path)
    assert with_preset_ids({"model": str(folder)})["model"] == str(folder / "config.json")


def test_a_folder_without_config_json_is_one_line_naming_model_and_the_file(tmp_path):
    line = refused(["models", str(tmp_path)], "model")
    assert "has no config.json" in line and "--model DIR" in line
    repo = snapshot(tmp_path, "models--acme--Other").parents[1]
    assert "snapshots/REVISION" in refused(["sweep", "--model", str(repo)], "model")


def test_python_sweep_takes_method_names_as_the_command_line_does():
    from simspec.studies.sweep import SweepConfig

    cfg = SweepConfig.model_validate({"methods": ["autoregressive", "EAGLE3", "eagle"]})
    assert cfg.methods == [
        preset_method("autoregressive"),
        preset_method("eagle3"),
        preset_method("eagle1", engine="vllm"),  # the default engine drafts it as a chain
    ]
    gsm = {"methods": ["ngram"], "workload": {"lengths_from": "gsm8k"}}
    assert SweepConfig.model_validate(gsm).methods == [preset_method("ngram", "gsm8k")]
    with pytest.raises(ValueError, match="methods: unknown method 'eagle9'"):
        SweepConfig.model_validate({"methods": ["eagle9"]})


def test_python_sweep_runs_methods_named_by_string():
    import simspec

    table = simspec.sweep(
        {
            "methods": ["autoregressive", "ngram"],
            "batch_sizes": [1],
            "workload": {"requests": 4, "turnovers": 1},
        }
    )
    assert set(table.method) == {"autoregressive", "ngram"}


# -- item 16: plain decoding replays a plain trace ----------------------------------------------


def test_fleet_replays_a_plain_trace_with_plain_decoding(tmp_path):
    out = tmp_path / "r.csv"
    ran(["fleet", "--trace", arrivals(tmp_path, domain=False), "--out", str(out)])
    assert len(pd.read_csv(out)) == 3


def test_a_dataset_is_asked_for_only_when_a_method_takes_acceptance_from_one(tmp_path):
    plain = arrivals(tmp_path, domain=False)
    line = refused(["fleet", "--trace", plain, "--method", "eagle3"], "--dataset")
    assert "eagle3 takes its acceptance from a dataset" in line and "names no domain" in line
    ran(["fleet", "--trace", plain, "--method", "eagle3", "--alpha", "0.7"])
    ran(["fleet", "--trace", plain, "--method", "eagle3", "--dataset", "gsm8k"])


def test_a_refused_field_names_the_flag_that_sets_it():
    """--turnovers 2000 was refused as workload.turnovers alone, a name the user never typed
    (QA): the line ends with the flag."""
    result = CliRunner().invoke(app, ["sweep", "--turnovers", "2000"])
    line = result.output.strip().splitlines()[-1]
    assert result.exit_code == 2 and line.startswith("error: workload.turnovers: ")
    assert "--turnovers" in line


@pytest.mark.parametrize(
    ("args", "field", "flag"),
    [
        (["sweep", "--tau", "9", "--k", "4"], "methods.1.acceptance", "--tau"),
        (
            ["plan", "--trace", "azure-conv", "--rate-scale", "0"],
            "workload.rate_scale",
            "--rate-scale",
        ),
        (["plan", "--trace", "azure-conv", "--tile", "0"], "workload.tile_s", "--tile"),
        (
            ["sweep", "--prompt-len", "100000000", "--output-len", "10"],
            "workload.prompt.mean",
            "--prompt-len",
        ),
    ],
)
def test_a_refused_method_or_workload_field_names_its_flag_too(args, field, flag):
    """QA: --alpha 1.5 was refused as methods.1.acceptance alone, --rate-scale 0 as
    workload.rate_scale; each line now ends with the flag the user typed."""
    result = CliRunner().invoke(app, args)
    line = result.output.strip().splitlines()[-1]
    assert result.exit_code == 2 and line.startswith(f"error: {field}: "), line
    assert f"(the flag {flag}, or {field} in a --config file)" in line


@pytest.mark.parametrize(
    "args",
    [
        ["sweep", "--alpha", "1.5"],
        ["recommend", "--method", "eagle3", "--alpha", "2"],
        ["fleet", "--method", "eagle3", "--alpha", "-0.1", "--qps", "1"],
    ],
)
def test_an_alpha_outside_0_1_is_refused_by_the_flag_with_its_range(args):
    """QA: --alpha 1.5 was refused as methods.1.acceptance (with the flag after it), an index
    into a list the user never wrote: the flag refuses it, saying its range."""
    result = CliRunner().invoke(app, args)
    line = result.output.strip().splitlines()[-1]
    assert result.exit_code == 2 and line.startswith("error: --alpha: must be in [0, 1] (got")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["sweep", "--speculative-config", ""], "--speculative-config"),
        (["sweep", "--methods", ""], "--methods"),
        (["sweep", "--dataset", " "], "--dataset"),
        (["recommend", "--model", ""], "--model"),
    ],
)
def test_an_empty_flag_is_refused_not_read_as_left_out(args, flag):
    """QA: --speculative-config '' ran the default three methods at exit 0, as if not given."""
    result = CliRunner().invoke(app, args)
    line = result.output.strip().splitlines()[-1]
    assert result.exit_code == 2 and line.startswith(f"error: {flag}: is empty"), line


def test_a_rate_file_a_profile_and_analytic_refuse_in_words_the_user_can_act_on(tmp_path):
    """QA: a rate file with one NaN row was "needs finite numbers in at least one row"; a
    profile that is no mapping leaked "argument after ** must be a mapping"; analytic offered
    the plain decoding it refuses as a choice."""
    rates = tmp_path / "r.csv"
    rates.write_text("time_s,rate\n0,2\n10,nan\n20,3\n")
    args = ["policy", "--rate-csv", str(rates), "--config", "examples/policy.yaml"]
    line = CliRunner().invoke(app, args).output.strip().splitlines()[-1]
    assert "line 3 (10, nan): every time_s and rate must be a finite number" in line
    text = tmp_path / "p.yaml"
    text.write_text("just a line\n")
    line = CliRunner().invoke(app, ["sweep", "--profile", str(text)]).output.strip()
    assert "a profile is a mapping of fields" in line and "**" not in line
    line = CliRunner().invoke(app, ["analytic", "--method", "autoregressive"]).output.strip()
    assert line.startswith("error: --method: choose a speculative method: draft_model")


def test_nan_for_a_bounded_field_says_it_is_no_number():
    """QA: --temperature nan read "Input should be less than or equal to 5", one side of a
    range NaN fails on both."""
    line = CliRunner().invoke(app, ["sweep", "--temperature", "nan"]).output.strip()
    assert line.startswith("error: temperature: must be a finite number, not NaN"), line


def test_a_method_listed_twice_is_refused():
    """QA: --methods eagle3,eagle3 ran it twice, into two identical rows."""
    line = CliRunner().invoke(app, ["sweep", "--methods", "eagle3,ngram,eagle3"]).output.strip()
    assert line == "error: --methods: eagle3 listed more than once: name each once", line
    # two spellings of one method (case, vLLM's name) are the same method twice (QA)
    line = CliRunner().invoke(app, ["sweep", "--methods", "medusa,MEDUSA1"]).output.strip()
    assert line == "error: --methods: medusa/MEDUSA1 listed more than once: name each once", line


def test_plan_recommend_fleet_and_policy_take_the_scheduler_flags(tmp_path):
    """QA: --max-running-requests and --max-model-len were sweep's, compare's and calibrate
    bench's only (plan: "No such option"); they now go on top of --config's scheduler:."""
    from simspec.cli.flags import DeploymentFlags

    cfg = tmp_path / "c.yaml"
    cfg.write_text("scheduler: {gpu_memory_utilization: 0.5}\n")
    deploy = DeploymentFlags(max_num_seqs=64, max_model_len=4096).deployment(cfg)
    assert deploy.scheduler.max_num_seqs == 64 and deploy.scheduler.max_model_len == 4096
    assert deploy.scheduler.gpu_memory_utilization == 0.5
    for command in ("plan", "recommend", "fleet", "policy"):
        text = CliRunner().invoke(app, [command, "--help"]).output
        assert "--max-num-seqs" in text and "--max-model-len" in text, command


def test_nan_for_a_ranged_flag_says_it_is_no_number():
    """QA: plan --qps nan read "Input should be less than or equal to 10000000" (the range
    check's one side); the value NaN is named instead, whichever way the flag is spelled."""
    from simspec.cli.main import nan_named

    said = "Invalid value for '--qps': Input should be less than or equal to 10000000"
    for argv in (["plan", "--qps", "nan"], ["plan", "--qps=NaN"]):
        # without the one bound's text, which NaN fails on both sides (QA: it read as a
        # contradiction); the CLI adds the option's whole range after it
        nan = "Invalid value for '--qps': must be a finite number, not NaN"
        assert nan_named(said, argv) == nan
    assert nan_named(said, ["plan", "--qps", "1e9"]) == said
    # a count's flag asks for a whole number, not a finite one (QA: --k nan read "must be a
    # finite number, not NaN (Input should be a valid integer ...)")
    count = "Invalid value for '--k': Input should be a valid integer, unable to parse string"
    assert nan_named(count, ["sweep", "--k", "nan"]) == (
        "Invalid value for '--k': must be a whole number, not NaN"
    )
    # an option with two names, given by either (QA: --max-num-seqs nan kept pydantic's text)
    two = (
        "Invalid value for '--max-num-seqs' / '--max-running-requests': Input should be a "
        "valid integer, unable to parse string as an integer"
    )
    for argv in (["recommend", "--max-num-seqs", "nan"], ["plan", "--max-running-requests=nan"]):
        assert nan_named(two, argv) == (
            "Invalid value for '--max-num-seqs' / '--max-running-requests': must be a whole "
            "number, not NaN"
        )


def test_a_concurrency_grid_below_one_says_the_range():
    result = CliRunner().invoke(app, ["recommend", "--concurrencies", "0,4"])
    assert result.exit_code == 2
    assert "--concurrencies: each concurrency must be in [1, 16,384] (got 0)" in result.output


def test_a_parquet_output_without_a_parquet_engine_is_refused_before_any_run(tmp_path, monkeypatch):
    """QA: without pyarrow a sweep ran every cell, then failed with a traceback and left its
    journal behind."""
    import simspec.cli.tables as tables

    monkeypatch.setattr(tables, "parquet_engine", lambda: False)
    out = tmp_path / "r.parquet"
    args = ["sweep", "--methods", "eagle3", "--concurrencies", "1", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: --out: ") and "pyarrow" in result.output
    assert not list(tmp_path.iterdir())


def test_table_cells_are_shown_as_written_not_read_as_markup(capsys):
    """QA: a case file's series "qwen3 sweep [/concurrency]" crashed validate with a
    MarkupError after its outputs were written, and "[bold]B[/bold]" was shown as "B"."""
    import pandas as pd

    from simspec.cli.tables import print_frame

    print_frame(pd.DataFrame({"series": ["sweep [/concurrency]", "[bold]B[/bold]"]}), "t")
    out = capsys.readouterr().out
    assert "sweep [/concurrency]" in out and "[bold]B[/bold]" in out


def test_a_method_named_twice_is_refused():
    """QA: plan --methods eagle3,eagle3 ran it twice and called the two within noise."""
    line = refused(["plan", "--qps", "1", "--methods", "eagle3,EAGLE3"], "--methods")
    assert "eagle3 named more than once" in line


def test_plan_names_a_speculation_schedule_not_a_fixed_k(monkeypatch):
    """QA: a --speculative-config's Dynamic SD bands were shown as eagle3 K=3."""
    from simspec.studies import capacity

    def plan(deploy, methods, *args, **kwargs):
        rows = [
            dict.fromkeys(capacity.PLAN_COLUMNS, 1)
            | {"method": m.name, "k": m.k, "schedule": capacity.schedule_of(m)}
            | {"limited_by": "ttft", "meets_slo": True, "replicas": 1, "gpus": 1}
            for m in methods
        ]
        return pd.DataFrame(rows, columns=capacity.PLAN_COLUMNS)

    monkeypatch.setattr(capacity, "plan", plan)
    spec = (
        '{"method": "eagle3", "num_speculative_tokens": 3, '
        '"num_speculative_tokens_per_batch_size": [[1, 8, 3], [9, 1024, 1]]}'
    )
    out = ran(["plan", "--qps", "1", "--speculative-config", spec])
    assert "eagle3 sched." in out and "eagle3 K=3" not in out
    assert "k_schedule: [[1, 8, 3], [9, 1024, 1]]" in " ".join(out.split())


def test_a_token_budget_that_tips_the_memory_over_names_the_budget_not_tp():
    """QA: plain decoding, the model fitting at tp=8, was told its draft tipped it over and to
    raise tp."""
    result = runner.invoke(app, [
        "sweep", "--model", "deepseek-r1", "--gpu", "h200", "--tp", "8", "--methods",
        "autoregressive", "--max-num-batched-tokens", "1048576", "--max-model-len", "8192",
    ])  # fmt: skip
    text = " ".join(result.output.split())
    assert result.exit_code != 0
    assert "the activations of the run's token budget tip it over" in text
    assert "lower the token budget (--max-num-batched-tokens) or pick a larger GPU" in text
    assert "draft's weights" not in text and "raise tp" not in text


def test_a_bound_refused_says_the_whole_range(tmp_path):
    """QA: fleet --replicas 0 read "Input should be greater than or equal to 1" where the help
    says [1, 1024]; the entry point adds the range the option takes."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "simspec.cli.main", "fleet", "--replicas", "0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    lines = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.strip()]
    assert done.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: Invalid value for '--replicas'")
    assert lines[0].endswith("the range is [1, 1024]")


def test_a_ray_address_nothing_answers_on_is_refused_not_waited_on():
    """QA: --ray-address 127.0.0.1:1 hung a sweep past 11 minutes (Ray's client retries a
    HOST:PORT for ever); nothing answering there is refused before Ray is asked."""
    from simspec.errors import InputError
    from simspec.studies.runs.executors import _answers

    with pytest.raises(InputError, match="nothing answers at 127.0.0.1:1"):
        _answers("127.0.0.1:1")
    with pytest.raises(InputError, match="nothing answers at 127.0.0.1:1"):
        _answers("ray://127.0.0.1:1")
    _answers("auto")  # not a HOST:PORT: Ray's to resolve
