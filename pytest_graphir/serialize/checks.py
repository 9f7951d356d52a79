"""What a valid snapshot is, for both formats' readers: the error every refusal
raises (:class:`SnapshotFormatError`), the sections and the nesting bound, the
characters a snapshot never holds, and the document's validation (:func:`_validate`),
with the small helpers their messages share."""

from __future__ import annotations

import re
from typing import Any

from ..ir import (
    OPTIONAL_SECTIONS,
    STAT_KEYS_BOOL,
    STAT_KEYS_FLOAT,
    STAT_KEYS_INT,
    section_problems,
)

SECTIONS = ("meta", "inputs", "nodes", "outputs")

MAX_DEPTH = 64
"""Deepest nesting a snapshot may have, in a line's JSON (or, for ``graphir migrate``,
format 1's YAML collections). Real snapshots nest about 6 deep (document, section, node, ``args``, a
tuple argument, a shape)."""
# Characters a snapshot never contains: C0/C1 controls other than tab and newline
# (a terminal escape), DEL, surrogates, U+FFFE/U+FFFF. YAML's other line breaks
# (NEL, U+2028, U+2029) are allowed: dumps may write them inside a quoted name.
_BAD_CHAR = re.compile("[^\t\n\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class SnapshotFormatError(ValueError):
    """A snapshot text that is not a valid graphir document of this format version.

    Attributes:
        line: 1-based line of the problem when known, else None.
        reason: what is wrong, without the location.
    """

    def __init__(self, reason: str, line: int | None = None) -> None:
        self.reason = reason
        self.line = line
        super().__init__(f"line {line}: {reason}" if line else reason)


def _line_column(text: Any, position: int) -> tuple[int, int]:
    """The 1-based line and column of ``position`` in ``text`` (str or bytes)."""
    newline = "\n" if isinstance(text, str) else b"\n"
    return text.count(newline, 0, position) + 1, position - text.rfind(newline, 0, position)


def _check_characters(text: str) -> None:
    """Refuse control characters (terminal escapes included) and stray carriage returns."""
    if (bad := _BAD_CHAR.search(text)) is not None:
        line, column = _line_column(text, bad.start())
        what = (
            "a carriage return not followed by a newline"
            if bad.group() == "\r"
            else f"the control character U+{ord(bad.group()):04X}"
        )
        raise SnapshotFormatError(
            f"{what} at column {column}: snapshots contain none (a binary or "
            "mangled file, or a hand edit)",
            line,
        )


MAX_DIGITS = 308
"""Most digits of an integer in a snapshot: ``10**308 - 1`` is below a float's largest
value (about 1.8e308), so every statistic converts to float when compared (a longer
one raised ``OverflowError`` there, or ``ValueError`` from ``int()`` past Python's
4,300-digit limit). Real snapshots hold integers of about 20 digits at most (int64)."""
_LONG_INTEGER = re.compile(f"[0-9]{{{MAX_DIGITS + 1}}}")
LONG_INTEGER = (
    f"an integer of more than {MAX_DIGITS} digits, beyond the range of the floats "
    "statistics are compared in: snapshots hold no such number (a hand edit or a "
    "mangled file)"
)


def _check_integers(text: str, line: int | None = None) -> None:
    """Refuse a run of more than :data:`MAX_DIGITS` digits in ``text``, at ``line``
    (``text`` is that line's) or else at the run's line in ``text``."""
    if found := _LONG_INTEGER.search(text):
        raise SnapshotFormatError(LONG_INTEGER, line or _line_column(text, found.start())[0])


def _shown(value: str, limit: int = 40) -> str:
    """A short, escaped rendering of text taken from a file, for a message."""
    text = value.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[:limit] + "..."


def _validate(doc: Any, text: str, key_lines: dict[tuple[str, ...], int]) -> None:
    last = text.rstrip("\n").count("\n") + 1

    def line(section: str, key: Any = None) -> int:
        found = key_lines.get((section, str(key))) if key is not None else None
        return found or key_lines.get((section,)) or last

    def name_of(value: Any) -> str:
        return repr(value) if len(repr(value)) <= 60 else _shown(repr(value), 60)

    if not isinstance(doc, dict):
        raise SnapshotFormatError("the document should be a mapping of sections", 3)
    order = [*SECTIONS, *OPTIONAL_SECTIONS]
    for i, section in enumerate(SECTIONS):
        if section not in doc:
            after = [key_lines[(s,)] for s in order[i + 1 :] if (s,) in key_lines]
            raise SnapshotFormatError(f"missing section {section!r}", min(after, default=last))
        if not isinstance(doc[section], dict):
            raise SnapshotFormatError(f"section {section!r} should be a mapping", line(section))
    for name, what in section_problems({k: v for k, v in doc.items() if k not in SECTIONS}):
        raise SnapshotFormatError(f"section {name_of(name)}: {what}", line(str(name)))
    for section in [s for s in order[1:] if isinstance(doc.get(s), dict)]:  # after meta
        for name in doc[section]:
            if not isinstance(name, str):
                raise SnapshotFormatError(
                    f"{section}: key {name_of(name)} should be a string", line(section, name)
                )
    for name, node in doc["nodes"].items():
        if (
            not isinstance(node, dict)
            or not ({"op", "module"} & set(node))
            or not isinstance(node.get("out", []), list)
        ):
            raise SnapshotFormatError(
                f"node {name_of(name)} should be a mapping with 'op' or 'module' and an 'out' list",
                line("nodes", name),
            )
    _check_params_stats(doc, line)


def _stat_keys(entry: dict[str, Any]) -> tuple[str, ...]:
    """The statistics a trace with statistics writes for a ``params`` entry; none for
    a dtype that gets none (complex, quantized) or an empty tensor."""
    dtype, shape = str(entry.get("dtype")), entry.get("shape")
    if not isinstance(shape, list) or 0 in shape:
        return ()
    if dtype == "bool":
        return STAT_KEYS_BOOL
    if dtype.startswith(("float", "bfloat")):
        return STAT_KEYS_FLOAT
    return STAT_KEYS_INT if dtype.startswith(("int", "uint")) else ()


def _check_params_stats(doc: dict[str, Any], line: Any) -> None:
    """Refuse a ``params`` entry without its statistics where others have theirs (a
    hand edit that would switch that weight's check off silently). A trace without
    statistics, or of a model on the ``meta`` device, has none in any entry."""
    params = doc.get("params")
    if not isinstance(params, dict) or doc["meta"].get("stats") is False:
        return
    entries = [(n, e) for n, e in params.items() if isinstance(e, dict)]
    if not any(set(_stat_keys(e)) & set(e) for _, e in entries):
        return
    for name, entry in entries:
        if missing := [k for k in _stat_keys(entry) if k not in entry]:
            raise SnapshotFormatError(
                f"params entry {name!r} lacks its statistics ({', '.join(missing)}) "
                "where the other parameters have theirs: a hand edit would switch its "
                "check off; restore the file, or run `pytest --graphir-update`",
                line("params", name),
            )
