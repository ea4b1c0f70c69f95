"""What the explorer's sidebar sets, validated (:class:`ExplorerInputs`), and what it stands
for: the loads, the workload at each, the methods in their presets with the page's settings,
the deployment and the scenarios it runs, and what the page offers for a model.

Defaults are the CLI's (the ``Deployment`` fields and ``simspec sweep``'s methods and batch
sizes), so the page's first answer is the scenario ``simspec sweep`` runs first. The numbers
agree within their 95 % intervals, not digit for digit: the page measures a fixed number of
turnovers (its widget), where the sweep measures until each speedup is known to
``--precision-target`` (``simspec sweep --precision-target 0`` runs the page's length).
"""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from simspec.catalog.hardware import load_engine, load_gpu
from simspec.catalog.methods import (
    DATASET_DOMAIN,
    TRACE_DATASETS,
    at_depth,
    cannot_draft_for,
    default_methods,
    k_not_read,
    measured_acceptance,
    method_info,
    preset_method,
    refused_on,
    tau_spread,
    trace_as_tree,
)
from simspec.catalog.models import load_model
from simspec.catalog.traces import trace_methods
from simspec.config import (
    DEFAULT_MEASURED,
    DEFAULT_TURNOVERS,
    SAMPLING_FIELDS,
    SERVING_FIELDS,
    AcceptanceConfig,
    Deployment,
    DisaggregationMode,
    KvCacheDtype,
    LengthSpec,
    MethodConfig,
    Scenario,
    SchedulerConfig,
    WeightPrecision,
    WorkloadConfig,
    deployment_fields,
)
from simspec.engine.layout import ParallelLayout
from simspec.engine.speculators import SPECULATORS
from simspec.errors import InputError, one_line
from simspec.studies.model_facts import model_facts
from simspec.studies.model_facts import precision as checkpoint_precision
from simspec.studies.runs.job import check_runnable
from simspec.studies.sweep import DEFAULT_BATCH_SIZES

MAX_LOADS = 12
_DEPLOY = Deployment.model_fields
# the CLI's defaults (simspec sweep): its speculative methods, batch sizes and dataset
DEFAULT_METHODS = [m.name for m in default_methods() if m.name != "autoregressive"]
DEFAULT_DATASET = WorkloadConfig.model_fields["lengths_from"].default


