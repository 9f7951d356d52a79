"""The syrupy extension behind ``graphir_snapshot``: one ``.graphir`` file per test.

Built on syrupy's ``SingleFileSnapshotExtension`` (syrupy 7), overriding only what
its docs mark as overridable:

* ``serialize``: :class:`GraphIR` -> snapshot text (:mod:`pytest_graphir.serialize`);
  under an update, with the stored statistics that are within the tolerance kept
  (:mod:`pytest_graphir.compare.keep`), so an accepted change rewrites only its lines;
* ``matches``: parse both texts and :func:`pytest_graphir.compare.compare` them, so
  statistics match within a tolerance. When it returns True syrupy writes nothing,
  even under ``--graphir-update``: in-tolerance drift never churns the file;
* ``diff_lines``: the failure message, naming nodes (``changed: ... op gelu -> relu``);
* ``read_snapshot_data_from_location``: remembers which file was read, so a
  malformed snapshot is reported with its path and line;
* ``write_snapshot_collection``: writes to a temporary file and ``os.replace``\\s it,
  so a failed update never truncates a snapshot.

As in syrupy (``matches`` decides, ``diff_lines`` renders), deciding and rendering
write nothing: :meth:`GraphIRExtension.settle`, called by
:class:`GraphIRSnapshotAssertion` after each comparison, writes the artefacts of its
result (the HTML report, the received file, the terminal summary's record) in one
place, and the message names what it wrote. The files themselves (names, bounded
reads, atomic writes) are :mod:`.files`; received files are :mod:`.received`.

The class is constructible without arguments (default :class:`GraphIRSettings`):
syrupy's xdist controller re-imports it by name (``session.py``) to delete unused
snapshots.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from gettext import gettext
from pathlib import Path
from typing import Any

import pytest
from syrupy.assertion import AssertionResult, DiffMode, SnapshotAssertion
from syrupy.data import SnapshotCollection
from syrupy.extensions.base import AbstractSyrupyExtension
from syrupy.extensions.single_file import SingleFileSnapshotExtension
from syrupy.location import PyTestLocation
from syrupy.types import SnapshotIndex

from .. import provenance
from ..compare import Comparison, PatternError, Tolerance, compare, pattern_names
from ..compare.keep import keep_within
from ..compare.message import MORE_HINT
from ..defaults import DEFAULT_MAX_LINES, DEFAULT_MAX_SNAPSHOT_BYTES
from ..ir import GraphIR
from ..serialize import HEADER, SnapshotFormatError, dumps, loads
from . import files, launcher, received
from .files import FIX, SnapshotLocationError, display, escape_controls, indented, write_atomic
from .received import ReceivedTarget

SUMMARY_CHANGES = 10
"""Change-list lines per failing snapshot in the terminal summary (a line may stand
for a whole group of drift)."""


@dataclass(frozen=True)
class GraphIRSettings:
    """What one ``graphir_snapshot`` assertion works with; the fixture builds it from
    the ini options, the ``graphir`` marker and the command line.

    Attributes:
        tolerance: statistics tolerance used by ``matches``.
        max_diff_lines: change lines shown in a failure (0 = all).
        more_hint: how a failure whose change list ``max_diff_lines`` cut says to see
            it all (the marker's wording where the marker set the limit).
        max_snapshot_bytes: largest snapshot file read or written.
        updating: syrupy may write the snapshot (``--graphir-update``,
            ``--snapshot-update``): text over ``max_snapshot_bytes`` and paths that
            symlinks lead out of ``rootdir`` fail before anything is written.
        test_id: pytest node id, for messages and the terminal summary (and which
            test a snapshot file is of, where :func:`.files.snapshot_file_stem`
            shortened its name).
        received: where a failure's received file goes
            (:func:`.received.received_target`); None: nowhere.
        report_dir: where a failure's HTML report goes; None: nowhere.
        rootdir: the repository (pytest's rootdir): snapshot paths that symlinks
            lead out of it are neither read nor written through; None: no check.
        failures: where the terminal summary's failure records go (the test item's
            stash); None: nowhere.
    """

    tolerance: Tolerance = field(default_factory=Tolerance)
    max_diff_lines: int = DEFAULT_MAX_LINES
    more_hint: str = MORE_HINT
    max_snapshot_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES
    updating: bool = False
    test_id: str = ""
    received: ReceivedTarget | None = None
    report_dir: Path | None = None
    rootdir: Path | None = None
    failures: list[dict[str, Any]] | None = field(default=None, compare=False)


Outcome = Comparison | SnapshotFormatError | SnapshotLocationError
"""A comparison, or why the stored snapshot could not be read."""


class GraphIRExtension(launcher.RankDiscovery, SingleFileSnapshotExtension):
    """Stores a :class:`GraphIR` as ``__snapshots__/<test module>/<test name>.graphir``.
    Its discovery leaves out the files another rank of a launcher accounts for
    (:class:`.launcher.RankDiscovery`).

    Args:
        settings: this assertion's settings (default: the options' defaults, no
            artefacts, no repository check).
    """

    file_extension = files.SNAPSHOT_SUFFIX[1:]

    def __init__(self, settings: GraphIRSettings | None = None) -> None:
        super().__init__()
        self.settings = settings or GraphIRSettings()
        # per snapshot, what settle wrote: the message's lines about the report and
        # about the received file (both indented)
        self.artefacts: dict[str, tuple[list[str], list[str]]] = {}
        self._location: str | None = None
        self._recalled: str | None = None

    # -- serializer --------------------------------------------------------------------
    def serialize(self, data: Any, **filters: Any) -> str:
        """Return the snapshot text of ``data`` (a :class:`GraphIR` or its text; every
        rank's, :class:`AllRanks`, as one text: :meth:`_one_for_all`).

        syrupy's ``include``/``exclude``/``matcher`` filters (``filters``) do not apply
        to graph snapshots and are ignored. Under an update (``updating``), the statistics
        within the tolerance of the snapshot just read keep its values
        (:meth:`_kept`), so the file syrupy writes changes only where the graph did.

        Raises:
            TypeError: ``data`` is not a GraphIR; syrupy reports it as the failure.
            RanksDisagree: the ranks' traces of :class:`AllRanks` differ.
            SnapshotLocationError: under an update (``updating``), the text is over
                ``max_snapshot_bytes`` (no file is written that the next run
                refuses), or symlinks lead the snapshot's directory out of the
                repository (nothing is written through them).
            PatternError: on a first write, a tolerance or ignore pattern matches no
                node or parameter of the graph, or the ignore patterns match all of
                them (:meth:`~pytest_graphir.compare.Tolerance.check_patterns`).
        """
        text = self._one_for_all(data) if isinstance(data, AllRanks) else _text(data)
        if self.settings.updating:
            text = self._kept(text)
            if where := self._location:
                if launcher.launched() and launcher.snapshot_rank(where) is None:
                    launcher.agree(where, self.settings.rootdir or Path.cwd(), text, self._same)
                files.check_inside_root(where, self.settings.rootdir, directory=True)
            size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
            if size > (limit := self.settings.max_snapshot_bytes):
                raise files.oversize_error(self._location or "the snapshot file", size, limit)
        return text

    def _one_for_all(self, ranks: AllRanks) -> str:
        """The one text of every rank's trace in ``ranks``: rank 0's, when every
        other rank's is identical or equal within the tolerance (:meth:`_same`, as
        the ranks of a launcher agree: :func:`.launcher.disagreement`).

        Raises:
            TypeError: ``ranks`` holds no list or tuple of traces, or an empty one.
            RanksDisagree: some rank's text differs from rank 0's; nothing is written.
        """
        traces = ranks.traces
        if not isinstance(traces, (list, tuple)) or not traces:
            raise TypeError(
                "graphir_snapshot.ranks() compares every rank's trace with one snapshot: "
                "write `assert irs == graphir_snapshot.ranks()` with irs the list "
                f"run_ranks returned (got {_described(traces)})"
            )
        reference, *others = map(_text, traces)
        differing, detail = launcher.disagreement(reference, dict(enumerate(others, 1)), self._same)
        if differing:
            where, first = self._location or "the snapshot file", detail[str(differing[0])]
            raise launcher.RanksDisagree(where, differing, [], first, in_process=True)
        return reference

    def _same(self, text: str, other: str) -> bool:
        """Whether two ranks' texts of one snapshot agree: equal within the tolerance
        (:meth:`matches`, ``text`` as the stored one)."""
        return self.matches(serialized_data=other, snapshot_data=text)

    def _kept(self, text: str) -> str:
        """``text`` with the stored values within the tolerance kept
        (:func:`~pytest_graphir.compare.keep.keep_within`) from the snapshot that
        :meth:`read_snapshot_data_from_location` read just before (syrupy reads, then
        serializes, on each assertion); ``text`` itself when none was read since the
        last call or either text does not load (an update rewrites such a file)."""
        stored, self._recalled = self._recalled, None
        if stored is None:  # a first write: no comparison checks the marker's patterns
            tolerance = self.settings.tolerance
            if tolerance.patterns or tolerance.ignore:  # parse the text only for them
                tolerance.check_patterns(pattern_names(_loads(text)))
            return text
        try:
            received = loads(text)
            kept = keep_within(loads(stored), received, self.settings.tolerance)
        except SnapshotFormatError:
            return text
        return text if kept == received else dumps(kept)

    # -- naming ------------------------------------------------------------------------
    @classmethod
    def get_snapshot_name(cls, *, test_location: PyTestLocation, index: SnapshotIndex = 0) -> str:
        """syrupy's snapshot name, made a safe, bounded file name (:func:`snapshot_file_stem`)."""
        return files.snapshot_file_stem(
            AbstractSyrupyExtension.get_snapshot_name(test_location=test_location, index=index)
        )

    @classmethod
    def matches_test_location(
        cls, *, test_location: PyTestLocation, snapshot_location: str
    ) -> bool:
        """Whether the file at ``snapshot_location`` may belong to ``test_location``
        (syrupy's unused-snapshot detection); also knows shortened names, and a
        symlink loop (syrupy's ``Path.resolve`` raises ``RuntimeError`` on one before
        Python 3.13; an update replaces the link with the file)."""
        try:
            if super().matches_test_location(
                test_location=test_location, snapshot_location=snapshot_location
            ):
                return True
        except RuntimeError:
            return test_location.matches_snapshot_name(Path(snapshot_location).stem)
        loc = Path(snapshot_location)
        # the name first: no file system call for the usual, unshortened snapshot
        return (
            files.shortened_of(loc.stem, test_location.snapshot_name_parametrized)
            and test_location.basename == loc.parent.name
            and test_location.matches_snapshot_site(snapshot_location)
        )

    # -- storage -----------------------------------------------------------------------
    def read_snapshot_data_from_location(
        self, *, snapshot_location: str, snapshot_name: str, session_id: str
    ) -> Any:
        """Read and decode the snapshot file, bounded (:func:`.files.read_snapshot`);
        never raises.

        Returns:
            The text; None when there is no file; an :class:`.files.UnreadableSnapshot` when
            the path holds a directory, a device or FIFO, a symlink leaving the
            repository, a file over ``max_snapshot_bytes``, or bytes that are not
            UTF-8. Nothing is opened before ``lstat``/``stat`` say it is a regular
            file of acceptable size, so ``/dev/zero`` never blocks a run.
        """
        self._location = snapshot_location
        self._recalled = None
        try:
            self._recalled = files.read_snapshot(
                snapshot_location, self.settings.max_snapshot_bytes, self.settings.rootdir
            )
            return self._recalled
        except (SnapshotFormatError, SnapshotLocationError) as exc:
            return files.UnreadableSnapshot(exc)

    @classmethod
    def write_snapshot_collection(
        cls, *, snapshot_collection: SnapshotCollection, name_order: dict[str, int] | None = None
    ) -> None:
        """Write the snapshot atomically: a temporary file in the same directory,
        then ``os.replace``. An interrupted or failed write leaves the old file whole.
        Under a launcher only the rank that owns the file writes it
        (:func:`.launcher.writes`).

        Raises:
            SnapshotLocationError: a directory is where the file goes; or, with
                verb ``write``, an ``OSError`` (a full disk, a read-only directory),
                named with the snapshot, its cause and the fix.
        """
        path = Path(snapshot_collection.location)
        if not launcher.writes(str(path)):  # another rank of torchrun writes it
            return
        data = next(iter(snapshot_collection)).data  # serialize's text
        try:
            write_atomic(path, str(data), files.replaceable_mode(path))
        except OSError as exc:
            raise files.write_error(str(path), exc) from None

    # -- comparator --------------------------------------------------------------------
    def _compare(self, serialized_data: Any, snapshot_data: Any) -> Outcome:
        """The comparison of this run's text with the stored one (:func:`_outcome`),
        or why the stored one could not be read."""
        if isinstance(snapshot_data, files.UnreadableSnapshot):
            return snapshot_data.error
        return _outcome(serialized_data, snapshot_data, self.settings.tolerance)

    def matches(self, *, serialized_data: Any, snapshot_data: Any) -> bool:
        """True when the stored snapshot is valid and equal within tolerance."""
        result = self._compare(serialized_data, snapshot_data)
        return isinstance(result, Comparison) and not result

    # -- the failure message -----------------------------------------------------------
    def _failure(
        self, where: str, serialized_data: Any, snapshot_data: Any
    ) -> tuple[str, Comparison | None, SnapshotLocationError | None]:
        """What failed: the summary line (without ``graphir: ``), the comparison when
        both graphs were read, the file problem when the snapshot could not be used."""
        if not snapshot_data:
            return f"no snapshot at {display(where)}", None, None
        result = self._compare(serialized_data, snapshot_data)
        if isinstance(result, SnapshotLocationError):
            return result.summary(), None, result
        if isinstance(result, Comparison):
            return result.summary(), result, None
        line = f":{result.line}" if result.line else ""
        return f"invalid snapshot {display(where)}{line}: {result.reason}", None, None

    def diff_lines(self, serialized_data: Any, snapshot_data: Any) -> Iterator[str]:
        """The failure message: a summary line, then one line per change; control
        characters escaped (:func:`escape_controls`). Writes nothing: the lines about
        the HTML report (second line) and the received file (last) say what
        :meth:`settle` wrote, or why it could not, with the fix."""
        return map(escape_controls, self._message_lines(serialized_data, snapshot_data))

    def _message_lines(self, serialized_data: Any, snapshot_data: Any) -> Iterator[str]:
        where = self._location or "the snapshot file"
        summary, result, error = self._failure(where, serialized_data, snapshot_data)
        report_lines, received_lines = self.artefacts.get(where, ([], []))
        if result is not None:
            yield from provenance.notes(snapshot_data, serialized_data)  # the environment first
            lines = result.lines(self.settings.max_diff_lines, self.settings.more_hint)
            lines[1:1] = report_lines
            yield from lines
            accept = launcher.accept_advice(FIX)
            yield f"  snapshot: {display(where)} ('-' snapshot, '+' this run); to accept: {accept}"
            yield from received_lines
            return
        if error is not None:
            yield from error.lines()
        else:  # no snapshot, or one that does not load
            write = launcher.accept_advice("run `pytest --graphir-update`")
            yield f"graphir: {summary}" + ("" if snapshot_data else f"; {write} to write it")
            yield from report_lines
            if snapshot_data:
                yield f"  fix: {launcher.accept_advice(FIX)}"
        test = self.settings.test_id  # which test the file is of, when shortened
        if test and self._location and files.HASHED_STEM.match(Path(self._location).stem):
            yield f"  (the snapshot file of {test}; its name is shortened)"
        yield from received_lines  # what settle wrote: nothing where syrupy failed

    # -- failure artefacts -------------------------------------------------------------
    def settle(self, result: AssertionResult) -> None:
        """Write the artefacts of one comparison's ``result`` (syrupy's record of an
        assertion); never raises.

        Passed, or written by an update: the received files of its snapshot are
        removed (a ``pytest.PytestWarning`` says so when that fails), and after an
        update the temporary files a killed update left beside it. Failed: the HTML
        report (``report_dir``), the received file (``received``) and the terminal
        summary's record (``failures``); a file that cannot be written is said in the
        message and the record, with its cause and fix (:func:`.files.not_written`).

        The record is what the terminal summary shows about this failure (plain data:
        under xdist it travels to the controller in the test report's
        ``user_properties``): ``test``, ``snapshot`` (its displayed path), ``report``
        (the report's displayed path, None when not written) and ``lines``, the
        section's lines under the test's name, indented as printed: ``provenance``,
        the line that opens the message (:func:`.provenance.note`), first; the
        summary line; the first :data:`SUMMARY_CHANGES` lines of the change list,
        worded and ordered as the failure message's (:meth:`.Comparison.change_lines`),
        never more than the message itself shows (``max_diff_lines``), and how many
        change lines it leaves out, with what prints them (:func:`_more_line`); the
        snapshot; the report, and the report or received file that could not be
        written (the assertion message may be cut at default verbosity, the summary
        is not); last how to accept (:func:`.launcher.accept_advice`), or the fix
        where the snapshot could not be used.
        """
        where = result.snapshot_location
        if result.success:
            try:  # its received files and report, stale now (none without a rootdir)
                if self.settings.rootdir is not None:
                    received.remove_received(where, self.settings.rootdir, self.settings.report_dir)
            except OSError as exc:
                stale = escape_controls(display(os.fsdecode(exc.filename or where)))
                warnings.warn(
                    f"graphir: could not remove the stale received file {stale}: "
                    f"{files.cause(exc)}; it is from an earlier run, not this one: delete it",
                    pytest.PytestWarning,
                    stacklevel=1,
                )
            if self.settings.updating:
                files.remove_stale_temporaries(Path(where))
            return
        error = result.exception  # an OSError is a SnapshotLocationError by now (__eq__)
        compared, notes = None, []
        if error is None and isinstance(result.asserted_data, str):
            serialized, snapshot = result.asserted_data, result.recalled_data
            summary, compared, error = self._failure(where, serialized, snapshot)
            report, report_lines = self._write_report(where, serialized, snapshot, compared, error)
            target = self.settings.received
            wrote = received.write_received(target, where, serialized) if target else [[], []]
            received_lines, unwritten = wrote
            self.artefacts[where] = (indented(report_lines), received_lines)
            notes = provenance.notes(str(snapshot), serialized) if compared else []
        elif isinstance(error, SnapshotLocationError):
            summary, report, report_lines, unwritten = error.summary(), None, [], []
        else:
            return
        failures, limit = self.settings.failures, self.settings.max_diff_lines
        if failures is None:
            return
        lines = [f"  {line}" for line in (*notes, summary)]
        if compared:
            changes, more = compared.change_lines(SUMMARY_CHANGES, within=limit)
            lines += [f"    {line}" for line in changes]
            if more:
                cut = compared.left_out(limit)
                lines.append(f"    {_more_line(more, cut, self.settings.more_hint)}")
        shown, test = display(where), self.settings.test_id
        lines.append(f"  snapshot: {shown}")
        lines += [*indented(report_lines), *indented(unwritten)]
        accept = launcher.accept_advice(f"pytest --graphir-update '{test}'")
        if error is not None:
            lines.append(f"  fix: {error.fix}")
        elif compared is None and snapshot:  # there, but no snapshot: a repair, not a change
            lines.append(f"  fix: {accept} to rewrite it from the current model")
        else:
            lines.append(f"  to accept: {accept}")
        failures[:] = [r for r in failures if r["snapshot"] != shown]
        failures.append(dict(test=test, snapshot=shown, report=report, lines=lines))

    def _write_report(
        self, where: str, serialized: str, snapshot: Any, compared: Comparison | None, unusable: Any
    ) -> tuple[str | None, list[str]]:
        """Write the HTML report (:func:`pytest_graphir.report.render_html`) of this
        failure into ``report_dir``, at the snapshot's path relative to rootdir plus
        ``.html``.

        Returns:
            Its displayed path (None: not written) and the lines about it:
            ``report: <path>``, or, for an ``OSError``, which file, why and the fix
            (never the temporary file's name; :func:`.files.write_atomic` leaves no
            directory it made behind); ``(None, [])`` when no directory is set or the
            stored snapshot is ``unusable``.
        """
        directory = self.settings.report_dir
        if directory is None or unusable:
            return None, []
        rootdir = self.settings.rootdir or Path.cwd()
        target = received.artefact_locations(where, rootdir, directory)["page"]
        from ..report import render_html

        try:
            page = render_html(
                _loads(serialized),
                _loads(snapshot) if compared else None,
                compared.changes if compared else (),
                title=self.settings.test_id or display(where),
                tolerance_note=compared.summary() if compared else "",
            )
            write_atomic(target, page)
        except OSError as exc:
            what, fix = files.not_written(target, exc, directory, received.REPORT_ELSEWHERE)
            return None, [f"report: {what}", fix]
        except SnapshotFormatError as exc:  # this run's text, handed in as a string
            return None, [f"report: not written ({exc})"]
        shown = display(str(target))
        return shown, [f"report: {shown}"]


