"""A fleet's run, sharded where that is exact, and what it measured: per-request results
against the SLOs, a summary with intervals, and time series per window.

Sharding: behind a state-free router (``round_robin``, ``random``) the replicas are independent
given their arrivals (:func:`simspec.engine.fleet.assignments`), so the fleet splits into
shards of replicas, each run in its own process (or on Ray) by the study's
:class:`~simspec.studies.runs.Runs`, and the merged tables are the serial run's, row for row. A
state-aware router (``least_outstanding``, ``least_kv``, ``power_of_two``) reads every
replica's state at each arrival; a shard would route on a part of that state (in effect, N/S
independent sub-fleets each behind its own router fed by a fixed split of the arrivals: an
approximation that balances worse than the real router, and by how much depends on the
burstiness), so such fleets always run in one process.

Measurement: a replayed trace (or a fleet's Poisson run) is a transient study, measured whole
(README "Measurement"): every request of the run counts, from an empty fleet to the last
departure, except those arriving in a stated warm-up span (``warmup_s``). A run where no
request can finish (each longer than the model's context or a replica's KV cache) is refused,
as a single replica's is.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from simspec.catalog.models import load_model
from simspec.config import STATE_FREE_ROUTERS, FleetConfig, Scenario
from simspec.engine import intervals as ci
from simspec.engine.build import max_model_len, no_pd, setup_replica
from simspec.engine.disaggregation import simulate_disaggregated
from simspec.engine.fleet import (
    DEFAULT_WINDOW_S,
    FleetRun,
    check_span,
    fleet_requests,
    simulate_fleet,
    span_source,
)
from simspec.errors import InputError, ScenarioError
from simspec.studies.runs import SERIAL, Runs
from simspec.studies.runs.job import refuse_missing_draft_layers

# a disaggregated fleet's per-request columns beside REQUEST_COLUMNS: the prefill instance
# that ran the prompt, when its first token was sampled there, when its KV reached the decode
# instance (``replica``), whose admission is the client's first token
DISAGGREGATED_COLUMNS = ("prefill_replica", "prefill_done_s", "kv_landed_s")
REQUEST_COLUMNS = [
    "request",
    "replica",
    "arrival_s",
    "first_token_s",
    "finish_s",
    "prompt_tokens",
    "output_tokens",
    "ttft_ms",
    "tpot_ms",
    "e2e_s",
    "unfinishable",
    "met_slo",
]


# the least SLO each takes (ms): a TTFT under a millisecond, or a TPOT under a tenth of one, is
# below any step a GPU serving an LLM takes (the explorer's widgets start at the same values)
SLO_MIN_MS = {"ttft_ms": 1.0, "tpot_ms": 0.1}


@dataclass(frozen=True)
class FleetSlo:
    """Per-request latency targets: a request meets the SLO when its TTFT and its TPOT are
    both within them (DistServe, Zhong et al., OSDI 2024, §2: SLO attainment)."""

    ttft_ms: float
    tpot_ms: float

    def __post_init__(self) -> None:
        for name, least in SLO_MIN_MS.items():
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= least):
                raise InputError(
                    f"--slo-{name.replace('_', '-')}",
                    f"must be a finite number of ms >= {least:g}, got {value:g}",
                )


def disaggregated_fleet(
    scenario: Scenario, decode: int, router: str, prefill: int, link: dict[str, float]
) -> FleetConfig:
    """``prefill`` prefill instances of ``scenario``'s deployment in front of ``decode`` decode
    instances of it, behind ``router``, ``link`` the PrefillPool's KV-transfer fields given. An
    engine without disaggregated serving is refused by ``prefill_replicas``, naming those
    that run it."""
    from simspec.catalog.hardware import load_engine

    engine = load_engine(scenario.engine)
    if not engine.flag("pd_disaggregation"):
        raise InputError("prefill_replicas", no_pd(engine) + ": vllm, sglang and trtllm do")
    decoding = scenario.model_copy(update={"disaggregation_mode": "decode"})
    pool = {"replicas": prefill, **link}
    return FleetConfig.model_validate(
        {"replicas": [decoding] * decode, "router": router, "prefill": pool}
    )


def shardable(cfg: FleetConfig) -> bool:
    """Whether the replicas can run in separate processes: independent given their arrivals
    (a state-free router), and no prefill instance hands requests between them."""
    return cfg.router in STATE_FREE_ROUTERS and len(cfg.replicas) > 1 and cfg.prefill is None


def run_fleet(
    cfg: FleetConfig, *, runs: Runs = SERIAL, window_s: float = DEFAULT_WINDOW_S
) -> FleetRun:
    """The fleet's run: in this process (telling ``runs`` the share simulated, out of 100),
    or (a pool or Ray executor, a state-free router) in ``runs.workers`` shards of contiguous
    replicas whose merged tables equal it."""
    if not (math.isfinite(window_s) and window_s > 0):
        raise InputError("--window-s", f"must be a finite number of seconds > 0, got {window_s}")
    # a drafter the model does not have, refused as every other study refuses it (QA: fleet
    # ran MTP on kimi-k2 and on a dense llama-3.1-8b, rc 0 and a made-up speedup)
    for sc in {(r.method.name, r.model): r for r in cfg.replicas}.values():
        refuse_missing_draft_layers(sc)
    shards = min(runs.workers or 1, len(cfg.replicas))
    if runs.executor == "serial" or not shardable(cfg) or shards < 2:
        told = runs.progress is not None
        progress = (lambda share: runs.at(round(100 * share), 100)) if told else None
        simulated = simulate_fleet if cfg.prefill is None else simulate_disaggregated
        run = simulated(cfg, window_s=window_s, progress=progress)
    else:
        check_span(cfg, fleet_requests(cfg)[1], window_s)  # once, before any shard starts
        parts = np.array_split(np.arange(len(cfg.replicas)), shards)
        fleet_json = cfg.model_dump_json()
        payloads = [
            json.dumps({"fleet": fleet_json, "only": p.tolist(), "window_s": window_s})
            for p in parts
        ]
        run = merge(replace(runs, workers=shards).map(run_shard, payloads))
    _check_finishable(cfg, run)
    return run


def _check_finishable(cfg: FleetConfig, run: FleetRun) -> None:
    """A run where no request could finish has no latency to report: refused, saying why
    (how many requests are past the shortest context of the replicas' models; the rest
    need more KV cache than a replica holds)."""
    q = run.requests
    if not len(q) or not q["unfinishable"].all():
        return
    # the context each replica's engine was started with (--max-model-len, else the model's:
    # QA, a --max-model-len below every request was blamed on the KV cache)
    context, replica = min(
        ((max_model_len(r, load_model(r.model)), r) for r in cfg.replicas),
        key=lambda pair: pair[0],
    )
    longer = int((q["prompt_tokens"] + q["requested_output_tokens"] > context).sum())
    why = []
    if longer:
        given = replica.scheduler.max_model_len is not None
        whose = "the max_model_len of" if given else f"{replica.model}'s context,"
        why.append(
            f"{longer:,} of {len(q):,} are longer (prompt + output) than {whose} {context:,} tokens"
        )
    # an engine that admits prompts whole never admits one past its token budget (build.
    # past_budget; QA: TensorRT-LLM's 9,000-token prompts were blamed on the KV cache)
    setups = [setup_replica(r) for r in cfg.replicas]
    whole = [s.max_tokens for s in setups if not s.chunk_prompts]
    fits = q["prompt_tokens"] + q["requested_output_tokens"] <= context
    past = int((fits & (q["prompt_tokens"] > min(whole))).sum()) if whole else 0
    if past:
        why.append(
            f"{past:,} of {len(q):,} have prompts longer than the token budget "
            f"({min(whole):,}), which this engine admits whole: raise --max-num-batched-tokens"
        )
    if len(q) > longer + past:
        blocks = min(s.memory.num_blocks for s in run.replicas)
        why.append(
            f"{len(q) - longer - past:,} of {len(q):,} need more KV cache than a replica holds "
            f"({blocks:,} blocks): shorten them, or raise tp"
        )
    raise ScenarioError(
        f"workload: no request of the run can finish: {'; '.join(why)}"
        + ("" if len(q) > longer + past or past else ": shorten the requests")
    )


def last_arrival_s(cfg: FleetConfig) -> float:
    """The second the run's last request arrives (the gaps added one by one, as the fleet's
    arrival process adds them)."""
    gaps = fleet_requests(cfg)[1]
    return float(np.cumsum(gaps)[-1]) if len(gaps) else 0.0


def check_warmup(cfg: FleetConfig, warmup_s: float) -> None:
    """Refuse, before simulating, a warm-up that leaves no request to measure: every
    statistic would be over none."""
    last = last_arrival_s(cfg)
    if warmup_s > last:
        raise InputError("--warmup-s", _no_measured(warmup_s, last, span_source(cfg)))


def _no_measured(warmup_s: float, last: float, source: str) -> str:
    return (
        f"{warmup_s:g} s leaves no request to measure: the last arrives at {last:,.6g} s "
        f"({source}); give a warm-up below it"
    )


def run_shard(payload: str) -> FleetRun:
    """One shard's run (module level: process pools and Ray ship it)."""
    job = json.loads(payload)
    cfg = FleetConfig.model_validate_json(job["fleet"])
    return simulate_fleet(cfg, only=job["only"], window_s=job["window_s"])


