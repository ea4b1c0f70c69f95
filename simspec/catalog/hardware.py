"""Presets as data: GPUs, hardware profiles and engine profiles.

Every value lives in a YAML file under ``simspec/data`` next to the source it was read from;
this module only validates and loads them (model shapes: :mod:`simspec.catalog.models`).
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simspec.catalog.tables import (
    packaged_table,
    packaged_yaml,
    parse_json_or_yaml,
    read_input_text,
    shown,
)
from simspec.errors import InputError, validation_message

MAX_PROFILE_BYTES = 1024 * 1024  # a fitted profile is a few KB


Arch = Literal["ampere", "ada", "hopper", "blackwell", "cdna3", "cdna4"]


class GpuSpec(BaseModel):
    """Datasheet numbers for one GPU (per device).

    Tensor peaks are dense (no 2:4 sparsity). ``fp8_dense_flops`` is None where the GPU has no
    FP8 tensor cores (Ampere): FP8 weights then run weight-only (see
    :mod:`simspec.catalog.precision`). ``arch`` names the tensor-core generation that
    precision data (simspec/data/precision.yaml) is keyed by."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    name: str
    arch: Arch
    bf16_dense_flops: float = Field(gt=0)
    fp8_dense_flops: float | None = Field(default=None, gt=0)
    int8_dense_flops: float | None = Field(default=None, gt=0)
    fp4_dense_flops: float | None = Field(default=None, gt=0)
    hbm_bandwidth_bytes_s: float = Field(gt=0)
    memory_bytes: float = Field(gt=0)
    # CUDA's total (torch.cuda.mem_get_info), what the engines budget from; None: memory_bytes
    cuda_memory_bytes: float | None = Field(default=None, gt=0)
    cuda_memory_source: str = ""
    interconnect_bandwidth_bytes_s: float = Field(gt=0)
    # GPUs one server (or NVL72 rack) connects at that bandwidth (gpus.yaml)
    gpus_per_node: int = Field(ge=1)
    # a fully connected board's links per GPU, one to each peer, the bandwidth split evenly
    # over them (AMD Infinity Fabric: 7); None: a switch (NVLink/NVSwitch, PCIe) gives any
    # group the whole of it
    peer_links: int | None = Field(default=None, ge=1)
    source: str
    # Gb/s of the network card each GPU of the vendor's reference server has to the cluster
    # (a disaggregated deployment's KV link: PrefillPool); None where no reference server
    # states one (the link is then assumed: PrefillPool.link_gbps)
    nic_gbps: float | None = Field(default=None, gt=0)
    nic_source: str = ""

    @property
    def budget_bytes(self) -> float:
        """The memory an engine sizes its share of: CUDA's total where gpus.yaml gives it
        (vLLM's total_gpu_memory), else the driver's (gpus.yaml header)."""
        return self.memory_bytes if self.cuda_memory_bytes is None else self.cuda_memory_bytes

    def link_bytes_s(self, group: int) -> float:
        """Per-direction bandwidth one GPU drives to the other ``group - 1`` GPUs of a
        collective (2: a point-to-point send): all of it behind a switch; on a fully connected
        board only the links to those peers (QA: an MI300X pair was priced at all 7 links,
        its TP2 all-reduce 7x too fast)."""
        if self.peer_links is None or group < 2:
            return self.interconnect_bandwidth_bytes_s
        used = min(group - 1, self.peer_links)
        return self.interconnect_bandwidth_bytes_s * used / self.peer_links


class Sourced(BaseModel):
    """A number with the place it came from.

    ``basis`` says how it was obtained: ``measured`` (fitted to timing tables), ``datasheet``
    (a vendor number or derived from one), ``transferred`` (fitted on another GPU and applied
    here), ``assumed`` or ``estimate``; empty where the source says it all.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    value: float
    source: str
    basis: str = ""


class SourcedParams(BaseModel):
    """A named set of sourced numbers; subclasses list the keys they require."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    params: dict[str, Sourced]
    REQUIRED: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="after")
    def _require(self) -> SourcedParams:
        missing = [k for k in self.REQUIRED if k not in self.params]
        if missing:
            raise ValueError(f"params is missing {', '.join(missing)}")
        return self

    def __getitem__(self, key: str) -> float:
        return self.params[key].value


