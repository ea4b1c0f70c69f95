"""Measured outcomes remembered in memory, for a long-lived caller (the explorer) that asks for
overlapping runs again and again: a widget change re-runs only what it changed, and the
plain-decoding baseline is reused across methods and K."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

# outcomes kept: many what-ifs of a session (each is at most a few dozen runs), and a bound
MEMO_SIZE = 1024


class Memo:
    """Outcomes by scenario key and the measure that made them, the ``size`` most recently
    used; shared by threads (Streamlit runs each session's script in its own thread)."""

    def __init__(self, size: int = MEMO_SIZE) -> None:
        self.size = size
        self._outcomes: OrderedDict[tuple[str, Callable[..., Any]], Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, measure: Callable[..., Any]) -> tuple[bool, Any]:
        """(whether it is remembered, its outcome)."""
        with self._lock:
            if (key, measure) not in self._outcomes:
                return False, None
            self._outcomes.move_to_end((key, measure))
            return True, self._outcomes[(key, measure)]

    def add(self, key: str, measure: Callable[..., Any], outcome: Any) -> None:
        with self._lock:
            self._outcomes[(key, measure)] = outcome
            self._outcomes.move_to_end((key, measure))
            while len(self._outcomes) > self.size:
                self._outcomes.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._outcomes.clear()

    def __len__(self) -> int:
        return len(self._outcomes)
