"""A case's load as the benchmark that measured it sent it, and the engine's batch limits as
that engine version defaults them.

Load kinds (the case-table contract, shared/validation/README.md):

- ``single``: one request at a time.
- ``concurrency``: a closed loop holding ``load`` requests (a finished one replaced at once),
  measured in its steady window.
- ``static_batch``: ``load`` requests start together. A row whose notes say the run was one
  burst (``vllm bench serve --request-rate inf`` with no max concurrency: "burst of N prompts",
  "request rate inf") sends every request at once and ends when the last one finishes: the
  engine admits what its ``max_num_seqs``, token budget and KV cache allow, the rest queue for
  their prefill, and the batch drains at the end, timed from the first arrival to the last
  departure. Any other static batch is a paper's "batch size N" over a dataset, batch after
  batch: a batch of N held full, measured in its steady window.
- ``qps``: Poisson arrivals at ``load`` requests/s from a cold server, every request measured.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import numpy as np

from simspec.catalog.hardware import load_engine, release_tuple
from simspec.catalog.methods import TRACE_DATASETS
from simspec.catalog.traces import first_method, load_trace
from simspec.config import MIN_RATE, LengthSpec, SchedulerConfig, WorkloadConfig
from simspec.engine.controls import MIN_REQUESTS as CONTROLLED_REQUESTS
from simspec.studies.validation.cases import number

# batch-1 rows and small batches: enough requests for the control variates to take the
# requests' spread out (simspec.engine.controls: at 32 uncontrolled requests a batch-1 speedup
# moved 3-8 % (one standard deviation) from seed to seed; controlled, 100 move it 0.5-1.3 %)
SINGLE_REQUESTS = CONTROLLED_REQUESTS
MIN_REQUESTS = CONTROLLED_REQUESTS
# closed-loop rows measure this many turnovers of the batch (the default is 64): published
# numbers are read to a few per cent and the model's own error is ~16 %, while 8 turnovers
# put the run-to-run spread of a batch-64 speedup at ~1 % (README "Measurement") and keep
# the ~400 rows to minutes
TURNOVERS = 8
QPS_SECONDS = 60.0  # open-loop rows: a minute of arrivals
QPS_REQUESTS = (100, 2000)
OFFLINE_CONCURRENCY = 1000  # a closed loop this wide is an offline run: every request at once

# vLLM's `vllm serve` batch defaults on GPUs it does not count as large (A100, and any under
# 70 GiB) and on the others: the vllm profile's own (engines.yaml small_gpu_* and max_num_*,
# with EngineArgs.get_batch_defaults as their source, EngineProfile.small_gpu the rule). A100
# joined the small ones with vllm-project/vllm PR #17885 ("[Perf] Use small
# max_num_batched_tokens for A100", merged 2025-05-09, first released in v0.9.0).
_VLLM = load_engine("vllm")
VLLM_SMALL_GPU = SchedulerConfig(
    max_num_seqs=int(_VLLM["small_gpu_max_num_seqs"]),
    max_num_batched_tokens=int(_VLLM["small_gpu_max_num_batched_tokens"]),
)
VLLM_SMALL_GPU_SINCE = (0, 9)
VLLM_LARGE_GPU = SchedulerConfig(
    max_num_seqs=int(_VLLM["max_num_seqs"]),
    max_num_batched_tokens=int(_VLLM["max_num_batched_tokens"]),
)
# vLLM 0.28.0 (2026-08-25) gives GPUs of >= 160 GiB (B200, B300, GB200, MI300X) 16384 tokens per
# step for the API server too (get_batch_defaults in the 0.28.0 wheel: "for GPUs like B200/B300
# with >= 160GB memory, use the largest defaults"; not in 0.27.1)
VLLM_HUGE_GPU = SchedulerConfig(max_num_batched_tokens=16384)
VLLM_HUGE_GPU_SINCE = (0, 28)
VLLM_HUGE_GIB = 160

# `vllm bench serve --dataset-name sharegpt` sends each sampled conversation's first turn as the
# prompt and its reply's token count as max_tokens, keeping only pairs that pass
# is_valid_sequence (vllm/benchmarks/datasets.py: both at least 4 tokens, the prompt at most
# 1024, the two at most 2048; SGLang's bench_serving sample_sharegpt_requests filters the same)
BENCH_SHAREGPT = re.compile(r"vllm bench serve\b.*\bShareGPT\b", re.IGNORECASE)
SHAREGPT_MIN, SHAREGPT_PROMPT_MAX, SHAREGPT_TOTAL_MAX = 4, 1024, 2048


class LoadError(Exception):
    """A load the row states but simspec cannot run (the message says why)."""


def workload(
    load_kind: str, load: float, get, dataset: str, notes: list[str], burst: bool = False
) -> WorkloadConfig:
    """The row's load and lengths as a simspec workload (``get``: a cell by column name;
    ``burst``: the row's static batch was sent as one burst)."""
    lengths = _lengths(get, dataset, notes)
    n = int(load)
    if load_kind == "single":
        if load and n != 1:  # QA: a load of 8 beside "single" ran at batch 1 without a word
            notes.append(
                f"load_kind single: one request at a time (the row's load {load:g} is not "
                "read; a batch of them is load_kind concurrency or static_batch)"
            )
        return WorkloadConfig(
            concurrency=1, requests=SINGLE_REQUESTS, turnovers=TURNOVERS, **lengths
        )
    if load_kind == "qps":
        if load < MIN_RATE:
            raise LoadError(
                f"a rate of {load:g} requests/s is below simspec's lowest, {MIN_RATE:g}"
            )
        requests = min(max(QPS_REQUESTS[0], int(load * QPS_SECONDS)), QPS_REQUESTS[1])
        # a serving benchmark (bench_serving --request-rate) sends its prompts to a cold server
        # and reports over all of them: simulate that run as it was made, not a steady state
        return WorkloadConfig(
            arrival="poisson", rate=load, requests=requests, measure="whole", **lengths
        )
    if (load_kind == "static_batch" and burst) or n >= OFFLINE_CONCURRENCY:
        # every request at once, timed from the start to the last one out (a closed loop with
        # nothing to refill: the engine's limits queue what does not fit)
        return WorkloadConfig(concurrency=n, requests=n, measure="whole", **lengths)
    sent = prompts_sent(get("notes"))
    if load_kind == "concurrency" and sent is not None and sent > n:
        # a benchmark of a stated number of prompts at a client concurrency (vllm bench serve
        # --num-prompts N --max-concurrency n): timed from the first request to the last one
        # out, its start and drain included, as the benchmark's duration is (QA: its steady
        # window read 8 % above such a run of 100 prompts at 8)
        notes.append(
            f"{sent} prompts at concurrency {n}, timed over the whole run as the benchmark "
            "times it (start and drain included)"
        )
        return WorkloadConfig(concurrency=n, requests=sent, measure="whole", **lengths)
    # a static batch over a dataset or a closed loop: hold the batch at n (a finished request is
    # replaced) and measure its steady window
    return WorkloadConfig(
        concurrency=n, requests=max(MIN_REQUESTS, 3 * n), turnovers=TURNOVERS, **lengths
    )


