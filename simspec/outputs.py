"""Output files written whole or not at all: a stopped or failed run never leaves half a file.

An output is written to a temporary file beside it and renamed over it, so an existing file
is *replaced*, not rewritten in place: its permission bits (and, where the process may, its
owner and group) carry over, but other hard links to it keep the old content. Only a regular
file (or a new name) is ever replaced: a directory, device node, FIFO or socket is refused.

A symbolic link as the output's own name is refused too (folders on the way may be links).
Renaming over it would replace the link, not the file it points to, and give the new file the
owner and mode of that target: a link to another user's world-writable file would leave a
world-writable file in its place. Writing through it instead would let whoever can plant a link
in a shared folder choose which file simspec overwrites. Either way the user did not ask for
it: they name the file itself.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


# the per-request and timeline columns that are times on the run's clock, written in full
CLOCK_COLUMNS = (
    "arrival_s",
    "first_token_s",
    "finish_s",
    "time_s",
    "prefill_done_s",
    "kv_landed_s",
)


def csv_text(frame: pd.DataFrame, exact: tuple[str, ...] = ()) -> str:
    """A frame as CSV: numbers to 6 significant digits but the ``exact`` columns (clock
    times, which over an hour's or a month's trace need more: 6 digits of 3,600 s are
    10 ms), written in full."""
    full = {c: frame[c].map(_full) for c in exact if c in frame.columns}
    return frame.assign(**full).to_csv(index=False, float_format="%.6g")


def _full(v: object) -> object:
    """A float as Python writes it back exactly (NaN as an empty cell, as to_csv writes it)."""
    if isinstance(v, float):
        return "" if v != v else repr(v)
    return v


def write_text_atomic(out: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``out``, then rename it over ``out``."""
    write_bytes_atomic(out, text.encode("utf-8"))


def write_bytes_atomic(out: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``out``, then rename it over ``out``
    (creating missing folders; an existing ``out`` must be a regular file and keeps its mode)."""
    old = existing_regular(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if old is None:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; give it a new file's mode
        else:
            _keep_attributes(tmp, old)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def existing_regular(out: Path) -> os.stat_result | None:
    """``out``'s status if it is an existing regular file, None if nothing is there; any
    other kind of file, a symbolic link included (dangling or not), raises ``OSError``
    (renaming over it would destroy it)."""
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise OSError(
            errno.ELOOP, "is a symbolic link; give the file itself or a new name", str(out)
        )
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory; give a file name", str(out))
    if not stat.S_ISREG(st.st_mode):
        raise OSError(
            errno.EINVAL,
            "not a regular file (a device, FIFO or socket); give a file name",
            str(out),
        )
    return st


def missing_folders(out: Path) -> list[Path]:
    """The folders above ``out`` that do not exist yet, deepest first: what writing it creates."""
    missing: list[Path] = []
    parent = out.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    return missing


def remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first) that exist and are empty: a failed write's own."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def check_writable(out: Path) -> None:
    """Refuse, before any work, an ``out`` that could not be written: a symbolic link or an
    existing non-regular file, or a nearest existing folder that is not a folder or that
    refuses a new file (tried with a temporary file, removed at once: permission bits alone
    mislead root and read-only mounts). Missing folders are fine: writing creates them."""
    existing_regular(out)
    parent = out.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():  # a file, or a link to nowhere (writing could not make the folder)
        raise NotADirectoryError(
            errno.ENOTDIR, "a folder on the path is a file or a broken link", str(parent)
        )
    fd, probe = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".probe", dir=parent)
    os.close(fd)
    os.unlink(probe)


def _keep_attributes(tmp: str, old: os.stat_result) -> None:
    """Give the replacement the replaced file's permission bits, and its owner and group where
    this process may set them (root, or a group it belongs to); otherwise they stay its own."""
    for uid in (old.st_uid, -1):  # the group alone when the owner cannot be given away
        try:
            os.chown(tmp, uid, old.st_gid)
            break
        except OSError:
            continue
    os.chmod(tmp, stat.S_IMODE(old.st_mode))  # after chown, which may clear set-id bits


def _umask() -> int:
    """The process umask (read by setting it, then setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
