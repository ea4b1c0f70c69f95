"""A Hugging Face ``config.json`` (or a preset written with its keys) read into the fields of a
:class:`~simspec.catalog.models.ModelShape`, one reader per architecture.

Each reader takes the keys its architecture's config class defines and nothing else, so a
key that changes the shape but that the reader does not know is an error naming it, never a
silently dense model. Dispatch is on ``model_type`` (a config without one is read as a
Llama-style dense decoder, as simspec always has, unless it carries MoE or MLA keys).

Sources, per architecture (transformers ``models/<name>/configuration_<name>.py`` and the
matching vLLM model file, read in the indexed copies):

- dense ``llama``, ``mistral``, ``qwen2``, ``qwen3``: LlamaConfig / MistralConfig /
  Qwen2Config / Qwen3Config (``sliding_window`` applies to every layer of a Mistral config that
  sets it; Qwen's ``use_sliding_window`` is refused, no preset uses it).
- ``mixtral``: MixtralConfig: every layer is MoE, ``num_local_experts`` experts of width
  ``intermediate_size``, top ``num_experts_per_tok``; no shared expert.
- ``qwen2_moe``/``qwen3_moe``: Qwen2MoeConfig/Qwen3MoeConfig: ``num_experts`` of width
  ``moe_intermediate_size``; layer i is MoE unless it is in ``mlp_only_layers`` or
  ``(i + 1) % decoder_sparse_step != 0`` (then a dense MLP of ``intermediate_size``);
  Qwen2-MoE adds one shared expert of ``shared_expert_intermediate_size`` (Qwen3-MoE has none).
- ``gpt_oss``: GptOssConfig: every layer MoE (``num_local_experts``, top
  ``num_experts_per_tok``, width ``intermediate_size``); ``layer_types`` alternates
  ``sliding_attention`` (window ``sliding_window``) and ``full_attention``; attention sinks are
  one learned logit per head (no KV, negligible work).
- ``llama4``/``llama4_text``: Llama4TextConfig: MoE layers are ``moe_layers`` or every
  ``interleave_moe_layer_step``-th layer (``range(step - 1, L, step)``), experts of width
  ``intermediate_size`` plus one shared expert of the same width; dense layers use
  ``intermediate_size_mlp``. Layers with RoPE (``no_rope_layers[i] == 1``, by default 3 of
  every 4) use chunked local attention of ``attention_chunk_size`` tokens (vLLM
  ``model_executor/models/llama4.py``: ``use_chunked_local_attn = not self.nope and
  config.attention_chunk_size is not None``): a token reads the tokens of its own chunk
  before it (``chunked_attention``; its KV, like a window's, at most a chunk and a block).
- ``deepseek_v2``/``deepseek_v3``/``kimi_k2``: DeepseekV2Config/DeepseekV3Config: layer i is
  MoE when ``i >= first_k_dense_replace`` and ``i % moe_layer_freq == 0``
  (``n_routed_experts`` of width ``moe_intermediate_size`` plus ``n_shared_experts`` of the
  same width), else a dense MLP of ``intermediate_size``; MLA attention from ``q_lora_rank``
  (null: a direct q projection), ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``,
  ``v_head_dim``; ``num_nextn_predict_layers`` MTP modules.
- ``deepseek_v32`` (DeepSeek-V3.2, V3.2-Exp): the DeepSeek-V3 keys plus DeepSeek Sparse
  Attention's lightning indexer, ``index_n_heads`` x ``index_head_dim``, picking
  ``index_topk`` tokens per query in every layer (DeepSeek-V3.2-Exp inference/model.py
  ``ModelArgs``/``Indexer``). vLLM treats any DeepSeek config carrying ``index_topk`` as V3.2
  (deepseek_v2.py ``self.is_v32 = hasattr(config, "index_topk")``), and so does this reader.
  Indexers shared across layers (``index_topk_freq``, ``index_topk_pattern``,
  ``indexer_types``: GLM-5's IndexCache) are refused by name.
- ``glm4_moe`` (GLM-4.5, GLM-4.6, GLM-4.7): Glm4MoeConfig: GQA attention (``head_dim`` may
  differ from ``hidden_size / heads``), per-head q/k RMSNorm when ``use_qk_norm``; layer i is
  MoE when ``i >= first_k_dense_replace`` (``n_routed_experts`` of width
  ``moe_intermediate_size`` plus ``n_shared_experts`` of the same width), else a dense MLP of
  ``intermediate_size`` (SGLang ``models/glm4_moe.py`` ``Glm4MoeDecoderLayer._is_layer_sparse``
  and ``Glm4MoeSparseMoeBlock``); the qkv bias (``attention_bias``) and partial RoPE cost
  nothing simspec prices.
- ``kimi_k25`` (Kimi-K2.5): a KimiK25ForConditionalGeneration config nesting the language
  model's keys under ``text_config`` (``model_type`` ``kimi_k2``, the DeepSeek-V3 layout, read as
  ``deepseek_v3``). The MoonViT vision tower (``vision_config``: 27 layers of width 1152) and its
  patch-merger projector are left out: they run only on image and video inputs, which simspec
  does not serve. Its routed experts ship in 4-bit int (compressed-tensors, group 32) with
  attention, shared experts, dense MLPs and head kept bf16 (the ``ignore`` list), read as
  experts-only int4 (:func:`weight_dtypes`).
- ``minimax_m2`` (MiniMax-M2): MiniMaxM2Config as vLLM ``models/minimax_m2.py`` builds it
  (vllm-project/vllm@01d99586): every layer full attention (``attn_type_list`` all 1) and a MoE
  of ``num_local_experts`` experts of width ``intermediate_size`` (MiniMaxM2MoE passes
  ``intermediate_size`` to FusedMoE), top ``num_experts_per_tok``, no shared expert and no
  dense layer; q and k RMSNorm over all heads (``qk_norm_type`` ``per_layer``: vLLM builds
  MiniMaxText01RMSNormTP unconditionally), priced as the qk_norm kernels (the all-reduce of
  the norm's variance over tensor-parallel ranks is not priced). ``num_mtp_modules`` is not
  read as MTP layers: vLLM builds no MTP module for this model and skips the checkpoint's spec-layer
  weights (``get_spec_layer_idx_from_weight_name``), and neither vLLM nor SGLang has a
  MiniMax-M2 MTP/NextN model (none in their indexed ``models/``), so ``--methods mtp`` is
  refused naming why (``mtp_unserved``).
- ``bailing_moe`` (Ling-lite/plus, BailingMoeForCausalLM; Ling-mini/flash-2.0,
  BailingMoeV2ForCausalLM, whose config keeps this model_type): SGLang ``models/bailing_moe.py``
  (sgl-project/sglang@008d83eb): layer i is MoE when ``i >= first_k_dense_replace``
  (``BailingMoEBlock._is_layer_sparse``), ``num_experts`` of width ``moe_intermediate_size``
  plus ``num_shared_experts`` shared experts of ``moe_shared_expert_intermediate_size`` (else
  ``moe_intermediate_size``) each, top ``num_experts_per_tok``; per-head q/k RMSNorm when
  ``use_qk_norm``. Group-limited routing (``n_group``, ``topk_group``), sigmoid scores with an
  expert bias, partial RoPE (``partial_rotary_factor``) and biases cost nothing simspec prices.

- ``qwen3_next`` (Qwen3-Next) and ``qwen3_5``/``qwen3_5_moe`` (Qwen3.5, their ``text_config``):
  Qwen3NextConfig / Qwen3_5(Moe)TextConfig: ``layer_types`` (or, where a config omits it, every
  ``full_attention_interval``-th layer full, the rest ``linear_attention``, as
  Qwen3NextConfig.__post_init__ fills it) mark the Gated DeltaNet layers, of
  ``linear_num_key_heads`` x ``linear_key_head_dim`` keys, ``linear_num_value_heads`` x
  ``linear_value_head_dim`` values and a causal conv1d of ``linear_conv_kernel_dim`` taps
  (vLLM ``model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py`` QwenGatedDeltaNetAttention;
  SGLang ``models/qwen3_next.py`` Qwen3GatedDeltaNet). The full-attention layers gate their
  output (``attn_output_gate``, default true: vLLM ``models/qwen3_next.py`` Qwen3NextAttention
  builds its qkv_proj with ``num_heads * (1 + attn_output_gate)`` query heads). MoE layers as
  ``qwen2_moe`` (with the shared expert); Qwen3.5 dense configs have none.

Weights are read as bf16 unless ``quantization_config`` says otherwise (:func:`weight_dtypes`).

Every size key is a whole number under a documented limit (:data:`SIZE_LIMITS`), checked before
any reader builds its per-layer tuples, and nothing is guessed: a config without
``max_position_embeddings``, with KV heads that do not divide the query heads, or quantising
experts it does not have is an error naming the key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from simspec.errors import InputError

DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3")
# keys that declare experts or latent attention: refused on a config read as a dense decoder
MOE_OR_MLA_KEYS = (
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "moe_intermediate_size",
    "kv_lora_rank",
)
EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
# architectures whose attention always normalises q and k per head (Qwen3Attention builds
# q_norm/k_norm unconditionally); GLM-4-MoE reads its config's use_qk_norm instead
QK_NORM_TYPES = ("qwen3", "qwen3_moe")
# architectures whose Gated DeltaNet layers simspec reads (:func:`_hybrid_linear`)
HYBRID_LINEAR_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
LINEAR_ATTENTION = (
    "Gated DeltaNet linear-attention layers (layer_types 'linear_attention') are read for "
    f"the architectures that define them ({', '.join(HYBRID_LINEAR_TYPES)}); in another "
    "architecture simspec does not know their shapes"
)


def normalised(raw: dict[str, Any]) -> dict[str, Any]:
    """``text_config`` merged over the top level (multimodal configs, as Llama-4's) and the
    older key names under the current ones."""
    if isinstance(raw.get("text_config"), dict):
        # the text model's keys, but the top level's architectures (the class engines load)
        top = {"architectures": raw["architectures"]} if "architectures" in raw else {}
        raw = {**raw, **raw["text_config"], **top}
    raw = dict(raw)
    for old, new in _ALIASES.items():
        if raw.get(new) is None and raw.get(old) is not None:
            raw[new] = raw[old]
    return raw


def read_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The ModelShape fields a config's keys give."""
    raw = normalised(raw)
    model_type = raw.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise InputError("model.model_type", f"must be text (got {_shown(model_type)})")
    if model_type not in HYBRID_LINEAR_TYPES and _has_linear_attention(raw):
        raise InputError("model.layer_types", LINEAR_ATTENTION)
    reader = READERS.get(model_type or "llama")
    if reader is None:
        known = ", ".join(sorted(READERS))
        raise InputError(
            "model.model_type",
            f"{_shown(model_type)} is not an architecture simspec models (it reads {known}); "
            "a dense fallback would misstate its cost",
        )
    _check_sizes(raw)  # before any reader builds a tuple per layer
    fields = _common(raw)
    fields["qk_norm"] = model_type in QK_NORM_TYPES
    fields.update(reader(raw))
    fields["model_type"] = model_type or "llama"
    if (scaled := _rope_scaled_context(raw)) is not None:
        fields["max_position_embeddings"] = scaled
    archs = raw.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        fields["architecture"] = archs[0]
    if (tower := _vision_tower(raw.get("vision_config"))) is not None:
        fields["vision_tower"] = tower
    fields["weight_dtype"], fields["expert_weight_dtype"] = weight_dtypes(raw)
    q = raw.get("quantization_config")
    if isinstance(q, dict) and isinstance(method := quant_method(q), str) and method:
        fields["quant_method"] = method
    if lm_head_quantized(raw) and not fields.get("tie_word_embeddings"):
        fields["lm_head_quantized"] = True
    if kv := kv_cache_quant(raw):
        fields["kv_cache_quant"] = kv
    if group := int4_group_size(raw):
        fields["int4_group_size"] = group
    if fields["weight_dtype"] == "fp8" and (block := fp8_block_size(raw)):
        fields["weight_block_size"] = block
    if fields["expert_weight_dtype"] and not fields.get("num_experts"):
        raise InputError(  # read as bf16 it would misstate the weights of a model that has them
            "model.quantization_config.quant_method",
            "the format quantises a model's MoE experts only (GPT-OSS's mxfp4; a ModelOpt "
            f"checkpoint that ignores attention), but this "
            f"{fields['model_type']} config declares no experts; give the format its weights "
            "are stored in (fp8, gptq, awq, compressed-tensors) or none for bf16",
        )
    return fields


def _has_linear_attention(raw: dict[str, Any]) -> bool:
    types = raw.get("layer_types")
    return isinstance(types, list) and "linear_attention" in types


# -- common keys ------------------------------------------------------------------------------
_ALIASES = {
    "n_layer": "num_hidden_layers",
    "n_head": "num_attention_heads",
    "mtp_num_hidden_layers": "num_nextn_predict_layers",  # Qwen3.5's name (vLLM reads both)
}
_COMMON = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
    "max_position_embeddings",
    "num_nextn_predict_layers",
)


