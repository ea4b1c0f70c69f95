"""`simspec validate` runs what a user would: unstated TP on the fewest GPUs that hold the model,
`--assume FIELD=VALUE` for other unstated cells, a precision in the notes compared with the
preset's own, bursts sent at once under the engine version's batch defaults, TTFT scored."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from simspec.cli.main import app
from simspec.config import Scenario, SchedulerConfig
from simspec.engine.build import setup_replica
from simspec.errors import InputError, ScenarioError
from simspec.studies.runs import SERIAL
from simspec.studies.validation.assume import fill_unstated, parse_assumptions
from simspec.studies.validation.cases import read_cases
from simspec.studies.validation.loads import (
    VLLM_HUGE_GPU,
    VLLM_LARGE_GPU,
    VLLM_SMALL_GPU,
    engine_batch_defaults,
    engine_version_profile,
    workload,
)
from simspec.studies.validation.predict import Skip, plan_case
from simspec.studies.validation.run import validate
from simspec.studies.validation.setups import sent_as_burst, serve_prefix_caching

ROW = {
    "case_id": "r",
    "metric": "tpot_ms",
    "method": "autoregressive",
    "target_model": "llama-3.1-8b",
    "gpu": "h100_sxm",
    "engine": "vllm",
    "load_kind": "concurrency",
    "load": "2",
    "measured_value": "7",
}


def test_assumptions_parse_and_every_bad_one_is_one_error():
    assert parse_assumptions(["gpu=h200", "Load_Kind = single"]) == {
        "gpu": "h200",
        "load_kind": "single",
    }
    for bad, says in [
        (["gpu"], "FIELD=VALUE"),
        (["colour=red"], "not a field"),
        (["gpu=h900"], "unknown GPU"),
        (["tp=3.5"], "whole number"),
        (["load_kind=burst"], "one of"),
        (["gpu=h200", "gpu=h100_sxm"], "twice"),
    ]:
        with pytest.raises(InputError, match=says) as err:
            parse_assumptions(bad)
        assert err.value.field == "--assume"


@pytest.mark.slow
def test_the_cli_refuses_a_bad_assumption_before_running(tmp_path):
    out = tmp_path / "pred.csv"
    res = CliRunner().invoke(app, ["validate", "--assume", "colour=red", "--out", str(out)])
    assert res.exit_code == 2 and "--assume" in res.output and not out.exists()


def test_only_unstated_cells_are_filled_and_each_fill_is_said():
    row, notes = fill_unstated(
        {"gpu": "unknown", "engine": "sglang", "load_kind": ""},
        {"gpu": "h200", "engine": "vllm", "load_kind": "single"},
    )
    assert row == {"gpu": "h200", "engine": "sglang", "load_kind": "single"}
    assert notes == [
        "gpu not stated: h200 assumed (--assume gpu=h200)",
        "load_kind not stated: single assumed (--assume load_kind=single)",
    ]
    plan = plan_case({**ROW, "gpu": "unknown"}, assume={"gpu": "h200"})
    assert plan.scenario.gpu == "h200"
    assert any("--assume gpu=h200" in a for a in plan.assumptions)
    with pytest.raises(Skip, match="not stated: give it with --assume gpu=ID"):
        plan_case({**ROW, "gpu": "unknown"})
    with pytest.raises(Skip, match="unsupported GPU"):
        plan_case({**ROW, "gpu": "tpu_v5"})


def test_a_row_without_tp_runs_on_the_fewest_gpus_that_hold_the_model():
    plan = plan_case({**ROW, "target_model": "llama-3.1-70b"})
    tp = plan.scenario.tp
    assert tp in (2, 4, 8)
    assert any(f"tp={tp}, the fewest h100_sxm GPUs" in a for a in plan.assumptions)
    half = plan.scenario.model_copy(update={"tp": tp // 2})
    try:
        memory = setup_replica(half).memory
        assert memory.num_blocks * memory.block_size < 4096  # too little KV left
    except (ScenarioError, InputError):  # no room, or not for the context vLLM starts with
        pass
    # a model one GPU holds stays on one, and says so; a stated tp is kept as stated
    small = plan_case(ROW)
    assert small.scenario.tp == 1 and any("tp=1" in a for a in small.assumptions)
    assert plan_case({**ROW, "target_model": "llama-3.1-70b", "tp": "8"}).scenario.tp == 8


def test_a_gpu_count_without_tp_is_one_tp_group_within_a_node():
    plan = plan_case({**ROW, "target_model": "llama-3.1-70b", "num_gpus": "4"})
    assert plan.scenario.tp == 4 and any("the row's 4 GPUs" in a for a in plan.assumptions)
    with pytest.raises(Skip, match="more than one node"):
        plan_case({**ROW, "num_gpus": "16"})


def test_mxfp4_in_the_notes_runs_when_it_is_the_presets_own_checkpoint():
    row = {**ROW, "target_model": "gpt-oss-120b", "gpu": "h200", "tp": "4"}
    plan = plan_case({**row, "notes": "default checkpoint has MXFP4 MoE weights"})
    assert plan.scenario.precision is None  # the checkpoint's own quantization_config
    assert any("gpt-oss-120b preset's own checkpoint" in a for a in plan.assumptions)
    with pytest.raises(Skip, match="MXFP4"):  # a bf16 preset served in MXFP4: not modelled
        plan_case({**ROW, "notes": "MXFP4 weights"})
    with pytest.raises(Skip, match="NVFP4"):
        plan_case({**row, "notes": "NVFP4 checkpoint"})


def test_a_burst_sends_every_request_at_once():
    def get(col):
        return {"prompt_len": "200", "output_len": "100"}.get(col, "")

    assert sent_as_burst("burst of 1000 prompts (request rate inf, no max concurrency)")
    wl = workload("static_batch", 500, get, "sharegpt", [], burst=True)
    assert (wl.arrival, wl.concurrency, wl.requests, wl.measure) == ("closed", 500, 500, "whole")
    # a paper's "batch size 8" over a dataset, and a closed loop: a batch held full
    for kind in ("static_batch", "concurrency"):
        held = workload(kind, 8, get, "sharegpt", [])
        assert held.measure == "steady" and held.requests > 8


def test_a_bench_serve_sharegpt_row_spreads_its_lengths_about_its_means():
    def cells(notes):
        return {"prompt_len": "217", "output_len": "202", "notes": notes}.get

    bench = "BF16; vllm bench serve ShareGPT; burst of 1000 prompts"
    said: list[str] = []
    wl = workload("static_batch", 1000, lambda c: cells(bench)(c, ""), "sharegpt", said, True)
    assert (wl.prompt.dist, wl.prompt.mean, wl.output.mean) == ("lognormal", 217, 202)
    assert wl.prompt.cv > 0 and wl.output.cv > 0 and wl.prompt.max == 1024
    assert any("the serving benchmarks' filter keeps" in s for s in said)
    # a run of a stated number of prompts is a serving benchmark too (QA: GPUStack's
    # "lens = printed totals / 100 prompts" rows ran every request at the mean)
    totals = "BF16; lens = printed totals / 100 prompts"
    run = workload("concurrency", 8, lambda c: cells(totals)(c, ""), "sharegpt", [])
    assert run.prompt.dist == run.output.dist == "lognormal"
    # the same means from a paper's batch, or from the benchmark's random dataset, stay fixed
    for dataset, notes in (("sharegpt", "batch 8"), ("random", bench)):
        fixed = workload("static_batch", 8, lambda c, n=notes: cells(n)(c, ""), dataset, [])
        assert fixed.prompt.dist == fixed.output.dist == "fixed"


def test_a_run_of_stated_prompts_at_a_concurrency_is_timed_whole():
    """QA: 100 prompts at concurrency 8 (vllm bench serve --num-prompts 100 --max-concurrency
    8) were scored on a steady window, 8 % above the benchmark's start-to-drain duration."""
    from simspec.studies.validation.loads import prompts_sent

    assert prompts_sent("lens = printed totals / 1,000 prompts") == 1000
    assert prompts_sent("vllm bench serve --num-prompts 200 --max-concurrency 8") == 200
    assert prompts_sent("batch 8") is None
    get = {"prompt_len": "200", "output_len": "100", "notes": "totals / 100 prompts"}.get
    said: list[str] = []
    wl = workload("concurrency", 8, lambda c: get(c, ""), "sharegpt", said)
    assert (wl.concurrency, wl.requests, wl.measure) == (8, 100, "whole")
    assert any("100 prompts at concurrency 8" in s for s in said)
    held = workload("concurrency", 8, lambda c: {"notes": "c8"}.get(c, ""), "sharegpt", [])
    assert held.measure == "steady"


