"""Runs of engine steps computed at once: a request decoding alone, or a batch decoding on
unchanged, up to its next event (a finish, or blocks running short), where every step follows
from positions alone, so the steps are known before they run: plain decoding (one token a
step), acceptance replayed from traces, or a lookup drafter replayed greedily on token streams.
The acceptance is walked as the loop asks it, then the blocks (the scheduler's ``*_steps``),
the forwards (``PlainForward.parts_many``, ``EagleHead.draft_s_many``) and the clock (an
in-order ``cumsum``) are arrays computed with the loop's operations element by element, and
the records are columns (``IterationSink.record_block``): the same bits as
``Replica._decode_alone`` and ``Replica._decode_steady`` step by step
(``tests/test_step_columns.py``, ``tools/step_hashes.py``). :class:`RunsAtOnce` is a part of
:class:`~simspec.engine.replica.Replica`; the replica decides when a run is taken at once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import simpy

from simspec.engine.acceptance.samplers import (
    AcceptanceSampler,
    TokenReplayAcceptance,
    TraceAcceptance,
)
from simspec.engine.kv_cache import BlockPool
from simspec.engine.metrics import IterationSink
from simspec.engine.requests import RequestTable
from simspec.engine.scheduler import Scheduler
from simspec.engine.speculators import Speculator
from simspec.engine.speculators.eagle import EagleHead

if TYPE_CHECKING:
    from simspec.engine.costmodel.plain import PlainForward

NO_IDS = np.zeros(0, dtype=np.int64)  # the shared empty id array (never written through)


@dataclass(slots=True)
class Carry:
    """The decoding batch's hot columns as one step's accept left them, for the next step of
    the very same sequences (the scheduler hands back the same id array while no request
    joins, leaves or is preempted): what accept computed instead of gathering it again from
    the request table, which holds the same values. Never written through."""

    ids: np.ndarray  # the decoding sequences (the array the batch named)
    generated: np.ndarray  # their tokens generated
    remaining: np.ndarray  # output tokens still to make
    last_step_tokens: np.ndarray | None  # what the step yielded each (None: no speculation)
    last_sum: int  # the sum of those (tokens emitted: nobody finished)
    context_sum: float  # the sum of their tokens in KV now


class StepClock:
    """The time of a replica that steps alone (:meth:`Replica.run_alone`): it advances by each
    iteration's length, as SimPy's clock would, with no event queue to keep."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0


EagleHeadDraftS = EagleHead.draft_s  # a head whose draft_s is this one has draft_s_many


# the fewest steps a speculative batch's run must be sure to last to be computed at once
# (Replica._decode_steady_trace): a speed constant of the implementation, not of the model
RUN_AT_ONCE = 8


def _columns(steps: int, *fields: np.ndarray | float | int) -> tuple[np.ndarray, ...]:
    """The :class:`IterationRecord` fields of a run of ``steps`` iterations, in its order, as
    :meth:`IterationSink.record_block` takes them: an array a field, a number repeated where
    it does not vary (int64 or float64 as the number is, as a column of rows would be)."""
    return tuple(
        np.full(steps, value, dtype=np.float64 if type(value) is float else np.int64)
        if not isinstance(value, np.ndarray)
        else value
        for value in fields
    )


def _per_step(value: np.ndarray | float, steps: int) -> np.ndarray:
    """A field of a run of forwards (``parts_many``) as one value a step: a float where the
    field does not vary along the run, repeated ``steps`` times (no arithmetic)."""
    return value if type(value) is np.ndarray else np.full(steps, value)


