"""Presets as data, each with its source: GPUs and hardware profiles, engine profiles, model
shapes, methods and their acceptance, acceptance traces, the temperature model, vLLM configs.

Imports only :mod:`simspec.config` and :mod:`simspec.errors`."""
