"""``simspec plan`` and ``simspec recommend``: capacity within SLOs, and the K to run per
concurrency band."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from simspec.catalog.methods import k_not_read, stated_topk, tree_capacity
from simspec.catalog.models import load_model
from simspec.catalog.tables import shown
from simspec.catalog.vllm import VLLM_KEYS, read_speculative_config
from simspec.cli import options as opt
from simspec.cli.common import (
    csv_list,
    default_executor,
    err,
    left_out_note,
    one_line_errors,
    one_method,
    one_spelling,
    progress_bar,
    refuse_unread,
    study_runs,
)
from simspec.cli.flags import DeploymentFlags, read_config, with_flags
from simspec.cli.method_flags import all_methods, asks_all
from simspec.cli.tables import (
    check_outputs,
    deployment_columns,
    floor_share,
    number,
    print_frame,
    print_provenance,
    safe_title,
    share,
    with_interval,
    write_frame,
    write_text,
)
from simspec.config import (
    DEFAULT_MEASURED,
    DEFAULT_PRECISION_TARGET,
    DEFAULT_SLO_TPOT_MS,
    DEFAULT_SLO_TTFT_MS,
    DEFAULT_TURNOVERS,
    MAX_CONCURRENCY,
    MAX_DURATION_S,
    MAX_PRECISION_TARGET,
    MAX_QPS,
    MIN_PRECISION_TARGET,
    Deployment,
    FleetConfig,
    MethodConfig,
    Scenario,
    check_precision_target,
)
from simspec.engine import window
from simspec.engine.build import DYNAMIC_SD_UNDER_DP, check_dp_attention
from simspec.errors import InputError
from simspec.studies import capacity
from simspec.studies.provenance import with_provenance
from simspec.studies.schedule import SCHEDULE_FIELDS
from simspec.studies.schedule.grid import DEFAULT_CONCURRENCIES, K_MAX, TREE_BUDGETS
from simspec.studies.schedule.trace import SCHEDULE_GRID
from simspec.studies.sweep import FIXED_AND_TARGET, written_length

DEFAULT_ROUTER = FleetConfig.model_fields["router"].default


def _listed(values: tuple[int, ...]) -> str:
    """A default list as its option takes it: ``1,4,16``."""
    return ",".join(map(str, values))


@with_flags(DeploymentFlags)
@one_line_errors
def plan(
    slo_ttft_ms: opt.SloTtft = DEFAULT_SLO_TTFT_MS,
    slo_tpot_ms: opt.SloTpot = DEFAULT_SLO_TPOT_MS,
    methods: Annotated[
        str | None,
        typer.Option(
            help="comma list of methods, each in its preset (autoregressive is always "
            "included), or 'all': every method an engine ships for the model, as sweep runs "
            "it (those left out are listed on stderr) [default: the --config file's methods, "
            "else eagle3,ngram]"
        ),
    ] = None,
    method: opt.MethodAlias = None,
    qps: Annotated[
        float | None,
        typer.Option(help="target arrival rate (requests/s); or --trace", min=0.001, max=MAX_QPS),
    ] = None,
    trace: opt.ArrivalTraceRef = None,
    rate_scale: opt.RateScale = None,
    target_qps: opt.TargetQps = None,
    window: opt.TraceWindow = None,
    tile: opt.TraceTile = None,
    attainment: Annotated[
        float | None,
        typer.Option(
            # the range is checked by the command: typer shows closed ranges only, and a max
            # alone read "the range is [-inf, 1]" (QA)
            help="--trace: share of requests that must meet both SLOs, in (0, 1] [default: 0.99]",
        ),
    ] = None,
    router: Annotated[
        str | None,
        typer.Option(help=f"--trace: the fleet's router [default: {DEFAULT_ROUTER}]"),
    ] = None,
    disaggregate: Annotated[
        bool,
        typer.Option(
            "--disaggregate",
            help="--trace: beside each method's smallest fleet, the smallest prefill/decode "
            "split that meets --attainment (prefill instances in front of decode instances of "
            "the deployment: SGLang --disaggregation-mode prefill/decode, vLLM "
            "kv_producer/kv_consumer; simspec fleet --prefill-replicas)",
        ),
    ] = False,
    kv_transfer_gbps: opt.KvTransferGbps = None,
    kv_transfer_latency_ms: opt.KvTransferLatencyMs = None,
    concurrencies: Annotated[
        str | None,
        typer.Option(
            help=opt.concurrencies_help(
                "--trace: recommend measures each method's schedule at each (closed loops of "
                "the trace window's lengths); 'none' skips the schedule rows",
                _listed(SCHEDULE_GRID),
            ),
            metavar="N,N,...|none",
        ),
    ] = None,
    schedule_grid: opt.ScheduleGridAlias = None,
    batch_sizes: opt.BatchSizesAlias = None,
    percentile: Annotated[
        int | None,
        typer.Option(
            help="SLO percentile: 50 or 99 [default: 99]; not with --trace, whose SLO is the "
            "share of requests within both (--attainment)"
        ),
    ] = None,
    gpu_hour_price: Annotated[
        float,
        typer.Option(
            help="price of one GPU-hour, for cost per million tokens: a finite number > 0"
        ),
    ] = capacity.GPU_HOUR_PRICE,
    config: opt.Config = None,
    *,
    flags: DeploymentFlags,
    duration: Annotated[
        float | None,
        typer.Option(
            help="seconds of arrivals per probe run (steady state), within a probe's "
            f"{capacity.MIN_PROBE_REQUESTS:,} to {capacity.MAX_PROBE_REQUESTS:,} requests "
            f"[default: {capacity.PLAN_DURATION_S:g}]; not with --trace, which replays its "
            "whole --window",
            min=1,
            max=MAX_DURATION_S,
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="write the plan as CSV")] = None,
    executor: opt.StudyExecutor = None,
    workers: opt.StudyWorkers = None,
) -> None:
    """Capacity: QPS per replica within the SLOs, GPUs and cost.

    For each method and plain decoding: the highest Poisson arrival rate one replica serves
    within the SLOs (doubling, then bisection), the replicas and GPUs --qps needs, and the cost
    per million output tokens at --gpu-hour-price. With --trace: the smallest fleet whose
    replay of the trace has --attainment of its requests within both SLOs.

    Example: simspec plan --qps 20 --slo-ttft-ms 2000 --slo-tpot-ms 50 --methods eagle3
    """
    if not (math.isfinite(gpu_hour_price) and gpu_hour_price > 0):
        raise InputError("--gpu-hour-price", f"must be a finite number > 0, got {gpu_hour_price}")
    check_outputs(
        (out, "--out", (".csv", ".parquet")), inputs=[(trace, "--trace"), (config, "--config")]
    )
    where = default_executor(executor, workers), workers
    grid = one_spelling(
        {"--concurrencies": concurrencies, "--schedule-grid": schedule_grid}
        | {"--batch-sizes": batch_sizes}
    )
    listed = one_spelling({"--methods": methods, "--method": method})
    flag, names_text = listed or ("--methods", None)
    names = csv_list(names_text, flag) if names_text is not None else None
    if trace is not None:
        # a replay is measured whole, against a share of requests within both SLOs: neither
        # a probe's duration nor a percentile has a meaning there, so neither is dropped quietly
        refuse_unread(
            "plan --trace replays its whole trace window: set it with --window",
            {"--duration": duration},
        )
        refuse_unread(
            "plan --trace asks a share of requests within both SLOs: set it with "
            "--attainment (0.99 for p99, 0.5 for p50)",
            {"--percentile": percentile},
        )
        from simspec.studies.fleet import FleetSlo

        FleetSlo(slo_ttft_ms, slo_tpot_ms)  # checked before the schedules are recommended
        if attainment is not None and not 0 < attainment <= 1:  # before the search
            raise InputError("--attainment", f"must be in (0, 1], got {attainment}")
        trace_flags = {"rate_scale": rate_scale, "target_qps": target_qps, "window": window}
        how = (
            DEFAULT_ROUTER if router is None else router,
            0.99 if attainment is None else attainment,
            grid or file_grid(config) or ("--concurrencies", _listed(SCHEDULE_GRID)),
        )
        if how[2][1].strip().lower() == "none":  # no closed loops: the pool would run nothing
            refuse_unread(
                "runs recommend's closed loops, and --concurrencies none asks for none (the "
                "fleets replay in this process)",
                {"--executor": executor, "--workers": workers},
            )
        link = {"kv_transfer_gbps": kv_transfer_gbps}
        link |= {"kv_transfer_latency_ms": kv_transfer_latency_ms}
        if not disaggregate:
            given = {f"--{k.replace('_', '-')}": v for k, v in link.items()}
            refuse_unread("sets the KV transfer of --disaggregate: give it too", given)
        elif flags.disaggregation_mode is not None:
            # the colocated fleets serve whole requests and the split's instances take their
            # roles from it (QA: decode made the colocated rows decode-only, no prompt run)
            raise InputError(
                "--disaggregation-mode",
                f"{flags.disaggregation_mode}, but --disaggregate sizes colocated fleets and "
                "prefill/decode splits, each instance in its role: drop it",
            )
        args = (flags, config, trace, names, flag, gpu_hour_price, out, qps)
        return _plan_trace(
            *args,
            trace_flags | {"tile": tile},
            slo_ttft_ms,
            slo_tpot_ms,
            *how,
            where,
            link if disaggregate else None,
        )
    refuse_unread(
        "sets how a trace replays: give --trace (without it, plan probes Poisson arrivals "
        "at the rates --qps needs)",
        {"--rate-scale": rate_scale, "--target-qps": target_qps, "--window": window}
        | {"--tile": tile},
    )
    refuse_unread(
        "sizes the fleet that replays --trace: give --trace (without it, the SLOs hold at "
        "--percentile, and replicas = --qps over one replica's rate)",
        {"--attainment": attainment, "--router": router}
        | {"--disaggregate": True if disaggregate else None}
        | {"--kv-transfer-gbps": kv_transfer_gbps}
        | {"--kv-transfer-latency-ms": kv_transfer_latency_ms},
    )
    if grid is not None:
        refuse_unread(
            "lists where recommend measures the schedules plan --trace plans: give --trace "
            "(without it, plan runs each method at its fixed K)",
            {grid[0]: grid[1]},
        )
    if qps is None:
        raise InputError("--qps", "give the target rate (requests/s), or --trace")
    refuse_probe_fields(config)
    slo = capacity.Slo(slo_ttft_ms, slo_tpot_ms, 99 if percentile is None else percentile)
    duration = capacity.PLAN_DURATION_S if duration is None else duration
    deploy, given = flags.planned(config, names, list(DEFAULT_PLAN_METHODS), flag)
    whole(flags, deploy)
    chosen = [MethodConfig(name="autoregressive", k=0)]
    chosen += [m for m in given if m.name != "autoregressive"]
    with (
        progress_bar("planning", total=len(chosen)) as bar,
        study_runs(*where, progress=bar) as runs,
    ):
        frame = capacity.plan(deploy, chosen, qps, slo, gpu_hour_price, duration, runs=runs)
    frame.insert(list(frame.columns).index("k") + 1, "acceptance", _acceptance(chosen))
    if out is not None:
        asked = {
            "target_qps": qps,
            "percentile": slo.percentile,
            "slo_ttft_ms": slo_ttft_ms,
            "slo_tpot_ms": slo_tpot_ms,
            "gpu_hour_price": gpu_hour_price,
        }
        write_frame(with_provenance(with_asked(frame, deploy, asked), deploy, chosen), out)
    what = (
        f"{qps:g} req/s, p{slo.percentile} TTFT <= {slo_ttft_ms:g} ms and TPOT <= "
        f"{slo_tpot_ms:g} ms ({deploy.model} on {deploy.gpu} x{deploy.tp}{_stages(deploy.pp)}, "
        f"${gpu_hour_price:g}/GPU-hour)"
    )
    print_answer(frame, (deploy.tp, deploy.pp), slo.percentile, f"Answer: capacity for {what}")
    print_frame(_console(frame).round(3), f"Detail: capacity for {what}")
    _capacity_notes(frame, qps, slo, duration)
    _extrapolation_notes(chosen, deploy)
    print_provenance(deploy, chosen)
    _left_out(flags, names, deploy.model, deploy.engine, deploy.dp, deploy.tp)


def whole(flags: DeploymentFlags, deploy: Deployment) -> None:
    """:func:`capacity.check_whole`, naming the flag where the mode came from it."""
    try:
        capacity.check_whole(deploy)
    except InputError as e:
        if flags.disaggregation_mode is None:  # the --config file's
            raise
        raise InputError("--disaggregation-mode", e.message) from None


# a replica run within this share of the highest rate its probe sustained has no headroom: the
# default 60 s probe read 12.5 req/s where 1,500 s read 10.5 (README "Measurement", Llama-3.1-8B
# on an H100), 16 % apart, so a plan within 10 % of its probe's rate is within that error
FULL_LOAD = 0.9


def _unserved_notes(frame: pd.DataFrame, percentile: int) -> None:
    """Requests the deployment can never serve (longer than the context it serves or its KV
    cache), on stderr: the methods refused for more of them than the percentile leaves out,
    and the share of the rest that a plan's rate, tokens and cost leave out (QA: a third of
    the requests refused at --max-model-len 1024 planned 5x the rate, with no word)."""
    from simspec.studies.metrics import UNSERVED_WHY

    if "limited_by" not in frame or "unserved_at_max" not in frame:  # plan --trace's table
        return
    refused = frame[frame["limited_by"] == "unfinishable"]
    if len(refused):
        err.print(
            f"note: too long: more than {100 - percentile}% of the workload's requests are "
            f"{UNSERVED_WHY}, so they never get a first token and the p{percentile} SLO fails "
            "at any rate "
            f"({', '.join(map(_label, refused.itertuples(index=False)))}): raise "
            "--max-model-len, give the GPU more room, or shorten the workload",
            highlight=False,
        )
    lost = frame[frame["meets_slo"].astype(bool) & (frame["unserved_at_max"] > 0)]
    if len(lost):
        share = float(lost["unserved_at_max"].max())
        err.print(
            f"note: {len(lost)} method(s) left up to {share:.1%} of the requests at their "
            f"highest rate unserved: {UNSERVED_WHY}; the rate counts them as arrivals, the "
            "latencies, tokens and cost are over the rest (the unserved_at_max column)",
            highlight=False,
        )


def _capacity_notes(frame: pd.DataFrame, qps: float, slo: capacity.Slo, duration: float) -> None:
    """What a plan's answer rests on, where it is thin (QA: a fleet of replicas each at the
    probed rate met the SLOs for half its requests over 40,000 requests, with no word): a
    replica run near the highest rate its probe sustained, whose p99 TTFT a longer run can find
    higher (README "Measurement": rare episodes of long requests filling the KV cache), and an
    SLO met at the point estimate but not across its 95 % interval."""
    p = slo.percentile
    _unserved_notes(frame, p)
    full, crossing = [], []
    floor_s = 0.0  # the --duration past which a probe measures more than its request floor
    for r in frame[frame["meets_slo"] == True].itertuples():  # noqa: E712 (a bool column)
        label = _label(r)
        if qps / (r.replicas * r.max_qps_per_replica) >= FULL_LOAD:
            full.append(f"{label} ({qps / r.replicas:.3g} of {r.max_qps_per_replica:.3g} req/s)")
            floor_s = max(floor_s, capacity.MIN_PROBE_REQUESTS / r.max_qps_per_replica)
        over = [
            f"{name} {high:.3g} ms"
            for name, high, bound in (
                ("TTFT", r.ttft_ms_at_max_ci_high, slo.ttft_ms),
                ("TPOT", r.tpot_ms_at_max_ci_high, slo.tpot_ms),
            )
            if high > bound
        ]
        if over:
            crossing.append(f"{label} ({', '.join(over)})")
    if full:
        err.print(
            f"note: each replica runs at {FULL_LOAD:.0%} or more of the highest rate its probe "
            f"sustained ({max(duration, floor_s):,.0f} s of arrivals: --duration {duration:g} "
            f"s, or {capacity.MIN_PROBE_REQUESTS:,} requests where they take longer): "
            f"{', '.join(full)}. Near a replica's limit rare episodes of long "
            "requests filling the KV cache raise the TTFT tail over longer runs, so the rate "
            'a replica sustains for an hour can be lower (README "Measurement"); confirm '
            "with simspec fleet --qps at this fleet over tens of thousands of requests, or "
            f"plan again with a --duration above {max(duration, floor_s):,.0f} s (a shorter "
            "one measures as much)",
            highlight=False,
        )
    if crossing:
        err.print(
            f"note: the p{p} SLO is met at the point estimate, but its 95 % interval reaches "
            f"past it at the rate found: {', '.join(crossing)}",
            highlight=False,
        )


def _left_out(
    flags: DeploymentFlags,
    names: list[str] | None,
    model: str,
    engine: str,
    dp: int = 1,
    tp: int = 1,
) -> None:
    """What ``--methods all`` left out on ``model``, and why (on stderr), as sweep says it."""
    if asks_all(names) and not flags.speculative_config:
        left_out_note(all_methods([model], flags.draft, engine, dp, tp)[1])


# what stopped the rate from going higher (capacity.Slo.missed), as the answer says it
LIMITS = {
    "ttft": "TTFT p{p}",
    "tpot": "TPOT p{p}",
    "unstable": "queue grows",
    "unfinishable": "too long",
}


def _stages(pp: int) -> str:
    """A replica's pipeline stages, where it has more than one."""
    return "" if pp == 1 else f" x {pp} stages"


