"""Render the HTML graph report: one self-contained file, no network access at view time.

The page shell (``assets/report.html``) is filled in with :class:`string.Template`;
the bundled layout library (``assets/dagre.min.js``, @dagrejs/dagre, MIT, see
``assets/README.md``), the page script and the style sheet are inlined, and the data
(:func:`pytest_graphir.report.payload.build_payload`) goes in a
``<script type="application/json">`` element with every ``<`` written as ``\\u003c``,
so no node name can end the script element early.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from importlib import resources
from string import Template
from typing import Any

from .payload import Graph, build_payload

_SOURCE_MAP = re.compile(r"^//# sourceMappingURL=.*$", re.MULTILINE)


def _asset(name: str) -> str:
    text = resources.files(__package__).joinpath("assets").joinpath(name).read_text("utf-8")
    text = _SOURCE_MAP.sub("", text)  # the map is not shipped; don't let devtools ask for it
    if name.endswith((".js", ".css")) and "</" + "script" in text.lower():
        raise RuntimeError(f"bundled asset {name} contains '</script' and cannot be inlined")
    return text


# Inside a <script> element the HTML parser only looks for "</script" and "<!--";
# '<', '>' and '&' only occur inside JSON strings, where \\uXXXX means the same.
_JSON_ESCAPES = str.maketrans({c: f"\\u{ord(c):04x}" for c in "<>&\u2028\u2029"})


def render_html(
    new: Graph,
    old: Graph | None = None,
    changes: Sequence[Any] = (),
    *,
    title: str = "",
    tolerance_note: str = "",
    open_depth: int = 2,
) -> str:
    """Return the report for ``new`` (compared with ``old``) as one HTML document.

    The page draws the module hierarchy as nested boxes (open to ``open_depth``
    levels, further while the picture stays small, and around every change),
    op nodes with the edges read from their ``$ref`` arguments, laid out in the
    browser by the bundled @dagrejs/dagre; added, removed, changed and drifting
    nodes are coloured; the change list and the search box jump to a node and the
    side panel shows ``old -> new`` with the tolerance. Nothing is loaded from the
    network when the file is opened.

    Args:
        new: this run's graph: a :class:`~pytest_graphir.ir.GraphIR`
            (``pytest_graphir.trace(...)``) or a loaded snapshot document
            (``pytest_graphir.serialize.loads(text)``).
        old: the snapshot's graph (same two forms), or None for a picture of ``new``
            alone. Nodes only in ``old`` are drawn (from ``old``) as removed.
        changes: change objects in listing order, duck-typed as
            :class:`pytest_graphir.report.ChangeLike` (``pytest_graphir.compare.Change``).
        title: page heading; default ``"<model> graph"``.
        tolerance_note: text shown under the heading, e.g. the tolerance in force.
        open_depth: module boxes nested deeper than this start closed.

    Returns:
        The HTML text (UTF-8 when written).

    Raises:
        TypeError: ``new`` or ``old`` is neither a GraphIR nor a snapshot document.
    """
    data = build_payload(new, old, changes, title=title, tolerance_note=tolerance_note)
    data["open_depth"] = open_depth
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return Template(_asset("report.html")).substitute(
        title=html.escape(data["title"]),
        style=_asset("report.css"),
        dagre=_asset("dagre.min.js"),
        script=_asset("report.js"),
        data=text.translate(_JSON_ESCAPES),
    )
