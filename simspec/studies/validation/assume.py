"""``simspec validate --assume FIELD=VALUE``: fill a case's unstated cells explicitly.

A source often leaves the GPU, the load or the engine out. A user who knows (or is willing to
suppose) what it was names it once for the whole table; every row it fills says so in its
``assumptions``, and a cell the row does state is never overridden. Only the cells a prediction
reads can be assumed, each checked as the prediction would read it, so a typo is one error
before anything runs, not a table of skipped rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from simspec.catalog.hardware import load_engine, load_gpu
from simspec.catalog.methods import DATASET_DOMAIN, TRACE_DATASETS
from simspec.config import MAX_MEAN_LEN
from simspec.errors import InputError
from simspec.studies.validation.cases import LOAD_KINDS, number, whole

# a cell says nothing when it is empty or says it does not know
UNSTATED = ("", "unknown", "not stated", "n/a")
MAX_GPUS = 64  # Deployment.tp's bound


def _known(loader: Callable[[str], object]) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        try:
            loader(value)
        except InputError as exc:
            return exc.message
        return None

    return check


def _whole(lo: int, hi: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        n = whole(value)
        return None if n is not None and lo <= n <= hi else f"must be a whole number {lo}-{hi}"

    return check


def _positive(value: str) -> str | None:
    n = number(value)
    return None if n is not None and n > 0 else "must be a positive number"


def _length(value: str) -> str | None:
    n = number(value)
    ok = n is not None and 1 <= n <= MAX_MEAN_LEN
    return None if ok else f"must be a number of tokens 1-{MAX_MEAN_LEN:,.0f}"


def _tp(value: str) -> str | None:
    """A whole power of two up to :data:`MAX_GPUS`, as a deployment's tp (config.check_tp):
    QA, tp=3 was taken and then skipped every row it filled."""
    n = whole(value)
    ok = n is not None and 1 <= n <= MAX_GPUS and not n & (n - 1)
    return None if ok else f"must be a whole number, a power of two 1-{MAX_GPUS}"


def _temperature(value: str) -> str | None:
    n = number(value)
    return None if n is not None and 0 <= n <= 5 else "must be a number 0-5"


def _choice(options: Iterable[str]) -> Callable[[str], str | None]:
    allowed = sorted(set(options))

    def check(value: str) -> str | None:
        return None if value in allowed else f"must be one of {', '.join(allowed)}"

    return check


# the cells an assumption may fill, each with the check its value must pass (None: fine,
# else what is wrong with it)
ASSUMABLE: dict[str, Callable[[str], str | None]] = {
    "gpu": _known(load_gpu),
    "num_gpus": _whole(1, MAX_GPUS),
    "tp": _tp,
    "engine": _known(load_engine),
    "load_kind": _choice(LOAD_KINDS),
    "load": _positive,
    "temperature": _temperature,
    "dataset": _choice([*DATASET_DOMAIN, *TRACE_DATASETS]),
    "prompt_len": _length,
    "output_len": _length,
}


def parse_assumptions(items: Iterable[str], option: str = "--assume") -> dict[str, str]:
    """``["gpu=h200", "load_kind=single"]`` as ``{"gpu": "h200", ...}``; an InputError naming
    ``option`` for a text without ``=``, a field no prediction reads, a bad value or a field
    given twice with different values."""
    out: dict[str, str] = {}
    for item in items:
        field, sep, value = str(item).partition("=")
        field, value = field.strip().lower(), value.strip()
        if not sep or not field or not value:
            raise InputError(option, f"{item!r} is not FIELD=VALUE (e.g. gpu=h200)")
        check = ASSUMABLE.get(field)
        if check is None:
            raise InputError(
                option, f"{field!r} is not a field it can fill: {', '.join(ASSUMABLE)}"
            )
        if (why := check(value)) is not None:
            raise InputError(option, f"{field}={value!r}: {why}")
        if out.get(field, value) != value:
            raise InputError(option, f"{field} is given twice ({out[field]!r}, {value!r})")
        out[field] = value
    return out


def assumed_cells(assume: Mapping[str, str] | None, assume_gpu: str | None) -> dict[str, str]:
    """The cells ``--assume`` fills (``assume_gpu``: the GPU alone, where --assume names
    none)."""
    cells = dict(assume or {})
    if assume_gpu and "gpu" not in cells:
        cells["gpu"] = assume_gpu
    return cells


def assumed_flags(assume: Mapping[str, str] | None, assume_gpu: str | None) -> dict[str, str]:
    """The flag, as typed, that filled each of :func:`assumed_cells`'s cells (QA: a row filled
    by --assume-gpu h200 said "--assume gpu=h200")."""
    flags = {field: f"--assume {field}={value}" for field, value in (assume or {}).items()}
    if assume_gpu and "gpu" not in flags:
        flags["gpu"] = f"--assume-gpu {assume_gpu}"
    return flags


def fill_unstated(
    row: Mapping[str, str], assumed: Mapping[str, str], flags: Mapping[str, str] | None = None
) -> tuple[dict[str, str], list[str]]:
    """The row with every unstated cell that ``assumed`` names filled, and one note per cell
    filled, naming the flag that filled it (``flags``: :func:`assumed_flags`; else --assume)
    (the row's stated cells are kept)."""
    out = {k: str(v) for k, v in row.items()}
    notes = []
    for field, value in assumed.items():
        if str(out.get(field, "")).strip().lower() in UNSTATED:
            out[field] = value
            flag = (flags or {}).get(field, f"--assume {field}={value}")
            notes.append(f"{field} not stated: {value} assumed ({flag})")
    return out, notes