def merge(runs: list[FleetRun]) -> FleetRun:
    """The shards' runs as one: requests in request order, windows by replica."""
    requests = pd.concat([r.requests for r in runs], ignore_index=True)
    requests = requests.sort_values("request", kind="stable").reset_index(drop=True)
    windows = pd.concat([r.windows for r in runs], ignore_index=True)
    windows = windows.sort_values(["replica", "window"], kind="stable").reset_index(drop=True)
    stats = sorted((s for r in runs for s in r.replicas), key=lambda s: s.index)
    return FleetRun(requests, windows, stats, runs[0].window_s)


def per_request(run: FleetRun, slo: FleetSlo) -> pd.DataFrame:
    """One row per request: where it ran, when, its lengths, TTFT, TPOT (decode time per
    output token after the first; NaN for a one-token output, which meets any TPOT), end to
    end, and whether it met both SLOs (an unfinishable request meets none)."""
    q = run.requests
    ttft = (q["first_token_s"] - q["arrival_s"]) * 1e3
    out = q["output_tokens"]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = ((q["finish_s"] - q["first_token_s"]) / (out - 1)).where(out > 1) * 1e3
    ok = ~q["unfinishable"] & (ttft <= slo.ttft_ms) & ((tpot <= slo.tpot_ms) | tpot.isna())
    table = pd.DataFrame(
        {
            "request": q["request"],
            "replica": q["replica"],
            "arrival_s": q["arrival_s"],
            "first_token_s": q["first_token_s"],
            "finish_s": q["finish_s"],
            "prompt_tokens": q["prompt_tokens"],
            "output_tokens": out,
            "ttft_ms": ttft,
            "tpot_ms": tpot,
            "e2e_s": q["finish_s"] - q["arrival_s"],
            "unfinishable": q["unfinishable"],
            "met_slo": ok.to_numpy(),
        },
        columns=REQUEST_COLUMNS,
    )
    if run.prefill_replicas:  # a disaggregated fleet: where and when each was prefilled
        for col in DISAGGREGATED_COLUMNS:
            table[col] = q[col].to_numpy()
    return table


