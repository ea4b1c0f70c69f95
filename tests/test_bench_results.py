"""The engines' benchmark results as measured runs, and ``simspec compare``.

Readers: vLLM's --save-result JSON (and --save-detailed's per-request lengths), the block
vLLM and SGLang print, SGLang's --output-file JSONL, vLLM's /metrics text; each read on the
GPUStack Qwen3-8B/H100 runs (tests/data/bench/SOURCE.md) or a small file as the engine writes
it. Hostile files end in one ``error:`` line naming the field, exit 2, nothing written. A
simspec run written in vLLM's format compares with itself with zero error.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from simspec.cli.main import app
from simspec.config import LengthSpec, Scenario, WorkloadConfig
from simspec.engine.simulation import simulate
from simspec.errors import InputError
from simspec.studies.bench import read_metrics, read_result
from simspec.studies.bench.measured import METRICS
from simspec.studies.bench.simulated import _repeated_percentile, simulated_metrics
from simspec.studies.bench.vllm_json import vllm_result
from tests.capped import run_capped
from tests.conftest import ROOT
from tests.refusals import one_error

runner = CliRunner()
DATA = ROOT / "tests" / "data" / "bench"
GPUSTACK = {1: 7.28, 2: 7.37, 4: 7.38, 8: 7.71}  # mean TPOT (ms) each block prints
DEPLOY = ["--model", "qwen3-8b", "--gpu", "h100_sxm"]


def vllm_json(**over) -> dict:
    """A small --save-result object as vLLM writes one; ``over`` replaces or (None) drops keys."""
    data = json.loads((DATA / "qwen3-8b-h100-bs4.json").read_text())
    data.update(over)
    # vLLM computes the throughputs from the totals over the duration (check_run holds them)
    for theirs, total in (
        ("request_throughput", "completed"),
        ("output_throughput", "total_output_tokens"),
    ):
        numbers = (data.get(total), data.get("duration"))
        if theirs not in over and all(isinstance(x, int | float) and x > 0 for x in numbers):
            data[theirs] = numbers[0] / numbers[1]
    return {k: v for k, v in data.items() if v is not None or k in ("label", "request_goodput")}


def write(tmp_path: Path, name: str, data) -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


# -- readers on the GPUStack runs ---------------------------------------------------------------
@pytest.mark.parametrize("bs", sorted(GPUSTACK))
def test_each_printed_gpustack_block_reads_as_its_run(bs):
    (run,) = read_result(DATA / f"qwen3-8b-h100-bs{bs}.txt")
    assert run.kind == "vllm-text" and run.model is None
    assert (run.requests, run.max_concurrency, run.closed) == (100, bs, True)
    assert (run.total_input_tokens, run.total_output_tokens) == (23260, 22061)
    assert run.metrics["mean_tpot_ms"] == GPUSTACK[bs]
    assert set(run.metrics) == set(METRICS) - {"mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms"}
    assert not run.detailed and run.acceptance is None


@pytest.mark.parametrize("bs", sorted(GPUSTACK))
def test_the_json_of_a_run_reads_as_the_same_run_as_its_printed_block(bs):
    (text,) = read_result(DATA / f"qwen3-8b-h100-bs{bs}.txt")
    (data,) = read_result(DATA / f"qwen3-8b-h100-bs{bs}.json")
    assert data.kind == "vllm-json" and data.model == "Qwen/Qwen3-8B"
    for field in ("requests", "duration_s", "total_input_tokens", "total_output_tokens"):
        assert getattr(data, field) == getattr(text, field)
    assert (data.max_concurrency, data.request_rate) == (text.max_concurrency, math.inf)
    assert data.metrics == text.metrics


def test_a_pasted_page_with_several_indented_fenced_blocks_reads_one_run_per_block(tmp_path):
    parts = ["## Results", "```bash"]
    for bs in sorted(GPUSTACK):
        parts.append(f"    # BS={bs}")
        text = (DATA / f"qwen3-8b-h100-bs{bs}.txt").read_text()
        parts += ["    " + line for line in text.splitlines()] + [""]
    parts.append("```")
    runs = read_result(write(tmp_path, "page.md", "\n".join(parts)))
    assert [r.name for r in runs] == [f"page.md#{i}" for i in range(1, 5)]
    assert [r.max_concurrency for r in runs] == sorted(GPUSTACK)
    assert [r.metrics["mean_tpot_ms"] for r in runs] == [GPUSTACK[b] for b in sorted(GPUSTACK)]


def test_vllm_append_result_lines_read_as_one_run_each(tmp_path):
    lines = [json.dumps(vllm_json(max_concurrency=c)) for c in (1, 2)]
    runs = read_result(write(tmp_path, "runs.json", "\n".join(lines) + "\n"))
    assert [(r.name, r.max_concurrency, r.kind) for r in runs] == [
        ("runs.json#1", 1, "vllm-json"),
        ("runs.json#2", 2, "vllm-json"),
    ]


def test_save_detailed_lists_give_the_lengths_of_the_successful_requests(tmp_path):
    data = vllm_json(
        completed=3,
        total_input_tokens=80,
        total_output_tokens=21,
        input_lens=[10, 20, 30, 40],
        output_lens=[5, 0, 7, 9],
    )
    (run,) = read_result(write(tmp_path, "d.json", data))
    assert run.detailed
    assert (run.input_lens, run.output_lens) == ((10, 30, 40), (5, 7, 9))


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"output_lens": [5, 6, 8]}, "output_lens: sum 19, but total_output_tokens is 18"),
        ({"input_lens": [10, 20, 40]}, "input_lens: the successful requests' prompts sum to 70"),
        ({"completed": 4}, "output_lens: 3 entries, but completed is 4"),
    ],
)
def test_save_detailed_lists_another_runs_totals_are_refused(tmp_path, over, needle):
    """QA: lists of 100 x 5 tokens beside totals of 232.6 / 220.6 per request, and 50 entries
    beside completed 100, were simulated against the totals' metrics without a word."""
    base = {"completed": 3, "total_input_tokens": 60, "total_output_tokens": 18}
    lists = {"input_lens": [10, 20, 30], "output_lens": [5, 6, 7]}
    data = vllm_json(**{**base, **lists, **over})
    with pytest.raises(InputError) as err:
        read_result(write(tmp_path, "d.json", data))
    assert needle in str(err.value)


