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
    for method in (None, MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))):
        sc = decode_instance(**({"method": method} if method else {}))
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


def test_transferred_requests_wait_for_room_in_arrival_order_and_run_decoding():
    rig = make_rig([8, 8, 8], [4, 4, 4], num_blocks=6, block_size=4, max_seqs=2)
    sched, table = rig.sched, rig.table
    for rid in range(3):
        table.generated[rid] = 1  # the prefill instance's first token
        sched.add_transferred(rid)
    batch = sched.schedule()
    # two slots: the first two are admitted decoding, their prompts' blocks taken
    assert batch.decode.tolist() == [0, 1] and batch.prefill.tolist() == []
    assert table.decoding[[0, 1]].all() and list(sched.transfers) == [2]
    assert table.computed[0] == 8 and not sched.waiting
    sched.finish(np.array([0]))
    batch = sched.schedule()
    assert sorted(batch.decode.tolist()) == [1, 2] and not sched.transfers


def test_a_one_token_output_is_done_on_arrival():
    res = simulate(
        decode_instance(workload={"concurrency": 2, "requests": 8, "output": {"mean": 1}})
    )
    req = res.requests
    assert (req["finish_s"] == req["arrival_s"]).all()


@pytest.mark.parametrize("mode", ["prefill", "both"])
def test_other_modes_are_refused_by_name(mode):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="disaggregation_mode"):
        Scenario(disaggregation_mode=mode)
