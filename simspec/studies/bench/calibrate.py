"""Fit the constants of one deployment, not of its GPU, to its own plain-decoding benchmark
runs (``simspec calibrate bench``).

What is fitted: the engine's host time per step (``step_overhead_s``) and per sequence in the
step (``step_overhead_per_seq_s``) as this server runs them, and ``gpu_time_scale``, one
multiplier on every forward's kernel time. Every GPU-level constant (each operator's latency,
efficiencies and sharpness) stays the base profile's: those were fitted to timing tables of
the GPU, and a handful of end-to-end runs cannot tell them apart.

What they are fitted to, by scipy's least squares, each run simulated with its own workload
(:mod:`.compare`):

- every run's mean TPOT: the step time of the batches it ran, the quantity the constants set;
- output throughput only where the client kept more requests waiting than the engine runs at
  once (a closed loop above max_num_seqs, or a request rate). Below that, a closed loop's
  throughput is its concurrency over the requests' end-to-end latency, whose TTFT part is
  mostly the client's and the HTTP server's time (below), so it would pull the host constants
  toward time the engine does not spend;
- not TTFT. A benchmark's TTFT runs from the client's send to the first streamed chunk:
  request parsing, chat templating, tokenization, the HTTP stream. GPUStack's Qwen3-8B/H100
  runs measure 59 ms at concurrency 1 where simspec's prefill of their 233 tokens is ~11 ms;
  simspec models the engine, so TTFT is compared (``simspec compare``) but never fitted.

Three constants from two runs are not determined by the data alone (at small batches the
kernel time and the fixed host time move every TPOT alike), so each constant has a weak prior
centred on the base (:data:`PRIOR_SIGMA`): a MAP fit that moves the constants the runs speak
to and leaves the others where the engine profile put them. A TPOT residual counts 1 %
(:data:`DATA_SIGMA`), far tighter than any prior, so the data decide wherever they can.

With more than three loads, the fit is checked on loads it did not see (:func:`split`):
fitted on the lowest, the highest and every other load between, the rest predicted.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy.optimize import lsq_linear

from simspec.catalog.hardware import (
    GPU_TIME_SCALE_RANGE,
    DeploymentFit,
    EngineProfile,
    HardwareProfile,
    Sourced,
    gpu_ids,
)
from simspec.catalog.models import preset_id
from simspec.engine.simulation import simulate
from simspec.errors import InputError, ScenarioError
from simspec.outputs import write_text_atomic
from simspec.studies.bench.compare import Plan
from simspec.studies.bench.measured import MeasuredRun
from simspec.studies.bench.simulated import simulated_metrics

PARAMS = DeploymentFit.KEYS
TPOT = "mean_tpot_ms"
THROUGHPUT = "output_throughput_tok_s"
# How closely a fitted TPOT should match: an estimate of a benchmark's run-to-run spread on
# an idle server (~1 %), ten times the printed resolution (0.01 ms of a 7 ms TPOT); GPUStack's
# four runs of one deployment differ by 6 % over an 8x load, most of it the load.
DATA_SIGMA = 0.01
# The priors' widths. Kernel time: the base profile's own held-out error (its GEMM fit on
# models it did not see), else 10 %. Host time: the engines' estimates (engines.yaml) are
# ~1 ms per step and a few us per sequence, and servers differ from them by their version,
# API server and CPU: 2 ms and 50 us are wide enough to move anywhere the runs ask, and keep
# a constant the runs cannot see where it was.
PRIOR_SIGMA = {"step_overhead_s": 2e-3, "step_overhead_per_seq_s": 50e-6}
DEFAULT_SCALE_SIGMA = 0.10
# The fit's bounds: a step's host time beyond 100 ms, or a sequence's beyond 1 ms (400x the
# engines' estimate), is a stalled server, not an overhead; the kernel-time range is
# GPU_TIME_SCALE_RANGE's.
UPPER = {"step_overhead_s": 0.1, "step_overhead_per_seq_s": 1e-3}
# The largest fixed host time published per step (shared/calibration-data/moe-serving/
# host_overhead_reports.csv): vLLM V0's GPU bubble of 5-13 ms per decode step (vLLM issue
# #6854, the RFC for multi-step scheduling). A fit past it is kept (the runs ask for it) but
# warned of: runs of another deployment (model, GPU, TP, engine version) ask for their extra GPU
# time as host time, at a small fit error. No per-sequence figure bounds the other constant:
# TensorRT-LLM's 45 ms host step at 1,536 sequences (PR #10273) is 29 us a sequence, and two
# GPUStack runs of this very deployment (tests/data/bench) fit 33 us.
PUBLISHED_MAX = {"step_overhead_s": 13e-3}
MIN_LOADS = 2  # a fixed and a per-sequence host time need two batch sizes at least
HELDOUT_ABOVE = 3  # loads; with fewer, every load is needed to fit

TTFT_NOTE = (
    "TTFT is not fitted: a benchmark's TTFT is mostly the client's and the HTTP server's time "
    "(request handling, chat template, tokenization, streaming), which simspec does not model"
)


@dataclass(frozen=True)
class Residual:
    """One measured number the fit matches: a run's metric."""

    plan: Plan
    metric: str

    @property
    def measured(self) -> float:
        return self.plan.run.metrics[self.metric]


