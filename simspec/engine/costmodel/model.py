"""The model-level cost model: one forward pass of a decoder, composed from its operators
(:meth:`RooflineCostModel.forward`).

A dense Llama-style model is the general case with its defaults: every layer has a dense MLP
(no MoE layers), GQA attention (no MLA) over the whole context (no windowed layers), and bf16
weights. Per layer a forward runs the attention projections and kernel
(:mod:`~simspec.engine.costmodel.attention`), the MLP (dense, or router + shared + routed
experts: :mod:`~simspec.engine.costmodel.moe`), the elementwise kernels and the tensor-parallel
all-reduces; then the LM head over the rows that need logits, and the all-gather of their
vocab shards.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from simspec.catalog.expert_locality import adjacent_expert_reuse
from simspec.catalog.hardware import EngineProfile, GpuSpec, HardwareProfile
from simspec.catalog.kernel_tables import (
    GroupedGemmFit,
    borrowed_moe_fit,
    deepep_fits,
    deepep_low_latency_limit,
    mla_decode_fit,
    moe_kernel_fit,
)
from simspec.catalog.layer_kernels import LayerKernels, extra_kernels, model_features
from simspec.catalog.models import BYTES_PER_PARAM, ModelShape
from simspec.catalog.precision import PrecisionSpec, effective_precision, load_precision
from simspec.engine.costmodel.attention import AttentionKernels, projection_time
from simspec.engine.costmodel.collectives import engine_collectives, node_floor
from simspec.engine.costmodel.dp_attention import TokenTerms, dp_forward
from simspec.engine.costmodel.elementwise import elementwise_work
from simspec.engine.costmodel.host import HostModel
from simspec.engine.costmodel.linear_attention import (
    RecurrentKernels,
    gdn_projection_time,
    ssm_state_bytes,
)
from simspec.engine.costmodel.moe import (
    dispatch_combine_time,
    excess_reuse,
    fresh_tokens,
    grouped_experts_time,
    moe_mlp_time,
    routed_experts_time,
)
from simspec.engine.costmodel.plain import PlainForward, plain_model
from simspec.engine.costmodel.roofline import OperatorTimes
from simspec.engine.costmodel.shapes import BatchShape, StepCost
from simspec.engine.costmodel.sparse_attention import attention_kernels
from simspec.engine.layout import ParallelLayout


class RooflineCostModel:
    """Per-operator roofline for decoders under tensor parallelism ``tp``, pipeline stages
    ``pp``, expert parallelism ``ep`` and ``dp`` data-parallel attention ranks
    (:mod:`~simspec.engine.costmodel.dp_attention`): the one cost model the simulator asks for
    GPU time (:meth:`forward`, :meth:`gemm_time`). ``alltoall``: (latency s, bandwidth B/s) of
    one all-to-all transfer (:func:`~simspec.catalog.hardware.load_alltoall`)."""

    def __init__(
        self,
        gpu: GpuSpec,
        profile: HardwareProfile,
        engine: EngineProfile,
        tp: int = 1,
        step_overhead_s: float | None = None,
        pp: int = 1,
        ep: int = 1,
        alltoall: tuple[float, float] | None = None,
        precision: PrecisionSpec | None = None,
        precision_model: str | None = None,
        kv_bytes: float = BYTES_PER_PARAM,
        expert_precision: PrecisionSpec | None = None,
        speculative: bool = False,
        dp: int = 1,
        graph_max_tokens: float | None = None,
    ) -> None:
        """``precision``: the weights of the model whose id is ``precision_model`` (the served
        target; None: bf16); every other model (draft heads, draft models) runs bf16.
        ``kv_bytes``: bytes per cached K/V element (the KV-cache dtype), for every model.
        ``speculative``: the engine runs a speculative method that may turn its overlap
        scheduler off (:meth:`EngineProfile.overlap_off_by`);
        ``step_overhead_s``: a fixed exposed host time per step instead of the engine's.
        ``graph_max_tokens``: the deployment's own cap on a CUDA graph's tokens (vLLM's from
        its max_num_seqs and K), below the engine's.
        A profile calibrated to a deployment replaces the engine's host overheads and scales
        the kernels' time (:meth:`HardwareProfile.engine_for`)."""
        engine = profile.engine_for(engine)
        self.gpu, self.profile, self.engine, self.tp = gpu, profile, engine, tp
        self.ops = OperatorTimes(
            gpu, profile, tp, engine_collectives(gpu.id, tp, engine.custom_allreduce),
            node_floor(gpu.id, tp, gpu.gpus_per_node),
        )  # fmt: skip
        self.layout = ParallelLayout(tp, ep, dp, engine.dp_attention)
        # the GPUs one attention rank spans: all tp of them without DP attention
        attn_tp = self.layout.attn_tp
        self.attn_ops = (
            OperatorTimes(
                gpu,
                profile,
                attn_tp,
                engine_collectives(gpu.id, attn_tp, engine.custom_allreduce),
                node_floor(gpu.id, attn_tp, gpu.gpus_per_node),
            )  # fmt: skip
            if dp > 1
            else self.ops
        )
        # FP8 on a GPU without FP8 tensor cores runs weight-only, as vLLM does
        eff = effective_precision(precision, gpu) if precision is not None else None
        self.precision = None if eff is None or eff.name == "bf16" else eff
        self.precision_model = precision_model
        # models whose layer GEMMs run at the target's precision: the target, and the MTP
        # modules shipped in its checkpoint (quantize_like_target)
        self._quantized = {precision_model}
        # draft heads that run the target's own LM head (share_lm_head)
        self._shared_heads: set[str] = set()
        # models that run at their own checkpoint's precision, (layers, experts) (a draft
        # model stored quantised: run_at_own_precision)
        self._own_precision: dict[str, tuple[PrecisionSpec | None, PrecisionSpec | None]] = {}
        # the routed experts' precision (GPT-OSS: MXFP4 experts beside bf16 layers); None: the
        # layers' own
        self.expert_precision = (
            effective_precision(expert_precision, gpu) if expert_precision is not None else None
        )
        self.kv_bytes = kv_bytes
        self.pp = pp  # sequential layer stages: each boundary sends the hidden states on
        self.ep = ep  # GPUs the experts are spread over whole (1: each expert sliced over tp)
        self.alltoall = alltoall or (0.0, gpu.interconnect_bandwidth_bytes_s)
        # DeepEP's measured kernels where their table covers the GPU and EP size
        self.deepep = deepep_fits(gpu.id, ep) if ep > 1 else None
        self.host = HostModel.of(
            engine, tp, speculative, step_overhead_s, gpu_scale=profile.gpu_time_scale, gpu=gpu,
            graph_max_tokens=graph_max_tokens,
        )  # fmt: skip
        self._models: dict[int, _ModelTerms] = {}  # by id(model); the entry keeps it alive
        self._extras: dict[int, tuple[ModelShape, LayerKernels]] = {}  # likewise
        # the MoE kernel of each (experts' precision, model type) (moe_kernel)
        self._moe_kernels: dict[tuple[str, str], GroupedGemmFit | None] = {}

    # -- operators -------------------------------------------------------------------------
    def gemm_time(
        self, tokens: int, d_in: int, d_out: int, precision: PrecisionSpec | None = None
    ) -> float:
        """Time of one dense (tokens x d_in) @ (d_in x d_out) matmul on one GPU shard, with bf16
        weights or (``precision``, as :func:`effective_precision` gives it) quantised ones."""
        return self.ops.gemm_time(tokens, d_in, d_out, precision)

    def allreduce_time(self, nbytes: float) -> float:
        """Ring all-reduce across ``tp`` GPUs; zero without tensor parallelism."""
        return self.ops.allreduce_time(nbytes)

    def allgather_time(self, nbytes: float) -> float:
        """Ring all-gather of ``nbytes`` in total (e.g. vocab-sharded logits)."""
        return self.ops.allgather_time(nbytes)

    def routed_experts_time(self, model: ModelShape, t: int) -> float:
        """The routed experts of one MoE layer of ``model`` for ``t`` tokens on one GPU
        (:func:`~simspec.engine.costmodel.moe.routed_experts_time`)."""
        spec = self.experts_precision_of(model)
        return routed_experts_time(self.ops, model, t, self.ep, spec, self.moe_kernel(spec, model))

    def grouped_experts_time(self, model: ModelShape, pairs: float, touched: float) -> float:
        """The routed-expert GEMMs of one MoE layer of ``model`` for ``pairs`` (token, expert)
        pairs over ``touched`` distinct experts
        (:func:`~simspec.engine.costmodel.moe.grouped_experts_time`)."""
        spec = self.experts_precision_of(model)
        kernel = self.moe_kernel(spec, model)
        return grouped_experts_time(self.ops, model, pairs, touched, self.ep, spec, kernel)

    def moe_kernel(self, experts: PrecisionSpec | None, model: ModelShape) -> GroupedGemmFit | None:
        """The measured MoE kernel the engine runs for ``model``'s experts at ``experts``
        (None: bf16) on this GPU at this EP size; None where no table covers them (the
        roofline then)."""
        dtype = experts.name if experts else "bf16"
        key = (dtype, model.model_type)
        if key in self._moe_kernels:  # a forward asks per MoE layer: the bound looked up once
            return self._moe_kernels[key]
        engine = self.engine.engine_kernels
        fit = moe_kernel_fit(self.gpu.id, engine, dtype, model.model_type, self.ep)
        if fit is None:  # no table on this GPU: the nearest tabled GPU's fit at this dtype
            found = borrowed_moe_fit(self.gpu.id, engine, dtype, model.model_type, self.ep)
            fit = found[1] if found is not None else None
        if fit is None and experts is not None and experts.never_faster_than is not None:
            # a weight-only fallback runs the kernel of the precision it is never faster than
            # (precision.yaml never_faster_than: the same Marlin kernel), here at its own
            # bytes, as its dense GEMMs are bounded (QA: nvfp4 MoE experts on Hopper ran the
            # roofline, faster than int4-w's measured kernel and than bf16)
            floor = effective_precision(load_precision(experts.never_faster_than), self.gpu)
            fit = self.moe_kernel(floor, model)
            if fit is not None and experts.weight_bytes > fit.weight_bytes:
                fit = dataclasses.replace(fit, weight_bytes=experts.weight_bytes)
        self._moe_kernels[key] = fit
        return fit

    # -- precision -------------------------------------------------------------------------
    def precision_of(self, model: ModelShape) -> PrecisionSpec | None:
        """The weight precision ``model``'s layer GEMMs run at (None: bf16)."""
        if (own := self._own_precision.get(model.id)) is not None:
            return own[0]
        return self.precision if model.id in self._quantized else None

    def run_at_own_precision(
        self, model: ModelShape, layers: PrecisionSpec | None, experts: PrecisionSpec | None
    ) -> None:
        """``model`` (a draft model whose checkpoint is stored quantised) runs its layers at
        ``layers`` and its routed experts at ``experts`` (None: bf16; as the GPU runs them,
        effective_precision), whatever the target runs at: the engines load a draft checkpoint
        with its own quantization_config."""
        bf16 = {None, "bf16"}
        self._own_precision[model.id] = (
            None if layers is None or layers.name in bf16 else layers,
            None if experts is None or experts.name in bf16 else experts,
        )

    def lm_head_precision(self, model: ModelShape) -> PrecisionSpec | None:
        """The LM head's weights: the target's precision where its checkpoint quantises the
        head with the layers (GPTQ/AWQ ``lm_head``) and they run at the checkpoint's own bytes
        (as ModelShape.lm_head_bytes counts it), for the target and for a draft head that runs
        the target's own LM head (share_lm_head); else bf16 (None)."""
        own = self._own_precision.get(model.id)
        w = own[0] if own is not None else self.precision
        if not model.lm_head_quantized or w is None:
            return None
        if own is None and model.id not in self._quantized and model.id not in self._shared_heads:
            return None
        return w if w.weight_bytes == model.stored_bytes(model.weight_dtype) else None

    def share_lm_head(self, model: ModelShape) -> None:
        """``model`` (an EAGLE-1/2 head) computes its logits with the target's own LM head
        (vLLM's EagleProposer shares ``lm_head`` with the target; SGLang's draft takes the
        target's embed and head), at the target's precision where that is quantised."""
        self._shared_heads.add(model.id)

    def experts_precision_of(self, model: ModelShape) -> PrecisionSpec | None:
        """The routed experts' precision: their own where the checkpoint stores them apart
        (GPT-OSS's MXFP4), else the layers'; None: bf16."""
        if (own := self._own_precision.get(model.id)) is not None:
            return own[1] or own[0]
        if model.id not in self._quantized:
            return None
        spec = self.expert_precision or self.precision
        return None if spec is None or spec.name == "bf16" else spec

    def quantize_like_target(self, model: ModelShape) -> None:
        """``model`` (an MTP module of the checkpoint) runs at the target's precision."""
        self._quantized.add(model.id)

    def extra_kernels(self, model: ModelShape) -> LayerKernels:
        """The kernels this engine launches per layer of ``model`` beyond the priced set
        (:mod:`simspec.catalog.layer_kernels`), matched by the features ``model`` runs with
        here: the target, an MTP module (at the target's precision) and a draft head alike."""
        hit = self._extras.get(id(model))
        if hit is not None and hit[0] is model:
            return hit[1]
        w, experts = self.precision_of(model), self.experts_precision_of(model)
        features = model_features(
            model,
            tp=self.tp,
            ep=self.ep,
            gpu=self.gpu.id,
            w8a8=w is not None and w.compute == "fp8",
            experts_w8a8=experts is not None and experts.compute == "fp8",
        )
        extra = extra_kernels(self.engine.family, features, model, self.tp)
        self._extras[id(model)] = (model, extra)
        return extra

    # -- one forward -----------------------------------------------------------------------
    def forward(
        self,
        model: ModelShape,
        batch: BatchShape,
        overhead_s: float | None = None,
        layers: int | None = None,
        extra_gemm_s: float = 0.0,
    ) -> StepCost:
        """Time of one forward of ``model`` (or its first ``layers`` layers) over ``batch``;
        ``extra_gemm_s`` is GEMM time outside the model's layers in the same pass (EAGLE's fc)."""
        n_layers = model.num_hidden_layers if layers is None else layers
        t, host = batch.num_tokens, self.host
        if t == 0:
            overhead = host.exposed(0, extra_gemm_s) if overhead_s is None else overhead_s
            return StepCost(gemm_s=extra_gemm_s, overhead_s=overhead)
        terms = self._terms_of(model)
        if self.layout.dp > 1:
            return dp_forward(self, terms, batch, overhead_s, n_layers, extra_gemm_s)
        # the hot loop repeats a few shapes: one lookup instead of the graph and padding rules
        shape = (t, batch.logit_tokens, batch.num_seqs, n_layers)
        hit = terms.by_shape.get(shape)
        if hit is None:
            hit = terms.by_shape[shape] = self._shape_terms(terms, batch, n_layers)
        by_tokens, graphed = hit
        if terms.recurrent is None:
            attention = terms.attention.time(batch, n_layers)
        else:  # Gated DeltaNet layers run their kernels instead of attention's
            n_linear = model.linear_layers_in(n_layers)
            attention = terms.attention.time(batch, n_layers - n_linear)
            attention += terms.recurrent.time(batch, n_linear)
        return host.step_cost(
            by_tokens, attention, extra_gemm_s, overhead_s, batch.num_seqs, n_layers, graphed
        )

    def _terms_of(self, model: ModelShape) -> _ModelTerms:
        """What the cost model reuses for ``model``, built on its first forward."""
        terms = self._models.get(id(model))
        if terms is None or terms.model is not model:  # first use, or a recycled id
            mla = mla_decode_fit(self.gpu.id, self.engine.engine_kernels, self.kv_bytes)
            kernels = attention_kernels(
                self.attn_ops,
                model,
                self.kv_bytes,
                mla,
                self.precision_of(model),
                self.engine.engine_kernels,
            )
            reuse = 0.0
            if model.is_moe:  # the share beyond what independent draws repeat by chance
                k, experts = model.num_experts_per_tok, model.num_experts
                reuse = excess_reuse(adjacent_expert_reuse(model.id), k, experts)
            terms = self._models[id(model)] = _ModelTerms(model, kernels, reuse)
            if model.linear_layers:
                ssm = ssm_state_bytes(model, self.engine.family)
                terms.recurrent = RecurrentKernels(self.attn_ops, model, ssm)
        return terms

    def plain(self, model: ModelShape, layers: int | None = None) -> PlainForward | None:
        """:meth:`forward` of ``model`` (its first ``layers`` layers) as plain floats from a
        batch's sums, for the hot loop (:mod:`~simspec.engine.costmodel.plain`); None where
        the model takes a path that does not repeat (MLA, windows, DP attention, ...)."""
        n_layers = model.num_hidden_layers if layers is None else layers
        terms = self._terms_of(model)
        if not plain_model(self, model, terms):
            return None
        return PlainForward(self, terms, n_layers)

    def _shape_terms(
        self, terms: _ModelTerms, batch: BatchShape, n_layers: int
    ) -> tuple[TokenTerms, bool]:
        """The token terms of a forward of ``batch``'s token, logit row and sequence counts,
        and whether it replays a CUDA graph (padded to the captured size where it does)."""
        host, t = self.host, batch.num_tokens
        graphed = host.graphed(batch)
        run = host.padded(t) if graphed else t
        fresh = None  # the MoE layers' independently routed tokens (None: all ``run``)
        if terms.reuse:  # a sequence's consecutive tokens share experts
            # padding rows hold the input buffer's stale ids (vLLM reuses it between steps):
            # earlier tokens of these sequences, each routed afresh only for the share a
            # sequence's later token is (1 - reuse). Counted wholly fresh, a verify of 2
            # sequences padded to 16 rows cost more than one of 3 (QA: Qwen3-30B-A3B K=4 on
            # H100, 14.07 against 13.33 ms); at the real rows' mean share, which holds each
            # sequence's wholly fresh first token, 4 sequences verifying 3 tokens padded to 16
            # rows cost more than verifying 4 (QA: Qwen3-235B-A22B, 16.50 against 15.91 ms)
            real = fresh_tokens(t, batch.num_seqs, terms.reuse)
            fresh = real + (run - t) * (1.0 - terms.reuse)
        key = (run, batch.logit_tokens, n_layers, graphed, fresh)
        by_tokens = terms.by_tokens.get(key)
        if by_tokens is None:
            by_tokens = terms.by_tokens[key] = self._token_terms(terms.model, *key)
        return by_tokens, graphed

    def _token_terms(
        self,
        model: ModelShape,
        t: int,
        logit_tokens: int,
        n_layers: int,
        graphed: bool = True,
        fresh: float | None = None,
    ) -> TokenTerms:
        """Everything of a forward that depends only on its token counts (``forward`` caches
        it): each layer's attention projections, its MLP (dense, or router + shared + routed
        experts; ``fresh``: the tokens that route afresh, :func:`~simspec.engine.costmodel.moe.
        fresh_tokens`), elementwise kernels and communication (``graphed``: replayed from a
        CUDA graph, which the engines' custom all-reduce is faster in); the LM head."""
        ops, h, tp = self.ops, model.hidden_size, self.tp
        n_moe = model.moe_layers_in(n_layers)
        n_dense = n_layers - n_moe
        w = self.precision_of(model)
        inter = model.intermediate_size // tp
        n_linear = model.linear_layers_in(n_layers) if model.linear_layers else 0
        if n_linear:
            gemm = (n_layers - n_linear) * projection_time(ops, model, t, w)
            gemm += n_linear * gdn_projection_time(ops, model, t, w)
        else:
            gemm = n_layers * projection_time(ops, model, t, w)
        if n_dense:
            gemm += n_dense * ops.mlp_time(t, h, inter, w)
        kernel = None
        if n_moe:
            experts = self.experts_precision_of(model)
            kernel = self.moe_kernel(experts, model)
            scattered = self.ep > 1 and self.engine.flag("ep_alltoall_without_dp")
            gemm += n_moe * moe_mlp_time(
                ops, model, t, self.ep, w, experts, kernel, fresh, scattered
            )
        nbytes, kernels = elementwise_work(
            model, t, tp, n_layers, kernel is not None, self.extra_kernels(model)
        )
        elementwise = ops.elementwise_time(nbytes, kernels)
        # communication: the attention's all-reduce every layer; the MLP's all-reduce, or on a
        # MoE layer under expert parallelism the dispatch and combine all-to-all where the
        # engine runs one without data-parallel attention (engines.yaml
        # ep_alltoall_without_dp: SGLang's DeepEP backend does; vLLM sums the experts' outputs
        # by the same all-reduce, use_all2all_kernels being "self.dp_size > 1 and self.use_ep")
        hidden_bytes = BYTES_PER_PARAM * t * h
        reduce = ops.allreduce_time(hidden_bytes, graphed)
        if self.ep > 1 and n_moe and self.engine.flag("ep_alltoall_without_dp"):
            comm = n_layers * reduce + n_dense * reduce
            limit = deepep_low_latency_limit() if self.deepep else 0
            comm += n_moe * dispatch_combine_time(
                model, t, self.ep, self.alltoall, self.deepep, limit
            )
        else:
            comm = n_layers * 2 * reduce
        comm += ops.allgather_time(BYTES_PER_PARAM * logit_tokens * model.vocab_size)
        if self.pp > 1 and n_layers > 1:  # a draft head's one layer stays on its stage
            comm += (self.pp - 1) * ops.hop_time(hidden_bytes)
        # the LM head stays bf16, as vLLM leaves it unquantised, unless the checkpoint
        # quantises it too (lm_head_precision)
        vocab = model.vocab_size // tp
        head_w = self.lm_head_precision(model)
        lm_head = ops.gemm_time(logit_tokens, h, vocab, head_w) if logit_tokens else 0.0
        return (gemm, elementwise, comm, lm_head)


@dataclass(slots=True)
class _ModelTerms:
    """What the cost model reuses for one model: its attention kernels, and the terms that
    depend only on token counts by (tokens run, logit rows, layers, graphed), which the hot loop
    repeats."""

    model: ModelShape
    attention: AttentionKernels
    # the share of a token's experts its sequence's previous token chose (expert_locality.yaml)
    reuse: float = 0.0
    # by (tokens run, logit rows, layers, graphed, tokens routed afresh or None: all)
    by_tokens: dict[tuple[int, int, int, bool, float | None], TokenTerms] = field(
        default_factory=dict
    )
    # (token terms, graphed) by (tokens, logit rows, sequences, layers): what a forward's
    # counts decide before its context
    by_shape: dict[tuple[int, int, int, int], tuple[TokenTerms, bool]] = field(default_factory=dict)
    # under DP attention by (rank tokens run, tokens over all ranks, rank logit rows, layers,
    # graphed, tokens over all ranks routed afresh or None: all)
    dp_by_tokens: dict[tuple[int, int, int, int, bool, float | None, bool], TokenTerms] = field(
        default_factory=dict
    )
    # the Gated DeltaNet layers' kernels (None: the model has none)
    recurrent: RecurrentKernels | None = None
