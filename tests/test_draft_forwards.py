"""What a drafter's forwards cost as the engines run them (QA, stop 57): a draft model's first
forward over the tokens the last verify yielded, vLLM's static trees drafted level by level
over every draft so far, and the trees each engine can draft at all."""

from __future__ import annotations

import numpy as np
import pytest

from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.methods import unused_field
from simspec.catalog.models import load_model
from simspec.config import AcceptanceConfig, MethodConfig
from simspec.engine.acceptance.trees import from_paths, uneven_level
from simspec.engine.costmodel import BatchShape, RooflineCostModel
from simspec.engine.speculators import DraftStep, build_speculator
from simspec.errors import InputError

TARGET = "llama-3.1-8b"
ALPHA = AcceptanceConfig(alpha=0.6)


def _spec(engine: str, **fields):
    cost = RooflineCostModel(load_gpu("h100_sxm"), load_profile("h100_sxm"), load_engine(engine))
    cfg = MethodConfig(acceptance=ALPHA, **fields)
    return build_speculator(cfg, load_model(TARGET), cost, load_engine(engine)), cost


def _step(b: int, last: int, k: int) -> DraftStep:
    kv = np.full(b, 1000, dtype=np.int64)
    return DraftStep(kv, np.full(b, last, dtype=np.int64), float(kv.sum()), k)


def test_a_draft_models_first_forward_takes_the_tokens_the_verify_yielded():
    """SGLang's STANDALONE worker (its EAGLE worker) feeds the draft every token the last
    verify step accepted before drafting on (QA: all K forwards were priced at one token a
    sequence); vLLM V1's padded drafter batch feeds the whole verify width, the rejected
    tokens as padding (prepare_inputs_padded)."""
    b = 64
    draft = load_model("llama-3.2-1b")
    for engine, fed in (("sglang", 4), ("vllm", 5)):
        spec, cost = _spec(engine, name="draft_model", k=4, draft_model="llama-3.2-1b")
        got = spec.draft_cost(_step(b, 4, 4)).total_s
        over = spec.draft_overhead_s
        first = cost.forward(draft, BatchShape.uniform(b, fed, b * 1000.0, b), overhead_s=over)
        later = cost.forward(
            draft, BatchShape.uniform(b, 1, b * 1000.0 + b * 2.0, b), overhead_s=over
        )
        assert got == pytest.approx(first.total_s + 3 * later.total_s, rel=1e-12), engine
    sglang, _ = _spec("sglang", name="draft_model", k=4, draft_model="llama-3.2-1b")
    assert sglang.draft_cost(_step(b, 4, 4)).total_s > sglang.draft_cost(_step(b, 1, 4)).total_s
    vllm, _ = _spec("vllm", name="draft_model", k=4, draft_model="llama-3.2-1b")
    # padded: what the verify kept does not change the first forward
    assert vllm.draft_cost(_step(b, 4, 4)).total_s == vllm.draft_cost(_step(b, 1, 4)).total_s


def test_vllm_pads_the_first_eagle_forward_to_the_verify_width():
    """The fast path gives StepCost's float with the padded first step too."""
    vllm, _ = _spec("vllm", name="eagle3", k=3)
    sglang, _ = _spec("sglang", name="eagle3", k=3)
    assert vllm.padded_first(3) == 4 and sglang.padded_first(3) == 0
    for spec in (vllm, sglang):
        step = _step(64, 2, 3)
        assert spec.draft_s(step) == pytest.approx(spec.draft_cost(step).total_s, rel=1e-12)
    assert vllm.draft_s(_step(64, 2, 3)) == vllm.draft_s(_step(64, 4, 3))


def _uniform_tree(width: int, depth: int) -> list[list[int]]:
    paths, level = [], [[]]
    for _ in range(depth):
        level = [p + [r] for p in level for r in range(width)]
        paths += level
    return paths