@dataclass(frozen=True)
class AllRanks:
    """Every rank's trace, index = rank, asserted against one snapshot
    (:meth:`GraphIRSnapshotAssertion.ranks`); what the assertion hands syrupy in
    place of the list.

    Attributes:
        traces: what the test compared: the list ``run_ranks`` returned, each a
            :class:`GraphIR` or its snapshot text.
    """

    traces: Any


def _text(data: Any) -> str:
    """The snapshot text of one trace: a :class:`GraphIR` or its text.

    Raises:
        TypeError: ``data`` is neither; the message says what to write instead.
    """
    if isinstance(data, GraphIR):
        return dumps(data)
    if isinstance(data, str) and data.startswith(HEADER):
        return data
    if isinstance(data, (list, tuple)) and data and isinstance(data[0], (GraphIR, str)):
        hint = (
            "; for the ranks' traces of run_ranks in one snapshot write "
            "`assert irs == graphir_snapshot.ranks()`, or one per rank "
            "`assert irs[r] == graphir_snapshot.rank(r)`"
        )
    else:
        hint = "; use syrupy's `snapshot` fixture for other data"
    raise TypeError(
        "graphir_snapshot compares graph IRs: write "
        f"`assert trace(model, *inputs) == graphir_snapshot` (got {_described(data)}{hint})"
    )


