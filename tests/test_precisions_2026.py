"""NVFP4 on Blackwell, MXFP4 as the engines run it, and the Blackwell Ultra presets (B300,
GB300): every expected number is read from simspec/data (precision.yaml, gpus.yaml,
moe_kernels.yaml), none is tuned here."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from simspec.catalog.hardware import gpu_ids, load_gpu, load_profile
from simspec.catalog.hf_config import read_config
from simspec.catalog.kernel_tables import moe_kernel_fit
from simspec.catalog.models import bytes_per_weight, load_model
from simspec.catalog.precision import (
    compute_flops,
    effective_precision,
    load_precision,
    precision_note,
)
from simspec.cli.main import app
from simspec.config import Scenario
from simspec.engine.build import build_cost_model
from simspec.errors import InputError
from simspec.ui.choices import precision_choices
from tests.refusals import one_error

R1 = load_model("deepseek-r1")


def r1_cost(precision: str, gpu: str = "b200", engine: str = "vllm"):
    return build_cost_model(
        Scenario(model="deepseek-r1", gpu=gpu, tp=8, engine=engine, precision=precision)
    )


# -- NVFP4 ------------------------------------------------------------------------------------
def test_nvfp4_weights_take_four_bits_plus_an_fp8_scale_per_sixteen():
    assert load_precision("nvfp4").weight_bytes == (4 + 8 / 16) / 8 == 0.5625
    assert bytes_per_weight("nvfp4") == 0.5625


def test_nvfp4_multiplies_at_the_fp4_tensor_peak_on_blackwell():
    for gpu in ("b200", "gb200", "b300", "gb300"):
        spec = load_gpu(gpu)
        assert effective_precision(load_precision("nvfp4"), spec).name == "nvfp4"
        assert compute_flops(load_precision("nvfp4"), spec) == spec.fp4_dense_flops


def test_nvfp4_is_refused_on_hopper_under_an_engine_without_a_weight_only_kernel():
    with pytest.raises(InputError, match="^precision: h100_sxm .hopper. has no FP4 tensor cores"):
        r1_cost("nvfp4", gpu="h100_sxm", engine="sglang")


def test_nvfp4_on_hopper_runs_weight_only_under_vllm_and_says_so():
    cm = r1_cost("nvfp4", gpu="h100_sxm")
    assert cm.precision is not None and cm.precision.compute == "bf16"
    assert cm.precision.weight_bytes == 0.5625
    note = precision_note(load_precision("nvfp4"), load_gpu("h100_sxm"))
    assert "weight-only (W4A16" in note and "FP4 Marlin" in note


def test_nvfp4_is_refused_on_amd_gpus_where_no_kernel_runs_it():
    for gpu in ("mi300x", "mi355x"):
        with pytest.raises(InputError, match="no kernel runs nvfp4 weight-only"):
            effective_precision(load_precision("nvfp4"), load_gpu(gpu))
    # CDNA 4 has FP4 tensor cores: they take MXFP4, not NVFP4 (QA: "has no FP4 tensor cores")
    with pytest.raises(InputError, match=r"FP4 tensor cores do not take nvfp4 \(it runs natively"):
        effective_precision(load_precision("nvfp4"), load_gpu("mi355x"))


def test_fp8_weight_only_runs_under_the_engines_with_an_fp8_marlin_kernel_only():
    """vLLM and SGLang run an FP8 checkpoint weight-only on Ampere (FP8 Marlin);
    TensorRT-LLM has no FP8 there (QA: it ran, said to be vLLM's kernel)."""
    from simspec.catalog.precision import check_engine_runs

    fp8, a100 = load_precision("fp8"), load_gpu("a100_80gb")
    for engine in ("vllm", "vllm-v0", "sglang"):
        check_engine_runs(fp8, a100, engine, "precision")
    with pytest.raises(InputError, match="engine trtllm has no weight-only kernel") as err:
        check_engine_runs(fp8, a100, "trtllm", "precision")
    assert "h100_sxm" in str(err.value) and "b200" in str(err.value)


def test_the_cli_refusal_is_one_line_naming_the_precision_flag():
    args = ["sweep", "--model", "llama-3.1-8b", "--gpu", "h100_sxm", "--engine", "sglang"]
    result = CliRunner().invoke(app, [*args, "--precision", "nvfp4", "--batch-sizes", "1"])
    one_error(result, "error: precision:", "nvfp4", "b200")


def test_an_nvfp4_moe_on_b200_reads_the_measured_nvfp4_kernels():
    for engine, kernel in (
        (
            "vllm",
            "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_trtllm_trtllmnvfp4expertsmonolithic",
        ),
        ("sglang", "sglang_flashinfer_trtllm_moe"),
    ):
        cm = r1_cost("nvfp4", engine=engine)
        fit = cm.moe_kernel(cm.experts_precision_of(R1), R1)
        assert fit is not None and fit.kernel == kernel
        assert fit.compute == "fp4" and fit.weight_bytes == 0.5625


@pytest.mark.parametrize("tokens", [1, 8, 32])
def test_nvfp4_experts_beat_fp8_experts_in_a_memory_bound_decode_step_on_b200(tokens):
    nvfp4, fp8 = r1_cost("nvfp4"), r1_cost("fp8")
    assert nvfp4.routed_experts_time(R1, tokens) < fp8.routed_experts_time(R1, tokens)


def test_dense_nvfp4_gemms_follow_the_published_kernel_ratios_not_the_roofline():
    """FlashInfer's B200 reading at M = 1 and vLLM PR #20578's table from M = 512; the table's
    rows below 512 were its pre-tuning kernel's, slower than bf16 (QA: a dense NVFP4 model
    decoded 1.6-3x slower than at fp8), and are left out."""
    curve = load_precision("nvfp4").curve("blackwell")
    assert curve is not None
    assert curve.ratio(1) == pytest.approx(1.294)
    assert curve.ratio(512) == pytest.approx(1569.117801 / 1284.375329)
    assert 1 < curve.ratio(64) < curve.ratio(4096)  # between the readings, never below bf16


# -- checkpoints ------------------------------------------------------------------------------
def llama(**quant: object) -> dict:
    base = {
        "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
        "vocab_size": 100, "max_position_embeddings": 512,
    }  # fmt: skip
    return {**base, "quantization_config": quant}


def test_a_modelopt_nvfp4_checkpoint_is_read_as_nvfp4():
    fields = read_config(llama(quant_method="modelopt", quant_algo="NVFP4", ignore=["lm_head"]))
    assert (fields["weight_dtype"], fields["expert_weight_dtype"]) == ("nvfp4", None)


def test_the_older_hf_quant_config_form_is_read_too():
    q = {"quant_method": "modelopt", "quantization": {"quant_algo": "FP8"}}
    assert read_config(llama(**q))["weight_dtype"] == "fp8"


def test_a_modelopt_checkpoint_that_keeps_attention_unquantised_quantises_the_experts():
    moe = {
        **llama(quant_method="modelopt", quant_algo="NVFP4", ignore=["model.layers.*.self_attn*"]),
        "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2,
    }  # fmt: skip
    fields = read_config(moe)
    assert (fields["weight_dtype"], fields["expert_weight_dtype"]) == ("bf16", "nvfp4")


def test_an_unmodelled_modelopt_algorithm_names_its_key():
    with pytest.raises(InputError, match=r"^model\.quantization_config\.quant_algo: .*W4A8_AWQ"):
        read_config(llama(quant_method="modelopt", quant_algo="W4A8_AWQ"))


@pytest.mark.parametrize(
    ("quant", "key"),
    [
        # ModelOpt keeping MLPs unquantised (its attention-only list is the experts-only form)
        (
            {"quant_method": "modelopt", "quant_algo": "NVFP4",
             "exclude_modules": ["lm_head", "model.layers.0.mlp*", "*down_proj*"]},
            "exclude_modules",
        ),
        # a compressed-tensors scheme targeting the MLPs alone leaves attention in bf16
        (
            {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
                "targets": ["re:.*mlp.*"], "weights": {"num_bits": 4, "type": "int"}}}},
            "config_groups.group_0.targets",
        ),
        # 2:4 sparse weights
        (
            {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
                "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float"}}},
             "sparsity_config": {"format": "sparse-24-bitmask", "sparsity_structure": "2:4"}},
            "sparsity_config",
        ),
        # GPTQ's per-module bits
        (
            {"quant_method": "gptq", "bits": 4, "group_size": 128,
             "dynamic": {"+:.*self_attn.*": {"bits": 8}}},
            "dynamic",
        ),
        # MXFP4 on every linear layer (read as nvfp4), and W4A8 int (read as W4A16)
        (
            {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 4, "type": "float", "group_size": 32}}}},
            "config_groups",
        ),
        (
            {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
                "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int"},
                "input_activations": {"num_bits": 8, "type": "int"}}}},
            "config_groups",
        ),
    ],
)  # fmt: skip
def test_a_checkpoint_quantising_some_layers_its_own_way_is_refused_by_its_key(quant, key):
    """QA: each of these was priced at one precision for every linear layer, without a word
    (ModelOpt's list read for attention only; targets, sparsity and "+:" overrides unread)."""
    with pytest.raises(InputError, match=rf"^model\.quantization_config\.{key}: "):
        read_config(llama(**quant))


