"""α traces: the closed form at batch 1, trace replay, τ fitting, heterogeneity."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

from simspec.catalog.traces import load_trace, replay_tau
from simspec.config import AcceptanceConfig, MethodConfig, Scenario, WorkloadConfig
from simspec.engine.acceptance.exact import expected_tokens_per_step
from simspec.engine.acceptance.inversion import (
    alpha_for_tau,
    alpha_profile,
    expected_tokens,
    mean_matching_logits,
)
from simspec.engine.acceptance.samplers import ParametricAcceptance
from simspec.engine.simulation import simulate


def run(method, requests=60, concurrency=1, **wl):
    if wl.get("lengths_from") is None:  # fixed lengths unless a dataset gives them
        wl = {"lengths_from": None, "prompt": {"mean": 128}, "output": {"mean": 400}, **wl}
    wl = {"measure": "whole", **wl}  # every request once: the acceptance's own statistics
    return simulate(
        Scenario(
            method=method,
            workload=WorkloadConfig(concurrency=concurrency, requests=requests, **wl),
            seed=7,
        )
    )


@pytest.mark.slow
@pytest.mark.parametrize(("alpha", "k"), [(0.6, 3), (0.8, 3), (0.8, 5)])
def test_batch1_iid_alpha_matches_closed_form_within_2_percent(alpha, k):
    method = MethodConfig(name="eagle3", k=k, acceptance=AcceptanceConfig(alpha=alpha))
    # outputs of 10k tokens make the truncated last step of each request negligible
    result = run(method, requests=8, output={"mean": 10000})
    formula = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert result.summary.mean_accept_len == pytest.approx(formula, rel=0.02)


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["sharegpt", "gsm8k"])
@pytest.mark.parametrize("method", ["eagle3", "ngram"])
@pytest.mark.parametrize("k", [1, 3, 5])
def test_trace_replay_reproduces_the_tau_the_trace_implies(dataset, method, k, shared):
    trace = load_trace(dataset, method)
    spec = MethodConfig(
        name=method,
        k=k,
        acceptance=AcceptanceConfig(acc_len=dataset, acc_len_method=method),
    )
    result = run(
        spec,
        requests=trace.num_requests,
        concurrency=16,
        lengths_from=dataset,
        lengths_from_method=method,
    )
    simulated = result.summary.mean_accept_len
    # the first token comes from prefill, so speculative steps start at output position 1
    assert simulated == pytest.approx(replay_tau(trace, k, start=1), rel=1e-9)
    cases = pd.read_csv(shared / "validation" / "cases.csv")
    tag = {"sharegpt": "sgpt", "gsm8k": "gsm"}[dataset]
    row = cases[cases.case_id == f"trace-{tag}-{'e3' if method == 'eagle3' else 'ng'}-k{k}"]
    assert simulated == pytest.approx(float(row.measured_value.iloc[0]), rel=0.015)


@pytest.mark.parametrize("spread", [0.0, 0.8])
def test_a_tau_within_the_searchs_margin_of_an_end_is_that_end(spread):
    """QA: tau = 1 + 1e-10 or k + 1 - 1e-8 raised scipy's 'f(a) and f(b) must have different
    signs' instead of giving alpha 0 or 1."""
    assert alpha_for_tau(1 + 1e-10, 4, spread) == 0.0
    assert alpha_for_tau(5 - 1e-9, 4, spread) == 1.0
    assert 0.0 < alpha_for_tau(3.0, 4, spread) < 1.0


def test_alpha_for_tau_inverts_the_closed_form():
    for tau, k in [(2.254, 3), (1.5, 1), (3.2, 5)]:
        a = alpha_for_tau(tau, k)
        assert expected_tokens_per_step(np.full(k, a)) == pytest.approx(tau, rel=1e-9)


def test_mean_matching_keeps_the_mean_alpha_under_spread():
    rng = np.random.default_rng(1)
    alpha = np.array([0.8, 0.7, 0.6])
    mu = mean_matching_logits(alpha, 1.5)
    draws = 1 / (1 + np.exp(-(mu[None, :] + 1.5 * rng.standard_normal((200_000, 1)))))
    assert draws.mean(axis=0) == pytest.approx(alpha, abs=0.005)


def test_per_step_expectation_under_spread_matches_monte_carlo():
    cfg = AcceptanceConfig(alpha=[0.8, 0.7, 0.6], spread=1.0)
    n = 200_000
    sampler = ParametricAcceptance(cfg, 3, n, np.random.default_rng(3))
    for rid in range(n):
        sampler.start(rid, -1)
    counts = sampler.accept_counts(np.arange(n), np.zeros(n, dtype=np.int64), 3)
    assert counts.mean() + 1 == pytest.approx(expected_tokens(alpha_profile(cfg, 3), 1.0), rel=0.01)