def test_a_non_default_sglang_attention_backend_is_refused_by_name():
    sglang = {**ROW, "engine": "sglang", "target_model": "qwen3-14b"}
    serve = "serve: python3 -m sglang.launch_server --attention-backend=fa3"
    assert plan_case({**sglang, "notes": serve})  # SGLang's own choice on Hopper
    rerun = serve + "; this run used the script modified (--attention-backend=triton)"
    with pytest.raises(Skip, match="triton attention backend, not its default on this GPU"):
        plan_case({**sglang, "notes": rerun})
    with pytest.raises(Skip, match=r"default on this GPU \(flashinfer\)"):
        plan_case({**sglang, "gpu": "a100_80gb", "notes": serve})


def test_an_mla_row_on_a_backend_simspec_has_not_timed_is_refused_by_name():
    """SGLang's MLA decode is priced with the FA3 kernel AIConfigurator timed (SGLang's default
    on Hopper since PR #5210); a row that says it ran Triton's, in a flag or in words, is not
    predicted with it."""
    dsv3 = {**ROW, "engine": "sglang", "target_model": "deepseek-v3", "gpu": "h200", "tp": "8"}
    dsv3 = {**dsv3, "load_kind": "single", "load": "1"}
    assert plan_case(dsv3)  # nothing named: SGLang's default, the timed kernel
    assert plan_case({**dsv3, "notes": "serve: sglang.launch_server --attention-backend fa3"})
    feb = {**dsv3, "engine_version": "main, Feb 2025 (Triton attention backend, CUDA graph)"}
    with pytest.raises(Skip, match="triton attention backend for MLA"):
        plan_case(feb)
    with pytest.raises(Skip, match="flashinfer attention backend for MLA"):
        plan_case({**dsv3, "notes": "serve: --attention-backend flashinfer"})
    # on B200 the timed kernel is trtllm_mla
    b200 = {**dsv3, "gpu": "b200"}
    assert plan_case({**b200, "notes": "serve: --attention-backend trtllm_mla"})
    with pytest.raises(Skip, match="fa3 attention backend for MLA"):
        plan_case({**b200, "notes": "serve: --attention-backend fa3"})


