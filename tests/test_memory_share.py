"""SGLang's default mem_fraction_static, derived from its reserve as server_args.py does."""

from __future__ import annotations

import pytest

from simspec import Scenario
from simspec.catalog.hardware import load_engine, load_gpu
from simspec.config import MethodConfig, SchedulerConfig
from simspec.engine.build import setup_replica
from simspec.engine.memory_share import piecewise_sizes, sglang_static_share

H100 = load_gpu("h100_sxm").memory_bytes  # 81,559 MiB: nvidia-smi memory.total
# what the share is taken of: CUDA's total (torch.cuda.mem_get_info), 81,090 MiB
H100_CUDA = load_gpu("h100_sxm").budget_bytes


def test_the_h100_share_is_the_wheels_arithmetic():
    """0.5.10 _handle_gpu_memory_settings on an 80 GB H100 at tp 1, chunk 8192, graphs to 256:
    512 + 8192 * 1.5 + 256 * 2 + 1 / 8 * 1024 = 13,440 MiB, + 58 piecewise sizes * 8 for plain
    decoding (speculation turns piecewise graphs off and adds 4,096 for EAGLE, 6,144 for a draft
    model), all over the 10 GiB floor."""
    assert piecewise_sizes(8192) == 58
    share = dict(tp=1, pp=1, chunk=8192, graph_bs=256, mla=False)
    assert sglang_static_share(H100, method="autoregressive", piecewise=True, **share) == round(
        (81559 - 13440 - 58 * 8) / 81559, 3
    )
    assert sglang_static_share(H100, method="eagle3", piecewise=False, **share) == round(
        (81559 - 13440 - 4096) / 81559, 3
    )
    assert sglang_static_share(H100, method="draft_model", piecewise=False, **share) == round(
        (81559 - 13440 - 6144) / 81559, 3
    )
    ngram = sglang_static_share(H100, method="ngram", piecewise=False, **share)
    assert ngram == round((81559 - 13440) / 81559, 3)


def test_dp_attention_and_small_gpus():
    """DP attention pads its graphs (+ bs * dp * 3, and * 1.5 more past 300); a GPU under 60 GiB
    has no 10 GiB floor."""
    dp8 = sglang_static_share(
        load_gpu("h200").memory_bytes, tp=8, pp=1, chunk=8192, graph_bs=512, method="mtp",
        mla=True, dp_attention=8, piecewise=False,
    )  # fmt: skip
    reserved = 512 + 8192 * 1.5 + 512 * 2 + 1024 + 512 * 8 * 3 + 512 * 8 * 1.5 + 4096
    assert dp8 == round((143770 - reserved) / 143770, 3)
    a100_40 = load_gpu("a100_40gb").memory_bytes / 2**20
    small = sglang_static_share(
        load_gpu("a100_40gb").memory_bytes, tp=1, pp=1, chunk=4096, graph_bs=32,
        method="autoregressive", mla=False, piecewise=True,
    )  # fmt: skip
    reserved = 512 + 4096 * 1.5 + 32 * 2 + 128 + piecewise_sizes(4096) * 8
    assert small == round((a100_40 - reserved) / a100_40, 3)


def test_an_sglang_run_takes_the_derived_share_and_no_activation_reserve():
    """The KV pool is the share less the weights; a share the deployment gives is kept."""
    sc = Scenario(
        engine="sglang", method=MethodConfig(name="eagle3", k=3, acceptance={"alpha": 0.7})
    )
    memory = setup_replica(sc).memory
    assert memory.usable_bytes == pytest.approx(H100_CUDA * 0.785)
    assert memory.activation_bytes == 0.0
    given = setup_replica(
        sc.model_copy(update={"scheduler": SchedulerConfig(gpu_memory_utilization=0.9)})
    )
    assert given.memory.usable_bytes == pytest.approx(H100_CUDA * 0.9)
    vllm = setup_replica(sc.model_copy(update={"engine": "vllm"})).memory
    assert vllm.activation_bytes > 0 and vllm.usable_bytes == pytest.approx(
        H100_CUDA * load_engine("vllm")["gpu_memory_utilization"]
    )


