"""What a step costs on a node beyond its kernels: the engines' all-reduce (custom kernel below
8 MiB, NCCL above, graph or eager), host work that grows with the batch and hides under an
overlap scheduler, CUDA graphs up to the engine's capture limit, MTP draft steps."""

import numpy as np
import pytest

from simspec.catalog.hardware import load_engine, load_gpu, load_profile
from simspec.catalog.models import load_model
from simspec.engine.costmodel import BatchShape, RooflineCostModel
from simspec.engine.costmodel.collectives import Curve, engine_collectives
from simspec.engine.costmodel.host import HostModel, capture_sizes


def cost(engine="vllm", gpu="h200", tp=8, **kw):
    return RooflineCostModel(load_gpu(gpu), load_profile(gpu), load_engine(engine), tp, **kw)


def test_curve_is_flat_below_its_first_point_and_linear_past_its_last():
    c = Curve.of([[1e3, 1e-5], [1e6, 2e-5], [2e6, 3e-5]])
    assert c.time(10) == pytest.approx(1e-5)
    assert c.time(1e3) == pytest.approx(1e-5) and c.time(2e6) == pytest.approx(3e-5)
    assert 1e-5 < c.time(3e4) < 2e-5
    # past the last point: the last segment's 1e6 bytes per 1e-5 s
    assert c.time(4e6) == pytest.approx(3e-5 + 2e-5)


def test_custom_allreduce_below_8_mib_is_faster_in_a_graph_and_nccl_takes_over_above():
    vllm = engine_collectives("h200", 8, "vllm")
    assert vllm is not None
    decode = 7168 * 2 * 8  # DeepSeek-V3 hidden states of 8 tokens
    assert vllm.allreduce_time(decode, graphed=True) < 8e-6  # measured ~5 us
    assert vllm.allreduce_time(decode, graphed=False) > 2 * vllm.allreduce_time(decode)
    big = 64 * 2**20
    assert vllm.allreduce_time(big) == vllm.nccl_allreduce.time(big)
    nccl_only = engine_collectives("h200", 8, "")
    assert nccl_only is not None and nccl_only.allreduce_time(decode) > 15e-6
    # a GPU or GPU count the tables do not cover keeps the ring formula
    assert engine_collectives("a100_40gb", 8, "vllm") is None
    assert engine_collectives("h200", 6, "vllm") is None
    assert engine_collectives("h200", 1, "vllm") is None


def test_the_measured_allreduce_replaces_the_ring_in_a_forward():
    model, b = load_model("llama-3.1-70b"), BatchShape.uniform(4, 1, 4000.0, 4)
    measured = cost(gpu="h100_sxm", tp=4).forward(model, b).communication_s
    ring = cost(gpu="a100_40gb", tp=4).forward(model, b).communication_s
    # 160 decode all-reduces at ~5 us (custom, graphed) against ~30 us each on the ring
    assert measured < 0.5 * ring


def test_a100_80gb_reads_the_measured_a100_sxm_tables_not_the_ring():
    """aiconfigurator-core 0.12.0's A100-SXM4-80GB tables (vLLM 0.14.0, SGLang 0.5.10,
    TRT-LLM 1.0.0, NCCL 2.27.3): vLLM's graphed custom all-reduce of a few tokens' hidden
    states at TP8 takes ~6 us, eagerly ~44 us, where the ring formula said ~47 us for both."""
    decode = 4096 * 2 * 8
    for engine in ("vllm", "sglang", "trtllm"):
        measured = engine_collectives("a100_80gb", 8, engine)
        assert measured is not None, engine
        assert 4e-6 < measured.allreduce_time(decode, graphed=True) < 10e-6, engine
    vllm = engine_collectives("a100_80gb", 8, "vllm")
    assert vllm is not None and 35e-6 < vllm.allreduce_time(decode, graphed=False) < 55e-6
    # NCCL past the custom kernel's 8 MiB: nccl-tests 2.27.3 on the same node
    big = 64 * 2**20
    assert vllm.allreduce_time(big) == vllm.nccl_allreduce.time(big)