def test_vllm_drafts_a_static_tree_level_by_level_over_every_draft_so_far():
    """EagleProposer.propose_tree runs each level over all drafts so far
    (cu_drafts_per_level) and takes logits at the newest level; SGLang feeds the nodes it
    expands. The fast path gives the same float as the StepCost one."""
    paths = _uniform_tree(2, 3)  # 2, 4, 8 nodes by depth
    vllm, _ = _spec("vllm", name="eagle1", tree="static", tree_paths=paths)
    sglang, _ = _spec("sglang", name="eagle1", tree="static", tree_paths=paths)
    assert vllm._tree_rows((2, 4)) == ((2, 2), (6, 4))
    assert sglang._tree_rows((2, 4)) == ((2, 2), (4, 4))
    for spec in (vllm, sglang):
        step = _step(32, 2, spec.k)
        assert spec.draft_s(step) == pytest.approx(spec.draft_cost(step).total_s, rel=1e-12)
    # the same tree costs vLLM more to draft than SGLang's level widths would
    step = _step(32, 2, vllm.k)
    cumulative = vllm.draft_cost(step).total_s
    vllm._rows_by_widths = {(2, 4): ((2, 2), (4, 4))}
    assert cumulative > vllm.draft_cost(step).total_s


def test_vllm_refuses_a_tree_whose_levels_branch_unevenly():
    """vLLM gives every node of a level one child count (drafts at the level // drafts above):
    [(0,), (1,), (0, 0)] gives the level 1 // 2 = 0 children (QA: simspec walked it)."""
    assert uneven_level(from_paths([[0], [1], [0, 0]])) == 1
    assert uneven_level(from_paths(_uniform_tree(2, 3))) is None
    assert uneven_level(from_paths([[0], [0, 0], [0, 1]])) is None
    with pytest.raises(InputError, match="levels branch evenly") as err:
        _spec("vllm", name="eagle1", tree="static", tree_paths=[[0], [1], [0, 0]])
    assert err.value.field == "methods.eagle1.tree_paths"
    _spec("sglang", name="eagle1", tree="static", tree_paths=[[0], [1], [0, 0]])


def test_an_explicit_tree_takes_no_tree_schedule():
    """QA: a 10-node band over a 3-node explicit tree verified 11 tokens of the 3 walked."""
    with pytest.raises(InputError, match="one node budget") as err:
        _spec(
            "sglang",
            name="eagle1",
            tree="static",
            tree_paths=[[0], [1], [0, 0]],
            tree_schedule=[(1, 8, 10), (9, 512, 2)],
        )
    assert err.value.field == "methods.eagle1.tree_schedule"


def test_redrafter_refuses_an_explicit_tree():
    """ReDrafter's tree is its beams: tree_paths set only its depth (QA)."""
    cfg = MethodConfig(name="redrafter", tree_paths=[[0], [1], [0, 0]])
    field, why = unused_field(cfg) or ("", "")
    assert field == "tree_paths" and "beam_width" in why


def test_vllm_runs_the_prompt_chunks_in_the_decodes_first_draft_forward():
    """EagleProposer.propose runs one forward over every token the step scheduled: a step
    with prompt chunks reads the draft's weights once (QA: a 1B draft model paid ~1.4 ms a
    mixed step twice). SGLang's forward_draft_extend is a pass of its own."""
    prompt = BatchShape.of(np.array([2048]), np.array([0]), 1, prefill=True)
    first = _step(64, 4, 3)  # 64 decoding sequences
    for method in ({"name": "eagle3"}, {"name": "draft_model", "draft_model": "llama-3.2-1b"}):
        vllm, _ = _spec("vllm", k=3, **method)
        sglang, _ = _spec("sglang", k=3, **method)
        apart = vllm.prompt_s(prompt)
        merged = vllm.prompt_s(prompt, first)
        assert 0 < merged < apart, method
        assert sglang.prompt_s(prompt, first) == sglang.prompt_s(prompt)


