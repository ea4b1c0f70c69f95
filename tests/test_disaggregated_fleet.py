"""A prefill/decode-disaggregated fleet (FleetConfig.prefill, ``simspec fleet
--prefill-replicas``): prefill instances run each prompt and its first token, the KV crosses
to a decode instance, and the client's first token is the decode instance's admission."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from simspec.catalog.hardware import load_engine
from simspec.cli.main import app
from simspec.config import (
    AcceptanceConfig,
    FleetConfig,
    LengthSpec,
    MethodConfig,
    PrefillPool,
    Scenario,
    WorkloadConfig,
)
from simspec.engine.build import setup_replica
from simspec.engine.disaggregation import KvSender, prefill_scenario, transfer_s
from simspec.engine.fleet import simulate_fleet
from simspec.errors import InputError, ScenarioError
from simspec.studies.fleet import FleetSlo, per_request, run_fleet, utilisation
from tests.refusals import one_error

runner = CliRunner()
WL = WorkloadConfig(arrival="poisson", rate=6.0, requests=120, measure="whole")


def pd_fleet(**pool) -> FleetConfig:
    eagle = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))
    sc = Scenario(workload=WL, disaggregation_mode="decode", method=eagle)
    return FleetConfig(replicas=[sc] * 2, prefill=PrefillPool(replicas=1, **pool))


def test_every_request_is_prefilled_once_sent_once_and_decoded_after_it_lands():
    run = run_fleet(pd_fleet())
    q = run.requests
    assert len(q) == 120 and not q.unfinishable.any()
    assert (q.prefill_replica == 0).all() and set(q.replica) <= {1, 2}
    assert (q.arrival_s < q.prefill_done_s).all()
    assert (q.prefill_done_s < q.kv_landed_s).all() and (q.kv_landed_s <= q.first_token_s).all()
    assert (q.output_tokens == q.requested_output_tokens).all()
    table = utilisation(run)
    assert list(table.role) == ["prefill", "decode", "decode"]
    assert list(table.requests) == [120, int((q.replica == 1).sum()), int((q.replica == 2).sum())]
    # the prefill instance never decodes: one iteration per prompt chunk at most, little busy
    assert table.busy_s[0] < min(table.busy_s[1], table.busy_s[2])


def test_a_transfer_takes_the_link_latency_plus_the_prompts_kv_over_the_bandwidth():
    """Each prefill instance's link sends one transfer after another: a transfer leaves
    after its prefill (vLLM: once its decode instance has allocated its blocks) and after
    the one before it, for the prompt's KV over the bandwidth, and lands the latency later."""
    cfg = pd_fleet(kv_transfer_gbps=10.0, kv_transfer_latency_ms=5.0)
    q = run_fleet(cfg).requests
    kv = setup_replica(prefill_scenario(cfg.replicas[0])).memory.kv_bytes_per_token
    sending = np.array([transfer_s(int(p), kv, 10.0, 0.0) for p in q.prompt_tokens])
    left = q.kv_landed_s.to_numpy() - 0.005
    began = left - sending
    assert (began >= q.prefill_done_s.to_numpy() - 1e-9).all()
    order = np.argsort(began, kind="stable")
    assert (began[order][1:] >= left[order][:-1] - 1e-9).all()  # never two at once
    # a transfer that waited for the link began as the one before it ended
    after = np.isclose(began[:, None], left[None, :], atol=1e-9).any(axis=1)
    assert after.sum() >= 5
    slo = FleetSlo(2000, 50)
    ttft = per_request(run_fleet(pd_fleet()), slo).ttft_ms
    slow_ttft = per_request(run_fleet(pd_fleet(kv_transfer_latency_ms=500.0)), slo).ttft_ms
    assert len(slow_ttft) == 120 and slow_ttft.median() > ttft.median() + 450


