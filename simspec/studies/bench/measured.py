"""A measured serving-benchmark run, whichever engine's benchmark wrote it: the seam between the
readers (one module per result format) and ``simspec compare``.

Metric names are vLLM's result keys (``mean_tpot_ms``, ``p99_ttft_ms``, ...), end-to-end latency
as ``e2el``; the two throughputs carry their unit (``output_throughput_tok_s``,
``request_throughput_req_s``). A run keeps only the metrics its file states: a reader never
fills one in.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from simspec.config import MAX_CONCURRENCY, MAX_REQUESTS
from simspec.errors import InputError

LATENCIES = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "median", "p99")
THROUGHPUTS = ("output_throughput_tok_s", "request_throughput_req_s")
METRICS = tuple(f"{s}_{m}_ms" for m in LATENCIES for s in STATS) + THROUGHPUTS
# other percentiles a run may state (vllm bench serve --metric-percentiles 90,95 writes
# p90_ttft_ms, ...; SGLang's bench_serving writes p95_itl_ms): compared too, after METRICS
_PERCENTILE = re.compile(r"p(\d{1,2}(?:\.\d{1,3})?)")


def percentile_of(stat: str) -> float | None:
    """The percentile a stat label names (``p90``, ``P95`` → 90.0, 95.0); None for another
    label or one outside (0, 100)."""
    hit = _PERCENTILE.fullmatch(stat.lower())
    q = float(hit.group(1)) if hit else math.nan
    return q if 0 < q < 100 else None


def other_percentiles(keys: Any, theirs: dict[str, str] | None = None) -> dict[str, str]:
    """simspec's name -> the file's key of each latency percentile beyond METRICS among
    ``keys`` (``p90_ttft_ms``; ``theirs`` maps a latency to the file's name of it, SGLang's
    ``e2e_latency``)."""
    names = {(theirs or {}).get(lat, lat): lat for lat in LATENCIES}
    out = {}
    for key in keys:
        stat, _, rest = str(key).partition("_")
        latency = names.get(rest.removesuffix("_ms")) if rest.endswith("_ms") else None
        q = percentile_of(stat)
        # named as the simulated one is (p90, p5), whatever the file's spelling (QA: P90,
        # p90.0 and p05 were compared with no prediction beside them)
        ours = f"p{q:g}_{latency}_ms" if q is not None else ""
        if latency is not None and q is not None and ours not in METRICS:
            out[ours] = str(key)
    return out


def ordered(metrics: Any) -> list[str]:
    """``metrics`` (names) in report order: METRICS', then other percentiles by latency and
    percentile."""
    extra = [m for m in metrics if m not in METRICS]

    def key(name: str) -> tuple[int, float]:
        stat, latency = name.split("_", 2)[:2]
        return LATENCIES.index(latency), percentile_of(stat) or 0.0

    return [m for m in METRICS if m in metrics] + sorted(extra, key=key)


# A benchmark's per-request lists hold one entry per request and its draft positions one per
# speculative token: the bounds a run is simulated with (config.MAX_REQUESTS requests,
# MethodConfig.k <= 64 draft tokens).
MAX_POSITIONS = 64
MAX_TOKENS_PER_REQUEST = 10_000_000  # 10x the longest context of any preset (1M tokens)


@dataclass(frozen=True)
class Acceptance:
    """What a speculative run measured: ``per_position[i]`` is the share of drafts whose token
    i was accepted (vLLM's num_accepted_tokens_per_pos / num_drafts: non-increasing, since a
    chain stops at its first rejection), and ``length`` the mean tokens per step, bonus
    included (vLLM's acceptance length, SGLang's accept_length)."""

    per_position: tuple[float, ...] = ()
    length: float | None = None
    source: str = ""
    # counted over the steps that drafted alone: vLLM records spec-decode stats only for a
    # step with draft tokens scheduled (Scheduler.update_from_output, "if
    # scheduled_spec_token_ids and generated_token_ids"); SGLang's accept_length counts every
    # verify step
    drafted_steps_only: bool = False
    # the drafts the counters counted (vLLM's spec_decode_num_drafts), which pooling weights
    # each run's shares by; None where the file does not say
    drafts: float | None = None

    def conditional(self) -> list[float]:
        """Per-position acceptance as simspec's α (token i accepted given tokens before it
        were): each position's share over the one before it."""
        out, before = [], 1.0
        for rate in self.per_position:
            out.append(min(1.0, rate / before) if before > 0 else 0.0)
            before = rate
        return out


