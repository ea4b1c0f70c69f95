"""The one place that runs many scenarios: serially, on a local process pool, or on Ray, each
distinct scenario once, finished runs kept by content.

Every run is a seeded, self-contained scenario (shipped as its JSON), so which worker runs it
and in which order cannot change its numbers: the executors differ only in speed. A run's key
is a hash of that JSON and of the bytes of every file it names (a profile YAML, a config.json,
a trace), so the same scenario asked for twice (two rows of a case table, a baseline two sweep
points share, a repeated probe) runs once, and a :class:`RunCache` backed by a file lets a
stopped study resume where it stopped, never with a run of a file since edited.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import signal
import stat
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TextIO

from simspec.catalog.methods import missing_draft_layers
from simspec.config import Scenario
from simspec.engine.metrics import RunSummary
from simspec.engine.simulation import SimResult, check, simulate
from simspec.errors import InputError, ScenarioError
from simspec.outputs import write_text_atomic

Executor = Literal["serial", "process", "ray"]
Errors = Literal["raise", "keep"]
Measure = Callable[[SimResult], Any]


@dataclass(frozen=True)
class Failed:
    """A scenario that could not run, with the one-line reason: the caller skips only what
    needs it (a validation row), the rest go on."""

    reason: str


def scenario_key(scenario_json: str) -> str:
    """A run's address: SHA-256 of its scenario's canonical JSON (``model_dump_json``) and, when
    it names files, of each one's path and bytes, cut to 20 hex digits (80 bits: no two
    scenarios of any study share one). A scenario that names no file keeps the key earlier
    versions gave it; one whose profile, model config or trace was edited gets a new one, so a
    resumed sweep runs it again instead of reusing a result of the old file."""
    text = scenario_json + "".join(
        f"\n{ref}\0{digest}" for ref, digest in referenced_files(scenario_json)
    )
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def referenced_files(scenario_json: str) -> list[tuple[str, str]]:
    """``(string, content digest)`` for every string in the scenario that names a regular file:
    any field may be a path (model, profile, draft model, traces, token traces), and hashing one
    more file than a run reads only costs a re-run."""
    try:
        data = json.loads(scenario_json)
    except (ValueError, RecursionError):
        return []
    refs = sorted({s for s in _strings(data) if _regular_file(s)})
    return [(ref, _digest(ref)) for ref in refs]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _regular_file(ref: str) -> os.stat_result | None:
    if not ref or "\0" in ref or len(ref) > 4096:
        return None
    try:
        st = os.stat(ref)
    except (OSError, ValueError):
        return None
    return st if stat.S_ISREG(st.st_mode) else None


# Files larger than this are fingerprinted by size and modification time instead of read (no
# input simspec loads comes near it; see the loaders' caps).
MAX_HASHED_BYTES = 1 << 30
_digests: dict[tuple[str, int, int, int, int], str] = {}


def _digest(ref: str) -> str:
    """SHA-256 of a file's bytes, remembered while its size, time and inode stay the same."""
    st = _regular_file(ref)
    if st is None:  # gone since it was listed
        return "missing"
    sig = (ref, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if sig not in _digests:
        if st.st_size > MAX_HASHED_BYTES:
            _digests[sig] = f"size={st.st_size},mtime_ns={st.st_mtime_ns}"
        else:
            h = hashlib.sha256()
            try:
                with open(ref, "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        h.update(chunk)
            except OSError:
                return "unreadable"
            _digests[sig] = h.hexdigest()
    return _digests[sig]


def summary_of(result: SimResult) -> RunSummary:
    """What a run is kept for unless the caller asks for more: its summary."""
    return result.summary


def check_runnable(sc: Scenario) -> None:
    """:func:`~simspec.engine.simulation.check`, and a method whose drafter is the model's own
    MTP layers refused on a model that has none (the engine would cost a hypothetical module
    no checkpoint ships): every study runs its scenarios through here or :func:`run_one`."""
    refuse_missing_draft_layers(sc)
    check(sc)


def refuse_missing_draft_layers(sc: Scenario) -> None:
    why = missing_draft_layers(sc.method.name, sc.model)
    if why:
        raise InputError(f"methods.{sc.method.name}", why)


def run_one(scenario_json: str, errors: Errors = "raise", measure: Measure = summary_of) -> Any:
    """``measure`` of one scenario's run (its summary by default). With ``errors="keep"`` a
    scenario that cannot run gives a :class:`Failed` instead of raising, so nothing one
    scenario does stops the others. Module-level, so process pools and Ray can ship it."""
    try:
        sc = Scenario.model_validate_json(scenario_json)
        refuse_missing_draft_layers(sc)
        return measure(simulate(sc))
    except (InputError, ScenarioError) as exc:
        if errors == "raise":
            raise
        return Failed(str(exc))
    except Exception as exc:  # one scenario's failure must not stop the rest
        if errors == "raise":
            raise
        return Failed(f"simulation failed: {type(exc).__name__}: {exc}")


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


def run_all(
    scenarios: Sequence[Scenario | str],
    executor: Executor = "process",
    workers: int | None = None,
    ray_address: str | None = None,
    *,
    cache: RunCache | None = None,
    errors: Errors = "raise",
    measure: Measure = summary_of,
    on_result: Callable[[str, Any], None] | None = None,
) -> list[Any]:
    """The outcome of each scenario (a :class:`~simspec.config.Scenario` or its JSON), in the
    order given.

    They are submitted in that order (put the longest first, so the workers finish together)
    and each distinct one runs once; those ``cache`` holds do not run at all, and fresh
    summaries are added to it as they finish. ``on_result(key, outcome)`` sees each fresh run
    in completion order. ``errors`` and ``measure`` are :func:`run_one`'s; a cache keeps
    summaries, so it goes only with the default measure."""
    if cache is not None and measure is not summary_of:
        raise ValueError("a RunCache keeps summaries: use it only with the default measure")
    texts = [s if isinstance(s, str) else s.model_dump_json() for s in scenarios]
    keys = [scenario_key(t) for t in texts]
    out: dict[str, Any] = {}
    todo: dict[str, str] = {}
    for key, text in zip(keys, texts, strict=True):
        if cache is not None and key in cache:
            out[key] = cache.get(key)
        else:
            todo.setdefault(key, text)
    job = functools.partial(run_one, errors=errors, measure=measure)
    outcomes = _execute(todo, executor, workers, ray_address, job)
    with closing(outcomes):  # stops (and so frees) a pool as soon as anything here raises
        for key, outcome in outcomes:
            out[key] = outcome
            if cache is not None and not isinstance(outcome, Failed):
                cache.add(key, outcome)
            if on_result:
                on_result(key, outcome)
    return [out[key] for key in keys]


def run(scenario: Scenario, cache: RunCache | None = None) -> RunSummary:
    """One scenario's summary, here and now (a probe whose next step depends on it)."""
    return run_all([scenario], "serial", cache=cache)[0]


def map_jobs(
    job: Callable[[str], Any],
    payloads: Sequence[str],
    executor: Executor = "process",
    workers: int | None = None,
    ray_address: str | None = None,
) -> list[Any]:
    """``job(payload)`` for each payload (text), in the order given, on ``executor``: the
    pools and Ray of :func:`run_all` for work that is not one scenario (a shard of a fleet).
    ``job`` must be picklable (module level, or a partial of one)."""
    todo = {str(i): p for i, p in enumerate(payloads)}
    out = dict(_execute(todo, executor, workers, ray_address, job))
    return [out[str(i)] for i in range(len(payloads))]


def _execute(
    todo: dict[str, str],
    executor: Executor,
    workers: int | None,
    ray_address: str | None,
    job: Callable[[str], Any],
) -> Iterator[tuple[str, Any]]:
    """``(key, job(payload))`` for every ``key -> payload`` (a scenario's JSON), in
    completion order."""
    if executor not in ("serial", "process", "ray"):
        raise InputError(
            "--executor", f"unknown executor {executor!r}; choose serial, process or ray"
        )
    if not todo:
        return
    workers = workers or os.cpu_count() or 1
    if executor == "serial" or (executor == "process" and (workers == 1 or len(todo) == 1)):
        for key, sc in todo.items():
            yield key, job(sc)
    elif executor == "process":
        with _pool(workers) as pool:
            futures = {pool.submit(job, sc): key for key, sc in todo.items()}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
    else:
        yield from _ray(todo, workers, ray_address, job)


@contextmanager
def _pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A process pool that leaves no worker behind: on any exception, interrupt or SIGTERM /
    SIGHUP (turned into ``SystemExit`` while the pool runs, where nothing else handles them) its
    pending runs are cancelled and its workers terminated; and each worker ends itself once its
    parent is gone (even after SIGKILL, which the parent cannot handle)."""
    restore = _exit_on_signals()
    try:
        pool = ProcessPoolExecutor(
            max_workers=workers, initializer=_worker_started, initargs=(os.getpid(),)
        )
        try:
            yield pool
        except BaseException:
            _terminate(pool)
            raise
        pool.shutdown(wait=True)
    finally:
        restore()


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now (their runs are not wanted)."""
    # the pool keeps no public list of its workers; ``_processes`` (pid -> Process) is it
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        proc.terminate()
    for proc in processes:
        proc.join(timeout=5)


def _exit_on_signals() -> Callable[[], None]:
    """Make SIGTERM and SIGHUP raise ``SystemExit(128 + signal)`` in the main thread (the
    status a shell reports for them), where they would otherwise kill this process at once and
    orphan its workers; handlers someone else installed are left alone. Returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    installed = []
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _raise_exit)
            installed.append(sig)

    def restore() -> None:
        for sig in installed:
            signal.signal(sig, signal.SIG_DFL)

    return restore


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _worker_started(parent: int) -> None:
    """In each pool worker: the parent's signal handlers are not its own (SIGTERM and SIGHUP
    end it; Ctrl-C, sent to the whole process group, is the parent's to act on), and a watchdog
    ends it once the study's process (``parent``) or the process that started it is gone."""
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    spawner = os.getppid()  # the study's process, or a fork server it started

    def watch() -> None:
        while os.getppid() == spawner and _alive(parent):
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="simspec-parent-watchdog", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _call(job: Callable[[str], Any], payload: str) -> Any:
    return job(payload)


def _ray(
    todo: dict[str, str], workers: int, address: str | None, job: Callable[[str], Any]
) -> Iterator[tuple[str, Any]]:
    try:
        import ray
    except ImportError:
        raise InputError("--executor", 'ray is not installed: pip install -e ".[ray]"') from None
    started = False
    if not ray.is_initialized():
        try:
            quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
            if address:
                ray.init(address=address, **quiet)
            else:
                ray.init(num_cpus=workers, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError("--ray-address", f"cannot start or reach Ray: {exc}") from None
        started = True
    try:
        remote = ray.remote(_call)  # Ray takes functions, not partials
        pending = {remote.remote(job, sc): key for key, sc in todo.items()}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                yield pending.pop(ref), ray.get(ref)
    finally:
        if started:
            ray.shutdown()
