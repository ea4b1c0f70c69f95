"""vLLM-V1-like iteration-level scheduler: token budget, chunked prefill, paged KV, preemption.

Each iteration serves running requests first (decodes ask for 1 + K tokens: the last sampled
token plus K speculative slots; unfinished prefills continue with a chunk), then admits waiting
requests FCFS while sequence slots, token budget and KV blocks last. When a running request
cannot get blocks, the lowest-priority running request (the last admitted) is preempted by
recompute: its blocks are freed and it restarts its prefill (prompt plus tokens generated so far).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from simspec.engine.kv_cache import BlockPool
from simspec.engine.requests import RequestTable

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(slots=True)  # not frozen: built every iteration, and frozen costs 4x to build
class ScheduledBatch:
    """Who runs in one iteration: decoding sequences and prefill chunks."""

    decode: np.ndarray  # request ids that verify 1 + K tokens
    prefill: np.ndarray  # request ids that process a prompt chunk
    chunks: np.ndarray  # tokens per prefill id

    @property
    def empty(self) -> bool:
        return len(self.decode) == 0 and len(self.prefill) == 0


class Scheduler:
    def __init__(
        self,
        table: RequestTable,
        pool: BlockPool,
        block_size: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        spec_tokens: int,
    ) -> None:
        self.t, self.pool, self.bs = table, pool, block_size
        self.max_seqs, self.max_tokens, self.k = max_num_seqs, max_num_batched_tokens, spec_tokens
        self.waiting: deque[int] = deque()
        self.running: list[int] = []
        self._running_arr: np.ndarray | None = None  # cache of ``running`` as an array

    # -- membership ----------------------------------------------------------------------------
    def add(self, rid: int) -> None:
        """A new request joins the queue; one that can never fit is marked unfinishable."""
        need = self._blocks_for(int(self.t.prompt_len[rid] + self.t.output_len[rid]) + self.k)
        if self.t.unfinishable[rid] or need > self.pool.num_blocks:  # or marked before (context)
            self.t.unfinishable[rid] = True
            return
        self.waiting.append(rid)

    def resume(self, rid: int) -> None:
        """A request that was decoding before the run started (its ``generated`` set): its KV
        holds the prompt and every generated token but the last, as after a decode step. When
        the slots or blocks are short it waits with an empty cache, as a preempted request
        does, and recomputes prompt and generated tokens."""
        t = self.t
        self.add(rid)
        if t.unfinishable[rid] or len(self.running) >= self.max_seqs:
            return
        computed = int(t.prompt_len[rid] + t.generated[rid] - 1)
        blocks = int(self._blocks_for(computed))
        if blocks > self.pool.free:
            return
        self.waiting.remove(rid)
        self.pool.allocate(blocks)
        t.blocks[rid], t.computed[rid], t.decoding[rid] = blocks, computed, True
        self.running.append(rid)
        self._running_arr = None

    def finish(self, rids: np.ndarray) -> None:
        done = set(rids.tolist())
        self.running = [r for r in self.running if r not in done]
        self._running_arr = None
        self.pool.release(int(self.t.blocks[rids].sum()))
        self.t.blocks[rids] = 0

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    # -- one iteration ----------------------------------------------------------------------------
    def schedule(self) -> ScheduledBatch:
        """Vectorised when every running request fits; the per-request path handles the rest."""
        batch = self._schedule_running_at_once()
        if batch is None:
            batch = self._schedule_general()
        return batch

    def _blocks_for(self, tokens: int | np.ndarray) -> int | np.ndarray:
        return -(-tokens // self.bs)

    def _running_array(self) -> np.ndarray:
        if self._running_arr is None:
            self._running_arr = np.array(self.running, dtype=np.int64)
        return self._running_arr

    def _schedule_running_at_once(self) -> ScheduledBatch | None:
        """Common case: all running requests get their full ask within budget and free blocks.

        Every running request asks for 1 + K tokens (decode) or the rest of its prompt; when none
        is prefilling, the ask is one scalar and needs no per-request array.
        """
        t = self.t
        rids = self._running_array()
        if len(rids) == 1 and t.decoding[rids[0]]:
            # one decoding request (batch 1, the longest runs): the same integers as below,
            # without numpy calls on one-element arrays
            rid = int(rids[0])
            total = 1 + self.k
            if total > self.max_tokens:
                return None
            held = int(t.blocks[rid])
            new = max((int(t.computed[rid]) + self.k + self.bs) // self.bs, held)
            if new - held > self.pool.free:
                return None
            self.pool.allocate(new - held)
            t.blocks[rid] = new
            return self._with_admitted(rids, _EMPTY, _EMPTY, total)
        computed = t.computed[rids]
        prefilling = ~t.decoding[rids]
        all_decode = np.count_nonzero(prefilling) == 0
        if all_decode:  # every ask is 1 + K: one scalar, no per-request array
            total = len(rids) * (1 + self.k)
            ask_up = self.k + self.bs  # (1 + K) + (bs - 1)
        else:
            need = t.prompt_len[rids] + t.generated[rids] - computed
            ask = np.where(prefilling, need, 1 + self.k)
            total = int(ask.sum())
            ask_up = ask + (self.bs - 1)
        if total > self.max_tokens:
            return None
        held = t.blocks[rids]
        # blocks for computed + ask tokens, ceil((computed + ask) / bs); never fewer than held
        new_held = np.maximum((computed + ask_up) // self.bs, held)
        blocks = int((new_held - held).sum())
        if blocks > self.pool.free:
            return None
        self.pool.allocate(blocks)
        t.blocks[rids] = new_held
        if all_decode:
            decode, prefill, chunks = rids, _EMPTY, _EMPTY
        else:
            decoding = ~prefilling
            decode, prefill, chunks = rids[decoding], rids[prefilling], ask[prefilling]
        return self._with_admitted(decode, prefill, chunks, total)

    def _with_admitted(
        self, decode: np.ndarray, prefill: np.ndarray, chunks: np.ndarray, total: int
    ) -> ScheduledBatch:
        """The running requests' batch plus the waiting ones the rest of the budget admits."""
        budget = self.max_tokens - total
        if self.waiting and len(self.running) < self.max_seqs and budget > 0:
            new_ids: list[int] = []
            new_chunks: list[int] = []
            rids = self._running_array()
            self._admit(budget, new_ids, new_chunks)
            if new_ids:
                admitted = np.array(new_ids, dtype=np.int64)
                self._running_arr = np.concatenate([rids, admitted])  # they run from now on
                prefill = np.concatenate([prefill, admitted]) if len(prefill) else admitted
                chunks = np.concatenate([chunks, np.array(new_chunks, dtype=np.int64)])
        return ScheduledBatch(decode, prefill, chunks)

    def _schedule_general(self) -> ScheduledBatch:
        t = self.t
        budget = self.max_tokens
        decode: list[int] = []
        prefill: list[int] = []
        chunks: list[int] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            rid = self.running[i]
            decoding = bool(t.decoding[rid])
            n = 1 + self.k if decoding else min(int(t.num_tokens(rid) - t.computed[rid]), budget)
            if n > budget:
                i += 1
                continue
            extra = max(int(self._blocks_for(int(t.computed[rid]) + n)) - int(t.blocks[rid]), 0)
            while extra > self.pool.free and self.running[-1] != rid:
                self._preempt(self.running[-1])
                preempted = True
            if extra > self.pool.free:
                self._preempt(rid)  # lowest priority left: nothing below it can run either
                preempted = True
                break
            self.pool.allocate(extra)
            t.blocks[rid] += extra
            (decode if decoding else prefill).append(rid)
            if not decoding:
                chunks.append(n)
            budget -= n
            i += 1
        if not preempted:
            self._admit(budget, prefill, chunks)
        return ScheduledBatch(
            np.array(decode, dtype=np.int64),
            np.array(prefill, dtype=np.int64),
            np.array(chunks, dtype=np.int64),
        )

    def _admit(self, budget: int, prefill: list[int], chunks: list[int]) -> None:
        t = self.t
        while self.waiting and len(self.running) < self.max_seqs and budget > 0:
            rid = self.waiting[0]
            n = min(int(t.num_tokens(rid) - t.computed[rid]), budget)
            extra = int(self._blocks_for(int(t.computed[rid]) + n)) - int(t.blocks[rid])
            if extra > self.pool.free:
                break
            self.waiting.popleft()
            self.running.append(rid)
            self._running_arr = None
            self.pool.allocate(extra)
            t.blocks[rid] += extra
            prefill.append(rid)
            chunks.append(n)
            budget -= n

    def _preempt(self, rid: int) -> None:
        """Recompute preemption: drop the KV, go back to the front of the queue."""
        self.running.remove(rid)
        self._running_arr = None
        self.pool.release(int(self.t.blocks[rid]))
        self.t.blocks[rid] = 0
        self.t.computed[rid] = 0
        self.t.decoding[rid] = False
        self.t.preemptions[rid] += 1
        self.waiting.appendleft(rid)
