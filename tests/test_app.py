"""The Streamlit explorer, headless (streamlit.testing.v1.AppTest), and its upload parsing."""

from __future__ import annotations

import io
import json
import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields, replace
from pathlib import Path

import pandas as pd
import pytest

from simspec.catalog.methods import default_methods
from simspec.config import Deployment
from simspec.errors import InputError
from simspec.studies import capacity
from simspec.studies.runs.executors import KeptPool
from simspec.studies.schedule import bands, grid
from simspec.studies.sweep import DEFAULT_BATCH_SIZES
from simspec.ui import downloads, figures, inputs, runs, uploads

AppTest = pytest.importorskip("streamlit.testing.v1").AppTest
TIMEOUT = 600  # a hang guard, not a speed bound: the page shares two cores with the suite
# Every test that renders the page runs the default what-if (the CLI's default sweep, the
# longest part of a page test) unless this process has run it: on one xdist worker, it runs
# once per session and the others reuse it (the explorer's run memo and st.cache_data).
# tests/test_app_fleet.py's page test joins them.
PAGE = pytest.mark.xdist_group("explorer_page")


@pytest.fixture(scope="module")
def app():
    from conftest import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    return at


def _ok(at) -> None:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


@pytest.mark.slow
@PAGE
def test_default_page_renders_every_view_and_a_download(app):
    _ok(app)
    assert len(app.tabs) == 10
    assert len(app.get("plotly_chart")) >= 6
    assert len(app.get("download_button")) >= 1
    assert any("Best:" in c.value for c in app.caption)


def _starting(widgets, label: str):
    return next(w for w in widgets if w.label.startswith(label))


def _titles(at) -> list[str]:
    return [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]


@pytest.mark.slow
@PAGE
def test_the_page_starts_from_the_clis_defaults(app):
    d = Deployment()
    chosen = {s.label: s.value for s in app.sidebar.selectbox}
    assert chosen["Model"] == d.model and chosen["GPU"] == d.gpu
    assert chosen["Tensor parallel"] == d.tp and chosen["Engine profile"] == d.engine == "vllm"
    assert chosen["Domain (preset and request lengths)"].startswith(d.workload.lengths_from + " ")
    methods = next(m for m in app.sidebar.multiselect if m.label == "Methods").value
    assert ["autoregressive", *methods] == [m.name for m in default_methods()]
    assert app.sidebar.text_input[0].value == ",".join(map(str, DEFAULT_BATCH_SIZES))


@pytest.mark.slow
@PAGE
def test_every_chart_title_names_model_gpu_tp_and_engine(app):
    titles = _titles(app)
    assert len(titles) >= 8
    for title in titles:
        assert "llama-3.1-8b · h100_sxm · TP 1 · vllm" in title, title


@pytest.mark.slow
@PAGE
def test_the_uploader_states_the_cap_the_code_enforces(app):
    from conftest import ROOT

    config = (ROOT / ".streamlit" / "config.toml").read_text()  # tomllib is 3.11+
    assert re.findall(r"(?m)^maxUploadSize\s*=\s*(\d+)", config) == [str(uploads.MAX_UPLOAD_MB)]
    # Streamlit counts an upload MB as 2**20 bytes (its server checks maxUploadSize * 1024 * 1024)
    assert uploads.MAX_UPLOAD_BYTES == uploads.MAX_UPLOAD_MB * 2**20
    assert [u.proto.max_upload_size_mb for u in app.sidebar.get("file_uploader")] == [
        uploads.MAX_UPLOAD_MB
    ]


@pytest.mark.slow
@PAGE
def test_changing_each_main_input_rerenders_without_error(app):
    at = app
    # a small what-if first (two loads, 32 requests, 2 turnovers), set in one rerun: what is
    # asked is that each input reruns the page cleanly, not the numbers of a default run
    at.sidebar.text_input[0].set_value("1,16")
    _starting(at.sidebar.number_input, "Requests measured").set_value(32)
    _starting(at.sidebar.number_input, "Closed loop: batch turnovers").set_value(2)
    at.run()
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


@pytest.mark.slow
@PAGE
@pytest.mark.parametrize("loads", ["abc", "0,4", "1.5", ",,", "inf", "nan", "1e400"])
def test_bad_loads_are_one_message_not_a_traceback(loads):
    from conftest import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    at.sidebar.text_input[0].set_value(loads).run()
    assert not at.exception
    assert len(at.error) == 1 and "loads" in at.error[0].value


@pytest.mark.slow
@PAGE
def test_trace_acceptance_without_an_upload_asks_for_one():
    from conftest import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    next(r for r in at.sidebar.radio if r.label == "Acceptance").set_value("trace").run()
    assert not at.exception and "Upload an acceptance trace" in at.error[0].value


