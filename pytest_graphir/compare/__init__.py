"""Compare two snapshot documents: structure exactly, statistics within a tolerance.

Nodes are matched by name (a keyed compare: one inserted node is one change, not a
shift of every later index); DeepDiff gives the detail of what changed inside one
node. Statistics are compared with a tolerance scaled by the tensor's own range
(:class:`Tolerance`), so means near zero do not fail on relative tolerance alone.

Works on the plain documents of :mod:`pytest_graphir.serialize` (no torch). The
package is split by what each module owns:

* :mod:`.tolerance`: :class:`Tolerance`, the per-statistic test;
* :mod:`.nodes`: node alignment across renumbered ops and moved modules, one node's
  fields and outputs, folded subtrees, merged changes;
* :mod:`.params`: parameter fingerprints, and the ``weights differ`` line;
* :mod:`.sections`: keyed sections (``inputs``, ``outputs``, ``backward``, ``grads``,
  ``meta``), the ``compiled`` section and the collectives;
* :mod:`.hooks`: hook-order and ``autograd`` sequence diffs;
* :mod:`.origins`: each drifting node an origin or propagated, and from what;
* :mod:`.groups`: propagated drift grouped per module subtree;
* :mod:`.message`: the structured result, :class:`Change` and :class:`Comparison`,
  and its text rendering (the pytest failure, ``graphir diff``).
* :mod:`.keep`: what an update keeps of the stored statistics (those within the tolerance).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..ir import KEYED_SECTIONS
from ..names import GRANULARITY_KEYS as GRANULARITY
from ..names import fmt
from . import nodes, sections
from .hooks import hook_order_changes, multiset_changes
from .message import DEFAULT_MAX_LINES, KINDS, Change, Comparison
from .origins import trace_origins
from .params import compare_params
from .tolerance import DEFAULT_ATOL, DEFAULT_RTOL, PatternError, Tolerance

__all__ = [
    "DEFAULT_ATOL",
    "DEFAULT_MAX_LINES",
    "DEFAULT_RTOL",
    "KINDS",
    "Change",
    "Comparison",
    "PatternError",
    "Tolerance",
    "compare",
    "hook_order_changes",
    "pattern_names",
]


def _granularity(stored: dict[str, Any], received: dict[str, Any]) -> Change | None:
    old_g, new_g = ({k: d.get("meta", {}).get(k) for k in GRANULARITY} for d in (stored, received))
    if old_g == new_g:
        return None
    old, new = (
        ", ".join(f"{k}={fmt(v)}" for k, v in g.items() if v is not None) or "full graph"
        for g in (old_g, new_g)
    )
    note = (
        f"{old} -> {new}: the snapshot was taken at another granularity "
        "(trace's view/depth/blackbox); trace with the snapshot's options, or run "
        "`pytest --graphir-update` to re-take it"
    )
    return Change("changed", section="granularity", old=old, new=new, note=note)


def pattern_names(*docs: Mapping[str, Any]) -> list[str]:
    """The names tolerance and ignore patterns match in snapshot documents ``docs``:
    their node and parameter names, each once, in the order first seen."""
    return list(
        dict.fromkeys(n for doc in docs for s in nodes.PATTERN_SECTIONS for n in doc.get(s) or {})
    )


def compare(
    stored: dict[str, Any],
    received: dict[str, Any],
    tolerance: Tolerance | None = None,
    *,
    tolerances: Mapping[str, Mapping[str, float]] | None = None,
    ignore: Iterable[str] | str | None = None,
) -> Comparison:
    """Compare a stored snapshot document with a received one.

    Args:
        stored: the snapshot, as returned by :func:`pytest_graphir.serialize.loads`.
        received: the new trace, in the same form.
        tolerance: statistics tolerance; defaults to :class:`Tolerance()`.
        tolerances: per node-name pattern (:func:`fnmatch.fnmatchcase`), ``rtol``
            and/or ``atol``: ``{"lm_head/*": {"rtol": 1e-2}}``; tried before
            ``tolerance``'s own patterns, the first match wins.
        ignore: node-name patterns (``["*.dropout/*"]``) whose nodes are left out of
            the comparison on both sides. Both kinds of pattern also match the entry
            names of a ``params`` section (parameter names: ``fc2*`` covers
            ``fc2/linear#0`` and ``fc2.weight``).

    Returns:
        A :class:`Comparison`, falsy when the two match. Changes are ordered:
        meta, the parallel ``plan``, inputs, added and removed nodes (a module
        added with everything in it is one change), changed nodes, nodes run in
        another order (the firing order is compared: ``reordered``), outputs, then
        statistics drift. A snapshot at another granularity (``trace``'s
        view/depth/blackbox) gives one change.

    Raises:
        ValueError: ``tolerances`` or ``ignore`` is malformed, or a tolerance in them
            is not a number from 0 to 1 (see :meth:`Tolerance.build`).
        PatternError: a tolerance or ignore pattern matches no node or parameter name
            of either document, or the ignore patterns match every one
            (:meth:`Tolerance.check_patterns`).
    """
    tol = tolerance or Tolerance()
    if tolerances or ignore:
        tol = tol.merged(Tolerance.build(tol.rtol, tol.atol, tolerances, ignore))
    if (other := _granularity(stored, received)) is not None:
        # another granularity: every node would differ; say that instead
        return Comparison(tol, [other])
    names = pattern_names(stored, received)
    tol.check_patterns(names)  # none: nothing to check
    if ignored := [n for n in names if tol.ignores(n)]:
        stored, received = _without(stored, set(ignored)), _without(received, set(ignored))
    cmp = nodes.Comparer(tol)
    stored, moves = nodes.paired(stored, received, cmp)
    sections.compare_meta(cmp, stored.get("meta", {}), received.get("meta", {}))
    # a changed parallel plan explains the rest (collectives, shapes): said first
    sections.compare_keyed(cmp, "plan", stored.get("plan"), received.get("plan"))
    sequence = sections.collective_changes(stored, received)
    cmp.structural += sequence
    sections.compare_keyed(cmp, "inputs", stored.get("inputs", {}), received.get("inputs", {}))
    old_nodes, new_nodes = stored.get("nodes", {}), received.get("nodes", {})
    added = [n for n in new_nodes if n not in old_nodes]
    removed = [n for n in old_nodes if n not in new_nodes]
    cmp.structural += nodes.fold(added, new_nodes, "added")
    cmp.structural += nodes.fold(removed, old_nodes, "removed")
    for name, value in old_nodes.items():
        if name in new_nodes:
            cmp.node(name, value, new_nodes[name])
    cmp.structural += nodes.reordered(list(old_nodes), list(new_nodes))
    sections.compare_keyed(cmp, "outputs", stored.get("outputs", {}), received.get("outputs", {}))
    compare_params(cmp, stored, received)
    for section in KEYED_SECTIONS:
        sections.compare_keyed(cmp, section, stored.get(section), received.get(section))
    # collectives on both sides at another place (none when a side has no section)
    old_c, new_c = (list(d.get("collectives") or {}) for d in (stored, received))
    cmp.structural += nodes.reordered(old_c, new_c, "collectives")
    sections.compare_compiled_section(cmp, stored.get("compiled"), received.get("compiled"))
    for section, diff in (("hooks", hook_order_changes), ("autograd", multiset_changes)):
        if not sections.one_sided(cmp, section, stored.get(section), received.get(section)):
            cmp.structural += diff(stored[section], received[section])
    structural = nodes.fold_rewiring(nodes.merge_repeated(cmp.structural), set(added), set(removed))
    structural = nodes.fold_moves(nodes.reorders_first(structural), moves)
    structural = nodes.fold_blocks(structural, old_nodes, new_nodes)
    # the cause first: the plan, then the collectives it changed; stable otherwise
    structural.sort(key=lambda c: (c.section != "plan", not c.label.startswith("collectives")))
    changes = structural + cmp.drift
    if cmp.drift:
        trace_origins(changes, received, set(added))
    table = sections.communication_diff(stored, received) if sequence else []
    return Comparison(tol, changes, ignored=ignored, communication=table)


def _without(doc: dict[str, Any], gone: set[str]) -> dict[str, Any]:
    """``doc`` without the nodes (and ``params`` entries) named in ``gone``."""
    out = dict(doc)
    for section in nodes.PATTERN_SECTIONS:
        if isinstance(doc.get(section), dict):
            out[section] = {n: v for n, v in doc[section].items() if n not in gone}
    return out
