"""Suffix decoding replay (simspec.engine.lookup.suffix) on small synthetic streams.

The last test checks the fast trie against a literal, slow model of arctic's SuffixTree (every
node materialised, siblings in one list moved by the rules of ``_increment_count`` and
``_decrement_count``, float32 probabilities) driven the way vLLM's SuffixDecodingProposer
drives SuffixDecodingCache.
"""

from __future__ import annotations

import numpy as np
import pytest

from simspec.catalog.token_traces import TokenTrace
from simspec.engine.lookup.suffix import SuffixSettings, replay_suffix, suffix_drafts
from simspec.errors import InputError


def _trace(*requests: tuple[list[int], list[int]]) -> TokenTrace:
    prompts = tuple(np.array(p, dtype=np.int64) for p, _ in requests)
    outputs = tuple(np.array(o, dtype=np.int64) for _, o in requests)
    return TokenTrace("synthetic", tuple(str(i) for i in range(len(requests))), prompts, outputs)


def _random_trace(rng: np.random.Generator, n_requests: int, vocab: int) -> TokenTrace:
    """Streams over a small vocabulary, with pasted copies of their own pieces."""

    def stream(length: int) -> list[int]:
        s = [int(v) for v in rng.integers(0, vocab, size=length)]
        for _ in range(int(rng.integers(0, 3))):
            a = int(rng.integers(0, length))
            b = int(rng.integers(a, length + 1))
            at = int(rng.integers(0, length))
            s[at:at] = s[a:b]
        return s

    return _trace(
        *[
            (stream(int(rng.integers(1, 30))), stream(int(rng.integers(1, 40))))
            for _ in range(n_requests)
        ]
    )


def test_proposes_only_tokens_seen_before() -> None:
    rng = np.random.default_rng(0)
    trace = _random_trace(rng, 5, 40)
    drafts = suffix_drafts(trace, 8)
    earlier: set[int] = set()
    for prompt, output, steps in zip(trace.prompts, trace.outputs, drafts, strict=True):
        for t, draft in enumerate(steps):
            seen = earlier | set(prompt.tolist()) | set(output[:t].tolist())
            assert set(draft) <= seen
        earlier |= set(output.tolist())


def test_no_repeated_token_means_no_proposal() -> None:
    trace = _trace((list(range(10)), list(range(10, 30))), (list(range(30, 40)), [40, 41, 42]))
    for r in replay_suffix(trace, 24):
        assert not r.proposed.any() and not r.accepted.any()


@pytest.mark.parametrize("k", [1, 3, 24])
def test_accepted_within_proposed_within_k(k: int) -> None:
    rng = np.random.default_rng(k)
    trace = _random_trace(rng, 6, 4)
    replays = replay_suffix(trace, k)
    drafts = suffix_drafts(trace, k)
    assert any(r.accepted.any() for r in replays)
    for r, steps, output in zip(replays, drafts, trace.outputs, strict=True):
        assert len(r.proposed) == len(output)
        assert (r.accepted <= r.proposed).all() and (r.proposed <= k).all()
        # a chain: the verification width is 1 + proposed, every proposed token is a real node
        assert [len(d) for d in steps] == r.proposed.tolist()


def _copy_trace() -> TokenTrace:
    """A prompt holding 20 distinct tokens then a separator; the output repeats those 20."""
    body = list(range(100, 120))
    return _trace((body + [999], body))


@pytest.mark.parametrize("factor", [0.5, 1.0, 2.0])
def test_draft_length_grows_with_match_length(factor: float) -> None:
    # After t copied tokens the longest match with a continuation is t long (the separator
    # breaks t + 1); what follows in the prompt runs 21 tokens (the copy, 999, the output so
    # far), so the draft is min(floor(factor * t), 21) with a deep tree and a large k.
    r = replay_suffix(_copy_trace(), 64, SuffixSettings(max_tree_depth=64, max_spec_factor=factor))[
        0
    ]
    expected = [min(int(factor * t), 21) for t in range(20)]
    assert r.proposed.tolist() == expected
    assert r.accepted.tolist() == [min(e, 20 - t) for t, e in enumerate(expected)]


def test_match_plus_draft_stay_within_the_tree_depth() -> None:
    # vLLM's default depth 24: a match of m tokens leaves room for 24 - m, so with factor 1
    # the best is m = 12 once t >= 12
    r = replay_suffix(_copy_trace(), 24)[0]
    assert r.proposed.tolist() == [min(t, 12) for t in range(20)]


def test_max_spec_tokens_caps_the_draft() -> None:
    r = replay_suffix(_copy_trace(), 3)[0]
    assert r.proposed.max() == 3


