"""Torch ops run on other threads while the traced forward runs.

The interceptors record on the thread that calls the model only (a
``TorchFunctionMode`` is thread-local; the patch interceptor records on the thread
that entered it). An op a forward hands to another thread (``threading.Thread``, a
``ThreadPoolExecutor`` it starts) is missing from the graph, and its result enters
the graph as a constant (``<tensor float32[2, 8]>``). :class:`OtherThreads` counts
those ops, per thread, so that the trace can say so
(:class:`~.options.OtherThreadWarning`).

How: while the forward runs, ``threading.setprofile`` makes every thread started in
that time push a counting ``TorchFunctionMode`` when it starts (then it puts the
thread's profile function back). On Python 3.12 and later,
``threading.setprofile_all_threads`` does the same for the threads already running (a
pool that has its workers): each pushes the counter at its first Python call during
the forward, once per thread for the life of the thread (a pool's worker is reused
by later traces), and gets back the profile function threads start with (one it had
set itself is lost). The counter counts only while a forward runs and otherwise
passes every call through. Before Python 3.12 a thread started before the forward is
not seen: its ops are missing without a warning.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from torch.overrides import TorchFunctionMode

from . import interrupts
from .interrupts import deferred_sigint
from .mode import op_info


class OtherThreads:
    """Context manager around the forward: :attr:`counts` holds, per thread name, the
    number of ops (canonical names that are not metadata) run on threads started
    inside the block while it ran."""

    def __init__(self) -> None:
        self.active = False
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._previous: Any = None
        self._own: Any = None
        self._owner = 0

    entered = 0
    """How many watches are entered in this process (traces on several threads at
    once: the ranks of a threaded process group); the first installs the threads'
    profile function, the last one out puts the one it found (:attr:`found`) back."""
    found: Any = None

    def __enter__(self) -> OtherThreads:
        with deferred_sigint():  # a Ctrl-C here would leave the profile function set
            self._previous = threading.getprofile()
            self._own, self._owner = sys.getprofile(), threading.get_ident()
            _Counter.watch = self
            interrupts.register(self.__exit__)  # Ctrl-C anywhere later restores it first
            if not OtherThreads.entered:
                OtherThreads.found = self._previous
                every = getattr(threading, "setprofile_all_threads", None)  # Python 3.12+
                (every or threading.setprofile)(self._start)
            OtherThreads.entered += 1
            self.active = True
        return self

    def __exit__(self, *exc: object) -> None:
        """Put the profile functions back as :meth:`__enter__` found them (idempotent)."""
        with deferred_sigint():
            if self.active:
                OtherThreads.entered -= 1
            self.active = False
            if not OtherThreads.entered:
                threading.setprofile(OtherThreads.found)
            if threading.get_ident() == self._owner:
                sys.setprofile(self._own)
            interrupts.unregister(self.__exit__)

    def _start(self, frame: Any, event: str, arg: Any) -> None:
        """A thread's profile function, called once at its first Python call: put its
        profile function back, and (another thread, during the forward) count its ops
        from here on."""
        if threading.get_ident() == self._owner:
            sys.setprofile(self._own)
            return
        sys.setprofile(self._previous)
        if self.active and not getattr(_PUSHED, "done", False):
            _PUSHED.done = True  # one counter per thread, for the thread's life
            _Counter().__enter__()  # type: ignore[no-untyped-call]

    def count(self) -> None:
        """One op on the current thread."""
        name = threading.current_thread().name
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + 1


_PUSHED = threading.local()
"""Per thread: ``done`` once a :class:`_Counter` is on the thread's mode stack."""


class _Counter(TorchFunctionMode):
    """Counts the ops of its thread into ``watch`` while that is active (the last
    :class:`OtherThreads` entered; inert otherwise)."""

    watch: OtherThreads | None = None

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        watch = self.watch
        if watch is not None and watch.active and op_info(func)[0] is not None:
            watch.count()
        return func(*args, **(kwargs or {}))
