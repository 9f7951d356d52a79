"""The functional-op interceptor: a ``torch.overrides.TorchFunctionMode``.

Every call of a ``torch.*``, ``torch.nn.functional.*`` or ``Tensor`` method,
operator or property getter reaches ``__torch_function__`` while the mode is on
the stack. While the handler runs, PyTorch pops the mode, so whatever the op calls
internally (``F.dropout`` -> ``torch.dropout``) is not seen: each user-visible op
is recorded once. Metadata queries are dropped by the canonical naming.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.overrides import TorchFunctionMode

from ..opnames import canonical_op
from .protocol import Record, flush_call_record
from .writes import classify

_OPS: dict[Any, tuple[str | None, str, int]] = {}
"""Per callable: canonical name (None: metadata, not recorded), resolved qualified
name, and whether it may write in place (:func:`~.writes.classify`). One dict
lookup per call on the hot path.

Keyed by the callable's equality: one C++ builtin exposed under two names
(``torch.mm`` and ``torch.spmm``, ``torch.dsmm``) is one key, answered with the name
of whichever was cached first. That is right while only the mode fills it, since
``__torch_function__`` always passes the object named after the ATen op; a caller
that looks up another alias's object here would rename the op for the whole
process (``tests/test_opnames.py::test_dense_mm_is_recorded_as_mm_by_both_interceptors``)."""

MAX_CACHED = 8192
"""Most callables :data:`_OPS` keeps; it is emptied when full (callables made per
call, a fresh partial each time, would otherwise pile up)."""


def op_info(func: Any) -> tuple[str | None, str, int]:
    """``(canonical name, qualified name, write class)`` of ``func``, cached (an
    unhashable callable is resolved every time)."""
    try:
        info = _OPS.get(func)
    except TypeError:  # unhashable callable: resolved every time
        return (*canonical_op(func), classify(func))
    if info is None:
        if len(_OPS) >= MAX_CACHED:
            _OPS.clear()
        info = _OPS[func] = (*canonical_op(func), classify(func))
    return info


class RecordingMode(TorchFunctionMode):
    """Calls ``record(name, raw, args, kwargs, out)`` after every recorded op.

    Args:
        record: the tracer's op callback; it runs with this mode popped, so torch
            calls it makes are not recorded.
        before_write: called (with no arguments) before any call that may write
            into an existing tensor (:func:`~pytest_graphir.capture.writes.may_write`):
            the tracer computes the statistics it holds back. None: not called.
    """

    def __init__(
        self,
        record: Record,
        before_write: Callable[[], None] | None = None,
    ):
        super().__init__()
        self.record = record
        self.before_write = before_write
        self.active = True

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        __tracebackhide__ = True  # an op's error is reported at the model's line
        name, raw, write = op_info(func)
        return flush_call_record(self, func, name, raw, write, args, kwargs or {})
