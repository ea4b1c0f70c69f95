"""Scenario files and callers that write the older spellings (``trace`` for a workload's
dataset, ``arrival: trace``, ``acceptance: {trace, trace_method}``) get the same scenario as
with the current names; writing both spellings of one field is refused, naming both."""

import pytest
from typer.testing import CliRunner

from simspec.cli.main import app
from simspec.cli.sweep_flags import SweepFlags
from simspec.config import AcceptanceConfig, Scenario, WorkloadConfig

OLD = """\
workload: {requests: 12, trace: gsm8k, trace_output_method: eagle3}
methods:
  - name: eagle3
    acceptance: {trace: sharegpt, trace_method: eagle3}
"""
NEW = """\
workload: {requests: 12, lengths_from: gsm8k, lengths_from_method: eagle3}
methods:
  - name: eagle3
    acceptance: {acc_len: sharegpt, acc_len_method: eagle3}
"""


def test_old_keywords_build_the_same_configs():
    assert WorkloadConfig(trace="cnn", trace_output_method="eagle3") == WorkloadConfig(
        lengths_from="cnn", lengths_from_method="eagle3"
    )
    assert AcceptanceConfig(trace="gsm8k", trace_method="ngram") == AcceptanceConfig(
        acc_len="gsm8k", acc_len_method="ngram"
    )
    replay = {"arrival_trace": "azure-conv", "trace_end_s": 60.0}
    old = WorkloadConfig(arrival="trace", **replay)
    assert old == WorkloadConfig(arrival="replay", **replay)
    assert old.arrival == "replay" and old.lengths_from is None


def test_a_dump_writes_the_current_names_and_loads_back():
    sc = Scenario.model_validate(
        {
            "workload": {"trace": "gsm8k"},
            "method": {"name": "eagle3", "acceptance": {"trace": "cnn", "trace_method": "eagle3"}},
        }
    )
    dumped = sc.model_dump()
    assert dumped["workload"]["lengths_from"] == "gsm8k" and "trace" not in dumped["workload"]
    acceptance = dumped["method"]["acceptance"]
    assert (acceptance["acc_len"], acceptance["acc_len_method"]) == ("cnn", "eagle3")
    assert "trace" not in acceptance and "trace_method" not in acceptance
    assert Scenario.model_validate(dumped) == sc


@pytest.mark.parametrize(
    ("model", "fields", "names"),
    [
        (WorkloadConfig, {"trace": "cnn", "lengths_from": "gsm8k"}, ("lengths_from", "trace")),
        (
            WorkloadConfig,
            {"trace_output_method": "eagle3", "lengths_from_method": "eagle3"},
            ("lengths_from_method", "trace_output_method"),
        ),
        (
            AcceptanceConfig,
            {"trace": "cnn", "acc_len": "cnn", "acc_len_method": "eagle3"},
            ("acc_len", "trace"),
        ),
        (
            AcceptanceConfig,
            {"acc_len": "cnn", "trace_method": "eagle3", "acc_len_method": "eagle3"},
            ("acc_len_method", "trace_method"),
        ),
    ],
)
def test_both_spellings_at_once_are_refused_by_name(model, fields, names):
    new, old = names
    with pytest.raises(ValueError, match=f"give {new} or its older spelling {old}, not both"):
        model(**fields)


def test_an_old_spelled_file_is_the_new_spelled_one(tmp_path):
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old.write_text(OLD)
    new.write_text(NEW)
    assert SweepFlags().sweep_config(old) == SweepFlags().sweep_config(new)


def test_a_flag_replaces_an_old_spelled_field(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("workload: {requests: 12, trace: gsm8k}\n")
    assert SweepFlags(dataset="cnn").sweep_config(old).workload.lengths_from == "cnn"


def test_a_file_with_both_spellings_is_refused_naming_both(tmp_path):
    both = tmp_path / "both.yaml"
    both.write_text("workload: {requests: 4, trace: gsm8k, lengths_from: cnn}\n")
    result = CliRunner().invoke(app, ["sweep", "--config", str(both), "--batch-sizes", "1"])
    assert result.exit_code == 2, result.output
    assert "give lengths_from or its older spelling trace, not both" in result.output
