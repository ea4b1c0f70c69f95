"""Where a study's runs execute: here, one after another; on a process pool started for the
study and ended with it; on a pool kept for a long-lived caller's lifetime; or on Ray.

Each takes ``key -> payload`` (a scenario's JSON, or a shard of a fleet) and a picklable
``job``, and yields ``(key, job(payload))`` in completion order. Every payload is seeded and
self-contained, so which worker runs it and in which order cannot change its result: the
executors differ only in speed.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Executor as PoolExecutor
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, Literal

from simspec.errors import InputError

Executor = Literal["serial", "process", "kept", "ray"]
EXECUTORS: tuple[Executor, ...] = ("serial", "process", "kept", "ray")
Job = Callable[[str], Any]
# (key, outcome) in completion order; closing it early stops a pool
Outcomes = Generator[tuple[str, Any], None, None]


def serial(todo: dict[str, str], job: Job) -> Outcomes:
    for key, payload in todo.items():
        yield key, job(payload)


def pooled(todo: dict[str, str], job: Job, workers: int) -> Outcomes:
    """On a process pool of ``workers`` that lives as long as these runs (:func:`_pool`)."""
    with _pool(workers) as pool:
        futures = {pool.submit(job, payload): key for key, payload in todo.items()}
        for fut in as_completed(futures):
            yield futures[fut], fut.result()


def kept(todo: dict[str, str], job: Job, pool: KeptPool) -> Outcomes:
    """On ``pool``'s workers; if the pool breaks (a worker killed, out of memory) it is
    dropped, so the next call starts a fresh one, and what is left runs here."""
    executor = pool.get()
    done: set[str] = set()
    futures: dict[Future[Any], str] = {}
    try:
        futures = {executor.submit(job, payload): key for key, payload in todo.items()}
        for fut in as_completed(futures):
            result = fut.result()
            done.add(futures[fut])
            yield futures[fut], result
    except BrokenProcessPool:
        pool.drop(executor)
        yield from serial({k: p for k, p in todo.items() if k not in done}, job)
    finally:
        for fut in futures:  # stopped early: the pool outlives this call, its runs need not
            fut.cancel()


class KeptPool:
    """One process pool for a long-lived caller (the explorer's page), shared by every call
    and thread, started on first use and shut down at exit.

    Its workers keep their caches (traces, replays, cost models) from one call to the next,
    and come from a fork server that imported ``preload`` once: forking a threaded server
    (Streamlit) for a fresh pool per call risks a deadlock and re-pays the start. The fork
    server also imports the caller's main script once, as ``__mp_main__``: a script that
    starts one does its work only under ``if __name__ == "__main__"``. ``start`` replaces the
    pool it starts (a test's thread pool)."""

    def __init__(
        self,
        workers: int | None = None,
        preload: Sequence[str] = ("simspec.studies.runs.job",),
        start: Callable[[], PoolExecutor] | None = None,
    ) -> None:
        self.workers = workers
        self.preload = list(preload)
        self._start = start or self._forkserver_pool
        self._pool: PoolExecutor | None = None
        self._lock = threading.Lock()

    def _forkserver_pool(self) -> PoolExecutor:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(self.preload)
        return ProcessPoolExecutor(max_workers=self.workers or os.cpu_count() or 1, mp_context=ctx)

    def get(self) -> PoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = self._start()
                atexit.register(self._pool.shutdown, cancel_futures=True)
            return self._pool

    def drop(self, pool: PoolExecutor) -> None:
        """Forget a broken pool (if it is still the kept one) and end it."""
        with self._lock:
            if pool is self._pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(cancel_futures=True)


# the process's own kept pool, for a caller that names none
KEPT = KeptPool()


@contextmanager
def _pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A process pool that leaves no worker behind: on any exception, interrupt or SIGTERM /
    SIGHUP (turned into ``SystemExit`` while the pool runs, where nothing else handles them) its
    pending runs are cancelled and its workers terminated; and each worker ends itself once its
    parent is gone (even after SIGKILL, which the parent cannot handle)."""
    restore = exit_on_signals()
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
    # its manager thread closes its wake-up pipe as it ends; at exit Python wakes that pipe,
    # and a pipe closed under it meanwhile printed an OSError traceback (QA: SIGINT to the
    # main process alone, 2 in 9): wait for the thread, whose pipe is then marked closed
    manager = getattr(pool, "_executor_manager_thread", None)
    if manager is not None:
        manager.join(timeout=5)


def exit_on_signals() -> Callable[[], None]:
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


def _call(job: Job, payload: str) -> Any:
    return job(payload)


RAY_CONNECT_TIMEOUT_S = 5.0


def _answers(address: str) -> None:
    """Refuse a HOST:PORT (or ray://HOST:PORT) that nothing answers on: Ray's client retries
    such an address for ever (QA: --ray-address 127.0.0.1:1 hung a sweep past 11 minutes,
    where a malformed one or "auto" without a cluster failed at once). Other forms are left
    to Ray."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    host = host.strip("[]")  # an IPv6 literal
    try:
        socket.create_connection((host, int(port)), timeout=RAY_CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise InputError(
            "--ray-address",
            f"nothing answers at {host}:{port} within {RAY_CONNECT_TIMEOUT_S:g} s "
            f"({exc.strerror or exc}): start the cluster (ray start --head) or give its "
            "address",
        ) from None


def on_ray(todo: dict[str, str], job: Job, workers: int, address: str | None) -> Outcomes:
    """On a Ray cluster at ``address``, or a local one of ``workers`` CPUs started for these
    runs and stopped after them."""
    try:
        import ray
    except ImportError:
        raise InputError("--executor", 'ray is not installed: pip install -e ".[ray]"') from None
    started = False
    if not ray.is_initialized():
        if address:
            _answers(address)
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
