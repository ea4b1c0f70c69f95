"""SGLang 0.5.10's rules for a model with Gated DeltaNet layers (Qwen3-Next): its radix cache
over the recurrent states (mamba no_buffer) runs a third of the state slots and turns the
overlap scheduler off, refuses speculation, and speculation without it allocates the states
of its running limit outright (engines.yaml mamba_no_buffer, mamba_running_ratio)."""

import pytest

from simspec.config import MethodConfig, Scenario, SchedulerConfig, WorkloadConfig
from simspec.engine.build import build_cost_model, setup_replica
from simspec.engine.kv_cache import linear_state_bytes
from simspec.errors import InputError

MTP = MethodConfig(name="mtp", k=3, acceptance={"alpha": 0.7})


def _scenario(**kw) -> Scenario:
    base = dict(model="qwen3-next-80b-a3b", gpu="h100_sxm", tp=4, engine="sglang")
    return Scenario(**{**base, **kw})


def test_the_radix_cache_runs_a_third_of_the_state_slots():
    """_resolve_max_num_reqs: min(max_num_reqs, max_mamba_cache_size // 3) under no_buffer, the
    whole cache with --disable-radix-cache (QA: 738 running where SGLang runs 246)."""
    crowd = WorkloadConfig(concurrency=2048)
    on = setup_replica(_scenario(workload=crowd))
    off = setup_replica(
        _scenario(workload=crowd, scheduler=SchedulerConfig(enable_prefix_caching=False))
    )
    assert off.memory.state_seqs // 3 == on.memory.state_seqs
    assert on.max_seqs == on.memory.state_seqs
    assert on.prefix_caching and not off.prefix_caching


def test_the_radix_cache_turns_the_overlap_scheduler_off_for_plain_decoding():
    on = build_cost_model(_scenario()).host
    off = build_cost_model(_scenario(scheduler=SchedulerConfig(enable_prefix_caching=False))).host
    assert not on.overlapped and off.overlapped


def test_speculation_runs_without_the_radix_cache_and_allocates_its_running_limit():
    """handle_max_mamba_cache: max_running_requests (48 under speculation) states and
    speculative_num_draft_tokens intermediate ones each, the rest to the KV pool."""
    sc = _scenario(method=MTP, workload=WorkloadConfig(concurrency=64))
    setup = setup_replica(sc)
    assert not setup.prefix_caching
    assert setup.max_seqs == 48 == setup.memory.state_seqs
    per_seq = linear_state_bytes(
        setup.target, setup.cost.engine, 4, 1, setup.speculator.verify_tokens
    )
    assert setup.memory.state_bytes == pytest.approx(48 * per_seq)
    asked = sc.model_copy(update={"scheduler": SchedulerConfig(enable_prefix_caching=True)})
    with pytest.raises(InputError, match="radix cache") as err:
        setup_replica(asked)
    assert err.value.field == "scheduler.enable_prefix_caching"


def test_sglang_v2_refuses_gated_deltanet_states_it_does_not_model():
    with pytest.raises(InputError, match="extra_buffer") as err:
        setup_replica(_scenario(engine="sglang-v2"))
    assert err.value.field == "engine"


def test_a_decode_instance_runs_every_state_slot_with_the_overlap_still_off():
    """_handle_pd_disaggregation forces a decode server's chunk cache after the model's own
    adjustments have turned the overlap off (review)."""
    crowd = WorkloadConfig(concurrency=2048)
    decode = setup_replica(_scenario(workload=crowd, disaggregation_mode="decode"))
    off = setup_replica(
        _scenario(workload=crowd, scheduler=SchedulerConfig(enable_prefix_caching=False))
    )
    assert not decode.prefix_caching
    assert decode.memory.state_seqs == off.memory.state_seqs == decode.max_seqs
    assert not build_cost_model(_scenario(disaggregation_mode="decode")).host.overlapped


def test_states_a_running_limit_allocates_past_the_memory_name_the_limit():
    from simspec.errors import ScenarioError

    many = SchedulerConfig(enable_prefix_caching=False, max_num_seqs=2048)
    with pytest.raises(ScenarioError, match="recurrent states of 2048.*--max-num-seqs"):
        setup_replica(_scenario(scheduler=many, workload=WorkloadConfig(concurrency=2048)))
