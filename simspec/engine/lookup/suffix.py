"""SuffixDecoding replayed on token streams, as vLLM's ``suffix`` speculative method runs it.

Read (this module reimplements the behaviour; no code is copied):

* Arctic Inference ``snowflakedb/ArcticInference`` @ 9d4643881608178f0f58a33d1b61919ca246997f;
  its suffix-decoding files are byte-identical to the ``arctic-inference==0.1.1`` sdist that
  vLLM asks for. ``arctic_inference/suffix_decoding/cache.py`` (``SuffixDecodingCache``) and
  ``csrc/suffix_decoding/suffix_tree.cc`` (``SuffixTree::append``, ``speculate``,
  ``_speculate_path``, ``_increment_count``, ``_decrement_count``, ``remove``).
* vLLM ``vllm/v1/spec_decode/suffix_decoding.py`` @ 044ac3a07ab371cdbfac2203b0cd12d877f9038f
  (``SuffixDecodingProposer.propose``) and ``vllm/config/speculative.py``
  @ 002e77c1f0ef9b19cff8b9e21cfbd6feb3d6b443 (the defaults below).

What a step does (vLLM ``propose``): the tokens sampled since the last step are appended to the
request's *prompt tree* (one sequence: prompt + output so far) and to its slot in the *global
tree* (every cached request's output, its own included, one sequence each); the pattern is the
last ``max_tree_depth`` tokens of prompt + output; ``speculate`` runs on both trees and keeps the
prompt tree's draft unless the global one scores strictly higher. In a tree, for every match
length ``m = 1 .. len(pattern) - 1`` (``m < len``, as arctic loops) whose suffix
``pattern[-m:]`` occurs, the draft follows the most frequent child from the matched node, for at
most ``min(max_spec_tokens, int(max_spec_factor * m + max_spec_offset))`` tokens, while the
running probability (product of child count / parent count) stays >= ``min_token_prob``; its
score is the sum of those probabilities and the best score wins, ties to the longer match.
The trees hold strings of at most ``max_tree_depth`` tokens, so match + draft <= that depth.
vLLM passes neither ``use_tree_spec`` nor ``max_spec_offset``: a chain, offset 0.

A node's count is the number of occurrences of its string (up to ``max_tree_depth`` tokens)
in the tree's sequences. Among children of equal count arctic keeps an order that depends on
history (``_increment_count``: a child that was first of its count moves to the front of the
next count, any other to its back; a new child goes last; ``_decrement_count``: to the front
of the count below); :class:`_SuffixTrie` keeps exactly that order, since the first child is
the one speculated. Probabilities and scores are float32, as in the C++ (``_f32``), so ties
and the ``min_token_prob`` threshold resolve as there.

The trie is uncompressed but lazy: a node seen once (count 1) stores where its one occurrence
ends and its subtree stays implicit (every count below is 1), which keeps memory to about the
repeated substrings. Eviction (FIFO, ``max_cached_requests``) happens when a request starts,
as ``SuffixDecodingCache.start_request`` does.

Replay: requests run one after another in trace order (no concurrency), so request ``i`` sees
the full outputs of the cached requests before it and its own output so far; a server with
concurrent requests would also see the others' partial outputs. ``proposed[0]`` (context = the
prompt) is filled for completeness: vLLM first proposes after the prefill has sampled one
token. vLLM's cap ``max_model_len - num_tokens - 1`` on the draft is not applied. The
verification width of a step is ``1 + proposed[t]`` (a chain).

Checked against arctic's own C++ tree (built from the 0.1.1 sdist) driven as vLLM drives it:
the same draft at every position of the four packaged traces, and of 2,300 random small streams
over all settings, eviction included. tests/test_lookup_suffix.py keeps a literal model of the
tree for the same comparison.
"""

from __future__ import annotations

import gc
from array import array
from collections import deque

import numpy as np

from simspec.catalog.token_traces import TokenTrace
from simspec.engine.lookup.replay import StreamReplay
from simspec.errors import InputError