def test_burstiness_correlates_successive_steps():
    cfg = AcceptanceConfig(alpha=0.6, burst_scale=2.0, burstiness=0.9)
    n = 20_000
    sampler = ParametricAcceptance(cfg, 3, n, np.random.default_rng(5))
    for rid in range(n):
        sampler.start(rid, -1)
    rids = np.arange(n)
    a = sampler.accept_counts(rids, rids * 0, 3)
    b = sampler.accept_counts(rids, rids * 0, 3)
    assert np.corrcoef(a, b)[0, 1] > 0.2


def test_bursts_keep_the_mean_alpha_and_a_stationary_unit_variance():
    """The burst is an AR(1) of unit variance (ρ x + sqrt(1 - ρ²) ε): after many steps its
    variance is still 1 and the mean α per position is still the configured one, with spread
    and burst together matched by sigma = hypot(spread, burst_scale). QA: dropping the
    sqrt(1 - ρ²) or matching μ with the spread alone survived every test."""
    cfg = AcceptanceConfig(alpha=[0.8, 0.6], spread=0.8, burst_scale=1.2, burstiness=0.9)
    n = 40_000
    sampler = ParametricAcceptance(cfg, 2, n, np.random.default_rng(11))
    for rid in range(n):
        sampler.start(rid, -1)
    rids = np.arange(n)
    for _ in range(30):
        alphas = sampler.alphas(rids, 2)
    assert sampler.burst.var() == pytest.approx(1.0, abs=0.03)
    assert alphas.mean(axis=0) == pytest.approx([0.8, 0.6], abs=0.006)


def test_one_sequences_alphas_are_the_batch_formulas_floats_and_draws():
    """ParametricAcceptance.alphas of one sequence (a batch-1 run's step, on its floats)
    gives the batch formula's α, draws the same noise and leaves the same burst, with bursts
    and without."""
    for cfg in (
        AcceptanceConfig(alpha=[0.8, 0.6, 0.5], spread=0.8, burst_scale=1.2, burstiness=0.9),
        AcceptanceConfig(alpha=0.7, spread=0.5),
    ):
        sampler = ParametricAcceptance(cfg, 3, 4, np.random.default_rng(21))
        for rid in range(4):
            sampler.start(rid, -1)
        twin = np.random.default_rng(21)
        for _ in range(8):  # the twin replays start's draws, then each step's
            twin.standard_normal()
        burst = sampler.burst.copy()
        for step in range(50):
            rids = np.array([step % 4])
            if cfg.burst_scale > 0.0:
                noise = twin.standard_normal(1)
                burst[rids] = sampler.rho * burst[rids] + math.sqrt(1 - sampler.rho**2) * noise
            offset = sampler.request_offset[rids] + sampler.burst_scale * burst[rids]
            want = expit(sampler.mu[None, :3] + offset[:, None])
            got = sampler.alphas(rids, 3)
            assert got.shape == (1, 3) and np.array_equal(got, want)
            assert np.array_equal(sampler.burst, burst)


@pytest.mark.parametrize(
    "bad",
    [
        {"alpha": 1.5},
        {"alpha": -0.1},
        {"alpha": [0.5, 2]},
        {"tau": 2.0},
        {"alpha": 0.5, "tau": 2.0, "tau_k": 3},
        {"acc_len": "sharegpt"},
        {"tau": 5.0, "tau_k": 3},
    ],
)
def test_invalid_acceptance_configs_are_rejected(bad):
    with pytest.raises(ValueError):
        AcceptanceConfig(**bad)


def test_a_tau_the_decayed_chain_cannot_reach_is_refused_not_clamped():
    """Medusa's deeper heads accept 0.688 times the one before (speculators/heads.py), so a
    chain of 4 (α 1, .688, .473, .326) yields at most 1 + 1 + .688 + .326 + .106 = 3.12 tokens:
    a τ of 3.6 is refused, naming the method's acceptance, instead of running at 3.12 as if it
    were 3.6."""
    from simspec.errors import InputError

    most = 1 + np.cumprod([0.688**d for d in range(4)]).sum()  # 3.120
    assert alpha_for_tau(most, 4, decay=0.688) == 1.0
    with pytest.raises(ValueError, match="at most 3.120"):
        alpha_for_tau(3.6, 4, decay=0.688)
    medusa = MethodConfig(name="medusa1", k=4, tree="chain", acceptance={"tau": 3.6, "tau_k": 4})
    with pytest.raises(InputError, match=r"methods\.medusa1\.acceptance: tau 3.6 is more than"):
        run(medusa, requests=4)


