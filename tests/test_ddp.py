"""``DistributedDataParallel`` traced on its ranks (:func:`pytest_graphir.parallel.run_ranks`),
and a rank that dies by a signal named in the :class:`~pytest_graphir.parallel.RankError`."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from pytest_graphir import trace
from pytest_graphir.parallel import RankError, assert_ranks_agree, run_ranks
from pytest_graphir.serialize import dumps, loads

TORCH = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
READABLE = "sum" if TORCH < (2, 13) else None
"""What a missing ``reduce`` stands for: torch 2.9's boxed ``ReduceOp`` passed to a
c10d op (gloo) has no ``op`` method, so the reduce op cannot be read there; on
torch 2.13 it must be recorded."""

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="no torch.distributed")


def _rank1_segfaults(rank: int, world: int) -> None:
    if rank == 1:
        os.kill(os.getpid(), signal.SIGSEGV)  # the line the stack must name
    dist.barrier()


@pytest.mark.distributed
@pytest.mark.slow
def test_a_gloo_rank_killed_by_a_signal_is_named_with_its_stack() -> None:
    with pytest.raises(RankError) as info:
        run_ranks(_rank1_segfaults, backend="gloo", timeout=30)
    message = str(info.value)
    assert "rank 1 killed by SIGSEGV" in message.partition("\n")[0]
    line = _rank1_segfaults.__code__.co_firstlineno + 2
    assert f'File "{__file__}", line {line} in _rank1_segfaults' in message
    assert "Fatal Python error: Segmentation fault" in info.value.tracebacks[1]


class _Net(nn.Module):
    """A child called ``module`` of the user's own: it keeps its name under DDP."""

    def __init__(self) -> None:
        super().__init__()
        self.module, self.act, self.head = nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.module(x)))


def _ddp_traced(
    rank: int, world: int, bucket_cap_mb: float | None = None, steps: int = 0
) -> dict[str, Any]:
    """A DDP of :class:`_Net` traced with ``backward=True`` on this rank's own batch
    after ``steps`` training steps, then one plain step's gradients on that batch."""
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(_Net(), bucket_cap_mb=bucket_cap_mb)
    x = torch.randn(4, 8) + rank  # each rank its own batch
    for _ in range(steps):
        model(x).sum().backward()
        model.zero_grad(set_to_none=True)
    text = dumps(trace(model, x, backward=True))
    assert all(p.grad is None for p in model.parameters())  # put back as they were
    model(x).sum().backward()
    plain = {name: p.grad.clone() for name, p in model.module.named_parameters()}
    return {"text": text, "plain": plain}


def _check_ddp(results: list[dict[str, Any]], buckets: int) -> None:
    texts = [r["text"] for r in results]
    assert_ranks_agree(texts)
    docs = [loads(t) for t in texts]
    names = ["module.weight", "module.bias", "head.weight", "head.bias"]
    for doc, result in zip(docs, results, strict=True):
        assert doc["meta"]["model"] == "_Net"
        assert doc["meta"]["args"] == ["x"] == list(doc["inputs"])  # _Net.forward's name
        assert doc["plan"] == {"<root>": {"wrapper": "DistributedDataParallel"}}
        assert list(doc["params"]) == names == list(doc["grads"]) == list(result["plain"])
        assert {k for k in doc["nodes"] if "#" not in k} == {"module", "act", "head"}
        assert set(doc["backward"]) == {"<root>", "module", "act", "head"}
        for name, grad in result["plain"].items():  # the synced gradients of a real step
            entry = doc["grads"][name]
            assert entry["mean"] == pytest.approx(grad.mean().item(), rel=1e-4, abs=1e-6)
            assert entry["min"] == pytest.approx(grad.min().item(), rel=1e-4, abs=1e-6)
            assert entry["max"] == pytest.approx(grad.max().item(), rel=1e-4, abs=1e-6)
        reduces = list(doc["collectives"].values())
        assert [e["op"] for e in reduces] == ["all_reduce"] * buckets
        assert {(e["phase"], e.get("reduce", READABLE), e["group_size"]) for e in reduces} == {
            ("backward", "sum", 2)
        }
        assert sum(e["bytes"] for e in reduces) == 4 * (8 * 8 + 8 + 2 * 8 + 2)
    # the ranks' batches differ, their gradients after the all-reduce do not
    assert docs[0]["grads"] == docs[1]["grads"]
    assert docs[0]["nodes"]["module/linear#0"] != docs[1]["nodes"]["module/linear#0"]
    for name, grad in results[0]["plain"].items():
        torch.testing.assert_close(grad, results[1]["plain"][name])


def test_ddp_on_threaded_ranks_records_synced_gradients_and_its_all_reduce() -> None:
    _check_ddp(run_ranks(_ddp_traced, timeout=30), buckets=1)


def test_ddp_buckets_are_one_all_reduce_each() -> None:
    """DDP's first backward all-reduces one bucket of its default first-bucket size;
    it then rebuilds its buckets to ``bucket_cap_mb`` (two here)."""
    _check_ddp(run_ranks(_ddp_traced, timeout=30, args=(0.0001, 1)), buckets=2)


def _ddp_traced_thrice(rank: int, world: int, backend: str) -> list[str]:
    from torch.nn.parallel import DistributedDataParallel

    model, x = DistributedDataParallel(_Net()), torch.randn(4, 8) + rank
    return [dumps(trace(model, x, backward=True)) for _ in range(3)]


def _ddp_texts(backend: str) -> list[list[str]]:
    return run_ranks(_ddp_traced_thrice, backend=backend, timeout=60, args=(backend,))


@pytest.mark.parametrize(
    "backend", ["threaded", pytest.param("gloo", marks=[pytest.mark.distributed, pytest.mark.slow])]
)
def test_a_ddp_trace_is_the_same_on_the_next_step(backend: str) -> None:
    """The second forward after construction rebuilds DDP's buckets and broadcasts
    their layout once, from DDP's own ``_pre_forward``: the reducer's bookkeeping, not
    the model's, so the second trace equals the first (before: two ``broadcast``
    nodes in the second only)."""
    for first, second, third in _ddp_texts(backend):
        assert first == second == third
        assert "broadcast" not in second


def _ddp_unused(rank: int, world: int) -> dict[str, Any]:
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(_Net(), find_unused_parameters=True)
    return loads(dumps(trace(model, torch.randn(4, 8) + rank, backward=True)))


def test_ddp_s_own_code_is_not_recorded_its_collectives_are() -> None:
    """``find_unused_parameters``: DDP clones the outputs (``_DDPSink``) and
    all-reduces its bitmap of unused parameters after the bucket."""
    for doc in run_ranks(_ddp_unused, timeout=30):
        assert [k for k in doc["nodes"] if "/" not in k] == ["module", "act", "head"]
        assert doc["outputs"]["output"]["ref"] == "$head/linear#0"
        reduces = list(doc["collectives"].values())
        assert [(e["op"], e["dtype"]) for e in reduces] == [
            ("all_reduce", "float32"),
            ("all_reduce", "int32"),
        ]


@pytest.mark.distributed
@pytest.mark.slow
def test_ddp_on_gloo_ranks_records_synced_gradients_and_its_all_reduce() -> None:
    _check_ddp(run_ranks(_ddp_traced, backend="gloo", timeout=60), buckets=1)
