"""The ``.graphir`` snapshot text format: write, and load safely.

A snapshot (format 2) is one entry per line, each value one line of JSON, so a
pull-request diff shows exactly the nodes that changed::

    # graphir-format: 2
    # pytest-graphir snapshot of GPT2LMHeadModel; regenerate with `pytest --graphir-update`
    meta: {"model": "GPT2LMHeadModel", "args": ["input_ids"], "kwargs": [], ...}
    inputs:
      input_ids: {"shape": [1, 16], "dtype": "int64", "min": 6307, "max": 49922, ...}
    nodes:
      transformer/view#0: {"op": "view", "args": ["$input_ids", -1, 16], "out": [...]}
    outputs:
      logits: {"ref": "$lm_head/linear#0", "shape": [1, 16, 50257], "dtype": "float32"}
    hooks:                      # optional sections: trace(..., hooks=True, backward=True)
      - "<root> forward_pre"
    # end of graphir snapshot

Statistics are rounded to 6 significant digits when written (tolerances apply when
comparing). Values are written by :func:`json.dumps` (every character outside
printable ASCII escaped) and read back by :func:`json.loads`, one line at a time:
JSON has no tags, anchors or aliases, so nothing is executed or expanded, and a line
that does not parse is an error at that line. Format 1 (YAML flow mappings, written
before) is still read, by PyYAML's safe loader after a scan that refuses anchors,
aliases, tags and deep nesting. The end line makes a truncated file an error rather
than a silently shorter graph. Nothing machine-specific is compared: no memory
addresses, ``id()`` values, paths or timestamps are written, and where the snapshot
was written (torch and package versions, device) is one comment line before the end
line (:mod:`pytest_graphir.provenance`), which the loader keeps apart.

Loading is bounded (see :func:`loads`): nesting deeper than :data:`MAX_DEPTH` is
refused (no recursion overflow). Every error carries the 1-based line of the problem.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import yaml

from . import provenance as _provenance
from .collector import collector_paused
from .ir import (
    COUNT_KEYS,
    FORMAT_VERSION,
    OPTIONAL_SECTIONS,
    SEQUENCE_SECTIONS,
    STAT_KEYS_FLOAT,
    GraphIR,
)

HEADER = f"# graphir-format: {FORMAT_VERSION}"
END = "# end of graphir snapshot"
SECTIONS = ("meta", "inputs", "nodes", "outputs")
SIGNIFICANT_DIGITS = 6
PROVENANCE_KEY = "provenance"
"""Key of a loaded document that holds the provenance comment's content (where the
snapshot was written); no comparison reads it."""
_ROUNDED = frozenset(STAT_KEYS_FLOAT) - COUNT_KEYS
_HEADER_RE = re.compile(r"^# graphir-format: (\S+)\s*$")
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/#@]*$")
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})

MAX_DEPTH = 64
"""Deepest nesting of YAML collections a snapshot may have. Real snapshots nest
about 6 deep (document, section, node, ``args``, a tuple argument, a shape)."""
BOM = "\ufeff"
# Characters a snapshot never contains: C0/C1 controls other than tab and newline
# (a terminal escape), DEL, surrogates, U+FFFE/U+FFFF. YAML's other line breaks
# (NEL, U+2028, U+2029) are allowed: dumps may write them inside a quoted name.
_BAD_CHAR = re.compile("[^\t\n\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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


class _Loader(_BaseLoader):  # type: ignore[misc]
    """Safe loader that refuses duplicate mapping keys (a hand-edit gone wrong)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise SnapshotFormatError(f"duplicate key {key!r}", key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_Loader.add_constructor(
    "tag:yaml.org,2002:map", lambda loader, node: loader.construct_mapping(node)
)


def _round(value: Any) -> Any:
    """A statistic at :data:`SIGNIFICANT_DIGITS` significant digits, with ``-0.0`` written
    as ``0.0``: which zero a min or max reports depends on the order its reduction met
    them (the C extension's lanes, torch's vectorised and threaded ``amin``), which is
    not the model's business."""
    if isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}") + 0.0  # -0.0 + 0.0 == +0.0
    return value


def _rounded(entry: Any) -> Any:
    """Round the statistics of tensor entries, at any depth."""
    if isinstance(entry, dict):
        if "dtype" in entry:
            return {k: (_round(v) if k in _ROUNDED else v) for k, v in entry.items()}
        return {k: _rounded(v) for k, v in entry.items()}
    if isinstance(entry, list):
        return [_rounded(v) for v in entry]
    return entry


