"""Predicted against measured, per operator: tables for the terminal, a plotly page to look at."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simspec.catalog.hardware import GpuSpec, HardwareProfile
from simspec.catalog.tables import shown
from simspec.errors import InputError
from simspec.outputs import write_text_atomic
from simspec.studies.calibration.fit import FORMS, predict
from simspec.studies.calibration.schema import brief, read_table


def operator_params(profile: HardwareProfile, operator: str) -> dict[str, float]:
    return {name: profile[f"{operator}_{name}"] for name, *_ in FORMS[operator]}


def evaluate(profile: HardwareProfile, samples: pd.DataFrame, gpu: GpuSpec) -> pd.DataFrame:
    """``samples`` with the profile's ``predicted_s`` and ``rel_error`` for every row."""
    parts = []
    for operator in FORMS:
        s = samples[samples["operator"] == operator].copy()
        if s.empty:
            continue
        s["predicted_s"] = predict(operator, operator_params(profile, operator), s, gpu)
        parts.append(s)
    out = pd.concat(parts, ignore_index=True)
    out["rel_error"] = (out["predicted_s"] - out["time_s"]) / out["time_s"]
    return out


def error_table(evaluated: pd.DataFrame, by: tuple[str, ...] = ("operator", "op")) -> pd.DataFrame:
    """Count, MAPE, 90th-percentile error and mean signed error per group."""
    ape = evaluated["rel_error"].abs()
    g = evaluated.assign(ape=ape).groupby(list(by))
    return pd.DataFrame(
        {
            "n": g.size(),
            "mape": g["ape"].mean(),
            "p90_ape": g["ape"].quantile(0.9),
            "bias": g["rel_error"].mean(),
        }
    ).reset_index()


def stored_fit_table(profile: HardwareProfile) -> pd.DataFrame:
    """The per-operator fit and held-out errors recorded in the profile when it was fitted, as
    text: sample counts whole, errors in percent, and a transferred operator saying where it
    came from (QA: floats, fractions and a row of nan)."""

    def pct(v: object) -> str:
        return f"{float(v):.1%}" if isinstance(v, int | float) else ""

    rows = []
    for operator in FORMS:
        entry = profile.fit.get(operator, {})
        src = entry.get("transferred_from")
        n = entry.get("n_samples")
        split = f"transferred from {src} (no timings)" if src else entry.get("heldout_split", "")
        rows.append(
            {
                "operator": operator,
                "samples": f"{int(n):,}" if isinstance(n, int | float) else "",
                "fit MAPE": pct(entry.get("fit_mape")),
                "held-out": pct(entry.get("heldout_mape")),
                "held-out split": str(split),
            }
        )
    return pd.DataFrame(rows)


def deployment_fit_table(profile: HardwareProfile) -> pd.DataFrame | None:
    """A calibrate bench profile's fitted runs, measured vs predicted (None without one)."""
    fit = profile.deployment.fit if profile.deployment is not None else {}
    runs = fit.get("runs") or []
    if not runs:
        return None
    frame = pd.DataFrame(runs)
    return frame[[c for c in ("run", "metric", "measured", "predicted", "rel_error") if c in frame]]


