"""Every input schema, once: what a user writes in a scenario file or on the command line.

Plain validated data (pydantic), no behaviour beyond checks: the catalog fills these from
presets, the engine reads them, the studies vary them. A field's ``description`` is also its
command-line help.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterable
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

# Size bounds, checked when a scenario is built (before any work): at the simulator's speed
# (benchmarks/README.md, "Size bounds") they keep a run to about ten minutes and a command (all
# its runs) to about twenty core-minutes.
MAX_CONCURRENCY = 16_384  # 16x vLLM's largest default max_num_seqs (1,024)
MAX_REQUESTS = 1_000_000  # requests in one run
MAX_TOTAL_REQUESTS = 2_000_000  # requests over every run of one command (sweep grid, recommend)
MAX_RUNS = 10_000  # runs in one command (grid points x methods x batch sizes)
# worker processes (or Ray tasks) one command starts: a process pool forks every worker up
# front, however few jobs it has (QA: --workers 100000 forked until the host stalled); 256 is
# the bound validate's --workers already had, now every command's
MAX_WORKERS = 256
MAX_QPS = 1e7  # plan's target arrival rate (requests/s over the whole fleet)
MAX_DURATION_S = 86_400.0  # plan's arrivals per probe: a day (probes also stop at 20,000 requests)
# The latency SLOs fleet, plan and the explorer take when none is given: a chat service's first
# token within 2 s, and then 20 tokens/s per stream (50 ms each), faster than people read.
# One pair, so that the page and the command line judge a deployment alike.
DEFAULT_SLO_TTFT_MS = 2000.0
DEFAULT_SLO_TPOT_MS = 50.0


def _utf8_text(cls: type, value: object) -> object:
    """Text that can be written out: a command-line byte that is not UTF-8 (``$'\\xff'``)
    reaches Python as a lone surrogate, which no CSV, JSON or table can hold."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("must be UTF-8 text") from None
    return value


_TEXT = field_validator("*")(_utf8_text)


def _types_in(annotation: Any) -> set[type]:
    """Every class an annotation names, through unions, Optional, lists and Annotated."""
    args = typing.get_args(annotation)
    if not args:
        return {annotation} if isinstance(annotation, type) else set()
    return set().union(*(_types_in(a) for a in args))


def _no_bool_number(cls: type[BaseModel], value: object, info: ValidationInfo) -> object:
    """A number field given true or false is refused: YAML reads ``k: true`` as True, and
    pydantic's lax mode reads True as 1 (QA: ``k: true`` ran K = 1, ``alpha: true`` alpha 1.0)."""
    name = info.field_name
    if name is None or name not in cls.model_fields:
        return value
    kinds = _types_in(cls.model_fields[name].annotation)
    numeric = bool(kinds & {int, float}) and bool not in kinds
    if numeric and _holds_bool(value):
        raise ValueError("true/false is not a number")
    return value


def _holds_bool(value: object) -> bool:
    """Whether a value is, or a list (of lists) holds, true or false."""
    if isinstance(value, list | tuple):
        return any(_holds_bool(v) for v in value)
    return isinstance(value, bool)


_NUMBERS = field_validator("*", mode="before")(_no_bool_number)


# the longest mean length (tokens) a workload draws
MAX_MEAN_LEN = 1e6


