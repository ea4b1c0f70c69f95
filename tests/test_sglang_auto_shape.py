"""SGLang's own draft shape when a server is given a speculative algorithm and no shape
(``auto_choose_speculative_params``, by release and the served model's ``architectures[0]``),
and the validation rows that leave their shape unstated running it."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from simspec.catalog.hardware import load_engine
from simspec.catalog.models import load_model, model_ids
from simspec.studies.validation.predict import Skip, plan_case

LLAMA, DEEPSEEK, QWEN3 = "LlamaForCausalLM", "DeepseekV3ForCausalLM", "Qwen3ForCausalLM"


@pytest.mark.parametrize(
    ("arch", "release", "shape"),
    [
        (LLAMA, (0, 4, 3), (5, 8, 64)),  # the 0.4.3 ServerArgs defaults, every model
        (LLAMA, (0, 4, 4), (5, 4, 8)),
        (DEEPSEEK, (0, 4, 6), (5, 4, 8)),  # DeepSeek's own rule starts in 0.4.7
        (DEEPSEEK, (0, 4, 7), (3, 1, 4)),
        ("GptOssForCausalLM", (0, 4, 9), (5, 4, 8)),
        ("GptOssForCausalLM", (0, 5, 1), (3, 1, 4)),
        ("Glm4MoeForCausalLM", (0, 5, 6), (5, 4, 8)),
        ("Glm4MoeForCausalLM", (0, 5, 7), (3, 1, 4)),
        (QWEN3, (0, 5, 7), (5, 4, 8)),  # every other architecture: (3, 1, 4) from 0.5.8
        (QWEN3, (0, 5, 8), (3, 1, 4)),
        (LLAMA, (0, 5, 23), (5, 4, 8)),
    ],
)
def test_sglang_picks_its_draft_shape_by_release_and_architecture(arch, release, shape):
    got = load_engine("sglang").auto_spec_shape("eagle3", arch, release)
    assert got is not None and got[0] == shape
    assert load_engine("sglang").auto_spec_shape("mtp", arch, release)[0] == shape  # NEXTN


def test_a_draft_model_gets_its_shape_from_the_release_that_runs_one():
    sglang = load_engine("sglang")
    assert sglang.auto_spec_shape("draft_model", LLAMA, (0, 5, 1)) is None  # no STANDALONE yet
    assert sglang.auto_spec_shape("draft_model", LLAMA, (0, 5, 2))[0] == (3, 1, 4)


def test_an_unversioned_run_takes_the_profiles_newest_release_and_other_engines_none():
    assert load_engine("sglang").auto_spec_shape("eagle3", QWEN3, None)[0] == (3, 1, 4)
    assert load_engine("sglang-v2").release == "0.5.23"
    for engine in ("vllm", "vllm-v0", "trtllm"):  # vLLM requires num_speculative_tokens
        assert load_engine(engine).auto_spec_shape("eagle3", LLAMA, None) is None
    # n-gram verifies speculative_num_draft_tokens' default of 12, root included, from 0.5.3
    # (QA: simspec ran SGLang's n-gram at its own K=3)
    assert load_engine("sglang").auto_spec_shape("ngram", LLAMA, None)[0] == (11, 1, 12)
    assert load_engine("sglang").auto_spec_shape("ngram", LLAMA, (0, 4, 9)) is None
    assert load_engine("vllm").auto_spec_shape("ngram", LLAMA, None) is None


def test_every_preset_names_its_architecture_and_a_config_keeps_its_top_levels(tmp_path):
    assert all(load_model(m).architecture for m in model_ids())
    assert load_model("qwen3-8b").architecture == QWEN3  # not Llama's, though read as llama
    assert load_model("kimi-k2").architecture == DEEPSEEK
    from tests.conftest import TINY_CONFIG

    raw = {
        "architectures": ["Llama4ForConditionalGeneration"],
        "text_config": {**TINY_CONFIG, "architectures": ["Llama4ForCausalLM"]},
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    assert load_model(str(path)).architecture == "Llama4ForConditionalGeneration"


def _row(shared, case_id: str, table: str = "cases.csv", **cells: str) -> dict[str, str]:
    cases = pd.read_csv(shared / "validation" / table, dtype=str, keep_default_na=False)
    return {**cases[cases.case_id == case_id].iloc[0].to_dict(), **cells}


def test_an_sglang_row_without_a_shape_runs_the_shape_sglang_picks(shared):
    # EAGLE-3 paper Table 4: SGLang on one H100, "draft config not stated", Llama-3.1-8B
    plan = plan_case(_row(shared, "e3t4-e3"))
    method = plan.scenario.method
    assert (method.k, method.tree_topk, method.tree_nodes) == (5, 4, 7)  # 8 minus the root
    assert any("picks steps 5, topk 4, 8 draft tokens" in a for a in plan.assumptions)
    # a stated release picks its own rule: Qwen3-8B on 0.5.3 (5, 4, 8), on 0.5.9 (3, 1, 4)
    row = _row(shared, "gps8b-c4-e3-sgldefault-tengyunw")
    assert plan_case(row).scenario.method.tree_topk == 4
    chain = plan_case({**row, "engine_version": "0.5.9"}).scenario.method
    assert (chain.k, chain.tree or "chain") == (3, "chain")
    # a stated shape, and an engine with no default of its own, keep theirs
    stated = plan_case(_row(shared, "e3t4-e3", spec_shape="chain", k="2")).scenario.method
    assert (stated.k, stated.tree or "chain") == (2, "chain")
    vllm = plan_case(_row(shared, "e3t4-e3", engine="vllm", engine_version="0.10.1"))
    assert not any("picks steps" in a for a in vllm.assumptions)


def test_mtp_that_sglang_would_draft_as_a_tree_is_refused_by_name(shared):
    row = _row(shared, "sgldocs-dsv3-mtp-bs1", "cases_moe_serving.csv", engine_version="0.4.5")
    with pytest.raises(Skip, match="topk 4.*a tree, and simspec drafts mtp as chains only"):
        plan_case(row, assume={"gpu": "h200"})
    plan = plan_case({**row, "engine_version": "0.4.7"}, assume={"gpu": "h200"})
    assert (plan.scenario.method.k, plan.scenario.method.tree or "chain") == (3, "chain")


# --- the command line: a sweep on SGLang that gives no K drafts as SGLang would ----------------


def test_a_sweep_on_sglang_drafts_the_shape_sglang_picks():
    """`simspec sweep --engine sglang --methods eagle3` with no --k runs what a SGLang server
    started with no shape drafts: a chain of 3 on Qwen3 (0.5.8+), the dynamic 5/4/8 tree on
    Llama, whose trace acceptance the tree reads as chain α at its depth; vLLM keeps the
    method's own default (it requires num_speculative_tokens)."""
    from simspec.catalog.methods import preset_method

    qwen = preset_method("eagle3", target="qwen3-8b", engine="sglang")
    assert (qwen.k, qwen.tree, qwen.tree_nodes) == (3, "chain", None)
    draft = preset_method("draft_model", target="qwen3-8b", engine="sglang")
    assert draft.k == 3  # STANDALONE: (3, 1, 4) for every model
    llama = preset_method("eagle3", target="llama-3.1-8b", engine="sglang")
    assert (llama.k, llama.tree, llama.tree_topk, llama.tree_nodes) == (5, "dynamic", 4, 7)
    assert llama.acceptance.tau is not None and "as chain alpha for a tree" in (
        llama.acceptance.source
    )
    vllm = preset_method("draft_model", target="qwen3-8b", engine="vllm")
    assert vllm.k == 5  # the preset's (transformers' num_assistant_tokens)
    own = preset_method("eagle3", target="llama-3.1-8b", engine="sglang", engine_shape=False)
    assert (own.k, own.tree or "chain") == (3, "chain")


