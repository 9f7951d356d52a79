"""Node-level diff: tensor entries with tolerance, one node's fields, added or removed
subtrees folded into one change, and the same change on many nodes merged into one."""

from __future__ import annotations

import re
from typing import Any

from deepdiff import DeepDiff

from ..ir import COUNT_KEYS
from ..names import is_ref, local_name, module_path, node_scope, op_scope, parse_ref
from . import message
from .changes import Change, ChangeKind
from .tolerance import Tolerance, both_nan, equal_stat

PATTERN_SECTIONS = ("nodes", "params")
"""Sections whose entry names tolerance and ignore patterns match: node names and
parameter names (``fc2*`` covers ``fc2/linear#0`` and ``fc2.weight``)."""

Place = tuple[str, str]
"""(section, node or entry name): (``nodes``, ``blk/gelu#0``), (``inputs``, ``x``)."""


scope_of = node_scope
"""The module an op node runs in, a module node's own path
(:func:`pytest_graphir.names.node_scope`)."""


_PATH_PART = re.compile(r"\['([^']*)'\]|\[(\d+)\]")


def deepdiff_path(path: str) -> str:
    """``root['kwargs']['dim']`` -> ``kwargs.dim``; ``root['args'][1]`` -> ``args[1]``."""
    out = ""
    for key, index in _PATH_PART.findall(path):
        out += f"[{index}]" if index else (f".{key}" if out else key)
    return out


def split_entry(entry: Any) -> tuple[Any, dict[str, Any]]:
    """Split an ``out``/input entry into (structure, statistics)."""
    if isinstance(entry, dict) and "dtype" in entry and "ref" not in entry:
        struct = {k: entry[k] for k in ("shape", "dtype") if k in entry}
        stats = {k: v for k, v in entry.items() if k not in struct}
        return struct, stats
    return entry, {}