def test_eagle3_fuses_the_targets_features_on_its_first_pass_only_and_reads_a_2h_qkv():
    """EAGLE-3's fc (3h -> h) runs on the target's features, the first pass only; later steps
    feed the head's own hidden state (vLLM llama_eagle3.py combine_hidden_states; SGLang
    applies fc only to a 3h-wide hidden state). Its layer's QKV reads [embedding; hidden],
    2h wide (qkv_input_size). EAGLE-1 fuses [hidden; embedding] with its fc at every step
    (QA, stop 57: the fc had been priced at every EAGLE-3 step, the QKV at h)."""
    b, h = 64, load_model(TARGET).hidden_size
    spec, cost = _spec("sglang", name="eagle3", k=3)
    head, over = spec.head, spec.draft_overhead_s
    qkv = head.q_dim + 2 * head.kv_dim  # tp 1
    wide = cost.gemm_time(b * 2, 2 * h, qkv) - cost.gemm_time(b * 2, h, qkv)
    fc = cost.gemm_time(b * 2, 3 * h, h)
    first = cost.forward(
        head, BatchShape.uniform(b, 2, b * 1000.0, b), overhead_s=over, extra_gemm_s=fc + wide
    )
    wide1 = cost.gemm_time(b, 2 * h, qkv) - cost.gemm_time(b, h, qkv)
    later = cost.forward(
        head, BatchShape.uniform(b, 1, b * 1000.0 + b * 1.5, b), overhead_s=over, extra_gemm_s=wide1
    )
    want = first.total_s + 2 * later.total_s
    assert spec.draft_cost(_step(b, 2, 3)).total_s == pytest.approx(want, rel=1e-12)
    assert spec.draft_s(_step(b, 2, 3)) == pytest.approx(want, rel=1e-12)
    # its weights hold the wider QKV too: beyond EAGLE-1's, a third h of fc input, h x qkv
    # more QKV and its own draft vocabulary's LM head
    eagle1, _ = _spec("sglang", name="eagle1", k=3)
    more = h * h + h * qkv + head.vocab_size * h
    assert spec.extra_weight_bytes() - eagle1.extra_weight_bytes() == spec._params_bytes(more)


def test_eagle3_heads_take_their_published_shape_where_it_is_not_a_layer_of_the_target():
    """SpecForge trained the MoE targets' EAGLE-3 heads wider than the target's dense layer and
    with grouped-query attention where the target has MLA (simspec/data/eagle3_heads.yaml, each
    entry citing its config): Llama-4 Scout's MLP is 32,768 wide, not the target's 16,384
    (LMSYS lists the head at 0.8B); Kimi-K2's attends with 64 heads and 64 KV heads of 128, not
    MLA (QA). A dense target's head stays one layer of it (Llama-3.1-8B: 14,336)."""
    from simspec.catalog.draft_heads import HEAD_FIELDS, eagle3_head_note
    from simspec.catalog.tables import packaged_table

    def head(target: str, name: str = "eagle3", tp: int = 8):
        cost = RooflineCostModel(load_gpu("h200"), load_profile("h200"), load_engine("sglang"), tp)
        cfg = MethodConfig(name=name, acceptance=ALPHA)
        return build_speculator(cfg, load_model(target), cost, load_engine("sglang")).head

    scout = head("llama-4-scout")
    assert (scout.intermediate_size, scout.num_attention_heads, scout.num_key_value_heads) == (
        32768,
        40,
        8,
    )
    assert scout.hidden_size == 5120 and scout.vocab_size == 32000 and not scout.is_moe
    kimi = head("kimi-k2")
    assert not kimi.is_mla and kimi.num_key_value_heads == 64 and kimi.head_dim == 128
    assert kimi.intermediate_size == 18432
    assert head("llama-3.1-8b", tp=1).intermediate_size == 14336
    assert head("kimi-k2", name="eagle1").is_mla  # EAGLE-1/2 heads: no published config
    for target, entry in packaged_table("eagle3_heads.yaml").items():
        model = load_model(target)
        assert all(int(entry[f]) > 0 for f in HEAD_FIELDS) and "SpecForge" in entry["source"]
        assert entry["num_attention_heads"] % entry["num_key_value_heads"] == 0, target
        assert model.num_experts or model.is_mla, target  # only where one_layer is not the head
        assert "published" in (eagle3_head_note("eagle3", target) or "")
    assert eagle3_head_note("eagle3", "llama-3.1-8b") is None
    assert eagle3_head_note("mtp", "kimi-k2") is None


