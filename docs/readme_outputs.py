"""Regenerate (or check) every command output shown in README.md and docs/first-day.md.

    python docs/readme_outputs.py --write            # run every block, rewrite the documents
    python docs/readme_outputs.py --write NAME ...   # only these blocks
    python docs/readme_outputs.py --check [NAME ...] # run, and print what differs (exit 1)
    python docs/readme_outputs.py --list             # the blocks, what each runs, how long

A block in a document sits between two marker lines:

    <!-- output: NAME -->
    ```text
    $ simspec sweep
    ...what the command printed...
    ```
    <!-- end output -->

(a markdown output, such as the validation table, follows its commands unfenced).
The command line is part of the block, so the command shown and the output under it cannot
drift apart. Outputs are taken at 100 columns, from stdout only (progress goes to stderr), in a
scratch directory (so no run leaves a file in the checkout), and are deterministic: same code,
same bytes. Numbers in the prose must not restate a block's numbers; they point at the block.
``tests/test_readme_outputs.py`` checks the markers (fast) and reruns the cheap blocks (slow).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = (ROOT / "README.md", ROOT / "docs" / "first-day.md")
COLUMNS = 100
MARKER = re.compile(r"^<!-- output: ([a-z0-9-]+) -->\n(.*?)^<!-- end output -->\n", re.M | re.S)


def run(argv: list[str], cwd: Path) -> str:
    """What `simspec ARGV` prints on stdout at COLUMNS columns; an error if it fails."""
    env = {**os.environ, "COLUMNS": str(COLUMNS), "NO_COLOR": "1", "TERM": "dumb"}
    done = subprocess.run(
        [sys.executable, "-m", "simspec.cli.main", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"simspec {shlex.join(argv)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def _tidy(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()) + "\n"


@dataclass(frozen=True)
class Block:
    """One output shown in a document: the commands it runs and how their output is shown."""

    name: str
    commands: tuple[tuple[str, ...], ...]
    cheap: bool  # the slow test reruns it (seconds to a minute on two cores)
    show: Callable[[list[str], Path], str] | None = None  # outputs, scratch dir -> text
    fenced: bool = True  # False: the output is markdown (a table), shown as it is
    files: tuple[tuple[str, str], ...] = ()  # (name in the scratch dir, path in the checkout)
    interleaved: bool = False  # show() writes each command's `$` line above its own output

    def render(self) -> str:
        """The text between the block's markers: the commands and what they printed."""
        with tempfile.TemporaryDirectory() as tmp:
            for name, source in self.files:
                shutil.copyfile(ROOT / source, Path(tmp) / name)
            outputs = [run(list(argv), Path(tmp)) for argv in self.commands]
            body = _tidy(self.show(outputs, Path(tmp)) if self.show else "".join(outputs))
        shown = "".join(f"$ simspec {shlex.join(argv)}\n" for argv in self.commands)
        if self.interleaved:
            shown = ""
        if self.fenced:
            return f"```text\n{shown}{body}```\n"
        return f"```bash\n{shown}```\n\n{body}"


def _dsv3_layouts(outputs: list[str], tmp: Path) -> str:
    """The TP8 vs DP8+EP8 table: node throughput and median TPOT by concurrency."""
    frames = {name: pd.read_csv(tmp / f"{name}.csv") for name in ("tp8", "dp8_ep8")}
    rows = [
        "output tok/s over the node (median TPOT ms)",
        f"{'concurrency':>11}  {'TP8 AR':>14}  {'TP8 MTP':>14}  {'DP8+EP8 AR':>14}"
        f"  {'DP8+EP8 MTP':>14}  {'DP8/TP8 MTP':>11}",
    ]
    by = {(name, r.method, r.batch_size): r for name, df in frames.items() for r in df.itertuples()}
    for b in sorted(frames["tp8"]["batch_size"].unique()):
        cells = [by[(name, m, b)] for name in frames for m in ("autoregressive", "mtp")]
        text = [f"{c.throughput_tok_s:,.0f} ({c.tpot_ms_p50:.1f})" for c in cells]
        ratio = cells[3].throughput_tok_s / cells[1].throughput_tok_s
        rows.append(f"{b:>11}  " + "  ".join(f"{t:>14}" for t in text) + f"  {ratio:>10.2f}x")
    return "\n".join(rows)