def prompts_sent(notes: str) -> int | None:
    """The number of prompts a benchmark run sent, as its notes state it (None: not stated)."""
    found = re.search(r"--num-prompts\s+(\d[\d,]*)|\b(\d[\d,]*)\s+prompts\b", notes or "")
    if found is None:
        return None
    return int((found.group(1) or found.group(2)).replace(",", ""))


def _lengths(get, dataset: str, notes: list[str]) -> dict[str, Any]:
    for cell in ("prompt_len", "output_len"):  # QA: "abc" and "0" had read as unstated
        text = get(cell).strip()
        if text and not (number(text) or 0) > 0:
            raise LoadError(f"{cell} {text!r} is not a positive number of tokens")
    prompt, output = number(get("prompt_len")), number(get("output_len"))
    bench = BENCH_SHAREGPT.search(get("notes")) or prompts_sent(get("notes")) is not None
    if prompt and output and dataset == "sharegpt" and bench:
        # a serving benchmark's prompts sampled from ShareGPT (named, or a run of a stated
        # number of prompts): their lengths differ (QA: rows whose notes did not name vllm
        # bench serve ran every request at the mean, and prefilled in lockstep)
        p_cv, o_cv = sharegpt_spread()
        notes.append(
            f"ShareGPT lengths spread as the packaged sharegpt trace's pairs that the serving "
            f"benchmarks' filter keeps (vllm bench serve, SGLang bench_serving; cv {p_cv:.2f} "
            f"prompt, {o_cv:.2f} output, lognormal), at the row's means"
        )
        return {
            "lengths_from": None,
            "prompt": LengthSpec(
                dist="lognormal", mean=prompt, cv=p_cv, min=SHAREGPT_MIN, max=SHAREGPT_PROMPT_MAX
            ),
            "output": LengthSpec(
                dist="lognormal",
                mean=output,
                cv=o_cv,
                min=SHAREGPT_MIN,
                max=SHAREGPT_TOTAL_MAX - SHAREGPT_MIN,
            ),
        }
    if prompt and output:
        return {
            "lengths_from": None,
            "prompt": LengthSpec(mean=prompt),
            "output": LengthSpec(mean=output),
        }
    trace = dataset if dataset in TRACE_DATASETS else "sharegpt"
    if prompt or output:  # the side stated, and the trace's spread for the other (QA: both
        # had come from the trace, a 1,000-token prompt_len run on ShareGPT's)
        given, missing = ("prompt_len", "output_len") if prompt else ("output_len", "prompt_len")
        mean, cv, top = trace_side(trace, missing.split("_")[0])
        notes.append(
            f"{given} {prompt or output:g} without {missing}: the {trace} trace's "
            f"{missing.split('_')[0]} lengths (mean {mean:.0f}, cv {cv:.2f}, lognormal) with "
            f"the {given} given"
        )
        other = LengthSpec(dist="lognormal", mean=mean, cv=cv, max=top)
        stated = LengthSpec(mean=prompt or output)
        return {
            "lengths_from": None,
            "prompt": stated if prompt else other,
            "output": other if prompt else stated,
        }
    if trace != dataset:
        notes.append(f"lengths unknown: the {trace} trace's")
    return {"lengths_from": trace}


