"""Snapshot files on disk: safe names, bounded reads, atomic writes, where links lead.

Everything here works on paths and text; nothing knows syrupy's life cycle (the
extension in :mod:`.syrupy_extension` calls in) or pytest's (the received files in
:mod:`.received`).

* names: :func:`snapshot_file_stem` makes any snapshot name a safe, bounded, distinct
  file name; :func:`escape_controls` makes any text taken from a model or a file safe
  to print;
* reading: :func:`read_snapshot` opens nothing before ``lstat``/``stat`` say it
  is a regular file of acceptable size inside the repository;
* writing: :func:`write_atomic` writes a temporary file beside the target and
  ``os.replace``\\s it, so a failed write leaves the old file whole (and no directory
  it made); :func:`not_written` and :func:`remedy` say what to do when it fails.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import itertools
import os
import re
import stat
import tempfile
import time
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from syrupy.extensions.single_file import SingleFileSnapshotExtension

if TYPE_CHECKING:  # loaded when needed: the plugin imports this module at start-up
    from ..serialize import SnapshotFormatError

SNAPSHOT_SUFFIX = ".graphir"
"""The file name suffix of a graphir snapshot."""
FIX = "run `pytest --graphir-update` to rewrite it from the current model"
MAX_STEM_BYTES = 200
"""Longest snapshot file name (UTF-8 bytes, without ``.graphir``); file systems
allow 255, and the temporary file of an update needs some room too."""

# Characters escaped in messages: C0/C1 controls (terminal escape sequences),
# format characters (bidi overrides), line/paragraph separators, surrogates.
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
    if text.isascii() and text.isprintable():  # no control character: nothing to escape
        return text
    return "".join(
        c.encode("unicode_escape").decode("ascii")
        if (c < " " or unicodedata.category(c) in _ESCAPED_CATEGORIES)
        else c
        for c in text
    )


def display(path: str) -> str:
    """``path`` relative to the working directory when it is below it; symlinks are
    not resolved (the message names the path syrupy uses, not a link's target)."""
    absolute, cwd = os.path.abspath(path), os.getcwd().rstrip(os.sep) + os.sep
    return absolute[len(cwd) :] if absolute.startswith(cwd) else path


def sanitize_filename(name: str) -> str:
    """``name`` without the characters syrupy drops from a single-file snapshot's name
    (``/ \\ ? * : | " < >`` and control characters): syrupy has no public function for
    it, so its private ``SingleFileSnapshotExtension._sanitize_filename`` is called
    here, once (tests/test_syrupy_internals.py)."""
    return SingleFileSnapshotExtension._sanitize_filename(name)


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
    clean, encoded = sanitize_filename(name), name.encode("utf-8", "surrogatepass")
    if name and clean == name and len(encoded) <= MAX_STEM_BYTES and not name.startswith("."):
        return name
    digest = hashlib.sha256(encoded).hexdigest()[:12]
    budget = MAX_STEM_BYTES - len(digest) - 1
    head = clean.encode("utf-8", "surrogatepass")[:budget].decode("utf-8", "ignore")
    return f"{head.lstrip('.')}~{digest}"


HASHED_STEM = re.compile(r"^(?P<head>.*)~[0-9a-f]{12}$", re.DOTALL)
"""A stem :func:`snapshot_file_stem` shortened: the cleaned head, ``~``, 12 hex digits."""


def shortened_of(stem: str, name: str) -> bool:
    """Whether ``stem`` is one :func:`snapshot_file_stem` shortened (:data:`HASHED_STEM`)
    that may be of the snapshot called ``name`` (a test's name with its parameter id).
    The hash covers the whole snapshot name, ``.1`` included, so ``name`` owns the stem
    when the stem's head and ``name`` cleaned are one the other's start: a long name's
    heads are all cut alike."""
    match = HASHED_STEM.match(stem)
    if match is None:
        return False
    head, own = match["head"], sanitize_filename(name)
    return head.startswith(own) or own.startswith(head)


class SnapshotLocationError(Exception):
    """The snapshot's path holds something that is not a snapshot file we may use, or
    writing it failed.

    Attributes:
        location: the path (as syrupy names it).
        reason: what is there, without the location.
        fix: what to do.
        verb: what could not be done with the snapshot (the message's ``cannot
            use``; ``write`` for a failed write, :func:`write_error`, where the file
            that was there is unchanged).
    """

    def __init__(self, location: str, reason: str, fix: str, verb: str = "use") -> None:
        self.location = location
        self.reason = reason
        self.fix = fix
        self.verb = verb
        super().__init__(f"{location}: {reason}; {fix}")

    def summary(self) -> str:
        """The terminal summary's line: what could not be done, and why."""
        return f"cannot {self.verb} snapshot: {self.reason}"

    def lines(self) -> list[str]:
        """The failure message: what is wrong where, then the fix."""
        return [
            f"graphir: cannot {self.verb} snapshot {display(self.location)}: {self.reason}",
            f"  fix: {self.fix}",
        ]


class UnreadableSnapshot(str):
    """What the extension's read returns for a file that exists but cannot be used;
    the text is a placeholder, never file content.

    syrupy then calls the extension's ``matches`` (False), so a plain run fails
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


# -- reading ---------------------------------------------------------------------------


def read_snapshot(location: str, limit: int, root: Path | None) -> str | None:
    """The text of the snapshot file at ``location``, read bounded, then decoded
    (:func:`~pytest_graphir.serialize.decode`).

    Nothing is opened before ``lstat``/``stat`` say it is a regular file of at most
    ``limit`` bytes, so ``/dev/zero`` or a FIFO never blocks a run, and a file that
    grows between the ``stat`` and the read is still cut at ``limit + 1`` bytes.

    Args:
        location: the snapshot's path.
        limit: largest accepted size in bytes (``graphir_max_snapshot_bytes``).
        root: the repository; a path that symlinks lead outside it is refused.
            None: no check.

    Returns:
        The text, or None when nothing is at ``location``.

    Raises:
        SnapshotLocationError: a directory, device, FIFO or socket, a dangling
            symlink or a symlink loop, a symlink leaving ``root``, a file over
            ``limit``, a file that cannot be opened (no read permission), or an
            ``OSError`` from ``lstat``.
        SnapshotFormatError: the file is empty, or its bytes are not UTF-8.
    """
    try:
        info = os.lstat(location)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SnapshotLocationError(location, f"cannot be read ({exc.strerror})", FIX) from None
    check_inside_root(location, root)
    if stat.S_ISLNK(info.st_mode):
        try:
            info = os.stat(location)
        except OSError as exc:
            raise link_error(location, exc) from None
    if stat.S_ISDIR(info.st_mode):
        raise directory_error(location)
    if not stat.S_ISREG(info.st_mode):
        raise SnapshotLocationError(
            location, "is not a regular file (a device, FIFO or socket)", f"remove it, or {FIX}"
        )
    if info.st_size > limit:
        raise size_error(location, info.st_size, limit)
    try:
        fd = os.open(location, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise read_error(location, exc, info.st_mode) from None
    with os.fdopen(fd, "rb") as f:  # closes fd, also when the check below raises
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the stat
            raise SnapshotLocationError(location, "is not a regular file", FIX)
        want = min(limit, info.st_size) + 1  # read(n) allocates n bytes first
        data = f.read(want)
        if len(data) == want and want <= limit:  # it grew since the stat
            data += f.read(limit + 1 - want)
    if len(data) > limit:
        raise size_error(location, len(data), limit)
    from ..serialize import SnapshotFormatError, decode

    if not data:
        raise SnapshotFormatError("the file is empty", 1)
    return decode(data)


def outside_root(location: str, root: Path | None) -> Path | None:
    """Where ``location`` really is, when symlinks lead it outside ``root``; else None
    (also when ``root`` is None or no symlink is on the way)."""
    path = Path(os.path.abspath(location))
    resolved = Path(os.path.realpath(path))  # Path.resolve raises on a symlink loop
    if resolved == path or root is None or resolved.is_relative_to(os.path.realpath(root)):
        return None
    return resolved


def check_inside_root(location: str, root: Path | None, *, directory: bool = False) -> None:
    """Refuse a path that symlinks lead outside the repository ``root``; with
    ``directory``, only its directory is checked (before the file is written).

    Raises:
        SnapshotLocationError: for ``location``, naming the link (the file or a
            directory above it), its target and the repository.
    """
    probe = str(Path(location).parent / "_") if directory else location
    resolved = outside_root(probe, root)
    if resolved is None or root is None:
        return
    path = Path(os.path.abspath(probe))
    link = next((p for p in [path, *path.parents] if p.is_symlink()), path)
    which = "it" if link == path else f"its directory {escape_controls(str(link))}"
    target = os.readlink(link) if link.is_symlink() else str(resolved)
    raise SnapshotLocationError(
        location,
        f"{which} is a symlink to {escape_controls(target)}, outside the repository "
        f"({escape_controls(str(root.resolve()))}); pytest-graphir does not follow it",
        "put the snapshot file itself in the repository (`pytest --graphir-update` "
        "replaces a linked file with a regular one)",
    )


# -- writing ---------------------------------------------------------------------------


def replaceable_mode(path: Path) -> int:
    """Check that ``path`` may be replaced by a snapshot file; return the permission
    bits the new file gets.

    A symlink is replaced by a regular file (its target is never written); a
    directory is never replaced or deleted.

    Returns:
        The mode of the regular file there, with read and write for its owner
        (a file of mode 000 becomes 600), else :data:`NEW_FILE_MODE`.

    Raises:
        SnapshotLocationError: a directory is there.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return NEW_FILE_MODE
    if stat.S_ISDIR(info.st_mode):
        raise directory_error(str(path))
    # keep the mode of the file we replace
    return info.st_mode & 0o777 | 0o600 if stat.S_ISREG(info.st_mode) else NEW_FILE_MODE


TEMP_NAME_CHARS = 48
"""Characters of the target's name in its temporary file's name (``.<name>.<random>.tmp``)."""
STALE_TEMP_SECONDS = 600
"""Age (modification time) after which a temporary file of :func:`write_atomic` counts as
left by a killed writer; a younger one may belong to an update running beside this one."""


def remove_stale_temporaries(path: Path) -> None:
    """Delete the temporary files :func:`write_atomic` left for ``path`` when it was
    killed between its write and its ``os.replace`` (SIGKILL, power loss), older than
    :data:`STALE_TEMP_SECONDS`. Only regular files of exactly that name pattern
    (``tempfile.mkstemp``'s 8 random characters between prefix and suffix) are
    touched; an ``OSError`` leaves a file where it is."""
    pattern = glob.escape(f".{path.name[:TEMP_NAME_CHARS]}.") + "[a-z0-9_]" * 8 + ".tmp"
    limit = time.time() - STALE_TEMP_SECONDS
    for candidate in path.parent.glob(pattern):  # none where the directory cannot be read
        with contextlib.suppress(OSError):
            info = os.lstat(candidate)
            if stat.S_ISREG(info.st_mode) and info.st_mtime < limit:
                candidate.unlink()


def missing_directories(directory: Path) -> list[Path]:
    """``directory`` and the directories above it that do not exist, deepest first:
    what ``mkdir -p`` of it makes, for :func:`write_atomic` to remove on failure."""
    return list(itertools.takewhile(lambda p: not p.is_dir(), [directory, *directory.parents]))


_UMASK = os.umask(0o077)  # set and restored: 0o077 in between keeps a file made meanwhile private
os.umask(_UMASK)
NEW_FILE_MODE = 0o666 & ~_UMASK
"""Permission bits of a file :func:`write_atomic` creates: what ``open()`` would
give (``0o666`` less the umask), the umask read once, when the plugin loads: read per
write, it raced with threads changing the umask (a file once got ``0o666``)."""


def write_atomic(path: Path, text: str, mode: int = NEW_FILE_MODE) -> None:
    """Write ``text`` (UTF-8, ``\\n`` line ends) to ``path`` through a temporary file in
    the same directory and ``os.replace``, so a failed or interrupted write leaves the
    old file whole; the new file gets permission bits ``mode``. The temporary name is
    bounded: ``path.name`` may already be near the file system's limit.

    Args:
        path: the file to write; missing directories above it are created.
        text: its content.
        mode: its permission bits.

    Raises:
        OSError: from creating, writing or renaming. The temporary file is removed,
            and so are the directories this call created, when they are empty
            (:func:`missing_directories`): a failed write leaves nothing behind.
    """
    prefix = f".{path.name[:TEMP_NAME_CHARS]}."
    made = missing_directories(path.parent)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
        except FileNotFoundError:
            # another writer (an xdist worker) made the directory, its write failed and
            # it removed the directory, empty, after this call found it: make it again
            made = missing_directories(path.parent)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        # the directories mkdir made, deepest first, as long as they are empty: a file
        # another writer put there since (an xdist worker writing its own report beside)
        # keeps its directory and those above (each holds the one below); an OSError
        # (not empty, not made because mkdir failed above it, read-only) leaves it alone
        for directory in made:
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        raise


NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG})
"""``OSError.errno`` values of a full disk or quota."""
NOT_WRITABLE_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
"""``OSError.errno`` values of a read-only file system or a directory without write
permission."""


