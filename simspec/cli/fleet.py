"""``simspec fleet``: N replicas behind a router, replaying a production trace (or Poisson
arrivals) against latency SLOs; per-request results, a summary, timelines and an HTML report."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from simspec.cli import options as opt
from simspec.cli.common import (
    check_executor,
    err,
    known_method,
    one_line_errors,
    progress_bar,
    study_runs,
)
from simspec.cli.flags import DeploymentFlags, with_flags
from simspec.cli.tables import (
    check_outputs,
    print_frame,
    print_provenance,
    write_frame,
    write_text,
)
from simspec.config import (
    MAX_REPLICAS,
    MAX_TIMELINE_ROWS,
    ROUTERS,
    Deployment,
    FleetConfig,
    MethodConfig,
    Scenario,
)
from simspec.errors import InputError
from simspec.studies.provenance import provenance

Replicas = Annotated[int, typer.Option(help="replicas in the fleet", min=1, max=MAX_REPLICAS)]
RouterOpt = Annotated[str, typer.Option(help=f"router: {', '.join(ROUTERS)}")]
SloTtft = Annotated[float, typer.Option(help="time-to-first-token SLO per request (ms)", min=1)]
SloTpot = Annotated[float, typer.Option(help="time-per-output-token SLO per request (ms)", min=0.1)]
Qps = Annotated[
    float | None,
    typer.Option(help="without --trace: Poisson arrivals at this rate (requests/s)", min=1e-3),
]
Requests = Annotated[
    int, typer.Option(help="without --trace: Poisson requests to simulate", min=1, max=1_000_000)
]


def fleet_deployment(
    flags: DeploymentFlags,
    config: Path | None,
    trace: str | None,
    qps: float | None,
    requests: int,
    trace_flags: dict[str, Any],
    method: str | None,
) -> tuple[Deployment, list[MethodConfig]]:
    """The replicas' deployment with the arrivals the flags ask for (a replayed trace, or
    Poisson), and the methods named (each in its preset for the trace's acceptance domain:
    conversation -> sharegpt, coding -> instructcoder, unless --dataset says otherwise)."""
    from simspec.catalog.arrival_traces import acceptance_dataset, load_arrival_trace

    data = flags._scenario(config)  # the deployment flags' one reading of --config
    if trace is not None:
        workload = opt.trace_workload(trace, **trace_flags)
        dataset = acceptance_dataset(load_arrival_trace(trace, "--trace"), flags.dataset)
    elif qps is not None:
        if any(v is not None for v in trace_flags.values()):
            raise InputError("--trace", "--rate-scale, --target-qps, --window and --tile need it")
        workload = {**(data.get("workload") or {}), "arrival": "poisson", "rate": qps}
        workload |= {"requests": requests, "measure": "whole"}
        dataset = flags.dataset or "sharegpt"
    else:
        raise InputError("--trace", "give --trace azure-conv|azure-code|FILE, or --qps")
    data["workload"] = workload
    names = [known_method(m, "--method") for m in method.split(",")] if method else None
    methods = flags.chosen(data, names, ["autoregressive"], dataset, "--method")
    if flags.speculative_config:  # chosen() puts plain decoding first, to compare against
        methods = methods[1:]
    rest = {k: v for k, v in data.items() if k not in ("methods", "method", "batch_sizes")}
    return Deployment(**rest), [MethodConfig(**m) for m in methods]


@with_flags(DeploymentFlags)
@one_line_errors
def fleet(
    slo_ttft_ms: SloTtft,
    slo_tpot_ms: SloTpot,
    trace: opt.ArrivalTraceRef = None,
    rate_scale: opt.RateScale = None,
    target_qps: opt.TargetQps = None,
    window: opt.TraceWindow = None,
    tile: opt.TraceTile = None,
    qps: Qps = None,
    requests: Requests = 2000,
    replicas: Replicas = 1,
    router: RouterOpt = "least_outstanding",
    method: Annotated[
        str | None,
        typer.Option(help="the replicas' method, in its preset [default: autoregressive]"),
    ] = None,
    config: opt.Config = None,
    *,
    flags: DeploymentFlags,
    seed: opt.Seed = None,
    warmup_s: Annotated[
        float,
        typer.Option(
            help="leave requests arriving before this second out of the stats (before the "
            "last arrival: some request must be measured)"
        ),
    ] = 0.0,
    window_s: Annotated[
        float,
        typer.Option(
            help="seconds per timeline window: the arrivals' span over it, times replicas + 1, "
            f"is at most {MAX_TIMELINE_ROWS:,} timeline rows",
            min=0.01,
        ),
    ] = 10.0,
    executor: Annotated[
        str, typer.Option(help="serial, process or ray: shards state-free routers' replicas")
    ] = "serial",
    workers: Annotated[int | None, typer.Option(help="shards [default: every CPU]", min=1)] = None,
    out: Annotated[Path | None, typer.Option(help="per-request results (CSV or Parquet)")] = None,
    summary: Annotated[Path | None, typer.Option(help="the summary (CSV or JSON)")] = None,
    timeline: Annotated[Path | None, typer.Option(help="time series per window (CSV)")] = None,
    report: Annotated[Path | None, typer.Option(help="timelines drawn as HTML (plotly)")] = None,
) -> None:
    """A fleet of replicas behind a router, replaying a trace against SLOs.

    Every request of the trace (window, rescaled, tiled) arrives at its time, the router puts
    it on a replica, and each replica runs the engine as `simspec sweep` does. Reported:
    TTFT/TPOT/E2E percentiles with 95 % intervals, SLO attainment (requests within both SLOs),
    goodput, per-replica utilisation (busy share) with KV and batch occupancy (the headroom
    beside it), and timelines.
    """
    from simspec.studies import fleet as study

    if router not in ROUTERS:
        raise InputError("--router", f"choose {', '.join(ROUTERS)} (got {router!r})")
    check_executor(executor)
    if not (math.isfinite(warmup_s) and warmup_s >= 0):
        raise InputError("--warmup-s", f"must be a finite number of seconds >= 0, got {warmup_s}")
    if not math.isfinite(window_s):  # the option's own range refuses below 0.01 and NaN
        raise InputError(
            "--window-s", f"must be a finite number of seconds >= 0.01, got {window_s}"
        )
    check_outputs(
        (out, "--out", (".csv", ".parquet")),
        (summary, "--summary", (".csv", ".json")),
        (timeline, "--timeline", (".csv",)),
        (report, "--report", (".html",)),
    )
    slo = study.FleetSlo(slo_ttft_ms, slo_tpot_ms)
    trace_flags = {"rate_scale": rate_scale, "target_qps": target_qps, "window": window}
    trace_flags["tile"] = tile
    deploy, methods = fleet_deployment(flags, config, trace, qps, requests, trace_flags, method)
    if len(methods) != 1:
        raise InputError("--method", "a fleet's replicas run one method: name one")
    common = deploy.model_dump() | ({"seed": seed} if seed is not None else {})
    cfg = FleetConfig.uniform(Scenario(**common, method=methods[0]), replicas, router)
    study.check_warmup(cfg, warmup_s)
    with (
        progress_bar("simulating", total=100) as bar,
        study_runs(executor, workers, progress=bar) as runs,
    ):
        run = study.run_fleet(cfg, runs=runs, window_s=window_s)
    table = study.per_request(run, slo)
    row = study.summarize_fleet(run, slo, table, warmup_s) | provenance(deploy, methods[0])
    series = study.timeline(run)
    if out is not None:
        write_frame(table, out)
    if summary is not None:
        if summary.suffix == ".json":
            text = json.dumps({k: _plain(v) for k, v in row.items()}, indent=2) + "\n"
            write_text(summary, text, "--summary")
        else:
            import pandas as pd

            write_frame(pd.DataFrame([row]), summary, "--summary")
    if timeline is not None:
        write_frame(series, timeline, "--timeline")
    if report is not None:
        from simspec.studies.fleet_report import report_html

        write_text(report, report_html(series, row, _title(cfg, slo)), "--report")
    _show(row, study.utilisation(run), cfg, slo)
    print_provenance(deploy, methods)


def _plain(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _title(cfg: FleetConfig, slo: Any) -> str:
    sc, wl = cfg.replicas[0], cfg.workload
    arrivals = wl.arrival_trace if wl.arrival == "replay" else f"Poisson {wl.rate:g} req/s"
    return (
        f"{len(cfg.replicas)} x {sc.model} on {sc.gpu} x{sc.tp}, {sc.method.name}, "
        f"{cfg.router}, {arrivals}; SLO TTFT <= {slo.ttft_ms:g} ms, TPOT <= {slo.tpot_ms:g} ms"
    )


def _show(row: dict[str, Any], util: Any, cfg: FleetConfig, slo: Any) -> None:
    from simspec.studies.fleet import summary_table

    frame = summary_table(row)
    print_frame(frame.round(4), _title(cfg, slo))
    if len(util) <= 16:
        print_frame(util.round(3), "Per replica")
    err.print(
        "Every request of the run counts (measure: whole, from an empty fleet to the last "
        "departure); intervals: 95 %, sectioning over arrival order (percentiles clipped at "
        "0; attainment: Wilson's). utilisation: share of the run a replica computed; "
        "kv_occupancy, batch_occupancy: mean share of its KV blocks and of its max_num_seqs "
        "batch slots in use, its headroom."
    )
