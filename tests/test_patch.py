"""The symbol-patch interceptor (``trace(..., interceptor="patch")``): same IR as the
TorchFunctionMode interceptor, every patched symbol restored, known limits handled."""

from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import models
import pytest
import torch
import torch.nn.functional as F
from helpers import Boom, Raising
from torch import nn
from torch import tanh as _tanh_alias  # an import-time alias of a C++ builtin
from workflow import check_workflow, run

from pytest_graphir import trace
from pytest_graphir.capture import patch
from pytest_graphir.capture.mode import RecordingMode
from pytest_graphir.capture.patch import DEFAULT_SKIP, PatchInterceptor
from pytest_graphir.ir import GraphIR
from pytest_graphir.serialize import dumps

ROOT = Path(__file__).resolve().parent.parent

NAMESPACES: dict[str, Any] = {
    "torch": torch,
    "torch.nn.functional": F,
    "torch.Tensor": torch.Tensor,
    "torch.fft": torch.fft,
    "torch.linalg": torch.linalg,
    "torch.special": torch.special,
    "torch._C._nn": torch._C._nn,
    # where the dispatch helpers are patched, too
    "torch.overrides": torch.overrides,
    "torch._tensor": sys.modules["torch._tensor"],
    "torch.functional": sys.modules["torch.functional"],
}

Event = tuple[str, tuple[Any, ...], dict[str, Any]]


@pytest.fixture(autouse=True)
def _warm() -> None:
    """Do once what the first patch in a process does anyway: import ``torch._dynamo``
    (which adds ``torch._dynamo`` & co. to ``vars(torch)`` and wraps
    ``torch.manual_seed`` itself), so namespace snapshots see only the patch."""
    patch.warm_caches()


def _snapshot() -> dict[str, dict[str, Any]]:
    return {name: dict(vars(ns)) for name, ns in NAMESPACES.items()}


def _assert_same_namespaces(before: dict[str, dict[str, Any]]) -> None:
    for name, old in before.items():
        new = dict(vars(NAMESPACES[name]))
        assert new.keys() == old.keys(), name
        changed = [k for k in old if new[k] is not old[k]]
        assert changed == [], f"{name}: {changed[:10]}"


def _record_into(events: list[Event]) -> Any:
    def record(
        name: str, raw: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> None:
        events.append((name, args, dict(kwargs)))

    return record


def _names(events: list[Event]) -> list[str]:
    return [e[0] for e in events]


def _op_nodes(graph: GraphIR) -> list[Any]:
    return [n for n in graph.nodes if n.kind == "op"]


def _gpt2() -> tuple[nn.Module, torch.Tensor]:
    import real_models

    pytest.importorskip("transformers")
    return real_models.gpt2(n_embd=64, n_head=2, vocab_size=1000)


def _bert() -> tuple[nn.Module, torch.Tensor]:
    import real_models

    pytest.importorskip("transformers")
    return real_models.bert(
        hidden_size=64, num_attention_heads=2, intermediate_size=128, vocab_size=1000
    )


def _vit() -> tuple[nn.Module, torch.Tensor]:
    import real_models

    pytest.importorskip("transformers")
    return real_models.vit()


class Zoo(nn.Module):
    """Ops that reach ``__torch_function__`` in different ways: C++ builtins, Python
    functions that rebuild their arguments (``F.layer_norm``), boolean dispatch
    (``F.max_pool2d``), ``torch.functional`` (``einsum``, ``norm``), Python dunders
    (``1 - x``), metadata helpers that run ops inside (``repr``, iteration), and
    ``nn.MultiheadAttention``'s fast-path check through ``torch.overrides``."""

    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, batch_first=True)
        self.conv = nn.Conv2d(1, 2, 3, padding=1)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> Any:
        h = x.clone()
        h[0, 0] = 1.0
        h.add_(1)
        a = 1 - h
        b = 2**h
        c = torch.cat(h.split(4, dim=-1), dim=-1)
        d = torch.einsum("bij,bkj->bik", h, h)
        e = F.max_pool2d(self.conv(h[:, None]), 2)
        n = len(h) + sum(1 for _ in h)
        s = repr(h[0, 0, 0])
        f = (h == a).float() + (h > 0).float()
        g = torch.norm(h, dim=-1)
        att, w = self.mha(h, h, h)
        i = self.drop(F.layer_norm(att, (8,)))
        j = F.softmax(i, dim=-1) @ i.transpose(1, 2)
        k = torch.stack([a.sum(), b.mean(), c.max(), d.min(), e.sum(), g.sum(), j.sum()]) * n
        m = F.interpolate(e, scale_factor=2.0).sum() + F.pad(h, (1, 1)).sum()
        o = torch.where(h > 0, h, -h).unbind(0)
        return k, w, m + o[0].sum() + f.sum(), torch.tensor(float(len(s)))


