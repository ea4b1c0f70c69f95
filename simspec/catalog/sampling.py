"""How the user's sampling settings (temperature, top-p) change per-position acceptance.

At temperature 0 a draft token survives when it is the target's argmax; when sampling, the
rule of speculative sampling keeps it with probability min(1, p/q), so a position accepts
Σ min(p, q) of the two distributions after temperature and top-p. The engines do not run that
rule on a draft distribution: vLLM V1 (EAGLE, MTP, n-gram) passes no draft probabilities and
SGLang's tree sampling is target-only, both keeping a greedy draft with the target's own
probability of it after temperature and top-p, which the draft's distribution does not enter.
``simspec/data/sampling.yaml`` tabulates Σ min(p, q) on synthetic distributions fitted to the
published T=0/T=1 pairs (calibration/derive_temperature_model.py): heating moves mass into the
tail, where a draft is least accurate, and acceptance falls. For those engines the table is an
approximation, whose fit to the published pairs absorbs part of the difference (README,
"Acceptance: α traces and the exact rule").

simspec applies it as one factor per (temperature, top-p), α_T = α0 · f(T, p), with f read off
the fitted family at the pairs' median greedy acceptance: the pairs (α0 from 0.55 to 0.68) show
a drop of 7-20 % at T=1 with no trend in α0, while the family's own dependence on α0 outside
that range is extrapolation.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from simspec.catalog.tables import packaged_table


@cache
def _grid() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    doc = packaged_table("sampling.yaml")
    alpha0 = np.asarray(doc["alpha0"], dtype=np.float64)
    temps = np.asarray(doc["temperature"], dtype=np.float64)
    top_ps = np.asarray(doc["top_p"], dtype=np.float64)
    # values[top_p, temperature, alpha0], made non-decreasing in alpha0 (Monte Carlo noise)
    values = np.array([doc["alpha"][str(tp)] for tp in doc["top_p"]], dtype=np.float64)
    values = np.maximum.accumulate(values, axis=2)
    return alpha0, temps, top_ps, values, doc


def sampling_source() -> str:
    doc = _grid()[4]
    fit = doc["fit"]
    return (
        f"{doc['source']}; over {fit['pairs']} pairs, alpha at T=1 off by "
        f"{fit.get('factor_mape_alpha1', fit['mape_alpha1']):.1%} on average"
    )


# No published pair constrains acceptance above T = 1 (shared/validation has T = 0, 0.7 and 1
# only), and the synthetic family's behaviour there depends on the tail of the logit
# distribution, which the pairs do not pin down: above it, acceptance is held at its T = 1 value.
MAX_FITTED_TEMPERATURE = 1.0


def _curve(temperature: float, top_p: float) -> np.ndarray:
    """α at (temperature, top_p) on the α0 grid, interpolated between tabulated settings."""
    alpha0, temps, top_ps, values, _ = _grid()
    t = min(max(temperature, temps[0]), MAX_FITTED_TEMPERATURE)
    p = min(max(top_p, top_ps.min()), 1.0)
    # along top-p (descending in the table), then temperature
    order = np.argsort(top_ps)
    by_p = np.array(
        [
            [np.interp(p, top_ps[order], values[order, ti, ai]) for ai in range(len(alpha0))]
            for ti in range(len(temps))
        ]
    )
    return np.array([np.interp(t, temps, by_p[:, ai]) for ai in range(len(alpha0))])


def factor(temperature: float, top_p: float = 1.0) -> float:
    """f(T, p) = α_T / α0 of the fitted family at the pairs' median greedy acceptance."""
    if temperature == 0.0 and top_p >= 1.0:
        return 1.0
    alpha0, _, top_ps, _, doc = _grid()
    lowest = float(top_ps.min())
    if top_p < lowest:
        # Below the table: top-p -> 0 keeps only the argmax (engines keep at least one token),
        # which is greedy decoding, f = 1; between 0 and the table's lowest top-p, linear (an
        # assumption: nothing is tabulated there), not the lowest top-p's factor held flat.
        edge = factor(temperature, lowest)
        return 1.0 + (edge - 1.0) * top_p / lowest
    median = float(doc["fit"]["alpha0_median"])
    return float(np.interp(median, alpha0, _curve(temperature, top_p))) / median


def alpha_at(alpha0: np.ndarray | float, temperature: float, top_p: float = 1.0) -> np.ndarray:
    """Acceptance at ``temperature``/``top_p`` of positions whose greedy acceptance is α0."""
    return np.clip(np.asarray(alpha0, dtype=np.float64) * factor(temperature, top_p), 0.0, 1.0)


def greedy_alpha(alpha: np.ndarray | float, temperature: float, top_p: float = 1.0) -> np.ndarray:
    """The greedy acceptance α0 whose acceptance at ``temperature``/``top_p`` is ``alpha``
    (the inverse of :func:`alpha_at`, for presets measured while sampling)."""
    f = factor(temperature, top_p)
    return np.clip(np.asarray(alpha, dtype=np.float64) / f, 0.0, 1.0)


def sampling_notes(temperature: float, top_p: float) -> list[str]:
    """How acceptance was scaled from greedy at ``temperature`` and ``top_p``, and on what
    evidence (none at greedy with top-p 1): the lines ``simspec sweep`` and the explorer
    print under their tables."""
    if not (temperature > 0 or top_p < 1):
        return []
    if temperature == 0:
        return [f"note: top-p {top_p} has no effect at temperature 0 (greedy: the argmax)"]
    f = factor(temperature, top_p)
    lines = [
        f"sampling at T={temperature}, top-p={top_p}: acceptance x {f:.3f} of greedy "
        f"({sampling_source()})"
    ]
    if temperature > MAX_FITTED_TEMPERATURE:
        lines.append(
            f"note: no published pair constrains acceptance above T="
            f"{MAX_FITTED_TEMPERATURE:g}; it is held at its T={MAX_FITTED_TEMPERATURE:g} value"
        )
    elif temperature < MAX_FITTED_TEMPERATURE and f > 1.0:
        # QA: a 10-14 % speedup gain at T=0.5 was shown without a word of how thin it is
        lines.append(
            f"note: at T={temperature:g} the fitted family accepts more than greedy (the exact "
            "rule's partial credit where draft and target disagree); no published pair between "
            "T=0 and T=1 constrains it, so the rise is the family's, not a measurement's"
        )
    if top_p < 1.0:
        # QA: top-p 0.9 at T=1 cut tau by 8 % and the curve turned back up below 0.8
        lines.append(
            "note: top-p is applied as the exact rule applies it, to the target's and the "
            "draft's nuclei; vLLM V1 and SGLang verify a greedy draft with the target's "
            "nucleus probability alone, under which a smaller top-p raises acceptance: that "
            "direction is not modelled, and no published pair measures top-p"
        )
    return lines
