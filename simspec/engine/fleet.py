"""A fleet: N replicas in one SimPy environment behind a router that places each request on
one replica at the moment it arrives.

Each replica is a full :class:`~simspec.engine.replica.Replica`, built by the same steps as a
single-replica run (:mod:`simspec.engine.build`), with its own deployment, method and load
policy: a Dynamic SD schedule or ``disable_by_batch_size`` reads the batch of the replica it
runs on (``Replica.run`` asks its own speculator for ``step_shape(len(decode) +
len(prefill))``), never the fleet's.

Routers (``FleetConfig.router``), after Vidur's global schedulers (microsoft/vidur
``vidur/scheduler/global_scheduler/``, commit 7d47513):

* ``round_robin``: request i to replica i mod N (Vidur ``round_robin_global_scheduler.py``);
* ``random``: a uniform replica per request, from the fleet's seeded router stream (Vidur
  ``random_global_scheduler.py``);
* ``least_outstanding``: the replica with the fewest requests routed to it and not finished
  (waiting or running). Vidur's ``lor_global_scheduler.py`` counts a replica's
  ``num_pending_requests``, its queue of requests not yet scheduled; simspec counts every
  unfinished request, the usual "least outstanding requests" of load balancers, because
  a request that is running still holds a batch slot and KV blocks;
* ``least_kv``: the replica with the most free KV blocks now;
* ``power_of_two``: two distinct replicas drawn at random, the one with fewer outstanding
  requests (Mitzenmacher, "The power of two choices in randomized load balancing", IEEE TPDS
  12(10), 2001).

Ties go to the lowest replica index. ``round_robin`` and ``random`` never read the replicas'
state, so which replica a request goes to is fixed by the arrivals alone
(:func:`assignments`): the replicas are then independent, and a run of a subset of them
(``only``) gives exactly their rows of the whole fleet's run (``studies.fleet`` shards on
this). The state-aware routers couple the replicas and are never sharded.

Requests are conserved: every arriving request is routed to exactly one replica, and each
replica finishes it or reports it unfinishable (too long for its KV cache or context).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import simpy

from simspec.catalog.models import load_model
from simspec.config import MAX_TIMELINE_ROWS, STATE_FREE_ROUTERS, FleetConfig
from simspec.engine.build import (
    acceptance_sampler,
    longest_request,
    past_budget,
    past_context,
    setup_replica,
)
from simspec.engine.kv_cache import MemoryPlan
from simspec.engine.metrics import IterationRecord
from simspec.engine.replica import Replica
from simspec.engine.requests import RequestTable
from simspec.engine.simulation import request_frame
from simspec.engine.workload import RequestSpecs, arrival_gaps, generate_requests, request_count
from simspec.errors import InputError, ScenarioError

# seconds per bin of the fleet's time series unless asked otherwise
DEFAULT_WINDOW_S = 10.0
# the child of the seed a fleet's router draws from (fleet_streams' fourth)
ROUTER_STREAM = 3


def max_windows(replicas: int) -> int:
    """Windows a fleet of ``replicas`` may span: the timeline has a row per window for each
    replica and one for the fleet (:data:`~simspec.config.MAX_TIMELINE_ROWS`)."""
    return MAX_TIMELINE_ROWS // (replicas + 1)


@dataclass
class WindowedLog:
    """A replica's iterations folded into fixed windows as they happen (an hour of a busy
    replica is ~10^5 iterations; a day's log would not fit in memory). An iteration's time
    (busy, running batch, draft length and KV blocks, each times seconds) is split over the
    windows it spans, so no window holds more than its own seconds of work; its count and the
    tokens it emits go to the window it starts in. The replica's
    :class:`~simspec.engine.metrics.IterationSink`."""

    window_s: float
    max_windows: int  # past it the run is refused (:func:`max_windows`), not logged
    busy_s: list[float] = field(default_factory=list)
    iterations: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    batch_s: list[float] = field(default_factory=list)  # running sequences x seconds
    draft_s: list[float] = field(default_factory=list)  # draft tokens per sequence x seconds
    kv_block_s: list[float] = field(default_factory=list)  # KV blocks in use x seconds
    kv_peak: list[int] = field(default_factory=list)

    def record(self, row: IterationRecord) -> None:
        start, end = row.start_s, row.start_s + row.duration_s
        if end // self.window_s >= self.max_windows:
            self._refuse(end)
        first = int(start // self.window_s)
        last = max(first, math.ceil(end / self.window_s) - 1)  # holds the last instant
        self._grow(last + 1)
        self.iterations[first] += 1
        self.output_tokens[first] += row.output_tokens
        seqs = row.decode_seqs + row.prefill_seqs
        # a speculative step: query tokens per sequence less the input one
        draft = row.decode_tokens / row.decode_seqs - 1.0 if row.spec_seqs else 0.0
        for w in range(first, last + 1):
            part = min(end, (w + 1) * self.window_s) - max(start, w * self.window_s)
            if part > 0:
                self.busy_s[w] += part
                self.batch_s[w] += seqs * part
                self.draft_s[w] += draft * part
                self.kv_block_s[w] += row.kv_blocks_used * part
            if row.kv_blocks_used > self.kv_peak[w]:
                self.kv_peak[w] = row.kv_blocks_used

    def hold(self, start: float, end: float, blocks: int) -> None:
        """KV blocks held from ``start`` to ``end`` while the replica runs no iteration (a
        prefill instance's prompts waiting to be sent, a decode instance's blocks preallocated
        for KV on its way): their block-seconds and peak, no busy time (QA: a prefill instance
        holding 750 blocks for 12 s read as 0.05 % occupied)."""
        if blocks <= 0 or end <= start:
            return
        if end // self.window_s >= self.max_windows:
            self._refuse(end)
        first = int(start // self.window_s)
        last = max(first, math.ceil(end / self.window_s) - 1)
        self._grow(last + 1)
        for w in range(first, last + 1):
            part = min(end, (w + 1) * self.window_s) - max(start, w * self.window_s)
            if part > 0:
                self.kv_block_s[w] += blocks * part
                if blocks > self.kv_peak[w]:
                    self.kv_peak[w] = blocks

    def record_block(self, columns: tuple[np.ndarray, ...]) -> None:
        """A run of iterations at once, folded row by row as :meth:`record` folds each."""
        for values in zip(*(column.tolist() for column in columns), strict=True):
            self.record(IterationRecord(*values))

    def _grow(self, n: int) -> None:
        """Windows up to ``n``, the new ones empty."""
        grow = n - len(self.busy_s)
        if grow <= 0:
            return
        for column in (self.busy_s, self.batch_s, self.draft_s, self.kv_block_s):
            column.extend([0.0] * grow)
        for counts in (self.iterations, self.output_tokens, self.kv_peak):
            counts.extend([0] * grow)

    def _refuse(self, end_s: float) -> None:
        """An iteration ends past the windows the timeline holds: the queue drains long after
        the last arrival (the arrivals themselves were checked: :func:`check_span`). Its end
        bounds every finish, and so the timeline's span."""
        raise InputError(
            "--window-s",
            f"the run still computes at {end_s:,.6g} s, long after its last arrival: past "
            f"the {self.max_windows:,} windows of {self.window_s:g} s its timeline holds "
            f"({MAX_TIMELINE_ROWS:,} rows: a row per window for each replica and the "
            "fleet); give a larger --window-s",
        )

    def frame(self, replica: int) -> pd.DataFrame:
        """One row per window: ``busy_s``, ``iterations``, ``output_tokens``, the
        time-weighted running batch and active draft length (tokens drafted per decoding
        sequence: K for a chain, 0 while speculation is off and in a step without decodes, so
        prompt-only steps pull it below K) over the busy time, the KV blocks in use
        times seconds (``kv_block_s``) and the peak KV blocks."""
        busy = np.array(self.busy_s)
        with np.errstate(invalid="ignore", divide="ignore"):
            batch = np.where(busy > 0, np.array(self.batch_s) / busy, 0.0)
            k = np.where(busy > 0, np.array(self.draft_s) / busy, 0.0)
        n = len(busy)
        return pd.DataFrame(
            {
                "replica": np.full(n, replica, dtype=np.int64),
                "window": np.arange(n, dtype=np.int64),
                "busy_s": busy,
                "iterations": np.array(self.iterations, dtype=np.int64),
                "output_tokens": np.array(self.output_tokens, dtype=np.int64),
                "running_batch": batch,
                "active_k": k,
                "kv_block_s": np.array(self.kv_block_s),
                "kv_blocks_peak": np.array(self.kv_peak, dtype=np.int64),
            }
        )