def _zoo() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return Zoo().eval(), (torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(0)),)


def _both(model: nn.Module, *args: Any, **kwargs: Any) -> tuple[GraphIR, GraphIR]:
    torch.manual_seed(1)
    by_mode = trace(model, *args, interceptor="mode", **kwargs)
    torch.manual_seed(1)
    by_patch = trace(model, *args, interceptor="patch", **kwargs)
    return by_mode, by_patch


# -- (a) the same IR -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "build, stats",
    [
        (models.mlp, True),
        (lambda: models.mlp(act="gelu"), True),
        (lambda: models.mlp(act="tanh"), False),
        (models.tiny_transformer, True),
        (lambda: models.tiny_transformer(depth=3), False),
        (_zoo, True),
    ],
    ids=["mlp", "mlp-gelu", "mlp-tanh-nostats", "tiny_transformer", "tiny_transformer-3", "zoo"],
)
def test_fixture_models_same_ir(build: Any, stats: bool) -> None:
    model, inputs = build()
    by_mode, by_patch = _both(model, *inputs, stats=stats)
    assert dumps(by_patch) == dumps(by_mode)
    assert len(by_patch.ops()) >= 3


def test_zoo_in_training_mode_same_ir() -> None:
    model, inputs = _zoo()
    by_mode, by_patch = _both(model.train(), *inputs)
    assert dumps(by_patch) == dumps(by_mode)
    ops = {n.target: n for n in _op_nodes(by_patch)}
    # Python functions are recorded with the arguments their handle_torch_function
    # passes, not the caller's: nn.LayerNorm-style calls give weight/bias/eps as kwargs
    assert ops["layer_norm"].kwargs == {"weight": None, "bias": None, "eps": 1e-05}
    assert "return_indices" in ops["max_pool2d"].kwargs  # boolean dispatch, public name
    assert {"rsub", "einsum", "norm", "multi_head_attention_forward", "dropout"} <= set(ops)


