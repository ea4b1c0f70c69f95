"""Inputs that could run and give a wrong answer without a word, and messages that could name
the wrong thing. Each is now one ``error: <field>: ...`` line, exit 2,
nothing written (or, where a value had a right answer, that answer)."""

import json

import pytest
from typer.testing import CliRunner

from simspec.catalog.methods import at_depth, method_defaults, unused_field
from simspec.catalog.sampling import factor
from simspec.catalog.traces import load_trace
from simspec.cli.main import app
from simspec.cli.sweep_flags import SweepFlags
from simspec.config import MethodConfig, WorkloadConfig
from simspec.engine.acceptance.trees import TreeShape
from simspec.errors import InputError
from simspec.studies.policy import Policy

runner = CliRunner()
QUICK = ["--batch-sizes", "1", "--requests", "4", "--executor", "serial"]


def refused(args: list[str], field: str, tmp_path=None) -> str:
    """Run the CLI; assert one error line naming ``field``, exit 2; return the line."""
    result = runner.invoke(app, args)
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert result.exit_code == 2, result.output
    assert lines and lines[-1].startswith(f"error: {field}"), result.output
    assert "Traceback" not in result.output
    if tmp_path is not None:
        assert not [p for p in tmp_path.iterdir() if p.suffix in (".csv", ".txt", ".yaml")]
    return lines[-1]


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- silent wrong answers --------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--prompt-len", "--output-len"])
def test_a_zero_length_is_refused_not_taken_as_the_default(flag):
    refused(["sweep", *QUICK, "--prompt-len", "8", "--output-len", "8", flag, "0"], flag)


def test_one_fixed_length_alone_says_the_trace_lengths_are_replaced():
    line = refused(["sweep", *QUICK, "--prompt-len", "64"], "--prompt-len")
    assert "give --output-len too" in line


def test_one_fixed_length_replaces_its_side_of_a_file_with_fixed_lengths(tmp_path):
    cfg = write(tmp_path, "s.yaml", "workload: {lengths_from: null, output: {mean: 32}}\n")
    wl = SweepFlags(prompt_len=64).sweep_config(tmp_path / "s.yaml").workload
    assert (wl.lengths_from, wl.prompt.mean, wl.output.mean) == (None, 64, 32), cfg


def test_lengths_beside_lengths_from_are_refused_and_both_alone_mean_fixed_lengths():
    with pytest.raises(ValueError, match="prompt: lengths come from lengths_from 'gsm8k'"):
        WorkloadConfig(lengths_from="gsm8k", prompt={"mean": 100})
    both = WorkloadConfig(prompt={"mean": 100}, output={"mean": 50})
    assert (both.lengths_from, both.output.mean) == (None, 50)
    # one side alone would fix the other at its default without a word (QA: a file's prompt
    # alone ran every output at 256), as --prompt-len alone is refused
    with pytest.raises(ValueError, match="prompt: fixed lengths .* give output too"):
        WorkloadConfig(prompt={"mean": 100})
    explicit = WorkloadConfig(lengths_from=None, prompt={"mean": 100})
    assert (explicit.prompt.mean, explicit.output.mean) == (100, 256)
    # a dumped config (defaults spelled out) still loads
    wl = WorkloadConfig(lengths_from="cnn")
    assert WorkloadConfig(**wl.model_dump()) == wl


def test_scenario_lengths_with_a_trace_are_an_error_on_the_cli(tmp_path):
    cfg = write(tmp_path, "s.yaml", "workload: {lengths_from: gsm8k, output: {mean: 20}}\n")
    refused(["sweep", *QUICK, "--config", cfg], "workload")


@pytest.mark.parametrize(
    ("text", "key"),
    [("seed: 1\nseed: 2\n", "seed"), ("workload: {requests: 4, requests: 8}\n", "requests")],
)
def test_a_key_written_twice_is_an_error_naming_it(tmp_path, text, key):
    line = refused(["sweep", *QUICK, "--config", write(tmp_path, "s.yaml", text)], "--config")
    assert f"duplicate key {key!r}" in line
    as_json = write(tmp_path, "s.json", '{"seed": 1, "seed": 2}')
    assert "duplicate key 'seed'" in refused(["sweep", *QUICK, "--config", as_json], "--config")
    spec = '{"method": "eagle3", "method": "ngram"}'
    refused(["sweep", *QUICK, "--speculative-config", spec], "--speculative-config")


