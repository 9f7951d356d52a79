"""Snapshot storage end to end, under conditions a checkout meets: read-only file
systems, full disks, a kill between the write and the rename, ``__snapshots__``
linked out of the repository, snapshots over the size limit; and syrupy's plain
``snapshot`` fixture handed a graph."""

from __future__ import annotations

import errno
import os
import tempfile
import time
from pathlib import Path

import pytest
from workflow import run

TEST_MLP = """
import os
import models
from pytest_graphir import trace

def test_mlp(graphir_snapshot):
    model, inputs = models.mlp(act=os.environ.get("ACT", "relu"))
    assert trace(model, *inputs) == graphir_snapshot
"""

SNAP = "__snapshots__/test_mlp/test_mlp.graphir"

FAULTS = '''
"""Faults injected into the file system below __snapshots__, by environment variable:
READ_ONLY=1: every write or delete there fails with EROFS, as on a read-only mount,
and is logged to $ATTEMPTS; FULL=1: snapshot writes fail with ENOSPC (the
temporary file is /dev/full); KILL=1: SIGKILL just before a snapshot's os.replace;
UNREADABLE=1: reading a snapshot of mode 000 fails with EACCES, as for anyone but root."""
import builtins, errno, os, signal, tempfile

ROOT = os.path.realpath("__snapshots__")


def _inside(path):
    try:
        real = os.path.realpath(os.fsdecode(path))
    except TypeError:
        return False
    return real == ROOT or real.startswith(ROOT + os.sep)


_open, _os_open = builtins.open, os.open


def _refuse(name, path):
    with _open(os.environ["ATTEMPTS"], "a") as log:
        log.write(f"{name} {path}\\n")
    raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))


def _wrap(name, original, writes=lambda *a, **k: True):
    def wrapper(path, *args, **kwargs):
        if _inside(path) and writes(*args, **kwargs):
            _refuse(name, path)
        return original(path, *args, **kwargs)
    return wrapper


_os_mkdir = os.mkdir


def _mkdir(path, *args, **kwargs):
    if _inside(path):
        if os.path.lexists(path):  # the kernel says EEXIST before EROFS
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fsdecode(path))
        _refuse("mkdir", path)
    return _os_mkdir(path, *args, **kwargs)


if os.environ.get("READ_ONLY"):
    for name in ("unlink", "remove", "rmdir", "chmod", "replace", "rename"):
        setattr(os, name, _wrap(name, getattr(os, name)))
    os.mkdir = _mkdir
    os.open = _wrap(
        "open", _os_open,
        lambda flags, *a, **k: flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC),
    )
    builtins.open = _wrap(
        "open", _open, lambda mode="r", *a, **k: any(c in mode for c in "wax+")
    )

if os.environ.get("FULL"):
    _mkstemp = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and _inside(dir):
            fd, path = _mkstemp(*args, dir=dir, **kwargs)
            os.close(fd)
            os.unlink(path)
            return _os_open("/dev/full", os.O_WRONLY), path
        return _mkstemp(*args, dir=dir, **kwargs)

    tempfile.mkstemp = mkstemp

if os.environ.get("UNREADABLE"):  # as mode 000 is for anyone but root
    def _unreadable_open(path, flags, *args, **kwargs):
        if os.fsdecode(path).endswith(".graphir") and not flags & (os.O_WRONLY | os.O_RDWR):
            if not os.stat(path).st_mode & 0o444:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
        return _os_open(path, flags, *args, **kwargs)

    os.open = _unreadable_open

if os.environ.get("KILL"):
    _replace = os.replace

    def replace(src, dst, *args, **kwargs):
        if os.fsdecode(dst).endswith(".graphir"):
            os.kill(os.getpid(), signal.SIGKILL)
        return _replace(src, dst, *args, **kwargs)

    os.replace = replace
'''