class LengthSpec(BaseModel):
    """A token-length distribution, rounded to the nearest integer and clipped to [min, max]
    (a fixed or lognormal draw: its mean is kept but for what the clip moves; a uniform one is
    an integer from low to high, each as likely). Floored, a lognormal lost half a token a
    request (mean 4 drew 3.59) and a fixed 98.5 ran 98 (QA)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _numbers = _NUMBERS
    dist: Literal["fixed", "uniform", "lognormal"] = "fixed"
    mean: float = Field(default=256.0, ge=1.0, le=MAX_MEAN_LEN)
    cv: float = Field(default=0.0, ge=0.0, le=10.0, description="lognormal: std / mean")
    low: float | None = Field(default=None, ge=1.0, description="uniform: lower bound")
    high: float | None = Field(default=None, ge=1.0, description="uniform: upper bound")
    min: int = Field(default=1, ge=1)
    max: int = Field(default=1_000_000, ge=1)

    @model_validator(mode="after")
    def _check(self) -> LengthSpec:
        if self.dist == "uniform" and (
            self.low is None or self.high is None or self.low > self.high
        ):
            raise ValueError("uniform lengths need low <= high")
        if self.dist == "uniform" and math.ceil(self.low or 0) > math.floor(self.high or 0):
            raise ValueError(f"uniform lengths need a whole number in [{self.low}, {self.high}]")
        if self.min > self.max:
            raise ValueError("min must be <= max")
        return self

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.dist == "fixed":
            x = np.rint(np.full(n, self.mean))
        elif self.dist == "uniform":
            assert self.low is not None and self.high is not None  # _check requires both
            # the whole numbers in [low, high], each as likely (QA: 1.5 to 2.5 drew 1 and 3)
            lo, hi = math.ceil(self.low), math.floor(self.high)
            x = np.floor(rng.uniform(lo, hi + 1.0, size=n))
        else:
            sigma2 = np.log1p(self.cv**2)
            x = np.rint(rng.lognormal(np.log(self.mean) - sigma2 / 2.0, np.sqrt(sigma2), size=n))
        return np.clip(x, self.min, self.max).astype(np.int64)


# The slowest Poisson rate a run accepts (requests/s): 100 requests then span ~1e8 s of
# simulated time, where float64 still resolves microseconds; at 1e-300 the gaps overflow float
# time and the run measures nothing (TPOT 0, NaN gains) yet exits 0. planning.max_rate bisects
# no lower than 0.25 / 2**12 = 6e-5.
MIN_RATE = 1e-6
# Requests a run measures by default (README "Measurement": closed-loop speedups then agree
# within 1 % with runs of 2,000 measured requests).
DEFAULT_MEASURED = 256
# ... and at least this many times the concurrency in a closed loop: the batch's composition
# (a few long requests, each request's own acceptance) wanders slowly, and a window of 64
# turnovers puts the run-to-run spread of a batch-64 speedup on ShareGPT at ~0.3 % (README).
DEFAULT_TURNOVERS = 64
# A closed-loop study's run length from the precision asked for (simspec.studies.to_precision,
# run_to_target): a relative half-width of the 95 % interval of what it reports. A sweep's
# default is +-2 %, what a decision between methods needs (their speedups differ by more): with
# the control variates (simspec.engine.controls) every speedup of the README's default sweep and
# of --methods all meets it at the floor (32 turnovers: simspec.engine.window) or one doubling;
# +-1 % stops more of them at the cap, the fixed 64 turnovers (benchmarks/README.md).
DEFAULT_PRECISION_TARGET = 0.02
# Tighter than +-0.1 % no study gets by default: at batch 1 on ShareGPT a speedup is known to
# +-7 % from 256 requests (EAGLE-3; n-gram +-12 %) and the half-width falls as 1/sqrt(n), so
# +-0.1 % would need ~1.25 million requests, past MAX_REQUESTS: every run would stop at its cap.
MIN_PRECISION_TARGET = 0.001
# Looser than +-50 % says nothing about a speedup (1.0x and 2.0x in one interval).
MAX_PRECISION_TARGET = 0.5


def check_precision_target(v: float) -> float:
    """``v`` if it is a precision target: 0 (a fixed length) or a relative half-width in
    [MIN_PRECISION_TARGET, MAX_PRECISION_TARGET]."""
    low, high = MIN_PRECISION_TARGET, MAX_PRECISION_TARGET
    if not (v == 0 or low <= v <= high):
        raise ValueError(
            f"must be 0 (a fixed length) or in [{low:g}, {high:g}] (a relative half-width: "
            "0.01 is +-1 %)"
        )
    return v


MAX_TRACE_S = 30 * 86_400.0  # an arrival trace's window and tiling horizon: a month of seconds
# an arrival replay's own fields, refused beside the other arrival modes
REPLAY_FIELDS = (
    "arrival_trace",
    "trace_start_s",
    "trace_end_s",
    "rate_scale",
    "target_qps",
    "tile_s",
)
# fields of the other modes; a replay refuses them (when not at their defaults)
NOT_FOR_REPLAY = (
    "concurrency",
    "rate",
    "rate_schedule",
    "requests",
    "warmup_requests",
    "lengths_from",
    "lengths_from_method",
    "prompt",
    "output",
    "turnovers",
)

# Older spellings a scenario file or a caller may still write (old name -> field), so files
# written for them keep loading. All three say "trace", which could mean a dataset's lengths, an
# arrival replay or recorded acceptance; the fields each say which.
WORKLOAD_RENAMED = {"trace": "lengths_from", "trace_output_method": "lengths_from_method"}
ACCEPTANCE_RENAMED = {"trace": "acc_len", "trace_method": "acc_len_method"}
ARRIVAL_RENAMED = {"trace": "replay"}


def renamed(data: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """``data`` with each older spelling in ``names`` under its field's name; giving both
    spellings of one field is an error naming both."""
    old = [name for name in names if name in data]
    if not old:
        return data
    out = {k: v for k, v in data.items() if k not in names}
    for name in old:
        if names[name] in data:
            raise ValueError(f"give {names[name]} or its older spelling {name}, not both")
        out[names[name]] = data[name]
    return out


def current_spellings(data: Any) -> Any:
    """A scenario file's mapping with every ``workload`` and ``acceptance`` section (wherever
    it sits: a scenario, a sweep's methods, a fleet's replicas) in the current field names, so
    that a flag setting a field replaces the file's value whichever spelling the file used."""
    if isinstance(data, list):
        return [current_spellings(v) for v in data]
    if not isinstance(data, dict):
        return data
    out = {k: current_spellings(v) for k, v in data.items()}
    for section, rename in (
        ("workload", _workload_spellings),
        ("acceptance", _acceptance_spellings),
    ):
        value = out.get(section)
        if isinstance(value, dict):
            try:
                out[section] = rename(value)
            except ValueError:
                pass  # both spellings: left for the schema to refuse, naming where
    return out


def _acceptance_spellings(data: dict[str, Any]) -> dict[str, Any]:
    return renamed(data, ACCEPTANCE_RENAMED)


def _workload_spellings(data: dict[str, Any]) -> dict[str, Any]:
    data = renamed(data, WORKLOAD_RENAMED)
    arrival = data.get("arrival")
    if isinstance(arrival, str) and arrival in ARRIVAL_RENAMED:
        return {**data, "arrival": ARRIVAL_RENAMED[arrival]}
    return data


def _parses(value: object) -> bool:
    """Whether ``value`` is a valid :class:`LengthSpec` (else its own field names the error)."""
    try:
        LengthSpec.model_validate(value)
    except ValueError:
        return False
    return True