def test_earlier_output_is_proposed_to_a_later_request() -> None:
    answer = list(range(50, 70))
    first = ([1, 2, 3], answer)
    second = ([7, 8, 50, 51, 52], list(range(53, 70)))  # its prompt ends where answer goes on
    later = replay_suffix(_trace(first, second), 24)[1]
    assert later.proposed[0] == 3 and later.accepted[0] == 3  # match 50 51 52 -> 53 54 55
    assert later.accepted.sum() > 0
    alone = replay_suffix(_trace(second), 24)[0]  # the first request has not run
    assert not alone.proposed.any()
    no_cache = replay_suffix(_trace(first, second), 24, SuffixSettings(max_cached_requests=0))[1]
    assert not no_cache.proposed.any()


def test_later_requests_do_not_change_earlier_ones() -> None:
    rng = np.random.default_rng(7)
    trace = _random_trace(rng, 6, 5)
    full = replay_suffix(trace, 8)
    head = TokenTrace("head", trace.ids[:3], trace.prompts[:3], trace.outputs[:3])
    for a, b in zip(replay_suffix(head, 8), full[:3], strict=True):
        assert (a.proposed == b.proposed).all() and (a.accepted == b.accepted).all()


def test_eviction_forgets_the_oldest_output() -> None:
    answer = list(range(50, 70))
    first = ([1, 2, 3], answer)
    filler = ([4], [5, 6])
    second = ([7, 8, 50, 51, 52], list(range(53, 70)))
    trace = _trace(first, filler, second)
    assert replay_suffix(trace, 24, SuffixSettings(max_cached_requests=3))[2].proposed[0] == 3
    # with room for two outputs, the second request's slot pushes out the first's
    assert replay_suffix(trace, 24, SuffixSettings(max_cached_requests=2))[2].proposed[0] == 0


@pytest.mark.parametrize(("frequent", "rare"), [(3, 4), (4, 3)])
def test_more_frequent_continuation_wins(frequent: int, rare: int) -> None:
    # "1 2" goes on with `frequent` twice and `rare` once, the rare one most recently
    prompt = [1, 2, frequent, 90, 1, 2, frequent, 91, 1, 2, rare, 92, 1, 2]
    draft = suffix_drafts(_trace((prompt, [frequent, 5])), 24)[0][0]
    # "1 2" has count 4 (with the context's own end): 2/4, then 90 or 91: 1/4
    assert draft == [frequent, 90]
    # below the threshold nothing is proposed
    assert (
        suffix_drafts(_trace((prompt, [frequent, 5])), 24, SuffixSettings(min_token_prob=0.6))[0][0]
        == []
    )


def test_deterministic() -> None:
    rng = np.random.default_rng(3)
    trace = _random_trace(rng, 5, 3)
    a, b = replay_suffix(trace, 6), replay_suffix(trace, 6)
    for x, y in zip(a, b, strict=True):
        assert (x.proposed == y.proposed).all() and (x.accepted == y.accepted).all()


@pytest.mark.parametrize(
    "setting",
    [
        {"max_tree_depth": 0},
        {"max_cached_requests": -1},
        {"max_spec_factor": -1.0},
        {"min_token_prob": 1.5},
    ],
)
def test_bad_settings_are_refused(setting: dict) -> None:
    with pytest.raises(InputError):
        replay_suffix(_copy_trace(), 4, SuffixSettings(**setting))


def test_probabilities_are_float32_as_in_arctic() -> None:
    # "1 2" is seen 10 times (with the context's end), 3 of them go on with 3, and "1 2 3"
    # with three different tokens: 3/10 then 1/3. In float32 the product rounds up to
    # 0.10000001 >= 0.1f and the second token is proposed; in float64 it is 0.0999...9 < 0.1.
    prompt: list[int] = []
    for sep, tail in enumerate([[3, 10], [3, 11], [3, 12], [20], [21], [22], [23], [24], [25]]):
        prompt += [1, 2, *tail, 100 + sep]
    prompt += [1, 2]
    assert suffix_drafts(_trace((prompt, [3, 10])), 24)[0][0] == [3, 10]


# --- a literal model of arctic's suffix tree, slow and simple --------------------------------


class _RefNode:
    def __init__(self) -> None:
        self.count = 0
        self.kids: dict[int, _RefNode] = {}
        self.order: list[_RefNode] = []  # siblings, arctic's head_child first


def _ref_increment(parent: _RefNode, child: _RefNode) -> None:
    sib, c = parent.order, child.count
    i = sib.index(child)
    if i > 0 and sib[i - 1].count <= c + 1:  # moves before the head of the previous group
        head = next(j for j in range(i) if sib[j].count == sib[i - 1].count)
        sib.insert(head, sib.pop(i))
    child.count += 1


