"""The structured result of a comparison: :class:`Change` and :class:`Comparison`.

One source for every view: the pytest failure message (:mod:`.message`), the
``graphir diff`` command and the HTML report all render these objects; none of them
parses text. The wording lives in :mod:`.message`, which imports nothing from here;
the methods below that return text (``str(change)``, :meth:`Comparison.lines`) only
hand the object to it, so the import runs one way.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any, Literal

from . import message
from .tolerance import Tolerance

ChangeKind = Literal["added", "removed", "changed", "reordered", "drift"]
"""What a :class:`Change` is: structure added, removed or changed, nodes that run in
another order, or statistics drift."""
KINDS: tuple[ChangeKind, ...] = ("added", "removed", "changed", "reordered", "drift")


@dataclass
class Change:
    """One difference, as shown to a reviewer.

    Attributes:
        kind: ``added``, ``removed``, ``changed`` (structure), ``reordered`` (a node
            present on both sides that runs at another place in the firing order)
            or ``drift`` (statistics).
        node: the node (``transformer.h.0.mlp/gelu#0``) or section entry (the input
            ``x``, the meta key ``training``) the change is about; empty for a change
            about a whole section or about several nodes (see ``nodes``).
        section: where ``node`` lives: ``nodes``, ``meta``, ``inputs``, ``outputs``,
            ``backward``, ``grads``, ``compiled``, ``hooks``, ``autograd`` or
            ``granularity``.
        scope: the module path the node runs in (``transformer.h.0.mlp``; a module
            node's own path), empty outside ``nodes``.
        field: what changed inside ``node``: ``op``, ``out[0].shape``,
            ``out[0].mean``, ``kwargs.dim``; empty when the whole entry changed.
        old: the snapshot's value (``None`` when added or not applicable).
        new: this run's value (``None`` when removed or not applicable).
        tolerance: for ``drift``, the absolute drift that was allowed (``0.0`` =
            compared exactly); ``None`` otherwise.
        nodes: every node a merged change is about (one rewired producer read by
            many consumers; several ops added in one scope).
        label: display name when the change is not about one node or entry (a graph
            break, a hook event, a merged change); empty otherwise.
        note: the phrase shown instead of ``field old -> new`` for changes that are
            not a value change (``(module Sequential, and 6 nodes inside it)``,
            ``fired before 'scale_hook' (was after)``); empty otherwise.
        role: for ``drift`` about a node, ``origin`` (nothing upstream of the node
            drifts or changed: the drift starts here) or ``propagated`` (it follows
            from ``cause``); empty otherwise (see :mod:`.origins`).
        cause: for ``drift`` about a node, what it follows from: the origin node
            (its own name for an origin), an added or changed node, ``inputs.<name>``
            or ``params.<name>``; empty otherwise.
        verb: the word the line starts with where it is not ``kind``: ``inserted``
            (an added module whose later numbered siblings moved up with their
            weights), ``renamed`` (a module moved to another name with its weights);
            empty otherwise.
    """

    kind: ChangeKind
    node: str = ""
    section: str = "nodes"
    scope: str = ""
    field: str = ""
    old: Any = None
    new: Any = None
    tolerance: float | None = None
    nodes: list[str] = dc_field(default_factory=list)
    label: str = ""
    note: str = ""
    role: str = ""
    cause: str = ""
    verb: str = ""

    @property
    def where(self) -> str:
        """Section and name as the message shows it (``meta.training``)."""
        return message.where(self)

    @property
    def detail(self) -> str:
        """What changed as the message shows it (``op gelu -> relu``)."""
        return message.detail(self)

    def mentions(self, name: str) -> bool:
        """True when this change is about the node (or section entry) ``name``."""
        return name in (self.node, self.where) or name in self.nodes

    def __str__(self) -> str:
        return message.change_line(self)


@dataclass
class Comparison:
    """The result of :func:`~pytest_graphir.compare.compare`: every change,
    structural ones first (meta, inputs, added, removed, changed nodes, outputs,
    sections), then statistics drift."""

    tolerance: Tolerance
    changes: list[Change] = dc_field(default_factory=list)
    ignored: list[str] = dc_field(default_factory=list)
    """Nodes left out of the comparison by ``ignore`` patterns (either side)."""

    def __bool__(self) -> bool:
        """True when the documents differ (beyond tolerance)."""
        return bool(self.changes)

    def counts(self) -> dict[str, int]:
        """Number of changes per kind, in the order of :data:`KINDS`."""
        return {**dict.fromkeys(KINDS, 0), **Counter(c.kind for c in self.changes)}

    def structural(self) -> list[Change]:
        """The changes that are not statistics drift."""
        return [c for c in self.changes if c.kind != "drift"]

    def summary(self) -> str:
        """One line: counts per kind and the tolerance (see :mod:`.message`)."""
        return message.summary(self)

    def lines(self, max_lines: int | None = None, hint: str = message.MORE_HINT) -> list[str]:
        """Summary line, then at most ``max_lines`` change lines (0 = all), then what
        was left out and ``hint``, how to see it (see :func:`.message.lines`)."""
        limit = message.DEFAULT_MAX_LINES if max_lines is None else max_lines
        return message.lines(self, limit, hint)

    def change_lines(self, max_lines: int, within: int = 0) -> tuple[list[str], int]:
        """The change list as the failure message words and orders it (structural
        changes, then drift: inputs and parameters, origins, propagated drift one line
        per module subtree, other sections), unindented, without the summary and
        drift-only lines (see :func:`.message.listing`).

        Args:
            max_lines: lines to keep (``<= 0``: all).
            within: the failure message's own limit (``graphir_max_diff_lines``,
                ``<= 0``: all); only lines the message shows are kept, so a terminal
                summary never lists more than the message it summarises.

        Returns:
            ``(the lines kept, the number of lines cut off)``.
        """
        _, in_message, cut = message.listing(self, within)
        room = len(in_message) if max_lines <= 0 else min(max_lines, len(in_message))
        return [e.text for e in in_message[:room]], len(in_message) - room + len(cut)

    def left_out(self, max_lines: int) -> int:
        """How many change lines the failure message cut at ``max_lines`` lines leaves
        out (its ``... and N more`` line; see :func:`.message.listing`).

        Args:
            max_lines: the message's limit (``graphir_max_diff_lines``, ``<= 0``: all).

        Returns:
            The number of lines not listed; 0 when the message lists them all.
        """
        return len(message.listing(self, max_lines)[2])
