"""Writing a snapshot (format 2): :func:`dumps` and its rounding and quoting helpers."""

from __future__ import annotations

import json
import re
from typing import Any

from .. import ir
from .. import provenance as _provenance
from ..ir import SEQUENCE_SECTIONS, GraphIR
from .checks import _BAD_CHAR

HEADER = f"# graphir-format: {ir.FORMAT_VERSION}"
END = "# end of graphir snapshot"
SIGNIFICANT_DIGITS = 6
PROVENANCE_KEY = "provenance"
"""Key of a loaded document that holds the provenance comment's content (where the
snapshot was written); no comparison reads it."""
_ROUNDED = frozenset(ir.STAT_KEYS_FLOAT) - ir.COUNT_KEYS
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/#@]*$")


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


def _json(value: Any) -> str:
    """One value as a line's JSON text: NaN and infinities as ``NaN``/``Infinity``, every
    character outside printable ASCII escaped (``\\u001b``, ``\\u00e9``), so a name
    never puts a control character or a line break into the file."""
    return json.dumps(value, ensure_ascii=True, allow_nan=True).replace("\x7f", "\\u007f")


_LINE_BREAKING = re.compile(f"[\n\r\x85\u2028\u2029]|{_BAD_CHAR.pattern}")


def _comment(text: str) -> str:
    """``text`` as it may stand in a comment line: line breaks and the characters
    :func:`loads` refuses written as ``\\n``-style escapes, so a model called
    ``"A\\nnodes:"`` cannot start a line of its own; any other text unchanged."""
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
    for section in ("inputs", "nodes", "outputs", *(s for s in ir.OPTIONAL_SECTIONS if s in doc)):
        entries = doc[section]
        if not entries:
            lines.append(f"{section}: {'[]' if section in SEQUENCE_SECTIONS else '{}'}")
        elif section in SEQUENCE_SECTIONS:
            lines += [f"{section}:", *(f"  - {_json(item)}" for item in entries)]
        else:
            lines.append(f"{section}:")
            lines += (f"  {_json_key(str(k))}: {_json(_rounded(v))}" for k, v in entries.items())
    if written := graph.provenance if isinstance(graph, GraphIR) else graph.get(PROVENANCE_KEY):
        lines.append(_provenance.line(written))  # a comment: never compared
    lines.append(END)
    return "\n".join(lines) + "\n"
