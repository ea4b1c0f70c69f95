"""Result tables: printed for a reader, written whole (or not at all) for a program."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from simspec.catalog.tables import shown
from simspec.cli.common import err, writing
from simspec.config import Deployment, MethodConfig
from simspec.errors import InputError, one_line
from simspec.outputs import check_writable, csv_text, write_bytes_atomic, write_text_atomic


def check_suffix(out: Path | None, flag: str, suffixes: tuple[str, ...]) -> None:
    """Refuse, before any work, an output name whose suffix is not a format the command
    writes (``--out x.txt`` would get CSV bytes under a name that says otherwise)."""
    if out is not None and out.suffix not in suffixes:
        # the writers choose the format by the suffix as written (QA: x.CSV read as refused
        # for no reason): a suffix in another case is named as such
        case = " in lower case" if out.suffix.lower() in suffixes else ""
        # an empty name reaches here as '.', which the user never typed (QA)
        got = "an empty name" if str(out) == "." else shown(out)
        raise InputError(flag, f"write {' or '.join(suffixes)}{case} (got {got})")
    if out is not None and out.suffix == ".parquet" and not parquet_engine():
        # QA: without one the run finished every cell, then failed with a traceback
        raise InputError(
            flag,
            f'writing {shown(out)} needs pyarrow (pip install -e ".[parquet]"), or write .csv',
        )


def parquet_engine() -> bool:
    """Whether pandas can write Parquet here (pyarrow or fastparquet importable)."""
    import importlib.util

    return any(importlib.util.find_spec(name) for name in ("pyarrow", "fastparquet"))


def check_outputs(
    *outputs: tuple[Path | None, str, tuple[str, ...] | None],
    inputs: Iterable[tuple[Path | str | None, str]] = (),
) -> None:
    """Refuse, before any work, each ``(path, flag, suffixes)`` a command would write that
    could not be written: a suffix it does not write (``None``: any name), a symbolic link, a
    directory or special file, a folder that refuses a new file
    (:func:`~simspec.outputs.check_writable`). All are checked before any is written, so one
    bad output never leaves the others behind. Two outputs at one path are refused too: the
    last written would replace the others, and so is an output at one of the files the command
    reads (``inputs``: (path, flag); QA: ``compare bs1.json --out bs1.json`` overwrote the
    benchmark result it compared)."""
    seen: dict[Path, str] = {}
    for out, flag, _ in outputs:
        if out is None:
            continue
        try:
            key = out.expanduser().resolve()
        except (OSError, RuntimeError):  # a name the OS refuses, a link loop: checked below
            key = out
        if key in seen:
            raise InputError(flag, f"{shown(out)} is also {seen[key]}'s output: give each its own")
        seen[key] = flag
    for out, flag, suffixes in outputs:
        if out is None:
            continue
        if suffixes is not None:
            check_suffix(out, flag, suffixes)
        with writing(out, flag):
            check_writable(out)
    read = [(Path(p), what) for p, what in inputs if p is not None and _is_file(Path(p))]
    for out, flag, _ in outputs:
        if out is None or not _is_file(out):
            continue
        for source, what in read:
            with contextlib.suppress(OSError):
                if os.path.samefile(out, source):
                    raise InputError(
                        flag,
                        f"{shown(out)} is {what}'s input: writing there would replace it; give "
                        "the output another name",
                    )


def _is_file(path: Path) -> bool:
    """Whether ``path`` names a regular file (a name the OS refuses names none)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def safe_title(title: str) -> str:
    """A table title as plain text: control characters escaped (a file name may hold them)
    and rich markup shown, not interpreted."""
    return escape(one_line(title))


def print_frame(frame: pd.DataFrame, title: str, width: int | None = None) -> None:
    """A data frame as a table on stdout, every header and cell whole: columns that do not fit
    the console side by side go to a continuation table that repeats the first column (the
    row's name). With ``width``, a file or pipe gets that width."""
    console = Console()
    if width is not None and not console.is_terminal:
        console = Console(width=width)
    headers = [str(c) for c in frame.columns]
    rows = [
        # None is a cell with nothing to show (plan's fleet size where none met the SLOs:
        # QA, it read "None"), as the CSV leaves it empty
        [number(v) if isinstance(v, float) else "-" if v is None else str(v) for v in row]
        for row in frame.itertuples(index=False)
    ]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    for part, cols in enumerate(column_groups(widths, console.width)):
        shown = safe_title(title)
        table = Table(title=shown if part == 0 else f"{shown} (continued)")
        fits = table_width([widths[i] for i in cols]) <= console.width
        for i in cols:
            table.add_column(escape(headers[i]), no_wrap=fits, overflow="fold")
        for r in rows:  # cells are data: "[/x]" shown as written, not read as markup (QA)
            table.add_row(*(escape(r[i]) for i in cols))
        console.print(table)


