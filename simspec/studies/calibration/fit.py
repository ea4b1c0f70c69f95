"""Fit the cost model's per-operator constants to timing samples with scipy.

Each operator family has one functional form (the one :mod:`simspec.engine.costmodel` evaluates):

* ``gemm`` and ``attention``: ``latency + smoothmax(FLOPs / (peak * ce), bytes / (bw * me); p)``
  with four constants (latency, compute and memory efficiency, sharpness p); attention has a
  second latency for decode-only batches;
* ``elementwise``: ``latency + bytes / (bw * me)`` per kernel;
* ``allreduce``: ``latency + bus_bytes / (link * eff)`` (ring all-reduce).

Residuals are log(predicted / measured), so every sample counts by its relative error, with a
soft-L1 loss so a few timer outliers cannot pull the fit. Samples are weighted so each ``group``
(a model, a TP degree, a worker count) weighs the same however many rows its table has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from simspec.catalog.hardware import GpuSpec
from simspec.engine.costmodel import roofline_time
from simspec.errors import InputError

# name, start, lower, upper; latencies in seconds
_ROOFLINE = (
    ("latency_s", 5e-6, 0.0, 1e-4),
    ("compute_efficiency", 0.6, 1e-3, 1.0),
    ("memory_efficiency", 0.7, 1e-3, 1.0),
    ("sharpness", 4.0, 1.0, 16.0),
)
FORMS: dict[str, tuple[tuple[str, float, float, float], ...]] = {
    "gemm": _ROOFLINE,
    # decode-only batches (one new token per sequence) take a lighter kernel path than batches
    # with several query tokens per sequence (verify, prefill): vLLM-0.19 attention at 1 sequence
    # and 16 KV tokens costs 11 µs as decode, 14.5 µs as a 16-token chunk (the profile tables)
    "attention": (*_ROOFLINE, ("decode_latency_s", 5e-6, 0.0, 1e-4)),
    "elementwise": (("latency_s", 2e-6, 0.0, 1e-4), ("memory_efficiency", 0.5, 1e-3, 1.0)),
    "allreduce": (("latency_s", 2e-5, 0.0, 1e-3), ("bandwidth_efficiency", 0.7, 1e-3, 1.0)),
}


def predict(
    operator: str, params: dict[str, float], samples: pd.DataFrame, gpu: GpuSpec
) -> np.ndarray:
    """Seconds the cost model gives each sample of one operator family."""
    flops = samples["flops"].to_numpy(dtype=float)
    nbytes = samples["bytes"].to_numpy(dtype=float)
    lat = params["latency_s"]
    if operator == "attention":
        lat = np.where(samples["decode_only"].to_numpy(dtype=bool), params["decode_latency_s"], lat)
    if operator in ("gemm", "attention"):
        return roofline_time(
            flops,
            nbytes,
            gpu.bf16_dense_flops * params["compute_efficiency"],
            gpu.hbm_bandwidth_bytes_s * params["memory_efficiency"],
            lat,
            params["sharpness"],
        )
    if operator == "elementwise":
        return lat + nbytes / (gpu.hbm_bandwidth_bytes_s * params["memory_efficiency"])
    if operator == "allreduce":
        rate = gpu.interconnect_bandwidth_bytes_s * params["bandwidth_efficiency"]
        return lat + nbytes / rate
    raise ValueError(f"unknown operator {operator!r}")


def _weights(samples: pd.DataFrame) -> np.ndarray:
    counts = samples.groupby("group")["group"].transform("size").to_numpy(dtype=float)
    w = 1.0 / counts
    return w / w.mean()


def fit_operator(operator: str, samples: pd.DataFrame, gpu: GpuSpec) -> dict[str, float]:
    """Least-squares constants of ``operator`` for ``samples`` (all of that operator)."""
    form = FORMS[operator]
    names = [f[0] for f in form]
    x0 = np.array([f[1] for f in form])
    lo, hi = np.array([f[2] for f in form]), np.array([f[3] for f in form])
    measured = samples["time_s"].to_numpy(dtype=float)
    sw = np.sqrt(_weights(samples))

    def residuals(x: np.ndarray) -> np.ndarray:
        pred = predict(operator, dict(zip(names, x, strict=True)), samples, gpu)
        return sw * np.log(pred / measured)

    res = least_squares(residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1, x_scale="jac")
    return {k: float(v) for k, v in zip(names, res.x, strict=True)}


def errors(pred: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    """MAPE, 90th-percentile and max absolute relative error, and the mean signed error."""
    rel = (pred - measured) / measured
    ape = np.abs(rel)
    return {
        "mape": float(ape.mean()),
        "p90_ape": float(np.quantile(ape, 0.9)),
        "max_ape": float(ape.max()),
        "bias": float(rel.mean()),
    }


def holdout_split(samples: pd.DataFrame) -> tuple[np.ndarray, str]:
    """Which samples a held-out check fits on (the rest are tested), and how it was split.

    With several models: fit on the smallest (by its largest GEMM/attention work), test on the
    others, the extrapolation users do when they simulate a bigger model than they profiled.
    Else with several TP degrees or worker counts: fit on the lowest, test on the others. Else:
    fit on every other distinct token count, test on the ones between.
    """
    models = [m for m in samples["model"].unique() if m]
    if len(models) > 1:
        size = samples.groupby("model")["bytes"].max()
        smallest = size.loc[models].idxmin()
        mask = (samples["model"] == smallest).to_numpy()
        return mask, f"fit on {smallest}, test on the {len(models) - 1} other models"
    tps = sorted(samples["tp"].unique())
    if len(tps) > 1:
        mask = (samples["tp"] == tps[0]).to_numpy()
        what = "worker count" if samples["operator"].iloc[0] == "allreduce" else "TP"
        return mask, f"fit on {what} {tps[0]}, test on {what} {', '.join(map(str, tps[1:]))}"
    tokens = np.sort(samples["tokens"].unique())
    even = set(tokens[::2])
    mask = samples["tokens"].isin(even).to_numpy()
    return mask, "fit on every other token count, test on the ones between"


@dataclass
class OperatorFit:
    """One operator family's constants, with fit and held-out errors."""

    operator: str
    params: dict[str, float]
    n: int
    fit: dict[str, float]
    heldout: dict[str, float] = field(default_factory=dict)
    heldout_split: str = ""
    heldout_n: int = 0
    # the fewest and most tokens a timed forward of the operator ran: past them the fit
    # extrapolates (QA: a table timed at 1-64 tokens fitted "calibrated" and priced prefill
    # GEMMs 30 % fast, its range recorded nowhere)
    # (None for the all-reduce, whose samples count message bytes, not tokens)
    tokens_timed: tuple[int, int] | None = None

    def summary(self) -> dict[str, object]:
        timed = {} if self.tokens_timed is None else {"tokens_timed": list(self.tokens_timed)}
        return {
            "n_samples": self.n,
            **timed,
            "fit_mape": round(self.fit["mape"], 4),
            "fit_p90_ape": round(self.fit["p90_ape"], 4),
            "heldout_mape": round(self.heldout.get("mape", float("nan")), 4),
            "heldout_p90_ape": round(self.heldout.get("p90_ape", float("nan")), 4),
            "heldout_n": self.heldout_n,
            "heldout_split": self.heldout_split,
        }


