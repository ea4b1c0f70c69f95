"""The iteration scheduler: who runs, with how many tokens, and who is preempted.

Each test builds a tiny engine (request table, block pool, scheduler) through :func:`make_rig`
and steps it with :func:`run_batch`, which applies an iteration's outcome the way the replica
does: prefill chunks enter the KV cache, a finished prompt samples its first token, a decode
keeps its accepted drafts plus one token, and requests that reach their output length leave.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pytest

from simspec.engine.kv_cache import BlockPool
from simspec.engine.requests import RequestTable
from simspec.engine.scheduler import FreeQueue, ScheduledBatch, Scheduler
from simspec.engine.workload import RequestSpecs


class Rig(NamedTuple):
    sched: Scheduler
    table: RequestTable
    pool: BlockPool


def make_rig(
    prompts: list[int],
    outputs: list[int],
    *,
    num_blocks: int = 1000,
    block_size: int = 4,
    max_seqs: int = 256,
    max_tokens: int = 2048,
    k: int = 0,
    scheduler_cls: type[Scheduler] = Scheduler,
    prefix_caching: bool = False,
    **policy: Any,
) -> Rig:
    """The one place that builds a table, a pool and a scheduler."""
    n = len(prompts)
    specs = RequestSpecs(
        np.array(prompts, dtype=np.int64),
        np.array(outputs, dtype=np.int64),
        np.full(n, -1, dtype=np.int64),
    )
    table = RequestTable(specs)
    pool = BlockPool(num_blocks)
    sched = scheduler_cls(
        table, pool, block_size, max_seqs, max_tokens, k, prefix_caching=prefix_caching, **policy
    )
    return Rig(sched, table, pool)


def run_batch(rig: Rig, batch: ScheduledBatch, accepted: int | np.ndarray = 0) -> list[int]:
    """Apply one iteration's outcome (``accepted`` drafts per decode); returns who finished."""
    t = rig.table
    done: list[int] = []
    steps = np.broadcast_to(np.asarray(accepted, dtype=np.int64) + 1, batch.decode.shape)
    if batch.edge_width:  # the budget trimmed the last one's draft (trim_drafts)
        steps = steps.copy()
        steps[-1] = min(int(steps[-1]), batch.edge_width)
    for rid, step in zip(batch.decode.tolist(), steps.tolist(), strict=True):
        t.computed[rid] += step
        t.generated[rid] += min(step, int(t.output_len[rid] - t.generated[rid]))
        if t.generated[rid] >= t.output_len[rid]:
            done.append(rid)
    for rid, chunk in zip(batch.prefill.tolist(), batch.chunks.tolist(), strict=True):
        t.computed[rid] += chunk
        if t.computed[rid] == t.num_tokens(rid):  # prompt done: its first token
            t.generated[rid] += 1
            t.decoding[rid] = True
            if t.generated[rid] >= t.output_len[rid]:
                done.append(rid)
    if done:
        rig.sched.finish(np.array(done, dtype=np.int64))
    return done


def add_all(rig: Rig) -> None:
    for rid in range(len(rig.table)):
        rig.sched.add(rid)


def ids(a: np.ndarray) -> list[int]:
    return a.tolist()


# -- admission order ----------------------------------------------------------------------------
def test_waiting_requests_are_admitted_first_come_first_served_with_their_whole_prompt():
    rig = make_rig([5, 7, 3], [4, 4, 4])
    add_all(rig)
    batch = rig.sched.schedule()
    assert ids(batch.prefill) == [0, 1, 2]
    assert ids(batch.chunks) == [5, 7, 3]
    assert ids(batch.decode) == []
    assert rig.sched.running == [0, 1, 2] and not rig.sched.waiting


