"""What engines refuse or pick themselves by the target's class and release: EAGLE targets
(simspec/data/draft_targets.yaml), vLLM's data-parallel drafting before 0.12.0, and the FP8
KV cache engines choose for DeepSeek's sparse attention."""

import pytest

from simspec.catalog.methods import draft_target_refusal, draft_target_since
from simspec.catalog.precision import engine_kv_cache_dtype
from simspec.config import Deployment, MethodConfig, Scenario
from simspec.engine.build import setup_replica
from simspec.errors import InputError
from simspec.studies.provenance import release_notes

EAGLE3 = MethodConfig(name="eagle3", k=3, acceptance={"alpha": 0.7})


def test_eagle3_is_refused_on_a_target_class_without_the_interface():
    """vLLM loads EAGLE-3 only on a SupportsEagle3 class (GPUModelRunner.load_model: "Model
    does not support EAGLE3 interface"), none for Mixtral or GLM-4.5 through 0.34.0; SGLang
    0.5.10's Mixtral defines no set_eagle3_layers_to_capture."""
    for engine in ("vllm", "sglang"):
        sc = Scenario(model="mixtral-8x7b", tp=2, engine=engine, method=EAGLE3)
        with pytest.raises(InputError, match="MixtralForCausalLM") as err:
            setup_replica(sc)
        assert err.value.field == "method"
    assert draft_target_refusal("eagle3", "vllm", "Glm4MoeForCausalLM")
    assert draft_target_refusal("eagle3", "sglang", "Glm4MoeForCausalLM") is None
    assert draft_target_refusal("eagle3", "trtllm", "MixtralForCausalLM") is None  # unread
    assert draft_target_refusal("mtp", "vllm", "Glm4MoeForCausalLM") is None
    assert draft_target_refusal("eagle3", "vllm", "SomeUsersForCausalLM") is None  # unchecked


def test_sglang_runs_no_eagle_head_on_a_class_without_its_embedding_and_lm_head():
    """EAGLEWorker takes get_embed_and_head() from the target's class, which Mixtral's lacks in
    SGLang 0.5.10 (QA: eagle1 1.21x and eagle2 1.34x predicted); vLLM's EAGLE-1 is unchecked."""
    for name in ("eagle1", "eagle2"):
        method = MethodConfig(name=name, k=3, acceptance={"alpha": 0.7})
        sc = Scenario(model="mixtral-8x7b", tp=2, engine="sglang", method=method)
        with pytest.raises(InputError, match="MixtralForCausalLM"):
            setup_replica(sc)
        assert draft_target_refusal(name, "sglang", "LlamaForCausalLM") is None
    assert draft_target_refusal("eagle1", "vllm", "MixtralForCausalLM") is None


def test_a_target_class_that_gained_eagle3_later_says_from_which_release():
    assert draft_target_since("eagle3", "vllm", "Qwen3NextForCausalLM") == "0.24.0"
    assert draft_target_since("eagle3", "vllm", "Qwen3MoeForCausalLM") == "0.11.1"
    assert draft_target_since("eagle3", "vllm", "LlamaForCausalLM") is None  # the oldest read
    deploy = Deployment(model="qwen3-next-80b-a3b", tp=4)
    (note,) = release_notes(deploy, [EAGLE3])
    assert "before 0.24.0" in note and "Qwen3NextForCausalLM" in note


def test_an_mtp_drafter_vllm_runs_without_cuda_graphs_is_said_to_make_an_upper_bound():
    """QA: vLLM captures a drafter only where its class carries @support_torch_compile:
    Glm4MoeMTP in no wheel read (0.11.0-0.20.0), DeepSeekMTP from 0.11.1; simspec prices both
    as graphed drafters."""
    mtp = MethodConfig(name="mtp", k=3, acceptance={"alpha": 0.7})
    (glm,) = release_notes(Deployment(model="glm-4.5", gpu="h200", tp=8), [mtp])
    assert "Glm4MoeMTP" in glm and "every release read" in glm and "upper bound" in glm
    (ds,) = release_notes(Deployment(model="deepseek-v3", gpu="h200", tp=8), [mtp])
    assert "DeepSeekMTP" in ds and "before 0.11.1" in ds
    # a compiled drafter, another engine's drafter, or vLLM V0's worker: nothing said
    assert release_notes(Deployment(model="qwen3-next-80b-a3b", gpu="h200", tp=4), [mtp]) == []
    sglang = Deployment(model="glm-4.5", gpu="h200", tp=8, engine="sglang")
    assert release_notes(sglang, [mtp]) == []
    v0 = Deployment(model="deepseek-v3", gpu="h200", tp=8, engine="vllm-v0")
    assert not any("CUDA graphs" in n for n in release_notes(v0, [mtp]))