def _ref_decrement(parent: _RefNode, child: _RefNode) -> None:
    sib, c = parent.order, child.count
    i = sib.index(child)
    if i + 1 < len(sib) and sib[i + 1].count == c:  # moves before the next group's head
        sib.pop(i)
        j = next((j for j in range(i, len(sib)) if sib[j].count < c), len(sib))
        sib.insert(j, child)
    child.count -= 1


class _RefTree:
    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.root = _RefNode()
        self.seqs: dict[int, list[int]] = {}

    def append(self, sid: int, x: int) -> None:
        seq = self.seqs.setdefault(sid, [])
        seq.append(x)
        self.root.count += 1
        for start in range(max(0, len(seq) - self.depth), len(seq)):
            node = self.root
            for tok in seq[start:-1]:
                node = node.kids[tok]
            child = node.kids.get(x)
            if child is None:
                child = node.kids[x] = _RefNode()
                child.count = 1
                node.order.append(child)
            else:
                _ref_increment(node, child)

    def remove(self, sid: int) -> None:
        seq = self.seqs.pop(sid, [])
        for start in range(len(seq)):
            self.root.count -= 1
            node = self.root
            for tok in seq[start : start + self.depth]:
                child = node.kids.get(tok)
                if child is None:
                    break
                if child.count > 1:
                    _ref_decrement(node, child)
                    node = child
                    continue
                del node.kids[tok]
                node.order.remove(child)
                break

    def speculate(self, pattern, k, factor, offset, min_prob) -> tuple[list[int], np.float32]:
        f32 = np.float32
        best, best_score = [], f32(0)
        for m in range(1, len(pattern)):
            node = self.root
            for tok in pattern[len(pattern) - m :]:
                node = node.kids.get(tok)
                if node is None:
                    return best, best_score
            limit = max(min(k, int(float(f32(m) * f32(factor) + f32(offset)) + 1e-6)), 0)
            draft, prob, score = [], f32(1), f32(0)
            while len(draft) < limit and node.order:
                child = node.order[0]
                prob = prob * (f32(child.count) / f32(node.count))
                if prob < f32(min_prob):
                    break
                draft.append(_child_token(node, child))
                score = score + prob
                node = child
            if score >= best_score:
                best, best_score = draft, score
        return best, best_score


def _child_token(node: _RefNode, child: _RefNode) -> int:
    return next(t for t, c in node.kids.items() if c is child)


def _ref_drafts(trace: TokenTrace, k, depth, cached, factor, offset, min_prob) -> list:
    """vLLM's SuffixDecodingProposer over SuffixDecodingCache, serially, on the literal tree."""
    glob, order, out = _RefTree(depth), [], []
    for i, (prompt, output) in enumerate(zip(trace.prompts, trace.outputs, strict=True)):
        ctx = prompt.tolist() + output.tolist()
        local = _RefTree(depth)
        for x in prompt.tolist():
            local.append(0, x)
        if cached:
            order.append(i)
            while len(order) > cached:
                glob.remove(order.pop(0))
        steps = []
        for n in range(len(prompt), len(ctx)):
            if n > len(prompt):
                local.append(0, ctx[n - 1])
                if cached:
                    glob.append(i, ctx[n - 1])
            pattern = ctx[max(0, n - depth) : n]
            d1, s1 = local.speculate(pattern, k, factor, offset, min_prob)
            d2, s2 = glob.speculate(pattern, k, factor, offset, min_prob)
            steps.append(d1 if s1 >= s2 else d2)
        if cached:
            glob.append(i, ctx[-1])
        out.append(steps)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("evicting", [False, True])
def test_matches_a_literal_model_of_arctics_tree(evicting: bool) -> None:
    rng = np.random.default_rng(11 + evicting)
    for _ in range(40):
        trace = _random_trace(rng, int(rng.integers(1, 6)), int(rng.integers(2, 5)))
        k = int(rng.choice([1, 3, 24]))
        depth = int(rng.choice([2, 4, 8, 24]))
        # a global tree of one or two outputs evicts at every request
        cached = int(rng.choice([1, 2] if evicting else [0, 1, 10000]))
        factor = float(rng.choice([0.5, 1.0, 2.0]))
        offset = float(rng.choice([0.0, -1.0, 1.5]))
        min_prob = float(rng.choice([0.0, 0.1, 0.34]))
        settings = SuffixSettings(
            max_tree_depth=depth,
            max_cached_requests=cached,
            max_spec_factor=factor,
            max_spec_offset=offset,
            min_token_prob=min_prob,
        )
        mine = suffix_drafts(trace, k, settings)
        assert mine == _ref_drafts(trace, k, depth, cached, factor, offset, min_prob)
