"""Guards around syrupy's life cycle: each keeps a syrupy behaviour from deleting or
misreporting graphir snapshots, and names the behaviour it works around.

syrupy 7 decides at the end of a run which snapshot files no test used, reports them
and, under ``--snapshot-update``, deletes them. Several of its inputs are wrong for
runs it does not expect (a collection error, a module skipped at import, a test that
failed before its ``assert``, a received file beside a snapshot, a graph handed to
the plain ``snapshot`` fixture); each guard below corrects one, through syrupy's
options or its session object. The private parts of syrupy used are reached through
the three functions at the top, each saying what syrupy lacks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.amber import AmberSnapshotExtension

from ..extension import launcher
from ..extension.files import SNAPSHOT_SUFFIX, outside_root
from ..ir import GraphIR
from ..names import launcher_rank, writes_snapshots

# -- syrupy's private API --------------------------------------------------------------
# Each private use is here, once, saying what syrupy lacks;
# tests/test_syrupy_internals.py fails when one of them moves.


def syrupy_session(config: pytest.Config) -> Any:
    """syrupy's ``SnapshotSession`` of this run, or None before it starts: syrupy keeps
    it as ``config._syrupy`` and has no public accessor."""
    return getattr(config, "_syrupy", None)


def uncollect_module(config: pytest.Config, path: Path) -> None:
    """Take the module at ``path`` out of syrupy's collected modules: syrupy has no way
    to say that a module whose collection started yields no test
    (``SnapshotSession._collected_modules``, keyed by ``PyTestLocation.module_path_key``)."""
    modules = getattr(syrupy_session(config), "_collected_modules", None)
    if isinstance(modules, set):
        from syrupy.location import PyTestLocation

        modules.discard(PyTestLocation.module_path_key(path))


def forget_discovered(report: Any, keep: Any) -> None:
    """Keep only the discovered snapshot files ``keep`` accepts in syrupy's report and
    recompute its unused ones: ``SnapshotReport`` has no way to drop a discovered file,
    and caches ``unused`` (``_invalidate_selection_caches`` clears those caches)."""
    report.discovered = launcher.discovered(report.discovered, keep)
    report._invalidate_selection_caches()


# -- the guards ------------------------------------------------------------------------


def register_guards(config: pytest.Config) -> None:
    """Register the guards on ``config`` (from ``pytest_configure``, on xdist workers
    and the controller alike), make :class:`PlainSnapshotExtension` syrupy's default
    extension unless the user named one, keep syrupy from taking
    ``*.graphir.received`` files for snapshots, and, on a launcher's rank above 0,
    from deleting unused snapshots (rank 0 does, once).

    syrupy's default (Amber) extension, which the ``snapshot`` fixture behind
    ``graphir_snapshot`` registers, claims every file under ``__snapshots__/`` it does
    not recognise as an unknown, unused snapshot, so a received file written beside its
    snapshot would fail the run and be deleted by ``--snapshot-update``. Adding
    ``received`` to ``--snapshot-ignore-file-extensions`` (syrupy's
    ``walk_snapshot_dir`` skips such files) prevents that.
    """
    if not writes_snapshots() and hasattr(config.option, "no_cleanup"):
        # torchrun's ranks above 0 run the whole session too: rank 0 alone deletes
        # (syrupy's --snapshot-no-cleanup); they still report unused snapshots
        config.option.no_cleanup = True
    config.pluginmanager.register(SyrupyGuards(config), "graphir-syrupy-guards")
    option = config.option
    if getattr(option, "default_extension", "") is None:  # the user named none
        option.default_extension = f"{__name__}.{PlainSnapshotExtension.__qualname__}"
    if hasattr(option, "ignore_file_extensions"):
        ignored = list(option.ignore_file_extensions or [])
        option.ignore_file_extensions = ignored + ([] if "received" in ignored else ["received"])


class SyrupyGuards:
    """The guards, one hook each (the hook's docstring says which syrupy behaviour it
    corrects):

    * ``--collect-only`` (``__init__``) and a collection error
      (:meth:`pytest_collectreport`) switch unused detection off;
    * a test that did not pass keeps its snapshot (:meth:`pytest_sessionfinish`,
      with :meth:`pytest_collection_modifyitems` and :meth:`pytest_runtest_logreport`);
    * a module skipped at import keeps its snapshots (:meth:`pytest_make_collect_report`);
    * ``--snapshot-update`` deletes no file that symlinks lead outside the repository
      (:meth:`pytest_sessionfinish`, named in :meth:`pytest_terminal_summary`);
    * a graph handed to the plain ``snapshot`` fixture fails in graphir's words
      (:meth:`pytest_assertrepr_compare`).
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.pending: set[str] = set()  # graphir tests that have not passed (yet)
        self.kept: list[str] = []  # unused files outside the repository, not deleted
        if config.option.collectonly:
            self.keep_unused_snapshots()

    def keep_unused_snapshots(self) -> None:
        """Switch off syrupy's unused-snapshot detection (and so its deletion) for this
        run: no assertion runs under ``--collect-only``, so syrupy would report, and
        under ``--snapshot-update`` delete, every snapshot."""
        if hasattr(self.config.option, "disable_unused_snapshots"):
            self.config.option.disable_unused_snapshots = True

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Keep every snapshot when a test module fails to import.

        syrupy treats the snapshots of a module that errors at collection as unused,
        and ``--snapshot-update`` then deletes them, and (when pytest stops on the
        collection error) every other module's snapshots too. A run with a collection
        error cannot tell what is unused, so unused detection is switched off for it.
        On xdist the controller sees the workers' collection reports as well.

        Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_collectreport
        """
        if report.failed:
            self.keep_unused_snapshots()

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        r"""Keep the snapshots of a module skipped at import (``pytest.importorskip``,
        ``pytest.skip(allow_module_level=True)``).

        syrupy records a module as collected when its collection starts
        (``pytest_collectstart``); a module that then skips yields no test, so its
        ``.graphir`` files would count as unused and be deleted by ``--snapshot-update``.
        Taking the module back out of syrupy's collected set makes syrupy keep them, as
        it does for ``--ignore``\d modules. On xdist this runs on the workers, before
        they send their collected modules to the controller.

        Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_make_collect_report
        """
        report = yield
        if report.skipped and isinstance(collector, pytest.Module):
            uncollect_module(collector.config, collector.path)
        return report

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Remember the graphir tests (see :meth:`pytest_sessionfinish`).

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
        """Runs before syrupy's ``pytest_sessionfinish`` (which builds its report and,
        under ``--snapshot-update``, deletes the unused snapshots).

        Keeps the snapshots of graphir tests that did not pass (error, failure, not
        run). syrupy counts a snapshot as used when its test asserts against it; a test
        that raises before its ``assert`` (or errors in setup, or is never reached after
        ``-x``) asserts nothing, so ``--snapshot-update`` would delete the snapshot of a
        test that still exists. syrupy already keeps the snapshots of *skipped* tests
        (``SnapshotReport._skipped_items_match_name``), so every collected test that
        uses ``graphir_snapshot`` and did not pass is reported to syrupy as skipped
        (``SnapshotSession.ran_item(nodeid, "skipped")``). That status only feeds
        syrupy's unused-snapshot decision; the test's own outcome is untouched, and
        snapshots of tests that no longer exist are still reported and deleted. On xdist
        this runs on the workers, which send these statuses to the controller with their
        syrupy report.

        Keeps ``--snapshot-update`` from deleting files that symlinks lead outside the
        repository. syrupy lists every file in a test module's snapshot directory and
        deletes those no test used (``SnapshotSession.remove_unused_snapshots``)
        wherever the directory leads: with ``__snapshots__`` linked out of the
        repository it deleted stale snapshots and unrelated files there, although
        graphir refuses to read or write through such a link. That method of syrupy's
        session is wrapped so that it first drops the discovered files that resolve
        outside rootdir from syrupy's report and recomputes the unused ones
        (:func:`forget_discovered`). The files kept are named in the terminal summary.

        Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_sessionfinish
        """
        syrupy = syrupy_session(self.config)
        if syrupy is not None:
            for nodeid in sorted(self.pending):
                syrupy.ran_item(nodeid, "skipped")  # ignored for items syrupy did not select
            remove = syrupy.remove_unused_snapshots

            def inside(location: str) -> bool:
                return outside_root(location, self.config.rootpath) is None

            def remove_unused_snapshots(**collections: Any) -> None:  # syrupy passes keywords
                unused = collections["unused_snapshot_collections"]
                if outside := [c.location for c in unused if not inside(c.location)]:
                    forget_discovered(syrupy.report, inside)
                    collections["unused_snapshot_collections"] = syrupy.report.unused
                    self.kept.extend(outside)
                remove(**collections)

            syrupy.remove_unused_snapshots = remove_unused_snapshots
        return (yield)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Name the files outside the repository that were kept; on a launcher's rank
        above 0, say what this rank did (:func:`.launcher.summary_line`): syrupy's
        counts there leave out the snapshots rank 0 writes and the unused ones it
        reports.

        Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_terminal_summary
        """
        for location in self.kept:
            shown = os.path.relpath(location, self.config.invocation_params.dir)
            terminalreporter.write_line(
                f"graphir: kept {shown}: a symlink leads it outside the repository, so "
                "--snapshot-update does not delete it (remove it yourself if it is stale)"
            )
        report = getattr(syrupy_session(self.config), "report", None)
        if report is not None and launcher.launched() and launcher_rank() > 0:

            def count(collections: Any, written: bool) -> int:
                graphir = (c for c in collections if c.location.endswith(SNAPSHOT_SUFFIX))
                return sum(len(c) for c in graphir if launcher.writes(c.location) == written)

            written = count(report.created, True) + count(report.updated, True)
            terminalreporter.write_line(launcher.summary_line(count(report.used, False), written))

    @pytest.hookimpl(tryfirst=True)
    def pytest_assertrepr_compare(self, op: str, left: Any, right: Any) -> list[str] | None:
        """Say what :class:`PlainSnapshotExtension` refused in graphir's words: the
        failure message names ``graphir_snapshot`` instead of a traceback through syrupy.

        Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_assertrepr_compare
        """
        for side in (left, right):
            if isinstance(side, SnapshotAssertion) and side.num_executions:
                error = side.executions[side.num_executions - 1].exception
                if isinstance(error, GraphOnPlainSnapshotError):
                    return error.lines()
        return None


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


class PlainSnapshotExtension(launcher.RankDiscovery, AmberSnapshotExtension):
    """syrupy's default extension (Amber), refusing a graph.

    Amber serializes any object, a ``GraphIR`` as its ``repr``: ``assert trace(...) ==
    snapshot`` would fail with a long repr diff, and ``--snapshot-update`` would write
    that repr into a ``.ambr`` file, which then passes whatever the graph's statistics
    do. :func:`register_guards` makes this syrupy's default extension (its
    ``--snapshot-default-extension`` option) unless the user named one, so the
    ``snapshot`` fixture uses it; everything but a graph goes to Amber unchanged.
    Its discovery (Amber lists every file under ``__snapshots__/``, ``.graphir`` ones
    as unknown) leaves out the files another rank of a launcher accounts for
    (:class:`.launcher.RankDiscovery`).
    """

    def serialize(self, data: Any, **kwargs: Any) -> Any:
        """Amber's ``serialize``; for a :class:`GraphIR`, raise before syrupy queues any write.

        Raises:
            GraphOnPlainSnapshotError: ``data`` is a graph.
        """
        if isinstance(data, GraphIR):
            raise GraphOnPlainSnapshotError("use the graphir_snapshot fixture")
        return super().serialize(data, **kwargs)