def test_sglang_sends_each_prompt_chunk_as_it_ends_and_the_others_after_the_prefill():
    """SGLang's send_kv_chunk: a chunked prompt's KV leaves chunk by chunk, one chunk after
    another over the request's link, the last when the prompt completes; vLLM's and
    TensorRT-LLM's after the prefill, whole."""
    assert load_engine("sglang").flag("kv_send_per_chunk")
    assert load_engine("sglang-v2").flag("kv_send_per_chunk")
    assert not load_engine("vllm").flag("kv_send_per_chunk")
    assert not load_engine("trtllm").flag("kv_send_per_chunk")
    per_token = transfer_s(1, 1000.0, 8e-6, 0.0)  # 1 s a token: 1000 bytes at 8 kb/s
    whole = KvSender(2, 1, 1, 1000.0, 8e-6, 0.5, per_chunk=False)
    assert whole.delay(0, 0, 7.0, 30) == transfer_s(30, 1000.0, 8e-6, 0.5) == 30 * per_token + 0.5
    assert whole.delay(0, 1, 8.0, 10) == pytest.approx(29.0 + 10.0 + 0.5)  # after the first
    send = KvSender(3, 2, 1, 1000.0, 8e-6, 0.5, per_chunk=True)
    send.chunks(0, 0.0, np.array([0, 1]), np.array([10, 4]))  # one link: until 10, then 14
    send.chunks(0, 3.0, np.array([0]), np.array([20]))  # waits for the link: until 24
    send.chunks(0, 3.5, np.array([0]), np.array([5]))  # recomputed after a preemption: sent
    send.chunks(0, 5.0, np.array([1]), np.array([8]))  # request 1's next 4: until 28
    send.chunks(0, 5.0, np.array([0]), np.array([30]))  # the last chunk: until 38
    # its own last byte left at 38 (whatever queues behind it)
    send.chunks(0, 6.0, np.array([1]), np.array([9]))  # until 39
    assert send.delay(0, 0, 5.0, 30) == pytest.approx(33.0 + 0.5)
    # the link, idle since 39, sends request 1's last token from its prefill's end
    assert send.delay(0, 1, 40.0, 10) == pytest.approx(1.0 + 0.5)
    assert send.delay(1, 2, 40.0, 10) == pytest.approx(10.0 + 0.5)  # another instance's link
    # two prefill instances sending to one decode instance share its link
    fan_in = KvSender(2, 2, 1, 1000.0, 8e-6, 0.0, per_chunk=False)
    fan_in.receiver[:] = 0
    assert fan_in.delay(0, 0, 0.0, 10) == pytest.approx(10.0)
    assert fan_in.delay(1, 1, 2.0, 10) == pytest.approx(8.0 + 10.0)


def test_a_prefill_instance_sends_every_cache_the_decode_instance_needs():
    """What one GPU sends per request (QA: only the pool's full-attention bytes were sent):
    - vLLM under a KV connector caches every layer's every token (uniform KV), so gpt-oss's
      windowed layers go whole; SGLang sends their last window (maybe_send_extra, swa);
    - SGLang's draft pool, outside its share, goes too (_init_kv_manager);
    - a Gated DeltaNet model's recurrent state, once per request (_send_mamba_state)."""
    from simspec.engine.disaggregation import SentBytes

    def sent(engine: str, model: str, uniform: bool = False, **kw: object) -> SentBytes:
        sc = Scenario(model=model, engine=engine, disaggregation_mode="decode", **kw)
        setup = setup_replica(prefill_scenario(sc))
        return SentBytes.of(setup, load_engine(engine), uniform=uniform)

    oss = setup_replica(Scenario(model="gpt-oss-120b", engine="vllm")).target
    windowed = oss.window_kv_bytes_per_token_per_gpu(1)
    full = oss.kv_bytes_per_token_per_gpu(1)
    assert windowed == full  # half its layers windowed: the whole transfer doubles
    vllm = sent("vllm", "gpt-oss-120b", uniform=True)
    assert vllm.per_token == full + windowed and vllm.extra(4000) == 0.0
    sglang = sent("sglang", "gpt-oss-120b")
    assert sglang.per_token == full
    assert sglang.extra(4000) == oss.sliding_window * windowed and sglang.extra(10) == 10 * windowed
    draft = MethodConfig(name="eagle3", k=3, acceptance={"alpha": 0.7})
    with_draft = sent("sglang", "llama-3.1-8b", method=draft)
    alone = sent("sglang", "llama-3.1-8b")
    assert with_draft.per_token > alone.per_token
    assert sent("sglang", "qwen3-next-80b-a3b", tp=4).state > 0


def test_dp_attention_ranks_send_over_their_own_links():
    """Under DP attention each rank's GPUs send its own requests' KV over their own NICs:
    two requests sent together land together (QA: one link an instance queued them)."""
    two = KvSender(2, 1, 1, 1000.0, 8e-6, 0.0, per_chunk=False, ranks=2)
    assert two.delay(0, 0, 0.0, 10) == pytest.approx(10.0)
    assert two.delay(0, 1, 0.0, 10) == pytest.approx(10.0)
    single = KvSender(2, 1, 1, 1000.0, 8e-6, 0.0, per_chunk=False)
    assert single.delay(0, 0, 0.0, 10) == pytest.approx(10.0)
    assert single.delay(0, 1, 0.0, 10) == pytest.approx(20.0)


