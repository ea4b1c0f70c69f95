"""Speedup by batch size and method: many closed-loop scenarios against one baseline each."""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pandas as pd
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from simspec.catalog.hardware import load_engine, load_gpu
from simspec.catalog.methods import (
    TRACE_DATASETS,
    as_engine_drafts,
    default_methods,
    engine_chains,
    engine_picked_shape,
    k_not_read,
    method_defaults,
    named_alone,
    picks_shape,
    preset_method,
)
from simspec.catalog.models import load_model
from simspec.catalog.traces import packaged_traces
from simspec.config import (
    DEFAULT_MEASURED,
    DEFAULT_PRECISION_TARGET,
    DEFAULT_TURNOVERS,
    MAX_CONCURRENCY,
    MAX_K,
    MAX_PRECISION_TARGET,
    MAX_RUNS,
    MAX_TOTAL_REQUESTS,
    MIN_PRECISION_TARGET,
    Deployment,
    MethodConfig,
    Scenario,
    WorkloadConfig,
    check_precision_target,
)
from simspec.engine import window
from simspec.engine.load_policy import LoadPolicy
from simspec.engine.metrics import RunSummary
from simspec.engine.speculators import SPECULATORS, known_method
from simspec.engine.speculators.lookup import matched_sizes
from simspec.errors import InputError, first_error
from simspec.studies.metrics import RUN_INTERVALS, RUN_METRICS
from simspec.studies.provenance import PROVENANCE_COLUMNS, provenance
from simspec.studies.runs import SERIAL, Runs
from simspec.studies.runs.job import check_runnable
from simspec.studies.runs.keys import scenario_key
from simspec.studies.to_precision import Pair, paired_interval, run_to_target


def _known_dataset(ref: str) -> None:
    """A grid's dataset: a packaged trace's name or a trace file that exists (QA: an unknown
    one was refused as workload.lengths_from, a field the grid's user never wrote)."""
    if ref not in packaged_traces() and not os.path.lexists(ref):
        raise InputError(
            "dataset",
            f"no dataset {ref!r}: give a packaged one ({', '.join(packaged_traces())}) or the "
            "path of a trace file",
        )


# grid axes whose values name catalog entries: resolved when the grid expands, so a name the
# catalog does not know is refused as the grid's before any cell runs
CATALOG_AXES: dict[str, Callable[[str], object]] = {
    "model": load_model,
    "gpu": load_gpu,
    "engine": load_engine,
    "dataset": _known_dataset,
}

DEFAULT_BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64, 128]

# 95 % intervals written after the metrics: the speedup's, then each run's own
INTERVAL_COLUMNS = ("speedup_ci_low", "speedup_ci_high", *RUN_INTERVALS)
# an interval wider than this (relative half-width of a speedup) is reported as wide
WIDE_INTERVAL = 0.02
# Column order of the CSV written by ``simspec sweep --out``.
COLUMNS = [
    "model",
    "gpu",
    "tp",
    "ep",
    "dp",
    "pp",
    "engine",
    "temperature",
    "top_p",
    "dataset",
    "method",
    "k",
    "k_run",
    "tree",
    "tree_nodes",
    "tree_topk",
    "draft_tp",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "batch_size",
    "speedup",
    "tpot_ratio",
    "baseline_throughput_tok_s",
    "baseline_requests",
    *RUN_METRICS,
    *INTERVAL_COLUMNS,
    "requests",
    "seed",
    "acceptance",
    *PROVENANCE_COLUMNS,
]


GRID_AXES = ("model", "gpu", "tp", "engine", "seed", "temperature", "top_p", "dataset", "k")


FIXED_AND_TARGET = (
    "a fixed length (workload.requests or workload.turnovers) and a precision target "
    "exclude each other: give one"
)


