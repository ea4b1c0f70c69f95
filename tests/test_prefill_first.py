"""SGLang's scheduling policy: a prefill batch runs whenever one can be formed, and the running
requests decode only in a step that cannot form one (Scheduler.get_next_batch_to_run, "Run
prefill first if possible"); vLLM's decodes first and admits with the budget left."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_scheduler import make_rig

from simspec.catalog.hardware import load_engine
from simspec.catalog.methods import preset_method
from simspec.config import MethodConfig, Scenario
from simspec.engine.build import setup_replica
from simspec.engine.replica import Replica
from simspec.engine.requests import RequestTable
from simspec.engine.runs_at_once import StepClock
from simspec.engine.scheduler import ScheduledBatch, Scheduler
from simspec.engine.simulation import simulate
from simspec.engine.workload import RequestSpecs


def rig(prompts: list[int], outputs: list[int], **kw: Any) -> tuple[Scheduler, RequestTable]:
    """test_scheduler's rig under SGLang's policy (``decode_reserve`` as given)."""
    made = make_rig(prompts, outputs, prefill_first=True, **kw)
    return made.sched, made.table


def step(sched: Scheduler, table: RequestTable, batch: ScheduledBatch) -> None:
    """One iteration's outcome: each decode writes a token, a finished prompt its first."""
    done = []
    for rid in batch.decode.tolist():
        table.computed[rid] += 1
        table.generated[rid] += 1
        if table.generated[rid] >= table.output_len[rid]:
            done.append(rid)
    for rid, chunk in zip(batch.prefill.tolist(), batch.chunks.tolist(), strict=True):
        table.computed[rid] += chunk
        if table.computed[rid] == table.num_tokens(rid):
            table.generated[rid] += 1
            table.decoding[rid] = True
    if done:
        sched.finish(np.array(done, dtype=np.int64))


def test_a_new_arrival_is_prefilled_alone_while_the_running_requests_wait():
    sched, table = rig([4, 4, 6], [9, 9, 9])
    sched.add(0)
    sched.add(1)
    step(sched, table, sched.schedule())  # 0 and 1 prefilled: they decode from now on
    sched.add(2)
    batch = sched.schedule()
    assert batch.prefill.tolist() == [2] and batch.decode.tolist() == []
    step(sched, table, batch)
    batch = sched.schedule()  # nothing left to prefill: everyone decodes
    assert batch.decode.tolist() == [0, 1, 2] and batch.prefill.tolist() == []


def test_a_chunked_prompt_runs_every_chunk_before_anyone_decodes_again():
    sched, table = rig([4, 40], [9, 9], max_tokens=16)
    sched.add(0)
    step(sched, table, sched.schedule())
    sched.add(1)
    chunks = []
    for _ in range(3):
        batch = sched.schedule()
        assert batch.decode.tolist() == [] and batch.prefill.tolist() == [1]
        chunks += batch.chunks.tolist()
        step(sched, table, batch)
    assert chunks == [16, 16, 8]
    assert sched.schedule().decode.tolist() == [0, 1]


def test_with_every_slot_taken_the_running_requests_decode_and_the_queue_waits():
    sched, table = rig([4, 4, 4], [5, 5, 5], max_seqs=2)
    for rid in range(3):
        sched.add(rid)
    step(sched, table, sched.schedule())
    batch = sched.schedule()
    assert batch.decode.tolist() == [0, 1] and batch.prefill.tolist() == []
    assert list(sched.waiting) == [2]


def test_a_decode_step_admits_no_one_even_with_budget_left():
    # the waiting prompt's blocks are not free: a decode step, which leaves it queued
    sched, table = rig([8, 20], [3, 1], num_blocks=6)
    sched.add(0)
    step(sched, table, sched.schedule())  # 2 of the 6 blocks: prompt 1 needs 5
    sched.add(1)
    batch = sched.schedule()
    assert batch.decode.tolist() == [0] and batch.prefill.tolist() == []
    assert list(sched.waiting) == [1]


def test_only_sglang_prefills_first():
    assert load_engine("sglang").flag("prefill_first")
    for engine in ("vllm", "vllm-v0", "trtllm", "hf", "gpt-fast"):
        assert not load_engine(engine).flag("prefill_first"), engine
    assert setup_replica(Scenario(engine="sglang")).prefill_first
    assert not setup_replica(Scenario()).prefill_first


def test_under_sglang_every_iteration_prefills_or_decodes_never_both():
    base = {"workload": {"concurrency": 16, "requests": 128}, "seed": 3}
    sglang = simulate(Scenario(**base, engine="sglang")).iterations
    assert ((sglang.prefill_seqs == 0) | (sglang.decode_seqs == 0)).all()
    vllm = simulate(Scenario(**base)).iterations
    assert ((vllm.prefill_seqs > 0) & (vllm.decode_seqs > 0)).any()  # vLLM mixes them