def test_a_decode_asks_for_one_plus_k_tokens_and_blocks_to_hold_them():
    # block size 4, K = 3: after an 8-token prompt the decode step writes tokens 9..12
    rig = make_rig([8], [10], block_size=4, k=3)
    add_all(rig)
    run_batch(rig, rig.sched.schedule())
    assert rig.table.blocks[0] == 2  # ceil(8 / 4)
    batch = rig.sched.schedule()
    assert ids(batch.decode) == [0] and ids(batch.prefill) == []
    assert rig.table.blocks[0] == 3  # ceil((8 + 1 + 3) / 4)
    assert rig.pool.used == 3


def test_running_requests_are_served_before_newly_admitted_ones():
    rig = make_rig([4, 4, 6, 6], [9, 9, 9, 9], max_tokens=100)
    rig.sched.add(0)
    rig.sched.add(1)
    run_batch(rig, rig.sched.schedule())  # 0 and 1 now decode
    rig.sched.add(3)  # arrival order in the queue, not request id, decides
    rig.sched.add(2)
    batch = rig.sched.schedule()
    assert ids(batch.decode) == [0, 1]
    assert ids(batch.prefill) == [3, 2]
    assert rig.sched.running == [0, 1, 3, 2]


def test_max_num_seqs_caps_the_running_set_and_the_rest_wait_in_order():
    rig = make_rig([4, 4, 4], [5, 5, 5], max_seqs=2)
    add_all(rig)
    batch = rig.sched.schedule()
    assert ids(batch.prefill) == [0, 1]
    assert list(rig.sched.waiting) == [2]
    run_batch(rig, batch)
    batch = rig.sched.schedule()  # still full: nobody is admitted
    assert ids(batch.decode) == [0, 1] and ids(batch.prefill) == []
    assert list(rig.sched.waiting) == [2]


# -- token budget and chunked prefill -----------------------------------------------------------
def test_a_prompt_longer_than_the_token_budget_is_prefilled_in_chunks():
    rig = make_rig([40], [3], max_tokens=16)
    add_all(rig)
    chunks = []
    for _ in range(3):
        batch = rig.sched.schedule()
        assert ids(batch.prefill) == [0]
        chunks += ids(batch.chunks)
        run_batch(rig, batch)
    assert chunks == [16, 16, 8]
    assert rig.table.decoding[0] and rig.table.computed[0] == 40
    assert ids(rig.sched.schedule().decode) == [0]


def test_an_unfinished_prefill_continues_before_a_new_prompt_gets_the_rest_of_the_budget():
    rig = make_rig([30, 10], [3, 3], max_tokens=16)
    rig.sched.add(0)
    run_batch(rig, rig.sched.schedule())  # 16 of 30 prompt tokens
    rig.sched.add(1)
    batch = rig.sched.schedule()
    assert ids(batch.prefill) == [0, 1]
    assert ids(batch.chunks) == [14, 2]  # the rest of prompt 0, then what the budget leaves


def test_decodes_take_their_share_of_the_budget_before_admission():
    # two decodes of 1 + K = 4 tokens leave 10 - 8 = 2 tokens for the next prompt
    rig = make_rig([4, 4, 20], [9, 9, 9], max_tokens=10, k=3)
    rig.sched.add(0)
    rig.sched.add(1)
    run_batch(rig, rig.sched.schedule())
    rig.sched.add(2)
    batch = rig.sched.schedule()
    assert ids(batch.decode) == [0, 1]
    assert ids(batch.prefill) == [2] and ids(batch.chunks) == [2]


def test_vllm_gives_the_decode_at_the_budget_edge_what_is_left_and_trims_its_draft():
    # three decodes of 1 + K = 4 tokens against a budget of 10: vLLM V1 schedules the third
    # with the 2 tokens left (its input token and one draft) and nobody after it
    rig = make_rig([2, 2, 2, 5], [9, 9, 9, 9], max_tokens=10, k=3, trim_drafts=True)
    for rid in range(3):
        rig.sched.add(rid)
    run_batch(rig, rig.sched.schedule())
    rig.sched.add(3)
    batch = rig.sched.schedule()
    assert ids(batch.decode) == [0, 1, 2] and batch.edge_width == 2
    assert ids(batch.prefill) == []  # the budget is spent: the waiting prompt waits
    assert rig.table.blocks[2] == 1  # ceil((2 + 2) / 4): KV for the trimmed verify only
    run_batch(rig, batch, accepted=3)  # every draft accepted: the trimmed one keeps 1 + 1
    assert rig.table.computed[:3].tolist() == [6, 6, 4]