def written_length(wl: dict[str, Any] | WorkloadConfig) -> tuple[bool, bool]:
    """Whether a scenario file's workload writes a run length (``requests`` or
    ``turnovers``, which without a precision target fix it), and whether that length
    excludes a precision target beside it: any ``requests``, turnovers other than the
    default (a dumped config writes every field, the default turnovers among them). A built
    WorkloadConfig says what was written by its fields set."""
    if isinstance(wl, WorkloadConfig):
        wl = wl.model_dump(include=wl.model_fields_set & {"requests", "turnovers"})
    requests, turnovers = wl.get("requests"), wl.get("turnovers")
    written = requests is not None or turnovers is not None
    return written, requests is not None or turnovers not in (None, DEFAULT_TURNOVERS)


class SweepConfig(Deployment):
    """A grid of closed-loop runs: every method at every batch size (concurrency), for every
    combination of the ``grid`` axes (model, GPU, TP, engine, seed, temperature, top-p,
    dataset, K)."""

    methods: list[MethodConfig] = Field(default_factory=default_methods)
    batch_sizes: list[int] = Field(default_factory=lambda: list(DEFAULT_BATCH_SIZES))
    grid: dict[str, list[Any]] = Field(default_factory=dict, validate_default=True)  # sized
    precision_target: float = Field(
        default=DEFAULT_PRECISION_TARGET,
        description="measure each cell until the 95 % interval of its speedup is within this "
        f"share of it either side ({MIN_PRECISION_TARGET:g} to {MAX_PRECISION_TARGET:g}; "
        f"default {DEFAULT_PRECISION_TARGET:g}, +-{DEFAULT_PRECISION_TARGET:.0%}), "
        f"from {window.FLOOR_TURNOVERS} turnovers (at least {window.floor_requests(1)} "
        f"requests) up to a cap of {DEFAULT_TURNOVERS} turnovers (at least "
        f"{window.cap_requests(1):,} requests); 0: the fixed length of "
        f"workload.requests and workload.turnovers ({DEFAULT_TURNOVERS} turnovers, at least "
        f"{DEFAULT_MEASURED} requests), as "
        "writing either of them asks",
    )

    @model_validator(mode="before")
    @classmethod
    def _tp_axis_alone(cls, data: Any) -> Any:
        """A grid's tp axis whose points an ep or dp beside it does not fit is refused naming
        the grid: ep must be 1 or tp and dp divide tp at every point, and neither is a grid
        axis to follow it."""
        if not isinstance(data, dict) or not isinstance(data.get("grid"), dict):
            return data
        ep, dp = data.get("ep") or 1, data.get("dp") or 1
        numbers = [x for x in (ep, dp) if isinstance(x, int) and not isinstance(x, bool)]
        if len(numbers) < 2 or dp < 1:
            return data  # the fields' own validators name a bad value
        for tp in data["grid"].get("tp") or []:
            if not isinstance(tp, int) or isinstance(tp, bool):
                continue
            if ep not in (1, tp) or tp % dp:
                raise ValueError(
                    f"grid: its tp {tp} does not take ep={ep}, dp={dp} (ep 1 or tp, dp dividing "
                    "tp), which stay fixed while tp varies (neither is a grid axis): sweep that "
                    "tp on its own, or drop ep and dp"
                )
        return data

    @model_validator(mode="before")
    @classmethod
    def _fixed_or_target(cls, data: Any) -> Any:
        """A fixed length (``workload.requests`` or ``workload.turnovers`` written) and a
        precision target exclude each other (:func:`written_length`): written without
        ``precision_target`` a fixed length turns the target off (0); written beside one,
        refused."""
        if not isinstance(data, dict):
            return data
        wl = data.get("workload")
        if not isinstance(wl, dict | WorkloadConfig):
            return data
        written, fixed = written_length(wl)
        if "precision_target" not in data:
            return {**data, "precision_target": 0.0} if written else data
        target = data["precision_target"]
        if fixed and isinstance(target, int | float) and target != 0:
            raise ValueError(f"precision_target: {FIXED_AND_TARGET}")
        return data

    @field_validator("precision_target")
    @classmethod
    def _target(cls, v: float) -> float:
        return check_precision_target(v)

    @field_validator("batch_sizes")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if not v or any(b < 1 or b > MAX_CONCURRENCY for b in v):
            raise ValueError(f"batch sizes must be integers in [1, {MAX_CONCURRENCY}]")
        # each once, in the order given (QA: a repeat ran twice, wrote both rows and broke
        # the table's columns), as recommend takes its grid
        return list(dict.fromkeys(v))

    @field_validator("workload")
    @classmethod
    def _closed_loop(cls, v: WorkloadConfig) -> WorkloadConfig:
        """A sweep runs each batch size closed loop (:meth:`scenario`): open-loop fields
        would be ignored, so they are refused."""
        default = WorkloadConfig()
        for name in ("arrival", "rate", "rate_schedule"):
            if getattr(v, name) != getattr(default, name):
                raise ValueError(
                    f"{name}: a sweep runs closed loop at each of batch_sizes; "
                    "drop it (open-loop arrivals: simspec plan or simspec policy)"
                )
        return v

    @field_validator("methods", mode="before")
    @classmethod
    def _named(cls, v: Any, info: ValidationInfo) -> Any:
        """A method given by name (``"eagle3"``; case ignored, vLLM's names too) is that
        method in its preset for the workload's dataset, as ``simspec sweep --methods`` reads
        it: a script names methods as the command line does."""
        if not isinstance(v, list) or not any(isinstance(m, str) or named_alone(m) for m in v):
            return v
        wl = info.data.get("workload")
        lengths = wl.lengths_from if isinstance(wl, WorkloadConfig) else None
        dataset = lengths if lengths in TRACE_DATASETS else "sharegpt"
        target = info.data.get("model")
        engine = info.data.get("engine")
        engine = engine if isinstance(engine, str) else None

        def preset(name: str) -> MethodConfig:
            known = known_method(name, "methods")
            return preset_method(known, dataset, target=target, engine=engine)

        out: list[Any] = []
        for m in v:
            if isinstance(m, str):
                out.append(preset(m))
            elif named_alone(m):  # {"name": "eagle3"}: as the name alone, as a CLI file reads it
                # the preset's own name, not the spelling given (QA: "eagle" and "EAGLE3" were
                # put back over eagle1 and eagle3, and refused)
                known = preset(m["name"])
                out.append(
                    MethodConfig.model_validate({**known.model_dump(), **m, "name": known.name})
                )
            else:
                out.append(m)
        return out

    @field_validator("methods")
    @classmethod
    def _some(cls, v: list[MethodConfig]) -> list[MethodConfig]:
        if not v:
            raise ValueError("give at least one method")
        # a speculative method twice ran twice into two identical rows (QA); plain decoding,
        # every sweep's baseline, runs once however often it is named
        seen: list[MethodConfig] = []
        for m in v:
            if m.name != "autoregressive" and m in seen:
                raise ValueError(f"{m.name} (k={m.k}) is listed more than once: name each once")
            seen.append(m)
        return v

    @field_validator("grid")
    @classmethod
    def _axes(cls, v: dict[str, list[Any]], info: ValidationInfo) -> dict[str, list[Any]]:
        for axis, values in v.items():
            if axis not in GRID_AXES:
                raise ValueError(f"unknown grid axis {axis!r}; choose from {', '.join(GRID_AXES)}")
            if not isinstance(values, list) or not values:
                raise ValueError(f"grid axis {axis!r} needs a non-empty list")
            seen: list[Any] = []
            for value in values:  # QA: [0, 0] wrote every row twice, and counted both
                if value in seen:
                    raise ValueError(f"grid axis {axis!r} lists {value!r} more than once")
                seen.append(value)
            if axis == "k" and not all(
                isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_K for x in values
            ):
                raise ValueError(
                    f"grid axis 'k' takes draft lengths from 1 to {MAX_K} (got {values}): "
                    "autoregressive is the method that drafts none"
                )
        methods, sizes, wl = (info.data.get(f) for f in ("methods", "batch_sizes", "workload"))
        if "k" in v:
            # a K axis over a method whose draft length is not k would label rows with Ks that
            # never ran (QA: lookahead K=2 and K=4, one run twice), as --k refuses it
            for m in methods or ():
                fields = m.model_dump(exclude_none=True)
                why = k_not_read(fields) if m.name != "autoregressive" else None
                if why is not None:
                    raise ValueError(f"grid axis 'k' does not set {m.name}'s draft length: {why}")
        if methods and sizes and wl:
            _check_size(math.prod(len(values) for values in v.values()), methods, sizes, wl)
        return v

    def points(self) -> list[SweepConfig]:
        """One sweep per combination of the grid's axes (itself when there is no grid)."""
        if not self.grid:
            return [self]
        axes = list(self.grid)
        out = []
        known: set[tuple[str, str]] = set()  # (axis, value) the catalog resolved already
        for combo in itertools.product(*(self.grid[a] for a in axes)):
            values = dict(zip(axes, combo, strict=True))
            data = self.model_dump(exclude={"grid"})
            for axis in ("model", "gpu", "tp", "engine", "seed", "temperature", "top_p"):
                if axis in values:
                    data[axis] = values[axis]
            if "dataset" in values:
                data["workload"] = {**data["workload"], "lengths_from": values["dataset"]}
                was = self.workload.lengths_from
                was = was if was in TRACE_DATASETS else "sharegpt"  # as _named resolved them
                data["methods"] = [
                    _with_dataset(m, values["dataset"], was, self.model, self.engine)
                    for m in data["methods"]
                ]
            if "k" in values:
                data["methods"] = [
                    m if m["name"] == "autoregressive" else {**m, "k": values["k"]}
                    for m in data["methods"]
                ]
            point = ", ".join(f"{a}={v}" for a, v in values.items())
            for axis, load in CATALOG_AXES.items():
                # a name the catalog does not know is the grid's, at its point (QA: "gpu:
                # unknown GPU 'nope'" for a value only the grid gave)
                if axis in values and (axis, str(values[axis])) not in known:
                    try:
                        load(values[axis])
                    except InputError as exc:
                        raise InputError(
                            f"grid.{axis}", f"at the grid point {point}: {exc.message}"
                        ) from None
                    known.add((axis, str(values[axis])))
            try:
                out.append(SweepConfig(**data))
            except ValidationError as exc:
                # named by the grid axis that set it, at its point (QA: "seed: ... (the flag
                # --seed, or seed in a --config file)" for a value only the grid gave)
                field, message = first_error(exc)
                top = field.split(".")[0]
                axis = "k" if top == "methods" and "k" in values else top
                where = f"grid.{axis}" if axis in values else "grid"
                raise InputError(where, f"at the grid point {point}: {field}: {message}") from None
        return out

    def scenario(self, method: MethodConfig, batch_size: int) -> Scenario:
        wl = self.workload.model_copy(update={"arrival": "closed", "concurrency": batch_size})
        study = {"methods", "batch_sizes", "workload", "grid", "precision_target"}
        common = self.model_dump(exclude=study)
        return Scenario(**common, method=method, workload=wl)

    def runs(self) -> list[tuple[MethodConfig, int]]:
        """Every (method, batch size) cell; the autoregressive baseline runs once per size."""
        baseline = MethodConfig(name="autoregressive", k=0)
        others = [m for m in self.methods if m.name != "autoregressive"]
        return [(m, b) for b in self.batch_sizes for m in [baseline, *others]]


