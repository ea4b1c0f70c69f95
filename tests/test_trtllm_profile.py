"""The trtllm engine profile: TensorRT-LLM's PyTorch backend as trtllm-serve runs it.

Its defaults are trtllm-serve's, each with a source; its host model keeps the overlap scheduler
for the one-model speculative modes only, replays CUDA graphs for decode batches of a captured
size only, sizes the KV cache from the memory the weights leave, and admits a request only when
its whole output fits (GUARANTEED_NO_EVICT); it refuses the methods TensorRT-LLM does not ship,
and validate predicts the GPUStack rows measured on it.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
from typer.testing import CliRunner

from simspec import simulate
from simspec.catalog.hardware import load_engine, load_gpu
from simspec.catalog.models import load_model
from simspec.cli.main import app
from simspec.config import LengthSpec, Scenario, WorkloadConfig
from simspec.engine.build import setup_replica
from simspec.engine.costmodel.collectives import engine_collectives
from simspec.engine.costmodel.host import HostModel
from simspec.engine.costmodel.shapes import BatchShape
from simspec.engine.kv_cache import BlockPool, MemoryDemand, plan_memory
from simspec.engine.requests import RequestTable
from simspec.engine.scheduler import Scheduler
from simspec.engine.workload import RequestSpecs
from simspec.errors import InputError
from simspec.studies.validation.setups import serve_limits, trtllm_serving
from tests.refusals import one_error

runner = CliRunner()


def test_the_profile_loads_with_every_parameter_sourced():
    engine = load_engine("trtllm")
    assert set(engine.REQUIRED) <= set(engine.params)
    for key, param in engine.params.items():
        assert len(param.source) > 60, key  # a citation or an estimate with its arithmetic


def test_its_defaults_are_trtllm_serves():
    engine = load_engine("trtllm")
    assert engine["max_num_seqs"] == 2048  # --max_batch_size: BuildConfig.max_batch_size
    assert engine["max_num_batched_tokens"] == 8192  # --max_num_tokens
    assert engine["block_size"] == 32  # KvCacheConfig.tokens_per_block
    assert engine["gpu_memory_utilization"] == 0.9  # --kv_cache_free_gpu_memory_fraction
    assert engine.graph_limits(1) == (1e9, 128)  # CudaGraphConfig: up to 128 requests
    assert engine.custom_allreduce == "trtllm"
    assert engine.flag("guaranteed_no_evict") and engine.flag("prefix_caching")


def test_overlap_stays_on_for_one_model_eagle3_and_mtp_and_goes_off_for_the_rest():
    engine = load_engine("trtllm")
    assert engine.step_overhead(speculative=engine.overlap_off_by("autoregressive")) == 0.0
    for method in ("eagle3", "mtp"):
        assert not engine.overlap_off_by(method)
    for method in ("ngram", "draft_model"):
        assert engine.step_overhead(engine.overlap_off_by(method)) == engine["step_overhead_s"]
    # the other engines: any speculative method, as before
    assert load_engine("sglang").overlap_off_by("eagle3")


def test_a_decode_batch_replays_a_graph_only_at_a_captured_size():
    host = HostModel.of(load_engine("trtllm"), tp=1)

    def decode(n: int) -> BatchShape:
        return BatchShape.uniform(n, 1, 1000.0 * n, n)

    # TRT-LLM's unpadded list: 1-31, 32, 64, 128
    assert [n for n in (1, 31, 32, 33, 63, 64, 100, 128, 129) if host.graphed(decode(n))] == [
        1,
        31,
        32,
        64,
        128,
    ]
    prefill = BatchShape.uniform(1, 512, 0.0, 1)
    assert not host.graphed(prefill)  # decode-only graphs


def test_its_kv_cache_is_a_fraction_of_the_memory_the_weights_leave():
    gpu, target = load_gpu("h100_sxm"), load_model("llama-3.1-8b")
    demand = MemoryDemand(0.0, 0.0, 8192, 1)
    trt = plan_memory(gpu, load_engine("trtllm"), target, demand)
    vllm = plan_memory(gpu, load_engine("vllm"), target, demand)
    assert trt.activation_bytes == vllm.activation_bytes
    left = gpu.budget_bytes - trt.weight_bytes - trt.activation_bytes
    kv_tokens = trt.num_blocks * trt.block_size
    assert kv_tokens * trt.kv_bytes_per_token == pytest.approx(0.9 * left, rel=1e-3)
    assert kv_tokens > vllm.num_blocks * vllm.block_size  # 0.9 of what is left, not of all


def _rig(prompts: list[int], outputs: list[int], blocks: int, reserve: bool) -> Scheduler:
    n = len(prompts)
    specs = RequestSpecs(
        np.array(prompts, dtype=np.int64), np.array(outputs, dtype=np.int64), np.full(n, -1)
    )
    table = RequestTable(specs)
    sched = Scheduler(table, BlockPool(blocks), 4, 256, 2048, 0, reserve_output=reserve)
    for rid in range(n):
        sched.add(rid)
    return sched


def test_no_evict_admits_a_request_only_when_its_whole_output_fits():
    # two 8-token prompts with 32 tokens of output each: 10 blocks of 4 per request at the end
    greedy = _rig([8, 8], [32, 32], blocks=16, reserve=False)
    assert len(greedy.schedule().prefill) == 2  # both prompts fit now; one is preempted later
    no_evict = _rig([8, 8], [32, 32], blocks=16, reserve=True)
    assert no_evict.schedule().prefill.tolist() == [0]  # the second waits for the first's end
    assert len(no_evict.waiting) == 1


def test_a_burst_runs_under_the_trtllm_limits_and_nothing_is_preempted():
    burst = WorkloadConfig(
        concurrency=96,
        requests=96,
        prompt=LengthSpec(mean=4000),
        output=LengthSpec(mean=300),
        measure="whole",
    )
    run = simulate(Scenario(model="qwen3-32b", gpu="h100_sxm", engine="trtllm", workload=burst))
    it = run.iterations
    assert run.requests.finish_s.notna().all()
    assert run.requests.preemptions.sum() == 0
    assert it.query_tokens.max() <= 8192
    # its KV holds fewer whole requests than the burst: admission waits instead of preempting
    whole = (4000 + 300) / (run.memory.num_blocks * run.memory.block_size)
    assert whole * 96 > 1 and (it.decode_seqs + it.prefill_seqs).max() < 96


def test_a_method_tensorrt_llm_does_not_ship_is_refused_by_name():
    with pytest.raises(InputError, match="eagle1 does not run on engine trtllm: .*EAGLE-3 only"):
        setup_replica(Scenario(engine="trtllm", method={"name": "eagle1"}))
    res = runner.invoke(
        app, ["sweep", "--engine", "trtllm", "--methods", "medusa1", "--batch-sizes", "1"]
    )
    one_error(res, "methods.name", "medusa1 does not run on engine trtllm", "TensorRT-engine")
    eagle3 = {"name": "eagle3", "acceptance": {"alpha": 0.7}}
    setup_replica(Scenario(engine="trtllm", method=eagle3))  # it ships EAGLE-3


@pytest.mark.parametrize("tree", ["static", "dynamic"])
def test_an_eagle3_tree_is_refused_where_the_server_drafts_chains(tree):
    """QA: a 60-node EAGLE-3 tree ran on trtllm (2.85x at batch 1) where its one-model
    worker drafts a chain and its attention refuses a dynamic tree."""
    eagle3 = {"name": "eagle3", "k": 6, "tree": tree, "tree_nodes": 60, "tree_topk": 10}
    with pytest.raises(InputError, match="engine trtllm drafts chains only") as err:
        setup_replica(Scenario(engine="trtllm", method={**eagle3, "acceptance": {"alpha": 0.7}}))
    assert err.value.field == "methods.eagle3.tree"


def test_trtllm_serve_flags_set_the_limits_and_the_last_stated_counts():
    notes = (
        "serve: trtllm-serve Qwen/Qwen3-14B --max_num_tokens=16384 --max_batch_size 64; this "
        "run used the script modified as its block label says (--max_num_tokens=32768)"
    )
    assert serve_limits(notes) == {"max_num_seqs": 64, "max_num_batched_tokens": 32768}
    assert "chunked prefill off" in trtllm_serving(notes)[1][0]
    assert "chunked prefill on" in trtllm_serving("--enable_chunked_prefill")[1][0]
    # the KV fraction is the deployment's memory share, not a reason to skip the row
    fraction = "--kv_cache_free_gpu_memory_fraction 0.8"
    assert trtllm_serving(fraction)[0] is None
    assert serve_limits(fraction) == {"gpu_memory_utilization": 0.8}


def test_the_trtllm_allreduce_stands_at_every_size():
    trt, vllm = engine_collectives("h200", 8, "trtllm"), engine_collectives("h200", 8, "vllm")
    assert trt is not None and vllm is not None
    big = 64 * 2**20  # past vLLM's switch to NCCL: TRT-LLM's op chooses for itself
    assert vllm.allreduce_time(big) == vllm.nccl_allreduce.time(big)
    assert trt.allreduce_time(big) != trt.nccl_allreduce.time(big)
    assert trt.allreduce_time(4096, graphed=False) == trt.allreduce_time(4096)  # graph-only data


@pytest.mark.slow  # validate's start-up (its tables and traces) alone takes seconds
def test_a_gpustack_trtllm_row_is_predicted(tmp_path):
    cases = tmp_path / "cases.csv"
    with open("../shared/validation/cases_serving_gpustack.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["case_id"] == "gps-qwen3-32b-a100-b12-tpot"]
    assert rows and rows[0]["engine"] == "trtllm"
    with open(cases, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    out = tmp_path / "g.csv"
    res = runner.invoke(
        app, ["validate", "--cases", str(cases), "--out", str(out), "--workers", "1"]
    )
    assert res.exit_code == 0, res.output
    with open(out, newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["status"] == "ok", row["skip_reason"]
    assert float(row["predicted_value"]) > 0
    assert "chunked prefill on" in row["assumptions"]


def test_the_no_evict_promise_holds_for_the_warm_up_cohort_too():
    """GUARANTEED_NO_EVICT admits a request only when its whole output fits beside what the
    running ones may grow to; the closed loop's starting cohort had been placed without that
    check, and 5 of its requests were preempted (QA)."""
    from simspec.config import AcceptanceConfig, MethodConfig, Scenario
    from simspec.engine.simulation import simulate

    method = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))
    sc = Scenario(
        engine="trtllm",
        method=method,
        workload={"concurrency": 128, "requests": 300, "turnovers": 0},
        scheduler={"gpu_memory_utilization": 0.25},
        seed=2,
    )
    assert int(simulate(sc).requests.preemptions.sum()) == 0


def test_a_sampling_run_keeps_greedy_acceptance_where_the_engine_verifies_greedily():
    """QA: TRT-LLM 1.0-1.2 samples one-model EAGLE-3 and MTP by argmax (allow_advanced_sampling
    off), and SGLang on ROCm verifies every draft greedily (no tree sampling kernel): at T=1
    their acceptance is greedy's, not 0.845 of it; a two-model method, and SGLang on CUDA,
    still sample."""
    from simspec.engine.build import greedy_verify_note, run_sampling
    from simspec.studies.provenance import verify_notes

    def at(engine: str, method: str, gpu: str = "h100_sxm", t: float = 1.0) -> Scenario:
        m = {"name": method, "k": 3, "acceptance": {"alpha": 0.7}}
        if method == "draft_model":
            m["draft_model"] = "llama-3.2-1b"
        return Scenario(engine=engine, gpu=gpu, temperature=t, top_p=0.9, method=m)

    assert run_sampling(at("trtllm", "eagle3")) == (0.0, 1.0)
    assert run_sampling(at("trtllm", "ngram")) == (1.0, 0.9)
    assert run_sampling(at("sglang", "eagle3", "mi300x")) == (0.0, 1.0)
    assert run_sampling(at("sglang-v2", "ngram", "mi355x")) == (0.0, 1.0)
    assert run_sampling(at("sglang", "eagle3")) == (1.0, 0.9)
    assert greedy_verify_note(at("trtllm", "eagle3", t=0.0)) is None
    assert "allow_advanced_sampling" in (greedy_verify_note(at("trtllm", "eagle3")) or "")
    assert verify_notes(at("sglang", "eagle3", "mi300x"), [at("sglang", "eagle3").method])
    # the run itself: T=1 on trtllm's EAGLE-3 accepts as T=0 does, step for step
    small = {"workload": {"concurrency": 4, "requests": 16, "measure": "whole"}}
    runs = [
        simulate(at("trtllm", "eagle3", t=t).model_copy(update={"workload": WorkloadConfig(
            **small["workload"])}))
        for t in (0.0, 1.0)
    ]  # fmt: skip
    assert runs[0].requests.equals(runs[1].requests)


@pytest.mark.slow
def test_a_closed_loop_past_the_kv_cache_starts_its_unplaced_requests_new():
    """QA: at concurrency 1,024 the stationary cohort left requests the KV cache could not
    hold waiting to recompute their outputs, one 8,365 tokens past TRT-LLM's unchunked
    8,192-token budget, and the run (and every plan on trtllm) stopped with "could not place
    any request". An engine that never evicts holds no request mid-output outside its batch:
    those wait as new arrivals."""
    wl = WorkloadConfig(arrival="closed", concurrency=1024, requests=2048, turnovers=2)
    run = simulate(Scenario(engine="trtllm", workload=wl))
    req = run.requests
    assert req["finish_s"].notna().all()
    resumed = int((req["tokens_before_start"] > 0).sum())
    assert 0 < resumed < 1024  # the cohort the cache holds resumed; the rest started new
    assert (req["preemptions"] == 0).all()


def test_the_one_model_first_pass_is_eagle3_and_mtps_alone():
    """Review: the padded, prompt-merged first draft pass is the one-model workers'
    (prepare_1st_drafter_inputs); TRT-LLM's two-model draft model feeds a + 1 tokens
    (ModelDrafter), so its numbers stay as they were."""

    def first(method: str) -> int:
        m = {"name": method, "k": 3, "acceptance": {"alpha": 0.7}}
        if method == "draft_model":
            m["draft_model"] = "llama-3.2-1b"
        return setup_replica(Scenario(engine="trtllm", method=m)).speculator.padded_first(3)

    assert first("eagle3") == 4 and first("draft_model") == 0


def test_trtllm_caches_a_kv_layer_per_mtp_draft_token():
    """QA: TensorRT-LLM's get_num_spec_layers returns the MTP config's
    num_nextn_predict_layers (K), each a KV layer of its own; vLLM and SGLang cache the
    model's one MTP layer, reused for every draft step."""

    def extra(engine: str, k: int) -> float:
        m = {"name": "mtp", "k": k, "acceptance": {"alpha": 0.7}}
        sc = Scenario(model="deepseek-v3", gpu="h200", tp=8, engine=engine, method=m)
        return setup_replica(sc).speculator.extra_kv_bytes_per_token()

    assert extra("trtllm", 3) == pytest.approx(3 * extra("vllm", 3))
    assert (
        extra("trtllm", 1) == pytest.approx(extra("vllm", 1)) == pytest.approx(extra("sglang", 3))
    )


@pytest.mark.parametrize("gpu", ["a100_80gb", "l40s"])
def test_gpt_oss_mxfp4_is_refused_where_trtllm_has_no_mxfp4_moe_backend(gpu):
    """QA: gpt-oss ran on trtllm on an A100 and an L40S; TensorRT-LLM's GPT-OSS MoE backend
    matrix lists MXFP4 on Blackwell and Hopper only. A bf16 checkpoint is another one."""
    from simspec.config import MethodConfig
    from simspec.errors import InputError

    plain = MethodConfig(name="autoregressive", k=0)
    sc = Scenario(model="gpt-oss-20b", gpu=gpu, engine="trtllm", method=plain)
    with pytest.raises(InputError, match="mxfp4 checkpoint on hopper, blackwell GPUs only"):
        setup_replica(sc)
    setup_replica(sc.model_copy(update={"precision": "bf16"}))
    setup_replica(sc.model_copy(update={"gpu": "h100_sxm"}))
    setup_replica(sc.model_copy(update={"engine": "vllm"}))
