"""The private parts of torch that ``compiled/`` relies on, each reached in one place
(``pytest_graphir.compiled.dynamo_state``), and the metadata its public route reads:
these tests fail when a torch release moves one, before the check silently stops
seeing graph breaks, recompiles or guards."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch._dynamo
from helpers import resolve_path

from pytest_graphir.compiled import dynamo_state
from pytest_graphir.compiled.backend import AOT_BACKEND_NAME, BACKEND_NAME, GraphRecorder

pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # tests/conftest.py


def _breaking(x: torch.Tensor, k: int) -> torch.Tensor:
    y = x * k
    print("a graph break")
    return y + 1


def test_each_private_dynamo_object_the_check_reads_is_where_it_was(
    capsys: pytest.CaptureFixture[str],
) -> None:
    starts: list[Any] = []
    ends: list[Any] = []
    dynamo_state.reset_dynamo()
    dynamo_state.on_compile(starts.append, ends.append)
    recorder = GraphRecorder()
    compiled = torch.compile(_breaking, backend=recorder)
    compiled(torch.ones(2), 2)
    compiled(torch.ones(2), 3)  # a guard on k fails: a recompile
    capsys.readouterr()

    assert starts and len(starts) == len(ends)
    assert all(str(getattr(a, "compile_id", "")) for a in starts)
    reasons = dynamo_state.break_reasons()
    assert reasons and all(hasattr(r, "reason") and hasattr(r, "user_stack") for r in reasons)
    counted, unimplemented = dynamo_state.break_counts()
    assert counted or unimplemented
    metrics = dynamo_state.compilation_metrics()
    assert metrics and all(hasattr(m, a) for m in metrics for a in ("compile_id", "start_time"))
    assert any(isinstance(m.guard_count, int) for m in metrics)
    assert dynamo_state.guard_failures()
    # the public route: Dynamo's compile id on the GraphModule it hands the backend
    assert recorder.graphs and all(g.compile_id for g in recorder.graphs)

    dynamo_state.reset_dynamo()
    assert dynamo_state.break_counts() == ({}, {})
    assert not dynamo_state.break_reasons() and not dynamo_state.guard_failures()


def test_the_public_names_used_instead_of_private_ones() -> None:
    from functorch.compile import make_boxed_func  # type: ignore[import-untyped]

    boxed = make_boxed_func(lambda a, b: a + b)
    assert boxed._boxed_call and boxed([1, 2]) == 3
    known = torch._dynamo.list_backends(exclude_tags=())
    assert {BACKEND_NAME, AOT_BACKEND_NAME} <= set(known)
    assert torch._dynamo.lookup_backend(BACKEND_NAME).__name__ == BACKEND_NAME
    # a torch.ops operator is known by its overloadpacket (an overload) or overloads
    assert torch.ops.aten.add.Tensor.overloadpacket is torch.ops.aten.add
    assert "Tensor" in torch.ops.aten.add.overloads()
    assert not hasattr(torch.ops.higher_order.wrap, "overloads")


CAPTURE_PRIVATE = {
    "torch._C.DisableTorchFunction": "run an op below every TorchFunctionMode",
    "torch._C.TensorBase": "unbound tensor methods, called without the subclass dispatch",
    "torch._C._get_cudnn_allow_tf32": "cuDNN's TF32 flag, read under frozen flags",
    "torch._C._set_cudnn_allow_tf32": "cuDNN's TF32 flag, set under frozen flags",
    "torch._C._get_function_stack_at": "the thread watch: is its counter on top",
    "torch._C._len_torch_function_stack": "the thread watch: the mode stack's depth",
    "torch._C._pop_torch_function_stack": "the thread watch: its counter off another stack",
    "torch._C._is_torch_function_all_disabled": "no interception inside DisableTorchFunction",
    "torch._C._is_torch_function_mode_enabled": "the C kernel only outside a mode",
    "torch._C._will_engine_execute_node": "gradient taps on nodes the backward runs",
    "torch._chunk_cat": "the device path's rows in one kernel",
    "torch._dynamo.trace_rules": "the patch interceptor tells Dynamo its wrappers",
    "torch._guards.CompileContext.try_get": "no recording while torch compiles a frame",
    "torch.autograd.Variable._execution_engine": "a callback at the end of the backward",
    "torch.jit._builtins._get_builtin_table": "patched functions stay TorchScript builtins",
    "torch.nn.modules.module._global_forward_hooks_with_kwargs": "a removed hook's entry",
    "torch.utils._device._device_constructors": "factory functions the patch must wrap",
}
"""Every private torch path ``capture/`` uses, with what for (docs/architecture.md,
*Private torch*, names the public API each lacks)."""


@pytest.mark.parametrize("path", sorted(CAPTURE_PRIVATE))
def test_each_private_path_capture_uses_is_where_it_was(path: str) -> None:
    assert resolve_path(path) is not None, path
