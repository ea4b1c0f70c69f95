"""SGLang's ``NGRAM`` speculative method replayed on token streams.

Read from sglang 0.5.23 (the PyPI wheel, sha256 00b3cd5b…9937; the git commit it was built
from is not in the wheel): ``srt/speculative/ngram_worker.py``, the corpus in
``kernels/jit/csrc/ngram_corpus/{trie,ngram,result}.cpp``, ``param.h``, the defaults in
``srt/arg_groups/fields/spec.py`` and ``srt/arg_groups/speculative_hook.py:_handle_ngram``. The
trie code (insert, match, buildRecency, buildFrequency) is the same in sgl-project/sglang
commit 2e932a8eb430fdd704c999e6eb3f4e1fde4b1083. What the engine does, and so this replay:

* One trie of token n-grams (depth <= ``max_trie_depth``, default 18) shared by every request.
  After each verify step a request inserts the last ``max_trie_depth`` tokens of its context as
  it stood at the *start* of that step (``_update_ngram_corpus`` runs before the step's accepted
  tokens reach ``output_ids``; the overlap path splices in only the previous step's tokens), and
  ``Trie::insert`` adds every suffix of that window. The prompt is never inserted at prefill
  (the worker's FIXME: "not insert 'extend'"), so only the prompt tokens inside the first
  step's window enter: text earlier in a long prompt is found only if another request wrote it.
* Match (``Trie::match``): the nodes of every suffix of the context of length 1..18 that exist
  in the trie and have children, longest first. The worker keeps them per request and advances
  them token by token against the trie as it is now (``advanceMatchState_``); a node absent
  when the previous step matched stays absent until its suffix re-grows from depth 1. The
  replay keeps the same state, so it matches the engine and not a fresh walk.
* Draft tree (``buildRecency``, match type ``BFS``, the default): from each anchor, longest
  first, a breadth-first walk that takes a node's most recently inserted children first, the
  breadth falling linearly from ``min + (17 - depth) * (max - min) / 17`` by that step per level
  (at least 1), merging equal tokens under one parent into one node, until
  ``num_draft_tokens - 1`` nodes exist (``Param::get_draft_token_num``). ``PROB`` expands the
  highest path probability (child frequency normalised over the top ``max_bfs_breadth``),
  with ``std::priority_queue``'s tie order reproduced (libstdc++'s push_heap/pop_heap).
* Verify: ``fillResult`` pads the tree with token 0 to ``num_draft_tokens`` entries, the last
  token as root, so every step verifies :data:`VERIFY_WIDTH_IS_PADDED` — a fixed
  ``num_draft_tokens`` tokens per request — whether or not anything matched. A greedy target
  accepts the longest tree path equal to the generated tokens.

Replay order and steps: requests run one after another in trace order (batch size 1). Within a
request the replay takes the greedy chain's steps (t = 1, then t += accepted[t] + 1; t = 0 is
prefill and inserts nothing) and inserts after each of those steps only, so at the positions a
greedy chain visits it is what the engine does serving the trace one request at a time. At any
other position t it reports what a step starting there would propose from the same trie and
match state (``steps="chain"``). ``steps="every"`` instead inserts after every position, as if
each step accepted nothing. Not modelled: concurrent requests interleaving their inserts, the
trie's LRU eviction (the replay refuses a trace whose trie would outgrow ``capacity``), a
padding token 0 that a target whose next token is id 0 would "accept", and external corpora.

Earlier releases (``python/sglang/srt/speculative/cpp_ngram/ngram.cpp``, e.g. commit
0657507f725139b33b7a471ef31b7aeaa83ce019) matched suffixes of ``speculative_ngram_min/max_match
_window_size`` (1..12) and inserted ``branch_length`` (18) tokens without a per-request match
state; 0.5.23 replaced both with ``max_trie_depth`` = 18, which this module follows.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from itertools import islice

import numpy as np

from simspec.catalog.token_traces import TokenTrace
from simspec.engine.lookup.replay import StreamReplay

# Defaults of sglang 0.5.23: arg_groups/fields/spec.py lines 252-271 and, for the draft count,
# arg_groups/speculative_hook.py line 1318 (``speculative_num_draft_tokens`` unset -> 12).
DEFAULT_NUM_DRAFT_TOKENS = 12
DEFAULT_MAX_TRIE_DEPTH = 18
DEFAULT_MIN_BFS_BREADTH = 1
DEFAULT_MAX_BFS_BREADTH = 10
DEFAULT_MATCH_TYPE = "BFS"
DEFAULT_CAPACITY = 10 * 1000 * 1000

# Every decode step verifies num_draft_tokens tokens per request (the root, i.e. the last
# token, plus num_draft_tokens - 1 tree slots, zero-padded): a step that matched nothing costs
# as much target compute as a full tree. StreamReplay.proposed counts real nodes only.
VERIFY_WIDTH_IS_PADDED = True

Tree = list[dict[int, int]]  # tree[pos] = {token: child pos}; pos 0 is the root (last token)
_Window = tuple[int, int, list[dict]]  # an inserted window's start, end, and its paths' ends


class NgramTrie:
    """The shared n-gram trie of SGLang's ``Trie`` (trie.cpp), without eviction.

    A node is the dict of its children, token -> node; the dict's order is the engine's
    per-node LRU list read backwards (the most recently inserted child last), so a BFS reads
    ``reversed(node)``. Frequencies (``PROB`` only) live in :attr:`freq` keyed by ``id(node)``.
    """

    def __init__(
        self,
        max_trie_depth: int = DEFAULT_MAX_TRIE_DEPTH,
        track_freq: bool = False,
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        if max_trie_depth < 2:
            raise ValueError("max_trie_depth must be greater than 1 (ngram.cpp)")
        self.depth = max_trie_depth
        self.root: dict = {}
        self.track_freq = track_freq
        self.freq: dict[int, int] = {}
        self.capacity = capacity
        self.num_nodes = 1  # the root takes one of the engine's pooled nodes

    def insert(
        self, seq: Sequence[int], end: int | None = None, last: _Window | None = None
    ) -> _Window:
        """``Trie::insert`` of the window ``seq[end - depth : end]``: the path of each of its
        suffixes; every child on a path moves to the front of its parent's recency order.

        ``last``, the value returned by the previous insert of the same ``seq`` when nothing
        else touched the trie since, skips re-touching the nodes of that window: they are
        already the most recent children, ordered by start position as a re-touch would leave
        them, so only the paths' new tails are walked (with the same result). ``PROB`` counts
        every touch, so it always walks whole paths. Returns the window's span and the node at
        the end of each of its paths, for the next call.
        """
        end = len(seq) if end is None else end
        lo = max(0, end - self.depth)
        if self.track_freq or last is None or last[1] <= lo:
            last = (lo, lo, [])
        prev_lo, prev_end, prev_ends = last
        tail = seq[prev_end:end]
        ends: list[dict] = []
        new = 0
        freq = self.freq if self.track_freq else None
        for node in prev_ends[lo - prev_lo :]:  # starts lo .. prev_end - 1: the new tail only
            for tok in tail:
                child = node.pop(tok, None)
                if child is None:
                    child = {}
                    new += 1
                node[tok] = child  # re-inserted last: the most recent
                node = child
            ends.append(node)
        for i in range(prev_end, end):  # starts in the new tokens: whole paths
            node = self.root
            for tok in seq[i:end]:
                child = node.pop(tok, None)
                if child is None:
                    child = {}
                    new += 1
                    if freq is not None:
                        freq[id(child)] = 1
                elif freq is not None:
                    freq[id(child)] += 1
                node[tok] = child
                node = child
            ends.append(node)
        self.num_nodes += new
        # Trie::insert squeezes (evicts LRU leaves) once fewer free nodes remain than a path's
        # length: refuse from that point on rather than replay it wrongly
        if self.num_nodes + self.depth > self.capacity:
            raise ValueError(
                f"the trie nears capacity={self.capacity} nodes, where SGLang starts evicting its "
                "least recently used leaves, which this replay does not model: raise capacity"
            )
        return lo, end, ends

    def match(self, context: Sequence[int]) -> list[dict | None]:
        """``rebuildMatchState_``: ``anchors[d - 1]`` is the node of the context's length-d
        suffix, d = 1 .. min(len, depth). The trie holds every suffix of what it holds, so
        the list stops at the first suffix it lacks (the engine keeps empty slots there)."""
        anchors: list[dict | None] = []
        for d in range(1, min(len(context), self.depth) + 1):
            node: dict = self.root
            for tok in context[len(context) - d :]:
                child = node.get(tok)
                if child is None:
                    return anchors
                node = child
            anchors.append(node)
        return anchors

    def advance(self, anchors: list[dict | None], token: int) -> list[dict | None]:
        """``advanceMatchState_`` by one token: the suffix of depth d + 1 follows the cached
        node of depth d, so a suffix missing when cached stays missing (trailing misses are
        dropped)."""
        nxt = [self.root.get(token)]
        nxt += [None if a is None else a.get(token) for a in anchors[: self.depth - 1]]
        while nxt and nxt[-1] is None:
            nxt.pop()
        return nxt


def breadth_table(depth: int, min_breadth: int, max_breadth: int) -> list[list[int]]:
    """``table[d][k]``: how many children ``buildRecency`` takes at level k below an anchor of
    depth d. The engine starts at ``(max(1, depth - 1) - d) * scale + min`` with
    ``scale = (max - min) / max(1, depth - 1)``, subtracts ``scale`` once per level and
    truncates to int (at least 1); the same float steps are taken here."""
    max_match_depth = max(1, depth - 1)
    scale = (max_breadth - min_breadth) / max_match_depth
    table = []
    for d in range(depth + 1):
        cur = (max_match_depth - d) * scale + min_breadth
        row = []
        for _ in range(depth + 1):
            row.append(max(1, int(cur)))  # int32_t(): truncation toward zero
            cur -= scale
        table.append(row)
    return table


def build_recency(anchors: list[dict | None], budget: int, table: list[list[int]]) -> Tree:
    """``Trie::buildRecency`` (match type BFS): ``budget`` nodes at most.

    Two shortcuts leave the result unchanged: children without children are not queued (the
    engine pops them and adds nothing), and while the queue is empty and the node has one
    child the walk follows that chain without queueing (the only order a BFS could take).
    """
    tree: Tree = [{}]
    cursor = 1
    for d in range(len(anchors), 0, -1):  # longest suffix first
        node = anchors[d - 1]
        if not node:  # absent, or a leaf: not expandable
            continue
        if cursor > budget:
            break
        row = table[d]
        queue: deque = deque()
        pos = level = 0
        while True:
            while not queue and len(node) == 1:  # a lone chain
                (tok,) = node
                slots = tree[pos]
                nxt = slots.get(tok)
                if nxt is None:
                    nxt = slots[tok] = cursor
                    tree.append({})
                    cursor += 1
                node = node[tok]
                if not node or cursor > budget:
                    break
                pos = nxt
                level += 1
            else:  # the queue's next item, in breadth-first order
                slots = tree[pos]
                take = row[level]
                keys = reversed(node)
                for tok in islice(keys, take) if len(node) > take else keys:
                    if cursor > budget:
                        break
                    nxt = slots.get(tok)
                    if nxt is None:
                        nxt = slots[tok] = cursor
                        tree.append({})
                        cursor += 1
                    child = node[tok]
                    if child:
                        queue.append((nxt, level + 1, child))
                if queue and cursor <= budget:
                    pos, level, node = queue.popleft()
                    continue
            break
    return tree


class _StdMaxHeap:
    """``std::priority_queue`` ordered by the last field only, with libstdc++'s
    push_heap/pop_heap, so equal probabilities come out in the engine's order."""

    def __init__(self) -> None:
        self.c: list[tuple[int, dict, int, float]] = []

    def push(self, item: tuple[int, dict, int, float]) -> None:
        c = self.c
        c.append(item)
        self._up(len(c) - 1, 0, item)

    def _up(self, hole: int, top: int, value: tuple) -> None:
        c = self.c
        parent = (hole - 1) // 2
        while hole > top and c[parent][3] < value[3]:
            c[hole] = c[parent]
            hole = parent
            parent = (hole - 1) // 2
        c[hole] = value

    def pop(self) -> tuple[int, dict, int, float]:
        c = self.c
        top = c[0]
        value = c.pop()
        n = len(c)
        if n:
            hole, second = 0, 0
            while second < (n - 1) // 2:
                second = 2 * (second + 1)
                if c[second][3] < c[second - 1][3]:
                    second -= 1
                c[hole] = c[second]
                hole = second
            if n % 2 == 0 and second == (n - 2) // 2:
                second = 2 * (second + 1)
                c[hole] = c[second - 1]
                hole = second - 1
            self._up(hole, 0, value)
        return top


