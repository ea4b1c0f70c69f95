"""SGLang's NGRAM replay: what it may propose, what a greedy target accepts, the shared trie,
and agreement with a plain transcription of the engine's trie (no shortcuts)."""

from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest

from simspec.catalog.token_traces import TokenTrace, load_token_trace
from simspec.engine.lookup.sglang_ngram import (
    DEFAULT_NUM_DRAFT_TOKENS,
    NgramTrie,
    _StdMaxHeap,
    breadth_table,
    build_recency,
    replay_sglang_ngram,
    tree_tokens,
)


def trace(*requests: tuple[list[int], list[int]]) -> TokenTrace:
    return TokenTrace(
        "t",
        tuple(str(i) for i in range(len(requests))),
        tuple(np.array(p, dtype=np.int64) for p, _ in requests),
        tuple(np.array(g, dtype=np.int64) for _, g in requests),
    )


def chain_positions(accepted: np.ndarray) -> list[int]:
    t, out = 1, []
    while t < len(accepted):
        out.append(t)
        t += int(accepted[t]) + 1
    return out


# --- a plain transcription of trie.cpp / result.cpp, for agreement -----------------------------


class _RefNode:
    def __init__(self, token: int) -> None:
        self.token = token
        self.child: dict[int, _RefNode] = {}
        self.lru: list[_RefNode] = []  # most recent first, as Trie's std::list
        self.freq = 0


class _RefTrie:
    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.root = _RefNode(-1)

    def insert(self, window: list[int]) -> None:
        for i in range(len(window)):
            cur = self.root
            for tok in window[i : i + self.depth]:
                node = cur.child.get(tok)
                if node is None:
                    node = cur.child[tok] = _RefNode(tok)
                    node.freq = 1
                else:
                    node.freq += 1
                    cur.lru.remove(node)
                cur.lru.insert(0, node)
                cur = node

    def rebuild(self, tail: list[int]) -> list[_RefNode | None]:
        anchors: list[_RefNode | None] = []
        for d in range(1, min(len(tail), self.depth) + 1):
            cur: _RefNode | None = self.root
            for tok in tail[len(tail) - d :]:
                cur = cur.child.get(tok) if cur else None
            anchors.append(cur)
        return anchors

    def advance(self, anchors: list[_RefNode | None], tokens: list[int]) -> list:
        for tok in tokens:
            size = min(len(anchors) + 1, self.depth)
            nxt: list[_RefNode | None] = [None] * size
            nxt[0] = self.root.child.get(tok)
            for d in range(1, size):
                prev = anchors[d - 1]
                nxt[d] = prev.child.get(tok) if prev else None
            anchors = nxt
        return anchors

    def build(self, anchors, budget: int, lo: int, hi: int, prob: bool) -> list[dict[int, int]]:
        mmd = max(1, self.depth - 1)
        scale = (hi - lo) / mmd
        tree: list[dict[int, int]] = [{} for _ in range(budget + 1)]
        cursor = 1
        expandable = [(a, d) for d, a in reversed(list(enumerate(anchors, 1))) if a and a.child]
        if prob:
            heap = _StdMaxHeap()

            def add(parent, node, p):
                kids = sorted(node.child.values(), key=lambda c: (-c.freq, c.token))[:hi]
                total = float(sum(c.freq for c in kids)) or 1.0
                for c in kids:
                    heap.push((parent, c, c.token, c.freq / total * p))

            for node, _ in expandable:
                add(0, node, 1.0)
                while heap.c and cursor <= budget:
                    parent, node2, tok, p = heap.pop()
                    pos = tree[parent].get(tok)
                    if pos is None:
                        pos = tree[parent][tok] = cursor
                        cursor += 1
                    add(pos, node2, p)
            return tree[:cursor]
        for node, d in expandable:
            queue = deque([(0, (mmd - d) * scale + lo, node)])
            while queue and cursor <= budget:
                parent, cur, tnode = queue.popleft()
                breadth = max(1, int(cur))
                for i, child in enumerate(tnode.lru):
                    if not (i < breadth and cursor <= budget):
                        break
                    pos = tree[parent].get(child.token)
                    if pos is None:
                        pos = tree[parent][child.token] = cursor
                        cursor += 1
                    queue.append((pos, cur - scale, child))
        return tree[:cursor]


