"""A prefill/decode-disaggregated deployment's decode instance (Deployment.disaggregation_mode
"decode"; SGLang --disaggregation-mode decode, vLLM's kv_consumer): requests arrive with their
prompt's KV and first token, wait for a slot and blocks, and never prefill here."""

from __future__ import annotations

import numpy as np
import pytest
from test_scheduler import make_rig

from simspec import Scenario, simulate
from simspec.config import AcceptanceConfig, MethodConfig


def decode_instance(**over) -> Scenario:
    workload = {"concurrency": 4, "requests": 24, "prompt": {"mean": 2000}, "output": {"mean": 40}}
    return Scenario(**{"disaggregation_mode": "decode", "workload": workload, **over})


def test_a_decode_instance_never_prefills_and_its_requests_come_with_their_first_token():
    # SGLang's decode instance delivers the prefill instance's token (vLLM's: below)
    for method in (None, MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))):
        sc = decode_instance(engine="sglang", **({"method": method} if method else {}))
        res = simulate(sc)
        it, req = res.iterations, res.requests
        assert (it["prefill_seqs"] == 0).all()
        # every decode step's query tokens are its decodes' (one, or a verify, each)
        assert (it["query_tokens"] >= it["decode_seqs"]).all()
        done = req[~req["unfinishable"]]
        assert (done["first_token_s"] == done["arrival_s"]).all()
        assert res.summary.ttft_ms_p50 == 0.0
    plain = simulate(decode_instance().model_copy(update={"disaggregation_mode": "null"}))
    assert (plain.iterations["prefill_seqs"] > 0).any()


def test_a_vllm_decode_instance_samples_the_first_token_in_a_step_of_its_own():
    """vLLM's decode instance recomputes each arriving prompt's last token and samples the
    first token from it (engines.yaml pd_decode_recomputes_last_token), alone as in a fleet
    (QA: a sweep's decode instance had it free, TTFT 0)."""
    res = simulate(decode_instance(engine="vllm"))
    it, req = res.iterations, res.requests
    one_token = it[it["prefill_seqs"] > 0]
    assert len(one_token) and (one_token["query_tokens"] >= one_token["prefill_seqs"]).all()
    fresh = req[~req["unfinishable"] & (req["arrival_s"] > 0)]  # not the cohort at start
    assert (fresh["first_token_s"] > fresh["arrival_s"]).all()
    assert res.summary.ttft_ms_p50 > 0.0


def test_transferred_requests_wait_for_room_in_arrival_order_and_run_decoding():
    rig = make_rig([8, 8, 8], [4, 4, 4], num_blocks=6, block_size=4, max_seqs=2)
    sched, table = rig.sched, rig.table
    for rid in range(3):
        sched.add_transferred(rid)
    batch = sched.schedule()
    assert sched.admitted == [0, 1] and table.generated[[0, 1]].tolist() == [1, 1]
    # two slots: the first two are admitted decoding, their prompts' blocks taken
    assert batch.decode.tolist() == [0, 1] and batch.prefill.tolist() == []
    assert table.decoding[[0, 1]].all() and list(sched.transfers) == [2]
    assert table.computed[0] == 8 and not sched.waiting
    sched.finish(np.array([0]))
    batch = sched.schedule()
    assert sorted(batch.decode.tolist()) == [1, 2] and not sched.transfers


def test_a_transfer_waits_for_room_as_its_ttft_and_delivers_its_first_token_when_admitted():
    """The wait for a slot is the request's TTFT on the decode instance, not part of its TPOT
    (QA: at max_num_seqs 8 under 5 req/s the wait read as a 295 ms TPOT p50), and the first
    token counts in an open loop's throughput as in a closed loop's."""
    from simspec.config import SchedulerConfig

    wl = {"arrival": "poisson", "rate": 5.0, "requests": 64, "prompt": {"mean": 500}}
    wl["output"] = {"mean": 64}
    busy = decode_instance(workload=wl, scheduler=SchedulerConfig(max_num_seqs=2))
    res = simulate(busy)
    req = res.requests[~res.requests["unfinishable"]]
    assert (req["first_token_s"] > req["arrival_s"]).any()  # some waited for a slot
    assert res.summary.ttft_ms_p99 > 10 * res.summary.tpot_ms_p50
    # every token the requests hold was logged by some step: the first one at admission
    assert res.iterations["output_tokens"].sum() == res.requests["output_tokens"].sum()


def test_a_preempted_request_comes_back_before_new_transfers():
    """vLLM puts a preempted request at the front of its queue and SGLang resumes retracted
    requests before it preallocates for new ones (QA: new arrivals kept taking its blocks, and
    it finished at the end of the run)."""
    rig = make_rig([8, 8, 8], [4, 4, 4], num_blocks=8, block_size=4, max_seqs=4)
    sched, table = rig.sched, rig.table
    sched.add_transferred(0)
    sched.schedule()
    sched.waiting.append(1)  # as if preempted
    sched.add_transferred(2)
    batch = sched.schedule()
    assert 1 in batch.prefill.tolist() and list(sched.transfers) == [2]
    assert table.generated[2] == 0