def test_an_sglang_prefill_instance_leaves_only_the_last_chunks_kv_to_send():
    prompt = LengthSpec(dist="fixed", mean=20_000)
    wl = WorkloadConfig(
        arrival="poisson", rate=0.2, requests=4, measure="whole", lengths_from=None, prompt=prompt
    )
    link = {"kv_transfer_gbps": 100.0, "kv_transfer_latency_ms": 2.0}
    exposed = {}
    for engine in ("vllm", "sglang"):
        sc = Scenario(workload=wl, disaggregation_mode="decode", engine=engine)
        q = run_fleet(FleetConfig(replicas=[sc], prefill=PrefillPool(replicas=1, **link))).requests
        exposed[engine] = (q.kv_landed_s - q.prefill_done_s).to_numpy()
        setup = setup_replica(prefill_scenario(sc))
        kv, chunk = setup.memory.kv_bytes_per_token, setup.max_tokens
    whole = transfer_s(20_000, kv, 100.0, 0.002)
    # vLLM: the whole KV, read once the decode instance has allocated its blocks (the next
    # step boundary there)
    assert (exposed["vllm"] >= whole).all() and (exposed["vllm"] < whole + 0.05).all()
    # a link faster than the prefill sends each earlier chunk before the next one ends
    last = transfer_s(20_000 - 2 * chunk, kv, 100.0, 0.002)
    assert chunk < 10_000 and exposed["sglang"] == pytest.approx([last] * 4, rel=1e-9)


def _burst(engine: str, **scheduler) -> pd.DataFrame:
    from simspec.config import SchedulerConfig

    wl = WorkloadConfig(arrival="poisson", rate=1000.0, requests=10, measure="whole")
    sc = Scenario(
        workload=wl,
        disaggregation_mode="decode",
        engine=engine,
        scheduler=SchedulerConfig(**scheduler),
    )
    return run_fleet(FleetConfig(replicas=[sc], prefill=PrefillPool(replicas=1))).requests


def _most_at_once(starts: pd.Series, ends: pd.Series) -> int:
    events = sorted([(t, 1) for t in starts] + [(t, -1) for t in ends], key=lambda e: e)
    held = most = 0
    for _, change in events:
        held += change
        most = max(most, held)
    return most


def test_sglang_prefills_a_request_only_once_its_decode_instance_holds_its_blocks():
    """SGLang's PrefillBootstrapQueue waits for the decode server's preallocation, which its
    request pool bounds: max_running_requests 2 has 2 x 2 more slots for preallocated
    requests, so at most 6 are prefilled-and-not-finished at once, 2 of them running. vLLM
    prefills each at once; the request then waits at the decode instance, which allocates
    blocks for it while fewer than max_num_seqs run and reads its KV into them."""
    from simspec.engine.disaggregation import prealloc_slots

    sglang_engine, vllm_engine = load_engine("sglang"), load_engine("vllm")
    assert sglang_engine.flag("pd_prealloc_before_prefill")
    assert not vllm_engine.flag("pd_prealloc_before_prefill")
    assert prealloc_slots(sglang_engine, 2) == 6 and prealloc_slots(sglang_engine, 64) == 64
    # per DP attention rank: 4 ranks of 16 running requests each have 32 more slots
    assert prealloc_slots(sglang_engine, 64, dp=4) == 192
    assert prealloc_slots(sglang_engine, 256, dp=4) == 256
    assert prealloc_slots(vllm_engine, 2) is None
    assert prealloc_slots(load_engine("trtllm"), 2) is None  # before its PR #15356
    sglang = _burst("sglang", max_num_seqs=2)
    assert len(sglang) == 10 and (sglang.output_tokens == sglang.requested_output_tokens).all()
    assert _most_at_once(sglang.prefill_done_s, sglang.finish_s) == 6
    assert _most_at_once(sglang.first_token_s, sglang.finish_s) <= 2
    assert (sglang.prefill_done_s.sort_values().diff().dropna() > 1.0).sum() >= 2
    vllm = _burst("vllm", max_num_seqs=2)
    assert load_engine("vllm").flag("pd_pull_after_admission")
    assert load_engine("trtllm").flag("pd_pull_after_admission")
    assert _most_at_once(vllm.prefill_done_s, vllm.finish_s) == 10
    assert _most_at_once(vllm.first_token_s, vllm.finish_s) <= 2
    assert (vllm.first_token_s - vllm.kv_landed_s).max() > 1.0  # landed, waiting for a slot
    pd.testing.assert_frame_equal(sglang, _burst("sglang", max_num_seqs=2))