def _ref_replay(tr: TokenTrace, k: int, depth: int, lo: int, hi: int, prob: bool, every: bool):
    """The engine's loop at batch size 1: the first step rebuilds the match state, later ones
    advance it from the last real step (t = 0 is prefill: no step, no insert)."""
    trie = _RefTrie(depth)
    out = []
    for p_arr, g_arr in zip(tr.prompts, tr.outputs, strict=True):
        prompt, gen = p_arr.tolist(), g_arr.tolist()
        seq, n = prompt + gen, len(gen)
        proposed, accepted = np.zeros(n, np.int32), np.zeros(n, np.int32)
        state, state_len, next_step = None, 0, 1
        for t in range(n):
            end = len(prompt) + t
            if state is None:
                anchors = trie.rebuild(seq[max(0, end - depth) : end])
            else:
                anchors = trie.advance(state, seq[state_len:end])
            tree = trie.build(anchors, k - 1, lo, hi, prob) if k > 1 else [{}]
            depth_ok, pos = 0, 0
            for tok in gen[t:]:
                pos = tree[pos].get(tok)
                if pos is None:
                    break
                depth_ok += 1
            proposed[t], accepted[t] = len(tree) - 1, depth_ok
            if t and (every or t == next_step):
                state, state_len = anchors, end
                trie.insert(seq[max(0, end - depth) : end])
                next_step = t + depth_ok + 1
        out.append((proposed, accepted))
    return out


def _random_trace(seed: int, n_req: int = 4, vocab: int = 6) -> TokenTrace:
    rng = random.Random(seed)
    reqs = []
    motif = [rng.randrange(vocab) for _ in range(8)]
    for _ in range(n_req):
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(1, 25))]
        gen: list[int] = []
        while len(gen) < rng.randint(5, 60):
            gen += motif[: rng.randint(1, 8)] if rng.random() < 0.5 else [rng.randrange(vocab)]
        reqs.append((prompt, gen))
    return trace(*reqs)


@pytest.mark.parametrize("seed", range(12))
def test_replay_equals_a_plain_transcription_of_the_engine(seed):
    rng = random.Random(1000 + seed)
    tr = _random_trace(seed, vocab=rng.choice([3, 5, 9]))
    k = rng.choice([1, 2, 4, 8, 12])
    depth = rng.choice([2, 4, 18])
    lo, hi = rng.choice([(1, 10), (1, 1), (2, 5)])
    prob = seed % 3 == 0
    every = seed % 4 == 1
    got = replay_sglang_ngram(
        tr,
        k,
        max_trie_depth=depth,
        min_bfs_breadth=lo,
        max_bfs_breadth=hi,
        match_type="PROB" if prob else "BFS",
        steps="every" if every else "chain",
    )
    want = _ref_replay(tr, k, depth, lo, hi, prob, every)
    for r, (p, a) in zip(got, want, strict=True):
        np.testing.assert_array_equal(r.proposed, p)
        np.testing.assert_array_equal(r.accepted, a)


def test_match_state_is_the_engines_not_a_fresh_walk():
    # Step 1 matched against an empty trie; step 2 advances that state, so the suffix [1, 1]
    # (inserted by step 1) is not an anchor although a fresh walk would find it.
    tr = trace(([1, 1, 2, 1], [1, 1, 1, 2]))
    (r,) = replay_sglang_ngram(tr, 4, steps="every")
    ((p, a),) = _ref_replay(tr, 4, 18, 1, 10, prob=False, every=True)
    np.testing.assert_array_equal(r.proposed, p)
    np.testing.assert_array_equal(r.accepted, a)
    assert r.accepted.tolist() == [0, 0, 2, 1]  # a fresh walk gives [0, 0, 0, 1]