def test_a_serve_command_may_turn_prefix_caching_on_or_off():
    assert serve_prefix_caching("serve: vllm serve m --no-enable-prefix-caching") is False
    assert serve_prefix_caching("python3 -m sglang.launch_server --disable-radix-cache") is False
    assert serve_prefix_caching("serve: vllm serve m --enable-prefix-caching") is True
    assert serve_prefix_caching("serve: vllm serve m") is None
    plan = plan_case({**ROW, "notes": "serve: vllm serve m --no-enable-prefix-caching"})
    assert plan.scenario.scheduler.enable_prefix_caching is False
    assert setup_replica(plan.scenario).prefix_caching is False
    assert setup_replica(plan_case(ROW).scenario).prefix_caching is True  # V1's default


def test_vllm_batch_defaults_follow_the_version_and_the_gpu():
    assert engine_batch_defaults("vllm", "v0.11.0", "a100_80gb", 74.5)[0] == VLLM_SMALL_GPU
    assert engine_batch_defaults("vllm", "v0.11.0", "h100_sxm", 74.5)[0] is None
    assert engine_batch_defaults("vllm", "", "a100_80gb", 74.5)[0] is None  # unstated
    # before PR #17885 an A100-80GB took the large-GPU defaults (the profile's own are the
    # small ones there now, as vLLM's since 0.9)
    assert engine_batch_defaults("vllm", "v0.8.4", "a100_80gb", 74.5)[0] == VLLM_LARGE_GPU
    assert engine_batch_defaults("vllm", "v0.8.4", "l40s", 44.4)[0] is None
    # 0.28+ gives GPUs of >= 160 GiB 16384 tokens a step, and 0.20+ fills 0.92 of memory
    # (CacheConfig.gpu_memory_utilization's default, 0.9 through 0.19)
    share = SchedulerConfig(gpu_memory_utilization=0.92)
    huge = VLLM_HUGE_GPU.model_copy(update={"gpu_memory_utilization": 0.92})
    assert engine_batch_defaults("vllm", "0.28.0", "b200", 167.0)[0] == huge
    assert engine_batch_defaults("vllm", "0.27.1", "b200", 167.0)[0] == share
    assert engine_batch_defaults("vllm", "0.28.0", "h200", 140.4)[0] == share
    assert engine_batch_defaults("vllm", "0.19.0", "h200", 140.4)[0] is None
    assert "0.92" in engine_batch_defaults("vllm", "0.20.0", "h100_sxm", 79.6)[1]
    # the V0 engine (before 0.8) runs its own profile, which kept no prefix cache: a
    # preempted request starts over
    plan = plan_case({**ROW, "engine_version": "0.6.0"})
    assert plan.scenario.engine == "vllm-v0"
    assert setup_replica(plan.scenario).prefix_caching is False
    assert engine_batch_defaults("sglang", "v0.5.3", "a100_80gb", 74.5)[0] is None
    plan = plan_case({**ROW, "gpu": "a100_80gb", "engine_version": "v0.11.0"})
    assert plan.scenario.scheduler == VLLM_SMALL_GPU
    assert any("max_num_seqs 256" in a for a in plan.assumptions)


