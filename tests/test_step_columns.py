"""A cheaper engine step computes the same bits: the hot loop's forwards as plain floats
(:mod:`simspec.engine.costmodel.plain`), and a decoding batch that carries its columns from one
step to the next instead of gathering them from the request table, leave every forward, every
draft time and every table of a run exactly as the general path computes them."""

import numpy as np
import pandas as pd
import pytest

from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.models import load_model
from simspec.config import AcceptanceConfig, MethodConfig, Scenario, WorkloadConfig
from simspec.engine.build import setup_replica
from simspec.engine.costmodel import BatchShape, RooflineCostModel, StepCost
from simspec.engine.replica import Replica
from simspec.engine.scheduler import Scheduler
from simspec.engine.simulation import simulate
from simspec.engine.speculators import DraftStep


def cost_model(engine: str = "vllm", tp: int = 1, gpu: str = "h100_sxm") -> RooflineCostModel:
    return RooflineCostModel(load_gpu(gpu), load_profile(gpu), load_engine(engine), tp)


def fields(c: StepCost) -> tuple[float, ...]:
    return (c.gemm_s, c.attention_s, c.lm_head_s, c.elementwise_s, c.communication_s,
            c.overhead_s)  # fmt: skip


def shapes(rng: np.random.Generator) -> list[BatchShape]:
    """Decode, verify, draft and prefill-like batches, from one sequence to past the largest
    CUDA graph (eager launches), with the counts the hot loop builds them from."""
    out = [BatchShape(3, 0, 0.0, 0.0, 0.0, 0)]  # nothing runs
    for n in (1, 2, 7, 64, 256, 700):
        q = rng.integers(1, 6, n)
        kv = rng.integers(0, 9000, n)
        out.append(BatchShape.of(q, kv, n, float(kv.sum())))
        out.append(BatchShape.uniform(n, 4, float(kv.sum()), 4 * n))
        out.append(BatchShape.uniform(n, 1, float(kv.sum()), n))
        chunks = rng.integers(200, 3000, max(n // 8, 1))
        out.append(BatchShape.of(chunks, rng.integers(0, 500, len(chunks)), 1))
    return out


@pytest.mark.parametrize(
    ("engine", "tp", "model"),
    [("vllm", 1, "llama-3.1-8b"), ("sglang", 1, "llama-3.1-8b"), ("trtllm", 1, "llama-3.1-8b"),
     ("hf", 1, "llama-3.1-8b"), ("vllm", 4, "llama-3.1-70b"), ("vllm", 2, "mixtral-8x7b")],
)  # fmt: skip
def test_a_plain_forward_gives_the_forwards_floats_bit_for_bit(engine, tp, model):
    cm = cost_model(engine, tp)
    shape = load_model(model)
    rng = np.random.default_rng(11)
    for layers in (None, 1):
        plain = cm.plain(shape, layers)
        assert plain is not None
        for b in shapes(rng):
            for overhead, extra in ((None, 0.0), (4e-5, 0.0), (None, 3e-6), (2e-5, 7e-6)):
                want = cm.forward(shape, b, overhead, layers, extra)
                got = plain.parts(b.num_tokens, b.logit_tokens, b.num_seqs, b.sum_q_sq,
                                  b.sum_q_kv, b.sum_kv, overhead, extra)  # fmt: skip
                assert got == fields(want)
                assert sum(got[1:], got[0]) == want.total_s  # total_s: the fields in order


def test_a_plain_forward_follows_an_attention_roofline_that_bends():
    cm, model = cost_model(), load_model("llama-3.1-8b")
    cm._terms_of(model).attention.sharpness = 2.5  # packaged profiles fit attention at 1
    plain = cm.plain(model)
    assert plain is not None
    for b in shapes(np.random.default_rng(3)):
        got = plain.parts(b.num_tokens, b.logit_tokens, b.num_seqs, b.sum_q_sq, b.sum_q_kv,
                          b.sum_kv)  # fmt: skip
        assert got == fields(cm.forward(model, b))


@pytest.mark.parametrize(
    ("engine", "tp", "model"),
    [("vllm", 1, "llama-3.1-8b"), ("sglang", 1, "llama-3.1-8b"), ("trtllm", 1, "llama-3.1-8b"),
     ("hf", 1, "llama-3.1-8b"), ("vllm", 4, "llama-3.1-70b")],
)  # fmt: skip
def test_a_run_of_plain_forwards_is_each_forwards_floats(engine, tp, model):
    """PlainForward.parts_many (plain decoding alone, every step at once) gives, element by
    element, the floats parts gives one forward at a time."""
    cm, shape = cost_model(engine, tp), load_model(model)
    plain = cm.plain(shape)
    assert plain is not None
    context = np.random.default_rng(5).integers(0, 40_000, 300).astype(np.float64)
    for width in (1, 4):
        got = plain.parts_many(width, width, 1, float(width * width), width, context)
        assert got is not None
        for i, kv in enumerate(context.tolist()):
            want = plain.parts(width, width, 1, float(width * width), width * kv, kv)
            assert tuple(float(np.broadcast_to(col, len(context))[i]) for col in got) == want


def test_a_run_of_plain_forwards_leaves_a_bending_roofline_to_the_loop():
    cm, model = cost_model(), load_model("llama-3.1-8b")
    cm._terms_of(model).attention.sharpness = 2.5
    plain = cm.plain(model)
    assert plain is not None
    assert plain.parts_many(1, 1, 1, 1.0, 1, np.arange(4.0)) is None


@pytest.mark.parametrize(("engine", "tp"), [("vllm", 1), ("sglang", 1), ("hf", 1), ("vllm", 4)])
@pytest.mark.parametrize("sharpness", [1.0, 2.5])
def test_a_forward_at_a_fixed_shape_is_the_forwards_floats(engine, tp, sharpness):
    """PlainForward.at (a batch's steps whose context sum alone changes) answers, for each
    context sum, the floats parts gives, whatever the host overhead and extra GEMM, on a
    roofline that bends too; an empty forward gets no fixed shape."""
    cm, model = cost_model(engine, tp), load_model("llama-3.1-70b" if tp > 1 else "llama-3.1-8b")
    cm._terms_of(model).attention.sharpness = sharpness
    plain = cm.plain(model)
    assert plain is not None
    assert plain.at(0, 0, 3, 0.0, 1) is None
    context = np.random.default_rng(4).integers(0, 500_000, 40).astype(np.float64).tolist()
    for n, width in ((1, 1), (1, 4), (64, 1), (64, 4), (700, 2)):
        for overhead, extra in ((None, 0.0), (4e-5, 0.0), (None, 3e-6), (2e-5, 7e-6)):
            t = n * width
            fixed = plain.at(t, t, n, float(t * width), width, overhead, extra)
            assert fixed is not None
            assert plain.at(t, t, n, float(t * width), width, overhead, extra) is fixed
            for kv in context:
                want = plain.parts(t, t, n, float(t * width), width * kv, kv, overhead, extra)
                assert fixed.parts(kv) == want
                g, a, lm, e, c, o = want
                assert fixed.time(kv) == (g + a + lm + e + c + o, o)


@pytest.mark.parametrize(
    ("method", "engine"),
    [("eagle1", "vllm"), ("eagle3", "vllm"), ("mtp", "vllm"), ("eagle3", "sglang"),
     ("eagle3", "trtllm")],
)  # fmt: skip
def test_a_chain_at_a_fixed_batch_is_each_steps_draft_and_prompt_seconds(method, engine):
    """EagleHead.draft_at gives draft_s at every context sum where the engine pads the first
    draft forward (None elsewhere, and the same object when asked again), and
    merged_prompt_s gives prompt_s of any step's prompt chunks against that first forward
    where the engine runs them in it (None where they run apart)."""
    sc = eagle_scenario(method, alpha=0.7).model_copy(update={"engine": engine})
    spec = setup_replica(sc).speculator
    rng = np.random.default_rng(9)
    for n in (1, 3, 64):
        for k in (1, 2, 3):
            chain = spec.draft_at(n, k, None)
            assert spec.draft_at(n, k, None) is chain
            if not spec.padded_first(k):
                assert chain is None
                continue
            assert chain is not None
            for total in rng.integers(0, 8000 * n, 20).tolist():
                kv = np.full(n, total // n, dtype=np.int64)  # the sums enter, not the split
                kv[0] += total - int(kv.sum())
                step = DraftStep(kv, np.ones(n, dtype=np.int64), float(total), k, None)
                draft_s, first_s = chain.seconds_and_first(float(total))
                assert draft_s == chain.seconds(float(total)) == spec.draft_s(step)
                for m in (0, 1, 3):
                    chunks = rng.integers(1, 3000, m)
                    prompt = BatchShape.of(chunks, rng.integers(0, 500, m), m, prefill=True)
                    merged = spec.merged_prompt_s(chain, float(total), first_s, prompt)
                    if not spec.engine.flag("draft_prompt_in_first_pass"):  # vllm, trtllm
                        assert merged is None
                        continue
                    assert merged == spec.prompt_s(prompt, step)


@pytest.mark.parametrize(
    "model", ["deepseek-v3", "deepseek-v3.2", "gpt-oss-120b", "qwen3-next-80b-a3b"]
)
def test_models_off_the_plain_path_keep_the_general_forward(model):
    # MLA, sparse MLA, sliding windows, Gated DeltaNet: no plain forward is offered
    assert cost_model().plain(load_model(model)) is None


def eagle_scenario(method: str = "eagle3", **acceptance) -> Scenario:
    acc = acceptance or {"acc_len": "sharegpt", "acc_len_method": "eagle3"}
    return Scenario(method=MethodConfig(name=method, k=3, acceptance=AcceptanceConfig(**acc)))


@pytest.mark.parametrize("method", ["eagle1", "eagle3", "mtp", "ngram", "pld", "suffix"])
def test_draft_seconds_are_the_draft_costs_total(method):
    spec = setup_replica(eagle_scenario(method, alpha=0.7)).speculator
    rng = np.random.default_rng(5)
    for n in (1, 3, 64, 300):
        kv = rng.integers(0, 8000, n)
        last = rng.integers(1, 5, n)
        for k in (0, 1, 2, 3):
            for q_sum in (None, int(last.sum())):
                step = DraftStep(kv, last, float(kv.sum()), k, None, q_sum)
                assert spec.draft_s(step) == spec.draft_cost(step).total_s


@pytest.mark.parametrize(
    ("method", "engine"),
    [("eagle1", "vllm"), ("eagle3", "vllm"), ("mtp", "vllm"), ("eagle3", "sglang"),
     ("mtp", "sglang"), ("eagle3", "trtllm")],
)  # fmt: skip
def test_a_run_of_draft_seconds_is_each_steps_draft_seconds(method, engine):
    """EagleHead.draft_s_many (a batch's run at once) gives draft_s of each step, element by
    element, where the engine pads the first draft forward (vLLM V1), and None elsewhere."""
    sc = eagle_scenario(method, alpha=0.7).model_copy(update={"engine": engine})
    spec = setup_replica(sc).speculator
    rng = np.random.default_rng(8)
    for n in (1, 3, 64):
        sums = rng.integers(0, 8000 * n, 40)
        for k in (1, 2, 3):
            got = spec.draft_s_many(n, k, None, sums.astype(np.float64))
            if not spec.padded_first(k):
                assert got is None
                continue
            assert got is not None
            for i, total in enumerate(sums.tolist()):
                kv = np.full(n, total // n, dtype=np.int64)  # the sums enter, not the split
                kv[0] += total - int(kv.sum())
                step = DraftStep(kv, np.ones(n, dtype=np.int64), float(total), k, None)
                assert float(np.broadcast_to(got, len(sums))[i]) == spec.draft_s(step)


@pytest.mark.parametrize(("method", "tree"), [("eagle1", "static"), ("eagle2", "dynamic")])
def test_a_trees_draft_seconds_are_its_draft_costs_total(method, tree):
    """Trees of several widths by depth (the static one once built for the run's α), at
    each budget the draft may be given."""
    cfg = MethodConfig(
        name=method, k=4, tree=tree, tree_nodes=25, tree_topk=6,
        acceptance=AcceptanceConfig(alpha=0.7),
    )  # fmt: skip
    spec = setup_replica(Scenario(method=cfg)).speculator
    spec.draft_plan(np.array([0.7, 0.6, 0.5, 0.4]), sampled=False)
    assert spec.step_widths(4).count(1) < 3  # the tree path, not a chain's
    rng = np.random.default_rng(6)
    for n in (1, 3, 64):
        kv = rng.integers(0, 8000, n)
        last = rng.integers(1, 5, n)
        for k in (1, 2, 4):
            for nodes in (None, 12, 25):
                step = DraftStep(kv, last, float(kv.sum()), k, nodes)
                assert spec.draft_s(step) == spec.draft_cost(step).total_s


@pytest.mark.parametrize(
    ("method", "engine", "tree"),
    [("eagle1", "vllm", None), ("eagle3", "vllm", None), ("mtp", "vllm", None),
     ("eagle3", "sglang", None), ("mtp", "sglang", None), ("eagle3", "hf", None),
     ("eagle3", "trtllm", None), ("eagle1", "vllm", "static"), ("eagle2", "sglang", "dynamic")],
)  # fmt: skip
def test_one_sequences_draft_seconds_are_draft_s_from_its_integers(method, engine, tree):
    """EagleHead.draft_s_one (a request decoding alone, no arrays) gives draft_s of the
    one-sequence step, padded first forward or not, chain or tree, at every budget."""
    tree_cfg = {"tree": tree, "tree_nodes": 25, "tree_topk": 6} if tree else {}
    cfg = MethodConfig(name=method, k=4, acceptance=AcceptanceConfig(alpha=0.7), **tree_cfg)
    spec = setup_replica(Scenario(method=cfg, engine=engine)).speculator
    spec.draft_plan(np.array([0.7, 0.6, 0.5, 0.4]), sampled=False)
    rng = np.random.default_rng(12)
    kvs, lasts = rng.integers(0, 30_000, 40).tolist(), rng.integers(1, 6, 40).tolist()
    for kv, last in zip(kvs, lasts, strict=True):
        for k in (0, 1, 2, 4):
            for nodes in (None, 12) if tree else (None,):
                step = DraftStep(np.array([kv]), np.array([last]), float(kv), k, nodes, last)
                assert spec.draft_s_one(kv, last, float(kv), k, nodes) == spec.draft_s(step)


def closed(method: MethodConfig, concurrency: int, **workload) -> Scenario:
    wl = {"arrival": "closed", "concurrency": concurrency, "requests": 60, "turnovers": 2,
          "lengths_from": None, "prompt": {"dist": "lognormal", "mean": 300, "cv": 0.5},
          "output": {"dist": "lognormal", "mean": 90, "cv": 0.6}, **workload}  # fmt: skip
    return Scenario(method=method, workload=WorkloadConfig(**wl))


SCENARIOS = {
    # the ShareGPT trace, each request replaying its own record's acceptance
    "eagle3_trace": Scenario(
        method=MethodConfig(
            name="eagle3",
            k=3,
            acceptance=AcceptanceConfig(acc_len="sharegpt", acc_len_method="eagle3"),
        ),
        workload=WorkloadConfig(arrival="closed", concurrency=16, requests=60, turnovers=2),
    ),
    "eagle3_parametric": closed(
        MethodConfig(name="eagle3", k=4, acceptance=AcceptanceConfig(alpha=0.7, spread=0.5)), 8
    ),
    "autoregressive": closed(MethodConfig(name="autoregressive", k=0), 8),
    "ngram_replay": closed(
        MethodConfig(name="ngram", k=3, acceptance=AcceptanceConfig(tokens="sharegpt")), 8
    ),
    "poisson": Scenario(
        method=MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.6)),
        workload=WorkloadConfig(
            arrival="poisson",
            rate=20.0,
            requests=60,
            lengths_from=None,
            prompt={"dist": "lognormal", "mean": 300, "cv": 0.5},
            output={"dist": "lognormal", "mean": 40, "cv": 0.5},
        ),  # fmt: skip
    ),
    # 70B on two A100s and long prompts (the hf_pp2_preemption golden's deployment): the
    # KV cache runs short, and preemptions break the running set mid-run
    "preempting": Scenario(
        model="llama-3.1-70b",
        pp=2,
        engine="hf",
        gpu="a100_80gb",
        method=MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.8)),
        workload=WorkloadConfig(
            arrival="closed",
            concurrency=64,
            requests=128,
            turnovers=2,
            lengths_from=None,
            prompt={"dist": "lognormal", "mean": 2000, "cv": 1.0, "max": 8000},
            output={"dist": "uniform", "low": 100, "high": 600},
        ),
    ),  # fmt: skip
}


