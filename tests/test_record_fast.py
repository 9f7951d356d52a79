"""The C recorder (``pytest_graphir.capture._record``, ``tracer.FAST_RECORD``).

It records the common op (one plain ``torch.Tensor`` output) itself and hands every
other call to the Python method ``_Trace.record_op``, which stays the reference: here
each case is traced both ways and must give the same IR, node for node; the breadth
suite (``test_fast_recorder_gives_the_same_graph``) does the same on every architecture.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import compiled_models
import pytest
import torch
import torch_state
from torch import nn
from torch.overrides import TorchFunctionMode

from pytest_graphir import trace
from pytest_graphir.capture import stats, tracer
from pytest_graphir.capture.tracer import FAST_RECORD, _Trace
from pytest_graphir.ir import GraphIR
from pytest_graphir.serialize import dumps

pytestmark = pytest.mark.skipif(
    not FAST_RECORD, reason="the C extension pytest_graphir.capture._record is not built here"
)


@pytest.fixture
def python_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The canonical op names the Python method ``_Trace.record_op`` receives from the
    C recorder (not those of a trace with ``FAST_RECORD`` off)."""
    calls: list[str] = []
    original = _Trace.record_op

    def counted(self: _Trace, op: str, *rest: Any) -> None:
        if tracer.FAST_RECORD:
            calls.append(op)
        original(self, op, *rest)

    monkeypatch.setattr(_Trace, "record_op", counted)
    yield calls


def _both(model: nn.Module, *args: Any, **options: Any) -> tuple[GraphIR, GraphIR]:
    """The trace by the C recorder and by the Python method, same seed before each."""
    torch.manual_seed(0)
    fast = trace(model, *args, **options)
    tracer.FAST_RECORD = False
    try:
        torch.manual_seed(0)
        python = trace(model, *args, **options)
    finally:
        tracer.FAST_RECORD = True
    return fast, python


def _assert_same(fast: GraphIR, python: GraphIR) -> None:
    assert [n.name for n in fast.nodes] == [n.name for n in python.nodes]
    for a, b in zip(fast.nodes, python.nodes, strict=True):
        assert a == b, f"node {b.name}:\nC:      {a}\nPython: {b}"
    assert dumps(fast) == dumps(python)


_Mlp = compiled_models.MLP  # Linear(8, 16) -> ReLU -> Linear(16, 4)


def test_common_ops_never_reach_the_python_method(python_calls: list[str]) -> None:
    """linear, relu: recorded by the C code alone, with names, edges and statistics."""
    g = trace(_Mlp(), torch.randn(2, 8))
    assert python_calls == []
    assert [n.name for n in g.nodes if n.kind == "op"] == [
        "fc1/linear#0",
        "relu#0",
        "fc2/linear#0",
    ]
    relu = g.node("relu#0")
    assert relu.args == ["$fc1/linear#0"]
    out = relu.outputs[0]
    assert out.shape == [2, 16] and out.dtype == "float32"
    assert out.stats["min"] >= 0.0 and set(out.stats) >= {"mean", "std", "min", "max"}


