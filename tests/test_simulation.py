"""The engine: speedup sign, conservation of requests/tokens/KV, preemption, determinism."""

import numpy as np
import pytest

from simspec.config import (
    AcceptanceConfig,
    LengthSpec,
    MethodConfig,
    Scenario,
    SchedulerConfig,
    WorkloadConfig,
)
from simspec.engine.simulation import simulate
from simspec.errors import ScenarioError
from simspec.studies.sweep import SweepConfig, run_sweep

EAGLE_LOW = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.2))
EAGLE_HIGH = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.8))


def small_workload(**kw):
    base = {
        "lengths_from": None,
        "requests": 40,
        "turnovers": 1,  # these tests ask about mechanics, not a precise speedup
        "concurrency": 4,
        "prompt": {"dist": "lognormal", "mean": 300, "cv": 0.5},
        "output": {"dist": "lognormal", "mean": 120, "cv": 0.6},
    }
    return WorkloadConfig(**{**base, **kw})


def check_conservation(result):
    req, it, s = result.requests, result.iterations, result.summary
    done = req[~req.unfinishable]
    assert done.finish_s.notna().all(), "every request finishes"
    assert (done.output_tokens == done.requested_output_tokens).all(), "tokens conserved"
    # a closed loop starts with requests already decoding: the run emitted the rest
    assert it.output_tokens.sum() == done.output_tokens.sum() - done.tokens_before_start.sum()
    assert (it.kv_blocks_used <= s.kv_blocks_total).all()
    assert s.kv_blocks_peak <= s.kv_blocks_total
    assert (np.diff(it.start_s.to_numpy()) >= 0).all(), "time never goes backwards"
    assert (done.first_token_s >= done.arrival_s).all()
    assert (done.finish_s >= done.first_token_s).all()


def test_sweep_autoregressive_speedup_is_exactly_one():
    cfg = SweepConfig(
        methods=[MethodConfig(name="autoregressive", k=0), EAGLE_HIGH],
        batch_sizes=[1, 8],
        workload=small_workload(requests=24),
    )
    frame = run_sweep(cfg)
    ar = frame[frame.method == "autoregressive"]
    assert (ar.speedup == 1.0).all() and (ar.tpot_ratio == 1.0).all()
    assert (frame[frame.method == "eagle3"].speedup > 1.0).all()


def test_eagle_with_low_acceptance_at_large_batch_is_slower_than_plain_decoding():
    cfg = SweepConfig(methods=[EAGLE_LOW], batch_sizes=[128], workload=small_workload(requests=256))
    assert run_sweep(cfg).speedup.iloc[0] < 1.0


@pytest.mark.slow
def test_speedup_falls_as_batch_grows():
    cfg = SweepConfig(
        methods=[EAGLE_HIGH],
        batch_sizes=[1, 256],
        workload=small_workload(requests=512, output={"mean": 64}),
    )
    s = run_sweep(cfg).set_index("batch_size").speedup
    assert s[1] > s[256]


@pytest.mark.parametrize(
    "method",
    [
        MethodConfig(name="autoregressive", k=0),
        EAGLE_HIGH,
        MethodConfig(name="ngram", k=5, acceptance=AcceptanceConfig(alpha=0.3)),
        MethodConfig(
            name="draft_model",
            k=4,
            draft_model="llama-3.2-1b",
            acceptance=AcceptanceConfig(alpha=0.7),
        ),
    ],
)
def test_no_request_is_lost_and_tokens_and_kv_are_conserved(method):
    result = simulate(Scenario(method=method, workload=small_workload()))
    check_conservation(result)
    assert result.summary.unfinishable == 0


@pytest.mark.slow
def test_scarce_kv_forces_preemption_and_everything_still_finishes():
    # Llama-3.1-70B on two H100s leaves little KV room; long outputs at high concurrency preempt
    # (at a context its ~21k tokens of KV hold: vLLM will not start at the model's 131k)
    sc = Scenario(
        model="llama-3.1-70b",
        tp=2,
        method=EAGLE_HIGH,
        scheduler=SchedulerConfig(max_model_len=16384),
        workload=small_workload(
            requests=300, concurrency=256, prompt={"mean": 2000}, output={"mean": 1500}
        ),
    )
    result = simulate(sc)
    check_conservation(result)
    assert result.summary.preemptions > 0


def test_open_loop_poisson_arrivals_are_served():
    sc = Scenario(method=EAGLE_HIGH, workload=small_workload(arrival="poisson", rate=5.0))
    result = simulate(sc)
    check_conservation(result)
    assert (np.diff(result.requests.arrival_s) > 0).all()


def test_chunked_prefill_splits_long_prompts():
    sc = Scenario(
        method=EAGLE_HIGH,
        scheduler=SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=64),
        workload=small_workload(requests=5, prompt={"mean": 3000}),
    )
    result = simulate(sc)
    check_conservation(result)
    assert (result.iterations.query_tokens <= 256).all()


def test_a_request_that_can_never_fit_is_refused_not_hung():
    # every request unfinishable must not exit 0 with an empty table
    sc = Scenario(
        model="llama-3.1-70b",
        tp=2,
        method=EAGLE_HIGH,
        workload=small_workload(requests=3, prompt={"mean": 900_000, "max": 10**6}),
    )
    with pytest.raises(ScenarioError, match="context of 131072 tokens"):
        simulate(sc)


def test_model_that_does_not_fit_says_so():
    with pytest.raises(ScenarioError, match="does not fit"):
        simulate(Scenario(model="llama-3.1-70b", tp=1, workload=small_workload()))


