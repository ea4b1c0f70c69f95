"""The README points at code that exists, and its Layout section names every module.

Modules move between releases; a README that still sends a reader to ``simspec.exact`` or
leaves a new package out of the layout is wrong without anything else failing. Each failure
lists every stale or missing name, with the README line, so that one edit fixes them all.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "simspec"
README = ROOT / "README.md"

# a path (simspec/engine/replica.py, simspec/engine/lookup/, simspec/data/profiles/*.yaml)
PATH = re.compile(r"(?<![\w/.-])simspec/[\w./*-]*")
# a dotted module or name (simspec.engine.acceptance.exact, simspec.studies.fleet.summary_table)
DOTTED = re.compile(r"(?<![\w/.-])simspec(?:\.[A-Za-z_]\w*)+")
# a module or folder named inside a Layout entry: hardware.py, speculators/
LAYOUT_NAME = re.compile(r"(?<![\w/.-])([A-Za-z_]\w*(?:\.py|/))(?![\w/])")
# packages whose Layout entry describes their files as a whole (the CLI: one file per command)
DESCRIBED_AS_A_WHOLE = {"cli"}


def _lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


def _module(parts: list[str]) -> Path | None:
    """The file of a dotted module, or None when it is not one."""
    base = ROOT.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def _top_level_names(path: Path) -> frozenset[str]:
    """Names a module defines or imports at its top level (``simspec.simulate`` is one)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def _dotted_exists(dotted: str) -> bool:
    """A module, or a module and one name it defines."""
    parts = dotted.split(".")
    if _module(parts):
        return True
    parent = _module(parts[:-1])
    return parent is not None and parts[-1] in _top_level_names(parent)


def _path_exists(text: str) -> bool:
    if "*" in text:
        return any(ROOT.glob(text))
    return (ROOT / text).exists()


def test_every_module_path_the_readme_names_exists():
    stale = []
    for number, line in enumerate(_lines(), start=1):
        for match in PATH.finditer(line):
            text = match.group().rstrip(".,")
            if not _path_exists(text):
                stale.append(f"line {number}: {text}")
        for match in DOTTED.finditer(line):
            if not _dotted_exists(match.group()):
                stale.append(f"line {number}: {match.group()}")
    assert not stale, "README.md names paths or modules that do not exist:\n" + "\n".join(stale)


def _layout_entries() -> dict[str, tuple[int, str]]:
    """The ``simspec/`` tree of the Layout section: each top-level entry (``errors.py``,
    ``engine/``) with its first README line and the text of its description."""
    lines = _lines()
    start = lines.index("## Layout")
    first = start + lines[start:].index("simspec/") + 1
    entries: dict[str, tuple[int, str]] = {}
    current = ""
    for number, line in enumerate(lines[first:], start=first + 1):
        if not line.startswith(" ") or line.startswith("```"):
            break  # the next root folder (calibration/, tools/ ...) or the block's end
        if not line.startswith("   "):  # two spaces: a new entry
            current, _, line = line.strip().partition(" ")
            entries[current] = (number, "")
        number0, text = entries[current]
        entries[current] = (number0, f"{text} {line.strip()}")
    return entries


def _required(entry: str) -> list[str]:
    """What an entry's text must name: a package's modules and subpackages."""
    folder = PACKAGE / entry.rstrip("/")
    if entry.rstrip("/") in DESCRIBED_AS_A_WHOLE:
        return []
    modules = [p.name for p in folder.glob("*.py") if not p.name.startswith("__")]
    packages = [f"{p.parent.name}/" for p in folder.glob("*/__init__.py")]
    return sorted(modules + packages)


def test_the_layout_names_every_module_and_package():
    entries = _layout_entries()
    top = [p.name for p in PACKAGE.glob("*.py")] + [
        f"{p.parent.name}/" for p in PACKAGE.glob("*/__init__.py")
    ]
    missing = [f"simspec/{name}" for name in sorted(top) if name not in entries]
    for entry, (_, text) in entries.items():
        named = set(LAYOUT_NAME.findall(text))
        missing += [f"simspec/{entry}{name}" for name in _required(entry) if name not in named]
    assert not missing, (
        "README.md's Layout section (the simspec/ tree) does not name:\n"
        + "\n".join(missing)
        + "\n(a module: its file name in its package's entry; a package: its name and a slash)"
    )


def test_every_module_the_layout_names_exists():
    stale = []
    for entry, (number, text) in _layout_entries().items():
        folder = PACKAGE / entry
        if not folder.exists():
            stale.append(f"line {number}: simspec/{entry}")
            continue
        for name in LAYOUT_NAME.findall(text):
            found = folder.is_dir() and any(folder.rglob(name.rstrip("/")))
            if not found and not (ROOT / name).exists():  # app.py lives at the root
                stale.append(f"line {number} ({entry} entry): {name}")
    assert not stale, "README.md's Layout section names what does not exist:\n" + "\n".join(stale)
