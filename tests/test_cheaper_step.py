"""The cheaper engine step changes how an iteration is computed, never what: a closed loop
stepped without SimPy's event queue, and a cost model that remembers a forward's count-only
terms, give the same bits as before."""

import numpy as np
import pandas as pd
import simpy

from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.models import load_model
from simspec.config import AcceptanceConfig, MethodConfig, Scenario, WorkloadConfig
from simspec.engine import simulation
from simspec.engine.costmodel import BatchShape, RooflineCostModel
from simspec.engine.replica import Replica
from simspec.engine.simulation import simulate


def closed_loop(method: MethodConfig, concurrency: int = 8) -> Scenario:
    workload = WorkloadConfig(
        arrival="closed",
        concurrency=concurrency,
        requests=40,
        turnovers=2,
        lengths_from=None,
        prompt={"dist": "lognormal", "mean": 300, "cv": 0.5},
        output={"dist": "lognormal", "mean": 80, "cv": 0.6},
    )
    return Scenario(method=method, workload=workload)


def _under_simpy(replica: Replica) -> None:
    """What simulate did before: the replica's SimPy process in its own environment."""
    env = replica.env
    assert isinstance(env, simpy.Environment)
    env.process(replica.run())
    env.run()


def test_a_closed_loop_steps_alone_exactly_as_it_would_under_simpy(monkeypatch):
    methods = [
        MethodConfig(name="autoregressive", k=0),
        MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7, spread=0.5)),
        MethodConfig(name="ngram", k=3, acceptance=AcceptanceConfig(tokens="sharegpt")),
    ]
    for method in methods:
        sc = closed_loop(method)
        alone = simulate(sc)
        with monkeypatch.context() as m:
            m.setattr(simulation, "StepClock", simpy.Environment)
            m.setattr(Replica, "run_alone", _under_simpy)
            queued = simulate(sc)
        pd.testing.assert_frame_equal(alone.iterations, queued.iterations, check_exact=True)
        pd.testing.assert_frame_equal(alone.requests, queued.requests, check_exact=True)
        assert alone.summary.as_json_dict() == queued.summary.as_json_dict()  # NaN as None


def test_a_forward_costs_the_same_whatever_shapes_came_before_it():
    def fresh() -> RooflineCostModel:
        gpu = "h100_sxm"
        return RooflineCostModel(load_gpu(gpu), load_profile(gpu), load_engine("vllm"))

    model = load_model("llama-3.1-8b")
    rng = np.random.default_rng(7)
    shapes = [
        BatchShape.of(rng.integers(1, 6, n), rng.integers(0, 4000, n), int(logits))
        for n, logits in [(1, 1), (8, 8), (64, 256), (64, 64), (3, 3)]
    ]
    shapes += [BatchShape.uniform(n, 4, 1500.0 * n, 4 * n) for n in (1, 8, 64)]
    forward, backward = fresh(), fresh()
    ahead = [forward.forward(model, s) for s in shapes]
    behind = [backward.forward(model, s) for s in reversed(shapes)][::-1]
    again = [forward.forward(model, s) for s in shapes]  # every count now remembered
    assert ahead == behind == again


def test_one_sequence_shape_is_the_array_sums():
    """BatchShape.of reads a single sequence's counts as Python ints (the closed loop's new
    prompt, every general step): the same fields as the int64 sums of any longer batch."""
    rng = np.random.default_rng(3)
    for q, kv in zip(rng.integers(1, 9000, 50), rng.integers(0, 200_000, 50), strict=True):
        one = BatchShape.of(np.array([q]), np.array([kv]), 1, prefill=True)
        # the same sequence beside an empty one: the array path, the same sums
        two = BatchShape.of(np.array([q, 0]), np.array([kv, 0]), 1, prefill=True)
        for name in ("num_tokens", "sum_q_sq", "sum_q_kv", "sum_kv", "pre_q_sq", "pre_q_kv"):
            assert getattr(one, name) == getattr(two, name), name
            assert type(getattr(one, name)) is type(getattr(two, name)), name
        assert one.num_seqs == 1
