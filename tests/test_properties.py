"""Properties over random valid scenarios (hypothesis): nothing lost, nothing over capacity,
time moves forward, plain decoding is its own baseline."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from simspec.catalog.methods import refused_on, tree_capacity
from simspec.config import AcceptanceConfig, LengthSpec, MethodConfig, Scenario, WorkloadConfig
from simspec.engine.simulation import simulate
from simspec.errors import InputError, ScenarioError
from simspec.studies.sweep import SweepConfig, run_sweep

# SIMSPEC_PROPERTY_EXAMPLES=1000 pytest tests/test_properties.py digs deeper by hand
SETTINGS = settings(
    max_examples=int(os.environ.get("SIMSPEC_PROPERTY_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


DRAFTS = {"llama-3.1-8b": "llama-3.2-1b", "qwen3-8b": "qwen3-0.6b", "llama-3.2-1b": "llama-3.2-1b"}
# 70B in bf16 (141 GB of weights) fits on none of the GPUs drawn here at tp=1: now and then a
# scenario that cannot run, which must say why
TOO_BIG = {"llama-3.1-70b": "llama-3.2-1b"}


@st.composite
def methods(draw, target: str) -> MethodConfig:
    name = draw(
        st.sampled_from(
            [
                "autoregressive",
                "eagle3",
                "ngram",
                "draft_model",
                "eagle2",
                "medusa1",
                "lookahead",
                "self_spec",
                "mtp",
            ]
        )
    )
    if name == "autoregressive":
        return MethodConfig(name=name, k=0)
    acc = AcceptanceConfig(
        alpha=draw(st.floats(0.0, 1.0)),
        spread=draw(st.floats(0.0, 1.5)),
        burst_scale=draw(st.floats(0.0, 1.0)),
        burstiness=draw(st.floats(0.0, 0.9)),
    )
    k = draw(st.integers(1, 5))
    if name == "lookahead":  # drafts lookahead_ngram - 1 tokens (5 - 1 by default), not k
        k = 4
    extra: dict = {}
    if name == "draft_model":
        extra["draft_model"] = {**DRAFTS, **TOO_BIG}[target]  # the target's tokenizer
    if name in ("eagle2", "medusa1"):
        # a budget the tree can draft (larger ones are refused: tests/test_silent.py)
        topk = draw(st.integers(1, 6))
        dynamic = name == "eagle2"  # eagle2's default tree is dynamic, medusa1's static
        cap = tree_capacity(topk, k, dynamic)
        extra.update(tree_nodes=draw(st.integers(k, min(24, cap))), tree_topk=topk)
    if draw(st.booleans()):
        extra["disable_by_batch_size"] = draw(st.integers(1, 64))
    if draw(st.booleans()):  # a load policy: K (or a tree budget) per band of running requests
        cut = draw(st.integers(1, 16))
        if name in ("eagle2", "medusa1"):
            extra["tree_schedule"] = [(1, cut, extra["tree_nodes"]), (cut + 1, 4096, k)]
        else:
            extra["k_schedule"] = [(1, cut, k), (cut + 1, 4096, draw(st.integers(0, k)))]
    return MethodConfig(name=name, k=k, acceptance=acc, **extra)


@st.composite
def lengths(draw) -> LengthSpec:
    kind = draw(st.sampled_from(["fixed", "lognormal", "uniform"]))
    mean = draw(st.integers(1, 600))
    if kind == "uniform":
        return LengthSpec(dist="uniform", low=1, high=mean)
    return LengthSpec(dist=kind, mean=mean, cv=draw(st.floats(0.0, 2.0)))


@st.composite
def scenarios(draw) -> Scenario:
    closed = draw(st.booleans())
    schedule = draw(st.none() | st.just([(0.0, 40.0), (0.5, 0.0), (1.0, 5.0)]))
    wl = WorkloadConfig(
        arrival="closed" if closed else "poisson",
        concurrency=draw(st.integers(1, 48)),
        # a schedule sets every rate: a rate beside it is refused (WorkloadConfig._schedule)
        rate=1.0 if schedule is not None else draw(st.floats(0.5, 80.0)),
        rate_schedule=schedule,
        requests=draw(st.integers(1, 40)),
        turnovers=draw(st.integers(0, 4)),
        measure=draw(st.sampled_from(["steady", "whole"])),
        # an open loop's own warm-up lasts its relaxation time (thousands of requests at 80/s):
        # an allowance keeps the examples small; a closed loop also tries its stationary start
        warmup_requests=draw(st.integers(0, 40) if not closed else st.none() | st.integers(0, 8)),
        lengths_from=None,
        prompt=draw(lengths()),
        output=draw(lengths()),
    )
    too_big = draw(st.integers(0, 9)) == 0
    model = next(iter(TOO_BIG)) if too_big else draw(st.sampled_from(sorted(DRAFTS)))
    seqs = draw(st.integers(1, 256))  # vLLM refuses a budget below max_num_seqs
    method = draw(methods(model))
    budget = draw(st.integers(max(64, seqs), 8192))
    # speculation off by batch size is vLLM V0's alone (V1 refuses it); V0 without chunked
    # prefill (a speculative config turns it off) refuses a budget below its context, so
    # there the budget is V0's own default, max(max_model_len, 2048)
    v0 = bool(method.disable_by_batch_size)
    if v0 and method.name == "ngram" and method.prompt_lookup_max is None:
        # vLLM V0 required the n-gram's longest size (engines.yaml ngram_size_defaults)
        method = method.model_copy(update={"prompt_lookup_max": draw(st.integers(1, 6))})
    # a method the engine refuses outright on the model is no scenario to run (vLLM V0 drafts
    # EAGLE-3 for Llama alone: simspec/data/draft_targets.yaml)
    assume(not refused_on(method.name, model, "vllm-v0" if v0 else "vllm"))
    scheduler = {"max_num_seqs": seqs} | ({} if v0 else {"max_num_batched_tokens": budget})
    return Scenario(
        model=model,
        gpu=draw(st.sampled_from(["h100_sxm", "a100_80gb", "a100_40gb"])),
        engine="vllm-v0" if v0 else "vllm",
        method=method,
        workload=wl,
        scheduler=scheduler,
        temperature=draw(st.sampled_from([0.0, 0.7, 1.0])),
        seed=draw(st.integers(0, 2**16)),
    )


def names_the_cause(sc: Scenario, message: str) -> bool:
    """The token budget that cannot hold a verify step, or the model, GPU and tensor
    parallelism that do not fit together, each with the value the scenario gave."""
    budget = f"max_num_batched_tokens={sc.scheduler.max_num_batched_tokens} "
    # an engine that admits prompts whole (vLLM V0 under speculation) names it so
    whole = f"token budget of {sc.scheduler.max_num_batched_tokens} (scheduler.max_num_batched"
    fit = all(part in message for part in (sc.model, f"on {sc.gpu} ", f"tp={sc.tp}:"))
    return budget in message or whole in message or fit


@pytest.mark.slow
@SETTINGS
@given(scenarios())
def test_random_scenarios_keep_every_invariant(sc):
    try:
        res = simulate(sc)
    except ScenarioError as exc:  # a scenario that cannot run says which setting to change
        assert names_the_cause(sc, str(exc)), str(exc)
        event("cannot run")
        return
    except InputError as exc:  # vLLM would not start at the context: the field to change
        assert exc.field == "scheduler.max_model_len", str(exc)
        assert f"on {sc.gpu} at tp={sc.tp}" in exc.message and "--max-model-len" in exc.message
        event("context past the KV cache")
        return
    event("ran")
    req, it, s = res.requests, res.iterations, res.summary
    # every request finishes, or is reported unfinishable
    finished = req.finish_s.notna()
    assert (finished | req.unfinishable).all()
    # a finished request produced exactly what it asked for
    done = req[finished]
    assert (done.output_tokens == done.requested_output_tokens).all()
    # KV blocks never exceed capacity and all come back
    assert (it.kv_blocks_used <= s.kv_blocks_total).all()
    assert s.kv_blocks_in_use_end == 0
    # simulated time never goes backwards: iterations follow one another
    starts, ends = it.start_s.to_numpy(), (it.start_s + it.duration_s).to_numpy()
    assert (np.diff(starts) >= 0).all() and (ends[:-1] <= starts[1:] + 1e-12).all()
    assert (it.duration_s > 0).all()
    # first token after arrival, finish after first token
    assert (done.first_token_s >= done.arrival_s).all()
    assert (done.finish_s >= done.first_token_s).all()


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(st.integers(1, 32), st.integers(2, 20), st.integers(0, 1000))
def test_plain_decoding_is_exactly_its_own_baseline(batch, requests, seed):
    cfg = SweepConfig(
        methods=[MethodConfig(name="autoregressive", k=0)],
        batch_sizes=[batch],
        workload=WorkloadConfig(requests=requests, lengths_from=None, output=LengthSpec(mean=16)),
        seed=seed,
    )
    frame = run_sweep(cfg)
    assert frame.speedup.tolist() == [1.0]


@pytest.mark.parametrize("max_tokens", [3, 4])
def test_a_token_budget_smaller_than_one_verify_step_is_a_clear_error(max_tokens):
    sc = Scenario(
        method=MethodConfig(name="eagle3", k=4, acceptance=AcceptanceConfig(alpha=0.5)),
        scheduler={"max_num_batched_tokens": max_tokens, "max_num_seqs": 1},
    )
    # the field, the least it needs and the flag are named (QA)
    with pytest.raises(
        ScenarioError,
        match=rf"^scheduler.max_num_batched_tokens: {max_tokens} cannot hold one sequence's "
        r"verify step of 5 tokens: give at least 5 \(--max-num-batched-tokens",
    ):
        simulate(sc)
