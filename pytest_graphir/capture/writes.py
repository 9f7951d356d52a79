"""Which torch calls may write into an existing tensor: the trace computes the
statistics it holds back (:meth:`pytest_graphir.capture.stats.StatsBatch.flush`)
before any of them runs, so a tensor's statistics are always those it had when the
op that produced it returned.

A call may write when (PyTorch's naming and schema conventions):

* its name ends in one ``_`` (``Tensor.add_``, ``torch.relu_``, ``nn.init.normal_``);
* it is an in-place operator (``__iadd__``, ``__setitem__``, ...) or a property
  setter (``Tensor.data.__set__``);
* it hands out memory that Python code can write without torch seeing it
  (``Tensor.data``, ``numpy``, ``untyped_storage``, ``data_ptr``, ``__array__``,
  ``__dlpack__``);
* it is an ``OpOverload`` whose schema is mutable (``torch.ops.aten.add.out``);
* it is passed ``out=``, or ``inplace=True`` (keyword or at the position of an
  ``inplace`` parameter, as ``F.relu(x, True)``).

Everything else is taken to leave its inputs alone. The classification of a
callable is cached; a call costs one dict lookup and, for the few callables with an
``inplace`` parameter, a look at one argument.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..naming import canonical_op

NEVER = -2
"""Classification of a callable that writes only when given ``out=``."""
ALWAYS = -1
"""Classification of a callable that may always write."""

INPLACE_DUNDERS = frozenset(
    {
        "__setitem__",
        "__delitem__",
        "__set__",
        "__iadd__",
        "__isub__",
        "__imul__",
        "__itruediv__",
        "__ifloordiv__",
        "__imod__",
        "__ipow__",
        "__imatmul__",
        "__ilshift__",
        "__irshift__",
        "__iand__",
        "__ior__",
        "__ixor__",
    }
)
"""Operators that write into their first argument."""

EXPOSES_MEMORY = frozenset(
    {"data", "numpy", "untyped_storage", "storage", "data_ptr", "__array__", "__dlpack__"}
)
"""Tensor methods and properties whose result lets code write the tensor's memory
without a torch op (``x.data.mul_(2)`` does not even bump ``x._version``)."""

_CLASSES: dict[Any, int] = {}


def classify(func: Any) -> int:
    """Classify a callable the interceptors see.

    Args:
        func: a torch function, ``Tensor`` method, property getter or setter,
            ``torch.nn.functional`` function or ``OpOverload``.

    Returns:
        :data:`ALWAYS`, :data:`NEVER`, or the position (>= 0) of its ``inplace``
        parameter: it writes when that argument is true.
    """
    _, qualname = canonical_op(func)
    parts = qualname.split(".")
    last = parts[-1]
    if last in ("__get__", "__set__") and len(parts) > 1:
        if last == "__set__" or parts[-2] in EXPOSES_MEMORY:
            return ALWAYS
        return NEVER
    if last in INPLACE_DUNDERS or last in EXPOSES_MEMORY:
        return ALWAYS
    if last.endswith("_") and not last.endswith("__"):
        return ALWAYS
    schema = getattr(func, "_schema", None)
    if schema is not None and getattr(schema, "is_mutable", False):
        return ALWAYS
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):  # C builtins without a signature
        return NEVER
    for i, param in enumerate(params):
        if param.name == "inplace":
            positional = param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD)
            return i if positional else len(params) + 1_000_000  # keyword only
    return NEVER


def may_write(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    """True when calling ``func(*args, **kwargs)`` may write into an existing tensor
    (see the module docstring). Errs on the side of True; never raises."""
    try:
        cls = _CLASSES.get(func)
    except TypeError:  # unhashable callable
        cls = None
    if cls is None:
        cls = classify(func)
        try:
            _CLASSES[func] = cls
        except TypeError:
            pass
    return writes(cls, args, kwargs)


def writes(cls: int, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    """:func:`may_write` for a callable already classified as ``cls`` (by
    :func:`classify`): the interceptors cache the class with the op's name."""
    if cls == ALWAYS:
        return True
    if kwargs and ("out" in kwargs or kwargs.get("inplace") is True):
        return True
    if 0 <= cls < len(args):
        flag = args[cls]
        return flag is True or (type(flag) is int and flag != 0)
    return False
