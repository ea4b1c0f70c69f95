"""Capacity planning: how many replicas, GPUs and dollars a load needs within latency SLOs.

``plan``: for each method, the highest Poisson arrival rate one replica sustains within the
latency SLOs (binary search on the rate, each probe a simulation), the replicas and GPUs a target
rate needs, and the cost per million output tokens at a GPU-hour price.

``plan_fleet`` (``plan --trace``): for each method, the smallest fleet whose replay of a trace
has a share of its requests within both SLOs.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from simspec.config import MAX_DURATION_S, MAX_QPS, Deployment, FleetConfig, MethodConfig, Scenario
from simspec.engine.fleet import FleetRun
from simspec.engine.metrics import RunSummary
from simspec.engine.workload import mean_output_len
from simspec.errors import InputError, ScenarioError
from simspec.studies.fleet import FleetSlo, per_request, run_fleet, summarize_fleet
from simspec.studies.runs import SERIAL, Runs
from simspec.studies.schedule.export import schedule_of
from simspec.studies.sweep import lookup_columns

# plan's defaults (the CLI's options and the explorer read them): seconds of arrivals each
# probe measures, and the price of one GPU-hour
PLAN_DURATION_S = 60.0
GPU_HOUR_PRICE = 2.5

PLAN_COLUMNS = [
    "method",
    "k",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "schedule",
    "max_qps_per_replica",
    "ttft_ms_at_max",
    "ttft_ms_at_max_ci_low",
    "ttft_ms_at_max_ci_high",
    "tpot_ms_at_max",
    "tpot_ms_at_max_ci_low",
    "tpot_ms_at_max_ci_high",
    "output_tok_s_at_max",
    "unserved_at_max",
    "limited_by",
    "replicas",
    "gpus",
    "cost_per_million_tokens",
    "meets_slo",
]


@dataclass(frozen=True)
class Slo:
    """Latency targets at one percentile of requests (50 or 99)."""

    ttft_ms: float
    tpot_ms: float
    percentile: int = 99

    def __post_init__(self) -> None:
        FleetSlo(self.ttft_ms, self.tpot_ms)  # the same targets, checked the same way
        if self.percentile not in (50, 99):
            raise InputError("--percentile", f"choose 50 or 99 (got {self.percentile})")

    def met(self, summary: RunSummary) -> bool:
        return not self.missed(summary)

    def missed(self, summary: RunSummary) -> str:
        """Why a probe does not sustain its rate ('' when it does): ``unstable`` when the
        requests in the system rise over the window or the warm-up never ends (a queue that
        grows for as long as one simulates: no finite run's percentiles describe it);
        ``unfinishable`` when more of its requests than the percentile leaves out can never
        be served (longer than the context the engine serves or its KV cache: they never get
        a first token, so they miss both targets at any rate, as plan --trace counts them;
        QA: a third of the requests refused at --max-model-len 1024 planned 5x the rate);
        else the SLO it misses (``ttft``, ``tpot``). A TPOT target holds vacuously where no
        served request has a second token (every output one token long: vLLM's bench leaves
        such requests out of TPOT; QA: such a workload planned 0 QPS)."""
        if not summary.stable or summary.window_short > 0:
            return "unstable"
        if summary.requests and unserved(summary) > 1 - self.percentile / 100:
            return "unfinishable"
        p = "p50" if self.percentile == 50 else "p99"
        if not getattr(summary, f"ttft_ms_{p}") <= self.ttft_ms:
            return "ttft"
        tpot = getattr(summary, f"tpot_ms_{p}")
        if not tpot <= self.tpot_ms and not (math.isnan(tpot) and summary.requests):
            return "tpot"
        return ""


def unserved(summary: RunSummary) -> float:
    """The share of a run's measured requests that could never be served (0 with none)."""
    return summary.unfinishable / summary.requests if summary.requests else 0.0


def check_whole(deploy: Deployment) -> None:
    """A plan prices whole deployments: a prefill or decode instance alone serves no request
    from its arrival to its last token, and its GPUs and cost would leave out the other
    role's instances (QA: a decode-only fleet planned 1 GPU where the colocated one took 3, in
    a row labelled colocated)."""
    if deploy.disaggregation_mode != "null":
        raise InputError(
            "disaggregation_mode",
            f"{deploy.disaggregation_mode}: a plan prices whole deployments, and a "
            f"{deploy.disaggregation_mode} instance alone leaves out the other role's GPUs: "
            "plan --trace --disaggregate sizes prefill and decode instances together (simspec "
            "fleet --prefill-replicas runs a split you give)",
        )


def check_price(gpu_hour_price: float) -> None:
    """A GPU-hour price the cost can be computed at: finite, not negative (the explorer lets
    one set 0 to see the plan without a cost; the CLI asks > 0)."""
    if not (math.isfinite(gpu_hour_price) and gpu_hour_price >= 0):
        raise InputError("--gpu-hour-price", f"must be a finite number >= 0, got {gpu_hour_price}")


MAX_PROBE_REQUESTS = 20_000
# a p99 taken from fewer than 1,000 requests rests on its ten largest: a probe measures at
# least this many whatever its duration (Llama-3.1-70B, fixed 1,024/256 lengths: p99 TTFT at
# 1.6 req/s was 311 ms over 96 requests and 2,107 ms over 384)
MIN_PROBE_REQUESTS = 1000
# bisection stops when the bracket is this narrow (relative). Near capacity the p99 TTFT
# hinges on rare episodes where long requests fill the KV cache: measured over 60 s or 240 s
# of arrivals the sustainable rate moves by ~4 % (Llama-3.1-8B on H100, ShareGPT, seeds 0-2:
# 12.5-12.75 vs 11.9-12.25 req/s), so a finer bracket would be false precision
RATE_TOLERANCE = 0.05


# A bisection over noisy probes ends on the highest rate that passed one probe, near the
# threshold the luckiest of them (QA: EAGLE-3 on one H100 passed 13.5 req/s over 1,000
# requests, TPOT p99 46 ms; the same rate over 4,000 read 50.9 ms against a 50 ms SLO, and a
# 12,000-request fleet at it broke both SLOs, 753 preemptions; 13.0 held). The rate found is
# confirmed by one probe CONFIRM_FACTOR times as long (the 240 s of arrivals the tolerance
# above was measured against, at the default 60 s); while that misses, the rate steps down by
# RATE_TOLERANCE and is confirmed again, at most CONFIRM_STEPS times: a short probe's luck is
# the few per cent the tolerance measured (4 %), and six steps (26 %) below its rate the two
# lengths disagree past any noise, where the plan says no rate held rather than guess one.
CONFIRM_FACTOR = 4
CONFIRM_STEPS = 6


def within_noise(rates: list[float]) -> list[list[int]]:
    """For each rate, the indices of the others it is not told apart from. Bisection leaves
    the sustainable rate somewhere in ``[rate, rate / (1 - RATE_TOLERANCE)]``, so two rates
    whose brackets overlap (the larger at most ``RATE_TOLERANCE`` above the smaller, as a
    share of the larger) rank two methods by less than the search resolves; a rate of 0 (no
    rate met the SLOs) ties with nothing."""
    out: list[list[int]] = []
    for i, a in enumerate(rates):
        out.append(
            [
                j
                for j, b in enumerate(rates)
                if j != i and a > 0 and b > 0 and abs(a - b) <= RATE_TOLERANCE * max(a, b)
            ]
        )
    return out


def _probe(
    deploy: Deployment,
    method: MethodConfig,
    rate: float,
    duration_s: float,
    min_requests: int = MIN_PROBE_REQUESTS,
) -> Scenario:
    """One run at ``rate``, measuring ``duration_s`` of arrivals in its steady window (a
    warm-up before it and a tail after it are added: ``engine.window``)."""
    requests = min(max(min_requests, math.ceil(rate * duration_s)), MAX_PROBE_REQUESTS)
    return _with_workload(
        deploy, method, arrival="poisson", rate=rate, rate_schedule=None, requests=requests
    )


def _with_workload(deploy: Deployment, method: MethodConfig, **update: Any) -> Scenario:
    """``method`` on ``deploy`` with its workload's fields ``update`` replaced."""
    wl = deploy.workload.model_copy(update=update)
    return Scenario(**deploy.model_dump(exclude={"workload"}), method=method, workload=wl)


def max_rate(
    deploy: Deployment,
    method: MethodConfig,
    slo: Slo,
    duration_s: float = PLAN_DURATION_S,
    iterations: int = 12,
    *,
    runs: Runs = SERIAL,
    min_requests: int = MIN_PROBE_REQUESTS,
) -> tuple[float, RunSummary | None, str]:
    """Highest arrival rate (requests/s) one replica sustains (a stable queue, the SLO met
    over the steady window of ``duration_s`` seconds of arrivals), by bisection between a
    rate that does and one that does not (the doubling from 0.25/s: :func:`doubling_bracket`,
    started near the threshold), until the bracket
    is within ``RATE_TOLERANCE`` (at most ``iterations`` halvings). Latency grows with the
    rate, so the SLO holds on one side of a threshold. Returns the rate, its run, and why the
    bracket's upper rate failed (:meth:`Slo.missed`); (0, None, why) when even one request
    at a time misses the SLO (0.25/s failing, the bisection below it runs only where one
    request at a time meets it).
    Each probe runs here and now through the cache of ``runs``: a probe already run is not
    run again."""

    def probe(rate: float) -> RunSummary:
        return runs.one(_probe(deploy, method, rate, duration_s, min_requests))

    lo, best, hi, why = doubling_bracket(probe, slo, _first_doubling(deploy, method, runs))
    if best is None and (alone := slo.missed(runs.one(_alone(deploy, method)))):
        # even FIRST_RATE fails, and so does one request at a time (the least latency any
        # rate gets): no rate below it can meet the SLO, and those run longest to find so
        return 0.0, None, alone
    for _ in range(iterations):
        if lo > 0 and (hi - lo) / hi <= RATE_TOLERANCE:
            break
        mid = (lo + hi) / 2
        s = runs.one(_probe(deploy, method, mid, duration_s, min_requests))
        missed = slo.missed(s)
        if not missed:
            lo, best = mid, s
        else:
            hi, why = mid, missed
    if best is None:
        return lo, best, why
    return confirmed(
        lambda rate: runs.one(
            _probe(deploy, method, rate, CONFIRM_FACTOR * duration_s, CONFIRM_FACTOR * min_requests)
        ),
        slo,
        lo,
        why,
    )


def confirmed(
    long_probe: Callable[[float], RunSummary], slo: Slo, rate: float, why: str
) -> tuple[float, RunSummary | None, str]:
    """The highest of ``rate``, ``rate`` x (1 - RATE_TOLERANCE), ... (at most CONFIRM_STEPS
    steps down) whose ``long_probe`` meets ``slo``, that run, and why the rate above it failed
    (``why`` where ``rate`` itself holds); (0, None, why) where none does."""
    for _ in range(CONFIRM_STEPS + 1):
        s = long_probe(rate)
        missed = slo.missed(s)
        if not missed:
            return rate, s, why
        rate, why = rate * (1 - RATE_TOLERANCE), missed
    return 0.0, None, why


# the doubling's rates: FIRST_RATE x 2^j requests/s, up to the highest one tried
FIRST_RATE = 0.25
TOP_RATE = 1e5


def doubling_bracket(
    probe: Callable[[float], RunSummary], slo: Slo, start: int = 0
) -> tuple[float, RunSummary | None, float, str]:
    """The bracket the doubling from ``FIRST_RATE`` ends on: (the last rate that met ``slo``
    or 0, its run or None, the first rate that did not, why it did not). The SLO holds on one
    side of a threshold (latency grows with the rate: :func:`max_rate`), so that bracket is
    the same whichever doubling point the search starts from: from ``start`` (the rate
    ``FIRST_RATE`` x 2^start) it doubles while the SLO holds and halves while it does not,
    and runs only the two rates of the bracket and those between them and ``start``. Below
    the threshold the rates run longest (near-idle, a step or two of a small batch per token),
    so a start near the threshold spares the slowest probes of the doubling."""
    top = int(math.log2(TOP_RATE / FIRST_RATE))  # FIRST_RATE x 2^top <= TOP_RATE
    j = min(max(start, 0), top)
    runs: dict[int, RunSummary] = {}

    def missed(j: int) -> str:
        if j not in runs:
            runs[j] = probe(FIRST_RATE * 2**j)
        return slo.missed(runs[j])

    if missed(j):
        while j > 0 and missed(j - 1):
            j -= 1
    else:
        while True:
            if j + 1 > top:
                raise ScenarioError("the SLO holds at every rate tried: is it too loose?")
            j += 1
            if missed(j):
                break
    # j: the first doubling point that fails; every one below it holds
    lo, best = (FIRST_RATE * 2 ** (j - 1), runs[j - 1]) if j > 0 else (0.0, None)
    return lo, best, FIRST_RATE * 2**j, slo.missed(runs[j])


# The closed loop that says where the doubling starts: the replica with every slot busy
# (max_num_seqs requests at once) for this many turnovers. It sets only where the search
# starts, never what it finds (:func:`doubling_bracket`). Measured (Llama-3.1-8B on H100,
# ShareGPT, plain decoding, loaded 2-core machine): 4 turnovers cost 5.2 s CPU and start at
# 8 req/s, below the threshold (12.5) by less than a doubling, sparing the 0.25-4 req/s
# probes (40 s); 1 turnover (2.6 s) is still warming up, starts at 4 req/s and adds a probe.
START_TURNOVERS = 4


# requests of the one-at-a-time run that tells an SLO no rate can meet (:func:`max_rate`):
# enough that its p99 rests on a few requests past the percentile (2.56), as few as that, for
# a run of one sequence at a time is the longest per request there is
ALONE_REQUESTS = 256


def _alone(deploy: Deployment, method: MethodConfig) -> Scenario:
    """The deployment serving one request at a time: the least TTFT and TPOT any arrival
    rate gets (no queue, no batch)."""
    return _with_workload(
        deploy, method, arrival="closed", concurrency=1, rate_schedule=None,
        requests=ALONE_REQUESTS,
    )  # fmt: skip


def _first_doubling(deploy: Deployment, method: MethodConfig, runs: Runs) -> int:
    """The doubling point to start from: the highest rate at most what the replica completes
    with every slot busy (a closed loop of ``START_TURNOVERS``). No open loop sustains more
    requests/s than that, and the SLO is usually met not far below it."""
    from simspec.catalog.hardware import load_engine, load_gpu

    engine, gpu = load_engine(deploy.engine), load_gpu(deploy.gpu)
    slots = engine.max_seqs_for(method.name, deploy.scheduler.max_num_seqs, gpu)
    full_loop = _with_workload(
        deploy, method, arrival="closed", concurrency=slots, rate_schedule=None,
        requests=START_TURNOVERS * slots, turnovers=START_TURNOVERS,
    )  # fmt: skip
    s = runs.one(full_loop)
    full = s.throughput_tok_s / s.output_tokens_mean if s.output_tokens_mean > 0 else 0.0
    return int(math.log2(full / FIRST_RATE)) if full > FIRST_RATE else 0


def plan(
    deploy: Deployment,
    methods: list[MethodConfig],
    target_qps: float,
    slo: Slo,
    gpu_hour_price: float = GPU_HOUR_PRICE,
    duration_s: float = PLAN_DURATION_S,
    *,
    runs: Runs = SERIAL,
    min_requests: int = MIN_PROBE_REQUESTS,
) -> pd.DataFrame:
    """One row per method: sustainable rate per replica, replicas and GPUs for ``target_qps``,
    and the cost per million output tokens at ``gpu_hour_price`` per GPU-hour. The methods'
    probes share the cache of ``runs`` (a fresh one by default), which is told of each method
    done."""
    if not 0 < target_qps <= MAX_QPS:  # also refuses NaN and inf
        raise InputError("qps", f"must be in (0, {MAX_QPS:g}] requests/s, got {target_qps}")
    if not 0 < duration_s <= MAX_DURATION_S:
        raise InputError("duration", f"must be in (0, {MAX_DURATION_S:g}] s, got {duration_s}")
    check_price(gpu_hour_price)
    check_whole(deploy)
    found = _max_rates(deploy, methods, slo, duration_s, runs, min_requests)
    # the fleet serves target_qps requests/s of the workload's own mean output length, the
    # same for every method, where every request is served (below: the served ones' own)
    mean_output = mean_output_len(deploy.workload)
    rows = []
    for m, (rate, s, why) in zip(methods, found, strict=True):
        ok = s is not None and rate > 0
        replicas = math.ceil(target_qps / rate) if ok else None
        gpus = replicas * deploy.tp * deploy.pp if replicas else None  # a replica's GPUs
        # at the workload's mean output length, as the cost prices it (QA: the probe's own mean,
        # 1.6 % off it, left the printed cost not following from the printed rate); where the
        # probe at that rate could never serve a share of its requests (the SLO's percentile
        # leaves at most that many out: Slo.missed), of the requests served, at their own mean
        lost = unserved(s) if ok and s is not None else 0.0
        # the requests never served are the longest ones, so the served ones' own mean output
        # (the probe's) stands for theirs, not the workload's (QA: at --max-model-len 1024 the
        # workload's mean over (1 - lost) overstated the tokens 1.66x)
        served = s.output_tokens_mean if lost > 0 and s is not None else mean_output
        per_request = served * (1 - lost)
        out_tok = rate * per_request if ok else float("nan")
        tokens_per_hour = target_qps * per_request * 3600 if ok else float("nan")
        cost = gpus * gpu_hour_price / tokens_per_hour * 1e6 if ok else float("nan")
        rows.append(
            {
                "method": m.name,
                "k": m.k if m.name != "autoregressive" else 0,
                **lookup_columns(m, deploy.engine),
                # a speculation schedule runs its bands' K, not k (QA: shown as a fixed K=3)
                "schedule": schedule_of(m),
                "max_qps_per_replica": rate,
                **_at_max(s if ok else None, slo.percentile),
                "output_tok_s_at_max": out_tok,
                "unserved_at_max": lost if ok else float("nan"),
                "limited_by": why,
                "replicas": replicas,
                "gpus": gpus,
                "cost_per_million_tokens": cost,
                "meets_slo": ok,
            }
        )
        runs.step(m.name)
    return pd.DataFrame(rows, columns=PLAN_COLUMNS)


def _max_rates(
    deploy: Deployment,
    methods: list[MethodConfig],
    slo: Slo,
    duration_s: float,
    runs: Runs,
    min_requests: int,
) -> list[tuple[float, RunSummary | None, str]]:
    """:func:`max_rate` of each method. Each method's bisection waits on its own probes
    alone, so on a pool (and with no cache a caller shares) the methods search side by side,
    one job each (:func:`_max_rate_job`), each with a fresh cache of its own: probes of two
    methods are two scenarios, never one run. Here (serial) they share the cache of ``runs``
    (a fresh one by default). Either way each method takes the same probes to the same
    answer."""
    if runs.executor == "serial" or runs.cache is not None or len(methods) < 2:
        runs = runs.cached()
        return [
            max_rate(deploy, m, slo, duration_s, runs=runs, min_requests=min_requests)
            for m in methods
        ]
    common = {
        "deploy": deploy.model_dump(mode="json"),
        "slo": [slo.ttft_ms, slo.tpot_ms, slo.percentile],
        "duration_s": duration_s,
        "min_requests": min_requests,
    }
    payloads = [json.dumps(common | {"method": m.model_dump(mode="json")}) for m in methods]
    return runs.map(_max_rate_job, payloads)


def _max_rate_job(payload: str) -> tuple[float, RunSummary | None, str]:
    """:func:`max_rate` of one method given as JSON (module level: a pool ships it)."""
    job = json.loads(payload)
    return max_rate(
        Deployment.model_validate(job["deploy"]),
        MethodConfig.model_validate(job["method"]),
        Slo(*job["slo"]),
        job["duration_s"],
        runs=SERIAL.cached(),
        min_requests=job["min_requests"],
    )


def _at_max(s: RunSummary | None, percentile: int) -> dict[str, float]:
    """The SLO percentiles (with their intervals) at the sustainable rate."""
    out = {}
    for metric in ("ttft", "tpot"):
        name = f"{metric}_ms_p{percentile}"
        for suffix, field in (
            ("", name),
            ("_ci_low", f"{name}_ci_low"),
            ("_ci_high", f"{name}_ci_high"),
        ):
            out[f"{metric}_ms_at_max{suffix}"] = getattr(s, field) if s else float("nan")
    return out


# -- plan --trace: the smallest fleet meeting an SLO attainment ---------------------------------
FLEET_PLAN_COLUMNS = [
    "method",
    "k",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "schedule",
    "layout",
    "prefill_replicas",
    "replicas",
    "gpus",
    "slo_attainment",
    "ttft_ms_p99",
    "tpot_ms_p99",
    "limited_by",
    "goodput_req_s",
    "cost_per_million_tokens",
    "meets_slo",
]


def smallest_fleet(
    scenario: Scenario,
    router: str,
    slo: FleetSlo,
    attainment: float,
    max_replicas: int = 256,
    probe: Callable[[FleetConfig], FleetRun] | None = None,
) -> tuple[int | None, dict[str, Any] | None]:
    """The fewest replicas of ``scenario`` behind ``router`` whose run over the workload's
    arrivals (a trace window, replayed whole) has at least ``attainment`` of its requests
    within both SLOs: doubling from 1 until one meets it, then bisection on the integers
    between the last that failed and the first that met it. Bisection takes attainment to
    grow with replicas, which a replay holds only roughly: the router's draws and the arrivals
    each replica gets make it dip by a fraction of a percent from one size to the next (QA:
    17 replicas met 0.925 where 18 missed), so a fleet a replica or two smaller than the
    answer may meet it too; the CLI's "How:" line says so. Returns (replicas, that run's
    summary), or (None, None) past ``max_replicas``."""
    probe = probe or run_fleet
    runs: dict[int, dict[str, Any]] = {}

    def ok(n: int) -> bool:
        if n not in runs:
            runs[n] = summarize_fleet(probe(FleetConfig.uniform(scenario, n, router)), slo)
        return runs[n]["slo_attainment"] >= attainment

    lo, hi = 0, 1  # lo fails (0 replicas serve nothing), hi is tried next
    if not ok(1) and _never_within(runs[1], attainment):
        return None, None  # requests no replica can finish: no fleet meets it (QA: ran to 256)
    while not ok(hi):
        lo, hi = hi, hi * 2
        if hi > max_replicas:
            if lo < max_replicas and ok(max_replicas):
                hi = max_replicas
                break
            return None, None
    hi = _fewest(ok, hi, lo)
    return hi, runs[hi]


# the most instances of each role the split search tries: two roles of this many hold as many
# GPUs as the colocated search's 256 replicas
MAX_SPLIT_EACH = 128


def smallest_split(
    scenario: Scenario,
    router: str,
    slo: FleetSlo,
    attainment: float,
    link: dict[str, float],
    max_each: int = MAX_SPLIT_EACH,
    probe: Callable[[FleetConfig], FleetRun] | None = None,
) -> tuple[tuple[int, int] | None, dict[str, Any] | None, tuple[int, int] | None]:
    """The prefill/decode split (P prefill instances in front of D decode instances of
    ``scenario``'s deployment, ``link`` the KV transfer: :func:`~simspec.studies.fleet.
    disaggregated_fleet`) that meets ``attainment`` on the workload's arrivals, searched by
    role: equal pools doubled from 1 each until one meets it (m each), then the decode pool
    bisected on 1..m with m prefill instances (prefill to spare: the decode instances then set
    TPOT and the wait for a slot), then the prefill pool bisected on 1..m with that many
    decode instances (their prompts' queue sets the rest of TTFT), then one decode instance
    more for as long as it spares two prefill instances. The answer is a local minimum: one
    instance fewer of either role misses (the bisections take attainment to grow with each
    pool, as :func:`smallest_fleet`'s do), and one decode instance more spares at most one
    prefill instance; a split further along that trade, or with fewer decode instances and
    more prefill ones, is not searched.
    Returns ((P, D), that run's summary, the size of the split one instance smaller that
    missed, None where none is smaller), or (None, None, None) past ``max_each`` each or
    where requests no decode instance can finish are too many."""
    from simspec.studies.fleet import disaggregated_fleet

    probe = probe or run_fleet
    runs: dict[tuple[int, int], dict[str, Any]] = {}

    def ok(p: int, d: int) -> bool:
        if (p, d) not in runs:
            cfg = disaggregated_fleet(scenario, d, router, p, link)
            runs[(p, d)] = summarize_fleet(probe(cfg), slo)
        return bool(runs[(p, d)]["slo_attainment"] >= attainment)

    if not ok(1, 1) and _never_within(runs[(1, 1)], attainment):
        return None, None, None  # requests no decode instance can finish: no split meets it
    m = 1
    while not ok(m, m):
        if m >= max_each:
            return None, None, None
        m = min(2 * m, max_each)

    def prefill_for(d: int) -> Callable[[int], bool]:
        return lambda n: ok(n, d)

    d = _fewest(lambda n: ok(m, n), m)
    p = _fewest(prefill_for(d), m)
    # a decode instance more can spare prefill ones (a shorter wait for a slot leaves the
    # prompts more of TTFT): taken while it spares two, so the split shrinks
    while p >= 3 and d < max_each and ok(p - 2, d + 1):
        d += 1
        p = _fewest(prefill_for(d), p - 2)
    # one prefill instance fewer (its bisection ran it), else the most prefill instances
    # that missed with one decode instance fewer
    missed = [size for size in runs if size[1] == d - 1 and not ok(*size)]
    smaller = (p - 1, d) if p > 1 else max(missed, default=None)
    return (p, d), runs[(p, d)], smaller


def _fewest(ok: Callable[[int], bool], hi: int, lo: int = 0) -> int:
    """The smallest n in ``lo`` + 1..``hi`` with ``ok(n)``, ``ok(hi)`` known true and
    ``ok(lo)`` false (0 replicas serve nothing), by bisection."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def _never_within(summary: dict[str, Any], attainment: float) -> bool:
    """Whether more requests than ``1 - attainment`` can never finish on a replica of this
    kind (longer than its context or its KV cache), which no number of replicas changes."""
    n = summary.get("requests", 0)
    return n > 0 and summary.get("unfinishable", 0) / n > 1 - attainment


def plan_fleet(
    deploy: Deployment,
    methods: list[MethodConfig],
    router: str,
    slo: FleetSlo,
    attainment: float,
    gpu_hour_price: float = GPU_HOUR_PRICE,
    *,
    runs: Runs = SERIAL,
    probe: Callable[[FleetConfig], FleetRun] | None = None,
    disaggregate: dict[str, float] | None = None,
) -> pd.DataFrame:
    """One row per method: the smallest fleet meeting ``attainment`` on the deployment's
    arrivals (:func:`smallest_fleet`), its GPUs (replicas x tp), and the cost per million
    output tokens at ``gpu_hour_price`` (the fleet's GPUs for the span its arrivals cover over
    the tokens it emitted). With ``disaggregate`` (the KV link's PrefillPool fields, {} for its
    defaults) a second row per method: the prefill/decode split that meets it
    (:func:`smallest_split`), ``replicas`` its decode instances and ``prefill_replicas`` its
    prefill instances (0 in a colocated row), ``layout`` saying which. A method with a
    schedule (``k_schedule``/``tree_schedule``, e.g. the recommended one) is labelled "NAME
    (recommended schedule)" with the schedule beside it. Each fleet runs on ``runs``
    (``probe`` replaces the run), which is told of each method done. ``limited_by``: what the
    fleet one replica smaller missed (:func:`fleet_limit`; a split's: one prefill instance
    fewer, else the most prefill instances that missed with one decode instance fewer; ''
    when one of each meets the attainment), or without a fleet, what kept every one tried
    from it (:func:`_none_met`)."""
    if not 0 < attainment <= 1:
        raise InputError("--attainment", f"must be in (0, 1], got {attainment}")
    check_price(gpu_hour_price)
    if disaggregate is None:
        check_whole(deploy)
    probe = probe or functools.partial(run_fleet, runs=runs.quiet())
    common = deploy.model_dump(exclude={"workload"})
    rows = []
    for m in methods:
        sc = Scenario(**common, method=m, workload=deploy.workload)
        limits: dict[tuple[int, int], str] = {}
        too_long: dict[tuple[int, int], float] = {}  # each size's share of such requests
        noted = _noting(probe, slo, limits, too_long)
        n, s = smallest_fleet(sc, router, slo, attainment, probe=noted)
        limit = limits.get((0, n - 1), "") if n else _none_met(limits, too_long, attainment)
        rows.append(_fleet_row(deploy, m, "colocated", (0, n), s, limit, gpu_hour_price))
        if disaggregate is not None:
            limits.clear()
            too_long.clear()
            split, s, smaller = smallest_split(
                sc, router, slo, attainment, disaggregate, probe=noted
            )
            limit = limits.get(smaller, "") if split else _none_met(limits, too_long, attainment)
            size = split or (None, None)
            rows.append(_fleet_row(deploy, m, "disaggregated", size, s, limit, gpu_hour_price))
        runs.step(m.name)
    return pd.DataFrame(rows, columns=FLEET_PLAN_COLUMNS)


def _fleet_row(
    deploy: Deployment,
    m: MethodConfig,
    layout: str,
    size: tuple[int | None, int | None],
    s: dict[str, Any] | None,
    limited_by: str,
    gpu_hour_price: float,
) -> dict[str, Any]:
    """plan --trace's row for method ``m`` on a ``layout`` fleet of ``size`` (prefill
    instances, 0 where colocated; the replicas that decode; None: none met it) whose summary
    is ``s``."""
    prefill, n = size
    gpus = (n + (prefill or 0)) * deploy.tp * deploy.pp if n else None  # a replica's: tp x pp
    cost = math.nan
    if gpus is not None and s is not None and s["throughput_tok_s"] > 0:
        # the fleet's GPUs for the span its arrivals cover, over the tokens it made: two
        # methods on as many GPUs serving the same requests cost the same, whichever
        # drains its last requests sooner (QA: 0.413 against 0.392 $/M on one GPU each)
        served_s = s["makespan_s"] - s["measured_from_s"]  # throughput's own span
        tokens = s["throughput_tok_s"] * served_s
        hours = (s["arrival_span_s"] if s["arrival_span_s"] > 0 else served_s) / 3600
        cost = gpus * gpu_hour_price * hours / tokens * 1e6
    schedule = schedule_of(m)
    return {
        "method": f"{m.name} (recommended schedule)" if schedule else m.name,
        "k": m.k if m.name != "autoregressive" else 0,
        **lookup_columns(m, deploy.engine),
        "schedule": schedule,
        "layout": layout,
        "prefill_replicas": prefill,
        "replicas": n,
        "gpus": gpus,
        "slo_attainment": s["slo_attainment"] if s else math.nan,
        "ttft_ms_p99": s["ttft_ms_p99"] if s else math.nan,
        "tpot_ms_p99": s["tpot_ms_p99"] if s else math.nan,
        "limited_by": limited_by,
        "goodput_req_s": s["goodput_req_s"] if s else math.nan,
        "cost_per_million_tokens": cost,
        "meets_slo": n is not None,
    }


def _none_met(
    limits: dict[tuple[int, int], str], too_long: dict[tuple[int, int], float], attainment: float
) -> str:
    """What kept every fleet tried from the attainment: requests too long for a replica
    (``unfinishable``) where more of them than the attainment leaves never finish (no number
    of replicas changes that: the searches stop there), else what the largest fleet tried
    missed (QA: a search stopped at one replica for requests too long read "limited by
    TPOT", the SLO that one replica missed most)."""
    if not limits:
        return ""
    if any(share > 1 - attainment for share in too_long.values()):
        return "unfinishable"
    return limits[max(limits)]


def _size(cfg: FleetConfig) -> tuple[int, int]:
    """A fleet's (prefill instances, replicas that decode); 0 prefill: colocated."""
    return (cfg.prefill.replicas if cfg.prefill else 0, len(cfg.replicas))


def _noting(
    probe: Callable[[FleetConfig], FleetRun],
    slo: FleetSlo,
    limits: dict[tuple[int, int], str],
    too_long: dict[tuple[int, int], float],
) -> Callable[[FleetConfig], FleetRun]:
    """``probe``, noting in ``limits`` what each fleet size it runs missed (:func:`fleet_limit`),
    by :func:`_size`, and in ``too_long`` its share of requests no replica can finish."""

    def run(cfg: FleetConfig) -> FleetRun:
        out = probe(cfg)
        table = per_request(out, slo)
        limits[_size(cfg)] = fleet_limit(table, slo)
        too_long[_size(cfg)] = float(table["unfinishable"].mean()) if len(table) else 0.0
        return out

    return run


def fleet_limit(table: pd.DataFrame, slo: FleetSlo) -> str:
    """What kept more of a fleet's requests (:func:`~simspec.studies.fleet.per_request`) from
    the SLOs: ``ttft`` or ``tpot``, the target more of them missed, or ``unfinishable``,
    requests too long for a replica's KV cache, which no number of replicas serves."""
    done = table[~table["unfinishable"]]
    missed = {
        "ttft": int((done["ttft_ms"] > slo.ttft_ms).sum()),
        "tpot": int((done["tpot_ms"] > slo.tpot_ms).sum()),
        "unfinishable": int(table["unfinishable"].sum()),
    }
    return max(missed, key=lambda k: missed[k])
