"""Widget values that survive a run the page stops early.

Streamlit deletes the state of every widget a run does not draw, so an error shown halfway down
the page (a bad load list, a missing upload, a model that does not fit) reset every widget
below it to its default, and the next what-if ran settings the user had not chosen (QA: 16
requests became 256, an SLO of 20 ms became 50). A widget drawn with :func:`kept`'s key has its
value re-assigned at the start of each run (:func:`keep_widgets`), which Streamlit's cleanup
leaves alone (its documented way to keep widget state across runs that do not draw it).
Only widgets whose choices do not change with other widgets are kept: a kept value that a new
list of choices did not offer would be refused. A selectbox whose choices follow other widgets
(expert parallel by model and TP, weight precision by GPU and engine) is :func:`remembered`
instead: its last choice is kept in plain session state, which no cleanup deletes, and chosen
again whenever the new list offers it (QA: a bad upload above them, or an engine whose list
differed, reset fp8 weights, EP 2 and DP 2 to their defaults without a word).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import streamlit as st

PREFIX = "kept:"
CHOSEN = "chosen:"


def keep_widgets() -> None:
    """Re-assign every kept widget's value (call before any widget is drawn)."""
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(PREFIX)]:
        st.session_state[key] = st.session_state[key]


def kept(name: str, default: Any, arg: str = "value") -> dict[str, Any]:
    """A widget's ``key`` and, on its first draw only, its default as ``arg`` (a default passed
    beside a value the session holds would be ignored, with a warning on the page)."""
    key = PREFIX + name
    return {"key": key} if key in st.session_state else {"key": key, arg: default}


def clamp(name: str, low: float, high: float) -> None:
    """Bring a kept number back within [low, high] when its bounds moved (Streamlit would reset
    it to the lower bound)."""
    key = PREFIX + name
    if key in st.session_state and st.session_state[key] is not None:
        st.session_state[key] = min(max(st.session_state[key], low), high)


def remembered(name: str, choices: Sequence[Any], default: Any) -> dict[str, Any]:
    """A selectbox's ``key`` and ``index`` for ``choices`` that change with other widgets: the
    last choice :func:`remember` saved where the list offers it, else ``default``. The key
    names the list, so a new list is a new widget starting at that index, and an unchanged one
    keeps the user's pick."""
    options = list(choices)
    saved = st.session_state.get(CHOSEN + name, default)
    value = saved if saved in options else default
    return {"key": f"{CHOSEN}{name}:{options!r}", "index": options.index(value)}


def remember(name: str, value: Any, choices: Sequence[Any], default: Any) -> Any:
    """Save ``value`` as ``name``'s last choice (for :func:`remembered`); returns it. A value
    shown only because ``choices`` lacked the saved choice (the default stood in) saves
    nothing, so the choice comes back with a list that offers it again (QA: EP 2 at TP 2,
    then TP 4, then TP 2 again showed EP 1)."""
    saved = st.session_state.get(CHOSEN + name, default)
    if saved in list(choices) or value != default:
        st.session_state[CHOSEN + name] = value
    return value