@dataclass
class Fit:
    """Constants fitted to some runs, and each fitted number against its measurement."""

    params: dict[str, float]
    rows: list[dict[str, Any]]  # run, load, metric, measured, predicted, rel_error
    at_bound: list[str] = field(default_factory=list)
    evaluations: int = 0

    @property
    def beyond_published(self) -> list[str]:
        """The fitted host constants past the largest published (PUBLISHED_MAX)."""
        return [k for k, top in PUBLISHED_MAX.items() if self.params.get(k, 0.0) > top]

    @property
    def mape(self) -> float:
        return float(np.mean([abs(r["rel_error"]) for r in self.rows]))


@dataclass
class Calibration:
    """The whole fit, the held-out check (None with three loads or fewer), and the base's
    prediction of the same numbers, for the before/after table."""

    base: dict[str, float]
    fit: Fit
    base_rows: list[dict[str, Any]]
    heldout: Fit | None = None
    heldout_split: str = ""
    metrics: tuple[str, ...] = ()


def check_runs(runs: list[MeasuredRun], gpu: str | None) -> None:
    """Runs one fit can use: plain decoding, each with a mean TPOT, of one model on one GPU,
    at two loads or more; each refusal is one line naming why."""
    if not runs:
        raise InputError("RESULT", "no runs to fit")
    for run in runs:
        if run.acceptance is not None:
            raise InputError(
                "RESULT",
                f"{run.name} measured speculative decoding: calibrate fits plain-decoding runs "
                "(the host time of a speculative step is the method's); compare it instead",
            )
        if TPOT not in run.metrics:
            raise InputError(
                "RESULT",
                f"{run.name} has no mean TPOT, the number the fit matches (vllm bench serve "
                "--percentile-metrics must include tpot)",
            )
        if not run.metrics[TPOT] > 0:  # QA: 0 passed the reader's >= 0 and divided by zero
            raise InputError(
                "RESULT",
                f"{run.name}: {TPOT} is {run.metrics[TPOT]:g}, and the fit matches it as a "
                "share of itself: a run's mean TPOT must be > 0 (a run that decoded one token "
                "per request has none)",
            )
    models = {preset_id(r.model) for r in runs if r.model}
    if len(models) > 1:
        a, b = _two_differing(runs, lambda r: preset_id(r.model) if r.model else None)
        raise InputError(
            "RESULT",
            f"{a.name} measured {a.model}, {b.name} {b.model}: one calibration is of one "
            "deployment; give the runs of one model",
        )
    runs_gpu(runs, gpu, "calibration")
    loads = {_load_key(r) for r in runs}
    if len(loads) < MIN_LOADS:
        only = "one run" if len(runs) == 1 else f"{len(runs)} runs, all at {runs[0].load_label},"
        raise InputError(
            "RESULT",
            f"{only} cannot separate the host time of a step from that of a sequence: give "
            "runs at two loads or more (e.g. vllm bench serve --max-concurrency 1 and 8)",
        )


