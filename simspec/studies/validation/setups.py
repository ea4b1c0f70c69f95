"""What a case row's free-text cells say about its target and serving setup, read by fixed
rules: the weights' precision (``notes``), a target simspec cannot model (``other``, hybrid
linear attention), serving simspec does not simulate (prefill/decode disaggregation, a draft at
another tensor parallelism than the target's), and a
baseline run on another engine or precision (``other: vLLM 0.11.0 BF16 no-spec``).

Each rule returns what it found or a reason that names the real limit; it never guesses a
number.
"""

from __future__ import annotations

import re

from simspec.catalog.hf_config import quant_method
from simspec.catalog.tables import packaged_table

# precisions a row's notes name, as simspec's (bf16, fp8, int4-w) or why they are not modelled
_PRECISION_WORDS = {
    "FP8": "fp8",
    "BF16": "bf16",
    "W4A16": "int4-w",
    "AWQ": "int4-w",
    "GPTQ": "int4-w",
}
# precision words a row's notes state the weights in, outside its leading tag
_PHRASE_WORDS = {"FP16": "bf16", "INT4": "int4-w"}
_PRECISION_PHRASE = re.compile(
    r"\b(?:block-)?(FP8|BF16|FP16|INT4|W4A16|AWQ|GPTQ)[ -](?:weights|target|checkpoint)\b",
    re.IGNORECASE,
)
_UNMODELLED_PRECISIONS = {
    # simspec runs --precision nvfp4, but its dense NVFP4 GEMM speeds come from a table measured
    # before vLLM retuned the kernel (simspec/data/precision.yaml): a row is not scored on them
    "NVFP4": (
        "simspec prices dense NVFP4 GEMMs from a table measured before vLLM retuned its FP4 "
        "kernel (precision.yaml, vLLM PR #20578), so an NVFP4 row is not scored"
    ),
    "MXFP4": "simspec runs MXFP4 only as a preset's own checkpoint (gpt-oss)",
    # no INT8 weight kernels are priced (precision.yaml: bf16, fp8, int4-w, nvfp4); read as the
    # preset's bf16 such a row ran silently (QA)
    "INT8": "simspec prices no INT8 weights (W8A8 or W8A16 integer kernels)",
    "SmoothQuant": "simspec prices no INT8 weights (SmoothQuant's W8A8 integer kernels)",
}
# targets the case table names that simspec has no preset for, and why
UNMODELLED_TARGETS = {
    "qwen3.5-9b": (
        "no packaged preset: simspec reads Qwen3.5's Gated DeltaNet layers from its config.json "
        "(--model PATH/config.json), but Qwen3.5-9B's published max_position_embeddings and "
        "MTP acceptance have no source here yet"
    ),
}
# a preset's checkpoint precision (its config.json quantization_config.quant_method) as the
# word a row's notes use for it
_QUANT_METHOD_WORDS = {
    "mxfp4": "MXFP4",
    "fp8": "FP8",
    "fbgemm_fp8": "FP8",
    "gptq": "GPTQ",
    "awq": "AWQ",
}
# batch limits a row's serve command sets, as the deployment's scheduler fields: vLLM's flags
# (vllm/engine/arg_utils.py EngineArgs) and SGLang's (python/sglang/srt/server_args.py
# ServerArgs: max_running_requests caps running requests, chunked_prefill_size the tokens a
# prefill chunk may take in one step)
# (an integer with vLLM's human-readable suffixes, k/m/g: powers of 1000, or K/M/G: of 1024,
# as EngineArgs' human_readable_int reads --max-model-len "32k"; the last one stated counts, as
# for trtllm-serve below)
_INT = r"[ =]+(\d+(?:\.\d+)?[kKmMgG]?)\b"
_SERVE_LIMITS = {
    "max_num_seqs": re.compile(rf"--max-num-seqs{_INT}|--max-running-requests{_INT}"),
    "max_num_batched_tokens": re.compile(
        rf"--max-num-batched-tokens{_INT}|--chunked-prefill-size{_INT}"
    ),
    # vLLM's --max-model-len (SGLang's --context-length): V0 sizes its unchunked budget by it
    "max_model_len": re.compile(rf"--max-model-len{_INT}|--context-length{_INT}"),
}
_SUFFIX = {"k": 1000, "m": 1000**2, "g": 1000**3, "K": 1024, "M": 1024**2, "G": 1024**3}


