"""Every method: presets reproduce their published τ at batch 1, and the structural effects that
set methods apart hold (Medusa vs Hydra, dynamic vs static trees, Lookahead's width, self-spec's
free draft, trees losing faster with batch than chains)."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.methods import method_info, method_presets, preset_method, trace_setup
from simspec.catalog.models import load_model
from simspec.cli.main import app
from simspec.config import AcceptanceConfig, LengthSpec, MethodConfig, Scenario, WorkloadConfig
from simspec.engine.acceptance.exact import expected_tokens_per_step
from simspec.engine.acceptance.inversion import alpha_profile, pooled_tau, tree_expected_tau
from simspec.engine.acceptance.trees import (
    TreeShape,
    best_tree,
    calibrated_hits,
    chain,
    expected_tau,
    from_paths,
    rank_curves,
    top_r_hit,
    walk,
)
from simspec.engine.build import setup_replica
from simspec.engine.costmodel import BatchShape, RooflineCostModel
from simspec.engine.lookup.proposers import LookupProposer, chain_tau, replay_table
from simspec.engine.simulation import simulate
from simspec.engine.speculators import SPECULATORS, DraftStep, build_speculator
from simspec.errors import InputError
from simspec.studies.sweep import SweepConfig, run_sweep

runner = CliRunner()
TARGET = "llama-3.1-8b"
FIXED = WorkloadConfig(
    concurrency=1,
    requests=160,
    lengths_from=None,
    prompt=LengthSpec(mean=128),
    output=LengthSpec(mean=192),
)


def cost_model():
    return RooflineCostModel(load_gpu("h100_sxm"), load_profile("h100_sxm"), load_engine("vllm"))


def batch1_tau(method: MethodConfig, workload: WorkloadConfig = FIXED) -> float:
    """Tokens per step over every request once (``measure: whole``)."""
    whole = workload.model_copy(update={"measure": "whole"})
    return simulate(Scenario(method=method, workload=whole)).summary.mean_accept_len


TAU_PRESETS = [
    n
    for n in SPECULATORS
    if n != "autoregressive"
    and (a := preset_method(n, "sharegpt", target=TARGET).acceptance) is not None
    and a.tau is not None
]


@pytest.mark.slow
@pytest.mark.parametrize("name", TAU_PRESETS)
def test_batch1_tau_of_each_tau_preset_matches_its_published_tau(name):
    method = preset_method(name, "sharegpt", target=TARGET)
    a = method.acceptance
    if a.tau_k is not None and a.tau_k != method.k:  # measured with another shape: run that
        beams = {"beam_width": a.tau_tree_topk} if name == "redrafter" else {}
        method = method.model_copy(update={"k": a.tau_k, **beams})
    assert batch1_tau(method) == pytest.approx(a.tau, rel=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["eagle3", "ngram"])
def test_batch1_tau_of_each_trace_preset_matches_the_trace_replay(name):
    # at the setup the trace was recorded with (n-gram: prompt_lookup 3/5, not vLLM's default)
    method = preset_method(name, "sharegpt", target=TARGET).model_copy(update=trace_setup(name))
    replay = method_presets()[name]["presets"]["chat"]["replay_tau"][method.k]
    workload = WorkloadConfig(concurrency=1, lengths_from="sharegpt", requests=310)
    assert batch1_tau(method, workload) == pytest.approx(replay, rel=0.05)


@pytest.mark.slow
def test_batch1_tau_of_the_suffix_preset_is_its_replay_walked_as_a_chain():
    method = preset_method("suffix", "gsm8k", target=TARGET)
    workload = WorkloadConfig(concurrency=1, lengths_from="gsm8k", requests=300)
    table = replay_table("gsm8k", LookupProposer("suffix"), method.k)
    assert batch1_tau(method, workload) == pytest.approx(chain_tau(table, start=1), rel=1e-12)


def test_batch1_tau_of_the_alpha_preset_matches_the_model_prediction():
    method = preset_method("self_spec", "cnn", target=TARGET)
    acc = method.acceptance
    expected = pooled_tau(expected_tokens_per_step, alpha_profile(acc, method.k), acc.spread)
    assert batch1_tau(method) == pytest.approx(expected, rel=0.05)


def test_every_method_has_a_preset_and_cites_its_source():
    for name in SPECULATORS:
        if name == "autoregressive":
            continue
        for dataset in ("sharegpt", "instructcoder", "gsm8k", "cnn"):
            acc = preset_method(name, dataset, target=TARGET).acceptance
            assert acc is not None and len(acc.source) > 30, (name, dataset)


@pytest.mark.slow
def test_sweep_runs_every_method_by_name_and_methods_lists_them(tmp_path):
    # every method by name: `--methods all` offers only what applies to the model
    # (tests/test_cli_names.py), but a method left out of it still runs when named; mtp needs
    # a model with MTP layers (refused by name on this one: tests/test_cli_names.py; run on
    # deepseek-v3: tests/test_moe.py)
    out = tmp_path / "all.csv"
    # p_eagle drafts only with a head trained for its target (gpt-oss: run in
    # tests/test_parallel_drafting.py; refused by name on llama-3.1-8b there too)
    names = [n for n in SPECULATORS if n not in ("mtp", "p_eagle")]
    args = [
        "sweep",
        "--methods",
        ",".join(names),
        "--batch-sizes",
        "1",
        "--requests",
        "4",
        "--prompt-len",
        "64",
        "--output-len",
        "48",
        "--quiet",
        "--out",
        str(out),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    import pandas as pd

    assert set(pd.read_csv(out).method) == set(names)
    listing = runner.invoke(app, ["methods"])
    assert listing.exit_code == 0
    for name in SPECULATORS:
        if name != "autoregressive":
            assert name in listing.output
    detail = runner.invoke(app, ["methods", "eagle2"])
    assert detail.exit_code == 0 and "e2t1-v13b-e2-mtb-t0" in detail.output


# -- structure ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_medusa_deep_heads_accept_less_than_hydras():
    medusa = preset_method("medusa1", "sharegpt", target=TARGET)
    hydra = preset_method("hydra", "sharegpt", target=TARGET)
    m_alpha = alpha_profile(medusa.acceptance, 4, SPECULATORS["medusa1"].depth_decay)
    h_alpha = alpha_profile(hydra.acceptance, 4, SPECULATORS["hydra"].depth_decay)
    assert np.all(np.diff(m_alpha) < 0)  # independent heads: deeper accepts less
    assert np.all(m_alpha[1:] < h_alpha[1:])
    # and in simulation: Hydra reaches depth 3+ more often
    assert batch1_tau(hydra) > batch1_tau(medusa) + 0.5


@pytest.mark.slow
def test_dynamic_tree_beats_a_static_tree_of_the_same_budget():
    """Where acceptance varies from step to step (spread 1): a dynamic tree is built for the
    step's own acceptance. (With siblings priced as measured heads' rescue them, at spread 0.5
    the two are within 1 %: the dynamic tree's edge is the variation it adapts to.)"""
    acc = AcceptanceConfig(alpha=0.5, spread=1.0)
    shape = dict(name="eagle2", k=6, tree_nodes=50, tree_topk=10, acceptance=acc)
    dynamic = batch1_tau(MethodConfig(tree="dynamic", **shape))
    static = batch1_tau(MethodConfig(tree="static", **shape))
    assert dynamic > static * 1.02
    # the model's expectation says the same
    profile = np.full(6, 0.5)
    assert tree_expected_tau(TreeShape(50, 10, 6, True), profile, 1.0) > tree_expected_tau(
        TreeShape(50, 10, 6, False), profile, 1.0
    )