def _flow(value: Any) -> str:
    text: str = yaml.dump(
        value,
        Dumper=_Dumper,
        default_flow_style=True,
        width=2**30,
        sort_keys=False,
        allow_unicode=True,
    )
    return text[:-4] if text.endswith("\n...\n") else text.rstrip("\n")


def _key(name: str) -> str:
    if _PLAIN_KEY.match(name) and name.lower() not in _YAML_WORDS:
        return name
    return _flow(name)


def _json(value: Any) -> str:
    """One value as a line's JSON text: NaN and infinities as ``NaN``/``Infinity``, every
    character outside printable ASCII escaped (``\\u001b``, ``\\u00e9``), so a name
    never puts a control character or a line break into the file."""
    text = json.dumps(value, ensure_ascii=True, allow_nan=True)
    return text.replace("\x7f", "\\u007f") if "\x7f" in text else text


_LINE_BREAKING = re.compile(f"[\n\r\x85\u2028\u2029]|{_BAD_CHAR.pattern}")


def _comment(text: str) -> str:
    """``text`` as it may stand in a comment line: line breaks and the characters
    :func:`loads` refuses written as ``\\n``-style escapes, so a model called
    ``"A\\nnodes:"`` cannot start a line of its own; any other text unchanged."""
    if _LINE_BREAKING.search(text) is None:
        return text
    return _LINE_BREAKING.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _json_key(name: str) -> str:
    """A section key: bare when plain (``blk/gelu#0``), else a JSON string."""
    return name if _PLAIN_KEY.match(name) else _json(name)


def dumps(graph: GraphIR | dict[str, Any]) -> str:
    """Serialize a GraphIR (or its ``to_data()`` document) to snapshot text (format 2).

    One entry per line: ``  <name>: <JSON value>`` (a name that is not plain is a JSON
    string), a sequence item as ``  - <JSON value>``; statistics rounded to
    :data:`SIGNIFICANT_DIGITS` significant digits. Written with :func:`json.dumps`, read
    back with :func:`json.loads` line by line (see :func:`loads`).

    Returns:
        The text, ending in a newline; byte-identical for identical input.
    """
    doc = graph.to_data() if isinstance(graph, GraphIR) else graph
    lines = [
        HEADER,
        f"# pytest-graphir snapshot of {_comment(str(doc['meta'].get('model', '?')))}; "
        "regenerate with `pytest --graphir-update`",
        f"meta: {_json(doc['meta'])}",
    ]
    for section in ("inputs", "nodes", "outputs"):
        entries = doc[section]
        if not entries:
            lines.append(f"{section}: {{}}")
            continue
        lines.append(f"{section}:")
        for name, value in entries.items():
            lines.append(f"  {_json_key(str(name))}: {_json(_rounded(value))}")
    for section in OPTIONAL_SECTIONS:
        if section not in doc:
            continue
        entries = doc[section]
        if not entries:
            lines.append(f"{section}: {'[]' if section in SEQUENCE_SECTIONS else '{}'}")
            continue
        lines.append(f"{section}:")
        if section in SEQUENCE_SECTIONS:
            lines.extend(f"  - {_json(item)}" for item in entries)
        else:
            lines.extend(f"  {_json_key(str(k))}: {_json(_rounded(v))}" for k, v in entries.items())
    written = graph.provenance if isinstance(graph, GraphIR) else graph.get(PROVENANCE_KEY)
    if written:
        lines.append(_provenance.line(written))  # a comment: never compared
    lines.append(END)
    return "\n".join(lines) + "\n"


