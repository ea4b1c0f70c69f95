"""One validation case -> the scenarios that predict it -> the predicted number.

A row is planned into a :class:`CasePlan` (the method's scenario and, for a speedup, its
baseline's), or skipped with a reason. All plans' scenarios are deduplicated by content and
simulated together; a scenario that cannot run skips only the rows that need it.

Acceptance, in the order the issue asks for: the packaged trace when ``uses_trace`` is yes;
else the row's ``measured_tau``, inverted for the row's K or tree; else the method's preset
for the dataset's domain. A ``tau`` row is never given its own measured τ (that would predict
the number from itself): it takes the preset.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from simspec.catalog.expert_locality import locality_note
from simspec.catalog.hardware import (
    alltoall_note,
    engine_ids,
    gpu_ids,
    load_engine,
    load_gpu,
    load_profile,
    release_tuple,
)
from simspec.catalog.methods import (
    DATASET_DOMAIN,
    DEFAULT_DRAFT_MODEL,
    TOKEN_REPLAYED,
    TRACE_DATASETS,
    acceptance_spread,
    as_engine_drafts,
    at_depth,
    draft_target_since,
    engine_chains,
    engine_picked_shape,
    has_domain_preset,
    method_defaults,
    method_info,
    method_presets,
    preset_acceptance,
    stated_topk,
    tau_measured_with,
    trace_as_tree,
    trace_setup,
    tree_capacity,
    with_engine_shape,
)
from simspec.catalog.models import load_model
from simspec.catalog.servers import cross_node_note
from simspec.catalog.traces import first_method, load_trace
from simspec.config import (
    MAX_K,
    AcceptanceConfig,
    MethodConfig,
    Scenario,
    SchedulerConfig,
    WorkloadConfig,
)
from simspec.engine.build import check_draft_tp, setup_replica
from simspec.engine.costmodel import BatchShape
from simspec.engine.costmodel.linear_attention import LINEAR_STATE_NOTE
from simspec.engine.metrics import RunSummary
from simspec.engine.speculators import SPECULATORS
from simspec.errors import InputError, ScenarioError, validation_message
from simspec.studies.fleet import SLO_MIN_MS
from simspec.studies.provenance import mamba_radix_note
from simspec.studies.runs.job import Failed
from simspec.studies.runs.keys import scenario_key
from simspec.studies.validation.assume import (
    UNSTATED,
    assumed_cells,
    assumed_flags,
    fill_unstated,
)
from simspec.studies.validation.cases import LOAD_KINDS, METRICS, number, whole
from simspec.studies.validation.gpus import fewest_gpus, fit_by_layer_split
from simspec.studies.validation.loads import (
    LoadError,
    engine_async_scheduling,
    engine_batch_defaults,
    engine_version_profile,
    workload,
)
from simspec.studies.validation.setups import (
    notes_precision,
    other_baseline,
    sent_as_burst,
    serve_expert_parallel,
    serve_limits,
    serve_prefix_caching,
    stated_draft_tp,
    trtllm_chunked,
    trtllm_serving,
    unmodelled_attention,
    unmodelled_serving,
    unmodelled_target,
)

BASELINES = ("same-engine-no-spec", "hf-vanilla")
SEED = 0
NODE_GPUS = 8  # the GPUs of one node, the most a stated GPU count is read as one TP group
# vLLM's and SGLang's serving benchmarks print "Mean TTFT (ms)" first and the median beside it:
# a ttft_ms row is scored on the mean unless its notes name the median (QA: the median had
# been scored against the printed means, which run 0.93-1.36x the medians)
TTFT_STATISTIC = re.compile(r"\b(mean|median)\s+TTFT\b", re.IGNORECASE)
TTFT_NOTE = "TTFT: the mean over the run's requests (as the serving benchmarks print first)"
TTFT_MEDIAN_NOTE = "TTFT: the median over the run's requests, as the notes name"
# vllm bench serve prints "Mean E2EL (ms)" and "Median E2EL (ms)" (SGLang's bench_serving the
# same pair): an e2e_s row is scored on the statistic its notes name, else on the mean, the
# figure both print first; simspec has both over the measured requests
E2E_STATISTIC = re.compile(r"\b(mean|median|p50)\b", re.IGNORECASE)
E2E_MEDIAN_NOTE = "E2E: the median over the run's requests (the statistic the notes name first)"
E2E_MEAN_NOTE = (
    "E2E: the mean over the run's requests (the notes name no statistic: the mean, "
    "as vllm bench serve prints first)"
)
# Tree rows that give no depth or budget, for methods whose packaged default is a chain: the
# reference implementation's defaults. EAGLE-3: SafeAILab/EAGLE eagle/model/ea_model.py,
# EaModel.from_pretrained(use_eagle3=True, total_token=60, depth=7, top_k=10), dynamic tree.
TREE_DEFAULTS = {"eagle3": {"tree": "dynamic", "k": 7, "tree_nodes": 60, "tree_topk": 10}}


# a serve command that turns vLLM's chunked prefill on or off by name
V0_CHUNKING = re.compile(r"--(?:no-)?enable-chunked-prefill\b")


class Skip(Exception):  # a row outcome, not an error
    """A row simspec cannot express; the message is its ``skip_reason``."""


@dataclass
class CasePlan:
    """How one row is predicted."""

    metric: str
    measured: float
    scenario: Scenario
    baseline: Scenario | None = None
    acceptance_source: str = ""
    assumptions: list[str] = field(default_factory=list)
    # the statistic a row is scored on: e2e_s and tpot_ms rows' mean or median; a speedup's
    # ratio (throughput, tpot, mean or median latency)
    statistic: str = "mean"


def plan_case(
    row: dict[str, str],
    assume_gpu: str | None = None,
    *,
    assume: Mapping[str, str] | None = None,
) -> CasePlan:
    """The scenarios for one row, or :class:`Skip` naming the field that stops it.

    assume: cells to fill where the row leaves them unstated (``--assume FIELD=VALUE``, each
    fill noted in ``assumptions``); assume_gpu: the same for ``gpu`` alone."""
    cells, flags = assumed_cells(assume, assume_gpu), assumed_flags(assume, assume_gpu)
    row, assumptions = fill_unstated(row, cells, flags)
    # a GPU count written as unknown is one unstated (the fewest-GPU rule below), as --assume
    # reads it
    row |= {c: "" for c in ("tp", "num_gpus") if str(row.get(c, "")).strip().lower() in UNSTATED}
    get = _cells(row)
    metric = get("metric")
    if metric not in METRICS:
        raise Skip(f"metric {metric!r} is not one simspec predicts ({', '.join(METRICS)})")
    measured = number(get("measured_value"))
    if measured is None or measured <= 0:
        raise Skip(f"measured_value {get('measured_value')!r} is not a positive number")
    # the least a latency row can measure (ms): the least SLO each takes, below any LLM step
    if metric in SLO_MIN_MS and measured < SLO_MIN_MS[metric]:
        # a latency no GPU serving an LLM reaches: a value in seconds, most likely (QA: a TPOT
        # of 0.00728 was scored at +105,957 % and carried the file's MAPE)
        raise Skip(
            f"measured_value {measured:g} for {metric} is below {SLO_MIN_MS[metric]:g} ms, no "
            "LLM step's: a value in seconds? (the column is in the metric's unit, ms)"
        )
    method = get("method")
    if method not in SPECULATORS:
        raise Skip(f"method {method!r} is not modelled (simspec methods lists them)")
    model, notes = get("target_model"), get("notes")
    precision, why, said = notes_precision(notes, model)
    why = why or unmodelled_target(model, notes) or unmodelled_serving(notes)
    if why:
        raise Skip(why)
    _known(load_model, model, "unknown model", "simspec models lists the presets")
    if said:
        assumptions.append(said)
    gpu = get("gpu")
    if gpu.strip().lower() in UNSTATED:  # a hint, not only a refusal (QA)
        raise Skip(f"gpu {gpu!r} not stated: give it with --assume gpu=ID ({', '.join(gpu_ids())})")
    _known(load_gpu, gpu, "unsupported GPU", f"choose {', '.join(gpu_ids())}")
    if note := load_profile(gpu).transferred_note():
        assumptions.append(note)
    if load_model(model).linear_layers:
        assumptions.append(LINEAR_STATE_NOTE)
    if note := locality_note(model):
        assumptions.append(note)
    engine = get("engine")
    _known(load_engine, engine, "no engine profile for", f"choose {', '.join(engine_ids())}")
    mla = load_model(model).is_mla
    if why := unmodelled_attention(notes, engine, load_gpu(gpu).arch, mla, get("engine_version")):
        raise Skip(why)
    engine, said = engine_version_profile(engine, get("engine_version"))
    if said:
        assumptions.append(said)
    if load_engine(engine).flag("v0_scheduler") and V0_CHUNKING.search(notes):
        # V0 decides chunked prefill by its defaults (engines.yaml v0_scheduler); a serve
        # command that sets it is a deployment simspec cannot state
        raise Skip(
            "the serve command sets vLLM V0's chunked prefill, which simspec runs only as V0's "
            "defaults decide it (engines.yaml v0_scheduler)"
        )
    if engine == "trtllm":
        why, said_all = trtllm_serving(notes)
        if why:
            raise Skip(why)
        assumptions.extend(said_all)

    load_kind = get("load_kind")
    if load_kind not in LOAD_KINDS:
        raise Skip(
            f"load_kind {load_kind!r} is not one of {', '.join(LOAD_KINDS)} (an unstated one: "
            "--assume load_kind=KIND)"
        )
    load = number(get("load"))
    if load is None and load_kind == "single" and not get("load").strip():
        load = 1.0  # unstated; a cell that is not a number is refused below (QA: read as 1)
    if load is None or load <= 0 or (load_kind != "qps" and load != int(load)):
        raise Skip(
            f"load {get('load')!r} is not a positive number (a whole one unless load_kind is qps)"
        )
    tp, pp = whole(get("tp")) or 1, 1
    gpus = whole(get("num_gpus"))
    for cell in ("tp", "num_gpus"):
        if get(cell) and not (whole(get(cell)) or 0) > 0:
            raise Skip(f"{cell} {get(cell)!r} is not a count of GPUs (a whole number, 1 or more)")
    if get("tp") and gpus and gpus != tp:
        # one replica over tp GPUs is what a row runs; other GPUs would be replicas or stages
        # the row does not describe
        raise Skip(f"tp {tp} and num_gpus {gpus} disagree: one replica runs on tp GPUs")
    if not get("tp") and (gpus or 1) > 1:
        if engine == "hf":
            pp = gpus  # the HF reference code loads with device_map="auto": layers split in order
            assumptions.append(f"HF splits the layers over the {gpus} GPUs (device_map='auto')")
        elif gpus > NODE_GPUS:
            raise Skip(
                f"num_gpus {gpus} with no tp: more than one node, and how the nodes split the "
                "model is not stated"
            )
        else:  # a serving engine spreads one replica over a node's GPUs by tensor parallelism
            tp = gpus
            assumptions.append(f"TP not stated: tp={gpus}, the row's {gpus} GPUs")
    draft_tp = stated_draft_tp(notes, tp, method)
    temperature = number(get("temperature"))
    if temperature is None:
        if get("temperature").strip().lower() not in UNSTATED:  # a range: no one number
            raise Skip(f"temperature {get('temperature')!r} is not one number")
        temperature = 0.0
        assumptions.append("temperature unstated: greedy")
    if get("uses_trace").strip().lower() not in TRACE_WORDS:
        # QA: "y" was read as no without a word
        raise Skip(f"uses_trace {get('uses_trace')!r} is not yes or no")
    tau_cell = get("measured_tau").strip()
    if number(tau_cell) is None and tau_cell.lower() not in (*UNSTATED, "nan"):
        # QA: "~3.1" or "3.0-3.2" ran on the preset, as if no τ had been measured
        raise Skip(f"measured_tau {tau_cell!r} is not one number")
    dataset = get("dataset") or "unknown"
    if metric == "step_time_ms" and method != "autoregressive":
        # the row times one plain decode step (_step_time_ms); a speculative method's step is
        # its draft and verify, which it would not price (QA: eagle3 read as plain decoding)
        raise Skip(
            f"a step_time_ms row is one plain decode step; {method}'s step (its draft and "
            "verify) is not what simspec prices there"
        )
    if metric == "step_time_ms":
        # one decode step at batch `load` with `context_len` tokens of KV per sequence
        context = number(get("context_len"))
        if not context or context < 1:
            raise Skip("a step_time_ms row needs context_len (the KV length per sequence)")
        if load_kind == "qps":
            raise Skip("a step_time_ms row's batch is its load: a request rate gives none")
        row = {**row, "prompt_len": str(context), "output_len": "1"}
        get = _cells(row)
    elif not get("prompt_len").strip() and (context := number(get("context_len"))):
        # the contract's context_len: the prefill length of a long-context run (QA: read by
        # step_time_ms rows alone, the rest ran at the trace's lengths without a word)
        if context < 1:
            raise Skip(f"context_len {get('context_len')!r} is not a positive length")
        row = {**row, "prompt_len": str(context)}
        get = _cells(row)
        assumptions.append(f"prompt_len unstated: the context_len {context:g} as the prompt")
    if metric == "ttft_ms":
        if not number(get("prompt_len")):
            raise Skip("a ttft_ms row needs prompt_len: the time to a first token is its prefill")
    statistic = e2e_statistic(notes)
    if metric == "ttft_ms":
        statistic = named_first(TTFT_STATISTIC, notes)
        assumptions.append(TTFT_MEDIAN_NOTE if statistic == "median" else TTFT_NOTE)
    if metric == "e2e_s" and statistic == "mean" and not re.search(r"\bmean\b", notes, re.I):
        assumptions.append(E2E_MEAN_NOTE)
    elif metric == "e2e_s" and statistic == "median":
        assumptions.append(E2E_MEDIAN_NOTE)
    try:
        work = workload(load_kind, load, get, dataset, assumptions, sent_as_burst(notes))
    except LoadError as exc:
        raise Skip(str(exc)) from None
    if metric == "speedup" and work.arrival == "poisson":
        # both serve the offered rate, so the gain is in latency: the ratio the notes name
        statistic = open_loop_speedup(notes)
        assumptions.append(f"speedup at a request rate: {SPEEDUP_RATIOS[statistic]}")
    elif metric == "speedup" and load_kind == "single" and per_question_harness(row):
        # the research harnesses' speedup, one request at a time: the mean of per-question
        # speeds over the baseline's (QA: scored as total tokens over total time)
        statistic = "request_speed"
        assumptions.append(f"speedup: {SPEEDUP_RATIOS[statistic]}")
    elif metric == "speedup":
        # a closed loop's speedup is its throughput ratio unless the notes define it as a
        # TPOT or a latency ratio (QA: those rows had been scored as throughput ratios)
        statistic = closed_loop_speedup(notes)
        if statistic != "throughput":
            assumptions.append(f"speedup: {SPEEDUP_RATIOS[statistic]}")
    if metric == "tpot_ms":
        # the mean unless the notes name the median (QA: "median TPOT" rows read the mean)
        statistic = named_first(TPOT_STATISTIC, notes)
        if statistic == "median":
            assumptions.append("TPOT: the median over requests, as the notes name")
    if metric == "tau" and _uses_trace(get) and dataset in TRACE_DATASETS:
        # a τ computed from a trace is pooled over every request of it, at its own lengths
        records = load_trace(dataset, first_method(dataset)).num_requests
        work = WorkloadConfig(
            concurrency=1, lengths_from=dataset, requests=records, measure="whole"
        )
        assumptions.append(f"every request of the {dataset} trace, at its own lengths")

    deploy: dict[str, Any] = {
        "model": model,
        "gpu": gpu,
        "tp": tp,
        "pp": pp,
        "engine": engine,
        "precision": precision,
        "workload": work,
        "temperature": temperature,
        "seed": SEED,
    }
    limits, said = engine_batch_defaults(
        engine, get("engine_version"), gpu, load_gpu(gpu).budget_bytes / 2**30
    )
    if limits is not None:
        deploy["scheduler"] = limits
        assumptions.append(said)
    if stated := serve_limits(notes):
        base = deploy.get("scheduler") or SchedulerConfig()
        deploy["scheduler"] = SchedulerConfig.model_validate({**base.model_dump(), **stated})
        assumptions.append(
            ", ".join(f"{k} {v}" for k, v in stated.items()) + " as the notes' serve command sets"
        )
    if engine == "trtllm" and trtllm_chunked(notes):
        base = deploy.get("scheduler") or SchedulerConfig()
        deploy["scheduler"] = base.model_copy(update={"enable_chunked_prefill": True})
    if (prefix := serve_prefix_caching(notes)) is not None:
        base = deploy.get("scheduler") or SchedulerConfig()
        deploy["scheduler"] = base.model_copy(update={"enable_prefix_caching": prefix})
        assumptions.append(f"prefix caching {'on' if prefix else 'off'} as the serve command sets")
    scheduler = deploy.get("scheduler") or SchedulerConfig()
    if note := mamba_radix_note(load_engine(engine), load_model(model), scheduler):
        assumptions.append(note)
    architecture = load_model(model).architecture
    since = draft_target_since(method, engine, architecture)
    release = release_tuple(get("engine_version") or "")
    if since and release and release < (release_tuple(since) or release):
        raise Skip(
            f"{engine} {get('engine_version')} refuses {method} on {architecture} (from "
            f"{since}: simspec/data/draft_targets.yaml)"
        )
    on, said = engine_async_scheduling(engine, get("engine_version"), notes)
    if on is not None:
        base = deploy.get("scheduler") or SchedulerConfig()
        deploy["scheduler"] = base.model_copy(update={"async_scheduling": on})
        assumptions.append(said)
    if load_kind == "static_batch" and work.measure == "steady" and method != "autoregressive":
        # a paper's "batch size N" ran N sequences together (its harness set the engine's
        # running limit, or bypassed the scheduler): an engine default that caps speculative
        # batches lower (SGLang's 48) did not hold there
        base = deploy.get("scheduler") or SchedulerConfig()
        cap = load_engine(engine).speculative_cap(base.max_num_seqs, load_gpu(gpu))
        if cap is not None and int(load) > cap:
            deploy["scheduler"] = base.model_copy(update={"max_num_seqs": int(load)})
            assumptions.append(
                f"batch size {int(load)} ran whole: the harness lifted {engine}'s cap of {cap} "
                "running requests under speculative decoding"
            )
    ep = serve_expert_parallel(notes, tp)
    if ep is not None and ep > 1 and (get("tp") or gpus) and load_model(model).is_moe:
        deploy["ep"] = ep
        assumptions.append(f"ep={ep}: experts whole on each GPU, as the notes' serve command sets")
        if note := alltoall_note(gpu):
            assumptions.append(note)
    try:
        cfg, source = _method(row, method, dataset, metric, temperature, assumptions, engine)
        if draft_tp is not None:
            cfg = MethodConfig.model_validate(
                {**cfg.model_dump(exclude_unset=True), "draft_tp": draft_tp}
            )
            assumptions.append(
                f"the draft at TP={draft_tp} beside the target's {tp}, as the notes say"
            )
        scenario = Scenario(**deploy, method=cfg)
        baseline = None
        if metric == "speedup":
            base = get("baseline")
            other = other_baseline(base)
            if base not in BASELINES and other is None:
                raise Skip(
                    f"baseline {base!r} is not a configuration simspec runs "
                    f"(it runs {', '.join(BASELINES)}, or 'other: <vLLM|SGLang> <version> "
                    "[<precision>] no-spec')"
                )
            if other is not None:
                # a server of its own: its version's profile and batch defaults, none of the
                # notes' serve flags (the speculative server's; QA: they had sped the vLLM
                # baseline of an SGLang row 2.31x -> 2.77x, and its version was dropped)
                version = other.pop("version")
                other["engine"], said_v = engine_version_profile(other["engine"], version)
                # (the serve command's expert parallelism too: QA, latent)
                base_deploy = {k: v for k, v in deploy.items() if k not in ("scheduler", "ep")}
                base_deploy |= other
                mem = load_gpu(gpu).budget_bytes / 2**30
                limits, _ = engine_batch_defaults(other["engine"], version, gpu, mem)
                if limits is not None:
                    base_deploy["scheduler"] = limits
                baseline = Scenario(**base_deploy)
                assumptions.append(
                    "baseline: "
                    + ", ".join(f"{k} {v}" for k, v in other.items())
                    + f" (version {version}, its own defaults), no spec"
                    + (f"; {said_v}" if said_v else "")
                )
            else:
                base_engine = "hf" if base == "hf-vanilla" else engine
                baseline = Scenario(**{**deploy, "engine": base_engine})
        if not get("tp") and not gpus:
            fit = fit_by_layer_split if engine == "hf" else fewest_gpus
            scenario, baseline = fit(scenario, baseline, assumptions)
        check_draft_tp(scenario)
    except InputError as exc:
        raise Skip(exc.message if exc.field.startswith("methods") else str(exc)) from None
    except ValueError as exc:  # pydantic: a field out of range
        raise Skip(_first_error(exc)) from None
    gpu_spec = load_gpu(scenario.gpu)
    if note := cross_node_note(gpu_spec, scenario.tp, scenario.ep, scenario.engine):
        assumptions.append(note)
    return CasePlan(metric, measured, scenario, baseline, source, assumptions, statistic)


def _cells(row: dict[str, str]):
    """Reads a row's cell as stripped text ("" when the column is absent)."""
    return lambda col: str(row.get(col, "")).strip()