class RunsAtOnce:
    """The runs of steps a :class:`~simspec.engine.replica.Replica` takes at once (see the
    module): its state, as the replica holds it."""

    env: simpy.Environment | StepClock
    requests: RequestTable
    sched: Scheduler
    spec: Speculator
    acceptance: AcceptanceSampler | None
    pool: BlockPool
    log: IterationSink
    _plain_target: PlainForward | None
    _carry: Carry | None
    _proposals: Callable[[np.ndarray, np.ndarray, int], np.ndarray] | None
    _ragged: bool
    _asks_proposed: bool
    _spec_overhead: float

    def _finish(self, decoded_out: np.ndarray, first: np.ndarray) -> None:
        raise NotImplementedError  # the replica's: finished requests leave

    def _decode_alone_plain(self, rid: int, width: int) -> int | None:
        """:meth:`_decode_alone` of a request decoding alone without a draft (plain decoding,
        one token a step), every step computed at once: its steps are known before they run
        (one token each, to its end or until its blocks run short), so their blocks, forwards
        and clock are arrays, with the loop's operations element by element (the blocks'
        running maximum, :meth:`PlainForward.parts_many`, the clock's running sum: numpy's
        ``cumsum`` adds in order, as ``+=`` does), and the same records. None where the
        forwards cannot be computed so (:meth:`PlainForward.parts_many`): the loop runs."""
        plain, clock, r, sched = self._plain_target, self.env, self.requests, self.sched
        assert plain is not None and isinstance(clock, StepClock)
        generated, computed = int(r.generated[rid]), int(r.computed[rid])
        held, output_len = int(r.blocks[rid]), int(r.output_len[rid])
        if plain.sharpness != 1.0:  # parts_many's condition, checked before blocks are taken
            return None
        self._carry = None
        used = self.pool.used
        context = computed + np.arange(output_len - generated, dtype=np.int64)
        new_held = sched.schedule_alone_steps(context, held)
        n = len(new_held)
        if n == 0:
            return 0
        context_sum = (computed + np.arange(n, dtype=np.int64)).astype(np.float64)
        parts = plain.parts_many(width, width, 1, float(width * width), width, context_sum)
        assert parts is not None  # a sharpness of 1
        gemm, attention, lm_head, elementwise, comm, over = parts
        verify = _per_step(gemm + attention + lm_head + elementwise + comm + over, n)
        over = _per_step(over, n)
        # clock.now += 0.0 + verify_s at each step (no draft): the sums in order
        ends = np.cumsum(np.concatenate(([clock.now], 0.0 + verify)))
        clock.now = float(ends[-1])
        used_after = used + (new_held - held)  # the pool's blocks in use after each step
        self.log.record_block(_columns(
            n, ends[:-1], ends[1:] - ends[:-1], 1, 0, width, 1, 0, 0, 0.0, verify - over, over,
            used_after, width, 0, 0,
        ))  # fmt: skip
        finished = generated + n >= output_len
        r.generated[rid], r.computed[rid] = generated + n, computed + n
        r.blocks[rid] = int(new_held[n - 1])
        r.add_spec_steps(rid, 0, 0)
        if finished:
            self._finish(sched.running_ids()[:1].copy(), NO_IDS)
        return n

    def _decode_alone_trace(self, rid: int, k: int, nodes: int | None, width: int) -> int | None:
        """:meth:`_decode_alone` of a request drafting ``k`` tokens a step whose acceptance
        replays a trace, every step to its end at once, as :meth:`_decode_steady_trace` does
        for a batch: its steps' tokens walked from the trace (:meth:`TraceAcceptance.walk`),
        then its blocks, forwards and clock as arrays, and the same records. None where the
        draft is not a padded chain on the plain path: the loop runs."""
        plain, clock, r = self._plain_target, self.env, self.requests
        spec, acceptance = self.spec, self.acceptance
        assert plain is not None and isinstance(clock, StepClock)
        assert isinstance(acceptance, TraceAcceptance)
        many = getattr(spec, "draft_s_many", None)
        if many is None or type(spec).draft_s is not EagleHeadDraftS or plain.sharpness != 1.0:
            return None
        taken = acceptance.walk(rid, int(r.generated[rid]), k, int(r.output_len[rid]))
        return self._alone_chain_run(rid, k, nodes, width, taken)

    def _decode_alone_sampled(self, rid: int, k: int, nodes: int | None, width: int) -> int | None:
        """:meth:`_decode_alone_trace` of a request whose acceptance is drawn
        (:class:`ParametricAcceptance`): its draws made step by step, in the loop's order and
        with its arguments, to its end. Only where every step is sure to find its blocks: a
        run cut short would have drawn for steps the loop never takes (its last ask is its
        largest, from the tokens in KV before its last step, at most one short of its end)."""
        plain, r, sched, acceptance = self._plain_target, self.requests, self.sched, self.acceptance
        assert plain is not None and acceptance is not None
        spec = self.spec
        if type(spec).draft_s is not EagleHeadDraftS or plain.sharpness != 1.0:
            return None
        assert isinstance(spec, EagleHead)
        if not spec.chain_at_once(k, nodes):  # decided before any draw
            return None
        generated, output_len = int(r.generated[rid]), int(r.output_len[rid])
        last_context = int(r.computed[rid]) + (output_len - generated - 1)
        if not sched.alone_fits(last_context, int(r.blocks[rid])):
            return None
        ids, position, made = sched.running_ids(), generated, []
        while True:  # the loop's call: its ids, its position as a one-element array
            at = np.array([position], dtype=np.int64)
            step = int(acceptance.accept_counts(ids, at, k, nodes)[0]) + 1
            made.append(step)
            if step >= output_len - position:
                break
            position += step
        done = self._alone_chain_run(rid, k, nodes, width, np.array(made, dtype=np.int64))
        # a padded chain on the plain path whose every step fits, both checked above: the run
        # takes every step drawn (none taken would have drawn for steps the loop never takes)
        assert done is not None and done == len(made)
        return done

    def _alone_chain_run(
        self, rid: int, k: int, nodes: int | None, width: int, taken: np.ndarray
    ) -> int | None:
        """A request's run alone with a padded chain draft, once its steps' tokens are known
        (``taken``, to its end): the draft forwards as arrays (:meth:`EagleHead.draft_s_many`),
        its blocks, and the rest (:meth:`_end_alone_run`). None where the draft is not a
        padded chain (the caller's loop runs)."""
        r, sched = self.requests, self.sched
        many = getattr(self.spec, "draft_s_many", None)
        assert many is not None
        computed, held = int(r.computed[rid]), int(r.blocks[rid])
        context = computed + (np.cumsum(taken) - taken)  # tokens in KV before each step
        context_sum = context.astype(np.float64)
        drafts = many(1, k, nodes, context_sum)
        if drafts is None:
            return None
        self._carry = None
        used = self.pool.used
        new_held = sched.schedule_alone_steps(context, held)
        n = len(new_held)
        if n == 0:
            return 0
        draft = _per_step(_per_step(drafts, len(context))[:n] + self._spec_overhead, n)
        widths = np.full(n, width, dtype=np.int64)
        return self._end_alone_run(
            rid, taken, new_held, held, used, draft, widths, 0, context_sum[:n]
        )

    def _decode_alone_lookup(self, rid: int, k: int, width: int) -> int | None:
        """:meth:`_decode_alone` of a request whose lookup drafter is replayed greedily on its
        token stream, every step to its end at once, as :meth:`_decode_alone_trace` does: its
        proposals and accepted tokens walked from the replay
        (:meth:`TokenReplayAcceptance.walk`), its blocks asked as the loop asks them (its
        proposal where the engine asks so), each step's verify priced at its own width
        (:meth:`PlainForward.parts_many` over the steps of each width), the lookup's constant
        host time, and the same records. None for a drafter with a cost of its own."""
        plain, clock, r, sched = self._plain_target, self.env, self.requests, self.sched
        spec, acceptance = self.spec, self.acceptance
        assert plain is not None and isinstance(clock, StepClock)
        assert isinstance(acceptance, TokenReplayAcceptance)
        lookup_s = getattr(spec, "lookup_s", None)
        drafted = None if lookup_s is None else lookup_s(1, k)
        if drafted is None or self._proposals is None or plain.sharpness != 1.0:
            return None
        generated, computed = int(r.generated[rid]), int(r.computed[rid])
        held, output_len = int(r.blocks[rid]), int(r.output_len[rid])
        proposed, taken = acceptance.walk(rid, generated, k, output_len)
        context = computed + (np.cumsum(taken) - taken)  # tokens in KV before each step
        self._carry = None
        used = self.pool.used
        slots = proposed if self._asks_proposed else None
        new_held = sched.schedule_alone_steps(context, held, slots)
        n = len(new_held)
        if n == 0:
            return 0
        proposed = proposed[:n]
        widths = proposed + 1 if self._ragged else np.full(n, width, dtype=np.int64)
        no_proposal = (proposed == 0).astype(np.int64)
        draft = drafted + self._spec_overhead
        context_sum = context[:n].astype(np.float64)
        return self._end_alone_run(
            rid, taken, new_held, held, used, draft, widths, no_proposal, context_sum
        )

    def _end_alone_run(
        self,
        rid: int,
        taken: np.ndarray,
        new_held: np.ndarray,
        held: int,
        used: int,
        draft: np.ndarray | float,
        widths: np.ndarray,
        no_proposal: np.ndarray | int,
        context_sum: np.ndarray,
    ) -> int:
        """The rest of a speculative request's run alone taken at once
        (:meth:`_decode_alone_trace`, :meth:`_decode_alone_lookup`), once its steps' tokens
        (``taken``, walked to its end), blocks (``new_held``, the steps that fit), draft
        seconds and verify widths are known: each step's verify priced at its width
        (:meth:`PlainForward.parts_many` over the steps of each width), the clock, the
        records as columns, and the columns written back."""
        plain, clock, r = self._plain_target, self.env, self.requests
        assert plain is not None and isinstance(clock, StepClock)
        n = len(new_held)
        finished = n == len(taken)
        taken = taken[:n]
        verify, over = np.empty(n), np.empty(n)
        for w in np.unique(widths).tolist():  # one shape a width: its steps' forwards at once
            at = widths == w
            parts = plain.parts_many(w, w, 1, float(w * w), w, context_sum[at])
            assert parts is not None  # a sharpness of 1: checked by the caller
            gemm, attention, lm_head, elementwise, comm, o = parts
            count = int(np.count_nonzero(at))
            verify[at] = _per_step(gemm + attention + lm_head + elementwise + comm + o, count)
            over[at] = _per_step(o, count)
        # clock.now += draft_s + verify_s at each step: the sums in order
        ends = np.cumsum(np.concatenate(([clock.now], draft + verify)))
        clock.now = float(ends[-1])
        generated, computed = int(r.generated[rid]), int(r.computed[rid])
        emitted = taken.copy()
        if finished:  # its last step emits up to its end
            emitted[-1] = int(r.output_len[rid]) - (generated + int(taken[:-1].sum()))
        self.log.record_block(_columns(
            n, ends[:-1], ends[1:] - ends[:-1], 1, 0, widths, emitted, emitted, 1, draft,
            verify - over, over, used + (new_held - held), widths, no_proposal, 0,
        ))  # fmt: skip
        made = int(emitted.sum())
        r.generated[rid], r.computed[rid] = generated + made, computed + int(taken.sum())
        r.blocks[rid] = int(new_held[n - 1])
        r.last_step_tokens[rid] = int(taken[-1])
        r.add_spec_steps(rid, n, made - n)
        if finished:
            self._finish(self.sched.running_ids()[:1].copy(), NO_IDS)
        return n

    def _decode_steady_plain(self, ids: np.ndarray, width: int) -> int:
        """:meth:`_decode_steady` of a batch decoding without a draft (plain decoding, one
        token a step each), every step up to the first finish computed at once, as
        :meth:`_decode_alone_plain` does for one request: its blocks as rows
        (:meth:`Scheduler.schedule_steady_steps`), its forwards as arrays, its clock as an
        in-order cumsum, and the same records. The context sum grows by the batch's size a
        step, exactly (integers far below 2**53, as the loop's float additions are)."""
        plain, clock, r, sched = self._plain_target, self.env, self.requests, self.sched
        assert plain is not None and isinstance(clock, StepClock)
        n = len(ids)
        computed, held, generated = r.computed[ids], r.blocks[ids], r.generated[ids]
        output_len = r.output_len[ids]
        steps = int((output_len - generated).min())  # the first finishes at its last step
        self._carry = None
        used, held_sum = self.pool.used, r.total(held)
        context = computed + np.arange(steps, dtype=np.int64)[:, None]  # before each step
        new_held = sched.schedule_steady_steps(context, held)
        m = len(new_held)
        if m == 0:
            return 0
        tokens = n * width
        context_sum = float(r.total(computed)) + n * np.arange(m, dtype=np.float64)
        parts = plain.parts_many(tokens, tokens, n, float(n * width * width), width, context_sum)
        assert parts is not None  # plain decoding here takes a roofline of sharpness 1
        gemm, attention, lm_head, elementwise, comm, over = parts
        verify = _per_step(gemm + attention + lm_head + elementwise + comm + over, m)
        over = _per_step(over, m)
        ends = np.cumsum(np.concatenate(([clock.now], 0.0 + verify)))
        clock.now = float(ends[-1])
        used_after = used + (new_held.sum(axis=1) - held_sum)
        self.log.record_block(_columns(
            m, ends[:-1], ends[1:] - ends[:-1], n, 0, tokens, n, 0, 0, 0.0, verify - over, over,
            used_after, tokens, 0, 0,
        ))  # fmt: skip
        r.computed[ids], r.blocks[ids], r.generated[ids] = computed + m, new_held[-1], generated + m
        if m == steps:
            self._finish(ids[generated + m >= output_len], NO_IDS)
        return m

    def _decode_steady_trace(
        self, ids: np.ndarray, k: int, nodes: int | None, width: int
    ) -> int | None:
        """:meth:`_decode_steady` of a batch drafting ``k`` tokens a step whose acceptance
        replays traces (:class:`TraceAcceptance`: each step's tokens follow from positions
        alone), up to its first finish at once: the acceptance walked step by step as the
        loop asks it, then the blocks as rows (:meth:`Scheduler.schedule_steady_steps`), the
        draft and verify forwards as arrays (:meth:`EagleHead.draft_s_many`,
        :meth:`PlainForward.parts_many`), the clock as an in-order cumsum, and the same
        records. The context sum is the batch's tokens in KV, exactly (the loop's float
        additions of integers far below 2**53). None where the draft is not a padded chain
        on the plain path (``draft_s_many``): the loop runs."""
        plain, clock, r, sched = self._plain_target, self.env, self.requests, self.sched
        spec = self.spec
        assert plain is not None and isinstance(clock, StepClock)
        many = getattr(spec, "draft_s_many", None)
        if many is None or type(spec).draft_s is not EagleHeadDraftS:
            return None
        n = len(ids)
        computed, held = r.computed[ids], r.blocks[ids]
        tokens_by_step, _ = self._walk_batch(ids, k, nodes, propose=False)
        steps, finished = len(tokens_by_step), True  # the walk ends at the first finish
        before = np.cumsum(tokens_by_step, axis=0) - tokens_by_step  # added before each step
        context = computed + before
        context_sum = context.sum(axis=1).astype(np.float64)
        drafts = many(n, k, nodes, context_sum)
        if drafts is None:
            return None
        draft = _per_step(drafts, steps)
        self._carry = None
        used = self.pool.used
        new_held = sched.schedule_steady_steps(context, held)
        m = len(new_held)
        if m == 0:
            return 0
        if m < steps:  # blocks ran short first: no finish
            finished = False
            tokens_by_step, context_sum, draft = tokens_by_step[:m], context_sum[:m], draft[:m]
        tokens = n * width
        parts = plain.parts_many(tokens, tokens, n, float(n * width * width), width, context_sum)
        assert parts is not None  # a sharpness of 1
        gemm, attention, lm_head, elementwise, comm, over = parts
        verify = _per_step(gemm + attention + lm_head + elementwise + comm + over, m)
        draft = _per_step(draft + self._spec_overhead, m)
        return self._end_steady_run(
            ids, tokens_by_step, finished, new_held, used, draft, verify, _per_step(over, m),
            tokens, 0,
        )  # fmt: skip

    def _decode_steady_lookup(self, ids: np.ndarray, k: int, nodes: int | None) -> int | None:
        """:meth:`_decode_steady` of a batch whose lookup drafter is replayed greedily, each
        sequence verifying what it proposed (vLLM's n-gram, suffix), up to its first finish
        at once, as :meth:`_decode_steady_trace` does: the proposals and accepted tokens
        walked step by step as the loop asks them, the blocks asked as the loop asks them
        (the proposals where the engine asks so), each step's ragged verify priced by the
        plain forward from its exact sums (one call a step: its width varies), the lookup's
        constant host time, the clock as an in-order cumsum, and the same records. None for
        a drafter with a cost of its own, or a padded lookup (SGLang's)."""
        plain, r, sched = self._plain_target, self.requests, self.sched
        acceptance, proposals = self.acceptance, self._proposals
        assert plain is not None and isinstance(acceptance, TokenReplayAcceptance)
        lookup_s = getattr(self.spec, "lookup_s", None)
        n = len(ids)
        drafted = None if lookup_s is None else lookup_s(n, k)
        if drafted is None or proposals is None or not self._ragged:
            return None
        computed, held = r.computed[ids], r.blocks[ids]
        tokens_by_step, proposed = self._walk_batch(ids, k, nodes, propose=True)
        assert proposed is not None
        finished = True  # the walk ends at the first finish
        context = computed + (np.cumsum(tokens_by_step, axis=0) - tokens_by_step)
        self._carry = None
        used = self.pool.used
        slots = proposed if self._asks_proposed else None
        new_held = sched.schedule_steady_steps(context, held, slots)
        m = len(new_held)
        if m == 0:
            return 0
        if m < len(tokens_by_step):  # blocks ran short first: no finish
            finished = False
            tokens_by_step, proposed, context = tokens_by_step[:m], proposed[:m], context[:m]
        widths = proposed + 1
        tokens = widths.sum(axis=1)
        q_sq = (widths * widths).sum(axis=1).astype(np.float64).tolist()
        q_kv = (widths * context).sum(axis=1).astype(np.float64).tolist()
        kv = context.sum(axis=1).astype(np.float64).tolist()
        verify, over = np.empty(m), np.empty(m)
        parts = plain.parts
        for j, t in enumerate(tokens.tolist()):
            g, a, lm, e, c, o = parts(t, t, n, q_sq[j], q_kv[j], kv[j])
            verify[j], over[j] = g + a + lm + e + c + o, o
        draft = np.full(m, drafted + self._spec_overhead)
        no_proposal = n - np.count_nonzero(proposed, axis=1)
        return self._end_steady_run(
            ids, tokens_by_step, finished, new_held, used, draft, verify, over, tokens,
            no_proposal,
        )  # fmt: skip

    def _walk_batch(
        self, ids: np.ndarray, k: int, nodes: int | None, propose: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """A batch's steps to its first finish as the loop asks them, step by step: each
        step's tokens made (accepted + 1, one row a step) and, where ``propose``, the draft
        tokens each proposed (a replayed lookup's, asked before the acceptance, as the loop
        asks them; else None). Acceptance that follows from positions alone only."""
        r, acceptance = self.requests, self.acceptance
        assert acceptance is not None
        proposals = self._proposals if propose else None
        output_len, position = r.output_len[ids], r.generated[ids]
        asked: list[np.ndarray] = []
        taken: list[np.ndarray] = []
        while True:
            if proposals is not None:
                asked.append(proposals(ids, position, k))
            step_tokens = acceptance.accept_counts(ids, position, k, nodes) + 1
            taken.append(step_tokens)
            reached = position + step_tokens
            if np.count_nonzero(reached >= output_len):
                return np.array(taken), np.array(asked) if proposals is not None else None
            position = reached

    def _end_steady_run(
        self,
        ids: np.ndarray,
        tokens_by_step: np.ndarray,
        finished: bool,
        new_held: np.ndarray,
        used: int,
        draft: np.ndarray,
        verify: np.ndarray,
        over: np.ndarray,
        tokens: np.ndarray | int,
        no_proposal: np.ndarray | int,
    ) -> int:
        """The rest of a batch's run taken at once (:meth:`_decode_steady_trace`,
        :meth:`_decode_steady_lookup`), once its steps' tokens (one row a step, the last
        one finishing where ``finished``), blocks and seconds are known: the clock, each
        step's tokens emitted (the last step's cut at each one's end), the records as
        columns, and the columns written back."""
        clock, r = self.env, self.requests
        assert isinstance(clock, StepClock)
        m, n = tokens_by_step.shape
        held, generated = r.blocks[ids], r.generated[ids]
        first, output_len = generated, r.output_len[ids]
        # clock.now += draft_s + verify_s at each step: the sums in order
        ends = np.cumsum(np.concatenate(([clock.now], draft + verify)))
        clock.now = float(ends[-1])
        used_after = used + (new_held.sum(axis=1) - r.total(held))
        made = tokens_by_step.sum(axis=1)
        last = tokens_by_step[-1]
        total_tokens = tokens_by_step.sum(axis=0)
        if finished:  # the last step emits up to each one's end
            before_last = generated + (total_tokens - last)
            emitted = np.minimum(last, output_len - before_last)
            made[-1] = r.total(emitted)
            generated = before_last + emitted
            out = generated >= output_len
        else:
            generated = generated + total_tokens
        self.log.record_block(_columns(
            m, ends[:-1], ends[1:] - ends[:-1], n, 0, tokens, made, made, n, draft,
            verify - over, over, used_after, tokens, no_proposal, 0,
        ))  # fmt: skip
        r.computed[ids], r.blocks[ids], r.generated[ids] = (
            r.computed[ids] + total_tokens,
            new_held[-1],
            generated,
        )
        r.last_step_tokens[ids] = last
        r.add_spec_steps(ids, m, generated - first - m)  # emitted minus bonus
        if finished:
            self._finish(ids[out], NO_IDS)
        return m
