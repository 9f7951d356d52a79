"""Drift grouped for reading: one :class:`DriftGroup` per module subtree and cause.

Reads the ``node``, ``role`` and ``cause`` of drift changes (set by
:func:`.origins.trace_origins`) and nothing else of the comparison; imports nothing
from the rest of the package but :mod:`pytest_graphir.names`, so the message, the
``graphir`` command and the HTML report share it without an import cycle.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Generic, Protocol, TypeVar

from ..names import module_path, op_scope, parse_op_name

ROOT_GROUP = "(model forward)"
"""Group label of ops run directly in the model's own ``forward``."""


class Traced(Protocol):
    """A drift change as grouping reads it."""

    node: str
    role: str
    cause: str


T = TypeVar("T", bound=Traced)
K = TypeVar("K")
V = TypeVar("V")


def by_key(pairs: Iterable[tuple[K, V]]) -> dict[K, list[V]]:
    """The values of ``(key, value)`` pairs, by key: each key's values in order, the
    keys in order of first appearance."""
    out: dict[K, list[V]] = {}
    for key, value in pairs:
        out.setdefault(key, []).append(value)
    return out


@dataclass
class DriftGroup(Generic[T]):
    """Propagated drift of one module subtree (or run of numbered siblings) with one cause.

    Attributes:
        label: the subtree: ``model.layers.2``, ``model.layers.3-5`` (siblings
            numbered 3 to 5), ``lm_head``, :data:`ROOT_GROUP`.
        cause: what the drift follows from (an origin node, an added or changed
            node, ``inputs.x``, ``params.w``).
        changes: the drift changes (one per drifting value).
        nodes: the drifting nodes, in firing order.
    """

    label: str
    cause: str
    changes: list[T] = dc_field(default_factory=list)
    nodes: list[str] = dc_field(default_factory=list)


NUMBERED = re.compile(r"^(?:(?P<base>.*)\.)?(?P<index>\d+)$")


def subtree(name: str) -> str:
    """The module subtree a node's drift is grouped under: the module path up to
    and including its first numbered part (``model.layers.3.mlp/mul#0`` ->
    ``model.layers.3``; a top-level ``nn.Sequential``'s ``2.fc/linear#0`` -> ``2``),
    else its first two parts (``model.norm``, ``lm_head``); :data:`ROOT_GROUP` for ops
    of the model's own forward."""
    scope = module_path(op_scope(name) if parse_op_name(name) is not None else name)
    if not scope:
        return ROOT_GROUP
    parts = scope.split(".")
    last = next((k for k, part in enumerate(parts) if part.isdigit()), 1)
    return ".".join(parts[: last + 1])


def group_drift(changes: Iterable[T]) -> list[DriftGroup[T]]:
    """The propagated drift changes, one :class:`DriftGroup` per (subtree, cause),
    in order of first appearance; adjacent groups of consecutive numbered siblings
    with the same cause merge (``model.layers.3``, ``.4``, ``.5`` ->
    ``model.layers.3-5``)."""
    keyed = by_key(((subtree(c.node), c.cause), c) for c in changes if c.role == "propagated")

    def run(item: tuple[int, tuple[tuple[str, str], list[T]]]) -> tuple[str, str, int | None]:
        # the k-th group numbered k + d: one key for a run of numbered siblings
        k, ((label, cause), _) = item
        m = NUMBERED.match(label)
        return (cause, m["base"] or "", int(m["index"]) - k) if m else (cause, label, None)

    merged: list[DriftGroup[T]] = []
    for _, items in itertools.groupby(enumerate(keyed.items()), run):
        keys, groups = zip(*(item for _, item in items), strict=True)
        label = keys[0][0] + (f"-{keys[-1][0].rpartition('.')[2]}" if keys[1:] else "")
        nodes = [n for g in groups for n, _ in itertools.groupby(c.node for c in g)]
        merged.append(DriftGroup(label, keys[0][1], [c for g in groups for c in g], nodes))
    return merged


def origins(changes: Iterable[T]) -> dict[str, list[T]]:
    """The drift changes of each origin node, by node, in order."""
    return by_key((c.node, c) for c in changes if c.role == "origin")