def _check_size(
    points: int, methods: list[MethodConfig], sizes: list[int], wl: WorkloadConfig
) -> None:
    """The whole grid's runs and requests within the bounds in :mod:`simspec.config`, counted
    from the axes before any point is built (a 1,000 x 1,000 grid fails here, at once)."""
    per_size = 1 + sum(m.name != "autoregressive" for m in methods)
    runs = points * per_size * len(sizes)
    if runs > MAX_RUNS:
        raise ValueError(
            f"{runs:,} runs ({points:,} grid points x {per_size} methods x "
            f"{len(sizes)} batch sizes); at most {MAX_RUNS:,}"
        )
    # each batch size runs closed-loop (see scenario), measuring WorkloadConfig.num_requests
    requests = points * per_size * sum(_closed(wl, b).num_requests for b in sizes)
    if requests > MAX_TOTAL_REQUESTS:
        raise ValueError(
            f"{requests:,} requests over {runs:,} runs; at most {MAX_TOTAL_REQUESTS:,} "
            "(lower --requests, the batch sizes or the grid)"
        )


def _closed(wl: WorkloadConfig, batch_size: int) -> WorkloadConfig:
    return wl.model_copy(update={"arrival": "closed", "concurrency": batch_size})


def _with_dataset(
    method: dict[str, Any], dataset: str, was: str, target: str, engine: str
) -> dict[str, Any]:
    """A method at the dataset axis's ``dataset``: one whose acceptance replays a packaged
    trace replays that dataset's, and one whose acceptance is its packaged preset for ``was``
    (the dataset its name was resolved for) takes its preset for ``dataset``, as
    ``sweep --dataset`` picks it (QA: a gsm8k grid point ran the MT-Bench presets). An
    acceptance the file states (no preset ``source``) stays, as ``sweep --dataset`` keeps it
    (QA: a stated sharegpt trace became gsm8k's at a grid point, still called "as given")."""
    acc = method.get("acceptance") or {}
    name = method.get("name")
    if name == "autoregressive" or not acc or not acc.get("source"):
        return method
    draft = method.get("draft_model")
    try:
        before = preset_method(name, was, draft_model=draft, target=target, engine=engine)
        after = preset_method(name, dataset, draft_model=draft, target=target, engine=engine)
    except InputError:  # a dataset the grid's check refuses by name, or no preset
        before = after = None
    if before is not None and before.acceptance is not None and after is not None:
        if before.acceptance.model_dump() == acc and after.acceptance is not None:
            # the preset at the point's dataset, with its own source (QA: a gsm8k point's
            # trace had kept the source line of sharegpt's)
            return {**method, "acceptance": after.acceptance.model_dump()}
    # a packaged trace replayed otherwise than its preset does: that dataset's trace
    for field in ("acc_len", "tokens"):
        if acc.get(field) in TRACE_DATASETS:
            source = str(acc["source"]).replace(f" {acc[field]},", f" {dataset},")
            return {**method, "acceptance": {**acc, field: dataset, "source": source}}
    return method


