"""Golden cases: the numbers a refactor must leave where they are.

Each case computes a flat ``{metric: value}`` dict (:func:`compute`); ``tests/golden/*.json``
hold the values recorded for it, and :func:`compare` lists every metric that moved by more
than :data:`RTOL` (relative) with its old and new value, so a failure says where. Cases cover
every engine path the cost model and the scheduler take: chains, static and dynamic trees,
lookup replay, heads, sampling, bursts, Poisson and time-varying arrivals, load policies,
preemption, TP and a layer split, other engines, MoE with and without expert parallelism, MLA
with MTP, sliding windows with MXFP4 experts, FP8 weights and KV cache; plus one of each study
(recommend's bands, plan's bisection, a fleet) and the two CLI tables (the default sweep and
``simspec validate``).

    pytest -m golden                      # check (part of the full suite)
    python tools/golden.py --update       # re-record after a change meant to move numbers
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
# Relative tolerance: a refactor that reorders a floating-point sum moves a number by ~1e-16;
# anything past 1e-9 is a change of what is computed, not of how.
RTOL = 1e-9
# below this a value is zero (intervals and fractions that are exactly 0 in one run and 1e-18
# in another are the same number)
ATOL = 1e-12


def _method(name: str, **kw: Any) -> dict:
    return {"name": name, **kw}


TRACE = {"acc_len": "sharegpt", "acc_len_method": "eagle3"}
NGRAM = {"acc_len": "sharegpt", "acc_len_method": "ngram"}
# 8 turnovers (the studies measure 64) keep a case to a second or two; two cases keep 64
CLOSED = {"arrival": "closed", "concurrency": 8, "requests": 40, "turnovers": 8}
STUDY_RULE = {"arrival": "closed", "concurrency": 8, "requests": 40}

# The 20 scenarios of the first golden hashes (tools/golden.py before this file), then the
# MoE, MLA, precision and windowed-attention paths.
SCENARIOS: dict[str, dict] = {
    "ar_closed": {"workload": STUDY_RULE},
    "eagle3_chain": {"workload": STUDY_RULE, "method": _method("eagle3", k=3, acceptance=TRACE)},
    "eagle3_batch64": {
        "workload": {**CLOSED, "concurrency": 64, "requests": 160},
        "method": _method("eagle3", k=4, acceptance=TRACE),
    },
    "ngram_acc_len": {"workload": CLOSED, "method": _method("ngram", k=3, acceptance=NGRAM)},
    "eagle1_static_tree": {
        "workload": CLOSED,
        "method": _method(
            "eagle1",
            k=5,
            tree="static",
            tree_nodes=25,
            tree_topk=10,
            acceptance={"tau": 3.6, "tau_k": 5},
        ),
    },
    "eagle2_dynamic_tree": {
        "workload": CLOSED,
        "method": _method(
            "eagle2",
            k=6,
            tree="dynamic",
            tree_nodes=50,
            tree_topk=10,
            acceptance={"tau": 4.2, "tau_k": 6, "spread": 0.5},
        ),
    },
    "medusa1_alpha_profile": {
        "workload": CLOSED,
        "method": _method(
            "medusa1", k=4, tree="static", tree_nodes=63, acceptance={"alpha": [0.6, 0.4, 0.3, 0.2]}
        ),
    },
    "hydra_spread": {
        "workload": CLOSED,
        "method": _method(
            "hydra", k=4, tree="static", tree_nodes=63, acceptance={"alpha": 0.6, "spread": 0.4}
        ),
    },
    "redrafter_beams": {
        "workload": CLOSED,
        "method": _method("redrafter", k=4, beam_width=4, acceptance={"alpha": 0.7}),
    },
    "lookahead": {
        "workload": CLOSED,
        "method": _method(
            "lookahead",
            k=4,
            lookahead_window=7,
            lookahead_ngram=5,
            lookahead_guesses=7,
            acceptance={"alpha": 0.4},
        ),
    },
    "draft_model_bursty": {
        "workload": CLOSED,
        "method": _method(
            "draft_model",
            k=5,
            draft_model="llama-3.2-1b",
            acceptance={"alpha": 0.7, "burst_scale": 0.5, "burstiness": 0.8},
        ),
    },
    "self_spec": {
        "workload": CLOSED,
        "method": _method("self_spec", k=4, draft_layers=12, acceptance={"alpha": 0.5}),
    },
    "mtp_hypothetical": {
        "workload": CLOSED,
        "method": _method("mtp", k=2, acceptance={"tau": 2.4, "tau_k": 2}),
    },
    "suffix_acc_len": {"workload": CLOSED, "method": _method("suffix", k=5, acceptance=NGRAM)},
    "poisson": {
        "workload": {"arrival": "poisson", "rate": 6.0, "requests": 60},
        "method": _method("eagle3", k=3, acceptance=TRACE),
    },
    "rate_schedule_k_schedule": {
        "workload": {
            "arrival": "poisson",
            "rate_schedule": [[0.0, 2.0], [4.0, 20.0]],
            "requests": 80,
        },
        "method": _method(
            "eagle3",
            k=4,
            k_schedule=[[1, 8, 4], [9, 1024, 1]],
            acceptance={"tau": 3.0, "tau_k": 4, "spread": 0.6},
        ),
    },
    "eagle2_sampled": {
        "temperature": 1.0,
        "workload": CLOSED,
        "method": _method(
            "eagle2",
            k=6,
            tree="dynamic",
            tree_nodes=50,
            tree_topk=10,
            acceptance={"tau": 4.0, "tau_k": 6, "temperature": 1.0},
        ),
    },
    "eagle3_temperature": {
        "temperature": 0.7,
        "workload": CLOSED,
        "method": _method("eagle3", k=3, acceptance=TRACE),
    },
    "tp4_disable_by_batch": {
        "model": "llama-3.1-70b",
        "tp": 4,
        "engine": "vllm-v0",  # speculative_disable_by_batch_size is V0's: V1 refuses it
        "workload": {**CLOSED, "concurrency": 32, "requests": 64},
        "scheduler": {"max_num_seqs": 32},
        "method": _method("eagle3", k=3, disable_by_batch_size=16, acceptance=TRACE),
    },
    "hf_pp2_preemption": {
        "model": "llama-3.1-70b",
        "pp": 2,
        "engine": "hf",
        "gpu": "a100_80gb",
        "workload": {
            "arrival": "closed",
            "concurrency": 64,
            "requests": 128,
            "turnovers": 2,
            "lengths_from": None,
            "prompt": {"dist": "lognormal", "mean": 2000, "cv": 1.0, "max": 8000},
            "output": {"dist": "uniform", "low": 100, "high": 600},
        },
        "method": _method("medusa1", k=4, tree="static", tree_nodes=63, acceptance={"alpha": 0.6}),
    },
    "ngram_token_replay": {
        "workload": CLOSED,
        "method": _method("ngram", k=3, acceptance={"tokens": "sharegpt"}),
    },
    "deepseek_v3_mla_mtp": {
        "model": "deepseek-v3",
        "gpu": "h200",
        "tp": 8,
        "workload": {**CLOSED, "concurrency": 16},
        "method": _method("mtp", k=1, acceptance={"tau": 1.8, "tau_k": 1}),
    },
    "qwen3_moe_ep2_draft": {
        "model": "qwen3-30b-a3b",
        "tp": 2,
        "ep": 2,
        "workload": {**CLOSED, "concurrency": 32},
        "method": _method("draft_model", k=4, draft_model="qwen3-0.6b", acceptance={"alpha": 0.7}),
    },
    "gpt_oss_window_mxfp4": {
        "model": "gpt-oss-120b",
        "workload": CLOSED,
        "method": _method("eagle3", k=3, acceptance={"alpha": 0.6}),
    },
    "mixtral_tp2_poisson": {
        "model": "mixtral-8x7b",
        "gpu": "a100_80gb",
        "tp": 2,
        "workload": {"arrival": "poisson", "rate": 4.0, "requests": 60},
    },
    "fp8_weights_kv": {
        "precision": "fp8",
        "kv_cache_dtype": "fp8",
        "workload": {**CLOSED, "concurrency": 32},
        "method": _method("eagle3", k=3, acceptance=TRACE),
    },
}


def _column_print(values: np.ndarray) -> dict[str, float]:
    """Five numbers that move when any value of a numeric column moves: count, sum, min,
    max and an order-weighted mean (a reordering moves the last)."""
    x = np.asarray(values, dtype=np.float64)
    finite = x[np.isfinite(x)]
    out = {"n": float(len(x)), "nan": float(np.count_nonzero(np.isnan(x)))}
    if len(finite):
        weights = np.arange(1, len(x) + 1, dtype=np.float64)[np.isfinite(x)]
        out |= {
            "sum": float(finite.sum()),
            "min": float(finite.min()),
            "max": float(finite.max()),
            "weighted": float((weights * finite).sum() / weights.sum()),
        }
    return out


def frame_print(frame: pd.DataFrame, prefix: str) -> dict[str, Any]:
    """Every numeric column's :func:`_column_print`, every other column's values."""
    out: dict[str, Any] = {}
    for col in frame.columns:
        values = frame[col]
        if pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values):
            for stat, v in _column_print(values.to_numpy(dtype=np.float64)).items():
                out[f"{prefix}.{col}.{stat}"] = v
        else:
            out[f"{prefix}.{col}"] = [None if v is None or v != v else str(v) for v in values]
    return out


def scenario_metrics(raw: dict) -> dict[str, Any]:
    from simspec import Scenario, simulate

    res = simulate(Scenario.model_validate(raw))
    out = {f"summary.{k}": v for k, v in res.summary.as_json_dict().items()}
    out |= frame_print(res.requests, "requests")
    out |= frame_print(res.iterations, "iterations")
    return out


def table_metrics(frame: pd.DataFrame, key: list[str], prefix: str) -> dict[str, Any]:
    """A result table cell by cell, each row named by its ``key`` columns."""
    out: dict[str, Any] = {}
    for _, row in frame.iterrows():
        name = "/".join(str(row[k]) for k in key)
        for col in frame.columns:
            if col in key:
                continue
            v = row[col]
            if isinstance(v, (bool, np.bool_)):
                v = bool(v)
            elif isinstance(v, (int, float, np.integer, np.floating)):
                v = None if v != v else float(v)
            else:  # a blank and a missing string are the same cell
                v = None if v is None or v != v or v == "" else str(v)
            out[f"{prefix}[{name}].{col}"] = v
    return out


@functools.cache
def sweep_frame() -> pd.DataFrame:
    """``simspec sweep``'s default table (the README's first command), unrounded."""
    from simspec import sweep

    return sweep({})


def default_sweep() -> dict[str, Any]:
    """``simspec sweep``'s default table: every cell."""
    return table_metrics(sweep_frame(), ["method", "k", "batch_size"], "sweep")


