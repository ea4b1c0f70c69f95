"""vLLM's --speculative-config as users write it: mapped onto simspec methods, or one error."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from simspec.catalog.vllm import read_speculative_config, to_method
from simspec.cli.main import app
from simspec.errors import InputError

runner = CliRunner()


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [
        (
            {"method": "eagle3", "model": "x/EAGLE3", "num_speculative_tokens": 5},
            {"name": "eagle3", "k": 5},
        ),
        ({"method": "eagle", "num_speculative_tokens": 2}, {"name": "eagle1", "k": 2}),
        (
            {
                "method": "ngram",
                "prompt_lookup_max": 5,
                "prompt_lookup_min": 3,
                "num_speculative_tokens": 4,
            },
            {"name": "ngram", "k": 4, "prompt_lookup_min": 3, "prompt_lookup_max": 5},
        ),
        # a size left unset stays unset: the engine's own default applies (V1: neither -> 5
        # and 5, one -> the other copies it; V0: the max required, the min 1), below
        (
            {"method": "ngram"},
            {"name": "ngram", "prompt_lookup_min": None, "prompt_lookup_max": None},
        ),
        (
            {"method": "ngram", "prompt_lookup_min": 2},
            {"name": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": None},
        ),
        (
            {"model": "llama-3.2-1b", "num_speculative_tokens": 4},
            {"name": "draft_model", "k": 4, "draft_model": "llama-3.2-1b"},
        ),
        ({"method": "deepseek_mtp", "num_speculative_tokens": 1}, {"name": "mtp", "k": 1}),
        ({"method": "medusa", "num_speculative_tokens": 3}, {"name": "medusa1", "k": 3}),
        # vLLM: num_speculative_tokens for suffix defaults to the tree depth
        (
            {"method": "suffix", "suffix_decoding_max_tree_depth": 16},
            {"name": "suffix", "suffix_decoding_max_tree_depth": 16, "k": 16},
        ),
        (
            {
                "method": "eagle3",
                "num_speculative_tokens": 4,
                "disable_by_batch_size": 64,
                "num_speculative_tokens_per_batch_size": [[1, 8, 4], [9, 63, 2]],
            },
            {
                "name": "eagle3",
                "k": 4,
                "disable_by_batch_size": 64,
                "k_schedule": [(1, 8, 4), (9, 63, 2)],
            },
        ),
        (
            {"method": "eagle", "speculative_token_tree": "[(0,), (1,), (0, 0)]"},
            {"name": "eagle1", "k": 2, "tree": "static", "tree_paths": [[0], [1], [0, 0]]},
        ),
    ],
)
def test_vllm_configs_map_onto_methods(cfg, expected):
    assert to_method(cfg) == expected


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        ({"method": "eagle3", "num_spec_tokens": 3}, "speculative_config.num_spec_tokens"),
        ({"method": "mlp_speculator"}, "speculative_config.method"),
        ({}, "speculative_config.method"),
        ({"method": "eagle3", "num_speculative_tokens": 0}, "num_speculative_tokens"),
        ({"method": "eagle3", "num_speculative_tokens": "3"}, "num_speculative_tokens"),
        (
            {"method": "eagle3", "num_speculative_tokens_per_batch_size": [[8, 1, 3]]},
            "num_speculative_tokens_per_batch_size",
        ),
        (
            {"method": "eagle3", "num_speculative_tokens_per_batch_size": [[1, 8, 3], [4, 9, 2]]},
            "num_speculative_tokens_per_batch_size",
        ),
        ({"method": "eagle", "speculative_token_tree": "[(0, 0)]"}, "speculative_token_tree"),
        (
            {"method": "eagle", "speculative_token_tree": "__import__('os')"},
            "speculative_token_tree",
        ),
        ({"method": "ngram", "disable_by_batch_size": True}, "disable_by_batch_size"),
        # a target at tp=1 (to_method's default) with its draft on two GPUs
        ({"method": "eagle3", "draft_tensor_parallel_size": 2}, "draft_tensor_parallel_size"),
        ({"method": "eagle3", "draft_tensor_parallel_size": 0}, "draft_tensor_parallel_size"),
    ],
)
def test_bad_vllm_configs_name_the_key(cfg, field):
    with pytest.raises(InputError) as exc:
        to_method(cfg)
    assert field in exc.value.field


def test_config_text_inline_or_from_a_file(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"method": "ngram"}))
    assert read_speculative_config(f"@{path}") == {"method": "ngram"}
    for bad in ("{nope", "[1, 2]", f"@{tmp_path / 'missing.json'}"):
        with pytest.raises(InputError):
            read_speculative_config(bad)


@pytest.mark.slow
def test_sweep_simulates_a_vllm_config_against_autoregressive(tmp_path):
    out = tmp_path / "v.csv"
    schedule = [[1, 4, 4], [5, 64, 0]]
    spec = json.dumps(
        {
            "method": "eagle3",
            "num_speculative_tokens": 4,
            "num_speculative_tokens_per_batch_size": schedule,
        }
    )
    result = runner.invoke(
        app,
        [
            "sweep",
            "--speculative-config",
            spec,
            "--batch-sizes",
            "1,8",
            "--requests",
            "40",
            "--quiet",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out).set_index(["method", "batch_size"])
    assert frame.loc[("eagle3", 1), "speedup"] > 1.2
    # the schedule turns speculation off at 8 running requests (on again for the last few)
    assert frame.loc[("eagle3", 8), "speedup"] == pytest.approx(1.0, abs=0.03)
    bad = runner.invoke(app, ["sweep", "--speculative-config", '{"method": "eagle3", "x": 1}'])
    assert bad.exit_code == 2 and bad.output.startswith("error: speculative_config.x")


def test_the_method_map_reads_both_ways():
    """Every method simspec exports to vLLM reads back as itself; every vLLM name simspec
    accepts runs a method simspec models."""
    from simspec.catalog.vllm import METHODS, MTP_ALIASES, TO_VLLM
    from simspec.engine.speculators import SPECULATORS

    assert all(METHODS[vllm] == name for name, vllm in TO_VLLM.items())
    assert set(METHODS.values()) <= set(SPECULATORS)
    assert {METHODS[alias] for alias in MTP_ALIASES} == {"mtp"}


def test_a_schedule_without_num_speculative_tokens_builds_for_its_longest_draft():
    out = to_method({"method": "eagle3", "num_speculative_tokens_per_batch_size": [[1, 8, 4]]})
    assert out["k"] == 4


def test_a_draft_at_another_tensor_parallelism_goes_to_the_engine_not_to_the_targets():
    """vLLM takes draft_tensor_parallel_size 1 or the target's: 1 beside a sharded target
    becomes draft_tp, which V0 runs (SmallerTpProposerWorker) and V1 refuses, naming the key;
    any other value is an error naming the key, and the target's own is plain."""
    mtp = {"method": "deepseek_mtp", "num_speculative_tokens": 1}
    assert to_method({**mtp, "draft_tensor_parallel_size": 8}, tp=8) == {"name": "mtp", "k": 1}
    assert to_method({**mtp, "draft_tensor_parallel_size": 1}, tp=8)["draft_tp"] == 1
    with pytest.raises(InputError, match="tp=8"):
        to_method({**mtp, "draft_tensor_parallel_size": 2}, tp=8)
    cfg = json.dumps({**mtp, "draft_tensor_parallel_size": 1})
    args = ["sweep", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--batch-sizes", "1"]
    v1 = CliRunner().invoke(app, [*args, "--speculative-config", cfg, "--quiet"])
    assert v1.exit_code == 2
    assert "draft_tensor_parallel_size" in v1.output and "vllm-v0" in v1.output
    v0 = CliRunner().invoke(
        app, [*args, "--engine", "vllm-v0", "--speculative-config", cfg, "--requests", "64"]
    )
    assert v0.exit_code == 0, v0.output
    assert "mtp K=1 draft TP1" in v0.output
    # under --dp 8 vLLM's tensor_parallel_size is each rank's, 1: the draft's own (QA)
    dp = [
        "--tp",
        "8",
        "--dp",
        "8",
        "--ep",
        "8",
        "--batch-sizes",
        "1",
        "--requests",
        "64",
        "--quiet",
    ]
    ranks = CliRunner().invoke(app, [*args[:-4], *dp, "--speculative-config", cfg])
    assert ranks.exit_code == 0, ranks.output
    eight = json.dumps({**mtp, "draft_tensor_parallel_size": 8})
    wide = CliRunner().invoke(app, [*args[:-4], *dp, "--speculative-config", eight])
    assert wide.exit_code == 2 and "draft_tensor_parallel_size" in wide.output


def test_a_medusa_token_tree_is_refused_as_vllm_drafts_medusa_chains():
    """Only vLLM's EAGLE proposer reads speculative_token_tree; Medusa's proposes one token a
    head (QA: simspec ran the tree)."""
    from simspec.catalog.vllm import to_method
    from simspec.errors import InputError

    tree = "[(0,), (1,), (0, 0)]"
    with pytest.raises(InputError, match="chain whatever the tree says"):
        to_method({"method": "medusa", "speculative_token_tree": tree})
    assert to_method({"method": "eagle", "speculative_token_tree": tree})["tree"] == "static"


def test_a_config_file_given_without_its_at_sign_says_how_to_give_it(tmp_path):
    """QA: the file recommend --json writes, passed back by name, read as "not valid JSON"."""
    from simspec.catalog.vllm import read_speculative_config

    path = tmp_path / "spec.json"
    path.write_text('{"method": "eagle3", "num_speculative_tokens": 3}')
    with pytest.raises(InputError, match=f"give a file as @{path}"):
        read_speculative_config(str(path))
    assert read_speculative_config(f"@{path}")["method"] == "eagle3"


def test_a_k_schedule_reads_as_vllms_dense_lookup():
    """build_dynamic_sd_schedule_lookup (vllm/v1/spec_decode/dynamic/utils.py): a batch size
    between two bands or past the last takes the K of the band before it; bands start at 1
    (QA: simspec ran the base K there, and took a schedule from 5 that vLLM refuses)."""
    from pydantic import ValidationError

    from simspec.config import MethodConfig
    from simspec.engine.load_policy import LoadPolicy

    def k_at(schedule: list[list[int]], b: int, k: int = 3) -> int:
        cfg = MethodConfig(name="eagle3", k=k, k_schedule=schedule)
        return LoadPolicy.of(cfg, k, None).shape_for(b)[0]

    assert k_at([[1, 64, 1]], 100) == 1  # past the last band: its K, not the base 3
    assert k_at([[1, 8, 1], [17, 1024, 2]], 12) == 1  # a gap: the band before it
    assert [k_at([[1, 8, 2], [9, 16, 0]], b) for b in (1, 9, 40)] == [2, 0, 0]
    with pytest.raises(ValidationError, match="start at 1"):
        MethodConfig(name="eagle3", k=3, k_schedule=[[5, 1024, 1]])
    config = {"method": "eagle3", "num_speculative_tokens": 3}
    late = {**config, "num_speculative_tokens_per_batch_size": [[5, 1024, 1]]}
    with pytest.raises(InputError, match="must start at 1") as err:
        to_method(late)
    assert err.value.field == "speculative_config.num_speculative_tokens_per_batch_size"


def test_a_policy_lists_only_the_ks_its_schedule_runs():
    """With vLLM's lookup every batch size has a band's K, so the method's own K is a fixed
    setting the policy never uses unless a band names it."""
    from simspec.studies.policy import Policy, PolicyConfig, settings

    cfg = PolicyConfig(
        method={"name": "eagle3", "k": 3, "acceptance": {"alpha": 0.7}},
        policy=Policy(k_schedule=[[1, 4, 1], [5, 1024, 0]]),
    )
    assert [name for name, _ in settings(cfg)] == ["autoregressive", "fixed K=1", "policy"]


def test_a_config_without_a_method_takes_the_one_vllm_picks_from_its_model():
    """vLLM's SpeculativeConfig.__post_init__ picks n-gram for "[ngram]", EAGLE for a model
    named "eagle-", EAGLE-3 for one named "eagle3", else a draft model (QA: an EAGLE-3 head
    given as its model alone ran as a stand-alone draft)."""
    picked = {
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B": "eagle3",
        "yuhuili/EAGLE-LLaMA3-Instruct-8B": "eagle1",
        "[ngram]": "ngram",
        "ngram": "ngram",
        "meta-llama/Llama-3.2-1B-Instruct": "draft_model",
    }
    for model, name in picked.items():
        assert to_method({"model": model, "num_speculative_tokens": 3})["name"] == name, model


def test_an_unset_ngram_size_takes_the_engines_own_default():
    """vLLM V1 copies the size given (neither: 5 and 5); V0 (before 0.8) required the max and
    took 1 for the min (QA: V1's rule ran a V0 max of 4 as 4..4, tau 20-30 % low)."""
    from simspec.config import MethodConfig
    from simspec.engine.speculators.lookup import matched_sizes

    def sizes(engine: str, **given: int) -> tuple[int, int] | None:
        return matched_sizes(MethodConfig(name="ngram", k=3, **given), engine)

    assert sizes("vllm") == (5, 5) and sizes("vllm", prompt_lookup_max=4) == (4, 4)
    assert sizes("vllm-v0", prompt_lookup_max=4) == (1, 4)
    assert sizes("vllm-v0", prompt_lookup_min=2, prompt_lookup_max=4) == (2, 4)
    with pytest.raises(InputError, match="prompt_lookup_max: vLLM V0 .* requires it"):
        sizes("vllm-v0")
