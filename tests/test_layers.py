"""The folder tree is the architecture: each layer imports only the layers below it, and no
module imports itself back through others.

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


# -- no import cycles, lazy and TYPE_CHECKING imports included ---------------------------------
def module_graph(package: Path) -> dict[str, dict[str, int]]:
    """module -> {module it imports: line} for every file under ``package``, from the AST
    (imports inside functions and ``if TYPE_CHECKING:`` blocks too). ``from a.b import c`` is
    an edge to ``a.b.c`` when that is a module, else to ``a.b``; a package's ``__init__`` is
    the package's own node."""
    root = package.name
    names = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        names[path] = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    modules = set(names.values())
    graph: dict[str, dict[str, int]] = {}
    for path, name in names.items():
        edges = graph.setdefault(name, {})
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package this file is in
                    up = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                ]
            for target in targets:
                if target.split(".")[0] == root and target in modules and target != name:
                    edges.setdefault(target, node.lineno)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) through each group of modules that import each other
    (each strongly connected component of more than one module), found by Tarjan's
    algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(graph, set(group), group[0]) for group in groups]


def _cycle_in(graph: dict[str, dict[str, int]], group: set[str], start: str) -> list[str]:
    """The shortest path from ``start`` back to itself inside ``group`` (breadth first)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w in group and w not in came_from:
                    came_from[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {sorted(group)}")


def _described(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    return (
        " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False))
        + f" -> {cycle[-1]}"
    )


def test_no_module_imports_itself_back_through_others():
    graph = module_graph(PACKAGE)
    found = [_described(graph, c) for c in cycles(graph)]
    assert not found, "import cycles (one through each group of modules):\n" + "\n".join(found)


def test_the_cycle_check_sees_lazy_and_type_checking_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub.b import B\n")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import C\nB = 1\n"
    )
    (pkg / "c.py").write_text("from pkg import a\n")
    (pkg / "d.py").write_text("from pkg.sub import B\n")  # the package itself: no cycle
    graph = module_graph(pkg)
    assert graph["pkg.a"] == {"pkg.sub.b": 2} and graph["pkg.d"] == {"pkg.sub": 1}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]
    assert "pkg.a (line 2) -> pkg.sub.b (line 3) -> pkg.c (line 1) -> pkg.a" == _described(
        graph, cycles(graph)[0]
    )
