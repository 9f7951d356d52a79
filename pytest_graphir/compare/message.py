"""The structured result of a comparison (:class:`Change`, :class:`Comparison`) and
its text rendering: the pytest failure message and ``graphir diff``.

One source for every view: the failure message, the ``graphir diff`` command and
the HTML report all render these objects; nothing parses text. The wording of one
change is ``<kind>: <where> <detail>``, e.g.
``changed: transformer.h.0.mlp/gelu#0 op gelu -> relu`` or
``drift: blk/gelu#0 out[0].mean 0.5 -> 0.6 (tolerance 0.003)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any, Literal, NamedTuple

from ..defaults import DEFAULT_MAX_LINES as DEFAULT_MAX_LINES
from ..names import first_names, fmt, plural
from .groups import DriftGroup, by_key, group_drift, origins
from .tolerance import Tolerance

MORE_HINT = "raise the ini option graphir_max_diff_lines (0 = no limit) to see them all"

MARKER_MORE_HINT = (
    "raise max_diff_lines in the test's @pytest.mark.graphir marker (0 = no limit) to see them all"
)
""":data:`MORE_HINT` for a test whose marker sets ``max_diff_lines``: the marker wins
over the ini option, so raising the option would change nothing."""


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
        """The place of the change as the message shows it: node name,
        ``section.entry`` (``meta.training``), ``section name`` or its label."""
        if self.label:
            return self.label
        if self.section in ("nodes", "granularity"):
            return self.node or self.section
        return f"{self.section}.{self.node}" if self.node else f"section {self.section}"

    @property
    def detail(self) -> str:
        """What changed as the message shows it: ``field old -> new`` (``op gelu ->
        relu``; a side without the key reads ``absent``), with the tolerance for
        drift, or the change's own phrase; empty for an added or removed entry."""
        if self.note or self.verb:
            return self.note
        field = f"{self.field} " if self.field else ""
        old, new = ("absent" if v is None else fmt(v) for v in (self.old, self.new))
        if self.kind == "drift":
            tolerance = f"tolerance {self.tolerance:.3g}" if self.tolerance else "exact"
            return f"{field}{old} -> {new} ({tolerance})"
        return f"{field}{old} -> {new}" if self.kind == "changed" else ""

    def mentions(self, name: str) -> bool:
        """True when this change is about the node (or section entry) ``name``."""
        return name in (self.node, self.where) or name in self.nodes

    def __str__(self) -> str:
        """``<kind>: <where> <detail>`` (``<verb>:`` where the change has one)."""
        text = self.detail
        return f"{self.verb or self.kind}: {self.where}" + (f" {text}" if text else "")


