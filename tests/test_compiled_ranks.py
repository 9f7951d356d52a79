"""``compare_compiled`` on the ranks of a tensor-parallel model: refused at once on
``threaded`` ranks (threads of one process share Dynamo's state), checked per rank on
gloo processes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from pytest_graphir.compiled import compare_compiled
from pytest_graphir.compiled.check import compare_aten
from pytest_graphir.parallel import RankError, run_ranks

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="no torch.distributed")


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))  # type: ignore[no-any-return]


def _tp_model(world: int) -> MLP:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    model = MLP()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    parallelize_module(model, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    return model


def _compiled(rank: int, world: int, backward: bool) -> tuple[bool, list[str], int]:
    """compare_compiled of a TP MLP on this rank: ok, the report's lines, graphs."""
    report = compare_compiled(_tp_model(world), torch.randn(2, 8), backward=backward)
    return report.ok, report.lines(), report.graph_count


def _refused(rank: int, world: int, check: str) -> str:
    """The error ``check`` raises on this rank, and that the model still runs after."""
    model, x = _tp_model(world), torch.randn(2, 8)
    run: Any = compare_compiled if check == "compare_compiled" else compare_aten
    with pytest.raises(RuntimeError) as caught:
        run(model, x)
    model(x)  # nothing was touched: the ranks still run their collectives
    return str(caught.value)


@pytest.mark.parametrize("check", ["compare_compiled", "compare_aten"])
def test_threaded_ranks_are_refused_at_once_with_what_to_do(check: str) -> None:
    """On threaded ranks both checks raise before anything runs, on every rank,
    naming the check, why (Dynamo's state is per process) and what to do (gloo)."""
    messages = run_ranks(_refused, world_size=2, timeout=60, args=(check,))
    for message in messages:
        assert message.startswith(f"{check}() cannot check a model on 2 threaded ranks: ")
        assert "shared by every thread of a process" in message
        assert 'run_ranks(fn, backend="gloo")' in message


def _single(rank: int, world: int) -> tuple[bool, int]:
    report = compare_compiled(MLP(), torch.randn(2, 8))
    return report.ok, report.graph_count


def test_one_threaded_rank_is_checked_as_usual() -> None:
    """A threaded group of one rank shares Dynamo with nobody: checked, one graph."""
    assert run_ranks(_single, world_size=1, timeout=60) == [(True, 1)]


def test_the_refusal_is_a_rank_error_not_a_dynamo_key_error() -> None:
    """Without catching it, the refusal reaches the caller as the rank's RuntimeError,
    not as a ``KeyError`` from inside a compiled frame another rank reset."""
    with pytest.raises(RankError, match=r"rank 0 raised RuntimeError: compare_compiled\(\)"):
        run_ranks(_compiled, world_size=2, timeout=60, args=(False,))


@pytest.mark.distributed
@pytest.mark.slow
def test_tp_model_on_gloo_ranks_compiles_like_eager_per_rank() -> None:
    """On gloo processes each rank gets its own report: one graph, no break, outputs
    and (with backward) gradients within tolerance."""
    results = run_ranks(_compiled, world_size=2, backend="gloo", timeout=120, args=(True,))
    for ok, lines, graphs in results:
        assert ok, "\n".join(lines)
        assert graphs == 1
        assert "0 graph breaks" in lines[0]
        assert "outputs within tolerance" in lines[0]
