"""Upgrading torch, end to end: snapshots written under this interpreter's torch, then
checked, diffed and accepted under another torch release (a second Python named by the
environment variable ``GRAPHIR_UPGRADE_PYTHON``; ``.ci/run`` points it at its newest-torch
leg). Without the variable, or with the same torch there, the test skips and says why.

The project holds two models: an MLP, whose graph does not depend on the torch release,
and an attention block that takes ``F.scaled_dot_product_attention`` from torch 2.14 on
and the written-out softmax before it, as libraries choose a code path by torch version
(transformers' ``is_torch_greater_or_equal``). The first passes across the upgrade; the
second fails with the versions named first, ``graphir diff`` shows the op that changed,
and ``--graphir-update`` under the new torch accepts it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

UPGRADE = os.environ.get("GRAPHIR_UPGRADE_PYTHON", "")
if UPGRADE:  # resolved now: pytester runs each inner pytest in a directory of its own
    UPGRADE = os.path.abspath(UPGRADE)

TESTS = """
import torch
from torch import nn
import torch.nn.functional as F

from pytest_graphir import trace


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        major, minor = (int(p) for p in torch.__version__.split(".")[:2])
        if (major, minor) >= (2, 14):
            return F.scaled_dot_product_attention(q, k, v)
        weights = torch.softmax(q @ k.transpose(-2, -1) / 8**0.5, dim=-1)
        return weights @ v


def test_mlp(graphir_snapshot):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    assert trace(model, torch.randn(2, 8)) == graphir_snapshot


def test_attention(graphir_snapshot):
    torch.manual_seed(0)
    model = Attention().eval()
    assert trace(model, torch.randn(1, 5, 8)) == graphir_snapshot
"""


def _torch_version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


@pytest.fixture(scope="module")
def versions() -> tuple[str, str]:
    """(this torch, the upgrade's torch); skips where there is no second torch."""
    if not UPGRADE:
        pytest.skip("GRAPHIR_UPGRADE_PYTHON names no second Python (.ci/run sets it)")
    if not Path(UPGRADE).exists():
        pytest.fail(f"GRAPHIR_UPGRADE_PYTHON={UPGRADE} does not exist")
    import torch

    old, new = torch.__version__, _torch_version(UPGRADE)
    if old == new:
        pytest.skip(f"GRAPHIR_UPGRADE_PYTHON runs the same torch {old}")
    if (_minor(old) >= (2, 14)) == (_minor(new) >= (2, 14)):
        pytest.skip(f"torch {old} and {new} take the same attention path in the test model")
    return old, new


def _run(pytester: pytest.Pytester, python: str, *args: str) -> pytest.RunResult:
    return pytester.run(python, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args)


def test_upgrade_passes_where_the_graph_is_the_same_and_names_what_changed(
    pytester: pytest.Pytester, versions: tuple[str, str]
) -> None:
    import sys

    old, new = versions
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_models=TESTS)
    snapshots = pytester.path / "__snapshots__" / "test_models"

    written = _run(pytester, sys.executable, "--graphir-update")
    assert written.ret == 0, written.stdout.str()
    attention = snapshots / "test_attention.graphir"
    assert f"torch: {old}" in attention.read_text()

    checked = _run(pytester, UPGRADE, "--graphir-received=beside", "-vv")
    checked.assert_outcomes(passed=1, failed=1)
    out = checked.stdout.str()
    assert "test_models.py::test_mlp PASSED" in out
    assert "test_models.py::test_attention FAILED" in out
    # the environment first: the line after the assertion names both torch versions
    lines = [line for line in out.splitlines() if line.startswith("E ")]
    graphir = [i for i, line in enumerate(lines) if "graphir:" in line]
    assert graphir, out
    first = lines[graphir[0]]
    assert f"torch {old}" in first and f"torch {new}" in first, first

    received = snapshots / "test_attention.graphir.received"
    assert received.exists()
    diff = subprocess.run(
        [UPGRADE, "-m", "pytest_graphir.cli", "diff", str(attention), str(received)],
        capture_output=True,
        text=True,
    )
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert "scaled_dot_product_attention" in diff.stdout
    assert "softmax" in diff.stdout  # the written-out path it replaced

    accepted = _run(pytester, UPGRADE, "--graphir-update")
    assert accepted.ret == 0, accepted.stdout.str()
    assert f"torch: {new}" in attention.read_text()
    again = _run(pytester, UPGRADE)
    again.assert_outcomes(passed=2)
    assert not received.exists()
