"""α traces: per-request, per-position acceptance, sampled or replayed.

The simulator's fast path draws, for each sequence of a verify step and each draft position j,
an accept event with probability α_j (= Σ min(p, q) = 1 − TV(p, q) of that position, see
:mod:`simspec.engine.acceptance.exact`); the step yields the longest accepted prefix plus one
token. Two sources
of α:

* **parametric** – a per-position mean profile α_j, made heterogeneous and correlated by a
  logit-normal offset per sequence and step:
  ``logit α_{r,s,j} = μ_j + spread·z_r + burst_scale·y_{r,s}``, with ``z_r ~ N(0,1)`` fixed for the
  request and ``y_{r,s}`` a unit-variance AR(1) over steps with lag-1 correlation ``burstiness``.
  ``μ_j`` is solved so that the mean of α_j over requests and steps equals the given α_j.
* **trace** – replay of measured ``acc_len`` arrays (:mod:`simspec.catalog.traces`).

Lookup drafters need no α at all: **tokens** replays their proposer on real token streams
(:mod:`simspec.engine.lookup`), which also says how many tokens each sequence proposed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy.special import expit

from simspec.catalog.traces import AcceptanceTrace, load_trace
from simspec.config import AcceptanceConfig
from simspec.engine.acceptance.exact import accept_prefix
from simspec.engine.acceptance.inversion import alpha_profile, mean_matching_logits
from simspec.engine.acceptance.trees import DraftTree, bucket_of, walk
from simspec.engine.lookup.proposers import LookupProposer, ReplayTable, replay_table


# -- samplers used by the engine ---------------------------------------------------------------
class AcceptanceSampler(Protocol):
    def start(self, rid: int, trace_index: int) -> None:
        """Draw the request's own parameters when it arrives."""

    def accept_counts(
        self, rids: np.ndarray, positions: np.ndarray, k: int, nodes: int | None = None
    ) -> np.ndarray:
        """Accepted draft tokens (0..k) of one verify step for each sequence in ``rids``
        (``nodes``: the tree budget of this step, for tree samplers)."""


class ParametricAcceptance:
    """Logit-normal α around a per-position mean profile (see module docstring)."""

    def __init__(
        self,
        cfg: AcceptanceConfig,
        k: int,
        num_requests: int,
        rng: np.random.Generator,
        decay: float = 1.0,
        alpha: np.ndarray | None = None,
    ) -> None:
        """``alpha``: the mean profile to use (default: ``alpha_profile(cfg, k, decay)``)."""
        self.k, self.rng = k, rng
        self.spread, self.burst_scale, self.rho = cfg.spread, cfg.burst_scale, cfg.burstiness
        self.alpha = alpha_profile(cfg, k, decay) if alpha is None else np.asarray(alpha, float)[:k]
        self.mu = mean_matching_logits(self.alpha, cfg.sigma)
        self.static = cfg.sigma == 0.0
        self._alpha_rows = self.alpha[None, :]
        self.request_offset = np.zeros(num_requests)
        self.burst = np.zeros(num_requests)

    def start(self, rid: int, trace_index: int) -> None:
        if not self.static:
            self.request_offset[rid] = self.spread * self.rng.standard_normal()
            self.burst[rid] = self.rng.standard_normal()

    def alphas(self, rids: np.ndarray, k: int) -> np.ndarray:
        """α of each sequence's draft positions 1..k at this step (advances the bursts)."""
        if self.static:
            return np.broadcast_to(self._alpha_rows[:, :k], (len(rids), k))
        if len(rids) == 1:  # one sequence (a batch-1 run): the same operations on its floats
            rid = int(rids[0])
            burst = float(self.burst[rid])
            if self.burst_scale > 0.0:
                noise = self.rng.standard_normal(1)
                burst = self.rho * burst + math.sqrt(1 - self.rho**2) * float(noise[0])
                self.burst[rid] = burst
            offset = float(self.request_offset[rid]) + self.burst_scale * burst
            return expit(self.mu[:k] + offset).reshape(1, -1)  # as the batch formula's row
        if self.burst_scale > 0.0:
            noise = self.rng.standard_normal(len(rids))
            self.burst[rids] = self.rho * self.burst[rids] + math.sqrt(1 - self.rho**2) * noise
        offset = self.request_offset[rids] + self.burst_scale * self.burst[rids]
        return expit(self.mu[None, :k] + offset[:, None])

    def accept_counts(
        self, rids: np.ndarray, positions: np.ndarray, k: int, nodes: int | None = None
    ) -> np.ndarray:
        return accept_prefix(self.alphas(rids, k), self.rng)

    def request_draws(self) -> np.ndarray | None:
        """Each request's own ``z_r ~ N(0, 1)`` (by request id; 0 for one never started), the
        draw that makes it easier or harder than the mean; None when requests do not differ."""
        if self.static or self.spread == 0.0:
            return None
        return self.request_offset / self.spread


