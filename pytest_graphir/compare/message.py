"""Text rendering of a :class:`~.changes.Comparison`: the pytest failure message and
``graphir diff``.

Everything here reads the structured :class:`~.changes.Change` fields; nothing
parses text. The wording of one change is ``<kind>: <where> <detail>``, e.g.
``changed: transformer.h.0.mlp/gelu#0 op gelu -> relu`` or
``drift: blk/gelu#0 out[0].mean 0.5 -> 0.6 (tolerance 0.003)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..names import first_names


class Change(Protocol):
    """The fields of a :class:`~.changes.Change` this module reads (it imports nothing
    from :mod:`.changes`, which hands its objects here to be worded)."""

    @property
    def kind(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def section(self) -> str: ...
    @property
    def scope(self) -> str: ...
    @property
    def field(self) -> str: ...
    @property
    def old(self) -> Any: ...
    @property
    def new(self) -> Any: ...
    @property
    def tolerance(self) -> float | None: ...
    @property
    def nodes(self) -> Sequence[str]: ...
    @property
    def label(self) -> str: ...
    @property
    def note(self) -> str: ...


class _Tolerance(Protocol):
    @property
    def rtol(self) -> float: ...
    @property
    def atol(self) -> float: ...
    @property
    def patterns(self) -> tuple[tuple[str, float, float], ...]: ...


class Comparison(Protocol):
    """The fields of a :class:`~.changes.Comparison` this module reads."""

    @property
    def tolerance(self) -> _Tolerance: ...
    @property
    def changes(self) -> Sequence[Change]: ...
    @property
    def ignored(self) -> Sequence[str]: ...
    def counts(self) -> dict[str, int]: ...


DEFAULT_MAX_LINES = 30
MAX_DRIFT_AFTER_STRUCTURE = 5
"""Drift lines shown after structural changes: a taste of the consequence."""
MAX_NAMES = 4
"""Node names listed in a merged change before ``and N more``."""


def plural(n: int, word: str) -> str:
    """``1 node``, ``2 nodes``: a count and its noun (regular plurals only)."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def fmt(value: Any) -> str:
    """One value as the snapshot shows it: floats to 6 significant digits, lists
    ``[a,b]``, ``null``, ``true``/``false``."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return "[" + ",".join(fmt(v) for v in value) + "]"
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def fmt_any(value: Any) -> str:
    """A value that may be a one-element list or a mapping (``{count: 2}``)."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {fmt(v)}" for k, v in value.items()) + "}"
    return fmt(value)


def names(where: list[str]) -> str:
    """The first :data:`MAX_NAMES` names, then ``and N more``."""
    return first_names(where, MAX_NAMES)


def tolerance_text(tolerance: float | None) -> str:
    """``exact`` or ``tolerance 0.003`` for a drift change."""
    return "exact" if not tolerance else f"tolerance {tolerance:.3g}"


def side(value: Any) -> str:
    """One side of ``old -> new``: :func:`fmt`, but ``absent`` where the key or entry
    is missing on that side (a change's ``old``/``new`` of ``None``)."""
    return "absent" if value is None else fmt(value)


def value_change(c: Change) -> str:
    """``field old -> new`` (``old -> new`` when the whole entry changed); a side
    without the key reads ``absent``."""
    prefix = f"{c.field} " if c.field else ""
    return f"{prefix}{side(c.old)} -> {side(c.new)}"


def where(c: Change) -> str:
    """The place of a change: node name, ``section.entry``, ``section name`` or its label."""
    if c.label:
        return c.label
    if c.section in ("nodes", "granularity"):
        return c.node or c.section
    return f"{c.section}.{c.node}" if c.node else f"section {c.section}"


def detail(c: Change) -> str:
    """What changed: ``field old -> new``, with the tolerance for drift, or the
    change's own phrase; empty for an added or removed entry."""
    if c.note:
        return c.note
    if c.kind == "drift":
        return f"{value_change(c)} ({tolerance_text(c.tolerance)})"
    if c.kind == "changed":
        return value_change(c)
    return ""


def change_line(c: Change) -> str:
    """``<kind>: <where> <detail>``."""
    text = detail(c)
    return f"{c.kind}: {where(c)}" + (f" {text}" if text else "")


