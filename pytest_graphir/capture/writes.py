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
* it is an ``OpOverload`` whose schema is mutable (``torch.ops.aten.add.out``), or an
  ``OpOverloadPacket`` (``torch.ops.mylib.fused_add_``) with a mutable overload;
* it is a ``torch.distributed`` function (collectives write their tensors in place,
  and a gloo ``all_reduce`` does not even bump ``_version``);
* it is passed ``out=`` (not None), or a true ``inplace`` (keyword or at the position
  of an ``inplace`` parameter, as ``F.relu(x, True)``);
* it is one of :data:`CONDITIONAL_WRITERS`, whose write depends on another argument:
  ``F.batch_norm`` and ``F.instance_norm`` update the running statistics they are
  given (without bumping ``_version``), ``F.embedding`` with ``max_norm`` renormalises
  the weight rows it reads.

Everything else is taken to leave its inputs alone. The classification of a
callable is cached (:func:`~.mode.op_info`); a call costs one dict lookup and, for
the few callables with a conditional write, a look at one argument.
"""

from __future__ import annotations

import inspect
import operator
from typing import Any

from ..opnames import canonical_op

NEVER = -2
"""Classification of a callable that writes only when given ``out=``."""
ALWAYS = -1
"""Classification of a callable that may always write."""

INPLACE_DUNDERS = frozenset(
    {"__setitem__", "__delitem__", "__set__"}
    | {n for n in dir(operator) if n.startswith("__i") and f"__{n[3:]}" in dir(operator)}
)
"""Operators that write into their first argument: item assignment, a property
setter, and the in-place operators of the :mod:`operator` module (``__iadd__`` ...)."""

EXPOSES_MEMORY = frozenset(
    {"data", "numpy", "untyped_storage", "storage", "data_ptr", "__array__", "__dlpack__"}
)
"""Tensor methods and properties whose result lets code write the tensor's memory
without a torch op (``x.data.mul_(2)`` does not even bump ``x._version``)."""

CONDITIONAL_WRITERS: dict[str, tuple[str, bool]] = {
    "torch.nn.functional.batch_norm": ("training", False),
    "torch.nn.functional.instance_norm": ("use_input_stats", False),
    "torch.nn.functional.embedding": ("max_norm", True),
    "torch.nn.functional.embedding_bag": ("max_norm", True),
}
"""Functions that write one of their tensor arguments depending on another argument:
qualified name -> (that argument's name, whether "given and not None" is enough; else
it must be true). Each ``inplace`` parameter is handled the same way (``inplace``,
true)."""

_CONDITIONS: list[tuple[str, int, bool]] = []
"""``(argument name, position or -1, not-None suffices)``; a classification >= 0 is
an index into this list (each distinct condition once)."""


def classify(func: Any) -> int:
    """Classify a callable the interceptors see.

    Args:
        func: a torch function, ``Tensor`` method, property getter or setter,
            ``torch.nn.functional`` function, ``OpOverload`` or ``OpOverloadPacket``.

    Returns:
        :data:`ALWAYS`, :data:`NEVER`, or an index (>= 0) of the condition on one
        argument under which it writes (see :func:`writes`).
    """
    _, qualname = canonical_op(func)
    parts = qualname.split(".")
    last = parts[-1]
    if last in ("__get__", "__set__") and len(parts) > 1:
        return ALWAYS if last == "__set__" or parts[-2] in EXPOSES_MEMORY else NEVER
    if last in INPLACE_DUNDERS or last in EXPOSES_MEMORY:
        return ALWAYS
    if last.endswith("_") and not last.endswith("__"):
        return ALWAYS
    if qualname.startswith("torch.distributed."):
        return ALWAYS
    if _mutable_schema(func):
        return ALWAYS
    name, not_none = CONDITIONAL_WRITERS.get(qualname, ("inplace", False))
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):  # C builtins without a signature
        return NEVER
    for i, param in enumerate(params):
        if param.name == name:
            positional = param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD)
            condition = (name, i if positional else -1, not_none)
            if condition not in _CONDITIONS:
                _CONDITIONS.append(condition)
            return _CONDITIONS.index(condition)
    return NEVER


def _mutable_schema(func: Any) -> bool:
    """True for an ``OpOverload`` with a mutable schema, or an ``OpOverloadPacket`` with
    such an overload (``torch.ops.mylib.op(x)`` reaches the interceptor as the packet)."""
    schema = getattr(func, "_schema", None)
    if schema is not None:
        return bool(getattr(schema, "is_mutable", False))
    if type(func).__name__ != "OpOverloadPacket":
        return False
    try:
        # a written positional argument (`Tensor(a!) x`); written `out=` arguments are
        # keyword-only, and the call's own out= is checked by writes()
        return any(
            a.alias_info is not None and a.alias_info.is_write and not a.kwarg_only
            for o in func.overloads()
            for a in getattr(func, o)._schema.arguments
        )
    except Exception:  # an overload that cannot be resolved: assume it writes
        return True


def may_write(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    """True when calling ``func(*args, **kwargs)`` may write into an existing tensor
    (see the module docstring). Errs on the side of True; never raises."""
    return writes(classify(func), args, kwargs)


def writes(cls: int, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    """:func:`may_write` for a callable already classified as ``cls`` (by
    :func:`classify`): the mode caches the class with the op's name
    (:func:`~.mode.op_info`)."""
    if cls == ALWAYS or (kwargs and kwargs.get("out") is not None):
        return True
    if cls < 0:
        return False
    name, position, not_none = _CONDITIONS[cls]
    if kwargs and name in kwargs:
        value = kwargs[name]
    elif 0 <= position < len(args):
        value = args[position]
    else:
        return False
    if not_none:
        return value is not None
    try:
        return bool(value)
    except Exception:  # a value without a truth value: assume it writes
        return True