@pytest.fixture
def project(graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """The MLP test with its snapshot written, and the fault injector as conftest."""
    p = graphir_project
    p.makepyfile(test_mlp=TEST_MLP)
    p.makeconftest(FAULTS)
    monkeypatch.setenv("ATTEMPTS", str(p.path / "attempts.log"))
    run(p, "--graphir-update").assert_outcomes(passed=1)
    assert (p.path / SNAP).is_file()
    return p


def _files(directory: Path) -> dict[str, bytes]:
    return {
        str(f.relative_to(directory)): f.read_bytes() for f in directory.rglob("*") if f.is_file()
    }


def test_passing_run_on_a_read_only_checkout_writes_and_deletes_nothing(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = project
    before = _files(p.path / "__snapshots__")
    monkeypatch.setenv("READ_ONLY", "1")
    result = run(p)
    result.assert_outcomes(passed=1)
    assert "Read-only file system" not in result.stdout.str()
    log = p.path / "attempts.log"
    assert not log.exists(), log.read_text()
    assert _files(p.path / "__snapshots__") == before


RECEIVED = SNAP + ".received"


def test_failing_run_on_a_read_only_checkout_fails_with_the_diff_and_says_received_unwritten(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--graphir-received=beside`` on a read-only mount (EROFS, as root sees it too):
    the test fails with its graph diff, not with an OSError in teardown; the message
    says once where the received file could not be written, why, and the fix; the
    terminal summary repeats it whole; nothing is left beside the snapshot. Without
    the assertion message (``--assert=plain``) the terminal summary says it;
    ``--graphir-received=off`` does not try; a passing run that cannot remove
    a stale received file still passes, with a warning."""
    p = project
    before = _files(p.path / "__snapshots__")
    log = p.path / "attempts.log"
    monkeypatch.setenv("ACT", "gelu")
    monkeypatch.setenv("READ_ONLY", "1")
    result = run(p, "--graphir-received=beside", "-vv")
    result.assert_outcomes(failed=1)  # errors=0: no teardown error beside the failure
    out = result.stdout.str()
    said = (
        f"received: could not be written to {RECEIVED}: Read-only file system; "
        "nothing was left there"
    )
    fix = (
        "fix: make __snapshots__/test_mlp writable, or keep it elsewhere "
        "with --graphir-received=report --graphir-report=DIR, or write none with "
        "--graphir-received=off"
    )
    result.stdout.fnmatch_lines(
        [
            "E * graphir: 1 added, 1 removed, 1 changed, 4 drift *",
            f"E * snapshot: {SNAP} *",
            f"E * {said}",
            f"E * {fix}",
            "*graphir snapshot failures*",
            f"  {said}",
            f"    {fix}",
        ]
    )
    message = [line for line in out.splitlines() if line.startswith("E ")]
    assert sum(said in line for line in message) == 1, out
    assert "copy it over the snapshot" not in out  # no promise of a file that is not there
    assert "Traceback" not in out and "OSError" not in out and ".tmp" not in out, out
    assert f"open {p.path / '__snapshots__/test_mlp/.test_mlp.graphir.received.'}" in (
        log.read_text()
    ), "the write was tried, into the read-only directory"
    assert _files(p.path / "__snapshots__") == before

    plain = run(p, "--graphir-received=beside", "--assert=plain")
    plain.assert_outcomes(failed=1)
    plain.stdout.fnmatch_lines(["*graphir snapshot failures*", f"  {said}", f"    {fix}"])

    log.unlink()
    off = run(p, "--graphir-received=off", "-vv")
    off.assert_outcomes(failed=1)
    assert "received:" not in off.stdout.str() and not log.exists()
    assert _files(p.path / "__snapshots__") == before

    stale = p.path / RECEIVED  # left by an earlier run, on a checkout now read-only
    stale.write_text("old")
    monkeypatch.delenv("ACT")
    passing = run(p)
    passing.assert_outcomes(passed=1, warnings=1)
    passing.stdout.fnmatch_lines(
        [
            f"*PytestWarning: graphir: could not remove the stale received file {RECEIVED}: "
            "Read-only file system*"
        ]
    )
    assert stale.read_text() == "old"


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0,
    reason="root writes into a directory without write permission",
)
def test_received_file_in_a_directory_without_write_permission(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with the snapshot directory made read-only by ``chmod``: EACCES."""
    p = project
    directory = (p.path / SNAP).parent
    before = _files(p.path / "__snapshots__")
    monkeypatch.setenv("ACT", "gelu")
    directory.chmod(0o555)
    try:
        result = run(p, "--graphir-received=beside", "-vv")
    finally:
        directory.chmod(0o755)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E * graphir: 1 added, 1 removed, 1 changed, 4 drift *",
            f"E * received: could not be written to {RECEIVED}: Permission denied; "
            "nothing was left there",
            "E * fix: make __snapshots__/test_mlp writable, or keep it *",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert _files(p.path / "__snapshots__") == before


def test_update_over_the_size_limit_fails_naming_option_size_and_limit(
    project: pytest.Pytester,
) -> None:
    p = project
    snap = p.path / SNAP
    text = snap.read_text()
    size = len(text.encode())
    p.makeini(f"[pytest]\ngraphir_max_snapshot_bytes = {size - 1}\n")
    snap.unlink()
    result = run(p, "--graphir-update")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"*graphir: cannot use snapshot {SNAP}: this run's snapshot is {size:,} bytes, "
            f"over the {size - 1:,}-byte limit on snapshots (the ini option "
            "graphir_max_snapshot_bytes)*",
            f"*fix: raise graphir_max_snapshot_bytes to at least {size}*",
        ]
    )
    assert not snap.exists()  # nothing the next run would refuse
    p.makeini(f"[pytest]\ngraphir_max_snapshot_bytes = {size}\n")
    run(p, "--graphir-update").assert_outcomes(passed=1)
    assert snap.read_text() == text
    run(p).assert_outcomes(passed=1)


def test_full_disk_during_update_keeps_the_snapshot_and_says_what_to_do(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = project
    snap = p.path / SNAP
    before = _files(p.path / "__snapshots__")
    monkeypatch.setenv("ACT", "tanh")
    for fault, cause in (("FULL", "No space left on device"), ("READ_ONLY", "Read-only")):
        monkeypatch.setenv(fault, "1")
        result = run(p, "--graphir-update")
        monkeypatch.delenv(fault)
        result.assert_outcomes(failed=1)
        out = result.stdout.str()
        result.stdout.fnmatch_lines(
            [
                f"*graphir: cannot write snapshot {SNAP}: {cause}*",
                "*fix: *then rerun `pytest --graphir-update`*",
            ]
        )
        assert ".tmp" not in out and "Traceback" not in out and "syrupy/" not in out
        assert "unused" not in out, out
        assert _files(p.path / "__snapshots__") == before
    assert snap.read_text() == before[SNAP.split("/", 1)[1]].decode()


REPORT_FAULTS = '''
"""REPORT_FAULT=<errno>: every os.replace into reports/ fails with that errno (a
read-only mount, a full disk): the temporary file is written, the rename is not."""
import os

_replace = os.replace
ROOT = os.path.realpath("reports")


def replace(src, dst, *args, **kwargs):
    code = int(os.environ.get("REPORT_FAULT") or 0)
    if code and os.path.realpath(os.fsdecode(dst)).startswith(ROOT + os.sep):
        raise OSError(code, os.strerror(code), os.fsdecode(src))
    return _replace(src, dst, *args, **kwargs)


os.replace = replace
'''

REPORT = "reports/" + SNAP + ".html"


@pytest.mark.parametrize(
    ("code", "cause", "fix"),
    [
        (errno.EROFS, "Read-only file system", "make reports writable"),
        (errno.ENOSPC, "No space left on device", "free space on the disk holding reports"),
    ],
    ids=["read-only", "full-disk"],
)
def test_html_report_that_cannot_be_written_says_which_why_and_the_fix(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, code: int, cause: str, fix: str
) -> None:
    """``--graphir-report=reports`` where nothing can be written (fault injection: the
    tests run as root, where ``chmod`` blocks nothing): the test fails with its graph
    diff and no teardown error; the message and the terminal summary name the report
    file (never the temporary file's absolute path), the cause, and the fix in the
    received file's words (the permission or space, or another --graphir-report);
    the directories the write made are removed again, one that was there is kept."""
    p = project
    p.makeconftest(REPORT_FAULTS)
    monkeypatch.setenv("ACT", "gelu")
    monkeypatch.setenv("REPORT_FAULT", str(code))
    said = f"report: could not be written to {REPORT}: {cause}; nothing was left there"
    todo = f"fix: {fix}, or name another directory with --graphir-report=DIR"
    for there in (False, True):
        if there:  # a report directory the user made, with something in it
            (p.path / "reports").mkdir()
            (p.path / "reports" / "README").write_text("mine")
        result = run(p, "--graphir-report=reports")
        result.assert_outcomes(failed=1)  # errors=0: no teardown error
        out = result.stdout.str()
        result.stdout.fnmatch_lines(
            [
                "E * graphir: 1 added, 1 removed, 1 changed, 4 drift *",
                f"E * {said}",
                f"E * {todo}",
                "*graphir snapshot failures*",
                f"  {said}",
                f"    {todo}",
            ]
        )
        assert ".tmp" not in out and "Errno" not in out and "Traceback" not in out, out
        assert str(p.path) not in out.split("= FAILURES =", 1)[1], out  # no absolute path
        if there:
            assert _files(p.path / "reports") == {"README": b"mine"}
            assert [d.name for d in (p.path / "reports").iterdir()] == ["README"]
        else:
            assert not (p.path / "reports").exists(), _files(p.path / "reports")


def test_write_atomic_removes_only_the_empty_directories_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed ``write_atomic`` (rename or create) removes the directories it made,
    deepest first, while they are empty; a directory that was there, or that holds
    another file, stays."""
    from pytest_graphir.extension import files

    def refuse(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fsdecode(str(src)))

    monkeypatch.setattr(os, "replace", refuse)
    (tmp_path / "kept").mkdir()
    target = tmp_path / "kept" / "a" / "b" / "report.html"
    with pytest.raises(OSError) as caught:
        files.write_atomic(target, "x")
    assert caught.value.errno == errno.ENOSPC
    assert [d.name for d in tmp_path.iterdir()] == ["kept"]
    assert list((tmp_path / "kept").iterdir()) == []

    (tmp_path / "kept" / "a").mkdir()
    (tmp_path / "kept" / "a" / "other").write_text("someone else's")
    with pytest.raises(OSError):
        files.write_atomic(target, "x")
    assert sorted(p.name for p in (tmp_path / "kept" / "a").iterdir()) == ["other"]

    monkeypatch.undo()

    def no_temporary(*args: object, **kwargs: object) -> tuple[int, str]:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkstemp", no_temporary)
    with pytest.raises(OSError):
        files.write_atomic(tmp_path / "new" / "deep" / "x.html", "x")
    assert not (tmp_path / "new").exists()


def test_write_atomic_makes_again_a_directory_another_writer_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers into one new directory: the first makes it, the second finds it, the
    first's write fails and removes it (empty) before the second creates its temporary
    file. The second makes it again and writes its file."""
    from pytest_graphir.extension import files

    target = tmp_path / "reports" / "b.html"
    target.parent.mkdir()
    real = tempfile.mkstemp
    calls = []

    def removed_first(*args: object, **kwargs: object) -> tuple[int, str]:
        calls.append(1)
        if len(calls) == 1:
            target.parent.rmdir()  # the other writer's clean-up, between the two steps
        return real(*args, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(tempfile, "mkstemp", removed_first)
    files.write_atomic(target, "mine")
    assert target.read_text() == "mine" and len(calls) == 2


def test_integer_beyond_pythons_limit_names_file_and_line_and_update_repairs(
    project: pytest.Pytester,
) -> None:
    p = project
    snap = p.path / SNAP
    lines = snap.read_text().splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines, 1) if line.startswith("  fc1/linear#0: "))
    lines[number - 1] = lines[number - 1].replace('"op"', f'"n": {"7" * 5000}, "op"', 1)
    snap.write_text("".join(lines))
    result = run(p)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"*graphir: invalid snapshot {SNAP}:{number}: an integer of more than 308 digits*"]
    )
    assert "Exceeds the limit" not in result.stdout.str()
    run(p, "--graphir-update").assert_outcomes(passed=1)
    run(p).assert_outcomes(passed=1)


