"""Measured routing locality of MoE models (``simspec/data/expert_locality.yaml``): the share of a
token's routed experts that the token before it in the same sequence also chose. The cost model
reads it to count the distinct experts a forward of consecutive tokens touches."""

from __future__ import annotations

from functools import cache

from simspec.catalog.tables import packaged_table


@cache
def adjacent_expert_reuse(model_id: str) -> float:
    """The measured adjacent-token expert reuse of ``model_id`` (0.0 where none is packaged:
    its tokens route independently)."""
    entry = packaged_table("expert_locality.yaml").get(model_id)
    if entry is None:
        return 0.0
    return float(entry["adjacent_expert_reuse"])
