"""SGLang as its versions run speculative decoding: at most 48 running requests unless
--max-running-requests is given (0.4.5+), and from 0.5.11 the overlap scheduler kept under
EAGLE/MTP/draft models (spec v2, the ``sglang-v2`` profile), with sglang's kernels and n-gram
proposer; validation rows run their version's profile, and a paper's static batch its size."""

from __future__ import annotations

import pandas as pd
import pytest

from simspec.catalog.hardware import load_engine
from simspec.catalog.methods import preset_method
from simspec.config import Scenario, SchedulerConfig, WorkloadConfig
from simspec.engine.build import build_cost_model, setup_replica
from simspec.engine.speculators.lookup import matched_sizes
from simspec.studies.validation.loads import engine_version_profile
from simspec.studies.validation.predict import plan_case


def scenario(method: str, engine: str, **scheduler) -> Scenario:
    return Scenario(
        method=preset_method(method, "sharegpt", None, "llama-3.1-8b"),
        engine=engine,
        workload=WorkloadConfig(concurrency=64),
        scheduler=SchedulerConfig(**scheduler),
    )


@pytest.mark.parametrize("engine", ["sglang", "sglang-v2"])
def test_sglang_runs_at_most_48_requests_under_speculation_unless_told(engine):
    assert setup_replica(scenario("eagle3", engine)).max_seqs == 48
    assert setup_replica(scenario("ngram", engine)).max_seqs == 48
    # plain decoding runs at the cap SGLang derives from the KV pool: 2048 to 4096
    assert 2048 <= setup_replica(scenario("autoregressive", engine)).max_seqs <= 4096
    assert setup_replica(scenario("eagle3", engine, max_num_seqs=64)).max_seqs == 64


def test_vllm_has_no_speculative_cap():
    vllm = load_engine("vllm")
    assert vllm.max_seqs_for("eagle3") == vllm.max_seqs_for("autoregressive")


@pytest.mark.parametrize(
    ("method", "v1", "v2"),
    [("eagle3", False, True), ("draft_model", False, True), ("ngram", False, False)],
)
def test_spec_v2_keeps_the_overlap_scheduler_under_eagle_and_draft_models(method, v1, v2):
    assert build_cost_model(scenario(method, "sglang")).host.overlapped is v1
    assert build_cost_model(scenario(method, "sglang-v2")).host.overlapped is v2
    assert build_cost_model(scenario("autoregressive", "sglang-v2")).host.overlapped


def test_spec_v2_runs_an_explicit_wide_tree_as_spec_v1_and_keeps_its_own_pick():
    """QA: a top-k > 1 tree given to SGLang's spec v2 kept the overlap scheduler, where
    _handle_eagle_family falls back to spec v1 ("spec v2 currently only supports topk = 1");
    the tree SGLang picks itself (Llama's 5-4-8, chosen after that check) keeps spec v2."""
    given = {"name": "eagle3", "k": 5, "tree": "dynamic", "tree_nodes": 8, "tree_topk": 4}
    wide = Scenario(engine="sglang-v2", method={**given, "acceptance": {"alpha": 0.7}})
    assert not build_cost_model(wide).host.overlapped
    narrow = {**given, "tree": "chain", "tree_nodes": None, "tree_topk": None}
    chain = Scenario(engine="sglang-v2", method={**narrow, "acceptance": {"alpha": 0.7}})
    assert build_cost_model(chain).host.overlapped
    # a tree given without its top-k drafts at the presets' (10 for 16 nodes at depth 4)
    unstated = {"name": "eagle3", "k": 4, "tree": "dynamic", "tree_nodes": 16}
    wide_too = Scenario(engine="sglang-v2", method={**unstated, "acceptance": {"alpha": 0.7}})
    assert not build_cost_model(wide_too).host.overlapped
    own = preset_method("eagle3", "sharegpt", None, "llama-3.1-8b", "sglang-v2")
    assert (own.tree_topk or 1) > 1  # SGLang's own Llama tree
    assert build_cost_model(Scenario(engine="sglang-v2", method=own)).host.overlapped


def test_spec_v2_runs_sglangs_kernels_and_ngram_proposer():
    v1, v2 = load_engine("sglang"), load_engine("sglang-v2")
    assert v2.engine_kernels == "sglang" and v2.family == "sglang"
    moe = Scenario(model="qwen3-30b-a3b", gpu="h200", engine="sglang")
    from simspec.catalog.models import load_model

    model = load_model("qwen3-30b-a3b")
    fits = [
        build_cost_model(moe.model_copy(update={"engine": e})).moe_kernel(None, model)
        for e in (v1.id, v2.id)
    ]
    assert fits[0] is not None and fits[0] == fits[1]
    ngram = preset_method("ngram", "sharegpt", None, "llama-3.1-8b")
    assert matched_sizes(ngram, "sglang-v2") is None  # SGLang's trie, not vLLM's n-gram sizes


