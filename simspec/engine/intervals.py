"""95 % confidence intervals from one run, by sectioning, and the open-loop stability test.

A run's observations are autocorrelated (neighbouring requests share batches), so they are
split into ``SECTIONS`` consecutive sections whose statistics are close to independent:

* a mean or a rate (throughput): batch means, ``mean +- t(0.975, B-1) * sd / sqrt(B)`` over the
  B section values (Law, Simulation Modeling and Analysis, 5th ed., §9.5.3);
* a percentile: sectioning (Nakayama, "Confidence intervals for quantiles using sectioning when
  applying variance-reduction techniques", ACM TOMACS 24(4), 2014): centred on the percentile
  of all measured requests, with the spread of the sections' percentiles;
* a proportion (the share of requests meeting an SLO): Wilson's score interval, inside [0, 1]
  whatever the count or the share, on a sample size discounted by the design effect the batch
  means measure (see :func:`proportion_interval`);
* a ratio of two runs (a speedup): the two runs share the seed (the same requests, in the
  same sections), so the ratio of their summed latencies is paired section by section, a
  delta method on the sections' sums (:func:`ratio_of_sums_interval`); :func:`ratio_interval`
  treats two intervals as independent, wider than the truth, where no pairing exists.

Ten sections (t = 2.262) is the usual choice for batch means (Law §9.5.3 suggests 10 to 30).

Every interval stays inside the range its quantity can take. A share's is Wilson's, inside
[0, 1] by construction. Latencies, rates and speedups are never negative, but a symmetric
interval around a small, spread value can reach below 0 (a TPOT p50 whose sections disagree):
a percentile, mean or ratio of values none of which is negative has its lower end clipped at 0
(:func:`clipped`). Clipping to the quantity's range never removes its true value from the
interval, so the coverage stays 95 %; an interval built in another space (a log scale) would
move every interval reported, not just the ones that leave the range, and one built from order
statistics ignores the correlation between neighbouring requests that sectioning measures.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtri, stdtrit  # quantiles (scipy.stats would import a root finder)

SECTIONS = 10
T95 = float(stdtrit(SECTIONS - 1, 0.975))  # two-sided 95 %, B - 1 degrees of freedom
# A closed loop's sections each span at least 16/5 = 3.2 turnovers (concurrency-many
# requests), fewer sections where the run is shorter, never fewer than MIN_SECTIONS: a
# request's latency is set by the requests running beside it, so sections of a turnover or two
# share their neighbours' co-runners and their means correlate, which batch means take for
# independent (Law, Simulation Modeling and Analysis, 5th ed., §9.5.3: batches long enough to
# be nearly uncorrelated). 3.2 turnovers is where tools/interval_coverage.py measured the
# intervals holding (README "At short lengths": 32 turnovers in ten sections; 16 in five).
SECTION_TURNOVERS = (16, 5)  # as a fraction: integer arithmetic, no rounding at 32 turnovers
MIN_SECTIONS = 3
# stability: a one-sided test at 1 % on the slope of the waiting requests over the sections
T_TREND = float(stdtrit(SECTIONS - 2, 0.99))
Z95 = float(ndtri(0.975))  # two-sided 95 %, normal

NAN = float("nan")


def sections(n: int, b: int = SECTIONS) -> list[slice]:
    """``b`` consecutive, near-equal slices of ``range(n)`` (fewer when n < b)."""
    edges = np.linspace(0, n, min(b, n) + 1).round().astype(int)
    return [slice(int(a), int(z)) for a, z in zip(edges[:-1], edges[1:], strict=True) if z > a]


def closed_sections(measured: int, concurrency: int) -> int:
    """How many sections a closed loop of ``concurrency`` measuring ``measured`` requests
    is cut into: as many of at least :data:`SECTION_TURNOVERS` turnovers as fit, between
    :data:`MIN_SECTIONS` and :data:`SECTIONS` (all ten from 32 turnovers on)."""
    num, den = SECTION_TURNOVERS
    fit = measured * den // (num * max(concurrency, 1))
    return max(MIN_SECTIONS, min(SECTIONS, fit))


def clipped(low: float, high: float, *data: np.ndarray) -> tuple[float, float]:
    """``(low, high)`` with ``low`` raised to 0 when no value of ``data`` is negative: a
    percentile, mean or ratio of such values is never negative, whatever its spread."""
    if all(len(d) and float(np.min(d)) >= 0 for d in data) and low < 0:
        low = 0.0
    return low, high


def mean_interval(values: np.ndarray) -> tuple[float, float]:
    """Batch-means interval for the mean of ``values`` (one per section), clipped at 0 when
    none is negative."""
    values = values[np.isfinite(values)]
    if len(values) < 2:
        return NAN, NAN
    half = _t(len(values)) * float(np.std(values, ddof=1)) / math.sqrt(len(values))
    mid = float(np.mean(values))
    return clipped(mid - half, mid + half, values)


def percentile_interval(values: np.ndarray, q: float) -> tuple[float, float]:
    """Sectioning interval for the ``q``-th percentile of ``values`` (in arrival order),
    clipped at 0 when none is negative (a latency)."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2 * SECTIONS:
        return NAN, NAN
    parts = np.array([np.percentile(values[s], q) for s in sections(len(values))])
    half = _t(len(parts)) * float(np.std(parts, ddof=1)) / math.sqrt(len(parts))
    mid = float(np.percentile(values, q))
    return clipped(mid - half, mid + half, values)


