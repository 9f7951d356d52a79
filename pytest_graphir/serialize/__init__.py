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
before) is no longer read: :func:`upgrade` (``graphir migrate FILE...``) rewrites such a
file in the current format. The end line makes a truncated file an error rather
than a silently shorter graph. Nothing machine-specific is compared: no memory
addresses, ``id()`` values, paths or timestamps are written, and where the snapshot
was written (torch and package versions, device) is one comment line before the end
line (:mod:`pytest_graphir.provenance`), which the loader keeps apart.

Loading is bounded (see :func:`loads`): nesting deeper than :data:`MAX_DEPTH` is
refused (no recursion overflow). Every error carries the 1-based line of the problem.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from .. import provenance as _provenance
from ..gc_pause import gc_paused
from ..ir import FORMAT_VERSION
from .checks import (
    MAX_DEPTH,
    SnapshotFormatError,
    _check_characters,
    _check_integers,
    _line_column,
    _shown,
    _validate,
)
from .lines import _parse_lines as _parse_lines
from .writing import END, HEADER, PROVENANCE_KEY, dumps

__all__ = [
    "BOM",
    "END",
    "HEADER",
    "MAX_DEPTH",
    "SnapshotFormatError",
    "decode",
    "dumps",
    "loads",
    "upgrade",
]

BOM = "\ufeff"
_HEADER_RE = re.compile(r"^# graphir-format: (\S+)\s*$")


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
    try:
        return data.decode("utf-8-sig")  # skips a byte-order mark
    except UnicodeDecodeError as exc:  # exc.object: the bytes after the mark
        line, column = _line_column(exc.object, exc.start)
        raise SnapshotFormatError(
            f"not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at column {column} cannot be "
            "decoded (the file was saved in another encoding, or is binary)",
            line,
        ) from None


def loads(text: str) -> dict[str, Any]:
    """Parse and validate snapshot text (format 2).

    Loading is bounded in time and memory by the text's size: a leading byte-order
    mark is skipped, CRLF line endings are read as LF, control characters are
    refused, and each line's JSON is parsed on its own with nesting bounded by
    :data:`MAX_DEPTH` (:func:`_parse_lines`).

    Args:
        text: the snapshot text (see :func:`decode` for a file's bytes).

    Returns:
        The document: ``{"meta": {...}, "inputs": {...}, "nodes": {...}, "outputs": {...}}``.

    Raises:
        SnapshotFormatError: not a graphir snapshot, format 1 (the message says to
            convert it with ``graphir migrate``), another format version (the message
            says to regenerate), invalid JSON, a control character, too deep nesting,
            an integer of more than :data:`~.checks.MAX_DIGITS` digits (beyond a
            float's range), a duplicate key, a missing or unknown section, a malformed
            node, or a truncated file (no end line); always with the 1-based line of
            the problem.
    """
    text = _checked(text, str(FORMAT_VERSION))
    # a load builds a few objects per node and no reference cycle: with the collector
    # on, the full collections they set off walk every object of the process
    # (benchmarks/README.md, bench_scale.py)
    with gc_paused():
        doc, key_lines = _parse_lines(text)
        _validate(doc, text, key_lines)
    return _with_provenance(doc, text)


def _checked(text: str, version: str) -> str:
    """``text`` without a byte-order mark and with LF line ends, once its header says
    format ``version``, its end line is there and it holds no control character."""
    text = text.removeprefix(BOM)
    if "\r" in text:  # a scan costs far less than replace()
        text = text.replace("\r\n", "\n")
    if not (match := _HEADER_RE.match(text.split("\n", 1)[0])):
        raise SnapshotFormatError(f"not a graphir snapshot: the first line should be {HEADER!r}", 1)
    if match.group(1) != version:
        if match.group(1) == "1":
            raise SnapshotFormatError(FORMAT_1_READ_BY_MIGRATE, 1)
        raise SnapshotFormatError(
            f"written in graphir format version {_shown(match.group(1))}; this "
            f"pytest-graphir reads version {version}: regenerate it with "
            "`pytest --graphir-update`",
            1,
        )
    stripped = text.rstrip("\n").rsplit("\n", 1)
    if len(stripped) < 2 or stripped[-1].strip() != END:
        raise SnapshotFormatError(
            f"truncated: the last line should be {END!r}", text.rstrip("\n").count("\n") + 1
        )
    _check_characters(text)
    return text


def _with_provenance(doc: dict[str, Any], text: str) -> dict[str, Any]:
    written = _provenance.read(text)
    if written is not None:  # kept (never compared) so that dumps(loads(text)) == text
        doc[PROVENANCE_KEY] = written
    return doc


FORMAT_1_READ_BY_MIGRATE = (
    "written in graphir format version 1 (YAML), which this pytest-graphir no longer "
    "reads: convert it with `graphir migrate FILE` (same graph, same values), or "
    "regenerate it with `pytest --graphir-update`"
)
"""The reason :func:`loads` gives for a format-1 file."""


def upgrade(text: str) -> str:
    """The current format's text of a format-1 snapshot (YAML flow mappings, one node a
    line, written before format 2): the same document, as ``graphir migrate`` writes it.

    The file is checked as :func:`loads` checks one (header, end line, control
    characters), then read by PyYAML's pure-Python safe loader, which runs no tag
    (``!!python/object``) and ends too deep nesting in a ``RecursionError`` (caught),
    after a pass over its events refused anchors and aliases (an alias bomb would
    expand in the new text); duplicate keys are refused; the document is validated
    as a loaded one is.

    Args:
        text: the format-1 snapshot text.

    Returns:
        The text :func:`dumps` writes for that document (so :func:`loads` reads it).

    Raises:
        SnapshotFormatError: not a format-1 snapshot, invalid YAML, an anchor, alias
            or tag, an integer of more than :data:`~.checks.MAX_DIGITS` digits, a
            duplicate key, nesting too deep, or a document that is no valid
            snapshot; with the line where it is known.
    """
    text = _checked(text, "1")
    _check_integers(text)  # beyond a float's range: refused at its line, as loads does
    try:
        marked: Any = next((e for e in yaml.parse(text, _Loader) if getattr(e, "anchor", 0)), 0)
        if marked:
            line = marked.start_mark.line + 1
            raise SnapshotFormatError("a YAML anchor or alias: snapshots never use them", line)
        doc = yaml.load(text, Loader=_Loader)
    except SnapshotFormatError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark: Any = exc.problem_mark or exc.context_mark
        raise SnapshotFormatError(f"invalid YAML: {exc.problem}", mark and mark.line + 1) from None
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise SnapshotFormatError(f"not a readable format-1 snapshot: {exc}") from None
    try:
        _validate(doc, text, {})
    except SnapshotFormatError as exc:  # its line would be a guess: name none
        raise SnapshotFormatError(exc.reason) from None
    return dumps(_with_provenance(doc, text))


class _Loader(yaml.SafeLoader):
    """PyYAML's pure-Python safe loader, refusing a mapping key written twice."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key, _ in node.value:
            if key.value in seen:
                raise SnapshotFormatError(f"duplicate key {key.value!r}", key.start_mark.line + 1)
            seen.add(key.value)
        return super().construct_mapping(node, deep)
