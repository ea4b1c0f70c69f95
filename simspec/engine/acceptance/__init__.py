"""Acceptance: the exact rule (``exact``), τ → α inversion (``inversion``), draft trees
(``trees``) and the per-step samplers the engine draws from (``samplers``)."""
