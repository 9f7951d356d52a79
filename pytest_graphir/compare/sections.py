"""The sections other than ``nodes`` and the hook and ``autograd`` sequences: keyed
sections (``inputs``, ``outputs``, ``backward``, ``grads``, ``meta``), entries matched
by name, values walked side by side with tensor entries under tolerance; the
``compiled`` section (``trace`` of a ``torch.compile``\\d model: graph breaks matched
by reason and place, the graph count, then the other fields); and the collectives,
as a sequence and as a per-module communication table."""

from __future__ import annotations

from itertools import zip_longest
from typing import Any

from ..names import (
    GRAPH_BREAK_PLACE,
    GRAPH_BREAKS,
    GRAPH_LISTS,
    aligned,
    first_names,
    fmt,
    module_path,
    op_scope,
    refs_in,
)
from .groups import by_key
from .hooks import differing
from .message import Change, ChangeKind, human_bytes
from .nodes import Comparer, only_in, sided


def compare_meta(cmp: Comparer, old: dict[str, Any], new: dict[str, Any]) -> None:
    """One ``changed`` per ``meta`` key whose value differs (``meta.training``)."""
    for key in {**old, **new}:
        if old.get(key) != new.get(key):
            cmp.changed(("meta", key), old=old.get(key), new=new.get(key))


def one_sided(cmp: Comparer, section: str, old: Any, new: Any) -> bool:
    """True when ``section`` is missing on either side, so there is nothing to compare
    entry by entry; a section present on one side only is one ``added``/``removed``
    change about the section."""
    if old is not None and new is not None:
        return False
    if old is not new:
        cmp.structural.append(Change("added" if old is None else "removed", section=section))
    return True


def compare_keyed(cmp: Comparer, section: str, old: Any, new: Any) -> None:
    """Compare a section keyed by name (``plan``, ``inputs``, ``outputs``,
    ``backward``, ``grads``): added, then removed, then every entry that differs,
    walked by :meth:`.nodes.Comparer.value` (an ``inputs`` or ``outputs`` entry is a
    tensor entry or a constant leaf, compared as one value; see :func:`one_sided`)."""
    if one_sided(cmp, section, old, new):
        return
    cmp.structural += only_in(section, old, new)
    for name, value in old.items():
        if name in new and value != new[name]:
            cmp.value((section, name), "", value, new[name])


def _breaks(section: dict[str, Any]) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """Graph breaks keyed by their sentence, ``graph break in <scope> (<location>):
    <reason>`` (an entry that is no mapping: its text); value: (scope, the rest of
    each entry)."""
    out: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for entry in section.get(GRAPH_BREAKS, []):
        entry_ = entry if isinstance(entry, dict) else {}
        scope = str(entry_.get("scope") or "")
        location = f" ({entry_['location']})" if entry_.get("location") else ""
        place = scope or "the model's forward"
        text = f"graph break in {place}{location}: {entry_.get('reason')}"
        text = text if isinstance(entry, dict) else str(entry)
        extra = {k: v for k, v in entry_.items() if k not in GRAPH_BREAK_PLACE}
        out.setdefault(text, (scope, []))[1].append(extra)
    return out


def _extra(extras: list[dict[str, Any]]) -> str:
    """A break's other fields (:func:`_breaks`): one entry as a mapping (``{count: 2}``),
    else a list."""
    if len(extras) != 1:
        return fmt(extras)
    return "{" + ", ".join(f"{k}: {fmt(v)}" for k, v in extras[0].items()) + "}"