class TreeAcceptance:
    """Accepted depth of a tree verify step: the α of each depth comes from the parametric
    model, the walk down the tree from :func:`simspec.engine.acceptance.trees.walk` (greedy
    at temperature 0, exactly as the engines verify; when ``sampled``, recursive rejection
    over siblings drawn independently from the draft, an approximation of SGLang's and
    vLLM's target-only verification of distinct top-k siblings); dynamic trees
    are chosen per sequence from its depth-1 acceptance. One plan per node budget, for
    policies that change the budget with load."""

    def __init__(
        self,
        base: ParametricAcceptance,
        plans: dict[int, tuple[np.ndarray, bool]],
        depth: int,
        default: int,
        sampled: bool = False,
    ) -> None:
        self.base, self.plans, self.depth, self.default = base, plans, depth, default
        self.sampled = sampled

    def start(self, rid: int, trace_index: int) -> None:
        self.base.start(rid, trace_index)

    def request_draws(self) -> np.ndarray | None:
        """As :meth:`ParametricAcceptance.request_draws`."""
        return self.base.request_draws()

    def accept_counts(
        self, rids: np.ndarray, positions: np.ndarray, k: int, nodes: int | None = None
    ) -> np.ndarray:
        children, dynamic = self.plans[nodes or self.default]
        alpha = np.ascontiguousarray(self.base.alphas(rids, self.depth))
        tree_of = bucket_of(alpha[:, 0]) if dynamic else None
        return walk(children, alpha, self.base.rng, tree_of, self.sampled)


_NONE = np.zeros(0, dtype=np.int64)


class TraceAcceptance:
    """Replays measured ``acc_len`` arrays: a step at output position t yields min(acc[t], k+1).

    A request replays the trace record the workload drew for it when both come from the same
    trace file (lengths and acceptance then belong to one real request); otherwise it draws a
    record at random. Positions past the end of a record wrap around.
    """

    def __init__(
        self,
        trace: AcceptanceTrace,
        num_requests: int,
        rng: np.random.Generator,
        share_workload_index: bool,
    ) -> None:
        self.trace, self.rng, self.share = trace, rng, share_workload_index
        self.record = np.zeros(num_requests, dtype=np.int64)
        # where each request's record lies in ``trace.acc``, copied at start so that a step
        # indexes the flat array directly
        self.offset = np.zeros(num_requests, dtype=np.int64)
        self.length = np.ones(num_requests, dtype=np.int64)
        self._counts: dict[int, np.ndarray] = {}  # by k: accepted drafts at every flat position
        # the offsets and lengths of the last step's sequences, by the id array itself: the
        # engine hands the same (never written) array while the same sequences decode
        self._rows: tuple[np.ndarray | None, np.ndarray, np.ndarray] = (None, _NONE, _NONE)

    def start(self, rid: int, trace_index: int) -> None:
        self._rows = (None, _NONE, _NONE)
        if self.share and 0 <= trace_index < self.trace.num_requests:
            self.record[rid] = trace_index
        else:
            self.record[rid] = self.rng.integers(self.trace.num_requests)
        self.offset[rid] = self.trace.offsets[self.record[rid]]
        self.length[rid] = self.trace.lengths[self.record[rid]]

    def step_tokens(self, trace_index: np.ndarray, k: int) -> np.ndarray | None:
        """Mean tokens per step of each workload record's own acceptance at draft length
        ``k`` (None when requests draw their records at random: then every request expects
        the same)."""
        if not self.share:
            return None
        taus = _record_taus(self.trace.acc, self.trace.offsets, self.trace.lengths, k + 1)
        return _per_request(taus, trace_index)

    def _counts_at(self, k: int) -> np.ndarray:
        """Accepted drafts at every flat position of the trace for a draft of ``k``."""
        counts = self._counts.get(k)
        if counts is None:
            counts = self._counts[k] = np.minimum(self.trace.acc, k + 1).astype(np.int64) - 1
        return counts

    def walk(self, rid: int, position: int, k: int, end: int) -> np.ndarray:
        """The tokens (accepted drafts + 1) of each step of request ``rid`` from output
        position ``position`` until a step reaches ``end``, as :meth:`accept_counts` gives
        them one step after another (a step's tokens move the next one's position)."""
        offset, length = int(self.offset[rid]), int(self.length[rid])
        row = self._counts_at(k)[offset : offset + length].tolist()
        taken = []
        while True:
            step = row[position % length] + 1
            taken.append(step)
            if step >= end - position:
                return np.array(taken, dtype=np.int64)
            position += step

    def accept_counts(
        self, rids: np.ndarray, positions: np.ndarray, k: int, nodes: int | None = None
    ) -> np.ndarray:
        counts = self._counts_at(k)
        ids, offset, length = self._rows
        if ids is not rids:
            offset, length = self.offset[rids], self.length[rids]
            self._rows = (rids, offset, length)
        return counts[offset + positions % length]