_EMPTY = np.zeros(0, dtype=np.int64)


def _no_carry(self: Replica, step):
    """Accept as before the carry: every step gathers its columns from the request table."""
    out = Replica_accept(self, step)
    self._carry = None
    return out


Replica_accept = Replica._accept


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_run_is_the_same_with_and_without_carried_columns_and_plain_forwards(name, monkeypatch):
    sc = SCENARIOS[name]
    fast = simulate(sc)
    with monkeypatch.context() as m:
        m.setattr(Replica, "_accept", _no_carry)
        m.setattr(Scheduler, "decoded", lambda self, rids, computed: None)
        m.setattr(RooflineCostModel, "plain", lambda self, model, layers=None: None)
        # Scheduler._schedule_general's loop from the first running request on
        m.setattr(Scheduler, "_fitting_head", lambda self: (0, self.max_tokens, _EMPTY, [], []))
        general = simulate(sc)
    if name == "preempting":
        assert fast.requests["preemptions"].sum() > 0
    pd.testing.assert_frame_equal(fast.iterations, general.iterations, check_exact=True)
    pd.testing.assert_frame_equal(fast.requests, general.requests, check_exact=True)
    assert fast.summary.as_json_dict() == general.summary.as_json_dict()


def _few(method: MethodConfig, engine: str = "vllm") -> dict[int, Scenario]:
    """The scenario alone (concurrency 1) and as a batch of four."""
    return {c: closed(method, c).model_copy(update={"engine": engine}) for c in (1, 4)}