@pytest.mark.slow
@PAGE
def test_an_error_on_the_page_keeps_every_widget_the_user_set():
    """QA: an error shown halfway down the page reset every widget below it (16 requests
    became 256, an SLO of 20 ms became 50), and changing "K τ was measured at" reset τ."""
    at = _fresh()
    widget = {w.label: w for w in at.sidebar.number_input}
    widget["Requests measured per run (more: tighter intervals, slower)"].set_value(16)
    widget["Closed loop: batch turnovers measured (at least)"].set_value(2)
    widget["SLO: TPOT p99 (ms)"].set_value(20.0)
    at.run()
    at.sidebar.text_input[0].set_value("1,x").run()  # an error: the page stops at the loads
    assert len(at.error) == 1
    # the acceptance widgets, above the loads, are drawn while the page stops (no run)

    def tau_widget(label: str):
        return next(w for w in at.sidebar.number_input if w.label.startswith(label))

    next(r for r in at.sidebar.radio if r.label == "Acceptance").set_value("tau").run()
    tau_widget("K τ was measured at").set_value(5)
    tau_widget("Measured τ").set_value(4.5)
    at.run()
    tau_widget("K τ was measured at").set_value(6).run()
    assert tau_widget("Measured τ").value == 4.5
    # a smaller K bounds τ lower: kept at the new bound, not reset to the default
    tau_widget("K τ was measured at").set_value(2).run()
    assert tau_widget("Measured τ").value == 3.0
    # τ's spread is the traces' unless unticked, then the page's slider (the CLI's --tau)
    measured = next(c for c in at.sidebar.checkbox if c.label.startswith("Spread across"))
    assert measured.value and not [s for s in at.sidebar.slider if s.label.startswith("Spread")]
    measured.uncheck().run()
    assert [s for s in at.sidebar.slider if s.label.startswith("Spread")]
    at.sidebar.text_input[0].set_value("16").run()
    assert not at.error
    widget = {w.label: w for w in at.sidebar.number_input}
    assert widget["Requests measured per run (more: tighter intervals, slower)"].value == 16
    assert widget["Closed loop: batch turnovers measured (at least)"].value == 2
    assert widget["SLO: TPOT p99 (ms)"].value == 20.0


@pytest.mark.slow
@PAGE
def test_a_bad_upload_or_a_new_list_of_choices_keeps_the_layout_and_precision_chosen():
    """QA: a bad config.json upload (an error above them) reset EP 2, DP 2, fp8 weights and
    async scheduling to their defaults, and a change of engine whose precision list differed
    reset fp8 to the checkpoint's, each rerun without a word."""
    from conftest import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.session_state["kept:loads_closed"] = "4"  # a small what-if: the widgets are the test
    at.session_state["kept:requests"] = 16
    at.session_state["kept:turnovers"] = 1
    at.run()
    for label, value in (
        ("Model", "qwen3-30b-a3b"),
        ("Tensor parallel", 2),
        ("Expert parallel", 2),
        ("Data-parallel attention", 2),
        ("Weight precision", "fp8"),
    ):
        _starting(at.sidebar.selectbox, label).set_value(value).run()
    _starting(at.sidebar.checkbox, "Async scheduling").check().run()
    _ok(at)

    def chosen() -> tuple:
        picks = {s.label: s.value for s in at.sidebar.selectbox}
        layout = ("Expert parallel", "Data-parallel attention", "Weight precision")
        return (*(picks[k] for k in layout), _starting(at.sidebar.checkbox, "Async").value)

    assert chosen() == (2, 2, "fp8", True)
    at.sidebar.file_uploader[0].set_value(("config.json", b"{bad", "application/json")).run()
    assert len(at.error) == 1 and "not valid JSON" in at.error[0].value
    at.sidebar.file_uploader[0].set_value(None).run()
    _ok(at)
    assert chosen() == (2, 2, "fp8", True)
    assert "TP 2 EP 2 DP 2 · vllm · fp8 weights · async scheduling" in _titles(at)[0]
    _starting(at.sidebar.selectbox, "Engine profile").set_value("sglang").run()
    assert _starting(at.sidebar.selectbox, "Weight precision").value == "fp8"
    # a list that lacks the choice shows the default and forgets nothing (QA: EP 2 at TP 2,
    # then TP 4, then TP 2 again showed EP 1)
    _starting(at.sidebar.selectbox, "Tensor parallel").set_value(4).run()
    assert _starting(at.sidebar.selectbox, "Expert parallel").value == 1
    _starting(at.sidebar.selectbox, "Tensor parallel").set_value(2).run()
    assert _starting(at.sidebar.selectbox, "Expert parallel").value == 2


@pytest.mark.slow
@PAGE
def test_a_bad_upload_keeps_the_methods_chosen():
    """QA: Methods = [suffix], then a bad config.json upload (an error above the widget), then
    the upload cleared: Methods was back to EAGLE-3 and n-gram without a word."""
    from conftest import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    for key, value in {"kept:loads_closed": "1", "kept:requests": 8, "kept:turnovers": 0}.items():
        at.session_state[key] = value
    at.run()

    def methods():
        return next(m for m in at.sidebar.multiselect if m.label == "Methods")

    methods().set_value(["suffix"]).run()
    _ok(at)
    at.sidebar.file_uploader[0].set_value(("config.json", b"{bad", "application/json")).run()
    assert len(at.error) == 1 and "not valid JSON" in at.error[0].value
    at.sidebar.file_uploader[0].set_value(None).run()
    _ok(at)
    assert methods().value == ["suffix"]


@pytest.mark.slow
@PAGE
def test_a_max_model_len_below_the_fields_bound_is_one_message_in_the_widgets_words():
    """QA: 1 to 15 were taken by the widget, then refused as "max_model_len: Input should be
    greater than or equal to 16" (the config field's name and pydantic's words)."""
    at = _fresh()
    _starting(at.sidebar.number_input, "Max model len").set_value(8).run()
    assert not at.exception
    assert [e.value for e in at.error] == [
        "Max model len: at least 16 tokens, or 0 for the model's context."
    ]


@pytest.mark.slow
@PAGE
def test_an_empty_methods_list_is_refused_not_replaced_by_the_defaults():
    at = _fresh()
    next(m for m in at.sidebar.multiselect if m.label == "Methods").set_value([]).run()
    assert not at.exception
    # QA: an emptied Methods list had run EAGLE-3 and n-gram anyway, without a word
    assert len(at.error) == 1 and "pick at least one speculative method" in at.error[0].value


def _fresh(loads: str = "16"):
    """A new page on a small what-if (one load: two runs, in process)."""
    from conftest import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    at.sidebar.text_input[0].set_value(loads).run()
    _ok(at)
    return at


