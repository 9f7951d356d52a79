"""``--graphir-update`` deletes the ``.graphir`` snapshots whose test no longer exists."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ..extension.files import SNAPSHOT_SUFFIX, outside_root, shortened_of, snapshot_file_stem
from .guards import syrupy_session


class ObsoleteSnapshotCleanup:
    """Under ``--graphir-update``, delete the ``.graphir`` snapshots whose test no longer
    exists (renamed or removed); syrupy's ``--snapshot-update`` would delete every
    extension's unused snapshots, this deletes graphir ones only.

    A snapshot is deleted only when all of these hold:

    * syrupy's own report (``config._syrupy.report.unused``, private syrupy 7 API)
      lists it as unused: its module was collected, its test did not run, was not
      skipped, and unused detection is on (it is off for ``--collect-only`` and for
      runs with a collection error, see :class:`.guards.SyrupyGuards`);
    * no symlink leads it outside the repository (rootdir);
    * this is not an xdist worker (a worker sees only its share of the tests);
    * no test was deselected (``-k``, ``-m``, ``--deselect``, ``--lf``, ``--sw``; on
      xdist the controller sees the options, the workers the deselection) and the run was not
      stopped early (``-x``, ``--maxfail``);
    * no test reported in this run, whatever its outcome, has that snapshot's name
      (a test that errored before its ``assert`` still exists).
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.tests: set[tuple[str, str]] = set()
        self.deselected = 0
        self.deleted: list[str] = []

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_deselected"""
        self.deselected += len(items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Remember every test that exists (on xdist, the controller sees all reports).

        Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_runtest_logreport
        """
        path, _, rest = report.nodeid.partition("::")  # tests/test_m.py::TestC::test_a[1]
        self.tests.add((path, rest.replace("::", ".")))  # (tests/test_m.py, TestC.test_a[1])

    def _exists(self, location: Path, rootdir: Path) -> bool:
        """True when a test reported in this run owns the snapshot at ``location``.

        ``test_a.graphir``, ``test_a.1.graphir`` and ``test_a[rank0].graphir`` (a
        custom name: ``graphir_snapshot.rank(0)``) are ``test_a``'s; a shortened name
        (``<head>~<hash>``) is the test's by :func:`~..extension.files.shortened_of`.
        """
        stem = location.stem + "."
        tests_dir = location.parent.parent.parent.resolve()  # <tests_dir>/__snapshots__/<module>/
        return any(
            Path(path).stem == location.parent.name
            and (rootdir / path).parent.resolve() == tests_dir
            and (
                stem.startswith((snapshot_file_stem(name) + ".", snapshot_file_stem(name) + "["))
                or shortened_of(location.stem, name)
            )
            for path, name in self.tests
        )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """After syrupy's ``pytest_sessionfinish`` (``tryfirst``) built its report.

        Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_sessionfinish
        """
        report: Any = getattr(syrupy_session(self.config), "report", None)
        # nothing is deleted on an xdist worker, when tests were deselected
        # (-k/-m/--deselect/--lf/--sw), when the run stopped early, or under
        # --snapshot-update, which deletes unused snapshots itself (--collect-only
        # switches syrupy's unused detection off, SyrupyGuards.keep_unused_snapshots)
        selection = ("keyword", "markexpr", "deselect", "lf", "stepwise", "update_snapshots")
        if (
            # the config tells a worker apart; PYTEST_XDIST_WORKER is inherited by any
            # pytest run from within one (pytester), so it is not a sign
            hasattr(self.config, "workerinput")
            or self.deselected
            or any(getattr(self.config.option, name, None) for name in selection)
            or session.shouldstop
            or session.shouldfail
            or getattr(report, "disable_unused_snapshots", True)
        ):
            return
        others = 0
        for collection in report.unused:
            location = Path(collection.location)
            if (
                location.suffix != SNAPSHOT_SUFFIX
                or outside_root(str(location), self.config.rootpath) is not None
                or self._exists(location, self.config.rootpath)
            ):
                others += len(collection)
                continue
            location.unlink(missing_ok=True)
            self.deleted.append(str(location))
        if self.deleted and not others and session.testsfailed == 0 and session.exitstatus == 1:
            session.exitstatus = 0  # syrupy OR-ed in its "unused snapshots" status (1)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Name each deleted snapshot in the terminal summary, after graphir's failures.

        Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_terminal_summary
        """
        for location in self.deleted:
            shown = os.path.relpath(location, self.config.invocation_params.dir)
            terminalreporter.write_line(f"graphir: deleted obsolete snapshot {shown}")
