"""The ``simspec`` command (typer)."""