def test_tau_rises_with_the_node_budget_while_the_verify_pass_grows():
    profile = np.full(6, 0.65)
    taus = [expected_tau(best_tree(profile, n, 10), profile) for n in (6, 16, 32, 64)]
    assert taus == sorted(taus) and taus[-1] > taus[0] + 1.0
    cm, model = cost_model(), load_model(TARGET)
    kv = 32 * 1024.0
    verify = [
        cm.forward(model, BatchShape.uniform(32, n + 1, kv, 32 * (n + 1))).total_s
        for n in (6, 16, 32, 64)
    ]
    assert verify == sorted(verify) and verify[-1] > 2 * verify[0]


def test_lookahead_verify_width_grows_with_window_ngram_and_guesses():
    def width(w, n, g):
        cfg = MethodConfig(
            name="lookahead",
            lookahead_window=w,
            lookahead_ngram=n,
            lookahead_guesses=g,
            acceptance=AcceptanceConfig(alpha=0.5),
        )
        spec = build_speculator(cfg, load_model(TARGET), cost_model(), load_engine("vllm"))
        return spec.verify_tokens, spec.max_accept

    assert width(7, 5, 7) == (1 + (7 + 7) * 4, 4)
    assert width(15, 5, 7)[0] > width(7, 5, 7)[0] > width(7, 5, 0)[0]
    assert width(7, 6, 7)[0] > width(7, 5, 7)[0]


