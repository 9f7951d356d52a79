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

The files themselves (names, bounded reads, atomic writes) are :mod:`.files`; what a
failing test received is kept by :mod:`.received`: the message writes it and names
it, or says why it could not be written.

The class is importable and constructible without arguments: syrupy's xdist
controller re-imports it by name (``session.py``). Per-test settings (tolerance,
diff length) are set on the instance by the fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from gettext import gettext
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from syrupy.assertion import DiffMode, SnapshotAssertion
from syrupy.extensions.base import AbstractSyrupyExtension
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from .. import provenance
from ..compare import DEFAULT_MAX_LINES, Comparison, Tolerance, compare
from ..compare.message import MORE_HINT
from ..ir import GraphIR
from ..serialize import HEADER, SnapshotFormatError, decode, dumps, loads
from .files import (
    DEFAULT_MAX_SNAPSHOT_BYTES,
    FIX,
    HASHED_STEM,
    SNAPSHOT_SUFFIX,
    SnapshotLocationError,
    UnreadableSnapshot,
    display,
    escape_controls,
    indented,
    not_written,
    oversize_error,
    read_snapshot_bytes,
    replaceable_mode,
    snapshot_file_stem,
    write_atomic,
    write_error,
)
from .received import (
    REPORT_ELSEWHERE,
    ReceivedTarget,
    not_written_lines,
    received_path,
    write_received,
)

WrittenReport = tuple[str | None, list[str]]
"""What :meth:`GraphIRExtension._write_report` did: the report's displayed path (None:
not written) and the message lines about it."""

if TYPE_CHECKING:
    from syrupy.data import SnapshotCollection
    from syrupy.location import PyTestLocation
    from syrupy.types import SnapshotIndex


