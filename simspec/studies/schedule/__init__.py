"""The speculation schedule to deploy: a draft length (or tree budget) per band of running
requests, as vLLM's Dynamic SD states it (``num_speculative_tokens_per_batch_size``).

``grid`` runs every setting at a grid of concurrencies (``simspec recommend``'s table and all
its defaults); ``bands`` finds where each setting takes over and makes the bands; ``trace``
finds the schedule for a replayed trace's traffic; ``export`` writes a schedule for vLLM or as
text.
"""

from __future__ import annotations

from types import MappingProxyType

# the method fields that state a schedule: what recommend chooses, a policy switches between,
# and a fixed setting has none of
SCHEDULE_FIELDS = ("k_schedule", "tree_schedule", "disable_by_batch_size")
NO_SCHEDULE = MappingProxyType(dict.fromkeys(SCHEDULE_FIELDS))