class WorkloadConfig(BaseModel):
    """Arrivals (closed loop at fixed concurrency, Poisson, or a replayed arrival trace) and
    request lengths."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _text = _TEXT
    _numbers = _NUMBERS
    arrival: Literal["closed", "poisson", "replay"] = Field(
        default="closed",
        description="closed: N in flight, a finished one replaced at once; poisson: at rate; "
        "replay: replay arrival_trace's arrival times and lengths (older spelling: trace)",
    )
    concurrency: int = Field(default=1, ge=1, le=MAX_CONCURRENCY, description="closed loop: N")
    rate: float = Field(
        default=1.0, ge=MIN_RATE, le=1e6, description="poisson: requests per second"
    )
    rate_schedule: list[tuple[float, float]] | None = Field(
        default=None,
        description="poisson with a rate that changes over the run: [[start_s, rate], ...], "
        "piecewise constant from each start (the first at 0); replaces rate",
    )
    arrivals_end_at_rate: bool = Field(
        default=False,
        description="poisson: rescale the drawn arrival times so the last one comes at "
        "requests / rate, as `vllm bench serve` sends them (get_request's normalize_factor, "
        "vllm/benchmarks/serve.py: the run's length, so its throughput, does not swing with "
        "the seed); SGLang's bench_serving sends the drawn gaps as they are",
    )
    requests: int | None = Field(
        default=None,
        ge=1,
        le=MAX_REQUESTS,
        description="requests measured in the steady window (warm-up and tail requests are "
        f"simulated around them); default max({DEFAULT_MEASURED}, 4 x concurrency); a closed "
        "loop measures at least turnovers x concurrency whatever is given (turnovers 0: "
        "exactly this many); in a sweep, a fixed length instead of its precision_target",
    )
    turnovers: int = Field(
        default=DEFAULT_TURNOVERS,
        ge=0,
        le=1024,
        description="closed loop: measure at least this many x concurrency requests (the "
        "batch's mix of long and short, easy and hard requests must turn over many times); "
        "in a sweep, a fixed length instead of its precision_target",
    )
    measure: Literal["steady", "whole"] = Field(
        default="steady",
        description="steady: the steady-state window (README: Measurement); whole: every "
        "request from an empty engine to the last departure, no warm-up or tail (a transient "
        "study, or a check that a run replays each trace record exactly once)",
    )
    warmup_requests: int | None = Field(
        default=None,
        ge=0,
        le=MAX_REQUESTS,
        description="requests simulated first, within which the warm-up cut (MSER-5) is "
        "searched; default: none (a closed loop starts in its steady state; an open loop "
        "warms up for its relaxation time)",
    )
    lengths_from: str | None = Field(
        default="sharegpt",
        description="take prompt/output lengths from this recorded dataset, a packaged name or "
        "an acc_len or token-trace JSONL file (only its lengths, hence lengths_from; older "
        "spelling: trace)",
    )
    lengths_from_method: str | None = Field(
        default=None,
        description="use len(acc_len[method]) of lengths_from's records as output length "
        "instead of output_len (older spelling: trace_output_method)",
    )
    prompt: LengthSpec = LengthSpec(dist="fixed", mean=512)
    output: LengthSpec = LengthSpec(dist="fixed", mean=256)
    arrival_trace: str | None = Field(
        default=None,
        description="replay: a packaged arrival trace (azure-conv, azure-code) or a CSV/"
        "Parquet/JSONL file (TIMESTAMP, ContextTokens, GeneratedTokens, or arrival_s, "
        "prompt_len, output_len[, dataset|domain]) of at most 10,000,000 rows spanning at "
        "most 30 days",
    )
    # the replay's window keeps trace_* names: in a workload, "trace" is only the arrival trace
    trace_start_s: float | None = Field(
        default=None,
        ge=0.0,
        le=MAX_TRACE_S,
        description="replay: from this second of the arrival trace",
    )
    trace_end_s: float | None = Field(
        default=None,
        gt=0.0,
        le=MAX_TRACE_S,
        description="replay: up to this second of the arrival trace",
    )
    rate_scale: float | None = Field(
        default=None,
        gt=0.0,
        le=1e6,
        description="replay: this many times as fast (every gap divided by it, the bursts "
        "keep their shape; slowed down, the trace still spans at most 30 days)",
    )
    target_qps: float | None = Field(
        default=None,
        ge=MIN_RATE,
        le=1e6,
        description="replay: rescale the gaps so the mean rate is this many requests/s "
        "(n requests then span (n - 1) / target_qps s: at most 30 days)",
    )
    tile_s: float | None = Field(
        default=None,
        gt=0.0,
        le=MAX_TRACE_S,
        description="replay: repeat the (windowed, rescaled) arrival trace back to back up to "
        "this many seconds",
    )

    @model_validator(mode="before")
    @classmethod
    def _as_written(cls, data: object) -> object:
        """Checks of the fields as written, in this order: older spellings renamed, fixed
        lengths against lengths_from, then an arrival replay's refusals."""
        if not isinstance(data, dict):
            return data
        return cls._replay(cls._lengths_or_dataset(_workload_spellings(data)))

    @classmethod
    def _replay(cls, data: dict[str, Any]) -> dict[str, Any]:
        """A replayed arrival trace brings its own times and lengths and is measured whole:
        the other modes' fields are refused beside it (unless at their defaults, as a dumped
        config writes them), and its own fields are refused without it."""
        own = [f for f in REPLAY_FIELDS if data.get(f) is not None]
        if data.get("arrival") != "replay":
            if own:
                raise ValueError(f"{', '.join(own)} need arrival: replay")
            return data
        if data.get("arrival_trace") is None:
            raise ValueError(
                "arrival: replay needs arrival_trace (azure-conv, azure-code or a file)"
            )
        if data.get("rate_scale") is not None and data.get("target_qps") is not None:
            raise ValueError("give rate_scale or target_qps, not both")
        start, end = data.get("trace_start_s"), data.get("trace_end_s")
        if isinstance(start, int | float) and isinstance(end, int | float) and end <= start:
            raise ValueError(f"trace_end_s ({end}) must be > trace_start_s ({start})")
        if unread := cls.not_for_replay(data):
            raise ValueError(
                f"{unread[0]} does not apply to arrival: replay (the trace gives the arrivals, "
                "the lengths and the request count)"
            )
        if data.get("measure", "whole") != "whole":
            raise ValueError("a replayed trace is measured whole (measure: whole)")
        return {**data, "lengths_from": None, "measure": "whole"}

    @classmethod
    def not_for_replay(cls, data: dict[str, Any]) -> list[str]:
        """The fields of ``data`` (a workload as written) that a replay does not read, set to
        other than their defaults: at its default a field says nothing a replay drops (a
        dumped config writes every field)."""
        out = []
        for name in NOT_FOR_REPLAY:
            value, default = data.get(name), cls.model_fields[name].default
            if isinstance(default, LengthSpec) and isinstance(value, dict):
                try:
                    value = LengthSpec.model_validate(value)
                except ValueError:
                    pass  # not the default
            if value is not None and value != default:
                out.append(name)
        return out

    @staticmethod
    def _lengths_or_dataset(data: dict[str, Any]) -> dict[str, Any]:
        """Fixed ``prompt``/``output`` lengths replace a dataset's: written without
        ``lengths_from`` they mean ``lengths_from: null``; written beside a dataset they would
        be ignored, so refused."""
        sides = {"prompt", "output"} & set(data)
        if not sides:
            return data
        if "lengths_from" not in data:
            (given,) = sides if len(sides) == 1 else ("",)
            if given and data.get("arrival") != "replay" and _parses(data[given]):
                # one side alone would take the other's default without a word (QA: a
                # file's prompt alone ran every output at 256), as --prompt-len alone would
                other = "output" if given == "prompt" else "prompt"
                raise ValueError(
                    f"{given}: fixed lengths replace the dataset's prompt and output lengths "
                    f"together: give {other} too, or lengths_from: null to keep {other}'s "
                    "default"
                )
            return {**data, "lengths_from": None}
        if data["lengths_from"] is None:
            return data
        for side, default in (("prompt", 512.0), ("output", 256.0)):
            try:
                spec = LengthSpec.model_validate(data.get(side) or {"mean": default})
            except ValueError:
                continue  # left for the field's own validation to name
            if spec == LengthSpec(dist="fixed", mean=default):
                continue  # the default (as a dumped config writes it), not the user's lengths
            raise ValueError(
                f"{side}: lengths come from lengths_from {data['lengths_from']!r}, which would "
                f"ignore {side}; give lengths_from: null to use fixed lengths"
            )
        return data

    @model_validator(mode="after")
    def _schedule(self) -> WorkloadConfig:
        if self.arrivals_end_at_rate and (
            self.arrival != "poisson" or self.rate_schedule is not None
        ):
            raise ValueError("arrivals_end_at_rate applies to poisson arrivals at one rate")
        sched = self.rate_schedule
        if sched is None:
            return self
        if self.rate != type(self).model_fields["rate"].default:
            # the schedule sets every rate: one beside it would be dropped without a word (QA:
            # a policy file's rate 50 beside --rate-csv)
            raise ValueError(
                f"rate: rate_schedule sets the rate at every moment, so rate {self.rate:g} "
                "would be ignored: give one of them"
            )
        if not sched or sched[0][0] != 0.0:
            raise ValueError("rate_schedule must start at time 0")
        times = [t for t, _ in sched]
        if times != sorted(times) or len(set(times)) != len(times):
            raise ValueError("rate_schedule times must increase")
        if any(not (r == 0.0 or MIN_RATE <= r <= 1e6) for _, r in sched) or sched[-1][1] <= 0:
            raise ValueError(f"rates must be 0 or in [{MIN_RATE:g}, 1e6], and the last one > 0")
        return self

    @property
    def num_requests(self) -> int:
        """Requests a run measures: ``requests`` (default max(256, 4 x concurrency)), and in
        a closed loop at least ``turnovers`` x concurrency; a rate schedule measures them all."""
        if self.arrival == "replay":
            raise ValueError(
                "an arrival replay's request count is known once the trace is read: "
                "simspec.engine.workload.request_count(workload)"
            )
        closed = self.arrival == "closed"
        n = self.requests
        if n is None:
            n = max(DEFAULT_MEASURED, 4 * (self.concurrency if closed else 1))
        if closed and self.measure == "steady":
            n = max(n, self.turnovers * self.concurrency)
        return min(n, MAX_REQUESTS)


