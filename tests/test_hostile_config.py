"""A hostile config.json: every size bounded before any per-layer work, nothing guessed, and
a config's own text shown on the explorer's page as text.

Whatever a config.json holds, through ``--model``, a draft's ``"model"`` in
``--speculative-config`` or the explorer's upload, it is read or refused with one line naming
its key and the allowed range, within seconds and bounded memory, nothing written and no
upload left behind. The memory cases run the CLI in a subprocess under an address-space limit.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from simspec.catalog.hf_config import SIZE_LIMITS
from simspec.catalog.models import load_hf_config, load_model
from simspec.errors import InputError, one_line
from simspec.ui import uploads
from simspec.ui.figures import scenario_label
from simspec.ui.inputs import ExplorerInputs, markdown_text, model_info_markdown
from tests.capped import run_capped

MEMORY_LIMIT = 2 * 1024**3  # bytes of address space for the CLI: imports take ~1 GB
SECONDS = 15  # the CLI starts in ~3 s on a busy machine; a hang never ends

LLAMA = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 4096,
}
EXPERTS = {"num_local_experts": 4, "num_experts_per_tok": 2}
MLA = {
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "kv_lora_rank": 16,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
}
# one small config of each architecture whose reader builds a tuple per layer
ARCHITECTURES = {
    "llama": LLAMA,
    "mistral": {**LLAMA, "model_type": "mistral", "sliding_window": 1024},
    "mixtral": {**LLAMA, "model_type": "mixtral", **EXPERTS},
    "qwen3_moe": {**LLAMA, "model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2},
    "gpt_oss": {**LLAMA, "model_type": "gpt_oss", **EXPERTS},
    "llama4_text": {
        **LLAMA,
        "model_type": "llama4_text",
        **EXPERTS,
        "intermediate_size_mlp": 128,
        "attention_chunk_size": 8192,
    },
    "deepseek_v3": {
        **LLAMA,
        "model_type": "deepseek_v3",
        **MLA,
        "first_k_dense_replace": 1,
        "n_shared_experts": 1,
        "q_lora_rank": None,
    },
}
# what the issue found: a MemoryError building the layer tuple, or (DeepSeek) an hour-long loop
HUGE = {
    "mixtral": {"num_hidden_layers": 10**9},
    "mistral": {"num_hidden_layers": 10**9},
    "llama4_text": {"num_hidden_layers": 10**9},
    "deepseek_v3": {"num_hidden_layers": 10**10, "first_k_dense_replace": 10**10},
}


def _write(folder: Path, config: dict) -> Path:
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


def _limited(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python ARGS`` in a subprocess of this tree, its address space capped."""
    return run_capped(args, MEMORY_LIMIT, cwd, SECONDS)


def _one_error_line(result: subprocess.CompletedProcess, field: str) -> str:
    output = result.stdout + result.stderr
    assert "Traceback" not in output and result.returncode == 2, output[-2000:]
    lines = [ln for ln in output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), output[-2000:]
    return lines[0]


# -- item 1: sizes bounded before any per-layer work ------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("arch", list(HUGE))
def test_a_billion_layers_is_one_line_naming_the_key_not_a_memory_error_nor_a_hang(tmp_path, arch):
    path = _write(tmp_path, {**ARCHITECTURES[arch], **HUGE[arch]})
    result = _limited(["-m", "simspec.cli.main", "models", str(path)], tmp_path)
    line = _one_error_line(result, "model.num_hidden_layers")
    assert "[1, 1024]" in line


@pytest.mark.slow
def test_a_huge_target_through_sweep_writes_nothing(tmp_path):
    path = _write(tmp_path, {**ARCHITECTURES["mixtral"], "num_hidden_layers": 10**9})
    out = tmp_path / "out.csv"
    args = ["--model", str(path), "--batch-sizes", "1", "--quiet", "--out", str(out)]
    result = _limited(["-m", "simspec.cli.main", "sweep", *args], tmp_path)
    _one_error_line(result, "model.num_hidden_layers")
    assert not out.exists()