class TokenReplayAcceptance:
    """A lookup proposer replayed on real token streams: at output position t a sequence
    proposes ``proposed[t]`` tokens (0: no match) and the greedy target accepts
    ``accepted[t]`` of them (:mod:`simspec.engine.lookup`). Requests map to streams as in
    :class:`TraceAcceptance` (the workload's own record when both read the same file);
    positions past a stream's end wrap around."""

    def __init__(
        self,
        tokens: str,
        proposer: LookupProposer,
        k: int,
        num_requests: int,
        rng: np.random.Generator,
        share_workload_index: bool,
        keep: float = 1.0,
    ) -> None:
        self.tokens, self.proposer, self.rng = tokens, proposer, rng
        self.share = share_workload_index
        # a sampling run keeps each greedily accepted draft with this chance, in turn
        self.log_keep = math.log(keep) if 0.0 < keep < 1.0 else None
        self._tables: dict[int, ReplayTable] = {}  # by k, from the process-wide cache
        base = self._table(k)
        self.num_streams, self._stream_offsets, self._stream_lengths = (
            base.num_requests,
            base.offsets,
            base.lengths,
        )
        self.offset = np.zeros(num_requests, dtype=np.int64)
        self.length = np.ones(num_requests, dtype=np.int64)
        self._step: tuple[np.ndarray | None, np.ndarray] = (None, self.offset[:0])

    def _table(self, k: int) -> ReplayTable:
        table = self._tables.get(k)
        if table is None:
            table = self._tables[k] = replay_table(self.tokens, self.proposer, k)
        return table

    def start(self, rid: int, trace_index: int) -> None:
        if self.share and 0 <= trace_index < self.num_streams:
            record = trace_index
        else:
            record = int(self.rng.integers(self.num_streams))
        self.offset[rid] = self._stream_offsets[record]
        self.length[rid] = self._stream_lengths[record]

    def step_tokens(self, trace_index: np.ndarray, k: int) -> np.ndarray | None:
        """As :meth:`TraceAcceptance.step_tokens`: each stream's tokens per step at ``k``."""
        if not self.share:
            return None
        table = self._table(k)
        taus = _record_taus(table.accepted, table.offsets, table.lengths, k + 1, extra=1)
        return _per_request(taus, trace_index)

    def walk(self, rid: int, position: int, k: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """(the draft tokens proposed, the tokens made: accepted + 1) of each step of request
        ``rid`` from output position ``position`` until a step reaches ``end``, as
        :meth:`proposals` and :meth:`accept_counts` give them one step after another. Greedy
        replays only (no draws): a sampling run's acceptance is drawn step by step."""
        assert self.log_keep is None
        table = self._table(k)
        offset, length = int(self.offset[rid]), int(self.length[rid])
        proposed = table.proposed[offset : offset + length].tolist()
        accepted = table.accepted[offset : offset + length].tolist()
        asked, made = [], []
        while True:
            at = position % length
            step = accepted[at] + 1
            asked.append(proposed[at])
            made.append(step)
            if step >= end - position:
                return np.array(asked, dtype=np.int64), np.array(made, dtype=np.int64)
            position += step

    def _index(self, rids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        return self.offset[rids] + positions % self.length[rids]

    def proposals(self, rids: np.ndarray, positions: np.ndarray, k: int) -> np.ndarray:
        """Draft tokens each sequence proposes this step (0: the lookup found nothing)."""
        index = self._index(rids, positions)
        self._step = (rids, index)  # the same step's accept_counts reads the same positions
        return self._table(k).proposed[index]

    def accept_counts(
        self, rids: np.ndarray, positions: np.ndarray, k: int, nodes: int | None = None
    ) -> np.ndarray:
        step_rids, index = self._step
        if step_rids is not rids:
            index = self._index(rids, positions)
        accepted = self._table(k).accepted[index]
        if self.log_keep is None:
            return accepted
        # each greedily accepted draft survives sampling with chance keep, until one does not:
        # the leading run of successes is floor(log u / log keep), u uniform in (0, 1]
        u = 1.0 - self.rng.random(len(accepted))
        run = np.floor(np.log(u) / self.log_keep)
        return np.minimum(accepted, run).astype(accepted.dtype)


_TAUS: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}  # by (id, id, cap)


def _record_taus(
    made_at: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, cap: int, extra: int = 0
) -> np.ndarray:
    """Tokens per step of each record's chain walk (``catalog.traces.walk_tau`` per record),
    all records stepped together; remembered for the process's cached traces (``made_at``
    is kept alive with the result, so its id is not reused). ``extra`` is added to every
    ``made_at`` value (a replay's accepted drafts plus the step's own token)."""
    key = (id(made_at), id(offsets), cap)
    hit = _TAUS.get(key)
    if hit is not None and hit[0] is made_at:
        return hit[1]
    pos = np.zeros(len(lengths), dtype=np.int64)
    steps = np.zeros(len(lengths), dtype=np.int64)
    live = np.flatnonzero(lengths > 0)
    while len(live):
        left = lengths[live] - pos[live]
        made = np.minimum(np.minimum(made_at[offsets[live] + pos[live]] + extra, cap), left)
        made = np.maximum(made, 1)
        pos[live] += made
        steps[live] += 1
        live = live[pos[live] < lengths[live]]
    taus = np.where(steps > 0, lengths / np.maximum(steps, 1), np.nan)
    _TAUS[key] = (made_at, taus)
    return taus


def _per_request(taus: np.ndarray, trace_index: np.ndarray) -> np.ndarray:
    """``taus`` of each request's record; a request without one (index -1) gets the mean."""
    ok = (trace_index >= 0) & (trace_index < len(taus))
    out = np.full(len(trace_index), float(np.nanmean(taus)))
    out[ok] = taus[trace_index[ok]]
    return np.where(np.isfinite(out) & (out > 0), out, 1.0)


@dataclass(frozen=True)
class DraftPlan:
    """The draft structure a run's acceptance is sampled on, as its speculator sets it up."""

    depth: int  # the most drafts one step can accept (chain length, tree depth)
    decay: float = 1.0  # α_d = α_1 · decay^(d-1) where the acceptance gives one α or τ
    tree: DraftTree | None = None  # None: a chain
    alpha: np.ndarray | None = None  # the run's mean α by depth (None: a trace replays)
    sampled: bool = False  # tree candidates verified by recursive rejection (temperature > 0)
    proposer: LookupProposer | None = None  # a lookup drafter's proposer (token replay)
    # the share of a greedy replay's accepted drafts a sampling run keeps, each in turn (1:
    # all, greedy): the temperature model's factor, at most 1 (token replay only)
    keep: float = 1.0


def build_sampler(
    cfg: AcceptanceConfig,
    plan: DraftPlan,
    num_requests: int,
    rng: np.random.Generator,
    lengths_from: str | None = None,
) -> AcceptanceSampler:
    """The sampler for one run: a lookup proposer replayed on token streams, trace replay
    (chains only), parametric chains, or parametric α walked down the plan's tree at each of
    its node budgets."""
    if cfg.tokens is not None:
        if plan.proposer is None:
            raise ValueError("token replay needs a lookup proposer")
        return TokenReplayAcceptance(
            cfg.tokens,
            plan.proposer,
            plan.depth,
            num_requests,
            rng,
            share_workload_index=lengths_from == cfg.tokens,
            keep=plan.keep,
        )
    if plan.tree is not None:
        if cfg.acc_len is not None:
            raise ValueError("tree methods need alpha or tau acceptance, not a chain trace")
        shape = plan.tree.shape
        base = ParametricAcceptance(cfg, shape.depth, num_requests, rng, plan.decay, plan.alpha)
        plans = {
            n: plan.tree.children(n, base.alpha, base.mu, plan.sampled) for n in plan.tree.budgets
        }
        return TreeAcceptance(base, plans, shape.depth, shape.nodes, plan.sampled)
    if cfg.acc_len is not None:
        assert cfg.acc_len_method, "acc_len needs acc_len_method (AcceptanceConfig checks it)"
        trace = load_trace(cfg.acc_len, cfg.acc_len_method)
        return TraceAcceptance(
            trace, num_requests, rng, share_workload_index=lengths_from == cfg.acc_len
        )
    return ParametricAcceptance(cfg, plan.depth, num_requests, rng, plan.decay, plan.alpha)
