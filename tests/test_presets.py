"""Presets load, carry sources, and give the parameter counts the models are known by."""

import json

import pytest

from simspec.catalog.hardware import engine_ids, gpu_ids, load_engine, load_gpu, load_profile
from simspec.catalog.models import load_model, model_ids
from simspec.errors import InputError

REQUIRED_MODELS = [
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3.1-8b",
    "llama-3-70b",
    "llama-3.1-70b",
    "vicuna-7b",
    "vicuna-13b",
    "vicuna-33b",
    "qwen3-8b",
]


def test_every_required_model_gpu_and_profile_is_present_with_a_source():
    assert set(REQUIRED_MODELS) <= set(model_ids())
    assert {"h100_sxm", "h200", "a100_80gb"} <= set(gpu_ids())
    for m in model_ids():
        assert load_model(m).source
    for g in gpu_ids():
        assert load_gpu(g).source
        profile = load_profile(g)
        assert all(p.source for p in profile.params.values())
    for e in engine_ids():
        assert all(p.source for p in load_engine(e).params.values())


@pytest.mark.parametrize(
    ("model", "billions"),
    [
        ("llama-2-7b", 6.74),
        ("llama-2-13b", 13.0),
        ("llama-2-70b", 69.0),
        ("llama-3.1-8b", 8.03),
        ("llama-3.1-70b", 70.6),
        ("qwen3-8b", 8.19),
        # Qwen3 model cards: 14.8B and 32.8B parameters
        ("qwen3-14b", 14.8),
        ("qwen3-32b", 32.8),
        ("vicuna-33b", 32.5),
    ],
)
def test_parameter_counts_match_the_published_sizes(model, billions):
    assert load_model(model).num_params / 1e9 == pytest.approx(billions, rel=0.02)


def test_llama_3_1_8b_kv_cache_is_128_kib_per_token():
    # 32 layers x 8 KV heads x 128 dims x (K and V) x 2 bytes
    assert load_model("llama-3.1-8b").kv_bytes_per_token == 32 * 8 * 128 * 2 * 2


def test_hugging_face_config_json_loads_by_path(tmp_path):
    cfg = {
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "tie_word_embeddings": True,
        "max_position_embeddings": 131072,
        "_name_or_path": "my/llama-1b",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    shape = load_model(str(path))
    assert shape.head_dim == 64 and shape.num_key_value_heads == 8 and shape.id == "my/llama-1b"


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"hidden_size": 10}'])
def test_broken_config_json_is_an_input_error_naming_model(tmp_path, content):
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(InputError) as exc:
        load_model(str(path))
    assert exc.value.field == "model"


def test_unknown_presets_name_the_field():
    with pytest.raises(InputError, match="gpu"):
        load_gpu("tpu_v9")
    with pytest.raises(InputError, match="model"):
        load_model("gpt-17")


NEWER_GPUS = ("b200", "gb200", "h100_pcie", "h20", "l40s", "mi300x", "mi355x")


def test_the_newer_gpus_load_with_a_source_and_a_transferred_profile():
    """Newer GPUs: datasheet presets whose profiles are transferred, and say so."""
    assert set(NEWER_GPUS) <= set(gpu_ids())
    for g in NEWER_GPUS:
        gpu = load_gpu(g)
        assert gpu.source and gpu.arch
        profile = load_profile(g)
        assert {p.basis for p in profile.params.values()} == {"transferred"}
        assert profile.provenance["note"]
        assert profile.transferred_note().startswith(f"{g} hardware profile transferred")
    assert load_profile("h100_sxm").transferred_note() == ""  # every operator measured there
    assert "attention from h100_sxm" in load_profile("a100_80gb").transferred_note()
    # the operators transferred by name, and the GPU's own kernel tables beside them (QA: "every
    # operator from h100_sxm" where the MoE kernels and all-reduce curves were H200's own)
    note = load_profile("h200").transferred_note()
    assert "(gemm, attention, elementwise, allreduce from h100_sxm)" in note
    assert ("its MoE expert kernels, MLA decode attention, engine all-reduce are timed from "
            "tables measured on it; MoE kernels no table of this GPU covers") in note  # fmt: skip
    assert "measured on it" not in load_profile("h20").transferred_note()  # no table of its own


def test_tensorrt_llm_runs_on_nvidia_gpus_only():
    from simspec.config import Scenario
    from simspec.engine.build import setup_replica
    from simspec.studies.model_facts import model_facts

    why = "engine: engine trtllm does not run on mi300x"
    with pytest.raises(InputError, match=why):
        setup_replica(Scenario(model="qwen3-30b-a3b", gpu="mi300x", engine="trtllm"))
    with pytest.raises(InputError, match=why):
        model_facts("qwen3-30b-a3b", "mi300x", "trtllm")
    assert load_engine("trtllm").gpu_archs and not load_engine("vllm").gpu_archs


def test_every_gpu_states_its_per_dtype_peaks_explicitly():
    """fp8/int8/fp4 are written for every GPU (null where the tensor cores lack the dtype), so a
    missing number is never read as "none"; FP8 is absent exactly on Ampere, and where present
    it is the datasheets' 2x of bf16."""
    from importlib import resources

    import yaml

    raw = yaml.safe_load(resources.files("simspec").joinpath("data", "gpus.yaml").read_text())
    for g in gpu_ids():
        assert {"fp8_dense_flops", "int8_dense_flops", "fp4_dense_flops", "arch"} <= set(raw[g])
        gpu = load_gpu(g)
        assert (gpu.fp8_dense_flops is None) == (gpu.arch == "ampere"), g
        if gpu.fp8_dense_flops:
            # L40S: 733 / 362.05 = 2.02 as printed
            assert gpu.fp8_dense_flops / gpu.bf16_dense_flops == pytest.approx(2, rel=0.03), g
        assert gpu.int8_dense_flops, g
        # INT8 is at least bf16 on every GPU but Blackwell Ultra, whose datasheet cut the INT8
        # path (B300/GB300: ~0.15 POPS dense against 2.25-2.5 PF bf16; gpus.yaml quotes it)
        cut = "Blackwell Ultra cut the INT8" in raw[g]["source"] or g == "gb300"
        assert cut or gpu.int8_dense_flops >= gpu.bf16_dense_flops, g
