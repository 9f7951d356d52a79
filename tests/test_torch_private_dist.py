"""The private torch paths the distributed capture and the rank launcher still use,
each pinned: a test here fails when torch moves or removes one, naming what to
change (``tests/test_syrupy_internals.py`` does the same for syrupy)."""

from __future__ import annotations

import inspect

import pytest
import torch
from helpers import resolve_path

from pytest_graphir import parallel
from pytest_graphir.capture import collectives

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")


@pytest.mark.parametrize("path", [collectives.WAIT_TENSOR, collectives.RESOLVE_GROUP])
def test_the_collective_recorder_s_private_paths_exist(path: str) -> None:
    assert callable(resolve_path(path)), path


def test_collective_ops_are_recognised_by_their_schema() -> None:
    """The recorder's rule (:func:`~pytest_graphir.capture.collectives.collective_schema`)
    holds for the ops it must see and none it must not."""
    import torch.distributed  # registers the c10d ops
    import torch.distributed._functional_collectives

    schema = collectives.collective_schema
    for op in ("allreduce_", "send", "recv_", "barrier", "broadcast_", "scatter_"):
        assert schema(getattr(torch.ops.c10d, op).default) is not None, op
    funcol = torch.ops._c10d_functional
    assert schema(funcol.all_reduce.default) is not None
    assert schema(funcol.wait_tensor.default) is None
    assert schema(torch.ops.aten.add.Tensor) is None


_THREADED = ("ProcessLocalGroup", "_install_threaded_pg", "_uninstall_threaded_pg")


@pytest.mark.parametrize(
    "path",
    [f"torch.testing._internal.distributed.multi_threaded_pg.{n}" for n in _THREADED]
    + list(parallel.PRIVATE),
)
def test_the_rank_launcher_s_private_paths_exist(path: str) -> None:
    assert callable(resolve_path(path)), path


def test_every_collective_of_the_threaded_group_is_recorded() -> None:
    """Each method torch's ``ProcessLocalGroup`` defines, other than its bookkeeping,
    is a collective the launcher's group reports (a method with an ``opts``
    parameter, :func:`~pytest_graphir.parallel._threaded_pg`): a collective torch
    adds without one fails here instead of going unrecorded."""
    group = parallel._threaded_pg().ProcessLocalGroup
    methods = {n for n, v in vars(group).items() if inspect.isfunction(v)}
    (recorded,) = [c for c in group.__subclasses__() if c.__name__ == "RecordedProcessLocalGroup"]
    bookkeeping = {"__init__", "__repr__", "size", "getBackendName"}
    assert methods - bookkeeping <= set(vars(recorded))
    assert bookkeeping.isdisjoint(vars(recorded))
    assert {"allreduce", "allgather", "broadcast", "barrier"} <= methods


def test_ddp_rebuilds_its_buckets_from_pre_forward() -> None:
    """The collective recorder leaves out a collective whose innermost Python frame
    outside the package is ``DistributedDataParallel._pre_forward``
    (:meth:`~pytest_graphir.capture.collectives.CollectiveRecorder._context`): the reducer's bucket
    rebuild, called from there. A rename or a move of that call makes the second
    trace of a DDP differ from the first (tests/test_ddp.py)."""
    from torch.nn.parallel import DistributedDataParallel

    source = inspect.getsource(DistributedDataParallel._pre_forward)
    assert "reducer._rebuild_buckets()" in source, "DDP rebuilds its buckets elsewhere"
    assert collectives._DDP_FILE.replace("/", ".") in DistributedDataParallel.__module__ + ".py"