@cache
def trace_side(trace: str, side: str) -> tuple[float, float, int]:
    """(mean, coefficient of variation, largest) of one side (``prompt`` or ``output``) of a
    packaged trace's lengths."""
    records = load_trace(trace, first_method(trace), "workload.lengths_from")
    x = np.asarray(getattr(records, f"{side}_len"), dtype=float)
    return float(np.mean(x)), float(np.std(x) / np.mean(x)), int(np.max(x))


@cache
def sharegpt_spread() -> tuple[float, float]:
    """Coefficients of variation (prompt, output) of the packaged ShareGPT trace's records that
    pass the benchmark's filter: a row gives only mean lengths, and a burst's drain (its last
    requests decoding alone) and the queueing of its short requests behind long ones follow
    from the spread. The trace's outputs are a model's own replies to the ShareGPT prompts, the
    closest packaged record of the dataset's reply lengths."""
    records = load_trace("sharegpt", first_method("sharegpt"), "workload.lengths_from")
    p, o = records.prompt_len.astype(float), records.output_len.astype(float)
    keep = (
        (p >= SHAREGPT_MIN)
        & (o >= SHAREGPT_MIN)
        & (p <= SHAREGPT_PROMPT_MAX)
        & (p + o <= SHAREGPT_TOTAL_MAX)
    )
    return float(np.std(p[keep]) / np.mean(p[keep])), float(np.std(o[keep]) / np.mean(o[keep]))


# vLLM 0.20 raised CacheConfig.gpu_memory_utilization's default from 0.9 to 0.92
# (vllm/config/cache.py: "Field(default=0.9" in the 0.19.0 wheel, "default=0.92" in 0.20.0
# through 0.33.0); 0.34 leaves it unset, 0.92 unless its extensible KV cache (the default on
# CUDA) sizes the cache from measured memory at 1.0, which simspec does not model (QA)
VLLM_MEMORY_SINCE = (0, 20)
VLLM_MEMORY_SHARE = 0.92
VLLM_EXTENSIBLE_KV_SINCE = (0, 34)


def engine_batch_defaults(
    engine: str, version: str, gpu_id: str, gpu_gib: float
) -> tuple[SchedulerConfig | None, str]:
    """The batch limits (and memory share) the row's engine version sets by default where they
    differ from the engine profile's, with a note; (None, "") where they do not (or the version
    is unstated: the profile's defaults stand). A V0 row runs the ``vllm-v0`` profile
    (:func:`engine_version_profile`), whose defaults are V0's."""
    limits, said = _batch_defaults(engine, version, gpu_id, gpu_gib)
    release = _release(version) if engine == "vllm" else None
    if release is None or release < VLLM_MEMORY_SINCE:
        return limits, said
    share = f"gpu_memory_utilization {VLLM_MEMORY_SHARE} (vLLM 0.20+'s default)"
    if release >= VLLM_EXTENSIBLE_KV_SINCE:
        share += "; 0.34's extensible KV cache, sized from measured memory, is not modelled"
    limits = (limits or SchedulerConfig()).model_copy(
        update={"gpu_memory_utilization": VLLM_MEMORY_SHARE}
    )
    return limits, f"{said}; {share}" if said else f"vLLM {version}: {share}"


