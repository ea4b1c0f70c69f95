"""Arrival traces (workload.arrival: trace): loading, transformations, a single-replica replay."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from simspec.catalog.arrival_traces import (
    acceptance_dataset,
    load_arrival_trace,
    packaged_arrival_traces,
    rescale,
    tile,
    transformed,
    window,
)
from simspec.catalog.methods import preset_method
from simspec.cli.options import trace_workload
from simspec.config import Scenario, WorkloadConfig
from simspec.engine.simulation import simulate
from simspec.engine.window import layout
from simspec.engine.workload import request_count
from simspec.errors import InputError


def _csv(tmp_path, text: str, name: str = "t.csv") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_packaged_traces_load_with_their_counts_and_datasets():
    assert packaged_arrival_traces() == ["azure-code", "azure-conv"]
    conv, code = load_arrival_trace("azure-conv"), load_arrival_trace("azure-code")
    assert (len(conv), len(code)) == (19_366, 8_819)  # SOURCE.md
    assert (conv.dataset, code.dataset) == ("sharegpt", "instructcoder")
    assert conv.arrival_s[0] == 0.0 and np.all(np.diff(conv.arrival_s) >= 0)
    assert conv.arrival_s[1] == pytest.approx(4.314579)  # 18:15:50.9951690 - 18:15:46.6805900
    assert (conv.prompt_len[0], conv.output_len[0]) == (374, 44)
    assert 5.4 < conv.mean_rate < 5.6 and 2.5 < code.mean_rate < 2.7  # SOURCE.md: 5.5, 2.6


def test_azure_and_plain_schemas(tmp_path):
    azure = _csv(
        tmp_path,
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.5000000,10,3\n2023-11-16 18:15:48.0000000,20,4\n",
        "a.csv",
    )
    t = load_arrival_trace(azure)
    assert t.arrival_s.tolist() == [0.0, 1.5] and t.prompt_len.tolist() == [10, 20]
    assert t.dataset is None
    plain = _csv(tmp_path, "arrival_s,prompt_len,output_len,domain\n2,5,6,code\n3.5,7,8,code\n")
    p = load_arrival_trace(plain)
    assert p.arrival_s.tolist() == [0.0, 1.5] and p.output_len.tolist() == [6, 8]
    assert p.dataset == "instructcoder" and acceptance_dataset(p) == "instructcoder"
    jsonl = tmp_path / "t.jsonl.gz"
    rows = [{"arrival_s": 0, "prompt_len": 3, "output_len": 4, "dataset": "gsm8k"}]
    jsonl.write_bytes(gzip.compress("\n".join(map(json.dumps, rows)).encode()))
    assert load_arrival_trace(str(jsonl)).dataset == "gsm8k"
    parquet = tmp_path / "t.parquet"
    pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_len": [1, 2], "output_len": [3, 4]}).to_parquet(
        parquet
    )
    assert load_arrival_trace(str(parquet)).prompt_len.tolist() == [1, 2]


@pytest.mark.parametrize(
    "body, where",
    [
        ("1,5,nan\n", "row 2 column output_len"),
        ("1,-5,3\n", "row 2 column prompt_len"),
        ("1,5,0\n", "row 2 column output_len"),
        ("1,5.5,2\n", "row 2 column prompt_len"),
        ("inf,5,2\n", "row 2 column arrival_s"),
        ("-1,5,2\n", "row 2 column arrival_s"),
        ("0.5,5,2\n", "row 2 column arrival_s: earlier than the row before"),
    ],
)
def test_bad_rows_are_named(tmp_path, body, where):
    path = _csv(tmp_path, "arrival_s,prompt_len,output_len\n1,5,2\n" + body)
    with pytest.raises(InputError, match=where) as err:
        load_arrival_trace(path)
    assert err.value.field == "workload.arrival_trace"


def test_bad_files(tmp_path):
    with pytest.raises(InputError, match="needs columns TIMESTAMP"):
        load_arrival_trace(_csv(tmp_path, "a,b\n1,2\n"))
    with pytest.raises(InputError, match="row 1 column TIMESTAMP"):
        load_arrival_trace(
            _csv(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n", "b.csv")
        )
    with pytest.raises(InputError, match="no arrival trace"):
        load_arrival_trace(str(tmp_path / "missing.csv"))
    with pytest.raises(InputError, match="row 1 column domain"):
        load_arrival_trace(
            _csv(tmp_path, "arrival_s,prompt_len,output_len,domain\n0,1,1,poetry\n", "c.csv")
        )
    mixed = load_arrival_trace(
        _csv(tmp_path, "arrival_s,prompt_len,output_len,domain\n0,1,1,chat\n1,1,1,code\n", "d.csv")
    )
    with pytest.raises(InputError, match="mixes domains"):
        acceptance_dataset(mixed)
    assert acceptance_dataset(mixed, "sharegpt") == "sharegpt"


def test_lengths_only_file_replays_as_an_arrival_trace(tmp_path):
    """The issue's symptom: a lengths-only file given as workload.trace failed with "first
    record has no acc_len methods"; as an arrival trace it replays."""
    path = _csv(tmp_path, "arrival_s,prompt_len,output_len\n0,100,20\n0.5,200,30\n1.0,50,10\n")
    sc = Scenario(
        workload=WorkloadConfig(arrival="replay", arrival_trace=path),
        method=preset_method("eagle3", "sharegpt"),
    )
    res = simulate(sc)
    assert res.requests["arrival_s"].tolist() == [0.0, 0.5, 1.0]
    assert res.requests["output_tokens"].tolist() == [20, 30, 10]


