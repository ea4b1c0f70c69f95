"""Hostile arrival traces and trace uploads: a file built to exhaust memory, to hang, or to be
read as something other than it says is refused in one line naming the file, the row and the
column (exit 2), within bounded memory, and an upload leaves nothing behind; a file with one
meaning (times with UTC offsets) is read as it means. Random files and values are fuzzed as
tests/test_fuzz.py fuzzes scenario files."""

from __future__ import annotations

import csv
import io
import json
import os
import string
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simspec.catalog import arrival_traces
from simspec.catalog.arrival_traces import (
    MAX_ARRIVAL_ROWS,
    MAX_COLUMNS,
    load_arrival_trace,
    rescale,
    tile,
    transformed,
)
from simspec.catalog.traces import first_method
from simspec.config import MAX_TRACE_S
from simspec.errors import InputError
from simspec.ui import uploads
from tests.capped import run_capped
from tests.test_fuzz import FUZZ, TEXT, _one_line_or_ok, invoke

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

FLEET = ["fleet", "--slo-ttft-ms", "1000", "--slo-tpot-ms", "100", "--dataset", "sharegpt"]
# The CLI with numpy, pandas and pyarrow loaded reserves about 2 GB of address space (reading a
# file reserves its cap, 512 MB, more): 3 GB leaves room to refuse, not to read gigabytes.
MEMORY = 3 * 1024**3
# a hang guard, not a speed bound: a refusal takes the CLI's start (2 s, 6 s on two cores
# shared with the suite); the unbounded reads took minutes or died
TIMEOUT = 60
PLAIN = "arrival_s,prompt_len,output_len\n"


def _cli_refuses(*args: str, match: str) -> str:
    """``simspec ARGS`` in a subprocess under :data:`MEMORY`: exit 2 and one short line
    ``error: ...`` that contains ``match``. Returns the line."""
    proc = run_capped(["-m", "simspec.cli.main", *args], MEMORY, seconds=TIMEOUT)
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr[-2000:]
    assert len(lines[0]) < 400 and match in lines[0], lines[0][:2000]
    return lines[0]


def _refused(path: Path, match: str) -> InputError:
    with pytest.raises(InputError, match=match) as err:
        load_arrival_trace(str(path))
    assert err.value.field == "workload.arrival_trace"
    assert len(str(err.value)) < 400
    return err.value


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- bounded before the rows are read ------------------------------------------------------


@pytest.mark.slow  # a CLI subprocess under a memory cap: seconds of start-up
def test_a_parquet_of_sixty_million_rows_is_refused_by_its_footer(tmp_path):
    """Under 300 KB that would inflate to gigabytes: the footer's row count is read first."""
    path = tmp_path / "rows.parquet"
    rows = 60_000_000
    columns = {c: pa.nulls(rows) for c in ("arrival_s", "prompt_len", "output_len")}
    pq.write_table(pa.table(columns), path, row_group_size=rows)
    assert path.stat().st_size < 1024**2
    _cli_refuses(*FLEET, "--trace", str(path), match=f"at most {MAX_ARRIVAL_ROWS:,}")


@pytest.mark.slow  # a CLI subprocess under a memory cap: seconds of start-up
def test_an_all_nul_csv_is_refused_by_its_header_in_one_short_line(tmp_path):
    path = tmp_path / "zeros.csv"
    with open(path, "wb") as f:
        f.truncate(100 * 1024**2)  # sparse: 100 MB of NUL bytes, no newline
    _cli_refuses(*FLEET, "--trace", str(path), match="the header (first line) is longer than")


@pytest.mark.slow  # a CLI subprocess under a memory cap: seconds of start-up
def test_a_million_column_header_is_refused_before_its_rows(tmp_path):
    names = [f"c{i}" for i in range(1_000_000)]
    path = _write(tmp_path, "wide.csv", ",".join(names) + "\n" + ",".join("1" * len(names)))
    _cli_refuses(*FLEET, "--trace", str(path), match="header (first line) is longer")


def test_a_header_of_more_columns_than_the_cap_is_refused_by_count(tmp_path):
    names = [*("arrival_s", "prompt_len", "output_len"), *(f"x{i}" for i in range(MAX_COLUMNS))]
    path = _write(tmp_path, "wide.csv", ",".join(names) + "\n" + ",".join("1" * len(names)))
    _refused(path, f"has {MAX_COLUMNS + 3} columns; an arrival trace has at most {MAX_COLUMNS}")
    rec = {name: 1 for name in names}
    _refused(_write(tmp_path, "wide.jsonl", json.dumps(rec)), f"at most {MAX_COLUMNS}")


