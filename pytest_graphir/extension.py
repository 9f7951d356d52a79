"""The syrupy extension behind ``graphir_snapshot``: one ``.graphir`` file per test.

Built on syrupy's ``SingleFileSnapshotExtension`` (syrupy 7), overriding only what
its docs mark as overridable:

* ``serialize``: :class:`GraphIR` -> snapshot text (:mod:`pytest_graphir.serialize`);
* ``matches``: parse both texts and :func:`pytest_graphir.compare.compare` them, so
  statistics match within a tolerance. When it returns True syrupy writes nothing,
  even under ``--graphir-update``: in-tolerance drift never churns the file;
* ``diff_lines``: the failure message, naming nodes (``changed: ... op gelu -> relu``);
* ``read_snapshot_data_from_location``: remembers which file was read, so a
  malformed snapshot is reported with its path and line;
* ``write_snapshot_collection``: writes to a temporary file and ``os.replace``\\s it,
  so a failed update never truncates a snapshot.

Beside syrupy's API, :meth:`GraphIRExtension.write_received` keeps what a failing
test produced as ``<snapshot>.graphir.received`` (called by the fixture after the
test), so CI can upload it and a reviewer can accept it by copying it over the
snapshot.

The class is importable and constructible without arguments: syrupy's xdist
controller re-imports it by name (``session.py``). Per-test settings (tolerance,
diff length) are set on the instance by the fixture.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from .compare import DEFAULT_MAX_LINES, Comparison, Tolerance, compare
from .ir import GraphIR
from .serialize import HEADER, SnapshotFormatError, dumps, loads

if TYPE_CHECKING:
    from syrupy.data import SnapshotCollection

FIX = "run `pytest --graphir-update` to rewrite it from the current model"

RECEIVED_SUFFIX = ".received"
"""Appended to a snapshot's file name for the snapshot a failing run produced."""