def test_the_same_seed_gives_the_same_run():
    a, b = run_fleet(pd_fleet()).requests, run_fleet(pd_fleet()).requests
    pd.testing.assert_frame_equal(a, b)


def test_prefill_instances_need_decode_instances_behind_them():
    sc = Scenario(workload=WL)
    with pytest.raises(ValueError, match="disaggregation_mode: a fleet with prefill instances"):
        FleetConfig(replicas=[sc], prefill=PrefillPool(replicas=1))


def test_the_cli_runs_a_disaggregated_fleet_and_refuses_a_link_without_one(tmp_path):
    out, summary = tmp_path / "r.csv", tmp_path / "s.csv"
    args = ["fleet", "--qps", "6", "--requests", "60", "--replicas", "2"]
    result = runner.invoke(
        app, [*args, "--prefill-replicas", "1", "--out", str(out), "--summary", str(summary)]
    )
    assert result.exit_code == 0, result.output
    # replicas counts the decode instances, as --replicas and plan's CSV do (QA: it had
    # counted the prefill instance too, beside prefill_replicas)
    row = pd.read_csv(summary).iloc[0]
    assert (row.replicas, row.prefill_replicas) == (2, 1)
    text = " ".join(result.output.split())
    assert "1 prefill + 2 decode x llama-3.1-8b" in text and "prefill/decode (vllm):" in text
    assert "holds its KV until a decode instance has allocated blocks for it" in text
    assert "TensorRT-LLM ran before its PR #15356" not in text  # vLLM's rule is its own
    trt = runner.invoke(app, [*args, "--prefill-replicas", "1", "--engine", "trtllm"])
    assert trt.exit_code == 0, trt.output
    assert "as TensorRT-LLM ran before its PR #15356" in " ".join(trt.output.split())
    v0 = runner.invoke(app, [*args, "--prefill-replicas", "1", "--engine", "vllm-v0"])
    one_error(v0, "--prefill-replicas", "vllm-v0's decode instance is not modelled", "blocking")
    table = pd.read_csv(out)
    assert {"prefill_replica", "prefill_done_s", "kv_landed_s"} <= set(table.columns)
    one_error(runner.invoke(app, [*args, "--kv-transfer-gbps", "100"]), "--kv-transfer-gbps")
    bad = runner.invoke(app, [*args, "--prefill-replicas", "1", "--kv-transfer-gbps", "0"])
    one_error(bad, "--kv-transfer-gbps", "greater than 0")
    hf = runner.invoke(app, [*args, "--prefill-replicas", "1", "--engine", "hf"])
    one_error(hf, "--prefill-replicas", "engine hf runs no prefill/decode", "sglang")


def test_the_plain_fleet_never_runs_a_disaggregated_one_as_if_it_had_no_prefill():
    with pytest.raises(InputError, match="simulate_disaggregated"):
        simulate_fleet(pd_fleet())


def _trace_fleet(tmp_path, rows, **over) -> FleetConfig:
    body = "".join(f"{a},{p},{o},conversation\n" for a, p, o in rows)
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_len,output_len,domain\n" + body)
    wl = WorkloadConfig(arrival="replay", arrival_trace=str(path))
    sc = Scenario(workload=wl, disaggregation_mode="decode", **over)
    return FleetConfig(replicas=[sc] * 2, prefill=PrefillPool(replicas=1))


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_a_one_token_output_is_delivered_when_its_kv_lands(tmp_path, engine):
    """QA: under PD such a request had no first token and no output: TTFT NaN, its SLO
    missed, throughput 0 for a trace of them. TensorRT-LLM delivers the context server's
    token as the KV lands; vLLM's decode instance recomputes and samples it in a step."""
    cfg = _trace_fleet(tmp_path, [(0.0, 100, 1), (0.1, 200, 1), (0.2, 50, 20)], engine=engine)
    run = run_fleet(cfg)
    table = per_request(run, FleetSlo(2000, 50))
    assert table.ttft_ms.notna().all() and table.met_slo.all()
    assert list(table.output_tokens) == [1, 1, 20]
    q = run.requests
    one = q[q.requested_output_tokens == 1]
    if engine == "vllm":
        assert (one.first_token_s > one.kv_landed_s).all()
    else:
        assert (one.first_token_s == one.kv_landed_s).all()