def _token_range(samples: pd.DataFrame) -> tuple[int, int]:
    """The fewest and most tokens the samples' forwards ran."""
    return int(samples["tokens"].min()), int(samples["tokens"].max())


def min_samples(operator: str) -> int:
    """The fewest samples ``operator`` is fitted from: twice its constants, so the fit keeps
    as many degrees of freedom as it spends (n constants fit n samples exactly: a MAPE of 0 %
    that says nothing) and a held-out split has samples on both sides."""
    return 2 * len(FORMS[operator])


def fit_all(samples: pd.DataFrame, gpu: GpuSpec) -> dict[str, OperatorFit]:
    """Fit every operator family present in ``samples``: final constants on all its samples,
    and a held-out error from a refit on :func:`holdout_split`'s part."""
    fits = {}
    for operator in FORMS:
        s = samples[samples["operator"] == operator].reset_index(drop=True)
        if s.empty:
            continue
        times = s["time_s"].to_numpy(dtype=float)
        if not (np.isfinite(times) & (times > 0)).all():
            raise InputError(
                "timings", f"{operator} samples include non-positive or infinite times"
            )
        work = s[["flops", "bytes"]].to_numpy(dtype=float)
        if not (np.isfinite(work) & (work >= 0)).all():
            raise InputError("timings", f"{operator} samples include negative or infinite sizes")
        need = min_samples(operator)
        # shapes, not rows: copies of one timing fit nothing (QA: 8 copies of one row gave a
        # "calibrated" fit at 0 % error)
        shapes = len(s[["flops", "bytes"]].drop_duplicates())
        if shapes < need:
            copies = f" ({len(s)} rows)" if len(s) != shapes else ""
            raise InputError(
                "timings",
                f"{shapes} distinct {operator} shape(s){copies} cannot fit its "
                f"{len(FORMS[operator])} constants and measure the error: give at least {need}",
            )
        params = fit_operator(operator, s, gpu)
        result = OperatorFit(
            operator,
            params,
            len(s),
            errors(predict(operator, params, s, gpu), s["time_s"].to_numpy()),
            tokens_timed=None if operator == "allreduce" else _token_range(s),
        )
        mask, how = holdout_split(s)
        if 0 < mask.sum() < len(s):
            part = fit_operator(operator, s[mask], gpu)
            test = s[~mask]
            result.heldout = errors(predict(operator, part, test, gpu), test["time_s"].to_numpy())
            result.heldout_split, result.heldout_n = how, int((~mask).sum())
        fits[operator] = result
    return fits
