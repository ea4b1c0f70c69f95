"""SGLang's default ``mem_fraction_static``: the share of GPU memory for weights and the KV pool,
sized from the memory the server sets aside for activations, CUDA graphs and drafting.

SGLang 0.5.3 onwards derives it per deployment instead of a constant. As the 0.5.10 wheel
computes it (``sglang/srt/server_args.py`` ``ServerArgs._handle_gpu_memory_settings``; 0.5.3 to
0.5.8 set aside 2048 for EAGLE and count piecewise graphs differently, 0.5.23's
``arg_groups/memory_hook.py`` keeps these terms where it sizes the pool before graph capture;
0.4.9 to 0.5.2 reserved (9.5 + tp * pp / 2) GiB under 90 GiB, (12 + tp * pp / 2) GiB to 160),
in MiB of the device's total memory::

    reserved = 512 + max(chunked_prefill_size, 2048) * 1.5 + cuda_graph_max_bs * 2
               + tp * pp / 8 * 1024
               [+ cuda_graph_max_bs * dp * 3, and * 1.5 more past 300, under DP attention]
               [+ piecewise CUDA graphs: 8 per captured size, 1536 with an MLA backend,
                  where they are captured: sglang_piecewise_graphs]
    reserved = max(reserved, 10240) on a GPU of more than 60 GiB
    reserved += 6144 for a separate draft model (STANDALONE), 4096 for EAGLE/NEXTN
                [through 0.5.10; removed by PR #23862, which budgets the draft inside]
    mem_fraction_static = round((gpu_mem - reserved) / gpu_mem, 3)
    mem_fraction_static *= sglang_vision_factor(...)   # a multimodal checkpoint's

The activations live in that reserve: the KV pool is the share less the weights (the
docstring: "mem_fraction_static = (model weights + KV cache pool) / GPU memory capacity").
"""

from __future__ import annotations

from simspec.catalog.hardware import EngineProfile, GpuSpec
from simspec.catalog.models import ModelShape

MIB = 2**20
# piecewise CUDA graph capture sizes (server_args.py _generate_piecewise_cuda_graph_tokens),
# up to the piecewise limit: the chunk, or 2048 with an MLA backend
_PIECEWISE_STEPS = ((4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256))


def piecewise_sizes(max_tokens: int) -> int:
    """How many prefill sizes SGLang captures piecewise CUDA graphs for, up to ``max_tokens``."""
    sizes = [s for lo, hi, step in _PIECEWISE_STEPS for s in range(lo, hi + 1, step)]
    sizes += list(range(4608, max_tokens + 1, 512))
    return sum(1 for s in sizes if s <= max_tokens)


# architectures SGLang captures no piecewise CUDA graphs for, whatever the deployment
# (piecewise_cuda_graph_disabled_model_archs, sglang/srt/configs/model_config.py, 0.5.10 wheel;
# LLaDAModelLM, a diffusion model, is not one simspec serves)
SGLANG_PIECEWISE_OFF_ARCHS = (
    "DeepseekV32ForCausalLM",
    "Qwen3NextForCausalLM",
    "GlmMoeDsaForCausalLM",
    "BailingMoeV2_5ForCausalLM",
)


def sglang_piecewise_graphs(
    target: ModelShape, *, method: str, pp: int, dp_attention: int, ep: int, pd_mode: str
) -> bool:
    """Whether SGLang captures piecewise CUDA graphs for prefill, which its memory reserve
    counts (``ServerArgs._handle_piecewise_cuda_graph``, 0.5.10 wheel, run before
    ``_handle_gpu_memory_settings``): off for an architecture of its list
    (:data:`SGLANG_PIECEWISE_OFF_ARCHS`), under speculation, DP attention, pipeline stages, an
    all-to-all MoE backend (simspec's SGLang ep > 1 is DeepEP's: ``moe_a2a_backend != "none"``),
    a multimodal checkpoint it serves as one (``is_multimodal``) and a disaggregated instance
    (``disaggregation_mode != "null"``); on otherwise (CUDA GPUs: simspec's ROCm profiles are
    vLLM's)."""
    return not (
        target.architecture in SGLANG_PIECEWISE_OFF_ARCHS
        or method != "autoregressive"
        or dp_attention > 1
        or pp > 1
        or ep > 1
        or sglang_multimodal(target)
        or pd_mode != "null"
    )