def remedy(exc: OSError, directory: Path) -> str:
    """What to do about ``exc``, raised while writing into ``directory``.

    Args:
        exc: the error of a write, ``mkdir`` or ``os.replace``.
        directory: the directory (the message shows it as :func:`display` does,
            escaped).

    Returns:
        ``free space on the disk holding <directory>`` for a full disk or quota,
        ``make <directory> writable`` for a read-only file system or a missing
        permission, else ``remove the cause``.
    """
    shown = escape_controls(display(str(directory)))
    if exc.errno in NO_SPACE_ERRNOS:
        return f"free space on the disk holding {shown}"
    if exc.errno in NOT_WRITABLE_ERRNOS:
        return f"make {shown} writable"
    return "remove the cause"


def cause(exc: OSError) -> str:
    """Why ``exc`` happened, as a message says it: its ``strerror`` (never the file name,
    which may be a temporary file's), else its type's name."""
    return exc.strerror or type(exc).__name__


def not_written(path: Path, exc: OSError, directory: Path, elsewhere: str) -> tuple[str, str]:
    """What a message says about a file that could not be written (a received file,
    the HTML report): where, why and the fix, in the words of :func:`remedy`.

    Args:
        path: the file that was to be written.
        exc: the error :func:`write_atomic` raised.
        directory: the directory the fix names (the one the user chose, which
            ``path`` may be deep below).
        elsewhere: how to put the file somewhere else (``name another directory
            with --graphir-report=DIR``).

    Returns:
        ``(what, fix)``: ``could not be written to <path>: <strerror>; nothing was
        left there`` (or: the file there is from an earlier run), never the temporary
        file's name; and ``fix: <remedy>, or <elsewhere>``. Both escaped, unindented.
    """
    left = (
        "the file there is from an earlier run, not this one"
        if os.path.lexists(path)
        else "nothing was left there"
    )
    return (
        f"could not be written to {escape_controls(display(str(path)))}: {cause(exc)}; {left}",
        f"fix: {remedy(exc, directory)}, or {elsewhere}",
    )