def summarize_fleet(
    run: FleetRun, slo: FleetSlo, table: pd.DataFrame | None = None, warmup_s: float = 0.0
) -> dict[str, Any]:
    """The fleet's headline figures over every request arriving from ``warmup_s`` on:
    TTFT/TPOT/E2E p50 and p99 with 95 % sectioning intervals (arrival order,
    :mod:`simspec.engine.intervals`), SLO attainment (share of requests meeting both SLOs,
    with Wilson's interval discounted for correlated neighbours:
    :func:`~simspec.engine.intervals.proportion_interval`), goodput (requests meeting both SLOs
    per second from the first arrival measured (after the warm-up) to the last departure, as vLLM's
    benchmark_serving.py reports it; DistServe's per-GPU
    goodput, the highest rate at an attainment goal, is what ``plan --trace`` searches),
    throughput, each replica's utilisation (share of the span served it spent computing) and, as its
    headroom, its KV and batch occupancy (:func:`occupancy`). A warm-up that leaves no request
    to measure is an InputError naming --warmup-s."""
    t = per_request(run, slo) if table is None else table
    t = t[t["arrival_s"] >= warmup_s]
    if not len(t):
        last = float(run.requests["arrival_s"].max()) if len(run.requests) else 0.0
        source = "the run's span"
        raise InputError("--warmup-s", _no_measured(warmup_s, last, source))
    done = t[~t["unfinishable"]]
    makespan = float(run.requests["finish_s"].max()) if len(run.requests) else 0.0
    # the clock starts at the first measured arrival (vLLM's benchmark starts it as it sends
    # the first request): a trace window's quiet start is not served time, nor a quiet
    # stretch after the warm-up's end (QA: a window whose first request came 73 s in read 25 %
    # low goodput; a warm-up ending 173 s before the next arrival, 32 % low)
    start = float(t["arrival_s"].min())
    span = makespan - start
    if warmup_s > 0:  # every token made from then on, whoever's (QA: the early arrivals'
        tokens = _tokens_after(run, start)  # late tokens had dropped out)
    else:
        tokens = float(done["output_tokens"].sum())
    row: dict[str, Any] = {
        "requests": len(t),
        "unfinishable": int(t["unfinishable"].sum()),
        # the decode (or colocated) replicas, as --replicas and plan's CSV count them; a
        # disaggregated fleet's prefill instances are its prefill_replicas (QA: counted in both)
        "replicas": len(run.replicas) - run.prefill_replicas,
        "makespan_s": makespan,
        "measured_from_s": start,  # where throughput's and goodput's clock starts
        "throughput_tok_s": tokens / span if span > 0 else math.nan,
        # the span the arrivals cover after the warm-up, which a fleet serving the stream is
        # provisioned for (plan --trace bills it; the drain after the last arrival is the
        # replay's end, not the service's)
        "arrival_span_s": float(t["arrival_s"].max()) - start,
    }
    for name, scale in (("ttft_ms", 1.0), ("tpot_ms", 1.0), ("e2e_s", 1.0)):
        values = done[name].dropna().to_numpy() * scale
        for q in (50, 99):
            key = f"{name.split('_')[0]}_{name.split('_')[1]}_p{q}"
            row[key] = float(np.percentile(values, q)) if len(values) else math.nan
            row[f"{key}_ci_low"], row[f"{key}_ci_high"] = ci.percentile_interval(values, q)
    met = t["met_slo"].to_numpy(dtype=float)
    row["slo_attainment"] = float(met.mean())
    row["slo_attainment_ci_low"], row["slo_attainment_ci_high"] = ci.proportion_interval(met)
    row["goodput_req_s"] = float(met.sum()) / span if span > 0 else math.nan
    util = [_share(s.busy_s, served_span_s(run)) for s in run.replicas]
    row["utilisation_mean"] = float(np.mean(util))
    row["utilisation_min"] = float(np.min(util))
    row["utilisation_max"] = float(np.max(util))
    kv, batch = occupancy(run)
    row["kv_occupancy_mean"], row["kv_occupancy_max"] = float(np.mean(kv)), float(np.max(kv))
    row["batch_occupancy_mean"] = float(np.mean(batch))
    row["batch_occupancy_max"] = float(np.max(batch))
    row["preemptions"] = int(run.requests["preemptions"].sum())
    return row


