"""Routing locality of MoE models (``simspec/data/expert_locality.yaml``): the share of a token's
routed experts that the token before it in the same sequence also chose, measured on the model
or transferred from a measured sibling of the same router design. The cost model reads it to
count the distinct experts a forward of consecutive tokens touches."""

from __future__ import annotations

from functools import cache

from simspec.catalog.tables import packaged_table


@cache
def adjacent_expert_reuse(model_id: str) -> float:
    """The adjacent-token expert reuse of ``model_id`` (0.0 where none is packaged: its tokens
    route independently)."""
    entry = packaged_table("expert_locality.yaml").get(model_id)
    if entry is None:
        return 0.0
    return float(entry["adjacent_expert_reuse"])


def reuse_origin(model_id: str) -> str | None:
    """The measured model whose share ``model_id`` takes (None where its own router was
    measured, or where none is packaged)."""
    entry = packaged_table("expert_locality.yaml").get(model_id)
    if entry is None or entry["basis"] != "transferred":
        return None
    return str(entry["from"])


def locality_note(model_id: str) -> str:
    """One line for outputs that must not present a transferred share as a measured one ("" when
    the share is measured or none is packaged)."""
    origin = reuse_origin(model_id)
    if origin is None:
        return ""
    reuse = adjacent_expert_reuse(model_id)
    return (
        f"{model_id}'s router locality (a token reuses {reuse * 100:.0f} % of its previous "
        f"token's experts) transferred from {origin}, a sibling of the same router design: "
        "no trace of its own (simspec/data/expert_locality.yaml)"
    )
