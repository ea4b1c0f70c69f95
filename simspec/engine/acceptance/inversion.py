"""From a published τ or α to the per-position acceptance profile a run samples.

τ (tokens per step, pooled over steps as papers report it) is inverted on the structure it was
measured with: a chain, or a static or dynamic tree (:mod:`simspec.engine.acceptance.trees`),
under the logit-normal heterogeneity of :mod:`simspec.engine.acceptance.samplers`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import numpy as np
from scipy.special import expit, logit

from simspec.catalog.methods import stated_topk
from simspec.catalog.sampling import alpha_at, greedy_alpha
from simspec.config import AcceptanceConfig
from simspec.engine.acceptance.exact import expected_tokens_per_step
from simspec.engine.acceptance.trees import (
    ALPHA_EPS,
    TREE_BUCKETS,
    Tree,
    TreeShape,
    best_tree,
    bucket_of,
    expected_tau,
    profile_at,
)


def brentq(f: Callable[[float], float], lo: float, hi: float, **kw) -> float:
    """scipy's root finder, imported on first use: scipy.optimize adds ~0.3 s to every
    start (the explorer's page and workers, each CLI call) and most runs never invert."""
    from scipy.optimize import brentq as _brentq

    return _brentq(f, lo, hi, **kw)


_GH_X, _GH_W = np.polynomial.hermite_e.hermegauss(48)
_GH_W = _GH_W / _GH_W.sum()  # expectation over N(0, 1)


def decayed(first: float, decay: float, k: int) -> np.ndarray:
    return first * decay ** np.arange(k, dtype=np.float64)


# -- closed forms ----------------------------------------------------------------------------
def mean_matching_logits(alpha: np.ndarray, sigma: float) -> np.ndarray:
    """μ_j with E[expit(μ_j + σZ)] = α_j for Z ~ N(0, 1) (Gauss–Hermite quadrature)."""
    alpha = np.clip(np.asarray(alpha, dtype=np.float64), ALPHA_EPS, 1 - ALPHA_EPS)
    if sigma == 0.0:
        return logit(alpha)

    def mean(mu: float) -> float:
        return float(np.dot(_GH_W, expit(mu + sigma * _GH_X)))

    def solve(target: float) -> float:
        return brentq(lambda mu: mean(mu) - target, -60.0, 60.0)

    return np.array([solve(a) for a in alpha])


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
        inner = sum(
            w_y * step_tau(expit(mu + spread * z + burst * y))
            for y, w_y in zip(xy, wy, strict=True)
        )
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
    most = expected_tokens(decayed(1.0, decay, k), 0.0)
    if tau > most + 1e-9:
        raise ValueError(
            f"tau {tau} is more than a chain of {k} can yield when each deeper position "
            f"accepts {decay:g} times the one before (at most {most:.3f}, every first draft "
            "accepted): give a tau it can reach, or an alpha"
        )
    if tau >= most - 1e-12:
        return 1.0

    def f(a: float) -> float:
        return pooled_tau(expected_tokens_per_step, decayed(a, decay, k), spread, burst) - tau

    low, high = 1e-9, 1 - 1e-9
    # a tau within the search's margin of an end point is that end point (QA: 1 + 1e-10 and
    # k + 1 - 1e-8 raised brentq's "f(a) and f(b) must have different signs")
    if f(low) >= 0.0:
        return 0.0
    if f(high) <= 0.0:
        return 1.0
    return brentq(f, low, high)


# -- trees ------------------------------------------------------------------------------------
def tree_expected_tau(
    shape: TreeShape,
    alpha_mean: np.ndarray,
    spread: float = 0.0,
    burst: float = 0.0,
    sampled: bool = False,
) -> float:
    """Tokens per step of the tree, pooled as papers report τ (:func:`pooled_tau`), with the
    trees the simulation uses (:func:`~simspec.engine.acceptance.trees.tree_plan`: one static
    tree for the mean profile, or a dynamic tree per α_1 bucket), walked greedily or
    (``sampled``) by recursive rejection."""
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
            profile = profile_at(mu, b / (TREE_BUCKETS - 1))
            tree = by_bucket[b] = best_tree(profile, shape.nodes, shape.topk, sampled, shape.topk)
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

    least = f(1e-6)
    if least > 1e-6:
        raise ValueError(
            f"tau {tau} is less than a tree of {shape.nodes} nodes, depth {shape.depth} yields "
            f"at any acceptance at these settings (at least {tau + least:.3f})"
        )
    if least >= 0:
        return 0.0
    if f(1 - 1e-6) <= 0:
        # at or past what every draft accepted yields: the tree's most (depth + 1 when each
        # depth accepts as the first), which is alpha 1, as a chain's k + 1 is; beyond it the
        # error states the bound (QA: tau 5 at depth 4 was refused, naming none)
        most = tree_expected_tau(shape, decayed(1.0, decay, shape.depth), 0.0, 0.0, sampled)
        if tau <= most + 1e-9:
            return 1.0
        raise ValueError(
            f"tau {tau} is more than a tree of {shape.nodes} nodes, depth {shape.depth} "
            f"can yield (at most {most:.3f}, every draft accepted): give a tau it can reach, "
            "or an alpha"
        )
    return brentq(f, 1e-6, 1 - 1e-6, xtol=1e-6)


def alpha_profile(acc: AcceptanceConfig, k: int, decay: float = 1.0) -> np.ndarray:
    """Mean acceptance of draft positions (depths) 1..k: a given list (its last value
    repeats), a scalar α at every position (decayed only by the config's own
    ``depth_decay``: a rate given is the same at every position, as ``--alpha`` says), or
    α_1 · decay^(d-1) from τ inverted on the structure it was measured with (a chain of tau_k,
    or the tree in tau_tree_*; ``decay``: the drafter's, e.g. Medusa's deeper heads)."""
    if isinstance(acc.alpha, list):
        base = acc.alpha
        return np.array([base[min(j, len(base) - 1)] for j in range(k)], dtype=np.float64)
    if acc.alpha is not None:  # the same at every position unless the config decays it itself
        return decayed(float(acc.alpha), acc.depth_decay or 1.0, k)
    decay = acc.depth_decay or decay
    tau, tau_k = acc.tau, acc.tau_k
    if tau is None or tau_k is None:  # AcceptanceConfig gives tau with its tau_k
        raise ValueError("an acceptance profile needs alpha, or tau with tau_k")
    if acc.tau_tree_nodes is None:
        first = alpha_for_tau(tau, tau_k, acc.spread, acc.burst_scale, decay)
    else:
        nodes = acc.tau_tree_nodes
        topk = stated_topk(acc.tau_tree_topk, nodes, tau_k)
        shape = TreeShape(nodes, topk, tau_k, acc.tau_dynamic_tree)
        first = alpha_for_tree_tau(
            tau, shape, acc.spread, acc.burst_scale, decay, acc.temperature > 0
        )
    return decayed(first, decay, k)


def run_alpha_profile(
    acc: AcceptanceConfig, k: int, decay: float = 1.0, temperature: float = 0.0, top_p: float = 1.0
) -> np.ndarray:
    """Mean acceptance per position when the run samples at ``temperature``/``top_p``:
    ``acc``'s profile, taken back to greedy acceptance from the temperature it was measured
    at, then forward to the run's settings (:mod:`simspec.catalog.sampling`)."""
    base = alpha_profile(acc, k, decay)
    if temperature == acc.temperature and top_p == acc.top_p:
        return base
    return alpha_at(greedy_alpha(base, acc.temperature, acc.top_p), temperature, top_p)
