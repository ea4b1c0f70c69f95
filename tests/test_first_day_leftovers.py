"""A first day without surprises, the rest of it: plan --trace answers first as plan --qps does,
plan takes --methods all as sweep does, the explorer offers only the methods that have a
drafter for the chosen model, analytic prices the draft it is told, and a --config file's
workload is read under --trace or refused by name, never replaced without a word."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from simspec.catalog.methods import cannot_draft_for, refused_on
from simspec.catalog.models import model_ids
from simspec.cli.main import app
from simspec.cli.sweep_flags import SweepFlags
from simspec.config import MethodConfig
from simspec.engine.speculators import SPECULATORS
from simspec.studies import capacity
from simspec.studies.capacity import FLEET_PLAN_COLUMNS, PLAN_COLUMNS, fleet_limit
from simspec.studies.fleet import FleetSlo
from simspec.ui.inputs import offered_methods

runner = CliRunner()
MODELS = Path(__file__).resolve().parents[1] / "simspec" / "data" / "models.yaml"


def refused(args: list[str], flag: str) -> str:
    """Run ``simspec ARGS``; assert one ``error: FLAG: ...`` line and exit 2; return it."""
    result = runner.invoke(app, args)
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: "), result.output
    return lines[0]


def arrivals(tmp_path: Path) -> str:
    """Three chat requests in a second."""
    rows = [(0.0, 100, 20), (0.5, 200, 30), (1.0, 50, 10)]
    body = "".join(f"{a},{p},{o},conversation\n" for a, p, o in rows)
    path = tmp_path / "chat.csv"
    path.write_text("arrival_s,prompt_len,output_len,domain\n" + body)
    return str(path)


def scenario(tmp_path: Path, fields: dict) -> str:
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(fields))
    return str(path)


# -- item 1: plan --trace answers first, within 80 columns -------------------------------------


def _fleet_plan() -> pd.DataFrame:
    """plan --trace's frame at tp 2: plain decoding held back by TTFT at 4 replicas, EAGLE-3
    by TPOT at 3, its recommended schedule served by one replica, n-gram by requests too long
    for any fleet."""
    names = ("method", "k", "schedule", "replicas", "gpus", "slo_attainment", "limited_by")
    names += ("cost_per_million_tokens", "meets_slo")
    sched = "k_schedule: [[1, 1024, 2]]"
    rows = [
        ("autoregressive", 0, "", 5, 10, 0.994, "ttft", 0.413, True),
        ("eagle3", 3, "", 4, 8, 0.997807, "tpot", 0.38, True),
        ("eagle3 (recommended schedule)", 2, sched, 1, 2, 1.0, "", 0.2, True),
        ("ngram", 3, "", None, None, math.nan, "unfinishable", math.nan, False),
    ]
    base = dict.fromkeys(FLEET_PLAN_COLUMNS, math.nan)
    return pd.DataFrame(
        [base | dict(zip(names, r, strict=True)) for r in rows], columns=FLEET_PLAN_COLUMNS
    )


def test_plan_trace_prints_a_compact_answer_before_the_detail_within_80_columns(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(capacity, "plan_fleet", lambda *a, **k: _fleet_plan())
    args = ["plan", "--trace", arrivals(tmp_path), "--concurrencies", "none"]
    res = runner.invoke(app, [*args, "--methods", "eagle3,ngram", "--tp", "2"])
    assert res.exit_code == 0, res.output
    answer, detail = res.stdout.split("Detail: the smallest fleet", 1)
    assert "Answer: the smallest fleet replaying" in answer and "(continued)" not in answer
    assert max(len(line) for line in answer.splitlines()) <= 80 and "…" not in answer
    cells = re.findall(r"│ (\S+(?: \S+)?) +│ (.+?) +│ (.+?) +│ (.+?) +│ (.+?) +│", answer)
    rows = {c[0]: c[1:] for c in cells}
    assert rows["autoregressive"] == ("10 = 5x2", "99.4%", "0.413", "TTFT")
    assert rows["eagle3 K=3"] == ("8 = 4x2", "99.7%", "0.38", "TPOT")
    assert rows["eagle3 sched."] == ("2 = 1x2", "100.0%", "0.2", "-")
    assert rows["ngram K=3"] == ("none <= 256", "-", "-", "too long")
    assert " limited_by " in detail and " schedule " in detail  # the detail follows, whole
    # the detail's share is the answer's, down to 0.1 % (QA: 99.7 % above, 0.998 below)
    assert "0.997" in detail and "0.998" not in detail
    assert "limited by: what the fleet one replica smaller missed" in " ".join(res.stderr.split())


def _requests(ttft_ms: list[float], tpot_ms: list[float], unfinishable: int = 0) -> pd.DataFrame:
    n = len(ttft_ms)
    return pd.DataFrame(
        {
            "ttft_ms": ttft_ms + [math.nan] * unfinishable,
            "tpot_ms": tpot_ms + [math.nan] * unfinishable,
            "unfinishable": [False] * n + [True] * unfinishable,
        }
    )


def test_a_fleet_is_limited_by_what_more_of_its_requests_missed():
    slo = FleetSlo(100.0, 10.0)
    assert fleet_limit(_requests([150, 150, 50], [5, 12, 5]), slo) == "ttft"
    assert fleet_limit(_requests([150, 50, 50], [12, 12, math.nan]), slo) == "tpot"
    assert fleet_limit(_requests([50, 150], [5, 5], unfinishable=2), slo) == "unfinishable"


def test_plan_trace_writes_what_limits_each_fleet_and_each_column_once(tmp_path):
    out = tmp_path / "plan.csv"
    args = ["plan", "--trace", arrivals(tmp_path), "--concurrencies", "none"]
    res = runner.invoke(app, [*args, "--methods", "ngram", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert res.stdout.index("Answer:") < res.stdout.index("Detail:")
    frame = pd.read_csv(out, keep_default_na=False)
    assert list(frame.columns[: len(FLEET_PLAN_COLUMNS)]) == FLEET_PLAN_COLUMNS
    assert len(set(frame.columns)) == len(frame.columns)
    assert list(frame["replicas"]) == [1, 1] and list(frame["limited_by"]) == ["", ""]


# -- item 2: plan --methods all, as sweep expands it -------------------------------------------


def _planned(monkeypatch, study: str) -> list[list[str]]:
    """Stand in for capacity.``study``: note the methods it is given, plan none of them."""
    seen: list[list[str]] = []
    columns = PLAN_COLUMNS if study == "plan" else FLEET_PLAN_COLUMNS

    def planned(deploy, methods: list[MethodConfig], *args, **kwargs) -> pd.DataFrame:
        seen.append([m.name for m in methods])
        rows = [
            dict.fromkeys(columns, math.nan)
            | {"method": m.name, "k": m.k, "limited_by": "ttft", "meets_slo": False}
            | {"max_qps_per_replica": 0.0, "schedule": ""}
            for m in methods
        ]
        return pd.DataFrame(rows, columns=columns)

    monkeypatch.setattr(capacity, study, planned)
    return seen


@pytest.mark.parametrize("model", ["qwen3-8b", "deepseek-v3"])
def test_plan_methods_all_plans_what_sweep_all_runs_and_lists_what_it_left_out(monkeypatch, model):
    seen = _planned(monkeypatch, "plan")
    res = runner.invoke(app, ["plan", "--qps", "1", "--methods", "All", "--model", model])
    assert res.exit_code == 0, res.output
    swept = SweepFlags(methods="all", model=model).sweep_config(None).methods
    assert seen == [[m.name for m in swept]]
    left = SweepFlags(methods="all").left_out({"model": model})
    for name in left:
        assert re.search(rf"^left out of --methods all: .*\b{name}\b", res.stderr, re.M), name
    assert ("draft_model" in left) == (model == "deepseek-v3")


def test_plan_trace_takes_methods_all_too(tmp_path, monkeypatch):
    seen = _planned(monkeypatch, "plan_fleet")
    args = ["plan", "--trace", arrivals(tmp_path), "--concurrencies", "none"]
    res = runner.invoke(app, [*args, "--methods", "all"])
    assert res.exit_code == 0, res.output
    swept = SweepFlags(methods="all").sweep_config(None).methods
    assert seen == [[m.name for m in swept]]
    assert "left out of --methods all: " in res.stderr


# -- item 3: the explorer offers what has a drafter for the model ------------------------------


@pytest.mark.parametrize("model", ["deepseek-v3", "gpt-oss-20b", "glm-4.6", "mixtral-8x7b"])
def test_the_explorer_does_not_offer_draft_model_where_no_packaged_draft_shares_the_tokenizer(
    model,
):
    offered, left = offered_methods(model)
    assert "draft_model" not in offered
    assert left["draft_model"].startswith(f"no packaged draft shares {model}'s")


def test_the_explorer_leaves_out_exactly_what_has_no_drafter_for_the_model():
    for model in model_ids():
        offered, left = offered_methods(model)
        lacking = {
            n: w
            for n in SPECULATORS
            if (w := cannot_draft_for(n, model) or refused_on(n, model, None))
        }
        assert left == lacking, model
        assert offered == [n for n in SPECULATORS if n not in lacking and n != "autoregressive"]
    assert "draft_model" in offered_methods("qwen3-8b")[0]


@pytest.mark.parametrize(
    ("model", "engine", "dp", "refused"),
    [
        ("llama-3.1-8b", "trtllm", 1, "eagle1"),  # TensorRT-LLM's PyTorch backend: EAGLE-3
        ("mixtral-8x7b", "vllm-v0", 1, "eagle3"),  # no SupportsEagle3 on Mixtral
        ("deepseek-v3", "sglang", 8, "ngram"),  # SGLang refuses n-gram beside DP attention
    ],
)
def test_the_explorer_does_not_offer_what_the_engine_refuses_to_run(model, engine, dp, refused):
    """QA: the Methods list was filtered by model only, so a method the engine refuses (or the
    page's own defaults after a change of engine) refused the whole page."""
    offered, left = offered_methods(model, engine, dp)
    assert refused not in offered
    assert left[refused] == refused_on(refused, model, engine, dp)
    assert "autoregressive" not in offered and offered


# -- item 4: analytic names the draft it prices ------------------------------------------------


def test_analytic_on_a_model_without_a_packaged_draft_asks_for_the_flag_it_has():
    line = refused(["analytic", "--method", "draft_model", "--model", "deepseek-v3"], "--method")
    assert "no packaged draft shares deepseek-v3's" in line and "--draft-model" in line
    assert "--draft-model" in runner.invoke(app, ["analytic", "--help"]).output


def _small_draft(tmp_path: Path) -> str:
    """A config.json of Llama-3.2-1B's vocabulary with a quarter of its layers."""
    entry = yaml.safe_load(MODELS.read_text())["llama-3.2-1b"]
    shape = {k: v for k, v in entry.items() if k not in ("hf_ids", "source")}
    shape["num_hidden_layers"] //= 4
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**shape, "model_type": "llama"}))
    return str(path)


