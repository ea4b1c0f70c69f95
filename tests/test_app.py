"""The Streamlit explorer, headless (streamlit.testing.v1.AppTest), and its upload parsing."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from simspec.errors import InputError
from simspec.ui import explorer

AppTest = pytest.importorskip("streamlit.testing.v1").AppTest
TIMEOUT = 180


@pytest.fixture(scope="module")
def app():
    from conftest import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    return at


def _ok(at) -> None:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


def test_default_page_renders_every_view_and_a_download(app):
    _ok(app)
    assert len(app.tabs) == 8
    assert len(app.get("plotly_chart")) >= 6
    assert len(app.get("download_button")) >= 1
    assert any("Best:" in c.value for c in app.caption)


def test_changing_each_main_input_rerenders_without_error(app):
    at = app
    at.sidebar.text_input[0].set_value("1,16").run()  # smaller grid first: faster reruns
    _ok(at)
    for label, value in (
        ("Model", "qwen3-8b"),
        ("GPU", "h200"),
        ("Domain (preset and request lengths)", "gsm8k (math)"),
    ):
        next(s for s in at.sidebar.selectbox if s.label == label).set_value(value).run()
        _ok(at)
    next(m for m in at.sidebar.multiselect if m.label == "Methods").set_value(
        ["eagle3", "ngram"]
    ).run()
    _ok(at)
    next(r for r in at.sidebar.radio if r.label == "Acceptance").set_value("alpha").run()
    _ok(at)
    next(s for s in at.sidebar.slider if s.label.startswith("Mean acceptance")).set_value(0.4).run()
    _ok(at)
    next(s for s in at.sidebar.slider if s.label == "Sampling temperature").set_value(1.0).run()
    _ok(at)
    next(r for r in at.sidebar.radio if r.label == "Load").set_value("poisson").run()
    _ok(at)
    assert len(at.get("plotly_chart")) >= 6


@pytest.mark.parametrize("loads", ["abc", "0,4", "1.5", ",,"])
def test_bad_loads_are_one_message_not_a_traceback(loads):
    from conftest import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    at.sidebar.text_input[0].set_value(loads).run()
    assert not at.exception
    assert len(at.error) == 1 and "loads" in at.error[0].value


def test_trace_acceptance_without_an_upload_asks_for_one():
    from conftest import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    next(r for r in at.sidebar.radio if r.label == "Acceptance").set_value("trace").run()
    assert not at.exception and "Upload an acceptance trace" in at.error[0].value


# -- uploads are data, capped, and checked ----------------------------------------------------
GOOD_CONFIG = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
}


def test_a_config_upload_is_read_as_json_and_stored(tmp_path):
    path, shape = explorer.save_config_upload(json.dumps(GOOD_CONFIG).encode(), "c.json", tmp_path)
    assert shape.num_hidden_layers == 16 and path.endswith(".json")


@pytest.mark.parametrize(
    ("data", "name", "message"),
    [
        (b"{not json", "c.json", "not valid JSON"),
        (json.dumps(GOOD_CONFIG).encode(), "c.pkl", "expected a .json"),
        (b"", "c.json", "empty"),
        (b"x" * (explorer.MAX_UPLOAD_BYTES + 1), "c.json", "larger than"),
        (json.dumps({"hidden_size": 8}).encode(), "c.json", "lacks"),
        (b"\xff\xfe", "c.json", "not valid JSON"),
    ],
)
def test_bad_config_uploads_are_clear_errors(tmp_path, data, name, message):
    with pytest.raises(InputError, match=message):
        explorer.save_config_upload(data, name, tmp_path)


def test_trace_uploads_are_checked_line_by_line(tmp_path):
    good = json.dumps({"id": 1, "prompt_len": 10, "output_len": 3, "acc_len": {"m": [1, 2, 1]}})
    assert explorer.save_trace_upload(good.encode(), "t.jsonl", tmp_path).endswith(".jsonl")
    for data, name in ((b'{"id": 1}', "t.jsonl"), (good.encode(), "t.csv"), (b"[1,", "t.jsonl")):
        with pytest.raises(InputError):
            explorer.save_trace_upload(data, name, tmp_path)


def test_results_csv_holds_every_method_and_load():
    inp = explorer.ExplorerInputs(
        loads=[1, 8], requests=8, lengths="fixed", prompt_mean=64, output_mean=32
    )
    res = explorer.run(inp, workers=1)
    frame = pd.read_csv(__import__("io").StringIO(explorer.results_csv(res["summary"])))
    assert set(frame.method) == {"autoregressive", "eagle3"} and set(frame.load) == {1, 8}
    assert {"speedup", "throughput_tok_s", "tpot_ms_p99", "ttft_ms_p99"} <= set(frame.columns)
    assert (frame[frame.method == "autoregressive"].speedup == 1.0).all()
