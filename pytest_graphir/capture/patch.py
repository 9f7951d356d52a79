"""The symbol-patch op interceptor (FlexTorchIR-style): ``trace(..., interceptor="patch")``.

While its ``with`` block runs, :class:`PatchInterceptor` replaces the op callables of
``torch.nn.functional``, ``torch``, ``torch._C._nn`` and ``torch.Tensor`` with
wrapper closures that record the call, and puts every original back on the way out.
It builds the same IR as the default TorchFunctionMode interceptor
(:class:`~pytest_graphir.capture.mode.RecordingMode`): same canonical op names,
same arguments, same nested calls hidden. How each part mirrors the mode:

* **C++ builtins** (``torch.add``, ``F.linear``, ``torch._C._nn.gelu``,
  ``Tensor.view``, ``Tensor.__add__``): C++ hands ``__torch_function__`` the caller's
  own arguments, so a wrapper that records ``(args, kwargs)`` sees exactly what the
  mode sees. Tensor methods get ``self`` as the first argument, as in the mode.
  Operators work because setting ``Tensor.__add__`` on the Python class
  ``torch.Tensor`` updates its type slot (``x + y`` calls the wrapper).
* **Python functions** (``F.relu``, ``F.layer_norm``, ``torch.split``,
  ``Tensor.__rsub__``, ``Tensor.__iter__``) reach ``__torch_function__`` only through
  their own ``if has_torch_function...(...): return handle_torch_function(public_api,
  relevant_args, *args, **kwargs)``, and that call decides what the mode sees:
  ``F.layer_norm(x, (8,), w, b)`` arrives as ``args=(x, (8,))``,
  ``kwargs={weight, bias, eps}``, and ``F.max_pool2d`` arrives under its public name.
  A wrapper around the function sees the caller's arguments instead, so the IR would
  differ. So Python functions are not wrapped: the four dispatch helpers
  (:data:`DISPATCH_HELPERS`) are patched instead, in ``torch.overrides`` and in every
  loaded module that imported them by name. With a trace active they answer like
  they do under a mode (``has_torch_function*`` is true, ``handle_torch_function``
  records ``(public_api, args, kwargs)`` and runs the function), which also
  captures ``from torch.nn.functional import relu`` aliases and hides what metadata
  helpers such as ``Tensor.__repr__`` or ``Tensor.__iter__`` run inside.
* **Nested calls are recorded once.** A thread-local depth counter plays the part
  of the mode being popped while its handler runs: the outermost recorded call sets
  it, and every wrapper or helper reached below (``F.relu`` -> ``torch.relu``, the
  tracer's own statistics) passes straight through.
* **Not patched:** metadata queries (canonical name ``None``: ``size``, ``dim``,
  ``numel``; the mode records them as nothing, so a wrapper would only cost time);
  object-protocol dunders (:data:`OBJECT_PROTOCOL`); builtins of ``torch._C`` itself
  and pybind11 functions (``torch.get_num_threads``, ``torch.fork``), which never
  reach ``__torch_function__``; classes, modules, ``staticmethod``s and
  ``classmethod``s; and the names in :data:`DEFAULT_SKIP` or the ``skip`` argument.

Known limits, handled:

* **Import-time aliases.** A reference to a C++ builtin taken before the patch
  (transformers' ``GELUActivation`` stores ``nn.functional.gelu`` in ``__init__``)
  would call the original. With ``model=`` (``trace()`` passes it), the references
  the model's code can reach are found by :func:`.aliases.find_aliases` and patched
  in place too (module attributes, list/dict items, partials, class attributes,
  module globals, closure cells, default arguments), then restored by identity; they
  are listed in :attr:`PatchInterceptor.aliased`. What can not be patched in place
  (an element of a tuple) is listed in :attr:`PatchInterceptor.uncaptured`.
* **Property getters** (``x.T``, ``x.mT``, ``x.H``, ``x.mH``, ``x.data``, ``x.real``,
  ``x.imag``) are getset descriptors of ``torch._C.TensorBase``, whose ``__get__`` is
  read-only: a recording ``property`` on ``torch.Tensor`` shadows each one while
  patched (deleted again on exit), so they are recorded as under the mode.
* **Ctrl-C.** SIGINT waits while symbols are patched or restored, and a
  ``KeyboardInterrupt`` anywhere else in the block restores every symbol before it
  leaves the signal handler (:mod:`pytest_graphir.capture.interrupts`).
* **torch.compile / Dynamo.** Every wrapper and helper first asks
  ``torch.compiler.is_compiling()`` and, if so, calls the original without touching
  the recorder: while Dynamo traces, it inlines the wrapper into a plain call of the
  original (no guard on recorder state, so no "Guard failed on the same frame it
  was created"); during the rest of a compile session (fake-tensor propagation,
  the backend) nothing is recorded either. Code that a compiled graph runs later
  is recorded when it calls a patched symbol (FX code calls ``torch._C._nn.gelu``
  by attribute). Dynamo's tables of torch functions are built when
  ``torch._dynamo`` is first imported; the interceptor imports it before patching
  (about a second, once per process), so a compile inside the patched region can
  not capture wrappers into them.
* **TorchScript.** ``torch.jit.script`` resolves ``torch.relu`` through the
  Python module and looks the object up in its builtin-op table (keyed by
  ``id``). While patched, every wrapper and helper is entered into that table
  under its original's op (and removed on exit), so scripting inside the patched
  region compiles the same aten ops.
* **Caches.** ``torch.overrides`` (``resolve_name``, ``get_overridable_functions``,
  ``get_ignored_functions``, ``get_testing_overrides``), TorchScript's builtin
  table and this package's name cache are filled before patching, from the
  originals; a cache first filled while patched would keep the wrappers forever.
  Modules first imported inside the patched region that bound a wrapper by name
  (``from torch import relu``) are repaired on exit (:attr:`PatchInterceptor.repaired`).
* **One at a time.** Patches are process-wide, so a second interceptor entered
  while one is active (nested, or on another thread) raises ``RuntimeError``.
  Recording is per thread, like the mode stack: only the thread that entered
  records; other threads run the originals through the wrappers.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Callable, Collection
from typing import Any

import torch
import torch.nn.functional

from ..naming import canonical_op
from . import interrupts
from .aliases import AliasSite, find_aliases
from .interrupts import deferred_sigint, poll
from .writes import may_write

Record = Callable[[str, str, tuple[Any, ...], dict[str, Any], Any], None]
"""``record(name, raw, args, kwargs, out)``, the tracer's op callback."""

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
``__torch_function__`` check (measured: the mode never sees them), so recording
them would add nodes the mode does not have. An entry is a qualified name
(``"torch.Tensor.add"``, ``"torch.nn.functional.gelu"``) or a canonical op name
(``"dropout"``, skipping that op in every namespace)."""

_MISSING: Any = object()


class _ThreadState(threading.local):
    """Per-thread recording state: the interceptor that records on this thread
    (``None`` on every other thread) and the depth of the recorded call in progress."""

    def __init__(self) -> None:
        self.owner: PatchInterceptor | None = None
        self.depth = 0


_STATE = _ThreadState()
_LOCK = threading.Lock()
_ACTIVE: list[PatchInterceptor] = []  # the one interceptor whose patches are installed


def _make_wrapper(orig: Callable[..., Any], name: str, raw: str) -> Callable[..., Any]:
    """Return the recording wrapper of C++ builtin ``orig`` (canonical ``name``)."""
    state = _STATE
    guard = interrupts._G
    is_compiling = torch.compiler.is_compiling
    all_disabled = torch._C._is_torch_function_all_disabled

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if is_compiling():  # first, so Dynamo never reads the recorder's state
            return orig(*args, **kwargs)
        owner = state.owner
        if owner is None or state.depth or all_disabled():
            return orig(*args, **kwargs)
        state.depth = 1
        try:
            if owner.before_write is not None and may_write(orig, args, kwargs):
                owner.before_write()
            out = orig(*args, **kwargs)
            if owner.active:
                owner.record(name, raw, args, kwargs, out)
        finally:
            state.depth = 0
        if guard.pending is not None:  # a SIGINT arrived inside the op or the recorder
            poll()
        return out

    wrapper.__name__ = getattr(orig, "__name__", name)
    wrapper.__qualname__ = getattr(orig, "__qualname__", name)
    wrapper.__doc__ = getattr(orig, "__doc__", None)
    wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
    return wrapper


FLUSH_ONLY = ("data_ptr", "untyped_storage")
"""``torch.Tensor`` methods that are not ops (never recorded, so not in the targets)
but hand out a tensor's memory, which code may then write without a torch op or a
version bump (a Triton or ctypes kernel through ``data_ptr()``): wrapped to compute
held statistics first, as the mode does for them
(:data:`~pytest_graphir.capture.writes.EXPOSES_MEMORY`)."""


def _make_flusher(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Return the wrapper of ``orig`` that calls the recording interceptor's
    ``before_write`` first (at depth 0, as the mode would see the call) and records
    nothing."""
    state = _STATE
    is_compiling = torch.compiler.is_compiling
    all_disabled = torch._C._is_torch_function_all_disabled

    def flusher(*args: Any, **kwargs: Any) -> Any:
        owner = state.owner
        if (
            owner is not None
            and owner.before_write is not None
            and not state.depth
            and not is_compiling()
            and not all_disabled()
        ):
            owner.before_write()
        return orig(*args, **kwargs)

    flusher.__name__ = getattr(orig, "__name__", "flusher")
    flusher.__qualname__ = getattr(orig, "__qualname__", "flusher")
    flusher.__doc__ = getattr(orig, "__doc__", None)
    flusher.__wrapped__ = orig  # type: ignore[attr-defined]
    return flusher