def test_a_request_no_decode_instance_serves_is_refused_before_its_prefill(tmp_path):
    """QA: one longer than max_model_len was prefilled and sent first, delaying the next."""
    from simspec.config import SchedulerConfig

    long_one = [(0.0, 3000, 3000), (0.01, 100, 10)]
    cfg = _trace_fleet(tmp_path, long_one, scheduler=SchedulerConfig(max_model_len=4096))
    q = run_fleet(cfg).requests
    assert q.unfinishable.tolist() == [True, False]
    assert q.prefill_done_s.isna().iloc[0]
    assert q.first_token_s.iloc[1] - q.arrival_s.iloc[1] < 0.05


def test_the_timeline_counts_prefill_arrivals_and_each_token_once():
    """QA: prefill instances showed no arrivals (their queue was charged to the decode
    instances) and the fleet's tokens counted every first token twice."""
    from simspec.studies.fleet import timeline

    run = run_fleet(pd_fleet())
    series = timeline(run)
    prefill = series[series.replica == 0]
    fleet = series[series.replica == -1]
    assert prefill.arrivals.sum() == len(run.requests) == fleet.arrivals.sum()
    made = (fleet.tokens_s * fleet.span_s).sum()
    assert made == pytest.approx(run.requests.output_tokens.sum())


def test_random_routing_to_prefill_and_to_decode_draws_apart():
    """QA: both routers drew the fleet's one router stream, so every request prefilled on
    instance i was decoded on instance i."""
    sc = Scenario(workload=WL, disaggregation_mode="decode")
    cfg = FleetConfig(replicas=[sc] * 4, router="random", prefill=PrefillPool(replicas=4))
    q = run_fleet(cfg).requests
    same = (q.prefill_replica + 4 == q.replica).mean()
    assert same < 0.5


def test_the_cli_refuses_a_null_mode_beside_prefill_instances():
    args = ["fleet", "--qps", "6", "--requests", "20", "--prefill-replicas", "1"]
    result = runner.invoke(app, [*args, "--disaggregation-mode", "null"])
    one_error(result, "--disaggregation-mode", "decode instances")


def test_an_input_error_raised_in_a_process_is_rebuilt_from_its_args():
    """QA: SimPy re-raises type(e)(*e.args); InputError's one joined arg made that a
    TypeError and a traceback (--kv-transfer-gbps 1e-9 with fine windows)."""
    err = InputError("--window-s", "too fine")
    again = type(err)(*err.args)
    assert (again.field, again.message, str(again)) == ("--window-s", "too fine", str(err))


def test_a_prefill_instance_holds_each_prompts_kv_until_it_has_been_sent():
    """vLLM's prefill instance frees a request's blocks when the decode instance has read
    them (finished_sending), SGLang's when its sender polls success, TensorRT-LLM's when the
    context send completes: behind a decode instance that takes one request at a time, the
    prefill instance's KV fills with prompts waiting to be read, and its next prefills wait
    for room."""
    from simspec.config import SchedulerConfig

    prompt = LengthSpec(dist="fixed", mean=100_000)
    wl = WorkloadConfig(
        arrival="poisson", rate=1000.0, requests=8, measure="whole", prompt=prompt,
        output=LengthSpec(dist="fixed", mean=3000),
    )  # fmt: skip
    for engine in ("vllm", "sglang"):
        sc = Scenario(
            workload=wl,
            disaggregation_mode="decode",
            engine=engine,
            scheduler=SchedulerConfig(max_num_seqs=1),
        )
        memory = setup_replica(prefill_scenario(sc)).memory
        fits = memory.num_blocks * memory.block_size // 100_000
        assert 2 <= fits < 8
        q = run_fleet(FleetConfig(replicas=[sc], prefill=PrefillPool(replicas=1))).requests
        assert (q.output_tokens == 3000).all()
        # decoding a request (3,000 tokens) takes longer than prefilling one (100,000)
        held = _most_at_once(q.prefill_done_s, q.kv_landed_s)
        if engine == "vllm":  # prefilled while the decode instance is busy, until full
            assert held == fits
            assert (q.prefill_done_s.iloc[fits:] > q.kv_landed_s.iloc[:-fits].values).all()
        else:  # SGLang prefills only what the decode instance has taken
            assert held == 1