def k_in_force(m: MethodConfig, batch_size: int) -> int:
    """The draft length a closed loop of ``batch_size`` runs: the method's K, or what its
    K schedule or disable_by_batch_size sets there (0: speculation off). QA: every row said
    the method's K where a schedule ran K=2 or none."""
    if m.name == "autoregressive":
        return 0
    nodes = tree_columns(m)["tree_nodes"] or None
    return LoadPolicy.of(m, m.k, nodes).shape_for(batch_size)[0]


def tree_columns(m: MethodConfig) -> dict[str, Any]:
    """The draft tree as the method's config states it (blank / 0 where it states none), so
    two tree budgets of one method are two rows a reader can tell apart."""
    nodes = len(m.tree_paths) if m.tree_paths else (m.tree_nodes or 0)
    return {"tree": m.tree or "", "tree_nodes": nodes, "tree_topk": m.tree_topk or 0}


def lookup_columns(m: MethodConfig, engine: str) -> dict[str, int | None]:
    """The n-gram sizes a lookup method matched (prompt_lookup_min/max, vLLM's names; blank
    for a method that matches none), so two n-gram rows say which n-gram each ran."""
    low, high = matched_sizes(m, engine) or (None, None)
    return {"prompt_lookup_min": low, "prompt_lookup_max": high}


