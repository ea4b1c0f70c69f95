"""Finished runs kept by content: scenario key -> summary, in memory and in a JSONL journal that
lets a stopped study resume where it stopped, never with a run of a file since edited (the key
hashes every file a scenario names: :mod:`.keys`)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import warnings
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TextIO

from simspec.engine.metrics import RunSummary
from simspec.errors import InputError
from simspec.outputs import write_text_atomic


class RunCache:
    """Finished runs by content: scenario key -> summary, in memory and, given a ``path``,
    appended to that JSONL file as each finishes (one ``{"key", "summary", "check"}`` line,
    flushed), so a stopped study keeps them.

    ``resume``: start from the runs the file already holds; a damaged entry (cut, edited, not
    UTF-8, a value that is not a finite number: its ``check`` digest or its summary fails) is
    dropped with a warning, so it runs again. Without ``resume`` an existing non-empty file is
    refused (``InputError``): it holds a stopped study's work. An existing file is rewritten
    with just the entries kept (a line cut by the stop must not swallow the next one appended
    after it). A new file (and its folders) is created with the first run added: a study that
    runs nothing leaves none. A summary with a non-finite value is kept in memory only (reading
    it back would count as damage): it runs again on resume.

    ``warn`` receives each warning (default: :func:`warnings.warn`)."""

    def __init__(
        self,
        path: Path | None = None,
        resume: bool = False,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self._warn = warn or _warn
        self._sink: TextIO | None = None
        if path is not None and not resume and path_in_use(path):
            raise InputError(
                "--resume",
                f"{str(path)!r} holds the finished runs of a stopped sweep: pass --resume to "
                "keep them, or delete it to start over",
            )
        self._runs: dict[str, RunSummary] = {}
        if resume and path is not None:
            self._runs, dropped = read_journal(path)
            if dropped:
                self._warn(
                    f"{path}: {dropped} damaged entr{'y' if dropped == 1 else 'ies'} dropped; "
                    "those runs run again"
                )
        if path is not None and path.exists():
            write_text_atomic(path, "".join(_line(k, v) for k, v in self._runs.items()))

    def __contains__(self, key: str) -> bool:
        return key in self._runs

    def __len__(self) -> int:
        return len(self._runs)

    def get(self, key: str) -> RunSummary | None:
        return self._runs.get(key)

    def add(self, key: str, summary: RunSummary) -> None:
        self._runs[key] = summary
        if self.path is not None and _finite(summary):
            if self._sink is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._sink = self.path.open("a", encoding="utf-8")
            self._sink.write(_line(key, summary))
            self._sink.flush()

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()
            self._sink = None

    def __enter__(self) -> RunCache:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def path_in_use(path: Path) -> bool:
    """Whether ``path`` holds something a fresh journal must not overwrite: a non-empty file,
    or anything that is not a regular file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(st.st_mode) or st.st_size > 0


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)


def _finite(summary: RunSummary) -> bool:
    """Whether the summary reads back (:meth:`RunSummary.from_dict`): finite measures, NaN
    only where a measure may be undefined."""
    try:
        RunSummary.from_dict(summary.as_json_dict())
    except ValueError:
        return False
    return True


def _check(key: str, summary_json: str) -> str:
    """A digest of a journal line's content, so that an edited value is seen as damage."""
    return hashlib.sha256(f"{key}\0{summary_json}".encode()).hexdigest()[:16]


def _line(key: str, summary: RunSummary) -> str:
    values = summary.as_json_dict()
    body = json.dumps(values, sort_keys=True)
    return json.dumps({"key": key, "summary": values, "check": _check(key, body)}) + "\n"


def read_journal(path: Path) -> tuple[dict[str, RunSummary], int]:
    """The sound entries of a :class:`RunCache` file, and how many complete lines were dropped
    as damaged (a last line cut by a stop is not counted). Only a regular file is read (a FIFO
    or device would block or never end)."""
    if not path.exists():
        return {}, 0
    if not path.is_file():
        raise InputError("--resume", f"{str(path)!r} is not a regular file")
    data = path.read_bytes()
    lines = data.split(b"\n")
    cut = lines.pop() if lines else b""  # after the last newline: empty, or a line cut short
    done: dict[str, RunSummary] = {}
    dropped = 0
    for raw in lines:
        if not raw.strip():
            continue
        entry = _entry(raw)
        if entry is None:
            dropped += 1
        else:
            done[entry[0]] = entry[1]
    last = _entry(cut) if cut.strip() else None
    if last is not None:
        done[last[0]] = last[1]
    return done, dropped


def _entry(raw: bytes) -> tuple[str, RunSummary] | None:
    """``(key, summary)`` of one journal line, or None if any part of it is unsound."""
    try:
        entry = json.loads(raw.decode("utf-8"))
        key, summary, check = entry["key"], entry["summary"], entry["check"]
        if not isinstance(key, str) or not isinstance(summary, dict):
            return None
        if check != _check(key, json.dumps(summary, sort_keys=True)):
            return None
        return key, RunSummary.from_dict(summary)
    except (ValueError, KeyError, TypeError, RecursionError):  # UnicodeDecodeError, JSON, values
        return None


def read_runs(path: Path | None) -> dict[str, RunSummary]:
    """The summaries a :class:`RunCache` file holds; a damaged or cut line is ignored."""
    if path is None:
        return {}
    return read_journal(path)[0]
