"""What a run says at its ends: each failing graphir snapshot in the terminal summary
(at any verbosity, also from xdist workers), and a loud warning when a CI run rewrites
snapshots instead of checking them.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from ..extension import launcher
from ..names import launcher_rank

FAILURES = pytest.StashKey[list[dict[str, Any]]]()
"""Per test item: the graphir failures its assertions recorded (the extension's
``settle``)."""
PROPERTY = "graphir"
"""``user_properties`` name of a failure record (JSON), sent by xdist workers."""


def _update_flags(config: pytest.Config) -> list[str]:
    """The update flags given (``--graphir-update``, ``--snapshot-update``)."""
    flags = [
        ("--graphir-update", config.getoption("graphir_update", False)),
        ("--snapshot-update", getattr(config.option, "update_snapshots", False)),
    ]
    return [flag for flag, on in flags if on]


def _ci_gate_off(config: pytest.Config) -> list[str]:
    """The update flags given in a CI run (``CI`` set and not false), else []."""
    off = os.environ.get("CI", "").strip().lower() in ("", "0", "false", "no", "off")
    return [] if off else _update_flags(config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Say at the top of a CI run that the snapshot gate is off, and under an update on
    a launcher's rank (``torchrun -m pytest``) which snapshots this rank writes
    (:func:`.launcher.header_line`; with a rank above 0 set but no ``WORLD_SIZE``: none).

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_report_header
    """
    rank, flags = launcher_rank(), _ci_gate_off(config)
    lines = [
        f"graphir: WARNING: CI is set and {' and '.join(flags)} is given: snapshots are "
        "rewritten, not checked (see the end of the run)"
    ] * bool(flags)
    if _update_flags(config) and (launcher.launched() or rank):
        none = f"graphir: rank {rank} (RANK={rank}) writes no snapshots; rank 0 does"
        lines.append(launcher.header_line() if launcher.launched() else none)
    return lines


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Attach each graphir failure of a failed test to its report.

    The record (the test, the lines of its summary section, snapshot and report
    paths: ``GraphIRExtension.settle``) goes in
    ``report.user_properties`` as ``("graphir", <json>)``: plain data that xdist
    sends from the worker to the controller, where :func:`pytest_terminal_summary`
    prints it. With pytest-html loaded, the HTML report is linked from its extras.

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_runtest_makereport
    """
    report = yield
    if report.when == "call" and report.failed:
        records = item.stash.get(FAILURES, [])
        report.user_properties.extend((PROPERTY, json.dumps(r)) for r in records)
        written = [r["report"] for r in records if r.get("report")]
        if written and item.config.pluginmanager.getplugin("html") is not None:
            from pytest_html import extras  # type: ignore[import-untyped,import-not-found,unused-ignore]

            html_path = getattr(item.config.option, "htmlpath", None)
            base = Path(html_path).resolve().parent if html_path else Path.cwd()
            links = [
                extras.url(os.path.relpath(Path(p).resolve(), base), name="graphir report")
                for p in written
            ]
            report.extras = [*getattr(report, "extras", []), *links]  # type: ignore[attr-defined]
    return report


def graphir_failures(reports: list[Any]) -> list[dict[str, Any]]:
    """The graphir failure records of test reports, in report order."""
    values = (v for r in reports for k, v in getattr(r, "user_properties", ()) if k == PROPERTY)
    out = []
    for value in values:
        with contextlib.suppress(TypeError, ValueError):
            out.append(json.loads(value))
    return out


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """A section listing each failing graphir snapshot: the provenance line that
    opens its message when the snapshot was written elsewhere, summary line, the first ten
    lines of the failure message's change list (structural changes, drift origins,
    propagated drift per module subtree; fewer when ``graphir_max_diff_lines`` cuts
    the message shorter) and how many change lines it leaves out, with what prints
    them (``-vv``, or raising ``graphir_max_diff_lines`` where the message is cut too),
    snapshot path, report path (or, when it could not be written, why and the fix), a
    received file that could not be written (why, and the fix), how to accept (the
    obsolete snapshots ``--graphir-update`` deleted follow, from
    :class:`.obsolete.ObsoleteSnapshotCleanup`); and a loud warning when a CI
    run rewrites snapshots instead of checking them (``--graphir-update`` or
    ``--snapshot-update`` with ``CI`` set, often through ``PYTEST_ADDOPTS``: the
    regression gate is off). The lines of each failure are its record's, worded where
    the comparison ran (``GraphIRExtension.settle``).

    pytest cuts assertion messages after 8 lines at default verbosity; this section
    is not cut, so the essentials survive at any verbosity (the full change list
    stays in the assertion message).

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_terminal_summary
    """
    records = graphir_failures(terminalreporter.stats.get("failed", []))
    if records:
        terminalreporter.write_sep("=", "graphir snapshot failures", red=True, bold=True)
    for r in records:
        terminalreporter.write_line(r["test"], bold=True)
        for line in r["lines"]:
            terminalreporter.write_line(line)
    # the loud warning that the snapshot gate was off in this CI run
    flags = _ci_gate_off(config)
    if not flags or hasattr(config, "workerinput"):
        return
    given = " and ".join(flags)
    addopts = os.environ.get("PYTEST_ADDOPTS", "")
    source = f" (PYTEST_ADDOPTS={addopts!r})" if any(f in addopts for f in flags) else ""
    terminalreporter.write_sep(
        "!", "graphir: snapshot gate is OFF in this CI run", red=True, bold=True
    )
    for line in (
        f"CI={os.environ.get('CI', '')!r} and {given} is given{source}: graph snapshots "
        "were rewritten from the current models instead of compared, so this run passes "
        "whatever the models do.",
        f"Fix: remove {given} from the CI command or PYTEST_ADDOPTS; update snapshots "
        "locally and commit them.",
    ):
        terminalreporter.write_line(line, red=True, bold=True)
