"""A model's attention on one GPU: the projections around it (GQA's fused QKV and O, or MLA's
down, up, absorb and expand GEMMs) and the attention kernel itself, over the whole context in
full layers and over at most ``sliding_window`` tokens in windowed ones. MLA decode and verify
batches take the fitted decode kernel (:func:`~simspec.engine.costmodel.kernels.mla_decode_time`)
where a measured table covers the GPU and engine."""

from __future__ import annotations

from simspec.catalog.kernel_tables import MlaDecodeFit
from simspec.catalog.models import BYTES_PER_PARAM, ModelShape
from simspec.catalog.precision import PrecisionSpec
from simspec.engine.costmodel.kernels import mla_decode_time
from simspec.engine.costmodel.roofline import OperatorTimes, roofline_time
from simspec.engine.costmodel.shapes import BatchShape, one_token_each
from simspec.engine.costmodel.work import attention_work, mla_attention_work

# Query tokens per sequence (on average) up to which an MLA batch runs the decode kernel: a
# verify step's K+1 tokens ride the same kernel as extra query rows (FlashMLA takes up to 128,
# vLLM backends/mla/flashmla.py reorder_batch_threshold; SGLang's target_verify uses its decode
# backend's MLA kernel); prefill chunks above this keep the roofline.
MLA_DECODE_MAX_QUERY = 16