def test_a_one_token_output_is_done_on_arrival():
    """Its token came from the prefill instance (SGLang); vLLM's decode instance recomputes
    the last prompt token and samples it, one step after; outputs of 1 token only are
    refused by name (QA: every cell of such a sweep read "nan")."""
    from simspec.errors import InputError

    out = {"dist": "uniform", "low": 1, "high": 3, "mean": 2}
    wl = {"concurrency": 2, "requests": 16, "lengths_from": None, "output": out}
    for engine in ("sglang", "vllm"):
        req = simulate(decode_instance(workload=wl, engine=engine)).requests
        one = req[req["requested_output_tokens"] == 1]
        if engine == "sglang":
            assert len(one) and (one["finish_s"] == one["arrival_s"]).all()
        else:
            assert len(one) and (one["finish_s"] > one["arrival_s"]).all()
            assert (one["output_tokens"] == 1).all()
    with pytest.raises(InputError, match="nothing to decode") as err:
        simulate(
            decode_instance(
                workload={"concurrency": 2, "lengths_from": None, "output": {"mean": 1}}
            )
        )
    assert err.value.field == "workload.output"


@pytest.mark.parametrize("mode", ["prefill", "both"])
def test_other_modes_are_refused_by_name(mode):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="disaggregation_mode"):
        Scenario(disaggregation_mode=mode)


def test_an_engine_without_disaggregated_serving_is_refused_by_name():
    """HF and gpt-fast serve one process that prefills and decodes: no decode instance. vLLM
    V0's experimental one ran another order (the KV received inside a step of prefills,
    blocking it), which simspec does not model: refused, saying how V0 runs it, rather than
    run as V1's connectors."""
    from simspec.engine.build import setup_replica
    from simspec.errors import InputError

    for engine in ("hf", "gpt-fast"):
        with pytest.raises(InputError, match="runs no prefill/decode") as err:
            setup_replica(decode_instance(engine=engine))
        assert err.value.field == "disaggregation_mode"
    with pytest.raises(InputError, match="vllm-v0's decode instance is not modelled") as err:
        setup_replica(decode_instance(engine="vllm-v0"))
    assert err.value.field == "disaggregation_mode" and "blocking" in str(err.value)
    for engine in ("vllm", "sglang", "sglang-v2", "trtllm"):
        setup_replica(decode_instance(engine=engine))


def test_a_trtllm_decode_instance_allocates_for_transfers_up_to_its_free_slots_each_step():
    """TensorRT-LLM before PR #15356: the capacity scheduler admits DISAGG_GENERATION_INIT
    requests into the step's count with the running ones, up to max_num_requests, and a
    request receiving its KV no longer counts in the next step; vLLM checks each against its
    running requests alone, so one step allocates for every transfer whose blocks fit."""
    from simspec.catalog.hardware import load_engine
    from simspec.engine.disaggregation import prealloc_slots

    trt, vllm = load_engine("trtllm"), load_engine("vllm")
    assert prealloc_slots(trt, 4) is None and prealloc_slots(vllm, 4) is None
    assert trt.flag("pd_alloc_counted_in_step") and not vllm.flag("pd_alloc_counted_in_step")
    for counted, first, second in ((True, 3, 6), (False, 7, 7)):
        rig = make_rig([8] * 8, [20] * 8, num_blocks=100, block_size=4, max_seqs=4)
        sched = rig.sched
        sched.awaits_kv, sched.prealloc_slots = True, None
        sched.count_step_allocations = counted
        sched.add_transferred(0)
        sched.admit_transfers()
        sched.kv_landed(0)
        sched.schedule()  # request 0 runs: 3 slots of 4 left
        assert sched.running == [0]
        for rid in range(1, 8):
            sched.add_transferred(rid)
        sched.admit_transfers()
        assert len(sched.preallocated) == first
        sched.admit_transfers()  # the next step: those receiving KV no longer count
        assert len(sched.preallocated) == second


def test_sglang_keeps_room_to_decode_for_every_request_it_holds():
    """DecodePreallocQueue: a transfer is taken while its tokens plus the reserve, and its
    prompt and whole output, fit in the budget what is free leaves (32 blocks of 4 tokens,
    8-token prompts of 20-token outputs, reserve 16), each one taken using up its tokens and
    reserve."""
    rig = make_rig([8] * 6, [20] * 6, num_blocks=32, block_size=4, transfer_reserve=(16, 4096))
    sched = rig.sched
    for rid in range(6):
        sched.add_transferred(rid)
    sched.schedule()
    # 128 free tokens: each needs max(8 + 16, 8 + 20) = 28 and takes 24 of the room (128 ->
    # 104 -> 80 -> 56 -> 32 -> 8): five, where blocks alone (2 each) take all six
    assert sched.admitted == [0, 1, 2, 3, 4]
    assert len(sched.transfers) == 1
    plain = make_rig([8] * 6, [20] * 6, num_blocks=32, block_size=4)
    for rid in range(6):
        plain.sched.add_transferred(rid)
    plain.sched.schedule()
    assert plain.sched.admitted == [0, 1, 2, 3, 4, 5]


