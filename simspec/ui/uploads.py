"""The explorer's uploads (a Hugging Face config.json, an acceptance trace, an arrival trace):
checked in memory, then kept where no one else can write.

Why so careful: a page that wrote uploads unchecked into a fixed shared folder could be made,
by a symlink planted there under the name an upload would get, to overwrite the link's target,
and would leave rejected uploads behind. So each process keeps its uploads in its own
``tempfile.mkdtemp`` folder (mode 0700, removed at exit), a file is created with
``O_CREAT | O_EXCL | O_NOFOLLOW`` (never through a link, never over a file it did not make),
and one the loaders still reject (or fail on) is removed before the error is raised.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from simspec.catalog.arrival_traces import load_arrival_trace
from simspec.catalog.models import ModelShape, load_hf_config
from simspec.catalog.traces import load_trace
from simspec.errors import InputError

# Streamlit's server.maxUploadSize is in MB of 2**20 bytes (streamlit 1.67.0,
# web/server/starlette/starlette_routes.py: `maxUploadSize * 1024 * 1024`), so the page states
# exactly this cap; .streamlit/config.toml holds the same number (tests/test_app.py checks).
MAX_UPLOAD_MB = 2
MAX_UPLOAD_BYTES = MAX_UPLOAD_MB * 1024 * 1024
# acc_len values and lengths are stored as int32 by the trace loader; a larger value would wrap
# (2**32 becomes 0: a step that accepts nothing, and the simulation never ends)
_INT32_MAX = 2**31 - 1


@cache
def upload_folder() -> Path:
    """This process's private folder for uploads (0700, made once, removed at exit)."""
    folder = Path(tempfile.mkdtemp(prefix="simspec-uploads-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _check_size(data: bytes, what: str) -> None:
    if len(data) > MAX_UPLOAD_BYTES:
        raise InputError(
            what, f"the file is larger than {MAX_UPLOAD_MB} MB ({MAX_UPLOAD_BYTES:,} bytes)"
        )
    if not data:
        raise InputError(what, "the file is empty")


def _json(text: str, what: str, where: str) -> object:
    """One JSON value; a non-finite number, an over-long integer or deep nesting is a message."""

    def no_constant(name: str) -> float:
        raise ValueError(f"{name} is not a number")

    try:
        return json.loads(text, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(what, f"{where}not valid JSON ({exc.msg})") from None
    except RecursionError:
        raise InputError(what, f"{where}JSON nested too deeply") from None
    except ValueError as exc:  # Infinity/NaN, or an integer of more than 4,300 digits
        raise InputError(what, f"{where}not valid JSON ({exc})") from None


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(what, "not valid JSON (the file is not UTF-8 text)") from None


# a stored upload's path: the session's folder, the content's folder, the uploaded name
_STORED = re.compile(r"[^\s'\"]*simspec-uploads-[^/\s]+/upload-[0-9a-f]+/([^/\s'\",;:)]+)")


# a model id made from an uploaded config's stored folder (its content's hash)
_STORED_ID = re.compile(r"\bupload-[0-9a-f]{32}\b")


def as_uploaded(text: str) -> str:
    """``text`` with each stored upload's path replaced by the name it was uploaded as (QA:
    captions, errors and CSV columns showed "/tmp/simspec-uploads-…/config.json", a server's
    folder the user never chose), and a model id made from its folder said as the uploaded
    model (QA: "upload-09420af0… does not fit on h100_sxm")."""
    return _STORED_ID.sub("the uploaded model", _STORED.sub(lambda m: m.group(1), text))


def _keep(data: bytes, suffix: str, folder: Path | None, name: str = "") -> Path:
    """Write ``data`` in a folder named from its content (loaders cache by path, so a changed
    file is never mistaken for an earlier one) under the name it was uploaded as (runs and
    tables name it so: QA, the compare tab had shown "upload-d7597b16....json"), never
    through a symlink nor over a file this process did not write with the same bytes."""
    folder = folder or upload_folder()
    kept = folder / f"upload-{hashlib.sha256(data).hexdigest()[:32]}"
    try:
        os.mkdir(kept, 0o700)
    except FileExistsError:
        st = os.lstat(kept)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():  # a link, a file
            raise InputError(
                "upload", f"{kept} exists and is not this upload's; left alone"
            ) from None
    except OSError as exc:
        raise InputError("upload", f"cannot store the upload: {exc.strerror}") from None
    path = kept / _safe_name(name, suffix)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and path.read_bytes() == data:
            return path  # this upload again
        raise InputError("upload", f"{path} exists and is not this upload; left alone") from None
    except OSError as exc:
        raise InputError("upload", f"cannot store the upload: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except OSError as exc:
        # a half-written file would be refused as "not this upload" on every retry (QA):
        # it goes, and the error names the upload, not the server's folder
        path.unlink(missing_ok=True)
        raise InputError("upload", f"cannot store the upload: {exc.strerror}") from None
    return path


def _safe_name(name: str, suffix: str) -> str:
    """The uploaded file's own name, its characters kept to letters, digits, '.', '_' and
    '-' (any other one a '_'), at most 80 of them before ``suffix``."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", Path(name).stem).strip(".")[:80]
    return f"{stem or 'upload'}{suffix}"


def _discard(path: Path) -> None:
    """A refused upload's file, and its content's folder once empty."""
    path.unlink(missing_ok=True)
    try:
        path.parent.rmdir()
    except OSError:
        pass  # another upload of the same bytes, or not empty


@contextmanager
def _loading(path: Path, what: str, name: str) -> Iterator[None]:
    """The loaders' reading of a kept upload. Whatever stops it (a refusal, or an error no
    check foresaw), the file is removed before the error goes on; a refusal names the file as
    the user uploaded it, not as it is stored."""
    try:
        yield
    except InputError as exc:
        _discard(path)
        uploaded = Path(name).name
        message = exc.message.replace(str(path), uploaded).replace(path.name, uploaded)
        raise InputError(what, message) from None
    except BaseException:
        _discard(path)
        raise


def config_name(raw: dict, filename: str) -> str:
    """What to call an uploaded model in titles and downloads: its Hugging Face name if the
    file says, else its architecture, else the uploaded file's name."""
    arch = raw.get("architectures")
    for name in (
        raw.get("_name_or_path"),
        arch[0] if isinstance(arch, list) and arch else None,
        raw.get("model_type"),
    ):
        if isinstance(name, str) and name.strip():
            return name.strip()[:80]
    return Path(filename).name[:80]


def save_config_upload(
    data: bytes, name: str, folder: Path | None = None
) -> tuple[str, ModelShape, str]:
    """A Hugging Face config.json, read as JSON data only: its stored path (what the
    scenario's ``model`` takes), the shapes read from it and the model's display name."""
    what = "model config"
    _check_size(data, what)
    if not name.endswith(".json"):
        raise InputError(what, f"expected a .json file, got {name!r}")
    raw = _json(_text(data, what), what, "")
    if not isinstance(raw, dict):
        raise InputError(what, "a config.json holds one JSON object")
    path = _keep(data, ".json", folder, name)
    try:
        shape = load_hf_config(path)
    except InputError as exc:
        _discard(path)
        # the key at fault, and the name the user uploaded rather than the stored file's
        key = exc.field.removeprefix("model").lstrip(".")
        message = exc.message.replace(str(path), Path(name).name)
        raise InputError(what, f"{key}: {message}" if key else message) from None
    except BaseException:  # whatever else stops the read, a refused file is not kept
        _discard(path)
        raise
    return str(path), shape, config_name(raw, name)


def _check_trace(text: str, what: str) -> str:
    """Every line an object with whole-number lengths and acc_len lists the loader can hold
    (integers in [1, 2**31 - 1]: a larger one would wrap in int32), before anything is
    written. Returns the first record's first method (what the page replays)."""
    first = ""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {lineno}: "
        rec = _json(line, what, where)
        if not isinstance(rec, dict) or not isinstance(rec.get("acc_len"), dict):
            raise InputError(what, f"{where}needs prompt_len, output_len and an acc_len object")
        for key in ("prompt_len", "output_len"):
            v = rec.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= _INT32_MAX:
                raise InputError(what, f"{where}{key} must be a whole number in [1, {_INT32_MAX}]")
        if not rec["acc_len"]:
            raise InputError(what, f"{where}acc_len names no method")
        for method, values in rec["acc_len"].items():
            if not method.strip():
                raise InputError(what, f"{where}acc_len key {method!r} is empty: name the method")
            if not isinstance(values, list) or not values:
                raise InputError(what, f"{where}acc_len.{method} must be a non-empty list")
            bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int)]
            bad += [v for v in values if isinstance(v, int) and not 1 <= v <= _INT32_MAX]
            if bad:
                raise InputError(
                    what,
                    f"{where}acc_len.{method} values must be whole numbers in "
                    f"[1, {_INT32_MAX}], got {str(bad[0])[:40]}",
                )
        first = first or next(iter(rec["acc_len"]))
    if not first:
        raise InputError(what, "the file holds no requests")
    return first


def save_trace_upload(data: bytes, name: str, folder: Path | None = None) -> str:
    """An acceptance trace in the shared/acceptance-traces JSONL format, checked and kept for
    the runs; returns its path."""
    what = "acceptance trace"
    _check_size(data, what)
    if not name.endswith(".jsonl"):
        raise InputError(what, f"expected a .jsonl file, got {name!r}")
    text = _text(data, what)
    first = _check_trace(text, what)
    path = _keep(data, ".jsonl", folder, name)
    with _loading(path, what, name):
        load_trace(str(path), first)
    return str(path)


ARRIVAL_SUFFIXES = (".csv", ".parquet")


def save_arrival_trace_upload(data: bytes, name: str, folder: Path | None = None) -> str:
    """An arrival trace (CSV or Parquet, Azure's or the plain schema), kept under a name from
    its content and read by the arrival-trace loader, every row checked; one it rejects is
    removed before the error. Returns its path (what ``workload.arrival_trace`` takes)."""
    what = "arrival trace"
    _check_size(data, what)
    suffix = Path(name).suffix.lower()
    if suffix not in ARRIVAL_SUFFIXES:
        raise InputError(what, f"expected a .csv or .parquet file, got {name!r}")
    path = _keep(data, suffix, folder, name)
    with _loading(path, what, name):
        load_arrival_trace(str(path), what)
    return str(path)


RESULT_SUFFIXES = (".json", ".jsonl", ".txt")


def save_result_upload(data: bytes, name: str, folder: Path | None = None) -> str:
    """A benchmark result (vllm bench serve --save-result JSON, its printed block, SGLang
    --output-file JSONL), kept under a name from its content once the readers accept it (one
    they reject is removed before the error). Returns its path."""
    from simspec.studies.bench import read_result

    what = "benchmark result"
    _check_size(data, what)
    suffix = Path(name).suffix.lower()
    if suffix not in RESULT_SUFFIXES:
        raise InputError(what, f"expected a .json, .jsonl or .txt file, got {name!r}")
    path = _keep(data, suffix, folder, name)
    with _loading(path, what, name):
        try:
            read_result(path, what)
        except InputError as exc:  # the field at fault (a reader names it with the file)
            inner = "" if exc.field == what else f"{exc.field}: "
            raise InputError(what, inner + exc.message) from None
    return str(path)


PROFILE_SUFFIXES = (".yaml", ".yml", ".json")


def save_profile_upload(data: bytes, name: str, folder: Path | None = None) -> str:
    """A hardware profile (``simspec calibrate fit`` or ``bench`` writes one), kept once the
    loader accepts it. Returns its path (what a scenario's ``profile`` takes)."""
    from simspec.catalog.hardware import load_profile

    what = "profile"
    _check_size(data, what)
    suffix = Path(name).suffix.lower()
    if suffix not in PROFILE_SUFFIXES:
        raise InputError(what, f"expected a .yaml, .yml or .json file, got {name!r}")
    path = _keep(data, suffix, folder, name)
    with _loading(path, what, name):
        load_profile(str(path))
    return str(path)
