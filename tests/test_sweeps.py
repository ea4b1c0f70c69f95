"""Sweeps at scale: grids from a file, executors that give identical results, the run cache
(each scenario once, streaming and resume), Parquet, and byte-identical output for the same
seed."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest
from conftest import Told, swept
from typer.testing import CliRunner

from simspec.cli.main import app
from simspec.config import AcceptanceConfig, LengthSpec, MethodConfig, Scenario, WorkloadConfig
from simspec.engine.metrics import RunSummary
from simspec.errors import InputError, ScenarioError
from simspec.studies.runs import Runs, job
from simspec.studies.runs.executors import KeptPool
from simspec.studies.runs.job import Failed
from simspec.studies.runs.journal import RunCache, read_runs
from simspec.studies.runs.keys import scenario_key
from simspec.studies.runs.memo import Memo
from simspec.studies.sweep import SweepConfig, cells, run_sweep

cli = CliRunner()
# the executors, the cache and the journal are what these tests check, not a measurement:
# 12 measured requests (one turnover of the batch, not the study's 64) keep a run short
SMALL = WorkloadConfig(
    requests=12,
    turnovers=1,
    lengths_from=None,
    prompt=LengthSpec(mean=64),
    output=LengthSpec(mean=48),
)
EAGLE = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))


def small_grid() -> SweepConfig:
    return SweepConfig(
        methods=[MethodConfig(name="autoregressive", k=0), EAGLE],
        batch_sizes=[1, 8],
        workload=SMALL,
        grid={"gpu": ["h100_sxm", "a100_80gb"], "k": [2, 4]},
    )


def test_grid_points_are_every_combination_of_its_axes():
    cfg = small_grid()
    points = cfg.points()
    assert len(points) == 4
    assert {(p.gpu, p.methods[1].k) for p in points} == {
        (g, k) for g in ("h100_sxm", "a100_80gb") for k in (2, 4)
    }
    assert len(cells(cfg)) == 4 * 2 * 2  # points x batch sizes x (baseline + eagle3)
    with pytest.raises(ValueError, match="unknown grid axis"):
        SweepConfig(grid={"colour": ["red"]})
    with pytest.raises(ValueError, match="'seed' lists 0 more than once"):  # rows twice (QA)
        SweepConfig(grid={"seed": [0, 0]})


@pytest.mark.slow
def test_every_executor_gives_the_same_table():
    serial = run_sweep(small_grid())
    pool = run_sweep(small_grid(), runs=Runs("process", workers=2))
    pd.testing.assert_frame_equal(serial, pool)
    assert set(serial.gpu) == {"h100_sxm", "a100_80gb"} and set(serial.k) == {0, 2, 4}


@pytest.mark.slow
def test_a_local_ray_instance_gives_the_same_table():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        on_ray = run_sweep(small_grid(), runs=Runs("ray"))
    finally:
        ray.shutdown()
    pd.testing.assert_frame_equal(on_ray, run_sweep(small_grid()))


@pytest.mark.slow
def test_a_stopped_sweep_resumes_where_it_stopped(tmp_path):
    journal = tmp_path / "out.csv.partial"
    full = swept(small_grid(), journal)
    lines = journal.read_text().splitlines()
    # one line per distinct run: a baseline shared by two grid points runs once
    assert len(lines) == len({c.key for c in cells(small_grid())}) == 12
    # stop after 5 cells, the last line cut mid-write
    journal.write_text("\n".join(lines[:5]) + "\n" + lines[5][:40])
    kept = read_runs(journal)
    assert len(kept) == 5
    told = Told()
    resumed = swept(small_grid(), journal, resume=True, progress=told)
    reused = sum(c.key in kept for c in cells(small_grid()))
    assert sum("(resumed)" in label for label in told.labels) == reused
    assert len(read_runs(journal)) == 12  # the rest ran and were appended
    pd.testing.assert_frame_equal(resumed, full)


@pytest.mark.slow
def test_cli_streams_writes_parquet_and_resumes(tmp_path):
    grid = tmp_path / "grid.yaml"
    # 20 measured requests (one turnover): the fewest that give every interval a value, so the
    # CSV and the Parquet file are compared on numbers
    grid.write_text(
        "batch_sizes: [1, 4]\nworkload: {requests: 20, turnovers: 1}\n"
        "methods: [{name: autoregressive}, {name: eagle3, acceptance: {alpha: 0.6}}]\n"
        "grid: {k: [1, 3]}\n"
    )
    csv, parquet = tmp_path / "r.csv", tmp_path / "r.parquet"
    for out in (csv, parquet):
        result = cli.invoke(
            app,
            ["sweep", "--grid", str(grid), "--executor", "serial", "--quiet", "--out", str(out)],
        )
        assert result.exit_code == 0, result.output
        assert not out.with_name(out.name + ".partial").exists()  # folded into the table
    # the n-gram sizes are blank for methods without a lookup, and draft_tp for drafts at the
    # target's tp: empty in the CSV, null in Parquet
    blank = {"prompt_lookup_min": [""], "prompt_lookup_max": [""], "draft_tp": [""]}
    from_csv = pd.read_csv(csv, keep_default_na=False, na_values=blank)
    from_parquet = pd.read_parquet(parquet).astype({c: float for c in blank})
    pd.testing.assert_frame_equal(from_csv, from_parquet, check_dtype=False)
    again = cli.invoke(
        app,
        [
            "sweep",
            "--grid",
            str(grid),
            "--executor",
            "process",
            "--workers",  # one pool worker beside xdist's two on a 2-core runner
            "1",
            "--resume",
            "--quiet",
            "--out",
            str(csv),
        ],
    )
    assert again.exit_code == 0, again.output
    for args, field in (
        (["--executor", "dask"], "--executor"),
        (["--resume"], "--resume"),
        (["--out", str(tmp_path / "r.xlsx")], "--out"),
    ):
        bad = cli.invoke(app, ["sweep", "--grid", str(grid), "--quiet", *args])
        assert bad.exit_code == 2 and bad.output.startswith(f"error: {field}"), bad.output


@pytest.mark.slow
def test_same_seed_gives_byte_identical_csv_across_processes_and_executors(tmp_path):
    outs = []
    for i, executor in enumerate(("serial", "process", "serial")):
        out = tmp_path / f"r{i}.csv"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "simspec.cli",
                "sweep",
                "--batch-sizes",
                "1,8",
                "--requests",
                "12",
                "--turnovers",
                "1",
                "--executor",
                executor,
                "--quiet",
                "--out",
                str(out),
            ],
            check=True,
            timeout=300,
        )
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]


def test_the_same_scenario_asked_for_twice_runs_once(tmp_path, monkeypatch):
    simulated: list[Scenario] = []
    real = job.simulate

    def counting(sc: Scenario):
        simulated.append(sc)
        return real(sc)

    monkeypatch.setattr(job, "simulate", counting)
    sc = Scenario(method=EAGLE, workload=SMALL)
    path = tmp_path / "runs.jsonl"
    with RunCache(path) as cache:
        first, again = Runs(cache=cache).all([sc, sc.model_dump_json()])
        assert len(simulated) == 1 and first is again
        (later,) = Runs("process", cache=cache).all([sc])  # already in the cache: not run
    assert len(simulated) == 1 and later is first
    # the key is the scenario's content: an equal scenario built anew finds the same entry
    twin = Scenario.model_validate_json(sc.model_dump_json())
    ((key, back),) = read_runs(path).items()
    assert key == scenario_key(twin.model_dump_json())
    assert back.as_json_dict() == first.as_json_dict()  # NaN (undefined intervals) as null


def test_a_cache_that_adds_nothing_leaves_no_file(tmp_path):
    path = tmp_path / "out.csv.partial"
    with RunCache(path) as cache:
        assert len(cache) == 0
    assert not path.exists()


@pytest.mark.slow
def test_a_resumed_sweep_equals_a_fresh_one_on_any_executor(tmp_path):
    fresh = run_sweep(small_grid()).to_csv(index=False)
    journal = tmp_path / "out.csv.partial"
    swept(small_grid(), journal)
    lines = journal.read_text().splitlines()
    for stop, executor in ((0, "process"), (3, "serial"), (11, "process")):
        journal.write_text("".join(line + "\n" for line in lines[:stop]))
        resumed = swept(small_grid(), journal, resume=True, executor=executor, workers=2)
        assert resumed.to_csv(index=False) == fresh
        assert len(read_runs(journal)) == 12


def test_an_error_raises_or_becomes_that_scenarios_failure_as_the_caller_asks():
    ok = Scenario(workload=SMALL)
    too_big = Scenario(model="llama-3.1-70b", workload=SMALL)  # 140 GB of weights on one H100
    kept = Runs("process", workers=2).all([ok, too_big], errors="keep")
    assert isinstance(kept[0], RunSummary)
    assert isinstance(kept[1], Failed) and "llama-3.1-70b" in kept[1].reason
    with pytest.raises(ScenarioError):
        Runs().all([ok, too_big])


# -- run settings: a memo for long-lived callers, a kept pool, one place to say where ---------
def test_a_memo_keeps_the_latest_outcomes_of_each_measure_within_its_bound():
    memo = Memo(size=2)
    memo.add("a", len, 1)
    memo.add("a", str, "one")  # the same run measured otherwise is another outcome
    assert memo.get("a", len) == (True, 1)  # used: now the latest
    memo.add("b", len, 2)
    assert memo.get("a", str) == (False, None) and len(memo) == 2
    with ThreadPoolExecutor(4) as pool:  # threads share it
        list(pool.map(lambda i: memo.add(str(i), len, i), range(400)))
    assert len(memo) == 2


def test_runs_with_a_memo_do_not_run_what_they_remember(monkeypatch):
    simulated: list[Scenario] = []
    real = job.simulate
    monkeypatch.setattr(job, "simulate", lambda sc: simulated.append(sc) or real(sc))
    runs = Runs(memo=Memo())
    sc = Scenario(method=EAGLE, workload=SMALL)
    (first,) = runs.all([sc])
    (again,) = runs.all([sc])
    assert again is first and len(simulated) == 1
    (tau,) = runs.all([sc], measure=lambda res: res.summary.mean_accept_len)
    assert tau == first.mean_accept_len and len(simulated) == 2


def test_a_kept_pool_is_started_once_and_serves_every_call():
    started: list[ThreadPoolExecutor] = []
    kept = KeptPool(start=lambda: started.append(ThreadPoolExecutor(2)) or started[-1])
    runs = Runs("kept", pool=kept)
    two = [Scenario(workload=SMALL.model_copy(update={"concurrency": c})) for c in (1, 2)]
    try:
        runs.all(two[:1])
        assert started == []  # one run: in this process
        first = runs.all(two)
        again = runs.all(two)  # no memo: they run again, on the same pool
        assert len(started) == 1
        assert [s.throughput_tok_s for s in again] == [s.throughput_tok_s for s in first]
    finally:
        kept.close()


def test_an_unknown_executor_is_refused_when_the_settings_are_made():
    with pytest.raises(InputError, match="--executor"):
        Runs("threads")  # type: ignore[arg-type]


def _swept_config(tmp_path, text: str, *args: str) -> tuple[str, pd.DataFrame]:
    """`simspec sweep --config` of a scenario file holding ``text``: its output and CSV."""
    config, out = tmp_path / "c.yaml", tmp_path / "s.csv"
    config.write_text(text)
    cmd = ["sweep", "--config", str(config), "--concurrencies", "1", *args, "--out", str(out)]
    result = CliRunner().invoke(app, cmd)
    assert result.exit_code == 0, result.output
    return result.output, pd.read_csv(out)


def test_a_config_files_pipeline_stages_show_in_the_table_and_the_csv(tmp_path):
    text = "pp: 2\nmodel: qwen3-30b-a3b\nengine: hf\n"
    output, frame = _swept_config(tmp_path, text, "--requests", "32", "--methods", "autoregressive")
    assert "(pp2)" in output
    assert (frame["pp"] == 2).all()


def test_a_k_schedule_writes_the_k_each_concurrency_ran(tmp_path):
    """QA: every row said the method's K=4 where the schedule ran K=2 at 32 and none at 128."""
    spec = json.dumps(
        {"method": "eagle3", "num_speculative_tokens": 4,
         "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 64, 2], [65, 1024, 0]]}
    )  # fmt: skip
    out = tmp_path / "s.csv"
    args = ["sweep", "--speculative-config", spec, "--batch-sizes", "1,32,128", "--out", str(out)]
    res = CliRunner().invoke(app, [*args, "--requests", "8", "--turnovers", "0"])
    assert res.exit_code == 0, res.output
    rows = pd.read_csv(out).query("method == 'eagle3'")
    assert list(rows["k"]) == [4, 4, 4] and list(rows["k_run"]) == [4, 2, 0]
    assert "eagle3 K=4 follows its load policy: K=2 at 32, off at 128" in res.output
    assert "has no such draft schedule" not in " ".join(res.output.split())


def test_a_k_schedule_on_an_engine_without_one_says_it_is_simspecs_policy():
    """QA: vLLM's Dynamic SD schedule ran on SGLang without a word."""
    spec = json.dumps(
        {"method": "eagle3", "num_speculative_tokens": 3,
         "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 64, 1]]}
    )  # fmt: skip
    args = ["sweep", "--speculative-config", spec, "--engine", "sglang", "--batch-sizes", "1,8"]
    res = CliRunner().invoke(app, [*args, "--requests", "8", "--turnovers", "0"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "engine sglang has no such draft schedule by batch size" in text
    assert "sglang itself drafts one shape at every batch size" in text


def test_a_flag_for_a_grid_axis_and_k_beside_a_speculative_config_are_refused(tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text("grid: {tp: [1, 2]}\n")
    both = CliRunner().invoke(app, ["sweep", "--grid", str(grid), "--tp", "8"])
    assert both.exit_code == 2 and "error: --tp:" in both.output
    spec = '{"method": "eagle3", "num_speculative_tokens": 3}'
    k = CliRunner().invoke(app, ["sweep", "--speculative-config", spec, "--k", "5"])
    assert k.exit_code == 2 and "error: --k:" in k.output
    grid.write_text("grid: {k: [0, 2]}\n")
    zero = CliRunner().invoke(app, ["sweep", "--grid", str(grid)])
    assert zero.exit_code == 2 and "grid axis 'k' takes draft lengths from 1" in zero.output


def _grid_said(tmp_path, grid: str, methods: str) -> str:
    """What a one-concurrency sweep over ``grid`` (YAML) prints, on one line."""
    path = tmp_path / "g.yaml"
    path.write_text(f"grid: {grid}\n")
    args = ["sweep", "--grid", str(path), "--requests", "32", "--concurrencies", "1"]
    result = CliRunner().invoke(app, [*args, "--methods", methods])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_a_grid_temperature_axis_gets_its_sampling_notes(tmp_path):
    said = _grid_said(tmp_path, "{temperature: [0.0, 1.5]}", "autoregressive,eagle3")
    assert "sampling at T=1.5" in said and "no published pair constrains acceptance" in said


def test_a_grid_engine_axis_says_the_methods_keep_the_top_level_presets(tmp_path):
    """QA: a grid point sglang ran n-gram at vLLM's K=3, where --engine sglang runs its own 12
    draft tokens, and nothing said so."""
    said = _grid_said(tmp_path, "{engine: [vllm, sglang]}", "ngram")
    assert "the grid's engine axis varies the deployment only" in said


def test_a_bad_grid_value_is_named_by_its_axis_and_point():
    """QA: a seed only the grid gave was refused as "seed: ... (the flag --seed, or seed in a
    --config file)"."""
    from simspec.errors import InputError

    with pytest.raises(InputError) as err:
        SweepConfig(grid={"seed": ["a"]}).points()
    assert err.value.field == "grid.seed" and "at the grid point seed=a" in err.value.message


@pytest.mark.parametrize(
    ("axis", "known"),
    [("gpu", "h200"), ("model", "qwen3-8b"), ("engine", "vllm"), ("dataset", "gsm8k")],
)
def test_a_grid_name_the_catalog_does_not_know_is_named_by_its_axis(axis, known):
    """QA: a GPU only the grid gave was refused as "gpu: unknown GPU 'nope'", and a dataset as
    workload.lengths_from."""
    from simspec.errors import InputError

    with pytest.raises(InputError) as err:
        SweepConfig(grid={axis: [known, "nope"]}).points()
    assert err.value.field == f"grid.{axis}"
    assert f"at the grid point {axis}=nope" in err.value.message and "'nope'" in err.value.message


def test_a_grid_tp_axis_that_a_fixed_ep_does_not_fit_is_refused_naming_the_grid(tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text("model: qwen3-30b-a3b\ngrid: {tp: [2, 4]}\n")
    result = CliRunner().invoke(app, ["sweep", "--grid", str(grid), "--ep", "4"])
    assert result.exit_code == 2 and "grid: its tp 2 does not take ep=4" in result.output


def test_a_repeated_batch_size_runs_once_and_a_k_axis_the_method_does_not_read_is_refused():
    """--concurrencies 4,1,4 had run 4 twice and crashed drawing the table; a grid k axis over
    lookahead had labelled two rows with Ks that never ran (QA)."""
    from pydantic import ValidationError

    from simspec.config import MethodConfig
    from simspec.studies.sweep import SweepConfig

    assert SweepConfig(batch_sizes=[4, 1, 4]).batch_sizes == [4, 1]
    methods = [MethodConfig(name="autoregressive", k=0), MethodConfig(name="lookahead")]
    with pytest.raises(ValidationError, match="does not set lookahead's draft length"):
        SweepConfig(batch_sizes=[1], methods=methods, grid={"k": [2, 4]})


@pytest.mark.parametrize(
    ("method", "ok"),
    [
        ("{name: lookahead, k: 12}", False),
        ("{name: lookahead, k: 4}", True),  # lookahead_ngram 5 by default
        ("{name: lookahead, k: 6, lookahead_ngram: 7}", True),
        ("{name: eagle1, k: 5, tree_paths: [[0], [0, 0]]}", False),
    ],
)
def test_a_files_k_that_the_method_does_not_draft_is_refused(tmp_path, method, ok):
    """QA: a scenario file's lookahead k: 12 ran lookahead_ngram - 1 = 4 tokens, its rows and
    acceptance label reading K=12, where --k on the command line is refused."""
    cfg = tmp_path / "m.yaml"
    cfg.write_text(f"methods:\n  - {method}\n")
    args = ["sweep", "--config", str(cfg), "--concurrencies", "1", "--requests", "4"]
    result = CliRunner().invoke(app, [*args, "--turnovers", "1", "--quiet"])
    if ok:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 2 and ".k: " in result.output
        assert "is not the length" in result.output


def test_a_plain_sweeps_precision_is_its_throughputs():
    """A sweep of plain decoding alone targets its throughput: a row whose throughput interval
    is wider than the target is wide, though its speedup is exactly 1 (QA)."""
    from simspec.studies.sweep import wide_intervals

    row = {
        "method": "autoregressive",
        "speedup": 1.0,
        "speedup_ci_low": 1.0,
        "speedup_ci_high": 1.0,
    }
    row |= {
        "throughput_tok_s": 100.0,
        "throughput_tok_s_ci_low": 99.0,
        "throughput_tok_s_ci_high": 101.0,
    }
    frame = pd.DataFrame([row])
    assert len(wide_intervals(frame, 0.005)) == 1 and len(wide_intervals(frame, 0.02)) == 0


def test_a_config_files_method_without_k_drafts_its_own_default_length(tmp_path):
    """QA: MethodConfig's K=3 ran suffix at 3, not vLLM's 24 that --methods suffix runs."""
    text = "methods:\n  - name: suffix\n  - name: medusa1\n"
    _, frame = _swept_config(tmp_path, text, "--requests", "8", "--turnovers", "0")
    ks = frame.set_index("method")["k"]
    assert ks["suffix"] == 24 and ks["medusa1"] == 4


def test_dataset_over_a_configs_stated_acceptance_is_said_once():
    """QA: --dataset gsm8k over examples/sweep.yaml replayed ShareGPT's acceptance unsaid."""
    args = ["sweep", "--config", "examples/sweep.yaml", "--dataset", "gsm8k", "--requests", "8"]
    res = CliRunner().invoke(app, [*args, "--concurrencies", "1", "--turnovers", "0"])
    assert res.exit_code == 0, res.output
    assert res.output.count("note: eagle3 replays sharegpt's acceptance") == 1


def test_a_script_naming_a_method_by_a_mapping_of_its_name_gets_its_preset():
    """The Python API reads {"name": "eagle2"} as "eagle2", as a CLI file does (QA: it asked
    for an acceptance model); an acceptance beside the name is kept."""
    cfg = SweepConfig(
        methods=[{"name": "eagle2"}, {"name": "eagle3", "acceptance": {"alpha": 0.6}}]
    )
    eagle2, eagle3 = cfg.methods
    assert (eagle2.tree, eagle2.tree_nodes, eagle2.acceptance is not None) == ("dynamic", 50, True)
    assert eagle3.acceptance.alpha == 0.6 and eagle3.k == 3


def test_a_sweep_file_says_what_it_cannot_mean(tmp_path):
    """QA: a workload's concurrency was ignored without a word, a method listed twice ran
    twice into identical rows, and a method named as vLLM spells it ("EAGLE") was refused."""
    from simspec.cli.sweep_flags import SweepFlags
    from simspec.errors import InputError
    from simspec.studies.sweep import SweepConfig

    wl = {"requests": 32}
    file = tmp_path / "c.yaml"
    file.write_text("batch_sizes: [2]\nworkload: {requests: 32, concurrency: 8}\n")
    with pytest.raises(InputError, match=r"give batch_sizes: \[8\] instead"):
        SweepFlags().sweep_config(file)
    twice = [{"name": "eagle3", "k": 3}, {"name": "eagle3", "k": 3}]
    with pytest.raises(ValueError, match=r"eagle3 \(k=3\) is listed more than once"):
        SweepConfig(workload=wl, methods=twice)
    named = SweepConfig(workload=wl, methods=[{"name": "EAGLE"}, {"name": "Eagle3"}])
    assert [m.name for m in named.methods] == ["eagle1", "eagle3"]


def test_a_sweep_flag_or_field_that_cannot_apply_is_named(tmp_path):
    """QA: --prompt-len beside a dataset grid axis, and an unknown lengths_from_method, were
    refused naming neither."""
    from simspec.cli.sweep_flags import SweepFlags
    from simspec.engine.workload import record_lengths
    from simspec.errors import InputError

    grid = tmp_path / "g.yaml"
    grid.write_text("grid: {dataset: [gsm8k, cnn]}\nbatch_sizes: [2]\n")
    with pytest.raises(InputError, match="the --grid file's grid varies dataset"):
        SweepFlags(prompt_len=100, output_len=50).sweep_config(grid, "--grid")
    with pytest.raises(InputError, match=r"workload.lengths_from_method: 'nosuch' is not a method"):
        record_lengths(WorkloadConfig(lengths_from="sharegpt", lengths_from_method="nosuch"))


def test_a_dataset_grid_point_takes_each_named_methods_preset_for_its_dataset():
    """A method named in a grid file takes, at each dataset point, the preset `sweep
    --dataset` would (QA: a gsm8k point ran the MT-Bench presets); an acceptance the file
    states stays."""
    from simspec.catalog.methods import preset_method

    own = {"name": "medusa1", "acceptance": {"alpha": 0.5}}
    cfg = SweepConfig.model_validate(
        {
            "model": "vicuna-7b",
            "methods": ["autoregressive", "eagle2", "draft_model", own],
            "batch_sizes": [1],
            "grid": {"dataset": ["sharegpt", "gsm8k"]},
        }
    )
    gsm = cfg.points()[1]
    for m in gsm.methods[1:3]:
        want = preset_method(m.name, "gsm8k", target="vicuna-7b", engine=cfg.engine)
        assert m.acceptance == want.acceptance and "GSM8K" in (m.acceptance.source or "")
    assert gsm.methods[3].acceptance.alpha == 0.5


def test_a_stated_trace_stays_at_a_dataset_grid_point_and_a_presets_trace_says_its_own():
    """QA: a file's stated acc_len sharegpt became gsm8k's trace at a gsm8k grid point, still
    called "as given", where sweep --dataset keeps it; a preset's swapped trace kept the source
    line of sharegpt's."""
    stated = {
        "name": "eagle3",
        "k": 2,
        "acceptance": {"acc_len": "sharegpt", "acc_len_method": "eagle3"},
    }
    cfg = SweepConfig.model_validate(
        {"methods": ["autoregressive", "eagle3", stated], "grid": {"dataset": ["gsm8k"]}}
    )
    gsm = cfg.points()[0]
    preset, own = gsm.methods[1].acceptance, gsm.methods[2].acceptance
    assert preset.acc_len == "gsm8k" and "trace gsm8k" in (preset.source or "")
    assert own.acc_len == "sharegpt" and not own.source


def test_a_cell_that_fits_at_no_context_is_named_before_a_context_past_the_kv_cache():
    """QA: kimi-k2.5 at tp=8 advised --max-model-len 1280 (plain decoding's cell), and with it
    the EAGLE-3 cell then did not fit at all: that is said first. (Since the reserve holds each
    rank's all-gathered logits whole, plain decoding fits there from a memory share of 0.912
    of CUDA's total.)"""
    from simspec.errors import ScenarioError
    from simspec.studies.sweep import cells, check_cells

    cfg = SweepConfig.model_validate(
        {
            "model": "kimi-k2.5",
            "tp": 8,
            "ep": 8,
            "methods": ["autoregressive", "eagle3"],
            "batch_sizes": [1],
            "scheduler": {"gpu_memory_utilization": 0.912},
        }
    )
    with pytest.raises(ScenarioError, match="does not fit on h100_sxm at tp=8.*draft"):
        check_cells(cells(cfg))


def test_a_band_with_speculation_off_says_whose_acceptance_its_row_shows(capsys):
    """QA: a K=0 band at concurrency 16 read mean_accept_len 2.38 and a speedup of 1.01, from
    the steps the run drafted as it drained at a lower concurrency, without a word."""
    import pandas as pd

    from simspec.cli.sweep import _k_run_note

    rows = {
        "method": ["eagle3", "eagle3", "eagle3"], "k": [3, 3, 3], "k_run": [3, 0, 0],
        "batch_size": [4, 8, 32], "tree_nodes": [0, 0, 0], "tree": ["", "", ""],
        "mean_accept_len": [2.26, 1.0, 2.37],
    }  # fmt: skip
    _k_run_note(pd.DataFrame(rows))
    err = " ".join(capsys.readouterr().err.split())
    assert "eagle3 K=3 at 32: speculation is off at that concurrency" in err
    assert "at 8:" not in err  # nothing drafted there: its 1.0 is plain decoding's


def test_sampling_notes_say_where_the_family_alone_moves_acceptance():
    """QA: T=0.5 raised the speedup 10-14 % over greedy and top-p 0.9 at T=1 cut tau 8 %,
    without a word of what (not) constrains either."""
    from simspec.catalog.sampling import factor, sampling_notes

    warm = " ".join(sampling_notes(0.5, 1.0))
    assert factor(0.5) > 1 and "the rise is the family's, not a measurement's" in warm
    hot = " ".join(sampling_notes(1.0, 0.9))
    assert "the family's" not in hot and "a smaller top-p raises acceptance" in hot
    assert not sampling_notes(0.0, 1.0)


def test_a_draft_run_on_another_pairs_acceptance_says_drafts_compare_by_cost_alone():
    """QA: --draft-model llama-3.1-8b (the target itself) read the preset's tau 2.27 measured
    with another pair; only the cost moved, and only a CSV column said why."""
    from simspec.catalog.methods import preset_method
    from simspec.studies.sweep import extrapolation_notes

    own = preset_method("draft_model", "sharegpt", draft_model="llama-3.1-8b")
    said = " ".join(extrapolation_notes([own]))
    assert "draft_model with draft llama-3.1-8b: its acceptance is the preset's" in said
    assert "compare here by their cost alone" in said
    assert not extrapolation_notes([preset_method("eagle3", "sharegpt")])


def test_a_journal_that_cannot_be_written_names_it_and_leaves_no_folder(tmp_path, monkeypatch):
    """QA: a full disk mid-sweep said "cannot read or write a file" naming no file, and left the
    folders --out had created behind."""
    import errno

    import simspec.studies.runs.journal as journal

    class Full:
        def write(self, text: str) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self) -> None: ...

        def close(self) -> None: ...

    monkeypatch.setattr(journal, "_append", lambda path: Full())
    out = tmp_path / "new" / "sub" / "x.csv"
    result = cli.invoke(
        app,
        ["sweep", "--concurrencies", "1", "--methods", "autoregressive", "--requests", "20",
         "--turnovers", "1", "--executor", "serial", "--quiet", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--out" in result.output and "x.csv.partial" in result.output
    assert "No space left" in result.output
    assert not (tmp_path / "new").exists()
