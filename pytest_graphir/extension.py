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

import hashlib
import os
import re
import stat
import tempfile
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from syrupy.assertion import DiffMode, SnapshotAssertion
from syrupy.extensions.base import AbstractSyrupyExtension
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from . import provenance
from .compare import DEFAULT_MAX_LINES, Change, Comparison, Tolerance, compare
from .ir import GraphIR
from .serialize import HEADER, SnapshotFormatError, decode, dumps, loads

if TYPE_CHECKING:
    from syrupy.data import SnapshotCollection
    from syrupy.location import PyTestLocation
    from syrupy.types import SnapshotIndex

FIX = "run `pytest --graphir-update` to rewrite it from the current model"
DEFAULT_MAX_SNAPSHOT_BYTES = 32 * 2**20
"""Default of the ``graphir_max_snapshot_bytes`` ini option: 32 MiB, more than ten
times the largest real snapshot measured (a 160-layer Llama, 2.8 MB)."""
MAX_STEM_BYTES = 200
"""Longest snapshot file name (UTF-8 bytes, without ``.graphir``); file systems
allow 255, and the temporary file of an update needs some room too."""

# Characters escaped in messages: C0/C1 controls (terminal escape sequences),
# format characters (bidi overrides), line/paragraph separators, surrogates.
_ASCII_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def escape_controls(text: str) -> str:
    """``text`` with control and format characters written as ``\\x1b``-style escapes.

    Used on every line of a failure message, so that names taken from a model or
    a snapshot file (``\\x1b[31m`` in a node name) cannot drive the terminal.
    Newlines and tabs are escaped too: a message line stays one line.

    Args:
        text: one message line.

    Returns:
        The line, printable characters unchanged.
    """
    if text.isascii():
        if not _ASCII_CONTROL.search(text) and "\n" not in text and "\t" not in text:
            return text
        return "".join(
            c if " " <= c <= "~" else c.encode("unicode_escape").decode("ascii") for c in text
        )
    return "".join(
        c.encode("unicode_escape").decode("ascii")
        if (c < " " or unicodedata.category(c) in _ESCAPED_CATEGORIES)
        else c
        for c in text
    )


def snapshot_file_stem(name: str) -> str:
    """The file name (without suffix) of the snapshot called ``name``.

    syrupy's single-file extensions drop the characters a file name cannot hold
    (``/ \\ ? * : | " < >`` and control characters) and cut at 255 characters, so
    ``test[a/b]``, ``test[a\\b]`` and ``test[ab]`` shared one file and a long id
    overflowed the file system's limit. Here a name that is already a valid, short
    file name is kept as is; any other is cleaned, cut to :data:`MAX_STEM_BYTES`
    UTF-8 bytes and suffixed with ``~`` and 12 hex digits of its SHA-256, so two
    different names never share a file.

    Args:
        name: syrupy's snapshot name (the test's name with its parameter id).

    Returns:
        The stem, at most :data:`MAX_STEM_BYTES` bytes in UTF-8.
    """
    clean = SingleFileSnapshotExtension._sanitize_filename(name)
    if (
        clean == name
        and len(name.encode("utf-8", "surrogatepass")) <= MAX_STEM_BYTES
        and not name.startswith(".")
        and clean
    ):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    budget = MAX_STEM_BYTES - len(digest) - 1
    head = clean.encode("utf-8", "surrogatepass")[:budget].decode("utf-8", "ignore")
    return f"{head.lstrip('.')}~{digest}"


_HASHED_STEM = re.compile(r"^(?P<head>.*)~[0-9a-f]{12}$", re.DOTALL)


class SnapshotLocationError(Exception):
    """The snapshot's path holds something that is not a snapshot file we may use.

    Attributes:
        location: the path (as syrupy names it).
        reason: what is there, without the location.
        fix: what to do.
    """

    def __init__(self, location: str, reason: str, fix: str) -> None:
        self.location = location
        self.reason = reason
        self.fix = fix
        super().__init__(f"{location}: {reason}; {fix}")

    def lines(self) -> list[str]:
        """The failure message: what is wrong where, then the fix."""
        return [
            f"graphir: cannot use snapshot {_display(self.location)}: {self.reason}",
            f"  fix: {self.fix}",
        ]


