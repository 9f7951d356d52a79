"""Storage of graph snapshots through syrupy: the extension and the files it keeps.

* :mod:`.syrupy_extension`: :class:`GraphIRExtension`, the thin syrupy extension
  (serialize, compare within tolerance, the failure message), and
  :class:`GraphIRSnapshotAssertion`, the object ``graphir_snapshot`` returns;
* :mod:`.files`: snapshot files on disk (safe names, bounded reads, atomic writes,
  symlinks leaving the repository);
* :mod:`.received`: what a failing test received, kept beside the snapshot or in the
  report directory.

Imports go one way: ``syrupy_extension`` -> ``received`` -> ``files``. The extension's
names load :mod:`.syrupy_extension` on first use, so the pytest plugin can import
:mod:`.received` and :mod:`.files` when pytest starts without loading the comparison
code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .files import SnapshotLocationError, UnreadableSnapshot, escape_controls, snapshot_file_stem

if TYPE_CHECKING:
    from .syrupy_extension import GraphIRExtension, GraphIRSnapshotAssertion

__all__ = [
    "GraphIRExtension",
    "GraphIRSnapshotAssertion",
    "SnapshotLocationError",
    "UnreadableSnapshot",
    "escape_controls",
    "snapshot_file_stem",
]


def __getattr__(name: str) -> Any:
    if name not in ("GraphIRExtension", "GraphIRSnapshotAssertion"):
        raise AttributeError(f"module 'pytest_graphir.extension' has no attribute {name!r}")
    from . import syrupy_extension

    return getattr(syrupy_extension, name)
