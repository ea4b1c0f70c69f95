"""Speculative-decoding methods: one interface, one registry.

A speculator says, for the decoding sequences of one iteration, how long drafting takes (through
the cost model, from the draft's own shapes and steps), how many query tokens each sequence sends
to the verify pass (a chain of K+1, a tree of N+1, a lookahead window), how deep a step can
accept, and how much extra GPU memory it needs. Acceptance is sampled separately
(:mod:`simspec.engine.acceptance`); tree methods hand it their
:class:`~simspec.engine.acceptance.inversion.TreeShape`.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np

from simspec.catalog.hardware import EngineProfile
from simspec.catalog.models import BYTES_PER_PARAM, ModelShape, load_model
from simspec.config import MethodConfig, TreeKind
from simspec.engine.acceptance.inversion import TreeShape
from simspec.engine.acceptance.trees import Tree, best_tree, from_paths
from simspec.engine.costmodel import BatchShape, CostModel, StepCost
from simspec.errors import InputError


class Speculator:
    """Base: plain autoregressive decoding (no draft, one query token per sequence)."""

    name: ClassVar[str] = "autoregressive"
    summary: ClassVar[str] = "plain decoding, one token per step"
    needs_acceptance: ClassVar[bool] = False
    default_tree: ClassVar[TreeKind] = "chain"
    trees: ClassVar[tuple[TreeKind, ...]] = ("chain",)  # the shapes the method supports
    # mean α at depth d = α_1 · decay^(d-1); 1 for drafters that see the tokens they drafted
    depth_decay: ClassVar[float] = 1.0
    # whose acceptance heterogeneity applies (simspec/data/acceptance_spread.yaml): a learned
    # drafter's (the EAGLE-3 trace) or a lookup's (the n-gram trace)
    drafter_kind: ClassVar[Literal["learned", "lookup"]] = "learned"

    def __init__(
        self, cfg: MethodConfig, target: ModelShape, cost: CostModel, engine: EngineProfile
    ) -> None:
        self.cfg, self.target, self.cost, self.engine = cfg, target, cost, engine
        self.k = 0 if not self.needs_acceptance else cfg.k
        self._draft_overhead = engine["draft_step_overhead_s"]
        kind = cfg.tree or self.default_tree
        if kind not in self.trees:
            raise InputError(
                f"methods.{self.name}.tree",
                f"{self.name} drafts a {' or '.join(self.trees)}, not a {kind}",
            )
        self.tree_kind: TreeKind = kind
        self.tree_shape: TreeShape | None = None
        self.trees: dict[int, Tree] = {}  # static trees by node budget (widths set draft costs)
        self._explicit = False
        if cfg.tree_paths and self.k > 0:
            if kind != "static":
                raise InputError(f"methods.{self.name}.tree_paths", "an explicit tree is static")
            try:
                tree = from_paths(cfg.tree_paths)
            except ValueError as exc:
                raise InputError(f"methods.{self.name}.tree_paths", str(exc)) from None
            self._explicit = True
            self.k = tree.max_depth
            self.tree_shape = TreeShape(tree.nodes, max(tree.rank), self.k)
            self.trees = {tree.nodes: tree}
        elif kind != "chain" and self.k > 0:
            nodes = cfg.tree_nodes or self.k
            if nodes < self.k:
                raise InputError(f"methods.{self.name}.tree_nodes", "must be >= k (the depth)")
            self.tree_shape = TreeShape(nodes, cfg.tree_topk or 1, self.k, kind == "dynamic")

    # -- shape of a step -------------------------------------------------------------------
    @property
    def max_accept(self) -> int:
        """The most draft tokens one step can accept (the chain length or tree depth)."""
        return self.k

    @property
    def verify_tokens(self) -> int:
        """Query tokens a decoding sequence may send to the verify pass (the widest step)."""
        return max(self.verify_tokens_for(self.k, n) for n in self.budgets or [None])

    def verify_tokens_for(self, k: int, nodes: int | None = None) -> int:
        if k == 0:
            return 1
        if self.tree_shape is not None:
            return (nodes or self.tree_shape.nodes) + 1
        return k + 1

    @property
    def budgets(self) -> list[int]:
        """Tree node budgets a run may use: the tree's, and those of its tree_schedule."""
        if self.tree_shape is None:
            return []
        extra = [n for _, _, n in self.cfg.tree_schedule or () if n > 0]
        return sorted({self.tree_shape.nodes, *extra})

    @property
    def tree(self) -> Tree | None:
        """The static tree at the method's own budget."""
        return self.trees.get(self.tree_shape.nodes) if self.tree_shape else None

    def shape_for(self, batch_size: int) -> tuple[int, int | None]:
        """(draft length, tree budget) this iteration: the Dynamic SD K schedule, the tree
        budget schedule and disable_by_batch_size; (0, None) turns speculation off."""
        cfg = self.cfg
        if self.k == 0 or (cfg.disable_by_batch_size and batch_size >= cfg.disable_by_batch_size):
            return 0, None
        k = self.k
        for start, end, scheduled in cfg.k_schedule or ():
            if start <= batch_size <= end:
                k = scheduled if self.tree_shape is None else (self.k if scheduled else 0)
        if self.tree_shape is None or k == 0:
            return k, None
        nodes = self.tree_shape.nodes
        for start, end, scheduled in cfg.tree_schedule or ():
            if start <= batch_size <= end:
                nodes = scheduled
        return (k, nodes) if nodes else (0, None)

    def k_for(self, batch_size: int) -> int:
        return self.shape_for(batch_size)[0]

    def resolve_tree(self, alpha_mean: np.ndarray, sampled: bool = False) -> None:
        """Build the static trees for the run's mean α profile, one per node budget (for
        recursive rejection sampling of the candidates when the run samples)."""
        if self.tree_shape is not None and not self.tree_shape.dynamic and not self._explicit:
            s = self.tree_shape
            self.trees = {n: best_tree(alpha_mean, n, s.topk, sampled) for n in self.budgets}

    # -- costs -----------------------------------------------------------------------------
    def draft_cost(
        self,
        kv_tokens: np.ndarray,
        last_step_tokens: np.ndarray,
        kv_sum: float,
        k: int,
        nodes: int | None = None,
    ) -> StepCost:
        """Time to draft ``k`` tokens (or a depth-k tree) for the decoding sequences.

        ``kv_tokens``: their context lengths (``kv_sum`` is their sum, which the caller has);
        ``last_step_tokens``: what each one's last verify step yielded (accepted drafts + 1).
        """
        return StepCost()

    def extra_weight_bytes(self) -> float:
        """Draft weights per GPU."""
        return 0.0

    def extra_kv_bytes_per_token(self) -> float:
        """Draft KV cache per token per GPU."""
        return 0.0

    def step_widths(self, k: int, nodes: int | None = None) -> list[int]:
        """Tokens per sequence a sequential drafter processes at steps 2..k: 1 for a chain, the
        previous depth's nodes for a static tree, the expanded top-k for a dynamic one."""
        if self.tree_shape is None:
            return [1] * (k - 1)
        if self.tree_shape.dynamic:
            return [self.tree_shape.topk] * (k - 1)
        tree = self.trees.get(nodes or self.tree_shape.nodes)
        widths = tree.width_by_depth() if tree else [1] * k
        return [widths[d] if d < len(widths) else 0 for d in range(k - 1)]

    def _sequential_heads(self, tokens: list[int], d_in: int, d_out: int, k: int) -> StepCost:
        """Drafting by a small head run once per step: a (d_in -> d_out) layer and an LM head
        over the step's tokens, plus the engine's per-draft-step overhead (Hydra, ReDrafter)."""
        h, v = self.target.hidden_size, self.target.vocab_size // self.cost.tp
        total = 0.0
        for m in tokens:
            if m:
                total += self.cost.gemm_time(m, d_in, d_out) + self.cost.gemm_time(m, h, v)
        return StepCost(gemm_s=total, overhead_s=k * self._draft_overhead)

    def _params_bytes(self, params: float) -> float:
        return params * BYTES_PER_PARAM / self.cost.tp


