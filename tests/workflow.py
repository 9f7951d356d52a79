"""The snapshot workflow contract every graphir snapshot kind is tested against
(after pytest-regressions' ``check_regression_fixture_workflow``)."""

from __future__ import annotations

import pytest

from pytest_graphir.serialize import HEADER


def run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    """Run pytest on the pytester project in a subprocess (fresh torch state)."""
    return p.runpytest_subprocess("-p", "no:cacheprovider", *args)


def check_workflow(
    p: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    *,
    snapshot: str,
    change: tuple[str, str],
    failure_lines: list[str],
    snapshot_lines: tuple[str, ...] = (),
) -> str:
    """The five steps: the first run fails and says how to write the snapshot;
    ``--graphir-update`` writes it; the next run passes and leaves it byte-identical;
    setting the environment variable ``change`` fails with ``failure_lines`` (fnmatch)
    and leaves the file alone; ``--graphir-update`` rewrites it and the next run passes.

    Args:
        p: the pytester project, its test file already written.
        monkeypatch: to set ``change``.
        snapshot: the snapshot's path relative to the project.
        change: ``(name, value)`` of the environment variable that changes the model.
        failure_lines: patterns the failing run's output must contain, in order.
        snapshot_lines: lines the first snapshot must contain.

    Returns:
        The text of the first snapshot.
    """
    snap = p.path / snapshot

    first = run(p)
    first.assert_outcomes(failed=1)
    first.stdout.fnmatch_lines([f"*graphir: no snapshot at *{snap.name}*--graphir-update*"])
    assert not snap.exists()

    run(p, "--graphir-update").assert_outcomes(passed=1)
    text = snap.read_text()
    assert text.startswith(HEADER + "\n")
    for line in snapshot_lines:
        assert line in text, line

    run(p).assert_outcomes(passed=1)
    assert snap.read_text() == text

    monkeypatch.setenv(*change)
    changed = run(p)
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(failure_lines)
    assert snap.read_text() == text

    run(p, "--graphir-update").assert_outcomes(passed=1)
    assert snap.read_text() != text
    run(p).assert_outcomes(passed=1)
    return text