@functools.cache
def validate_frame() -> pd.DataFrame:
    """``simspec validate``'s predictions for the packaged cases (``tools/golden.py``
    records them so; the suite checks the same rows series by series, :func:`validate_series`)."""
    from simspec import validate
    from simspec.studies.runs import Runs

    return validate(runs=Runs("process", workers=2))


def _validate_metrics(frame: pd.DataFrame, rows: list[int]) -> dict[str, Any]:
    """Each row's prediction and status, named by its position ``rows`` in the packaged table."""
    frame = frame.assign(row=rows)
    keep = ["row", "predicted_value", "predicted_tau", "rel_error", "status", "skip_reason",
            "acceptance_source", "assumptions"]  # fmt: skip
    return table_metrics(frame[[c for c in keep if c in frame.columns]], ["row"], "validate")


def validate_packaged() -> dict[str, Any]:
    """``simspec validate`` on the packaged cases: every row's prediction and status."""
    frame = validate_frame()
    return _validate_metrics(frame, list(range(len(frame))))


# The suite checks cli_validate one series of the packaged table at a time: the whole table in
# one test was the suite's longest (457 s of a 21-minute run on two cores), one worker busy while
# the other ran out of tests. A row's prediction reads only its own scenarios (planned from
# its own cells, run by their content's key), so a series run alone predicts each of its rows as
# the whole table does; 4 of the table's 237 scenarios serve two or three series and run once
# for each (5 more runs, 2%).
@functools.cache
def packaged_cases() -> pd.DataFrame:
    """The packaged case table, as ``simspec validate`` reads it."""
    from simspec.studies.validation.cases import read_cases

    return read_cases(None)