def _make_property(desc: Any) -> Any:
    """Return the ``property`` that shadows getset descriptor ``desc`` of
    ``torch._C.TensorBase`` (``x.T``) on ``torch.Tensor``: its getter records like a
    wrapper (the mode sees ``Tensor.T.__get__`` with ``args=(x,)``); setting and
    deleting go to the descriptor unrecorded, as under the mode."""
    get = desc.__get__
    name, raw = canonical_op(get)
    record_get = _make_wrapper(get, name or raw, raw)

    def fget(self: Any) -> Any:
        return record_get(self)

    def fset(self: Any, value: Any) -> None:
        owner = _STATE.owner  # `x.data = y` writes x without bumping its version
        if owner is not None and owner.before_write is not None:
            owner.before_write()
        desc.__set__(self, value)

    def fdel(self: Any) -> None:
        desc.__delete__(self)

    return property(fget, fset, fdel, getattr(desc, "__doc__", None))


def _in_recorded_op() -> bool:
    """True while a recorded op or the recorder runs on this thread (depth 1): a
    SIGINT then waits until the op returns."""
    return _STATE.depth > 0


def _make_has_probe(real: Callable[..., bool]) -> Callable[..., bool]:
    """Return the patched ``has_torch_function*``: true while a trace records on
    this thread at depth 0 (as under a mode), else the real answer."""
    state = _STATE
    is_compiling = torch.compiler.is_compiling
    all_disabled = torch._C._is_torch_function_all_disabled

    def has_torch_function(*args: Any) -> bool:
        if is_compiling():
            return real(*args)
        if state.owner is not None and not state.depth and not all_disabled():
            return True
        return real(*args)

    has_torch_function.__name__ = getattr(real, "__name__", "has_torch_function")
    has_torch_function.__doc__ = getattr(real, "__doc__", None)
    has_torch_function.__wrapped__ = real  # type: ignore[attr-defined]
    return has_torch_function


