"""The package's floors (docs/architecture.md): every import goes down, never up.

Reads each module's imports with :mod:`ast` (imports inside functions included), so a
lazy upward import is caught as well as a top-level one.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_graphir"

FLOORS = {
    "ir": 1, "names": 1, "naming": 1, "leaves": 1, "provenance": 1, "collector": 1, "weights": 1,
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