def indented(lines: Sequence[str]) -> list[str]:
    """Lines about a failure artefact (:func:`not_written`'s what and fix), each one
    level deeper than the one before: ``  report: ...``, ``    fix: ...``."""
    return [f"{'  ' * (depth + 1)}{line}" for depth, line in enumerate(lines)]


def write_error(location: str, exc: OSError) -> SnapshotLocationError:
    """The error (verb ``write``) for an ``OSError`` raised while writing the snapshot
    at ``location``: the snapshot and the cause (``strerror``, never the temporary file's
    name), and the fix for a full disk, a read-only directory or anything else."""
    todo = remedy(exc, Path(location).parent)
    if exc.errno in NOT_WRITABLE_ERRNOS:
        todo += " (a read-only checkout is checked, never updated)"
    return SnapshotLocationError(
        location,
        f"{cause(exc)}; the snapshot there is unchanged",
        f"{todo}, then rerun `pytest --graphir-update`",
        verb="write",
    )


def oversize_error(location: str, size: int, limit: int) -> SnapshotLocationError:
    """This run's snapshot text is ``size`` bytes, over ``limit``: nothing is written,
    since the next run would refuse to read it."""
    return SnapshotLocationError(
        location,
        f"this run's snapshot is {size:,} bytes, over the {limit:,}-byte limit on "
        "snapshots (the ini option graphir_max_snapshot_bytes); it was not written",
        f"raise graphir_max_snapshot_bytes to at least {size} if the model really is "
        "that large, or trace a smaller model or input",
    )


