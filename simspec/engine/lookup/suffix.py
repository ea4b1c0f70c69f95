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

Probabilities and scores are float32, as in the C++ (``_f32``), so ties and the
``min_token_prob`` threshold resolve as there. The trees themselves, children in arctic's
order, are :mod:`simspec.engine.lookup.suffix_tree`'s; eviction (FIFO,
``max_cached_requests``) happens when a request starts, as
``SuffixDecodingCache.start_request`` does.

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
from dataclasses import dataclass

import numpy as np

from simspec.catalog.token_traces import TokenTrace
from simspec.engine.lookup.replay import StreamReplay
from simspec.engine.lookup.suffix_tree import Node, SuffixTrie
from simspec.errors import InputError


@dataclass(frozen=True)
class SuffixSettings:
    """vLLM's ``suffix_decoding_*`` settings and arctic's ``max_spec_offset``, with their
    defaults (vllm/config/speculative.py @ 002e77c1: SpeculativeConfig fields), checked as
    vLLM checks them (``SpeculativeConfig._validate_suffix_decoding``)."""

    max_tree_depth: int = 24
    max_cached_requests: int = 10000  # 0: no global tree
    max_spec_factor: float = 1.0
    min_token_prob: float = 0.1
    # vllm/v1/spec_decode/suffix_decoding.py @ 044ac3a0 does not pass it: arctic's default
    max_spec_offset: float = 0.0

    def __post_init__(self) -> None:
        depth, cached = self.max_tree_depth, self.max_cached_requests
        factor, min_prob = self.max_spec_factor, self.min_token_prob
        field = "methods.suffix"
        if depth < 1:
            raise InputError(f"{field}.max_tree_depth", f"must be >= 1, got {depth}")
        if cached < 0:
            raise InputError(f"{field}.max_cached_requests", f"must be >= 0, got {cached}")
        if factor < 0:
            raise InputError(f"{field}.max_spec_factor", f"must be >= 0, got {factor}")
        if not 0 <= min_prob <= 1:
            raise InputError(f"{field}.min_token_prob", f"must be in [0, 1], got {min_prob}")

    def spec_tokens(self, max_spec_tokens: int | None) -> int:
        """vLLM's ``num_speculative_tokens`` (None: ``max_tree_depth``, its default for
        ``suffix``), checked to be at least 1."""
        k = self.max_tree_depth if max_spec_tokens is None else max_spec_tokens
        if k < 1:
            raise InputError("methods.suffix.max_spec_tokens", f"must be >= 1, got {k}")
        return k


DEFAULTS = SuffixSettings()

_F = array("f", [0.0])


def _f32(x: float) -> float:
    """``x`` rounded to float32: arctic's probabilities and scores are C++ ``float``."""
    _F[0] = x
    return _F[0]


def _advance(trie: SuffixTrie, ms: list[Node], ctx: list[int], n: int, limit: int) -> list[Node]:
    """Match states once ``ctx[n-1]`` was appended: ``out[k-1]`` is the deepest materialised
    node on the path of ``ctx[n-k:n]``, for k = 1, 2, ... while that suffix occurs with a
    continuation (k <= limit). A suffix without one can only grow into suffixes seen once,
    at the end of the context, which never propose."""
    x = ctx[n - 1]
    c = trie.root_kids.get(x)
    if c is None or limit < 1:
        return []
    out: list[Node] = []
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
            child = g.kids.get(x)
            if child is None:
                break
            g = child
        else:
            pos = g.end + (k - g.depth)
            if k >= depth or pos >= len(g.seq) or g.seq[pos] != x:
                break
    return out


def _speculate(
    ms: list[Node], pattern_len: int, max_depth: int, limits: list[int], min_prob: float
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
            head = g.head
            if head is not None and limit * head.count < best_score * g.count * 0.999:
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
    trace: TokenTrace, max_spec_tokens: int | None = None, settings: SuffixSettings = DEFAULTS
) -> list[StreamReplay]:
    """Suffix decoding at every position of every request, in trace order: what each step
    proposed and how much of it the greedy target accepted."""
    out: list[StreamReplay] = []
    drafts = suffix_drafts(trace, max_spec_tokens, settings)
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
    trace: TokenTrace, max_spec_tokens: int | None = None, settings: SuffixSettings = DEFAULTS
) -> list[list[list[int]]]:
    """Per request (trace order), the draft token ids proposed at every position ``t``."""
    k = settings.spec_tokens(max_spec_tokens)
    depth = settings.max_tree_depth
    factor, offset = _f32(settings.max_spec_factor), _f32(settings.max_spec_offset)
    min_prob = _f32(settings.min_token_prob)
    # arctic: min(max_spec_tokens, int(match_len * factor + offset + 1e-6)), float32 arithmetic
    limits = [max(min(k, int(_f32(_f32(m * factor) + offset) + 1e-6)), 0) for m in range(depth)]
    max_cached = settings.max_cached_requests
    glob = SuffixTrie(depth) if max_cached > 0 else None
    cached: deque[int] = deque()
    drafts: list[list[list[int]]] = []
    # The tries hold no reference cycles, so reference counting frees them; the cyclic
    # collector would only rescan millions of nodes, again and again.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for i, (prompt, output) in enumerate(zip(trace.prompts, trace.outputs, strict=True)):
            steps = _request(glob, cached, i, prompt, output, depth, limits, max_cached, min_prob)
            drafts.append(steps)
    finally:
        if collecting:
            gc.enable()
    return drafts


def _request(
    glob: SuffixTrie | None,
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
    local = SuffixTrie(depth)  # the prompt tree, then the output as it grows
    for x in ctx[:p]:
        local.append(0, x)
    if glob is not None:  # a slot for this output; FIFO eviction past the limit
        cached.append(i)
        while len(cached) > max_cached:
            glob.remove(cached.popleft())
    ml: list[Node] = []
    mg: list[Node] = []
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
