"""The suite's own running order (tests/conftest.py): what pytest-xdist balances its workers by."""

from __future__ import annotations

from dataclasses import dataclass

from conftest import slow_first


@dataclass
class _Item:
    name: str
    slow: bool

    def get_closest_marker(self, name: str):
        return object() if name == "slow" and self.slow else None


def test_slow_tests_come_first_and_each_part_keeps_the_collected_order():
    items = [_Item("a1", False), _Item("a2", True), _Item("b1", True), _Item("b2", False)]
    assert [i.name for i in slow_first(items)] == ["a2", "b1", "a1", "b2"]