def test_sglang_prompts_prefilled_in_one_step_land_one_after_another():
    """QA: the requests whose prefills ended in the same step all landed when the last of
    their KV had left (each waited for the chunks queued behind its own)."""
    wl = WorkloadConfig(
        arrival="poisson", rate=1e6, requests=4, measure="whole", lengths_from=None,
        prompt=LengthSpec(dist="fixed", mean=1000),
    )  # fmt: skip
    sc = Scenario(workload=wl, disaggregation_mode="decode", engine="sglang")
    link = PrefillPool(replicas=1, kv_transfer_gbps=1.0, kv_transfer_latency_ms=0.0)
    q = run_fleet(FleetConfig(replicas=[sc], prefill=link)).requests
    kv = setup_replica(prefill_scenario(sc)).memory.kv_bytes_per_token
    each = transfer_s(1000, kv, 1.0, 0.0)
    landed = np.sort(q.kv_landed_s.to_numpy())
    assert np.diff(landed) == pytest.approx([each] * 3, rel=1e-6)


def test_a_decode_instance_whose_only_request_was_retracted_waits_for_preallocated_kv():
    """QA: with preallocated requests holding blocks while their KV was on its way, a decode
    instance whose one running request had retracted itself (waiting to resume, too big for
    what was left) raised "the scheduler could not place any request" instead of waiting
    for a KV to land."""
    import simpy

    from simspec.engine.replica import Replica, _WaitForRoom
    from simspec.engine.requests import RequestTable
    from simspec.engine.workload import RequestSpecs

    setup = setup_replica(Scenario(disaggregation_mode="decode", engine="sglang"))
    room = setup.memory.num_blocks * setup.memory.block_size
    prompts = np.array([room * 3 // 10, room * 3 // 10, room * 45 // 100], dtype=np.int64)
    table = RequestTable(RequestSpecs(prompts, np.full(3, 10, dtype=np.int64), np.full(3, -1)))
    replica = Replica(simpy.Environment(), setup, table, None)
    replica.sched.awaits_kv = True
    replica.arrive(0)
    replica.arrive(1)
    replica.sched.admit_transfers()
    assert replica.sched.preallocated == {0, 1} and not replica.sched.running
    replica.sched.add(2)  # as a retracted request waits to recompute: it does not fit
    with pytest.raises(_WaitForRoom):
        replica._begin()
    replica.kv_landed(0)  # a KV lands: the instance goes on
    step = replica._begin()
    assert step.decoding.tolist() == [0]


def _vllm_under_pressure(
    prompt: LengthSpec, output: LengthSpec, method: MethodConfig, fleet: dict, **scheduler
) -> pd.DataFrame:
    from simspec.config import SchedulerConfig

    wl = WorkloadConfig(
        arrival="poisson", rate=20.0, requests=120, measure="whole", prompt=prompt, output=output
    )
    tight = SchedulerConfig(max_model_len=20000, **scheduler)
    sc = Scenario(
        workload=wl, disaggregation_mode="decode", engine="vllm", scheduler=tight, method=method
    )
    replicas, pool = [sc] * fleet.pop("decode"), PrefillPool(**fleet.pop("pool"))
    return run_fleet(FleetConfig(replicas=replicas, prefill=pool, **fleet)).requests


def test_a_vllm_decode_instance_retracted_behind_landed_requests_goes_on():
    """QA (fuzz): a vLLM decode instance whose one running request retracted itself behind
    landed requests holding the blocks raised "could not place any request"."""
    eagle = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))
    q = _vllm_under_pressure(
        LengthSpec(dist="lognormal", mean=1500, cv=1.5),
        LengthSpec(dist="lognormal", mean=800, cv=1.0),
        eagle,
        {"decode": 3, "pool": {"replicas": 3}, "router": "random"},
        gpu_memory_utilization=0.25,
        max_num_seqs=1,
    )
    served = q[~q.unfinishable]
    assert len(served) == 120 and (served.output_tokens == served.requested_output_tokens).all()


def test_a_request_refused_at_a_decode_instance_frees_its_prefill_instances_blocks():
    """QA (fuzz): a request refused by a decode instance after its prefill kept its prefill
    instance's blocks, whose next prompts then waited for ever (the run ended with them
    unserved, and they read as refused)."""
    ngram = MethodConfig(name="ngram", k=4, acceptance=AcceptanceConfig(alpha=0.5))
    q = _vllm_under_pressure(
        LengthSpec(dist="fixed", mean=9000),
        LengthSpec(dist="uniform", low=1, high=4000),
        ngram,
        {"decode": 1, "pool": {"replicas": 2, "kv_transfer_gbps": 1.0}, "router": "round_robin"},
        gpu_memory_utilization=0.22,
        max_num_seqs=4,
    )
    served = q[~q.unfinishable]
    assert q.unfinishable.any() and served.finish_s.notna().all()
    assert (served.output_tokens == served.requested_output_tokens).all()