@pytest.mark.slow
def test_a_huge_draft_in_a_speculative_config_names_the_draft(tmp_path):
    path = _write(tmp_path, {**ARCHITECTURES["deepseek_v3"], **HUGE["deepseek_v3"]})
    spec = json.dumps({"method": "draft_model", "model": str(path), "num_speculative_tokens": 3})
    args = ["--speculative-config", spec, "--batch-sizes", "1", "--requests", "2", "--quiet"]
    result = _limited(["-m", "simspec.cli.main", "sweep", *args], tmp_path)
    _one_error_line(result, "draft_model.num_hidden_layers")


@pytest.mark.slow
def test_a_huge_upload_is_refused_by_its_key_and_not_kept(tmp_path):
    data = json.dumps({**ARCHITECTURES["llama4_text"], **HUGE["llama4_text"]})
    folder = tmp_path / "uploads"
    folder.mkdir()
    code = (
        "import sys; from pathlib import Path; from simspec.ui.uploads import save_config_upload\n"
        "try:\n"
        f"    save_config_upload({data!r}.encode(), 'config.json', Path({str(folder)!r}))\n"
        "except ValueError as exc:\n"
        "    print(f'error: {exc}'); sys.exit(2)\n"
    )
    line = _one_error_line(_limited(["-c", code], tmp_path), "model config")
    assert "num_hidden_layers: must be a whole number in [1, 1024]" in line
    assert list(folder.iterdir()) == []


