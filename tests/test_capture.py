"""Tests of ``trace()``: node naming, edges, op filtering, tensor identity, cleanup,
model state, call meta and unusual outputs."""

from __future__ import annotations

import gc
import pathlib
import re
import sys
import threading
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import models
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import Boom, Raising
from torch import nn
from torch.overrides import TorchFunctionMode

from pytest_graphir import GraphIR, TensorMeta, trace
from pytest_graphir.capture import OtherThreadWarning

_REF = re.compile(r"^\$(?P<name>.+?)(?:\[(?P<index>\d+)\])?$")


def _refs(value: Any) -> Iterator[str]:
    """Every tensor reference (``$...``) in a rendered value, nested lists/dicts included."""
    if isinstance(value, str):
        if value.startswith("$") and not value.startswith("$$"):  # "$$" escapes a constant
            yield value
    elif isinstance(value, list):
        for v in value:
            yield from _refs(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _refs(v)


def _tensor_outputs(node: Any) -> int:
    return sum(1 for o in node.outputs if isinstance(o, TensorMeta))


def _check_refs(g: GraphIR, model: nn.Module) -> int:
    """Assert every reference in ``g`` resolves; return how many were checked.

    Node args/kwargs may reference a model input, a parameter or buffer, or an
    *earlier* node (with ``[i]`` exactly when that op node has several tensor outputs).
    Module node outputs and model outputs may reference any node or input.
    """
    params = {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}
    by_name = {n.name: n for n in g.nodes}
    position = {n.name: i for i, n in enumerate(g.nodes)}
    checked = 0

    def resolve(ref: str, before: int | None) -> None:
        nonlocal checked
        checked += 1
        if ref[1:] in g.inputs or ref[1:] in params:
            return
        m = _REF.match(ref)
        assert m, ref
        name, index = m.group("name"), m.group("index")
        assert name in by_name, f"dangling reference {ref}"
        if before is not None:
            assert position[name] < before, f"{ref} used before its node"
        node = by_name[name]
        if node.kind == "op":
            n_out = _tensor_outputs(node)
            if index is None:
                assert n_out == 1, f"{ref}: node has {n_out} tensor outputs, needs [i]"
            else:
                assert n_out > 1 and int(index) < n_out, ref

    for i, node in enumerate(g.nodes):
        for ref in [*_refs(node.args), *_refs(node.kwargs)]:
            resolve(ref, i)
        for out in node.outputs:
            if isinstance(out, dict):
                for ref in _refs(out):
                    resolve(ref, None)
    for out in g.outputs.values():
        for ref in _refs(out):
            resolve(ref, None)
    return checked


# -- naming ---------------------------------------------------------------------------


def test_module_and_op_node_names() -> None:
    """Modules by path; ops as ``scope/op#k``; root ops as ``op#k``; reuse as ``@1``."""
    torch.manual_seed(0)
    model, (ids,) = models.tiny_transformer(depth=2)
    g = trace(model, ids, scale=2.0)
    names = [n.name for n in g.nodes]
    expected = ["embed", "embed/embedding#0", "mul#0"]
    for block in ("blocks.0", "blocks.1"):
        expected += [
            block,
            f"{block}.norm",
            f"{block}.norm/layer_norm#0",
            f"{block}.proj",
            f"{block}.proj/linear#0",
            f"{block}/gelu#0",
            f"{block}/add#0",
        ]
    expected += [
        "shared",
        "shared.norm",
        "shared.norm/layer_norm#0",
        "shared.proj",
        "shared.proj/linear#0",
        "shared/gelu#0",
        "shared/add#0",
    ]
    expected += [
        "shared@1",
        "shared.norm@1",
        "shared.norm@1/layer_norm#0",
        "shared.proj@1",
        "shared.proj@1/linear#0",
        "shared@1/gelu#0",
        "shared@1/add#0",
    ]
    expected += ["head", "head/linear#0"]
    assert names == expected
    kinds = {n.name: (n.kind, n.target) for n in g.nodes}
    assert kinds["shared@1"] == ("module", "Block")
    assert kinds["blocks.1.norm"] == ("module", "LayerNorm")
    assert kinds["mul#0"] == ("op", "mul")
    # the second call of the shared block consumes the first call's output
    assert g.node("shared@1").args == ["$shared/add#0"]
    assert g.node("shared@1/add#0").args == ["$shared/add#0", "$shared@1/gelu#0"]


def test_op_counter_per_scope() -> None:
    """``#k`` counts one op within one scope call; other scopes start again at 0."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Tanh()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = x + 1
            b = self.inner(a) + a
            return torch.tanh(b) + b

    g = trace(M(), torch.randn(3))
    assert [n.name for n in g.nodes] == [
        "add#0",
        "inner",
        "inner/tanh#0",
        "add#1",
        "tanh#0",
        "add#2",
    ]


# -- edges ----------------------------------------------------------------------------


class _DictInput(nn.Module):
    """Nested inputs, a buffer, a factory op inside forward and a multi-output op."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("offset", torch.ones(4))

    def forward(self, batch: dict[str, Any], mask: torch.Tensor) -> dict[str, Any]:
        h = self.lin(batch["a"] + self.offset) * batch["pair"][1]
        pos = torch.arange(4).float()
        left, right = h.chunk(2, dim=-1)
        values, idx = torch.max(h + pos, dim=-1)
        y = torch.cat([left, right * mask[..., :2]], dim=-1)
        return {"y": y, "values": values, "idx": idx, "parts": [left, right]}


@pytest.mark.parametrize("which", ["tiny_transformer", "mlp", "dict_input"])
def test_every_reference_resolves(which: str) -> None:
    """Every ``$ref`` names an input, a parameter/buffer or an earlier node (+ ``[i]``)."""
    torch.manual_seed(0)
    if which == "tiny_transformer":
        model, args = models.tiny_transformer()
        g = trace(model, *args, scale=0.5)
    elif which == "mlp":
        model, args = models.mlp()
        g = trace(model, *args)
    else:
        model = _DictInput()
        batch = {"a": torch.randn(2, 4), "pair": [torch.randn(1), torch.randn(2, 4)]}
        g = trace(model, batch, mask=torch.ones(2, 4))
        assert set(g.inputs) == {"batch.a", "batch.pair.0", "batch.pair.1", "mask"}
        assert g.node("chunk#0").outputs[0].shape == [2, 2]
        assert g.node("cat#0").args[0] == ["$chunk#0[0]", "$mul#1"]
        assert g.node("max#0").args == ["$add#1"]
        assert g.node("add#1").args == ["$mul#0", "$float#0"]
        assert g.outputs["idx"]["ref"] == "$max#0[1]"
        assert g.outputs["parts.1"]["ref"] == "$chunk#0[1]"
    assert _check_refs(g, model) > 5
    # nothing produced inside the forward is left as an unlabelled constant
    for node in g.nodes:
        assert "<tensor" not in repr(node.args) + repr(node.kwargs), node.name


def test_inputs_and_parameters_referenced_by_name() -> None:
    """The MLP's edges, written out from its structure."""
    torch.manual_seed(0)
    model, (x,) = models.mlp()
    g = trace(model, x)
    assert g.node("fc1").args == ["$x"]
    assert g.node("fc1/linear#0").args == ["$x", "$fc1.weight", "$fc1.bias"]
    assert g.node("act/relu#0").args[0] == "$fc1/linear#0"
    assert g.node("fc2/linear#0").args == ["$act/relu#0", "$fc2.weight", "$fc2.bias"]
    assert g.node("fc1").outputs[0]["ref"] == "$fc1/linear#0"
    assert g.outputs == {"output": {"ref": "$fc2/linear#0", "shape": [2, 4], "dtype": "float32"}}


class _Writes(nn.Module):
    """Takes ``state`` and ``mask`` as keyword arguments: writes into the first, passes
    the second through an op that returns it unchanged (``.type()`` of its own dtype,
    as XLNet's rel_attn does), then uses both."""

    def forward(self, x: torch.Tensor, *, state: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        state[0] = x.sum()
        mask = mask.type(x.dtype)
        return x * mask + state


class _Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _Writes()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        state = torch.zeros(3)
        mask = (x > 0).float()
        return self.inner(x, state=state, mask=[mask][0]) + self.inner(x, state=state, mask=mask)


def test_module_kwargs_name_the_tensors_as_they_were_when_the_call_began() -> None:
    """torch's global forward pre-hooks get no keyword arguments, so the forward hook
    renders them after the module ran. A kwarg tensor written in place inside the call,
    or returned unchanged by an op inside it, is still written as the reference it had
    when the call began; the second call sees the first call's write."""
    g = trace(_Outer(), torch.tensor([1.0, -2.0, 3.0]))
    assert g.node("inner").kwargs == {"state": "$zeros#0", "mask": "$float#0"}
    assert g.node("inner/setitem#0").args[0] == "$zeros#0"
    assert g.node("inner/mul#0").args == ["$x", "$inner/type#0"]
    # the second call: state as the first call's setitem left it, mask as the first
    # call's type() left it (the same tensor, relabelled there)
    assert g.node("inner@1").kwargs == {"state": "$inner/setitem#0", "mask": "$inner/type#0"}
    g.lint(set())


def test_identity_survives_dropped_temporaries() -> None:
    """A loop creating and dropping temporaries still gives the exact chain of edges."""

    class Loop(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = x
            for _ in range(40):
                h = h + torch.ones_like(h)
            return h

    g = trace(Loop(), torch.zeros(3, 5))
    nodes = [(n.name, n.args) for n in g.nodes]
    expected = []
    prev = "$x"
    for k in range(40):
        expected.append((f"ones_like#{k}", [prev]))
        expected.append((f"add#{k}", [prev, f"$ones_like#{k}"]))
        prev = f"$add#{k}"
    assert nodes == expected
    assert g.outputs["output"]["ref"] == "$add#39"
    assert g.node("add#39").outputs[0].stats["mean"] == 40.0


def test_unrecorded_tensor_never_takes_a_dead_tensors_label() -> None:
    """A tensor made outside the mode (possibly at a freed tensor's address) is a constant,
    never an edge from the dead tensor's node."""

    class Sneaky(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = x
            for _ in range(20):
                tmp = h * 2.0
                del tmp
                with torch._C.DisableTorchFunction():
                    c = torch.ones_like(h)  # not seen by the trace
                h = h + c
            return h

    g = trace(Sneaky(), torch.zeros(4))
    for k in range(20):
        args = g.node(f"add#{k}").args
        assert args[0] == ("$x" if k == 0 else f"$add#{k - 1}")
        assert not args[1].startswith("$"), args  # not "$mul#..." of a freed temporary
        assert args[1] == "<tensor float32[4]>"


def test_tracer_keeps_no_tensor_alive() -> None:
    """Intermediates and outputs of the forward are freed once trace() returns."""
    refs: list[weakref.ref[torch.Tensor]] = []

    class Keep(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = self.lin(x) * 3
            b = a.relu()
            refs.append(weakref.ref(a))
            refs.append(weakref.ref(b))
            out = b.sum(dim=0)
            refs.append(weakref.ref(out))
            return out

    g = trace(Keep(), torch.randn(2, 4))
    gc.collect()
    assert len(refs) == 3
    assert [r() is None for r in refs] == [True, True, True]
    assert g.ops() == ["linear", "mul", "relu", "sum"]


# -- what is (not) recorded -------------------------------------------------------------


def test_nested_calls_recorded_once() -> None:
    """``F.relu`` (which calls ``torch.relu``) and ``F.layer_norm`` give one node each."""

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.layer_norm(F.relu(x), (4,))

    g = trace(M(), torch.randn(2, 4))
    assert g.ops() == ["relu", "layer_norm"]


def test_metadata_queries_not_recorded_property_ops_kept() -> None:
    """shape/size/dim/dtype/device are dropped; ``x.T`` is ``t`` and ``x.mT`` is ``transpose``."""

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n = x.shape[0] + x.size(1) + x.size()[0] + x.dim()
            assert x.dtype == torch.float32 and x.device.type == "cpu"
            y = x.T
            z = y.mT
            return z * n

    g = trace(M(), torch.randn(2, 3))
    assert g.ops() == ["t", "transpose", "mul"]
    assert g.node("t#0").args == ["$x"]
    assert g.node("transpose#0").args == ["$t#0"]
    assert g.node("t#0").outputs[0].shape == [3, 2]
    assert g.node("mul#0").args == ["$transpose#0", 2 + 3 + 2 + 2]


# -- cleanup ----------------------------------------------------------------------------


def _global_hook_state() -> list[dict[Any, Any]]:
    import torch.nn.modules.module as mm

    return [
        dict(mm._global_forward_pre_hooks),
        dict(mm._global_forward_hooks),
        dict(mm._global_forward_hooks_always_called),
        dict(mm._global_forward_hooks_with_kwargs),
    ]


def _mode_depth() -> int:
    return int(torch._C._len_torch_function_stack())


def test_forward_exception_propagates_and_torch_is_restored() -> None:
    """The model's own exception object escapes; hooks and mode are gone afterwards."""
    before = _global_hook_state()
    depth = _mode_depth()
    raising = Raising()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a hook failing on the exception path warns
        with pytest.raises(Boom) as info:
            trace(raising, torch.randn(2, 3))
    assert len(raising.raised) == 1
    assert info.value is raising.raised[0]
    assert type(info.value) is Boom
    assert str(info.value) == "boom from inside forward"
    assert _global_hook_state() == before
    assert _mode_depth() == depth == 0
    # the next trace works and starts from a clean scope stack
    torch.manual_seed(0)
    model, (x,) = models.mlp()
    g = trace(model, x)
    assert [n.name for n in g.nodes] == [
        "fc1",
        "fc1/linear#0",
        "act",
        "act/relu#0",
        "fc2",
        "fc2/linear#0",
    ]


def test_successful_trace_restores_global_state() -> None:
    """After a normal trace the global hook dicts and the mode stack are as before."""
    before = _global_hook_state()
    model, inputs = models.tiny_transformer()
    trace(model, *inputs)
    assert _global_hook_state() == before
    assert _mode_depth() == 0


# -- model state ------------------------------------------------------------------------


class _Dropper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.bn = nn.BatchNorm1d(6)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.bn(self.lin(x))) + F.dropout(x, 0.3, training=self.training)


_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks_with_kwargs",
    "_state_dict_hooks",
    "_load_state_dict_pre_hooks",
)


@pytest.mark.parametrize("training", [True, False])
def test_model_state_unchanged(training: bool) -> None:
    """No parameter, buffer, mode flag or hook of the model changes.

    (Buffers such as BatchNorm running stats change exactly as in a plain forward.)
    """
    torch.manual_seed(0)
    model = _Dropper().train(training)
    x = torch.randn(5, 6)
    plain = _Dropper().train(training)
    plain.load_state_dict(model.state_dict())
    hooks_before = {
        name: {h: dict(getattr(m, h)) for h in _HOOK_DICTS if hasattr(m, h)}
        for name, m in model.named_modules()
    }
    flags_before = {name: m.training for name, m in model.named_modules()}
    torch.manual_seed(1)
    trace(model, x)
    torch.manual_seed(1)
    plain(x)
    sd, ref = model.state_dict(), plain.state_dict()
    assert list(sd) == list(ref)
    for key in sd:
        assert torch.equal(sd[key], ref[key]), key
    assert {name: m.training for name, m in model.named_modules()} == flags_before
    hooks_after = {
        name: {h: dict(getattr(m, h)) for h in _HOOK_DICTS if hasattr(m, h)}
        for name, m in model.named_modules()
    }
    assert hooks_after == hooks_before
    assert all(p.requires_grad for p in model.parameters())


def test_rng_state_same_as_plain_forward() -> None:
    """Tracing a model with dropout in train mode consumes the RNG like a plain forward."""
    model = _Dropper().train()
    x = torch.randn(5, 6)
    torch.manual_seed(123)
    trace(model, x)
    after_trace = torch.get_rng_state()
    torch.manual_seed(123)
    model(x)
    after_plain = torch.get_rng_state()
    assert torch.equal(after_trace, after_plain)
    torch.manual_seed(123)
    start = torch.get_rng_state()
    assert not torch.equal(start, after_plain)  # setup check: dropout did draw numbers


def test_traced_dropout_output_matches_plain_forward() -> None:
    """Same seed: the traced train-mode forward draws the same dropout mask (same stats)."""
    model = _Dropper().train()
    x = torch.randn(5, 6)
    torch.manual_seed(7)
    g = trace(model, x)
    torch.manual_seed(7)
    y = model(x)
    ref = y.detach().double()
    assert g.node("add#0").outputs[0].stats["mean"] == pytest.approx(ref.mean().item(), rel=1e-5)


# -- meta -------------------------------------------------------------------------------


def test_meta_names_args_and_kwargs() -> None:
    """meta records argument names, keyword names, train mode and grad mode."""
    torch.manual_seed(0)
    model, (ids,) = models.tiny_transformer()
    g = trace(model, ids, scale=2.0)
    assert g.meta["model"] == "TinyTransformer"
    assert g.meta["args"] == ["ids"]
    assert g.meta["kwargs"] == ["scale"]
    assert g.meta["training"] is False
    assert g.meta["grad_enabled"] is True
    assert g.meta["stats"] is True
    assert list(g.inputs) == ["ids", "scale"]
    assert g.inputs["scale"] == 2.0
    assert g.node("mul#0").args == ["$embed/embedding#0", 2.0]
    with torch.no_grad():
        g2 = trace(model.train(), ids)
    assert g2.meta["training"] is True
    assert g2.meta["grad_enabled"] is False
    assert g2.meta["kwargs"] == []


def test_model_kwargs_escape_hatch() -> None:
    """A model keyword named like trace()'s own options goes through ``model_kwargs``."""

    class Clash(nn.Module):
        def forward(self, x: torch.Tensor, stats: float = 1.0) -> torch.Tensor:
            return x * stats

    g = trace(Clash(), torch.ones(3), model_kwargs={"stats": 3.0})
    assert g.meta["stats"] is True  # trace's own option untouched
    assert g.meta["kwargs"] == ["stats"]
    assert g.inputs["stats"] == 3.0
    assert g.node("mul#0").args == ["$x", 3.0]
    assert g.node("mul#0").outputs[0].stats["mean"] == 3.0


def test_positional_arguments_named_after_forward() -> None:
    """``*args`` of forward are named ``args.0``, ``args.1`` ..."""

    class Var(nn.Module):
        def forward(self, first: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
            return first + rest[1]

    g = trace(Var(), torch.ones(2), torch.zeros(2), torch.ones(2))
    assert list(g.inputs) == ["first", "rest.0", "rest.1"]
    assert g.node("add#0").args == ["$first", "$rest.1"]


# -- unusual outputs --------------------------------------------------------------------


class _ModelOutput(dict):  # type: ignore[type-arg]
    """Stands in for transformers' ModelOutput (an ordered dict subclass)."""


class _Outputs(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def forward(self, x: torch.Tensor) -> Any:
        y = x * 2
        if self.kind == "none":
            return None
        if self.kind == "scalar":
            return 3.5
        if self.kind == "tuple":
            return (y, None, 7, "text")
        if self.kind == "dict":
            return {"a": {"b": y}, "n": 1}
        return _ModelOutput(logits=y, loss=None, hidden=(y, x))


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("none", {"output": None}),
        ("scalar", {"output": 3.5}),
        ("tuple", {"0": "$mul#0", "1": None, "2": 7, "3": "text"}),
        ("dict", {"a.b": "$mul#0", "n": 1}),
        ("model_output", {"logits": "$mul#0", "hidden.0": "$mul#0", "hidden.1": "$x"}),
    ],
)
def test_non_tensor_outputs(kind: str, expected: dict[str, Any]) -> None:
    """Outputs of any nesting are flattened to paths; None fields of mappings skipped."""
    g = trace(_Outputs(kind), torch.ones(2))
    got = {k: (v["ref"] if isinstance(v, dict) else v) for k, v in g.outputs.items()}
    assert got == expected


def test_empty_int_and_bool_tensors() -> None:
    """Empty tensors have no stats; int: min/max/sum; bool: true count."""

    class M(nn.Module):
        def forward(self, ids: torch.Tensor, x: torch.Tensor) -> Any:
            empty = x[:0] * 2
            doubled = ids * 2
            positive = x > 0
            return empty, doubled, positive

    ids = torch.tensor([[3, -1, 4], [1, 5, 9]])
    x = torch.tensor([0.5, -1.0, 2.0, 0.0])
    g = trace(M(), ids, x)
    assert g.inputs["ids"].stats == {"min": -1, "max": 9, "sum": 21}
    empty = g.node("mul#0").outputs[0]
    assert empty.shape == [0] and empty.stats == {}
    assert g.node("mul#1").outputs[0].stats == {"min": -2, "max": 18, "sum": 42}
    assert g.node("mul#1").outputs[0].dtype == "int64"
    assert g.node("gt#0").outputs[0].stats == {"true": 2}
    assert g.node("gt#0").outputs[0].dtype == "bool"
    assert trace(M(), ids, torch.empty(0)).inputs["x"].stats == {}


def test_not_a_module_raises_type_error() -> None:
    """A plain function is refused with a message that says what to pass."""
    with pytest.raises(TypeError, match=r"nn\.Module.*function"):
        trace(lambda x: x * 2, torch.ones(2))  # type: ignore[arg-type]


@pytest.mark.parametrize("noop", ["contiguous", "float", "to"])
def test_noop_op_does_not_rename_parameter_or_input(noop: str) -> None:
    """An op that returns its argument object unchanged (``w.contiguous()`` on a contiguous
    ``w``) must not relabel it: later uses still read ``$w`` and ``$x``."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(3, 3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if noop == "to":
                self.w.to(torch.float32)
                x.to(torch.float32)
            else:
                getattr(self.w, noop)()
                getattr(x, noop)()
            return F.linear(x, self.w)

    g = trace(M(), torch.randn(2, 3))
    assert g.node("linear#0").args == ["$x", "$w"]


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


def test_lazy_modules() -> None:
    model = nn.Sequential(nn.LazyLinear(3))
    graph = trace(model, torch.ones(2, 5))
    assert graph.node("0/linear#0").outputs[0].shape == [2, 3]


def test_inference_mode_is_refused_with_a_clear_error() -> None:
    """inference_mode tensors have no version counter: trace() says so and names the
    fix, for the mode itself, an input made under it and a model built under it,
    and leaves torch as it was."""
    model, (x,) = models.mlp()
    with torch.inference_mode():
        with pytest.raises(RuntimeError, match=r"under torch.inference_mode\(\).*no_grad"):
            trace(model, x)
        x_inf = torch.randn(2, 8)
        built = nn.Linear(8, 3)
    with pytest.raises(RuntimeError, match=r"input 'x' was created under torch.inference_mode"):
        trace(model, x_inf)
    with pytest.raises(RuntimeError, match=r"parameter or buffer 'weight' was created under"):
        trace(built, x)
    assert trace(model, x).nodes  # and nothing was left installed


class _Threaded(nn.Module):
    """Runs part of its forward on a thread it starts."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: dict[str, torch.Tensor] = {}

        def work() -> None:
            out["h"] = torch.relu(x) * 2

        t = threading.Thread(target=work, name="graphir-worker")
        t.start()
        t.join()
        return out["h"] + 1


@pytest.mark.parametrize("interceptor", ["mode", "patch"])
def test_ops_on_another_thread_are_named_in_a_warning(interceptor: str) -> None:
    """Ops the forward runs on a thread it starts are not recorded (their result is a
    constant in the graph): the trace says so, naming the thread and the number of
    ops; a trace without threads warns nothing."""
    x = torch.randn(2, 8)
    with pytest.warns(OtherThreadWarning, match=r"2 op\(s\) on thread 'graphir-worker'") as w:
        g = trace(_Threaded(), x, interceptor=interceptor)  # type: ignore[arg-type]
    assert (w[0].filename, w[0].lineno) == (__file__, _line_of("g = trace(_Threaded()"))
    assert g.ops() == ["add"]
    assert g.node("add#0").args[0] == "<tensor float32[2, 8]>"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace(nn.Linear(8, 2), x, interceptor=interceptor)  # type: ignore[arg-type]
    out: list[torch.Tensor] = []
    t = threading.Thread(target=lambda: out.append(torch.relu(x)))
    t.start()  # after the trace: the thread counts nothing, and nothing is left behind
    t.join()
    assert threading.getprofile() is None


class _Pooled(nn.Module):
    """Hands part of its forward to a thread pool: ``pool``, made before the trace, or
    else one it makes on its first call and keeps (the worker outlives the trace)."""

    def __init__(self, pool: Any = None, mode: TorchFunctionMode | None = None) -> None:
        super().__init__()
        self.pool = pool
        self.mode = mode  # a mode the worker enters in the forward, and keeps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from concurrent.futures import ThreadPoolExecutor

        def work() -> torch.Tensor:
            if self.mode is not None:
                self.mode.__enter__()  # type: ignore[no-untyped-call]
            return torch.relu(x) * 2

        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="graphir-kept")
        return self.pool.submit(work).result() + 1  # type: ignore[no-any-return]


@pytest.mark.skipif(
    not hasattr(threading, "setprofile_all_threads"),
    reason="a thread started before the trace is seen from Python 3.12 on "
    "(threading.setprofile_all_threads); before, OtherThreadWarning's docs say it is not",
)
@pytest.mark.parametrize("interceptor", ["mode", "patch"])
def test_ops_on_a_pool_made_before_the_trace_are_named_in_a_warning(interceptor: str) -> None:
    """A pool whose worker threads run before the trace starts: the ops handed to it
    are named in the warning too, on every trace that uses it."""
    from concurrent.futures import ThreadPoolExecutor

    x = torch.randn(2, 8)
    with ThreadPoolExecutor(1, thread_name_prefix="graphir-pool") as pool:
        pool.submit(lambda: None).result()  # the worker exists before the trace
        for _ in range(2):
            with pytest.warns(OtherThreadWarning, match=r"2 op\(s\) on thread 'graphir-pool"):
                g = trace(_Pooled(pool), x, interceptor=interceptor)  # type: ignore[arg-type]
            assert g.ops() == ["add"]
    assert threading.getprofile() is None


def _after_an_op(x: torch.Tensor) -> tuple[int, Any]:
    """Run on a worker after the trace: one torch op, then the worker's mode stack
    depth and profile function."""
    torch.relu(x)
    return torch._C._len_torch_function_stack(), sys.getprofile()


def test_a_thread_that_outlives_the_trace_keeps_no_mode() -> None:
    """A pool the forward makes and keeps: its worker is counted during the forward,
    and after the trace its mode stack is empty again (the counter left at its next
    torch op at the latest) with no profile function left behind."""
    x = torch.randn(2, 8)
    model = _Pooled()
    with pytest.warns(OtherThreadWarning, match=r"2 op\(s\) on thread 'graphir-kept"):
        trace(model, x)
    try:
        assert model.pool.submit(_after_an_op, x).result() == (0, None)
        assert model.pool.submit(_after_an_op, x).result() == (0, None)
    finally:
        model.pool.shutdown()
    assert threading.getprofile() is None


class _OwnMode(TorchFunctionMode):
    """A mode a worker thread pushes for itself and keeps (it passes every call on)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


def test_a_thread_in_a_mode_of_its_own_keeps_the_inert_counter_and_no_profile() -> None:
    """A worker that pushes a mode of its own above the counter: the counter cannot
    leave from under it; it stays, inert (the worker's later ops count nowhere), and
    the worker gets no profile function that would check again at every call."""
    x = torch.randn(2, 8)
    own = _OwnMode()
    model = _Pooled(mode=own)
    with pytest.warns(OtherThreadWarning):
        trace(model, x)
    try:
        assert model.pool.submit(_after_an_op, x).result() == (2, None)
        assert model.pool.submit(_after_an_op, x).result() == (2, None)
        model.pool.submit(own.__exit__, None, None, None).result()
        # with its own mode gone, the counter counts in the next trace, then leaves
        with pytest.warns(OtherThreadWarning, match=r"2 op\(s\) on thread 'graphir-kept"):
            trace(_Pooled(model.pool), x)
        assert model.pool.submit(_after_an_op, x).result() == (0, None)
    finally:
        model.pool.shutdown()


def test_a_trace_under_cprofile_keeps_the_profiler() -> None:
    """``python -m cProfile`` (a C profile function, which before Python 3.12
    ``sys.setprofile`` cannot take back): the trace runs, and the profiler is still
    the thread's profile function afterwards, having seen the forward."""
    import cProfile
    import pstats

    x = torch.randn(2, 8)
    profiler = cProfile.Profile()
    before = sys.getprofile()
    with profiler:
        during = sys.getprofile()
        g = trace(nn.Linear(8, 2), x)
        assert sys.getprofile() is during
    assert sys.getprofile() is before
    assert g.ops() == ["linear"]
    seen = {name for _, _, name in pstats.Stats(profiler).stats}  # type: ignore[attr-defined]
    assert "forward" in seen


@pytest.mark.parametrize("bad", ["a/linear#0", "blk#1", "head@1"])
def test_a_module_path_with_a_name_separator_is_refused(bad: str) -> None:
    """A module registered under a name holding '/', '#' or '@' would collide with
    the node names of its neighbours (``a/linear#0`` is ``a``'s first linear op):
    trace refuses it, naming the path and the fix."""
    model = nn.Module()
    model.add_module("a", nn.Linear(2, 2))
    model.add_module(bad, nn.Linear(2, 2))
    model.forward = lambda x: model.a(x) + getattr(model, bad)(x)  # type: ignore[method-assign]
    with pytest.raises(ValueError, match=rf"module path {bad!r} contains .*add_module"):
        trace(model, torch.ones(1, 2))


def _line_of(text: str) -> int:
    """The line number in this file of the first line that holds ``text``."""
    lines = pathlib.Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)
