"""A draft on GPUs of its own (``draft_tp``, vLLM V0's draft_tensor_parallel_size 1): rank 0
holds the whole draft and runs it with no all-reduce (SmallerTpProposerWorker); engines that
run drafts at the target's tensor parallelism refuse it by name."""

from __future__ import annotations

import numpy as np
import pytest

from simspec.config import MethodConfig, Scenario, WorkloadConfig
from simspec.engine.build import setup_replica
from simspec.engine.speculators import DraftStep
from simspec.errors import InputError

MTP = {"name": "mtp", "k": 1, "acceptance": {"tau": 1.8, "tau_k": 1}}


def scenario(engine: str = "vllm-v0", tp: int = 8, **method: object) -> Scenario:
    return Scenario(
        model="deepseek-r1",
        gpu="h200",
        tp=tp,
        engine=engine,
        method=MethodConfig(**{**MTP, **method}),
        workload=WorkloadConfig(concurrency=8, requests=64),
    )


def test_the_draft_on_one_gpu_holds_its_whole_weights_and_runs_without_all_reduce():
    shared, apart = setup_replica(scenario()), setup_replica(scenario(draft_tp=1))
    assert shared.speculator.cost.tp == 8 and apart.speculator.cost.tp == 1
    target = apart.target
    # the module whole on rank 0, with its own embedding and LM head (bf16), not an eighth
    head = 2 * target.vocab_size * target.hidden_size * 2
    assert apart.memory.draft_bytes > 7 * shared.memory.draft_bytes
    assert apart.memory.draft_bytes - head > 7 * shared.memory.draft_bytes - 1e9
    # rank 0's weights bind every rank's KV blocks (V0 takes the fewest any worker holds)
    assert apart.memory.num_blocks < shared.memory.num_blocks
    kv = np.full(8, 1000, dtype=np.int64)
    step = DraftStep(kv, np.full(8, 2, dtype=np.int64), float(kv.sum()), 1)
    assert apart.speculator.draft_cost(step).communication_s == 0.0
    assert shared.speculator.draft_cost(step).communication_s > 0.0
    # the fast path prices the same forward
    assert apart.speculator.draft_s(step) == pytest.approx(
        apart.speculator.draft_cost(step).total_s, rel=1e-12
    )


def test_a_draft_at_the_targets_own_tp_is_the_default():
    assert setup_replica(scenario(draft_tp=8)).speculator.cost.tp == 8
    assert not setup_replica(scenario(draft_tp=8)).speculator.apart


@pytest.mark.parametrize(
    ("sc", "said"),
    [
        (lambda: scenario(engine="vllm", draft_tp=1), "engine vllm runs the draft at the target"),
        (lambda: scenario(engine="sglang", draft_tp=1), "engine sglang runs the draft"),
        (lambda: scenario(draft_tp=2), "vLLM takes 1 or the target's tensor parallelism"),
        (lambda: scenario(name="ngram", acceptance=None, draft_tp=1), "which ngram does not read"),
    ],
)
def test_a_draft_tp_the_engine_or_method_does_not_run_is_refused_by_name(sc, said):
    with pytest.raises(InputError, match=said) as err:
        setup_replica(sc())
    assert err.value.field.endswith("draft_tp")
