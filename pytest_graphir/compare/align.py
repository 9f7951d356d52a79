"""Node alignment: when an op is inserted or removed, the ops of the same type after
it in the same scope are renumbered (``add#1`` becomes ``add#2``). Aligning them by
what they do keeps one inserted op from reading as a cascade of changed nodes."""

from __future__ import annotations

from typing import Any

from ..names import map_plain, parse_op_name, parse_ref, rename_ref


def _group(name: str) -> str | None:
    """The renumbering group of an op node name (``blk/add#2`` -> ``blk/add``): its name
    without the occurrence number; None for a module node name."""
    return name.rpartition("#")[0] if parse_op_name(name) is not None else None


def _signature(node: dict[str, Any], group: str) -> str:
    """What an op node does, independent of its own occurrence number and of the
    numbering of its siblings: op, arguments (references into its own renumbered
    group blurred), output shapes and dtypes."""

    def blur(v: Any) -> Any:
        target = parse_ref(v)
        if target is not None and _group(target[0]) == group:
            return f"${group}#?"
        return v

    outs = [
        (o.get("shape"), o.get("dtype")) if isinstance(o, dict) else o for o in node.get("out", [])
    ]
    return repr(
        (
            node.get("op"),
            map_plain(node.get("args"), blur),
            map_plain(node.get("kwargs"), blur),
            outs,
        )
    )


def _pair(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """Order-preserving pairing of two signature lists maximising total similarity
    (Needleman-Wunsch with free gaps; similarity from ``difflib``)."""
    import difflib

    n, m = len(a), len(b)
    sim = [[difflib.SequenceMatcher(None, x, y).ratio() for y in b] for x in a]
    score = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            score[i][j] = max(
                score[i - 1][j], score[i][j - 1], score[i - 1][j - 1] + sim[i - 1][j - 1]
            )
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
    import difflib

    def groups(nodes: dict[str, Any]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name, node in nodes.items():
            group = _group(name)
            if group is not None and "op" in node:
                out.setdefault(group, []).append(name)
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
            if tag == "replace" and (i2 - i1) * (j2 - j1) <= MAX_PAIRING * MAX_PAIRING:
                block = _pair(a[i1:i2], b[j1:j2])
            else:  # equal and long replaced runs pair by position; inserts, deletes: none
                block = [(k, k) for k in range(min(i2 - i1, j2 - j1))]
            paired.update((old_names[i1 + i], new_names[j1 + j]) for i, j in block)
        for n in old_names:
            if n not in paired and n in received:
                paired[n] = f"{n}~old"  # removed, and its name now means another node
        rename.update({k: v for k, v in paired.items() if k != v})
    return rename


def apply_renames(doc: dict[str, Any], rename: dict[str, str]) -> dict[str, Any]:
    """Return ``doc`` with node names and every ``$reference`` renamed."""

    def ref(v: Any) -> Any:
        return rename_ref(v, rename) if isinstance(v, str) else v

    nodes = {rename.get(name, name): map_plain(node, ref) for name, node in doc["nodes"].items()}
    return {**doc, "nodes": nodes, "outputs": map_plain(doc.get("outputs", {}), ref)}
