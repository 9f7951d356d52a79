"""Received files: what a failing graphir test produced, kept beside its snapshot or
in the report directory (``<snapshot>.graphir.received``).

CI can upload it, and a reviewer can accept it by copying it over the snapshot. The
options choosing where it goes (``--graphir-report``, ``--graphir-received``), the
places one can be, writing one (:func:`write_received`) and removing one are here;
the extension has it written after a failed comparison and removes it, with the HTML
report beside it, after one that passed or was written (``GraphIRExtension.settle``),
and its failure message says whether it was written.

A passing run on a read-only checkout writes and deletes nothing: a received file
is removed only where one exists. A received file that cannot be written (a
read-only checkout with ``--graphir-received=beside``, a full disk) never raises:
the failure message says where, why and what to do (:func:`write_received`), and
the test fails with its graph diff alone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from .files import display, indented, not_written, write_atomic

RECEIVED_SUFFIX = ".received"
"""Appended to a snapshot's file name for the snapshot a failing run produced."""
RECEIVED_MODES = ("report", "beside", "off")
"""Values of ``--graphir-received`` / ini ``graphir_received``."""

REPORT_ELSEWHERE = "name another directory with --graphir-report=DIR"
"""The other way out a fix names for a file in the report directory (a received file,
the HTML report)."""

ReceivedTarget = tuple[str, Path, "Path | None"]
"""``(mode, rootdir, report_dir)``: where received files go (see :func:`received_target`)."""


def add_received_options(parser: pytest.Parser, group: Any) -> None:
    """Add ``--graphir-report=DIR`` and ``--graphir-received=report|beside|off`` and
    their ini options ``graphir_report`` and ``graphir_received`` (pytest's
    ``Parser.addini`` and ``OptionGroup.addoption``)."""
    group.addoption(
        "--graphir-report",
        metavar="DIR",
        help="directory for graphir failure artefacts: the received snapshot of each "
        "failing test (<snapshot>.graphir.received, at the snapshot's path relative "
        "to rootdir) and the HTML report; ini: graphir_report",
    )
    parser.addini(
        "graphir_report",
        "directory for graphir failure artefacts (see --graphir-report); relative to rootdir",
    )
    group.addoption(
        "--graphir-received",
        choices=RECEIVED_MODES,
        help="where a failing graphir test writes what it received: 'report' (default: "
        "into --graphir-report DIR, nothing without it), 'beside' (next to the "
        "snapshot, <name>.graphir.received) or 'off'; ini: graphir_received",
    )
    parser.addini(
        "graphir_received", "report, beside or off (see --graphir-received)", default="report"
    )


def report_dir(config: pytest.Config) -> Path | None:
    """``--graphir-report`` (relative to the invocation directory) or the
    ``graphir_report`` ini option (relative to rootdir); None when neither is set."""
    if value := config.getoption("graphir_report"):
        return config.invocation_params.dir / str(value)
    ini = config.getini("graphir_report")
    return config.rootpath / str(ini) if ini else None


def received_target(config: pytest.Config) -> ReceivedTarget | None:
    """Where failing tests write their received snapshot: ``(mode, rootdir,
    report_dir)``, or None (``--graphir-received=off``, or ``report`` without a
    report directory).

    Raises:
        pytest.UsageError: the ini option ``graphir_received`` is not one of
            :data:`RECEIVED_MODES`.
    """
    mode = config.getoption("graphir_received") or config.getini("graphir_received") or "report"
    if mode not in RECEIVED_MODES:
        raise pytest.UsageError(
            f"graphir_received = {mode!r}: use one of {', '.join(RECEIVED_MODES)}"
        )
    report = report_dir(config)
    if mode == "beside" or (mode == "report" and report is not None):
        return (mode, config.rootpath, report)
    return None


def artefact_locations(
    snapshot_location: str, rootdir: Path, report_dir: Path | None
) -> dict[str, Path]:
    """Every place a failure artefact of ``snapshot_location`` can be: its received
    snapshot ``"beside"`` it and, when ``report_dir`` is given, in the ``"report"``
    directory, keyed by the mode of :func:`received_target` that puts it there; and
    there too its HTML report, ``"page"``. In ``report_dir`` an artefact is at the
    snapshot's path relative to ``rootdir`` (its path without the anchor when
    outside), ``.received`` or ``.html`` appended to the file name.

    A received file's name ends in ``.graphir.received``, which syrupy does not take
    for a snapshot (see the plugin's ``register_guards``), so it is never reported as
    unused.
    """
    snapshot = Path(snapshot_location)
    places = {"beside": snapshot.with_name(snapshot.name + RECEIVED_SUFFIX)}
    if report_dir is not None:
        resolved, root = snapshot.resolve(), rootdir.resolve()
        relative = resolved.relative_to(root if resolved.is_relative_to(root) else resolved.anchor)
        places["report"] = report_dir / relative.with_name(relative.name + RECEIVED_SUFFIX)
        places["page"] = report_dir / relative.with_name(relative.name + ".html")
    return places


def write_received(target: ReceivedTarget, snapshot_location: str, text: str) -> list[list[str]]:
    """Write ``text``, what a failing test received at ``snapshot_location``, where
    ``target`` says (:func:`received_target`; :func:`artefact_locations`), through
    :func:`.files.write_atomic` like a snapshot; never raises.

    Returns:
        Two lists of lines: the failure message's (indented), where the file is and
        how to accept it, or why it could not be written; and, only when it could
        not, the same unindented: ``received: could not be written to <path>:
        <cause>; ...`` (``strerror``, never the temporary file's name; whether an
        older file is still there) and ``fix: ...`` (the report directory's for
        mode ``report``, the snapshot's directory for ``beside``).
    """
    mode, _, report = target
    path = artefact_locations(snapshot_location, *target[1:])[mode]
    try:
        write_atomic(path, text)
    except OSError as exc:
        if mode == "report" and report is not None:
            what, fix = not_written(path, exc, report, REPORT_ELSEWHERE)
        else:
            elsewhere = "keep it elsewhere with --graphir-received=report --graphir-report=DIR"
            what, fix = not_written(path, exc, path.parent, elsewhere)
        unwritten = [f"received: {what}", f"{fix}, or write none with --graphir-received=off"]
        return [indented(unwritten), unwritten]
    accept = "to accept without rerunning, copy it over the snapshot"
    return [[f"  received: {display(str(path))} (this run's snapshot; {accept})"], []]


def remove_received(snapshot_location: str, rootdir: Path, report_dir: Path | None) -> None:
    """Delete the received snapshots of ``snapshot_location`` (it passed or was
    written), in every place one can be, and its HTML report in ``report_dir`` (a
    page of a failure that is gone); where none is, nothing is touched.

    Only an existing file is unlinked: on a read-only file system ``unlink`` of a
    missing name fails with ``EROFS``, not ``ENOENT``.
    """
    for path in artefact_locations(snapshot_location, rootdir, report_dir).values():
        if os.path.lexists(path):
            path.unlink(missing_ok=True)
