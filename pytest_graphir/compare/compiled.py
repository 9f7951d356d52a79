"""The ``compiled`` section (``trace`` of a ``torch.compile``\\d model): graph breaks
matched by reason and place, the graph count, then the other fields."""

from __future__ import annotations

from typing import Any

from ..names import GRAPH_BREAK_PLACE, GRAPH_BREAKS, GRAPH_LISTS
from . import message
from .message import Change, ChangeKind
from .nodes import Comparer, only_in, sided
from .sections import one_sided


def _breaks(section: dict[str, Any]) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """Graph breaks keyed by their sentence; value: (scope, the rest of each entry)."""
    out: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for entry in section.get(GRAPH_BREAKS, []):
        entry_ = entry if isinstance(entry, dict) else {}
        scope = str(entry_.get("scope") or "")
        extra = {k: v for k, v in entry_.items() if k not in GRAPH_BREAK_PLACE}
        out.setdefault(message.graph_break(entry), (scope, []))[1].append(extra)
    return out


def _fmt(value: Any) -> str:
    """A break's other fields: one entry as a mapping (``{count: 2}``), else a list."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {message.fmt(v)}" for k, v in value.items()) + "}"
    return message.fmt(value)


def compare_compiled_section(cmp: Comparer, old: Any, new: Any) -> None:
    """Compare the ``compiled`` sections of two snapshots: graph breaks by reason and
    place, graph count, then the rest (per-graph op counts, op alignment, hooks and
    numerics flags). Comparing a compiled model with eager is another thing:
    :func:`pytest_graphir.compiled.compare_compiled`."""
    if one_sided(cmp, "compiled", old, new):
        return
    old_breaks, new_breaks = _breaks(old), _breaks(new)

    def graph_break(kind: ChangeKind, text: str, scope: str, **fields: Any) -> Change:
        fields.update(node=scope, scope=scope, field=GRAPH_BREAKS, label=text)
        return Change(kind, section="compiled", **fields)

    cmp.structural += [
        graph_break(kind, b, scope, **sided(kind, b))
        for kind, b, (scope, _) in only_in(old_breaks, new_breaks)
    ]
    for b, (scope, extra) in old_breaks.items():  # same break, other count or scopes
        if b in new_breaks and (other := new_breaks[b][1]) != extra:
            note = f"{_fmt(extra)} -> {_fmt(other)}"
            cmp.structural.append(graph_break("changed", b, scope, old=extra, new=other, note=note))
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