def projection_time(
    ops: OperatorTimes, model: ModelShape, tokens: int, w: PrecisionSpec | None = None
) -> float:
    """One layer's attention GEMMs on one GPU. GQA: fused QKV and O. MLA (vLLM
    deepseek_v2.py and backends/mla/common.py, decode path): the replicated fused q_a/kv_a
    down projection, q_b per GPU's heads (or one q_proj), W_UK absorbing each head's query
    into the latent and W_UV expanding each head's output from it (batched over the heads),
    then O. The projections run at the weights' precision ``w``; the absorbed W_UK/W_UV
    are bf16 (vLLM dequantises kv_b_proj into them when the weights load)."""
    h, tp, t = model.hidden_size, ops.tp, tokens
    if not model.is_mla:
        q, kv = model.q_dim // tp, model.kv_dim_per_gpu(tp)
        # an output gate widens the fused projection by a second q (Qwen3-Next)
        qkv = (model.q_proj_dim // tp if model.attn_output_gate else q) + 2 * kv
        return ops.gemm_time(t, h, qkv, w) + ops.gemm_time(t, q, h, w)
    heads = max(model.num_attention_heads // tp, 1)
    q_head = model.qk_nope_head_dim + model.qk_rope_head_dim
    latent, rank = model.kv_dim, model.kv_lora_rank
    if model.q_lora_rank:
        down = ops.gemm_time(t, h, model.q_lora_rank + latent, w)
        up = ops.gemm_time(t, model.q_lora_rank, heads * q_head, w)
    else:
        down = ops.gemm_time(t, h, latent, w)
        up = ops.gemm_time(t, h, heads * q_head, w)
    absorb = ops.batched_gemm_time(heads, t, model.qk_nope_head_dim, rank)
    expand = ops.batched_gemm_time(heads, t, rank, model.v_head_dim)
    return down + up + absorb + expand + ops.gemm_time(t, heads * model.v_head_dim, h, w)


def chunk_pairs(positions: int, chunk: int) -> int:
    """(query, key) pairs of causal chunked-local attention over positions 0..positions-1:
    the token at p attends to p mod chunk + 1 tokens."""
    whole, rest = divmod(positions, chunk)
    return whole * chunk * (chunk + 1) // 2 + rest * (rest + 1) // 2


class AttentionKernels:
    """One model's attention kernels on one GPU (built once per model; :meth:`time` runs three
    times per engine iteration). K and V are cached at ``kv_bytes`` per element. ``mla_fit``:
    the measured MLA decode kernel (None: the roofline for every batch)."""

    __slots__ = (
        "model",
        "q_dim",
        "kv_dim",
        "mla",
        "kv_bytes",
        "compute_rate",
        "memory_rate",
        "latency",
        "decode_latency",
        "sharpness",
        "windowed",
        "mla_fit",
        "peak_rates",
    )

    def __init__(
        self,
        ops: OperatorTimes,
        model: ModelShape,
        kv_bytes: float = BYTES_PER_PARAM,
        mla_fit: MlaDecodeFit | None = None,
    ):
        self.model = model
        self.q_dim, self.kv_dim = model.q_dim // ops.tp, model.kv_dim_per_gpu(ops.tp)
        # MLA: (the GPU's heads, the cached latent, the value latent)
        self.mla = (
            (max(model.num_attention_heads // ops.tp, 1), model.kv_dim, model.kv_lora_rank)
            if model.is_mla
            else None
        )
        self.kv_bytes = kv_bytes
        roof = ops.attention
        self.compute_rate, self.memory_rate = roof.compute_rate, roof.memory_rate
        self.latency, self.sharpness = roof.latency, roof.sharpness
        self.decode_latency = ops.attention_decode_latency
        self.windowed = bool(model.sliding_layers)
        self.mla_fit = mla_fit if model.is_mla else None
        self.peak_rates = (ops.gpu.bf16_dense_flops, ops.gpu.hbm_bandwidth_bytes_s)

    def _chunked_layer(self, batch: BatchShape, latency: float) -> float:
        """One chunked-local layer (Llama-4): a token at position p attends to the p mod
        chunk + 1 tokens of its own chunk up to itself (vLLM make_local_attention_virtual_batches,
        SGLang LocalAttentionMetadata split each sequence at chunk boundaries), and reads its
        chunk's cached part. From the sums: one sequence's query tokens exactly, wherever they
        cross a boundary (:func:`chunk_pairs`); a batch whose mean context lies within the first
        chunk reads its contexts, clipped to a chunk each, else half a chunk a sequence (the
        mean of c mod chunk), its pairs never past a chunk a token (QA: a 32K prompt had been
        priced at its whole causal cost)."""
        w, n, t = self.model.sliding_window, batch.num_seqs, batch.num_tokens
        if n == 1:
            context = int(batch.sum_kv)
            reads = float(context % w)
            pairs = float(chunk_pairs(context + t, w) - chunk_pairs(context, w))
        else:
            reads = batch.sum_kv if batch.sum_kv <= n * w else n * w / 2.0
            scale = reads / batch.sum_kv if batch.sum_kv > 0 else 0.0
            pairs = batch.sum_q_kv * scale + (batch.sum_q_sq + t) / 2.0
            pairs = min(pairs, float(t * w))
        # pairs = sum_q_kv + (sum_q_sq + t) / 2 in the kernel's terms, with sum_q_sq = t
        return self._layer(t, float(t), pairs - t, reads, latency)

    def time(self, batch: BatchShape, layers: int) -> float:
        """Seconds of the attention kernels of the model's first ``layers`` layers over
        ``batch``. Windowed layers attend over at most ``sliding_window`` tokens per sequence:
        the pairs and cached tokens are clipped to the window (exact when every context is
        past the window or within it, an upper bound otherwise); chunked-local ones over
        their own chunk (:meth:`_chunked_layer`)."""
        if self.mla is not None and batch.pre_tokens:
            # vLLM and SGLang run MLA's prompt chunks as multi-head attention (K and V
            # up-projected per head), its decodes and verifies on the absorbed latent kernel
            rest, prompts = batch.split_prefill()
            time = layers * self._mla_prefill(prompts)
            return time + (self.time(rest, layers) if rest.num_tokens else 0.0)
        t = batch.num_tokens
        # every sequence sends one token: the decode kernel path
        latency = self.decode_latency if one_token_each(batch.sum_q_sq, t) else self.latency
        windowed = self.model.sliding_layers_in(layers) if self.windowed else 0
        if self.mla_fit is not None and batch.sum_q_sq <= MLA_DECODE_MAX_QUERY * t:
            return layers * self._mla_decode(batch)
        total = 0.0
        if layers > windowed:
            total = (layers - windowed) * self._layer(
                t, batch.sum_q_sq, batch.sum_q_kv, batch.sum_kv, latency
            )
        if windowed and self.model.chunked_attention:
            total += windowed * self._chunked_layer(batch, latency)
        elif windowed:
            w = self.model.sliding_window
            pairs = batch.sum_q_kv + (batch.sum_q_sq + t) / 2.0
            # no new-token term: the clipped count keeps pairs = min(pairs, t * w)
            sum_q_kv = min(pairs, float(t * w)) - t / 2.0
            sum_kv = min(batch.sum_kv, float(batch.num_seqs * w))
            total += windowed * self._layer(t, 0.0, sum_q_kv, sum_kv, latency)
        if self.mla_fit is not None:
            # more query tokens a sequence never cost less than the decode kernel's time at
            # the most it takes: a floor, so the switch to the roofline is no drop (QA: an fp8
            # cache's verify fell 31 % from 16 to 17 tokens a sequence, the roofline knowing
            # nothing of its slow dequantising kernel)
            assert self.mla is not None  # an MLA fit is kept for MLA models only
            heads, latent, value_latent = self.mla
            compute_rate, memory_rate = self.peak_rates
            floor = mla_decode_time(
                self.mla_fit, batch.num_seqs, heads * MLA_DECODE_MAX_QUERY, batch.sum_kv + t,
                latent, value_latent, self.kv_bytes, compute_rate, memory_rate,
            )  # fmt: skip
            total = max(total, layers * floor)
        return total

    def _mla_decode(self, batch: BatchShape) -> float:
        """One layer's MLA decode kernel: each sequence's query rows are its heads times its
        query tokens (sum q^2 / sum q: the token-weighted mean), over every latent it reads."""
        assert self.mla is not None and self.mla_fit is not None
        heads, latent, value_latent = self.mla
        t = batch.num_tokens
        rows = heads * batch.sum_q_sq / t
        compute_rate, memory_rate = self.peak_rates
        return mla_decode_time(
            self.mla_fit, batch.num_seqs, rows, batch.sum_kv + t, latent, value_latent,
            self.kv_bytes, compute_rate, memory_rate,
        )  # fmt: skip

    def _mla_prefill(self, batch: BatchShape) -> float:
        """One layer's MLA attention over prompt chunks as vLLM (backends/mla/common.py
        _forward_prefill, "Compute-Friendly Approach") and SGLang (DeepseekV2AttentionMLA
        forward_normal, the MHA path of an extend batch) run it: the cached context's latents
        up-projected by kv_b_proj to each head's K (nope) and V, then flash attention with
        qk = nope + rope and v dimensions per head, K and V in bf16. The absorbed latent path
        (2 x heads x (latent + value latent) FLOPs a pair) would count about 3.4x the
        attention FLOPs of DeepSeek-V3's prefill (QA)."""
        assert self.mla is not None
        m, heads = self.model, self.mla[0]
        qk, v = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
        dim = heads * (qk + v) / 2.0  # QK^T over qk, PV over v: 2 x heads x (qk + v) a pair
        flops, nbytes = attention_work(
            dim, dim, batch.num_tokens, batch.sum_q_sq, batch.sum_q_kv, batch.sum_kv
        )
        # kv_b_proj over the cached context (a chunk's own tokens are up-projected with its
        # projections), reading its latents
        flops += 2.0 * batch.sum_kv * m.kv_lora_rank * heads * (m.qk_nope_head_dim + v)
        nbytes += self.kv_bytes * self.mla[1] * batch.sum_kv
        return roofline_time(
            flops, nbytes, self.compute_rate, self.memory_rate, self.latency, self.sharpness
        )

    def _layer(
        self, t: int, sum_q_sq: float, sum_q_kv: float, sum_kv: float, latency: float
    ) -> float:
        if self.mla is None:
            flops, nbytes = attention_work(
                self.q_dim, self.kv_dim, t, sum_q_sq, sum_q_kv, sum_kv, self.kv_bytes
            )
        else:
            heads, latent, value_latent = self.mla
            flops, nbytes = mla_attention_work(
                heads, latent, value_latent, t, sum_q_sq, sum_q_kv, sum_kv, self.kv_bytes
            )
        return roofline_time(
            flops, nbytes, self.compute_rate, self.memory_rate, latency, self.sharpness
        )
