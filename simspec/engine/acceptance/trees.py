"""Draft trees: their shapes, how deep a verify step gets along one, the best tree for a budget,
and a method's trees over a run (:class:`DraftTree`: one per node budget, their widths by depth).

A tree verify step sends the root (the last accepted token) plus ``nodes`` drafted tokens per
sequence; node i's children are the draft's candidates ranked 1, 2, ... (1 = the draft's top
choice). At temperature 0 the exact rule keeps a child when it holds the target's argmax, so the
walk from the root goes, at depth d, to the child whose rank equals the rank of the target's
token among the draft's candidates, and stops when that rank has no child in the tree. A chain of
K is the tree whose every node has only its rank-1 child.

The **rank model** says how likely the target's token is the draft's rank-r candidate when the
rank-1 candidate is accepted with probability α: ``H(R; α) = P(target token in the draft's top R)``.
It is derived from the exact rule on synthetic distributions (:func:`rank_curves`): target logits
i.i.d. normal over an effective candidate set of :data:`CANDIDATES` tokens, draft logits the
target's plus independent normal noise whose size sets α. At temperature 0 only argmax and
ranks matter, so the noise-to-logit-scale ratio is the family's one parameter, fixed by α. That
family credits siblings with too much (a miss is a near tie in it); the greedy model walks it
calibrated on measured draft heads' top-R accuracy (:func:`calibrated_hits`,
simspec/data/sibling_ranks.yaml).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cache

import numpy as np
from scipy.special import expit, logit

from simspec.catalog.methods import tree_capacity
from simspec.catalog.tables import packaged_table

CANDIDATES = 64  # draft candidates that can hold the target's token (the synthetic vocabulary)
MAX_RANK = CANDIDATES  # deepest sibling rank a tree may use
_CONTEXTS = 10_000  # synthetic contexts per noise level
_NOISE = np.concatenate([[0.0], np.geomspace(0.003, 30.0, 72)])  # noise / logit scale
_GRID = 1000  # top_r_hit is tabulated at alpha = 0, 1/_GRID, ..., 1 for the hot loop
# walk() steps through this many sequences or fewer one by one (its numpy form costs ~10 array
# calls per depth whatever the count; measured on 2 cores: benchmarks/README.md)
_SMALL_WALK = 16
ALPHA_EPS = 1e-9  # α is kept this far from 0 and 1 wherever its logit is taken
TREE_BUCKETS = 41  # dynamic trees are precomputed for α_1 = 0, 1/40, ..., 1


@cache
def rank_curves() -> tuple[np.ndarray, np.ndarray]:
    """``(alpha, H)``: α ascending over the noise grid and ``H[:, R-1] = P(target in top R)``.

    Monte Carlo with a fixed seed, so the same numbers every run (~0.1 s, once per process).
    """
    rng = np.random.default_rng(20241129)
    target = rng.standard_normal((_CONTEXTS, CANDIDATES))
    noise = rng.standard_normal((_CONTEXTS, CANDIDATES))
    best = np.argmax(target, axis=1)
    contexts = np.arange(_CONTEXTS)
    rows = []
    for sigma in _NOISE:
        draft = target + sigma * noise
        # the target's token's 0-based rank among the draft's candidates: how many the draft
        # scores higher (a sort's position of it, without the sort: ties have measure zero)
        rank = (draft > draft[contexts, best][:, None]).sum(axis=1)
        hits = np.bincount(rank, minlength=CANDIDATES)[:MAX_RANK]
        rows.append(np.cumsum(hits) / _CONTEXTS)
    h = np.array(rows)[::-1]  # ascending alpha
    # monotone in alpha despite Monte Carlo noise, and H(R) >= alpha for every R
    h = np.maximum.accumulate(h, axis=0)
    h = np.maximum.accumulate(h, axis=1)
    return h[:, 0].copy(), h


@cache
def informed_share_exponent() -> float:
    """γ of the calibrated greedy rank model (:func:`calibrated_hits`), least squares over the
    measured top-R accuracies of draft heads (simspec/data/sibling_ranks.yaml: Medusa-1 heads on
    Vicuna-7B/13B/33B, R = 2..5; their top-1 is α itself). Deterministic, once per process."""
    from scipy.optimize import minimize_scalar

    doc = packaged_table("sibling_ranks.yaml")
    curves = np.array([row for rows in doc["heads"].values() for row in rows], dtype=float)

    def loss(gamma: float) -> float:
        fitted = calibrated_hits(curves[:, 0], gamma)[:, 1 : curves.shape[1]]
        return float(((fitted - curves[:, 1:]) ** 2).sum())

    return float(minimize_scalar(loss, bounds=(0.0, 1.0), method="bounded").x)


def calibrated_hits(alpha: np.ndarray, gamma: float) -> np.ndarray:
    """Greedy ``H(R; α)`` of a draft that is informed about the target's choice in a share
    w = α^γ of contexts (there the synthetic model at α' = α / w = α^(1-γ)) and uninformed in the
    rest (the target's token then lies past any tree's ranks): H = w · H_synthetic(R; α^(1-γ)).
    Rank 1 stays α exactly, and γ = 0 is the synthetic model. The synthetic model alone rescues
    89 % of top-1 misses within top-5 at α 0.6, a Medusa head 55 %: in real text a miss is more
    often a token the draft had no idea of than a near tie (sibling_ranks.yaml)."""
    a = np.asarray(alpha, dtype=np.float64)
    informed = np.power(np.clip(a, 0.0, 1.0), gamma)
    return informed[..., None] * _interpolate(np.power(np.clip(a, 0.0, 1.0), 1.0 - gamma))


@cache
def _hit_table(sampled: bool = False) -> np.ndarray:
    """``H(R; α)`` at α = i / _GRID, i = 0.._GRID (rows), R = 1..MAX_RANK (columns): greedy
    verification (:func:`calibrated_hits` on the measured heads' γ), or (``sampled``) recursive
    rejection sampling over i.i.d. candidates, as tabulated in simspec/data/sampling.yaml
    (calibration/derive_temperature_model.py)."""
    alpha = np.linspace(0.0, 1.0, _GRID + 1)
    if not sampled:
        table = calibrated_hits(alpha, informed_share_exponent())
        table[:, 0] = alpha  # exactly α for the first candidate (no rounding)
        return np.maximum.accumulate(table, axis=1)
    doc = packaged_table("sampling.yaml")["siblings"]
    grid, hit = np.asarray(doc["alpha"]), np.asarray(doc["hit"])
    cols = [np.interp(alpha, grid, hit[:, r]) for r in range(hit.shape[1])]
    table = np.stack(cols + [cols[-1]] * (MAX_RANK - len(cols)), axis=1)  # deeper: held
    table[:, 0] = alpha  # exactly α for the first candidate
    table = np.maximum(table, alpha[:, None])
    return np.maximum.accumulate(table, axis=1)


@cache
def _hit_rows(sampled: bool = False) -> tuple[tuple[float, ...], ...]:
    """:func:`_hit_table` as Python floats, row by row, for :func:`_walk_small`; each row is
    non-decreasing (both tables are accumulated along R), so a bisection counts the columns
    ``<= u`` exactly as the array comparison does."""
    table = _hit_table(sampled)
    if not (np.diff(table, axis=1) >= 0).all():  # what the bisection relies on
        raise AssertionError("top-R hit table not non-decreasing in R")
    return tuple(tuple(row) for row in table.tolist())


@cache
def _hit_columns(sampled: bool, ranks: int) -> np.ndarray:
    """The first ``ranks`` columns of :func:`_hit_table`, contiguous, for :func:`walk`."""
    return np.ascontiguousarray(_hit_table(sampled)[:, :ranks])


def top_r_hit(alpha: np.ndarray | float, sampled: bool = False) -> np.ndarray:
    """``H(R; α)`` for R = 1..MAX_RANK (last axis), from the table at the nearest 1/_GRID:
    P(the target's token is among the first R candidates) when greedy, P(one of R candidates
    survives recursive rejection sampling) when ``sampled``."""
    idx = np.rint(np.asarray(alpha, dtype=np.float64) * _GRID).astype(np.int64)
    return _hit_table(sampled)[idx]


def _interpolate(alpha: np.ndarray) -> np.ndarray:
    grid, h = rank_curves()
    a = np.clip(np.asarray(alpha, dtype=np.float64), grid[0], grid[-1])
    idx = np.clip(np.searchsorted(grid, a, side="right") - 1, 0, len(grid) - 2)
    w = (a - grid[idx]) / np.maximum(grid[idx + 1] - grid[idx], 1e-12)
    out = h[idx] * (1.0 - w)[..., None] + h[idx + 1] * w[..., None]
    out[..., 0] = np.asarray(alpha, dtype=np.float64)  # exactly α at rank 1
    return np.maximum.accumulate(out, axis=-1)


def rank_probs(alpha: np.ndarray | float, sampled: bool = False) -> np.ndarray:
    """P(the walk continues through the rank-r candidate), r = 1..MAX_RANK."""
    h = top_r_hit(alpha, sampled)
    return np.diff(h, axis=-1, prepend=0.0)


@dataclass(frozen=True)
class Tree:
    """A draft tree: node 0 is the root; ``parent[i]`` and ``rank[i]`` (1-based) for i >= 1."""

    parent: tuple[int, ...]
    rank: tuple[int, ...]
    depth: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        depth = [0] * len(self.parent)
        for i in range(1, len(self.parent)):
            if not 0 <= self.parent[i] < i:
                raise ValueError("a node's parent must come before it")
            depth[i] = depth[self.parent[i]] + 1
        object.__setattr__(self, "depth", tuple(depth))

    @property
    def nodes(self) -> int:
        """Drafted tokens (the root is the last accepted token, not a draft)."""
        return len(self.parent) - 1

    @property
    def max_depth(self) -> int:
        return max(self.depth)

    def children(self) -> np.ndarray:
        """``[node, rank - 1] -> child`` or -1: one column per sibling rank the tree uses and
        one more, all -1, where every rank past them lands (:func:`walk` compares only the
        tree's own ranks)."""
        table = np.full((len(self.parent), max(self.rank) + 1), -1, dtype=np.int64)
        for i in range(1, len(self.parent)):
            table[self.parent[i], self.rank[i] - 1] = i
        return table

    def width_by_depth(self) -> list[int]:
        """Nodes at depth 1..max_depth: the tokens a drafter processes at each of its steps."""
        counts = np.bincount(self.depth, minlength=self.max_depth + 1)
        return [int(c) for c in counts[1:]]


def chain(k: int) -> Tree:
    return Tree(tuple(range(-1, k)), (0,) + (1,) * k)


def from_paths(paths: list[list[int]]) -> Tree:
    """A tree from paths of 0-based sibling ranks (Medusa's choices, vLLM's
    speculative_token_tree): ``[0]`` is the draft's top token, ``[0, 1]`` its second child."""
    index: dict[tuple[int, ...], int] = {(): 0}
    parent, rank = [-1], [0]
    for path in sorted((tuple(p) for p in paths), key=lambda p: (len(p), p)):
        if path[:-1] not in index or path in index:
            raise ValueError(f"path {path} has no parent or repeats")
        index[path] = len(parent)
        parent.append(index[path[:-1]])
        rank.append(path[-1] + 1)
    if max(rank) > MAX_RANK:
        raise ValueError(f"sibling ranks above {MAX_RANK} are not modelled")
    return Tree(tuple(parent), tuple(rank))


def uneven_level(tree: Tree) -> int | None:
    """The first depth whose nodes have different numbers of children (None: every level
    branches evenly, the trees vLLM's level-by-level drafter can draft). A leaf above the
    deepest level counts as a node with no children."""
    counts = [0] * len(tree.parent)
    for i in range(1, len(tree.parent)):
        counts[tree.parent[i]] += 1
    for d in range(1, tree.max_depth):
        level = {counts[i] for i in range(len(tree.parent)) if tree.depth[i] == d}
        if len(level) > 1:
            return d
    return None


def expected_tau(tree: Tree, alpha_by_depth: np.ndarray, sampled: bool = False) -> float:
    """Mean tokens per step (accepted depth + 1) for per-depth acceptance α_1..α_D."""
    probs = rank_probs(np.asarray(alpha_by_depth, dtype=np.float64), sampled)  # (D, MAX_RANK)
    reach = np.zeros(len(tree.parent))
    reach[0] = 1.0
    for i in range(1, len(tree.parent)):
        reach[i] = reach[tree.parent[i]] * probs[tree.depth[i] - 1, tree.rank[i] - 1]
    return float(reach.sum())


def best_tree(
    alpha_by_depth: np.ndarray,
    nodes: int,
    topk: int,
    sampled: bool = False,
    beams: int | None = None,
) -> Tree:
    """The ``nodes``-node tree of depth <= len(alpha_by_depth), at most ``topk`` children per
    node, with the largest expected accepted length.

    Expected length is the sum over nodes of the probability of reaching them, and a child is
    never likelier than its parent, so taking the likeliest frontier node ``nodes`` times
    (best-first) builds the optimal tree: what EAGLE-2 does with draft confidence standing in for
    acceptance, and how Medusa's static trees were chosen from head accuracies.

    ``beams``: at most that many nodes of each depth have children, the likeliest (which
    best-first takes first): a dynamic tree's drafter expands only its top-k beams at each
    depth (SGLang's eagle_utils organize_draft_results over topk x topk candidates; EAGLE-2's
    topK_genrate), so a tree cannot grow from a depth's eleventh node at top-k 10 (QA).
    """
    probs = rank_probs(np.asarray(alpha_by_depth, dtype=np.float64), sampled)
    depth_limit = len(probs)
    topk = min(topk, MAX_RANK)
    parent, rank = [-1], [0]
    frontier: list[tuple[float, int, int, int, int]] = []  # (-p, tie, parent, rank, depth)
    tie = 0
    expanded = [0] * (depth_limit + 1)  # nodes of each depth given children

    def push(node: int, p_node: float, depth: int) -> None:
        nonlocal tie
        if depth >= depth_limit:
            return
        if beams is not None and depth > 0:
            if expanded[depth] >= beams:
                return
            expanded[depth] += 1
        for r in range(1, topk + 1):
            heapq.heappush(frontier, (-p_node * probs[depth, r - 1], tie, node, r, depth + 1))
            tie += 1

    push(0, 1.0, 0)
    while len(parent) <= nodes and frontier:
        neg_p, _, par, r, depth = heapq.heappop(frontier)
        parent.append(par)
        rank.append(r)
        push(len(parent) - 1, -neg_p, depth)
    return Tree(tuple(parent), tuple(rank))


def walk(
    children: np.ndarray,
    alpha: np.ndarray,
    rng: np.random.Generator,
    tree_of: np.ndarray | None = None,
    sampled: bool = False,
) -> np.ndarray:
    """Accepted depth of one verify step per sequence.

    ``children``: one child table (nodes+1, ranks+1) shared by every sequence, or a stack of
    tables (trees, nodes+1, ranks+1) with ``tree_of`` naming each sequence's, whose last
    column is all -1 (:meth:`Tree.children`); ``alpha``: (n, D) acceptance of each sequence's
    rank-1 candidate at depth 1..D. A tree has no child past its ``ranks`` ranks (at most
    MAX_RANK), so only that many of the hit table's columns are compared: the matched rank is
    the same wherever it has a child, and ``ranks`` (the -1 column) wherever it has none.
    """
    n, depth_limit = alpha.shape
    if n <= _SMALL_WALK:
        return _walk_small(children, alpha, rng, tree_of, sampled)
    ranks = children.shape[-1] - 1
    table = _hit_columns(sampled, ranks)
    by_depth = np.rint(alpha.T * _GRID).astype(np.int64)  # table rows, one array per depth
    accepted = np.zeros(n, dtype=np.int64)
    live = np.arange(n)  # the sequences still walking, in order, and the node each is at
    node = np.zeros(n, dtype=np.int64)
    trees = tree_of
    for d in range(depth_limit):
        u = rng.random(len(live))
        rank = (table[by_depth[d][live]] <= u[:, None]).sum(axis=1)  # 0-based, capped
        child = children[node, rank] if trees is None else children[trees, node, rank]
        moved = child >= 0
        live, node = live[moved], child[moved]
        if len(live) == 0:
            break
        if trees is not None:
            trees = trees[moved]
        accepted[live] = d + 1
    return accepted


def _walk_small(
    children: np.ndarray,
    alpha: np.ndarray,
    rng: np.random.Generator,
    tree_of: np.ndarray | None,
    sampled: bool,
) -> np.ndarray:
    """:func:`walk` one sequence at a time, for the few sequences of a small batch: the same
    draws (one ``rng.random(live)`` per depth, live sequences in order), the same table cells
    (``round`` is numpy's ``rint``: halves to even) and the same children, so the same depths."""
    n, depth_limit = alpha.shape
    rows, ranks = _hit_rows(sampled), children.shape[-1] - 1
    by_seq = alpha.tolist()  # each depth's table row rounded when the walk reaches it
    trees = None if tree_of is None else tree_of.tolist()
    node, accepted = [0] * n, [0] * n
    live = list(range(n))
    for d in range(depth_limit):
        if not live:
            break
        # one live sequence: the scalar draw is the same double from the same stream
        u = [rng.random()] if len(live) == 1 else rng.random(len(live)).tolist()
        moved = []
        for s, x in zip(live, u, strict=True):
            rank = bisect_right(rows[round(by_seq[s][d] * _GRID)], x)  # 0-based matched rank
            if rank >= ranks:
                continue
            if trees is None:
                child = int(children[node[s], rank])
            else:
                child = int(children[trees[s], node[s], rank])
            if child >= 0:
                node[s] = child
                accepted[s] += 1
                moved.append(s)
        live = moved
    return np.array(accepted, dtype=np.int64)


# -- a method's trees over a run -----------------------------------------------------------------
@dataclass(frozen=True)
class TreeShape:
    """A draft tree by its budget: ``nodes`` drafted tokens, ``topk`` children per node at
    most, ``depth`` levels; ``dynamic`` trees are rebuilt every step from the draft's
    confidence (EAGLE-2), static ones once for the mean acceptance (Medusa, EAGLE-1)."""

    nodes: int
    topk: int
    depth: int
    dynamic: bool = False

    @property
    def capacity(self) -> int:
        """The most draft tokens such a tree can hold (:func:`tree_capacity`)."""
        return tree_capacity(self.topk, self.depth, self.dynamic)


def profile_at(mu: np.ndarray, alpha1: float) -> np.ndarray:
    """The α profile of a sequence whose depth-1 acceptance is ``alpha1``, given the logit
    means ``mu`` of the run's profile (the same logit offset at every depth)."""
    a1 = min(max(alpha1, ALPHA_EPS), 1 - ALPHA_EPS)
    return expit(mu + (logit(a1) - mu[0]))


def bucket_of(alpha1: np.ndarray) -> np.ndarray:
    """The dynamic-tree bucket of a depth-1 acceptance."""
    return np.rint(np.asarray(alpha1) * (TREE_BUCKETS - 1)).astype(np.int64)


def tree_plan(
    shape: TreeShape, alpha_mean: np.ndarray, mu: np.ndarray, sampled: bool = False
) -> tuple[np.ndarray, bool]:
    """Child tables for a run: one static tree built for the mean α profile, or
    (TREE_BUCKETS, nodes+1, ranks+1) dynamic trees, one per α_1 bucket, each built for the α
    profile a sequence with that α_1 has (:func:`profile_at`; ``mu``: the logit means matched
    to ``alpha_mean``, :func:`simspec.engine.acceptance.inversion.mean_matching_logits`).
    ``sampled``: built for the sampling rule's rank acceptance, as the run verifies (QA: built
    for greedy's, a 50-node tree held 1.9 % fewer tokens at α 0.7)."""
    if not shape.dynamic:
        return best_tree(alpha_mean, shape.nodes, shape.topk, sampled).children(), False
    tables = [
        best_tree(
            profile_at(mu, b / (TREE_BUCKETS - 1)), shape.nodes, shape.topk, sampled, shape.topk
        ).children()
        for b in range(TREE_BUCKETS)
    ]
    rows, cols = max(len(t) for t in tables), max(t.shape[1] for t in tables)
    out = np.full((TREE_BUCKETS, rows, cols), -1, dtype=np.int64)
    for b, t in enumerate(tables):
        out[b, : len(t), : t.shape[1]] = t
    return out, True


class DraftTree:
    """A method's draft tree over one run: its shape at the method's own node budget, the
    budgets a load policy may switch to, and a static tree for each: the user's explicit tree,
    or the best tree for the run's mean α profile (:meth:`build`). Their widths by depth set
    what a sequential drafter computes; their child tables are what a verify step walks."""

    def __init__(self, shape: TreeShape, budgets: list[int], explicit: Tree | None = None) -> None:
        self.shape, self.budgets, self.explicit = shape, budgets, explicit
        self.static: dict[int, Tree] = {} if explicit is None else {explicit.nodes: explicit}
        self._widths: dict[tuple[int, int | None], tuple[int, ...]] = {}

    def build(self, alpha_mean: np.ndarray, sampled: bool = False) -> None:
        """The static trees for the run's mean α profile, one per node budget (for recursive
        rejection sampling of the candidates when the run samples); a dynamic tree is built
        every step instead, and an explicit one is kept."""
        if not self.shape.dynamic and self.explicit is None:
            s = self.shape
            self.static = {n: best_tree(alpha_mean, n, s.topk, sampled) for n in self.budgets}
            self._widths.clear()

    def widths(self, k: int, nodes: int | None = None) -> tuple[int, ...]:
        """Tokens per sequence a sequential drafter processes at steps 2..k: the previous
        depth's nodes for a static tree (1 each before it is built), the expanded top-k for a
        dynamic one."""
        key = (k, nodes)
        widths = self._widths.get(key)
        if widths is None:
            if self.shape.dynamic:
                widths = (self.shape.topk,) * (k - 1)
            else:
                tree = self.static.get(nodes or self.shape.nodes)
                by_depth = tree.width_by_depth() if tree else [1] * k
                widths = tuple(by_depth[d] if d < len(by_depth) else 0 for d in range(k - 1))
            self._widths[key] = widths
        return widths

    def children(
        self, nodes: int, alpha_mean: np.ndarray, mu: np.ndarray, sampled: bool = False
    ) -> tuple[np.ndarray, bool]:
        """What a verify step with budget ``nodes`` walks: its static tree, or the trees
        :func:`tree_plan` builds for the budget (dynamic trees, or a budget without one)."""
        if nodes in self.static and not self.shape.dynamic:
            return self.static[nodes].children(), False
        s = self.shape
        return tree_plan(TreeShape(nodes, s.topk, s.depth, s.dynamic), alpha_mean, mu, sampled)
