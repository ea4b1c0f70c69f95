"""JSON and YAML as a user's file means them: a key written twice is an error naming it.

Both parsers keep the last of two equal keys without a word (``json.loads``, PyYAML's
``SafeLoader``), so ``seed: 1`` then ``seed: 2`` would run seed 2 while the reader of the file
sees seed 1 first; every user file (scenario, profile, config.json, --speculative-config) is
read through these instead.
"""

from __future__ import annotations

import json
from typing import Any

import yaml


class DuplicateKey(ValueError):
    """A mapping that names one key twice."""

    def __init__(self, key: object) -> None:
        super().__init__(f"duplicate key {key!r}")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def loads_json(text: str) -> Any:
    """``json.loads``, refusing a repeated key (:class:`DuplicateKey`)."""
    return json.loads(text, object_pairs_hook=_unique)


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader whose mappings refuse a repeated key."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # ``<<: *base``: keys written beside a merge override it, by design
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key: left for the base loader to refuse
                break
            if repeated:
                raise DuplicateKey(key)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load``, refusing a repeated key (:class:`DuplicateKey`)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