def test_a_v0_row_runs_the_v0_profile():
    assert engine_version_profile("vllm", "V0 spec-decode path (Feb 2025)")[0] == "vllm-v0"
    assert engine_version_profile("vllm", "0.6.0")[0] == "vllm-v0"
    assert engine_version_profile("vllm", "v0.8.4")[0] == "vllm"  # V1 by default since 0.8
    assert engine_version_profile("vllm", "V1 (Apr 2025)") == ("vllm", "")
    assert engine_version_profile("sglang", "V0")[0] == "sglang"
    plan = plan_case({**ROW, "engine_version": "0.6.0"})
    assert plan.scenario.engine == "vllm-v0"
    assert any("vllm-v0" in a for a in plan.assumptions)


@pytest.mark.slow
def test_a_ttft_row_needs_its_prompt_and_is_scored(tmp_path):
    with pytest.raises(Skip, match="prompt_len"):
        plan_case({**ROW, "metric": "ttft_ms"})
    path = tmp_path / "cases.csv"
    path.write_text(
        "case_id,metric,method,target_model,gpu,tp,engine,load_kind,load,prompt_len,"
        "output_len,measured_value,notes\n"
        "one,ttft_ms,autoregressive,llama-3.1-8b,h100_sxm,1,vllm,static_batch,1,1000,20,30,"
        "burst of 1\n"
        "many,ttft_ms,autoregressive,llama-3.1-8b,h100_sxm,1,vllm,static_batch,64,1000,20,300,"
        "burst of 64\n",
        encoding="utf-8",
    )
    pred = validate(read_cases(path), runs=SERIAL)
    assert list(pred["status"]) == ["ok", "ok"], list(pred["skip_reason"])
    one, many = pred["predicted_value"]
    # 64 prompts of 1,000 tokens sent at once queue behind the 8,192-token prefill budget
    assert many > 3 * one > 0