def test_yaml_aliases_are_refused_by_name(tmp_path):
    """Merge keys need aliases, which are refused (an alias bomb is one line of them)."""
    cfg = write(tmp_path, "s.yaml", "base: &b {requests: 4}\nworkload: {<<: *b, requests: 6}\n")
    assert "aliases" in refused(["sweep", *QUICK, "--config", cfg], "--config")


@pytest.mark.parametrize(
    "workload", ["{arrival: poisson}", "{rate: 3.0}", "{rate_schedule: [[0, 2.0]]}"], ids=str
)
def test_open_loop_fields_in_a_sweep_are_refused(tmp_path, workload):
    cfg = write(tmp_path, "s.yaml", f"workload: {workload}\n")
    assert "closed loop" in refused(["sweep", *QUICK, "--config", cfg], "workload")


@pytest.mark.parametrize(
    ("method", "field"),
    [
        ("{name: eagle3, lookahead_window: 4}", "lookahead_window"),
        ("{name: eagle3, beam_width: 2}", "beam_width"),
        ("{name: eagle3, tree_topk: 4}", "tree_topk"),
        ("{name: ngram, draft_layers: 4}", "draft_layers"),
        ("{name: redrafter, tree_nodes: 8}", "tree_nodes"),
        ("{name: autoregressive, tree: static}", "tree"),
    ],
)
def test_method_fields_that_do_not_apply_are_errors_naming_them(tmp_path, method, field):
    cfg = write(tmp_path, "s.yaml", f"methods:\n  - {method}\n")
    name = method.split(",")[0].removeprefix("{name: ")
    refused(["sweep", *QUICK, "--config", cfg], f"methods.{name}.{field}")


@pytest.mark.parametrize("paths", ["[[-1]]", "[]", "[[0], []]"])
def test_a_tree_path_of_a_negative_rank_or_none_is_refused(tmp_path, paths):
    """QA: a rank of -1 ran (its tau changing with the batch size) and [] was ignored."""
    cfg = write(
        tmp_path, "s.yaml", f"methods:\n  - {{name: eagle1, tree: static, tree_paths: {paths}}}\n"
    )
    refused(["sweep", *QUICK, "--config", cfg], "methods.0.tree_paths")


@pytest.mark.parametrize(
    ("method", "field"),
    [
        # depth 1, top-8: SGLang's steps 1 / topk 8 draws 8 candidates, so 9 nodes cannot exist
        ("{name: eagle3, k: 1, tree: dynamic, tree_nodes: 9, tree_topk: 8}", "tree_nodes"),
        ("{name: medusa1, k: 2, tree: static, tree_nodes: 7, tree_topk: 2}", "tree_nodes"),
        (
            "{name: eagle3, k: 2, tree: dynamic, tree_nodes: 4, tree_topk: 2, "
            "tree_schedule: [[1, 4, 4], [5, 4096, 7]]}",
            "tree_schedule",
        ),
    ],
)
def test_a_tree_budget_its_tree_cannot_hold_is_an_error(tmp_path, method, field):
    """The verify pass would be costed for the budget while acceptance walks the smaller tree
    that fits (it was: a 64-token verify for Hydra's 4-deep chain when tree_topk was unset)."""
    cfg = write(tmp_path, "s.yaml", f"methods:\n  - {method}\n")
    name = method.split(",")[0].removeprefix("{name: ")
    out = refused(["sweep", *QUICK, "--config", cfg], f"methods.{name}.{field}")
    assert "allowed" in out


def test_tree_capacity_is_the_drafters_candidate_count():
    # dynamic: top-k at depth 1, then top-k children of each of top-k beams per further depth
    assert TreeShape(8, 4, 7, dynamic=True).capacity == 4 + 6 * 16
    assert TreeShape(8, 8, 1, dynamic=True).capacity == 8
    # static: the full top-k-ary tree of that depth
    assert TreeShape(7, 2, 2).capacity == 2 + 4
    assert TreeShape(4, 1, 4).capacity == 4