def test_a_run_that_stops_with_requests_unserved_is_a_fault_not_a_table():
    from simspec.engine.fleet import check_served

    finish = np.array([1.0, np.nan, np.nan])
    check_served(finish, np.array([False, True, True]), np.arange(3), "fleet")  # refused: fine
    with pytest.raises(ScenarioError, match=r"2 requests neither served nor refused \(request 1"):
        check_served(finish, np.array([False, False, False]), np.arange(3), "fleet")


def test_a_no_evict_decode_instance_promises_room_to_the_requests_it_has_allocated_for():
    """QA: TensorRT-LLM's GUARANTEED_NO_EVICT reserves a generation-only request's whole
    output when it allocates for it; requests preallocated or landed (not yet running) were
    left out of the promise, and its decode instance evicted running requests."""
    from simspec.config import SchedulerConfig

    wl = WorkloadConfig(
        arrival="poisson", rate=50.0, requests=120, measure="whole",
        prompt=LengthSpec(dist="fixed", mean=1000), output=LengthSpec(dist="fixed", mean=3000),
    )  # fmt: skip
    sc = Scenario(
        workload=wl,
        engine="trtllm",
        disaggregation_mode="decode",
        scheduler=SchedulerConfig(gpu_memory_utilization=0.25, max_num_seqs=64),
    )
    q = run_fleet(FleetConfig(replicas=[sc], prefill=PrefillPool(replicas=1))).requests
    assert len(q) == 120 and int(q.preemptions.sum()) == 0


def test_a_disaggregated_fleet_runs_one_engine():
    """QA: a decode pool of vLLM and SGLang instances ran with one's order and the other's
    KV sending; the engines' connectors do not talk to each other."""
    mixed = [
        Scenario(workload=WL, disaggregation_mode="decode", engine=e) for e in ("vllm", "sglang")
    ]
    with pytest.raises(ValueError, match=r"replicas\[1\]\.engine \(sglang\) differs"):
        FleetConfig(replicas=mixed, prefill=PrefillPool(replicas=1))


def test_vllms_decode_instance_samples_the_first_token_itself():
    """vLLM's decode instance recomputes the prompt's last token (_update_waiting_for_remote_kv
    counts one fewer computed token when the whole prompt arrived): the first token comes at
    the end of that step. TensorRT-LLM's generation server starts from the context server's
    token, delivered when the request joins the running batch."""
    assert load_engine("vllm").flag("pd_decode_recomputes_last_token")
    assert not load_engine("trtllm").flag("pd_decode_recomputes_last_token")
    wl = WorkloadConfig(arrival="poisson", rate=0.5, requests=20, measure="whole")
    gaps = {}
    for engine in ("vllm", "trtllm"):
        sc = Scenario(workload=wl, disaggregation_mode="decode", engine=engine)
        q = run_fleet(FleetConfig(replicas=[sc], prefill=PrefillPool(replicas=1))).requests
        assert (q.output_tokens == q.requested_output_tokens).all()
        gaps[engine] = (q.first_token_s - q.kv_landed_s).to_numpy()
    assert gaps["vllm"].min() > 0.001  # a step after the landing, at least
    assert gaps["trtllm"].min() == 0.0  # an idle instance takes it as it lands


@pytest.mark.parametrize("states", [(), ("pd_prealloc_before_prefill", "pd_pull_after_admission")])
def test_an_engine_stating_no_order_or_both_is_refused_not_run_in_another(monkeypatch, states):
    """Review: an engine profile with pd_disaggregation but neither order (or both) ran the
    old land-then-route order (or SGLang's) without a word."""
    from simspec.catalog.hardware import EngineProfile
    from simspec.engine.build import PD_ORDERS

    own = EngineProfile.flag

    def flag(self, key):
        return key in states if key in PD_ORDERS else own(self, key)

    monkeypatch.setattr(EngineProfile, "flag", flag)
    with pytest.raises(InputError) as e:
        setup_replica(Scenario(disaggregation_mode="decode"))
    assert e.value.field == "engine" and "exactly one order" in e.value.message


