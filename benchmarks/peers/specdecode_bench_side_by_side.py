"""SpecDecode-Bench's simulator and simspec on the same points, side by side: times and speedups.

    python benchmarks/peers/specdecode_bench_side_by_side.py PEER_DIR [--out-dir DIR]
        [--repeat 3] [--peer-results DIR] [--peer-python PYTHON]

PEER_DIR is a checkout of github.com/SpecDecode-Bench/simulator (the simulator of "Speculative
Decoding: Performance or Illusion?", Liu et al., arXiv 2601.11580; read at commit 2fdccbd). Nothing
of it is vendored here. Its `main.py` needs `tqdm` (its requirements.txt also lists pandas and
matplotlib, which only its plot.py imports).

The points: the peer's own grid (main.py: proposers eagle3 and ngram, datasets gsm8k,
instructcoder, sharegpt, cnn) at K = 3 (its `FIXED_3`: 3 proposed tokens per step) and batch sizes
1, 16, 64, 128: 2 x 4 x 4 = 32 points, the grid `benchmarks/bench_sweep.py grid` times. The peer
runs them as two `main.py` processes (one per proposer). simspec runs them as one `simspec validate
--cases` table of 32 speedup rows (Llama-3.1-8B, one H100, vLLM, static batch of B, acceptance
replayed from the packaged copies of the same traces, chain K = 3); each row's `measured_value` is
the peer's speedup, so the validate table's rel_error is simspec against the peer, not against a
measurement. Printed: both tools' wall and CPU seconds (whole processes; CPU summed over each
process and the children it reaped) and their ratio, and the two speedups per point.

Not a test; run by hand. The peer took 828 s of one core (420 + 408 s, on a loaded 2-core machine).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROPOSERS = ("eagle3", "ngram")
DATASETS = ("gsm8k", "instructcoder", "sharegpt", "cnn")
BATCH_SIZES = (1, 16, 64, 128)
PEER_PREDICT = "FIXED_3"  # predictor.py: FIXED_3 -> input length 4, i.e. 3 proposed tokens
K = 3
PEER_FILES = ("main.py", "simulator.py", "predictor.py", "request.py")
CASE_COLUMNS = (
    "case_id,series,source,metric,method,target_model,draft_model,gpu,num_gpus,tp,engine,"
    "engine_version,load_kind,load,temperature,dataset,prompt_len,output_len,context_len,"
    "spec_shape,k,tree_nodes,tree_topk,measured_tau,measured_value,baseline,uses_trace,notes"
).split(",")


class PeerError(Exception):
    """The peer checkout cannot run here (the message names what is missing)."""


@dataclass
class Timing:
    """One whole process: wall seconds, CPU seconds (user + system, reaped children included),
    peak resident MiB of its largest process, exit status."""

    wall: float
    cpu: float
    peak_mib: float
    rc: int


def timed(cmd: list[str], cwd: Path, log: Path, env: dict[str, str] | None = None) -> Timing:
    """Run ``cmd`` to completion, its output appended to ``log``; the kernel's own accounting
    (wait4) gives the CPU seconds, so a process pool's workers count too."""
    with log.open("ab") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss is KiB on Linux
    return Timing(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode)


def check_peer(peer: Path, python: str) -> None:
    """Raise PeerError naming the first file or package the peer's main.py lacks."""
    missing = [f for f in PEER_FILES if not (peer / f).is_file()]
    missing += [
        f"data/llama3.1-8B/combined_{d}.jsonl"
        for d in DATASETS
        if not (peer / "data" / "llama3.1-8B" / f"combined_{d}.jsonl").is_file()
    ]
    if missing:
        raise PeerError(
            f"PEER_DIR: {peer} is not a SpecDecode-Bench/simulator checkout: no {missing[0]}"
        )
    probe = subprocess.run(
        [python, "-c", "import main"], cwd=peer, capture_output=True, text=True, check=False
    )
    if probe.returncode:
        lines = probe.stderr.strip().splitlines()
        last = lines[-1] if lines else f"exit {probe.returncode}"
        if "ModuleNotFoundError" in last:
            name = last.split("'")[1] if "'" in last else last
            raise PeerError(
                f"--peer-python: {python} lacks the package {name!r} the peer's main.py imports "
                f"(install the peer's requirements.txt: tqdm; pandas and matplotlib are only "
                f"for its plot.py)"
            )
        raise PeerError(f"PEER_DIR: importing the peer's main.py failed: {last}")


def run_peer(peer: Path, python: str, results: Path, log: Path) -> list[Timing]:
    """The 32 points as the peer runs them: one main.py per proposer, its CSVs in ``results``."""
    results.mkdir(parents=True, exist_ok=True)
    timings = []
    for proposer in PROPOSERS:
        cmd = [python, "main.py", "--proposer", proposer, "--datasets", *DATASETS,
               "--predict-methods", PEER_PREDICT, "--batch-sizes", *map(str, BATCH_SIZES),
               "--output-dir", str(results.resolve())]  # fmt: skip
        t = timed(cmd, peer, log)
        if t.rc:
            raise PeerError(
                f"PEER_DIR: the peer's main.py --proposer {proposer} exited {t.rc}; see {log}"
            )
        timings.append(t)
    return timings