def test_other_percentiles_are_read_and_compared(tmp_path):
    """QA: p90 keys (vllm bench serve --metric-percentiles 90) and SGLang's p95_itl_ms were
    dropped without a word; they are read from each format and predicted at their percentile."""
    from simspec.studies.bench.compare import compare

    data = vllm_json(p90_ttft_ms=50.0, p90_tpot_ms=8.0, p95_e2el_ms=1900.0, p101_itl_ms=1.0)
    (run,) = read_result(write(tmp_path, "v.json", data))
    assert {"p90_ttft_ms", "p90_tpot_ms", "p95_e2el_ms"} <= set(run.metrics)
    assert not any("p101" in m for m in run.metrics)  # not a percentile
    sg = {**SGLANG_LINE, "p95_itl_ms": 12.0, "p90_e2e_latency_ms": 2200.0}
    (run,) = read_result(write(tmp_path, "s.jsonl", json.dumps(sg)))
    assert run.metrics["p95_itl_ms"] == 12.0 and run.metrics["p90_e2el_ms"] == 2200.0
    text = (
        (DATA / "qwen3-8b-h100-bs1.txt")
        .read_text()
        .replace("P99 TPOT (ms):", "P90 TPOT (ms):                           7.50\nP99 TPOT (ms):")
    )
    (run,) = read_result(write(tmp_path, "t.txt", text))
    assert run.metrics["p90_tpot_ms"] == 7.5
    (plan,) = plans_of(tmp_path, write(tmp_path, "v2.json", data), "autoregressive")
    frame = compare([plan]).set_index("metric")
    assert frame.index.tolist()[-3:] == ["p90_ttft_ms", "p90_tpot_ms", "p95_e2el_ms"]
    ttft = frame.loc[["median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms"], "predicted"].tolist()
    assert ttft == sorted(ttft)
    # other spellings of a percentile are named as the simulated one, and predicted (QA: P90,
    # p90.0 and p05 were compared with no prediction)
    odd = vllm_json(P90_ttft_ms=50.0, **{"p05_tpot_ms": 5.0, "p90.0_itl_ms": 9.0})
    (plan,) = plans_of(tmp_path, write(tmp_path, "v3.json", odd), "autoregressive")
    frame = compare([plan]).set_index("metric")
    for metric in ("p90_ttft_ms", "p5_tpot_ms", "p90_itl_ms"):
        assert frame.loc[metric, "predicted"] > 0, metric


def test_a_file_of_no_result_format_says_which_ones_are_read(tmp_path):
    """QA: a CSV was refused as "not valid JSON (Expecting value at position 0)"."""
    path = write(tmp_path, "bench.csv", "run,tpot\nbs1,7.2\n")
    with pytest.raises(InputError, match="--save-result JSON .* --output-file JSONL"):
        read_result(path)


def test_sglang_output_details_are_held_to_the_same_rules(tmp_path):
    """QA: SGLang lists none of whose requests could run fell back to the means, the note
    saying the file "lists no per-request lengths"; lists that miss the totals ran silently."""
    zeros = {**SGLANG_LINE, "input_lens": [0] * 200, "output_lens": [0] * 200}
    with pytest.raises(InputError, match="no request with a prompt and an output"):
        read_result(write(tmp_path, "z.jsonl", json.dumps(zeros)))
    short = {**SGLANG_LINE, "input_lens": [250] * 200, "output_lens": [100] * 200}
    with pytest.raises(InputError, match="sum 20,000, but total_output_tokens is 40,000"):
        read_result(write(tmp_path, "s.jsonl", json.dumps(short)))
    good = {**SGLANG_LINE, "input_lens": [250] * 200, "output_lens": [200] * 200}
    (run,) = read_result(write(tmp_path, "g.jsonl", json.dumps(good)))
    assert run.output_lens == (200,) * 200


def test_a_request_rate_is_an_open_loop_and_inf_a_closed_one(tmp_path):
    (run,) = read_result(write(tmp_path, "r.json", vllm_json(request_rate=2.5)))
    assert not run.closed and run.load == 2.5 and run.load_label.startswith("rate 2.5/s")
    (burst,) = read_result(write(tmp_path, "b.json", {**vllm_json(), "max_concurrency": None}))
    assert burst.closed and burst.load == 100 and burst.load_label == "burst of 100"


def test_vllm_spec_decode_fields_become_acceptance_per_position(tmp_path):
    data = vllm_json(
        spec_decode_acceptance_length=2.3,
        spec_decode_per_position_acceptance_rates=[0.8, 0.4, 0.1],
    )
    (run,) = read_result(write(tmp_path, "s.json", data))
    assert run.acceptance is not None
    assert run.acceptance.per_position == (0.8, 0.4, 0.1)
    assert run.acceptance.length == 2.3
    # counters vLLM could not have written are refused by name (QA: they ran, silently)
    for rates, length, key in (([0.5, 0.7], 2.2, r"rates\[1\]"), ([0.8, 0.4], 2.9, "length")):
        bad = vllm_json(
            spec_decode_acceptance_length=length,
            spec_decode_per_position_acceptance_rates=rates,
        )
        with pytest.raises(InputError, match=key):
            read_result(write(tmp_path, "bad.json", bad))
    # a chain reaches position i only through position i - 1: α is the share over the one before
    assert run.acceptance.conditional() == pytest.approx([0.8, 0.5, 0.25])


def test_the_printed_speculative_section_reads_as_acceptance(tmp_path):
    text = (
        (DATA / "qwen3-8b-h100-bs1.txt")
        .read_text()
        .replace(
            "=" * 50 + "\n",
            "------------------Speculative Decoding------------------\n"
            "Acceptance rate (%):                     43.33\n"
            "Acceptance length:                       2.30\n"
            "Per-position acceptance (%):\n"
            "  Position 0:                            80.00\n"
            "  Position 1:                            40.00\n"
            "  Position 2:                            10.00\n" + "=" * 50 + "\n",
        )
    )
    (run,) = read_result(write(tmp_path, "spec.txt", text))
    assert run.acceptance is not None
    assert run.acceptance.per_position == pytest.approx((0.8, 0.4, 0.1))
    assert run.acceptance.length == 2.3


def test_a_vllm_speculative_section_without_its_position_lines_counts_drafted_steps(tmp_path):
    """QA: a vLLM block pasted without its per-position lines was read as SGLang's (an accept
    length over every step), and n-gram's TPOT came out 55 % low."""
    section = (
        "---------------Speculative Decoding---------------\n"
        "Acceptance rate (%):                     50.00\n"
        "Acceptance length:                       2.50\n"
        "Drafts:                                  10000\n"
        "Draft tokens:                            30000\n"
        "Accepted tokens:                         15000\n"
    )
    text = (
        (DATA / "qwen3-8b-h100-bs8.txt")
        .read_text()
        .replace("=" * 50 + "\n", section + "=" * 50 + "\n")
    )
    (run,) = read_result(write(tmp_path, "spec.txt", text))
    assert run.acceptance is not None and run.acceptance.length == 2.5
    assert run.acceptance.drafted_steps_only


SGLANG_LINE = {
    "backend": "sglang",
    "dataset_name": "sharegpt",
    "request_rate": float("inf"),
    "max_concurrency": 16,
    "sharegpt_output_len": None,
    "duration": 30.5,
    "completed": 200,
    "total_input_tokens": 50000,
    "total_output_tokens": 40000,
    "total_output_tokens_retokenized": 39990,
    "request_throughput": 6.56,
    "output_throughput": 1311.5,
    "mean_e2e_latency_ms": 2400.0,
    "median_e2e_latency_ms": 2300.0,
    "p99_e2e_latency_ms": 6000.0,
    "mean_ttft_ms": 40.0,
    "median_ttft_ms": 35.0,
    "p99_ttft_ms": 120.0,
    "mean_tpot_ms": 11.0,
    "median_tpot_ms": 10.5,
    "p99_tpot_ms": 16.0,
    "mean_itl_ms": 9.0,
    "median_itl_ms": 8.0,
    "p95_itl_ms": 20.0,
    "p99_itl_ms": 40.0,
    "concurrency": 15.7,
    "accept_length": 2.6,
}


