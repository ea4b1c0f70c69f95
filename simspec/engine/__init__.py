"""One replica in SimPy: workload → scheduler → speculator/acceptance → cost model → metrics.

Imports only :mod:`simspec.config`, :mod:`simspec.catalog` and :mod:`simspec.errors`
(tests/test_layers.py holds it to that)."""