def test_the_serve_commands_stated_limits_and_expert_parallelism_are_kept():
    notes = "serve: vllm serve X -tp 8 --max-num-batched-tokens 16384 --enable-expert-parallel"
    row = {**ROW, "target_model": "qwen3-30b-a3b", "tp": "8", "notes": notes}
    plan = plan_case({**row, "gpu": "a100_80gb", "engine_version": "v0.11.0"})
    # the stated budget replaces the version's default; the unstated cap keeps it
    assert plan.scenario.scheduler.max_num_batched_tokens == 16384
    assert plan.scenario.scheduler.max_num_seqs == VLLM_SMALL_GPU.max_num_seqs
    assert plan.scenario.ep == 8
    dense = plan_case({**ROW, "tp": "2", "notes": "--enable-expert-parallel"})
    assert dense.scenario.ep == 1  # no experts to spread


def test_a_draft_at_another_tensor_parallelism_runs_where_the_engine_runs_one():
    """vLLM PR #12755 ran its MTP module at TP=1 beside a TP=8 target (V0's
    SmallerTpProposerWorker): on the vllm-v0 profile the row runs with the draft on one GPU,
    saying so; on V1, which runs drafts at the target's TP, it is refused naming the engine;
    plain rows, and a draft at the target's own TP, run as before."""
    row = {**ROW, "target_model": "deepseek-r1", "gpu": "h200", "tp": "8", "load": "1"}
    notes = "TP=8 from the PR's serve command; draft (MTP module) TP=1; tau not stated"
    mtp = {**row, "method": "mtp", "k": "1", "notes": notes, "measured_tau": "1.8"}
    v0 = plan_case({**mtp, "engine_version": "V0 spec-decode path"})
    assert v0.scenario.engine == "vllm-v0" and v0.scenario.method.draft_tp == 1
    assert "the draft at TP=1 beside the target's 8" in "; ".join(v0.assumptions)
    assert setup_replica(v0.scenario).speculator.cost.tp == 1
    with pytest.raises(Skip, match="engine vllm runs the draft at the target's tensor"):
        plan_case({**mtp, "metric": "speedup", "baseline": "same-engine-no-spec"})
    assert plan_case({**row, "notes": notes}).scenario.tp == 8  # plain decoding runs
    same = plan_case({**mtp, "notes": notes.replace("TP=1", "TP=8")})
    assert same.scenario.method.name == "mtp" and same.scenario.method.draft_tp is None


def test_a_lookup_drafter_needs_acceptance_of_its_datasets_own_domain():
    """An n-gram or suffix drafter proposes from the text itself, so a row whose dataset's
    domain has no packaged acceptance of its own (or no domain at all) is refused, where a model
    drafter's row falls back to chat, saying so. A code-editing dataset reads as code."""
    row = {**ROW, "metric": "speedup", "baseline": "same-engine-no-spec", "k": "3"}
    for method in ("ngram", "suffix"):
        with pytest.raises(Skip, match=f"{method} proposes from the text itself"):
            plan_case({**row, "method": method, "dataset": "some-new-bench"})
        with pytest.raises(Skip, match="no acceptance of the overall domain of 'spec-bench'"):
            plan_case({**row, "method": method, "dataset": "spec-bench"})
        edits = plan_case({**row, "method": method, "dataset": "blazedit"})
        assert edits.scenario.method.acceptance.tokens == "instructcoder"
        # ... and says so: another dataset's streams stand for this one's
        assert any("no token streams of 'blazedit'" in a for a in edits.assumptions)
        # code written from a description copies nothing given: edited code is no stand-in
        with pytest.raises(Skip, match="'humaneval' writes new code from a description"):
            plan_case({**row, "method": method, "dataset": "humaneval"})
        # a measured tau is the row's own acceptance: no streams are needed
        tau = plan_case({**row, "method": method, "dataset": "spec-bench", "measured_tau": "1.4"})
        assert tau.scenario.method.acceptance.tau == 1.4
    eagle = plan_case({**row, "method": "eagle3", "dataset": "some-new-bench"})
    assert any("no preset domain: chat assumed" in a for a in eagle.assumptions)


