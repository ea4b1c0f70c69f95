"""The "Compare" tab: the user's own benchmark result (vllm bench serve, SGLang
bench_serving), measured against what simspec predicts on the sidebar's deployment, with a
calibrated profile (``simspec calibrate bench``) if one is uploaded. The comparison is kept in
the session, keyed by the uploads and the sidebar."""

from __future__ import annotations

import hashlib

import streamlit as st

from simspec.errors import InputError, ScenarioError
from simspec.ui import uploads
from simspec.ui.compare import compare_upload, shown
from simspec.ui.inputs import ExplorerInputs, markdown_text


def compare_view(inputs: ExplorerInputs) -> None:
    """The uploaders, the button, and the kept comparison if it is of these inputs. A bad
    upload is a message in this tab: the other tabs stay."""
    st.caption(
        "Upload what your own `vllm bench serve` (--save-result JSON, or the printed result "
        "block as .txt) or SGLang `bench_serving` (--output-file JSONL) measured: each run is "
        "simulated with its own workload on the sidebar's deployment (the model the file "
        "names, where simspec has it), plain decoding. TTFT includes the client's and the "
        "HTTP server's time, which simspec does not model."
    )
    left, right = st.columns(2)
    with left:
        result = st.file_uploader(
            "Benchmark result (.json, .jsonl or .txt)",
            type=["json", "jsonl", "txt"],
            max_upload_size=uploads.MAX_UPLOAD_MB,
        )
    with right:
        profile = st.file_uploader(
            "Calibrated profile (optional: simspec calibrate bench --out)",
            type=["yaml", "yml", "json"],
            max_upload_size=uploads.MAX_UPLOAD_MB,
        )
    if result is None:
        st.info("Upload a benchmark result to compare it with simspec's prediction.")
        return
    try:
        path = uploads.save_result_upload(result.getvalue(), result.name)
        prof = (
            uploads.save_profile_upload(profile.getvalue(), profile.name)
            if profile is not None
            else None
        )
        key = ("compare", inputs.model_dump_json(), _digest(result), _digest(profile))
        if st.button("Compare with simspec"):
            with st.spinner("simulating each run…"):
                st.session_state[key] = compare_upload(path, inputs, profile=prof)
        done = st.session_state.get(key)
        if done is None:
            return
        st.dataframe(shown(done.frame), hide_index=True)
        st.plotly_chart(done.figure, width="stretch")
        for note in done.notes:
            st.caption(markdown_text(uploads.as_uploaded(note)))
    except (InputError, ScenarioError) as exc:
        st.error(markdown_text(uploads.as_uploaded(str(exc))))


def _digest(upload: object) -> str:
    return "" if upload is None else hashlib.sha256(upload.getvalue()).hexdigest()  # type: ignore[attr-defined]
