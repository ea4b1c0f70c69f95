"""The flags that set a method's draft and acceptance, one set for every command that runs a
method (``sweep``, ``plan``, ``recommend``, ``policy``): a measured acceptance (--alpha, or
--tau at --tau-k), the draft length (--k), a draft model, a token trace, or a whole vLLM
--speculative-config. Each flag goes on top of the method a scenario file or a preset gives;
one that no chosen method reads is an error naming it, never dropped."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from simspec.catalog.hardware import load_engine
from simspec.catalog.methods import (
    TOKEN_REPLAYED,
    at_depth,
    drafted_length,
    k_not_read,
    left_out_of_all,
    measured_acceptance,
    method_defaults,
    missing_head,
    named_alone,
    no_acceptance,
    preset_acceptance,
    preset_method,
    tau_spread,
    unused_field,
)
from simspec.catalog.models import preset_id
from simspec.catalog.tables import shown
from simspec.catalog.token_traces import load_token_trace
from simspec.catalog.traces import packaged_traces
from simspec.cli import options as opt
from simspec.cli.common import err, known_method
from simspec.config import MAX_K, Deployment, MethodConfig
from simspec.engine.speculators import SPECULATORS
from simspec.errors import InputError
from simspec.studies.bench.measured import Acceptance

if TYPE_CHECKING:
    from simspec.catalog.arrival_traces import ArrivalTrace

AUTOREGRESSIVE = {"name": "autoregressive", "k": 0}
DEFAULT_MODEL = Deployment.model_fields["model"].default


def asks_all(names: list[str] | None) -> bool:
    """``--methods all`` (case ignored): every method that runs on the model."""
    return names is not None and len(names) == 1 and names[0].strip().lower() == "all"


def all_methods(
    models: list[str],
    draft: str | None,
    engine: str | None = None,
    dp: int = 1,
    tp: int | Sequence[int] = 1,
    context: int | None = None,
) -> tuple[list[str], dict[str, str]]:
    """What ``--methods all`` runs on every one of ``models`` (in the registry's order), and
    what it leaves out with why (:func:`~simspec.catalog.methods.left_out_of_all`, the first
    model's reason): a method left out for one model is left out for all, so every model runs
    the same set. ``draft``: --draft-model, which lets draft_model run on any model;
    ``engine``: the engine profile, where it runs only the methods it ships (trtllm); ``dp``:
    its data-parallel attention ranks, beside which an engine may refuse a method; ``tp``: the
    GPUs (every value of a grid's tp axis), over which a published EAGLE-3 head's attention
    may not split; ``context``: the deployment's max_model_len (None: the model's), which a
    draft model must serve."""
    tps = (tp,) if isinstance(tp, int) else tuple(tp)
    left: dict[str, str] = {}
    for name in SPECULATORS:
        for model in models:
            for each in tps:
                why = left_out_of_all(name, model, draft, engine, dp, each, context)
                if why:
                    break
            if why:
                left.setdefault(name, why)
    return [n for n in SPECULATORS if n not in left], left


AcceptanceFrom = Annotated[
    Path | None,
    typer.Option(
        help="your server's measured acceptance as each speculative method's: a vllm bench "
        "serve --save-result JSON of a speculative run (per-position acceptance: α per "
        "position at K = the positions drafted; else its acceptance length as τ at the "
        "method's K), SGLang bench_serving --output-file JSONL (accept_length, as τ), or "
        "vLLM's /metrics text; several runs in one file are pooled by their output tokens "
        "(at most 256 MiB; /metrics 16 MiB)",
        metavar="FILE",
    ),
]


@dataclass(frozen=True)
class MethodFlags:
    """What the method flags say; None = not given."""

    k: opt.K = None
    token_trace: opt.TokenTrace = None
    alpha: opt.Alpha = None
    tau: opt.Tau = None
    tau_k: opt.TauK = None
    draft_model: opt.DraftModel = None
    speculative_config: opt.SpeculativeConfig = None
    acceptance_from: AcceptanceFrom = None

    def check_acceptance_flags(self) -> None:
        """--alpha, --tau and --tau-k each set the acceptance: --tau-k only says what --tau was
        measured at, and --alpha with --tau would drop one of them; --acceptance-from is a
        measured acceptance too, so it goes alone."""
        if self.tau_k is not None and self.tau is None:
            raise InputError("--tau-k", "is the chain length --tau was measured at: give --tau")
        if self.tau_k is not None and not 1 <= self.tau_k <= MAX_K:
            raise InputError(
                "--tau-k",
                f"must be 1 to {MAX_K} (got {self.tau_k}): the chain length (or "
                "tree depth) --tau was measured at",
            )
        if self.alpha is not None and not 0.0 <= self.alpha <= 1.0:
            # QA: refused as methods.1.acceptance, an index into a list nobody wrote
            raise InputError(
                "--alpha",
                f"must be in [0, 1] (got {self.alpha:g}): the mean acceptance of a draft token",
            )
        if self.alpha is not None and self.tau is not None:
            raise InputError("--alpha", "give --alpha or --tau, not both")
        if self.acceptance_from is not None and (self.alpha is not None or self.tau is not None):
            raise InputError("--acceptance-from", "give it, --alpha or --tau, not two of them")

    @functools.cached_property
    def written_config(self) -> dict[str, Any]:
        """--speculative-config as written (inline, or a file read once)."""
        from simspec.catalog.vllm import read_speculative_config

        return read_speculative_config(self.speculative_config or "")

    @functools.cached_property
    def file_acceptance(self) -> Acceptance | None:
        """--acceptance-from, read once (a bad file fails by the flag's name)."""
        if self.acceptance_from is None:
            return None
        from simspec.studies.bench.acceptance import read_acceptance

        return read_acceptance(self.acceptance_from)

    def checked_token_trace(self) -> str | None:
        """--token-trace, read once here so that a bad file fails by the flag's name."""
        if self.token_trace:
            load_token_trace(self.token_trace, "--token-trace")
        return self.token_trace or None

    @property
    def draft(self) -> str | None:
        """--draft-model, a Hugging Face id of a preset read as that preset."""
        return preset_id(self.draft_model) if self.draft_model else None

    def presets(
        self,
        names: list[str],
        dataset: str,
        target: str,
        flag: str = "--methods",
        engine: str | None = None,
    ) -> list[dict[str, Any]]:
        """Methods named by the user (``simspec methods`` names, case ignored), each in its
        preset for ``dataset`` as ``engine`` (None: the default's) drafts it, as scenario-file
        dicts."""
        methods = [known_method(n, flag) for n in names]
        if twice := sorted({n for n in methods if methods.count(n) > 1}):
            # QA: plan --methods eagle3,eagle3 ran it twice and called the two within noise
            raise InputError(flag, f"{', '.join(twice)} named more than once: name each once")
        for name in methods:  # a head trained on another target's hidden states is no head
            if why := missing_head(name, target):
                raise InputError(flag, why)
        engine = engine or Deployment.model_fields["engine"].default
        # the shape an engine picks itself (SGLang) is for a server given none: --k gives one
        shaped = self.k is None
        return [
            preset_method(name, dataset, self.draft, target, engine, shaped).model_dump(
                exclude_none=True
            )
            for name in methods
        ]

    def shaped_as_preset(self, method: Any, dataset: str, target: str, engine: str | None) -> Any:
        """A file's method given by its name alone (and perhaps its acceptance) runs its
        preset's shape for ``engine``, as ``--methods NAME`` does (QA: ``- name: eagle2`` ran a chain of 6 with acceptance measured on a 50-node tree,
        1.88x against --methods eagle2's 2.62x). Its preset's acceptance comes with it unless
        the file gives one."""
        # only a method the file names and nothing else: a field it sets may clash with the
        # preset's (QA: ngram with prompt_lookup_max 3 took the preset's min of 5, refused)
        if not named_alone(method) or method["name"] not in SPECULATORS or self.k is not None:
            return method
        name = method["name"]
        if missing_head(name, target):
            return method  # refused, with why, where the method is built
        engine = engine or Deployment.model_fields["engine"].default
        preset = preset_method(name, dataset, self.draft, target, engine, True)
        base = preset.model_dump(exclude_none=True)
        if "acceptance" in method:
            base.pop("acceptance", None)
        return {**base, **method}

    def file_methods(self, data: dict[str, Any]) -> list[Any] | None:
        """A scenario file's methods: its ``methods`` list (a sweep's) or its one ``method`` (a
        scenario's or a policy's); None if it names none."""
        if "methods" in data and "method" in data:
            raise InputError("--config", "give methods (a list) or method (one), not both")
        if "methods" in data:
            methods = data["methods"]
            if not isinstance(methods, list):
                raise InputError("methods", "give a list of methods")
            key = "methods"
        elif "method" in data:
            methods, key = [data["method"]], "method"
        else:
            return None
        for m in methods:  # named by the key the file used (QA: "method: eagle3" blamed methods)
            if not isinstance(m, dict):
                shape = f"{{name: {m}}}" if isinstance(m, str) else "{name: eagle3, k: 3}"
                item = f"- {shape}" if key == "methods" else shape
                raise InputError(
                    key, f"each method is a mapping with at least a name ({key}: {item})"
                )
        return methods

    def tuned(self, method: Any, dataset: str, stated_k: Any = None) -> dict[str, Any]:
        """One method with --k, --alpha or --tau, a token trace and --draft-model applied
        (plain decoding has no draft to tune); a method written without ``acceptance`` takes
        its packaged preset for ``dataset``. ``stated_k``: the draft length the user's file
        or --speculative-config wrote for it (None: a preset's, or none)."""
        if not isinstance(method, dict):
            raise InputError("methods", "each method must be a mapping with at least a name")
        m = dict(method)
        name = m.get("name")
        unknown = [key for key in m if key not in MethodConfig.model_fields]
        if unknown:
            raise InputError(
                f"methods.{name}.{unknown[0]}",
                "unknown field (misspelled?); a method's fields: "
                + ", ".join(MethodConfig.model_fields),
            )
        if name == "autoregressive":
            # a study runs its own baseline in place of this entry: check it here
            unused = unused_field(MethodConfig(**m))
            if unused is not None:
                raise InputError(f"methods.autoregressive.{unused[0]}", unused[1])
            return m
        if m.get("k") == 0 and type(m["k"]) is int:
            # QA: a file's {name: mtp, k: 0} ran, its row "mtp K=0 1.00x", where --k 0, a grid's
            # k: [0] and num_speculative_tokens: 0 are refused
            raise InputError(
                f"methods.{name}.k",
                f"must be 1 to {MAX_K} (got 0) for a speculative method: autoregressive is the "
                "method that drafts none",
            )
        if "k" in m and (why := k_not_read(m)) is not None and m["k"] != drafted_length(m):
            # QA: a file's lookahead k: 12 ran lookahead_ngram - 1 = 4, its rows labelled 12
            raise InputError(
                f"methods.{name}.k",
                f"{m['k']} is not the length {name} drafts ({drafted_length(m)}): {why}",
            )
        if "k" not in m and self.k is None and name in SPECULATORS:
            # a method written without k drafts its own default length, as --methods NAME
            # does (QA: MethodConfig's 3 ran suffix at K=3, not vLLM's 24)
            m["k"] = method_defaults(name)["k"]
        if self.k is not None:
            if not 1 <= self.k <= MAX_K:
                raise InputError(
                    "--k",
                    f"must be 1 to {MAX_K} (got {self.k}): the draft length of every speculative "
                    "method; autoregressive is the method that drafts none",
                )
            why = k_not_read(m)
            if why is not None:
                raise InputError("--k", f"does not set {name}'s draft length: {why}")
            m = at_depth(m, self.k)
        measured = measured_acceptance(m, alpha=self.alpha, tau=self.tau, tau_k=self.tau_k)
        if self.file_acceptance is not None:
            m = self.with_file_acceptance(m, stated_k)
        elif measured is not None:
            if "tau" in measured and name in SPECULATORS:
                # a mean τ says nothing of how requests differ: they differ as the packaged
                # traces of its drafter and domain measured, as validate runs a row's
                # measured_tau (QA: identical requests, TPOT p99 20-38 % below the traces')
                measured |= {"spread": tau_spread(name, dataset)}
            m["acceptance"] = measured
        elif self.token_trace and name in TOKEN_REPLAYED:
            m["acceptance"] = {"tokens": self.token_trace}
        if name in ("draft_model", "pard") and self.draft:
            m["draft_model"] = self.draft
        if m.get("acceptance") is None and isinstance(name, str):
            preset = preset_acceptance(name, dataset)
            if preset is not None:
                m["acceptance"] = preset.model_dump(exclude_none=True)
        if name in SPECULATORS and m.get("acceptance") is None:
            raise InputError(
                f"methods.{name}.acceptance",
                no_acceptance(name)
                or "no packaged acceptance preset for this method and model: "
                "give --alpha, or --tau with --tau-k",
            )
        return m

    def with_file_acceptance(self, method: dict[str, Any], stated_k: Any = None) -> dict[str, Any]:
        """``method`` with --acceptance-from's acceptance: per-position shares set its K (a
        chain, as vLLM verifies), an acceptance length is τ at its K. A K stated by --k, or by
        the method's own config (``stated_k``), must be the one the file drafted (QA: a
        --speculative-config's num_speculative_tokens 5 ran at the file's 3 without a word)."""
        from simspec.studies.bench.acceptance import with_acceptance

        acc = self.file_acceptance
        assert acc is not None
        if acc.per_position and method.get("name") == "lookahead":
            raise InputError(
                "--acceptance-from",
                "per-position acceptance sets the draft length, and lookahead's is "
                "lookahead_ngram - 1: give a run's acceptance length, or --tau",
            )
        where = f"--acceptance-from {shown(str(self.acceptance_from))}"
        if self.k is not None or not isinstance(stated_k, int):
            return with_acceptance(method, acc, self.k, where)[0]
        flag = (
            "--speculative-config" if self.speculative_config else f"methods.{method.get('name')}.k"
        )
        return with_acceptance(method, acc, stated_k, where, flag)[0]

    def check_read(self, methods: list[dict[str, Any]]) -> None:
        """Every method flag given is read by a chosen method: --k, --alpha and --tau by any
        speculative one, --draft-model by draft_model (a flag no method reads would be
        silently dropped)."""
        names = [m.get("name") for m in methods]
        drafting = [n for n in names if n != "autoregressive"]
        given = (
            ("--k", self.k),
            ("--alpha", self.alpha),
            ("--tau", self.tau),
            ("--acceptance-from", self.acceptance_from),
        )
        for flag, value in given:
            if value is not None and not drafting:
                raise InputError(flag, "sets a speculative method, and only plain decoding runs")
        if self.draft_model and "draft_model" not in names:
            raise InputError(
                "--draft-model",
                "is the draft of the draft_model method, which is not among the methods",
            )

    def vllm_method(
        self, target: str, dataset: str, tp: int = 1, engine: str | None = None
    ) -> dict[str, Any]:
        """The vLLM --speculative-config as one simspec method for a target at tensor
        parallelism ``tp`` on ``engine``: the method's preset for ``dataset``, then the
        config's own fields on top."""
        from simspec.catalog.vllm import capped_bands, to_method

        cfg = self.written_config
        if "num_speculative_tokens_per_batch_size" in cfg and (
            engine is not None and load_engine(engine).disables_by_batch_size
        ):  # QA: vllm-v0 simulated the V1 schedule
            raise InputError(
                "--speculative-config",
                "num_speculative_tokens_per_batch_size is vLLM V1's Dynamic SD, which vLLM V0 "
                f"(engine {engine}) never reads: give V0's disable_by_batch_size, or run engine "
                "vllm",
            )
        fields = to_method(cfg, tp)
        if capped := capped_bands(cfg):
            err.print(f"note: --speculative-config: {capped}", highlight=False)
        if isinstance(fields.get("draft_model"), str):  # vLLM's "model": an id of a preset
            fields["draft_model"] = preset_id(fields["draft_model"])
        draft = self.draft or fields.get("draft_model")
        # the preset as vLLM drafts it: a chain unless the config gives a tree, which then
        # replaces the preset's shape (a preset tau stays tied to the tree it was measured with)
        base = preset_method(fields["name"], dataset, draft, target, engine="vllm")
        return {**base.model_dump(exclude_none=True), **fields}

    def chosen(
        self,
        data: dict[str, Any],
        names: list[str] | None,
        default: list[str],
        dataset: str,
        flag: str = "--methods",
    ) -> list[dict[str, Any]]:
        """The methods to run, tuned and checked: a --speculative-config (against plain
        decoding), else ``names`` (from ``flag``), else the file's, else ``default``; each in
        its preset for ``dataset`` unless the file writes it out. ``names`` of ``all`` are
        :func:`all_methods` for the model."""
        self.check_acceptance_flags()
        target = data.get("model", DEFAULT_MODEL)
        target = target if isinstance(target, str) else DEFAULT_MODEL
        if asks_all(names) and not self.speculative_config:
            names = scenario_methods([target], self.draft, data)[0]
        from_file = self.file_methods(data)
        if self.speculative_config:
            if names is not None:
                raise InputError(flag, "give it or --speculative-config, not both")
            if self.k is not None:
                raise InputError(
                    "--k",
                    "the --speculative-config's num_speculative_tokens sets the draft length: "
                    "give one or the other",
                )
            tp, dp = data.get("tp", 1), data.get("dp", 1)
            tp = tp if isinstance(tp, int) else 1  # a bad tp is the scenario's to refuse
            if isinstance(dp, int) and dp > 0 and tp % dp == 0:
                tp //= dp  # vLLM's --tensor-parallel-size: each DP rank's (--dp D --tp N/D)
            engine = scenario_engine(data)
            methods: list[Any] = [AUTOREGRESSIVE, self.vllm_method(target, dataset, tp, engine)]
            # the K the config wrote, not the preset's under it
            stated = [None, self.written_config.get("num_speculative_tokens")]
        elif names is None and from_file is not None:
            engine = scenario_engine(data)
            methods = [self.shaped_as_preset(m, dataset, target, engine) for m in from_file]
            stated = [m.get("k") if isinstance(m, dict) else None for m in from_file]
        else:
            engine = scenario_engine(data)
            methods = self.presets(names or default, dataset, target, flag, engine)
            stated = [None] * len(methods)
        # a K the user wrote must agree with --acceptance-from's (QA: replaced without a word)
        tuned = [self.tuned(m, dataset, k) for m, k in zip(methods, stated, strict=True)]
        self.check_read(tuned)
        return tuned


def trace_methods(
    flags: MethodFlags,
    data: dict[str, Any],
    trace: ArrivalTrace,
    names: list[str] | None,
    default: list[str],
    flag: str,
) -> list[dict[str, Any]]:
    """The methods a replay of ``trace`` runs, each in its preset for the trace's acceptance
    dataset (:func:`acceptance_dataset`). A trace that names no domain (arrival_s, prompt_len,
    output_len only) needs one only when the methods depend on it: plain decoding reads no
    acceptance, nor does a method given its own (--alpha, --tau, the file's)."""
    from simspec.catalog.arrival_traces import PACKAGED_DATASETS, acceptance_dataset

    given = getattr(flags, "dataset", None)  # --dataset, where the command has it
    if trace.dataset is not None and given and given != trace.dataset:
        # the trace's own column says each request's dataset, as --dataset's help says (QA: the
        # flag replaced it without a word); the explorer reads the column too
        raise InputError(
            "--dataset",
            f"the trace {trace.name} names its requests' dataset ({trace.dataset}) in its "
            f"dataset/domain column, which the replay reads: drop --dataset {given}, or "
            "edit the column",
        )
    try:
        dataset = acceptance_dataset(trace, given)
    except InputError as exc:
        unnamed = exc
    else:
        return flags.chosen(data, names, default, dataset, flag)
    first = flags.chosen(data, names, default, PACKAGED_DATASETS[0], flag)
    try:
        same = all(
            flags.chosen(data, names, default, ds, flag) == first for ds in PACKAGED_DATASETS[1:]
        )
    except InputError:
        same = False  # a dataset without a preset for a method: the dataset matters
    if not same:
        needing = [m["name"] for m in first if m["name"] != "autoregressive"]
        raise InputError(
            "--dataset",
            f"{', '.join(needing)} takes its acceptance from a dataset, and {unnamed.message}",
        ) from None
    return first


def preset_dataset(workload: Any, dataset: str | None) -> str:
    """The packaged dataset whose acceptance presets a method without its own takes: the
    workload's lengths_from when it is a packaged one, else --dataset, else sharegpt."""
    trace = workload.get("lengths_from") if isinstance(workload, dict) else None
    if isinstance(trace, str) and trace in packaged_traces():
        return trace
    return dataset or "sharegpt"


def scenario_methods(
    models: list[str], draft: str | None, data: dict[str, Any]
) -> tuple[list[str], dict[str, str]]:
    """:func:`all_methods` for ``models`` as a scenario's fields deploy them (engine, dp, every
    tp of a grid's axis, the context it serves)."""
    return all_methods(
        models,
        draft,
        scenario_engine(data),
        scenario_dp(data),
        scenario_tp(data),
        scenario_context(data),
    )


def scenario_tp(data: dict[str, Any]) -> list[int]:
    """The tensor-parallel GPUs a scenario's fields name: its tp (1 where unset) and every value
    of a grid's tp axis (QA: a grid's tp 16 ran the eagle3 --methods all had kept for tp 8)."""

    def count(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    tp = data.get("tp")
    grid = data.get("grid")
    axis = grid.get("tp") if isinstance(grid, dict) else None
    extra = [v for v in axis if count(v)] if isinstance(axis, list) else []
    return [tp if count(tp) else 1, *extra]


def scenario_context(data: dict[str, Any]) -> int | None:
    """The context a scenario's fields start the engine with (scheduler.max_model_len; None:
    the model's)."""
    scheduler = data.get("scheduler")
    given = scheduler.get("max_model_len") if isinstance(scheduler, dict) else None
    return given if isinstance(given, int) and not isinstance(given, bool) else None


def scenario_dp(data: dict[str, Any]) -> int:
    """The data-parallel attention ranks a scenario's fields name (1 where unset)."""
    dp = data.get("dp")
    return dp if isinstance(dp, int) and not isinstance(dp, bool) else 1


def scenario_engine(data: dict[str, Any]) -> str | None:
    """The engine profile a scenario's fields name (None: the default's, which runs any)."""
    engine = data.get("engine")
    return engine if isinstance(engine, str) else None