class AcceptanceConfig(BaseModel):
    """How accept events are drawn for one method. Give exactly one of alpha, tau, acc_len or
    tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _text = _TEXT
    _numbers = _NUMBERS
    alpha: float | list[float] | None = Field(
        default=None,
        description="mean acceptance per draft position (a scalar = same at every position); "
        "a list gives positions 1, 2, ...: a K past its end repeats its last value, a K below "
        "its length reads the first K",
    )
    tau: float | None = Field(
        default=None,
        ge=1.0,
        description="published mean tokens per step (incl. bonus) at chain tau_k",
    )
    tau_k: int | None = Field(
        default=None, ge=1, le=64, description="chain length (or tree depth) tau was measured at"
    )
    tau_tree_nodes: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="draft-tree size tau was measured with (none: chain)",
    )
    tau_tree_topk: int | None = Field(
        default=None, ge=1, le=64, description="children per node of that tree"
    )
    tau_dynamic_tree: bool = Field(
        default=False, description="tau was measured with a dynamic (per-step) tree"
    )
    depth_decay: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description="mean α at depth d = α_1 · decay^(d-1) (Medusa's independent heads, one "
        "MTP module run again per draft step); default: the method's",
    )
    sourced_k: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="deepest draft position the sources measured; deeper ones are extrapolated "
        "(by depth_decay), and a run drafting deeper says so",
    )
    spread: float = Field(
        default=0.0,
        ge=0.0,
        le=10.0,
        description="std of a per-request logit offset (heterogeneity)",
    )
    burst_scale: float = Field(
        default=0.0, ge=0.0, le=10.0, description="std of a per-step logit offset within a request"
    )
    burstiness: float = Field(
        default=0.0, ge=0.0, lt=1.0, description="lag-1 correlation of the per-step offset"
    )
    acc_len: str | None = Field(
        default=None,
        description="replay acceptance recorded as per-position acc_len arrays: a packaged "
        "dataset name or an acc_len JSONL path; named for the records it replays (older "
        "spelling: trace)",
    )
    tokens: str | None = Field(
        default=None,
        description="token trace (packaged dataset name or JSONL(.gz) path with prompt_token_ids "
        "and generated_token_ids): lookup methods replay their proposer on it exactly",
    )
    temperature: float = Field(
        default=0.0, ge=0.0, le=5.0, description="sampling temperature alpha/tau was measured at"
    )
    top_p: float = Field(
        default=1.0,
        gt=0.0,
        le=1.0,
        description="top-p alpha/tau was measured at, beside temperature (1: all tokens)",
    )
    acc_len_method: str | None = Field(
        default=None,
        description="acc_len: the method's key under acc_len, e.g. eagle3 (older spelling: "
        "trace_method)",
    )
    source: str = Field(default="", description="where the numbers come from")

    @model_validator(mode="before")
    @classmethod
    def _as_written(cls, data: object) -> object:
        """Older spellings renamed; ``{source: tokens, file: F}`` is ``{tokens: F}``
        (``source`` is otherwise provenance)."""
        if not isinstance(data, dict):
            return data
        data = _acceptance_spellings(data)
        if data.get("source") == "tokens" and "file" in data:
            rest = {k: v for k, v in data.items() if k not in ("file", "source")}
            return {**rest, "tokens": data["file"], "source": f"token trace {data['file']}"}
        return data

    @model_validator(mode="after")
    def _check(self) -> AcceptanceConfig:
        given = [n for n in ("alpha", "tau", "acc_len", "tokens") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of alpha, tau, acc_len or tokens "
                f"(got {', '.join(given) or 'none'})"
            )
        if self.alpha is not None:
            values = [self.alpha] if isinstance(self.alpha, float | int) else self.alpha
            if not values or any(not 0.0 <= a <= 1.0 for a in values):
                raise ValueError("alpha must be in [0, 1] (a number or a non-empty list)")
        if self.tau is not None:
            if self.tau_k is None:
                raise ValueError("tau needs tau_k, the chain length it was measured at")
            if self.tau > self.tau_k + 1:
                raise ValueError(
                    f"tau must be <= tau_k + 1 = {self.tau_k + 1} (a step emits at most its "
                    f"{self.tau_k} drafted tokens and one more; tau_k: the chain length tau was "
                    "measured at, --tau-k, else the method's k)"
                )
        if self.tau_tree_nodes is not None and self.tau_tree_nodes < (self.tau_k or 1):
            raise ValueError("tau_tree_nodes must be >= tau_k (a tree holds its depth)")
        if self.acc_len is not None and not self.acc_len_method:
            raise ValueError("acc_len needs acc_len_method (e.g. eagle3 or ngram)")
        return self

    @property
    def sigma(self) -> float:
        return math.hypot(self.spread, self.burst_scale)


TreeKind = Literal["chain", "static", "dynamic"]
Schedule = list[tuple[int, int, int]]
MAX_K = 64  # MethodConfig.k's bound: a K schedule asks no more
MAX_TREE_NODES = 1024  # MethodConfig.tree_nodes's bound


def check_schedule(v: Schedule | None, top: int, from_one: bool = False) -> Schedule | None:
    """A schedule by batch size, ``[[start_bs, end_bs, value], ...]``: each band
    1 <= start <= end, values in [0, top], no two bands overlapping; ``from_one``: the first
    band starts at 1, as vLLM's Dynamic SD requires ("The first batch-size range must start at
    1 so every runtime batch size has a defined schedule", validate_and_normalize_dynamic_sd_
    schedule in vllm/v1/spec_decode/dynamic/utils.py)."""
    # each band first, then where the first starts (QA: [[30, 1, 3]] was refused for
    # starting at 30, not for ending before it starts)
    for start, end, value in v or []:
        if not 1 <= start <= end:
            raise ValueError(f"band [{start}, {end}]: need 1 <= start_bs <= end_bs")
        if not 0 <= value <= top:
            raise ValueError(f"band [{start}, {end}] asks {value}: values are 0 to {top}")
    if from_one and v and min(start for start, _, _ in v) != 1:
        raise ValueError(
            f"the first band starts at {min(start for start, _, _ in v)}: vLLM requires the "
            "first batch-size range to start at 1 (it gives every batch size a K)"
        )
    spans = sorted(v or [])
    for (_, end, _), (start, _, _) in zip(spans, spans[1:], strict=False):
        if start <= end:
            raise ValueError("batch-size ranges overlap")
    return v


# a K schedule and a tree-budget schedule, checked wherever one is written (a method, a policy)
KSchedule = Annotated[
    Schedule | None, AfterValidator(lambda v: check_schedule(v, MAX_K, from_one=True))
]
TreeSchedule = Annotated[
    Schedule | None, AfterValidator(lambda v: check_schedule(v, MAX_TREE_NODES))
]


class MethodConfig(BaseModel):
    """One method to simulate, as a user writes it in a scenario file, where unset fields
    take the method's defaults (``simspec methods`` lists them; a file's method without ``k``
    drafts the method's default length). Built in Python, unset fields take these defaults
    (``k`` 3): :func:`simspec.catalog.methods.preset_method` gives a method's own."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _text = _TEXT
    _numbers = _NUMBERS
    name: str = Field(description="registry name, e.g. eagle3")
    k: int = Field(default=3, ge=0, le=MAX_K, description="draft tokens per step, or tree depth")
    draft_model: str | None = Field(default=None, description="draft preset or config.json path")
    draft_vocab_size: int | None = Field(
        default=None, gt=0, description="EAGLE head vocabulary (EAGLE-3 drafts over a reduced one)"
    )
    tree: TreeKind | None = Field(default=None, description="chain, static or dynamic tree")
    tree_nodes: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="drafted tokens per step in a tree, the verified root not counted "
        "(SGLang's --speculative-num-draft-tokens minus 1; EAGLE-2's total_token)",
    )
    tree_topk: int | None = Field(default=None, ge=1, le=64, description="children per node")
    tree_paths: list[list[int]] | None = Field(
        default=None,
        description="an explicit static tree: paths of 0-based sibling ranks, e.g. "
        "[[0], [1], [0, 0]] (Medusa choices, vLLM speculative_token_tree)",
    )
    lookahead_window: int | None = Field(default=None, ge=1, le=64, description="Lookahead W")
    lookahead_ngram: int | None = Field(default=None, ge=2, le=16, description="Lookahead N")
    lookahead_guesses: int | None = Field(default=None, ge=0, le=64, description="Lookahead G")
    beam_width: int | None = Field(default=None, ge=1, le=64, description="ReDrafter beams")
    prompt_lookup_min: int | None = Field(
        default=None, ge=1, le=64, description="n-gram: shortest n-gram matched (vLLM's name)"
    )
    prompt_lookup_max: int | None = Field(
        default=None, ge=1, le=64, description="n-gram: longest n-gram matched (vLLM's name)"
    )
    suffix_decoding_max_tree_depth: int | None = Field(
        default=None, ge=1, le=1024, description="suffix: longest string the trees hold"
    )
    suffix_decoding_max_cached_requests: int | None = Field(
        default=None, ge=0, le=10_000_000, description="suffix: outputs in the global tree"
    )
    suffix_decoding_max_spec_factor: float | None = Field(
        default=None,
        ge=0.0,
        le=64.0,
        description="suffix: draft length per matched token (0: none; vLLM refuses only < 0)",
    )
    suffix_decoding_min_token_prob: float | None = Field(
        default=None, ge=0.0, le=1.0, description="suffix: stop a draft below this probability"
    )
    draft_layers: int | None = Field(
        default=None, ge=1, description="self_spec: target layers that draft (early exit)"
    )
    draft_tp: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="GPUs the draft network runs on (vLLM V0 speculative_draft_tensor_parallel_"
        "size: 1 or the target's tp); unset: the target's tp",
    )
    k_schedule: KSchedule = Field(
        default=None,
        description="vLLM Dynamic SD: [[start_bs, end_bs, K], ...] from batch size 1; K=0 "
        "turns speculation off; a batch size between or past the bands takes the K of the band "
        "before it, as vLLM's lookup does",
    )
    disable_by_batch_size: int | None = Field(
        default=None,
        ge=1,
        description="speculation off when this many requests are running (vLLM V0's "
        "speculative_disable_by_batch_size: engine vllm-v0 alone; V1 never reads it, vLLM PR "
        "#35060)",
    )
    tree_schedule: TreeSchedule = Field(
        default=None,
        description="tree budget by batch size: [[start_bs, end_bs, nodes], ...]; 0 = off",
    )
    acceptance: AcceptanceConfig | None = None

    @field_validator("tree_paths")
    @classmethod
    def _paths(cls, v: list[list[int]] | None) -> list[list[int]] | None:
        """Paths of 0-based sibling ranks, as vLLM's speculative_token_tree takes them (QA: a
        rank of -1 ran, its tau changing with the batch size; an empty list was ignored)."""
        if v is None:
            return v
        if not v:
            raise ValueError("must be a non-empty list of paths such as [[0], [1], [0, 0]]")
        for path in v:
            if not 0 < len(path) <= 64 or any(not 0 <= r < 1024 for r in path):
                raise ValueError(f"each path is 1 to 64 ranks in [0, 1024), got {path!r}")
        return v

    @property
    def label(self) -> str:
        return self.name


