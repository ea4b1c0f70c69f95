"""Every option that sets a scenario field, declared once.

A flag's help is its config field's ``description`` (simspec.config), so the command line and
the scenario file explain a field in the same words. Each option defaults to None, "not
given": the scenario file's value, else the field's default (shown in the help), holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer
from pydantic import BaseModel

from simspec.catalog.hardware import engine_ids, gpu_ids
from simspec.catalog.methods import TRACE_DATASETS
from simspec.config import (
    MAX_WORKERS,
    AcceptanceConfig,
    Deployment,
    MethodConfig,
    SchedulerConfig,
    WorkloadConfig,
)
from simspec.errors import InputError


def field_help(
    schema: type[BaseModel],
    name: str,
    more: str = "",
    *,
    default: object = None,
    choices: Iterable[str] = (),
) -> str:
    """The help of the flag that sets ``schema.name``: the field's description, ``more`` (what
    the flag adds), the choices (if few), and the default that holds when neither flag nor
    file sets it (the field's own unless ``default`` says otherwise)."""
    field = schema.model_fields[name]
    text = (field.description or name.replace("_", " ")) + more
    if choices:
        text += ": " + ", ".join(choices)
    shown = field.default if default is None else default
    return text if shown is None else f"{text} [default: {shown}]"


Config = Annotated[Path | None, typer.Option(help="YAML/JSON scenario file; flags override it")]

# the deployment
Model = Annotated[str | None, typer.Option(help=field_help(Deployment, "model"))]
Gpu = Annotated[str | None, typer.Option(help=field_help(Deployment, "gpu", choices=gpu_ids()))]
Tp = Annotated[int | None, typer.Option(help=field_help(Deployment, "tp"))]
# the engines' spellings: SGLang --ep-size / --ep, --dp-size / --dp; vLLM --data-parallel-size
Ep = Annotated[
    int | None,
    typer.Option("--ep", "--ep-size", "--expert-parallel-size", help=field_help(Deployment, "ep")),
]
Dp = Annotated[
    int | None,
    typer.Option("--dp", "--dp-size", "--data-parallel-size", help=field_help(Deployment, "dp")),
]
DisaggregationMode = Annotated[
    str | None,
    typer.Option("--disaggregation-mode", help=field_help(Deployment, "disaggregation_mode")),
]
Engine = Annotated[
    str | None, typer.Option(help=field_help(Deployment, "engine", choices=engine_ids()))
]
Precision = Annotated[
    str | None,
    typer.Option(help=field_help(Deployment, "precision", default="the checkpoint's")),
]
KvCacheDtype = Annotated[str | None, typer.Option(help=field_help(Deployment, "kv_cache_dtype"))]
Profile = Annotated[
    str | None, typer.Option(help=field_help(Deployment, "profile", default="the GPU's"))
]
Temperature = Annotated[float | None, typer.Option(help=field_help(Deployment, "temperature"))]
TopP = Annotated[float | None, typer.Option(help=field_help(Deployment, "top_p"))]
Seed = Annotated[int | None, typer.Option(help="random seed [default: 0]")]
MaxNumSeqs = Annotated[
    int | None,
    typer.Option(
        "--max-num-seqs",
        "--max-running-requests",
        help="scheduler: max sequences per iteration (vLLM --max-num-seqs, SGLang "
        "--max-running-requests) [default: engine's; sglang: 48 under speculative decoding]",
    ),
]
MaxModelLen = Annotated[
    int | None,
    typer.Option(
        "--max-model-len",
        "--context-length",
        help=field_help(SchedulerConfig, "max_model_len"),
        show_default=False,
    ),
]
GpuMemoryUtilization = Annotated[
    float | None,
    typer.Option(
        "--gpu-memory-utilization",
        "--mem-fraction-static",
        help="scheduler: share of GPU memory for weights, activations and KV (0-1]; trtllm: "
        "the KV cache's share of what the weights leave [default: engine's]",
    ),
]
AsyncScheduling = Annotated[
    bool | None,
    typer.Option(
        "--async-scheduling/--no-async-scheduling",
        help=field_help(SchedulerConfig, "async_scheduling", default="the engine's"),
        show_default=False,
    ),
]
ReservedDecodeTokens = Annotated[
    int | None,
    typer.Option(
        "--reserved-decode-tokens",
        help=field_help(SchedulerConfig, "reserved_decode_tokens"),
        show_default=False,
    ),
]
MaxNumBatchedTokens = Annotated[
    int | None, typer.Option(help="scheduler: token budget per iteration [default: engine's]")
]

# the workload
Dataset = Annotated[
    str | None,
    typer.Option(
        help="take prompt/output lengths (workload.lengths_from) from this recorded dataset "
        "(Llama-3.1-8B on H100), and the methods' acceptance presets from it: "
        f"{', '.join(TRACE_DATASETS)} "
        f"[default: {WorkloadConfig.model_fields['lengths_from'].default}; under fleet's or "
        "plan's arrival --trace, its dataset/domain column, else this flag, no default: the "
        "lengths are the trace's]"
    ),
]
TokenTrace = Annotated[
    str | None,
    typer.Option(
        help="token-trace JSONL(.gz) with prompt_token_ids and generated_token_ids per request "
        "(calibration/capture_tokens.py writes one), or a packaged dataset name: request "
        "lengths come from it, and lookup methods (ngram, pld, suffix) replay their proposer "
        "on its streams exactly",
        metavar="FILE",
    ),
]
Requests = Annotated[int | None, typer.Option(help=field_help(WorkloadConfig, "requests"))]
Turnovers = Annotated[
    int | None, typer.Option(help=field_help(WorkloadConfig, "turnovers"), metavar="N")
]
PromptLen = Annotated[
    int | None,
    typer.Option(
        help="fixed prompt length (>= 1) instead of the dataset's: give --output-len too "
        "(fixed lengths replace the dataset's), unless the file has lengths_from: null"
    ),
]
OutputLen = Annotated[
    int | None,
    typer.Option(help="fixed output length (>= 1) instead of the dataset's; see --prompt-len"),
]


def concurrencies_help(what: str, default: str) -> str:
    """The help of a command's --concurrencies: ``what`` it runs at them, and its default."""
    return (
        f"comma list of concurrencies (requests in flight in a closed loop; a sweep's CSV "
        f"calls each batch_size; also spelled --batch-sizes or --schedule-grid): {what} "
        f"[default: {default}]"
    )


Concurrencies = Annotated[
    str | None,
    typer.Option(
        help=concurrencies_help("each method runs at each", "1,2,4,8,16,32,64,128"),
        metavar="N,N,...",
    ),
]
# the other names a concurrency list has gone by, accepted by every command that takes one
# (an error names the one typed) and left out of --help, which documents --concurrencies
BatchSizesAlias = Annotated[str | None, typer.Option("--batch-sizes", hidden=True)]
ScheduleGridAlias = Annotated[str | None, typer.Option("--schedule-grid", hidden=True)]

# the methods
Methods = Annotated[
    str | None,
    typer.Option(
        help="comma list of methods (see `simspec methods`; case ignored; vLLM's names such as "
        "eagle and medusa accepted), or 'all': every method an engine ships for the model "
        "(those left out are listed on stderr, unless --quiet) "
        "[default: autoregressive,eagle3,ngram]"
    ),
]
# the other spelling of --methods (a command of many methods) or --method (one), hidden
MethodAlias = Annotated[str | None, typer.Option("--method", hidden=True)]
MethodsAlias = Annotated[str | None, typer.Option("--methods", hidden=True)]
K = Annotated[
    int | None,
    typer.Option(
        help=field_help(
            MethodConfig,
            "k",
            ", for every speculative method",
            default="the method's default, see simspec methods",
        )
    ),
]
DraftModel = Annotated[
    str | None,
    typer.Option(
        help=field_help(
            MethodConfig,
            "draft_model",
            " of the draft_model method",
            default="the packaged draft sharing the model's vocabulary (vicuna-68m, "
            "llama-3.2-1b, qwen3-0.6b)",
        )
    ),
]
# one number (QA: the field's help promised lists, which the flag refused)
Alpha = Annotated[
    float | None,
    typer.Option(
        help="mean acceptance per draft position, the same at every position, in [0, 1], "
        "instead of each speculative method's preset (one number: a list by position goes "
        "in a scenario file's acceptance.alpha)"
    ),
]
Tau = Annotated[
    float | None,
    typer.Option(
        help=field_help(
            AcceptanceConfig,
            "tau",
            ": α is fitted to it, requests spread as the drafter's packaged traces of the "
            "dataset's domain",
        )
    ),
]
TauK = Annotated[
    int | None,
    typer.Option(help=field_help(AcceptanceConfig, "tau_k", default="the method's K")),
]
SpeculativeConfig = Annotated[
    str | None,
    typer.Option(
        help="a vLLM --speculative-config JSON (or @file.json): simulate it against "
        'autoregressive, e.g. \'{"method": "eagle3", "num_speculative_tokens": 5}\'; '
        "num_speculative_tokens_per_batch_size is honoured; disable_by_batch_size on "
        "--engine vllm-v0 only (vLLM V1 never reads it)"
    ),
]

# the KV link of a prefill/decode-disaggregated fleet's transfers (config.PrefillPool)
KvTransferGbps = Annotated[
    float | None,
    typer.Option(
        help="with prefill instances (fleet --prefill-replicas, plan --disaggregate): Gb/s "
        "each prefill GPU sends its KV slice at, in (0, 100000] "
        "[default: the GPU's reference server's network card per GPU: 400 on DGX "
        "H100/H200/B200, 200 on DGX A100, 800 on DGX B300 and GB300; else 400 assumed]",
        show_default=False,
    ),
]
KvTransferLatencyMs = Annotated[
    float | None,
    typer.Option(
        help="with prefill instances (fleet --prefill-replicas, plan --disaggregate): fixed ms "
        "each KV transfer adds, in [0, 10000] [default: 0]",
        show_default=False,
    ),
]
# latency SLOs per request: the explorer's defaults, so both judge a deployment alike
# the SLOs' range is checked once, by FleetSlo (a finite number of ms, at least its minimum):
# typer's own range check had said "[0.1, inf]" and then inf was refused (QA)
SloTtft = Annotated[
    float,
    typer.Option(help="time-to-first-token SLO (ms, finite, >= 1), the explorer's default"),
]
SloTpot = Annotated[
    float,
    typer.Option(help="time-per-output-token SLO (ms, finite, >= 0.1), the explorer's default"),
]

# a replayed arrival trace (workload.arrival: replay); trace_workload turns them into the overlay
ArrivalTraceRef = Annotated[
    str | None,
    typer.Option(
        "--trace",
        help=field_help(WorkloadConfig, "arrival_trace").removeprefix("replay: ")
        + "; replayed open-loop, every request measured (measure: whole)",
        metavar="azure-conv|azure-code|FILE",
    ),
]
RateScale = Annotated[
    float | None,
    typer.Option("--rate-scale", help=field_help(WorkloadConfig, "rate_scale"), metavar="X"),
]
TargetQps = Annotated[
    float | None,
    typer.Option("--target-qps", help=field_help(WorkloadConfig, "target_qps"), metavar="QPS"),
]
TraceWindow = Annotated[
    str | None,
    typer.Option(
        "--window",
        help="trace: replay only [START, END) seconds of it, e.g. 0:600 (END may be left "
        "out: to the end) [default: all]",
        metavar="START:END",
    ),
]
TraceTile = Annotated[
    float | None,
    typer.Option("--tile", help=field_help(WorkloadConfig, "tile_s"), metavar="SECONDS"),
]


def trace_workload(
    trace: str,
    rate_scale: float | None = None,
    target_qps: float | None = None,
    window: str | None = None,
    tile: float | None = None,
) -> dict[str, object]:
    """The ``workload`` mapping the trace flags set (validated by WorkloadConfig); a window
    that is not ``START:END`` seconds is an InputError naming --window."""
    start = end = None
    if window is not None:
        head, sep, tail = window.partition(":")
        try:
            start = float(head) if head.strip() else None
            end = float(tail) if tail.strip() else None
        except ValueError:
            sep = ""
        empty = start is not None and end is not None and not end > start
        if (
            not sep
            or empty
            or (start is not None and not start >= 0)
            or (end is not None and not end > 0)
        ):
            raise InputError(
                "--window", f"give START:END seconds (0 <= START < END), got {window!r}"
            )
    out: dict[str, object] = {"arrival": "replay", "arrival_trace": trace}
    for key, value in (
        ("trace_start_s", start),
        ("trace_end_s", end),
        ("rate_scale", rate_scale),
        ("target_qps", target_qps),
        ("tile_s", tile),
    ):
        if value is not None:
            out[key] = value
    return out


# where a study's runs go (recommend, plan): the default follows the machine's CPUs
StudyExecutor = Annotated[
    str | None,
    typer.Option(
        help="run the study's simulations on a local process pool ('process') or one after "
        "another in this process ('serial'); the answer is the same bytes either way "
        "[default: process where there is more than one CPU, else serial]"
    ),
]
StudyWorkers = Annotated[
    int | None,
    typer.Option(help="process pool size [default: every CPU]", min=1, max=MAX_WORKERS),
]