# A calibrated deployment's kernels run at most this factor slower or faster than the base
# profile says. The packaged profiles' worst held-out P90 error is 31 % (h100_sxm attention):
# a deployment needing twice that is not the GPU the profile describes (another --gpu, a
# throttled or shared card, another precision), and the fit stops at the bound and says so
# instead of absorbing it.
GPU_TIME_SCALE_RANGE = (0.5, 2.0)


class DeploymentFit(BaseModel):
    """The constants of one deployment rather than of its GPU, fitted to its own benchmark
    runs (``simspec calibrate bench``): the engine's host time per step and per sequence as
    this server runs them, and ``gpu_time_scale``, a multiplier on every forward's kernel time
    (1: the base profile's). They hold for the engine they were fitted on (``engine``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    engine: str
    params: dict[str, Sourced]
    fit: dict[str, Any] = Field(default_factory=dict)
    KEYS: ClassVar[tuple[str, ...]] = (
        "step_overhead_s",
        "step_overhead_per_seq_s",
        "gpu_time_scale",
    )

    @model_validator(mode="after")
    def _known_in_range(self) -> DeploymentFit:
        for key, p in self.params.items():
            if key not in self.KEYS:
                raise ValueError(f"deployment.params.{key} is not one of {', '.join(self.KEYS)}")
            low, high = GPU_TIME_SCALE_RANGE if key == "gpu_time_scale" else (0.0, 1.0)
            if not low <= p.value <= high:
                raise ValueError(
                    f"deployment.params.{key} must be in [{low}, {high}], got {p.value}"
                )
        return self


class HardwareProfile(SourcedParams):
    """Per-operator cost constants for one GPU (see :mod:`simspec.engine.costmodel` for the form).

    ``simspec calibrate fit`` writes these from timing tables; ``provenance`` names the tables
    (files, commits, date) and ``fit`` holds each operator's fit and held-out error.
    ``deployment``: constants fitted to one deployment's benchmark runs (``simspec calibrate
    bench``), applied on top of the engine profile by :meth:`engine_for` and
    :attr:`gpu_time_scale`.
    """

    gpu: str
    status: str = ""
    provenance: dict[str, Any] = Field(default_factory=dict)
    fit: dict[str, dict[str, Any]] = Field(default_factory=dict)
    deployment: DeploymentFit | None = None
    REQUIRED: ClassVar[tuple[str, ...]] = (
        "gemm_latency_s",
        "gemm_compute_efficiency",
        "gemm_memory_efficiency",
        "gemm_sharpness",
        "attention_latency_s",
        "attention_compute_efficiency",
        "attention_memory_efficiency",
        "attention_sharpness",
        "attention_decode_latency_s",
        "elementwise_latency_s",
        "elementwise_memory_efficiency",
        "allreduce_latency_s",
        "allreduce_bandwidth_efficiency",
    )

    def transferred_note(self) -> str:
        """One line saying which operators were not fitted on this GPU and where they came
        from ("" when every operator was measured here), for outputs that must not present a
        transferred profile as a calibrated one."""
        sources: dict[str, list[str]] = {}
        for op, fit in self.fit.items():
            if "transferred_from" in fit:
                sources.setdefault(str(fit["transferred_from"]), []).append(op)
        if not sources:
            return ""
        parts = [", ".join(ops) + f" from {src}" for src, ops in sources.items()]
        note = (
            f"{self.gpu} hardware profile transferred ({'; '.join(parts)}): "
            "no timing tables for those operators on this GPU"
        )
        # the kernel tables that replace the profile's operators where they cover the GPU
        # (QA: the note said "every operator" where the MoE kernels and all-reduce curves were
        # this GPU's own measurements)
        own = [
            what
            for table, what in (
                ("moe_kernels.yaml", "MoE expert kernels"),
                ("mla_kernels.yaml", "MLA decode attention"),
                ("collectives.yaml", "engine all-reduce"),
            )
            if self.gpu in packaged_table(table).get("gpus", {})
        ]
        if own:
            note += f"; its {', '.join(own)} are timed from tables measured on it"
        # kernel_tables.borrowed_moe_fit (QA: the roofline put weaker GPUs ahead of stronger)
        if borrows_moe_fits(load_gpu(self.gpu)):
            note += (
                "; MoE kernels no table of this GPU covers take the fits of the nearest GPU with "
                "tables at least as fast (HBM bandwidth and tensor peak; above them all, the "
                "nearest below), at this GPU's own peaks"
            )
        return note

    @property
    def gpu_time_scale(self) -> float:
        """The deployment's multiplier on kernel time (1 without a calibrated deployment)."""
        if self.deployment is None or "gpu_time_scale" not in self.deployment.params:
            return 1.0
        return self.deployment.params["gpu_time_scale"].value

    def engine_for(self, engine: EngineProfile) -> EngineProfile:
        """``engine`` as the calibrated deployment runs it: its host overheads replaced by the
        fitted ones. A deployment fitted on another engine is refused: its host time is that
        engine's."""
        if self.deployment is None:
            return engine
        if self.deployment.engine != engine.id:
            raise InputError(
                "profile",
                f"calibrated on engine {self.deployment.engine}, not {engine.id}: give --engine "
                f"{self.deployment.engine}, or the base profile {self.gpu}",
            )
        host = {k: v for k, v in self.deployment.params.items() if k in engine.params}
        return engine.model_copy(update={"params": {**engine.params, **host}})

    @model_validator(mode="after")
    def _values_in_range(self) -> HardwareProfile:
        for key, p in self.params.items():
            if key.endswith("efficiency") and not 0 < p.value <= 1:
                raise ValueError(f"{key} must be in (0, 1], got {p.value}")
            if key.endswith("_latency_s") and not 0 <= p.value < 1:
                raise ValueError(f"{key} must be in [0, 1) seconds, got {p.value}")
            if key.endswith("sharpness") and not 1 <= p.value <= 64:
                raise ValueError(f"{key} must be in [1, 64], got {p.value}")
        return self


