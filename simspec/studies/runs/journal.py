"""Finished runs kept by content: scenario key -> summary, in memory and in a JSONL journal that
lets a stopped study resume where it stopped, never with a run of a file since edited (the key
hashes every file a scenario names: :mod:`.keys`) nor one another simspec version ran (each
line names the version that wrote it)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import warnings
from collections.abc import Callable
from functools import cache
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import NamedTuple, TextIO

from simspec.catalog.tables import read_input, shown
from simspec.engine.metrics import RunSummary
from simspec.errors import InputError
from simspec.outputs import write_text_atomic

# One line per finished run is about 1.8 KB (a RunSummary's values and its ten section means,
# measured on an EAGLE-3 run; 2 KB with every number at full length), and one study runs at most
# MAX_RUNS (10,000), so a study's journal is at most ~20 MB. The cap leaves room for three: the
# entries of earlier studies under the same --out are kept on resume. Checked before reading, so
# a 20 GB (sparse) file is refused, not read.
MAX_JOURNAL_BYTES = 64 * 1024 * 1024


class RunCache:
    """Finished runs by content: scenario key -> summary, in memory and, given a ``path``,
    appended to that JSONL file as each finishes (one ``{"key", "summary", "check"}`` line,
    flushed), so a stopped study keeps them.

    ``resume``: start from the runs the file already holds; a damaged entry (cut, edited, not
    UTF-8, a value that is not a finite number: its ``check`` digest or its summary fails) is
    dropped with a warning, so it runs again; so is one another simspec version wrote (a new
    version may compute other numbers for the same scenario). A file over
    :data:`MAX_JOURNAL_BYTES` is refused. Without ``resume`` an existing non-empty file is
    refused (``InputError``): it holds a stopped study's work. An existing file is rewritten
    with just the entries kept (a line cut by the stop must not swallow the next one appended
    after it). A new file (and its folders) is created with the first run added: a study that
    runs nothing leaves none. A summary with a non-finite value is kept in memory only (reading
    it back would count as damage): it runs again on resume.

    A symbolic link as ``path`` is refused (``InputError``), and the file is opened without
    following one: a link planted under the journal's name must not make simspec append to,
    create or replace the file it points to.

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
        self._version = package_version() if path is not None else ""
        if path is not None and path.is_symlink():
            raise InputError(
                "--out",
                f"{shown(path)} is a symbolic link: a journal is never written through one; "
                "remove it, or choose another --out",
            )
        if path is not None and not resume and path_in_use(path):
            raise InputError(
                "--resume",
                f"{shown(path)} holds the finished runs of a stopped sweep: pass --resume to "
                "keep them, or delete it to start over",
            )
        self._runs: dict[str, RunSummary] = {}
        if resume and path is not None:
            found = scan_journal(path, self._version)
            self._runs = found.runs
            if found.damaged:
                self._warn(
                    f"{shown(path)}: {_entries(found.damaged, 'damaged ')} dropped; "
                    "those runs run again"
                )
            if found.other_version:
                self._warn(
                    f"{shown(path)}: {_entries(found.other_version)} written by another simspec "
                    f"version than {self._version} dropped; those runs run again"
                )
        if path is not None and path.exists():
            lines = (_line(k, v, self._version) for k, v in self._runs.items())
            write_text_atomic(path, "".join(lines))

    def __contains__(self, key: str) -> bool:
        return key in self._runs

    def __len__(self) -> int:
        return len(self._runs)

    def get(self, key: str) -> RunSummary | None:
        return self._runs.get(key)

    def add(self, key: str, summary: RunSummary) -> None:
        self._runs[key] = summary
        if self.path is not None and _finite(summary):
            try:
                if self._sink is None:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    self._sink = _append(self.path)
                self._sink.write(_line(key, summary, self._version))
                self._sink.flush()
            except OSError as exc:  # a write's error names no file: this one's (QA: a full disk)
                raise OSError(exc.errno, exc.strerror, str(self.path)) from None

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
    or anything that is not a regular file (a symbolic link included)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(st.st_mode) or st.st_size > 0


@cache
def package_version() -> str:
    """The running simspec's version, which each journal line records: a resume after an
    upgrade runs again what the old version ran. The release number alone stays the same over
    many commits that change the numbers (QA: a source checkout resumed an older commit's
    cells), so it carries a digest of the package's own files (code and packaged data) too."""
    try:
        release = metadata.version("simspec")
    except metadata.PackageNotFoundError:  # a source tree on the path, never installed
        release = "unknown"
    return f"{release}+{_source_digest()}"


