"""A simulated run's metrics as the engines' serving benchmarks define them, so a prediction
and a measurement are the same statistic of the same requests.

vLLM's ``calculate_metrics`` (vllm/benchmarks/serve.py, commit 009e6d4a; SGLang's
bench_serving.py computes the same) over every successful request: TTFT from the request's
send to its first token; TPOT ``(latency - ttft) / (output tokens - 1)`` over requests of more
than one token; ITL every gap between streamed chunks; E2E latency from send to the last token;
the mean, ``np.median`` and ``np.percentile`` (linear interpolation) of each; throughputs over
the benchmark's duration, to the last token from the first send (SGLang) or from the start,
the first request's drawn delay before it (vLLM, whose arrivals are rescaled to end at
requests / rate: ``WorkloadConfig.arrivals_end_at_rate``).

A decoding sequence waits one iteration between chunks (a speculative step streams its
accepted tokens as one chunk), so the simulated ITLs are the iterations' durations, each
counted once per sequence decoding in it. SGLang's ``bench_serving`` splits each chunk's gap
over the tokens it carries instead (``adjust_itl = chunk_gap / num_new_tokens``,
``output.itl.extend([adjust_itl] * num_new_tokens)``, python/sglang/bench_serving.py): with
``per_token_itl`` each iteration's gap counts once per token its decodes emitted, divided by
their mean chunk (its mean ITL exact; its percentiles take every sequence's chunk in an
iteration at that mean).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simspec.engine.metrics import token_gaps
from simspec.engine.simulation import SimResult

if TYPE_CHECKING:
    import pandas as pd


def simulated_metrics(
    sim: SimResult, percentiles: tuple[float, ...] = (), per_token_itl: bool = False
) -> dict[str, float]:
    """Every metric of :data:`~simspec.studies.bench.measured.METRICS`, and ``duration_s``
    (NaN where no request defines one: TPOT when every output is one token); with
    ``percentiles``, each latency's ``p<q>`` too (``p90_ttft_ms``, as vLLM names them);
    ``per_token_itl``: ITL as SGLang's bench_serving counts it, one gap share per token."""
    q = sim.requests[~sim.requests["unfinishable"]]
    ttft = (q["first_token_s"] - q["arrival_s"]).to_numpy()
    e2e = (q["finish_s"] - q["arrival_s"]).to_numpy()
    multi = q[q["output_tokens"] > 1]
    tpot = ((multi["finish_s"] - multi["first_token_s"]) / (multi["output_tokens"] - 1)).to_numpy()
    it = sim.iterations
    # vLLM times from its start, before the first (drawn, rescaled) delay; SGLang from its
    # first send, which leaves at once (its gaps come after each request)
    start = 0.0 if sim.scenario.workload.arrivals_end_at_rate else sim.requests["arrival_s"].min()
    duration = float(q["finish_s"].max() - start) if len(q) else 0.0
    out = {"duration_s": duration}
    for name, values in (("ttft", ttft), ("tpot", tpot), ("e2el", e2e)):
        out.update(_stats(name, values, np.ones(len(values)), percentiles))
    if len(it):
        gaps, weights = token_gaps(
            it["duration_s"].to_numpy(), it["decode_seqs"].to_numpy(), it["waiting_seqs"].to_numpy()
        )
        if per_token_itl and len(gaps):
            gaps, weights = _per_token(it, gaps, weights)
        out.update(_stats("itl", gaps, weights, percentiles))
    else:
        out.update(_stats("itl", np.zeros(0), np.zeros(0), percentiles))
    rate = 1.0 / duration if duration > 0 else float("nan")
    out["output_throughput_tok_s"] = float(q["output_tokens"].sum()) * rate
    out["request_throughput_req_s"] = len(q) * rate
    return out


def _per_token(
    it: pd.DataFrame, gaps: np.ndarray, seqs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The decoding iterations' gaps (``token_gaps``) as SGLang's per-token ITL: each
    sequence's chunk of m tokens gives m entries of gap / m, so an iteration whose ``seqs``
    decoders emitted ``tokens`` gives ``tokens`` entries of gap x seqs / tokens (a speculative
    decoder emits its accepted tokens and the bonus, any other one token)."""
    decoding = it["decode_seqs"].to_numpy() > 0
    spec_tokens = it["spec_tokens"].to_numpy()[decoding]
    spec_seqs = it["spec_seqs"].to_numpy()[decoding]
    tokens = spec_tokens + (seqs - spec_seqs)
    return gaps * seqs / np.maximum(tokens, 1), tokens


def _stats(
    name: str, values: np.ndarray, weights: np.ndarray, percentiles: tuple[float, ...] = ()
) -> dict[str, float]:
    """Mean, median, 99th and the other ``percentiles`` in ms of ``values`` (seconds), each
    counted ``weights`` times; linear interpolation between order statistics, as
    ``np.percentile`` draws them for the benchmarks."""
    keep = weights > 0
    values, weights = values[keep], weights[keep].astype(np.int64)
    named = {f"p{q:g}": q for q in percentiles} | {"median": 50.0, "p99": 99.0}
    if not len(values):
        return {f"{s}_{name}_ms": float("nan") for s in ("mean", *named)}
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    out = {f"mean_{name}_ms": 1e3 * float(np.average(values, weights=weights))}
    for stat, q in named.items():
        out[f"{stat}_{name}_ms"] = 1e3 * _repeated_percentile(values, weights, q)
    return out


def _repeated_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """``np.percentile(np.repeat(values, weights), q)`` for sorted ``values``, without
    building the repeated array (a long run decodes millions of sequence-steps)."""
    total = int(weights.sum())
    pos = (total - 1) * q / 100.0
    lo, frac = int(np.floor(pos)), pos - np.floor(pos)
    ends = np.cumsum(weights)  # order statistic j is values[searchsorted(ends, j, "right")]
    at = np.searchsorted(ends, [lo, min(lo + 1, total - 1)], side="right")
    a, b = float(values[at[0]]), float(values[at[1]])
    return a + (b - a) * frac
