"""A prefill/decode-disaggregated fleet: prefill instances and decode instances in one SimPy
environment, the prompt's KV sent from one to the other.

Each request arrives at a prefill instance (the fleet's router over the prefill instances),
which runs its prompt and samples its first token, as SGLang's prefill server
(``--disaggregation-mode prefill``: python/sglang/srt/disaggregation/prefill.py) and vLLM's
``kv_producer`` do: here a replica whose requests end after one output token. Its KV then
travels to a decode instance. The client's first token is the decode instance's: TTFT runs
from the arrival at the prefill instance to the admission at the decode instance. The order
of the prefill, the decode instance's room and the transfer is the engine's (engines.yaml):

- vLLM and TensorRT-LLM (``pd_pull_after_admission``) prefill a request when it arrives; it
  then goes to a decode instance (the router over the decode instances, at that moment),
  which allocates its blocks when a slot and they are free and only then reads its KV into
  them (vLLM: WAITING_FOR_REMOTE_KVS; TensorRT-LLM: _prepare_disagg_gen_init); it decodes
  from the step after its KV lands (:meth:`~simspec.engine.replica.Replica.kv_landed`);
- SGLang (``pd_prealloc_before_prefill``) picks both instances at the arrival, the decode
  instance preallocates the request's blocks when they fit (``DecodePreallocQueue``), and
  only then does the prefill instance take it (``PrefillBootstrapQueue``:
  :func:`_prealloc_arrivals`); under load the wait comes before the prefill, and the decode
  instance's blocks are held through the prefill and the transfer.

How many requests a decode instance holds at once beside its running ones is the engine's
too (:func:`prealloc_slots`): vLLM allocates for requests waiting for remote KV whenever
fewer than max_num_seqs run, blocks alone bounding them; TensorRT-LLM (before its PR #15356)
too, but one iteration allocates for at most max_num_requests less those running
(``pd_alloc_counted_in_step``); SGLang's decode request pool has twice max_running_requests
more slots up to 32 running requests (none above). A request whose KV has landed joins the
running batch when a slot is free.

Every prefill instance keeps a finished request's blocks until its KV has been sent (vLLM
frees them on finished_sending, SGLang when its sender polls success, TensorRT-LLM when the
context send completes): behind a busy decode pool a vLLM prefill instance's KV fills with
prompts waiting to be read, and its next prefills wait for room.

Each GPU of the prefill instance sends its own slice of the KV over its own NIC (DGX
H100/H200/B200: one 400 Gb/s ConnectX-7 per GPU), at ``KV bytes per token per GPU / link
bandwidth`` a token (every cache the decode instance reads: :class:`SentBytes`), and the KV
lands ``latency`` after its last byte leaves; under DP attention each rank's GPUs send their
own requests' KV over their own NICs. When it leaves
is the engine's (:class:`KvSender`, engines.yaml ``kv_send_per_chunk``):

- whole, after the prefill (and the decode instance's allocation): vLLM's decode instance
  reads a finished prefill's blocks
  (NixlConnector: the kv_producer's request_finished hands back the block ids, the consumer's
  start_load_kv reads them), TensorRT-LLM's context server sends a finished context request's
  cache; the exposed transfer is ``latency + prompt tokens x seconds per token`` (after
  what the link is still sending);
- chunk by chunk: SGLang's prefill server sends each chunk of a chunked prompt as its forward
  ends (``send_kv_chunk`` from process_batch_result_disagg_prefill, python/sglang/srt/
  disaggregation/prefill.py), the last one when the prompt completes, so what is left after
  the prefill is the last chunk's and whatever of the earlier ones the link had not sent yet.

An instance's transfers share its link, one after another in the order they were put on it:
a prefill instance's that it sends, a decode instance's that it receives, once the request
has one (:class:`KvSender`). Not modelled: the one-step delay of SGLang's overlap scheduler
(a chunk's send waits for the next step's result processing), a chunk resent after a
preemption on the prefill instance (sent once here), and prefill and decode instances of
different layouts. vLLM's decode instance recomputes the prompt's last token and samples the
first token itself (engines.yaml ``pd_decode_recomputes_last_token``): its first step with
the request is a one-token prefill.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass

import numpy as np
import pandas as pd
import simpy

from simspec.catalog.hardware import EngineProfile, load_gpu
from simspec.catalog.models import load_model
from simspec.config import FleetConfig, Scenario
from simspec.engine.build import (
    acceptance_sampler,
    longest_request,
    past_budget,
    past_context,
    setup_replica,
)
from simspec.engine.fleet import (
    DEFAULT_WINDOW_S,
    ROUTER_STREAM,
    FleetRun,
    Router,
    WindowedLog,
    acceptance_stream,
    check_served,
    check_span,
    fleet_requests,
    max_windows,
    replica_stats,
    route_arrivals,
)
from simspec.engine.kv_cache import linear_state_bytes
from simspec.engine.replica import Replica, ReplicaSetup
from simspec.engine.requests import RequestTable
from simspec.engine.simulation import request_frame
from simspec.engine.workload import RequestSpecs

# the link a GPU without a reference server's network card is given (kv_link_gbps):
# one 400 Gb/s ConnectX-7 per GPU, as DGX H100, H200 and B200 ship (an assumption there)
ASSUMED_NIC_GBPS = 400.0


def kv_link_gbps(stated: float | None, gpu: str) -> tuple[float, str]:
    """(Gb/s, where it comes from) of a prefill GPU's KV link: ``stated``, else the GPU's
    reference server's network card (gpus.yaml ``nic_gbps``), else :data:`ASSUMED_NIC_GBPS`."""
    if stated is not None:
        return stated, "given"
    spec = load_gpu(gpu)
    if spec.nic_gbps is not None:
        return spec.nic_gbps, f"{spec.id}'s reference server's network card per GPU"
    return ASSUMED_NIC_GBPS, f"assumed: gpus.yaml gives {spec.id} no reference server's card"


