"""The ranks of one process against one snapshot: ``assert irs ==
graphir_snapshot.ranks()`` writes and compares ``<test>.graphir`` when every rank's
text agrees, and fails naming the differing ranks, writing nothing, when not."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from workflow import run

from pytest_graphir import trace
from pytest_graphir.compare import Tolerance
from pytest_graphir.extension.launcher import RanksDisagree
from pytest_graphir.extension.syrupy_extension import (
    AllRanks,
    GraphIRExtension,
    GraphIRSettings,
)
from pytest_graphir.serialize import dumps

TEST_RANKS = """
import os
import torch
import torch.distributed as dist
from torch import nn
from pytest_graphir import trace
from pytest_graphir.parallel import run_ranks

def traced(rank, world):
    split = int(os.environ.get("SPLIT", "0"))
    model = nn.Sequential(nn.Linear(4, 4 + rank * split), nn.ReLU())
    x = torch.full((2, 4), float(rank + 1))
    dist.all_reduce(x)  # the same input on every rank
    return trace(model, x)

def test_ranks(graphir_snapshot):
    irs = run_ranks(traced)
    assert irs == graphir_snapshot.ranks()
"""
SHARED = Path("__snapshots__/test_ranks/test_ranks.graphir")


def _snapshots(p: pytest.Pytester) -> list[str]:
    return sorted(f.name for f in p.path.rglob("*.graphir"))


def test_ranks_that_agree_share_one_snapshot(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ranks=TEST_RANKS)
    run(pytester, "--graphir-update").assert_outcomes(passed=1)
    assert _snapshots(pytester) == ["test_ranks.graphir"]
    text = (pytester.path / SHARED).read_text()
    run(pytester).assert_outcomes(passed=1)
    assert (pytester.path / SHARED).read_text() == text
    (pytester.path / SHARED).write_text(text.replace('"ReLU"', '"GELU"'))
    changed = run(pytester)
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(["*changed: 1 module GELU -> ReLU*"])


def test_ranks_that_differ_fail_naming_rank_1_and_write_nothing(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_ranks=TEST_RANKS)
    monkeypatch.setenv("SPLIT", "1")
    result = run(pytester, "--graphir-update")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*graphir: cannot use snapshot *test_ranks.graphir: the trace of rank 1 differs "
            "from rank 0's, so the ranks cannot share one snapshot (nothing written)",
            "*first differing line *:",
            "*- rank 0: *",
            "*+ rank 1: *",
            "*fix: give each rank its own snapshot: *graphir_snapshot.rank(r)*",
        ]
    )
    assert _snapshots(pytester) == []


def _extension(**settings: object) -> GraphIRExtension:
    return GraphIRExtension(GraphIRSettings(**settings))  # type: ignore[arg-type]


def _traced(shift: float = 0.0, width: int = 4) -> str:
    torch.manual_seed(0)
    return dumps(trace(nn.Linear(4, width), torch.ones(2, 4) + shift))


def test_one_text_for_ranks_within_the_tolerance() -> None:
    near, far = _traced(1e-4), _traced(1.0)
    assert near != _traced()
    assert _extension().serialize(AllRanks([_traced(), near])) == _traced()
    with pytest.raises(RanksDisagree) as raised:
        _extension(tolerance=Tolerance(rtol=0.0, atol=0.0)).serialize(AllRanks([_traced(), near]))
    assert raised.value.differing == [1]
    with pytest.raises(RanksDisagree) as raised:
        _extension().serialize(AllRanks([_traced(), near, far, _traced(width=5)]))
    assert raised.value.differing == [2, 3]
    first, *detail, fix = raised.value.lines()
    assert "the trace of ranks 2, 3 differs from rank 0's" in first
    assert detail[0].startswith("  first differing line ") and detail[2].startswith("  + rank 2: ")
    assert "graphir_snapshot.rank(r)" in fix


@pytest.mark.parametrize("data", [[], "text", 3])
def test_ranks_wants_a_list_of_traces(data: object) -> None:
    with pytest.raises(TypeError, match=r"assert irs == graphir_snapshot\.ranks\(\)"):
        _extension().serialize(AllRanks(data))


def test_a_list_without_ranks_says_how_to_snapshot_ranks() -> None:
    with pytest.raises(TypeError, match=r"graphir_snapshot\.ranks\(\)"):
        _extension().serialize([_traced(), _traced()])