def test_sglang_output_file_reads_one_run_per_line_with_its_accept_length(tmp_path):
    second = {**SGLANG_LINE, "request_rate": 4.0, "max_concurrency": None, "accept_length": None}
    # json.dumps writes SGLang's float("inf") as Infinity
    text = json.dumps(SGLANG_LINE) + "\n" + json.dumps(second) + "\n"
    assert "Infinity" in text
    first, other = read_result(write(tmp_path, "sg.jsonl", text))
    assert first.kind == "sglang-jsonl" and first.closed and first.max_concurrency == 16
    assert first.metrics["mean_e2el_ms"] == 2400.0 and first.metrics["p99_itl_ms"] == 40.0
    assert first.acceptance is not None and first.acceptance.length == 2.6
    assert not first.acceptance.per_position
    assert other.request_rate == 4.0 and other.acceptance is None


def test_sglangs_printed_block_reads_its_own_labels(tmp_path):
    block = "\n".join(
        [
            "============ Serving Benchmark Result ============",
            "Backend:                                 sglang",
            "Traffic request rate:                    inf",
            "Max request concurrency:                 not set",
            "Successful requests:                     50",
            "Benchmark duration (s):                  10.00",
            "Total input tokens:                      5000",
            "Total generated tokens:                  2500",
            "Accept length:                           3.10",
            "----------------End-to-End Latency----------------",
            "Mean E2E Latency (ms):                   900.00",
            "Median E2E Latency (ms):                 850.00",
            "=" * 50,
        ]
    )
    (run,) = read_result(write(tmp_path, "sg.txt", block))
    assert run.kind == "sglang-text" and run.max_concurrency is None and run.closed
    assert run.metrics == {"mean_e2el_ms": 900.0, "median_e2el_ms": 850.0}
    assert run.acceptance is not None and run.acceptance.length == 3.1


