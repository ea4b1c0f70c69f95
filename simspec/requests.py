"""Per-request state as columns (numpy arrays), so an iteration updates the batch at once."""

from __future__ import annotations

import numpy as np

from simspec.workload import RequestSpecs


class RequestTable:
    """Counters of every request, indexed by request id (arrival order).

    ``computed`` counts tokens whose KV is in the cache; a request is decoding when exactly its
    last sampled token is missing (``num_tokens - computed == 1``).
    """

    def __init__(self, specs: RequestSpecs) -> None:
        n = len(specs)
        self.prompt_len = specs.prompt_len.astype(np.int64)
        self.output_len = specs.output_len.astype(np.int64)
        self.trace_index = specs.trace_index
        self.arrival = np.full(n, np.nan)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.generated = np.zeros(n, dtype=np.int64)
        self.computed = np.zeros(n, dtype=np.int64)
        self.blocks = np.zeros(n, dtype=np.int64)
        self.spec_steps = np.zeros(n, dtype=np.int64)
        self.accepted = np.zeros(n, dtype=np.int64)  # draft tokens kept, over all steps
        self.last_accepted = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.unfinishable = np.zeros(n, dtype=bool)

    def __len__(self) -> int:
        return len(self.prompt_len)

    def num_tokens(self, rids: np.ndarray | int) -> np.ndarray | int:
        return self.prompt_len[rids] + self.generated[rids]
