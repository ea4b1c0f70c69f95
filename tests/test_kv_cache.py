"""The GPU memory plan (how many KV blocks fit) and the block pool that hands them out.

The hand-computed cases use a tiny model whose numbers fit in a comment:

    hidden 8, MLP 16, 2 layers, 2 query and 2 KV heads of width 4, vocabulary 32, untied head
    one layer's weights: QKV 8 x 24 = 192, O 8 x 8 = 64, MLP 3 x 8 x 16 = 384  -> 640
    whole model: 2 x 640 + embedding 256 + LM head 256 = 1792 parameters = 3584 bytes (bf16)
    KV per token: K and V x 2 layers x 8 wide x 2 bytes = 64 bytes; a 16-token block 1024 bytes

on a 100,000-byte GPU at gpu_memory_utilization 0.5 (50,000 usable bytes).
"""

from __future__ import annotations

import pytest

from simspec.catalog.hardware import EngineProfile, GpuSpec, Sourced, load_engine, load_gpu
from simspec.catalog.models import ModelShape, load_model
from simspec.engine.kv_cache import (
    GIB,
    BlockPool,
    MemoryDemand,
    MemoryPlan,
    WindowBlocks,
    activation_reserve,
    min_gpus,
    plan_memory,
    window_tokens,
)
from simspec.errors import InputError, ScenarioError

TINY = ModelShape(
    id="tiny",
    hidden_size=8,
    intermediate_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=4,
    vocab_size=32,
)


def tiny_gpu(memory_bytes: float = 100_000) -> GpuSpec:
    return GpuSpec(
        id="tiny_gpu",
        name="Tiny GPU",
        arch="hopper",
        bf16_dense_flops=1e12,
        hbm_bandwidth_bytes_s=1e12,
        memory_bytes=memory_bytes,
        interconnect_bandwidth_bytes_s=1e11,
        gpus_per_node=8,
        source="a test fixture",
    )


def engine(utilization: float = 0.5, block_size: int = 16, hybrid: bool = True) -> EngineProfile:
    """vLLM's profile with the two numbers the plan reads replaced (``hybrid`` off: a pool
    sized once, as engines without vLLM V1's hybrid KV cache manager have it)."""
    base = load_engine("vllm")
    params = dict(base.params)
    params["gpu_memory_utilization"] = Sourced(value=utilization, source="test")
    params["block_size"] = Sourced(value=block_size, source="test")
    params["hybrid_kv_pool"] = Sourced(value=int(hybrid), source="test")
    return EngineProfile(id="test", params=params)


def plan(
    gpu: GpuSpec | None = None,
    target: ModelShape = TINY,
    *,
    tp: int = 1,
    pp: int = 1,
    eng: EngineProfile | None = None,
    draft_bytes: float = 0.0,
    draft_kv_per_token: float = 0.0,
    max_tokens: int = 0,
    max_logit_rows: int = 0,
    max_seqs: int = 0,
) -> MemoryPlan:
    """The one place that calls plan_memory (no activations unless asked for)."""
    demand = MemoryDemand(draft_bytes, draft_kv_per_token, max_tokens, max_logit_rows, max_seqs)
    return plan_memory(gpu or tiny_gpu(), eng or engine(), target, demand, tp=tp, pp=pp)


# -- the plan, by hand ----------------------------------------------------------------------
def test_the_tiny_model_leaves_45_blocks():
    p = plan()
    assert p.usable_bytes == 50_000
    assert p.weight_bytes == 3584
    assert p.kv_bytes_per_token == 64
    assert p.block_size == 16
    assert p.num_blocks == 45  # (50,000 - 3,584) // 1,024 = 45.3


def test_draft_weights_come_out_of_the_kv_memory():
    p = plan(draft_bytes=1000)
    assert p.draft_bytes == 1000
    assert p.num_blocks == 44  # (50,000 - 3,584 - 1,000) // 1,024 = 44.4