def _draft_ms(output: str) -> float:
    return float(re.search(r"draft step ([\d.]+) ms", " ".join(output.split())).group(1))


def test_analytic_prices_the_draft_that_draft_model_names(tmp_path):
    args = ["analytic", "--method", "draft_model", "--k-max", "2"]
    packaged = runner.invoke(app, args)
    named = runner.invoke(app, [*args, "--draft-model", _small_draft(tmp_path)])
    assert packaged.exit_code == 0 and named.exit_code == 0, named.output
    assert "(draft llama-3.2-1b)" in " ".join(packaged.stderr.split())
    assert _draft_ms(named.stderr) < _draft_ms(packaged.stderr)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--method", "eagle3", "--draft-model", "llama-3.2-1b"], "draft_model method"),
        (["--method", "draft_model", "--draft-model", "qwen3-0.6b"], "share the target's"),
        (["--method", "draft_model", "--draft-model", "no-such-draft"], "unknown model"),
    ],
)
def test_analytic_refuses_a_draft_it_would_not_price_by_its_flag(args, words):
    assert words in refused(["analytic", *args], "--draft-model")


# -- item 5: a --config file's workload under --trace ------------------------------------------


@pytest.mark.parametrize("command", ["fleet", "plan"])
@pytest.mark.parametrize(
    ("workload", "key"),
    [
        ({"concurrency": 8}, "concurrency"),
        ({"lengths_from": "gsm8k"}, "lengths_from"),
        ({"requests": 50}, "requests"),
        ({"prompt": {"dist": "fixed", "mean": 64}, "output": {"mean": 8}}, "prompt"),
        ({"arrival": "poisson", "rate": 3}, "arrival"),
        ({"measure": "steady"}, "measure"),
    ],
)
def test_a_config_workload_the_trace_replaces_is_refused_by_its_key(
    tmp_path, command, workload, key
):
    config = scenario(tmp_path, {"workload": workload})
    args = [command, "--trace", arrivals(tmp_path), "--config", config]
    line = refused(
        [*args, "--concurrencies", "none"] if command == "plan" else args, f"workload.{key}"
    )
    assert "scenario.yaml" in line and "--trace sets the workload" in line


