"""Keyed sections (``inputs``, ``outputs``, ``backward``, ``grads``, ``meta``): entries
matched by name, values walked side by side with tensor entries under tolerance."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .message import Change
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
