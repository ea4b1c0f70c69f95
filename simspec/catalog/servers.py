"""What a deployment spanning more than one server leaves out: its collectives are priced at
one server's interconnect, but for DeepEP's all-to-all where its internode table covers it
(:func:`~simspec.catalog.kernel_tables.deepep_fits`)."""

from __future__ import annotations

from simspec.catalog.hardware import EngineProfile, GpuSpec, load_collectives, load_engine
from simspec.catalog.kernel_tables import deepep_fits


def runs_deepep(engine: EngineProfile) -> bool:
    """Whether ``engine``'s expert-parallel MoE layers dispatch and combine through DeepEP
    (SGLang's DeepEP backend, with or without DP attention); vLLM's default gathers and
    reduce-scatters instead (simspec.engine.costmodel.dp_attention)."""
    return engine.flag("ep_alltoall_without_dp") or engine.dp_attention == "sglang"


def cross_node_note(gpu: GpuSpec, tp: int, ep: int = 1, engine: str = "vllm") -> str | None:
    """What a tensor- or expert-parallel group larger than one of ``gpu``'s servers leaves
    out (None: it fits in one), under ``engine`` (whether it runs DeepEP's all-to-all)."""
    span = max(tp, ep)
    if span <= gpu.gpus_per_node:
        return None
    internode = (
        ep > gpu.gpus_per_node
        and runs_deepep(load_engine(engine))
        and deepep_fits(gpu.id, ep) is not None
    )
    # the all-reduce: NCCL (the engines' custom kernel is off across servers), at least one
    # server's measured NCCL time where the tables cover it (collectives.node_floor)
    tables = load_collectives(gpu.id)
    floored = tables is not None and gpu.gpus_per_node in tables[1].get("nccl_all_reduce", {})
    reduce = (
        "their all-reduces are NCCL's, priced by a ring at the servers' own interconnect"
        + (" and no faster than NCCL measured within one server" if floored else "")
        + ", not over the network between them (not modelled)"
    )
    which = (
        f"{reduce}; DeepEP's dispatch and combine take its internode low-latency times "
        "(H800s with one 400 Gb/s NIC each), the normal kernels of prompt steps no faster "
        "per element"
        if internode
        else f"{reduce}; their all-to-alls at the servers' own interconnect"
    )
    return (
        f"{span} {gpu.id} GPUs span {-(-span // gpu.gpus_per_node)} servers of "
        f"{gpu.gpus_per_node}: {which}: step times are a lower bound"
    )
