"""``simspec calibrate bench``: a deployment's own constants fitted to its benchmark runs, the
profile it writes (provenance, held-out check), ``--profile`` wherever a deployment is, and
``--acceptance-from``.

The fits run on small runs written by simspec itself from a known deployment (a few requests
of a few tokens), so each test is fast and the truth is known; the GPUStack Qwen3-8B/H100 runs
are fitted once, in the slow test of the issue's done-when. Hostile inputs end in one
``error:`` line naming why, exit 2, nothing written.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from simspec.catalog.hardware import load_engine, load_profile
from simspec.cli.main import app
from simspec.config import LengthSpec, Scenario, WorkloadConfig
from simspec.engine.build import build_cost_model
from simspec.engine.costmodel import BatchShape
from simspec.engine.simulation import simulate
from simspec.errors import InputError
from simspec.studies.bench import read_result
from simspec.studies.bench.calibrate import (
    calibrate,
    calibrated_profile,
    deployed,
    profile_text,
    split,
)
from simspec.studies.bench.compare import plan_run
from simspec.studies.bench.vllm_json import vllm_result
from tests.conftest import ROOT
from tests.refusals import one_error

runner = CliRunner()
DATA = ROOT / "tests" / "data" / "bench"
DEPLOY = ["--model", "qwen3-8b", "--gpu", "h100_sxm"]
# the deployment the small runs are "measured" on: slower host than the vllm profile's
TRUTH = {"step_overhead_s": 2.0e-3, "step_overhead_per_seq_s": 20e-6, "gpu_time_scale": 1.0}


def truth_profile(tmp_path: Path, params: dict[str, float] = TRUTH) -> Path:
    base = load_profile("h100_sxm")
    path = tmp_path / "truth.yaml"
    path.write_text(profile_text(deployed(base, "vllm", params)))
    return path


def measured_run(tmp_path: Path, concurrency: int, profile: Path | None, **over) -> Path:
    """A small closed-loop run of plain decoding, written as vllm bench serve --save-result
    writes one, its numbers simspec's on ``profile``."""
    work = WorkloadConfig(
        concurrency=concurrency,
        requests=4,
        measure="whole",
        lengths_from=None,
        prompt=LengthSpec(mean=16),
        output=LengthSpec(mean=8),
    )
    ref = None if profile is None else str(profile)
    sc = Scenario(model="qwen3-8b", gpu="h100_sxm", workload=work, profile=ref)
    data = {**vllm_result(simulate(sc)), **over}
    path = tmp_path / f"c{concurrency}.json"
    path.write_text(json.dumps(data))
    return path


def plans(tmp_path: Path, paths: list[Path]):
    deploy = {"model": "qwen3-8b", "gpu": "h100_sxm"}
    runs = [r for p in paths for r in read_result(p)]
    return [plan_run(r, deploy, "autoregressive", None, None, tmp_path) for r in runs]


def fitted(tmp_path: Path, loads=(1, 4)):
    truth = truth_profile(tmp_path)
    paths = [measured_run(tmp_path, c, truth) for c in loads]
    base, engine = load_profile("h100_sxm"), load_engine("vllm")
    return calibrate(plans(tmp_path, paths), base, engine, 1024), paths


# -- the fit ------------------------------------------------------------------------------------
def test_the_fit_reproduces_runs_of_a_slower_host_that_the_base_profile_misses(tmp_path):
    cal, _ = fitted(tmp_path)
    assert max(abs(r["rel_error"]) for r in cal.base_rows) > 0.05  # the base is off
    assert max(abs(r["rel_error"]) for r in cal.fit.rows) < 0.01
    assert cal.fit.params["step_overhead_s"] > cal.base["step_overhead_s"]
    assert cal.fit.at_bound == []


