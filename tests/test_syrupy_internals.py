"""The private parts of syrupy the plugin relies on (each reached in one place, see
``pytest_graphir.plugin.guards`` and ``pytest_graphir.extension.files``): these tests
fail when a syrupy release moves one, before the guards silently stop guarding."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from pathlib import Path

import pytest
from syrupy.extensions.single_file import SingleFileSnapshotExtension
from syrupy.location import PyTestLocation
from syrupy.report import SnapshotReport
from syrupy.session import SnapshotSession

from pytest_graphir.plugin import guards


def test_the_session_is_config_syrupy(request: pytest.FixtureRequest) -> None:
    assert isinstance(guards.syrupy_session(request.config), SnapshotSession)


def test_collected_modules_is_a_set_of_module_path_keys(tmp_path: Path) -> None:
    fields = {f.name: f for f in dataclasses.fields(SnapshotSession)}
    assert "_collected_modules" in fields
    session = SnapshotSession(pytest_session=None)  # type: ignore[arg-type]
    session.collect_module(tmp_path / "test_m.py")
    assert session._collected_modules == {PyTestLocation.module_path_key(tmp_path / "test_m.py")}
    config = type("Config", (), {"_syrupy": session})()
    guards.uncollect_module(config, tmp_path / "test_m.py")  # type: ignore[arg-type]
    assert session._collected_modules == set()


def test_the_report_caches_unused_and_can_drop_them() -> None:
    for name in ("unused", "num_unused"):
        assert isinstance(inspect.getattr_static(SnapshotReport, name), functools.cached_property)
    assert callable(SnapshotReport._invalidate_selection_caches)
    assert "discovered" in {f.name for f in dataclasses.fields(SnapshotReport)}


def test_session_methods_the_guards_call() -> None:
    remove = inspect.signature(SnapshotSession.remove_unused_snapshots).parameters
    assert {"unused_snapshot_collections", "used_snapshot_collections"} <= set(remove)
    ran_item = inspect.signature(SnapshotSession.ran_item).parameters
    assert list(ran_item)[1:3] == ["nodeid", "outcome"]


def test_single_file_names_are_sanitized_by_a_private_classmethod() -> None:
    from pytest_graphir.extension.files import sanitize_filename

    assert SingleFileSnapshotExtension._sanitize_filename("a/b?c\x1b") == "abc"
    assert sanitize_filename("a/b?c\x1b") == "abc"