@pytest.mark.parametrize(
    ("version", "profile"),
    [("0.5.11", "sglang-v2"), ("v0.5.23", "sglang-v2"), ("v0.5.5.post1", "sglang")]
    + [("0.5.10", "sglang"), ("0.4.4", "sglang"), ("Dec 2025 (not stated)", "sglang")],
)
def test_validation_rows_run_their_sglang_versions_profile(version, profile):
    got, said = engine_version_profile("sglang", version)
    assert got == profile
    assert bool(said) is (profile != "sglang")


def _row(shared, case_id: str, **cells: str) -> dict[str, str]:
    cases = pd.read_csv(shared / "validation" / "cases.csv", dtype=str, keep_default_na=False)
    return {**cases[cases.case_id == case_id].iloc[0].to_dict(), **cells}


def test_a_papers_static_batch_runs_whole_and_a_served_load_keeps_the_cap(shared):
    held = plan_case(_row(shared, "e3t3-e3-bs64"))
    assert held.scenario.scheduler.max_num_seqs == 64
    assert any("ran whole" in a for a in held.assumptions)
    served = plan_case(_row(shared, "e3t3-e3-bs64", load_kind="concurrency"))
    assert served.scenario.scheduler.max_num_seqs is None
    small = plan_case(_row(shared, "e3t3-e3-bs32"))
    assert small.scenario.scheduler.max_num_seqs is None


def test_a_sweep_says_when_sglangs_speculative_cap_queues_its_batch():
    from typer.testing import CliRunner

    from simspec.cli.main import app

    args = ["sweep", "--engine", "sglang", "--methods", "eagle3", "--requests", "8"]
    args += ["--executor", "serial", "--batch-sizes"]
    capped = CliRunner().invoke(app, [*args, "1,64"])
    assert capped.exit_code == 0, capped.output
    said = " ".join(capped.output.split())
    assert "runs at most 48 requests under speculative decoding" in said
    lifted = CliRunner().invoke(app, [*args, "1,64", "--max-running-requests", "64"])
    assert "at most" not in " ".join(lifted.output.split())


@pytest.mark.parametrize(
    ("gpu", "tokens", "graph", "graph_tp4"),
    [
        ("rtx3090", 2048, 24, 80),  # < 35 GiB
        ("a100_40gb", 4096, 32, 160),  # < 60 GiB
        ("l40s", 4096, 32, 160),
        ("a100_80gb", 8192, 256, 512),  # the profile's own tier
        ("h200", 8192, 256, 512),
        ("b200", 16384, 512, 512),  # above 160 GiB
        ("mi300x", 16384, 512, 512),
    ],
)
def test_sglang_sizes_its_prefill_chunk_and_graphs_by_the_gpus_memory(
    gpu, tokens, graph, graph_tp4
):
    from simspec.catalog.hardware import load_gpu

    engine, spec = load_engine("sglang"), load_gpu(gpu)
    assert engine.batch_defaults(spec)[1] == tokens
    assert engine.graph_limits(1, spec)[1] == graph
    assert engine.graph_limits(4, spec)[1] == graph_tp4
    sc = Scenario(model="llama-3.1-8b", gpu=gpu, engine="sglang")
    assert setup_replica(sc).max_tokens == tokens
    assert build_cost_model(sc).host.graph_max_seqs == graph


def test_the_explorer_says_when_sglangs_speculative_cap_queues_its_loads():
    from simspec.ui.inputs import ExplorerInputs, engine_caveats

    capped = ExplorerInputs(engine="sglang", loads=[1, 64, 128])
    (caveat,) = engine_caveats(capped)
    assert "at most 48" in caveat and "64, 128" in caveat
    assert engine_caveats(capped.model_copy(update={"loads": [1, 32]})) == []
    assert engine_caveats(capped.model_copy(update={"engine": "vllm"})) == []
    assert engine_caveats(capped.model_copy(update={"methods": ["autoregressive"]})) == []


def test_sglang_derives_its_plain_running_cap_from_the_kv_pool():
    """resolve_max_num_reqs: KV tokens over the context length times 512, clamped to
    [2048, 4096], at most half the tokens (simspec had run a fixed 1024, vLLM's H100 default)."""
    from simspec.config import SchedulerConfig

    long = setup_replica(Scenario(engine="sglang"))  # 131,072 tokens of context
    short = setup_replica(Scenario(engine="sglang", scheduler=SchedulerConfig(max_model_len=4096)))
    tiny = setup_replica(
        Scenario(engine="sglang", scheduler=SchedulerConfig(gpu_memory_utilization=0.25))
    )
    assert long.max_seqs == 2048 and short.max_seqs == 4096
    assert tiny.max_seqs == min(2048, tiny.memory.num_blocks * tiny.memory.block_size // 2)
