"""Canonical op names shared by every interceptor (and, later, by Dynamo FX graphs).

The rules (measured in ``docs/torch-notes.md``, *Canonical op naming*, where they make the
eager trace of GPT-2 small and its Dynamo graph agree op for op):

1. Resolve the callable with :func:`torch.overrides.resolve_name` (cached), falling
   back to ``__module__.__qualname__``.
2. Strip the namespace (``torch.nn.functional.``, ``torch._C._nn.``, ``torch.Tensor.``,
   ``torch.`` ...), so ``F.linear`` and ``torch._C._nn.linear`` are both ``linear``.
3. Map operator dunders to the op (``__add__``/``__radd__`` -> ``add``,
   ``__getitem__`` -> ``getitem``) and aliases to one spelling (``divide`` -> ``div``).
4. Property getters: ``x.T`` -> ``t``, ``x.mT`` -> ``transpose`` (and the ATen ops
   newer Dynamo writes for them, ``numpy_T``, ``mT``, the same); other property reads
   (``shape``, ``dtype``, ``device``) are metadata.
5. Metadata queries (``size``, ``dim``, ``dtype``, ``item`` ...) return ``None`` and
   are not recorded: they are not graph ops and Dynamo graphs do not contain them.
"""

from __future__ import annotations

import contextlib
import functools
import pkgutil
from typing import Any

METADATA = frozenset(
    {
        "size",
        "dim",
        "numel",
        "stride",
        "shape",
        "dtype",
        "device",
        "ndim",
        "requires_grad",
        "is_cuda",
        "layout",
        "grad_fn",
        "is_floating_point",
        "is_complex",
        "data_ptr",
        "is_contiguous",
        "element_size",
        "get_device",
        "len",
        "format",
        "hash",
        "index",
        "item",
        "tolist",
        "is_sparse",
        "is_quantized",
        "is_meta",
        "names",
        "is_nested",
        "is_tensor",
        "nelement",
        "ndimension",
        "storage_offset",
        "untyped_storage",
        "is_leaf",
        "grad",
        "_version",
        "output_nr",
        "is_inference",
        "has_names",
        "is_set_to",
        "is_signed",
        "dim_order",
        "_base",
        "is_mps",
        "is_xpu",
        "itemsize",
        "nbytes",
        "is_pinned",
        "is_shared",
        "requires_grad_",
        "retain_grad",
        "register_hook",
        "_is_view",
        "get_default_dtype",
        "is_grad_enabled",
        "is_autocast_enabled",
        "is_inference_mode_enabled",
        "is_nonzero",
    }
)
"""Canonical names of metadata queries and object-protocol calls that are not ops."""

PROPERTY_OPS = {
    "T": "t",
    "mT": "transpose",
    "H": "adjoint",
    "mH": "adjoint",
    "real": "real",
    "imag": "imag",
    "data": "detach",
}
"""Tensor properties that are real ops, with their canonical names."""

PROPERTY_ATEN_OPS = {
    "numpy_T": "t",
    "mT": "transpose",
    "matrix_H": "adjoint",
    "mH": "adjoint",
}
"""The ATen ops behind those properties, as newer Dynamo puts them in a graph
(``x.T`` as ``torch.ops.aten.numpy_T`` where older torch wrote ``getattr(x, "T")``),
with the canonical name the eager property read has."""

REFLECTED = {"sub": "rsub", "div": "rdiv", "floor_divide": "rfloordiv", "remainder": "rremainder"}
"""Ops whose reflected form eager records under its own name (``2 - x`` -> ``rsub``,
:data:`_DUNDER`'s ``__rsub__``); the other reflected operators record their
operator's op (``__radd__`` -> ``add``)."""

