"""What the patch interceptor replaces: the namespaces and the op symbols in them,
the dispatch helpers and where they are bound, and the torch caches filled before
patching (see :mod:`pytest_graphir.capture.patch`)."""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Collection
from typing import Any

import torch
import torch.nn.functional
import torch.overrides as ov

from ...opnames import canonical_op

NAMESPACES: tuple[str, ...] = (
    "torch.nn.functional",
    "torch",
    "torch._C._nn",
    # the C++ builtins of torch._C._fft, _linalg and _special, as users call them
    "torch.fft",
    "torch.linalg",
    "torch.special",
    "torch.Tensor",
)
"""The namespaces whose op callables are patched, in the order they are patched
(:func:`op_targets` reaches each from ``torch``)."""

DISPATCH_HELPERS: tuple[str, ...] = (
    "has_torch_function",
    "has_torch_function_unary",
    "has_torch_function_variadic",
    "handle_torch_function",
)
"""The ``torch.overrides`` helpers Python functions dispatch through; patched in
``torch.overrides`` and wherever a loaded module imported them by name."""

BINDING_MODULES = frozenset(
    f"torch._C.{name}" for name in ("_nn", "_fft", "_linalg", "_special", "_nested", "_sparse")
)
"""Generated C++ binding modules; their builtins (``__self__`` is the module)
dispatch to ``__torch_function__`` like the ``torch._C._VariableFunctions`` ones
(``__self__`` is ``None``). Builtins of ``torch._C`` itself do not."""

OBJECT_PROTOCOL = frozenset(
    {
        "__init__",
        "__getattribute__",
        "__getattr__",
        "__setattr__",
        "__delattr__",
        "__dir__",
        "__sizeof__",
        "__str__",
        "__reversed__",
        "__complex__",
        "__reduce__",
        "__copy__",
        "__delitem__",
        "__torch_function__",
        "__torch_dispatch__",
        "__array_wrap__",
        "__dlpack_device__",
        "__cuda_array_interface__",
    }
)
"""``torch.Tensor`` dunders that are Python's object protocol (creation, attribute
access, printing, pickling and copying) or PyTorch's override protocol, never patched.
The ones that are Python functions still dispatch through the patched helpers, so what
they run inside stays hidden, as under the mode. Not listed, since :func:`op_targets`
never takes them: the dunders the canonical naming drops (``__len__``, ``__repr__``,
``__iter__``, ``__array__``: :data:`~pytest_graphir.opnames._DUNDER` maps them to
None), data attributes (``__module__``, ``__doc__``), getset descriptors other than the
op properties (``__class__``, ``__dict__``), static and class methods (``__new__``,
``__init_subclass__``) and the metaclass's (``__instancecheck__``)."""

DEFAULT_SKIP = frozenset(
    {
        "torch.Tensor.as_subclass",
        "torch.Tensor._fix_weakref",
        "torch.Tensor._use_count",
        "torch.Tensor._view_func",
        "torch.Tensor._view_func_unsafe",
        "torch.Tensor._rev_view_func_unsafe",
    }
)
"""Symbols not patched by default: ``Tensor`` methods implemented in C++ without a
``__torch_function__`` check (the mode never sees them), so recording
them would add nodes the mode does not have. An entry is a qualified name
(``"torch.Tensor.add"``, ``"torch.nn.functional.gelu"``) or a canonical op name
(``"dropout"``, skipping that op in every namespace)."""

MISSING: Any = object()
"""The saved value of an attribute a namespace inherits (restored by deleting it)."""

FLUSH_ONLY = ("data_ptr", "untyped_storage")
"""``torch.Tensor`` methods that are not ops (never recorded, so not in the targets)
but hand out a tensor's memory, which code may then write without a torch op or a
version bump (a Triton or ctypes kernel through ``data_ptr()``): wrapped to compute
held statistics first, as the mode does for them
(:data:`~pytest_graphir.capture.writes.EXPOSES_MEMORY`)."""


_C_METHODS = (types.MethodDescriptorType, types.WrapperDescriptorType, types.MethodWrapperType)
"""What a ``torch.Tensor`` op is in its class: a C method (``add``), slot wrapper
(``__add__``) or, for a getset property, its bound ``__get__``."""