def test_without_trimming_the_decode_at_the_budget_edge_waits_and_a_prompt_takes_the_rest():
    rig = make_rig([2, 2, 2, 5], [9, 9, 9, 9], max_tokens=10, k=3)
    for rid in range(3):
        rig.sched.add(rid)
    run_batch(rig, rig.sched.schedule())
    rig.sched.add(3)
    batch = rig.sched.schedule()
    assert ids(batch.decode) == [0, 1] and batch.edge_width == 0
    assert ids(batch.prefill) == [3] and ids(batch.chunks) == [2]


def test_vllm_eagle_lookahead_slots_hold_kv_past_each_running_requests_ask():
    # block size 4, K = 3 and 3 lookahead slots: after an 8-token prompt the decode writes
    # tokens 9..12 and holds 3 more, ceil(15 / 4) = 4 blocks (3 without the slots)
    rig = make_rig([8], [10], block_size=4, k=3, lookahead_slots=3)
    add_all(rig)
    run_batch(rig, rig.sched.schedule())
    assert rig.table.blocks[0] == 2  # a new prompt gets no lookahead (nothing computed)
    rig.sched.schedule()
    assert rig.table.blocks[0] == 4


def test_a_decode_that_fits_whole_is_not_trimmed():
    rig = make_rig([2, 2], [9, 9], max_tokens=8, k=3, trim_drafts=True)
    add_all(rig)
    run_batch(rig, rig.sched.schedule())
    batch = rig.sched.schedule()
    assert ids(batch.decode) == [0, 1] and batch.edge_width == 0


# -- KV blocks ----------------------------------------------------------------------------------
def test_admission_stops_at_the_first_request_without_blocks_and_nobody_jumps_the_queue():
    # 5 blocks of 4 tokens: prompt 0 takes 3, prompt 1 needs 3 of the 2 left, and prompt 2
    # (1 block) would fit but stays behind it
    rig = make_rig([12, 12, 4], [2, 2, 2], num_blocks=5, block_size=4)
    add_all(rig)
    batch = rig.sched.schedule()
    assert ids(batch.prefill) == [0]
    assert list(rig.sched.waiting) == [1, 2]
    assert rig.pool.used == 3


def test_a_request_that_could_never_fit_in_the_pool_is_marked_unfinishable_not_queued():
    # 4 blocks of 4 tokens hold 16; prompt 10 + output 5 + K 2 = 17 tokens need 5 blocks
    rig = make_rig([10, 10], [5, 4], num_blocks=4, block_size=4, k=2)
    add_all(rig)
    assert ids(rig.table.unfinishable) == [True, False]
    assert list(rig.sched.waiting) == [1]


def decode_until_preemption(rig: Rig, limit: int = 50) -> ScheduledBatch:
    for _ in range(limit):
        batch = rig.sched.schedule()
        if rig.table.preemptions.any():
            return batch
        run_batch(rig, batch)
    raise AssertionError("no preemption happened")


def test_when_blocks_run_out_the_last_admitted_request_is_preempted_by_recompute():
    # three 4-token prompts in 6 blocks of 4 tokens (K = 0; a fourth waits for a sequence
    # slot): at 8 tokens each the three requests hold 2 blocks apiece and all need a third;
    # request 0 takes request 2's
    rig = make_rig([4, 4, 4, 4], [12, 12, 12, 12], num_blocks=6, block_size=4, max_seqs=3)
    add_all(rig)
    batch = decode_until_preemption(rig)
    t = rig.table
    assert ids(t.preemptions) == [0, 0, 1, 0]
    assert ids(batch.decode) == [0, 1] and ids(batch.prefill) == []
    assert rig.sched.running == [0, 1]
    assert list(rig.sched.waiting) == [2, 3]  # back at the front of the queue
    assert t.blocks[2] == 0 and t.computed[2] == 0 and not t.decoding[2]
    assert ids(t.blocks[:2]) == [3, 3] and rig.pool.used == 6