def test_a_parquet_that_inflates_past_the_cap_is_refused_by_its_footer(tmp_path, monkeypatch):
    """Pages that decompress past the cap a CSV is held to (here cut to 100 kB) are refused
    by the sizes the footer states, before one is decompressed."""
    path, n = tmp_path / "inflates.parquet", 50_000
    columns = {
        "arrival_s": np.zeros(n),
        "prompt_len": np.ones(n, int),
        "output_len": np.ones(n, int),
    }
    table = pa.table({**columns, "dataset": ["sharegpt"] * n})
    pq.write_table(table, path, use_dictionary=False, compression="zstd")
    monkeypatch.setattr(arrival_traces, "MAX_ARRIVAL_TRACE_BYTES", 100_000)
    assert path.stat().st_size < 100_000
    _refused(path, "inflates to .* bytes; an arrival trace is at most 100,000")


def test_a_parquet_text_cell_is_measured_before_its_rows_are_decoded(tmp_path):
    """One long value repeated on every row is one dictionary entry: measured, not decoded."""
    path = tmp_path / "long.parquet"
    stamp = "2023-11-16 18:15:46" + "0" * 1000
    pq.write_table(
        pa.table({"TIMESTAMP": [stamp] * 3, "ContextTokens": [1] * 3, "GeneratedTokens": [1] * 3}),
        path,
    )
    _refused(path, "column TIMESTAMP holds a value of 1,019 bytes")


def test_a_parquet_column_of_lists_is_refused_by_its_type(tmp_path):
    path = tmp_path / "lists.parquet"
    pq.write_table(pa.table({"arrival_s": [0.0], "prompt_len": [[1, 2]], "output_len": [1]}), path)
    _refused(path, "column prompt_len holds list")


def test_an_error_quotes_a_short_piece_of_a_long_cell(tmp_path):
    path = _write(tmp_path, "cell.csv", PLAIN + "0," + "9" * 100_000 + "x,1\n")
    err = _refused(path, r"row 1 column prompt_len: .*got '9999")
    assert "..." in str(err)


def test_a_long_list_of_wrong_columns_is_listed_in_part(tmp_path):
    path = _write(tmp_path, "wrong.csv", ",".join(f"col{i}" for i in range(100)) + "\n")
    _refused(path, "it has 'col0', .* and 92 more")


def test_a_jsonl_record_longer_than_a_line_of_a_trace_is_refused(tmp_path):
    rec = {"arrival_s": 0, "prompt_len": 1, "output_len": 1, "note": "x" * 100_000}
    _refused(_write(tmp_path, "long.jsonl", json.dumps(rec)), "line 1 is longer than 65,536")


# -- times: bounded, and read as instants ----------------------------------------------------


@pytest.mark.parametrize("value", ["1e300", "1e15", "1e11", "-1", "inf", "nan"])
def test_an_arrival_time_outside_a_clocks_range_is_refused(tmp_path, value):
    path = _write(tmp_path, "t.csv", PLAIN + f"0,1,1\n{value},1,1\n")
    _refused(path, r"row 2 column arrival_s: must be a number of seconds in \[0, 1e\+10\]")


@pytest.mark.slow  # a CLI subprocess under a memory cap: seconds of start-up
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_an_arrival_time_that_would_fill_memory_is_refused_in_one_line(tmp_path, fmt):
    """1e15 s, or a uint64 of 2**64 - 1, was a timeline too long for memory."""
    path = tmp_path / f"far.{fmt}"
    if fmt == "csv":
        path.write_text(PLAIN + "0,10,5\n1e15,10,5\n")
    else:
        far = np.array([0, 2**64 - 1], dtype=np.uint64)
        pq.write_table(
            pa.table({"arrival_s": far, "prompt_len": [1, 1], "output_len": [1, 1]}), path
        )
    _cli_refuses(*FLEET, "--trace", str(path), match="row 2 column arrival_s")


def test_a_trace_spans_at_most_thirty_days(tmp_path):
    month = _write(tmp_path, "month.csv", PLAIN + f"0,1,1\n{MAX_TRACE_S},1,1\n")
    assert load_arrival_trace(str(month)).arrival_s[-1] == MAX_TRACE_S
    longer = _write(tmp_path, "longer.csv", PLAIN + f"0,1,1\n{MAX_TRACE_S + 1},1,1\n")
    _refused(longer, "row 2 column arrival_s: 2.592e\\+06 s after the first request")


