"""A first day in the explorer: the sidebar offers every deployment the CLI takes (weight
precision, KV-cache dtype, TP past one node, EP and DP) and builds the deployment the CLI
builds; the model panel shows the layout selected; long answers show their stages as they go
and are kept, so asking again costs nothing."""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace

import pandas as pd
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from simspec.catalog.hardware import engine_ids, gpu_ids, load_gpu
from simspec.catalog.precision import (
    KV_CACHE_DTYPES,
    PRECISIONS,
    effective_precision,
    load_precision,
)
from simspec.cli.flags import ServingFlags
from simspec.config import Deployment
from simspec.errors import InputError
from simspec.studies.schedule import bands, grid
from simspec.ui import choices, downloads, figures, inputs, runs

AppTest = pytest.importorskip("streamlit.testing.v1").AppTest
TIMEOUT = 600  # a hang guard, not a speed bound: the page shares two cores with the suite
SMALL = {"requests": 8, "lengths": "fixed", "prompt_mean": 32, "output_mean": 16}
IN_PROCESS = replace(runs.RUNS, executor="serial")  # the page's memo, no pool


def _valid(**fields) -> bool:
    try:
        Deployment(**fields)
    except ValidationError:
        return False
    return True


class Told:
    """What a study told its progress, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def step(self, label: str) -> None:
        self.calls.append(("step", label))

    def grow(self, more: int) -> None:
        self.calls.append(("grow", more))

    def at(self, done: int, total: int) -> None:
        self.calls.append(("at", done, total))

    @property
    def labels(self) -> list[str]:
        return [c[1] for c in self.calls if c[0] == "step"]


# -- the deployment the sidebar offers is the one the CLI takes -------------------------------
def test_tensor_parallel_offers_every_degree_the_cli_takes_for_tp_past_one_node():
    assert choices.tp_choices() == [tp for tp in range(1, 65) if _valid(tp=tp)]
    assert 16 in choices.tp_choices()  # DeepSeek-V3 on H100: two 8-GPU nodes


def test_deepseek_v3_at_tp_16_on_h100_is_a_page_the_explorer_can_run():
    page = inputs.ExplorerInputs(model="deepseek-v3", tp=16, methods=["mtp"])
    inputs.check_inputs(page)  # fits and runs: no error
    assert inputs.deployment_for(page).tp == 16


@pytest.mark.parametrize("model", ["deepseek-v3", "qwen3-30b-a3b", "llama-3.1-8b"])
def test_expert_parallel_offers_exactly_what_the_deployment_takes(model):
    moe = model != "llama-3.1-8b"
    for tp in choices.tp_choices():
        offered = choices.ep_choices(model, tp)
        assert offered[0] == 1
        # a dense model has no experts to spread; a MoE one takes 1 or tp
        assert offered == ([1, tp] if moe and tp > 1 else [1])
        assert all(_valid(tp=tp, ep=ep) for ep in offered)
        assert not any(_valid(tp=tp, ep=ep) for ep in range(2, tp) if ep not in offered)


@pytest.mark.parametrize("engine", engine_ids())
def test_data_parallel_attention_offers_the_divisors_of_tp_where_the_engine_runs_it(engine):
    from simspec.catalog.hardware import load_engine

    runs_dp = bool(load_engine(engine).dp_attention)
    for tp in choices.tp_choices():
        offered = choices.dp_choices(engine, tp)
        assert offered == ([d for d in range(1, tp + 1) if _valid(tp=tp, dp=d)] if runs_dp else [1])
        # for a model with experts; a dense one runs none (QA: offered DP 2, then refused it)
        assert choices.dp_choices(engine, tp, "qwen3-30b-a3b") == offered
        assert choices.dp_choices(engine, tp, "llama-3.1-8b") == [1]


@pytest.mark.parametrize("gpu", gpu_ids())
def test_precision_offers_what_the_cli_takes_on_that_gpu_after_the_checkpoints(gpu):
    def runs_on(name: str) -> bool:
        try:
            effective_precision(load_precision(name), load_gpu(gpu))
        except InputError:
            return False
        return True

    offered = choices.precision_choices(gpu)
    assert offered[0] is None is Deployment().precision  # the CLI's default: the checkpoint's
    assert offered[1:] == [p for p in PRECISIONS if runs_on(p)]
    assert choices.precision_label("deepseek-v3", None) == "checkpoint's (fp8)"


def test_a_gpu_without_fp8_tensor_cores_says_how_it_runs_fp8_weights():
    assert "weight-only" in choices.precision_caveat("fp8", "a100_80gb")
    assert choices.precision_caveat("fp8", "h100_sxm") == ""
    assert choices.precision_caveat(None, "a100_80gb") == ""


def test_the_kv_cache_dtypes_are_the_clis_and_default_to_its_default():
    assert inputs.ExplorerInputs().kv_cache_dtype == Deployment().kv_cache_dtype == "auto"
    assert KV_CACHE_DTYPES == ("auto", "bf16", "fp8")
    assert choices.kv_cache_label("auto").startswith("auto")


def test_the_page_builds_the_deployment_the_cli_builds_from_the_same_choices():
    chosen = {"model": "qwen3-30b-a3b", "gpu": "h200", "tp": 4, "ep": 4, "dp": 2}
    chosen |= {"engine": "sglang", "precision": "fp8", "kv_cache_dtype": "fp8"}
    page = inputs.deployment_for(inputs.ExplorerInputs(**chosen))
    cli = Deployment(**ServingFlags(**chosen).serving_fields())
    assert page.model_dump(exclude={"workload"}) == cli.model_dump(exclude={"workload"})
    assert (page.precision, page.kv_cache_dtype, page.ep, page.dp) == ("fp8", "fp8", 4, 2)


def test_downloads_and_titles_name_the_precision_kv_dtype_and_layout():
    page = inputs.ExplorerInputs(
        model="qwen3-30b-a3b", tp=4, ep=4, precision="fp8", kv_cache_dtype="fp8", **SMALL
    )
    summary = pd.DataFrame([{"method": "autoregressive", "load": 1, "speedup": 1.0}])
    frame = pd.read_csv(io.StringIO(downloads.results_csv(summary, page)))
    row = frame.iloc[0]
    assert (row.ep, row.dp, row.precision, row.kv_cache_dtype) == (4, 1, "fp8", "fp8")
    kept = pd.read_csv(io.StringIO(downloads.results_csv(summary, inputs.ExplorerInputs())))
    assert kept.precision[0] == "bf16" and kept.kv_cache_dtype[0] == "auto"  # as run
    assert (
        figures.scenario_label(page)
        == "qwen3-30b-a3b · h100_sxm · TP 4 EP 4 · vllm · fp8 weights · fp8 KV"
    )


# -- the model panel shows the layout selected ------------------------------------------------
def _panel(**fields) -> dict[str, str]:
    return dict(inputs.model_info(inputs.ExplorerInputs(**fields)))


def test_the_model_panel_shows_what_each_gpu_holds_at_the_selected_tp():
    one, two = _panel(tp=1), _panel(tp=2)
    assert "per GPU at tp=2" in two and "per GPU at tp=1" not in two
    assert "per GPU at tp=1" in one
    weights = [
        float(re.search(r"weights ([\d.]+) GiB", p[f"per GPU at tp={n}"]).group(1))
        for n, p in ((1, one), (2, two))
    ]
    assert weights[1] < weights[0]  # the layers split over the two GPUs


def test_the_model_panel_shows_the_expert_and_attention_layout():
    panel = _panel(model="deepseek-v3", tp=16, ep=16, dp=2)
    assert any(k.startswith("per GPU at tp=16, ep=16, dp=2") for k in panel)


def test_the_model_panel_holds_weights_and_kv_at_the_selected_precision_and_dtype():
    bf16, fp8 = _panel(tp=2), _panel(tp=2, precision="fp8", kv_cache_dtype="fp8")
    kv = [float(p["KV per token per GPU"].split()[0]) for p in (bf16, fp8)]
    assert kv[1] == kv[0] / 2 and "in fp8" in fp8["KV per token per GPU"]
    assert "in fp8" in fp8["per GPU at tp=2"]
    tokens = [int(p["KV cache"].split()[0].replace(",", "")) for p in (bf16, fp8)]
    assert tokens[1] > 2 * tokens[0]  # half the bytes per token, and more memory free


def test_the_model_panel_says_a_layout_does_not_fit_instead_of_failing():
    panel = _panel(model="deepseek-v3", tp=1, methods=["mtp"])
    assert "does not fit" in panel["KV cache"] and "tp=16" in panel["KV cache"]


def test_the_model_panel_says_what_simspec_models_says_for_that_layout():
    from simspec.cli.main import app

    out = CliRunner().invoke(app, ["models", "qwen3-30b-a3b", "--tp", "4", "--ep", "4"]).output
    panel = _panel(model="qwen3-30b-a3b", tp=4, ep=4)
    for label in ("per GPU at tp=4, ep=4", "KV per token per GPU", "KV cache"):
        assert f"{label}: {panel[label]}" in " ".join(out.split()), label


# -- progress by stage, fed by the studies' progress callbacks --------------------------------
def test_the_what_if_tells_how_many_runs_then_each_by_its_stage():
    runs.forget_runs()
    page = inputs.ExplorerInputs(methods=["eagle3", "ngram"], loads=[2], **SMALL)
    told = Told()
    runs.run(page, replace(IN_PROCESS, progress=told))
    assert told.calls[0] == ("at", 0, 3)
    assert sorted(told.labels) == [
        "baseline (autoregressive) at batch size 2",
        "method 1 of 2 (eagle3) at batch size 2",
        "method 2 of 2 (ngram) at batch size 2",
    ]
    again = Told()
    runs.run(page, replace(IN_PROCESS, progress=again))
    assert again.calls == []  # nothing new to run: nothing to show
    poisson = inputs.ExplorerInputs(methods=["eagle3"], arrival="poisson", loads=[2], **SMALL)
    assert runs.stage(poisson, 2.0, "eagle3") == "method 1 of 1 (eagle3) at 2 requests/s"


def test_recommend_k_tells_each_grid_concurrency_and_each_band_edge(monkeypatch):
    monkeypatch.setattr(grid, "DEFAULT_CONCURRENCIES", (1, 2))
    page = inputs.ExplorerInputs(methods=["eagle3"], **SMALL)
    told = Told()
    sched = runs.schedule(page, "eagle3", replace(IN_PROCESS, progress=told))
    assert told.calls[0] == ("at", 0, 2)
    assert told.labels[:2] == ["concurrency 1", "concurrency 2"]
    assert all(re.match(r"crossover", label) for label in told.labels[2:])
    quiet = runs.schedule(
        page, "eagle3", IN_PROCESS
    )  # where it runs and whom it tells: same answer
    pd.testing.assert_frame_equal(sched.recommended.table, quiet.recommended.table)


def test_recommend_k_on_the_page_measures_to_a_precision_target_as_the_cli(monkeypatch):
    """issue 26: the page's schedule runs to the precision asked (the CLI's default ±2 %)
    rather than the sidebar's fixed length, each row saying the requests it measured, and its
    CSV says the target instead of the page's requests and turnovers."""
    from simspec.engine import window

    monkeypatch.setattr(grid, "DEFAULT_CONCURRENCIES", (2,))
    page = inputs.ExplorerInputs(methods=["eagle3"], **SMALL)
    fixed = runs.schedule(page, "eagle3", IN_PROCESS).recommended.table
    aimed = runs.schedule(page, "eagle3", IN_PROCESS, 0.05).recommended.table
    assert (fixed.requests == max(8, page.turnovers * 2)).all()  # the sidebar's length
    assert (aimed.requests >= window.floor_requests(2)).all()
    half = (aimed.best_speedup_ci_high - aimed.best_speedup_ci_low) / 2 / aimed.best_speedup
    assert ((half <= 0.05) | (aimed.requests == window.cap_requests(2))).all()
    text = downloads.schedule_csv(aimed, page, "eagle3", 0.05)
    frame = pd.read_csv(io.StringIO(text))
    assert (frame.precision_target == 0.05).all()
    assert "requests_min" not in frame and "turnovers" not in frame
    plain = pd.read_csv(io.StringIO(downloads.schedule_csv(fixed, page, "eagle3")))
    assert "precision_target" not in plain and (plain.requests_min == 8).all()