def test_a_config_replay_window_is_read_under_trace_and_its_flag_replaces_it(tmp_path):
    config = scenario(tmp_path, {"workload": {"arrival": "replay", "trace_start_s": 0.4}})
    out = tmp_path / "requests.csv"
    args = ["fleet", "--trace", arrivals(tmp_path), "--config", config, "--out", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    assert len(pd.read_csv(out)) == 2  # from 0.4 s: the file's window
    assert runner.invoke(app, [*args, "--window", "0:"]).exit_code == 0
    assert len(pd.read_csv(out)) == 3  # --window replaces it


def test_a_dumped_workload_at_its_defaults_says_nothing_the_trace_drops(tmp_path):
    config = scenario(tmp_path, {"workload": {"concurrency": 1, "lengths_from": "sharegpt"}})
    res = runner.invoke(app, ["fleet", "--trace", arrivals(tmp_path), "--config", config])
    assert res.exit_code == 0, res.output


def test_analytic_refuses_a_method_whose_draft_is_not_a_chain_of_k():
    """QA: lookahead's "best K 8" was its fixed 4-token draft priced 8 deep (its verify pass
    is fixed), and redrafter, offered, always failed on its tree."""
    from typer.testing import CliRunner

    from simspec.cli.main import app

    for method, words in (("lookahead", "does not read"), ("redrafter", "prices chains")):
        result = CliRunner().invoke(app, ["analytic", "--method", method, "--alpha", "0.7"])
        assert result.exit_code == 2 and result.output.startswith("error: --method: ")
        assert words in result.output


def test_analytic_extends_an_alpha_profile_past_its_end_as_the_help_says():
    from simspec.studies.analytic import Batch1Costs, profile_table

    costs = Batch1Costs(1.0, {k: 0.1 for k in range(1, 6)}, {k: 1.0 for k in range(1, 6)})
    table = profile_table(costs, [0.8, 0.7, 0.2])
    assert list(table.k) == [1, 2, 3, 4, 5]
    assert table.expected_tokens.iloc[3] > table.expected_tokens.iloc[2]


def test_analytic_sizes_the_server_for_its_context_not_the_models_whole_one():
    """QA: qwen3-8b on one RTX 3090 was refused at any --context for its 40,960-token default
    (a batch-1 question at 1,024 tokens), naming --max-model-len, which analytic lacks."""
    result = runner.invoke(app, ["analytic", "--model", "qwen3-8b", "--gpu", "rtx3090"])
    assert result.exit_code == 0, result.output
    line = refused(
        ["analytic", "--model", "qwen3-8b", "--gpu", "rtx3090", "--context", "40000"], "--context"
    )
    assert "40009 in all" in line and "--max-model-len" not in line


def test_analytic_refuses_a_context_past_the_max_model_len_given():
    from simspec.config import Deployment, SchedulerConfig
    from simspec.errors import InputError
    from simspec.studies.analytic import batch1_costs

    deploy = Deployment(scheduler=SchedulerConfig(max_model_len=2048))
    with pytest.raises(InputError, match="exceed the deployment's max_model_len of 2048"):
        batch1_costs(deploy, "eagle3", 8, 32768)
    assert batch1_costs(deploy, "eagle3", 8, 2039).ar_s > 0


def test_analytic_prices_one_request_whatever_the_deployments_workload():
    """The explorer's analytic tab was refused for the page's fixed 1,000-token prompts, as if
    they had to fit the 1,033-token window sized for the question (QA): the question is one
    request at --context, so the costs are the same for any workload."""
    from simspec.config import Deployment, LengthSpec, WorkloadConfig
    from simspec.studies.analytic import batch1_costs

    fixed = WorkloadConfig(
        prompt=LengthSpec(dist="fixed", mean=1000), output=LengthSpec(dist="fixed", mean=64)
    )
    long_fixed = batch1_costs(Deployment(workload=fixed), "eagle3", 8, 1024)
    assert long_fixed == batch1_costs(Deployment(), "eagle3", 8, 1024)


def test_analytic_csv_holds_an_alpha_profiles_rows_by_depth(tmp_path):
    """QA: --csv held the built-in α grid only, not the profile's table nor its best depth."""
    out = tmp_path / "an.csv"
    result = runner.invoke(app, ["analytic", "--alpha", "0.83,0.6,0.4", "--csv", str(out)])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out, keep_default_na=False)
    profile = table[table.alpha_profile == "0.83,0.6,0.4"]
    assert list(profile.k) == list(range(1, 9))
    e3 = 1 + 0.83 + 0.83 * 0.6 + 0.83 * 0.6 * 0.4
    assert profile.expected_tokens.iloc[2] == pytest.approx(e3)
    assert (table.alpha_profile == "").sum() == len(table) - 8