_DUNDER: dict[str, str | None] = {
    "__add__": "add",
    "__radd__": "add",
    "__iadd__": "add_",
    "__sub__": "sub",
    "__rsub__": "rsub",
    "__isub__": "sub_",
    "__mul__": "mul",
    "__rmul__": "mul",
    "__imul__": "mul_",
    "__truediv__": "div",
    "__rtruediv__": "rdiv",
    "__itruediv__": "div_",
    "__idiv__": "div_",
    "__div__": "div",
    "__rdiv__": "rdiv",
    "__floordiv__": "floor_divide",
    "__rfloordiv__": "rfloordiv",
    "__mod__": "remainder",
    "__rmod__": "rremainder",
    "__pow__": "pow",
    "__rpow__": "pow",
    "__ipow__": "pow_",
    "__matmul__": "matmul",
    "__rmatmul__": "matmul",
    "__neg__": "neg",
    "__pos__": "positive",
    "__abs__": "abs",
    "__invert__": "bitwise_not",
    "__and__": "bitwise_and",
    "__rand__": "bitwise_and",
    "__or__": "bitwise_or",
    "__ror__": "bitwise_or",
    "__xor__": "bitwise_xor",
    "__rxor__": "bitwise_xor",
    "__lshift__": "bitwise_left_shift",
    "__rshift__": "bitwise_right_shift",
    "__iand__": "bitwise_and_",
    "__ior__": "bitwise_or_",
    "__ixor__": "bitwise_xor_",
    "__eq__": "eq",
    "__ne__": "ne",
    "__lt__": "lt",
    "__le__": "le",
    "__gt__": "gt",
    "__ge__": "ge",
    "__getitem__": "getitem",
    "__setitem__": "setitem",
    "__len__": None,
    "__bool__": None,
    "__index__": None,
    "__int__": None,
    "__float__": None,
    "__repr__": None,
    "__format__": None,
    "__hash__": None,
    "__iter__": None,
    "__contains__": None,
    "__reduce_ex__": None,
    "__deepcopy__": None,
    "__setstate__": None,
    "__getstate__": None,
    "__array__": None,
    "__dlpack__": None,
}

_ALIAS = {
    "true_divide": "div",
    "divide": "div",
    "multiply": "mul",
    "subtract": "sub",
    "absolute": "abs",
    "concat": "cat",
    "concatenate": "cat",
    "swapaxes": "transpose",
    "swapdims": "transpose",
    "greater": "gt",
    "greater_equal": "ge",
    "less": "lt",
    "less_equal": "le",
    "not_equal": "ne",
    "clip": "clamp",
    "arccos": "acos",
    "arcsin": "asin",
    "arctan": "atan",
    "negative": "neg",
    "moveaxis": "movedim",
    "fix": "trunc",
}

_RENAMED: dict[str, str | None] = {**_DUNDER, **_ALIAS, **PROPERTY_ATEN_OPS}
"""Every name that is not the op's canonical one: operator dunders (None for an
object-protocol dunder, ``__len__``, ``__repr__``, ``__array__`` ...: no op), aliases,
the ATen ops of properties. The three tables share no key and no value of one is a
key of another, so one lookup gives the canonical name."""

