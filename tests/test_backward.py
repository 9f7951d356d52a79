"""trace(..., backward=...): gradients per module and parameter, autograd graph,
frozen and unused parameters, .grad untouched, forward section unchanged."""

from __future__ import annotations

from typing import Any

import models
import pytest
import torch
from helpers import snapshot_doc
from torch import nn
from torch.utils.checkpoint import checkpoint

from pytest_graphir import trace
from pytest_graphir.capture.backward import FROZEN, UNUSED
from pytest_graphir.serialize import dumps, loads


def _mlp() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model, (x,) = models.mlp()
    return model, x


def test_parameter_gradients_match_autograd() -> None:
    model, x = _mlp()
    graph = trace(model, x, backward=True)
    assert graph.meta["backward"] == "sum(output)"
    reference = torch.autograd.grad(model(x).sum(), list(model.parameters()))
    for (name, _), g in zip(model.named_parameters(), reference, strict=True):
        stats = graph.sections["grads"][name].stats
        g64 = g.double()
        assert stats["mean"] == pytest.approx(g64.mean().item(), rel=1e-5, abs=1e-9)
        assert stats["std"] == pytest.approx(g64.std(unbiased=False).item(), rel=1e-4)
        assert stats["min"] == pytest.approx(g64.min().item(), rel=1e-6)
        assert stats["max"] == pytest.approx(g64.max().item(), rel=1e-6)


def test_module_grad_output_and_input() -> None:
    model, x = _mlp()
    graph = trace(model, x, backward=True)
    fc2 = graph.sections["backward"]["fc2"]
    # loss = sum(output): d loss / d output is all ones
    assert fc2["grad_output"][0].shape == [2, 4]
    assert fc2["grad_output"][0].stats["mean"] == pytest.approx(1.0)
    assert fc2["grad_output"][0].stats["std"] == pytest.approx(0.0, abs=1e-7)
    # fc1's input x does not require grad: no grad_input
    assert graph.sections["backward"]["fc1"]["grad_input"] == [None]
    # module calls appear in backward order, the root (it returns a tensor) first
    assert list(graph.sections["backward"]) == ["<root>", "fc2", "act", "fc1"]


def test_grad_attributes_untouched() -> None:
    model, x = _mlp()
    weight = model.fc1.weight
    assert isinstance(weight, torch.Tensor)
    weight.grad = torch.full_like(weight, 7.0)
    trace(model, x, backward=True)
    assert torch.equal(weight.grad, torch.full_like(weight, 7.0))
    assert model.fc2.weight.grad is None
    x.requires_grad_(True)
    trace(model, x, backward=True)
    assert x.grad is None


