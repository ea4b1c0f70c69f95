"""A prefill/decode-disaggregated fleet: prefill instances and decode instances in one SimPy
environment, the prompt's KV sent from one to the other.

Each request arrives at a prefill instance (the fleet's router over the prefill instances),
which runs its prompt and samples its first token, as SGLang's prefill server
(``--disaggregation-mode prefill``: python/sglang/srt/disaggregation/prefill.py) and vLLM's
``kv_producer`` do: here a replica whose requests end after one output token. Its KV then
travels to a decode instance (the same router over the decode instances, at the moment the
transfer lands) and waits there for a slot and blocks (SGLang's ``DecodePreallocQueue``:
:meth:`~simspec.engine.replica.Replica.arrive` at a decode instance). The client's first token
is the decode instance's: TTFT runs from the arrival at the prefill instance to the admission
at the decode instance, through the prefill's queue and compute and the transfer.

Each GPU of the prefill instance sends its own slice of the KV over its own NIC (DGX
H100/H200/B200: one 400 Gb/s ConnectX-7 per GPU), at ``KV bytes per token per GPU / link
bandwidth`` a token, and the KV lands ``latency`` after its last byte leaves. When it leaves
is the engine's (:class:`KvSender`, engines.yaml ``kv_send_per_chunk``):

- whole, after the prefill: vLLM's decode instance reads a finished prefill's blocks
  (NixlConnector: the kv_producer's request_finished hands back the block ids, the consumer's
  start_load_kv reads them), TensorRT-LLM's context server sends a finished context request's
  cache; the exposed transfer is ``latency + prompt tokens x seconds per token``;
- chunk by chunk: SGLang's prefill server sends each chunk of a chunked prompt as its forward
  ends (``send_kv_chunk`` from process_batch_result_disagg_prefill, python/sglang/srt/
  disaggregation/prefill.py), the last one when the prompt completes, so what is left after
  the prefill is the last chunk's and whatever of the earlier ones the link had not sent yet.

Not modelled: a prefill instance holding a finished request's KV while no decode instance has
room (SGLang's prefill inflight queue; here the prefill instance frees it at once), links
shared by concurrent transfers (each request's chunks go one after another, requests side by
side), the one-step delay of SGLang's overlap scheduler (a chunk's send waits for the next
step's result processing), a chunk resent after a preemption on the prefill instance (sent
once here), and prefill and decode instances of different layouts.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import numpy as np
import pandas as pd
import simpy

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
    check_span,
    fleet_requests,
    max_windows,
    replica_stats,
    route_arrivals,
)
from simspec.engine.replica import Replica, ReplicaSetup
from simspec.engine.requests import RequestTable
from simspec.engine.simulation import request_frame
from simspec.engine.workload import RequestSpecs


def prefill_scenario(decode: Scenario) -> Scenario:
    """The prefill instances' deployment: the decode instances' own, serving whole requests
    (they end after the first token: :func:`simulate_disaggregated`)."""
    return decode.model_copy(update={"disaggregation_mode": "null"})


def transfer_s(
    prompt_tokens: int, kv_bytes_per_token: float, gbps: float, latency_s: float
) -> float:
    """Seconds to send a prompt's KV from a prefill instance to a decode instance: each GPU
    its own slice (``kv_bytes_per_token`` per GPU) over its own ``gbps`` link."""
    return latency_s + prompt_tokens * kv_bytes_per_token * 8.0 / (gbps * 1e9)


class KvSender:
    """When each request's KV has left its prefill instance, and the delay to its landing.
    ``per_chunk``: each prompt chunk leaves as its forward ends (SGLang), one after another
    over the request's link; else the whole prompt leaves after the prefill (vLLM,
    TensorRT-LLM)."""

    def __init__(
        self, n: int, kv_bytes_per_token: float, gbps: float, latency_s: float, per_chunk: bool
    ) -> None:
        self.kv_bytes, self.gbps, self.latency_s = kv_bytes_per_token, gbps, latency_s
        self.per_chunk = per_chunk
        self.sent = np.zeros(n, dtype=np.int64)  # prompt tokens whose KV has been sent
        self.link_free = np.zeros(n)  # when the request's last sent chunk has left

    def chunks(self, now: float, ids: np.ndarray, in_cache: np.ndarray) -> None:
        """Prompt chunks of ``ids`` ended at ``now``, each request with ``in_cache`` prompt
        tokens in the KV cache: the tokens not sent yet leave after what is on the link."""
        for rid, tokens in zip(ids.tolist(), in_cache.tolist(), strict=True):
            fresh = tokens - int(self.sent[rid])
            if fresh <= 0:  # recomputed after a preemption: sent already
                continue
            start = max(now, float(self.link_free[rid]))
            self.link_free[rid] = start + transfer_s(fresh, self.kv_bytes, self.gbps, 0.0)
            self.sent[rid] = tokens

    def delay(self, rid: int, now: float, prompt: int) -> float:
        """Seconds from the prefill's end at ``now`` to the KV's landing at a decode instance:
        what the link still has to send of the prompt, then the latency."""
        rest = max(prompt - int(self.sent[rid]), 0)
        waiting = max(float(self.link_free[rid]) - now, 0.0)
        return waiting + transfer_s(rest, self.kv_bytes, self.gbps, self.latency_s)


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
    setups = [setup_replica(sc) for sc in scenarios]
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
    sender = KvSender(
        len(specs),
        setups[0].memory.kv_bytes_per_token,
        pool.kv_transfer_gbps,
        pool.kv_transfer_latency_ms / 1e3,
        per_chunk=setups[0].speculator.engine.flag("kv_send_per_chunk"),
    )
    landed = np.full(len(specs), np.nan)
    placed_pre = np.full(len(specs), -1, dtype=np.int64)
    placed_dec = np.full(len(specs), -1, dtype=np.int64)

    def transfer(rid: int) -> Generator[simpy.Event, None, None]:
        yield env.timeout(sender.delay(rid, env.now, int(specs.prompt_len[rid])))
        landed[rid] = env.now
        j = to_decode.pick(rid)
        placed_dec[rid] = j
        to_decode.outstanding[j] += 1
        built[n_pre + j].arrive(rid)

    def prefilled(j: int) -> Callable[[int], None]:
        left = to_prefill.left(j)

        def done(rid: int) -> None:
            left(rid)
            if prefill_table.unfinishable[rid]:  # too long for a prefill instance: no KV
                decode_table.unfinishable[rid] = True
                return
            env.process(transfer(rid))

        return done

    def chunked(ids: np.ndarray, in_cache: np.ndarray) -> None:
        sender.chunks(env.now, ids, in_cache)

    for j in range(n_pre):
        built[j].on_finish = prefilled(j)
        if sender.per_chunk:
            built[j].on_chunk = chunked
    for i in range(n_dec):
        built[n_pre + i].on_finish = to_decode.left(i)
    env.process(route_arrivals(env, to_prefill, prefills, gaps, placed_pre, progress))
    # every instance waits for work until no event is left (as a fleet's replicas do)
    for replica in built:
        env.process(replica.run())
    env.run()
    return _run(
        decode_table, prefill_table, placed_pre, placed_dec, landed, built, setups, logs,
        n_pre, window_s,
    )  # fmt: skip


def _run(
    decode_table: RequestTable,
    prefill_table: RequestTable,
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
    frame = request_frame(decode_table)
    frame["arrival_s"] = prefill_table.arrival
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
