"""Output files written whole or not at all: a stopped or failed run never leaves half a file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text_atomic(out: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``out``, then rename it over ``out``."""
    write_bytes_atomic(out, text.encode("utf-8"))


def write_bytes_atomic(out: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``out``, then rename it over ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; give it a new file's mode
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process umask (read by setting it, then setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