def _vision_tower(vision: Any) -> tuple[int, int] | None:
    """(layers, hidden size) of a multimodal config's vision tower, as SGLang's
    ``adjust_mem_fraction_for_vlm`` reads them (``num_hidden_layers``, ``hidden_size``;
    defaults 24 and 1024, ViT-L/14). MoonViT's keys (Kimi-K2.5's ``vt_num_hidden_layers``,
    ``vt_hidden_size``) are the same numbers SGLang's KimiK25VisionConfig defaults its own to
    (27, 1152; sglang/srt/configs/kimi_k25.py in the 0.5.10 wheel). None without one."""
    if not isinstance(vision, dict):
        return None
    layers = vision.get("num_hidden_layers", vision.get("vt_num_hidden_layers", 24))
    hidden = vision.get("hidden_size", vision.get("vt_hidden_size", 1024))
    for key, value in (("num_hidden_layers", layers), ("hidden_size", hidden)):
        if not (isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 1 << 16):
            raise InputError(
                f"model.vision_config.{key}",
                f"must be a whole number in [1, 65536] (got {_shown(value)})",
            )
    return layers, hidden


def _common(raw: dict[str, Any]) -> dict[str, Any]:
    """The Llama-style keys every architecture shares, as written (sizes checked by
    :func:`_check_sizes`; a null num_nextn_predict_layers means no MTP layers)."""
    fields = {k: raw[k] for k in _COMMON if raw.get(k) is not None}
    if "max_position_embeddings" not in fields:
        # transformers' classes default it (LlamaConfig 2048, DeepseekV3Config 4096, ...) for a
        # freshly initialised model, not a trained one's context, and save_pretrained always
        # writes it: a config without it was written by hand, and any number would be a guess
        raise InputError(
            "model.max_position_embeddings",
            "missing: give the context length the model was trained for (every config.json "
            "transformers saves has it); simspec does not guess one",
        )
    mla = raw.get("kv_lora_rank") and "num_attention_heads" in fields
    if "num_key_value_heads" not in fields and mla:
        # MLA caches one latent whatever the heads (kv_dim_per_gpu): the key is never read
        fields["num_key_value_heads"] = fields["num_attention_heads"]
    if "num_key_value_heads" not in fields and raw.get("model_type") not in (None, "llama"):
        # only LLaMA-1's configs predate the key (one KV head a query head); the other classes
        # default it otherwise (MistralConfig and MixtralConfig 8, Qwen2Config 32): a guess
        raise InputError(
            "model.num_key_value_heads",
            f"missing: a {raw.get('model_type')} config's class defaults it otherwise than to "
            "num_attention_heads; give the KV heads the checkpoint has",
        )
    heads, kv = fields.get("num_attention_heads"), fields.get("num_key_value_heads")
    if heads is not None and kv is not None and heads % kv:
        # grouped-query attention shares each KV head among heads / kv query heads; vLLM
        # shards both over TP and asserts the grouping (and transformers' repeat_kv needs it)
        raise InputError(
            "model.num_key_value_heads",
            f"must divide num_attention_heads ({heads}): each KV head serves a whole group of "
            f"query heads (got {kv})",
        )
    return fields