class SchedulerConfig(BaseModel):
    """Engine limits; unset values take the engine profile's defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _numbers = _NUMBERS
    max_num_seqs: int | None = Field(default=None, ge=1, le=100_000)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=10_000_000)
    enable_prefix_caching: bool | None = Field(
        default=None,
        description="keep a preempted request's full KV blocks cached for its return (vLLM "
        "--enable-prefix-caching, SGLang's radix cache); unset: the engine profile's",
    )
    enable_chunked_prefill: bool | None = Field(
        default=None,
        description="split a prompt over steps at the token budget (trtllm-serve "
        "--enable_chunked_prefill; off by default there, a prompt admitted whole); unset: the "
        "engine profile's. vLLM V1 and SGLang always chunk here",
    )
    gpu_memory_utilization: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="share of each GPU's memory the engine fills with weights, activations and "
        "KV cache (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static); under "
        "trtllm the share of what the weights leave free that the KV cache takes "
        "(--kv_cache_free_gpu_memory_fraction); unset: the engine profile's",
    )
    max_model_len: int | None = Field(
        default=None,
        ge=16,
        le=10_000_000,
        description="vLLM --max-model-len: the context the engine is started with (a request "
        "whose prompt + output pass it is refused, and it cannot pass the model's own); vLLM "
        "V0 sizes its prefill budget by it when chunked prefill is off (max(max_model_len, "
        "2048)) and turns chunked prefill on by default only above 32,768; SGLang's running "
        "cap divides its KV tokens by it; unset: the model's context (max_position_embeddings)",
    )
    async_scheduling: bool | None = Field(
        default=None,
        description="vLLM --async-scheduling: the scheduler prepares the next step while the "
        "GPU runs this one, so the host's time per step hides behind the GPU's; on by default "
        "from vLLM 0.14, kept under EAGLE and MTP and turned off by other speculative methods; "
        "unset: the engine profile's (vllm: off, as fitted on 0.10.1)",
    )
    reserved_decode_tokens: int | None = Field(
        default=None,
        ge=0,
        le=1_000_000,
        description="SGLang's SGLANG_NUM_RESERVED_DECODE_TOKENS on a decode instance "
        "(disaggregation_mode decode): KV tokens kept free to decode for each request it "
        "holds before another transferred request is taken; unset: the engine profile's (512)",
    )


# vLLM's --kv-cache-dtype spellings (vllm/config/cache.py CacheDType) for the dtypes simspec
# prices: every fp8 variant is one byte per element.
KV_CACHE_ALIASES = {"bfloat16": "bf16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}


def _kv_alias(value: object) -> object:
    """vLLM's spellings as simspec's; any other string is refused naming every accepted
    spelling (QA: "fp8_inc" was told only auto, bf16 or fp8)."""
    if not isinstance(value, str):
        return value
    value = KV_CACHE_ALIASES.get(value, value)
    if value not in ("auto", "bf16", "fp8"):
        accepted = ", ".join(["auto", "bf16", "fp8", *KV_CACHE_ALIASES])
        raise ValueError(
            f"choose {accepted} (vLLM's fp8_e4m3 and fp8_e5m2 are fp8, bfloat16 is bf16; "
            f"other cache dtypes are not priced)"
        )
    return value


KvCacheDtype = Annotated[Literal["auto", "bf16", "fp8"], BeforeValidator(_kv_alias)]
# weight precisions a deployment can name (data: simspec/data/precision.yaml)
WeightPrecision = Literal["bf16", "fp8", "int4-w", "nvfp4"]
# null: one replica prefills and decodes; decode: the decode instance of a PD deployment
DisaggregationMode = Literal["null", "decode"]


class Deployment(BaseModel):
    """What is served and how: model, hardware, engine, workload, scheduler limits, seed."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _text = _TEXT
    _numbers = _NUMBERS
    model: str = Field(default="llama-3.1-8b", description="model preset or config.json path")
    gpu: str = Field(default="h100_sxm", description="GPU preset")
    tp: int = Field(default=1, ge=1, le=64, description="tensor-parallel degree")
    pp: int = Field(
        default=1,
        ge=1,
        le=64,
        description="GPUs the layers are split across, run one after another (Hugging Face "
        "device_map='auto', engine hf only): more memory, the same step time plus a hop per "
        "boundary",
    )
    ep: int = Field(
        default=1,
        ge=1,
        le=64,
        description="expert parallelism of a MoE model: 1 slices every expert over the tp GPUs; "
        "ep = tp places whole experts on each GPU (vLLM --enable-expert-parallel), tokens sent "
        "to their experts and back by all-to-all under SGLang's DeepEP backend or across "
        "data-parallel ranks (vLLM and TensorRT-LLM sum the experts' outputs by all-reduce "
        "without DP attention)",
    )
    dp: int = Field(
        default=1,
        ge=1,
        le=64,
        description="data-parallel attention: the tp GPUs form dp attention ranks of tp/dp GPUs, "
        "each running attention on its own requests and KV cache, the MoE layers over all tp "
        "GPUs (SGLang --tp N --dp D --enable-dp-attention; vLLM --data-parallel-size D "
        "--tensor-parallel-size N/D); must divide tp",
    )
    engine: str = Field(default="vllm", description="engine profile")
    disaggregation_mode: DisaggregationMode = Field(
        default="null",
        description="null: the replica prefills and decodes; decode: it is the decode instance "
        "of a prefill/decode-disaggregated deployment, every request arriving with its "
        "prompt's KV (the draft's too) and its first token from a prefill instance (SGLang "
        "--disaggregation-mode decode; vLLM's kv_role kv_consumer); the prefill instance and "
        "the transfer are simulated by a fleet's prefill instances (fleet --prefill-replicas)",
    )
    profile: str | None = Field(
        default=None,
        description="hardware profile id or YAML path; sweep, plan, recommend, fleet, policy "
        "and analytic given no gpu run on the GPU it was fitted on (compare and calibrate "
        "bench: the runs' GPU)",
    )
    precision: WeightPrecision | None = Field(
        default=None,
        description="weight precision: bf16, fp8 (W8A8; weight-only on GPUs without FP8 tensor "
        "cores), int4-w (W4A16, group 128) or nvfp4 (W4A4 on Blackwell FP4 tensor cores; "
        "vLLM runs it weight-only elsewhere), for every layer, routed experts included: a "
        "checkpoint at that precision, not the preset's re-quantized; unset = the "
        "checkpoint's own (its quantization_config, else bf16; GPT-OSS: MXFP4 experts)",
    )
    kv_cache_dtype: KvCacheDtype = Field(
        default="auto",
        description="KV cache dtype: auto (the model's, bf16), bf16 or fp8 (vLLM "
        "--kv-cache-dtype; fp8_e4m3, fp8_e5m2 and bfloat16 are accepted)",
    )
    workload: WorkloadConfig = WorkloadConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    temperature: float = Field(
        default=0.0, ge=0.0, le=5.0, description="sampling temperature (0 = greedy)"
    )
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="nucleus sampling mass")
    seed: int = Field(default=0, ge=0, le=2**32 - 1)

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, v: str) -> str:
        # the presets' ids are lower case, and GPU names are said either way (QA: H100_SXM was
        # an unknown GPU while method names ignore case)
        return v.lower()

    @field_validator("tp")
    @classmethod
    def _tp(cls, v: int) -> int:
        return check_tp(v)

    @field_validator("ep")
    @classmethod
    def _ep(cls, v: int, info: ValidationInfo) -> int:
        tp = info.data.get("tp")
        if tp is not None and v not in (1, tp):
            raise ValueError(
                f"must be 1 (experts sliced over the tp GPUs) or tp={tp} (whole experts spread "
                "over them); SGLang's ep < tp (experts over ep, each sliced tp/ep ways) is not "
                "modelled"
            )
        return v

    @field_validator("dp")
    @classmethod
    def _dp(cls, v: int, info: ValidationInfo) -> int:
        tp = info.data.get("tp")
        if tp is not None and tp % v:
            allowed = ", ".join(str(d) for d in range(1, tp + 1) if tp % d == 0)
            raise ValueError(
                f"must divide tp={tp} (attention ranks of tp/dp GPUs each): one of {allowed}; "
                f"simspec's tp counts every GPU, vLLM's --tensor-parallel-size x "
                f"--data-parallel-size (vllm serve -tp 1 -dp {v} is tp {v}, dp {v} here)"
            )
        return v


