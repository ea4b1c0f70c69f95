"""What a lookup proposer does at every position of a token stream.

Positions: a decoding step that starts when ``t`` tokens have been generated sees the context
``prompt + generated[:t]`` and proposes drafts for ``generated[t], generated[t+1], ...``. For every
``t`` in ``0 .. len(generated) - 1`` a replay records how many draft tokens the proposer offers
(0: no match, the sequence verifies one token) and how many of them a greedy target accepts (the
longest proposed prefix, or tree path, equal to ``generated[t:]``). At temperature 0 that is the
exact rule of speculative sampling applied to the real stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class StreamReplay:
    """One request's proposals, indexed by the number of tokens generated before the step."""

    proposed: np.ndarray  # int32 (T,): draft tokens offered (tree: real nodes, padding excluded)
    accepted: np.ndarray  # int32 (T,): of those, accepted by a greedy target (<= proposed)

    def __post_init__(self) -> None:
        if self.proposed.shape != self.accepted.shape or self.proposed.ndim != 1:
            raise ValueError("proposed and accepted must be 1-D arrays of one length")


def greedy_accepted(proposal: np.ndarray, future: np.ndarray) -> int:
    """Length of the longest prefix of ``proposal`` equal to ``future`` (the target's next
    tokens): what a greedy target accepts of a chain draft."""
    n = min(len(proposal), len(future))
    if n == 0:
        return 0
    diff = np.flatnonzero(proposal[:n] != future[:n])
    return int(diff[0]) if len(diff) else n


@dataclass(frozen=True, eq=False)
class ReplayTable:
    """Every request's replay at one draft length, stored flat (as acceptance traces are)."""

    offsets: np.ndarray  # (n,) start of each request's positions
    lengths: np.ndarray  # (n,) positions per request (its output length)
    proposed: np.ndarray  # flat int64
    accepted: np.ndarray  # flat int64

    @property
    def num_requests(self) -> int:
        return len(self.lengths)

    @classmethod
    def flat(cls, lengths: np.ndarray, proposed: np.ndarray, accepted: np.ndarray) -> ReplayTable:
        """The table of requests of ``lengths`` positions whose columns run back to back."""
        lengths = np.asarray(lengths).astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        return cls(offsets, lengths, proposed.astype(np.int64), accepted.astype(np.int64))

    @classmethod
    def of(cls, replays: list[StreamReplay]) -> ReplayTable:
        return cls.flat(
            np.array([len(r.proposed) for r in replays], dtype=np.int64),
            np.concatenate([r.proposed for r in replays]),
            np.concatenate([r.accepted for r in replays]),
        )
