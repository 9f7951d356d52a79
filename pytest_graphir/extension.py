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

from . import provenance
from .compare import DEFAULT_MAX_LINES, Change, Comparison, Tolerance, compare
from .ir import GraphIR
from .serialize import HEADER, SnapshotFormatError, dumps, loads

if TYPE_CHECKING:
    from syrupy.data import SnapshotCollection

FIX = "run `pytest --graphir-update` to rewrite it from the current model"


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
    """

    file_extension = "graphir"
    _write_mode = WriteMode.TEXT

    def __init__(self) -> None:
        super().__init__()
        self.tolerance = Tolerance()
        self.max_diff_lines = DEFAULT_MAX_LINES
        self.expected_location: str | None = None
        self._location: str | None = None
        self._cache: tuple[Any, Any, Comparison | SnapshotFormatError] | None = None
        self.test_id = ""
        self.report_dir: Path | None = None
        self.rootdir: Path | None = None
        self.failures: list[dict[str, Any]] | None = None

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
        """The failure message: a summary line, then one line per change.

        Also records the failure for the terminal summary (``failures``, set by the
        fixture) and, with ``--graphir-report=DIR``, writes the HTML report and names
        it on the second line.
        """
        location = _display(self._location or self.expected_location or "the snapshot file")
        if not snapshot_data:
            report = self._write_report(serialized_data, None, None)
            self._record(location, f"no snapshot at {location}", [], report)
            yield f"graphir: no snapshot at {location}; run `pytest --graphir-update` to write it"
            if report:
                yield f"  report: {report}"
            return
        result = self._compare(serialized_data, snapshot_data)
        if isinstance(result, SnapshotFormatError):
            where = f"{location}:{result.line}" if result.line else location
            report = self._write_report(serialized_data, None, None)
            self._record(location, f"invalid snapshot {where}: {result.reason}", [], report)
            yield f"graphir: invalid snapshot {where}: {result.reason}"
            if report:
                yield f"  report: {report}"
            yield f"  fix: {FIX}"
            return
        report = self._write_report(serialized_data, snapshot_data, result)
        lines = result.lines(self.max_diff_lines)
        if report:
            lines.insert(1, f"  report: {report}")
        self._record(location, result.summary(), result.changes, report)
        yield from provenance.notes(snapshot_data, serialized_data)  # the environment first
        yield from lines
        yield f"  snapshot: {location} ('-' snapshot, '+' this run); to accept: {FIX}"

    # -- failure artefacts -------------------------------------------------------------
    def _record(self, location: str, summary: str, changes: list[Change],
                report: str | None) -> None:
        """Keep what the terminal summary shows about this failure (plain data: under
        xdist it travels to the controller in the test report's ``user_properties``)."""
        if self.failures is None:
            return
        structural = [c for c in changes if c.kind != "drift"]
        shown = (structural or changes)[:SUMMARY_CHANGES]
        record = {
            "test": self.test_id, "snapshot": location, "summary": summary,
            "changes": [str(c) for c in shown], "more": len(changes) - len(shown),
            "report": report,
        }
        self.failures[:] = [r for r in self.failures if r["snapshot"] != location]
        self.failures.append(record)

    def _write_report(self, serialized_data: Any, snapshot_data: Any,
                      result: Comparison | None) -> str | None:
        """Write the HTML report (``pytest_graphir.report.render_html``) of this
        failure into ``report_dir`` at the snapshot's path relative to rootdir plus
        ``.html``; return its displayed path, or None when no directory was asked for.
        A report that cannot be written is said so in the message, never an error."""
        if self.report_dir is None:
            return None
        snapshot = Path(self._location or self.expected_location or "snapshot.graphir")
        try:
            relative = snapshot.resolve().relative_to((self.rootdir or Path.cwd()).resolve())
        except ValueError:
            relative = Path(snapshot.name)
        target = self.report_dir / f"{relative}.html"
        try:
            from .report import render_html  # type: ignore[import-not-found,unused-ignore]

            new = loads(serialized_data)
            old = loads(snapshot_data) if snapshot_data else None
            page = render_html(new, old, result.changes if result else (),
                               title=self.test_id or str(relative),
                               tolerance_note=result.summary() if result else "")
            _write_atomic(target, page)
        except (ImportError, OSError, SnapshotFormatError) as exc:
            return f"not written ({type(exc).__name__}: {exc})"
        return _display(str(target))


SUMMARY_CHANGES = 10
"""Change lines per failing snapshot in the terminal summary."""


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