def _human_int(text: str) -> int:
    """``"32k"`` as 32,000, ``"32K"`` as 32,768 (vLLM's human_readable_int)."""
    scale = _SUFFIX.get(text[-1], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


# the same limits as trtllm-serve's flags (tensorrt_llm/commands/serve.py: --max_batch_size, the
# requests scheduled at once; --max_num_tokens, the tokens batched per step); the last one
# stated counts, as a row's notes may restate a flag for a modified run ("this run used the
# script modified as its block label says (--max_num_tokens=32768)")
_TRTLLM_LIMITS = {
    "max_num_seqs": re.compile(r"--max_batch_size[ =](\d+)"),
    "max_num_batched_tokens": re.compile(r"--max_num_tokens[ =](\d+)"),
}
# trtllm-serve runs chunked prefill only when asked (get_llm_args enable_chunked_prefill=False)
_TRTLLM_CHUNKED = re.compile(r"--enable_chunked_prefill\b")
# the memory share a serve command sets, as scheduler.gpu_memory_utilization: vLLM's
# --gpu-memory-utilization (EngineArgs), SGLang's --mem-fraction-static (ServerArgs), and
# trtllm-serve's --kv_cache_free_gpu_memory_fraction (the KV cache's share of the memory the
# weights leave, which the trtllm profile reads the field as: engines.yaml kv_memory_of_free)
_MEMORY_SHARE = re.compile(
    r"--(?:gpu-memory-utilization|mem-fraction-static|kv_cache_free_gpu_memory_fraction)"
    r"[ =](\d*\.?\d+)"
)
# prefix caching a serve command turns on or off: vLLM's --enable-prefix-caching /
# --no-enable-prefix-caching (EngineArgs), SGLang's --disable-radix-cache (ServerArgs)
_PREFIX_OFF = re.compile(r"--no-enable-prefix-caching\b|--disable-radix-cache\b")
_PREFIX_ON = re.compile(r"--enable-prefix-caching\b")
# expert parallelism in a serve command: vLLM --enable-expert-parallel puts whole experts on
# each of the TP GPUs (ep = tp); SGLang --ep-size / --expert-parallel-size N
_EP_ALL = re.compile(r"--enable-expert-parallel\b")
_EP_SIZE = re.compile(r"--(?:ep-size|expert-parallel-size|ep)[ =](\d+)")
# a static batch sent as one burst (the case table's gpustack rows: "burst of 1000 prompts
# (request rate inf, no max concurrency)")
_BURST = re.compile(r"burst of \d+|request[- ]rate inf", re.IGNORECASE)
# the attention backend a serve command names (the last one: a row may note a rerun with another)
# and SGLang's when it names none, for standard multi-head attention
# (ServerArgs._get_default_attn_backend, python/sglang/srt/server_args.py: fa3 on Hopper with
# CUDA >= 12.3, flashinfer on other CUDA GPUs); MLA models choose among other backends
_ATTENTION_BACKEND = re.compile(r"--attention-backend[ =](\w+)")
_SGLANG_DEFAULT_ATTENTION = {"hopper": "fa3"}
_SGLANG_OTHER_ATTENTION = "flashinfer"
# a backend a row names in words ("main, Feb 2025 (Triton attention backend, ...)")
_BACKEND_IN_WORDS = re.compile(
    r"\b(triton|flashinfer|fa3|flashmla|cutlass_mla|trtllm_mla)\s+(?:mla\s+)?attention backend",
    re.IGNORECASE,
)
# the backend whose MLA decode simspec prices SGLang with, by GPU generation: the kernels
# AIConfigurator timed for SGLang 0.5.x (simspec/data/mla_kernels.yaml: FA3 on Hopper,
# trtllm_mla on B200). FA3 has been SGLang's default for MLA on Hopper since PR #5210 ("feat:
# use fa3 mla by default on hopper", merged 2025-04-09); before it SGLang decoded MLA with its
# Triton backend unless FlashInfer MLA was asked for
_SGLANG_MLA_ATTENTION = {"hopper": "fa3", "blackwell": "trtllm_mla"}
_DISAGGREGATED = re.compile(r"PD-disaggregated|prefill \+ \d+ decode nodes", re.IGNORECASE)
_ENGINES = {"vllm": "vllm", "sglang": "sglang"}


def notes_precision(notes: str, model: str = "") -> tuple[str | None, str | None, str]:
    """(precision, why it cannot run, what was assumed) from a row's notes: ``FP8`` -> fp8
    (the checkpoint the row served; its config's own precision otherwise), NVFP4 -> not
    scored (its dense kernel table predates vLLM's retune). A precision simspec does not
    name (MXFP4) that is the ``model`` preset's own checkpoint precision is no reason to
    refuse the row: it runs the preset's checkpoint as its config.json quantises it."""
    own = preset_precision(model)
    for word, why in _UNMODELLED_PRECISIONS.items():
        # "nvfp4 weights" too (QA); "INT8 KV cache" names the cache, not the weights
        if re.search(rf"\b{word}\b(?!\s*KV)", notes, re.IGNORECASE):
            if word == own:
                # the notes may name it as the default, not the run's ("target precision not
                # stated ... (default checkpoint has MXFP4 MoE weights)"; QA: read "as the
                # notes say")
                unstated = re.search(r"precision (?:is )?(?:not stated|unstated)", notes, re.I)
                said = "precision unstated: " if unstated else ""
                return (
                    None,
                    None,
                    (
                        f"{said}weights in {word}, the {model} preset's own checkpoint "
                        "(its config.json quantization_config)"
                        + ("" if unstated else ", as the notes say")
                    ),
                )
            served = f"{word} weights"
            if own is not None or model in packaged_table("models.yaml"):
                served += f" of a model whose preset is a {own or 'BF16'} checkpoint"
            return None, f"the notes give {served}: {why}", ""
    for word, name in _PRECISION_WORDS.items():
        # a row's tag leads its notes, alone before a separator ("FP8; ..."): "FP8 KV cache;
        # BF16 weights" names the cache, not the weights (QA: read as FP8 weights)
        if re.match(rf"\s*{word}\s*(?:[;,.]|$)", notes, re.IGNORECASE):
            return name, None, f"weights in {name}, as the notes say"
    # else a precision the notes state in words ("int4 weights", "FP8 target", "block-FP8
    # weights as released"), whatever its case: read, not left to the preset's checkpoint
    if phrase := _PRECISION_PHRASE.search(notes):
        word = phrase.group(1).upper()
        name = _PRECISION_WORDS.get(word) or _PHRASE_WORDS[word]
        as_read = " (fp16: bf16's bytes and tensor-core rate)" if word == "FP16" else ""
        said = f"weights in {name}, as the notes say ({phrase.group(0)!r}){as_read}"
        if name == _PRECISION_WORDS.get((own or "BF16").upper()):  # the preset's checkpoint
            return None, None, said
        return name, None, said
    return None, None, ""


def preset_precision(model: str) -> str | None:
    """The word for a preset's checkpoint precision (MXFP4, FP8, ...), None for a bf16 one or
    a name that is not a preset."""
    entry = packaged_table("models.yaml").get(model)
    if not isinstance(entry, dict):
        return None
    quant = entry.get("quantization_config") or {}
    return _QUANT_METHOD_WORDS.get(str(quant_method(quant) or ""))


def sent_as_burst(notes: str) -> bool:
    """Whether the notes say every request was sent at once (one burst)."""
    return bool(_BURST.search(notes))


def serve_limits(notes: str) -> dict[str, float]:
    """The batch limits (``max_num_seqs``, ``max_num_batched_tokens``), the context
    (``max_model_len``) and the memory share (``gpu_memory_utilization``) the notes' serve
    command sets, by name; empty when it sets none."""
    out: dict[str, float] = {}
    # the last value stated counts: notes restate a flag for the run they report ("this run
    # used the script modified ... (--max-num-batched-tokens 4096)"; QA: the first was read)
    for field, pattern in _SERVE_LIMITS.items():
        if found := pattern.findall(notes):
            out[field] = _human_int(next(g for g in found[-1] if g))
    for field, pattern in _TRTLLM_LIMITS.items():
        if found := pattern.findall(notes):
            out[field] = int(found[-1])
    if found := _MEMORY_SHARE.findall(notes):
        out["gpu_memory_utilization"] = float(found[-1])
    return out


def trtllm_serving(notes: str) -> tuple[str | None, list[str]]:
    """(why a trtllm row cannot run, what simspec assumes) from its serve command: chunked
    prefill on where it says --enable_chunked_prefill (:func:`trtllm_chunked`), else off
    (trtllm-serve's default: a prompt admitted whole or not at all). (Its KV fraction is a
    scheduler field: :func:`serve_limits`.)"""
    if trtllm_chunked(notes):
        return None, ["chunked prefill on, as the serve command sets (--enable_chunked_prefill)"]
    return None, ["TRT-LLM chunked prefill off (trtllm-serve default): a prompt admitted whole"]


def trtllm_chunked(notes: str) -> bool:
    """Whether a trtllm row's serve command turns chunked prefill on."""
    return bool(_TRTLLM_CHUNKED.search(notes))


def serve_prefix_caching(notes: str) -> bool | None:
    """Whether the notes' serve command turns prefix caching on or off (None: it does not say,
    the engine version's default stands)."""
    if _PREFIX_OFF.search(notes):
        return False
    return True if _PREFIX_ON.search(notes) else None


def serve_expert_parallel(notes: str, tp: int) -> int | None:
    """The expert-parallel degree the notes' serve command sets (None: experts sliced over TP,
    the engines' default)."""
    if m := _EP_SIZE.search(notes):
        return int(m.group(1))
    return tp if _EP_ALL.search(notes) else None


def unmodelled_target(target: str, notes: str) -> str | None:
    """Why a row's target cannot be costed, or None: a model the table calls ``other`` (named
    only in the notes), or one whose layers simspec does not model."""
    if target in UNMODELLED_TARGETS:
        return f"target_model {target!r}: {UNMODELLED_TARGETS[target]}"
    if target == "other":
        named = re.search(r"target: ([^;]+)", notes)
        what = named.group(1).strip() if named else "not named"
        return f"target_model 'other' ({what}): no preset or config.json of that model in simspec"
    return None


def unmodelled_serving(notes: str) -> str | None:
    """Why a row's serving setup is not one simspec simulates, or None."""
    if _DISAGGREGATED.search(notes):
        return (
            "prefill/decode disaggregation (the notes: separate prefill and decode nodes, "
            "attention data-parallel over them): simspec runs a decode instance alone "
            "(--disaggregation-mode decode), but the row states neither its parallel layout "
            "over those nodes (tp, dp, ep) nor the whole instance's load and throughput "
            "(per-rank figures), which a prediction would have to assume"
        )
    return None


_DRAFT_TP = re.compile(r"draft\b[^;,]{0,20}?\bTP\s*=\s*(\d+)", re.IGNORECASE)


def stated_draft_tp(notes: str, tp: int, method: str) -> int | None:
    """The tensor parallelism the notes say a speculative row's draft ran at, where it is not
    the target's (vLLM V0's ``speculative_draft_tensor_parallel_size``); None otherwise. The
    row then runs with ``draft_tp`` set, which the engine profile prices or refuses
    (engines.yaml draft_tp_below_target)."""
    found = _DRAFT_TP.search(notes)
    if method == "autoregressive" or found is None or int(found.group(1)) == tp:
        return None
    return int(found.group(1))


def unmodelled_attention(
    notes: str, engine: str, arch: str, mla: bool, version: str = ""
) -> str | None:
    """Why a row's attention backend is not one simspec prices, or None: an SGLang serve
    command that names a backend other than SGLang's default on the GPU (simspec's attention
    costs are one measured kernel set per GPU, the default's); for an MLA model, a backend the
    notes or the engine version name other than the one whose MLA decode simspec has timed."""
    if engine != "sglang":
        return None
    if mla:
        timed = _SGLANG_MLA_ATTENTION.get(arch)
        text = f"{notes} {version}"
        said = [m.lower() for m in _ATTENTION_BACKEND.findall(text)]
        said += [m.lower() for m in _BACKEND_IN_WORDS.findall(text)]
        if timed is None or not said or said[-1] == timed:
            return None
        return (
            f"the row ran SGLang's {said[-1]} attention backend for MLA: simspec prices SGLang's "
            f"MLA decode on this GPU with the {timed} kernel AIConfigurator timed for SGLang "
            "0.5.x (on Hopper its default since PR #5210, April 2025) and has no timings of "
            "this one"
        )
    named = _ATTENTION_BACKEND.findall(notes)
    if not named:
        return None
    default = _SGLANG_DEFAULT_ATTENTION.get(arch, _SGLANG_OTHER_ATTENTION)
    if named[-1] == default:
        return None
    return (
        f"the serve command picks SGLang's {named[-1]} attention backend, not its default on "
        f"this GPU ({default}): simspec prices attention with one measured kernel set per GPU "
        "and has no timings per backend"
    )


def other_baseline(text: str) -> dict[str, str] | None:
    """A baseline on another engine or precision, ``other: <engine> <version> [<precision>]
    no-spec ...``, as the deployment fields it changes and the server's ``version``; None if
    the text is not of that form."""
    m = re.match(r"other:\s*(\w+)\s+([\d.]+)\s+(?:(\w+)\s+)?no-spec\b", text, re.IGNORECASE)
    if not m or m.group(1).lower() not in _ENGINES:
        return None
    # the version is the baseline server's own (its profile and batch defaults: predict)
    fields = {"engine": _ENGINES[m.group(1).lower()], "version": m.group(2)}
    if m.group(3):
        precision = _PRECISION_WORDS.get(m.group(3).upper())
        if precision is None:
            return None
        fields["precision"] = precision
    return fields
