"""The package's floors (docs/architecture.md): every import goes down, never up, and
no module imports itself back through others (no import cycle).

Reads each module's imports with :mod:`ast` (imports inside functions included), so a
lazy upward import is caught as well as a top-level one.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_graphir"

FLOORS = {
    "ir": 1, "names": 1, "opnames": 1, "leaves": 1, "provenance": 1, "collector": 1, "weights": 1,
    "defaults": 1,
    "capture": 2, "serialize": 2, "compare": 2,
    "extension": 3, "report": 3, "compiled": 3,
    "plugin": 4, "cli": 4,
}  # fmt: skip
"""Top-level module or package -> floor, as drawn in docs/architecture.md."""

SAME_FLOOR = {("extension", "report"), ("ir", "names")}
"""Imports between two parts of one floor, each a deliberate one-way edge."""


def _part(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    return rel.parts[0]


def _imports(path: Path) -> set[str]:
    """The top-level parts of pytest_graphir that ``path`` imports."""
    return _imports_of(path.read_text(), path.relative_to(PACKAGE).with_suffix("").parts)


def _imports_of(text: str, here: tuple[str, ...]) -> set[str]:
    """The top-level parts of pytest_graphir imported by module text at ``here``
    (``("compare", "nodes")``)."""
    tree = ast.parse(text)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(here[:-1])[: len(here) - node.level]  # the package the dots name
            target = [*base, *(node.module.split(".") if node.module else [])]
            names = [target] if target else [[a.name] for a in node.names]
            found.update(t[0] for t in names if t)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pytest_graphir."):
            found.add(node.module.split(".")[1])  # type: ignore[union-attr]
    return found


def test_every_module_has_a_floor() -> None:
    parts = {
        _part(p) for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE
    }
    assert parts <= set(FLOORS), sorted(parts - set(FLOORS))


def test_imports_only_go_down() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent == PACKAGE and path.name == "__init__.py":
            continue  # the package's front door re-exports from every floor
        part = _part(path)
        for target in _imports(path) - {part}:
            edge = (part, target)
            if FLOORS[target] > FLOORS[part] or (
                FLOORS[target] == FLOORS[part] and edge not in SAME_FLOOR
            ):
                upward.append(f"{path.relative_to(PACKAGE)} imports {target}")
    assert upward == []


def test_the_check_sees_an_upward_import() -> None:
    """The import reader finds relative imports at any depth, also inside functions."""
    found = _imports(PACKAGE / "compare" / "nodes.py")
    assert {"ir", "names"} <= found and "compare" in found
    assert _imports_of("def f():\n    from ..plugin import x\n", ("compare", "x")) == {"plugin"}
    assert _imports_of("from . import provenance\n", ("serialize",)) == {"provenance"}
    assert _imports_of("from pytest_graphir.cli import main\n", ("ir",)) == {"cli"}


# -- import cycles, module by module ------------------------------------------------


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _module_imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules that ``path`` imports anywhere in its body, resolved to the
    deepest module that exists (``from .compare import message`` is
    ``pytest_graphir.compare.message``; ``from .ir import GraphIR`` is
    ``pytest_graphir.ir``)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            targets = [f"{stem}.{alias.name}" for alias in node.names] + [stem]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _module_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    return {_module_name(p): _module_imports(p, modules) for p in paths}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_module_graph_reads_imports_inside_functions() -> None:
    graph = _module_graph()
    assert "pytest_graphir.ir" in graph["pytest_graphir.serialize"]
    # plugin.py imports torch-dependent code only inside functions; the walk sees it
    plugin = {m for m in graph if m.startswith("pytest_graphir.plugin")}
    assert any(graph[m] for m in plugin)


def test_a_cycle_is_found_where_there_is_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_the_package() -> None:
    """Edges from a module to its own enclosing packages are left out: Python runs a
    package's ``__init__`` before any of its submodules, so ``from . import name`` in a
    submodule reads a package that is already initialised."""
    graph = _module_graph()
    cycle = _cycle({k: {v for v in vs if not k.startswith(v + ".")} for k, vs in graph.items()})
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