def validate_series_names() -> list[str]:
    """The packaged table's series, in the table's order."""
    return list(dict.fromkeys(packaged_cases()["series"]))


def series_rows(series: str) -> list[int]:
    """The positions in the packaged table of ``series``'s rows."""
    return [i for i, s in enumerate(packaged_cases()["series"]) if s == series]


def validate_series(series: str) -> dict[str, Any]:
    """:func:`validate_packaged`'s metrics of one series' rows, predicted by ``simspec validate``
    on those rows alone (serially: pytest's workers are the parallelism)."""
    from simspec.studies.runs import SERIAL
    from simspec.studies.validation.run import validate

    rows = series_rows(series)
    return _validate_metrics(validate(packaged_cases().iloc[rows], runs=SERIAL), rows)


def recorded_row(key: str) -> int:
    """The table position a ``cli_validate`` metric is of (``validate[12].status`` -> 12)."""
    return int(key[key.index("[") + 1 : key.index("]")])


def of_rows(values: dict[str, Any], rows: list[int]) -> dict[str, Any]:
    """The ``cli_validate`` metrics of the rows ``rows``."""
    wanted = set(rows)
    return {k: v for k, v in values.items() if recorded_row(k) in wanted}


# short fixed lengths keep the studies' runs (and an open loop's warm-up) short
SHORT = {
    "lengths_from": None,
    "prompt": {"dist": "lognormal", "mean": 512, "cv": 0.5, "max": 2048},
    "output": {"dist": "lognormal", "mean": 128, "cv": 0.5, "max": 512},
}


