"""The pytest plugin: options, the ``graphir`` marker and the ``graphir_snapshot`` fixture.

Registered through the ``pytest11`` entry point. Loading it imports neither torch
nor the extension: the fixture imports them when a test first uses it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

FAILURES = pytest.StashKey[list[dict[str, Any]]]()
"""Per test item: the graphir failures its assertions recorded (see ``_record``)."""
PROPERTY = "graphir"
"""``user_properties`` name of a failure record (JSON), sent by xdist workers."""

_INI: dict[str, tuple[Any, str]] = {
    "graphir_rtol": (
        1e-3,
        "relative tolerance of graphir statistics, as a fraction of "
        "each tensor's magnitude max(|min|, |max|, std)",
    ),
    "graphir_atol": (1e-5, "absolute tolerance of graphir statistics"),
    "graphir_seed": (0, "torch.manual_seed value set before each test using graphir_snapshot"),
    "graphir_max_diff_lines": (30, "change lines shown in a graphir failure (0 = all)"),
    "graphir_max_snapshot_bytes": (
        32 * 2**20,
        "largest .graphir file read, in bytes "
        "(default 32 MiB); a bigger one fails without being read",
    ),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--graphir-update``, ``--graphir-report``, ``--graphir-received`` and the
    ini options.

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_addoption
    """
    group = parser.getgroup("graphir", "graph snapshots of PyTorch models (pytest-graphir)")
    group.addoption(
        "--graphir-update",
        action="store_true",
        default=False,
        dest="graphir_update",
        help="rewrite graphir snapshots that differ or are missing; other syrupy "
        "snapshots are left alone (syrupy's --snapshot-update rewrites all)",
    )
    for name, (default, help_text) in _INI.items():
        if isinstance(default, float):
            parser.addini(name, help_text, type="float", default=default)
        else:
            parser.addini(name, help_text, type="int", default=default)
    _add_received_options(parser, group)


RECEIVED_MODES = ("report", "beside", "off")
"""Values of ``--graphir-received`` / ini ``graphir_received``."""