# --- properties -------------------------------------------------------------------------------


def test_draft_tokens_come_only_from_inserted_windows():
    rng = random.Random(7)
    trie = NgramTrie(max_trie_depth=5)
    seen: set[int] = set()
    table = breadth_table(5, 1, 10)
    for _ in range(40):
        window = [rng.randrange(50) for _ in range(rng.randint(1, 5))]
        trie.insert(window)
        seen.update(window)
        context = [rng.randrange(60) for _ in range(6)]
        tokens = tree_tokens(build_recency(trie.match(context), 11, table))
        assert set(tokens) <= seen
        assert len(tokens) <= 11


def test_unseen_tokens_are_never_proposed_nor_accepted():
    # every token distinct: no suffix of any context was ever inserted with a continuation
    (r,) = replay_sglang_ngram(trace((list(range(100, 130)), list(range(200, 260)))))
    assert not r.proposed.any() and not r.accepted.any()


def test_accepted_is_bounded_by_proposed_by_the_tree_and_by_the_stream():
    k, tr = 6, _random_trace(3, n_req=6)
    for r, g in zip(replay_sglang_ngram(tr, k), tr.outputs, strict=True):
        assert (r.accepted <= r.proposed).all()
        assert (r.proposed <= k - 1).all()
        assert (r.accepted <= len(g) - np.arange(len(g))).all()


def test_a_repeated_pattern_is_proposed_and_accepted():
    motif = [11, 12, 13, 14, 15, 16, 17]
    (r,) = replay_sglang_ngram(trace(([1, 2, 3], motif * 12)))
    late = slice(3 * len(motif), None)
    assert (r.proposed[late] > 0).all()
    assert (r.accepted[late] > 0).all()
    taus = [r.accepted[t] + 1 for t in chain_positions(r.accepted)]
    assert np.mean(taus) > 3


def test_the_trie_is_shared_across_requests():
    earlier = ([5, 6], list(range(300, 340)))
    # the later request's prompt ends where the earlier output did, then continues it
    later = ([9, 9, 300, 301, 302], list(range(303, 330)))
    alone = replay_sglang_ngram(trace(later))[0]
    after = replay_sglang_ngram(trace(earlier, later))[1]
    assert not alone.proposed.any()
    assert after.accepted[0] > 0 and after.accepted.sum() > len(later[1]) // 2


def test_the_prompt_is_not_inserted_at_prefill():
    # SGLang inserts only the last max_trie_depth tokens at each decode step, never the prompt
    # at prefill: a long prompt's early text cannot be copied
    text = list(range(500, 540))
    (r,) = replay_sglang_ngram(trace((text + list(range(600, 640)), text[:20])))
    assert not r.accepted.any()


def test_one_draft_token_means_no_tree():
    (r,) = replay_sglang_ngram(trace(([1, 2, 3], [1, 2, 3] * 10)), num_draft_tokens=1)
    assert not r.proposed.any()


def test_replay_is_deterministic():
    tr = _random_trace(11, n_req=5)
    a = replay_sglang_ngram(tr, 8)
    b = replay_sglang_ngram(tr, 8)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.proposed, y.proposed)
        np.testing.assert_array_equal(x.accepted, y.accepted)


def test_capacity_overflow_is_refused_not_silently_wrong():
    with pytest.raises(ValueError, match="capacity"):
        replay_sglang_ngram(trace(([1], list(range(2, 60)))), capacity=50)


def test_packaged_trace_few_requests():
    full = load_token_trace("gsm8k")
    tr = TokenTrace("gsm8k-5", full.ids[:5], full.prompts[:5], full.outputs[:5])
    reps = replay_sglang_ngram(tr)
    assert len(reps) == 5
    for r, g in zip(reps, tr.outputs, strict=True):
        assert r.proposed.shape == g.shape
        assert (r.accepted <= r.proposed).all()
        assert (r.proposed <= DEFAULT_NUM_DRAFT_TOKENS - 1).all()