def describe_acceptance(m: MethodConfig) -> str:
    a = m.acceptance
    if a is None:
        return ""
    if a.acc_len is not None:
        return f"trace:{a.acc_len}/{a.acc_len_method}"
    if a.tokens is not None:
        return f"tokens:{a.tokens}"
    text = f"tau={a.tau}@k={a.tau_k}" if a.tau is not None else f"alpha={a.alpha}"
    if a.tau is not None and a.tau_tree_nodes is not None:
        # measured on a tree (QA: a chain run of a tree's τ 2.59 realised 1.88 under the same
        # label as a chain's τ 2.59)
        top = f",topk={a.tau_tree_topk}" if a.tau_tree_topk is not None else ""
        text += f" on a {a.tau_tree_nodes}-node tree{top}"
    if a.depth_decay is not None:
        text += f",decay={a.depth_decay}"
    beyond = extrapolated_beyond(m)
    return text + (f" (extrapolated beyond k={beyond})" if beyond else "")


def extrapolated_beyond(m: MethodConfig) -> int | None:
    """The deepest draft position ``m``'s acceptance sources measured, when ``m`` drafts
    deeper (its acceptance there is extrapolated); None when it does not."""
    a = m.acceptance
    if a is None or m.name == "autoregressive":
        return None
    # a preset's sourced depth, else the depth a τ was measured at (a given --tau-k), else a
    # given α list's length (its last value repeats); a scalar α is a rate at every position
    listed = len(a.alpha) if isinstance(a.alpha, list) else None
    measured = a.sourced_k or a.tau_k or listed or _trace_depth(a.acc_len, a.acc_len_method)
    if measured is None:
        return None
    deepest = max([m.k, *(k for _, _, k in m.k_schedule or [])])
    return measured if deepest > measured else None