def _batch_defaults(
    engine: str, version: str, gpu_id: str, gpu_gib: float
) -> tuple[SchedulerConfig | None, str]:
    """:func:`engine_batch_defaults`' batch limits alone."""
    if engine != "vllm":
        return None, ""
    release = _release(version)
    if release is None:  # the profile's own per-GPU defaults (EngineProfile.batch_defaults)
        return None, ""
    if gpu_gib >= VLLM_HUGE_GIB and release >= VLLM_HUGE_GPU_SINCE:
        return VLLM_HUGE_GPU, (
            f"vLLM {version} defaults on {gpu_id}: max_num_batched_tokens "
            f"{VLLM_HUGE_GPU.max_num_batched_tokens} (EngineArgs.get_batch_defaults, GPUs of "
            f">= {VLLM_HUGE_GIB} GiB, 0.28+)"
        )
    if release < VLLM_SMALL_GPU_SINCE:
        if "a100" in gpu_id and gpu_gib >= _VLLM["large_gpu_min_gib"]:
            return VLLM_LARGE_GPU, (
                f"vLLM {version} defaults on {gpu_id}: max_num_seqs "
                f"{VLLM_LARGE_GPU.max_num_seqs}, max_num_batched_tokens "
                f"{VLLM_LARGE_GPU.max_num_batched_tokens} (before PR #17885 an A100-80GB took "
                "the large-GPU defaults)"
            )
        return None, ""
    if not _VLLM.small_gpu(gpu_id, gpu_gib):
        return None, ""
    return VLLM_SMALL_GPU, (
        f"vLLM {version} defaults on {gpu_id}: max_num_seqs {VLLM_SMALL_GPU.max_num_seqs}, "
        f"max_num_batched_tokens {VLLM_SMALL_GPU.max_num_batched_tokens} "
        "(EngineArgs.get_batch_defaults, A100 and GPUs under 70 GiB)"
    )


# vLLM 0.14.0 (2026-01-17) is the first release that schedules asynchronously by default (PR
# #27614) and keeps it under EAGLE/MTP speculation (PR #31998): simspec's scheduler.
# async_scheduling, which the vllm profile (fitted on 0.10.1) leaves off
VLLM_ASYNC_SINCE = (0, 14)
_ASYNC_FLAG = re.compile(r"--(no-)?async-scheduling\b")


def engine_async_scheduling(engine: str, version: str, notes: str) -> tuple[bool | None, str]:
    """Whether the row's vLLM ran with async scheduling where the vllm profile's default (off)
    does not say it: the serve command's own flag in the notes, else the version's default;
    (None, "") where neither says (an unstated version keeps the profile's)."""
    if engine != "vllm":
        return None, ""
    if flag := _ASYNC_FLAG.search(notes):
        on = flag.group(1) is None
        return on, f"async scheduling {'on' if on else 'off'} as the serve command sets"
    release = _release(version)
    if release is None or release < VLLM_ASYNC_SINCE:
        return None, ""
    return True, (
        f"vLLM {version.strip()} schedules asynchronously by default (0.14+: vLLM PRs #27614, "
        "#31998; kept under EAGLE/MTP only): scheduler.async_scheduling on"
    )


# vLLM 0.8.0 made the V1 engine the default (its release notes: "V1 is now enabled by default";
# EngineArgs._set_default_args_v1 in vllm/engine/arg_utils.py); a row that names V0, or a
# release before 0.8, ran the V0 engine
VLLM_V1_SINCE = (0, 8)
V0_NAMED = re.compile(r"\bV0\b")


# SGLang 0.5.11 (2026-05-07) turned its spec v2 worker on by default (SGLANG_ENABLE_SPEC_V2
# EnvBool(True) in python/sglang/srt/environ.py; False in 0.5.10): the overlap scheduler stays
# on under EAGLE, MTP and draft models, as the sglang-v2 profile runs them
SGLANG_SPEC_V2_SINCE = (0, 5, 11)


def engine_version_profile(engine: str, version: str) -> tuple[str, str]:
    """The engine profile of the row's engine version, with a note where it is not the
    engine's own: vLLM V0 rows run ``vllm-v0`` (its older MoE kernel), SGLang 0.5.11+ rows
    ``sglang-v2`` (overlap kept under speculation)."""
    if engine == "sglang":
        patch = release_tuple(version)
        if patch is not None and patch >= SGLANG_SPEC_V2_SINCE:
            return "sglang-v2", (
                f"engine profile sglang-v2: SGLang {version.strip()} keeps its overlap scheduler "
                "under EAGLE/MTP/draft models (spec v2, default from 0.5.11)"
            )
        return engine, ""
    if engine != "vllm":
        return engine, ""
    release = _release(version)
    if V0_NAMED.search(version) or (release is not None and release < VLLM_V1_SINCE):
        return "vllm-v0", (
            f"engine profile vllm-v0: vLLM {version.strip()} runs the V0 engine (its verify by "
            "batch expansion modelled; its heavier host work per step and the rest of its "
            "speculative worker not: steps a lower bound)"
        )
    return engine, ""


def _release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a stated release ("v0.11.0", "0.10.1rc1"), None for anything else."""
    patch = release_tuple(version)
    return None if patch is None else patch[:2]