def _each(tp: tuple[int, int]) -> str:
    """What one replica's GPUs are: tp, or tp x pp over pipeline stages."""
    return "tp" if tp[1] == 1 else "tp x pp"


def _label(row: Any) -> str:
    """A plan row's method as the tables name it: its K, or "sched." where a speculation
    schedule ran its bands' K (QA: a schedule read as a fixed K=3)."""
    schedule = getattr(row, "schedule", "")
    if row.method == "autoregressive" or not row.k:
        return str(row.method)
    if isinstance(schedule, str) and schedule:
        return f"{row.method} sched."
    return f"{row.method} K={row.k:g}"


def print_answer(frame: pd.DataFrame, tp: tuple[int, int], percentile: int, title: str) -> None:
    """plan's answer in a table that fits 80 columns, before the detail: per method its GPUs
    (replicas x GPUs each), cost per million output tokens, highest rate one replica serves
    within the SLOs, what limits it, and whether that rate is within the search's noise of
    another method's (:func:`~simspec.studies.capacity.within_noise`), each tie named
    below the table."""
    names = [_label(row) for row in frame.itertuples(index=False)]
    rates = [float(r) for r in frame.max_qps_per_replica]
    ties = capacity.within_noise(rates)
    table = Table(title=safe_title(title))
    headers = (
        "method",
        f"GPUs\n(replicas x {_each(tp)})",
        "$/M\ntokens",
        "max QPS\n/replica",
        "limited\nby",
    )
    for header in (*headers, "within\nnoise"):
        table.add_column(header, no_wrap=True)
    for i, row in enumerate(frame.itertuples(index=False)):
        ok = bool(row.meets_slo)
        table.add_row(
            names[i],
            f"{int(row.gpus)} = {int(row.replicas)}x{tp[0] * tp[1]}" if ok else "-",
            number(float(row.cost_per_million_tokens)) if ok else "-",
            number(rates[i]),
            LIMITS.get(row.limited_by, str(row.limited_by)).format(p=percentile),
            "yes" if ties[i] else "",
        )
    Console().print(table)
    for i, j in sorted({(min(i, j), max(i, j)) for i, js in enumerate(ties) for j in js}):
        err.print(
            f"within noise: {names[i]} and {names[j]} (max QPS {number(rates[i])} and "
            f"{number(rates[j])}) differ by less than the rate search's tolerance "
            f"({capacity.RATE_TOLERANCE:.0%}): this run does not rank them"
        )