# The largest value read for each size key, checked before any reader builds a tuple per layer
# (num_hidden_layers 1e9 would take gigabytes, 1e10 hours). Each is several times the largest
# released model's value we know of, so no real config meets one, and together they keep
# every product the cost model forms a finite float and every context length an int32:
_LAYERS = 1024  # 8x the 126 layers of Llama-3.1-405B, the deepest released decoder we know
_WIDTH = 65_536  # 4x Llama-3.1-405B's hidden_size 16,384
_MLP = 262_144  # ~5x Llama-3.1-405B's intermediate_size 53,248
_HEADS = 1024  # 8x the 128 query heads of Llama-3.1-405B and DeepSeek-V3
_HEAD_DIM = 1024  # 4x Gemma's head_dim 256 (DeepSeek-V3's MLA heads: 128 + 64)
_VOCAB = 2_097_152  # 8x Gemma-3's vocab_size 262,208
_POSITIONS = 2**27  # 12.8x Llama-4-Scout's 10,485,760 (models.yaml); prompt + output fit int32
_EXPERTS = 4096  # 8x Qwen3-Next's 512 routed experts (Kimi-K2: 384, DeepSeek-V3: 256)
SIZE_LIMITS: dict[str, tuple[int, int]] = {
    # key: (least, largest); 0 where a reader accepts it (a dense config's num_experts 0)
    "num_hidden_layers": (1, _LAYERS),
    "num_nextn_predict_layers": (0, _LAYERS),
    "first_k_dense_replace": (0, _LAYERS),
    "moe_layer_freq": (1, _LAYERS),
    "decoder_sparse_step": (1, _LAYERS),
    "interleave_moe_layer_step": (1, _LAYERS),
    "hidden_size": (1, _WIDTH),
    "q_lora_rank": (0, _WIDTH),  # a low-rank projection is narrower than the hidden width
    "kv_lora_rank": (0, _WIDTH),
    "intermediate_size": (1, _MLP),
    "intermediate_size_mlp": (1, _MLP),
    "moe_intermediate_size": (0, _MLP),
    "shared_expert_intermediate_size": (0, _MLP),
    "num_attention_heads": (1, _HEADS),
    "num_key_value_heads": (1, _HEADS),
    "head_dim": (1, _HEAD_DIM),
    "qk_nope_head_dim": (0, _HEAD_DIM),
    "qk_rope_head_dim": (0, _HEAD_DIM),
    "v_head_dim": (0, _HEAD_DIM),
    "index_n_heads": (1, _HEADS),
    "index_head_dim": (1, _HEAD_DIM),
    "index_topk": (1, _POSITIONS),  # at most the context: a token never picks more
    "vocab_size": (1, _VOCAB),
    "max_position_embeddings": (1, _POSITIONS),
    "sliding_window": (0, _POSITIONS),
    "attention_chunk_size": (0, _POSITIONS),
    "num_local_experts": (0, _EXPERTS),
    "num_experts": (0, _EXPERTS),
    "n_routed_experts": (0, _EXPERTS),
    "n_shared_experts": (0, _EXPERTS),
    "num_experts_per_tok": (0, _EXPERTS),
    "experts_per_token": (0, _EXPERTS),
    "num_shared_experts": (0, _EXPERTS),
    "moe_shared_expert_intermediate_size": (0, _MLP),
    # Gated DeltaNet layers: heads and head widths bounded as attention's; the conv1d's taps
    # by 64, 16x the 4 of every Qwen3-Next and Qwen3.5 config
    "full_attention_interval": (1, _LAYERS),
    "linear_num_key_heads": (1, _HEADS),
    "linear_num_value_heads": (1, _HEADS),
    "linear_key_head_dim": (1, _HEAD_DIM),
    "linear_value_head_dim": (1, _HEAD_DIM),
    "linear_conv_kernel_dim": (1, 64),
}


def _check_sizes(raw: dict[str, Any]) -> None:
    """Every size key the config sets (null: unset) a whole number within its limits."""
    for key, (least, _) in SIZE_LIMITS.items():
        if raw.get(key) is not None:
            _int(raw, key, minimum=least)


def _int(raw: dict[str, Any], key: str, default: int | None = None, minimum: int = 0) -> int:
    """A whole-number key within its :data:`SIZE_LIMITS`, or an InputError naming it."""
    value = raw.get(key, default)
    if value is None and default is not None:
        value = default
    largest = SIZE_LIMITS[key][1] if key in SIZE_LIMITS else None
    if type(value) is not int or value < minimum or (largest is not None and value > largest):
        allowed = f">= {minimum}" if largest is None else f"in [{minimum}, {largest}]"
        raise InputError(f"model.{key}", f"must be a whole number {allowed} (got {_shown(value)})")
    return value


def _stated(raw: dict[str, Any], *keys: str) -> None:
    """Refuse a config without ``keys``, where an engine would take the architecture's class
    default, which differs by model and version (DeepseekV3Config: 3 dense layers, 1 shared
    expert, q_lora_rank 1536; DeepseekV2Config: 0, none, 1536; Glm4MoeConfig: 1, 1): simspec
    guesses none (QA: a trimmed DeepSeek-V3 config read as 61 MoE layers, 701B parameters)."""
    for key in keys:
        if key not in raw:
            raise InputError(
                f"model.{key}",
                "missing: it sets the model's MoE layout and its default differs by "
                "architecture and version; give it as the checkpoint's config.json does",
            )