class ExplorerInputs(BaseModel):
    """Everything the sidebar sets; hashable as JSON for the page's cache. The deployment's
    fields carry the ``Deployment``'s names (:func:`~simspec.config.deployment_fields`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str = _DEPLOY["model"].default
    model_name: str | None = Field(
        default=None, max_length=80, description="an uploaded config's model name, for titles"
    )
    gpu: str = _DEPLOY["gpu"].default
    tp: int = Field(default=_DEPLOY["tp"].default, ge=1, le=64)
    ep: int = Field(default=_DEPLOY["ep"].default, ge=1, le=64)
    dp: int = Field(default=_DEPLOY["dp"].default, ge=1, le=64)
    engine: str = _DEPLOY["engine"].default
    disaggregation_mode: DisaggregationMode = _DEPLOY["disaggregation_mode"].default
    precision: WeightPrecision | None = Field(
        default=_DEPLOY["precision"].default, description="None: the checkpoint's own"
    )
    kv_cache_dtype: KvCacheDtype = _DEPLOY["kv_cache_dtype"].default
    async_scheduling: bool | None = Field(
        default=None, description="vLLM --async-scheduling; None: the engine profile's"
    )
    # vLLM --max-model-len, the scheduler field's bounds and default (None: the model's context;
    # QA: Llama-4's 10M-token default, which vLLM refuses in most layouts, could not be lowered
    # on the page)
    max_model_len: int | None = SchedulerConfig.model_fields["max_model_len"]
    methods: list[str] = DEFAULT_METHODS
    k: int | None = Field(default=None, ge=1, le=16, description="None: each method's default")
    tree_nodes: int | None = Field(
        default=None, ge=1, le=1024, description="tree methods' budget; None: the default"
    )
    acceptance: Literal["preset", "alpha", "tau", "trace"] = "preset"
    dataset: str = DEFAULT_DATASET
    alpha: float = Field(default=0.7, ge=0.0, le=1.0)
    tau: float = Field(default=3.0, ge=1.0, le=65.0, description="measured tokens per step")
    tau_k: int | None = Field(
        default=None, ge=1, le=64, description="the K tau was measured at; None: the method's"
    )
    # per-request logit std of alpha or tau acceptance; None (tau only): each method's drafter
    # and domain as the packaged traces measured it, as --tau runs
    spread: float | None = Field(default=None, ge=0.0, le=3.0)
    trace_path: str | None = None
    arrival: Literal["closed", "poisson"] = "closed"
    loads: list[float] = [float(b) for b in DEFAULT_BATCH_SIZES]
    requests: int = Field(
        default=DEFAULT_MEASURED, ge=8, le=5000, description="requests measured per run"
    )
    turnovers: int = Field(
        default=DEFAULT_TURNOVERS,
        ge=0,
        le=1024,
        description="closed loop: measure at least this many x concurrency requests",
    )
    lengths: Literal["dataset", "fixed", "lognormal"] = "dataset"
    prompt_mean: float = Field(default=512, ge=1, le=65536)
    output_mean: float = Field(default=256, ge=1, le=16384)
    length_cv: float = Field(default=0.5, ge=0.0, le=5.0)
    temperature: float = Field(default=_DEPLOY["temperature"].default, ge=0.0, le=2.0)
    top_p: float = Field(default=_DEPLOY["top_p"].default, gt=0.0, le=1.0)
    seed: int = Field(default=_DEPLOY["seed"].default, ge=0)

    @field_validator("methods")
    @classmethod
    def _methods(cls, v: list[str]) -> list[str]:
        unknown = [m for m in v if m not in SPECULATORS]
        if unknown:
            raise ValueError(f"unknown method {unknown[0]!r}")
        if not [m for m in v if m != "autoregressive"]:
            raise ValueError("pick at least one speculative method")
        return v

    @field_validator("loads")
    @classmethod
    def _loads(cls, v: list[float]) -> list[float]:
        if not v or len(v) > MAX_LOADS or any(not 0 < x <= 4096 for x in v):
            raise ValueError(f"give 1 to {MAX_LOADS} loads, each in (0, 4096]")
        return sorted(set(v))


def parse_loads(text: str, arrival: str) -> list[float]:
    """'1, 4, 16' -> [1, 4, 16]; finite, positive, and whole numbers for concurrencies."""
    try:
        values = [float(x) for x in text.replace(";", ",").split(",") if x.strip()]
    except ValueError:
        raise InputError("loads", f"expected numbers separated by commas, got {text!r}") from None
    if not values or len(values) > MAX_LOADS or any(not 0 < v <= 4096 for v in values):
        raise InputError("loads", f"give 1 to {MAX_LOADS} values, each in (0, 4096]")
    if arrival == "closed" and any(not math.isfinite(v) or v != int(v) for v in values):
        raise InputError("loads", "concurrencies are whole numbers of requests")
    return values


def workload_for(inp: ExplorerInputs, load: float) -> WorkloadConfig:
    """The workload at one load: a closed loop of ``load`` requests or Poisson arrivals at
    ``load`` per second, measured by the CLI's rule (README "Measurement")."""
    if inp.lengths == "dataset":
        lengths = {"lengths_from": inp.dataset}
    else:
        dist = "fixed" if inp.lengths == "fixed" else "lognormal"
        lengths = {
            "lengths_from": None,
            "prompt": LengthSpec(dist=dist, mean=inp.prompt_mean, cv=inp.length_cv),
            "output": LengthSpec(dist=dist, mean=inp.output_mean, cv=inp.length_cv),
        }
    if inp.arrival == "closed":
        n = int(load)
        return WorkloadConfig(
            arrival="closed",
            concurrency=n,
            requests=inp.requests,
            turnovers=inp.turnovers,
            **lengths,
        )
    # the turnovers ride along: the schedule tab's closed loops (closed_load) copy this
    # workload and must measure what the page asked (QA: they ran the default 64)
    return WorkloadConfig(
        arrival="poisson", rate=load, requests=inp.requests, turnovers=inp.turnovers, **lengths
    )