def test_the_reservation_counts_the_requests_already_running():
    rig = make_rig([8] * 4, [20] * 4, num_blocks=16, block_size=4, transfer_reserve=(16, 4096))
    sched = rig.sched
    sched.add_transferred(0)
    sched.add_transferred(1)
    sched.schedule()
    assert sched.admitted == [0, 1]  # 64 free: 24, then 24 of 40
    sched.admitted.clear()
    sched.add_transferred(2)
    sched.schedule()
    # the two decoded once (3 blocks each): 40 tokens free, less 2 x 16 reserved for them,
    # leave 8, short of the 24 a third's tokens and reserve need (blocks alone: it fits)
    assert sched.admitted == [] and list(sched.transfers) == [2]


def test_reserved_decode_tokens_is_sglang_decode_instance_only():
    from simspec.config import SchedulerConfig
    from simspec.engine.build import setup_replica
    from simspec.errors import InputError

    given = SchedulerConfig(reserved_decode_tokens=102)
    setup = setup_replica(decode_instance(engine="sglang", scheduler=given))
    assert setup.transfer_reserve == (102, 4096)
    assert setup_replica(decode_instance(engine="sglang")).transfer_reserve == (512, 4096)
    assert setup_replica(decode_instance(engine="vllm")).transfer_reserve is None
    for sc in (
        decode_instance(engine="vllm", scheduler=given),
        decode_instance(engine="sglang", scheduler=given, disaggregation_mode="null"),
    ):
        with pytest.raises(InputError, match="decode-instance reservation") as err:
            setup_replica(sc)
        assert err.value.field == "scheduler.reserved_decode_tokens"


def test_a_transfer_the_reservation_can_never_admit_is_unfinishable_not_a_stall():
    """QA: a 28-token prompt with the 16-token reserve passes a 10-block pool of 4 tokens; it
    had blocked the queue's head until the run stopped on an empty batch."""
    rig = make_rig([28, 8], [4, 4], num_blocks=10, block_size=4, transfer_reserve=(16, 4096))
    sched, table = rig.sched, rig.table
    sched.add_transferred(0)
    sched.add_transferred(1)
    assert table.unfinishable.tolist() == [True, False] and list(sched.transfers) == [1]
    sched.schedule()
    assert sched.admitted == [1]


def test_a_reserve_past_the_kv_cache_is_refused_by_name():
    from simspec.config import SchedulerConfig
    from simspec.engine.build import setup_replica
    from simspec.errors import InputError

    huge = SchedulerConfig(reserved_decode_tokens=1_000_000)
    with pytest.raises(InputError, match="tokens kept free per request") as err:
        setup_replica(decode_instance(engine="sglang", scheduler=huge))
    assert err.value.field == "scheduler.reserved_decode_tokens"


def test_compare_does_not_score_a_decode_instances_ttft():
    """A decode instance's TTFT is its wait for a slot; a client's holds the prefill and the
    transfer (QA: scored as -100 %)."""
    from conftest import ROOT
    from typer.testing import CliRunner

    from simspec.cli.main import app

    bench = ROOT / "tests" / "data" / "bench" / "qwen3-8b-h100-bs4.json"
    out = CliRunner().invoke(app, ["compare", str(bench), "--disaggregation-mode", "decode"])
    assert out.exit_code == 0, out.output
    rows = [line for line in out.output.splitlines() if "ttft" in line]
    assert rows and all("nan" in line for line in rows)


def test_analytic_does_not_offer_a_decode_instance_it_would_not_change():
    """The closed form has no TTFT and prices decode steps a decode instance runs as any
    replica does: the option is neither listed nor taken (QA: listed, then always refused)."""
    from typer.testing import CliRunner

    from simspec.cli.main import app

    out = CliRunner().invoke(
        app, ["analytic", "--method", "eagle3", "--disaggregation-mode", "decode"]
    )
    assert out.exit_code == 2 and "No such option: --disaggregation-mode" in out.output
    shown = CliRunner().invoke(app, ["analytic", "--help"])
    assert shown.exit_code == 0 and "--disaggregation-mode" not in shown.output
    assert "--engine" in shown.output  # the other serving flags stay


def test_under_dp_attention_a_transfer_fits_one_ranks_share_of_the_budget():
    """Two ranks of 16 blocks (64 tokens) each: SGLang budgets each rank's queue, so each
    takes two 8-token prompts (28 tokens of prompt and output, 24 of tokens and reserve),
    four in all, where one 128-token budget takes five."""
    rig = make_rig(
        [8] * 6,
        [20] * 6,
        num_blocks=32,
        block_size=4,
        rank_blocks=16,
        transfer_reserve=(16, 4096),
    )
    for rid in range(6):
        rig.sched.add_transferred(rid)
    rig.sched.schedule()
    assert rig.sched.admitted == [0, 1, 2, 3]