# what kept the fleet one replica smaller from the attainment (capacity.fleet_limit)
FLEET_LIMITS = {"ttft": "TTFT", "tpot": "TPOT", "unfinishable": "too long", "": "-"}


def print_fleet_answer(frame: pd.DataFrame, tp: tuple[int, int], title: str) -> None:
    """plan --trace's answer in a table that fits 80 columns, before the detail: per method
    (a recommended schedule as "NAME sched.") its fleet's GPUs (replicas x GPUs each), the
    share of requests within both SLOs, the cost per million output tokens, and what the
    fleet one replica smaller missed."""
    table = Table(title=safe_title(title))
    headers = (
        "method",
        f"GPUs\n(replicas x {_each(tp)})",
        "SLO\nattained",
        "$/M\ntokens",
        "limited\nby",
    )
    for header in headers:
        table.add_column(header, no_wrap=True)
    for row in frame.itertuples(index=False):
        ok = bool(row.meets_slo)
        name = str(row.method).replace(" (recommended schedule)", " sched.")
        split = row.layout == "disaggregated"
        if not ok:
            gpus = (
                f"none <= {capacity.MAX_SPLIT_EACH}P+{capacity.MAX_SPLIT_EACH}D"
                if split
                else "none <= 256"
            )
        elif split:  # prefill and decode instances, each of the deployment's GPUs
            gpus = f"{int(row.gpus)} = ({int(row.prefill_replicas)}P+{int(row.replicas)}D)x{tp[0] * tp[1]}"
        else:
            gpus = f"{int(row.gpus)} = {int(row.replicas)}x{tp[0] * tp[1]}"
        table.add_row(
            name if row.method == "autoregressive" or row.schedule else f"{name} K={row.k}",
            gpus,
            share(row.slo_attainment) if ok else "-",
            number(float(row.cost_per_million_tokens)) if ok else "-",
            FLEET_LIMITS.get(row.limited_by, str(row.limited_by)),
        )
    Console().print(table)


