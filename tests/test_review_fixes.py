"""Regressions for defects found in review: each test failed before its fix."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from pytest_graphir import trace
from pytest_graphir.compare import compare, hook_order_changes
from pytest_graphir.serialize import SnapshotFormatError, dumps, loads


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = checkpoint(self.block, x, use_reentrant=False)
        return self.head(h)


def test_activation_checkpointing_does_not_add_forward_nodes() -> None:
    """The backward re-runs `block`: that must not show up in the forward graph."""
    torch.manual_seed(0)
    model = Checkpointed()
    x = torch.randn(3, 4, requires_grad=True)
    plain = trace(model, x)
    graph = trace(model, x, hooks=True, backward=True)
    assert [n.name for n in graph.nodes] == [n.name for n in plain.nodes]
    forward_pre = [e for e in graph.sections["hooks"] if e.endswith("forward_pre")]
    assert forward_pre == [e for e in trace(model, x, hooks=True).sections["hooks"]
                           if e.endswith("forward_pre")]
    assert "block.0" in graph.sections["backward"] and "block.0@1" not in graph.sections[
        "backward"]


def test_numpy_array_arguments() -> None:
    class FromNumpy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.as_tensor(np.arange(3, dtype=np.float32))

    graph = trace(FromNumpy(), torch.zeros(3))
    assert graph.node("as_tensor#0").args == ["<ndarray float32[3]>"]


def test_long_list_of_tensors_keeps_every_edge() -> None:
    class Stack(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.stack([x * i for i in range(70)])

    graph = trace(Stack(), torch.ones(2))
    (tensors,) = graph.node("stack#0").args
    assert tensors == [f"$mul#{i}" for i in range(70)]


def test_nan_constant_matches_itself() -> None:
    class Fill(nn.Module):
        def forward(self, x: torch.Tensor, fill: float) -> torch.Tensor:
            return x.nan_to_num(fill)

    doc = loads(dumps(trace(Fill(), torch.ones(2), float("nan"))))
    assert not compare(doc, loads(dumps(trace(Fill(), torch.ones(2), float("nan")))))


def test_graph_break_count_change_is_reported() -> None:
    def doc(count: int) -> dict[str, Any]:
        brk = {"reason": "Unsupported Tensor.item() call", "scope": "norm",
               "location": "MaxNorm.forward: s = x.max().item()", "count": count}
        return {"meta": {}, "inputs": {}, "nodes": {}, "outputs": {},
                "compiled": {"graphs": 2, "graph_breaks": [brk]}}

    changes = [str(c) for c in compare(doc(1), doc(3)).changes]
    assert changes == ["changed: graph break in norm (MaxNorm.forward: s = x.max().item()): "
                       "Unsupported Tensor.item() call {count: 1} -> {count: 3}"]


def test_hook_diff_with_repeated_events_reports_what_vanished() -> None:
    old = ["A", "E", "E", "E"]
    new = ["E", "A"]
    text = [str(c) for c in hook_order_changes(old, new)]
    assert text.count("removed: hooks: E (vanished)") == 2
    assert any("fired" in t for t in text)


def test_lazy_modules() -> None:
    model = nn.Sequential(nn.LazyLinear(3))
    graph = trace(model, torch.ones(2, 5))
    assert graph.node("0/linear#0").outputs[0].shape == [2, 3]


def test_non_string_node_key_is_a_format_error() -> None:
    text = ("# graphir-format: 1\nmeta: {}\ninputs: {}\nnodes:\n  1: {op: add, out: []}\n"
            "outputs: {}\n# end of graphir snapshot\n")
    with pytest.raises(SnapshotFormatError, match="should be a string"):
        loads(text)


def test_blackbox_interior_absent_from_hooks_and_backward() -> None:
    torch.manual_seed(0)
    model = Checkpointed()
    model.block[0].register_forward_hook(lambda m, a, o: None)
    graph = trace(model, torch.randn(3, 4), hooks=True, backward=True, blackbox=["block"])
    assert not [e for e in graph.sections["hooks"] if e.startswith("block.")]
    assert not [k for k in graph.sections["backward"] if k.startswith("block.")]
    assert "block forward_pre" in graph.sections["hooks"]