# SGLang's admission: (initial ratio, least ratio, decay a decode step, clip), one token a page
RESERVE = (0.7, 0.098, 0.001, 4096)


def test_sglang_admits_only_while_prompt_and_whole_output_fit_beside_the_running_reserve():
    # a 100-token pool, prompts of 10, outputs of 40: the first needs 10 + 40 + 1 < 100 and
    # sets 50 aside, the second's 51 no longer fits beside it
    sched, _ = rig([10] * 5, [40] * 5, num_blocks=100, block_size=1, decode_reserve=RESERVE)
    for rid in range(5):
        sched.add(rid)
    assert sched.schedule().prefill.tolist() == [0]
    # without the reservation every prompt's blocks fit, and all five are admitted
    free, _ = rig([10] * 5, [40] * 5, num_blocks=100, block_size=1)
    for rid in range(5):
        free.add(rid)
    assert free.schedule().prefill.tolist() == [0, 1, 2, 3, 4]


def test_a_running_request_is_set_aside_its_remaining_output_times_the_ratio():
    sched, table = rig([10] * 3, [40] * 3, num_blocks=100, block_size=1, decode_reserve=RESERVE)
    for rid in range(3):
        sched.add(rid)
    step(sched, table, sched.schedule())  # 0 prefilled: 89 tokens free
    # 0 is set aside 39 x 0.7 = 27.3: 1 (51) fits beside it and sets 50 aside, 2 does not
    batch = sched.schedule()
    assert batch.prefill.tolist() == [1] and list(sched.waiting) == [2]


def test_the_ratio_decays_with_decode_steps_to_its_least_and_resets_when_idle():
    sched, table = rig([4, 4], [5, 5], block_size=1, decode_reserve=(0.7, 0.1, 0.3, 4096))
    sched.add(0)
    step(sched, table, sched.schedule())  # a prefill step: no decay
    assert sched.ratio == 0.7
    for expected in (0.4, 0.1, 0.1):
        step(sched, table, sched.schedule())
        assert sched.ratio == pytest.approx(expected)
    while sched.running:
        step(sched, table, sched.schedule())
    sched.add(1)  # nothing runs: the next schedule starts again from the initial ratio
    assert sched.schedule().prefill.tolist() == [1]
    assert sched.ratio == 0.7


def test_only_sglang_reserves_for_decodes():
    assert setup_replica(Scenario(engine="sglang")).decode_reserve == pytest.approx(
        (0.7, 0.098, (0.7 - 0.098) / 600, 4096)
    )
    for engine in ("vllm", "trtllm"):
        assert setup_replica(Scenario(engine=engine)).decode_reserve is None


def test_a_request_sglang_would_never_admit_is_unfinishable_not_a_stalled_run():
    """SGLang's PrefillAdder turns away a request whose prompt, clipped output and a page reach
    the whole pool (NO_TOKEN): with nothing running it never starts, so it is marked
    unfinishable on arrival (as one past the KV cache is), not left to stall the run."""
    sched, table = rig([60, 40], [40, 40], num_blocks=100, block_size=1, decode_reserve=RESERVE)
    sched.add(0)  # 60 + 40 + 1 >= 100: never admitted
    sched.add(1)  # 40 + 40 + 1 < 100
    assert table.unfinishable.tolist() == [True, False]
    assert list(sched.waiting) == [1]


def test_sglang_retracts_the_request_with_the_fewest_outputs_first():
    """SGLang's retract_decode sorts by (outputs so far, -prompt) and pops the smallest: the
    request with the least progress goes, not the last admitted (QA: simspec had retracted
    the one 60 tokens in, vLLM's victim). Under speculation it retracts from the back."""
    from simspec.engine.kv_cache import BlockPool
    from simspec.engine.workload import RequestSpecs

    made = [5, 30, 60]
    for spec, victim in ((0, 0), (3, 2)):
        specs = RequestSpecs(np.full(3, 20), np.full(3, 100), np.full(3, -1))
        table = RequestTable(specs)
        # every request's tokens so far (and its draft slots) held, one token free
        pool = BlockPool(sum(20 + g - 1 + spec for g in made) + 1)
        sched = Scheduler(
            table, pool, 1, 48, 8192, spec, prefill_first=True, retract_by_progress=True
        )
        for rid, generated in enumerate(made):
            table.generated[rid] = generated
            sched.resume(rid)
        sched.schedule()
        assert table.preemptions.tolist() == [int(r == victim) for r in range(3)], spec