def _plan_trace(
    flags: DeploymentFlags,
    config: Path | None,
    trace: str,
    names: list[str] | None,
    flag: str,
    gpu_hour_price: float,
    out: Path | None,
    qps: float | None,
    trace_flags: dict,
    slo_ttft_ms: float,
    slo_tpot_ms: float,
    router: str,
    attainment: float,
    grid: tuple[str, str],
    where: tuple[str, int | None] = ("serial", None),
    link: dict[str, float | None] | None = None,
) -> None:
    """plan --trace: the smallest fleet per method whose replay of the trace has
    ``attainment`` of its requests within both SLOs: plain decoding, each method at its fixed
    K, and each method under the schedule recommend picks at the ``grid`` concurrencies (its
    flag as typed, and its text; unless 'none'), whose closed loops run ``where`` (the
    executor and workers; the fleets replay in this process). With ``link`` (the KV-transfer
    flags, None where not given): each one's smallest prefill/decode split too."""
    from simspec.cli.fleet import fleet_config, fleet_deployment, tile_cut_note
    from simspec.config import ROUTERS
    from simspec.studies.fleet import FleetSlo

    if router not in ROUTERS:
        raise InputError("--router", f"choose {', '.join(ROUTERS)} (got {router!r})")
    deploy, given = fleet_deployment(
        flags, config, trace, qps, None, trace_flags, names, list(DEFAULT_PLAN_METHODS), flag
    )
    chosen = [MethodConfig(name="autoregressive", k=0)]
    chosen += [m for m in given if m.name != "autoregressive"]
    split: dict[str, float] | None = None
    if link is not None and deploy.disaggregation_mode != "null":
        # a --config file's mode, as the flag's is refused (QA: decode there made the
        # colocated rows decode-only)
        raise InputError(
            "disaggregation_mode",
            f"{deploy.disaggregation_mode} in the --config file, but --disaggregate sizes "
            "colocated fleets and prefill/decode splits, each instance in its role: drop it",
        )
    if link is None:  # before recommend's closed loops run
        whole(flags, deploy)
    if link is not None:  # the engine and the link are checked before any search
        sample = Scenario(**deploy.model_dump(), method=chosen[0])
        fleet_config(sample, 1, router, 1, link, "--disaggregate")
        split = {k: v for k, v in link.items() if v is not None}
    chosen += _recommended(deploy, chosen[1:], *grid, where)
    slo = FleetSlo(slo_ttft_ms, slo_tpot_ms)
    with progress_bar("planning", total=len(chosen)) as bar, study_runs(progress=bar) as runs:
        frame = capacity.plan_fleet(
            deploy, chosen, router, slo, attainment, gpu_hour_price, runs=runs,
            disaggregate=split,
        )  # fmt: skip
    if out is not None:
        from simspec.cli.fleet import arrivals_text

        asked = {
            "trace": arrivals_text(deploy.workload, "poisson"),  # windowed, rescaled, tiled
            "router": router,
            "attainment": attainment,
            "slo_ttft_ms": slo_ttft_ms,
            "slo_tpot_ms": slo_tpot_ms,
            "gpu_hour_price": gpu_hour_price,
        }
        if split is not None:  # the link the splits ran on, defaults included
            from simspec.config import PrefillPool
            from simspec.engine.disaggregation import kv_link_gbps

            pool = PrefillPool(replicas=1, **split)
            asked["kv_transfer_gbps"] = kv_link_gbps(pool.kv_transfer_gbps, deploy.gpu)[0]
            asked["kv_transfer_latency_ms"] = pool.kv_transfer_latency_ms
        rows = [m for m in chosen for _ in range(1 if split is None else 2)]  # a row per layout
        write_frame(with_provenance(with_asked(frame, deploy, asked), deploy, rows), out)
    what = (
        f"replaying {trace} with {attainment:.1%} of requests within TTFT <= {slo_ttft_ms:g} "
        f"ms and TPOT <= {slo_tpot_ms:g} ms ({deploy.model} on {deploy.gpu} x{deploy.tp}{_stages(deploy.pp)} per "
        f"replica, {router}, ${gpu_hour_price:g}/GPU-hour)"
    )
    print_fleet_answer(frame, (deploy.tp, deploy.pp), f"Answer: the smallest fleet {what}")
    shown = _console(frame)
    # never 1 for less than all, and down to the 0.1 % the answer shows (QA: 99.7 % above,
    # 0.998 here, for 0.997807)
    attained = shown["slo_attainment"].map(lambda v: floor_share(v, 3))
    print_frame(
        shown.round(3).assign(slo_attainment=attained), f"Detail: the smallest fleet {what}"
    )
    _extrapolation_notes(chosen, deploy)
    tile_cut_note(deploy.workload)
    print_provenance(deploy, chosen)
    _left_out(flags, names, deploy.model, deploy.engine, deploy.dp, deploy.tp)
    err.print(
        "How: replicas doubled from 1 until a fleet meets the attainment, then bisection on "
        "the integers; each probe replays the whole trace window on the fleet. Bisection "
        "takes attainment to grow with replicas, which a replay holds only to a fraction of a "
        "percent (the router's draws): a fleet a replica or two smaller may meet it too. "
        "limited by: "
        "what the fleet one replica smaller missed for more requests (TTFT, TPOT, or "
        "requests too long for a replica's KV cache); '-': one replica meets it; 'too long' "
        "beside none: more requests than the attainment allows can never finish on a replica, "
        "which more replicas do not change, so the search stopped at one. A "
        "recommended schedule: recommend's bands from closed loops at --concurrencies with "
        "lognormal lengths at the trace window's mean and CV. goodput: requests within "
        "both SLOs per second from the first arrival to the last departure (vLLM's benchmark "
        "definition, the drain included); cost: the fleet's GPUs for the span the arrivals "
        "cover (what serving the stream is provisioned for) over the output tokens made."
    )
    if link is not None:
        err.print(
            "How, disaggregated (P prefill + D decode instances, each of the deployment's "
            "GPUs; the KV link as fleet --prefill-replicas sets it): equal pools doubled from "
            "1 each until a split meets the attainment, then the decode pool bisected with the "
            "prefill pool at that size to spare, then the prefill pool bisected with those "
            "decode instances, then a decode instance more wherever it spares two prefill "
            "instances. The answer is a local minimum: one instance fewer of either role "
            "misses, and one decode instance more spares at most one prefill instance; splits "
            "further along that trade are not searched. limited by: what one prefill instance "
            "fewer missed, or, with one, the split with one decode instance fewer and the most "
            "prefill instances that missed. The KV moves as the engine moves it (fleet "
            "--prefill-replicas; README: Prefill/decode disaggregation)."
        )


