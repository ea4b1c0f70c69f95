"""Each row of the "Answers in seconds" table timed as a whole process, against its target.

    python benchmarks/bench_studies.py [ROW ...] [--repeat 3] [--out-dir DIR]
        [--peer PEER_DIR | --peer-results DIR [--peer-seconds S]]
    python benchmarks/bench_studies.py --list

Rows (default: all): recommend, sweep-all, sweep, plan, engine, specdecode. Each command runs
``--repeat`` times in a fresh working folder under a temporary directory (every file it writes
goes there: ``--out`` is always given), with this checkout's simspec first on PYTHONPATH, so
running the script from two worktrees compares them. Printed: the machine (cores, load average,
python and numpy), then per row the min / median / max of wall and CPU seconds (user + system,
the process pool's workers included: the kernel's wait4 accounting) and peak resident MiB of the
largest process, the target, and whether the best run meets it. ``sweep`` also prints how many
speedups the command said are known only to more than +-2 %; ``engine`` also prints the
simulation's own seconds that bench_engine.py reports (its target is on those);
``specdecode`` times ``simspec validate`` on the SpecDecode-Bench points
(benchmarks/peers/specdecode_bench_side_by_side.py) and divides the peer's seconds by them:
give ``--peer`` (runs the peer once: 828 s of CPU on a loaded 2-core machine) or
``--peer-results`` with the peer's CSVs and ``--peer-seconds`` measured earlier.

A benchmark, run by hand: nothing here asserts a time. On a shared machine compare CPU seconds,
and compare two builds by alternating them on the same machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import re
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SIDE_BY_SIDE = ROOT / "benchmarks" / "peers" / "specdecode_bench_side_by_side.py"
# the sweep's notes on speedups short of the asked precision: without a target, those known
# only to more than +-2 %; with one (the default since stop 43), those whose run reached its cap
WIDE = re.compile(r"note: (\d+) speedup\(s\) (?:known only to more than|reached the cap)")
ENGINE_BEST = re.compile(r"best of \d+: ([0-9.]+) s")


def _side_by_side():
    """The SpecDecode-Bench side-by-side module (a script under peers/, not a package)."""
    spec = importlib.util.spec_from_file_location("specdecode_bench_side_by_side", SIDE_BY_SIDE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sbs = _side_by_side()


@dataclass
class Row:
    """A table row: the command (given its working folder), the target in seconds, and what
    else to read from its output."""

    name: str
    what: str
    target_s: float
    command: Callable[[Path], list[str]]
    extra: Callable[[str], str] | None = None
    timings: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def simspec(*args: str) -> Callable[[Path], list[str]]:
    """``python -m simspec.cli.main ARGS``; ``{out}`` in an argument is the run's folder."""
    return lambda d: (
        [sys.executable, "-m", "simspec.cli.main"] + [a.replace("{out}", str(d)) for a in args]
    )


def wide_count(output: str) -> str:
    """The sweep's own count of speedups whose 95 % interval is wider than +-2 %."""
    wide = sum(int(m.group(1)) for m in WIDE.finditer(output))
    return f"speedups short of the asked precision (wider than the target, or capped): {wide}"


def engine_seconds(output: str) -> str:
    """bench_engine.py's in-process seconds (the simulation alone, its target's measure)."""
    m = ENGINE_BEST.search(output)
    return f"simulation alone (bench_engine's own figure): {m.group(1) if m else '?'} s"


# the table ("Answers in seconds"): command and target
PLAN = "simspec plan --qps 20 --slo-tpot-ms 50 --slo-ttft-ms 2000 --methods eagle3"
ROWS = {
    "recommend": Row(
        "recommend",
        "simspec recommend (defaults)",
        30.0,
        simspec("recommend", "--out", "{out}/recommend.csv"),
    ),
    "sweep-all": Row(
        "sweep-all",
        "simspec sweep --methods all",
        30.0,
        simspec("sweep", "--methods", "all", "--out", "{out}/sweep_all.csv"),
    ),
    "sweep": Row(
        "sweep",
        "simspec sweep (README's first command)",
        15.0,
        simspec("sweep", "--out", "{out}/sweep.csv"),
        wide_count,
    ),
    "plan": Row("plan", PLAN, 20.0, simspec(*PLAN.split()[1:], "--out", "{out}/plan.csv")),
    "engine": Row(
        "engine",
        "benchmarks/bench_engine.py --repeat 1 (10k requests, concurrency 64)",
        1.0,
        lambda d: [sys.executable, str(ROOT / "benchmarks" / "bench_engine.py"), "--repeat", "1"],
        engine_seconds,
    ),
}
SPECDECODE = "specdecode"
SPECDECODE_RATIO = 300.0  # the target: the peer's seconds over simspec's, at least


def machine() -> str:
    """Cores, load, python and numpy: what a reader needs to weigh the figures."""
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"machine: {os.cpu_count()} cores ({platform.machine()}), load average {load} "
        f"(1/5/15 min); python {platform.python_version()}, numpy {np.__version__}; "
        f"simspec from {ROOT}"
    )


