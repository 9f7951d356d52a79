"""Storage of graph snapshots through syrupy: the extension and the files it keeps.

* :mod:`.syrupy_extension`: :class:`GraphIRExtension`, the thin syrupy extension
  (serialize, compare within tolerance, the failure message), and
  :class:`GraphIRSnapshotAssertion`, the object ``graphir_snapshot`` returns;
* :mod:`.files`: snapshot files on disk (safe names, bounded reads, atomic writes,
  symlinks leaving the repository);
* :mod:`.received`: what a failing test received, kept beside the snapshot or in the
  report directory.

Imports go one way: ``syrupy_extension`` -> ``received`` -> ``files``. The names below
load their module on first use, so the pytest plugin can import :mod:`.received` and
:mod:`.files` when pytest starts without loading the comparison code.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .files import (
        SnapshotLocationError,
        UnreadableSnapshot,
        escape_controls,
        snapshot_file_stem,
    )
    from .syrupy_extension import GraphIRExtension, GraphIRSnapshotAssertion

_WHERE = {
    "GraphIRExtension": "syrupy_extension",
    "GraphIRSnapshotAssertion": "syrupy_extension",
    "SnapshotLocationError": "files",
    "UnreadableSnapshot": "files",
    "escape_controls": "files",
    "snapshot_file_stem": "files",
}

__all__ = [
    "GraphIRExtension",
    "GraphIRSnapshotAssertion",
    "SnapshotLocationError",
    "UnreadableSnapshot",
    "escape_controls",
    "snapshot_file_stem",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_graphir.extension' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
