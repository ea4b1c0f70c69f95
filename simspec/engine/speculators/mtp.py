"""The model's own multi-token-prediction modules reused as the draft (DeepSeek-V3 MTP)."""

from __future__ import annotations

from simspec.catalog.models import BYTES_PER_PARAM
from simspec.config import MethodConfig
from simspec.engine.speculators.eagle import EagleHead
from simspec.errors import InputError


class MTP(EagleHead):
    """Multi-token prediction: each module is one decoder block of the model's own kind fed
    [RMSNorm(embedding); RMSNorm(hidden)] through a 2h -> h projection (``eh_proj``), then the
    shared output head (DeepSeek-V3 report §2.2; README_WEIGHTS.md: the module's embedding and
    head share the main model's). As vLLM runs it (vllm/model_executor/models/deepseek_mtp.py
    at 03356f8: DeepSeekMultiTokenPredictorLayer = enorm, hnorm, eh_proj, a DeepseekV2DecoderLayer
    at index num_hidden_layers, SharedHead) and SGLang's NextN (the same module run by its EAGLE
    worker with topk 1), K draft steps chain one module pass each, step k reusing module
    ``k % num_nextn_predict_layers``: the first over every token the last verify accepted,
    the rest over one token per sequence, each with its LM head.

    The block is the target's layer type: for DeepSeek-V3/R1 an MLA attention and a full MoE
    layer (256 routed experts + 1 shared; the MTP layer's index is past first_k_dense_replace),
    so a draft step reads the experts its tokens touch like a target layer. A model that
    declares no MTP layers (num_nextn_predict_layers 0) is refused by the front ends
    (``simspec sweep --methods mtp``, the explorer); the engine then costs a hypothetical
    one-module head of the model's dense layer shape.
    """

    name = "mtp"

    @property
    def moe_head(self) -> bool:
        return self.target.is_moe and self.target.num_nextn_predict_layers > 0

    def _configure(self, cfg: MethodConfig) -> None:
        modules = self.target.num_nextn_predict_layers
        past = cfg.k > modules > 1 and cfg.k % modules
        if past and self.engine.flag("mtp_k_multiple_of_layers"):
            raise InputError(
                f"methods.{self.name}.k",
                f"engine {self.engine.id} takes a K past {self.target.id}'s {modules} MTP "
                f'layers only as a multiple of them (vLLM: "num_speculative_tokens:{cfg.k} '
                f'must be divisible by n_predict={modules}"): give K of at most {modules}, or '
                f"{2 * modules}, {3 * modules}, ...",
            )
        super()._configure(cfg)
        precision = self.cost.precision
        bf16 = precision is not None and precision.mtp_unquantized
        if self.target.num_nextn_predict_layers and not bf16:
            # the checkpoint's modules: its precision, unless its checkpoints leave them in
            # bf16 (precision.yaml mtp_unquantized: NVFP4; QA: priced at NVFP4)
            self.cost.quantize_like_target(self.head)

    def extra_weight_bytes(self) -> float:
        """The modules' decoder blocks and eh_proj per GPU (embedding and LM head shared with
        the target, vLLM load_eagle_model sharing them when the draft owns none; a draft on
        GPUs of its own holds its own)."""
        modules = self.target.num_nextn_predict_layers
        if not modules:
            return super().extra_weight_bytes()
        h, cost = self.target.hidden_size, self.cost
        layers, experts = cost.precision_of(self.head), cost.experts_precision_of(self.head)
        block = cost.layout.weight_bytes_per_gpu(
            self.head,
            layers.weight_bytes if layers else BYTES_PER_PARAM,
            experts.weight_bytes if experts else BYTES_PER_PARAM,
            embeddings=False,
        )
        own = self.fused_features * h * h
        if self.apart:  # on its own GPUs (draft_tp): its own embedding and LM head, as V0's
            own += 2 * self.target.vocab_size * h  # DeepSeekMultiTokenPredictorLayer loads
        return modules * (block + self._params_bytes(own))

    def extra_kv_bytes_per_token(self) -> float:
        modules = max(self.target.num_nextn_predict_layers, 1)  # each module caches its own KV
        if self.engine.flag("mtp_kv_layer_per_draft"):  # TRT-LLM: a layer per drafted token
            modules = max(modules, self.k)
        return modules * self.head.kv_bytes_per_token_per_gpu(
            self.cost.layout.attn_tp, layers=1, dtype_bytes=self.cost.kv_bytes
        )
