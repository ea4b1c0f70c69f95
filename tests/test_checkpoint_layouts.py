"""Layouts as the engines load a checkpoint: block-FP8 scale blocks per GPU, KV heads copied
where GPUs outnumber them, uneven expert splits, and config.json spellings vLLM accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simspec.catalog.hardware import load_engine
from simspec.catalog.models import load_model
from simspec.config import Scenario
from simspec.engine.build import build_cost_model, check_fp8_blocks
from simspec.engine.kv_cache import GIB, min_gpus
from simspec.engine.layout import ParallelLayout
from simspec.errors import InputError
from simspec.studies.model_facts import model_facts

# Qwen/Qwen3-235B-A22B-FP8 config.json's shape and quantization_config (as copied in
# ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/model_configs), its
# modules_to_not_convert cut to one layer's norms and router
QWEN3_235B_FP8 = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "num_hidden_layers": 94,
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
        "modules_to_not_convert": [
            "lm_head",
            "model.layers.0.input_layernorm",
            "model.layers.0.mlp.gate",
            "model.layers.0.post_attention_layernorm",
        ],
    },
}


def _config(tmp_path: Path, config: dict, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


def test_the_qwen3_fp8_checkpoint_loads_with_its_norms_left_unquantised(tmp_path):
    """QA: the official FP8 config was refused for listing norms in modules_to_not_convert."""
    model = load_model(_config(tmp_path, QWEN3_235B_FP8))
    assert model.weight_dtype == "fp8"
    assert model.weight_block_size == (128, 128)


def test_block_fp8_experts_sliced_into_partial_blocks_are_refused_as_vllm_does(tmp_path):
    """vllm-project/vllm#17569: 1536 / 8 = 192 is not a multiple of block_n 128. ep = tp (whole
    experts) and tp 4 (384 a GPU) load."""
    path = _config(tmp_path, QWEN3_235B_FP8)
    base = {"model": path, "gpu": "h200"}
    with pytest.raises(InputError, match=r"^tp: .*192 a GPU.*use tp 4 or fewer or ep 8"):
        build_cost_model(Scenario(**base, tp=8))
    build_cost_model(Scenario(**base, tp=8, ep=8))
    build_cost_model(Scenario(**base, tp=4))
    # another precision is another checkpoint (online quantisation: no blocks)
    build_cost_model(Scenario(**base, tp=8, precision="bf16"))
    # engines whose loaders are not cited are not checked
    model = load_model(path)
    check_fp8_blocks(model, ParallelLayout(8), load_engine("trtllm"), None)


def test_deepseek_v3_past_tp16_leaves_its_dense_mlp_partial_blocks():
    """18432 / 32 = 576 (sgl-project/sglang#3345); the memory plan refuses it by name, and the
    fewest GPUs never lands on a refused tp."""
    with pytest.raises(InputError, match=r"^tp: .*dense MLP width 18432 over 32 GPUs"):
        model_facts("deepseek-v3", "h100_sxm", "sglang", ParallelLayout(32, 32))
    assert model_facts("deepseek-v3", "h200", "sglang", ParallelLayout(16, 16))


def test_the_fewest_gpus_skip_a_tp_the_checkpoint_cannot_load(tmp_path):
    from simspec.catalog.hardware import load_gpu

    h100, vllm = load_gpu("h100_sxm"), load_engine("vllm")
    assert min_gpus(h100, vllm, load_model(_config(tmp_path, QWEN3_235B_FP8))) == 4
    # 256-wide blocks: 1536 / 4 = 384 and / 8 = 192 are partial, and tp 2 does not hold it
    q = {**QWEN3_235B_FP8["quantization_config"], "weight_block_size": [256, 256]}
    wide = _config(tmp_path, {**QWEN3_235B_FP8, "quantization_config": q}, "wide.json")
    assert min_gpus(h100, vllm, load_model(wide)) is None


def test_a_bad_weight_block_size_is_refused_by_its_key(tmp_path):
    q = {**QWEN3_235B_FP8["quantization_config"], "weight_block_size": [128]}
    with pytest.raises(InputError, match="weight_block_size: must be two positive integers"):
        load_model(_config(tmp_path, {**QWEN3_235B_FP8, "quantization_config": q}))


def test_quant_method_is_matched_without_regard_to_case(tmp_path):
    """vLLM lower-cases it (ModelConfig._verify_quantization)."""
    q = {**QWEN3_235B_FP8["quantization_config"], "quant_method": "FP8"}
    model = load_model(_config(tmp_path, {**QWEN3_235B_FP8, "quantization_config": q}))
    assert model.weight_dtype == "fp8" and model.weight_block_size == (128, 128)


def test_an_mla_config_without_kv_heads_loads(tmp_path):
    """MLA never reads num_key_value_heads: its cache is the latent."""
    from simspec.catalog.tables import packaged_table

    raw = {k: v for k, v in packaged_table("models.yaml")["deepseek-v3"].items()}
    for key in ("num_key_value_heads", "hf_ids", "source"):
        raw.pop(key, None)
    model = load_model(_config(tmp_path, raw))
    assert model.kv_bytes_per_token == load_model("deepseek-v3").kv_bytes_per_token


def test_kv_heads_fewer_than_gpus_are_held_whole_on_each():
    """Qwen3-235B's 4 KV heads at tp 8: every GPU keeps one (q 4.19M + o 4.19M + k, v 1.05M a
    layer = 9.44M; 94 layers in bf16, 1.65 GiB), the KV cache side's rule."""
    model = load_model("qwen3-235b-a22b")
    parts = ParallelLayout(8).weight_parts(model)
    h, d = model.hidden_size, model.head_dim
    per_layer = 2 * h * 64 * d / 8 + 2 * h * d
    assert parts["attention"] == pytest.approx(94 * per_layer * 2)
    assert parts["attention"] / GIB == pytest.approx(1.65, abs=0.005)
    assert sum(parts.values()) == model.weight_bytes_per_gpu(8)
    assert model.kv_copy_params(4) == 0.0  # split evenly: nothing copied


