"""Mixture-of-experts, MLA, sliding-window and MTP models: shapes read from each architecture's
own config keys, the published parameter counts, the cost of touching more experts, and the
front ends that show and refuse them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from simspec import Scenario, simulate
from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.hf_config import read_config
from simspec.catalog.models import load_model
from simspec.catalog.tables import packaged_table
from simspec.cli.main import app
from simspec.engine.costmodel import BatchShape, RooflineCostModel, distinct_experts
from simspec.engine.kv_cache import min_gpus
from simspec.errors import InputError, ScenarioError

runner = CliRunner()


# -- published sizes ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "total", "active", "tolerance"),
    [
        # DeepSeek-V3 README_WEIGHTS.md: 671B, 36.7B activated (embedding and head included);
        # the report's abstract rounds to 37B
        ("deepseek-v3", 671e9, 36.7e9, 0.03),
        ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02),  # Qwen3 model card
        ("mixtral-8x7b", 46.7e9, 12.9e9, 0.01),  # Mistral's Mixtral announcement
        ("kimi-k2", 1.0e12, 32e9, 0.03),  # Moonshot: 1T total, 32B activated
    ],
)
def test_totals_and_active_parameters_match_the_model_cards(name, total, active, tolerance):
    m = load_model(name)
    assert m.num_params == pytest.approx(total, rel=tolerance)
    assert m.active_params == pytest.approx(active, rel=tolerance)


def test_gpt_oss_counts_as_openai_does_without_the_embedding():
    # gpt-oss model card Table 1: 116.83B total, 5.13B active; 20.91B / 3.61B
    big, small = load_model("gpt-oss-120b"), load_model("gpt-oss-20b")
    assert big.num_params == pytest.approx(116.83e9, rel=0.001)
    assert big.active_params - big.embedding_params == pytest.approx(5.13e9, rel=0.01)
    assert small.num_params == pytest.approx(20.91e9, rel=0.001)
    assert small.active_params - small.embedding_params == pytest.approx(3.61e9, rel=0.01)


def test_glm_4_6_counts_as_z_ai_does_without_embedding_and_head():
    # Z.ai (GLM-4.5 / 4.6 model cards): 355B total, 32B activated; the 32B leaves out the
    # untied embedding and LM head (0.78B each), which simspec's active count includes
    m = load_model("glm-4.6")
    assert m.num_params == pytest.approx(355e9, rel=0.01)
    assert m.active_params - 2 * m.embedding_params == pytest.approx(32e9, rel=0.01)


def test_glm_4_moe_reads_dense_leading_layers_shared_expert_and_qk_norm():
    m = load_model("glm-4.6")
    assert m.moe_layers == tuple(range(3, 92)) and m.num_nextn_predict_layers == 1
    assert m.shared_expert_intermediate_size == 1536 and m.head_dim == 128
    assert m.qk_norm and not m.is_mla
    keys = {"model_type": "glm4_moe", "n_routed_experts": 8, "num_experts_per_tok": 2}
    keys |= {"moe_intermediate_size": 32, "first_k_dense_replace": 1, "n_shared_experts": 1}
    assert read_config(_config(**keys))["qk_norm"] is False  # use_qk_norm defaults off
    assert read_config(_config(**keys, use_qk_norm=True))["qk_norm"] is True
    with pytest.raises(InputError) as err:
        read_config(_config(**keys, use_qk_norm="yes"))
    assert err.value.field == "model.use_qk_norm"


def test_llama_4_interleaves_moe_and_chunked_layers():
    scout, maverick = load_model("llama-4-scout"), load_model("llama-4-maverick")
    assert scout.moe_layers == tuple(range(48))
    assert maverick.moe_layers == tuple(range(1, 48, 2))  # interleave_moe_layer_step 2
    assert maverick.intermediate_size == 16384  # dense layers: intermediate_size_mlp
    assert len(scout.sliding_layers) == 36 and 3 not in scout.sliding_layers  # NoPE: full
    assert scout.active_params == pytest.approx(17e9, rel=0.02)  # "17B active"
    assert maverick.num_params == pytest.approx(400e9, rel=0.01)  # "~400B" (text model)


def test_deepseek_layout_precision_and_mla_cache():
    m = load_model("deepseek-v3")
    assert m.moe_layers == tuple(range(3, 61)) and m.num_nextn_predict_layers == 1
    assert m.weight_dtype == "fp8" and m.is_mla
    # one latent of kv_lora_rank + qk_rope_head_dim per token and layer, whole on every GPU
    assert m.kv_bytes_per_token_per_gpu(1) == m.kv_bytes_per_token_per_gpu(8) == 61 * 576 * 2


def test_dense_presets_read_as_before():
    m = load_model("llama-3.1-70b")
    assert m.is_plain and m.num_params == load_model("llama-3.3-70b").num_params
    assert m.weight_bytes_per_gpu(4) == m.num_params * 2 / 4


# -- reading config.json -----------------------------------------------------------------------
def _config(**keys) -> dict:
    base = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,  # every saved config has it (only LLaMA-1's predate it)
        "vocab_size": 100,
        "max_position_embeddings": 4096,
    }
    return {**base, **keys}


@pytest.mark.parametrize(
    ("keys", "field"),
    [
        ({"model_type": "falcon_h1"}, "model.model_type"),
        ({"n_routed_experts": 8}, "model.n_routed_experts"),  # MoE keys on a dense reader
        ({"model_type": "qwen3_next"}, "model.linear_num_key_heads"),  # Gated DeltaNet dims
        ({"layer_types": ["linear_attention", "full_attention"] * 2}, "model.layer_types"),
        (
            {"model_type": "llama", "quantization_config": {"quant_method": "bitsandbytes"}},
            "model.quantization_config.quant_method",
        ),
        (
            {"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 9},
            "model.num_experts_per_tok",
        ),
    ],
)
def test_what_simspec_cannot_express_names_the_config_key(keys, field):
    with pytest.raises(InputError) as err:
        read_config(_config(**keys))
    assert err.value.field == field


def test_gpt_oss_mxfp4_experts_are_weight_only_int4():
    gpt_oss = _config(model_type="gpt_oss", num_local_experts=8, num_experts_per_tok=2)
    fields = read_config({**gpt_oss, "quantization_config": {"quant_method": "mxfp4"}})
    assert (fields["weight_dtype"], fields["expert_weight_dtype"]) == ("bf16", "int4-w")


def test_a_deepseek_config_json_reads_as_the_preset(tmp_path):
    entry = {k: v for k, v in packaged_table("models.yaml")["deepseek-v3"].items()}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({k: v for k, v in entry.items() if k not in ("source", "hf_ids")}))
    read, preset = load_model(str(path)), load_model("deepseek-v3")
    assert read.model_dump(exclude={"id", "source", "hf_ids"}) == preset.model_dump(
        exclude={"id", "source", "hf_ids"}
    )


# -- cost ----------------------------------------------------------------------------------
def test_distinct_experts_grow_from_top_k_to_all():
    assert distinct_experts(128, 8, 1) == pytest.approx(8)
    assert distinct_experts(128, 8, 4) == pytest.approx(128 * (1 - (1 - 8 / 128) ** 4))
    assert distinct_experts(128, 8, 10_000) == pytest.approx(128)
    # a skewed router touches fewer experts than a uniform one for the same tokens
    skew = [0.5 / 8] * 8 + [0.5 / 120] * 120
    assert distinct_experts(128, 8, 16, skew) < distinct_experts(128, 8, 16)


def _dense_twin(tmp_path) -> str:
    """Qwen3-30B-A3B's attention with one dense MLP of 6144 = 8 routed experts x 768: a dense
    model with the same active parameters (3.3B)."""
    entry = packaged_table("models.yaml")["qwen3-30b-a3b"]
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")
    config = {k: entry[k] for k in (*keys, "head_dim", "vocab_size", "max_position_embeddings")}
    config.update(model_type="qwen3", intermediate_size=6144, _name_or_path="dense-a3b")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def _router_twin(tmp_path) -> str:
    """Qwen3-30B-A3B's shapes from a user's config.json: the same model to the cost model but
    for its router's measured expert locality, which a config does not carry (its tokens
    route independently)."""
    entry = packaged_table("models.yaml")["qwen3-30b-a3b"]
    config = {k: v for k, v in entry.items() if k not in ("hf_ids", "source")}
    config["_name_or_path"] = "moe-a3b-twin"
    path = tmp_path / "moe.json"
    path.write_text(json.dumps(config))
    return str(path)


@pytest.mark.slow
def test_moe_verify_cost_grows_faster_with_k_and_speedup_rises_with_batch(tmp_path):
    """Verifying K+1 tokens per sequence routes them to more distinct experts, so on an MoE
    model the verify step's cost grows with K far faster than on a dense model of the same
    active size (Cascade arXiv 2506.20675; MoESD arXiv 2505.19645). As the batch grows the
    experts are touched anyway, so the MoE's speedup rises with batch while the dense one's
    falls."""
    moe, dense = load_model("qwen3-30b-a3b"), load_model(_dense_twin(tmp_path))
    assert dense.num_params == pytest.approx(moe.active_params, rel=0.01)
    cost = RooflineCostModel(load_gpu("h100_sxm"), load_profile("h100_sxm"), load_engine("vllm"))

    def growth(model, k: int) -> float:  # verify of k+1 tokens over decode of 1, batch 1
        one = cost.forward(model, BatchShape.uniform(1, 1, 1000.0, 1)).total_s
        return cost.forward(model, BatchShape.uniform(1, k + 1, 1000.0, k + 1)).total_s / one

    independent = load_model(_router_twin(tmp_path))
    for k in (1, 3, 5):
        assert growth(independent, k) - 1 > 3 * (growth(dense, k) - 1)
        # Qwen3-30B-A3B's router reuses 45 % of the previous token's experts
        # (expert_locality.yaml): its verify grows slower than independent routing's, still
        # faster than the dense twin's
        assert growth(dense, k) < growth(moe, k) < growth(independent, k)

    def speedup(model: str, batch: int) -> float:
        workload = {
            "arrival": "closed",
            "concurrency": batch,
            "requests": 2 * batch,
            "lengths_from": None,
            "prompt": {"mean": 256},
            "output": {"mean": 48},
        }
        runs = [
            Scenario.model_validate({"model": model, "workload": workload, "method": method})
            for method in (
                {"name": "autoregressive", "k": 0},
                {"name": "eagle3", "k": 3, "acceptance": {"alpha": 0.7}},
            )
        ]
        base, spec = (simulate(sc).summary.throughput_tok_s for sc in runs)
        return spec / base

    assert speedup("qwen3-30b-a3b", 16) > speedup("qwen3-30b-a3b", 1)
    assert speedup(_dense_twin(tmp_path), 16) < speedup(_dense_twin(tmp_path), 1)


def test_expert_parallelism_adds_all_to_all_where_the_engine_runs_it_and_keeps_the_weights():
    """SGLang's DeepEP backend dispatches all-to-all at --tp N --ep N; vLLM does so only
    across DP ranks (use_all2all_kernels: dp_size > 1 and use_ep) and otherwise sums the
    experts' outputs by the TP all-reduce (QA: vLLM TP8+EP8 had been charged DeepEP)."""
    m = load_model("mixtral-8x7b")
    gpu, profile = load_gpu("h100_sxm"), load_profile("h100_sxm")
    batch = BatchShape.uniform(8, 1, 8000.0, 8)
    for name, dispatched in (("sglang", True), ("vllm", False), ("trtllm", False)):
        engine = load_engine(name)
        sliced = RooflineCostModel(gpu, profile, engine, tp=4).forward(m, batch)
        whole = RooflineCostModel(gpu, profile, engine, tp=4, ep=4, alltoall=(7.6e-6, 3.6e11))
        moved = whole.forward(m, batch).communication_s != sliced.communication_s
        assert moved == dispatched, name
    assert m.weight_bytes_per_gpu(4, ep=4) == pytest.approx(m.weight_bytes_per_gpu(4))
    with pytest.raises(InputError, match="ep"):
        simulate(Scenario(model="llama-3.1-8b", tp=2, ep=2))