class _Mixed(nn.Module):
    """Every kind of call the C code leaves to Python, between ordinary ops."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 6))
        self.drop = nn.Dropout(0.5)
        self.register_buffer("scale", torch.full((6,), 2.0))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> Any:
        h = x @ self.w.t()  # a parameter handed on: its statistics queued on first use
        a, b = torch.split(h, 3, dim=-1)  # two outputs
        h = torch.cat([a, b], dim=-1).view_as(h)
        h = h.view_as(h)  # x.view_as(x): not a model op
        h = self.drop(h)  # a random draw in training
        e = torch.empty(2, 6)  # uninitialised memory
        e.zero_()
        h = h + e
        h[:, 0] = 1.0  # setitem
        h.mul_(self.scale)  # in place: the same tensor returned, a new version
        h = h.contiguous()  # returned unchanged: keeps its producer's statistics
        h = h.reshape(12).reshape(2, 6)  # same elements: shared statistics
        h = h.float().to(torch.float64)  # a dtype change: statistics of its own
        y = torch.where(mask, h, torch.zeros_like(h))
        return y.sum(dim=-1, keepdim=True), torch.max(y, dim=0)


@pytest.mark.parametrize("training", [False, True])
def test_calls_left_to_python_give_the_same_graph(python_calls: list[str], training: bool) -> None:
    model = _Mixed().train(training)
    x, mask = torch.randn(2, 6), torch.rand(2, 6) > 0.5
    fast, python = _both(model, x, mask)
    _assert_same(fast, python)
    handed = set(python_calls)
    assert {"split", "view_as", "empty", "max"} <= handed  # several outputs, x.view_as(x)
    assert "linear" not in handed and "matmul" not in handed and "reshape" not in handed
    # dropout draws only in training: in eval mode the C code records it
    assert ("dropout" in handed) is training
    assert fast.node("drop/dropout#0").outputs[0].random is training


def test_same_graph_with_kwargs_constants_and_sequences() -> None:
    class Model(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.nn.functional.softmax(x, dim=-1)
            y = torch.stack([y, x, y], dim=0)
            y = y.permute(1, 0, 2).reshape((2, -1))
            y = torch.clamp(y, min=torch.tensor(-0.5), max=torch.tensor(0.5))
            return y.to(dtype=torch.bfloat16).sum(dtype=torch.float32)

    _assert_same(*_both(Model(), torch.randn(2, 5)))


def test_same_graph_for_blackbox_depth_and_structure_only() -> None:
    model = nn.Sequential(_Mlp(), nn.Sequential(nn.Linear(4, 4), nn.GELU()))
    x = torch.randn(3, 8)
    _assert_same(*_both(model, x, blackbox=["1"]))
    _assert_same(*_both(model, x, depth=1))
    _assert_same(*_both(model, x, stats=False))
    _assert_same(*_both(model, x, hooks=True, backward=True))


class _Quiet(TorchFunctionMode):
    """A user's mode: passes every call through, counting them."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.calls += 1
        return func(*args, **(kwargs or {}))


def test_a_user_mode_underneath_sends_every_op_to_python(python_calls: list[str]) -> None:
    """Under a user's TorchFunctionMode, each tensor query would reach that mode: the C
    code steps aside, and the graph is the one the Python method gives."""
    with _Quiet():
        g = trace(_Mlp(), torch.randn(2, 8))
    assert python_calls == ["linear", "relu", "linear"]
    with _Quiet():
        fast, python = _both(_Mlp(), torch.randn(2, 8))
    _assert_same(fast, python)
    assert g.node("relu#0").outputs[0].stats


def test_patch_interceptor_gets_the_python_method(python_calls: list[str]) -> None:
    trace(_Mlp(), torch.randn(2, 8), interceptor="patch")
    assert python_calls == ["linear", "relu", "linear"]


