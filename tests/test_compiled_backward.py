"""``compare_compiled(..., backward=True)``: backward hooks and gradients under compile."""

from __future__ import annotations

from typing import Any

import compiled_models
import pytest
import torch
import torch._dynamo
from compiled_models import seeded
from models import MLP
from torch import nn

from pytest_graphir.capture.hooks import HookEvent
from pytest_graphir.compiled import compare_compiled
from pytest_graphir.compiled.check import compare_hooks

pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # tests/conftest.py


def on_grad(module: nn.Module, grad_in: Any, grad_out: Any) -> None:
    return None


def before_grad(module: nn.Module, grad_out: Any) -> None:
    return None


def _hooked() -> MLP:
    torch.manual_seed(0)
    model = MLP()
    for name in ("fc1", "fc2"):
        module = model.get_submodule(name)
        module.register_full_backward_pre_hook(before_grad)
        module.register_full_backward_hook(on_grad)
    return model


def test_backward_hooks_fire_alike_and_their_break_is_named() -> None:
    report = compare_compiled(
        _hooked(), seeded(2, 8, requires_grad=True), backward=True, allow_graph_breaks=True
    )
    eager = [str(e) for e in report.hook_events["eager_backward"]]
    assert eager == [
        "fc2 backward_pre_hook before_grad",
        "fc2 backward_hook on_grad",
        "fc1 backward_pre_hook before_grad",
        "fc1 backward_hook on_grad",
    ]
    assert [str(e) for e in report.hook_events["compiled_backward"]] == eager
    assert not report.hook_problems
    assert not report.numerics  # every parameter's gradient within tolerance
    (brk,) = report.breaks
    assert brk.hook == "a backward hook on fc1, fc2"
    assert "Module-level backwards hooks require compiled autograd" in brk.reason
    text = "\n".join(report.lines(0))
    assert "caused by a backward hook on fc1, fc2" in text
    assert "(MLP.forward: return self.fc2(self.act(self.fc1(x))), fixtures/models.py:" in text
    assert report.to_data()["backward_hooks"] == eager


def test_backward_hook_break_fails_unless_allowed() -> None:
    assert not compare_compiled(_hooked(), seeded(2, 8, requires_grad=True), backward=True)


def test_gradients_beyond_tolerance_are_named_per_parameter() -> None:
    torch.manual_seed(0)
    report = compare_compiled(
        MLP(),
        seeded(2, 8, requires_grad=True),
        backward=True,
        backend=compiled_models.perturbing_backend,
    )
    grads = sorted(n.path for n in report.numerics if n.path.endswith(".grad"))
    # the loss is scaled by 1.01, so is every gradient
    assert grads == ["fc1.bias.grad", "fc1.weight.grad", "fc2.bias.grad", "fc2.weight.grad"]


def test_backward_without_grad_is_a_clear_error() -> None:
    torch.manual_seed(0)
    model = MLP().requires_grad_(False)
    with pytest.raises(ValueError, match="loss_fn"):
        compare_compiled(model, torch.randn(2, 8), backward=True)


def test_backward_hook_changes_are_worded_as_moved_vanished_appeared() -> None:
    a = HookEvent("fc1", "backward", "on_grad")
    b = HookEvent("fc2", "backward", "on_grad")
    c = HookEvent("fc2", "backward_pre", "before_grad")

    def words(eager: list[HookEvent], compiled: list[HookEvent]) -> list[str]:
        return [str(p) for p in compare_hooks(eager, compiled, [], 1, "backward")]

    tail = "under compile (backward of the first call)"
    (moved,) = words([a, b], [b, a])
    assert moved in (
        f"fc1 backward_hook on_grad moved {tail}",
        f"fc2 backward_hook on_grad moved {tail}",
    )
    assert words([a, b, c], [a, b]) == [f"fc2 backward_pre_hook before_grad vanished {tail}"]
    assert words([a], [a, b]) == [f"fc2 backward_hook on_grad appeared {tail}"]


def test_compiled_autograd_hook_bookkeeping_is_not_divergence() -> None:
    """With compiled autograd, Dynamo traces module backward hooks into the graph as
    ``BackwardHook.setup_input_hook`` / ``setup_output_hook`` calls: no break, and
    those calls are not ops."""
    with torch._dynamo.config.patch(compiled_autograd=True):
        report = compare_compiled(_hooked(), seeded(2, 8, requires_grad=True), backward=True)
    assert report, "\n".join(report.lines())
    assert report.graph_break_count == 0 and not report.breaks
    raw = [r for g in report.graphs for r in g.raw_ops]
    assert "call_method:setup_input_hook" in raw  # in the graph, not among the ops
    assert not any("setup_" in op.target for g in report.graphs for op in g.ops)
    assert report.hook_events["compiled_backward"] == report.hook_events["eager_backward"]


def test_a_missing_gradient_names_the_side_that_lacks_it() -> None:
    from pytest_graphir.compare import Tolerance
    from pytest_graphir.compiled.check import compare_grads

    g = torch.ones(3)
    details = {
        d.path: d.detail
        for d in compare_grads({"a": g, "b": None}, {"a": None, "b": g}, Tolerance())
    }
    assert details == {"a.grad": "no gradient under compile", "b.grad": "no gradient eagerly"}
