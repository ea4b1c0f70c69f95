"""The explorer's downloads, each saying what it is: the scenario's columns first (model, GPU,
TP, engine, dataset, EP, DP, precision, KV-cache dtype, acceptance, sampling, workload), each
method's settings beside its name, then the result.
"""

from __future__ import annotations

import pandas as pd

from simspec.studies.capacity import Slo
from simspec.studies.provenance import provenance
from simspec.ui.inputs import (
    ExplorerInputs,
    async_label,
    deployment_for,
    method_for,
    serving_columns,
)
from simspec.ui.uploads import as_uploaded


def acceptance_given(inp: ExplorerInputs) -> dict[str, object]:
    """The acceptance the page was given, as CSV columns: alpha or tau with its K, and the
    spread it ran with (none for a preset or a trace, whose source column says it)."""
    if inp.acceptance == "alpha":
        return {"alpha": inp.alpha, "alpha_spread": inp.spread or 0.0}
    if inp.acceptance == "tau":
        return {
            "tau": inp.tau,
            "tau_k": inp.tau_k or "method's K",
            "tau_spread": spread_label(inp),
        }
    return {}


def scenario_columns(inp: ExplorerInputs) -> dict[str, object]:
    """The scenario a result came from, as leading CSV columns."""
    cols: dict[str, object] = {
        "model": inp.model_name or inp.model,
        "gpu": inp.gpu,
        "tp": inp.tp,
        "engine": inp.engine,
        "dataset": inp.dataset,
        **serving_columns(inp),
        "acceptance": inp.acceptance,
        **acceptance_given(inp),
    }
    cols |= {
        "temperature": inp.temperature,
        "top_p": inp.top_p,
        "arrival": inp.arrival,
        "lengths": inp.lengths,
    }
    if inp.lengths != "dataset":
        cols |= {"prompt_mean": inp.prompt_mean, "output_mean": inp.output_mean}
        if inp.lengths == "lognormal":
            cols["length_cv"] = inp.length_cv
    # each run measures at least ``requests`` and ``turnovers`` x its concurrency (the rows'
    # measured_requests says how many it did)
    return cols | {
        "async_scheduling": async_label(inp),
        "max_model_len": inp.max_model_len or "model's",
        "requests_min": inp.requests,
        "turnovers": inp.turnovers,
        "seed": inp.seed,
    }


def method_settings(inp: ExplorerInputs, name: str) -> dict[str, object]:
    """The settings a method ran with (K, tree shape and budget)."""
    m = method_for(inp, name)
    return {"k": m.k, "tree": m.tree or "", "tree_nodes": m.tree_nodes or ""}


def with_scenario(frame: pd.DataFrame, inp: ExplorerInputs, settings: bool = True) -> pd.DataFrame:
    """``frame`` with the scenario's columns first and, where it has a ``method`` column (and
    ``settings``), each method's settings beside it."""
    out = frame.copy()
    if settings and "method" in out.columns:
        per = {m: method_settings(inp, m) for m in out.method.unique()}
        at = list(out.columns).index("method") + 1
        for key in ("k", "tree", "tree_nodes"):
            if key not in out.columns:
                out.insert(at, key, out.method.map(lambda m, key=key: per[m][key]))
                at += 1
    for i, (key, value) in enumerate(scenario_columns(inp).items()):
        out.insert(i, key, value)
    return out


def with_provenance(frame: pd.DataFrame, inp: ExplorerInputs, methods: list[str]) -> pd.DataFrame:
    """``frame`` with, per row (row i ran ``methods[i]``), what it ran with and whose
    acceptance it rests on: the sweep CSV's provenance columns (precision and KV-cache dtype
    are the scenario's columns already)."""
    deploy = deployment_for(inp)
    per = {m: provenance(deploy, method_for(inp, m)) for m in dict.fromkeys(methods)}
    rows = [per[m] for m in methods]
    return frame.assign(
        **{
            c: [as_uploaded(r[c]) for r in rows]
            for c in ("engine_profile", "hardware_profile", "acceptance_source")
        }
    )


def results_csv(summary: pd.DataFrame, inp: ExplorerInputs) -> str:
    """The results with the scenario first and, per row, what it ran with and whose acceptance
    it rests on (the sweep CSV's provenance columns)."""
    frame = with_provenance(summary, inp, list(summary.method))
    return with_scenario(frame, inp).to_csv(index=False, float_format="%.6g")


def schedule_csv(
    table: pd.DataFrame, inp: ExplorerInputs, method: str, precision_target: float = 0.0
) -> str:
    """The recommend table (speedup per K per concurrency) with the scenario and the method's
    tree settings; K is the table's own axis. Under a ``precision_target`` the run length is
    the target's (each row's ``requests``), not the page's requests and turnovers."""
    settings = method_settings(inp, method)
    head = {"method": method, "tree": settings["tree"], "tree_nodes": settings["tree_nodes"]}
    out = with_provenance(table.copy(), inp, [method] * len(table))
    for i, (key, value) in enumerate(head.items()):
        out.insert(i, key, value)
    # recommend runs closed loops whatever the page's load (QA: a QPS page wrote arrival=poisson)
    out = with_scenario(out, inp, settings=False).assign(arrival="closed")
    if precision_target:
        at = list(out.columns).index("requests_min")
        out = out.drop(columns=["requests_min", "turnovers"])
        out.insert(at, "precision_target", precision_target)
    return out.to_csv(index=False, float_format="%.6g")


# the closed loop's columns of the scenario, which a plan's Poisson probes do not read
CLOSED_LOOP_COLUMNS = ("arrival", "requests_min", "turnovers")


def plan_csv(
    frame: pd.DataFrame,
    inp: ExplorerInputs,
    target_qps: float,
    slo: Slo,
    gpu_hour_price: float,
    probe_s: float,
) -> str:
    """The capacity plan (:func:`simspec.ui.runs.plan`) with the scenario, what it was
    planned for (the target rate, the SLOs and the GPU-hour price its cost is at), how it
    probed (Poisson arrivals for ``probe_s`` seconds a probe: the page's closed-loop columns
    do not apply) and each method's provenance (QA: the price and provenance were missing)."""
    methods = [str(m).split(" ")[0] for m in frame.method]
    out = with_scenario(with_provenance(frame, inp, methods), inp)
    out = out.drop(columns=[c for c in CLOSED_LOOP_COLUMNS if c in out.columns])
    out = out.assign(
        target_qps=target_qps,
        slo_ttft_ms=slo.ttft_ms,
        slo_tpot_ms=slo.tpot_ms,
        # which percentile the SLO columns hold, as simspec plan --out says (QA)
        percentile=slo.percentile,
        gpu_hour_price=gpu_hour_price,
        probe_arrival="poisson",
        probe_duration_s=probe_s,
    )
    return out.to_csv(index=False, float_format="%.6g")


def spread_label(inp: ExplorerInputs) -> float | str:
    """The τ spread a download states: the page's number, or where each method took its
    drafter's and domain's measured one, that said."""
    return MEASURED_SPREAD if inp.spread is None else inp.spread


MEASURED_SPREAD = "each method's drafter and domain, as the packaged traces measured it"
