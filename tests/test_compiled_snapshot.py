"""The ``compiled`` snapshot section: committed GPT-2 and BERT sections pass on rerun,
and a new graph break or a changed graph count fails naming the break and its place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import real_models
import torch
from compiled_versions import SNAPSHOT_TORCH, TORCH
from torch import nn

from pytest_graphir.compare import compare
from pytest_graphir.compiled import CompiledReport, compare_compiled
from pytest_graphir.serialize import dumps, loads

SNAPSHOTS = Path(__file__).parent / "__snapshots__" / Path(__file__).stem

GRAPH_DETAIL = ("per_graph", "library_compile_paths")
"""``compiled`` section entries that follow the graphs Dynamo builds: on a torch
release other than the snapshots', the ops of a graph may differ and a library may
take another path under compile (transformers' attention mask)."""


def _assert_matches(report: CompiledReport, graphir_snapshot: Any, name: str) -> None:
    """The committed snapshot on its own torch release, or wherever the graphs are the
    same; elsewhere the same eager graph, graph count, breaks, hooks and outputs, and
    only per-graph op details differ (then the snapshot assertion itself is skipped,
    naming both releases)."""
    assert report, "\n".join(report.lines())  # zero divergence from eager
    stored = loads((SNAPSHOTS / f"{name}.graphir").read_text())
    changes = compare(stored, loads(dumps(report.graphir))).changes
    if TORCH == SNAPSHOT_TORCH or not changes:
        assert report.graphir == graphir_snapshot
        return
    unexpected = [
        str(c)
        for c in changes
        if not (
            c.section == "compiled"
            and (c.node in GRAPH_DETAIL or (c.node, c.field) == ("ops", "compiled"))
        )
    ]
    assert unexpected == []
    pytest.skip(
        f"the snapshot was written with torch {stored['provenance']['torch']}, this is "
        f"{torch.__version__}: {len(changes)} per-graph op differences, nothing else"
    )


def test_gpt2_compiled_snapshot(graphir_snapshot: Any) -> None:
    model, ids = real_models.gpt2()
    _assert_matches(compare_compiled(model, ids), graphir_snapshot, "test_gpt2_compiled_snapshot")


def test_bert_compiled_snapshot(graphir_snapshot: Any) -> None:
    model, ids = real_models.bert()
    _assert_matches(compare_compiled(model, ids), graphir_snapshot, "test_bert_compiled_snapshot")


class Gate(nn.Module):
    def __init__(self, dynamic: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.dynamic = dynamic

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        if self.dynamic:
            if h.sum() > 0:  # data-dependent branching: a graph break
                h = h * 2
        else:
            h = torch.where(h.sum() > 0, h * 2, h)
        return torch.relu(h)


class Net(nn.Module):
    def __init__(self, dynamic: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.gate = Gate(dynamic)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.gate(self.fc(x)))


def _section(dynamic: bool) -> dict[str, Any]:
    torch.manual_seed(0)
    model = Net(dynamic).eval()
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    return loads(dumps(compare_compiled(model, x, allow_graph_breaks=True).graphir))


def test_new_graph_break_names_reason_and_place() -> None:
    clean, broken = _section(False), _section(True)
    assert clean["compiled"]["graphs"] == 1 and clean["compiled"]["graph_breaks"] == []
    result = compare(clean, broken)
    text = [str(c) for c in result.changes]
    added = [t for t in text if t.startswith("added: graph break")]
    assert len(added) == 1
    assert added[0].startswith("added: graph break in gate (Gate.forward: if h.sum() > 0:")
    assert "data-dependent" in added[0].lower()
    n = broken["compiled"]["graphs"]
    assert n > 1 and f"changed: compiled.graphs 1 -> {n}" in text
    # and the other way round: the break went away
    back = [str(c) for c in compare(broken, clean).changes]
    assert any(t.startswith("removed: graph break in gate") for t in back)


def test_compiled_section_is_machine_independent() -> None:
    text = dumps(
        loads(
            dumps(
                compare_compiled(
                    Net(True).eval(), torch.randn(2, 8), allow_graph_breaks=True
                ).graphir
            )
        )
    )
    section = text[text.index("compiled:") :]
    assert "/" not in section.replace("Gate.forward", "")  # no file paths
    assert "0x" not in section and ".py" not in section


def test_compiled_snapshot_records_where_it_was_written() -> None:
    """The compiled check's graph carries the eager trace's provenance, so a failing
    compiled snapshot names a torch or library upgrade first, as a trace does."""
    report = compare_compiled(Net(False).eval(), torch.randn(2, 8))
    assert report.graphir.provenance is not None
    assert report.graphir.provenance["torch"] == str(torch.__version__)
    assert f"# provenance: {{torch: {torch.__version__}, " in dumps(report.graphir)
