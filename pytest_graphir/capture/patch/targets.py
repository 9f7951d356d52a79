"""What the patch interceptor replaces: the namespaces and the op symbols in them,
the dispatch helpers and where they are bound, and the torch caches filled before
patching (see :mod:`pytest_graphir.capture.patch`)."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional

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
(:meth:`PatchInterceptor._namespaces` reaches each from ``torch``)."""

DISPATCH_HELPERS: tuple[str, ...] = (
    "has_torch_function",
    "has_torch_function_unary",
    "has_torch_function_variadic",
    "handle_torch_function",
)
"""The ``torch.overrides`` helpers Python functions dispatch through; patched in
``torch.overrides`` and wherever a loaded module imported them by name."""

BINDING_MODULES = frozenset(
    {
        "torch._C._nn",
        "torch._C._fft",
        "torch._C._linalg",
        "torch._C._special",
        "torch._C._nested",
        "torch._C._sparse",
    }
)
"""Generated C++ binding modules; their builtins (``__self__`` is the module)
dispatch to ``__torch_function__`` like the ``torch._C._VariableFunctions`` ones
(``__self__`` is ``None``). Builtins of ``torch._C`` itself do not."""

OBJECT_PROTOCOL = frozenset(
    {
        "__new__",
        "__init__",
        "__init_subclass__",
        "__subclasshook__",
        "__class_getitem__",
        "__getattribute__",
        "__getattr__",
        "__setattr__",
        "__delattr__",
        "__dir__",
        "__class__",
        "__dict__",
        "__weakref__",
        "__module__",
        "__doc__",
        "__slots__",
        "__annotations__",
        "__sizeof__",
        "__hash__",
        "__repr__",
        "__str__",
        "__format__",
        "__bool__",
        "__len__",
        "__iter__",
        "__reversed__",
        "__contains__",
        "__index__",
        "__int__",
        "__float__",
        "__complex__",
        "__reduce__",
        "__reduce_ex__",
        "__getstate__",
        "__setstate__",
        "__copy__",
        "__deepcopy__",
        "__delitem__",
        "__instancecheck__",
        "__subclasscheck__",
        "__torch_function__",
        "__torch_dispatch__",
        "__array__",
        "__array_wrap__",
        "__array_priority__",
        "__dlpack__",
        "__dlpack_device__",
        "__cuda_array_interface__",
    }
)
"""``torch.Tensor`` dunders that are Python's object protocol (creation, attribute
access, hashing, printing, truth and length, iteration, pickling and copying) or
PyTorch's override protocol, never patched. The ones that are Python functions still
dispatch through the patched helpers, so what they run inside stays hidden, as
under the mode."""

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


Target = tuple[Any, str, str, Any, Any]
"""``(owner, attr, qualified name, value to restore or MISSING, original)``."""


def namespaces() -> list[tuple[str, Any]]:
    """``(name, object)`` of each of :data:`NAMESPACES`, reached from ``torch``."""
    out = []
    for name in NAMESPACES:
        ns: Any = torch
        for attr in name.split(".")[1:]:
            ns = getattr(ns, attr)
        out.append((name, ns))
    return out


def op_targets(skipped: Callable[[str, str], bool]) -> list[Target]:
    """:data:`Target` for every op symbol to wrap; ``skipped(qualname, name)`` says
    which to leave alone."""
    out: list[Target] = []
    for ns_name, ns in namespaces():
        is_tensor = ns is torch.Tensor
        own = vars(ns)
        names = dir(ns) if is_tensor else list(own)
        for attr in names:
            qualname = f"{ns_name}.{attr}"
            if attr in DISPATCH_HELPERS or (is_tensor and attr in OBJECT_PROTOCOL):
                continue
            if is_tensor:
                static = own.get(attr, MISSING)
                if static is MISSING:
                    for base in torch.Tensor.__mro__[1:]:
                        if attr in vars(base):
                            static = vars(base)[attr]
                            break
                if isinstance(static, types.GetSetDescriptorType):
                    # a property of TensorBase (x.T): shadowed by a property here
                    name = canonical_op(static.__get__)[0]
                    if name is None or skipped(qualname, name):
                        continue
                    out.append((ns, attr, qualname, own.get(attr, MISSING), static))
                    continue
                if not isinstance(
                    static, (types.MethodDescriptorType, types.WrapperDescriptorType)
                ):
                    continue  # property, static/classmethod, Python function
                if getattr(static, "__objclass__", None) is object:
                    continue
                value = getattr(ns, attr)
            else:
                value = own[attr]
                if not isinstance(value, types.BuiltinFunctionType):
                    continue  # Python functions dispatch through the helpers
                owner_obj = value.__self__
                if owner_obj is not None and not (
                    isinstance(owner_obj, types.ModuleType)
                    and owner_obj.__name__ in BINDING_MODULES
                ):
                    continue  # torch._C / pybind11 builtins: no __torch_function__
            name = canonical_op(value)[0]
            if name is None or skipped(qualname, name):
                continue
            out.append((ns, attr, qualname, own.get(attr, MISSING), value))
    return out


def helper_sites() -> list[tuple[Any, str, Any]]:
    """``(module, helper name, real helper)`` for every loaded module that binds
    a dispatch helper by name, ``torch.overrides`` first."""
    import torch.overrides as ov

    real = {h: getattr(ov, h) for h in DISPATCH_HELPERS}
    sites: list[tuple[Any, str, Any]] = [(ov, h, real[h]) for h in DISPATCH_HELPERS]
    for mod in list(sys.modules.values()):
        if mod is ov or not isinstance(mod, types.ModuleType):
            continue
        d = mod.__dict__
        for h in DISPATCH_HELPERS:
            if d.get(h) is real[h]:
                sites.append((mod, h, real[h]))
    return sites


def jit_builtin_table() -> dict[int, str]:
    """TorchScript's builtin-op table: ``id(callable) -> "aten::op"``, built once
    from ``dir(torch)`` and the ``torch._C`` binding modules."""
    table: dict[int, str] = torch.jit._builtins._get_builtin_table()  # type: ignore[no-untyped-call]
    return table


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
    import torch.overrides as ov
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
