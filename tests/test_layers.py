"""The folder tree is the architecture: each layer imports only the layers below it.

config → catalog → engine → studies → cli / ui. ``errors`` and ``outputs`` are leaves that any
layer may use (``outputs`` writes files, which the engine never does).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "simspec"

# what each layer may import from simspec (besides itself)
ALLOWED = {
    "errors": set(),
    "outputs": set(),
    "config": {"errors"},
    "catalog": {"errors", "config"},
    "engine": {"errors", "config", "catalog"},
    "studies": {"errors", "outputs", "config", "catalog", "engine"},
    "cli": {"errors", "outputs", "config", "catalog", "engine", "studies"},
    "ui": {"errors", "outputs", "config", "catalog", "engine", "studies"},
}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every simspec import in ``path``, at any depth (lazy ones too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "simspec":
                found += [(node.lineno, f"simspec.{a.name}") for a in node.names]
            elif node.module.startswith("simspec."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("simspec.")]
    return found


def _modules() -> list[Path]:
    return sorted(
        p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE
    )


def test_every_module_belongs_to_a_layer():
    layers = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in _modules()}
    assert layers <= set(ALLOWED), f"modules outside any layer: {layers - set(ALLOWED)}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_only_lower_layers(path: Path):
    layer = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    bad = [
        f"line {line}: {mod}"
        for line, mod in _imports(path)
        if _layer(mod) != layer and _layer(mod) not in ALLOWED[layer]
    ]
    assert not bad, f"{layer} may import only {sorted(ALLOWED[layer])}: {bad}"


@pytest.mark.slow
def test_importing_the_engine_loads_no_study_cli_or_ui_module():
    code = (
        "import sys, simspec.engine.simulation; "
        "print(sorted(m for m in sys.modules if m.split('.')[:2] in "
        "(['simspec', 'studies'], ['simspec', 'cli'], ['simspec', 'ui'])))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
