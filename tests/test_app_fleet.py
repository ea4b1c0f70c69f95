"""The explorer's Fleet view: its logic (simspec.ui.fleet), its arrival-trace
uploads, and the page headless (streamlit.testing.v1.AppTest) on a short window."""

from __future__ import annotations

import os

import numpy as np
import pytest

from simspec.catalog.arrival_traces import transformed
from simspec.errors import InputError
from simspec.ui import fleet as fleet_ui
from simspec.ui import inputs, uploads

AppTest = pytest.importorskip("streamlit.testing.v1").AppTest
TIMEOUT = 600  # a hang guard, not a speed bound: the page shares two cores with the suite
SHORT = {"end_s": 120.0}  # two minutes of azure-conv: ~560 requests, about a second


@pytest.mark.slow
def test_the_view_conserves_requests_and_reports_each_replica():
    page = inputs.ExplorerInputs()
    f = fleet_ui.FleetInputs(**SHORT, replicas=3, router="round_robin")
    res = fleet_ui.run_view(page, f)
    arrived = len(transformed("azure-conv", None, 120.0))
    assert len(res["requests"]) == arrived == res["row"]["requests"]
    assert res["utilisation"]["requests"].sum() == arrived
    assert list(res["utilisation"]["replica"]) == [0, 1, 2]
    assert res["attainment"]["requests"].sum() == arrived
    assert ((res["attainment"]["attainment"] >= 0) & (res["attainment"]["attainment"] <= 1)).all()
    fleet_total = res["timeline"].query("replica == -1")["arrivals"].sum()
    assert fleet_total == arrived
    csv = fleet_ui.requests_csv(res["requests"], page, f)
    assert csv.splitlines()[0].startswith("model,gpu,tp,engine,method,k,")
    assert len(csv.splitlines()) == arrived + 1
    summary = res["summary"].set_index("measure")
    assert summary.loc["ttft_ms_p99", "ci_low"] <= summary.loc["ttft_ms_p99", "value"]


def test_a_speculative_fleet_draws_acceptance_from_the_traces_domain():
    page = inputs.ExplorerInputs()
    code = fleet_ui.FleetInputs(**SHORT, trace="azure-code", method="eagle3")
    assert fleet_ui.dataset_for(page, code) == "instructcoder"
    sc = fleet_ui.scenario_for(page, code)
    assert sc.workload.arrival == "replay" and sc.workload.trace_end_s == 120.0
    assert sc.method.name == "eagle3"
    # the download says which dataset's acceptance, whose, and with what sampling (QA)
    alpha = inputs.ExplorerInputs(acceptance="alpha", alpha=0.6)
    cols = fleet_ui.fleet_columns(alpha, code)
    assert cols["acceptance_dataset"] == "instructcoder" and cols["alpha"] == 0.6
    assert cols["acceptance_source"] and "temperature" in cols and cols["engine_profile"]
    assert cols["hardware_profile"]  # as the results, plan and schedule CSVs say it (QA)
    # async scheduling changes a fleet's steps, and a tree its verify: both are said (QA)
    on = fleet_ui.fleet_columns(alpha.model_copy(update={"async_scheduling": True}), code)
    assert (cols["async_scheduling"], on["async_scheduling"]) == ("engine default", "on")
    assert {"tree", "tree_nodes"} <= set(cols)


@pytest.mark.parametrize(
    "fields",
    [{"router": "fastest"}, {"start_s": 60.0, "end_s": 30.0}, {"replicas": 0}, {"method": "x"}],
)
def test_bad_fleet_inputs_are_refused(fields):
    with pytest.raises(ValueError):
        fleet_ui.FleetInputs(**fields)


def test_a_window_with_no_request_is_an_input_error():
    page = inputs.ExplorerInputs()
    f = fleet_ui.FleetInputs(start_s=5000.0, end_s=5100.0)
    with pytest.raises(InputError, match="window"):
        fleet_ui.run_view(page, f)