def test_self_spec_adds_no_draft_weights_or_kv_and_drafts_with_its_early_layers():
    cfg = preset_method("self_spec", "cnn", target=TARGET)
    spec = build_speculator(cfg, load_model(TARGET), cost_model(), load_engine("vllm"))
    assert spec.extra_weight_bytes() == 0 and spec.extra_kv_bytes_per_token() == 0
    draft = spec.draft_cost(DraftStep(np.full(4, 512), np.ones(4, dtype=np.int64), 2048.0, spec.k))
    full = cost_model().forward(load_model(TARGET), BatchShape.uniform(4, 1, 2048.0, 4))
    assert draft.total_s < spec.k * full.total_s  # 8 of 32 layers per draft step


def built(name: str):
    """``name`` in its packaged default configuration (alpha 0.5 where it has no preset)."""
    cfg = preset_method(name, "sharegpt", target=TARGET)
    if cfg.acceptance is None and name != "autoregressive":
        cfg = cfg.model_copy(update={"acceptance": AcceptanceConfig(alpha=0.5)})
    return build_speculator(cfg, load_model(TARGET), cost_model(), load_engine("vllm"))


@pytest.mark.parametrize("name", list(SPECULATORS))
def test_a_method_drafts_the_catalogues_default_shape(name):
    spec = built(name)
    info = method_info(name)
    assert spec.info == info and spec.tree_kind == info.default_tree in info.shapes
    assert (spec.tree is None) == (info.default_tree == "chain" or spec.k == 0)


@pytest.mark.parametrize("name", list(SPECULATORS))
def test_no_sequences_or_no_draft_takes_no_draft_time(name):
    spec = built(name)
    none, two = np.zeros(0, dtype=np.int64), np.ones(2, dtype=np.int64)
    assert spec.draft_cost(DraftStep(none, none, 0.0, max(spec.k, 1))).total_s == 0.0
    assert spec.draft_cost(DraftStep(100 * two, two, 200.0, 0)).total_s == 0.0


@pytest.mark.slow
def test_tree_speedup_falls_faster_with_batch_than_a_chains():
    acc = AcceptanceConfig(alpha=0.7)
    tree = MethodConfig(
        name="eagle2", k=6, tree="dynamic", tree_nodes=50, tree_topk=10, acceptance=acc
    )
    chain_ = MethodConfig(name="eagle2", k=3, tree="chain", acceptance=acc)
    cfg = SweepConfig(
        methods=[MethodConfig(name="autoregressive", k=0), tree, chain_],
        batch_sizes=[1, 64],
        # 48 requests alone and 8 turnovers at batch 64, not a sweep's 256 and 64: the tree
        # loses ~75 % of its speedup under load and the chain ~12 %, far past a short run's spread
        workload=WorkloadConfig(requests=48, turnovers=8),
    )
    frame = run_sweep(cfg)
    by = frame.set_index(["k", "batch_size"]).speedup
    assert by[(6, 1)] > by[(3, 1)]  # the tree wins alone
    assert by[(6, 64)] / by[(6, 1)] < by[(3, 64)] / by[(3, 1)]  # and loses more under load


@pytest.mark.slow
def test_speculation_off_by_batch_size_is_autoregressive_decoding():
    eagle = preset_method("eagle3", "sharegpt", target=TARGET)
    off = eagle.model_copy(update={"disable_by_batch_size": 1})
    wl = WorkloadConfig(concurrency=4, requests=16)
    # vLLM V0's, which V1 never reads; against a K schedule of K=0 throughout, since V0 with
    # a speculative config prefills unchunked where plain decoding chunks (v0_unchunked)
    disabled = simulate(Scenario(engine="vllm-v0", method=off, workload=wl))
    never = eagle.model_copy(update={"k_schedule": [(1, 1024, 0)]})
    zero = simulate(Scenario(engine="vllm-v0", method=never, workload=wl)).summary
    assert disabled.summary.throughput_tok_s == zero.throughput_tok_s
    assert disabled.iterations.spec_seqs.sum() == 0


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_speculation_off_by_batch_size_is_refused_where_the_engine_never_reads_it(engine):
    """QA: vLLM V1 ignores disable_by_batch_size (vLLM PR #35060), yet ran it as V0 does."""
    off = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))
    off = off.model_copy(update={"disable_by_batch_size": 4})
    with pytest.raises(InputError) as exc:
        setup_replica(Scenario(engine=engine, method=off))
    assert exc.value.field == "method.disable_by_batch_size"
    assert ("#35060" in exc.value.message) == (engine == "vllm")
    assert "vllm-v0" in exc.value.message