def build_frequency(
    anchors: list[dict | None], budget: int, max_breadth: int, freq: dict[int, int]
) -> Tree:
    """``Trie::buildFrequency`` (match type PROB): expand the most probable path first, a
    child's probability its frequency over the top ``max_breadth`` siblings' total."""
    heap = _StdMaxHeap()
    tree: Tree = [{}]
    cursor = 1

    def add(parent: int, node: dict, prob: float) -> None:
        # sorted_children: frequency descending, then token ascending
        keyed = ((-freq[id(child)], tok, child) for tok, child in node.items())
        top = heapq.nsmallest(max_breadth, keyed, key=lambda k: (k[0], k[1]))
        total = float(sum(-f for f, _, _ in top)) or 1.0
        for f, tok, child in top:
            heap.push((parent, child, tok, -f / total * prob))

    for anchor in reversed(anchors):  # longest suffix first
        if not anchor:  # absent, or a leaf: not expandable
            continue
        if cursor > budget:
            break
        add(0, anchor, 1.0)
        while heap.c and cursor <= budget:
            parent, node, tok, prob = heap.pop()
            pos = tree[parent].get(tok)
            if pos is None:
                pos = tree[parent][tok] = cursor
                tree.append({})
                cursor += 1
            add(pos, node, prob)
    return tree


