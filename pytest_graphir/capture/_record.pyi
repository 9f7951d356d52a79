"""Type stub of the optional C extension (``_record.c``; see ``tracer._Trace.op_recorder``)."""

from typing import Any

class Recorder:
    """``record(op, raw, args, kwargs, out)`` in C for the common op, the ``fallback``
    (``_Trace.record_op``) for every other call.

    Raises:
        TypeError: not 19 positional arguments, or one of the wrong type.
    """

    def __init__(self, *fields: Any) -> None: ...
    def __call__(
        self, op: str, raw: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, /
    ) -> None: ...