def proportion_interval(hits: np.ndarray) -> tuple[float, float]:
    """Interval for the share of ``hits`` (booleans, in arrival order): Wilson's score
    interval (E. B. Wilson, "Probable inference, the law of succession, and statistical
    inference", JASA 22(158), 1927), which stays in [0, 1] and has width at a share of 0 or 1,
    where batch means give a point or leave [0, 1] on a few requests. Neighbouring requests
    share batches, so their outcomes correlate: ``n`` is divided by the design effect (Kish,
    Survey Sampling, 1965), the batch-means variance of the share over the binomial one, when
    that is above 1. Below ``2 * SECTIONS`` requests a section is too small to measure it and
    ``n`` is taken as it is."""
    x = np.asarray(hits, dtype=float)
    n = len(x)
    if n == 0:
        return NAN, NAN
    p = float(x.mean())
    n_eff = float(n)
    if n >= 2 * SECTIONS and 0 < p < 1:
        parts = np.array([x[s].mean() for s in sections(n)])
        batch_var = float(np.var(parts, ddof=1)) / len(parts)
        n_eff = n / max(batch_var / (p * (1 - p) / n), 1.0)
    z2 = Z95**2 / n_eff
    mid = (p + z2 / 2) / (1 + z2)
    half = Z95 / (1 + z2) * math.sqrt(p * (1 - p) / n_eff + z2 / (4 * n_eff))
    # Wilson's interval holds the share (its upper end is exactly 1 at a share of 1); in
    # floating point it may miss it by an ulp
    return min(max(mid - half, 0.0), p), max(min(mid + half, 1.0), p)


def ratio_of_sums_interval(num: np.ndarray, den: np.ndarray) -> tuple[float, float]:
    """Interval of ``sum(num) / sum(den)`` from per-section sums (the ratio estimator's delta
    method: the spread of ``num_j - r * den_j`` over the sections). With the two from two runs
    over the same requests (a speedup from two runs' latencies) the sections are paired, so
    what the runs share cancels. Clipped at 0 when neither has a negative value (tokens,
    latencies)."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if len(num) != len(den) or len(num) < 2 or not den.sum() > 0:
        return NAN, NAN
    r = num.sum() / den.sum()
    resid = num - r * den
    half = _t(len(num)) * float(np.std(resid, ddof=1)) / (math.sqrt(len(num)) * den.mean())
    return clipped(r - half, r + half, num, den)


def ratio_interval(
    num: float, num_ci: tuple[float, float], den: float, den_ci: tuple[float, float]
) -> tuple[float, float]:
    """Interval of ``num / den`` from the two intervals (delta method, independent runs)."""
    r = num / den if den else NAN
    rel = [(hi - lo) / (2 * T95 * abs(x)) for x, (lo, hi) in ((num, num_ci), (den, den_ci))]
    if not all(math.isfinite(v) for v in [r, *rel]):
        return NAN, NAN
    half = T95 * abs(r) * math.sqrt(rel[0] ** 2 + rel[1] ** 2)
    return clipped(r - half, r + half, np.array([num, den]))


def relative_half_width(low: float, high: float, value: float) -> float:
    """Half of the interval ``[low, high]`` over ``value`` (what a precision target bounds);
    NaN where the interval is undefined."""
    half = (high - low) / 2 / value if value else NAN
    return half if math.isfinite(half) else NAN


def rising(levels: np.ndarray, min_rise: float) -> bool:
    """Whether a level measured per section (requests waiting) rises over the window: the
    least-squares slope is positive at 1 % (one-sided t-test) and the fitted rise over the
    window is more than ``min_rise`` (a stationary queue near capacity wanders; one that grows
    without bound rises by a share of every request that arrives)."""
    y = np.asarray(levels, dtype=float)
    if len(y) < 3 or not np.isfinite(y).all():
        return False
    x = np.arange(len(y), dtype=float) - (len(y) - 1) / 2
    slope = float(x @ (y - y.mean()) / (x @ x))
    if slope <= 0 or slope * (len(y) - 1) <= min_rise:
        return False
    resid = y - y.mean() - slope * x
    stderr = math.sqrt(float(resid @ resid) / (len(y) - 2) / float(x @ x))
    return stderr == 0 or slope / stderr > _t_trend(len(y))


def _t(b: int) -> float:
    return T95 if b == SECTIONS else float(stdtrit(b - 1, 0.975))


def _t_trend(b: int) -> float:
    return T_TREND if b == SECTIONS else float(stdtrit(b - 2, 0.99))
