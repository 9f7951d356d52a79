"""Ctrl-C during a trace: torch's global state is restored before ``KeyboardInterrupt``
leaves the signal handler, and no install or restore loop is cut in half.

A ``KeyboardInterrupt`` is raised by Python's SIGINT handler between any two
bytecodes: in the middle of a loop that patches symbols or registers global hooks,
between ``register_module_forward_hook`` and storing its handle, inside a
``finally`` before the cleanup call, or in the Python ``__exit__`` of a
``torch.no_grad()`` block (leaving grad mode off). ``try/finally`` can not cover every
such point. So while a trace holds global state, this module's handler sits in front
of the one that was installed (normally ``signal.default_int_handler``):

* inside :func:`deferred_sigint` blocks and this module's own functions, under
  ``torch._C.DisableTorchFunction`` (where the tracer's hooks and statistics run),
  or while a registered ``defer`` predicate is true, a SIGINT is only recorded,
  and delivered at the end of the block or at the next :func:`poll`;
* anywhere else it is passed to the previous handler at once; if that raises
  (``KeyboardInterrupt``), every registered cleanup runs first (restoring patches,
  removing hooks), newest first, and the exception then goes on.

Python runs signal handlers on the main thread only, so on other threads nothing is
installed (they never receive ``KeyboardInterrupt``).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import traceback
import types
from collections.abc import Callable
from typing import Any

import torch

Cleanup = Callable[[], Any]


_G = types.SimpleNamespace(prev=None, installed=False, users=0, depth=0, cleanups=[], pending=None)
"""The handler's state: ``prev``, the handler it replaced; ``installed``; ``users``, how
many hold it; ``depth``, of :func:`deferred_sigint` blocks; ``cleanups``, the registered
``(cleanup, defer or None)`` pairs; ``pending``, the recorded ``(signum, frame)`` or
None."""
_all_disabled = torch._C._is_torch_function_all_disabled


def deliver(handler: Any, signum: int, frame: types.FrameType | None) -> None:
    """Hand a SIGINT to ``handler`` as Python would: call it if it is callable, raise
    ``KeyboardInterrupt`` for ``SIG_DFL``, drop it for ``SIG_IGN`` or ``None``."""
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_DFL:
        raise KeyboardInterrupt


def _deferring() -> bool:
    return bool(_G.depth or _all_disabled() or any(d is not None and d() for _, d in _G.cleanups))


def _in_own_code(frame: types.FrameType | None) -> bool:
    """The signal landed in one of this module's functions, or in a function one of
    them called (``signal.signal``, a cleanup run by :func:`_interrupt`, a trace or
    profile function): one of them is on the stack."""
    return frame is not None and any(f.f_code in _OWN_CODE for f, _ in traceback.walk_stack(frame))


def _on_sigint(signum: int, frame: types.FrameType | None) -> None:
    if _deferring() or _in_own_code(frame):
        _G.pending = (signum, frame)
        return
    _interrupt(signum, frame)


def _interrupt(signum: int, frame: types.FrameType | None) -> None:
    """Pass the signal on; if that raises, run every cleanup first."""
    prev = _G.prev if _G.installed else signal.default_int_handler
    try:
        deliver(prev, signum, frame)
    except BaseException:
        _G.depth += 1  # a second Ctrl-C must not cut the cleanups short
        try:
            for cleanup, _ in reversed(list(_G.cleanups)):
                # keep cleaning; the interrupt is what matters
                with contextlib.suppress(Exception):
                    cleanup()
        finally:
            _G.depth -= 1
        raise


def _acquire() -> bool:
    """Install the handler (or count one more user); ``False`` where signals can
    not be handled here (not the main thread or interpreter)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if _G.installed:
        _G.users += 1
        return True
    try:
        prev = signal.signal(signal.SIGINT, _on_sigint)
    except (ValueError, OSError):
        return False
    _G.prev, _G.installed, _G.users = prev, True, 1
    return True


def _release() -> None:
    """One user fewer; the last one puts the previous handler back (unless it was
    replaced meanwhile) and hands it a signal still pending."""
    _G.users -= 1
    if _G.users > 0:
        return
    prev, _G.installed, _G.prev = _G.prev, False, None
    if signal.getsignal(signal.SIGINT) is _on_sigint:
        signal.signal(signal.SIGINT, prev)
    pending, _G.pending = _G.pending, None
    if pending is not None:
        deliver(prev, *pending)


def poll() -> None:
    """Deliver a recorded SIGINT now, if one is pending and nothing defers it (the
    patch interceptor calls this after each recorded op)."""
    if _G.pending is not None and _G.installed and not _deferring():
        pending, _G.pending = _G.pending, None
        _interrupt(*pending)


def register(cleanup: Cleanup, defer: Callable[[], bool] | None = None) -> bool:
    """Run ``cleanup()`` before a ``KeyboardInterrupt`` from SIGINT goes on, until
    :func:`unregister`; while ``defer()`` is true, a SIGINT waits for :func:`poll`.

    Returns ``False`` (and registers nothing) off the main thread. ``cleanup`` must
    be idempotent: it also runs on the normal path, by its owner.
    """
    if not _acquire():
        return False
    _G.cleanups.append((cleanup, defer))
    return True


def unregister(cleanup: Cleanup) -> None:
    """Undo :func:`register` (compared with ``==``, so bound methods match); a no-op
    for a cleanup not registered. May raise ``KeyboardInterrupt`` for a SIGINT that
    was pending, after putting the previous handler back."""
    for i, (registered, _) in enumerate(_G.cleanups):
        if registered == cleanup:
            del _G.cleanups[i]
            _release()
            return


class deferred_sigint:
    """Run the ``with`` block with SIGINT deferred to its end.

    Nested blocks defer to the end of the outermost one. Off the main thread the
    block runs as it is. A class rather than a generator, so that no frame of it
    belongs to ``contextlib`` (a SIGINT landing in this module's own frames waits).

    Raises:
        KeyboardInterrupt: after the block, if SIGINT arrived during it (with the
            default handler); registered cleanups have run first.
    """

    __slots__ = ("acquired", "outer")

    def __enter__(self) -> None:
        self.acquired = False
        self.outer = -1
        if threading.current_thread() is not threading.main_thread():
            return
        self.outer = _G.depth
        try:
            _G.depth = self.outer + 1  # before the handler is in place: then SIGINT waits
            self.acquired = _acquire()
        except BaseException:  # the previous handler raised before ours was in place
            _G.depth = self.outer
            self.outer = -1
            raise

    def __exit__(self, *exc: object) -> None:
        if self.outer < 0:
            return
        try:
            _G.depth = self.outer
            if self.acquired:
                poll()  # nothing pending or still deferred (an outer block): a no-op
        finally:
            if self.acquired:
                self.acquired = False
                _release()


_OWN_CODE = frozenset(
    f.__code__
    for f in (*globals().values(), deferred_sigint.__enter__, deferred_sigint.__exit__)
    if isinstance(f, types.FunctionType) and f.__module__ == __name__
)
"""Code of this module's functions: a SIGINT handled while one of them runs waits
(for the end of the block, the next :func:`poll`, or the last :func:`unregister`)."""
