"""HTML report of a graph and its changes against a snapshot (floor 3).

:func:`render_html` returns one self-contained HTML document (assets inlined, no
network access at view time); ``--graphir-report`` and ``graphir html`` write it
with :func:`pytest_graphir.extension.files.write_atomic`. See
``docs/report.md`` for what the page shows.
"""

from __future__ import annotations

from .html import render_html
from .payload import ChangeLike, build_payload

__all__ = ["ChangeLike", "build_payload", "render_html"]