def _tokens_after(run: FleetRun, start_s: float) -> float:
    """Output tokens the fleet made from ``start_s`` on, from the per-request table: every
    token of a request whose first came after it, none of one finished before it, and of a
    request decoding across it the share of its decode time after it (its first token
    counted at its time). The windowed log's counts split the window holding ``start_s`` pro
    rata, so the summary moved with --window-s (QA: 845.6 tok/s at 10 s, 891.2 at 1 s)."""
    q = run.requests
    if not len(q):
        return 0.0
    q = q[~q["unfinishable"] & q["finish_s"].notna()]
    first, finish = q["first_token_s"].to_numpy(float), q["finish_s"].to_numpy(float)
    tokens = (q["output_tokens"] - q["tokens_before_start"]).to_numpy(float)
    # a request that began before start_s: the share of its decode after it (none if it
    # finished before; one that decoded nothing finished at its first token, so before)
    share = np.clip((finish - start_s) / np.maximum(finish - first, 1e-12), 0.0, 1.0)
    return float(np.where(first >= start_s, tokens, (tokens - 1.0) * share).sum())


def first_arrival_s(run: FleetRun) -> float:
    """When the run's first request arrived (0 for a run without requests)."""
    return float(run.requests["arrival_s"].min()) if len(run.requests) else 0.0


def served_span_s(run: FleetRun) -> float:
    """The span the fleet served, from its first arrival to its last departure: nothing runs
    before the first arrival, so a share of it is a share of the work's time (QA: a trace
    window whose first request came 73 s in read its utilisation 25 % low)."""
    if not len(run.requests):
        return math.nan
    return float(run.requests["finish_s"].max()) - first_arrival_s(run)