def runs_gpu(runs: list[MeasuredRun], gpu: str | None, what: str) -> str | None:
    """The simspec GPU the runs' ``gpu`` metadata names (None: none, or a name simspec has no
    profile of); runs of two GPUs are refused, and so is a ``gpu`` (the --gpu given) other
    than the one they name: a run predicted on another GPU is no comparison."""
    gpus = {r.gpu.lower() for r in runs if r.gpu}
    if len(gpus) > 1:
        a, b = _two_differing(runs, lambda r: r.gpu.lower() if r.gpu else None)
        raise InputError(
            "RESULT",
            f"{a.name} ran on {a.gpu}, {b.name} on {b.gpu} (their gpu metadata): one "
            f"{what} is of one deployment; give the runs of one GPU",
        )
    label = gpus.pop() if gpus else None
    if label not in gpu_ids():
        return None
    if gpu is not None and label != gpu:
        raise InputError(
            "--gpu", f"{gpu}, but the runs say they ran on {label}: give --gpu {label}"
        )
    silent = [r for r in runs if not r.gpu]
    if silent and gpu is None:  # QA: one run's label was taken for runs that state none
        said = next(r for r in runs if r.gpu)
        raise InputError(
            "RESULT",
            f"{said.name} ran on {said.gpu} (its gpu metadata), {silent[0].name} states no "
            f"GPU: give --gpu, the GPU every run ran on",
        )
    return label


def unknown_gpu(runs: list[MeasuredRun]) -> str | None:
    """The GPU the runs' metadata names where it is no simspec GPU id (a vendor's name such as
    "NVIDIA H200"), which :func:`runs_gpu` cannot take: the caller says what it ran on."""
    labels = {r.gpu for r in runs if r.gpu and r.gpu.lower() not in gpu_ids()}
    return sorted(labels)[0] if labels else None


def _two_differing(
    runs: list[MeasuredRun], key: Callable[[MeasuredRun], str | None]
) -> tuple[MeasuredRun, MeasuredRun]:
    first = next(r for r in runs if key(r) is not None)
    other = next(r for r in runs if key(r) is not None and key(r) != key(first))
    return first, other


def _load_key(run: MeasuredRun) -> tuple[bool, float]:
    return (not run.closed, run.load)


def residuals_of(plans: list[Plan], max_seqs: int) -> list[Residual]:
    """What each run contributes: its mean TPOT, and its output throughput where the client
    kept more requests waiting than the engine runs at once (``max_seqs``)."""
    out = []
    for plan in plans:
        out.append(Residual(plan, TPOT))
        run = plan.run
        queued = not run.closed or (run.max_concurrency or run.requests) > max_seqs
        if queued and THROUGHPUT in run.metrics and run.metrics[THROUGHPUT] > 0:
            out.append(Residual(plan, THROUGHPUT))
    return out


def split(plans: list[Plan]) -> tuple[list[Plan], list[Plan], str]:
    """(fit on, held out, the split in words): the loads in order, the lowest, the highest and
    every other one between fitted, the others held out (predicted between fitted loads, never
    beyond them)."""
    loads = sorted({_load_key(p.run) for p in plans})
    held = {key for i, key in enumerate(loads) if i % 2 == 1 and i < len(loads) - 1}
    fit = [p for p in plans if _load_key(p.run) not in held]
    out = [p for p in plans if _load_key(p.run) in held]

    def names(ps: list[Plan]) -> str:
        labels = dict.fromkeys(p.run.load_label for p in sorted(ps, key=lambda p: _load_key(p.run)))
        return ", ".join(labels)

    return fit, out, f"fitted on {names(fit)}; held out {names(out)}"