@pytest.mark.parametrize(
    ("gpu", "tps"), [("b300", (2, 4, 8)), ("gb200", (2, 4)), ("gb300", (2, 4))]
)
def test_the_blackwell_systems_read_their_measured_tables_where_they_cover_the_gpus(gpu, tps):
    """aiconfigurator-core 0.12.0's B300/GB200/GB300 tables (vLLM 0.24.0, SGLang 0.5.14,
    TRT-LLM 1.3.0rc20, NCCL 2.29.2): a graphed custom all-reduce of a few tokens' hidden states
    takes a few us where the ring formula (Vidur's eager NCCL latency) charged ~30 us (QA);
    GB200's and GB300's NCCL tables stop at one tray's 4 GPUs, past which NCCL takes the
    HGX sibling's measured curve (the same NVLink 5 fabric and NCCL release)."""
    decode = 8192 * 2 * 8
    for tp in tps:
        for engine in ("vllm", "sglang", "trtllm"):
            measured = engine_collectives(gpu, tp, engine)
            assert measured is not None, (engine, tp)
            assert measured.allreduce_time(decode, graphed=True) < 12e-6, (engine, tp)
    if 8 not in tps:
        sibling = {"gb200": "b200", "gb300": "b300"}[gpu]
        at8, theirs = engine_collectives(gpu, 8, "vllm"), engine_collectives(sibling, 8, "")
        assert at8 is not None and at8.custom_graph is None  # no vLLM kernel timed at 8 here
        assert at8.allreduce_time(decode) == theirs.allreduce_time(decode)


def test_host_time_grows_with_the_batch_and_overlap_shows_only_what_outlasts_the_gpu():
    vllm = HostModel.of(load_engine("vllm"), tp=1)
    assert vllm.exposed(64, 0.01) == pytest.approx(vllm.fixed_s + 64 * vllm.per_seq_s)
    assert vllm.exposed(256, 0.0) > vllm.exposed(1, 0.0)
    sglang = HostModel.of(load_engine("sglang"), tp=1)
    assert sglang.exposed(64, 0.05) == 0.0  # hidden behind a 50 ms forward
    host = sglang.fixed_s + 64 * sglang.per_seq_s
    assert sglang.exposed(64, 1e-4) == pytest.approx(host - 1e-4)
    spec = HostModel.of(load_engine("sglang"), tp=1, speculative=True)  # EAGLE: overlap off
    assert spec.exposed(64, 0.05) == pytest.approx(host)
    fixed = HostModel.of(load_engine("sglang"), tp=1, step_overhead_s=2e-3)
    assert fixed.exposed(64, 0.05) == 2e-3


def test_vllm_pads_to_the_next_capture_size_and_runs_eager_above_512_tokens():
    sizes = capture_sizes(512)
    assert sizes[:5] == (1, 2, 4, 8, 16) and sizes[-2:] == (496, 512) and 248 in sizes
    vllm = HostModel.of(load_engine("vllm"), tp=8)
    assert [vllm.padded(t) for t in (3, 9, 250, 257, 512)] == [4, 16, 256, 272, 512]
    # a verify batch counts batch x (K + 1) tokens against the limit
    assert vllm.graphed(BatchShape.uniform(128, 4, 1e5, 512))
    assert not vllm.graphed(BatchShape.uniform(129, 4, 1e5, 516))
    # piecewise graphs take mixed batches too
    assert vllm.graphed(BatchShape.of(np.array([1, 1, 200]), np.array([9, 9, 0]), 3))


def test_vllm_v0_graphs_decode_batches_alone_up_to_256_sequences():
    """QA: V0 inherited V1's piecewise graphs of mixed batches up to 512 tokens; its
    _use_captured_graph takes decode-only batches of at most 256 sequences."""
    v0 = HostModel.of(load_engine("vllm-v0"), tp=8)
    assert v0.graphed(BatchShape.uniform(256, 1, 1e5, 256))
    assert not v0.graphed(BatchShape.uniform(257, 1, 1e5, 257))
    assert not v0.graphed(BatchShape.of(np.array([1, 1, 200]), np.array([9, 9, 0]), 3))


