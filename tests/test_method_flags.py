"""A measured acceptance reaches every command: plan, recommend and policy take sweep's method
flags (one shared set, :class:`simspec.cli.method_flags.MethodFlags`), a scenario file's method
is what runs, and a flag no chosen method reads is an error naming it."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from simspec.cli.flags import DeploymentFlags
from simspec.cli.main import app
from simspec.cli.method_flags import MethodFlags
from simspec.cli.policy import policy_config
from simspec.cli.sweep_flags import SweepFlags
from simspec.errors import InputError
from simspec.ui import downloads, inputs

runner = CliRunner()
# a plan that answers in seconds: fixed short lengths, a few seconds of arrivals per probe
FAST_PLAN = ["plan", "--qps", "5", "--slo-ttft-ms", "3000", "--slo-tpot-ms", "40"]
FAST_PLAN += ["--duration", "2"]
SHORT = "workload: {lengths_from: null, prompt: {mean: 128}, output: {mean: 64}}\n"
EAGLE_K4 = "{name: eagle3, k: 4, acceptance: {tau: 2.9, tau_k: 4}}"


@pytest.mark.slow
def test_plan_runs_the_config_files_method_not_the_preset(tmp_path, short_plan_probes):
    cfg = tmp_path / "s.yaml"
    cfg.write_text(SHORT + f"method: {EAGLE_K4}\n")
    out = tmp_path / "plan.csv"
    result = runner.invoke(app, [*FAST_PLAN, "--config", str(cfg), "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out).set_index("method")
    assert list(frame.index) == ["autoregressive", "eagle3"]
    assert frame.loc["eagle3", "k"] == 4 and frame.loc["eagle3", "acceptance"] == "tau=2.9@k=4"
    # the same file in a sweep's form (a list of methods) is honoured the same way
    _, methods = DeploymentFlags().planned(cfg, None, ["eagle3", "ngram"], "--methods")
    cfg.write_text(SHORT + f"methods: [{{name: autoregressive}}, {EAGLE_K4}]\n")
    _, listed = DeploymentFlags().planned(cfg, None, ["eagle3", "ngram"], "--methods")
    assert methods == [m for m in listed if m.name != "autoregressive"]


@pytest.mark.slow
def test_plan_takes_a_measured_tau_at_its_k(tmp_path, short_plan_probes):
    flags = DeploymentFlags(tau=2.9, tau_k=4, k=4)
    _, methods = flags.planned(None, ["eagle3"], ["eagle3", "ngram"], "--methods")
    (m,) = methods
    assert m.k == 4 and (m.acceptance.tau, m.acceptance.tau_k) == (2.9, 4)
    cfg = tmp_path / "s.yaml"
    cfg.write_text(SHORT)
    measured = ["--tau", "2.9", "--tau-k", "4", "--k", "4", "--config", str(cfg)]
    result = runner.invoke(app, [*FAST_PLAN, "--methods", "eagle3", *measured])
    assert result.exit_code == 0, result.output
    assert "tau=2.9@k=4" in result.output


def test_a_speculative_config_reaches_plan_with_its_own_k():
    spec = '{"method": "eagle3", "num_speculative_tokens": 5}'
    _, methods = DeploymentFlags(speculative_config=spec).planned(None, None, ["x"], "--methods")
    assert [m.name for m in methods] == ["autoregressive", "eagle3"] and methods[1].k == 5


def test_a_speculative_config_without_a_tree_drafts_a_chain_as_vllm_does():
    """vLLM generates a chain when the config gives no speculative_token_tree: EAGLE-1's and
    Medusa's preset trees run as chains of num_speculative_tokens, their τ still read as
    measured on the tree; a config's own tree stays a tree."""
    for method, name in (("eagle", "eagle1"), ("medusa", "medusa1")):
        spec = f'{{"method": "{method}", "num_speculative_tokens": 3}}'
        _, methods = DeploymentFlags(speculative_config=spec).planned(None, None, ["x"], "--m")
        m = methods[1]
        assert (m.name, m.k, m.tree, m.tree_nodes) == (name, 3, "chain", None)
        assert m.acceptance.tau_tree_nodes  # the preset's τ, measured on its tree
    tree = '{"method": "eagle", "speculative_token_tree": "[(0,), (1,), (0, 0)]"}'
    _, methods = DeploymentFlags(speculative_config=tree).planned(None, None, ["x"], "--m")
    assert methods[1].tree == "static" and methods[1].k == 2
    # num_speculative_tokens counts the tree's nodes, as vLLM's users give it (QA: 1 beside a
    # tree of 3 ran the tree without a word)
    nodes = tree.replace('"method"', '"num_speculative_tokens": 3, "method"')
    assert DeploymentFlags(speculative_config=nodes).planned(None, None, ["x"], "--m")[1][1].k == 2
    with pytest.raises(InputError, match="speculative_token_tree drafts 3 tokens"):
        wrong = tree.replace('"method"', '"num_speculative_tokens": 1, "method"')
        DeploymentFlags(speculative_config=wrong).planned(None, None, ["x"], "--m")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--methods", "lookahead", "--k", "3"], "--k"),
        (["--methods", "eagle3", "--draft-model", "llama-3.2-1b"], "--draft-model"),
        (["--methods", "autoregressive", "--alpha", "0.6"], "--alpha"),
        (["--methods", "eagle3", "--speculative-config", '{"method": "ngram"}'], "--methods"),
        (["--tau-k", "4"], "--tau-k"),
    ],
)
def test_a_flag_no_chosen_method_reads_is_an_error_naming_it(args, flag):
    for command in (FAST_PLAN, ["sweep", "--requests", "4", "--batch-sizes", "1"]):
        result = runner.invoke(app, [*command, *args])
        assert result.exit_code == 2, result.output
        assert result.output.startswith(f"error: {flag}"), result.output


