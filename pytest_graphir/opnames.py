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
        "layout",
        "grad_fn",
        "data_ptr",
        "element_size",
        "get_device",
        "len",
        "bool",
        "format",
        "hash",
        "index",
        "int",
        "item",
        "tolist",
        "names",
        "nelement",
        "ndimension",
        "storage_offset",
        "untyped_storage",
        "grad",
        "_version",
        "output_nr",
        "has_names",
        "dim_order",
        "_base",
        "itemsize",
        "nbytes",
        "requires_grad_",
        "retain_grad",
        "register_hook",
        "_is_view",
        "get_default_dtype",
        # the is_* queries: device, layout, dtype, memory, autograd and global modes
        *(f"is_{kind}" for kind in ("cuda", "mps", "xpu", "meta", "sparse", "quantized", "nested")),
        *(f"is_{q}" for q in ("floating_point", "complex", "signed", "contiguous", "set_to")),
        *(f"is_{q}" for q in ("leaf", "inference", "nonzero", "tensor", "pinned", "shared")),
        *(f"is_{mode}_enabled" for mode in ("grad", "autocast", "inference_mode")),
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

_BINARY = {
    **{op: op for op in ("add", "sub", "mul", "div", "pow", "matmul")},
    "truediv": "div",
    "floordiv": "floor_divide",
    "mod": "remainder",
    **{op: f"bitwise_{op}" for op in ("and", "or", "xor")},
}
"""Binary operators with a reflected dunder (``__r<operator>__``), with their op."""

REFLECTED = {"sub": "rsub", "div": "rdiv", "floor_divide": "rfloordiv", "remainder": "rremainder"}
"""The op of a reflected operator that does not commute (``2 - x`` is ``rsub``); the
others are their operator's op (``__radd__`` is ``add``; ``rpow`` is named ``pow``)."""

_DUNDER: dict[str, str | None] = {
    **{f"__{name}__": op for name, op in _BINARY.items()},
    **{f"__r{name}__": REFLECTED.get(op, op) for name, op in _BINARY.items()},
    # //=, %= and @= are recorded under their dunder name (__ifloordiv__ ...)
    **{
        f"__i{n}__": f"{op}_" for n, op in _BINARY.items() if n not in ("floordiv", "mod", "matmul")
    },
    **{f"__{op}__": op for op in ("neg", "abs", "eq", "ne", "lt", "le", "gt", "ge")},
    **{f"__{op}__": op for op in ("getitem", "setitem")},
    "__pos__": "positive",
    "__invert__": "bitwise_not",
    "__lshift__": "bitwise_left_shift",
    "__rshift__": "bitwise_right_shift",
    # object-protocol dunders, not ops: conversions, printing, iteration, copying, interop
    **dict.fromkeys(f"__{p}__" for p in ("len", "bool", "index", "int", "float", "hash", "repr")),
    **dict.fromkeys(f"__{p}__" for p in ("format", "iter", "contains", "array", "dlpack")),
    **dict.fromkeys(f"__{p}__" for p in ("reduce_ex", "deepcopy", "setstate", "getstate")),
}
"""Operator dunders -> their op; object-protocol dunders -> None (not ops)."""

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
    **{f"arc{f}": f"a{f}" for f in ("cos", "sin", "tan")},  # numpy's arccos is acos
    "negative": "neg",
    "moveaxis": "movedim",
    "fix": "trunc",
    "rpow": "pow",
}

_PREFIXES = (
    "torch.nn.functional.",
    *(f"torch._C._{m}." for m in ("nn", "VariableFunctions", "linalg", "special", "fft")),
    "torch._C.TensorBase.",
    "torch._C._TensorBase.",
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
    op = _DUNDER.get(name, name)
    if op is None:  # an object-protocol dunder (__len__, __repr__, __array__ ...)
        return None
    op = _ALIAS.get(op, op)
    op = PROPERTY_ATEN_OPS.get(op, op)
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
        *(f"{new}empty{kind}" for new in ("", "new_") for kind in ("", "_strided")),
        "empty_like",
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
        *(f"{op}{like}" for op in ("rand", "randn", "randint") for like in ("", "_like")),
        "randperm",
        "bernoulli",
        "multinomial",
        "normal",
        # the in-place samplers of a tensor (x.uniform_())
        *(f"{op}_" for op in ("bernoulli", "normal", "uniform", "exponential", "geometric")),
        *(f"{op}_" for op in ("cauchy", "log_normal", "random")),
        "poisson",
        "binomial",
        "gumbel_softmax",
        "rrelu_with_noise",
        "native_dropout",
        *(f"fractional_max_pool{n}d" for n in (2, 3)),
        "_standard_gamma",
        "_sample_dirichlet",
    }
)
"""Ops that always draw from a random generator: their values depend on the
generator's state and on the device (CPU and CUDA generators differ)."""

TRAINING_RANDOM_OPS: dict[str, tuple[int, bool]] = {
    f"{op}{inplace}": spec
    for op, spec in {
        "dropout": (2, True),
        "feature_dropout": (2, True),
        "alpha_dropout": (2, False),
        "feature_alpha_dropout": (2, False),
        "rrelu": (3, False),
    }.items()
    for inplace in ("", "_")
} | dict.fromkeys(("dropout1d", "dropout2d", "dropout3d"), (2, True))
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