def test_sglang_graphs_decode_up_to_cuda_graph_max_bs_and_never_an_extend_batch():
    sglang = HostModel.of(load_engine("sglang"), tp=8)
    assert sglang.graphed(BatchShape.uniform(512, 4, 1e5, 2048))  # verify: 512 requests
    assert not sglang.graphed(BatchShape.uniform(513, 1, 1e5, 513))
    assert not HostModel.of(load_engine("sglang"), tp=2).graphed(BatchShape.uniform(300, 1, 0, 300))
    assert not sglang.graphed(BatchShape.of(np.array([1, 64]), np.array([9, 0]), 2))


def test_an_eager_forward_above_the_limit_pays_launches_and_the_eager_allreduce():
    model = load_model("llama-3.1-8b")
    cm = cost(engine="vllm", gpu="h100_sxm", tp=8)
    inside = cm.forward(model, BatchShape.uniform(512, 1, 512 * 100.0, 512))
    outside = cm.forward(model, BatchShape.uniform(513, 1, 513 * 100.0, 513))
    assert outside.communication_s > 1.2 * inside.communication_s  # 4 MiB: eager vs graph
    gpu = outside.total_s - outside.overhead_s
    launches = model.num_hidden_layers * load_engine("vllm")["layer_launch_s"]
    assert outside.total_s >= max(gpu, launches) - 1e-12


def test_mtp_reuses_its_one_module_and_pays_host_time_per_draft_step():
    """K draft steps of DeepSeek-V3's single MTP module: one module's weights, K passes, each
    with its own host time (vLLM num_speculative_tokens > num_nextn_predict_layers reuses
    layer 0; SGLang NextN runs speculative_num_steps passes of its one layer)."""
    from simspec.config import MethodConfig
    from simspec.engine.speculators import SPECULATORS
    from simspec.engine.speculators.base import DraftStep

    target, engine = load_model("deepseek-v3"), load_engine("sglang")
    assert target.num_nextn_predict_layers == 1
    cm = cost(engine="sglang")
    specs = {
        k: SPECULATORS["mtp"](MethodConfig(name="mtp", k=k), target, cm, engine) for k in (1, 3)
    }
    assert specs[1].extra_weight_bytes() == specs[3].extra_weight_bytes()
    kv = np.full(8, 1000)
    step = {
        k: specs[k].draft_cost(DraftStep(kv, np.full(8, 2), float(kv.sum()), k)) for k in (1, 3)
    }
    assert step[1].overhead_s == pytest.approx(engine["draft_step_overhead_s"])
    assert step[3].overhead_s == pytest.approx(3 * engine["draft_step_overhead_s"])
    assert step[3].gemm_s > 2 * step[1].gemm_s


def test_a_group_wider_than_a_server_is_said_to_be_priced_at_its_interconnect():
    """TP 16 on H100s spans two 8-GPU servers: their collectives cross the network, which
    simspec does not price (QA: TP16 came out faster than 8 x H200, silently)."""
    from simspec.catalog.hardware import load_gpu
    from simspec.catalog.servers import cross_node_note

    assert cross_node_note(load_gpu("h100_sxm"), 8) is None
    assert "2 servers of 8" in cross_node_note(load_gpu("h100_sxm"), 16)
    assert cross_node_note(load_gpu("gb200"), 64) is None  # one NVL72 domain
    assert "lower bound" in cross_node_note(load_gpu("h200"), 8, ep=16)