# vllm/config/speculative.py @ 002e77c1: SpeculativeConfig fields.
MAX_TREE_DEPTH = 24  # suffix_decoding_max_tree_depth
MAX_CACHED_REQUESTS = 10000  # suffix_decoding_max_cached_requests (0: no global tree)
MAX_SPEC_FACTOR = 1.0  # suffix_decoding_max_spec_factor
MIN_TOKEN_PROB = 0.1  # suffix_decoding_min_token_prob
# vllm/v1/spec_decode/suffix_decoding.py @ 044ac3a0 does not pass it: arctic's default.
MAX_SPEC_OFFSET = 0.0
# _validate_suffix_decoding: num_speculative_tokens defaults to suffix_decoding_max_tree_depth.

_F = array("f", [0.0])


def _f32(x: float) -> float:
    """``x`` rounded to float32: arctic's probabilities and scores are C++ ``float``."""
    _F[0] = x
    return _F[0]


class _Node:
    """One string of the trie. ``kids`` is None for a node seen once (a frontier): its subtree
    is the rest of its one occurrence, ``seq[end:]``, all counts 1."""

    __slots__ = ("token", "depth", "count", "kids", "head", "groups", "top", "seq", "end")

    def __init__(self, token: int, depth: int, seq: list[int] | None, end: int) -> None:
        self.token = token
        self.depth = depth
        self.count = 1
        self.kids: dict[int, _Node] | None = None
        self.head: _Node | None = None  # arctic's head_child: first of the highest count
        # children by count, each list in arctic's sibling order (None while <= 1 child)
        self.groups: dict[int, list[_Node]] | None = None
        self.top = 0  # highest child count (valid when groups is set)
        self.seq = seq  # the sequence holding the occurrence (read while a frontier)
        self.end = end  # index just past the occurrence in seq


class _SuffixTrie:
    """Counts of every substring of up to ``max_depth`` tokens of some sequences, children kept
    in arctic's order. Sequences grow by :meth:`append` and leave by :meth:`remove`."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.root = _Node(-1, 0, None, 0)
        self.root.count = 0
        self.root.kids = {}
        self.seqs: dict[int, list[int]] = {}
        # per sequence, for its suffixes of length 0 .. max_depth-1 (oldest first): the deepest
        # materialised node on the suffix's path
        self._active: dict[int, deque[_Node]] = {}
        # after a removal a node may have count 1 and real children; then every active suffix
        # must be visited (the early stop in append assumes count 1 <=> frontier)
        self._removed = False

    def append(self, sid: int, x: int) -> None:
        seq = self.seqs.get(sid)
        if seq is None:
            seq = self.seqs[sid] = []
            self._active[sid] = deque()
        act = self._active[sid]
        root = self.root
        act.append(root)
        if len(act) > self.max_depth:
            act.popleft()
        end = len(seq)
        seq.append(x)
        root.count += 1
        n = len(act)
        # Newest (shortest) suffix first: once one occurs only here, all longer ones do too
        # and extend implicitly, so the loop stops (arctic visits all; counts are the same).
        for j in range(n):
            i = n - 1 - j
            g = act[i]
            while g.depth < j and g.kids is not None:
                g = g.kids[seq[end - j + g.depth]]
            kids = g.kids
            if kids is None or g.depth < j:
                act[i] = g
                if self._removed:
                    continue
                break
            c = kids.get(x)
            if c is None:
                c = _Node(x, j + 1, seq, end + 1)
                if g is not root:  # a new child goes last, with count 1
                    groups = g.groups
                    if groups is None and kids:
                        k1 = g.head
                        groups = g.groups = {k1.count: [k1]}
                        g.top = k1.count
                    if groups is None:
                        g.head = c
                    else:
                        ones = groups.get(1)
                        if ones is None:
                            groups[1] = [c]
                        else:
                            ones.append(c)
                        if g.top < 1:
                            g.top = 1
                        g.head = groups[g.top][0]
                kids[x] = c
            else:
                if c.kids is None:
                    self._materialise(c, seq, end)
                cnt = c.count
                c.count = cnt + 1
                if g.groups is not None:
                    _promote(g, c, cnt)
            act[i] = c

    def _materialise(self, c: _Node, seq: list[int], end: int) -> None:
        """``c`` is about to be seen a second time: give it the real child its first
        occurrence continues with. If that continuation is the token being appended now (an
        overlap in this sequence), the older suffix, visited after this one, adds it."""
        c.kids = {}
        sf, ef = c.seq, c.end
        if c.depth < self.max_depth and ef < len(sf) and not (sf is seq and ef == end):
            y = sf[ef]
            c.head = c.kids[y] = _Node(y, c.depth + 1, sf, ef + 1)

    def remove(self, sid: int) -> None:
        """Drop a sequence: every suffix path's counts go down by one (arctic ``remove``)."""
        seq = self.seqs.pop(sid, None)
        if seq is None:
            return
        del self._active[sid]
        self._removed = True
        root, depth = self.root, self.max_depth
        for start in range(len(seq)):
            root.count -= 1
            node = root
            for idx in range(start, min(len(seq), start + depth)):
                kids = node.kids
                c = kids.get(seq[idx]) if kids is not None else None
                if c is None:
                    break
                if c.count > 1:
                    if node.groups is not None:
                        _demote(node, c)
                    else:
                        c.count -= 1
                    node = c
                    continue
                del kids[seq[idx]]  # count 1 -> 0: the whole subtree was this occurrence
                groups = node.groups
                if groups is not None:
                    ones = groups[1]
                    ones.remove(c)
                    if not ones:
                        del groups[1]
                        if node.top == 1:
                            node.top = max(groups, default=0)
                    node.head = groups[node.top][0] if groups else None
                else:
                    node.head = None
                break


