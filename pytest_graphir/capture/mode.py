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

from ..naming import canonical_op


class RecordingMode(TorchFunctionMode):
    """Calls ``record(name, raw, args, kwargs, out)`` after every recorded op.

    Args:
        record: the tracer's op callback; it runs with this mode popped, so torch
            calls it makes are not recorded.
    """

    def __init__(self, record: Callable[[str, str, tuple[Any, ...], dict[str, Any], Any], None]):
        super().__init__()
        self.record = record
        self.active = True

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        __tracebackhide__ = True  # an op's error is reported at the model's line
        if kwargs is None:
            kwargs = {}
        out = func(*args, **kwargs)
        if self.active:
            name, raw = canonical_op(func)
            if name is not None:
                self.record(name, raw, args, kwargs, out)
        return out
