"""The kernels a decoder layer launches beyond the ones the cost model prices
(``layer_kernels.yaml``): per engine, each entry names the model features it needs and the
kernels and bytes it adds to a layer. A model is matched by its features
(:func:`model_features`: its shape, checkpoint and deployment), never by its name; a dense Llama
has none of them, so it gets no extra kernel in any engine."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from simspec.catalog.models import ModelShape
from simspec.catalog.tables import packaged_table

PARTS = ("layer", "dense", "moe", "moe_unmeasured")

# Activation widths per token on one GPU (``tp`` GPUs) that an entry's ``elements`` name.
WIDTHS: dict[str, Callable[[ModelShape, int], float]] = {
    "hidden": lambda m, tp: m.hidden_size,
    "q_lora": lambda m, tp: m.q_lora_rank,
    "kv_lora": lambda m, tp: m.kv_lora_rank,
    # the attention output o_proj reads
    "attn_out": lambda m, tp: _heads(m, tp) * m.v_head_dim if m.is_mla else m.q_dim // tp,
    # MLA: the absorbed query the decode kernel reads (latent + rope per head)
    "mla_query": lambda m, tp: _heads(m, tp) * (m.kv_lora_rank + m.qk_rope_head_dim),
    # MLA: the inputs of the two absorbed bmms (q_nope per head, the latent output per head)
    "mla_bmm_in": lambda m, tp: _heads(m, tp) * (m.qk_nope_head_dim + m.kv_lora_rank),
    # the query and key heads a per-head q/k norm reads
    "qk": lambda m, tp: m.q_dim // tp + m.kv_dim_per_gpu(tp),
    "inter": lambda m, tp: m.intermediate_size // tp,
    "shared_inter": lambda m, tp: m.shared_expert_intermediate_size // tp,
    # the routed experts' activations of one token (k experts, each sliced over tp)
    "routed_inter": lambda m, tp: m.num_experts_per_tok * m.moe_intermediate_size // tp,
}


def _heads(model: ModelShape, tp: int) -> int:
    return max(model.num_attention_heads // tp, 1)


@dataclass(frozen=True, slots=True)
class KernelEntry:
    """One line of ``layer_kernels.yaml``: ``count`` kernels per layer of kind ``part`` when
    every feature in ``when`` holds and not every one in ``unless`` does."""

    kernel: str
    part: str
    when: frozenset[str]
    unless: frozenset[str]
    count: int
    elements: tuple[str, ...]
    bytes_per_element: float
    source: str

    def applies(self, features: frozenset[str]) -> bool:
        return self.when <= features and not (self.unless and self.unless <= features)


@dataclass(frozen=True, slots=True)
class LayerKernels:
    """Extra kernels per layer, and the bytes they move per token, by the part of the model
    they run in (see ``layer_kernels.yaml``: ``part``)."""

    layer: int = 0
    dense: int = 0
    moe: int = 0
    moe_unmeasured: int = 0
    layer_bytes: float = 0.0
    dense_bytes: float = 0.0
    moe_bytes: float = 0.0
    moe_unmeasured_bytes: float = 0.0

    @property
    def none(self) -> bool:
        return self == NO_EXTRA


NO_EXTRA = LayerKernels()


@cache
def _table() -> dict[str, Any]:
    return packaged_table("layer_kernels.yaml")


@cache
def kernel_entries(engine: str) -> tuple[KernelEntry, ...]:
    """The entries for ``engine`` (a simspec engine id); none for an engine the file does not
    list (its layers keep the priced kernel set)."""
    entries = []
    for e in _table()["engines"].get(engine, ()):
        part = str(e["part"])
        if part not in PARTS:
            raise ValueError(f"layer_kernels.yaml: {e['kernel']!r} has part {part!r}")
        elements = tuple(str(w) for w in e.get("elements", ()))
        unknown = [w for w in elements if w not in WIDTHS]
        if unknown:
            raise ValueError(f"layer_kernels.yaml: {e['kernel']!r} names widths {unknown}")
        entries.append(
            KernelEntry(
                kernel=str(e["kernel"]),
                part=part,
                when=frozenset(e.get("when", ())),
                unless=frozenset(e.get("unless", ())),
                count=int(e["count"]),
                elements=elements,
                bytes_per_element=float(e.get("bytes_per_element", 0)),
                source=str(e["source"]),
            )
        )
    return tuple(entries)


def model_features(
    model: ModelShape,
    *,
    tp: int,
    ep: int,
    gpu: str,
    w8a8: bool,
    experts_w8a8: bool,
) -> frozenset[str]:
    """The features ``model`` has as deployed: its shape, its checkpoint (``w8a8``: the layers
    run W8A8 FP8; ``experts_w8a8``: the routed experts do), ``tp``, ``ep`` and ``gpu`` (and
    whether the tp group is one host's GPUs: layer_kernels.yaml host_gpus)."""
    f = {"mla" if model.is_mla else "gqa"}
    if model.q_lora_rank:
        f.add("q_lora")
    if model.is_moe:
        f.add("moe")
    if model.shared_expert_intermediate_size:
        f.add("shared_expert")
    if model.qk_norm:
        f.add("qk_norm")
    if w8a8 and model.weight_dtype == "fp8":
        f.add("fp8_act_quant")
    if experts_w8a8:
        f.add("fp8_experts")
    if tp > 1:
        f.add("tp")
    if ep == 1:
        f.add("ep1")
    table = _table()
    from simspec.catalog.hardware import load_gpu

    if tp <= table.get("host_gpus", {}).get(gpu, load_gpu(gpu).gpus_per_node):
        f.add("one_host")  # the group is one server's (one operating system's) GPUs
    f.update(k for k, types in table["model_type_features"].items() if model.model_type in types)
    f.update(k for k, gpus in table["gpu_features"].items() if gpu in gpus)
    return frozenset(f)


def extra_kernels(engine: str, features: Iterable[str], model: ModelShape, tp: int) -> LayerKernels:
    """The kernels ``engine`` runs per layer of ``model`` (with ``features``) beyond the priced
    set, and their bytes per token (bf16 activations at their per-GPU widths)."""
    have = frozenset(features)
    counts = dict.fromkeys(PARTS, 0)
    nbytes = dict.fromkeys(PARTS, 0.0)
    for e in kernel_entries(engine):
        if not e.applies(have):
            continue
        counts[e.part] += e.count
        width = sum(WIDTHS[w](model, tp) for w in e.elements)
        nbytes[e.part] += e.bytes_per_element * width
    return LayerKernels(*(counts[p] for p in PARTS), *(nbytes[p] for p in PARTS))
