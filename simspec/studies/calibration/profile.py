"""Turn operator fits into a :class:`~simspec.catalog.hardware.HardwareProfile` file with
provenance."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from simspec.catalog.hardware import HardwareProfile, Sourced
from simspec.outputs import write_text_atomic
from simspec.studies.calibration.fit import FORMS, OperatorFit
from simspec.studies.calibration.published import KNOWN_SOURCES


def _describe_sources(samples: pd.DataFrame) -> str:
    kinds = sorted({s.split(":", 1)[0] for s in samples["source"]})
    return "; ".join(KNOWN_SOURCES.get(k, k) for k in kinds)


def build_profile(
    gpu: str,
    fits: dict[str, OperatorFit],
    samples: pd.DataFrame,
    files: list[str],
    fallback: HardwareProfile | None = None,
    note: str = "",
) -> HardwareProfile:
    """A profile whose fitted operators say how they were fitted and how well, and whose
    operators without timings are copied from ``fallback`` and marked ``transferred``."""
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
            f"samples from {_describe_sources(s)}; fit MAPE {fit.fit['mape']:.1%}{held}."
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
        "peaks": "datasheet peaks of the GPU in simspec/data/gpus.yaml (bf16 dense FLOP/s, "
        "HBM and interconnect bandwidth); efficiencies are fractions of them",
    }
    if note:
        provenance["note"] = note
    # a profile none of whose operators this GPU's tables fit is not "calibrated" (QA: eleven
    # packaged profiles with no tables at all had read "calibrated (some operators transferred)")
    if not fits:
        status = "transferred (no timing tables for this GPU)"
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
