"""vLLM-V1-like iteration-level scheduler: token budget, chunked prefill, paged KV, preemption.

Each iteration serves running requests first (a decode asks for the last sampled token plus the
draft slots the widest verify step needs; unfinished prefills continue with a chunk), then admits
waiting requests FCFS while sequence slots, token budget and KV blocks last. When a running request
cannot get blocks, the lowest-priority running request (the last admitted) is preempted by
recompute: its blocks are freed and it restarts its prefill (prompt plus tokens generated so far).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from simspec.engine.kv_cache import BlockPool, WindowBlocks
from simspec.engine.requests import RequestTable

_EMPTY = np.zeros(0, dtype=np.int64)
# tokens a running request is credited per request in SGLang's retraction estimate
# (SGLANG_RETRACT_DECODE_STEPS, python/sglang/srt/environ.py: 20)
RETRACT_DECODE_STEPS = 20
# SGLang bounds no decode batch by tokens (its running requests and KV do): a budget no step reaches
DECODE_UNBOUNDED = 1 << 62
_NOBODY = -1  # free blocks whose contents nobody will look up


class FreeQueue:
    """The pool's free blocks in eviction order, as runs of (owner, blocks): a preempted
    request's cached prefix or anonymous blocks. Taking from the head evicts a run's last
    blocks first, so what is left of an owner's run is the prefix it can still hit."""

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self.runs: deque[list[int]] = deque([[_NOBODY, pool.free]] if pool.free else [])
        self.cached: dict[int, int] = {}  # owner -> blocks of its prefix still in the queue

    def take(self, n: int) -> None:
        """``n`` blocks for new tokens, from the head (the least recently freed)."""
        self.pool.allocate(n)
        while n > 0:
            run = self.runs[0]
            used = min(n, run[1])
            run[1] -= used
            n -= used
            if run[0] != _NOBODY:
                self.cached[run[0]] = run[1]
            if run[1] == 0:
                self.runs.popleft()
                self.cached.pop(run[0], None)

    def give(self, n: int, owner: int = _NOBODY) -> None:
        """``n`` freed blocks to the tail; ``owner``: the request whose prefix they cache."""
        if n <= 0:
            return
        self.pool.release(n)
        if owner == _NOBODY and self.runs and self.runs[-1][0] == _NOBODY:
            self.runs[-1][1] += n
        else:
            self.runs.append([owner, n])
        if owner != _NOBODY:
            self.cached[owner] = n

    def touch(self, owner: int, n: int) -> None:
        """A re-admitted owner reuses the first ``n`` blocks of its cached prefix: they leave
        the queue; the rest of its run stays free, cached for nobody."""
        for run in self.runs:
            if run[0] == owner:
                run[0] = _NOBODY
                run[1] -= n
                break
        self.runs = deque(run for run in self.runs if run[1] > 0)
        self.cached.pop(owner, None)
        self.pool.allocate(n)


@dataclass(slots=True)  # not frozen: built every iteration, and frozen is much slower to build
class ScheduledBatch:
    """Who runs in one iteration: decoding sequences and prefill chunks."""

    decode: np.ndarray  # request ids that verify their draft (1 + reserved draft slots asked)
    prefill: np.ndarray  # request ids that process a prompt chunk
    chunks: np.ndarray  # tokens per prefill id
    # the decoding ones' tokens in the KV cache (``computed``), which scheduling reads anyway
    context: np.ndarray
    # > 0: the last decoding sequence verifies only this many tokens (its input token and
    # edge_width - 1 drafts): the token budget ran out at it and vLLM trimmed its draft
    edge_width: int = 0

    @property
    def empty(self) -> bool:
        return len(self.decode) == 0 and len(self.prefill) == 0


