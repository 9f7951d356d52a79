"""The package's import graph has no cycle, counting every import: module-level ones and
those inside functions (which hide a cycle from Python at import time, not from a
reader). docs/architecture.md's floors rely on it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_graphir"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
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


def _graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    return {_module_name(p): _imports(p, modules) for p in paths}


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


def test_the_import_graph_reads_imports_inside_functions() -> None:
    graph = _graph()
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
    graph = _graph()
    cycle = _cycle({k: {v for v in vs if not k.startswith(v + ".")} for k, vs in graph.items()})
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
