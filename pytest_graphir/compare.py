"""Compare two snapshot documents: structure exactly, statistics within a tolerance.

Nodes are matched by name first (a keyed compare: 5-10 ms on a 5.7k-node graph,
where DeepDiff over the whole node list takes 1.4 s and, compared by index, turns
one inserted node into thousands of spurious changes). DeepDiff then gives the
detail of what changed inside one node. Statistics are compared by our own loop
with a tolerance scaled by the tensor's own range, so means near zero do not fail
on relative tolerance alone.

Works on the plain documents of :mod:`pytest_graphir.serialize` (no torch).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deepdiff import DeepDiff

from .ir import COUNT_KEYS, KEYED_SECTIONS, SEQUENCE_SECTIONS

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-5
DEFAULT_MAX_LINES = 30
GRANULARITY = ("view", "depth", "blackbox")
"""``meta`` keys that set what a node is; snapshots at different ones are not compared."""
MAX_DRIFT_AFTER_STRUCTURE = 5


@dataclass(frozen=True)
class Tolerance:
    """How far a statistic may drift and still match.

    A float statistic ``a`` (snapshot) matches ``b`` (received) when
    ``|a - b| <= atol + rtol * scale``, where ``scale`` is the tensor's own
    magnitude in the snapshot, ``max(|min|, |max|, std)``. Scaling by the range
    rather than by ``|a|`` keeps a mean of 1e-9 on a tensor spanning [-3, 3] from
    failing on noise. Counts (``nan``, ``inf``, ``true``) and the statistics of
    integer tensors (``min``, ``max``, ``sum``) compare exactly.

    Attributes:
        rtol: relative tolerance, fraction of the tensor's magnitude (default 1e-3).
        atol: absolute tolerance (default 1e-5).
    """

    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL

    def allowed(self, stats: dict[str, Any]) -> float:
        """Return the absolute drift allowed for the statistics of one tensor."""
        scale = 0.0
        for key in ("min", "max", "std"):
            v = stats.get(key)
            if isinstance(v, (int, float)) and math.isfinite(v):
                scale = max(scale, abs(v))
        return self.atol + self.rtol * scale


@dataclass
class Change:
    """One difference, as shown to a reviewer.

    Attributes:
        kind: ``added``, ``removed``, ``changed`` (structure) or ``drift`` (statistics).
        where: section and name, e.g. ``transformer.h.0.mlp/gelu#0``, ``meta.training``.
        detail: what changed, e.g. ``op gelu -> relu``.
        nodes: the names of every node a merged change is about (empty for a
            change about ``where`` alone); the message lists the first few.
    """

    kind: str
    where: str
    detail: str = ""
    nodes: list[str] = field(default_factory=list)

    def mentions(self, name: str) -> bool:
        """True when this change is about the node (or section entry) ``name``."""
        return name == self.where or name in self.nodes

    def __str__(self) -> str:
        return f"{self.kind}: {self.where}" + (f" {self.detail}" if self.detail else "")


@dataclass
class Comparison:
    """The result of :func:`compare`: every change, structural ones first."""

    tolerance: Tolerance
    changes: list[Change] = field(default_factory=list)

    def __bool__(self) -> bool:
        """True when the documents differ (beyond tolerance)."""
        return bool(self.changes)

    def counts(self) -> dict[str, int]:
        """Number of changes per kind, in the order added, removed, changed, drift."""
        out = {k: 0 for k in ("added", "removed", "changed", "drift")}
        for c in self.changes:
            out[c.kind] = out.get(c.kind, 0) + 1
        return out

    def summary(self) -> str:
        """One line: counts per kind and the tolerance."""
        parts = [f"{n} {k}" for k, n in self.counts().items() if n]
        return (f"graphir: {', '.join(parts) or 'no differences'} "
                f"(rtol={self.tolerance.rtol:g}, atol={self.tolerance.atol:g})")

    def lines(self, max_lines: int = DEFAULT_MAX_LINES) -> list[str]:
        """Summary line, then at most ``max_lines`` change lines, then what was left out.

        Structural changes come before drift: when the architecture changed, the
        numeric drift downstream of it is a consequence, summarised by its count.
        """
        out = [self.summary()]
        structural = [c for c in self.changes if c.kind != "drift"]
        drift = [c for c in self.changes if c.kind == "drift"]
        limit = max_lines if max_lines > 0 else len(self.changes)
        shown = structural[:limit]
        # after a structural change, drift downstream is its consequence: a taste of it
        room = limit - len(shown)
        if structural and max_lines > 0:
            room = min(room, MAX_DRIFT_AFTER_STRUCTURE)
        shown += drift[:max(room, 0)]
        out.extend(f"  {c}" for c in shown)
        shown_ids = {id(c) for c in shown}
        rest = [c for c in self.changes if id(c) not in shown_ids]
        if rest:
            counts: dict[str, int] = {}
            for c in rest:
                counts[c.kind] = counts.get(c.kind, 0) + 1
            detail = ", ".join(f"{n} {k}" for k, n in counts.items())
            out.append(f"  ... and {len(rest)} more ({detail}); raise the ini option "
                       "graphir_max_diff_lines (0 = no limit) to see them all")
        return out


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return "[" + ",".join(_fmt(v) for v in value) + "]"
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_PATH_PART = re.compile(r"\['([^']*)'\]|\[(\d+)\]")


def _path(deepdiff_path: str) -> str:
    """``root['kwargs']['dim']`` -> ``kwargs.dim``; ``root['args'][1]`` -> ``args[1]``."""
    out = ""
    for key, index in _PATH_PART.findall(deepdiff_path):
        out += f"[{index}]" if index else (f".{key}" if out else key)
    return out


def _split(entry: Any) -> tuple[Any, dict[str, Any]]:
    """Split an ``out``/input entry into (structure, statistics)."""
    if isinstance(entry, dict) and "dtype" in entry and "ref" not in entry:
        struct = {k: entry[k] for k in ("shape", "dtype") if k in entry}
        stats = {k: v for k, v in entry.items() if k not in struct}
        return struct, stats
    return entry, {}


def _both_nan(a: Any, b: Any) -> bool:
    """A constant NaN (model input or output) equals itself."""
    return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)


def _equal_stat(a: Any, b: Any, allowed: float, key: str) -> bool:
    if a == b:
        return True
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return False
    if key in COUNT_KEYS:
        return False
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return False
    return abs(a - b) <= allowed


class _Comparer:
    def __init__(self, tolerance: Tolerance) -> None:
        self.tol = tolerance
        self.structural: list[Change] = []
        self.drift: list[Change] = []

    def entry(self, where: str, label: str, old: Any, new: Any) -> None:
        """Compare one tensor entry (input, node output or model output)."""
        s_old, st_old = _split(old)
        s_new, st_new = _split(new)
        if s_old != s_new and not _both_nan(s_old, s_new):
            if isinstance(s_old, dict) and isinstance(s_new, dict):
                for key in sorted(set(s_old) | set(s_new)):
                    if s_old.get(key) != s_new.get(key):
                        name = f"{label}.{key}" if label else key
                        self.structural.append(Change(
                            "changed", where,
                            f"{name} {_fmt(s_old.get(key))} -> {_fmt(s_new.get(key))}"))
            else:
                prefix = f"{label} " if label else ""
                self.structural.append(
                    Change("changed", where, f"{prefix}{_fmt(s_old)} -> {_fmt(s_new)}"))
            return
        if not st_old and not st_new:
            return
        # integer tensors (ids, positions, indices) compare exactly: a changed token
        # is a changed input, not numeric noise
        allowed = 0.0 if "sum" in st_old else self.tol.allowed(st_old)
        for key in list(st_old) + [k for k in st_new if k not in st_old]:
            a, b = st_old.get(key), st_new.get(key)
            if not _equal_stat(a, b, allowed, key):
                tol = "exact" if key in COUNT_KEYS or not allowed else f"tolerance {allowed:.3g}"
                name = f"{label}.{key}" if label else key
                self.drift.append(
                    Change("drift", where, f"{name} {_fmt(a)} -> {_fmt(b)} ({tol})"))

    def node(self, name: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        if old == new:
            return
        old_rest = {k: v for k, v in old.items() if k != "out"}
        new_rest = {k: v for k, v in new.items() if k != "out"}
        if old_rest != new_rest:
            self.node_detail(name, old_rest, new_rest)
        outs_old, outs_new = old.get("out", []), new.get("out", [])
        if len(outs_old) != len(outs_new):
            self.structural.append(
                Change("changed", name, f"outputs {len(outs_old)} -> {len(outs_new)}"))
        for i, (a, b) in enumerate(zip(outs_old, outs_new, strict=False)):
            self.entry(name, f"out[{i}]", a, b)

    def node_detail(self, name: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        """DeepDiff the non-output fields of one node and phrase each difference."""
        for kind in ("op", "module"):
            if old.get(kind) != new.get(kind):
                detail = f"{kind} {_fmt(old.get(kind))} -> {_fmt(new.get(kind))}"
                self.structural.append(Change("changed", name, detail))
                return  # another op: its arguments differ as a matter of course
        diff = DeepDiff(old, new, verbose_level=2)
        for report, items in diff.items():
            for path, value in items.items():
                where = _path(path)
                if report in ("values_changed", "type_changes"):
                    detail = f"{where} {_fmt(value['old_value'])} -> {_fmt(value['new_value'])}"
                elif report.endswith("_added"):
                    detail = f"{where} added: {_fmt(value)}"
                elif report.endswith("_removed"):
                    detail = f"{where} removed: {_fmt(value)}"
                else:
                    detail = f"{where} {report}"
                self.structural.append(Change("changed", name, detail))


def _scope_of(name: str) -> str:
    return name.split("/", 1)[0] if "/" in name else ""


def _fold(names: list[str], nodes: dict[str, Any], kind: str) -> list[Change]:
    """Report a whole added/removed module subtree as one change on the module."""
    modules = [n for n in names if "module" in nodes[n]]
    changes: list[Change] = []
    covered: set[str] = set()
    for m in modules:
        if m in covered:
            continue
        base = m.split("@", 1)[0]
        inside = [n for n in names if n != m and n not in covered and (
            n.startswith(base + ".") or n.startswith(base + "/") or n.startswith(base + "@")
            or _scope_of(n) == m)]
        covered.add(m)
        covered.update(inside)
        extra = f", and {len(inside)} nodes inside it" if inside else ""
        changes.append(Change(kind, m, f"(module {nodes[m]['module']}{extra})"))
    by_scope: dict[str, list[str]] = {}
    for n in names:
        if n not in covered:
            by_scope.setdefault(_scope_of(n), []).append(n)
    for scope, ops in by_scope.items():
        if len(ops) == 1:
            changes.append(Change(kind, ops[0], f"(op {nodes[ops[0]].get('op')})"))
        else:
            short = ",".join(n.split("/", 1)[-1] for n in ops)
            where = f"{scope}/{{{short}}}" if scope else f"{{{short}}}"
            changes.append(Change(kind, where, f"({len(ops)} ops)"))
    return changes


_OP_NAME = re.compile(r"^(.*?)([^/#]+)#(\d+)$")


def _signature(node: dict[str, Any], group: str) -> str:
    """What an op node does, independent of its own occurrence number and of the
    numbering of its siblings: op, arguments (references into its own renumbered
    group blurred), output shapes and dtypes."""
    def blur(v: Any) -> Any:
        if isinstance(v, str) and v.startswith("$") and v[1:].startswith(group + "#"):
            return f"${group}#?"
        if isinstance(v, list):
            return [blur(x) for x in v]
        if isinstance(v, dict):
            return {k: blur(x) for k, x in v.items()}
        return v

    outs = [(o.get("shape"), o.get("dtype")) if isinstance(o, dict) else o
            for o in node.get("out", [])]
    return repr((node.get("op"), blur(node.get("args")), blur(node.get("kwargs")), outs))


def _pair(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """Order-preserving pairing of two signature lists maximising total similarity
    (Needleman-Wunsch with free gaps; similarity from ``difflib``)."""
    import difflib

    n, m = len(a), len(b)
    sim = [[difflib.SequenceMatcher(None, x, y).ratio() for y in b] for x in a]
    score = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            score[i][j] = max(score[i - 1][j], score[i][j - 1],
                              score[i - 1][j - 1] + sim[i - 1][j - 1])
    pairs: list[tuple[int, int]] = []
    i, j = n, m
    while i and j:
        if score[i][j] == score[i - 1][j - 1] + sim[i - 1][j - 1]:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif score[i][j] == score[i - 1][j]:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


MAX_PAIRING = 64
"""Largest renumbered block aligned by similarity; longer blocks pair by position."""


def _renumbering(stored: dict[str, Any], received: dict[str, Any]) -> dict[str, str]:
    """Map stored op-node names to received names where an insertion or deletion
    renumbered a (scope, op) group.

    Inserting one ``add`` before another in the same scope shifts ``add#1`` to
    ``add#2``. Keyed by name alone that is one added node plus a changed node and
    every consumer re-wired. Within each group whose size changed, the nodes are
    aligned by :func:`_signature` (``difflib.SequenceMatcher``, then similarity
    inside replaced blocks), and the stored nodes take the received names, so the
    inserted node is the one reported as added, under the name the new snapshot
    gives it. A removed node whose name now belongs to another node is reported as
    ``<name>~old``.
    """
    import difflib

    def groups(nodes: dict[str, Any]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name, node in nodes.items():
            m = _OP_NAME.match(name)
            if m and "op" in node:
                out.setdefault(m.group(1) + m.group(2), []).append(name)
        return out

    old_groups, new_groups = groups(stored), groups(received)
    rename: dict[str, str] = {}
    for group, old_names in old_groups.items():
        new_names = new_groups.get(group, [])
        if len(old_names) == len(new_names) or not new_names:
            continue
        a = [_signature(stored[n], group) for n in old_names]
        b = [_signature(received[n], group) for n in new_names]
        paired: dict[str, str] = {}
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                for k in range(i2 - i1):
                    paired[old_names[i1 + k]] = new_names[j1 + k]
            elif tag == "replace":
                if (i2 - i1) * (j2 - j1) <= MAX_PAIRING * MAX_PAIRING:
                    block = _pair(a[i1:i2], b[j1:j2])
                else:
                    block = [(k, k) for k in range(min(i2 - i1, j2 - j1))]
                for i, j in block:
                    paired[old_names[i1 + i]] = new_names[j1 + j]
        for n in old_names:
            if n not in paired and n in received:
                paired[n] = f"{n}~old"  # removed, and its name now means another node
        rename.update({k: v for k, v in paired.items() if k != v})
    return rename


def _apply_renames(doc: dict[str, Any], rename: dict[str, str]) -> dict[str, Any]:
    """Return ``doc`` with node names and every ``$reference`` renamed."""
    def ref(v: Any) -> Any:
        if isinstance(v, str) and v.startswith("$"):
            base, bracket, rest = v[1:].partition("[")
            if base in rename:
                return f"${rename[base]}{bracket}{rest}"
            return v
        if isinstance(v, list):
            return [ref(x) for x in v]
        if isinstance(v, dict):
            return {k: ref(x) for k, x in v.items()}
        return v

    nodes = {rename.get(name, name): ref(node) for name, node in doc["nodes"].items()}
    return {**doc, "nodes": nodes, "outputs": ref(doc.get("outputs", {}))}


def compare(stored: dict[str, Any], received: dict[str, Any],
            tolerance: Tolerance | None = None) -> Comparison:
    """Compare a stored snapshot document with a received one.

    Args:
        stored: the snapshot, as returned by :func:`pytest_graphir.serialize.loads`.
        received: the new trace, in the same form.
        tolerance: statistics tolerance; defaults to :class:`Tolerance()`.

    Returns:
        A :class:`Comparison`, falsy when the two match. Changes are ordered:
        meta, inputs, added and removed nodes (a module added with everything in
        it is one change), changed nodes, outputs, then statistics drift.
    """
    tol = tolerance or Tolerance()
    old_g = {k: stored.get("meta", {}).get(k) for k in GRANULARITY}
    new_g = {k: received.get("meta", {}).get(k) for k in GRANULARITY}
    if old_g != new_g:
        # another granularity: every node would differ; say that instead
        def fmt(g: dict[str, Any]) -> str:
            parts = [f"{k}={_fmt(v)}" for k, v in g.items() if v is not None]
            return ", ".join(parts) or "full graph"

        return Comparison(tol, [Change(
            "changed", "granularity",
            f"{fmt(old_g)} -> {fmt(new_g)}: the snapshot was taken at another granularity "
            "(trace's view/depth/blackbox); trace with the snapshot's options, or run "
            "`pytest --graphir-update` to re-take it")])
    rename = _renumbering(stored.get("nodes", {}), received.get("nodes", {}))
    if rename:
        stored = _apply_renames(stored, rename)
    cmp = _Comparer(tol)
    meta_old, meta_new = stored.get("meta", {}), received.get("meta", {})
    for key in list(meta_old) + [k for k in meta_new if k not in meta_old]:
        if meta_old.get(key) != meta_new.get(key):
            detail = f"{_fmt(meta_old.get(key))} -> {_fmt(meta_new.get(key))}"
            cmp.structural.append(Change("changed", f"meta.{key}", detail))
    _compare_keyed(cmp, "inputs", stored.get("inputs", {}), received.get("inputs", {}),
                   cmp.entry)
    old_nodes, new_nodes = stored.get("nodes", {}), received.get("nodes", {})
    cmp.structural.extend(_fold([n for n in new_nodes if n not in old_nodes], new_nodes, "added"))
    cmp.structural.extend(_fold([n for n in old_nodes if n not in new_nodes], old_nodes,
                                "removed"))
    for name, value in old_nodes.items():
        if name in new_nodes:
            cmp.node(name, value, new_nodes[name])
    _compare_keyed(cmp, "outputs", stored.get("outputs", {}), received.get("outputs", {}),
                   cmp.entry)
    for section in KEYED_SECTIONS:
        _compare_keyed(cmp, section, stored.get(section), received.get(section),
                       functools.partial(_compare_value, cmp))
    _compare_compiled(cmp, stored.get("compiled"), received.get("compiled"))
    for section in SEQUENCE_SECTIONS:
        old_seq, new_seq = stored.get(section), received.get(section)
        if old_seq is None and new_seq is None:
            continue
        if old_seq is None or new_seq is None:
            state = "added" if old_seq is None else "removed"
            cmp.structural.append(Change(state, f"section {section}"))
        elif section == "hooks":
            cmp.structural.extend(hook_order_changes(old_seq, new_seq))
        else:
            cmp.structural.extend(_multiset_changes(section, old_seq, new_seq))
    return Comparison(tol, _group_rewiring(cmp.structural) + cmp.drift)


def _compare_keyed(cmp: _Comparer, section: str, old: Any, new: Any,
                   compare_value: Callable[[str, str, Any, Any], None]) -> None:
    """Compare a section keyed by name (``inputs``, ``outputs``, ``backward``,
    ``grads``): added, then removed, then ``compare_value(where, "", old, new)`` for
    every entry that differs."""
    if old is None and new is None:
        return
    if old is None or new is None:
        cmp.structural.append(Change("added" if old is None else "removed", f"section {section}"))
        return
    cmp.structural.extend(Change("added", f"{section}.{n}") for n in new if n not in old)
    cmp.structural.extend(Change("removed", f"{section}.{n}") for n in old if n not in new)
    for name, value in old.items():
        if name in new and value != new[name]:
            compare_value(f"{section}.{name}", "", value, new[name])


def _graph_break(entry: Any) -> str:
    if not isinstance(entry, dict):
        return str(entry)
    where = entry.get("scope") or "the model's forward"
    location = f" ({entry['location']})" if entry.get("location") else ""
    return f"graph break in {where}{location}: {entry.get('reason')}"


def _fmt_any(value: Any) -> str:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items()) + "}"
    return _fmt(value)


def _compare_compiled(cmp: _Comparer, old: Any, new: Any) -> None:
    """Compare ``compiled`` sections: graph breaks by reason and place, graph count,
    then the rest (per-graph op counts, op alignment, hooks and numerics flags)."""
    if old is None and new is None:
        return
    if old is None or new is None:
        cmp.structural.append(Change("added" if old is None else "removed", "section compiled"))
        return
    def breaks(section: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for entry in section.get("graph_breaks", []):
            key = _graph_break(entry)
            extra = {k: v for k, v in entry.items()
                     if k not in ("reason", "scope", "location")} if isinstance(entry, dict) else {}
            out.setdefault(key, []).append(extra)
        return out

    old_breaks, new_breaks = breaks(old), breaks(new)
    cmp.structural.extend(Change("added", b) for b in new_breaks if b not in old_breaks)
    cmp.structural.extend(Change("removed", b) for b in old_breaks if b not in new_breaks)
    for b, extra in old_breaks.items():  # same break, other count or scopes
        if b in new_breaks and new_breaks[b] != extra:
            cmp.structural.append(Change("changed", b, f"{_fmt_any(extra)} -> "
                                                       f"{_fmt_any(new_breaks[b])}"))
    for key in list(old) + [k for k in new if k not in old]:
        a, b = old.get(key), new.get(key)
        if key == "graph_breaks" or a == b:
            continue
        if key in ("per_graph", "recompiled_graphs") and (
                not isinstance(a, list) or not isinstance(b, list) or len(a) != len(b)):
            n_a = len(a) if isinstance(a, list) else 0
            n_b = len(b) if isinstance(b, list) else 0
            cmp.structural.append(Change("changed", f"compiled.{key}", f"{n_a} -> {n_b} graphs"))
            continue
        _compare_value(cmp, f"compiled.{key}", "", a, b)


def _compare_value(cmp: _Comparer, where: str, label: str, old: Any, new: Any) -> None:
    """Walk two values side by side, comparing tensor entries with tolerance."""
    if isinstance(old, dict) and isinstance(new, dict) and "dtype" not in old:
        for key in list(old) + [k for k in new if k not in old]:
            sub = f"{label}.{key}" if label else str(key)
            _compare_value(cmp, where, sub, old.get(key), new.get(key))
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _compare_value(cmp, where, f"{label}[{i}]", a, b)
    elif old != new:
        cmp.entry(where, label, old, new)


def _event_parts(event: str) -> tuple[str, str, str]:
    module, _, rest = event.partition(" ")
    kind, _, name = rest.partition(" ")
    return module, kind, name


def hook_order_changes(old: list[str], new: list[str]) -> list[Change]:
    """Phrase the difference between two hook event sequences.

    Events that only changed place are ``moved`` and said relative to a neighbour
    whose order with them flipped (``blocks.1.attn forward_hook 'Observer.__call__'
    fired before 'scale_hook' (was after)``); a hook now firing on another module is
    ``moved`` from one module to the other; the rest ``appeared`` or ``vanished``.
    """
    import difflib
    from collections import Counter

    if old == new:
        return []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    gone: list[str] = []
    came: list[str] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("delete", "replace"):
            gone.extend(old[i1:i2])
        if tag in ("insert", "replace"):
            came.extend(new[j1:j2])
    moved = Counter(gone) & Counter(came)
    changes: list[Change] = []
    for event in dict.fromkeys(e for e in came if moved[e]):
        changes.append(_moved_within(event, old, new))
    # what is left once the moved copies are taken out (events repeat for reused modules)
    gone = list((Counter(gone) - moved).elements())
    came = list((Counter(came) - moved).elements())
    # the same hook on another module: moved between modules
    by_hook = {(_event_parts(e)[1], _event_parts(e)[2]): e for e in gone if _event_parts(e)[2]}
    for event in list(came):
        module, kind, name = _event_parts(event)
        twin = by_hook.get((kind, name)) if name else None
        if twin is not None and twin in gone:
            gone.remove(twin)
            came.remove(event)
            changes.append(Change("changed", module,
                                  f"{kind} '{name}' moved here from {_event_parts(twin)[0]}"))
    changes.extend(Change("added", f"hooks: {e}", "(appeared)") for e in came)
    changes.extend(Change("removed", f"hooks: {e}", "(vanished)") for e in gone)
    return changes


def _moved_within(event: str, old: list[str], new: list[str]) -> Change:
    """Say where a moved event now fires, relative to the nearest event that used to
    fire on the other side of it."""
    module, kind, name = _event_parts(event)
    i_old, i_new = old.index(event), new.index(event)
    before_old = set(old[:i_old])
    # events it now fires before, that used to fire before it
    flipped = [e for e in new[i_new + 1:] if e in before_old]
    what = f"'{name}'" if name else kind
    if flipped:
        other = flipped[0]
        o_module, _, o_name = _event_parts(other)
        other_txt = f"'{o_name}'" if o_name and o_module == module else other
        return Change("changed", f"{module} {kind}" + (f" {what}" if name else ""),
                      f"fired before {other_txt} (was after)")
    after_old = set(old[i_old + 1:])
    flipped = [e for e in reversed(new[:i_new]) if e in after_old]
    other = flipped[0] if flipped else "?"
    o_module, _, o_name = _event_parts(other)
    other_txt = f"'{o_name}'" if o_name and o_module == module else other
    return Change("changed", f"{module} {kind}" + (f" {what}" if name else ""),
                  f"fired after {other_txt} (was before)")


def _multiset_changes(section: str, old: list[str], new: list[str]) -> list[Change]:
    """Summarise a changed ``autograd`` sequence: per-type count changes, else the
    first position where the order differs."""
    from collections import Counter

    if old == new:
        return []
    a, b = Counter(old), Counter(new)
    changes = [Change("changed", f"{section} {name}", f"{a[name]} -> {b[name]} nodes")
               for name in sorted(set(a) | set(b)) if a[name] != b[name]]
    if not changes:
        i = next(i for i, (x, y) in enumerate(zip(old, new, strict=False)) if x != y)
        changes.append(Change("changed", f"{section}[{i}]", f"{old[i]} -> {new[i]} (order)"))
    return changes


_REWIRE = re.compile(r"^\S+ (\$\S+) -> (\$\S+)$")
MAX_NAMES = 4


def _names(where: list[str]) -> str:
    shown = ", ".join(where[:MAX_NAMES])
    if len(where) > MAX_NAMES:
        shown += f" and {len(where) - MAX_NAMES} more"
    return shown


def _group_rewiring(changes: list[Change]) -> list[Change]:
    """Merge changes that say the same thing about several nodes into one line.

    When a producer is renamed or replaced, every consumer's argument changes the
    same way, and so does each enclosing module's input or output reference: that
    is one fact (``$blocks.1/add#0 -> $blocks.2/add#0 (read by ...)``). Likewise a
    wider layer changes the same output shape on every node of the layer
    (``out[0].shape [1,12,256] -> [1,12,512] (in ...)``).
    """
    def key(c: Change) -> str | None:
        if c.kind != "changed" or " " not in c.detail:
            return None
        m = _REWIRE.match(c.detail)
        return f"{m.group(1)} -> {m.group(2)}" if m else c.detail

    groups: dict[str, list[str]] = {}
    for c in changes:
        k = key(c)
        if k is not None:
            groups.setdefault(k, []).append(c.where)
    out: list[Change] = []
    done: set[str] = set()
    for c in changes:
        k = key(c)
        if k is None or len(groups[k]) == 1:
            out.append(c)
        elif k not in done:
            done.add(k)
            where = list(dict.fromkeys(groups[k]))
            verb = "read by" if k.startswith("$") else "in"
            out.append(Change("changed", k, f"({verb} {len(where)} nodes: {_names(where)})",
                              nodes=where))
    return out
