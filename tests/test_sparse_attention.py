"""DeepSeek-V3.2's sparse attention (DSA): its config read by architecture, its size, the
lightning indexer's cost over the whole context with MLA capped at index_topk tokens, the
indexer's key cache in the memory plan, MTP on it, and what simspec refuses by name."""

from __future__ import annotations

import json

import pytest

from simspec import Scenario, simulate
from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.hf_config import read_config
from simspec.catalog.models import load_model
from simspec.catalog.precision import load_precision
from simspec.engine.costmodel import BatchShape, RooflineCostModel
from simspec.engine.costmodel.attention import AttentionKernels
from simspec.engine.costmodel.sparse_attention import SparseAttentionKernels, sparse_mla_batch
from simspec.engine.kv_cache import MemoryDemand, plan_memory
from simspec.errors import InputError

# DeepSeek-V3.2's config.json keys as published (the preset's source in models.yaml says where
# each value is read): the DeepSeek-V3 keys plus the indexer's three
V32_CONFIG = {
    "architectures": ["DeepseekV32ForCausalLM"],
    "model_type": "deepseek_v32",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_nextn_predict_layers": 1,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "moe_layer_freq": 1,
    "first_k_dense_replace": 3,
    "n_group": 8,
    "topk_group": 4,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "index_topk": 2048,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "vocab_size": 129280,
    "tie_word_embeddings": False,
    "max_position_embeddings": 163840,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
}


def _cost(
    model: str = "deepseek-v3.2", gpu: str = "h200", engine: str = "vllm"
) -> RooflineCostModel:
    return RooflineCostModel(
        load_gpu(gpu),
        load_profile(gpu),
        load_engine(engine),
        tp=8,
        precision=load_precision("fp8", "precision"),
        precision_model=model,
        kv_bytes=1.0,
    )


def _kernels(cost: RooflineCostModel, model) -> SparseAttentionKernels:
    cost.forward(model, BatchShape.uniform(1, 1, 1.0, 1))
    kernels = cost._models[id(model)].attention
    assert isinstance(kernels, SparseAttentionKernels)
    return kernels


def _decode(seqs: int, context: int, q: int = 1) -> BatchShape:
    return BatchShape.uniform(seqs, q, float(seqs * context), seqs * q)


# -- reading the config ------------------------------------------------------------------------
def test_a_deepseek_v32_config_json_reads_as_the_preset(tmp_path):
    path = tmp_path / "DeepSeek-V3.2" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(V32_CONFIG))
    read, preset = load_model(str(path)), load_model("deepseek-v3.2")
    assert (read.index_topk, read.index_n_heads, read.index_head_dim) == (2048, 64, 128)
    assert read.is_sparse and read.is_mla and read.weight_dtype == "fp8"
    skip = {"id", "source", "hf_ids"}
    assert read.model_dump(exclude=skip) == preset.model_dump(exclude=skip)


def test_a_deepseek_v3_config_carrying_index_topk_is_read_as_sparse_as_vllm_does():
    # vLLM: is_v32 = hasattr(config, "index_topk"), whatever the model_type
    fields = read_config({**V32_CONFIG, "model_type": "deepseek_v3"})
    assert fields["index_topk"] == 2048
    dense = {k: v for k, v in V32_CONFIG.items() if not k.startswith("index_")}
    assert "index_topk" not in read_config({**dense, "model_type": "deepseek_v3"})


@pytest.mark.parametrize(
    ("keys", "field"),
    [
        ({"index_topk_freq": 4}, "model.index_topk_freq"),  # GLM-5's shared indexers
        ({"indexer_types": ["full"] * 3 + ["shared"] * 58}, "model.indexer_types"),
        ({"index_topk_pattern": "FFS"}, "model.index_topk_pattern"),
        ({"index_topk": None}, "model.index_topk"),  # deepseek_v32 without its indexer
        ({"index_head_dim": 0}, "model.index_head_dim"),
        ({"index_topk": 2**40}, "model.index_topk"),
        ({"q_lora_rank": None}, "model.q_lora_rank"),  # the indexer reads MLA's q latent
    ],
)
def test_what_of_dsa_simspec_does_not_model_is_refused_naming_the_key(keys, field):
    with pytest.raises(InputError) as err:
        read_config({**V32_CONFIG, **keys})
    assert err.value.field == field