@pytest.mark.slow
def test_same_seed_same_numbers_and_other_seed_other_numbers():
    def csv(seed):
        cfg = SweepConfig(
            methods=[EAGLE_HIGH],
            batch_sizes=[2, 16],
            seed=seed,
            workload=small_workload(requests=32),
        )
        return run_sweep(cfg).to_csv(index=False)

    assert csv(3) == csv(3)
    assert csv(3) != csv(4)


def test_a_budget_below_max_num_seqs_is_refused_as_vllm_refuses_it():
    """vLLM's SchedulerConfig._verify_args: max_num_batched_tokens must be greater than or
    equal to max_num_seqs (each running sequence takes a token of the budget a step). V1
    lowers its own default max_num_seqs to the budget (_set_default_args_v1), so only one the
    user gave, or V0's 256, is refused (QA: a bare --max-num-batched-tokens 512 was)."""
    from simspec.engine.build import setup_replica
    from simspec.errors import InputError

    budget = SchedulerConfig(max_num_batched_tokens=256)
    assert setup_replica(Scenario(method=EAGLE_HIGH, scheduler=budget)).max_seqs == 256
    given = SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=1024)
    with pytest.raises(InputError, match="256 is below max_num_seqs 1024, which vLLM refuses"):
        simulate(Scenario(method=EAGLE_HIGH, scheduler=given))
    v0 = SchedulerConfig(max_num_batched_tokens=128)
    with pytest.raises(InputError, match="128 is below max_num_seqs 256, which vLLM refuses"):
        simulate(Scenario(engine="vllm-v0", scheduler=v0))


def test_sglang_decodes_every_running_request_whatever_its_chunk_size():
    """SGLang's chunked_prefill_size bounds prefill only: its decode batch runs every running
    request (update_running_batch); vLLM's budget bounds decodes too."""
    from simspec.config import AcceptanceConfig, MethodConfig, WorkloadConfig

    tree = MethodConfig(
        name="eagle2", k=4, tree="dynamic", tree_nodes=63, tree_topk=8,
        acceptance=AcceptanceConfig(alpha=0.6),
    )  # fmt: skip
    wl = WorkloadConfig(
        concurrency=160, requests=160, turnovers=1, measure="whole", lengths_from=None,
        prompt={"mean": 64}, output={"mean": 64},
    )  # fmt: skip
    limits = SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=8192)
    sglang = simulate(Scenario(engine="sglang", method=tree, workload=wl, scheduler=limits))
    assert sglang.iterations.decode_seqs.max() > 8192 // 64
    vllm = simulate(Scenario(engine="vllm", method=tree, workload=wl, scheduler=limits))
    assert (vllm.iterations.query_tokens <= 8192).all()
    assert vllm.iterations.decode_seqs.max() <= 8192 // 64


def test_vllm_graphs_follow_the_deployments_max_num_seqs():
    """vLLM V1's capture limit is min(max_num_seqs x (1 + K) x 2, 512, budget): a server of
    --max-num-seqs 4 at K=3 replays graphs of 32 tokens at most, a larger forward eager (QA:
    simspec kept 512)."""
    from simspec.config import MethodConfig
    from simspec.engine.build import build_cost_model

    small = Scenario(method=MethodConfig(name="eagle3", k=3, acceptance={"alpha": 0.7}))
    small = small.model_copy(update={"scheduler": SchedulerConfig(max_num_seqs=4)})
    assert build_cost_model(small).host.graph_max_tokens == 32
    assert build_cost_model(Scenario()).host.graph_max_tokens == 512  # the defaults' 1,024 x 2
    # V0 captures decode batches up to 256 sequences (_BATCH_SIZES_TO_CAPTURE)
    assert build_cost_model(Scenario(engine="vllm-v0")).host.graph_max_tokens == 256


def test_trtllm_admits_a_prompt_whole_unless_chunked_prefill_is_on():
    """trtllm-serve leaves chunked prefill off: a prompt enters whole, one past max_num_tokens
    is rejected (QA: simspec split it and ran 12,000-token prompts the server rejects)."""
    from simspec.engine.build import setup_replica
    from simspec.errors import InputError, ScenarioError

    long = WorkloadConfig(
        lengths_from=None, prompt=LengthSpec(mean=12_000), output=LengthSpec(mean=16),
        requests=8, turnovers=0,
    )  # fmt: skip
    with pytest.raises(ScenarioError, match="admits a prompt whole"):
        setup_replica(Scenario(engine="trtllm", workload=long))
    chunked = SchedulerConfig(enable_chunked_prefill=True)
    setup = setup_replica(Scenario(engine="trtllm", workload=long, scheduler=chunked))
    assert setup.chunk_prompts
    assert not setup_replica(Scenario(engine="trtllm")).chunk_prompts
    with pytest.raises(InputError, match="scheduler.enable_chunked_prefill"):
        setup_replica(Scenario(scheduler=SchedulerConfig(enable_chunked_prefill=False)))


def test_uniform_lengths_are_the_whole_numbers_between_their_bounds_each_as_likely():
    """QA: low 1.5, high 2.5 drew 1, 2 and 3 (floored draws from [low, high + 1))."""
    import numpy as np

    from simspec.config import LengthSpec

    rng = np.random.default_rng(0)
    drawn = LengthSpec(dist="uniform", low=1.5, high=3.5).sample(3000, rng)
    values, counts = np.unique(drawn, return_counts=True)
    assert list(values) == [2, 3] and abs(counts[0] - counts[1]) < 200
    with pytest.raises(ValueError, match="whole number in"):
        LengthSpec(dist="uniform", low=1.5, high=1.7)