def _recommended(
    deploy: Deployment,
    methods: list[MethodConfig],
    grid_flag: str,
    grid_text: str,
    where: tuple[str, int | None] = ("serial", None),
) -> list[MethodConfig]:
    """Each speculative method under the schedule recommend picks for the trace's lengths,
    its runs on ``where`` (executor, workers)."""
    from simspec.catalog.hardware import load_engine, load_gpu
    from simspec.studies.schedule.trace import recommended

    if grid_text.strip().lower() == "none" or not methods:
        return []
    grid = tuple(sorted(set(csv_list(grid_text, grid_flag, int))))
    if grid[0] < 1:
        raise InputError(grid_flag, "concurrencies must be >= 1")
    engine = load_engine(deploy.engine)
    out = []
    with (
        progress_bar("recommending schedules", total=len(methods)) as bar,
        study_runs(*where) as runs,
    ):
        for m in methods:
            if any(getattr(m, f) is not None for f in SCHEDULE_FIELDS):
                continue  # the method states its own schedule: it is planned as given
            max_batch = engine.max_seqs_for(
                m.name, deploy.scheduler.max_num_seqs, load_gpu(deploy.gpu)
            )
            within = grid_within(grid, max_batch, deploy.engine, m.name, grid_flag)
            out.append(recommended(deploy, m, max_batch, within, runs=runs))
            bar.step(m.name)
    return out


