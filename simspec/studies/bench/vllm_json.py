"""``vllm bench serve --save-result`` JSON (one object; ``--append-result`` adds one per line),
read as a :class:`MeasuredRun`, and a simspec run written in the same format.

The format, as vllm-project/vllm writes it in vllm/benchmarks/serve.py (commit 009e6d4a,
functions ``benchmark`` and ``main_async``; the same keys since v0.10, the version the
GPUStack performance-lab pages ran as v0.11.0):

- the traffic: ``num_prompts``, ``request_rate`` (a number, or the string ``"inf"``),
  ``burstiness`` (gamma shape of the gaps, 1 = Poisson), ``max_concurrency`` (null: no cap),
  ``model_id``;
- the totals: ``completed``, ``duration`` (s), ``total_input_tokens``, ``total_output_tokens``,
  ``request_throughput`` (req/s), ``output_throughput`` (tok/s);
- per metric of ``--percentile-metrics`` (default ttft,tpot,itl): ``mean_X_ms``,
  ``median_X_ms``, ``std_X_ms`` and ``pNN_X_ms`` per ``--metric-percentiles`` (default 99);
- with ``--save-detailed``: ``input_lens``, ``output_lens`` (0 for a failed request), ``ttfts``,
  ``itls``, ``start_times``, ``generated_texts``, ``errors``, one entry per request;
- on a server with speculative decoding (its /metrics read before and after):
  ``spec_decode_acceptance_length`` and ``spec_decode_per_position_acceptance_rates`` (accepted
  tokens at each draft position per draft);
- ``--metadata KEY=VALUE`` adds each key to the result as text: simspec reads ``gpu`` (the
  GPU the server ran on), so runs of different GPUs are not calibrated together.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from simspec.engine.simulation import SimResult
from simspec.errors import InputError
from simspec.studies.bench.measured import (
    METRICS,
    Acceptance,
    MeasuredRun,
    check_count,
    check_number,
    check_run,
    concurrency,
    consistent,
    count,
    listed_lengths,
    number,
    other_percentiles,
    per_position,
    rate,
)
from simspec.studies.bench.simulated import simulated_metrics

KIND = "vllm-json"
# vLLM's throughput keys, by the names simspec's comparison gives them
THROUGHPUT_KEYS = {
    "output_throughput_tok_s": "output_throughput",
    "request_throughput_req_s": "request_throughput",
}


def is_vllm_result(data: dict[str, Any]) -> bool:
    """Whether a result object is vLLM's (SGLang's bench_serving writes E2E latency as
    ``mean_e2e_latency_ms`` and a retokenized count; vLLM writes neither)."""
    return not ({"mean_e2e_latency_ms", "total_output_tokens_retokenized"} & set(data))


def read_vllm_result(data: Any, name: str, where: str) -> MeasuredRun:
    """One ``--save-result`` object as a measured run (``where`` names it in errors)."""
    if not isinstance(data, dict):
        raise InputError(where, "must hold a JSON object (vllm bench serve --save-result)")
    other = _other_benchmark(data)
    if other is not None:  # QA: named "completed: missing (a truncated ... file?)"
        raise InputError(
            where,
            f"is a {other} result, not a serving benchmark's: simspec compares vllm bench "
            "serve --save-result runs (TTFT, TPOT, ITL and throughput of served requests)",
        )
    if data.get("ramp_up_strategy") is not None:
        # vllm bench serve --ramp-up-strategy sends at a rate that climbs from
        # ramp_up_start_rps to ramp_up_end_rps and writes request_rate "inf" (serve.py
        # main_async requires it): read as a burst, the load was wrong by ~8x (QA)
        raise InputError(
            f"{where}: ramp_up_strategy",
            f"the run ramped its request rate ({data['ramp_up_strategy']}, "
            f"{data.get('ramp_up_start_rps')} to {data.get('ramp_up_end_rps')} requests/s), "
            "which simspec does not simulate: compare a run at a fixed --request-rate or "
            "--max-concurrency",
        )
    completed = count(data, "completed", where)
    metrics = {m: check_number(data[m], m, where) for m in METRICS if data.get(m) is not None}
    for ours, key in other_percentiles(data).items():  # --metric-percentiles beyond 50,99
        if data[key] is not None:
            metrics[ours] = check_number(data[key], key, where)
    for ours, theirs in THROUGHPUT_KEYS.items():
        if data.get(theirs) is not None:
            metrics[ours] = check_number(data[theirs], theirs, where)
    duration = number(data, "duration", where, positive=True)
    total_in = count(data, "total_input_tokens", where, most=2**62)
    total_out = count(data, "total_output_tokens", where, most=2**62)
    ins, outs = listed_lengths(data, where, completed, total_in, total_out)
    model = data.get("model_id")
    run = MeasuredRun(
        name=name,
        kind=KIND,
        requests=completed,
        duration_s=duration,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        max_concurrency=concurrency(data.get("max_concurrency"), "max_concurrency", where),
        request_rate=rate(data.get("request_rate", "inf"), "request_rate", where),
        burstiness=check_number(data.get("burstiness", 1.0), "burstiness", where, positive=True),
        model=model if isinstance(model, str) and model else None,
        gpu=_label(data.get("gpu")),
        input_lens=ins,
        output_lens=outs,
        metrics=metrics,
        acceptance=_acceptance(data, where),
        failed=_failed(data, completed, where),
    )
    return check_run(run, where)


def _failed(data: dict[str, Any], completed: int, where: str) -> int:
    """The requests sent that did not complete: the file's ``failed``, or where it has none
    (vLLM wrote it from v0.11.1; its printed "Failed requests" line came then too) the
    prompts sent less those completed (QA: 30 of 100 failed read as none, the throughput
    predicted 30 % high)."""
    if data.get("failed"):
        return check_count(data["failed"], "failed", where)
    sent = data.get("num_prompts")
    if "failed" in data or sent is None:
        return 0
    sent = check_count(sent, "num_prompts", where)
    if sent < completed:
        raise InputError(f"{where}: num_prompts", f"{sent} is below completed ({completed})")
    return sent - completed


def _other_benchmark(data: dict[str, Any]) -> str | None:
    """The vLLM benchmark a JSON object comes from when it is not ``vllm bench serve``:
    ``vllm bench throughput`` writes elapsed_time, requests_per_second and
    tokens_per_second; ``vllm bench latency`` avg_latency and latencies (their
    --output-json)."""
    if "completed" in data:
        return None
    if {"requests_per_second", "tokens_per_second"} <= set(data):
        return "vllm bench throughput"
    if "avg_latency" in data or "latencies" in data:
        return "vllm bench latency"
    return None


def _label(value: Any) -> str | None:
    """A ``--metadata KEY=VALUE`` label: vLLM stores the value as text."""
    if not isinstance(value, str):
        return None
    return value.strip()[:100] or None


def _acceptance(data: dict[str, Any], where: str) -> Acceptance | None:
    rates = data.get("spec_decode_per_position_acceptance_rates")
    length = data.get("spec_decode_acceptance_length")
    if rates is None and length is None:
        return None
    if not rates and length is None:  # the fields written, but empty: no counters to read
        raise InputError(
            f"{where}: spec_decode_acceptance_length",
            "null, and spec_decode_per_position_acceptance_rates empty: the run's speculative "
            "counters say nothing (drop both fields, or give the run's values)",
        )
    acc = Acceptance(
        per_position=per_position(rates or [], "spec_decode_per_position_acceptance_rates", where),
        length=(
            check_number(length, "spec_decode_acceptance_length", where)
            if length is not None
            else None
        ),
        source=f"{where}: the server's speculative-decoding counters over the run",
        drafted_steps_only=True,
        drafts=_drafts(data.get("spec_decode_num_drafts")),
    )
    return consistent(acc, where)


def _drafts(value: Any) -> float | None:
    """``spec_decode_num_drafts`` as a positive count, else None (pooling then weights by
    output tokens)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def vllm_result(sim: SimResult, detailed: bool = False) -> dict[str, Any]:
    """A simspec run as ``vllm bench serve --save-result`` writes one (``--save-detailed``
    adds the per-request lengths and times), its metrics by vLLM's definitions
    (:func:`~simspec.studies.bench.simulated.simulated_metrics`). A simulated run keeps no
    per-token times, so a detailed file has no ``itls``."""
    wl = sim.scenario.workload
    predicted = simulated_metrics(sim)
    ok = sim.requests[~sim.requests["unfinishable"]]
    duration = predicted["duration_s"]
    out: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "simspec",
        "backend": "simspec",
        "label": None,
        "model_id": sim.scenario.model,
        "tokenizer_id": sim.scenario.model,
        "num_prompts": len(sim.requests),
        "request_rate": wl.rate if wl.arrival == "poisson" else "inf",
        "burstiness": 1.0,
        "max_concurrency": wl.concurrency if wl.arrival == "closed" else None,
        "duration": duration,
        "completed": len(ok),
        "failed": len(sim.requests) - len(ok),
        "total_input_tokens": int(ok["prompt_tokens"].sum()),
        "total_output_tokens": int(ok["output_tokens"].sum()),
        "request_throughput": predicted["request_throughput_req_s"],
        "request_goodput": None,
        "output_throughput": predicted["output_throughput_tok_s"],
        "total_token_throughput": (ok["prompt_tokens"].sum() + ok["output_tokens"].sum())
        / duration,
    }
    for metric in METRICS:
        if metric in predicted and metric.endswith("_ms"):
            out[metric] = predicted[metric]
    if detailed:
        out["input_lens"] = [int(v) for v in ok["prompt_tokens"]]
        out["output_lens"] = [int(v) for v in ok["output_tokens"]]
        out["ttfts"] = [float(v) for v in ok["first_token_s"] - ok["arrival_s"]]
        out["latencies"] = [float(v) for v in ok["finish_s"] - ok["arrival_s"]]
        out["start_times"] = [float(v) for v in ok["arrival_s"]]
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}