LOOPED = {
    "eagle3_trace": {
        c: Scenario(
            method=MethodConfig(
                name="eagle3",
                k=3,
                acceptance=AcceptanceConfig(acc_len="sharegpt", acc_len_method="eagle3"),
            ),
            workload=WorkloadConfig(arrival="closed", concurrency=c, requests=12, turnovers=2),
        )
        for c in (1, 4)
    },
    "eagle3_parametric": _few(
        MethodConfig(name="eagle3", k=4, acceptance=AcceptanceConfig(alpha=0.7, spread=0.5))
    ),
    "eagle3_parametric_sglang": _few(
        MethodConfig(name="eagle3", k=4, acceptance=AcceptanceConfig(alpha=0.7, spread=0.5)),
        "sglang",
    ),
    "eagle2_tree": _few(
        MethodConfig(name="eagle2", k=5, tree_nodes=24, acceptance=AcceptanceConfig(alpha=0.7))
    ),
    "autoregressive": _few(MethodConfig(name="autoregressive", k=0)),
    "ngram_replay": _few(
        MethodConfig(name="ngram", k=3, acceptance=AcceptanceConfig(tokens="sharegpt"))
    ),
    "ngram_replay_sglang": _few(
        MethodConfig(name="ngram", k=3, acceptance=AcceptanceConfig(tokens="sharegpt")), "sglang"
    ),
}


