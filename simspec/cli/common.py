"""What every command shares: one-line errors with exit code 2, the progress bar, comma lists,
and the run settings a study takes, built from the flags.

A command never shows a traceback for bad input: it raises (pydantic's ``ValidationError``,
:class:`InputError`, :class:`ScenarioError`, ``OSError``, a broken process pool) and
:func:`one_line_errors` turns that into ``error: <field>: <what is wrong>`` on stderr.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import re
import typing
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar, cast

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from simspec.catalog.tables import shown
from simspec.engine.speculators import known_method as known_method  # the CLI's name for it
from simspec.errors import InputError, ScenarioError, one_line, validation_message
from simspec.studies.runs import Runs
from simspec.studies.runs.executors import Executor
from simspec.studies.runs.journal import RunCache

# stderr is looked up on every write, so a test's captured stream is the one written to
err = Console(stderr=True)
T = TypeVar("T")
Command = TypeVar("Command", bound=Callable[..., Any])


def print_error(message: str) -> None:
    """``error: message`` as one line on stderr (control characters escaped, and rich markup:
    ``pip install -e ".[ray]"`` must print its ``[ray]``)."""
    err.print(
        f"[bold red]error:[/] {escape(one_line(message))}",
        highlight=False,
        soft_wrap=True,
        markup=True,
    )


def fail(message: str) -> NoReturn:
    """Print ``error: message`` and exit 2: the exit code of every bad input."""
    print_error(message)
    raise typer.Exit(code=2)


def one_line_errors(
    command: Command | None = None, *, also: tuple[type[Exception], ...] = ()
) -> Any:
    """Decorate a command so that the errors bad input raises become one line and exit 2.

    ``also`` adds exception types whose text is already a message for the user (calibration's
    fits raise ``ValueError`` for tables they cannot fit).
    """
    if command is None:
        return functools.partial(one_line_errors, also=also)

    # a scenario file is named beside a flag only where the command reads one (QA: validate
    # pointed at "profile in a --config file", an option it does not have), and so is a flag
    # (QA: policy pointed at --requests, which only its --config file sets)
    files = "config" in inspect.signature(command).parameters
    known = command_flags(command)

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except ValidationError as exc:
            fail(flagged(validation_message(exc), files, known))
        except InputError as exc:
            # named by the flag too (QA: "workload.trace_start_s" for --window)
            fail(flagged(str(exc), files, known))
        except (ScenarioError, *also) as exc:
            fail(str(exc))
        except BrokenProcessPool:
            fail("a worker process died (out of memory?); rerun with --workers 1")
        except OSError as exc:
            fail(f"cannot read or write a file: {os_error_text(exc)}")

    return run


# the flags that set a scenario's fields, named beside the field a refusal names (QA:
# "--turnovers 2000" had been refused as workload.turnovers alone, a name the user never typed)
FIELD_FLAGS = {
    # the deployment's (QA: "tp: Input should be greater than or equal to 1" named no flag)
    "model": "--model",
    "gpu": "--gpu",
    "tp": "--tp",
    "ep": "--ep",
    "dp": "--dp",
    "engine": "--engine",
    "precision": "--precision",
    "kv_cache_dtype": "--kv-cache-dtype",
    "workload.turnovers": "--turnovers",
    "workload.requests": "--requests",
    "batch_sizes": "--concurrencies",
    "profile": "--profile",
    "precision_target": "--precision-target",
    "scheduler.max_num_seqs": "--max-num-seqs",
    "scheduler.max_num_batched_tokens": "--max-num-batched-tokens",
    "scheduler.gpu_memory_utilization": "--gpu-memory-utilization",
    "scheduler.max_model_len": "--max-model-len",
    "temperature": "--temperature",
    "top_p": "--top-p",
    "seed": "--seed",
    "acceptance.alpha": "--alpha",
    "acceptance.tau": "--tau",
    "acceptance.tau_k": "--tau-k",
    "workload.rate_scale": "--rate-scale",
    "workload.target_qps": "--target-qps",
    "workload.tile_s": "--tile",
    "workload.trace_start_s": "--window",
    "workload.trace_end_s": "--window",
    "workload.prompt.mean": "--prompt-len",
    "workload.output.mean": "--output-len",
}
# a method's fields under a sweep's list (methods.N.) or a policy's one method (method.)
_METHOD_FIELD = re.compile(r"^(?:methods\.\d+\.|method\.)")


def flag_for(field: str, text: str) -> str | None:
    """The flag that sets ``field`` (a refusal's ``text`` names the acceptance field a
    whole-model check refused: ``alpha must be ...``), or None."""
    base = _METHOD_FIELD.sub("", field)
    if flag := FIELD_FLAGS.get(field) or FIELD_FLAGS.get(base):
        return flag
    if base == "acceptance":
        for word in ("alpha", "tau"):
            if text.startswith(f"{word} "):
                return FIELD_FLAGS[f"acceptance.{word}"]
    return None


def flagged(message: str, config: bool = True, known: frozenset[str] | None = None) -> str:
    """``field: ...`` ending with the flag that sets the field, where one does and the command
    has it (``known``: its flags; None: any), and the field in a --config file where the
    command reads one (``config``)."""
    field, sep, text = message.partition(": ")
    flag = flag_for(field, text)
    if not (flag and sep):
        return message
    if known is not None and flag not in known:
        return f"{message} ({field} in a --config file)" if config else message
    return (
        f"{message} (the flag {flag}, or {field} in a --config file)"
        if config
        else (f"{message} (the flag {flag})")
    )


def _declared(meta: Any) -> list[str]:
    """A typer option's spellings in its declaration's order: under ``Annotated`` typer keeps
    the first in ``default`` and the rest in ``param_decls`` (QA: ``--max-num-seqs`` was
    missed, its alias ``--max-running-requests`` taken for it)."""
    first = getattr(meta, "default", None)
    decls = [first] if isinstance(first, str) else []
    decls += list(getattr(meta, "param_decls", None) or ())
    return [part for decl in decls for part in decl.split("/") if part.startswith("--")]


def spelling(name: str, hint: Any) -> str:
    """The flag an option is first spelled as (its typer declaration's, else from its name)."""
    for meta in getattr(hint, "__metadata__", ()):
        if decls := _declared(meta):
            return decls[0]
    return "--" + name.replace("_", "-")


def command_flags(command: Callable[..., Any]) -> frozenset[str] | None:
    """The flags ``command`` takes, a ``flags`` dataclass's fields among them (cli.flags
    with_flags); None where its annotations do not resolve (any flag may then be named)."""
    try:
        hints = typing.get_type_hints(command, include_extras=True)
    except (NameError, TypeError):
        return None
    out: set[str] = set()
    for name in inspect.signature(command).parameters:
        hint = hints.get(name)
        if name == "flags" and isinstance(hint, type) and dataclasses.is_dataclass(hint):
            inner = typing.get_type_hints(hint, include_extras=True)
            for f in dataclasses.fields(hint):
                out.update(_spellings(f.name, inner[f.name]))
        else:
            out.update(_spellings(name, hint))
    return frozenset(out)


def _spellings(name: str, hint: Any) -> set[str]:
    """Every flag an option is spelled as (its typer declarations', else from its name)."""
    decls = {decl for meta in getattr(hint, "__metadata__", ()) for decl in _declared(meta)}
    return decls or {spelling(name, hint)}


def os_error_text(exc: OSError) -> str:
    """``'name': what went wrong``, the name cut as :func:`shown` cuts it (an ``OSError``'s own
    text quotes its file names whole, 5,000 characters of them if that is what was typed)."""
    if exc.filename is None or exc.strerror is None:
        return str(exc)
    return f"{shown(exc.filename)}: {exc.strerror}"


@contextmanager
def writing(out: Path, flag: str = "--out") -> Iterator[None]:
    """An ``OSError`` while writing ``out`` becomes an error naming the flag that chose it."""
    try:
        yield
    except OSError as exc:
        raise InputError(flag, f"cannot write {shown(out)}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class Bar:
    """One task's progress bar, fed by a study's ``progress`` callback."""

    progress: Progress
    task: TaskID

    def step(self, label: str) -> None:
        """One more done; ``label`` says which."""
        self.progress.update(self.task, advance=1, description=label)

    def grow(self, more: int) -> None:
        """``more`` steps to do than the total said (a study that learns its size as it goes)."""
        task = next(t for t in self.progress.tasks if t.id == self.task)
        self.progress.update(self.task, total=(task.total or 0) + more)

    def at(self, done: int, total: int) -> None:
        """``done`` of ``total`` done."""
        self.progress.update(self.task, completed=done, total=total)


@contextmanager
def progress_bar(description: str, total: int | None = None, show: bool = True) -> Iterator[Bar]:
    """A progress bar on stderr, drawn only on a terminal (and when ``show``)."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        disable=not (show and err.is_terminal),
    ) as progress:
        yield Bar(progress, progress.add_task(description, total=total))


def warn(message: str) -> None:
    """``warning: message`` as one line on stderr."""
    err.print(f"warning: {one_line(message)}", highlight=False, soft_wrap=True, markup=False)


# what --executor offers (a study's Runs also has a pool kept across calls, for the explorer)
EXECUTORS = ("serial", "process", "ray")


def check_executor(executor: str) -> Executor:
    if executor not in EXECUTORS:
        raise InputError("--executor", f"choose serial, process or ray (got {executor!r})")
    return cast(Executor, executor)


@contextmanager
def study_runs(
    executor: str = "serial",
    workers: int | None = None,
    ray_address: str | None = None,
    *,
    journal: Path | None = None,
    resume: bool = False,
    progress: Bar | None = None,
) -> Iterator[Runs]:
    """The run settings a study takes, from the flags: --executor, --workers, --ray-address,
    and the journal its finished runs stream to (``--resume``: start from those it holds),
    closed when the study ends; ``progress`` is told as the study goes."""
    chosen = check_executor(executor)
    cache = RunCache(journal, resume, warn) if journal is not None else None
    try:
        yield Runs(chosen, workers, ray_address, cache, progress=progress)
    finally:
        if cache is not None:
            cache.close()


def default_executor(executor: str | None, workers: int | None) -> str:
    """``--executor`` as given, else where a study's runs go by default: a process pool where
    this machine has more than one CPU (every run is seeded and self-contained, so the pool
    changes only how soon the answer comes, never its bytes), else this process.
    ``--workers`` sizes a pool: with ``--executor serial`` it is refused."""
    if executor is not None and not executor.strip():  # QA: '' ran the default unsaid
        raise InputError("--executor", "is empty: choose serial or process, or leave it out")
    chosen = executor or ("process" if (os.cpu_count() or 1) > 1 else "serial")
    if chosen not in ("serial", "process"):
        # Ray takes a sweep's independent cells; a study's probes wait on each other
        raise InputError("--executor", f"choose serial or process (got {chosen!r})")
    if chosen == "serial":
        refuse_unread("sizes a pool: --executor serial runs one at a time", {"--workers": workers})
    return chosen


def csv_list(text: str, flag: str, cast: Callable[[str], T] = str) -> list[T]:
    """A comma-separated flag value (``"1,2,4"``) as a non-empty list of ``cast`` values. An
    empty entry between two values is refused: in a list read by position (an α per draft
    position) dropping it would move every later value."""
    parts = [x.strip() for x in text.split(",")]
    if any(not x for x in parts[1:-1]) or (len(parts) > 1 and not parts[0]):
        raise InputError(flag, f"an empty entry between commas in {text!r}")
    try:
        items = [cast(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        # name what the entries must be (QA: '1,nan' read "expected a comma-separated list")
        what = {int: "whole numbers", float: "numbers"}.get(cast, "values")
        raise InputError(flag, f"expected comma-separated {what}, got {text!r}") from None
    if not items:
        raise InputError(flag, "the list is empty")
    return items


def left_out_note(left: dict[str, str]) -> None:
    """What ``--methods all`` did not run, grouped by why (on stderr)."""
    by_reason: dict[str, list[str]] = {}
    for name, why in left.items():
        by_reason.setdefault(why, []).append(name)
    for why, names in by_reason.items():
        err.print(f"left out of --methods all: {', '.join(names)}: {why}", highlight=False)


def refuse_unread(why: str, flags: dict[str, object]) -> None:
    """Each of ``flags`` (the flag as typed: its value, None = not given) that was given is an
    error naming it and saying ``why``: the mode chosen does not read it, and what does. A flag
    a mode ignores would change nothing without a word, and its answer would pass for the one
    asked."""
    for flag, value in flags.items():
        if value is not None:
            raise InputError(flag, why)


def one_spelling(flags: dict[str, T | None]) -> tuple[str, T] | None:
    """The flag (as typed) and value of the one given among ``flags``, the names one option
    goes by (``--concurrencies``, ``--batch-sizes``); None if none is. Two given is an error:
    which one wins is not for the user to guess."""
    given = [(flag, value) for flag, value in flags.items() if value is not None]
    if len(given) > 1:
        raise InputError(given[1][0], f"is another name for {given[0][0]}: give one of them")
    return given[0] if given else None


def one_method(flags: dict[str, str | None], why: str) -> str | None:
    """The method named by ``flags`` (``--method`` or ``--methods``: a command that runs one
    method takes either spelling), as simspec names it; None if neither is given. A list of
    more than one is an error saying ``why`` the command runs one."""
    spelled = one_spelling(flags)
    if spelled is None:
        return None
    flag, text = spelled
    names = csv_list(text, flag)
    if len(names) > 1:
        raise InputError(flag, f"{why} (got {len(names)}: {', '.join(names)})")
    return known_method(names[0], flag)