def test_an_upload_is_removed_whatever_stops_its_read(tmp_path, monkeypatch):
    def out_of_memory(path):
        raise MemoryError

    monkeypatch.setattr(uploads, "load_hf_config", out_of_memory)
    with pytest.raises(MemoryError):
        uploads.save_config_upload(json.dumps(LLAMA).encode(), "config.json", tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("key", sorted(SIZE_LIMITS))
def test_every_size_key_past_its_limit_is_refused_naming_the_key_and_range(tmp_path, key):
    least, largest = SIZE_LIMITS[key]
    path = _write(tmp_path, {**LLAMA, key: largest + 1})
    with pytest.raises(InputError) as err:
        load_model(str(path))
    assert err.value.field == f"model.{key}"
    assert f"in [{least}, {largest}]" in err.value.message


@pytest.mark.parametrize("value", [4096.0, True, "4096", -1, 2**64, [1]])
def test_a_size_that_is_not_a_whole_number_in_range_is_refused(tmp_path, value):
    path = _write(tmp_path, {**LLAMA, "hidden_size": value})
    with pytest.raises(InputError) as err:
        load_model(str(path))
    assert err.value.field == "model.hidden_size" and len(err.value.message) < 120


def test_every_preset_is_within_the_limits():
    """The limits sit above every real model: the packaged presets all read."""
    from simspec.catalog.models import model_ids

    for name in model_ids():
        load_model(name)


# -- item 15: nothing guessed -----------------------------------------------------------------
def test_a_config_without_max_position_embeddings_is_refused_not_guessed(tmp_path):
    config = {k: v for k, v in LLAMA.items() if k != "max_position_embeddings"}
    with pytest.raises(InputError) as err:
        load_model(str(_write(tmp_path, config)))
    assert err.value.field == "model.max_position_embeddings"


@pytest.mark.parametrize("kv_heads", [64, 7])
def test_kv_heads_that_do_not_divide_the_query_heads_are_refused(tmp_path, kv_heads):
    config = {**LLAMA, "hidden_size": 4096, "num_attention_heads": 32}
    with pytest.raises(InputError) as err:
        load_model(str(_write(tmp_path, {**config, "num_key_value_heads": kv_heads})))
    assert err.value.field == "model.num_key_value_heads" and "(32)" in err.value.message


def test_mxfp4_experts_on_a_model_without_experts_are_refused(tmp_path):
    config = {**LLAMA, "model_type": "llama", "quantization_config": {"quant_method": "mxfp4"}}
    with pytest.raises(InputError) as err:
        load_model(str(_write(tmp_path, config)))
    assert err.value.field == "model.quantization_config.quant_method"
    assert "no experts" in err.value.message


def test_mxfp4_experts_still_read_on_gpt_oss(tmp_path):
    config = {**ARCHITECTURES["gpt_oss"], "quantization_config": {"quant_method": "mxfp4"}}
    shape = load_model(str(_write(tmp_path, config)))
    assert (shape.weight_dtype, shape.expert_weight_dtype) == ("bf16", "int4-w")


# -- item 17: a config's name is text on the page ---------------------------------------------
HOSTILE_NAMES = [
    "[click me](https://evil.example/)",
    "![tracker](https://evil.example/pixel.png)",
    "<img src=x onerror=alert(1)> <a href='https://evil.example'>x</a>",
    "**bold** _it_ `code` ~~gone~~ $x^2$ :red[red] # heading",
    "- a list\n# a heading\n[ref]: https://evil.example",
    "&lt;b&gt; \\[escaped\\] | table | https://evil.example www.evil.example a@evil.example",
]


def _rendered(markdown: str) -> str:
    return MarkdownIt("commonmark").render(markdown)


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_text_shown_through_markdown_renders_as_itself(name):
    page = _rendered(markdown_text(name))
    assert re.fullmatch(r"<p>[^<]*</p>\n", page), page  # one paragraph, no element in it
    assert html.unescape(page[3:-5]) == one_line(name)
    # what CommonMark leaves to Streamlit's extensions (autolinks, $ maths, directives) is
    # escaped too: no URL scheme, www. or :name survives unescaped
    assert not re.search(r"(?<!\\)(://|www\.|\$|:[a-z])", markdown_text(name))


def test_the_model_facts_show_an_uploaded_name_as_text(tmp_path):
    name = HOSTILE_NAMES[0] + " " + HOSTILE_NAMES[1]
    data = json.dumps({**LLAMA, "_name_or_path": name}).encode()
    path, _, _ = uploads.save_config_upload(data, "config.json", tmp_path)
    page = _rendered(model_info_markdown(ExplorerInputs(model=path)))
    assert "<a " not in page and "<img" not in page
    assert name in html.unescape(page)


def test_figure_titles_show_a_config_name_not_its_markup():
    inp = ExplorerInputs(model_name="<a href='https://evil.example'>x</a>")
    label = scenario_label(inp)
    assert "<a" not in label and label.startswith(
        "&lt;a href='https://evil.example'&gt;x&lt;/a&gt;"
    )


def test_an_upload_error_names_the_key_and_the_uploaded_file_not_the_stored_one(tmp_path):
    data = json.dumps({**LLAMA, "num_key_value_heads": 3}).encode()
    with pytest.raises(InputError) as err:
        uploads.save_config_upload(data, "my-config.json", tmp_path)
    assert str(err.value).startswith("model config: num_key_value_heads: must divide")
    lacking = json.dumps({"hidden_size": 8}).encode()
    with pytest.raises(InputError, match="'my-config.json' lacks") as err:
        uploads.save_config_upload(lacking, "my-config.json", tmp_path)
    assert "upload-" not in str(err.value) and list(tmp_path.iterdir()) == []


# -- fuzz: random values, huge sizes included, in every architecture's keys ---------------------
SIZES = (
    st.integers(-(10**3), 10**4)
    | st.sampled_from([0, 1, 1023, 1024, 1025, 2**31, 2**63, 10**9, 10**10, 10**300])
    | st.floats(allow_nan=True)
    | st.booleans()
    | st.none()
    | st.text(max_size=8)
    | st.lists(st.integers(-2, 2**40), max_size=4)
)
KEYS = sorted({*SIZE_LIMITS, "layer_types", "moe_layers", "mlp_only_layers", "no_rope_layers"})


@settings(
    max_examples=int(os.environ.get("SIMSPEC_FUZZ_EXAMPLES", "40")),
    deadline=2000,  # each read answers in milliseconds: a per-layer loop over 1e10 would not
    suppress_health_check=list(HealthCheck),
)
@given(
    st.sampled_from(list(ARCHITECTURES)),
    st.dictionaries(st.sampled_from(KEYS), SIZES, max_size=6),
)
def test_random_sizes_in_every_architecture_are_read_or_refused_by_key(
    tmp_path_factory, arch, keys
):
    path = _write(tmp_path_factory.mktemp("hf"), {**ARCHITECTURES[arch], **keys})
    try:
        shape = load_hf_config(path)
    except InputError as exc:
        assert exc.field.startswith("model") and len(str(exc)) < 400
        return
    for key, (_, largest) in SIZE_LIMITS.items():
        value = getattr(shape, key, None)
        assert not isinstance(value, int) or value <= largest


def test_a_checkpoint_that_keeps_layers_unquantised_is_refused_by_the_key(tmp_path):
    """QA: Llama-3.1-405B-FP8 keeps its attention and first and last layers in bf16
    (modules_to_not_convert); simspec priced them at fp8 and left 40 % too much KV, silently.
    The LM head, embedding and routers, which simspec keeps in bf16 anyway, stay accepted."""
    import json

    import pytest

    from simspec.catalog.models import load_model
    from simspec.errors import InputError
    from tests.conftest import TINY_CONFIG as base

    keep = {"quant_method": "fbgemm_fp8", "modules_to_not_convert": ["model.layers.0.self_attn"]}
    ok = {"quant_method": "fbgemm_fp8", "modules_to_not_convert": ["lm_head"]}
    for name, q, refused in (("keep", keep, True), ("ok", ok, False)):
        path = tmp_path / name / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps({**base, "quantization_config": q}))
        if refused:
            with pytest.raises(InputError, match="modules_to_not_convert: keeps"):
                load_model(str(path))
        else:
            assert load_model(str(path)).weight_dtype == "fp8"


