"""Drift traced to its origin through the received graph's dataflow, and grouped.

A drifting node is an *origin* when nothing it reads, directly or further upstream,
drifts or changed: its inputs, arguments and parameters match within tolerance and
its output does not, so the change is here. Otherwise its drift is *propagated*: it
follows from an origin, an added or changed node, a changed model input or (where
the snapshot records them) a changed parameter, its *cause*. Upstream is followed
transitively: statistics summarise a tensor, so a node whose direct inputs keep their
statistics can still read other values.

:func:`trace_origins` sets :attr:`~.message.Change.role` and
:attr:`~.message.Change.cause` on the drift changes; :func:`.groups.group_drift`
gathers the propagated ones per module subtree (``model.layers.3-5``) for the failure
message, ``graphir diff`` and the HTML report (see :mod:`.groups`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..names import module_path, op_scope, refs_in
from .groups import by_key
from .message import Change


def _added_cause(name: str, added: Collection[str]) -> str:
    """The outermost added module call holding ``name`` (the module a reader knows
    was added), else ``name`` itself."""
    scope = op_scope(name) if "/" in name else name
    parts = module_path(scope).split(".")
    outer_first = [".".join(parts[:k]) for k in range(1, len(parts) + 1)]
    return next((label for label in [*outer_first, scope] if label in added), name)


def trace_origins(changes: list[Change], received: dict[str, Any], added: Collection[str]) -> None:
    """Classify each drift change about a node as ``origin`` or ``propagated``.

    Walks ``received``'s nodes in firing order, carrying for each node the first
    cause upstream of it (in firing order of the causes). Sources of a cause: added
    nodes (the outermost added module for the nodes inside it), nodes with a
    structural change, the readers of a removed block (its change's ``nodes``),
    model inputs that changed or drift, changed ``params`` entries, and the origins
    found on the way.

    Args:
        changes: the comparison's changes, drift ones about the ``nodes`` section
            updated in place (``role``, ``cause``); others are read only.
        received: the received document, node names as the changes use them.
        added: names of the nodes only in ``received``.

    Returns:
        None; an origin's ``cause`` is its own node name.
    """
    nodes = received.get("nodes", {})
    source: dict[str, str] = {}  # read name -> cause
    drifting = by_key((c.node, c) for c in changes if c.kind == "drift" and c.section == "nodes")
    for c in changes:
        named = [c.node, *c.nodes] if c.node else c.nodes
        if c.section == "inputs" and c.node:
            source.setdefault(c.node, f"inputs.{c.node}")
        elif c.section == "params":  # one merged "weights differ" change, or one per entry
            source.update({n: f"params.{n}" for n in named if n not in source})
        elif c.section == "nodes" and c.kind not in ("removed", "drift"):
            source.update({n: _added_cause(n, added) for n in named if n not in source})
        # a removed block: what read it now reads something else
        elif c.section == "nodes" and c.kind == "removed":
            source.update({n: c.node for n in c.nodes if n in nodes and n not in source})
    for name in added:
        source.setdefault(name, _added_cause(name, added))
    # cause -> position where it first arises: inputs and parameters come first
    outside = dict.fromkeys(v for v in source.values() if v not in nodes)
    order = {u: k - len(source) for k, u in enumerate(outside)}
    taint: dict[str, str] = {}
    for position, (name, node) in enumerate(nodes.items()):
        reads = refs_in([node.get("args"), node.get("kwargs")])
        found = [u for r in reads if (u := taint.get(r) or source.get(r))]
        if own := source.get(name):  # a cause is never empty
            order.setdefault(own, position)
            found.append(own)
        cause = min(found, key=lambda u: order.get(u, position)) if found else None
        if mine := drifting.get(name):
            role = "propagated" if cause else "origin"
            if cause is None:
                cause = name
                order.setdefault(name, position)
            for c in mine:
                c.role, c.cause = role, cause
        if cause:
            taint[name] = cause