class Simulator:
    """Simulates plans with trial constants: each trial a profile file (the base with a
    ``deployment`` section) in a private folder, every result kept by its constants."""

    def __init__(self, base: HardwareProfile, engine: EngineProfile, folder: Path) -> None:
        self.base, self.engine, self.folder = base, engine, folder
        self.cache: dict[tuple[int, tuple[float, ...]], dict[str, float]] = {}
        self.files: dict[tuple[float, ...], Path] = {}
        self.runs = 0

    def metrics(self, plan: Plan, params: dict[str, float]) -> dict[str, float]:
        point = tuple(params[k] for k in PARAMS)
        key = (id(plan), point)  # plans outlive the fit
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        path = self.files.get(point)
        if path is None:  # one file per trial, shared by its runs
            path = self.files[point] = self.folder / f"trial-{len(self.files)}.json"
            write_text_atomic(path, json.dumps(self.trial(params)))
        scenario = plan.scenario.model_copy(update={"profile": str(path)})
        try:
            sglang = plan.run.per_token_itl  # SGLang bench_serving's ITL per token
            out = simulated_metrics(simulate(scenario), per_token_itl=sglang)
        except ScenarioError as exc:
            raise ScenarioError(f"{plan.run.name}: {exc}") from None
        self.runs += 1
        self.cache[key] = out
        return out

    def trial(self, params: dict[str, float]) -> dict[str, Any]:
        """A trial profile as data: the base's constants and the trial's, without the
        provenance, which every trial would parse again for nothing."""
        data = deployed(self.base, self.engine.id, params).model_dump(
            include={"gpu", "params", "deployment"}
        )
        for p in (*data["params"].values(), *data["deployment"]["params"].values()):
            p["source"] = "a trial of simspec calibrate bench"
        return data

    def rows(self, residuals: list[Residual], params: dict[str, float]) -> list[dict[str, Any]]:
        rows = []
        for r in residuals:
            predicted = self.metrics(r.plan, params).get(r.metric, math.nan)
            rows.append(
                {
                    "run": r.plan.run.name,
                    "load": r.plan.run.load_label,
                    "metric": r.metric,
                    "measured": r.measured,
                    "predicted": predicted,
                    "rel_error": (predicted - r.measured) / r.measured,
                }
            )
        return rows


def deployed(
    base: HardwareProfile,
    engine: str,
    params: dict[str, float],
    how: str = "a trial of the fit",
    record: dict[str, Any] | None = None,
) -> HardwareProfile:
    """The base profile carrying ``params`` as the constants of a deployment on ``engine``."""
    sourced = {k: Sourced(value=v, source=how, basis="measured") for k, v in params.items()}
    deployment = DeploymentFit(engine=engine, params=sourced, fit=record or {})
    return base.model_copy(update={"deployment": deployment})


def base_params(base: HardwareProfile, engine: EngineProfile) -> dict[str, float]:
    """The constants the fit starts from and its priors centre on: the engine's host times
    (a calibrated base profile's, where it is one) and the base's kernel-time multiplier."""
    deployed = base.engine_for(engine)
    return {
        "step_overhead_s": deployed["step_overhead_s"],
        "step_overhead_per_seq_s": deployed["step_overhead_per_seq_s"],
        "gpu_time_scale": base.gpu_time_scale,
    }


def scale_sigma(base: HardwareProfile) -> float:
    """The prior's width on the kernel-time multiplier: the base profile's held-out GEMM
    error, where its fit records one."""
    held = base.fit.get("gemm", {}).get("heldout_mape")
    return float(held) if isinstance(held, int | float) and 0 < held < 1 else DEFAULT_SCALE_SIGMA


