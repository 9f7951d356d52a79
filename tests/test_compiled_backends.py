"""Backends: Inductor on CPU and CUDA, and AOT Autograd's ATen graphs against eager's."""

from __future__ import annotations

import compiled_models
import pytest
import torch
import torch._dynamo
from compiled_models import seeded
from torch import nn

from pytest_graphir.compiled import compare_aten, compare_compiled

pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # tests/conftest.py


class Block(nn.Module):
    def __init__(self, extra_under_compile: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.fc2 = nn.Linear(8, 4)
        self.extra = extra_under_compile

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.norm(self.fc1(x)))
        if self.extra and torch.compiler.is_compiling():
            h = h * 2.0
        return self.fc2(h).softmax(-1)


def test_aot_aten_graphs_match_the_eager_aten_trace_op_for_op() -> None:
    torch.manual_seed(0)
    result = compare_aten(Block(), seeded(2, 8))
    assert result, "\n".join(result.lines())
    assert result.eager["forward"] == [
        "t",
        "addmm",
        "native_layer_norm",
        "relu",
        "t",
        "addmm",
        "_softmax",
    ]
    assert "native_layer_norm_backward" in result.eager["backward"]
    assert result.compiled == result.eager


def test_aten_difference_is_named_with_its_phase() -> None:
    torch.manual_seed(0)
    result = compare_aten(Block(extra_under_compile=True), seeded(2, 8))
    assert not result
    assert [str(d) for d in result.diffs if d.phase == "forward"] == [
        "forward #4: eager - -> compiled mul"
    ]
    assert any(d.phase == "backward" for d in result.diffs)  # the mul's gradient


def test_aten_inference_graphs_without_grad() -> None:
    torch.manual_seed(0)
    with torch.no_grad():
        result = compare_aten(Block(), seeded(2, 8), backward=False)
    assert result, "\n".join(result.lines())
    assert list(result.compiled) == ["forward"]


def test_a_lazy_module_is_initialised_before_the_aten_logs() -> None:
    """A ``LazyLinear`` makes its parameters in its first forward (``empty``,
    ``uniform_``); that one-time initialisation is neither side's model."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU())
    result = compare_aten(model, seeded(2, 3))
    assert result, "\n".join(result.lines())
    assert result.eager["forward"] == ["t", "addmm", "relu"]
    assert isinstance(model[0].weight, nn.Parameter) and model[0].weight.shape == (4, 3)


@pytest.mark.slow
def test_inductor_on_cpu_matches_eager() -> None:
    """Inductor compiles C++ for the CPU: one tiny model (tens of seconds cold). Marked
    ``slow`` (deselect locally with ``-m "not slow"``); CI runs it, as ``.ci/run`` runs
    every test."""
    model, inputs = compiled_models.clean()
    report = compare_compiled(model, *inputs, backend="inductor")
    assert report, "\n".join(report.lines())
    assert "backend=inductor" in report.summary()
    assert report.to_data()["backend"] == "inductor"


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA device: Inductor's CUDA path (Triton kernels) cannot run on this machine",
)
def test_inductor_on_cuda_matches_eager() -> None:
    model, (x,) = compiled_models.clean()
    model, x = model.cuda(), x.cuda()
    report = compare_compiled(model, x, backend="inductor", rtol=1e-3, atol=1e-4)
    assert report, "\n".join(report.lines())
    assert "backend=inductor" in report.summary()