class MemoryTier(BaseModel):
    """An engine's defaults on GPUs with less than ``below_gib`` of memory (SGLang's
    ``_handle_gpu_memory_settings``): its token budget a step and CUDA-graph batch limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    below_gib: float = Field(gt=0)
    max_num_batched_tokens: int = Field(ge=1)
    cuda_graph_max_seqs: int = Field(ge=0)
    cuda_graph_max_seqs_tp4: int = Field(ge=0)


# (steps, topk, num_draft_tokens): SGLang's speculative shape, the verified root counted
DraftShape = tuple[int, int, int]


class AutoSpecShape(BaseModel):
    """The draft shape an engine release picks when a server is started with a speculative
    algorithm and no shape (SGLang's ``auto_choose_speculative_params``): by the served model's
    ``architectures[0]``, from release ``since`` until the next rule's."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    since: str
    source: str = Field(min_length=1)
    default: DraftShape
    # shapes other than the default, each for the architectures listed
    shapes: tuple[tuple[DraftShape, tuple[str, ...]], ...] = ()
    # a separate draft model's (SGLang STANDALONE); None: the release does not run one
    draft_model: DraftShape | None = None
    # n-gram's speculative_num_draft_tokens when given none (its trie's BFS tree: that many
    # tokens verified, the root included); None: the release keeps no such default
    ngram_draft_tokens: int | None = Field(default=None, ge=2)

    def shape_for(self, architecture: str) -> DraftShape:
        return next((shape for shape, archs in self.shapes if architecture in archs), self.default)


class EngineProfile(SourcedParams):
    """Host-side costs and scheduler defaults of a serving engine.

    ``custom_allreduce`` names the engine's own all-reduce kernel whose measured curves
    (``simspec/data/collectives.yaml``) tensor parallelism uses below the engine's switch to
    NCCL; empty: NCCL for every message. ``dp_attention`` names how the engine lays a model
    out under data-parallel attention (:mod:`simspec.engine.layout`); empty: it runs none."""

    id: str
    description: str = ""
    custom_allreduce: Literal["", "vllm", "sglang", "trtllm"] = ""
    base: str = ""  # the engine this profile is a version of (its tables stand where its own stop)
    dp_attention: Literal["", "vllm", "sglang"] = ""
    # the tensor-core generations the engine runs on; empty: every GPU simspec has
    gpu_archs: tuple[Arch, ...] = ()
    # speculative methods under which the engine keeps its overlap scheduler although
    # spec_disables_overlap (TRT-LLM's one-model EAGLE-3 and MTP)
    overlap_spec_methods: tuple[str, ...] = ()
    # the engine whose measured kernel tables and engine-specific paths (SGLang's n-gram
    # proposer, sparse attention) this profile runs: a version of an engine that changed only
    # its scheduler names its engine here; "" = its own id (engine_kernels)
    kernels: str = ""
    # defaults by the GPU's memory, smallest first (the first whose below_gib the GPU is
    # under applies; a GPU above every tier, or no tiers: the params)
    memory_tiers: tuple[MemoryTier, ...] = ()
    # the draft shape by release when none is given (SGLang), oldest first, and the release an
    # unversioned run takes them from (the newest the profile stands for)
    auto_spec_shapes: tuple[AutoSpecShape, ...] = ()
    release: str = ""
    # speculative methods under which an async scheduler (vLLM's --async-scheduling) stays on;
    # None: the engine has no async scheduler to turn on (with_async_scheduling)
    async_spec_methods: tuple[str, ...] | None = None
    # whether the engine turns speculation off from a number of running requests
    # (``disable_by_batch_size``): vLLM V0's spec-decode worker alone (check_load_policy)
    disables_by_batch_size: bool = False
    # how the engine defaults vLLM's n-gram sizes: "v1" (neither given: 5 and 5; one given:
    # the other copies it) or "v0" (prompt_lookup_max required, prompt_lookup_min 1 where
    # unset): catalog.vllm.lookup_sizes
    ngram_size_defaults: Literal["v1", "v0"] = "v1"
    # speculative methods the engine verifies greedily whatever the requests' temperature, and
    # the GPU generations on which it verifies every speculative method so: its outputs are
    # the greedy ones, and so is its acceptance (greedy_verify_source says why)
    greedy_verify_methods: tuple[str, ...] = ()
    greedy_verify_archs: tuple[Arch, ...] = ()
    greedy_verify_source: str = ""
    # the widest top-k a draft tree given explicitly keeps the overlap scheduler at under the
    # overlap_spec_methods (SGLang spec v2 falls back to v1 past it); None: no such bound
    overlap_topk_max: int | None = None
    # the methods draft_first_pass_padded and draft_prompt_in_first_pass apply to; empty: all
    first_pass_methods: tuple[str, ...] = ()
    # speculative methods the engine refuses beside data-parallel attention, and why
    dp_attention_refused: dict[str, str] = {}
    # the model architectures (config.json architectures[0]) the engine serves; empty: every
    # one simspec reads (architectures_source says where the list comes from)
    architectures: tuple[str, ...] = ()
    architectures_source: str = ""
    # checkpoint formats (ModelShape.quant_method) the engine runs only on some GPU
    # generations, and where the list comes from
    format_archs: dict[str, tuple[Arch, ...]] = {}
    format_archs_source: str = ""
    REQUIRED: ClassVar[tuple[str, ...]] = (
        "step_overhead_s",
        "step_overhead_per_seq_s",
        "layer_launch_s",
        "cuda_graph_max_tokens",
        "cuda_graph_max_seqs",
        "cuda_graph_max_seqs_tp4",
        "cuda_graph_decode_only",
        "pad_to_capture_size",
        "draft_step_overhead_s",
        "spec_step_overhead_s",
        "overlap_schedule",
        "spec_disables_overlap",
        "ngram_cpu_s_per_seq",
        "gpu_memory_utilization",
        "block_size",
        "max_num_seqs",
        "max_num_batched_tokens",
    )

    def verifies_greedily(self, method: str, arch: str) -> bool:
        """Whether the engine verifies ``method``'s drafts by the target's argmax on a GPU of
        ``arch`` at any temperature (:attr:`greedy_verify_methods`, :attr:`greedy_verify_archs`)."""
        if method == "autoregressive":
            return False
        return method in self.greedy_verify_methods or arch in self.greedy_verify_archs

    def overlaps(self, speculative: bool) -> bool:
        """Whether an overlap scheduler prepares the next step on the host while the GPU runs
        this one (the step then takes the longer of the two), unless speculation turns it off."""
        return bool(self["overlap_schedule"]) and not (
            speculative and self["spec_disables_overlap"]
        )

    def overlap_off_by(self, method: str) -> bool:
        """Whether running ``method`` may turn the overlap scheduler off: any speculative
        method but those the engine keeps overlap for (``overlap_spec_methods``)."""
        return method != "autoregressive" and method not in self.overlap_spec_methods

    def with_async_scheduling(self, on: bool | None) -> EngineProfile:
        """This profile as the deployment's ``scheduler.async_scheduling`` runs it (None: as
        it is). On: the scheduler prepares the next step while the GPU runs this one (vLLM's
        AsyncScheduler), kept under ``async_spec_methods`` and turned off by any other
        speculative method; off: every step waits for the host. An engine without one (None
        ``async_spec_methods``) is refused by name."""
        if on is None:
            return self
        if self.async_spec_methods is None:
            raise InputError(
                "scheduler.async_scheduling",
                f"engine {self.id} has no async scheduler to turn on or off (vLLM V1's "
                "--async-scheduling: engine vllm); leave it unset",
            )
        why = f"scheduler.async_scheduling {str(on).lower()} (vLLM --{'' if on else 'no-'}"
        why += "async-scheduling)"
        params = {
            **self.params,
            "overlap_schedule": Sourced(value=float(on), source=why),
            "spec_disables_overlap": Sourced(value=float(on), source=why),
        }
        methods = self.async_spec_methods if on else ()
        return self.model_copy(update={"params": params, "overlap_spec_methods": methods})

    def check_load_policy(self, disable_by_batch_size: int | None) -> None:
        """Refuse ``disable_by_batch_size`` on an engine that never reads it: the run would
        switch speculation off where the engine keeps it on (QA: vLLM V1 ran it as V0 does)."""
        if disable_by_batch_size is None or self.disables_by_batch_size:
            return
        raise InputError(
            "method.disable_by_batch_size",
            (
                "vLLM V1 never reads it (unused since v0.10.0, when V0 was removed; dropped "
                "from SpeculativeConfig by vLLM PR #35060, issue #25112): speculation stays on "
                "at every batch size. To turn it off from N running requests in V1, give the "
                "Dynamic SD schedule a band with K=0 (num_speculative_tokens_per_batch_size "
                "[[1, N-1, K], [N, 1024, 0]]), or run engine vllm-v0"
            )
            if self.family == "vllm"
            else f"engine {self.id} has no such setting (vLLM V0's speculative_disable_by_"
            "batch_size: engine vllm-v0); leave it unset",
        )

    @property
    def engine_kernels(self) -> str:
        """The engine id whose kernel tables and engine-specific paths this profile runs."""
        return self.kernels or self.id

    def batch_defaults(self, gpu: GpuSpec | None = None) -> tuple[int, int]:
        """(max_num_seqs, max_num_batched_tokens) the engine defaults to on ``gpu``: SGLang's
        token budget by the GPU's memory (``memory_tiers``); vLLM's smaller pair
        (``small_gpu_*``) on a GPU under ``large_gpu_min_gib`` of memory or an A100
        (EngineArgs.get_batch_defaults: its device-name check); ``gpu`` None: the params'."""
        seqs, tokens = int(self["max_num_seqs"]), int(self["max_num_batched_tokens"])
        if gpu is not None and (tier := self.memory_tier(gpu)) is not None:
            return seqs, tier.max_num_batched_tokens
        if gpu is not None and self.small_gpu(gpu.id, gpu.budget_bytes / 2**30):
            return int(self["small_gpu_max_num_seqs"]), int(
                self["small_gpu_max_num_batched_tokens"]
            )
        return seqs, tokens

    def small_gpu(self, gpu_id: str, gib: float) -> bool:
        """Whether the engine takes its smaller batch defaults on this GPU (vLLM's
        get_batch_defaults: under ``large_gpu_min_gib`` of memory, or an A100 by name)."""
        if "small_gpu_max_num_seqs" not in self.params:
            return False
        return gib < self["large_gpu_min_gib"] or "a100" in gpu_id

    def speculative_cap(self, given: int | None = None, gpu: GpuSpec | None = None) -> int | None:
        """The running requests the engine allows under speculative decoding where that is
        fewer than plain decoding's (SGLang's 48, ``spec_max_num_seqs``); None where the
        same limit holds for both."""
        cap = self.max_seqs_for("speculative", given, gpu)
        return cap if cap < self.max_seqs_for("autoregressive", given, gpu) else None

    def max_seqs_for(
        self, method: str, given: int | None = None, gpu: GpuSpec | None = None
    ) -> int:
        """The most sequences a step runs: the deployment's ``max_num_seqs`` where given, else
        the engine's default on ``gpu`` (:meth:`batch_defaults`), which an engine that lowers
        it for speculative decoding (``spec_max_num_seqs``: SGLang's max_running_requests 48)
        lowers for ``method``."""
        if given is not None:
            return int(given)
        if method != "autoregressive" and "spec_max_num_seqs" in self.params:
            return int(self["spec_max_num_seqs"])
        return self.batch_defaults(gpu)[0]

    @property
    def async_scheduling(self) -> bool:
        """Whether this profile schedules asynchronously (an engine with an async scheduler
        whose overlap is on)."""
        return self.async_spec_methods is not None and bool(self["overlap_schedule"])

    def flag(self, key: str) -> bool:
        """An optional 0/1 parameter only some engines set (absent: off)."""
        param = self.params.get(key)
        return bool(param is not None and param.value)

    def step_overhead(self, speculative: bool) -> float:
        """The fixed host time per engine step that the GPU waits for: none under overlap,
        whose host time shows only where it outlasts the GPU's (the cost model's forward)."""
        return 0.0 if self.overlaps(speculative) else self["step_overhead_s"]

    @property
    def family(self) -> str:
        """The engine whose per-engine tables (kernel counts) this profile reads."""
        return self.base or self.id

    def auto_spec_shape(
        self, method: str, architecture: str, release: tuple[int, int, int] | None
    ) -> tuple[DraftShape, AutoSpecShape] | None:
        """The (steps, topk, num_draft_tokens) the engine drafts ``method`` with on a model of
        ``architecture`` when its server is given no shape, and the rule that says so, at
        ``release`` (None: the profile's own ``release``); None where the engine keeps no such
        default (vLLM requires num_speculative_tokens) or does not run the method."""
        at = release or release_tuple(self.release)
        if at is None or method not in AUTO_SHAPE_METHODS:
            return None
        rule = None
        for candidate in self.auto_spec_shapes:
            since = release_tuple(candidate.since)
            if since is not None and since <= at:
                rule = candidate
        if rule is None:
            return None
        if method == "ngram":  # a draft length only: the trie's tree is simspec's replay's
            n = rule.ngram_draft_tokens
            return None if n is None else ((n - 1, 1, n), rule)
        shape = rule.draft_model if method == "draft_model" else rule.shape_for(architecture)
        return None if shape is None else (shape, rule)

    def memory_tier(self, gpu: GpuSpec) -> MemoryTier | None:
        """The engine's defaults for ``gpu``'s memory (None: the params')."""
        gib = gpu.memory_bytes / 2**30
        return next((t for t in self.memory_tiers if gib < t.below_gib), None)

    def graph_limits(self, tp: int, gpu: GpuSpec | None = None) -> tuple[float, float]:
        """(tokens, sequences): the largest forward the engine replays from a CUDA graph at
        tensor parallelism ``tp`` on ``gpu``; a larger one runs eager (0 tokens: never a
        graph)."""
        tier = None if gpu is None else self.memory_tier(gpu)
        if tier is not None:
            seqs = float(tier.cuda_graph_max_seqs_tp4 if tp >= 4 else tier.cuda_graph_max_seqs)
        else:
            seqs = self["cuda_graph_max_seqs_tp4"] if tp >= 4 else self["cuda_graph_max_seqs"]
        return self["cuda_graph_max_tokens"], seqs


def gpu_ids() -> list[str]:
    return sorted(packaged_table("gpus.yaml"))


def engine_ids() -> list[str]:
    return sorted(packaged_table("engines.yaml"))


def borrows_moe_fits(gpu: GpuSpec) -> bool:
    """Whether a GPU without MoE tables of its own borrows another's
    (:func:`simspec.catalog.kernel_tables.borrowed_moe_fit`): NVIDIA's; an AMD GPU keeps the
    roofline, the tables timing NVIDIA kernels."""
    return not gpu.arch.startswith("cdna")


def load_gpu(gpu_id: str) -> GpuSpec:
    table = packaged_table("gpus.yaml")
    if gpu_id not in table and gpu_id.lower() in table:  # GPU names are said either way
        gpu_id = gpu_id.lower()
    if gpu_id not in table:
        raise InputError("gpu", f"unknown GPU {gpu_id!r}; choose one of {', '.join(sorted(table))}")
    return GpuSpec(id=gpu_id, **table[gpu_id])


@functools.cache
def _packaged_profile(ref: str) -> dict[str, Any]:
    """A packaged profile's YAML, parsed once per process (every run of a study builds its
    cost model from it: ~9 ms a parse). The profile built from it is frozen."""
    raw: dict[str, Any] = packaged_yaml("profiles", f"{ref}.yaml")
    return raw


def load_profile(ref: str) -> HardwareProfile:
    """The packaged profile of a GPU id, or a profile YAML file given by path."""
    path = Path(ref)
    if path.suffix in (".yaml", ".yml", ".json") or os.path.exists(ref):
        # a .json profile parses as JSON: YAML would read it the same, ten times slower
        text = read_input_text(path, "profile", MAX_PROFILE_BYTES)
        raw = parse_json_or_yaml(text, path, "profile")
    else:
        ref = ref.lower()  # the packaged ids are lower case, as the GPUs' (load_gpu)
        try:
            raw = _packaged_profile(ref)
        except (OSError, ValueError):  # no such packaged file, or a name no file can have
            raise InputError(
                "profile",
                f"no hardware profile {shown(ref)}: give a GPU id ({', '.join(gpu_ids())}) or "
                "a profile file (.yaml, .yml, .json)",
            ) from None
    if not isinstance(raw, dict):
        raise InputError(
            "profile",
            f"invalid profile {shown(ref)}: a profile is a mapping of fields (gpu, params, "
            f"...), got {type(raw).__name__}",
        )
    _check_known(raw, ref)
    try:
        return HardwareProfile(**raw)
    except (TypeError, ValidationError, ValueError) as exc:
        raise InputError("profile", f"invalid profile {ref!r}: {_first_error(exc)}") from None


def _check_known(raw: dict[str, Any], ref: str) -> None:
    """A key the profile does not read, or a GPU simspec has no preset of, is refused by name
    before the values are checked (QA: a typo'd gemm_latencyy_s was refused as
    "params.gemm_latencyy_s.source: Field required", and with a source added it was silently
    ignored; gpu: h900 was accepted)."""
    params = raw.get("params")
    known = HardwareProfile.REQUIRED
    if isinstance(params, dict):
        for key in params:
            if key not in known:
                near = difflib.get_close_matches(str(key), known, n=1)
                hint = f" (did you mean {near[0]}?)" if near else ""
                raise InputError(
                    "profile",
                    f"invalid profile {ref!r}: params.{key} is not a parameter a profile has"
                    f"{hint}; its parameters: {', '.join(known)}",
                )
    gpu = raw.get("gpu")
    if isinstance(gpu, str) and gpu not in gpu_ids():
        raise InputError(
            "profile",
            f"invalid profile {ref!r}: gpu {gpu!r} is not a GPU preset ({', '.join(gpu_ids())})",
        )


# methods SGLang drafts with its EAGLE worker (EAGLE, EAGLE3, and NEXTN, which it maps to EAGLE)
# or its STANDALONE draft-model worker: the ones its shape defaults cover
AUTO_SHAPE_METHODS = ("eagle1", "eagle2", "eagle3", "mtp", "draft_model", "ngram")


def release_tuple(version: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of "0.5.3", "v0.5.5.post1"; None for anything else."""
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?\S*\s*$", version)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def load_engine(engine_id: str) -> EngineProfile:
    table = packaged_table("engines.yaml")
    if engine_id not in table:
        raise InputError(
            "engine", f"unknown engine {engine_id!r}; choose one of {', '.join(sorted(table))}"
        )
    entry = dict(table[engine_id])
    if base := entry.get("base"):
        # a version of another engine: its parameters, overridden where this entry sets them
        inherited = {k: v for k, v in table[base].items() if k != "params"}
        params = {**table[base]["params"], **entry.pop("params", {})}
        entry = {**inherited, **entry, "params": params}
    return EngineProfile(id=engine_id, **entry)


def _first_error(exc: Exception) -> str:
    return validation_message(exc) if isinstance(exc, ValidationError) else str(exc)


@functools.cache
def load_collectives(gpu_id: str) -> tuple[int, dict[str, dict[int, list[list[float]]]]] | None:
    """(bytes at which the engines' custom all-reduce hands over to NCCL, the measured curves
    by kernel and GPU count) of one GPU (``simspec/data/collectives.yaml``); None for a GPU
    the tables do not cover, which keeps its hardware profile's ring formula."""
    table = packaged_table("collectives.yaml")
    curves = table["gpus"].get(gpu_id)
    return None if curves is None else (int(table["custom_allreduce_max_bytes"]), curves)


def own_switch_allreduce() -> tuple[str, ...]:
    """Custom all-reduce kernels measured as the engine's whole op, which hands large messages
    to NCCL itself (``own_switch`` in ``simspec/data/collectives.yaml``: TRT-LLM's)."""
    return tuple(packaged_table("collectives.yaml").get("own_switch", ()))


def load_alltoall(gpu_id: str) -> tuple[float, float, str]:
    """(latency s, bandwidth B/s, basis) of one GPU-to-GPU transfer inside a node, for expert
    parallelism's dispatch and combine (``simspec/data/alltoall.yaml``): measured for H100 and
    A100; another GPU takes the H100 fit's latency and the share of its link that fit reached,
    at its own interconnect bandwidth (QA: a PCIe card moved tokens at NVLink 4's speed)."""
    table = packaged_table("alltoall.yaml")
    name = table["gpus"].get(gpu_id)
    if name:
        fit = table["fits"][name]
        return fit["latency_s"], fit["bandwidth_bytes_s"], "measured"
    fit = table["fits"][table["default"]]
    share = fit["bandwidth_bytes_s"] / fit["link_bytes_s"]
    return fit["latency_s"], share * load_gpu(gpu_id).interconnect_bandwidth_bytes_s, "transferred"


def alltoall_note(gpu_id: str) -> str:
    """What an expert-parallel run's token transfers rest on where ``gpu_id`` has no
    measurement of its own ("" where it has one)."""
    _, bandwidth, basis = load_alltoall(gpu_id)
    if basis == "measured":
        return ""
    link = load_gpu(gpu_id).interconnect_bandwidth_bytes_s
    return (
        f"{gpu_id}'s expert-parallel token exchange priced from the H100 NVLink fit "
        f"(simspec/data/alltoall.yaml) scaled to {gpu_id}'s own link, {bandwidth / 1e9:.0f} of "
        f"its {link / 1e9:.0f} GB/s: no transfer timings on this GPU"
    )