def fit(
    sim: Simulator,
    residuals: list[Residual],
    start: dict[str, float],
    step: Callable[[str], None] | None = None,
) -> Fit:
    """The MAP constants for ``residuals``: relative errors at :data:`DATA_SIGMA`, each
    constant's distance from ``start`` at its prior's width.

    A simulated step's time is linear in the three constants (kernel time x multiplier + fixed
    host time + per-sequence host time x sequences; a closed loop's schedule does not depend on
    them), so the residuals are linear too: their slopes are taken once, by finite differences
    at the start, and the bounded linear problem is solved (scipy's ``lsq_linear``) and
    re-solved at each new point with the same slopes until a step moves no constant (a chord
    Gauss-Newton: a few simulations per run where a general solver takes dozens)."""
    sigma = np.array([PRIOR_SIGMA[k] / _UNITS[k] for k in PARAMS[:2]] + [scale_sigma(sim.base)])
    x0 = _to_x(start)
    lower, upper = _to_x(_LOWER), _to_x(_UPPER)
    x = np.clip(x0, lower, upper)
    simulated = sim.runs

    def data(x: np.ndarray) -> np.ndarray:
        p = _from_x(x)
        values = [sim.metrics(r.plan, p).get(r.metric, math.nan) / r.measured for r in residuals]
        if step is not None:
            step("fit")
        out = (np.array(values) - 1) / DATA_SIGMA
        if not np.all(np.isfinite(out)):
            raise ScenarioError("a fitted run predicts no value for a metric it is fitted to")
        return out

    r = data(x)
    slopes = np.empty((len(residuals), len(PARAMS)))
    for i, h in enumerate(_STEP):
        probe = x.copy()
        probe[i] += h if x[i] + h <= upper[i] else -h
        slopes[:, i] = (data(probe) - r) / (probe[i] - x[i])
    # minimise |r + J (x' - x)|^2 + |(x' - x0) / sigma|^2 over the bounds
    a = np.vstack([slopes, np.diag(1 / sigma)])
    for _ in range(_MAX_STEPS):
        b = np.concatenate([slopes @ x - r, x0 / sigma])
        new = lsq_linear(a, b, bounds=(lower, upper)).x
        moved = np.abs(new - x)
        x = new
        r = data(x)
        if np.all(moved < _TOLERANCE):
            break
    params = {k: float(f"{v:.6g}") for k, v in _from_x(x).items()}
    # at a bound to the solver's resolution: it stops once a step moves a parameter less
    # than _TOLERANCE, so a value within a few such steps of a bound (10: one order of
    # magnitude) is one lsq_linear held there (it lands within rounding of the bound)
    near = _TOLERANCE * 10
    edges = [
        k
        for k, v, lo, hi, eps in zip(PARAMS, x, lower, upper, near, strict=True)
        if not lo + eps < v < hi - eps
    ]
    rows = sim.rows(residuals, params)
    return Fit(params, rows, edges, sim.runs - simulated)


# The solver's coordinates: ms, us, and the log of the multiplier, so each unit moves a TPOT
# by a comparable share; the finite-difference step in each (0.1 ms, 5 us over a batch of
# a few sequences, 2 %) moves a 7 ms TPOT by ~1 %, far above the simulation's rounding; the
# chord stops when a step moves every constant less than 0.1 us, 0.01 us or 0.01 %.
_UNITS = {"step_overhead_s": 1e-3, "step_overhead_per_seq_s": 1e-6}
_STEP = (0.1, 5.0, 0.02)
_TOLERANCE = np.array([1e-4, 1e-2, 1e-4])
_MAX_STEPS = 8
_LOWER = {"step_overhead_s": 0.0, "step_overhead_per_seq_s": 0.0}
_LOWER["gpu_time_scale"] = GPU_TIME_SCALE_RANGE[0]
_UPPER = {**UPPER, "gpu_time_scale": GPU_TIME_SCALE_RANGE[1]}


def _to_x(params: dict[str, float]) -> np.ndarray:
    return np.array(
        [params[k] / _UNITS[k] for k in PARAMS[:2]] + [math.log(params["gpu_time_scale"])]
    )


def _from_x(x: np.ndarray) -> dict[str, float]:
    return {
        "step_overhead_s": float(x[0]) * _UNITS["step_overhead_s"],
        "step_overhead_per_seq_s": float(x[1]) * _UNITS["step_overhead_per_seq_s"],
        "gpu_time_scale": float(math.exp(x[2])),
    }