@dataclass(frozen=True)
class ReplicaStats:
    """One replica's run: its memory plan, KV peak and end state, seconds it computed, and
    the time integrals of its KV blocks in use and of its running batch (over ``max_seqs``,
    the sequences it may run at once), from which its occupancies follow."""

    index: int
    memory: MemoryPlan
    kv_blocks_peak: int
    kv_blocks_in_use_end: int
    busy_s: float
    iterations: int
    max_seqs: int
    kv_block_s: float
    batch_s: float


@dataclass
class FleetRun:
    """What a fleet (or a shard of it) produced: one row per request it served, in request
    order, with the replica that served it; one row per replica and window; per-replica
    statistics."""

    requests: pd.DataFrame
    windows: pd.DataFrame
    replicas: list[ReplicaStats]
    window_s: float
    # a disaggregated fleet's prefill instances, replicas 0..prefill_replicas-1 (0: none)
    prefill_replicas: int = 0


def fleet_streams(seed: int) -> tuple[np.random.Generator, ...]:
    """The fleet's random streams: lengths, acceptance and arrivals are a single replica's
    (``simulate``'s first three children of the seed, so a fleet of one is that run), the
    router's the fourth. Each replica draws acceptance from its own stream
    (:func:`acceptance_stream`)."""
    return tuple(np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4))


