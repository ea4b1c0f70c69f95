"""One model replica serving requests with speculative decoding, one engine iteration at a time.

Read one iteration top to bottom in :meth:`Replica.run`: schedule → draft → verify → accept →
update KV, counters and metrics. Each step's model lives in its own module: the scheduler
(:mod:`~simspec.engine.scheduler`), the speculator's draft cost and load policy
(:mod:`~simspec.engine.speculators`), the target's forward (:mod:`~simspec.engine.costmodel`)
and acceptance (:mod:`~simspec.engine.acceptance`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass

import numpy as np
import simpy

from simspec.catalog.models import ModelShape
from simspec.engine.acceptance.samplers import AcceptanceSampler
from simspec.engine.costmodel import BatchShape, RooflineCostModel, StepCost
from simspec.engine.kv_cache import BlockPool, MemoryPlan
from simspec.engine.load_policy import StepShape
from simspec.engine.metrics import IterationLog, IterationRecord
from simspec.engine.requests import RequestTable
from simspec.engine.scheduler import ScheduledBatch, Scheduler
from simspec.engine.speculators import DraftStep, Speculator
from simspec.errors import ScenarioError

_NO_IDS = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class ReplicaSetup:
    """What a scenario resolves to before anything runs: the target and its cost model, the
    method's speculator, the scheduler's limits and the GPU memory plan."""

    target: ModelShape
    cost: RooflineCostModel
    speculator: Speculator
    max_seqs: int
    max_tokens: int
    memory: MemoryPlan


def _no_listener(rid: int) -> None:
    pass


class Replica:
    """One model replica: a scheduler over a KV block pool, a speculator and the cost model,
    stepping in SimPy time. ``on_finish`` hears of every request that leaves (a closed loop
    lets the next one in)."""

    def __init__(
        self,
        env: simpy.Environment,
        setup: ReplicaSetup,
        table: RequestTable,
        acceptance: AcceptanceSampler | None,
    ) -> None:
        self.env, self.t, self.acc = env, table, acceptance
        self.spec, self.cost, self.target = setup.speculator, setup.cost, setup.target
        self.pool = BlockPool(setup.memory.num_blocks)
        self.sched = Scheduler(
            table,
            self.pool,
            setup.memory.block_size,
            setup.max_seqs,
            setup.max_tokens,
            self.spec.verify_tokens - 1,
        )
        self.log = IterationLog()
        self.on_finish: Callable[[int], None] = _no_listener
        self.expected = len(table)  # requests still to finish
        self._idle: simpy.Event | None = None
        self._ones = np.ones(max(len(table), 1), dtype=np.int64)  # read only
        # host work of a speculative step outside the forwards (tree masks, acceptance, KV
        # compaction), counted with the draft time
        self._spec_overhead = self.spec.engine["spec_step_overhead_s"]
        # a lookup replayed on token streams says what each sequence proposed; unless the
        # engine pads every draft to one width, a sequence verifies only that
        self._proposals = getattr(acceptance, "proposals", None)
        self._ragged = self._proposals is not None and not acceptance.proposer.padded

    def arrive(self, rid: int) -> None:
        """Request ``rid`` joins the queue now (or leaves at once when it can never fit)."""
        self.t.arrival[rid] = self.env.now
        if self.acc is not None:
            self.acc.start(rid, int(self.t.trace_index[rid]))
        self.sched.add(rid)
        if self.t.unfinishable[rid]:
            self.expected -= 1
            self.on_finish(rid)
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()

    def resume(self, rid: int, generated: int) -> None:
        """Request ``rid`` is already decoding when the run starts, ``generated`` tokens
        produced (a closed loop's stationary start: see ``workload.stationary_cohort``)."""
        t = self.t
        t.arrival[rid] = t.first_token[rid] = self.env.now
        t.generated[rid] = t.before_start[rid] = generated
        if self.acc is not None:
            self.acc.start(rid, int(t.trace_index[rid]))
        self.sched.resume(rid)
        if t.unfinishable[rid]:
            self.expected -= 1
            self.on_finish(rid)

    def run(self) -> Generator[simpy.Event, None, None]:
        """The SimPy process: one loop turn is one engine iteration."""
        while self.expected > 0:
            if not self.sched.has_work:
                self._idle = self.env.event()
                yield self._idle  # until a request arrives
                continue
            # 1. schedule: who runs, and the draft the load policy picks for that many
            batch = self._schedule()
            d = batch.decode
            kv_d = self.t.computed[d]  # the decoding sequences' contexts
            # the draft and the verify pass both read the sum (one element: no reduction call)
            kv_sum = float(kv_d[0]) if len(kv_d) == 1 else float(kv_d.sum())
            shape = self.spec.step_shape(len(d) + len(batch.prefill))
            proposed = self._proposed(d, shape)
            widths = proposed + 1 if self._ragged and proposed is not None else None
            # 2. draft and 3. verify (one target forward, prefill chunks included) take this long
            draft_s = self._draft_time(d, kv_d, kv_sum, shape)
            verify, prefill_done = self._verify_cost(batch, kv_d, kv_sum, shape.width, widths)
            verify_s = verify.total_s
            start = self.env.now
            yield self.env.timeout(draft_s + verify_s)
            # 4. accept, and 5. update KV, counters and metrics; finished requests leave
            emitted, decoded_out = self._accept(d, kv_d, shape)
            first = self._advance_prefill(batch, prefill_done)
            self._record(start, batch, shape, emitted, first, draft_s, verify, proposed, widths)
            self._finish(decoded_out, first)

    # -- the steps of one iteration --------------------------------------------------------
    def _schedule(self) -> ScheduledBatch:
        batch = self.sched.schedule()
        if batch.empty:
            raise ScenarioError(
                "the scheduler could not place any request: KV blocks or "
                "token budget too small for a single request"
            )
        return batch

    def _proposed(self, d: np.ndarray, shape: StepShape) -> np.ndarray | None:
        """Draft tokens each decoding sequence proposes this step, where the acceptance source
        knows (a lookup replay); None: every sequence drafts the step's full shape."""
        if self._proposals is None or not shape.k or len(d) == 0:
            return None
        return self._proposals(d, self.t.generated[d], shape.k)

    def _draft_time(
        self, d: np.ndarray, kv_d: np.ndarray, kv_sum: float, shape: StepShape
    ) -> float:
        """Seconds drafting for the decoding sequences ``d`` (none when the step does not
        speculate), with the host work of a speculative step."""
        if not shape.k:
            return 0.0
        step = DraftStep(kv_d, self.t.last_step_tokens[d], kv_sum, shape.k, shape.nodes)
        return self.spec.draft_cost(step).total_s + self._spec_overhead

    def _verify_cost(
        self,
        batch: ScheduledBatch,
        kv_d: np.ndarray,
        kv_sum: float,
        width: int,
        widths: np.ndarray | None,
    ) -> tuple[StepCost, np.ndarray]:
        """One target forward over the verify chains/trees and the prefill chunks, and which
        chunks complete their prompt. Every verified position needs logits; a tree's positions
        are costed like a chain of the same width (attention kernels compute the masked block
        whole). ``widths``: each decoding sequence's own verify width, when they differ."""
        d, p, chunks = batch.decode, batch.prefill, batch.chunks
        if widths is not None and len(widths) == 1:  # one sequence: its own width, uniformly
            width, widths = int(widths[0]), None
        if widths is None:
            shape = BatchShape.uniform(len(d), width, kv_sum, len(d) * width)
        else:
            shape = BatchShape.of(widths, kv_d, int(widths.sum()), kv_sum)
        if len(p) == 0:
            return self.cost.forward(self.target, shape), _NO_IDS
        kv_p = self.t.computed[p]
        prefill_done = p[kv_p + chunks == self.t.num_tokens(p)]
        # a completed prompt needs logits for its last position (its first output token)
        shape += BatchShape.of(chunks, kv_p, len(prefill_done))
        return self.cost.forward(self.target, shape), prefill_done

    def _accept(
        self, d: np.ndarray, kv_d: np.ndarray, shape: StepShape
    ) -> tuple[np.ndarray, np.ndarray]:
        """Tokens each decoding sequence emits (the accepted prefix plus one, cut at its end),
        and the sequences that thereby reach their output length."""
        t = self.t
        if len(d) == 0:
            return _NO_IDS, _NO_IDS
        generated = t.generated[d]
        remaining = t.output_len[d] - generated
        if shape.k > 0:
            accepted = self.acc.accept_counts(d, generated, shape.k, shape.nodes)
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

    def _advance_prefill(self, batch: ScheduledBatch, done: np.ndarray) -> np.ndarray:
        """Chunks enter the KV cache; a completed prompt samples its next (first) token."""
        p = batch.prefill
        if len(p) == 0:
            return _NO_IDS
        t = self.t
        t.computed[p] += batch.chunks
        t.generated[done] += 1
        t.decoding[done] = True
        fresh = done[np.isnan(t.first_token[done])]
        t.first_token[fresh] = self.env.now
        return done

    def _record(
        self,
        start: float,
        batch: ScheduledBatch,
        shape: StepShape,
        emitted: np.ndarray,
        first: np.ndarray,
        draft_s: float,
        verify: StepCost,
        proposed: np.ndarray | None,
        widths: np.ndarray | None,
    ) -> None:
        """The iteration's row in the log (``verify``: the target forward, host overhead
        included)."""
        decode, prefill = len(batch.decode), len(batch.prefill)
        made = int(emitted.sum()) if shape.k else decode
        verify_s, overhead_s = verify.total_s, verify.overhead_s
        decode_tokens = decode * shape.width if widths is None else int(widths.sum())
        no_proposal = 0 if proposed is None else decode - int(np.count_nonzero(proposed))
        # positional, in IterationRecord's field order: a third cheaper than keywords here
        self.log.record(
            IterationRecord(
                start,  # start_s
                self.env.now - start,  # duration_s
                decode,  # decode_seqs
                prefill,  # prefill_seqs
                decode_tokens + (int(batch.chunks.sum()) if prefill else 0),  # query_tokens
                made + len(first),  # output_tokens
                made if shape.k else 0,  # spec_tokens
                decode if shape.k else 0,  # spec_seqs
                draft_s,
                verify_s - overhead_s,  # verify_s: the target forward without host overhead
                overhead_s,
                self.pool.used,  # kv_blocks_used
                decode_tokens,
                no_proposal,  # no_proposal_seqs
            )
        )

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