def test_vllm_data_parallel_drafting_of_several_tokens_is_said_to_need_0_12():
    """EagleProposer.dummy_run ran one drafter forward on an idle DP rank until 0.12.0 (PR
    #26086: the ranks' all-reduces fall out of step and hang at K > 1)."""
    deploy = Deployment(model="qwen3-30b-a3b", tp=4, dp=4, ep=4)
    notes = release_notes(deploy, [EAGLE3])
    assert any("before 0.12.0 hang" in n for n in notes)
    one = MethodConfig(name="eagle3", k=1, acceptance={"alpha": 0.7})
    assert not any("hang" in n for n in release_notes(deploy, [one]))
    assert not any(
        "hang" in n for n in release_notes(deploy.model_copy(update={"dp": 1}), [EAGLE3])
    )


def test_deepseek_sparse_attention_caches_fp8_where_the_engine_picks_it():
    """vLLM turns auto into fp8_ds_mla for DeepseekV32ForCausalLM; SGLang picks fp8_e4m3 on
    SM 10+ only (QA: bf16 on vLLM, 1.63x too few tokens)."""
    assert engine_kv_cache_dtype("auto", "vllm", True, "hopper") == "fp8"
    assert engine_kv_cache_dtype("auto", "sglang", True, "hopper") == "auto"
    assert engine_kv_cache_dtype("auto", "sglang", True, "blackwell") == "fp8"
    assert engine_kv_cache_dtype("bf16", "vllm", True, "hopper") == "bf16"
    assert engine_kv_cache_dtype("auto", "vllm", False, "hopper") == "auto"
    auto = setup_replica(Scenario(model="deepseek-v3.2", gpu="h200", tp=8)).memory
    fp8 = setup_replica(Scenario(model="deepseek-v3.2", gpu="h200", tp=8, kv_cache_dtype="fp8"))
    assert auto.num_blocks == fp8.memory.num_blocks


def test_simspec_models_says_the_kv_dtype_it_prices():
    from typer.testing import CliRunner

    from simspec.cli.main import app

    out = CliRunner().invoke(app, ["models", "deepseek-v3.2", "--gpu", "h200", "--tp", "8"])
    assert out.exit_code == 0
    assert "in bf16" not in out.output and "KV cache per token: 46.9 KiB in fp8" in out.output


def test_vllm_v0_refuses_what_its_releases_never_ran():
    """0.9.2, V0's last speculating release: no suffix decoding (0.11.1, V1), EAGLE-3 on Llama
    targets only (QA: both ran on vllm-v0 with no word)."""
    from simspec.catalog.methods import engine_refuses

    assert "0.11.1" in (engine_refuses("suffix", "vllm-v0") or "")
    assert engine_refuses("suffix", "vllm") is None
    assert draft_target_refusal("eagle3", "vllm-v0", "Qwen3ForCausalLM")
    assert draft_target_refusal("eagle3", "vllm-v0", "LlamaForCausalLM") is None


def test_mtp_on_a_model_without_mtp_layers_says_so_before_any_engine_shape():
    """QA: on SGLang the refusal spoke of the engine's picked tree and asked for --k, which
    would only have led to this reason."""
    from simspec.catalog.methods import preset_method

    with pytest.raises(InputError, match="declares no multi-token-prediction layers"):
        preset_method("mtp", target="llama-3.1-8b", engine="sglang")