def test_a_unix_clock_is_read_from_its_first_row(tmp_path):
    path = _write(tmp_path, "clock.csv", PLAIN + "1700000000.25,1,1\n1700000001.75,1,1\n")
    assert load_arrival_trace(str(path)).arrival_s.tolist() == [0.0, 1.5]


def test_azure_times_with_different_utc_offsets_are_read_as_instants(tmp_path):
    path = _write(
        tmp_path,
        "tz.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5+00:00,10,3\n"
        "2023-11-16 23:15:48+05:00,10,3\n2023-11-16T18:15:49Z,10,3\n",
    )
    assert load_arrival_trace(str(path)).arrival_s.tolist() == [0.0, 1.5, 2.5]


def test_an_azure_time_without_an_offset_beside_times_with_one_is_refused(tmp_path):
    path = _write(
        tmp_path,
        "naive.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46+00:00,10,3\n"
        "2023-11-16 18:15:47,10,3\n",
    )
    _refused(path, "row 2 column TIMESTAMP: '2023-11-16 18:15:47' has no UTC offset but row 1")


def test_a_rescale_that_stretches_a_trace_past_thirty_days_is_refused():
    conv = load_arrival_trace("azure-conv")  # an hour
    assert rescale(conv, rate_scale=3600 / MAX_TRACE_S).arrival_s[-1] <= MAX_TRACE_S
    with pytest.raises(InputError, match="a replay spans at most 2592000 s") as err:
        rescale(conv, rate_scale=1e-300)
    assert err.value.field == "workload.rate_scale"
    with pytest.raises(InputError, match="give at least") as err:
        rescale(conv, target_qps=1e-6)
    assert err.value.field == "workload.target_qps"