def occupancy(run: FleetRun) -> tuple[list[float], list[float]]:
    """Per replica, over the span served (:func:`served_span_s`, idle time counting as
    empty): the mean share of its KV blocks in use, and its mean running batch over the
    sequences it may run at once (max_num_seqs). Each is in [0, 1], and is the headroom the
    busy share hides: a replica that computes all the time (utilisation 1) at a tenth of its
    batch and KV cache could serve more."""
    span = served_span_s(run)
    if not span > 0:
        return [math.nan] * len(run.replicas), [math.nan] * len(run.replicas)
    kv = [_share(s.kv_block_s, s.memory.num_blocks * span) for s in run.replicas]
    batch = [_share(s.batch_s, s.max_seqs * span) for s in run.replicas]
    return kv, batch


def _share(part: float, whole: float) -> float:
    """``part / whole``, at most 1: a share summed in floating point may pass it by an ulp."""
    return min(part / whole, 1.0) if whole > 0 else math.nan


def utilisation(run: FleetRun) -> pd.DataFrame:
    """Per replica: requests served, busy seconds and their share of the span served
    (:func:`served_span_s`), its KV and batch occupancy (:func:`occupancy`), KV peak."""
    span = served_span_s(run)
    served = run.requests["replica"].value_counts()
    prefills = run.prefill_replicas
    if prefills:  # a disaggregated fleet: its prefill instances first, each request at two
        q = run.requests
        decoded = q.loc[q["replica"] >= prefills, "replica"].value_counts()
        served = decoded.add(q["prefill_replica"].value_counts(), fill_value=0)
    kv, batch = occupancy(run)
    roles = {}
    if prefills:
        roles["role"] = ["prefill" if s.index < prefills else "decode" for s in run.replicas]
    return pd.DataFrame(
        {
            "replica": [s.index for s in run.replicas],
            **roles,
            "requests": [int(served.get(s.index, 0)) for s in run.replicas],
            "busy_s": [s.busy_s for s in run.replicas],
            "utilisation": [_share(s.busy_s, span) for s in run.replicas],
            "kv_occupancy": kv,
            "batch_occupancy": batch,
            "iterations": [s.iterations for s in run.replicas],
            "kv_blocks_peak": [s.kv_blocks_peak for s in run.replicas],
            "kv_blocks_total": [s.memory.num_blocks for s in run.replicas],
        }
    )


SUMMARY_MEASURES = (
    "requests",
    "unfinishable",
    "slo_attainment",
    "goodput_req_s",
    "ttft_ms_p50",
    "ttft_ms_p99",
    "tpot_ms_p50",
    "tpot_ms_p99",
    "e2e_s_p50",
    "e2e_s_p99",
    "throughput_tok_s",
    "utilisation_mean",
    "utilisation_min",
    "utilisation_max",
    "kv_occupancy_mean",
    "kv_occupancy_max",
    "batch_occupancy_mean",
    "batch_occupancy_max",
    "preemptions",
    "measured_from_s",
    "makespan_s",
)


def summary_table(row: dict[str, Any]) -> pd.DataFrame:
    """The summary as measure, value and its 95 % interval (NaN where it has none)."""
    return pd.DataFrame(
        {
            "measure": list(SUMMARY_MEASURES),
            "value": [row[k] for k in SUMMARY_MEASURES],
            "ci_low": [row.get(f"{k}_ci_low", math.nan) for k in SUMMARY_MEASURES],
            "ci_high": [row.get(f"{k}_ci_high", math.nan) for k in SUMMARY_MEASURES],
        }
    )


TIMELINE_COLUMNS = [
    "time_s",
    "span_s",
    "replica",
    "arrivals",
    "queue_depth",
    "running_batch",
    "active_k",
    "tokens_s",
    "utilisation",
    "kv_occupancy",
    "batch_occupancy",
]