def test_kv_heads_are_copied_only_in_the_layers_that_have_them():
    """QA: Qwen3-Next's 2 KV heads at tp 4 were copied in all 48 layers, its 36 Gated
    DeltaNet layers (no K/V heads) included."""
    model = load_model("qwen3-next-80b-a3b")
    assert model.attention_layer_count == 12 and model.kv_copy_params(4) > 0
    # the same shapes with every layer full attention: 36 more layers of copies, and none of
    # the Gated DeltaNet mixers' weight past an attention layer's (bf16: 2 bytes a weight)
    plain = model.model_copy(update={"linear_layers": ()})
    layout = ParallelLayout(4)
    more = layout.weight_parts(plain)["attention"] - layout.weight_parts(model)["attention"]
    copies, mixers = 36 * model.kv_copy_params(4), model._linear_mixer_excess / 4
    assert more == pytest.approx((copies - mixers) * 2, rel=1e-9)
    assert sum(layout.weight_parts(model).values()) == model.weight_bytes_per_gpu(4)


def test_an_uneven_expert_split_sizes_the_fullest_gpu(tmp_path):
    """60 experts over 8 GPUs: vLLM gives the first four 8 each (determine_expert_map)."""
    model = load_model("qwen3-30b-a3b").model_copy(update={"num_experts": 60})
    assert model.local_experts(8) == 8
    parts = ParallelLayout(8, 8).weight_parts(model)
    expected = model.moe_layers_in() * 8 * model.expert_params * model.stored_bytes("bf16")
    assert parts["routed experts"] == expected
    assert sum(parts.values()) == model.weight_bytes_per_gpu(8, 8)


def test_models_shows_a_stated_precision_and_kv_cache_dtype():
    facts = dict(model_facts("deepseek-v3", "h200", "vllm", None, "int4-w", "fp8"))
    assert facts["weights"] == "int4-w"
    assert facts["KV cache per token"].startswith("34.3 KiB in fp8")


def test_fp8_of_a_bf16_checkpoint_at_a_layout_a_block_scaled_release_cannot_load_is_said():
    """--precision fp8 on a bf16 checkpoint is not refused (online FP8 quantization loads at
    any tp), but where a 128 x 128 block-scaled FP8 release could not load, the footer says so
    (QA: qwen3-235b-a22b at tp=8 ran without a word, where minimax-m2's own FP8 checkpoint
    is refused at the same width)."""
    from simspec.catalog.hardware import load_engine
    from simspec.config import Deployment
    from simspec.studies.provenance import deployment_notes, fp8_blocks_note

    at = Deployment(model="qwen3-235b-a22b", tp=8, precision="fp8")
    notes = deployment_notes(at)
    assert any("192 a GPU" in n and "would not load here" in n for n in notes)
    vllm = load_engine("vllm")
    assert fp8_blocks_note(at.model_copy(update={"tp": 4}), vllm) is None
    assert fp8_blocks_note(at.model_copy(update={"ep": 8}), vllm) is None  # whole experts
    assert fp8_blocks_note(at.model_copy(update={"precision": "bf16"}), vllm) is None
