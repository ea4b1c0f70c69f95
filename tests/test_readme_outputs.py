"""The outputs shown in README.md and docs/first-day.md are what the code prints.

docs/readme_outputs.py writes every such block; these tests hold the documents to it: each
marked block is one the script knows and shows the commands the script runs, and the cheap
blocks, rerun, print exactly what the documents show (the expensive ones are checked by
`python docs/readme_outputs.py --check` before a change to the numbers lands).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))

import readme_outputs  # noqa: E402  (docs/ is not a package)

BLOCKS = readme_outputs.by_name()


def _documents() -> dict[Path, dict[str, str]]:
    return {
        doc: readme_outputs.markers(doc.read_text(encoding="utf-8"))
        for doc in readme_outputs.DOCUMENTS
    }


def test_every_marked_block_is_one_the_script_writes() -> None:
    for doc, blocks in _documents().items():
        unknown = sorted(set(blocks) - set(BLOCKS))
        assert not unknown, (
            f"{doc.name} marks blocks docs/readme_outputs.py does not know: {unknown}"
        )


def test_every_block_the_script_writes_is_shown_somewhere() -> None:
    shown = {name for blocks in _documents().values() for name in blocks}
    assert sorted(set(BLOCKS) - shown) == []


def test_each_block_shows_the_commands_the_script_runs() -> None:
    for doc, blocks in _documents().items():
        for name, text in blocks.items():
            commands = [line for line in text.splitlines() if line.startswith("$ simspec ")]
            expected = [
                f"$ simspec {readme_outputs.shlex.join(argv)}" for argv in BLOCKS[name].commands
            ]
            assert commands == expected, f"{doc.name}: block {name}"


def test_a_block_holds_output_not_only_its_commands() -> None:
    for doc, blocks in _documents().items():
        for name, text in blocks.items():
            rest = [
                ln for ln in text.splitlines() if ln.strip() and not ln.startswith(("$", "```"))
            ]
            assert rest, f"{doc.name}: block {name} is empty: run docs/readme_outputs.py --write"


def test_no_stray_fence_inside_a_generated_block() -> None:
    for doc, blocks in _documents().items():
        for name, text in blocks.items():
            assert text.count("```") % 2 == 0, f"{doc.name}: block {name}"


@pytest.mark.slow
@pytest.mark.parametrize("name", [b.name for b in readme_outputs.BLOCKS if b.cheap])
def test_a_cheap_block_is_what_the_code_prints_today(name: str) -> None:
    now = BLOCKS[name].render()
    for doc, blocks in _documents().items():
        if name in blocks:
            assert blocks[name] == now, (
                f"{doc.name}: block {name} is stale: python docs/readme_outputs.py --write {name}"
            )