def test_an_error_inside_the_c_recorder_propagates_and_torch_is_restored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An exception raised from Python code the C recorder calls (here the statistics)
    reaches the caller unchanged, and no hook or mode is left behind."""

    class Broken(RuntimeError):
        pass

    def fail(self: Any, t: Any, meta: Any) -> None:
        raise Broken("statistics failed")

    before = torch_state.snapshot()
    monkeypatch.setattr(stats.StatsBatch, "add", fail)
    with pytest.raises(Broken, match="statistics failed"):
        trace(_Mlp(), torch.randn(2, 8))
    assert torch_state.differences(before) == []


def test_recorder_refuses_a_wrong_construction() -> None:
    from pytest_graphir.capture import _record

    with pytest.raises(TypeError, match="takes 31 arguments"):
        _record.Recorder(1, 2, 3)
    with pytest.raises(TypeError, match="positional arguments only"):
        _record.Recorder(fallback=None)  # type: ignore[call-arg]
    bad = [None] * 31
    with pytest.raises(TypeError, match="must be dicts"):
        _record.Recorder(*bad)


def test_nodes_built_in_c_are_the_dataclasses_a_python_call_makes() -> None:
    """The C recorder sets Node's and TensorMeta's slots directly (no ``__init__``):
    every field, defaults included, must equal what the dataclass constructor gives,
    and a distinct (not shared) container per node."""
    from pytest_graphir.ir import Node, TensorMeta

    fast, python = _both(_Mlp(), torch.randn(2, 8), stats=False)
    _assert_same(fast, python)
    ops = [n for n in fast.nodes if n.kind == "op"]
    modules = [n for n in fast.nodes if n.kind == "module"]
    assert ops and modules
    assert all(type(n) is Node and type(n.outputs[0]) is TensorMeta for n in ops)
    assert modules[0].raw == "" and modules[0].params is None and ops[0].params is None
    assert ops[0].outputs[0].random is False and ops[0].outputs[0].stats == {}
    assert ops[0].kwargs is not ops[1].kwargs
    assert ops[0].outputs[0].stats is not ops[1].outputs[0].stats


def _walk(names: dict[Any, str], entries: dict[int, Any], meta_type: Any) -> bool:
    """``_record.name_tensors`` of an ``nn.Linear(2, 2)`` into these containers."""
    from torch.nn.parameter import UninitializedTensorMixin  # type: ignore[attr-defined]

    from pytest_graphir.capture import _record
    from pytest_graphir.names import dtype_name

    return _record.name_tensors(
        nn.Linear(2, 2),
        names,
        entries,
        set(),
        set(),
        meta_type,
        dtype_name,
        UninitializedTensorMixin,
        lambda *a: None,
        nn.Module.named_modules,
        torch._C.DisableTorchFunction,
    )


def test_a_changed_ir_dataclass_is_refused_with_the_fix() -> None:
    """Were ir.TensorMeta to gain a field, an extension built before would leave it
    unset: it refuses the type instead, naming the rebuild."""
    import dataclasses

    from pytest_graphir.ir import TensorMeta

    @dataclasses.dataclass(slots=True)
    class Meta:  # TensorMeta plus one field
        shape: list[int]
        dtype: str
        stats: dict[str, Any] = dataclasses.field(default_factory=dict)
        random: bool = False
        extra: int = 0

    with pytest.raises(TypeError, match=r"rebuild the extension \(pip install -e \.\)"):
        _walk({}, {}, Meta)
    names: dict[Any, str] = {}
    entries: dict[int, Any] = {}
    assert _walk(names, entries, TensorMeta) is True
    assert sorted(names.values()) == [""] and len(entries) == 2  # weight, bias


def test_c_walk_refuses_containers_already_filled() -> None:
    """The walk uses ``names`` and ``entries`` as its memo of what it has seen: filled
    ones would hide modules and tensors, so they are refused."""
    from pytest_graphir.ir import TensorMeta

    with pytest.raises(ValueError, match="names and entries must be empty"):
        _walk({nn.Linear(1, 1): "x"}, {}, TensorMeta)
    with pytest.raises(ValueError, match="names and entries must be empty"):
        _walk({}, {1: None}, TensorMeta)


@pytest.fixture
def python_hooks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """``"pre Linear"`` / ``"post Linear"`` for each call of the Python module hooks
    ``ModuleScope._pre`` / ``_post`` (with ``FAST_RECORD`` on)."""
    from pytest_graphir.capture.scope import ModuleScope

    calls: list[str] = []
    pre, post = ModuleScope._pre, ModuleScope._post

    def counted_pre(self: ModuleScope, module: Any, args: Any) -> None:
        if tracer.FAST_RECORD:
            calls.append(f"pre {type(module).__name__}")
        pre(self, module, args)

    def counted_post(self: ModuleScope, module: Any, args: Any, *rest: Any) -> None:
        if tracer.FAST_RECORD:
            calls.append(f"post {type(module).__name__}")
        post(self, module, args, *rest)

    monkeypatch.setattr(ModuleScope, "_pre", counted_pre)
    monkeypatch.setattr(ModuleScope, "_post", counted_post)
    yield calls


def test_ordinary_modules_never_reach_the_python_hooks(python_hooks: list[str]) -> None:
    """Every module call but the root's is entered and left by the C hooks, and the
    module nodes have their arguments and outputs."""
    g = trace(nn.Sequential(_Mlp(), nn.Identity()), torch.randn(2, 8))
    assert python_hooks == ["pre Sequential", "post Sequential"]
    fc2 = g.node("0.fc2")
    assert fc2.kind == "module" and fc2.target == "Linear"
    assert fc2.args == ["$0/relu#0"]
    assert fc2.outputs == [{"ref": "$0.fc2/linear#0", "shape": [2, 4], "dtype": "float32"}]
    assert g.node("1").outputs[0]["ref"] == "$0.fc2/linear#0"  # Identity: same tensor


class _Unusual(nn.Module):
    """Module calls the C hooks leave to Python, between ordinary ones."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.pair = _Pair()
        self.hidden = _Hidden()
        self.takes = _Takes()

    def forward(self, x: torch.Tensor) -> Any:
        a, b, none = self.pair(x, scale=2.0, extra=(x, 1), skip=None)
        h = self.hidden(self.fc(a + b))  # an output no recorded op produced
        h = self.takes(h, _Cache(), list(range(100)))  # an object, a long list
        return self.pair(h, scale=torch.tensor(0.5), extra={"k": x}, skip=None), none


