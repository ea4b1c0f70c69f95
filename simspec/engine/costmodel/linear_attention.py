"""Gated DeltaNet layers (Qwen3-Next, Qwen3.5) on one GPU: their projections, the causal conv1d
and the delta-rule recurrence over a fixed state per sequence, as vLLM
(``model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py``) and SGLang
(``srt/layers/attention/fla``, ``srt/models/qwen3_next.py``) run them.

A layer keeps, per sequence, a state of (value heads / tp) x value head x key head and the
conv1d's last ``taps - 1`` inputs; it holds no KV, so its cost does not grow with the context.

- Decode and verify (few query tokens per sequence): the conv1d update kernel and the fused
  recurrent delta-rule kernel read each sequence's state once and are memory-bound. Under
  speculative decoding both engines keep a state per verify position, so that the state after
  the last accepted token is at hand without recomputing: SGLang writes
  ``intermediate_ssm_state_cache`` (shape [layers, running + 1, speculative_num_draft_tokens,
  heads, K, V], srt/mem_cache/memory_pool.py MambaPool) and the matching conv windows during
  target_verify; vLLM gives a request ``num_speculative_blocks`` extra state blocks and a conv
  state ``taps - 1 + num_spec`` wide (mamba_utils.py gated_delta_net_state_shape) that its
  recurrent kernel fills per accepted position. Here a decode or verify forward writes one state
  per query token and reads one per sequence (plain decode: one of each).
- Prefill (chunks of many tokens): the chunked delta rule (FLA ``chunk_gated_delta_rule``,
  chunks of 64 tokens, FLA_CHUNK_SIZE) reads and writes the state once per sequence; its FLOPs
  per token and value head are estimated below (:data:`CHUNK_FLOPS_PER_TOKEN`).

Read at: vLLM qwen_gdn_linear_attn.py at 00545a8 and models/qwen3_next.py at 002d607
(vllm-project/vllm); SGLang's MambaPool and ServerArgs in indexed copies of
sgl-project/sglang's python/sglang/srt (the stored upstream file predates MambaPool, so no
upstream commit is named).

Not modelled (named in the README): the elementwise kernels around the recurrence (the gated
RMSNorm, l2-norms of q and k, the sigmoid gates) are counted as a full-attention layer's, and a
batch mixing prefill chunks with verify rows is priced by its mean query length.
"""

from __future__ import annotations

from simspec.catalog.models import BYTES_PER_PARAM, ModelShape
from simspec.catalog.precision import PrecisionSpec
from simspec.engine.costmodel.roofline import OperatorTimes, roofline_time
from simspec.engine.costmodel.shapes import BatchShape

# what a prediction of a model with Gated DeltaNet layers rests on beyond its measured inputs
LINEAR_STATE_NOTE = (
    "Gated DeltaNet layers priced from their shapes (projections, conv1d, a state per sequence "
    "read once and written per verify position as SGLang and vLLM keep it; chunked prefill "
    "FLOPs estimated), not from timed kernels"
)
# FLA's chunk size for the chunked delta rule (vllm/model_executor/layers/fla/ops/utils.py
# FLA_CHUNK_SIZE = 64; SGLang vendors the same FLA kernels)
FLA_CHUNK = 64
# Query tokens per sequence (on average) up to which a forward runs the recurrent (decode and
# verify) kernels rather than the chunked prefill one; verify widths are at most a tree's
# draft tokens (SGLang speculative_num_draft_tokens, vLLM num_speculative_tokens + 1)
RECURRENT_MAX_QUERY = 16
# FLOPs per token and value head of one recurrent step with a dk x dv state S (estimate, counted
# from the delta rule o = S'q after S' = a S + beta k (v - (a S)^T k)^T): decay a S (dk dv),
# the read (a S)^T k (2 dk dv), the rank-one write (2 dk dv), the output S'^T q (2 dk dv):
# 7 dk dv in all
RECURRENT_FLOPS = 7


def chunk_flops_per_token(dk: int, dv: int, chunk: int = FLA_CHUNK) -> float:
    """FLOPs per token and value head of the chunked delta rule (estimate, from FLA's chunk
    algorithm with chunks of C tokens: the WY representation W = T K, U = T V (2 C (dk + dv)),
    the chunk's K K^T and Q K^T (2 C dk each), its masked scores times values (2 C dv); the
    state terms U - W S, Q S and the update S += K^T U (2 dk dv each)): 6 dk dv + C (6 dk +
    4 dv); the triangular solve T (C^2 per chunk, C per token) is left out."""
    return 6.0 * dk * dv + chunk * (6.0 * dk + 4.0 * dv)


