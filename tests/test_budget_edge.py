"""vLLM V1 at its token budget's edge: the decode that does not fit whole runs with what is
left, its draft trimmed, and accepts no more than it verified (Scheduler trim_drafts)."""

from __future__ import annotations

from simspec import simulate
from simspec.config import LengthSpec, MethodConfig, Scenario, SchedulerConfig, WorkloadConfig
from simspec.engine.build import setup_replica


def _tight(engine: str, k: int = 7, tree: str | None = None, alpha: float = 0.9) -> Scenario:
    # 12 sequences verifying 1 + 7 tokens each against a budget of 60: 7 whole, one trimmed
    method = MethodConfig(name="eagle3", k=k, acceptance={"alpha": alpha}, tree=tree)
    return Scenario(
        model="llama-3.1-8b",
        gpu="h100_sxm",
        engine=engine,
        method=method,
        # vLLM V0 admits whole prompts and refuses a budget below its context: its setup
        # (no trim, no lookahead slots) is read at a budget that holds one
        scheduler=SchedulerConfig(
            max_num_batched_tokens=4096 if engine == "vllm-v0" else 60,
            max_num_seqs=12,
            max_model_len=4096 if engine == "vllm-v0" else None,
        ),
        workload=WorkloadConfig(
            concurrency=12,
            requests=24,
            prompt=LengthSpec(mean=16),
            output=LengthSpec(mean=64),
            measure="whole",
        ),
    )


def test_vllm_trims_chains_and_sglang_trtllm_and_trees_do_not():
    assert setup_replica(_tight("vllm")).trim_drafts
    assert not setup_replica(_tight("vllm-v0")).trim_drafts
    assert not setup_replica(_tight("trtllm")).trim_drafts
    assert not setup_replica(_tight("vllm", tree="static")).trim_drafts
    lookahead = _tight("vllm").model_copy(
        update={"method": MethodConfig(name="lookahead", k=3, acceptance={"alpha": 0.7})}
    )
    assert not setup_replica(lookahead).trim_drafts  # its branches are no prefix


def test_a_vllm_run_at_the_budget_edge_verifies_a_trimmed_draft_and_finishes():
    run = simulate(_tight("vllm", alpha=1.0))  # every draft accepted: a step emits its widths
    it = run.iterations
    assert run.requests.finish_s.notna().all()
    assert it.query_tokens.max() <= 60
    decoding = it[(it.prefill_seqs == 0) & (it.decode_seqs > 0)]
    trimmed = decoding[decoding.decode_tokens % 8 != 0]
    assert len(trimmed) > 0  # 7 x 8 + 4 = 60
    assert (trimmed.decode_tokens == 60).all()
    # every draft accepted: whole drafts emit 8, the trimmed one only its width (not 8)
    assert (trimmed.spec_tokens <= trimmed.decode_tokens).all()


def test_vllm_gives_eagle_and_draft_models_lookahead_kv_and_no_one_else():
    assert setup_replica(_tight("vllm")).lookahead_slots == 7  # num_speculative_tokens
    assert setup_replica(_tight("vllm-v0")).lookahead_slots == 0
    assert setup_replica(_tight("sglang")).lookahead_slots == 0
    ngram = _tight("vllm").model_copy(
        update={"method": MethodConfig(name="ngram", k=3, acceptance={"alpha": 0.5})}
    )
    assert setup_replica(ngram).lookahead_slots == 0


def test_sglang_refuses_a_request_that_reaches_its_context():
    """SGLang's TokenizerManager refuses prompt + max_new_tokens >= context_len (vLLM: >
    max_model_len); QA: 2048 + 2048 at a 4096 context ran on SGLang."""
    from simspec import Scenario
    from simspec.catalog.models import load_model
    from simspec.engine.build import longest_request

    model = load_model("llama-3.1-8b")
    for engine, most in (("sglang", 4095), ("vllm", 4096)):
        sc = Scenario(model="llama-3.1-8b", engine=engine, scheduler={"max_model_len": 4096})
        assert longest_request(sc, model) == most
