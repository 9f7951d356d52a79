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
the forward and gets back the profile function threads start with (one it had set
itself is lost). Before Python 3.12 a thread started before the forward is not seen:
its ops are missing without a warning. Threads that trace a forward of their own, and
those registered with :func:`separate_program` (the ranks of a threaded process
group), are neither counted nor given the counter.

After the last forward the counter leaves each thread's mode stack at the thread's
first Python call (from Python 3.12; before, at its first torch function), so that a
pool's worker does not keep the trace's mode for its life. It leaves only from the top
of the stack: under a mode the thread pushed itself it stays, inert, and the next
trace tries again. A thread that never runs Python again keeps an inert counter.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, ClassVar

import torch
from torch.overrides import TorchFunctionMode

from . import interrupts
from .interrupts import deferred_sigint
from .mode import op_info

_EVERY: Any = getattr(threading, "setprofile_all_threads", None)  # Python 3.12+
"""``threading.setprofile_all_threads``, or None: before Python 3.12 a profile function
reaches only the threads started after it is set, never the calling thread."""


class OtherThreads:
    """Context manager around the forward: :attr:`counts` holds, per thread name, the
    number of ops (canonical names that are not metadata) run on other threads while
    the block ran (threads it starts; from Python 3.12 also threads already running)."""

    def __init__(self) -> None:
        self.active = False
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._own: Any = None
        self._thread: threading.Thread | None = None

    entered = 0
    """How many watches are entered in this process (traces on several threads at
    once: the ranks of a threaded process group); the first installs the threads'
    profile function, the last one out puts the one it found (:attr:`found`) back."""
    found: Any = None
    owners: ClassVar[list[threading.Thread]] = []
    """Threads that run a program of their own: a trace's calling thread while it is
    in the block, and :func:`separate_program`'s threads. A list, so that each update
    is one atomic call and the clean-up path takes no lock."""

    def __enter__(self) -> OtherThreads:
        with deferred_sigint():  # a Ctrl-C here would leave the profile function set
            # only the all-threads variant replaces this thread's own profile function
            self._own = sys.getprofile() if _EVERY is not None else None
            self._thread = threading.current_thread()
            OtherThreads.owners.append(self._thread)
            _Counter.watch = self
            interrupts.register(self.__exit__)  # Ctrl-C anywhere later restores it first
            if not OtherThreads.entered:
                OtherThreads.found = threading.getprofile()
                (_EVERY or threading.setprofile)(self._start)
            OtherThreads.entered += 1
            self.active = True
        return self

    def __exit__(self, *exc: object) -> None:
        """Put the profile functions back as :meth:`__enter__` found them, and let
        the counters leave the threads that got one (idempotent)."""
        with deferred_sigint():
            if self.active:
                OtherThreads.entered -= 1
                _drop(self._thread)
            self.active = False
            if not OtherThreads.entered:
                if _EVERY is not None:
                    _EVERY(_leave)  # each thread's counter leaves at its next Python call
                threading.setprofile(OtherThreads.found)
            if _EVERY is not None and threading.current_thread() is self._thread:
                sys.setprofile(self._own)
            interrupts.unregister(self.__exit__)

    def _start(self, frame: Any, event: str, arg: Any) -> None:
        """A thread's profile function, called once at its first Python call: put its
        profile function back, and (another thread, during the forward) count its ops
        from here on."""
        thread = threading.current_thread()
        sys.setprofile(self._own if thread is self._thread else OtherThreads.found)
        watch = _Counter.watch
        if watch is None or not watch.active or thread in OtherThreads.owners:
            return
        if getattr(_THREAD, "counter", None) is None:
            _THREAD.counter = _Counter().__enter__()  # type: ignore[no-untyped-call]

    def count(self) -> None:
        """One op on the current thread."""
        name = threading.current_thread().name
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + 1


@contextmanager
def separate_program(*threads: threading.Thread) -> Iterator[None]:
    """Run ``threads`` (not started yet, so that none is counted before it is
    registered) as programs of their own while the ``with`` block runs: a trace on
    another thread does not count their ops nor give them its counter (the ranks of a
    threaded process group, each tracing its own forward)."""
    OtherThreads.owners.extend(threads)
    try:
        yield
    finally:
        for thread in threads:
            _drop(thread)


def _drop(thread: threading.Thread | None) -> None:
    """Remove one ``thread`` from :attr:`OtherThreads.owners` if it is there (a thread
    may be in it twice: a rank that traces)."""
    with suppress(ValueError):
        OtherThreads.owners.remove(thread)  # type: ignore[arg-type]


_THREAD = threading.local()
"""Per thread: ``counter``, the :class:`_Counter` on its mode stack (or None), and
``tried``, the watch after which the counter last tried to leave."""


def _leave(frame: Any, event: str, arg: Any) -> None:
    """A thread's profile function after the last forward: take its counter off the
    top of its mode stack, then put the profile function back. While a mode's
    ``__torch_function__`` runs, torch has taken that mode off the stack (and puts it
    back on return): wait for an event outside every handler. Under a mode of the
    thread's own the counter stays, inert, until the next trace."""
    counter = getattr(_THREAD, "counter", None)
    if counter is not None:
        # a mode's handler runs: torch took that mode off the stack until it returns
        if any(f.f_code.co_name == "__torch_function__" for f, _ in traceback.walk_stack(frame)):
            return  # try again at the next event
        depth = torch._C._len_torch_function_stack()
        if depth and torch._C._get_function_stack_at(depth - 1) is counter:
            torch._C._pop_torch_function_stack()
            _THREAD.counter = None
    sys.setprofile(OtherThreads.found)


class _Counter(TorchFunctionMode):
    """Counts the ops of its thread into ``watch`` while that is active (the last
    :class:`OtherThreads` entered); after that, once per watch, it sets
    :func:`_leave` to leave the thread's mode stack (where the thread has no profile
    function of its own)."""

    watch: OtherThreads | None = None

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        watch = self.watch
        if watch is not None and watch.active:
            if op_info(func)[0] is not None:
                watch.count()
        elif getattr(_THREAD, "tried", None) is not watch and sys.getprofile() is None:
            _THREAD.tried = watch
            sys.setprofile(_leave)
        return func(*args, **(kwargs or {}))