def test_rescale_keeps_the_shape_and_hits_the_target():
    t = window(load_arrival_trace("azure-conv"), 0, 600)
    fast = rescale(t, rate_scale=4.0)
    np.testing.assert_allclose(fast.arrival_s * 4.0, t.arrival_s)
    gaps, fast_gaps = np.diff(t.arrival_s), np.diff(fast.arrival_s)
    np.testing.assert_allclose(fast_gaps / fast_gaps.sum(), gaps / gaps.sum())
    target = rescale(t, target_qps=20.0)
    span = target.arrival_s[-1] - target.arrival_s[0]
    assert (len(target) - 1) / span == pytest.approx(20.0)  # the help's (n - 1) / target_qps
    assert len(target) == len(t) and (target.prompt_len == t.prompt_len).all()
    # a window that ends in a lull: its arrivals run at the rate asked, not faster (QA)
    code = window(load_arrival_trace("azure-code"), 0, 60)
    assert code.arrival_s[-1] < 45  # the window's last arrival leaves a quiet tail
    fast = rescale(code, target_qps=10.0)
    assert (len(fast) - 1) / (fast.arrival_s[-1] - fast.arrival_s[0]) == pytest.approx(10.0)
    # and tiled, its copies follow at the asked rate: the quiet tail is not brought back in
    # each (QA: 0:60 at 10 req/s tiled to 60 s ran 6.5 req/s)
    assert fast.duration_s == pytest.approx(len(fast) / 10.0)
    assert len(tile(fast, 600.0)) == pytest.approx(6000, rel=0.01)
    with pytest.raises(InputError, match="not both"):
        rescale(t, 2.0, 3.0)


def test_window_and_tile():
    t = load_arrival_trace("azure-conv")
    w = window(t, 100, 160)
    keep = (t.arrival_s >= 100) & (t.arrival_s < 160)
    assert len(w) == keep.sum() and w.duration_s == 60
    np.testing.assert_allclose(w.arrival_s, t.arrival_s[keep] - 100)
    tiled = tile(w, 150)
    copies = [w.arrival_s, w.arrival_s + 60, w.arrival_s + 120]
    expected = np.concatenate(copies)
    np.testing.assert_allclose(tiled.arrival_s, expected[expected < 150])
    assert np.all(np.diff(tiled.arrival_s) >= 0) and tiled.duration_s == 150
    assert (tiled.output_len[: len(w)] == tiled.output_len[len(w) : 2 * len(w)]).all()
    with pytest.raises(InputError, match="trace_start_s"):
        window(t, t.duration_s + 10)
    # an end past the trace is refused, not cut short (QA: a --tile then repeated the rest)
    with pytest.raises(InputError, match="trace_end_s: 6000 s is past the end of azure-conv"):
        window(t, 100, 6000)
    assert window(t, 100, t.duration_s).duration_s == t.duration_s - 100
    with pytest.raises(InputError, match="tile_s"):
        tile(w, 0)


def test_config_refuses_what_does_not_apply():
    wl = WorkloadConfig(arrival="replay", arrival_trace="azure-conv", trace_end_s=60)
    assert wl.measure == "whole" and wl.lengths_from is None
    assert WorkloadConfig.model_validate(wl.model_dump()) == wl
    for bad, words in [
        ({"arrival": "replay"}, "needs arrival_trace"),
        ({"arrival": "poisson", "rate_scale": 2}, "rate_scale need arrival: replay"),
        ({"concurrency": 8}, "concurrency does not apply"),
        ({"requests": 8}, "requests does not apply"),
        ({"prompt": {"mean": 9}}, "prompt does not apply"),
        ({"measure": "steady"}, "measured whole"),
        ({"rate_scale": 2, "target_qps": 3}, "not both"),
        ({"trace_start_s": 9, "trace_end_s": 3}, "must be > trace_start_s"),
        ({"rate_scale": 0}, "greater than 0"),
    ]:
        base = {} if bad.get("arrival") else {"arrival": "replay", "arrival_trace": "azure-conv"}
        with pytest.raises(ValidationError, match=words):
            WorkloadConfig(**base, **bad)
    assert layout(wl).measured == request_count(wl) == len(transformed("azure-conv", None, 60.0))
    assert layout(wl).warmup == layout(wl).tail == 0