def test_update_removes_temporary_files_a_killed_update_left(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = project
    snap = p.path / SNAP
    before = snap.read_text()
    monkeypatch.setenv("ACT", "tanh")
    monkeypatch.setenv("KILL", "1")
    killed = run(p, "--graphir-update")
    assert killed.ret != 0
    monkeypatch.delenv("KILL")
    monkeypatch.delenv("ACT")  # the model is back: the update has nothing to write
    assert snap.read_text() == before
    left = [f for f in snap.parent.iterdir() if f.name.endswith(".tmp")]
    assert [f.name.startswith(".test_mlp.graphir.") for f in left] == [True]
    hour_ago = time.time() - 3600
    os.utime(left[0], (hour_ago, hour_ago))
    fresh = snap.parent / ".test_mlp.graphir.abcd1234.tmp"  # another update's, now
    fresh.write_text("partial")
    other = snap.parent / ".notes.txt.abcd1234.tmp"  # not ours
    other.write_text("x")
    os.utime(other, (hour_ago, hour_ago))
    run(p).assert_outcomes(passed=1)
    assert left[0].exists()  # a plain run deletes nothing
    run(p, "--graphir-update").assert_outcomes(passed=1)
    assert not left[0].exists()
    assert fresh.exists() and other.exists()
    assert snap.read_text() == before


def test_snapshot_update_deletes_nothing_through_a_link_out_of_the_repository(
    project: pytest.Pytester,
) -> None:
    p = project
    outside = p.path.parent / f"{p.path.name}-elsewhere"
    (p.path / "__snapshots__").rename(outside)
    (p.path / "__snapshots__").symlink_to(outside, target_is_directory=True)
    text = (outside / "test_mlp" / "test_mlp.graphir").read_text()
    (outside / "test_mlp" / "test_gone.graphir").write_text(text)
    (outside / "test_mlp" / "notes.txt").write_text("not a snapshot\n")
    (outside / "notes.txt").write_text("not a snapshot\n")
    before = _files(outside)
    for flag in ("--snapshot-update", "--graphir-update"):
        result = run(p, flag)
        result.stdout.fnmatch_lines(["*is a symlink to *outside the repository*"])
        assert "Deleted" not in result.stdout.str()
        assert _files(outside) == before
    # the same run without the link deletes the stale snapshot, as syrupy does
    (p.path / "__snapshots__").unlink()
    outside.rename(p.path / "__snapshots__")
    run(p, "--snapshot-update").assert_outcomes(passed=1)
    assert not (p.path / "__snapshots__" / "test_mlp" / "test_gone.graphir").exists()


def test_snapshot_that_is_a_symlink_loop_names_the_loop_and_update_repairs_it(
    project: pytest.Pytester,
) -> None:
    """A snapshot path that is a symlink loop: the failure names the file, the loop and
    the fix (no ``RuntimeError: Symlink loop``), and ``--graphir-update`` replaces the
    link with the snapshot file."""
    p = project
    snap = p.path / SNAP
    text = snap.read_text()
    snap.unlink()
    other = snap.with_name("other.graphir")
    snap.symlink_to(other.name)
    other.symlink_to(snap.name)
    result = run(p)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "RuntimeError" not in out and "Traceback" not in out, out
    result.stdout.fnmatch_lines(
        [
            f"E * graphir: cannot use snapshot {SNAP}: it is a symlink loop "
            f"({SNAP} -> other.graphir -> test_mlp.graphir)",
            "E * fix: remove the link, or run `pytest --graphir-update` *",
        ]
    )
    run(p, "--graphir-update").assert_outcomes(passed=1)
    assert not snap.is_symlink() and snap.read_text() == text
    run(p).assert_outcomes(passed=1)


def test_unreadable_snapshot_says_it_cannot_be_read_not_written(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot of mode 000: the failure says the file cannot be read and how to make
    it readable (not ``cannot write ... make writable``); ``--graphir-update`` rewrites
    it readable."""
    p = project
    snap = p.path / SNAP
    text = snap.read_text()
    snap.chmod(0o000)
    monkeypatch.setenv("UNREADABLE", "1")
    result = run(p)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "cannot write" not in out and "writable" not in out, out
    result.stdout.fnmatch_lines(
        [
            f"E * graphir: cannot use snapshot {SNAP}: the file cannot be read: "
            "Permission denied (mode 000)",
            f"E * fix: make it readable (chmod u+r {SNAP}), or run `pytest --graphir-update` *",
        ]
    )
    run(p, "--graphir-update").assert_outcomes(passed=1)
    assert snap.stat().st_mode & 0o600 == 0o600 and snap.read_text() == text
    run(p).assert_outcomes(passed=1)


def test_new_file_mode_is_not_taken_from_a_umask_another_thread_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new snapshot's mode is 0o666 less the process umask read once, not a umask
    another thread set for a moment (today's read-and-restore saw 0: mode 0o666)."""
    from pytest_graphir.extension import files

    real = os.umask(0o022)
    os.umask(real)
    monkeypatch.setattr(os, "umask", lambda mask: 0)  # another thread's, just now
    target = tmp_path / "new.graphir"
    files.write_atomic(target, "x", files.replaceable_mode(target))
    assert target.stat().st_mode & 0o777 == 0o666 & ~real
    files.write_atomic(tmp_path / "report.html", "x")
    assert (tmp_path / "report.html").stat().st_mode & 0o777 == 0o666 & ~real
