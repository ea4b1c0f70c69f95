"""vLLM V0's default scheduling (engines.yaml vllm-v0, v0_scheduler): chunked prefill is on
only for a long-context (> 32,768) model with no MLA, no sliding window and no speculative
config; off, a step prefills whole prompts within max(max_model_len, 2048) tokens or else
decodes (Scheduler._schedule_default), 256 sequences at most, and a prompt is admitted only
while 1 % of the blocks stay free (the block manager's watermark)."""

from __future__ import annotations

import pytest
from test_prefill_first import step
from test_scheduler import make_rig

from simspec.config import AcceptanceConfig, MethodConfig, Scenario, SchedulerConfig
from simspec.engine.build import setup_replica
from simspec.errors import InputError

EAGLE = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))


@pytest.mark.parametrize(
    ("model", "method", "context", "whole", "budget"),
    [
        # Llama-3.1-8B (131,072 tokens): chunked by default, V0's 2048-token budget
        ("llama-3.1-8b", None, None, False, 2048),
        # a speculative config turns the long-context default off: max(max_model_len, 2048)
        ("llama-3.1-8b", EAGLE, None, True, 131072),
        # a short context is never chunked by default (the SGLang benchmark's --max_model_len)
        ("llama-3.1-8b", None, 4096, True, 4096),
        ("llama-3.1-8b", None, 1024, True, 2048),
        # MLA is never chunked in V0
        ("deepseek-v3", None, None, True, 163840),
    ],
)
def test_v0_chunks_prompts_only_where_its_defaults_say(model, method, context, whole, budget):
    big = {"gpu": "h200", "tp": 8} if model == "deepseek-v3" else {}
    sc = Scenario(
        model=model,
        engine="vllm-v0",
        **big,
        scheduler=SchedulerConfig(max_model_len=context),
        **({"method": method} if method else {}),
    )
    setup = setup_replica(sc)
    assert setup.max_seqs == 256
    assert (setup.prefill_first, setup.chunk_prompts) == (whole, not whole)
    assert setup.max_tokens == budget
    assert setup.admission_watermark == 0.01
    # a budget the deployment sets stands; without chunked prefill V0 refuses one below
    # max_model_len (SchedulerConfig._verify_args)
    stated = context or setup.max_tokens
    own = 8192 if not whole else max(8192, stated)
    given = sc.model_copy(
        update={"scheduler": SchedulerConfig(max_num_batched_tokens=own, max_model_len=context)}
    )
    assert setup_replica(given).max_tokens == own
    if whole:
        short = SchedulerConfig(max_num_batched_tokens=stated - 1, max_model_len=context)
        with pytest.raises(InputError, match="V0 refuses without chunked prefill") as err:
            setup_replica(sc.model_copy(update={"scheduler": short}))
        assert err.value.field == "scheduler.max_num_batched_tokens"


def test_v1_keeps_chunked_prefill_and_no_watermark():
    setup = setup_replica(Scenario(engine="vllm", method=EAGLE))
    # and an EAGLE drafter recomputes a prefix hit's last block (use_eagle); V0 and SGLang not
    assert setup.drop_last_hit
    assert not setup_replica(Scenario(engine="vllm-v0", method=EAGLE)).drop_last_hit
    assert not setup_replica(Scenario(engine="sglang", method=EAGLE)).drop_last_hit
    assert (setup.prefill_first, setup.chunk_prompts, setup.admission_watermark) == (
        False,
        True,
        0.0,
    )


def test_without_chunking_a_prompt_past_the_budget_left_waits_whole():
    made = make_rig([8, 8, 8], [4, 4, 4], max_tokens=20, prefill_first=True, chunk_prompts=False)
    sched, table = made.sched, made.table
    for rid in range(3):
        sched.add(rid)
    batch = sched.schedule()
    # two prompts fit the 20 tokens; the third is not split into a 4-token chunk: it waits
    assert batch.prefill.tolist() == [0, 1] and batch.chunks.tolist() == [8, 8]
    step(sched, table, batch)
    batch = sched.schedule()
    assert batch.prefill.tolist() == [2] and batch.chunks.tolist() == [8]


def test_the_watermark_keeps_blocks_free_at_admission():
    # 10 blocks of 4 tokens, 2 kept free: two prompts of 3 blocks fit, a third would leave 1
    made = make_rig([12, 12, 12], [4, 4, 4], num_blocks=10, watermark_blocks=2)
    for rid in range(3):
        made.sched.add(rid)
    batch = made.sched.schedule()
    assert batch.prefill.tolist() == [0, 1]


def test_max_model_len_bounds_the_requests_and_cannot_pass_the_models_context():
    """vLLM's server refuses a request whose prompt + max_tokens pass max_model_len, and refuses
    to start with a max_model_len past the model's own context."""
    from simspec.config import LengthSpec, WorkloadConfig
    from simspec.engine.simulation import simulate
    from simspec.errors import InputError, ScenarioError

    wl = WorkloadConfig(
        concurrency=2, requests=4, measure="whole", lengths_from=None,
        prompt=LengthSpec(mean=3000), output=LengthSpec(mean=200),
    )  # fmt: skip
    with pytest.raises(ScenarioError, match="context of 2048 tokens"):
        simulate(Scenario(workload=wl, scheduler=SchedulerConfig(max_model_len=2048)))
    assert simulate(Scenario(workload=wl, scheduler=SchedulerConfig(max_model_len=4096)))
    with pytest.raises(InputError, match="scheduler.max_model_len"):
        setup_replica(Scenario(scheduler=SchedulerConfig(max_model_len=200_000)))


