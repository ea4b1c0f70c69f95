"""A drafter with its own KV cache prefills every prompt the target does (vLLM's proposer over
the step's scheduled tokens, SGLang's forward_draft_extend): the step that carries a prompt
chunk pays the draft's pass over it; heads on the last hidden state and lookups pay none."""

from __future__ import annotations

import numpy as np
import pytest

from simspec import simulate
from simspec.config import LengthSpec, MethodConfig, Scenario, WorkloadConfig
from simspec.engine.build import setup_replica
from simspec.engine.costmodel.shapes import BatchShape

CHUNK, NONE = np.array([2000], dtype=np.int64), np.array([0], dtype=np.int64)


def _prompt(chunks: np.ndarray, computed: np.ndarray) -> BatchShape:
    """The prompt chunks' shape, as the replica hands it to ``prompt_s``."""
    return BatchShape.of(chunks, computed, len(chunks), prefill=True)


def _spec(name: str, **method: object):
    sc = Scenario(
        model="llama-3.1-8b",
        gpu="h100_sxm",
        method=MethodConfig(name=name, k=3, acceptance={"alpha": 0.7}, **method),
    )
    return setup_replica(sc).speculator


def test_drafters_with_a_kv_cache_pay_a_pass_over_the_prompt_and_heads_do_not():
    eagle = _spec("eagle3").prompt_s(_prompt(CHUNK, NONE))
    draft = _spec("draft_model", draft_model="llama-3.2-1b").prompt_s(_prompt(CHUNK, NONE))
    assert 0 < eagle < draft  # one layer against a 1B model's 16
    assert _spec("medusa1").prompt_s(_prompt(CHUNK, NONE)) == 0.0
    assert _spec("eagle3").prompt_s(_prompt(CHUNK[:0], NONE[:0])) == 0.0
    # a later chunk attends over the prompt already cached: it costs more
    assert _spec("eagle3").prompt_s(_prompt(CHUNK, np.array([6000]))) > eagle


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_step_that_prefills_a_prompt_pays_the_drafts_pass_over_it(engine: str):
    sc = Scenario(
        model="llama-3.1-8b",
        gpu="h100_sxm",
        engine=engine,
        method=MethodConfig(name="eagle3", k=3, acceptance={"alpha": 0.7}),
        workload=WorkloadConfig(
            concurrency=1,
            requests=1,
            prompt=LengthSpec(mean=2000),
            output=LengthSpec(mean=8),
            measure="whole",
        ),
    )
    spec = setup_replica(sc).speculator
    first = simulate(sc).iterations.iloc[0]
    assert first.prefill_seqs == 1 and first.decode_seqs == 0
    overhead = spec.engine["spec_step_overhead_s"]
    assert first.draft_s == pytest.approx(spec.prompt_s(_prompt(CHUNK, NONE)) + overhead)