def sglang_static_share(
    gpu_bytes: float,
    *,
    tp: int,
    pp: int,
    chunk: int,
    graph_bs: int,
    method: str,
    mla: bool,
    dp_attention: int = 1,
    piecewise: bool,
    spec_reserve: bool = True,
) -> float:
    """SGLang's default ``mem_fraction_static`` for one deployment (see the module docstring):
    ``chunk`` its chunked_prefill_size, ``graph_bs`` its cuda_graph_max_bs, ``method`` the
    speculative method ("autoregressive": none), ``dp_attention`` its DP-attention size (1:
    off). ``piecewise``: whether piecewise CUDA graphs are captured
    (:func:`sglang_piecewise_graphs`). ``spec_reserve``: the flat reserve for a draft (through
    0.5.10; PR #23862 budgets the draft inside the share instead)."""
    gpu_mem = gpu_bytes / MIB
    reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp * pp / 8 * 1024
    if dp_attention > 1:
        reserved += graph_bs * dp_attention * 3
        if graph_bs > 300:
            reserved += graph_bs * dp_attention * 1.5
    speculative = method != "autoregressive"
    if piecewise:
        reserved += 1.5 * 1024 if mla else piecewise_sizes(chunk) * 8
    if gpu_mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if spec_reserve and method == "draft_model":
        reserved += 6 * 1024
    elif spec_reserve and speculative and method != "ngram":
        reserved += 4 * 1024
    return round((gpu_mem - reserved) / gpu_mem, 3)


# SGLang turns multimodal serving off by default for these classes (ModelConfig.__init__,
# mm_disabled_models, sglang/srt/configs/model_config.py in the 0.5.10 wheel): their share is
# not lowered for the vision tower unless --enable-multimodal is given
SGLANG_MULTIMODAL_OFF = (
    "Gemma3ForConditionalGeneration",
    "Llama4ForConditionalGeneration",
    "Step3VLForConditionalGeneration",
)


def sglang_multimodal(target: ModelShape) -> bool:
    """Whether SGLang serves ``target`` as a multimodal model by default (``ModelConfig.
    is_multimodal``): a checkpoint with a vision tower whose class it does not serve text-only
    (:data:`SGLANG_MULTIMODAL_OFF`)."""
    return target.vision_tower is not None and target.architecture not in SGLANG_MULTIMODAL_OFF


def sglang_vision_factor(target: ModelShape) -> float:
    """What SGLang multiplies its default share by for a multimodal checkpoint, to leave room
    for the vision encoder (``ServerArgs.adjust_mem_fraction_for_vlm``, 0.5.10 wheel, called
    where mem_fraction_static is not given and the model config ``is_multimodal``): 0.95 x
    clamp(1 - 0.1 (r - 1), 0.8, 1.05), r the tower's layers x hidden^2 over ViT-L/14's
    24 x 1024^2. 1 for a text model, or a class SGLang serves text-only by default.
    Kimi-K2.5 (27 x 1152): 0.910."""
    if not sglang_multimodal(target):
        return 1.0
    assert target.vision_tower is not None
    layers, hidden = target.vision_tower
    ratio = layers * hidden**2 / (24 * 1024**2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def engine_share(
    engine: EngineProfile,
    gpu: GpuSpec,
    target: ModelShape,
    *,
    tp: int,
    chunk: int,
    method: str = "autoregressive",
    pp: int = 1,
    dp: int = 1,
    ep: int = 1,
    pd_mode: str = "null",
) -> float:
    """The memory share ``engine`` runs a deployment at when it is given none: SGLang's derived
    mem_fraction_static (``mem_fraction_by_reserve``: :func:`sglang_static_share`, at the
    engine's CUDA-graph limit for ``tp`` on ``gpu``), else the profile's constant. ``ep`` and
    ``pd_mode`` (the deployment's disaggregation_mode) decide with the rest whether its
    piecewise CUDA graphs are reserved for (:func:`sglang_piecewise_graphs`)."""
    if not engine.flag("mem_fraction_by_reserve"):
        return float(engine["gpu_memory_utilization"])
    dp_attention = dp if engine.dp_attention == "sglang" else 1
    piecewise = sglang_piecewise_graphs(
        target, method=method, pp=pp, dp_attention=dp_attention, ep=ep, pd_mode=pd_mode
    )
    return sglang_vision_factor(target) * sglang_static_share(
        gpu.memory_bytes,
        tp=tp,
        pp=pp,
        chunk=chunk,
        graph_bs=int(engine.graph_limits(tp, gpu)[1]),
        method=method,
        mla=bool(target.kv_lora_rank),
        dp_attention=dp_attention,
        spec_reserve=engine.flag("spec_reserve"),
        piecewise=piecewise,
    )
