"""simspec what-if explorer: does speculative decoding pay for my model, GPU and traffic?

    streamlit run app.py

This file lays out the page: the sidebar, the model's facts, then one tab per view. Each part
of the page is drawn by its module in simspec.ui.pages; what they show is computed in
simspec.ui and simspec.studies (tested there). Any bad input becomes one message on the page,
never a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st
from pydantic import ValidationError

from simspec.cli.common import FIELD_FLAGS
from simspec.errors import InputError, ScenarioError, validation_message
from simspec.ui.inputs import check_inputs, markdown_text, model_info_markdown
from simspec.ui.pages import analytic, compare, fleet, plan, results, sidebar
from simspec.ui.pages.kept import keep_widgets
from simspec.ui.uploads import as_uploaded

TABS = [*results.TABS, "Plan & schedule", "Analytic", "Fleet", "Compare"]


def main() -> None:
    keep_widgets()  # an error shown below must not reset the widgets it stopped before
    st.title("Does speculative decoding pay?")
    inputs = sidebar.sidebar()
    with st.expander("Model", expanded=False):
        st.markdown(model_info_markdown(inputs))
    check_inputs(inputs)  # what cannot run is refused here, before any run starts
    slo = sidebar.slos()
    res = results.simulate(inputs)
    *result_tabs, plan_tab, analytic_tab, fleet_tab, compare_tab = st.tabs(TABS)
    results.show(result_tabs, res, inputs, slo)
    # an error in one tab is shown in it, and the tabs after it still draw (QA: the Analytic
    # tab's refusal left the Fleet and Compare tabs empty)
    with plan_tab, one_message():
        plan.plan_and_schedule(inputs, slo)
    with analytic_tab, one_message():
        analytic.analytic_view(inputs)
    with fleet_tab, one_message():
        fleet.fleet_view(inputs, slo)
    with compare_tab, one_message():
        compare.compare_view(inputs)


@contextmanager
def one_message() -> Iterator[None]:
    """Every error a user can cause, shown as one message where it happened."""
    try:
        yield
    except (InputError, ScenarioError) as exc:  # may quote an uploaded config: shown as text
        st.error(shown(str(exc)))
    except ValidationError as exc:
        st.error(shown(validation_message(exc)))
    except (OSError, ValueError, ArithmeticError, RuntimeError) as exc:  # not a traceback
        st.error(shown(f"simspec could not run this scenario: {type(exc).__name__}: {exc}"))


def draw() -> None:
    """The page, with every error a user can cause shown as one message."""
    st.set_page_config(page_title="simspec explorer", layout="wide")
    with one_message():
        main()


# the CLI's flags that a widget of the page sets, by the widget's label (QA: "give
# --max-model-len 102736 or less" on a page whose widget is "Max model len"); a flag the page
# has no widget for stays the CLI's
WIDGETS = {
    "--max-model-len": "Max model len",
    "--tp": "Tensor parallel",
    "--dp": "Data-parallel attention",
    "--ep": "Expert parallel",
    "--engine": "Engine profile",
    "--gpu": "GPU",
    "--model": "Model",
    "--precision": "Weight precision",
}
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# the scenario fields a refusal may start with, by the widget that sets them: the CLI's
# fields (FIELD_FLAGS) whose flag a widget sets, and the loads, which the page's "Loads" sets
# for either arrival kind (QA: "rate: ...", "tp: ..." and "scheduler.max_model_len: ..."
# named no widget of the page)
FIELD_WIDGETS = {
    f: WIDGETS[flag] for f, flag in FIELD_FLAGS.items() if flag in WIDGETS
} | dict.fromkeys(("rate", "workload.rate", "workload.concurrency", "batch_sizes"), "Loads")
# a refusal of a method (its name, the engine's refusal of it: QA, "methods.name: eagle1 does
# not run on engine trtllm") names the Methods list that chose it
FIELD_WIDGETS |= dict.fromkeys(("method", "method.name", "methods.name"), "Methods")
_FIELD = re.compile(r"^([a-z_][a-z0-9_.]*): ", re.MULTILINE)


def in_page_words(message: str) -> str:
    """``message`` with each CLI flag, and each scenario field it starts with, that a widget
    of the page sets said as that widget."""
    message = _FIELD.sub(
        lambda m: f"{FIELD_WIDGETS[m.group(1)]}: " if m.group(1) in FIELD_WIDGETS else m.group(0),
        message,
    )
    return _FLAG.sub(lambda m: WIDGETS.get(m.group(0), m.group(0)), message)


def shown(message: str) -> str:
    """An error as the page shows it: as text, an upload named as it was uploaded, flags as
    the widgets that set them."""
    return markdown_text(in_page_words(as_uploaded(message)))


# The simulation pool's workers start from a fork server that imports this file as
# ``__mp_main__`` (multiprocessing re-imports the main script): only Streamlit, which runs it
# as ``__main__``, draws the page.
if __name__ == "__main__":
    draw()
