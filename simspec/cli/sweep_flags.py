"""The scenario flags of ``simspec sweep``, typed, and how they turn a scenario file (or none)
into the sweep to run: each flag given overrides the file (:func:`~simspec.cli.flags.overlay`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simspec.catalog.methods import (
    TOKEN_REPLAYED,
    left_out_of_all,
    preset_acceptance,
    preset_method,
    tau_measured_with,
    unused_field,
)
from simspec.catalog.models import preset_id
from simspec.catalog.token_traces import load_token_trace
from simspec.catalog.traces import packaged_traces
from simspec.cli import options as opt
from simspec.cli.common import csv_list, known_method
from simspec.cli.flags import ServingFlags, given, overlay, read_config, with_preset_ids
from simspec.config import MethodConfig
from simspec.engine.speculators import SPECULATORS
from simspec.errors import InputError
from simspec.studies.sweep import SweepConfig

DEFAULT_METHODS = "autoregressive,eagle3,ngram"


@dataclass(frozen=True)
class SweepFlags(ServingFlags):
    """What a sweep's flags say; None (or an empty value) = not given."""

    profile: opt.Profile = None
    methods: opt.Methods = None
    k: opt.K = None
    batch_sizes: opt.BatchSizes = None
    requests: opt.Requests = None
    turnovers: opt.Turnovers = None
    dataset: opt.Dataset = None
    token_trace: opt.TokenTrace = None
    prompt_len: opt.PromptLen = None
    output_len: opt.OutputLen = None
    alpha: opt.Alpha = None
    tau: opt.Tau = None
    tau_k: opt.TauK = None
    draft_model: opt.DraftModel = None
    speculative_config: opt.SpeculativeConfig = None
    max_num_seqs: opt.MaxNumSeqs = None
    max_num_batched_tokens: opt.MaxNumBatchedTokens = None
    temperature: opt.Temperature = None
    top_p: opt.TopP = None
    seed: opt.Seed = None

    def sweep_config(self, config: Path | None, flag: str = "--config") -> SweepConfig:
        """The scenario file (or none; ``flag`` names it in errors) with these flags on top,
        validated."""
        self.check_acceptance_flags()
        file = read_config(config, flag) if config else {}
        data = with_preset_ids(overlay(file, self.scenario_fields()))
        self.check_fixed_lengths(file)
        methods = self.chosen_methods(data)
        if not isinstance(methods, list):
            raise InputError("methods", "give a list of methods")
        workload = data.get("workload")
        trace = workload.get("trace") if isinstance(workload, dict) else None
        dataset = trace if isinstance(trace, str) and trace in packaged_traces() else self.trace
        data["methods"] = [self.tuned(m, dataset) for m in methods]
        return SweepConfig(**data)

    def check_acceptance_flags(self) -> None:
        """--alpha, --tau and --tau-k each set the acceptance: --tau-k only says what --tau was
        measured at, and --alpha with --tau would drop one of them."""
        if self.tau_k is not None and self.tau is None:
            raise InputError("--tau-k", "is the chain length --tau was measured at: give --tau")
        if self.alpha is not None and self.tau is not None:
            raise InputError("--alpha", "give --alpha or --tau, not both")

    def check_fixed_lengths(self, file: dict[str, Any]) -> None:
        """--prompt-len or --output-len alone: fixed lengths replace the trace's prompt and
        output lengths together, so the other side must be given too, unless the file already
        has fixed lengths (``trace: null``), of which the flag replaces its own side."""
        if (self.prompt_len is None) == (self.output_len is None):
            return
        workload = file.get("workload")
        if isinstance(workload, dict) and "trace" in workload and workload["trace"] is None:
            return
        given_flag, other = (
            ("--prompt-len", "--output-len")
            if self.prompt_len is not None
            else ("--output-len", "--prompt-len")
        )
        raise InputError(
            given_flag,
            f"fixed lengths replace the trace's prompt and output lengths together: "
            f"give {other} too",
        )

    @property
    def trace(self) -> str:
        """The packaged trace behind request lengths and acceptance presets."""
        return self.dataset or "sharegpt"

    def scenario_fields(self) -> dict[str, Any]:
        """The deployment, workload and scheduler fields the flags set, as a scenario file
        would write them."""
        if self.dataset and self.dataset not in packaged_traces():
            raise InputError(
                "--dataset",
                f"unknown dataset {self.dataset!r}; choose from {', '.join(packaged_traces())}",
            )
        if self.token_trace:
            load_token_trace(self.token_trace, "--token-trace")  # a bad file fails here, by name
        workload = given(
            requests=self.requests,
            turnovers=self.turnovers,
            trace=self.token_trace or self.dataset or None,
        )
        for flag, side, value in (
            ("--prompt-len", "prompt", self.prompt_len),
            ("--output-len", "output", self.output_len),
        ):
            if value is None:
                continue
            if value < 1:
                raise InputError(flag, f"must be >= 1 (got {value})")
            workload["trace"] = None  # fixed lengths instead of the trace's
            workload[side] = {"dist": "fixed", "mean": value}
        sizes = (
            csv_list(self.batch_sizes, "--batch-sizes", int)
            if self.batch_sizes is not None
            else None
        )
        return {
            **self.serving_fields(),
            **given(
                profile=self.profile,
                seed=self.seed,
                temperature=self.temperature,
                top_p=self.top_p,
                batch_sizes=sizes,
            ),
            "workload": workload,
            "scheduler": given(
                max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens
            ),
        }

    def chosen_methods(self, data: dict[str, Any]) -> Any:
        """The methods to run: a --speculative-config against autoregressive, else --methods
        (each in its preset), else the file's, else the default three."""
        target = data.get("model", "llama-3.1-8b")
        if self.speculative_config:
            return [{"name": "autoregressive", "k": 0}, self.vllm_method(target)]
        if not self.methods and "methods" in data:
            return data["methods"]
        if self.wants_all:
            left = self.left_out(data)
            names = [n for n in SPECULATORS if n not in left]
        else:
            names = csv_list(self.methods or DEFAULT_METHODS, "--methods")
        return [
            preset_method(known_method(n), self.trace, self.draft, target).model_dump(
                exclude_none=True
            )
            for n in names
        ]

    @property
    def draft(self) -> str | None:
        """--draft-model, a Hugging Face id of a preset read as that preset."""
        return preset_id(self.draft_model) if self.draft_model else None

    @property
    def wants_all(self) -> bool:
        """``--methods all`` (case ignored) and no --speculative-config."""
        return (self.methods or "").strip().lower() == "all" and not self.speculative_config

    def left_out(self, data: dict[str, Any]) -> dict[str, str]:
        """The methods ``--methods all`` leaves out, and why (for any model the sweep serves:
        its model, or every model on a grid's model axis); empty unless --methods all."""
        if not self.wants_all:
            return {}
        grid = data.get("grid") if isinstance(data.get("grid"), dict) else {}
        models = grid.get("model") if isinstance(grid.get("model"), list) else None
        models = models or [data.get("model", "llama-3.1-8b")]
        out: dict[str, str] = {}
        for name in SPECULATORS:
            for model in models:
                why = left_out_of_all(name, str(model))
                if why:
                    out.setdefault(name, why)
        return out

    def tuned(self, method: Any, dataset: str | None = None) -> dict[str, Any]:
        """One method with --k, --alpha or --tau, and --draft-model applied (plain decoding
        has no draft to tune); a method written without ``acceptance`` takes its packaged
        preset for ``dataset`` (that of --methods)."""
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
            # the sweep runs its own baseline in place of this entry: check it here
            unused = unused_field(MethodConfig(**m))
            if unused is not None:
                raise InputError(f"methods.autoregressive.{unused[0]}", unused[1])
            return m
        if self.k is not None:
            m["k"] = self.k
        if self.alpha is not None:
            m["acceptance"] = {"alpha": self.alpha}
        elif self.tau is not None:
            # a --tau was measured with the draft shape the method runs (--tau-k its depth)
            shape = tau_measured_with(m, self.tau_k or m.get("k", 1))
            m["acceptance"] = {"tau": self.tau, "tau_k": self.tau_k, **shape}
        elif self.token_trace and name in TOKEN_REPLAYED:
            m["acceptance"] = {"tokens": self.token_trace}
        if name == "draft_model" and self.draft:
            m["draft_model"] = self.draft
        if m.get("acceptance") is None and isinstance(name, str):
            preset = preset_acceptance(name, dataset or self.trace)
            if preset is not None:
                m["acceptance"] = preset.model_dump(exclude_none=True)
        if name in SPECULATORS and m.get("acceptance") is None:
            raise InputError(
                f"methods.{name}.acceptance",
                "no packaged acceptance preset for this method and model: "
                "give --alpha, or --tau with --tau-k",
            )
        return m

    def vllm_method(self, target: str) -> dict[str, Any]:
        """The vLLM --speculative-config as one simspec method: the method's preset, then the
        config's own fields on top."""
        from simspec.catalog.vllm import read_speculative_config, to_method

        fields = to_method(read_speculative_config(self.speculative_config or ""))
        if isinstance(fields.get("draft_model"), str):  # vLLM's "model": an id of a preset
            fields["draft_model"] = preset_id(fields["draft_model"])
        draft = self.draft or fields.get("draft_model")
        base = preset_method(fields["name"], self.trace, draft, target).model_dump(
            exclude_none=True
        )
        if "tree_paths" in fields:  # the config's own tree replaces the preset's shape; a
            base.pop("tree_nodes", None)  # preset tau stays tied to the tree it was measured with
            base.pop("tree_topk", None)
        return {**base, **fields}
