"""The packaged data files (``simspec/data``), read once: every catalogue module loads its
YAML through here, so the installed package needs nothing outside itself."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml


def packaged_text(*parts: str) -> str:
    return resources.files("simspec").joinpath("data", *parts).read_text(encoding="utf-8")


@cache
def packaged_table(name: str) -> dict[str, dict[str, Any]]:
    return yaml.safe_load(packaged_text(name))