def prefill_scenario(decode: Scenario) -> Scenario:
    """The prefill instances' deployment: the decode instances' own, serving whole requests
    (they end after the first token: :func:`simulate_disaggregated`)."""
    return decode.model_copy(update={"disaggregation_mode": "null"})


def transfer_s(
    prompt_tokens: int,
    kv_bytes_per_token: float,
    gbps: float,
    latency_s: float,
    extra_bytes: float = 0.0,
) -> float:
    """Seconds to send a prompt's KV from a prefill instance to a decode instance: each GPU
    its own slice (``kv_bytes_per_token`` per GPU, plus ``extra_bytes`` per request: see
    :class:`SentBytes`) over its own ``gbps`` link."""
    return latency_s + (prompt_tokens * kv_bytes_per_token + extra_bytes) * 8.0 / (gbps * 1e9)


@dataclass(frozen=True)
class SentBytes:
    """What one GPU of a prefill instance sends for a request, by engine:

    - ``per_token``: the KV pool's bytes per prompt token (the target's full-attention layers,
      and a draft's where it shares the pool), plus SGLang's draft pool kept outside its share
      (``draft_outside_share``: prefill.py/decode.py ``_init_kv_manager`` append
      ``draft_token_to_kv_pool.get_contiguous_buf_infos()``, "We should also transfer draft
      model kv cache"), plus the windowed layers' KV where every layer caches every token
      (vLLM under a KV connector, ``MemoryPlan.uniform_kv``: NixlConnector registers and
      reads every layer's blocks);
    - ``window``: otherwise the windowed layers' last window of the prompt (SGLang's
      ``maybe_send_extra``, state_type ``swa``; TensorRT-LLM assumed the same), at
      ``window_per_token``;
    - ``state``: a Gated DeltaNet model's recurrent state, once per request (SGLang
      ``_send_mamba_state``; vLLM V1 keeps it in the registered KV blocks).

    (QA: only the pool's full-attention bytes were sent: gpt-oss's transfer 2x too cheap
    under vLLM, Llama-4's 4x, an SGLang draft model's 25 %, Qwen3-Next's 17x at 100 tokens.)"""

    per_token: float
    window: int = 0
    window_per_token: float = 0.0
    state: float = 0.0

    @classmethod
    def of(cls, setup: ReplicaSetup, engine: EngineProfile, uniform: bool = False) -> SentBytes:
        """From the prefill instance's setup; ``uniform``: the decode instances' pool caches
        every layer's every token (their KV connector turned vLLM's hybrid manager off, as
        the prefill instance's turns its own)."""
        mem, target = setup.memory, setup.target
        a_tp, kv_bytes = setup.cost.layout.attn_tp, setup.cost.kv_bytes
        per_token = mem.kv_bytes_per_token
        if engine.flag("draft_outside_share"):
            per_token += setup.speculator.extra_kv_bytes_per_token()
        windowed = target.window_kv_bytes_per_token_per_gpu(a_tp, kv_bytes)
        window, window_per_token = 0, 0.0
        if mem.uniform_kv or uniform:
            per_token += windowed
        elif windowed > 0:
            window, window_per_token = target.sliding_window, windowed
        return cls(per_token, window, window_per_token, linear_state_bytes(target, engine, a_tp, 1))

    def extra(self, prompt: int) -> float:
        """The bytes a request sends once, with its last chunk."""
        return min(prompt, self.window) * self.window_per_token + self.state


