"""One error type for bad input, so the CLI can print one line and exit 2."""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input: names the offending field and what is allowed."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")

    def __reduce__(self) -> tuple:
        """Rebuilt from (field, message): errors raised in a worker process or on Ray reach
        the caller intact."""
        return (InputError, (self.field, self.message))


class ScenarioError(RuntimeError):
    """A valid scenario that cannot run (model does not fit, batch never gets KV blocks)."""
