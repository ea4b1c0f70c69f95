"""Fit hardware profiles to GPU timing tables and report how well they fit.

``samples`` finds the known timing tables under a directory and reads them (``published``:
Vidur and LLMServingSim; ``harness``: our own) into per-operator samples of one ``schema``
(FLOPs, bytes, seconds); ``fit`` fits the cost model's constants to them with scipy,
``profile`` writes the result with its provenance, ``report`` tabulates and plots predicted
against measured, and ``steps`` checks whole decode steps against published measurements.
"""