def test_an_unstated_shape_is_the_method_default_as_the_engine_drafts_it():
    """vLLM drafts a chain unless given a tree (SpeculativeConfig: "Generate chain of
    tokens"): an EAGLE-1 row on vLLM that states no shape runs its default depth as a chain,
    saying so; on SGLang the tree budget SGLang picks for the model when given none (in
    EAGLE-1's static tree), and wherever the row states a tree, the tree stays."""
    row = {**ROW, "metric": "speedup", "baseline": "same-engine-no-spec", "method": "eagle1"}
    vllm = plan_case(row)
    assert vllm.scenario.method.tree == "chain" and vllm.scenario.method.k == 5
    assert any("drafts a chain unless its config gives a tree" in a for a in vllm.assumptions)
    sglang = plan_case({**row, "engine": "sglang"}).scenario.method
    assert (sglang.tree, sglang.k, sglang.tree_nodes) == ("static", 5, 7)
    stated = plan_case({**row, "spec_shape": "tree", "tree_nodes": "25", "tree_topk": "4"})
    assert stated.scenario.method.tree == "static"


def test_a_sglang_rows_draft_tokens_count_the_verified_root():
    """SGLang verifies --speculative-num-draft-tokens tokens per request, the root among them
    (eagle_utils: topk(num_verify_tokens - 1) drafted nodes + the verified token): simspec's
    tree_nodes is one less. Elsewhere (EAGLE-2's total_token) the stated budget is drafted."""
    row = {**ROW, "metric": "speedup", "baseline": "same-engine-no-spec", "method": "eagle3"}
    tree = {"spec_shape": "tree", "k": "7", "tree_nodes": "8", "tree_topk": "4"}
    sglang = plan_case({**row, **tree, "engine": "sglang"})
    assert sglang.scenario.method.tree_nodes == 7
    assert any("num-draft-tokens 8 counts the verified root" in a for a in sglang.assumptions)
    assert plan_case({**row, **tree, "engine": "hf"}).scenario.method.tree_nodes == 8
    # steps 1, topk 8: the drafter has 8 candidates, so 10 draft tokens are 8 drafted nodes
    wide = plan_case({**row, **tree, "k": "1", "tree_nodes": "10", "tree_topk": "8",
                      "engine": "sglang"})  # fmt: skip
    assert wide.scenario.method.tree_nodes == 8
    assert any("8 taken" in a for a in wide.assumptions)


@pytest.mark.parametrize(
    ("engine", "gpu", "defaults"),
    [
        ("vllm", "h100_sxm", (1024, 8192)),
        ("vllm", "h20", (1024, 8192)),  # 96 GB, not an A100
        ("vllm", "a100_80gb", (256, 2048)),  # vLLM's device-name check (PR #17885)
        ("vllm", "a100_40gb", (256, 2048)),
        ("vllm", "l40s", (256, 2048)),  # under 70 GiB
        ("vllm-v0", "a100_80gb", (256, 2048)),  # V0's, on every GPU
        ("vllm-v0", "h100_sxm", (256, 2048)),
        ("sglang", "a100_80gb", (1024, 8192)),
    ],
)
def test_the_engines_batch_defaults_follow_the_gpu_as_vllm_sets_them(engine, gpu, defaults):
    from simspec.catalog.hardware import load_engine, load_gpu

    assert load_engine(engine).batch_defaults(load_gpu(gpu)) == defaults
    sc = Scenario(model="llama-3.1-8b", gpu=gpu, engine=engine)
    setup = setup_replica(sc)
    # SGLang's plain decoding runs at the cap it derives from the KV pool (2048 here)
    seqs = 2048 if engine == "sglang" else defaults[0]
    assert (setup.max_seqs, setup.max_tokens) == (seqs, defaults[1])
    given = SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=4096)
    setup = setup_replica(sc.model_copy(update={"scheduler": given}))
    assert (setup.max_seqs, setup.max_tokens) == (64, 4096)


