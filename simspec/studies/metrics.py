"""The measures of a run a study reports, named once: the sweep's CSV writes them all, the
explorer's table a selection (see README.md for their meaning)."""

from __future__ import annotations

# summary metrics (RunSummary fields), in the order the tables show them
RUN_METRICS = (
    "throughput_tok_s",
    "tpot_ms_p50",
    "tpot_ms_p99",
    "ttft_ms_p50",
    "ttft_ms_p99",
    "itl_ms_p50",
    "itl_ms_p99",
    "e2e_s_p50",
    "mean_accept_len",
    "no_proposal_frac",
    "mean_verify_tokens",
    "draft_time_frac",
    "verify_time_frac",
    "overhead_time_frac",
    "preemptions",
    "unfinishable",
    "kv_blocks_total",
    "kv_block_size",
)
# their 95 % intervals (engine.intervals), each bound a RunSummary field
RUN_INTERVALS = (
    "throughput_tok_s_ci_low",
    "throughput_tok_s_ci_high",
    "tpot_ms_p50_ci_low",
    "tpot_ms_p50_ci_high",
    "tpot_ms_p99_ci_low",
    "tpot_ms_p99_ci_high",
    "ttft_ms_p50_ci_low",
    "ttft_ms_p50_ci_high",
    "ttft_ms_p99_ci_low",
    "ttft_ms_p99_ci_high",
    "e2e_s_p50_ci_low",
    "e2e_s_p50_ci_high",
)


# why a request is never served, worded for every engine (QA: it blamed vLLM's server under
# --engine hf), for every note that says so
UNSERVED_WHY = (
    "longer than the context the engine serves (prompt + output past max_model_len where it "
    "is set, else the model's max_position_embeddings: a serving engine refuses them) or than "
    "its KV cache"
)


def unserved_text(runs: int, share: float, what: str = "run(s)") -> str:
    """The note for runs whose measured requests some went unserved (the unfinishable
    column)."""
    return (
        f"{runs} {what} left up to {share:.0%} of their measured requests unserved: "
        f"{UNSERVED_WHY}; their numbers are over the rest (the unfinishable column)"
    )
