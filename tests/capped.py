"""A Python child of this tree under an address-space cap: how the hostile-input tests prove a
refusal comes before the memory a hostile file would take (a MemoryError, a traceback or a
hang fails the test instead of taking the machine)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def run_capped(
    args: list[str], memory_bytes: int, cwd: Path = ROOT, seconds: int = 60
) -> subprocess.CompletedProcess:
    """``python ARGS`` (e.g. ``-m simspec.cli.main ...``) with this tree first on the path, its
    address space capped at ``memory_bytes``. ``seconds`` only stops a hang: a refusal takes
    the interpreter's start-up (2 s, more on two cores shared with the suite)."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    try:
        return subprocess.run(
            [sys.executable, *args],
            cwd=cwd,
            env=env,
            preexec_fn=cap,
            capture_output=True,
            text=True,
            timeout=seconds,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {seconds} s: {args[:4]}")