def test_k_beside_a_speculative_config_is_refused_as_its_own_sets_the_draft():
    # an explicit tree's depth is the tree's, and num_speculative_tokens a chain's length
    spec = '{"method": "eagle", "speculative_token_tree": "[(0,), (1,), (0, 0)]"}'
    with pytest.raises(Exception, match="--speculative-config's num_speculative_tokens"):
        SweepFlags(speculative_config=spec, k=4).sweep_config(None)


POLICY = (
    "seed: 0\n"
    f"method: {EAGLE_K4}\n"
    "policy: {k_schedule: [[1, 4, 4], [5, 64, 2]]}\n"
    "workload: {arrival: poisson, lengths_from: null, requests: 12, rate: 8, "
    "prompt: {mean: 64}, output: {mean: 32}}\n"
)


def test_policy_keeps_the_files_acceptance_and_takes_the_method_flags(tmp_path):
    import yaml

    data = yaml.safe_load(POLICY)
    cfg = policy_config(data, MethodFlags())
    assert cfg.method.k == 4 and (cfg.method.acceptance.tau, cfg.method.acceptance.tau_k) == (
        2.9,
        4,
    )
    tuned = policy_config(data, MethodFlags(alpha=0.5))
    assert tuned.method.k == 4 and tuned.method.acceptance.alpha == 0.5
    # the bands set every step's K: a --k would change nothing (QA: its CSV row said k=5)
    with pytest.raises(InputError, match="--k: the policy's k_schedule sets every step's K"):
        policy_config(data, MethodFlags(k=5))
    by_size = {**data, "policy": {"disable_by_batch_size": 8}}
    assert policy_config(by_size, MethodFlags(k=5)).method.k == 5  # no bands: --k runs
    spec = (
        '{"method": "ngram", "num_speculative_tokens": 3, '
        '"num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 64, 1]]}'
    )
    no_policy = {k: v for k, v in data.items() if k not in ("method", "policy")}
    vllm = policy_config(no_policy, MethodFlags(speculative_config=spec))
    assert vllm.method.name == "ngram" and vllm.policy.k_schedule == [(1, 4, 3), (5, 64, 1)]
    path = tmp_path / "p.yaml"
    path.write_text(POLICY)
    out = tmp_path / "p.csv"
    result = runner.invoke(app, ["policy", "--config", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert (frame[frame.method == "eagle3"].acceptance == "tau=2.9@k=4").all()
    # the layout in full, as sweep writes it (QA: ep and dp runs were told apart by nothing)
    assert {"tp", "pp", "ep", "dp"} <= set(frame.columns) and (frame.dp == 1).all()
    bad = runner.invoke(app, ["policy", "--config", str(path), "--speculative-config", spec])
    assert bad.exit_code == 2 and "--speculative-config" in bad.output


def test_a_dynamic_sd_band_past_num_speculative_tokens_is_capped_as_vllm_caps_it(capsys):
    """vLLM's build_dynamic_sd_schedule_lookup runs each band at min(num_speculative_tokens,
    K) (QA: simspec refused the config vLLM accepts); vLLM's 5-item context form is refused
    naming what it is."""
    from simspec.catalog.vllm import to_method

    spec = (
        '{"method": "eagle3", "num_speculative_tokens": 3, '
        '"num_speculative_tokens_per_batch_size": [[1, 30, 5], [31, 1024, 2]]}'
    )
    cfg = policy_config({}, MethodFlags(speculative_config=spec))
    assert cfg.method.k == 3 and cfg.policy.k_schedule == [(1, 30, 3), (31, 1024, 2)]
    assert "band [1, 30, 5] drafts more than num_speculative_tokens 3" in " ".join(
        capsys.readouterr().err.split()
    )
    five = {"method": "eagle3", "num_speculative_tokens_per_batch_size": [[1, 8, 1, 4096, 3]]}
    with pytest.raises(InputError, match="batch-size and context form"):
        to_method(five)


def test_a_tau_measured_on_a_tree_says_so_in_the_acceptance_column():
    """QA: a tree-measured preset τ run as a chain (realised 1.88) and a chain's --tau 2.59
    (realised 2.57) both read tau=2.59@k=4."""
    from simspec.catalog.methods import preset_method
    from simspec.studies.sweep import describe_acceptance

    tree = preset_method("medusa1", "sharegpt", None, "vicuna-7b", engine="vllm")
    assert describe_acceptance(tree).endswith("on a 63-node tree,topk=10")
    chain = tree.model_copy(
        update={"acceptance": tree.acceptance.model_copy(update={"tau_tree_nodes": None})}
    )
    assert "tree" not in describe_acceptance(chain)


def test_the_explorer_takes_a_measured_tau_for_its_plan_and_schedule():
    inp = inputs.ExplorerInputs(acceptance="tau", tau=2.9, tau_k=4, k=4)
    m = inputs.method_for(inp, "eagle3")
    assert m.k == 4 and (m.acceptance.tau, m.acceptance.tau_k) == (2.9, 4)
    tree = inputs.method_for(inp, "eagle2")  # a tree's tau is tied to the tree it ran
    assert tree.acceptance.tau_tree_nodes == tree.tree_nodes
    assert downloads.scenario_columns(inp)["tau"] == 2.9
    assert inputs.method_for(inputs.ExplorerInputs(acceptance="alpha"), "eagle3").acceptance


def test_a_named_tree_method_drafts_as_its_engine_does():
    """On vLLM (the default engine) EAGLE-1 and Medusa draft chains of their depth unless a
    tree is given; on SGLang, which drafts EAGLE heads in the tree it picks for the model
    (Llama: steps 5, topk 4, 8 tokens), EAGLE-1 drafts that budget in its static tree and
    Medusa (which SGLang does not ship) its preset tree. The same in a sweep file naming the
    methods, and in the explorer, where a tree budget asked for is a tree given."""
    from simspec.studies.sweep import SweepConfig

    for engine, trees in (
        (None, ["chain", "chain"]),
        ("vllm", ["chain", "chain"]),
        ("sglang", ["static", "static"]),
    ):
        data = {} if engine is None else {"engine": engine}
        methods = MethodFlags().chosen(data, ["eagle1", "medusa1"], ["x"], "sharegpt")
        assert [m["tree"] for m in methods] == trees, engine
        cfg = SweepConfig(methods=["eagle1"], **({"engine": engine} if engine else {}))
        assert cfg.methods[0].tree == trees[0]
    page = inputs.ExplorerInputs(methods=["eagle1"])
    assert inputs.method_for(page, "eagle1").tree == "chain"
    budget = page.model_copy(update={"tree_nodes": 16})
    m = inputs.method_for(budget, "eagle1")
    assert (m.tree, m.tree_nodes) == ("static", 16)


@pytest.mark.parametrize("k", ["0", "65"])
def test_k_out_of_range_names_the_flag(k):
    from typer.testing import CliRunner

    from simspec.cli.main import app

    res = CliRunner().invoke(app, ["sweep", "--k", k, "--methods", "eagle3", "--batch-sizes", "1"])
    assert res.exit_code != 0 and "--k: must be 1 to 64" in " ".join(res.output.split())


def test_the_explorer_replays_each_methods_own_records_of_an_uploaded_trace(tmp_path):
    """Each method replays its own acc_len key; one the file lacks borrows the first, saying
    so (QA: ngram replayed eagle3's records as its own). A tree method drafts a chain with its
    tree fields dropped (QA: SGLang's eagle3 kept tree_nodes and the page refused itself)."""
    import json

    from simspec.engine.build import setup_replica

    path = tmp_path / "two.jsonl"
    rec = {"prompt_len": 100, "output_len": 40, "acc_len": {"eagle3": [4] * 10, "ngram": [1] * 40}}
    path.write_text("\n".join(json.dumps(rec) for _ in range(8)) + "\n")
    inp = inputs.ExplorerInputs(acceptance="trace", trace_path=str(path), engine="sglang")
    eagle, ngram = inputs.method_for(inp, "eagle3"), inputs.method_for(inp, "ngram")
    assert eagle.acceptance.acc_len_method == "eagle3" and not eagle.acceptance.source
    assert ngram.acceptance.acc_len_method == "ngram"
    assert eagle.tree == "chain" and eagle.tree_nodes is None and eagle.tree_topk is None
    setup_replica(inputs.scenario_for(inp, 4, eagle))  # a method the page can run
    medusa = inputs.method_for(inp, "medusa1")
    assert medusa.acceptance.acc_len_method == "eagle3"
    assert "borrowed" in medusa.acceptance.source and "medusa1" in medusa.acceptance.source


def test_a_tree_budget_leaves_chain_methods_and_sglangs_own_shape_alone():
    """The explorer's tree budget changes the node count of a tree, and turns a vLLM chain
    into a tree; it leaves chain-only methods as the engine drafts them, and keeps SGLang's
    own steps and top-k (QA: a budget on SGLang had turned its MTP 3-1-4 into K 1)."""
    mtp = {"engine": "sglang", "model": "deepseek-v3"}
    before = inputs.method_for(inputs.ExplorerInputs(**mtp), "mtp")
    after = inputs.method_for(inputs.ExplorerInputs(**mtp, tree_nodes=16), "mtp")
    assert (after.k, after.tree) == (before.k, before.tree) == (3, "chain")
    e3 = inputs.method_for(inputs.ExplorerInputs(engine="sglang", tree_nodes=16), "eagle3")
    assert (e3.k, e3.tree, e3.tree_nodes, e3.tree_topk) == (5, "dynamic", 16, 4)
    vllm = inputs.method_for(inputs.ExplorerInputs(engine="vllm", tree_nodes=16), "eagle3")
    assert vllm.tree == "dynamic" and vllm.tree_nodes == 16


def test_the_explorer_says_what_the_sweep_says_of_sampling_and_the_engines_shape():
    """Above T=1 acceptance is held at its T=1 value, top-p does nothing at T=0, and SGLang
    picks its own draft shape: the page's caption lines say so, as the sweep's notes do (QA)."""
    hot = " ".join(inputs.provenance_lines(inputs.ExplorerInputs(temperature=1.5)))
    assert "held at its T=1 value" in hot
    greedy = " ".join(inputs.provenance_lines(inputs.ExplorerInputs(top_p=0.5)))
    assert "no effect at temperature 0" in greedy
    sglang = " ".join(inputs.provenance_lines(inputs.ExplorerInputs(engine="sglang")))
    assert "SGLang" in sglang and "picks steps" in sglang
    # and what it says of vLLM 0.14+'s asynchronous scheduling (QA: sweep's note, not the page's)
    assert "--async-scheduling" in " ".join(inputs.provenance_lines(inputs.ExplorerInputs()))
    assert "--async-scheduling" not in sglang


def test_a_tau_past_k_plus_one_is_refused_naming_the_pages_control():
    """With the K τ was measured at left empty each method's own K holds: a τ past K + 1 is
    refused in words about the page's control, not the config's tau_k (QA)."""
    with pytest.raises(InputError, match="at most 4 for eagle3 measured at K=3") as err:
        inputs.method_for(inputs.ExplorerInputs(acceptance="tau", tau=6.0), "eagle3")
    assert err.value.field == "Measured τ (tokens per step)"


def test_the_plan_download_says_its_price_how_it_probed_and_whose_acceptance():
    """plan.csv carries the GPU-hour price its cost is at, the Poisson probes it ran (not
    the page's closed-loop columns) and each method's provenance, as `simspec plan --out`
    does (QA)."""
    from io import StringIO

    from simspec.studies.capacity import Slo

    frame = pd.DataFrame(
        {"replicas": [2, 1], "gpus": [2, 1], "method": ["autoregressive", "eagle3"]}
    )
    frame["k"] = [0, 3]
    text = downloads.plan_csv(frame, inputs.ExplorerInputs(), 20.0, Slo(2000, 50), 3.5, 60.0)
    out = pd.read_csv(StringIO(text))
    assert (out["gpu_hour_price"] == 3.5).all() and (out["probe_arrival"] == "poisson").all()
    assert not {"turnovers", "requests_min", "arrival"} & set(out.columns)
    assert out["acceptance_source"].str.len().gt(0).all() and "engine_profile" in out
    assert (out["percentile"] == 99).all()  # what the slo_* columns hold, as plan --out says


def test_a_policy_replaying_a_trace_takes_the_traces_acceptance_dataset(tmp_path):
    """A replayed trace's dataset or domain column sets the methods' acceptance, as fleet and
    plan read it (QA: policy replayed azure-code with ShareGPT's, TPOT 26 % off); a trace that
    names none is refused for a method that needs one, and --dataset then names it (QA: it
    was refused as lengths_from)."""
    from simspec.cli.flags import DeploymentFlags

    replay = {"arrival": "replay", "arrival_trace": "azure-code", "trace_end_s": 60}
    data = {"method": {"name": "eagle3", "k": 3}, "policy": {"k_schedule": [[1, 4, 3], [5, 64, 1]]}}
    cfg = policy_config({**data, "workload": replay}, MethodFlags())
    assert cfg.method.acceptance.acc_len == "instructcoder"
    plain = tmp_path / "plain.csv"
    plain.write_text("arrival_s,prompt_len,output_len\n0,10,20\n1,10,20\n")
    unnamed = {**data, "workload": {"arrival": "replay", "arrival_trace": str(plain)}}
    with pytest.raises(InputError, match="names no domain"):
        policy_config(unnamed, MethodFlags())
    named = policy_config(unnamed, DeploymentFlags(dataset="gsm8k"))
    assert named.method.acceptance.acc_len == "gsm8k"
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(unnamed))
    out = runner.invoke(app, ["policy", "--config", str(path), "--dataset", "gsm8k"])
    assert out.exit_code == 0, out.output


def test_a_policy_past_the_commands_request_bound_is_refused_before_it_runs():
    """Every setting runs the workload: 6 settings x 1M requests is past MAX_TOTAL_REQUESTS
    (QA: it started, as sweep and recommend refuse)."""
    from simspec.studies.policy import run_policy

    data = {
        "method": {"name": "eagle3", "k": 4},
        "policy": {"k_schedule": [[1, 2, 4], [3, 8, 3], [9, 32, 2], [33, 1024, 1]]},
        "workload": {"arrival": "poisson", "rate": 50, "requests": 1_000_000},
    }
    with pytest.raises(InputError, match=r"workload.requests: 6 settings x 1,000,000 requests"):
        run_policy(policy_config(data, MethodFlags()))


def test_a_given_tau_runs_with_its_drafter_and_domains_measured_spread():
    """A mean τ says nothing of how requests differ: --tau takes the spread the packaged
    traces of its drafter and domain measured, as validate runs a measured_tau (QA: requests
    identical, TPOT p99 20-38 % below the traces')."""
    from simspec.catalog.methods import acceptance_spread

    eagle = MethodFlags(tau=2.9, tau_k=4).tuned({"name": "eagle3", "k": 4}, "gsm8k")
    assert eagle["acceptance"]["spread"] == acceptance_spread("learned", "math")[0]
    lookup = MethodFlags(tau=1.5, tau_k=3).tuned({"name": "ngram", "k": 3}, "sharegpt")
    assert lookup["acceptance"]["spread"] == acceptance_spread("lookup", "chat")[0]
    assert (
        "spread"
        not in MethodFlags(alpha=0.7).tuned({"name": "eagle3", "k": 3}, "sharegpt")["acceptance"]
    )


def test_the_explorers_tau_takes_the_measured_spread_as_the_cli_does():
    """The page's τ with its spread left to the traces runs each method's drafter and domain
    as --tau does (QA: the page ran identical requests where --tau did not); a spread given
    is the page's, and a download says which."""
    from simspec.catalog.methods import acceptance_spread

    measured = inputs.ExplorerInputs(acceptance="tau", tau=2.9, tau_k=4, k=4, dataset="gsm8k")
    assert measured.spread is None  # the page's default, as --tau's (QA: Python callers got 0)
    page = measured.model_copy(update={"spread": 0.0})
    eagle = inputs.method_for(measured, "eagle3").acceptance
    cli = MethodFlags(tau=2.9, tau_k=4).tuned({"name": "eagle3", "k": 4}, "gsm8k")["acceptance"]
    assert eagle.spread == cli["spread"] == acceptance_spread("learned", "math")[0] > 0
    assert (
        inputs.method_for(measured, "ngram").acceptance.spread
        == (acceptance_spread("lookup", "math")[0])
    )
    assert inputs.method_for(page, "eagle3").acceptance.spread == 0.0  # given: the page's
    assert downloads.scenario_columns(measured)["tau_spread"] == downloads.MEASURED_SPREAD
    assert downloads.scenario_columns(page)["tau_spread"] == 0.0