@pytest.mark.parametrize(
    ("rope", "context"),
    [
        ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131072),
        ({"type": "linear", "factor": 4.0}, 16384),
        ({"rope_type": "llama3", "factor": 8.0}, 4096),  # already the scaled context
    ],
)
def test_a_rope_scaled_context_is_the_one_vllm_serves(tmp_path, rope, context):
    """QA: a yarn-scaled Qwen2.5 refused 64K prompts at its unscaled 32K (vLLM serves 128K)."""
    import json

    from simspec.catalog.models import load_model
    from tests.conftest import TINY_CONFIG

    raw = {**TINY_CONFIG, "rope_scaling": rope}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    assert load_model(str(path)).max_position_embeddings == context


def test_a_missing_kv_head_count_is_refused_outside_llama_1(tmp_path):
    """QA: a Mistral config without num_key_value_heads read as 32 KV heads (MistralConfig's
    default is 8: a KV cache four times too large)."""
    import json

    from simspec.catalog.models import load_model
    from simspec.errors import InputError
    from tests.conftest import TINY_CONFIG

    raw = {k: v for k, v in TINY_CONFIG.items() if k != "num_key_value_heads"}
    raw["model_type"] = "mistral"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(InputError, match="num_key_value_heads: missing"):
        load_model(str(path))
    path.write_text(json.dumps({**raw, "model_type": "llama"}))  # LLaMA-1 predates the key
    assert load_model(str(path)).num_key_value_heads == 8


