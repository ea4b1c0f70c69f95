"""Turn operator fits into a :class:`~simspec.catalog.hardware.HardwareProfile` file with
provenance."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from simspec.catalog.hardware import HardwareProfile, Sourced
from simspec.outputs import write_text_atomic
from simspec.studies.calibration.fit import FORMS, OperatorFit
from simspec.studies.calibration.published import KNOWN_SOURCES
from simspec.studies.runs.keys import file_digest


def _describe_sources(samples: pd.DataFrame) -> str:
    kinds = sorted({s.split(":", 1)[0] for s in samples["source"]})
    return "; ".join(KNOWN_SOURCES.get(k, k) for k in kinds)


def at_edges(fits: dict[str, OperatorFit]) -> list[tuple[str, float, str]]:
    """``(operator_constant, value, "lower"|"upper")`` for each fitted constant that stopped at the
    edge of its range: the tables ask for a value past it (wrong units, another GPU's
    timings), so that operator's fit is not a measurement of it. A zero floor (no fixed
    latency) and sharpness 1 (the additive roofline) are forms, not edges."""
    out = []
    for operator, fit in fits.items():
        for name, _, low, high in FORMS[operator]:
            value = fit.params[name]
            at_low = low not in (0.0, 1.0) and math.isclose(value, low, rel_tol=1e-6)
            if at_low or math.isclose(value, high, rel_tol=1e-6):
                out.append((f"{operator}_{name}", value, "lower" if at_low else "upper"))
    return out


# a fitted efficiency this far from the one the GPU's own measured profile has is not this GPU's
# (an A100's tables fitted as an H100 read 0.24 against 0.72: QA)
FAR_FROM_OWN = 2.0


def far_from_own(fits: dict[str, OperatorFit], gpu: str, own: HardwareProfile | None) -> list[str]:
    """``operator_constant = fitted (own: packaged)`` for each fitted efficiency more than
    :data:`FAR_FROM_OWN` times off the one ``gpu``'s packaged profile measured (not one it
    transferred): another GPU's tables, or times in other units, more likely than this GPU."""
    if own is None or own.gpu != gpu:
        return []
    out = []
    for operator, fit in fits.items():
        for name, *_ in FORMS[operator]:
            key = f"{operator}_{name}"
            mine = own.params.get(key)
            if "efficiency" not in name or mine is None or mine.basis != "measured":
                continue
            ratio = fit.params[name] / mine.value if mine.value > 0 else math.inf
            if not 1 / FAR_FROM_OWN <= ratio <= FAR_FROM_OWN:
                out.append(f"{key} = {fit.params[name]:.3g} (packaged {gpu}: {mine.value:.3g})")
    return out


def build_profile(
    gpu: str,
    fits: dict[str, OperatorFit],
    samples: pd.DataFrame,
    files: list[str],
    fallback: HardwareProfile | None = None,
    note: str = "",
    paths: list[str] | None = None,
) -> HardwareProfile:
    """A profile whose fitted operators say how they were fitted and how well, and whose
    operators without timings are copied from ``fallback`` and marked ``transferred``.
    ``files`` name the tables as the profile shows them; ``paths`` (default: ``files``) are
    where they are read for their digests (QA: calibration/fit_default_profiles.py's
    ``shared/...`` names, resolved against the current folder, were digested as "missing")."""
    params: dict[str, Sourced] = {}
    fit_table: dict[str, dict[str, Any]] = {}
    for operator, form in FORMS.items():
        fit = fits.get(operator)
        if fit is None:
            if fallback is None:
                raise ValueError(f"no {operator} timings and no fallback profile to take it from")
            for name, *_ in form:
                key = f"{operator}_{name}"
                params[key] = Sourced(
                    value=fallback[key],
                    basis="transferred",
                    source=f"No {operator} timings for {gpu}: taken from the {fallback.gpu} "
                    f"profile ({fallback.params[key].source})",
                )
            fit_table[operator] = {"transferred_from": fallback.gpu}
            continue
        s = samples[samples["operator"] == operator]
        held = (
            f"; held-out MAPE {fit.heldout['mape']:.1%} ({fit.heldout_split})"
            if fit.heldout
            else ""
        )
        how = (
            f"Fitted with scipy least_squares (log residuals, soft-L1) to {fit.n} {operator} "
            f"samples from {_describe_sources(s)}{_timed(fit.tokens_timed)}; fit MAPE "
            f"{fit.fit['mape']:.1%}{held}."
        )
        for name, *_ in form:
            params[f"{operator}_{name}"] = Sourced(
                value=float(f"{fit.params[name]:.6g}"), source=how, basis="measured"
            )
        fit_table[operator] = fit.summary()
    provenance = {
        "fitted_on": dt.date.today().isoformat(),
        "tool": "simspec calibrate fit",
        "sources": sorted(
            {KNOWN_SOURCES.get(s.split(":", 1)[0], s.split(":", 1)[0]) for s in samples["source"]}
        ),
        "files": [str(f) for f in files],
        # the digests a run's key takes of the files it reads: the very tables fitted to
        "files_sha256": {
            str(f): file_digest(str(p)) for f, p in zip(files, paths or files, strict=True)
        },
        "peaks": "datasheet peaks of the GPU in simspec/data/gpus.yaml (bf16 dense FLOP/s, "
        "HBM and interconnect bandwidth); efficiencies are fractions of them",
    }
    if note:
        provenance["note"] = note
    # a profile none of whose operators this GPU's tables fit is not "calibrated" (QA: eleven
    # packaged profiles with no tables at all had read "calibrated (some operators transferred)")
    edges = at_edges(fits)
    far = far_from_own(fits, gpu, fallback)
    if not fits:
        status = "transferred (no timing tables for this GPU)"
    elif edges:  # QA: timings x1000 wrote a "calibrated" profile pinned at its bounds
        status = (
            f"suspect: {len(edges)} fitted constant(s) at the edge of their range "
            "(wrong units, or another GPU's timings?)"
        )
        provenance["at_edges"] = [f"{key} = {value:g} ({edge} edge)" for key, value, edge in edges]
    elif far:
        status = (
            f"suspect: {len(far)} fitted efficiency(ies) more than {FAR_FROM_OWN:g}x off "
            f"{gpu}'s own measured profile (another GPU's timings, or other units?)"
        )
        provenance["far_from_own"] = far
    elif len(fits) == len(FORMS):
        status = "calibrated"
    else:
        status = "calibrated (some operators transferred)"
    return HardwareProfile(
        gpu=gpu, status=status, params=params, provenance=provenance, fit=fit_table
    )


def write_profile(profile: HardwareProfile, out: Path) -> None:
    """Write YAML (``.yaml``/``.yml``) or JSON, atomically: a stopped run leaves no half file."""
    dumped = profile.model_dump()
    order = ("gpu", "status", "provenance", "fit", "params")  # what it is before the numbers
    data = {k: dumped[k] for k in order}
    if out.suffix in (".yaml", ".yml"):
        text = yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True)
    else:
        text = json.dumps(data, indent=2) + "\n"
    write_text_atomic(out, text)


def _timed(tokens: tuple[int, int] | None) -> str:
    """Where a fit's forwards were timed, as its source says it (nothing for the all-reduce,
    whose samples are message sizes)."""
    return "" if tokens is None else f", timed at {tokens[0]:,}-{tokens[1]:,} tokens"