# What is served on what, and how it samples: Deployment fields that the CLI's flags and the
# explorer's inputs set from attributes of the same names, so one mapping serves both.
SERVING_FIELDS = (
    "model", "gpu", "tp", "ep", "dp", "engine", "disaggregation_mode", "precision", "kv_cache_dtype"
)  # fmt: skip
SAMPLING_FIELDS = ("temperature", "top_p", "seed")


def deployment_fields(source: object, names: Iterable[str] = SERVING_FIELDS) -> dict[str, Any]:
    """The Deployment fields among ``names`` that ``source`` sets: each attribute of that name
    it has and that is not None (a flag not given, a field the explorer does not offer keeps
    the Deployment's default)."""
    fields = ((name, getattr(source, name, None)) for name in names)
    return {name: value for name, value in fields if value is not None}


class Scenario(Deployment):
    """One simulation: a deployment running one method."""

    method: MethodConfig = MethodConfig(name="autoregressive", k=0)


def check_tp(tp: int) -> int:
    """Tensor parallelism over a power of two GPUs: the GPU counts simspec's collectives were
    timed at (simspec/data/collectives.yaml). Engines ask only that tp divide the heads and
    every sliced width, which other counts rarely do."""
    if tp & (tp - 1):
        raise ValueError(
            "must be a power of two (1, 2, 4, 8, ...): simspec's all-reduce timings are of "
            "those GPU counts"
        )
    return tp


