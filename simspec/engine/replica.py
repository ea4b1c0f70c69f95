"""One model replica serving requests with speculative decoding, one engine iteration at a time.

Read one iteration top to bottom in :meth:`Replica.run`: schedule → draft → verify → accept →
update KV, counters and metrics. Each step's model lives in its own module: the scheduler
(:mod:`~simspec.engine.scheduler`), the speculator's draft cost and load policy
(:mod:`~simspec.engine.speculators`), the target's forward (:mod:`~simspec.engine.costmodel`)
and acceptance (:mod:`~simspec.engine.acceptance`). What one iteration computes travels in a
:class:`Step`. A replica whose only events are its own iterations (a closed loop) steps the
same iterations without SimPy's event queue (:meth:`Replica.run_alone`), and there a request
that decodes alone, or a batch that decodes on unchanged until one of its requests finishes,
without building a batch each step (:meth:`Replica._decode_alone`, :meth:`Replica._decode_steady`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass

import numpy as np
import simpy

from simspec.catalog.models import ModelShape
from simspec.engine.acceptance.samplers import (
    AcceptanceSampler,
    ParametricAcceptance,
    TokenReplayAcceptance,
    TraceAcceptance,
)
from simspec.engine.costmodel import BatchShape, RooflineCostModel
from simspec.engine.kv_cache import BlockPool, MemoryPlan
from simspec.engine.load_policy import StepShape
from simspec.engine.metrics import IterationLog, IterationRecord, IterationSink
from simspec.engine.requests import RequestTable
from simspec.engine.runs_at_once import (
    NO_IDS,
    RUN_AT_ONCE,
    Carry,
    EagleHeadDraftS,
    RunsAtOnce,
    StepClock,
)
from simspec.engine.scheduler import ScheduledBatch, Scheduler
from simspec.engine.speculators import Autoregressive, DraftStep, Speculator
from simspec.engine.speculators.eagle import EagleHead, FixedChain
from simspec.errors import ScenarioError


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
    prefix_caching: bool = False  # a preempted request's blocks stay cached for its return
    # admit a request only when the blocks of its whole output are free (TRT-LLM's
    # GUARANTEED_NO_EVICT capacity scheduler): nothing is ever preempted
    reserve_output: bool = False
    # run a prefill batch whenever one can be formed, decoding only when none can (SGLang)
    prefill_first: bool = False
    # SGLang's admission reservation (Scheduler decode_reserve); None: none
    decode_reserve: tuple[float, float, float, int] | None = None
    # give a decode at the budget's edge what is left, its draft trimmed (vLLM V1)
    trim_drafts: bool = False
    # KV tokens past each running request's ask for the drafter's next positions (vLLM V1)
    lookahead_slots: int = 0
    # split a prompt at the token budget (chunked prefill); else admit it whole or not yet
    chunk_prompts: bool = True
    # share of the pool a prompt's admission must leave free (vLLM V0's block watermark)
    admission_watermark: float = 0.0
    # retract the request with the fewest outputs first when decodes run short (SGLang)
    retract_by_progress: bool = False
    # a retracted request waits behind the queue, not at its front (SGLang)
    requeue_at_back: bool = False
    # a retracted request's cache keeps its prompt alone, its outputs freed (SGLang)
    cache_prompt_only: bool = False
    # a prefix-cache hit gives back its last block to recompute (vLLM V1 under EAGLE or MTP)
    drop_last_hit: bool = False
    # the decode instance of a prefill/decode-disaggregated deployment: requests arrive with
    # their prompt's KV and first token (Deployment.disaggregation_mode)
    decode_instance: bool = False
    # a decode instance that recomputes each arriving prompt's last token and samples the
    # first token itself (vLLM: engines.yaml pd_decode_recomputes_last_token)
    recompute_first: bool = False
    # a decode instance's admission reservation (Scheduler transfer_reserve); None: none
    transfer_reserve: tuple[int, int] | None = None


@dataclass(slots=True)
class Step:
    """What one engine iteration computes, filled in as it goes: who runs and the draft they
    take (at scheduling), what drafting and verifying cost, what the step emitted. Built with
    every field given (a default factory would run on the hot loop)."""

    start_s: float
    batch: ScheduledBatch
    decoding: np.ndarray  # ids of the decoding sequences (``batch.decode``)
    context_lens: np.ndarray  # their tokens in the KV cache before the step
    context_sum: float  # the sum of ``context_lens``: the draft and the verify pass read it
    draft: StepShape  # the draft the load policy picks at this batch size
    # draft tokens each decoding sequence proposes, where the acceptance source knows (a
    # lookup replay); None: every sequence drafts the full shape
    proposed: np.ndarray | None
    widths: np.ndarray | None  # each one's verify width when they differ; None: draft.width
    draft_s: float  # drafting, with the host work of a speculative step
    verify_s: float  # the target forward, its host overhead included
    verify_overhead_s: float  # of verify_s, the host overhead
    prefill_done: np.ndarray  # prefilling requests whose chunk completes their prompt
    emitted: np.ndarray  # tokens each decoding sequence made
    # requests whose prefill completed and sampled their first token
    first: np.ndarray
    made: int  # tokens the decoding sequences made (the sum of ``emitted``)
    # the prompt chunks' tokens in KV before the step and their shape (logits at each
    # chunk's last token), built once for the draft's prompt pass and the verify
    # (:meth:`Replica._prompt`); None until one asks
    prompt: tuple[np.ndarray, BatchShape] | None


_new_record = tuple.__new__  # IterationRecord from a tuple of its fields (see _record)


def _trimmed_last(widths: np.ndarray | None, width: int, edge: int, n: int) -> np.ndarray | None:
    """The decoding sequences' verify widths when the last one's draft was trimmed to
    ``edge`` tokens (Scheduler trim_drafts); unchanged where it verifies no more already."""
    last = width if widths is None else int(widths[-1])
    if edge >= last:
        return widths
    out = np.full(n, width, dtype=np.int64) if widths is None else widths.copy()
    out[-1] = edge
    return out


def _no_listener(rid: int) -> None:
    pass


class _WaitForRoom(Exception):
    """Nothing fits: blocks are held for KV on its way (sent from a prefill instance, or
    preallocated at a decode instance), which frees them or lands in them."""


class Replica(RunsAtOnce):
    """One model replica: a scheduler over a KV block pool, a speculator and the cost model,
    stepping in SimPy time. ``on_finish`` hears of every request that leaves (a closed loop
    lets the next one in)."""

    def __init__(
        self,
        env: simpy.Environment | StepClock,
        setup: ReplicaSetup,
        requests: RequestTable,
        acceptance: AcceptanceSampler | None,
        log: IterationSink | None = None,
    ) -> None:
        """``log`` hears of every iteration (default: an :class:`IterationLog`). ``env``: the
        SimPy environment :meth:`run` steps in, or the :class:`StepClock` of
        :meth:`run_alone`."""
        self.env, self.requests, self.acceptance = env, requests, acceptance
        self.spec, self.cost, self.target = setup.speculator, setup.cost, setup.target
        self.pool = BlockPool(setup.memory.num_blocks)
        self.sched = Scheduler(
            requests,
            self.pool,
            setup.memory.block_size,
            setup.max_seqs,
            setup.max_tokens,
            self.spec.verify_tokens - 1,
            prefix_caching=setup.prefix_caching,
            reserve_output=setup.reserve_output,
            prefill_first=setup.prefill_first,
            decode_reserve=setup.decode_reserve,
            trim_drafts=setup.trim_drafts,
            lookahead_slots=setup.lookahead_slots,
            rank_blocks=setup.memory.num_blocks // setup.memory.dp,
            chunk_cap=setup.max_tokens // setup.memory.dp,
            chunk_prompts=setup.chunk_prompts,
            watermark_blocks=int(setup.admission_watermark * setup.memory.num_blocks),
            retract_by_progress=setup.retract_by_progress,
            requeue_at_back=setup.requeue_at_back,
            cache_prompt_only=setup.cache_prompt_only,
            drop_last_hit=setup.drop_last_hit,
            window=setup.memory.window,
            transfer_reserve=setup.transfer_reserve,
            ranks_apart=(
                setup.memory.dp
                if setup.prefill_first and isinstance(self.spec, Autoregressive)
                else 1
            ),
        )
        # a stand-alone decode instance too (QA: on vLLM its first token came free, one step
        # sooner than the same instance's in a fleet)
        self.sched.recompute_last = setup.recompute_first
        self.log: IterationSink = IterationLog() if log is None else log
        self.on_finish: Callable[[int], None] = _no_listener
        # hears of every prompt chunk that ends (its requests, the prompt tokens each has in
        # the KV cache now): a prefill instance that sends KV chunk by chunk (disaggregation)
        self.on_chunk: Callable[[np.ndarray, np.ndarray], None] | None = None
        # hears of every transfer a decode instance allocated blocks for (Scheduler.awaits_kv),
        # whose prefill (SGLang) or KV transfer (vLLM, TensorRT-LLM) may start now
        self.on_prealloc: Callable[[int], None] = _no_listener
        self.expected = len(requests)  # requests still to finish
        self._idle: simpy.Event | None = None
        # when the run's last request left while KV was still held to be sent (a prefill
        # instance), the time its held blocks were last logged (release)
        self._done_at: float | None = None
        self._ones = np.ones(max(len(requests), 1), dtype=np.int64)  # read only
        # host work of a speculative step outside the forwards (tree masks, acceptance, KV
        # compaction), counted with the draft time
        self._spec_overhead = self.spec.engine["spec_step_overhead_s"]
        # a lookup replayed on token streams says what each sequence proposed; unless the
        # engine pads every draft to one width, a sequence verifies only that
        replay = acceptance if isinstance(acceptance, TokenReplayAcceptance) else None
        self._proposals = None if replay is None else replay.proposals
        self._ragged = replay is not None and not replay.proposer.padded
        # and where the engine's scheduler asks for what each proposed (vLLM V1), its decode's
        # budget and KV are that proposal's, set before each schedule (Scheduler.draft_slots)
        self._asks_proposed = self._ragged and self.spec.engine.flag("decode_asks_proposed")
        if self._asks_proposed:
            self.sched.draft_slots = np.zeros(len(requests), dtype=np.int64)
        # an engine that verifies by batch expansion (vLLM V0) runs each verified token of a
        # chain as a sequence of its own (BatchShape.expanded): a forward the plain paths do
        # not price. Its scorer is top-1 only: a tree (which V0 never shipped) is not expanded
        self._expand = (
            self.spec.k > 0
            and self.spec.tree_kind == "chain"
            and self.spec.engine.flag("verify_by_batch_expansion")
        )
        # the target's forward as floats where it takes the plain path (costmodel.plain)
        self._plain_target = None if self._expand else self.cost.plain(self.target)
        # a draft that changes with the batch size is the running requests' (:meth:`_reserve`)
        self._varies = self.spec.policy.varies
        # the head's own draft and prompt pass (the loops price them from fixed shapes and
        # integers: EagleHead.draft_at, draft_s_one; _draft_time beside its chain)
        self._own_draft = type(self.spec).draft_s is EagleHeadDraftS
        self._own_prompt_s = type(self.spec).prompt_s is EagleHead.prompt_s
        self._carry: Carry | None = None  # the last step's decoding columns (see Carry)
        self._decode_instance = setup.decode_instance
        self._delivered = 0  # first tokens a decode instance delivered this step (admissions)

    def arrive(self, rid: int) -> None:
        """Request ``rid`` joins the queue now (or leaves at once when it can never fit). At
        a decode instance it waits for a slot and blocks, never for a prefill here: it comes
        prefilled (its first token sampled by the prefill instance; vLLM, TensorRT-LLM) or
        before its prefill (SGLang), and under ``awaits_kv`` its KV is sent once its blocks
        are allocated (:meth:`kv_landed`); its first token is delivered when it joins the
        running batch, and a one-token output is delivered and done on arrival (this
        instance never serves it)."""
        r = self.requests
        r.arrival[rid] = self.env.now
        if self.acceptance is not None:
            self.acceptance.start(rid, int(r.trace_index[rid]))
        if self._decode_instance:
            if r.output_len[rid] <= 1 and not self.sched.recompute_last:
                # the prefill instance's token was its whole output,
                # delivered here on arrival (QA: left without a first token or a count, a
                # disaggregated fleet read its TTFT as missing and its SLO as missed)
                r.first_token[rid] = r.finish[rid] = self.env.now
                r.generated[rid] = 1
                self.expected -= 1
                self.on_finish(rid)
                return
            self.sched.add_transferred(rid)
        else:
            self.sched.add(rid)
        if self.requests.unfinishable[rid]:
            self.expected -= 1
            self.on_finish(rid)
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()

    def resume(self, rid: int, generated: int) -> None:
        """Request ``rid`` is already decoding when the run starts, ``generated`` tokens
        produced (a closed loop's stationary start: see ``workload.stationary_cohort``)."""
        r = self.requests
        r.arrival[rid] = r.first_token[rid] = self.env.now
        r.generated[rid] = r.before_start[rid] = generated
        if self.acceptance is not None:
            self.acceptance.start(rid, int(r.trace_index[rid]))
        if self._decode_instance:  # its KV comes from the prefill instance when there is room
            self.sched.add_transferred(rid)
        elif not self.sched.resume(rid) and self.sched.reserve_output and not r.unfinishable[rid]:
            # an engine that never evicts holds no request mid-output outside its batch: a
            # cohort request it cannot place waits as a new arrival, not to recompute its
            # output (QA: TRT-LLM at 1,024 left one to recompute 8,365 tokens, past its
            # unchunked budget, and the run stopped)
            r.generated[rid] = r.before_start[rid] = 0
            r.first_token[rid] = np.nan
        if r.unfinishable[rid]:
            self.expected -= 1
            self.on_finish(rid)

    def run(self) -> Generator[simpy.Event, None, None]:
        """The SimPy process: one loop turn is one engine iteration."""
        env = self.env
        assert isinstance(env, simpy.Environment), "a replica on a StepClock steps in run_alone"
        sched = self.sched
        while self.expected > 0:
            if not sched.has_work:
                yield from self._wait()  # until a request arrives
                continue
            if sched.awaits_kv and not (sched.running or sched.waiting or sched.landed):
                # nothing to run: preallocate what fits, then wait for a KV or an arrival
                sched.admit_transfers()
                self._request_kv()
                yield from self._wait()
                continue
            try:
                step = self._begin()
            except _WaitForRoom:
                yield from self._wait()  # until held KV has left (release) or landed, or an arrival
                continue
            yield env.timeout(step.draft_s + step.verify_s)
            self._end(step)
        if self.pool.used:  # KV still to be sent: its blocks are held until each release
            self._done_at = env.now

    def _wait(self) -> Generator[simpy.Event, None, None]:
        """Idle until an arrival, a release or a landing wakes the replica, the KV blocks it
        holds meanwhile logged (each of those events changes them and ends the wait)."""
        env = self.env
        assert isinstance(env, simpy.Environment)
        start, held = env.now, self.pool.used
        self._idle = env.event()
        yield self._idle
        self.log.hold(start, env.now, held)

    def release(self, rid: int) -> None:
        """The KV of ``rid``, prefilled here and held, has been sent: its blocks are free."""
        if self._done_at is not None:  # the run is over: log what was held until now
            self.log.hold(self._done_at, self.env.now, self.pool.used)
            self._done_at = self.env.now
        self.sched.release(rid)
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()

    def kv_landed(self, rid: int) -> None:
        """The KV of ``rid``, preallocated here, has arrived from its prefill instance: it
        decodes from the next step with a running slot free, its first token delivered then."""
        self.sched.kv_landed(rid)
        if self._idle is not None and not self._idle.triggered:
            self._idle.succeed()

    def _request_kv(self) -> None:
        """Tell the fleet which transfers were preallocated, so their prefills start."""
        requested, self.sched.kv_requested = self.sched.kv_requested, []
        for rid in requested:
            self.on_prealloc(rid)

    def run_alone(self) -> None:
        """:meth:`run` for a replica whose only events are its own iterations (a closed loop,
        whose requests arrive when others leave, in the iteration that frees their slot):
        the same iterations at the same times, on a :class:`StepClock` instead of SimPy's event
        queue. Stops where :meth:`run` would wait for an arrival that never comes."""
        clock = self.env
        assert isinstance(clock, StepClock), "a replica in a SimPy environment steps in run"
        # the loops below step plain forwards only, and admit no transfers
        loops = self._plain_target is not None and not self._decode_instance
        while self.expected > 0 and self.sched.has_work:
            if loops:
                if self._varies:  # the fast paths' checks read the step's reservation
                    self._reserve()
                rid = self.sched.alone()
                if rid is not None and self._decode_alone(rid):
                    continue
                batch = self.sched.steady() if rid is None else None
                if batch is not None and self._decode_steady(batch):
                    continue
            step = self._begin()
            clock.now += step.draft_s + step.verify_s  # as SimPy adds a timeout's delay
            self._end(step)

    def _decode_alone(self, rid: int) -> int:
        """The iterations of request ``rid`` decoding alone (:meth:`Scheduler.alone`), until
        it finishes or its next blocks are not free: :meth:`_begin` and :meth:`_end` of a
        one-sequence decode step, with its columns kept as integers between steps and
        written back to the request table when it leaves the loop (nobody else reads them
        meanwhile). The same calls to the speculator, the cost model and the acceptance
        source with the same values, so the same floats and random draws; only the batch,
        the ``Step`` and the one-element column updates are not built. A run at
        concurrency 1 (the packaged validation's batch-1 series) spends its iterations here.
        Returns the iterations run (0: none, the general step must run: another path of the
        cost model, or blocks short)."""
        plain, clock = self._plain_target, self.env
        assert isinstance(clock, StepClock)
        if plain is None:
            return 0
        r, sched, spec, acceptance = self.requests, self.sched, self.spec, self.acceptance
        k, nodes, width = spec.step_shape(1)
        if sched.decode_reserve is None:
            if not k:
                done = self._decode_alone_plain(rid, width)
            elif r.output_len[rid] - r.generated[rid] < RUN_AT_ONCE * (k + 1):
                done = None  # a short run: the loop costs less than the arrays' setup
            elif type(acceptance) is TraceAcceptance and self._proposals is None:
                done = self._decode_alone_trace(rid, k, nodes, width)
            elif type(acceptance) is ParametricAcceptance and self._proposals is None:
                done = self._decode_alone_sampled(rid, k, nodes, width)
            elif type(acceptance) is TokenReplayAcceptance and acceptance.log_keep is None:
                done = self._decode_alone_lookup(rid, k, width)
            else:
                done = None
            if done is not None:
                return done
        proposals = self._proposals if k else None
        ragged, overhead = self._ragged, self._spec_overhead
        asks = self._asks_proposed
        # EagleHead.draft_s_one: draft_s's floats without the one-element arrays
        draft_one = spec.draft_s_one if isinstance(spec, EagleHead) and self._own_draft else None
        verify_at = plain.at(width, width, 1, float(width * width), width)
        assert verify_at is not None  # a width of at least one token
        ids = sched.running_ids()
        generated, computed = int(r.generated[rid]), int(r.computed[rid])
        held, last = int(r.blocks[rid]), int(r.last_step_tokens[rid])
        output_len, record, log = int(r.output_len[rid]), _new_record, self.log
        iterations = steps = accepted_sum = 0
        self._carry = None  # the columns live here until written back
        finished = False
        while not finished:
            proposed, slots = None, None
            if k:  # the one-element columns a speculative step hands on
                position = np.array([generated], dtype=np.int64)
                if proposals is not None:
                    proposed = proposals(ids, position, k)
                    slots = int(proposed[0]) if asks else None  # its ask (vLLM V1)
            blocks = sched.schedule_alone(computed, held, slots)
            if blocks < 0:
                break
            held, iterations = blocks, iterations + 1
            start, context_sum = clock.now, float(computed)
            draft_s, w = 0.0, width
            if k:
                if proposed is not None:
                    w = int(proposed[0]) + 1 if ragged else width
                if draft_one is not None:  # the head's own: from the integers
                    draft_s = draft_one(computed, last, context_sum, k, nodes) + overhead
                else:
                    context, lasts = np.array([computed, last], dtype=np.int64).reshape(2, 1)
                    drafting = DraftStep(context, lasts, context_sum, k, nodes, last)
                    draft_s = spec.draft_s(drafting) + overhead
            if w == width:  # the run's own width: its shape looked up once (PlainForward.at)
                verify_s, over = verify_at.time(context_sum)
            else:
                gemm, attention, lm_head, elementwise, comm, over = plain.parts(
                    w, w, 1, float(w * w), w * context_sum, context_sum
                )
                verify_s = gemm + attention + lm_head + elementwise + comm + over
            clock.now += draft_s + verify_s
            remaining = output_len - generated
            if k:
                assert acceptance is not None
                step_tokens = int(acceptance.accept_counts(ids, position, k, nodes)[0]) + 1
                last = step_tokens
            else:
                step_tokens = 1
            finished = step_tokens >= remaining
            emitted = remaining if finished else step_tokens
            if k:
                steps += 1
                accepted_sum += emitted - 1
            computed += step_tokens
            generated += emitted
            no_proposal = 0 if proposed is None else int(proposed[0] == 0)
            row = (
                start, clock.now - start, 1, 0, w, emitted, emitted if k else 0, 1 if k else 0,
                draft_s, verify_s - over, over, self.pool.used, w, no_proposal, 0,
            )  # fmt: skip
            log.record(record(IterationRecord, row))
        if not iterations:
            return 0
        r.generated[rid], r.computed[rid], r.blocks[rid] = generated, computed, held
        r.last_step_tokens[rid] = last
        r.add_spec_steps(rid, steps, accepted_sum)
        if finished:
            self._finish(ids[:1].copy(), NO_IDS)
        return iterations

    def _decode_steady(self, ids: np.ndarray) -> int:
        """:meth:`_decode_alone` for a batch of several sequences (:meth:`Scheduler.steady`:
        every running request decodes and nobody waits, as in a closed loop between a
        departure and the next arrival), until one finishes or blocks are short: the batch's
        columns (tokens in KV, blocks held, generated, the last step's tokens and
        the spec counters) are the loop's own arrays, written back to the request table when
        it leaves, and the general step's calls are made with the same values. A lookup
        replayed with each sequence verifying what it proposed costs its ragged verify as the
        general step does (``BatchShape.of`` and the cost model's forward). Returns the
        iterations run."""
        plain, clock = self._plain_target, self.env
        assert isinstance(clock, StepClock)
        if plain is None:
            return 0
        n = len(ids)
        k, nodes, width = self.spec.step_shape(n)
        r, sched, spec, acceptance = self.requests, self.sched, self.spec, self.acceptance
        at_once = sched.decode_reserve is None and plain.sharpness == 1.0
        if at_once and not k:
            return self._decode_steady_plain(ids, width)
        # the loop's columns, read here for the check below too
        computed, held, generated = r.computed[ids], r.blocks[ids], r.generated[ids]
        output_len = r.output_len[ids]
        if at_once:
            # a run at once pays its arrays' setup (~50 numpy calls) once: worth it for runs
            # of about 8 steps or more (benchmarks/README: ~0.85x at concurrency 64, whose
            # runs average 6; 1.1x at 32; 1.6x at 8), and a run lasts at least the steps its
            # closest finisher needs at k + 1 tokens a step
            traced = type(acceptance) is TraceAcceptance and self._proposals is None
            replayed = type(acceptance) is TokenReplayAcceptance and acceptance.log_keep is None
            if (traced or replayed) and ((output_len - generated).min() >= RUN_AT_ONCE * (k + 1)):
                done = (
                    self._decode_steady_trace(ids, k, nodes, width)
                    if traced
                    else self._decode_steady_lookup(ids, k, nodes)
                )
                if done is not None:
                    return done
        proposals = self._proposals if k else None
        ragged = proposals is not None and self._ragged
        asks = proposals is not None and self._asks_proposed
        overhead, record, log, total = self._spec_overhead, _new_record, self.log, r.total
        first = generated  # what each had
        last = r.last_step_tokens[ids]
        context_sum = float(total(computed))
        last_sum: int | None = None
        ones = self._ones[:n]  # never written through
        tokens, logits, sum_q_sq = n * width, n * width, float(n * width * width)
        # every step's forwards at this batch's shape, priced for its context sum alone
        # (PlainForward.at, EagleHead.draft_at: the same floats as parts and draft_s)
        verify_at = None if ragged else plain.at(tokens, logits, n, sum_q_sq, width)
        draft_at = self._draft_at(n, k, nodes) if k else None
        iterations = steps = 0
        self._carry = None  # the columns live here until written back
        out: np.ndarray | None = None
        while out is None:
            proposed = proposals(ids, generated, k) if proposals is not None else None
            # a decode's ask is its proposal where the engine asks so (vLLM V1)
            new_held = sched.schedule_steady(computed, held, proposed if asks else None)
            if new_held is None:
                break
            held, iterations = new_held, iterations + 1
            start, draft_s = clock.now, 0.0
            if draft_at is not None:
                draft_s = draft_at.seconds(context_sum) + overhead
            elif k:
                drafting = DraftStep(computed, last, context_sum, k, nodes, last_sum)
                draft_s = spec.draft_s(drafting) + overhead
            if verify_at is not None:
                verify_s, over = verify_at.time(context_sum)
            elif ragged:  # each verifies what it proposed: the general step's shape
                # (BatchShape.of's exact integer sums, as floats), priced as forward prices it
                # (PlainForward.parts: the same floats)
                assert proposed is not None
                widths = proposed + 1
                tokens = int(widths.sum())
                gemm, attention, lm_head, elementwise, comm, over = plain.parts(
                    tokens, tokens, n, float(widths.dot(widths)), float(widths.dot(computed)),
                    context_sum,
                )  # fmt: skip
                verify_s = gemm + attention + lm_head + elementwise + comm + over
            else:
                gemm, attention, lm_head, elementwise, comm, over = plain.parts(
                    tokens, logits, n, sum_q_sq, width * context_sum, context_sum
                )
                verify_s = gemm + attention + lm_head + elementwise + comm + over
            clock.now += draft_s + verify_s
            if k:
                assert acceptance is not None
                step_tokens = acceptance.accept_counts(ids, generated, k, nodes) + 1
                last = step_tokens
                steps += 1
            else:
                step_tokens = ones
            # a step emits its tokens, cut at each one's output length (where it finishes)
            reached = generated + step_tokens
            finishing = reached >= output_len
            if np.count_nonzero(finishing):
                out = finishing
                emitted = np.minimum(step_tokens, output_len - generated)
                generated = generated + emitted
            else:
                emitted, generated = step_tokens, reached
            made = total(emitted) if k else n
            computed = computed + step_tokens
            no_proposal = 0 if proposed is None else n - int(np.count_nonzero(proposed))
            row = (
                start, clock.now - start, n, 0, tokens, made, made if k else 0, n if k else 0,
                draft_s, verify_s - over, over, self.pool.used, tokens, no_proposal, 0,
            )  # fmt: skip
            if out is not None:  # the step's columns are the table's before it is recorded
                break
            log.record(record(IterationRecord, row))
            context_sum, last_sum = context_sum + made, made
        if not iterations:
            return 0
        r.computed[ids], r.blocks[ids], r.generated[ids] = computed, held, generated
        if k:
            r.last_step_tokens[ids] = last
            r.add_spec_steps(ids, steps, generated - first - steps)  # emitted minus bonus
        if out is not None:
            log.record(record(IterationRecord, row))
            self._finish(ids[out], NO_IDS)
        return iterations

    def _draft_at(self, n: int, k: int, nodes: int | None) -> FixedChain | None:
        """The draft of ``n`` sequences at ``k`` priced for each context sum
        (:meth:`EagleHead.draft_at`), where the speculator's ``draft_s`` is the head's own and
        a padded chain: what the loops step instead of building a :class:`DraftStep`; None
        elsewhere (``draft_s`` then)."""
        spec = self.spec
        if not self._own_draft:
            return None
        assert isinstance(spec, EagleHead)
        return spec.draft_at(n, k, nodes)

    def _begin(self) -> Step:
        """An iteration up to its length: who runs, and how long drafting and verifying take."""
        # 1. schedule: who runs, and the draft the load policy picks for that many
        step = self._schedule()
        # 2. draft and 3. verify (one target forward, prefill chunks included) take this long
        step.draft_s = self._draft_time(step)
        step.verify_s, step.verify_overhead_s, step.prefill_done = self._verify(step)
        return step

    def _end(self, step: Step) -> None:
        """The iteration's outcome, once it has taken its time."""
        # 4. accept, and 5. update KV, counters and metrics; finished requests leave
        step.emitted, step.made, decoded_out = self._accept(step)
        step.first = self._advance_prefill(step.batch, step.prefill_done)
        self._record(step)
        self._finish(decoded_out, step.first)

    # -- the steps of one iteration --------------------------------------------------------
    def _reserve(self) -> StepShape:
        """The draft of the step about to be scheduled where it changes with the batch size:
        the load policy's at the batch the engine is asked to run (the running requests and
        those waiting, up to max_num_seqs: vLLM V0's disable_by_batch_size reads its running
        queue, which V0 fills without charging drafts to the budget), each decode's budget and
        KV reserved for that width, not the widest any step may draft (a step with
        speculation off then decodes as many sequences as plain decoding would)."""
        sched = self.sched
        queued = len(sched.waiting) + len(sched.transfers)
        asked = min(len(sched.running) + queued, sched.max_seqs)
        shape = self.spec.step_shape(max(asked, 1))
        self.sched.reserved_draft_slots = shape.width - 1
        return shape

    def _schedule(self) -> Step:
        shape = self._reserve() if self._varies else None
        if self._asks_proposed:
            self._propose_ahead()
        batch = self.sched.schedule()
        if self.sched.kv_requested:
            self._request_kv()
        if self.sched.admitted:  # a decode instance's transfers admitted, each with its token
            ids = np.array(self.sched.admitted, dtype=np.int64)
            self.requests.first_token[ids] = self.env.now
            self._delivered = len(ids)
            self.sched.admitted.clear()
        if batch.empty:
            # blocks held for KV on its way: a prefill instance's finished requests still to
            # be sent, a decode instance's preallocated ones (its own retracted requests
            # waiting behind them): they free or land, then it goes on (QA: raised)
            if self.sched.held_blocks or self.sched.preallocated:
                raise _WaitForRoom
            raise ScenarioError(
                "the scheduler could not place any request: KV blocks or "
                "token budget too small for a single request"
            )
        decoding, context_lens = batch.decode, batch.context
        carry = self._carry
        if carry is not None and carry.ids is not decoding:
            carry = self._carry = None  # other sequences decode: gather their columns
        # one element: no reduction call
        if carry is not None:
            context_sum = carry.context_sum
        elif len(context_lens) == 1:
            context_sum = float(context_lens[0])
        else:
            context_sum = float(self.requests.total(context_lens))
        draft = self.spec.step_shape(len(decoding) + len(batch.prefill)) if shape is None else shape
        proposed = self._proposed(decoding, draft)
        widths = proposed + 1 if self._ragged and proposed is not None else None
        if batch.edge_width and draft.k:
            widths = _trimmed_last(widths, draft.width, batch.edge_width, len(decoding))
        # in field order (keywords to a class call cost a dict per iteration)
        return Step(
            self.env.now, batch, decoding, context_lens, context_sum, draft, proposed, widths,
            0.0, 0.0, 0.0, NO_IDS, NO_IDS, NO_IDS, 0, None,
        )  # fmt: skip

    def _propose_ahead(self) -> None:
        """Each running decode's proposal at the draft length the step reserves, which its
        ask for budget and KV is (vLLM V1: num_tokens_with_spec; Scheduler.draft_slots)."""
        sched, r = self.sched, self.requests
        assert self._proposals is not None and sched.draft_slots is not None
        rids = sched.running_ids()
        rids = rids[r.decoding[rids]]
        k = sched.reserved_draft_slots
        if len(rids):
            sched.draft_slots[rids] = self._proposals(rids, r.generated[rids], k) if k else 0

    def _proposed(self, decoding: np.ndarray, draft: StepShape) -> np.ndarray | None:
        """Draft tokens each decoding sequence proposes this step, where the acceptance source
        knows (a lookup replay); None: every sequence drafts the step's full shape. Where the
        schedule asked for them (:meth:`_propose_ahead`, at this step's K) they are read back,
        not looked up again."""
        if self._proposals is None or not draft.k or len(decoding) == 0:
            return None
        if self._asks_proposed:
            assert self.sched.draft_slots is not None
            return self.sched.draft_slots[decoding]
        return self._proposals(decoding, self.requests.generated[decoding], draft.k)

    def _draft_time(self, step: Step) -> float:
        """Seconds drafting for the decoding sequences (none when the step does not
        speculate), with the host work of a speculative step, and the draft's own pass over
        the step's prompt chunks where it keeps a KV cache of the prompt (``prompt_s``; a step
        that does not speculate skips the draft, as vLLM V0's _run_no_spec(skip_proposer)
        does when speculation is off by batch size)."""
        draft, prefilling = step.draft, step.batch.prefill
        if not draft.k:
            return 0.0
        chain = self._draft_at(len(step.decoding), draft.k, draft.nodes)
        if chain is not None and (self._own_prompt_s or not len(prefilling)):
            # a padded chain (EagleHead.draft_at): its first forward priced once, for the
            # draft and for the prompts it may run with (the same floats as below)
            spec = self.spec
            assert isinstance(spec, EagleHead)  # _draft_at's condition
            draft_s, first_s = chain.seconds_and_first(step.context_sum)
            prompt = 0.0
            if len(prefilling):
                shape = self._prompt(step)[1]
                merged = spec.merged_prompt_s(chain, step.context_sum, first_s, shape)
                # where the prompts run apart: a forward of their own
                prompt = spec.prompt_s(shape) if merged is None else merged
            return draft_s + self._spec_overhead + prompt
        carry = self._carry
        if carry is not None and carry.last_step_tokens is not None:
            last, last_sum = carry.last_step_tokens, carry.last_sum
        else:
            last, last_sum = self.requests.last_step_tokens[step.decoding], None
        drafting = DraftStep(
            step.context_lens, last, step.context_sum, draft.k, draft.nodes, last_sum
        )
        prompt_s = 0.0
        if len(prefilling):
            # with the decodes, whose first draft forward an engine may run the prompts in
            prompt_s = self.spec.prompt_s(self._prompt(step)[1], drafting)
        return self.spec.draft_s(drafting) + self._spec_overhead + prompt_s

    def _prompt(self, step: Step) -> tuple[np.ndarray, BatchShape]:
        """The step's prompt chunks: their tokens in KV before it, and their shape with
        logits at each chunk's last token (the draft's prompt pass; the verify keeps logits
        for the chunks that complete their prompt only), built on first use."""
        if step.prompt is None:
            chunks = step.batch.chunks
            computed = self.requests.computed[step.batch.prefill]
            step.prompt = computed, BatchShape.of(chunks, computed, len(chunks), prefill=True)
        return step.prompt

    def _prompt_done(self, step: Step) -> tuple[BatchShape, np.ndarray]:
        """The step's prompt chunks' shape and the requests whose prompt they complete."""
        computed, prompt = self._prompt(step)
        prefilling, r = step.batch.prefill, self.requests
        if len(prefilling) == 1:  # one prompt (a closed loop's newcomer): the same test on ints
            rid = int(prefilling[0])
            whole = int(computed[0]) + int(step.batch.chunks[0])
            done = prefilling if whole == int(r.prompt_len[rid]) + int(r.generated[rid]) else NO_IDS
            return prompt, done
        done = prefilling[computed + step.batch.chunks == r.num_tokens(prefilling)]
        return prompt, done

    def _verify(self, step: Step) -> tuple[float, float, np.ndarray]:
        """Seconds of one target forward over the verify chains/trees and the prefill chunks
        (and of them, the host overhead), and which chunks complete their prompt. Every
        verified position needs logits; a tree's positions are costed like a chain of the same
        width (attention kernels compute the masked block whole). ``step.widths``: each
        decoding sequence's own verify width, when they differ."""
        decoding, prefilling = step.decoding, step.batch.prefill
        width, widths = step.draft.width, step.widths
        if widths is not None and len(widths) == 1:  # one sequence: its own width, uniformly
            width, widths = int(widths[0]), None
        if widths is None and not len(prefilling) and self._plain_target is not None:
            # the common step, every sequence verifying one width: the same floats as below
            n = len(decoding)
            gemm, attention, lm_head, elementwise, comm, overhead = self._plain_target.parts(
                n * width, n * width, n, float(n * width * width), width * step.context_sum,
                step.context_sum,
            )  # fmt: skip
            total = gemm + attention + lm_head + elementwise + comm + overhead
            return total, overhead, NO_IDS
        if widths is None and self._plain_target is not None and not self._expand:
            # every sequence verifying one width beside the prompt chunks: BatchShape.uniform
            # of the verifies plus the chunks' shape with their logits, field by field in
            # BatchShape.__add__'s order, as floats (no shape built)
            prompt, prefill_done = self._prompt_done(step)
            n, ctx = len(decoding), step.context_sum
            gemm, attention, lm_head, elementwise, comm, overhead = self._plain_target.parts(
                n * width + prompt.num_tokens, n * width + len(prefill_done),
                n + prompt.num_seqs, float(n * width * width) + prompt.sum_q_sq,
                width * ctx + prompt.sum_q_kv, ctx + prompt.sum_kv,
            )  # fmt: skip
            total = gemm + attention + lm_head + elementwise + comm + overhead
            return total, overhead, prefill_done
        if widths is None:
            verified = BatchShape.uniform(
                len(decoding), width, step.context_sum, len(decoding) * width
            )
        else:
            verified = BatchShape.of(widths, step.context_lens, int(widths.sum()), step.context_sum)
        if self._expand and step.draft.k > 0:  # a speculative step of vLLM V0's scorer
            verified = verified.expanded()
        prefill_done = NO_IDS
        if len(prefilling):
            prompt, prefill_done = self._prompt_done(step)
            # a completed prompt needs logits for its last position (its first output token)
            verified += prompt.with_logits(len(prefill_done))
        if self._plain_target is not None:  # forward's fields as floats, summed in its order
            gemm, attention, lm_head, elementwise, comm, overhead = self._plain_target.parts(
                verified.num_tokens, verified.logit_tokens, verified.num_seqs,
                verified.sum_q_sq, verified.sum_q_kv, verified.sum_kv,
            )  # fmt: skip
            total = gemm + attention + lm_head + elementwise + comm + overhead
            return total, overhead, prefill_done
        cost = self.cost.forward(self.target, verified)
        return cost.total_s, cost.overhead_s, prefill_done

    def _accept(self, step: Step) -> tuple[np.ndarray, int, np.ndarray]:
        """Tokens each decoding sequence emits (the accepted prefix plus one, cut at its end),
        their sum, and the sequences that thereby reach their output length."""
        r, decoding, draft, carry = self.requests, step.decoding, step.draft, self._carry
        self._carry = None
        if len(decoding) == 0:
            return NO_IDS, 0, NO_IDS
        if carry is not None:
            generated, remaining = carry.generated, carry.remaining
        else:
            generated = r.generated[decoding]
            remaining = r.output_len[decoding] - generated
        if draft.k > 0:
            # a speculative step samples acceptance: the run was built with a sampler
            assert self.acceptance is not None
            accepted = self.acceptance.accept_counts(decoding, generated, draft.k, draft.nodes)
            edge = step.batch.edge_width
            if edge and accepted[-1] >= edge:  # the budget trimmed the last one's draft
                accepted[-1] = edge - 1
            # a step yields the accepted drafts plus one sampled token; as many enter the KV
            # (the input token and the accepted drafts)
            step_tokens = accepted + 1
            out = step_tokens >= remaining  # these reach their output length
            # most steps finish nothing: count first, which is cheaper than a boolean index,
            # and no one's tokens are cut at the end
            finishing = np.count_nonzero(out)
            emitted = np.minimum(step_tokens, remaining) if finishing else step_tokens
            computed = step.context_lens + step_tokens
            r.last_step_tokens[decoding] = step_tokens
            r.add_spec_step(decoding, emitted)
        else:
            step_tokens = emitted = self._ones[: len(decoding)]  # never written through
            computed = step.context_lens + 1
            out = emitted >= remaining
            finishing = np.count_nonzero(out)
        r.computed[decoding] = computed
        generated = generated + emitted
        r.generated[decoding] = generated
        made = r.total(emitted) if draft.k > 0 else len(decoding)
        if finishing:
            return emitted, made, decoding[out]
        # nobody leaves: the same sequences decode next unless a request joins
        self._carry = Carry(
            decoding, generated, remaining - emitted, step_tokens if draft.k > 0 else None,
            made, step.context_sum + made,
        )  # fmt: skip
        self.sched.decoded(decoding, computed)
        return emitted, made, NO_IDS

    def _advance_prefill(self, batch: ScheduledBatch, done: np.ndarray) -> np.ndarray:
        """Chunks enter the KV cache; a completed prompt samples its next (first) token."""
        prefilling = batch.prefill
        if len(prefilling) == 0:
            return NO_IDS
        r = self.requests
        if len(prefilling) == 1 and self.on_chunk is None:
            # one prompt (a closed loop's newcomer): the same updates on its one row
            rid = int(prefilling[0])
            r.computed[rid] += int(batch.chunks[0])
            if len(done):  # done is that one request
                r.generated[rid] += 1
                r.decoding[rid] = True
                if math.isnan(r.first_token[rid]):
                    r.first_token[rid] = self.env.now
            return done
        r.computed[prefilling] += batch.chunks
        if self.on_chunk is not None:
            self.on_chunk(prefilling, r.computed[prefilling])
        r.generated[done] += 1
        r.decoding[done] = True
        fresh = done[np.isnan(r.first_token[done])]
        r.first_token[fresh] = self.env.now
        return done

    def _record(self, step: Step) -> None:
        """The iteration's row in the log."""
        decode, prefill = len(step.decoding), len(step.batch.prefill)
        delivered, self._delivered = self._delivered, 0
        speculative = step.draft.k > 0
        made = step.made
        widths = step.widths
        decode_tokens = decode * step.draft.width if widths is None else int(widths.sum())
        if not prefill:
            chunk_tokens = 0
        elif step.prompt is not None:  # the chunks' shape built this step: their sum in it
            chunk_tokens = step.prompt[1].num_tokens
        else:
            chunk_tokens = int(step.batch.chunks.sum())
        proposed = step.proposed
        no_proposal = 0 if proposed is None else decode - int(np.count_nonzero(proposed))
        waiting = 0
        if not decode and self.sched.running:  # a step that decodes nobody (SGLang's prefill)
            # running sequences past their first token, less those that got it this step
            running = self.sched.running
            past_first = int(np.count_nonzero(self.requests.generated[running] > 0))
            members = set(running)  # a set's lookups: np.isin sorts both sides each step
            waiting = past_first - sum(1 for rid in step.first.tolist() if rid in members)
        # in field order, as one tuple made an IterationRecord (what NamedTuple's own __new__
        # ends in) without binding fifteen arguments every iteration
        row = (
            step.start_s,  # start_s
            self.env.now - step.start_s,  # duration_s
            decode,  # decode_seqs
            prefill,  # prefill_seqs
            decode_tokens + chunk_tokens,  # query_tokens
            made + len(step.first) + delivered,  # output_tokens
            made if speculative else 0,  # spec_tokens
            decode if speculative else 0,  # spec_seqs
            step.draft_s,  # draft_s
            step.verify_s - step.verify_overhead_s,  # verify_s
            step.verify_overhead_s,  # overhead_s
            self.pool.used,  # kv_blocks_used
            decode_tokens,  # decode_tokens
            no_proposal,  # no_proposal_seqs
            waiting,  # waiting_seqs
        )
        self.log.record(_new_record(IterationRecord, row))

    def _finish(self, decoded_out: np.ndarray, first: np.ndarray) -> None:
        """Requests that reached their output length leave: those that just decoded their last
        token, then those whose first token (from prefill) was also their last."""
        r = self.requests
        done = decoded_out
        if len(first):
            out = r.generated[first] >= r.output_len[first]
            if np.count_nonzero(out):
                done = np.concatenate([done, first[out]])
        if len(done):
            r.finish[done] = self.env.now
            self.sched.finish(done)
            self.expected -= len(done)
            for rid in done.tolist():
                self.on_finish(rid)
