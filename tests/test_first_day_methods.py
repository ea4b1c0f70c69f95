"""A first day without surprises, in the methods a user names: one n-gram whichever way it is
named, with its lookup sizes in every table; MTP acceptance that falls with depth, from its
sources, and says where it is extrapolated; and a draft model that shares the target's
vocabulary, or a sentence saying why there is none."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from simspec.catalog.methods import (
    family_draft,
    method_presets,
    preset_method,
    trace_setup,
    unused_field,
)
from simspec.cli.main import app
from simspec.cli.sweep_flags import SweepFlags
from simspec.config import MethodConfig
from simspec.engine.acceptance.inversion import alpha_profile
from simspec.engine.speculators.lookup import matched_sizes
from simspec.errors import InputError
from simspec.studies.capacity import FLEET_PLAN_COLUMNS, PLAN_COLUMNS
from simspec.studies.sweep import (
    COLUMNS,
    describe_acceptance,
    extrapolated_beyond,
    extrapolation_notes,
    lookup_columns,
)
from simspec.studies.validation.predict import plan_case, stated_lookup_sizes

runner = CliRunner()
CASES = Path(__file__).resolve().parents[1] / "simspec" / "data" / "validation" / "cases.csv"
MOE_CASES = Path(__file__).resolve().parents[2] / "shared" / "validation" / "cases_moe_serving.csv"
VLLM_DEFAULT = (5, 5)  # SpeculativeConfig.__post_init__: neither size given -> 5 and 5


def _only_method(flags: SweepFlags, config: Path | None = None) -> MethodConfig:
    methods = [m for m in flags.sweep_config(config).methods if m.name != "autoregressive"]
    assert len(methods) == 1
    return methods[0]


def _case(case_id: str) -> dict[str, str]:
    with CASES.open(newline="") as f:
        return next(r for r in csv.DictReader(f) if r["case_id"] == case_id)


# --- n-gram means one thing -------------------------------------------------------------------


def test_ngram_runs_vllms_default_sizes_however_the_user_names_it(tmp_path):
    by_flag = _only_method(SweepFlags(methods="ngram"))
    scenario = tmp_path / "s.yaml"
    scenario.write_text("methods:\n  - name: ngram\n")
    by_file = _only_method(SweepFlags(), scenario)
    by_vllm = _only_method(SweepFlags(speculative_config=json.dumps({"method": "ngram"})))
    for m in (by_flag, by_file, by_vllm):
        assert matched_sizes(m, "vllm") == VLLM_DEFAULT, m
    assert preset_method("ngram").prompt_lookup_min == 5  # what `simspec methods` shows


def test_sweep_and_plan_tables_name_the_lookup_sizes_beside_k():
    for columns in (COLUMNS, PLAN_COLUMNS, FLEET_PLAN_COLUMNS):
        at = columns.index("prompt_lookup_min")
        assert columns[at + 1] == "prompt_lookup_max"
    ngram = MethodConfig(name="ngram", prompt_lookup_min=2, prompt_lookup_max=4)
    assert lookup_columns(ngram, "vllm") == {"prompt_lookup_min": 2, "prompt_lookup_max": 4}
    assert lookup_columns(preset_method("pld"), "vllm") == {
        "prompt_lookup_min": 1,  # Spec-Bench's PLD: n from 3 down to 1
        "prompt_lookup_max": 3,
    }
    blank = {"prompt_lookup_min": None, "prompt_lookup_max": None}
    for name in ("eagle3", "suffix", "autoregressive"):
        assert lookup_columns(preset_method(name), "vllm") == blank, name
    # SGLang's n-gram walks a trie of its own: no sizes apply, so none are written
    assert lookup_columns(preset_method("ngram"), "sglang") == blank


@pytest.mark.slow
def test_a_sweep_csv_writes_the_ngram_sizes_and_blanks_for_other_methods(tmp_path):
    out = tmp_path / "s.csv"
    args = ["sweep", "--methods", "autoregressive,ngram,eagle3", "--batch-sizes", "1"]
    res = runner.invoke(app, [*args, "--requests", "2", "--turnovers", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = pd.read_csv(out).set_index("method")
    assert (rows.loc["ngram", "prompt_lookup_min"], rows.loc["ngram", "prompt_lookup_max"]) == (
        VLLM_DEFAULT
    )
    assert rows.loc["eagle3", ["prompt_lookup_min", "prompt_lookup_max"]].isna().all()
    assert "prompt_lookup_min,prompt_lookup_max" in out.read_text().splitlines()[0]


def test_validation_rows_of_the_recorded_ngram_traces_replay_their_recorded_setup():
    """The packaged traces were recorded with sizes that 3/5 replays: those rows pin 3/5, so
    `simspec validate` on them does not move with the default."""
    assert trace_setup("ngram") == {"prompt_lookup_min": 3, "prompt_lookup_max": 5}
    for case_id in ("trace-sgpt-ng-k3", "trace-cnn-ng-k5"):
        method = plan_case(_case(case_id)).scenario.method
        assert (method.prompt_lookup_min, method.prompt_lookup_max) == (3, 5), case_id
        assert method.acceptance.tokens  # the proposer replayed on the recorded streams


def test_a_validation_row_runs_the_ngram_sizes_its_notes_state():
    """A row that states its n-gram sizes ("ngram [3,5]", or vLLM's keys) runs them, not the
    default; a row that states none runs vLLM's default 5/5, as its engine would have."""
    assert stated_lookup_sizes("speedup = vanilla TPOT / ngram [3,5] TPOT; also ngram [5,5]") == {
        "prompt_lookup_min": 3,
        "prompt_lookup_max": 5,
    }
    assert stated_lookup_sizes('"prompt_lookup_max": 4, "prompt_lookup_min": 2') == {
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    }
    assert stated_lookup_sizes("num speculative tokens not stated") == {}
    if MOE_CASES.exists():  # ../shared, beside the checkout
        with MOE_CASES.open(newline="") as f:
            rows = [
                r
                for r in csv.DictReader(f)
                if r["case_id"].startswith("suffixart-l8b-ngram35-blazedit")
            ]  # (the spec-bench rows are refused: no packaged acceptance of its mixed tasks)
        for row in rows:  # their GPU is unstated: as under `--assume gpu=h200`
            method = plan_case({**row, "gpu": "h200"}).scenario.method
            assert (method.prompt_lookup_min, method.prompt_lookup_max) == (3, 5), row["case_id"]


def test_pld_refuses_lookup_sizes_it_does_not_read():
    why = unused_field(MethodConfig(name="pld", prompt_lookup_max=4))
    assert why is not None and why[0] == "prompt_lookup_max" and "ngram" in why[1]
    assert unused_field(MethodConfig(name="ngram", prompt_lookup_max=4)) is None


# --- MTP acceptance falls with depth ----------------------------------------------------------


def _mtp() -> MethodConfig:
    return preset_method("mtp", "sharegpt", target="deepseek-v3")


def test_mtp_at_k1_keeps_the_deepseek_report_acceptance():
    acc = _mtp().acceptance
    assert _mtp().k == 1 and (acc.tau, acc.tau_k) == (1.85, 1)
    assert extrapolated_beyond(_mtp()) is None and not extrapolation_notes([_mtp()])


def test_mtp_acceptance_decays_with_depth_from_its_sources():
    acc = _mtp().acceptance
    profile = alpha_profile(acc, 5)
    assert profile[0] == pytest.approx(alpha_profile(acc, 1)[0])  # position 1: the report's
    assert np.all(np.diff(profile) < 0)  # the one module run again loses acceptance per step
    assert profile[1:] / profile[:-1] == pytest.approx(np.full(4, acc.depth_decay))
    # K = 3 no longer extrapolates the K = 1 rate at constant alpha (tau 3.21 before)
    assert 1 + np.cumprod(alpha_profile(acc, 3)).sum() < 3.0


def test_the_mtp_decay_is_solved_from_the_lmsys_windows_not_fitted():
    """SGLang counts the verified token in its window: the 3- and 4-token windows are K = 2
    and 3. A geometric decay a·r^(d-1) meets both published tau exactly."""
    preset = method_presets()["mtp"]["presets"]["overall"]
    taus = {2: 2.18, 3: 2.44}  # lmsysmtp-64k-mtp-w3, -w4
    for case_id in ("lmsysmtp-64k-mtp-w3", "lmsysmtp-64k-mtp-w4"):
        assert float(_case(case_id)["measured_tau"]) in taus.values()
    ar = (taus[3] - taus[2]) ** (1 / 3)
    a = (taus[2] - 1) / (1 + ar)
    r = ar / a
    assert r == pytest.approx(preset["depth_decay"], abs=5e-4)
    for k, tau in taus.items():
        assert 1 + np.cumprod(a * r ** np.arange(k)).sum() == pytest.approx(tau)
    assert preset["sourced_k"] == max(taus)


def test_mtp_deeper_than_its_sources_says_so_in_the_label_and_a_note():
    deep = _mtp().model_copy(update={"k": 5})
    assert extrapolated_beyond(deep) == 3
    assert "extrapolated beyond k=3" in describe_acceptance(deep)
    assert "extrapolated beyond k=3" in deep.acceptance.source
    (note,) = extrapolation_notes([deep, preset_method("eagle3")])
    assert "mtp at K=5" in note and "beyond k=3" in note and "\n" not in note
    shallow = _mtp().model_copy(update={"k": 3})
    assert "extrapolated" not in describe_acceptance(shallow)


def test_a_k_schedule_that_drafts_deeper_than_the_sources_is_extrapolated_too():
    scheduled = _mtp().model_copy(update={"k": 2, "k_schedule": [(1, 4, 4), (5, 64, 1)]})
    assert extrapolated_beyond(scheduled) == 3


# --- a draft that shares the target's vocabulary ----------------------------------------------


@pytest.mark.parametrize(
    ("target", "draft"),
    [
        ("qwen3-30b-a3b", "qwen3-0.6b"),
        ("qwen3-8b", "qwen3-0.6b"),
        ("llama-3.1-8b", "llama-3.2-1b"),
        ("vicuna-13b", "vicuna-68m"),  # the pair the presets were measured with
    ],
)
def test_draft_model_takes_the_packaged_draft_of_the_targets_family(target, draft):
    method = preset_method("draft_model", target=target)
    assert method.draft_model == draft
    measured_pair = draft == "vicuna-68m"
    assert method.acceptance.source.startswith("measured with a different draft pair") is not (
        measured_pair
    )


def test_methods_all_on_qwen3_moe_runs_the_qwen3_draft():
    methods = SweepFlags(methods="all", model="qwen3-30b-a3b").sweep_config(None).methods
    (draft,) = [m for m in methods if m.name == "draft_model"]
    assert draft.draft_model == "qwen3-0.6b"


@pytest.mark.parametrize("target", ["deepseek-v3", "gpt-oss-20b", "mixtral-8x7b"])
def test_methods_all_leaves_draft_model_out_where_no_packaged_draft_shares_the_vocabulary(
    target,
):
    flags = SweepFlags(methods="all", model=target)
    assert "draft_model" not in [m.name for m in flags.sweep_config(None).methods]
    why = flags.left_out({"model": target})["draft_model"]
    assert f"no packaged draft shares {target}'s" in why and "--draft-model" in why


def test_mixtral_shares_a_vocabulary_size_with_llama2_but_not_its_tokenizer():
    draft, why = family_draft("mixtral-8x7b")
    assert draft is None and "Mistral" in why


def test_methods_all_with_a_draft_named_keeps_draft_model():
    flags = SweepFlags(methods="all", model="qwen3-32b", draft_model="qwen3-0.6b", tp=2)
    assert "draft_model" not in flags.left_out({"model": "qwen3-32b"})
    (draft,) = [m for m in flags.sweep_config(None).methods if m.name == "draft_model"]
    assert draft.draft_model == "qwen3-0.6b"
    # a named draft of another tokenizer is left out, as a run of it is refused (QA: the same
    # 32,000-token count, LLaMA's tokens for Mixtral's)
    other = SweepFlags(methods="all", model="mixtral-8x7b", draft_model="vicuna-68m", tp=2)
    assert "tokenizer" in other.left_out({"model": "mixtral-8x7b"})["draft_model"]


def test_draft_model_named_for_a_target_no_draft_serves_is_one_clear_error(tmp_path):
    out = tmp_path / "s.csv"
    args = ["sweep", "--model", "deepseek-v3", "--methods", "draft_model", "--out", str(out)]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: methods.draft_model:"), res.output
    assert "129280" in lines[0] and "--draft-model" in lines[0]
    assert not out.exists()
    with pytest.raises(InputError, match="no packaged draft"):
        preset_method("draft_model", target="deepseek-v3")


def test_a_method_a_file_names_without_a_shape_runs_its_presets_as_methods_NAME_does(tmp_path):
    """QA: `- name: eagle2` ran a chain of 6 with acceptance measured on a 50-node tree (1.88x)
    where --methods eagle2 runs the dynamic tree (2.62x); a file's own fields stay on top."""
    from simspec.cli.method_flags import MethodFlags

    flags = MethodFlags()
    shaped = flags.shaped_as_preset({"name": "eagle2"}, "sharegpt", "llama-3.1-8b", None)
    assert (shaped["tree"], shaped["tree_nodes"], shaped["tree_topk"], shaped["k"]) == (
        "dynamic",
        50,
        10,
        6,
    )
    own = {"name": "eagle2", "k": 4}
    assert flags.shaped_as_preset(own, "sharegpt", "llama-3.1-8b", None) == own
    sized = {"name": "ngram", "prompt_lookup_max": 3}  # no preset min of 5 beside it (QA)
    assert flags.shaped_as_preset(sized, "sharegpt", "llama-3.1-8b", None) == sized
    acc = {"name": "eagle1", "acceptance": {"alpha": 0.7}}
    on_vllm = flags.shaped_as_preset(acc, "sharegpt", "llama-3.1-8b", "vllm")
    assert on_vllm["tree"] == "chain" and on_vllm["acceptance"] == {"alpha": 0.7}
