"""One scenario's run, as a worker does it: what may refuse it before it runs, what is kept of
it, and the failure that stops only the rows that need it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from simspec.catalog.methods import missing_draft_layers, missing_head
from simspec.config import Scenario
from simspec.engine.metrics import RunSummary
from simspec.engine.simulation import SimResult, check, simulate
from simspec.errors import InputError, ScenarioError

Errors = Literal["raise", "keep"]
Measure = Callable[[SimResult], Any]


@dataclass(frozen=True)
class Failed:
    """A scenario that could not run, with the one-line reason: the caller skips only what
    needs it (a validation row), the rest go on."""

    reason: str


def summary_of(result: SimResult) -> RunSummary:
    """What a run is kept for unless the caller asks for more: its summary."""
    return result.summary


def check_runnable(sc: Scenario) -> None:
    """:func:`~simspec.engine.simulation.check`, and a method whose drafter is the model's own
    MTP layers refused on a model that has none (the engine would cost a hypothetical module
    no checkpoint ships): every study runs its scenarios through here or :func:`run_one`."""
    refuse_missing_draft_layers(sc)
    check(sc)


def refuse_missing_draft_layers(sc: Scenario) -> None:
    """A drafter the model does not have: its own MTP layers, or a head trained on its
    hidden states that is not published (P-EAGLE: QA, a config file or --speculative-config
    ran gpt-oss-20b's head and acceptance on llama-3.1-8b where --methods refused it)."""
    why = missing_draft_layers(sc.method.name, sc.model) or missing_head(sc.method.name, sc.model)
    if why:
        raise InputError(f"methods.{sc.method.name}", why)


def run_one(scenario_json: str, errors: Errors = "raise", measure: Measure = summary_of) -> Any:
    """``measure`` of one scenario's run (its summary by default). With ``errors="keep"`` a
    scenario that cannot run gives a :class:`Failed` instead of raising, so nothing one
    scenario does stops the others. Module-level, so process pools and Ray can ship it."""
    try:
        sc = Scenario.model_validate_json(scenario_json)
        refuse_missing_draft_layers(sc)
        return measure(simulate(sc))
    except (InputError, ScenarioError) as exc:
        if errors == "raise":
            raise
        return Failed(str(exc))
    except Exception as exc:  # one scenario's failure must not stop the rest
        if errors == "raise":
            raise
        return Failed(f"simulation failed: {type(exc).__name__}: {exc}")