def _make_handle_probe(real: Callable[..., Any]) -> Callable[..., Any]:
    """Return the patched ``handle_torch_function``: at depth 0 it records
    ``(public_api, args, kwargs)`` and runs ``public_api(*args, **kwargs)``, which is
    what ``RecordingMode.__torch_function__`` receives and does."""
    state = _STATE
    guard = interrupts._G
    is_compiling = torch.compiler.is_compiling
    all_disabled = torch._C._is_torch_function_all_disabled

    def handle_torch_function(
        public_api: Callable[..., Any], relevant_args: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if is_compiling():
            return real(public_api, relevant_args, *args, **kwargs)
        owner = state.owner
        if owner is None or state.depth or all_disabled():
            return real(public_api, relevant_args, *args, **kwargs)
        state.depth = 1
        try:
            if owner.before_write is not None and may_write(public_api, args, kwargs):
                owner.before_write()
            out = public_api(*args, **kwargs)
            if owner.active:
                owner._record_dispatched(public_api, args, kwargs, out)
        finally:
            state.depth = 0
        if guard.pending is not None:
            poll()
        return out

    handle_torch_function.__doc__ = getattr(real, "__doc__", None)
    handle_torch_function.__wrapped__ = real  # type: ignore[attr-defined]
    return handle_torch_function


_REPLACEMENTS: dict[int, tuple[Any, Callable[..., Any]]] = {}
"""``id(original) -> (original, replacement)``: wrappers and helpers are built once
per process and reused (they hold no per-interceptor state; they read ``_STATE``)."""


def _replacement(
    original: Any, helper: str | None = None, *, flush_only: bool = False
) -> Callable[..., Any]:
    """Return the (cached) wrapper of C++ builtin ``original``, or with ``helper`` (a
    name in :data:`DISPATCH_HELPERS`) the probe that replaces that helper, or with
    ``flush_only`` its :func:`_make_flusher` wrapper (:data:`FLUSH_ONLY`)."""
    entry = _REPLACEMENTS.get(id(original))
    if entry is not None and entry[0] is original:
        return entry[1]
    replacement: Callable[..., Any]
    if flush_only:
        replacement = _make_flusher(original)
    elif isinstance(original, types.GetSetDescriptorType):
        replacement = _make_property(original)
    elif helper == "handle_torch_function":
        replacement = _make_handle_probe(original)
    elif helper is not None:
        replacement = _make_has_probe(original)
    else:
        op, raw = canonical_op(original)
        replacement = _make_wrapper(original, op or raw, raw)
    _REPLACEMENTS[id(original)] = (original, replacement)
    return replacement


def _jit_builtin_table() -> dict[int, str]:
    """TorchScript's builtin-op table: ``id(callable) -> "aten::op"``, built once
    from ``dir(torch)`` and the ``torch._C`` binding modules."""
    table: dict[int, str] = torch.jit._builtins._get_builtin_table()  # type: ignore[no-untyped-call]
    return table


def _warm_caches() -> None:
    """Fill the caches that map torch functions to names or ops, from the originals.

    Relies on: ``torch.overrides`` caching its tables with ``functools.cache`` on
    first use (a table first built while patched would hold the wrappers and
    ``resolve_name(torch.add)`` would return ``None`` for good); TorchScript's
    builtin-op table (``torch.jit._builtins._get_builtin_table``, built once from
    ``dir(torch)``); Dynamo's function tables, built when ``torch._dynamo`` and its
    ``trace_rules`` are first used.
    """
    import torch.overrides as ov

    ov.get_ignored_functions()
    ov.get_default_nowrap_functions()
    ov.get_testing_overrides()
    ov.get_overridable_functions()
    ov.resolve_name(torch.add)
    ov.is_tensor_method_or_property(torch.Tensor.add)
    _jit_builtin_table()
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


class PatchInterceptor:
    """Records ops by patching torch's op symbols for the duration of a ``with`` block.

    ``trace(model, *args, interceptor="patch")`` builds one and runs the forward
    inside it; the IR is the same as with the default TorchFunctionMode interceptor
    (see the module docstring for how, and for the known limits).

    Args:
        record: ``record(name, raw, args, kwargs, out)``, called after every recorded
            op with the canonical op name (:func:`~pytest_graphir.naming.canonical_op`
            of the original callable), its resolved qualified name, the call's
            arguments as ``__torch_function__`` would receive them, and the result.
            It runs at depth 1, so torch calls it makes are not recorded.
        model: optional ``nn.Module`` whose import-time aliases of patched
            functions are patched too (see :mod:`.aliases`); listed in
            :attr:`aliased`, the ones that can not be patched in :attr:`uncaptured`.
        skip: qualified names (``"torch.Tensor.add"``) or canonical op names
            (``"dropout"``) not to patch or record; defaults to :data:`DEFAULT_SKIP`.
            A skipped Python function still runs with what it calls hidden.
        before_write: called (with no arguments) before a recorded call that may
            write into an existing tensor, as :class:`~.mode.RecordingMode` does.

    Attributes:
        active: set to ``False`` (by the tracer, before leaving) to stop recording.
        aliased: ``"<where> -> <original>"`` for every alias patched, e.g.
            ``"encoder.layer.0.intermediate.intermediate_act_fn.act -> torch.nn.functional.gelu"``
            (an attribute, by module path) or ``"my_model.gelu -> torch.nn.functional.gelu"``
            (a module global).
        uncaptured: the same for references found that can not be patched in place
            (tuple elements): calls through them are not recorded.
        repaired: ``"<module>.<name>"`` of wrappers found, on exit, bound in modules
            first imported inside the patched region, and put back to the original.
        patched: number of symbols patched (wrappers plus dispatch helpers).
        patch_seconds, restore_seconds: wall time of the last patch and restore.

    Raises:
        RuntimeError: from ``__enter__`` when another ``PatchInterceptor`` is
            active in this process; from ``__exit__`` when a symbol could not be
            restored (all others are restored first).
    """

    def __init__(
        self,
        record: Record,
        *,
        model: torch.nn.Module | None = None,
        skip: Collection[str] = DEFAULT_SKIP,
        before_write: Callable[[], None] | None = None,
    ) -> None:
        self.record = record
        self.before_write = before_write
        self.model = model
        self.skip = frozenset(skip)
        self.active = True
        self.uncaptured: list[str] = []
        self.repaired: list[str] = []
        self.patched = 0
        self.patch_seconds = 0.0
        self.restore_seconds = 0.0
        # (owner, attribute, saved value or _MISSING when inherited) in patch order
        self._saved: list[tuple[Any, str, Any]] = []
        self._originals: dict[int, Any] = {}  # id(replacement) -> original
        self._replacements: dict[int, Any] = {}  # id(replacement) -> replacement
        self._registered: list[tuple[Any, Any]] = []  # entered into TorchScript's table
        self._alias_sites: list[AliasSite] = []  # model aliases patched, in patch order
        self.aliased: list[str] = []
        self._modules_before: set[str] = set()
        self._entered = False

    # -- recording ------------------------------------------------------------------
    def _skipped(self, qualname: str, name: str) -> bool:
        return qualname in self.skip or name in self.skip

    def _record_dispatched(
        self, public_api: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> None:
        """Record a Python function's dispatch, named after its original."""
        func = self._originals.get(id(public_api), public_api)
        name, raw = canonical_op(func)
        if name is not None and not self._skipped(raw, name):
            self.record(name, raw, args, kwargs, out)

    # -- what gets patched -----------------------------------------------------------
    @staticmethod
    def _namespaces() -> list[tuple[str, Any]]:
        """``(name, object)`` of each of :data:`NAMESPACES`, reached from ``torch``."""
        out = []
        for name in NAMESPACES:
            ns: Any = torch
            for attr in name.split(".")[1:]:
                ns = getattr(ns, attr)
            out.append((name, ns))
        return out

    def _targets(self) -> list[tuple[Any, str, str, Any, Any]]:
        """``(owner, attr, qualified name, value to restore or _MISSING, original)``
        for every op symbol to wrap."""
        out: list[tuple[Any, str, str, Any, Any]] = []
        for ns_name, ns in self._namespaces():
            is_tensor = ns is torch.Tensor
            own = vars(ns)
            names = dir(ns) if is_tensor else list(own)
            for attr in names:
                qualname = f"{ns_name}.{attr}"
                if attr in DISPATCH_HELPERS or (is_tensor and attr in OBJECT_PROTOCOL):
                    continue
                if is_tensor:
                    static = own.get(attr, _MISSING)
                    if static is _MISSING:
                        for base in torch.Tensor.__mro__[1:]:
                            if attr in vars(base):
                                static = vars(base)[attr]
                                break
                    if isinstance(static, types.GetSetDescriptorType):
                        # a property of TensorBase (x.T): shadowed by a property here
                        name = canonical_op(static.__get__)[0]
                        if name is None or self._skipped(qualname, name):
                            continue
                        out.append((ns, attr, qualname, own.get(attr, _MISSING), static))
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
                if name is None or self._skipped(qualname, name):
                    continue
                out.append((ns, attr, qualname, own.get(attr, _MISSING), value))
        return out

    def _helper_sites(self) -> list[tuple[Any, str, Any]]:
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

    # -- patching -----------------------------------------------------------------------
    def _set(
        self,
        table: dict[int, str],
        owner: Any,
        attr: str,
        saved: Any,
        replacement: Any,
        original: Any,
    ) -> None:
        """Patch ``owner.attr``; the first time ``replacement`` is used, enter it in
        TorchScript's builtin table under its original's op. The restore entry is
        written before the patch, so a restore after any failure covers it."""
        if id(replacement) not in self._replacements:
            self._originals[id(replacement)] = original
            self._replacements[id(replacement)] = replacement
            op = table.get(id(original))
            if op is not None:
                self._registered.append((original, replacement))
                table[id(replacement)] = op
        self._saved.append((owner, attr, saved))
        setattr(owner, attr, replacement)

    def _patch(self) -> None:
        _warm_caches()
        targets = self._targets()
        helper_sites = self._helper_sites()
        originals = {id(t[4]): t[4] for t in targets}
        alias_sites: list[AliasSite] = []
        self.uncaptured = []
        if self.model is not None:
            import torch.overrides as ov

            skip = {id(vars(ns)) for _, ns in self._namespaces()} | {id(vars(ov))}
            alias_sites, self.uncaptured = find_aliases(self.model, originals, skip)
        table = _jit_builtin_table()
        for ns, attr, _qualname, saved, value in targets:
            self._set(table, ns, attr, saved, _replacement(value), value)
        patched = {(ns, attr) for ns, attr, *_ in targets}
        for attr in FLUSH_ONLY:
            if (torch.Tensor, attr) not in patched and hasattr(torch.Tensor, attr):
                value = getattr(torch.Tensor, attr)
                saved = vars(torch.Tensor).get(attr, _MISSING)
                flusher = _replacement(value, flush_only=True)
                self._set(table, torch.Tensor, attr, saved, flusher, value)
        for mod, helper, real in helper_sites:
            self._set(table, mod, helper, real, _replacement(real, helper), real)
        self.aliased = []
        for site in alias_sites:
            self._alias_sites.append(site)
            site.apply(_replacement(site.target))
            self.aliased.append(f"{site.where} -> {canonical_op(site.target)[1]}")
        self.patched = len(self._saved) + len(self._alias_sites)

    def _restore(self) -> list[str]:
        """Put back everything patched so far, newest first. Each entry is dropped
        once restored, so a restore that was cut short can be run again."""
        errors: list[str] = []
        while self._alias_sites:
            site = self._alias_sites[-1]
            try:
                site.restore()
            except Exception as e:  # keep restoring the rest
                errors.append(f"{site.where}: {e!r}")
            self._alias_sites.pop()
        while self._saved:
            owner, attr, saved = self._saved[-1]
            try:
                if saved is _MISSING:
                    if attr in vars(owner):
                        delattr(owner, attr)  # inherited from torch._C.TensorBase
                else:
                    setattr(owner, attr, saved)
            except Exception as e:  # keep restoring the rest
                errors.append(f"{getattr(owner, '__name__', owner)}.{attr}: {e!r}")
            self._saved.pop()
        table = _jit_builtin_table()
        while self._registered:
            table.pop(id(self._registered[-1][1]), None)
            self._registered.pop()
        self._repair_new_modules()
        self._originals.clear()
        self._replacements.clear()
        return errors

    def _repair_new_modules(self) -> None:
        """Put originals back where a module imported inside the patched region bound
        a wrapper or helper by name."""
        for mod_name in set(sys.modules) - self._modules_before:
            mod = sys.modules.get(mod_name)
            if not isinstance(mod, types.ModuleType):
                continue
            for key, value in list(mod.__dict__.items()):
                if self._replacements.get(id(value), _MISSING) is value:
                    mod.__dict__[key] = self._originals[id(value)]
                    self.repaired.append(f"{mod_name}.{key}")

    # -- interrupts ---------------------------------------------------------------------
    def _shutdown(self) -> list[str]:
        """Stop recording, restore every patched symbol and release the process-wide
        slot, with SIGINT deferred throughout; idempotent. Also what a Ctrl-C runs
        (:func:`.interrupts.register`) before ``KeyboardInterrupt`` goes on."""
        with deferred_sigint():
            self._entered = False
            if _STATE.owner is self:
                _STATE.owner = None
                _STATE.depth = 0
            try:
                return self._restore()
            finally:
                with _LOCK:
                    if self in _ACTIVE:
                        _ACTIVE.remove(self)
                interrupts.unregister(self._shutdown)

    # -- context manager -------------------------------------------------------------------
    def __enter__(self) -> PatchInterceptor:
        """Patch the namespaces (and the model's aliases) and start recording on
        this thread.

        Ctrl-C: SIGINT waits while symbols are patched or restored, while a recorded
        op or the recorder runs, and under ``DisableTorchFunction``; anywhere else in
        the ``with`` block, every symbol is restored before ``KeyboardInterrupt``
        leaves the signal handler (:mod:`pytest_graphir.capture.interrupts`).

        Raises:
            RuntimeError: another ``PatchInterceptor`` is active in this process
                (nested or on another thread), or this one already is.
            KeyboardInterrupt: SIGINT arrived while patching; nothing is left patched.
        """
        # the check, like everything that follows, runs with SIGINT deferred: an
        # interrupt between acquiring _LOCK and entering its block would leave the
        # lock held and deadlock the next trace
        with deferred_sigint():
            with _LOCK:
                if _ACTIVE:
                    raise RuntimeError(
                        "a PatchInterceptor is already active: symbol patches are "
                        "process-wide, so patch traces can not be nested or run on two "
                        "threads at once; use trace(..., interceptor='mode') for the "
                        "inner one"
                    )
                _ACTIVE.append(self)
            try:
                interrupts.register(self._shutdown, defer=_in_recorded_op)
                t0 = time.perf_counter()
                self._modules_before = set(sys.modules)
                self.repaired = []
                self._patch()
                self.patch_seconds = time.perf_counter() - t0
                self._entered = True
                _STATE.depth = 0
                _STATE.owner = self
            except BaseException:
                self._shutdown()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop recording and restore every patched symbol, whether or not the block
        raised; calling it again, or without ``__enter__``, does nothing. A SIGINT
        that arrives while restoring is delivered once everything is restored.

        Raises:
            RuntimeError: some symbols could not be restored (named in the message).
        """
        if not self._entered:
            return
        t0 = time.perf_counter()
        errors = self._shutdown()
        self.restore_seconds = time.perf_counter() - t0
        if errors:
            raise RuntimeError("PatchInterceptor could not restore: " + "; ".join(errors))
