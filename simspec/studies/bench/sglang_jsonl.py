"""SGLang ``bench_serving --output-file`` JSONL (one result object appended per run), read as
measured runs.

The keys, as sgl-project/sglang writes them in python/sglang/bench_serving.py (commit
0033168f, end of ``benchmark``): ``backend``, ``dataset_name``, ``request_rate`` (a number, or
``Infinity`` as ``json.dumps`` writes ``float("inf")``), ``max_concurrency`` (null: no cap),
``duration``, ``completed``, ``total_input_tokens``, ``total_output_tokens``,
``request_throughput``, ``output_throughput``, ``mean/median/p99_ttft_ms``,
``mean/median/p99_tpot_ms``, ``mean/median/p95/p99_itl_ms``, ``mean/median/p99_e2e_latency_ms``
and ``accept_length``: the server's ``avg_spec_accept_length`` (tokens per verify step, bonus
included; null without speculative decoding). ``--output-details`` adds ``input_lens``,
``output_lens``, ``ttfts``, ``itls``, one entry per request.
"""

from __future__ import annotations

from typing import Any

from simspec.errors import InputError
from simspec.studies.bench.measured import (
    LATENCIES,
    STATS,
    Acceptance,
    MeasuredRun,
    check_number,
    check_run,
    concurrency,
    count,
    listed_lengths,
    number,
    other_percentiles,
    rate,
)

KIND = "sglang-jsonl"
# SGLang's names where they differ from vLLM's (simspec's metric names are vLLM's)
_THEIRS = {"e2el": "e2e_latency"}
_THROUGHPUTS = {
    "output_throughput_tok_s": "output_throughput",
    "request_throughput_req_s": "request_throughput",
}


def read_sglang_result(data: Any, name: str, where: str) -> MeasuredRun:
    """One bench_serving result line as a measured run (``where`` names it in errors)."""
    if not isinstance(data, dict):
        raise InputError(where, "must hold a JSON object (sglang bench_serving --output-file)")
    metrics = {}
    for metric in LATENCIES:
        for stat in STATS:
            key = f"{stat}_{_THEIRS.get(metric, metric)}_ms"
            if data.get(key) is not None:
                metrics[f"{stat}_{metric}_ms"] = check_number(data[key], key, where)
    for ours, key in other_percentiles(data, _THEIRS).items():  # p95_itl_ms, ...
        if data[key] is not None:
            metrics[ours] = check_number(data[key], key, where)
    for ours, theirs in _THROUGHPUTS.items():
        if data.get(theirs) is not None:
            metrics[ours] = check_number(data[theirs], theirs, where)
    accept = data.get("accept_length")
    completed = count(data, "completed", where)
    duration = number(data, "duration", where, positive=True)
    total_in = count(data, "total_input_tokens", where, most=2**62)
    total_out = count(data, "total_output_tokens", where, most=2**62)
    # QA: lists none of whose requests could run fell back to the means without a word
    ins, outs = listed_lengths(data, where, completed, total_in, total_out)
    run = MeasuredRun(
        name=name,
        kind=KIND,
        requests=completed,
        duration_s=duration,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        max_concurrency=concurrency(data.get("max_concurrency"), "max_concurrency", where),
        request_rate=rate(data.get("request_rate", "inf"), "request_rate", where),
        input_lens=ins,
        output_lens=outs,
        metrics=metrics,
        acceptance=(
            Acceptance(
                length=check_number(accept, "accept_length", where, positive=True),
                source=f"{where}: accept_length (the server's avg_spec_accept_length)",
            )
            if accept is not None
            else None
        ),
        itl_per_token=_itl_per_token(data.get("backend"), accept),
    )
    return check_run(run, where)


# the backends bench_serving drives through async_request_sglang_generate, which splits each
# chunk's gap over its tokens ("output.itl.extend([adjust_itl] * num_new_tokens)": 0.5.0rc0
# and 0.5.5 wheels; 0.4.3 appended one gap per chunk, which a result line does not tell apart)
_PER_TOKEN_BACKENDS = ("sglang", "sglang-native")
# the OpenAI-API backends whose gaps calculate_metrics splits over a chunk's retokenized tokens
# under speculative decoding ("use_retokenized_itl": accept_length > 0 and backend in
# ("sglang-oai", "sglang-oai-chat"), 0.5.5 wheel; absent in 0.5.0rc0)
_RETOKENIZED_BACKENDS = ("sglang-oai", "sglang-oai-chat")


def _itl_per_token(backend: Any, accept: Any) -> bool:
    """Whether the line's ITLs are per token: by the backend it names (QA: a run against vLLM
    or an OpenAI endpoint, one gap per chunk, was scored against per-token predictions,
    off by the acceptance length)."""
    if not isinstance(backend, str):
        return True  # no backend written: bench_serving's default, "sglang"
    if backend in _PER_TOKEN_BACKENDS:
        return True
    speculative = isinstance(accept, int | float) and accept > 0
    return backend in _RETOKENIZED_BACKENDS and speculative