@pytest.mark.slow
@PAGE
def test_an_uploaded_config_is_titled_by_its_model_name_not_its_temporary_file():
    at = _fresh()
    config = {**GOOD_CONFIG, "_name_or_path": "acme/Tiny-Llama-1B"}
    at.sidebar.file_uploader[0].set_value(
        ("config.json", json.dumps(config).encode(), "application/json")
    ).run()
    _ok(at)
    for title in _titles(at):
        assert "acme/Tiny-Llama-1B · h100_sxm · TP 1 · vllm" in title and "upload-" not in title
    # the Model panel names it so too (QA: it said "model: upload-3c9661ce…")
    (panel,) = [m.value for m in at.markdown if m.value.startswith("- **model**")]
    assert "Tiny\\-Llama\\-1B" in panel and "upload" not in panel


@pytest.mark.slow
@PAGE
@pytest.mark.parametrize(
    "line",
    [
        '{"prompt_len": Infinity, "output_len": 3, "acc_len": {"m": [1]}}',
        '{"prompt_len": 10, "output_len": 3, "acc_len": {"m": [4294967296]}}',
    ],
)
def test_a_hostile_trace_upload_is_one_message_not_a_traceback_nor_a_hang(line):
    at = _fresh()
    next(r for r in at.sidebar.radio if r.label == "Acceptance").set_value("trace").run()
    at.sidebar.file_uploader[1].set_value(("t.jsonl", line.encode(), "text/plain")).run()
    assert not at.exception
    assert len(at.error) == 1 and at.error[0].value.startswith("acceptance trace:")


@pytest.mark.slow
@PAGE
def test_recommend_k_keeps_the_plan_and_both_download_with_their_scenario(monkeypatch):
    def fake_plan(deploy, methods, qps, slo, price, duration_s):
        rows = [
            {c: 1.0 for c in capacity.PLAN_COLUMNS} | {"method": m.name, "replicas": 3, "gpus": 3}
            for m in methods
        ]
        return pd.DataFrame(rows, columns=capacity.PLAN_COLUMNS)

    def fake_recommend(deploy, method, ks, concurrencies, *args, knob="k", **kwargs):
        rows = [
            {"concurrency": c, **{f"speedup_k{k}": 1.5 - 0.1 * k for k in ks}}
            | {"best_k": 1, "best_speedup": 1.4}
            for c in concurrencies
        ]
        return pd.DataFrame(rows)

    monkeypatch.setattr(capacity, "plan", fake_plan)
    monkeypatch.setattr(bands, "recommend", fake_recommend)
    at = _fresh()
    next(b for b in at.button if b.label.startswith("Compute plan")).click().run()
    _ok(at)
    next(b for b in at.button if b.label.startswith("Recommend K")).click().run()
    _ok(at)
    frames = [d.value for d in at.dataframe]
    plan = next(f for f in frames if "replicas" in f.columns)  # still there
    assert list(plan.columns[:2]) == ["replicas", "gpus"]
    assert any("best_k" in f.columns for f in frames)
    labels = {b.label for b in at.get("download_button")}
    assert {"Download CSV", "Download plan CSV", "Download schedule CSV"} <= labels


# -- figures: labels, colours, scales ------------------------------------------------------------
def _summary(methods=("autoregressive", "eagle3", "ngram"), loads=(1, 8, 64)) -> pd.DataFrame:
    rows = [
        {"method": m, "k": 3, "load": x, "speedup": 1.0 + i / 10, "throughput_tok_s": 100.0 * x}
        | {c: 10.0 + x for c in ("tpot_ms_p50", "tpot_ms_p99", "ttft_ms_p99")}
        for i, m in enumerate(methods)
        for x in loads
    ]
    return pd.DataFrame(rows)


def test_log_axes_are_ticked_at_the_loads_themselves():
    inp = inputs.ExplorerInputs(loads=[1, 8, 64])
    for fig in (
        figures.speedup_figure(_summary(), inp),
        figures.latency_figure(_summary(), inp),
        figures.ttft_figure(_summary(), inp),
    ):
        assert fig.layout.xaxis.type == "log"
        assert list(fig.layout.xaxis.tickvals) == [1, 8, 64]
        assert list(fig.layout.xaxis.ticktext) == ["1", "8", "64"]


def test_each_method_keeps_one_colour_in_every_chart():
    inp = inputs.ExplorerInputs(loads=[1, 8, 64])
    summary = _summary()
    # a chart without eagle3 must not shift ngram's colour (colours are not by position)
    acceptance = pd.DataFrame({"method": ["ngram", "ngram"], "load": [1, 8], "tau": [1.5, 2.0]})
    seen: dict[str, set[str]] = {}
    for fig in (
        figures.speedup_figure(summary, inp),
        figures.throughput_tpot_figure(summary, inp),
        figures.latency_figure(summary, inp),
        figures.ttft_figure(summary, inp),
        figures.acceptance_figure(acceptance, inp),
    ):
        for trace in fig.data:
            colour = trace.marker.color if trace.type == "histogram" else trace.line.color
            seen.setdefault(trace.name.split()[0], set()).add(colour)
    assert all(len(c) == 1 for c in seen.values()), seen
    assert len({next(iter(c)) for c in seen.values()}) == len(seen) == 3
    assert len(set(figures.METHOD_COLOURS.values())) == len(figures.METHOD_COLOURS)


def test_the_batch1_speedup_map_is_white_at_1x_over_the_datas_own_range():
    alphas, ks = [0.2, 0.5, 0.9], [1, 2, 4]
    rows = [
        {"alpha": a, "k": k, "expected_tokens": 1 + a * k, "speedup": 0.5 + 3.5 * a * k / 3.6}
        for a in alphas
        for k in ks
    ]
    table = pd.DataFrame(rows)
    _, fs = figures.analytic_figures(table, inputs.ExplorerInputs(), "eagle3")
    heat = fs.data[0]
    lo, hi = table.speedup.min(), table.speedup.max()
    assert (heat.zmin, heat.zmax) == (lo, hi)  # not widened to a symmetric -2 .. 4
    stops = {round(p, 9): c for p, c in heat.colorscale}
    assert stops[round((1 - lo) / (hi - lo), 9)] == "#f7f7f7"
    assert "TP 1 · vllm" in fs.layout.title.text