def _shown(value: Any) -> str:
    """A config's value as an error quotes it: cut to 40 characters (JSON allows an integer of
    4,300 digits and a string of any length)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _layers(raw: dict[str, Any]) -> int:
    return _int(raw, "num_hidden_layers", minimum=1)


def _index_list(raw: dict[str, Any], key: str, layers: int) -> list[int]:
    value = raw.get(key) or []
    if not isinstance(value, list) or any(type(i) is not int or not 0 <= i < layers for i in value):
        raise InputError(f"model.{key}", f"must be a list of layer indices below {layers}")
    return value


# -- attention layouts ------------------------------------------------------------------------
def _windowed_layers(raw: dict[str, Any], layers: int, allowed: tuple[str, ...]) -> dict:
    """Sliding-window layers from ``layer_types`` (each ``full_attention`` or one of
    ``allowed``) and ``sliding_window``."""
    types = raw.get("layer_types")
    if types is None:
        return {}
    if not isinstance(types, list) or len(types) != layers:
        raise InputError("model.layer_types", f"must list one type per layer ({layers})")
    for i, kind in enumerate(types):
        if kind != "full_attention" and kind not in allowed:
            raise InputError(
                "model.layer_types",
                f"layer {i} is {kind!r}; simspec models full_attention"
                + "".join(f" and {a}" for a in allowed),
            )
    sliding = tuple(i for i, kind in enumerate(types) if kind != "full_attention")
    if not sliding:
        return {}
    return {"sliding_window": _int(raw, "sliding_window", minimum=1), "sliding_layers": sliding}


def _dense(raw: dict[str, Any]) -> dict[str, Any]:
    """Llama, Mistral, Qwen2/3: a dense decoder (refusing keys that declare more)."""
    for key in MOE_OR_MLA_KEYS:
        if raw.get(key) not in (None, 0):
            kind = raw.get("model_type") or "a config without model_type"
            sparse = sorted(t for t, read in READERS.items() if read is not _dense)
            raise InputError(
                f"model.{key}",
                f"experts or latent attention, but {kind} reads as a dense decoder; "
                f"give its architecture's model_type ({', '.join(sparse)})",
            )
    layers = _layers(raw)
    if raw.get("use_sliding_window"):  # Qwen2/3: windows on layers past max_window_layers
        raise InputError(
            "model.use_sliding_window", "Qwen's sliding-window layers are not modelled"
        )
    windowed = _windowed_layers(raw, layers, ())
    if raw.get("model_type") == "mistral" and raw.get("sliding_window") is not None:
        # Mistral-7B-v0.1 windows every layer (MistralConfig.sliding_window)
        windowed = {
            "sliding_window": _int(raw, "sliding_window", minimum=1),
            "sliding_layers": tuple(range(layers)),
        }
    return windowed


# -- mixture of experts -----------------------------------------------------------------------
def _experts(raw: dict[str, Any], count_key: str, width_key: str) -> dict[str, Any]:
    experts = _int(raw, count_key, minimum=1)
    top = _int(raw, "num_experts_per_tok", minimum=1)
    if top > experts:
        raise InputError("model.num_experts_per_tok", f"must be <= {count_key} ({experts})")
    return {
        "num_experts": experts,
        "num_experts_per_tok": top,
        "moe_intermediate_size": _int(raw, width_key, minimum=1),
    }


def _mixtral(raw: dict[str, Any]) -> dict[str, Any]:
    layers = _layers(raw)
    fields = _experts(raw, "num_local_experts", "intermediate_size")
    fields["moe_layers"] = tuple(range(layers))
    if raw.get("sliding_window") is not None:
        fields["sliding_window"] = _int(raw, "sliding_window", minimum=1)
        fields["sliding_layers"] = tuple(range(layers))
    return fields


def _qwen_moe(raw: dict[str, Any]) -> dict[str, Any]:
    layers = _layers(raw)
    fields = _experts(raw, "num_experts", "moe_intermediate_size")
    step = _int(raw, "decoder_sparse_step", default=1, minimum=1)
    dense = set(_index_list(raw, "mlp_only_layers", layers))
    fields["moe_layers"] = tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0)
    shared = _int(raw, "shared_expert_intermediate_size", default=0)
    if shared and raw.get("model_type") != "qwen2_moe":
        raise InputError(
            "model.shared_expert_intermediate_size",
            "Qwen3-MoE has no shared expert (Qwen3MoeSparseMoeBlock); only qwen2_moe reads it",
        )
    fields["shared_expert_intermediate_size"] = shared
    if raw.get("use_sliding_window"):
        raise InputError(
            "model.use_sliding_window", "Qwen's sliding-window layers are not modelled"
        )
    return fields


def _gpt_oss(raw: dict[str, Any]) -> dict[str, Any]:
    layers = _layers(raw)
    raw = dict(raw)
    if raw.get("num_experts_per_tok") is None:
        raw["num_experts_per_tok"] = raw.get("experts_per_token")
    fields = _experts(raw, "num_local_experts", "intermediate_size")
    fields["moe_layers"] = tuple(range(layers))
    if raw.get("layer_types") is None:
        # transformers' GptOssConfig alternates them when the config lists none (sliding on
        # even layers: configuration_gpt_oss.py, "sliding_attention" if bool((i + 1) % 2));
        # QA: such a config had read as full attention throughout, twice the KV
        raw["layer_types"] = [
            "sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)
        ]
    if raw.get("sliding_window") is None:
        raw["sliding_window"] = 128  # GptOssConfig's default window
    fields.update(_windowed_layers(raw, layers, ("sliding_attention",)))
    return fields


def _llama4(raw: dict[str, Any]) -> dict[str, Any]:
    layers = _layers(raw)
    fields = _experts(raw, "num_local_experts", "intermediate_size")
    if raw.get("moe_layers"):
        moe = _index_list(raw, "moe_layers", layers)
    else:
        step = _int(raw, "interleave_moe_layer_step", default=1, minimum=1)
        moe = list(range(step - 1, layers, step))
    fields["moe_layers"] = tuple(sorted(set(moe)))
    fields["shared_expert_intermediate_size"] = fields["moe_intermediate_size"]
    # dense layers use intermediate_size_mlp; intermediate_size is the experts' width
    fields["intermediate_size"] = _int(raw, "intermediate_size_mlp", minimum=1)
    chunk = raw.get("attention_chunk_size")
    if chunk is not None:
        # Llama4TextConfig: no_rope_layers from no_rope_layer_interval (default 4) when unset
        interval = _int(raw, "no_rope_layer_interval", default=4, minimum=1)
        nope = raw.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)]
        if not isinstance(nope, list) or len(nope) != layers or any(v not in (0, 1) for v in nope):
            raise InputError(
                "model.no_rope_layers", f"must list 0 or 1 for each of {layers} layers"
            )
        fields["sliding_window"] = _int(raw, "attention_chunk_size", minimum=1)
        fields["sliding_layers"] = tuple(i for i, rope in enumerate(nope) if rope)
        fields["chunked_attention"] = True
    return fields


def _deepseek(raw: dict[str, Any]) -> dict[str, Any]:
    layers = _layers(raw)
    fields = _experts(raw, "n_routed_experts", "moe_intermediate_size")
    _stated(raw, "first_k_dense_replace", "n_shared_experts", "q_lora_rank")
    first = _int(raw, "first_k_dense_replace")
    freq = _int(raw, "moe_layer_freq", default=1, minimum=1)
    fields["moe_layers"] = tuple(i for i in range(layers) if i >= first and i % freq == 0)
    fields["shared_expert_intermediate_size"] = (
        _int(raw, "n_shared_experts", default=0) * fields["moe_intermediate_size"]
    )
    q_lora = raw.get("q_lora_rank")
    fields["q_lora_rank"] = 0 if q_lora is None else _int(raw, "q_lora_rank", minimum=1)
    for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        fields[key] = _int(raw, key, minimum=1)
    fields.update(_sparse_indexer(raw))
    return fields


# keys of indexers shared across layers (IndexCache, arXiv 2603.12201: GLM-5's indexer_types
# "shared" layers reuse a preceding layer's top-k); vLLM reads them in deepseek_v2.py at 002d607
_SHARED_INDEXER = ("index_topk_freq", "index_topk_pattern", "indexer_types")


def _sparse_indexer(raw: dict[str, Any]) -> dict[str, Any]:
    """DeepSeek Sparse Attention's indexer keys: none on a DeepSeek-V2/V3 config, required on
    a deepseek_v32 one (transformers' DeepseekV32Config defaults them for a fresh model, but a
    saved config has them; simspec guesses none)."""
    if raw.get("index_topk") is None and raw.get("model_type") != "deepseek_v32":
        return {}
    for key in _SHARED_INDEXER:
        value = raw.get(key)
        if value not in (None, 1) and not (
            key == "indexer_types" and isinstance(value, list) and set(value) <= {"full"}
        ):
            raise InputError(
                f"model.{key}",
                "indexers shared across layers (IndexCache: a layer reusing another's top-k) "
                "are not modelled; simspec models an indexer in every layer, as DeepSeek-V3.2 "
                "has",
            )
    fields = {k: _int(raw, k, minimum=1) for k in ("index_topk", "index_n_heads", "index_head_dim")}
    if raw.get("q_lora_rank") is None:
        raise InputError(
            "model.q_lora_rank",
            "sparse attention's indexer projects its query from MLA's query latent; give "
            "q_lora_rank",
        )
    return fields


def _moe_after_dense(
    raw: dict[str, Any], count_key: str, shared_key: str, shared_width: int | None = None
) -> dict[str, Any]:
    """Experts in every layer from ``first_k_dense_replace`` on (dense MLPs before it), plus
    ``shared_key`` shared experts of ``shared_width`` (default: the routed experts' width)
    summed into one shared MLP: GLM-4-MoE's and BailingMoE-V2's layout."""
    fields = _experts(raw, count_key, "moe_intermediate_size")
    _stated(raw, "first_k_dense_replace", shared_key)
    first = _int(raw, "first_k_dense_replace")
    fields["moe_layers"] = tuple(range(first, _layers(raw)))
    width = fields["moe_intermediate_size"] if shared_width is None else shared_width
    fields["shared_expert_intermediate_size"] = _int(raw, shared_key, default=0) * width
    return fields


def _use_qk_norm(raw: dict[str, Any]) -> bool:
    """The config's ``use_qk_norm`` (absent: off), which must be a boolean."""
    qk_norm = raw.get("use_qk_norm", False)
    if type(qk_norm) is not bool:
        raise InputError("model.use_qk_norm", f"must be true or false (got {_shown(qk_norm)})")
    return qk_norm


def _glm4_moe(raw: dict[str, Any]) -> dict[str, Any]:
    fields = _moe_after_dense(raw, "n_routed_experts", "n_shared_experts")
    fields["qk_norm"] = _use_qk_norm(raw)
    return fields


def _kimi_k25(raw: dict[str, Any]) -> dict[str, Any]:
    """Kimi-K2.5 written flat (its text model's keys at the top level): the DeepSeek-V3 layout
    of Kimi-K2 (a config nesting them under text_config is read as its kimi_k2 text model)."""
    return _deepseek(raw)


def _minimax_m2(raw: dict[str, Any]) -> dict[str, Any]:
    layers = _layers(raw)
    kinds = raw.get("attn_type_list")
    if kinds is not None and (
        not isinstance(kinds, list) or len(kinds) != layers or any(k != 1 for k in kinds)
    ):
        # MiniMax-01 (MiniMaxText01) marks its lightning (linear) attention layers with 0
        raise InputError(
            "model.attn_type_list",
            f"must list 1 (full attention) for each of {layers} layers: MiniMax-M2 has no "
            "lightning-attention layers, and simspec models none",
        )
    if raw.get("shared_intermediate_size"):
        raise InputError(
            "model.shared_intermediate_size",
            "must be 0: vLLM's MiniMaxM2MoE builds no shared expert",
        )
    if raw.get("use_qk_norm") is False or raw.get("qk_norm_type", "per_layer") != "per_layer":
        raise InputError(
            "model.qk_norm_type",
            "MiniMax-M2 normalises q and k over all heads (use_qk_norm true, qk_norm_type "
            f"per_layer), as vLLM builds it; got use_qk_norm {raw.get('use_qk_norm')!r}, "
            f"qk_norm_type {_shown(raw.get('qk_norm_type'))}",
        )
    fields = _experts(raw, "num_local_experts", "intermediate_size")
    fields["moe_layers"] = tuple(range(layers))
    fields["qk_norm"] = True
    if raw.get("num_mtp_modules"):
        fields["mtp_unserved"] = (
            f"its config declares num_mtp_modules {_shown(raw['num_mtp_modules'])}, but no "
            "engine in scope drafts with them (vLLM's minimax_m2.py skips the checkpoint's "
            "spec-layer weights and it has no MiniMax-M2 MTP model; neither has SGLang)"
        )
    return fields


# -- hybrid linear attention ------------------------------------------------------------------
_LINEAR_KEYS = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)
# the SSM state dtypes a config may ask the engine for (Qwen3.5's mamba_ssm_dtype; vLLM reads
# it into mamba_ssm_cache_dtype, vllm/model_executor/models/config.py Qwen3_5 config hook)
_SSM_DTYPES = ("float32", "bfloat16", "float16")