def recommend_study() -> dict[str, Any]:
    """recommend's grid, its crossovers by bisection and the bands (EAGLE-3, K 1-3)."""
    from simspec import Deployment, preset_method
    from simspec.studies.schedule.bands import recommend_bands

    deploy = Deployment(workload={"requests": 64, "turnovers": 4, **SHORT})
    rec = recommend_bands(deploy, preset_method("eagle3"), [1, 2, 3], (1, 8, 64), 256)
    out = table_metrics(rec.table.drop(columns=["point"]), ["concurrency"], "table")
    out |= table_metrics(rec.band_table, ["start_bs"], "bands")
    out["crossovers"] = [[x.below, x.above, x.last, x.first] for x in rec.crossovers]
    return out


def plan_study() -> dict[str, Any]:
    """plan's bisection on the arrival rate (plain decoding and EAGLE-3)."""
    from simspec import Deployment, preset_method
    from simspec.studies.capacity import Slo, plan

    frame = plan(
        Deployment(workload=SHORT),
        [preset_method("autoregressive"), preset_method("eagle3")],
        target_qps=40.0,
        slo=Slo(ttft_ms=2000.0, tpot_ms=50.0),
        gpu_hour_price=2.5,
        duration_s=10.0,
        min_requests=100,
    )
    return table_metrics(frame, ["method"], "plan")


def fleet_study() -> dict[str, Any]:
    """Two replicas behind least_outstanding on two minutes of azure-conv."""
    from simspec import Scenario, preset_method
    from simspec.config import FleetConfig
    from simspec.studies.fleet import FleetSlo, run_fleet, summarize_fleet

    sc = Scenario(
        method=preset_method("eagle3"),
        workload={"arrival": "replay", "arrival_trace": "azure-conv", "trace_end_s": 120.0},
    )
    run = run_fleet(FleetConfig.uniform(sc, 2, "least_outstanding"))
    summary = summarize_fleet(run, FleetSlo(2000.0, 50.0))
    out = {f"summary.{k}": (float(v) if isinstance(v, (int, float)) else v)
           for k, v in summary.items()}  # fmt: skip
    out |= frame_print(run.requests, "requests")
    return out


STUDIES: dict[str, Callable[[], dict[str, Any]]] = {
    "study_recommend": recommend_study,
    "study_plan": plan_study,
    "study_fleet": fleet_study,
    "cli_sweep_default": default_sweep,
    "cli_validate": validate_packaged,
}


def names() -> list[str]:
    return [*SCENARIOS, *STUDIES]


def compute(name: str) -> dict[str, Any]:
    if name in SCENARIOS:
        return scenario_metrics(SCENARIOS[name])
    return STUDIES[name]()


def path(name: str) -> Path:
    return HERE / f"{name}.json"


def recorded(name: str) -> dict[str, Any] | None:
    p = path(name)
    return json.loads(p.read_text()) if p.exists() else None


def record(name: str, values: dict[str, Any]) -> None:
    p = path(name)
    tmp = p.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_plain(values), indent=1, sort_keys=True, allow_nan=False) + "\n")
    tmp.replace(p)


def _plain(value: Any) -> Any:
    """JSON-safe: NaN as None, numpy scalars as Python ones."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= max(RTOL * max(abs(a), abs(b)), ATOL)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def compare(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per metric that moved, appeared or disappeared."""
    new = _plain(new)
    lines = []
    for key in sorted(set(old) | set(new)):
        if key not in new:
            lines.append(f"{key}: gone (was {old[key]!r})")
        elif key not in old:
            lines.append(f"{key}: new ({new[key]!r})")
        elif not _close(old[key], new[key]):
            a, b = old[key], new[key]
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a:
                lines.append(f"{key}: {a!r} -> {b!r} ({(b - a) / abs(a):+.3g} relative)")
            else:
                lines.append(f"{key}: {_short(a)} -> {_short(b)}")
    return lines


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 120 else text[:117] + "..."