@pytest.mark.parametrize(
    ("cells", "why"),
    [
        ({"temperature": "0.7-1.0"}, "temperature '0.7-1.0' is not one number"),
        ({"temperature": "~0"}, "is not one number"),
        ({"method": "eagle3", "spec_shape": "tree", "tree_nodes": "-3"}, "tree_nodes -3"),
        ({"method": "eagle3", "spec_shape": "tree", "tree_topk": "0"}, "tree_topk 0"),
    ],
)
def test_a_cell_that_is_no_one_number_or_count_skips_the_row_by_name(cells, why):
    with pytest.raises(Skip, match=why):
        plan_case({**ROW, **cells})
    assert plan_case({**ROW, "temperature": "unknown"}).scenario.temperature == 0.0


def test_a_skipped_row_keeps_the_cells_assume_filled():
    row = {**ROW, "num_gpus": "8"}
    out = validate(read_cases_from([row]), runs=SERIAL, assume={"tp": "4"})
    assert out.status.iloc[0] == "skipped" and "disagree" in out.skip_reason.iloc[0]
    assert "--assume tp=4" in out.assumptions.iloc[0]


def read_cases_from(rows: list[dict[str, str]]):
    import pandas as pd

    return pd.DataFrame(rows).fillna("").astype(str)


def test_a_gpu_count_written_unknown_is_unstated():
    plan = plan_case({**ROW, "tp": "unknown", "num_gpus": "n/a"})
    assert plan.scenario.tp == 1 and any("tp=1" in a for a in plan.assumptions)


def test_a_step_time_row_is_checked_as_a_simulated_row_would_be():
    step = {**ROW, "metric": "step_time_ms", "context_len": "1000", "tp": "1"}
    rows = [
        step,
        {**step, "target_model": "llama-3.1-70b"},
        {**step, "load": "4096", "context_len": "100000"},
        {**step, "load_kind": "qps", "load": "2.5"},
    ]
    out = validate(read_cases_from(rows), runs=SERIAL)
    assert out.status.tolist() == ["ok", "skipped", "skipped", "skipped"]
    why = out.skip_reason.tolist()
    assert "does not fit" in why[1] and "KV cache holds" in why[2] and "request rate" in why[3]


def test_a_shape_that_is_no_chain_or_tree_and_a_plain_decoding_speedup_are_skipped():
    eagle = {**ROW, "method": "eagle3", "metric": "speedup", "measured_value": "2"}
    with pytest.raises(Skip, match="spec_shape 'spiral'"):
        plan_case({**eagle, "spec_shape": "spiral"})
    with pytest.raises(Skip, match="by definition"):
        plan_case({**ROW, "metric": "speedup", "measured_value": "1"})
    out = validate(read_cases_from([{**eagle, "spec_shape": "none", "series": "s"}]), runs=SERIAL)
    from simspec.studies.validation.summary import mape_line, series_table

    assert "no error to report" in mape_line(out, series_table(out))


def test_a_rows_statistic_is_the_one_its_notes_name_in_a_closed_loop_too():
    """A closed loop's speedup its notes define as a TPOT or a mean latency ratio, and a TPOT
    row's median, are scored so (QA: all read the throughput ratio and the mean); a
    speculative step_time_ms row is refused (it had read as a plain decode step)."""
    row = {
        **ROW,
        "metric": "speedup",
        "method": "eagle3",
        "k": "3",
        "baseline": "same-engine-no-spec",
    }
    tpot = plan_case({**row, "notes": "speedup = 7.07 ms vanilla TPOT / spec TPOT"})
    latency = plan_case({**row, "notes": "mean latency/request ratio (doc headline)"})
    plain = plan_case({**row, "notes": "tok/s ratio"})
    assert (tpot.statistic, latency.statistic, plain.statistic) == ("tpot", "mean", "throughput")
    median = plan_case({**ROW, "notes": "median TPOT; median ITL 14.41 ms"})
    assert median.statistic == "median" and any("median" in a for a in median.assumptions)
    assert plan_case({**ROW, "notes": "'Mean TPOT (ms): 5' (median 4)"}).statistic == "mean"
    with pytest.raises(Skip, match="plain decode step"):
        plan_case(
            {
                **ROW,
                "metric": "step_time_ms",
                "method": "eagle3",
                "k": "2",
                "context_len": "1024",
                "load_kind": "static_batch",
            }
        )


