"""Storage of graph snapshots through syrupy: the extension and the files it keeps.

* :mod:`.syrupy_extension`: :class:`~.syrupy_extension.GraphIRExtension`, the thin
  syrupy extension (serialize, compare within tolerance, the failure message), and
  :class:`~.syrupy_extension.GraphIRSnapshotAssertion`, the object
  ``graphir_snapshot`` returns;
* :mod:`.files`: snapshot files on disk (safe names, bounded reads, atomic writes,
  symlinks leaving the repository);
* :mod:`.received`: what a failing test received, kept beside the snapshot or in the
  report directory;
* :mod:`.launcher`: ``torchrun -m pytest``, which rank writes and discovers which
  snapshot.

Imports go one way: ``syrupy_extension`` -> ``received`` -> ``files``. The package
itself imports nothing, so the pytest plugin can import :mod:`.received` and
:mod:`.files` when pytest starts without loading the comparison code; import each
name from its module.
"""