def _source_digest() -> str:
    """sha256 over the package's .py and data files (relative path and bytes), in path order:
    any change to what computes a result changes it. ~300 files, read once per process."""
    root = Path(__file__).resolve().parents[2]  # the simspec package
    digest = hashlib.sha256()
    for f in sorted(root.rglob("*")):
        if f.is_file() and f.suffix in _SOURCE_SUFFIXES and "__pycache__" not in f.parts:
            digest.update(f.relative_to(root).as_posix().encode() + b"\0")
            digest.update(f.read_bytes())
    return digest.hexdigest()[:12]


_SOURCE_SUFFIXES = {".py", ".yaml", ".yml", ".json", ".jsonl", ".csv", ".gz", ".npz", ".md"}


def _append(path: Path) -> TextIO:
    """``path`` opened to append (created if missing), never through a symbolic link."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
    return os.fdopen(os.open(path, flags, 0o666), "a", encoding="utf-8")


def _entries(n: int, what: str = "") -> str:
    """``1 damaged entry``, ``2 damaged entries``."""
    return f"{n} {what}entr{'y' if n == 1 else 'ies'}"


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


def _line(key: str, summary: RunSummary, version: str) -> str:
    # the check is against damage (a cut or edited value), not forgery, so it need not cover
    # the version: a line that names another version is dropped whatever its check says
    values = summary.as_json_dict()
    body = json.dumps(values, sort_keys=True)
    entry = {"key": key, "simspec": version, "summary": values, "check": _check(key, body)}
    return json.dumps(entry) + "\n"


class Journal(NamedTuple):
    """What a journal file holds: the sound runs this simspec version wrote, and how many
    complete lines were dropped as damaged or as another version's."""

    runs: dict[str, RunSummary]
    damaged: int
    other_version: int


def scan_journal(path: Path, version: str | None = None) -> Journal:
    """The entries of a :class:`RunCache` file that ``version`` (default: this one) wrote, and
    what was dropped (a last line cut by a stop is not counted). Only a regular file of at
    most :data:`MAX_JOURNAL_BYTES`, not a symbolic link, is read: a FIFO or device would block
    or never end, and a file that large was never a journal."""
    version = version or package_version()
    if not os.path.lexists(path):
        return Journal({}, 0, 0)
    try:
        data = read_input(path, "--resume", MAX_JOURNAL_BYTES, follow=False)
    except InputError as exc:
        raise InputError(
            "--resume",
            f"{exc.message}, not a journal of finished runs simspec can resume from: delete "
            "it (its runs run again), or choose another --out",
        ) from None
    lines = data.split(b"\n")
    cut = lines.pop() if lines else b""  # after the last newline: empty, or a line cut short
    runs: dict[str, RunSummary] = {}
    damaged = other = 0
    for raw in lines:
        if not raw.strip():
            continue
        entry = _entry(raw)
        if entry is None:
            damaged += 1
        elif entry[2] != version:
            other += 1
        else:
            runs[entry[0]] = entry[1]
    last = _entry(cut) if cut.strip() else None
    if last is not None and last[2] == version:
        runs[last[0]] = last[1]
    return Journal(runs, damaged, other)


def read_journal(path: Path) -> tuple[dict[str, RunSummary], int]:
    """The sound entries of a :class:`RunCache` file this simspec version wrote, and how many
    complete lines were dropped as damaged (:func:`scan_journal`)."""
    found = scan_journal(path)
    return found.runs, found.damaged


def _entry(raw: bytes) -> tuple[str, RunSummary, object] | None:
    """``(key, summary, simspec version)`` of one journal line (the version None in a line
    written before versions were recorded), or None if any part of it is unsound."""
    try:
        entry = json.loads(raw.decode("utf-8"))
        key, summary, check = entry["key"], entry["summary"], entry["check"]
        if not isinstance(key, str) or not isinstance(summary, dict):
            return None
        if check != _check(key, json.dumps(summary, sort_keys=True)):
            return None
        return key, RunSummary.from_dict(summary), entry.get("simspec")
    except (ValueError, KeyError, TypeError, RecursionError):  # UnicodeDecodeError, JSON, values
        return None


def read_runs(path: Path | None) -> dict[str, RunSummary]:
    """The summaries a :class:`RunCache` file holds; a damaged or cut line is ignored."""
    if path is None:
        return {}
    return read_journal(path)[0]
