"""Model shapes: the packaged presets (``simspec/data/models.yaml``, each written with its
config.json's keys and its source) or a Hugging Face ``config.json`` given by path, both read
by architecture (:mod:`simspec.catalog.hf_config`): dense, mixture-of-experts, MLA,
sliding-window and MTP layers, and the weights' precision."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simspec.catalog.hf_config import normalised, read_config
from simspec.catalog.tables import packaged_table, parse_json, read_input_text, shown
from simspec.errors import InputError, first_error

BYTES_PER_PARAM = 2  # bf16/fp16 weights and KV cache
MAX_HF_CONFIG_BYTES = 4 * 1024 * 1024  # a config.json is a few KB; one with a label map, ~1 MB


WeightDtype = Literal["bf16", "fp8", "int4-w", "nvfp4"]


def bytes_per_weight(dtype: str) -> float:
    """Bytes a stored weight of ``dtype`` takes, scales included (simspec/data/precision.yaml:
    bf16 2, fp8 1, int4-w 0.515625, nvfp4 0.5625)."""
    from simspec.catalog.precision import load_precision

    return load_precision(dtype, "model.weight_dtype").weight_bytes


# the group int4-w's bytes a weight assume (simspec/data/precision.yaml int4-w: 4 + 16/128 bits)
INT4_GROUP = 128


class ModelShape(BaseModel):
    """Shapes of a decoder-only model, named as in Hugging Face ``config.json``: a Llama-style
    dense decoder, and optionally mixture-of-experts layers, multi-head latent attention (MLA),
    sliding-window layers and multi-token-prediction modules (read from each architecture's
    own keys by :mod:`simspec.catalog.hf_config`).

    Dense layers have an MLP of ``intermediate_size``; the layers in ``moe_layers`` instead
    route each token to ``num_experts_per_tok`` of ``num_experts`` experts of width
    ``moe_intermediate_size`` (plus an always-on shared MLP of
    ``shared_expert_intermediate_size``, 0 for none) through a router of ``hidden x
    num_experts``. ``kv_lora_rank > 0`` means MLA (DeepSeek-V2/V3, Kimi-K2): one latent of
    ``kv_lora_rank + qk_rope_head_dim`` per token and layer replaces K and V.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)
    id: str
    model_type: str = "llama"
    # the config.json's architectures[0] (the model class its weights load into): engines key
    # some defaults on it (SGLang's draft shape when none is given); "" where a config has none
    architecture: str = ""
    # a multimodal checkpoint's vision tower as its vision_config gives it, (layers, hidden
    # size); None for a text model. simspec serves text only and leaves its weights out, but
    # SGLang sizes its memory share by it (memory_share.sglang_vision_factor)
    vision_tower: tuple[int, int] | None = None
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    max_position_embeddings: int = Field(default=4096, gt=0)
    # multi-token-prediction layers shipped with the weights, as DeepSeek-V3's config.json names
    # them; vLLM reads this key (or Qwen3.5's mtp_num_hidden_layers) to build its mtp drafter
    # (SpeculativeConfig.hf_config_override, vllm/config/speculative.py)
    num_nextn_predict_layers: int = Field(default=0, ge=0)
    # why MTP modules a config declares under another key cannot draft (MiniMax-M2's
    # num_mtp_modules, which no engine in scope runs); empty when it declares none
    mtp_unserved: str = ""
    # weights as stored: linear layers, and the routed experts where they differ (GPT-OSS)
    weight_dtype: WeightDtype = "bf16"
    expert_weight_dtype: WeightDtype | None = None
    # the checkpoint's quantization_config.quant_method as vLLM matches it (lower-cased: fp8,
    # mxfp4, gptq, awq, compressed-tensors, modelopt_fp4, ...); empty for unquantised weights.
    # Engines that run a format only on some GPUs refuse it elsewhere (engines.yaml
    # format_archs)
    quant_method: str = ""
    # the checkpoint quantises its LM head too, at weight_dtype (GPTQ/AWQ "lm_head": true,
    # which vLLM's GPTQ/AWQ(-Marlin) configs read as lm_head_quantized); else it is bf16
    lm_head_quantized: bool = False
    # the KV-cache format a ModelOpt checkpoint was calibrated for (kv_cache_quant_algo, "fp8"),
    # which some engines serve by default; None where it states none
    kv_cache_quant: str | None = None
    # int4 weights share one 16-bit scale per this many (the quantization_config's group_size):
    # int4-w's own 128 unless the checkpoint says otherwise (Kimi-K2.5: 32, 4.5 bits a weight)
    int4_group_size: int = Field(default=INT4_GROUP, ge=1)
    # FP8 weights scaled per (block_n, block_k) block, as quantization_config's
    # weight_block_size states it (DeepSeek-V3's and Qwen3's FP8 checkpoints: 128 x 128); None
    # for per-tensor or per-channel scales. Each GPU's slice of an MLP must hold whole blocks
    # (ParallelLayout.block_refusal)
    weight_block_size: tuple[int, int] | None = None
    # mixture of experts (num_experts 0: a dense model)
    num_experts: int = Field(default=0, ge=0)
    num_experts_per_tok: int = Field(default=0, ge=0)
    moe_intermediate_size: int = Field(default=0, ge=0)
    shared_expert_intermediate_size: int = Field(default=0, ge=0)
    moe_layers: tuple[int, ...] = ()
    # multi-head latent attention (kv_lora_rank 0: none; q_lora_rank 0: a direct q projection)
    q_lora_rank: int = Field(default=0, ge=0)
    kv_lora_rank: int = Field(default=0, ge=0)
    qk_nope_head_dim: int = Field(default=0, ge=0)
    qk_rope_head_dim: int = Field(default=0, ge=0)
    v_head_dim: int = Field(default=0, ge=0)
    # per-head RMSNorm on q and k before RoPE (Qwen3, GLM-4-MoE with use_qk_norm): two small
    # kernels per layer the engines launch (simspec/data/layer_kernels.yaml)
    qk_norm: bool = False
    # layers that attend to the last sliding_window tokens only (GPT-OSS, Llama-4 chunks)
    sliding_window: int = Field(default=0, ge=0)
    sliding_layers: tuple[int, ...] = ()
    # the windowed layers attend within fixed chunks of sliding_window tokens (Llama-4's
    # chunked local attention), not over the last sliding_window tokens: a token reads the
    # tokens of its own chunk before it (position mod chunk)
    chunked_attention: bool = False
    # DeepSeek Sparse Attention (index_topk 0: none): a lightning indexer of index_n_heads x
    # index_head_dim in every MLA layer picks the index_topk past tokens each query attends to
    # (simspec.engine.costmodel.sparse_attention)
    index_topk: int = Field(default=0, ge=0)
    index_n_heads: int = Field(default=0, ge=0)
    index_head_dim: int = Field(default=0, ge=0)
    # Gated DeltaNet layers (Qwen3-Next, Qwen3.5): a recurrent state per sequence instead of KV
    # (linear_layers empty: none); the dims as their config.json names them
    linear_layers: tuple[int, ...] = ()
    linear_num_key_heads: int = Field(default=0, ge=0)
    linear_num_value_heads: int = Field(default=0, ge=0)
    linear_key_head_dim: int = Field(default=0, ge=0)
    linear_value_head_dim: int = Field(default=0, ge=0)
    linear_conv_kernel_dim: int = Field(default=0, ge=0)
    # the SSM state dtype the config asks the engine for ("": the engine's default)
    mamba_ssm_dtype: str = ""
    # full-attention layers gate their output by a second q-sized projection (Qwen3-Next)
    attn_output_gate: bool = False
    hf_ids: tuple[str, ...] = ()
    source: str = ""

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            if "num_key_value_heads" not in data or data["num_key_value_heads"] is None:
                data["num_key_value_heads"] = data.get("num_attention_heads")
            hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
            # only from numbers: anything else is left for validation to name
            if (
                data.get("head_dim") is None
                and type(hidden) is int
                and type(heads) is int
                and heads > 0
            ):
                data["head_dim"] = hidden // heads
        return data

    @model_validator(mode="after")
    def _consistent(self) -> ModelShape:
        n = self.num_hidden_layers
        if any(
            not 0 <= i < n for i in (*self.moe_layers, *self.sliding_layers, *self.linear_layers)
        ):
            raise ValueError(
                f"moe_layers, sliding_layers and linear_layers must be layer indices below {n}"
            )
        if self.linear_layers:
            dims = (
                self.linear_num_key_heads,
                self.linear_num_value_heads,
                self.linear_key_head_dim,
                self.linear_value_head_dim,
                self.linear_conv_kernel_dim,
            )
            if not all(dims):
                raise ValueError("linear_layers need the linear_* head counts and widths")
            if self.sliding_layers:  # no released model has both; the kernels assume one kind
                raise ValueError("linear_layers beside sliding_layers are not modelled")
        if self.num_experts:
            if not 1 <= self.num_experts_per_tok <= self.num_experts:
                raise ValueError("num_experts_per_tok must be in [1, num_experts]")
            if not self.moe_intermediate_size:
                raise ValueError("a MoE model needs moe_intermediate_size (its experts' width)")
            if not self.moe_layers:
                # a config's layer pattern left none (QA: the error had named neither key)
                raise ValueError(
                    "a MoE model needs a MoE layer, and its layer pattern leaves none: "
                    "first_k_dense_replace, decoder_sparse_step, mlp_only_layers, moe_layer_freq "
                    f"or interleave_moe_layer_step must leave one of its {self.num_hidden_layers} "
                    "layers sparse"
                )
        elif self.moe_layers:
            raise ValueError("moe_layers without num_experts")
        if self.kv_lora_rank and not (self.qk_nope_head_dim and self.qk_rope_head_dim):
            raise ValueError("MLA (kv_lora_rank) needs qk_nope_head_dim and qk_rope_head_dim")
        if self.kv_lora_rank and not self.v_head_dim:
            raise ValueError("MLA (kv_lora_rank) needs v_head_dim")
        if self.sliding_layers and not self.sliding_window:
            raise ValueError("sliding_layers need sliding_window")
        if self.index_topk and not (self.is_mla and self.q_lora_rank):
            # the indexer's query is projected from MLA's query latent (wq_b of q_lora_rank)
            raise ValueError("sparse attention (index_topk) needs MLA with q_lora_rank")
        if self.index_topk and not (self.index_n_heads and self.index_head_dim):
            raise ValueError("sparse attention (index_topk) needs index_n_heads and index_head_dim")
        if self.index_topk and self.sliding_layers:
            raise ValueError("sparse attention (index_topk) with sliding_layers is not modelled")
        return self

    # -- what kind of model ----------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_plain(self) -> bool:
        """A Llama-style dense decoder with full attention in every layer (the cost model's
        original path, kept bit for bit)."""
        return not (
            self.num_experts or self.kv_lora_rank or self.sliding_layers or self.linear_layers
        )

    @property
    def is_sparse(self) -> bool:
        """DeepSeek Sparse Attention: MLA over the ``index_topk`` tokens an indexer picks."""
        return self.index_topk > 0

    @property
    def attention_kind(self) -> str:
        if self.is_sparse:
            return f"MLA, sparse top-{self.index_topk}"
        if self.is_mla:
            return "MLA"
        kind = "MHA" if self.num_key_value_heads == self.num_attention_heads else "GQA"
        if self.sliding_layers:
            kind += f", window {self.sliding_window} on {len(self.sliding_layers)} layers"
        if self.linear_layers:
            kind += f", Gated DeltaNet on {len(self.linear_layers)} layers"
        return kind

    def moe_layers_in(self, layers: int | None = None) -> int:
        """MoE layers among the first ``layers`` (default: all)."""
        n = self.num_hidden_layers if layers is None else layers
        return sum(1 for i in self.moe_layers if i < n)

    def sliding_layers_in(self, layers: int | None = None) -> int:
        n = self.num_hidden_layers if layers is None else layers
        return sum(1 for i in self.sliding_layers if i < n)

    def linear_layers_in(self, layers: int | None = None) -> int:
        """Gated DeltaNet layers among the first ``layers`` (default: all)."""
        n = self.num_hidden_layers if layers is None else layers
        return sum(1 for i in self.linear_layers if i < n)

    # -- widths ----------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        if self.is_mla:
            return self.num_attention_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.num_attention_heads * self.head_dim

    @property
    def q_proj_dim(self) -> int:
        """The q projection's width: q, and with an output gate the gate beside it (vLLM
        qwen3_next.py Qwen3NextAttention: ``total_num_heads * (1 + attn_output_gate)``)."""
        return self.q_dim * (2 if self.attn_output_gate else 1)

    @property
    def kv_dim(self) -> int:
        """K (or V) width per token and layer; MLA: the one latent (kv_lora_rank +
        qk_rope_head_dim) all heads share."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return self.num_key_value_heads * self.head_dim

    # -- parameters ------------------------------------------------------------------------
    @property
    def attention_params(self) -> int:
        """One layer's attention weights. MLA (vLLM deepseek_v2.py DeepseekV2MLAAttention):
        q_a (h x q_lora) and q_b (q_lora x heads*(nope+rope)), or one q_proj; kv_a (h x
        (kv_lora+rope)); kv_b (kv_lora x heads*(nope+v)); o (heads*v x h)."""
        h = self.hidden_size
        if not self.is_mla:
            return h * (self.q_proj_dim + 2 * self.kv_dim) + self.q_dim * h
        heads, q_head = self.num_attention_heads, self.qk_nope_head_dim + self.qk_rope_head_dim
        q = (
            h * self.q_lora_rank + self.q_lora_rank * heads * q_head
            if self.q_lora_rank
            else h * heads * q_head
        )
        kv = h * self.kv_dim + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv + heads * self.v_head_dim * h + self.indexer_params

    @property
    def indexer_params(self) -> int:
        """One layer's lightning-indexer weights (0 without sparse attention): wq_b (q_lora x
        index heads*dim) on MLA's query latent, wk (h x index_head_dim) and weights_proj (h x
        index heads) (DeepSeek-V3.2-Exp inference/model.py ``Indexer``, at 6d8cb70; its
        LayerNorm's 2 x index_head_dim left out like every norm). DeepSeek-V3.2: 13.96M a
        layer, 0.85B over 61 layers."""
        if not self.is_sparse:
            return 0
        n, d = self.index_n_heads, self.index_head_dim
        return self.q_lora_rank * n * d + self.hidden_size * (d + n)

    @property
    def replicated_attention_params(self) -> int:
        """Attention weights every tensor-parallel rank holds whole: MLA's down projections
        (vLLM builds q_a/kv_a as one replicated fused_qkv_a_proj) and the indexer, which vLLM
        and SGLang replicate ("no tensor parallel, just replicated": vLLM
        model_executor/models/deepseek_v2.py ``Indexer`` at 002d607; ReplicatedLinear in
        SGLang layers/attention/nsa/nsa_indexer.py)."""
        if not self.is_mla:
            return 0
        return self.hidden_size * (self.q_lora_rank + self.kv_dim) + self.indexer_params

    def kv_copy_params(self, attn_tp: int) -> float:
        """K and V projection weights one GPU holds beyond its 1/attn_tp share, where there
        are fewer KV heads than GPUs and each GPU keeps a whole head (vLLM QKVParallelLinear:
        ``num_kv_head_replicas = tp_size // total_num_kv_heads``); 0 for MLA and where the
        heads split."""
        if self.is_mla or attn_tp <= self.num_key_value_heads:
            return 0.0
        return 2 * self.hidden_size * (self.kv_dim_per_gpu(attn_tp) - self.kv_dim / attn_tp)

    def local_experts(self, ep: int) -> int:
        """Routed experts a layer's fullest GPU holds, whole, over ``ep`` GPUs: vLLM gives the
        first ``num_experts % ep`` ranks one more (FusedMoE determine_expert_map)."""
        return -(-self.num_experts // ep)

    def routed_bytes_per_gpu(self, tp: int, ep: int, per_weight: float) -> float:
        """Routed-expert weight bytes on one GPU, at ``per_weight`` bytes a weight: whole
        experts over ``ep`` GPUs (an uneven split: the fullest GPU's, which sizes the KV
        cache), or every expert sliced over ``tp`` (ep 1)."""
        moe = self.moe_layers_in()
        if ep > 1 and self.num_experts % ep:
            return moe * self.local_experts(ep) * self.expert_params * per_weight
        return moe * self.num_experts * self.expert_params * per_weight / (ep if ep > 1 else tp)

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size  # gate, up, down

    @property
    def expert_params(self) -> int:
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def shared_expert_params(self) -> int:
        return 3 * self.hidden_size * self.shared_expert_intermediate_size

    @property
    def router_params(self) -> int:
        return self.hidden_size * self.num_experts

    @property
    def layer_params(self) -> int:
        """Weights of one dense decoder layer: QKV, O, gate+up, down (norm weights are
        negligible)."""
        h, i = self.hidden_size, self.intermediate_size
        if self.is_mla:
            return self.attention_params + 3 * h * i
        return h * (self.q_proj_dim + 2 * self.kv_dim) + self.q_dim * h + 3 * h * i

    @property
    def moe_layer_params(self) -> int:
        """Weights of one MoE layer: attention, every expert, the shared MLP, the router."""
        return (
            self.attention_params
            + self.num_experts * self.expert_params
            + self.shared_expert_params
            + self.router_params
        )

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def linear_conv_dim(self) -> int:
        """Channels of the causal conv1d: q, k and v (vLLM gated_delta_net_state_shape:
        ``head_k_dim * num_k_heads * 2 + head_v_dim * num_v_heads``)."""
        return 2 * self.linear_key_dim + self.linear_value_dim

    @property
    def linear_attention_params(self) -> int:
        """One Gated DeltaNet layer's weights (vLLM qwen_gdn_linear_attn.py): in_proj_qkvz
        (h x (2 key_dim + 2 value_dim): q, k, v and the output gate z), in_proj_ba (h x 2
        value heads: the write strength beta and the decay a), the conv1d (conv_dim x taps),
        out_proj (value_dim x h); A_log, dt_bias and the gated norm's weight are per head or per
        value channel (counted: a few thousand)."""
        h, kd, vd = self.hidden_size, self.linear_key_dim, self.linear_value_dim
        heads = self.linear_num_value_heads
        return (
            h * (2 * kd + 2 * vd)
            + h * 2 * heads
            + self.linear_conv_dim * self.linear_conv_kernel_dim
            + vd * h
            + 2 * heads
            + self.linear_value_head_dim
        )

    @property
    def _linear_mixer_excess(self) -> int:
        """What the Gated DeltaNet layers weigh beyond the attention the per-layer counts
        assume for every layer (0 without them)."""
        n = len(self.linear_layers)
        return n * (self.linear_attention_params - self.attention_params) if n else 0

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        """Every weight (the MTP modules excluded, as model cards count)."""
        head = 0 if self.tie_word_embeddings else self.embedding_params
        mixers = self._linear_mixer_excess
        if not self.is_moe:
            return (
                self.num_hidden_layers * self.layer_params + self.embedding_params + head + mixers
            )
        moe = self.moe_layers_in()
        dense = self.num_hidden_layers - moe
        return (
            dense * self.layer_params
            + moe * self.moe_layer_params
            + self.embedding_params
            + head
            + mixers
        )

    @property
    def active_params(self) -> int:
        """Weights one token uses: attention, dense MLPs, the shared MLP, the router and
        ``num_experts_per_tok`` experts per MoE layer, with the embedding table and LM head
        counted whole (DeepSeek-V3 README_WEIGHTS.md "36.7B (including 0.9B for Embedding
        and 0.9B for the output Head)"; Mistral's 12.9B for Mixtral counts them too; OpenAI's
        5.1B for gpt-oss-120b leaves out the embedding)."""
        if not self.is_moe:
            return self.num_params
        head = 0 if self.tie_word_embeddings else self.embedding_params
        moe = self.moe_layers_in()
        routed = (
            self.attention_params
            + self.num_experts_per_tok * self.expert_params
            + self.shared_expert_params
            + self.router_params
        )
        dense = self.num_hidden_layers - moe
        return (
            dense * self.layer_params
            + moe * routed
            + self.embedding_params
            + head
            + self._linear_mixer_excess
        )

    def weight_bytes_per_gpu(
        self,
        tp: int = 1,
        ep: int = 1,
        weight_bytes: float | None = None,
        expert_bytes: float | None = None,
        embeddings: bool = True,
    ) -> float:
        """Weight bytes one GPU holds with tensor parallelism ``tp`` and the experts split
        whole over ``ep`` GPUs (vLLM's expert parallelism) or sliced over ``tp`` (ep 1).
        Linear layers at ``weight_bytes`` and routed experts at ``expert_bytes`` per weight
        (default: the checkpoint's own dtypes); routers, embeddings and LM head in bf16; MLA's
        down projections whole on every rank."""
        linear = self.stored_bytes(self.weight_dtype) if weight_bytes is None else weight_bytes
        experts = (
            self.stored_bytes(self.expert_weight_dtype or self.weight_dtype)
            if expert_bytes is None
            else expert_bytes
        )
        bf16 = BYTES_PER_PARAM
        moe = self.moe_layers_in()
        dense = self.num_hidden_layers - moe
        shared = self.attention_params - self.replicated_attention_params
        per_tp = (
            self.num_hidden_layers * shared
            + self._linear_mixer_excess
            + dense * self.dense_mlp_params
            + moe * self.shared_expert_params
        ) * linear
        head = 0 if self.tie_word_embeddings else self.embedding_params
        if embeddings:
            per_tp += self.embedding_params * bf16 + head * self.lm_head_bytes(linear)
        whole = self.num_hidden_layers * self.replicated_attention_params * linear
        whole += moe * self.router_params * bf16
        whole += self.attention_layer_count * self.kv_copy_params(tp) * linear
        return per_tp / tp + whole + self.routed_bytes_per_gpu(tp, ep, experts)

    def lm_head_bytes(self, linear: float) -> float:
        """Bytes a weight of the LM head takes: the linear layers' ``linear`` where the
        checkpoint quantises it with them (and its weights are the checkpoint's own, not a
        --precision that re-states them), else bf16 (vLLM leaves it unquantised)."""
        own = self.stored_bytes(self.weight_dtype)
        return linear if self.lm_head_quantized and linear == own else BYTES_PER_PARAM

    @property
    def attention_layer_count(self) -> int:
        """Layers with K and V heads: all but the Gated DeltaNet ones (QA: Qwen3-Next's
        copied KV heads were counted in its 36 linear-attention layers too)."""
        return self.num_hidden_layers - len(self.linear_layers)

    # -- KV cache --------------------------------------------------------------------------
    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for every layer, before tensor-parallel sharding (MLA: the latent; with
        sparse attention also the indexer's keys)."""
        per_layer = self.kv_dim if self.is_mla else 2 * self.kv_dim
        n = self.attention_layer_count
        return n * per_layer * BYTES_PER_PARAM + n * self.indexer_cache_bytes_per_token

    @property
    def indexer_cache_bytes_per_token(self) -> int:
        """Bytes one layer's indexer caches per token (0 without sparse attention): its one
        key of index_head_dim in FP8 plus a float32 scale per 128 values, whatever the KV
        cache's dtype, on every tensor-parallel rank (vLLM deepseek_v2.py ``Indexer`` at
        002d607: ``DeepseekV32IndexerCache(head_dim=head_dim + head_dim // 128 * 4,
        dtype=torch.uint8)``, one head; DeepSeek-V3.2: 132 bytes)."""
        if not self.is_sparse:
            return 0
        return self.index_head_dim + 4 * -(-self.index_head_dim // 128)

    def kv_dim_per_gpu(self, tp: int) -> int:
        """KV width on one GPU: heads split over tp, replicated when there are fewer than tp.
        MLA's latent is one "head" every rank caches whole (vLLM MLACommonBackend
        get_kv_cache_shape: num_kv_heads "assumed to be 1 for MLA", head_size 576 for
        DeepSeek-V3; vllm/v1/attention/backends/mla/common.py at 00a817a)."""
        if self.is_mla:
            return self.kv_dim
        return max(self.num_key_value_heads // tp, 1) * self.head_dim

    def stored_bytes(self, dtype: str) -> float:
        """Bytes a stored weight of ``dtype`` takes in this checkpoint: the precision's own,
        int4's with this checkpoint's group of one 16-bit scale (4 + 16/group bits)."""
        if dtype == "int4-w" and self.int4_group_size != INT4_GROUP:
            return 0.5 + 2.0 / self.int4_group_size
        return bytes_per_weight(dtype)

    def attention_tp_refusal(self, attn_tp: int) -> str | None:
        """Why attention cannot be split over ``attn_tp`` GPUs (None: it can). vLLM refuses a
        tensor-parallel size that does not divide the attention heads
        (ModelConfig.verify_with_parallel_config: "Total number of attention heads (...) must
        be divisible by tensor parallel size"), and QKVParallelLinear splits the KV heads
        evenly or replicates them evenly (``divide`` either way); SGLang's attention layers
        assert the same. MLA's latent is not split by head."""
        heads, kv = self.num_attention_heads, self.num_key_value_heads
        if heads % attn_tp:
            return f"{self.id} has {heads} attention heads, which {attn_tp} GPUs cannot split"
        if self.kv_lora_rank == 0 and (kv % attn_tp if attn_tp <= kv else attn_tp % kv):
            return (
                f"{self.id} has {kv} KV heads, which {attn_tp} GPUs can neither split nor "
                "replicate evenly"
            )
        return None

    def largest_attention_tp(self, most: int) -> int:
        """The largest power-of-two tensor-parallel size up to ``most`` that its attention
        heads split over (:meth:`attention_tp_refusal`)."""
        n = 1
        while n * 2 <= most and not self.attention_tp_refusal(n * 2):
            n *= 2
        return n

    def kv_bytes_per_token_per_gpu(
        self, tp: int, layers: int | None = None, dtype_bytes: float = BYTES_PER_PARAM
    ) -> float:
        """K and V of ``layers`` (default: all) full-attention layers for one token on one GPU
        (MLA: the latent, plus the sparse-attention indexer's key); sliding-window layers hold a
        window per sequence instead (:meth:`window_kv_bytes_per_token_per_gpu`)."""
        n = self.num_hidden_layers if layers is None else layers
        n -= self.sliding_layers_in(n) + self.linear_layers_in(n)
        per_layer = self.kv_dim_per_gpu(tp) * (1 if self.is_mla else 2)
        if self.is_sparse:
            latent = per_layer * dtype_bytes
            if dtype_bytes == 1:
                # sparse MLA's FP8 cache is DeepSeek's fp8_ds_mla row: the latent in fp8, one
                # fp32 scale per 128 of it, the rope part kept bf16 (512 + 16 + 128 = 656 B for
                # V3.2). vLLM turns any fp8 KV of these models into it
                # (DeepseekV32ForCausalLM.verify_and_update_config: cache_dtype "fp8_ds_mla";
                # page_size_bytes == block_size * 656 in its tests). Other engines are assumed
                # to store the same row, the one FlashMLA's sparse FP8 kernels read (SGLang's
                # flashmla_kv NSA backend, its FP8 default on Hopper). Not modelled: SGLang's
                # trtllm NSA backend, its default with FP8 on Blackwell, keeps the plain 576 B
                # row (ModelRunner.calculate_mla_kv_cache_dim, 0.5.10), 12 % smaller. QA:
                # priced as plain fp8
                latent = (
                    self.kv_lora_rank
                    + 4 * self.kv_lora_rank / 128
                    + BYTES_PER_PARAM * self.qk_rope_head_dim
                )
            return n * latent + n * self.indexer_cache_bytes_per_token
        return n * per_layer * dtype_bytes

    def window_kv_bytes_per_token_per_gpu(
        self, tp: int, dtype_bytes: float = BYTES_PER_PARAM
    ) -> float:
        """K and V of the sliding-window layers for one token on one GPU; a sequence holds
        them for its last ``sliding_window`` tokens only (vLLM's hybrid KV cache manager frees
        blocks that leave the window), which the memory plan bounds."""
        per_layer = self.kv_dim_per_gpu(tp) * (1 if self.is_mla else 2)
        return len(self.sliding_layers) * per_layer * dtype_bytes

    # -- Gated DeltaNet state ---------------------------------------------------------------
    def linear_state_bytes_per_gpu(
        self, tp: int, ssm_bytes: float, conv_bytes: float = BYTES_PER_PARAM
    ) -> tuple[float, float]:
        """(SSM state, conv state) bytes of one sequence's recurrent state over all Gated
        DeltaNet layers on one GPU, whatever its context: per layer a state of value heads/tp x
        value head x key head (vLLM mamba_utils.py gated_delta_net_state_shape: temporal
        ``(num_v_heads // tp, head_v_dim, head_k_dim)``) and the conv1d's last taps - 1 inputs
        of its conv_dim/tp channels; (0, 0) without such layers."""
        n = len(self.linear_layers)
        if not n:
            return 0.0, 0.0
        heads = max(self.linear_num_value_heads // tp, 1)
        ssm = heads * self.linear_value_head_dim * self.linear_key_head_dim * ssm_bytes
        conv = self.linear_conv_dim / tp * (self.linear_conv_kernel_dim - 1) * conv_bytes
        return n * ssm, n * conv

    # -- one layer of the model's kind (draft heads) ---------------------------------------
    def one_layer(self, moe: bool, vocab_size: int, name: str) -> ModelShape:
        """A one-layer model of this model's widths and attention: a MoE layer when ``moe``
        (an MTP module of a MoE model), else a dense one (an EAGLE head); full attention."""
        return self.model_copy(
            update={
                "id": name,
                "num_hidden_layers": 1,
                "vocab_size": vocab_size,
                "moe_layers": (0,) if moe and self.is_moe else (),
                "num_experts": self.num_experts if moe else 0,
                "sliding_layers": (),
                "linear_layers": (),
                # a Llama layer (EAGLE) has no output gate; the target's own layer (MTP) keeps it
                "attn_output_gate": self.attn_output_gate and moe,
                "num_nextn_predict_layers": 0,
            }
        )


def model_ids() -> list[str]:
    return sorted(packaged_table("models.yaml"))


def preset_id(ref: str) -> str:
    """The preset a Hugging Face repo id names (``meta-llama/Llama-3.1-8B-Instruct`` ->
    ``llama-3.1-8b``; case ignored, as the Hub ignores it), else ``ref`` unchanged: the names
    users already type reach the preset and its acceptance presets."""
    wanted = ref.strip().lower()
    for name, entry in packaged_table("models.yaml").items():
        if any(wanted == hf.lower() for hf in entry.get("hf_ids") or ()):
            return snapshot_config(ref) if _is_file(ref) else name  # a file by that name
    return snapshot_config(ref)


def id_precision(ref: str) -> str | None:
    """The weights a Hugging Face id of a preset names beyond the preset's own: "fp8" for a
    preset's ``-FP8`` checkpoint id (zai-org/GLM-4.5-FP8: the preset's shape, stored in
    block FP8), else None (QA: such an id had run in the preset's bf16, twice the weights)."""
    wanted = ref.strip().lower()
    for entry in packaged_table("models.yaml").values():
        ids = [hf.lower() for hf in entry.get("hf_ids") or ()]
        if wanted in ids and wanted.endswith("-fp8"):
            return "fp8"
    return None


def snapshot_config(ref: str) -> str:
    """A Hugging Face snapshot folder (what vLLM's --model takes) as the ``config.json`` in it,
    else ``ref`` unchanged: a scenario then names the file it reads, so a run's key follows
    the file's content (:mod:`simspec.studies.runs.keys`). A folder without one is left for
    :func:`load_model` to refuse by name."""
    config = os.path.join(ref, "config.json")
    # os.path: a too-long name, or one with a NUL, is no error but False
    return config if os.path.isdir(ref) and os.path.isfile(config) else ref


def _is_file(ref: str) -> bool:
    try:
        return Path(ref).exists()
    except (OSError, ValueError):
        return False


def load_model(ref: str, field: str = "model") -> ModelShape:
    """A preset id (e.g. ``llama-3.1-8b``), a Hugging Face repo id of a preset, or a path to a
    Hugging Face ``config.json``."""
    table = packaged_table("models.yaml")
    ref = preset_id(ref)
    if ref in table:
        return _preset(ref)
    path = Path(ref)
    if os.path.isdir(ref):  # a folder with a config.json reads as it (preset_id)
        raise InputError(field, _no_config_json(ref))
    if path.suffix == ".json" or os.path.exists(ref):  # os.path: a too-long name is no error
        return load_hf_config(path, field)
    # the flag that takes the path (QA: a draft's refusal advised --model, the target's)
    flag = "--draft-model" if "draft" in field else "--model"
    where = f"{flag} DIR/config.json"
    if flag == "--draft-model":
        where += ', or that path as a --speculative-config\'s "model"'
    if ref.count("/") == 1 and not ref.startswith(("/", ".")):
        tuned = _tuned_preset(ref, table)
        if tuned is not None:  # QA: the base of a preset's repo was refused without a word
            preset, hf = tuned
            raise InputError(
                field,
                f"{ref!r} is the base model of preset {preset} ({hf}): presets are the tuned "
                f"models whose acceptance they carry; give {flag} "
                f"{preset} for it, or the base's config.json by path (huggingface-cli "
                f"download {ref} config.json --local-dir DIR; {where})",
            )
        raise InputError(
            field,
            f"{ref!r} is not a packaged preset and simspec does not download models: fetch its "
            f"config.json (huggingface-cli download {ref} config.json --local-dir DIR) and give "
            f"its path ({where}); presets: " + ", ".join(sorted(table)),
        )
    raise InputError(
        field,
        f"unknown model {ref!r}; choose a preset ({', '.join(sorted(table))}), a Hugging Face "
        "id of one, or give a path to a Hugging Face config.json",
    )


def _tuned_preset(ref: str, table: dict) -> tuple[str, str] | None:
    """The preset whose Hugging Face repo is ``ref``'s instruct or chat version (the same
    name with an -Instruct / -chat-hf suffix, without regard to case), and that repo."""
    base = ref.lower()
    tuned = {base + "-instruct", base + "-chat"}
    if base.endswith("-hf"):  # Llama 2's repos: Llama-2-7b-hf and Llama-2-7b-chat-hf
        tuned.add(base.removesuffix("-hf") + "-chat-hf")
    for preset, entry in table.items():
        for hf in entry.get("hf_ids") or ():
            if str(hf).lower() in tuned:
                return preset, str(hf)
    return None


def _no_config_json(folder: str) -> str:
    """Why a folder given as a model is refused, and the folder that would do (a Hub cache's
    repo folder holds its snapshots one level down, under snapshots/REVISION)."""
    text = (
        f"folder {shown(folder)} has no config.json: --model DIR reads DIR/config.json (a "
        "Hugging Face snapshot folder, as vLLM takes it)"
    )
    snapshots = os.path.join(folder, "snapshots")
    if os.path.isdir(snapshots):
        text += f"; this looks like a Hub cache folder: give {shown(snapshots + '/REVISION')}"
    return text


@cache
def _preset(name: str) -> ModelShape:
    """A packaged preset, written with its config.json's keys and read as one."""
    entry = packaged_table("models.yaml")[name]
    return ModelShape(
        id=name,
        hf_ids=tuple(entry.get("hf_ids") or ()),
        source=entry.get("source", ""),
        **read_config(entry),
    )


def load_hf_config(path: Path, field: str = "model") -> ModelShape:
    """Read the shapes of a model from its Hugging Face ``config.json``, by its architecture
    (:func:`simspec.catalog.hf_config.read_config`); an error names ``field`` (``draft_model``
    for a draft's config) and the key."""
    try:
        return _read_hf_config(path)
    except InputError as exc:
        if field == "model":
            raise
        raise InputError(field + exc.field.removeprefix("model"), exc.message) from None


def _folder_name(path: Path) -> str:
    """A config.json's model name from where it lies: its folder's, or, in a Hub cache
    (``models--ORG--NAME/snapshots/REVISION/config.json``), ``ORG/NAME`` rather than the
    revision's hash; a file not called config.json, its own name."""
    folder = path.parent
    repo = folder.parent.parent.name
    if folder.parent.name == "snapshots" and repo.startswith("models--"):
        return repo.removeprefix("models--").replace("--", "/")
    if path.name != "config.json":  # a renamed copy names itself (QA: mistral.json and
        return path.stem  # qmoe.json in one folder were both the folder's name)
    return folder.name or path.stem


def _read_hf_config(path: Path) -> ModelShape:
    raw = parse_json(read_input_text(path, "model", MAX_HF_CONFIG_BYTES), "model", shown(path))
    if not isinstance(raw, dict):
        raise InputError("model", f"{str(path)!r} must hold a JSON object")
    raw = normalised(raw)
    needed = ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"]
    # a MoE config may leave the dense width out when no layer is dense (Qwen3.5's MoE
    # configs: Qwen3_5MoeTextConfig has no intermediate_size), checked once its layers are read
    if raw.get("moe_intermediate_size") is None:
        needed.insert(1, "intermediate_size")
    missing = [k for k in needed if raw.get(k) is None]
    if missing:
        raise InputError("model", f"{str(path)!r} lacks {', '.join(missing)}")
    name = raw.get("_name_or_path")
    if not isinstance(name, str) or not name.strip():
        name = _folder_name(Path(path))
    fields = read_config(raw)
    source = f"Hugging Face config.json at {path}"
    if fields.get("intermediate_size") is None:
        layers, moe = fields.get("num_hidden_layers", 0), fields.get("moe_layers", ())
        if len(moe) < layers:
            raise InputError(
                "model.intermediate_size",
                f"missing: {layers - len(moe)} of its {layers} layers are dense, and their MLP "
                "width is this key",
            )
        # no dense layer reads it; an EAGLE head, a dense layer of the target's widths, gets
        # the active MoE width a token passes through
        active = fields["moe_intermediate_size"] * fields.get("num_experts_per_tok", 1)
        fields["intermediate_size"] = active
        source += (
            f" (no intermediate_size, every layer MoE: a dense head's MLP taken as the active "
            f"width, {active})"
        )
    try:
        return ModelShape(id=name, source=source, **fields)
    except ValidationError as exc:
        field, message = first_error(exc)
        raise InputError(f"model.{field}", message) from None