# How a fleet's router assigns each arriving request to a replica (simspec.engine.fleet).
Router = Literal["round_robin", "random", "least_outstanding", "least_kv", "power_of_two"]
ROUTERS: tuple[str, ...] = Router.__args__  # type: ignore[attr-defined]
# routers whose choice depends only on the arrivals (never on the replicas' state): replicas
# behind them are independent given their arrivals, so a fleet can be sharded exactly
STATE_FREE_ROUTERS = ("round_robin", "random")
# replicas in one fleet: 1,024 H100 replicas of an 8B model serve ~10^4 requests/s, past any
# published production trace (Azure's conversation hour peaks below 20/s)
MAX_REPLICAS = 1024
# The timeline (studies.fleet.timeline) has a row per window for each replica and one for the
# fleet, and each replica's WindowedLog a slot per window: both grow with the run's span over
# window_s, not with its requests (three requests a day apart make 8.6e6 windows of 10 ms).
# Two million rows take ~0.4 GB while the timeline is built (measured: 2.1e6 rows, 0.4 GB
# above the run) and ~150 MB as CSV, and still hold a day at the default 10 s windows for 230
# replicas, or a month (MAX_TRACE_S) for 6.
MAX_TIMELINE_ROWS = 2_000_000


class PrefillPool(BaseModel):
    """The prefill instances of a disaggregated fleet, whose replicas are its decode instances
    (``disaggregation_mode: decode``): each a copy of their deployment serving whole
    requests, which end at their first token, and the link their prompt's KV crosses
    (:mod:`simspec.engine.disaggregation`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _numbers = _NUMBERS
    replicas: int = Field(ge=1, le=MAX_REPLICAS, description="prefill instances")
    kv_transfer_gbps: float | None = Field(
        default=None,
        gt=0.0,
        le=100_000.0,
        description="Gb/s each prefill GPU sends its slice of a prompt's KV at; unset: the "
        "GPU's reference server's network card per GPU (gpus.yaml nic_gbps: 400 for DGX "
        "H100/H200/B200, 200 for DGX A100, 800 for DGX B300 and GB300), else 400 assumed",
    )
    kv_transfer_latency_ms: float = Field(
        default=0.0,
        ge=0.0,
        le=10_000.0,
        description="fixed ms a transfer adds (the KV connector's handshake; none by default: "
        "no source times it)",
    )


class FleetConfig(BaseModel):
    """N replicas, each a full scenario (its own deployment and method: a fleet may mix
    them), behind one router, all fed by one arrival process. Every replica shares the
    fleet's workload and seed: the arrivals and the requests are the fleet's, not a
    replica's."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _numbers = _NUMBERS
    replicas: list[Scenario] = Field(min_length=1, max_length=MAX_REPLICAS)
    router: Router = Field(
        default="least_outstanding",
        description="round_robin, random (seeded), least_outstanding (fewest requests routed "
        "and not finished), least_kv (most free KV blocks; ties: fewest outstanding) or "
        "power_of_two (the less loaded of two replicas drawn at random)",
    )
    prefill: PrefillPool | None = Field(
        default=None,
        description="prefill instances in front of the replicas, which are then decode "
        "instances (prefill/decode disaggregation); none: every replica serves whole requests",
    )

    @model_validator(mode="after")
    def _shared(self) -> FleetConfig:
        first = self.replicas[0]
        for i, r in enumerate(self.replicas[1:], start=1):
            for field in ("workload", "seed"):
                if getattr(r, field) != getattr(first, field):
                    raise ValueError(
                        f"replicas[{i}].{field} differs from replicas[0]'s: the arrivals and "
                        "requests are the fleet's, so every replica must share them"
                    )
        if self.prefill is not None:
            for i, r in enumerate(self.replicas):
                if r.disaggregation_mode != "decode":
                    raise ValueError(
                        f"replicas[{i}].disaggregation_mode: a fleet with prefill instances "
                        "runs its replicas as decode instances: set decode"
                    )
                if r.engine != first.engine:
                    raise ValueError(
                        f"replicas[{i}].engine ({r.engine}) differs from replicas[0]'s "
                        f"({first.engine}): prefill and decode instances hand requests and KV "
                        "to each other through one engine's connector, so a disaggregated "
                        "fleet runs one engine"
                    )
        if first.workload.arrival == "closed":
            raise ValueError(
                "workload.arrival: a fleet needs open arrivals (poisson or replay); a closed "
                "loop has no arrival process to route"
            )
        return self

    @property
    def workload(self) -> WorkloadConfig:
        return self.replicas[0].workload

    @property
    def seed(self) -> int:
        return self.replicas[0].seed

    @classmethod
    def uniform(cls, scenario: Scenario, n: int, router: str) -> FleetConfig:
        """``n`` copies of one scenario behind ``router``, a name as the CLI and the explorer
        give it: the model checks it against :data:`Router`."""
        return cls.model_validate({"replicas": [scenario] * n, "router": router})