def test_a_run_the_fit_cannot_explain_is_named(tmp_path):
    """QA: a run whose TPOTs were x1000 (seconds read as ms) fitted at exit 0, its -99.9 %
    unsaid, the priors holding the constants."""
    truth = truth_profile(tmp_path)
    paths = [measured_run(tmp_path, c, truth) for c in (1, 4)]
    data = json.loads(paths[1].read_text())
    for key in [k for k in data if k.endswith("tpot_ms")]:
        data[key] *= 1000
    paths[1].write_text(json.dumps(data))
    out = tmp_path / "mine.yaml"
    result = runner.invoke(
        app, ["calibrate", "bench", *map(str, paths), *DEPLOY, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "off after the fit" in text and "units" in text
    # a fit pinned at its bounds is written suspect, as calibrate fit's are, and a run on it
    # names the file and says so (QA: it read "calibrated" and "h100_sxm's own profile")
    profile = load_profile(str(out))
    assert profile.deployment is not None
    pinned = profile.deployment.fit.get("at_bound")
    assert profile.status.startswith("suspect") == bool(pinned), (pinned, profile.status)
    from simspec.config import Deployment
    from simspec.studies.provenance import rests_on

    line = rests_on(Deployment(model="qwen3-8b", gpu="h100_sxm", profile=str(out)), [])
    assert "profile '" in line and "mine.yaml" in line and profile.status[:20] in line
    # calibrate report shows the bench fit itself, not only its base's kernel fit
    shown = runner.invoke(app, ["calibrate", "report", "--profile", str(out)])
    assert shown.exit_code == 0, shown.output
    assert "fitted runs, measured vs predicted" in " ".join(shown.output.split())


def test_the_fit_is_deterministic(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    first, _ = fitted(tmp_path / "a")
    second, _ = fitted(tmp_path / "b")
    assert first.fit.params == second.fit.params
    assert first.fit.rows == second.fit.rows


def test_runs_the_base_profile_already_predicts_leave_the_constants_where_they_were(tmp_path):
    paths = [measured_run(tmp_path, c, None) for c in (1, 4)]
    cal = calibrate(plans(tmp_path, paths), load_profile("h100_sxm"), load_engine("vllm"), 1024)
    for key, value in cal.base.items():
        assert cal.fit.params[key] == pytest.approx(value, rel=1e-3, abs=1e-7)


def test_ttft_is_not_fitted_and_closed_loops_below_the_batch_limit_fit_tpot_only(tmp_path):
    cal, _ = fitted(tmp_path)
    assert cal.metrics == ("mean_tpot_ms",)


def test_throughput_is_fitted_where_requests_queued_for_the_engine(tmp_path):
    truth = truth_profile(tmp_path)
    paths = [measured_run(tmp_path, c, truth) for c in (1, 4)]
    cal = calibrate(plans(tmp_path, paths), load_profile("h100_sxm"), load_engine("vllm"), 2)
    assert cal.metrics == ("mean_tpot_ms", "output_throughput_tok_s")
    assert [r["load"] for r in cal.fit.rows if r["metric"] != "mean_tpot_ms"] == ["concurrency 4"]


def test_more_than_three_loads_are_checked_on_loads_the_fit_did_not_see(tmp_path):
    cal, _ = fitted(tmp_path, loads=(1, 2, 3, 4))
    assert cal.heldout is not None
    assert (
        cal.heldout_split
        == "fitted on concurrency 1, concurrency 3, concurrency 4; held out concurrency 2"
    )
    assert [r["load"] for r in cal.heldout.rows] == ["concurrency 2"]
    assert abs(cal.heldout.rows[0]["rel_error"]) < 0.01


def test_the_split_holds_out_every_other_load_between_the_lowest_and_the_highest(tmp_path):
    paths = [measured_run(tmp_path, c, None) for c in (1, 2, 3, 4, 5)]
    on, out, words = split(plans(tmp_path, paths))
    assert [p.run.max_concurrency for p in on] == [1, 3, 5]
    assert [p.run.max_concurrency for p in out] == [2, 4]
    assert words.startswith("fitted on concurrency 1, concurrency 3, concurrency 5")


def test_three_loads_or_fewer_have_no_held_out_check(tmp_path):
    cal, _ = fitted(tmp_path, loads=(1, 2, 4))
    assert cal.heldout is None


# -- the profile written ------------------------------------------------------------------------
def test_the_profile_keeps_every_gpu_constant_and_records_files_hashes_and_errors(tmp_path):
    out = tmp_path / "mine.yaml"
    truth = truth_profile(tmp_path)
    paths = [measured_run(tmp_path, c, truth) for c in (1, 4)]
    result = runner.invoke(
        app, ["calibrate", "bench", *map(str, paths), *DEPLOY, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    profile, base = load_profile(str(out)), load_profile("h100_sxm")
    assert profile.params == base.params and profile.gpu == base.gpu
    record = profile.deployment.fit
    assert profile.deployment.engine == "vllm"
    assert [f["sha256"] for f in record["files"]] == [
        hashlib.sha256(p.read_bytes()).hexdigest() for p in paths
    ]
    assert [f["path"] for f in record["files"]] == [str(p) for p in paths]
    assert [r["load"] for r in record["runs"]] == ["concurrency 1", "concurrency 4"]
    assert all(abs(r["rel_error"]) < 0.01 for r in record["runs"])
    assert "TTFT" in record["not_fitted"] and record["model"] == "qwen3-8b"
    assert "fit MAPE" in result.output


def test_a_calibrated_profile_predicts_with_compare_what_the_fit_predicted(tmp_path):
    cal, paths = fitted(tmp_path)
    profile = calibrated_profile(
        cal, load_profile("h100_sxm"), "h100_sxm", load_engine("vllm"), [], "qwen3-8b", 1
    )
    path = tmp_path / "mine.yaml"
    path.write_text(profile_text(profile))
    out = tmp_path / "cmp.json"
    args = ["compare", str(paths[0]), *DEPLOY, "--profile", str(path), "--out", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    (tpot,) = [r for r in json.loads(out.read_text()) if r["metric"] == "mean_tpot_ms"]
    assert tpot["predicted"] == pytest.approx(cal.fit.rows[0]["predicted"], rel=1e-6)
    # at another TP the constants are another server's: said (QA: applied without a word)
    result = runner.invoke(app, [*args, "--tp", "2"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert (
        "deployment constants were fitted on qwen3-8b at tp=1, applied to qwen3-8b at tp=2" in text
    )
    assert "deployment constants were" not in " ".join(runner.invoke(app, args).output.split())


def test_the_deployment_constants_enter_every_forward(tmp_path):
    params = {"step_overhead_s": 3e-3, "step_overhead_per_seq_s": 1e-4, "gpu_time_scale": 1.5}
    base = build_cost_model(Scenario(model="qwen3-8b", gpu="h100_sxm"))
    mine = build_cost_model(
        Scenario(model="qwen3-8b", gpu="h100_sxm", profile=str(truth_profile(tmp_path, params)))
    )
    batch = BatchShape.uniform(8, 1, 8 * 512, 8)
    a, b = base.forward(_qwen(), batch), mine.forward(_qwen(), batch)
    gpu = a.total_s - a.overhead_s
    assert b.total_s - b.overhead_s == pytest.approx(1.5 * gpu)
    assert b.overhead_s == pytest.approx(3e-3 + 8 * 1e-4)


def _qwen():
    from simspec.catalog.models import load_model

    return load_model("qwen3-8b")


# -- hostile inputs -----------------------------------------------------------------------------
def test_one_run_is_refused_naming_why(tmp_path):
    out = tmp_path / "p.yaml"
    path = DATA / "qwen3-8b-h100-bs1.json"
    result = runner.invoke(app, ["calibrate", "bench", str(path), "--out", str(out)])
    one_error(result, "RESULT", "one run", "two loads")
    assert not out.exists()


def test_runs_all_at_one_load_are_refused_naming_why(tmp_path):
    one = measured_run(tmp_path, 1, None)
    data = json.loads(one.read_text())
    other = tmp_path / "again.json"  # a second run at the same load, a second longer
    longer = data["duration"] + 1.0
    rates = ("request_throughput", "output_throughput", "total_token_throughput")
    scaled = {k: data[k] * data["duration"] / longer for k in rates if k in data}
    other.write_text(json.dumps({**data, **scaled, "duration": longer}))
    result = runner.invoke(app, ["calibrate", "bench", str(one), str(other), "--out", "p.yaml"])
    one_error(result, "2 runs, all at concurrency 1", "two loads")


def test_one_run_in_two_forms_is_refused_not_fitted_twice(tmp_path):
    """QA: bs8.json and the block the same benchmark printed (bs8.txt) were fitted as two runs,
    moving the fit; only byte-identical copies were refused."""
    paths = [DATA / f"qwen3-8b-h100-{n}" for n in ("bs1.json", "bs8.json", "bs8.txt")]
    result = runner.invoke(app, ["calibrate", "bench", *map(str, paths), "--out", "p.yaml"])
    one_error(result, "bs8.txt is the run qwen3-8b-h100-bs8.json holds", "count twice")
    compared = runner.invoke(app, ["compare", *map(str, paths[1:]), "--model", "qwen3-8b"])
    one_error(compared, "bs8.txt is the run")


def test_runs_of_different_models_are_refused_naming_both(tmp_path):
    a = measured_run(tmp_path, 1, None)
    b = measured_run(tmp_path, 4, None, model_id="meta-llama/Llama-3.1-8B-Instruct")
    result = runner.invoke(app, ["calibrate", "bench", str(a), str(b), "--out", "p.yaml"])
    one_error(result, "RESULT", "qwen3-8b", "Llama-3.1-8B", "one model")


def test_runs_of_different_gpus_are_refused_by_their_gpu_metadata(tmp_path):
    a = measured_run(tmp_path, 1, None, gpu="H100")
    b = measured_run(tmp_path, 4, None, gpu="A100")
    result = runner.invoke(app, ["calibrate", "bench", str(a), str(b), "--out", "p.yaml"])
    one_error(result, "RESULT", "H100", "A100", "one GPU")


def test_runs_whose_gpu_metadata_contradicts_gpu_are_refused(tmp_path):
    a = measured_run(tmp_path, 1, None, gpu="a100_80gb")
    b = measured_run(tmp_path, 4, None, gpu="a100_80gb")
    result = runner.invoke(
        app, ["calibrate", "bench", str(a), str(b), "--gpu", "h100_sxm", "--out", "p.yaml"]
    )
    one_error(result, "--gpu", "a100_80gb")


def test_one_runs_gpu_label_is_not_taken_for_runs_that_state_none(tmp_path):
    """QA: a100_80gb from one run's metadata was applied to an unlabelled run too, and both
    were fitted as A100 runs; --gpu settles it."""
    a = measured_run(tmp_path, 1, None)
    b = measured_run(tmp_path, 4, None, gpu="a100_80gb")
    out = tmp_path / "p.yaml"
    result = runner.invoke(app, ["calibrate", "bench", str(a), str(b), "--out", str(out)])
    one_error(result, "RESULT", "a100_80gb", "states no GPU", "--gpu")
    assert not out.exists()


def test_a_base_profile_of_another_gpu_is_refused_before_it_labels_the_fit(tmp_path):
    """QA: --profile a100_80gb on H100 runs wrote a profile saying gpu a100_80gb, its
    deployment constants fitted on H100 runs at H100 peaks."""
    paths = [DATA / "qwen3-8b-h100-bs1.json", DATA / "qwen3-8b-h100-bs8.json"]
    out = tmp_path / "p.yaml"
    args = ["calibrate", "bench", *map(str, paths), "--profile", "a100_80gb", "--out", str(out)]
    # runs that name no GPU run on the default one (their GPU is the runs', not the base
    # profile's); a --gpu, or runs' gpu metadata, of another GPU than the profile's is refused
    one_error(runner.invoke(app, args), "--profile", "a100_80gb", "h100_sxm", "--gpu")
    gpu = runner.invoke(app, [*args, "--gpu", "h100_sxm"])
    one_error(gpu, "--profile", "a100_80gb", "h100_sxm")
    assert not out.exists()
    named = [measured_run(tmp_path, c, None, gpu="h100_sxm") for c in (1, 4)]
    args = ["calibrate", "bench", *map(str, named), "--profile", "a100_80gb", "--out", str(out)]
    result = runner.invoke(app, args)  # after the note of the GPU the runs name
    assert result.exit_code == 2 and result.output.splitlines()[-1].startswith("error: --profile")
    assert not out.exists()


def test_a_speculative_run_is_refused(tmp_path):
    a = measured_run(tmp_path, 1, None)
    b = measured_run(tmp_path, 4, None, spec_decode_acceptance_length=2.5)
    result = runner.invoke(app, ["calibrate", "bench", str(a), str(b), "--out", "p.yaml"])
    one_error(result, "c4.json", "speculative decoding", "plain-decoding")


def test_a_run_without_mean_tpot_is_refused(tmp_path):
    a = measured_run(tmp_path, 1, None)
    b = measured_run(tmp_path, 4, None, mean_tpot_ms=None)
    result = runner.invoke(app, ["calibrate", "bench", str(a), str(b), "--out", "p.yaml"])
    one_error(result, "no mean TPOT")


def test_a_run_whose_mean_tpot_is_0_is_refused_not_divided_by(tmp_path):
    """QA: mean_tpot_ms 0 passed the reader (>= 0) and the fit's relative error divided by it,
    a ZeroDivisionError traceback."""
    a = measured_run(tmp_path, 1, None)
    b = measured_run(tmp_path, 4, None, mean_tpot_ms=0)
    out = tmp_path / "p.yaml"
    result = runner.invoke(app, ["calibrate", "bench", str(a), str(b), "--out", str(out)])
    one_error(result, "c4.json", "mean_tpot_ms is 0", "must be > 0")
    assert not out.exists()


def test_an_output_the_command_does_not_write_is_refused_before_any_run(tmp_path):
    paths = [DATA / "qwen3-8b-h100-bs1.json", DATA / "qwen3-8b-h100-bs8.json"]
    result = runner.invoke(
        app, ["calibrate", "bench", *map(str, paths), "--out", str(tmp_path / "p.txt")]
    )
    one_error(result, "--out", ".yaml")


def test_a_profile_calibrated_on_one_engine_is_refused_on_another(tmp_path):
    path = truth_profile(tmp_path)
    sc = Scenario(model="qwen3-8b", gpu="h100_sxm", engine="sglang", profile=str(path))
    with pytest.raises(InputError, match="calibrated on engine vllm, not sglang"):
        build_cost_model(sc)


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("gpu_time_scale", 5.0, "[0.5, 2.0]"),
        ("step_overhead_s", -1e-3, "[0.0, 1.0]"),
        ("kernel_magic", 1.0, "not one of"),
    ],
)
def test_a_profile_with_a_deployment_constant_out_of_range_is_refused(tmp_path, key, value, needle):
    path = truth_profile(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["deployment"]["params"][key] = {"value": value, "source": "hand-edited"}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as exc:
        load_profile(str(path))
    assert exc.value.field == "profile" and needle in exc.value.message


# -- --profile wherever a deployment is ---------------------------------------------------------
def test_plan_recommend_and_fleet_take_profile(tmp_path):
    from simspec.cli.flags import DeploymentFlags

    flags = DeploymentFlags(profile="mine.yaml", gpu="h100_sxm")  # a GPU given: not read here
    assert flags.deployment(None).profile == "mine.yaml"
    for command in ("plan", "recommend", "fleet", "validate", "sweep", "compare"):
        assert "--profile" in runner.invoke(app, [command, "--help"]).output, command


def test_validate_runs_the_rows_on_the_profiles_gpu_and_engine_with_it(tmp_path):
    from simspec.studies.validation.predict import CasePlan
    from simspec.studies.validation.run import on_profile

    ref = str(truth_profile(tmp_path))
    prof = load_profile(ref)
    h100 = CasePlan("tpot_ms", 7.0, Scenario(model="qwen3-8b", gpu="h100_sxm"))
    h200 = CasePlan("tpot_ms", 7.0, Scenario(model="qwen3-8b", gpu="h200"))
    sglang = CasePlan("tpot_ms", 7.0, Scenario(model="qwen3-8b", gpu="h100_sxm", engine="sglang"))
    assert on_profile(h100, ref, prof).scenario.profile == ref
    assert f"hardware profile {ref}" in on_profile(h100, ref, prof).assumptions
    assert on_profile(h200, ref, prof) is h200
    assert on_profile(sglang, ref, prof) is sglang


def test_a_bad_profile_is_refused_by_validate_before_any_row(tmp_path):
    result = runner.invoke(app, ["validate", "--profile", str(tmp_path / "none.yaml")])
    one_error(result, "profile", "no such file")


# -- --acceptance-from --------------------------------------------------------------------------
def chosen(tmp_path: Path, data, name: str = "acc.json", **flags):
    from simspec.cli.method_flags import MethodFlags

    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    mf = MethodFlags(acceptance_from=path, **flags)
    return mf.chosen({"model": "llama-3.1-8b"}, ["eagle3"], [], "sharegpt")


def spec_run(**over) -> dict:
    data = {**json.loads((DATA / "qwen3-8b-h100-bs4.json").read_text()), **over}
    if "total_output_tokens" in over:  # vLLM's throughput is the total over the duration
        data["output_throughput"] = data["total_output_tokens"] / data["duration"]
    return data


def test_a_servers_per_position_acceptance_becomes_the_methods_alpha(tmp_path):
    (m,) = chosen(tmp_path, spec_run(spec_decode_per_position_acceptance_rates=[0.8, 0.4, 0.1]))
    assert m["k"] == 3 and m["acceptance"]["alpha"] == pytest.approx([0.8, 0.5, 0.25])
    assert "acceptance-from" in m["acceptance"]["source"] or "acc.json" in m["acceptance"]["source"]


def test_sglangs_accept_length_becomes_tau_at_the_methods_k(tmp_path):
    line = {
        "backend": "sglang",
        "completed": 4,
        "duration": 1.0,
        "total_input_tokens": 40,
        "total_output_tokens": 40,
        "mean_e2e_latency_ms": 100.0,
        "accept_length": 2.6,
    }
    (m,) = chosen(tmp_path, json.dumps(line) + "\n", "sg.jsonl", k=4)
    assert (m["acceptance"]["tau"], m["acceptance"]["tau_k"], m["k"]) == (2.6, 4, 4)


def test_a_metrics_dump_gives_the_acceptance(tmp_path):
    dump = (
        'vllm:spec_decode_num_drafts_total{engine="0"} 100\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 200\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 110\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 80\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 30\n'
    )
    (m,) = chosen(tmp_path, dump, "metrics.txt")
    assert m["acceptance"]["alpha"] == pytest.approx([0.8, 0.375])


def test_runs_of_one_server_are_pooled_by_their_output_tokens(tmp_path):
    a = spec_run(spec_decode_per_position_acceptance_rates=[0.8, 0.4], total_output_tokens=300)
    b = spec_run(spec_decode_per_position_acceptance_rates=[0.4, 0.2], total_output_tokens=100)
    (m,) = chosen(tmp_path, json.dumps(a) + "\n" + json.dumps(b) + "\n", "runs.jsonl")
    assert m["acceptance"]["alpha"] == pytest.approx([0.7, 0.35 / 0.7])


def test_runs_that_say_their_drafts_are_pooled_by_them(tmp_path):
    """QA: a share is per draft, so the pool is the accepted over the drafts; weighted by
    output tokens, two runs of 10,000 drafts each at 0.8 and 0.6 pooled to 0.7009."""
    rates = [0.8, 0.4]
    a = spec_run(spec_decode_per_position_acceptance_rates=rates, total_output_tokens=300,
                 spec_decode_num_drafts=1000)  # fmt: skip
    b = spec_run(spec_decode_per_position_acceptance_rates=[0.4, 0.2], total_output_tokens=100,
                 spec_decode_num_drafts=3000)  # fmt: skip
    (m,) = chosen(tmp_path, json.dumps(a) + "\n" + json.dumps(b) + "\n", "runs.jsonl")
    assert m["acceptance"]["alpha"] == pytest.approx([0.5, 0.25 / 0.5])
    assert "the drafts it counted" in m["acceptance"]["source"]


def test_runs_of_different_draft_lengths_are_not_pooled_into_one_tau(tmp_path):
    """QA: a K=3 and a K=5 run (both with vLLM's acceptance length) pooled into one τ at K=3."""
    a = spec_run(spec_decode_per_position_acceptance_rates=[0.8, 0.6, 0.45],
                 spec_decode_acceptance_length=2.85)  # fmt: skip
    b = spec_run(spec_decode_per_position_acceptance_rates=[0.8, 0.6, 0.45, 0.3, 0.2],
                 spec_decode_acceptance_length=3.35)  # fmt: skip
    with pytest.raises(InputError, match="different draft lengths"):
        chosen(tmp_path, json.dumps(a) + "\n" + json.dumps(b) + "\n", "runs.jsonl")


def test_a_v0_servers_metrics_are_named_as_such(tmp_path):
    """QA: V0's counters (no num_drafts) were read as '0 drafts counted (a later dump ...)'."""
    dump = (
        'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 18600.0\n'
        'vllm:spec_decode_num_draft_tokens_total{model_name="m"} 30000.0\n'
        'vllm:spec_decode_num_emitted_tokens_total{model_name="m"} 28600.0\n'
    )
    with pytest.raises(InputError, match="vLLM V0's counters"):
        chosen(tmp_path, dump, "metrics.txt")


def test_a_file_that_measured_no_acceptance_is_refused_by_the_flag(tmp_path):
    with pytest.raises(InputError) as exc:
        chosen(tmp_path, spec_run())
    assert exc.value.field == "--acceptance-from" and "no acceptance" in exc.value.message


def test_acceptance_from_with_alpha_is_refused(tmp_path):
    with pytest.raises(InputError, match="not two of them"):
        chosen(tmp_path, spec_run(spec_decode_acceptance_length=2.0), alpha=0.7)


def test_a_k_other_than_the_positions_drafted_is_refused(tmp_path):
    run = spec_run(spec_decode_per_position_acceptance_rates=[0.8, 0.4, 0.1])
    with pytest.raises(InputError) as exc:
        chosen(tmp_path, run, k=5)
    assert exc.value.field == "--k" and "drafted 3 tokens" in exc.value.message


def test_every_command_that_takes_method_flags_takes_acceptance_from(tmp_path):
    for command in ("sweep", "plan", "recommend", "fleet", "policy"):
        assert "--acceptance-from" in runner.invoke(app, [command, "--help"]).output, command
    missing = str(tmp_path / "none.json")
    result = runner.invoke(app, ["sweep", "--methods", "eagle3", "--acceptance-from", missing])
    one_error(result, "--acceptance-from", "no such file")


# -- the done-when, on GPUStack's runs --------------------------------------------------
@pytest.mark.slow
def test_fitted_on_concurrency_1_and_8_compare_predicts_2_and_4_within_5_percent(tmp_path):
    out = tmp_path / "gpustack.yaml"
    fit_on = [str(DATA / f"qwen3-8b-h100-bs{c}.json") for c in (1, 8)]
    result = runner.invoke(
        app, ["calibrate", "bench", *fit_on, "--gpu", "h100_sxm", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    table = tmp_path / "cmp.csv"
    others = [str(DATA / f"qwen3-8b-h100-bs{c}.txt") for c in (2, 4)]
    args = ["compare", *others, *DEPLOY, "--profile", str(out), "--out", str(table)]
    assert runner.invoke(app, args).exit_code == 0
    import pandas as pd

    rows = pd.read_csv(table)
    tpot = rows[rows.metric == "mean_tpot_ms"]
    assert len(tpot) == 2 and (tpot.rel_error.abs() < 0.05).all(), tpot


# -- the explorer's compare view ----------------------------------------------------------------
def test_an_uploaded_result_is_compared_on_the_sidebars_deployment(tmp_path):
    from simspec.ui import uploads
    from simspec.ui.compare import compare_upload
    from simspec.ui.inputs import ExplorerInputs

    data = measured_run(tmp_path, 2, None).read_bytes()
    path = uploads.save_result_upload(data, "mine.json", tmp_path)
    done = compare_upload(path, ExplorerInputs(gpu="h100_sxm"))
    tpot = done.frame[done.frame.metric == "mean_tpot_ms"]
    assert tpot.rel_error.abs().max() < 1e-9  # a simspec run of this deployment, read back
    assert done.figure.layout.title.text.startswith("Measured")
    assert any("model qwen3-8b, as the file names it" in n for n in done.notes)


def test_an_uploaded_profile_moves_the_prediction(tmp_path):
    from simspec.ui import uploads
    from simspec.ui.compare import compare_upload
    from simspec.ui.inputs import ExplorerInputs

    truth = truth_profile(tmp_path)
    result = uploads.save_result_upload(
        measured_run(tmp_path, 2, truth).read_bytes(), "m.json", tmp_path
    )
    profile = uploads.save_profile_upload(truth.read_bytes(), "truth.yaml", tmp_path)
    inputs = ExplorerInputs(gpu="h100_sxm")
    base, mine = compare_upload(result, inputs), compare_upload(result, inputs, profile=profile)
    err = {
        n: d.frame.set_index("metric").rel_error["mean_tpot_ms"]
        for n, d in (("b", base), ("m", mine))
    }
    assert abs(err["b"]) > 0.05 and abs(err["m"]) < 1e-9


@pytest.mark.parametrize(
    ("name", "data", "needle"),
    [
        ("r.csv", b"{}", "expected a .json, .jsonl or .txt"),
        ("r.json", b"", "empty"),
        ("r.json", b"[1, 2", "not valid JSON"),
        ("r.json", json.dumps({"completed": 3}).encode(), "duration"),
    ],
)
def test_a_hostile_result_upload_is_one_message_and_is_not_kept(tmp_path, name, data, needle):
    from simspec.ui import uploads

    with pytest.raises(InputError) as exc:
        uploads.save_result_upload(data, name, tmp_path)
    assert exc.value.field == "benchmark result" and needle in exc.value.message
    assert list(tmp_path.iterdir()) == []


def test_a_hostile_profile_upload_is_one_message_and_is_not_kept(tmp_path):
    from simspec.ui import uploads

    with pytest.raises(InputError) as exc:
        uploads.save_profile_upload(b"gpu: h100_sxm\nparams: {}\n", "p.yaml", tmp_path)
    assert exc.value.field == "profile" and "missing" in exc.value.message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.xdist_group("explorer_page")  # with tests/test_app.py's page tests
def test_the_explorers_compare_tab_shows_measured_against_predicted(tmp_path):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.run()
    assert at.tabs[9].label == "Compare"
    data = (DATA / "qwen3-8b-h100-bs8.txt").read_bytes()
    at.file_uploader[0].set_value(("bs8.txt", data, "text/plain")).run()
    next(b for b in at.button if b.label == "Compare with simspec").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    table = at.dataframe[-1].value
    assert "mean_tpot_ms" in set(table["metric"]) and "error %" in table.columns
    assert any("concurrency 8" in str(c.value) for c in at.caption)


def test_compare_runs_on_the_gpu_the_runs_name_and_refuses_another(tmp_path):
    """QA: a run labelled a100_80gb was predicted on the default h100_sxm without a word;
    calibrate bench refused the same file. Both now read the label the same way."""
    raw = json.loads((DATA / "qwen3-8b-h100-bs1.json").read_text())
    path = tmp_path / "a100.json"
    path.write_text(json.dumps({**raw, "gpu": "a100_80gb"}))
    ok = CliRunner().invoke(app, ["compare", str(path)])
    assert ok.exit_code == 0 and "gpu a100_80gb, as the runs' gpu metadata says" in ok.output
    bad = CliRunner().invoke(app, ["compare", str(path), "--gpu", "h100_sxm"])
    assert bad.exit_code != 0 and "give --gpu a100_80gb" in " ".join(bad.output.split())


def test_a_fit_at_its_bound_within_the_solvers_resolution_is_warned_of(tmp_path):
    # a batch-1 run 20 % faster than the measured one beside the closed loop of 8: the fit
    # drives the step overhead to within rounding of 0 (lsq_linear lands at ~1e-17 s), which
    # is its bound
    bench = ROOT / "tests" / "data" / "bench"
    data = json.loads((bench / "qwen3-8b-h100-bs1.json").read_text())
    fast = tmp_path / "fast1.json"
    fast.write_text(json.dumps({**data, "mean_tpot_ms": data["mean_tpot_ms"] * 0.8}))
    args = [str(fast), str(bench / "qwen3-8b-h100-bs8.json"), "--out", str(tmp_path / "c.yaml")]
    result = runner.invoke(app, ["calibrate", "bench", *args])
    assert result.exit_code == 0, result.output
    assert "step_overhead_s stopped at the edge of its range" in " ".join(result.output.split())


def test_a_host_time_past_the_largest_published_is_warned_of_and_recorded(tmp_path):
    """Runs whose steps are 20 ms slower than this deployment's fit as 20 ms of host time at
    a small error: the fit keeps it, says it is past any published host time, and the profile
    records it (QA: another deployment's runs fitted 20 ms per step at 0.8 % MAPE, silently)."""
    slow = truth_profile(tmp_path, {**TRUTH, "step_overhead_s": 20e-3})
    paths = [str(measured_run(tmp_path, c, slow)) for c in (1, 4)]
    out = tmp_path / "slow.yaml"
    result = runner.invoke(app, ["calibrate", "bench", *paths, *DEPLOY, "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "warning: step_overhead_s fitted at" in text and "past the largest published" in text
    assert "beyond_published" in out.read_text()
    (tmp_path / "ok").mkdir()
    ok = truth_profile(tmp_path / "ok")  # 2 ms: within what engines publish
    fine = [str(measured_run(tmp_path / "ok", c, ok)) for c in (1, 4)]
    args = ["calibrate", "bench", *fine, *DEPLOY, "--out", str(tmp_path / "ok.yaml")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0 and "past the largest published" not in result.output


def test_the_compare_view_follows_the_files_gpu_and_engine_and_says_so(tmp_path):
    """As ``simspec compare`` does (QA: the page simulated an A100 run on the sidebar's H100
    and an SGLang run on vLLM, saying nothing)."""
    from simspec.ui import uploads
    from simspec.ui.compare import compare_upload
    from simspec.ui.inputs import ExplorerInputs

    data = json.loads((DATA / "qwen3-8b-h100-bs1.json").read_text()) | {"gpu": "a100_80gb"}
    path = uploads.save_result_upload(json.dumps(data).encode(), "a100.json", tmp_path)
    inputs = ExplorerInputs(gpu="h100_sxm")
    done = compare_upload(path, inputs)
    assert any("gpu a100_80gb, as the runs' gpu metadata says" in n for n in done.notes)
    cli = tmp_path / "cli.csv"
    assert runner.invoke(app, ["compare", str(path), "--out", str(cli)]).exit_code == 0
    import pandas as pd

    assert done.frame.predicted.tolist() == pytest.approx(
        pd.read_csv(cli).predicted.tolist(), rel=1e-5
    )  # the CSV keeps 6 significant digits
    # a speculative run: the page compares plain decoding and says what to run instead
    spec = data | {"spec_decode_acceptance_length": 2.5}
    path = uploads.save_result_upload(json.dumps(spec).encode(), "spec.json", tmp_path)
    with pytest.raises(InputError, match="simspec compare --method") as err:
        compare_upload(path, inputs)
    assert err.value.field == "method"


def test_the_compare_view_leaves_the_vllm_async_switch_off_an_sglang_file(tmp_path):
    """The sidebar's async-scheduling switch is vLLM's; an SGLang file runs on SGLang's engine,
    which has none (QA: the switch reached SGLang's profile and the tab refused the file)."""
    from simspec.ui import uploads
    from simspec.ui.compare import compare_upload
    from simspec.ui.inputs import ExplorerInputs

    line = {
        "backend": "sglang",
        "completed": 8,
        "duration": 1.0,
        "total_input_tokens": 800,
        "total_output_tokens": 800,
        "output_throughput": 800.0,
        "mean_tpot_ms": 8.0,
        "mean_e2e_latency_ms": 800.0,
        "max_concurrency": 1,
    }
    path = uploads.save_result_upload((json.dumps(line) + "\n").encode(), "sg.jsonl", tmp_path)
    inputs = ExplorerInputs(gpu="h100_sxm", async_scheduling=True)
    done = compare_upload(path, inputs)
    assert any("not applied to engine sglang" in n for n in done.notes)
    plain = compare_upload(path, ExplorerInputs(gpu="h100_sxm"))
    assert done.frame.predicted.tolist() == plain.frame.predicted.tolist()