def method_for(inp: ExplorerInputs, name: str) -> MethodConfig:
    """A method in its preset configuration, with the page's K, tree budget and acceptance."""
    if name == "autoregressive":
        return MethodConfig(name=name, k=0)
    # the method as the engine drafts it (vLLM: a chain; SGLang: its own tree); the shape an
    # engine picks itself (SGLang) is for a server given none: the page's K is one
    m = preset_method(name, inp.dataset, None, inp.model, inp.engine, engine_shape=inp.k is None)
    shapes = method_info(name).shapes
    if inp.tree_nodes is not None and m.tree in (None, "chain") and len(shapes) > 1:
        # a tree budget asked of a method the engine drafts as a chain is a tree given
        # (vLLM's speculative_token_tree): the method's own tree preset; a chain-only method
        # (MTP, a draft model) and an engine's own tree keep their shape (QA: a budget on
        # SGLang had turned its MTP 3-1-4 into K 1)
        m = preset_method(name, inp.dataset, None, inp.model, None, engine_shape=inp.k is None)
    update: dict = {}
    if inp.k is not None:
        why = k_not_read(m.model_dump(exclude_none=True))
        if why is not None:  # as the command line's --k refuses it
            raise InputError("K", f"does not set {name}'s draft length: {why}")
        update["k"] = inp.k
        deep = at_depth(m.model_dump(exclude_none=True), inp.k)  # the preset tree, K deep
        if deep.get("tree_nodes") != m.tree_nodes:
            update["tree_nodes"] = deep["tree_nodes"]
    if inp.tree_nodes is not None and m.tree in (None, "chain") and len(shapes) > 1:
        # a chain by default (EAGLE-3) that can draft a tree: the budget asked for is one
        update["tree"] = "dynamic" if "dynamic" in shapes else "static"
    if inp.tree_nodes is not None and update.get("tree", m.tree) in ("static", "dynamic"):
        depth = int(update.get("k", m.k))
        if inp.tree_nodes < depth:  # refused as a budget too large is (QA: 1 had run as 3)
            raise InputError(
                "Tree budget (nodes)",
                f"{name}'s tree is {depth} deep, so it drafts at least {depth} nodes: give a "
                f"budget of at least {depth}, or a smaller K",
            )
        from simspec.catalog.methods import stated_topk
        from simspec.engine.acceptance.trees import TreeShape

        kind = update.get("tree", m.tree)
        topk = stated_topk(m.tree_topk, inp.tree_nodes, depth)
        most = TreeShape(inp.tree_nodes, topk, depth, kind == "dynamic").capacity
        if inp.tree_nodes > most:  # said of the page's controls (QA: named tree_topk, unshown)
            raise InputError(
                "Tree budget (nodes)",
                f"{name}'s {kind} tree {depth} deep with top-{topk} expansion holds at most "
                f"{most} nodes: give a budget of at most {most}, or a larger K",
            )
        update["tree_nodes"] = inp.tree_nodes
    if inp.acceptance in ("alpha", "tau"):
        shape = m.model_dump(exclude_none=True) | update
        given = {"alpha": inp.alpha} if inp.acceptance == "alpha" else {"tau": inp.tau}
        measured = measured_acceptance(shape, **given, tau_k=inp.tau_k) or {}
        tau, tau_k = measured.get("tau"), measured.get("tau_k")
        if tau is not None and tau_k is not None and tau > tau_k + 1:
            # the config's own bound, said of the page's controls (QA: "config: tau must be
            # <= tau_k + 1" named fields the page does not show)
            raise InputError(
                "Measured τ (tokens per step)",
                f"at most {tau_k + 1} for {name} measured at K={tau_k} (each step accepts at "
                "most K drafted tokens and the bonus one): lower it, or set the K τ was "
                "measured at",
            )
        spread = inp.spread
        if spread is None:  # τ: as --tau runs (QA: the page's ran identical requests); α: 0
            spread = tau_spread(name, inp.dataset) if inp.acceptance == "tau" else 0.0
        update["acceptance"] = AcceptanceConfig(**measured, spread=spread)
    elif inp.acceptance == "trace" and inp.trace_path:
        if update.get("tree", m.tree) not in (None, "chain"):
            if "chain" not in shapes:
                raise InputError(
                    "Acceptance",
                    f"an uploaded trace records chains, and {name} drafts only trees: give "
                    "it alpha or tau acceptance, or leave it out of Methods",
                )
            # a trace records chains: the method drafts one, its tree fields dropped with
            # its tree (QA: SGLang's eagle3 kept tree_nodes and refused the page)
            update.update(tree="chain", tree_nodes=None, tree_topk=None)
        # each method replays its own records; one the file lacks borrows its first
        # method's, and its acceptance source says so (QA: ngram replayed eagle3's)
        keys = trace_methods(inp.trace_path)
        key = name if name in keys else keys[0]
        borrowed = (
            ""
            if key == name
            else f"the uploaded trace's {key} records, borrowed (it records none for {name})"
        )
        update["acceptance"] = AcceptanceConfig(
            acc_len=inp.trace_path, acc_len_method=key, source=borrowed
        )
    elif (
        update.get("tree", m.tree) not in (None, "chain")
        and m.acceptance is not None
        and m.acceptance.acc_len is not None
    ):  # a packaged trace records chains: the tree walks its α at its depth
        depth = int(update.get("k", m.k))
        update["acceptance"] = trace_as_tree(m.acceptance, depth, method_info(name).drafter)
    return m.model_copy(update=update)