@with_flags(DeploymentFlags)
@one_line_errors
def recommend(
    method: Annotated[
        str | None,
        typer.Option(
            help="speculative method to schedule, in its preset [default: the --config "
            "file's method, else eagle3]"
        ),
    ] = None,
    methods: opt.MethodsAlias = None,
    k_max: Annotated[
        int | None,
        typer.Option(help=f"largest K to consider [default: {K_MAX}]", min=1, max=16),
    ] = None,
    tree_budgets: Annotated[
        str | None,
        typer.Option(
            help=f"tree methods: node budgets to choose between [default: {_listed(TREE_BUDGETS)}]"
        ),
    ] = None,
    concurrencies: Annotated[
        str | None,
        typer.Option(
            help=opt.concurrencies_help(
                "plain decoding and every setting run closed-loop at each",
                _listed(DEFAULT_CONCURRENCIES),
            ),
            metavar="N,N,...",
        ),
    ] = None,
    batch_sizes: opt.BatchSizesAlias = None,
    schedule_grid: opt.ScheduleGridAlias = None,
    config: opt.Config = None,
    *,
    flags: DeploymentFlags,
    out: Annotated[Path | None, typer.Option(help="write the per-concurrency table (CSV)")] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="write the --speculative-config JSON")
    ] = None,
    executor: opt.StudyExecutor = None,
    workers: opt.StudyWorkers = None,
    precision_target: Annotated[
        float | None,
        typer.Option(
            help="measure each setting's speedup (and each bisection probe's comparison) "
            "until its 95 % interval is within this share either side, from "
            f"{window.FLOOR_TURNOVERS} turnovers (at least {window.floor_requests(1)} requests) "
            f"up to {DEFAULT_TURNOVERS} (at least {window.cap_requests(1):,}) "
            f"({MIN_PRECISION_TARGET:g} to "
            f"{MAX_PRECISION_TARGET:g}; 0: the fixed "
            f"{DEFAULT_TURNOVERS} turnovers, at least {DEFAULT_MEASURED} requests); on the command line it replaces a --config "
            "file's workload.requests and turnovers [default: "
            f"{DEFAULT_PRECISION_TARGET:g}, ±{DEFAULT_PRECISION_TARGET:.0%}; a --config file "
            "that states workload.requests or turnovers: that fixed length]",
            metavar="SHARE",
        ),
    ] = None,
) -> None:
    """Best K per concurrency, as a vLLM --speculative-config.

    The schedule is vLLM's Dynamic SD form (num_speculative_tokens_per_batch_size), with K = 0
    where speculation should be off; tree methods get a tree budget per band instead. A band
    ends where the next band's setting becomes faster, found by bisection between the grid
    points.

    Example: simspec recommend --method eagle3 --k-max 5 --json speculative_config.json
    """
    from simspec.catalog.hardware import load_engine, load_gpu
    from simspec.studies.schedule.bands import outsiders, recommend_bands, resident_off
    from simspec.studies.schedule.export import speculative_config, speculative_config_json

    check_outputs((out, "--out", (".csv", ".parquet")), (json_out, "--json", (".json",)))
    where = default_executor(executor, workers)
    spelled = one_spelling(
        {"--concurrencies": concurrencies, "--batch-sizes": batch_sizes}
        | {"--schedule-grid": schedule_grid}
    )
    grid_flag, grid_text = (
        spelled or file_grid(config) or ("--concurrencies", _listed(DEFAULT_CONCURRENCIES))
    )
    grid = tuple(sorted(set(csv_list(grid_text, grid_flag, int))))
    if grid[0] < 1:
        raise InputError(
            grid_flag, f"each concurrency must be in [1, {MAX_CONCURRENCY:,}] (got {grid[0]})"
        )
    why = "recommend schedules one method: run it once per method"
    name = one_method({"--method": method, "--methods": methods}, why)
    _refuse_open_loop(config)
    deploy, base = _scheduled_method(flags, config, name, "--methods" if methods else "--method")
    is_tree = base.tree not in (None, "chain")
    if not is_tree and (unread := k_not_read(base.model_dump(exclude_none=True))) is not None:
        # QA: lookahead's K columns were one run three times, "best K 1" the first of a tie
        raise InputError(
            "--methods" if methods else "--method",
            f"recommend chooses K, which {base.name} does not read: {unread}",
        )
    if flags.k is not None and not is_tree:
        raise InputError("--k", "recommend tries every K from 1 to --k-max: give --k-max")
    # the --speculative-config as given, read once: its K (not read here) and draft weights
    given = read_speculative_config(flags.speculative_config) if flags.speculative_config else {}
    if (
        not is_tree and base.k and "num_speculative_tokens" in given
    ):  # QA: its K was dropped without a word where --k is refused
        err.print(
            "note: --speculative-config's num_speculative_tokens is not read: recommend tries "
            f"every K from 1 to --k-max ({K_MAX if k_max is None else k_max}) and prints the "
            "best per band",
            highlight=False,
        )
    _check_read(base, is_tree, k_max, tree_budgets, json_out)
    engine = load_engine(deploy.engine)
    # Dynamic SD's num_speculative_tokens_per_batch_size is vLLM V1's: V0 (vllm-v0) reads a
    # disable_by_batch_size alone (QA: --json wrote a V1 schedule for it)
    vllm = engine.family == "vllm" and not engine.disables_by_batch_size
    # a layout the engine cannot run at all is refused as the other commands refuse it, before
    # Dynamic SD's dp rule (QA: a dense model at dp 2 was told to compare fixed K, and then
    # refused for the layout)
    check_dp_attention(deploy.dp, engine.id, engine.dp_attention, load_model(deploy.model))
    if vllm and deploy.dp > 1:
        raise InputError("--dp", DYNAMIC_SD_UNDER_DP.format(dp=deploy.dp))
    if not vllm:
        refuse_unread(
            f"writes vLLM V1's --speculative-config (num_speculative_tokens_per_batch_size), "
            f"and engine {deploy.engine} does not read it: the schedule printed is simspec's "
            "k_schedule",
            {"--json": json_out},
        )
    if is_tree:
        budgets = _listed(TREE_BUDGETS) if tree_budgets is None else tree_budgets
        ks = sorted(set(csv_list(budgets, "--tree-budgets", int)))
        if ks[0] < base.k:
            raise InputError("--tree-budgets", f"each budget must be >= the depth {base.k}")
        topk = stated_topk(base.tree_topk, ks[-1], base.k)
        cap = tree_capacity(topk, base.k, base.tree == "dynamic")
        if ks[-1] > cap:
            raise InputError(
                "--tree-budgets",
                f"each budget must be <= {cap}, what a depth-{base.k} {base.tree} tree with "
                f"top-{topk} expansion drafts",
            )
    else:
        ks = list(range(1, (K_MAX if k_max is None else k_max) + 1))
    knob = "tree_nodes" if is_tree else "k"
    max_batch = load_engine(deploy.engine).max_seqs_for(
        base.name, deploy.scheduler.max_num_seqs, load_gpu(deploy.gpu)
    )
    grid = grid_within(grid, max_batch, deploy.engine, base.name, grid_flag)
    file_target = read_config(config).get("precision_target") if config is not None else None
    target = _recommend_target(precision_target, deploy, file_target)
    with (
        progress_bar("simulating", total=len(grid)) as bar,
        study_runs(where, workers, progress=bar) as runs,
    ):
        rec = recommend_bands(
            deploy, base, ks, grid, max_batch, knob, runs=runs, precision_target=target
        )
        bands = rec.bands
        off = [] if is_tree else resident_off(deploy, base, bands, list(grid), runs=runs)
    # a vLLM --speculative-config only for a vLLM engine (QA: hf and trtllm printed one, with
    # TRT-LLM's batch limit in its last band)
    weights = given.get("model") if isinstance(given.get("model"), str) else None
    spec_cfg = None if is_tree or not vllm else speculative_config(base, bands, weights)
    # every band off: no config to serve with (QA: --json wrote one that loads a draft and
    # never runs it, while the console said to serve without one)
    all_off = all(setting == 0 for _, _, setting in bands)
    if out is not None:
        # the method, seed and lengths it answers for (QA: a draft_model and an eagle3 CSV
        # were told apart by nothing)
        asked = {
            "method": base.name,
            "seed": deploy.seed,
            "lengths_from": deploy.workload.lengths_from or "",
        }
        write_frame(with_provenance(with_asked(rec.table, deploy, asked), deploy, [base]), out)
    if json_out is not None and spec_cfg is not None and not all_off:
        write_text(json_out, speculative_config_json(spec_cfg) + "\n", "--json")
    what = "tree budget" if is_tree else "K"
    print_frame(
        _console_table(rec.table),
        f"{base.name} on {deploy.model}, {deploy.gpu} x{deploy.tp}{_stages(deploy.pp)}: "
        f"speedup over plain decoding by {what} and concurrency (best: ± half its 95 % "
        "interval)",
    )
    print_frame(
        rec.band_table.round(2),
        f"Bands: the {what} to run per concurrency, and how far it is from the fastest "
        "setting at each edge (%)",
    )
    print_provenance(deploy, [base])
    _recommend_notes(deploy, base, ks, bands, is_tree)
    if off and not all(setting == 0 for _, _, setting in bands):
        ran = ", ".join(f"{s:.3f}x at {c}" for c, s in off)
        err.print(
            f"note: a K=0 band keeps {base.name}'s draft loaded (vLLM loads the drafter "
            f"whatever the band; its weights and KV share the GPU): the schedule as exported "
            f"ran {ran} of plain decoding without a draft, where the table reads K=0 as "
            "plain decoding (1x, loss 0); at such loads a server without the draft is the "
            "faster one",
            highlight=False,
        )
    has = "unserved_share" in rec.table
    unserved = rec.table[rec.table["unserved_share"] > 0] if has else rec.table.iloc[:0]
    if len(unserved):  # as sweep says it (QA: recommend said nothing)
        from simspec.studies.metrics import unserved_text

        share = float(unserved["unserved_share"].max())
        err.print(f"note: {unserved_text(len(unserved), share, 'concurrency(ies)')}")
    err.print(
        f"How: every {what} and plain decoding ran closed-loop at each grid concurrency on the "
        "same workload and seed"
        + (
            f", each {what}'s speedup measured to ±{target * 100:g} % (--precision-target; every "
            f"{what} of a concurrency at one length, from {window.FLOOR_TURNOVERS} turnovers)"
            if target
            else f", at a fixed length (the --config file's, else {DEFAULT_TURNOVERS} turnovers)"
        )
        + "; where the best one changes between two grid points, "
        "bisection on the concurrency (both settings run at each probe) puts the band edge "
        "where the next one becomes faster, and every setting runs at both sides of that edge "
        "(point = crossover); equal neighbours merge; the first band starts at 1 and the last "
        "runs to max_num_seqs (loss nan: nothing ran there). Near an edge the two settings are "
        "within a run's interval of each other (README Measurement): either serves "
        "there, and the edge's exact place is not resolved."
    )
    for c, fastest, scheduled, loss in outsiders(rec.table, bands):
        err.print(
            f"warning: at concurrency {c} (a band edge) {what} {fastest} is the fastest and the "
            f"band's {what} {scheduled} is {loss:.1f} % slower: a setting that wins between "
            "two grid points, where the bisection compared the grid points' winners only, has "
            "no band; add concurrencies around it (--concurrencies) to give it one",
            highlight=False,
        )
    if is_tree:
        print(f"tree_schedule: {bands}")
        err.print(
            "a tree budget per band (0 = off): simspec's tree_schedule, for "
            "`simspec policy`; vLLM's Dynamic SD schedules K, not tree budgets"
        )
        return
    print(f"num_speculative_tokens_per_batch_size: {bands}")
    if all_off:
        # a config that loads a draft only to never run it (QA): plain decoding is the answer
        unwritten = f" (so {shown(json_out)} was not written)" if json_out is not None else ""
        err.print(
            f"speculation with {base.name} is slower than plain decoding at every concurrency "
            f"measured: serve without a --speculative-config{unwritten}"
        )
        return
    if not vllm:
        err.print(
            f"engine {deploy.engine} does not read vLLM V1's Dynamic SD schedule: the schedule "
            "above is simspec's k_schedule, for `simspec policy`"
        )
    elif spec_cfg is None:
        err.print(f"vLLM has no {base.name} method: the schedule above is simspec's k_schedule")
    else:
        print(f"--speculative-config '{speculative_config_json(spec_cfg)}'")
        if str(spec_cfg.get("model", "")).startswith("<"):  # QA: pasted as written, vLLM fails
            where = f" (and in {shown(json_out)})" if json_out is not None else ""
            err.print(
                f"note: replace {spec_cfg['model']}{where} with the Hugging Face id or path of "
                f"your {base.name} draft weights: vLLM loads the draft from there"
            )