def acceptance_stream(seed: int, replica: int) -> np.random.Generator:
    """Replica ``replica``'s acceptance draws: replica 0 takes the single run's stream (a fleet
    of one is that run), each other one a child of it keyed by its index alone, so a shard
    draws what the whole run does. One stream shared by every replica gave the k-th request
    of each the same acceptance record and accept decisions (QA: four round-robin replicas of
    identical requests finished in lockstep), a fleet of N with 1/N of the variety."""
    stream = np.random.SeedSequence(seed).spawn(4)[1]
    if replica:
        stream = stream.spawn(replica + 1)[replica]
    return np.random.default_rng(stream)


def fleet_requests(cfg: FleetConfig) -> tuple[RequestSpecs, np.ndarray]:
    """Every request of the fleet's run (lengths) and the gaps between their arrivals. The
    fleet measures every request from an empty fleet to the last departure (``measure:
    whole`` semantics: a replayed day is a transient, README "Measurement")."""
    wl = cfg.workload
    rng_workload, _, rng_arrival, _ = fleet_streams(cfg.seed)
    n = request_count(wl)
    specs = generate_requests(wl, rng_workload, n)
    return specs, arrival_gaps(wl, n, rng_arrival)


def check_span(cfg: FleetConfig, gaps: np.ndarray, window_s: float) -> None:
    """Refuse, before simulating, arrivals that alone span more windows than the timeline
    holds (:data:`MAX_TIMELINE_ROWS`), naming what sets the span and the --window-s that
    would fit."""
    n = len(cfg.replicas)
    cap = max_windows(n)
    last = float(np.cumsum(gaps)[-1]) if len(gaps) else 0.0
    if last // window_s < cap:
        return
    raise InputError(
        "--window-s",
        f"the arrivals span {last:,.6g} s ({span_source(cfg)}): {last // window_s + 1:,.0f} "
        f"windows of {window_s:g} s, and the timeline of {n} replica{'s' * (n > 1)} holds "
        f"{cap:,} ({MAX_TIMELINE_ROWS:,} rows: a row per window for each replica and the "
        f"fleet); give --window-s >= {_ceil_3(last / (cap - 1))}, or a shorter span",
    )