def test_sglang_puts_a_retracted_request_behind_the_queue():
    """SGLang's _extend_requests_to_queue appends the retracted (engines.yaml requeue_at_back);
    vLLM prepends the preempted (the test above)."""
    rig = make_rig(
        [4, 4, 4, 4], [12, 12, 12, 12], num_blocks=6, block_size=4, max_seqs=3,
        requeue_at_back=True,
    )  # fmt: skip
    add_all(rig)
    decode_until_preemption(rig)
    assert list(rig.sched.waiting) == [3, 2]


def test_the_lowest_priority_request_that_cannot_grow_preempts_itself():
    # 5 blocks: at 8 tokens each of two requests holds 2 blocks; the one free block goes to
    # request 0 and request 1, now last in line, gives its own blocks back
    rig = make_rig([4, 4], [15, 15], num_blocks=5, block_size=4)
    add_all(rig)
    batch = decode_until_preemption(rig)
    assert ids(rig.table.preemptions) == [0, 1]
    assert ids(batch.decode) == [0]
    assert rig.table.blocks[1] == 0 and rig.pool.used == 3


def test_nobody_is_admitted_in_the_iteration_that_preempted():
    # as above, with a budget of 3 tokens: after request 1 preempts itself, 2 blocks are free
    # and 2 tokens of budget left, room for a chunk of its recomputation, yet it waits
    rig = make_rig([4, 4], [15, 15], num_blocks=5, block_size=4, max_tokens=3)
    add_all(rig)
    batch = decode_until_preemption(rig)
    assert ids(rig.table.preemptions) == [0, 1]
    assert rig.pool.free == 2
    assert ids(batch.decode) == [0] and ids(batch.prefill) == []


def test_a_preempted_request_recomputes_its_prompt_and_the_tokens_it_had_generated():
    rig = make_rig([4, 4, 4], [12, 12, 12], num_blocks=6, block_size=4)
    add_all(rig)
    run_batch(rig, decode_until_preemption(rig))
    generated = int(rig.table.generated[2])
    assert generated == 5  # 1 from its prompt and 4 decodes before the 9th token's block
    rig.sched.finish(np.array([0, 1]))  # room again
    batch = rig.sched.schedule()
    assert ids(batch.prefill) == [2] and ids(batch.chunks) == [4 + generated]


def preempt_two_and_resume(rig: Rig) -> tuple[int, dict[int, int], ScheduledBatch]:
    """Decode the rig's three requests until request 2 is preempted, finish 0 and 1, and
    schedule again: (what 2 had generated, the free queue's cached blocks by owner then, the
    batch that resumes it)."""
    add_all(rig)
    run_batch(rig, decode_until_preemption(rig))
    generated = int(rig.table.generated[2])
    cached = dict(rig.sched.free_queue.cached)
    rig.sched.finish(np.array([0, 1]))
    return generated, cached, rig.sched.schedule()


@pytest.mark.parametrize("eagle", [False, True])
def test_with_prefix_caching_a_preempted_request_resumes_from_its_cached_blocks(eagle):
    """As above with a seventh block, which request 0 takes for its third; request 1's third
    preempts request 2, whose two full blocks go to the free queue, and takes the last of
    them: request 2 comes back to its first block and recomputes from there. Under an EAGLE,
    EAGLE-3 or MTP drafter vLLM V1 drops a hit's last block (find_longest_cache_hit, "if
    use_eagle and computed_blocks[0]: ... computed.pop()"): it recomputes from its first token."""
    rig = make_rig(
        [4, 4, 4], [12, 12, 12], num_blocks=7, block_size=4, prefix_caching=True,
        drop_last_hit=eagle,
    )  # fmt: skip
    generated, cached, batch = preempt_two_and_resume(rig)
    assert cached == {2: 1}
    reused = 0 if eagle else 4
    assert ids(batch.prefill) == [2] and ids(batch.chunks) == [4 + generated - reused]
    assert rig.table.computed[2] == reused and rig.pool.used == rig.table.blocks.sum()


