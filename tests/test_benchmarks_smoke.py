"""The hand-run benchmark scripts parse their arguments and refuse what they cannot run, in one
line. No timing is asserted: the scripts measure, a person reads."""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "benchmarks" / "bench_studies.py"
SIDE_BY_SIDE = ROOT / "benchmarks" / "peers" / "specdecode_bench_side_by_side.py"


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_bench_studies_lists_every_row_of_the_issue_table_with_its_target():
    out = _run(str(STUDIES), "--list")
    assert out.returncode == 0, out.stderr
    names = [line.split()[0] for line in out.stdout.splitlines()]
    assert names == ["recommend", "sweep-all", "sweep", "plan", "engine", "specdecode"]
    assert "target" in out.stdout


@pytest.mark.parametrize(
    "args, field",
    [
        (["no-such-row"], "ROW"),
        (["sweep", "--repeat", "0"], "--repeat"),
        (["specdecode"], "--peer"),
    ],
)
def test_bench_studies_refuses_bad_arguments_in_one_line_before_running(args, field):
    out = _run(str(STUDIES), *args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}:")


def test_side_by_side_refuses_a_folder_that_is_not_the_peer_checkout(tmp_path):
    out = _run(str(SIDE_BY_SIDE), str(tmp_path), "--out-dir", str(tmp_path / "out"))
    assert out.returncode == 2
    assert out.stderr.strip().startswith("error: PEER_DIR:")
    assert "main.py" in out.stderr


def test_side_by_side_names_the_package_the_peer_needs_and_this_python_lacks(tmp_path):
    sbs = _module(SIDE_BY_SIDE)
    for name in sbs.PEER_FILES:
        (tmp_path / name).write_text("")
    (tmp_path / "main.py").write_text("import no_such_package_for_simspec_tests\n")
    data = tmp_path / "data" / "llama3.1-8B"
    data.mkdir(parents=True)
    for d in sbs.DATASETS:
        (data / f"combined_{d}.jsonl").write_text("")
    with pytest.raises(sbs.PeerError, match="no_such_package_for_simspec_tests"):
        sbs.check_peer(tmp_path, sys.executable)


def test_side_by_side_writes_one_validate_row_per_peer_point(tmp_path):
    sbs = _module(SIDE_BY_SIDE)
    for proposer in sbs.PROPOSERS:
        for dataset in sbs.DATASETS:
            lines = ["batch_size,predict_method,acc_method,speedup"]
            lines += [f"{b},FIXED_3,EAGLE,1.50" for b in sbs.BATCH_SIZES]
            lines += ["8,FIXED_1,EAGLE,9.99"]  # another predict method: not one of the points
            (tmp_path / f"{proposer}_{dataset}_speedup.csv").write_text("\n".join(lines))
    points = sbs.peer_speedups(tmp_path)
    assert len(points) == 32
    n = sbs.write_cases(points, tmp_path / "points.csv")
    with (tmp_path / "points.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert n == len(rows) == 32
    assert list(rows[0]) == sbs.CASE_COLUMNS
    assert {r["measured_value"] for r in rows} == {"1.5"}
    assert {r["k"] for r in rows} == {"3"} and {r["uses_trace"] for r in rows} == {"yes"}


def test_gpustack_twins_copy_their_rows_and_change_only_what_the_page_states():
    """tools/gpustack_twins.py (the README's checks outside ../shared) builds each printed run
    as its converted twin with the model, GPU, TP, release, precision and serve command of the
    page: every other cell (load kind, dataset, the benchmark's statistic) stays the twin's."""
    twins = _module(ROOT / "tools" / "gpustack_twins.py")
    if not twins.CASES.is_file():
        pytest.skip("needs ../shared")
    from simspec.studies.validation.cases import read_cases

    source = read_cases(twins.CASES).set_index("case_id")
    rows = twins.twin_rows(read_cases(twins.CASES))
    runs = twins.load_twins()
    assert len(rows) == sum(len(t.printed) for t in runs)
    each = [twin for twin in runs for _ in twin.printed]
    for t, (_, row) in zip(each, rows.iterrows(), strict=True):
        metric = row.case_id.split(" | ")[1]
        base = source.loc[f"{t.twin}-{twins.SUFFIX[metric]}"]
        assert (row.target_model, row.gpu, row.tp, row.engine_version) == (
            t.model,
            t.gpu,
            str(t.gpus),
            t.release,
        )
        assert row.notes.startswith(t.precision) and f"serve: {t.serve};" in row.notes
        assert base.engine_version not in row.notes or base.engine_version == t.release
        assert (row.metric, row.load_kind, row.dataset) == (metric, base.load_kind, base.dataset)
        assert float(row.measured_value) == t.printed[metric]