def _described(data: Any) -> str:
    """``data``'s type, and for a list or tuple its length: ``list of 2``."""
    name = type(data).__name__
    return f"{name} of {len(data)}" if isinstance(data, (list, tuple)) else name


def _more_line(more: int, cut: int, hint: str) -> str:
    """What the terminal summary says about the ``more`` change lines it does not list,
    ``cut`` of which the assertion message leaves out too (``max_diff_lines``): those
    no verbosity prints, so the line names what does, in the message's own words
    (``hint``: the marker's where the test's marker made the limit, else the ini
    option's)."""
    if not cut:
        return f"... and {more} more in the assertion message (-vv prints it whole)"
    which = "" if cut == more else f" {cut} of them"
    return f"... and {more} more,{which} left out of the assertion message too: {hint}"


@functools.lru_cache(maxsize=2)
def _loads(text: str) -> dict[str, Any]:
    """:func:`~pytest_graphir.serialize.loads`, the last two texts kept: syrupy's
    ``matches``, the message and :meth:`GraphIRExtension.settle` each read both."""
    return loads(text)


@functools.lru_cache(maxsize=1)
def _outcome(serialized: str, snapshot: str, tolerance: Tolerance) -> Outcome:
    """:func:`~pytest_graphir.compare.compare` of the stored text with this run's
    (computed once per pair), or why either does not load."""
    try:
        return compare(_loads(snapshot), _loads(serialized), tolerance)
    except SnapshotFormatError as exc:
        return exc