# SGLang's n-gram replays its trie over the token streams first (seconds, once per process)
_LOOPED_NAMES = [
    pytest.param(n, marks=[pytest.mark.slow] if n == "ngram_replay_sglang" else []) for n in LOOPED
]


@pytest.mark.parametrize("name", _LOOPED_NAMES)
@pytest.mark.parametrize("concurrency", [1, 4])
@pytest.mark.parametrize("interrupted", [False, True])
def test_a_batch_that_runs_on_unchanged_steps_as_the_general_iteration(
    name, concurrency, interrupted, monkeypatch
):
    """Replica._decode_alone (one request decoding alone) and Replica._decode_steady (a batch
    decoding on unchanged) give the general step's tables bit for bit; ``interrupted``: every
    seventh looped step hands over to the general step (as when blocks run short), so the
    columns written back must be what the general step would have left."""
    sc = LOOPED[name][concurrency]
    looped = 0
    calls = 0

    def counted(original):
        def run(self, arg):
            nonlocal looped
            n = original(self, arg)
            looped += n
            return n

        return run

    def every_seventh_short(original, short):
        def schedule(self, computed, held, slots=None):
            nonlocal calls
            calls += 1
            return short if calls % 7 == 0 else original(self, computed, held, slots)

        return schedule

    def six_then_short(original):
        # a request alone takes its steps at once (Replica._decode_alone_plain,
        # _decode_alone_trace, _decode_alone_lookup), and so does a batch
        # (_decode_steady_plain, _decode_steady_trace, _decode_steady_lookup): at most six of
        # them, and every other time none, so the general step runs between
        def schedule(self, context, held, slots=None):
            nonlocal calls
            calls += 1
            if calls % 2 == 0:
                return _EMPTY
            return original(self, context[:6], held, None if slots is None else slots[:6])

        return schedule

    def six_rows_then_short(original):
        def schedule(self, context, held, slots=None):  # a batch's steps at once, as above
            nonlocal calls
            calls += 1
            if calls % 2 == 0:
                return _EMPTY.reshape(0, len(held))
            return original(self, context[:6], held, None if slots is None else slots[:6])

        return schedule

    def every_other_unfit(original):
        def fits(self, context, held):
            nonlocal calls
            calls += 1
            return calls % 2 == 1 and original(self, context, held)

        return fits

    with monkeypatch.context() as m:
        m.setattr(Replica, "_decode_alone", counted(Replica._decode_alone))
        m.setattr(Replica, "_decode_steady", counted(Replica._decode_steady))
        if interrupted:
            alone = every_seventh_short(Scheduler.schedule_alone, -1)
            m.setattr(Scheduler, "schedule_alone", alone)
            if name == "eagle3_parametric":
                # a run whose acceptance is drawn is taken at once only where all its steps
                # fit (Scheduler.alone_fits): interrupted there, not cut after its draws
                m.setattr(Scheduler, "alone_fits", every_other_unfit(Scheduler.alone_fits))
            else:
                m.setattr(
                    Scheduler,
                    "schedule_alone_steps",
                    six_then_short(Scheduler.schedule_alone_steps),
                )
            m.setattr(
                Scheduler,
                "schedule_steady_steps",
                six_rows_then_short(Scheduler.schedule_steady_steps),
            )
            m.setattr(
                Scheduler, "schedule_steady", every_seventh_short(Scheduler.schedule_steady, None)
            )
        fast = simulate(sc)
    assert looped > 0.5 * len(fast.iterations)
    with monkeypatch.context() as m:
        m.setattr(Scheduler, "alone", lambda self: None)
        m.setattr(Scheduler, "steady", lambda self: None)
        general = simulate(sc)
    pd.testing.assert_frame_equal(fast.iterations, general.iterations, check_exact=True)
    pd.testing.assert_frame_equal(fast.requests, general.requests, check_exact=True)
    assert fast.summary.as_json_dict() == general.summary.as_json_dict()
