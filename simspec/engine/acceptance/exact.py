"""The exact rule of speculative sampling, in one place.

Speculative sampling (Leviathan et al. 2023, "Fast Inference from Transformers
via Speculative Decoding"; Chen et al. 2023, "Accelerating Large Language Model
Decoding with Speculative Sampling") lets a cheap draft model propose K tokens
that the target model verifies in one forward pass.  The rejection rule below
makes the emitted tokens distributed *exactly* as if they had been sampled from
the target alone, so speculation changes latency, never output quality.

Two layers live here:

* the reference rule on explicit distributions (``verify_chain``,
  ``verify_chain_greedy``, ``speculative_sample``, and ``verify_siblings`` for
  the several candidates of one tree node), readable and validated, used by
  tests and small experiments;
* the fast path used in the simulator's hot loop (``sample_accept_counts``),
  which never sees tokens: it only needs, per draft position, the probability
  ``alpha_j = sum_x min(p_j(x), q_j(x))`` that the position is accepted given
  all earlier ones were.  The tests check that the two agree in distribution.

Shapes: ``p`` is (K+1, V), target distributions at the K draft positions plus
the bonus position; ``q`` is (K, V), draft distributions; ``draft_tokens`` is
(K,), with x_j ~ q_j.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "verify_siblings",
    "verify_chain",
    "verify_chain_greedy",
    "speculative_sample",
    "acceptance_rate",
    "sample_accept_counts",
    "expected_tokens_per_step",
]

# How far a distribution's sum may stray from 1 (float32 softmax outputs
# summed over a large vocabulary drift by ~1e-5).
_SUM_ATOL = 1e-4


# --------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------


def _as_distributions(x: np.ndarray, name: str, ndim: int) -> np.ndarray:
    """Return ``x`` as float64 with rows that are probability distributions.

    Raising here, with the argument's name, beats a silently biased sampler:
    a negative "probability" or an unnormalised row would quietly break the
    exactness guarantee instead of crashing.
    """
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    if arr.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty vocabulary axis, got shape {arr.shape}")
    # one min and one sum cover everything: NaN fails ">= 0", inf fails the sum
    if arr.size == 0:
        return arr  # e.g. q of shape (0, V) when K = 0
    if not arr.min() >= 0.0:
        if np.any(np.isnan(arr)):
            raise ValueError(f"{name} must not contain NaN")
        raise ValueError(f"{name} must not contain negative probabilities")
    sums = arr.sum(axis=-1)
    if not np.abs(sums - 1.0).max() <= _SUM_ATOL:
        raise ValueError(
            f"{name} rows must sum to 1 (and be finite), got sums {np.atleast_1d(sums)}"
        )
    return arr


def _as_tokens(draft_tokens: np.ndarray, k: int, vocab: int) -> np.ndarray:
    tokens = np.asarray(draft_tokens)
    if tokens.shape != (k,):
        raise ValueError(f"draft_tokens must have shape ({k},), got {tokens.shape}")
    if k and not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"draft_tokens must be integers, got dtype {tokens.dtype}")
    tokens = tokens.astype(np.int64, copy=False)
    if k and (tokens.min() < 0 or tokens.max() >= vocab):
        raise ValueError(f"draft_tokens must lie in [0, {vocab}), got {tokens}")
    return tokens


def _check_p_q(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = _as_distributions(p, "p", ndim=2)
    q = _as_distributions(q, "q", ndim=2)
    k, vocab = q.shape
    if p.shape != (k + 1, vocab):
        raise ValueError(
            f"p must have shape (K+1, V) = ({k + 1}, {vocab}) to match q of shape "
            f"{q.shape} (K draft positions plus the bonus position), got {p.shape}"
        )
    return p, q


# --------------------------------------------------------------------------
# sampling primitives
# --------------------------------------------------------------------------


def _sample_rows(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per row of a (rows, V) non-negative matrix, by inverse CDF.

    Rows need not be normalised.  Exactly one uniform per row keeps the random
    stream easy to reason about.
    """
    cdf = np.cumsum(probs, axis=1)
    x = rng.random(probs.shape[0]) * cdf[:, -1]
    # count of cdf entries <= x = first index whose cdf exceeds x, so a token
    # with zero mass (cdf flat across it) can never be picked
    idx = (cdf <= x[:, None]).sum(axis=1, dtype=np.int64)
    overflow = idx == probs.shape[1]
    if overflow.any():
        # x rounded up to the row total: take the last token with mass
        last_nonzero = probs.shape[1] - 1 - np.argmax(probs[:, ::-1] > 0, axis=1)
        idx = np.where(overflow, last_nonzero, idx)
    return idx