def test_the_draft_kv_makes_every_block_larger():
    p = plan(draft_kv_per_token=64)
    assert p.kv_bytes_per_token == 128
    assert p.num_blocks == 22  # 46,416 // 2,048 = 22.7


def test_tensor_parallelism_halves_the_weights_and_kv_heads_on_each_gpu():
    p = plan(tp=2)
    assert p.weight_bytes == 3584 / 2
    assert p.kv_bytes_per_token == 32  # one of the two KV heads
    assert p.num_blocks == 94  # (50,000 - 1,792) // 512 = 94.2


def test_a_layer_split_over_two_gpus_pools_their_memory():
    # each GPU holds one layer: half the weights (1,792 bytes) and half of each token's KV
    # (32 bytes, so 512 per block) in its own 50,000 bytes: 48,208 // 512 = 94 blocks
    split = plan(pp=2)
    assert split.num_blocks == 94
    assert split.num_blocks == plan(gpu=tiny_gpu(200_000)).num_blocks


def test_the_activation_reserve_is_subtracted():
    p = plan(max_tokens=8, max_logit_rows=4)
    assert p.activation_bytes == activation_reserve(TINY, 1, 8, 4) > 0
    assert p.num_blocks == int((50_000 - 3584 - p.activation_bytes) // 1024)
    assert p.num_blocks < plan().num_blocks


def test_each_pipeline_stage_holds_its_own_activations():
    """QA: the reserve was subtracted once for pp stages that each run the whole token budget
    through their layers (Llama-3.1-70B on two H100s had 35 % more KV than its stages hold)."""
    one = activation_reserve(TINY, 1, 8, 4)
    split = plan(pp=2, max_tokens=8, max_logit_rows=4)
    assert split.activation_bytes == 2 * one
    assert split.num_blocks == int((2 * 50_000 - 3584 - 2 * one) // 1024)


def test_the_activation_reserve_holds_fp32_logits_per_row_over_the_whole_vocabulary():
    """Every tensor-parallel rank holds the all-gathered logits whole (vLLM V1:
    LogitsProcessor._gather_logits all-gathers; QA: the reserve divided them by tp)."""
    base = activation_reserve(TINY, 1, 8, 0)
    assert activation_reserve(TINY, 1, 8, 1) - base == 32 * 4  # 32 logits, 4 bytes each
    assert activation_reserve(TINY, 1, 8, 3) - base == 3 * 32 * 4
    tp2 = activation_reserve(TINY, 2, 8, 0)
    assert activation_reserve(TINY, 2, 8, 1) - tp2 == 32 * 4


def test_the_activation_reserve_grows_in_proportion_to_the_token_budget():
    one = activation_reserve(TINY, 1, 1, 0)
    assert one > 0
    assert activation_reserve(TINY, 1, 100, 0) == pytest.approx(100 * one)


def test_tensor_parallelism_shards_the_activation_reserve():
    assert activation_reserve(TINY, 2, 100, 10) < activation_reserve(TINY, 1, 100, 10)


# -- windowed layers: at most a window per running sequence, out of the same memory -------------
# TINY with its first layer windowed over 8 tokens: 32 bytes per token in the full layer and 32
# in the windowed one; a sequence keeps at most 8 + 16 = 24 tokens in the windowed layer.
WINDOWED = TINY.model_copy(
    update={"id": "tiny-window", "sliding_window": 8, "sliding_layers": (0,)}
)


def test_a_sequence_keeps_its_window_plus_the_block_being_filled():
    assert window_tokens(WINDOWED, 16) == 24 and window_tokens(TINY, 16) == 0


# -- a pool sized once (no hybrid KV cache manager): windows for max_num_seqs set aside ----------
SIZED_ONCE = engine(hybrid=False)


def test_below_the_window_cap_every_cached_token_costs_both_layers():
    # 1,000 sequences could keep 24,000 windowed tokens, more than the pool: each token costs
    # 64 bytes, as in the model without a window: 46,416 // 1,024 = 45 blocks
    p = plan(target=WINDOWED, max_seqs=1000, eng=SIZED_ONCE)
    assert p.kv_bytes_per_token == 32
    assert p.num_blocks == plan().num_blocks == 45
    assert p.window_bytes == 45 * 16 * 32
    assert p.window is None


def test_past_the_window_cap_only_the_full_layers_grow():
    # one sequence keeps at most 24 windowed tokens (768 bytes): (46,416 - 768) // 512 = 89
    p = plan(target=WINDOWED, max_seqs=1, eng=SIZED_ONCE)
    assert p.num_blocks == 89
    assert p.window_bytes == 24 * 32
    # no sequences: no window held
    assert plan(target=WINDOWED, eng=SIZED_ONCE).num_blocks == 46_416 // 512


def test_more_running_sequences_never_leave_fewer_blocks_than_full_attention_would():
    blocks = [
        plan(target=WINDOWED, max_seqs=n, eng=SIZED_ONCE).num_blocks
        for n in (0, 1, 10, 100, 10_000)
    ]
    assert blocks == sorted(blocks, reverse=True) and blocks[-1] == 45


# -- vLLM V1's hybrid pool: each running sequence's window leaves it as its tokens fill it -------
def test_the_hybrid_pool_counts_full_attention_blocks_whatever_the_running_sequences():
    # 46,416 // (32 x 16) = 90 blocks of the full layer, for 1 or 10,000 sequences alike; each
    # sequence's windowed layer takes up to 2 blocks (24 tokens) at 1 pool block each
    plans = [plan(target=WINDOWED, max_seqs=n) for n in (0, 1, 10_000)]
    assert {p.num_blocks for p in plans} == {90}
    assert plans[1].window == WindowBlocks(per_seq=2, ratio=1.0)
    assert plans[1].window_bytes == 24 * 32  # one sequence's full window
    assert plans[2].window_bytes == 90 * 16 * 32  # at most the pool


def test_a_sequence_takes_its_window_blocks_as_its_tokens_fill_them():
    p = plan(target=WINDOWED, max_seqs=1)
    # 8 tokens: 1 block of each layer; 100 tokens: 7 full-layer blocks and a window's 2
    assert p.seq_blocks(8) == 2 and p.seq_blocks(100) == 9
    # one sequence alone: 90 pool blocks hold 88 blocks of tokens and its 2 window blocks
    assert p.seq_tokens() == 88 * 16
    assert plan(target=TINY).seq_tokens() == 45 * 16  # no window: every block its tokens


def test_window_blocks_round_up_per_sequence_and_invert():
    w = WindowBlocks(per_seq=3, ratio=0.5)
    assert [w.units(h) for h in range(6)] == [0, 2, 3, 5, 6, 7]
    # the most blocks of tokens within u pool blocks: the inverse of units
    assert [w.full_of(u) for u in range(8)] == [0, 0, 1, 2, 2, 3, 4, 5]
    assert list(w.table()) == [0, 2, 3, 5]
    assert WindowBlocks(per_seq=4, ratio=3.0).units(2) == 8  # a whole ratio stays whole


def test_llama_4_scout_fits_on_eight_h200_at_bf16():
    # 36 of its 48 layers attend within 8,192-token chunks; vLLM's 1,024 sequences each holding
    # a chunk would be 1,024 x 8,208 tokens x 36 layers x 2 x 128 x 2 bytes (one KV head per
    # GPU at tp=8) = 145 GiB per GPU if reserved up front
    gpu, eng, scout = load_gpu("h200"), load_engine("vllm"), load_model("llama-4-scout")
    seqs, tokens = int(eng["max_num_seqs"]), int(eng["max_num_batched_tokens"])
    p = plan(gpu, scout, tp=8, eng=eng, max_tokens=tokens, max_logit_rows=seqs, max_seqs=seqs)
    assert 24 * GIB < p.weight_bytes < 26 * GIB  # 107.8B parameters in bf16 over 8 GPUs
    # 8,192 tokens' widest intermediates and 1,024 rows of 202,048 fp32 logits, whole per rank
    assert p.activation_bytes < 1.25 * GIB
    # vLLM's hybrid pool: the chunked layers' blocks come out of these, sequence by sequence
    assert p.window == WindowBlocks(per_seq=8208 // 16, ratio=3.0)
    kv = p.num_blocks * p.block_size * p.kv_bytes_per_token
    assert p.weight_bytes + p.activation_bytes + kv <= p.usable_bytes
    assert kv > 0.95 * (p.usable_bytes - p.weight_bytes - p.activation_bytes)
    # 1,024 chunks (36 windowed layers against 12 full, 3 pool blocks a block of tokens) would
    # fill the pool: the windows' share is at most all of it
    assert p.window_bytes == pytest.approx(kv)
    # one sequence alone: its chunk's 513 blocks of tokens take 3 x 513 pool blocks
    assert p.seq_tokens() == (p.num_blocks - 3 * 513) * 16
    assert p.num_blocks * p.block_size > 4_000_000
    assert min_gpus(gpu, eng, scout) == 2
    with pytest.raises(ScenarioError, match="needs 2 h200 GPUs"):
        plan(gpu, scout, tp=1, eng=eng, max_tokens=tokens, max_logit_rows=seqs, max_seqs=seqs)


# -- the plan on real presets: directions ------------------------------------------------------
def real_plan(tp: int = 1, utilization: float | None = None, **kw) -> MemoryPlan:
    eng = load_engine("vllm") if utilization is None else engine(utilization, 16)
    return plan(load_gpu("h100_sxm"), load_model("llama-3.1-70b"), tp=tp, eng=eng, **kw)


def test_more_tensor_parallelism_leaves_more_kv_blocks_per_replica():
    blocks = [real_plan(tp).num_blocks for tp in (2, 4, 8)]
    assert blocks == sorted(blocks) and len(set(blocks)) == 3


def test_a_larger_memory_share_leaves_more_kv_blocks():
    assert real_plan(4, 0.8).num_blocks < real_plan(4, 0.9).num_blocks


def test_a_larger_draft_or_token_budget_leaves_fewer_kv_blocks():
    base = real_plan(4, max_tokens=2048, max_logit_rows=256).num_blocks
    assert real_plan(4, max_tokens=8192, max_logit_rows=256).num_blocks < base
    assert real_plan(4, max_tokens=2048, max_logit_rows=256, draft_bytes=2e9).num_blocks < base


# -- not fitting ------------------------------------------------------------------------------
def test_a_model_larger_than_the_gpu_is_refused_with_the_reason():
    with pytest.raises(ScenarioError) as err:
        real_plan(tp=1)  # 70B parameters in bf16 are 141 GB; an H100 has 80
    msg = str(err.value)
    for part in ("llama-3.1-70b", "h100_sxm", "tp=1", "weights", "usable per GPU", "raise tp"):
        assert part in msg, part


def test_a_layer_split_that_does_not_fit_says_over_how_many_gpus():
    with pytest.raises(ScenarioError, match="usable over 2 GPUs"):
        plan(gpu=tiny_gpu(3000), pp=2)  # 3,000 usable bytes for 3,584 bytes of weights


def test_room_for_less_than_one_block_is_not_a_fit():
    # 2,500 usable bytes at tp=2 leave 708 after the 1,792 bytes of weights: room for one
    # 16-token block (512 bytes) but for no 32-token block (1,024 bytes)
    assert plan(gpu=tiny_gpu(5000), tp=2).num_blocks == 1
    with pytest.raises(ScenarioError, match="does not fit on tiny_gpu at tp=2"):
        plan(gpu=tiny_gpu(5000), tp=2, eng=engine(0.5, 32))


# -- the pool -----------------------------------------------------------------------------------
def test_a_new_pool_is_all_free():
    pool = BlockPool(10)
    assert (pool.num_blocks, pool.free, pool.used, pool.peak_used) == (10, 10, 0, 0)


def test_allocate_and_release_move_blocks_between_free_and_used():
    pool = BlockPool(10)
    pool.allocate(7)
    assert (pool.free, pool.used) == (3, 7)
    pool.release(4)
    assert (pool.free, pool.used) == (7, 3)


def test_peak_used_remembers_the_most_blocks_ever_in_use():
    pool = BlockPool(10)
    pool.allocate(6)
    pool.release(5)
    pool.allocate(2)
    assert pool.used == 3 and pool.peak_used == 6


def test_allocating_more_than_is_free_raises_and_changes_nothing():
    pool = BlockPool(4)
    pool.allocate(3)
    with pytest.raises(RuntimeError, match="allocating 2 blocks with 1 free"):
        pool.allocate(2)
    assert (pool.free, pool.peak_used) == (1, 3)


def test_releasing_more_than_was_allocated_raises():
    pool = BlockPool(4)
    pool.allocate(1)
    with pytest.raises(RuntimeError, match="released more blocks than allocated"):
        pool.release(2)


def test_the_whole_pool_can_be_allocated_and_given_back():
    pool = BlockPool(4)
    pool.allocate(4)
    assert pool.free == 0 and pool.used == 4
    pool.release(4)
    assert pool.free == 4 and pool.used == 0 and pool.peak_used == 4


def test_sglang_sizes_a_windowed_pool_beside_the_full_one_for_its_hybrid_swa_models():
    """SGLang gives gpt-oss (and Llama-4) a windowed pool of 0.8 as many tokens as the full
    layers' from one budget (model_runner: full = total / (0.8 x swa layers + full layers)),
    not vLLM's window per running sequence; a windowed model outside its hybrid list caches
    every token in every layer (QA: gpt-oss-120b on one H200 read 1.84M tokens, SGLang's
    formula gives 1.10M)."""
    from simspec.config import Scenario
    from simspec.engine.build import setup_replica

    plan = setup_replica(Scenario(model="gpt-oss-120b", gpu="h200", engine="sglang")).memory
    target = load_model("gpt-oss-120b")
    full, window = plan.kv_bytes_per_token, target.window_kv_bytes_per_token_per_gpu(1, 2)
    free = plan.usable_bytes - plan.weight_bytes - plan.draft_bytes - plan.activation_bytes
    tokens = plan.num_blocks * plan.block_size
    assert tokens == pytest.approx(free / (full + 0.8 * window), rel=1e-3)
    vllm = setup_replica(Scenario(model="gpt-oss-120b", gpu="h200", engine="vllm")).memory
    assert vllm.num_blocks * vllm.block_size > 1.5 * tokens  # a window per sequence only
    engine, demand = load_engine("sglang"), MemoryDemand(0.0, 0.0, 8192, 256, 256, 1)
    hybrid = plan_memory(load_gpu("h200"), engine, target, demand, 1)
    other = target.model_copy(update={"model_type": "gemma3"})
    whole = plan_memory(load_gpu("h200"), engine, other, demand, 1)
    assert whole.num_blocks / hybrid.num_blocks == pytest.approx(
        (full + 0.8 * window) / (full + window), rel=1e-4
    )


def test_vllm_caches_an_mla_model_in_the_block_its_mla_backend_forces():
    """vllm/platforms/cuda.py: FlashMLA forces 64-token blocks on Hopper, CUTLASS MLA 128 on
    Blackwell; a GQA model keeps 16, and SGLang its one-token pages."""
    from simspec import Scenario
    from simspec.engine.build import setup_replica

    def block(model: str, gpu: str, engine: str = "vllm", tp: int = 8) -> int:
        return setup_replica(Scenario(model=model, gpu=gpu, tp=tp, engine=engine)).memory.block_size

    assert block("deepseek-v3", "h200") == 64
    assert block("deepseek-v3", "b200") == 128
    assert block("deepseek-v3", "h200", engine="sglang") == 1
    assert block("deepseek-v3.2", "b200") == 64  # FlashMLASparse, whatever the GPU
    assert block("llama-3.1-8b", "h200", tp=1) == 16


def test_vllm_will_not_start_with_a_context_its_kv_cache_cannot_hold():
    """check_enough_kv_cache_memory: Llama-3.1-70B on two H100s holds ~25k tokens, not its
    131,072-token default context, so vLLM refuses to start; a --max-model-len that fits runs.
    Near the edge (Qwen3-32B on one H100, which GPUStack served at its default) the activation
    estimate decides nothing, and SGLang starts whatever the context."""
    from simspec import Scenario
    from simspec.config import SchedulerConfig
    from simspec.engine.build import setup_replica
    from simspec.errors import InputError

    big = Scenario(model="llama-3.1-70b", gpu="h100_sxm", tp=2, engine="vllm")
    with pytest.raises(InputError, match="give --max-model-len 25") as err:
        setup_replica(big)
    assert err.value.field == "scheduler.max_model_len"
    setup_replica(big.model_copy(update={"scheduler": SchedulerConfig(max_model_len=16384)}))
    # SGLang 0.5.10's derived share of CUDA's total leaves its weights no room on two H100s;
    # at a share that holds them it starts whatever the context
    share = SchedulerConfig(gpu_memory_utilization=0.86)
    setup_replica(big.model_copy(update={"engine": "sglang", "scheduler": share}))
    setup_replica(Scenario(model="qwen3-32b", gpu="h100_sxm", engine="vllm"))


def test_vllm_profiles_one_logit_row_per_request_with_or_without_a_draft():
    """profile_run samples the last token of each dummy request (and its spec-decode dummy
    one draft token each): the activation reserve of a speculative run holds max_num_seqs
    logit rows, as plain decoding's does, not one per verify position (QA)."""
    from simspec import Scenario
    from simspec.config import MethodConfig
    from simspec.engine.build import setup_replica

    plain = setup_replica(Scenario(engine="vllm")).memory
    method = MethodConfig(name="eagle3", k=3, acceptance={"alpha": 0.7})
    spec = setup_replica(Scenario(engine="vllm", method=method)).memory
    assert spec.activation_bytes == plain.activation_bytes


def test_simspec_models_says_when_vllm_would_not_start_at_the_models_context():
    """The layout's facts say what a run would refuse (QA: `models` said Llama-3.1-70B holds
    28k tokens on two H100s, not that vLLM will not start there at its 131k context)."""
    from simspec.catalog.hardware import load_engine, load_gpu
    from simspec.catalog.models import load_model
    from simspec.engine.layout import ParallelLayout
    from simspec.studies.model_facts import layout_facts

    def facts(tp: int, engine: str) -> dict:
        model, gpu = load_model("llama-3.1-70b"), load_gpu("h100_sxm")
        return dict(layout_facts(model, gpu, load_engine(engine), ParallelLayout(tp, 1, 1)))

    assert "give --max-model-len 25" in facts(2, "vllm")["Context"]
    assert "Context" not in facts(4, "vllm") and "Context" not in facts(2, "sglang")


def test_a_closed_loop_reserves_windows_for_its_concurrency_not_max_num_seqs():
    """vLLM allocates a windowed layer's blocks from its one pool as sequences run, none up
    front: a closed loop at 64 holds at most 64 windows, whatever max_num_seqs (QA: gpt-oss-120b
    on an H100 at batch 64 kept 8,594 blocks under vLLM's default 1,024 max_num_seqs and
    17,921 under --max-num-seqs 64, and preempted 809 times). A pool sized once (an engine
    without vLLM V1's hybrid manager) sets aside the windows of the closed loop's sequences."""
    from simspec.config import Scenario, SchedulerConfig, WorkloadConfig
    from simspec.engine.build import setup_replica

    def blocks(concurrency: int, seqs: int | None = None, engine: str = "vllm") -> int:
        sc = Scenario(
            model="gpt-oss-120b",
            gpu="h100_sxm",
            engine=engine,
            workload=WorkloadConfig(concurrency=concurrency),
            scheduler=SchedulerConfig(max_num_seqs=seqs),
        )
        return setup_replica(sc).memory.num_blocks

    # vLLM V1: the pool's blocks are the full layers'; the windows leave it as sequences run
    assert blocks(64) == blocks(1024) == blocks(2048)
    # (--max-num-seqs 64 also shrinks the sampler's profiled rows: a few more blocks)
    assert 1.0 < blocks(64, 64) / blocks(64) < 1.1
    # TensorRT-LLM's pool, sized once: a closed loop's windows only
    assert (
        blocks(64, 64, "trtllm") > blocks(64, None, "trtllm") > 1.5 * blocks(1024, None, "trtllm")
    )


def test_an_open_loop_on_gpt_oss_holds_as_many_sequences_as_a_closed_one():
    """Under vLLM V1 a Poisson run's pool is the closed loop's (QA: an open loop had set aside
    windows for all 1,024 max_num_seqs, halving gpt-oss-120b's pool on an H100, and at 8 req/s
    preempted 428 times with a 55 s mean TTFT)."""
    from simspec.config import LengthSpec, Scenario, WorkloadConfig
    from simspec.engine.build import setup_replica
    from simspec.engine.simulation import simulate

    lengths = dict(prompt=LengthSpec(mean=2000), output=LengthSpec(mean=500), requests=400)
    closed = WorkloadConfig(concurrency=32, turnovers=0, **lengths)
    poisson = WorkloadConfig(arrival="poisson", rate=4.0, **lengths)
    runs = [Scenario(model="gpt-oss-120b", gpu="h100_sxm", workload=w) for w in (closed, poisson)]
    plans = [setup_replica(sc).memory for sc in runs]
    assert plans[0].num_blocks == plans[1].num_blocks and plans[0].window == plans[1].window
    summary = simulate(runs[1]).summary
    assert summary.preemptions == 0 and summary.ttft_ms_mean < 1000


def test_vllm_pads_gpt_oss_mxfp4_experts_to_its_kernels_tiles():
    """Mxfp4MoEMethod.create_weights: Marlin (Ampere) pads a GPU's intermediate slice to 128
    and the hidden size to 256, Triton (Hopper) the slice to 64, FlashInfer (Blackwell) both to
    256 (QA: an A100's 5.1 GiB went uncounted, about half its KV cache)."""
    from simspec.catalog.models import BYTES_PER_PARAM
    from simspec.engine.kv_cache import mxfp4_pad_bytes

    oss = load_model("gpt-oss-120b")
    vllm = load_engine("vllm")
    routed = oss.routed_bytes_per_gpu(1, 1, BYTES_PER_PARAM)

    def pad(gpu: str, tp: int = 1) -> float:
        return mxfp4_pad_bytes(oss, vllm, load_gpu(gpu), tp, 1, BYTES_PER_PARAM)

    assert pad("a100_80gb") == pytest.approx(routed * (2944 * 3072 / 2880**2 - 1))
    assert pad("h100_sxm") == 0.0  # 2,880 is a multiple of 64
    assert pad("h100_sxm", 4) == pytest.approx(
        oss.routed_bytes_per_gpu(4, 1, BYTES_PER_PARAM) * (768 / 720 - 1)
    )
    assert pad("b200") == pytest.approx(routed * (3072 * 3072 / 2880**2 - 1))
    # another engine, or another model, is not padded here
    assert mxfp4_pad_bytes(oss, load_engine("sglang"), load_gpu("a100_80gb"), 1, 1, 1.0) == 0
    llama = load_model("llama-3.1-8b")
    assert mxfp4_pad_bytes(llama, vllm, load_gpu("a100_80gb"), 1, 1, 1.0) == 0


def test_vllm_turns_its_hybrid_pool_off_where_it_does():
    """VllmConfig.__post_init__: chunked local attention (under an EAGLE-style drafter, and by
    default without one since vLLM PR #21761), and a decode instance's --kv-transfer-config
    (until vLLM PR #41847), make every layer cache every token (QA: simspec kept the hybrid
    pool there)."""
    from simspec.catalog.methods import preset_method
    from simspec.config import Scenario, SchedulerConfig
    from simspec.engine.build import setup_replica

    short = SchedulerConfig(max_model_len=32768)

    def memory(**kw):
        return setup_replica(Scenario(scheduler=short, **kw)).memory

    scout = {"model": "llama-4-scout", "gpu": "h200", "tp": 4}
    eagle = preset_method("eagle3", target="llama-4-scout", engine="vllm")
    assert memory(**scout).window is None and memory(**scout).uniform_kv
    assert memory(**scout, method=eagle).window is None
    oss = {"model": "gpt-oss-120b", "gpu": "h100_sxm"}
    one, decode = memory(**oss), memory(**oss, disaggregation_mode="decode")
    assert one.window is not None and decode.window is None
    # 18 full and 18 windowed layers: the uniform pool holds half the tokens
    assert decode.num_blocks == one.num_blocks // 2
    # one request of the context must fit every layer's tokens: vLLM refuses to start
    with pytest.raises(InputError, match="max_model_len") as err:
        setup_replica(
            Scenario(
                model="gpt-oss-120b",
                disaggregation_mode="decode",
                scheduler=SchedulerConfig(gpu_memory_utilization=0.85),
            )
        )
    assert err.value.field == "scheduler.max_model_len"
    # Gated DeltaNet states keep the hybrid pool on a decode instance too
    qnext = memory(model="qwen3-next-80b-a3b", gpu="h200", tp=2, disaggregation_mode="decode")
    assert qnext.window is not None and qnext.window.fixed > 0


def test_vllm_leaves_prefix_caching_off_for_gated_deltanet_models_unless_asked():
    """MambaModelConfig.verify_and_update_config: "Hybrid or mamba-based model detected
    without support for prefix caching: disabling" (QA: cached state pages were reused)."""
    from simspec.config import Scenario, SchedulerConfig
    from simspec.engine.build import setup_replica

    qnext = {"model": "qwen3-next-80b-a3b", "gpu": "h200", "tp": 2}
    assert not setup_replica(Scenario(**qnext)).prefix_caching
    asked = SchedulerConfig(enable_prefix_caching=True)
    assert setup_replica(Scenario(**qnext, scheduler=asked)).prefix_caching
    assert setup_replica(Scenario(model="gpt-oss-20b")).prefix_caching  # attention-only


def test_a_draft_too_large_beside_the_target_is_named_not_a_gpu_count_that_fails():
    """A 70B draft beside an 8B target: the target alone fits one H100, so "it needs 1 GPU"
    (min_gpus counts the target alone) was advice that had just failed (QA)."""
    from simspec.config import AcceptanceConfig, MethodConfig, Scenario
    from simspec.engine.build import setup_replica

    method = MethodConfig(
        name="draft_model", k=3, draft_model="llama-3.1-70b", acceptance=AcceptanceConfig(alpha=0.8)
    )
    for tp in (1, 2):
        with pytest.raises(ScenarioError) as err:
            setup_replica(Scenario(method=method, tp=tp))
        text = str(err.value)
        assert "the draft's weights pass it beside the target's" in text, text
        assert "raise tp, use a smaller draft, or pick a larger GPU" in text
        assert "at the least" not in text


def test_the_printed_breakdown_shows_the_mxfp4_padding_the_memory_plan_counts():
    """QA: gpt-oss-120b at tp 8 and at ep 8 printed one weight breakdown beside KV caches
    0.47 GiB apart: the padding is a part of its own."""
    from simspec.engine.layout import ParallelLayout
    from simspec.studies.model_facts import layout_facts

    oss, gpu, vllm = load_model("gpt-oss-120b"), load_gpu("h100_sxm"), load_engine("vllm")
    at_tp = dict(layout_facts(oss, gpu, vllm, ParallelLayout(8, 1)))["per GPU at tp=8"]
    at_ep = dict(layout_facts(oss, gpu, vllm, ParallelLayout(8, 8)))["per GPU at tp=8, ep=8"]
    assert "MXFP4 tile padding 0.4" in at_tp and "padding" not in at_ep
