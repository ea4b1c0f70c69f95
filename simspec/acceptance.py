"""α traces: per-request, per-position acceptance, sampled or replayed.

The simulator's fast path draws, for each sequence of a verify step and each draft position j,
an accept event with probability α_j (= Σ min(p, q) = 1 − TV(p, q) of that position, see
:mod:`simspec.exact`); the step yields the longest accepted prefix plus one token. Two sources
of α:

* **parametric** – a per-position mean profile α_j, made heterogeneous and correlated by a
  logit-normal offset per sequence and step:
  ``logit α_{r,s,j} = μ_j + spread·z_r + burst_scale·y_{r,s}``, with ``z_r ~ N(0,1)`` fixed for the
  request and ``y_{r,s}`` a unit-variance AR(1) over steps with lag-1 correlation ``burstiness``.
  ``μ_j`` is solved so that the mean of α_j over requests and steps equals the given α_j.
* **trace** – replay of measured ``acc_len`` arrays (:mod:`simspec.traces`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy.optimize import brentq
from scipy.special import expit, logit

from simspec.exact import expected_tokens_per_step, sample_accept_counts
from simspec.sampling import alpha_at, greedy_alpha
from simspec.traces import AcceptanceTrace, load_trace
from simspec.trees import MAX_RANK, Tree, best_tree, expected_tau, walk

_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(48)
_GH_W = _GH_W / _GH_W.sum()  # expectation over N(0, 1)
_EPS = 1e-9


class AcceptanceConfig(BaseModel):
    """How accept events are drawn for one method. Give exactly one of alpha, tau or trace."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    alpha: float | list[float] | None = Field(
        default=None,
        description="mean acceptance per draft position (a scalar = same at every position)",
    )
    tau: float | None = Field(
        default=None,
        ge=1.0,
        description="published mean tokens per step (incl. bonus) at chain tau_k",
    )
    tau_k: int | None = Field(
        default=None, ge=1, description="chain length (or tree depth) tau was measured at"
    )
    tau_tree_nodes: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="draft-tree size tau was measured with (none: chain)",
    )
    tau_tree_topk: int | None = Field(
        default=None, ge=1, le=64, description="children per node of that tree"
    )
    tau_dynamic_tree: bool = Field(
        default=False, description="tau was measured with a dynamic (per-step) tree"
    )
    depth_decay: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description="mean α at depth d = α_1 · decay^(d-1) (Medusa's independent heads); "
        "default: the method's",
    )
    spread: float = Field(
        default=0.0,
        ge=0.0,
        le=10.0,
        description="std of a per-request logit offset (heterogeneity)",
    )
    burst_scale: float = Field(
        default=0.0, ge=0.0, le=10.0, description="std of a per-step logit offset within a request"
    )
    burstiness: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="lag-1 correlation of the per-step offset"
    )
    trace: str | None = Field(default=None, description="packaged trace name or acc_len JSONL path")
    temperature: float = Field(
        default=0.0, ge=0.0, le=5.0, description="sampling temperature alpha/tau was measured at"
    )
    trace_method: str | None = Field(default=None, description="key under acc_len, e.g. eagle3")
    source: str = Field(default="", description="where the numbers come from")

    @model_validator(mode="after")
    def _check(self) -> AcceptanceConfig:
        given = [n for n in ("alpha", "tau", "trace") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of alpha, tau or trace (got {', '.join(given) or 'none'})"
            )
        if self.alpha is not None:
            values = [self.alpha] if isinstance(self.alpha, float | int) else self.alpha
            if not values or any(not 0.0 <= a <= 1.0 for a in values):
                raise ValueError("alpha must be in [0, 1] (a number or a non-empty list)")
        if self.tau is not None and self.tau_k is None:
            raise ValueError("tau needs tau_k, the chain length it was measured at")
        if self.tau is not None and self.tau > self.tau_k + 1:
            raise ValueError(f"tau must be <= tau_k + 1 = {self.tau_k + 1}")
        if self.tau_tree_nodes is not None and self.tau_tree_nodes < (self.tau_k or 1):
            raise ValueError("tau_tree_nodes must be >= tau_k (a tree holds its depth)")
        if self.trace is not None and not self.trace_method:
            raise ValueError("trace needs trace_method (e.g. eagle3 or ngram)")
        return self

    @property
    def sigma(self) -> float:
        return math.hypot(self.spread, self.burst_scale)

    def profile(self, k: int, decay: float = 1.0) -> np.ndarray:
        """Mean acceptance of draft positions (depths) 1..k: a given list (its last value
        repeats), or α_1 · decay^(d-1) from a scalar α or from τ inverted on the structure it
        was measured with (a chain of tau_k, or the tree in tau_tree_*)."""
        decay = self.depth_decay or decay
        if isinstance(self.alpha, list):
            base = self.alpha
            return np.array([base[min(j, len(base) - 1)] for j in range(k)], dtype=np.float64)
        if self.alpha is not None:
            first = float(self.alpha)
        elif self.tau_tree_nodes is None:
            first = alpha_for_tau(self.tau, self.tau_k, self.spread, self.burst_scale, decay)
        else:
            shape = TreeShape(self.tau_tree_nodes, self.tau_tree_topk or 1, self.tau_k,
                              self.tau_dynamic_tree)  # fmt: skip
            first = alpha_for_tree_tau(self.tau, shape, self.spread, self.burst_scale, decay,
                                       self.temperature > 0)  # fmt: skip
        return decayed(first, decay, k)

    def run_profile(
        self, k: int, decay: float = 1.0, temperature: float = 0.0, top_p: float = 1.0
    ) -> np.ndarray:
        """Mean acceptance per position when the run samples at ``temperature``/``top_p``:
        this config's profile, taken back to greedy acceptance from the temperature it was
        measured at, then forward to the run's settings (:mod:`simspec.sampling`)."""
        base = self.profile(k, decay)
        if temperature == self.temperature and top_p >= 1.0:
            return base
        return alpha_at(greedy_alpha(base, self.temperature), temperature, top_p)