def _trace_depth(ref: str | None, method: str | None) -> int | None:
    """The deepest draft position an acc_len trace shows: its longest accept length less the
    bonus token. A trace captured at K holds no accept length past K + 1, so at a longer draft
    it replays no acceptance past K (QA: a user's K=3 capture ran K=7 at the same τ, no word
    said)."""
    if ref is None or method is None:
        return None
    from simspec.catalog.traces import load_trace

    try:
        return int(load_trace(ref, method).acc.max()) - 1
    except InputError:  # said where the run reads it
        return None


def extrapolation_notes(methods: list[MethodConfig]) -> list[str]:
    """One line per method whose acceptance is extrapolated past what its sources measured,
    and per draft run on the acceptance another draft pair measured."""
    deepest: dict[str, tuple[int, int, str]] = {}
    for m in methods:
        beyond = extrapolated_beyond(m)
        if beyond:
            k = max(m.k, deepest.get(m.name, (0, 0, ""))[1])
            a = m.acceptance
            where = (
                f"its trace {a.acc_len} holds no accept length past {beyond + 1}"
                if a is not None and a.acc_len is not None and not a.sourced_k
                else f"simspec methods {m.name}"
            )
            deepest[m.name] = (beyond, k, where)
    lines = [
        f"note: {name} at K={k}: acceptance extrapolated beyond k={beyond}, the deepest draft "
        f"position its sources measured ({where})"
        for name, (beyond, k, where) in deepest.items()
    ]
    for m in methods:
        acc = m.acceptance
        if acc is None or not acc.source.startswith("measured with a different draft pair"):
            continue
        # QA: the target itself as its own draft read the 1B draft's tau 2.27, only the cost
        # moved, and only the CSV's acceptance_source said why
        line = (
            f"note: {m.name} with draft {m.draft_model}: its acceptance is the preset's, "
            "measured with another draft pair, so drafts compare here by their cost alone (a "
            "draft closer to the target accepts more): --alpha or --tau gives your pair's"
        )
        if line not in lines:
            lines.append(line)
    return lines


def picked_shape_notes(model: str, engine: str, methods: list[MethodConfig]) -> list[str]:
    """One line per method that runs in the shape ``engine`` picks itself on ``model`` when
    given none (SGLang: :func:`~simspec.catalog.methods.engine_picked_shape`): its K is the
    engine's, not the method's packaged default."""
    lines: list[str] = []
    architecture: str | None = None
    for method in methods:
        if method.name in SPECULATORS and method.tree in (None, "chain"):
            # a tree by default that this engine drafts as a chain (vLLM without a
            # speculative_token_tree): said, as SGLang's own pick is (QA: medusa1 and eagle1
            # ran as chains on vllm while `simspec methods` showed their trees, unsaid)
            chains = engine_chains(method.name, engine)
            note = as_engine_drafts(method_defaults(method.name), chains)[1]
            line = f"note: {method.name}: {note}"
            if note and line not in lines:
                lines.append(line)
        if not picks_shape(method.name, engine):
            continue
        architecture = architecture or load_model(model).architecture
        picked = engine_picked_shape(method.name, engine, architecture)
        if picked is None or picked[0] is None:
            continue
        line = f"note: {method.name} on {model}: {picked[1]}"
        if method.model_dump(include=set(picked[0])) == picked[0] and line not in lines:
            lines.append(line)
    return lines


