"""Consecutive tokens of one sequence share experts: a verify pass of a model whose router was
measured to reuse its previous token's experts reads fewer distinct experts than as many
independent tokens, a decode step (one token a sequence) reads the same, and a model with no
measurement routes independently (simspec/data/expert_locality.yaml)."""

from __future__ import annotations

import pytest

from simspec.catalog.expert_locality import adjacent_expert_reuse, locality_note, reuse_origin
from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.models import load_model
from simspec.catalog.tables import packaged_table
from simspec.engine.costmodel import BatchShape, RooflineCostModel
from simspec.engine.costmodel.moe import fresh_tokens, routed_experts_time
from simspec.studies.model_facts import model_facts


def test_fresh_tokens_counts_each_sequences_first_token_whole_and_the_rest_in_part():
    assert fresh_tokens(8, 8, 0.45) == 8  # a decode step: one token a sequence
    assert fresh_tokens(32, 8, 0.0) == 32  # no measured reuse: every token routes afresh
    assert fresh_tokens(32, 8, 0.45) == pytest.approx(8 + 24 * 0.55)
    assert fresh_tokens(32, 8, 1.0) == 8  # full reuse: a sequence's tokens are one token


def test_every_entry_is_measured_or_taken_from_a_measured_sibling_of_the_same_router():
    table = packaged_table("expert_locality.yaml")
    assert table
    for model_id, entry in table.items():
        model = load_model(model_id)
        assert model.is_moe
        assert 0.0 < entry["adjacent_expert_reuse"] < 1.0
        assert len(entry["source"]) > 40
        if entry["basis"] == "transferred":
            origin = table[entry["from"]]
            assert origin["basis"] == "measured"
            assert entry["adjacent_expert_reuse"] == origin["adjacent_expert_reuse"]
            sibling = load_model(entry["from"])
            same = ("num_experts", "num_experts_per_tok", "shared_expert_intermediate_size")
            assert all(getattr(model, f) == getattr(sibling, f) for f in same)
        else:
            assert entry["basis"] == "measured"
    assert adjacent_expert_reuse("qwen3-30b-a3b") == 0.45
    assert adjacent_expert_reuse("glm-4.5-air") == 0.0  # none packaged


def test_a_transferred_share_says_where_it_came_from_and_a_measured_one_says_nothing():
    assert reuse_origin("qwen3-235b-a22b") == "qwen3-30b-a3b"
    note = locality_note("qwen3-235b-a22b")
    assert "transferred from qwen3-30b-a3b" in note and "45 %" in note
    assert locality_note("qwen3-30b-a3b") == "" and reuse_origin("qwen3-30b-a3b") is None
    assert locality_note("mixtral-8x7b") == ""
    facts = dict(model_facts("qwen3-235b-a22b"))
    assert any("transferred from qwen3-30b-a3b" in v for v in facts.values())


def _cost(engine: str, tp: int = 1) -> RooflineCostModel:
    return RooflineCostModel(load_gpu("h200"), load_profile("h200"), load_engine(engine), tp=tp)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_verify_pass_reads_fewer_experts_where_the_router_reuses_them(engine):
    m = load_model("qwen3-30b-a3b")
    cost = _cost(engine)
    verify = cost.forward(m, BatchShape.uniform(8, 4, 8 * 1000.0, 32))
    # the same 32 tokens as 32 sequences' decode tokens route independently
    decode32 = cost.forward(m, BatchShape.uniform(32, 1, 32 * 1000.0, 32))
    assert verify.gemm_s < decode32.gemm_s
    # and cost what 8 + 24 x (1 - 0.413) = 22.1 independent tokens' expert reads do (the
    # measured 0.45 beyond the 8/128 an independent draw repeats), every (token, expert) pair
    # still multiplied
    kernel = cost.moe_kernel(cost.experts_precision_of(m), m)
    excess = (0.45 - 8 / 128) / (1 - 8 / 128)
    expected = routed_experts_time(cost.ops, m, 32, 1, None, kernel, 8 + 24 * (1 - excess))
    assert expected < routed_experts_time(cost.ops, m, 32, 1, None, kernel)


def test_a_decode_step_and_an_unmeasured_model_are_priced_as_before():
    cost = _cost("sglang", tp=4)
    m = load_model("qwen3-30b-a3b")
    kernel = cost.moe_kernel(cost.experts_precision_of(m), m)
    # one token a sequence: fresh = tokens, the independent price
    assert routed_experts_time(cost.ops, m, 8, 1, None, kernel, fresh_tokens(8, 8, 0.45)) == (
        routed_experts_time(cost.ops, m, 8, 1, None, kernel)
    )
    # a model without a measured reuse: the verify's experts as independent tokens'
    big = load_model("glm-4.5-air")
    a = cost.forward(big, BatchShape.uniform(8, 4, 8 * 1000.0, 32))
    b = cost.forward(big, BatchShape.uniform(32, 1, 32 * 1000.0, 32))
    assert a.gemm_s == b.gemm_s


def test_only_the_reuse_beyond_chance_is_taken_off():
    """A measured share counts the k/E an independent draw repeats too, and the cost model's
    independent draws repeat at that rate already: a router at chance reads as many experts as
    an unmeasured one, and only the excess is taken off (Mixtral, k/E = 0.25, measured 0.37)."""
    from simspec.engine.costmodel.moe import excess_reuse

    assert excess_reuse(0.25, 2, 8) == 0.0 and excess_reuse(0.1, 2, 8) == 0.0
    assert excess_reuse(0.37, 2, 8) == pytest.approx(0.16)
    assert excess_reuse(1.0, 8, 128) == 1.0
    cost = _cost("vllm")
    m = load_model("mixtral-8x7b")
    verify = cost.forward(m, BatchShape.uniform(8, 4, 8 * 1000.0, 32))
    decode32 = cost.forward(m, BatchShape.uniform(32, 1, 32 * 1000.0, 32))
    assert verify.gemm_s < decode32.gemm_s