# -- downloads say what they are ----------------------------------------------------------------
def test_every_download_carries_the_scenario_and_the_method_settings():
    inp = inputs.ExplorerInputs(methods=["eagle3", "eagle2"], loads=[1, 8], dataset="gsm8k")
    summary = _summary(("autoregressive", "eagle3", "eagle2"), (1, 8))
    frame = pd.read_csv(io.StringIO(downloads.results_csv(summary, inp)))
    assert list(frame.columns[:5]) == ["model", "gpu", "tp", "engine", "dataset"]
    assert (frame.engine == "vllm").all() and (frame.dataset == "gsm8k").all()
    eagle2 = frame[frame.method == "eagle2"].iloc[0]
    assert eagle2.tree == "dynamic" and eagle2.tree_nodes > 0
    plan = downloads.with_scenario(
        runs.plan_view(pd.DataFrame([{c: 1 for c in capacity.PLAN_COLUMNS}])).assign(
            method="eagle3"
        ),
        inp,
    )
    assert {"model", "gpu", "tp", "engine", "dataset", "k", "tree"} <= set(plan.columns)
    table = pd.DataFrame({"concurrency": [1, 4], "speedup_k1": [1.2, 1.1], "best_k": [1, 1]})
    sched = pd.read_csv(io.StringIO(downloads.schedule_csv(table, inp, "eagle3")))
    assert {"model", "gpu", "tp", "engine", "dataset", "method", "tree"} <= set(sched.columns)
    assert "k" not in sched.columns  # K is the table's own axis


def test_the_clis_help_shows_the_one_default_of_plan_and_recommend():
    from typer.testing import CliRunner

    from simspec.cli.main import app

    def shown(command: str, option: str) -> str:
        """The default ``command --help`` shows for ``option``."""
        out = CliRunner().invoke(app, [command, "--help"]).output
        found = re.search(rf"^\s+{option} .*?\[default:\s*([^\];]+)", out, re.M | re.S)
        return found.group(1).strip()

    assert float(shown("plan", "--duration")) == capacity.PLAN_DURATION_S
    assert float(shown("plan", "--gpu-hour-price")) == capacity.GPU_HOUR_PRICE
    assert int(shown("recommend", "--k-max")) == grid.K_MAX
    assert shown("recommend", "--tree-budgets") == ",".join(map(str, grid.TREE_BUDGETS))
    assert shown("recommend", "--concurrencies") == ",".join(map(str, grid.DEFAULT_CONCURRENCIES))
    inp = inputs.ExplorerInputs()
    assert grid.recommend_grid(inputs.method_for(inp, "eagle3")) == ("k", [1, 2, 3, 4, 5])
    knob, budgets = grid.recommend_grid(inputs.method_for(inp, "eagle2"))
    assert knob == "tree_nodes" and budgets and len(budgets) > 1


def test_the_page_and_the_cli_map_deployment_fields_alike():
    from simspec.cli.flags import ServingFlags
    from simspec.config import SAMPLING_FIELDS, SERVING_FIELDS

    assert {*SERVING_FIELDS, *SAMPLING_FIELDS} <= set(Deployment.model_fields)
    assert [f.name for f in fields(ServingFlags)] == list(SERVING_FIELDS)
    flags = ServingFlags(model="qwen3-8b", gpu="h200", tp=2, engine="sglang")
    inp = inputs.ExplorerInputs(
        model="qwen3-8b", gpu="h200", tp=2, engine="sglang", temperature=0.7, top_p=0.9, seed=3
    )
    deploy = inputs.deployment_for(inp)
    assert flags.serving_fields() == {
        k: getattr(deploy, k) for k in ("model", "gpu", "tp", "engine")
    }
    assert (deploy.temperature, deploy.top_p, deploy.seed) == (0.7, 0.9, 3)
    assert (deploy.precision, deploy.kv_cache_dtype) == (None, "auto")  # the page's defaults


def test_the_plan_starts_from_the_clis_methods():
    from simspec.cli import plan as cli

    assert list(cli.DEFAULT_PLAN_METHODS) == inputs.DEFAULT_METHODS


def test_the_plan_puts_its_answer_first():
    frame = pd.DataFrame([{c: 1 for c in capacity.PLAN_COLUMNS}])
    view = runs.plan_view(frame)
    assert list(view.columns[:3]) == ["replicas", "gpus", "method"]
    assert sorted(view.columns) == sorted(capacity.PLAN_COLUMNS)


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "1e400", "1, inf"])
def test_non_finite_loads_are_input_errors(text):
    for arrival in ("closed", "poisson"):
        with pytest.raises(InputError, match="loads"):
            inputs.parse_loads(text, arrival)


# -- runs: small what-ifs in process, larger ones on the kept pool, same numbers --------------
SMALL = {"requests": 8, "lengths": "fixed", "prompt_mean": 64, "output_mean": 32}


def _no_pool():
    raise AssertionError("a small what-if must not wait on a pool")


IN_PROCESS = replace(runs.RUNS, executor="serial")  # the page's memo, no pool
NO_POOL = replace(runs.RUNS, pool=KeptPool(start=_no_pool))