def test_dynamic_sd_schedule_picks_k_by_batch_size():
    cfg = MethodConfig(
        name="eagle3",
        k=5,
        k_schedule=[(1, 4, 5), (5, 32, 2), (33, 1024, 0)],
        acceptance=AcceptanceConfig(alpha=0.7),
    )
    spec = build_speculator(cfg, load_model(TARGET), cost_model(), load_engine("vllm"))
    assert [spec.step_shape(b).k for b in (1, 4, 5, 32, 33, 500)] == [5, 5, 2, 2, 0, 0]
    assert spec.step_shape(8).width == 3


# -- trees and the exact rule at temperature 0 --------------------------------------------------
def test_rank_model_matches_a_fresh_greedy_verification_on_synthetic_distributions():
    rng = np.random.default_rng(99)
    target = rng.standard_normal((20_000, 64))
    draft = target + 1.0 * rng.standard_normal((20_000, 64))
    best = target.argmax(axis=1)  # the target's greedy token
    ranks = (draft > draft[np.arange(len(draft)), best][:, None]).sum(axis=1)  # its draft rank
    alpha = float((ranks == 0).mean())
    hit = calibrated_hits(np.array([alpha]), 0.0)[0]  # gamma 0: the synthetic family itself
    for r in (2, 4, 8):
        assert hit[r - 1] == pytest.approx((ranks < r).mean(), abs=0.015)


def test_the_greedy_rank_model_is_calibrated_on_measured_heads_top_r_accuracy():
    """The synthetic family rescues far more top-1 misses with siblings than Medusa's measured
    heads (RMS error 0.09 over their top-2..5 accuracy); the calibrated model, one exponent
    fitted by least squares, is within 0.02 of all fifteen heads and keeps rank 1 at alpha."""
    from simspec.catalog.tables import packaged_table
    from simspec.engine.acceptance.trees import informed_share_exponent

    doc = packaged_table("sibling_ranks.yaml")
    heads = np.array([row for rows in doc["heads"].values() for row in rows])
    gamma = informed_share_exponent()
    assert 0.0 < gamma < 1.0
    fitted = np.array([top_r_hit(a)[:5] for a in heads[:, 0]])
    synthetic = calibrated_hits(heads[:, 0], 0.0)[:, :5]
    rms = lambda h: float(np.sqrt(((h - heads)[:, 1:] ** 2).mean()))  # noqa: E731
    assert rms(fitted) < 0.02 < 0.08 < rms(synthetic)
    assert np.allclose(fitted[:, 0], heads[:, 0], atol=1e-3)


def test_rank_curves_are_monotone_and_start_at_alpha():
    alpha, h = rank_curves()
    assert np.all(np.diff(h, axis=1) >= 0) and np.all(np.diff(h, axis=0) >= 0)
    assert top_r_hit(0.7)[0] == pytest.approx(0.7, abs=1e-3)


def test_rank_curves_rank_the_targets_token_as_a_sort_would():
    """rank_curves counts the candidates the draft scores higher; sorting them (what it did
    before) gives the same table, bit for bit."""
    from simspec.engine.acceptance import trees

    rng = np.random.default_rng(20241129)
    target = rng.standard_normal((trees._CONTEXTS, trees.CANDIDATES))
    noise = rng.standard_normal((trees._CONTEXTS, trees.CANDIDATES))
    best = np.argmax(target, axis=1)
    rows = []
    for sigma in trees._NOISE:
        order = np.argsort(-(target + sigma * noise), axis=1)[:, : trees.MAX_RANK]
        rows.append(np.cumsum(order == best[:, None], axis=1).mean(axis=0))
    h = np.maximum.accumulate(np.maximum.accumulate(np.array(rows)[::-1], axis=0), axis=1)
    assert np.array_equal(rank_curves()[1], h)


def test_tree_walk_matches_the_expected_accepted_length():
    profile = np.array([0.8, 0.7, 0.6, 0.5])
    rng = np.random.default_rng(0)
    for tree in (chain(4), best_tree(profile, 20, 4), from_paths([[0], [1], [0, 0], [1, 0]])):
        depth = tree.max_depth
        acc = walk(tree.children(), np.tile(profile[:depth], (100_000, 1)), rng)
        assert 1 + acc.mean() == pytest.approx(expected_tau(tree, profile[:depth]), rel=0.01)