Target = tuple[Any, str, Any]
"""``(owner, attr, original)``."""


def op_targets(skip: Collection[str]) -> list[Target]:
    """:data:`Target` for every op symbol to wrap, but those whose qualified name
    (``"torch.Tensor.add"``) or canonical op name is in ``skip``."""
    out: list[Target] = []
    for ns_name in NAMESPACES:
        ns: Any = functools.reduce(getattr, ns_name.split(".")[1:], torch)
        is_tensor = ns is torch.Tensor
        own = vars(ns)
        for attr in dir(ns) if is_tensor else list(own):
            if attr in DISPATCH_HELPERS or (is_tensor and attr in OBJECT_PROTOCOL):
                continue
            if is_tensor:  # the attribute as the class (or TensorBase) holds it
                value = next((vars(c)[attr] for c in ns.__mro__ if attr in vars(c)), None)
                # a property of TensorBase (x.T) is shadowed here, named by its getter
                probe = value.__get__ if isinstance(value, types.GetSetDescriptorType) else value
                if not isinstance(probe, _C_METHODS) or getattr(value, "__objclass__", 0) is object:
                    continue  # property, static/classmethod, Python function, object's own
            else:
                value = probe = own[attr]
                if not isinstance(value, types.BuiltinFunctionType):
                    continue  # Python functions dispatch through the helpers
                owner = value.__self__
                if owner is not None and getattr(owner, "__name__", None) not in BINDING_MODULES:
                    continue  # torch._C / pybind11 builtins: no __torch_function__
            name = canonical_op(probe)[0]
            if name is None or f"{ns_name}.{attr}" in skip or name in skip:
                continue
            out.append((ns, attr, value))
    return out


def helper_sites() -> list[tuple[Any, str, Any]]:
    """``(module, helper name, real helper)`` for every loaded module that binds
    a dispatch helper by name, ``torch.overrides`` first."""
    real = {h: getattr(ov, h) for h in DISPATCH_HELPERS}
    mods = [m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)]
    return [
        (mod, h, fn)
        for mod in [ov, *(m for m in mods if m is not ov)]
        for h, fn in real.items()
        if vars(mod).get(h) is fn
    ]


def jit_builtin_table() -> dict[int, str]:
    """TorchScript's builtin-op table: ``id(callable) -> "aten::op"``, built once
    from ``dir(torch)`` and the ``torch._C`` binding modules."""
    return torch.jit._builtins._get_builtin_table()  # type: ignore[no-untyped-call, no-any-return]


def warm_caches() -> None:
    """Fill the caches that map torch functions to names or ops, from the originals.

    Relies on: ``torch.overrides`` caching its tables with ``functools.cache`` on
    first use (a table first built while patched would hold the wrappers and
    ``resolve_name(torch.add)`` would return ``None`` for good); TorchScript's
    builtin-op table (``torch.jit._builtins._get_builtin_table``, built once from
    ``dir(torch)``); Dynamo's function tables, built when ``torch._dynamo`` and its
    ``trace_rules`` are first used; ``torch.utils._device._device_constructors``
    (cached on first use, which Dynamo may make inside a patched forward: a set of
    wrappers would leave ``with torch.device(...)`` without effect for good).
    """
    import torch.utils._device

    torch.utils._device._device_constructors()

    ov.get_ignored_functions()
    ov.get_default_nowrap_functions()
    ov.get_testing_overrides()
    ov.get_overridable_functions()
    ov.resolve_name(torch.add)
    ov.is_tensor_method_or_property(torch.Tensor.add)
    jit_builtin_table()
    try:
        import torch._dynamo.trace_rules as rules
    except Exception:  # Dynamo unavailable on this build: nothing to warm
        return
    for fn_name in (
        "get_torch_obj_rule_map",
        "_allowed_callable_ids",
        "_disallowed_callable_ids",
        "_nonstrict_trace_callable_ids",
        "_builtin_function_ids",
        "_numpy_function_ids",
        "_builtin_constant_ids",
        "_polyfilled_function_ids",
        "get_legacy_mod_inlinelist",
        "get_mod_inlinelist",
        "get_mod_skiplist",
    ):
        fn = getattr(rules, fn_name, None)
        if callable(fn):
            fn()