def test_under_dp_attention_a_ranks_prefill_stops_only_its_own_decodes():
    """SGLang schedules each DP attention rank apart (get_next_batch_to_run per rank; the MLP
    sync only gathers token counts), requests sent round robin: a prompt on rank 0 leaves
    rank 1's requests decoding in the same step (QA: one rank's prefill stopped all eight)."""
    sched, table = rig([4, 4, 6, 6], [9, 9, 9, 9], ranks_apart=2)
    sched.add(0)  # rank 0
    sched.add(1)  # rank 1
    step(sched, table, sched.schedule())  # both prefilled: they decode from now on
    sched.add(2)  # rank 0 again
    batch = sched.schedule()
    assert batch.prefill.tolist() == [2] and batch.decode.tolist() == [1]
    assert batch.context.tolist() == [table.computed[1]]
    step(sched, table, batch)
    sched.add(3)  # rank 1: now rank 0's requests decode beside it
    batch = sched.schedule()
    assert batch.prefill.tolist() == [3] and batch.decode.tolist() == [0, 2]


def test_one_scheduler_for_all_ranks_is_the_default_and_stops_every_decode():
    sched, table = rig([4, 4, 6], [9, 9, 9])
    sched.add(0)
    sched.add(1)
    step(sched, table, sched.schedule())
    sched.add(2)
    assert sched.schedule().decode.tolist() == []


def test_only_sglang_without_speculation_schedules_its_ranks_apart():
    """Under speculation SGLang idles every other rank while one prefills ("prefill and decode
    batches will not be mixed when spec and dp-attn is enabled"); vLLM mixes anyway."""
    z = np.zeros(4, dtype=np.int64)
    mtp = preset_method("mtp", target="deepseek-v3", engine="sglang")
    for engine, method, apart in (("sglang", "autoregressive", 8), ("sglang", "mtp", 1),
                                  ("vllm", "autoregressive", 1)):  # fmt: skip
        sc = Scenario(
            model="deepseek-v3", gpu="h200", tp=8, dp=8, ep=8, engine=engine,
            method=MethodConfig(name=method, k=0) if method == "autoregressive" else mtp,
        )  # fmt: skip
        table = RequestTable(RequestSpecs(z + 8, z + 8, z - 1))
        replica = Replica(StepClock(), setup_replica(sc), table, None)
        assert replica.sched.ranks_apart == apart, (engine, method)


def test_a_ranks_chunked_request_takes_its_ranks_budget_and_nobody_joins_it():
    """SGLang's PrefillAdder runs per rank, each with chunked_prefill_size // dp: a request still
    prefilling on rank 0 leaves no room there for an arrival on rank 0 (review: 12 tokens ran on
    a rank whose budget is 8)."""
    sched, table = rig([40, 4, 4], [9, 9, 9], ranks_apart=2, chunk_cap=8, max_tokens=16)
    sched.add(0)  # rank 0, chunked
    sched.add(1)  # rank 1
    step(sched, table, sched.schedule())
    sched.add(2)  # rank 0 again: waits for its rank's budget
    batch = sched.schedule()
    assert batch.prefill.tolist() == [0] and batch.chunks.tolist() == [8]
    assert batch.decode.tolist() == [1]  # rank 1 decodes beside it


def test_a_decode_needing_no_new_block_runs_beside_a_prompt_when_others_lack_blocks():
    """The ranks' pools are one here: a decode needing a block another rank's admission took
    waits, and one needing none still runs (review: one short block stopped every rank)."""
    sched, table = rig([4, 3, 8], [9, 9, 1], ranks_apart=3, chunk_cap=8, max_tokens=24,
                       num_blocks=4)  # fmt: skip
    sched.add(0)
    sched.add(1)
    step(sched, table, sched.schedule())
    sched.add(2)  # its 8-token prompt takes the last two blocks
    batch = sched.schedule()
    assert batch.prefill.tolist() == [2] and batch.decode.tolist() == [1]


def test_sglangs_ratio_decays_in_a_step_whose_other_ranks_decode():
    """SGLang's decoding ranks run update_running_batch, which decays new_token_ratio."""
    sched, table = rig([4, 4, 6], [9, 9, 9], ranks_apart=2, decode_reserve=(0.7, 0.1, 0.05, 4096))
    sched.add(0)
    sched.add(1)
    step(sched, table, sched.schedule())
    before = sched.ratio
    sched.add(2)
    batch = sched.schedule()
    assert batch.decode.tolist() == [1] and sched.ratio == pytest.approx(before - 0.05)