def print_provenance(deploy: Deployment, methods: list[MethodConfig], notes: bool = True) -> None:
    """Under a table, on stderr: what the run ran with and what its numbers rest on, one line
    each (:mod:`simspec.studies.provenance`)."""
    from simspec.studies.provenance import (
        dataset_notes,
        deployment_notes,
        ran_with,
        release_notes,
        rests_on,
        verify_notes,
    )

    lines = (
        ran_with(deploy, [m.name for m in methods]),
        rests_on(deploy, methods),
        *dataset_notes(deploy, methods),
        *verify_notes(deploy, methods),
        *release_notes(deploy, methods),
        *(run_notes(deploy, methods) if notes else ()),
    )
    for line in (*lines, *deployment_notes(deploy)):
        err.print(line, highlight=False, markup=False, soft_wrap=True)


def sampling_lines(
    pairs: Iterable[tuple[float, float]], methods: Iterable[MethodConfig]
) -> list[str]:
    """At each run's (temperature, top-p) of ``pairs``, how each method's acceptance was
    moved from where it was measured (greedy unless it says), and on what evidence."""
    from simspec.catalog.sampling import factor, sampling_notes, sampling_source

    # where each method's acceptance was measured (greedy unless it says: QA, an α measured
    # at T=1 and run at T=1 was noted as "x 0.845 of greedy" and ran unscaled, and one run at
    # T=0 was scaled up without a note)
    measured = dict.fromkeys(
        (m.acceptance.temperature, m.acceptance.top_p if m.acceptance.temperature else 1.0)
        for m in methods
        if m.acceptance is not None
    ) or {(0.0, 1.0): None}
    lines: dict[str, None] = {}
    for temperature, top_p in pairs:
        run = (temperature, top_p if temperature else 1.0)
        for at in measured:
            if at == (0.0, 1.0):
                lines.update(dict.fromkeys(sampling_notes(temperature, top_p)))
            elif at == run:
                lines[f"acceptance measured at T={at[0]:g}, top-p={at[1]:g}, as the run samples: "
                      "used as measured"] = None  # fmt: skip
            else:
                scale = factor(*run) / factor(*at)
                lines[f"sampling at T={temperature:g}, top-p={top_p:g}: acceptance measured at "
                      f"T={at[0]:g}, top-p={at[1]:g} x {scale:.3f} ({sampling_source()})"] = None  # fmt: skip
    return list(lines)


def run_notes(deploy: Deployment, methods: list[MethodConfig]) -> list[str]:
    """What sweep says under its table of the run's sampling, the engine's scheduling and the
    methods as the engine ships them, for the commands that print this footer (QA: plan,
    fleet, policy and recommend had dropped the sampling, async-scheduling, draft-model and
    SGLang-cap notes that sweep prints for the same deployment)."""
    from simspec.catalog.draft_heads import eagle3_head_note
    from simspec.catalog.hardware import load_profile
    from simspec.catalog.methods import approximated, not_shipped
    from simspec.catalog.models import preset_id
    from simspec.engine.build import deployed_engine
    from simspec.studies.provenance import async_note

    drafting = [m for m in methods if m.name != "autoregressive"]
    speculative = list(dict.fromkeys(m.name for m in drafting))
    pair = [(deploy.temperature, deploy.top_p)]
    lines = sampling_lines(pair, drafting) if speculative else []
    if note := load_profile(deploy.profile or deploy.gpu).transferred_note():
        lines.append(f"note: {note}")
    if note := async_note(deploy.engine, deploy.scheduler.async_scheduling):
        lines.append(f"note: {note}")
    unshipped: dict[str, list[str]] = {}
    for name in speculative:
        if why := not_shipped(name, deploy.engine):
            unshipped.setdefault(why, []).append(name)
    for why, names in unshipped.items():  # QA: plan, fleet and policy ran them without a word
        lines.append(f"note: {', '.join(names)} simulated as published: {why}")
    engine = deployed_engine(deploy)
    if speculative and engine.flag("speculates_at_batch_one"):
        lines.append(batch_one_note(deploy.engine))
    lines.extend(schedule_notes(deploy.engine, drafting))
    for name in speculative:
        if why := approximated(name, deploy.engine):
            lines.append(f"note: {name} on {deploy.engine}: {why}")
        if head := eagle3_head_note(name, preset_id(deploy.model)):
            lines.append(f"note: {head}")
    cap = engine.speculative_cap(deploy.scheduler.max_num_seqs)
    if speculative and cap is not None:
        lines.append(
            f"note: engine {deploy.engine} runs at most {cap} requests under speculative "
            "decoding (its default): the rest wait; --max-running-requests N lifts it"
        )
    return lines


def batch_one_note(engine_id: str) -> str:
    """What a speculative run at batch > 1 is on an engine that speculates one sequence at a
    time (engines.yaml ``speculates_at_batch_one``: HF's assisted generation)."""
    return (
        f"note: engine {engine_id} speculates one sequence at a time: its speculative runs at "
        "batch > 1 are simulated as if it batched them (engines.yaml speculates_at_batch_one)"
    )


