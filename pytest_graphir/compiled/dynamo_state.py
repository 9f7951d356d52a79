"""Dynamo's process-wide state as the check uses it: reset, forced eager, counters.

Relies on ``torch._dynamo.reset``, ``torch._dynamo.utils.counters`` and
``torch.compiler.set_stance`` (absent in older torch: then nothing is forced).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch._dynamo


def reset_dynamo() -> None:
    """Forget every compiled frame, guard, callback and counter.

    ``torch._dynamo.reset()`` then ``torch._dynamo.utils.counters.clear()``.
    """
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()


@contextlib.contextmanager
def force_eager() -> Iterator[None]:
    """``torch.compiler.set_stance("force_eager")`` where it exists (compiled submodules
    of the model run eagerly while it is traced)."""
    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is None:
        yield
        return
    with set_stance("force_eager"):
        yield


def stats_counter(key: str) -> int | None:
    from torch._dynamo.utils import counters

    value = counters["stats"].get(key)
    return int(value) if value is not None else None