def timeline(run: FleetRun) -> pd.DataFrame:
    """Time series per window of ``run.window_s`` seconds, per replica and for the fleet
    (``replica`` = -1): arrivals, requests waiting for their first token at the window's end
    (queue depth), the running batch (averaged over the window; the fleet's: summed), the
    active draft length (averaged over busy time), output tokens per second, the busy share,
    and the mean shares of the KV blocks and of the batch slots (max_num_seqs) in use (the
    fleet's: the mean over its replicas). An iteration's time is split over the windows it
    spans (:class:`~simspec.engine.fleet.WindowedLog`), so every share is in [0, 1]."""
    w = run.window_s
    q = run.requests
    last = float(q["finish_s"].max()) if q["finish_s"].notna().any() else 0.0
    last = max(last, float(q["arrival_s"].max()) if len(q) else 0.0)  # unfinishable arrivals
    n_win = int(max(last, 0.0) // w) + 1
    n_win = max(n_win, int(run.windows["window"].max()) + 1 if len(run.windows) else 1)
    ends = (np.arange(n_win) + 1) * w
    span = np.clip(last - (ends - w), 0.0, w)
    # a window the run does not reach holds nothing: its zeros over the whole window
    over = np.where(span > 0.0, span, w)
    frames = []
    prefills = run.prefill_replicas
    for s in run.replicas:
        # when each request reached this instance, and when it got what it waited for there:
        # a prefill instance's, from the arrival to its first token; a decode instance's in a
        # disaggregated fleet, from its KV landing to its admission (QA: prefill instances
        # showed no arrivals and their queues were charged to the decode instances)
        came, served = "arrival_s", "first_token_s"
        if s.index < prefills:
            routed = q[q["prefill_replica"] == s.index]
            served = "prefill_done_s"
        elif prefills:
            routed = q[(q["replica"] == s.index) & q["kv_landed_s"].notna()]
            came = "kv_landed_s"
        else:
            routed = q[q["replica"] == s.index]  # every arrival, an unfinishable one too
        mine = routed[~routed["unfinishable"]]  # those that wait for a first token
        arrived = np.searchsorted(np.sort(mine[came].to_numpy()), ends, side="right")
        first = np.sort(mine[served].to_numpy())
        started = np.searchsorted(first, ends, side="right")
        bins = np.bincount((routed[came].to_numpy() // w).astype(int), minlength=n_win)
        win = run.windows[run.windows["replica"] == s.index].set_index("window")
        win = win.reindex(range(n_win), fill_value=0)
        frames.append(
            pd.DataFrame(
                {
                    "time_s": ends - w,
                    "span_s": span,
                    "replica": s.index,
                    "arrivals": bins[:n_win],
                    "queue_depth": arrived - started,
                    "running_batch": win["running_batch"].to_numpy(dtype=float)
                    * win["busy_s"].to_numpy(dtype=float)
                    / over,
                    "active_k": win["active_k"].to_numpy(dtype=float),
                    "tokens_s": win["output_tokens"].to_numpy(dtype=float) / over,
                    "utilisation": _shares(win["busy_s"].to_numpy(dtype=float), over),
                    "kv_occupancy": _shares(
                        win["kv_block_s"].to_numpy(dtype=float), s.memory.num_blocks * over
                    ),
                    "batch_occupancy": _shares(
                        win["running_batch"].to_numpy(dtype=float)
                        * win["busy_s"].to_numpy(dtype=float),
                        s.max_seqs * over,
                    ),
                }
            )
        )
    per = pd.concat(frames, ignore_index=True)
    busy = per["utilisation"] * np.tile(over, len(run.replicas))
    per["_kb"] = per["active_k"] * busy
    per["_b"] = busy
    fleet = per.groupby("time_s", sort=True).sum(numeric_only=True).reset_index()
    if prefills:  # the fleet's arrivals are the prefill instances', its tokens the clients'
        # (the decode instances deliver each first token again: counted once)
        for col, side in (
            ("arrivals", per["replica"] < prefills),
            ("tokens_s", per["replica"] >= prefills),
        ):
            fleet[col] = (
                per[side]
                .groupby("time_s", sort=True)[col]
                .sum()
                .reindex(fleet["time_s"])
                .to_numpy()
            )
    fleet["replica"] = -1
    fleet["span_s"] = span  # every replica's row of a window has its span: not their sum
    busy_fleet = fleet["_b"].where(fleet["_b"] > 0, 1.0)
    fleet["active_k"] = np.where(fleet["_b"] > 0, fleet["_kb"] / busy_fleet, 0.0)
    for share in ("utilisation", "kv_occupancy", "batch_occupancy"):
        fleet[share] = fleet[share] / len(run.replicas)
    out = pd.concat([fleet, per], ignore_index=True)[TIMELINE_COLUMNS]
    return out


def _shares(part: np.ndarray, whole: float | np.ndarray) -> np.ndarray:
    """Each ``part / whole``, at most 1 (:func:`_share`)."""
    return np.minimum(part / whole, 1.0)