def test_mtp_drafts_with_the_models_own_moe_layer():
    sc = Scenario.model_validate(
        {
            "model": "deepseek-v3",
            "gpu": "h200",
            "tp": 8,
            "workload": {
                "arrival": "closed",
                "concurrency": 2,
                "requests": 2,
                "lengths_from": None,
                "prompt": {"mean": 64},
                "output": {"mean": 16},
            },
            "method": {"name": "mtp", "k": 2, "acceptance": {"alpha": 0.85}},
        }
    )
    res = simulate(sc)
    assert res.summary.mean_accept_len > 1 and res.memory.draft_bytes > 1e9  # an MoE layer


# -- memory and front ends ---------------------------------------------------------------------
def test_a_model_that_does_not_fit_says_how_many_gpus_it_needs():
    with pytest.raises(ScenarioError) as err:
        simulate(Scenario(model="deepseek-v3", gpu="h100_sxm"))
    assert "does not fit" in str(err.value) and "16 h100_sxm GPUs" in str(err.value)
    assert min_gpus(load_gpu("h200"), load_engine("vllm"), load_model("deepseek-v3")) == 8


def test_simspec_models_shows_sizes_precision_kv_and_gpus():
    res = runner.invoke(app, ["models", "deepseek-v3", "--gpu", "h200"], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    for part in ("671.0B total", "37.6B", "fp8", "KV cache per token: 68.6 KiB", "8 x h200"):
        assert part in res.output, part
    listing = runner.invoke(app, ["models"], env={"COLUMNS": "300"})
    assert listing.exit_code == 0 and "gpt-oss-120b" in listing.output


def test_expert_weight_streaming_matches_vllms_fused_moe_on_h100(shared):
    """Held-out check of the grouped-expert roofline (calibration/compare_moe.py): vLLM 0.19's
    fused MoE of Qwen3.6-35B-A3B on H100 (LLMServingSim PR #34 moe.csv, eager, one iteration)
    when the step touches 64 to 256 experts with at most 64 tokens, where streaming the
    experts' weights dominates, is predicted within 25% by the h100_sxm profile's dense GEMM
    constants (measured: 1.9-2.1 us per 6.3 MB expert; the model says ~1.9). Fewer experts are
    dominated by eager kernel launches (62 us for 8 experts at 1 token), which simspec does not
    claim to predict."""
    import csv

    from simspec.catalog.models import ModelShape
    from simspec.engine.costmodel import MOE_KERNELS_PER_LAYER

    layer = ModelShape(
        id="qwen3.6-moe-layer",
        model_type="qwen3_moe",
        hidden_size=2048,
        intermediate_size=512,
        num_hidden_layers=1,
        num_attention_heads=16,
        vocab_size=1000,
        num_experts=256,
        num_experts_per_tok=8,
        moe_intermediate_size=512,
        moe_layers=(0,),
    )
    cost = RooflineCostModel(load_gpu("h100_sxm"), load_profile("h100_sxm"), load_engine("vllm"))
    path = shared / (
        "calibration-data/llmservingsim-h100/profiler/perf/H100/Qwen/Qwen3.6-35B-A3B/bf16/tp1/"
        "moe.csv"
    )
    checked = 0
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            tokens, touched = int(row["tokens"]), int(row["activated_experts"])
            if tokens > 64 or touched < 64:
                continue
            predicted = cost.grouped_experts_time(layer, tokens * 8.0, float(touched))
            predicted += cost.gemm_time(tokens, 2048, 256)
            predicted += MOE_KERNELS_PER_LAYER * cost.profile["elementwise_latency_s"]
            assert predicted == pytest.approx(float(row["time_us"]) * 1e-6, rel=0.25), row
            checked += 1
    assert checked >= 8


def test_the_explorer_shows_the_model_and_offers_mtp_only_where_it_exists():
    from simspec.ui import inputs

    offered, left = inputs.offered_methods("llama-3.1-8b")
    assert "mtp" not in offered and "num_nextn_predict_layers" in left["mtp"]
    assert "mtp" in inputs.offered_methods("deepseek-v3")[0]
    inp = inputs.ExplorerInputs(model="deepseek-v3", gpu="h100_sxm", methods=["mtp"])
    facts = dict(inputs.model_info(inp))
    assert facts["parameters"] == "671.0B total" and "16 x h100_sxm" in facts["GPUs needed"]
    with pytest.raises(ScenarioError, match="does not fit"):
        inputs.check_inputs(inp)
    with pytest.raises(InputError, match="num_nextn_predict_layers"):
        inputs.check_inputs(inputs.ExplorerInputs(methods=["mtp"]))


def test_vllm_takes_mtp_k_only_as_a_multiple_of_the_models_mtp_layers(tmp_path):
    """vLLM's SpeculativeConfig: "num_speculative_tokens:3 must be divisible by n_predict=2"
    (QA: K 3 on a two-layer MTP model ran); SGLang's NextN reuses one layer whatever K."""
    from simspec.engine.build import setup_replica

    config = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "vocab_size": 129280,
        "max_position_embeddings": 163840,
        "num_nextn_predict_layers": 2,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000,
        "moe_layer_freq": 1,
        "topk_method": "noaux_tc",
        "n_group": 8,
        "topk_group": 4,
        "routed_scaling_factor": 2.5,
        "norm_topk_prob": True,
        "hidden_act": "silu",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    cases = (("vllm", 3, True), ("vllm", 4, False), ("vllm", 1, False), ("sglang", 3, False))
    for engine, k, refused in cases:  # K at most the layers runs (vLLM: "K > n_predict and")
        sc = Scenario(
            model=str(path), gpu="h200", tp=8, engine=engine, precision="fp8",
            method={"name": "mtp", "k": k, "acceptance": {"alpha": 0.7}},
        )  # fmt: skip
        if refused:
            with pytest.raises(InputError, match="divisible by n_predict=2"):
                setup_replica(sc)
        else:
            setup_replica(sc)


def test_mla_prompt_chunks_run_as_multi_head_attention_decodes_on_the_latent():
    """vLLM's _forward_prefill and SGLang's forward_normal run an MLA prompt as MHA (K and V
    up-projected per head, qk 192 / v 128 on DeepSeek-V3); the absorbed latent path priced
    them at 2 x heads x (576 + 512) FLOPs a pair, ~3x (QA: an 8,192-token prefill's attention
    132 ms at TP8 on H200). Decodes keep the latent kernel."""
    from simspec.engine.build import build_cost_model
    from simspec.engine.costmodel import BatchShape

    sc = Scenario(model="deepseek-v3", gpu="h200", tp=8)
    cost, model = build_cost_model(sc), load_model("deepseek-v3")
    prompt = BatchShape.of(np.array([8192]), np.array([0]), 1, prefill=True)
    as_latent = BatchShape.of(np.array([8192]), np.array([0]), 1)
    mha = cost.forward(model, prompt, overhead_s=0.0).attention_s
    latent = cost.forward(model, as_latent, overhead_s=0.0).attention_s
    assert 2.5 < latent / mha < 3.6
    decodes = BatchShape.uniform(16, 1, 16 * 4096.0, 16)
    mixed = cost.forward(model, decodes + prompt, overhead_s=0.0).attention_s
    alone = cost.forward(model, decodes, overhead_s=0.0).attention_s
    assert mixed == pytest.approx(alone + mha, rel=1e-9)  # two kernels, each its own path


def test_a_padded_moe_verify_costs_no_less_with_more_sequences():
    """vLLM pads a graphed batch to its capture size; the padding rows route as the stale ids
    of the same sequences' earlier tokens. Counted wholly fresh, 2 sequences' K=4 verify
    padded to 16 rows cost more than 3 sequences' (QA)."""
    from simspec.engine.build import build_cost_model
    from simspec.engine.costmodel import BatchShape

    cost, model = build_cost_model(Scenario(model="qwen3-30b-a3b")), load_model("qwen3-30b-a3b")
    times = [
        cost.forward(model, BatchShape.uniform(b, 5, b * 2048.0, 5 * b), overhead_s=0.0).total_s
        for b in range(1, 9)
    ]
    assert times == sorted(times)


def test_a_padded_moe_verify_costs_no_less_with_more_tokens_per_sequence():
    """The padding rows route afresh only for a later token's share (1 - reuse): at the real
    rows' mean share, which holds each sequence's wholly fresh first token, 4 sequences
    verifying 3 tokens padded to 16 rows cost more than verifying 4 (QA: Qwen3-235B-A22B FP8
    on 8 x H200 with EP, 16.50 against 15.91 ms)."""
    from simspec.engine.build import build_cost_model
    from simspec.engine.costmodel import BatchShape

    sc = Scenario(model="qwen3-235b-a22b", gpu="h200", tp=8, ep=8, precision="fp8")
    cost, model = build_cost_model(sc), load_model("qwen3-235b-a22b")
    times = [
        cost.forward(model, BatchShape.uniform(4, q, 4 * 1000.0, 4 * q), overhead_s=0.0).total_s
        for q in range(1, 7)
    ]
    assert times == sorted(times)


def test_llama4_chunked_layers_read_their_own_chunk_not_a_sliding_window():
    """A chunked-local layer reads c mod chunk tokens (vLLM make_local_attention_virtual_batches;
    SGLang LocalAttentionMetadata): one sequence at 8,292 tokens reads 100, as at 100; a batch
    past the first chunk half a chunk each (QA: priced as a window, 8,192 each, ~2x)."""
    from simspec.catalog.hardware import load_engine, load_gpu, load_profile
    from simspec.engine.costmodel import BatchShape, RooflineCostModel

    scout = load_model("llama-4-scout")
    assert scout.chunked_attention and scout.sliding_window == 8192
    assert len(scout.sliding_layers) == 36  # the NoPE layers attend over everything
    cost = RooflineCostModel(load_gpu("h100_sxm"), load_profile("h100_sxm"), load_engine("vllm"))
    chunked = scout.model_copy(update={"sliding_layers": tuple(range(48))})
    full = scout.model_copy(update={"sliding_layers": (), "chunked_attention": False})

    def attention(model, batch):
        return cost.forward(model, batch).attention_s

    def ctx(n: int, each: float) -> BatchShape:
        return BatchShape.uniform(n, 1, n * each, n)

    assert attention(chunked, ctx(1, 8292)) == attention(full, ctx(1, 100))
    assert attention(chunked, ctx(32, 5000)) == attention(full, ctx(32, 5000))  # first chunk
    assert attention(chunked, ctx(32, 20000)) == pytest.approx(attention(full, ctx(32, 4096)))


def test_a_long_prompt_on_chunked_layers_costs_the_same_however_it_is_split():
    """Chunked-local attention's pairs follow each token's place in its chunk (chunk_pairs),
    so a 32K prompt costs about what its 8K pieces do (QA: whole 178 ms, 4 x 8K 46.7 ms)."""
    import numpy as np

    from simspec.catalog.hardware import load_engine, load_gpu, load_profile
    from simspec.engine.costmodel import BatchShape, RooflineCostModel
    from simspec.engine.costmodel.attention import chunk_pairs

    assert chunk_pairs(10, 4) == (1 + 2 + 3 + 4) * 2 + (1 + 2)
    scout = load_model("llama-4-scout")
    cost = RooflineCostModel(
        load_gpu("h100_sxm"), load_profile("h100_sxm"), load_engine("vllm"), tp=4
    )
    chunked = scout.model_copy(update={"sliding_layers": tuple(range(48))})

    def prompt(q: int, done: int) -> float:
        shape = BatchShape.of(np.array([q]), np.array([done]), 1, prefill=True)
        return cost.forward(chunked, shape).attention_s

    whole = prompt(32768, 0)
    pieces = sum(prompt(8192, 8192 * i) for i in range(4))
    assert whole == pytest.approx(pieces, rel=0.1)


def test_the_busiest_ranks_experts_are_the_exact_expectation_of_a_uniform_draw():
    """E[max over ranks] of a uniformly drawn set of distinct experts (a multivariate
    hypergeometric): one expert lands whole on one rank, every expert touched fills each."""
    from itertools import combinations

    from simspec.engine.costmodel.work import busiest_rank_experts

    assert busiest_rank_experts(16, 8, 1) == pytest.approx(1.0)
    assert busiest_rank_experts(16, 8, 16) == pytest.approx(2.0)
    assert busiest_rank_experts(16, 1, 5) == 5.0
    # 8 experts on 4 ranks of 2, 3 drawn: enumerate the 56 sets
    sets = list(combinations(range(8), 3))
    exact = sum(max(sum(1 for e in s if e // 2 == r) for r in range(4)) for s in sets) / len(sets)
    assert busiest_rank_experts(8, 4, 3) == pytest.approx(exact)
    # between whole counts, linear
    mid = busiest_rank_experts(8, 4, 2.5)
    assert mid == pytest.approx((busiest_rank_experts(8, 4, 2) + exact) / 2)


def test_expert_parallel_reads_a_whole_expert_where_tp_reads_a_slice():
    """QA: EP8 priced the mean rank's 1/8 of an expert for a lone top-1 token, so Llama-4's
    EP8 step was faster than TP8's for a latency-bound verify; the busiest rank reads it
    whole, at least its bytes over the HBM bandwidth a layer."""
    from simspec.catalog.hardware import load_gpu
    from simspec.catalog.models import load_model
    from simspec.config import MethodConfig, Scenario
    from simspec.engine.build import build_cost_model
    from simspec.engine.costmodel.shapes import BatchShape

    model = load_model("llama-4-scout")
    one = BatchShape.uniform(1, 1, 1000.0, 1)
    step = {}
    for ep in (1, 8):
        sc = Scenario(
            model=model.id,
            gpu="h100_sxm",
            tp=8,
            ep=ep,
            method=MethodConfig(name="autoregressive", k=0),
        )
        step[ep] = build_cost_model(sc).forward(model, one).total_s
    expert_bytes = 3 * model.hidden_size * model.moe_intermediate_size * 2  # bf16
    floor = model.num_hidden_layers * expert_bytes / load_gpu("h100_sxm").hbm_bandwidth_bytes_s
    assert step[8] - step[1] > 0.5 * floor


def test_experts_that_do_not_divide_over_the_gpus_land_as_vllm_splits_them():
    """60 experts over 8 GPUs: four hold 8, four hold 7 (vLLM's determine_expert_map); every
    expert touched fills the busiest with 8 (QA: capped at 7, 60 experts read cheaper than 64)."""
    from simspec.engine.costmodel.work import busiest_rank_experts

    assert busiest_rank_experts(60, 8, 60) == pytest.approx(8.0)
    assert busiest_rank_experts(60, 8, 1) == pytest.approx(1.0)
    # counts past a float's range (QA: 2,048 experts raised an OverflowError)
    assert 500 < busiest_rank_experts(2048, 2, 1000) < 530
    assert busiest_rank_experts(60, 8, 30) > busiest_rank_experts(64, 8, 30) - 0.2