def tree_tokens(tree: Tree) -> list[int]:
    """The draft tokens of a tree (root excluded), in slot order."""
    out = [0] * (len(tree) - 1)
    for slots in tree:
        for tok, pos in slots.items():
            out[pos - 1] = tok
    return out


def accepted_depth(tree: Tree, future: Sequence[int]) -> int:
    """Depth of the longest root path equal to ``future``: what a greedy target accepts (the
    verify kernel follows the child whose token the target predicts)."""
    pos, depth = 0, 0
    for tok in future:
        child = tree[pos].get(tok)
        if child is None:
            break
        pos = child
        depth += 1
    return depth


def replay_sglang_ngram(
    trace: TokenTrace,
    num_draft_tokens: int = DEFAULT_NUM_DRAFT_TOKENS,
    *,
    max_trie_depth: int = DEFAULT_MAX_TRIE_DEPTH,
    min_bfs_breadth: int = DEFAULT_MIN_BFS_BREADTH,
    max_bfs_breadth: int = DEFAULT_MAX_BFS_BREADTH,
    match_type: str = DEFAULT_MATCH_TYPE,
    capacity: int = DEFAULT_CAPACITY,
    steps: str = "chain",
) -> list[StreamReplay]:
    """Every request's proposals under SGLang's NGRAM, one trie shared in trace order.

    ``proposed[t]`` is the number of real tree nodes (<= ``num_draft_tokens - 1``; the verify
    width is ``num_draft_tokens`` regardless, see :data:`VERIFY_WIDTH_IS_PADDED`), and
    ``accepted[t]`` the depth a greedy target accepts. ``steps``: ``"chain"`` inserts after the
    greedy chain's steps only (the engine's behaviour at those steps), ``"every"`` after every
    position.
    """
    if num_draft_tokens < 1:
        raise ValueError("num_draft_tokens must be at least 1")
    if not 0 < min_bfs_breadth <= max_bfs_breadth:
        raise ValueError("need 0 < min_bfs_breadth <= max_bfs_breadth (ngram.cpp)")
    if match_type not in ("BFS", "PROB"):
        raise ValueError("match_type must be 'BFS' or 'PROB'")
    if steps not in ("chain", "every"):
        raise ValueError("steps must be 'chain' or 'every'")
    prob = match_type == "PROB"
    trie = NgramTrie(max_trie_depth, track_freq=prob, capacity=capacity)
    budget, depth = num_draft_tokens - 1, max_trie_depth
    every = steps == "every"
    table = breadth_table(depth, min_bfs_breadth, max_bfs_breadth)
    out: list[StreamReplay] = []
    for prompt_arr, gen_arr in zip(trace.prompts, trace.outputs, strict=True):
        prompt, gen = prompt_arr.tolist(), gen_arr.tolist()
        n = len(gen)
        proposed, accepted = [0] * n, [0] * n
        seq = prompt + gen
        plen = len(prompt)
        anchors = trie.match(prompt[-depth:])
        next_step, last = 1, None
        for t in range(n):
            if t:
                anchors = trie.advance(anchors, gen[t - 1])
            if budget and any(anchors):
                if prob:
                    tree = build_frequency(anchors, budget, max_bfs_breadth, trie.freq)
                else:
                    tree = build_recency(anchors, budget, table)
                proposed[t] = len(tree) - 1
                accepted[t] = accepted_depth(tree, gen[t : t + len(tree) - 1])
            if t and (every or t == next_step):
                last = trie.insert(seq, plen + t, last)
                next_step = t + accepted[t] + 1
        out.append(
            StreamReplay(np.array(proposed, dtype=np.int32), np.array(accepted, dtype=np.int32))
        )
    return out