class Comparer:
    """Collects structural changes and drift while the sections are walked."""

    def __init__(self, tolerance: Tolerance) -> None:
        self.tol = tolerance
        self._per_node: dict[str, Tolerance] = {}
        self.structural: list[Change] = []
        self.drift: list[Change] = []

    def change(self, kind: ChangeKind, place: Place, **fields: Any) -> Change:
        """A change about ``place``: (section, node or entry name), e.g.
        (``nodes``, ``blk/gelu#0``) or (``inputs``, ``x``)."""
        section, node = place
        scope = scope_of(node) if section == "nodes" else ""
        return Change(kind, node=node, section=section, scope=scope, **fields)

    def entry(self, where: Place, label: str, old: Any, new: Any) -> None:
        """Compare one tensor entry (input, node output or model output) at ``where``;
        ``label`` names it inside its node or entry (``out[0]``, empty for the whole)."""
        s_old, st_old = split_entry(old)
        s_new, st_new = split_entry(new)
        if s_old != s_new and not both_nan(s_old, s_new):
            if isinstance(s_old, dict) and isinstance(s_new, dict):
                for key in sorted(set(s_old) | set(s_new)):
                    if s_old.get(key) != s_new.get(key):
                        name = f"{label}.{key}" if label else key
                        self.structural.append(
                            self.change(
                                "changed", where, field=name, old=s_old.get(key), new=s_new.get(key)
                            )
                        )
            else:
                self.structural.append(
                    self.change("changed", where, field=label, old=s_old, new=s_new)
                )
            return
        if not st_old and not st_new:
            return
        # integer tensors (ids, positions, indices) compare exactly: a changed token
        # is a changed input, not numeric noise
        allowed = 0.0 if "sum" in st_old else self.tolerance_of(where).allowed(st_old)
        for key in list(st_old) + [k for k in st_new if k not in st_old]:
            a, b = st_old.get(key), st_new.get(key)
            if not equal_stat(a, b, allowed, key):
                name = f"{label}.{key}" if label else key
                self.drift.append(
                    self.change(
                        "drift",
                        where,
                        field=name,
                        old=a,
                        new=b,
                        tolerance=0.0 if key in COUNT_KEYS else allowed,
                    )
                )

    def tolerance_of(self, where: Place) -> Tolerance:
        """The tolerance of a node or of a ``params`` entry (its pattern's,
        :meth:`Tolerance.for_node`), or the base tolerance for an entry of another
        section."""
        section, name = where
        if section not in PATTERN_SECTIONS or not self.tol.patterns:
            return self.tol
        found = self._per_node.get(name)
        if found is None:
            found = self._per_node[name] = self.tol.for_node(name)
        return found

    def node(self, name: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        """Compare one node present in both documents."""
        if old == new:
            return
        old_rest = {k: v for k, v in old.items() if k != "out"}
        new_rest = {k: v for k, v in new.items() if k != "out"}
        place = ("nodes", name)
        if old_rest != new_rest:
            self.node_detail(place, old_rest, new_rest)
        outs_old, outs_new = old.get("out", []), new.get("out", [])
        if len(outs_old) != len(outs_new):
            self.structural.append(
                self.change("changed", place, field="outputs", old=len(outs_old), new=len(outs_new))
            )
        for i, (a, b) in enumerate(zip(outs_old, outs_new, strict=False)):
            self.entry(place, f"out[{i}]", a, b)

    def node_detail(self, name: Place, old: dict[str, Any], new: dict[str, Any]) -> None:
        """DeepDiff the non-output fields of one node; one change per difference."""
        for kind in ("op", "module"):
            if old.get(kind) != new.get(kind):
                self.structural.append(
                    self.change("changed", name, field=kind, old=old.get(kind), new=new.get(kind))
                )
                return  # another op: its arguments differ as a matter of course
        diff = DeepDiff(old, new, verbose_level=2)
        for report, items in diff.items():
            for path, value in items.items():
                where = deepdiff_path(path)
                if report in ("values_changed", "type_changes"):
                    change = self.change(
                        "changed", name, field=where, old=value["old_value"], new=value["new_value"]
                    )
                elif report.endswith("_added"):
                    change = self.change(
                        "changed",
                        name,
                        field=where,
                        new=value,
                        note=f"{where} added: {message.fmt(value)}",
                    )
                elif report.endswith("_removed"):
                    change = self.change(
                        "changed",
                        name,
                        field=where,
                        old=value,
                        note=f"{where} removed: {message.fmt(value)}",
                    )
                else:
                    change = self.change("changed", name, field=where, note=f"{where} {report}")
                self.structural.append(change)


def fold(names: list[str], nodes: dict[str, Any], kind: ChangeKind) -> list[Change]:
    """Report a whole added/removed module subtree as one change on the module, and
    several ops added or removed in one scope as one change."""
    modules = [n for n in names if "module" in nodes[n]]
    changes: list[Change] = []
    covered: set[str] = set()
    for m in modules:
        if m in covered:
            continue
        base = module_path(m)
        inside = [
            n
            for n in names
            if n != m
            and n not in covered
            and (
                n.startswith(base + ".")
                or n.startswith(base + "/")
                or n.startswith(base + "@")
                or op_scope(n) == m
            )
        ]
        covered.add(m)
        covered.update(inside)
        cls = nodes[m]["module"]
        changes.append(
            Change(
                kind,
                node=m,
                scope=scope_of(m),
                field="module",
                old=cls if kind == "removed" else None,
                new=cls if kind == "added" else None,
                note=message.folded_module(cls, len(inside)),
            )
        )
    by_scope: dict[str, list[str]] = {}
    for n in names:
        if n not in covered:
            by_scope.setdefault(op_scope(n), []).append(n)
    for scope, ops in by_scope.items():
        if len(ops) == 1:
            op = nodes[ops[0]].get("op")
            changes.append(
                Change(
                    kind,
                    node=ops[0],
                    scope=scope,
                    field="op",
                    old=op if kind == "removed" else None,
                    new=op if kind == "added" else None,
                    note=f"(op {op})",
                )
            )
        else:
            short = ",".join(local_name(n) for n in ops)
            label = f"{scope}/{{{short}}}" if scope else f"{{{short}}}"
            changes.append(
                Change(kind, scope=scope, nodes=list(ops), label=label, note=f"({len(ops)} ops)")
            )
    return changes


def merge_repeated(changes: list[Change]) -> list[Change]:
    """Merge changes that say the same thing about several nodes into one line.

    When a producer is renamed or replaced, every consumer's argument changes the
    same way, and so does each enclosing module's input or output reference: that
    is one fact (``$blocks.1/add#0 -> $blocks.2/add#0 (read by ...)``). Likewise a
    wider layer changes the same output shape on every node of the layer
    (``out[0].shape [1,12,256] -> [1,12,512] (in ...)``).
    """

    def key(c: Change) -> str | None:
        text = message.detail(c)
        if c.kind != "changed" or " " not in text:
            return None
        if c.note and c.field and c.field not in c.note:
            return None  # the phrase does not name what changed: keep its own label
        if (
            not c.note
            and is_ref(c.old)
            and is_ref(c.new)
            and not any(ch.isspace() for ch in c.field)
            and c.field
        ):
            return f"{c.old} -> {c.new}"
        return text

    groups: dict[str, list[Change]] = {}
    for c in changes:
        k = key(c)
        if k is not None:
            groups.setdefault(k, []).append(c)
    out: list[Change] = []
    done: set[str] = set()
    for c in changes:
        k = key(c)
        if k is None or len(groups[k]) == 1:
            out.append(c)
        elif k not in done:
            done.add(k)
            where = list(dict.fromkeys(message.where(g) for g in groups[k]))
            by_ref = is_ref(k)
            out.append(
                Change(
                    "changed",
                    section=c.section,
                    field="" if by_ref else c.field,
                    old=c.old,
                    new=c.new,
                    nodes=where,
                    label=k,
                    note=message.merged(
                        "read by" if by_ref else "in",
                        where,
                        "node" if c.section == "nodes" else "entry",
                    ),
                )
            )
    return out


def fold_rewiring(changes: list[Change], added: set[str], removed: set[str]) -> list[Change]:
    """Fold each ``$old -> $new`` rewiring whose ``old`` was removed and whose ``new``
    was added into that pair: the added change's note goes on with ``, read in place
    of old by N nodes: ...``, and the rewiring line goes.

    Args:
        changes: the structural changes after :func:`merge_repeated`.
        added: names of the nodes only in the received document.
        removed: names of the nodes only in the stored document.

    Returns:
        ``changes`` without the folded rewiring lines (the added changes' notes
        extended); the order is kept.
    """

    def holder(name: str) -> Change | None:
        for c in changes:
            if c.kind == "added" and c.section == "nodes" and (c.node == name or name in c.nodes):
                return c
        for c in changes:  # inside an added module subtree
            if c.kind == "added" and c.field == "module" and c.node:
                base = module_path(c.node)
                if name.startswith((base + ".", base + "/", base + "@")):
                    return c
        return None

    out: list[Change] = []
    for c in changes:
        old, new = parse_ref(c.old), parse_ref(c.new)
        target = holder(new[0]) if old and new and old[0] in removed and new[0] in added else None
        if c.kind != "changed" or target is None or old is None:
            out.append(c)
            continue
        readers = list(c.nodes) or [message.where(c)]
        phrase = message.read_instead(old[0], readers)
        target.note = f"{target.note}, {phrase}" if target.note else phrase
    return out


def reordered(old: list[str], new: list[str]) -> list[Change]:
    """The nodes present on both sides that run at another place in the firing order.

    The common names are aligned in order (``difflib.SequenceMatcher``, the longest
    matching blocks kept in place); each run of nodes outside them is one
    ``reordered`` change about its first node (``nodes``: the whole run):
    ``runs after <node> (was after <node>)``.

    Args:
        old: the stored node names (after renumbering), in snapshot order.
        new: the received node names, in snapshot order.

    Returns:
        The changes, in the received order; ``[]`` when the order is the same.
    """
    import difflib

    both = set(old) & set(new)
    a = [n for n in old if n in both]
    b = [n for n in new if n in both]
    if a == b:
        return []
    runs: list[list[str]] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal" and j2 > j1:
            runs.append(b[j1:j2])
    before_old = {n: (a[i - 1] if i else "") for i, n in enumerate(a)}
    before_new = {n: (b[i - 1] if i else "") for i, n in enumerate(b)}

    def after(name: str) -> str:
        return f"after {name}" if name else "first"

    return [
        Change(
            "reordered",
            node=run[0],
            scope=scope_of(run[0]),
            field="order",
            old=before_old[run[0]] or None,
            new=before_new[run[0]] or None,
            nodes=run if len(run) > 1 else [],
            label=f"{run[0]} and {message.plural(len(run) - 1, 'node')} after it"
            if len(run) > 1
            else "",
            note=f"runs {after(before_new[run[0]])} (was {after(before_old[run[0]])})",
        )
        for run in runs
    ]