@pytest.mark.parametrize("sampled", [False, True])
@pytest.mark.parametrize("dynamic", [False, True])
def test_the_small_batch_walk_is_the_array_walk(monkeypatch, sampled, dynamic):
    """walk() steps through a few sequences one by one (trees._walk_small) and through more as
    arrays: at every count across the switch, the same depths and the same draws consumed."""
    from simspec.engine.acceptance import trees

    mu = np.array([0.6, 0.2, 0.0, -0.3, -0.5])
    shape = trees.TreeShape(40, 8, 5, dynamic)
    children, is_dynamic = trees.tree_plan(shape, trees.expit(mu), mu, sampled)
    for n in (1, 2, 5, trees._SMALL_WALK, trees._SMALL_WALK + 1):
        for seed in range(40):
            alpha = np.random.default_rng(seed).random((n, 5))
            tree_of = trees.bucket_of(alpha[:, 0]) if is_dynamic else None
            one, many = np.random.default_rng(seed), np.random.default_rng(seed)
            small = trees._walk_small(children, alpha, one, tree_of, sampled)
            monkeypatch.setattr(trees, "_SMALL_WALK", 0)
            arrays = walk(children, alpha, many, tree_of, sampled)
            monkeypatch.undo()
            assert small.tolist() == arrays.tolist()
            assert one.random() == many.random()  # the same draws consumed


def test_a_chain_tree_is_the_chain_formula():
    profile = np.array([0.9, 0.8, 0.7])
    assert expected_tau(chain(3), profile) == pytest.approx(expected_tokens_per_step(profile))


# -- trees when sampling: recursive rejection over sibling candidates ----------------------------
@pytest.mark.slow
def test_one_of_r_sibling_candidates_survives_as_the_residual_product_says():
    """P(one of R i.i.d. candidates accepted) = 1 - prod_i (1 - sum min(q, r_i)), with r_1 = p
    and r_{i+1} = norm((r_i - q)+): the formula the sampled sibling table is computed with,
    checked against the exact rule run token by token
    (simspec.engine.acceptance.exact.verify_siblings)."""
    from simspec.engine.acceptance.exact import verify_siblings

    rng = np.random.default_rng(11)
    p, q = rng.dirichlet(np.ones(8)), rng.dirichlet(np.ones(8) * 0.7)
    r, none = p.copy(), 1.0
    for n_cand in (1, 2, 3):
        none *= 1.0 - np.minimum(q, r).sum()
        residual = np.maximum(r - q, 0.0)
        r = residual / residual.sum()
        hits = sum(
            verify_siblings(p, q, rng.choice(8, size=n_cand, p=q), rng)[1] is not None
            for _ in range(20_000)
        )
        assert hits / 20_000 == pytest.approx(1.0 - none, abs=0.012)


def test_sampled_sibling_table_is_monotone_and_starts_at_alpha():
    hit = top_r_hit(np.array([0.3, 0.6, 0.9]), sampled=True)
    assert np.all(np.diff(hit, axis=1) >= 0) and np.all(np.diff(hit, axis=0) >= 0)
    assert hit[:, 0] == pytest.approx([0.3, 0.6, 0.9], abs=1e-3)


def test_sampled_tree_walk_matches_its_expected_length():
    profile = np.array([0.7, 0.6, 0.5])
    tree = best_tree(profile, 12, 4, sampled=True)
    acc = walk(
        tree.children(), np.tile(profile, (100_000, 1)), np.random.default_rng(2), sampled=True
    )
    assert 1 + acc.mean() == pytest.approx(expected_tau(tree, profile, sampled=True), rel=0.01)


@pytest.mark.slow
def test_a_tree_run_at_temperature_one_walks_the_sampled_siblings():
    method = MethodConfig(
        name="eagle2",
        k=5,
        tree="dynamic",
        tree_nodes=30,
        tree_topk=6,
        acceptance=AcceptanceConfig(alpha=0.7),
    )
    wl = WorkloadConfig(
        concurrency=8,
        requests=48,
        lengths_from=None,
        prompt=LengthSpec(mean=64),
        output=LengthSpec(mean=128),
    )
    greedy = simulate(Scenario(method=method, workload=wl)).summary.mean_accept_len
    hot = simulate(Scenario(method=method, workload=wl, temperature=1.0)).summary
    assert 1.0 < hot.mean_accept_len < greedy