def decayed(first: float, decay: float, k: int) -> np.ndarray:
    return first * decay ** np.arange(k, dtype=np.float64)


# -- closed forms ----------------------------------------------------------------------------
def mean_matching_logits(alpha: np.ndarray, sigma: float) -> np.ndarray:
    """μ_j with E[expit(μ_j + σZ)] = α_j for Z ~ N(0, 1) (Gauss–Hermite quadrature)."""
    alpha = np.clip(np.asarray(alpha, dtype=np.float64), _EPS, 1 - _EPS)
    if sigma == 0.0:
        return logit(alpha)

    def mean(mu: float) -> float:
        return float(np.dot(_GH_W, expit(mu + sigma * _GH_X)))

    return np.array([brentq(lambda m, a=a: mean(m) - a, -60.0, 60.0) for a in alpha])


def expected_tokens(alpha: np.ndarray, sigma: float = 0.0) -> float:
    """Mean tokens per step of one step with per-position means α and logit-offset std σ."""
    alpha = np.asarray(alpha, dtype=np.float64)
    if sigma == 0.0:
        return expected_tokens_per_step(alpha)
    mu = mean_matching_logits(alpha, sigma)
    per_node = expit(mu[None, :] + sigma * _GH_X[:, None])  # (nodes, K)
    return float(np.dot(_GH_W, 1.0 + np.cumprod(per_node, axis=1).sum(axis=1)))


_POOL_GH = 16  # quadrature nodes per offset in pooled_tau


def pooled_tau(
    step_tau: Callable[[np.ndarray], float],
    alpha_mean: np.ndarray,
    spread: float = 0.0,
    burst: float = 0.0,
) -> float:
    """Tokens per step as papers report τ: all tokens over all steps of many equal-length
    requests. A request's offset (spread·z) is fixed, so requests that accept less take more
    steps and weigh more (a harmonic mean over z); step offsets (burst·y) count once per step
    (an arithmetic mean over y): ``1 / E_z[1 / E_y[τ(expit(μ + spread·z + burst·y))]]``, with
    μ matched so that the mean α per position is ``alpha_mean``."""
    alpha_mean = np.asarray(alpha_mean, dtype=np.float64)
    mu = mean_matching_logits(alpha_mean, math.hypot(spread, burst))
    xz, wz = _gauss(spread)
    xy, wy = _gauss(burst)
    inv = 0.0
    for z, w_z in zip(xz, wz, strict=True):
        inner = sum(w_y * step_tau(expit(mu + spread * z + burst * y))
                    for y, w_y in zip(xy, wy, strict=True))  # fmt: skip
        inv += w_z / inner
    return 1.0 / inv


def _gauss(scale: float) -> tuple[np.ndarray, np.ndarray]:
    if scale == 0.0:
        return np.zeros(1), np.ones(1)
    x, w = np.polynomial.hermite_e.hermegauss(_POOL_GH)
    return x, w / w.sum()


