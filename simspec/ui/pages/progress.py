"""The page's long answers: shown as they go, by stage, and kept once found.

:class:`StageProgress` is a study's progress (:class:`~simspec.studies.runs.Progress`, what
feeds the CLI's progress bars) drawn as a status box naming the stage and a bar of runs done.
:func:`keep_answer` keeps an answer in Streamlit's cache by the full text of what it was
computed from, so the same inputs again cost nothing, while the work itself (and its progress)
runs outside the cached function: Streamlit replays what a cached function drew on every later hit,
and an element drawn from inside one but created outside it cannot be replayed at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import streamlit as st

T = TypeVar("T")
# answers kept per kind, across sessions: a what-if's frames are a few hundred kB, a schedule's
# and a plan's a few kB
KEPT_ENTRIES = 64


class _NotKept(LookupError):
    """Nothing is kept under this key yet (raised, so Streamlit caches nothing for it)."""


@st.cache_data(show_spinner=False, max_entries=KEPT_ENTRIES)
def _keep(kind: str, key: str, _value: Any = None) -> Any:
    """The answer kept under (``kind``, ``key``); a miss with ``_value`` keeps it (its leading
    underscore: Streamlit does not hash it), a miss without raises :class:`_NotKept`."""
    if _value is None:
        raise _NotKept(kind)
    return _value


def keep_answer(kind: str, key: str, compute: Callable[[], T]) -> T:
    """The ``kind`` answer for ``key`` (the JSON of everything it depends on): kept from an
    earlier call, else ``compute()``'s, kept for the next."""
    try:
        return _keep(kind, key)
    except _NotKept:
        pass
    return _keep(kind, key, compute())


class StageProgress:
    """A study's progress as a status box titled ``title``, naming the stage just done with a
    bar of runs done of those to do. Nothing is drawn until the study first reports, so an
    answer that needs no run shows no box."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.done = 0
        self.total = 0
        self.started = time.monotonic()
        self._box: Any = None
        self._bar: Any = None

    def step(self, label: str) -> None:
        self.done += 1
        self._show(f"{label}: done")

    def grow(self, more: int) -> None:
        if more:  # a study that learned it has more to do (recommend: its band edges)
            self.total += more
            self._show(f"{more} more step(s) found to do")

    def at(self, done: int, total: int) -> None:
        self.done, self.total = done, total
        self._show("starting")

    def _show(self, label: str) -> None:
        if self._box is None:
            self._box = st.status(self.title, expanded=True)
            self._bar = self._box.progress(0.0)
        share = min(self.done / self.total, 1.0) if self.total else 0.0
        self._bar.progress(share, text=f"{label} ({self.done} of {self.total})")
        self._box.update(label=f"{self.title}: {label}")

    def finish(self, failed: bool = False) -> None:
        """Close the box (if one was drawn) with what it took."""
        if self._box is None:
            return
        took = time.monotonic() - self.started
        if failed:
            self._box.update(label=f"{self.title}: stopped", state="error", expanded=False)
            return
        self._box.update(
            label=f"{self.title}: {self.done} step(s) in {took:.0f} s",
            state="complete",
            expanded=False,
        )


@contextmanager
def stages(title: str) -> Iterator[StageProgress]:
    """A :class:`StageProgress` closed when the study ends (marked stopped if it raised)."""
    progress = StageProgress(title)
    try:
        yield progress
    except BaseException:
        progress.finish(failed=True)
        raise
    progress.finish()
