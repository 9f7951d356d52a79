"""``DistributedDataParallel`` traced on its ranks (:func:`pytest_graphir.parallel.run_ranks`),
and a rank that dies by a signal named in the :class:`~pytest_graphir.parallel.RankError`."""

from __future__ import annotations

import os
import signal

import pytest
import torch.distributed as dist

from pytest_graphir.parallel import RankError, run_ranks

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
