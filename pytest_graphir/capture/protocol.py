"""The one protocol both op interceptors follow for a recorded call: flush the
statistics held back if the call may write into an existing tensor, call, record.

The mode (:class:`~.mode.RecordingMode`) runs it from ``__torch_function__``; the
patch interceptor's wrappers and its ``handle_torch_function`` probe
(:mod:`pytest_graphir.capture.patch`) run it at recording depth 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .writes import NEVER, writes

Record = Callable[[str, str, tuple[Any, ...], dict[str, Any], Any], None]
"""``record(name, raw, args, kwargs, out)``, the tracer's op callback."""


class Recorder(Protocol):
    """What an interceptor holds for the protocol: the tracer's op callback, the
    callback that computes held statistics (None: nothing is held), and the flag the
    tracer clears to stop recording."""

    record: Record
    before_write: Callable[[], None] | None
    active: bool


def flush_call_record(
    owner: Recorder,
    func: Callable[..., Any],
    name: str | None,
    raw: str,
    write: int,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Run one intercepted call the way a trace records it.

    Args:
        owner: the interceptor (its ``before_write``, ``record`` and ``active``).
        func: the callable to run, ``func(*args, **kwargs)``.
        name: the canonical op name; None: run without recording (metadata).
        raw: the resolved qualified name, handed to ``record``.
        write: ``func``'s write class (:func:`~.writes.classify`).
        args, kwargs: the call's arguments, as ``__torch_function__`` receives them.

    Returns:
        What ``func`` returned. Whatever ``func``, ``before_write`` or ``record``
        raise goes on unchanged.
    """
    __tracebackhide__ = True  # an op's error is reported at the model's line
    before_write = owner.before_write
    if before_write is not None and (write != NEVER or kwargs) and writes(write, args, kwargs):
        before_write()  # the tensors it may write keep the statistics they had
    out = func(*args, **kwargs)
    if name is not None and owner.active:
        owner.record(name, raw, args, kwargs, out)
    return out
