"""The SimPy model of one replica serving a workload with speculative decoding.

Read one iteration top to bottom in :meth:`Replica.run`: schedule → draft → verify → accept →
update KV and metrics. Requests arrive through a SimPy process (Poisson) or are replaced the
moment one finishes (closed loop at fixed concurrency).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass

import numpy as np
import pandas as pd
import simpy

from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.methods import sampled_from_trace
from simspec.catalog.models import ModelShape, load_model
from simspec.config import Scenario
from simspec.engine.acceptance.inversion import run_alpha_profile
from simspec.engine.acceptance.samplers import AcceptanceSampler, build_sampler
from simspec.engine.costmodel import BatchShape, CostModel, RooflineCostModel, StepCost
from simspec.engine.kv_cache import BlockPool, MemoryPlan, plan_memory
from simspec.engine.metrics import IterationLog, summarize
from simspec.engine.requests import RequestTable
from simspec.engine.scheduler import ScheduledBatch, Scheduler
from simspec.engine.speculators import Speculator, build_speculator
from simspec.engine.workload import arrival_gaps, generate_requests
from simspec.errors import ScenarioError

_NO_IDS = np.zeros(0, dtype=np.int64)


@dataclass
class SimResult:
    """Everything one run produced: per-request and per-iteration records plus a summary."""

    scenario: Scenario
    requests: pd.DataFrame
    iterations: pd.DataFrame
    summary: dict[str, float]
    memory: MemoryPlan


class Replica:
    """One model replica: a scheduler, a speculator and the cost model, stepping in SimPy time."""

    def __init__(
        self,
        env: simpy.Environment,
        table: RequestTable,
        scheduler: Scheduler,
        speculator: Speculator,
        acceptance: AcceptanceSampler | None,
        cost: CostModel,
        target: ModelShape,
        log: IterationLog,
        on_finish: Callable[[int], None],
    ) -> None:
        self.env, self.t, self.sched = env, table, scheduler
        self.spec, self.acc, self.cost, self.target = speculator, acceptance, cost, target
        self.log, self.on_finish = log, on_finish
        # without a load policy every iteration has the same draft shape: read it once
        cfg = speculator.cfg
        fixed = not (cfg.k_schedule or cfg.tree_schedule or cfg.disable_by_batch_size)
        k0, nodes0 = speculator.shape_for(1)
        self._shape = (k0, nodes0, speculator.verify_tokens_for(k0, nodes0)) if fixed else None
        self._ones = np.ones(max(len(table), 1), dtype=np.int64)  # read only
        self._idle: simpy.Event | None = None
        self.expected = len(table)
        # host work of a speculative step outside the forwards (tree masks, acceptance, KV
        # compaction), counted with the draft time
        self._spec_overhead = speculator.engine["spec_step_overhead_s"]

    def arrive(self, rid: int) -> None:
        self.t.arrival[rid] = self.env.now
        if self.acc is not None:
            self.acc.start(rid, int(self.t.trace_index[rid]))
        self.sched.add(rid)
        if self.t.unfinishable[rid]:
            self.expected -= 1
            self.on_finish(rid)
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()

    def run(self) -> Generator[simpy.Event, None, None]:
        """The SimPy process: one loop turn is one engine iteration."""
        t = self.t
        while self.expected > 0:
            if not self.sched.has_work:
                self._idle = self.env.event()
                yield self._idle
                continue
            # 1. schedule
            batch = self.sched.schedule()
            if batch.empty:
                raise ScenarioError(
                    "the scheduler could not place any request: KV blocks or "
                    "token budget too small for a single request"
                )
            d, p = batch.decode, batch.prefill
            kv_d = t.computed[d]
            # the draft and the verify pass both read the sum (one element: no reduction call)
            kv_sum = float(kv_d[0]) if len(kv_d) == 1 else float(kv_d.sum())
            # this iteration's draft length and tree budget (a policy may change them with load)
            if self._shape is None:
                k, nodes = self.spec.shape_for(len(d) + len(p))
                width = self.spec.verify_tokens_for(k, nodes)
            else:
                k, nodes, width = self._shape
            # 2. draft (decoding sequences only)
            draft_s = 0.0
            if k:
                draft_s = (
                    self.spec.draft_cost(kv_d, t.last_step_tokens[d], kv_sum, k, nodes).total_s
                    + self._spec_overhead
                )
            # 3. verify: one target forward over the verify chains/trees and the prefill chunks
            verify, prefill_done = self._verify_cost(batch, kv_d, kv_sum, width)
            verify_s = verify.total_s
            start = self.env.now
            yield self.env.timeout(draft_s + verify_s)
            # 4. accept, and 5. update KV and counters
            emitted, decoded_out = self._accept(d, kv_d, k, nodes)
            first = self._advance_prefill(p, batch.chunks, prefill_done)
            made = int(emitted.sum()) if k else len(d)
            query = len(d) * width + (int(batch.chunks.sum()) if len(p) else 0)
            self.log.record(
                start,
                self.env.now - start,
                len(d),
                len(p),
                query,
                made + len(first),
                made if k else 0,
                len(d) if k else 0,
                draft_s,
                verify_s - verify.overhead_s,
                verify.overhead_s,
                self.sched.pool.used,
            )
            self._finish(decoded_out, first)

    def _verify_cost(
        self, batch: ScheduledBatch, kv_d: np.ndarray, kv_sum: float, width: int
    ) -> tuple[StepCost, np.ndarray]:
        """Target forward time, and which prefill chunks complete their prompt this step.
        Every verified position needs logits; a tree's positions are costed like a chain of
        the same width (attention kernels compute the masked block whole)."""
        d, p, chunks = batch.decode, batch.prefill, batch.chunks
        shape = BatchShape.uniform(len(d), width, kv_sum, len(d) * width)
        if len(p) == 0:
            return self.cost.forward(self.target, shape), _NO_IDS
        kv_p = self.t.computed[p]
        prefill_done = p[kv_p + chunks == self.t.num_tokens(p)]
        # a completed prompt needs logits for its last position (its first output token)
        shape += BatchShape.of(chunks, kv_p, len(prefill_done))
        return self.cost.forward(self.target, shape), prefill_done

    def _accept(
        self, d: np.ndarray, kv_d: np.ndarray, k: int, nodes: int | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Tokens each decoding sequence emits (the accepted prefix plus one, cut at its end), and
        the sequences that thereby reach their output length."""
        t = self.t
        if len(d) == 0:
            return _NO_IDS, _NO_IDS
        generated = t.generated[d]
        remaining = t.output_len[d] - generated
        if k > 0:
            accepted = self.acc.accept_counts(d, generated, k, nodes)
            # a step yields the accepted drafts plus one sampled token; as many enter the KV
            # (the input token and the accepted drafts)
            step_tokens = accepted + 1
            emitted = np.minimum(step_tokens, remaining)
            t.computed[d] = kv_d + step_tokens
            t.last_step_tokens[d] = step_tokens
            t.add_spec_step(d, emitted)
        else:
            emitted = self._ones[: len(d)]  # never written through
            t.computed[d] = kv_d + 1
        t.generated[d] = generated + emitted
        out = emitted >= remaining
        # most steps finish nothing: count first, which is cheaper than a boolean index
        return emitted, (d[out] if np.count_nonzero(out) else _NO_IDS)

    def _advance_prefill(self, p: np.ndarray, chunks: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Chunks enter the KV cache; a completed prompt samples its next (first) token."""
        if len(p) == 0:
            return _NO_IDS
        t = self.t
        t.computed[p] += chunks
        t.generated[done] += 1
        t.decoding[done] = True
        fresh = done[np.isnan(t.first_token[done])]
        t.first_token[fresh] = self.env.now
        return done

    def _finish(self, decoded_out: np.ndarray, first: np.ndarray) -> None:
        """Requests that reached their output length leave: those that just decoded their last
        token, then those whose first token (from prefill) was also their last."""
        t = self.t
        done = decoded_out
        if len(first):
            out = t.generated[first] >= t.output_len[first]
            if np.count_nonzero(out):
                done = np.concatenate([done, first[out]])
        if len(done):
            t.finish[done] = self.env.now
            self.sched.finish(done)
            self.expected -= len(done)
            for rid in done.tolist():
                self.on_finish(rid)


def build_cost_model(sc: Scenario) -> RooflineCostModel:
    gpu, engine = load_gpu(sc.gpu), load_engine(sc.engine)
    overhead = engine.step_overhead(speculative=sc.method.name != "autoregressive")
    return RooflineCostModel(
        gpu, load_profile(sc.profile or sc.gpu), engine, sc.tp, overhead, pp=sc.pp
    )


def check(sc: Scenario) -> None:
    """Raise the error ``simulate(sc)`` would raise while setting up (an unknown preset, a
    draft of another tokenizer, a model that does not fit), without running anything: sweeps
    check every cell before the first run."""
    _setup(sc)


def _setup(sc: Scenario):
    target = load_model(sc.model)
    engine = load_engine(sc.engine)
    cost = build_cost_model(sc)
    spec = build_speculator(sc.method, target, cost, engine)
    max_seqs = int(sc.scheduler.max_num_seqs or engine["max_num_seqs"])
    max_tokens = int(sc.scheduler.max_num_batched_tokens or engine["max_num_batched_tokens"])
    if max_tokens < spec.verify_tokens:
        raise ScenarioError(
            f"max_num_batched_tokens={max_tokens} cannot hold one verify step of "
            f"{spec.verify_tokens} tokens"
        )
    memory = plan_memory(
        cost.gpu,
        target,
        sc.tp,
        engine,
        spec.extra_weight_bytes(),
        spec.extra_kv_bytes_per_token(),
        max_tokens,
        min(max_seqs * spec.verify_tokens, max_tokens),  # logit rows fit in the token budget
        sc.pp,
    )
    return target, cost, spec, max_seqs, max_tokens, memory


def simulate(sc: Scenario) -> SimResult:
    """Run one scenario to completion (every request finishes or is reported unfinishable)."""
    target, cost, spec, max_seqs, max_tokens, memory = _setup(sc)

    seeds = np.random.SeedSequence(sc.seed).spawn(3)
    rng_workload, rng_accept, rng_arrival = (np.random.default_rng(s) for s in seeds)
    specs = generate_requests(sc.workload, rng_workload)
    table = RequestTable(specs)
    acceptance = None
    if spec.needs_acceptance:
        acc = sc.method.acceptance
        sampling = sc.temperature != acc.temperature or sc.top_p < 1.0
        sampled = sc.temperature > 0  # tree candidates verified by recursive rejection
        if acc.trace is not None and sampling:
            acc = sampled_from_trace(acc, spec.max_accept, spec.drafter_kind)
        profile = None
        if acc.trace is None:  # a static tree is built for the mean α profile
            profile = run_alpha_profile(
                acc, spec.max_accept, spec.depth_decay, sc.temperature, sc.top_p
            )
            spec.resolve_tree(profile, sampled)
        acceptance = build_sampler(
            acc,
            spec.max_accept,
            len(table),
            rng_accept,
            workload_trace=sc.workload.trace,
            decay=spec.depth_decay,
            tree=spec.tree_shape,
            static_trees=spec.trees,
            alpha=profile,
            budgets=spec.budgets,
            sampled=sc.temperature > 0,
        )
    pool = BlockPool(memory.num_blocks)
    scheduler = Scheduler(
        table, pool, memory.block_size, max_seqs, max_tokens, spec.verify_tokens - 1
    )
    env = simpy.Environment()
    log = IterationLog()
    next_rid = 0
    wl = sc.workload

    def release_next(_finished: int) -> None:
        nonlocal next_rid
        if wl.arrival == "closed" and next_rid < len(table):
            next_rid += 1
            replica.arrive(next_rid - 1)

    replica = Replica(env, table, scheduler, spec, acceptance, cost, target, log, release_next)

    def poisson_arrivals():
        for rid, gap in enumerate(arrival_gaps(wl, len(table), rng_arrival)):
            yield env.timeout(gap)
            replica.arrive(rid)

    if wl.arrival == "closed":
        for _ in range(min(wl.concurrency, len(table))):
            release_next(-1)
    else:
        env.process(poisson_arrivals())
    env.process(replica.run())
    env.run()

    requests = _request_frame(table)
    iterations = log.frame()
    summary = summarize(requests, iterations, wl, pool.peak_used, memory)
    summary["kv_blocks_in_use_end"] = float(pool.used)  # every block back once all have left
    return SimResult(sc, requests, iterations, summary, memory)


def _request_frame(t: RequestTable) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "arrival_s": t.arrival,
            "first_token_s": t.first_token,
            "finish_s": t.finish,
            "prompt_tokens": t.prompt_len,
            "output_tokens": t.generated,
            "requested_output_tokens": t.output_len,
            "spec_steps": t.spec_steps,
            "accepted_tokens": t.accepted,
            "preemptions": t.preemptions,
            "unfinishable": t.unfinishable,
        }
    )