def test_a_fully_connected_board_gives_a_collective_only_the_links_to_its_peers():
    """MI300X: 7 Infinity Fabric links of 64 GB/s a direction, one to each peer (gpus.yaml
    peer_links): a pair has one link, four GPUs three each, eight all seven (QA: every group
    was priced at all seven, a TP2 all-reduce 7x too fast); NVSwitch gives any group all."""
    from simspec.catalog.hardware import load_gpu, load_profile
    from simspec.engine.costmodel.roofline import OperatorTimes

    mi = load_gpu("mi300x")
    assert mi.link_bytes_s(2) == pytest.approx(64e9) and mi.link_bytes_s(8) == 448e9
    h100 = load_gpu("h100_sxm")
    assert h100.link_bytes_s(2) == h100.interconnect_bandwidth_bytes_s

    def ring(tp: int) -> float:
        return OperatorTimes(mi, load_profile("mi300x"), tp).allreduce_time(128 * 2**20)

    # 2 (n-1)/n of the message over (n-1)/7 of the links: 2 x 7/n of it over all seven, so
    # a pair takes 4x as long as eight GPUs (less their common latency)
    assert ring(2) / ring(8) == pytest.approx(4.0, rel=0.05)


def test_gb300_at_tp8_keeps_trtllms_measured_allreduce_where_its_nccl_table_stops_at_4():
    """GB300's NCCL table stops at one tray's 4 GPUs, TRT-LLM's own AllReduce op (which
    switches to NCCL itself) was measured to 16: that curve times tp 8 and 16 (QA: the ring
    formula's transferred 29.7 us latency made GB300 TP8 a third slower than B300 TP8)."""
    measured = engine_collectives("gb300", 8, "trtllm")
    assert measured is not None
    assert measured.allreduce_time(16384) == pytest.approx(4.408e-6, rel=0.01)
    assert measured.allreduce_time(64 * 2**20) < 2e-4  # its own curve, every size
    # NCCL at a count GB300's table lacks: B300's measured curve (QA: the ring formula's
    # transferred 29.7 us latency, GB200 TP8 communicating 5.6 ms a step to B200's 1.0)
    b300_nccl = engine_collectives("b300", 8, "")
    assert measured.allgather_time(2**20) == b300_nccl.allgather_time(2**20)
    gb300, b300 = cost("trtllm", "gb300"), cost("trtllm", "b300")
    assert gb300.allreduce_time(16384) < 1.2 * b300.allreduce_time(16384)
    assert gb300.allgather_time(2**20) == pytest.approx(cost("vllm", "gb300").allgather_time(2**20))


@pytest.mark.parametrize("gpu", ["h100_sxm", "h200", "b200", "a100_80gb"])
def test_a_group_over_two_servers_all_reduces_no_faster_than_nccl_within_one(gpu):
    """TP 16 on 8-GPU servers: the engines' custom all-reduce is off across nodes (vLLM and
    SGLang CustomAllreduce: 'disabled because this process group spans across nodes'), and an
    all-reduce over two servers reduces within each first: at every size it takes at least
    NCCL's measured time over one server's 8 GPUs (QA: TP16 all-reduced 64 MiB on B200s in
    208 us against 279 us measured for TP8)."""
    nccl8 = engine_collectives(gpu, 8, "")
    assert nccl8 is not None
    for tp in (16, 32):
        wide = cost("vllm", gpu, tp)
        for nbytes in (16384, 2**20, 8 * 2**20, 64 * 2**20, 512 * 2**20):
            assert wide.allreduce_time(nbytes) >= nccl8.allreduce_time(nbytes), (tp, nbytes)
            assert wide.allgather_time(nbytes) >= nccl8.allgather_time(nbytes), (tp, nbytes)
    # inside one NVL72 domain no server boundary is crossed: no floor
    assert cost("vllm", "gb200", 16).ops.floor is None


def test_gb300_past_its_custom_kernels_switch_is_no_cheaper_than_just_below_it():
    """GB300 under SGLang: the custom kernel is timed at 8 and 16 GPUs up to its 8 MiB switch,
    NCCL only at 2 and 4; past the switch the ring formula stands in for NCCL, floored at the
    kernel's time at the switch (QA: 8 MiB cost 50.5 us, one byte less 56.7)."""
    for tp in (8, 16):
        ops = cost("sglang", "gb300", tp).ops
        times = [ops.allreduce_time(n) for n in (2**23 - 1, 2**23, 2**24, 2**26)]
        assert times == sorted(times), (tp, times)
