"""Fit hardware profiles to GPU timing tables and report how well they fit.

``samples`` turns each known timing-table layout into per-operator samples (FLOPs, bytes,
seconds), ``fit`` fits the cost model's constants to them with scipy, ``report`` tabulates and
plots predicted against measured.
"""