METRICS_DUMP = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {d0}
vllm:spec_decode_num_drafts_total{{engine="1",model_name="m"}} {d1}
vllm:spec_decode_num_drafts_created{{engine="0",model_name="m"}} 1.7e9
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {t}
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {a}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="1",model_name="m",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {p1}
vllm:num_requests_running{{engine="0",model_name="m"}} 3.0
"""


def test_a_metrics_dump_sums_the_engines_and_two_dumps_give_the_runs_counters(tmp_path):
    after = write(
        tmp_path, "after.txt", METRICS_DUMP.format(d0=60, d1=40, t=200, a=110, p0=40, p1=30)
    )
    acc = read_metrics([after])
    assert acc.per_position == pytest.approx((0.8, 0.3)) and acc.length == pytest.approx(2.1)
    before = write(tmp_path, "before.txt", METRICS_DUMP.format(d0=10, d1=0, t=20, a=6, p0=3, p1=0))
    acc = read_metrics([before, after])
    assert acc.per_position == pytest.approx((74 / 90, 30 / 90))
    assert acc.length == pytest.approx(1 + 104 / 90)


def test_a_metrics_dump_beside_runs_that_state_their_acceptance_is_said_unused(tmp_path):
    """QA: --spec-metrics given beside a result that carries its own acceptance was neither
    used nor mentioned."""
    dump = write(tmp_path, "m.txt", METRICS_DUMP.format(d0=60, d1=40, t=200, a=110, p0=40, p1=30))
    data = vllm_json(spec_decode_per_position_acceptance_rates=[0.8, 0.4, 0.1])
    path = write(tmp_path, "s.json", data)
    args = ["compare", str(path), *DEPLOY, "--method", "eagle3", "--spec-metrics", str(dump)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "--spec-metrics not used: every run's file states its own acceptance" in " ".join(
        result.output.split()
    )


def test_counters_no_chain_could_count_are_refused(tmp_path):
    """QA: rising per-position counts, and a total that disagrees with their sum, were
    simulated as given; a server's counters obey the rules a result file's rates do."""
    rising = METRICS_DUMP.format(d0=60, d1=40, t=200, a=110, p0=20, p1=70)
    with pytest.raises(InputError, match="never rise"):
        read_metrics([write(tmp_path, "rising.txt", rising)])
    apart = METRICS_DUMP.format(d0=60, d1=40, t=200, a=200, p0=40, p1=30)
    with pytest.raises(InputError, match="num_accepted_tokens_total: 3, but"):
        read_metrics([write(tmp_path, "apart.txt", apart)])


# -- simulated metrics as the benchmarks define them --------------------------------------------
def test_weighted_percentiles_equal_numpys_of_the_repeated_values():
    rng = np.random.default_rng(0)
    for _ in range(50):
        values = np.sort(rng.random(int(rng.integers(1, 20))))
        weights = rng.integers(1, 6, len(values))
        for q in (0.0, 50.0, 99.0, 100.0):
            got = _repeated_percentile(values, weights, q)
            assert got == pytest.approx(np.percentile(np.repeat(values, weights), q), abs=1e-15)


def small_scenario(**workload) -> Scenario:
    sizes = {"lengths_from": None, "prompt": LengthSpec(mean=48), "output": LengthSpec(mean=12)}
    return Scenario(
        model="qwen3-8b",
        gpu="h100_sxm",
        workload=WorkloadConfig(requests=10, measure="whole", **{**sizes, **workload}),
    )


def test_simulated_tpot_is_each_requests_decode_time_over_its_tokens_after_the_first():
    sim = simulate(small_scenario(concurrency=3))
    got = simulated_metrics(sim)
    q = sim.requests
    tpot = (q.finish_s - q.first_token_s) / (q.output_tokens - 1)
    assert got["mean_tpot_ms"] == pytest.approx(1e3 * tpot.mean())
    assert got["p99_ttft_ms"] == pytest.approx(
        1e3 * np.percentile(q.first_token_s - q.arrival_s, 99)
    )
    assert got["output_throughput_tok_s"] == pytest.approx(q.output_tokens.sum() / q.finish_s.max())


# -- the round trip -----------------------------------------------------------------------------
@pytest.mark.parametrize("detailed", [False, True], ids=["totals", "detailed"])
@pytest.mark.parametrize(
    "load",
    [{"concurrency": 3}, {"arrival": "poisson", "rate": 20.0, "arrivals_end_at_rate": True}],
    ids=["closed", "rate"],
)
def test_a_simspec_run_written_in_vllms_format_compares_with_zero_error(tmp_path, load, detailed):
    sim = simulate(small_scenario(**load))
    path = write(tmp_path, "sim.json", vllm_result(sim, detailed=detailed))
    out = tmp_path / "cmp.json"
    result = runner.invoke(app, ["compare", str(path), *DEPLOY, "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())
    assert {r["metric"] for r in rows} == set(METRICS)
    assert all(r["rel_error"] == 0.0 for r in rows), [r for r in rows if r["rel_error"]]
    assert {r["lengths"] for r in rows} == {"per request" if detailed else "mean, fixed"}


def test_a_vllm_rate_run_sends_its_last_request_at_requests_over_rate_whatever_the_seed():
    """QA: compare drew raw Poisson gaps, so a 100-request run at 2/s predicted 1.74-2.18 req/s
    by seed; vllm bench serve rescales its arrivals to end at n / rate and times from its start
    (get_request's normalize_factor), SGLang's bench_serving sends the drawn gaps."""
    for seed in range(3):
        sc = small_scenario(arrival="poisson", rate=20.0, arrivals_end_at_rate=True)
        sim = simulate(sc.model_copy(update={"seed": seed}))
        assert sim.requests["arrival_s"].max() == pytest.approx(10 / 20.0)
        got = simulated_metrics(sim)
        assert got["duration_s"] == pytest.approx(sim.requests["finish_s"].max())  # from 0
    with pytest.raises(ValueError, match="arrivals_end_at_rate applies to poisson"):
        WorkloadConfig(concurrency=2, arrivals_end_at_rate=True)


# -- the command on the GPUStack runs -----------------------------------------------------------
def test_compare_prints_writes_and_plots_a_printed_run(tmp_path):
    # the BS=8 block at a tenth of its requests (the same mean lengths): a short simulation
    text = (DATA / "qwen3-8b-h100-bs8.txt").read_text()
    for old, new in (("100", "10"), ("23260", "2326"), ("22061", "2206"), ("24.05", "2.41")):
        text = text.replace(f"  {old}\n", f"  {new}\n")
    out, html = tmp_path / "c.csv", tmp_path / "c.html"
    result = runner.invoke(
        app,
        ["compare", str(write(tmp_path, "bs8.txt", text)), *DEPLOY]
        + ["--out", str(out), "--html", str(html)],
    )
    assert result.exit_code == 0, result.output
    assert "mean_tpot_ms" in result.output and "the run's means for every request" in result.output
    head, *rows = out.read_text().splitlines()
    assert head == "run,metric,measured,predicted,rel_error,load,lengths"
    assert len(rows) == 11  # TTFT, TPOT and ITL (mean, median, P99) and both throughputs
    assert all(',concurrency 8,"mean, fixed"' in row for row in rows)
    assert "plotly" in html.read_text() and "concurrency" in html.read_text()


@pytest.mark.slow
def test_compare_on_the_four_gpustack_json_runs_names_the_model_from_the_file(tmp_path):
    files = [str(DATA / f"qwen3-8b-h100-bs{bs}.json") for bs in sorted(GPUSTACK)]
    out = tmp_path / "c.json"
    result = runner.invoke(app, ["compare", *files, "--gpu", "h100_sxm", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [r for r in json.loads(out.read_text()) if r["metric"] == "mean_tpot_ms"]
    assert [r["measured"] for r in rows] == [GPUSTACK[bs] for bs in sorted(GPUSTACK)]
    assert all(math.isfinite(r["predicted"]) and r["predicted"] > 0 for r in rows)
    assert "model qwen3-8b, as the file names it" in result.output


# -- hostile files: one line naming the field, exit 2, nothing written --------------------------
@pytest.mark.parametrize(
    ("data", "needles"),
    [
        ('{"completed": 100, "duration": 4', ("not valid JSON",)),
        (vllm_json(completed=None), ("completed", "missing")),
        (vllm_json(duration=-3.0), ("duration", "must be > 0")),
        (vllm_json(total_output_tokens=None), ("total_output_tokens", "missing")),
        (vllm_json(completed=True), ("completed", "whole number")),
        (vllm_json(completed=0), ("completed", "no successful request")),
        (vllm_json(total_input_tokens=50), ("total_input_tokens", "every prompt")),
        (vllm_json(mean_tpot_ms="7.3"), ("mean_tpot_ms", "finite number")),
        (vllm_json(max_concurrency=0), ("max_concurrency", "whole number in [1, 16,384]")),
        (vllm_json(request_rate="fast"), ("request_rate", "finite number")),
        (vllm_json(request_rate=-1.0), ("request_rate", "must be > 0")),
        (vllm_json(input_lens=[1, 2], output_lens=[1]), ("output_lens", "one per request")),
        (vllm_json(input_lens=[1, -2], output_lens=[1, 1]), ("input_lens[1]", "whole number")),
        (
            vllm_json(spec_decode_per_position_acceptance_rates=[0.5, 1.5]),
            ("spec_decode_per_position_acceptance_rates[1]", "[0, 1]"),
        ),
        ("[" * 100_000, ("nested deeper",)),
        ("[1, 2]", ("JSON object",)),
        ("", ("is empty",)),
    ],
    ids=lambda v: str(v)[:30] if isinstance(v, str) else None,
)
def test_a_bad_vllm_result_is_one_line_naming_the_field(tmp_path, data, needles):
    path = write(tmp_path, "bad.json", data)
    out = tmp_path / "out.csv"
    result = runner.invoke(app, ["compare", str(path), *DEPLOY, "--out", str(out)])
    one_error(result, *needles)
    assert not out.exists()


def test_a_nan_metric_is_refused_by_name(tmp_path):
    path = write(tmp_path, "nan.json", json.dumps(vllm_json()).replace("7.38", "NaN"))
    one_error(runner.invoke(app, ["compare", str(path), *DEPLOY]), "mean_tpot_ms", "finite")


@pytest.mark.parametrize(
    ("cut", "needles"),
    [
        ("Total generated tokens:", ("Total generated tokens", "missing", "truncated")),
        ("Benchmark duration (s):", ("Benchmark duration (s)", "missing")),
    ],
)
def test_a_truncated_printed_block_names_the_missing_line(tmp_path, cut, needles):
    text = (DATA / "qwen3-8b-h100-bs2.txt").read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith(cut)]
    path = write(tmp_path, "cut.txt", "\n".join(lines))
    one_error(runner.invoke(app, ["compare", str(path), *DEPLOY]), *needles)


def test_a_printed_value_that_is_no_number_is_refused_by_its_label(tmp_path):
    text = (DATA / "qwen3-8b-h100-bs2.txt").read_text().replace("85.78", "-85.78")
    path = write(tmp_path, "neg.txt", text)
    one_error(runner.invoke(app, ["compare", str(path), *DEPLOY]), "Benchmark duration (s)", "> 0")


def test_a_bad_sglang_line_is_refused_with_its_line_number(tmp_path):
    bad = {**SGLANG_LINE, "duration": "later"}
    text = json.dumps(SGLANG_LINE) + "\n" + json.dumps(bad) + "\n"
    path = write(tmp_path, "sg.jsonl", text)
    one_error(runner.invoke(app, ["compare", str(path), *DEPLOY]), "line 2", "duration")


def test_a_file_over_the_cap_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.json"
    path.touch()
    os.truncate(path, 300 * 1024 * 1024)  # sparse: no disk, and never read
    one_error(runner.invoke(app, ["compare", str(path), *DEPLOY]), "larger than 268,435,456")


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    one_error(runner.invoke(app, ["compare", str(path), *DEPLOY]), "not a regular file")


@pytest.mark.slow
def test_a_deep_or_huge_result_is_refused_within_bounded_memory(tmp_path):
    deep = write(tmp_path, "deep.json", "[" * 10_000_000)
    proc = run_capped(["-m", "simspec.cli.main", "compare", str(deep), *DEPLOY], 2 << 30)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-500:]
    assert "nested deeper" in proc.stderr


def test_more_requests_than_one_command_simulates_are_refused_before_any_run(tmp_path):
    paths = [
        str(write(tmp_path, f"{i}.json", vllm_json(
            completed=1_000_000, num_prompts=1_000_000, total_input_tokens=10**8 + i,
            total_output_tokens=10**8,
        )))
        for i in range(3)
    ]  # fmt: skip
    one_error(runner.invoke(app, ["compare", *paths, *DEPLOY]), "3,000,000 requests")


def test_a_result_given_twice_is_refused_not_counted_twice(tmp_path):
    """The same file twice, or a copy of it, would count its runs twice (QA: compare a.json
    a.json printed each run twice under one name)."""
    path = write(tmp_path, "a.json", vllm_json())
    one_error(runner.invoke(app, ["compare", str(path), str(path), *DEPLOY]), "given twice")
    copy = tmp_path / "copy.json"
    copy.write_bytes(path.read_bytes())
    one_error(
        runner.invoke(app, ["compare", str(path), str(copy), *DEPLOY]), "copy.json", "bytes of"
    )


def test_a_burst_wider_than_simspec_holds_in_flight_is_refused(tmp_path):
    burst = {
        **vllm_json(
            completed=20_000,
            num_prompts=20_000,
            total_input_tokens=10**6,
            total_output_tokens=10**6,
        ),
        "max_concurrency": None,
    }
    path = write(tmp_path, "burst.json", burst)
    one_error(runner.invoke(app, ["compare", str(path), *DEPLOY]), "max_concurrency", "16,384")


def test_a_metrics_dump_given_as_a_result_points_to_spec_metrics(tmp_path):
    path = write(tmp_path, "m.txt", METRICS_DUMP.format(d0=1, d1=1, t=2, a=1, p0=1, p1=0))
    one_error(runner.invoke(app, ["compare", str(path), *DEPLOY]), "--spec-metrics")


def test_dumps_given_after_before_are_refused(tmp_path):
    after = write(tmp_path, "a.txt", METRICS_DUMP.format(d0=60, d1=40, t=200, a=110, p0=40, p1=30))
    before = write(tmp_path, "b.txt", METRICS_DUMP.format(d0=10, d1=0, t=20, a=5, p0=0, p1=0))
    with pytest.raises(InputError, match="drafts counted"):
        read_metrics([after, before])


def test_a_speculative_run_compared_as_plain_decoding_asks_for_the_method(tmp_path):
    data = vllm_json(spec_decode_acceptance_length=2.1)
    path = write(tmp_path, "s.json", data)
    one_error(runner.invoke(app, ["compare", str(path), *DEPLOY]), "--method", "2.10")


def test_an_accept_length_past_k_plus_one_is_refused_by_name(tmp_path):
    path = write(tmp_path, "sg.jsonl", json.dumps({**SGLANG_LINE, "accept_length": 9.0}))
    result = runner.invoke(app, ["compare", str(path), *DEPLOY, "--method", "eagle3", "--k", "3"])
    one_error(result, "acceptance length", "K + 1 = 4")


def test_an_output_the_command_does_not_write_is_refused_before_any_run(tmp_path):
    path = DATA / "qwen3-8b-h100-bs1.json"
    result = runner.invoke(app, ["compare", str(path), *DEPLOY, "--out", str(tmp_path / "x.txt")])
    one_error(result, "--out", ".csv or .json")


def test_a_file_of_more_runs_than_one_command_simulates_is_refused_before_parsing_them(tmp_path):
    line = json.dumps(vllm_json()) + "\n"
    path = write(tmp_path, "many.jsonl", line * 10_001)
    one_error(runner.invoke(app, ["compare", str(path), *DEPLOY]), "10,001 runs", "10,000")


def test_k_without_a_speculative_method_is_refused(tmp_path):
    path = DATA / "qwen3-8b-h100-bs1.json"
    one_error(runner.invoke(app, ["compare", str(path), *DEPLOY, "--k", "4"]), "--k", "--method")


def plans_of(tmp_path: Path, path: Path, method: str, k=None, shared=None):
    from simspec.studies.bench.compare import plan_run

    deploy = {"model": "qwen3-8b", "gpu": "h100_sxm"}
    return [plan_run(r, deploy, method, k, shared, tmp_path) for r in read_result(path)]


def test_a_runs_per_position_acceptance_is_the_simulated_chains_alpha(tmp_path):
    data = vllm_json(spec_decode_per_position_acceptance_rates=[0.8, 0.4, 0.1, 0.05])
    (plan,) = plans_of(tmp_path, write(tmp_path, "s.json", data), "eagle3")
    method = plan.scenario.method
    assert method.k == 4 and method.tree in (None, "chain")
    assert method.acceptance.alpha == pytest.approx([0.8, 0.5, 0.25, 0.5])


def test_an_accept_length_is_tau_at_the_methods_k(tmp_path):
    (plan,) = plans_of(tmp_path, write(tmp_path, "sg.jsonl", json.dumps(SGLANG_LINE)), "eagle3", 4)
    acc = plan.scenario.method.acceptance
    assert (acc.tau, acc.tau_k, plan.scenario.method.k) == (2.6, 4, 4)
    assert any("τ 2.60 at K=4" in note for note in plan.notes)


def test_a_runs_acceptance_is_taken_as_sampled_at_the_runs_temperature_and_top_p(tmp_path):
    """QA: compare --temperature 1 scaled the run's own acceptance down as if it had been
    measured greedily (TPOT 4.05 -> 4.78 ms) while the note said the run's was used; the
    server sampled at the temperature given, so its acceptance is the simulation's as is."""
    from simspec.engine.acceptance.inversion import run_alpha_profile
    from simspec.studies.bench.compare import plan_run

    data = vllm_json(spec_decode_per_position_acceptance_rates=[0.7, 0.5, 0.3])
    (run,) = read_result(write(tmp_path, "s.json", data))
    greedy = {"model": "qwen3-8b", "gpu": "h100_sxm"}
    sampled = greedy | {"temperature": 1.0, "top_p": 0.9}
    plans = [plan_run(run, d, "eagle3", None, None, tmp_path) for d in (greedy, sampled)]
    alphas = []
    for plan in plans:
        sc = plan.scenario
        alphas.append(run_alpha_profile(sc.method.acceptance, 3, 1.0, sc.temperature, sc.top_p))
    assert list(alphas[0]) == pytest.approx([0.7, 5 / 7, 0.6])
    assert list(alphas[1]) == pytest.approx(list(alphas[0]))
    assert any("sampled at T=1, top-p 0.9" in note for note in plans[1].notes)
    (plain_run,) = read_result(DATA / "qwen3-8b-h100-bs1.json")
    plain = plan_run(plain_run, sampled, "autoregressive", None, None, tmp_path)
    assert any("plain decoding's time does not depend on them" in n for n in plain.notes)


def test_a_tree_method_stating_only_its_length_runs_as_its_engine_drafts_it(tmp_path):
    """QA: the same vLLM run gave Medusa 3.68 ms with per-position rates (a chain) and 3.96 ms
    with only an acceptance length (the preset's 63-node tree, which vLLM does not verify)."""
    rates = vllm_json(spec_decode_per_position_acceptance_rates=[0.7, 0.5, 0.3])
    length = vllm_json(spec_decode_acceptance_length=2.5)
    shapes = []
    for name, data in (("rates.json", rates), ("length.json", length)):
        (plan,) = plans_of(tmp_path, write(tmp_path, name, data), "medusa1", 3)
        method = plan.scenario.method
        shapes.append((method.k, method.tree in (None, "chain"), method.tree_nodes))
    assert shapes[0] == shapes[1] == (3, True, None)


@pytest.mark.parametrize("method", ["ngram", "suffix"])
def test_a_lookups_vllm_acceptance_is_not_taken_for_every_step(tmp_path, method):
    """QA: vLLM counts acceptance over the steps that drafted alone; an n-gram run as measured
    drafted at every step, 2.5x its own speed. compare replays the preset and says why;
    --acceptance-from refuses it; SGLang's accept_length (every step) is still taken."""
    data = vllm_json(spec_decode_per_position_acceptance_rates=[0.8, 0.6, 0.5])
    path = write(tmp_path, "s.json", data)
    (plan,) = plans_of(tmp_path, path, method)
    assert plan.scenario.method.acceptance.tokens is not None  # the preset's replay
    assert any("steps that drafted alone" in note for note in plan.notes)
    result = runner.invoke(
        app, ["sweep", "--methods", method, "--acceptance-from", str(path), "--batch-sizes", "1"]
    )
    one_error(result, "acceptance", "drafted alone")
    sg = write(tmp_path, "sg.jsonl", json.dumps(SGLANG_LINE))
    (plan,) = plans_of(tmp_path, sg, "ngram", 4)
    assert plan.scenario.method.acceptance.tau == 2.6


def test_a_metrics_dump_gives_acceptance_to_runs_whose_file_has_none(tmp_path):
    dump = write(tmp_path, "m.txt", METRICS_DUMP.format(d0=60, d1=40, t=200, a=110, p0=40, p1=30))
    shared = read_metrics([dump])
    (plan,) = plans_of(tmp_path, DATA / "qwen3-8b-h100-bs1.json", "eagle3", shared=shared)
    assert plan.scenario.method.acceptance.alpha == pytest.approx([0.8, 0.375])


def test_per_request_lengths_are_simulated_as_listed(tmp_path):
    data = vllm_json(
        completed=3,
        total_input_tokens=60,
        total_output_tokens=18,
        input_lens=[10, 20, 30],
        output_lens=[5, 6, 7],
    )
    (plan,) = plans_of(tmp_path, write(tmp_path, "d.json", data), "autoregressive")
    sim = simulate(plan.scenario)
    assert sorted(zip(sim.requests.prompt_tokens, sim.requests.output_tokens, strict=True)) == [
        (10, 5),
        (20, 6),
        (30, 7),
    ]
    assert plan.lengths == "per request" and plan.scenario.workload.concurrency == 3


@pytest.mark.parametrize(
    ("over", "needles"),
    [
        ({"request_rate": 2.5, "max_concurrency": 4}, ("max_concurrency", "not modelled")),
        ({"request_rate": 2.5, "max_concurrency": None, "burstiness": 0.5}, ("burstiness",)),
    ],
)
def test_a_load_simspec_cannot_run_is_refused_not_approximated(tmp_path, over, needles):
    """A client that holds arrivals back under a rate, or draws gamma gaps, is a load simspec's
    open loop cannot run: one line naming the field, never a Poisson stand-in."""
    path = write(tmp_path, "r.json", vllm_json(**over))
    one_error(runner.invoke(app, ["compare", str(path), *DEPLOY]), *needles)


def test_compare_refuses_a_model_other_than_the_one_the_run_names():
    run = str(ROOT / "tests" / "data" / "bench" / "qwen3-8b-h100-bs1.json")
    other = runner.invoke(app, ["compare", run, "--model", "llama-3.1-8b"])
    assert other.exit_code == 2
    assert "--model" in other.output and "qwen3-8b" in " ".join(other.output.split())
    same = runner.invoke(app, ["compare", run, "--model", "Qwen/Qwen3-8B"])
    assert same.exit_code == 0, same.output


def test_a_run_naming_a_model_simspec_lacks_says_what_it_was_simulated_as(tmp_path):
    """QA: the explorer's Compare tab (and compare --model) simulated a run of
    "acme/unknown-7b" as the model given, with no note (the GPU's case said so)."""
    path = write(tmp_path, "u.json", vllm_json(model_id="acme/unknown-7b"))
    result = runner.invoke(app, ["compare", str(path), "--model", "qwen3-8b"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "the file names model 'acme/unknown-7b', no simspec preset: simulated as qwen3-8b" in (
        text
    )


def test_a_text_block_and_a_json_whose_speculative_counters_cannot_be_are_refused(tmp_path):
    base = ROOT / "tests" / "data" / "bench" / "qwen3-8b-h100-bs1"
    block = base.with_suffix(".txt").read_text().rstrip("\n").split("\n")
    spec = [
        "---------------Speculative Decoding---------------",
        "Acceptance rate (%):                     50.00",
        "Acceptance length:                       3.90",
        "Per-position acceptance (%):",
        "  Position 0:                            40.00",
        "  Position 1:                            80.00",
        "  Position 2:                            30.00",
    ]
    text = tmp_path / "rising.txt"
    text.write_text("\n".join([*block[:-1], *spec, block[-1]]) + "\n")
    rising = runner.invoke(app, ["compare", str(text), "--method", "eagle3"])
    assert rising.exit_code == 2 and "never rise" in " ".join(rising.output.split())
    data = json.loads(base.with_suffix(".json").read_text())
    data |= {
        "spec_decode_per_position_acceptance_rates": [],
        "spec_decode_acceptance_length": None,
    }
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(data))
    said = runner.invoke(app, ["compare", str(empty), "--method", "eagle3"])
    assert said.exit_code == 2 and "spec_decode_acceptance_length" in said.output


def test_two_result_files_of_one_name_keep_two_names(tmp_path):
    from simspec.studies.bench import read_results

    bench = ROOT / "tests" / "data" / "bench"
    runs = read_results([bench / "qwen3-8b-h100-bs1.json", bench / "qwen3-8b-h100-bs8.json"])
    assert [r.name for r in runs] == ["qwen3-8b-h100-bs1.json", "qwen3-8b-h100-bs8.json"]
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    a = write(tmp_path / "a", "result.json", vllm_json(max_concurrency=1))
    b = write(tmp_path / "b", "result.json", vllm_json(max_concurrency=2))
    twice = read_results([a, b])
    assert len({r.name for r in twice}) == 2


def test_a_runs_gpu_label_is_taken_or_said(tmp_path):
    data = json.loads((ROOT / "tests" / "data" / "bench" / "qwen3-8b-h100-bs1.json").read_text())
    vendor = tmp_path / "vendor.json"
    vendor.write_text(json.dumps({**data, "gpu": "NVIDIA H200"}))
    said = runner.invoke(app, ["compare", str(vendor)])
    assert said.exit_code == 0 and "no simspec GPU id" in " ".join(said.output.split())
    runs = []
    for name, source in (("a.json", "bs1"), ("b.json", "bs8")):
        d = json.loads(
            (ROOT / "tests" / "data" / "bench" / f"qwen3-8b-h100-{source}.json").read_text()
        )
        (tmp_path / name).write_text(json.dumps({**d, "gpu": "h200"}))
        runs.append(str(tmp_path / name))
    out = tmp_path / "c.yaml"
    fit = runner.invoke(app, ["calibrate", "bench", *runs, "--out", str(out)])
    assert fit.exit_code == 0, fit.output  # no --gpu: the runs' own, as compare takes it
    assert "gpu h200, as the runs' gpu metadata says" in fit.output


def test_a_mean_length_past_the_simulators_bound_names_the_files_fields(tmp_path):
    """2^31 input tokens over 8 requests: the error names the file and its totals, not
    LengthSpec's ``mean`` (QA)."""
    data = vllm_json(total_input_tokens=2**31, completed=8)
    data = {k: v for k, v in data.items() if k not in ("input_lens", "output_lens")}
    path = write(tmp_path, "huge.json", data)
    result = runner.invoke(app, ["compare", str(path), *DEPLOY])
    assert result.exit_code == 2
    assert "huge.json: total_input_tokens" in result.output and "completed" in result.output


def test_an_sglang_result_is_compared_on_the_sglang_profile_unless_told_otherwise(tmp_path):
    """SGLang's bench output is an SGLang server's: compare runs it on the sglang profile,
    saying so (QA: it had run on the default vLLM one without a word)."""
    path = write(tmp_path, "sg.jsonl", json.dumps({**SGLANG_LINE, "accept_length": None}) + "\n")
    out = tmp_path / "c.csv"
    result = runner.invoke(app, ["compare", str(path), *DEPLOY, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "engine sglang, as the runs' SGLang bench output says" in result.output
    told = runner.invoke(
        app, ["compare", str(path), *DEPLOY, "--engine", "vllm", "--out", str(out)]
    )
    assert told.exit_code == 0 and "engine sglang, as" not in told.output


def test_a_concurrency_cap_above_the_prompts_is_labelled_as_what_ran(tmp_path):
    """max_concurrency 256 over 100 prompts ran all 100 at once: the load says so and the
    note quotes the file's own cap (QA: it read "closed loop of 100 (max_concurrency 100)")."""
    data = vllm_json(max_concurrency=256)
    path = write(tmp_path, "cap.json", data)
    (run,) = read_result(path)
    assert run.load_label == f"concurrency 256 (all {run.requests} in flight)"
    result = runner.invoke(app, ["compare", str(path), *DEPLOY])
    assert result.exit_code == 0, result.output
    assert "max_concurrency 256" in result.output


def test_a_throughput_its_own_totals_do_not_give_is_refused_by_name(tmp_path):
    """vLLM's output_throughput is total_output_tokens over the duration (and request
    throughput completed over it): a file whose numbers disagree is another run's or edited
    (QA: 10x the totals' throughput was compared, -90 %, without a word)."""
    good = vllm_json()
    bad = {**good, "output_throughput": good["output_throughput"] * 10}
    with pytest.raises(InputError) as err:
        read_result(write(tmp_path, "o.json", bad))
    assert err.value.field.endswith("output_throughput")
    rounded = {**good, "output_throughput": round(good["output_throughput"], 2)}
    read_result(write(tmp_path, "r.json", rounded))  # a printed, rounded number stands


def test_a_run_with_failed_requests_says_so(tmp_path):
    """QA: 10 of 30 requests failed and the comparison said nothing."""
    (plan,) = plans_of(tmp_path, write(tmp_path, "f.json", vllm_json(failed=10)), "autoregressive")
    assert any("10 of the" in n and "failed" in n for n in plan.notes)
    (plan,) = plans_of(tmp_path, write(tmp_path, "ok.json", vllm_json(failed=0)), "autoregressive")
    assert not any("failed" in n for n in plan.notes)
    # under a rate the client spread every request sent over total / rate, the failed ones
    # too: the ones that succeeded arrive at their share of the rate (QA: +11 % throughput)
    rated = vllm_json(failed=10, request_rate=4.0, max_concurrency=None)
    (plan,) = plans_of(tmp_path, write(tmp_path, "r.json", rated), "autoregressive")
    n = plan.scenario.workload.requests
    assert plan.scenario.workload.rate == pytest.approx(4.0 * n / (n + 10))
    assert plan.scenario.workload.arrivals_end_at_rate
    # a file of a vLLM before v0.11.1 has no failed key: the prompts sent less those completed
    # (QA: 30 of 100 failed read as none, the throughput predicted 30 % high)
    older = vllm_json(failed=None, num_prompts=n + 10, request_rate=4.0, max_concurrency=None)
    (run,) = read_result(write(tmp_path, "old.json", older))
    assert run.failed == 10
    bad = vllm_json(failed=None, num_prompts=n - 1)
    with pytest.raises(InputError, match="is below completed"):
        read_result(write(tmp_path, "bad.json", bad))


def test_an_sglang_runs_itl_splits_each_chunk_over_its_tokens():
    """QA: SGLang's bench_serving records gap / tokens once per token of a chunk
    (adjust_itl); simspec timed one gap per chunk, a speculative run's ITL tau times its."""
    from simspec.config import MethodConfig, Scenario, WorkloadConfig
    from simspec.engine.simulation import simulate
    from simspec.studies.bench.simulated import simulated_metrics

    wl = WorkloadConfig(concurrency=4, requests=16, measure="whole")
    plain = simulate(Scenario(workload=wl))
    assert simulated_metrics(plain, per_token_itl=True)["mean_itl_ms"] == pytest.approx(
        simulated_metrics(plain)["mean_itl_ms"]
    )
    eagle = MethodConfig(name="eagle3", k=3, acceptance={"alpha": 0.8})
    sim = simulate(Scenario(method=eagle, workload=wl))
    chunk, token = simulated_metrics(sim), simulated_metrics(sim, per_token_itl=True)
    it = sim.iterations[sim.iterations.decode_seqs > 0]
    per_chunk = it.spec_tokens.sum() / it.spec_seqs.sum()  # tokens a decoder streams a step
    assert chunk["mean_itl_ms"] / token["mean_itl_ms"] == pytest.approx(per_chunk, rel=0.05)
    assert token["mean_tpot_ms"] == chunk["mean_tpot_ms"]


@pytest.mark.parametrize(
    ("backend", "accept", "per_token"),
    [
        ("sglang", 2.6, True),  # async_request_sglang_generate splits each chunk's gap
        ("sglang-native", None, True),
        ("sglang-oai", 2.6, True),  # calculate_metrics' retokenized ITLs under speculation
        ("sglang-oai-chat", None, False),
        ("vllm", 2.6, False),  # an OpenAI endpoint's chunks, one gap each
        ("trt", 2.6, False),
    ],
)
def test_an_sglang_lines_itl_is_per_token_as_its_backend_records_it(
    tmp_path, backend, accept, per_token
):
    """QA: every bench_serving line was scored as per-token ITL; --backend vllm (and the
    OpenAI backends without speculation) record one gap per chunk (0.5.5 bench_serving.py)."""
    line = {**SGLANG_LINE, "backend": backend, "accept_length": accept}
    (run,) = read_result(write(tmp_path, "sg.jsonl", json.dumps(line) + "\n"))
    assert run.per_token_itl is per_token


def test_a_trace_timed_sglang_run_is_refused_naming_why(tmp_path):
    """QA: --use-trace-timestamps writes request_rate "trace", refused as 'must be a finite
    number'."""
    line = {**SGLANG_LINE, "request_rate": "trace"}
    with pytest.raises(InputError, match="trace's own timestamps"):
        read_result(write(tmp_path, "sg.jsonl", json.dumps(line) + "\n"))


# -- QA, stop 57: what a file says of its load, and files of another kind ------------------
def test_a_block_reads_the_load_vllm_printed_above_it_and_its_failed_requests(tmp_path):
    """vLLM prints the asked load above the banner; a paste that keeps it was simulated as a
    burst of every request (QA: throughput +1,626 %); "Failed requests" went unread."""
    block = (DATA / "qwen3-8b-h100-bs4.txt").read_text()
    block = "\n".join(
        line
        for line in block.splitlines()
        if not line.strip().startswith("Maximum request concurrency")
    )
    block = block.replace("Successful requests:", "Failed requests:    3\nSuccessful requests:")
    above = "Traffic request rate: 2.0\nBurstiness factor: 1.0 (Poisson process)\n"
    above += "Maximum request concurrency: None\n"
    (run,) = read_result(write(tmp_path, "run.txt", above + block))
    assert (run.request_rate, run.max_concurrency, run.failed) == (2.0, None, 3)
    gamma = above.replace("1.0 (Poisson process)", "0.5 (Gamma distribution)")
    (run,) = read_result(write(tmp_path, "gamma.txt", gamma + block))
    assert run.burstiness == 0.5
    out = runner.invoke(app, ["compare", str(tmp_path / "gamma.txt"), *DEPLOY])
    assert out.exit_code == 2 and "burstiness" in out.output


def test_a_ramped_run_a_throughput_result_and_a_run_without_metrics_are_refused(tmp_path):
    ramp = write(
        tmp_path,
        "ramp.json",
        vllm_json(ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=10),
    )
    one_error(runner.invoke(app, ["compare", str(ramp), *DEPLOY]), "ramp_up_strategy")
    throughput = {"elapsed_time": 12.0, "num_requests": 100, "total_num_tokens": 40000}
    throughput |= {"requests_per_second": 8.3, "tokens_per_second": 3333.0}
    with pytest.raises(InputError, match="vllm bench throughput result"):
        read_result(write(tmp_path, "tput.json", throughput))
    with pytest.raises(InputError, match="vllm bench latency result"):
        read_result(write(tmp_path, "lat.json", {"avg_latency": 1.2, "latencies": [1.2]}))
    bare = {k: v for k, v in vllm_json().items() if not k.endswith(("_ms", "throughput"))}
    out = runner.invoke(app, ["compare", str(write(tmp_path, "bare.json", bare)), *DEPLOY])
    assert out.exit_code == 2 and "holds no metric simspec compares" in out.output
    assert not (tmp_path / "predictions.csv").exists()


def test_a_result_saved_with_a_byte_order_mark_reads(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(vllm_json()).encode())
    (run,) = read_result(path)
    assert run.requests == vllm_json()["completed"]


@pytest.mark.parametrize("k", ["0", "-1", "100"])
def test_compare_refuses_a_draft_length_out_of_range(k):
    """QA: compare --method eagle3 --k 0 ran plain decoding labelled eagle3, where every other
    command refuses it; -1 and 100 were named 'k' with a lower bound of 0."""
    result = runner.invoke(
        app, ["compare", str(DATA / "qwen3-8b-h100-bs1.json"), "--method", "eagle3", "--k", k]
    )
    one_error(result, "--k: must be 1 to 64", "autoregressive is the method that drafts none")


def test_a_draft_length_the_user_wrote_must_be_the_acceptance_files(tmp_path):
    """QA: --acceptance-from ran its file's K in place of the K a --speculative-config or a
    config file wrote, without a word (--k was refused)."""
    rates = vllm_json(
        spec_decode_per_position_acceptance_rates=[0.8, 0.6, 0.4],
        spec_decode_acceptance_length=2.8,
    )
    path = str(write(tmp_path, "r.json", rates))
    spec = json.dumps({"method": "eagle3", "num_speculative_tokens": 5})
    base = ["sweep", "--acceptance-from", path, "--batch-sizes", "1"]
    one_error(
        runner.invoke(app, [*base, "--speculative-config", spec]),
        "--speculative-config",
        "drafted 3 tokens a step",
    )
    config = tmp_path / "c.yaml"
    config.write_text("methods:\n  - {name: eagle3, k: 4}\n")
    one_error(
        runner.invoke(app, [*base, "--config", str(config)]),
        "methods.eagle3.k",
        "drafted 3 tokens a step",
    )


def test_a_checkpoint_named_in_fp8_runs_in_fp8_or_says_it_did_not(tmp_path):
    """QA: Qwen/Qwen3-8B-FP8 given --model qwen3-8b ran the preset's bf16 without a word (a
    35 % swing with --precision fp8); a preset's own -FP8 id is that preset in block FP8."""
    from simspec.studies.bench.compare import named_precision, plan_run

    assert named_precision("Qwen/Qwen3-8B-FP8") == "FP8"
    assert named_precision("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4") == "AWQ"
    assert named_precision("meta-llama/Llama-3.1-8B-Instruct") is None
    data = vllm_json(model_id="Qwen/Qwen3-8B-FP8")
    (run,) = read_result(write(tmp_path, "fp8.json", data))
    plan = plan_run(
        run, {"model": "qwen3-8b", "gpu": "h100_sxm"}, "autoregressive", None, None, tmp_path
    )
    assert any("names FP8 weights, and no --precision was given" in n for n in plan.notes)
    given = {"model": "qwen3-8b", "gpu": "h100_sxm", "precision": "fp8"}
    plan = plan_run(run, given, "autoregressive", None, None, tmp_path)
    assert not any("names FP8" in n for n in plan.notes)
    glm = vllm_json(model_id="zai-org/GLM-4.5-Air-FP8")
    (run,) = read_result(write(tmp_path, "glm.json", glm))
    plan = plan_run(run, {"gpu": "h200", "tp": 4}, "autoregressive", None, None, tmp_path)
    assert plan.scenario.precision == "fp8"
    assert any("weights in fp8, as the file's model" in n for n in plan.notes)


def test_the_count_of_metrics_compared_leaves_out_those_without_an_error(tmp_path):
    """QA: one-token outputs (TPOT and ITL 0 in the file) were counted among "11 metric(s)
    compared", 6 of them nan on both sides."""
    zero = {f"{s}_{m}_ms": 0.0 for s in ("mean", "median", "p99") for m in ("tpot", "itl")}
    run = vllm_json(total_output_tokens=100, **zero)
    path = write(tmp_path, "one_token.json", run)
    out = tmp_path / "c.csv"
    result = runner.invoke(app, ["compare", str(path), *DEPLOY, "--out", str(out)])
    assert result.exit_code == 0, result.output
    import pandas as pd

    frame = pd.read_csv(out)
    scored = int(frame.rel_error.notna().sum())
    assert 0 < scored < len(frame)
    text = " ".join(result.output.split())
    assert f"{scored} metric(s) compared ({len(frame) - scored} more without an error" in text
