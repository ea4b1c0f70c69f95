"""Files as a hostile user lays them out: calibration directories holding FIFOs, links to
/dev/zero, sparse giants and junk; journals that are symbolic links, gigantic, or written by
another simspec version; outputs that are links, folders, or paths nothing can be written to.
Each ends in one ``error:`` line (exit 2) naming the flag and the file, within seconds and
bounded memory, before any work, with nothing written and nothing followed.

The cases that would fill memory (or hang) without their bound run the CLI in a subprocess
under ``RLIMIT_AS``, so a regression fails the test instead of the machine."""

from __future__ import annotations

import json
import os
import stat
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from simspec.cli.main import app
from simspec.config import LengthSpec, Scenario, WorkloadConfig
from simspec.errors import InputError
from simspec.studies.runs import Runs, journal
from simspec.studies.runs.journal import RunCache, read_journal
from tests.capped import run_capped
from tests.conftest import ROOT
from tests.refusals import one_error
from tests.test_fuzz import within

runner = CliRunner()
FAST = ["--batch-sizes", "1", "--requests", "2", "--turnovers", "1", "--methods", "eagle3"]
FAST += ["--prompt-len", "16", "--output-len", "8", "--executor", "serial", "--quiet"]
SMALL = WorkloadConfig(
    requests=4,
    turnovers=1,
    lengths_from=None,
    prompt=LengthSpec(mean=16),
    output=LengthSpec(mean=8),
)
HARNESS_HEAD = (
    "kind,op,num_seqs,q_per_seq,context_len,num_tokens,m,k,n,time_ms_median,tp,model,"
    "hidden_size,intermediate_size,num_attention_heads,num_key_value_heads,head_dim,vocab_size,"
    "gpu_name"
)
GIB = 1 << 30


def capped(args: list[str], cwd: Path, seconds: int = 60) -> str:
    """The CLI in a subprocess under a 2 GiB address-space limit: it must refuse ``args`` with
    one ``error:`` line on stderr and exit 2 (a MemoryError, a traceback or a hang fails).
    ``seconds`` only stops a hang: the refusals take the interpreter's start-up time."""
    proc = run_capped(["-m", "simspec.cli.main", *args], 2 * GIB, cwd, seconds)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-800:])
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-800:]
    return lines[0]


def sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes (all NUL) that takes no disk space."""
    path.touch()
    os.truncate(path, size)
    return path


def harness_table(path: Path, rows: int = 12) -> Path:
    """A small, sound harness CSV: enough GEMM rows to fit the GEMM constants."""
    lines = [
        f"gemm,qkv,{m},1,0,{m},{m},4096,6144,{0.01 + 0.0005 * m},1,tiny,4096,14336,32,8,128,128256,"
        "NVIDIA H100 80GB HBM3"
        for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)[:rows]
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HARNESS_HEAD + "\n" + "\n".join(lines) + "\n")
    return path


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# --- calibration directories are read through the bounded reader ----------------------------

CALIBRATE = {
    "fit": lambda d: ["calibrate", "fit", str(d), "--out", str(d.parent / "p.yaml")],
    "report": lambda d: ["calibrate", "report", "--timings", str(d)],
}


@pytest.mark.parametrize("command", sorted(CALIBRATE))
def test_a_fifo_named_x_csv_in_a_calibration_dir_is_refused_by_name_not_waited_on(
    tmp_path, command
):
    folder = tmp_path / "timings"
    harness_table(folder / "good.csv")
    os.mkfifo(folder / "x.csv")  # no writer: a blocking open never returns
    with within(10):
        result = runner.invoke(app, CALIBRATE[command](folder))
    one_error(result, "error: timings:", "x.csv", "not a regular file")
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("command", sorted(CALIBRATE))
def test_a_timing_table_over_the_size_cap_is_refused_before_it_is_read(tmp_path, command):
    from simspec.studies.calibration.schema import MAX_TABLE_BYTES

    folder = tmp_path / "timings"
    harness_table(folder / "good.csv")
    sparse(folder / "big.csv", MAX_TABLE_BYTES + 1)
    with within(10):
        result = runner.invoke(app, CALIBRATE[command](folder))
    one_error(result, "error: timings:", "big.csv", f"larger than {MAX_TABLE_BYTES:,} bytes")
    assert not (tmp_path / "p.yaml").exists()


def test_the_table_cap_covers_the_largest_real_timing_table_with_headroom():
    from simspec.studies.calibration.schema import MAX_TABLE_BYTES, MAX_TABLE_COLUMNS

    shared = ROOT.parent / "shared" / "calibration-data"
    if not shared.is_dir():
        pytest.skip("shared/calibration-data is not checked out")
    tables = list(shared.rglob("*.csv"))
    largest = max(p.stat().st_size for p in tables)
    widest = max(p.open(encoding="utf-8").readline().count(",") + 1 for p in tables)
    assert 4 * largest < MAX_TABLE_BYTES and 10 * widest < MAX_TABLE_COLUMNS


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(CALIBRATE))
@pytest.mark.parametrize("hostile", ["link to /dev/zero", "3 GB sparse", "60 MB of commas"])
def test_a_calibration_dir_cannot_fill_memory(tmp_path, command, hostile):
    folder = tmp_path / "timings"
    harness_table(folder / "good.csv")
    if hostile == "link to /dev/zero":
        os.symlink("/dev/zero", folder / "x.csv")
        needle = "not a regular file"
    elif hostile == "3 GB sparse":
        sparse(folder / "x.csv", 3 * GIB)
        needle = "larger than"
    else:  # one header line of 30 million empty columns, inside the size cap
        (folder / "x.csv").write_bytes(b"kind," + b"," * 60_000_000 + b"\n")
        needle = "columns"
    line = capped(CALIBRATE[command](folder), tmp_path)
    assert line.startswith("error: timings:") and "x.csv" in line and needle in line, line
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("command", sorted(CALIBRATE))
def test_a_known_tables_name_on_a_file_without_its_columns_is_one_line_naming_it(tmp_path, command):
    folder = tmp_path / "timings"
    junk = folder / "compute" / "h100" / "org" / "model" / "mlp.csv"  # Vidur's place and name
    junk.parent.mkdir(parents=True)
    junk.write_text("a,b\n1,2\n")
    result = runner.invoke(app, CALIBRATE[command](folder))
    one_error(result, "error: timings:", "mlp.csv", "Vidur mlp.csv table")


def test_calibrate_report_prints_nothing_before_a_bad_table(tmp_path):
    folder = tmp_path / "timings"
    harness_table(folder / "good.csv")
    (folder / "bad.csv").write_text(HARNESS_HEAD + "\ngemm,qkv" + ",x" * 16 + "\n")
    result = runner.invoke(app, CALIBRATE["report"](folder))
    one_error(result, "bad.csv' row 1")


# random names, contents and special files in a calibration directory: a fit or one line

_MEDIANS = [f"time_stats.{op}.median" for op in ("attn_pre_proj", "attn_post_proj")]
_MEDIANS += [f"time_stats.{op}.median" for op in ("mlp_up_proj", "mlp_down_proj", "mlp_act")]
_MEDIANS += [f"time_stats.{op}.median" for op in ("input_layernorm", "attn_rope")]
# each known layout: where it lies, its file name, and its columns (a text column's values)
LAYOUTS: dict[str, tuple[str, str, dict[str, list[str]]]] = {
    "harness": ("", "t.csv", {c: [] for c in HARNESS_HEAD.split(",")}),
    "vidur mlp": (
        "compute/h100/org/model",
        "mlp.csv",
        {
            **{c: [] for c in _MEDIANS},
            **{c: [] for c in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd")},
            **{c: [] for c in ("vocab_size", "num_tokens", "num_tensor_parallel_workers")},
            "use_gated_mlp": ["True", "False"],
        },
    ),
    "vidur all_reduce": (
        "network/h100_dgx",
        "all_reduce.csv",
        {c: [] for c in ("time_stats.all_reduce.median", "num_workers", "size")}
        | {"devices_per_node": []},
    ),
    "lss layers": (
        "perf_models/H100/meta-llama/Llama-3.1-8B/tp1",
        "layers.csv",
        {"layer_name": ["q_proj", "k_proj", "o_proj", "lm_head"], "input": [], "latency(ns)": []},
    ),
    "vllm attention": (
        "perf/H100/Qwen/Qwen3.6-35B-A3B/bf16/tp1",
        "attention.csv",
        {c: [] for c in ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us")},
    ),
    "vllm per_sequence": (
        "perf/H100/Qwen/Qwen3.6-35B-A3B/bf16/tp1",
        "per_sequence.csv",
        {"layer": ["lm_head", "embedding"], "sequences": [], "time_us": []},
    ),
    "elsewhere": ("h100/odd\nname é", "x.csv", {"a": [], "b": []}),
}
SANE = ["1", "2", "8", "64", "512", "4096", "14336", "0.01", "0.5", "3.2"]
HOSTILE = ["", "x", "0", "-1", "1e308", "inf", "nan", "9" * 40, "True"]
KINDS = ["gemm", "attention", "elementwise", "lm_head", "forward", "prefill", "add", "junk"]


@st.composite
def table_text(draw, layout: str) -> bytes:
    """A table of ``layout`` with some columns dropped and some cells hostile, or noise."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=120))
    columns = LAYOUTS[layout][2]
    head = [c for c in columns if draw(st.integers(0, 19)) > 0]  # now and then one is missing
    one_in = draw(st.sampled_from([4, 30, 1000]))  # how often a cell is hostile
    rows = []
    for _ in range(draw(st.integers(0, 14))):
        cells = []
        for c in head:
            if c == "kind":
                pool = KINDS
            else:
                pool = columns[c] or SANE
            hostile = draw(st.integers(1, one_in)) == 1
            cells.append(draw(st.sampled_from(HOSTILE if hostile else pool)))
        rows.append(",".join(cells))
    return ("\n".join([",".join(head), *rows]) + "\n").encode()


