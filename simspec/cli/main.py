"""The ``simspec`` command line: the app, its commands, and the entry point.

Each command lives in its own module; bad input prints one ``error:`` line naming the field
and exits 2 (:mod:`simspec.cli.common`).
"""

from __future__ import annotations

import re
import sys

import typer

from simspec.cli import analytic, fleet, methods, models, plan, policy, sweep, validate
from simspec.cli.calibrate import calibrate_app
from simspec.cli.common import print_error
from simspec.cli.compare import compare

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # help texts are plain: "[default: engine's]" must not be read as a rich style tag
    rich_markup_mode=None,
    help="Predict the speedup of speculative decoding under continuous batching.",
)


@app.callback()
def _root() -> None:
    """simspec: a discrete-event simulator of speculative decoding on real GPUs."""


app.command("sweep")(sweep.sweep)
app.command("analytic")(analytic.analytic)
app.command("policy")(policy.policy)
app.command("fleet")(fleet.fleet)
app.command("plan")(plan.plan)
app.command("recommend")(plan.recommend)
app.command("methods")(methods.methods)
app.command("models")(models.models)
app.command("validate")(validate.validate)
app.command("compare")(compare)
app.add_typer(calibrate_app, name="calibrate")


# "Invalid value for '--k': ..." or, for an option with two names, "'--a' / '--b'"
_INVALID = re.compile(r"^Invalid value for '(--[\w-]+)'((?: / '--[\w-]+')*): (.*)$", re.DOTALL)


def nan_named(message: str, argv: list[str]) -> str:
    """A range check's refusal of NaN (``--qps nan``: "Input should be less than or equal to
    10000000", one side of a range NaN fails on both) said as what it is."""
    m = _INVALID.match(message)
    if m is None:
        return message
    first, others, reason = m.groups()
    names = [first, *re.findall(r"'(--[\w-]+)'", others)]
    shown = " / ".join(f"'{name}'" for name in names)
    for i, arg in enumerate(argv):
        flag = next((n for n in names if arg == n or arg.startswith(n + "=")), None)
        if flag is None:
            continue
        value = arg.partition("=")[2] if arg.startswith(flag + "=") else None
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        if value is not None and value.strip().lower().lstrip("+-") == "nan":
            if "valid integer" in reason:  # a count (--k nan): no number at all is asked for
                return f"Invalid value for {shown}: must be a whole number, not NaN"
            # the bound's text is dropped: NaN fails both sides, and the option's whole range
            # follows (with_range). QA: "not NaN (Input should be less than or equal to 1e6)"
            return f"Invalid value for {shown}: must be a finite number, not NaN"
    return message


def with_range(message: str, exc: Exception) -> str:
    """A bound's refusal with the whole range the option takes (QA: "--replicas 0" read
    "Input should be greater than or equal to 1" where the help says [1, 1024], and NaN read
    the one bound it was checked against first)."""
    param = getattr(exc, "param", None)
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    bound = "Input should be" in message or message.endswith("a finite number, not NaN")
    if low is None and high is None or not bound:
        return message
    shown = "[" + ("-inf" if low is None else f"{low:g}") + ", "
    shown += ("inf" if high is None else f"{high:g}") + "]"
    return f"{message}; the range is {shown}"


def main() -> None:
    """Entry point: usage errors (bad flag values) also become one ``error:`` line and exit 2."""
    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        code = 1
    except Exception as exc:
        # click's exceptions (vendored inside typer) carry format_message() and exit_code
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":
            code = 0  # typer has printed the help already
        else:
            print_error(with_range(nan_named(exc.format_message(), sys.argv[1:]), exc))
            code = exc.exit_code
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