def test_an_other_engines_baseline_runs_its_own_version_without_the_rows_serve_flags():
    """'other: vLLM 0.6.0 BF16 no-spec' is a V0 server with vLLM's own limits; the row's
    --max-running-requests is the speculative server's (QA: the version was dropped and the
    SGLang flags sped the vLLM baseline)."""
    row = {**ROW, "metric": "speedup", "method": "eagle3", "k": "3", "engine": "sglang"}
    row |= {"baseline": "other: vLLM 0.6.0 BF16 no-spec", "notes": "--max-running-requests 2"}
    plan = plan_case(row)
    assert plan.baseline.engine == "vllm-v0" and plan.baseline.scheduler.max_num_seqs != 2
    assert plan.scenario.scheduler.max_num_seqs == 2


def test_a_profile_reaches_the_baseline_it_describes_in_a_speedup_row():
    """A vLLM-calibrated profile on an SGLang row's speedup: the vLLM baseline takes it, the
    SGLang run does not (QA: the profile had reached neither)."""
    from types import SimpleNamespace

    from simspec.studies.validation.run import on_profile

    row = {**ROW, "metric": "speedup", "method": "eagle3", "k": "3", "engine": "sglang"}
    plan = plan_case({**row, "baseline": "other: vLLM 0.11.0 BF16 no-spec"})
    profile = SimpleNamespace(gpu="h100_sxm", deployment=SimpleNamespace(engine="vllm"))
    moved = on_profile(plan, "mine.yaml", profile)
    assert moved.baseline.profile == "mine.yaml" and moved.scenario.profile is None
    assert any("mine.yaml (the baseline)" in a for a in moved.assumptions)


def test_a_v0_row_whose_serve_command_sets_chunked_prefill_is_refused():
    """V0's chunked prefill is its defaults' to decide in simspec (engines.yaml v0_scheduler):
    a serve command that sets it names a deployment simspec cannot state, not one to guess."""
    row = {
        **ROW,
        "engine_version": "0.6.0",
        "notes": "serve: vllm serve m --enable-chunked-prefill",
    }
    with pytest.raises(Skip, match="sets vLLM V0's chunked prefill"):
        plan_case(row)


def test_the_last_serve_flag_stated_counts_and_vllms_suffixes_are_read():
    """Notes restate a flag for the run they report ("this run used the script modified ...
    (--max-num-batched-tokens 4096)"): the last one counts, as trtllm-serve's already did (QA:
    9 GPUStack rows ran the first); "32k" is vLLM's human_readable_int, not 32."""
    from simspec.studies.validation.setups import serve_limits

    notes = "vllm serve m --max-num-batched-tokens 8192; this run (--max-num-batched-tokens 4096)"
    assert serve_limits(notes) == {"max_num_batched_tokens": 4096}
    assert serve_limits("--max-model-len 32k --max-num-seqs=64") == {
        "max_model_len": 32000,
        "max_num_seqs": 64,
    }
    assert serve_limits("--max-model-len 32K") == {"max_model_len": 32768}
    shares = "--gpu-memory-utilization 0.9 then --gpu-memory-utilization=0.8"
    assert serve_limits(shares) == {"gpu_memory_utilization": 0.8}


def test_a_ttft_row_is_scored_on_the_mean_unless_its_notes_name_the_median():
    """vllm bench serve prints 'Mean TTFT (ms)' first (QA: the median was scored against it)."""
    row = {**ROW, "metric": "ttft_ms", "prompt_len": "1000", "output_len": "20"}
    assert plan_case(row).statistic == "mean"
    median = plan_case({**row, "notes": "median TTFT over 100 requests"})
    assert median.statistic == "median" and any("median" in a for a in median.assumptions)
