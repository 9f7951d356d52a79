"""Align the eager op sequence with the ops the compiled graphs ran, and sort what differs.

Both sides use canonical op names (:mod:`pytest_graphir.opnames`,
:mod:`.backend`). :func:`align` matches them with ``difflib.SequenceMatcher`` (a
sequence alignment, so one odd op never derails the rest), then looks at each
stretch that did not match:

* eager ops that carry no tensor (``_C._set_grad_enabled`` from ``@torch.no_grad()``,
  ``_C._log_api_usage_once``) never take part: Dynamo runs them at trace time or
  puts them in the graph as it likes (:func:`eager_ops` leaves them out, and
  :func:`~.backend.canonical_from_fx_node` drops them on the compiled side);
* eager ops whose result nothing used (an indexing op whose value is dropped,
  a mask built and never read) are *folded*: Dynamo's dead-code elimination
  removes them from the graph. In-place ops never fold;
* a stretch whose ops are NumPy calls and the conversions around them (eager
  ``numpy``/``from_numpy``, compiled ``numpy.tanh``, ``as_tensor``) is a *rewrite*:
  Dynamo traced NumPy into torch ops;
* a stretch whose compile-only ops were traced from code outside the user's own
  package (site-packages, or a module named in ``third_party``) is a *library
  compile path*: a library that takes another path under ``torch.compile``
  (``torch.compiler.is_compiling()``), named at its source line; so is a stretch of
  eager-only ops between compiled ops of library code in the same module (or its
  submodules);
* a stretch of eager-only ops between two graph runs (or before the first, or after
  the last) ran *between* the graphs: what a graph break does, so it fails the check
  only where no break happened or breaks are not allowed;
* anything else is a divergence, and so are scope differences of matched ops, except
  an op Dynamo places in a submodule of the eager op's module that no eager op ran
  in: a method of the submodule called directly (not through ``__call__``, so no
  module scope eagerly).
"""

from __future__ import annotations

import difflib
import os
import site
import sys
import sysconfig
from collections.abc import Iterable
from typing import Any

from ..ir import TensorMeta
from ..names import module_path, op_scope, refs_in
from .records import CompiledOp, EagerOp, OpDivergence
from .watch import readable_path, within

NUMPY_OPS = frozenset(
    "numpy from_numpy as_tensor view_as detach tensor asarray clone contiguous to".split()
)
"""Conversions around a NumPy call: eager ``Tensor.numpy`` / ``torch.from_numpy``, and
what Dynamo adds when it traces NumPy into torch ops."""


def _gives_tensor(outputs: list[Any]) -> bool:
    return any(isinstance(o, TensorMeta) or (isinstance(o, dict) and "ref" in o) for o in outputs)


def eager_ops(graph: Any) -> list[EagerOp]:
    """The eager trace's op nodes as :class:`~.records.EagerOp`, in run order.

    Ops that neither take nor give a tensor are left out. An op whose result
    reaches no model output through live ops (in-place ops are always live: they
    change a tensor others read) is marked ``dead``: Dynamo's dead-code elimination
    drops such ops, or evaluates them at trace time.

    Args:
        graph: a :class:`~pytest_graphir.ir.GraphIR` from ``trace(..., stats=False)``.
    """
    nodes = [n for n in graph.nodes if n.kind == "op"]
    live = set(refs_in(graph.outputs))
    for node in reversed(nodes):  # a result is live when a live op (or the output) uses it
        if node.name in live or node.target.endswith("_"):
            live.add(node.name)
            live.update(refs_in([node.args, node.kwargs]))
    kept = [n for n in nodes if _gives_tensor(n.outputs) or refs_in([n.args, n.kwargs])]
    return [
        EagerOp(n.name, n.target, module_path(op_scope(n.name)), dead=n.name not in live, index=i)
        for i, n in enumerate(kept)
    ]


def library_roots(third_party: Iterable[str] = ()) -> tuple[str, ...]:
    """Directories whose code counts as library code: site-packages (``site``,
    ``sysconfig`` purelib/platlib), the standard library, and the directories of the
    modules or paths named in ``third_party``."""
    roots = [*site.getsitepackages(), site.getusersitepackages()]
    roots += [sysconfig.get_paths().get(key, "") for key in ("purelib", "platlib", "stdlib")]
    for name in third_party:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None) if module is not None else name
        if path:  # a package's directory; a module's or directory's own path
            roots.append(os.path.dirname(path) if os.path.basename(path) == "__init__.py" else path)
    return tuple(os.path.abspath(r) for r in roots if r)