def gdn_projection_time(
    ops: OperatorTimes, model: ModelShape, tokens: int, w: PrecisionSpec | None = None
) -> float:
    """One Gated DeltaNet layer's GEMMs on one GPU (vLLM QwenGatedDeltaNetAttention):
    in_proj_qkvz (h -> 2 key_dim + 2 value_dim, column-parallel), in_proj_ba (h -> 2 value
    heads) and out_proj (value_dim -> h, row-parallel), at the weights' precision ``w``."""
    h, tp, t = model.hidden_size, ops.tp, tokens
    qkvz = (2 * model.linear_key_dim + 2 * model.linear_value_dim) // tp
    ba = max(2 * model.linear_num_value_heads // tp, 1)
    return (
        ops.gemm_time(t, h, qkvz, w)
        + ops.gemm_time(t, h, ba, w)
        + ops.gemm_time(t, model.linear_value_dim // tp, h, w)
    )


_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def ssm_state_bytes(model: ModelShape, engine_family: str) -> int:
    """Bytes per element of the SSM state the engine keeps: vLLM's ``mamba_ssm_cache_dtype``
    "auto" is the model's dtype (bf16) unless the config names one (Qwen3.5's
    ``mamba_ssm_dtype`` float32: vllm/model_executor/models/config.py reads it into the cache
    config; mamba_utils.py MambaStateDtypeCalculator); SGLang keeps float32 (ServerArgs
    ``mamba_ssm_dtype = "float32"``, python/sglang/srt/server_args.py), as do the other engines
    here, for want of a source saying otherwise."""
    if engine_family == "vllm":
        return _DTYPE_BYTES.get(model.mamba_ssm_dtype, BYTES_PER_PARAM)
    return 4


def state_slots(engine_family: str, verify_tokens: int) -> int:
    """Recurrent states a running sequence holds: one, and under speculative decoding (verify
    width ``verify_tokens`` > 1) one per verify position besides: SGLang allocates
    speculative_num_draft_tokens intermediate states per running request beside its own
    (MambaPool intermediate_ssm), vLLM 1 + num_speculative_tokens state blocks (MambaSpec
    num_speculative_blocks), one fewer."""
    if verify_tokens <= 1:
        return 1
    return verify_tokens if engine_family == "vllm" else 1 + verify_tokens


class RecurrentKernels:
    """One model's Gated DeltaNet kernels (conv1d and delta rule) on one GPU; states kept at
    ``ssm_bytes`` (SSM) and ``conv_bytes`` (conv window) per element."""

    __slots__ = ("model", "heads", "channels", "ssm_bytes", "conv_bytes", "roof", "state")

    def __init__(
        self,
        ops: OperatorTimes,
        model: ModelShape,
        ssm_bytes: float,
        conv_bytes: float = BYTES_PER_PARAM,
    ) -> None:
        tp = ops.tp
        self.model = model
        self.heads = max(model.linear_num_value_heads // tp, 1)
        self.channels = model.linear_conv_dim / tp
        self.ssm_bytes, self.conv_bytes = ssm_bytes, conv_bytes
        self.roof = ops.attention
        # one sequence's state in one layer: (SSM bytes, conv window bytes)
        self.state = (
            self.heads * model.linear_key_head_dim * model.linear_value_head_dim * ssm_bytes,
            self.channels * (model.linear_conv_kernel_dim - 1) * conv_bytes,
        )

    def time(self, batch: BatchShape, layers: int) -> float:
        """Seconds of the Gated DeltaNet kernels of ``layers`` such layers over ``batch``."""
        if layers <= 0 or batch.num_tokens == 0:
            return 0.0
        return layers * self._layer(batch)

    def _layer(self, batch: BatchShape) -> float:
        model, t, seqs = self.model, batch.num_tokens, batch.num_seqs
        dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
        ssm, conv = self.state
        recurrent = batch.sum_q_sq <= RECURRENT_MAX_QUERY * t
        per_token: float
        if recurrent:  # read each sequence's state, write one per query token
            per_token = RECURRENT_FLOPS * dk * dv
            states = seqs * (ssm + conv) + t * (ssm + conv)
        else:  # chunked prefill: the state in and out once per sequence
            per_token = chunk_flops_per_token(dk, dv)
            states = 2.0 * seqs * (ssm + conv)
        flops: float = t * self.heads * per_token
        flops += 2.0 * t * self.channels * model.linear_conv_kernel_dim  # the conv1d
        # the conv1d reads its q, k, v inputs and writes them; the recurrence reads them and
        # writes the value-width output (bf16 activations)
        activations = BYTES_PER_PARAM * t * (3 * self.channels + self.heads * dv)
        roof = self.roof
        # two kernels a layer: the conv1d and the delta rule, each paying the launch latency
        return roofline_time(
            flops,
            states + activations,
            roof.compute_rate,
            roof.memory_rate,
            2.0 * roof.latency,
            roof.sharpness,
        )