def test_batch_expansion_runs_each_verified_token_as_a_sequence_of_its_own():
    """BatchShape.expanded equals the shape of the rows V0's BatchExpansionTop1Scorer builds:
    a sequence of q tokens and context c becomes q single-token rows reading c + 0..q-1."""
    import numpy as np

    from simspec.engine.costmodel import BatchShape

    widths, contexts = np.array([4, 4, 1, 3]), np.array([100, 2000, 50, 7])
    rows = np.repeat(np.ones(len(widths), dtype=np.int64), widths)
    reads = np.concatenate([c + np.arange(w) for w, c in zip(widths, contexts, strict=True)])
    want = BatchShape.of(rows, reads, 12)
    assert BatchShape.of(widths, contexts, 12).expanded() == want
    # prompt chunks beside them are not expanded, and stay prompt chunks
    chunk = BatchShape.of(np.array([512]), np.array([0]), 1, prefill=True)
    mixed = (BatchShape.of(widths, contexts, 12) + chunk).expanded()
    assert mixed == want + chunk and mixed.split_prefill()[1] == chunk.split_prefill()[1]


def test_v0_prices_a_speculative_verify_as_its_batch_expansion():
    """vLLM V0 scores proposals by batch expansion under CUDA graphs (SpecDecodeWorker
    .create_worker disables the MQA scorer "as the target model is not running in eager
    mode"): its verify reads each sequence's context once per verified token; V1's reads it
    once. The plain decode (AR) steps are unchanged."""
    import numpy as np

    from simspec.catalog.models import load_model
    from simspec.config import Deployment
    from simspec.engine.build import build_cost_model
    from simspec.engine.costmodel import BatchShape
    from simspec.studies.analytic import batch1_costs

    context, k = 30000, 3
    for engine in ("vllm-v0", "vllm"):
        deploy = Deployment(model="llama-3.1-8b", engine=engine)
        costs = batch1_costs(deploy, "eagle3", k, context)
        cost = build_cost_model(Scenario(model="llama-3.1-8b", engine=engine))
        target = load_model("llama-3.1-8b")
        chain = BatchShape.uniform(1, k + 1, float(context), k + 1)
        rows = BatchShape.of(np.ones(k + 1, dtype=np.int64), context + np.arange(k + 1), k + 1)
        want = rows if engine == "vllm-v0" else chain
        assert costs.verify_s[k] == cost.forward(target, want).total_s
    v0 = batch1_costs(Deployment(model="llama-3.1-8b", engine="vllm-v0"), "eagle3", k, context)
    v1 = batch1_costs(Deployment(model="llama-3.1-8b", engine="vllm"), "eagle3", k, context)
    assert v0.verify_s[k] > v1.verify_s[k] and v0.ar_s == v1.ar_s


def test_a_v0_speculative_run_verifies_by_expansion_and_its_baseline_does_not():
    from simspec.engine.simulation import simulate

    lengths = {"prompt": {"mean": 4000}, "output": {"mean": 64}}
    base = Scenario(engine="vllm-v0", workload={"concurrency": 8, "requests": 16, **lengths})
    spec = base.model_copy(update={"method": EAGLE})
    from simspec.catalog.hardware import EngineProfile

    real = EngineProfile.flag

    def v1_scorer(self: EngineProfile, key: str) -> bool:
        return False if key == "verify_by_batch_expansion" else real(self, key)

    runs = {True: (simulate(spec).iterations, simulate(base).iterations)}
    with pytest.MonkeyPatch.context() as mp:  # the same runs with V1's scorer
        mp.setattr(EngineProfile, "flag", v1_scorer)
        runs[False] = (simulate(spec).iterations, simulate(base).iterations)
    (v0_spec, v0_base), (v1_spec, v1_base) = runs[True], runs[False]
    assert v0_base["verify_s"].tolist() == v1_base["verify_s"].tolist()
    assert v0_spec["verify_s"].sum() > v1_spec["verify_s"].sum()


@pytest.mark.parametrize(
    ("model", "gpu", "tp"), [("gpt-oss-20b", "h100_sxm", 1), ("minimax-m2", "h200", 4)]
)
def test_a_model_no_v0_release_serves_is_refused_on_vllm_v0(model, gpu, tp):
    """QA: gpt-oss (vLLM 0.10.1) and MiniMax-M2 ran on vllm-v0; vLLM 0.9.2, the last release
    with V0's speculative decoding, registers neither. Its own classes run."""
    from simspec.catalog.models import load_model
    from simspec.studies.model_facts import model_facts

    plain = MethodConfig(name="autoregressive", k=0)
    sc = Scenario(model=model, gpu=gpu, tp=tp, engine="vllm-v0", method=plain)
    with pytest.raises(InputError, match=f"does not serve {model} .*0.9.2, does not list it"):
        setup_replica(sc)
    with pytest.raises(InputError, match="does not serve"):
        model_facts(model, gpu, "vllm-v0")
    setup_replica(sc.model_copy(update={"engine": "vllm"}))
    assert load_model("qwen3-8b").architecture == "Qwen3ForCausalLM"
    setup_replica(Scenario(model="qwen3-8b", engine="vllm-v0", method=plain))