def test_a_published_eagle3_head_that_tp_cannot_split_is_refused():
    """DeepSeek-V3's SpecForge head has 56 attention heads: the engines run it at the target's
    tensor parallelism and refuse 16 GPUs (QA: priced at 3.5 heads a GPU)."""
    cost = RooflineCostModel(load_gpu("h200"), load_profile("h200"), load_engine("sglang"), 16)
    cfg = MethodConfig(name="eagle3", acceptance=ALPHA)
    with pytest.raises(
        InputError, match=r"^tp: the published eagle3 head of deepseek-v3 .* 56 attent"
    ):
        build_speculator(cfg, load_model("deepseek-v3"), cost, load_engine("sglang"))


def test_methods_all_leaves_out_an_eagle3_head_that_tp_cannot_split():
    """--methods all offers what a user could deploy: DeepSeek-V3's published EAGLE-3 head
    (56 heads) is left out at tp 16 with the reason, kept at tp 8 and under DP attention
    where each rank's attention spans tp / dp GPUs."""
    from simspec.catalog.methods import left_out_of_all

    why = left_out_of_all("eagle3", "deepseek-v3", engine="sglang", tp=16)
    assert why and "56 attention heads, which 16 GPUs cannot split" in why
    assert left_out_of_all("eagle3", "deepseek-v3", engine="sglang", tp=8) is None
    assert left_out_of_all("eagle3", "deepseek-v3", engine="sglang", dp=16, tp=16) is None
    assert left_out_of_all("eagle3", "llama-3.1-8b", tp=16) is None  # one layer of the target


def test_a_draft_model_the_engines_would_not_run_as_priced_is_refused_by_name(tmp_path):
    """A draft must share the target's tokenizer, not just its vocabulary size (vicuna-68m's
    32,000 LLaMA tokens are not Mixtral's 32,000), and serve the deployment's context: vLLM
    drafts nothing for a batch once a sequence passes the draft's (PR #24662), which simspec
    does not model (QA: both ran at 1.6-1.7x). --methods all says why it leaves them out."""
    from simspec.catalog.methods import left_out_of_all
    from simspec.config import Scenario
    from simspec.engine.build import setup_replica

    def setup(model: str, draft: str, **kw):
        method = {"name": "draft_model", "draft_model": draft, "acceptance": {"alpha": 0.6}}
        return setup_replica(Scenario(model=model, method=method, **kw))

    with pytest.raises(InputError, match=r"^methods\.draft_model: .* do not share a tokenizer"):
        setup("mixtral-8x7b", "vicuna-68m", tp=2)
    with pytest.raises(InputError, match=r"^methods\.draft_model: draft vicuna-68m serves 2,048"):
        setup("llama-2-7b", "vicuna-68m")
    setup("llama-2-7b", "vicuna-68m", scheduler={"max_model_len": 2048})
    why = left_out_of_all("draft_model", "llama-2-7b")
    assert why and "--max-model-len 2048" in why
    assert left_out_of_all("draft_model", "llama-3.1-8b") is None


