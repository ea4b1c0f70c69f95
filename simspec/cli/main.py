"""The ``simspec`` command line: the app, its commands, and the entry point.

Each command lives in its own module; bad input prints one ``error:`` line naming the field
and exits 2 (:mod:`simspec.cli.common`).
"""

from __future__ import annotations

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
            print_error(exc.format_message())
            code = exc.exit_code
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