def calibrate(
    plans: list[Plan],
    base: HardwareProfile,
    engine: EngineProfile,
    max_seqs: int,
    step: Callable[[str], None] | None = None,
) -> Calibration:
    """Fit every plan's run; with more than three loads, also fit on a split and predict the
    held-out loads with that fit."""
    start = base_params(base, engine)
    residuals = residuals_of(plans, max_seqs)
    with tempfile.TemporaryDirectory(prefix="simspec-calibrate-") as tmp:
        sim = Simulator(base, engine, Path(tmp))
        before = sim.rows(residuals, start)
        whole = fit(sim, residuals, start, step)
        heldout, words = None, ""
        if len({_load_key(p.run) for p in plans}) > HELDOUT_ABOVE:
            on, out, words = split(plans)
            part = fit(sim, residuals_of(on, max_seqs), start, step)
            heldout = Fit(part.params, sim.rows(residuals_of(out, max_seqs), part.params))
            heldout.at_bound, heldout.evaluations = part.at_bound, part.evaluations
    metrics = tuple(dict.fromkeys(r.metric for r in residuals))
    return Calibration(start, whole, before, heldout, words, metrics)


# -- the profile written --------------------------------------------------------------------
def calibrated_profile(
    cal: Calibration,
    base: HardwareProfile,
    base_ref: str,
    engine: EngineProfile,
    files: list[tuple[str, str, list[str]]],
    model: str,
    tp: int,
) -> HardwareProfile:
    """The base profile, every GPU-level constant unchanged, with the fitted constants as its
    ``deployment`` and their provenance: the files (path, sha256, the runs in each), the error
    of every fitted number, the held-out check."""
    how = (
        f"Fitted by simspec calibrate bench (least squares, scipy lsq_linear, MAP with weak "
        f"priors on the "
        f"{base_ref} profile and the {engine.id} engine profile) to {len(cal.fit.rows)} "
        f"measured numbers ({', '.join(cal.metrics)}) of {len(files)} file(s): {model} at "
        f"tp {tp}; fit MAPE {cal.fit.mape:.1%}"
        + (f"; held-out MAPE {cal.heldout.mape:.1%} ({cal.heldout_split})" if cal.heldout else "")
        + "."
    )
    record: dict[str, Any] = {
        "tool": "simspec calibrate bench",
        "fitted_on": dt.date.today().isoformat(),
        "base_profile": base_ref,
        "model": model,
        "tp": tp,
        "files": [{"path": p, "sha256": h, "runs": runs} for p, h, runs in files],
        "fitted_to": list(cal.metrics),
        "not_fitted": TTFT_NOTE,
        "priors": {
            **{k: {"centre": cal.base[k], "sigma": v} for k, v in PRIOR_SIGMA.items()},
            "gpu_time_scale": {
                "centre": cal.base["gpu_time_scale"],
                "sigma_log": scale_sigma(base),
            },
            "data_sigma": DATA_SIGMA,
        },
        "fit_mape": round(cal.fit.mape, 4),
        "runs": [_rounded(r) for r in cal.fit.rows],
    }
    if cal.fit.at_bound:
        record["at_bound"] = cal.fit.at_bound
    if cal.fit.beyond_published:
        record["beyond_published"] = {
            k: {"fitted": cal.fit.params[k], "largest_published": PUBLISHED_MAX[k]}
            for k in cal.fit.beyond_published
        }
    if cal.heldout is not None:
        record["heldout_split"] = cal.heldout_split
        record["heldout_mape"] = round(cal.heldout.mape, 4)
        record["heldout_runs"] = [_rounded(r) for r in cal.heldout.rows]
    profile = deployed(base, engine.id, cal.fit.params, how, record)
    status = f"{base.status or 'profile'}; deployment constants calibrated to benchmark runs"
    if cal.fit.at_bound:  # QA: a fit pinned at its bounds (MAPE 21,875 %) read "calibrated"
        status = (
            f"suspect: {len(cal.fit.at_bound)} deployment constant(s) at the edge of their range "
            f"({', '.join(cal.fit.at_bound)}; fit MAPE {cal.fit.mape:.1%}): the runs ask for "
            "more than this deployment's constants explain"
        )
    return profile.model_copy(update={"status": status})


def _rounded(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (float(f"{v:.6g}") if isinstance(v, float) else v) for k, v in row.items()}


def profile_text(profile: HardwareProfile) -> str:
    """A profile as YAML: what it is, then where it came from, then the numbers."""
    dumped = profile.model_dump()
    order = ("gpu", "status", "provenance", "fit", "deployment", "params")
    data = {k: dumped[k] for k in order if dumped.get(k) is not None}
    return yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)
