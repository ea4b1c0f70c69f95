"""The MoE families of 2025-26 read from their own config keys: Kimi-K2.5 (a multimodal config
nesting a DeepSeek-V3-style text model), GLM-4.5 and GLM-4.5-Air (MTP layers), MiniMax-M2
(all-MoE, full attention) and Ling-flash-2.0 (BailingMoE-V2). Each published config.json
(tests/fixtures/hf_configs, sources in SOURCES.md) reads to its preset and to the parameter
counts its makers publish, and what simspec cannot run is refused naming why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simspec.catalog.hf_config import read_config
from simspec.catalog.methods import cannot_draft_for
from simspec.catalog.models import load_model
from simspec.cli.main import app
from simspec.errors import InputError
from tests.refusals import one_error

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"
runner = CliRunner()


def fixture(name: str):
    return load_model(str(FIXTURES / name / "config.json"))


def without_embeddings(m) -> int:
    """Active weights without the embedding table and LM head: the count Z.ai, MiniMax and
    inclusionAI's "non-embedding" figure give."""
    return m.active_params - m.embedding_params * (1 if m.tie_word_embeddings else 2)


# -- published sizes ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("folder", "total", "active", "active_counts_embeddings"),
    [
        # Kimi K2 report (arXiv 2507.20534), its comparison with DeepSeek-V3: 1.04T total,
        # 32.6B activated (Kimi-K2.5 is Kimi-K2-Base continued; the vision tower left out)
        ("Kimi-K2.5", 1.04e12, 32.6e9, True),
        # transformers docs model_doc/glm4_moe: 355B total, 32B active; 106B / 12B for Air
        ("GLM-4.5", 355e9, 32e9, False),
        ("GLM-4.5-Air", 106e9, 12e9, False),
        # transformers docs model_doc/minimax_m2 and vLLM's recipe: 230B total, 10B active
        ("MiniMax-M2", 230e9, 10e9, False),
        # Ling-flash-2.0 model card: 6.1B activated, 4.8B of them non-embedding; its total is
        # the checkpoint's count on the Hub (BF16 102,889,697,280), the card rounding it to 100B
        ("Ling-flash-2.0", 102_889_697_280, 6.1e9, True),
    ],
)
def test_each_family_config_reads_to_its_published_sizes_within_two_percent(
    folder, total, active, active_counts_embeddings
):
    m = fixture(folder)
    assert m.num_params == pytest.approx(total, rel=0.02)
    counted = m.active_params if active_counts_embeddings else without_embeddings(m)
    assert counted == pytest.approx(active, rel=0.02)


def test_ling_flash_widths_give_the_checkpoints_exact_parameter_count():
    """The Hub's record of inclusionAI/Ling-flash-2.0: BF16 102,889,697,280 parameters. The
    widths give it to the parameter once the RMSNorm weights simspec leaves out are added:
    two per layer of hidden_size, q and k norms of head_dim, and the final norm."""
    m = load_model("ling-flash-2.0")
    norms = m.num_hidden_layers * (2 * m.hidden_size + 2 * m.head_dim) + m.hidden_size
    assert m.num_params + norms == 102_889_697_280
    assert without_embeddings(m) == pytest.approx(4.8e9, rel=0.02)  # the card's non-embedding


@pytest.mark.parametrize(
    ("folder", "preset"),
    [
        ("Kimi-K2.5", "kimi-k2.5"),
        ("GLM-4.5", "glm-4.5"),
        ("GLM-4.5-Air", "glm-4.5-air"),
        ("MiniMax-M2", "minimax-m2"),
        ("Ling-flash-2.0", "ling-flash-2.0"),
    ],
)
def test_each_published_config_reads_as_its_preset(folder, preset):
    ignore = {"id", "source", "hf_ids", "model_type"}
    read = fixture(folder).model_dump(exclude=ignore)
    assert read == load_model(preset).model_dump(exclude=ignore)


# -- Kimi-K2.5 ---------------------------------------------------------------------------------
def test_kimi_k25_is_read_as_its_text_model_without_the_vision_tower():
    k25, k2 = load_model("kimi-k2.5"), load_model("kimi-k2")
    assert k25.num_params == k2.num_params  # the same 61-layer, 384-expert MLA text model
    assert k25.max_position_embeddings == 262144
    flat = json.loads((FIXTURES / "Kimi-K2.5" / "config.json").read_text())
    flat = {**flat["text_config"], "model_type": "kimi_k25"}
    assert read_config(flat)["num_experts"] == 384  # written flat, read the same way