def link_error(location: str, exc: OSError) -> SnapshotLocationError:
    """The snapshot at ``location`` is a symlink ``os.stat`` cannot follow (``exc``):
    a loop (named link by link) or a target that does not exist."""
    link = escape_controls(os.readlink(location))
    if exc.errno != errno.ELOOP:
        return SnapshotLocationError(
            location, f"is a symlink to {link}, which does not exist", f"remove the link, or {FIX}"
        )
    chain, seen, current = [display(location)], set[str](), location
    # the links as written, until one comes back (at most 8)
    while os.path.abspath(current) not in seen and os.path.islink(current) and len(seen) < 8:
        seen.add(os.path.abspath(current))
        chain.append(os.readlink(current))
        current = os.path.join(os.path.dirname(current), chain[-1])
    return SnapshotLocationError(
        location,
        f"it is a symlink loop ({escape_controls(' -> '.join(chain))})",
        f"remove the link, or {FIX} (it replaces the link with the file)",
    )


def read_error(location: str, exc: OSError, mode: int) -> SnapshotLocationError:
    """The regular file at ``location`` (permission bits in ``mode``) could not be
    opened for reading (``exc``): most often no read permission."""
    if exc.errno in (errno.EACCES, errno.EPERM):
        return SnapshotLocationError(
            location,
            f"the file cannot be read: {cause(exc)} (mode {mode & 0o777:03o})",
            f"make it readable (chmod u+r {escape_controls(display(location))}), or {FIX}",
        )
    return SnapshotLocationError(location, f"the file cannot be read: {cause(exc)}", FIX)


def directory_error(location: str) -> SnapshotLocationError:
    """A directory where the snapshot file should be."""
    return SnapshotLocationError(
        location,
        "a directory is there, not a snapshot file",
        "pytest-graphir never deletes a directory: move or remove it yourself, then run "
        "`pytest --graphir-update` to write the snapshot",
    )


def size_error(location: str, size: int, limit: int) -> SnapshotLocationError:
    """A snapshot file of ``size`` bytes, over ``limit``."""
    return SnapshotLocationError(
        location,
        f"the file is {size:,} bytes, over the {limit:,}-byte limit on "
        "snapshots (the ini option graphir_max_snapshot_bytes)",
        f"{FIX}, or raise graphir_max_snapshot_bytes if the model really is that large",
    )