class Scheduler:
    """Decides, each iteration, which requests run and with how many tokens, over one KV block
    pool: running requests keep their place (a decode asks ``1 + reserved_draft_slots``
    tokens, a prefill the rest of its prompt up to the budget), waiting ones are admitted FCFS
    while ``max_num_seqs`` slots, ``max_num_batched_tokens`` and blocks last, and the last
    admitted is preempted by recompute when a running request needs blocks.

    ``reserved_draft_slots`` is the verify step minus its input token: K for a chain of K, 62
    for a 63-node tree, 0 without speculation. Every decode reserves that many tokens of
    budget and KV; where the draft changes with the batch size the replica sets it each step
    to that step's draft (``Replica._reserve``), else it is the method's one width.
    ``prefix_caching``: a preempted request's full blocks stay cached until new allocations
    evict them
    (:class:`FreeQueue`). ``reserve_output``: a waiting request is admitted only when the
    blocks of its prompt and whole output (and draft slots) fit beside what the running ones
    may still grow to, so no running request ever runs short (TRT-LLM's GUARANTEED_NO_EVICT
    capacity scheduler, the one trtllm-serve sets: tensorrt_llm/commands/serve.py
    get_llm_args at 00209af1).

    ``prefill_first``: SGLang's policy instead of vLLM's. A step runs the prefill batch it can
    form (a chunked prompt's next chunk, then waiting requests FCFS within the token budget,
    the slots and free blocks) and decodes nothing; the running requests decode only in a step
    no prefill can be formed for, and such a step admits no one (Scheduler.get_next_batch_to_run:
    "Run prefill first if possible", python/sglang/srt/managers/scheduler.py; decodes join a
    prefill batch only under --enable-mixed-chunk, ServerArgs.enable_mixed_chunk = False).
    Under DP attention without speculation (``ranks_apart``) that holds per rank: the ranks
    with no prompt chunk in the step decode in it (:meth:`_decodes_beside`).

    ``trim_drafts``: vLLM V1's budget edge. A decode whose draft does not fit the budget left
    gets that budget, its draft trimmed to fit (``ScheduledBatch.edge_width``), and the step
    takes no one after it: Scheduler.schedule's running loop, "num_new_tokens =
    min(num_new_tokens, token_budget)" while "token_budget > 0", then "Trim spec_token_ids
    list to num_scheduled_spec_tokens" (vllm/v1/core/sched/scheduler.py, every V1 release;
    find_string "num_scheduled_spec_tokens = ("). Without it a decode that does not fit waits
    a step.

    ``chunk_prompts`` off: no chunked prefill (vLLM V0's default under speculation or MLA,
    engines.yaml v0_scheduler): a waiting prompt is admitted whole or waits for a step whose
    budget it fits. ``watermark_blocks``: blocks an admission must leave free (V0's block
    manager watermark, engines.yaml admission_watermark).

    ``lookahead_slots``: KV tokens vLLM V1 allocates past each running request's scheduled
    tokens for an EAGLE-style (or draft-model) drafter's next positions: Scheduler.__init__
    "if speculative_config.use_eagle(): ... self.num_lookahead_tokens = self.num_spec_tokens"
    (and uses_draft_model() later), passed to every running request's allocate_slots; a
    waiting request with nothing computed gets none (find_string
    "self.num_lookahead_tokens = self.num_spec_tokens").

    ``decode_reserve``: SGLang's admission (PrefillAdder, python/sglang/srt/managers/
    schedule_policy.py), as (initial ratio, least ratio, decay a decode step, clip): a waiting
    request is admitted only while its prompt, its whole remaining output (at most clip) and a
    page fit in the free KV beside the running requests' remaining outputs times a ratio, and
    each one admitted adds its own prompt and output to what is set aside. The ratio starts
    at the initial one, falls by the decay every decode step down to the least, returns to the
    initial one when nothing runs, and after a preemption is re-estimated as SGLang's
    retract_decode does: (tokens the running requests generated + 20 per request) / their
    output lengths. The benchmark client's max_tokens is each request's output length.
    """

    def __init__(
        self,
        requests: RequestTable,
        pool: BlockPool,
        block_size: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        reserved_draft_slots: int,
        prefix_caching: bool = False,
        reserve_output: bool = False,
        prefill_first: bool = False,
        decode_reserve: tuple[float, float, float, int] | None = None,
        trim_drafts: bool = False,
        lookahead_slots: int = 0,
        rank_blocks: int | None = None,
        chunk_cap: int | None = None,
        chunk_prompts: bool = True,
        watermark_blocks: int = 0,
        retract_by_progress: bool = False,
        drop_last_hit: bool = False,
        requeue_at_back: bool = False,
        cache_prompt_only: bool = False,
        window: WindowBlocks | None = None,
        transfer_reserve: tuple[int, int] | None = None,
        ranks_apart: int = 1,
    ) -> None:
        self.requests, self.pool, self.block_size = requests, pool, block_size
        # DP attention ranks that schedule apart (SGLang without speculation): each request
        # lives on the rank the controller sent it to, round robin (data_parallel_controller.py
        # round_robin_scheduler, load_balance_method "auto" outside PD), and a rank's prefill
        # stops only its own decodes (Scheduler.get_next_batch_to_run decides per rank;
        # prepare_mlp_sync_batch_raw gathers the ranks' token counts and leaves each rank its
        # own forward mode). Under speculation SGLang gives every other rank an idle batch
        # while one prefills ("prefill and decode batches will not be mixed when spec and
        # dp-attn is enabled", SGLang 0.5.10): one rank here, as the ranks run as one.
        self.ranks_apart = ranks_apart
        self._rank = np.zeros(len(requests) if ranks_apart > 1 else 0, dtype=np.int64)
        self._next_rank = 0
        self._ranks_full: set[int] = set()  # ranks whose prefill budget this step is spent
        # a decode instance's admission (SGLang): tokens kept to decode per request held, and
        # the clip on an output's length (_admit_transfers)
        self.transfer_reserve = transfer_reserve
        # a pool that also holds each sequence's windowed layers and recurrent states (vLLM
        # V1's hybrid pool): the pool blocks of h blocks of tokens are
        # h + _win_extra[min(h, _win_per)], and every count of blocks below is of pool blocks
        # (:meth:`_units`)
        self._win_table = None if window is None else window.table()
        self._win_per = 0 if self._win_table is None else len(self._win_table) - 1
        self._win_extra = (
            None if self._win_table is None else self._win_table - np.arange(self._win_per + 1)
        )
        # the most blocks one request can hold: a DP attention rank's pool, where the ranks'
        # pools are run as one (a request lives on one rank; SGLang bounds its max_req_len by
        # the rank's pool); unset: the whole pool
        self.rank_blocks = pool.num_blocks if rank_blocks is None else rank_blocks
        self.trim_drafts = trim_drafts
        # split an admitted prompt at the budget (chunked prefill), else admit it whole or wait
        self.chunk_prompts = chunk_prompts
        self.watermark = watermark_blocks  # blocks an admission leaves free (vLLM V0)
        # SGLang's retraction order without speculation: fewest outputs first
        self.retract_by_progress = retract_by_progress
        # where a preempted request waits: vLLM's front of the queue, SGLang's back
        self.requeue_at_back = requeue_at_back
        # what a preempted request leaves cached: its computed tokens' full blocks (vLLM V1
        # caches output blocks as they fill), or its prompt's alone (SGLang's radix tree holds
        # the prompt from its prefill and frees the outputs on retraction)
        self.cache_prompt_only = cache_prompt_only
        # vLLM V1 under an EAGLE-style drafter recomputes the last cached block of a hit
        self.drop_last_hit = drop_last_hit
        self.lookahead = lookahead_slots  # KV past each running request's ask (vLLM EAGLE)
        self.reserve_output, self.prefill_first = reserve_output, prefill_first
        self.decode_reserve = decode_reserve
        self.ratio = decode_reserve[0] if decode_reserve else 0.0
        self._preempted = False  # since the last schedule: SGLang re-estimates its ratio
        # the free blocks in eviction order where a preempted prefix can be hit again
        self.free_queue = FreeQueue(pool) if prefix_caching else None
        self.max_seqs, self.max_tokens = max_num_seqs, max_num_batched_tokens
        # the largest prompt chunk one request takes in a step: a DP attention rank's budget,
        # where the ranks' budgets are run as one (each vLLM engine core applies its own
        # max_num_batched_tokens; SGLang gives each rank chunked_prefill_size // dp,
        # server_args.py _handle_data_parallelism), since a request lives on one rank;
        # unset, or where prompts enter whole: the whole budget
        self.chunk_cap: int = max_num_batched_tokens
        if chunk_cap is not None and chunk_prompts:
            self.chunk_cap = min(chunk_cap, max_num_batched_tokens)
        # whether the cap binds below the budget (only under DP attention)
        self._capped = self.chunk_cap < max_num_batched_tokens
        # the tokens a step's decodes may take: vLLM's budget covers decodes and prefill alike;
        # SGLang's chunked_prefill_size bounds prefill only, and its decode batch runs every
        # running request (update_running_batch; max_running_requests and KV bound it)
        self.decode_budget = DECODE_UNBOUNDED if prefill_first else max_num_batched_tokens
        self.reserved_draft_slots = reserved_draft_slots
        # each request's draft tokens where its next decode asks for what it proposed, not
        # the step's reservation (vLLM V1 under a lookup drafter: the replica sets them before
        # each schedule); None: every decode asks 1 + reserved_draft_slots
        self.draft_slots: np.ndarray | None = None
        # the widest draft the run may take (the step's own, reserved_draft_slots, follows a
        # load policy down and back up): what a request must fit whole, and what a promise of
        # no eviction sets aside (QA: sized at a step with speculation off, a request outgrew
        # the pool, or its promise, once it came back on)
        self.widest_draft_slots = reserved_draft_slots
        self.waiting: deque[int] = deque()
        # requests whose prompt KV a prefill instance sends (a decode instance's arrivals):
        # admitted FCFS as decoding while a slot and their blocks are free, never prefilled
        self.transfers: deque[int] = deque()
        self.admitted: list[int] = []  # transfers admitted this schedule, their first token new
        # a decode instance with prefill instances in front allocates a transfer's blocks
        # before its KV is sent (awaits_kv, set by simspec.engine.disaggregation; SGLang's
        # before the prompt is prefilled, vLLM's and TensorRT-LLM's after): the requests
        # holding their blocks while their KV is on its way, and those newly allocated for
        self.awaits_kv = False
        # a prefill instance keeps a finished request's blocks until its KV has left
        # (hold_finished, set by simspec.engine.disaggregation; release): the blocks so held
        self.hold_finished = False
        self.held_blocks = 0
        self.preallocated: set[int] = set()
        self.kv_requested: list[int] = []
        # those whose KV has landed, waiting for a running slot (SGLang's prebuilt batch takes
        # them up to max_running_requests; vLLM schedules them under max_num_seqs)
        self.landed: deque[int] = deque()
        # the requests that may hold a slot at once, running, preallocated or landed (SGLang:
        # its decode request pool; TensorRT-LLM: max_num_requests); None: a transfer is
        # allocated whenever fewer than max_seqs run, whatever is preallocated (vLLM, whose
        # WAITING_FOR_REMOTE_KVS requests are not running ones)
        self.prealloc_slots: int | None = max_num_seqs
        # with prealloc_slots None, the transfers one schedule allocates for count against
        # max_seqs with the running and landed ones (TensorRT-LLM's capacity scheduler);
        # False: each is checked against the running ones alone (vLLM)
        self.count_step_allocations = False
        # a transfer whose KV has landed recomputes the prompt's last token and samples its
        # first token itself, not the prefill instance's (vLLM's decode instance)
        self.recompute_last = False
        self.running: list[int] = []
        self._running_arr: np.ndarray | None = None  # cache of ``running`` as an array
        # a decode-only batch's blocks held (as scheduled) and tokens in KV (as accept left
        # them, :meth:`decoded`), kept for the next schedule of the very same running array
        self._held_ids: np.ndarray | None = None
        self._held: np.ndarray = _EMPTY
        self._steady_ids: np.ndarray | None = None
        self._steady_ctx: np.ndarray = _EMPTY

    # -- membership ----------------------------------------------------------------------------
    def add(self, rid: int) -> None:
        """A new request joins the queue; one that can never fit is marked unfinishable."""
        r = self.requests
        if self.ranks_apart > 1:  # the controller sends it before its rank checks it
            self._rank[rid] = self._next_rank
            self._next_rank = (self._next_rank + 1) % self.ranks_apart
        need = self._blocks_for(
            int(r.prompt_len[rid] + r.output_len[rid]) + self.widest_draft_slots + self.lookahead
        )
        never = need > self.rank_blocks
        if self.decode_reserve is not None:  # SGLang admits none whose ask reaches the pool
            clip = self.decode_reserve[3]
            ask = int(r.prompt_len[rid]) + min(int(r.output_len[rid]), clip) + self.block_size
            never = never or ask >= self.rank_blocks * self.block_size
        if r.unfinishable[rid] or never:  # or marked before (context)
            r.unfinishable[rid] = True
            return
        self.waiting.append(rid)

    def add_transferred(self, rid: int) -> None:
        """A request prefilled on another instance joins the transfer queue (one that can
        never fit is marked unfinishable, as :meth:`add` marks it, and under
        ``transfer_reserve`` one whose tokens and reserve, or prompt and clipped output, pass
        a rank's pool: nothing running, SGLang's budget is all of it): it is admitted
        decoding, its prompt's KV received, when a slot and its blocks are free (SGLang's
        decode server: DecodePreallocQueue takes a request once its KV fits, then receives
        it)."""
        self.add(rid)
        if not (self.waiting and self.waiting[-1] == rid):
            return
        self.waiting.pop()
        if self.transfer_reserve is not None:
            r, (reserve, clip) = self.requests, self.transfer_reserve
            computed = int(r.prompt_len[rid] + max(int(r.generated[rid]), 1) - 1)
            whole = int(r.prompt_len[rid]) + min(int(r.output_len[rid]), clip)
            if max(computed + reserve, whole) > self.rank_blocks * self.block_size:
                r.unfinishable[rid] = True
                return
        self.transfers.append(rid)

    def admit_transfers(self) -> None:
        """Admit (or, under ``awaits_kv``, preallocate) the transfers that fit now, as
        :meth:`schedule` does first: for a decode instance with nothing to run."""
        if self.transfers and not self.waiting:
            self._admit_transfers()

    def _admit_transfers(self) -> None:
        """The transfer queue's head, FCFS, while a slot and the blocks of its prompt and
        generated tokens (as after a prefill) are free. A request whose prefill instance
        sampled its first token joins with it (``admitted``: the replica delivers that token
        now); one the run started mid-output keeps its tokens. Under ``awaits_kv`` it is
        preallocated instead: its blocks held, its KV on the way (:meth:`kv_landed`), while
        :meth:`_transfer_slot` allows. Under ``transfer_reserve`` (SGLang's
        DecodePreallocQueue) the free tokens less ``reserve`` for each request held must also
        hold its tokens plus ``reserve``, and its prompt and clipped output less every running
        request's tokens (transfers are taken only while nobody waits to resume,
        :meth:`schedule`)."""
        r = self.requests
        room = self._transfer_room()
        ranks = max(self.pool.num_blocks // max(self.rank_blocks, 1), 1)  # DP attention ranks
        now = 0  # allocated for in this call
        while self.transfers and self._transfer_slot(now):
            rid = self.transfers[0]
            fresh = r.generated[rid] == 0
            computed = int(r.prompt_len[rid] + max(int(r.generated[rid]), 1) - 1)
            blocks = int(self._blocks_for(computed))
            if blocks > self.pool.free:
                return
            if room is not None:
                assert self.transfer_reserve is not None
                reserve, clip = self.transfer_reserve
                allocatable, retractable = room
                need = computed + reserve
                whole = int(r.prompt_len[rid]) + min(int(r.output_len[rid]), clip)
                # one rank's share of the budget and of the running tokens: under DP attention
                # each rank's queue budgets its own pool (a rank's share of the whole here)
                if max(need, whole - retractable // ranks) > allocatable // ranks:
                    return
                room = (allocatable - need, retractable)
            if self.reserve_output:  # a promise of no eviction covers them too
                later = int(self._final_blocks(np.array([rid]))[0])
                if later + self._promised() > self.pool.free:
                    return
            self.transfers.popleft()
            self._take(blocks)
            r.blocks[rid], r.computed[rid] = blocks, computed
            if self.awaits_kv:  # its prefill starts now; it decodes once its KV lands
                self.preallocated.add(rid)
                self.kv_requested.append(rid)
                now += 1
                continue
            self._decode_transferred(rid, fresh)

    def _decode_transferred(self, rid: int, fresh: bool) -> None:
        """A transferred request, its KV in place, joins the running batch (with the first
        token its prefill instance sampled, delivered now, where ``fresh``)."""
        r = self.requests
        if fresh and self.recompute_last:
            # it joins as a prefill of the prompt's last token, whose step samples its first
            self.requests.computed[rid] = r.prompt_len[rid] - 1
            self.running.append(rid)
            self._running_arr = None
            return
        r.decoding[rid] = True
        if fresh:
            r.generated[rid] = 1
            self.admitted.append(rid)
        self.running.append(rid)
        self._running_arr = None

    def _transfer_slot(self, now: int = 0) -> bool:
        """Whether the transfer queue's head may take a slot now, ``now`` of them allocated
        for already in this call."""
        if not self.awaits_kv:
            return len(self.running) < self.max_seqs
        if self.prealloc_slots is None:
            if self.count_step_allocations:
                return len(self.running) + len(self.landed) + now < self.max_seqs
            return len(self.running) < self.max_seqs
        return self._holding() < self.prealloc_slots

    def _holding(self) -> int:
        """Requests a decode instance holds a slot for: running, preallocated (their KV on its
        way) or landed (waiting for a running slot); SGLang counts its running batch,
        transfer queue and waiting queue."""
        return len(self.running) + len(self.preallocated) + len(self.landed)

    def kv_landed(self, rid: int) -> None:
        """The KV of preallocated request ``rid`` has arrived: it decodes from the next step
        where a running slot is free, else it waits for one (SGLang's DecodeTransferQueue
        hands it to the waiting queue, whose prebuilt batch joins the running one up to
        max_running_requests; vLLM schedules it as any waiting request, under max_num_seqs)."""
        self.preallocated.remove(rid)
        if self.landed or len(self.running) >= self.max_seqs:
            self.landed.append(rid)
            return
        self._decode_transferred(rid, bool(self.requests.generated[rid] == 0))

    def _run_landed(self) -> None:
        """Landed requests join the running batch, first landed first, while slots are free."""
        r = self.requests
        while self.landed and len(self.running) < self.max_seqs:
            rid = self.landed.popleft()
            self._decode_transferred(rid, bool(r.generated[rid] == 0))

    def _transfer_room(self) -> tuple[int, int] | None:
        """SGLang's budget for preallocating transferred requests (_allocatable_tokens): the
        free tokens less the larger of ``reserve`` tokens for each request held (running,
        preallocated or landed: SGLang counts its running batch, transfer queue and waiting
        queue) and the most any running one may still need beyond what all of them hold; with
        the tokens the running requests hold (the retractable ones). None without
        ``transfer_reserve``. Under DP attention the ranks' pools are one here: a transfer must
        fit one rank's share of the budget (:meth:`_admit_transfers`), as SGLang budgets each
        rank's own."""
        if self.transfer_reserve is None:
            return None
        reserve, clip = self.transfer_reserve
        r, rids = self.requests, self._running_array()
        retractable = int((r.prompt_len[rids] + r.generated[rids]).sum()) if len(rids) else 0
        single = 0
        if len(rids):
            single = int((np.minimum(r.output_len[rids], clip) + r.prompt_len[rids]).max())
            single -= retractable
        free = self.pool.free * self.block_size
        return free - max(reserve * self._holding(), single), retractable

    def resume(self, rid: int) -> bool:
        """A request that was decoding before the run started (its ``generated`` set): its KV
        holds the prompt and every generated token but the last, as after a decode step. When
        the slots or blocks are short it waits with an empty cache, as a preempted request
        does, and recomputes prompt and generated tokens. Returns whether it runs."""
        r = self.requests
        self.add(rid)
        if r.unfinishable[rid] or len(self.running) >= self.max_seqs:
            return False
        computed = int(r.prompt_len[rid] + r.generated[rid] - 1)
        blocks = int(self._blocks_for(computed))
        if blocks > self.pool.free:
            return False
        if self.reserve_output:
            # a promise of no eviction covers the cohort too: its whole output must fit beside
            # what the running ones may still grow to (QA: TRT-LLM's warm-up had preempted)
            later = int(self._final_blocks(np.array([rid]))[0])
            if later + self._promised() > self.pool.free:
                return False
        self.waiting.remove(rid)
        self._take(blocks)
        r.blocks[rid], r.computed[rid], r.decoding[rid] = blocks, computed, True
        self.running.append(rid)
        self._running_arr = None
        return True

    def finish(self, rids: np.ndarray) -> None:
        blocks = self.requests.blocks
        if len(rids) == 1:  # the common case (a closed loop's one departure): no set, no pass
            rid = int(rids[0])
            if rid in self.running:
                self.running.remove(rid)
                arr = self._running_arr  # the same order less that one: no array rebuilt
                self._running_arr = None if arr is None else arr[arr != rid]
            else:
                self._running_arr = None
            held = int(blocks[rid])
        else:
            done = set(rids.tolist())
            self.running = [r for r in self.running if r not in done]
            self._running_arr = None
            held = int(blocks[rids].sum())
        if self.hold_finished:  # freed by release once the KV has been sent
            self.held_blocks += held
            return
        self._give(held)
        blocks[rids] = 0

    def release(self, rid: int) -> None:
        """The KV of ``rid``, finished and held here, has been sent: its blocks are free."""
        n = int(self.requests.blocks[rid])
        self.held_blocks -= n
        self._give(n)
        self.requests.blocks[rid] = 0

    def decoded(self, rids: np.ndarray, computed: np.ndarray) -> None:
        """The decoding requests ``rids`` (the array this iteration's batch named) now hold
        ``computed`` tokens in KV, as accept wrote them into the request table: while the same
        requests run on, the next schedule reads them and their blocks from here instead of
        gathering both from the table (the arrays are never written through)."""
        if rids is self._held_ids:
            self._steady_ids, self._steady_ctx = rids, computed

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self.transfers or self.landed)

    # -- a batch that decodes on unchanged (a closed loop between arrivals and departures) ----
    def alone(self) -> int | None:
        """The running request when it is the only one, decodes and nobody waits (a closed
        loop at concurrency 1 between arrivals), while its decode ask fits the budget; else
        None. Until it finishes, every :meth:`schedule` would run it alone: the replica steps
        it without building a batch (``Replica._decode_alone``)."""
        if len(self.running) != 1 or self.waiting or self.transfers:
            return None
        rid = self.running[0]
        if not self.requests.decoding[rid] or 1 + self.reserved_draft_slots > self.decode_budget:
            return None
        return rid

    def schedule_alone(self, computed: int, held: int, slots: int | None = None) -> int:
        """:meth:`schedule` for the request :meth:`alone` names, holding ``held`` blocks with
        ``computed`` tokens in KV: the same blocks taken and the same SGLang ratio step, with
        no batch built. Returns the blocks it holds now, or -1 (nothing done) when they are not
        free: then :meth:`schedule` must run, which preempts. ``slots``: the draft tokens its
        decode asks for where it is what it proposed (:attr:`draft_slots`)."""
        drafts = self.reserved_draft_slots if slots is None else slots
        ask = computed + 1 + drafts + self.lookahead
        new = max(int(self._blocks_for(ask)), held)
        return new if self._take_for_decode(new - held) else -1

    def alone_fits(self, context: int, held: int) -> bool:
        """Whether the request :meth:`alone` names, holding ``held`` blocks, finds the blocks
        of every decode step up to one with ``context`` tokens in KV before it (asking the
        reserved draft slots): its asks' blocks only grow, so the last one's decide."""
        ask = context + 1 + self.reserved_draft_slots + self.lookahead
        return max(int(self._blocks_for(ask)), held) - held <= self.pool.free

    def schedule_alone_steps(
        self, context: np.ndarray, held: int, slots: np.ndarray | None = None
    ) -> np.ndarray:
        """:meth:`schedule_alone` for the next steps of the request :meth:`alone` names, at
        once (``context``: its tokens in KV before each step): the blocks it holds after each
        step that fits, taken from the pool as those steps would take them (their asks'
        blocks, never fewer than it held; each step fits while the blocks added so far are
        free). Empty when not even the first fits. Not under SGLang's ratio, which each step
        moves (the caller checks); the steps' takes are one (FreeQueue.take of their sum
        leaves the queue and the pool as the takes one after another do). ``slots``: each
        step's draft tokens where its decode asks for what it proposed (:meth:`schedule_alone`'s
        ``slots``)."""
        # a batch of one: ceil((context + 1 + drafts + lookahead) / size), as schedule_alone
        # asks, is the batch's floor((context + drafts + lookahead + size) / size)
        one = None if slots is None else slots[:, None]
        held_one = np.array([held], dtype=np.int64)
        return self._take_steps(context[:, None], held_one, one)[:, 0]

    def steady(self) -> np.ndarray | None:
        """The running requests when more than one runs, every one decodes, nobody waits and
        their decode asks fit the budget (a closed loop between a departure and the next
        arrival); else None. Until one finishes, every :meth:`schedule` would run the same
        batch: the replica steps it without building one (``Replica._decode_steady``)."""
        n = len(self.running)
        if n < 2 or self.waiting or self.transfers:
            return None
        if n * (1 + self.reserved_draft_slots) > self.decode_budget:
            return None
        rids = self._running_array()
        if np.count_nonzero(self.requests.decoding[rids]) != n:
            return None
        return rids

    def schedule_steady(
        self, computed: np.ndarray, held: np.ndarray, slots: np.ndarray | None = None
    ) -> np.ndarray | None:
        """:meth:`schedule` for the batch :meth:`steady` names, holding ``held`` blocks with
        ``computed`` tokens in KV: the same blocks taken and the same SGLang ratio step, with
        no batch built. Returns the blocks each holds now, or None (nothing done) when they
        are not free: then :meth:`schedule` must run, which preempts. ``slots``: each one's
        draft tokens where its decode asks for what it proposed (:attr:`draft_slots`)."""
        # ceil((computed + ask) / size) as one floor division, as _schedule_running_at_once
        # the ask (1 + slots) and the lookahead slots, + size - 1
        drafts = self.reserved_draft_slots if slots is None else slots
        up = drafts + self.lookahead + self.block_size
        full = (computed + up) // self.block_size
        if self._win_extra is not None:
            full = full + self._win_extra[np.minimum(full, self._win_per)]
        new_held = np.maximum(full, held)
        return new_held if self._take_for_decode(self.requests.total(new_held - held)) else None

    def schedule_steady_steps(
        self, context: np.ndarray, held: np.ndarray, slots: np.ndarray | None = None
    ) -> np.ndarray:
        """:meth:`schedule_steady` for the next steps of the batch :meth:`steady` names, at
        once (``context``: each one's tokens in KV before each step, one row a step): the
        blocks each holds after each step
        that fits, taken from the pool as those steps would take them (each step's asks'
        blocks, never fewer than held; a step fits while the blocks added so far are free).
        No rows when not even the first fits. Not under SGLang's ratio, which each step moves
        (the caller checks). ``slots``: each one's draft tokens at each step where its decode
        asks for what it proposed (:meth:`schedule_steady`'s ``slots``)."""
        return self._take_steps(context, held, slots)

    def _take_steps(
        self, context: np.ndarray, held: np.ndarray, slots: np.ndarray | None
    ) -> np.ndarray:
        """:meth:`schedule_steady_steps`' blocks and takes (:meth:`schedule_alone_steps`' for
        a batch of one)."""
        assert self.decode_reserve is None
        drafts = self.reserved_draft_slots if slots is None else slots
        up = drafts + self.lookahead + self.block_size
        full = (context + up) // self.block_size
        if self._win_extra is not None:
            full = full + self._win_extra[np.minimum(full, self._win_per)]
        new_held = np.maximum.accumulate(np.maximum(full, held), axis=0)
        added = new_held.sum(axis=1) - self.requests.total(held)  # never decreasing
        n = int(np.searchsorted(added, self.pool.free, side="right"))
        if n:
            self._take_for_decode(int(added[n - 1]))
        return new_held[:n]

    def _take_for_decode(self, blocks: int) -> bool:
        """What :meth:`schedule` does beyond the blocks' arithmetic for a batch that decodes
        on unchanged: take the ``blocks`` its asks add and step SGLang's ratio; False (nothing
        done) when they are not free."""
        if blocks > self.pool.free:
            return False
        self._steady_ids = None
        self._take(blocks)
        if self.decode_reserve is not None:
            self._update_ratio()
        return True

    def running_ids(self) -> np.ndarray:
        """The running requests as an id array (the same array while they do not change)."""
        return self._running_array()

    # -- one iteration ----------------------------------------------------------------------------
    def schedule(self) -> ScheduledBatch:
        """Vectorised when every running request fits; the per-request path handles the rest."""
        if self.landed:
            self._run_landed()
        if self.transfers and not self.waiting:
            # a preempted request (the only kind that waits here) comes back first, as vLLM
            # puts it at the front of its queue and SGLang resumes retracted requests before
            # it preallocates for new ones (QA: new arrivals kept taking its blocks)
            self._admit_transfers()
        if self.decode_reserve is not None and not self.running:
            self.ratio = self.decode_reserve[0]  # idle: SGLang resets its ratio
        if self.prefill_first:
            batch = self._schedule_prefill_only()
            if batch is not None:
                return batch
        if self.retract_by_progress and self.widest_draft_slots == 0:
            self._retract_for_decode()
        batch = self._schedule_running_at_once()
        if batch is None:
            batch = self._schedule_general()
        if self.landed and batch.empty:  # (landed: a disaggregated decode instance only)
            # its running requests retracted behind landed ones holding the blocks: those run
            # (vLLM's queue would stall at the retracted head; QA: raised)
            self._run_landed()
            batch = self._schedule_running_at_once() or self._schedule_general()
        if self.decode_reserve is not None:
            self._update_ratio()
        return batch

    def _retract_for_decode(self) -> None:
        """SGLang's retraction when the running requests' next decode tokens do not fit:
        the request with the fewest output tokens so far goes first (the longest prompt among
        equals), one at a time until the rest fit, one kept whatever (ScheduleBatch.
        retract_decode: "sorted_indices.sort(key=lambda i: (len(self.reqs[i].output_ids),
        -len(self.reqs[i].origin_input_ids)), reverse=True)" then "idx = sorted_indices.pop()"
        while "not self.check_decode_mem(selected_indices=sorted_indices)"; under speculative
        decoding it retracts from the batch's back, as vLLM preempts)."""
        r = self.requests
        while len(self.running) > 1:
            rids = self._running_array()
            decoding = r.decoding[rids]
            ask = np.where(decoding, 1 + self.lookahead, r.num_tokens(rids) - r.computed[rids])
            need = np.maximum(self._blocks_for(r.computed[rids] + ask) - r.blocks[rids], 0)
            if int(need.sum()) <= self.pool.free:
                return
            # fewest outputs, then the longest prompt: lexsort's last key is its primary
            victim = int(rids[np.lexsort((-r.prompt_len[rids], r.generated[rids]))[0]])
            self._preempt(victim)

    def _update_ratio(self) -> None:
        """After a decode step, SGLang's new_token_ratio: decayed, or re-estimated from the
        running requests where one was preempted (retract_decode's new_estimate_ratio)."""
        assert self.decode_reserve is not None
        init, least, decay, _ = self.decode_reserve
        if self._preempted and self.running:
            r, rids = self.requests, self._running_array()
            made = float(r.generated[rids].sum()) + RETRACT_DECODE_STEPS * len(rids)
            self.ratio = min(1.0, made / max(float(r.output_len[rids].sum()), 1.0))
        else:
            self.ratio = max(self.ratio - decay, least)
        self._preempted = False

    def _blocks_for(self, tokens: int | np.ndarray) -> int | np.ndarray:
        """Pool blocks of a sequence with ``tokens`` tokens (:meth:`_units`)."""
        return self._units(-(-tokens // self.block_size))

    def _units(self, full: int | np.ndarray) -> int | np.ndarray:
        """Pool blocks of a sequence with ``full`` blocks of tokens: those, and its windowed
        layers' blocks where the pool holds them too (up to a window's)."""
        extra = self._win_extra
        if extra is None:
            return full
        if isinstance(full, np.ndarray):
            return full + extra[np.minimum(full, self._win_per)]
        return full + int(extra[min(full, self._win_per)])

    def _full_of(self, units: int) -> int:
        """The most blocks of tokens a sequence holds within ``units`` pool blocks."""
        table = self._win_table
        if table is None:
            return units
        top = int(table[-1])
        if units >= top:
            return self._win_per + units - top
        return int(np.searchsorted(table, units, side="right")) - 1

    def _running_array(self) -> np.ndarray:
        if self._running_arr is None:
            self._running_arr = np.array(self.running, dtype=np.int64)
        return self._running_arr

    def _schedule_running_at_once(self) -> ScheduledBatch | None:
        """Common case: all running requests get their full ask within budget and free blocks.

        Every running request asks for ``1 + reserved_draft_slots`` tokens (decode) or the rest
        of its prompt; when none is prefilling, the ask is one scalar and needs no per-request
        array.
        """
        r, size = self.requests, self.block_size
        rids = self._running_array()
        decode_ask = 1 + self.reserved_draft_slots
        # each decode's own ask where it is what it proposed (draft_slots), else decode_ask
        own = None if self.draft_slots is None else 1 + self.draft_slots[rids]
        steady = self._steady_ids is rids  # the same decoding requests as last iteration
        self._steady_ids = None
        if len(rids) == 1 and r.decoding[rids[0]]:
            # one decoding request (batch 1, the longest runs): the same integers as below,
            # without numpy calls on one-element arrays
            rid = int(rids[0])
            total = decode_ask if own is None else int(own[0])
            if total > self.decode_budget:
                return None
            has = int(r.blocks[rid])
            new = (int(r.computed[rid]) + total + self.lookahead + size - 1) // size
            new = max(int(self._units(new)), has)
            if new - has > self.pool.free:
                return None
            self._take(new - has)
            r.blocks[rid] = new
            return self._with_admitted(rids, r.computed[rids], _EMPTY, _EMPTY, total)
        ask_up: int | np.ndarray  # ask + size - 1: floor division by size then rounds up
        if steady:  # their tokens in KV and blocks, as the last iteration left them
            computed, held, all_decode = self._steady_ctx, self._held, True
        else:
            computed, held = r.computed[rids], r.blocks[rids]
            decoding = r.decoding[rids]
            all_decode = np.count_nonzero(decoding) == len(rids)
        if all_decode and own is None:  # every ask the decode one: a scalar, no array
            total = len(rids) * decode_ask
            ask_up = decode_ask + self.lookahead + size - 1
        elif all_decode:
            assert own is not None
            total = int(own.sum())
            ask_up = own + (self.lookahead + size - 1)
        else:
            prefilling = ~decoding
            need = r.prompt_len[rids] + r.generated[rids] - computed
            if self._capped:
                need = np.minimum(need, self.chunk_cap)
            ask = np.where(prefilling, need, decode_ask if own is None else own)
            total = int(ask.sum())
            ask_up = ask + (self.lookahead + size - 1)
        if total > (self.decode_budget if all_decode else self.max_tokens):
            return None
        # blocks for computed + ask tokens, ceil((computed + ask) / size); never fewer than held
        new_held = np.maximum(self._units((computed + ask_up) // size), held)
        blocks = r.total(new_held - held)
        if blocks > self.pool.free:
            return None
        self._take(blocks)
        r.blocks[rids] = new_held
        if all_decode:
            self._held_ids, self._held = rids, new_held
            return self._with_admitted(rids, computed, _EMPTY, _EMPTY, total)
        return self._with_admitted(
            rids[decoding], computed[decoding], rids[prefilling], ask[prefilling], total
        )

    def _schedule_prefill_only(self) -> ScheduledBatch | None:
        """Under ``prefill_first``, the prefill batch this step can form, or None (then the
        running requests decode): running requests still prefilling take their next chunk
        first (SGLang's chunked request), then waiting ones are admitted with the rest of the
        budget. A chunk whose blocks are not free leaves it to the decode path, which preempts."""
        r = self.requests
        rids = self._running_array()
        # one vectorised look for the prompts still prefilling: the common step has none and
        # nobody waiting, and decodes without a per-request pass
        still = rids[~r.decoding[rids]].tolist() if len(rids) else []
        if not still and not self.waiting:
            return None
        budget = self.max_tokens
        prefill: list[int] = []
        chunks: list[int] = []
        # a rank's chunked request takes its rank's budget (SGLang's PrefillAdder per rank,
        # chunked_prefill_size // dp): nobody is admitted beside it on that rank (_admit)
        self._ranks_full = set()
        for rid in still:
            if budget <= 0:
                break
            n = min(int(r.num_tokens(rid) - r.computed[rid]), budget, self.chunk_cap)
            extra = max(int(self._blocks_for(int(r.computed[rid]) + n)) - int(r.blocks[rid]), 0)
            if extra > self.pool.free:
                return None
            self._take(extra)
            r.blocks[rid] += extra
            prefill.append(rid)
            chunks.append(n)
            budget -= n
            if self.ranks_apart > 1:
                self._ranks_full.add(int(self._rank[rid]))
        self._admit(budget, prefill, chunks)
        self._ranks_full = set()
        if not prefill:
            return None
        prefilling = np.array(prefill, dtype=np.int64)
        decode = self._decodes_beside(prefilling) if self.ranks_apart > 1 else _EMPTY
        return ScheduledBatch(decode, prefilling, np.array(chunks, dtype=np.int64),
                              r.computed[decode] if len(decode) else _EMPTY)  # fmt: skip

    def _decodes_beside(self, prefill: np.ndarray) -> np.ndarray:
        """The running requests that decode in a prefill step under :attr:`ranks_apart`:
        those on ranks with no prompt chunk this step whose next tokens' blocks are free, in
        running order (one needing no new block always is). The ranks' pools are one here:
        a decode whose blocks another rank's admission took waits for a step without prompts,
        whose decode path retracts (SGLang's rank would retract in its own step)."""
        r, size = self.requests, self.block_size
        rids = self._running_array()
        rids = rids[r.decoding[rids] & ~np.isin(self._rank[rids], self._rank[prefill])]
        if not len(rids):
            return _EMPTY
        held = r.blocks[rids]
        up = 1 + self.reserved_draft_slots + self.lookahead + size - 1
        new_held = np.maximum(self._units((r.computed[rids] + up) // size), held)
        need = new_held - held
        # the running order's blocks while free (the sums only grow, so the first that does
        # not fit ends them), and every decode that needs none
        fits = (np.cumsum(need) <= self.pool.free) | (need == 0)
        if not fits.all():
            rids, new_held, need = rids[fits], new_held[fits], need[fits]
            if not len(rids):
                return _EMPTY
        self._steady_ids = None
        self._take(r.total(need))
        r.blocks[rids] = new_held
        if self.decode_reserve is not None:
            self._update_ratio()  # their ranks' decode step (update_running_batch)
        return rids

    def _with_admitted(
        self,
        decode: np.ndarray,
        context: np.ndarray,
        prefill: np.ndarray,
        chunks: np.ndarray,
        total: int,
    ) -> ScheduledBatch:
        """The running requests' batch plus the waiting ones the rest of the budget admits."""
        budget = self.max_tokens - total
        if self.prefill_first:  # its prefill step admitted whoever could be
            budget = 0
        if self.waiting and len(self.running) < self.max_seqs and budget > 0:
            new_ids: list[int] = []
            new_chunks: list[int] = []
            rids = self._running_array()
            self._admit(budget, new_ids, new_chunks)
            if new_ids:
                admitted = np.array(new_ids, dtype=np.int64)
                self._running_arr = np.concatenate([rids, admitted])  # they run from now on
                prefill = np.concatenate([prefill, admitted]) if len(prefill) else admitted
                more = np.array(new_chunks, dtype=np.int64)
                chunks = np.concatenate([chunks, more]) if len(chunks) else more
        return ScheduledBatch(decode, prefill, chunks, context)

    def _schedule_general(self) -> ScheduledBatch:
        r = self.requests
        i, budget, head, prefill, chunks = self._fitting_head()
        chunk_cap = self.chunk_cap  # a prompt's chunk stays within its rank's budget
        own = self.draft_slots
        decode: list[int] = []
        preempted = False
        edge = 0
        while i < len(self.running) and budget > 0:
            rid = self.running[i]
            decoding = bool(r.decoding[rid])
            left = int(r.num_tokens(rid) - r.computed[rid])
            drafts = self.reserved_draft_slots if own is None else int(own[rid])
            n = 1 + drafts if decoding else min(left, budget, chunk_cap)
            if n > budget:
                if not self.trim_drafts:
                    i += 1
                    continue
                # vLLM gives the request what is left and trims its draft to fit; the budget
                # is then spent and the loop ends (trim_drafts)
                n = edge = budget
            held = int(self._blocks_for(int(r.computed[rid]) + n + self.lookahead))
            extra = max(held - int(r.blocks[rid]), 0)
            while extra > self.pool.free and self.running[-1] != rid:
                self._preempt(self.running[-1])
                preempted = True
            if extra > self.pool.free:
                self._preempt(rid)  # lowest priority left: nothing below it can run either
                preempted = True
                break
            self._take(extra)
            r.blocks[rid] += extra
            (decode if decoding else prefill).append(rid)
            if not decoding:
                chunks.append(n)
            budget -= n
            i += 1
        if edge and decode[-1:] != [rid]:
            edge = 0  # the trimmed request preempted itself: nobody's draft was cut
        if not preempted and not self.prefill_first:
            self._admit(budget, prefill, chunks)
        decode_ids = np.array(decode, dtype=np.int64)
        if len(head):
            decode_ids = np.concatenate([head, decode_ids]) if decode else head
        return ScheduledBatch(
            decode_ids,
            np.array(prefill, dtype=np.int64),
            np.array(chunks, dtype=np.int64),
            r.computed[decode_ids],
            edge,
        )

    def _fitting_head(self) -> tuple[int, int, np.ndarray, list[int], list[int]]:
        """The leading running requests :meth:`_schedule_general`'s loop would give their
        whole ask (decode, or the rest of the prompt) without preempting anyone, scheduled
        at once: their asks summed within the budget, their new blocks within the free
        ones (every partial sum then is too, so no request on the way would have found its
        blocks short). Returns where the loop goes on, the budget left, and the head's
        decoding ids, prefilling ids and chunks, in running order."""
        r = self.requests
        budget = self.decode_budget  # SGLang's decode batch is unbounded, vLLM's is the budget
        if not self.running:
            return 0, budget, _EMPTY, [], []
        rids = self._running_array()
        decoding, computed = r.decoding[rids], r.computed[rids]
        drafts = self.reserved_draft_slots if self.draft_slots is None else self.draft_slots[rids]
        ask = np.where(decoding, 1 + drafts, r.num_tokens(rids) - computed)
        if self.prefill_first or self._capped:  # a prompt's chunk stays within its budget
            ask = np.where(decoding, ask, np.minimum(ask, self.chunk_cap))
        # the loop gives a request its ask while the budget before it is positive and the
        # ask fits what is left: cumulative asks up to the budget, and none past the first
        # that reaches it (a zero ask there would find the budget spent)
        asked = np.cumsum(ask)
        fits = int(
            min(
                np.searchsorted(asked, budget, side="right"),
                np.searchsorted(asked, budget, side="left") + 1,
            )
        )
        if fits == 0:
            return 0, budget, _EMPTY, [], []
        rids, decoding, ask = rids[:fits], decoding[:fits], ask[:fits]
        extra = np.maximum(
            self._blocks_for(computed[:fits] + ask + self.lookahead) - r.blocks[rids], 0
        )
        taken = np.cumsum(extra)
        fits = int(np.searchsorted(taken, self.pool.free, side="right"))
        if fits == 0:
            return 0, budget, _EMPTY, [], []
        rids, decoding, ask, extra = rids[:fits], decoding[:fits], ask[:fits], extra[:fits]
        self._take(int(taken[fits - 1]))
        r.blocks[rids] += extra
        prefilling = ~decoding
        return (
            fits,
            budget - int(ask.sum()),
            rids[decoding],
            rids[prefilling].tolist(),
            ask[prefilling].tolist(),
        )

    def _admit(self, budget: int, prefill: list[int], chunks: list[int]) -> None:
        r = self.requests
        promised = self._promised() if self.reserve_output else 0
        set_aside = self._set_aside() if self.decode_reserve is not None else 0.0
        # SGLang weighs every candidate against the KV free before this admission (the
        # admitted prompts are set aside, not yet taken from the pool)
        free_before = self.pool.free * self.block_size
        while self.waiting and len(self.running) < self.max_seqs and budget > 0:
            rid = self.waiting[0]
            if self._ranks_full and int(self._rank[rid]) in self._ranks_full:
                break  # its rank's budget went to the chunked request (FCFS: the queue waits)
            hit = self._prefix_hit(rid)
            computed = int(r.computed[rid]) + hit * self.block_size
            n = min(int(r.num_tokens(rid)) - computed, budget, self.chunk_cap)
            if n < int(r.num_tokens(rid)) - computed and not self.chunk_prompts:
                break  # no chunked prefill: the prompt waits for a budget it fits whole
            hit = int(self._units(hit))  # from here the pool blocks the hit reuses
            extra = int(self._blocks_for(computed + n)) - int(r.blocks[rid]) - hit
            # the hit blocks leave the free queue too; V0 keeps a watermark free
            if extra + hit + self.watermark > self.pool.free:
                break
            if self.decode_reserve is not None:
                clip = self.decode_reserve[3]
                extend = int(r.num_tokens(rid)) - computed
                left = min(int(r.output_len[rid] - r.generated[rid]), clip)
                if extend + left + self.block_size >= free_before - set_aside:
                    break
                set_aside += n + (left if n == extend else 0)
            if self.reserve_output:
                later = int(self._final_blocks(np.array([rid]))[0]) - int(r.blocks[rid]) - hit
                if later + hit + promised > self.pool.free:
                    break
                promised += later - extra
            self.waiting.popleft()
            self.running.append(rid)
            self._running_arr = None
            if self.free_queue is not None and rid in self.free_queue.cached:
                self.free_queue.touch(rid, hit)  # what it does not reuse is nobody's now
                r.computed[rid] = computed
            self._take(extra)
            r.blocks[rid] += hit + extra
            prefill.append(rid)
            chunks.append(n)
            budget -= n

    def _set_aside(self) -> float:
        """KV tokens SGLang sets aside for the running requests' remaining outputs: each
        one's (at most the clip) times the current ratio."""
        assert self.decode_reserve is not None
        rids = self._running_array()
        if not len(rids):
            return 0.0
        r, clip = self.requests, self.decode_reserve[3]
        left = np.minimum(r.output_len[rids] - r.generated[rids], clip)
        return float(left.sum()) * self.ratio

    def _final_blocks(self, rids: np.ndarray) -> np.ndarray:
        """Blocks each request holds once its whole output (and the widest verify) is cached."""
        r = self.requests
        tokens = r.prompt_len[rids] + r.output_len[rids] + self.widest_draft_slots
        return np.asarray(self._units(-(-tokens // self.block_size)))

    def _promised(self) -> int:
        """Free blocks the running requests may still take as they grow to their whole output,
        with those preallocated or landed at a decode instance, which will run (QA: a
        TensorRT-LLM decode instance, promised no eviction, evicted)."""
        rids = self._running_array()
        if self.preallocated or self.landed:
            rids = np.concatenate(
                [rids, np.fromiter(self.preallocated, np.int64), np.array(self.landed, np.int64)]
            )
        if not len(rids):
            return 0
        held = self.requests.blocks[rids]
        return int(np.maximum(self._final_blocks(rids) - held, 0).sum())

    def _prefix_hit(self, rid: int) -> int:
        """Blocks of tokens of a waiting request's prefix still cached (0 without prefix
        caching; in a hybrid pool, those its cached pool blocks hold: :meth:`_full_of`): at
        most all but the block of its last token, which is always recomputed (vLLM's
        get_computed_blocks caps the hit at num_tokens - 1)."""
        if self.free_queue is None:
            return 0
        cached = self._full_of(self.free_queue.cached.get(rid, 0))
        hit = min(cached, (int(self.requests.num_tokens(rid)) - 1) // self.block_size)
        if self.drop_last_hit and hit:
            # FullAttentionManager.find_longest_cache_hit: "if use_eagle and
            # computed_blocks[0]: ... computed.pop()" (the drafter needs the hidden states
            # of the block's tokens, which only a forward over them gives)
            hit -= 1
        return hit

    def _take(self, n: int) -> None:
        if self.free_queue is None:
            self.pool.allocate(n)
        elif n > 0:
            self.free_queue.take(n)

    def _give(self, n: int, owner: int = _NOBODY) -> None:
        if self.free_queue is None:
            self.pool.release(n)
        else:
            self.free_queue.give(n, owner)

    def _preempt(self, rid: int) -> None:
        """Recompute preemption: drop the KV, go back to the front of the queue (vLLM) or
        its back (SGLang: ``requeue_at_back``). With prefix caching its full blocks stay
        cached in the free queue behind its partial one: of its computed tokens, or of its
        prompt alone (SGLang: ``cache_prompt_only``)."""
        self.running.remove(rid)
        self._running_arr = None
        held = int(self.requests.blocks[rid])
        cached = int(self.requests.computed[rid])
        if self.cache_prompt_only:
            cached = min(cached, int(self.requests.prompt_len[rid]))
        full = min(int(self._units(cached // self.block_size)), held)
        self._give(held - full)
        self._give(full, rid)
        self.requests.blocks[rid] = 0
        self.requests.computed[rid] = 0
        self.requests.decoding[rid] = False
        self.requests.preemptions[rid] += 1
        if self.requeue_at_back:
            self.waiting.append(rid)
        else:
            self.waiting.appendleft(rid)
        self._preempted = True