def test_an_arrival_trace_upload_is_checked_and_kept(tmp_path):
    good = b"arrival_s,prompt_len,output_len\n0,10,5\n0.5,20,7\n"
    path = uploads.save_arrival_trace_upload(good, "mine.csv", tmp_path)
    assert os.path.dirname(os.path.dirname(path)) == str(tmp_path) and path.endswith("mine.csv")
    assert uploads.save_arrival_trace_upload(good, "mine.csv", tmp_path) == path
    bad = b"arrival_s,prompt_len,output_len\n0,10,5\n1,0,7\n"
    with pytest.raises(InputError, match="mine2.csv row 2 column prompt_len"):
        uploads.save_arrival_trace_upload(bad, "mine2.csv", tmp_path)
    with pytest.raises(InputError, match="csv or .parquet"):
        uploads.save_arrival_trace_upload(good, "mine.jsonl", tmp_path)
    with pytest.raises(InputError, match="larger than"):
        uploads.save_arrival_trace_upload(b"x" * (uploads.MAX_UPLOAD_BYTES + 1), "a.csv", tmp_path)
    # the bad one is gone, its folder too
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(os.path.dirname(path))]


def _ok(at) -> None:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


def _by_label(widgets, label: str):
    return next(w for w in widgets if w.label.startswith(label))


def _replay(at):
    _by_label(at.button, "Replay the trace").click().run()
    _ok(at)
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert sum("Fleet timelines" in t for t in titles) == 1
    assert sum("per 10 s of arrivals" in t for t in titles) == 1
    assert any(d.label == "Download per-request CSV" for d in at.get("download_button"))


@pytest.mark.slow
@pytest.mark.xdist_group("explorer_page")  # with tests/test_app.py's page tests (see PAGE there)
def test_the_fleet_view_renders_and_rerenders_on_a_short_window():
    from conftest import ROOT

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    at.sidebar.text_input[0].set_value("16").run()  # a small what-if on the other tabs
    _ok(at)
    assert len(at.tabs) == 10 and at.tabs[8].label == "Fleet"
    _by_label(at.number_input, "Window end").set_value(120.0).run()
    _replay(at)
    assert any("requests within both SLOs" in m.value for m in at.markdown)
    _by_label(at.selectbox, "Router").set_value("power_of_two").run()
    _ok(at)
    _by_label(at.number_input, "Replicas").set_value(3).run()
    _replay(at)
    util = at.dataframe[-1].value
    assert list(util["replica"]) == [0, 1, 2]
    _by_label(at.number_input, "Window start").set_value(200.0).run()
    assert not at.exception and "must be after its start" in at.error[0].value
    np.testing.assert_equal(len(at.error), 1)


def test_the_per_request_csv_keeps_clock_times_in_full():
    """As simspec fleet --out writes them (QA: 3456.789123 s read 3456.79 in the download, a
    TTFT rebuilt from the clocks 30 ms instead of 34.333)."""
    import pandas as pd

    table = pd.DataFrame(
        {"arrival_s": [3456.789123], "first_token_s": [3456.823456], "ttft_ms": [34.3331234]}
    )
    csv = fleet_ui.requests_csv(table, inputs.ExplorerInputs(), fleet_ui.FleetInputs(**SHORT))
    row = pd.read_csv(__import__("io").StringIO(csv)).iloc[0]
    assert row.arrival_s == 3456.789123 and row.first_token_s == 3456.823456
    assert row.ttft_ms == 34.3331  # other numbers to 6 significant digits


def test_the_fleet_view_puts_prefill_instances_in_front_of_decode_instances():
    """The page's prefill instances, as fleet --prefill-replicas: the replicas decode only,
    every request is prefilled once, and the label and the per-replica table say which is
    which; an engine without disaggregated serving is refused by the field."""
    page = inputs.ExplorerInputs()
    f = fleet_ui.FleetInputs(end_s=60.0, replicas=2, prefill_replicas=1)
    cfg = fleet_ui.fleet_config(page, f)
    assert cfg.prefill is not None and cfg.prefill.replicas == 1
    assert {r.disaggregation_mode for r in cfg.replicas} == {"decode"}
    assert fleet_ui.label(page, f).startswith("1 prefill + 2 decode instances")
    res = fleet_ui.run_view(page, f)
    util = res["utilisation"]
    arrived = len(transformed("azure-conv", None, 60.0))
    assert list(util.role) == ["prefill", "decode", "decode"]
    assert util.requests.iloc[0] == arrived == util.requests.iloc[1:].sum()
    hf = inputs.ExplorerInputs(engine="hf")
    with pytest.raises(InputError, match="Prefill instances: engine hf"):
        fleet_ui.fleet_config(hf, f)
    import io

    import pandas as pd

    csv = pd.read_csv(io.StringIO(fleet_ui.requests_csv(res["requests"], page, f)))
    assert set(csv.disaggregation_mode) == {"decode"} and set(csv.prefill_replicas) == {1}