def peer_speedups(results: Path) -> dict[tuple[str, str, int], float]:
    """(proposer, dataset, batch) -> the peer's speedup, from its results CSVs."""
    out: dict[tuple[str, str, int], float] = {}
    for proposer in PROPOSERS:
        for dataset in DATASETS:
            path = results / f"{proposer}_{dataset}_speedup.csv"
            if not path.is_file():
                raise PeerError(f"--peer-results: no {path.name} in {results}")
            with path.open(newline="") as fh:
                for row in csv.DictReader(fh):
                    if row["predict_method"] == PEER_PREDICT:
                        out[proposer, dataset, int(row["batch_size"])] = float(row["speedup"])
    return out


def write_cases(speedups: dict[tuple[str, str, int], float], path: Path) -> int:
    """The points as a `simspec validate --cases` table; returns the row count."""
    rows = []
    for (method, dataset, batch), speedup in sorted(speedups.items()):
        if batch not in BATCH_SIZES:
            continue
        row = dict.fromkeys(CASE_COLUMNS, "")
        row.update(
            case_id=f"sdb-{method}-{dataset}-b{batch}",
            series=f"specdecode-bench-simulator-{method}",
            source="SpecDecode-Bench/simulator main.py (a simulator's output, not a measurement)",
            metric="speedup", method=method, target_model="llama-3.1-8b", gpu="h100_sxm",
            num_gpus="1", tp="1", engine="vllm", load_kind="static_batch", load=str(batch),
            dataset=dataset, spec_shape="chain", k=str(K), measured_value=f"{speedup:g}",
            baseline="same-engine-no-spec", uses_trace="yes",
            notes=f"the peer simulator's speedup at {PEER_PREDICT}, batch {batch}",
        )  # fmt: skip
        rows.append(row)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CASE_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)


def run_simspec(cases: Path, out_dir: Path, repeat: int, log: Path) -> list[Timing]:
    """`simspec validate --cases` on the points, ``repeat`` times, of this checkout's simspec."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "simspec.cli.main", "validate", "--cases", str(cases),
           "--out", str(out_dir / "simspec_predictions.csv")]  # fmt: skip
    timings = []
    for _ in range(repeat):
        t = timed(cmd, out_dir, log, env)
        if t.rc:
            raise PeerError(f"simspec validate exited {t.rc}; see {log}")
        timings.append(t)
    return timings


def spread(values: list[float]) -> str:
    """min / median / max, as farm-style figures."""
    return f"{min(values):8.2f} {statistics.median(values):8.2f} {max(values):8.2f}"


def report(peer: list[Timing] | None, ours: list[Timing], predictions: Path) -> None:
    """Times, the ratio, and the speedups point by point."""
    print(f"{'':28} {'min':>8} {'median':>8} {'max':>8}")
    if peer:
        print(f"{'peer wall s (2 processes)':28} {sum(t.wall for t in peer):8.2f}")
        print(f"{'peer cpu s':28} {sum(t.cpu for t in peer):8.2f}")
    print(f"{'simspec validate wall s':28} {spread([t.wall for t in ours])}  ({len(ours)} runs)")
    print(f"{'simspec validate cpu s':28} {spread([t.cpu for t in ours])}")
    print(f"{'simspec peak MiB':28} {spread([t.peak_mib for t in ours])}")
    if peer:
        pw, pc = sum(t.wall for t in peer), sum(t.cpu for t in peer)
        best_w, best_c = min(t.wall for t in ours), min(t.cpu for t in ours)
        print(
            f"ratio peer / simspec: wall {pw / best_w:.0f}x (best), "
            f"{pw / statistics.median([t.wall for t in ours]):.0f}x (median); "
            f"cpu {pc / best_c:.0f}x (best)"
        )
    with predictions.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    ok = [r for r in rows if r["status"] == "ok"]
    print(f"\npoints: {len(rows)} asked, {len(ok)} predicted by simspec")
    print(f"{'point':34} {'peer':>6} {'simspec':>8} {'simspec/peer':>13}")
    for r in rows:
        if r["status"] != "ok":
            print(f"{r['case_id']:34} {r['measured_value']:>6} skipped: {r['skip_reason']}")
            continue
        peer_s, ours_s = float(r["measured_value"]), float(r["predicted_value"])
        print(f"{r['case_id']:34} {peer_s:6.2f} {ours_s:8.2f} {ours_s / peer_s - 1:+12.1%}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "peer", type=Path, metavar="PEER_DIR", help="SpecDecode-Bench/simulator checkout"
    )
    ap.add_argument("--out-dir", type=Path, help="where results and logs go [default: a temp dir]")
    ap.add_argument("--repeat", type=int, default=3, help="simspec runs (best of) [default: 3]")
    ap.add_argument(
        "--peer-results",
        type=Path,
        help="reuse the peer's CSVs from this folder instead of running it (no peer time then)",
    )
    ap.add_argument("--peer-python", default=sys.executable, help="python that runs the peer")
    args = ap.parse_args()
    if args.repeat < 1:
        print("error: --repeat: at least 1", file=sys.stderr)
        return 2
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="sdb_side_by_side_"))
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / "log.txt"
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
          f"python {sys.version.split()[0]}; output in {out_dir}")  # fmt: skip
    try:
        peer_times = None
        if args.peer_results is not None:
            results = args.peer_results
        else:
            check_peer(args.peer.resolve(), args.peer_python)
            results = out_dir / "peer_results"
            peer_times = run_peer(args.peer.resolve(), args.peer_python, results, log)
        cases = out_dir / "points.csv"
        n = write_cases(peer_speedups(results), cases)
        print(f"{n} points; simspec validate --cases {cases}")
        ours = run_simspec(cases, out_dir, args.repeat, log)
    except PeerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report(peer_times, ours, out_dir / "simspec_predictions.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