def test_a_modelopt_fp8_kv_cache_is_read_and_said_where_auto_runs_bf16(tmp_path):
    """QA: kv_cache_quant_algo was ignored; vLLM serves such a checkpoint's KV in FP8 by
    default, where simspec's auto is bf16: the models table and every footer say so."""
    from simspec.config import Deployment
    from simspec.studies.provenance import kv_quant_note

    q = {"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}
    assert read_config(llama(**q))["kv_cache_quant"] == "fp8"
    assert "kv_cache_quant" not in read_config(llama(quant_method="modelopt", quant_algo="FP8"))
    assert kv_quant_note(Deployment()) is None  # a preset without one
    path = tmp_path / "config.json"
    path.write_text(json.dumps(llama(**q)))
    assert "--kv-cache-dtype fp8" in (kv_quant_note(Deployment(model=str(path))) or "")
    assert kv_quant_note(Deployment(model=str(path), kv_cache_dtype="fp8")) is None


# -- MXFP4 and FP8 as they were ---------------------------------------------------------------
def test_gpt_oss_mxfp4_experts_on_h200_are_priced_as_before():
    """W4A16 on Hopper: the int4-w form and the same measured MXFP4 kernel as before."""
    cm = build_cost_model(Scenario(model="gpt-oss-120b", gpu="h200"))
    gpt_oss = load_model("gpt-oss-120b")
    experts = cm.experts_precision_of(gpt_oss)
    assert experts is not None and experts.name == "int4-w"
    fit = moe_kernel_fit("h200", "vllm", "int4-w", "gpt_oss")
    assert fit is not None and cm.moe_kernel(experts, gpt_oss) == fit
    assert fit.kernel == "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"


def test_fp8_is_the_block_scaled_kernel_family_for_moe_experts():
    fit = moe_kernel_fit("b200", "vllm", "fp8")
    assert fit is not None and fit.weight_bytes == pytest.approx(1 + 4 / (128 * 128), abs=1e-6)


# -- Blackwell Ultra --------------------------------------------------------------------------
@pytest.mark.parametrize("gpu", ["b300", "gb300"])
def test_blackwell_ultra_presets_load_with_a_source_and_a_transferred_profile(gpu):
    assert gpu in gpu_ids()
    spec = load_gpu(gpu)
    assert spec.arch == "blackwell" and spec.source
    assert spec.fp4_dense_flops is not None and spec.fp4_dense_flops > 1.4 * 9.0e15
    assert spec.memory_bytes > load_gpu("b200").memory_bytes
    profile = load_profile(gpu)
    assert {p.basis for p in profile.params.values()} == {"transferred"}
    assert profile.transferred_note().startswith(f"{gpu} hardware profile transferred")


@pytest.mark.parametrize("gpu", ["b300", "gb300"])
def test_blackwell_ultra_runs_a_tiny_nvfp4_sweep(gpu):
    args = ["sweep", "--model", "llama-3.1-8b", "--gpu", gpu, "--precision", "nvfp4"]
    result = CliRunner().invoke(app, [*args, "--methods", "eagle3", "--batch-sizes", "1",
                                      "--requests", "4"])  # fmt: skip
    assert result.exit_code == 0, result.output[-800:]
    assert "nvfp4 weights" in result.output


def test_the_explorer_offers_nvfp4_only_where_a_kernel_runs_it():
    assert "nvfp4" in precision_choices("b300")
    assert "nvfp4" in precision_choices("h100_sxm")  # vLLM's weight-only Marlin path
    assert "nvfp4" not in precision_choices("mi300x")
    assert "nvfp4" not in precision_choices("h100_sxm", "sglang")
    assert "nvfp4" in precision_choices("b200", "sglang")


def test_a_native_nvfp4_run_is_told_what_its_dense_kernel_speeds_rest_on():
    note = precision_note(load_precision("nvfp4"), load_gpu("b200"))
    assert "20578" in note and "1732" in note and "no measured decode-size cell" in note
    assert precision_note(load_precision("fp8"), load_gpu("h100_sxm")) == ""


def test_engine_spellings_in_a_config_name_simspecs_field():
    """QA: "quantization: Extra inputs are not permitted" named no field; "fp8_inc" was told
    only auto, bf16 or fp8."""
    from pydantic import ValidationError

    from simspec.config import Scenario
    from simspec.errors import validation_message

    with pytest.raises(ValidationError) as err:
        Scenario.model_validate({"quantization": "fp8"})
    assert "simspec calls it precision" in validation_message(err.value)
    with pytest.raises(ValidationError) as err:
        Scenario.model_validate({"kv_cache_dtype": "fp8_inc"})
    text = validation_message(err.value)
    assert text.startswith("kv_cache_dtype: choose auto, bf16, fp8, bfloat16, fp8_e4m3")
    assert Scenario.model_validate({"kv_cache_dtype": "fp8_e5m2"}).kv_cache_dtype == "fp8"


def test_an_nvfp4_deepseek_checkpoint_keeps_its_mtp_module_in_bf16():
    """NVIDIA's NVFP4 DeepSeek checkpoints exclude layer 61 (the MTP module) from the
    quantization: SGLang runs it as a bf16 nextn layer (QA: priced at NVFP4, 0.79 GiB a GPU
    where bf16 holds ~2.7)."""
    from simspec.config import AcceptanceConfig, MethodConfig, Scenario
    from simspec.engine.build import setup_replica

    mtp = MethodConfig(name="mtp", k=1, acceptance=AcceptanceConfig(alpha=0.8))

    def draft(precision: str) -> float:
        sc = Scenario(model="deepseek-r1", gpu="b200", tp=8, precision=precision, method=mtp)
        return setup_replica(sc).memory.draft_bytes

    assert draft("nvfp4") == pytest.approx(2 * draft("fp8"), rel=0.05)  # bf16 against fp8


def test_a_gptq_checkpoint_that_quantises_its_lm_head_is_priced_so(tmp_path):
    """GPTQ and AWQ configs may quantise the LM head too ("lm_head": true), which vLLM's
    GPTQ(-Marlin) and AWQ-Marlin configs read as lm_head_quantized: the head is stored and
    read at int4 (QA: priced in bf16, Llama-3.1-8B's 1.05 GB head doubled an int4 model's
    non-layer bytes). Without the key, or re-stated by --precision, it stays bf16."""
    from simspec.config import Scenario
    from simspec.engine.build import build_cost_model
    from simspec.engine.costmodel import BatchShape

    shape = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
    }  # fmt: skip
    gptq = {"quant_method": "gptq", "bits": 4, "group_size": 128}
    models = {}
    for head in (True, False):
        path = tmp_path / f"head_{head}.json"
        path.write_text(json.dumps({**shape, "quantization_config": {**gptq, "lm_head": head}}))
        models[head] = load_model(str(path))
    quantised, plain = models[True], models[False]
    assert quantised.lm_head_quantized and not plain.lm_head_quantized
    saved = plain.weight_bytes_per_gpu() - quantised.weight_bytes_per_gpu()
    per_weight = 2 - quantised.stored_bytes("int4-w")
    assert saved == pytest.approx(128256 * 4096 * per_weight)
    step = BatchShape.uniform(8, 1, 8 * 1000.0, 8)

    def lm_head_s(model, **kw) -> float:
        cost = build_cost_model(Scenario(model=str(tmp_path / "x.json"), **kw), target=model)
        return cost.forward(model, step).lm_head_s

    (tmp_path / "x.json").write_text(json.dumps(shape))
    assert lm_head_s(quantised) < 0.5 * lm_head_s(plain)
    # re-stated at another precision, the head is bf16 again
    assert lm_head_s(quantised, precision="fp8") == pytest.approx(lm_head_s(plain))
    no_head = read_config(llama(quant_method="awq", bits=4, group_size=128))
    assert "lm_head_quantized" not in no_head