@pytest.mark.parametrize(("prompt_only", "reused"), [(False, 8), (True, 4)])
def test_a_retracted_request_keeps_its_prompt_alone_cached_under_sglang(prompt_only, reused):
    """Request 2 (a prompt of 4, 9 tokens generated, 13 in KV) is preempted with 3 blocks:
    vLLM V1 leaves its two full blocks cached (prompt and outputs), SGLang's retract_decode
    frees the outputs and keeps the prompt its radix tree holds (engines.yaml
    retract_caches_prompt_only): it comes back to 8 or to 4 tokens and recomputes the rest."""
    rig = make_rig(
        [4, 4, 4], [30, 30, 30], num_blocks=10, block_size=4, prefix_caching=True,
        cache_prompt_only=prompt_only,
    )  # fmt: skip
    generated, _, batch = preempt_two_and_resume(rig)
    assert ids(rig.table.preemptions) == [0, 0, 1] and generated == 9
    assert ids(batch.prefill) == [2] and ids(batch.chunks) == [13 - reused]
    assert rig.table.computed[2] == reused


def test_the_free_queue_evicts_the_least_recently_freed_and_an_owners_last_blocks_first():
    pool = BlockPool(10)
    queue = FreeQueue(pool)
    queue.take(10)
    queue.give(3, owner=7)  # request 7's prefix, then anonymous blocks behind it
    queue.give(2)
    queue.take(1)
    assert queue.cached == {7: 2} and pool.free == 4
    queue.touch(7, 1)  # it comes back for one block; its other one is nobody's
    assert queue.cached == {} and pool.free == 3
    queue.take(3)
    assert pool.free == 0 and not queue.runs


def test_with_prefix_caching_blocks_held_still_equal_the_pool_in_use():
    rig = make_rig(
        [9, 3, 17, 5, 2], [7, 11, 2, 6, 9], num_blocks=12, block_size=4, k=2, prefix_caching=True
    )
    add_all(rig)
    finished: list[int] = []
    for _ in range(200):
        if not rig.sched.has_work:
            break
        finished += run_batch(rig, rig.sched.schedule(), accepted=1)
        assert rig.pool.used == rig.table.blocks.sum()
        assert sum(n for _, n in rig.sched.free_queue.runs) == rig.pool.free
    assert sorted(finished) == [0, 1, 2, 3, 4] and rig.table.preemptions.sum() > 0
    assert (rig.table.generated == rig.table.output_len).all()


def test_finishing_returns_every_block_the_request_held():
    rig = make_rig([12, 6], [3, 3], block_size=4)
    add_all(rig)
    rig.sched.schedule()
    assert rig.pool.used == 3 + 2
    rig.sched.finish(np.array([0]))
    assert rig.pool.used == 2 and rig.table.blocks[0] == 0
    assert rig.sched.running == [1]


def test_blocks_held_always_equal_the_pool_in_use_until_every_request_has_left():
    rig = make_rig([9, 3, 17, 5, 2], [7, 11, 2, 6, 9], num_blocks=12, block_size=4, k=2)
    add_all(rig)
    finished: list[int] = []
    for _ in range(200):
        if not rig.sched.has_work:
            break
        finished += run_batch(rig, rig.sched.schedule(), accepted=1)
        assert rig.pool.used == rig.table.blocks.sum()
        assert rig.pool.used <= rig.pool.num_blocks
    assert sorted(finished) == [0, 1, 2, 3, 4]
    assert rig.pool.used == 0
    assert (rig.table.generated == rig.table.output_len).all()


