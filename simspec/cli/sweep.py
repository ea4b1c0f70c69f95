"""``simspec sweep``: speedup of each method by batch size, over a grid of scenarios."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, cast, get_args

import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from simspec.cli import options as opt
from simspec.cli.common import err, one_line_errors, progress_bar, writing
from simspec.cli.flags import with_flags
from simspec.cli.sweep_flags import SweepFlags
from simspec.cli.tables import write_frame
from simspec.errors import InputError
from simspec.studies.runner import Executor
from simspec.studies.sweep import SweepConfig, cells, run_sweep


@with_flags(SweepFlags)
@one_line_errors
def sweep(
    config: opt.Config = None,
    *,
    flags: SweepFlags,
    grid: Annotated[
        Path | None,
        typer.Option(
            help="YAML/JSON grid: a scenario file with a `grid:` of axes (model, gpu, "
            "tp, engine, seed, temperature, top_p, dataset, k) to sweep over"
        ),
    ] = None,
    executor: Annotated[
        str, typer.Option(help="run cells serially, on a local process pool, or on Ray")
    ] = "process",
    workers: Annotated[
        int | None, typer.Option(help="parallel workers [default: every CPU]", min=1)
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster: 'auto' or HOST:PORT [default: local]")
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume", help="skip cells a stopped sweep already finished (kept in OUT.partial)"
        ),
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            help="write the results table (.csv, or .parquet); finished cells stream "
            "to OUT.partial meanwhile"
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="print no table or progress")] = False,
) -> None:
    """Speedup of every method by batch size (closed loop).

    Each method's output-token throughput over autoregressive decoding's, on the same workload
    and seed, measured while the closed loop holds its full concurrency.
    """
    if grid is not None and config is not None:
        raise InputError(
            "--grid",
            "give --grid or --config, not both (a grid file is a scenario file with a grid: section)",
        )
    if executor not in get_args(Executor):
        raise InputError("--executor", f"choose serial, process or ray (got {executor!r})")
    if resume and out is None:
        raise InputError("--resume", "needs --out (the stopped sweep's OUT.partial)")
    if out is not None and out.suffix not in (".csv", ".parquet"):
        raise InputError("--out", f"write .csv or .parquet (got {str(out)!r})")
    cfg = flags.sweep_config(grid or config, "--grid" if grid else "--config")
    journal = _partial(out) if out is not None else None
    with progress_bar("simulating", total=len(cells(cfg)), show=not quiet) as bar:
        frame = run_sweep(
            cfg,
            progress=bar.step,
            executor=cast(Executor, executor),
            workers=workers,
            ray_address=ray_address,
            journal=journal,
            resume=resume,
        )
    if out is not None:
        with writing(out):
            write_frame(frame, out)
            _partial(out).unlink(missing_ok=True)  # the table has every finished cell
    if not quiet:
        _print_speedups(frame, cfg)
        if out is not None:
            err.print(f"wrote {len(frame)} rows to {out}")
    _sampling_note(cfg)


def _partial(out: Path) -> Path:
    """Where finished cells stream while the sweep runs (``--resume`` reads them back)."""
    return out.with_name(out.name + ".partial")


def _print_speedups(frame: pd.DataFrame, cfg: SweepConfig) -> None:
    """Speedup by batch size (rows) and method (columns)."""
    pivot = frame.pivot_table(index="batch_size", columns=["method", "k"], values="speedup")
    table = Table(
        title=f"Speedup over autoregressive: {cfg.model} on {cfg.gpu} x{cfg.tp}, "
        f"{cfg.engine}, {cfg.workload.trace or 'fixed lengths'}"
    )
    table.add_column("batch size", justify="right")
    for method, k in pivot.columns:
        table.add_column(
            method if method == "autoregressive" else f"{method} K={k}", justify="right"
        )
    for bs, row in pivot.iterrows():
        table.add_row(str(bs), *(f"{v:.2f}x" for v in row.to_numpy()))
    Console().print(table)


def _sampling_note(cfg: SweepConfig) -> None:
    """At T > 0 or top-p < 1, how acceptance was scaled from greedy, and on what evidence."""
    if not (cfg.temperature > 0 or cfg.top_p < 1):
        return
    from simspec.catalog.sampling import MAX_FITTED_TEMPERATURE, factor, sampling_source

    err.print(
        f"sampling at T={cfg.temperature}, top-p={cfg.top_p}: acceptance x "
        f"{factor(cfg.temperature, cfg.top_p):.3f} of greedy ({sampling_source()})"
    )
    if cfg.temperature > MAX_FITTED_TEMPERATURE:
        err.print(
            f"note: no published pair constrains acceptance above T="
            f"{MAX_FITTED_TEMPERATURE:g}; it is held at its T={MAX_FITTED_TEMPERATURE:g} value"
        )
