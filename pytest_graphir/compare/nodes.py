"""Node-level diff: node alignment across renumbered ops and moved modules, tensor
entries with tolerance, one node's fields, added or removed subtrees folded into one
change, and the same change on many nodes merged into one.

Alignment: when an op is inserted or removed, the ops of the same type after it in
the same scope are renumbered (``add#1`` becomes ``add#2``); when a block is inserted
into a ``ModuleList`` or a module renamed, the modules after it move to other names
with their weights (``model.layers.4`` becomes ``model.layers.5``). Aligning both by
what they are (:func:`paired`) keeps one insertion from reading as a cascade of
changed nodes and differing weights."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from difflib import SequenceMatcher
from typing import Any

from deepdiff import DeepDiff, parse_path

from ..ir import COUNT_KEYS, PARAMS_SECTION
from ..names import (
    REF_PREFIX,
    first_names,
    fmt,
    hook_event,
    is_ref,
    local_name,
    map_plain,
    module_path,
    node_scope,
    op_node_base,
    op_scope,
    parse_hook_event,
    parse_op_name,
    parse_ref,
    plural,
    refs_in,
)
from . import message
from .groups import NUMBERED, by_key, subtree
from .hooks import differing
from .message import Change, ChangeKind
from .tolerance import Tolerance, both_nan, equal_stat

PATTERN_SECTIONS = ("nodes", "params")
"""Sections whose entry names tolerance and ignore patterns match: node names and
parameter names (``fc2*`` covers ``fc2/linear#0`` and ``fc2.weight``)."""

Place = tuple[str, str]
"""(section, node or entry name): (``nodes``, ``blk/gelu#0``), (``inputs``, ``x``)."""


def deepdiff_path(path: str) -> str:
    """``root['kwargs']['dim']`` -> ``kwargs.dim``; ``root['args'][1]`` -> ``args[1]``."""
    out = ""
    for part in parse_path(path):  # type: ignore[no-untyped-call]
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def split_entry(entry: Any) -> tuple[Any, dict[str, Any]]:
    """Split an ``out``/input entry into (structure, statistics)."""
    if isinstance(entry, dict) and "dtype" in entry and "ref" not in entry:
        struct = {k: entry[k] for k in ("shape", "dtype", "dist") if k in entry}
        return struct, {k: v for k, v in entry.items() if k not in struct}
    return entry, {}


def sided(kind: str, value: Any) -> dict[str, Any]:
    """The value field of an ``added`` (``new``) or ``removed`` (``old``) change."""
    return {"new" if kind == "added" else "old": value}


def only_in(section: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    """An ``added`` change (the value as ``new``) about each entry of section ``new``
    that ``old`` lacks, then a ``removed`` one (``old``) about each ``new`` lacks."""
    added = [Change("added", n, section, new=v) for n, v in new.items() if n not in old]
    return added + [Change("removed", n, section, old=v) for n, v in old.items() if n not in new]


def within(name: str, module: str) -> bool:
    """True when node ``name`` runs inside module node ``module`` (any of its calls)."""
    return name.startswith(tuple(module_path(module) + sep for sep in "./@"))


def change(kind: ChangeKind, place: Place, **fields: Any) -> Change:
    """A change about ``place``: (section, node or entry name), e.g. (``nodes``,
    ``blk/gelu#0``) or (``inputs``, ``x``); in ``nodes``, scoped to the node's module."""
    section, node = place
    return Change(kind, node, section, node_scope(node) if section == "nodes" else "", **fields)


def _dotted(label: str, key: str) -> str:
    return f"{label}.{key}" if label and key else label or key


def _group(name: str) -> str | None:
    """The renumbering group of an op node name (``blk/add#2`` -> ``blk/add``): its name
    without the occurrence number; None for a module node name."""
    return name.rpartition("#")[0] if parse_op_name(name) is not None else None


def _signature(node: dict[str, Any], group: str) -> str:
    """What an op node does, independent of its own occurrence number and of the
    numbering of its siblings: op, arguments (references into its own renumbered
    group blurred), output shapes and dtypes."""

    def blur(v: Any) -> Any:
        return f"${group}#?" if (target := parse_ref(v)) and _group(target[0]) == group else v

    outs = [
        (o.get("shape"), o.get("dtype")) if isinstance(o, dict) else o for o in node.get("out", [])
    ]
    return repr((node.get("op"), *map_plain([node.get("args"), node.get("kwargs")], blur), outs))


def _pair(a: list[str], b: list[str], sim: Callable[[str, str], float]) -> list[tuple[int, int]]:
    """Order-preserving pairing of two lists, as index pairs, maximising the total
    ``sim`` (Needleman-Wunsch with free gaps)."""
    n, m = len(a), len(b)
    table = [[sim(x, y) for y in b] for x in a]
    score = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i, j in itertools.product(range(1, n + 1), range(1, m + 1)):
        diagonal = score[i - 1][j - 1] + table[i - 1][j - 1]
        score[i][j] = max(score[i - 1][j], score[i][j - 1], diagonal)
    pairs: list[tuple[int, int]] = []
    i, j = n, m
    while i and j:
        if score[i][j] == score[i - 1][j - 1] + table[i - 1][j - 1]:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif score[i][j] == score[i - 1][j]:
            i -= 1
        else:
            j -= 1
    return pairs[::-1]


MAX_PAIRING = 64
"""Largest renumbered block aligned by similarity; longer blocks pair by position."""


OLD = "~old"
"""Suffix of a stored node (or module) name that now means another node: a removed
node whose name a renumbered or moved one took."""


def renumbering(stored: dict[str, Any], received: dict[str, Any]) -> dict[str, str]:
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

    old_groups, new_groups = (
        by_key((g, n) for n in d if (g := _group(n)) is not None and "op" in d[n])
        for d in (stored, received)
    )
    rename: dict[str, str] = {}
    for group, old_names in old_groups.items():
        new_names = new_groups.get(group, [])
        if len(old_names) == len(new_names) or not new_names:
            continue
        a = [_signature(stored[n], group) for n in old_names]
        b = [_signature(received[n], group) for n in new_names]
        matched: dict[str, str] = {}
        for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
            if tag == "replace" and (i2 - i1) * (j2 - j1) <= MAX_PAIRING * MAX_PAIRING:
                block = _pair(a[i1:i2], b[j1:j2], lambda x, y: SequenceMatcher(None, x, y).ratio())
            else:  # equal and long replaced runs pair by position; inserts, deletes: none
                block = [(k, k) for k in range(min(i2 - i1, j2 - j1))]
            matched.update((old_names[i1 + i], new_names[j1 + j]) for i, j in block)
        # removed, and its name now means another node
        matched |= {n: f"{n}{OLD}" for n in old_names if n not in matched and n in received}
        rename.update({k: v for k, v in matched.items() if k != v})
    return rename


def _modules(params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every module path that holds parameters (the root left out) -> its parameters,
    by name relative to it (``mlp.up_proj.weight``)."""
    out: dict[str, dict[str, Any]] = {}
    for name, entry in params.items():
        parts = name.split(".")
        for k in range(1, len(parts)):
            out.setdefault(".".join(parts[:k]), {})[".".join(parts[k:])] = entry
    return out


def moved_modules(
    old: dict[str, Any] | None, new: dict[str, Any] | None, same: Callable[[Any, Any], bool]
) -> dict[str, str]:
    """Map stored module paths to received ones where modules moved with their weights.

    Two moves are recognised, each by parameter names and fingerprints (``same``):

    * a block inserted into (removed from) numbered siblings such as a
      ``ModuleList``: the siblings of both sides aligned in order, matching where
      all their parameters match, and the later ones shifted by the number of
      blocks inserted (removed), up to the last (``model.layers.4`` -> ``.5``);
    * a module renamed: a module path only the snapshot has whose parameters
      exactly one path only this run has holds, under the same names.

    Equal weights anywhere else (a random stream moved by one layer draws a
    layer's old values for its neighbour) are not a move. Outermost modules first;
    a module inside a moved one moves with it.

    Args:
        old: the snapshot's ``params`` section (None: nothing moved).
        new: this run's ``params`` section.
        same: True when two parameter entries match (shape, dtype, statistics within
            tolerance).

    Returns:
        ``{stored path: received path}``, outermost modules only, and a stored module
        whose name a moved one takes to ``<name>~old``; ``{}`` when none moved.
    """
    if not old or not new:
        return {}
    old_mods, new_mods = _modules(old), _modules(new)

    @functools.cache
    def matches(m: str, n: str) -> bool:
        a, b = old_mods[m], new_mods[n]
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)

    moves: dict[str, str] = {}

    def free(m: str, outer: dict[str, Any]) -> bool:  # inside no module of ``outer``
        return not any(m.startswith(f"{o}.") for o in outer)

    for a, b in _siblings(old_mods, new_mods):
        if len(a) == len(b) or not free(a[0], moves):
            continue
        pairs = _pair(a, b, lambda m, n: float(matches(m, n)))
        shifted = {a[i]: b[j] for i, j in pairs if a[i] != b[j] and matches(a[i], b[j])}
        if [(r[2], r[1] + r[3]) for r in runs(shifted)] == [(len(b) - len(a), len(a))]:
            moves.update(shifted)
    gone = [m for m in old_mods if m not in new_mods and free(m, moves)]
    came = [n for n in new_mods if n not in old_mods and free(n, moves)]
    found: dict[str, list[str]] = {}
    for m in sorted(gone, key=lambda m: m.count(".")):
        if free(m, found) and (candidates := [n for n in came if matches(m, n)]):
            found[m] = candidates
    taken = [n for ns in found.values() for n in ns]
    moves |= {m: ns[0] for m, ns in found.items() if len(ns) == 1 and taken.count(ns[0]) == 1}
    # a stored module that stays where a moved one arrives gives its name up
    return moves | {n: f"{n}{OLD}" for n in moves.values() if n in old_mods and n not in moves}


def _siblings(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[list[str], list[str]]]:
    """Numbered sibling modules (``model.layers.<k>``) under each base path both sides
    have, in index order, outer bases first: ``[(stored paths, received paths)]``."""

    def numbered(mods: dict[str, Any]) -> dict[str, list[tuple[int, str]]]:
        found = (NUMBERED.match(name) for name in mods)
        return by_key((m["base"] or "", (int(m["index"]), m[0])) for m in found if m)

    a, b = numbered(old), numbered(new)
    bases = sorted(a.keys() & b.keys(), key=lambda base: base.count("."))
    return [([n for _, n in sorted(a[k])], [n for _, n in sorted(b[k])]) for k in bases]


def runs(moves: dict[str, str]) -> list[tuple[str, int, int, int]]:
    """Moves of numbered siblings as runs ``(base, first index, shift, count)``
    (``model.layers.4-7`` -> ``5-8``: ``("model.layers", 4, 1, 4)``); any other move
    as ``(old, -1, 0, 1)``."""
    numbered: dict[tuple[str, int], list[int]] = {}
    out: list[tuple[str, int, int, int]] = []
    for old, new in moves.items():
        a, b = NUMBERED.match(old), NUMBERED.match(new)
        if a and b and a["base"] == b["base"]:
            shift = int(b["index"]) - int(a["index"])
            numbered.setdefault((a["base"] or "", shift), []).append(int(a["index"]))
        elif not new.endswith(OLD):
            out.append((old, -1, 0, 1))
    for (base, shift), indices in sorted(numbered.items()):
        out += [(base, start, shift, count) for start, count in spans(indices)]
    return out


def spans(indices: list[int]) -> list[tuple[int, int]]:
    """Numbers as runs ``(start, count)``: ``[0, 1, 2, 5]`` -> ``[(0, 3), (5, 1)]``."""
    runs = itertools.groupby(enumerate(sorted(indices)), lambda p: p[1] - p[0])
    return [(run[0][1], len(run)) for run in (list(r) for _, r in runs)]


def mover(moves: dict[str, str]) -> Callable[[str], str]:
    """A function that renames a node, parameter or module name inside a moved module
    (``model.layers.4/add#0`` -> ``model.layers.5/add#0``, ``head.weight`` ->
    ``out_proj.weight``); other names unchanged. ``moves`` is not empty (:func:`paired`
    asks only then)."""
    pattern = re.compile(
        "^(" + "|".join(map(re.escape, sorted(moves, key=len, reverse=True))) + r")(?=$|[./@\[])"
    )
    return lambda name: pattern.sub(lambda m: moves[m[1]], name, count=1)


def apply_renames(doc: dict[str, Any], rename: Callable[[str], str]) -> dict[str, Any]:
    """Return ``doc`` with node names, ``$references``, the ``params`` and ``grads``
    entry names and the modules of ``hooks`` events renamed by ``rename``."""

    def reference(v: Any) -> Any:  # what follows the name ([1], [<rank>]) is kept
        if (target := parse_ref(v)) is None:
            return v
        return REF_PREFIX + rename(target[0]) + v[len(REF_PREFIX) + len(target[0]) :]

    def event(e: str) -> str:  # the loader and the tracer write strings only
        parts = parse_hook_event(e)
        module = rename(parts.module)
        return e if module == parts.module else hook_event(module, parts.kind, parts.hook)

    out = {**doc, "nodes": {rename(n): map_plain(v, reference) for n, v in doc["nodes"].items()}}
    out["outputs"] = map_plain(doc.get("outputs", {}), reference)
    for section in ("params", "grads"):
        if isinstance(doc.get(section), dict):
            out[section] = {rename(k): v for k, v in doc[section].items()}
    if isinstance(doc.get("hooks"), list):
        out["hooks"] = [event(e) for e in doc["hooks"]]
    return out


def paired(
    stored: dict[str, Any], received: dict[str, Any], cmp: Comparer
) -> tuple[dict[str, Any], dict[str, str]]:
    """``stored`` renamed to line up with ``received`` the way :func:`compare` pairs
    them: modules that moved with their weights (:func:`moved_modules`, ``params``
    entries told equal by ``cmp``'s :meth:`Comparer.same_weights`), then op nodes
    renumbered by an insertion (:func:`renumbering`). Returns the renamed document
    and the module moves."""
    if moves := moved_modules(stored.get("params"), received.get("params"), cmp.same_weights):
        stored = apply_renames(stored, mover(moves))
    if rename := renumbering(stored.get("nodes") or {}, received.get("nodes") or {}):
        stored = apply_renames(stored, lambda n: rename.get(n, n))
    return stored, moves


class Comparer:
    """Collects structural changes and drift while the sections are walked."""

    def __init__(self, tolerance: Tolerance) -> None:
        self.tol = tolerance
        self._for_node = functools.cache(tolerance.for_node)
        self.structural: list[Change] = []
        self.drift: list[Change] = []

    def changed(self, place: Place, **fields: Any) -> None:
        """Record a structural ``changed`` change about ``place``."""
        self.structural.append(change("changed", place, **fields))

    def diff(self, where: Place, label: str, old: Any, new: Any) -> list[Change]:
        """The changes of one tensor entry (input, node output, model output or
        parameter) at ``where``: its shape or dtype ``changed``, else its statistics'
        ``drift``; ``label`` names it inside its node or entry (``out[0]``, empty for
        the whole). Nothing is recorded (see :meth:`value`)."""
        (s_old, st_old), (s_new, st_new) = split_entry(old), split_entry(new)
        if s_old != s_new and not both_nan(s_old, s_new):
            if not (isinstance(s_old, dict) and isinstance(s_new, dict)):
                s_old, s_new = {"": s_old}, {"": s_new}  # the whole entry changed
            pairs = [(k, s_old.get(k), s_new.get(k)) for k in sorted(s_old.keys() | s_new.keys())]
            return [
                change("changed", where, field=_dotted(label, k), old=a, new=b)
                for k, a, b in pairs
                if a != b
            ]
        # a node's or a params entry's own pattern (Tolerance.for_node), else the base
        tol = self._for_node(where[1]) if where[0] in PATTERN_SECTIONS else self.tol
        # integer tensors (ids, positions, indices) compare exactly: a changed token is
        # a changed input, not numeric noise; so do the counts (nan, inf, true)
        scale = 0.0 if "sum" in st_old else tol.allowed(st_old)
        allowed = {k: 0.0 if k in COUNT_KEYS else scale for k in {**st_old, **st_new}}
        return [
            change("drift", where, field=_dotted(label, k), old=a, new=b, tolerance=allowed[k])
            for k, a, b in ((k, st_old.get(k), st_new.get(k)) for k in allowed)
            if not equal_stat(a, b, allowed[k])
        ]

    def same_weights(self, old: Any, new: Any) -> bool:
        """True when two ``params`` entries both have statistics and they match: shape
        and dtype exactly, statistics within the tolerance (an entry without
        statistics tells no weights apart)."""
        stats = split_entry(old)[1] and split_entry(new)[1]
        return bool(stats) and not self.diff((PARAMS_SECTION, ""), "", old, new)

    def value(self, where: Place, label: str, old: Any, new: Any) -> None:
        """Walk two values side by side and record what differs: :meth:`diff`'s changes of
        each tensor entry or other leaf, to :attr:`structural` or to :attr:`drift`;
        ``label`` is the path inside the entry so far (``layer.weight``, ``[1]``). A
        tensor entry or a constant leaf (every ``inputs``, ``outputs`` and node output
        entry a trace writes) is compared as one value."""
        if isinstance(old, dict) and isinstance(new, dict) and "dtype" not in old:
            for key in {**old, **new}:
                self.value(where, _dotted(label, str(key)), old.get(key), new.get(key))
        elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            for i, (a, b) in enumerate(zip(old, new, strict=True)):
                self.value(where, f"{label}[{i}]", a, b)
        elif old != new:
            for c in self.diff(where, label, old, new):
                (self.drift if c.kind == "drift" else self.structural).append(c)

    def node(self, name: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        """Compare one node present in both documents: its ``op`` or ``module`` where
        that changed (another op: its arguments differ as a matter of course), else
        one change per difference DeepDiff finds in its other fields; then its outputs."""
        if old == new:
            return
        place = ("nodes", name)
        old_rest, new_rest = ({k: v for k, v in d.items() if k != "out"} for d in (old, new))
        if kind := next((k for k in ("op", "module") if old.get(k) != new.get(k)), None):
            self.changed(place, field=kind, old=old.get(kind), new=new.get(kind))
        elif old_rest != new_rest:
            for report, items in DeepDiff(old_rest, new_rest, verbose_level=2).items():
                side = report.rpartition("_")[2]
                for path, value in items.items():
                    where = deepdiff_path(path)
                    # plain documents: an item added or removed, else a value or type changed
                    if side in ("added", "removed"):
                        note = f"{where} {side}: {fmt(value)}"
                        fields = {**sided(side, value), "note": note}
                    else:
                        fields = {"old": value["old_value"], "new": value["new_value"]}
                    self.changed(place, field=where, **fields)
        outs_old, outs_new = old.get("out", []), new.get("out", [])
        if len(outs_old) != len(outs_new):
            self.changed(place, field="outputs", old=len(outs_old), new=len(outs_new))
        for i, (a, b) in enumerate(zip(outs_old, outs_new, strict=False)):
            self.value(place, f"out[{i}]", a, b)


def fold(names: list[str], nodes: dict[str, Any], kind: ChangeKind) -> list[Change]:
    """Report a whole added/removed module subtree as one change on the module, and
    several ops added or removed in one scope as one change."""
    changes: list[Change] = []
    covered: set[str] = set()
    for m in names:
        if "module" not in nodes[m] or m in covered:
            continue
        inside = [n for n in names if n != m and n not in covered and within(n, m)]
        covered.update(inside, [m])
        cls = nodes[m]["module"]
        fields = {"note": message.folded_module(cls, len(inside)), **sided(kind, cls)}
        changes.append(Change(kind, node=m, scope=node_scope(m), field="module", **fields))
    for scope, ops in by_key((op_scope(n), n) for n in names if n not in covered).items():
        if len(ops) == 1:
            op = nodes[ops[0]].get("op")
            fields = {"node": ops[0], "field": "op", "note": f"(op {op})", **sided(kind, op)}
        else:
            label = op_node_base(scope, "{" + ",".join(local_name(n) for n in ops) + "}")
            fields = {"nodes": ops, "label": label, "note": f"({len(ops)} ops)"}
        changes.append(Change(kind, scope=scope, **fields))
    return changes


def merge_repeated(changes: list[Change]) -> list[Change]:
    """Merge changes that say the same thing about several nodes into one line.

    When a producer is renamed or replaced, every consumer's argument changes the
    same way, and so does each enclosing module's input or output reference: that
    is one fact (``$blocks.1/add#0 -> $blocks.2/add#0 (read by ...)``). Likewise a
    wider layer changes the same output shape on every node of the layer
    (``out[0].shape [1,12,256] -> [1,12,512] (in ...)``); the same change to
    outputs of other indices joins it (``out[*].dtype float32 -> bfloat16``).
    """

    def key(c: Change) -> str | None:
        # a phrase that does not name what changed keeps its own label
        if c.kind != "changed" or " " not in c.detail or (c.note and c.field not in c.note):
            return None
        if not c.note and c.field.split() == [c.field] and is_ref(c.old) and is_ref(c.new):
            return f"{c.old} -> {c.new}"
        return c.detail if c.note else re.sub(r"^out\[\d+\]\.", "out[*].", c.detail)

    def merge(k: str, group: list[Change]) -> Change:
        c, by_ref = group[0], is_ref(k)
        where = list(dict.fromkeys(g.where for g in group))
        noun = "node" if c.section == "nodes" else "entry"
        label = k if by_ref or len({g.field for g in group}) > 1 else c.detail
        verb = "read by" if by_ref else "in"
        note = f"({verb} {plural(len(where), noun)}: {first_names(where)})"
        field = "" if by_ref else c.field  # a structural change: no tolerance, role or verb
        return replace(c, node="", scope="", field=field, nodes=where, label=label, note=note)

    return merge_alike(changes, [key(c) for c in changes], merge)


def merge_alike(
    changes: list[Change], keys: list[Any], merge: Callable[[Any, list[Change]], Change]
) -> list[Change]:
    """``changes`` with each group of two or more changes of one key (``keys``, one
    per change; ``None``: in no group) replaced by ``merge(key, group)``, in place of
    the group's first; the order is kept."""
    groups = by_key(zip(keys, changes, strict=True))
    return [
        c if k is None or len(groups[k]) == 1 else merge(k, groups[k])
        for k, c in zip(keys, changes, strict=True)
        if k is None or groups[k][0] is c
    ]


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

    added_changes = [c for c in changes if c.kind == "added"]

    def holder(name: str) -> Change | None:
        own = (c for c in added_changes if c.section == "nodes" and name in (c.node, *c.nodes))
        inside = (c for c in added_changes if c.field == "module" and within(name, c.node))
        return next(own, None) or next(inside, None)  # inside an added module subtree

    out: list[Change] = []
    for c in changes:
        old, new = parse_ref(c.old), parse_ref(c.new)
        target = holder(new[0]) if old and new and old[0] in removed and new[0] in added else None
        if c.kind != "changed" or target is None or old is None:
            out.append(c)
            continue
        readers = list(c.nodes) or [c.where]
        # read in place of act/relu#0 by 2 nodes: fc2, fc2/linear#0
        phrase = f"read in place of {old[0]} by {plural(len(readers), 'node')}: "
        phrase += first_names(readers)
        target.note = f"{target.note}, {phrase}" if target.note else phrase
    return out


def reordered(old: list[str], new: list[str], section: str = "nodes") -> list[Change]:
    """The nodes (or the entries of a keyed ``section`` in firing order,
    ``collectives``) present on both sides that run at another place in the firing
    order.

    The common names are aligned in order (``difflib.SequenceMatcher``, the longest
    matching blocks kept in place); each run of nodes outside them is one
    ``reordered`` change about its first node (``nodes``: the whole run):
    ``runs after <node> (was after <node>)``.

    Args:
        old: the stored node names (after renumbering), in snapshot order.
        new: the received node names, in snapshot order.
        section: the section the names are entries of (``scope`` is empty outside
            ``nodes``).

    Returns:
        The changes, in the received order; ``[]`` when the order is the same.
    """
    both = set(old) & set(new)
    a, b = ([n for n in names if n in both] for names in (old, new))
    before_old, before_new = (dict(zip(s, ["", *s], strict=False)) for s in (a, b))

    def after(name: str) -> str:
        return f"after {name}" if name else "first"

    def line(run: list[str]) -> Change:
        first, was, now = run[0], before_old[run[0]], before_new[run[0]]
        label = f"{first} and {plural(len(run) - 1, 'node')} after it" if run[1:] else ""
        fields: dict[str, Any] = {"old": was or None, "new": now or None, "label": label}
        fields.update(note=f"runs {after(now)} (was {after(was)})", nodes=run[1:] and run)
        return change("reordered", (section, first), field="order", **fields)

    return [line(b[j1:j2]) for _, _, j1, j2 in differing(a, b) if j2 > j1]


def fold_moves(changes: list[Change], moves: dict[str, str]) -> list[Change]:
    """Put the modules that moved with their weights first, as one line each.

    A run of numbered siblings moved up (down) by one next to an added (removed)
    module of that number is the block inserted (removed) there:
    ``inserted: model.layers.4 (LlamaDecoderLayer); model.layers.4-7 renumbered to
    5-8, weights unchanged``; its ``added``/``removed`` line and the rewiring of its
    readers fold into it (``nodes``: those readers). Any other move is ``renamed: head
    -> out_proj; state_dict keys head.* -> out_proj.*``.

    Args:
        changes: the structural changes, after :func:`fold_rewiring`.
        moves: :func:`moved_modules`'s ``{stored path: received path}``.

    Returns:
        The move lines, then ``changes`` without what they fold.
    """
    first: list[Change] = []
    rest = list(changes)
    for base, i, shift, count in runs(moves):
        prefix = f"{base}." if base and i >= 0 else ""
        old, new = (base, moves[base]) if i < 0 else (span(i, count), span(i + shift, count))
        block = f"{prefix}{i if shift == 1 else i - 1}"
        kind, name = ("added", block) if shift == 1 else ("removed", f"{block}{OLD}")
        hit = next((c for c in rest if (c.kind, c.node, c.field) == (kind, name, "module")), None)
        if i < 0 or shift not in (1, -1) or hit is None:  # old checkpoints no longer load
            was, now = prefix + old, prefix + new
            label = f"{was} -> {now}; state_dict keys {was}.* -> {now}.*"
            first.append(Change("changed", node=prefix + new, label=label, verb="renamed"))
            continue
        side = "new" if kind == "added" else "old"
        reads = [(c, parse_ref(getattr(c, side))) for c in rest if c.kind == "changed"]
        rewired = [c for c, target in reads if target and within(target[0], name)]
        readers = [n for c in rewired for n in (c.nodes or [c.node])]
        renumbered = f"{prefix}{old} renumbered to {new}, weights unchanged"
        label = f"{block} ({getattr(hit, side)}); {renumbered}"
        verb = "inserted" if kind == "added" else ""
        first.append(replace(hit, node=block, label=label, note="", verb=verb, nodes=readers))
        rest = [c for c in rest if c is not hit and c not in rewired]
    return first + rest


def span(start: int, count: int) -> str:
    """``4-7`` (``count`` numbers from ``start``), ``4`` for one."""
    return f"{start}-{start + count - 1}" if count > 1 else str(start)


def reorders_first(changes: list[Change]) -> list[Change]:
    """``reordered`` changes first, then the rest without the hook-order lines that
    only restate them (a hook of a module node that a ``reordered`` change moves).

    Args:
        changes: the structural changes.

    Returns:
        The same changes, reordered ones first, restating hook lines left out.
    """
    moved = [n for c in changes if c.kind == "reordered" for n in [c.node, *c.nodes] if n]
    modules = {module_path(n) for n in moved if parse_op_name(n) is None}
    kept = [
        c for c in changes if (c.section, c.field) != ("hooks", "position") or c.node not in modules
    ]
    return sorted(kept, key=lambda c: c.kind != "reordered")  # stable: else in order


def fold_blocks(changes: list[Change], *docs: dict[str, Any]) -> list[Change]:
    """Fold one change repeated in each of several numbered blocks into one line.

    A change whose names all lie in one numbered block (``model.layers.3``, from
    :func:`.groups.subtree`) is compared with the others with that block's path and
    the block's own inputs (the ``$references`` its module node reads, in ``docs``)
    made placeholders; changes alike that way are one line, the first one's text and
    ``(in each of model.layers.0-11)``, ``nodes`` all their names.

    Args:
        changes: the structural changes (``changed`` and ``reordered`` ones of the
            ``nodes`` and ``hooks`` sections fold; added and removed lines stay).
        docs: the stored and received ``nodes`` sections (block inputs read there).

    Returns:
        ``changes`` with each group of alike changes replaced by one, in place of
        its first.
    """

    def block(c: Change) -> re.Match[str] | None:
        """The numbered block all names of ``c`` lie in, where ``c`` is of a kind that folds."""
        blocks = {subtree(n) for n in [c.node, *c.nodes] if n}
        folds = c.section in ("nodes", "hooks") and c.kind in ("changed", "reordered")
        return NUMBERED.match(blocks.pop()) if folds and len(blocks) == 1 else None

    def key(c: Change) -> tuple[str, str] | None:
        if (found := block(c)) is None:
            return None
        text, path = str(c), found[0]  # its kind first
        inputs = refs_in([[d.get(path, {}).get(k) for k in ("args", "kwargs")] for d in docs])
        for name in sorted(set(inputs), key=len, reverse=True):
            text = re.sub(re.escape(f"${name}") + r"(?![\w./#@~])", "$<input>", text)
        text = re.sub(r"(?<![\w.])" + re.escape(path) + r"(?!\d)", "<block>", text)
        return text, found["base"] or ""

    def merge(key: tuple[str, str], group: list[Change]) -> Change:
        where = f"{key[1]}." if key[1] else ""
        indices = list({int(found["index"]) for g in group if (found := block(g))})
        where += ",".join(span(start, n) for start, n in spans(indices))
        names = [n for g in group for n in [g.node, *g.nodes] if n]
        c = group[0]
        note = f"{c.detail} (in each of {where})".lstrip()
        return replace(c, label=c.where, note=note, nodes=names)

    return merge_alike(changes, [key(c) for c in changes], merge)
