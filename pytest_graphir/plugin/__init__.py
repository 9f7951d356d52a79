"""The pytest plugin: options, the ``graphir`` marker and the ``graphir_snapshot`` fixture.

Registered through the ``pytest11`` entry point (``pytest_graphir.plugin``); pytest
finds the hooks and the fixture below as this module's attributes. Loading it imports
neither torch nor the comparison code: the fixture imports them when a test first
uses it.

* :mod:`.fixture`: the options, the marker and the fixture;
* :mod:`.guards`: the guards around syrupy's life cycle (what it would otherwise
  delete or misreport);
* :mod:`.obsolete`: ``--graphir-update`` deleting snapshots of tests that are gone;
* :mod:`.summary`: the terminal summary of failures and the CI warning;
* received files are :mod:`pytest_graphir.extension.received`.

Imports go one way: ``fixture`` -> ``summary``; ``obsolete`` -> ``guards``.
"""

from __future__ import annotations

import pytest

from ..defaults import OPTIONS
from ..names import writes_snapshots
from .fixture import MARKER_LINE, graphir_snapshot, ini_option, pytest_addoption
from .guards import register_guards
from .obsolete import ObsoleteSnapshotCleanup
from .summary import pytest_report_header, pytest_runtest_makereport, pytest_terminal_summary


def pytest_configure(config: pytest.Config) -> None:
    """Refuse bad ``graphir_*`` ini options (:func:`.fixture.ini_option` of each),
    register the ``graphir`` and ``distributed`` markers, the guards around syrupy's
    life cycle (:func:`.guards.register_guards`) and, under ``--graphir-update`` (not on a
    launcher's rank above 0), the clean-up of obsolete snapshots
    (:class:`.obsolete.ObsoleteSnapshotCleanup`).

    Implements https://docs.pytest.org/en/stable/reference/reference.html#pytest.hookspec.pytest_configure
    """
    for name in OPTIONS:
        ini_option(config, name)
    config.addinivalue_line("markers", MARKER_LINE)
    # the distributed marker (pytest_graphir.parallel.run_ranks) as pytest --markers lists it
    config.addinivalue_line(
        "markers", "distributed: tests that spawn process-group ranks (run_ranks backend='gloo')"
    )
    register_guards(config)
    if config.getoption("graphir_update") and writes_snapshots():
        config.pluginmanager.register(ObsoleteSnapshotCleanup(config), "graphir-obsolete")


__all__ = [
    "graphir_snapshot",
    "pytest_addoption",
    "pytest_configure",
    "pytest_report_header",
    "pytest_runtest_makereport",
    "pytest_terminal_summary",
]