def is_library_file(filename: str, roots: tuple[str, ...]) -> bool:
    """True when ``filename`` lies under one of ``roots`` or in any ``site-packages`` /
    ``dist-packages`` directory."""
    path = os.path.abspath(filename)
    if {"site-packages", "dist-packages"} & set(path.replace("\\", "/").split("/")):
        return True
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _foldable(op: EagerOp) -> bool:
    return op.dead and not op.op.endswith("_") and op.op != "numpy"


def _classify(div: OpDivergence, roots: tuple[str, ...], neighbours: list[CompiledOp]) -> None:
    """Set ``div.category`` (and ``div.source``) for a non-matching stretch.

    ``neighbours`` are the compiled ops right before and after a stretch of missing
    eager ops: when both were traced from library code in the same module, the
    missing ops are that library's eager-only path.
    """
    names = [e.op for e in div.eager] + [c.op for c in div.compiled]
    if any(o in ("numpy", "from_numpy") or o.startswith("numpy.") for o in names) and all(
        o in NUMPY_OPS or o.startswith("numpy.") for o in names
    ):
        div.category = "rewrite"  # a NumPy call and the conversions around it
        return
    if div.kind == "missing":  # library code before and after, in the same module
        scope = div.eager[0].scope
        ops = neighbours
        library = any(c.scope == scope for c in ops) and all(
            c.frames and within(c.scope, scope) for c in ops
        )
    else:
        ops = div.compiled
        library = all(c.frames for c in ops)
    library = library and all(is_library_file(c.frames[-1][0], roots) for c in ops)
    traced = [c for c in ops if c.frames]
    if traced and (library or div.kind != "missing"):
        file, line, function, _ = traced[0].frames[-1]
        div.source = f"{readable_path(file)}:{line} in {function}"
    if library:
        div.category = "library"


def align(
    eager: list[EagerOp], compiled: list[CompiledOp], third_party: Iterable[str] = ()
) -> tuple[list[OpDivergence], list[EagerOp]]:
    """Align the eager op sequence with the compiled one (module docstring).

    Args:
        eager: the eager ops (:func:`eager_ops`).
        compiled: the ops the compiled graphs ran, in run order.
        third_party: module names or paths whose code counts as library code, besides
            site-packages.

    Returns:
        ``(divergences, folded)``: differences in eager order, each with a
        ``category`` (``"divergence"``, ``"library"``, ``"rewrite"``, ``"between"``);
        and the eager ops
        Dynamo dropped because nothing used their result.
    """
    roots = library_roots(third_party)
    out: list[OpDivergence] = []
    folded: list[EagerOp] = []
    eager_scopes = {e.scope for e in eager}

    def match(
        e_ops: list[EagerOp], c_ops: list[CompiledOp], e_base: int, c_base: int, first: bool
    ) -> None:
        matcher = difflib.SequenceMatcher(
            None, [e.op for e in e_ops], [c.op for c in c_ops], autojunk=False
        )
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                for e, c in zip(e_ops[i1:i2], c_ops[j1:j2], strict=True):
                    # same scope, a forward hook's op, or a method of a submodule the eager
                    # forward called directly (JetMoE's ``self.experts.reduce(...)``: no
                    # __call__, so no module scope eagerly, where Dynamo's nn_module_stack
                    # names the submodule)
                    if e.scope not in (c.scope, c.hook_of) and (
                        c.scope in eager_scopes or not within(c.scope, e.scope)
                    ):
                        out.append(OpDivergence("scope", [e], [c], e.index))
                continue
            e_part, c_part = e_ops[i1:i2], c_ops[j1:j2]
            if first and any(_foldable(e) for e in e_part):
                folded.extend(e for e in e_part if _foldable(e))
                rest = [e for e in e_part if not _foldable(e)]  # both empty: no opcodes
                match(rest, c_part, e_part[0].index, c_base + j1, False)
                continue
            kind = "missing" if not c_part else "extra" if not e_part else "changed"
            div = OpDivergence(kind, e_part, c_part, e_part[0].index if e_part else e_base + i1)
            at = c_base + j1  # where the stretch lies in the whole compiled sequence
            _classify(div, roots, compiled[max(at - 1, 0) : at + 1])
            # outside every graph run: before the first compiled op, after the last, or
            # where one graph run (CompiledOp.run) ends and another begins
            between = at <= 0 or at >= len(compiled) or compiled[at - 1].run != compiled[at].run
            if kind == "missing" and div.category == "divergence" and between:
                div.category = "between"
            out.append(div)

    match(eager, compiled, 0, 0, True)
    out.sort(key=lambda d: d.eager_index)
    return out, folded