def test_an_indexer_type_list_of_only_full_layers_is_the_modelled_case():
    fields = read_config({**V32_CONFIG, "indexer_types": ["full"] * 61, "index_topk_freq": 1})
    assert fields["index_topk"] == 2048


# -- size --------------------------------------------------------------------------------------
def test_parameters_are_deepseek_v3s_671b_plus_one_indexer_a_layer():
    v32, v3 = load_model("deepseek-v3.2"), load_model("deepseek-v3")
    per_layer = 1536 * 64 * 128 + 7168 * (128 + 64)  # wq_b, wk, weights_proj
    assert v32.indexer_params == per_layer == 13_959_168
    assert v32.num_params - v3.num_params == 61 * per_layer
    assert abs(v32.num_params / 671e9 - 1) < 0.02
    # replicated like MLA's down projections: every GPU holds the indexers whole
    grown = v32.weight_bytes_per_gpu(8) - v3.weight_bytes_per_gpu(8)
    assert grown == pytest.approx(61 * per_layer * 1.0)  # fp8 weights, not / tp


# -- cost --------------------------------------------------------------------------------------
def test_the_indexer_grows_with_the_context_while_mla_stops_at_index_topk():
    kernels = _kernels(_cost(), load_model("deepseek-v3.2"))
    indexer = [kernels.indexer_time(_decode(32, ctx)) for ctx in (4096, 16384, 65536)]
    assert indexer[0] < indexer[1] < indexer[2]
    mla = [
        AttentionKernels.time(kernels, sparse_mla_batch(_decode(32, ctx), 2048), 1)
        for ctx in (4096, 16384, 65536)
    ]
    assert mla[0] == mla[1] == mla[2]
    # below index_topk every past token is selected: MLA reads what dense MLA reads
    short = sparse_mla_batch(_decode(32, 1000), 2048)
    assert short.sum_kv + short.num_tokens == 32 * 1001


def test_a_verify_step_selects_per_query_token():
    # FlashMLA's sparse decode takes top-k indices per query token: K+1 selections a sequence
    sparse = sparse_mla_batch(_decode(8, 100_000, q=4), 2048)
    assert sparse.num_seqs == 32 and sparse.sum_kv + sparse.num_tokens == 32 * 2048


def test_v32_steps_slower_than_v3_at_short_context_and_faster_at_long():
    v32, v3 = load_model("deepseek-v3.2"), load_model("deepseek-v3")
    for batch in (_decode(1, 512), _decode(32, 1024), _decode(32, 1024, q=2)):
        # below index_topk the indexer only adds work
        assert _cost().forward(v32, batch).total_s > _cost("deepseek-v3").forward(v3, batch).total_s
    for batch in (_decode(32, 65536), _decode(32, 65536, q=2)):
        assert _cost().forward(v32, batch).total_s < _cost("deepseek-v3").forward(v3, batch).total_s


def test_sparse_attention_is_refused_on_gpus_its_kernels_do_not_run_on():
    with pytest.raises(InputError) as err:
        _cost(gpu="mi300x").forward(load_model("deepseek-v3.2"), _decode(1, 512))
    assert err.value.field == "gpu" and "Hopper and Blackwell" in err.value.message


def test_sglang_verify_reads_the_indexer_keys_per_query_token_and_vllm_per_sequence():
    model = load_model("deepseek-v3.2")
    vllm, sglang = _kernels(_cost(), model), _kernels(_cost(engine="sglang"), model)
    decode, verify = _decode(8, 65536), _decode(8, 65536, q=4)
    assert vllm.indexer_time(decode) == sglang.indexer_time(decode)  # one query a sequence
    assert sglang.indexer_time(verify) > vllm.indexer_time(verify)


def test_sparse_attention_is_refused_on_engines_it_is_not_modelled_for():
    with pytest.raises(InputError) as err:
        _cost(engine="hf").forward(load_model("deepseek-v3.2"), _decode(1, 512))
    assert err.value.field == "engine" and "vllm and sglang" in err.value.message