@dataclass(frozen=True)
class Cell:
    """One simulation of a sweep: the point it belongs to, the method and the batch size."""

    point: SweepConfig
    method: MethodConfig
    batch_size: int
    scenario_json: str

    @cached_property
    def key(self) -> str:
        """Identifies the run by content, so a resumed sweep recognises it (computed once: the
        files it hashes are read once per sweep)."""
        return scenario_key(self.scenario_json)


def cells(cfg: SweepConfig) -> list[Cell]:
    out = []
    for point in cfg.points():
        for method, bs in point.runs():
            out.append(Cell(point, method, bs, point.scenario(method, bs).model_dump_json()))
    return out


def check_cells(todo: list[Cell]) -> None:
    """Every distinct cell can run (bad input fails before any run), checked in the sweep's
    order, so the error named is the first cell's (QA: a set's order, which string hashing
    varies from run to run, named another cell each time)."""
    context: InputError | None = None
    for scenario_json in dict.fromkeys(c.scenario_json for c in todo):
        try:
            check_runnable(Scenario.model_validate_json(scenario_json))
        except InputError as exc:
            # a context past the KV cache is fixed by --max-model-len; a cell that cannot run
            # at any context is named first (QA: the advice, followed, met "does not fit")
            if exc.field != "scheduler.max_model_len":
                raise
            context = context or exc
    if context is not None:
        raise context


def run_sweep(cfg: SweepConfig, *, runs: Runs = SERIAL) -> pd.DataFrame:
    """Simulate every cell and report speedup = throughput / autoregressive throughput.

    A cell the cache of ``runs`` holds is not run again: backed by a journal
    (:class:`~simspec.studies.runs.journal.RunCache`), finished runs are appended to it as they
    complete, so a stopped sweep keeps them and a resumed one starts from them. ``runs`` is
    told of each cell done. The table is the same whichever executor ran the cells, and in the
    same order."""
    todo = cells(cfg)
    check_cells(todo)
    return run_cells(cfg, todo, runs=runs)


def run_cells(cfg: SweepConfig, todo: list[Cell], *, runs: Runs = SERIAL) -> pd.DataFrame:
    """:func:`run_sweep` of ``cfg``'s cells ``todo``, already checked (:func:`check_cells`):
    ``simspec sweep`` checks them before it reads a journal."""
    by_key = {c.key: c for c in todo}

    def finished(key: str, _: RunSummary) -> None:
        c = by_key[key]
        runs.step(f"{c.method.name} bs={c.batch_size}")

    if runs.cache is not None:
        for c in todo:
            if c.key in runs.cache:
                runs.step(f"{c.method.name} bs={c.batch_size} (resumed)")
    if cfg.precision_target:  # each cell as long as its precision asks (run_to_target)
        done, bases = _to_precision(cfg, todo, runs)
        return _results_frame(cfg, todo, done, bases)
    # the longest runs first (low concurrency: most iterations per request), so the pool's
    # workers finish together
    order = sorted(todo, key=lambda c: c.batch_size)
    summaries = runs.all([c.scenario_json for c in order], on_result=finished)
    done = {c.key: s for c, s in zip(order, summaries, strict=True)}
    return _results_frame(cfg, todo, done)


def _to_precision(
    cfg: SweepConfig, todo: list[Cell], runs: Runs
) -> tuple[dict[str, RunSummary], dict[str, RunSummary]]:
    """Each method cell's run and its baseline's at the length its precision target asked
    for (:func:`run_to_target`), and each baseline cell's own run to the target on its
    throughput (its row in the table, whatever other methods the sweep lists: QA, the row had
    been the longest paired baseline, and moved when a method was added)."""
    points = {id(c.point): i for i, c in enumerate(todo)}
    base_of = {
        (points[id(c.point)], c.batch_size): c for c in todo if c.method.name == "autoregressive"
    }
    pairs, by_key = [], {c.key: c for c in todo}
    for c in todo:
        if c.method.name == "autoregressive":
            pairs.append(Pair(c.key, c.batch_size, c.scenario_json, None))
            continue
        base = base_of[(points[id(c.point)], c.batch_size)]
        pairs.append(Pair(c.key, c.batch_size, c.scenario_json, base.scenario_json))
    reached = run_to_target(
        pairs,
        cfg.precision_target,
        runs,
        lambda key: f"{by_key[key].method.name} bs={by_key[key].batch_size}",
    )
    done = {key: r.run for key, r in reached.items()}
    bases = {key: r.base for key, r in reached.items() if r.base is not None}
    return done, bases