def summary(result: Comparison) -> str:
    """One line: counts per kind and the tolerance, e.g.
    ``graphir: 1 added, 2 drift (rtol=0.001, atol=1e-05)``."""
    parts = [f"{n} {k}" for k, n in result.counts().items() if n]
    tol = result.tolerance
    extra = ""
    if tol.patterns:
        extra += f"; own tolerance for {plural(len(tol.patterns), 'node pattern')}"
    if result.ignored:
        extra += f"; {plural(len(result.ignored), 'node')} ignored"
    return (
        f"graphir: {', '.join(parts) or 'no differences'} "
        f"(rtol={tol.rtol:g}, atol={tol.atol:g}{extra})"
    )


def shown_changes(result: Comparison, max_lines: int) -> tuple[list[Change], list[Change]]:
    """Split the changes into those a message of ``max_lines`` lines shows and the rest.

    Structural changes come before drift: when the architecture changed, the numeric
    drift downstream of it is a consequence, of which at most
    :data:`MAX_DRIFT_AFTER_STRUCTURE` lines are shown. ``max_lines <= 0`` shows all.
    """
    structural = [c for c in result.changes if c.kind != "drift"]
    drift = [c for c in result.changes if c.kind == "drift"]
    limit = max_lines if max_lines > 0 else len(result.changes)
    shown = structural[:limit]
    room = limit - len(shown)
    if structural and max_lines > 0:
        room = min(room, MAX_DRIFT_AFTER_STRUCTURE)
    shown += drift[: max(room, 0)]
    shown_ids = {id(c) for c in shown}
    return shown, [c for c in result.changes if id(c) not in shown_ids]


def left_out(rest: list[Change], hint: str) -> str:
    """``... and 12 more (3 changed, 9 drift); <hint>``."""
    counts: dict[str, int] = {}
    for c in rest:
        counts[c.kind] = counts.get(c.kind, 0) + 1
    text = ", ".join(f"{n} {k}" for k, n in counts.items())
    return f"  ... and {len(rest)} more ({text}); {hint}"


MORE_HINT = "raise the ini option graphir_max_diff_lines (0 = no limit) to see them all"


def lines(
    result: Comparison, max_lines: int = DEFAULT_MAX_LINES, hint: str = MORE_HINT
) -> list[str]:
    """Summary line, then at most ``max_lines`` change lines (0 = all), then a line
    saying what was left out and ``hint`` (how to see it)."""
    shown, rest = shown_changes(result, max_lines)
    out = [summary(result)]
    out.extend(f"  {change_line(c)}" for c in shown)
    if rest:
        out.append(left_out(rest, hint))
    return out


# -- phrases for changes that are not a value change -----------------------------------


def folded_module(module_class: str, inside: int) -> str:
    """``(module Sequential, and 6 nodes inside it)``."""
    extra = f", and {plural(inside, 'node')} inside it" if inside else ""
    return f"(module {module_class}{extra})"


def merged(verb: str, where_: list[str], noun: str = "node") -> str:
    """``(read by 3 nodes: a, b, c)``, ``(in 1 entry: x)``."""
    return f"({verb} {plural(len(where_), noun)}: {names(where_)})"


def read_instead(old: str, readers: list[str]) -> str:
    """``read in place of act/relu#0 by 2 nodes: fc2, fc2/linear#0``: a replacement
    node and the readers the replaced one had."""
    return f"read in place of {old} by {plural(len(readers), 'node')}: {names(readers)}"


def granularity(old: str, new: str) -> str:
    """Why a snapshot at another granularity is not compared node by node."""
    return (
        f"{old} -> {new}: the snapshot was taken at another granularity "
        "(trace's view/depth/blackbox); trace with the snapshot's options, or run "
        "`pytest --graphir-update` to re-take it"
    )


def graph_break(entry: Any) -> str:
    """``graph break in <scope> (<location>): <reason>``."""
    if not isinstance(entry, dict):
        return str(entry)
    scope = entry.get("scope") or "the model's forward"
    location = f" ({entry['location']})" if entry.get("location") else ""
    return f"graph break in {scope}{location}: {entry.get('reason')}"