def test_a_tree_of_an_uninformed_draft_yields_one_token_and_a_tau_inverts_above_it():
    """The calibrated rank model has no floor: a draft with no idea of the target's choice
    rescues nothing with siblings (the synthetic family alone ranked the target's token at
    random among 64, so a 10-wide tree yielded ~1.16 tokens at alpha 0, and tau 1.1 was
    refused). A tau below one token is still refused, naming the tree."""
    from simspec.engine.acceptance.inversion import alpha_for_tree_tau
    from simspec.engine.acceptance.trees import TreeShape

    shape = TreeShape(50, 10, 6, True)
    assert alpha_for_tree_tau(1.0, shape) == pytest.approx(0.0, abs=1e-3)
    assert 0 < alpha_for_tree_tau(1.1, shape) < alpha_for_tree_tau(1.5, shape) < 1
    with pytest.raises(ValueError, match="is less than a tree of 50 nodes"):
        alpha_for_tree_tau(0.9, shape)


def test_a_tree_tau_of_depth_plus_one_is_every_draft_accepted_and_past_it_the_bound_is_said():
    """QA: tau 5 at depth 4 (every draft accepted, as a chain's k + 1 is taken) was refused,
    and the error named no bound."""
    from simspec.engine.acceptance.inversion import alpha_for_tree_tau
    from simspec.engine.acceptance.trees import TreeShape

    shape = TreeShape(63, 4, 4)
    assert alpha_for_tree_tau(5.0, shape, spread=0.3) == 1.0
    with pytest.raises(ValueError, match=r"can yield \(at most 5.000, every draft accepted\)"):
        alpha_for_tree_tau(5.2, shape)


def test_a_scalar_alpha_given_is_the_same_at_every_position():
    """--alpha's help: "a scalar = same at every position". Medusa's per-head decay shapes a
    τ's inversion, not a rate the user gave; a config's own depth_decay still applies."""
    assert np.allclose(alpha_profile(AcceptanceConfig(alpha=0.7), 3, decay=0.688), 0.7)
    decaying = AcceptanceConfig(alpha=0.8, depth_decay=0.5)
    assert np.allclose(alpha_profile(decaying, 3, decay=0.688), [0.8, 0.4, 0.2])
    assert (
        alpha_profile(AcceptanceConfig(tau=2.0, tau_k=3), 3, decay=0.688)[2]
        < (alpha_profile(AcceptanceConfig(tau=2.0, tau_k=3), 3)[2])
    )


def test_a_given_tau_or_alpha_list_drafted_deeper_than_measured_says_so():
    """--tau 2.5 --tau-k 3 --k 6 extrapolates positions 4-6 from a constant α: the sweep says
    so as it does for a preset's sourced depth; a scalar α is a rate at every position."""
    from simspec.studies.sweep import extrapolated_beyond, extrapolation_notes

    tau = MethodConfig(name="eagle3", k=6, acceptance={"tau": 2.5, "tau_k": 3})
    assert extrapolated_beyond(tau) == 3
    (note,) = extrapolation_notes([tau])
    assert "eagle3 at K=6: acceptance extrapolated beyond k=3" in note
    listed = MethodConfig(name="eagle3", k=4, acceptance={"alpha": [0.8, 0.7]})
    assert extrapolated_beyond(listed) == 2
    assert extrapolated_beyond(MethodConfig(name="eagle3", k=6, acceptance={"alpha": 0.7})) is None
    at_k = MethodConfig(name="eagle3", k=3, acceptance={"tau": 2.5, "tau_k": 3})
    assert extrapolated_beyond(at_k) is None


def test_an_acc_len_trace_captured_at_a_short_k_says_so_when_run_deeper(tmp_path):
    """A trace captured at K=3 holds no accept length past 4: at K=7 its replay shows no
    acceptance past depth 3, and the sweep says so (QA: it ran K=7 at K=3's τ without a
    word); run at its own depth nothing is said."""
    import json

    from simspec.studies.sweep import extrapolated_beyond, extrapolation_notes

    path = tmp_path / "capped.jsonl"
    rec = {"prompt_len": 10, "output_len": 8, "acc_len": {"eagle3": [4, 1, 2, 4]}}
    path.write_text(json.dumps(rec) + "\n")
    acc = {"acc_len": str(path), "acc_len_method": "eagle3"}
    deep = MethodConfig(name="eagle3", k=7, acceptance=acc)
    assert extrapolated_beyond(deep) == 3
    (note,) = extrapolation_notes([deep])
    assert "beyond k=3" in note and "holds no accept length past 4" in note
    assert extrapolated_beyond(MethodConfig(name="eagle3", k=3, acceptance=acc)) is None


def test_a_profile_reads_extrapolated_only_where_the_run_drafts_past_it():
    """MTP's preset is measured to k=3 and extrapolated beyond: a K = 1 run had still read
    "(extrapolated)" on its provenance line (QA); K = 4 does."""
    from simspec.catalog.methods import preset_method
    from simspec.studies.provenance import _qualifier

    shallow, deep = (preset_method("mtp", "sharegpt", k, "deepseek-v3") for k in (1, 4))
    assert "extrapolated" not in _qualifier(shallow.acceptance, 1)
    assert _qualifier(deep.acceptance, 4) == " (extrapolated)"
