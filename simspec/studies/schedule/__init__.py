"""The speculation schedule to deploy: a draft length (or tree budget) per band of running
requests, as vLLM's Dynamic SD states it (``num_speculative_tokens_per_batch_size``).

``grid`` runs every setting at a grid of concurrencies (``simspec recommend``'s table);
``bands`` finds where each setting takes over and makes the bands; ``trace`` finds the schedule
for a replayed trace's traffic; ``export`` writes a schedule for vLLM or as text.
"""
