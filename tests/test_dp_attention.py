"""Data-parallel attention with expert-parallel MoE (``dp`` attention ranks of tp/dp GPUs): the
field's checks, what each GPU holds (hand-computed from DeepSeek-V3's shapes), and a step's
cost as the busiest rank's attention plus the MoE over every rank's tokens."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from simspec import simulate
from simspec.catalog.hardware import load_alltoall, load_engine, load_gpu, load_profile
from simspec.catalog.models import load_model
from simspec.cli.main import app
from simspec.config import Deployment, Scenario, SchedulerConfig, WorkloadConfig
from simspec.engine.build import pool_running_cap, setup_replica
from simspec.engine.costmodel import BatchShape, RooflineCostModel
from simspec.engine.costmodel.dp_attention import rank_share
from simspec.engine.kv_cache import GIB, MemoryDemand, plan_memory
from simspec.engine.layout import ParallelLayout
from simspec.errors import InputError

runner = CliRunner()


# -- the field ---------------------------------------------------------------------------------
def test_dp_must_divide_tp_and_the_error_names_the_field_and_the_choices():
    assert Deployment(tp=8, dp=8, ep=8).dp == 8
    assert Deployment(tp=8, dp=2).dp == 2
    with pytest.raises(ValidationError, match=r"dp\n.*must divide tp=8.*one of 1, 2, 4, 8"):
        Deployment(tp=8, dp=3)
    with pytest.raises(ValidationError, match="one of 1, 2, 4"):
        Deployment(tp=4, dp=8)


def test_an_engine_without_dp_attention_and_pipeline_stages_are_refused_by_name():
    no_dp = "dp: simspec models no data-parallel attention for engine hf"
    with pytest.raises(InputError, match=no_dp):
        setup_replica(Scenario(model="qwen3-30b-a3b", tp=2, dp=2, engine="hf"))
    # a serving engine's pipeline stages keep pp batches in flight, which is not modelled
    with pytest.raises(InputError, match="pp: engine vllm runs its 2 pipeline stages with 2"):
        setup_replica(Scenario(model="qwen3-30b-a3b", tp=2, dp=2, pp=2))
    with pytest.raises(InputError, match="pp: engine sglang .*engine hf"):
        setup_replica(Scenario(model="llama-3.1-8b", pp=2, engine="sglang"))


@pytest.mark.parametrize("engine", ["sglang", "sglang-v2"])
def test_sglang_refuses_ngram_and_a_draft_model_beside_dp_attention(engine):
    """QA: both ran beside --dp, where SGLang refuses to start ("Currently ngram / standalone
    speculative decoding does not support dp attention."); --methods all leaves them out."""
    from simspec.cli.method_flags import all_methods

    for method in ({"name": "ngram", "k": 3}, {"name": "draft_model", "k": 3}):
        sc = Scenario(model="qwen3-30b-a3b", tp=2, dp=2, ep=2, engine=engine, method=method)
        with pytest.raises(InputError, match=rf"^dp: {method['name']} on engine {engine}: "):
            setup_replica(sc)
    runs, left = all_methods(["qwen3-30b-a3b"], "qwen3-0.6b", engine, dp=2)
    assert "ngram" not in runs and "does not support dp attention" in left["ngram"]
    assert "draft_model" in all_methods(["qwen3-30b-a3b"], "qwen3-0.6b", engine)[0]


def test_the_flags_take_the_engines_spellings_and_refuse_a_bad_dp():
    out = runner.invoke(app, ["models", "deepseek-v3", "--tp", "8", "--dp-size", "3"])
    assert out.exit_code == 2
    assert "dp: must divide tp=8" in out.output
    out = runner.invoke(
        app,
        ["models", "deepseek-v3", "--gpu", "h200", "--engine", "sglang", "--tp", "8"]
        + ["--data-parallel-size", "8", "--ep-size", "8"],
    )
    assert out.exit_code == 0, out.output
    assert "per GPU at tp=8, ep=8, dp=8" in out.output
    assert "each rank caches its own requests" in out.output


# -- memory: DeepSeek-V3 on 8 x H200, TP8 vs DP8 + EP8 (SGLang) ---------------------------------
H, LAYERS, MOE, DENSE, VOCAB = 7168, 61, 58, 3, 129280
# MLA per layer: q_a (h x 1536), q_b (1536 x 128 x 192), kv_a (h x 576), kv_b (512 x 128 x 256),
# o (128 x 128 x h); q_a and kv_a are the down projections every GPU holds whole
ATTENTION = H * 1536 + 1536 * 128 * 192 + H * 576 + 512 * 128 * 256 + 128 * 128 * H
DOWN = H * 1536 + H * 576
EXPERT = 3 * H * 2048  # each routed expert, and the one shared expert
DENSE_MLP = 3 * H * 18432
ROUTER = H * 256
TABLE = VOCAB * H  # the embedding, and the LM head (untied)
FP8, BF16 = 1.0, 2.0


def _expected_weights(dp: int) -> float:
    """Per-GPU weight bytes from the shapes: fp8 linear layers, bf16 routers/embedding/head."""
    tp, attn_tp = 8, 8 // dp
    attention = LAYERS * ((ATTENTION - DOWN) / attn_tp + DOWN) * FP8
    dense = DENSE * DENSE_MLP / tp * FP8  # over all tp GPUs either way (SGLang gathers)
    shared = MOE * EXPERT / (1 if dp > 1 else tp) * FP8  # DeepEP: whole on every GPU
    routers = MOE * ROUTER * BF16
    experts = MOE * 256 * EXPERT / 8 * FP8  # 1/8 of them, whole or sliced
    embedding = TABLE * BF16 / (1 if dp > 1 else tp)  # replicated under DP attention
    head = TABLE * BF16 / tp
    return attention + dense + shared + routers + experts + embedding + head


def test_shapes_behind_the_hand_counts_are_the_models():
    m = load_model("deepseek-v3")
    assert m.attention_params == ATTENTION
    assert m.replicated_attention_params == DOWN
    assert (m.expert_params, m.shared_expert_params, m.dense_mlp_params) == (
        EXPERT,
        EXPERT,
        DENSE_MLP,
    )
    assert (m.moe_layers_in(), m.num_hidden_layers, m.embedding_params) == (MOE, LAYERS, TABLE)


def _plan(dp: int, ep: int):
    gpu, engine, m = load_gpu("h200"), load_engine("sglang"), load_model("deepseek-v3")
    demand = MemoryDemand(0.0, 0.0, 8192, 1, 1024)
    return plan_memory(gpu, engine, m, demand, 8, 1, ep, dp=dp), gpu, engine, m


def test_dp8_ep8_holds_the_attention_whole_and_caches_each_rank_apart():
    tp8, gpu, engine, m = _plan(1, 1)
    dp8, *_ = _plan(8, 8)
    assert tp8.weight_bytes == pytest.approx(_expected_weights(1), rel=1e-12)
    assert dp8.weight_bytes == pytest.approx(_expected_weights(8), rel=1e-12)
    # replicated attention (~10.6 GiB of it) and embedding cost every GPU ~12 GiB more
    assert (dp8.weight_bytes - tp8.weight_bytes) / GIB == pytest.approx(12.1, abs=0.1)
    # MLA's latent: 576 bf16 values per token and layer on every GPU that caches the token
    per_token = LAYERS * 576 * BF16
    assert tp8.kv_bytes_per_token == dp8.kv_bytes_per_token == per_token
    # SGLang's mem_fraction_static holds the weights and the KV pool (activations apart)
    usable = gpu.budget_bytes * engine["gpu_memory_utilization"]
    tp8_free = usable - tp8.weight_bytes
    dp8_free = usable - dp8.weight_bytes
    # TP8: each of the 8 GPUs caches every token; DP8: each rank's GPU only its own
    assert tp8.num_blocks == int(tp8_free // per_token)
    assert dp8.num_blocks == 8 * int(dp8_free // per_token)
    assert dp8.num_blocks / tp8.num_blocks == pytest.approx(5.8, abs=0.1)


def test_without_dp_attention_the_layout_is_the_models_own_count():
    m = load_model("deepseek-v3")
    for tp, ep, style in ((8, 1, "sglang"), (8, 8, "vllm"), (4, 1, "sglang")):
        layout = ParallelLayout(tp, ep, 1, style)
        assert layout.weight_bytes_per_gpu(m) == m.weight_bytes_per_gpu(tp, ep)
    # but SGLang's DeepEP layout holds the shared expert whole (see below)
    assert ParallelLayout(8, 8, 1, "sglang").weight_bytes_per_gpu(m) > m.weight_bytes_per_gpu(8, 8)
    parts = ParallelLayout(8, 8, 1).weight_parts(m)
    assert sum(parts.values()) == pytest.approx(m.weight_bytes_per_gpu(8, 8), rel=1e-12)
    # a hybrid's Gated DeltaNet mixers weigh more than attention layers: counted too
    hybrid = load_model("qwen3-next-80b-a3b")
    parts = ParallelLayout(4, 1, 1).weight_parts(hybrid)
    assert sum(parts.values()) == pytest.approx(hybrid.weight_bytes_per_gpu(4), rel=1e-12)


def test_vllm_keeps_every_non_expert_layer_on_each_rank():
    m = load_model("deepseek-v3")
    parts = ParallelLayout(8, 8, 8, "vllm").weight_parts(m)
    assert parts["dense MLPs"] == DENSE * DENSE_MLP * FP8  # tp/dp = 1: whole
    assert parts["embedding and LM head"] == 2 * TABLE * BF16


# -- the step ----------------------------------------------------------------------------------
def _cost(tp: int, ep: int, dp: int) -> RooflineCostModel:
    engine = load_engine("sglang")
    latency, bandwidth, _ = load_alltoall("h200")
    return RooflineCostModel(
        load_gpu("h200"),
        load_profile("h200"),
        engine,
        tp,
        ep=ep,
        alltoall=(latency, bandwidth),
        dp=dp,
    )


def test_the_busiest_rank_holds_its_even_share():
    b = BatchShape.uniform(10, 4, 10 * 1000.0, 10)
    r = rank_share(b, 8)
    assert (r.num_seqs, r.num_tokens, r.logit_tokens) == (2, 8, 2)
    assert r.sum_kv == pytest.approx(2000.0)
    assert rank_share(b, 1) is b
    assert rank_share(BatchShape.uniform(3, 1, 300.0, 3), 8).num_seqs == 1


def test_a_prefill_chunk_runs_whole_on_its_rank_and_decodes_beside_it_add_to_it():
    # a request lives on one rank: the rank holding a 1000-token chunk runs all of it, and seven
    # decodes spread over the other ranks cannot make that step cheaper (QA: they did)
    chunk = BatchShape.of(np.array([1000]), np.zeros(1), 1)
    mixed = BatchShape.of(np.array([1000] + [1] * 7), np.full(8, 500), 8)
    r = rank_share(mixed, 8)
    assert r.num_seqs == 1 and 990 <= r.num_tokens <= 1000  # within the decodes' share
    m, dp8 = load_model("deepseek-v3"), _cost(8, 8, 8)
    assert dp8.forward(m, mixed).total_s >= 0.99 * dp8.forward(m, chunk).total_s
    two = rank_share(BatchShape.of(np.array([1000, 1000] + [1] * 14), np.zeros(16), 16), 8)
    assert two.num_seqs == 2 and two.num_tokens >= 1000


def test_dp8_at_batch_8_is_attention_at_batch_1_per_rank_plus_ep_moe_over_8_tokens():
    m = load_model("deepseek-v3")
    dp8, tp1 = _cost(8, 8, 8), _cost(1, 1, 1)
    ctx = 2000.0
    one, eight = BatchShape.uniform(1, 1, ctx, 1), BatchShape.uniform(8, 1, 8 * ctx, 8)
    at1, at8 = dp8.forward(m, one), dp8.forward(m, eight)
    # each rank runs one sequence's attention on its own GPU: a single GPU's at batch 1
    assert at8.attention_s == at1.attention_s == tp1.forward(m, one).attention_s
    # every GPU still dispatches and combines its one token; the LM head is SGLang's gathered one
    assert at8.communication_s == at1.communication_s
    # only the routed experts see all 8 tokens (1/8 of the experts and pairs on each GPU)
    routed = MOE * (dp8.routed_experts_time(m, 8) - dp8.routed_experts_time(m, 1))
    assert at8.gemm_s - at1.gemm_s == pytest.approx(routed, rel=1e-12)
    assert at8.elementwise_s == at1.elementwise_s
    assert at8.lm_head_s == at1.lm_head_s


def test_dp_attention_trades_low_batch_latency_for_high_batch_throughput():
    m = load_model("deepseek-v3")
    tp8, dp8 = _cost(8, 1, 1), _cost(8, 8, 8)

    def step(cost, b):
        return cost.forward(m, BatchShape.uniform(b, 1, b * 2000.0, b)).total_s

    assert step(dp8, 1) > step(tp8, 1)  # every GPU reads the whole attention for one token
    assert step(dp8, 256) < step(tp8, 256)  # eight attention kernels side by side


@pytest.mark.parametrize(("engine", "ep"), [("vllm", 8), ("vllm", 1), ("sglang", 1)])
def test_a_verify_costs_no_less_as_idle_ranks_fill_with_real_sequences(engine, ep):
    """Each rank pads to the busiest rank's rows from its own input buffer (earlier tokens of
    its sequences), so the padding routes at the real rows' fresh share: a rank's one sequence
    beside idle ranks reads no more experts than every rank's sequence would (QA: a vLLM DP 8
    EAGLE-3 verify of Qwen3-235B-A22B fell from 26.44 to 25.39 ms from 1 to 8 sequences)."""
    m = load_model("qwen3-235b-a22b")
    cost = Deployment(model=m.id, gpu="h200", engine=engine, tp=8, ep=ep, dp=8)
    rig = setup_replica(Scenario(**cost.model_dump()))
    width, ctx = 4, 1000.0
    steps = [
        rig.cost.forward(m, BatchShape.uniform(b, width, b * ctx, b * width)).total_s
        for b in range(1, 9)
    ]
    # equal at these sizes (each rank one sequence), up to the share's rounding
    assert all(b >= a * (1 - 1e-12) for a, b in zip(steps, steps[1:], strict=False))


# -- the scheduler -----------------------------------------------------------------------------
def test_vllm_limits_are_per_rank_and_sglang_divides_its_own():
    base = {"model": "qwen3-30b-a3b", "tp": 2, "ep": 2}
    vllm = setup_replica(Scenario(**base, dp=2, engine="vllm"))
    sglang = setup_replica(Scenario(**base, dp=2, engine="sglang"))
    for setup, engine, ranks in ((vllm, "vllm", 2), (sglang, "sglang", 1)):
        e = load_engine(engine)
        assert setup.max_tokens == ranks * e["max_num_batched_tokens"]
        assert setup.memory.dp == 2
    assert vllm.max_seqs == 2 * load_engine("vllm")["max_num_seqs"]
    # SGLang's plain decoding: each rank's cap from its own KV pool (resolve_max_num_reqs)
    context = load_model("qwen3-30b-a3b").max_position_embeddings
    assert sglang.max_seqs == pool_running_cap(sglang.memory, context) >= 2 * 2048


def test_sglang_runs_its_running_requests_limit_floored_to_each_rank():
    """SGLang gives each rank max_running_requests // dp and refuses a rank with none (QA:
    12 and 15 over 8 ranks ran 12 and 15)."""
    base = {"model": "deepseek-v3", "gpu": "h200", "tp": 8, "dp": 8, "ep": 8, "engine": "sglang"}
    for asked, runs in ((8, 8), (12, 8), (15, 8), (16, 16)):
        limits = SchedulerConfig(max_num_seqs=asked)
        assert setup_replica(Scenario(**base, scheduler=limits)).max_seqs == runs
    with pytest.raises(InputError, match="leave a rank none") as err:
        setup_replica(Scenario(**base, scheduler=SchedulerConfig(max_num_seqs=4)))
    assert err.value.field == "scheduler.max_num_seqs"


def test_a_request_longer_than_one_ranks_cache_never_runs():
    """A request lives on one DP rank: one longer than a rank's KV cache is unfinishable,
    though the ranks' caches together would hold it (QA: glm-4.5 on SGLang DP8 ran 74 such
    ShareGPT requests)."""
    wl = WorkloadConfig(concurrency=8, requests=256, lengths_from="sharegpt")
    sc = Scenario(model="glm-4.5", gpu="h200", engine="sglang", tp=8, dp=8, ep=8, workload=wl)
    setup = setup_replica(sc)
    per_rank = setup.memory.num_blocks // 8 * setup.memory.block_size
    result = simulate(sc)
    assert result.summary.unfinishable > 0
    done = result.requests[~result.requests["unfinishable"]]
    assert (done["prompt_tokens"] + done["requested_output_tokens"]).max() <= per_rank


def test_a_dp_attention_run_serves_every_request():
    wl = WorkloadConfig(concurrency=4, requests=16, turnovers=0, lengths_from=None)
    sc = Scenario(model="qwen3-30b-a3b", tp=2, dp=2, ep=2, engine="sglang", workload=wl)
    one_rank = simulate(sc.model_copy(update={"dp": 1}))
    two = simulate(sc)
    assert two.summary.unfinishable == 0 and two.summary.throughput_tok_s > 0
    # GQA splits its KV heads over TP: a rank of one GPU caches twice the bytes per token, so
    # (unlike MLA's latent) DP attention holds no more tokens, and here fewer (more weights)
    assert two.summary.kv_blocks_total < one_rank.summary.kv_blocks_total


@pytest.mark.parametrize("engine", ["hf", "gpt-fast"])
def test_expert_parallelism_on_an_engine_without_it_is_refused_naming_ep(engine):
    """Hugging Face and gpt-fast place no whole experts per GPU (QA: --ep 8 ran, priced with
    all-to-all, or changed nothing)."""
    sc = Scenario(model="qwen3-30b-a3b", gpu="h100_sxm", tp=8, ep=8, engine=engine)
    with pytest.raises(InputError, match="has no expert parallelism") as err:
        setup_replica(sc)
    assert err.value.field == "ep"


def test_a_ranks_share_of_a_decode_batch_stays_a_decode_batch():
    """QA: at dp 8, a rank's 7 of 51 decodes summed q^2 to 7.000000000000001, so attention
    took the prefill kernel's latency and the step fell from 51 to 52 sequences."""
    from simspec.engine.build import build_cost_model
    from simspec.engine.costmodel.shapes import one_token_each

    for b in range(9, 1025):
        share = rank_share(BatchShape.uniform(b, 1, b * 2048, b), 8)
        assert one_token_each(share.sum_q_sq, share.num_tokens), b
    sc = Scenario(model="deepseek-v3", gpu="h200", tp=8, ep=8, dp=8, engine="vllm")
    cost = build_cost_model(sc)
    target = load_model("deepseek-v3")
    times = [
        cost.forward(target, BatchShape.uniform(b, 1, b * 2048, b)).total_s for b in (50, 51, 52)
    ]
    assert times == sorted(times)


def test_sglang_admits_under_dp_attention_with_its_conservativeness_scaled_by_03():
    """ServerArgs._handle_data_parallelism scales schedule_conservativeness by 0.3 under DP
    attention: the reserve ratio starts at 0.21, not 0.7 (QA)."""
    plain = setup_replica(Scenario(model="qwen3-30b-a3b", tp=2, engine="sglang"))
    dp = setup_replica(Scenario(model="qwen3-30b-a3b", tp=2, dp=2, engine="sglang"))
    assert plain.decode_reserve is not None and dp.decode_reserve is not None
    assert plain.decode_reserve[0] == pytest.approx(0.7)
    assert dp.decode_reserve[0] == pytest.approx(0.21)
    assert dp.decode_reserve[1] == pytest.approx(0.21 * 0.14)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_an_eagle_head_caches_each_ranks_requests_over_its_tp_over_dp_gpus(engine):
    """Like the target (and MTP), an EAGLE head's KV under DP attention is split over tp/dp
    GPUs, not tp: at tp 2, dp 2 each GPU holds its rank's head KV whole (QA: it was halved)."""
    from simspec.config import MethodConfig

    method = MethodConfig(name="eagle3", k=3, acceptance={"alpha": 0.7})
    per_gpu = {
        kw: setup_replica(
            Scenario(model="qwen3-30b-a3b", engine=engine, method=method, tp=kw[0], dp=kw[1])
        ).speculator.extra_kv_bytes_per_token()
        for kw in [(1, 1), (2, 1), (2, 2)]
    }
    assert per_gpu[(2, 2)] == per_gpu[(1, 1)] == 2 * per_gpu[(2, 1)]


def test_a_draft_model_caches_each_ranks_requests_over_its_tp_over_dp_gpus():
    """The same for a separate draft model (QA: its KV per GPU was divided by dp too)."""
    from simspec.config import MethodConfig

    draft = MethodConfig(
        name="draft_model", draft_model="qwen3-0.6b", k=3, acceptance={"alpha": 0.7}
    )

    def kv(tp: int, dp: int) -> float:
        sc = Scenario(model="qwen3-30b-a3b", engine="vllm", method=draft, tp=tp, dp=dp)
        return setup_replica(sc).speculator.extra_kv_bytes_per_token()

    assert kv(2, 2) == kv(1, 1) == 2 * kv(2, 1)


@pytest.mark.parametrize("name", ["draft_model", "eagle3"])
def test_a_vllm_dp_rank_holds_its_drafts_weights_over_its_own_gpus(name):
    """vLLM's DP ranks are engines of their own, each drafting at the rank's tp: a draft's
    weights per GPU at tp 2, dp 2 are the whole draft, as at tp 1 (QA: split over all tp they
    read half, and at dp 8 an eighth, so the KV pool was 32 % too large). SGLang's gathered
    layout slices them over all tp GPUs, as its dense layers."""
    from simspec.config import MethodConfig

    extra = {"draft_model": "qwen3-0.6b"} if name == "draft_model" else {}
    method = MethodConfig(name=name, k=3, acceptance={"alpha": 0.7}, **extra)

    def weights(engine: str, tp: int, dp: int) -> float:
        sc = Scenario(model="qwen3-30b-a3b", engine=engine, method=method, tp=tp, dp=dp)
        return setup_replica(sc).speculator.extra_weight_bytes()

    assert weights("vllm", 2, 2) == weights("vllm", 1, 1) == 2 * weights("vllm", 2, 1)
    if name == "eagle3":  # SGLang's draft model needs its own KV outside the static share
        assert weights("sglang", 2, 2) == weights("sglang", 2, 1) == weights("sglang", 1, 1) / 2


def test_a_gpu_without_transfer_timings_moves_tokens_at_its_own_link_and_says_so():
    """QA: an L40S (PCIe, 32 GB/s) exchanged expert tokens at the H100's NVLink speed."""
    from simspec.catalog.hardware import alltoall_note

    h100 = load_alltoall("h100_sxm")
    assert h100[2] == "measured" and alltoall_note("h100_sxm") == ""
    pcie, nvl5 = load_alltoall("l40s"), load_alltoall("b200")
    share = h100[1] / load_gpu("h100_sxm").interconnect_bandwidth_bytes_s
    assert pcie[1] == pytest.approx(share * load_gpu("l40s").interconnect_bandwidth_bytes_s)
    assert nvl5[1] > h100[1] > 10 * pcie[1] and pcie[2] == "transferred"
    assert "l40s's own link, 25 of its 32 GB/s" in alltoall_note("l40s")


# -- SGLang's gather, chunk caps and dense models (QA, stop 57) ------------------------------
def test_sglang_gathers_the_summed_tokens_of_a_step_with_a_prompt_chunk():
    """DpPaddingMode.get_dp_padding_mode: a step with a prompt chunk on any rank gathers the
    real tokens (SUM_LEN), not every rank padded to the busiest (QA: one 4,096-token chunk
    among 63 decodes at dp 8 was priced as 32,384 gathered rows, a 975 ms step)."""
    from simspec.engine.costmodel.dp_attention import dp_token_terms

    cost, m = _cost(8, 1, 8), load_model("deepseek-v3")
    n = m.num_hidden_layers

    def terms(t, total, graphed, extend):
        return dp_token_terms(cost, m, t, total, 8, n, graphed, None, extend)

    # balanced ranks (sum x 2 > max x dp): an eager decode pads (MAX_LEN); a prompt chunk
    # anywhere makes it SUM_LEN, fewer gathered rows
    assert terms(600, 4000, False, True)[0] < terms(600, 4000, False, False)[0]
    # one busy rank (sum x 2 <= max x dp): SUM_LEN with or without a prompt chunk, far below
    # the padded gather a CUDA graph would run
    assert terms(4048, 4159, False, True) == terms(4048, 4159, False, False)
    assert sum(terms(4048, 4159, False, True)) < 0.4 * sum(terms(4048, 4159, True, True))


def test_a_prompt_chunk_stays_within_one_ranks_budget():
    """A request lives on one rank: its chunk is at most that rank's budget (vLLM: each
    engine core's max_num_batched_tokens; SGLang: chunked_prefill_size // dp), not the
    replica's (QA: vLLM at dp 8 ran 32,782 prompt tokens of two requests in one step)."""
    from simspec.config import LengthSpec

    wl = WorkloadConfig(
        concurrency=4, requests=8, turnovers=0, lengths_from=None,
        prompt=LengthSpec(dist="fixed", mean=16384), output=LengthSpec(dist="fixed", mean=8),
    )  # fmt: skip
    for engine in ("vllm", "sglang"):
        sc = Scenario(
            model="qwen3-30b-a3b", gpu="h200", tp=4, dp=4, ep=4, engine=engine, workload=wl
        )
        setup = setup_replica(sc)
        per_rank = setup.max_tokens // 4
        its = simulate(sc).iterations
        prompt_steps = its[its.prefill_seqs > 0]
        assert len(prompt_steps)
        # every chunk at most a rank's budget: a step's prompt tokens within its chunks' count
        chunk_tokens = prompt_steps.query_tokens - prompt_steps.decode_tokens
        assert (chunk_tokens <= prompt_steps.prefill_seqs * per_rank).all(), engine
        alone = prompt_steps.prefill_seqs == 1
        assert alone.any() and (chunk_tokens[alone] <= per_rank).all(), engine


def test_dp_on_a_dense_model_is_refused_naming_dp():
    """vLLM runs a dense model's DP ranks as independent replicas (EngineCoreProc
    .run_engine_core: "Non-MoE DP ranks are completely independent, so treat like DP=1");
    SGLang's DP attention serves MoE models: a lockstep layout priced for a dense model was a
    number no engine produces (QA)."""
    with pytest.raises(InputError, match="no experts .*use dp 1.*fleet") as err:
        setup_replica(Scenario(model="llama-3.1-70b", tp=8, dp=2, engine="sglang"))
    assert err.value.field == "dp"
    out = runner.invoke(app, ["models", "llama-3.1-70b", "--tp", "8", "--dp", "2"])
    assert out.exit_code == 2 and "dp: llama-3.1-70b has no experts" in out.output


def test_sglang_under_deepep_holds_the_shared_expert_whole_with_or_without_dp():
    """SGLang's sparse layers run SCATTERED under an all-to-all backend whatever the dp, the
    shared expert whole (QA: tp 8 ep 8 sliced it, 2 GiB less than at dp 2)."""
    assert ParallelLayout(8, 8, 1, "sglang").shared_tp == 1
    assert ParallelLayout(8, 8, 2, "sglang").shared_tp == 1
    assert ParallelLayout(8, 1, 1, "sglang").shared_tp == 8
    assert ParallelLayout(8, 8, 1, "vllm").shared_tp == 8
    m = load_model("deepseek-v3")
    whole = ParallelLayout(8, 8, 1, "sglang").weight_parts(m)["shared experts and routers"]
    at_dp2 = ParallelLayout(8, 8, 2, "sglang").weight_parts(m)["shared experts and routers"]
    sliced = ParallelLayout(8, 8, 1, "vllm").weight_parts(m)["shared experts and routers"]
    assert whole == at_dp2 > 4 * sliced
    lay = ParallelLayout(8, 8, 1, "sglang")
    assert lay.weight_bytes_per_gpu(m) == pytest.approx(sum(lay.weight_parts(m).values()))
    assert lay.weight_bytes_per_gpu(m) - ParallelLayout(8, 8, 1, "vllm").weight_bytes_per_gpu(
        m
    ) == pytest.approx(whole - sliced)


def test_vllm_sums_a_ranks_moe_slices_by_an_all_reduce_of_its_own():
    """deepseek_v2.py DeepseekV2MoE.forward all-reduces the experts' output over the rank's
    tp GPUs (QA: never charged): every layer of a vLLM rank of several GPUs pays two
    all-reduces, attention's and the MLP's, as at dp 1."""
    from simspec.engine.costmodel.dp_attention import dp_token_terms

    engine = load_engine("vllm")
    latency, bandwidth, _ = load_alltoall("h200")
    cost = RooflineCostModel(
        load_gpu("h200"), load_profile("h200"), engine, 8, ep=8, alltoall=(latency, bandwidth), dp=2
    )
    m = load_model("deepseek-v3")
    n, t = m.num_hidden_layers, 64
    reduce = cost.attn_ops.allreduce_time(2 * m.hidden_size * t, True)
    assert reduce > 0
    comm = dp_token_terms(cost, m, t, 2 * t, t, n)[2]
    cost.attn_ops.allreduce_time = lambda nbytes, graphed=True: 0.0  # type: ignore[method-assign]
    assert comm - dp_token_terms(cost, m, t, 2 * t, t, n)[2] == pytest.approx(2 * n * reduce)


def test_vllm_v0_runs_no_data_parallel_attention():
    """vLLM's --data-parallel-size runs on the V1 engine only (vLLM issue #18702; QA: --dp 8
    ran on the vllm-v0 profile)."""
    with pytest.raises(InputError, match="dp: simspec models no data-parallel attention for "
                       "engine vllm-v0"):  # fmt: skip
        setup_replica(Scenario(model="qwen3-30b-a3b", tp=2, dp=2, ep=2, engine="vllm-v0"))


def test_weights_that_dp_attention_copies_past_the_gpu_are_named_not_the_activations():
    """Kimi-K2 at tp=8, ep=8 fits an H200; with dp=8 each GPU also holds a whole rank's
    attention, embeddings and LM head, and the weights alone pass the usable memory. The
    refusal says so and asks for a lower dp, not a lower token budget (QA: it blamed the
    activations, and --max-num-batched-tokens 256 changed nothing)."""
    from simspec.errors import ScenarioError

    sc = Scenario(model="kimi-k2", gpu="h200", engine="vllm", tp=8, ep=8, dp=8)
    sc = sc.model_copy(update={"scheduler": SchedulerConfig(max_model_len=16000)})
    with pytest.raises(ScenarioError) as err:
        setup_replica(sc)
    text = str(err.value)
    assert "data-parallel attention holds a tp=1 group's attention" in text
    assert "lower dp (--dp), raise tp, or pick a larger GPU" in text
    assert "token budget" not in text and "tip it over" not in text
    setup_replica(sc.model_copy(update={"dp": 1}))  # fits without the copies


def test_dp_attention_past_the_gpu_where_no_tp_holds_it_still_asks_for_a_lower_dp():
    """DeepSeek-V3 on 16 H100s under SGLang at dp=16: no tp holds it at that share, and
    tp=32 is refused; dp=4 fits. The refusal asks for a lower dp (QA: "it does not fit on 64
    GPUs: raise tp"), and names no draft that does not run."""
    from simspec.errors import ScenarioError

    sc = Scenario(model="deepseek-v3", engine="sglang", tp=16, dp=16, ep=16)
    with pytest.raises(ScenarioError) as err:
        setup_replica(sc)
    text = str(err.value)
    assert "lower dp (--dp)" in text and "draft" not in text
    setup_replica(sc.model_copy(update={"dp": 4}))


@pytest.mark.parametrize(
    ("engine", "flag", "runs", "over", "how"),
    [
        ("vllm", "--max-num-seqs", 6, "at batch size 7 ", "each of 2 DP ranks' own"),
        ("sglang", "--max-running-requests", 2, "at batch size 3, 7 ", "divided over 2"),
    ],
)
def test_the_running_limit_note_counts_the_replicas_ranks(engine, flag, runs, over, how):
    """QA: vLLM DP 8 with --max-num-seqs 4 ran 32 at once and the note said 4; SGLang's 12
    over 8 ranks ran 8 and the note said 12."""
    from simspec.engine.build import replica_running_limit

    assert replica_running_limit(load_engine(engine), 3, 2) == runs
    args = ["sweep", "--model", "qwen3-30b-a3b", "--tp", "2", "--ep", "2", "--dp", "2"]
    args += ["--engine", engine, flag, "3", "--methods", "autoregressive"]
    result = runner.invoke(app, [*args, "--batch-sizes", "2,3,7", "--turnovers", "1"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"note: {over}the requests beyond --max-num-seqs 3 ({how}" in text
    assert f"the engine runs at most {runs} at once" in text


def test_vllm_runs_no_dynamic_sd_table_under_data_parallelism():
    """vLLM turns num_speculative_tokens_per_batch_size off at dp > 1 (each rank would pick
    its own K; VllmConfig._maybe_disable_dynamic_sd_for_data_parallel). QA: simspec ran the
    table at dp=2, and recommend printed one for it."""
    spec = (
        '{"method":"eagle3","model":"x","num_speculative_tokens":3,'
        '"num_speculative_tokens_per_batch_size":[[1,8,3],[9,1024,0]]}'
    )
    args = ["--model", "qwen3-30b-a3b", "--tp", "2", "--dp", "2"]
    swept = runner.invoke(
        app,
        ["sweep", *args, "--concurrencies", "1", "--turnovers", "1", "--speculative-config", spec],
    )
    assert swept.exit_code == 2 and "turns num_speculative_tokens_per_batch_size off at dp=2" in (
        " ".join(swept.output.split())
    )
    rec = runner.invoke(app, ["recommend", *args])
    assert rec.exit_code == 2 and "error: --dp: vLLM turns" in " ".join(rec.output.split())


def test_sglang_refuses_an_ep_that_does_not_divide_the_experts_and_vllm_runs_it(tmp_path):
    """SGLang's FusedMoE asserts (num_experts - fused shared) % ep_size == 0 (QA: a 60-expert
    config ran at ep 8 on sglang); vLLM's determine_expert_map spreads the rest."""
    import json

    cfg = {
        "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
        "hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 32,
        "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
        "moe_intermediate_size": 768, "num_experts": 60, "num_experts_per_tok": 4,
        "vocab_size": 151936, "max_position_embeddings": 32768, "torch_dtype": "bfloat16",
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    sc = Scenario(model=str(path), tp=8, ep=8, engine="sglang")
    with pytest.raises(InputError, match="ep: engine sglang .*60 experts"):
        setup_replica(sc)
    setup_replica(sc.model_copy(update={"engine": "vllm"}))


def test_a_prompt_chunk_among_decodes_costs_its_whole_context_on_its_rank():
    """The chunk's rank runs the chunk over its own context (review: the chunks' sums scaled by
    the rank's share of sequences priced a 1,024-token chunk at 16k context among 56 decodes
    at 256 ms, the chunk alone at 333 ms), and chunks on several ranks cost about one."""
    m, dp8 = load_model("deepseek-v3"), _cost(8, 8, 8)

    def chunks(n: int) -> BatchShape:
        return BatchShape.of(np.full(n, 1024), np.full(n, 16384), n, prefill=True)

    def decodes(n: int) -> BatchShape:
        return BatchShape.uniform(n, 1, float(n * 20000), n)

    alone = dp8.forward(m, chunks(1)).total_s
    assert dp8.forward(m, chunks(1) + decodes(56)).total_s >= alone
    share = rank_share(chunks(1) + decodes(56), 8)
    assert share.pre_seqs == 1 and share.pre_kv == pytest.approx(16384)
    four = dp8.forward(m, chunks(4) + decodes(32)).total_s
    assert alone <= four <= 1.15 * dp8.forward(m, chunks(4)).total_s
    assert rank_share(chunks(4), 8).num_tokens == 1024  # one chunk a rank