def _linear_layer_types(raw: dict[str, Any], layers: int) -> tuple[int, ...]:
    """The Gated DeltaNet layers: ``layer_types`` as written, else every
    ``full_attention_interval``-th layer full (Qwen3NextConfig.__post_init__: layer i is
    linear when ``(i + 1) % interval`` is nonzero)."""
    types = raw.get("layer_types")
    if types is None:
        interval = _int(raw, "full_attention_interval", minimum=1)
        return tuple(i for i in range(layers) if (i + 1) % interval)
    if not isinstance(types, list) or len(types) != layers:
        raise InputError("model.layer_types", f"must list one type per layer ({layers})")
    for i, kind in enumerate(types):
        if kind not in ("full_attention", "linear_attention"):
            raise InputError(
                "model.layer_types",
                f"layer {i} is {_shown(kind)}; a {raw.get('model_type')} config has "
                "full_attention and linear_attention layers",
            )
    return tuple(i for i, kind in enumerate(types) if kind == "linear_attention")


def _hybrid_linear(raw: dict[str, Any]) -> dict[str, Any]:
    """Qwen3-Next and Qwen3.5: Gated DeltaNet layers beside gated full attention, MoE (with a
    shared expert) or dense MLPs."""
    layers = _layers(raw)
    fields: dict[str, Any] = {key: _int(raw, key, minimum=1) for key in _LINEAR_KEYS}
    fields["linear_layers"] = _linear_layer_types(raw, layers)
    gate = raw.get("attn_output_gate", True)  # vLLM: getattr(config, "attn_output_gate", True)
    if type(gate) is not bool:
        raise InputError("model.attn_output_gate", f"must be true or false (got {_shown(gate)})")
    fields["attn_output_gate"] = gate
    ssm = raw.get("mamba_ssm_dtype")
    if ssm is not None and ssm not in _SSM_DTYPES:
        raise InputError(
            "model.mamba_ssm_dtype", f"must be one of {', '.join(_SSM_DTYPES)} (got {_shown(ssm)})"
        )
    fields["mamba_ssm_dtype"] = ssm or ""
    fields["qk_norm"] = True  # Qwen3NextAttention builds q_norm/k_norm unconditionally
    if raw.get("model_type") == "qwen3_next" and raw.get("num_nextn_predict_layers") is None:
        # the released config writes none and the checkpoint ships one MTP layer: vLLM's
        # qwen3_next_mtp.py builds getattr(config, "num_nextn_predict_layers", 1) (QA: the
        # real config had read as no MTP where the preset has one)
        fields["num_nextn_predict_layers"] = 1
    if raw.get("num_experts"):
        moe = dict(raw, model_type="qwen2_moe")  # Qwen3NextSparseMoeBlock: Qwen2-MoE's layout
        fields.update(_qwen_moe(moe))
    elif raw.get("moe_intermediate_size") or raw.get("shared_expert_intermediate_size"):
        raise InputError(
            "model.num_experts", "is missing or 0 but the config sizes experts: give num_experts"
        )
    return fields