def test_fields_a_method_reads_are_accepted():
    for cfg in (
        MethodConfig(name="eagle3", tree="dynamic", tree_nodes=16, tree_topk=4),
        MethodConfig(name="lookahead", lookahead_window=4),
        MethodConfig(name="ngram", prompt_lookup_min=2, prompt_lookup_max=4),
        MethodConfig(name="redrafter", beam_width=2),
        MethodConfig(name="autoregressive", k=0),
    ):
        assert unused_field(cfg) is None, cfg


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--tau-k", "3"], "--tau-k"),
        (["--tau", "2.5", "--tau-k", "3", "--alpha", "0.5"], "--alpha"),
        (["--batch-sizes", ""], "--batch-sizes"),
    ],
)
def test_flags_that_would_be_ignored_are_refused(args, flag):
    refused(["sweep", "--requests", "4", *args], flag)


def test_a_prompt_past_the_model_context_is_refused():
    line = refused(["sweep", *QUICK, "--prompt-len", "1000000", "--output-len", "8"], "workload")
    assert "131072" in line and "max_position_embeddings" in line


def test_a_prompt_past_the_kv_cache_is_refused():
    args = ["--gpu", "rtx3090", "--prompt-len", "100000", "--output-len", "8"]
    assert "KV cache" in refused(["sweep", *QUICK, *args], "workload")


def test_analytic_refuses_a_model_that_does_not_fit_and_a_context_past_its_own():
    assert "does not fit" in refused(
        ["analytic", "--model", "llama-3.1-70b", "--gpu", "rtx3090"], ""
    )
    refused(["analytic", "--context", "200000"], "")


@pytest.mark.parametrize(
    "schedule",
    [[[1, 8, 2], [4, 16, 3]], [[8, 1, 2]], [[1, 8, 65]], [[1, 8, -3]]],
    ids=["overlap", "reversed", "k65", "negative"],
)
def test_policy_bands_are_checked_as_a_method_schedule_is(schedule):
    with pytest.raises(ValueError):
        Policy(k_schedule=schedule)
    with pytest.raises(ValueError):
        MethodConfig(name="eagle3", k_schedule=schedule)
    assert Policy(k_schedule=[[1, 8, 64], [9, 16, 0]]).k_schedule


def test_a_vanishing_rate_is_refused_by_its_documented_bound():
    with pytest.raises(ValueError, match="greater than or equal to 0.000001"):
        WorkloadConfig(arrival="poisson", rate=1e-300)
    with pytest.raises(ValueError, match="rates must be 0 or in"):
        WorkloadConfig(arrival="poisson", rate_schedule=[[0, 1e-300], [5, 1.0]])


POLICY = (
    "method: {name: eagle3, k: 3, acceptance: {alpha: 0.6}}\n"
    "workload: {arrival: poisson, requests: 4, rate: RATE}\n"
    "policy: {k_schedule: SCHEDULE}\n"
)


@pytest.mark.parametrize(
    ("rate", "schedule", "field"),
    [
        ("1e-300", "[[1, 8, 2]]", "workload.rate"),
        ("1.0", "[[1, 8, 65]]", "policy.k_schedule"),
        ("1.0", "[[1, 8, 2], [4, 16, 3]]", "policy.k_schedule"),
    ],
)
def test_policy_refuses_a_vanishing_rate_and_bad_bands(tmp_path, rate, schedule, field):
    text = POLICY.replace("RATE", rate).replace("SCHEDULE", schedule)
    refused(["policy", "--config", write(tmp_path, "p.yaml", text)], field)


@pytest.mark.parametrize(
    ("record", "what"),
    [
        ({"prompt_len": 100.7, "output_len": 4}, "prompt_len must be an integer"),
        ({"prompt_len": True, "output_len": 4}, "prompt_len must be an integer"),
        ({"prompt_len": 10, "output_len": 4, "acc": [1, True]}, "values must be an integer"),
        ({"prompt_len": 10, "output_len": 4, "acc": [1, 2.0]}, "values must be an integer"),
    ],
)
def test_trace_values_that_are_not_integers_are_errors(tmp_path, record, what):
    acc = record.pop("acc", [1, 2])
    path = write(tmp_path, "t.jsonl", json.dumps({**record, "acc_len": {"eagle3": acc}}) + "\n")
    with pytest.raises(InputError, match=what):
        load_trace(path, "eagle3")