class KvSender:
    """When each request's KV leaves its prefill instance, and the delay to its landing. Each
    instance's link (its GPUs' NICs, each carrying its own slice) carries one transfer after
    another, first come, first sent: concurrent transfers sharing its bandwidth would end the
    last of them at the same moment. A transfer holds its prefill instance's link and, once
    the request has one (``receiver``), its decode instance's. ``per_chunk``: each prompt
    chunk leaves as its forward ends (SGLang); else the whole prompt leaves after the prefill
    (vLLM, TensorRT-LLM)."""

    def __init__(
        self,
        n: int,
        prefill: int,
        decode: int,
        sent: SentBytes | float,
        gbps: float,
        latency_s: float,
        per_chunk: bool,
        ranks: int = 1,
    ) -> None:
        # a plain number: bytes per token alone (no window, no state)
        self.bytes = sent if isinstance(sent, SentBytes) else SentBytes(float(sent))
        self.gbps, self.latency_s = gbps, latency_s
        self.kv_bytes = self.bytes.per_token
        self.per_chunk = per_chunk
        self.prefill = prefill
        self.sent = np.zeros(n, dtype=np.int64)  # prompt tokens whose KV has been sent
        self.sent_by = np.zeros(n)  # when the last of them has left
        self.receiver = np.full(n, -1, dtype=np.int64)  # its decode instance, once known
        # when each link is free: the prefill instances', then the decode instances'; under
        # DP attention one per rank, each rank's GPUs sending its own requests' KV over their
        # own NICs (QA: one link an instance queued 8 ranks' transfers one after another)
        self.link_free = np.zeros((prefill + decode, ranks))
        self.rank = np.full((n, 2), -1, dtype=np.int64)  # (prefill, decode) rank, once sent

    def _lane(self, instance: int, rid: int, side: int) -> int:
        """The rank of ``instance`` that carries ``rid``'s KV: the one it went out (or came
        in) on before, else the first free (the ranks' own schedulers balance requests)."""
        if self.rank[rid, side] < 0:
            self.rank[rid, side] = int(np.argmin(self.link_free[instance]))
        return int(self.rank[rid, side])

    def _send(self, link: int, rid: int, now: float, tokens: int, extra: float = 0.0) -> float:
        """Put ``tokens`` of ``rid``'s KV (and ``extra`` bytes) on its links at ``now``:
        seconds until they start to leave (the later of the links' free moments)."""
        d = int(self.receiver[rid])
        lane = self._lane(link, rid, 0)
        free = float(self.link_free[link, lane])
        if d >= 0:
            at = self._lane(self.prefill + d, rid, 1)
            free = max(free, float(self.link_free[self.prefill + d, at]))
        waiting = max(free - now, 0.0)
        end = now + waiting + transfer_s(tokens, self.kv_bytes, self.gbps, 0.0, extra)
        self.link_free[link, lane] = end
        if d >= 0:
            self.link_free[self.prefill + d, at] = end
        self.sent_by[rid] = end
        return waiting

    def chunks(self, link: int, now: float, ids: np.ndarray, in_cache: np.ndarray) -> None:
        """Prompt chunks of ``ids`` ended at ``now`` on prefill instance ``link``, each request
        with ``in_cache`` prompt tokens in the KV cache: the tokens not sent yet queue."""
        for rid, tokens in zip(ids.tolist(), in_cache.tolist(), strict=True):
            fresh = tokens - int(self.sent[rid])
            if fresh <= 0:  # recomputed after a preemption: sent already
                continue
            self._send(link, rid, now, fresh)
            self.sent[rid] = tokens

    def delay(self, link: int, rid: int, now: float, prompt: int) -> float:
        """Seconds from ``now`` (the prefill's end, or the decode instance's allocation) to
        the KV's landing at a decode instance: what the links still have to send before and
        of the prompt, then the latency."""
        rest = max(prompt - int(self.sent[rid]), 0)
        extra = self.bytes.extra(prompt)  # the window and state leave with the last chunk
        if rest == 0 and extra == 0:  # every chunk sent already: it lands once the last has left
            return max(float(self.sent_by[rid]) - now, 0.0) + self.latency_s
        if rest == 0:  # the chunks sent (their links free after them): the rest follows
            waiting = self._send(link, rid, now, 0, extra)
            return waiting + transfer_s(0, self.kv_bytes, self.gbps, self.latency_s, extra)
        self.sent[rid] = prompt
        waiting = self._send(link, rid, now, rest, extra)
        return waiting + transfer_s(rest, self.kv_bytes, self.gbps, self.latency_s, extra)


