"""Guards around syrupy's life cycle: each keeps a syrupy behaviour from deleting or
misreporting graphir snapshots, and names the behaviour it works around.

syrupy 7 decides at the end of a run which snapshot files no test used, reports them
and, under ``--snapshot-update``, deletes them. Several of its inputs are wrong for
runs it does not expect (a collection error, a module skipped at import, a test that
failed before its ``assert``, a received file beside a snapshot); each guard below
corrects one, through syrupy's session object (``config._syrupy``, private API) or
its options.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from ..extension.files import SNAPSHOT_SUFFIX, outside_root
from ..ir import GraphIR


def register_guards(config: pytest.Config) -> None:
    """Register every guard on ``config`` (from ``pytest_configure``, on xdist workers
    and the controller alike), and switch unused detection off for
    ``--collect-only`` (no assertion runs, so syrupy would report, and under
    ``--snapshot-update`` delete, every snapshot)."""
    if config.option.collectonly:
        keep_unused_snapshots(config)
    config.pluginmanager.register(CollectionErrorGuard(config), "graphir-collection-guard")
    config.pluginmanager.register(UnfinishedTestGuard(config), "graphir-unfinished-guard")
    config.pluginmanager.register(SkippedModuleGuard(), "graphir-skipped-module-guard")
    config.pluginmanager.register(OutsideRootGuard(config), "graphir-outside-root-guard")
    config.pluginmanager.register(PlainSnapshotGuard(), "graphir-plain-snapshot-guard")
    ignore_received_files(config)


def ignore_received_files(config: pytest.Config) -> None:
    """Keep syrupy from taking ``*.graphir.received`` files for snapshots.

    syrupy's default (Amber) extension, which the ``snapshot`` fixture behind
    ``graphir_snapshot`` registers, claims every file under ``__snapshots__/`` it does
    not recognise as an unknown, unused snapshot, so a received file written beside its
    snapshot would fail the run and be deleted by ``--snapshot-update``. Adding
    ``received`` to ``--snapshot-ignore-file-extensions`` (syrupy's
    ``walk_snapshot_dir`` skips such files) prevents that. Runs on xdist workers too.
    """
    if not hasattr(config.option, "ignore_file_extensions"):
        return
    ignored = list(config.option.ignore_file_extensions or [])
    if "received" not in ignored:
        config.option.ignore_file_extensions = [*ignored, "received"]


def keep_unused_snapshots(config: pytest.Config) -> None:
    """Switch off syrupy's unused-snapshot detection (and so its deletion) for this run."""
    if hasattr(config.option, "disable_unused_snapshots"):
        config.option.disable_unused_snapshots = True


class CollectionErrorGuard:
    """Keeps every snapshot when a test module fails to import.

    syrupy treats the snapshots of a module that errors at collection as unused, and
    ``--snapshot-update`` then deletes them, and (when pytest stops on the
    collection error) every other module's snapshots too. A run with a collection
    error cannot tell what is unused, so unused detection is switched off for it.
    On xdist the controller sees the workers' collection reports as well.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_collectreport"""
        if report.failed:
            keep_unused_snapshots(self.config)


