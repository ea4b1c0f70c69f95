"""How a deployment's GPUs divide a model: tensor parallelism over all ``tp`` GPUs, the routed
experts whole over ``ep`` GPUs (or sliced over tp), and data-parallel attention: ``dp``
attention ranks of ``tp/dp`` GPUs each, every rank running attention (its projections, kernel
and KV cache) on its own requests.

Under DP attention the rest of a layer follows the engine (``EngineProfile.dp_attention``):

- ``sglang`` (``--tp N --dp D --enable-dp-attention``; python/sglang/srt/models/deepseek_v2.py
  at 00114ae): the embedding is replicated (``VocabParallelEmbedding(enable_tp=not
  enable_dp_attention)``); a dense layer's MLP runs over all tp GPUs on every rank's tokens,
  gathered before it and scattered after (``DeepseekV2MLP`` at the full tp unless
  ``--moe-dense-tp-size 1``; ``LayerCommunicator.prepare_mlp`` / ``postprocess_layer``); so does
  the LM head (``ParallelLMHead(use_attn_tp_group=enable_dp_lm_head)``, off by default). A MoE
  layer under DeepEP (ep = tp) keeps each GPU's tokens where they are, its shared expert whole
  on every GPU (``DeepseekV2MoE``: ``tp_size=1`` under ``enable_deepep_moe``) and the routed
  tokens sent by dispatch/combine; without it the layer is gathered and sliced like a dense one.
- ``vllm`` (``--data-parallel-size D --tensor-parallel-size N/D``): every DP rank is a replica
  of the model over its tp/dp GPUs but for the routed experts, which span all N GPUs
  (vllm/model_executor/layers/fused_moe/config.py ``FusedMoEParallelConfig.make``: EP over
  dp x tp, or the experts sliced over dp x tp without it, the naive all2all gathering every
  rank's tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

from simspec.catalog.models import BYTES_PER_PARAM, ModelShape

# engines whose FP8 loaders refuse a GPU a slice of partial scale blocks
# (ParallelLayout.block_refusal cites both)
BLOCK_CHECKED_ENGINES = ("vllm", "sglang")


@dataclass(frozen=True, slots=True)
class ParallelLayout:
    """One replica's GPUs: ``tp`` in all, experts over ``ep`` (1: sliced over tp), ``dp``
    attention ranks, laid out as the engine ``style`` does (EngineProfile.dp_attention)."""

    tp: int = 1
    ep: int = 1
    dp: int = 1
    style: str = ""

    @property
    def attn_tp(self) -> int:
        """GPUs one attention rank spans (SGLang's attention tp size, tp / dp)."""
        return self.tp // self.dp

    @property
    def gathered(self) -> bool:
        """Dense MLPs and the LM head run over all tp GPUs on every rank's tokens (SGLang)."""
        return self.dp > 1 and self.style == "sglang"

    @property
    def dense_tp(self) -> int:
        """GPUs a dense MLP (and the LM head) is sliced over."""
        return self.tp if self.dp == 1 or self.gathered else self.attn_tp

    @property
    def shared_tp(self) -> int:
        """GPUs a MoE layer's shared expert is sliced over: SGLang under DeepEP (ep = tp,
        with or without DP attention) holds it whole on every GPU, each GPU running its own
        share of the tokens (``LayerScatterModes._compute_mlp_mode``: a sparse layer is
        ``SCATTERED`` whenever an all-to-all backend runs); gathered without EP, sliced over
        tp; vLLM per rank."""
        if self.style == "sglang" and self.ep > 1:
            return 1
        if self.dp == 1:
            return self.tp
        if self.gathered:
            return self.tp
        return self.attn_tp

    @property
    def embed_tp(self) -> int:
        """GPUs the embedding table is sliced over (SGLang replicates it under DP attention)."""
        if self.dp == 1:
            return self.tp
        return 1 if self.gathered else self.attn_tp

    def block_refusal(self, model: ModelShape) -> str | None:
        """Why a block-scaled FP8 checkpoint cannot be split this way (None: it can). Each
        GPU's slice of an MLP's intermediate width must hold whole 128 x 128 scale blocks, as
        the output of gate/up and the input of down: vLLM's Fp8MoEMethod.create_weights
        ("The output_size of gate's and up's weight = 192 is not divisible by weight
        quantization block_n = 128", vllm/model_executor/layers/quantization/fp8.py at
        v0.11.0; vllm-project/vllm#17569, Qwen3-235B-A22B-FP8 at tp=8) and
        validate_fp8_block_shape for dense layers (utils/fp8_utils.py); SGLang 0.5.10's
        Fp8MoEMethod.create_weights and validate_block_quant_shapes raise the same. Experts
        whole per GPU (ep > 1) are not sliced."""
        block = model.weight_block_size
        if block is None:
            return None
        parts: list[tuple[str, int, int]] = []
        if model.num_hidden_layers > model.moe_layers_in() and model.intermediate_size:
            parts.append(("dense MLP", model.intermediate_size, self.dense_tp))
        if model.is_moe and model.shared_expert_intermediate_size:
            parts.append(("shared expert", model.shared_expert_intermediate_size, self.shared_tp))
        if model.is_moe and self.ep == 1:
            parts.append(("routed experts", model.moe_intermediate_size, self.tp))
        for name, width, n in parts:
            if n > 1 and (width % n or (width // n) % block[0] or (width // n) % block[1]):
                return (
                    f"{model.id}'s {name} width {width} over {n} GPUs leaves "
                    f"{width / n:g} a GPU, not a multiple of its FP8 scale block "
                    f"{block[0]} x {block[1]}"
                )
        return None

    def weight_parts(
        self,
        model: ModelShape,
        weight_bytes: float | None = None,
        expert_bytes: float | None = None,
        embeddings: bool = True,
    ) -> dict[str, float]:
        """Weight bytes one GPU holds, by part (attention, dense MLPs, shared experts and
        routers, routed experts, embedding and LM head): linear layers at ``weight_bytes``,
        routed experts at ``expert_bytes`` per weight (None: the checkpoint's dtypes), routers,
        embedding and LM head in bf16 (the head at the layers' bytes where the checkpoint
        quantises it: ModelShape.lm_head_bytes), MLA's down projections whole on every GPU."""
        linear = model.stored_bytes(model.weight_dtype) if weight_bytes is None else weight_bytes
        experts = (
            model.stored_bytes(model.expert_weight_dtype or model.weight_dtype)
            if expert_bytes is None
            else expert_bytes
        )
        moe = model.moe_layers_in()
        dense = model.num_hidden_layers - moe
        whole = model.replicated_attention_params
        sliced = model.attention_params - whole
        parts = {
            # the Gated DeltaNet mixers' weight past an attention layer's, sliced as attention
            "attention": (
                model.num_hidden_layers * (sliced / self.attn_tp + whole)
                + model._linear_mixer_excess / self.attn_tp
                + model.attention_layer_count * model.kv_copy_params(self.attn_tp)
            )
            * linear,
            "dense MLPs": dense * model.dense_mlp_params / self.dense_tp * linear,
            "shared experts and routers": moe
            * (
                model.shared_expert_params / self.shared_tp * linear
                + model.router_params * BYTES_PER_PARAM
            ),
            "routed experts": model.routed_bytes_per_gpu(self.tp, self.ep, experts),
            "embedding and LM head": 0.0,
        }
        if embeddings:
            table = model.embedding_params * BYTES_PER_PARAM
            lm_head = model.embedding_params * model.lm_head_bytes(linear)
            head = 0.0 if model.tie_word_embeddings else lm_head / self.dense_tp
            parts["embedding and LM head"] = table / self.embed_tp + head
        return parts

    def weight_bytes_per_gpu(
        self,
        model: ModelShape,
        weight_bytes: float | None = None,
        expert_bytes: float | None = None,
        embeddings: bool = True,
    ) -> float:
        """The sum of :meth:`weight_parts`; without DP attention (and SGLang's whole shared
        expert) exactly the model's own
        :meth:`~simspec.catalog.models.ModelShape.weight_bytes_per_gpu`."""
        if self.dp == 1 and self.shared_tp == self.tp:
            return model.weight_bytes_per_gpu(
                self.tp, self.ep, weight_bytes, expert_bytes, embeddings
            )
        return sum(self.weight_parts(model, weight_bytes, expert_bytes, embeddings).values())
