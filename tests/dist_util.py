"""Run a function on the ranks of the ``threaded`` process group: ranks as threads of
this process, real collectives, no ports (``torch.testing._internal.distributed.
multi_threaded_pg``). For tests only; ``pytest_graphir.parallel`` is the user-facing
launcher."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.testing._internal.distributed import multi_threaded_pg as threaded


def run_threaded(
    fn: Callable[[int], Any], world_size: int = 2, timeout: float = 120.0
) -> list[Any]:
    """``[fn(0), fn(1), ...]``, each called on its own thread after
    ``dist.init_process_group("threaded", rank=r, ...)``; the process group is
    destroyed and torch's global distributed state restored afterwards.

    Raises:
        TimeoutError: a rank did not finish within ``timeout`` seconds (named).
        BaseException: the first failing rank's exception (the others are released).
    """
    threaded._install_threaded_pg()
    c10d: Any = torch._C._distributed_c10d
    c10d._set_thread_isolation_mode(True)
    store = dist.HashStore()  # type: ignore[attr-defined]
    results: list[Any] = [None] * world_size
    errors: dict[int, BaseException] = {}

    def rank_main(rank: int) -> None:
        try:
            dist.init_process_group("threaded", rank=rank, world_size=world_size, store=store)
            results[rank] = fn(rank)
        except BaseException as e:  # re-raised on the caller's thread
            errors[rank] = e
            threaded.ProcessLocalGroup.exception_handle(e)  # wake the other ranks
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world_size)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout)
        hung = [r for r, t in enumerate(threads) if t.is_alive()]
        if hung:
            raise TimeoutError(f"rank(s) {hung} still running after {timeout} s")
        if errors:
            raise errors[min(errors)]
        return results
    finally:
        threaded.ProcessLocalGroup.reset()
        threaded._uninstall_threaded_pg()
        c10d._set_thread_isolation_mode(False)