def lookup_cost(engine: EngineProfile, seqs: int) -> StepCost:
    """Host time of an n-gram lookup for ``seqs`` decoding sequences (no GPU work)."""
    return StepCost(overhead_s=engine["ngram_cpu_s_per_seq"] * seqs)


class Autoregressive(Speculator):
    name = "autoregressive"


class DraftModel(Speculator):
    """Leviathan/Chen: a separate small LM drafts K tokens in K sequential forwards, with its
    own weights and KV cache; it must share the target's tokenizer."""

    name = "draft_model"
    summary = "separate small LM, K sequential forwards, own weights and KV"
    needs_acceptance = True

    def __init__(
        self, cfg: MethodConfig, target: ModelShape, cost: CostModel, engine: EngineProfile
    ) -> None:
        super().__init__(cfg, target, cost, engine)
        if not cfg.draft_model:
            raise InputError(
                "methods.draft_model", "draft_model needs a draft model preset or path"
            )
        self.draft = load_model(cfg.draft_model)
        if self.draft.vocab_size != target.vocab_size:
            raise InputError(
                "methods.draft_model",
                f"draft {self.draft.id!r} has vocabulary "
                f"{self.draft.vocab_size}, target has {target.vocab_size}: "
                "draft and target must share a tokenizer",
            )

    def draft_cost(
        self,
        kv_tokens: np.ndarray,
        last_step_tokens: np.ndarray,
        kv_sum: float,
        k: int,
        nodes: int | None = None,
    ) -> StepCost:
        b = len(kv_tokens)
        if b == 0 or k == 0:
            return StepCost()
        # K steps of one token each; context grows by one per step, so cost the mean context
        kv_mean_sum = kv_sum + b * (k - 1) / 2.0
        step = self.cost.forward(
            self.draft, BatchShape.uniform(b, 1, kv_mean_sum, b), overhead_s=self._draft_overhead
        )
        return step.scaled(k)

    def extra_weight_bytes(self) -> float:
        return self._params_bytes(self.draft.num_params)

    def extra_kv_bytes_per_token(self) -> float:
        return self.draft.kv_bytes_per_token_per_gpu(self.cost.tp)


