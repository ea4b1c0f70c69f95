"""Earliest-n-gram-match proposers, replayed on token streams: vLLM's ``ngram`` and prompt
lookup decoding (``pld``).

Both look for the context's last n tokens earlier in the context (prompt plus every token
generated so far), trying the longest n first, take the *earliest* occurrence and propose the
tokens that followed it. They differ in the sizes tried and in what a match must leave:

* **vLLM V1** ``ngram`` (``NgramProposer._find_longest_matched_ngram_and_propose_tokens`` in
  vllm/v1/spec_decode/ngram_proposer.py; read in the vLLM 0.33.0 wheel, commit g4ba787ec9, and
  0.10.1, commit gaab549870, which agree): n from ``prompt_lookup_max`` down to
  ``prompt_lookup_min`` (a KMP scan over the reversed context whose tie rule ``prev_lps >=
  longest_ngram`` keeps the earliest occurrence); it proposes ``min(k, tokens left to the end of
  the context)``, so any match proposes at least one token. No match proposes nothing and the
  request is scheduled with its one sampled token (vllm/v1/core/sched/scheduler.py:
  ``num_tokens_with_spec`` counts only the drafts it has).
* **Prompt lookup decoding** (``find_candidate_pred_tokens``, github.com/apoorvumang/
  prompt-lookup-decoding README at commit cada4fe6; the same code in Spec-Bench's
  model/pld/pld.py at fd2c1cd7, whose evaluation/inference_pld.py runs it with
  ``max_ngram_size=3``, ``num_pred_tokens=10``): n from ``max_ngram_size`` down to 1; a match
  counts only when ``num_pred_tokens`` tokens follow it within the context and it starts before
  ``input_length - 2n`` (``end_idx <= input_length and start_idx < input_length - ngram_size``);
  it then proposes exactly ``num_pred_tokens``. The earliest occurrence is the one most likely
  to pass both bounds, so only it needs checking.

An occurrence qualifies when it ends before the context's last token (it is not the suffix
itself). The earliest occurrence of an n-gram in the whole stream is also its earliest in any
prefix that contains it, so one pass over the stream (:func:`replay_stream`, numpy) finds, for
every position at once, the earliest occurrence of its suffix and whether it qualifies;
:func:`replay_stream_reference` walks position by position and is kept as the specification
the fast path is tested against.
"""

from __future__ import annotations

import numpy as np

from simspec.catalog.token_traces import TokenTrace
from simspec.config import MAX_K
from simspec.engine.lookup.replay import StreamReplay, greedy_accepted


def replay_stream_reference(
    prompt: np.ndarray,
    generated: np.ndarray,
    n_min: int,
    n_max: int,
    k: int = MAX_K,
    whole_draft: bool = False,
) -> StreamReplay:
    """The proposer at every decode position of one request, one position at a time, with
    each size's earliest occurrences in a dict filled as the context grows (the n-gram
    starting at ``s`` enters once the context is ``s + n + 1`` long)."""
    tokens = np.concatenate([prompt, generated]).tolist()
    p, out = len(prompt), len(generated)
    sizes = range(n_max, n_min - 1, -1)
    first: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in sizes}
    inserted = dict.fromkeys(sizes, 0)  # next start to insert, per size
    proposed = np.zeros(out, dtype=np.int32)
    accepted = np.zeros(out, dtype=np.int32)
    for t in range(out):
        length = p + t  # context: tokens[:length]
        for n in sizes:
            table, s = first[n], inserted[n]
            while s + n + 1 <= length:
                table.setdefault(tuple(tokens[s : s + n]), s)
                s += 1
            inserted[n] = s
            if length <= n:
                continue
            start = table.get(tuple(tokens[length - n : length]))
            if start is None:
                continue
            if whole_draft and not (start + n + k <= length and start < length - 2 * n):
                continue
            begin = start + n
            draft = tokens[begin : min(begin + k, length)]
            proposed[t] = len(draft)
            accepted[t] = greedy_accepted(np.asarray(draft), generated[t : t + len(draft)])
            break
    return StreamReplay(proposed, accepted)


def replay_stream(
    prompt: np.ndarray,
    generated: np.ndarray,
    n_min: int,
    n_max: int,
    k: int = MAX_K,
    whole_draft: bool = False,
) -> StreamReplay:
    """The proposer at every decode position of one request (see the module docstring):
    vLLM's rule, or prompt lookup's with ``whole_draft`` (exactly ``k`` tokens or nothing)."""
    tokens = np.concatenate([prompt, generated]).astype(np.int64)
    p, out = len(prompt), len(generated)
    ends = p + np.arange(out)  # context length at each position
    begin = np.full(out, -1, dtype=np.int64)  # where the chosen draft starts; -1: no match
    for n in range(n_max, n_min - 1, -1):
        if len(tokens) < n:
            continue
        first = _earliest_starts(tokens, n)  # per n-gram start: its earliest occurrence
        undecided = (begin < 0) & (ends > n)
        pos = np.flatnonzero(undecided)
        if len(pos) == 0:
            continue
        length = ends[pos]
        start = first[length - n]
        ok = start < length - n  # an earlier occurrence than the suffix itself
        if whole_draft:
            ok &= (start + n + k <= length) & (start < length - 2 * n)
        begin[pos[ok]] = start[ok] + n
    matched = begin >= 0
    proposed = np.where(matched, np.minimum(k, ends - begin), 0)
    accepted = np.zeros(out, dtype=np.int64)
    pos = np.flatnonzero(matched)
    src, dst, cap = begin[pos], ends[pos], proposed[pos]
    cap = np.minimum(cap, len(tokens) - dst)  # the stream ends: nothing more to accept
    alive = np.ones(len(pos), dtype=bool)
    for j in range(int(cap.max()) if len(cap) else 0):
        alive &= j < cap
        if not alive.any():
            break
        idx = np.flatnonzero(alive)
        same = tokens[src[idx] + j] == tokens[dst[idx] + j]
        accepted[pos[idx[same]]] += 1
        alive[idx[~same]] = False
    return StreamReplay(proposed.astype(np.int32), accepted.astype(np.int32))


def _earliest_starts(tokens: np.ndarray, n: int) -> np.ndarray:
    """For every start ``s``, the earliest start of the n-gram ``tokens[s:s+n]`` (exact: the
    n-grams are compared as bytes, not hashed)."""
    windows = np.lib.stride_tricks.sliding_window_view(tokens, n)
    keys = np.ascontiguousarray(windows).view(np.dtype((np.void, 8 * n))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return first[inverse.ravel()]


def replay_vllm_ngram(
    trace: TokenTrace, k: int, prompt_lookup_min: int, prompt_lookup_max: int
) -> list[StreamReplay]:
    """Every request of ``trace``, independently (the proposer keeps no state across
    requests)."""
    if not 1 <= prompt_lookup_min <= prompt_lookup_max:
        raise ValueError("need 1 <= prompt_lookup_min <= prompt_lookup_max")
    return [
        replay_stream(p, g, prompt_lookup_min, prompt_lookup_max, k)
        for p, g in zip(trace.prompts, trace.outputs, strict=True)
    ]


def replay_pld(trace: TokenTrace, k: int, max_ngram_size: int = 3) -> list[StreamReplay]:
    """Prompt lookup decoding with ``num_pred_tokens = k``, every request independently."""
    return [
        replay_stream(p, g, 1, max_ngram_size, k, whole_draft=True)
        for p, g in zip(trace.prompts, trace.outputs, strict=True)
    ]
