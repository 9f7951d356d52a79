"""The ``compiled`` section (``trace`` of a ``torch.compile``\\d model): graph breaks
matched by reason and place, the graph count, then the other fields."""

from __future__ import annotations

from typing import Any

from ..names import GRAPH_BREAK_PLACE, GRAPH_BREAKS, GRAPH_LISTS
from . import message
from .changes import Change, ChangeKind
from .nodes import Comparer
from .sections import compare_value


def _breaks(section: dict[str, Any]) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """Graph breaks keyed by their sentence; value: (scope, the rest of each entry)."""
    out: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for entry in section.get(GRAPH_BREAKS, []):
        key = message.graph_break(entry)
        if isinstance(entry, dict):
            extra = {k: v for k, v in entry.items() if k not in GRAPH_BREAK_PLACE}
            scope = str(entry.get("scope") or "")
        else:
            extra, scope = {}, ""
        out.setdefault(key, (scope, []))[1].append(extra)
    return out


def compare_compiled_section(cmp: Comparer, old: Any, new: Any) -> None:
    """Compare the ``compiled`` sections of two snapshots: graph breaks by reason and
    place, graph count, then the rest (per-graph op counts, op alignment, hooks and
    numerics flags). Comparing a compiled model with eager is another thing:
    :func:`pytest_graphir.compiled.compare_compiled`."""
    if old is None and new is None:
        return
    if old is None or new is None:
        cmp.structural.append(Change("added" if old is None else "removed", section="compiled"))
        return
    old_breaks, new_breaks = _breaks(old), _breaks(new)

    def graph_break(kind: ChangeKind, text: str, scope: str, **fields: Any) -> Change:
        return Change(
            kind,
            node=scope,
            section="compiled",
            scope=scope,
            field=GRAPH_BREAKS,
            label=text,
            **fields,
        )

    cmp.structural.extend(
        graph_break("added", b, scope, new=b)
        for b, (scope, _) in new_breaks.items()
        if b not in old_breaks
    )
    cmp.structural.extend(
        graph_break("removed", b, scope, old=b)
        for b, (scope, _) in old_breaks.items()
        if b not in new_breaks
    )
    for b, (scope, extra) in old_breaks.items():  # same break, other count or scopes
        if b in new_breaks and new_breaks[b][1] != extra:
            other = new_breaks[b][1]
            cmp.structural.append(
                graph_break(
                    "changed",
                    b,
                    scope,
                    old=extra,
                    new=other,
                    note=f"{message.fmt_any(extra)} -> {message.fmt_any(other)}",
                )
            )
    for key in list(old) + [k for k in new if k not in old]:
        a, b_ = old.get(key), new.get(key)
        if key == GRAPH_BREAKS or a == b_:
            continue
        if key in GRAPH_LISTS and (
            not isinstance(a, list) or not isinstance(b_, list) or len(a) != len(b_)
        ):
            n_a = len(a) if isinstance(a, list) else 0
            n_b = len(b_) if isinstance(b_, list) else 0
            cmp.structural.append(
                Change(
                    "changed",
                    node=key,
                    section="compiled",
                    old=n_a,
                    new=n_b,
                    note=f"{n_a} -> {n_b} graphs",
                )
            )
            continue
        compare_value(cmp, ("compiled", key), "", a, b_)
