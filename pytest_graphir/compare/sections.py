"""Keyed sections (``inputs``, ``outputs``, ``backward``, ``grads``, ``meta``): entries
matched by name, values walked side by side with tensor entries under tolerance."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .changes import Change
from .nodes import Comparer, Place


def compare_meta(cmp: Comparer, old: dict[str, Any], new: dict[str, Any]) -> None:
    """One ``changed`` per ``meta`` key whose value differs (``meta.training``)."""
    for key in list(old) + [k for k in new if k not in old]:
        if old.get(key) != new.get(key):
            cmp.structural.append(
                Change("changed", node=key, section="meta", old=old.get(key), new=new.get(key))
            )


def compare_keyed(
    cmp: Comparer,
    section: str,
    old: Any,
    new: Any,
    compare_value: Callable[[Place, str, Any, Any], None],
) -> None:
    """Compare a section keyed by name (``inputs``, ``outputs``, ``backward``,
    ``grads``): added, then removed, then ``compare_value((section, name), "", old,
    new)`` for every entry that differs. A section present on one side only is one
    ``added``/``removed`` change about the section."""
    if old is None and new is None:
        return
    if old is None or new is None:
        cmp.structural.append(Change("added" if old is None else "removed", section=section))
        return
    cmp.structural.extend(
        Change("added", node=n, section=section, new=new[n]) for n in new if n not in old
    )
    cmp.structural.extend(
        Change("removed", node=n, section=section, old=old[n]) for n in old if n not in new
    )
    for name, value in old.items():
        if name in new and value != new[name]:
            compare_value((section, name), "", value, new[name])


def compare_value(cmp: Comparer, where: Place, label: str, old: Any, new: Any) -> None:
    """Walk two values side by side, comparing tensor entries with tolerance;
    ``label`` is the path inside the entry so far (``layer.weight``, ``[1]``)."""
    if isinstance(old, dict) and isinstance(new, dict) and "dtype" not in old:
        for key in list(old) + [k for k in new if k not in old]:
            sub = f"{label}.{key}" if label else str(key)
            compare_value(cmp, where, sub, old.get(key), new.get(key))
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            compare_value(cmp, where, f"{label}[{i}]", a, b)
    elif old != new:
        cmp.entry(where, label, old, new)
