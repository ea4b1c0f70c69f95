"""``simspec fleet``: N replicas behind a router, replaying a production trace (or Poisson
arrivals) against latency SLOs; per-request results, a summary, timelines and an HTML report."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from simspec.catalog.tables import shown
from simspec.cli import options as opt
from simspec.cli.common import (
    check_executor,
    err,
    one_line_errors,
    one_method,
    progress_bar,
    refuse_unread,
    study_runs,
)
from simspec.cli.flags import DeploymentFlags, read_config, with_flags
from simspec.cli.method_flags import trace_methods
from simspec.cli.tables import (
    check_outputs,
    deployment_columns,
    floor_share,
    print_frame,
    print_provenance,
    write_frame,
    write_text,
)
from simspec.config import (
    DEFAULT_SLO_TPOT_MS,
    DEFAULT_SLO_TTFT_MS,
    MAX_REPLICAS,
    MAX_TIMELINE_ROWS,
    MAX_WORKERS,
    ROUTERS,
    Deployment,
    FleetConfig,
    MethodConfig,
    Scenario,
    WorkloadConfig,
)
from simspec.errors import InputError, first_error
from simspec.outputs import CLOCK_COLUMNS
from simspec.studies.provenance import provenance
from simspec.studies.schedule.export import schedule_of

Replicas = Annotated[int, typer.Option(help="replicas in the fleet", min=1, max=MAX_REPLICAS)]
RouterOpt = Annotated[str, typer.Option(help=f"router: {', '.join(ROUTERS)}")]
Qps = Annotated[
    float | None,
    typer.Option(
        help="without --trace: Poisson arrivals at this rate (requests/s)", min=1e-3, max=1e6
    ),
]
FLEET_REQUESTS = 2000  # Poisson requests when --requests is not given
Requests = Annotated[
    int | None,
    typer.Option(
        help=f"without --trace: Poisson requests to simulate [default: {FLEET_REQUESTS}]",
        min=1,
        max=1_000_000,
    ),
]
TRACE_FLAGS = {"rate_scale": "--rate-scale", "target_qps": "--target-qps", "window": "--window"}
TRACE_FLAGS |= {"tile": "--tile"}


def fleet_deployment(
    flags: DeploymentFlags,
    config: Path | None,
    trace: str | None,
    qps: float | None,
    requests: int | None,
    trace_flags: dict[str, Any],
    names: list[str] | None,
    default: list[str],
    flag: str,
) -> tuple[Deployment, list[MethodConfig]]:
    """The replicas' deployment with the arrivals the flags ask for (a replayed trace, or
    Poisson), and the methods: ``names`` (from ``flag``), else the file's, else ``default``,
    each in its preset for the trace's acceptance domain (conversation -> sharegpt, coding ->
    instructcoder, unless --dataset says otherwise). A flag the arrivals chosen do not read is
    an error naming it."""
    from simspec.catalog.arrival_traces import load_arrival_trace

    # the deployment flags' one reading of --config
    data = flags._scenario(config, replay=trace is not None)
    given_trace_flags = {TRACE_FLAGS[k]: v for k, v in trace_flags.items()}
    if trace is not None:
        refuse_unread(
            "with --trace the arrival rate is the trace's: scale it with --target-qps or "
            "--rate-scale",
            {"--qps": qps},
        )
        refuse_unread(
            "with --trace every request of the trace (its --window) arrives: choose them with "
            "--window, or repeat them with --tile",
            {"--requests": requests},
        )
        if trace_flags.get("rate_scale") is not None and trace_flags.get("target_qps") is not None:
            raise InputError(  # by the flags typed, not the fields (QA)
                "--target-qps", "give --rate-scale or --target-qps, not both (each sets the rate)"
            )
        replay = opt.trace_workload(trace, **trace_flags)
        data["workload"] = replay_workload(data.get("workload"), replay, trace_flags, config)
        methods = trace_methods(
            flags, data, load_arrival_trace(trace, "--trace"), names, default, flag
        )
        _check_token_trace_read(flags, methods)
    elif qps is not None:
        refuse_unread(
            "sets how a trace replays: give --trace (without it, Poisson arrivals at --qps)",
            given_trace_flags,
        )
        data["workload"] = poisson_workload(data.get("workload"), qps, requests, config)
        methods = flags.chosen(data, names, default, flags.dataset or "sharegpt", flag)
    else:
        # a fleet's arrivals are the flags' (a --config file's workload keeps its lengths and
        # acceptance domain, not its arrivals: QA, a file's replay read as if it set them)
        raise InputError(
            "--trace",
            "give --trace azure-conv|azure-code|FILE, or --qps: a fleet's arrivals come from "
            "these flags, a --config file's workload sets only the rest",
        )
    if flags.speculative_config:  # chosen() puts plain decoding first, to compare against
        methods = methods[1:]
    rest = {k: v for k, v in data.items() if k not in ("methods", "method", "batch_sizes")}
    return Deployment(**rest), [MethodConfig(**m) for m in methods]


def _unread_hint(field: str) -> str:
    return " (--warmup-s sets where a fleet's measure starts)" if field == "warmup_requests" else ""


def poisson_workload(
    file: Any, qps: float, requests: int | None, config: Path | None
) -> dict[str, Any]:
    """The workload of a --qps run on top of the --config file's: Poisson arrivals at --qps,
    measured whole, of --requests requests (else the file's, else FLEET_REQUESTS); a file
    field that says otherwise (a closed loop's arrival or concurrency, a steady measure) is an
    error naming it, never dropped."""
    if file is None:
        file = {}
    why = (
        f"the --config file {shown(str(config))} sets it, and --qps runs Poisson arrivals "
        "measured whole: drop it from the file, or run the file without --qps"
    )
    _arrivals_measured_whole(file, "poisson", why, why)
    # a closed loop's and a steady window's fields, which a Poisson run measured whole reads
    # not (QA: turnovers and warmup_requests were dropped without a word; --warmup-s sets
    # where a fleet's measure starts)
    for field in ("concurrency", "turnovers", "warmup_requests"):
        if file.get(field) is not None:
            raise InputError(f"workload.{field}", why + _unread_hint(field))
    if file.get("rate_schedule") is not None:
        # it replaces the rate (WorkloadConfig), so --qps would be dropped while the summary
        # said it ran (QA: "poisson 5 req/s" over a file schedule's 12.7)
        raise InputError(
            "workload.rate_schedule",
            f"the --config file {shown(str(config))} sets a rate schedule, which replaces "
            "--qps: drop --qps to run the schedule, or drop rate_schedule from the file",
        )
    count = requests if requests is not None else file.get("requests", FLEET_REQUESTS)
    return file | {"arrival": "poisson", "rate": qps, "requests": count, "measure": "whole"}


def _arrivals_measured_whole(file: Any, arrival: str, why: str, measure_why: str) -> None:
    """A --config file's workload that is a mapping of ``arrival`` arrivals (or none stated),
    measured whole (or none stated); else the error naming its field."""
    if not isinstance(file, dict):
        raise InputError("workload", why)
    if file.get("arrival", arrival) != arrival:
        raise InputError("workload.arrival", why)
    if file.get("measure", "whole") != "whole":
        raise InputError("workload.measure", measure_why)


# the replay fields each trace flag sets, which replace the --config file's
REPLACED_BY = {
    "window": ("trace_start_s", "trace_end_s"),
    "rate_scale": ("rate_scale", "target_qps"),
    "target_qps": ("rate_scale", "target_qps"),
    "tile": ("tile_s",),
}


def replay_workload(
    file: Any, replay: dict[str, Any], trace_flags: dict[str, Any], config: Path | None
) -> dict[str, Any]:
    """The workload that replays --trace (``replay``, from the trace flags) on top of the
    --config file's: a replay reads the file's window, rate and tiling (each replaced by its
    flag when given), while the trace sets the arrivals, the lengths and the request count, so
    a file's field for those (a closed loop's concurrency, a dataset's lengths; at other than
    its default) is an error naming it, never dropped."""
    if file is None:
        return replay
    why = (
        f"the --config file {shown(str(config))} sets it, and --trace sets the workload "
        "(the trace gives the arrivals, the lengths and the request count): drop it from "
        "the file, or run without --trace"
    )
    _arrivals_measured_whole(file, "replay", why, f"{why}; a replay is measured whole")
    if unread := WorkloadConfig.not_for_replay(file):
        # QA: a file's "trace: tr.csv" (lengths_from's older spelling) was named only as
        # lengths_from, which the file never wrote
        dataset = (
            "; --dataset names the methods' acceptance dataset (lengths_from is spelled trace in "
            "older files: a dataset's lengths, not the arrival trace, which is arrival_trace)"
        )
        raise InputError(
            f"workload.{unread[0]}", why + (dataset if unread[0].startswith("lengths_from") else "")
        )
    replaced = {
        f for flag, fields in REPLACED_BY.items() if trace_flags[flag] is not None for f in fields
    }
    return {k: v for k, v in file.items() if k not in replaced} | replay


def _check_token_trace_read(flags: DeploymentFlags, methods: list[dict[str, Any]]) -> None:
    """With --trace the lengths are the trace's, so a --token-trace is read only as the
    acceptance of a lookup method it replays."""
    from simspec.catalog.methods import TOKEN_REPLAYED

    if not any(m.get("name") in TOKEN_REPLAYED for m in methods):
        refuse_unread(
            "with --trace the request lengths are the trace's, and a token trace sets only "
            f"the acceptance of {', '.join(TOKEN_REPLAYED)}, none of which runs",
            {"--token-trace": flags.token_trace},
        )


@with_flags(DeploymentFlags)
@one_line_errors
def fleet(
    slo_ttft_ms: opt.SloTtft = DEFAULT_SLO_TTFT_MS,
    slo_tpot_ms: opt.SloTpot = DEFAULT_SLO_TPOT_MS,
    trace: opt.ArrivalTraceRef = None,
    rate_scale: opt.RateScale = None,
    target_qps: opt.TargetQps = None,
    window: opt.TraceWindow = None,
    tile: opt.TraceTile = None,
    qps: Qps = None,
    requests: Requests = None,
    replicas: Replicas = 1,
    prefill_replicas: Annotated[
        int | None,
        typer.Option(
            help="prefill instances in front of --replicas, which become decode instances "
            "(prefill/decode disaggregation: SGLang --disaggregation-mode prefill/decode, "
            "vLLM kv_producer/kv_consumer) [default: none, every replica serves whole "
            "requests]",
            min=1,
            max=1024,
        ),
    ] = None,
    kv_transfer_gbps: opt.KvTransferGbps = None,
    kv_transfer_latency_ms: opt.KvTransferLatencyMs = None,
    router: RouterOpt = "least_outstanding",
    method: Annotated[
        str | None,
        typer.Option(help="the replicas' method, in its preset [default: autoregressive]"),
    ] = None,
    methods: opt.MethodsAlias = None,
    config: opt.Config = None,
    *,
    flags: DeploymentFlags,
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
    workers: Annotated[
        int | None,
        typer.Option(
            help="shards of a process or Ray run (--executor process or ray) [default: every CPU]",
            min=1,
            max=MAX_WORKERS,
        ),
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster: 'auto' or HOST:PORT [default: local]")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="per-request results (CSV or Parquet)")] = None,
    summary: Annotated[
        Path | None,
        typer.Option(
            help='the summary (CSV: the fleet\'s row; JSON: that and, under "replicas", each '
            "replica's row of the printed per-replica table)"
        ),
    ] = None,
    timeline: Annotated[Path | None, typer.Option(help="time series per window (CSV)")] = None,
    report: Annotated[Path | None, typer.Option(help="timelines drawn as HTML (plotly)")] = None,
) -> None:
    """A fleet of replicas behind a router, replaying a trace against SLOs.

    Every request of the trace (window, rescaled, tiled) arrives at its time, the router puts
    it on a replica, and each replica runs the engine as `simspec sweep` does. Reported:
    TTFT/TPOT/E2E percentiles with 95 % intervals, SLO attainment (requests within both SLOs),
    goodput, per-replica utilisation (busy share) with KV and batch occupancy (the headroom
    beside it), and timelines. With --prefill-replicas the replicas are decode instances
    behind that many prefill instances (prefill/decode disaggregation).

    Example: simspec fleet --trace azure-conv --window 0:600 --replicas 2 --method eagle3
    --out requests.csv --report fleet.html
    """
    from simspec.studies import fleet as study

    if router not in ROUTERS:
        raise InputError("--router", f"choose {', '.join(ROUTERS)} (got {router!r})")
    check_executor(executor)
    if executor != "ray":
        refuse_unread("is the Ray cluster --executor ray runs on", {"--ray-address": ray_address})
    if executor == "serial" and workers != 1:  # one worker is what serial runs (QA)
        refuse_unread(
            "shards a pool's or Ray's run: give --executor process or ray", {"--workers": workers}
        )
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
        inputs=[(trace, "--trace"), (config, "--config")],
    )
    slo = study.FleetSlo(slo_ttft_ms, slo_tpot_ms)
    trace_flags = {"rate_scale": rate_scale, "target_qps": target_qps, "window": window}
    trace_flags["tile"] = tile
    why = "a fleet's replicas run one method; simspec plan --trace compares methods"
    name = one_method({"--method": method, "--methods": methods}, why)
    names = [name] if name is not None else None
    flag = "--methods" if methods is not None else "--method"
    if config is not None and read_config(config).get("batch_sizes") is not None:
        # a sweep file's batch sizes, which a fleet (its arrivals the flags') never runs (QA:
        # dropped without a word)
        raise InputError(
            "batch_sizes",
            f"the --config file {shown(str(config))} lists batch sizes, and a fleet serves the "
            "arrivals --trace or --qps gives, not closed loops: drop them from the file",
        )
    deploy, chosen = fleet_deployment(
        flags, config, trace, qps, requests, trace_flags, names, ["autoregressive"], flag
    )
    if len(chosen) != 1:
        # the methods came from the flag, or else from the file (QA: a file's list was
        # reported against --method, which the user never gave)
        where = flag if names is not None else "methods"
        raise InputError(where, f"{why}: name one ({where} lists {len(chosen)})")
    if prefill_replicas is not None and flags.disaggregation_mode == "null":
        raise InputError(  # QA: run as decode instances without a word
            "--disaggregation-mode",
            "null, but with --prefill-replicas the replicas are decode instances: drop it",
        )
    cfg = fleet_config(
        Scenario(**deploy.model_dump(), method=chosen[0]),
        replicas,
        router,
        prefill_replicas,
        {"kv_transfer_gbps": kv_transfer_gbps, "kv_transfer_latency_ms": kv_transfer_latency_ms},
    )
    if executor != "serial" and not study.shardable(cfg):
        raise InputError(
            "--executor",
            "shards a fleet's replicas, and one replica runs in one process"
            if replicas == 1
            else "shards independent replicas, and a fleet with --prefill-replicas hands each "
            "request from a prefill instance to a decode instance: it runs in one process, "
            "drop --executor"
            if cfg.prefill is not None
            else f"shards the replicas behind a state-free router (round_robin, random); "
            f"{router} reads every replica's state at each arrival, so the fleet runs in one "
            "process: drop --executor, or give --router round_robin or random",
        )
    study.check_warmup(cfg, warmup_s)
    shards = workers if workers is not None or executor == "serial" else os.cpu_count()
    with (
        progress_bar("simulating", total=100) as bar,
        study_runs(executor, shards, ray_address, progress=bar) as runs,
    ):
        run = study.run_fleet(cfg, runs=runs, window_s=window_s)
    table = study.per_request(run, slo)
    row = study.summarize_fleet(run, slo, table, warmup_s) | provenance(deploy, chosen[0])
    series = study.timeline(run)
    util = study.utilisation(run)
    html = None
    if report is not None:  # built before any file is written: a failure leaves none of them
        from simspec.studies.fleet_report import report_html

        html = report_html(series, row, _title(cfg, slo))
    if out is not None:
        write_frame(table, out, exact=CLOCK_COLUMNS)
    if summary is not None:
        asked = _asked(cfg, deploy, slo, warmup_s)  # a summary read on its own says what it answers
        if summary.suffix == ".json":
            # each replica's row too (QA: the summary held the fleet's alone, the per-replica
            # table was on the screen only)
            replicas = [{k: _plain(v) for k, v in r.items()} for r in util.to_dict("records")]
            fields = {k: _plain(v) for k, v in (row | asked).items()} | {"replicas": replicas}
            text = json.dumps(fields, indent=2) + "\n"
            write_text(summary, text, "--summary")
        else:
            import pandas as pd

            write_frame(pd.DataFrame([row | asked]), summary, "--summary")
    if timeline is not None:
        write_frame(series, timeline, "--timeline", exact=CLOCK_COLUMNS)
    if report is not None and html is not None:
        write_text(report, html, "--report")
    _show(row, util, cfg, slo, warmup_s)
    _arrival_rate_note(table)
    _unserved_note(table)
    tile_cut_note(cfg.workload)
    _disaggregation_note(cfg)
    # the stand-alone decode instance's note (TTFT: its wait for room) is not this fleet's
    shown_deploy = (
        deploy if cfg.prefill is None else deploy.model_copy(update={"disaggregation_mode": "null"})
    )
    print_provenance(shown_deploy, chosen)


def _arrival_rate_note(table: Any) -> None:
    """The arrivals as they ran: how many, over how long, at what mean rate (QA: a --tile that
    ends mid-copy, or Poisson gaps as drawn, miss the rate asked without a word)."""
    arrivals = table["arrival_s"]
    if len(arrivals) < 2:
        return
    span = float(arrivals.max() - arrivals.min())
    if span > 0:
        err.print(
            f"arrivals: {len(arrivals):,} requests over {span:,.1f} s, "
            f"{(len(arrivals) - 1) / span:.3g} req/s between the first and the last",
            highlight=False,
        )


def _unserved_note(table: Any) -> None:
    """Requests the fleet refused, said as sweep says them (QA: only "unfinishable 20" in the
    summary, no word why)."""
    if "unfinishable" not in table or not len(table):
        return
    refused = int(table["unfinishable"].sum())
    if refused:
        err.print(
            f"note: {refused:,} of {len(table):,} requests went unserved: longer than the "
            "context the engine serves (prompt + output past max_model_len where it is set, "
            "else the model's max_position_embeddings: a serving engine refuses them) or than "
            "its KV cache; the latencies are over the rest (the unfinishable column)",
            highlight=False,
        )


def _disaggregation_note(cfg: FleetConfig) -> None:
    """How a disaggregated fleet's requests moved, and what of it is not simulated."""
    pool = cfg.prefill
    if pool is None:
        return
    from simspec.catalog.hardware import load_engine
    from simspec.engine.disaggregation import kv_link_gbps

    engine = load_engine(cfg.replicas[0].engine)
    if engine.flag("pd_prealloc_before_prefill"):
        order = (
            "a decode instance preallocates each request's blocks, then a prefill instance "
            "runs its prompt and first token and sends its KV chunk by chunk"
        )
    else:
        order = (
            "a prefill instance runs each prompt and its first token and holds its KV until "
            "a decode instance has allocated blocks for it and read it"
        )
        if engine.flag("pd_alloc_counted_in_step"):
            order += (
                " (a step allocates for at most max_num_seqs less those running; a request "
                "receiving KV is not counted after it, as TensorRT-LLM ran before its PR "
                "#15356: engines.yaml pd_alloc_beside_running)"
            )
    gbps, basis = kv_link_gbps(pool.kv_transfer_gbps, cfg.replicas[0].gpu)
    err.print(
        f"prefill/decode ({engine.id}): {order}, at {gbps:g} Gb/s per GPU ({basis}) + "
        f"{pool.kv_transfer_latency_ms:g} ms, each instance's transfers one after another on "
        "its link; TTFT runs to the decode instance's first token. Not simulated: prefill and "
        "decode instances of different layouts, a preempted request's return from host "
        "memory (README: Prefill/decode disaggregation).",
        highlight=False,
    )


def fleet_config(
    scenario: Scenario,
    replicas: int,
    router: str,
    prefill: int | None,
    link: dict[str, float | None],
    prefill_flag: str = "--prefill-replicas",
) -> FleetConfig:
    """``replicas`` copies of ``scenario`` behind ``router``; with ``prefill`` instances in
    front, those copies are decode instances (their engine must run one) and ``link`` (the
    flags given of the KV transfer) sets how a prompt's KV crosses to them. Errors name the
    flags: ``prefill_flag`` the one that asked for prefill instances."""
    given_link = {k: v for k, v in link.items() if v is not None}
    if prefill is None:
        flags = {f"--{k.replace('_', '-')}": v for k, v in given_link.items()}
        refuse_unread(f"sets the KV transfer of {prefill_flag}: give it too", flags)
        return FleetConfig.uniform(scenario, replicas, router)
    from simspec.studies.fleet import disaggregated_fleet

    flags = {
        "prefill_replicas": prefill_flag,
        "prefill.kv_transfer_gbps": "--kv-transfer-gbps",
        "prefill.kv_transfer_latency_ms": "--kv-transfer-latency-ms",
    }
    try:
        return disaggregated_fleet(scenario, replicas, router, prefill, given_link)
    except InputError as exc:  # by the flag that set it
        raise InputError(flags.get(exc.field, exc.field), exc.message) from None
    except ValidationError as exc:  # a link out of range
        field, message = first_error(exc)
        raise InputError(flags.get(field, field), message) from None


def tile_cut_note(wl: Any) -> None:
    """A --tile shorter than the trace as windowed and rescaled cuts the replay at the tile: say
    so and how much was left out (QA: the arrivals line gave the count, nothing named the cut)."""
    if wl.arrival != "replay" or wl.tile_s is None:
        return
    from simspec.catalog.arrival_traces import transformed

    whole = transformed(
        wl.arrival_trace, wl.trace_start_s, wl.trace_end_s, wl.rate_scale, wl.target_qps
    )
    if wl.tile_s >= whole.duration_s:
        return
    kept = int((whole.arrival_s < wl.tile_s).sum())
    err.print(
        f"--tile {wl.tile_s:g} s is shorter than the trace as windowed and rescaled "
        f"({whole.duration_s:,.1f} s): the replay stops at {wl.tile_s:g} s, "
        f"{kept:,} of its {len(whole):,} requests",
        highlight=False,
    )


def _asked(cfg: FleetConfig, deploy: Deployment, slo: Any, warmup_s: float) -> dict[str, Any]:
    """What the run was asked, as the summary's columns (QA: a saved summary named no SLO,
    router, method, deployment, arrivals or seed): the deployment as plan's CSVs say theirs
    (tables.deployment_columns), then the fleet's own."""
    from simspec.engine.disaggregation import kv_link_gbps

    sc, wl = cfg.replicas[0], cfg.workload
    return deployment_columns(deploy) | {
        "method": sc.method.name,
        "k": sc.method.k,
        # a speculation schedule runs its bands' K, not k (QA: a schedule read as k=3)
        "schedule": schedule_of(sc.method),
        "router": cfg.router,
        "arrivals": arrivals_text(wl, "poisson"),
        "trace_start_s": wl.trace_start_s,
        "trace_end_s": wl.trace_end_s,
        "rate_scale": wl.rate_scale,
        "target_qps": wl.target_qps,
        "tile_s": wl.tile_s,
        # a disaggregated fleet's prefill instances and KV link (QA-style: a saved summary
        # says what it answers)
        "prefill_replicas": cfg.prefill.replicas if cfg.prefill else None,
        "kv_transfer_gbps": (
            kv_link_gbps(cfg.prefill.kv_transfer_gbps, sc.gpu)[0] if cfg.prefill else None
        ),
        "kv_transfer_latency_ms": cfg.prefill.kv_transfer_latency_ms if cfg.prefill else None,
        "slo_ttft_ms": slo.ttft_ms,
        "slo_tpot_ms": slo.tpot_ms,
        "warmup_s": warmup_s,
        "seed": sc.seed,
    }


def _plain(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def arrivals_text(wl: Any, poisson: str) -> str:
    """The arrivals in words: a replayed trace with how it was windowed, rescaled and tiled
    (QA: a saved summary named the trace alone), or the Poisson rate."""
    if wl.arrival != "replay":
        return f"{poisson} {wl.rate:g} req/s"
    shaped = []
    if wl.trace_start_s is not None or wl.trace_end_s is not None:
        start = f"{wl.trace_start_s:g}" if wl.trace_start_s is not None else ""
        end = f"{wl.trace_end_s:g}" if wl.trace_end_s is not None else ""
        shaped.append(f"window {start}:{end} s")
    if wl.rate_scale is not None:
        shaped.append(f"x{wl.rate_scale:g} rate")
    if wl.target_qps is not None:
        shaped.append(f"at {wl.target_qps:g} req/s")
    if wl.tile_s is not None:
        shaped.append(f"tiled to {wl.tile_s:g} s")
    return str(wl.arrival_trace) + (f" ({', '.join(shaped)})" if shaped else "")


def _title(cfg: FleetConfig, slo: Any) -> str:
    sc, wl = cfg.replicas[0], cfg.workload
    arrivals = arrivals_text(wl, "Poisson")
    count = f"{len(cfg.replicas)} x"
    if cfg.prefill is not None:  # prefill instances, then the replicas decoding
        count = f"{cfg.prefill.replicas} prefill + {len(cfg.replicas)} decode x"
    return (
        f"{count} {sc.model} on {sc.gpu} x{sc.tp}, {sc.method.name}, "
        f"{cfg.router}, {arrivals}; SLO TTFT <= {slo.ttft_ms:g} ms, TPOT <= {slo.tpot_ms:g} ms"
    )


def _show(
    row: dict[str, Any], util: Any, cfg: FleetConfig, slo: Any, warmup_s: float = 0.0
) -> None:
    from simspec.studies.fleet import summary_table

    exact = summary_table(row)
    frame = exact.round(4)
    shares = frame["measure"] == "slo_attainment"  # never 1 for less than all (QA)
    for col in ("value", "ci_low", "ci_high"):
        frame.loc[shares, col] = exact.loc[shares, col].map(floor_share)
    # a measure without an interval (a count, a share of the run) shows none, not "nan" (QA)
    for col in ("ci_low", "ci_high"):
        frame[col] = frame[col].astype(object).where(frame[col].notna(), "")
    print_frame(frame, _title(cfg, slo))
    if len(util) <= 16:
        print_frame(util.round(3), "Per replica")
    counted = (
        f"Requests arriving after the first {warmup_s:g} s count (--warmup-s), and the "
        "throughput and goodput run from the first of them (measured_from_s) on; "
        "utilisation and occupancy cover the whole run from its first arrival"
        if warmup_s > 0  # QA: the footer said every request counted
        else "Every request of the run counts (measure: whole, from an empty fleet to the last "
        "departure); throughput, goodput, utilisation and occupancy run from the first "
        "arrival (measured_from_s) to the last departure (makespan_s)"
    )
    err.print(
        f"{counted}; intervals: 95 %, sectioning over arrival order (percentiles clipped at "
        "0; attainment: Wilson's). utilisation: share of that span a replica computed; "
        "kv_occupancy, batch_occupancy: mean share of its KV blocks and of its max_num_seqs "
        "batch slots in use, its headroom."
    )