@dataclass(frozen=True)
class MeasuredRun:
    """One benchmark run: its workload (requests, client concurrency or request rate, prompt
    and output lengths) and what it measured."""

    name: str  # where it came from, as messages and tables name it
    kind: str  # the format it was read from: vllm-json, vllm-text, sglang-jsonl, sglang-text
    requests: int  # successful requests
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    max_concurrency: int | None = None  # None: no client-side cap
    request_rate: float = math.inf  # requests/s the client sent at; inf: all at once
    burstiness: float = 1.0  # vLLM's gamma shape of the gaps (1: Poisson)
    model: str | None = None
    # the GPU the file says the server ran on (vllm bench serve --metadata gpu=...: vLLM
    # writes each KEY=VALUE into the result); None where it says nothing
    gpu: str | None = None
    input_lens: tuple[int, ...] | None = None  # per request (--save-detailed), successful ones
    output_lens: tuple[int, ...] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    acceptance: Acceptance | None = None
    failed: int = 0  # requests the benchmark sent that failed (vllm bench serve's "failed")
    # whether its ITLs are one per token (a chunk's gap split over its tokens) rather than one
    # per streamed chunk; None: as the format's tool records them (per_token_itl)
    itl_per_token: bool | None = None

    @property
    def per_token_itl(self) -> bool:
        """SGLang's bench_serving splits a chunk's gap over its tokens (its own default, the
        text printouts' tool); vllm bench serve records one ITL per chunk."""
        if self.itl_per_token is not None:
            return self.itl_per_token
        return self.kind.startswith("sglang")

    @property
    def detailed(self) -> bool:
        return self.input_lens is not None and self.output_lens is not None

    @property
    def mean_input_len(self) -> float:
        return self.total_input_tokens / self.requests

    @property
    def mean_output_len(self) -> float:
        return self.total_output_tokens / self.requests

    @property
    def closed(self) -> bool:
        """Sent as fast as the client's cap lets (request rate inf): a closed loop."""
        return math.isinf(self.request_rate)

    @property
    def load(self) -> float:
        """The x of a load curve: the concurrency of a closed loop (every request at once
        without a cap), else the request rate."""
        if self.closed:
            return float(self.max_concurrency or self.requests)
        return self.request_rate

    @property
    def load_label(self) -> str:
        if self.closed:
            if self.max_concurrency is None:
                return f"burst of {self.requests}"
            if self.max_concurrency > self.requests:  # the cap never binds (QA)
                return f"concurrency {self.max_concurrency} (all {self.requests} in flight)"
            return f"concurrency {self.max_concurrency}"
        cap = f", concurrency <= {self.max_concurrency}" if self.max_concurrency else ""
        return f"rate {self.request_rate:g}/s{cap}"


# -- checks every reader applies to a field, each failure one InputError naming it ------------
def number(data: dict[str, Any], key: str, where: str, *, positive: bool = False) -> float:
    """``data[key]`` as a finite number >= 0 (> 0 if ``positive``): a bool, a string, NaN or
    infinity is refused by the key's name."""
    if key not in data:
        raise InputError(f"{where}: {key}", "missing (a truncated or hand-edited result file?)")
    return check_number(data[key], key, where, positive=positive)


