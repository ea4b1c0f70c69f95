"""``simspec validate``: every published measurement in a case table, predicted."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer

from simspec.cli.common import (
    err,
    one_line_errors,
    progress_bar,
    refuse_unread,
    study_runs,
    writing,
)
from simspec.cli.tables import check_outputs, print_frame, write_text
from simspec.config import MAX_WORKERS
from simspec.errors import InputError


@one_line_errors
def validate(
    cases: Annotated[
        Path | None,
        typer.Option(
            help="case table with the shared/validation/cases.csv columns "
            "[default: the packaged copy of those cases]"
        ),
    ] = None,
    out: Annotated[
        Path,
        typer.Option(
            help="predictions: every input column plus predicted_value, predicted_tau, "
            "no_proposal_frac, mean_verify_tokens, rel_error, status, skip_reason, "
            "acceptance_source, assumptions (.csv; written, or replaced, with --report too)"
        ),
    ] = Path("predictions.csv"),
    report: Annotated[
        Path | None, typer.Option(help="also write a self-contained plotly HTML report")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(min=1, max=MAX_WORKERS, help="processes [default: all cores]")
    ] = None,
    assume_gpu: Annotated[
        str | None,
        typer.Option(
            help="run rows whose gpu is 'unknown' on this GPU preset (each such row "
            "says so in its assumptions column) [default: skip them]"
        ),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            help="hardware profile id or YAML file (simspec calibrate fit or bench writes one) "
            "for the rows on its GPU (a calibrated deployment's: on its engine too); each such "
            "row says so in its assumptions column [default: each GPU's own]"
        ),
    ] = None,
    assume: Annotated[
        list[str] | None,
        typer.Option(
            help="FIELD=VALUE, repeatable: fill this cell wherever a row leaves it empty or "
            "'unknown' (gpu, num_gpus, tp, engine, load_kind, load, temperature, dataset, "
            "prompt_len, output_len; e.g. --assume gpu=h200 --assume load_kind=single); each "
            "row so filled says so in its assumptions column"
        ),
    ] = None,
) -> None:
    """Predict published measurements; report the error.

    Each row of the case table becomes a scenario (model, GPU, TP, engine profile, load,
    method and acceptance: the row's trace, else its measured_tau, else the method's preset)
    and the row's metric is predicted. Rows simspec cannot express are kept, with status
    "skipped" and the reason.

    A row that states neither TP nor a GPU count runs on the fewest GPUs that hold the model
    (TP 1, 2, 4 or 8), and says so.

    Example: simspec validate --out predictions.csv --report validation.html
    """
    from simspec.catalog.hardware import load_gpu
    from simspec.studies.validation.assume import parse_assumptions
    from simspec.studies.validation.cases import read_cases
    from simspec.studies.validation.report import write_report
    from simspec.studies.validation.run import validate as predict
    from simspec.studies.validation.summary import mape_line, series_table

    check_outputs(
        (out, "--out", (".csv",)),
        (report, "--report", (".html", ".htm")),
        inputs=[(cases, "--cases")],
    )
    assumed = parse_assumptions(assume or [])
    if "gpu" in assumed:
        refuse_unread(
            f"fills the rows' gpu, and so does --assume gpu={assumed['gpu']}: give one of them",
            {"--assume-gpu": assume_gpu},
        )
    given = None
    if profile is not None:
        from simspec.catalog.hardware import load_profile

        given = load_profile(profile)  # a bad file is refused before any row is read
    frame = read_cases(cases)
    if assume_gpu is not None:
        try:
            load_gpu(assume_gpu)
        except InputError as exc:
            raise InputError("--assume-gpu", exc.message) from None
    with (
        progress_bar("simulating the cases") as bar,
        study_runs("process", workers, progress=bar) as runs,
    ):
        pred = predict(frame, runs=runs, assume_gpu=assume_gpu, assume=assumed, profile=profile)
    table = series_table(pred)
    # text cells are quoted: a user's cell may hold a bare carriage return, which an
    # unquoted CSV would read back as a line break
    write_text(out, pred.to_csv(index=False, float_format="%.6g", quoting=csv.QUOTE_NONNUMERIC))
    if report is not None:
        with writing(report, "--report"):
            write_report(pred, table, report, out)
    print_frame(shown_table(table), "Validation: predicted vs published, per series", width=140)
    err.print(f"{mape_line(pred, table)}; wrote {out}" + (f" and {report}" if report else ""))
    said = f"hardware profile {profile}"
    if (
        given is not None
        and not pred["assumptions"].astype(str).str.contains(said, regex=False).any()
    ):
        # QA: a profile no row could take changed nothing, without a word
        engine = f", engine {given.deployment.engine}" if given.deployment else ""
        err.print(
            f"note: --profile {profile} describes {given.gpu}{engine}: no row runs there, so "
            "no prediction used it",
            highlight=False,
        )


def shown_table(table: pd.DataFrame) -> pd.DataFrame:
    """The per-series table as printed: errors in percent, as the HTML report shows them."""
    from simspec.studies.validation.summary import percent_table

    return percent_table(table)