# -- configs as released (QA round on real Hugging Face configs) ---------------------------------
@pytest.mark.parametrize(
    ("rope", "key"),
    [
        ({"rope_type": "yarn", "factor": float("nan")}, "rope_scaling.factor"),
        ({"rope_type": "yarn", "factor": "4"}, "rope_scaling.factor"),
        ({"rope_type": "dynamic", "factor": 1e12}, "rope_scaling.factor"),
        (
            {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": True},
            "rope_scaling.original_max_position_embeddings",
        ),
    ],
)
def test_a_bad_rope_scaling_is_refused_naming_its_key(tmp_path, rope, key):
    """NaN had raised a traceback, a 1e12 factor passed the context bound, a bool read as 1."""
    from simspec.catalog.models import load_model

    path = _write(tmp_path, {**LLAMA, "rope_scaling": rope})
    with pytest.raises(InputError) as err:
        load_model(str(path))
    assert err.value.field == f"model.{key}"


def test_transformers_v5_rope_parameters_scale_the_context(tmp_path):
    from simspec.catalog.models import load_model

    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    path = _write(tmp_path, {**LLAMA, "rope_parameters": yarn})
    assert load_model(str(path)).max_position_embeddings == 16384


def test_llm_compressor_ignore_patterns_of_modules_priced_in_bf16_anyway_are_read(tmp_path):
    """llm-compressor's MoE and vision recipes ignore the LM head, routers, shared-expert
    gates and the vision tower by re: patterns; those keep the model at its precision, and a
    pattern over attention is still refused (as are ignored_layers and GPTQ's dynamic "-:")."""
    from simspec.catalog.models import load_model

    fp8 = {"num_bits": 8, "type": "float"}
    ct = {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": fp8}}}
    ok = ["re:.*lm_head", "re:.*mlp.gate$", "re:.*shared_expert_gate$", "re:visual.*"]
    moe = {**LLAMA, "model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2}
    moe["moe_intermediate_size"] = 32
    path = _write(tmp_path, {**moe, "quantization_config": {**ct, "ignore": ok}})
    assert load_model(str(path)).weight_dtype == "fp8"
    for quant in (
        {**ct, "ignore": ["re:.*self_attn.*"]},
        {"quant_method": "fp8", "ignored_layers": ["model.layers.0.self_attn.q_proj"]},
        {"quant_method": "gptq", "bits": 4, "dynamic": {"-:.*self_attn.*": {}}},
    ):
        path = _write(tmp_path, {**LLAMA, "quantization_config": quant})
        with pytest.raises(InputError, match="unquantised"):
            load_model(str(path))
    nvfp4 = {"num_bits": 4, "type": "float", "group_size": 16}
    path = _write(
        tmp_path,
        {**LLAMA, "quantization_config": {**ct, "config_groups": {"g": {"weights": nvfp4}}}},
    )
    assert load_model(str(path)).weight_dtype == "nvfp4"


def test_configs_as_released_read_their_class_defaults(tmp_path):
    """Qwen3.5's MoE configs carry no intermediate_size (every layer MoE); Qwen3-Next's none
    of its one MTP layer; gpt-oss's class alternates sliding layers when layer_types is
    absent; Llama-4 derives its NoPE layers from no_rope_layer_interval. A MoE pattern that
    leaves no MoE layer names the keys that set it."""
    from simspec.catalog.models import load_model

    base = {k: v for k, v in LLAMA.items() if k != "intermediate_size"}
    moe = {**base, "model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2}
    shape = load_model(str(_write(tmp_path, {**moe, "moe_intermediate_size": 32})))
    assert shape.intermediate_size == 64 and "no intermediate_size" in shape.source
    with pytest.raises(InputError, match="intermediate_size"):
        load_model(
            str(_write(tmp_path, {**moe, "moe_intermediate_size": 32, "mlp_only_layers": [0]}))
        )
    oss = load_model(
        str(_write(tmp_path, {**LLAMA, "model_type": "gpt_oss", **EXPERTS, "sliding_window": 128}))
    )
    assert oss.sliding_layers == (0,)
    scout = dict(ARCHITECTURES["llama4_text"], num_hidden_layers=4, no_rope_layer_interval=2)
    assert load_model(str(_write(tmp_path, scout))).sliding_layers == (0, 2)
    deep = {**ARCHITECTURES["deepseek_v3"], "first_k_dense_replace": 2}
    with pytest.raises(InputError, match="first_k_dense_replace"):
        load_model(str(_write(tmp_path, deep)))


@pytest.mark.parametrize("key", ["first_k_dense_replace", "n_shared_experts", "q_lora_rank"])
def test_a_moe_layout_key_left_out_is_refused_not_read_as_zero(tmp_path, key):
    """QA: a DeepSeek-V3 config without first_k_dense_replace and n_shared_experts read as 61
    MoE layers and 701B parameters (DeepseekV3Config defaults them to 3 and 1)."""
    from simspec.catalog.models import load_model

    trimmed = {k: v for k, v in ARCHITECTURES["deepseek_v3"].items() if k != key}
    with pytest.raises(InputError) as exc:
        load_model(str(_write(tmp_path, trimmed)))
    assert exc.value.field == f"model.{key}" and "missing" in exc.value.message


def test_a_presets_fp8_checkpoint_id_runs_the_preset_at_fp8():
    """zai-org/GLM-4.5-FP8 is GLM-4.5's shape in block FP8: models and runs size it at fp8
    (QA: it had read as the bf16 preset, 16 H100s instead of 8)."""
    from typer.testing import CliRunner

    from simspec.cli.flags import with_preset_ids
    from simspec.cli.main import app

    out = CliRunner().invoke(app, ["models", "zai-org/GLM-4.5-FP8"]).output
    assert "weights: fp8" in out and "GPUs needed: 8" in out
    assert with_preset_ids({"model": "zai-org/GLM-4.5-FP8"}) == {
        "model": "glm-4.5",
        "precision": "fp8",
    }
    assert (
        with_preset_ids({"model": "zai-org/GLM-4.5-FP8", "precision": "bf16"})["precision"]
        == "bf16"
    )


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("methods: [{name: eagle3, k: true, acceptance: {alpha: 0.7}}]", "methods.0.k"),
        ("methods: [{name: eagle3, acceptance: {alpha: true}}]", "methods.0.acceptance.alpha"),
        ("tp: true", "tp"),
        ("batch_sizes: [true, 2]", "batch_sizes"),
        ("workload: {prompt: {mean: false}}", "workload.prompt.mean"),
    ],
)
def test_true_or_false_where_a_number_goes_is_refused(tmp_path, text, field):
    """YAML reads ``k: true`` as True and pydantic's lax mode read that as 1 (QA: K = 1 ran,
    alpha: true ran at 1.0); a field that takes true or false still does."""
    from typer.testing import CliRunner

    from simspec.cli.main import app

    cfg = tmp_path / "c.yaml"
    cfg.write_text(text + "\n")
    result = CliRunner().invoke(app, ["sweep", "--config", str(cfg)])
    line = result.output.strip().splitlines()[-1]
    assert result.exit_code == 2 and line.startswith(f"error: {field}: true/false is not"), line
    from simspec.config import SchedulerConfig

    assert SchedulerConfig(enable_prefix_caching=True).enable_prefix_caching is True


def test_two_config_files_in_one_folder_are_named_apart(tmp_path):
    """QA: mistral.json and qmoe.json in one folder were both named after the folder."""
    import json

    from simspec.catalog.models import load_model
    from tests.conftest import TINY_CONFIG

    for name in ("mistral.json", "other.json", "config.json"):
        (tmp_path / name).write_text(json.dumps(TINY_CONFIG))
    ids = [load_model(str(tmp_path / n)).id for n in ("mistral.json", "other.json")]
    assert ids == ["mistral", "other"]
    assert load_model(str(tmp_path / "config.json")).id == tmp_path.name


def test_a_method_written_as_a_bare_name_is_refused_by_the_key_the_file_used(tmp_path):
    """QA: "method: eagle3" in a fleet's file was refused naming "methods"."""
    from typer.testing import CliRunner

    from simspec.cli.main import app

    one = tmp_path / "one.yaml"
    one.write_text("method: eagle3\n")
    result = CliRunner().invoke(
        app, ["fleet", "--qps", "5", "--requests", "8", "--config", str(one)]
    )
    assert result.exit_code == 2
    assert "method: each method is a mapping with at least a name (method: {name: eagle3})" in (
        " ".join(result.output.split())
    )


def test_both_trace_rates_are_refused_by_the_flags_typed():
    """QA: --rate-scale with --target-qps blamed the config fields ("workload: ...")."""
    from typer.testing import CliRunner

    from simspec.cli.main import app

    args = ["fleet", "--trace", "azure-conv", "--window", "0:60", "--rate-scale", "2"]
    result = CliRunner().invoke(app, [*args, "--target-qps", "3"])
    assert result.exit_code == 2 and "--target-qps: give --rate-scale or --target-qps" in (
        " ".join(result.output.split())
    )