# -- the page, headless, on a small what-if ---------------------------------------------------
@pytest.fixture
def small_page(monkeypatch):
    """A fresh page whose first what-if is small (the sidebar's defaults, two runs), with the
    page's kept answers cleared after."""
    from conftest import ROOT

    from simspec.ui.pages import progress, sidebar

    small = inputs.ExplorerInputs(methods=["eagle3"], loads=[4], requests=8, turnovers=0)
    monkeypatch.setattr(sidebar, "DEFAULT", small)
    runs.forget_runs()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    yield at
    progress._keep.clear()


def _ok(at) -> None:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


def _select(at, label: str, value) -> None:
    next(s for s in at.sidebar.selectbox if s.label == label).set_value(value).run()
    _ok(at)


@pytest.mark.slow
def test_the_sidebar_offers_precision_kv_dtype_and_tp_16_at_the_clis_defaults(small_page):
    at = small_page
    at.run()
    _ok(at)
    boxes = {s.label: s for s in at.sidebar.selectbox}
    assert boxes["Weight precision"].value is None  # the checkpoint's, as --precision unset
    assert boxes["Weight precision"].options[0] == "checkpoint's (bf16)"
    assert boxes["KV-cache dtype"].value == "auto"
    assert "16" in boxes["Tensor parallel"].options
    assert "Expert parallel" not in boxes  # llama-3.1-8b is dense


