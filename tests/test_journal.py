"""A sweep's journal and output files under hostile use: resume keyed by the
content of the files a scenario names, a journal never emptied unasked nor left by a failure,
damaged entries run again, outputs that refuse non-regular files and keep a replaced file's
mode, and no pool worker outliving a stopped sweep."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import swept
from typer.testing import CliRunner

import simspec
from simspec.cli.main import app
from simspec.cli.tables import write_frame
from simspec.config import AcceptanceConfig, LengthSpec, MethodConfig, Scenario, WorkloadConfig
from simspec.engine.metrics import RunSummary
from simspec.errors import ScenarioError
from simspec.studies.runs import Runs, executors, job
from simspec.studies.runs.journal import RunCache, read_journal
from simspec.studies.runs.keys import scenario_key
from simspec.studies.sweep import SweepConfig, run_sweep

cli = CliRunner()
SMALL = WorkloadConfig(
    requests=8,
    turnovers=1,
    lengths_from=None,
    prompt=LengthSpec(mean=64),
    output=LengthSpec(mean=32),
)
EAGLE = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))
FAST = ["--batch-sizes", "1,4", "--requests", "8", "--turnovers", "1", "--methods", "eagle3"]
FAST += ["--executor", "serial"]
PROFILE = Path(simspec.__file__).parent / "data" / "profiles" / "h100_sxm.yaml"


def grid(**kw) -> SweepConfig:
    return SweepConfig(
        methods=[MethodConfig(name="autoregressive", k=0), EAGLE],
        batch_sizes=[1, 4],
        workload=SMALL,
        **kw,
    )


def sweep(*args: str):
    return cli.invoke(app, ["sweep", *args, "--quiet"])


# --- resume keys runs by the content of the files they name ------------------------------


def test_a_profile_edited_between_stop_and_resume_runs_again(tmp_path):
    prof = tmp_path / "prof.yaml"
    prof.write_text(PROFILE.read_text())
    journal = tmp_path / "o.csv.partial"
    before = swept(grid(profile=str(prof)), journal)
    # a stop: the journal holds every run; now the profile changes (a 1000x slower GEMM)
    prof.write_text(PROFILE.read_text().replace("value: 6.0324e-06", "value: 6.0324e-03", 1))
    resumed = swept(grid(profile=str(prof)), journal, resume=True)
    fresh = run_sweep(grid(profile=str(prof)))
    pd.testing.assert_frame_equal(resumed, fresh)
    assert (resumed.throughput_tok_s < before.throughput_tok_s / 10).all()


def test_the_key_hashes_named_files_and_is_unchanged_without_them(tmp_path):
    plain = Scenario(workload=SMALL).model_dump_json()
    assert scenario_key(plain) == hashlib.sha256(plain.encode()).hexdigest()[:20]
    prof = tmp_path / "p.yaml"
    prof.write_text(PROFILE.read_text())
    named = Scenario(workload=SMALL, profile=str(prof)).model_dump_json()
    first = scenario_key(named)
    assert first != hashlib.sha256(named.encode()).hexdigest()[:20]
    prof.write_text(PROFILE.read_text() + "\n# edited\n")
    assert scenario_key(named) != first


# --- a journal is never emptied unasked, nor left behind by a failure --------------------


def test_a_sweep_without_resume_refuses_an_existing_journal(tmp_path):
    out = tmp_path / "o.csv"
    journal = tmp_path / "o.csv.partial"
    swept(grid(), journal)
    saved = journal.read_bytes()
    result = sweep(*FAST, "--out", str(out))
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: --resume:") and "delete it" in result.output
    assert journal.read_bytes() == saved and not out.exists()
    with pytest.raises(Exception, match="--resume"):
        RunCache(journal)  # the library refuses too
    assert journal.read_bytes() == saved


def test_a_failing_sweep_leaves_no_journal(tmp_path, monkeypatch):
    real = job.simulate

    def fails_at_four(sc: Scenario):
        if sc.workload.concurrency == 4:
            raise ScenarioError("simulated failure")
        return real(sc)

    monkeypatch.setattr(job, "simulate", fails_at_four)
    out = tmp_path / "o.csv"
    result = sweep(*FAST, "--out", str(out))
    assert result.exit_code == 2 and "simulated failure" in result.output, result.output
    assert sorted(os.listdir(tmp_path)) == []


@pytest.mark.parametrize("kind", ["directory", "fifo", "under a file", "journal is a directory"])
def test_an_out_that_cannot_be_written_is_refused_before_any_run(tmp_path, monkeypatch, kind):
    ran: list[Scenario] = []
    monkeypatch.setattr(job, "simulate", lambda sc: ran.append(sc))
    out = tmp_path / "o.csv"
    if kind == "directory":
        out.mkdir()
    elif kind == "fifo":
        os.mkfifo(out)
    elif kind == "under a file":
        (tmp_path / "file").write_text("x")
        out = tmp_path / "file" / "o.csv"
    else:
        (tmp_path / "o.csv.partial").mkdir()
    listing = sorted(os.listdir(tmp_path))
    result = sweep(*FAST, "--out", str(out))
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: --out:") and len(result.output.splitlines()) == 1
    assert ran == [] and sorted(os.listdir(tmp_path)) == listing


@pytest.mark.slow
def test_sweep_and_plan_both_create_missing_folders(tmp_path):
    out = tmp_path / "a" / "b" / "o.csv"
    assert sweep(*FAST, "--out", str(out)).exit_code == 0
    assert len(pd.read_csv(out)) == 2
    planned = tmp_path / "c" / "d" / "p.csv"  # plan writes with write_frame
    write_frame(pd.DataFrame({"x": [1]}), planned)
    assert planned.read_text() == "x\n1\n"


# --- values read back from a journal are checked -----------------------------------------


def _damaged(line: str, how: str) -> bytes:
    entry = json.loads(line)
    summary = entry["summary"]
    if how == "edited":
        summary["throughput_tok_s"] *= 100
    elif how == "missing":
        del summary["tpot_ms_p50"]
    elif how in ("null", "string", "nan", "inf", "bool", "fraction count"):
        value = {
            "null": None,
            "string": "12.5",
            "nan": float("nan"),
            "inf": float("inf"),
            "bool": True,
            "fraction count": 2.5,
        }[how]
        summary["requests" if how == "fraction count" else "throughput_tok_s"] = value
    elif how == "utf-8":
        return line.encode().replace(b'"summary"', b'"summ\xff\xfery"')
    elif how == "deep":
        return b"[" * 100_000 + b"]" * 100_000
    elif how == "huge int":
        return line.replace('"requests": 8', '"requests": 1' + "0" * 5000).encode()
    if how != "edited":  # re-sign it, so only the value check can catch it
        body = json.dumps(summary, sort_keys=True)
        entry["check"] = hashlib.sha256(f"{entry['key']}\0{body}".encode()).hexdigest()[:16]
    return json.dumps(entry).encode()


DAMAGE = ["edited", "missing", "null", "string", "nan", "inf", "bool", "fraction count"]
DAMAGE += ["utf-8", "deep", "huge int"]


@pytest.mark.slow
def test_cli_resume_drops_damaged_entries_with_a_warning_and_runs_them_again(tmp_path, monkeypatch):
    fresh = tmp_path / "fresh.csv"
    assert sweep(*FAST, "--out", str(fresh)).exit_code == 0
    real = job.simulate

    def stopped_at_four(sc: Scenario):
        if sc.workload.concurrency == 4:
            raise KeyboardInterrupt  # Ctrl-C: a stop, which keeps the journal
        return real(sc)

    out = tmp_path / "o.csv"
    journal = tmp_path / "o.csv.partial"
    monkeypatch.setattr(job, "simulate", stopped_at_four)
    stopped = sweep(*FAST, "--out", str(out))
    assert stopped.exit_code != 0
    # the stop says what it kept and how to go on (QA: a Ctrl-C was silent)
    assert f"kept in {journal}" in " ".join(stopped.output.split()), stopped.output
    assert "--resume" in stopped.output
    monkeypatch.setattr(job, "simulate", real)
    lines = journal.read_text().splitlines()
    assert len(lines) == 2 and not out.exists()
    journal.write_bytes(_damaged(lines[0], "nan") + b"\n" + _damaged(lines[1], "utf-8") + b"\n")
    result = sweep(*FAST, "--resume", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "warning:" in result.output and "2 damaged entries" in result.output
    assert out.read_bytes() == fresh.read_bytes() and not journal.exists()


@pytest.mark.slow
def test_every_kind_of_damage_is_caught_on_resume(tmp_path):
    journal = tmp_path / "o.csv.partial"
    fresh = swept(grid(), journal)
    lines = journal.read_text().splitlines()
    assert len(lines) == 4
    for how in DAMAGE:
        bad = [_damaged(lines[0], how), *(line.encode() for line in lines[1:])]
        journal.write_bytes(b"\n".join(bad) + b"\n")
        kept, dropped = read_journal(journal)
        assert (len(kept), dropped) == (3, 1), how
        warned: list[str] = []
        resumed = swept(grid(), journal, resume=True, warn=warned.append)
        assert len(warned) == 1 and "1 damaged entry" in warned[0], how
        pd.testing.assert_frame_equal(resumed, fresh)
        assert read_journal(journal)[1] == 0  # rewritten without it, then appended


def test_run_summary_from_dict_rejects_what_is_not_a_finite_number():
    summary = Runs().one(Scenario(workload=SMALL))
    values = summary.as_json_dict()  # undefined measures (too few requests for intervals): null
    back = RunSummary.from_dict(json.loads(json.dumps(values)))
    assert back.as_json_dict() == values
    for field, value in (
        ("throughput_tok_s", None),
        ("throughput_tok_s", "1"),
        ("throughput_tok_s", float("nan")),
        ("throughput_tok_s", float("-inf")),
        ("requests", -1),
        ("requests", 1.5),
        ("requests", True),
    ):
        with pytest.raises(ValueError, match=field):
            RunSummary.from_dict({**values, field: value})
    with pytest.raises(ValueError):
        RunSummary.from_dict({k: v for k, v in values.items() if k != "requests"})
    with pytest.raises(ValueError):
        RunSummary.from_dict([1, 2])


# --- writing --out ---------------------------------------------------------------------


def test_replacing_an_output_keeps_its_mode_and_owner(tmp_path):
    out = tmp_path / "o.csv"
    out.write_text("old\n")
    os.chmod(out, 0o600)
    if os.geteuid() == 0:
        os.chown(out, 12345, 12345)
    write_frame(pd.DataFrame({"x": [1]}), out)
    st = out.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and out.read_text() == "x\n1\n"
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (12345, 12345)


def test_a_fifo_or_directory_is_never_replaced_by_an_output(tmp_path):
    fifo = tmp_path / "f.csv"
    os.mkfifo(fifo)
    folder = tmp_path / "d.csv"
    folder.mkdir()
    for target in (fifo, folder):
        with pytest.raises(Exception, match="--out"):
            write_frame(pd.DataFrame({"x": [1]}), target)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and folder.is_dir()
    assert sorted(os.listdir(tmp_path)) == ["d.csv", "f.csv"]


# --- no pool worker outlives a stopped sweep ---------------------------------------------


def _children(pid: int) -> set[int]:
    """Live (not zombie) processes whose parent is ``pid``, from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat_line = (entry / "stat").read_text()
            except OSError:
                continue
            state, ppid = stat_line.rsplit(")", 1)[1].split()[:2]
            if int(ppid) == pid and state != "Z":
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_signalled_sweep_leaves_no_pool_worker(tmp_path, sig):
    cmd = [sys.executable, "-m", "simspec.cli", "sweep", "--batch-sizes", "1,2,4,8,16,32"]
    cmd += ["--requests", "3000", "--executor", "process", "--workers", "2", "--quiet"]
    proc = subprocess.Popen(cmd + ["--out", str(tmp_path / "o.csv")], cwd=tmp_path)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 30
        while len(workers := _children(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(workers) == 2 and proc.poll() is None
        proc.send_signal(getattr(signal, sig))
        code = proc.wait(timeout=20)
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(w) for w in workers), sig
        assert code == -signal.SIGKILL if sig == "SIGKILL" else code == 128 + getattr(signal, sig)
    finally:
        for pid in [proc.pid, *workers]:  # a failure here must not leave them either
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_while_a_pool_runs_sigterm_and_sighup_exit_like_the_shell_reports_them():
    # from the default handlers (a suite started under nohup ignores SIGHUP, and a handler
    # someone else installed is left alone by design)
    before = {sig: signal.signal(sig, signal.SIG_DFL) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        restore = executors.exit_on_signals()
        try:
            for sig in (signal.SIGTERM, signal.SIGHUP):
                with pytest.raises(SystemExit) as stop:
                    signal.getsignal(sig)(sig, None)
                assert stop.value.code == 128 + sig
        finally:
            restore()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_DFL
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_journal_line_names_the_code_that_ran_it_not_only_the_release():
    """The release number stays over many commits that change the numbers: each line's
    version carries a digest of the package's files, so a resume after any change to them
    runs the cells again (QA: a checkout resumed an older commit's cells into one CSV)."""
    import re

    from simspec.studies.runs import journal

    release, _, digest = journal.package_version().partition("+")
    assert release and re.fullmatch(r"[0-9a-f]{12}", digest)
    assert journal._source_digest() == journal._source_digest()  # the files, not the moment
