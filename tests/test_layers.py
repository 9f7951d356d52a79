"""The package's floors (docs/architecture.md): every import goes down, never up, and
no module imports itself back through others (no import cycle).

Reads each module's imports with :mod:`ast` (imports inside functions included), so a
lazy upward import is caught as well as a top-level one.
"""

from __future__ import annotations

import ast
import re
import shutil
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_graphir"

FLOORS = {
    "ir": 1, "names": 1, "opnames": 1, "leaves": 1, "provenance": 1, "gc_pause": 1,
    "defaults": 1,
    "capture": 2, "serialize": 2, "compare": 2,
    "extension": 3, "report": 3, "compiled": 3, "weights": 3, "parallel": 3,
    "plugin": 4, "cli": 4,
}  # fmt: skip
"""Top-level module or package -> floor, as drawn in docs/architecture.md."""

SAME_FLOOR = {("extension", "report"), ("ir", "names")}
"""Imports between two parts of one floor, each a deliberate one-way edge."""


def _part(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    return rel.parts[0]


FRONT_DOOR = "__init__"
"""What an import of the package itself (``import pytest_graphir``, ``from pytest_graphir
import trace``) reaches: ``pytest_graphir/__init__.py``, on the floor of the highest part
it imports (:func:`_front_door_floor`)."""


def _imports(path: Path) -> set[str]:
    """The top-level parts of pytest_graphir that ``path`` imports."""
    return _imports_of(path.read_text(), path.relative_to(PACKAGE).with_suffix("").parts)


def _imports_of(text: str, here: tuple[str, ...]) -> set[str]:
    """The top-level parts of pytest_graphir imported by module text at ``here``
    (``("compare", "nodes")``): relative and absolute ``from ... import``, and
    ``import pytest_graphir.x`` (``ast.Import``); a name imported from the package
    itself is its part when it is one, else :data:`FRONT_DOOR`."""
    tree = ast.parse(text)
    found: set[str] = set()

    def add(target: list[str], names: list[str]) -> None:
        if target:
            found.add(target[0])
        else:  # the package itself: `from .. import x`, `from pytest_graphir import x`
            found.update(n if n in FLOORS else FRONT_DOOR for n in names)

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            module = node.module.split(".") if node.module else []
            if node.level:
                base = list(here[:-1])[: len(here) - node.level]  # the package the dots name
                add([*base, *module], names)
            elif module[:1] == ["pytest_graphir"]:
                add(module[1:], names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "pytest_graphir":
                    found.add(parts[1] if len(parts) > 1 else FRONT_DOOR)
    return found


def _front_door_floor() -> int:
    """The floor of ``pytest_graphir/__init__.py``: the highest of the parts it imports."""
    return max(FLOORS[p] for p in _imports(PACKAGE / "__init__.py"))


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
        floors = {**FLOORS, FRONT_DOOR: _front_door_floor()}
        for target in _imports(path) - {part}:
            edge = (part, target)
            if floors[target] > floors[part] or (
                floors[target] == floors[part] and edge not in SAME_FLOOR
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


def test_the_check_sees_a_plain_import_statement() -> None:
    """``import pytest_graphir.x`` (an ``ast.Import``, not ``from ... import``) counts,
    at any depth and inside functions; the package itself is the front door."""
    assert _imports_of("import pytest_graphir.plugin.fixture\n", ("ir",)) == {"plugin"}
    assert _imports_of("def f():\n    import pytest_graphir.cli as c\n", ("ir",)) == {"cli"}
    assert _imports_of("import pytest_graphir\n", ("ir",)) == {FRONT_DOOR}
    assert _imports_of("from pytest_graphir import trace, capture\n", ("ir",)) == {
        FRONT_DOOR,
        "capture",
    }
    assert _imports_of("import torch, os.path\n", ("ir",)) == set()
    assert 1 < _front_door_floor() < FLOORS["plugin"]


def test_a_plain_upward_import_fails_the_floors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A floor-1 module of a copy of the package that does ``import pytest_graphir.cli``
    inside a function is reported by the walk :func:`test_imports_only_go_down` runs."""
    copy = tmp_path / "pytest_graphir"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    with (copy / "ir.py").open("a") as f:
        f.write("\n\ndef _late() -> None:\n    import pytest_graphir.cli  # noqa: F401\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", copy)
    with pytest.raises(AssertionError, match=r"ir\.py imports cli"):
        test_imports_only_go_down()


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


TORCH_ON_FLOOR_1 = {"leaves"}
"""Floor-1 modules that import torch at module level (docs/architecture.md says which:
the walker of nested values takes tensors as its leaves)."""


def test_floor_1_imports_torch_only_where_the_architecture_says() -> None:
    found = set()
    for part, floor in FLOORS.items():
        path = PACKAGE / f"{part}.py"
        if floor != 1 or not path.exists():
            continue
        body = ast.parse(path.read_text()).body  # module level only, not in functions
        for node in body:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "torch" or n.startswith("torch.") for n in names):
                found.add(part)
    assert found == TORCH_ON_FLOOR_1


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


# -- docs/architecture.md names every module -------------------------------------------

ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def _module_paths(package: Path) -> list[str]:
    """Every module of ``package`` other than a package's ``__init__.py``, as its path
    relative to the package with ``/`` separators (``capture/state.py``, ``ir.py``)."""
    return sorted(
        p.relative_to(package).as_posix() for p in package.rglob("*.py") if p.name != "__init__.py"
    )


def _names(text: str, path: str) -> bool:
    """Whether ``text`` holds ``path`` whole (``state.py`` is not named by ``capture/state.py``)."""
    return re.search(rf"(?<![\w/.]){re.escape(path)}(?!\w)", text) is not None


def test_architecture_names_every_module() -> None:
    """docs/architecture.md names every module of the package by its path relative to
    ``pytest_graphir/`` (``capture/state.py``, ``cli.py``; a package's ``__init__.py``
    need not be named): the page is where a newcomer finds what each module owns."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    missing = [m for m in _module_paths(PACKAGE) if not _names(text, m)]
    assert missing == [], "modules missing from docs/architecture.md: " + ", ".join(missing)


def test_module_paths_are_written_relative_to_the_package() -> None:
    paths = _module_paths(PACKAGE)
    assert "capture/state.py" in paths and "ir.py" in paths
    assert not [p for p in paths if p.endswith("__init__.py") or "\\" in p]
    assert _names("`capture/state.py` holds", "capture/state.py")
    assert not _names("`capture/state.py` holds", "state.py")
    assert not _names("capture/state.pyi", "capture/state.py")