class GraphIRExtension(SingleFileSnapshotExtension):
    """Stores a :class:`GraphIR` as ``__snapshots__/<test module>/<test name>.graphir``.

    Attributes:
        tolerance: statistics tolerance used by :meth:`matches`.
        max_diff_lines: change lines shown in a failure (0 = all).
        more_hint: how a failure whose change list ``max_diff_lines`` cut says to see
            it all (the marker's setting, where it made the limit; else the ini
            option's).
        expected_location: path of this test's snapshot, set by the fixture, used
            in the message when no snapshot exists yet.
        received_dir: where the received file of a failure is written, set by the
            fixture (:func:`.received.received_target`); None: nothing is written.
        received_lines: per snapshot location, the message lines about the received
            file the failure message wrote (or could not write); the fixture's
            teardown (:func:`.received.keep_received`) does not write these again.
        received_unwritten: per snapshot location, the two lines (unindented) about
            a received file that could not be written; the terminal summary shows
            them.
    """

    file_extension = SNAPSHOT_SUFFIX[1:]
    _write_mode = WriteMode.TEXT
    root: ClassVar[str | None] = None
    """The repository (pytest's rootdir), set by the fixture: snapshot paths that
    symlinks lead out of it are neither read nor written through."""

    def __init__(self) -> None:
        super().__init__()
        self.tolerance = Tolerance()
        self.max_diff_lines = DEFAULT_MAX_LINES
        self.more_hint = MORE_HINT
        self.max_snapshot_bytes = DEFAULT_MAX_SNAPSHOT_BYTES
        self.updating = False  # syrupy's update_snapshots, set by the fixture
        self.expected_location: str | None = None
        self.test_id = ""  # pytest node id, for messages and the terminal summary
        self.snapshot_name: str | None = None  # syrupy's name of the snapshot
        self.received_dir: ReceivedTarget | None = None
        self.received_lines: dict[str, list[str]] = {}
        self.received_unwritten: dict[str, list[str]] = {}
        self._location: str | None = None
        self._cache: tuple[Any, Any, Comparison | SnapshotFormatError] | None = None
        self.report_dir: Path | None = None
        self.rootdir: Path | None = None
        self.failures: list[dict[str, Any]] | None = None
        self._parsed: tuple[str, dict[str, Any]] | None = None

    # -- serializer --------------------------------------------------------------------
    def serialize(
        self, data: Any, *, exclude: Any = None, include: Any = None, matcher: Any = None
    ) -> str:
        """Return the snapshot text of ``data`` (a :class:`GraphIR`).

        syrupy's ``include``/``exclude``/``matcher`` filters do not apply to graph
        snapshots and are ignored.

        Raises:
            TypeError: ``data`` is not a GraphIR; syrupy reports it as the failure.
            SnapshotLocationError: under an update (``updating``), the text is over
                ``max_snapshot_bytes``: no file is written that the next run refuses.
        """
        if isinstance(data, GraphIR):
            text = dumps(data)
        elif isinstance(data, str) and data.startswith(HEADER):
            text = data
        else:
            raise TypeError(
                "graphir_snapshot compares graph IRs: write "
                "`assert trace(model, *inputs) == graphir_snapshot` "
                f"(got {type(data).__name__}; use syrupy's `snapshot` fixture for other data)"
            )
        if self.updating and (len(text) > self.max_snapshot_bytes // 4 or not text.isascii()):
            size = len(text.encode("utf-8", "surrogatepass"))
            if size > self.max_snapshot_bytes:
                location = self.expected_location or "the snapshot file"
                raise oversize_error(location, size, self.max_snapshot_bytes)
        return text

    # -- naming ------------------------------------------------------------------------
    @classmethod
    def get_snapshot_name(cls, *, test_location: PyTestLocation, index: SnapshotIndex = 0) -> str:
        """syrupy's snapshot name, made a safe, bounded file name (:func:`snapshot_file_stem`)."""
        return snapshot_file_stem(
            AbstractSyrupyExtension.get_snapshot_name(test_location=test_location, index=index)
        )

    @classmethod
    def matches_test_location(
        cls, *, test_location: PyTestLocation, snapshot_location: str
    ) -> bool:
        """Whether the file at ``snapshot_location`` may belong to ``test_location``
        (syrupy's unused-snapshot detection); also knows shortened names."""
        if super().matches_test_location(
            test_location=test_location, snapshot_location=snapshot_location
        ):
            return True
        loc = Path(snapshot_location)
        stem = cls._snapshot_stem(loc.name)
        match = HASHED_STEM.match(stem or "")
        if (
            match is None
            or test_location.basename != loc.parent.name
            or not test_location.matches_snapshot_site(snapshot_location)
        ):
            return False
        head = match.group("head")
        own = cls._sanitize_filename(test_location.snapshot_name_parametrized)
        return own.startswith(head) or head.startswith(own)

    # -- storage -----------------------------------------------------------------------
    def read_snapshot_data_from_location(
        self, *, snapshot_location: str, snapshot_name: str, session_id: str
    ) -> Any:
        """Read and decode the snapshot file, bounded; never raises.

        Returns:
            The text; None when there is no file; an :class:`UnreadableSnapshot` when
            the path holds a directory, a device or FIFO, a symlink leaving the
            repository, a file over ``max_snapshot_bytes``, or bytes that are not
            UTF-8. Nothing is opened before ``lstat``/``stat`` say it is a regular
            file of acceptable size, so ``/dev/zero`` never blocks a run.
        """
        self._location = snapshot_location
        try:
            data = read_snapshot_bytes(snapshot_location, self.max_snapshot_bytes, self.root)
            return None if data is None else decode(data)
        except (SnapshotFormatError, SnapshotLocationError) as exc:
            return UnreadableSnapshot(exc)

    @classmethod
    def write_snapshot_collection(
        cls, *, snapshot_collection: SnapshotCollection, name_order: dict[str, int] | None = None
    ) -> None:
        """Write the snapshot atomically: a temporary file in the same directory,
        then ``os.replace``. An interrupted or failed write leaves the old file whole.

        Raises:
            SnapshotLocationError: a directory is where the file goes, or symlinks
                lead its directory out of the repository.
            SnapshotWriteError: an ``OSError`` (a full disk, a read-only directory),
                named with the snapshot, its cause and the fix.
        """
        path = Path(snapshot_collection.location)
        data = next(iter(snapshot_collection)).data
        if not isinstance(data, str):
            raise TypeError(f"graphir snapshots are text, got {type(data).__name__}")
        try:
            write_atomic(path, data, replaceable_mode(path, cls.root))
        except OSError as exc:
            raise write_error(str(path), exc) from None

    # -- comparator --------------------------------------------------------------------
    def _compare(
        self, serialized_data: Any, snapshot_data: Any
    ) -> Comparison | SnapshotFormatError:
        cache = self._cache
        if cache is not None and cache[0] is serialized_data and cache[1] is snapshot_data:
            return cache[2]
        result: Comparison | SnapshotFormatError
        if isinstance(snapshot_data, UnreadableSnapshot):
            error = snapshot_data.error
            result = (
                error
                if isinstance(error, SnapshotFormatError)
                else SnapshotFormatError(error.reason)
            )
            self._cache = (serialized_data, snapshot_data, result)
            return result
        try:
            stored = loads(snapshot_data)
        except SnapshotFormatError as exc:
            result = exc
        else:
            result = compare(stored, self._received(serialized_data), self.tolerance)
        self._cache = (serialized_data, snapshot_data, result)
        return result

    def _received(self, serialized_data: str) -> dict[str, Any]:
        """The parsed text of this run's graph (parsed once per text)."""
        parsed = self._parsed
        if parsed is None or parsed[0] is not serialized_data:
            parsed = self._parsed = (serialized_data, loads(serialized_data))
        return parsed[1]

    def matches(self, *, serialized_data: Any, snapshot_data: Any) -> bool:
        """True when the stored snapshot is valid and equal within tolerance."""
        result = self._compare(serialized_data, snapshot_data)
        return isinstance(result, Comparison) and not result

    def diff_lines(self, serialized_data: Any, snapshot_data: Any) -> Iterator[str]:
        """The failure message: a summary line, then one line per change; control
        characters escaped (:func:`escape_controls`).

        Also records the failure for the terminal summary (``failures``, set by the
        fixture), with ``--graphir-report=DIR`` writes the HTML report and names it on
        the second line, and writes the received file (``received_dir``) and names it
        on the last; one that cannot be written is said there with its cause and fix
        (:func:`.received.not_written_lines`), never raised.
        """
        for line in self._message_lines(serialized_data, snapshot_data):
            yield escape_controls(line)

    def _message_lines(self, serialized_data: Any, snapshot_data: Any) -> Iterator[str]:
        location = display(self._location or self.expected_location or "the snapshot file")
        if isinstance(snapshot_data, UnreadableSnapshot) and isinstance(
            snapshot_data.error, SnapshotLocationError
        ):
            yield from snapshot_data.error.lines()
            yield from self._test_id_lines()
            return
        if not snapshot_data:
            report = self._write_report(serialized_data, None, None)
            received = self._keep_received(serialized_data)
            self._record(location, f"no snapshot at {location}", None, report)
            yield f"graphir: no snapshot at {location}; run `pytest --graphir-update` to write it"
            yield from indented(report[1])
            yield from self._test_id_lines()
            yield from received
            return
        result = self._compare(serialized_data, snapshot_data)
        if isinstance(result, SnapshotFormatError):
            where = f"{location}:{result.line}" if result.line else location
            report = self._write_report(serialized_data, None, None)
            self._record(location, f"invalid snapshot {where}: {result.reason}", None, report)
            yield f"graphir: invalid snapshot {where}: {result.reason}"
            yield from indented(report[1])
            yield f"  fix: {FIX}"
            yield from self._test_id_lines()
            return
        report = self._write_report(serialized_data, snapshot_data, result)
        lines = result.lines(self.max_diff_lines, self.more_hint)
        lines[1:1] = indented(report[1])
        received = self._keep_received(serialized_data)
        self._record(location, result.summary(), result, report)
        yield from provenance.notes(snapshot_data, serialized_data)  # the environment first
        yield from lines
        yield f"  snapshot: {location} ('-' snapshot, '+' this run); to accept: {FIX}"
        yield from received

    def _keep_received(self, serialized_data: Any) -> list[str]:
        """Write this failure's received file (once per snapshot location) and return
        the message lines about it: its path, or why it could not be written and
        the fix (also kept in ``received_unwritten``); [] when none is asked for
        (``received_dir`` None)."""
        where = self._location or self.expected_location
        target = self.received_dir
        path = received_path(target, where) if where else None
        if target is None or path is None or where is None:
            return []
        if where not in self.received_lines and isinstance(serialized_data, str):
            try:
                write_received(target, where, serialized_data)
            except OSError as exc:
                what, fix = not_written_lines(target, path, exc)
                self.received_unwritten[where] = [what, fix]
                lines = indented([what, fix])
            else:
                lines = [
                    f"  received: {display(str(path))} (this run's snapshot; to accept "
                    "without rerunning, copy it over the snapshot)"
                ]
            self.received_lines[where] = lines
        return self.received_lines.get(where, [])

    # -- failure artefacts -------------------------------------------------------------
    def _record(
        self,
        location: str,
        summary: str,
        result: Comparison | None,
        report: WrittenReport = (None, []),
        fix: str | None = None,
    ) -> None:
        """Keep what the terminal summary shows about this failure (plain data: under
        xdist it travels to the controller in the test report's ``user_properties``):
        the first :data:`SUMMARY_CHANGES` lines of ``result``'s change list, worded
        and ordered as the failure message's (:meth:`.Comparison.change_lines`:
        structural changes, drift origins, propagated drift per module subtree), never
        more than the message itself shows (``max_diff_lines``), how many changes the
        lines left out stand for (``more``) and how many of those the message leaves
        out too (``cut``: no verbosity prints them); ``fix`` replaces the summary's
        "to accept" line. A received file that could not be written
        (``received_unwritten``) goes in too: the assertion message may be cut at
        default verbosity, the summary is not."""
        if self.failures is None:
            return
        shown: list[str] = []
        more = cut = 0
        if result:
            shown, more = result.change_lines(SUMMARY_CHANGES, within=self.max_diff_lines)
            cut = result.left_out(self.max_diff_lines)
        record = {
            "test": self.test_id,
            "snapshot": location,
            "summary": summary,
            "changes": shown,
            "more": more,
            "cut": cut,
            "report": report[0],
        }
        if cut and self.more_hint != MORE_HINT:
            record["hint"] = self.more_hint
        if report[0] is None and report[1]:
            record["report_unwritten"] = report[1]
        if fix:
            record["fix"] = fix
        where = self._location or self.expected_location
        if where in self.received_unwritten:
            record["received"] = self.received_unwritten[where]
        self.failures[:] = [r for r in self.failures if r["snapshot"] != location]
        self.failures.append(record)

    def _write_report(
        self, serialized_data: Any, snapshot_data: Any, result: Comparison | None
    ) -> WrittenReport:
        """Write the HTML report (``pytest_graphir.report.render_html``) of this
        failure into ``report_dir`` at the snapshot's path relative to rootdir plus
        ``.html``.

        A report that cannot be written is said so in the message, never raised:
        for an ``OSError`` (a read-only directory, a full disk) which file, why and
        the fix, in the received file's words (:func:`.files.not_written`), never the
        temporary file's name; :func:`.files.write_atomic` leaves no directory it
        made behind.

        Returns:
            ``(its displayed path, or None when not written; the message lines
            about it, unindented: ``report: <path>``, or what went wrong and the
            fix)``; ``(None, [])`` when no directory was asked for.
        """
        if self.report_dir is None:
            return None, []
        snapshot = Path(self._location or self.expected_location or "snapshot.graphir")
        try:
            relative = snapshot.resolve().relative_to((self.rootdir or Path.cwd()).resolve())
        except ValueError:
            relative = Path(snapshot.name)
        target = self.report_dir / f"{relative}.html"
        try:
            from ..report import render_html  # type: ignore[import-not-found,unused-ignore]

            new = loads(serialized_data)
            old = loads(snapshot_data) if snapshot_data else None
            page = render_html(
                new,
                old,
                result.changes if result else (),
                title=self.test_id or str(relative),
                tolerance_note=result.summary() if result else "",
            )
            write_atomic(target, page)
        except OSError as exc:
            what, fix = not_written(target, exc, self.report_dir, REPORT_ELSEWHERE)
            return None, [f"report: {what}", fix]
        except (ImportError, SnapshotFormatError) as exc:
            return None, [f"report: not written ({type(exc).__name__}: {exc})"]
        shown = display(str(target))
        return shown, [f"report: {shown}"]

    def record_error(self, error: SnapshotLocationError) -> None:
        """Keep a file problem (syrupy reports it as the assertion's exception, so
        :meth:`diff_lines` never runs) for the terminal summary."""
        summary = f"cannot {error.verb} snapshot: {error.reason}"
        self._record(display(error.location), summary, None, fix=error.fix)

    def _test_id_lines(self) -> Iterator[str]:
        """Which test the file belongs to, when its name was shortened or escaped."""
        location = self._location or self.expected_location
        name = self.snapshot_name
        if name and location and Path(location).stem != name:
            yield f"  (the snapshot file of {self.test_id or name}; its name is shortened)"


SUMMARY_CHANGES = 10
"""Change-list lines per failing snapshot in the terminal summary (a line may stand
for a whole group of drift)."""


class GraphIRSnapshotAssertion(SnapshotAssertion):
    """syrupy's ``SnapshotAssertion`` as the ``graphir_snapshot`` fixture returns it.

    Three changes: its repr is short (syrupy's repr is the whole recalled snapshot
    text, which pytest prints in assertion explanations and ``--showlocals``,
    leaking whatever file a snapshot path led to); a failure raised by reading or
    writing the snapshot file (:class:`SnapshotLocationError`, or an ``OSError``
    from syrupy's own ``mkdir`` before the write) is shown as its message and fix
    rather than a traceback through syrupy; and syrupy's ``Snapshot '...' does not
    exist!`` line is dropped, since the extension's message says it with the path
    and the fix. Every line of the failure message has its control characters
    escaped.
    """

    def __repr__(self) -> str:
        location = self.extension.get_location(test_location=self.test_location, index=0)
        return escape_controls(f"<graphir_snapshot {display(location)}>")

    def get_assert_diff(
        self,
        *,
        diff_mode: DiffMode = DiffMode.DETAILED,  # type: ignore[assignment]  # py3.10 stubs
    ) -> list[str]:
        """syrupy's failure lines (``pytest_assertrepr_compare``), made terminal-safe."""
        result = self.executions.get(self.num_executions - 1)
        error = result.exception if result is not None else None
        if isinstance(error, OSError) and result is not None:  # syrupy's own mkdir
            error = write_error(result.snapshot_location, error)
        if isinstance(error, SnapshotLocationError):
            lines = error.lines()
            extension = self.extension
            if isinstance(extension, GraphIRExtension):
                extension.record_error(error)
        else:
            lines = super().get_assert_diff(diff_mode=diff_mode)
            if result is not None and result.recalled_data is None and lines:
                # syrupy's "Snapshot '<name>' does not exist!": diff_lines says it
                # with the path and the fix
                missing = gettext("Snapshot '{}' does not exist!").format(result.snapshot_name)
                lines = [line for line in lines if line != missing]
        return [escape_controls(line) for line in lines]