def _add_received_options(parser: pytest.Parser, group: Any) -> None:
    """``--graphir-report=DIR`` and ``--graphir-received=report|beside|off``."""
    group.addoption(
        "--graphir-report",
        dest="graphir_report",
        metavar="DIR",
        default=None,
        help="directory for graphir failure artefacts: the received snapshot of each "
        "failing test (<snapshot>.graphir.received, at the snapshot's path relative "
        "to rootdir) and the HTML report; ini: graphir_report",
    )
    parser.addini(
        "graphir_report",
        "directory for graphir failure artefacts (see --graphir-report); relative to rootdir",
        default="",
    )
    group.addoption(
        "--graphir-received",
        dest="graphir_received",
        choices=RECEIVED_MODES,
        default=None,
        help="where a failing graphir test writes what it received: 'report' (default: "
        "into --graphir-report DIR, nothing without it), 'beside' (next to the "
        "snapshot, <name>.graphir.received) or 'off'; ini: graphir_received",
    )
    parser.addini(
        "graphir_received", "report, beside or off (see --graphir-received)", default="report"
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``graphir`` marker; keep ``--collect-only``, collection errors and
    tests that did not pass from deleting snapshots; hide received files from syrupy.

    With ``--collect-only`` no assertion runs, so syrupy would report (and under
    ``--snapshot-update`` delete) every snapshot as unused: unused detection is
    switched off for such runs, and for runs with a collection error
    (:class:`CollectionErrorGuard`). A test that errors, fails before its assert or is
    not run keeps its snapshots (:class:`UnfinishedTestGuard`).

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_configure
    """
    config.addinivalue_line(
        "markers",
        "graphir(rtol=None, atol=None, seed=None, max_diff_lines=None, tolerances=None, "
        "ignore=None): per-test "
        "options of graphir_snapshot, overriding the graphir_* ini options",
    )
    if config.option.collectonly:
        _keep_unused_snapshots(config)
    config.pluginmanager.register(CollectionErrorGuard(config), "graphir-collection-guard")
    if config.getoption("graphir_update"):
        config.pluginmanager.register(ObsoleteSnapshotCleanup(config), "graphir-obsolete")
    config.pluginmanager.register(UnfinishedTestGuard(config), "graphir-unfinished-guard")
    _ignore_received_files(config)


def _ignore_received_files(config: pytest.Config) -> None:
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


def _keep_unused_snapshots(config: pytest.Config) -> None:
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
            _keep_unused_snapshots(self.config)


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


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    r"""Keep a module skipped at import (``pytest.importorskip``,
    ``pytest.skip(allow_module_level=True)``) from losing its snapshots.

    syrupy records a module as collected when its collection starts
    (``pytest_collectstart``); a module that then skips yields no test, so its
    ``.graphir`` files would count as unused and be deleted by ``--snapshot-update``.
    Taking the module back out of syrupy's collected set makes syrupy keep them, as it
    does for ``--ignore``\d modules. On xdist this runs on the workers, before they
    send their collected modules to the controller.

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_make_collect_report
    """
    report = yield
    if report.skipped and isinstance(collector, pytest.Module):
        session = getattr(collector.config, "_syrupy", None)
        modules = getattr(session, "_collected_modules", None)
        if isinstance(modules, set):
            from syrupy.location import PyTestLocation

            modules.discard(PyTestLocation.module_path_key(collector.path))
    return report


def _ci_gate_off(config: pytest.Config) -> list[str]:
    """The update flags given in a CI run (``CI`` set and not false), else []."""
    if os.environ.get("CI", "").strip().lower() in ("", "0", "false", "no", "off"):
        return []
    flags = [
        ("--graphir-update", config.getoption("graphir_update", False)),
        ("--snapshot-update", getattr(config.option, "update_snapshots", False)),
    ]
    return [flag for flag, on in flags if on]


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say at the top of a CI run that the snapshot gate is off.

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_report_header
    """
    flags = _ci_gate_off(config)
    if not flags:
        return []
    return [
        f"graphir: WARNING: CI is set and {' and '.join(flags)} is given: snapshots are "
        "rewritten, not checked (see the end of the run)"
    ]


def _warn_gate_off_in_ci(terminalreporter: Any, config: pytest.Config) -> None:
    flags = _ci_gate_off(config)
    if not flags or hasattr(config, "workerinput"):
        return
    given = " and ".join(flags)
    addopts = os.environ.get("PYTEST_ADDOPTS", "")
    source = f" (PYTEST_ADDOPTS={addopts!r})" if any(f in addopts for f in flags) else ""
    terminalreporter.write_sep(
        "!", "graphir: snapshot gate is OFF in this CI run", red=True, bold=True
    )
    terminalreporter.write_line(
        f"CI={os.environ.get('CI', '')!r} and {given} is given{source}: graph snapshots "
        "were rewritten from the current models instead of compared, so this run passes "
        "whatever the models do.",
        red=True,
        bold=True,
    )
    terminalreporter.write_line(
        f"Fix: remove {given} from the CI command or PYTEST_ADDOPTS; update snapshots "
        "locally and commit them.",
        red=True,
        bold=True,
    )


MARKER_OPTIONS = ("rtol", "atol", "seed", "max_diff_lines", "tolerances", "ignore")
"""Keyword arguments of ``@pytest.mark.graphir``."""


def _check_graphir_markers(node: pytest.Item) -> None:
    """Reject positional or unknown ``@pytest.mark.graphir`` arguments.

    Raises:
        pytest.UsageError: names the argument, the valid ones and a close match
            (``rtoll`` -> ``rtol``).
    """
    import difflib

    valid = ", ".join(MARKER_OPTIONS)
    for marker in node.iter_markers("graphir"):
        if marker.args:
            raise pytest.UsageError(
                f"@pytest.mark.graphir{marker.args!r} on {node.nodeid}: positional "
                f"argument(s) are not accepted; valid: {valid} (as keywords, e.g. "
                "@pytest.mark.graphir(rtol=1e-2))"
            )
        for key in marker.kwargs:
            if key not in MARKER_OPTIONS:
                close = difflib.get_close_matches(key, MARKER_OPTIONS, n=1)
                hint = f"; did you mean {close[0]}=?" if close else ""
                raise pytest.UsageError(
                    f"@pytest.mark.graphir on {node.nodeid}: unknown argument {key}; "
                    f"valid: {valid}{hint}"
                )


def _option(request: pytest.FixtureRequest, name: str, cast: Any) -> Any:
    marker = request.node.get_closest_marker("graphir")
    if marker is not None and marker.kwargs.get(name) is not None:
        value = marker.kwargs[name]
    else:
        value = request.config.getini(f"graphir_{name}")
    try:
        return cast(value)
    except (TypeError, ValueError):
        raise pytest.UsageError(
            f"graphir option {name}={value!r} is not a valid {cast.__name__}; fix the "
            f"@pytest.mark.graphir({name}=...) marker or the graphir_{name} ini option"
        ) from None


@pytest.fixture
def graphir_snapshot(snapshot: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A syrupy snapshot of a model's graph IR, stored as ``__snapshots__/<module>/<test>.graphir``.

    Example::

        from pytest_graphir import trace

        def test_gpt2(graphir_snapshot):
            model = GPT2LMHeadModel(GPT2Config(n_layer=2)).eval()
            ids = torch.randint(0, 50257, (1, 16))
            assert trace(model, ids) == graphir_snapshot

    The first run fails (no snapshot); ``pytest --graphir-update`` writes it; later
    runs fail when a node is added, removed or changed, or when a statistic drifts
    beyond ``|a - b| <= atol + rtol * max(|min|, |max|, std)``.

    Before the test body runs, ``torch.manual_seed(graphir_seed)`` is called so the
    random weights a test builds are the same on every run. Per test, override the
    ini options with ``@pytest.mark.graphir(rtol=1e-2, atol=1e-4, seed=1)``; per node-name
    pattern, ``tolerances={"lm_head/*": {"rtol": 1e-2}}``, and nodes left out of the
    comparison, ``ignore=["*.dropout/*"]`` (:func:`fnmatch.fnmatchcase` on node names).

    It is syrupy's ``snapshot`` fixture with ``GraphIRExtension``
    (as ``snapshot.with_defaults(extension_class=...)`` builds it, as a
    :class:`~pytest_graphir.extension.GraphIRSnapshotAssertion`: short repr, no
    traceback for file problems); under ``--graphir-update``
    its ``update_snapshots`` flag is set, so only graphir snapshots are rewritten.

    On a failed comparison the snapshot this run produced is kept as
    ``<snapshot>.graphir.received`` (``--graphir-report=DIR`` /
    ``--graphir-received=beside``); a later passing run or update removes it.

    Raises:
        pytest.UsageError: a ``graphir`` marker has a positional or unknown argument,
            or an option value of the wrong type.
    """
    from .compare import Tolerance

    _check_graphir_markers(request.node)

    snap = _graphir_assertion(snapshot, request)
    ext = snap.extension
    marker = request.node.get_closest_marker("graphir")
    try:
        ext.tolerance = Tolerance.build(
            rtol=_option(request, "rtol", float),
            atol=_option(request, "atol", float),
            tolerances=marker.kwargs.get("tolerances") if marker else None,
            ignore=marker.kwargs.get("ignore") if marker else None,
        )
    except ValueError as exc:
        raise pytest.UsageError(f"@pytest.mark.graphir on {request.node.nodeid}: {exc}") from None
    ext.max_diff_lines = _option(request, "max_diff_lines", int)
    ext.expected_location = ext.get_location(test_location=snap.test_location, index=0)
    ext.test_id = request.node.nodeid
    ext.report_dir = _report_dir(request.config)
    ext.rootdir = request.config.rootpath
    ext.failures = request.node.stash.setdefault(FAILURES, [])
    _configure_snapshot_files(ext, request, snap.test_location)
    ext.received_dir = _received_target(request.config)

    import torch

    torch.manual_seed(_option(request, "seed", int))
    yield snap
    _keep_received(request.config, snap)


def _received_target(config: pytest.Config) -> tuple[str, Path, Path | None] | None:
    """Where failing tests write their received snapshot, as
    ``GraphIRExtension.received_dir``: ``(mode, rootdir, report_dir)``, or None
    (``--graphir-received=off``, or ``report`` without a report directory)."""
    mode = config.getoption("graphir_received") or config.getini("graphir_received") or "report"
    if mode not in RECEIVED_MODES:
        raise pytest.UsageError(
            f"graphir_received = {mode!r}: use one of {', '.join(RECEIVED_MODES)}"
        )
    report = _report_dir(config)
    if mode == "beside" or (mode == "report" and report is not None):
        return (mode, config.rootpath, report)
    return None


def _report_dir(config: pytest.Config) -> Path | None:
    """``--graphir-report`` (relative to the invocation directory) or the
    ``graphir_report`` ini option (relative to rootdir); None when neither is set."""
    value = config.getoption("graphir_report")
    if value:
        return config.invocation_params.dir / str(value)
    ini = config.getini("graphir_report")
    return config.rootpath / str(ini) if ini else None


def _keep_received(config: pytest.Config, snap: Any) -> None:
    """After the test: write the received snapshot of each failed graphir comparison,
    remove stale received files of the comparisons that passed or were written."""
    ext = snap.extension
    for result in snap.executions.values():
        if result.success:
            ext.remove_received(
                snapshot_location=result.snapshot_location,
                rootdir=config.rootpath,
                report_dir=_report_dir(config),
            )
        elif isinstance(result.asserted_data, str):
            ext.write_received(
                snapshot_location=result.snapshot_location, data=result.asserted_data
            )


# -- failures at any verbosity: report properties and the terminal summary -------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach each graphir failure of a failed test to its report.

    The record (summary line, structural changes, snapshot and report paths) goes in
    ``report.user_properties`` as ``("graphir", <json>)``: plain data that xdist
    sends from the worker to the controller, where :func:`pytest_terminal_summary`
    prints it. With pytest-html loaded, the HTML report is linked from its extras.

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_runtest_makereport
    """
    report = yield
    if report.when == "call" and report.failed:
        records = item.stash.get(FAILURES, [])
        for record in records:
            report.user_properties.append((PROPERTY, json.dumps(record)))
        _link_in_pytest_html(item.config, report, records)
    return report


def _link_in_pytest_html(
    config: pytest.Config, report: pytest.TestReport, records: list[dict[str, Any]]
) -> None:
    """Add a link to each written HTML report to pytest-html's ``extras``."""
    pytest_html = config.pluginmanager.getplugin("html")
    written = [
        r["report"]
        for r in records
        if r.get("report") and not str(r["report"]).startswith("not written")
    ]
    if pytest_html is None or not written:
        return
    extras_mod = getattr(pytest_html, "extras", None)
    if extras_mod is None:  # the plugin object is pytest_html.plugin; extras is beside it
        import importlib

        extras_mod = importlib.import_module("pytest_html.extras")
    html_path = getattr(config.option, "htmlpath", None)
    base = Path(html_path).resolve().parent if html_path else Path.cwd()
    extras = list(getattr(report, "extras", []))
    for path in written:
        target = os.path.relpath(Path(path).resolve(), base)
        extras.append(extras_mod.url(target, name="graphir report"))
    report.extras = extras  # type: ignore[attr-defined]


SUMMARY_TITLE = "graphir snapshot failures"


def graphir_failures(reports: list[Any]) -> list[dict[str, Any]]:
    """The graphir failure records of test reports, in report order."""
    out = []
    for rep in reports:
        for name, value in getattr(rep, "user_properties", ()):
            if name == PROPERTY:
                try:
                    out.append(json.loads(value))
                except (TypeError, ValueError):
                    continue
    return out


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """A section listing each failing graphir snapshot: summary line, structural
    changes (at most ten), snapshot path, how to accept, report path; and the
    obsolete snapshots ``--graphir-update`` deleted; and a loud warning when a CI run
    rewrites snapshots instead of checking them (``--graphir-update`` or
    ``--snapshot-update`` with ``CI`` set, often through ``PYTEST_ADDOPTS``: the
    regression gate is off).

    pytest cuts assertion messages after 8 lines at default verbosity; this section
    is not cut, so the essentials survive at any verbosity (the full change list
    stays in the assertion message).

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_terminal_summary
    """
    _summary_of_failures(terminalreporter)
    _warn_gate_off_in_ci(terminalreporter, config)
    cleanup = config.pluginmanager.get_plugin("graphir-obsolete")
    if isinstance(cleanup, ObsoleteSnapshotCleanup):
        cleanup.summary(terminalreporter)


def _summary_of_failures(terminalreporter: Any) -> None:
    records = graphir_failures(terminalreporter.stats.get("failed", []))
    if not records:
        return
    tw = terminalreporter
    tw.write_sep("=", SUMMARY_TITLE, red=True, bold=True)
    for r in records:
        tw.write_line(f"{r['test']}", bold=True)
        tw.write_line(f"  {r['summary']}")
        for line in r.get("changes", []):
            tw.write_line(f"    {line}")
        if r.get("more"):
            tw.write_line(
                f"    ... and {r['more']} more in the assertion message (-vv prints it whole)"
            )
        tw.write_line(f"  snapshot: {r['snapshot']}")
        if r.get("report"):
            tw.write_line(f"  report: {r['report']}")
        tw.write_line(f"  to accept: pytest --graphir-update '{r['test']}'")


# -- obsolete snapshots ------------------------------------------------------------------


def _test_names(nodeid: str) -> tuple[str, str]:
    """``tests/test_m.py::TestC::test_a[1]`` -> (``tests/test_m.py``, ``TestC.test_a[1]``)."""
    path, _, rest = nodeid.partition("::")
    return path, rest.replace("::", ".")


class ObsoleteSnapshotCleanup:
    """Under ``--graphir-update``, delete the ``.graphir`` snapshots whose test no longer
    exists (renamed or removed); syrupy's ``--snapshot-update`` would delete every
    extension's unused snapshots, this deletes graphir ones only.

    A snapshot is deleted only when all of these hold:

    * syrupy's own report (``config._syrupy.report.unused``, private syrupy 7 API)
      lists it as unused: its module was collected, its test did not run, was not
      skipped, and unused detection is on (it is off for ``--collect-only`` and for
      runs with a collection error, see :class:`CollectionErrorGuard`);
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
        self.kept_reason = ""

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_deselected"""
        self.deselected += len(items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Remember every test that exists (on xdist, the controller sees all reports).

        Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_runtest_logreport
        """
        self.tests.add(_test_names(report.nodeid))

    def _blocked(self, session: pytest.Session) -> str:
        """Why nothing may be deleted in this run; empty when cleanup may run."""
        option = self.config.option
        # the config tells a worker apart; PYTEST_XDIST_WORKER is inherited by any
        # pytest run from within one (pytester), so it is not a sign
        if hasattr(self.config, "workerinput"):
            return "xdist worker"
        if option.collectonly:
            return "--collect-only"
        selection = [
            getattr(option, name, None)
            for name in ("keyword", "markexpr", "deselect", "lf", "stepwise")
        ]
        if self.deselected or any(selection):
            return "tests were deselected (-k/-m/--deselect/--lf/--sw)"
        if session.shouldstop or session.shouldfail:
            return "the run stopped early"
        if getattr(option, "update_snapshots", False):
            return "--snapshot-update deletes unused snapshots itself"
        return ""

    def _exists(self, location: Path, rootdir: Path) -> bool:
        """True when a test reported in this run owns the snapshot at ``location``."""
        from .extension import GraphIRExtension, snapshot_file_stem

        stem = location.name[: -len("." + GraphIRExtension.file_extension)]
        module_stem = location.parent.name
        for path, name in self.tests:
            if Path(path).stem != module_stem:
                continue
            if (rootdir / path).parent.resolve() != location.parent.parent.parent.resolve():
                continue
            expected = snapshot_file_stem(name)
            if stem == expected or stem.startswith(expected + "."):
                return True
        return False

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """After syrupy's ``pytest_sessionfinish`` (``tryfirst``) built its report.

        Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_sessionfinish
        """
        self.kept_reason = self._blocked(session)
        if self.kept_reason:
            return
        syrupy = getattr(self.config, "_syrupy", None)
        report = getattr(syrupy, "report", None)
        if report is None or getattr(report, "disable_unused_snapshots", True):
            return
        from .extension import GraphIRExtension

        suffix = "." + GraphIRExtension.file_extension
        others = 0
        for collection in report.unused:
            location = Path(collection.location)
            if location.suffix != suffix or self._exists(location, self.config.rootpath):
                others += len(collection)
                continue
            location.unlink(missing_ok=True)
            self.deleted.append(str(location))
        if self.deleted and not others and session.testsfailed == 0 and session.exitstatus == 1:
            session.exitstatus = 0  # syrupy OR-ed in its "unused snapshots" status (1)

    def summary(self, terminalreporter: Any) -> None:
        """Name each deleted snapshot in the terminal summary."""
        for location in self.deleted:
            shown = os.path.relpath(location, self.config.invocation_params.dir)
            terminalreporter.write_line(f"graphir: deleted obsolete snapshot {shown}")


def _graphir_assertion(snapshot: Any, request: pytest.FixtureRequest) -> Any:
    """syrupy's ``snapshot.with_defaults(extension_class=GraphIRExtension)``, built as a
    :class:`~pytest_graphir.extension.GraphIRSnapshotAssertion`."""
    from .extension import GraphIRExtension, GraphIRSnapshotAssertion

    return GraphIRSnapshotAssertion(
        session=snapshot.session,
        extension_class=GraphIRExtension,
        test_location=snapshot.test_location,
        update_snapshots=snapshot.update_snapshots
        or bool(request.config.getoption("graphir_update")),
        update_new_snapshots_only=snapshot.update_new_snapshots_only,
        include=snapshot.include,
        exclude=snapshot.exclude,
        matcher=snapshot.matcher,
    )


def _configure_snapshot_files(ext: Any, request: pytest.FixtureRequest, test_location: Any) -> None:
    """Limits of the snapshot file: size (``graphir_max_snapshot_bytes``), the
    repository that symlinks may not leave (pytest's rootdir), the test id for
    messages about shortened file names."""
    from syrupy.extensions.base import AbstractSyrupyExtension

    limit = _option(request, "max_snapshot_bytes", int)
    if limit <= 0:
        raise pytest.UsageError(
            f"graphir_max_snapshot_bytes = {limit} must be a positive number of bytes; "
            "fix the ini option"
        )
    ext.max_snapshot_bytes = limit
    type(ext).root = str(request.config.rootpath)
    ext.snapshot_name = AbstractSyrupyExtension.get_snapshot_name(test_location=test_location)
