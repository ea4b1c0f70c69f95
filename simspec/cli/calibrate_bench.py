"""``simspec calibrate bench``: a profile of one deployment, fitted to its own benchmark runs."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer

from simspec.cli import options as opt
from simspec.cli.common import err, one_line_errors, progress_bar, warn, writing
from simspec.cli.flags import (
    SchedulerFlags,
    ServingFlags,
    given,
    scheduler_limits,
    with_flags,
    with_preset_ids,
)
from simspec.cli.options import field_help
from simspec.cli.tables import check_outputs, print_frame
from simspec.config import Deployment
from simspec.errors import InputError


@dataclass(frozen=True)
class CalibrateFlags(SchedulerFlags, ServingFlags):
    """The deployment the runs were measured on; None = not given (the model defaults to the
    one the files name)."""

    model: Annotated[
        str | None,
        typer.Option(help=field_help(Deployment, "model", default="the preset the files name")),
    ] = None
    profile: Annotated[
        str | None,
        typer.Option(
            help="the profile to start from, whose GPU constants the written profile keeps: "
            "a profile id or YAML file [default: the GPU's]"
        ),
    ] = None
    seed: opt.Seed = None

    def deployment(self) -> dict[str, object]:
        """The Scenario fields these flags set."""
        fields = {**self.serving_fields(), **given(profile=self.profile, seed=self.seed)}
        if limits := scheduler_limits(self):
            fields["scheduler"] = limits
        return with_preset_ids(fields)


@with_flags(CalibrateFlags)
@one_line_errors
def calibrate_bench(
    results: Annotated[
        list[Path],
        typer.Argument(
            metavar="RESULT...",
            help="plain-decoding benchmark results of one deployment at two loads or more "
            "(vllm bench serve --save-result JSON, its printed result block, SGLang "
            "bench_serving --output-file JSONL; at most 256 MiB each)",
            show_default=False,
        ),
    ],
    *,
    flags: CalibrateFlags,
    out: Annotated[
        Path,
        typer.Option(help="the profile to write (.yaml/.yml or .json)", show_default=False),
    ],
) -> None:
    """Fit this deployment's host overheads and kernel speed to RESULT; write a profile.

    Fitted: the engine's host time per step and per sequence, and one multiplier on kernel
    time; every GPU constant stays the base profile's. Fitted to each run's mean TPOT (and
    its output throughput where requests queued for the engine), each run simulated with its
    own workload; TTFT is not fitted (mostly client and HTTP time). With more than three
    loads the fit is also checked on loads it did not see. The profile records the files
    (with their sha256), the error of every fitted number and the held-out check; give it to
    any command with --profile.

    Example: simspec calibrate bench bs1.json bs8.json --gpu h100_sxm --out mine.yaml
    """
    from simspec.catalog.hardware import load_engine, load_gpu, load_profile
    from simspec.studies.bench import check_distinct, check_distinct_runs, read_result_file
    from simspec.studies.bench.calibrate import (
        PUBLISHED_MAX,
        TTFT_NOTE,
        calibrate,
        calibrated_profile,
        runs_gpu,
    )
    from simspec.studies.bench.calibrate import check_runs as check_fit_runs
    from simspec.studies.bench.compare import check_runs, plan_run

    check_outputs(
        (out, "--out", (".yaml", ".yml", ".json")), inputs=[(p, "RESULT") for p in results]
    )
    files, runs = [], []
    seen: dict[str, str | os.PathLike] = {}
    for path in results:
        found, digest = read_result_file(path)
        check_distinct(path, digest, seen, "RESULT")
        files.append((str(path), digest, [r.name for r in found]))
        runs.extend(found)
    check_distinct_runs(runs)
    check_runs(runs)
    deployment = flags.deployment()
    check_fit_runs(runs, deployment.get("gpu"))  # a --gpu given must be the runs' own
    if deployment.get("gpu") is None and (label := runs_gpu(runs, None, "calibration")):
        deployment["gpu"] = label  # as compare takes it
        err.print(f"gpu {label}, as the runs' gpu metadata says", highlight=False)
    with tempfile.TemporaryDirectory(prefix="simspec-calibrate-") as tmp:
        plans = [plan_run(r, deployment, "autoregressive", None, None, Path(tmp)) for r in runs]
        sc = plans[0].scenario
        base_ref = sc.profile or sc.gpu
        base, engine = load_profile(base_ref), load_engine(sc.engine)
        if base.gpu != sc.gpu:  # QA: written as a100_80gb's profile, fitted on H100 runs
            raise InputError(
                "--profile",
                f"{base_ref} is a profile of {base.gpu}, and the runs are simulated on "
                f"{sc.gpu}: the profile written keeps its base's GPU, so give --gpu "
                f"{base.gpu} if they ran there, or a profile of {sc.gpu}",
            )
        base.engine_for(engine)  # a base calibrated on another engine is refused by name
        max_seqs = engine.max_seqs_for(
            "autoregressive", sc.scheduler.max_num_seqs, load_gpu(sc.gpu)
        )
        with progress_bar("simulating the runs") as bar:
            cal = calibrate(plans, base, engine, max_seqs, bar.step)
    profile = calibrated_profile(cal, base, base_ref, engine, files, sc.model, sc.tp)
    with writing(out):
        from simspec.outputs import write_text_atomic
        from simspec.studies.bench.calibrate import profile_text

        text = (
            json.dumps(_plain(profile.model_dump()), indent=2) + "\n"
            if out.suffix == ".json"
            else profile_text(profile)
        )
        write_text_atomic(out, text)
    print_frame(_constants(cal.base, cal.fit.params), f"Deployment constants ({engine.id})")
    print_frame(_rows(cal.base_rows, cal.fit.rows), "Fitted runs: measured vs predicted", width=120)
    if cal.heldout is not None:
        print_frame(
            _rows(None, cal.heldout.rows), f"Held out ({cal.heldout_split}): measured vs predicted"
        )
    for name in cal.fit.at_bound:
        warn(
            f"{name} stopped at the edge of its range: the runs ask for a value past it, so "
            "the fit's error is theirs to explain (another engine, a bottleneck simspec does "
            "not model)"
        )
    for name in cal.fit.beyond_published:
        value, top = cal.fit.params[name], PUBLISHED_MAX[name]
        warn(
            f"{name} fitted at {value * 1e3:.3g} ms, past the largest published host time a step "
            f"({top * 1e3:.3g} ms: vLLM issue #6854, shared host_overhead_reports): check that "
            "the runs are this deployment's (model, GPU, TP, engine and its version); another "
            "deployment's GPU time fits as host time at a small error"
        )
    for row in cal.fit.rows:
        if abs(row["rel_error"]) > UNEXPLAINED:
            warn(
                f"run {row['run']}'s {row['metric']} is still {100 * row['rel_error']:+.1f} % "
                f"off after the fit (measured {row['measured']:.4g}, predicted "
                f"{row['predicted']:.4g}): the fitted constants do not explain it; check its "
                "units (ms, tokens/s) and that it is this deployment's run"
            )
    err.print(TTFT_NOTE, highlight=False, markup=False, soft_wrap=True)
    held = f"; held-out MAPE {cal.heldout.mape:.1%} ({cal.heldout_split})" if cal.heldout else ""
    err.print(
        f"{len(plans)} run(s), fit MAPE {cal.fit.mape:.1%}{held}; wrote {out}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


# a fitted run still off by more than this is one the fit does not explain: calibrated dense
# TPOTs land within ~8 % of measured ones (README, "How far to trust it"), so half is far past
# the model's own error (QA: a run whose TPOTs were x1000 fitted at exit 0, its -99.9 % unsaid)
UNEXPLAINED = 0.5


def _constants(base: dict[str, float], fitted: dict[str, float]) -> pd.DataFrame:
    rows = [[k, base[k], fitted[k]] for k in fitted]
    return pd.DataFrame(rows, columns=["constant", "base", "fitted"])


def _rows(before: list[dict[str, Any]] | None, after: list[dict[str, Any]]) -> pd.DataFrame:
    """The runs as printed: measured, predicted (with the base too, where given), error %."""
    frame = pd.DataFrame(after)[["run", "load", "metric", "measured", "predicted", "rel_error"]]
    if before is not None:
        frame.insert(4, "base", [r["predicted"] for r in before])
    frame["rel_error"] = 100 * frame["rel_error"].astype(float)
    return frame.rename(columns={"rel_error": "error %"})


def _plain(data: Any) -> Any:
    """A profile's dump as JSON allows (no NaN)."""
    if isinstance(data, dict):
        return {k: _plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_plain(v) for v in data]
    if isinstance(data, float) and data != data:
        return None
    return data