def _async_scheduling(outputs: list[str], tmp: Path) -> str:
    """Speedup and median TPOT by method and concurrency, without and with async scheduling."""
    frames = {name: pd.read_csv(tmp / f"{name}.csv") for name in ("sync", "async")}
    by = {(name, r.method, r.batch_size): r for name, df in frames.items() for r in df.itertuples()}
    rows = [
        "speedup over autoregressive (median TPOT ms): vLLM 0.10-0.13 (off) / 0.14+ (on)",
        f"{'method':>14}  {'concurrency':>11}  {'off':>14}  {'on':>14}",
    ]
    for m in frames["sync"]["method"].unique():
        for b in sorted(frames["sync"]["batch_size"].unique()):
            cells = [by[(name, m, b)] for name in frames]
            text = [f"{c.speedup:.2f}x ({c.tpot_ms_p50:.2f})" for c in cells]
            rows.append(f"{m:>14}  {b:>11}  " + "  ".join(f"{t:>14}" for t in text))
    return "\n".join(rows)


def _schedule_lines(outputs: list[str], tmp: Path) -> str:
    """Only the schedule recommend prints to paste into vLLM, its last two lines (its tables
    print above them, and --out writes them too): the document says so beside the block."""
    keep = [
        line
        for line in outputs[0].splitlines()
        if line.startswith(("num_speculative_tokens_per_batch_size", "--speculative-config"))
    ]
    return "\n".join(keep) if keep else outputs[0]


def _bench_check(outputs: list[str], tmp: Path) -> str:
    """compare, calibrate bench, compare --profile: of compare's table only the mean TPOT
    rows (the rest is in --out), calibrate's output whole."""
    parts = []
    for argv, text in zip(BENCH_CHECK, outputs, strict=True):
        keep = text.splitlines()
        if argv[0] == "compare":
            keep = [line for line in keep if "mean_tpot_ms" in line]
        parts.append(f"$ simspec {shlex.join(argv)}\n" + "\n".join(keep))
    return "\n".join(parts)


def _lookup_columns(outputs: list[str], tmp: Path) -> str:
    """The n-gram rows of each run's CSV: speedup and what the lookup proposed and verified."""
    cols = ["engine", "batch_size", "speedup", "mean_accept_len", "no_proposal_frac"]
    cols.append("mean_verify_tokens")
    frames = [pd.read_csv(f) for f in sorted(tmp.glob("*.csv"))]
    table = pd.concat(frames)
    table = table[table["method"] == "ngram"][cols]
    return table.to_string(index=False, float_format=lambda v: f"{v:.2f}")


def _validation_table(outputs: list[str], tmp: Path) -> str:
    """The per-series table docs/validation_table.py prints from the predictions CSV."""
    from validation_table import markdown_table, read_predictions  # docs/, beside this file

    return markdown_table(read_predictions(tmp / "predictions.csv"))


def _memory_plan(outputs: list[str], tmp: Path) -> str:
    """From `simspec models`, only what one GPU holds (the rest is the model's card)."""
    lines = outputs[0].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("GPUs needed"))
    end = next(i for i, line in enumerate(lines) if line.startswith("KV cache:"))
    return "\n".join(lines[start : end + 1])


_NODE = ("--gpu", "h200", "--engine", "sglang", "--tp", "8")
_DSV3_SWEEP = (
    "sweep",
    "--model",
    "deepseek-v3",
    *_NODE,
    "--methods",
    "autoregressive,mtp",
    "--concurrencies",
    "1,2,4,8,16,32,64,128,256",
    "--max-running-requests",
    "256",
    "--turnovers",
    "4",
    "--quiet",
)

_ASYNC = (
    "sweep",
    "--methods",
    "autoregressive,eagle3,ngram",
    "--concurrencies",
    "1,16,64",
    "--quiet",
)
_NGRAM = ("sweep", "--methods", "autoregressive,ngram", "--concurrencies", "1,64,128", "--quiet")

_RUNS = tuple((f"bs{c}.json", f"tests/data/bench/qwen3-8b-h100-bs{c}.json") for c in (1, 2, 4, 8))
BENCH_CHECK = (
    ("compare", "bs1.json", "bs2.json", "bs4.json", "bs8.json", "--gpu", "h100_sxm"),
    ("calibrate", "bench", "bs1.json", "bs8.json", "--gpu", "h100_sxm", "--out", "mine.yaml"),
    ("compare", "bs2.json", "bs4.json", "--gpu", "h100_sxm", "--profile", "mine.yaml"),
)

