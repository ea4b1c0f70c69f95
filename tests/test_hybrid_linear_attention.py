"""Hybrid linear attention (Qwen3-Next, Qwen3.5): Gated DeltaNet layers read from their config
keys, priced per token without a KV cache, holding a fixed state per sequence (one more per
verify position under speculative decoding), and what stays unmodelled refused by name."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.hf_config import read_config
from simspec.catalog.models import ModelShape, load_hf_config, load_model
from simspec.cli.main import app
from simspec.engine.costmodel import BatchShape, RooflineCostModel
from simspec.engine.costmodel.linear_attention import RecurrentKernels, state_slots
from simspec.engine.costmodel.roofline import OperatorTimes
from simspec.engine.kv_cache import (
    SGLANG_MAMBA_FULL_MEMORY_RATIO,
    MemoryDemand,
    linear_state_bytes,
    plan_memory,
)
from simspec.errors import InputError

runner = CliRunner()

# The Qwen3-Next release config.json (Qwen3-Next-80B-A3B's shapes; the Qwen3-Coder-Next release
# transcribed in public code shares every key below), layer_types left to full_attention_interval
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"],
    "attention_bias": False,
    "decoder_sparse_step": 1,
    "full_attention_interval": 4,
    "head_dim": 256,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 5120,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_value_head_dim": 128,
    "max_position_embeddings": 262144,
    "mlp_only_layers": [],
    "model_type": "qwen3_next",
    "moe_intermediate_size": 512,
    "norm_topk_prob": True,
    "num_attention_heads": 16,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "num_hidden_layers": 48,
    "num_key_value_heads": 2,
    "partial_rotary_factor": 0.25,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000000,
    "shared_expert_intermediate_size": 512,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_sliding_window": False,
    "vocab_size": 151936,
}
# Qwen3.5-9B's text tower as its release nests it (model_type qwen3_5 around text_config);
# max_position_embeddings as its GGUF metadata states (context_length 262144)
QWEN35_9B = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "text_config": {
        "model_type": "qwen3_5_text",
        "attn_output_gate": True,
        "full_attention_interval": 4,
        "head_dim": 256,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 8,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_value_head_dim": 128,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "num_hidden_layers": 32,
        "vocab_size": 248320,
        "mamba_ssm_dtype": "float32",
        "mtp_num_hidden_layers": 1,
        "max_position_embeddings": 262144,
        "tie_word_embeddings": False,
    },
}


def _shape(raw: dict) -> ModelShape:
    return ModelShape(id="m", **read_config(raw))


# -- the reader ---------------------------------------------------------------------------------
def test_qwen3_next_reads_every_fourth_layer_as_full_attention_and_the_rest_as_gated_deltanet():
    m = _shape(QWEN3_NEXT)
    assert m.linear_layers == tuple(i for i in range(48) if (i + 1) % 4)
    assert m.num_hidden_layers - len(m.linear_layers) == 12
    assert (m.linear_num_key_heads, m.linear_num_value_heads) == (16, 32)
    assert (m.linear_key_head_dim, m.linear_value_head_dim, m.linear_conv_kernel_dim) == (
        128,
        128,
        4,
    )
    assert m.attn_output_gate and m.qk_norm
    assert m.moe_layers == tuple(range(48)) and m.shared_expert_intermediate_size == 512


def test_written_layer_types_read_the_same_as_the_interval():
    types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(48)]
    written = {**QWEN3_NEXT, "layer_types": types}
    del written["full_attention_interval"]
    assert _shape(written).linear_layers == _shape(QWEN3_NEXT).linear_layers


def test_a_qwen35_config_is_read_from_its_text_config_as_a_dense_hybrid():
    m = _shape(QWEN35_9B)
    assert m.model_type == "qwen3_5_text" and not m.is_moe
    assert len(m.linear_layers) == 24 and m.mamba_ssm_dtype == "float32"
    assert m.num_nextn_predict_layers == 1  # mtp_num_hidden_layers


def test_the_full_attention_q_projection_is_doubled_for_the_output_gate():
    m = _shape(QWEN3_NEXT)
    assert m.q_proj_dim == 2 * m.q_dim == 2 * 16 * 256
    # vLLM's qkv_proj for it: 2048 x (2 * 4096 + 2 * 512); o_proj 4096 x 2048
    assert m.attention_params == 2048 * (8192 + 1024) + 4096 * 2048
    assert load_model("llama-3.1-8b").q_proj_dim == load_model("llama-3.1-8b").q_dim


# -- parameters ---------------------------------------------------------------------------------
def test_qwen3_next_counts_80b_total_within_two_percent():
    assert load_model("qwen3-next-80b-a3b").num_params == pytest.approx(80e9, rel=0.02)


def test_qwen3_next_active_parameters_match_the_checkpoint_count_within_two_percent():
    # 3,874,929,408: the release's safetensors total less its inactive experts, as a public
    # parser of the Qwen3-Next architecture records it (Qwen names it "A3B")
    assert load_model("qwen3-next-80b-a3b").active_params == pytest.approx(3_874_929_408, rel=0.02)


def test_a_gated_deltanet_layer_weighs_its_projections_and_conv():
    m = load_model("qwen3-next-80b-a3b")
    in_proj = 2048 * (2 * 2048 + 2 * 4096) + 2048 * 64
    conv, out = 8192 * 4, 4096 * 2048
    assert m.linear_attention_params == in_proj + conv + out + 64 + 128


# -- no KV, a fixed state -----------------------------------------------------------------------
def test_only_the_full_attention_layers_cache_kv():
    m = load_model("qwen3-next-80b-a3b")
    assert m.kv_bytes_per_token_per_gpu(1) == 12 * 2 * 2 * 256 * 2


def test_the_recurrent_state_is_a_value_by_key_matrix_per_value_head_and_the_conv_taps():
    m = load_model("qwen3-next-80b-a3b")
    ssm, conv = m.linear_state_bytes_per_gpu(2, ssm_bytes=4)
    assert ssm == 36 * 16 * 128 * 128 * 4
    assert conv == 36 * 4096 * 3 * 2


def _kernels(model: ModelShape, tp: int = 1) -> RecurrentKernels:
    gpu = load_gpu("h200")
    return RecurrentKernels(OperatorTimes(gpu, load_profile("h200"), tp), model, ssm_bytes=4)


def test_a_decode_step_costs_the_same_whatever_the_context():
    k = _kernels(load_model("qwen3-next-80b-a3b"))
    short = BatchShape.uniform(8, 1, kv_sum=8 * 100, logit_tokens=8)
    long = BatchShape.uniform(8, 1, kv_sum=8 * 200_000, logit_tokens=8)
    assert k.time(short, 36) == k.time(long, 36) > 0


def test_the_state_memory_does_not_grow_with_the_context():
    m, engine = load_model("qwen3-next-80b-a3b"), load_engine("vllm")
    plans = [
        plan_memory(load_gpu("h200"), engine, m, MemoryDemand(0, 0, 8192, 64, 64), 2)
        for _ in range(2)
    ]
    per_seq = linear_state_bytes(m, engine, 2, 1)
    # vLLM V1's pool: a running sequence's states take 3 pages of the pool (its 36 Gated
    # DeltaNet layers in 3 groups of 12, a page each, as vLLM groups them beside the 12
    # attention layers), whatever its context; 64 sequences' states, no more
    page = plans[0].kv_bytes_per_token * plans[0].block_size
    assert plans[0].window is not None and plans[0].window.fixed == 3
    assert 3 * page > per_seq > 2.9 * page
    assert plans[0].state_bytes == 64 * 3 * page
    assert plans[0].seq_blocks(1) == plans[0].seq_blocks(plans[0].block_size) == 4
    assert plans[0].kv_bytes_per_token == m.kv_bytes_per_token_per_gpu(2)


def test_verifying_k_tokens_writes_a_state_per_position():
    k = _kernels(load_model("qwen3-next-80b-a3b"))
    one = BatchShape.uniform(64, 1, kv_sum=64 * 1000, logit_tokens=64)
    four = BatchShape.uniform(64, 4, kv_sum=64 * 1000, logit_tokens=256)
    assert k.time(four, 1) > k.time(one, 1)
    # the same 256 tokens as one prefill chunk move one state in and out, not 256
    chunk = BatchShape.uniform(1, 256, kv_sum=0, logit_tokens=1)
    assert k.time(chunk, 1) < k.time(four, 1) / 4


def test_speculation_holds_a_state_per_verify_position_sglang_one_more_than_vllm():
    m = load_model("qwen3-next-80b-a3b")
    assert state_slots("sglang", 1) == state_slots("vllm", 1) == 1
    assert state_slots("sglang", 4) == 5 and state_slots("vllm", 4) == 4
    vllm = load_engine("vllm")
    assert linear_state_bytes(m, vllm, 1, 1, 4) == 4 * linear_state_bytes(m, vllm, 1, 1, 1)


def test_sglang_gives_the_states_its_memory_ratio_and_caps_the_running_requests_by_them():
    m, engine, gpu = load_model("qwen3-next-80b-a3b"), load_engine("sglang"), load_gpu("h200")
    plan = plan_memory(gpu, engine, m, MemoryDemand(0, 0, 8192, 4096, 4096, 4), 2)
    free = plan.usable_bytes - plan.weight_bytes - plan.activation_bytes
    ratio = SGLANG_MAMBA_FULL_MEMORY_RATIO
    assert plan.state_bytes == pytest.approx(free * ratio / (1 + ratio))
    assert 0 < plan.state_seqs < 4096
    assert plan.state_seqs * linear_state_bytes(m, engine, 2, 1, 4) <= plan.state_bytes


def test_the_ssm_state_is_fp32_in_sglang_and_the_models_dtype_in_vllm():
    from simspec.engine.costmodel.linear_attention import ssm_state_bytes

    m = load_model("qwen3-next-80b-a3b")
    assert ssm_state_bytes(m, "sglang") == 4 and ssm_state_bytes(m, "vllm") == 2
    assert ssm_state_bytes(_shape(QWEN35_9B), "vllm") == 4  # its config asks for float32


def test_a_forward_prices_the_deltanet_layers_instead_of_attention():
    m = load_model("qwen3-next-80b-a3b")
    gpu, prof = load_gpu("h200"), load_profile("h200")
    cost = RooflineCostModel(gpu, prof, load_engine("sglang"), tp=2)
    dense_like = m.model_copy(update={"linear_layers": ()})
    batch = BatchShape.uniform(8, 1, kv_sum=8 * 100_000, logit_tokens=8)
    # at a long context 36 attention layers would read far more KV than 36 states
    assert cost.forward(m, batch).attention_s < cost.forward(dense_like, batch).attention_s


# -- refusals -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("keys", "field"),
    [
        ({"model_type": "llama", "layer_types": ["linear_attention"] * 48}, "model.layer_types"),
        ({"layer_types": ["sliding_attention"] * 48}, "model.layer_types"),
        ({"linear_num_key_heads": None}, "model.linear_num_key_heads"),
        ({"linear_conv_kernel_dim": 0}, "model.linear_conv_kernel_dim"),
        ({"full_attention_interval": 0}, "model.full_attention_interval"),
        ({"mamba_ssm_dtype": "int8"}, "model.mamba_ssm_dtype"),
        ({"attn_output_gate": "yes"}, "model.attn_output_gate"),
        ({"layer_types": ["linear_attention"] * 47}, "model.layer_types"),
    ],
)
def test_what_the_hybrid_reader_cannot_express_names_the_key(keys, field):
    raw = {**QWEN3_NEXT, **keys}
    if "layer_types" in keys:
        raw.pop("full_attention_interval")
    with pytest.raises(InputError) as err:
        read_config(raw)
    assert err.value.field == field


def test_a_config_json_of_qwen3_next_reads_by_path(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3_NEXT))
    m = load_hf_config(path)
    assert len(m.linear_layers) == 36
    assert m.num_params == load_model("qwen3-next-80b-a3b").num_params


def test_data_parallel_attention_over_deltanet_layers_is_refused_naming_dp():
    from simspec.config import Scenario
    from simspec.engine.build import check_linear_layers

    sc = Scenario(model="qwen3-next-80b-a3b", gpu="h200", engine="sglang", tp=2, dp=2)
    with pytest.raises(InputError) as err:
        check_linear_layers(load_model(sc.model), sc.engine, sc.dp)
    assert err.value.field == "dp"


# -- the CLI ------------------------------------------------------------------------------------
def test_simspec_models_shows_the_fixed_state_per_sequence():
    result = runner.invoke(app, ["models", "qwen3-next-80b-a3b"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "recurrent state per sequence" in text and "36 Gated DeltaNet layers" in text
    assert "whatever its context" in text


def test_the_mtp_module_is_a_gated_full_attention_layer_and_an_eagle_head_a_plain_one():
    m = load_model("qwen3-next-80b-a3b")
    mtp, eagle = m.one_layer(True, m.vocab_size, "mtp"), m.one_layer(False, m.vocab_size, "e3")
    assert mtp.linear_layers == eagle.linear_layers == ()
    assert mtp.attn_output_gate and mtp.is_moe
    assert not eagle.attn_output_gate and not eagle.is_moe


@pytest.mark.parametrize("engine", ["trtllm", "hf", "vllm-v0"])
def test_an_engine_whose_state_handling_is_not_modelled_is_refused_naming_it(engine):
    from simspec.config import Scenario
    from simspec.engine.build import check_linear_layers

    sc = Scenario(model="qwen3-next-80b-a3b", gpu="h200", engine=engine)
    with pytest.raises(InputError) as err:
        check_linear_layers(load_model("qwen3-next-80b-a3b"), sc.engine, sc.dp)
    assert err.value.field == "engine" and engine in err.value.message


def test_simspec_models_refuses_the_layout_a_run_refuses():
    """DP attention over Gated DeltaNet layers is refused by `models` as by `sweep` (QA: models
    printed a KV cache for a layout every run refuses)."""
    result = runner.invoke(
        app, ["models", "qwen3-next-80b-a3b", "--gpu", "h200", "--tp", "4", "--dp", "4"]
    )
    assert result.exit_code == 2
    assert "dp" in result.output and "Gated DeltaNet" in result.output


def test_a_sweep_of_a_gated_deltanet_model_says_its_layers_are_priced_from_shapes(tmp_path):
    """As validate's assumptions say it (QA: the sweep printed nothing of it)."""
    from simspec.engine.costmodel.linear_attention import LINEAR_STATE_NOTE

    args = ["sweep", "--model", "qwen3-next-80b-a3b", "--gpu", "h200", "--tp", "4"]
    out = tmp_path / "s.csv"
    result = CliRunner().invoke(
        app, [*args, "--batch-sizes", "1", "--requests", "16", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert LINEAR_STATE_NOTE[:40] in " ".join(result.output.split())


def test_vllm_raises_the_attention_block_to_hold_one_layers_recurrent_state():
    """HybridAttentionMambaModelConfig.verify_and_update_config: 16 x cdiv(state page,
    16 x token page), one pool for both pages (QA: simspec kept vLLM's 16-token block); SGLang
    keeps its one-token pages."""
    from simspec.engine.build import setup_replica
    from simspec.engine.costmodel.linear_attention import ssm_state_bytes
    from simspec.engine.kv_cache import kv_block_size

    m = load_model("qwen3-next-80b-a3b")
    vllm = load_engine("vllm")
    ssm, conv = m.linear_state_bytes_per_gpu(4, ssm_state_bytes(m, "vllm"))
    state = (ssm + conv) / len(m.linear_layers)
    token = m.kv_dim_per_gpu(4) * 2 * 2
    want = 16 * -(-int(state) // (16 * token))
    assert kv_block_size(vllm, m, load_gpu("h200"), 4, 2) == want == 272
    assert kv_block_size(load_engine("sglang"), m, load_gpu("h200"), 4, 2) == 1
    from simspec.config import Scenario

    sc = Scenario(model="qwen3-next-80b-a3b", gpu="h200", tp=4, engine="vllm")
    assert setup_replica(sc).memory.block_size == 272