@dataclass
class Comparison:
    """The result of :func:`~pytest_graphir.compare.compare`: every change,
    structural ones first (meta, inputs, added, removed, changed nodes, outputs,
    sections), then statistics drift."""

    tolerance: Tolerance
    changes: list[Change] = dc_field(default_factory=list)
    ignored: list[str] = dc_field(default_factory=list)
    """Nodes left out of the comparison by ``ignore`` patterns (either side)."""
    communication: list[str] = dc_field(default_factory=list)
    """The rows of the two communication tables that differ, with their header
    (:func:`.sections.communication_diff`); empty when the collectives match."""

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
        """One line: counts per kind and the tolerance, e.g.
        ``graphir: 1 added, 2 drift (rtol=0.001, atol=1e-05)``."""
        parts = [f"{n} {k}" for k, n in self.counts().items() if n]
        tol = self.tolerance
        own = f"; own tolerance for {plural(len(tol.patterns), 'node pattern')}"
        extra = own if tol.patterns else ""
        extra += f"; {plural(len(self.ignored), 'node')} ignored" if self.ignored else ""
        return (
            f"graphir: {', '.join(parts) or 'no differences'} "
            f"(rtol={tol.rtol:g}, atol={tol.atol:g}{extra})"
        )

    def lines(
        self, max_lines: int = DEFAULT_MAX_LINES, hint: str = MORE_HINT, grouped: bool = True
    ) -> list[str]:
        """Summary line, the drift-only note, then at most ``max_lines`` lines of
        :func:`entries` (0 = all; default :data:`DEFAULT_MAX_LINES`; drift grouped per
        module subtree unless ``grouped`` is false), each followed by the lines
        :meth:`under` it, then a line saying what was left out and ``hint`` (how to
        see it)."""
        return [line for line, _ in self.kinds_of_lines(max_lines, hint, grouped)]

    def kinds_of_lines(
        self, max_lines: int = DEFAULT_MAX_LINES, hint: str = MORE_HINT, grouped: bool = True
    ) -> list[tuple[str, str]]:
        """:meth:`lines`, each with what it is, for colouring: ``"summary"``, a change
        kind (the drift-only note is ``"drift"``), or ``"aside"`` (the lines under an
        entry and the left-out line)."""
        note, shown, rest = listing(self, max_lines, grouped)
        out = [(self.summary(), "summary"), *([(f"  {note}", "drift")] if note else [])]
        for e in shown:
            out += [(f"  {e.text}", e.kind), *((line, "aside") for line in self.under(e))]
        return out + ([(left_out(rest, hint), "aside")] if rest else [])

    def under(self, entry: Entry) -> list[str]:
        """The lines shown under ``entry`` of the change list, indented: the
        :attr:`communication` rows under the ``collectives`` sequence line; none
        under any other entry."""
        sequence = any(
            c.section == "collectives" and c.kind == "changed" and not (c.node or c.nodes)
            for c in entry.covers
        )
        return [f"    {line}" for line in self.communication] if sequence else []

    def change_lines(self, max_lines: int, within: int = 0) -> tuple[list[str], int]:
        """The change list as the failure message words and orders it (structural
        changes, then drift: inputs and parameters, origins, propagated drift one line
        per module subtree, other sections), unindented, without the summary and
        drift-only lines (see :func:`.listing`).

        Args:
            max_lines: lines to keep (``<= 0``: all).
            within: the failure message's own limit (``graphir_max_diff_lines``,
                ``<= 0``: all); only lines the message shows are kept, so a terminal
                summary never lists more than the message it summarises.

        Returns:
            ``(the lines kept, the number of lines cut off)``.
        """
        _, in_message, cut = listing(self, within)
        room = len(in_message) if max_lines <= 0 else min(max_lines, len(in_message))
        return [e.text for e in in_message[:room]], len(in_message) - room + len(cut)

    def left_out(self, max_lines: int) -> int:
        """How many change lines the failure message cut at ``max_lines`` lines leaves
        out (its ``... and N more`` line; see :func:`.listing`).

        Args:
            max_lines: the message's limit (``graphir_max_diff_lines``, ``<= 0``: all).

        Returns:
            The number of lines not listed; 0 when the message lists them all.
        """
        return len(listing(self, max_lines)[2])


def human_bytes(count: int) -> str:
    """A byte count in binary units, at most one decimal: ``256 B``, ``1.5 KiB``,
    ``2 MiB``; ``count`` below 1024 is written whole."""
    value, unit = float(count), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{count} B" if unit == "B" else f"{value:.1f}".removesuffix(".0") + f" {unit}"


summary = Comparison.summary
"""``summary(result)``: :meth:`Comparison.summary` as a function of the comparison."""


class Entry(NamedTuple):
    """One line of a change list: its text, the kind it is coloured as, and the
    changes it stands for (one, or a whole group of drift)."""

    text: str
    kind: str
    covers: list[Change]


def origin_line(changes: Sequence[Change]) -> str:
    """An origin node's first drift line, then ``; starts here (N values drift, what
    it reads matches)``."""
    n = len(changes)
    verb = "drifts" if n == 1 else "drift"
    return f"{changes[0]}; starts here ({plural(n, 'value')} {verb}, what it reads matches)"


def _drifting(label: str, values: int, places: int, noun: str) -> str:
    """``<label>: 410 values in 212 nodes drift`` (``drifts``: one value in one place)."""
    verb = "drifts" if values == 1 and places == 1 else "drift"
    return f"{label}: {plural(values, 'value')} in {plural(places, noun)} {verb}"


def group_line(group: DriftGroup[Any]) -> str:
    """``model.layers.3-5: 410 values in 212 nodes drift downstream of <cause>``."""
    counts = _drifting(group.label, len(group.changes), len(group.nodes), "node")
    return f"{counts} downstream of {group.cause}"


def section_line(section: str, changes: Sequence[Change]) -> str:
    """``grads: 12 values in 6 entries drift (first: grads.fc1.weight mean ...)``; one
    change's own line where the section has one."""
    if len(changes) == 1:
        return str(changes[0])
    entries = len(dict.fromkeys(c.node for c in changes))
    first = f"{changes[0].where} {changes[0].detail}"
    return f"{_drifting(section, len(changes), entries, 'entry')} (first: {first})"