def _results_frame(
    cfg: SweepConfig,
    todo: list[Cell],
    done: dict[str, RunSummary],
    bases: dict[str, RunSummary] | None = None,
) -> pd.DataFrame:
    want_baseline = any(m.name == "autoregressive" for m in cfg.methods)
    rows = []
    baseline: dict[tuple[int, int], dict[str, float]] = {}
    points = {id(c.point): i for i, c in enumerate(todo)}
    for c in todo:
        s = done[c.key]
        point_id = points[id(c.point)]
        if c.method.name == "autoregressive":
            baseline[(point_id, c.batch_size)] = s
            if not want_baseline:
                continue
        base = baseline[(point_id, c.batch_size)]
        if bases and c.key in bases:  # the baseline's run of the same length as this cell's
            base = bases[c.key]
        p = c.point
        rows.append(
            {
                "model": p.model,
                "gpu": p.gpu,
                "tp": p.tp,
                "ep": p.ep,
                "dp": p.dp,
                "pp": p.pp,
                "engine": p.engine,
                "temperature": p.temperature,
                "top_p": p.top_p,
                "dataset": p.workload.lengths_from or "",
                "method": c.method.name,
                "k": c.method.k if c.method.name != "autoregressive" else 0,
                "k_run": k_in_force(c.method, c.batch_size),
                **tree_columns(c.method),
                # blank: at the target's tp, as the README's column says (QA: draft_tp 2 at
                # tp 2 wrote 2 and labelled the row "draft TP2")
                "draft_tp": c.method.draft_tp if c.method.draft_tp != p.tp else None,
                **lookup_columns(c.method, p.engine),
                "batch_size": c.batch_size,
                "speedup": s.throughput_tok_s / base.throughput_tok_s,
                **speedup_interval(base, s),
                "tpot_ratio": base.tpot_ms_p50 / s.tpot_ms_p50,
                # the plain-decoding run those two ratios are over: under a precision target
                # a cell's own length, which the autoregressive row need not share (QA)
                "baseline_throughput_tok_s": base.throughput_tok_s,
                "baseline_requests": base.requests,
                **{col: getattr(s, col) for col in RUN_METRICS},
                **{col: getattr(s, col) for col in RUN_INTERVALS},
                "requests": s.requests,
                "seed": p.seed,
                "acceptance": describe_acceptance(c.method),
                **provenance(p, c.method),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def speedup_interval(base: RunSummary, run: RunSummary) -> dict[str, float]:
    """95 % interval of ``run``'s speedup over ``base`` (:func:`paired_interval`), as the
    table's columns."""
    lo, hi = paired_interval(run, base)
    return {"speedup_ci_low": lo, "speedup_ci_high": hi}


def wide_intervals(frame: pd.DataFrame, limit: float = WIDE_INTERVAL) -> pd.DataFrame:
    """Rows whose speedup interval is wider than ``limit`` (a share of it) either side; a
    sweep of plain decoding alone, which targets its throughput, by the throughput's (QA: a
    plain sweep stopped short of its target without a word, its speedups exactly 1)."""
    if len(frame) and (frame.method == "autoregressive").all():
        low, high, value = (
            frame.throughput_tok_s_ci_low,
            frame.throughput_tok_s_ci_high,
            frame.throughput_tok_s,
        )
    else:
        low, high, value = frame.speedup_ci_low, frame.speedup_ci_high, frame.speedup
    half = (high - low) / 2 / value
    return frame[half > limit]