def test_a_quantised_draft_checkpoint_runs_at_its_own_precision(tmp_path):
    """vLLM loads a draft with its own quantization_config: an FP8 Llama-3.1-8B draft reads
    half the bytes of a bf16 one, per step and in memory (QA: priced in bf16, to the digit)."""
    import json

    from simspec.config import Scenario
    from simspec.engine.build import setup_replica

    shape = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
    }  # fmt: skip
    fp8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    (tmp_path / "bf16.json").write_text(json.dumps(shape))
    (tmp_path / "fp8.json").write_text(json.dumps({**shape, "quantization_config": fp8}))
    spent = {}
    for name in ("bf16", "fp8"):
        method = {
            "name": "draft_model",
            "draft_model": str(tmp_path / f"{name}.json"),
            "acceptance": {"alpha": 0.8},
        }
        sc = Scenario(model="llama-3.1-70b", tp=4, method=method, scheduler={"max_model_len": 8192})
        spec = setup_replica(sc).speculator
        spent[name] = (spec.draft_cost(_step(16, 4, 4)).gemm_s, spec.extra_weight_bytes())
    assert spent["fp8"][0] < 0.8 * spent["bf16"][0]  # memory-bound GEMMs at half the bytes
    assert spent["fp8"][1] < 0.6 * spent["bf16"][1]


def test_methods_all_reads_a_grids_tp_axis_and_the_served_context():
    """--methods all checks every tp a grid runs (QA: a grid's tp 16 stopped the sweep on
    DeepSeek-V3's eagle3 head) and the context the deployment is started with (QA: a draft
    model was left out at --max-model-len 2048, which is what its note asked for)."""
    from simspec.cli.method_flags import all_methods, scenario_context, scenario_tp

    data = {"model": "deepseek-v3", "tp": 8, "grid": {"tp": [8, 16]}}
    assert scenario_tp(data) == [8, 8, 16]
    kept, left = all_methods(["deepseek-v3"], None, "sglang", 1, scenario_tp(data))
    assert "eagle3" not in kept and "16 GPUs cannot split" in left["eagle3"]
    short = {"scheduler": {"max_model_len": 2048}}
    assert scenario_context(short) == 2048 and scenario_context({}) is None
    assert "draft_model" in all_methods(["llama-2-7b"], None, None, 1, 1, 2048)[0]
    assert "draft_model" in all_methods(["llama-2-7b"], None, None, 1, 1, None)[1]


def test_a_quantised_draft_needs_a_kernel_the_engine_has_and_is_named_plainly(tmp_path):
    """An FP8 draft on an A100 under TensorRT-LLM (no weight-only FP8 kernel) is refused as the
    target's precision would be (QA: it ran at 1.70x); the tokenizer refusal names what each
    side uses (QA: it read "vicuna-68m (not Mistral's own ... not LLaMA's)")."""
    import json

    from simspec.config import Scenario
    from simspec.engine.build import setup_replica

    shape = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
        "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"},
    }  # fmt: skip
    (tmp_path / "fp8.json").write_text(json.dumps(shape))
    method = {
        "name": "draft_model",
        "draft_model": str(tmp_path / "fp8.json"),
        "acceptance": {"alpha": 0.7},
    }
    sc = Scenario(
        model="llama-3.1-70b", gpu="a100_80gb", tp=4, engine="trtllm", method=method,
        scheduler={"max_model_len": 8192},
    )  # fmt: skip
    with pytest.raises(InputError, match=r"^methods\.draft_model: "):
        setup_replica(sc)
    pair = {"name": "draft_model", "draft_model": "vicuna-68m", "acceptance": {"alpha": 0.6}}
    with pytest.raises(InputError) as refused:
        setup_replica(Scenario(model="mixtral-8x7b", tp=2, method=pair))
    assert "(llama tokenizer)" in str(refused.value) and "(Mistral's own" in str(refused.value)


def test_analytic_names_its_own_flag_when_the_draft_cannot_serve_the_context():
    """analytic sizes its server from --context: a draft model that cannot serve it is refused
    naming --context, not a --max-model-len analytic has not (QA)."""
    from simspec.config import Deployment
    from simspec.studies.analytic import batch1_costs

    deploy = Deployment(model="llama-2-7b")
    with pytest.raises(InputError, match=r"^--context: draft vicuna-68m serves 2,048 positions"):
        batch1_costs(deploy, "draft_model", 3, 4000)
    assert batch1_costs(deploy, "draft_model", 3, 2000).draft_s[3] > 0