@pytest.mark.slow
def test_a_small_what_if_runs_in_process_and_a_pool_gives_the_same_numbers():
    runs.forget_runs()
    one = inputs.ExplorerInputs(methods=["eagle3"], loads=[4], **SMALL)
    assert len(runs.run(one, NO_POOL)["summary"]) == 2
    inp = inputs.ExplorerInputs(methods=["eagle3", "ngram"], loads=[1, 8], **SMALL)
    runs.forget_runs()
    serial = runs.run(inp, IN_PROCESS)
    runs.forget_runs()
    threads = KeptPool(start=lambda: ThreadPoolExecutor(2))
    try:
        pooled = runs.run(inp, replace(runs.RUNS, pool=threads))
    finally:
        threads.close()
    for key in serial:
        pd.testing.assert_frame_equal(serial[key], pooled[key])


class _BrokenPool:
    def submit(self, *args, **kwargs):
        from concurrent.futures.process import BrokenProcessPool

        raise BrokenProcessPool("a worker died")

    def shutdown(self, *args, **kwargs):
        pass


def test_a_dead_worker_does_not_break_the_page_for_good():
    runs.forget_runs()
    inp = inputs.ExplorerInputs(methods=["eagle3"], loads=[1, 8], **SMALL)
    started: list[_BrokenPool] = []
    broken = KeptPool(start=lambda: started.append(_BrokenPool()) or started[-1])
    on_broken = replace(runs.RUNS, pool=broken)
    assert len(runs.run(inp, on_broken)["summary"]) == 4  # finished in process
    runs.forget_runs()
    runs.run(inp, on_broken)  # the broken pool was dropped: the next what-if starts a fresh one
    assert len(started) == 2


@pytest.mark.slow
def test_a_widget_change_reruns_only_what_it_changed():
    runs.forget_runs()
    first = inputs.ExplorerInputs(methods=["eagle3"], loads=[1, 8], **SMALL)
    before = runs.run(first, IN_PROCESS)["summary"]
    # adding a method at the same loads: two new runs, the baseline and eagle3 remembered
    both = first.model_copy(update={"methods": ["eagle3", "ngram"]})
    after = runs.run(both, NO_POOL)["summary"]
    kept = after[after.method != "ngram"].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, before)


def test_results_csv_holds_every_method_and_load():
    inp = inputs.ExplorerInputs(methods=["eagle3"], loads=[1, 8], **SMALL)
    res = runs.run(inp, IN_PROCESS)
    frame = pd.read_csv(io.StringIO(downloads.results_csv(res["summary"], inp)))
    assert set(frame.method) == {"autoregressive", "eagle3"} and set(frame.load) == {1, 8}
    assert {"speedup", "throughput_tok_s", "tpot_ms_p99", "ttft_ms_p99"} <= set(frame.columns)
    assert set(runs.SUMMARY_COLUMNS) <= set(frame.columns)
    assert (frame[frame.method == "autoregressive"].speedup == 1.0).all()


def test_the_tables_metrics_are_a_selection_of_the_studies_one_list():
    from simspec.studies.metrics import RUN_INTERVALS, RUN_METRICS

    studied = [*RUN_METRICS, *RUN_INTERVALS]
    shown = [c for c in runs.SUMMARY_COLUMNS if c != "stable"]
    assert shown == [c for c in studied if c in shown]  # the studies' names, in their order
    assert {"throughput_tok_s", "tpot_ms_p99", "ttft_ms_p99", "mean_accept_len"} <= set(shown)


# -- uploads are data, capped, checked in memory, and kept privately -------------------------
GOOD_CONFIG = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
}
GOOD_TRACE = json.dumps({"id": 1, "prompt_len": 10, "output_len": 3, "acc_len": {"m": [1, 2, 1]}})


def test_a_config_upload_is_read_as_json_and_stored(tmp_path):
    data = json.dumps({**GOOD_CONFIG, "architectures": ["LlamaForCausalLM"]}).encode()
    path, shape, name = uploads.save_config_upload(data, "c.json", tmp_path)
    assert shape.num_hidden_layers == 16 and path.endswith(".json")
    assert name == "LlamaForCausalLM"
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_uploads_go_to_a_private_folder_of_this_process():
    folder = uploads.upload_folder()
    assert folder != Path(tempfile.gettempdir()) / "simspec-uploads"
    assert folder.stat().st_mode & 0o777 == 0o700 and folder.stat().st_uid == os.getuid()


def test_a_planted_symlink_is_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    folder = tmp_path / "up"
    folder.mkdir()
    data = json.dumps(GOOD_CONFIG).encode()
    digest = __import__("hashlib").sha256(data).hexdigest()[:32]
    (folder / f"upload-{digest}").symlink_to(tmp_path)  # the content's folder, planted
    with pytest.raises(InputError, match="left alone"):
        uploads.save_config_upload(data, "victim.json", folder)
    assert victim.read_text() == "precious" and not (tmp_path / "victim.json").exists()
    other = tmp_path / "other"
    other.mkdir()
    kept = other / f"upload-{digest}"
    kept.mkdir()
    (kept / "c.json").symlink_to(victim)  # the file itself, planted
    with pytest.raises(InputError, match="left alone"):
        uploads.save_config_upload(data, "c.json", other)
    assert victim.read_text() == "precious"


def test_an_upload_keeps_the_name_it_was_uploaded_as(tmp_path):
    """Runs and tables name an upload as the user did (QA: the compare tab had shown the
    stored copy's upload-<hash>.json), its characters kept safe."""
    data = json.dumps(GOOD_CONFIG).encode()
    path, _, _ = uploads.save_config_upload(data, "my model (v2).json", tmp_path)
    assert Path(path).name == "my_model__v2_.json" and Path(path).parent.parent == tmp_path


