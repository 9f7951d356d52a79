"""The pytest plugin: options, the ``graphir`` marker and the ``graphir_snapshot`` fixture.

Registered through the ``pytest11`` entry point. Loading it imports neither torch
nor the extension: the fixture imports them when a test first uses it.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

_INI: dict[str, tuple[Any, str]] = {
    "graphir_rtol": (1e-3, "relative tolerance of graphir statistics, as a fraction of "
                     "each tensor's magnitude max(|min|, |max|, std)"),
    "graphir_atol": (1e-5, "absolute tolerance of graphir statistics"),
    "graphir_seed": (0, "torch.manual_seed value set before each test using graphir_snapshot"),
    "graphir_max_diff_lines": (30, "change lines shown in a graphir failure (0 = all)"),
    "graphir_max_snapshot_bytes": (32 * 2**20, "largest .graphir file read, in bytes "
                                   "(default 32 MiB); a bigger one fails without being read"),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--graphir-update`` and the ini options.

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_addoption
    """
    group = parser.getgroup("graphir", "graph snapshots of PyTorch models (pytest-graphir)")
    group.addoption(
        "--graphir-update", action="store_true", default=False, dest="graphir_update",
        help="rewrite graphir snapshots that differ or are missing; other syrupy "
             "snapshots are left alone (syrupy's --snapshot-update rewrites all)",
    )
    for name, (default, help_text) in _INI.items():
        if isinstance(default, float):
            parser.addini(name, help_text, type="float", default=default)
        else:
            parser.addini(name, help_text, type="int", default=default)


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``graphir`` marker; keep ``--collect-only`` and collection errors
    from deleting snapshots.

    With ``--collect-only`` no assertion runs, so syrupy would report (and under
    ``--snapshot-update`` delete) every snapshot as unused: unused detection is
    switched off for such runs, and for runs with a collection error
    (:class:`CollectionErrorGuard`).

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_configure
    """
    config.addinivalue_line(
        "markers",
        "graphir(rtol=None, atol=None, seed=None, max_diff_lines=None): per-test "
        "options of graphir_snapshot, overriding the graphir_* ini options",
    )
    if config.option.collectonly:
        _keep_unused_snapshots(config)
    config.pluginmanager.register(CollectionErrorGuard(config), "graphir-collection-guard")


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
    flags = [("--graphir-update", config.getoption("graphir_update", False)),
             ("--snapshot-update", getattr(config.option, "update_snapshots", False))]
    return [flag for flag, on in flags if on]


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say at the top of a CI run that the snapshot gate is off.

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_report_header
    """
    flags = _ci_gate_off(config)
    if not flags:
        return []
    return [f"graphir: WARNING: CI is set and {' and '.join(flags)} is given: snapshots are "
            "rewritten, not checked (see the end of the run)"]


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int,
                            config: pytest.Config) -> None:
    """Warn loudly when a CI run rewrites snapshots instead of checking them.

    ``--graphir-update``/``--snapshot-update`` in a CI job (often through
    ``PYTEST_ADDOPTS``) make every graph snapshot pass: the regression gate is off.

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_terminal_summary
    """
    _warn_gate_off_in_ci(terminalreporter, config)


def _warn_gate_off_in_ci(terminalreporter: Any, config: pytest.Config) -> None:
    flags = _ci_gate_off(config)
    if not flags or hasattr(config, "workerinput"):
        return
    given = " and ".join(flags)
    addopts = os.environ.get("PYTEST_ADDOPTS", "")
    source = f" (PYTEST_ADDOPTS={addopts!r})" if any(f in addopts for f in flags) else ""
    terminalreporter.write_sep("!", "graphir: snapshot gate is OFF in this CI run",
                               red=True, bold=True)
    terminalreporter.write_line(
        f"CI={os.environ.get('CI', '')!r} and {given} is given{source}: graph snapshots "
        "were rewritten from the current models instead of compared, so this run passes "
        "whatever the models do.", red=True, bold=True)
    terminalreporter.write_line(
        f"Fix: remove {given} from the CI command or PYTEST_ADDOPTS; update snapshots "
        "locally and commit them.", red=True, bold=True)


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
def graphir_snapshot(snapshot: Any, request: pytest.FixtureRequest) -> Any:
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
    ini options with ``@pytest.mark.graphir(rtol=1e-2, atol=1e-4, seed=1)``.

    It is syrupy's ``snapshot`` fixture with ``GraphIRExtension`` (as
    ``snapshot.with_defaults(extension_class=...)`` builds it, as a
    :class:`~pytest_graphir.extension.GraphIRSnapshotAssertion`: short repr, no
    traceback for file problems); under ``--graphir-update`` its
    ``update_snapshots`` flag is set, so only graphir snapshots are rewritten.
    """
    from .compare import Tolerance

    snap = _graphir_assertion(snapshot, request)
    ext = snap.extension
    ext.tolerance = Tolerance(rtol=_option(request, "rtol", float),
                              atol=_option(request, "atol", float))
    ext.max_diff_lines = _option(request, "max_diff_lines", int)
    ext.expected_location = ext.get_location(test_location=snap.test_location, index=0)
    _configure_snapshot_files(ext, request, snap.test_location)

    import torch

    torch.manual_seed(_option(request, "seed", int))
    return snap


def _graphir_assertion(snapshot: Any, request: pytest.FixtureRequest) -> Any:
    """syrupy's ``snapshot.with_defaults(extension_class=GraphIRExtension)``, built as a
    :class:`~pytest_graphir.extension.GraphIRSnapshotAssertion`."""
    from .extension import GraphIRExtension, GraphIRSnapshotAssertion

    return GraphIRSnapshotAssertion(
        session=snapshot.session, extension_class=GraphIRExtension,
        test_location=snapshot.test_location,
        update_snapshots=snapshot.update_snapshots or bool(
            request.config.getoption("graphir_update")),
        update_new_snapshots_only=snapshot.update_new_snapshots_only,
        include=snapshot.include, exclude=snapshot.exclude, matcher=snapshot.matcher)


def _configure_snapshot_files(ext: Any, request: pytest.FixtureRequest,
                              test_location: Any) -> None:
    """Limits of the snapshot file: size (``graphir_max_snapshot_bytes``), the
    repository that symlinks may not leave (pytest's rootdir), the test id for
    messages about shortened file names."""
    from syrupy.extensions.base import AbstractSyrupyExtension

    limit = _option(request, "max_snapshot_bytes", int)
    if limit <= 0:
        raise pytest.UsageError(
            f"graphir_max_snapshot_bytes = {limit} must be a positive number of bytes; "
            "fix the ini option")
    ext.max_snapshot_bytes = limit
    type(ext).root = str(request.config.rootpath)
    ext.test_id = AbstractSyrupyExtension.get_snapshot_name(test_location=test_location)