class UnreadableSnapshot(str):
    """What :meth:`GraphIRExtension.read_snapshot_data_from_location` returns for a
    file that exists but cannot be used; the text is a placeholder, never file content.

    syrupy then calls :meth:`GraphIRExtension.matches` (False), so a plain run fails
    with :attr:`error` and ``--graphir-update`` rewrites the file.

    Attributes:
        error: why (:class:`SnapshotFormatError` with a line, or
            :class:`SnapshotLocationError`).
    """

    error: SnapshotFormatError | SnapshotLocationError

    def __new__(cls, error: SnapshotFormatError | SnapshotLocationError) -> UnreadableSnapshot:
        obj = super().__new__(cls, "<unreadable graphir snapshot>")
        obj.error = error
        return obj


RECEIVED_SUFFIX = ".received"
"""Appended to a snapshot's file name for the snapshot a failing run produced."""


def _display(path: str) -> str:
    """``path`` relative to the working directory when it is below it; symlinks are
    not resolved (the message names the path syrupy uses, not a link's target)."""
    absolute = os.path.abspath(path)
    cwd = os.getcwd()
    if absolute.startswith(cwd.rstrip(os.sep) + os.sep):
        return absolute[len(cwd.rstrip(os.sep)) + 1 :]
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
    root: ClassVar[str | None] = None
    """The repository (pytest's rootdir), set by the fixture: snapshot paths that
    symlinks lead out of it are neither read nor written through."""

    def __init__(self) -> None:
        super().__init__()
        self.tolerance = Tolerance()
        self.max_diff_lines = DEFAULT_MAX_LINES
        self.max_snapshot_bytes = DEFAULT_MAX_SNAPSHOT_BYTES
        self.expected_location: str | None = None
        self.test_id = ""  # pytest node id, for messages and the terminal summary
        self.snapshot_name: str | None = None  # syrupy's name of the snapshot
        self.received_dir: tuple[str, Path, Path | None] | None = None
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
        match = _HASHED_STEM.match(stem or "")
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
            data = self._read_bytes(snapshot_location)
            return None if data is None else decode(data)
        except (SnapshotFormatError, SnapshotLocationError) as exc:
            return UnreadableSnapshot(exc)

    def _read_bytes(self, location: str) -> bytes | None:
        path = Path(location)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SnapshotLocationError(location, f"cannot be read ({exc.strerror})", FIX) from None
        self._check_inside_root(location)
        if stat.S_ISLNK(info.st_mode):
            try:
                info = os.stat(path)
            except OSError:
                raise SnapshotLocationError(
                    location,
                    f"is a symlink to {_shown_path(os.readlink(path))}, which does not exist",
                    f"remove the link, or {FIX}",
                ) from None
        if stat.S_ISDIR(info.st_mode):
            raise _directory_error(location)
        if not stat.S_ISREG(info.st_mode):
            raise SnapshotLocationError(
                location, "is not a regular file (a device, FIFO or socket)", f"remove it, or {FIX}"
            )
        limit = self.max_snapshot_bytes
        if info.st_size > limit:
            raise _size_error(location, info.st_size, limit)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the stat
                raise SnapshotLocationError(location, "is not a regular file", FIX)
            with os.fdopen(fd, "rb", closefd=False) as f:
                want = min(limit, info.st_size) + 1  # read(n) allocates n bytes first
                data = f.read(want)
                if len(data) == want and want <= limit:  # it grew since the stat
                    data += f.read(limit + 1 - want)
        finally:
            os.close(fd)
        if len(data) > limit:
            raise _size_error(location, len(data), limit)
        if not data:
            raise SnapshotFormatError("the file is empty", 1)
        return data

    @classmethod
    def _check_inside_root(cls, location: str) -> None:
        """Refuse a path that symlinks lead outside the repository (``root``)."""
        path = Path(os.path.abspath(location))
        resolved = path.resolve()
        if resolved == path or cls.root is None:
            return
        root = Path(cls.root).resolve()
        if resolved == root or root in resolved.parents:
            return
        link = next((p for p in [path, *path.parents] if p.is_symlink()), path)
        which = "it" if link == path else f"its directory {_shown_path(str(link))}"
        raise SnapshotLocationError(
            location,
            f"{which} is a symlink to "
            f"{_shown_path(os.readlink(link) if link.is_symlink() else str(resolved))}, "
            f"outside the repository ({_shown_path(str(root))}); pytest-graphir does not "
            "follow it",
            "put the snapshot file itself in the repository (`pytest --graphir-update` "
            "replaces a linked file with a regular one)",
        )

    @classmethod
    def write_snapshot_collection(
        cls, *, snapshot_collection: SnapshotCollection, name_order: dict[str, int] | None = None
    ) -> None:
        """Write the snapshot atomically: a temporary file in the same directory,
        then ``os.replace``. An interrupted or failed write leaves the old file whole."""
        path = Path(snapshot_collection.location)
        data = next(iter(snapshot_collection)).data
        if not isinstance(data, str):
            raise TypeError(f"graphir snapshots are text, got {type(data).__name__}")
        _write_atomic(path, data, cls._replaceable_mode(path))

    @classmethod
    def _replaceable_mode(cls, path: Path) -> int:
        """Check that ``path`` may be replaced by a snapshot file; return its mode.

        A symlink is replaced by a regular file (its target is never written); a
        directory is never replaced or deleted.

        Raises:
            SnapshotLocationError: a directory is there, or symlinks lead the
                snapshot directory out of the repository.
        """
        cls._check_inside_root(str(path.parent / "_"))
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            return 0o666 & ~umask  # what open() would have created
        if stat.S_ISDIR(info.st_mode):
            raise _directory_error(str(path))
        if stat.S_ISREG(info.st_mode):
            return info.st_mode & 0o777  # keep the mode of the file we replace
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask

    # -- received snapshots (not part of syrupy's API) ----------------------------------
    @staticmethod
    def received_locations(
        *, snapshot_location: str, rootdir: Path, report_dir: Path | None
    ) -> dict[str, Path]:
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
        return self.received_locations(
            snapshot_location=snapshot_location, rootdir=rootdir, report_dir=report_dir
        ).get(mode)

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
        _write_atomic(path, data)
        return path

    def remove_received(
        self, *, snapshot_location: str, rootdir: Path, report_dir: Path | None
    ) -> None:
        """Delete the received snapshots of ``snapshot_location`` (it passed or was
        written), in every place one can be."""
        for path in self.received_locations(
            snapshot_location=snapshot_location, rootdir=rootdir, report_dir=report_dir
        ).values():
            path.unlink(missing_ok=True)

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
        fixture) and, with ``--graphir-report=DIR``, writes the HTML report and names
        it on the second line.
        """
        for line in self._message_lines(serialized_data, snapshot_data):
            yield escape_controls(line)

    def _message_lines(self, serialized_data: Any, snapshot_data: Any) -> Iterator[str]:
        location = _display(self._location or self.expected_location or "the snapshot file")
        if isinstance(snapshot_data, UnreadableSnapshot) and isinstance(
            snapshot_data.error, SnapshotLocationError
        ):
            yield from snapshot_data.error.lines()
            yield from self._test_id_lines()
            return
        if not snapshot_data:
            report = self._write_report(serialized_data, None, None)
            self._record(location, f"no snapshot at {location}", [], report)
            yield f"graphir: no snapshot at {location}; run `pytest --graphir-update` to write it"
            if report:
                yield f"  report: {report}"
            yield from self._test_id_lines()
            yield from self._received_line()
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
            yield from self._test_id_lines()
            return
        report = self._write_report(serialized_data, snapshot_data, result)
        lines = result.lines(self.max_diff_lines)
        if report:
            lines.insert(1, f"  report: {report}")
        self._record(location, result.summary(), result.changes, report)
        yield from provenance.notes(snapshot_data, serialized_data)  # the environment first
        yield from lines
        yield f"  snapshot: {location} ('-' snapshot, '+' this run); to accept: {FIX}"
        yield from self._received_line()

    def _received_line(self) -> Iterator[str]:
        where = self._location or self.expected_location
        received = self.received_path(where) if where else None
        if received is not None:
            yield (
                f"  received: {_display(str(received))} (written after the test; to "
                "accept without rerunning, copy it over the snapshot)"
            )

    # -- failure artefacts -------------------------------------------------------------
    def _record(
        self, location: str, summary: str, changes: list[Change], report: str | None
    ) -> None:
        """Keep what the terminal summary shows about this failure (plain data: under
        xdist it travels to the controller in the test report's ``user_properties``)."""
        if self.failures is None:
            return
        structural = [c for c in changes if c.kind != "drift"]
        shown = (structural or changes)[:SUMMARY_CHANGES]
        record = {
            "test": self.test_id,
            "snapshot": location,
            "summary": summary,
            "changes": [str(c) for c in shown],
            "more": len(changes) - len(shown),
            "report": report,
        }
        self.failures[:] = [r for r in self.failures if r["snapshot"] != location]
        self.failures.append(record)

    def _write_report(
        self, serialized_data: Any, snapshot_data: Any, result: Comparison | None
    ) -> str | None:
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
            page = render_html(
                new,
                old,
                result.changes if result else (),
                title=self.test_id or str(relative),
                tolerance_note=result.summary() if result else "",
            )
            _write_atomic(target, page)
        except (ImportError, OSError, SnapshotFormatError) as exc:
            return f"not written ({type(exc).__name__}: {exc})"
        return _display(str(target))

    def _test_id_lines(self) -> Iterator[str]:
        """Which test the file belongs to, when its name was shortened or escaped."""
        location = self._location or self.expected_location
        name = self.snapshot_name
        if name and location and Path(location).stem != name:
            yield f"  (the snapshot file of {self.test_id or name}; its name is shortened)"


SUMMARY_CHANGES = 10
"""Change lines per failing snapshot in the terminal summary."""


def _write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Write ``text`` (UTF-8, ``\\n`` line ends) to ``path`` through a temporary file in
    the same directory and ``os.replace``, so a failed or interrupted write leaves the
    old file whole; the new file gets permission bits ``mode``. The temporary name is
    bounded: ``path.name`` may already be near the file system's limit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:48]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _shown_path(path: str) -> str:
    return escape_controls(path)


def _directory_error(location: str) -> SnapshotLocationError:
    return SnapshotLocationError(
        location,
        "a directory is there, not a snapshot file",
        "pytest-graphir never deletes a directory: move or remove it yourself, then run "
        "`pytest --graphir-update` to write the snapshot",
    )


def _size_error(location: str, size: int, limit: int) -> SnapshotLocationError:
    return SnapshotLocationError(
        location,
        f"the file is {size:,} bytes, over the {limit:,}-byte limit on "
        "snapshots (the ini option graphir_max_snapshot_bytes)",
        f"{FIX}, or raise graphir_max_snapshot_bytes if the model really is that large",
    )


class GraphIRSnapshotAssertion(SnapshotAssertion):
    """syrupy's ``SnapshotAssertion`` as the ``graphir_snapshot`` fixture returns it.

    Two changes: its repr is short (syrupy's repr is the whole recalled snapshot
    text, which pytest prints in assertion explanations and ``--showlocals``,
    leaking whatever file a snapshot path led to); and a failure raised by
    reading or writing the snapshot file (:class:`SnapshotLocationError`) is shown
    as its message and fix rather than a traceback through syrupy. Every line of
    the failure message has its control characters escaped.
    """

    def __repr__(self) -> str:
        location = self.extension.get_location(test_location=self.test_location, index=0)
        return escape_controls(f"<graphir_snapshot {_display(location)}>")

    def get_assert_diff(
        self,
        *,
        diff_mode: DiffMode = DiffMode.DETAILED,  # type: ignore[assignment]  # py3.10 stubs
    ) -> list[str]:
        """syrupy's failure lines (``pytest_assertrepr_compare``), made terminal-safe."""
        result = self.executions.get(self.num_executions - 1)
        if result is not None and isinstance(result.exception, SnapshotLocationError):
            lines = result.exception.lines()
        else:
            lines = super().get_assert_diff(diff_mode=diff_mode)
        return [escape_controls(line) for line in lines]
