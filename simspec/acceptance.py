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
from typing import Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy.optimize import brentq
from scipy.special import expit, logit

from simspec.exact import expected_tokens_per_step, sample_accept_counts
from simspec.traces import AcceptanceTrace, load_trace

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
    tau_k: int | None = Field(default=None, ge=1, description="chain length tau was measured at")
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
        if self.trace is not None and not self.trace_method:
            raise ValueError("trace needs trace_method (e.g. eagle3 or ngram)")
        return self

    @property
    def sigma(self) -> float:
        return math.hypot(self.spread, self.burst_scale)

    def profile(self, k: int) -> np.ndarray:
        """Mean acceptance of draft positions 1..k (the last given value repeats)."""
        if self.tau is not None:
            base = [alpha_for_tau(self.tau, self.tau_k, self.sigma)]
        elif isinstance(self.alpha, list):
            base = self.alpha
        else:
            base = [float(self.alpha)]
        return np.array([base[min(j, len(base) - 1)] for j in range(k)], dtype=np.float64)


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


def alpha_for_tau(tau: float, k: int, sigma: float = 0.0) -> float:
    """The position-independent α whose chain of k gives ``tau`` tokens per step."""
    if not 1.0 <= tau <= k + 1:
        raise ValueError(f"tau must be in [1, {k + 1}] for k={k}, got {tau}")
    if tau <= 1.0 + 1e-12:
        return 0.0
    if tau >= k + 1 - 1e-12:
        return 1.0
    return brentq(lambda a: expected_tokens(np.full(k, a), sigma) - tau, 1e-9, 1 - 1e-9)


# -- samplers used by the engine ---------------------------------------------------------------
class AcceptanceSampler(Protocol):
    def start(self, rid: int, trace_index: int) -> None:
        """Draw the request's own parameters when it arrives."""

    def accept_counts(self, rids: np.ndarray, positions: np.ndarray, k: int) -> np.ndarray:
        """Accepted draft tokens (0..k) of one verify step for each sequence in ``rids``."""


class ParametricAcceptance:
    """Logit-normal α around a per-position mean profile (see module docstring)."""

    def __init__(
        self, cfg: AcceptanceConfig, k: int, num_requests: int, rng: np.random.Generator
    ) -> None:
        self.k, self.rng = k, rng
        self.spread, self.burst_scale, self.rho = cfg.spread, cfg.burst_scale, cfg.burstiness
        self.alpha = cfg.profile(k)
        self.mu = mean_matching_logits(self.alpha, cfg.sigma)
        self.static = cfg.sigma == 0.0
        self._alpha_rows = self.alpha[None, :]
        self.request_offset = np.zeros(num_requests)
        self.burst = np.zeros(num_requests)

    def start(self, rid: int, trace_index: int) -> None:
        if not self.static:
            self.request_offset[rid] = self.spread * self.rng.standard_normal()
            self.burst[rid] = self.rng.standard_normal()

    def accept_counts(self, rids: np.ndarray, positions: np.ndarray, k: int) -> np.ndarray:
        if self.static:
            alpha = np.broadcast_to(self._alpha_rows[:, :k], (len(rids), k))
        else:
            if self.burst_scale > 0.0:
                noise = self.rng.standard_normal(len(rids))
                self.burst[rids] = self.rho * self.burst[rids] + math.sqrt(1 - self.rho**2) * noise
            offset = self.request_offset[rids] + self.burst_scale * self.burst[rids]
            alpha = expit(self.mu[None, :k] + offset[:, None])
        return sample_accept_counts(alpha, self.rng)


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

    def accept_counts(self, rids: np.ndarray, positions: np.ndarray, k: int) -> np.ndarray:
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
) -> AcceptanceSampler:
    if cfg.trace is not None:
        trace = load_trace(cfg.trace, cfg.trace_method)
        return TraceAcceptance(
            trace, num_requests, rng, share_workload_index=workload_trace == cfg.trace
        )
    return ParametricAcceptance(cfg, k, num_requests, rng)
