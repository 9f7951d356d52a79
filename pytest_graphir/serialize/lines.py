"""Reading a format-2 snapshot: one line at a time, each value one line of JSON, its
nesting bounded by :data:`~.checks.MAX_DEPTH` (:func:`_parse_lines`)."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from .checks import MAX_DEPTH, MAX_DIGITS, SnapshotFormatError, _check_integers, _shown

_SECTION_LINE = re.compile(r"^([A-Za-z_]+):(?: (.*))?$")


def _parse_lines(text: str) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    """Parse a format-2 snapshot: section lines, ``  <key>: <JSON>`` entries and
    ``  - <JSON>`` items, each value read by :func:`json.loads` (C speed). Comment
    lines (``#``) and blank lines are skipped.

    Returns:
        The document and the 1-based line of each section ``(section,)`` and entry
        ``(section, key)``, for :func:`_validate`'s messages.

    Raises:
        SnapshotFormatError: a line that is none of these, invalid JSON, a duplicate
            section or key, nesting deeper than :data:`MAX_DEPTH`; with its line.
    """
    doc: dict[str, Any] = {}
    key_lines: dict[tuple[str, ...], int] = {}
    section: str | None = None
    body: Any = None
    for number, line in enumerate(text.split("\n"), 1):
        if not line or line[0] == "#":
            continue
        if line[0] != " ":
            if (m := _SECTION_LINE.match(line)) is None:
                raise SnapshotFormatError(
                    f"{_shown(line)!r} is not a section line ('<section>:' or '<section>: <JSON>')",
                    number,
                )
            section = m.group(1)
            if section in doc:
                raise SnapshotFormatError(f"duplicate section {section!r}", number)
            key_lines[(section,)] = number
            # a bare section line is filled by its entries; one with a value is done
            body = doc[section] = None if m[2] is None else _value(m[2], number)
            section = section if m[2] is None else None
            continue
        if section is None or not line.startswith("  "):
            raise SnapshotFormatError(
                "an indented line outside a section (or indented by other than two spaces)",
                number,
            )
        item = line.startswith("  - ")
        if body is None:
            body = doc[section] = [] if item else {}
        if item:
            if not isinstance(body, list):
                raise SnapshotFormatError(f"{section}: a '- ' item among named entries", number)
            body.append(_value(line[4:], number))
            continue
        key, rest = _entry_key(line, number)
        if not isinstance(body, dict):
            raise SnapshotFormatError(f"{section}: a named entry among '- ' items", number)
        if key in body:
            raise SnapshotFormatError(f"duplicate key {key!r}", number)
        key_lines[(section, key)] = number
        body[key] = _value(rest, number)
    # a section line with no entries under it: an empty mapping
    return {name: {} if value is None else value for name, value in doc.items()}, key_lines


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: a JSON object, refusing a key written twice (a hand
    edit gone wrong, which ``json.loads`` would silently resolve to the last)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise SnapshotFormatError(f"duplicate key {key!r}")
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)
_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__


def _entry_key(line: str, number: int) -> tuple[str, str]:
    """Split ``  <key>: <JSON>`` into the key and the JSON text."""
    if line[2:3] == '"':
        try:
            key, end = _DECODER.raw_decode(line, 2)
        except ValueError:
            raise SnapshotFormatError("a quoted name that is not a JSON string", number) from None
        if line[end : end + 2] != ": ":
            raise SnapshotFormatError("a name should be followed by ': ' and a value", number)
        return key, line[end + 2 :]
    sep = line.find(": ", 2)
    if sep < 0 or " " in line[2:sep]:
        raise SnapshotFormatError(
            "an entry should read '  <name>: <JSON value>' (a name with spaces or "
            "punctuation in double quotes)",
            number,
        )
    return line[2:sep], line[sep + 2 :]


def _value(raw: str, number: int) -> Any:
    """One JSON value of line ``number``, nesting bounded by :data:`MAX_DEPTH`."""
    if raw.count("[") + raw.count("{") > MAX_DEPTH and _depth(raw) > MAX_DEPTH:
        raise SnapshotFormatError(
            f"nested deeper than {MAX_DEPTH} levels: snapshots nest a few levels only", number
        )
    if len(raw) > MAX_DIGITS:  # a long line only: a call per line costs (benchmarks/README.md)
        _check_integers(raw, number)
    try:
        # the decoder's C scanner directly: JSONDecoder.decode adds two Python
        # frames and two regex matches per line (benchmarks/README.md)
        try:
            value, end = _SCAN(raw, 0)
        except StopIteration:  # no value where the text starts
            end = -1
        if end == len(raw):
            return value
        # leading or trailing whitespace, extra data or no value: decode() reads the
        # first, and words the error of the others
        return _DECODER.decode(raw)
    except SnapshotFormatError as exc:  # a duplicate key (_unique_keys)
        raise SnapshotFormatError(exc.reason, number) from None
    except json.JSONDecodeError as exc:
        raise SnapshotFormatError(
            f"invalid JSON at column {exc.colno}: {exc.msg}", number
        ) from None


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _depth(raw: str) -> int:
    """Deepest bracket nesting of a JSON text (strings skipped); only asked for when
    the text holds more than :data:`MAX_DEPTH` brackets at all."""
    steps = (1 if ch in "[{" else -1 for ch in _JSON_STRING.sub("", raw) if ch in "[]{}")
    return max(itertools.accumulate(steps, initial=0))