def _sample_categorical(probs: np.ndarray, rng: np.random.Generator) -> int:
    """One draw from a non-negative vector; same rule as ``_sample_rows``."""
    cdf = np.cumsum(probs)
    # side="right": the first index whose cdf exceeds x (never a zero-mass token)
    idx = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    if idx == probs.shape[0]:
        # x rounded up to the total: take the last token with mass
        idx = int(np.flatnonzero(probs)[-1])
    return idx


def _residual_distribution(p_j: np.ndarray, q_j: np.ndarray) -> np.ndarray:
    """(p_j - q_j)+ : where to resample after a rejection (unnormalised).

    Rejection only happens on tokens the draft over-proposes (q > p); the
    residual puts back exactly the mass the draft under-proposes (p > q), so
    accepted + resampled mass adds up to p_j.  Resampling from p_j instead
    would double-count the accepted mass and bias the output towards q.
    """
    residual = np.maximum(p_j - q_j, 0.0)
    if residual.sum() <= 0.0:
        # p_j == q_j (up to rounding): rejection has probability ~0, and any
        # fallback is exact in the limit; p_j is the natural one.
        return p_j
    return residual


# --------------------------------------------------------------------------
# reference rule
# --------------------------------------------------------------------------


def verify_chain(
    p: np.ndarray, q: np.ndarray, draft_tokens: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Verify K drafted tokens against the target; return the emitted tokens.

    For j = 0..K-1: accept x_j with probability min(1, p_j(x_j) / q_j(x_j)).
    On the first rejection, emit one token from the normalised residual
    (p_j - q_j)+ and stop.  If all K pass, emit a bonus token from p_K (the
    target's forward pass computed it for free).  Every emitted token is
    distributed as the target would have sampled it, which is why speculative
    decoding is lossless.  Returns 1..K+1 tokens (accepted drafts + 1).
    """
    p, q = _check_p_q(p, q)
    k, vocab = q.shape
    tokens = _as_tokens(draft_tokens, k, vocab)
    bad = np.flatnonzero(q[np.arange(k), tokens] <= 0.0)
    if bad.size:
        j = int(bad[0])
        raise ValueError(
            f"draft_tokens[{j}] = {tokens[j]} has zero draft probability q[{j}, {tokens[j]}]; "
            "draft tokens must be sampled from q"
        )
    return _verify_chain(p, q, tokens, rng)


def _verify_chain(
    p: np.ndarray, q: np.ndarray, tokens: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """The rule itself, on already validated inputs (see ``verify_chain``)."""
    k = q.shape[0]
    emitted: list[int] = []
    for j in range(k):
        x = int(tokens[j])
        # q >= p: always accept (ratio >= 1 > u); q < p: accept w.p. p/q
        if rng.random() < p[j, x] / q[j, x]:
            emitted.append(x)
            continue
        # rejected: resample from the residual, then stop (later drafts were
        # conditioned on a token the target refused)
        emitted.append(_sample_categorical(_residual_distribution(p[j], q[j]), rng))
        return np.asarray(emitted, dtype=np.int64)
    # all K accepted: bonus token from the target's last distribution
    emitted.append(_sample_categorical(p[k], rng))
    return np.asarray(emitted, dtype=np.int64)


def verify_chain_greedy(p: np.ndarray, draft_tokens: np.ndarray) -> np.ndarray:
    """Temperature-0 verification: keep drafts while they match argmax p_j.

    At temperature 0 the target is deterministic, so exactness means "output
    equals plain greedy decoding of the target": accept while the draft equals
    argmax p_j, then emit argmax p_j at the first mismatch (or the bonus
    argmax p_K).  Only the ordering of ``p`` matters, so logits work too, masked ones
    (-inf) included; ties go to the lowest token id (``np.argmax``, as torch.argmax in the
    engines' greedy samplers).  Returns 1..K+1 tokens.
    """
    scores = np.asarray(p, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[0] < 1 or scores.shape[1] < 1:
        raise ValueError(f"p must have shape (K+1, V) with K >= 0, V >= 1, got {scores.shape}")
    if np.isnan(scores).any() or np.isposinf(scores).any():
        raise ValueError("p must contain no NaN or +inf (masked logits may be -inf)")
    if np.isneginf(scores).all(axis=1).any():
        raise ValueError("p has a row with every token masked (-inf): nothing to emit")
    k, vocab = scores.shape[0] - 1, scores.shape[1]
    tokens = _as_tokens(draft_tokens, k, vocab)

    target = scores.argmax(axis=1)  # what greedy decoding of the target emits
    # accepted = length of the longest prefix where draft == target argmax
    mismatch = np.flatnonzero(tokens != target[:k])
    accepted = int(mismatch[0]) if mismatch.size else k
    # accepted drafts equal the target argmax, so the output is target[:n+1]
    return target[: accepted + 1].astype(np.int64)


def speculative_sample(p: np.ndarray, q: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draft x_j ~ q_j for each of the K positions, then ``verify_chain``.

    Rows of ``q`` are treated as independent of earlier draft tokens (fixed
    per-position distributions), which is all a distribution-level test needs.
    """
    p, q = _check_p_q(p, q)
    draft_tokens = _sample_rows(q, rng)  # x_j ~ q_j, all K rows at once
    return _verify_chain(p, q, draft_tokens, rng)


def acceptance_rate(p_j: np.ndarray, q_j: np.ndarray) -> float:
    """alpha = sum_x min(p(x), q(x)) = 1 - TV(p, q).

    The probability that a token drafted from q is accepted against p:
    sum_x q(x) * min(1, p(x)/q(x)).  This single number per position is all
    the simulator's fast path needs.
    """
    p_j = _as_distributions(p_j, "p_j", ndim=1)
    q_j = _as_distributions(q_j, "q_j", ndim=1)
    if p_j.shape != q_j.shape:
        raise ValueError(f"p_j and q_j must have the same shape, got {p_j.shape} and {q_j.shape}")
    return float(np.minimum(p_j, q_j).sum())


# --------------------------------------------------------------------------
# fast path (simulator hot loop)
# --------------------------------------------------------------------------


def sample_accept_counts(alpha: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Number of accepted draft tokens per sequence, without any tokens.

    ``alpha`` is (B, K): alpha[b, j] is the probability that position j of
    sequence b is accepted given positions < j were.  Under the exact rule
    the accept/reject decisions form exactly this chain of Bernoulli trials,
    so the count is the length of the longest prefix with u < alpha (one
    uniform per position).  Tokens emitted per step = count + 1.

    Draws exactly one ``rng.random((B, K))`` per call, so the stream stays
    aligned across runs.  Cost is a handful of numpy calls, cheap enough to
    call once per engine iteration.
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    if alpha.ndim != 2:
        raise ValueError(f"alpha must have shape (B, K), got {alpha.shape}")
    # written so that NaN fails too
    if alpha.size and not (alpha.min() >= 0.0 and alpha.max() <= 1.0):
        raise ValueError("alpha must lie in [0, 1]")
    return accept_prefix(alpha, rng)


def accept_prefix(alpha: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """:func:`sample_accept_counts` of a float64 (B, K) ``alpha`` already known to lie in
    [0, 1] (a sampler's own profile): the same one draw, unchecked. One sequence is counted
    in Python, which compares the same floats (``u < alpha``) for a fifth of the time."""
    u = rng.random(alpha.shape)
    if alpha.shape[0] == 1:
        count = 0
        for x, a in zip(u[0].tolist(), alpha[0].tolist(), strict=True):
            if not x < a:
                break
            count += 1
        return np.array([count], dtype=np.int64)
    # accepted[b, j] = all positions 0..j accepted; its row sum is the count
    accepted = np.logical_and.accumulate(u < alpha, axis=1)
    return accepted.sum(axis=1, dtype=np.int64)


def expected_tokens_per_step(alpha_positions: np.ndarray) -> float:
    """E[tokens emitted per verify step] = 1 + sum_j prod_{i<=j} alpha_i.

    Position j's draft is emitted iff positions 0..j are all accepted, and one
    extra token (residual or bonus) is always emitted.  For iid alpha this is
    (1 - alpha^(K+1)) / (1 - alpha), the formula of Leviathan et al.
    """
    alpha = np.asarray(alpha_positions, dtype=np.float64)
    if alpha.ndim != 1:
        raise ValueError(f"alpha_positions must be 1-D (K,), got shape {alpha.shape}")
    if alpha.size and not (alpha.min() >= 0.0 and alpha.max() <= 1.0):
        raise ValueError("alpha_positions must lie in [0, 1]")
    return float(1.0 + np.cumprod(alpha).sum())


# --------------------------------------------------------------------------
# several candidates at one tree node: recursive rejection sampling
# --------------------------------------------------------------------------


def verify_siblings(
    p: np.ndarray, q: np.ndarray, candidates: np.ndarray, rng: np.random.Generator
) -> tuple[int, int | None]:
    """Verify the sibling candidates of one tree node (each drawn independently from ``q``)
    against the target ``p``; return ``(token, index)``.

    This is the rule for candidates drawn independently from a draft distribution. It is not
    what SGLang's tree sampling runs (``tree_speculative_sampling_target_only``: distinct
    top-k candidates, the draft taken as one-hot, sibling r accepted when one coin per depth
    falls under the target's mass of siblings 1..r), nor vLLM V1's (no draft probabilities;
    argmax drafts): the tree walk's sampled sibling table built on this rule is an
    approximation of those engines at temperature > 0 (README, "Acceptance").

    Recursive rejection sampling (SpecInfer, Miao et al. 2024, "multi-step speculative
    sampling"): try candidate i with probability min(1, r(x_i) / q(x_i)), where r starts as p;
    on each rejection r becomes the normalised residual (r - q)+. ``index`` is the accepted
    candidate (the walk continues into its subtree), or None when every candidate was
    rejected and ``token`` was sampled from the last residual. The emitted token is
    distributed exactly as p, however many candidates there are.
    """
    p = _as_distributions(p, "p", ndim=1)
    q = _as_distributions(q, "q", ndim=1)
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same vocabulary, got {p.shape} and {q.shape}")
    cand = _as_tokens(candidates, len(np.atleast_1d(candidates)), len(p))
    if (q[cand] <= 0).any():  # as verify_chain refuses (QA: it emitted [0, 1] for p [.5, .5])
        raise ValueError("candidates must be tokens the draft can propose (q(x) > 0)")
    r = p.copy()
    for i, x in enumerate(cand):
        if rng.random() < min(1.0, r[x] / q[x]):
            return int(x), i
        residual = np.maximum(r - q, 0.0)
        total = residual.sum()
        if total <= 0.0:  # r <= q everywhere: r == q, and q's draws are r's draws
            continue
        r = residual / total
    return _sample_categorical(r, rng), None