def span_source(cfg: FleetConfig) -> str:
    """What sets the span of a fleet's arrivals, in the flags a user changes it with."""
    wl = cfg.workload
    if wl.arrival == "replay":
        return f"{wl.arrival_trace} as --window, --rate-scale/--target-qps and --tile make it"
    return f"--requests {wl.num_requests:,} at --qps {wl.rate:g}"


def _ceil_3(x: float) -> str:
    """``x`` rounded up to three significant digits, as a user would type it."""
    step = 10.0 ** (math.floor(math.log10(x)) - 2)
    return f"{math.ceil(x / step) * step:.6g}"


def router_stream(seed: int, stream: int = ROUTER_STREAM) -> np.random.Generator:
    """A router's draws: the fleet's fourth child of the seed (:func:`fleet_streams`), or for
    a second router in the same fleet (a disaggregated fleet's, to its decode instances)
    another child, so the two never draw alike (QA: random routing sent every request prefilled
    on instance i to decode instance i)."""
    return np.random.default_rng(np.random.SeedSequence(seed).spawn(stream + 1)[stream])


def assignments(
    router: str, n: int, replicas: int, seed: int, stream: int = ROUTER_STREAM
) -> np.ndarray:
    """The replica of each of ``n`` requests under a state-free router (it depends on the
    arrival order alone)."""
    if router == "round_robin":
        return np.arange(n, dtype=np.int64) % replicas
    if router == "random":
        return router_stream(seed, stream).integers(0, replicas, size=n)
    raise ValueError(f"{router} reads the replicas' state: no fixed assignment")


class Router:
    """Picks a replica for each arriving request and counts each replica's outstanding
    requests (routed, not finished)."""

    def __init__(
        self,
        cfg: FleetConfig,
        replicas: list[Replica | None],
        n: int,
        stream: int = ROUTER_STREAM,
    ) -> None:
        self.kind, self.replicas = cfg.router, replicas
        self.outstanding = np.zeros(len(replicas), dtype=np.int64)
        self.fixed = (
            assignments(cfg.router, n, len(replicas), cfg.seed, stream)
            if cfg.router in STATE_FREE_ROUTERS
            else None
        )
        self.rng = router_stream(cfg.seed, stream)
        self.count = 0

    def pick(self, rid: int) -> int:
        if self.fixed is not None:
            return int(self.fixed[rid])
        if self.kind == "least_outstanding":
            return int(np.argmin(self.outstanding))
        if self.kind == "least_kv":
            # a state-aware router runs every replica (no shard), so none is None here. Ties
            # (a burst, whose routed requests hold no blocks until admitted) go to the fewest
            # outstanding: by index alone, replica 0 took 25 of 40 burst requests (QA)
            free = np.array([-1 if r is None else r.pool.free for r in self.replicas])
            tied = np.flatnonzero(free == free.max())
            return int(tied[np.argmin(self.outstanding[tied])])
        # power_of_two: two distinct replicas, the one with fewer outstanding (the first on a tie)
        n = len(self.replicas)
        if n == 1:
            return 0
        a, b = self.rng.choice(n, size=2, replace=False)
        a, b = min(a, b), max(a, b)
        return int(b if self.outstanding[b] < self.outstanding[a] else a)

    def left(self, replica: int) -> Callable[[int], None]:
        def done(rid: int) -> None:
            self.outstanding[replica] -= 1

        return done


