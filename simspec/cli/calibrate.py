"""``simspec calibrate fit|report``: hardware profiles from GPU timing tables, and their error."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import numpy as np
import pandas as pd
import typer

from simspec.catalog.tables import shown
from simspec.cli.common import csv_list, err, one_line_errors, os_error_text, writing
from simspec.cli.tables import check_outputs, print_frame, write_frame
from simspec.errors import InputError

T = TypeVar("T")

calibrate_app = typer.Typer(
    no_args_is_help=True,
    help="Fit hardware profiles to GPU timing tables (fit, report), or a deployment's own "
    "constants to its benchmark runs (bench).",
)


@calibrate_app.command("fit")
@one_line_errors(also=(ValueError,))  # a table the fits cannot use says why
def calibrate_fit(
    timings: Annotated[
        list[Path],
        typer.Argument(
            help="timing CSVs from calibration/time_forward.py, Vidur/LLMServingSim tables, "
            "or directories to search for them (regular files of at most 64 MiB each)",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path, typer.Option(help="profile to write (.yaml/.yml or .json)", show_default=False)
    ],
    gpu: Annotated[str, typer.Option(help="GPU the timings were taken on")] = "h100_sxm",
    fallback: Annotated[
        str | None,
        typer.Option(
            help="profile id or file for operators the timings lack (the harness times no "
            "all-reduce) [default: the GPU's packaged profile]"
        ),
    ] = None,
    only: Annotated[
        str | None,
        typer.Option(
            help="fit only these operators (comma list of gemm, attention, elementwise, "
            "allreduce); the rest come from --fallback. E.g. 'gemm,elementwise' keeps the "
            "packaged vLLM attention instead of the harness's PyTorch SDPA kernel"
        ),
    ] = None,
) -> None:
    """Fit every operator's constants to TIMINGS; write a profile.

    The profile records each constant's provenance.

    Example: simspec calibrate fit my_gpu.csv --gpu h100_sxm --out my.yaml (my_gpu.csv from
    calibration/time_forward.py on that GPU)
    """
    from simspec.catalog.hardware import load_gpu, load_profile
    from simspec.studies.calibration.fit import FORMS, fit_all
    from simspec.studies.calibration.profile import build_profile, write_profile
    from simspec.studies.calibration.samples import discover

    check_outputs((out, "--out", (".yaml", ".yml", ".json")))
    spec = as_flag("--gpu", load_gpu, gpu)  # refusals name the flag that was typed (QA)
    gpu = spec.id  # in the packaged spelling (GPU names are said either way)
    back = as_flag("--fallback" if fallback else "--gpu", load_profile, fallback or gpu)
    try:
        samples, files = discover(timings, gpu)
        discovered = samples["operator"]
        if only is not None:
            wanted = csv_list(only, "--only")
            unknown = sorted(set(wanted) - set(FORMS))
            if unknown:
                raise InputError(
                    "--only", f"unknown operator {unknown[0]!r}; choose from {', '.join(FORMS)}"
                )
            samples = samples[samples["operator"].isin(wanted)]
            absent = [op for op in wanted if op not in set(samples["operator"])]
            if absent:  # QA: a profile of nothing fitted was written, its files listed
                raise InputError(
                    "--only",
                    f"the timings have no {absent[0]} samples (they time "
                    f"{', '.join(sorted(set(discovered))) or 'nothing'}): nothing to fit",
                )
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            # a degenerate table makes the solver warn; the error (if any) is the message
            warnings.simplefilter("ignore", RuntimeWarning)
            fits = fit_all(samples, spec)
        profile = build_profile(gpu, fits, samples, files, fallback=back)
    except OSError as exc:  # a folder that cannot be listed
        raise InputError("timings", f"cannot read {os_error_text(exc)}") from None
    except KeyError as exc:  # a table without the columns its kind promises
        raise InputError("timings", f"cannot read a table (KeyError: {exc})") from None
    with writing(out):
        write_profile(profile, out)
    rows = []
    for op, fit in fits.items():
        s = fit.summary()
        mapes = f"{s['fit_mape']:.1%}", f"{s['heldout_mape']:.1%}"
        rows.append([op, str(s["n_samples"]), *mapes, str(s["heldout_split"])])
    columns = ["operator", "samples", "fit MAPE", "held-out MAPE", "held-out split"]
    print_frame(pd.DataFrame(rows, columns=columns), f"Fit of {gpu} from {len(files)} file(s)")
    notes = [*bound_notes(fits), *range_notes(fits), *coverage_notes(files, fits, fallback or gpu)]
    for line in notes:
        err.print(line, highlight=False)
    err.print(f"wrote {out}")


def coverage_notes(files: list[str], fits: dict, fallback: str) -> list[str]:
    """What the written profile does not rest on the tables for (QA: a gemm-only table cut
    short by its budget fitted at exit 0, with no word of either): tables that stopped at their
    time budget, and the operators taken from the fallback profile."""
    from simspec.studies.calibration.fit import FORMS
    from simspec.studies.calibration.harness import cut_short

    lines = [
        f"note: {shown(f)} stopped at its time budget (its truncated column): it times fewer "
        "sizes than its grid, so the fit sees a part of the range"
        for f in cut_short(files)
    ]
    kept = [op for op in FORMS if op not in fits]
    if kept:
        lines.append(
            f"note: {', '.join(kept)} not fitted from these tables: taken from {fallback} "
            "(its provenance kept in the profile)"
        )
    return lines


def range_notes(fits: dict) -> list[str]:
    """A note per GEMM or attention fit whose tables stop short of the default prompt chunk
    on large GPUs (vLLM's token budget, engines.yaml): a forward with more tokens takes the fit
    past what was timed, which its held-out split (interpolation) does not measure (QA: a table
    timed at 1-64 tokens fitted "calibrated" at 0.6 % held-out error and priced prefill GEMMs
    30 % fast). The range is in the profile too (``fit.<operator>.tokens_timed``)."""
    from simspec.catalog.hardware import load_engine

    chunk = int(load_engine("vllm")["max_num_batched_tokens"])
    return [
        f"note: {op} was timed at {fit.tokens_timed[0]:,}-{fit.tokens_timed[1]:,} tokens: a "
        f"forward with more (a prompt chunk of up to {chunk:,} in vLLM, a large batch) takes "
        "the fit past what was timed, and its held-out error does not measure that"
        for op, fit in fits.items()
        if op in ("gemm", "attention") and fit.tokens_timed and fit.tokens_timed[1] < chunk
    ]


def as_flag(flag: str, load: Callable[[str], T], ref: str) -> T:
    """``load(ref)``, its refusal naming ``flag`` instead of the catalog's field."""
    try:
        return load(ref)
    except InputError as exc:
        raise InputError(flag, exc.message) from None


def bound_notes(fits: dict) -> list[str]:
    """A note per fitted constant that stopped at the edge of its range: the tables ask for a
    value past it, so the fit is not the operator's and its MAPE hides it (QA: timings x1000
    wrote efficiencies pinned at 0.001 with no word; calibrate bench says so already). The
    profile's status says "suspect" and lists them (profile.at_edges)."""
    from simspec.studies.calibration.profile import at_edges

    return [
        f"note: {key} stopped at the {edge} edge of its range ({value:g}): the tables ask for a "
        "value past it (wrong units, or another GPU's timings?); the profile written rests on "
        "that edge, and its status says suspect"
        for key, value, edge in at_edges(fits)
    ]


@calibrate_app.command("report")
@one_line_errors(also=(ValueError,))
def calibrate_report(
    profile: Annotated[
        str, typer.Option(help="profile id (e.g. h100_sxm) or profile file")
    ] = "h100_sxm",
    gpu: Annotated[
        str | None, typer.Option(help="GPU whose peaks to use [default: the profile's]")
    ] = None,
    timings: Annotated[
        list[Path] | None,
        typer.Option(
            help="timing tables or directories to compare against (repeatable; regular files "
            "of at most 64 MiB each); without it, the errors stored in the profile are shown"
        ),
    ] = None,
    html: Annotated[
        Path | None, typer.Option(help="write a plotly page: predicted vs measured per operator")
    ] = None,
    csv: Annotated[Path | None, typer.Option(help="write per-sample predictions as CSV")] = None,
    cases: Annotated[
        Path | None,
        typer.Option(help="validation cases CSV: also simulate its plain-decoding TPOT rows"),
    ] = None,
) -> None:
    """A profile's fit and held-out error per operator.

    With --timings: every sample against the profile (and --html, --csv), predicted vs
    measured; with --cases: the published plain-decoding TPOT rows simulated end to end.

    Example: simspec calibrate report --profile my.yaml --timings my_gpu.csv --html fit.html
    """
    from simspec.catalog.hardware import load_gpu, load_profile
    from simspec.studies.calibration import report
    from simspec.studies.calibration.samples import discover, is_harness_csv
    from simspec.studies.calibration.steps import check_step_times, step_time_rows
    from simspec.studies.validation.cases import read_cases

    if not timings and (html or csv):
        raise InputError("--timings", "--html and --csv need timing tables to compare with")
    check_outputs((html, "--html", (".html", ".htm")), (csv, "--csv", (".csv", ".parquet")))
    prof = load_profile(profile)
    spec = load_gpu(gpu or prof.gpu)
    case_rows = step_time_rows(read_cases(cases), spec.id) if cases else None
    # every table is read before anything is printed: a bad one is the only line shown
    samples, files = discover(timings, spec.id) if timings else (None, [])
    evaluated = report.evaluate(prof, samples, spec) if samples is not None else None
    steps = {
        Path(path): report.forward_check(prof, spec, Path(path))
        for path in files
        if path.endswith(".csv") and is_harness_csv(Path(path))
    }
    print_frame(report.stored_fit_table(prof), f"Profile {prof.gpu} ({prof.status}): stored fit")
    bench = report.deployment_fit_table(prof)
    if bench is not None:  # QA: a calibrate bench profile showed only its base's kernel fit
        fit = prof.deployment.fit if prof.deployment is not None else {}
        mape = fit.get("fit_mape")
        title = "Deployment constants (calibrate bench): fitted runs, measured vs predicted"
        print_frame(bench, title + (f", MAPE {mape:.1%}" if isinstance(mape, float) else ""))
        for name in fit.get("at_bound") or []:
            err.print(f"note: {name} stopped at the edge of its range", highlight=False)
    if evaluated is not None:
        print_frame(report.error_table(evaluated, ("operator",)), "Predicted vs measured")
        print_frame(report.error_table(evaluated), "... per operation")
        for path, whole in steps.items():
            if whole.empty:  # a harness table of operators only: no whole step to check
                continue
            print_frame(
                report.error_table(whole, ("kind", "op")),
                f"Whole steps in {path.name}: sum of operators vs measured",
            )
        if csv:
            write_frame(evaluated, csv, "--csv")
        if html:
            with writing(html, "--html"):
                report.write_html(evaluated, prof, html)
    if case_rows is not None:
        # the GPU's own packaged profile is the rows' default; any other is applied to them
        # (QA: an id naming another GPU's profile was dropped, the rows ran their own)
        own = not Path(profile).suffix and profile == spec.id
        tpot = check_step_times(case_rows, None if own else profile)
        if prof.gpu != spec.id:
            err.print(
                f"--cases: profile {prof.gpu} applied to {spec.id}'s rows at {spec.id}'s "
                "datasheet peaks",
                highlight=False,
            )
        for case_id, why in tpot.attrs.get("skipped", []):  # as validate skips them
            err.print(f"--cases: row {case_id} skipped: {why}", highlight=False)
        if tpot.empty:
            err.print(
                f"--cases: no plain-decoding TPOT row on {spec.id} (an autoregressive tpot_ms "
                "or single-request throughput row of this GPU): nothing to check"
            )
        else:
            print_frame(tpot, f"Plain-decoding TPOT on {spec.id}: simulated vs published")
            err.print(f"TPOT MAPE over {len(tpot)} rows: {tpot.attrs['mape']:.1%}")


def _register_bench() -> None:
    """``calibrate bench`` lives in its own module (a deployment's runs, not GPU tables)."""
    from simspec.cli.calibrate_bench import calibrate_bench

    calibrate_app.command("bench")(calibrate_bench)


_register_bench()