def with_asked(frame: pd.DataFrame, deploy: Deployment, asked: dict[str, Any]) -> pd.DataFrame:
    """``frame`` with the deployment and what was asked of it as columns, so a CSV read on its
    own says what it answers (QA: a p50 and a p99 plan wrote the same headers, and no file
    carried the target rate, the SLOs, the price, the model or the GPU)."""
    return frame.assign(**deployment_columns(deploy), **asked)


def _recommend_notes(
    deploy: Deployment, base: MethodConfig, ks: list[int], bands: list[list[int]], is_tree: bool
) -> None:
    """What a recommendation rests on that its table does not show (on stderr): acceptance
    extrapolated past the deepest draft measured, the shape the engine picks itself, and a
    best setting at the largest one tried (QA: each was silent)."""
    # the async-scheduling, unshipped-method and one-sequence notes are print_provenance's
    # (tables.run_notes), as sweep says them
    tried = [base.model_copy(update={"k": k}) for k in ks] if not is_tree else [base]
    _extrapolation_notes(tried[-1:], deploy)
    if any(setting == ks[-1] for _, _, setting in bands):
        knob = "--tree-budgets" if is_tree else "--k-max"
        err.print(
            f"note: the best {'budget' if is_tree else 'K'} in some band is the largest tried "
            f"({ks[-1]}): a larger one may be faster still; raise {knob}",
            highlight=False,
        )


DEFAULT_PLAN_METHODS = ("eagle3", "ngram")


def _check_read(
    base: MethodConfig,
    is_tree: bool,
    k_max: int | None,
    tree_budgets: str | None,
    json_out: Path | None,
) -> None:
    """A chain method reads --k-max, a tree method --tree-budgets; --json is a vLLM
    --speculative-config, which schedules a chain method vLLM has. Any other is refused."""
    from simspec.catalog.vllm import PARALLEL, TO_VLLM

    if is_tree:
        refuse_unread(
            f"{base.name} drafts a tree here: recommend chooses its node budget from "
            "--tree-budgets",
            {"--k-max": k_max},
        )
        refuse_unread(
            "is a vLLM --speculative-config, which schedules K, not tree budgets: the "
            "tree_schedule printed is simspec's (for simspec policy)",
            {"--json": json_out},
        )
        return
    refuse_unread(
        f"are for a method that drafts a tree; {base.name} drafts a chain, whose K recommend "
        "chooses up to --k-max",
        {"--tree-budgets": tree_budgets},
    )
    # a one-forward drafter exports as its base method with parallel_drafting (export.
    # speculative_config; QA: p_eagle's --json was refused beside the config it printed)
    parallel_base = next((b for b, p in PARALLEL.items() if p == base.name), None)
    if base.name not in TO_VLLM and parallel_base not in TO_VLLM:
        refuse_unread(
            f"vLLM has no {base.name} method, so no --speculative-config to write: the "
            "schedule printed is simspec's k_schedule",
            {"--json": json_out},
        )


# the workload fields plan's probes set themselves: Poisson arrivals at the rate it bisects
# (capacity._probe), as many requests as the rate and --duration ask
PROBE_FIELDS = ("rate", "rate_schedule", "requests", "concurrency")


def _refuse_open_loop(config: Path | None) -> None:
    """recommend runs closed loops at its grid's concurrencies: a --config workload's
    arrivals (an open loop, a rate, a concurrency of its own) would be dropped, so they are an
    error naming the field (QA: a Poisson workload ran as closed loops without a word)."""
    if config is None:
        return
    field = _file_workload_field(config, ("rate", "rate_schedule", "concurrency"), "closed")
    if field is not None:
        raise InputError(
            f"workload.{field}",
            f"the --config file {shown(str(config))} sets it, and recommend runs closed loops "
            "at its grid's concurrencies (--concurrencies): drop it from the file",
        )


def _file_workload_field(config: Path, fields: tuple[str, ...], arrival: str) -> str | None:
    """The first workload field of a --config file that a study sets itself: ``arrival`` when
    the file's is another, else the first of ``fields`` it sets (None: none)."""
    workload = read_config(config).get("workload")
    if not isinstance(workload, dict):
        return None
    if workload.get("arrival", arrival) != arrival:
        return "arrival"
    return next((f for f in fields if workload.get(f) is not None), None)