def compare_compiled_section(cmp: Comparer, old: Any, new: Any) -> None:
    """Compare the ``compiled`` sections of two snapshots: graph breaks by reason and
    place, graph count, then the rest (per-graph op counts, op alignment, hooks and
    numerics flags). Comparing a compiled model with eager is another thing:
    :func:`pytest_graphir.compiled.compare_compiled`."""
    if one_sided(cmp, "compiled", old, new):
        return
    old_breaks, new_breaks = _breaks(old), _breaks(new)

    def change(kind: ChangeKind, text: str, scope: str, **fields: Any) -> Change:
        fields.update(node=scope, scope=scope, field=GRAPH_BREAKS, label=text)
        return Change(kind, section="compiled", **fields)

    for c in only_in("compiled", old_breaks, new_breaks):  # their value: (scope, extras)
        scope = (c.new or c.old)[0]
        cmp.structural.append(change(c.kind, c.node, scope, **sided(c.kind, c.node)))
    for b, (scope, extra) in old_breaks.items():  # same break, other count or scopes
        if b in new_breaks and (other := new_breaks[b][1]) != extra:
            note = f"{_extra(extra)} -> {_extra(other)}"
            cmp.structural.append(change("changed", b, scope, old=extra, new=other, note=note))
    for key in {**old, **new}:
        a, b_ = old.get(key), new.get(key)
        if key == GRAPH_BREAKS or a == b_:
            continue
        lists = isinstance(a, list) and isinstance(b_, list)
        if key in GRAPH_LISTS and not (lists and len(a) == len(b_)):
            n_a, n_b = (len(v) if isinstance(v, list) else 0 for v in (a, b_))
            cmp.changed(("compiled", key), old=n_a, new=n_b, note=f"{n_a} -> {n_b} graphs")
        else:
            cmp.value(("compiled", key), "", a, b_)