def test_an_eagle_head_sharing_a_quantised_lm_head_reads_it_quantised(tmp_path):
    """EAGLE-1/2 heads compute their logits with the target's own LM head (vLLM EagleProposer
    shares lm_head; SGLang's draft takes the target's head): where a GPTQ checkpoint quantises
    it, every draft step reads it at int4 (QA: 335.6 us for the head against 153.7 for the
    target at batch 8). An EAGLE-3 head's own 32k head stays bf16."""
    from simspec.catalog.hardware import load_engine
    from simspec.config import AcceptanceConfig, MethodConfig, Scenario
    from simspec.engine.build import build_cost_model
    from simspec.engine.costmodel import BatchShape
    from simspec.engine.speculators import build_speculator

    shape = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
        "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128,
                                "lm_head": True},
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(shape))
    target = load_model(str(path))
    step = BatchShape.uniform(8, 1, 8 * 1000.0, 8)
    times = {}
    for name in ("eagle1", "eagle3"):
        sc = Scenario(model=str(path), method={"name": name})
        cost = build_cost_model(sc, target=target)
        cfg = MethodConfig(name=name, acceptance=AcceptanceConfig(alpha=0.6))
        spec = build_speculator(cfg, target, cost, load_engine("vllm"))
        times[name] = cost.forward(spec.head, step).lm_head_s
        times["target"] = cost.forward(target, step).lm_head_s
    assert times["eagle1"] == pytest.approx(times["target"])
    bf16_32k = times["eagle3"]
    assert bf16_32k > 0 and times["eagle1"] < 0.5 * bf16_32k * 128256 / 32000