def test_a_replica_holding_nothing_that_cannot_place_a_request_still_raises(monkeypatch):
    """Review: the 'could not place any request' error is waited out only while blocks are
    held for KV on its way (a prefill instance's unsent requests, a decode instance's
    preallocated ones); a replica holding none must still say it is stuck, not spin."""
    from simspec.engine.scheduler import ScheduledBatch, Scheduler
    from simspec.engine.simulation import simulate

    none = np.zeros(0, dtype=np.int64)
    monkeypatch.setattr(Scheduler, "schedule", lambda self: ScheduledBatch(none, none, none, none))
    with pytest.raises(ScenarioError, match="could not place any request"):
        simulate(Scenario(workload=WorkloadConfig(concurrency=2, requests=4, lengths_from=None)))


def test_a_one_token_request_still_takes_a_vllm_decode_instances_step(tmp_path):
    """vLLM's proxy sends a max_tokens=1 request on to the decode instance, which pulls its
    KV, recomputes the last prompt token and samples it: its TTFT is a longer request's (QA:
    it was delivered as its KV landed, skipping that step)."""
    path = tmp_path / "one.csv"
    pd.DataFrame(
        [(0.0, 500, 1), (0.2, 500, 50)], columns=["arrival_s", "prompt_len", "output_len"]
    ).to_csv(path, index=False)
    out = tmp_path / "r.csv"
    args = ["fleet", "--trace", str(path), "--replicas", "1", "--prefill-replicas", "1"]
    result = runner.invoke(app, [*args, "--engine", "vllm", "--out", str(out)])
    assert result.exit_code == 0, result.output
    q = pd.read_csv(out)
    assert q.ttft_ms[0] == pytest.approx(q.ttft_ms[1], rel=1e-6)
    assert (q.first_token_s > q.kv_landed_s).all()


def test_the_kv_link_defaults_to_the_gpus_reference_server_network_card():
    """gpus.yaml nic_gbps: DGX H100 400 Gb/s a GPU, DGX A100 200, DGX B300 800; a GPU without
    a reference server's card takes 400, said as assumed (QA: every GPU ran at 400)."""
    from simspec.engine.disaggregation import ASSUMED_NIC_GBPS, kv_link_gbps

    assert kv_link_gbps(None, "h100_sxm")[0] == 400.0
    assert kv_link_gbps(None, "a100_80gb")[0] == 200.0
    assert kv_link_gbps(None, "b300")[0] == 800.0
    gbps, basis = kv_link_gbps(None, "l40s")
    assert gbps == ASSUMED_NIC_GBPS and basis.startswith("assumed")
    assert kv_link_gbps(25.0, "a100_80gb") == (25.0, "given")
    # an A100 fleet runs at its 200 Gb/s unless told otherwise
    eagle = MethodConfig(name="eagle3", k=3, acceptance=AcceptanceConfig(alpha=0.7))
    sc = Scenario(workload=WL, disaggregation_mode="decode", method=eagle, gpu="a100_80gb")

    def landed(**pool) -> pd.Series:
        cfg = FleetConfig(replicas=[sc], prefill=PrefillPool(replicas=1, **pool))
        return run_fleet(cfg).requests.kv_landed_s

    default = landed()
    pd.testing.assert_series_equal(default, landed(kv_transfer_gbps=200.0))
    assert (landed(kv_transfer_gbps=400.0) < default).any()


def test_kv_held_between_iterations_counts_in_the_occupancy(tmp_path):
    """A prefill instance holds a prompt's blocks until its KV is sent, through idle time
    and after its last iteration (QA: three 4,000-token prompts over a 1 Gb/s link held 250
    blocks each for seconds and read 0.05 % occupied; the decode instance likewise)."""
    import json

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,4000,10\n0.01,4000,10\n0.02,4000,10\n")
    summary, out = tmp_path / "s.json", tmp_path / "r.csv"
    args = ["fleet", "--trace", str(trace), "--replicas", "1", "--prefill-replicas", "1"]
    args += ["--kv-transfer-gbps", "1", "--summary", str(summary), "--out", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    s = json.loads(summary.read_text())
    q = pd.read_csv(out)
    prefill = s["replicas"][0]
    assert prefill["role"] == "prefill" and prefill["kv_blocks_peak"] == 750
    span = q.finish_s.max()
    held = (q.kv_landed_s - q.prefill_done_s).sum() * 250  # block-seconds while sending
    expected = held / (prefill["kv_blocks_total"] * span)
    assert prefill["kv_occupancy"] == pytest.approx(expected, rel=0.05)