def write_html(evaluated: pd.DataFrame, profile: HardwareProfile, out: Path) -> None:
    """One self-contained page: measured vs predicted per operator (log axes, y = x line) and
    the distribution of relative errors."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    operators = [o for o in FORMS if (evaluated["operator"] == o).any()]
    fig = make_subplots(
        rows=2,
        cols=len(operators),
        subplot_titles=[f"{o}: predicted vs measured" for o in operators]
        + [f"{o}: relative error" for o in operators],
        vertical_spacing=0.14,
    )
    for col, operator in enumerate(operators, start=1):
        s = evaluated[evaluated["operator"] == operator]
        for source, part in s.groupby("source"):
            name = source.split(":", 1)[-1]
            fig.add_trace(
                go.Scattergl(
                    x=part["time_s"] * 1e6,
                    y=part["predicted_s"] * 1e6,
                    mode="markers",
                    marker={"size": 4, "opacity": 0.5},
                    name=f"{operator}: {name}",
                    hovertext=part["op"],
                ),
                row=1,
                col=col,
            )
        lo, hi = float(s["time_s"].min() * 1e6), float(s["time_s"].max() * 1e6)
        fig.add_trace(
            go.Scatter(
                x=[lo, hi],
                y=[lo, hi],
                mode="lines",
                line={"dash": "dash"},
                name="y = x",
                showlegend=col == 1,
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(type="log", title_text="measured (µs)", row=1, col=col)
        fig.update_yaxes(type="log", title_text="predicted (µs)", row=1, col=col)
        fig.add_trace(
            go.Histogram(x=np.clip(s["rel_error"], -1, 2) * 100, nbinsx=60, showlegend=False),
            row=2,
            col=col,
        )
        fig.update_xaxes(title_text="(predicted − measured) / measured (%)", row=2, col=col)
        fig.update_yaxes(title_text="samples", row=2, col=col)
    fig.update_layout(
        title=f"simspec calibration: profile {profile.gpu} ({profile.status})",
        height=800,
        width=max(900, 420 * len(operators)),
    )
    write_text_atomic(
        out, fig.to_html(include_plotlyjs=True, full_html=True, div_id="simspec-calibration")
    )


def forward_check(profile: HardwareProfile, gpu: GpuSpec, harness_csv: Path) -> pd.DataFrame:
    """Whole-step times of a harness CSV (``forward`` and ``prefill`` rows) against the cost
    model's sum of operators: a held-out check, since no whole step is fitted on. Collectives
    and host overhead are left out on both sides (the harness times neither). A row that
    cannot be read is an InputError naming the file and row."""
    d = read_table(harness_csv)
    d = d[d["kind"].isin(["forward", "prefill"])]
    rows = []
    for line, r in zip(d.index, d.itertuples(index=False), strict=True):
        try:
            rows.append(_whole_step(profile, gpu, r))
        except (AttributeError, TypeError, ValueError, ArithmeticError) as exc:
            # a column the forward rows need is missing, or a cell is not a number
            raise InputError(
                "timings", f"{shown(harness_csv)} row {line + 1}: {brief(exc)}"
            ) from None
    return pd.DataFrame(rows)


def _count(value: Any, column: str, smallest: int) -> int:
    """A whole-step row's count column as an integer of at least ``smallest``, or an error
    naming it (QA: q_per_seq 2.5 ran as 2)."""
    number = float(value)
    if not (math.isfinite(number) and number == int(number) and number >= smallest):
        raise ValueError(f"{column} must be a whole number >= {smallest}, got {value!r}")
    return int(number)


def _whole_step(profile: HardwareProfile, gpu: GpuSpec, r: Any) -> dict[str, Any]:
    """One ``forward`` or ``prefill`` row of a harness CSV: measured against the cost model."""
    from simspec.catalog.hardware import load_engine
    from simspec.catalog.models import ModelShape
    from simspec.engine.costmodel import BatchShape, RooflineCostModel

    model = ModelShape(
        id=str(r.model),
        hidden_size=int(r.hidden_size),
        intermediate_size=int(r.intermediate_size),
        num_hidden_layers=int(r.num_hidden_layers),
        num_attention_heads=int(r.num_attention_heads),
        num_key_value_heads=int(r.num_key_value_heads),
        head_dim=int(r.head_dim),
        vocab_size=int(r.vocab_size),
    )
    b, q = _count(r.num_seqs, "num_seqs", 1), _count(r.q_per_seq, "q_per_seq", 1)
    ctx = _count(r.context_len, "context_len", 0)
    measured = float(r.time_ms_median) * 1e-3
    if not (math.isfinite(measured) and measured > 0):  # QA: -1 ms was scored as 25 % off
        raise ValueError(f"time_ms_median must be a finite number > 0, got {r.time_ms_median!r}")
    logits = b if (r.kind == "prefill" or q == 1) else b * q
    cost = RooflineCostModel(gpu, profile, load_engine("vllm"), tp=int(r.tp))
    step = cost.forward(model, BatchShape.uniform(b, q, float(b * ctx), logits), 0.0)
    predicted = step.total_s - step.communication_s
    return {
        "kind": r.kind,
        "op": r.op,
        "num_seqs": b,
        "q_per_seq": q,
        "context_len": ctx,
        "measured_ms": measured * 1e3,
        "predicted_ms": predicted * 1e3,
        "rel_error": (predicted - measured) / measured,
    }