class EagleHead(Speculator):
    """EAGLE-style drafting: one decoder layer of the target's shape on the fusion (an fc) of
    target features and the token embedding, then an LM head, run once per depth.

    The first step consumes the features of every token the last verify accepted (a+1 query
    tokens per sequence); later steps feed the nodes being expanded (1 for a chain). The head
    shares the target's LM head unless it has its own smaller one (EAGLE-3).
    """

    fused_features: ClassVar[int] = 2  # fc input: [feature; embedding] = 2h
    own_vocab: ClassVar[int | None] = None

    def __init__(
        self, cfg: MethodConfig, target: ModelShape, cost: CostModel, engine: EngineProfile
    ) -> None:
        super().__init__(cfg, target, cost, engine)
        vocab = cfg.draft_vocab_size or self.own_vocab or target.vocab_size
        self.head = target.model_copy(
            update={"num_hidden_layers": 1, "vocab_size": vocab, "id": f"{target.id}-{self.name}"}
        )
        self._fc_by_tokens: dict[int, float] = {}  # the hot loop repeats a few counts

    def draft_cost(
        self,
        kv_tokens: np.ndarray,
        last_step_tokens: np.ndarray,
        kv_sum: float,
        k: int,
        nodes: int | None = None,
    ) -> StepCost:
        b = len(kv_tokens)
        if b == 0 or k == 0:
            return StepCost()
        # step 1 feeds the features of every token the last verify step yielded (a + 1 each)
        total = self._step(BatchShape.of(last_step_tokens, kv_tokens, b, kv_sum=kv_sum))
        widths = self.step_widths(k, nodes)
        if all(w == 1 for w in widths):  # a chain: K-1 equal steps, costed at the mean context
            if k > 1:
                later = self._step(BatchShape.uniform(b, 1, kv_sum + b * k / 2.0, b))
                total = total.plus(later, times=k - 1)
            return total
        for depth, w in enumerate(widths, start=2):
            if w:
                total = total.plus(self._step(BatchShape.uniform(b, w, kv_sum + b * depth, b * w)))
        return total

    def _step(self, batch: BatchShape) -> StepCost:
        """One pass of the head, with the fc over the fused inputs that feeds it."""
        tokens = batch.num_tokens
        fc = self._fc_by_tokens.get(tokens)
        if fc is None:
            h = self.target.hidden_size
            fc = self._fc_by_tokens[tokens] = self.cost.gemm_time(
                tokens, self.fused_features * h, h
            )
        return self.cost.forward(self.head, batch, overhead_s=self._draft_overhead, extra_gemm_s=fc)

    def extra_weight_bytes(self) -> float:
        h = self.target.hidden_size
        params = self.head.layer_params + self.fused_features * h * h
        if self.head.vocab_size != self.target.vocab_size:
            params += self.head.vocab_size * h
        return self._params_bytes(params)

    def extra_kv_bytes_per_token(self) -> float:
        return self.head.kv_bytes_per_token_per_gpu(self.cost.tp, layers=1)