def _own_extension(extension_class: Any) -> None:
    """Refuse an ``extension_class`` other than :class:`GraphIRExtension` (or None):
    ``graphir_snapshot`` always stores through its own extension, so another would be
    ignored without a word."""
    if extension_class is not None and not issubclass(extension_class, GraphIRExtension):
        raise TypeError(
            f"graphir_snapshot stores graph IRs with its own extension, not "
            f"{getattr(extension_class, '__name__', extension_class)}; use syrupy's "
            "`snapshot` fixture for another extension"
        )


@dataclass(eq=False, repr=False)
class GraphIRSnapshotAssertion(SnapshotAssertion):
    """syrupy's ``SnapshotAssertion`` as the ``graphir_snapshot`` fixture returns it.

    Its extension is a :class:`GraphIRExtension` built with ``settings``; after each
    comparison it writes the comparison's artefacts (:meth:`GraphIRExtension.settle`).
    Its repr is short (syrupy's repr is the whole recalled snapshot text, which
    pytest prints in assertion explanations and ``--showlocals``, leaking whatever
    file a snapshot path led to); a failure raised by reading or writing the snapshot
    file (:class:`SnapshotLocationError`, or an ``OSError`` from syrupy's own
    ``mkdir`` before the write) is shown as its message and fix rather than a
    traceback through syrupy; and syrupy's ``Snapshot '...' does not exist!`` line is
    dropped, since the extension's message says it with the path and the fix. Every
    line of the failure message has its control characters escaped. A marker pattern
    that matches no node, or ignore patterns that match every node
    (:class:`~pytest_graphir.compare.PatternError`), fail the test with that message
    alone (``pytest.fail(..., pytrace=False)``), before anything is written.
    """

    settings: GraphIRSettings = field(default_factory=GraphIRSettings, kw_only=True)
    _all_ranks: bool = field(default=False, init=False, repr=False)

    @functools.cached_property
    def extension(self) -> GraphIRExtension:  # type: ignore[override]
        """The :class:`GraphIRExtension` of ``settings`` (syrupy's own property would
        build ``extension_class()`` without them)."""
        return GraphIRExtension(self.settings)

    def __eq__(self, other: object) -> bool:
        if self._all_ranks:  # graphir_snapshot.ranks(): this assertion only
            self._all_ranks, other = False, AllRanks(other)
        matched = super().__eq__(other)
        result = self.executions[self.num_executions - 1]
        if isinstance(result.exception, OSError):  # syrupy's own mkdir before the write
            result.exception = files.write_error(result.snapshot_location, result.exception)
        if isinstance(result.exception, PatternError):  # the test's options, not the model
            where = f"@pytest.mark.graphir on {self.settings.test_id}"
            pytest.fail(f"graphir: {where}: {result.exception}", pytrace=False)
        if matched and launcher.launched() and not launcher.writes(result.snapshot_location):
            # syrupy counts an update's match as written; another rank writes this file
            result.created = result.updated = False
        self.extension.settle(result)
        return matched

    def __call__(self, **options: Any) -> GraphIRSnapshotAssertion:
        """syrupy's per-assertion options (``name=``, ``exclude=`` ...).

        Raises:
            TypeError: ``extension_class`` is another extension (:func:`_own_extension`).
        """
        _own_extension(options.get("extension_class"))
        return super().__call__(**options)  # type: ignore[return-value]

    def with_defaults(self, **defaults: Any) -> GraphIRSnapshotAssertion:
        """syrupy's ``with_defaults`` (and so ``use_extension``), keeping ``settings``:
        syrupy builds the new assertion from its own fields only, which would drop the
        test's tolerance, options and report paths.

        Args:
            **defaults: syrupy's ``exclude``, ``include``, ``matcher``,
                ``extension_class``.

        Returns:
            A new assertion with this one's ``settings``.

        Raises:
            TypeError: ``extension_class`` is another extension (:func:`_own_extension`).
        """
        _own_extension(defaults.get("extension_class"))
        new = super().with_defaults(**defaults)
        assert isinstance(new, GraphIRSnapshotAssertion)
        new.settings = self.settings
        new.__dict__.pop("extension", None)  # built by syrupy's __post_init__ without them
        return new

    def rank(self, rank: int) -> GraphIRSnapshotAssertion:
        """This assertion against rank ``rank``'s own snapshot,
        ``__snapshots__/<module>/<test>[rank<rank>].graphir`` (syrupy's ``name=``):
        ``assert irs[1] == graphir_snapshot.rank(1)``."""
        return self(name=f"rank{rank}")  # type: ignore[return-value]

    def ranks(self) -> GraphIRSnapshotAssertion:
        """This assertion against one snapshot shared by every rank, the test's own
        (``<test>.graphir``, or the name given, ``graphir_snapshot(name=...).ranks()``):
        ``assert irs == graphir_snapshot.ranks()``, with ``irs`` the list of the
        ranks' traces (each a :class:`GraphIR` or its text), index = rank.

        The next comparison (that assertion only) takes the list: when every rank's
        text equals rank 0's, identical or within the tolerance (as the ranks of a
        launcher agree), rank 0's text is compared with the snapshot, and written
        under an update. The comparison fails, and an update writes nothing, when a
        rank's trace differs from rank 0's (:class:`~.launcher.RanksDisagree`: the
        differing ranks, the first differing line, the fix: per-rank snapshots with
        :meth:`rank`), or when what is compared is not a non-empty list or tuple of
        traces (``TypeError``).

        Returns:
            This assertion, for the next comparison.
        """
        self._all_ranks = True
        return self

    def __repr__(self) -> str:
        location = self.extension.get_location(test_location=self.test_location, index=0)
        return escape_controls(f"<graphir_snapshot {display(location)}>")

    def get_assert_diff(
        self,
        *,
        diff_mode: DiffMode = DiffMode.DETAILED,  # type: ignore[assignment]  # py3.10 stubs
    ) -> list[str]:
        """syrupy's failure lines (``pytest_assertrepr_compare``), made terminal-safe."""
        result = self.executions[self.num_executions - 1]  # as syrupy's own reads it
        if isinstance(result.exception, SnapshotLocationError):  # OSError: see __eq__
            return [escape_controls(line) for line in result.exception.lines()]
        # syrupy's "Snapshot '<name>' does not exist!": diff_lines says it with the path
        # and the fix
        missing = gettext("Snapshot '{}' does not exist!").format(result.snapshot_name)
        lines = super().get_assert_diff(diff_mode=diff_mode)
        return [escape_controls(line) for line in lines if line != missing]
