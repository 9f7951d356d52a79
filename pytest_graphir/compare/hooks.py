"""Hook-order diff: two sequences of hook events (``<module> <kind> [<hook name>]``,
as recorded by ``trace(hooks=True)``) phrased as moved, appeared and vanished hooks;
and the ``autograd`` node sequence summarised by per-type counts. :func:`unmatched`
aligns any two event sequences (``compare_compiled``'s hook check uses it too)."""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any, TypeVar

from ..names import parse_hook_event, plural
from .message import Change, ChangeKind

E = TypeVar("E", bound=Hashable)


def differing(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[tuple[int, int, int, int]]:
    """The runs where two sequences differ, as ``difflib.SequenceMatcher`` (no autojunk)
    aligns them: ``(i1, i2, j1, j2)``, ``a[i1:i2]`` replaced by ``b[j1:j2]`` (one of
    them empty for an insertion or a deletion), in order; ``[]`` when they are equal.
    The one sequence diff of the comparison: hooks, node order, collectives."""
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def unmatched(old: Sequence[E], new: Sequence[E]) -> tuple[list[E], list[E]]:
    """The events of ``old`` and of ``new`` that :func:`differing` left unmatched, each
    in order. An event in both lists fired on both sides at another place: it moved."""
    spans = differing(old, new)
    gone = [e for i1, i2, _, _ in spans for e in old[i1:i2]]
    return gone, [e for _, _, j1, j2 in spans for e in new[j1:j2]]


def hook_order_changes(old: list[str], new: list[str]) -> list[Change]:
    """Phrase the difference between two hook event sequences.

    Events that only changed place are ``moved`` and said relative to a neighbour
    whose order with them flipped (``blocks.1.attn forward_hook 'Observer.__call__'
    fired before 'scale_hook' (was after)``); a hook now firing on another module is
    ``moved`` from one module to the other; the rest ``appeared`` or ``vanished``.

    Args:
        old: the snapshot's ``hooks`` section (event strings, in firing order).
        new: this run's.

    Returns:
        Changes with ``section="hooks"``, ``node`` the module the hook fires on.
    """
    gone, came = unmatched(old, new)
    moved = Counter(gone) & Counter(came)
    changes = [_moved_within(e, old, new) for e in dict.fromkeys(e for e in came if moved[e])]
    # what is left once the moved copies are taken out (events repeat for reused modules)
    gone = list((Counter(gone) - moved).elements())
    came = list((Counter(came) - moved).elements())
    # the same hook on another module: moved between modules
    by_hook = {(p.kind, p.hook): e for e in gone if (p := parse_hook_event(e)).hook}
    for event in list(came):
        module, kind, name = parse_hook_event(event)
        if (twin := by_hook.get((kind, name), "")) in gone:  # "" is no event: in no list
            gone.remove(twin)
            came.remove(event)
            origin = parse_hook_event(twin)[0]
            note = f"{kind} '{name}' moved here from {origin}"
            changes.append(_hook("changed", module, field=kind, old=origin, new=module, note=note))

    def appeared_or_vanished(kind: ChangeKind, e: str, **fields: Any) -> Change:
        return _hook(kind, parse_hook_event(e).module, label=f"hooks: {e}", **fields)

    changes += [appeared_or_vanished("added", e, note="(appeared)", new=e) for e in came]
    changes += [appeared_or_vanished("removed", e, note="(vanished)", old=e) for e in gone]
    return changes


def _moved_within(event: str, old: list[str], new: list[str]) -> Change:
    """Say where a moved event now fires, relative to the nearest event that used to
    fire on the other side of it."""
    module, kind, name = parse_hook_event(event)
    i_old, i_new = old.index(event), new.index(event)
    before_old, after_old = set(old[:i_old]), set(old[i_old + 1 :])
    # the first event it now fires before that used to fire before it, else the
    # nearest one it now fires after that used to fire after it
    now_before = (("before", "after", e) for e in new[i_new + 1 :] if e in before_old)
    now_after = (("after", "before", e) for e in reversed(new[:i_new]) if e in after_old)
    relation, was, other = next(now_before, None) or next(now_after, ("after", "before", "?"))
    label = f"{module} {kind}" + (f" '{name}'" if name else "")
    o_module, _, o_name = parse_hook_event(other)
    other_txt = f"'{o_name}'" if o_name and o_module == module else other
    note = f"fired {relation} {other_txt} (was {was})"
    return _hook("changed", module, field="position", old=i_old, new=i_new, label=label, note=note)


def _hook(kind: ChangeKind, module: str, **fields: Any) -> Change:
    """A change of the ``hooks`` section about the hooks of ``module`` (labelled
    ``module`` unless ``fields`` say otherwise)."""
    return Change(kind, node=module, section="hooks", scope=module, **{"label": module, **fields})


def multiset_changes(old: list[str], new: list[str]) -> list[Change]:
    """Summarise a changed ``autograd`` sequence: per-type count changes, else the
    first position where the order differs."""
    if old == new:
        return []
    a, b = Counter(old), Counter(new)
    found: list[tuple[str, Any, Any, str, str]] = [  # (field, old, new, label, note)
        (n, a[n], b[n], f"autograd {n}", f"{a[n]} -> {plural(b[n], 'node')}")
        for n in sorted(set(a) | set(b))
        if a[n] != b[n]
    ]
    if not found:
        i = next(i for i, (x, y) in enumerate(zip(old, new, strict=False)) if x != y)
        found = [(f"[{i}]", old[i], new[i], f"autograd[{i}]", f"{old[i]} -> {new[i]} (order)")]
    return [
        Change("changed", section="autograd", field=f, old=x, new=y, label=label, note=note)
        for f, x, y, label, note in found
    ]
