"""EAGLE-1, -2 and -3: a one-layer draft head on the target's features."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from simspec.catalog.draft_heads import eagle3_head, eagle3_head_refusal
from simspec.config import MethodConfig
from simspec.engine.costmodel import BatchShape, StepCost
from simspec.engine.costmodel.plain import FixedForward, Parts, PlainForward
from simspec.engine.speculators.base import DraftStep, Speculator
from simspec.errors import InputError

# EAGLE-3 fuses low, middle and high target features (fc over 3h) and drafts over a reduced
# vocabulary: draft_vocab_size 32000 in the EAGLE-3 head config for Llama-3.1-8B (SpecForge
# configs/llama3-8B-eagle3.json).
EAGLE3_DRAFT_VOCAB = 32000


_INT64 = np.dtype(np.int64)  # counts BatchShape.of sums as they are (the engine's columns)


class EagleHead(Speculator):
    """EAGLE-style drafting: one decoder layer of the target's shape on the fusion (an fc) of
    target features and the token embedding, then an LM head, run once per depth.

    The first step consumes the features of every token the last verify accepted (a+1 query
    tokens per sequence); later steps feed the nodes being expanded (1 for a chain). The head
    shares the target's LM head unless it has its own smaller one (EAGLE-3).
    """

    fused_features: ClassVar[int] = 2  # fc input: [feature; embedding] = 2h
    own_vocab: ClassVar[int | None] = None
    # whether the fc runs on the first pass only (the target's features), later steps feeding
    # the head's own hidden state as it is; else it fuses [hidden; embedding] at every step
    fc_first_pass_only: ClassVar[bool] = False
    # the head layer's fused QKV reads [embedding; hidden] (2h) instead of h
    wide_qkv: ClassVar[bool] = False

    @property
    def moe_head(self) -> bool:
        """Whether the head's layer is the target's MoE layer: EAGLE heads are Llama layers."""
        return False

    def _configure(self, cfg: MethodConfig) -> None:
        target = self.target
        vocab = cfg.draft_vocab_size or self.own_vocab or target.vocab_size
        # one decoder layer of the target's widths and attention; a dense MLP (EAGLE heads are
        # Llama layers), or the target's own MoE layer for its MTP module (MTP)
        self.head = target.one_layer(self.moe_head, vocab, f"{target.id}-{self.name}")
        if vocab == target.vocab_size:  # its logits from the target's own LM head
            self.cost.share_lm_head(self.head)
        # draft_at's answers by (batch, K, tree nodes): a closed loop asks the same few
        self._chains: dict[tuple[int, int, int | None], FixedChain | None] = {}
        self._fc_by_tokens: dict[tuple[int, bool], float] = {}  # the hot loop repeats a few
        self._rows_by_widths: dict[tuple[int, ...], tuple[tuple[int, int], ...]] = {}
        self._plain: PlainForward | None | bool = False  # False: not looked up yet

    def _draft(self, step: DraftStep) -> StepCost:
        b, k, kv_sum = len(step.kv_tokens), step.k, step.kv_sum
        # step 1 feeds the features of every token the last verify step yielded (a + 1 each),
        # or of the whole verify width where the engine pads it (Speculator.first_shape)
        total = self._step(self.first_shape(step))
        widths = None if self.tree is None else self.step_widths(k, step.nodes)
        if widths is None or widths.count(1) == len(widths):
            # a chain (or a tree one node wide): K-1 equal steps, at the mean context
            if k > 1:
                later = self._step(BatchShape.uniform(b, 1, kv_sum + b * k / 2.0, b), first=False)
                total = total.plus(later, times=k - 1)
            return total
        for depth, (q, w) in enumerate(self._tree_rows(widths), start=2):
            if w:
                shape = BatchShape.uniform(b, q, kv_sum + b * depth, b * w)
                total = total.plus(self._step(shape, first=False))
        return total

    def _tree_rows(self, widths: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
        """(query tokens, logit rows) per sequence at steps 2..k of a tree. SGLang's draft
        steps feed the nodes being expanded; vLLM's static tree runs each level over every
        draft so far and takes logits at the newest level only (EagleProposer.propose_tree:
        ``query_len = total_num_drafts``, the inputs concatenated level by level;
        ``cu_drafts_per_level``)."""
        rows = self._rows_by_widths.get(widths)
        if rows is None:
            cumulative = (
                self.engine.family == "vllm"
                and self.tree is not None
                and not self.tree.shape.dynamic
            )
            done, out = 0, []
            for w in widths:
                done += w
                out.append((done if cumulative else w, w))
            rows = self._rows_by_widths[widths] = tuple(out)
        return rows

    def draft_s(self, step: DraftStep) -> float:
        """:meth:`draft_cost`'s ``total_s`` on a plain head, as floats: the same sums, the
        same forwards and the same K-1 scaling (a chain) or additions depth by depth (a tree),
        field by field, with no ``BatchShape`` or ``StepCost`` built
        (:mod:`~simspec.engine.costmodel.plain`)."""
        plain = self._plain_head()
        b, k = len(step.kv_tokens), step.k
        kv, q = step.kv_tokens, step.last_step_tokens
        counts = q.dtype is _INT64 and kv.dtype is _INT64
        if plain is None or b == 0 or k == 0 or not counts:
            return self.draft_cost(step).total_s
        kv_sum, overhead = step.kv_sum, self.draft_overhead_s
        if w := self.padded_first(k, step.nodes):
            # step 1: BatchShape.uniform(b, w, kv_sum, b)'s sums (the verify width, padded)
            t = b * w
            first = plain.parts(
                t, b, b, float(b * w * w), w * kv_sum, kv_sum, overhead, self._fc(t)
            )
        else:
            # step 1: BatchShape.of(q, kv, b, kv_sum)'s sums
            t = int(q.sum()) if step.q_sum is None else step.q_sum
            first = plain.parts(
                t, b, b, float(q.dot(q)), float(q.dot(kv)), kv_sum, overhead, self._fc(t)
            )
        return self._draft_after(plain, first, b, k, step.nodes, kv_sum)

    def draft_s_one(self, kv: int, last: int, kv_sum: float, k: int, nodes: int | None) -> float:
        """:meth:`draft_s` of one sequence with ``kv`` tokens in KV whose last step made
        ``last`` tokens (``kv_sum``: ``float(kv)``), from the integers: the same sums (a
        one-element dot is the integers' product) and the same forwards, without the
        step's arrays (a request decoding alone builds none). A head off the plain path, or
        no draft, answers as :meth:`draft_s` does."""
        plain = self._plain_head()
        if plain is None or k == 0:
            q, context = np.array([last], dtype=np.int64), np.array([kv], dtype=np.int64)
            return self.draft_s(DraftStep(context, q, kv_sum, k, nodes, last))
        overhead = self.draft_overhead_s
        if w := self.padded_first(k, nodes):
            first = plain.parts(w, 1, 1, float(w * w), w * kv_sum, kv_sum, overhead, self._fc(w))
        else:
            first = plain.parts(
                last, 1, 1, float(last * last), float(last * kv), kv_sum, overhead, self._fc(last)
            )
        return self._draft_after(plain, first, 1, k, nodes, kv_sum)

    def _draft_after(
        self,
        plain: PlainForward,
        first: Parts,
        b: int,
        k: int,
        nodes: int | None,
        kv_sum: float,
    ) -> float:
        """:meth:`draft_s` once its first forward's fields are known: the later steps, a
        chain's or a tree's, added to them as :meth:`draft_cost` adds them."""
        overhead = self.draft_overhead_s
        if k == 1:
            g, a, lm, e, c, o = first
            return g + a + lm + e + c + o
        widths = None if self.tree is None else self.step_widths(k, nodes)
        if widths is not None and widths.count(1) != len(widths):
            # a tree: BatchShape.uniform(b, q, kv_sum + b * depth, b * w) at each depth,
            # added one after another (StepCost.plus)
            g, a, lm, e, c, o = first
            for depth, (q_, w) in enumerate(self._tree_rows(widths), start=2):
                if w:
                    t, ctx = b * q_, kv_sum + b * depth
                    p = plain.parts(
                        t, b * w, b, float(b * q_ * q_), q_ * ctx, ctx, overhead, self._fc(t, False)
                    )
                    g, a, lm = g + p[0], a + p[1], lm + p[2]
                    e, c, o = e + p[3], c + p[4], o + p[5]
            return g + a + lm + e + c + o
        # steps 2..K: BatchShape.uniform(b, 1, mean context, b), added K-1 times (StepCost.plus)
        mean_kv = kv_sum + b * k / 2.0
        later = plain.parts(b, b, b, float(b), mean_kv, mean_kv, overhead, self._fc(b, False))
        return _chain_total(first, later, k - 1)

    def chain_at_once(self, k: int, nodes: int | None) -> bool:
        """Whether :meth:`draft_s_many` prices this draft (a caller that must know before it
        draws anything asks): a chain of ``k`` > 0 whose first forward the engine pads to the
        verify width, on the plain path."""
        if k == 0 or not self.padded_first(k, nodes) or self._plain_head() is None:
            return False
        widths = None if self.tree is None else self.step_widths(k, nodes)
        return widths is None or widths.count(1) == len(widths)

    def draft_s_many(
        self, b: int, k: int, nodes: int | None, kv_sums: np.ndarray
    ) -> np.ndarray | float | None:
        """:meth:`draft_s` of a run of steps of one batch of ``b`` sequences whose context
        sums ``kv_sums`` (one per step) differ, as an array: the same forwards as arrays
        (:meth:`PlainForward.parts_many`) added in the same order, element by element. Only
        for a chain whose first forward the engine pads to the verify width (vLLM V1's
        default: then the last step's tokens do not enter); None elsewhere (a tree, SGLang's
        draft extend, a head off the plain path), where :meth:`draft_s` runs step by step."""
        plain = self._plain_head()
        if plain is None or b == 0 or not self.chain_at_once(k, nodes):
            return None
        w = self.padded_first(k, nodes)
        overhead, t = self.draft_overhead_s, b * w
        first = plain.parts_many(t, b, b, float(b * w * w), w, kv_sums, overhead, self._fc(t))
        if first is None:
            return None
        if k == 1:
            g, a, lm, e, c, o = first
            return g + a + lm + e + c + o
        mean_kv = kv_sums + b * k / 2.0
        later = plain.parts_many(b, b, b, float(b), 1, mean_kv, overhead, self._fc(b, False))
        if later is None:
            return None
        return _chain_total(first, later, k - 1)

    def draft_at(self, b: int, k: int, nodes: int | None) -> FixedChain | None:
        """:meth:`draft_s` of steps of one batch of ``b`` sequences whose context sum alone
        changes, as an object that answers for each context sum (the forwards' shapes
        looked up once: :meth:`PlainForward.at`), where :meth:`draft_s_many` applies (a
        padded chain on the plain path); None elsewhere."""
        key = (b, k, nodes)
        if key in self._chains:
            return self._chains[key]
        chain = None
        plain = self._plain_head()
        if plain is not None and b > 0 and self.chain_at_once(k, nodes):
            w = self.padded_first(k, nodes)
            overhead, t = self.draft_overhead_s, b * w
            first = plain.at(t, b, b, float(b * w * w), w, overhead, self._fc(t))
            later = plain.at(b, b, b, float(b), 1, overhead, self._fc(b, False)) if k > 1 else None
            assert first is not None  # b * w tokens, b > 0
            chain = FixedChain(first, later, b * k / 2.0, k - 1)
        self._chains[key] = chain
        return chain

    def merged_prompt_s(
        self, chain: FixedChain, kv_sum: float, first_s: float, prompt: BatchShape
    ) -> float | None:
        """:meth:`prompt_s` of the step whose decodes draft ``chain`` (:meth:`draft_at`) at
        context sum ``kv_sum``, where the engine runs the prompts in their first forward
        (``draft_prompt_in_first_pass``): that forward widened by the prompts, from the
        shapes' sums as ``BatchShape.__add__`` adds them, less the first forward's
        ``first_s`` (``FixedChain.seconds_and_first``): the same floats as ``prompt_s``.
        None where the prompts run apart (the caller asks :meth:`prompt_s`)."""
        if not self._prompt_merged:
            return None
        if prompt.num_seqs == 0:
            return 0.0
        plain, first = self._plain_head(), chain.first
        assert plain is not None  # the chain's forwards are its
        w, b = first.width, first.tokens // first.width
        t = first.tokens + prompt.num_tokens
        g, a, lm, e, c, o = plain.parts(
            t, b + prompt.logit_tokens, b + prompt.num_seqs,
            float(b * w * w) + prompt.sum_q_sq, w * kv_sum + prompt.sum_q_kv,
            kv_sum + prompt.sum_kv, self.draft_overhead_s, self._fc(t),
        )  # fmt: skip
        return g + a + lm + e + c + o - first_s

    def prompt_s(self, prompt: BatchShape, decoding: DraftStep | None = None) -> float:
        """The head's pass over the step's prompt chunks, filling its KV cache with the
        prompt: vLLM's proposer runs its first forward over every token the target step
        scheduled, prompt chunks included (EagleProposer.propose, target_token_ids and
        target_hidden_states of the whole batch, logits at each request's last token), so
        there the prompts widen the decodes' first draft forward (``decoding``'s); SGLang's EAGLE
        worker runs forward_draft_extend over a prefilled batch (CaptureHiddenMode.LAST), a
        forward of its own (no host overhead of its own)."""
        plain = self._plain_head()
        if plain is None:
            return self._prompt_pass_s(
                lambda batch, over: self._step(batch, overhead_s=over).total_s, prompt, decoding
            )

        def step_s(batch: BatchShape, overhead_s: float | None) -> float:
            """:meth:`_step`'s ``total_s`` as :meth:`draft_s` sums it: the same fields, as
            floats, in the same order (no ``StepCost`` built; a general step runs this twice
            where vLLM merges the prompts into the first draft forward)."""
            over = self.draft_overhead_s if overhead_s is None else overhead_s
            t = batch.num_tokens
            g, a, lm, e, c, o = plain.parts(
                t, batch.logit_tokens, batch.num_seqs, batch.sum_q_sq, batch.sum_q_kv,
                batch.sum_kv, over, self._fc(t),
            )  # fmt: skip
            return g + a + lm + e + c + o

        return self._prompt_pass_s(step_s, prompt, decoding)

    def _plain_head(self) -> PlainForward | None:
        """The head's forwards as plain floats (:meth:`CostModel.plain`), where this class's
        own draft and step run them (a subclass that changes either keeps the general
        path); None elsewhere. Built on first use."""
        plain = self._plain
        if plain is False:
            own = type(self)._draft is EagleHead._draft and type(self)._step is EagleHead._step
            plain = self._plain = self.cost.plain(self.head) if own else None
        # looked up: no longer False (no cast() call: the hot loop asks this a few times a step)
        return plain  # type: ignore[return-value]

    def _fc(self, tokens: int, first: bool = True) -> float:
        """The GEMMs a head runs beyond its layer's for ``tokens`` tokens (remembered by
        count): the fc over the fused inputs (on a ``first`` pass over the target's features,
        or every pass where it fuses each step's input), and the wider half of a 2h QKV."""
        fc = self._fc_by_tokens.get((tokens, first))
        if fc is None:
            h, ops = self.target.hidden_size, self.cost
            fc = 0.0
            if first or not self.fc_first_pass_only:
                fc = ops.gemm_time(tokens, self.fused_features * h, h)
            if self.wide_qkv and not self.head.is_mla:
                qkv = self.head.q_dim // ops.tp + 2 * self.head.kv_dim_per_gpu(ops.tp)
                fc += ops.gemm_time(tokens, 2 * h, qkv) - ops.gemm_time(tokens, h, qkv)
            self._fc_by_tokens[(tokens, first)] = fc
        return fc

    def _step(
        self, batch: BatchShape, overhead_s: float | None = None, first: bool = True
    ) -> StepCost:
        """One pass of the head, with the GEMMs beyond its layer's that feed it (:meth:`_fc`;
        ``first``: a pass over the target's features); host overhead: a draft step's, unless
        ``overhead_s`` says otherwise."""
        overhead = self.draft_overhead_s if overhead_s is None else overhead_s
        fc = self._fc(batch.num_tokens, first)
        return self.cost.forward(self.head, batch, overhead_s=overhead, extra_gemm_s=fc)

    def extra_weight_bytes(self) -> float:
        h = self.target.hidden_size
        params = self.head.layer_params + self.fused_features * h * h + self._wide_qkv_params()
        own_head = self.head.vocab_size != self.target.vocab_size
        if own_head:
            params += self.head.vocab_size * h
        if self.apart:  # on its own GPUs: its own copy of what it shared (embedding, LM head)
            params += self.target.vocab_size * h * (1 if own_head else 2)
        return self._params_bytes(params)

    def extra_kv_bytes_per_token(self) -> float:
        # each attention rank caches its own requests over its tp/dp GPUs, as the target
        return self.head.kv_bytes_per_token_per_gpu(
            self.cost.layout.attn_tp, layers=1, dtype_bytes=self.cost.kv_bytes
        )

    def _wide_qkv_params(self) -> int:
        """The weights a 2h QKV holds beyond the layer's h-wide one."""
        if not self.wide_qkv or self.head.is_mla:
            return 0
        return self.target.hidden_size * (self.head.q_dim + 2 * self.head.kv_dim)


class FixedChain:
    """:meth:`EagleHead.draft_s` of a padded chain at one batch size and K, for each context
    sum (:meth:`EagleHead.draft_at`): the same forwards (``FixedForward.parts``: ``parts``'
    floats) added in the same order, so each answer is ``draft_s``' float bit for bit."""

    __slots__ = ("first", "later", "half", "times")

    def __init__(
        self, first: FixedForward, later: FixedForward | None, half: float, times: int
    ) -> None:
        self.first, self.later, self.half, self.times = first, later, half, times

    def seconds(self, kv_sum: float) -> float:
        """The draft's seconds at context sum ``kv_sum`` (steps 2..K at the mean context)."""
        return self.seconds_and_first(kv_sum)[0]

    def seconds_and_first(self, kv_sum: float) -> tuple[float, float]:
        """:meth:`seconds`, and of them the first forward's alone (its fields summed in
        ``StepCost``'s order): what a prompt merged into that forward is priced against
        (:meth:`EagleHead.merged_prompt_s`)."""
        g, a, lm, e, c, o = first = self.first.parts(kv_sum)
        first_s = g + a + lm + e + c + o
        if self.later is None:  # k = 1
            return first_s, first_s
        # mean_kv is both sum_q_kv (one query token each: 1 * mean_kv) and sum_kv
        return _chain_total(first, self.later.parts(kv_sum + self.half), self.times), first_s


def _chain_total(first: Any, later: Any, times: int) -> Any:
    """A chain's draft seconds: its first forward's fields plus ``times`` later forwards',
    field by field (StepCost.plus), summed in StepCost's order (``total_s``). Floats or arrays
    alike (:meth:`EagleHead.draft_s`, :meth:`EagleHead.draft_s_many`): the same operations."""
    g = first[0] + later[0] * times
    a = first[1] + later[1] * times
    lm = first[2] + later[2] * times
    e = first[3] + later[3] * times
    c = first[4] + later[4] * times
    o = first[5] + later[5] * times
    return g + a + lm + e + c + o


class Eagle1(EagleHead):
    """EAGLE-1: the head drafts a chain or a static tree."""

    name = "eagle1"


class Eagle2(EagleHead):
    """EAGLE-2: the EAGLE-1 head drafting a dynamic tree, expanded by draft confidence."""

    name = "eagle2"


class Eagle3(EagleHead):
    """EAGLE-3: multi-layer feature fusion (fc 3h -> h) and a reduced draft vocabulary. The
    fc fuses the target's low, middle and high features on the first pass only; later steps
    feed the head's own hidden state (vLLM llama_eagle3.py ``combine_hidden_states``, called
    on the target's hidden states; SGLang llama_eagle3.py applies ``fc`` only when the
    hidden state is 3h wide). The layer's QKV reads [embedding; hidden] concatenated
    (``qkv_input_size = 2 * self.hidden_size`` for layer 0 in vLLM's LlamaDecoderLayer)."""

    name = "eagle3"
    fused_features = 3
    fc_first_pass_only = True
    wide_qkv = True
    own_vocab = EAGLE3_DRAFT_VOCAB

    def _configure(self, cfg: MethodConfig) -> None:
        super()._configure(cfg)
        # the head the target's EAGLE-3 checkpoints were trained as, where it is not one layer
        # of the target's widths (QA: Llama-4 Scout's is 32,768 wide, not the target's 16,384;
        # Kimi-K2's runs grouped-query attention, not the target's MLA)
        if self.name == "eagle3":
            self.head = eagle3_head(self.head, self.target.id)
            # the engines split the head's attention over the target's GPUs too (QA:
            # DeepSeek-V3's 56-head head priced at 3.5 heads a GPU over tp 16)
            if why := eagle3_head_refusal(self.target, self.cost.layout.attn_tp):
                raise InputError(
                    "tp", f"{why}: vLLM and SGLang run it at the target's tensor parallelism"
                )