def run_row(row: Row, repeat: int, base: Path) -> None:
    """Time ``row`` ``repeat`` times, each in a fresh folder; keep its timings and notes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for i in range(repeat):
        folder = base / f"{row.name}-{i}"
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / "output.txt"
        t = sbs.timed(row.command(folder), folder, log, env)
        row.timings.append(t)
        text = log.read_text(errors="replace")
        if t.rc:
            row.notes.append(f"run {i + 1} exited {t.rc}: see {log}")
        elif row.extra is not None:
            row.notes.append(f"run {i + 1}: {row.extra(text)}")


def specdecode(args: argparse.Namespace, base: Path) -> Row:
    """simspec validate on the SpecDecode-Bench points, and the ratio to the peer's seconds."""
    row = Row(SPECDECODE, "SpecDecode-Bench points, simspec validate", 0.0, lambda d: [])
    folder = base / SPECDECODE
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "output.txt"
    peer_s = args.peer_seconds
    peer_cpu = None
    if args.peer is not None:
        sbs.check_peer(args.peer.resolve(), sys.executable)
        results = folder / "peer_results"
        peer = sbs.run_peer(args.peer.resolve(), sys.executable, results, log)
        peer_s = sum(t.wall for t in peer)
        peer_cpu = sum(t.cpu for t in peer)
        row.notes.append(f"peer ran once: {peer_s:.1f} s wall, {peer_cpu:.1f} s CPU")
    else:
        results = args.peer_results
        if peer_s is not None:
            row.notes.append(f"peer seconds given: {peer_s:.1f} s (--peer-seconds)")
    n = sbs.write_cases(sbs.peer_speedups(results), folder / "points.csv")
    row.notes.append(f"{n} points")
    row.timings = sbs.run_simspec(folder / "points.csv", folder, args.repeat, log)
    if peer_s is not None:
        best = min(t.wall for t in row.timings)
        med = statistics.median(t.wall for t in row.timings)
        row.notes.append(
            f"ratio peer / simspec: {peer_s / best:.0f}x best, {peer_s / med:.0f}x median "
            f"(target >= {SPECDECODE_RATIO:.0f}x): "
            + ("meets" if peer_s / best >= SPECDECODE_RATIO else "not met")
        )
        row.target_s = peer_s / SPECDECODE_RATIO
    if peer_cpu is not None:  # on a shared machine the CPU ratio is the steadier one
        row.notes.append(
            f"ratio of CPU seconds: {peer_cpu / min(t.cpu for t in row.timings):.0f}x "
            "(simspec's pool spends more CPU than wall)"
        )
    return row


def print_row(row: Row) -> None:
    """min / median / max of each figure, the target, and the notes."""

    def mmm(values: list[float]) -> str:
        return f"{min(values):9.2f} {statistics.median(values):9.2f} {max(values):9.2f}"

    ts = row.timings
    print(f"\n{row.name}: {row.what}")
    print(f"  {'':10} {'min':>9} {'median':>9} {'max':>9}   ({len(ts)} runs)")
    print(f"  {'wall s':10} {mmm([t.wall for t in ts])}")
    print(f"  {'cpu s':10} {mmm([t.cpu for t in ts])}")
    print(f"  {'peak MiB':10} {mmm([t.peak_mib for t in ts])}")
    if row.target_s and row.name != "engine":
        best = min(t.wall for t in ts)
        verdict = "meets" if best <= row.target_s else "not met"
        print(f"  target <= {row.target_s:.1f} s wall: best {best:.2f} s, {verdict}")
    elif row.name == "engine":
        print(f"  target <= {row.target_s:.1f} s for the simulation alone (below)")
    for note in row.notes:
        print(f"  {note}")


def main() -> int:
    names = [*ROWS, SPECDECODE]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="*", metavar="ROW", help=f"rows to time: {', '.join(names)}")
    ap.add_argument("--list", action="store_true", help="list the rows and exit")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command [default: 3]")
    ap.add_argument("--out-dir", type=Path, help="keep the runs' files here [default: temp]")
    ap.add_argument("--peer", type=Path, help="a SpecDecode-Bench/simulator checkout to run")
    ap.add_argument("--peer-results", type=Path, help="the peer's CSVs from an earlier run")
    ap.add_argument("--peer-seconds", type=float, help="the peer's wall seconds for them")
    args = ap.parse_args()
    if args.list:
        for name in ROWS:
            print(f"{name:10} {ROWS[name].what} (target <= {ROWS[name].target_s:g} s)")
        print(f"{SPECDECODE:10} SpecDecode-Bench points: peer seconds / simspec validate "
              f"seconds (target >= {SPECDECODE_RATIO:.0f}x)")  # fmt: skip
        return 0
    bad = [r for r in args.rows if r not in names]
    if bad:
        print(
            f"error: ROW: {bad[0]!r} is not a row; choose from {', '.join(names)}", file=sys.stderr
        )
        return 2
    if not 1 <= args.repeat <= 20:
        print("error: --repeat: 1 to 20 runs", file=sys.stderr)
        return 2
    # by default every row, the peer's only where its checkout or results are given
    peer_given = args.peer is not None or args.peer_results is not None
    rows = args.rows or [n for n in names if n != SPECDECODE or peer_given]
    if SPECDECODE in rows and not peer_given:
        print("error: --peer: the specdecode row needs --peer PEER_DIR or --peer-results DIR "
              "(leave the row out to skip it)", file=sys.stderr)  # fmt: skip
        return 2
    base = args.out_dir or Path(tempfile.mkdtemp(prefix="bench_studies_"))
    base.mkdir(parents=True, exist_ok=True)
    print(machine())
    print(f"runs' files in {base}; best of {args.repeat}")
    for name in rows:
        try:
            if name == SPECDECODE:
                row = specdecode(args, base)
            else:
                row = ROWS[name]
                run_row(row, args.repeat, base)
        except sbs.PeerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print_row(row)
        sys.stdout.flush()
    print(f"\nload average after: {'/'.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