def deployment_for(inp: ExplorerInputs, load: float = 1) -> Deployment:
    """The page's deployment (model, GPU, TP, engine, sampling, seed) at one load."""
    fields = deployment_fields(inp, (*SERVING_FIELDS, *SAMPLING_FIELDS))
    scheduler = SchedulerConfig(
        async_scheduling=inp.async_scheduling, max_model_len=inp.max_model_len
    )
    return Deployment(**fields, workload=workload_for(inp, load), scheduler=scheduler)


def scenario_for(inp: ExplorerInputs, load: float, method: MethodConfig) -> Scenario:
    """The page's deployment running ``method`` at one load."""
    return Scenario(**dict(deployment_for(inp, load)), method=method)


def engine_caveats(inp: ExplorerInputs) -> list[str]:
    """What the engine's defaults do to the page's loads that its settings do not show: a
    closed loop above SGLang's cap of running requests under speculative decoding queues the
    rest (the speculative runs only; plain decoding keeps its limit)."""
    cap = load_engine(inp.engine).speculative_cap(None, load_gpu(inp.gpu))
    over = [f"{load:g}" for load in inp.loads if cap is not None and load > cap]
    speculative = any(m != "autoregressive" for m in inp.methods)
    if inp.arrival != "closed" or not over or not speculative:
        return []
    return [
        f"{inp.engine} runs at most {cap} requests under speculative decoding (SGLang's "
        f"--max-running-requests default): at {', '.join(over)} the rest wait for a slot, "
        "while plain decoding runs them all"
    ]


def check_inputs(inp: ExplorerInputs) -> None:
    """Refuse, before any run, what cannot run: a method the model lacks the layers for, or a
    model that does not fit the GPUs (one line, from the memory plan)."""
    for name in ["autoregressive", *inp.methods]:
        check_runnable(scenario_for(inp, inp.loads[0], method_for(inp, name)))


def offered_methods(
    model: str, engine: str | None = None, dp: int = 1
) -> tuple[list[str], dict[str, str]]:
    """The speculative methods the page offers for ``model`` on ``engine`` at ``dp``, and
    those it leaves out with why: no drafter for the model (``cannot_draft_for``) or the
    engine's refusal there (``refused_on``), which would refuse the whole page. A method no
    engine ships (hydra, ...) stays offered, as ``--methods NAME`` runs it."""
    offered, left = [], {}
    for name in SPECULATORS:
        if name == "autoregressive":
            continue
        why = cannot_draft_for(name, model) or refused_on(name, model, engine, dp)
        if why:
            left[name] = why
        else:
            offered.append(name)
    return offered, left


def chain_methods(inp: ExplorerInputs) -> list[str]:
    """The chosen methods whose first draft shape is a chain (what the closed form models),
    else EAGLE-3, so the analytic view always has one."""
    return [m for m in inp.methods if method_info(m).shapes[0] == "chain"] or ["eagle3"]


def domains() -> dict[str, str]:
    """Packaged datasets by the domain their presets stand for."""
    return {f"{ds} ({DATASET_DOMAIN[ds]})": ds for ds in TRACE_DATASETS}


