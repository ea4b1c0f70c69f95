"""The packaged data files (``simspec/data``), read once: every catalogue module loads its
YAML through here, so the installed package needs nothing outside itself.

Also the one way a user's file is read and parsed (``--model``, ``--profile``, ``--config``,
``--rate-csv``, traces, case tables...): regular files only, never more than a stated number of
bytes, and JSON/YAML whose nesting, numbers and aliases are bounded and whose mappings name
each key once. ``/dev/zero``, a FIFO, a
100,000-deep ``[[[...`` or a YAML alias bomb each become one :class:`InputError` naming the
field, before any work.
"""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import stat
import zlib
from collections.abc import Callable
from functools import cache, lru_cache, update_wrapper
from importlib import resources
from typing import Any, Generic, ParamSpec, TypeVar

import yaml

from simspec.errors import InputError

MAX_DEPTH = 64  # nesting of a user's JSON/YAML; scenario files and configs need under 10

P = ParamSpec("P")
R = TypeVar("R")


# The package's own YAML is parsed by libyaml where PyYAML was built with it (its wheels are):
# the same safe constructor on the same documents, ~10x faster than the pure-Python parser
# (0.41 -> 0.04 s for every table in simspec/data, parsed once per process). A user's file
# goes through _BoundedLoader below, whatever the build.
PACKAGED_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def packaged_text(*parts: str) -> str:
    return resources.files("simspec").joinpath("data", *parts).read_text(encoding="utf-8")


def packaged_yaml(*parts: str) -> Any:
    """A packaged YAML file, parsed (:data:`PACKAGED_LOADER`)."""
    return yaml.load(packaged_text(*parts), Loader=PACKAGED_LOADER)


@cache
def packaged_table(name: str) -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = packaged_yaml(name)
    return table


def shown(path: str | os.PathLike) -> str:
    """A path as an error message quotes it: cut to 120 characters (a 5,000-character path
    stays a readable line)."""
    text = str(path)
    return repr(text if len(text) <= 120 else text[:60] + "..." + text[-57:])