class Eagle1(EagleHead):
    name = "eagle1"
    summary = "EAGLE-1: one-layer head on (feature, token) + target LM head; chain or static tree"
    needs_acceptance = True
    default_tree = "static"
    trees = ("chain", "static")


class Eagle2(EagleHead):
    name = "eagle2"
    summary = "EAGLE-2: EAGLE-1 head + dynamic tree expanded by draft confidence, reranked"
    needs_acceptance = True
    default_tree = "dynamic"
    trees = ("chain", "static", "dynamic")


# EAGLE-3 fuses low, middle and high target features (fc over 3h) and drafts over a reduced
# vocabulary: draft_vocab_size 32000 in the EAGLE-3 head config for Llama-3.1-8B (SpecForge
# configs/llama3-8B-eagle3.json).
EAGLE3_DRAFT_VOCAB = 32000


class Eagle3(EagleHead):
    name = "eagle3"
    summary = "EAGLE-3: multi-layer feature fusion (fc 3h->h), reduced draft vocabulary"
    needs_acceptance = True
    fused_features = 3
    own_vocab = EAGLE3_DRAFT_VOCAB
    trees = ("chain", "static", "dynamic")


class MTP(EagleHead):
    """DeepSeek-V3 multi-token prediction: one transformer block fed [RMSNorm(h); RMSNorm(emb)]
    through a 2h->h projection, then the shared output head (DeepSeek-V3 report §2.2); engines
    reuse the one module for K > 1 (vLLM, SGLang)."""

    name = "mtp"
    summary = "DeepSeek-V3 MTP: one block + 2h->h projection per step, shared LM head"
    needs_acceptance = True


class Medusa(Speculator):
    """Medusa: K heads on the last hidden state, each a residual block (h x h) and its own LM
    head, computed after the target's pass in one shot; a static tree of their top-k
    candidates is verified with tree attention. Heads predict independently of one another,
    so deeper heads accept less (depth_decay)."""

    name = "medusa1"
    summary = "Medusa-1: K independent heads (resblock + LM head), static tree, frozen base"
    needs_acceptance = True
    default_tree = "static"
    trees = ("chain", "static")
    # Teacher-forced top-1 accuracy of Medusa-1 heads falls from ~0.58 (head 1) to ~0.13
    # (head 5) in the Medusa repo's assets/medusa_acc.csv (shared/validation/README.md, Medusa
    # (c)): a factor (0.13 / 0.58) ** (1/4) = 0.688 per head.
    depth_decay = 0.688

    def draft_cost(
        self,
        kv_tokens: np.ndarray,
        last_step_tokens: np.ndarray,
        kv_sum: float,
        k: int,
        nodes: int | None = None,
    ) -> StepCost:
        b = len(kv_tokens)
        if b == 0 or k == 0:
            return StepCost()
        h, v = self.target.hidden_size, self.target.vocab_size // self.cost.tp
        per_head = self.cost.gemm_time(b, h, h) + self.cost.gemm_time(b, h, v)
        return StepCost(gemm_s=k * per_head)  # inside the target's graph: no launch overhead

    def extra_weight_bytes(self) -> float:
        h = self.target.hidden_size
        return self._params_bytes(self.k * (h * h + h * self.target.vocab_size))


class Medusa2(Medusa):
    name = "medusa2"
    summary = "Medusa-2: Medusa heads trained jointly with the base (higher acceptance)"


