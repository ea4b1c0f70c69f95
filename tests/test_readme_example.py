"""The README's Python example is examples/api.py, and it runs: the public API stays true."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _readme_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("```python\n", text.index("### From Python")) + len("```python\n")
    return text[start : text.index("```\n", start)]


def test_the_readme_example_is_examples_api_py():
    assert _readme_block() == (ROOT / "examples" / "api.py").read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_readme_example_runs_and_reports_a_speedup(capsys):
    runpy.run_path(str(ROOT / "examples" / "api.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "speedup" in out and "x, tau" in out
    assert len(_readme_block().splitlines()) <= 35  # a short example, as promised
