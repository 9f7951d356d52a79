"""The replacements the patch interceptor installs: the recording wrapper of a C++
builtin, the flusher of a memory-exposing method, the property that shadows a
``TensorBase`` getter, and the two dispatch-helper probes. Built once per callable
and process (:func:`replacement`); they hold no per-interceptor state and read the
per-thread :data:`STATE`."""

from __future__ import annotations

import functools
import threading
import types
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch._guards import CompileContext

from ...opnames import canonical_op
from .. import interrupts
from ..interrupts import poll
from ..mode import op_info
from ..protocol import Recorder, flush_call_record
from ..writes import classify


class Owner(Recorder, Protocol):
    """What the replacements ask of the interceptor that records on this thread
    (:class:`~.interceptor.PatchInterceptor`)."""

    skip: frozenset[str]
    """Qualified or canonical names not recorded (a dispatch through one runs unrecorded)."""


class ThreadState(threading.local):
    """Per-thread recording state: the interceptor that records on this thread
    (``None`` on every other thread) and the depth of the recorded call in progress.
    Each thread reads the class's defaults until it sets its own."""

    owner: Owner | None = None
    depth = 0


STATE = ThreadState()

# what the replacements call on every call, bound once
_is_compiling = torch.compiler.is_compiling
_all_disabled = torch._C._is_torch_function_all_disabled
_GUARD = interrupts._G

_compile_context = CompileContext.try_get
"""Not None while torch compiles a frame on this thread (Dynamo's own analysis,
fake-tensor conversion, AOT Autograd, the backend), whose tensor calls are torch's,
not the model's: they run unrecorded. ``torch.compiler.is_compiling`` (which the
replacements ask first) is true only inside the code Dynamo traces."""


_named_like = functools.partial(functools.wraps, assigned=("__name__", "__qualname__", "__doc__"))
"""``@_named_like(orig)``: give a replacement the name, qualified name and docstring of
``orig`` (which every patched callable has) and ``__wrapped__``, not its module."""


def make_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Return the recording wrapper of C++ builtin ``orig``, recorded under its
    canonical name (:func:`~pytest_graphir.opnames.canonical_op`)."""
    name, raw = canonical_op(orig)
    name = name or raw
    write = classify(orig)

    @_named_like(orig)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _is_compiling():  # first, so Dynamo never reads the recorder's state
            return orig(*args, **kwargs)
        owner = STATE.owner
        if owner is None or STATE.depth or _all_disabled() or _compile_context() is not None:
            return orig(*args, **kwargs)
        STATE.depth = 1
        try:
            out = flush_call_record(owner, orig, name, raw, write, args, kwargs)
        finally:
            STATE.depth = 0
        if _GUARD.pending is not None:  # a SIGINT arrived inside the op or the recorder
            poll()
        return out

    return wrapper


def make_flusher(orig: Callable[..., Any]) -> Callable[..., Any]:
    """Return the wrapper of ``orig`` that calls the recording interceptor's
    ``before_write`` first (at depth 0, as the mode would see the call) and records
    nothing."""

    @_named_like(orig)
    def flusher(*args: Any, **kwargs: Any) -> Any:
        owner = STATE.owner
        before_write = owner.before_write if owner is not None else None
        if before_write is not None and not (STATE.depth or _is_compiling() or _all_disabled()):
            before_write()
        return orig(*args, **kwargs)

    return flusher


def make_property(desc: Any) -> Any:
    """Return the ``property`` that shadows getset descriptor ``desc`` of
    ``torch._C.TensorBase`` (``x.T``) on ``torch.Tensor``: its getter records like a
    wrapper (the mode sees ``Tensor.T.__get__`` with ``args=(x,)``); setting and
    deleting go to the descriptor unrecorded, as under the mode, setting through
    :func:`make_flusher` (``x.data = y`` writes x without bumping its version)."""
    return property(
        make_wrapper(desc.__get__), make_flusher(desc.__set__), desc.__delete__, desc.__doc__
    )


def in_recorded_op() -> bool:
    """True while a recorded op or the recorder runs on this thread (depth 1): a
    SIGINT then waits until the op returns."""
    return STATE.depth > 0


def make_has_probe(real: Callable[..., bool]) -> Callable[..., bool]:
    """Return the patched ``has_torch_function*``: true while a trace records on
    this thread at depth 0 (as under a mode), else the real answer."""

    @_named_like(real)
    def has_torch_function(*args: Any) -> bool:
        if _is_compiling() or STATE.owner is None or STATE.depth or _all_disabled():
            return real(*args)
        return _compile_context() is None or real(*args)

    return has_torch_function


def make_handle_probe(real: Callable[..., Any]) -> Callable[..., Any]:
    """Return the patched ``handle_torch_function``: at depth 0 it records
    ``(public_api, args, kwargs)`` and runs ``public_api(*args, **kwargs)``, which is
    what ``RecordingMode.__torch_function__`` receives and does."""

    @_named_like(real)
    def handle_torch_function(
        public_api: Callable[..., Any], relevant_args: Any, *args: Any, **kwargs: Any
    ) -> Any:
        if _is_compiling():
            return real(public_api, relevant_args, *args, **kwargs)
        owner = STATE.owner
        if owner is None or STATE.depth or _all_disabled() or _compile_context() is not None:
            return real(public_api, relevant_args, *args, **kwargs)
        STATE.depth = 1
        try:
            # named after its original (public_api may be a replacement)
            name, raw, write = op_info(ORIGINALS.get(id(public_api), public_api))
            if raw in owner.skip or name in owner.skip:
                name = None  # a skipped function runs unrecorded
            out = flush_call_record(owner, public_api, name, raw, write, args, kwargs)
        finally:
            STATE.depth = 0
        if _GUARD.pending is not None:
            poll()
        return out

    return handle_torch_function


_REPLACEMENTS: dict[int, tuple[Any, Callable[..., Any]]] = {}
"""``id(original) -> (original, replacement)``: wrappers and helpers are built once
per process and reused."""

ORIGINALS: dict[int, Any] = {}
"""``id(replacement) -> original``, the reverse of ``_REPLACEMENTS``: a replacement
lives as long as the process, so no other object can have its id."""


def replacement(original: Any, make: Callable[[Any], Any] | None = None) -> Callable[..., Any]:
    """Return the (cached) replacement of ``original`` that ``make`` builds: by default
    the recording wrapper of a C++ builtin (:func:`make_wrapper`), or for a getset
    descriptor its shadowing property (:func:`make_property`); the interceptor passes
    :func:`make_flusher` (:data:`~.targets.FLUSH_ONLY`) and the dispatch-helper probes
    (:func:`make_has_probe`, :func:`make_handle_probe`)."""
    entry = _REPLACEMENTS.get(id(original))  # it keeps original alive: its id is its own
    if entry is None:
        if make is None:
            is_property = isinstance(original, types.GetSetDescriptorType)
            make = make_property if is_property else make_wrapper
        entry = _REPLACEMENTS[id(original)] = (original, make(original))
        ORIGINALS[id(entry[1])] = original
    return entry[1]