def _display(path: str) -> str:
    """``path`` relative to the working directory when it is below it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


class GraphIRExtension(SingleFileSnapshotExtension):
    """Stores a :class:`GraphIR` as ``__snapshots__/<test module>/<test name>.graphir``.

    Attributes:
        tolerance: statistics tolerance used by :meth:`matches`.
        max_diff_lines: change lines shown in a failure (0 = all).
        expected_location: path of this test's snapshot, set by the fixture, used
            in the message when no snapshot exists yet.
        received_dir: where :meth:`write_received` writes, set by the fixture:
            ``(mode, rootdir, report_dir)`` with mode ``"beside"`` (next to the
            snapshot) or ``"report"`` (below ``report_dir``, at the snapshot's path
            relative to ``rootdir``); None: nothing is written.
    """

    file_extension = "graphir"
    _write_mode = WriteMode.TEXT

    def __init__(self) -> None:
        super().__init__()
        self.tolerance = Tolerance()
        self.max_diff_lines = DEFAULT_MAX_LINES
        self.expected_location: str | None = None
        self.received_dir: tuple[str, Path, Path | None] | None = None
        self._location: str | None = None
        self._cache: tuple[Any, Any, Comparison | SnapshotFormatError] | None = None

    # -- serializer --------------------------------------------------------------------
    def serialize(self, data: Any, *, exclude: Any = None, include: Any = None,
                  matcher: Any = None) -> str:
        """Return the snapshot text of ``data`` (a :class:`GraphIR`).

        syrupy's ``include``/``exclude``/``matcher`` filters do not apply to graph
        snapshots and are ignored.

        Raises:
            TypeError: ``data`` is not a GraphIR; syrupy reports it as the failure.
        """
        if isinstance(data, GraphIR):
            return dumps(data)
        if isinstance(data, str) and data.startswith(HEADER):
            return data
        raise TypeError(
            "graphir_snapshot compares graph IRs: write "
            "`assert trace(model, *inputs) == graphir_snapshot` "
            f"(got {type(data).__name__}; use syrupy's `snapshot` fixture for other data)"
        )

    # -- storage -----------------------------------------------------------------------
    def read_snapshot_data_from_location(self, *, snapshot_location: str, snapshot_name: str,
                                         session_id: str) -> Any:
        """Read the snapshot file, remembering its path for error messages."""
        self._location = snapshot_location
        return super().read_snapshot_data_from_location(
            snapshot_location=snapshot_location, snapshot_name=snapshot_name,
            session_id=session_id)

    @classmethod
    def write_snapshot_collection(cls, *, snapshot_collection: SnapshotCollection,
                                  name_order: dict[str, int] | None = None) -> None:
        """Write the snapshot atomically: a temporary file in the same directory,
        then ``os.replace``. An interrupted or failed write leaves the old file whole."""
        path = Path(snapshot_collection.location)
        data = next(iter(snapshot_collection)).data
        if not isinstance(data, str):
            raise TypeError(f"graphir snapshots are text, got {type(data).__name__}")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = path.stat().st_mode & 0o777  # keep the mode of the file we replace
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask  # what open() would have created
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
                f.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # -- received snapshots (not part of syrupy's API) ----------------------------------
    @staticmethod
    def received_locations(*, snapshot_location: str, rootdir: Path,
                           report_dir: Path | None) -> dict[str, Path]:
        """Both places a received snapshot can be: ``"beside"`` the snapshot and,
        when ``report_dir`` is given, ``"report"``: ``report_dir`` / the snapshot's
        path relative to ``rootdir`` (its path without the anchor when outside)."""
        snapshot = Path(snapshot_location)
        name = snapshot.name + RECEIVED_SUFFIX
        places = {"beside": snapshot.with_name(name)}
        if report_dir is not None:
            try:
                relative = snapshot.resolve().relative_to(rootdir.resolve())
            except ValueError:
                relative = Path(*snapshot.resolve().parts[1:])
            places["report"] = report_dir / relative.with_name(name)
        return places

    def received_path(self, snapshot_location: str) -> Path | None:
        """Where :meth:`write_received` writes for ``snapshot_location``; None when
        no ``received_dir`` is set."""
        if self.received_dir is None:
            return None
        mode, rootdir, report_dir = self.received_dir
        return self.received_locations(snapshot_location=snapshot_location,
                                       rootdir=rootdir, report_dir=report_dir).get(mode)

    def write_received(self, *, snapshot_location: str, data: str) -> Path | None:
        """Write ``data`` (this run's snapshot text) as the received snapshot of
        ``snapshot_location``; return its path, or None when none is configured.

        Written through a temporary file and ``os.replace``, like a snapshot. The file
        name ends in ``.graphir.received``, which syrupy does not take for a snapshot,
        so it is never reported as unused.
        """
        path = self.received_path(snapshot_location)
        if path is None:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    def remove_received(self, *, snapshot_location: str, rootdir: Path,
                        report_dir: Path | None) -> None:
        """Delete the received snapshots of ``snapshot_location`` (it passed or was
        written), in every place one can be."""
        for path in self.received_locations(snapshot_location=snapshot_location,
                                            rootdir=rootdir,
                                            report_dir=report_dir).values():
            path.unlink(missing_ok=True)

    # -- comparator --------------------------------------------------------------------
    def _compare(self, serialized_data: Any,
                 snapshot_data: Any) -> Comparison | SnapshotFormatError:
        cache = self._cache
        if cache is not None and cache[0] is serialized_data and cache[1] is snapshot_data:
            return cache[2]
        result: Comparison | SnapshotFormatError
        try:
            stored = loads(snapshot_data)
        except SnapshotFormatError as exc:
            result = exc
        else:
            result = compare(stored, loads(serialized_data), self.tolerance)
        self._cache = (serialized_data, snapshot_data, result)
        return result

    def matches(self, *, serialized_data: Any, snapshot_data: Any) -> bool:
        """True when the stored snapshot is valid and equal within tolerance."""
        result = self._compare(serialized_data, snapshot_data)
        return isinstance(result, Comparison) and not result

    def diff_lines(self, serialized_data: Any, snapshot_data: Any) -> Iterator[str]:
        """The failure message: a summary line, then one line per change."""
        location = _display(self._location or self.expected_location or "the snapshot file")
        if not snapshot_data:
            yield f"graphir: no snapshot at {location}; run `pytest --graphir-update` to write it"
            yield from self._received_line()
            return
        result = self._compare(serialized_data, snapshot_data)
        if isinstance(result, SnapshotFormatError):
            where = f"{location}:{result.line}" if result.line else location
            yield f"graphir: invalid snapshot {where}: {result.reason}"
            yield f"  fix: {FIX}"
            return
        yield from result.lines(self.max_diff_lines)
        yield f"  snapshot: {location} ('-' snapshot, '+' this run); to accept: {FIX}"
        yield from self._received_line()

    def _received_line(self) -> Iterator[str]:
        where = self._location or self.expected_location
        received = self.received_path(where) if where else None
        if received is not None:
            yield (f"  received: {_display(str(received))} (written after the test; to "
                   "accept without rerunning, copy it over the snapshot)")