def _bailing_moe(raw: dict[str, Any]) -> dict[str, Any]:
    shared_width = (
        None
        if raw.get("moe_shared_expert_intermediate_size") is None
        else _int(raw, "moe_shared_expert_intermediate_size", minimum=1)
    )
    fields = _moe_after_dense(raw, "num_experts", "num_shared_experts", shared_width)
    fields["qk_norm"] = _use_qk_norm(raw)
    return fields


READERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    **dict.fromkeys(DENSE_TYPES, _dense),
    "mixtral": _mixtral,
    "qwen2_moe": _qwen_moe,
    "qwen3_moe": _qwen_moe,
    "gpt_oss": _gpt_oss,
    "llama4": _llama4,
    "llama4_text": _llama4,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "deepseek_v32": _deepseek,
    "kimi_k2": _deepseek,
    "glm4_moe": _glm4_moe,
    "kimi_k25": _kimi_k25,
    "minimax_m2": _minimax_m2,
    "bailing_moe": _bailing_moe,
    **dict.fromkeys(HYBRID_LINEAR_TYPES, _hybrid_linear),
}


# -- weight precision -------------------------------------------------------------------------
def quant_method(q: dict[str, Any]) -> Any:
    """``quant_method`` as vLLM matches it, lower-cased (ModelConfig._verify_quantization,
    vllm/config/model.py at v0.11.0: ``quant_cfg.get("quant_method", "").lower()``)."""
    method = q.get("quant_method")
    return method.lower() if isinstance(method, str) else method


def lm_head_quantized(raw: dict[str, Any]) -> bool:
    """Whether a GPTQ or AWQ checkpoint quantises its LM head as well ("lm_head": true, which
    vLLM's GPTQConfig, GPTQMarlinConfig and AWQMarlinConfig read as ``lm_head_quantized``,
    loading a ParallelLMHead with the layers' quant method); other formats keep it bf16 in
    simspec (their ignore lists name it, or their loaders skip it)."""
    q = raw.get("quantization_config")
    if not isinstance(q, dict) or quant_method(q) not in ("gptq", "awq"):
        return False
    return q.get("lm_head") is True


def weight_dtypes(raw: dict[str, Any]) -> tuple[str, str | None]:
    """(weights, experts' weights if they differ) from ``quantization_config``.

    - ``fp8`` / ``fbgemm_fp8``: 8-bit float weights (DeepSeek-V3's 128x128 block FP8:
      README_WEIGHTS.md "FP8 Weight Documentation"; embeddings and LM head stay bf16).
    - ``mxfp4``: GPT-OSS ships its MoE experts in MXFP4 (4-bit E2M1 values with one 8-bit
      scale per 32, 4.25 bits a weight; ``modules_to_not_convert`` keeps attention, router,
      embeddings and head in bf16). On Hopper vLLM runs them weight-only (W4A16 kernels), so
      the experts are read as ``int4-w``; the rest stays bf16.
    - ``gptq`` / ``awq``: ``bits`` (AWQ: ``w_bit``) 4 -> ``int4-w``.
    - ``compressed-tensors``: each ``config_groups`` entry's ``weights`` (8-bit float -> fp8,
      4-bit int -> int4-w); the routed experts alone when ``ignore`` keeps every other linear
      layer unquantised (:func:`_experts_only`, Kimi-K2.5's INT4 checkpoint).

    Anything else is an InputError naming ``quantization_config.quant_method``."""
    q = raw.get("quantization_config")
    if q is None:
        return "bf16", None
    if not isinstance(q, dict):
        raise InputError("model.quantization_config", "must be a mapping")
    method = quant_method(q)
    # compressed-tensors quantising a MoE model's routed experts alone (Kimi-K2.5)
    experts_only = _experts_only(q) and any(raw.get(k) for k in EXPERT_COUNT_KEYS)
    if method in ("fp8", "fbgemm_fp8", "gptq", "awq", "compressed-tensors"):
        # the lists each format's loader reads of modules it leaves unquantised: vLLM's
        # Fp8Config reads ignored_layers as well as modules_to_not_convert, GPTQ's dynamic
        # skips a module whose pattern starts "-:" (QA: both had been ignored)
        keys = {
            "compressed-tensors": ("ignore",),
            "fp8": ("modules_to_not_convert", "ignored_layers"),
        }.get(method, ("modules_to_not_convert",))
        lists = [(key, q.get(key)) for key in keys]
        dynamic = q.get("dynamic")
        if method == "gptq" and isinstance(dynamic, dict):
            skipped = [f"re:{k[2:]}" for k in dynamic if isinstance(k, str) and k.startswith("-:")]
            lists.append(("dynamic", skipped))
            # "+:" (or a bare pattern) gives matching modules their own bits or group size,
            # which vLLM's GPTQ-Marlin honours (override_config in gptq_utils.get_dynamic_
            # override): read as the config's bits, they would be misstated (QA)
            if overridden := [
                k for k in dynamic if not (isinstance(k, str) and k.startswith("-:"))
            ]:
                raise InputError(
                    "model.quantization_config.dynamic",
                    f"gives {', '.join(map(str, overridden[:2]))} their own quantisation: "
                    "simspec prices every linear layer at one precision; give --precision for "
                    "the whole model, or a config without those overrides",
                )
        for key, modules in lists:
            kept = _kept_unquantised(modules)
            if kept and not (key == "ignore" and experts_only):
                raise InputError(
                    f"model.quantization_config.{key}",
                    f"keeps {', '.join(kept[:3])}{' ...' if len(kept) > 3 else ''} unquantised: "
                    "simspec prices every linear layer at one precision (the routed experts "
                    "apart), so the weights, their reads and the KV cache left would be "
                    "misstated; give --precision for the whole model, or a config without that "
                    "list",
                )
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8", None
    if method == "mxfp4":
        return "bf16", "int4-w"
    if method in ("gptq", "awq"):
        bits = q.get("bits", q.get("w_bit"))
        if bits == 4:
            return "int4-w", None
        raise InputError(
            "model.quantization_config.bits",
            f"{method} with {bits!r}-bit weights is not modelled (4-bit: int4-w)",
        )
    if method == "compressed-tensors":
        if experts_only:
            return "bf16", _compressed_tensors(q)
        return _compressed_tensors(q), None
    if method == "modelopt":
        return modelopt_dtypes(q)
    raise InputError(
        "model.quantization_config.quant_method",
        f"{method!r} is not a weight format simspec models (fp8, fbgemm_fp8, mxfp4, gptq, awq, "
        "compressed-tensors, modelopt: bf16, fp8, int4-w or nvfp4 weights)",
    )