def test_dense_models_keep_the_dense_attention_kernels():
    cost = _cost("deepseek-v3")
    model = load_model("deepseek-v3")
    cost.forward(model, _decode(1, 512))
    assert type(cost._models[id(model)].attention) is AttentionKernels


# -- memory ------------------------------------------------------------------------------------
def test_the_memory_plan_holds_the_indexers_key_cache():
    v32, v3 = load_model("deepseek-v3.2"), load_model("deepseek-v3")
    assert v32.indexer_cache_bytes_per_token == 132  # 128 FP8 values + one float32 scale
    # the indexer's keys are FP8 whatever the KV cache's dtype; an FP8 cache of V3.2 is also
    # the fp8_ds_mla row, 80 B a layer over V3's plain fp8 latent (scales, a bf16 rope part)
    for kv_bytes, row in ((1.0, 80), (2.0, 0)):
        extra = v32.kv_bytes_per_token_per_gpu(8, dtype_bytes=kv_bytes)
        extra -= v3.kv_bytes_per_token_per_gpu(8, dtype_bytes=kv_bytes)
        assert extra == 61 * (132 + row)
    gpu, engine = load_gpu("h200"), load_engine("vllm")
    demand = MemoryDemand(0.0, 0.0, max_tokens=8192, max_logit_rows=256, max_seqs=256)
    plans = [plan_memory(gpu, engine, m, demand, tp=8, kv_bytes=1.0) for m in (v32, v3)]
    assert plans[0].kv_bytes_per_token - plans[1].kv_bytes_per_token == 61 * (132 + 80)
    assert plans[0].num_blocks < plans[1].num_blocks


def test_mtp_runs_its_module_with_an_indexer_like_the_target():
    sc = Scenario.model_validate(
        {
            "model": "deepseek-v3.2",
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
            "method": {"name": "mtp", "k": 1, "acceptance": {"alpha": 0.85}},
        }
    )
    res = simulate(sc)
    assert res.summary.mean_accept_len > 1
    head = load_model("deepseek-v3.2").one_layer(True, 129280, "mtp")
    assert head.is_sparse and head.kv_bytes_per_token_per_gpu(8, dtype_bytes=1) == 656 + 132


def test_an_fp8_cache_of_sparse_mla_is_deepseeks_fp8_ds_mla_row():
    """QA: priced as plain fp8 (576 B a layer); vLLM turns any fp8 KV of these models into
    fp8_ds_mla, 656 B a layer (the fp8 latent, one fp32 scale per 128, the bf16 rope part)."""
    m = load_model("deepseek-v3.2")
    indexer = m.num_hidden_layers * m.indexer_cache_bytes_per_token
    assert m.kv_bytes_per_token_per_gpu(8, dtype_bytes=1) == 61 * 656 + indexer
    assert m.kv_bytes_per_token_per_gpu(8) == 61 * 576 * 2 + indexer  # bf16: the latent whole


def test_sglang_runs_a_short_prefill_as_dense_mla():
    """SGLang's set_nsa_prefill_impl takes MHA_ONE_SHOT while the longest context is within
    SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD (server_args: the model's index_topk, 2,048):
    V3.2's 1,000-token prompt costs V3's dense MLA prefill plus the indexer's key GEMM; past
    the threshold, and always under vLLM, the indexer and sparse MLA (QA: 18.7 against 2.1 ms)."""
    import numpy as np

    from simspec.config import Scenario
    from simspec.engine.build import build_cost_model

    v32, v3 = load_model("deepseek-v3.2"), load_model("deepseek-v3")

    def attention(model, engine: str, n: int) -> float:
        cost = build_cost_model(Scenario(model=model.id, gpu="h200", tp=8, engine=engine), model)
        shape = BatchShape.of(np.array([n]), np.array([0]), 1, prefill=True)
        return cost.forward(model, shape).attention_s

    dense = attention(v3, "sglang", 1000)
    assert dense < attention(v32, "sglang", 1000) < 2.5 * dense
    assert attention(v32, "vllm", 1000) > 4 * attention(v32, "sglang", 1000)
    assert attention(v32, "sglang", 3000) > 10 * attention(v32, "sglang", 1000)  # sparse again