_PREFIXES = (
    "torch.nn.functional.",
    "torch._C._nn.",
    "torch._C._VariableFunctions.",
    "torch._C._linalg.",
    "torch._C._special.",
    "torch._C._fft.",
    "torch._C.TensorBase.",
    "torch.Tensor.",
    "torch.functional.",
    "torch._VF.",
    "torch.",
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
    name = next((qualname.removeprefix(p) for p in _PREFIXES if qualname.startswith(p)), qualname)
    if name.endswith((".__get__", ".__set__")):
        return PROPERTY_OPS.get(name.rsplit(".", 2)[-2]) if name.endswith(".__get__") else None
    op = _RENAMED.get(name, name)
    return None if op in METADATA else op


_BUILTIN_TYPES = (type(len), type(str.join))
"""``builtin_function_or_method`` and ``method_descriptor``: callables whose ``__name__``
is the name they are registered under."""


@functools.lru_cache(maxsize=4096)
def _resolve(func: Any, name: str | None) -> tuple[str | None, str]:
    """:func:`canonical_op` for ``func`` called by the name ``name`` (its ``__name__``):
    part of the cache key, since one builtin exposed under two names compares equal
    under both (``torch.mm == torch.spmm``)."""
    import torch.overrides

    qualname: str | None = None
    with contextlib.suppress(Exception):  # it raises on exotic callables: fall back below
        qualname = torch.overrides.resolve_name(func)
    if qualname is not None and name and isinstance(func, _BUILTIN_TYPES):
        head, _, last = qualname.rpartition(".")
        if last != name:
            owner = None
            with contextlib.suppress(Exception):  # not an importable path: keep the answer
                owner = pkgutil.resolve_name(head)
            named = getattr(owner, last, None)
            if getattr(named, "__name__", None) == last and getattr(owner, name, None) == func:
                # one builtin under two names in one namespace (torch.mm is torch.spmm's
                # function): resolve_name's table keeps the name it met last; the
                # builtin's own name is the one it was called by
                qualname = f"{head}.{name}"
    if qualname is None:
        owner = getattr(func, "__self__", None)
        if type(func).__name__ == "method-wrapper" and owner is not None:
            # getset descriptor __get__ of a property such as Tensor.T
            qualname = f"torch.Tensor.{getattr(owner, '__name__', '?')}.__get__"
        else:
            module = getattr(func, "__module__", None) or "?"
            own = getattr(func, "__qualname__", getattr(func, "__name__", "?"))
            if own.startswith("_VariableFunctionsClass."):  # a torch.* builtin
                module, own = "torch", own.partition(".")[2]
            qualname = f"{module}.{own}"
    return canonical_from_qualname(qualname), qualname


def canonical_op(func: Any) -> tuple[str | None, str]:
    """Return ``(canonical name or None for metadata, resolved qualified name)`` for a callable.

    Cached per callable and name; unhashable callables are resolved every time.
    """
    name = getattr(func, "__name__", None)
    try:
        return _resolve(func, name)
    except TypeError:  # unhashable callable
        return _resolve.__wrapped__(func, name)


UNINITIALISED_OPS = frozenset(
    {
        "empty",
        "empty_like",
        "new_empty",
        "empty_strided",
        "new_empty_strided",
        "empty_permuted",
        "resize_",
        "resize_as_",
    }
)
"""Ops whose output holds memory nobody has written yet (all of it, or for ``resize_``
the grown part): its bytes are whatever the allocator hands out, so its statistics
would change from run to run. Their outputs get shape and dtype only; the op that
later writes into them (``copy_``, ``index_copy_``, ``fill_``, an ``out=`` op) keeps
its statistics."""

RANDOM_OPS = frozenset(
    {
        "rand",
        "randn",
        "randint",
        "randperm",
        "rand_like",
        "randn_like",
        "randint_like",
        "bernoulli",
        "bernoulli_",
        "multinomial",
        "normal",
        "normal_",
        "uniform_",
        "exponential_",
        "geometric_",
        "cauchy_",
        "log_normal_",
        "random_",
        "poisson",
        "binomial",
        "gumbel_softmax",
        "rrelu_with_noise",
        "native_dropout",
        "fractional_max_pool2d",
        "fractional_max_pool3d",
        "_standard_gamma",
        "_sample_dirichlet",
    }
)
"""Ops that always draw from a random generator: their values depend on the
generator's state and on the device (CPU and CUDA generators differ)."""

TRAINING_RANDOM_OPS: dict[str, tuple[int, bool]] = {
    "dropout": (2, True),
    "dropout_": (2, True),
    "dropout1d": (2, True),
    "dropout2d": (2, True),
    "dropout3d": (2, True),
    "feature_dropout": (2, True),
    "feature_dropout_": (2, True),
    "alpha_dropout": (2, False),
    "alpha_dropout_": (2, False),
    "feature_alpha_dropout": (2, False),
    "feature_alpha_dropout_": (2, False),
    "rrelu": (3, False),
    "rrelu_": (3, False),
}
"""Ops that draw from a generator only in training mode, with the position of their
``training`` argument and its default (``F.dropout(x, p, training=True)``,
``torch.dropout(x, p, train)``, ``F.rrelu(x, lower, upper, training=False)``)."""


def is_random_call(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """True when the call ``op(*args, **kwargs)`` draws from a random generator.

    Args:
        op: canonical op name (see :func:`canonical_op`).
        args, kwargs: the call's arguments; for :data:`TRAINING_RANDOM_OPS` the
            ``training`` (``train``) flag and, for dropouts, ``p`` decide (``p=0``
            draws nothing that matters: the output is the input).
    """
    if op in RANDOM_OPS:
        return True
    spec = TRAINING_RANDOM_OPS.get(op)
    if spec is None:
        return False
    index, default = spec
    positional = args[index] if len(args) > index else default
    if not kwargs.get("training", kwargs.get("train", positional)):
        return False
    if op.startswith("rrelu"):
        return True
    p = kwargs["p"] if "p" in kwargs else (args[1] if len(args) > 1 else 0.5)
    return not (isinstance(p, (int, float)) and p == 0)
