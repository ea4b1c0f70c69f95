"""DeepSeek Sparse Attention (DeepSeek-V3.2): per layer, a lightning indexer scores every past
token for every query token, and MLA then attends over the ``index_topk`` tokens with the
highest scores (all of them while the context is shorter).

How the engines run it, per layer:

- **Indexer projections** (vLLM ``model_executor/models/deepseek_v2.py`` ``Indexer`` at
  002d607; SGLang ``layers/attention/nsa/nsa_indexer.py``): ``wq_b`` (q_lora_rank -> index
  heads x index_head_dim, at the checkpoint's FP8) on MLA's query latent, and ``wk`` with
  ``weights_proj`` fused into one bf16 GEMM (hidden -> index_head_dim + index heads). Both are
  replicated: every tensor-parallel rank runs them whole.
- **Indexer logits** (DeepGEMM ``fp8_mqa_logits`` for prefill, ``fp8_paged_mqa_logits`` for
  decode and verify; vLLM ``sparse_attn_indexer``, SGLang's NSA indexer): per (query token,
  visible past token) ``index_n_heads x index_head_dim`` FP8 multiply-adds, a ReLU and a
  weighted sum over the heads, into one float32 logit, from the indexer's keys (one FP8 key
  of index_head_dim plus a float32 scale per 128 values per token,
  :attr:`ModelShape.indexer_cache_bytes_per_token`). vLLM reads a sequence's keys once for
  all its query tokens (``model_executor/layers/sparse_attn_indexer.py`` at c30af86: decode
  and verify queries reshaped to ``[batch, next_n, heads, dim]`` for one
  ``fp8_paged_mqa_logits`` call); SGLang runs a verify step's tokens as one-token queries
  over their own contexts (``nsa_indexer.py`` at 9c570b0, ``_get_topk_paged``: "the next_n
  dim is 1 now", sequence lengths expanded per token for ``target_verify``), reading the keys
  once per query token.
- **Top-k** (vLLM ``top_k_per_row`` kernels; SGLang ``nsa/cuda/topk.cu``): reads each
  query's logits and writes ``min(context, index_topk)`` indices.
- **Sparse MLA** (FlashMLA's sparse kernels: ``flash_mla_with_kvcache`` with per-token
  indices for decode and verify, ``flash_mla_sparse_fwd`` for prefill; vLLM
  ``v1/attention/backends/mla/flashmla_sparse.py`` at 008a0c3, SGLang ``nsa_backend.py`` at
  46ee442): absorbed MLA of every query token over its own selected latents. The indices
  differ per query token, so each reads its own ``min(context, index_topk)`` latents; this
  is priced as the dense MLA decode kernel (the measured fit where one covers the GPU and
  engine) over a batch of one-token sequences with that context each.

Where it beats dense MLA: past ``index_topk`` tokens the MLA part stops growing, while the
indexer's part grows with the context at ~132 bytes a token a layer (DeepSeek-V3.2) against
the 576-element latent dense MLA reads. Below ``index_topk`` the MLA part is the dense one
and the indexer only adds to it; in a verify step of K+1 tokens per sequence, sparse MLA reads
up to K+1 selections where dense MLA reads the shared context once.

Approximations (named in the README and in a sweep's notes, :func:`sparse_attention_note`): a
batch is known by its sums, so a token's visible context is the batch's mean; the capped count
``min(pairs, tokens x index_topk)`` is exact when every context is on the same side of
``index_topk`` and an upper bound otherwise (as the windowed layers). The sparse kernel's
gathered reads are priced as the dense kernel's contiguous ones, and overlap among a verify
step's selections (which L2 may serve) is not credited. An FP8 latent is counted at 576 bytes
where vLLM's ``fp8_ds_mla`` layout stores 656 (four float32 scales and a bf16 RoPE part;
flashmla_sparse.py). The indexer's small elementwise kernels (k LayerNorm, RoPE, FP8
quantisation and cache insert), its logits buffer in activation memory and SGLang's running
of the indexer on a second stream are not priced.
"""

from __future__ import annotations

from simspec.catalog.kernel_tables import MlaDecodeFit
from simspec.catalog.models import ModelShape
from simspec.catalog.precision import PrecisionSpec
from simspec.engine.costmodel.attention import AttentionKernels
from simspec.engine.costmodel.roofline import OperatorTimes, roofline_time
from simspec.engine.costmodel.shapes import BatchShape, as_prefill, one_token_each
from simspec.errors import InputError