def test_sglang_sizes_its_pool_from_the_target_and_places_the_draft_outside_the_share():
    """profile_max_num_token counts the target's KV alone and the draft worker reuses its pool
    size: the draft's weights and KV take none of the share (vLLM's plan subtracts both); a
    draft that does not fit in the memory left outside the share is refused, naming it."""
    from simspec.catalog.models import load_model
    from simspec.errors import ScenarioError

    draft = MethodConfig(name="draft_model", draft_model="llama-3.1-8b", acceptance={"alpha": 0.7})
    sc = Scenario(engine="sglang", model="llama-3.1-70b", tp=4, method=draft)
    m = setup_replica(sc).memory
    target = load_model("llama-3.1-70b")
    assert m.kv_bytes_per_token == target.kv_bytes_per_token_per_gpu(4)
    assert m.num_blocks == int((m.usable_bytes - m.weight_bytes) // m.kv_bytes_per_token)
    plain = setup_replica(sc.model_copy(update={"method": MethodConfig(name="autoregressive")}))
    assert plain.memory.kv_bytes_per_token == m.kv_bytes_per_token
    vllm = setup_replica(sc.model_copy(update={"engine": "vllm"})).memory
    assert vllm.kv_bytes_per_token > target.kv_bytes_per_token_per_gpu(4)
    full = sc.model_copy(update={"scheduler": SchedulerConfig(gpu_memory_utilization=0.95)})
    with pytest.raises(ScenarioError, match="^scheduler.gpu_memory_utilization: SGLang places"):
        setup_replica(full)


def test_the_fewest_gpus_use_the_share_and_chunk_the_deployment_runs_at():
    """On a 40 GB A100 SGLang chunks prefill at 4096 (its memory tier), which sets its share;
    a share the deployment gives stands in the refusal's arithmetic too."""
    from simspec.catalog.models import load_model
    from simspec.engine.kv_cache import min_gpus
    from simspec.errors import ScenarioError

    a100 = load_gpu("a100_40gb")
    assert min_gpus(a100, load_engine("sglang"), load_model("qwen3-14b")) == 1
    setup_replica(Scenario(engine="sglang", model="qwen3-14b", gpu="a100_40gb"))  # fits
    tight = Scenario(
        engine="sglang",
        model="llama-3.1-8b",
        scheduler=SchedulerConfig(gpu_memory_utilization=0.15),
    )
    # the share it gave is named, with what it leaves and the GPUs needed at it (QA)
    with pytest.raises(
        ScenarioError,
        match=r"--mem-fraction-static 0.15 leaves 11.9 GiB of the 79.2 GiB \(at that share it "
        r"needs 2 h100_sxm GPUs, tp=2\): raise --mem-fraction-static or tp",
    ):
        setup_replica(tight)


def test_the_gpus_a_model_needs_are_sized_at_the_precision_it_runs():
    """The explorer's model panel at fp8: Llama-3.1-70B fits one H100 (67.7 GiB of fp8
    weights), where its bf16 checkpoint needs two."""
    from simspec.studies.model_facts import model_facts

    def needed(precision):
        facts = dict(model_facts("llama-3.1-70b", "h100_sxm", "vllm", weight_precision=precision))
        return facts["GPUs needed"]

    assert needed(None).startswith("2 x h100_sxm")
    assert needed("fp8").startswith(
        "1 x h100_sxm at the least (tp=1: 67.7 GiB of weights per GPU in fp8"
    )


def test_sglang_lowers_a_multimodal_checkpoints_share_for_its_vision_tower():
    """adjust_mem_fraction_for_vlm (0.5.10): Kimi-K2.5's MoonViT, 27 layers of 1152, is
    27 * 1152^2 / (24 * 1024^2) = 1.424 ViT-L/14s: x 0.95 * (1 - 0.0424) = 0.910 (QA: its
    share was left at the text model's, 13 % more KV than SGLang holds). Llama-4's classes run
    text-only by default (mm_disabled_models), and vLLM's share is its constant."""
    from simspec.catalog.models import load_model
    from simspec.engine.memory_share import (
        engine_share,
        sglang_static_share,
        sglang_vision_factor,
    )

    kimi = load_model("kimi-k2.5")
    assert kimi.vision_tower == (27, 1152)
    assert sglang_vision_factor(kimi) == pytest.approx(
        0.95 * (1 - 0.1 * (27 * 1152**2 / (24 * 1024**2) - 1))
    )
    text = kimi.model_copy(update={"vision_tower": None})
    h200 = load_gpu("h200")
    sglang, vllm = load_engine("sglang"), load_engine("vllm")
    args = dict(tp=16, chunk=8192)
    # a multimodal checkpoint captures no piecewise graphs either (_handle_piecewise_cuda_graph)
    bare = sglang_static_share(
        h200.memory_bytes, tp=16, pp=1, chunk=8192, method="autoregressive", mla=True,
        graph_bs=int(sglang.graph_limits(16, h200)[1]), piecewise=False,
    )  # fmt: skip
    assert engine_share(sglang, h200, kimi, **args) == pytest.approx(
        sglang_vision_factor(kimi) * bare
    )
    assert engine_share(sglang, h200, text, **args) < bare  # its 1.5 GiB for MLA graphs
    assert engine_share(vllm, h200, kimi, **args) == engine_share(vllm, h200, text, **args)
    scout = load_model("llama-4-scout").model_copy(update={"vision_tower": (34, 1408)})
    assert sglang_vision_factor(scout) == 1.0


def test_a_config_reads_its_vision_tower_as_sglang_does_and_refuses_a_bad_one():
    from simspec.catalog.hf_config import _vision_tower
    from simspec.errors import InputError

    assert _vision_tower(None) is None
    assert _vision_tower({}) == (24, 1024)  # the HF vision config classes' ViT-L defaults
    assert _vision_tower({"num_hidden_layers": 32, "hidden_size": 1280}) == (32, 1280)
    with pytest.raises(InputError, match=r"model.vision_config.hidden_size.*got -1"):
        _vision_tower({"hidden_size": -1})


def test_sglang_v2_budgets_the_draft_inside_its_share():
    """SGLang PR #23862 (0.5.11 line) drops the flat 4/6 GiB reserve for speculation and sizes
    the draft's KV pool inside mem_fraction_static, and PR #28855 its weights too: sglang-v2
    runs a Qwen3-0.6B draft beside Qwen3-32B on eight H100s, which sglang (0.5.10: the draft
    outside the share) refuses, and holds more KV under EAGLE-3 than 0.5.10 did."""
    share = dict(tp=1, pp=1, chunk=8192, graph_bs=256, mla=False, piecewise=False)
    inside = sglang_static_share(H100, method="eagle3", spec_reserve=False, **share)
    assert inside == round((81559 - 13440) / 81559, 3)
    assert load_engine("sglang").flag("spec_reserve")
    assert not load_engine("sglang-v2").flag("spec_reserve")
    assert not load_engine("sglang-v2").flag("draft_outside_share")

    def plan(engine: str, method: MethodConfig, model: str, tp: int):
        return setup_replica(Scenario(model=model, tp=tp, engine=engine, method=method)).memory

    pair = MethodConfig(name="draft_model", draft_model="qwen3-0.6b", acceptance={"alpha": 0.6})
    with pytest.raises(Exception, match="outside mem_fraction_static"):
        plan("sglang", pair, "qwen3-32b", 8)
    inside = plan("sglang-v2", pair, "qwen3-32b", 8)
    assert inside.draft_bytes > 0 and inside.num_blocks > 0
    eagle = MethodConfig(name="eagle3", acceptance={"alpha": 0.6})
    assert (
        plan("sglang-v2", eagle, "llama-3.1-8b", 1).num_blocks
        > plan("sglang", eagle, "llama-3.1-8b", 1).num_blocks
    )


def test_sglang_reserves_piecewise_graphs_only_where_it_captures_them():
    """_handle_piecewise_cuda_graph (0.5.10) turns piecewise CUDA graphs off for the
    architectures of piecewise_cuda_graph_disabled_model_archs, an all-to-all MoE backend
    (simspec's SGLang ep > 1: DeepEP) and a disaggregated instance, before
    _handle_gpu_memory_settings reserves for them (QA: DeepSeek-V3.2 on 8 x H200 held 0.886
    for 0.897, ~21k tokens fewer)."""
    from simspec.catalog.models import load_model
    from simspec.engine.memory_share import engine_share

    h200, sglang = load_gpu("h200"), load_engine("sglang")
    mib = h200.memory_bytes / 2**20

    def share(model: str, **kw) -> float:
        return engine_share(sglang, h200, load_model(model), tp=8, chunk=8192, **kw)

    # DeepSeek-V3.2's reserve: 512 + 8192 x 1.5 + 512 x 2 + 8 x 1024 / 8, no 1.5 GiB of graphs
    assert share("deepseek-v3.2") == round((mib - (512 + 8192 * 1.5 + 512 * 2 + 1024)) / mib, 3)
    v3 = share("deepseek-v3")
    assert v3 < share("deepseek-v3.2")
    assert share("deepseek-v3", ep=8) == share("deepseek-v3.2")
    assert share("deepseek-v3", pd_mode="decode") == share("deepseek-v3.2")
    assert share("qwen3-next-80b-a3b") > share("qwen3-30b-a3b")


def test_an_sglang_prefill_instance_reserves_no_piecewise_graphs():
    """A prefill server's disaggregation_mode turns them off as a decode server's does
    (_handle_piecewise_cuda_graph; review: the prefill instance kept the reserve)."""
    from simspec.config import Scenario
    from simspec.engine.build import setup_replica

    sc = Scenario(model="llama-3.1-8b", engine="sglang", disaggregation_mode="decode")
    prefill = setup_replica(sc.model_copy(update={"disaggregation_mode": "null"}), "prefill")
    colocated = setup_replica(sc.model_copy(update={"disaggregation_mode": "null"}))
    assert prefill.memory.usable_bytes == setup_replica(sc).memory.usable_bytes
    assert prefill.memory.usable_bytes > colocated.memory.usable_bytes