def check_number(value: Any, key: str, where: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{where}: {key}", f"must be a finite number, got {_short(value)}")
    if value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        raise InputError(f"{where}: {key}", f"must be {bound}, got {value!r}")
    return float(value)


def count(
    data: dict[str, Any], key: str, where: str, *, least: int = 0, most: int = MAX_REQUESTS
) -> int:
    """``data[key]`` as a whole number in [least, most]."""
    if key not in data:
        raise InputError(f"{where}: {key}", "missing (a truncated or hand-edited result file?)")
    return check_count(data[key], key, where, least=least, most=most)


def check_count(
    value: Any, key: str, where: str, *, least: int = 0, most: int = MAX_REQUESTS
) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
        raise InputError(
            f"{where}: {key}", f"must be a whole number in [{least}, {most:,}], got {_short(value)}"
        )
    return value


def concurrency(value: Any, key: str, where: str) -> int | None:
    """A client's concurrency cap: None (not set), else 1 .. :data:`MAX_CONCURRENCY`."""
    if value is None:
        return None
    return check_count(value, key, where, least=1, most=MAX_CONCURRENCY)


def rate(value: Any, key: str, where: str) -> float:
    """A request rate: ``"inf"`` (vLLM writes it so), infinity (SGLang's json.dumps writes
    ``Infinity``) or a positive number."""
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(value, float) and math.isinf(value) and value > 0:
        return math.inf
    if isinstance(value, str) and value.strip().lower() == "trace":
        # SGLang bench_serving --use-trace-timestamps (QA: refused as "must be a finite number")
        raise InputError(
            f"{where}: {key}",
            "'trace': the run replayed a trace's own timestamps, which simspec cannot read "
            "from the result; replay the trace itself (simspec fleet --trace) instead",
        )
    return check_number(value, key, where, positive=True)


def lengths(values: Any, key: str, where: str, least: int) -> list[int]:
    """A per-request list of token counts."""
    if not isinstance(values, list):
        raise InputError(f"{where}: {key}", f"must be a list of token counts, got {_short(values)}")
    if len(values) > MAX_REQUESTS:
        raise InputError(
            f"{where}: {key}",
            f"holds {len(values):,} requests; a run simulates at most {MAX_REQUESTS:,}",
        )
    for i, v in enumerate(values):
        if type(v) is not int or not least <= v <= MAX_TOKENS_PER_REQUEST:
            raise InputError(
                f"{where}: {key}[{i}]",
                f"must be a whole number in [{least}, {MAX_TOKENS_PER_REQUEST:,}], got {_short(v)}",
            )
    return values


def per_position(values: Any, key: str, where: str) -> tuple[float, ...]:
    """Per-position acceptance shares in [0, 1], at most :data:`MAX_POSITIONS` of them."""
    if not isinstance(values, list) or len(values) > MAX_POSITIONS:
        raise InputError(
            f"{where}: {key}",
            f"must be a list of at most {MAX_POSITIONS} shares in [0, 1], got {_short(values)}",
        )
    out = []
    for i, v in enumerate(values):
        share = check_number(v, f"{key}[{i}]", where)
        if share > 1:
            raise InputError(f"{where}: {key}[{i}]", f"must be a share in [0, 1], got {v!r}")
        out.append(share)
    return tuple(out)


def listed_lengths(
    data: dict[str, Any], where: str, completed: int, total_in: int, total_out: int
) -> tuple[tuple[int, ...] | None, ...]:
    """The per-request lengths of a detailed result (vllm bench serve --save-detailed, SGLang
    bench_serving --output-details), successful requests only (a failed one is listed with 0
    output tokens); (None, None) without them. Refused where they are not the run's: both
    benchmarks list every request sent (input_lens from each one's prompt, output_lens 0 for a
    failed one) and sum the totals from the same lists (vllm/benchmarks/serve.py and
    sglang/bench_serving.py calculate_metrics: total_output = sum(output_lens), total_input +=
    the prompt length of each success)."""
    if data.get("input_lens") is None or data.get("output_lens") is None:
        return None, None
    ins = lengths(data["input_lens"], "input_lens", where, least=0)
    outs = lengths(data["output_lens"], "output_lens", where, least=0)
    if len(ins) != len(outs):
        raise InputError(
            f"{where}: output_lens",
            f"{len(outs)} entries for {len(ins)} input_lens: one per request in each",
        )
    kept = [(i, o) for i, o in zip(ins, outs, strict=True) if i >= 1 and o >= 1]
    if not kept:
        raise InputError(f"{where}: output_lens", "no request with a prompt and an output")
    # QA: lists of another run (or cut short) were simulated against these totals
    if len(outs) < completed:
        raise InputError(
            f"{where}: output_lens",
            f"{len(outs)} entries, but completed is {completed}: the lists hold every request",
        )
    if sum(outs) != total_out:
        raise InputError(
            f"{where}: output_lens",
            f"sum {sum(outs):,}, but total_output_tokens is {total_out:,}: the total is their sum",
        )
    low, high = sum(i for i, _ in kept), sum(ins)
    if not low <= total_in <= high:
        raise InputError(
            f"{where}: input_lens",
            f"the successful requests' prompts sum to {low:,} (all listed: {high:,}), but "
            f"total_input_tokens is {total_in:,}: the total is the successful ones' sum",
        )
    return tuple(i for i, _ in kept), tuple(o for _, o in kept)


def check_run(run: MeasuredRun, where: str) -> MeasuredRun:
    """The checks that need the whole run: a successful request, and a token in every prompt
    and every output (the totals divided by the requests are the lengths simulated)."""
    if run.requests < 1:
        raise InputError(f"{where}: completed", "no successful request to compare with")
    if run.total_input_tokens < run.requests:
        raise InputError(
            f"{where}: total_input_tokens",
            f"{run.total_input_tokens} for {run.requests} requests: every prompt has a token",
        )
    if run.total_output_tokens < run.requests:
        raise InputError(
            f"{where}: total_output_tokens",
            f"{run.total_output_tokens} for {run.requests} requests: every request that "
            "succeeded generated a token",
        )
    # the benchmark computes both throughputs from the totals over its duration (vllm bench
    # serve and SGLang's bench_serving: sum(output_lens) / dur_s, completed / dur_s): one that
    # disagrees with them is another run's, or hand-edited (QA: 10x compared without a word)
    for key, theirs, total in (
        ("output_throughput_tok_s", "output_throughput", run.total_output_tokens),
        ("request_throughput_req_s", "request_throughput", run.requests),
    ):
        given = run.metrics.get(key)
        implied = total / run.duration_s
        if given is not None and abs(given - implied) > THROUGHPUT_SLACK * implied:
            raise InputError(
                f"{where}: {theirs}",
                f"{given:g}, but the run's own totals give {total:,} / {run.duration_s:g} s = "
                f"{implied:.4g}: both come from one run",
            )
    return run


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# printed rates and lengths are rounded: 1 + sum(rates) may miss the length by this much
LENGTH_SLACK = 0.02
# a printed duration and throughput are rounded to 2 decimals: a short run's may differ so
THROUGHPUT_SLACK = 0.02


def consistent(
    acc: Acceptance,
    where: str,
    key: str = "spec_decode_per_position_acceptance_rates",
    length_key: str = "spec_decode_acceptance_length",
) -> Acceptance:
    """The run's acceptance, refused where vLLM's own counters could not have produced it: a
    chain accepts token i only after token i-1, so the per-position rates never rise, and both
    fields count the same accepted tokens, so the length is 1 + the rates' sum (vllm bench
    serve, vllm/benchmarks/serve.py in the 0.34.0 wheel: acceptance_length = 1 +
    delta_accepted / delta_drafts, each rate delta_pos / delta_drafts). ``key`` and
    ``length_key`` name the two fields as the input spells them."""
    rates = acc.per_position
    for i in range(1, len(rates)):
        if rates[i] > rates[i - 1] + 1e-9:
            raise InputError(
                f"{where}: {key}[{i}]",
                f"{rates[i]:g} above position {i - 1}'s {rates[i - 1]:g}: a draft's token is "
                "accepted only after the one before it, so the rates never rise",
            )
    if rates and acc.length is not None:
        implied = 1.0 + sum(rates)
        if abs(implied - acc.length) > LENGTH_SLACK * max(1.0, acc.length):
            raise InputError(
                f"{where}: {length_key}",
                f"{acc.length:g}, but the per-position rates give 1 + {sum(rates):g} = "
                f"{implied:g}: both count the same accepted tokens",
            )
    return acc