# the engines simspec prices sparse attention for, and whether each reads the indexer's keys
# once per query token (SGLang) rather than once per sequence (vLLM); vLLM V0 (releases before
# 0.8, early 2025: engines.yaml) predates DeepSeek-V3.2-Exp's day-0 support on V1 (its README)
SPARSE_ATTENTION_ENGINES = {"vllm": False, "sglang": True}
# the engines that run a prefill whose contexts are all within index_topk as dense MLA
# (SGLang's MHA_ONE_SHOT: SparseAttentionKernels.dense_prefill); vLLM runs every prefill sparse
DENSE_SHORT_PREFILL_ENGINES = frozenset({"sglang"})
# the GPUs FlashMLA's sparse kernels and DeepGEMM's MQA-logits kernels run on: vLLM's
# FlashMLASparseBackend.supports_compute_capability (major 9 or 10) and its model test's skip,
# "DeepseekV32 requires Hopper (9.0+) or Blackwell (10.0+) for FLASHMLA_SPARSE backend"
SPARSE_ATTENTION_ARCHS = ("hopper", "blackwell")
LOGIT_BYTES = 4  # float32 logits (DeepGEMM's MQA-logits output), written then read by top-k
INDEX_BYTES = 4  # int32 top-k indices


def sparse_attention_note(model: ModelShape) -> str | None:
    """What stays approximate in ``model``'s sparse attention (None: it has none), for a run's
    notes."""
    if not model.is_sparse:
        return None
    return (
        f"sparse attention priced from its work: the indexer over the whole context (FP8 at "
        f"the profile's attention fraction of peak), MLA over min(context, "
        f"{model.index_topk}) tokens per query token with the dense MLA kernel's fit; a "
        "batch's contexts taken at their mean (an upper bound where they straddle "
        f"{model.index_topk}); an FP8 latent counted at 576 of vLLM's 656 bytes; the "
        "indexer's elementwise kernels, its logits buffer and SGLang's overlap of the indexer "
        "on a second stream are not priced"
    )


def attention_kernels(
    ops: OperatorTimes,
    model: ModelShape,
    kv_bytes: float,
    mla_fit: MlaDecodeFit | None,
    precision: PrecisionSpec | None,
    engine: str = "vllm",
) -> AttentionKernels:
    """The attention kernels of ``model`` under ``engine`` (its id): sparse ones where the
    model has an indexer."""
    if model.is_sparse:
        return SparseAttentionKernels(ops, model, kv_bytes, mla_fit, precision, engine)
    return AttentionKernels(ops, model, kv_bytes, mla_fit)


def sparse_mla_batch(batch: BatchShape, topk: int) -> BatchShape:
    """The batch sparse MLA attends: every query token a one-token sequence over its
    ``min(context, topk)`` selected latents (its own top-k, the new token included). A token's
    context is the batch's mean, ``pairs / tokens``: exact when every context is on one side
    of ``topk``, an upper bound otherwise."""
    t = batch.num_tokens
    pairs = batch.sum_q_kv + (batch.sum_q_sq + t) / 2.0
    selected = min(pairs, float(t) * topk)
    return BatchShape(t, t, float(t), selected - t, selected - t, 0)


