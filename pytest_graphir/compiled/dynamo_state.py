"""Dynamo's process-wide state as the check uses it: reset and logs.

Relies on ``torch._dynamo.reset``, ``torch._dynamo.utils.counters`` and the
``torch.__trace`` logger of ``torch._logging``.
"""

from __future__ import annotations

import contextlib
import logging
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


TRACE_LOGGER = "torch.__trace"
"""``torch._logging``'s structured-trace logger (``trace_structured``): always at DEBUG,
never propagating, read by ``TORCH_TRACE`` / tlparse through torch's own handler."""


@contextlib.contextmanager
def quiet_trace_log() -> Iterator[None]:
    """Keep torch's structured-trace records out of every handler but torch's own.

    pytest (``_pytest.logging.catching_logs``) attaches its capture handlers to each
    logger that does not propagate, ``torch.__trace`` included; that logger is always
    at DEBUG, so every compile step would land in a test's captured log as an empty
    DEBUG line, and its payload would be built for nothing. For the duration, the
    handlers that are not torch's (their class defined outside ``torch``) are taken off
    that logger, and put back afterwards, whatever happened; torch's own handler (a
    ``TORCH_TRACE`` file) keeps every record.
    """
    trace_log = logging.getLogger(TRACE_LOGGER)
    foreign = [h for h in trace_log.handlers if type(h).__module__.split(".")[0] != "torch"]
    for handler in foreign:
        trace_log.removeHandler(handler)
    try:
        yield
    finally:
        for handler in foreign:
            trace_log.addHandler(handler)
