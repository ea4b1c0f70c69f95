"""Control variates for a closed loop over a dataset: what its requests are known to be.

A closed loop that draws its requests from a dataset's records (``workload.lengths_from``)
walks them in shuffled passes, so every measured request is each record with the same chance
(:func:`simspec.engine.workload.generate_requests`). Which records a window happens to hold
moves its throughput: at concurrency 1, 256 ShareGPT requests know EAGLE-3's speedup only to
about ±7 %, and nearly all of that is the window's mix of long and short, easy and hard
requests, not the engine. Yet each request's prompt and output length are known before the run,
and so, when its acceptance replays its own record (a trace or a token stream), are the decode
steps that record takes (output over the record's tokens per step); their means over the
records are known exactly. A parametric acceptance draws each request's own offset
``z ~ N(0, 1)`` when it starts, independently of its lengths (:func:`with_request_draws`): those
controls have mean 0 whatever the lengths, so they serve lengths drawn from a distribution too.

The controlled estimator (Law, *Simulation Modeling and Analysis*, 5th ed., §11.3; Lavenberg
and Welch, "A perspective on the use of control variables to increase the efficiency of Monte
Carlo simulations", Management Science 27(3), 1981) replaces each measured request's latency
``y_i`` by ``y_i - β·(x_i - μ)``: ``x_i`` its controls, ``μ`` their means over the records,
``β`` the least-squares slopes of ``y`` on ``x`` over the measured requests. The mean of the
adjusted values estimates the same mean (β estimated from the same requests adds a bias of
order 1/n), with the variance the controls explain removed; the sections of the adjusted
values give its interval as before (:mod:`simspec.engine.intervals`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simspec.config import WorkloadConfig
from simspec.engine.workload import RequestSpecs, record_lengths

# Fewer measured requests than this are left as they are: a few dozen would fit their own noise
# (20 a slope for the most controls a run has, five, and the intercept). One bound for every
# run, whatever its controls, so a method's run and its baseline's (one workload, one length)
# are both controlled or neither.
MIN_REQUESTS = 100


@dataclass(frozen=True)
class Controls:
    """Each request's controls (rows in the run's request order, one column a control) and
    each control's mean over the dataset's records."""

    values: np.ndarray
    means: np.ndarray
    names: tuple[str, ...]

    @property
    def knows_tokens(self) -> bool:
        """The requests' output lengths are a control (their mean is the records')."""
        return "output_tokens" in self.names


def controlled(y: np.ndarray, x: np.ndarray, means: np.ndarray) -> np.ndarray:
    """``y - (x - means) @ β``, β the least-squares slopes of ``y`` on ``x`` (with an
    intercept). A control constant over the requests gets no slope. The sums run in
    ``np.einsum`` (no threaded BLAS), so the same inputs give the same bits."""
    y = np.asarray(y, dtype=float)
    if len(y) < MIN_REQUESTS:
        return y
    xc = x - np.mean(x, axis=0)
    gram = np.einsum("ij,ik->jk", xc, xc)
    cross = np.einsum("ij,i->j", xc, y - np.mean(y))
    beta = np.linalg.lstsq(gram, cross, rcond=None)[0]
    return y - (x - means) @ beta


def dataset_controls(
    wl: WorkloadConfig,
    specs: RequestSpecs,
    step_tokens: Callable[[np.ndarray], np.ndarray | None],
) -> Controls | None:
    """The controls of a closed loop drawn from ``wl.lengths_from``'s records (None for any
    other workload): each request's prompt and output length and, where ``step_tokens`` gives
    the tokens per step of a request's own record (an acceptance that replays the workload's
    records), its decode steps."""
    if wl.arrival != "closed" or wl.lengths_from is None:
        return None
    prompt, output = record_lengths(wl)
    cols = [specs.prompt_len.astype(float), specs.output_len.astype(float)]
    means = [float(np.mean(prompt)), float(np.mean(output))]
    names = ["prompt_tokens", "output_tokens"]
    own = step_tokens(specs.trace_index)
    everyone = step_tokens(np.arange(len(output)))
    if own is not None and everyone is not None:
        cols.append(specs.output_len / own)
        means.append(float(np.mean(output / everyone)))
        names.append("decode_steps")
    return Controls(np.column_stack(cols), np.array(means), tuple(names))


def with_request_draws(
    controls: Controls | None, draws: np.ndarray | None, specs: RequestSpecs
) -> Controls | None:
    """``controls`` (None: a closed loop whose lengths have none) with two more from each
    request's own acceptance draw ``z ~ N(0, 1)`` (parametric acceptance, drawn independently
    of its lengths when it starts): ``out · z`` and ``out · (z² - 1)``, whose means are 0 for
    any lengths. A request's steps grow with its output and fall as its ``z`` rises, bending
    (the logistic), hence both."""
    if draws is None:
        return controls
    out = specs.output_len.astype(float)
    z = draws[: len(out)]
    cols = np.column_stack([out * z, out * (z * z - 1.0)])
    names = ("output_x_draw", "output_x_draw_squared_less_1")
    if controls is None:
        return Controls(cols, np.zeros(2), names)
    return Controls(
        np.column_stack([controls.values, cols]),
        np.append(controls.means, [0.0, 0.0]),
        (*controls.names, *names),
    )