@pytest.mark.parametrize(
    ("data", "name", "message"),
    [
        (b"{not json", "c.json", "not valid JSON"),
        (json.dumps(GOOD_CONFIG).encode(), "c.pkl", "expected a .json"),
        (b"", "c.json", "empty"),
        (b"x" * (uploads.MAX_UPLOAD_BYTES + 1), "c.json", "larger than"),
        (json.dumps({"hidden_size": 8}).encode(), "c.json", "lacks"),
        (b"\xff\xfe", "c.json", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "c.json", "nested too deeply"),
        (b'{"hidden_size": ' + b"9" * 5000 + b"}", "c.json", "not valid JSON"),
        (b'{"hidden_size": NaN}', "c.json", "not a number"),
        (b"[1, 2]", "c.json", "one JSON object"),
    ],
)
def test_bad_config_uploads_are_clear_errors_and_leave_nothing(tmp_path, data, name, message):
    with pytest.raises(InputError, match=message):
        uploads.save_config_upload(data, name, tmp_path)
    assert list(tmp_path.iterdir()) == []


def _trace(**fields) -> bytes:
    rec = {"prompt_len": 10, "output_len": 3, "acc_len": {"m": [1, 2, 1]}} | fields
    return json.dumps(rec).encode()


@pytest.mark.parametrize(
    "data",
    [
        b'{"id": 1}',
        b"[1,",
        b'{"prompt_len": Infinity, "output_len": 3, "acc_len": {"m": [1]}}',
        _trace(prompt_len=1e30),
        _trace(prompt_len=100.7),
        _trace(output_len=True),
        _trace(acc_len={"m": [[1, 2]]}),
        _trace(acc_len={"m": [2**31]}),
        _trace(acc_len={"m": [2**32]}),
        _trace(acc_len={"m": [0]}),
        _trace(acc_len={"m": []}),
        _trace(acc_len={}),
        b'{"acc_len": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b"\n\n",
    ],
)
def test_hostile_traces_are_clear_errors_and_leave_nothing(tmp_path, data):
    with pytest.raises(InputError, match="acceptance trace"):
        uploads.save_trace_upload(data, "t.jsonl", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_good_trace_is_kept_and_a_wrong_suffix_is_refused(tmp_path):
    assert uploads.save_trace_upload(GOOD_TRACE.encode(), "t.jsonl", tmp_path).endswith(".jsonl")
    assert uploads.save_trace_upload(GOOD_TRACE.encode(), "t.jsonl", tmp_path)  # again: reused
    with pytest.raises(InputError, match="expected a .jsonl"):
        uploads.save_trace_upload(GOOD_TRACE.encode(), "t.csv", tmp_path)


@pytest.mark.slow
def test_the_page_imports_no_root_finder_it_does_not_use():
    """scipy.optimize would add to every page and worker start: nothing the page runs needs it."""
    import subprocess
    import sys

    code = (
        "import sys, simspec.ui.runs, simspec.ui.figures, simspec.ui.downloads; "
        "print('scipy.optimize' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- the page's layout: logic without a browser, Streamlit only in pages/ ---------------------
LOGIC = ("inputs", "runs", "figures", "downloads", "fleet", "uploads")


def test_only_the_page_modules_import_streamlit():
    import ast

    from conftest import ROOT

    package = ROOT / "simspec"
    pages = package / "ui" / "pages"
    found = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n.split(".")[0] == "streamlit" for n in names):
                found.append(path)
    assert found and all(pages in p.parents for p in found), found


def test_the_logic_modules_import_without_streamlit():
    import subprocess
    import sys

    code = "import sys; sys.modules['streamlit'] = None\n" + "".join(
        f"import simspec.ui.{name}\n" for name in LOGIC
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_app_imported_by_the_pools_fork_server_draws_nothing():
    """The kept pool's fork server imports the main script as ``__mp_main__``."""
    import subprocess
    import sys

    from conftest import ROOT

    code = (
        "import runpy, streamlit as st\n"
        "def drawn(*a, **k): raise SystemExit('drew the page')\n"
        "st.set_page_config = st.title = st.sidebar = drawn\n"
        f"runpy.run_path({str(ROOT / 'app.py')!r}, run_name='__mp_main__')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_app_and_each_ui_module_stay_small():
    from conftest import ROOT

    assert len((ROOT / "app.py").read_text().splitlines()) < 150
    for path in (ROOT / "simspec" / "ui").rglob("*.py"):
        assert len(path.read_text().splitlines()) <= 450, path


# --- what the page's inputs mean (QA round of stop 47) ------------------------------------------


def test_a_k_set_for_a_method_whose_draft_length_is_not_k_is_refused_as_the_cli_does():
    page = inputs.ExplorerInputs(methods=["lookahead"], k=2)
    with pytest.raises(InputError, match="K: does not set lookahead's draft length"):
        inputs.method_for(page, "lookahead")


def test_a_tree_budget_makes_a_chain_drafter_a_tree_that_reads_its_trace_as_chain_alpha():
    """EAGLE-3's preset is a chain; a tree budget asked for is a tree given (on any engine),
    its packaged chain trace read as α at the tree's depth; a chain-only drafter keeps its
    chain."""
    m = inputs.method_for(inputs.ExplorerInputs(engine="sglang", tree_nodes=16), "eagle3")
    assert (m.tree, m.tree_nodes) == ("dynamic", 16)
    assert m.acceptance.tau is not None and "as chain alpha for a tree" in m.acceptance.source
    assert inputs.method_for(inputs.ExplorerInputs(tree_nodes=16), "ngram").tree_nodes is None
    # a budget below the tree's depth is refused, as one past what it drafts is (QA: 1 ran as 3)
    with pytest.raises(InputError, match="at least 3"):
        inputs.method_for(inputs.ExplorerInputs(tree_nodes=1, k=3), "eagle3")
    # and one past what it can hold, by the page's own controls (QA: named tree_topk, unshown)
    with pytest.raises(InputError, match=r"^Tree budget \(nodes\): .* holds at most 910 nodes"):
        inputs.method_for(inputs.ExplorerInputs(tree_nodes=1024, k=10), "eagle3")


def test_under_poisson_arrivals_no_speedup_interval_is_claimed():
    """The paired interval is of summed latencies, the throughput ratio only in a closed loop
    (Little's law): under Poisson both serve the offered rate, so the table gives none, and
    the ratio of throughputs is named for what it is, not a speedup (QA)."""
    row = {"k": 3, "throughput_tok_s": 100.0, "tpot_ms_p50": 10.0, "section_e2e_s": [1.0, 1.1]}
    summary = pd.DataFrame(
        [{"method": "autoregressive", "load": 1, **row}, {"method": "eagle3", "load": 1, **row}]
    )
    closed = runs._with_speedups(summary.copy(), closed=True)
    assert closed.speedup_ci_low.notna().all()
    poisson = runs._with_speedups(summary.copy(), closed=False)
    assert "throughput_ratio" in poisson and "tpot_ratio" in poisson
    assert not {"speedup", "speedup_ci_low", "speedup_ci_high"} & set(poisson.columns)


def test_the_csv_and_titles_say_what_changes_the_numbers():
    """The async-scheduling switch moves the numbers, so the CSV and the chart titles say it;
    a run measures at least ``requests`` and ``turnovers`` x its concurrency, so the CSV gives
    both as what they are (each row's measured_requests says how many it did)."""
    page = inputs.ExplorerInputs(async_scheduling=True, requests=64, turnovers=8)
    cols = downloads.scenario_columns(page)
    assert (cols["async_scheduling"], cols["requests_min"], cols["turnovers"]) == ("on", 64, 8)
    assert "requests" not in cols
    assert figures.scenario_label(page).endswith("· async scheduling")
    assert "scheduling" not in figures.scenario_label(inputs.ExplorerInputs())


def test_the_page_says_what_its_numbers_rest_on_as_the_cli_does():
    page = inputs.ExplorerInputs(model="qwen3-30b-a3b", engine="sglang", methods=["medusa2"])
    lines = inputs.provenance_lines(page)
    assert lines[0].startswith("ran with: bf16 weights") and "engine sglang" in lines[0]
    assert "vicuna-13b's medusa2 (proxy) acceptance" in lines[1]
    assert "no validation case of any qwen3_moe model" in lines[1]
    assert lines[2].startswith("medusa2 simulated as published")
    summary = pd.DataFrame(
        [{"method": "autoregressive", "load": 1, "speedup": 1.0},
         {"method": "medusa2", "load": 1, "speedup": 1.2}]
    )  # fmt: skip
    frame = pd.read_csv(io.StringIO(downloads.results_csv(summary, page)))
    assert {"engine_profile", "acceptance_source"} <= set(frame.columns)
    assert frame.acceptance_source.iloc[0].startswith("none (plain decoding")


def test_a_qps_pages_schedule_measures_the_pages_turnovers_and_says_it_ran_closed_loops():
    """QA: on a QPS page the schedule's closed loops ran the default 64 turnovers while its
    CSV wrote the page's 2 and arrival=poisson."""
    from simspec.studies.schedule.grid import closed_load
    from simspec.ui.downloads import schedule_csv
    from simspec.ui.runs import deployment_for

    inp = inputs.ExplorerInputs(arrival="poisson", requests=16, turnovers=2, methods=["eagle3"])
    assert closed_load(deployment_for(inp), 8).turnovers == 2
    table = pd.DataFrame({"concurrency": [8], "k": [3], "speedup": [1.5]})
    written = pd.read_csv(io.StringIO(schedule_csv(table, inp, "eagle3")))
    assert (written.arrival == "closed").all() and (written.turnovers == 2).all()


def test_messages_and_csv_columns_name_an_upload_as_uploaded_not_by_its_stored_path(tmp_path):
    """QA: captions, errors and the CSV's acceptance_source showed the server's temporary
    folder ("/tmp/simspec-uploads-…/config.json")."""
    from simspec.ui import uploads

    stored = "/tmp/simspec-uploads-k2j4/upload-0f3a9c/config.json"
    assert uploads.as_uploaded(f"mtp not offered: {stored} declares none") == (
        "mtp not offered: config.json declares none"
    )
    assert uploads.as_uploaded(f"acc_len trace '{stored[:-11]}mytrace.jsonl'") == (
        "acc_len trace 'mytrace.jsonl'"
    )
    assert uploads.as_uploaded("no path here") == "no path here"
    # the model id made from the stored folder (QA: "upload-09420af0… does not fit")
    made = "upload-09420af0ba886f4e11589a5b447bbc2d does not fit on h100_sxm at tp=1"
    assert uploads.as_uploaded(made) == "the uploaded model does not fit on h100_sxm at tp=1"


@pytest.mark.slow
@PAGE
def test_a_tree_budget_says_which_chosen_methods_draft_chains_only():
    """QA: with n-gram alone a budget of 8 ran unread, with no word, the numbers unmoved."""
    at = _fresh()
    next(m for m in at.sidebar.multiselect if m.label == "Methods").set_value(["ngram"])
    _starting(at.sidebar.number_input, "Tree budget").set_value(8)
    at.run()
    _ok(at)
    assert any("does not apply to ngram" in c.value for c in at.sidebar.caption)


def test_the_page_names_speedups_known_only_to_more_than_two_percent_as_the_sweep_does():
    """QA: the sweep notes speedups whose interval is wider than ±2 %; the page did not."""
    rows = [
        {"method": "autoregressive", "speedup": 1.0, "speedup_ci_low": 0.9, "speedup_ci_high": 1.1},
        {"method": "eagle3", "speedup": 1.5, "speedup_ci_low": 1.40, "speedup_ci_high": 1.60},
        {"method": "ngram", "speedup": 1.2, "speedup_ci_low": 1.19, "speedup_ci_high": 1.21},
    ]
    note = runs.wide_interval_text(pd.DataFrame(rows))
    assert note.startswith("1 speedup(s) known only to more than ±2%")
    assert runs.wide_interval_text(pd.DataFrame(rows[2:])) == ""
    assert runs.wide_interval_text(pd.DataFrame(rows)[["method", "speedup"]]) == ""


def test_the_page_serves_a_decode_instance_as_the_cli_does():
    """The sidebar's serving switch (SGLang/vLLM/TRT-LLM only): the page's deployment, its
    CSV columns and its footer carry the decode instance, as --disaggregation-mode does."""
    from simspec.ui.choices import disaggregation_choices

    assert disaggregation_choices("sglang") == ["null", "decode"]
    assert disaggregation_choices("hf") == ["null"]
    inp = inputs.ExplorerInputs(engine="sglang", disaggregation_mode="decode")
    assert inputs.deployment_for(inp).disaggregation_mode == "decode"
    assert inputs.serving_columns(inp)["disaggregation_mode"] == "decode"
    assert any("decode instance" in line for line in inputs.provenance_lines(inp))
    plain = inputs.ExplorerInputs(engine="sglang")
    assert not any("decode instance" in line for line in inputs.provenance_lines(plain))


def test_the_page_sets_the_context_vllm_starts_with():
    """Llama-4's 10M-token context is refused by vLLM in most layouts; the sidebar's max model
    len lowers it, as --max-model-len does (QA: the page had no such control)."""
    from simspec.errors import InputError

    scout = {"model": "llama-4-scout", "engine": "vllm", "gpu": "h200", "tp": 4}
    with pytest.raises(InputError, match="max-model-len"):
        inputs.check_inputs(inputs.ExplorerInputs(**scout))
    page = inputs.ExplorerInputs(**scout, max_model_len=32768)
    inputs.check_inputs(page)
    assert inputs.deployment_for(page).scheduler.max_model_len == 32768


def test_no_run_is_called_best_where_none_beats_plain_decoding():
    """QA: "Best: ngram (K=3) at 16 concurrent: 1.00× on throughput" where n-gram never
    drafted (one-token outputs) and EAGLE-3 ran at 0.96x."""
    from simspec.ui.pages.results import best_caption

    spec = pd.DataFrame(
        {"method": ["eagle3", "ngram"], "k": [3, 3], "load": [16, 16], "speedup": [0.96, 0.999]}
    )
    text = best_caption(spec, "speedup", "throughput", "concurrent")
    assert text.startswith("No method is faster than plain decoding on throughput here")
    assert "the highest: ngram (K=3) at 16 concurrent: 1.00×" in text and "Best" not in text
    faster = best_caption(spec.assign(speedup=[1.4, 1.1]), "speedup", "throughput", "concurrent")
    assert faster.startswith("Best: eagle3 (K=3) at 16 concurrent: 1.40× on throughput.")


@pytest.mark.slow
@PAGE
def test_fixed_lengths_past_the_analytic_window_run_and_a_tab_error_stays_in_its_tab(
    monkeypatch,
):
    """QA: fixed 1,000-token prompts were refused by the Analytic tab against the 1,033-token
    window it sizes for one request, and that refusal left the Fleet and Compare tabs empty.
    The closed form prices one request whatever the page's workload, and an error in a tab is
    shown there, the tabs after it still drawn."""
    from conftest import ROOT

    from simspec.errors import ScenarioError
    from simspec.ui.pages import analytic as analytic_page

    def small() -> AppTest:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
        for key, value in {
            "kept:loads_closed": "1", "kept:requests": 8, "kept:turnovers": 0,
            "kept:lengths": "fixed", "kept:prompt": 1000.0, "kept:output": 64.0,
        }.items():  # fmt: skip
            at.session_state[key] = value
        return at.run()

    at = small()
    _ok(at)
    assert any(s.label == "Arrival trace" for s in at.selectbox)

    def refuse(*args, **kwargs):
        raise ScenarioError("the closed form cannot price this")

    analytic_page.analytic_cached.clear()
    monkeypatch.setattr(analytic_page.analytic, "batch1_costs", refuse)
    at = small()
    assert not at.exception
    assert [e.value for e in at.error] == ["the closed form cannot price this"]
    assert any(s.label == "Arrival trace" for s in at.selectbox)  # the Fleet tab drew


def test_a_message_names_the_widget_that_sets_a_flag():
    """QA: the page said "give --max-model-len 102736 or less", where its widget is "Max model
    len"; a flag the page has no widget for stays the CLI's."""
    import app as page

    said = page.in_page_words("give --max-model-len 9 or less, lower dp (--dp), or raise --tp")
    assert said == "give Max model len 9 or less, lower dp (Data-parallel attention), or raise " + (
        "Tensor parallel"
    )
    assert page.in_page_words("raise --gpu-memory-utilization") == (
        "raise --gpu-memory-utilization"
    )


def test_a_message_that_starts_with_a_field_names_its_widget():
    """QA: "rate: Input should be ...", "tp: ..." and "scheduler.max_model_len: ..." named
    fields no widget of the page is called; a field the page has no widget for stays."""
    import app as page

    assert page.in_page_words("rate: Input should be greater than 0").startswith("Loads: ")
    assert page.in_page_words("tp: 32 heads").startswith("Tensor parallel: ")
    said = page.in_page_words("scheduler.max_model_len: 10000000 exceeds")
    assert said.startswith("Max model len: ")
    assert page.in_page_words("seed: too big") == "seed: too big"
    assert page.in_page_words("see tp: here") == "see tp: here"  # only where a line starts
    # a method's refusal names the Methods list (QA: "methods.name: eagle1 does not run ...")
    for field in ("methods.name", "method"):
        assert page.in_page_words(f"{field}: eagle1 does not run").startswith("Methods: ")