def refuse_probe_fields(config: Path | None) -> None:
    """A --config file's field that plan without --trace would replace in every probe (its
    workload's arrivals and request count, a sweep's batch sizes) is an error naming it,
    never dropped."""
    if config is None:
        return
    data = read_config(config)
    where = f"the --config file {shown(str(config))}"
    if data.get("batch_sizes") is not None:
        raise InputError(
            "batch_sizes",
            f"{where} lists batch sizes, which plan without --trace does not run (it probes "
            "Poisson arrivals at each method's fixed K): drop them, or give --trace, whose "
            "schedules recommend measures at them",
        )
    field = _file_workload_field(config, PROBE_FIELDS, "poisson")
    if field is not None:
        raise InputError(
            f"workload.{field}",
            f"{where} sets it, and plan sets it in every probe (Poisson arrivals at the rates "
            "--qps needs, --duration's worth of requests): drop it from the file",
        )
    if _file_workload_field(config, ("turnovers",), "poisson") is not None:
        # a closed loop's length, which no Poisson probe reads (QA: dropped without a word)
        raise InputError(
            "workload.turnovers",
            f"{where} sets it, and plan's probes are Poisson arrivals, whose length is "
            "--duration's worth of requests: drop it from the file",
        )


def file_grid(config: Path | None) -> tuple[str, str] | None:
    """A --config file's ``batch_sizes`` as the concurrencies recommend measures at (what a
    sweep's CSV calls each batch_size), as (its field, the list); None where it has none."""
    sizes = read_config(config).get("batch_sizes") if config is not None else None
    if sizes is None:
        return None
    if not isinstance(sizes, list) or not sizes:
        raise InputError("batch_sizes", "must be a non-empty list of whole numbers >= 1")
    return "batch_sizes", ",".join(str(v) for v in sizes)


def _console_table(table: pd.DataFrame) -> pd.DataFrame:
    """recommend's table as the console shows it: the best speedup with half its interval in
    one cell (``1.63x ±0.01``, as a sweep's), the interval's two columns left to the CSV."""
    half = (table.best_speedup_ci_high - table.best_speedup_ci_low) / 2
    best = [with_interval(v, h) for v, h in zip(table.best_speedup, half, strict=True)]
    hidden = ["best_speedup_ci_low", "best_speedup_ci_high", "unserved_share"]  # a note's
    shown = table.drop(columns=[c for c in hidden if c in table]).round(3)
    return shown.assign(best_speedup=best)


def _recommend_target(given: float | None, deploy: Deployment, in_file: Any = None) -> float:
    """recommend's precision target: ``--precision-target`` (0: the fixed length), else the
    --config file's ``precision_target`` (a sweep's field), else 0 where the file states
    workload.requests or workload.turnovers (that fixed length), else the default. On the
    command line the flag replaces the file's fixed length, as in a sweep
    (sweep_flags.run_length); in the file the two exclude each other by the sweep's rule
    (:func:`~simspec.studies.sweep.written_length`)."""
    written, fixed = written_length(deploy.workload)
    if given is None and in_file is None:
        return 0.0 if written else DEFAULT_PRECISION_TARGET
    where, value = (
        ("--precision-target", given) if given is not None else ("precision_target", in_file)
    )
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(where, f"must be a number (got {value!r})")
    try:
        target = check_precision_target(float(value))
    except ValueError as e:
        raise InputError(where, f"{e} (got {value:g})") from None
    if given is None and fixed and target:
        raise InputError("precision_target", FIXED_AND_TARGET)
    return target


def _scheduled_method(
    flags: DeploymentFlags, config: Path | None, method: str | None, flag: str = "--method"
) -> tuple[Deployment, MethodConfig]:
    """The deployment and the one speculative method recommend schedules: --method (in its
    preset), else --speculative-config, else the file's, else EAGLE-3; the method flags on top."""
    names = [method] if method is not None else None
    deploy, chosen = flags.planned(config, names, ["eagle3"], flag, ("precision_target",))
    drafting = [m for m in chosen if m.name != "autoregressive"]
    if len(drafting) != 1:
        raise InputError(
            flag,
            "choose one speculative method"
            + (f" (the file has {len(drafting)})" if names is None and drafting else ""),
        )
    base = drafting[0]
    for field in SCHEDULE_FIELDS:
        if getattr(base, field) is not None:
            where = flags.speculative_config and "--speculative-config"
            # named as the user wrote it (QA: a vLLM config's bands read as k_schedule)
            key = VLLM_KEYS.get(field, field) if where else field
            raise InputError(
                where or f"methods.{base.name}.{field}",
                f"states {key}, which recommend chooses: drop it",
            )
    return deploy, base


def _acceptance(methods: list[MethodConfig]) -> list[str]:
    """Each method's acceptance in a few characters, as the sweep's CSV writes it."""
    from simspec.studies.sweep import describe_acceptance

    return [describe_acceptance(m) for m in methods]


def _console(frame: pd.DataFrame) -> pd.DataFrame:
    """The table as printed: the CSV's n-gram sizes stay in the CSV (the console keeps its
    columns), and so do an empty schedule column (no method ran one) and plan --trace's
    layout columns where every fleet is colocated (no --disaggregate)."""
    shown = frame.drop(columns=["prompt_lookup_min", "prompt_lookup_max"])
    if "unserved_at_max" in shown:  # a note's (_unserved_notes)
        shown = shown.drop(columns=["unserved_at_max"])
    if "schedule" in shown and not shown["schedule"].fillna("").astype(str).str.len().any():
        shown = shown.drop(columns=["schedule"])
    if "layout" in shown and (shown["layout"] == "colocated").all():
        shown = shown.drop(columns=["layout", "prefill_replicas"])
    return shown


def grid_within(
    grid: tuple[int, ...], max_batch: int, engine: str, method: str, flag: str = "--concurrencies"
) -> tuple[int, ...]:
    """The grid's concurrencies the engine can run at once (at most ``max_batch`` requests:
    SGLang runs 48 under speculative decoding unless --max-num-seqs says more), topped by
    ``max_batch`` where the grid went past it, said on stderr: a band past it would never run.
    ``flag``: what gave the grid, named by the error of one past MAX_CONCURRENCY."""
    if grid[-1] > MAX_CONCURRENCY:  # refused as a workload's concurrency past it is
        raise InputError(flag, f"{grid[-1]} is more than {MAX_CONCURRENCY:,} requests at once")
    if grid[-1] <= max_batch:
        return grid
    err.print(
        f"note: engine {engine} runs at most {max_batch} requests at once under {method} "
        f"(--max-num-seqs raises it): the schedule's grid stops there, not at {grid[-1]}",
        highlight=False,
    )
    return tuple(sorted({c for c in grid if c <= max_batch} | {max_batch}))


def _extrapolation_notes(methods: list[MethodConfig], deploy: Deployment) -> None:
    """A method drafting deeper than its acceptance sources measured, or in the shape its
    engine picks itself, says so (on stderr)."""
    from simspec.studies.sweep import extrapolation_notes, picked_shape_notes

    for line in extrapolation_notes(methods):
        err.print(line, highlight=False)
    for line in picked_shape_notes(deploy.model, deploy.engine, methods):
        err.print(line, highlight=False)