def collectives(doc: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Every collective of a snapshot document in firing order, with what issued it
    (:func:`_issuer`): the forward's op nodes (those whose keyword arguments hold a
    ``group_size``), as ``{"op": ..., "phase": "forward", **kwargs, "module": ...}``
    (the node's scope, ``""`` at the root), then the entries of the
    ``collectives`` section (the backward's and a recompute's), each with a ``phase``
    (taken from its key, ``backward/...``, where the entry has none) and issued by
    ``collectives.<key>``."""
    found = [
        (
            {"op": node.get("op"), "phase": "forward", **node["kwargs"], "module": op_scope(name)},
            _issuer(name, node),
        )
        for name, node in (doc.get("nodes") or {}).items()
        if isinstance(node.get("kwargs"), dict) and "group_size" in node["kwargs"]
    ]
    # nodes and the section are mappings: the loader refuses others, the tracer writes none
    for key, entry in (doc.get("collectives") or {}).items():
        if isinstance(entry, dict):
            found.append(({"phase": str(key).partition("/")[0], **entry}, f"collectives.{key}"))
    return found


CommunicationRow = tuple[str, str, str, str, int, int]
"""``(module, phase, op, group, calls, bytes)``: one row of :func:`communication`."""


def communication(doc: dict[str, Any]) -> list[CommunicationRow]:
    """The communication table of a snapshot document.

    Args:
        doc: the snapshot, as :func:`pytest_graphir.serialize.loads` returns it.

    Returns:
        One row ``(module, phase, op, group, calls, bytes)`` per module path that
        issued collectives (an op node's module path, a ``collectives`` entry's
        ``module``, ``(root)`` where there is none), phase, op and group (a
        point-to-point op's group followed by its peer, ``[0,1] peer <rank+1>``),
        in the order each first fires (:func:`collectives`); ``bytes`` is the sum of
        the calls' ``bytes`` (0 where an entry has none). Empty when the document
        has no collective.
    """

    def row(e: dict[str, Any]) -> tuple[str, str, str, str]:
        group = fmt(e.get("group")) + (f" peer {fmt(e['peer'])}" if "peer" in e else "")
        module = module_path(str(e.get("module") or "")) or "(root)"
        return module, str(e.get("phase")), str(e.get("op")), group

    rows = by_key((row(e), e.get("bytes")) for e, _ in collectives(doc))
    return [(*k, len(bs), sum(b for b in bs if isinstance(b, int))) for k, bs in rows.items()]


def communication_table(rows: list[CommunicationRow]) -> list[list[str]]:
    """``rows`` of :func:`communication` as the text of their cells, the bytes in
    binary units (:func:`.message.human_bytes`), headed by the column names."""
    head = [["module", "phase", "op", "group", "calls", "bytes"]]
    return head + [[*row[:4], str(row[4]), human_bytes(row[5])] for row in rows]


def communication_diff(old: dict[str, Any], new: dict[str, Any], limit: int = 10) -> list[str]:
    """The rows of two documents' communication tables (:func:`communication`) that
    differ, in the snapshot's order: a header, then in each run of differing rows
    the snapshot's first row (``- fc2  forward  all_reduce  tp  1  64 B``) and this
    run's (``+ fc2  forward  all_gather  tp  2  192 B``), then the second of each,
    and so on; columns aligned, at most ``limit`` rows, then ``(N more)``. Empty when
    the tables are the same."""
    before, after = communication(old), communication(new)
    rows = [
        (sign, row)
        for i1, i2, j1, j2 in differing(before, after)
        for pair in zip_longest(before[i1:i2], after[j1:j2])
        for sign, row in zip("-+", pair, strict=True)
        if row is not None
    ]
    if not rows:
        return []
    shown = rows[:limit]
    lines = aligned(communication_table([row for _, row in shown]), right=frozenset({4, 5}))
    signs = [" ", *(sign for sign, _ in shown)]
    more = [f"({len(rows) - limit} more)"] if len(rows) > limit else []
    return [f"{sign} {line}" for sign, line in zip(signs, lines, strict=True)] + more


def _issuer(name: str, node: dict[str, Any]) -> str:
    """The op node ``name`` that issued a collective and where it ran: its module
    path (``fc1/all_gather#0, in fc1``), or at the root, the tensor it was given
    where that is a node or input (``all_reduce#0, at the root, on fc2/linear#0``:
    a parallel style's hook runs outside the module)."""
    if scope := op_scope(name):
        return f"{name}, in {module_path(scope)}"
    given = refs_in(node.get("args"))
    return f"{name}, at the root" + (f", on {given[0]}" if given else "")


def _ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``22nd``."""
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _where(i1: int, i2: int, stored: int) -> str:
    """Where a run of changed collectives is in the snapshot's sequence of
    ``stored``: ``from the 2nd of 5`` (its collectives ``i1:i2`` replaced or
    removed), ``after the 2nd of 5`` / ``before the 1st of 5`` (inserted at ``i1``),
    ``none in the snapshot``."""
    if not stored:
        return "none in the snapshot"
    if i1 < i2:
        return f"from the {_ordinal(i1 + 1)} of {stored}"
    return f"after the {_ordinal(i1)} of {stored}" if i1 else f"before the 1st of {stored}"


def collective_changes(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """One ``collectives`` line when the two documents' collective sequences differ:
    the first differing run, ``all_reduce(tp, 64 B) -> all_gather(tp, 64 B),
    all_gather(tp, 64 B)`` (a longer run: its first four and how many more),
    labelled with its place in the snapshot's sequence (:func:`_where`) and the op
    node or entry that issued its first collective (the snapshot's, or this run's for
    an insertion: :func:`_issuer`), and followed by how many other runs differ."""
    before, after = collectives(old), collectives(new)
    a, b = (
        [f"{e.get('op')}({fmt(e.get('group'))}, {e.get('bytes')} B)" for e, _ in side]
        for side in (before, after)
    )
    if not (runs := differing(a, b)):
        return []
    i1, i2, j1, j2 = runs[0]
    more = f" (and {len(runs) - 1} more runs)" if len(runs) > 1 else ""
    was, now = (first_names(run) or "none" for run in (a[i1:i2], b[j1:j2]))
    issuer = before[i1][1] if i1 < i2 else after[j1][1]
    label = f"collectives {_where(i1, i2, len(before))} ({issuer})"
    return [Change("changed", section="collectives", label=label, old=was, new=now + more)]