class _Cache:
    """Stands for transformers' DynamicCache: an argument rendered by its type name."""


class _Takes(nn.Module):
    def forward(self, x: torch.Tensor, cache: Any, positions: Any) -> torch.Tensor:
        return x * 2


class _Pair(nn.Module):
    def forward(self, x: torch.Tensor, scale: Any, extra: Any, skip: Any) -> Any:
        return x * scale, x + 1, None


class _Hidden(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch._C.DisableTorchFunction():
            return x * 3  # not recorded: the module output is labelled by its module


def test_unusual_module_calls_give_the_same_graph(python_hooks: list[str]) -> None:
    fast, python = _both(_Unusual(), torch.randn(3, 4))
    _assert_same(fast, python)
    assert "post _Hidden" in python_hooks  # unlabelled output: described by Python
    # arguments C cannot render alone (an object, a dict, a long list, an unlabelled
    # tensor) go through the trace's render() from the C hooks, not the Python hooks
    assert "post _Pair" not in python_hooks and "pre _Takes" not in python_hooks
    assert fast.node("takes").args == ["$hidden[0]", "<_Cache>", "<list len=100>"]
    assert fast.node("pair@1").kwargs["extra"] == {"k": "$x"}
    assert "pre Linear" not in python_hooks and "post Linear" not in python_hooks
    assert fast.node("hidden").outputs[0]["ref"] == "$hidden[0]"  # its first output


class _Unrenderable(Mapping[str, Any]):
    """A module argument whose rendering raises (the trace's render() iterates it)."""

    def __getitem__(self, key: str) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("cannot be rendered")

    def __len__(self) -> int:
        return 1


class _Leaf(nn.Module):
    def forward(self, x: torch.Tensor, *rest: Any, **options: Any) -> torch.Tensor:
        return x * 2


class _Catches(nn.Module):
    """Calls a child whose argument (positional, then keyword) cannot be rendered, and
    catches the error: the scope must be as Python's hooks leave it."""

    def __init__(self) -> None:
        super().__init__()
        self.child = _Leaf()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for call in (
            lambda: self.child(x, _Unrenderable()),
            lambda: self.child(x, extra=_Unrenderable()),
        ):
            try:
                call()
            except RuntimeError:
                pass
        x = self.child(x)
        return x + 1  # in this module's scope


def test_a_render_error_in_the_c_hooks_leaves_the_scope_as_python_does() -> None:
    """The pre hook enters the scope (counts the call) before rendering the arguments
    and the post hook leaves it before rendering the keyword arguments, as
    ModuleScope._pre / _post do: a model that catches the error goes on in the right
    scope, and the module's next call is its third."""
    model = nn.Sequential(_Catches())
    fast, python = _both(model, torch.randn(2, 2))
    _assert_same(fast, python)
    names = [n.name for n in fast.nodes]
    assert "0/add#0" in names  # the op after the errors, in module 0's scope
    assert "0.child@2" in names  # two calls counted before it


def test_a_module_that_raises_leaves_the_scope_balanced() -> None:
    """The always_call forward hook's exception path ``(module, args, output)`` goes to
    the Python hook; the error propagates and torch is as before."""

    class Boom(RuntimeError):
        pass

    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise Boom("inside")

    model = nn.Sequential(nn.Linear(3, 3), Fails())
    before = torch_state.snapshot()
    with pytest.raises(Boom, match="inside"):
        trace(model, torch.randn(1, 3))
    assert torch_state.differences(before) == []
    g = trace(nn.Sequential(nn.Linear(3, 3)), torch.randn(1, 3))
    assert [n.name for n in g.nodes] == ["0", "0/linear#0"]


def test_no_reference_cycle_outlives_a_trace() -> None:
    """The mode holds its C handler, the handler the recorder, the recorder the trace
    state and the scope, whose hooks are the recorder's: weak references and
    ``_Trace.close`` keep this from being a cycle, so it all goes by reference counting
    when ``trace()`` returns, without the cyclic garbage collector."""
    import gc

    from pytest_graphir.capture import _record
    from pytest_graphir.capture.mode import RecordingMode

    kinds = (_Trace, _record.Recorder, _record.Handler, RecordingMode)

    def alive() -> int:
        return sum(1 for o in gc.get_objects() if type(o) in kinds)

    model, x = _Mlp(), torch.randn(2, 8)
    trace(model, x)
    gc.collect()
    gc.disable()
    try:
        before = alive()
        graphs = [trace(model, x), trace(model, x, stats=False), trace(model, x, hooks=True)]
        assert alive() == before  # (a traceback kept by an earlier test may hold some)
    finally:
        gc.enable()
    assert all(g.nodes for g in graphs)


def test_the_c_handler_is_the_modes_torch_function() -> None:
    """The handler torch calls is the C one, bound (``__self__``) to its mode; with
    ``FAST_RECORD`` off, the Python method."""
    from pytest_graphir.capture import _record
    from pytest_graphir.capture.mode import RecordingMode

    def record(*args: Any) -> None:
        seen.append(args[0])

    seen: list[str] = []
    mode = RecordingMode(record, fast=True)
    assert type(mode.__torch_function__) is _record.Handler
    assert mode.__torch_function__.__self__ is mode
    with mode:
        torch.relu(torch.ones(2)).sum(dim=0, keepdim=False)
    assert seen == ["ones", "relu", "sum"]
    assert type(RecordingMode(record).__torch_function__).__name__ == "method"


def test_constants_compiled_in_agree_with_python() -> None:
    from pytest_graphir.capture import _record

    assert _record.MAX_CONST_LIST == tracer.MAX_CONST_LIST


def test_long_sequences_dtypes_and_devices_render_the_same() -> None:
    class Model(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x.view([1] * 63 + [-1])  # 64 items: a list
            x = x.view(*([1] * 64), -1).reshape(-1)  # 65 ints: positional
            y = x.new_zeros([2] * 3 + [1] * 62)  # 65 items: shortened
            x = x.to(torch.float64).to("cpu").to(x.device, torch.float32)
            return x.sum() + y.sum() + torch.stack((x, x, x), dim=0).sum()

    fast, python = _both(Model(), torch.randn(4))
    _assert_same(fast, python)
    assert fast.node("view#0").args == ["$x", [1] * 63 + [-1]]
    assert fast.node("new_zeros#0").args == ["$reshape#0", "<list len=65>"]
    assert fast.node("to#2").args == ["$to#1", "<device>", "float32"]
    assert fast.node("stack#0").args == [["$to#2"] * 3]


def _named_state(model: nn.Module, fast: bool) -> tuple[Any, ...]:
    """What ``_Trace`` learns of the model before the forward: module paths, and each
    parameter's and buffer's label, meta and version, by object."""
    tracer.FAST_RECORD = fast
    try:
        state = _Trace(model, True)
    finally:
        tracer.FAST_RECORD = True
    labels = {
        key: (entry[1], entry[2], entry[3], entry[0]() is not None)
        for key, entry in state.labels.entries.items()
    }
    paths = {id(m): p for m, p in state.scope.names.items()}
    state.close()
    return paths, labels, len(state.unqueued), sorted(state.named)


class _Shared(nn.Module):
    """Tied weights, a module registered twice, a lazy module, a None bias, a
    non-persistent buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.again = self.block  # the same module under a second name
        self.lazy = nn.LazyLinear(3)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64), persistent=False)


def test_c_walk_of_the_model_labels_as_python_does() -> None:
    model = _Shared()
    assert _named_state(model, True) == _named_state(model, False)
    paths, labels, unqueued, named = _named_state(model, True)
    # named_modules: a module registered twice is walked once, under its first name
    assert sorted(paths.values()) == ["", "block", "block.0", "block.1", "embed", "head", "lazy"]
    assert "$head.weight" not in named and "$embed.weight" in named  # first name kept
    assert "$again.0.weight" not in named and "$block.0.weight" in named
    assert not any("lazy" in n for n in named)  # no shape before the forward
    assert unqueued == len(labels) == len(named) == 4


def test_c_walk_steps_aside_for_an_own_named_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    class Custom(nn.Sequential):
        def named_modules(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            calls.append(1)
            return super().named_modules(*args, **kwargs)

    calls: list[int] = []
    model = nn.Sequential(nn.Linear(2, 2), Custom(nn.Linear(2, 2)))
    assert _named_state(model, True) == _named_state(model, False)
    assert calls  # the Python walk ran


def test_c_walk_reads_what_getattr_reads() -> None:
    """The C walk reads ``_parameters`` from the instance ``__dict__``; a class that
    changes what ``module._buffers`` gives (its own ``__getattribute__``; a class
    attribute of that name likewise) gets the Python walk, which reads it by getattr."""

    class Hides(nn.Linear):
        def __init__(self) -> None:
            super().__init__(2, 2)
            self.register_buffer("mask", torch.ones(2))
            self.hidden = True

        def __getattribute__(self, name: str) -> Any:
            value = super().__getattribute__(name)
            if name == "_buffers" and object.__getattribute__(self, "__dict__").get("hidden"):
                return {}  # the buffer is not the model's
            return value

    model = nn.Sequential(nn.Linear(2, 2), Hides())
    assert _named_state(model, True) == _named_state(model, False)
    named = _named_state(nn.Sequential(nn.Linear(2, 2), Hides()), True)[3]
    assert "$1.weight" in named and "$1.mask" not in named


def test_c_walk_refuses_an_inference_parameter_with_the_tracer_message() -> None:
    with torch.inference_mode():
        model = nn.Linear(2, 2)
    with pytest.raises(RuntimeError, match=r"'weight' was created under torch\.inference_mode"):
        trace(model, torch.randn(1, 2))


def test_compiled_in_reference_prefix_agrees_with_python() -> None:
    from pytest_graphir.capture import _record
    from pytest_graphir.names import REF_PREFIX

    assert _record.REF_PREFIX == REF_PREFIX


def test_an_op_whose_output_cannot_be_described_stays_in_the_graph() -> None:
    """As in ``_Trace.record_op``, the node is in the graph before its output is
    labelled: an op under ``torch.inference_mode()`` (its output has no version counter,
    so labelling it raises) whose error the model catches keeps its node (found by a
    review: the C code once dropped it, leaving a gap in the numbering)."""

    class Caught(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            try:
                with torch.inference_mode():
                    x * 2
            except RuntimeError:
                pass
            return self.lin(x) * 3

    fast, python = _both(Caught(), torch.randn(2, 4))
    assert [n.name for n in fast.nodes] == ["mul#0", "lin", "lin/linear#0", "mul#1"]
    assert [n.name for n in python.nodes] == [n.name for n in fast.nodes]


def test_a_module_tree_deeper_than_the_c_walk_goes_to_python() -> None:
    """The C walk recurses once per level; past 200 levels it leaves the tree to the
    Python walk (which raises RecursionError where Python's stack ends, never a crash)."""
    model: nn.Module = nn.Linear(2, 2)
    for _ in range(300):
        model = nn.Sequential(model)
    assert _named_state(model, True) == _named_state(model, False)
    _, _, _, named = _named_state(model, True)
    assert named == ["$" + "0." * 300 + "bias", "$" + "0." * 300 + "weight"]
    for _ in range(3000):  # deeper than Python's recursion limit: both ways refuse it
        model = nn.Sequential(model)
    for fast in (True, False):
        with pytest.raises(RecursionError):
            _named_state(model, fast)


def _tagged(x: torch.Tensor, tag: str) -> torch.Tensor:
    """A function of our own that torch function modes see (with its string argument)."""
    from torch.overrides import handle_torch_function, has_torch_function

    if has_torch_function((x,)):
        return handle_torch_function(_tagged, (x,), x, tag)  # type: ignore[no-any-return]
    return x * 2


def test_strings_devices_and_unchanged_outputs_record_the_same() -> None:
    """Constant strings (one starting with ``$`` escaped), devices, and ops that return
    an input, a parameter or an intermediate unchanged (``contiguous``, ``to`` of the
    same dtype, dropout in eval)."""

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(3, 3))
            self.drop = nn.Dropout(0.1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x.contiguous()  # an input returned unchanged: keeps its name
            w = self.w.to(torch.float32)  # a parameter handed on unchanged
            h = torch.nn.functional.gelu(x @ w, approximate="tanh")
            h = self.drop(h).contiguous()  # an intermediate, twice unchanged
            h = h.to(device=x.device)
            return _tagged(torch.einsum("ij,jk->ik", h, w), "$tag") + _tagged(h, "plain")

    model = Model().eval()
    fast, python = _both(model, torch.randn(2, 3))
    _assert_same(fast, python)
    assert fast.node("contiguous#0").outputs[0] == python.node("contiguous#0").outputs[0]
    assert fast.node("gelu#0").kwargs == {"approximate": "tanh"}
    tagged = [n.args[1] for n in fast.nodes if n.target.endswith("_tagged")]
    assert tagged == ["$$tag", "plain"]  # a constant starting with $ never reads as a ref
    assert fast.node("matmul#0").args == ["$x", "$w"]  # input and parameter keep names