def simulate_fleet(
    cfg: FleetConfig,
    only: list[int] | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    progress: Callable[[float], None] | None = None,
) -> FleetRun:
    """Run the fleet until every request has left. ``only``: simulate just these replicas
    (a shard; state-free routers only), whose rows are then exactly the whole run's.
    ``progress(share)`` hears of the share of arrivals released, every 1 % or so."""
    if cfg.prefill is not None:  # never run as if it had none
        raise InputError(
            "prefill",
            "a fleet with prefill instances runs in engine.disaggregation.simulate_disaggregated",
        )
    n_rep = len(cfg.replicas)
    chosen = sorted(set(range(n_rep) if only is None else only))
    if only is not None and cfg.router not in STATE_FREE_ROUTERS:
        raise InputError(
            "router",
            f"{cfg.router} reads every replica's state: a subset of the fleet is not exact",
        )
    if not chosen or chosen[0] < 0 or chosen[-1] >= n_rep:
        raise InputError("only", f"replica indices must be in [0, {n_rep - 1}]")
    specs, gaps = fleet_requests(cfg)
    check_span(cfg, gaps, window_s)
    table = RequestTable(specs)
    # drawn or replayed: past the shortest context any replica serves
    past_context(table, min(longest_request(r, load_model(r.model)) for r in cfg.replicas))
    env = simpy.Environment()
    built: dict[int, Replica] = {}
    logs: dict[int, WindowedLog] = {}
    memory: dict[int, MemoryPlan] = {}
    max_seqs: dict[int, int] = {}
    for i in chosen:
        sc = cfg.replicas[i]
        setup = setup_replica(sc)
        past_budget(table, setup)  # a prompt an engine admitting them whole never admits
        memory[i], max_seqs[i] = setup.memory, setup.max_seqs
        accept = acceptance_sampler(
            sc, setup.speculator, len(table), acceptance_stream(cfg.seed, i)
        )
        logs[i] = WindowedLog(window_s, max_windows(n_rep))
        built[i] = Replica(env, setup, table, accept, logs[i])
    replicas: list[Replica | None] = [built.get(i) for i in range(n_rep)]  # None: not simulated
    router = Router(cfg, replicas, len(table))
    for i, replica in built.items():
        replica.on_finish = router.left(i)
    placed = np.full(len(table), -1, dtype=np.int64)
    env.process(route_arrivals(env, router, replicas, gaps, placed, progress))
    for replica in built.values():
        env.process(replica.run())
    env.run()
    mine = np.flatnonzero(placed >= 0)
    check_served(table.finish[mine], table.unfinishable[mine], mine, "fleet")
    requests = request_frame(table).iloc[mine].reset_index(drop=True)
    requests.insert(0, "request", mine)
    requests.insert(1, "replica", placed[mine])
    stats = [replica_stats(i, built[i], memory[i], max_seqs[i], logs[i]) for i in chosen]
    windows = pd.concat([logs[i].frame(i) for i in chosen], ignore_index=True)
    return FleetRun(requests, windows, stats, window_s)


def replica_stats(
    index: int, replica: Replica, memory: MemoryPlan, max_seqs: int, log: WindowedLog
) -> ReplicaStats:
    """One replica's statistics at the end of a fleet's run (:class:`ReplicaStats`)."""
    return ReplicaStats(
        index,
        memory,
        replica.pool.peak_used,
        replica.pool.used,
        float(sum(log.busy_s)),
        int(sum(log.iterations)),
        max_seqs,
        float(sum(log.kv_block_s)),
        float(sum(log.batch_s)),
    )


def check_served(finish: np.ndarray, refused: np.ndarray, ids: np.ndarray, what: str) -> None:
    """Every request finished or was refused: a run that ended with one neither (its replica
    waiting on an event that never comes) is a fault, never a table of partial results."""
    stuck = np.flatnonzero(np.isnan(finish) & ~refused)
    if len(stuck):
        raise ScenarioError(
            f"the {what} stopped with {len(stuck):,} requests neither served nor refused "
            f"(request {int(ids[stuck[0]])} first): a simulation fault; please report the "
            "command that ran it"
        )


def route_arrivals(
    env: simpy.Environment,
    router: Router,
    replicas: list[Replica | None],
    gaps: np.ndarray,
    placed: np.ndarray,
    progress: Callable[[float], None] | None,
) -> Generator[simpy.Event, None, None]:
    """The fleet's arrival process: each request arrives ``gap`` seconds after the one before
    (the same additions a single replica's ``open_arrivals`` makes, so arrival times agree to
    the bit) and goes where the router says; a shard skips those routed elsewhere."""
    step = max(len(gaps) // 100, 1)
    for rid, gap in enumerate(gaps):
        yield env.timeout(gap)
        i = router.pick(rid)
        replica = replicas[i]
        if progress is not None and rid % step == 0:
            progress(rid / len(gaps))
        if replica is None:
            continue
        placed[rid] = i
        router.outstanding[i] += 1
        replica.arrive(rid)