def _promote(g: _Node, c: _Node, cnt: int) -> None:
    """``c`` (a child of ``g``) went from ``cnt`` to ``cnt + 1`` (arctic ``_increment_count``:
    the first of its count moves to the front of the next count, any other to its back)."""
    groups = g.groups
    same = groups[cnt]
    first = same[0] is c
    if first:
        del same[0]
    else:
        same.remove(c)
    if not same:
        del groups[cnt]
    up = groups.get(cnt + 1)
    if up is None:
        groups[cnt + 1] = [c]
    elif first:
        up.insert(0, c)
    else:
        up.append(c)
    if cnt + 1 >= g.top:
        g.top = cnt + 1
        g.head = groups[cnt + 1][0]


def _demote(g: _Node, c: _Node) -> None:
    """``c`` goes from its count to one less, to the front of that count
    (arctic ``_decrement_count``)."""
    groups = g.groups
    cnt = c.count
    same = groups[cnt]
    same.remove(c)
    if not same:
        del groups[cnt]
    down = groups.get(cnt - 1)
    if down is None:
        groups[cnt - 1] = [c]
    else:
        down.insert(0, c)
    if g.top == cnt and cnt not in groups:
        g.top = cnt - 1
    g.head = groups[g.top][0]
    c.count = cnt - 1


def _advance(trie: _SuffixTrie, ms: list[_Node], ctx: list[int], n: int, limit: int) -> list:
    """Match states once ``ctx[n-1]`` was appended: ``out[k-1]`` is the deepest materialised
    node on the path of ``ctx[n-k:n]``, for k = 1, 2, ... while that suffix occurs with a
    continuation (k <= limit). A suffix without one can only grow into suffixes seen once,
    at the end of the context, which never propose."""
    x = ctx[n - 1]
    c = trie.root.kids.get(x)
    if c is None or limit < 1:
        return []
    out: list[_Node] = []
    depth = trie.max_depth
    k = 0
    g = c  # the state for length k + 1
    while True:
        # keep it while the suffix has a continuation
        if g.kids is None:
            if g.end + (k + 1 - g.depth) >= len(g.seq):
                break
        elif not g.kids:
            break
        out.append(g)
        if k >= len(ms) or k + 1 >= limit:
            break
        g = ms[k]
        k += 1
        while g.depth < k and g.kids is not None:  # the trie may have grown since
            g = g.kids[ctx[n - 1 - k + g.depth]]
        if g.kids is not None:
            g = g.kids.get(x)
            if g is None:
                break
        else:
            pos = g.end + (k - g.depth)
            if k >= depth or pos >= len(g.seq) or g.seq[pos] != x:
                break
    return out


