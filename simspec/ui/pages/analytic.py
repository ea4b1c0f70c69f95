"""The "Analytic" tab: the closed form at batch 1 (simspec.studies.analytic) for one chain
method, as heatmaps over acceptance and K, and the best K per acceptance."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from simspec.catalog.models import load_model
from simspec.config import Deployment
from simspec.studies import analytic
from simspec.ui.figures import analytic_figures
from simspec.ui.inputs import ExplorerInputs, chain_methods, deployment_for

K_MAX = 8


@st.cache_data(show_spinner=False, max_entries=16)
def analytic_cached(deploy_json: str, method: str, context: int) -> pd.DataFrame:
    deploy = Deployment.model_validate_json(deploy_json)
    return analytic.analytic_table(analytic.batch1_costs(deploy, method, K_MAX, context))


def analytic_view(inputs: ExplorerInputs) -> None:
    method = st.selectbox("Chain method for the closed form", chain_methods(inputs))
    # within the model's context, which the closed form refuses past (QA: a 2,048-token model
    # at 32,768 had raised past the tab and kept the Fleet and Compare tabs from drawing), and
    # within the max model len set, beside the longest verify (QA: priced past it unsaid)
    model_window = min(32768, load_model(inputs.model).max_position_embeddings)
    window = model_window
    if inputs.max_model_len is not None:
        window = min(window, inputs.max_model_len - K_MAX - 1)
    if window < 1:
        st.info(
            f"Max model len {inputs.max_model_len} leaves no context beside a verify of "
            f"K = {K_MAX} drafted tokens: the closed form needs at least {K_MAX + 2}."
        )
        return
    longest = window // 64 * 64
    if longest > 64:
        context = st.slider("Tokens in the KV cache", 64, longest, min(1024, longest), 64)
    else:  # too short a context for a slider (QA: 40 tokens had raised min == max)
        context = window
        whole = (
            "the model's whole context"
            if window == model_window
            else f"what Max model len {inputs.max_model_len} leaves beside the verify"
        )
        st.caption(f"Tokens in the KV cache: {context}, {whole}")
    table = analytic_cached(deployment_for(inputs).model_dump_json(), method, context)
    fe, fs = analytic_figures(table, inputs, method)
    st.plotly_chart(fe, width="stretch")
    st.plotly_chart(fs, width="stretch")
    st.dataframe(analytic.best_k(table), width="stretch")