def simulate_disaggregated(
    cfg: FleetConfig,
    window_s: float = DEFAULT_WINDOW_S,
    progress: Callable[[float], None] | None = None,
) -> FleetRun:
    """Run ``cfg`` (its replicas the decode instances, ``cfg.prefill`` the prefill pool) until
    every request has left. Replicas 0..P-1 of the result are the prefill instances, P..P+D-1
    the decode instances; each request's row is its decode instance's, with the arrival at
    the prefill instance, the prefill instance that ran it and when its KV landed."""
    pool = cfg.prefill
    assert pool is not None
    n_pre, n_dec = pool.replicas, len(cfg.replicas)
    specs, gaps = fleet_requests(cfg)
    check_span(cfg, gaps, window_s)
    decode_table = RequestTable(specs)
    ones = np.ones_like(specs.output_len)
    prefill_table = RequestTable(RequestSpecs(specs.prompt_len, ones, specs.trace_index))
    shortest = min(longest_request(r, load_model(r.model)) for r in cfg.replicas)
    past_context(decode_table, shortest)
    past_context(prefill_table, shortest)
    env = simpy.Environment()
    total = n_pre + n_dec
    logs = [WindowedLog(window_s, max_windows(total)) for _ in range(total)]
    pre_sc = [prefill_scenario(cfg.replicas[0])] * n_pre
    scenarios = [*pre_sc, *cfg.replicas]
    setups = [setup_replica(sc, "prefill" if i < n_pre else None) for i, sc in enumerate(scenarios)]
    for i, setup in enumerate(setups):
        past_budget(prefill_table if i < n_pre else decode_table, setup)
    # a request no decode instance can serve is refused before its prefill, as the engines'
    # API servers refuse it (QA: it was prefilled and sent, delaying the requests after it)
    prefill_table.unfinishable |= decode_table.unfinishable
    built: list[Replica] = []
    for i, (sc, setup) in enumerate(zip(scenarios, setups, strict=True)):
        table = prefill_table if i < n_pre else decode_table
        # the decode instances draw acceptance as a plain fleet's replicas do; the prefill
        # instances (which never decode) from streams past theirs
        stream = acceptance_stream(cfg.seed, i - n_pre if i >= n_pre else n_dec + i)
        accept = acceptance_sampler(sc, setup.speculator, len(table), stream)
        built.append(Replica(env, setup, table, accept, logs[i]))
    prefills: list[Replica | None] = list(built[:n_pre])
    decodes: list[Replica | None] = list(built[n_pre:])
    to_prefill = Router(cfg, prefills, len(specs))  # the router's kind and seed are cfg's
    to_decode = Router(cfg, decodes, len(specs), stream=ROUTER_STREAM + 1)
    engine = setups[0].speculator.engine  # one engine across the fleet (FleetConfig)
    sender = KvSender(
        len(specs),
        n_pre,
        n_dec,
        SentBytes.of(setups[0], engine, uniform=setups[n_pre].memory.uniform_kv),
        kv_link_gbps(pool.kv_transfer_gbps, cfg.replicas[0].gpu)[0],
        pool.kv_transfer_latency_ms / 1e3,
        per_chunk=engine.flag("kv_send_per_chunk"),
        ranks=setups[0].memory.dp,
    )
    landed = np.full(len(specs), np.nan)
    placed_pre = np.full(len(specs), -1, dtype=np.int64)
    # the decode instance of each request, once picked: the sender's own array, so writing it
    # also picks the decode instance's link that the request's KV shares
    placed_dec = sender.receiver

    def to_decode_instance(rid: int) -> bool:
        """Hand ``rid`` to the decode instance the router over them picks now (which the
        request's KV then shares a link with); False where that instance refuses it (it can
        never fit there), which then holds nothing of it. The one place a request reaches a
        decode instance, whichever order the engine runs (after its KV, before it, or before
        its prefill)."""
        d = to_decode.pick(rid)
        to_decode.outstanding[d] += 1
        placed_dec[rid] = d
        built[n_pre + d].arrive(rid)
        if decode_table.unfinishable[rid]:
            placed_dec[rid] = -1
            return False
        return True

    def transfer(j: int, rid: int) -> Generator[simpy.Event, None, None]:
        yield env.timeout(sender.delay(j, rid, env.now, int(specs.prompt_len[rid])))
        landed[rid] = env.now
        built[j].release(rid)  # sent: the prefill instance frees the blocks it held
        if placed_dec[rid] >= 0:  # its blocks allocated there before the transfer
            built[n_pre + int(placed_dec[rid])].kv_landed(rid)
        else:
            to_decode_instance(rid)

    prealloc_first = engine.flag("pd_prealloc_before_prefill")
    pull_when_admitted = not prealloc_first and engine.flag("pd_pull_after_admission")
    recompute = engine.flag("pd_decode_recomputes_last_token")

    def prefilled(j: int) -> Callable[[int], None]:
        left = to_prefill.left(j)

        def done(rid: int) -> None:
            left(rid)
            if prefill_table.unfinishable[rid]:  # too long for a prefill instance: no KV
                decode_table.unfinishable[rid] = True
                return
            # vLLM's proxy sends even a one-token request on to a decode instance, which
            # recomputes its last prompt token and samples it there (QA: it skipped that step)
            if pull_when_admitted and (decode_table.output_len[rid] > 1 or recompute):
                # the decode instance takes the request now, and pulls its KV once it has
                # allocated its blocks (start_transfer)
                if not to_decode_instance(rid):  # refused there: its KV is never read
                    built[j].release(rid)
                return
            env.process(transfer(j, rid))

        return done

    def start_transfer(rid: int) -> None:
        env.process(transfer(int(placed_pre[rid]), rid))

    def chunked(j: int) -> Callable[[np.ndarray, np.ndarray], None]:
        def sent(ids: np.ndarray, in_cache: np.ndarray) -> None:
            sender.chunks(j, env.now, ids, in_cache)

        return sent

    for j in range(n_pre):
        built[j].sched.hold_finished = True
        built[j].on_finish = prefilled(j)
        if sender.per_chunk:
            built[j].on_chunk = chunked(j)
    for i in range(n_dec):
        built[n_pre + i].on_finish = to_decode.left(i)
    for replica, setup in zip(built[n_pre:], setups[n_pre:], strict=True):
        replica.sched.prealloc_slots = prealloc_slots(engine, setup.max_seqs, setup.memory.dp)
        replica.sched.count_step_allocations = engine.flag("pd_alloc_counted_in_step")
    if pull_when_admitted:
        for replica in built[n_pre:]:
            replica.sched.awaits_kv = True
            replica.sched.recompute_last = recompute
            replica.on_prealloc = start_transfer
    arrival = prefill_table.arrival  # the client's, where the prefill takes it at once
    if prealloc_first:
        arrival = np.full(len(specs), np.nan)

        def start_prefill(rid: int) -> None:
            built[int(placed_pre[rid])].arrive(rid)

        for replica in built[n_pre:]:
            replica.sched.awaits_kv = True
            replica.on_prealloc = start_prefill
        routes = (to_prefill, placed_pre, arrival, to_decode_instance)
        env.process(_prealloc_arrivals(env, routes, built, n_pre, gaps, progress))
    else:
        env.process(route_arrivals(env, to_prefill, prefills, gaps, placed_pre, progress))
    # every instance waits for work until no event is left (as a fleet's replicas do)
    for replica in built:
        env.process(replica.run())
    env.run()
    return _run(
        decode_table, prefill_table, arrival, placed_pre, placed_dec, landed, built, setups,
        logs, n_pre, window_s,
    )  # fmt: skip


