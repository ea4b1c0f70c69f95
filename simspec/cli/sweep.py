"""``simspec sweep``: speedup of each method by batch size, over a grid of scenarios."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from simspec.catalog.models import load_model
from simspec.catalog.tables import shown
from simspec.cli import options as opt
from simspec.cli.common import (
    check_executor,
    err,
    left_out_note,
    one_line_errors,
    progress_bar,
    refuse_unread,
    study_runs,
    writing,
)
from simspec.cli.flags import with_flags
from simspec.cli.sweep_flags import SweepFlags
from simspec.cli.tables import (
    batch_one_note,
    check_suffix,
    print_frame,
    safe_title,
    sampling_lines,
    table_width,
    with_interval,
    write_frame,
)
from simspec.config import DEFAULT_TURNOVERS, MAX_WORKERS
from simspec.engine import window
from simspec.errors import InputError
from simspec.outputs import check_writable, existing_regular, missing_folders, remove_empty
from simspec.studies.metrics import unserved_text
from simspec.studies.model_facts import summary_line
from simspec.studies.provenance import (
    async_note,
    dataset_notes,
    ran_with,
    release_notes,
    rests_on,
    verify_notes,
)
from simspec.studies.runs.executors import exit_on_signals
from simspec.studies.runs.journal import path_in_use
from simspec.studies.sweep import (
    WIDE_INTERVAL,
    SweepConfig,
    cells,
    check_cells,
    extrapolation_notes,
    picked_shape_notes,
    run_cells,
    wide_intervals,
)

if TYPE_CHECKING:
    from simspec.catalog.hardware import EngineProfile


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
        str, typer.Option(help="serial, process (a local pool) or ray: where cells run")
    ] = "process",
    workers: Annotated[
        int | None,
        typer.Option(help="parallel workers [default: every CPU]", min=1, max=MAX_WORKERS),
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster: 'auto' or HOST:PORT [default: local]")
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="skip cells a stopped sweep already finished (kept in OUT.partial, checked "
            "entry by entry; a damaged one, one whose profile/config/trace file changed, or "
            "one another simspec version ran, runs again; an OUT.partial over 64 MiB or a "
            "symbolic link is refused). Without it an existing OUT.partial is refused, never "
            "emptied",
        ),
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            help="write the results table (.csv, or .parquet; missing folders are created, an "
            "existing file is replaced by rename and keeps its mode); finished cells stream "
            "to OUT.partial meanwhile (removed once the table is written, or if a sweep that "
            "started it fails; kept on Ctrl-C, SIGTERM or SIGHUP for --resume)"
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="print no table or progress")] = False,
) -> None:
    """Speedup of every method by batch size (closed loop).

    Each method's output-token throughput over autoregressive decoding's, on the same workload
    and seed, measured while the closed loop holds its full concurrency. A --grid prints one
    table per grid point; under each, what it ran with and what its numbers rest on.

    Example: simspec sweep --methods eagle3,ngram --concurrencies 1,8,64 --out sweep.csv
    """
    if grid is not None and config is not None:
        raise InputError(
            "--grid",
            "give --grid or --config, not both (a grid file is a scenario file with a grid: section)",
        )
    check_executor(executor)
    if executor != "ray":
        refuse_unread("is the Ray cluster --executor ray runs on", {"--ray-address": ray_address})
    if executor == "serial" and workers != 1:  # one worker is what serial runs (QA)
        refuse_unread(
            "sizes a pool: --executor serial runs one cell at a time", {"--workers": workers}
        )
    if resume and out is None:
        raise InputError("--resume", "needs --out (the stopped sweep's OUT.partial)")
    check_suffix(out, "--out", (".csv", ".parquet"))  # and a Parquet engine to write one
    cfg = flags.sweep_config(grid or config, "--grid" if grid else "--config")
    journal = _partial(out) if out is not None else None
    if out is not None and journal is not None:
        _check_out(out, journal, resume)
    started_journal = journal is not None and not journal.exists()
    # the folders writing --out would create: removed again where nothing is written (QA: a
    # full disk left them behind)
    created = [] if out is None else missing_folders(out)
    todo = cells(cfg)
    # SIGTERM / SIGHUP are stops under every executor, said and kept as Ctrl-C's are (QA: a
    # serial sweep killed by SIGTERM exited 143 with nothing said)
    restore_signals = exit_on_signals()
    try:
        check_cells(todo)  # bad input fails before the journal is read
        with (
            progress_bar("simulating", total=len(todo), show=not quiet) as bar,
            study_runs(
                executor, workers, ray_address, journal=journal, resume=resume, progress=bar
            ) as runs,
        ):
            frame = run_cells(cfg, todo, runs=runs)
    except Exception as exc:
        # a failure is not a stop: leave nothing behind but what was there before (an
        # interrupt, SIGTERM or SIGHUP is a stop, and keeps the journal for --resume)
        if started_journal and journal is not None:
            journal.unlink(missing_ok=True)
            remove_empty(created)
        if isinstance(exc, OSError) and journal is not None and exc.filename == str(journal):
            raise InputError(
                "--out", f"cannot write {shown(journal)} (its finished cells): {exc.strerror}"
            ) from None
        raise
    except BaseException:
        # a stop (Ctrl-C, SIGTERM, SIGHUP): say what was kept and how to go on (QA: silent)
        if journal is not None and journal.exists():
            err.print(
                f"stopped: the finished cells are kept in {journal}; run the same command with "
                "--resume to finish the rest",
                highlight=False,
                markup=False,
                soft_wrap=True,  # the path stays whole, to copy
            )
        raise
    finally:
        restore_signals()
    if out is not None:
        with writing(out):
            write_frame(frame, out)
            _partial(out).unlink(missing_ok=True)  # the table has every finished cell
    if not quiet:
        _print_models(cfg)
        _print_points(frame, cfg)
        # --quiet drops it with the table: the written table lists what ran
        left_out_note(
            flags.left_out(
                {
                    "model": cfg.model,
                    "grid": cfg.grid,
                    "engine": cfg.engine,
                    "dp": cfg.dp,
                    "tp": cfg.tp,
                }
            )
        )
        for line in extrapolation_notes([m for p in cfg.points() for m in p.methods]):
            err.print(line, highlight=False)
        if out is not None:
            err.print(f"wrote {len(frame)} rows to {out}")
        _sampling_note(cfg)
        _profile_note(cfg)
        _engine_note(cfg)
        _unshipped_note(cfg)
        _picked_shape_note(cfg)
        _grid_preset_note(cfg)
        _unfinishable_note(frame)
        _k_run_note(frame)
        _drafted_tau_note(frame)


def _drafted_tau_note(frame: pd.DataFrame) -> None:
    """A lookup method's mean_accept_len counts the steps that proposed nothing (1 token
    each); vLLM's logged "Mean acceptance length" (1 + accepted / drafts) counts only the steps
    that drafted: said, with that figure, so a user comparing with vLLM's log compares like
    with like (QA: 1.28 here against vLLM's 3.28 on the same run)."""
    if "no_proposal_frac" not in frame:
        return
    lookup = frame[(frame["no_proposal_frac"] > 0) & (frame["no_proposal_frac"] < 1)]
    for method, rows in lookup.groupby("method", sort=False):
        p = rows["no_proposal_frac"]
        drafted = (rows["mean_accept_len"] - p) / (1 - p)
        shown = ", ".join(
            f"{d:.2f} at {int(b)}" for d, b in zip(drafted, rows["batch_size"], strict=True)
        )
        err.print(
            f"note: {method}'s mean_accept_len counts the steps that proposed nothing "
            f"({p.min():.0%}-{p.max():.0%} of them, no_proposal_frac); vLLM's logged Mean "
            f"acceptance length counts drafted steps only: {shown}",
            highlight=False,
        )


def _k_run_note(frame: pd.DataFrame) -> None:
    """Where a K schedule or disable_by_batch_size ran another K than the column's label."""
    if "k_run" not in frame:
        return
    moved = frame[(frame["method"] != "autoregressive") & (frame["k_run"] != frame["k"])]
    for label, rows in moved.groupby(moved.apply(_method_label, axis=1), sort=False):
        ran = ", ".join(
            f"K={int(k)} at {int(b)}" if k else f"off at {int(b)}"
            for b, k in zip(rows["batch_size"], rows["k_run"], strict=True)
        )
        err.print(
            f"note: {label} follows its load policy: {ran} (the k_run column)", highlight=False
        )
    # where the policy is off at the cell's concurrency, the speculative steps it ran are the
    # run's drain's, where fewer sequences decode and a lower band drafts (QA: K=0 at 16 read
    # mean_accept_len 2.38 and a speedup of 1.01 without a word)
    off = moved[(moved["k_run"] == 0) & (moved["mean_accept_len"] > 1.0)]
    if len(off):
        where = ", ".join(f"{_method_label(r)} at {int(r.batch_size)}" for _, r in off.iterrows())
        err.print(
            f"note: {where}: speculation is off at that concurrency; the mean_accept_len shown "
            "is of the steps the run drafted as it drained (its last requests decoding at a "
            "lower concurrency, in another band), and the speedup's departure from 1 is theirs",
            highlight=False,
        )


def _engine_note(cfg: SweepConfig) -> None:
    """What the engine profile's version does that a user of a newer one should know (on
    stderr): vLLM 0.14+ schedules asynchronously by default, the vllm profile does not unless
    told; SGLang runs at most 48 requests under speculative decoding unless told, so a batch
    above it queues."""
    from simspec.catalog.hardware import load_engine, load_gpu
    from simspec.engine.build import replica_running_limit, scheduler_limits

    speculative = any(m.name != "autoregressive" for m in cfg.methods)
    by_k = [m.name for m in cfg.methods if m.k_schedule]
    by_tree = [m.name for m in cfg.methods if m.tree_schedule]
    for name in dict.fromkeys(cfg.grid.get("engine") or [cfg.engine]):
        engine = load_engine(name)
        if note := async_note(name, cfg.scheduler.async_scheduling):
            err.print(f"note: {note}", highlight=False)
        # QA: a vLLM Dynamic SD schedule ran on SGLang without a word
        scheduled = by_tree + (by_k if engine.family != "vllm" else [])
        if scheduled:
            err.print(
                f"note: engine {name} has no such draft schedule by batch size (vLLM's Dynamic "
                "SD, num_speculative_tokens_per_batch_size, schedules K alone): the rows of "
                f"{', '.join(dict.fromkeys(scheduled))} show what simspec's policy would give; "
                f"{name} itself drafts one shape at every batch size",
                highlight=False,
            )
        limit = cfg.scheduler.max_num_seqs  # the user's own running limit (QA: said nothing)
        # as the engine reads it over dp attention ranks (QA: "at most 4 at once" where vLLM's
        # 8 ranks ran 32, and SGLang's 12 over 8 ranks ran 8)
        runs = None if limit is None else replica_running_limit(engine, limit, cfg.dp)
        if runs is not None:
            per = "" if runs == limit else f" ({_per_rank(engine, limit, cfg.dp)})"
            beyond = f"--max-num-seqs {limit}{per}"
            if _wait_note(cfg.batch_sizes, runs, beyond, f"the engine runs at most {runs}"):
                continue
        if limit is None and not engine.flag("max_running_from_pool"):
            # the engine's own default, said as a limit given is (QA: unsaid); SGLang derives
            # its plain cap from the KV pool, at least 2,048
            # as the engine runs it, lowered to the token budget where it does (QA: the note
            # said 1,024 where vLLM ran 128 at --max-num-batched-tokens 128)
            default = scheduler_limits(engine, load_gpu(cfg.gpu), cfg.scheduler, "autoregressive")[
                0
            ]
            top = replica_running_limit(engine, default, cfg.dp)
            beyond = f"engine {name}'s default max_num_seqs ({default} on {cfg.gpu})"
            _wait_note(cfg.batch_sizes, top, beyond, f"it runs at most {top}", raisable=True)
        capped = engine.speculative_cap(cfg.scheduler.max_num_seqs)
        if speculative and capped is not None:
            over = [b for b in cfg.batch_sizes if b > capped]
            if over:
                err.print(
                    f"note: engine {name} runs at most {capped} requests under speculative "
                    f"decoding (its default): at batch size {', '.join(map(str, over))} the "
                    f"requests beyond {capped} wait; --max-running-requests N lifts it",
                    highlight=False,
                )


def _wait_note(
    batch_sizes: list[int], top: int, beyond: str, runs: str, raisable: bool = False
) -> bool:
    """Say which batch sizes exceed the ``top`` sequences the engine runs (``beyond``: the
    limit's name; ``raisable``: a default --max-num-seqs raises), if any; whether any did."""
    over = [b for b in batch_sizes if b > top]
    if over:
        tail = "; --max-num-seqs N raises it" if raisable else ""
        err.print(
            f"note: at batch size {', '.join(map(str, over))} the requests beyond {beyond} "
            f"wait: {runs} at once{tail}",
            highlight=False,
        )
    return bool(over)


def _profile_note(cfg: SweepConfig) -> None:
    """A GPU whose packaged profile was fitted on another GPU says so, and so does a precision
    the GPU runs otherwise than named or without kernel timings, and a model's sparse attention
    (what of it stays approximate) (on stderr)."""
    from simspec.catalog.expert_locality import locality_note
    from simspec.catalog.hardware import alltoall_note, load_gpu, load_profile
    from simspec.catalog.models import load_model
    from simspec.catalog.precision import load_precision, precision_note
    from simspec.catalog.servers import cross_node_note
    from simspec.engine.costmodel.linear_attention import LINEAR_STATE_NOTE
    from simspec.engine.costmodel.sparse_attention import sparse_attention_note

    for gpu in dict.fromkeys(cfg.grid.get("gpu") or [cfg.gpu]):
        if note := load_profile(cfg.profile or gpu).transferred_note():
            err.print(f"note: {note}", highlight=False)
        for model in dict.fromkeys(cfg.grid.get("model") or [cfg.model]):
            name = cfg.precision or getattr(load_model(model), "weight_dtype", "bf16")
            if note := precision_note(load_precision(name), load_gpu(gpu)):
                err.print(f"note: {model} at {name}: {note}", highlight=False)
    for model in dict.fromkeys(cfg.grid.get("model") or [cfg.model]):
        if note := sparse_attention_note(load_model(model)):
            err.print(f"note: {model}: {note}", highlight=False)
        if load_model(model).linear_layers:  # as validate's assumptions say it (QA)
            err.print(f"note: {model}: {LINEAR_STATE_NOTE}", highlight=False)
        if note := locality_note(model):
            err.print(f"note: {note}", highlight=False)
    if cfg.disaggregation_mode == "decode":
        from simspec.studies.provenance import DECODE_INSTANCE_NOTE

        err.print(f"note: {DECODE_INSTANCE_NOTE}", highlight=False)
    from simspec.catalog.hardware import load_engine
    from simspec.studies.provenance import kv_quant_note, mla_fp8_kv_note, uniform_kv_note

    said = {
        note
        for p in cfg.points()
        if (
            note := uniform_kv_note(
                load_engine(p.engine), load_model(p.model), p.disaggregation_mode
            )
        )
    }
    said |= {note for p in cfg.points() if (note := kv_quant_note(p))}
    said |= {note for p in cfg.points() if (note := mla_fp8_kv_note(p, load_engine(p.engine)))}
    for note in sorted(said):
        err.print(f"note: {note}", highlight=False)
    spans = {(p.gpu, p.tp * p.pp, p.ep, p.engine) for p in cfg.points()}
    for gpu, tp, ep, engine in sorted(spans):
        if note := cross_node_note(load_gpu(gpu), tp, ep, engine):
            err.print(f"note: {note}", highlight=False)
    for gpu in sorted({gpu for gpu, _, ep, _ in spans if ep > 1}):
        if note := alltoall_note(gpu):
            err.print(f"note: {note}", highlight=False)


def _check_out(out: Path, journal: Path, resume: bool) -> None:
    """Before any cell runs: ``out`` and its journal can be written, and a stopped sweep's
    journal is not thrown away unasked."""
    with writing(out):
        check_writable(out)
    with writing(journal):
        existing_regular(journal)
    if not resume and path_in_use(journal):
        raise InputError(
            "--resume",
            f"{shown(journal)} holds the finished cells of a stopped sweep: pass --resume to "
            "keep them, or delete it to start over",
        )


def _partial(out: Path) -> Path:
    """Where finished cells stream while the sweep runs (``--resume`` reads them back)."""
    return out.with_name(out.name + ".partial")


# the columns that tell one grid point's rows from another's (a K axis is in the method label)
POINT_COLUMNS = ("model", "gpu", "tp", "engine", "seed", "temperature", "top_p", "dataset")


def _print_points(frame: pd.DataFrame, cfg: SweepConfig) -> None:
    """One speedup table per grid point (points that differ only in K share one: their
    methods are columns of their own), each followed by what it ran with and rests on; then
    the interval legend once."""
    by_point: dict[tuple, list[SweepConfig]] = {}
    for point in cfg.points():
        by_point.setdefault(_point_values(point), []).append(point)
    for values, points in by_point.items():
        rows = frame
        for col, value in zip(POINT_COLUMNS, values, strict=True):
            rows = rows[rows[col] == value]
        _print_speedups(rows, points[0], cfg.grid)
        names = [m.name for p in points for m in p.methods]
        err.print(ran_with(points[0], names), highlight=False, markup=False, soft_wrap=True)
        methods = [m for p in points for m in p.methods]
        err.print(rests_on(points[0], methods), highlight=False, markup=False, soft_wrap=True)
        # QA: --dataset over a config's stated acceptance switched the lengths only, unsaid
        for line in (*dataset_notes(points[0], methods), *verify_notes(points[0], methods)):
            err.print(line, highlight=False, markup=False, soft_wrap=True)
        # every point's (a grid may vary the model or dp)
        said = dict.fromkeys(n for p in points for n in release_notes(p, p.methods))
        for line in said:
            err.print(line, highlight=False, markup=False, soft_wrap=True)
    err.print(
        "± : 95 % interval of the speedup (README: Measurement)", highlight=False, markup=False
    )
    target = cfg.precision_target
    wide = (
        wide_intervals(frame, target or WIDE_INTERVAL)
        if "speedup_ci_low" in frame
        else frame.iloc[:0]
    )
    if len(wide) and target:
        err.print(
            f"note: {len(wide)} {_measured(frame)}(s) reached the cap "
            f"({DEFAULT_TURNOVERS} "
            f"turnovers, at least {window.cap_requests(1):,} requests) before ±{target:.1%}: "
            "the interval shown is the one reached; --requests N measures a longer fixed run",
            highlight=False,
        )
    elif len(wide):
        err.print(
            f"note: {len(wide)} {_measured(frame)}(s) known only to more than "
            f"±{WIDE_INTERVAL:.0%}: "
            "raise --requests or --turnovers for a longer window",
            highlight=False,
        )


def _measured(frame: pd.DataFrame) -> str:
    """What a sweep's precision is of: its speedups, or a plain sweep's throughputs."""
    plain = len(frame) and (frame.method == "autoregressive").all()
    return "throughput" if plain else "speedup"


def _point_values(point: SweepConfig) -> tuple:
    """A grid point's values of :data:`POINT_COLUMNS`, as its rows hold them."""
    data = {**point.model_dump(include=set(POINT_COLUMNS)), "dataset": point.workload.lengths_from}
    data["dataset"] = data["dataset"] or ""
    return tuple(data[col] for col in POINT_COLUMNS)


def _print_speedups(
    frame: pd.DataFrame, point: SweepConfig, grid: dict[str, list] | None = None
) -> None:
    """Speedup by batch size and method at one grid point (its ``grid`` axes named in the
    title): batch sizes as rows and methods as columns when the methods fit the terminal side
    by side, else methods as rows (a name stays whole)."""
    labels = frame.apply(_method_label, axis=1)
    if "acceptance" in frame:  # two methods of one name and K keep a column each
        twice = frame.assign(label=labels).duplicated(["label", "batch_size"], keep=False)
        labels = labels.where(~twice, labels + " " + frame.acceptance)
    order = list(dict.fromkeys(labels))  # the order the methods were given in
    if "speedup_ci_low" in frame:
        half = (frame.speedup_ci_high - frame.speedup_ci_low) / 2
    else:  # a table without intervals
        half = pd.Series(float("nan"), index=frame.index)
    cells = [with_interval(v, h) for v, h in zip(frame.speedup, half, strict=True)]
    speedup = frame.assign(label=labels, cell=cells).pivot_table(
        index="batch_size", columns="label", values="cell", sort=False, aggfunc="first"
    )[order]
    title = safe_title(
        f"Speedup over autoregressive: {point.model} on {point.gpu} x{point.tp}{_ranks(point)}, "
        f"{point.engine}, {point.workload.lengths_from or 'fixed lengths'}{_axes(point, grid or {})}"
    )
    console = Console()
    widths = [max(len(h), len("0.00x ±0.00")) for h in ["batch size", *order]]
    if table_width(widths) <= console.width:
        table = Table(title=title)
        table.add_column("batch size", justify="right")
        for label in order:
            table.add_column(label, justify="right")
        for bs, row in speedup.iterrows():
            table.add_row(str(bs), *row.to_numpy())
        console.print(table)
        return
    # methods as rows; batch sizes that do not fit beside them go to a continuation table, every
    # cell whole (QA: piped to a file at 80 columns, the intervals had been cut to "±0.…")
    rows = pd.DataFrame(
        {
            "method": order,
            **{f"bs={bs}": [speedup.loc[bs, m] for m in order] for bs in speedup.index},
        }
    )
    print_frame(rows, title + " (rows: method, columns: batch size)")


def _axes(point: SweepConfig, grid: dict[str, list]) -> str:
    """The grid's seed, temperature and top-p axes in a point's title (the others are in it
    already)."""
    shown_as = {"seed": "seed {}", "temperature": "T={}", "top_p": "top-p={}"}
    parts = [shown_as[a].format(getattr(point, a)) for a in shown_as if a in grid]
    return "".join(f", {p}" for p in parts)


def _print_models(cfg: SweepConfig) -> None:
    """Each model the sweep ran, in one line: total and active parameters, layout and
    precision (``simspec models NAME`` has the rest)."""
    names = cfg.grid.get("model") or [cfg.model]
    for name in dict.fromkeys(str(n) for n in names):
        line = summary_line(load_model(name), cfg.precision)
        Console().print(safe_title(line), highlight=False)


def _method_label(row: pd.Series) -> str:
    """A method as a column or row name: its K, and its tree budget when it drafts a tree."""
    if row["method"] == "autoregressive":
        return "autoregressive"
    tree = f" {row['tree']} tree {row['tree_nodes']}" if row["tree_nodes"] else ""
    draft_tp = row.get("draft_tp")
    apart = f" draft TP{int(draft_tp)}" if draft_tp == draft_tp and draft_tp else ""  # NaN: unset
    return f"{row['method']} K={row['k']}{tree}{apart}"


def _unshipped_note(cfg: SweepConfig) -> None:
    """Methods asked for by name that the point's engine does not ship: they run as their
    papers draft them, not as that engine would (it would refuse them)."""
    from simspec.catalog.methods import not_shipped

    said: dict[str, list[str]] = {}
    for point in cfg.points():
        for method in point.methods:
            why = not_shipped(method.name, point.engine)
            if why and method.name not in said.setdefault(why, []):
                said[why].append(method.name)
    for why, names in said.items():
        err.print(f"note: {', '.join(names)} simulated as published: {why}", highlight=False)
    from simspec.catalog.hardware import load_engine

    alone = sorted(
        {
            p.engine
            for p in cfg.points()
            if max(p.batch_sizes) > 1
            and any(m.name != "autoregressive" for m in p.methods)
            and load_engine(p.engine).flag("speculates_at_batch_one")
        }
    )
    for engine in alone:  # QA: hf's draft model ran at batch 8 without a word
        err.print(batch_one_note(engine), highlight=False)
    from simspec.catalog.draft_heads import eagle3_head_note
    from simspec.catalog.methods import approximated
    from simspec.catalog.models import preset_id

    seen: set[tuple[str, str]] = set()
    for point in cfg.points():
        for method in point.methods:
            if (method.name, point.engine) in seen:
                continue
            seen.add((method.name, point.engine))
            if why := approximated(method.name, point.engine):
                err.print(f"note: {method.name} on {point.engine}: {why}", highlight=False)
    heads = {
        note
        for point in cfg.points()
        for method in point.methods
        if (note := eagle3_head_note(method.name, preset_id(point.model)))
    }
    for note in sorted(heads):
        err.print(f"note: {note}", highlight=False)


def _unfinishable_note(frame: pd.DataFrame) -> None:
    """Measured requests no replica could serve (prompt + output past the model's context, or
    past the KV cache): the cells' numbers are over the rest."""
    if "unfinishable" not in frame or not (frame["unfinishable"] > 0).any():
        return
    hit = frame[frame["unfinishable"] > 0]
    share = (hit["unfinishable"] / hit["requests"]).max()
    err.print(f"note: {unserved_text(len(hit), share, 'cell(s)')}", highlight=False)


def _grid_preset_note(cfg: SweepConfig) -> None:
    """A grid's engine or model axis varies the deployment, not the methods: their shapes and
    acceptance stay as resolved for the top-level engine and model (QA: a grid point sglang
    ran n-gram at vLLM's K=3 where --engine sglang runs SGLang's 12 draft tokens, unsaid)."""
    axes = [a for a in ("engine", "model") if len(cfg.grid.get(a) or []) > 1]
    if axes and any(m.name != "autoregressive" for m in cfg.methods):
        err.print(
            f"note: the grid's {' and '.join(axes)} axis varies the deployment only: every "
            f"point runs the methods as resolved for --engine {cfg.engine} and --model "
            f"{cfg.model} (their K, tree and acceptance preset); for each one's own presets, "
            "run it on its own (--engine/--model)",
            highlight=False,
        )


def _picked_shape_note(cfg: SweepConfig) -> None:
    """Methods that ran in the shape their engine picks itself when given none (SGLang), each
    said once: the K in the table is the engine's, not the method's packaged default."""
    said: list[str] = []
    for point in cfg.points():
        for line in picked_shape_notes(point.model, point.engine, point.methods):
            if line not in said:
                said.append(line)
    for line in said:
        err.print(line, highlight=False)


def _sampling_note(cfg: SweepConfig) -> None:
    """At T > 0 or top-p < 1 (at the top level or on a grid axis), how acceptance was scaled
    from greedy, and on what evidence."""
    pairs = dict.fromkeys((p.temperature, p.top_p) for p in cfg.points())
    for line in sampling_lines(pairs, cfg.methods):
        err.print(line)


def _ranks(cfg: SweepConfig) -> str:
    """The layout beyond tensor parallelism, where the sweep asks one."""
    names = ("dp", "ep", "pp")
    parts = [f"{name}{getattr(cfg, name)}" for name in names if getattr(cfg, name) > 1]
    return f" ({', '.join(parts)})" if parts else ""


def _per_rank(engine: EngineProfile, limit: int, dp: int) -> str:
    """How ``limit`` becomes the replica's over ``dp`` attention ranks, in words."""
    if engine.dp_attention == "vllm":
        return f"each of {dp} DP ranks' own"
    return f"divided over {dp} DP ranks, {limit // dp} each"