def read_input(path: str | os.PathLike, field: str, max_bytes: int, follow: bool = True) -> bytes:
    """The bytes of a user's file: a regular file of at most ``max_bytes``, checked before
    reading. Opened non-blocking, so a FIFO with no writer cannot hang the open; a device
    (``/dev/zero``), a directory or a FIFO is refused by its ``fstat`` type. ``follow=False``
    refuses a symbolic link as the file's own name (``O_NOFOLLOW``: for a file simspec also
    writes, which a planted link must not redirect)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputError(field, f"no such file {shown(path)}") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise InputError(field, f"{shown(path)} is a symbolic link") from None
        raise InputError(field, f"cannot read {shown(path)}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(field, f"{shown(path)} is not a regular file")
        if info.st_size > max_bytes:
            raise InputError(field, f"{shown(path)} is larger than {max_bytes:,} bytes")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            # as many bytes as fstat gave, and one more to see growth: read(n) allocates n
            # bytes first, so reading the cap itself cost 512 MB for a 3-line trace (QA: a
            # refusal's peak address space reached 2 GB)
            want = min(info.st_size, max_bytes) + 1
            data = f.read(want)
            if len(data) == want and want <= max_bytes:  # it grew after fstat: on to the cap
                data += f.read(max_bytes + 1 - len(data))
    except OSError as exc:
        raise InputError(field, f"cannot read {shown(path)}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise InputError(field, f"{shown(path)} is larger than {max_bytes:,} bytes")
    return data


def read_input_gzip(path: str | os.PathLike, field: str, max_bytes: int) -> bytes:
    """The decompressed bytes of a user's gzip file: the file and what it inflates to are each
    at most ``max_bytes``, so a gzip bomb (kilobytes that inflate to gigabytes) stops at the
    cap instead of filling memory. A corrupt or truncated stream is one InputError too."""
    raw = read_input(path, field, max_bytes)
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
            # a megabyte at a time to the cap: read(n) allocates n bytes first (read_input)
            out = bytearray()
            while len(out) <= max_bytes:
                chunk = f.read(min(1 << 20, max_bytes + 1 - len(out)))
                if not chunk:
                    break
                out += chunk
            data = bytes(out)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(field, f"cannot read {shown(path)}: {exc}") from None
    if len(data) > max_bytes:
        raise InputError(field, f"{shown(path)} is larger than {max_bytes:,} bytes")
    return data


def read_input_text(path: str | os.PathLike, field: str, max_bytes: int) -> str:
    """:func:`read_input` decoded as UTF-8."""
    try:
        return read_input(path, field, max_bytes).decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(field, f"{shown(path)} is not UTF-8 text") from None


class DuplicateKey(ValueError):
    """A mapping that names one key twice: ``json.loads`` and PyYAML keep the last without a
    word, so ``seed: 1`` then ``seed: 2`` would run seed 2 while the reader sees seed 1."""

    def __init__(self, key: object) -> None:
        super().__init__(f"duplicate key {key!r}")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader without anchors and aliases, stopping at :data:`MAX_DEPTH`.

    An alias bomb (``&a [*b, *b, ...]``) is refused at the first ``*``, not expanded by whatever
    walks the result; nesting is counted as it is scanned (``[`` and ``{``) and composed
    (blocks), because PyYAML's scanner slows down with every open ``[`` (2.7 s for 100,000).
    """

    def fetch_flow_collection_start(self, TokenClass):  # PyYAML's name and signature
        if self.flow_level > MAX_DEPTH:  # check_depth (below) draws the exact line
            raise yaml.scanner.ScannerError(
                None, None, f"nested deeper than {MAX_DEPTH} levels", self.get_mark()
            )
        return super().fetch_flow_collection_start(TokenClass)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A mapping that names a key twice is refused (:class:`DuplicateKey`)."""
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key: left for the base loader to refuse
                break
            if repeated:
                raise DuplicateKey(key)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def compose_node(self, parent, index):  # PyYAML's signature
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not supported", self.peek_event().start_mark
            )
        self.depth = getattr(self, "depth", 0) + 1
        try:
            if self.depth > MAX_DEPTH + 1:  # + 1: a scalar is a node too
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    f"nested deeper than {MAX_DEPTH} levels",
                    self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def parse_json(text: str | bytes, field: str, where: str = "", walk: bool = True) -> Any:
    """JSON text as Python data, with every way it can fail as an InputError naming ``field``
    (and ``where``, e.g. ``trace.jsonl line 3``). ``walk=False`` skips :func:`check_depth` for
    a caller that checks each field's type itself (a trace line of thousands of numbers)."""
    prefix = f"{where}: " if where else ""
    try:
        data = json.loads(text, object_pairs_hook=_unique)
    except DuplicateKey as exc:
        raise InputError(field, f"{prefix}{exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            # where parsing stopped, by line and column ("Unterminated string starting at"
            # read "... at at position 198": QA)
            field,
            f"{prefix}not valid JSON ({exc.msg.removesuffix(' at')} at line {exc.lineno}, "
            f"column {exc.colno})",
        ) from None
    except RecursionError:
        raise InputError(field, f"{prefix}nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise InputError(field, f"{prefix}{exc}".split("; use")[0]) from None
    return check_depth(data, field, where) if walk else data


def parse_yaml(text: str, field: str, where: str = "") -> Any:
    """YAML text as Python data (safe tags only, no aliases), failures as one InputError."""
    prefix = f"{where}: " if where else ""
    try:
        data = yaml.load(text, Loader=_BoundedLoader)  # a SafeLoader subclass
    except DuplicateKey as exc:
        raise InputError(field, f"{prefix}{exc}") from None
    except yaml.YAMLError as exc:
        raise InputError(field, f"{prefix}not valid YAML ({' '.join(str(exc).split())})") from None
    except RecursionError:
        raise InputError(field, f"{prefix}nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, OverflowError) as exc:  # an integer of more than 4,300 digits
        raise InputError(field, f"{prefix}{exc}".split("; use")[0]) from None
    return check_depth(data, field, where)


def parse_json_or_yaml(text: str, path: str | os.PathLike, field: str) -> Any:
    """JSON when the file's name ends in ``.json``, YAML otherwise."""
    if str(path).endswith(".json"):
        return parse_json(text, field)
    return parse_yaml(text, field)


def check_depth(data: Any, field: str, where: str = "") -> Any:
    """``data`` if its lists and mappings nest at most :data:`MAX_DEPTH` deep (walked without
    recursion), so nothing that later recurses over it can overflow the stack."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list | tuple):
            if depth > MAX_DEPTH:
                prefix = f"{where}: " if where else ""
                raise InputError(field, f"{prefix}nested deeper than {MAX_DEPTH} levels")
            children = node.values() if isinstance(node, dict) else node
            stack.extend((c, depth + 1) for c in children)
    return data


def file_stamp(ref: object) -> tuple[int, int, int, int] | None:
    """(device, inode, size, modification time in ns) of the file ``ref`` names; None where it
    names none (a packaged dataset's name, a missing or unreadable path)."""
    try:
        st = os.stat(ref)  # type: ignore[arg-type]
    except (OSError, TypeError, ValueError):  # also a NUL byte, a name too long
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class FileCache(Generic[P, R]):
    """A loader whose first argument names a file (or a packaged name), remembered per
    arguments and that file's :func:`file_stamp`: a file edited, replaced or removed since is
    read again. Keyed by the path alone, a process that ran a trace kept its first contents
    for every later run (QA: an API user's edited acceptance trace gave the old throughput;
    a kept pool worker filed them under the edited file's new key)."""

    def __init__(self, fn: Callable[P, R], maxsize: int | None) -> None:
        self.__wrapped__ = fn
        self._keyed = lru_cache(maxsize=maxsize)(self._call)
        update_wrapper(self, fn)

    def _call(self, stamp: object, *args: Any, **kwargs: Any) -> R:
        return self.__wrapped__(*args, **kwargs)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._keyed(file_stamp(args[0]) if args else None, *args, **kwargs)

    def cache_clear(self) -> None:
        self._keyed.cache_clear()


def file_cache(maxsize: int | None = None) -> Callable[[Callable[P, R]], FileCache[P, R]]:
    """:class:`FileCache` as a decorator (``maxsize`` as :func:`functools.lru_cache`'s)."""

    def wrap(fn: Callable[P, R]) -> FileCache[P, R]:
        return FileCache(fn, maxsize)

    return wrap