def test_workload_trace_errors_name_workload_trace(tmp_path):
    bad = write(
        tmp_path, "t.jsonl", json.dumps({"prompt_len": 1.5, "output_len": 4, "acc_len": {"x": [1]}})
    )
    cfg = write(
        tmp_path,
        "s.yaml",
        f"workload: {{lengths_from: {bad}}}\nmethods: [{{name: autoregressive}}]\n",
    )
    refused(["sweep", *QUICK, "--config", cfg], "workload.lengths_from")


def test_top_p_below_the_table_tends_to_greedy():
    assert factor(1.0, 1e-9) == pytest.approx(1.0, abs=1e-6)
    low = factor(1.0, 0.5)
    assert low < factor(1.0, 0.25) < 1.0  # between the table's edge and greedy, not flat


def test_plan_refuses_an_infinite_price(tmp_path):
    args = ["plan", "--qps", "1", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50"]
    refused([*args, "--gpu-hour-price", "inf"], "--gpu-hour-price")


def harness_csv(tmp_path, rows: int) -> str:
    head = (
        "kind,op,num_seqs,q_per_seq,context_len,num_tokens,m,k,n,time_ms_median,tp,model,"
        "hidden_size,intermediate_size,num_attention_heads,num_key_value_heads,head_dim,vocab_size,"
        "gpu_name"
    )
    lines = [head] + [
        f"gemm,qkv,{m},1,0,{m},{m},4096,6144,{0.05 + 0.001 * m},1,tiny,4096,14336,32,8,128,128256,"
        "NVIDIA H100 80GB HBM3"
        for m in range(1, rows + 1)
    ]
    return write(tmp_path, "t.csv", "\n".join(lines) + "\n")


def test_calibrate_fit_refuses_a_single_sample_and_writes_nothing(tmp_path):
    out = tmp_path / "p.yaml"
    result = runner.invoke(app, ["calibrate", "fit", harness_csv(tmp_path, 1), "--out", str(out)])
    assert result.exit_code == 2 and not out.exists()
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: timings: 1 distinct gemm shape")
    assert "Warning" not in result.output


# -- messages --------------------------------------------------------------------------------


def test_a_method_without_acceptance_takes_its_preset(tmp_path):
    cfg = write(tmp_path, "s.yaml", "methods:\n  - {name: eagle3}\n")
    methods = SweepFlags().sweep_config(tmp_path / "s.yaml").methods
    assert methods[0].acceptance is not None, cfg


def test_a_misspelled_method_field_is_named(tmp_path):
    cfg = write(tmp_path, "s.yaml", "methods:\n  - {name: eagle3, acceptence: {alpha: 0.5}}\n")
    line = refused(["sweep", *QUICK, "--config", cfg], "methods.eagle3.acceptence")
    assert "no packaged acceptance preset" not in line


@pytest.mark.slow
def test_quiet_prints_no_sampling_note():
    result = runner.invoke(
        app, ["sweep", *QUICK, "--methods", "autoregressive", "--temperature", "0.7", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip() == ""


def test_control_characters_and_markup_in_a_model_path_are_escaped_in_the_title(tmp_path):
    config = {
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
    }
    folder = tmp_path / "m\x1b[31m[bold]x"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    args = ["--model", str(folder / "config.json"), "--methods", "autoregressive"]
    result = runner.invoke(app, ["sweep", *QUICK, *args, "--prompt-len", "8", "--output-len", "8"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\\x1b[31m[bold]x" in result.output


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["plan", "--qps", "1", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50"], "--out"),
        (["recommend"], "--out"),
        (["analytic"], "--csv"),
    ],
)
def test_outputs_named_for_another_format_are_refused_before_any_work(tmp_path, args, flag):
    refused([*args, flag, str(tmp_path / "x.txt")], flag, tmp_path)


def test_k_on_a_preset_tree_cuts_the_presets_budget_to_what_that_depth_drafts(tmp_path):
    """--k 1 on Hydra's packaged 63-node tree is that tree one level deep: its 10 top
    candidates (before, a 64-token verify was costed for a tree acceptance walked 10 deep)."""
    cut = at_depth(method_defaults("hydra"), 1)
    assert (cut["k"], cut["tree_nodes"]) == (1, 10)
    assert at_depth(method_defaults("hydra"), 4)["tree_nodes"] == 63  # fits: unchanged
    written = {**method_defaults("hydra"), "tree_nodes": 40}  # a budget the user wrote stays
    assert at_depth(written, 1)["tree_nodes"] == 40
    out = tmp_path / "k1.csv"
    args = ["sweep", "--methods", "hydra,eagle2", "--k", "1", *QUICK, "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "hydra K=1 static tree 10" in result.output


def test_drawn_requests_past_the_model_context_are_not_served():
    """ShareGPT lengths on Vicuna-7B (a 2,048-token context) draw some requests longer than
    it: vLLM refuses such a prompt or stops the output at max_model_len, so they are counted
    unfinishable (as a replayed trace's are) and no served request runs past the context."""
    from simspec import Scenario, simulate

    sc = Scenario(
        model="vicuna-7b",
        method=MethodConfig(name="autoregressive", k=0),
        workload=WorkloadConfig(concurrency=8, requests=64, turnovers=2, measure="whole"),
    )
    res = simulate(sc)
    req = res.requests
    long = req.prompt_tokens + req.requested_output_tokens > 2048
    assert long.any() and (req.unfinishable == long).all()
    assert res.summary.unfinishable == int(long.sum())


def test_an_empty_entry_between_commas_is_refused_not_dropped():
    """--alpha 0.9,,0.7 is an α per draft position: dropping the empty one would move 0.7 to
    position 2. A trailing comma is harmless."""
    assert "empty entry" in refused(["analytic", "--alpha", "0.9,,0.7"], "--alpha")


def test_a_closed_loop_of_requests_that_never_fit_is_refused_not_a_recursion():
    """Hundreds of drawn requests past Vicuna-7B's 2,048-token context in a row: each leaves
    at once and lets the next in, a loop, not a call stack."""
    from simspec import Scenario, simulate
    from simspec.config import LengthSpec
    from simspec.errors import ScenarioError

    wl = WorkloadConfig(
        arrival="closed", concurrency=2, requests=2000,
        prompt=LengthSpec(dist="lognormal", mean=3000, cv=0.05, min=1), output=LengthSpec(mean=64),
    )  # fmt: skip
    with pytest.raises(ScenarioError, match="no request fits vicuna-7b"):
        simulate(Scenario(model="vicuna-7b", workload=wl))


def test_a_k_schedule_cannot_set_a_default_trees_depth():
    """Medusa drafts its default static tree: a K schedule can turn it on or off, not move its
    depth (LoadPolicy keeps a tree's depth), so K=1 is refused, not ignored."""
    from simspec import Scenario, simulate
    from simspec.errors import InputError

    medusa = MethodConfig(
        name="medusa1", k=4, k_schedule=[[1, 2, 4], [3, 1000, 1]], acceptance={"alpha": 0.7}
    )
    with pytest.raises(InputError, match="k_schedule: medusa1 drafts a tree of depth 4"):
        simulate(Scenario(method=medusa))


def test_drawn_lengths_keep_their_mean():
    """QA: lengths were floored, so a lognormal lost half a token a request (mean 4 drew 3.59)
    and a fixed 98.5 (GPUStack's means of printed totals) ran 98; rounded, the mean holds."""
    import numpy as np

    from simspec.config import LengthSpec

    rng = np.random.default_rng(0)
    drawn = LengthSpec(dist="lognormal", mean=4, cv=1).sample(200_000, rng)
    assert drawn.mean() == pytest.approx(4.0, abs=0.05)
    assert LengthSpec(mean=98.6).sample(2, rng).tolist() == [99, 99]
    uniform = LengthSpec(dist="uniform", low=100, high=200).sample(200_000, rng)
    assert (uniform.min(), uniform.max()) == (100, 200) and uniform.mean() == pytest.approx(
        150, abs=0.5
    )


@pytest.mark.parametrize(
    ("args", "field"),
    [
        # an empty value ran the default as if not given
        (["recommend", "--executor", "", "--k-max", "1", "--concurrencies", "1"], "--executor"),
        (["analytic", "--profile", ""], "--profile"),
        (["analytic", "--method", "draft_model", "--draft-model", ""], "--draft-model"),
        # an assumption every row it fills would then skip is refused up front
        (["validate", "--assume", "tp=3"], "--assume"),
        (["validate", "--assume", "output_len=1e30"], "--assume"),
        # a layout flag without NAME is a missing NAME, not an ep/tp mismatch
        (["models", "--ep", "2"], "--ep"),
        (["models", "--dp", "2"], "--dp"),
    ],
)
def test_fuzzed_flags_are_refused_by_name(args, field, tmp_path, monkeypatch):
    """QA (CLI fuzz): each of these ran, forked or misnamed its error."""
    monkeypatch.chdir(tmp_path)
    line = refused(args, field)
    if field == "--assume":
        assert "power of two" in line or "1-1,000,000" in line
    if field in ("--ep", "--dp"):
        assert "give its NAME" in line


@pytest.mark.parametrize("command", [["recommend"], ["sweep"], ["plan", "--qps", "1"]])
def test_a_pool_larger_than_the_bound_is_refused(command):
    """QA: a process pool forks every worker up front; --workers 100000 forked until the
    host stalled (recommend and sweep had no bound, validate 256)."""
    result = runner.invoke(app, [*command, "--workers", "600"])
    assert result.exit_code == 2 and "--workers" in result.output
    assert "256" in result.output and "Traceback" not in result.output


def test_the_common_footer_says_what_sweep_says_of_sampling_scheduling_and_caps():
    """QA (cross-command): plan, fleet, policy and recommend dropped the sampling,
    async-scheduling, vLLM draft-model and SGLang-cap notes sweep prints for the same
    deployment."""
    from simspec.cli.tables import run_notes
    from simspec.config import Deployment, MethodConfig

    eagle = MethodConfig(name="eagle3", k=3, acceptance={"alpha": 0.7})
    notes = " ".join(run_notes(Deployment(engine="sglang", temperature=1.0), [eagle]))
    assert "sampling at T=1" in notes and "at most 48 requests" in notes
    lifted = Deployment(engine="sglang", scheduler={"max_num_seqs": 256})
    assert "at most 48" not in " ".join(run_notes(lifted, [eagle]))
    draft = MethodConfig(name="draft_model", k=3, acceptance={"alpha": 0.7})
    vllm = " ".join(run_notes(Deployment(), [draft]))
    assert "from 0.15 only" in vllm and "waits for the host every step" in vllm
    assert run_notes(Deployment(engine="sglang"), [MethodConfig(name="autoregressive", k=0)]) == []
    # acceptance measured at the run's own temperature is used as measured, as sweep says
    at_t1 = MethodConfig(name="eagle3", k=3, acceptance={"alpha": 0.6, "temperature": 1.0})
    said = " ".join(run_notes(Deployment(temperature=1.0), [at_t1]))
    assert "used as measured" in said and "0.845" not in said


def test_the_common_footer_says_a_method_the_engine_does_not_run_as_sweep_does():
    """QA (cross-command): plan, fleet and policy ran EAGLE-3 on gpt-fast and hydra anywhere
    without sweep's "simulated as published" and one-sequence-at-a-time notes."""
    from simspec.cli.tables import run_notes
    from simspec.config import Deployment, MethodConfig

    eagle = MethodConfig(name="eagle3", k=3, acceptance={"alpha": 0.7})
    notes = " ".join(run_notes(Deployment(engine="gpt-fast"), [eagle]))
    assert "eagle3 simulated as published: engine gpt-fast does not ship it" in notes
    assert "speculates one sequence at a time" in notes
    hydra = MethodConfig(name="hydra", k=3, acceptance={"alpha": 0.7})
    assert "hydra simulated as published" in " ".join(run_notes(Deployment(), [hydra]))
    shipped = " ".join(run_notes(Deployment(), [eagle]))
    assert "simulated as published" not in shipped and "one sequence at a time" not in shipped


def test_a_schedule_no_engine_reads_is_said_to_be_simspecs_own():
    """QA: plan --trace priced a recommended K schedule on SGLang and vLLM V0, and a tree
    schedule anywhere, as deployable options; recommend said they are simspec's."""
    from simspec.cli.tables import schedule_notes
    from simspec.config import MethodConfig

    k_bands = MethodConfig(name="eagle3", k=3, k_schedule=[[1, 8, 3], [9, 256, 1]])
    assert schedule_notes("vllm", [k_bands]) == []
    for engine in ("sglang", "vllm-v0", "trtllm"):
        (note,) = schedule_notes(engine, [k_bands])
        assert f"engine {engine} does not read vLLM V1's Dynamic SD" in note
    tree = MethodConfig(name="eagle3", k=5, tree="dynamic", tree_schedule=[[1, 8, 16], [9, 48, 8]])
    (note,) = schedule_notes("vllm", [tree])
    assert "tree_schedule, which no engine reads" in note


def test_recommend_refuses_a_dense_models_dp_as_the_other_commands_do():
    """QA: recommend told a dense model at dp 2 to compare fixed K (Dynamic SD's dp rule);
    following that advice hit the layout's own refusal."""
    result = runner.invoke(app, ["recommend", "--tp", "2", "--dp", "2", "--concurrencies", "1"])
    assert result.exit_code == 2 and "has no experts (a dense model)" in result.output
    assert "fixed K" not in result.output


def test_a_policy_files_k_schedule_is_refused_on_vllm_v0_as_the_flag_is(tmp_path):
    """QA: --speculative-config's num_speculative_tokens_per_batch_size was refused on
    vllm-v0, and the same bands as a file's policy.k_schedule ran without a word."""
    cfg = tmp_path / "p.yaml"
    cfg.write_text(
        "model: llama-3.1-8b\nengine: vllm-v0\nmethod: {name: eagle3, k: 3}\n"
        "policy: {k_schedule: [[1, 30, 3], [31, 1024, 2]]}\n"
        "workload: {arrival: poisson, rate: 1.0, requests: 50}\n"
    )
    out = tmp_path / "p.csv"
    result = runner.invoke(app, ["policy", "--config", str(cfg), "--out", str(out)])
    assert result.exit_code == 2 and "policy.k_schedule" in result.output
    assert "never reads" in result.output and not out.exists()


def test_a_sweep_past_the_engines_default_running_limit_says_so(capsys):
    """QA (cross-command): --max-num-seqs 1024 given was noted and vLLM's own 1024 by default
    was not, for the same numbers."""
    from simspec.cli.sweep import _engine_note
    from simspec.studies.sweep import SweepConfig

    _engine_note(SweepConfig(batch_sizes=[1, 2048]))
    _engine_note(SweepConfig(batch_sizes=[1, 2048], engine="sglang"))  # its cap: the pool's
    said = capsys.readouterr().err
    assert said.count("default max_num_seqs") == 1 and "(1024 on h100_sxm)" in " ".join(
        said.split()
    )


def test_ran_with_names_the_methods_that_turn_async_scheduling_off():
    """QA (cross-command): recommend's ngram read "async scheduling" where its CSV said ngram
    turns it off."""
    from simspec.config import Deployment
    from simspec.studies.provenance import ran_with

    on = Deployment(scheduler={"async_scheduling": True})
    assert ran_with(on, ["autoregressive", "ngram", "eagle3"]).endswith("; ngram turns it off")
    assert "turns it off" not in ran_with(on, ["eagle3"])
    assert "turns it off" not in ran_with(Deployment(), ["ngram"])  # asked for by nobody


def test_analytic_prints_no_serving_notes_for_flags_it_lacks():
    """Review: the closed form (batch 1, no scheduler flags) had advised --async-scheduling
    and --max-running-requests, options it does not have."""
    result = runner.invoke(app, ["analytic", "--engine", "sglang", "--method", "eagle3"])
    assert result.exit_code == 0, result.output
    assert "--async-scheduling" not in result.output
    assert "--max-running-requests" not in result.output