def test_a_target_rate_on_a_burst_is_refused_in_one_line(tmp_path):
    """QA: --target-qps on a trace whose requests all arrive at once ran the burst unchanged
    (gaps of zero scale to zero) without a word."""
    path = _write(tmp_path, "t.csv", PLAIN + "0,10,5\n0,10,5\n0,10,5\n")
    result = invoke([*FLEET, "--trace", str(path), "--target-qps", "2"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.startswith("error: workload.target_qps")
    assert "same moment" in result.output


@pytest.mark.parametrize("flags", [["--rate-scale", "1e-300"], ["--target-qps", "1e-6"]])
def test_a_rescale_past_thirty_days_is_one_line_in_the_cli(tmp_path, flags):
    """(At a target rate n requests span (n - 1) / target_qps seconds: four at 1e-6/s would
    take 35 days.)"""
    path = _write(tmp_path, "t.csv", PLAIN + "0,10,5\n1,10,5\n2,10,5\n3,10,5\n")
    result = invoke([*FLEET, "--trace", str(path), *flags])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.startswith("error: workload.") and "spans at most" in result.output


def test_tiling_more_copies_than_a_run_serves_is_refused_before_they_are_laid_out(tmp_path):
    path = _write(tmp_path, "t.csv", PLAIN + "0,10,5\n1,10,5\n")
    fast = rescale(load_arrival_trace(str(path)), rate_scale=1e6)  # two requests in 2 us
    with pytest.raises(InputError, match="copies of t.csv") as err:
        tile(fast, MAX_TRACE_S)
    assert err.value.field == "workload.tile_s"
    assert len(transformed(str(path), rate_scale=10.0, tile_s=100.0)) == 1000


# -- one meaning or a refusal ----------------------------------------------------------------


SILENT = [
    ("dup.jsonl", '{"arrival_s":0,"prompt_len":100,"prompt_len":5,"output_len":3}', "duplicate"),
    ("true.jsonl", '{"arrival_s":0,"prompt_len":true,"output_len":3}\n', "got True"),
    ("dup.csv", "arrival_s,prompt_len,prompt_len,output_len\n0,100,5,3\n", "prompt_len twice"),
    (
        "both.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens,arrival_s,prompt_len,output_len\n"
        "2023-11-16 18:15:46,10,3,0,100,5\n",
        r"Azure columns \(TIMESTAMP, ContextTokens, GeneratedTokens\) and plain ones "
        r"\(arrival_s, prompt_len, output_len\)",
    ),
    ("both.jsonl", '{"ContextTokens":1,"arrival_s":0,"prompt_len":1,"output_len":1}', "ambig"),
    ("two.csv", "arrival_s,prompt_len,output_len,dataset,domain\n0,1,1,gsm8k,chat\n", "keep one"),
    ("list.jsonl", '{"arrival_s":0,"prompt_len":[100],"output_len":3}\n', r"got \[100\]"),
    ("big.jsonl", '{"arrival_s":0,"prompt_len":1%s,"output_len":3}\n' % ("0" * 400), "got 1000"),
    ("array.jsonl", "[0, 100, 3]\n", "line 1: a record is one JSON object"),
]


@pytest.mark.parametrize("name, text, match", SILENT, ids=[s[0] for s in SILENT])
def test_a_file_that_could_be_read_two_ways_is_refused_by_name(tmp_path, name, text, match):
    err = _refused(_write(tmp_path, name, text), match)
    assert name in str(err)


def test_a_parquet_bool_column_is_not_a_count(tmp_path):
    path = tmp_path / "bool.parquet"
    pd.DataFrame({"arrival_s": [0.0], "prompt_len": [True], "output_len": [3]}).to_parquet(path)
    _refused(path, "row 1 column prompt_len: must be a whole number of tokens .* got True")


def test_the_strict_readers_still_read_every_format(tmp_path):
    rows = [{"arrival_s": 0, "prompt_len": 3, "output_len": 4, "domain": "math"}]
    jsonl = _write(tmp_path, "t.jsonl", "\n".join(map(json.dumps, rows)) + "\n\n")
    assert load_arrival_trace(str(jsonl)).dataset == "gsm8k"
    bom = _write(tmp_path, "bom.csv", "\ufeff\n" + PLAIN + "0,1,2\n1,3,4\n")
    assert load_arrival_trace(str(bom)).output_len.tolist() == [2, 4]
    path = tmp_path / "cat.parquet"
    frame = pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_len": [1, 2], "output_len": [3, 4]})
    frame.assign(domain=pd.Categorical(["code", "code"])).to_parquet(path)
    assert load_arrival_trace(str(path)).dataset == "instructcoder"


# -- uploads -------------------------------------------------------------------------------


def test_an_upload_with_mixed_utc_offsets_is_kept(tmp_path):
    data = (
        b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46+00:00,10,3\n"
        b"2023-11-16 23:15:47+05:00,10,3\n"
    )
    path = uploads.save_arrival_trace_upload(data, "tz.csv", tmp_path)
    assert load_arrival_trace(path).arrival_s.tolist() == [0.0, 1.0]


@pytest.mark.parametrize("raised", [ValueError("Mixed timezones detected"), MemoryError()])
def test_an_upload_the_loader_fails_on_leaves_no_file(tmp_path, monkeypatch, raised):
    """Not only a refusal: whatever stops the loader, the stored upload goes with it."""

    def fails(*args):
        raise raised

    monkeypatch.setattr(uploads, "load_arrival_trace", fails)
    monkeypatch.setattr(uploads, "load_trace", fails)
    with pytest.raises(type(raised)):
        uploads.save_arrival_trace_upload(PLAIN.encode() + b"0,1,1\n", "a.csv", tmp_path)
    record = {"prompt_len": 1, "output_len": 1, "acc_len": {"eagle3": [1]}}
    with pytest.raises(type(raised)):
        uploads.save_trace_upload(json.dumps(record).encode(), "a.jsonl", tmp_path)
    assert os.listdir(tmp_path) == []


def test_an_upload_error_names_the_uploaded_file_not_the_stored_one(tmp_path):
    lines = [
        {"prompt_len": 1, "output_len": 1, "acc_len": {"eagle3": [1]}},
        {"prompt_len": 1, "output_len": 1, "acc_len": {"ngram": [1]}},
    ]
    data = "\n".join(map(json.dumps, lines)).encode()
    with pytest.raises(InputError, match="^acceptance trace: mine.jsonl line 2: needs") as err:
        uploads.save_trace_upload(data, "mine.jsonl", tmp_path)
    assert str(tmp_path) not in str(err.value) and "upload-" not in str(err.value)
    bad = PLAIN.encode() + b"0,1,1\n0,1,x\n"
    with pytest.raises(InputError, match="^arrival trace: mine.csv row 2") as err:
        uploads.save_arrival_trace_upload(bad, "mine.csv", tmp_path)
    assert str(tmp_path) not in str(err.value) and "upload-" not in str(err.value)
    assert os.listdir(tmp_path) == []


def test_an_empty_acc_len_key_is_said_to_be_empty(tmp_path):
    record = {"prompt_len": 1, "output_len": 1, "acc_len": {"": [1]}}
    with pytest.raises(InputError, match="line 1: acc_len key '' is empty"):
        uploads.save_trace_upload(json.dumps(record).encode(), "empty.jsonl", tmp_path)
    path = _write(tmp_path, "empty.jsonl", json.dumps(record))
    with pytest.raises(InputError, match="acc_len key '' is empty"):
        first_method(str(path))


# -- fuzzed --------------------------------------------------------------------------------


KEYS = st.sampled_from(
    ["arrival_s", "prompt_len", "output_len", "TIMESTAMP", "ContextTokens", "GeneratedTokens"]
    + ["dataset", "domain"]
)
# every kind of cell, but a valid length stays small: a trace the fleet can serve in a moment
CELLS = (
    st.none()
    | st.booleans()
    | st.integers(-3, 64)
    | st.integers(2**31 - 2, 2**65)
    | st.floats().filter(lambda v: not 64 < v <= 2**31)
    | st.sampled_from(["sharegpt", "code", "2023-11-16 18:15:46+05:00", "1e300", "", "0x10"])
    | TEXT
)
RECORDS = st.lists(st.dictionaries(KEYS | TEXT, CELLS, min_size=1, max_size=6), max_size=4)
TRACE_FLAGS = st.lists(
    st.tuples(
        st.sampled_from(["--rate-scale", "--target-qps", "--tile", "--window"]),
        st.sampled_from(["1e-300", "1e-6", "0.5", "4", "1e6", "nan", "0:1", "5:"]) | TEXT,
    ),
    max_size=2,
)


def _as_csv(records: list[dict]) -> str:
    columns = list(dict.fromkeys(k for r in records for k in r))
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(columns)
    writer.writerows([r.get(c, "") for c in columns] for r in records)
    return out.getvalue()


@pytest.mark.slow
@FUZZ
@given(RECORDS, st.sampled_from(["csv", "jsonl"]), TRACE_FLAGS)
def test_random_arrival_trace_files(tmp_path_factory, records, fmt, flags):
    path = tmp_path_factory.mktemp("arrivals") / f"t.{fmt}"
    if fmt == "csv":
        path.write_text(_as_csv(records))
    else:
        path.write_text("\n".join(json.dumps(r) for r in records))
    _one_line_or_ok(invoke([*FLEET, "--trace", str(path), *(x for pair in flags for x in pair)]))


@pytest.mark.slow
@FUZZ
@given(
    st.binary(max_size=300)
    | st.text(alphabet=string.printable + "\0", max_size=300).map(str.encode),
    st.sampled_from(["csv", "jsonl", "parquet", "csv.gz"]),
)
def test_malformed_arrival_trace_bytes(tmp_path_factory, data, suffix):
    path = tmp_path_factory.mktemp("arrival-bytes") / f"t.{suffix}"
    path.write_bytes(data)
    _one_line_or_ok(invoke([*FLEET, "--trace", str(path)]))


def test_a_row_with_more_cells_than_the_header_is_refused(tmp_path):
    """An unquoted comma shifts a row's cells: it is refused naming the line, not read with
    the cells past the header's count dropped (QA: 3,20,5,junk,more ran as 20 / 5)."""
    path = tmp_path / "extra.csv"
    path.write_text("arrival_s,prompt_len,output_len\n0,10,5\n3,20,5,junk,more\n")
    with pytest.raises(InputError, match="line 3, saw 5"):
        load_arrival_trace(str(path))


def test_a_row_longer_than_the_header_is_refused_not_shifted(tmp_path):
    """QA: a first row "0,10,10,5,6" read as prompt 5, output 6 (pandas took the leading cells
    for an index)."""
    from simspec.catalog.arrival_traces import load_arrival_trace
    from simspec.errors import InputError

    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_len,output_len\n0,10,10,5,6\n")
    with pytest.raises(InputError, match="a row has more cells than the header's 3"):
        load_arrival_trace(str(path), "--trace")
    path.write_text("arrival_s,prompt_len,output_len\n0,10,10\n3,7,9,1\n")
    with pytest.raises(InputError, match="Expected 3 fields in line 3, saw 4"):
        load_arrival_trace(str(path), "--trace")