def model_info(inp: ExplorerInputs) -> list[tuple[str, str]]:
    """The chosen model's facts (parameters, active per token, layout, precision, KV per
    token, GPUs needed on the chosen GPU) and what each GPU holds in the page's layout, at its
    precision and KV-cache dtype, as ``simspec models NAME --tp --ep --dp`` prints them."""
    layout = ParallelLayout(inp.tp, inp.ep, inp.dp)
    facts = model_facts(
        inp.model,
        inp.gpu,
        inp.engine,
        layout,
        inp.precision,
        inp.kv_cache_dtype,
        inp.disaggregation_mode,
    )
    # an uploaded config by the name the titles give it, never its stored file (QA: the panel
    # said "upload-3c9661ce…" where the titles said config.json); any text that quotes the
    # stored path shows the name it was uploaded as
    from simspec.ui.uploads import as_uploaded

    named = inp.model_name
    return [
        (k, named if k == "model" and named else as_uploaded(v)) for k, v in facts if k != "source"
    ]


def async_label(inp: ExplorerInputs) -> str:
    """The page's async scheduling as a download writes it: on, off, or the engine's default."""
    return {True: "on", False: "off", None: "engine default"}[inp.async_scheduling]


def serving_columns(inp: ExplorerInputs) -> dict[str, object]:
    """How the page's model is served beyond model, GPU, TP and engine, as CSV columns: the
    expert and attention parallelism, the weights' precision as run (the checkpoint's dtype
    when the page keeps it) and the KV-cache dtype."""
    weights = inp.precision or checkpoint_precision(load_model(inp.model))
    return {
        "ep": inp.ep,
        "dp": inp.dp,
        "disaggregation_mode": inp.disaggregation_mode,
        "precision": weights,
        "kv_cache_dtype": inp.kv_cache_dtype,
    }


def model_info_markdown(inp: ExplorerInputs) -> str:
    """:func:`model_info` as a markdown list, each value shown as the text it is (an uploaded
    config's ``_name_or_path`` is the model's name here)."""
    return "\n".join(f"- **{k}**: {markdown_text(v)}" for k, v in model_info(inp))


# ASCII punctuation: CommonMark lets a backslash escape any of it, and each of Streamlit's
# markdown constructs (links, images, autolinks, emphasis, code, HTML, $ maths, :colour[]
# directives, tables, lists) starts with a mark. A colon before a space or the end starts none
# (a directive's name follows its colon, a URL's // does), so "field: message" keeps its own.
_MARKUP = re.compile(r"([!-/;-@\[-`{-~]|:(?=\S))")


def markdown_text(text: str) -> str:
    """``text`` (a config's name, an error quoting a config) to show through Streamlit's
    markdown (st.markdown, st.caption, st.error) as exactly that text, on one line: every mark
    that could open a link, an image or formatting is escaped."""
    return _MARKUP.sub(r"\\\1", one_line(text))


def provenance_lines(inp: ExplorerInputs) -> list[str]:
    """What the page's numbers run with and rest on, as ``simspec sweep`` says it under its
    table ("ran with", "rests on": whose acceptance, how the GPU's profile was obtained, how
    many validation cases back the model), and the methods its engine does not ship."""
    from simspec.catalog.methods import not_shipped
    from simspec.catalog.sampling import sampling_notes
    from simspec.studies.provenance import (
        async_note,
        deployment_notes,
        ran_with,
        release_notes,
        rests_on,
        verify_notes,
    )
    from simspec.studies.sweep import picked_shape_notes

    deploy = deployment_for(inp)
    methods = [method_for(inp, m) for m in inp.methods if m != "autoregressive"]
    lines = [ran_with(deploy, [m.name for m in methods]), rests_on(deploy, methods)]
    unshipped = [m.name for m in methods if not_shipped(m.name, inp.engine)]
    if unshipped:
        why = not_shipped(unshipped[0], inp.engine)
        lines.append(f"{', '.join(unshipped)} simulated as published: {why}")
    # the sweep's notes on sampling and on the shape the engine picks (QA: the page had none)
    lines += sampling_notes(deploy.temperature, deploy.top_p)
    lines += verify_notes(deploy, methods)
    lines += release_notes(deploy, methods)
    lines += picked_shape_notes(inp.model, inp.engine, methods)
    if note := async_note(inp.engine, deploy.scheduler.async_scheduling):  # as sweep says it
        lines.append(note)
    # servers spanned, a decode instance's TTFT: as every command's footer says them
    lines += deployment_notes(deploy)
    return lines