@cache
def alpha_for_tau(
    tau: float, k: int, spread: float = 0.0, burst: float = 0.0, decay: float = 1.0
) -> float:
    """The α_1 whose chain of k (α_d = α_1 · decay^(d-1)) gives ``tau`` tokens per step,
    pooled over requests (:func:`pooled_tau`)."""
    if not 1.0 <= tau <= k + 1:
        raise ValueError(f"tau must be in [1, {k + 1}] for k={k}, got {tau}")
    if tau <= 1.0 + 1e-12:
        return 0.0
    if tau >= expected_tokens(decayed(1.0, decay, k), 0.0) - 1e-12:
        return 1.0

    def f(a: float) -> float:
        return pooled_tau(expected_tokens_per_step, decayed(a, decay, k), spread, burst) - tau

    return brentq(f, 1e-9, 1 - 1e-9)


# -- trees ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TreeShape:
    """A draft tree by its budget: ``nodes`` drafted tokens, ``topk`` children per node at
    most, ``depth`` levels; ``dynamic`` trees are rebuilt every step from the draft's
    confidence (EAGLE-2), static ones once for the mean acceptance (Medusa, EAGLE-1)."""

    nodes: int
    topk: int
    depth: int
    dynamic: bool = False


TREE_BUCKETS = 41  # dynamic trees are precomputed for α_1 = 0, 1/40, ..., 1


def tree_plan(
    shape: TreeShape, alpha_mean: np.ndarray, sigma: float, sampled: bool = False
) -> tuple[np.ndarray, bool]:
    """Child tables for a run: one static tree built for the mean α profile, or
    (TREE_BUCKETS, nodes+1, MAX_RANK) dynamic trees, one per α_1 bucket, each built for the α
    profile a sequence with that α_1 has (same logit offset at every depth)."""
    if not shape.dynamic:
        return best_tree(alpha_mean, shape.nodes, shape.topk).children(), False
    mu = mean_matching_logits(alpha_mean, sigma)
    tables = [best_tree(_profile_at(mu, b / (TREE_BUCKETS - 1)), shape.nodes, shape.topk)
              .children() for b in range(TREE_BUCKETS)]  # fmt: skip
    rows = max(len(t) for t in tables)
    out = np.full((TREE_BUCKETS, rows, MAX_RANK), -1, dtype=np.int64)
    for b, t in enumerate(tables):
        out[b, : len(t)] = t
    return out, True


def _profile_at(mu: np.ndarray, alpha1: float) -> np.ndarray:
    """The α profile of a sequence whose depth-1 acceptance is ``alpha1``."""
    a1 = min(max(alpha1, _EPS), 1 - _EPS)
    return expit(mu + (logit(a1) - mu[0]))


def bucket_of(alpha1: np.ndarray) -> np.ndarray:
    return np.rint(np.asarray(alpha1) * (TREE_BUCKETS - 1)).astype(np.int64)


def tree_expected_tau(
    shape: TreeShape,
    alpha_mean: np.ndarray,
    spread: float = 0.0,
    burst: float = 0.0,
    sampled: bool = False,
) -> float:
    """Tokens per step of the tree, pooled as papers report τ (:func:`pooled_tau`), with the
    trees the simulation uses (:func:`tree_plan`: one static tree for the mean profile, or a
    dynamic tree per α_1 bucket), walked greedily or (``sampled``) by recursive rejection."""
    alpha_mean = np.asarray(alpha_mean, dtype=np.float64)
    sigma = math.hypot(spread, burst)
    if not shape.dynamic:
        static = best_tree(alpha_mean, shape.nodes, shape.topk, sampled)
        return pooled_tau(lambda a: expected_tau(static, a, sampled), alpha_mean, spread, burst)
    mu = mean_matching_logits(alpha_mean, sigma)
    by_bucket: dict[int, Tree] = {}

    def step_tau(alpha: np.ndarray) -> float:
        b = int(bucket_of(alpha[0]))
        tree = by_bucket.get(b)
        if tree is None:
            profile = _profile_at(mu, b / (TREE_BUCKETS - 1))
            tree = by_bucket[b] = best_tree(profile, shape.nodes, shape.topk)
        return expected_tau(tree, alpha, sampled)

    return pooled_tau(step_tau, alpha_mean, spread, burst)


