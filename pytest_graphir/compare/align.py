"""Node alignment. When an op is inserted or removed, the ops of the same type after
it in the same scope are renumbered (``add#1`` becomes ``add#2``); when a block is
inserted into a ``ModuleList`` or a module renamed, the modules after it move to
other names with their weights (``model.layers.4`` becomes ``model.layers.5``).
Aligning both by what they are keeps one insertion from reading as a cascade of
changed nodes and differing weights."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable
from difflib import SequenceMatcher
from typing import Any

from ..names import hook_event, map_plain, parse_hook_event, parse_op_name, parse_ref, ref
from .groups import NUMBERED, by_key


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
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            score[i][j] = max(
                score[i - 1][j], score[i][j - 1], score[i - 1][j - 1] + table[i - 1][j - 1]
            )
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
        paired: dict[str, str] = {}
        for tag, i1, i2, j1, j2 in SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
            if tag == "replace" and (i2 - i1) * (j2 - j1) <= MAX_PAIRING * MAX_PAIRING:
                block = _pair(a[i1:i2], b[j1:j2], lambda x, y: SequenceMatcher(None, x, y).ratio())
            else:  # equal and long replaced runs pair by position; inserts, deletes: none
                block = [(k, k) for k in range(min(i2 - i1, j2 - j1))]
            paired.update((old_names[i1 + i], new_names[j1 + j]) for i, j in block)
        # removed, and its name now means another node
        paired |= {n: f"{n}{OLD}" for n in old_names if n not in paired and n in received}
        rename.update({k: v for k, v in paired.items() if k != v})
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

    def reference(v: Any) -> Any:
        return v if (target := parse_ref(v)) is None else ref(rename(target[0]), target[1])

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
    stored: dict[str, Any], received: dict[str, Any], same: Callable[[Any, Any], bool]
) -> tuple[dict[str, Any], dict[str, str]]:
    """``stored`` renamed to line up with ``received`` the way :func:`compare` pairs
    them: modules that moved with their weights (:func:`moved_modules`, ``params``
    entries told equal by ``same``), then op nodes renumbered by an insertion
    (:func:`renumbering`). Returns the renamed document and the module moves."""
    if moves := moved_modules(stored.get("params"), received.get("params"), same):
        stored = apply_renames(stored, mover(moves))
    if rename := renumbering(stored.get("nodes") or {}, received.get("nodes") or {}):
        stored = apply_renames(stored, lambda n: rename.get(n, n))
    return stored, moves