def decode(data: bytes) -> str:
    """Decode the bytes of a snapshot file to text.

    A UTF-8 byte-order mark (written by some Windows editors) is skipped.

    Args:
        data: the file's bytes.

    Returns:
        The text (line endings are left to :func:`loads`).

    Raises:
        SnapshotFormatError: the bytes are not UTF-8 (another encoding, a binary
            file, a merge of two encodings); the line of the first bad byte.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = exc.start
        line = data.count(b"\n", 0, start) + 1
        column = start - (data.rfind(b"\n", 0, start) + 1) + 1
        raise SnapshotFormatError(
            f"not UTF-8 text: byte 0x{data[start]:02x} at column {column} cannot be "
            "decoded (the file was saved in another encoding, or is binary)",
            line,
        ) from None


def _line_at(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def _check_characters(text: str) -> None:
    """Refuse control characters (terminal escapes included) and stray carriage returns."""
    bad = _BAD_CHAR.search(text)
    if bad is not None:
        pos = bad.start()
        column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        what = (
            "a carriage return not followed by a newline"
            if bad.group() == "\r"
            else f"the control character U+{ord(bad.group()):04X}"
        )
        raise SnapshotFormatError(
            f"{what} at column {column}: snapshots contain none (a binary or "
            "mangled file, or a hand edit)",
            _line_at(text, pos),
        )


def loads(text: str) -> dict[str, Any]:
    """Parse and validate snapshot text (format 2, or format 1 as written before).

    Loading is bounded in time and memory by the text's size: a leading byte-order
    mark is skipped, CRLF line endings are read as LF, control characters are
    refused, and each line's JSON is parsed on its own with nesting bounded by
    :data:`MAX_DEPTH` (:func:`_parse_lines`). A format-1 file is YAML: before PyYAML
    builds any object one pass over its event stream (libyaml's iterative parser, no
    recursion) refuses anchors, aliases and tags and nesting deeper than
    :data:`MAX_DEPTH` (:func:`_loads_yaml`).

    Args:
        text: the snapshot text (see :func:`decode` for a file's bytes).

    Returns:
        The document: ``{"meta": {...}, "inputs": {...}, "nodes": {...}, "outputs": {...}}``.

    Raises:
        SnapshotFormatError: not a graphir snapshot, another format version (the
            message says to regenerate), invalid JSON (format 1: invalid YAML, a YAML
            anchor, alias or tag), a control character, too
            deep nesting, a duplicate key, a missing or unknown section, a
            malformed node, or a truncated file (no end line); always with the
            1-based line of the problem.
    """
    if text.startswith(BOM):
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    first = text.split("\n", 1)[0]
    match = _HEADER_RE.match(first)
    if not match:
        raise SnapshotFormatError(f"not a graphir snapshot: the first line should be {HEADER!r}", 1)
    version = match.group(1)
    if version not in ("1", str(FORMAT_VERSION)):
        raise SnapshotFormatError(
            f"written in graphir format version {_shown(version)}; this pytest-graphir "
            f"reads versions 1 and {FORMAT_VERSION}: regenerate it with "
            "`pytest --graphir-update`",
            1,
        )
    stripped = text.rstrip("\n").rsplit("\n", 1)
    if len(stripped) < 2 or stripped[-1].strip() != END:
        raise SnapshotFormatError(
            f"truncated: the last line should be {END!r}", text.rstrip("\n").count("\n") + 1
        )
    _check_characters(text)
    # a load builds a few objects per node and no reference cycle: with the collector
    # on, the full collections they set off walk every object of the process (a test
    # process holding a model: 0.5-0.7 s on every other load of an 11.5k-node snapshot)
    with collector_paused():
        if version == "1":
            doc = _loads_yaml(text)
        else:
            doc, key_lines = _parse_lines(text)
            _validate(doc, text, key_lines)
    written = _provenance.read(text)
    if written is not None:  # kept (never compared) so that dumps(loads(text)) == text
        doc[PROVENANCE_KEY] = written
    return doc


def _loads_yaml(text: str) -> dict[str, Any]:
    """Load a format-1 snapshot (YAML flow mappings, one node per line) with PyYAML's
    safe loader, after :func:`_scan_events` refused anchors, aliases, tags and deep
    nesting; validated as format 2 is."""
    try:
        key_lines = _scan_events(text)
        doc = yaml.load(text, Loader=_Loader)
    except SnapshotFormatError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise SnapshotFormatError(f"invalid YAML: {exc.problem or exc}", line) from None
    except yaml.reader.ReaderError as exc:
        raise SnapshotFormatError(
            f"invalid YAML: {exc.reason}", _line_at(text, exc.position)
        ) from None
    except yaml.YAMLError as exc:
        raise SnapshotFormatError(f"invalid YAML: {exc}", 1) from None
    except RecursionError:  # pragma: no cover - _scan_events caps the depth first
        raise SnapshotFormatError(f"nested deeper than {MAX_DEPTH} levels", 1) from None
    except ValueError:  # int(): more digits than sys.get_int_max_str_digits()
        raise SnapshotFormatError(_too_many_digits(), _long_integer_line(text)) from None
    _validate(doc, text, key_lines)
    return doc  # type: ignore[no-any-return]


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
            m = _SECTION_LINE.match(line)
            if m is None:
                raise SnapshotFormatError(
                    f"{_shown(line)!r} is not a section line ('<section>:' or '<section>: <JSON>')",
                    number,
                )
            section = m.group(1)
            if section in doc:
                raise SnapshotFormatError(f"duplicate section {section!r}", number)
            key_lines[(section,)] = number
            if m.group(2) is None:
                body = doc[section] = None  # filled by its entries
            else:
                doc[section] = body = _value(m.group(2), number)
                section = None
            continue
        if section is None or not line.startswith("  "):
            raise SnapshotFormatError(
                "an indented line outside a section (or indented by other than two spaces)",
                number,
            )
        if line.startswith("  - "):
            if body is None:
                body = doc[section] = []
            if not isinstance(body, list):
                raise SnapshotFormatError(f"{section}: a '- ' item among named entries", number)
            body.append(_value(line[4:], number))
            continue
        key, rest = _entry_key(line, number)
        if body is None:
            body = doc[section] = {}
        if not isinstance(body, dict):
            raise SnapshotFormatError(f"{section}: a named entry among '- ' items", number)
        if key in body:
            raise SnapshotFormatError(f"duplicate key {key!r}", number)
        key_lines[(section, key)] = number
        body[key] = _value(rest, number)
    for name, value in doc.items():
        if value is None:
            doc[name] = {}  # a section line with no entries under it
    return doc, key_lines


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook``: a JSON object, refusing a key written twice (a hand
    edit gone wrong, which ``json.loads`` would silently resolve to the last)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)
_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__
_JSON_SPACE = ("", " ", "\t", "\n", "\r")
"""A value's first character for which :func:`_value` leaves the text to
``JSONDecoder.decode`` (whitespace JSON allows before a value, or nothing at all)."""


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
    try:
        if raw[:1] not in _JSON_SPACE:
            # the decoder's C scanner directly: JSONDecoder.decode adds two Python
            # frames and two regex matches per line (a fifth of loads' time)
            try:
                value, end = _SCAN(raw, 0)
            except StopIteration as stop:
                raise json.JSONDecodeError("Expecting value", raw, stop.value) from None
            if end == len(raw):
                return value
        return _DECODER.decode(raw)  # leading or trailing whitespace, or extra data
    except _DuplicateKey as exc:
        raise SnapshotFormatError(f"duplicate key {exc.key!r}", number) from None
    except json.JSONDecodeError as exc:
        raise SnapshotFormatError(
            f"invalid JSON at column {exc.colno}: {exc.msg}", number
        ) from None
    except ValueError:  # int(): more digits than sys.get_int_max_str_digits()
        raise SnapshotFormatError(_too_many_digits(), number) from None
    except RecursionError:  # pragma: no cover - _depth bounds it first
        raise SnapshotFormatError(f"nested deeper than {MAX_DEPTH} levels", number) from None


def _too_many_digits() -> str:
    """The reason for an integer Python refuses to convert (``ValueError`` from
    ``int()``, raised by ``json`` and PyYAML alike)."""
    return (
        f"an integer of more than {sys.get_int_max_str_digits()} digits, Python's limit "
        "on converting text to int: snapshots hold no such number (a hand edit or a "
        "mangled file)"
    )


def _long_integer_line(text: str) -> int | None:
    """The line of the first run of digits longer than Python's conversion limit."""
    limit = sys.get_int_max_str_digits()
    found = re.search(f"[0-9]{{{limit + 1},}}", text) if limit else None
    return _line_at(text, found.start()) if found else None


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _depth(raw: str) -> int:
    """Deepest bracket nesting of a JSON text (strings skipped); only asked for when
    the text holds more than :data:`MAX_DEPTH` brackets at all."""
    depth = deepest = 0
    for ch in _JSON_STRING.sub("", raw):
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _shown(value: str, limit: int = 40) -> str:
    """A short, escaped rendering of text taken from a file, for a message."""
    text = value.encode("unicode_escape").decode("ascii")
    return text if len(text) <= limit else text[:limit] + "..."


_START = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_END = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def _scan_events(text: str) -> dict[tuple[str, ...], int]:
    """One pass over the YAML event stream, before anything is constructed.

    Refuses what the format never writes: anchors (``&a``), aliases (``*a``, the
    alias bomb), explicit tags (``!!python/object``), and nesting deeper than
    :data:`MAX_DEPTH`. libyaml's parser keeps its state on the heap, so even a
    file of 10 million ``[`` is refused at the 65th.

    Returns:
        The 1-based line of each top-level key ``(section,)`` and of each key of a
        section's mapping ``(section, name)``, for error messages.

    Raises:
        SnapshotFormatError: one of the above, with its line.
        yaml.YAMLError: the text is not YAML (the caller adds the line).
    """
    lines: dict[tuple[str, ...], int] = {}
    # per open collection: [is_mapping, next_is_key, current key]
    stack: list[list[Any]] = []
    events: Any = yaml.parse(text, Loader=_BaseLoader)
    for event in events:
        kind = type(event)
        if kind is yaml.ScalarEvent or kind in _START:
            if event.anchor is not None:
                raise SnapshotFormatError(
                    f"YAML anchor '&{_shown(event.anchor)}': snapshots never use anchors "
                    "or aliases",
                    event.start_mark.line + 1,
                )
            if (event.tag is not None and kind is not yaml.ScalarEvent) or (
                kind is yaml.ScalarEvent and event.implicit == (False, False)
            ):
                tag = (event.tag or "").replace("tag:yaml.org,2002:", "!!")
                raise SnapshotFormatError(
                    f"YAML tag '{_shown(tag)}': snapshots never use tags", event.start_mark.line + 1
                )
            if stack:
                top = stack[-1]
                if top[0]:
                    if top[1]:
                        key = event.value if kind is yaml.ScalarEvent else None
                        top[2] = key
                        if key is not None and len(stack) <= 2:
                            path = (key,) if len(stack) == 1 else (stack[0][2], key)
                            lines.setdefault(path, event.start_mark.line + 1)
                    top[1] = not top[1]
            if kind is not yaml.ScalarEvent:
                stack.append([kind is yaml.MappingStartEvent, True, None])
                if len(stack) > MAX_DEPTH:
                    raise SnapshotFormatError(
                        f"nested deeper than {MAX_DEPTH} levels: snapshots nest a few levels only",
                        event.start_mark.line + 1,
                    )
        elif kind in _END:
            stack.pop()
        elif kind is yaml.AliasEvent:
            raise SnapshotFormatError(
                f"YAML alias '*{_shown(event.anchor or '')}': snapshots never use anchors "
                "or aliases",
                event.start_mark.line + 1,
            )
    return lines


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
    for section in SECTIONS:
        if section not in doc:
            after = [
                key_lines[(s,)] for s in order[order.index(section) + 1 :] if (s,) in key_lines
            ]
            raise SnapshotFormatError(f"missing section {section!r}", min(after) if after else last)
        if not isinstance(doc[section], dict):
            raise SnapshotFormatError(f"section {section!r} should be a mapping", line(section))
    for section in OPTIONAL_SECTIONS:
        if section in doc:
            kind = list if section in SEQUENCE_SECTIONS else dict
            if not isinstance(doc[section], kind):
                raise SnapshotFormatError(
                    f"section {section!r} should be a {'list' if kind is list else 'mapping'}",
                    line(section),
                )
    unknown = set(doc) - set(SECTIONS) - set(OPTIONAL_SECTIONS)
    if unknown:
        name = sorted(unknown, key=str)[0]
        raise SnapshotFormatError(f"unknown section {name_of(name)}", line(str(name)))
    for section in (
        "inputs",
        "nodes",
        "outputs",
        *[s for s in OPTIONAL_SECTIONS if isinstance(doc.get(s), dict)],
    ):
        for name in doc[section]:
            if not isinstance(name, str):
                raise SnapshotFormatError(
                    f"{section}: key {name_of(name)} should be a string", line(section, name)
                )
    for section in SEQUENCE_SECTIONS:
        for item in doc.get(section) or []:
            if not isinstance(item, str):
                raise SnapshotFormatError(
                    f"{section}: entry {name_of(item)} should be a string", line(section)
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