# the router over the prefill instances, each request's prefill instance and arrival, and
# the hand-over to a decode instance (simulate_disaggregated's to_decode_instance)
Routes = tuple[Router, np.ndarray, np.ndarray, Callable[[int], bool]]


def prealloc_slots(engine: EngineProfile, max_seqs: int, dp: int = 1) -> int | None:
    """How many requests a decode instance may hold at once, running or with blocks
    allocated for KV on its way (None: blocks alone bound those allocated, max_seqs the
    running ones; vLLM, and TensorRT-LLM before its PR #15356). SGLang has
    pd_prealloc_extra_requests x its running requests more slots where each DP attention
    rank runs at most pd_prealloc_extra_up_to_seqs (its request pool is per rank:
    max_running_requests // dp_size, _resolve_max_num_reqs)."""
    if engine.flag("pd_alloc_beside_running"):
        return None
    extra = engine.params.get("pd_prealloc_extra_requests")
    up_to = engine.params.get("pd_prealloc_extra_up_to_seqs")
    if extra is not None and up_to is not None and max_seqs // max(dp, 1) <= up_to.value:
        return max_seqs * (1 + int(extra.value))
    return max_seqs


def _prealloc_arrivals(
    env: simpy.Environment,
    routes: Routes,
    built: list[Replica],
    n_pre: int,
    gaps: np.ndarray,
    progress: Callable[[float], None] | None,
) -> Generator[simpy.Event, None, None]:
    """SGLang's arrivals: the router picks a prefill and a decode instance for each request
    at once (sgl-router's PD mode sends it to both, with one bootstrap room), the decode
    instance preallocates its blocks when they fit (DecodePreallocQueue.pop_preallocated,
    which then sends the block indices to the prefill server: kv_receiver.init), and the
    prefill instance takes it into its waiting queue only then (PrefillBootstrapQueue.
    pop_bootstrapped waits for KVPoll.WaitingForInput, which the sender reaches when the
    decode's indices arrive; python/sglang/srt/disaggregation/prefill.py, decode.py and
    mooncake/conn.py). A one-token output (the prefill's token is all of it) and a request a
    decode instance refuses go to the prefill instance at once, as elsewhere (the one-token
    output skipping the preallocation SGLang's decode server would make it wait for)."""
    to_prefill, placed_pre, arrival, to_decode_instance = routes
    decode_table = built[n_pre].requests
    prefill_table = built[0].requests
    step = max(len(gaps) // 100, 1)
    for rid, gap in enumerate(gaps):
        yield env.timeout(gap)
        arrival[rid] = env.now
        if progress is not None and rid % step == 0:
            progress(rid / len(gaps))
        j = to_prefill.pick(rid)
        placed_pre[rid] = j
        to_prefill.outstanding[j] += 1
        if decode_table.output_len[rid] > 1 and not decode_table.unfinishable[rid]:
            # preallocated there now or later: start_prefill
            if to_decode_instance(rid):
                continue
            prefill_table.unfinishable[rid] = True  # refused by the decode instance
        built[j].arrive(rid)


def _run(
    decode_table: RequestTable,
    prefill_table: RequestTable,
    arrival: np.ndarray,
    placed_pre: np.ndarray,
    placed_dec: np.ndarray,
    landed: np.ndarray,
    built: list[Replica],
    setups: list[ReplicaSetup],
    logs: list[WindowedLog],
    n_pre: int,
    window_s: float,
) -> FleetRun:
    """The fleet's tables: a request's row is its decode instance's, its arrival the prefill
    instance's (the client's), with the instance that prefilled it and when its KV landed."""
    refused = decode_table.unfinishable | prefill_table.unfinishable
    everyone = np.arange(len(refused))
    check_served(decode_table.finish, refused, everyone, "disaggregated fleet")
    frame = request_frame(decode_table)
    frame["arrival_s"] = arrival
    unserved = placed_dec < 0  # never reached a decode instance: unfinishable at prefill
    frame.loc[unserved, "unfinishable"] = True
    frame.insert(0, "request", np.arange(len(frame)))
    frame.insert(1, "replica", np.where(unserved, placed_pre, placed_dec + n_pre))
    frame["prefill_replica"] = placed_pre
    frame["prefill_done_s"] = prefill_table.first_token
    frame["kv_landed_s"] = landed
    stats = [
        replica_stats(i, built[i], setups[i].memory, setups[i].max_seqs, logs[i])
        for i in range(len(built))
    ]
    windows = pd.concat([logs[i].frame(i) for i in range(len(built))], ignore_index=True)
    return FleetRun(frame, windows, stats, window_s, prefill_replicas=n_pre)