def test_an_empty_batch_says_so():
    rig = make_rig([4], [1])
    assert rig.sched.schedule().empty
    rig.sched.add(0)
    assert not rig.sched.schedule().empty


# -- the vectorised fast path against the per-request path -------------------------------------
class GeneralOnly(Scheduler):
    """Never takes the all-running-requests-fit shortcut."""

    def _schedule_running_at_once(self) -> ScheduledBatch | None:
        return None


class CountingPaths(Scheduler):
    """Counts which path each iteration took."""

    fast = single = general = 0

    def _schedule_running_at_once(self) -> ScheduledBatch | None:
        single = len(self.running) == 1 and bool(self.requests.decoding[self.running[0]])
        batch = super()._schedule_running_at_once()
        if batch is None:
            CountingPaths.general += 1
        elif single:
            CountingPaths.single += 1
        else:
            CountingPaths.fast += 1
        return batch


def same_state(a: Rig, b: Rig) -> None:
    assert a.sched.running == b.sched.running
    assert list(a.sched.waiting) == list(b.sched.waiting)
    assert (a.pool.free, a.pool.peak_used) == (b.pool.free, b.pool.peak_used)
    for column in ("blocks", "computed", "generated", "decoding", "preemptions", "unfinishable"):
        assert np.array_equal(getattr(a.table, column), getattr(b.table, column)), column


@pytest.mark.parametrize(("trim_drafts", "lookahead"), [(False, 0), (True, 0), (True, 3)])
def test_the_fast_path_decides_exactly_as_the_per_request_path_on_random_runs(
    trim_drafts: bool, lookahead: int
):
    rng = np.random.default_rng(20240613)
    CountingPaths.fast = CountingPaths.single = CountingPaths.general = 0
    preemptions = 0
    for _ in range(80):
        n = int(rng.integers(1, 30))
        k = int(rng.integers(0, 6))
        shape = dict(
            prompts=rng.integers(1, 60, n).tolist(),
            outputs=rng.integers(1, 40, n).tolist(),
            num_blocks=int(rng.integers(6, 80)),
            block_size=int(rng.choice([1, 2, 4, 16])),
            max_seqs=int(rng.integers(1, 12)),
            max_tokens=1 + k + int(rng.integers(0, 90)),
            k=k,
        )
        extra = {"trim_drafts": trim_drafts, "lookahead_slots": lookahead}
        fast = make_rig(**shape, scheduler_cls=CountingPaths, **extra)
        general = make_rig(**shape, scheduler_cls=GeneralOnly, **extra)
        released = 0
        for _ in range(400):
            for _ in range(min(int(rng.integers(0, 3)), n - released)):
                fast.sched.add(released)
                general.sched.add(released)
                released += 1
            if not fast.sched.has_work:
                if released == n:
                    break
                continue
            a, b = fast.sched.schedule(), general.sched.schedule()
            assert ids(a.decode) == ids(b.decode)
            assert ids(a.prefill) == ids(b.prefill)
            assert ids(a.chunks) == ids(b.chunks)
            assert a.edge_width == b.edge_width
            same_state(fast, general)
            if a.empty:
                break
            accepted = rng.integers(0, k + 1, len(a.decode))
            run_batch(fast, a, accepted)
            run_batch(general, b, accepted)
            same_state(fast, general)
        preemptions += int(fast.table.preemptions.sum())
    # the comparison covered every path, and runs that preempt
    assert CountingPaths.fast > 100 and CountingPaths.single > 100
    assert CountingPaths.general > 100
    assert preemptions > 10