@st.composite
def entry(draw) -> tuple[str, str, str, bytes]:
    """One thing in a calibration directory: mostly a table in its place, now and then a
    FIFO, a dangling link, a link to its own folder or a folder, under a table's name."""
    layout = draw(st.sampled_from(sorted(LAYOUTS)))
    place, name, _ = LAYOUTS[layout]
    kind = draw(st.sampled_from(["file"] * 12 + ["fifo", "dangling link", "loop link", "folder"]))
    return place, name, kind, draw(table_text(layout))


def _lay_out(folder: Path, entries: list[tuple[str, str, str, bytes]]) -> None:
    for place, name, kind, data in entries:
        path = folder / place / name
        if os.path.lexists(path):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "file":
            path.write_bytes(data)
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "dangling link":
            os.symlink(folder / "nowhere", path)
        elif kind == "loop link":
            os.symlink(path.parent, path)  # a link to its own folder
        else:
            path.mkdir()


FUZZ = settings(
    max_examples=int(os.environ.get("SIMSPEC_FUZZ_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.slow
@FUZZ
@given(entries=st.lists(entry(), min_size=1, max_size=6), with_good=st.booleans())
def test_random_calibration_directories_fit_or_fail_in_one_line(
    tmp_path_factory, entries, with_good
):
    root = tmp_path_factory.mktemp("calib")
    folder = root / "timings"
    folder.mkdir()
    if with_good:
        harness_table(folder / "good.csv")
    _lay_out(folder, entries)
    for command in ("fit", "report"):
        # a warning would be one more line on stderr in a real run
        with within(60), warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            result = runner.invoke(app, CALIBRATE[command](folder))
        assert not warned, [str(w.message) for w in warned]
        assert "Traceback" not in result.output, result.output[-800:]
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            result.output[-800:],
            result.exception,
        )
        if result.exit_code == 0:
            assert command == "report" or (root / "p.yaml").exists()
        else:
            one_error(result, "error: ")
            assert not (root / "p.yaml").exists()
        (root / "p.yaml").unlink(missing_ok=True)


# --- journals: bounded, never followed through a link, keyed by the simspec version ---------


def _summary():
    return Runs().one(Scenario(workload=SMALL))


def test_a_journal_over_the_cap_is_refused_before_it_is_read(tmp_path):
    out = tmp_path / "o.csv"
    journal_path = sparse(tmp_path / "o.csv.partial", journal.MAX_JOURNAL_BYTES + 1)
    with within(10):
        result = runner.invoke(app, ["sweep", *FAST, "--resume", "--out", str(out)])
    one_error(result, "error: --resume:", "o.csv.partial", "larger than", "delete it")
    assert journal_path.stat().st_size == journal.MAX_JOURNAL_BYTES + 1 and not out.exists()


def test_the_journal_cap_holds_a_whole_study_of_the_largest_size():
    from simspec.config import MAX_RUNS

    line = journal._line("k" * 20, _summary(), "0.1.0")
    assert MAX_RUNS * 3 * len(line) < journal.MAX_JOURNAL_BYTES  # three studies' worth


@pytest.mark.slow
def test_a_20_gb_sparse_journal_is_refused_within_bounded_memory(tmp_path):
    sparse(tmp_path / "o.csv.partial", 20 * GIB)
    line = capped(["sweep", *FAST, "--resume", "--out", str(tmp_path / "o.csv")], tmp_path)
    assert line.startswith("error: --resume:") and "o.csv.partial" in line, line
    assert "delete it" in line and not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize("resume", [False, True])
def test_a_dangling_journal_link_is_refused_and_its_target_never_created(
    tmp_path, monkeypatch, resume
):
    from simspec.studies.runs import job

    monkeypatch.setattr(job, "simulate", lambda sc: pytest.fail("a run started"))
    target = tmp_path / "elsewhere" / "planted.txt"
    target.parent.mkdir()
    os.symlink(target, tmp_path / "o.csv.partial")
    before = listing(tmp_path)
    args = ["sweep", *FAST, *(["--resume"] if resume else []), "--out", str(tmp_path / "o.csv")]
    one_error(runner.invoke(app, args), "error: --out:", "o.csv.partial", "symbolic link")
    assert not os.path.lexists(target) and listing(tmp_path) == before


def test_a_journal_link_is_refused_by_the_library_too(tmp_path):
    target = tmp_path / "planted.txt"
    link = tmp_path / "o.csv.partial"
    os.symlink(target, link)
    for resume in (False, True):
        with pytest.raises(InputError, match="symbolic link"):
            RunCache(link, resume)
    assert not target.exists()


def test_a_journal_link_planted_after_the_start_is_not_followed(tmp_path):
    target = tmp_path / "planted.txt"
    link = tmp_path / "o.csv.partial"
    summary = _summary()
    with RunCache(link) as cache:  # no journal yet: created with the first run
        os.symlink(target, link)
        with pytest.raises(OSError):
            cache.add("k" * 20, summary)
    assert not target.exists() and os.path.islink(link)


def test_a_journal_from_another_simspec_version_runs_again_with_a_warning(tmp_path, monkeypatch):
    path = tmp_path / "o.csv.partial"
    with RunCache(path) as cache:
        cache.add("k" * 20, _summary())
    assert json.loads(path.read_text())["simspec"] == journal.package_version()
    monkeypatch.setattr(journal, "package_version", lambda: "999.0")
    warned: list[str] = []
    with RunCache(path, resume=True, warn=warned.append) as cache:
        assert "k" * 20 not in cache and len(cache) == 0
    assert len(warned) == 1 and "another simspec version than 999.0" in warned[0]
    assert read_journal(path) == ({}, 0)  # rewritten without it


def test_a_journal_line_without_a_version_runs_again(tmp_path):
    path = tmp_path / "o.csv.partial"
    with RunCache(path) as cache:
        cache.add("k" * 20, _summary())
    entry = json.loads(path.read_text())
    del entry["simspec"]  # as simspec wrote them before it recorded its version
    path.write_text(json.dumps(entry) + "\n")
    warned: list[str] = []
    with RunCache(path, resume=True, warn=warned.append) as cache:
        assert len(cache) == 0
    assert len(warned) == 1 and "another simspec version" in warned[0]


# --- every output of every command is checked before any work --------------------------------

HARNESS = "{harness}"
# command -> (its arguments, then each output flag it has and a suffix it writes)
COMMANDS: dict[str, tuple[list[str], list[tuple[str, str]]]] = {
    "sweep": (["sweep", *FAST], [("--out", ".csv")]),
    "analytic": (["analytic", "--k-max", "2"], [("--csv", ".csv"), ("--html", ".html")]),
    "policy": (["policy", "--config", str(ROOT / "examples" / "policy.yaml")], [("--out", ".csv")]),
    "fleet": (
        ["fleet", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--qps", "1", "--requests", "4"],
        [("--out", ".csv"), ("--summary", ".json"), ("--timeline", ".csv"), ("--report", ".html")],
    ),
    "plan": (
        ["plan", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--qps", "1"],
        [("--out", ".csv")],
    ),
    "plan --trace": (
        ["plan", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--trace", "azure-conv"],
        [("--out", ".csv")],
    ),
    "recommend": (["recommend", "--k-max", "2"], [("--out", ".csv"), ("--json", ".json")]),
    "validate": (["validate", "--workers", "1"], [("--out", ".csv"), ("--report", ".html")]),
    "compare": (
        ["compare", str(ROOT / "tests" / "data" / "bench" / "qwen3-8b-h100-bs1.json")],
        [("--out", ".csv"), ("--html", ".html")],
    ),
    "calibrate fit": (["calibrate", "fit", HARNESS], [("--out", ".yaml")]),
    "calibrate bench": (
        ["calibrate", "bench"]
        + [str(ROOT / "tests" / "data" / "bench" / f"qwen3-8b-h100-bs{c}.json") for c in (1, 8)],
        [("--out", ".yaml")],
    ),
    "calibrate report": (
        ["calibrate", "report", "--timings", HARNESS],
        [("--html", ".html"), ("--csv", ".csv")],
    ),
}
OUTPUT_FLAGS = [(cmd, flag) for cmd, (_, outs) in COMMANDS.items() for flag, _ in outs]


def test_the_table_of_commands_names_every_path_option_the_cli_writes():
    """Every ``Path`` option of every command is an input file or listed above."""
    import typer.main

    inputs = {"--config", "--grid", "--cases", "--rate-csv", "--timings", "--acceptance-from"}
    seen = set()
    for name, command in typer.main.get_command(app).commands.items():
        subs = command.commands.items() if hasattr(command, "commands") else [("", command)]
        for sub, cmd in subs:
            for param in cmd.params:
                annotation = param.type_descriptor.annotation  # typer's record of the hint
                if annotation is Path and param.opts[0].startswith("--"):
                    if param.opts[0] not in inputs:
                        seen.add((f"{name} {sub}".strip(), param.opts[0]))
    assert seen == {(c.replace(" --trace", ""), f) for c, f in OUTPUT_FLAGS}


@pytest.fixture
def no_work(monkeypatch):
    """Every study a command runs fails the test if it starts: outputs are checked first."""
    import simspec.cli.sweep
    import simspec.studies.analytic
    import simspec.studies.bench.calibrate
    import simspec.studies.bench.compare
    import simspec.studies.calibration.samples
    import simspec.studies.capacity
    import simspec.studies.fleet
    import simspec.studies.policy
    import simspec.studies.schedule.bands
    import simspec.studies.schedule.trace
    import simspec.studies.validation.run

    def started(*_: object, **__: object) -> None:
        raise AssertionError("work started before every output was checked")

    for module, name in [
        (simspec.cli.sweep, "run_cells"),
        (simspec.studies.analytic, "batch1_costs"),
        (simspec.studies.bench.compare, "compare"),
        (simspec.studies.bench.calibrate, "calibrate"),
        (simspec.studies.calibration.samples, "discover"),
        (simspec.studies.capacity, "plan"),
        (simspec.studies.capacity, "plan_fleet"),
        (simspec.studies.fleet, "run_fleet"),
        (simspec.studies.policy, "run_policy"),
        (simspec.studies.schedule.bands, "recommend_bands"),
        (simspec.studies.schedule.trace, "recommended"),
        (simspec.studies.validation.run, "validate"),
    ]:
        monkeypatch.setattr(module, name, started)


def _invoke_with(tmp_path: Path, command: str, flag: str, bad: Path):
    """``command`` with ``bad`` for ``flag`` and a good new name for each other output."""
    args, outputs = COMMANDS[command]
    harness = harness_table(tmp_path / "in" / "h.csv")
    given = [a.replace(HARNESS, str(harness)) for a in args]
    for other, suffix in outputs:
        given += [other, str(bad if other == flag else tmp_path / f"good{other[2:]}{suffix}")]
    return runner.invoke(app, given)


def _suffix(command: str, flag: str) -> str:
    return dict(COMMANDS[command][1])[flag]


@pytest.mark.parametrize(("command", "flag"), OUTPUT_FLAGS)
@pytest.mark.parametrize("kind", ["a folder", "under a file", "under a broken link", "in /proc"])
def test_every_output_is_checked_before_any_work_and_none_is_written(
    tmp_path, no_work, command, flag, kind
):
    suffix = _suffix(command, flag)
    if kind == "a folder":
        bad = tmp_path / f"bad{suffix}"
        bad.mkdir()
    elif kind == "under a file":
        (tmp_path / "file").write_text("")
        bad = tmp_path / "file" / f"bad{suffix}"
    elif kind == "under a broken link":  # writing could not make the folder
        os.symlink(tmp_path / "nowhere", tmp_path / "broken")
        bad = tmp_path / "broken" / f"bad{suffix}"
    else:  # no folder there can be made, nor a file written, even by root
        bad = Path(f"/proc/simspec-no-such/bad{suffix}")
    harness_table(tmp_path / "in" / "h.csv")
    before = listing(tmp_path)
    with within(20):
        result = _invoke_with(tmp_path, command, flag, bad)
    one_error(result, f"error: {flag}: cannot write", f"bad{suffix}")
    assert listing(tmp_path) == before  # the good outputs were not written either


def test_a_fleet_summary_that_is_a_folder_leaves_no_out_behind(tmp_path):
    (tmp_path / "dir.json").mkdir()
    args = ["fleet", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--qps", "1"]
    args += ["--requests", "4", "--out", str(tmp_path / "good.csv")]
    result = runner.invoke(app, [*args, "--summary", str(tmp_path / "dir.json")])
    one_error(result, "error: --summary:", "dir.json")
    assert not (tmp_path / "good.csv").exists()


def test_plan_refuses_an_out_under_proc_at_once(tmp_path, no_work):
    args = ["plan", "--slo-ttft-ms", "500", "--slo-tpot-ms", "50", "--qps", "1"]
    with within(10):
        result = runner.invoke(app, [*args, "--out", "/proc/x/p.csv"])
    one_error(result, "error: --out: cannot write '/proc/x/p.csv'")


@pytest.mark.parametrize(("command", "flag"), OUTPUT_FLAGS)
@pytest.mark.parametrize("dangling", [False, True], ids=["to a file", "dangling"])
def test_a_symbolic_link_as_any_output_is_refused_and_its_target_untouched(
    tmp_path, no_work, command, flag, dangling
):
    suffix = _suffix(command, flag)
    target = tmp_path / "theirs" / f"file{suffix}"
    target.parent.mkdir()
    if not dangling:  # another user's file anyone may write
        target.write_text("theirs\n")
        os.chmod(target, 0o666)
        if os.geteuid() == 0:
            os.chown(target, 12345, 12345)
    link = tmp_path / f"link{suffix}"
    os.symlink(target, link)
    harness_table(tmp_path / "in" / "h.csv")
    before = listing(tmp_path)
    result = _invoke_with(tmp_path, command, flag, link)
    one_error(result, f"error: {flag}:", f"link{suffix}", "symbolic link")
    assert os.path.islink(link) and listing(tmp_path) == before
    if not dangling:
        assert target.read_text() == "theirs\n" and stat.S_IMODE(target.stat().st_mode) == 0o666
    else:
        assert not target.exists()


@pytest.mark.parametrize(("command", "flag"), OUTPUT_FLAGS)
def test_a_5000_character_output_path_is_one_short_error_line(tmp_path, no_work, command, flag):
    long = tmp_path / ("x" * 5_000 + _suffix(command, flag))
    line = one_error(_invoke_with(tmp_path, command, flag, long), f"error: {flag}:")
    assert len(line) < 300, len(line)


@pytest.mark.parametrize("command", sorted(CALIBRATE))
def test_a_5000_character_timings_path_is_one_short_error_line(tmp_path, command):
    line = one_error(runner.invoke(app, CALIBRATE[command](tmp_path / ("x" * 5_000))))
    assert line.startswith("error: timings:") and len(line) < 300, line


@pytest.mark.parametrize(
    ("name", "command", "flag"),
    [
        ("bs1.json", ["compare", "{f}", "--gpu", "h100_sxm", "--out", "{f}"], "RESULT"),
        ("bs1.json", ["calibrate", "bench", "{f}", "{bs8}", "--out", "{f}"], "RESULT"),
        ("cases.csv", ["validate", "--cases", "{f}", "--out", "{f}"], "--cases"),
        (
            "rate.csv",
            ["policy", "--rate-csv", "{f}", "--config", "{policy}", "--out", "{f}"],
            "--rate-csv",
        ),
        ("t.csv", ["fleet", "--trace", "{f}", "--out", "{f}"], "--trace"),
        ("t.csv", ["fleet", "--trace", "{f}", "--timeline", "{f}"], "--trace"),
        ("t.csv", ["plan", "--trace", "{f}", "--slo-tpot-ms", "50", "--out", "{f}"], "--trace"),
    ],
)
def test_an_output_at_the_commands_own_input_is_refused_and_the_input_kept(
    tmp_path, name, command, flag
):
    """QA: ``compare bs1.json --out bs1.json`` replaced the benchmark result it compared, and
    validate, policy and fleet their cases, rate file and trace, all at exit 0."""
    bench = ROOT / "tests" / "data" / "bench"
    source = {
        "bs1.json": bench / "qwen3-8b-h100-bs1.json",
        "cases.csv": ROOT / "simspec" / "data" / "validation" / "cases.csv",
    }.get(name)
    f = tmp_path / name
    if source is not None:
        f.write_bytes(source.read_bytes())
    elif name == "rate.csv":
        f.write_text("time_s,rate\n0,2\n")
    else:
        f.write_text("timestamp,prompt_tokens,output_tokens\n0,10,10\n1,12,8\n")
    before = f.read_bytes()
    args = [
        a.format(f=f, bs8=bench / "qwen3-8b-h100-bs8.json", policy=ROOT / "examples/policy.yaml")
        for a in command
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"is {flag}'s input" in " ".join(result.output.split())
    assert f.read_bytes() == before


def _read_with_peak(read, path: Path) -> tuple[bytes, int]:
    """``read(path, "--trace", 256 MiB)`` and the peak bytes Python allocated meanwhile."""
    import tracemalloc

    tracemalloc.start()
    try:
        data = read(path, "--trace", 256 * 1024 * 1024)
        return data, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_reading_a_small_file_does_not_reserve_the_cap(tmp_path):
    """QA: read(max_bytes + 1) allocated the whole cap (512 MB) for a 3-line trace first, so a
    refusal's address space reached the 2 GB the capped tests allow, now and then past it."""
    from simspec.catalog.tables import read_input

    path = tmp_path / "small.csv"
    path.write_text("arrival_s,prompt_len,output_len\n0,10,10\n")
    data, peak = _read_with_peak(read_input, path)
    assert data == path.read_bytes() and peak < 1024 * 1024
    with pytest.raises(InputError, match="larger than 10 bytes"):
        read_input(path, "--trace", 10)


def test_a_gzip_reads_to_its_cap_a_megabyte_at_a_time(tmp_path):
    """The inflated bytes, whole when within the cap and refused past it, without allocating
    the cap first (read_input_gzip)."""
    import gzip

    from simspec.catalog.tables import read_input_gzip

    body = b"arrival_s,prompt_len,output_len\n" + b"0,10,10\n" * 300_000  # 2.4 MB inflated
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(body))
    data, peak = _read_with_peak(read_input_gzip, path)
    assert data == body and peak < 16 * 1024 * 1024
    with pytest.raises(InputError, match="larger than"):
        read_input_gzip(path, "--trace", len(body) - 1)