def schedule_notes(engine_id: str, methods: Iterable[MethodConfig]) -> list[str]:
    """Where a method's schedule by batch size is simspec's what-if, not a setting the engine
    reads: a K schedule (vLLM V1's Dynamic SD, num_speculative_tokens_per_batch_size) on any
    other engine, and a tree budget schedule anywhere (QA: plan --trace priced a recommended
    schedule on SGLang and vLLM V0 as a deployable option; recommend said so)."""
    from simspec.catalog.hardware import load_engine

    engine = load_engine(engine_id)
    reads_k = engine.family == "vllm" and not engine.disables_by_batch_size
    lines: list[str] = []
    for m in methods:
        if m.k_schedule and not reads_k:
            lines.append(
                f"note: {m.name}'s K by batch size is simspec's k_schedule: engine {engine_id} "
                "does not read vLLM V1's Dynamic SD schedule (num_speculative_tokens_per_batch_"
                "size), so its server runs one K at every batch size"
            )
        if m.tree_schedule:
            lines.append(
                f"note: {m.name}'s tree budget by batch size is simspec's tree_schedule, which "
                "no engine reads: a server runs one tree at every batch size"
            )
    return list(dict.fromkeys(lines))


def deployment_columns(deploy: Deployment) -> dict[str, Any]:
    """The deployment as the leading columns of a saved table (plan, recommend, policy,
    fleet's summary), so a file read on its own says what ran: the model and its layout (QA:
    three policy runs at ep 1, ep 8 and dp 8 wrote three tables no column told apart), the
    engine, and the sampling its acceptance was scaled for (QA: two runs at T 0 and 1 wrote
    the same headers, where sweep's CSV says it)."""
    return {
        "model": deploy.model,
        "gpu": deploy.gpu,
        "tp": deploy.tp,
        "pp": deploy.pp,
        "ep": deploy.ep,
        "dp": deploy.dp,
        "engine": deploy.engine,
        "temperature": deploy.temperature,
        "top_p": deploy.top_p,
    }


def table_width(widths: list[int]) -> int:
    """Characters a rich table needs on one line for columns of these widths: one space of
    padding either side of each, and a border between and around them."""
    return 1 + sum(w + 3 for w in widths)


def column_groups(widths: list[int], limit: int) -> list[list[int]]:
    """Column indices split into tables no wider than ``limit``, each led by column 0; a
    column too wide for any table gets one to itself (its cells then fold)."""
    groups: list[list[int]] = [[0]]
    for i in range(1, len(widths)):
        group = groups[-1]
        if len(group) > 1 and table_width([widths[j] for j in [*group, i]]) > limit:
            groups.append([0, i])
        else:
            group.append(i)
    return groups


def number(v: float) -> str:
    """Readable in a table: thousands with separators, small values to 3 significant digits."""
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:  # a whole number (a count in a float column) without ".0" (QA)
        return f"{v:.0f}" if v == int(v) else f"{v:.1f}"
    text = f"{v:.3g}"
    if text in ("1", "-1", "0", "-0") and float(text) != v:
        # not quite 1 or 0 (an attainment of 0.9995 read "1": QA): the digits that say so
        return f"{v:.6g}"
    return text


def with_interval(value: float, half: float) -> str:
    """A speedup and half its 95 % interval, ``1.33x ±0.01``; the plain value where the
    interval is undefined (too few requests for sections) or exact (plain decoding's)."""
    if not half == half or half == 0:
        return f"{value:.2f}x"
    return f"{value:.2f}x ±{half:.2f}"


def floor_share(v: float, digits: int = 4) -> float:
    """A share rounded down to ``digits`` decimals, so a table rounding it never shows 1 for
    less than all (0.99953 -> 0.9995)."""
    scale = 10.0**digits
    if not isinstance(v, int | float) or not math.isfinite(v):
        return v  # nothing measured (None, NaN): shown as it is
    return math.floor(v * scale + 1e-9) / scale


def share(v: float) -> str:
    """A share as a percentage rounded down to 0.1 %: 100 % only when it is all (QA: 9 of
    19,366 requests missing the SLOs read 100.0 %)."""
    return f"{floor_share(v, 3) * 100:.1f}%"


def write_frame(
    frame: pd.DataFrame, out: Path, flag: str = "--out", exact: tuple[str, ...] = ()
) -> None:
    """CSV (or Parquet by suffix), written whole or not at all; numbers to 6 significant
    digits but the ``exact`` columns (clock times, which over an hour's or a month's trace
    need more: 6 digits of 3,600 s are 10 ms), written in full."""
    with writing(out, flag):
        if out.suffix == ".parquet":
            write_bytes_atomic(out, frame.to_parquet(index=False))
        else:
            write_text_atomic(out, csv_text(frame, exact))


def write_text(out: Path, text: str, flag: str = "--out") -> None:
    """A text output (CSV, JSON), written whole or not at all."""
    with writing(out, flag):
        write_text_atomic(out, text)