@cache
def alpha_for_tree_tau(
    tau: float,
    shape: TreeShape,
    spread: float = 0.0,
    burst: float = 0.0,
    decay: float = 1.0,
    sampled: bool = False,
) -> float:
    """The α_1 whose tree of ``shape`` (α_d = α_1 · decay^(d-1)) gives ``tau`` per step, its
    siblings verified greedily or (``sampled``: τ measured while sampling) by recursive
    rejection, as the simulation walks them."""

    def f(a: float) -> float:
        alpha = decayed(a, decay, shape.depth)
        return tree_expected_tau(shape, alpha, spread, burst, sampled) - tau

    if f(1e-6) >= 0:
        return 0.0
    if f(1 - 1e-6) <= 0:
        raise ValueError(
            f"tau {tau} is more than a tree of {shape.nodes} nodes, depth {shape.depth} "
            "can yield at these settings"
        )
    return brentq(f, 1e-6, 1 - 1e-6, xtol=1e-6)


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
        """``alpha``: the mean profile to use (default: ``cfg.profile(k, decay)``)."""
        self.k, self.rng = k, rng
        self.spread, self.burst_scale, self.rho = cfg.spread, cfg.burst_scale, cfg.burstiness
        self.alpha = cfg.profile(k, decay) if alpha is None else np.asarray(alpha, float)[:k]
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
        if self.burst_scale > 0.0:
            noise = self.rng.standard_normal(len(rids))
            self.burst[rids] = self.rho * self.burst[rids] + math.sqrt(1 - self.rho**2) * noise
        offset = self.request_offset[rids] + self.burst_scale * self.burst[rids]
        return expit(self.mu[None, :k] + offset[:, None])

    def accept_counts(
        self, rids: np.ndarray, positions: np.ndarray, k: int, nodes: int | None = None
    ) -> np.ndarray:
        return sample_accept_counts(self.alphas(rids, k), self.rng)


class TreeAcceptance:
    """Accepted depth of a tree verify step: the α of each depth comes from the parametric
    model, the walk down the tree from :func:`simspec.trees.walk` (the exact rule: greedy at
    temperature 0, recursive rejection over sibling candidates when ``sampled``); dynamic trees
    are chosen per sequence from its depth-1 acceptance. One plan per node budget, for
    policies that change the budget with load."""

    def __init__(
        self, base: ParametricAcceptance, plans: dict[int, tuple[np.ndarray, bool]], depth: int,
        default: int, sampled: bool = False,
    ) -> None:  # fmt: skip
        self.base, self.plans, self.depth, self.default = base, plans, depth, default
        self.sampled = sampled

    def start(self, rid: int, trace_index: int) -> None:
        self.base.start(rid, trace_index)

    def accept_counts(
        self, rids: np.ndarray, positions: np.ndarray, k: int, nodes: int | None = None
    ) -> np.ndarray:
        children, dynamic = self.plans[nodes or self.default]
        alpha = np.ascontiguousarray(self.base.alphas(rids, self.depth))
        tree_of = bucket_of(alpha[:, 0]) if dynamic else None
        return walk(children, alpha, self.base.rng, tree_of, self.sampled)


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

    def start(self, rid: int, trace_index: int) -> None:
        if self.share and 0 <= trace_index < self.trace.num_requests:
            self.record[rid] = trace_index
        else:
            self.record[rid] = self.rng.integers(self.trace.num_requests)
        self.offset[rid] = self.trace.offsets[self.record[rid]]
        self.length[rid] = self.trace.lengths[self.record[rid]]

    def accept_counts(
        self, rids: np.ndarray, positions: np.ndarray, k: int, nodes: int | None = None
    ) -> np.ndarray:
        counts = self._counts.get(k)
        if counts is None:
            counts = self._counts[k] = np.minimum(self.trace.acc, k + 1).astype(np.int64) - 1
        return counts[self.offset[rids] + positions % self.length[rids]]


def build_sampler(
    cfg: AcceptanceConfig,
    k: int,
    num_requests: int,
    rng: np.random.Generator,
    workload_trace: str | None = None,
    decay: float = 1.0,
    tree: TreeShape | None = None,
    static_trees: dict[int, Tree] | None = None,
    alpha: np.ndarray | None = None,
    budgets: list[int] | None = None,
    sampled: bool = False,
) -> AcceptanceSampler:
    """The sampler for one run: trace replay (chains only), parametric chains, or parametric
    α walked down a tree: the method's own static trees by node budget when it has them, else
    trees built from ``tree`` for each of ``budgets``."""
    if tree is not None:
        if cfg.trace is not None:
            raise ValueError("tree methods need alpha or tau acceptance, not a chain trace")
        base = ParametricAcceptance(cfg, tree.depth, num_requests, rng, decay, alpha)
        plans = {}
        for n in budgets or [tree.nodes]:
            if static_trees and n in static_trees and not tree.dynamic:
                plans[n] = (static_trees[n].children(), False)
            else:
                shape = TreeShape(n, tree.topk, tree.depth, tree.dynamic)
                plans[n] = tree_plan(shape, base.alpha, cfg.sigma, sampled)
        return TreeAcceptance(base, plans, tree.depth, tree.nodes, sampled)
    if cfg.trace is not None:
        trace = load_trace(cfg.trace, cfg.trace_method)
        return TraceAcceptance(
            trace, num_requests, rng, share_workload_index=workload_trace == cfg.trace
        )
    return ParametricAcceptance(cfg, k, num_requests, rng, decay, alpha)
