"""The private parts of torch that ``compiled/`` relies on, each reached in one place
(``pytest_graphir.compiled.dynamo_state``), and the metadata its public route reads:
these tests fail when a torch release moves one, before the check silently stops
seeing graph breaks, recompiles or guards."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch._dynamo

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