def test_a_k_schedule_longer_than_k_is_an_error_naming_the_field():
    method = MethodConfig(
        name="eagle3", k=3, k_schedule=[[1, 4, 4]], acceptance=AcceptanceConfig(alpha=0.7)
    )
    with pytest.raises(InputError, match=r"methods\.eagle3\.k_schedule: K=4 exceeds k=3"):
        simulate(Scenario(method=method, workload=WorkloadConfig(concurrency=2, requests=4)))


def test_a_dynamic_tree_grows_only_from_each_depths_top_k_beams():
    """A dynamic tree's drafter expands its top-k beams at each depth (SGLang's
    organize_draft_results, EAGLE-2's topK_genrate): at alpha 0.9 the 50-node, top-10 tree
    had given children to 11 nodes of one depth (QA)."""
    alpha = np.full(6, 0.9)
    free, beamed = best_tree(alpha, 50, 10), best_tree(alpha, 50, 10, beams=10)

    def expanded(tree) -> int:
        depth, parent = np.array(tree.depth), np.array(tree.parent)
        return max(len(set(parent[depth == d + 1])) for d in range(1, tree.max_depth))

    assert expanded(free) > 10 and expanded(beamed) <= 10
    assert len(beamed.parent) == len(free.parent)  # the same budget, placed within the beams
    assert expected_tau(beamed, alpha) <= expected_tau(free, alpha)


def test_an_unknown_dataset_is_refused_not_read_as_chat():
    """QA: preset_method("eagle3", "GSM8K") returned ShareGPT's acceptance."""
    from simspec.errors import InputError

    with pytest.raises(InputError, match="dataset: unknown dataset 'GSM8K'"):
        preset_method("eagle3", "GSM8K")
    assert preset_method("eagle3", "gsm8k").acceptance.acc_len == "gsm8k"


def test_trtllms_ngram_is_said_to_run_as_vllms_prompt_lookup():
    """QA: its rests-on line read "own ngram acceptance" where simspec replays vLLM's drafter,
    not TensorRT-LLM's shared pattern pool."""
    from simspec.catalog.methods import approximated

    assert "is_public_pool" in approximated("ngram", "trtllm")
    assert approximated("ngram", "vllm") is None and approximated("eagle3", "trtllm") is None


def test_an_engine_that_speculates_one_sequence_at_a_time_says_so_past_batch_one():
    """transformers' assisted generation and gpt-fast's speculative_decode run batch 1 only
    (QA: hf's draft model ran at batch 8 without a word)."""
    from typer.testing import CliRunner

    from simspec.catalog.hardware import load_engine
    from simspec.cli.main import app

    assert load_engine("hf").flag("speculates_at_batch_one")
    assert load_engine("gpt-fast").flag("speculates_at_batch_one")
    assert not load_engine("vllm").flag("speculates_at_batch_one")
    args = ["sweep", "--engine", "hf", "--methods", "draft_model", "--requests", "16"]
    one = CliRunner().invoke(app, [*args, "--batch-sizes", "1"])
    two = CliRunner().invoke(app, [*args, "--batch-sizes", "1,2"])
    assert one.exit_code == two.exit_code == 0
    assert "one sequence at a time" not in one.output
    assert "one sequence at a time" in " ".join(two.output.split())


def test_methods_autoregressive_says_it_drafts_nothing_and_takes_no_acceptance():
    """QA: it printed "default config: k=3" and "none (give --alpha or --tau)" per domain."""
    from typer.testing import CliRunner

    from simspec.cli.main import app

    result = CliRunner().invoke(app, ["methods", "autoregressive"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "drafts nothing (K = 0)" in text and "no acceptance applies" in text
    assert "k=3" not in text and "--alpha" not in text


def test_a_band_that_ends_before_it_starts_is_refused_as_such_before_where_it_starts():
    """QA: [[30, 1, 3]] was refused for starting at 30 (vLLM's start-at-1 rule), not for
    ending before it starts."""
    from simspec.config import check_schedule

    with pytest.raises(ValueError, match=r"band \[30, 1\]: need 1 <= start_bs <= end_bs"):
        check_schedule([[30, 1, 3]], 64, from_one=True)
    with pytest.raises(ValueError, match="the first band starts at 2"):
        check_schedule([[2, 5, 3]], 64, from_one=True)
