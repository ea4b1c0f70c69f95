"""A draft that a load policy turns off and back on (disable_by_batch_size, a K schedule):
whether a request can ever fit, and what a no-eviction promise sets aside, are judged at the
widest draft the run may take, not at the step's own (QA: a request admitted while speculation
was off outgrew the pool once it came back on and stopped the run; TRT-LLM's guaranteed-no-evict
preempted)."""

from __future__ import annotations

import pytest

from simspec.config import LengthSpec, MethodConfig, Scenario, SchedulerConfig, WorkloadConfig
from simspec.engine.build import setup_replica
from simspec.engine.simulation import simulate
from simspec.errors import InputError, ScenarioError

# (engine, policy): speculation off by batch size is vLLM V0's alone (V1 never reads it)
POLICIES = [
    ("vllm-v0", {"disable_by_batch_size": 2}),
    ("vllm", {"k_schedule": [[1, 1, 6], [2, 64, 0]]}),
]


def _scenario(engine: str, policy: dict, utilisation: float, trace: str | None = None) -> Scenario:
    method = MethodConfig(name="eagle3", k=6, tree="chain", acceptance={"alpha": 0.0}, **policy)
    if trace is None:
        fixed = {"prompt": LengthSpec(mean=16), "output": LengthSpec(mean=16)}
        wl = WorkloadConfig(arrival="poisson", requests=2, lengths_from=None, **fixed)
    else:
        wl = WorkloadConfig(arrival="replay", arrival_trace=trace)
    limits = SchedulerConfig(
        max_num_seqs=4,
        # vLLM V0 admits whole prompts and refuses a budget below its context
        max_num_batched_tokens=3000 if engine == "vllm-v0" else 512,
        gpu_memory_utilization=utilisation,
        max_model_len=3000,  # the pool _pool sizes: vLLM starts only so
    )
    return Scenario(
        model="llama-3.1-8b",
        gpu="h200",
        engine=engine,
        method=method,
        workload=wl,
        scheduler=limits,
    )


def _pool(engine: str, policy: dict, tokens: int) -> float:
    """The memory share whose KV pool first holds ``tokens`` (bisection)."""
    lo, hi = 0.01, 0.99
    for _ in range(24):
        mid = (lo + hi) / 2
        try:
            memory = setup_replica(_scenario(engine, policy, mid)).memory
            held = memory.num_blocks * memory.block_size
        except (ScenarioError, InputError):  # the weights alone, or the context, do not fit
            held = 0
        lo, hi = (mid, hi) if held < tokens else (lo, mid)
    return hi


@pytest.mark.parametrize(("engine", "policy"), POLICIES)
def test_a_request_that_fits_only_without_its_draft_is_unfinishable_not_a_stopped_run(
    tmp_path, engine, policy
):
    share = _pool(engine, policy, 3000)
    setup = setup_replica(_scenario(engine, policy, share))
    pool = setup.memory.num_blocks * setup.memory.block_size
    prompt = pool - 40 - setup.lookahead_slots - 2  # fits with 2 draft slots, not with 6
    trace = tmp_path / "t.csv"
    trace.write_text(f"arrival_s,prompt_len,output_len\n0,32,200\n0,32,200\n0.05,{prompt},40\n")
    requests = simulate(_scenario(engine, policy, share, str(trace))).requests
    assert list(requests["unfinishable"]) == [False, False, True]


def test_guaranteed_no_evict_promises_the_widest_draft(tmp_path):
    """Three requests admitted while speculation is off (three running), two of them half the
    pool each: once the small one leaves K = 6 comes back, and a promise sized without draft
    slots would be outgrown, a preemption under a policy that promises none."""
    policy = {"k_schedule": [[1, 2, 6], [3, 64, 0]]}  # off from three running
    limits = SchedulerConfig(
        max_num_seqs=4, max_num_batched_tokens=8192, gpu_memory_utilization=0.01
    )
    sc = _scenario("trtllm", policy, 0.01).model_copy(update={"scheduler": limits})
    memory = setup_replica(sc).memory
    half = (memory.num_blocks - 1) // 2 * memory.block_size  # blocks of B and C at K = 0
    trace = tmp_path / "t.csv"
    trace.write_text(
        f"arrival_s,prompt_len,output_len\n0,16,16\n0,{half - 200},200\n0,{half - 200},200\n"
    )
    wl = WorkloadConfig(arrival="replay", arrival_trace=str(trace))
    requests = simulate(sc.model_copy(update={"workload": wl})).requests
    assert requests["preemptions"].sum() == 0 and not requests["unfinishable"].any()
