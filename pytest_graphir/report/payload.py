"""The data the HTML report draws: one JSON document built from two GraphIRs and a change list.

Floor 3 of the package: reads :mod:`pytest_graphir.ir` objects and the duck-typed
change objects of :mod:`pytest_graphir.compare` (see :class:`ChangeLike`); imports
neither torch nor the plugin.

The document (``build_payload``) is compact because a 10,000-node snapshot must open
quickly in a browser::

    {"title": ..., "model": ..., "tolerance_note": ..., "counts": {kind: n},
     "items": [[name, kind, target, parent, status, detail], ...],
     "edges": [[src, dst], ...],
     "keysets": [[key, ...], ...],
     "changes": [{"kind", "node", "item", "section", "scope", "field", "old", "new",
                  "tolerance", "note", "role", "cause"}, ...],
     "groups": [{"label", "cause", "changes": [row, ...], "nodes": n}, ...],
     "focus": item}

``items[0]`` is the root box (the model). ``kind`` is ``root``, ``module`` (a module
call: a box), ``group`` (a box for a module path that was never called itself, such
as an ``nn.ModuleList``, one per run of its members that nothing else interrupts, or
a run of consecutive children of a crowded box), ``op``,
``input`` or ``output``. ``parent`` is the index of the enclosing box (-1 for the
root), ``status`` is ``""``, ``added``, ``removed``, ``changed``, ``reordered`` or
``drift``, and ``detail`` is the node's snapshot line as plain data (arguments,
outputs, params; the ``op``/``module`` key left out, it is ``target``). In details,
a tensor entry whose keys are ``keysets[k]`` is packed as ``{"~": [k, value, ...]}``
(the page unpacks it), which halves the size of a large graph's data.
Edges run from the producer's item to the consumer's item, read from the ``$ref``
arguments of each node.

``groups`` is the propagated drift per module subtree and cause
(:func:`pytest_graphir.compare.groups.group_drift`), ``changes`` listing rows of
``changes``; ``focus`` is the item of the first structural change (else of the first
change with an item; -1 for none), where the page opens.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ..compare.groups import group_drift
from ..ir import GraphIR
from ..names import module_path, op_scope, parent_path, refs_in

Graph = GraphIR | Mapping[str, Any]
"""A traced :class:`GraphIR`, or a loaded snapshot document
(:func:`pytest_graphir.serialize.loads`)."""

KIND_ORDER = ("removed", "added", "changed", "reordered", "drift")
"""Status precedence when several changes touch one node (first wins)."""

CROWDED = 200
"""A box with more direct children than this gets them grouped into runs of
:data:`RUN` (``ops 1-100``), so expanding it never lays out thousands of nodes."""
RUN = 100


@runtime_checkable
class ChangeLike(Protocol):
    """What the report reads from one change (``pytest_graphir.compare.Change``).

    Attributes:
        kind: ``added``, ``removed``, ``changed`` or ``drift``.
        node: node name (``blocks.0/gelu#0``), section entry (input ``x``), or
            ``""``/``None`` for a change about a whole section.
        scope: module path the node runs in (``blocks.0``), ``""`` outside nodes.
        field: what changed inside the node (``op``, ``out[0].mean``), may be empty.
        old: the snapshot's value; new: this run's value.
        tolerance: the allowed absolute drift for ``drift`` changes, else ``None``.
        section: ``nodes``, ``meta``, ``inputs``, ``outputs`` or an optional section.

    Read-only properties, so any object with these attributes matches (a dataclass,
    a named tuple). Optional attributes read when present: ``nodes`` (every node a merged change is
    about), ``label`` (display name) and ``note`` (phrase shown instead of
    ``old -> new``).
    """

    @property
    def kind(self) -> str: ...
    @property
    def node(self) -> str | None: ...
    @property
    def scope(self) -> str: ...
    @property
    def field(self) -> str: ...
    @property
    def old(self) -> Any: ...
    @property
    def new(self) -> Any: ...
    @property
    def tolerance(self) -> Any: ...
    @property
    def section(self) -> str: ...


def jsonable(value: Any, entry: Callable[[dict[str, Any]], Any] | None = None) -> Any:
    """``value`` as JSON data: tuples become lists, non-finite floats and unknown
    objects become their ``repr`` string (the report shows them, never parses them);
    each tensor entry (a mapping with ``dtype``) becomes ``entry(it)`` where ``entry``
    is given."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        data = {str(k): jsonable(v, entry) for k, v in value.items()}
        return entry(data) if entry and "dtype" in data and "~" not in data else data
    if isinstance(value, (list, tuple)):
        return [jsonable(v, entry) for v in value]
    return repr(value)


def as_document(graph: Graph) -> Mapping[str, Any]:
    """``graph`` as a snapshot document: a :class:`GraphIR`'s ``to_data()``, a loaded
    one (``serialize.loads(text)``: ``{"meta", "inputs", "nodes", "outputs", ...}``)
    as it is.

    Raises:
        TypeError: ``graph`` is neither a GraphIR nor a snapshot document.
    """
    doc = graph.to_data() if isinstance(graph, GraphIR) else graph
    if not isinstance(doc, Mapping) or not isinstance(doc.get("nodes"), Mapping):
        raise TypeError(
            f"expected a GraphIR or a loaded .graphir document, got {type(graph).__name__}"
        )
    return doc


Merged = list[tuple[str, Mapping[str, Any], str]]
"""``(node name, snapshot entry, status)`` in drawing order (:func:`_merged_nodes`)."""


def _merged_nodes(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> Merged:
    """New nodes in firing order with the removed ones (only in ``old``) put after
    the node that preceded them in ``old``; status ``removed`` (only in ``old``),
    ``added`` (only in ``new``, ``old`` given) or ``""``."""
    nodes = new["nodes"]
    before = nodes if old is None else old["nodes"]  # no old: nothing removed or added
    after: dict[str, Merged] = {}
    anchor = ""
    for n, e in before.items():
        if n in nodes:
            anchor = n
        else:
            after.setdefault(anchor, []).append((n, e, "removed"))
    merged = list(after.get("", []))
    for n, e in nodes.items():
        merged.append((n, e, "" if n in before else "added"))
        merged.extend(after.get(n, []))
    return merged


class _Builder:
    def __init__(self) -> None:
        self.items: list[list[Any]] = []
        self.index: dict[str, int] = {}
        self.kids: dict[int, list[int]] = {}  # box -> its direct children, in order
        self.keysets: dict[tuple[str, ...], int] = {}

    def packed(self, entry: dict[str, Any]) -> dict[str, Any]:
        """A tensor entry as ``{"~": [keyset, value, ...]}``, its keyset collected in
        ``keysets``: the ``entry`` of :func:`jsonable` for an item's detail."""
        k = self.keysets.setdefault(tuple(entry), len(self.keysets))
        return {"~": [k, *entry.values()]}

    def add(
        self, key: str, name: str, kind: str, target: str, parent: int, detail: Any = None
    ) -> int:
        i = len(self.items)
        self.items.append([name, kind, target, parent, "", detail])
        if parent >= 0:
            self.kids.setdefault(parent, []).append(i)
        self.index[key] = i
        return i


def build_payload(
    new: Graph,
    old: Graph | None = None,
    changes: Sequence[Any] = (),
    *,
    title: str = "",
    tolerance_note: str = "",
) -> dict[str, Any]:
    """Build the report's data document (see the module docstring for its shape).

    Args:
        new: this run's graph (a GraphIR or a loaded snapshot document); its nodes
            are drawn.
        old: the snapshot's graph, or None; nodes only in ``old`` are drawn as removed.
        changes: :class:`ChangeLike` objects, in the order they are listed.
        title: heading of the page (default: ``<model> graph``).
        tolerance_note: free text shown under the heading (the tolerance in force).

    Returns:
        Plain JSON-serialisable data.

    Raises:
        TypeError: ``new`` or ``old`` is neither a GraphIR nor a snapshot document.
    """
    new = as_document(new)
    old = None if old is None else as_document(old)
    b = _Builder()
    model = str(new.get("meta", {}).get("model", "model"))
    merged = _place(b, new, old, model)
    edges = _link(b, new, merged)
    _group_crowded(b)
    rows = _mark(b, changes)
    by_id = {id(c): k for k, c in enumerate(changes)}
    groups = [
        {
            "label": g.label,
            "cause": g.cause,
            "changes": [by_id[id(c)] for c in g.changes],
            "nodes": len(g.nodes),
        }
        for g in group_drift(c for c in changes if hasattr(c, "role") and hasattr(c, "cause"))
    ]
    # the first structural change with an item, else the first change with one
    located = [r for r in rows if r["item"] >= 0]
    focus = min(located, key=lambda r: r["kind"] == "drift", default={"item": -1})["item"]
    return {
        "title": title or f"{model} graph",
        "model": model,
        "tolerance_note": tolerance_note,
        "counts": {**dict.fromkeys(KIND_ORDER, 0), **Counter(r["kind"] for r in rows)},
        "items": b.items,
        "edges": edges,
        "keysets": [list(k) for k in b.keysets],
        "changes": rows,
        "groups": groups,
        "focus": focus,
    }


def _place(
    b: _Builder, new: Mapping[str, Any], old: Mapping[str, Any] | None, model: str
) -> Merged:
    """Add the root, the inputs, every node (in the box of the module call it ran in)
    and the outputs to ``b``, nodes only in one graph marked ``removed`` or ``added``;
    return the merged nodes."""
    root = b.add("", model, "root", model, -1, {"meta": jsonable(new.get("meta", {}))})
    for name, value in new.get("inputs", {}).items():
        b.add("input:" + name, name, "input", "input", root, jsonable(value, b.packed))
    merged = _merged_nodes(new, old)
    last_call = {"": root}  # module path -> item of its most recent call

    def box_for_path(path: str) -> int:
        """The box of the latest call of module ``path`` (the root box for ``""``), or
        a group box for it: a group box holds one run of its members, so a module or
        op that runs between two members (a norm inserted after block 5 of 12) is
        drawn between two boxes of the group, where it runs."""
        box = last_call.get(path)
        if box is not None and b.items[box][1] != "group":
            return box  # a module call
        parent = box_for_path(parent_path(path))
        if box is not None and b.kids.get(parent, [None])[-1] == box:
            return box  # nothing ran beside the group since its last member
        i = b.add("group:" + path, path, "group", "", parent)
        last_call[path] = i
        return i

    for name, entry, status in merged:
        kind = "op" if "op" in entry else "module"
        if kind == "module":
            parent = box_for_path(parent_path(module_path(name)))
        else:
            scope = op_scope(name)
            parent = b.index[scope] if scope in b.index else box_for_path(module_path(scope))
        # the node's snapshot line as packed plain data, without its op/module key
        detail = jsonable({k: v for k, v in entry.items() if k != kind}, b.packed)
        i = b.add(name, name, kind, str(entry.get(kind, "")), parent, detail)
        b.items[i][4] = status
        if kind == "module":
            last_call[module_path(name)] = i
    for path, value in new.get("outputs", {}).items():
        b.add("output:" + path, path, "output", "output", root, jsonable(value, b.packed))
    return merged


def _link(b: _Builder, new: Mapping[str, Any], merged: Merged) -> list[list[int]]:
    """Edges ``[producer, consumer]`` from the ``$ref`` arguments, without repeats."""
    edges: dict[tuple[int, int], None] = {}  # in order, without repeats
    sources = [(refs_in([e.get("args"), e.get("kwargs")]), b.index[n]) for n, e, _ in merged]
    # an output entry: its "ref" (tensors) or the value itself (constants)
    sources += [(refs_in(v), b.index["output:" + p]) for p, v in new.get("outputs", {}).items()]
    for refs, dst in sources:
        if b.items[dst][1] == "module" and dst in b.kids:
            continue  # a box: its interior ops carry the edges
        for r in refs:
            src = b.index.get(r, b.index.get("input:" + r))
            if src is not None and src != dst:
                edges[src, dst] = None
    return [[src, dst] for src, dst in edges]


def _mark(b: _Builder, changes: Sequence[Any]) -> list[dict[str, Any]]:
    """Set the status of each item a change is about (over the ``removed`` / ``added``
    of :func:`_place`, :data:`KIND_ORDER` deciding ties); return the change rows."""
    rows: list[dict[str, Any]] = []
    for c in changes:
        kind = str(getattr(c, "kind", "changed"))
        section = str(getattr(c, "section", "nodes") or "nodes")
        node = getattr(c, "node", None) or ""
        scope = str(getattr(c, "scope", "") or "")
        prefix = {"inputs": "input:", "outputs": "output:", "nodes": ""}.get(section)
        about = [node, *(getattr(c, "nodes", None) or [])] if prefix is not None else []
        found = [b.index[f"{prefix}{t}"] for t in about if t and f"{prefix}{t}" in b.index]
        for j in found:
            cur = b.items[j][4]  # "" or a status of KIND_ORDER
            if kind in KIND_ORDER and (not cur or KIND_ORDER.index(kind) < KIND_ORDER.index(cur)):
                b.items[j][4] = kind
        item = found[0] if found else -1
        if item < 0 and scope:
            item = b.index.get(scope, b.index.get("group:" + scope, -1))
        label = str(getattr(c, "label", "") or node)
        row = {"kind": kind, "node": label, "item": item, "section": section, "scope": scope}
        row.update((k, jsonable(getattr(c, k, None))) for k in ("old", "new", "tolerance"))
        row.update((k, str(getattr(c, k, "") or "")) for k in ("field", "note", "role", "cause"))
        rows.append(row)
    return rows


def _group_crowded(b: _Builder) -> None:
    """Give every box with more than :data:`CROWDED` direct children runs of
    :data:`RUN` children as group boxes (firing order kept), recursively."""
    todo = [p for p, ks in b.kids.items() if len(ks) > CROWDED]
    while todo:
        parent = todo.pop()
        ks = b.kids.pop(parent)  # b.add gives it its group boxes anew
        for start in range(0, len(ks), RUN):
            run = ks[start : start + RUN]
            label = f"{b.items[parent][0]} [{start + 1}-{start + len(run)}]"
            g = b.add(f"run:{len(b.items)}", label, "group", "", parent)
            for k in run:
                b.items[k][3] = g
            b.kids[g] = run
        if len(b.kids[parent]) > CROWDED:
            todo.append(parent)
