"""Canonical op names shared by every interceptor (and, later, by Dynamo FX graphs).

The rules (measured in ``shared/research/torch-notes.md`` §5d, where they make the
eager trace of GPT-2 small and its Dynamo graph agree op for op):

1. Resolve the callable with :func:`torch.overrides.resolve_name` (cached), falling
   back to ``__module__.__qualname__``.
2. Strip the namespace (``torch.nn.functional.``, ``torch._C._nn.``, ``torch.Tensor.``,
   ``torch.`` ...), so ``F.linear`` and ``torch._C._nn.linear`` are both ``linear``.
3. Map operator dunders to the op (``__add__``/``__radd__`` -> ``add``,
   ``__getitem__`` -> ``getitem``) and aliases to one spelling (``divide`` -> ``div``).
4. Property getters: ``x.T`` -> ``t``, ``x.mT`` -> ``transpose``; other property
   reads (``shape``, ``dtype``, ``device``) are metadata.
5. Metadata queries (``size``, ``dim``, ``dtype``, ``item`` ...) return ``None`` and
   are not recorded: they are not graph ops and Dynamo graphs do not contain them.
"""

from __future__ import annotations

import functools
from typing import Any

METADATA = frozenset(
    {
        "size", "dim", "numel", "stride", "shape", "dtype", "device", "ndim", "requires_grad",
        "is_cuda", "layout", "grad_fn", "is_floating_point", "is_complex", "data_ptr",
        "is_contiguous", "element_size", "get_device", "len", "bool", "item", "tolist", "format",
        "repr", "hash", "index", "int", "float_", "is_sparse", "is_quantized", "is_meta", "names",
        "is_nested", "iter", "is_tensor", "nelement", "ndimension", "storage_offset",
        "untyped_storage", "is_leaf", "grad", "_version", "output_nr", "is_inference",
        "has_names", "is_set_to", "is_signed", "dim_order", "_base", "is_mps", "is_xpu",
        "itemsize", "nbytes", "is_pinned", "is_shared", "requires_grad_", "retain_grad",
        "register_hook", "_is_view", "reduce_ex", "deepcopy", "setstate", "getstate",
        "contains", "get_default_dtype", "is_grad_enabled", "is_autocast_enabled",
        "is_inference_mode_enabled", "is_nonzero",
    }
)
"""Canonical names of metadata queries and object-protocol calls that are not ops."""

PROPERTY_OPS = {"T": "t", "mT": "transpose", "H": "adjoint", "mH": "adjoint", "real": "real",
                "imag": "imag", "data": "detach"}
"""Tensor properties that are real ops, with their canonical names."""

_DUNDER = {
    "__add__": "add", "__radd__": "add", "__iadd__": "add_", "__sub__": "sub", "__rsub__": "rsub",
    "__isub__": "sub_", "__mul__": "mul", "__rmul__": "mul", "__imul__": "mul_",
    "__truediv__": "div", "__rtruediv__": "rdiv", "__itruediv__": "div_", "__div__": "div",
    "__rdiv__": "rdiv", "__floordiv__": "floor_divide", "__rfloordiv__": "rfloordiv",
    "__mod__": "remainder", "__rmod__": "rremainder", "__pow__": "pow", "__rpow__": "rpow",
    "__ipow__": "pow_", "__matmul__": "matmul", "__rmatmul__": "matmul", "__neg__": "neg",
    "__pos__": "positive", "__abs__": "abs", "__invert__": "bitwise_not",
    "__and__": "bitwise_and", "__rand__": "bitwise_and", "__or__": "bitwise_or",
    "__ror__": "bitwise_or", "__xor__": "bitwise_xor", "__rxor__": "bitwise_xor",
    "__lshift__": "bitwise_left_shift", "__rshift__": "bitwise_right_shift",
    "__iand__": "bitwise_and_", "__ior__": "bitwise_or_", "__ixor__": "bitwise_xor_",
    "__eq__": "eq", "__ne__": "ne", "__lt__": "lt", "__le__": "le", "__gt__": "gt", "__ge__": "ge",
    "__getitem__": "getitem", "__setitem__": "setitem", "__len__": "len", "__bool__": "bool",
    "__index__": "index", "__int__": "int", "__float__": "float_", "__repr__": "repr",
    "__format__": "format", "__hash__": "hash", "__iter__": "iter", "__contains__": "contains",
    "__reduce_ex__": "reduce_ex", "__deepcopy__": "deepcopy", "__setstate__": "setstate",
    "__getstate__": "getstate", "__array__": "tolist", "__dlpack__": "tolist",
}

_ALIAS = {
    "true_divide": "div", "divide": "div", "multiply": "mul", "subtract": "sub",
    "absolute": "abs", "concat": "cat", "concatenate": "cat", "swapaxes": "transpose",
    "swapdims": "transpose", "greater": "gt", "greater_equal": "ge", "less": "lt",
    "less_equal": "le", "not_equal": "ne", "clip": "clamp", "arccos": "acos", "arcsin": "asin",
    "arctan": "atan", "negative": "neg", "moveaxis": "movedim", "fix": "trunc", "rpow": "pow",
}

_PREFIXES = (
    "torch.nn.functional.", "torch._C._nn.", "torch._C._VariableFunctions.", "torch._C._linalg.",
    "torch._C._special.", "torch._C._fft.", "torch._C.TensorBase.", "torch._C._TensorBase.",
    "torch.Tensor.", "torch.functional.", "torch._VF.", "torch.",
)


def canonical_from_qualname(qualname: str) -> str | None:
    """Return the canonical op name for a resolved qualified name, or None for metadata.

    Args:
        qualname: dotted name as given by ``torch.overrides.resolve_name``, e.g.
            ``"torch.nn.functional.linear"``, ``"torch.Tensor.__add__"``,
            ``"torch.Tensor.T.__get__"``.

    Returns:
        The canonical op name (``"linear"``, ``"add"``, ``"t"``), or ``None`` when
        the call is a metadata query (``shape``, ``size``, ``item`` ...).
    """
    name = qualname
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    if name.endswith(".__get__") or name.endswith(".__set__"):
        prop = name.rsplit(".", 2)[-2]
        return PROPERTY_OPS.get(prop) if name.endswith(".__get__") else None
    name = _DUNDER.get(name, name)
    name = _ALIAS.get(name, name)
    if name in METADATA:
        return None
    return name


@functools.lru_cache(maxsize=4096)
def _resolve(func: Any) -> tuple[str | None, str]:
    import torch.overrides

    qualname: str | None
    try:
        qualname = torch.overrides.resolve_name(func)
    except Exception:  # resolve_name raises on exotic callables; fall back below
        qualname = None
    if qualname is None:
        owner = getattr(func, "__self__", None)
        if type(func).__name__ == "method-wrapper" and owner is not None:
            # getset descriptor __get__ of a property such as Tensor.T
            qualname = f"torch.Tensor.{getattr(owner, '__name__', '?')}.__get__"
        else:
            module = getattr(func, "__module__", None) or "?"
            qualname = f"{module}.{getattr(func, '__qualname__', getattr(func, '__name__', '?'))}"
    return canonical_from_qualname(qualname), qualname


def canonical_op(func: Any) -> tuple[str | None, str]:
    """Return ``(canonical name or None for metadata, resolved qualified name)`` for a callable.

    Cached per callable; unhashable callables are resolved every time.
    """
    try:
        return _resolve(func)
    except TypeError:  # unhashable callable
        return _resolve.__wrapped__(func)