class Hydra(Speculator):
    """Hydra: sequentially dependent heads, each conditioned on the draft token before it
    ([hidden; embedding] -> h, then an LM head), so drafting is D small sequential steps and
    deep positions keep their acceptance; static tree like Medusa's."""

    name = "hydra"
    summary = "Hydra: sequential heads conditioned on earlier draft tokens, static tree"
    needs_acceptance = True
    default_tree = "static"
    trees = ("chain", "static")

    def draft_cost(
        self,
        kv_tokens: np.ndarray,
        last_step_tokens: np.ndarray,
        kv_sum: float,
        k: int,
        nodes: int | None = None,
    ) -> StepCost:
        b = len(kv_tokens)
        if b == 0 or k == 0:
            return StepCost()
        h = self.target.hidden_size
        tokens = [b * w for w in [1, *self.step_widths(k, nodes)]]
        return self._sequential_heads(tokens, 2 * h, h, k)

    def extra_weight_bytes(self) -> float:
        h = self.target.hidden_size
        return self._params_bytes(self.k * (2 * h * h + h * self.target.vocab_size))


class ReDrafter(Speculator):
    """ReDrafter: an RNN draft head on the target's last hidden state runs a beam search of
    ``beam_width`` beams for ``k`` steps; the beams are verified together. The deduplicated
    beams are modelled as the best tree of W x k tokens with W children per node (the
    verify width is then an upper bound: prefix sharing sends fewer tokens)."""

    name = "redrafter"
    summary = "ReDrafter: RNN draft head, beam search (width x length), beams verified together"
    needs_acceptance = True
    default_tree = "static"
    trees = ("static",)
    # the configuration its only published acceptance was measured with: beam width 48, length
    # 16 (apple/ml-recurrent-drafter README, method_presets.yaml redrafter config_source)
    default_beams = 48

    def __init__(
        self, cfg: MethodConfig, target: ModelShape, cost: CostModel, engine: EngineProfile
    ) -> None:
        super().__init__(cfg, target, cost, engine)
        self.beams = cfg.beam_width or self.default_beams
        if self.k > 0:
            self.tree_shape = TreeShape(self.beams * self.k, self.beams, self.k)

    def draft_cost(
        self,
        kv_tokens: np.ndarray,
        last_step_tokens: np.ndarray,
        kv_sum: float,
        k: int,
        nodes: int | None = None,
    ) -> StepCost:
        b = len(kv_tokens)
        if b == 0 or k == 0:
            return StepCost()
        h = self.target.hidden_size
        # GRU-style cell on [hidden; embedding]: three gates of (2h -> h), then the LM head;
        # one sequence's state at the first step, its beams after
        tokens = [b if step == 0 else b * self.beams for step in range(k)]
        return self._sequential_heads(tokens, 2 * h, 3 * h, k)

    def extra_weight_bytes(self) -> float:
        h = self.target.hidden_size
        return self._params_bytes(6 * h * h + h * self.target.vocab_size)


class Lookahead(Speculator):
    """Lookahead decoding: no draft model. Every target step also runs a Jacobi lookahead
    branch (window W over N-1 future positions) and verifies G n-gram candidates of N-1 tokens
    from its pool, so the verify pass widens to 1 + (W + G)(N - 1) tokens per sequence; one
    step accepts at most N - 1 drafts."""

    name = "lookahead"
    summary = "Lookahead: Jacobi lookahead branch (W, N) + verification branch (G), no draft"
    needs_acceptance = True
    drafter_kind = "lookup"
    # Spec-Bench's Lookahead runs (the source of its presets): --level 5 --window 7 --guess 7
    # (method_presets.yaml lookahead config_source)
    default_window, default_ngram, default_guesses = 7, 5, 7

    def __init__(
        self, cfg: MethodConfig, target: ModelShape, cost: CostModel, engine: EngineProfile
    ) -> None:
        super().__init__(cfg, target, cost, engine)
        self.window = cfg.lookahead_window or self.default_window
        self.ngram = cfg.lookahead_ngram or self.default_ngram
        self.guesses = (
            self.default_guesses if cfg.lookahead_guesses is None else (cfg.lookahead_guesses)
        )
        self.k = self.ngram - 1

    def verify_tokens_for(self, k: int, nodes: int | None = None) -> int:
        return 1 if k == 0 else 1 + (self.window + self.guesses) * (self.ngram - 1)

    def draft_cost(
        self,
        kv_tokens: np.ndarray,
        last_step_tokens: np.ndarray,
        kv_sum: float,
        k: int,
        nodes: int | None = None,
    ) -> StepCost:
        # n-gram pool bookkeeping on the CPU, like prompt lookup's
        return lookup_cost(self.engine, len(kv_tokens))