BLOCKS: tuple[Block, ...] = (
    Block("sweep-default", (("sweep",),), cheap=True),
    Block("models-list", (("models",),), cheap=True),
    Block("calibrate-report", (("calibrate", "report"),), cheap=True),
    Block(
        "calibrate-report-a100",
        (("calibrate", "report", "--profile", "a100_80gb"),),
        cheap=True,
    ),
    Block("models-qwen3-moe", (("models", "qwen3-30b-a3b", "--gpu", "h100_sxm"),), cheap=True),
    Block(
        "sweep-qwen3-moe-all",
        (("sweep", "--model", "qwen3-30b-a3b", "--methods", "all", "--concurrencies", "1,16,64"),),
        cheap=False,
    ),
    Block(
        "plan-default-slos",
        (("plan", "--qps", "20", "--methods", "eagle3"),),
        cheap=False,
    ),
    Block(
        "models-dsv3-tp8",
        (("models", "deepseek-v3", *_NODE),),
        cheap=True,
        show=_memory_plan,
    ),
    Block(
        "models-dsv3-dp8-ep8",
        (("models", "deepseek-v3", *_NODE, "--dp", "8", "--ep", "8"),),
        cheap=True,
        show=_memory_plan,
    ),
    Block(
        "sweep-dsv3-layouts",
        (
            (*_DSV3_SWEEP, "--out", "tp8.csv"),
            (*_DSV3_SWEEP, "--dp", "8", "--ep", "8", "--out", "dp8_ep8.csv"),
        ),
        cheap=False,
        show=_dsv3_layouts,
    ),
    Block(
        "sweep-async-scheduling",
        (
            (*_ASYNC, "--out", "sync.csv"),
            (*_ASYNC, "--async-scheduling", "--out", "async.csv"),
        ),
        cheap=True,
        show=_async_scheduling,
    ),
    Block(
        "sweep-ngram-engines",
        (
            (*_NGRAM, "--out", "a_vllm.csv"),
            (
                *_NGRAM,
                "--engine",
                "sglang",
                "--max-running-requests",
                "128",
                "--out",
                "b_sglang.csv",
            ),
        ),
        cheap=False,
        show=_lookup_columns,
    ),
    Block(
        "plan-azure-4x",
        (
            (
                "plan",
                "--trace",
                "azure-conv",
                "--rate-scale",
                "4",
                "--slo-ttft-ms",
                "2000",
                "--slo-tpot-ms",
                "50",
                "--methods",
                "eagle3",
                "--attainment",
                "0.99",
            ),
        ),
        cheap=False,
    ),
    Block(
        "plan-azure-code-split",
        (
            (
                "plan",
                "--trace",
                "azure-code",
                "--window",
                "0:300",
                "--rate-scale",
                "8",
                "--methods",
                "eagle3",
                "--concurrencies",
                "none",
                "--disaggregate",
            ),
        ),
        cheap=False,
    ),
    Block(
        "bench-check",
        BENCH_CHECK,
        cheap=False,
        show=_bench_check,
        files=_RUNS,
        interleaved=True,
    ),
    Block(
        "validate-packaged",
        (("validate", "--out", "predictions.csv"),),
        cheap=False,
        show=_validation_table,
        fenced=False,
    ),
    Block(
        "recommend-default",
        (("recommend", "--method", "eagle3"),),
        cheap=False,
        show=_schedule_lines,
    ),
)


def by_name() -> dict[str, Block]:
    return {b.name: b for b in BLOCKS}


def markers(text: str) -> dict[str, str]:
    """Each marked block of a document: name -> the text inside its fence."""
    return {m.group(1): m.group(2) for m in MARKER.finditer(text)}


def replace(text: str, name: str, body: str) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(1) != name:
            return m.group(0)
        return f"<!-- output: {name} -->\n{body}<!-- end output -->\n"

    return MARKER.sub(sub, text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("names", nargs="*", help="blocks to run (default: all)")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the documents")
    mode.add_argument("--check", action="store_true", help="print what differs; exit 1 if any")
    mode.add_argument("--list", action="store_true", help="list the blocks")
    args = ap.parse_args()
    blocks = by_name()
    if args.list:
        for b in BLOCKS:
            runs = "; ".join(f"simspec {shlex.join(a)}" for a in b.commands)
            print(f"{b.name:24} {'cheap' if b.cheap else 'slow '}  {runs}")
        return 0
    unknown = [n for n in args.names if n not in blocks]
    if unknown:
        ap.error(f"unknown block {unknown[0]!r}; --list shows them")
    texts = {doc: doc.read_text() for doc in DOCUMENTS if doc.exists()}
    differ = 0
    for name in args.names or list(blocks):
        start = time.perf_counter()
        body = blocks[name].render()
        print(f"{name}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
        for doc, text in texts.items():
            old = markers(text).get(name)
            if old is None:
                continue
            if old != body:
                differ += 1
                if args.check:
                    sys.stdout.writelines(
                        difflib.unified_diff(
                            old.splitlines(True), body.splitlines(True), f"{doc.name}:{name}", "now"
                        )
                    )
            texts[doc] = replace(texts[doc], name, body)
    if args.write:
        for doc, text in texts.items():
            doc.write_text(text)
    return 1 if args.check and differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