def test_kimi_k25_int4_checkpoint_quantises_the_routed_experts_only():
    """Its compressed-tensors ignore list keeps attention, shared experts, dense MLPs and the
    head in bf16: the experts are int4, the rest is not."""
    m = load_model("kimi-k2.5")
    assert (m.weight_dtype, m.expert_weight_dtype) == ("bf16", "int4-w")
    assert m.weight_bytes_per_gpu(tp=8) < 0.4 * load_model("kimi-k2").num_params * 2 / 8


def test_a_compressed_tensors_checkpoint_quantising_attention_too_stays_whole_model_int4():
    raw = json.loads((FIXTURES / "Kimi-K2.5" / "config.json").read_text())["text_config"]
    raw["quantization_config"]["ignore"] = ["lm_head"]
    assert (read_config(raw)["weight_dtype"], read_config(raw)["expert_weight_dtype"]) == (
        "int4-w",
        None,
    )


# -- GLM-4.5 -----------------------------------------------------------------------------------
def test_glm_4_5_air_has_one_dense_layer_no_qk_norm_and_an_mtp_layer():
    m = load_model("glm-4.5-air")
    assert (m.num_hidden_layers, len(m.moe_layers), m.moe_layers[0]) == (46, 45, 1)
    assert not m.qk_norm and load_model("glm-4.5").qk_norm
    assert m.num_nextn_predict_layers == 1
    assert cannot_draft_for("mtp", "glm-4.5-air") is None
    assert cannot_draft_for("mtp", "glm-4.5") is None


# -- MiniMax-M2 --------------------------------------------------------------------------------
def test_minimax_m2_is_all_moe_full_attention_with_qk_norm():
    m = load_model("minimax-m2")
    assert m.moe_layers == tuple(range(62)) and not m.sliding_layers
    assert (m.num_experts, m.num_experts_per_tok, m.moe_intermediate_size) == (256, 8, 1536)
    assert m.shared_expert_intermediate_size == 0 and m.qk_norm
    assert m.weight_dtype == "fp8"


def test_minimax_m2_mtp_modules_are_refused_as_drafts_naming_why():
    why = cannot_draft_for("mtp", "minimax-m2")
    assert why and "num_mtp_modules 3" in why and "vLLM" in why
    result = runner.invoke(
        app,
        [
            "sweep",
            "--model",
            "minimax-m2",
            "--gpu",
            "h200",
            "--tp",
            "8",
            "--ep",
            "8",
            "--methods",
            "mtp",
        ],
    )
    one_error(result, "methods.mtp", "num_mtp_modules")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"attn_type_list": [0] + [1] * 61}, "model.attn_type_list"),  # MiniMax-01 lightning
        ({"shared_intermediate_size": 1536}, "model.shared_intermediate_size"),
        ({"qk_norm_type": "per_head"}, "model.qk_norm_type"),
    ],
)
def test_minimax_m2_keys_it_cannot_run_are_refused_by_name(change, field):
    raw = {**json.loads((FIXTURES / "MiniMax-M2" / "config.json").read_text()), **change}
    with pytest.raises(InputError) as err:
        read_config(raw)
    assert err.value.field == field


# -- Ling-flash-2.0 (BailingMoE-V2) ------------------------------------------------------------
def test_ling_flash_has_one_dense_layer_a_shared_expert_and_no_mtp_layer():
    m = load_model("ling-flash-2.0")
    assert m.moe_layers == tuple(range(1, 32))
    assert m.shared_expert_intermediate_size == 1024 and m.qk_norm
    assert "num_nextn_predict_layers" in (cannot_draft_for("mtp", "ling-flash-2.0") or "")


def test_bailing_shared_experts_take_their_own_width_when_the_config_gives_one():
    raw = json.loads((FIXTURES / "Ling-flash-2.0" / "config.json").read_text())
    raw.update(num_shared_experts=2, moe_shared_expert_intermediate_size=512)
    assert read_config(raw)["shared_expert_intermediate_size"] == 1024


def test_bailing_use_qk_norm_must_be_a_boolean():
    raw = json.loads((FIXTURES / "Ling-flash-2.0" / "config.json").read_text())
    raw["use_qk_norm"] = "yes"
    with pytest.raises(InputError) as err:
        read_config(raw)
    assert err.value.field == "model.use_qk_norm"


def test_models_cli_reads_each_family_config():
    for folder in ("Kimi-K2.5", "GLM-4.5-Air", "MiniMax-M2", "Ling-flash-2.0"):
        result = runner.invoke(app, ["models", str(FIXTURES / folder / "config.json")])
        assert result.exit_code == 0, result.output[-500:]


