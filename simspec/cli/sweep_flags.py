"""The scenario flags of ``simspec sweep``, typed, and how they turn a scenario file (or none)
into the sweep to run: each flag given overrides the file (:func:`~simspec.cli.flags.overlay`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simspec.catalog.methods import TOKEN_REPLAYED, preset_method, tau_measured_with
from simspec.catalog.token_traces import load_token_trace
from simspec.catalog.traces import packaged_traces
from simspec.cli import options as opt
from simspec.cli.common import csv_list, known_method
from simspec.cli.flags import ServingFlags, given, overlay, read_config
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
        """The scenario file (or none; ``flag`` names it in errors) with these flags on top."""
        data = overlay(read_config(config, flag) if config else {}, self.scenario_fields())
        methods = self.chosen_methods(data)
        if not isinstance(methods, list):
            raise InputError("methods", "give a list of methods")
        data["methods"] = [self.tuned(m) for m in methods]
        return SweepConfig(**data)

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
        workload = given(requests=self.requests, trace=self.token_trace or self.dataset or None)
        if self.prompt_len is not None or self.output_len is not None:
            workload["trace"] = None  # fixed lengths instead of the trace's
            workload["prompt"] = {"dist": "fixed", "mean": self.prompt_len or 512}
            workload["output"] = {"dist": "fixed", "mean": self.output_len or 256}
        sizes = csv_list(self.batch_sizes, "--batch-sizes", int) if self.batch_sizes else None
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
        names = csv_list(self.methods or DEFAULT_METHODS, "--methods")
        if names == ["all"]:
            names = list(SPECULATORS)
        return [
            preset_method(known_method(n), self.trace, self.draft_model, target).model_dump(
                exclude_none=True
            )
            for n in names
        ]

    def tuned(self, method: Any) -> dict[str, Any]:
        """One method with --k, --alpha or --tau, and --draft-model applied (plain decoding
        has no draft to tune)."""
        if not isinstance(method, dict):
            raise InputError("methods", "each method must be a mapping with at least a name")
        m = dict(method)
        name = m.get("name")
        if name == "autoregressive":
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
        if name == "draft_model" and self.draft_model:
            m["draft_model"] = self.draft_model
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
        draft = self.draft_model or fields.get("draft_model")
        base = preset_method(fields["name"], self.trace, draft, target).model_dump(
            exclude_none=True
        )
        if "tree_paths" in fields:  # the config's own tree replaces the preset's shape; a
            base.pop("tree_nodes", None)  # preset tau stays tied to the tree it was measured with
            base.pop("tree_topk", None)
        return {**base, **fields}