def _speculate(
    ms: list[_Node], pattern_len: int, max_depth: int, limits: list[int], min_prob: float
) -> tuple[list[int], float]:
    """Best chain draft of one tree and its float32 score (arctic ``SuffixTree::speculate``
    with ``_speculate_path``); ``limits[m]``: most tokens for a match of length m."""
    best: list[int] = []
    best_score = 0.0
    f = _F
    for m in range(1, min(pattern_len, len(ms) + 1)):
        g = ms[m - 1]
        limit = limits[m]
        if g.kids is None:  # one occurrence: its continuation, probability 1
            pos = g.end + (m - g.depth)
            nt = min(limit, len(g.seq) - pos, max_depth - m)
            draft = g.seq[pos : pos + nt]
            score = float(nt)
        else:
            # probabilities only fall along the path: skip a match that cannot reach the best
            if limit * g.head.count < best_score * g.count * 0.999:
                continue
            draft = []
            prob = 1.0
            score = 0.0
            node = g
            nd = 0
            while nd < limit:
                c = node.head
                if c is None:
                    if node.kids is None:  # a frontier: the rest of its one occurrence
                        pos = node.end
                        nt = min(limit - nd, len(node.seq) - pos, max_depth - node.depth)
                        if nt > 0:
                            draft.extend(node.seq[pos : pos + nt])
                            if prob == 1.0:
                                score += nt
                            else:
                                for _ in range(nt):
                                    f[0] = score + prob
                                    score = f[0]
                    break
                if c.count != node.count:
                    f[0] = c.count / node.count
                    f[0] = prob * f[0]
                    prob = f[0]
                    if prob < min_prob:
                        break
                draft.append(c.token)
                nd += 1
                if prob == 1.0:
                    score += 1.0
                else:
                    f[0] = score + prob
                    score = f[0]
                node = c
        if score >= best_score:
            best, best_score = draft, score
    return best, best_score


def replay_suffix(
    trace: TokenTrace,
    max_spec_tokens: int | None = None,
    *,
    max_tree_depth: int = MAX_TREE_DEPTH,
    max_cached_requests: int = MAX_CACHED_REQUESTS,
    max_spec_factor: float = MAX_SPEC_FACTOR,
    max_spec_offset: float = MAX_SPEC_OFFSET,
    min_token_prob: float = MIN_TOKEN_PROB,
) -> list[StreamReplay]:
    """Suffix decoding at every position of every request, in trace order.

    ``max_spec_tokens`` is vLLM's ``num_speculative_tokens`` (None: ``max_tree_depth``, vLLM's
    default for ``suffix``); the keywords are vLLM's ``suffix_decoding_*`` settings and arctic's
    ``max_spec_offset``, with their defaults.
    """
    out: list[StreamReplay] = []
    drafts = suffix_drafts(
        trace,
        max_spec_tokens,
        max_tree_depth=max_tree_depth,
        max_cached_requests=max_cached_requests,
        max_spec_factor=max_spec_factor,
        max_spec_offset=max_spec_offset,
        min_token_prob=min_token_prob,
    )
    for output, steps in zip(trace.outputs, drafts, strict=True):
        gen = output.tolist()
        proposed = np.zeros(len(gen), dtype=np.int32)
        accepted = np.zeros(len(gen), dtype=np.int32)
        for t, draft in enumerate(steps):
            if draft:
                proposed[t] = len(draft)
                a, room = 0, min(len(draft), len(gen) - t)
                while a < room and draft[a] == gen[t + a]:
                    a += 1
                accepted[t] = a
        out.append(StreamReplay(proposed, accepted))
    return out