class SparseAttentionKernels(AttentionKernels):
    """One DeepSeek-Sparse-Attention model's attention on one GPU: per layer the indexer's
    projections, logits and top-k, then MLA over the selected tokens
    (:func:`sparse_mla_batch` through :class:`AttentionKernels`). The indexer's GEMMs are
    counted here, in the attention time, so the dense model's terms stay as they are."""

    __slots__ = (
        "indexer", "fp8_rate", "projections", "keys_per_query", "dense_short_prefill", "_ops",
        "_precision",
    )  # fmt: skip

    def __init__(
        self,
        ops: OperatorTimes,
        model: ModelShape,
        kv_bytes: float,
        mla_fit: MlaDecodeFit | None,
        precision: PrecisionSpec | None,
        engine: str = "vllm",
    ) -> None:
        if engine not in SPARSE_ATTENTION_ENGINES:
            raise InputError(
                "engine",
                f"{model.id}'s sparse attention is modelled as "
                f"{' and '.join(SPARSE_ATTENTION_ENGINES)} run it (FlashMLA's sparse and "
                f"DeepGEMM's MQA-logits kernels); {engine} is not one of them",
            )
        self.keys_per_query = SPARSE_ATTENTION_ENGINES[engine]
        self.dense_short_prefill = engine in DENSE_SHORT_PREFILL_ENGINES
        gpu = ops.gpu
        if gpu.arch not in SPARSE_ATTENTION_ARCHS or gpu.fp8_dense_flops is None:
            raise InputError(
                "gpu",
                f"{model.id}'s sparse attention runs on FlashMLA's sparse and DeepGEMM's FP8 "
                f"MQA-logits kernels, Hopper and Blackwell only ({gpu.id} is {gpu.arch}; "
                "ROCm's AITER sparse-MLA path is not modelled): pick a Hopper or Blackwell GPU",
            )
        super().__init__(ops, model, kv_bytes, mla_fit)
        self._ops, self._precision = ops, precision
        # FP8 tensor cores at the profile's attention fraction of peak (measured for bf16
        # attention kernels: an assumption for the indexer's FP8 MQA)
        self.fp8_rate = gpu.fp8_dense_flops * ops.profile["attention_compute_efficiency"]
        self.indexer = (model.index_n_heads, model.index_head_dim, model.index_topk)
        self.projections: dict[int, float] = {}  # by token count

    def time(self, batch: BatchShape, layers: int) -> float:
        """Seconds of ``layers`` layers' sparse attention over ``batch``: the indexer (its
        GEMMs, logits and top-k) and MLA over the selected tokens. SGLang runs a prefill
        whose longest context is within ``index_topk`` tokens as dense MLA prefill instead
        (:meth:`dense_prefill`)."""
        if batch.num_tokens == 0:
            return 0.0
        if self.dense_prefill(batch):
            rest, prompts = batch.split_prefill()
            dense = AttentionKernels.time(self, as_prefill(prompts), layers)
            # the indexer still caches the prompt's keys (wk), for the decodes' top-k later
            heads, dim, _ = self.indexer
            keys = self._ops.gemm_time(prompts.num_tokens, self.model.hidden_size, dim + heads)
            dense += layers * keys
            return dense + (self.time(rest, layers) if rest.num_tokens else 0.0)
        mla = super().time(sparse_mla_batch(batch, self.indexer[2]), layers)
        return mla + layers * (self.projection_time(batch.num_tokens) + self.indexer_time(batch))

    def dense_prefill(self, batch: BatchShape) -> bool:
        """Whether SGLang runs ``batch``'s prompt chunks as dense MLA prefill (MHA_ONE_SHOT):
        ``set_nsa_prefill_impl`` takes it while the batch's longest context is within
        SGLANG_NSA_PREFILL_DENSE_ATTN_KV_LEN_THRESHOLD, which server_args sets to the model's
        index_topk (2,048 for DeepSeek-V3.2) on Hopper and Blackwell (QA: a 1,000-token prompt
        priced through the indexer and sparse MLA at 18.7 ms against V3's dense 2.1 ms on an
        H200 at tp 8). From the sums the chunks' mean context stands in for the longest (exact
        for one chunk). vLLM runs every prefill sparse."""
        if not (self.dense_short_prefill and batch.pre_tokens):
            return False
        mean = (batch.pre_kv + batch.pre_tokens) / batch.pre_seqs
        return mean <= self.indexer[2]

    def projection_time(self, tokens: int) -> float:
        """One layer's indexer GEMMs for ``tokens`` tokens, whole on every GPU: wq_b at the
        weights' precision, the fused wk + weights_proj in bf16 (vLLM upcasts an FP8 wk to
        keep that fusion, deepseek_v2.py ``_try_load_fp8_indexer_wk``)."""
        hit = self.projections.get(tokens)
        if hit is None:
            m, (heads, dim, _) = self.model, self.indexer
            ops = self._ops
            hit = ops.gemm_time(tokens, m.q_lora_rank, heads * dim, self._precision)
            hit += ops.gemm_time(tokens, m.hidden_size, dim + heads)
            self.projections[tokens] = hit
        return hit

    def indexer_time(self, batch: BatchShape) -> float:
        """One layer's indexer logits and top-k over ``batch``: FP8 MQA over every (query
        token, visible past token) pair, the indexer's keys read once per sequence (vLLM) or
        per query token (SGLang); float32 logits written and read back by the top-k, which
        writes the selected indices."""
        heads, dim, topk = self.indexer
        t = batch.num_tokens
        pairs = batch.sum_q_kv + (batch.sum_q_sq + t) / 2.0
        read = pairs if self.keys_per_query else batch.sum_kv + t
        keys = read * self.model.indexer_cache_bytes_per_token
        queries = t * heads * (dim + LOGIT_BYTES)  # FP8 queries and float32 head weights
        # the decode kernel (fp8_paged_mqa_logits) where every sequence sends one token, as
        # the attention kernels take their decode latency
        latency = self.decode_latency if one_token_each(batch.sum_q_sq, t) else self.latency
        logits = roofline_time(
            2.0 * heads * dim * pairs,
            keys + queries + LOGIT_BYTES * pairs,
            self.fp8_rate,
            self.memory_rate,
            latency,
            self.sharpness,
        )
        # top-k is one memory pass over the logits: an elementwise kernel's rate and latency
        selected = min(pairs, float(t) * topk)
        select = self._ops.elementwise_time(LOGIT_BYTES * pairs + INDEX_BYTES * selected, 1)
        return logits + select