class NGram(Speculator):
    """Prompt lookup: match the last n-gram in the prompt and output so far, on the CPU.

    Every decoding sequence is charged a full chain of K in the verify pass (an upper bound:
    an engine sends fewer tokens when no n-gram matches; the traces do not record misses).
    """

    name = "ngram"
    summary = "prompt/output n-gram lookup on the CPU (vLLM ngram)"
    needs_acceptance = True
    drafter_kind = "lookup"

    def draft_cost(
        self,
        kv_tokens: np.ndarray,
        last_step_tokens: np.ndarray,
        kv_sum: float,
        k: int,
        nodes: int | None = None,
    ) -> StepCost:
        return lookup_cost(self.engine, len(kv_tokens))


class PLD(NGram):
    name = "pld"
    summary = "prompt lookup decoding (Saxena), the n-gram lookup of the HF/Spec-Bench papers"


class Suffix(NGram):
    """SuffixDecoding: a suffix tree over the prompt and earlier outputs proposes
    continuations on the CPU; costed like prompt lookup, with K the speculation cap."""

    name = "suffix"
    summary = "SuffixDecoding: suffix-tree lookup over prompt and earlier outputs (CPU)"


class SelfSpec(Speculator):
    """LayerSkip-style self-speculation: the target's first ``draft_layers`` layers plus its LM
    head draft K tokens; no extra weights, and the draft's KV is the target's for those layers."""

    name = "self_spec"
    summary = "LayerSkip early exit: first L' target layers draft; shared weights and KV"
    needs_acceptance = True

    def __init__(
        self, cfg: MethodConfig, target: ModelShape, cost: CostModel, engine: EngineProfile
    ) -> None:
        super().__init__(cfg, target, cost, engine)
        # LayerSkip's Llama-2-7B example exits at layer 8 of 32 (its README's --exit_layer 8)
        self.layers = cfg.draft_layers or max(1, target.num_hidden_layers // 4)
        if self.layers >= target.num_hidden_layers:
            raise InputError(
                f"methods.{self.name}.draft_layers",
                f"must be < the target's {target.num_hidden_layers} layers",
            )

    def draft_cost(
        self,
        kv_tokens: np.ndarray,
        last_step_tokens: np.ndarray,
        kv_sum: float,
        k: int,
        nodes: int | None = None,
    ) -> StepCost:
        b = len(kv_tokens)
        if b == 0 or k == 0:
            return StepCost()
        batch = BatchShape.uniform(b, 1, kv_sum + b * (k - 1) / 2.0, b)
        step = self.cost.forward(
            self.target, batch, overhead_s=self._draft_overhead, layers=self.layers
        )
        return step.scaled(k)


SPECULATORS: dict[str, type[Speculator]] = {
    cls.name: cls
    for cls in (
        Autoregressive,
        DraftModel,
        Medusa,
        Medusa2,
        Hydra,
        Eagle1,
        Eagle2,
        Eagle3,
        ReDrafter,
        Lookahead,
        NGram,
        PLD,
        Suffix,
        SelfSpec,
        MTP,
    )
}


def build_speculator(
    cfg: MethodConfig, target: ModelShape, cost: CostModel, engine: EngineProfile
) -> Speculator:
    if cfg.name not in SPECULATORS:
        raise InputError(
            "methods.name", f"unknown method {cfg.name!r}; choose one of {', '.join(SPECULATORS)}"
        )
    spec = SPECULATORS[cfg.name](cfg, target, cost, engine)
    if spec.needs_acceptance and cfg.acceptance is None:
        raise InputError(
            f"methods.{cfg.name}.acceptance", "needs an acceptance model (alpha, tau or trace)"
        )
    if spec.tree_shape is not None and cfg.acceptance.trace is not None:
        raise InputError(
            f"methods.{cfg.name}.acceptance",
            "a tree needs alpha or tau acceptance: traces record chains (use tree: chain)",
        )
    return spec