def test_a_k_given_replaces_the_shape_sglang_would_pick(capsys):
    """SGLang picks a shape only for a server given none: --k is one, so the method's own
    shape runs at that depth; without --k the sweep says which shape SGLang picked."""
    from simspec.cli.sweep_flags import SweepFlags

    def ran(**kw):
        flags = SweepFlags(methods="eagle3", engine="sglang", model="llama-3.1-8b", **kw)
        return flags.sweep_config(None).methods[0]

    assert (ran().k, ran().tree) == (5, "dynamic")
    assert (ran(k=2).k, ran(k=2).tree or "chain") == (2, "chain")


def test_the_sweep_says_which_shape_sglang_picked(capsys):
    from simspec.cli.sweep import _picked_shape_note
    from simspec.cli.sweep_flags import SweepFlags

    cfg = SweepFlags(methods="eagle3", engine="sglang", model="qwen3-8b").sweep_config(None)
    _picked_shape_note(cfg)
    said = " ".join(capsys.readouterr().err.split())
    assert "eagle3 on qwen3-8b: SGLang 0.5.10 picks steps 3, topk 1, 4 draft tokens" in said
    assert said.endswith("a chain of 3")
    cfg = SweepFlags(methods="eagle3", engine="sglang", model="qwen3-8b", k=2).sweep_config(None)
    _picked_shape_note(cfg)
    assert capsys.readouterr().err == ""


def test_a_tree_sglang_would_pick_for_a_chain_only_method_is_refused_not_replaced(monkeypatch):
    """A release whose pick for MTP is a top-4 tree (0.4.4-0.5.7 for most models): simspec
    drafts MTP as chains only, so the sweep refuses it, as validate skips such a row."""
    from simspec.catalog import methods
    from simspec.errors import InputError

    said = "SGLang x picks steps 5, topk 4, 8 draft tokens"
    monkeypatch.setattr(methods, "engine_picked_shape", lambda *a, **k: (None, said))
    with pytest.raises(InputError, match="drafts mtp as chains only"):
        methods.preset_method("mtp", target="deepseek-v3", engine="sglang")