# NVIDIA ModelOpt's quant_algo values (vLLM docs/features/quantization/modelopt.md, read by
# vLLM's ModelOptQuantConfigBase.from_config in model_executor/layers/quantization/modelopt.py)
MODELOPT_ALGOS = {"NVFP4": "nvfp4", "FP8": "fp8", "FP8_PER_CHANNEL_PER_TOKEN": "fp8"}


def modelopt_dtypes(q: dict[str, Any]) -> tuple[str, str | None]:
    """A ModelOpt checkpoint (nvidia/DeepSeek-R1-FP4, the Llama-4 FP4/FP8 checkpoints): its
    ``quant_algo``, at the top of config.json's ``quantization_config`` or, in the older
    hf_quant_config.json form, under ``quantization`` (vLLM reads both). NVFP4 -> nvfp4, FP8
    -> fp8. Where ``ignore`` (``exclude_modules``) keeps the attention projections unquantised
    (a pattern naming ``attn``), only the MoE experts are read at that precision and the other
    linear layers as bf16; a dense MLP or shared expert of such a checkpoint is then priced as
    bf16 too (an upper bound on its time: those are quantised in the checkpoint)."""
    nested = q.get("quantization")
    inner = nested if isinstance(nested, dict) else q
    algo = inner.get("quant_algo")
    dtype = MODELOPT_ALGOS.get(algo) if isinstance(algo, str) else None
    if dtype is None:
        raise InputError(
            "model.quantization_config.quant_algo",
            f"ModelOpt's {shown_algo(algo)} is not a weight format simspec models "
            f"({', '.join(MODELOPT_ALGOS)})",
        )
    ignored = inner.get("ignore", inner.get("exclude_modules")) or []
    if isinstance(ignored, list) and any(isinstance(m, str) and "attn" in m for m in ignored):
        return "bf16", dtype
    if kept := _kept_unquantised(ignored):  # as the other formats' lists are (QA: unread)
        key = "ignore" if "ignore" in inner else "exclude_modules"
        raise InputError(
            f"model.quantization_config.{key}",
            f"keeps {', '.join(kept[:3])}{' ...' if len(kept) > 3 else ''} unquantised: simspec "
            "prices every linear layer at one precision (the routed experts apart), so the "
            "weights and their reads would be misstated; give --precision for the whole "
            "model, or a config without that list",
        )
    return dtype, None


def kv_cache_quant(raw: dict[str, Any]) -> str | None:
    """The KV-cache format a ModelOpt checkpoint states it was calibrated for
    (``kv_cache_quant_algo``, e.g. "FP8" in nvidia/Qwen3-30B-A3B-NVFP4's hf_quant_config),
    lower-cased; None where it states none."""
    q = raw.get("quantization_config")
    if not isinstance(q, dict) or quant_method(q) != "modelopt":
        return None
    nested = q.get("quantization")
    algo = (nested if isinstance(nested, dict) else q).get("kv_cache_quant_algo")
    return algo.lower() if isinstance(algo, str) and algo else None


def shown_algo(algo: object) -> str:
    return repr(algo) if isinstance(algo, str) else "missing quant_algo"


def _rope_scaled_context(raw: dict[str, Any]) -> int | None:
    """The context a RoPE-scaled config serves, as vLLM derives it (_get_and_verify_max_len in
    vllm/config/__init__.py, 0.10.1 wheel): a rope_scaling of any type but su, longrope and
    llama3 (whose max_position_embeddings is the scaled one already) multiplies it by
    ``factor``, yarn's ``original_max_position_embeddings`` rather than the config's; Gemma-3
    is skipped there and is no model simspec reads. transformers v5 writes the same dict as
    ``rope_parameters``. A factor or base that is not a positive finite number, or a context
    past the bound every context is held to, is an InputError naming the key (QA: NaN had
    raised a traceback, a bool read as 1). None: no scaling to apply."""
    key = "rope_scaling" if isinstance(raw.get("rope_scaling"), dict) else "rope_parameters"
    rope = raw.get(key)
    if not isinstance(rope, dict):
        return None
    kind = rope.get("rope_type", rope.get("type"))
    if kind in (None, "default", "su", "longrope", "llama3"):
        return None
    factor = rope.get("factor", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, int | float):
        raise InputError(f"model.{key}.factor", f"must be a number > 0 (got {_shown(factor)})")
    if not (math.isfinite(factor) and factor > 0):
        raise InputError(f"model.{key}.factor", f"must be a finite number > 0 (got {factor})")
    base = rope.get("original_max_position_embeddings") if kind == "yarn" else None
    if base is not None and (type(base) is not int or base <= 0):
        raise InputError(
            f"model.{key}.original_max_position_embeddings",
            f"must be a whole number > 0 (got {_shown(base)})",
        )
    base = base if base is not None else raw.get("max_position_embeddings")
    if type(base) is not int or base <= 0:
        return None  # the unscaled key is checked (and refused) with the other sizes
    scaled = int(base * factor)
    if scaled > _POSITIONS:
        raise InputError(
            f"model.{key}.factor",
            f"{factor:g} x {base:,} = {scaled:,} positions, past the {_POSITIONS:,} a context "
            "may hold",
        )
    return max(scaled, 1)


# modules a checkpoint may leave unquantised that simspec prices in bf16 anyway: the LM head,
# the embedding, MoE routers (and DeepSeek-style routing biases, Qwen's shared-expert gate:
# one output column)
_BF16_ANYWAY = (
    "lm_head",
    "embed_tokens",
    "gate",
    "router",
    "e_score_correction_bias",
    "shared_expert_gate",
)
# a multimodal checkpoint's vision tower and projector, which simspec does not run at all
_NOT_RUN = ("visual", "vision_tower", "vision_model", "multi_modal_projector", "mm_projector")


def _kept_unquantised(modules: Any) -> list[str]:
    """The entries of a modules_to_not_convert / ignore list that simspec would misprice: any
    but the LM head, embedding, routers and shared-expert gates, which it keeps in bf16
    whatever the checkpoint, norms (no GEMM weights), and a vision tower it does not run. An
    entry may be a module's dotted name or llm-compressor's ``re:`` pattern (``re:.*lm_head``,
    ``re:.*mlp.gate$``: QA, its default MoE recipes had been refused), read by the names it
    spells."""
    if not isinstance(modules, list):
        return []
    kept = []
    for entry in (str(m) for m in modules):
        names = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", entry.removeprefix("re:"))
        if names and (
            names[-1] in _BF16_ANYWAY
            # a norm's weight is a vector no engine quantises (input_layernorm, q_norm: the
            # list of Qwen/Qwen3-235B-A22B-FP8's config.json, refused until QA)
            or names[-1].endswith("norm")
            or any(n in _NOT_RUN for n in names)
        ):
            continue
        kept.append(entry)
    return kept


