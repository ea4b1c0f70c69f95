"""A draft that changes with the batch size reserves, for each decode, the budget and KV of the
step's own draft (the load policy's at the running requests' count), not of the widest any
step may draft: a step with speculation off decodes as many sequences as plain decoding, and
speculation turns off by batch size however narrow the budget."""

from __future__ import annotations

from simspec import simulate
from simspec.config import LengthSpec, MethodConfig, Scenario, SchedulerConfig, WorkloadConfig

WL = WorkloadConfig(
    concurrency=16, requests=48, prompt=LengthSpec(mean=16), output=LengthSpec(mean=32),
    measure="whole",
)  # fmt: skip
TIGHT = SchedulerConfig(max_num_batched_tokens=40, max_num_seqs=16)


def _run(engine: str = "vllm", **method: object):
    sc = Scenario(model="llama-3.1-8b", gpu="h100_sxm", method=MethodConfig(**method),
                  scheduler=TIGHT, workload=WL, engine=engine)  # fmt: skip
    return simulate(sc)


def test_speculation_off_by_batch_size_decodes_every_running_sequence():
    # vLLM V0's speculative_disable_by_batch_size (V1 never reads it); V0 admits whole prompts
    # and refuses a budget below its context, so both are 64 here
    v0 = SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=16, max_model_len=64)
    method = MethodConfig(name="eagle3", k=7, acceptance={"alpha": 0.7}, disable_by_batch_size=8)
    sc = Scenario(model="llama-3.1-8b", gpu="h100_sxm", method=method, scheduler=v0,
                  workload=WL, engine="vllm-v0")  # fmt: skip
    it = simulate(sc).iterations
    steady = it[it.prefill_seqs == 0]
    # 16 running: speculation off, 16 decodes of one token each (the budget of 64 holds them;
    # reserving 1 + 7 for each held only 8)
    assert steady.decode_seqs.max() == 16
    assert (steady[steady.decode_seqs > 8].spec_seqs == 0).all()


def test_a_k_schedule_reserves_its_own_width():
    sched = _run(
        name="eagle3", k=7, acceptance={"alpha": 0.7}, k_schedule=[(1, 4, 7), (5, 1024, 1)]
    )
    it = sched.iterations
    wide = it[(it.prefill_seqs == 0) & (it.decode_seqs > 4)]
    assert wide.decode_seqs.max() == 16 and (wide.decode_tokens <= 2 * wide.decode_seqs).all()
