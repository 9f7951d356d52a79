"""What syrupy says beside graphir: a graph handed to syrupy's plain ``snapshot``
fixture, the line for a missing snapshot (one line, graphir's), another extension
asked of ``graphir_snapshot``."""

from __future__ import annotations

from typing import Any

import pytest
from workflow import run

TESTS = """
import models
from pytest_graphir import trace

def test_plain(snapshot):
    model, inputs = models.mlp()
    assert trace(model, *inputs) == snapshot

def test_other_data(snapshot):
    assert {"a": 1} == snapshot
"""


def test_a_graph_on_syrupys_plain_fixture_names_graphir_snapshot_and_writes_nothing(
    graphir_project: pytest.Pytester,
) -> None:
    p = graphir_project
    p.makepyfile(test_plain=TESTS)
    for args in (("--snapshot-update",), ()):
        result = run(p, *args)
        result.assert_outcomes(failed=1, passed=1)
        result.stdout.fnmatch_lines(
            [
                "*graphir: syrupy's `snapshot` fixture was given a GraphIR*nothing was written",
                "*fix: use the `graphir_snapshot` fixture*",
            ]
        )
        ambr = p.path / "__snapshots__" / "test_plain.ambr"
        text = ambr.read_text() if ambr.exists() else ""
        assert "test_plain" not in text.replace("test_plain.py", "")
        assert "GraphIR" not in text
    assert "test_other_data" in (p.path / "__snapshots__" / "test_plain.ambr").read_text()


def test_a_missing_snapshot_is_said_once(graphir_project: pytest.Pytester) -> None:
    p = graphir_project
    p.makepyfile(
        test_mlp="""
import models
from pytest_graphir import trace

def test_mlp(graphir_snapshot):
    model, inputs = models.mlp()
    assert trace(model, *inputs) == graphir_snapshot
"""
    )
    result = run(p)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "does not exist" not in out
    # the failure's own message; pytest's short summary repeats its first line, whole
    # under CI=true (and -vv), so it is left out of the count
    failure = out.split("short test summary info")[0]
    assert failure.count("graphir: no snapshot at __snapshots__/test_mlp/test_mlp.graphir") == 1


def test_graphir_snapshot_refuses_another_extension(graphir_snapshot: Any) -> None:
    """``graphir_snapshot`` stores through its own extension: asking it for another (by
    any of syrupy's three ways) is a TypeError naming the fixture to use, not an option
    ignored without a word."""
    from syrupy.extensions.json import JSONSnapshotExtension

    for ask in (
        lambda: graphir_snapshot.use_extension(JSONSnapshotExtension),
        lambda: graphir_snapshot.with_defaults(extension_class=JSONSnapshotExtension),
        lambda: graphir_snapshot(extension_class=JSONSnapshotExtension),
    ):
        with pytest.raises(TypeError, match="not JSONSnapshotExtension; use syrupy's `snapshot`"):
            ask()
