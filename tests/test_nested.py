"""Nested tensors (``torch.nested``, both layouts) in a trace: shape and statistics of
the components, the same text whatever else the process built (``capture/nested.py``)."""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch
from torch import nn

from pytest_graphir import trace
from pytest_graphir.capture.nested import RAGGED, nested_shape, nested_values
from pytest_graphir.serialize import dumps

LAYOUTS = [pytest.param(torch.strided, id="strided"), pytest.param(torch.jagged, id="jagged")]


class _Double(nn.Module):
    def forward(self, nt: torch.Tensor) -> torch.Tensor:
        return (nt * 2.0).to_padded_tensor(0.0)


def _nested(parts: list[torch.Tensor], layout: Any) -> torch.Tensor:
    with warnings.catch_warnings():  # the strided layout's "prototype stage" warning
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor(parts, layout=layout)


def _parts() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(2, 3, generator=gen), torch.randn(4, 3, generator=gen) + 5.0]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_shape_and_statistics_are_the_components(layout: Any) -> None:
    """``[components, ragged, 3]``, and the statistics of all components' elements
    together, checked against torch on their concatenation; the padded output is an
    ordinary tensor."""
    parts = _parts()
    graph = trace(_Double(), _nested(parts, layout))
    flat = torch.cat([p.reshape(-1) for p in parts]).double()
    doubled = flat * 2.0
    mul = graph.node("mul#0").outputs[0]
    assert mul.shape == [2, RAGGED, 3]
    assert mul.stats["mean"] == pytest.approx(doubled.mean().item(), rel=1e-6)
    assert mul.stats["std"] == pytest.approx(doubled.std(correction=0).item(), rel=1e-6)
    assert mul.stats["min"] == pytest.approx(doubled.min().item(), rel=1e-6)
    assert mul.stats["max"] == pytest.approx(doubled.max().item(), rel=1e-6)
    assert graph.inputs["nt"].stats["mean"] == pytest.approx(flat.mean().item(), rel=1e-6)
    padded = graph.node("to_padded_tensor#0").outputs[0]
    assert padded.shape == [2, 4, 3]
    assert '"shape": [2, "ragged", 3]' in dumps(graph)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_text_does_not_depend_on_other_nested_tensors_of_the_process(layout: Any) -> None:
    """The jagged layout's ``t.shape`` holds a nested int numbered by a process-wide
    counter (``j1``, ``j2``...): building more nested tensors between two traces changes
    it, and must not change the snapshot text."""
    first = dumps(trace(_Double(), _nested(_parts(), layout)))
    for _ in range(3):
        _nested([torch.ones(1, 3), torch.ones(5, 3)], layout)
    again = dumps(trace(_Double(), _nested(_parts(), layout)))
    assert first == again


def test_components_of_one_shape_give_ints_and_an_empty_one_ragged() -> None:
    """A dimension is ``ragged`` only where the components differ."""
    same = _nested([torch.zeros(4, 3), torch.zeros(4, 3), torch.zeros(4, 3)], torch.strided)
    assert nested_shape(same) == [3, 4, 3]
    mixed = _nested([torch.zeros(4, 3), torch.zeros(4, 2)], torch.strided)
    assert nested_shape(mixed) == [2, 4, RAGGED]


def test_values_are_a_copy() -> None:
    """The statistics' elements do not follow a later write into the nested tensor."""
    nt = _nested([torch.ones(2), torch.ones(3)], torch.strided)
    values = nested_values(nt)
    assert values.tolist() == [1.0] * 5
    nt.mul_(3.0)
    assert values.tolist() == [1.0] * 5
    assert math.isclose(nested_values(nt).sum().item(), 15.0)