def test_a_decode_asks_for_its_own_proposal_where_draft_slots_says_so():
    """vLLM V1 schedules num_tokens_with_spec - num_computed_tokens: a lookup that proposed
    nothing asks one token, not 1 + K (QA: suffix K=24 on a 2,048-token budget decoded 64 of
    128 sequences a step). Four decodes at K=7 would ask 32 of a 16-token budget; asking
    what they proposed (0, 7, 0, 1) they take 12 and all run."""
    rig = make_rig([4] * 4, [20] * 4, max_tokens=16, k=7, trim_drafts=True)
    add_all(rig)
    run_batch(rig, rig.sched.schedule())  # the four prompts
    assert rig.table.decoding.all()
    capped = rig.sched.schedule()
    assert ids(capped.decode) == [0, 1]  # 8 + 8 spend the budget
    run_batch(rig, capped)
    rig.sched.draft_slots = np.array([0, 7, 0, 1], dtype=np.int64)
    batch = rig.sched.schedule()
    assert ids(batch.decode) == [0, 1, 2, 3] and batch.edge_width == 0


# -- vLLM V1's hybrid pool: a sequence's windowed layers take blocks as its tokens fill them ------
def test_a_sequence_holds_its_window_blocks_beside_its_full_attention_ones():
    """SlidingWindowManager frees the blocks before its window, so a sequence holds as many
    windowed blocks as its tokens fill, up to a window's (here 2 blocks of 4 tokens, each
    costing one pool block): 10 tokens take 3 + 2 blocks, 5 tokens 2 + 2, 3 tokens 1 + 1."""
    from simspec.engine.kv_cache import WindowBlocks

    rig = make_rig([10, 5, 3], [4, 4, 4], window=WindowBlocks(per_seq=2, ratio=1.0))
    add_all(rig)
    batch = rig.sched.schedule()
    assert batch.prefill.tolist() == [0, 1, 2]
    assert rig.table.blocks[:3].tolist() == [5, 4, 2] and rig.pool.used == 11
    run_batch(rig, batch)
    # each decode's next token: request 0 reaches 11 tokens (3 full blocks, window capped at 2)
    rig.sched.schedule()
    assert rig.table.blocks[:3].tolist() == [5, 4, 2]
    done = []
    while rig.sched.has_work:
        done += run_batch(rig, rig.sched.schedule())
    assert sorted(done) == [0, 1, 2] and rig.pool.used == 0


def test_a_window_leaves_room_for_full_attention_tokens_once_it_is_full():
    """The pool holds 12 blocks: two 16-token prompts take 4 + 2 each (blocks of 4 tokens);
    without the windows in the count the 12-token third would have been admitted too. (vLLM
    also holds a prompt chunk's windowed blocks past the window for the chunk's own step,
    which simspec does not count: engines.yaml hybrid_kv_pool.)"""
    from simspec.engine.kv_cache import WindowBlocks

    rig = make_rig(
        [16, 16, 12], [2, 2, 2], num_blocks=12, window=WindowBlocks(per_seq=2, ratio=1.0)
    )
    add_all(rig)
    batch = rig.sched.schedule()
    assert batch.prefill.tolist() == [0, 1] and rig.pool.used == 12


def test_a_preempted_windowed_prefix_is_hit_again_in_blocks_of_tokens():
    """With prefix caching a preempted sequence leaves its pool blocks cached, windowed ones
    included; re-admitted, it reuses the blocks of tokens they hold (the last one recomputed)."""
    from simspec.engine.kv_cache import WindowBlocks

    rig = make_rig([16], [8], prefix_caching=True, window=WindowBlocks(per_seq=2, ratio=1.0))
    add_all(rig)
    run_batch(rig, rig.sched.schedule())  # the prompt: 4 + 2 pool blocks
    assert int(rig.table.blocks[0]) == 6
    rig.sched._preempt(0)
    assert rig.sched.free_queue is not None and rig.sched.free_queue.cached[0] == 6
    # 17 tokens now (prompt + first token): 4 full blocks cached, the hit stops at 16 - 1
    assert rig.sched._prefix_hit(0) == 4
    batch = rig.sched.schedule()
    assert batch.prefill.tolist() == [0] and batch.chunks.tolist() == [1]
    assert int(rig.table.blocks[0]) == 5 + 2 and rig.pool.used == 7