SOURCE_SECTIONS = ("inputs", "params", "nodes", "outputs")
"""Sections whose drift lines stand alone, before the origins: model inputs and
parameters (what drift follows from), and node or output drift no origin was traced for."""


def entries(result: Comparison, grouped: bool = True) -> list[Entry]:
    """The change list, in order: structural changes, then drift.

    Grouped (the default): each drifting model input, the parameters that differ,
    and each origin node on a line of its own (:func:`origin_line`), propagated
    drift one line per module subtree and cause (:func:`group_line`,
    :func:`.groups.group_drift`), other sections' drift one line per section. Not
    grouped: one line per change.
    """
    drift = [c for c in result.changes if grouped and c.kind == "drift"]
    alone = [c for c in result.changes if not (grouped and c.kind == "drift")]
    # what drift can follow from: inputs and parameters, one line each
    alone += [c for c in drift if not c.role and c.section in SOURCE_SECTIONS]
    out = [Entry(str(c), c.kind, [c]) for c in alone]
    out += [Entry(origin_line(cs), "drift", cs) for cs in origins(drift).values()]
    out += [Entry(group_line(g), "drift", g.changes) for g in group_drift(drift)]
    others = by_key((c.section, c) for c in drift if not (c.role or c.section in SOURCE_SECTIONS))
    out += [Entry(section_line(s, cs), "drift", cs) for s, cs in others.items()]
    return out


def drift_only(result: Comparison) -> str | None:
    """For a comparison with drift and no structural change: whether the inputs are
    unchanged and where the drift starts; None otherwise."""
    changes = list(result.changes)
    if not changes or any(c.kind != "drift" for c in changes):
        return None
    inputs = list(dict.fromkeys(c.where for c in changes if c.section == "inputs"))
    differ = f"the inputs differ ({first_names(inputs)}) and the drift follows from them"
    parts = [differ if inputs else "the inputs are unchanged"]
    named = (n for c in changes if c.section == "params" for n in [c.node, *c.nodes])
    if params := list(dict.fromkeys(n for n in named if n)):
        verb = "differs" if len(params) == 1 else "differ"
        parts.append(f"{plural(len(params), 'parameter')} {verb} ({first_names(params)})")
    if starts := list(origins(changes)):
        parts.append(f"drift starts at {plural(len(starts), 'node')}: {first_names(starts)}")
    return "drift only: " + "; ".join(parts)


def left_out(rest: Sequence[Entry], hint: str) -> str:
    """``... and 2 more (7 changes: 3 changed, 4 drift); <hint>``: the lines left out
    (``rest``), then the changes they stand for by kind (their count only where it
    differs from the lines')."""
    counts = Counter(c.kind for e in rest for c in e.covers)
    text = ", ".join(f"{n} {k}" for k, n in counts.items())
    changes = sum(counts.values())
    if changes != len(rest):
        text = f"{plural(changes, 'change')}: {text}"
    return f"  ... and {len(rest)} more ({text}); {hint}"


def listing(
    result: Comparison, max_lines: int = DEFAULT_MAX_LINES, grouped: bool = True
) -> tuple[str | None, list[Entry], list[Entry]]:
    """The change list cut to its first ``max_lines`` entries, and what the cut left out.

    The one place the change list is ordered and cut: the failure message
    (:meth:`Comparison.lines`), ``graphir diff`` and the terminal summary read it.

    Args:
        result: the comparison.
        max_lines: entries to keep (``<= 0``: all; otherwise at least one), the
            drift-only note counted as one of them.
        grouped: drift grouped as :func:`entries` says (False: one line per change).

    Returns:
        ``(drift-only note or None, the entries shown, the entries left out)``, each
        list in order: each change of ``result`` is covered by exactly one entry, so
        the ``covers`` of both add up to all of them.
    """
    note = drift_only(result)
    every = entries(result, grouped)
    room = len(every) if max_lines <= 0 else max(max_lines - (note is not None), 1)
    return note, every[:room], every[room:]


# -- phrases for changes that are not a value change -----------------------------------


def folded_module(module_class: str, inside: int) -> str:
    """``(module Sequential, and 6 nodes inside it)``."""
    extra = f", and {plural(inside, 'node')} inside it" if inside else ""
    return f"(module {module_class}{extra})"