class _Spectral(nn.Module):
    """torch.fft, torch.linalg and torch.special calls, as FNet and friends make them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mixed = torch.fft.fftn(x, dim=(1, 2)).real
        norm = torch.linalg.vector_norm(mixed, dim=-1, keepdim=True)
        return torch.special.erf(mixed / norm)


def test_fft_linalg_and_special_namespaces_recorded_like_the_mode() -> None:
    """The builtins of torch._C._fft, _linalg and _special reached through torch.fft,
    torch.linalg and torch.special (FNet's fftn): the patch records them as the mode
    does, not as a constant fed into the next op."""
    x = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(0))
    by_mode, by_patch = _both(_Spectral(), x)
    ops = [n.target for n in _op_nodes(by_patch)]
    assert ops[:1] == ["fft.fftn"] and "linalg.vector_norm" in ops and "special.erf" in ops
    assert dumps(by_patch) == dumps(by_mode)


def _resnet() -> tuple[nn.Module, torch.Tensor]:
    import real_models

    pytest.importorskip("transformers")
    return real_models.resnet()


@pytest.mark.parametrize("build, min_ops", [(_gpt2, 90), (_resnet, 15)], ids=["gpt2", "resnet"])
def test_transformers_models_same_ir(build: Any, min_ops: int) -> None:
    model, ids = build()
    by_mode, by_patch = _both(model, ids)
    assert dumps(by_patch) == dumps(by_mode)
    assert len(by_patch.ops()) > min_ops
    scan = PatchInterceptor(_record_into([]), model=model)
    with scan:
        pass
    assert scan.uncaptured == []


def test_per_call_events_match_the_mode() -> None:
    """Op by op: same names, same argument objects, same keyword arguments."""
    x = torch.randn(2, 3, 4, 4)
    w, b = torch.randn(4), torch.randn(4)
    calls = [
        lambda: F.relu(x),  # Python function -> torch.relu: one event
        lambda: torch.relu(x),
        lambda: F.gelu(x),
        lambda: F.layer_norm(x, (4,), w, b),
        lambda: F.max_pool2d(x, 2),
        lambda: x + 1,
        lambda: 1 + x,
        lambda: 1 - x,
        lambda: x[0],
        lambda: x.view(-1),
        lambda: x.size(),
        lambda: len(x),
        lambda: list(x),
        lambda: repr(x[0, 0, 0]),
        lambda: torch.split(x, 2, dim=-1),
        lambda: torch.einsum("abcd->a", x),
    ]

    def run(make: Any) -> list[Event]:
        events: list[Event] = []
        with make(_record_into(events)):
            for call in calls:
                call()
            with torch._C.DisableTorchFunction():  # what the tracer's statistics use
                F.relu(x)
                torch.sigmoid(x)
        return events

    by_mode, by_patch = run(RecordingMode), run(PatchInterceptor)
    assert _names(by_patch) == _names(by_mode)
    assert _names(by_patch)[:4] == ["relu", "relu", "gelu", "layer_norm"]
    for (_, args_m, kw_m), (name, args_p, kw_p) in zip(by_mode, by_patch, strict=True):
        assert len(args_p) == len(args_m), name
        for a, b in zip(args_m, args_p, strict=True):
            assert a is b or a == b, name
        assert kw_p.keys() == kw_m.keys(), name


def test_recorder_runs_at_depth_one() -> None:
    """Torch calls the recorder makes are not recorded (under the mode it runs with
    the mode popped): a C++ op, a Python function, an operator."""
    names: list[str] = []

    def record(
        name: str, raw: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> None:
        names.append(name)
        F.relu(out).sum() + 1

    x = torch.randn(3)
    for make in (RecordingMode, PatchInterceptor):
        names.clear()
        with make(record):
            torch.tanh(x)
            F.silu(x)
        assert names == ["tanh", "silu"], make


# -- (b) import-time aliases are patched too ------------------------------------------------
@pytest.mark.parametrize("build", [_bert, _vit], ids=["bert", "vit"])
def test_gelu_activation_aliases_patched_and_restored(build: Any) -> None:
    """transformers' GELUActivation keeps ``nn.functional.gelu`` (a C++ builtin) from
    ``__init__``: failed on main (the patch trace missed every ``gelu`` node)."""
    model, x = build()
    acts = {p: m for p, m in model.named_modules() if type(m).__name__ == "GELUActivation"}
    assert acts and all(vars(m)["act"] is F.gelu for m in acts.values())
    scan = PatchInterceptor(_record_into([]), model=model)
    with scan:
        assert all(vars(m)["act"] is not _ORIGINAL["gelu"] for m in acts.values())
    assert scan.uncaptured == []
    assert sorted(scan.aliased) == sorted(f"{p}.act -> torch.nn.functional.gelu" for p in acts)
    assert all(vars(m)["act"] is _ORIGINAL["gelu"] for m in acts.values())  # identity back
    by_mode, by_patch = _both(model, x)
    assert dumps(by_patch) == dumps(by_mode)
    assert sum(op == "gelu" for op in by_patch.ops()) == len(acts)


_helper_partial = functools.partial(torch.clamp, min=-1.0)  # a module global partial


def _closure_act() -> Any:
    fn = torch.sigmoid

    def act(x: torch.Tensor) -> torch.Tensor:
        return fn(x)  # a closure cell holding a C++ builtin

    return act


_closed = _closure_act()


def _with_default(x: torch.Tensor, op: Any = torch.abs) -> torch.Tensor:
    return op(x)  # a default argument holding a C++ builtin


class _Base(nn.Module):
    class_act = torch.neg  # a class attribute on a base class: not bound on access


class _Aliases(_Base):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.builtin_act = torch.relu  # a C++ builtin: the original is called
        self.python_act = F.silu  # a Python function: dispatches through the helpers
        self.acts = [torch.sigmoid]
        self.table = {"act": torch.tanh}
        self.partial_act = functools.partial(F.gelu, approximate="tanh")
        self.frozen = (torch.exp,)  # a tuple element: can not be patched in place

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.acts[0](_tanh_alias(self.python_act(self.builtin_act(self.fc(x)))))
        h = self.table["act"](self.partial_act(h)) + self.class_act(h)  # type: ignore[misc, call-arg]  # a builtin: never bound
        return self.frozen[0](_closed(_helper_partial(_with_default(h))))


def _slots(model: _Aliases) -> dict[str, Any]:
    return {
        "builtin_act": vars(model)["builtin_act"],
        "acts": model.acts[0],
        "table": model.table["act"],
        "partial": model.partial_act.func,
        "partial_obj": vars(model)["partial_act"],
        "global": globals()["_tanh_alias"],
        "global_partial": _helper_partial.func,
        "cell": _closed.__closure__[0].cell_contents,
        "defaults": _with_default.__defaults__,
        "class": vars(_Base)["class_act"],
        "frozen": model.frozen[0],
    }


def test_aliases_of_every_kind_patched_and_restored_exactly() -> None:
    """Instance attributes, list/dict elements, partials, module globals, closure
    cells, default arguments, class attributes: patched while tracing, the very same
    objects afterwards; a tuple element stays uncaptured and is reported."""
    model = _Aliases()
    before = _slots(model)
    defaults = _with_default.__defaults__
    scan = PatchInterceptor(_record_into([]), model=model)
    with scan:
        during = _slots(model)
        assert "class_act" not in vars(_Aliases)  # patched where it lives, on _Base
    assert scan.uncaptured == ["frozen[0] -> torch.exp"]
    assert len(scan.aliased) == 9, scan.aliased
    changed = {k for k in before if during[k] is not before[k]}
    assert changed == set(before) - {"frozen", "partial_obj"}
    assert during["partial_obj"] is before["partial_obj"]  # changed in place
    after = _slots(model)
    assert all(after[k] is before[k] for k in before), after
    assert _with_default.__defaults__ is defaults
    assert "class_act" not in vars(_Aliases) and "class_act" in vars(_Base)

    by_mode, by_patch = _both(model, torch.randn(2, 4))
    assert by_mode.ops() == [
        "linear",
        "relu",
        "silu",
        "tanh",
        "sigmoid",
        "gelu",
        "tanh",
        "neg",
        "add",
        "abs",
        "clamp",
        "sigmoid",
        "exp",
    ]
    assert by_patch.ops() == [op for op in by_mode.ops() if op != "exp"]


def test_trace_warns_about_what_it_can_not_patch() -> None:
    """trace(interceptor="patch") names the aliases it can not patch (a tuple element),
    and only those: the IR differs from the mode's by exactly their calls."""
    from pytest_graphir.capture import UncapturedCallsWarning

    model = _Aliases()
    x = torch.randn(2, 4)
    with pytest.warns(UncapturedCallsWarning) as record:
        patched = trace(model, x, interceptor="patch")
    assert len(record) == 1
    message = str(record[0].message)
    assert "1 reference(s)" in message and "frozen[0] -> torch.exp" in message
    moded = trace(model, x)
    assert {n.name for n in moded.nodes} - {n.name for n in patched.nodes} == {"exp#0"}


# -- property getters ----------------------------------------------------------------------
class _Transposes(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.T @ x.mT.exp().t() + x.data.sum() + x.H.sum() + x.mH.sum() + x.real.sum()


def test_property_getters_recorded_like_the_mode() -> None:
    """``x.T`` & co. are getset descriptors of TensorBase: shadowed on torch.Tensor by
    recording properties (failed on main: not recorded, Falcon's ``weight.T``)."""
    x = torch.randn(3, 2)
    assert "T" not in vars(torch.Tensor)
    by_mode, by_patch = _both(_Transposes(), x)
    assert by_mode.ops()[:5] == ["t", "transpose", "exp", "t", "matmul"]
    assert dumps(by_patch) == dumps(by_mode)
    assert "T" not in vars(torch.Tensor) and "data" not in vars(torch.Tensor)
    with PatchInterceptor(_record_into([])):
        assert "T" in vars(torch.Tensor)
        assert torch.equal(x.T, x.t()) and torch.equal(x.mT, x.transpose(-2, -1))
        y = torch.zeros(3, 2)
        y.data = x  # setting goes to the descriptor
        assert torch.equal(y, x)
        with pytest.raises(AttributeError):
            x.T = x  # type: ignore[misc]


# -- (c) restore, also when the forward raises ---------------------------------------------
def _patched_inside() -> dict[str, bool]:
    """Which of torch's namespaces the patch interceptor has patched at this moment."""
    return {
        "torch.relu": vars(torch)["relu"] is not _ORIGINAL["relu"],
        "F.gelu": vars(F)["gelu"] is not _ORIGINAL["gelu"],
        "torch._C._nn.linear": vars(torch._C._nn)["linear"] is not _ORIGINAL["linear"],
        "Tensor.add": "add" in vars(torch.Tensor),
        "F.has_torch_function_unary": vars(F)["has_torch_function_unary"] is not _ORIGINAL["htf"],
    }


_ORIGINAL = {
    "relu": torch.relu,
    "gelu": F.gelu,
    "linear": torch._C._nn.linear,
    "htf": F.has_torch_function_unary,  # type: ignore[attr-defined]
}


def test_forward_raising_leaves_every_namespace_identical() -> None:
    before = _snapshot()
    jit_table = dict(patch.jit_builtin_table())
    model = Raising(probe=_patched_inside)
    with pytest.raises(Boom) as info:
        trace(model, torch.randn(2, 3), interceptor="patch")
    assert info.value is model.raised[0]
    assert model.seen and all(model.seen.values()), model.seen  # it was patched inside
    _assert_same_namespaces(before)
    assert patch.jit_builtin_table() == jit_table
    assert patch.STATE.owner is None and patch.STATE.depth == 0
    assert patch.ACTIVE == []
    # inherited Tensor methods are inherited again, not shadowed
    assert "add" not in vars(torch.Tensor) and "__add__" not in vars(torch.Tensor)
    assert torch.Tensor.__add__ is torch._C.TensorBase.__add__
    # and the next trace works
    model2, (x,) = models.mlp()
    assert trace(model2, x, interceptor="patch").ops() == ["linear", "relu", "linear"]


def test_record_raising_restores_too() -> None:
    before = _snapshot()

    def record(*args: Any) -> None:
        raise KeyError("recorder failed")

    with pytest.raises(KeyError, match="recorder failed"), PatchInterceptor(record):
        torch.relu(torch.ones(2))
    _assert_same_namespaces(before)


# -- (d) restoring twice, nesting ----------------------------------------------------------
def test_exit_twice_and_reuse() -> None:
    before = _snapshot()
    events: list[Event] = []
    p = PatchInterceptor(_record_into(events))
    x = torch.ones(1)
    p.__exit__(None, None, None)  # never entered: nothing to do
    with p:
        torch.relu(x)
    p.__exit__(None, None, None)
    _assert_same_namespaces(before)
    with p:  # the same object patches again
        torch.tanh(x)
    _assert_same_namespaces(before)
    assert _names(events) == ["relu", "tanh"]
    assert p.patched > 1000


def test_nested_interceptor_refused_outer_unharmed() -> None:
    before = _snapshot()
    outer_events: list[Event] = []
    outer = PatchInterceptor(_record_into(outer_events))
    model, (x,) = models.mlp()
    with outer:
        inside = _snapshot()
        with pytest.raises(RuntimeError, match="already active"):
            with PatchInterceptor(_record_into([])):
                pass  # pragma: no cover
        with pytest.raises(RuntimeError, match="already active"):
            outer.__enter__()
        _assert_same_namespaces(inside)  # the refused ones changed nothing
        torch.relu(x)
        with pytest.raises(RuntimeError, match="already active"):
            trace(model, x, interceptor="patch")
        assert patch.STATE.owner is outer
    assert _names(outer_events) == ["relu"]
    _assert_same_namespaces(before)


def test_other_threads_run_but_do_not_record() -> None:
    events: list[Event] = []
    results: dict[str, Any] = {}
    x = torch.randn(3)

    def worker() -> None:
        results["relu"] = F.relu(x)
        results["add"] = x + x
        try:
            with PatchInterceptor(_record_into([])):
                pass  # pragma: no cover
        except RuntimeError as e:
            results["error"] = str(e)

    with PatchInterceptor(_record_into(events)):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        torch.sigmoid(x)
    assert _names(events) == ["sigmoid"]
    assert torch.equal(results["relu"], x.relu()) and torch.equal(results["add"], 2 * x)
    assert "already active" in results["error"]


# -- skip list -----------------------------------------------------------------------------
def test_skip_list_by_op_name_and_qualified_name() -> None:
    events: list[Event] = []
    x = torch.randn(3)
    with PatchInterceptor(_record_into(events), skip=DEFAULT_SKIP | {"relu", "torch.Tensor.add"}):
        assert vars(torch)["relu"] is _ORIGINAL["relu"]
        assert "add" not in vars(torch.Tensor)
        assert "sub" in vars(torch.Tensor)
        F.relu(x)
        torch.relu(x)
        x.add(x)
        x.sub(x)
        torch.add(x, x)
    assert _names(events) == ["sub", "add"]  # torch.add is another symbol


def test_default_skip_and_object_protocol_left_alone() -> None:
    before = dict(vars(torch.Tensor))
    with PatchInterceptor(_record_into([])):
        for qualname in DEFAULT_SKIP:
            attr = qualname.rsplit(".", 1)[1]
            assert attr not in vars(torch.Tensor), qualname
        for dunder in (
            "__hash__",
            "__repr__",
            "__init__",
            "__torch_function__",
            "__iter__",
            "__reduce_ex__",
            "__deepcopy__",
            "__len__",
            "__bool__",
        ):
            assert vars(torch.Tensor).get(dunder) is before.get(dunder), dunder
        assert "__add__" in vars(torch.Tensor) and "__getitem__" in vars(torch.Tensor)


# -- modules imported inside the patched region --------------------------------------------
def test_module_imported_while_patched_is_repaired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "graphir_late_import_probe"
    (tmp_path / f"{name}.py").write_text(
        "from torch import relu\nfrom torch.nn.functional import gelu\n"
        "from torch.overrides import has_torch_function\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    p = PatchInterceptor(_record_into([]))
    with p:
        mod = importlib.import_module(name)
        assert mod.relu is not _ORIGINAL["relu"]  # bound a wrapper
    assert mod.relu is torch.relu is _ORIGINAL["relu"]
    assert mod.gelu is F.gelu is _ORIGINAL["gelu"]
    assert mod.has_torch_function is torch.overrides.has_torch_function
    assert sorted(p.repaired) == [f"{name}.gelu", f"{name}.has_torch_function", f"{name}.relu"]


# -- (e) torch.overrides caches ------------------------------------------------------------
def _python(code: str) -> str:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(ROOT),
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_resolve_name_not_poisoned_in_fresh_process() -> None:
    out = _python("""
        import torch, torch.overrides as ov
        assert ov._get_overridable_functions.cache_info().currsize == 0
        from pytest_graphir import trace
        model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.GELU())
        trace(model, torch.randn(2, 3), interceptor="patch")
        print(ov.resolve_name(torch.add), ov.resolve_name(torch.Tensor.add),
              ov.resolve_name(torch.nn.functional.relu), ov.resolve_name(torch.nn.functional.gelu))
    """)
    assert out == ("torch.add torch.Tensor.add torch.nn.functional.relu torch.nn.functional.gelu")


# -- (f) torch.compile and TorchScript inside the patched region ---------------------------
def test_torch_compile_inside_patched_region_fresh_process() -> None:
    """Dynamo first imported while patched would keep the wrappers in its tables, and
    a later ``fullgraph`` compile of ``F.gelu`` would fail ("Attempted to call function
    marked as skipped"); the interceptor imports Dynamo before patching. Inside, the
    compile session records nothing; the compiled graph's calls are recorded."""
    out = _python("""
        import json, sys, torch, torch.nn.functional as F
        assert "torch._dynamo" not in sys.modules
        from pytest_graphir.capture.patch import PatchInterceptor

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(4, 4)
            def forward(self, x):
                return F.gelu(self.fc(x)) + torch.relu(x).sum() * 2

        m, x = M(), torch.randn(4, 4)
        ref = m(x)
        events = []
        with PatchInterceptor(lambda name, *rest: events.append(name)):
            m(x)
            eager = list(events)
            out = torch.compile(m, backend="eager", fullgraph=True)(x)
            compiled = events[len(eager):]
        def g(x):
            return F.gelu(x) + torch.relu(x) * 2 + x.sin()
        after = torch.compile(g, backend="eager", fullgraph=True)(x)
        print(json.dumps({"eager": eager, "compiled": compiled,
                          "same": bool(torch.allclose(out, ref)),
                          "after": bool(torch.allclose(after, g(x)))}))
    """)
    res = json.loads(out)
    assert res["eager"] == ["linear", "gelu", "relu", "sum", "mul", "add"]
    assert res["compiled"] == res["eager"]
    assert res["same"] and res["after"]


def test_torch_jit_script_inside_patched_region() -> None:
    jit_table = dict(patch.jit_builtin_table())
    events: list[Event] = []
    x = torch.randn(3, 4)
    with PatchInterceptor(_record_into(events)):

        def f(x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) + F.gelu(x) + F.layer_norm(x, (4,)) + torch.tanh(x)

        scripted = torch.jit.script(f)
        assert events == []  # compiling records nothing
        out = scripted(x)
        assert events == []  # TorchScript runs in C++: neither interceptor sees inside
        graph = str(scripted.graph)
    assert torch.allclose(out, f(x))
    assert "aten::relu" in graph and "aten::tanh" in graph and "aten::gelu" in graph
    assert patch.jit_builtin_table() == jit_table

    def h(x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x) * 2

    assert torch.equal(torch.jit.script(h)(x), h(x))  # after exit too


# -- (g) the snapshot workflow with interceptor="patch" ------------------------------------
TEST_PATCH = """
import os
import models
from pytest_graphir import trace

def test_mlp(graphir_snapshot):
    model, inputs = models.mlp(act=os.environ.get("ACT", "relu"))
    how = os.environ.get("INTERCEPTOR", "patch")
    assert trace(model, *inputs, interceptor=how) == graphir_snapshot
"""

SNAP = "__snapshots__/test_mlp/test_mlp.graphir"


def test_snapshot_workflow_with_patch_interceptor(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = graphir_project
    p.makepyfile(test_mlp=TEST_PATCH)
    check_workflow(
        p,
        monkeypatch,
        snapshot=SNAP,
        change=("ACT", "tanh"),
        failure_lines=[
            "*added: act/tanh#0 (op tanh)*",
            "*removed: act/relu#0 (op relu)*",
            "*changed: act module ReLU -> Tanh*",
        ],
        snapshot_lines=('  fc1/linear#0: {"op": "linear"', '  act/relu#0: {"op": "relu"'),
    )


def test_snapshot_does_not_depend_on_the_interceptor(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = graphir_project
    p.makepyfile(test_mlp=TEST_PATCH)
    run(p, "--graphir-update").assert_outcomes(passed=1)
    text = (p.path / SNAP).read_text()
    monkeypatch.setenv("INTERCEPTOR", "mode")
    run(p, "--graphir-update").assert_outcomes(passed=1)
    assert (p.path / SNAP).read_text() == text  # the mode's trace matches it: not rewritten


def test_torch_own_compilation_work_is_not_recorded() -> None:
    """While torch compiles a frame (``torch._guards.CompileContext`` set: Dynamo's
    analysis, fake-tensor conversion, the backend), the tensor calls it makes are
    torch's, not the model's: the wrappers and the dispatch probe pass them through
    unrecorded (Dynamo's fake-tensor conversion asks ``is_conj`` and ``is_neg`` of
    every input outside the code it traces, where ``torch.compiler.is_compiling()``
    is false)."""
    from torch._guards import CompileContext, compile_context

    events: list[Event] = []
    x = torch.randn(2, 3)
    with PatchInterceptor(_record_into(events)):
        with compile_context(CompileContext(None)):
            x.is_conj()
            torch.relu(x)
            F.gelu(x)
            _ = x.T
        torch.relu(x)
    assert _names(events) == ["relu"]


@pytest.mark.usefixtures("fresh_dynamo")
def test_a_compiled_function_inside_the_forward_records_as_under_the_mode() -> None:
    """A ``torch.compile``'d function the forward calls: the patch trace holds the
    model's ops, as the mode's does, and none of the compilation's."""

    class Compiled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.fn = torch.compile(lambda h: torch.relu(h) * 2, backend="eager")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fn(self.lin(x)) + 1  # type: ignore[no-any-return]

    torch.manual_seed(0)
    model, x = Compiled(), torch.randn(2, 4)
    by_patch = trace(model, x, interceptor="patch", stats=False)
    torch._dynamo.reset()
    by_mode = trace(model, x, stats=False)
    assert by_patch.ops() == by_mode.ops() == ["linear", "relu", "mul", "add"]


def test_torch_device_contexts_work_after_a_patch_trace_of_a_compiled_call() -> None:
    """A patch trace of a forward that calls a ``torch.compile``'d function (Dynamo
    builds torch's cached table of factory functions there, the first time) leaves
    ``with torch.device("meta")`` working: in a fresh process, where the table is
    not built yet."""
    script = (
        "import torch\n"
        "from torch import nn\n"
        "from pytest_graphir import trace\n"
        "class C(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = nn.Linear(4, 4)\n"
        "        self.fn = torch.compile(lambda h: torch.relu(h) * 2, backend='eager')\n"
        "    def forward(self, x):\n"
        "        return self.fn(self.lin(x)) + 1\n"
        "trace(C(), torch.randn(2, 4), interceptor='patch', stats=False)\n"
        "with torch.device('meta'):\n"
        "    print(nn.Embedding(10, 8).weight.device)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "meta", done.stdout
