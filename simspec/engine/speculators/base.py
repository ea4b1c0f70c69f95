"""The speculator interface: what one speculative-decoding method costs, step by step.

A speculator says, for the decoding sequences of one iteration (a :class:`DraftStep`), how long
drafting takes (through the cost model, from the draft's own shapes and steps), how many query
tokens each sequence sends to the verify pass (a chain of K+1, a tree of N+1, a lookahead
window), how deep a step can accept, and how much extra GPU memory it needs. What the catalogue
says of a method (summary, drafter family, supported shapes, defaults) is read from
:func:`simspec.catalog.methods.method_info`; its draft tree is a
:class:`~simspec.engine.acceptance.trees.DraftTree`; the draft shape under load comes from its
:class:`~simspec.engine.load_policy.LoadPolicy`. Acceptance is sampled separately
(:mod:`simspec.engine.acceptance`) on the :class:`DraftPlan` the speculator hands over.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from simspec.catalog.hardware import EngineProfile
from simspec.catalog.methods import MethodInfo, method_info, stated_topk
from simspec.catalog.models import BYTES_PER_PARAM, ModelShape
from simspec.config import MethodConfig, TreeKind
from simspec.engine.acceptance.samplers import DraftPlan
from simspec.engine.acceptance.trees import DraftTree, Tree, TreeShape, from_paths, uneven_level
from simspec.engine.costmodel import BatchShape, RooflineCostModel, StepCost
from simspec.engine.kv_cache import MemoryDemand
from simspec.engine.load_policy import LoadPolicy, StepShape
from simspec.errors import InputError


# A value: never mutate one. Not ``frozen`` because the hot loop builds one per iteration and a
# frozen dataclass's __init__ is much slower (as for BatchShape).
@dataclass(slots=True)
class DraftStep:
    """The decoding sequences of one iteration, as a drafter sees them."""

    kv_tokens: np.ndarray  # each one's context length
    last_step_tokens: np.ndarray  # what each one's last verify step yielded (accepted + 1)
    kv_sum: float  # the sum of kv_tokens, which the engine has
    k: int  # draft length (tree depth) this step
    nodes: int | None = None  # tree budget this step (None: the method's own, or a chain)
    q_sum: int | None = None  # the sum of last_step_tokens, where the engine has it


class Speculator:
    """One method: its draft shape, draft time and memory.

    A family sets ``name`` (its key in the catalogue and the registry) and overrides what it
    needs: :meth:`_configure` (its own parameters), :meth:`_tree_shape` (a tree not set by
    ``tree_nodes``/``tree_topk``), :meth:`_draft` (the draft time of a step with sequences to
    draft for), :meth:`extra_weight_bytes` and :meth:`extra_kv_bytes_per_token` (its memory),
    :meth:`verify_tokens_for` (a verify pass that is neither a chain nor a tree).
    """

    name: ClassVar[str]
    needs_acceptance: ClassVar[bool] = True
    # mean α at depth d = α_1 · decay^(d-1); 1 for drafters that see the tokens they drafted
    depth_decay: ClassVar[float] = 1.0
    # the draft runs on GPUs of its own tensor parallelism (draft_tp), under a cost model of
    # its own: it cannot read the target's embedding or LM head shards (build_speculator)
    apart: bool = False

    def __init__(
        self, cfg: MethodConfig, target: ModelShape, cost: RooflineCostModel, engine: EngineProfile
    ) -> None:
        self.cfg, self.target, self.cost, self.engine = cfg, target, cost, engine
        self.info: MethodInfo = method_info(self.name)
        self.draft_overhead_s = engine["draft_step_overhead_s"]  # host time per draft forward
        # the first draft forward fed the whole verify width, rejected tokens as padding
        first_pass = not engine.first_pass_methods or self.name in engine.first_pass_methods
        self._pad_first = first_pass and engine.flag("draft_first_pass_padded")
        # the prompts ride in the decodes' first draft forward (vLLM's proposer)
        self._prompt_merged = first_pass and engine.flag("draft_prompt_in_first_pass")
        self.tree_kind: TreeKind = self._tree_kind(cfg)
        self.k = cfg.k if self.needs_acceptance else 0  # draft length (tree depth); 0: none
        self._configure(cfg)
        explicit = self._explicit_tree(cfg)
        shape = self._tree_shape(cfg, explicit)
        self.policy = LoadPolicy.of(cfg, self.k, None if shape is None else shape.nodes)
        longest = max((k for _, _, k in cfg.k_schedule or ()), default=0)
        scheduled = sorted({k for _, _, k in cfg.k_schedule or ()} - {0, self.k})
        if shape is not None and scheduled:
            # a tree keeps its depth under load (LoadPolicy.shape_for): another K would be ignored
            raise InputError(
                f"methods.{self.name}.k_schedule",
                f"{self.name} drafts a tree of depth {shape.depth}, which a K schedule can only "
                f"turn on (K={self.k}) or off (0), not to K={scheduled[0]}; use tree_schedule "
                "to change its budget by batch size",
            )
        if shape is None and longest > self.k:
            # the run's samplers and costs are built for k draft positions at most; the fix is
            # named where it is made (QA: --k, which a schedule replaces, was refused after
            # "set k to at least 5")
            raise InputError(
                f"methods.{self.name}.k_schedule",
                f"K={longest} exceeds k={self.k}, the longest draft the run is built for: "
                f"set the method's own k to at least {longest} (its k in a scenario file, "
                "num_speculative_tokens in a --speculative-config)",
            )
        if explicit is not None and cfg.tree_schedule:
            # an explicit tree has its one size: a band's budget would price a verify wider
            # than the tree walked (QA: a 10-node band verified 11 tokens of a 4-node tree)
            raise InputError(
                f"methods.{self.name}.tree_schedule",
                "an explicit tree (tree_paths) has one node budget, its own: drop "
                "tree_schedule, or give tree_nodes instead of tree_paths",
            )
        if shape is not None and explicit is None:
            for budget in self.policy.budgets:
                self._within_capacity(shape, budget, "tree_schedule")
        self.tree = None if shape is None else DraftTree(shape, self.policy.budgets, explicit)
        self._steps: dict[int, StepShape] = {}  # by batch size

    # -- construction hooks ----------------------------------------------------------------
    def _configure(self, cfg: MethodConfig) -> None:
        """The family's own parameters (its draft model, head, beams, window)."""

    def _tree_kind(self, cfg: MethodConfig) -> TreeKind:
        kind = cfg.tree or self.info.default_tree
        if kind not in self.info.shapes:
            raise InputError(
                f"methods.{self.name}.tree",
                f"{self.name} drafts a {' or '.join(self.info.shapes)}, not a {kind}",
            )
        return kind

    def _explicit_tree(self, cfg: MethodConfig) -> Tree | None:
        """The user's own static tree (``tree_paths``), whose depth becomes the draft length."""
        if not (cfg.tree_paths and self.k > 0):
            return None
        if self.tree_kind != "static":
            raise InputError(f"methods.{self.name}.tree_paths", "an explicit tree is static")
        try:
            tree = from_paths(cfg.tree_paths)
        except ValueError as exc:
            raise InputError(f"methods.{self.name}.tree_paths", str(exc)) from None
        if self.engine.family == "vllm" and (uneven := uneven_level(tree)) is not None:
            # vLLM drafts level by level with one child count per level (EagleProposer
            # child_drafts_per_level = drafts at a level // drafts at the one above; its tree
            # attention asserts a fixed branching factor per level)
            raise InputError(
                f"methods.{self.name}.tree_paths",
                f"depth {uneven}'s nodes have different numbers of children, which vLLM "
                "does not draft (it gives every node of a level the same count): give a tree "
                "whose levels branch evenly",
            )
        self.k = tree.max_depth
        return tree

    def _tree_shape(self, cfg: MethodConfig, explicit: Tree | None) -> TreeShape | None:
        """The draft tree at the method's own node budget; None for a chain."""
        if explicit is not None:
            return TreeShape(explicit.nodes, max(explicit.rank), self.k)
        if self.tree_kind == "chain" or self.k == 0:
            return None
        nodes = cfg.tree_nodes or self.k
        if nodes < self.k:
            raise InputError(f"methods.{self.name}.tree_nodes", "must be >= k (the depth)")
        topk = stated_topk(cfg.tree_topk, nodes, self.k)
        shape = TreeShape(nodes, topk, self.k, self.tree_kind == "dynamic")
        self._within_capacity(shape, nodes, "tree_nodes")
        return shape

    def _within_capacity(self, shape: TreeShape, nodes: int, field: str) -> None:
        """Refuse a node budget the tree cannot hold: its verify pass would be costed wider
        than the tree acceptance walks (a silent mismatch)."""
        if nodes > shape.capacity:
            kind = "dynamic" if shape.dynamic else "static"
            raise InputError(
                f"methods.{self.name}.{field}",
                f"{nodes} draft tokens do not fit a {kind} tree of depth {shape.depth} with "
                f"top-{shape.topk} expansion: allowed {shape.depth}..{shape.capacity} "
                "(raise tree_topk or k, or lower the budget)",
            )

    # -- shape of a step -------------------------------------------------------------------
    @property
    def max_accept(self) -> int:
        """The most draft tokens one step can accept (the chain length or tree depth)."""
        return self.k

    @property
    def verify_tokens(self) -> int:
        """Query tokens a decoding sequence may send to the verify pass (the widest step)."""
        budgets: list[int | None] = [*self.policy.budgets]
        return max(self.verify_tokens_for(self.k, n) for n in budgets or [None])

    def verify_tokens_for(self, k: int, nodes: int | None = None) -> int:
        if k == 0:
            return 1
        if self.tree is not None:
            return (nodes or self.tree.shape.nodes) + 1
        return k + 1

    def padded_first(self, k: int, nodes: int | None = None) -> int:
        """Tokens each sequence feeds the first draft forward where the engine pads it to the
        verify width (vLLM V1's default, ``prepare_inputs_padded``: "all tokens are included
        as inputs to the speculator, with the rejected tokens used as padding"); 0 where it
        feeds the a + 1 tokens the last verify yielded (SGLang's draft extend)."""
        return self.verify_tokens_for(k, nodes) if self._pad_first else 0

    def first_shape(self, step: DraftStep) -> BatchShape:
        """The decoding sequences' first draft forward: the tokens the last verify yielded, or
        the verify width where the engine pads it (:meth:`padded_first`)."""
        b = len(step.kv_tokens)
        if w := self.padded_first(step.k, step.nodes):
            return BatchShape.uniform(b, w, step.kv_sum, b)
        return BatchShape.of(step.last_step_tokens, step.kv_tokens, b, kv_sum=step.kv_sum)

    def step_shape(self, batch_size: int) -> StepShape:
        """This iteration's draft length, tree budget and verify width: the load policy's
        choice at ``batch_size`` (the same at every size without a schedule)."""
        shape = self._steps.get(batch_size)
        if shape is None:
            k, nodes = self.policy.shape_for(batch_size)
            shape = StepShape(k, nodes, self.verify_tokens_for(k, nodes))
            self._steps[batch_size] = shape
        return shape

    def step_widths(self, k: int, nodes: int | None = None) -> tuple[int, ...]:
        """Tokens per sequence a sequential drafter processes at steps 2..k: 1 for a chain,
        the tree's widths by depth (:meth:`DraftTree.widths`) for a tree."""
        return (1,) * (k - 1) if self.tree is None else self.tree.widths(k, nodes)

    def draft_plan(self, alpha: np.ndarray | None, sampled: bool) -> DraftPlan:
        """The draft structure acceptance is sampled on; builds the static trees for the run's
        mean α profile ``alpha`` (for recursive rejection sampling when ``sampled``)."""
        if alpha is not None and self.tree is not None:
            self.tree.build(alpha, sampled)
        return DraftPlan(self.max_accept, self.depth_decay, self.tree, alpha, sampled)

    # -- costs -----------------------------------------------------------------------------
    def draft_cost(self, step: DraftStep) -> StepCost:
        """Time to draft ``step.k`` tokens (or a depth-k tree) for the step's decoding
        sequences; nothing to draft takes no time."""
        if len(step.kv_tokens) == 0 or step.k == 0:
            return StepCost()
        return self._draft(step)

    def draft_s(self, step: DraftStep) -> float:
        """Seconds of :meth:`draft_cost` (a family may answer without building its
        ``StepCost``, with the same float)."""
        return self.draft_cost(step).total_s

    def _draft(self, step: DraftStep) -> StepCost:
        """The family's draft time, for a step with sequences and ``k > 0``."""
        return StepCost()

    def prompt_s(self, prompt: BatchShape, decoding: DraftStep | None = None) -> float:
        """Seconds the draft spends on the prompt chunks the target prefills this step
        (``prompt``: their shape, ``BatchShape.of(chunks, computed, len(chunks),
        prefill=True)``, which the target's verify pass reads too): a drafter with a KV cache
        of its own must hold every prompt token in it. None for drafters without one (heads
        on the last hidden state, lookups). ``decoding``: the step's decoding sequences, whose
        first draft forward an engine that runs both in one pass
        (``draft_prompt_in_first_pass``) widens by the prompts instead of running them apart.
        See :meth:`EagleHead.prompt_s`."""
        return 0.0

    def _prompt_pass_s(
        self,
        forward_s: Callable[[BatchShape, float | None], float],
        prompt: BatchShape,
        decoding: DraftStep | None,
    ) -> float:
        """:meth:`prompt_s` of a drafter whose pass over ``batch`` takes ``forward_s(batch,
        overhead_s)`` seconds: a forward of its own with no host time of its own, or, where the
        engine runs it in the decodes' first draft forward, what the prompts add to that."""
        if prompt.num_seqs == 0:
            return 0.0
        if self._prompt_merged and decoding is not None and len(decoding.kv_tokens) and decoding.k:
            first = self.first_shape(decoding)
            return forward_s(first + prompt, None) - forward_s(first, None)
        return forward_s(prompt, 0.0)

    def extra_weight_bytes(self) -> float:
        """Draft weights per GPU."""
        return 0.0

    def extra_kv_bytes_per_token(self) -> float:
        """Draft KV cache per token per GPU."""
        return 0.0

    def memory_demand(self, max_seqs: int, max_tokens: int) -> MemoryDemand:
        """The draft's memory, and the largest forward the engine profiles: the token budget,
        with one logit row per request (vLLM V1's profile_run samples the last token of each
        of min(tokens, max_num_seqs) dummy requests, _dummy_sampler_run, and its spec-decode
        dummy run one draft token each: the verify positions' logits are not profiled; QA:
        a row per verify position set aside ~1.5 GiB more than vLLM for Llama-3.1-8B)."""
        return MemoryDemand(
            self.extra_weight_bytes(),
            self.extra_kv_bytes_per_token(),
            max_tokens,
            min(max_seqs, max_tokens),
            max_seqs,
            self.verify_tokens,
        )

    def _lm_steps(self, model: ModelShape, step: DraftStep, layers: int | None = None) -> StepCost:
        """K one-token forwards of a draft LM (or of ``model``'s first ``layers``); the context
        grows by one per forward, so each is costed at the mean context."""
        b, k = len(step.kv_tokens), step.k
        batch = BatchShape.uniform(b, 1, step.kv_sum + b * (k - 1) / 2.0, b)
        cost = self.cost.forward(model, batch, overhead_s=self.draft_overhead_s, layers=layers)
        return cost.scaled(k)

    def _params_bytes(self, params: float) -> float:
        """A draft's bf16 weights per GPU: sliced as the target's dense layers are
        (``ParallelLayout.dense_tp``). Under vLLM's DP attention each rank is its own engine
        whose drafter runs at the rank's tp (``--tensor-parallel-size``), so every rank holds
        the draft whole over its tp/dp GPUs (QA: split over all tp, a draft model's weights
        per GPU read 8x too light at dp 8); SGLang's gathered layout slices it over all tp."""
        return params * BYTES_PER_PARAM / self.cost.layout.dense_tp


class Autoregressive(Speculator):
    """Plain decoding: no draft, one query token per sequence."""

    name = "autoregressive"
    needs_acceptance = False
