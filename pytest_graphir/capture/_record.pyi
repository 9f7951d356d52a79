"""Type stub of the optional C extension (``_record.c``; see ``tracer._Trace.op_recorder``)."""

from typing import Any

MAX_CONST_LIST: int
"""``tracer.MAX_CONST_LIST`` as compiled in (a test checks they agree)."""
REF_PREFIX: str
"""``names.REF_PREFIX`` as compiled in (a test checks they agree)."""

def name_tensors(
    model: Any,
    names: dict[Any, str],
    entries: dict[int, Any],
    named: set[str],
    unqueued: set[int],
    meta_type: Any,
    dtype_name: Any,
    lazy_type: Any,
    check_not_inference: Any,
    named_modules: Any,
    disable: Any,
    /,
) -> bool:
    """``_Trace._name_tensors`` in C: True when done, False (partly filled: the caller
    clears it) where a module's class overrides ``named_modules`` or
    ``__getattribute__`` or defines ``_parameters``, ``_buffers`` or ``_modules``, or
    where the tree is deeper than 200 modules.

    Raises:
        RuntimeError: a parameter or buffer made under ``torch.inference_mode()``
            (``check_not_inference``'s message). TypeError: wrong argument types.
            ValueError: ``names`` or ``entries`` not empty (they are the walk's memo).
    """

class Recorder:
    """``record(op, raw, args, kwargs, out)`` in C for the common op, the ``fallback``
    (``_Trace.record_op``) for every other call.

    Raises:
        TypeError: not 31 positional arguments, or one of the wrong type.
    """

    def __init__(self, *fields: Any) -> None: ...
    def __call__(
        self, op: str, raw: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, /
    ) -> None: ...
    def pre(self, module: Any, args: tuple[Any, ...], /) -> None:
        """The global forward pre-hook: ``ModuleScope._pre`` + ``_Trace.enter_module``
        for an ordinary module, ``ModuleScope._pre`` for every other call."""

    def post(self, module: Any, args: tuple[Any, ...], *rest: Any) -> None:
        """The global forward hook (``with_kwargs=True``): ``ModuleScope._post`` +
        ``_Trace.exit_module`` for an ordinary module, ``ModuleScope._post`` for every
        other call (the exception path's ``(module, args, output)`` included)."""

class Handler:
    """``RecordingMode.__torch_function__(func, types, args=(), kwargs=None)`` in C.

    Raises:
        TypeError: not 8 positional arguments, or ``ops`` not a dict.
    """

    __self__: Any
    def __init__(self, *fields: Any) -> None: ...
    def __call__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None, /
    ) -> Any: ...