def test_models_cli_says_why_minimax_m2s_declared_mtp_modules_do_not_draft():
    result = runner.invoke(app, ["models", "minimax-m2"])
    assert result.exit_code == 0 and "num_mtp_modules 3" in " ".join(result.output.split())


def test_tensor_parallelism_stops_where_the_attention_heads_do():
    """vLLM refuses a tp that does not divide the attention heads (Llama-4 Maverick's 40 at
    tp 16: QA found simspec recommending and running it); the fewest GPUs skip such sizes."""
    from typer.testing import CliRunner

    from simspec.catalog.models import load_model
    from simspec.cli.main import app
    from simspec.config import Scenario
    from simspec.engine.build import build_cost_model
    from simspec.errors import InputError

    maverick = load_model("llama-4-maverick")
    assert maverick.attention_tp_refusal(16) and not maverick.attention_tp_refusal(8)
    assert maverick.largest_attention_tp(64) == 8
    assert load_model("deepseek-v3").largest_attention_tp(64) == 64  # 128 heads, MLA
    with pytest.raises(InputError, match="40 attention heads.*1, 2, 4, 8"):
        build_cost_model(Scenario(model="llama-4-maverick", gpu="h100_sxm", tp=16))
    out = CliRunner().invoke(app, ["models", "llama-4-maverick", "--gpu", "h100_sxm"]).stdout
    assert "more than tp=8" in " ".join(out.split())


def test_int4_weights_carry_their_checkpoints_scale_group():
    """Kimi-K2.5 stores its experts in int4 groups of 32 (4.5 bits a weight, its ~594 GB
    checkpoint), not int4-w's group of 128 (4.125 bits): on 8 x H100 its weights (70.9 GiB a
    GPU) and activations leave no KV at vLLM's default share, and the fewest GPUs that hold a
    4,096-token sequence are 16 (QA: it said 8)."""
    from simspec.catalog.models import load_model
    from simspec.config import Scenario, SchedulerConfig
    from simspec.engine.build import build_cost_model, setup_replica
    from simspec.errors import ScenarioError

    kimi = load_model("kimi-k2.5")
    assert kimi.int4_group_size == 32 and kimi.stored_bytes("int4-w") == 0.5625
    # MXFP4 (one 8-bit scale per 32) stores the bytes of one 16-bit scale per 64: 4.25 bits
    gpt_oss = load_model("gpt-oss-120b")
    assert gpt_oss.int4_group_size == 64 and gpt_oss.stored_bytes("int4-w") == 0.53125
    sc = Scenario(model="kimi-k2.5", gpu="h100_sxm", tp=8)
    assert build_cost_model(sc).expert_precision.weight_bytes == 0.5625
    with pytest.raises(ScenarioError, match="does not fit.*needs 16 h100_sxm"):
        setup_replica(sc)
    # at a share that leaves room, a few thousand tokens of KV
    roomy = SchedulerConfig(max_model_len=1024, gpu_memory_utilization=0.915)
    memory = setup_replica(sc.model_copy(update={"scheduler": roomy})).memory
    assert memory.num_blocks * memory.block_size < 8192


def test_expert_parallelism_holds_at_least_one_whole_expert_a_gpu():
    """Mixtral's 8 experts over 16 GPUs would leave half with none (QA: simspec printed half
    an expert a GPU); refused by name in a run and in ``simspec models`` alike."""
    from typer.testing import CliRunner

    from simspec.cli.main import app
    from simspec.config import Scenario
    from simspec.engine.build import setup_replica
    from simspec.errors import InputError

    with pytest.raises(InputError, match="8 experts a layer"):
        setup_replica(Scenario(model="mixtral-8x7b", tp=16, ep=16))
    res = CliRunner().invoke(app, ["models", "mixtral-8x7b", "--tp", "16", "--ep", "16"])
    assert res.exit_code != 0 and "ep: mixtral-8x7b has 8 experts" in " ".join(res.output.split())


def test_the_fewest_gpus_past_one_server_say_what_that_leaves_out():
    """QA: `models deepseek-v3 --gpu h100_sxm` answered 16 GPUs (tp 16) without saying they
    span two servers, whose all-reduces are priced at one server's interconnect."""
    out = CliRunner().invoke(app, ["models", "deepseek-v3", "--gpu", "h100_sxm"]).stdout
    text = " ".join(out.split())
    assert "16 GPUs span 2 servers" in text and "a lower bound" in text
    one = CliRunner().invoke(app, ["models", "llama-3.1-8b", "--gpu", "h100_sxm"]).stdout
    assert "span" not in one
