"""Keyed sections (``inputs``, ``outputs``, ``backward``, ``grads``, ``meta``): entries
matched by name, values walked side by side with tensor entries under tolerance."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from difflib import SequenceMatcher
from typing import Any

from .message import Change, fmt
from .nodes import Comparer, Place, only_in, reordered, sided


def compare_meta(cmp: Comparer, old: dict[str, Any], new: dict[str, Any]) -> None:
    """One ``changed`` per ``meta`` key whose value differs (``meta.training``)."""
    for key in {**old, **new}:
        if old.get(key) != new.get(key):
            cmp.structural.append(
                Change("changed", node=key, section="meta", old=old.get(key), new=new.get(key))
            )


def one_sided(cmp: Comparer, section: str, old: Any, new: Any) -> bool:
    """True when ``section`` is missing on either side, so there is nothing to compare
    entry by entry; a section present on one side only is one ``added``/``removed``
    change about the section."""
    if old is not None and new is not None:
        return False
    if old is not new:
        cmp.structural.append(Change("added" if old is None else "removed", section=section))
    return True


def compare_keyed(
    cmp: Comparer,
    section: str,
    old: Any,
    new: Any,
    compare_value: Callable[[Place, str, Any, Any], None],
) -> None:
    """Compare a section keyed by name (``inputs``, ``outputs``, ``backward``,
    ``grads``): added, then removed, then ``compare_value((section, name), "", old,
    new)`` for every entry that differs (see :func:`one_sided`)."""
    if one_sided(cmp, section, old, new):
        return
    cmp.structural += [
        Change(kind, node=n, section=section, **sided(kind, v)) for kind, n, v in only_in(old, new)
    ]
    for name, value in old.items():
        if name in new and value != new[name]:
            compare_value((section, name), "", value, new[name])


def reordered_entries(section: str, old: Any, new: Any) -> list[Change]:
    """The entries of a keyed section in firing order (``collectives``) that are on
    both sides at another place: one ``reordered`` change per run, as
    :func:`.nodes.reordered` gives for nodes; none when a side has no section."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return []
    return [dataclasses.replace(c, section=section, scope="") for c in reordered([*old], [*new])]


def _collectives(doc: dict[str, Any]) -> list[str]:
    """Each collective of a snapshot document in firing order, the forward's op nodes
    (those with a ``group_size``) then the ``collectives`` section:
    ``all_reduce(tp, 64 B)``."""
    entries = [
        {"op": node.get("op"), **node["kwargs"]}
        for node in (doc.get("nodes") or {}).values()
        if isinstance(node, dict) and "group_size" in (node.get("kwargs") or {})
    ]
    entries += [e for e in (doc.get("collectives") or {}).values() if isinstance(e, dict)]
    return [f"{e.get('op')}({fmt(e.get('group'))}, {e.get('bytes')} B)" for e in entries]


def collective_changes(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """One ``collectives`` line when the two documents' collective sequences differ:
    the first differing run, ``all_reduce(tp, 64 B) -> all_gather(tp, 64 B),
    all_gather(tp, 64 B)``, with its position and how many other runs differ."""
    before, after = _collectives(old), _collectives(new)
    runs = [op for op in SequenceMatcher(None, before, after).get_opcodes() if op[0] != "equal"]
    if not runs:
        return []
    _, i1, i2, j1, j2 = runs[0]
    more = f" (and {len(runs) - 1} more runs)" if len(runs) > 1 else ""
    was, now = (", ".join(run) or "none" for run in (before[i1:i2], after[j1:j2]))
    label = f"collectives #{i1}" if i1 else "collectives"
    return [Change("changed", section="collectives", label=label, old=was, new=now + more)]