@pytest.mark.slow
def test_analytic_compare_says_which_way_a_batch_moved_the_speedup():
    """QA: on Qwen3-30B-A3B the simulated speedup rose from 1.76 at batch 1 to 2.76 at 32
    under a note that explained a fall."""
    from simspec.config import Deployment
    from simspec.studies.analytic import compare

    moe = compare(Deployment(model="qwen3-30b-a3b"), "eagle3", 0.8, 3, 512, (1, 32), 0.0)
    row = moe[moe.batch_size == 32].iloc[0]
    assert row.simulated_speedup > row.closed_form_speedup_batch1
    assert "speedup rises above the closed form" in row.why


def test_the_closed_form_charges_the_engines_speculative_step_host_work():
    """hf spends 2 ms of host work per speculative step outside the forwards, which the
    simulation charges (Replica._spec_overhead): the closed form's draft time holds it too
    (QA: 3.26x against the simulation's 3.10x, blamed on the last step)."""
    from simspec.catalog.hardware import load_engine
    from simspec.config import Deployment
    from simspec.studies.analytic import batch1_costs

    hf = batch1_costs(Deployment(engine="hf"), "eagle3", 2, 512)
    overhead = load_engine("hf")["spec_step_overhead_s"]
    assert overhead == pytest.approx(2e-3)
    # the draft of one token: ~1.4 ms of forwards, then the step's 2 ms of host work
    assert 3e-3 < hf.draft_s[1] < 4e-3


def test_analytic_refuses_a_verify_past_the_models_last_position():
    """QA: --context 131072 on Llama-3.1-8B said "131072 in all" for K=8's verify and priced
    nine positions past max_position_embeddings."""
    line = refused(["analytic", "--context", "131072"], "--context")
    assert "need 131081 positions, more than llama-3.1-8b's 131072" in line
    assert "give --context 131063 or less" in line
    result = runner.invoke(app, ["analytic", "--context", "131063"])
    assert result.exit_code == 0, result.output