def _known(loader, name: str, what: str, hint: str) -> None:
    """Skip a row whose ``name`` ``loader`` does not know, saying what it takes (QA: "unsupported
    GPU 'H100_SXM'" named none)."""
    try:
        loader(name)
    except InputError:
        raise Skip(f"{what} {name!r}: {hint}") from None


def _first_error(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        return validation_message(exc)
    return str(exc).splitlines()[0]


# what a uses_trace cell may say (anything else is refused: QA, "y" was read as no)
TRACE_WORDS = ("yes", "true", "1", "no", "false", "0", "")


def _uses_trace(get) -> bool:
    return get("uses_trace").strip().lower() in ("yes", "true", "1")


# how a row's notes state vLLM's n-gram sizes: "ngram [3,5]" (the SuffixDecoding artifact's
# [min,max] labels) or the config keys / serve flags themselves; the first statement counts
_LOOKUP_PAIR = re.compile(r"\bn-?gram \[(\d+),\s*(\d+)\]", re.IGNORECASE)
_LOOKUP_KEY = re.compile(r"prompt[_-]lookup[_-](min|max)\W{0,3}(\d+)")


def stated_lookup_sizes(notes: str | None) -> dict[str, int]:
    """The n-gram prompt_lookup_min/max a row's notes state (empty where they state none, and
    the row then runs vLLM's default, as its engine would)."""
    text = notes or ""
    if pair := _LOOKUP_PAIR.search(text):
        return {"prompt_lookup_min": int(pair[1]), "prompt_lookup_max": int(pair[2])}
    keys = {f"prompt_lookup_{k}": int(v) for k, v in reversed(_LOOKUP_KEY.findall(text))}
    return keys if len(keys) == 2 else {}


def _method(
    row: dict[str, str],
    name: str,
    dataset: str,
    metric: str,
    temperature: float,
    notes: list[str],
    engine: str,
) -> tuple[MethodConfig, str]:
    """The row's method in its stated shape (unstated: the method's default as ``engine``
    drafts it), with acceptance by the issue's precedence."""
    if name == "autoregressive":
        if metric == "speedup":
            raise Skip("a speedup of plain decoding over itself is 1 by definition: no prediction")
        return MethodConfig(name=name, k=0), ""
    get = _cells(row)
    if (said := get("spec_shape").strip().lower()) not in ("", "chain", "tree"):
        raise Skip(f"spec_shape {said!r}: {name} drafts a chain or a tree")
    fields = method_defaults(name)
    if _uses_trace(get):  # the setup the packaged trace was recorded with (n-gram: 3/5)
        fields.update(trace_setup(name))
    if name == "ngram" and (sizes := stated_lookup_sizes(get("notes"))):
        fields.update(sizes)
        notes.append(f"n-gram lookup sizes {sizes['prompt_lookup_min']}/"
                     f"{sizes['prompt_lookup_max']} as the row's notes state")  # fmt: skip
    shapes = method_info(name).shapes
    shape, k = get("spec_shape").strip().lower(), whole(get("k"))
    nodes, topk = whole(get("tree_nodes")), whole(get("tree_topk"))
    for cell, value in (("k", k), ("tree_nodes", nodes), ("tree_topk", topk)):
        if value is None and get(cell).strip():
            raise Skip(f"{cell} {get(cell)!r} is not a whole number")
        if cell != "k" and value is not None and value < 1:
            raise Skip(f"{cell} {value} is not a positive count")
    if k is not None and k > MAX_K:  # QA: k 65 was refused as "tau_k: ... <= 64"
        raise Skip(f"k {k} is past the longest draft simspec runs ({MAX_K})")
    stated = [f"{c} {v}" for c, v in (("tree_nodes", nodes), ("tree_topk", topk)) if v]
    if stated and shape == "chain":  # QA: the tree cells were dropped without a word
        raise Skip(
            f"spec_shape chain with {' and '.join(stated)}: a chain has no tree budget (give "
            "spec_shape tree, or leave the tree cells empty)"
        )
    if stated and not shape:  # a tree budget states a tree (QA: the default tree ran instead)
        shape = "tree"
        notes.append(f"spec_shape unstated: a tree, as the row's {' and '.join(stated)} state")
    chosen = ""
    if shape not in ("chain", "tree") and not (k or nodes or topk):
        if (picked := _engine_chosen_shape(row, name, engine)) is not None:
            picked_fields, chosen = picked
            if picked_fields is None:
                raise Skip(f"{chosen}: a tree, and simspec drafts {name} as chains only")
            fields = with_engine_shape(fields, picked_fields)
            shape = "picked"
    if shape == "chain":
        for key in ("tree", "tree_nodes", "tree_topk"):
            fields.pop(key, None)
        if k:
            fields["k"] = k
    elif shape == "tree" and shapes == ("chain",):
        notes.append(f"{name} drafts chains: the row's tree is taken as the default chain")
    elif shape == "tree":
        if fields.get("tree") in (None, "chain"):
            fields.update(
                TREE_DEFAULTS.get(name) or {"tree": "dynamic" if "dynamic" in shapes else "static"}
            )
        if topk:
            fields["tree_topk"] = topk
        if k:
            fields = at_depth(fields, k)  # a packaged budget the stated depth cannot draft: cut
        if nodes:
            fields["tree_nodes"] = _stated_nodes(nodes, fields, engine, notes)
        if fields["tree"] != "chain" and not fields.get("tree_nodes"):
            fields["tree_nodes"] = max(fields["k"], nodes or 0)
    if k == 0:
        raise Skip("k is 0: no speculation to predict")
    draft = get("draft_model")
    if name == "draft_model":
        if draft and draft not in ("unknown", "self"):
            fields["draft_model"] = draft
        elif "draft_model" not in fields:  # QA: ran on the packaged draft without a word
            notes.append(f"draft_model unstated: the packaged default {DEFAULT_DRAFT_MODEL}")
        fields.setdefault("draft_model", DEFAULT_DRAFT_MODEL)
    drafted = ""
    if chosen:
        notes.append(f"shape unstated: {chosen}")
    elif shape not in ("chain", "tree"):
        fields, drafted = as_engine_drafts(fields, engine_chains(name, engine))
        if k:  # a stated depth holds whatever the shape
            fields = at_depth(fields, k)
            drafted = f"{drafted}; " if drafted else ""
            drafted += f"{_describe(fields)} at the stated k {k}"
        if drafted:
            notes.append(f"shape unstated: {drafted}")
    if not (drafted or chosen) and (shape not in ("chain", "tree") or (not k and not nodes)):
        notes.append(
            f"shape unstated: {_describe(fields)} (the method's default)"
            if shape not in ("chain", "tree")
            else f"depth unstated: {_describe(fields)}"
        )
    domain = DATASET_DOMAIN.get(dataset)
    if name in TOKEN_REPLAYED and not _uses_trace(get) and not number(get("measured_tau")):
        _lookup_streams(name, dataset, domain)
    if domain is None:
        domain = "chat"
        notes.append(f"dataset {dataset!r} has no preset domain: chat assumed")
    acc, source = _acceptance(row, name, dataset, domain, metric, fields, temperature)
    if acc.tokens and acc.tokens != dataset:
        notes.append(
            f"no token streams of {dataset!r}: {name} replayed on the {acc.tokens} ones (the "
            f"{domain} domain's), taken to repeat their prompt as much"
        )
    return MethodConfig(**fields, acceptance=acc), source


def _engine_chosen_shape(
    row: dict[str, str], name: str, engine: str
) -> tuple[dict[str, Any] | None, str] | None:
    """The draft shape the row's engine picks itself when its server is given none
    (:func:`engine_picked_shape`, at the row's release), and how the row's assumptions say
    it; None where the engine keeps no such default."""
    get = _cells(row)
    release = release_tuple(get("engine_version") or "")
    architecture = load_model(get("target_model")).architecture
    picked = engine_picked_shape(name, engine, architecture, release)
    if picked is None:
        return None
    fields, said = picked
    if release is None:
        said += f" (version unstated: the newest the {engine} profile stands for)"
    return fields, said


def _stated_nodes(nodes: int, fields: dict[str, Any], engine: str, notes: list[str]) -> int:
    """The draft tokens a row's stated tree budget means to simspec (``tree_nodes``: drafted
    tokens, the verify pass adding the root). SGLang's ``--speculative-num-draft-tokens``
    counts the root: its verify pass runs that many tokens per request, the last verified
    token and ``num_verify_tokens - 1`` drafted ones (speculative/eagle_utils.py
    ``build_tree_kernel_efficient_preprocess``: ``torch.topk(score_list, num_verify_tokens -
    1)``, then ``torch.cat((verified_id.unsqueeze(1), draft_tokens), dim=1)``), so a SGLang
    row's budget is one less. A budget beyond what the tree's depth and top-k can draft is
    what the drafter can draft (:func:`tree_capacity`), said in the assumptions."""
    drafted = nodes - 1 if load_engine(engine).family == "sglang" else nodes
    if drafted != nodes:
        notes.append(
            f"SGLang num-draft-tokens {nodes} counts the verified root: {drafted} drafted tokens"
        )
    depth = fields["k"]
    topk = stated_topk(fields.get("tree_topk"), drafted, depth)
    capacity = tree_capacity(topk, depth, fields["tree"] == "dynamic")
    if drafted > capacity:
        notes.append(
            f"{drafted} drafted tokens exceed what a depth-{depth}, top-{topk} tree drafts: "
            f"{capacity} taken"
        )
        drafted = capacity
    return max(drafted, depth)


# Code datasets whose outputs are new code written from a description (HumanEval: a function
# from its docstring; Chen et al., arXiv 2107.03374), not an edit that copies given code
# (InstructCoder, BlazEdit, SWE-bench's patches, whose context lines quote the repository).
WRITES_NEW_CODE = frozenset({"humaneval"})


def _lookup_streams(name: str, dataset: str, domain: str | None) -> None:
    """Refuse a lookup drafter's row whose dataset's domain has no packaged acceptance of its
    own (:func:`has_domain_preset`). Its acceptance is how much the output repeats the prompt
    and earlier text, which another domain's text does not tell: suffix decoding on Llama-3.1-8B
    measured 3.3x at batch 1 on BlazEdit code edits and 1.25x on Spec-Bench's mixed tasks
    (SuffixDecoding artifact, sfc-gh-goliaro/suffix-decoding-artifact
    blog-post2/results_summary.md)."""
    if domain is None:
        raise Skip(
            f"{name} proposes from the text itself and {dataset!r} has no domain whose packaged "
            "token streams could stand for it (simspec methods lists the datasets)"
        )
    if dataset in WRITES_NEW_CODE:
        raise Skip(
            f"{name} proposes from the text itself and {dataset!r} writes new code from a "
            "description, while the packaged code streams (InstructCoder) edit given code and "
            "copy it: no stand-in (ngram measured 1.30x on HumanEval against 2.31x on SWE-bench "
            "in one deployment, Arctic Inference docs)"
        )
    if not has_domain_preset(name, domain):
        raise Skip(
            f"{name} proposes from the text itself and simspec packages no acceptance of the "
            f"{domain} domain of {dataset!r} (no token streams of it to replay, no published τ "
            "on it): another domain's text repeats itself differently"
        )


def _describe(fields: dict[str, Any]) -> str:
    tree = fields.get("tree", "chain")
    if tree == "chain":
        return f"chain k={fields['k']}"
    return (
        f"{tree} tree, depth {fields['k']}, {fields.get('tree_nodes')} nodes, "
        f"top-{fields.get('tree_topk')}"
    )


def _acceptance(
    row: dict[str, str],
    name: str,
    dataset: str,
    domain: str,
    metric: str,
    fields: dict[str, Any],
    temperature: float,
) -> tuple[AcceptanceConfig, str]:
    get = _cells(row)
    if _uses_trace(get):
        if dataset not in TRACE_DATASETS:
            raise Skip(f"uses_trace is yes but no packaged trace is named {dataset!r}")
        # a tau row measured on the trace (or its token streams) it is predicted from checks
        # the replay, not a prediction (OWN_SOURCE: left out of the headline error)
        own = f" {OWN_SOURCE}" if metric == "tau" else ""
        if name in TOKEN_REPLAYED:  # the proposer itself, replayed on the trace's streams
            source = f"{name} replayed on the {dataset} token streams, data/traces/SOURCE.md"
            return AcceptanceConfig(tokens=dataset, source=source), "tokens" + own
        acc = AcceptanceConfig(
            acc_len=dataset,
            acc_len_method=name,
            source=f"{name} trace {dataset}, simspec/data/traces/SOURCE.md",
        )
        if fields.get("tree", "chain") == "chain":
            return acc, "trace" + own
        return _chain_alpha(acc, name, int(fields["k"])), "trace (as chain α)" + own
    tau = number(get("measured_tau"))
    if tau is not None and metric != "tau":
        kind = method_info(name).drafter
        spread, _ = acceptance_spread(kind, domain)
        k = int(fields["k"])
        if tau > k + 1:
            raise Skip(f"measured_tau {tau} exceeds k + 1 = {k + 1} for depth {k}")
        acc = AcceptanceConfig(
            tau=tau,
            spread=spread,
            temperature=temperature,
            source=f"measured_tau of case {get('case_id')}",
            **tau_measured_with({"name": name, **fields}, k),
        )
        return acc, "measured_tau"
    preset = preset_acceptance(name, dataset, domain, target=get("target_model"))
    if preset is None:
        raise Skip(f"no acceptance for {name} on {dataset!r}: no trace, measured_tau or preset")
    own = f" {OWN_SOURCE}" if metric == "tau" and _preset_of_row(name, domain, get, preset) else ""
    if preset.acc_len is not None and fields.get("tree", "chain") != "chain":
        return _chain_alpha(preset, name, int(fields["k"])), "preset (trace as chain α)" + own
    return preset, "preset" + own


# what a row's acceptance_source ends with where its prediction reads its own measurement: a
# tau row predicted from the preset copied from it, or from the trace it was measured on (QA:
# the packaged file's 25 such rows, at 0.3 % error, held its MAPE at 18.2 % against 20.1 %)
OWN_SOURCE = "(the row's own measurement)"


def _preset_of_row(name: str, domain: str, get: Any, preset: AcceptanceConfig) -> bool:
    """Whether ``preset`` was copied from this very row (its case among the domain's preset's
    case_ids, or the exact alternative taken: method_presets.yaml)."""
    case_id = get("case_id")
    presets = (method_presets().get(name) or {}).get("presets") or {}
    chosen = presets.get(domain) or presets.get("overall") or {}
    return case_id in (chosen.get("case_ids") or []) or f"case {case_id};" in (preset.source or "")


def _chain_alpha(trace: AcceptanceConfig, name: str, k: int) -> AcceptanceConfig:
    """A trace records chain acceptance; a tree takes its per-position α (as its τ at the
    tree's depth) and walks it through the rank model."""
    try:
        return trace_as_tree(trace, k, method_info(name).drafter)
    except InputError as exc:
        raise Skip(f"cannot read the {trace.acc_len} trace at depth {k}: {exc}") from None


# -- from simulation summaries to the metric ----------------------------------------------------
def metric_value(plan: CasePlan, runs: dict[str, RunSummary | Failed]) -> tuple[float, float]:
    """(predicted value, predicted τ) from the finished runs (by
    :func:`~simspec.studies.runs.keys.scenario_key`); raises Skip if a run failed."""
    if plan.metric == "step_time_ms":
        return _step_time_ms(plan.scenario), math.nan
    own = _run(runs, plan.scenario)
    tau = own.mean_accept_len if plan.scenario.method.name != "autoregressive" else math.nan
    if plan.metric == "tau":
        return own.mean_accept_len, tau
    if plan.metric == "tpot_ms":
        return (own.tpot_ms_p50 if plan.statistic == "median" else own.tpot_ms_mean), tau
    if plan.metric == "ttft_ms":
        return (own.ttft_ms_p50 if plan.statistic == "median" else own.ttft_ms_mean), tau
    if plan.metric == "e2e_s":
        return e2e_seconds(own, plan.statistic), tau
    if plan.metric == "throughput_tok_s":
        return own.throughput_tok_s, tau
    base = _run(runs, plan.baseline)
    if plan.scenario.workload.arrival == "poisson":
        # under open-loop load both serve the same rate: the gain is in latency
        if plan.statistic == "tpot":
            return _ratio(base.tpot_ms_mean, own.tpot_ms_mean, "TPOT"), tau
        if plan.statistic == "throughput":
            return _ratio(own.throughput_tok_s, base.throughput_tok_s, "baseline throughput"), tau
        base_s, own_s = e2e_seconds(base, plan.statistic), e2e_seconds(own, plan.statistic)
        return _ratio(base_s, own_s, f"{plan.statistic} latency"), tau
    if plan.statistic == "request_speed":  # the research harnesses' mean of per-request speeds
        own_v, base_v = own.request_speed_mean_tok_s, base.request_speed_mean_tok_s
        return _ratio(own_v, base_v, "baseline per-request speed"), tau
    if plan.statistic == "tpot":  # a closed loop's speedup its notes define as a TPOT ratio
        return _ratio(base.tpot_ms_mean, own.tpot_ms_mean, "TPOT"), tau
    if plan.statistic == "mean":  # ... or as a mean latency ratio
        return _ratio(e2e_seconds(base, "mean"), e2e_seconds(own, "mean"), "mean latency"), tau
    return _ratio(own.throughput_tok_s, base.throughput_tok_s, "baseline throughput"), tau


# a TPOT row's notes naming the median (or the mean) of it
TPOT_STATISTIC = re.compile(r"\b(mean|median)\s+TPOT\b", re.IGNORECASE)


def named_first(pattern: re.Pattern[str], notes: str) -> str:
    """``median`` where the statistic the notes name first for the metric is the median, else
    ``mean``: the printed line comes first, the other beside it ("'Mean TTFT (ms): 20'
    (median TTFT 15)"; QA: any "median TTFT" in the notes had scored a mean on the median)."""
    found = pattern.search(notes or "")
    return "median" if found and found.group(1).lower() in ("median", "p50") else "mean"


def closed_loop_speedup(notes: str) -> str:
    """Which ratio a closed loop's speedup is, as its notes define it: a TPOT ratio ("TPOT
    ratio", "speedup = ... TPOT"), a mean latency ratio ("latency ratio", "latency/request
    ratio"), else the throughput ratio."""
    text = notes or ""
    if re.search(r"TPOT ratio|speedup\s*=[^;]*TPOT", text, re.IGNORECASE):
        return "tpot"
    if re.search(r"latency(?:/request)? ratio", text, re.IGNORECASE):
        return "mean"
    return "throughput"


# the ratio a speedup at a request rate is read as, by what its notes name
SPEEDUP_RATIOS = {
    "median": "the ratio of median end-to-end latencies (the notes name no statistic)",
    "mean": "the ratio of mean end-to-end latencies, as the notes say",
    "tpot": "the ratio of mean TPOTs (baseline over speculative), as the notes say",
    "throughput": "the ratio of output throughputs, as the notes say (at a rate both serve, ~1)",
    "request_speed": (
        "the ratio of mean per-request speeds (each request's tokens over its time, averaged "
        "over requests), as the HF research harnesses compute it (EAGLE's and Spec-Bench's "
        "evaluation/speed.py: speeds.append(tokens / times), np.array(speeds).mean() / "
        "np.array(speeds0).mean())"
    ),
}


# the harnesses whose speed.py we read: EAGLE's (SafeAILab/EAGLE eagle/evaluation/speed.py)
# and Spec-Bench's (hemingkx/Spec-Bench evaluation/speed.py), which it derives from
PER_QUESTION_HARNESS = re.compile(r"\bEAGLE\b|Spec-Bench")


def per_question_harness(row: dict[str, str]) -> bool:
    """Whether a batch-1 speedup against HF decoding comes from a harness that averages
    per-question speeds (EAGLE's or Spec-Bench's speed.py, by the row's source)."""
    return row.get("baseline") == "hf-vanilla" and bool(
        PER_QUESTION_HARNESS.search(row.get("source") or "")
    )


def open_loop_speedup(notes: str) -> str:
    """Which latency a speedup at a request rate compares, as its notes name it: TPOT, the
    mean request latency, else the median end-to-end latency."""
    if re.search(r"\bTPOT\b", notes or "", re.IGNORECASE):
        return "tpot"
    if re.search(r"\bthroughput\b", notes or "", re.IGNORECASE):
        return "throughput"
    return "mean" if re.search(r"\bmean\b", notes or "", re.IGNORECASE) else "median"


def e2e_statistic(notes: str) -> str:
    """The statistic an e2e_s row's notes name first, the one its measured value is (the
    printed line comes first, the other statistic beside it: "'Mean E2EL (ms): 1800.00'
    (median 1500.00)"; QA: any "median" in the notes had scored a mean on the median):
    ``median`` (or p50), else ``mean``."""
    return named_first(E2E_STATISTIC, notes)


def e2e_seconds(run: RunSummary, statistic: str) -> float:
    """A run's end-to-end latency per served request: the median, or the mean (the measured
    requests' latencies summed by section, an unserved one's 0, over the served count: vLLM's
    and SGLang's benchmarks average their successful requests; QA: the unserved counted as 0 s)."""
    if statistic == "median":
        return run.e2e_s_p50
    served = run.requests - run.unfinishable
    if served <= 0:
        raise Skip("the run served no measured request: no end-to-end latency to report")
    return sum(run.section_e2e_s) / served


def _ratio(num: float, den: float, what: str) -> float:
    """``num / den``; a zero ``den`` (a rate of 1e-300 req/s leaves nothing to time) skips the
    row instead of losing the table to a ZeroDivisionError."""
    if not den:
        raise Skip(f"the simulated {what} is 0: no speedup to report at this load")
    return num / den


def _run(runs: dict[str, RunSummary | Failed], sc: Scenario | None) -> RunSummary:
    result = runs[scenario_key(sc.model_dump_json())]
    if isinstance(result, Failed):
        raise Skip(result.reason)
    return result


def _step_time_ms(sc: Scenario) -> float:
    """One plain decode step at batch ``concurrency`` with each sequence's KV at the prompt
    length (``context_len`` rows), host overheads included; Skip where the deployment does
    not hold the model or that batch's KV (as a simulated row would be skipped)."""
    try:
        setup = setup_replica(sc)
    except (ScenarioError, InputError) as exc:
        raise Skip(str(exc)) from None
    b = sc.workload.concurrency
    ctx = sc.workload.prompt.mean
    memory = setup.memory
    held = memory.num_blocks * memory.block_size
    if memory.window is not None:  # the windowed layers' blocks too, a window a sequence
        held = int(memory.num_blocks / memory.seq_blocks(max(int(ctx), 1)) * ctx)
    if b * ctx > held:
        raise Skip(
            f"{b} sequences of {ctx:g} tokens ({b * ctx:,.0f} tokens of KV) exceed the "
            f"{held:,} the KV cache holds"
        )
    batch = BatchShape.uniform(b, 1, b * ctx, b)
    return 1e3 * setup.cost.forward(setup.target, batch).total_s