@pytest.mark.slow
def test_the_first_render_names_each_stage_and_the_same_inputs_again_run_nothing(small_page):
    at = small_page
    at.run()
    _ok(at)
    box = at.status[0]
    assert box.state == "complete" and box.label.startswith("Simulating")
    bar = at.get("progress")[0]
    assert bar.value == 100 and re.search(r"(baseline|method 1 of 1).* at batch size 4", bar.text)
    at.run()  # a rerun with the same inputs: kept, no box
    _ok(at)
    assert len(at.status) == 0


@pytest.mark.slow
def test_selected_tp_precision_and_kv_dtype_reach_the_panel_and_every_chart(small_page):
    at = small_page
    at.run()
    _select(at, "Tensor parallel", 2)
    _select(at, "Weight precision", "fp8")
    _select(at, "KV-cache dtype", "fp8")
    panel = at.expander[0].markdown[0].value
    assert "per GPU at tp=2" in panel and "in fp8" in panel
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert titles and all("TP 2 · vllm · fp8 weights · fp8 KV" in t for t in titles)


@pytest.mark.slow
def test_recommend_k_shows_its_stages_and_asking_again_costs_nothing(small_page, monkeypatch):
    calls = []

    def fake_recommend(deploy, method, ks, concurrencies, *args, runs, knob="k", **kwargs):
        calls.append(concurrencies)
        for c in concurrencies:
            runs.step(f"concurrency {c}")
        rows = [
            {"concurrency": c, **{f"speedup_k{k}": 1.5 - 0.1 * k for k in ks}}
            | {"best_k": 1, "best_speedup": 1.4}
            for c in concurrencies
        ]
        return pd.DataFrame(rows)

    monkeypatch.setattr(bands, "recommend", fake_recommend)
    at = small_page
    at.run()
    button = lambda: next(b for b in at.button if b.label.startswith("Recommend K"))  # noqa: E731
    button().click().run()
    _ok(at)
    box = next(s for s in at.status if s.label.startswith("Simulating every K"))
    assert box.state == "complete"
    assert at.get("progress")[-1].text.startswith(f"concurrency {grid.DEFAULT_CONCURRENCIES[-1]}")
    button().click().run()
    _ok(at)
    assert len(calls) == 1  # kept: the second press ran nothing
    assert any("best_k" in d.value.columns for d in at.dataframe)


@pytest.mark.slow
def test_the_page_warns_of_requests_it_left_unserved(small_page):
    """Requests longer than the model's context are unfinishable: the page says so and its
    table has the column, as the sweep's note and CSV do (QA: the page said nothing)."""
    at = small_page
    at.run()
    _select(at, "Model", "vicuna-7b")  # a 2,048-token context under ShareGPT's lengths
    label = "Requests measured per run"
    requests = next(n for n in at.sidebar.number_input if n.label.startswith(label))
    requests.set_value(64).run()
    _ok(at)
    assert any("unserved" in w.value for w in at.warning)


def test_a_uniform_kv_pool_shows_every_layers_kv_per_token():
    """QA: Llama-4 Maverick on vLLM (hybrid manager off: every layer caches every token) showed
    the full-attention layers' 6.0 KiB per token beside a capacity counted at 24.0."""
    from simspec.engine.layout import ParallelLayout
    from simspec.studies.model_facts import model_facts

    facts = dict(model_facts("llama-4-maverick", "h200", "vllm", ParallelLayout(8, 1, 1)))
    assert facts["KV per token per GPU"].startswith("24.0 KiB in bf16")
    assert "every layer every token" in facts["KV per token per GPU"]
