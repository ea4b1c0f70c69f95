"""The kernels an engine launches per decoder layer beyond the priced set
(simspec/data/layer_kernels.yaml): the catalog loads, a dense Llama layer gets none, DeepSeek-V3
gets the count read from each engine's code, matched by features and not by name, and every
layer of a draft step (an MTP module, an EAGLE head) pays them as the target's layers do."""

from __future__ import annotations

import pytest

from simspec import Scenario
from simspec.catalog import layer_kernels as lk
from simspec.catalog.models import load_model
from simspec.engine.build import build_cost_model
from simspec.engine.costmodel import BatchShape


def _cost(model: str, engine: str, gpu: str = "h200", tp: int = 8, ep: int = 1):
    sc = Scenario.model_validate(
        {
            "model": model,
            "gpu": gpu,
            "tp": tp,
            "ep": ep,
            "engine": engine,
            "method": {"name": "autoregressive", "k": 0},
        }
    )
    return build_cost_model(sc, load_model(model))


def _without_extras(monkeypatch, cost):
    monkeypatch.setattr(cost, "extra_kernels", lambda model: lk.NO_EXTRA)
    cost._models.clear()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_entry_loads_with_a_part_widths_and_a_source(engine):
    entries = lk.kernel_entries(engine)
    assert entries
    for e in entries:
        assert e.part in lk.PARTS and e.source.strip() and e.count != 0
        assert all(w in lk.WIDTHS for w in e.elements)


def test_an_engine_the_file_does_not_list_adds_nothing():
    assert lk.kernel_entries("hf") == ()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("gpu", ["h200", "a100_80gb"])
def test_dense_llama_gets_no_extra_kernel(engine, gpu):
    cost = _cost("llama-3.1-8b", engine, gpu=gpu, tp=2)
    assert cost.extra_kernels(load_model("llama-3.1-8b")).none


def test_deepseek_v3_gets_the_counts_read_from_each_engine():
    m = load_model("deepseek-v3")
    sglang = _cost("deepseek-v3", "sglang").extra_kernels(m)
    # latent norms 1 (two streams), absorbed-bmm quant 6, bmm output copy 1, block-FP8 quant
    # 3, minus the two add-RMSNorms merged into the all-reduces
    assert (sglang.layer, sglang.dense, sglang.moe) == (9, 2, 0)
    vllm = _cost("deepseek-v3", "vllm").extra_kernels(m)
    # q_a / kv_a norms, query cat, o_proj quant; shared-expert quant and add
    assert (vllm.layer, vllm.dense, vllm.moe) == (4, 0, 2)
    # under expert parallelism SGLang runs the shared expert apart: its quant and add return
    assert _cost("deepseek-v3", "sglang", ep=8).extra_kernels(m).moe == 3


def test_features_come_from_the_shape_not_the_name():
    m = load_model("deepseek-v3")
    renamed = m.model_copy(update={"id": "my-latent-moe"})
    cost = _cost("deepseek-v3", "sglang")
    cost.quantize_like_target(renamed)  # the checkpoint's precision follows the model's id
    assert cost.extra_kernels(renamed) == cost.extra_kernels(m)
    qwen = load_model("qwen3-30b-a3b")
    features = lk.model_features(qwen, tp=1, ep=1, gpu="a100_80gb", w8a8=False, experts_w8a8=False)
    assert "qk_norm" in features and "mla" not in features
    assert lk.extra_kernels("vllm", features, qwen, 1).layer == 2
    glm = load_model("glm-4.6")
    without = glm.model_copy(update={"qk_norm": False})  # GLM-4.5-Air: use_qk_norm false
    args = dict(tp=8, ep=1, gpu="h200", w8a8=False, experts_w8a8=False)
    assert "qk_norm" in lk.model_features(glm, **args)
    assert "qk_norm" not in lk.model_features(without, **args)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_elementwise_term_charges_each_extra_kernel_its_floor(engine, monkeypatch):
    m = load_model("deepseek-v3")
    cost = _cost("deepseek-v3", engine)
    extra = cost.extra_kernels(m)
    batch = BatchShape.uniform(1, 1, 1500.0, 1)
    with_extra = cost.forward(m, batch).elementwise_s
    _without_extras(monkeypatch, cost)
    plain = cost.forward(m, batch).elementwise_s
    n_moe = m.moe_layers_in()
    n_dense = m.num_hidden_layers - n_moe
    kernels = m.num_hidden_layers * extra.layer + n_dense * extra.dense + n_moe * extra.moe
    nbytes = (
        m.num_hidden_layers * extra.layer_bytes
        + n_dense * extra.dense_bytes
        + n_moe * extra.moe_bytes
    )
    ops = cost.ops
    expected = kernels * ops.elementwise_latency + nbytes / ops.elementwise_rate
    assert with_extra - plain == pytest.approx(expected, rel=1e-9)


def test_each_layer_of_a_draft_step_pays_the_extra_kernels(monkeypatch):
    target = load_model("deepseek-v3")
    cost = _cost("deepseek-v3", "sglang")
    mtp = target.one_layer(moe=True, vocab_size=target.vocab_size, name="deepseek-v3-mtp")
    cost.quantize_like_target(mtp)
    head = target.one_layer(moe=False, vocab_size=target.vocab_size, name="deepseek-v3-eagle")
    batch = BatchShape.uniform(4, 1, 4 * 1500.0, 4)
    ops = cost.ops
    # the MTP module is a target layer (MLA, MoE, block FP8): the same 9 kernels
    assert cost.extra_kernels(mtp) == cost.extra_kernels(target)
    # an EAGLE head of the model is a bf16 MLA layer: its latent norms only, less the fusion
    assert cost.extra_kernels(head).layer == 1 - 2
    with_extra = {m.id: cost.forward(m, batch).elementwise_s for m in (mtp, head)}
    extras = {m.id: cost.extra_kernels(m) for m in (mtp, head)}
    _without_extras(monkeypatch, cost)
    for m in (mtp, head):
        e = extras[m.id]
        paid = with_extra[m.id] - cost.forward(m, batch).elementwise_s
        count = e.layer + (e.moe if m.is_moe else e.dense)
        nbytes = 4 * (e.layer_bytes + (e.moe_bytes if m.is_moe else e.dense_bytes))
        expected = count * ops.elementwise_latency + nbytes / ops.elementwise_rate
        assert count and paid == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    ("gpu", "tp", "fused"),
    [("b300", 8, True), ("gb300", 4, True), ("b300", 16, False), ("gb200", 8, False)],
)
def test_sglang_fuses_the_all_reduce_on_one_node_only(gpu, tp, fused):
    """SGLang turns FlashInfer all-reduce fusion on only for one node (nnodes == 1), on SM90
    and SM100-family GPUs (Blackwell Ultra included); a GB200/GB300 compute tray is 4 GPUs
    (QA: TP16 over two B300 servers and GB200 TP8 over two trays were fused)."""
    from simspec.catalog.layer_kernels import model_features
    from simspec.catalog.models import load_model

    m = load_model("qwen3-30b-a3b")
    have = model_features(m, tp=tp, ep=1, gpu=gpu, w8a8=False, experts_w8a8=False)
    assert ("one_host" in have) is fused and "sglang_allreduce_fusion_gpu" in have