class UnfinishedTestGuard:
    """Keeps the snapshots of graphir tests that did not pass (error, failure, not run).

    syrupy counts a snapshot as used when its test asserts against it; a test that
    raises before its ``assert`` (or errors in setup, or is never reached after
    ``-x``) asserts nothing, so ``--snapshot-update`` would delete the snapshot of a
    test that still exists. syrupy already keeps the snapshots of *skipped* tests
    (``SnapshotReport._skipped_items_match_name``), so this guard reports every
    collected test that uses ``graphir_snapshot`` and did not pass to syrupy as
    skipped (``SnapshotSession.ran_item(nodeid, "skipped")``) just before syrupy
    builds its report. That status only feeds syrupy's unused-snapshot decision; the
    test's own outcome is untouched, and snapshots of tests that no longer exist are
    still reported and deleted.

    On xdist everything here runs on the workers, which collect and run the tests and
    send these statuses to the controller with their syrupy report.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.pending: set[str] = set()

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Remember the graphir tests.

        Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_collection_modifyitems
        """
        self.pending = {
            item.nodeid for item in items if "graphir_snapshot" in getattr(item, "fixturenames", ())
        }

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A test whose call phase passed reached its asserts: syrupy decides for it.

        Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_runtest_logreport
        """
        if report.when == "call" and report.passed:
            self.pending.discard(report.nodeid)

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Any:
        """Runs before syrupy's ``pytest_sessionfinish`` (which builds the report).

        Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_sessionfinish
        """
        syrupy = getattr(self.config, "_syrupy", None)
        ran_item = getattr(syrupy, "ran_item", None)
        if ran_item is not None:
            for nodeid in sorted(self.pending):
                ran_item(nodeid, "skipped")  # ignored for items syrupy did not select
        return (yield)


class SkippedModuleGuard:
    r"""Keeps the snapshots of a module skipped at import (``pytest.importorskip``,
    ``pytest.skip(allow_module_level=True)``).

    syrupy records a module as collected when its collection starts
    (``pytest_collectstart``); a module that then skips yields no test, so its
    ``.graphir`` files would count as unused and be deleted by ``--snapshot-update``.
    Taking the module back out of syrupy's collected set makes syrupy keep them, as it
    does for ``--ignore``\d modules. On xdist this runs on the workers, before they
    send their collected modules to the controller.
    """

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        """Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_make_collect_report"""
        report = yield
        if report.skipped and isinstance(collector, pytest.Module):
            session = getattr(collector.config, "_syrupy", None)
            modules = getattr(session, "_collected_modules", None)
            if isinstance(modules, set):
                from syrupy.location import PyTestLocation

                modules.discard(PyTestLocation.module_path_key(collector.path))
        return report


class OutsideRootGuard:
    """Keeps ``--snapshot-update`` from deleting files that symlinks lead outside the
    repository.

    syrupy lists every file in a test module's snapshot directory and, under
    ``--snapshot-update``, deletes those no test used (``SnapshotSession.
    remove_unused_snapshots``) wherever the directory leads: with ``__snapshots__``
    linked out of the repository it deleted stale snapshots and unrelated files
    there, although graphir refuses to read or write through such a link. This guard
    wraps that method on syrupy's session (at ``pytest_sessionfinish``, before
    syrupy's) so that it first drops the discovered files that resolve outside
    rootdir from syrupy's report and recomputes the unused ones
    (``SnapshotReport.discovered``; its cached ``unused`` and ``num_unused``). The
    files kept are named in the terminal summary.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.kept: list[str] = []

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Any:
        """Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_sessionfinish"""
        syrupy = getattr(self.config, "_syrupy", None)
        remove = getattr(syrupy, "remove_unused_snapshots", None)
        if syrupy is not None and remove is not None:
            syrupy.remove_unused_snapshots = self._guarded(syrupy, remove)
        return (yield)

    def _guarded(self, syrupy: Any, remove: Any) -> Any:
        root = str(self.config.rootpath)

        def remove_unused_snapshots(
            unused_snapshot_collections: Any, used_snapshot_collections: Any
        ) -> None:
            report = syrupy.report
            discovered = getattr(report, "discovered", None)
            outside = [
                c.location
                for c in unused_snapshot_collections
                if outside_root(c.location, root) is not None
            ]
            if outside and discovered is not None:
                inside = type(discovered)()
                for collection in discovered:
                    if outside_root(collection.location, root) is None:
                        inside.update(collection)
                report.discovered = inside
                for name in ("unused", "num_unused"):  # syrupy's cached properties
                    report.__dict__.pop(name, None)
                unused_snapshot_collections = report.unused
                self.kept.extend(outside)
            remove(
                unused_snapshot_collections=unused_snapshot_collections,
                used_snapshot_collections=used_snapshot_collections,
            )

        return remove_unused_snapshots

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Name the files kept.

        Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_terminal_summary
        """
        for location in self.kept:
            shown = os.path.relpath(location, self.config.invocation_params.dir)
            terminalreporter.write_line(
                f"graphir: kept {shown}: a symlink leads it outside the repository, so "
                "--snapshot-update does not delete it (remove it yourself if it is stale)"
            )


class GraphOnPlainSnapshotError(TypeError):
    """A :class:`~pytest_graphir.ir.GraphIR` compared with syrupy's plain ``snapshot``."""

    def lines(self) -> list[str]:
        """The failure message and the fix."""
        return [
            "graphir: syrupy's `snapshot` fixture was given a GraphIR; it would store the "
            "graph's repr (a .ambr entry that compares nothing), so nothing was written",
            "  fix: use the `graphir_snapshot` fixture: "
            "`assert trace(model, *inputs) == graphir_snapshot`",
        ]


class PlainSnapshotGuard:
    """Keeps syrupy's plain ``snapshot`` fixture from storing a graph.

    syrupy's default extension (Amber) serializes any object, a ``GraphIR`` as its
    ``repr``: ``assert trace(...) == snapshot`` fails with a long repr diff, and
    ``--snapshot-update`` writes that repr into a ``.ambr`` file, which then passes
    whatever the graph's statistics do. This guard wraps the ``_serialize`` and
    ``get_assert_diff`` methods of each ``snapshot`` fixture value
    (``SnapshotAssertion``) when it is set up: a ``GraphIR`` given to an assertion
    whose extension is not graphir's fails with :class:`GraphOnPlainSnapshotError`,
    raised before syrupy queues any write, and its message names
    ``graphir_snapshot``. Other data goes to syrupy unchanged.
    """

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: pytest.FixtureRequest) -> Any:
        """Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_fixture_setup"""
        value = yield
        if fixturedef.argname == "snapshot" and hasattr(value, "_serialize"):
            self._guard(value)
        return value

    @staticmethod
    def _guard(assertion: Any) -> None:
        serialize = assertion._serialize
        assert_diff = assertion.get_assert_diff

        def _serialize(data: Any) -> Any:
            extension = getattr(assertion, "extension", None)
            own = getattr(extension, "file_extension", None) == SNAPSHOT_SUFFIX[1:]
            if isinstance(data, GraphIR) and not own:
                raise GraphOnPlainSnapshotError("use the graphir_snapshot fixture")
            return serialize(data)

        def get_assert_diff(**kwargs: Any) -> Any:
            results = getattr(assertion, "executions", {})
            last = results.get(getattr(assertion, "num_executions", 0) - 1)
            if last is not None and isinstance(last.exception, GraphOnPlainSnapshotError):
                return last.exception.lines()
            return assert_diff(**kwargs)

        assertion._serialize = _serialize
        assertion.get_assert_diff = get_assert_diff
