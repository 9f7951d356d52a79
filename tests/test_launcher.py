"""``torchrun -m pytest``: every rank runs the session, compares, and the ranks agree
through the launcher's store before rank 0 writes a shared snapshot
(:mod:`pytest_graphir.extension.launcher`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pytest_graphir.extension import launcher

ROOT = Path(__file__).parent.parent

TEST_SHARED = """
import os
import torch
from pytest_graphir import trace

def test_mlp(graphir_snapshot):
    rank = int(os.environ["LOCAL_RANK"]) * int(os.environ.get("SPLIT", "0"))
    model = torch.nn.Sequential(torch.nn.Linear(4, 4 + rank), torch.nn.ReLU())
    assert trace(model, torch.ones(2, 4)) == graphir_snapshot
"""

TEST_PER_RANK = """
import os
import torch
from pytest_graphir import trace

def test_mlp(graphir_snapshot):
    rank = int(os.environ["LOCAL_RANK"])
    model = torch.nn.Linear(4, 4 + rank)
    assert trace(model, torch.ones(2, 4)) == graphir_snapshot.rank(rank)
"""


def torchrun(p: pytest.Pytester, *args: str) -> tuple[int, list[str]]:
    """Run ``torchrun --standalone --nproc-per-node 2 -m pytest`` in the project;
    return torchrun's exit status and each rank's output (rank 0's, rank 1's)."""
    logs = p.path / "logs"
    result = p.run(
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "--log-dir", str(logs), "--redirects", "3", "--tee", "0",
        "-m", "pytest", "-p", "no:cacheprovider", "-q", *args,
        timeout=60,
    )  # fmt: skip
    outputs = []
    for rank in range(2):
        found = sorted(logs.glob(f"*/attempt_0/{rank}/stdout.log"))
        outputs.append(found[-1].read_text() if found else "")
    for path in logs.rglob("*.log"):  # the next run's logs are its own
        path.unlink()
    return result.ret, outputs


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester project whose subprocesses load the plugin from this checkout."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.delenv("SPLIT", raising=False)
    return pytester


def snapshots(p: pytest.Pytester) -> list[str]:
    return sorted(f.name for f in p.path.rglob("*.graphir"))


@pytest.mark.distributed
def test_ranks_that_agree_write_one_snapshot_and_rank_1_reports_what_it_did(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(test_m=TEST_SHARED)
    stale = project.path / "__snapshots__/test_m/test_gone.graphir"
    stale.parent.mkdir(parents=True)
    stale.write_text("stale")
    status, (rank0, rank1) = torchrun(project, "--graphir-update")
    assert status == 0, rank0 + rank1
    assert snapshots(project) == ["test_mlp.graphir"]  # rank 0 deleted the stale one
    assert "1 passed" in rank0 and "1 passed" in rank1
    assert "generated" in rank0
    for word in ("generated", "updated", "unused"):
        assert word not in rank1, rank1
    assert "graphir: rank 1 compared 1 snapshot against rank 0's files" in rank1


@pytest.mark.distributed
def test_ranks_that_trace_differently_write_nothing_and_both_fail(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyfile(test_m=TEST_SHARED)
    monkeypatch.setenv("SPLIT", "1")
    status, outputs = torchrun(project, "--graphir-update")
    assert status != 0
    assert snapshots(project) == []
    for output in outputs:
        assert "1 failed" in output
        assert "the trace of rank 1 differs from rank 0's, so no rank wrote it" in output
        assert "first differing line" in output
        assert "graphir_snapshot.rank(rank)" in output


@pytest.mark.distributed
def test_each_rank_writes_its_own_snapshot_and_rank_0_keeps_the_others(
    project: pytest.Pytester,
) -> None:
    project.makepyfile(test_m=TEST_PER_RANK)
    for _ in range(2):  # the second update keeps rank 1's file
        status, (rank0, rank1) = torchrun(project, "--graphir-update")
        assert status == 0, rank0 + rank1
        assert snapshots(project) == ["test_mlp[rank0].graphir", "test_mlp[rank1].graphir"]
        assert "unused" not in rank0 + rank1
    files = project.path / "__snapshots__/test_m"
    assert '"shape": [2, 5]' in (files / "test_mlp[rank1].graphir").read_text()
    assert '"shape": [2, 5]' not in (files / "test_mlp[rank0].graphir").read_text()


@pytest.mark.distributed
def test_a_snapshot_only_rank_1_disagrees_with_fails_rank_1_with_advice_that_works(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyfile(test_m=TEST_SHARED)
    assert torchrun(project, "--graphir-update")[0] == 0
    monkeypatch.setenv("SPLIT", "1")
    status, (rank0, rank1) = torchrun(project)
    assert status == 1
    assert "1 passed" in rank0
    assert "1 failed" in rank1
    assert "graphir: rank 1 compared 1 snapshot" in rank1
    assert f"to accept: {launcher.ACCEPT}" in rank1
    assert "pytest --graphir-update" not in rank1


def test_who_writes_under_a_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank r writes its own ``[rank<r>]`` file, rank 0 the rest; without a launcher
    (``WORLD_SIZE`` unset or 1) every file is written here."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert launcher.launched()
    assert [launcher.writes(f"t[rank{r}].graphir") for r in range(3)] == [False, True, False]
    assert not launcher.writes("t.graphir") and not launcher.discovers("t.graphir")
    monkeypatch.setenv("RANK", "0")
    assert [launcher.writes(f"t[rank{r}].graphir") for r in range(3)] == [True, False, True]
    assert launcher.discovers("t.graphir") and not launcher.discovers("t[rank1].graphir")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not launcher.launched() and launcher.writes("t[rank1].graphir")