def test_frozen_and_unused_parameters() -> None:
    class Partial(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.frozen = nn.Linear(4, 4)
            self.used = nn.Linear(4, 4)
            self.unused = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(self.frozen(x))

    torch.manual_seed(0)
    model = Partial()
    model.frozen.requires_grad_(False)
    graph = trace(model, torch.randn(3, 4), backward=True)
    grads = graph.sections["grads"]
    assert grads["frozen.weight"] == FROZEN and grads["frozen.bias"] == FROZEN
    assert grads["unused.weight"] == UNUSED and grads["unused.bias"] == UNUSED
    assert grads["used.weight"].shape == [4, 4]


def test_all_frozen_with_input_requiring_grad_still_runs_backward_hooks() -> None:
    model, x = _mlp()
    model.requires_grad_(False)
    x.requires_grad_(True)
    graph = trace(model, x, backward=True)
    assert set(graph.sections["grads"].values()) == {FROZEN}
    assert graph.sections["backward"]["fc1"]["grad_input"][0].shape == [2, 8]
    assert x.grad is None


def test_forward_section_unchanged_by_backward() -> None:
    torch.manual_seed(0)
    model, (ids,) = models.tiny_transformer()
    plain = loads(dumps(trace(model, ids)))
    with_backward = loads(
        dumps(trace(model, ids, hooks=True, backward=lambda out: out["logits"].mean()))
    )
    for section in ("inputs", "nodes", "outputs"):
        assert with_backward[section] == plain[section]
    assert with_backward["meta"]["backward"].endswith("<lambda>")


def test_custom_loss_and_bad_losses() -> None:
    model, x = _mlp()
    graph = trace(model, x, backward=lambda out: out[:, 0].mean())
    grad_out = graph.sections["backward"]["fc2"]["grad_output"][0].stats
    assert grad_out["max"] == pytest.approx(0.5) and grad_out["min"] == 0.0  # 1/2 on col 0
    with pytest.raises(ValueError, match="one-element tensor"):
        trace(model, x, backward=lambda out: out)
    with pytest.raises(RuntimeError, match="needs grad mode"), torch.no_grad():
        trace(model, x, backward=True)

    class IntOut(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.argmax(-1)

    with pytest.raises(ValueError, match="no floating-point output"):
        trace(IntOut(), x, backward=True)


def test_autograd_types_deterministic_and_free_of_hook_artifacts() -> None:
    model, x = _mlp()
    first = trace(model, x, backward=True).sections["autograd"]
    again = trace(model, x, backward=True).sections["autograd"]
    assert first == again
    assert "BackwardHookFunctionBackward" not in first
    # loss = sum(fc2(relu(fc1(x)))): every grad_fn of a plain forward appears
    loss = model(x).sum()
    seen, stack, expected = set(), [loss.grad_fn], set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        expected.add(type(fn).__name__)
        stack.extend(n for n, _ in fn.next_functions)
    assert set(first) == expected
    assert first[0] == "SumBackward0"


def test_reused_module_backward_labels() -> None:
    torch.manual_seed(0)
    model, (ids,) = models.tiny_transformer()
    graph = trace(model, ids, backward=lambda out: out["logits"].sum())
    keys = list(graph.sections["backward"])
    # backward visits the second call of the shared block before the first
    assert keys.index("shared@1") < keys.index("shared")
    assert keys.index("shared.proj@1") < keys.index("shared.proj")


def test_backward_sections_round_trip_and_compare() -> None:
    model, x = _mlp()
    text = dumps(trace(model, x, hooks=True, backward=True))
    doc = loads(text)
    assert [k for k in doc if k != "provenance"][-4:] == ["hooks", "backward", "grads", "autograd"]
    assert dumps(trace(model, x, hooks=True, backward=True)) == text

    from pytest_graphir.compare import compare

    with torch.no_grad():
        model.fc2.weight.mul_(1.5)
    result = compare(doc, loads(dumps(trace(model, x, hooks=True, backward=True))))
    drift = [str(c) for c in result.changes if c.kind == "drift"]
    # dL/dW1 goes through W2; dL/dW2 does not depend on W2
    assert any(d.startswith("drift: grads.fc1.weight") for d in drift)
    assert not any(d.startswith("drift: grads.fc2.weight") for d in drift)
    assert any(d.startswith("drift: backward.act grad_output[0]") for d in drift)


def _frozen_doc(freeze: bool) -> dict[str, Any]:
    model, x = _mlp()
    if freeze:
        model.fc1.requires_grad_(False)
    return snapshot_doc(model, x, backward=True)


def test_freezing_a_submodule_is_reported() -> None:
    from pytest_graphir.compare import compare

    result = compare(_frozen_doc(False), _frozen_doc(True))
    text = [str(c) for c in result.changes]
    assert any(
        t.startswith("changed: grads.fc1.weight") and t.endswith("-> frozen") for t in text
    ), text


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
    assert forward_pre == [
        e for e in trace(model, x, hooks=True).sections["hooks"] if e.endswith("forward_pre")
    ]
    assert "block.0" in graph.sections["backward"] and "block.0@1" not in graph.sections["backward"]


class _ReturnsItsBias(nn.Module):
    """Returns a parameter as an output, as GPT-NeoX-Japanese's attention returns its
    ``dense_bias`` for the caller to add."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4, bias=False)
        self.bias = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.fc(x), self.bias


class _AddsTheBias(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _ReturnsItsBias()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, b = self.inner(x)
        return (y + b).relu()


def test_a_module_output_that_is_a_parameter_has_no_output_gradient() -> None:
    """A leaf output's ``AccumulateGrad`` never runs under ``torch.autograd.grad`` (and
    asking torch whether it will raised RuntimeError mid-backward): the call's other
    output gradient and its input gradient are still reported, the leaf's is None,
    and the parameter's own gradient is in the ``grads`` section."""
    torch.manual_seed(0)
    model, x = _AddsTheBias(), torch.randn(3, 4, requires_grad=True)
    graph = trace(model, x, backward=True)
    inner = graph.sections["backward"]["inner"]
    first, second = inner["grad_output"]
    assert first.shape == [3, 4] and first.stats and second is None
    gx, gb = torch.autograd.grad(model(x).sum(), [x, model.inner.bias])
    assert inner["grad_input"][0].stats["mean"] == pytest.approx(gx.double().mean().item())
    grad = graph.sections["grads"]["inner.bias"].stats
    assert grad["mean"] == pytest.approx(gb.double().mean().item(), rel=1e-6)
    assert loads(dumps(graph))["backward"]["inner"]["grad_output"][1] is None


class _Core:
    """An autograd node as C++ holds it: what a transient Python wrapper points at."""

    def __init__(self, kind: str, children: list[_Core]) -> None:
        self.kind, self.children = kind, children


_WRAPPER_TYPES: dict[str, type] = {}


def _wrap(core: _Core) -> Any:
    """A fresh wrapper per read of ``next_functions``, freed with its last reference, as
    some torch releases hand out (the type is named for the node, as autograd's are)."""

    def next_functions(self: Any) -> tuple[tuple[Any, int], ...]:
        return tuple((_wrap(c), 0) for c in self.core.children)

    if core.kind not in _WRAPPER_TYPES:
        _WRAPPER_TYPES[core.kind] = type(
            core.kind, (), {"__slots__": ("core",), "next_functions": property(next_functions)}
        )
    wrapper = _WRAPPER_TYPES[core.kind]()
    wrapper.core = core
    return wrapper


def test_autograd_walk_counts_nodes_behind_transient_wrappers() -> None:
    """Wrappers freed during the walk must not hide other nodes by a reused ``id()``."""
    from pytest_graphir.capture.backward import autograd_types

    leaves = [_Core("AccumulateGrad", []) for _ in range(6)]
    layers = [
        _Core("AddmmBackward0", [leaves[2 * i], _Core("TBackward0", [leaves[2 * i + 1]])])
        for i in range(3)
    ]
    root = _Core("SumBackward0", layers)

    class _Loss:
        grad_fn = _wrap(root)

    for _ in range(5):
        found = autograd_types(_Loss())  # type: ignore[arg-type]
        assert found.count("AccumulateGrad") == 6
        assert found.count("AddmmBackward0") == 3


def test_one_accumulate_grad_per_parameter_on_every_trace() -> None:
    model, x = _mlp()
    n_params = len(list(model.parameters()))
    for _ in range(4):
        autograd = trace(model, x, backward=True).sections["autograd"]
        assert autograd.count("AccumulateGrad") == n_params
