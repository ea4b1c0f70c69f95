"""The errors simspec raises on purpose, and how each becomes one line for the user.

Bad input is an :class:`InputError` naming the field; a valid scenario that cannot run is a
:class:`ScenarioError`. The CLI prints either as one line and exits 2; the explorer shows it.
"""

from __future__ import annotations

import difflib

from pydantic import ValidationError


class InputError(ValueError):
    """Bad user input: names the offending field and what is allowed."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        # args are (field, message), so that code re-raising an error as type(e)(*e.args)
        # rebuilds it (SimPy does, for an error raised inside a process: QA, a --window-s too
        # fine for a slow KV transfer crashed with a TypeError instead of this message)
        super().__init__(field, message)

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"

    def __reduce__(self) -> tuple:
        """Rebuilt from (field, message): errors raised in a worker process or on Ray reach
        the caller intact."""
        return (InputError, (self.field, self.message))


class ScenarioError(RuntimeError):
    """A valid scenario that cannot run (model does not fit, batch never gets KV blocks)."""


def one_line(text: str) -> str:
    """Control characters (a newline in a user's key, say) escaped: an error stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


# engine flags a config file may carry under their engine's name, and simspec's field for each
ENGINE_SPELLINGS = {
    "quantization": "precision (bf16, fp8, int4-w, nvfp4)",
    "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp",
    "data_parallel_size": "dp",
    "speculative_config": "method",
}

# settings of a fleet that a scenario file does not hold: the flags that set them
FLAG_ONLY = {
    "router": "the fleet's router is the --router flag (fleet, plan --trace)",
    "replicas": "a fleet's replicas are the --replicas flag",
    "prefill_replicas": "prefill instances are the --prefill-replicas flag",
}


def first_error(exc: ValidationError) -> tuple[str, str]:
    """(field, message) of a pydantic error's first entry: ``("workload.concurrency", "Input
    should be greater than or equal to 1 (got 0)")``."""
    errors = exc.errors()
    e = errors[0]
    loc = ".".join(str(x) for x in e["loc"]) or "config"
    msg = e["msg"].removeprefix("Value error, ")
    key = str(e["loc"][-1]) if e["loc"] else ""
    if e["type"] == "missing":
        # a misspelt key is two errors, the field missing and the key no field: say both
        # (QA: a file's 'polcy:' read "policy: Field required" alone)
        extras = [
            str(x["loc"][-1])
            for x in errors
            if x["type"] == "extra_forbidden" and tuple(x["loc"][:-1]) == tuple(e["loc"][:-1])
        ]
        if close := difflib.get_close_matches(key, extras, n=1):
            msg += f"; {close[0]!r} is given instead, which is no field (misspelt?)"
    if e["type"] == "extra_forbidden" and key in ENGINE_SPELLINGS:
        # an engine's flag name: say which of simspec's fields holds it (QA: "quantization:
        # Extra inputs are not permitted" named no field)
        msg += f": simspec calls it {ENGINE_SPELLINGS[key]}"
    elif e["type"] == "extra_forbidden" and key in FLAG_ONLY:
        # a fleet's setting a scenario file does not hold (QA: a file's "router: random" read
        # "Extra inputs are not permitted" alone)
        msg += f": {FLAG_ONLY[key]}"
    got = e.get("input")
    if isinstance(got, float) and got != got:
        # a bound's message names one side ("less than or equal to 1e7"), which NaN fails on
        # both (QA: --qps nan); quoted beside it, it read as a contradiction (QA): left out
        msg = "must be a finite number, not NaN"
    tail = f" (got {got!r})" if got is not None and not isinstance(got, dict | list) else ""
    return loc, msg + tail


def validation_message(exc: ValidationError) -> str:
    """A pydantic error as one line naming the field: ``field: message (got value)``."""
    return ": ".join(first_error(exc))