def suffix_drafts(
    trace: TokenTrace,
    max_spec_tokens: int | None = None,
    *,
    max_tree_depth: int = MAX_TREE_DEPTH,
    max_cached_requests: int = MAX_CACHED_REQUESTS,
    max_spec_factor: float = MAX_SPEC_FACTOR,
    max_spec_offset: float = MAX_SPEC_OFFSET,
    min_token_prob: float = MIN_TOKEN_PROB,
) -> list[list[list[int]]]:
    """Per request (trace order), the draft token ids proposed at every position ``t``."""
    k = max_tree_depth if max_spec_tokens is None else max_spec_tokens
    _check(k, max_tree_depth, max_cached_requests, max_spec_factor, min_token_prob)
    depth = max_tree_depth
    factor, offset, min_prob = _f32(max_spec_factor), _f32(max_spec_offset), _f32(min_token_prob)
    # arctic: min(max_spec_tokens, int(match_len * factor + offset + 1e-6)), float32 arithmetic
    limits = [max(min(k, int(_f32(_f32(m * factor) + offset) + 1e-6)), 0) for m in range(depth)]
    glob = _SuffixTrie(depth) if max_cached_requests > 0 else None
    cached: deque[int] = deque()
    drafts: list[list[list[int]]] = []
    # The tries hold no reference cycles, so reference counting frees them; the cyclic
    # collector would only rescan millions of nodes (about 40% of the run time).
    collecting = gc.isenabled()
    gc.disable()
    try:
        for i, (prompt, output) in enumerate(zip(trace.prompts, trace.outputs, strict=True)):
            steps = _request(
                glob, cached, i, prompt, output, depth, limits, max_cached_requests, min_prob
            )
            drafts.append(steps)
    finally:
        if collecting:
            gc.enable()
    return drafts


def _request(
    glob: _SuffixTrie | None,
    cached: deque[int],
    i: int,
    prompt: np.ndarray,
    output: np.ndarray,
    depth: int,
    limits: list[int],
    max_cached: int,
    min_prob: float,
) -> list[list[int]]:
    """One request's drafts at every position; updates the global tree as vLLM does."""
    limit = depth - 1  # longest match arctic tries: m < len(pattern) <= max_tree_depth
    ctx = prompt.tolist() + output.tolist()
    p = len(prompt)
    local = _SuffixTrie(depth)  # the prompt tree, then the output as it grows
    for x in ctx[:p]:
        local.append(0, x)
    if glob is not None:  # a slot for this output; FIFO eviction past the limit
        cached.append(i)
        while len(cached) > max_cached:
            glob.remove(cached.popleft())
    ml: list[_Node] = []
    mg: list[_Node] = []
    for n in range(max(1, p - limit + 1), p + 1):
        ml = _advance(local, ml, ctx, n, limit)
        if glob is not None:
            mg = _advance(glob, mg, ctx, n, limit)
    steps: list[list[int]] = []
    for n in range(p, len(ctx)):
        if n > p:  # the token sampled last step enters both trees before proposing
            x = ctx[n - 1]
            local.append(0, x)
            ml = _advance(local, ml, ctx, n, limit)
            if glob is not None:
                glob.append(i, x)
                mg = _advance(glob, mg, ctx, n, limit)
        plen = min(n, depth)
        draft, score = _speculate(ml, plen, depth, limits, min_prob)
        if mg:
            d2, s2 = _speculate(mg, plen, depth, limits, min_prob)
            if s2 > score:  # arctic keeps the prompt tree's draft on a tie
                draft = d2
        steps.append(draft)
    if glob is not None and len(ctx) > p:
        glob.append(i, ctx[-1])  # the step that samples the last token adds it too
    return steps


def _check(k: int, depth: int, cached: int, factor: float, min_prob: float) -> None:
    """vLLM's checks (``SpeculativeConfig._validate_suffix_decoding``), plus k >= 1."""
    field = "methods.suffix"
    if k < 1:
        raise InputError(f"{field}.max_spec_tokens", f"must be >= 1, got {k}")
    if depth < 1:
        raise InputError(f"{field}.max_tree_depth", f"must be >= 1, got {depth}")
    if cached < 0:
        raise InputError(f"{field}.max_cached_requests", f"must be >= 0, got {cached}")
    if factor < 0:
        raise InputError(f"{field}.max_spec_factor", f"must be >= 0, got {factor}")
    if not 0 <= min_prob <= 1:
        raise InputError(f"{field}.min_token_prob", f"must be in [0, 1], got {min_prob}")
