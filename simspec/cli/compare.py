"""``simspec compare``: the engines' own benchmark results, each predicted by simspec."""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer

from simspec.cli import options as opt
from simspec.cli.common import err, known_method, one_line_errors, progress_bar, writing
from simspec.cli.flags import (
    SchedulerFlags,
    ServingFlags,
    given,
    scheduler_limits,
    with_flags,
    with_preset_ids,
)
from simspec.cli.options import field_help
from simspec.cli.tables import check_outputs, print_frame, write_text
from simspec.config import Deployment

Method = Annotated[
    str,
    typer.Option(
        help="the method the server ran (see `simspec methods`; vLLM's names accepted); a "
        "speculative one takes the acceptance the file measured, else the method's preset"
    ),
]


@dataclass(frozen=True)
class CompareFlags(SchedulerFlags, ServingFlags):
    """The deployment the runs were measured on; None = not given (the model defaults to the
    one the file names)."""

    model: Annotated[
        str | None,
        typer.Option(help=field_help(Deployment, "model", default="the preset the file names")),
    ] = None
    profile: opt.Profile = None
    temperature: opt.Temperature = None
    top_p: opt.TopP = None
    seed: opt.Seed = None
    method: Method = "autoregressive"
    k: opt.K = None

    def deployment(self) -> dict[str, object]:
        """The Scenario fields these flags set."""
        fields = {
            **self.serving_fields(),
            **given(
                profile=self.profile,
                temperature=self.temperature,
                top_p=self.top_p,
                seed=self.seed,
            ),
        }
        if limits := scheduler_limits(self):
            fields["scheduler"] = limits
        return with_preset_ids(fields)


@with_flags(CompareFlags)
@one_line_errors
def compare(
    results: Annotated[
        list[Path],
        typer.Argument(
            metavar="RESULT...",
            help="benchmark results: vllm bench serve --save-result JSON (--save-detailed: "
            "each request's lengths), the result block vllm bench serve or SGLang "
            "bench_serving prints, or SGLang bench_serving --output-file JSONL; at most 256 MiB "
            "each",
            show_default=False,
        ),
    ],
    *,
    flags: CompareFlags,
    spec_metrics: Annotated[
        list[Path] | None,
        typer.Option(
            help="vLLM's /metrics text, for the acceptance of runs whose file has none: one "
            "dump (counters since the server started), or the option twice, the dumps taken "
            "before and after the run (at most 16 MiB each)",
            metavar="FILE",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="write run, metric, measured, predicted, rel_error, load, lengths per row "
            "(.csv or .json)"
        ),
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(help="also write a self-contained plotly page: each metric by load"),
    ] = None,
) -> None:
    """Predict the runs you measured; report the error per metric.

    Each run is simulated with its own workload: its requests, its client concurrency (a
    closed loop from an empty server) or request rate (Poisson), each request's own lengths
    where the file lists them, else the run's mean lengths; and, for a speculative method, the
    acceptance the run measured. Nothing is fitted to the measurements.

    Example: simspec compare bs1.json bs2.json bs4.json bs8.json --gpu h100_sxm --out cmp.csv
    --html cmp.html
    """
    from simspec.studies.bench import read_metrics, read_results
    from simspec.studies.bench.calibrate import runs_gpu, unknown_gpu
    from simspec.studies.bench.compare import check_runs, plan_run, sglang_runs
    from simspec.studies.bench.compare import compare as simulate_runs
    from simspec.studies.bench.report import write_compare_report

    check_outputs(
        (out, "--out", (".csv", ".json")),
        (html, "--html", (".html", ".htm")),
        inputs=[(p, "RESULT") for p in results],
    )
    method = known_method(flags.method, "--method")
    runs = read_results(results)
    check_runs(runs)
    shared = read_metrics(list(spec_metrics)) if spec_metrics else None
    deployment = flags.deployment()
    on_sglang = flags.engine is None and sglang_runs(runs)
    if on_sglang:
        # SGLang's bench output is SGLang's server: its profile, not vLLM's (QA: its runs had
        # been simulated on the default vLLM profile, saying nothing)
        deployment["engine"] = "sglang"
    # the GPU the runs' metadata names, where --gpu does not (a different --gpu is refused)
    if (label := runs_gpu(runs, flags.gpu, "comparison")) is not None and flags.gpu is None:
        deployment["gpu"] = label
        err.print(f"gpu {label}, as the runs' gpu metadata says", highlight=False)
    elif flags.gpu is None and (named := unknown_gpu(runs)) is not None:
        gpu = deployment.get("gpu") or Deployment.model_fields["gpu"].default
        err.print(
            f"note: the runs name GPU {named!r}, no simspec GPU id: simulated on {gpu} "
            "(--gpu names the GPU they ran on)",
            highlight=False,
        )
    if shared is not None and all(r.acceptance is not None for r in runs):
        # every run's file has its own acceptance, which the dump only stands in for (QA:
        # given and left unused without a word)
        err.print(
            "note: --spec-metrics not used: every run's file states its own acceptance, "
            "which is what each run is simulated with",
            highlight=False,
        )
    with tempfile.TemporaryDirectory(prefix="simspec-compare-") as tmp:
        plans = [plan_run(r, deployment, method, flags.k, shared, Path(tmp)) for r in runs]
        if on_sglang:  # once the runs are known to plan
            err.print(
                "engine sglang, as the runs' SGLang bench output says (--engine sets another)"
            )
        with progress_bar("simulating the runs", total=len(plans)) as bar:
            frame = simulate_runs(plans, bar.step)
    if out is not None:
        write_text(out, _table_text(frame, out))
    if html is not None:
        with writing(html, "--html"):
            write_compare_report(frame, plans, html)
    print_frame(_shown(frame), "Measured vs predicted, per run and metric", width=120)
    for plan in plans:
        err.print(
            f"{plan.run.name}: {'; '.join(plan.notes)}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    from simspec.studies.provenance import deployment_notes

    # what a deployment leaves out (servers spanned, a decode instance), once each (QA: a
    # decode instance's TTFT of 0 was compared with a measured one without a word)
    said = [n for plan in plans for n in deployment_notes(plan.scenario)]
    for note in dict.fromkeys(said):
        err.print(note, highlight=False, markup=False, soft_wrap=True)
    written = " and ".join(str(p) for p in (out, html) if p is not None)
    # a metric with no error (a TPOT of 0 where every output is one token, a prediction of
    # nothing) is a row, not a comparison (QA: "11 compared", 6 of them nan on both sides)
    scored = int(frame["rel_error"].notna().sum()) if "rel_error" in frame else len(frame)
    unscored = (
        f" ({len(frame) - scored} more without an error to score)" if scored < len(frame) else ""
    )
    err.print(
        f"{len(plans)} run(s), {scored} metric(s) compared{unscored}"
        + (f"; wrote {written}" if written else ""),
        highlight=False,
        markup=False,
    )


def _table_text(frame: pd.DataFrame, out: Path) -> str:
    """The rows as CSV, or as a JSON list of objects (NaN as null)."""
    if out.suffix == ".json":
        rows = [
            {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
            for row in frame.to_dict(orient="records")
        ]
        return json.dumps(rows, indent=1) + "\n"
    return frame.to_csv(index=False, float_format="%.6g")


def _shown(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows as printed: the error in percent."""
    shown = frame[["run", "load", "metric", "measured", "predicted", "rel_error"]].copy()
    shown["rel_error"] = 100 * shown["rel_error"].astype(float)
    return shown.rename(columns={"rel_error": "error %"})