def test_cli_trace_flags_overlay():
    wl = trace_workload("azure-code", target_qps=10.0, window="0:600", tile=1200.0)
    assert wl == {
        "arrival": "replay",
        "arrival_trace": "azure-code",
        "trace_start_s": 0.0,
        "trace_end_s": 600.0,
        "target_qps": 10.0,
        "tile_s": 1200.0,
    }
    assert trace_workload("azure-conv", window="60:")["trace_start_s"] == 60.0
    with pytest.raises(InputError, match="--window"):
        trace_workload("azure-conv", window="abc")


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, dataset", [("azure-conv", "sharegpt"), ("azure-code", "instructcoder")]
)
def test_replica_replays_the_first_minute(name, dataset):
    trace = load_arrival_trace(name)
    ds = acceptance_dataset(trace)
    assert ds == dataset
    method = preset_method("eagle3", ds)
    assert method.acceptance.acc_len == dataset  # acceptance follows the trace's domain
    wl = WorkloadConfig(arrival="replay", arrival_trace=name, trace_end_s=60)
    res = simulate(Scenario(workload=wl, method=method, seed=3))
    expected = window(trace, 0, 60)
    req = res.requests
    assert len(req) == len(expected) == res.summary.requests  # conserved, all measured
    np.testing.assert_allclose(req["arrival_s"], expected.arrival_s)  # the trace's times
    assert (req["prompt_tokens"] == expected.prompt_len).all()
    assert (req["output_tokens"] == expected.output_len).all()
    assert not req["unfinishable"].any() and res.summary.kv_blocks_in_use_end == 0
    again = simulate(Scenario(workload=wl, method=method, seed=3))
    pd.testing.assert_frame_equal(again.requests, req)  # reproducible by seed


def test_requests_past_the_context_are_unfinishable(tmp_path):
    path = _csv(tmp_path, "arrival_s,prompt_len,output_len\n0,100,20\n0.1,200000,10\n0.2,50,5\n")
    wl = WorkloadConfig(arrival="replay", arrival_trace=path)
    res = simulate(Scenario(workload=wl))  # llama-3.1-8b: 131,072 tokens of context
    assert res.requests["unfinishable"].tolist() == [False, True, False]
    assert res.summary.unfinishable == 1


def test_a_tiled_window_at_a_target_rate_runs_at_that_rate_whatever_its_lead():
    """QA: a window whose first arrival came late stretched each copy past n / target_qps
    (azure-code 600:660 at 10 req/s tiled over an hour ran 9.67 req/s)."""
    from simspec.catalog.arrival_traces import transformed

    tiled = transformed("azure-code", 600, 660, None, 10.0, 3600.0)
    assert len(tiled) / 3600.0 == pytest.approx(10.0, rel=0.01)


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_a_duration_column_is_read_in_seconds_not_its_ticks(tmp_path, unit):
    """df.ts - df.ts[0] is a timedelta: Parquet keeps it as a duration of its unit (QA: 1 s
    at duration[us] replayed as 1,000,000 s); a date-time column is refused naming it."""
    path = tmp_path / "d.parquet"
    frame = pd.DataFrame({"arrival_s": [0.0, 2.0, 3.0], "prompt_len": [1, 2, 3]})
    frame["output_len"] = [4, 5, 6]
    frame["arrival_s"] = pd.to_timedelta(frame["arrival_s"], unit="s").astype(
        f"timedelta64[{unit}]"
    )
    frame.to_parquet(path)
    assert load_arrival_trace(str(path)).arrival_s.tolist() == [0.0, 2.0, 3.0]
    frame["arrival_s"] = pd.Timestamp("2026-01-01") + frame["arrival_s"]
    frame.to_parquet(dated := tmp_path / "t.parquet")  # a new name: traces are cached by it
    with pytest.raises(InputError, match="column arrival_s holds dates and times"):
        load_arrival_trace(str(dated))
    frame["arrival_s"] = [0.0, 1.0, 2.0]
    frame["prompt_len"] = pd.to_timedelta([1, 2, 3], unit="s")
    frame.to_parquet(timed := tmp_path / "p.parquet")
    with pytest.raises(InputError, match="column prompt_len: must be a whole number of tokens"):
        load_arrival_trace(str(timed))