# MXFP4 (OCP Microscaling Formats v1.0, section 5: blocks of 32 E2M1 values sharing one 8-bit
# E8M0 scale) stores 4 + 8/32 = 4.25 bits a weight: the bytes of int4 with one 16-bit scale
# per 64 weights, the form ModelShape.stored_bytes prices (QA: read at int4-w's group of 128,
# 4.125 bits, gpt-oss-120b's experts were 1.7 GiB short in the memory plan)
MXFP4_GROUP_AS_INT4 = 64


def fp8_block_size(raw: dict[str, Any]) -> tuple[int, int] | None:
    """``quantization_config.weight_block_size`` of a block-scaled FP8 checkpoint, as vLLM's
    Fp8Config and SGLang's read it (two positive ints: [block_n, block_k]); None where the
    config states none (per-tensor or per-channel scales) or a compressed-tensors one."""
    q = raw.get("quantization_config")
    if not isinstance(q, dict) or quant_method(q) not in ("fp8", "fbgemm_fp8"):
        return None
    block = q.get("weight_block_size")
    if block is None:
        return None
    if not (
        isinstance(block, list | tuple)
        and len(block) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in block)
    ):
        raise InputError(
            "model.quantization_config.weight_block_size",
            f"must be two positive integers [block_n, block_k] (got {_shown(block)})",
        )
    return int(block[0]), int(block[1])


def int4_group_size(raw: dict[str, Any]) -> int | None:
    """The group of int4 weights one 16-bit scale covers, where the quantization_config states
    one: GPTQ/AWQ ``group_size`` (AWQ: ``q_group_size``), compressed-tensors' weights
    ``group_size``, MXFP4's in 16-bit-scale terms (:data:`MXFP4_GROUP_AS_INT4`); None where it
    states none or quantises per channel (-1)."""
    q = raw.get("quantization_config")
    if not isinstance(q, dict):
        return None
    if quant_method(q) == "mxfp4":
        return MXFP4_GROUP_AS_INT4
    sizes = [q.get("group_size"), q.get("q_group_size")]
    groups = q.get("config_groups")
    for group in groups.values() if isinstance(groups, dict) else ():
        w = group.get("weights") if isinstance(group, dict) else None
        if isinstance(w, dict) and w.get("num_bits") == 4:
            sizes.append(w.get("group_size"))
    stated = [n for n in sizes if isinstance(n, int) and not isinstance(n, bool) and n > 0]
    return stated[0] if stated else None


def _compressed_tensors(q: dict[str, Any]) -> str:
    groups = q.get("config_groups")
    sparsity = q.get("sparsity_config")
    if isinstance(sparsity, dict) and sparsity.get("format") not in (None, "dense"):
        # 2:4 sparse weights: vLLM 0.10-0.13 runs them with CUTLASS sparse kernels (about half
        # the bytes), later releases refuse them (QA: priced dense)
        raise InputError(
            "model.quantization_config.sparsity_config",
            f"{sparsity.get('format')!r} sparse weights are not modelled (dense only)",
        )
    for name, group in groups.items() if isinstance(groups, dict) else ():
        targets = group.get("targets") if isinstance(group, dict) else None
        if isinstance(targets, list) and targets != ["Linear"]:
            # a group targeting some layers leaves the others unquantised (QA: attention of
            # an MLP-only scheme was priced at int4)
            raise InputError(
                f"model.quantization_config.config_groups.{name}.targets",
                f"{targets[:2]} quantises some linear layers only: simspec prices every linear "
                "layer at one precision; give --precision for the whole model, or a scheme "
                "targeting Linear",
            )
    kinds = set()
    for group in groups.values() if isinstance(groups, dict) else ():
        w = group.get("weights") if isinstance(group, dict) else None
        if isinstance(w, dict):
            kinds.add((w.get("num_bits"), w.get("type")))
            if (w.get("num_bits"), w.get("type"), w.get("group_size")) == (4, "float", 32):
                # MXFP4 (an E8M0 scale per 32), not NVFP4's FP8 scale per 16 (QA: read as nvfp4)
                raise InputError(
                    "model.quantization_config.config_groups",
                    "4-bit float weights in groups of 32 (MXFP4) are not modelled for every "
                    "linear layer (nvfp4: groups of 16; gpt-oss's MXFP4 experts: quant_method "
                    "mxfp4)",
                )
            a = group.get("input_activations")
            if (w.get("num_bits"), w.get("type")) == (4, "int") and isinstance(a, dict):
                if (a.get("num_bits"), a.get("type")) == (8, "int"):  # QA: read as W4A16
                    raise InputError(
                        "model.quantization_config.config_groups",
                        "int4 weights with int8 activations (W4A8) are not modelled (int4-w is "
                        "weight-only, W4A16)",
                    )
    if kinds == {(8, "float")}:
        return "fp8"
    if kinds == {(4, "int")}:
        return "int4-w"
    if kinds == {(4, "float")}:  # NVFP4 (FP4 E2M1, an FP8 scale per 16): llm-compressor's
        return "nvfp4"  # NVFP4 scheme, which vLLM runs as CompressedTensorsW4A4Fp4
    raise InputError(
        "model.quantization_config.config_groups",
        f"compressed-tensors weights {sorted(map(str, kinds)) or 'unstated'} are not modelled "
        "(8-bit float: fp8; 4-bit int: int4-w; 4-bit float: nvfp4)",
    )


# What a compressed-tensors ``ignore`` entry must name for the checkpoint to quantise its routed
# experts alone, as Kimi-K2.5's does (ignore: lm_head, re:.*self_attn.*, re:.*shared_experts.*,
# re:.*mlp\.(gate|up|gate_up|down)_proj.* -- the dense layers' MLPs; moonshotai/Kimi-K2.5
# config.json text_config.quantization_config, as copied in ai-dynamo/aiconfigurator
# src/aiconfigurator/model_configs/nvidia--Kimi-K2.5-NVFP4_config.json@202f06a3). Matched as
# text, never compiled: a config's regex is user input.
_NON_EXPERT_MODULES = {
    "attention": ("self_attn",),
    "shared experts": ("shared_expert",),
    "dense MLPs": ("mlp.gate_proj", "mlp\\.(gate", "mlp.(gate", "mlp.down_proj"),
    "LM head": ("lm_head",),
}


def _experts_only(q: dict[str, Any]) -> bool:
    """Whether ``ignore`` names attention, shared experts, dense MLPs and the LM head and
    leaves the routed experts (``mlp.experts``) quantised."""
    ignore = q.get("ignore")
    if not isinstance(ignore, list) or not all(isinstance(e, str) for e in ignore):
        return False
    if any(".experts" in e and "shared" not in e for e in ignore):
        return False
    return all(
        any(token in entry for entry in ignore for token in tokens)
        for tokens in _NON_EXPERT_MODULES.values()
    )
