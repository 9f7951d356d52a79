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
thread's profile function back). The mode counts only while the forward runs and
otherwise passes every call through. Threads started before the forward (a pool
that already has its workers) are not seen.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from torch.overrides import TorchFunctionMode

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

    def __enter__(self) -> OtherThreads:
        self._previous = threading.getprofile()
        threading.setprofile(self._start)
        self.active = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.active = False
        threading.setprofile(self._previous)

    def _start(self, frame: Any, event: str, arg: Any) -> None:
        """The profile function of a new thread, called once: put the thread's own
        profile function back, and count its ops from here on."""
        sys.setprofile(self._previous)
        if self.active:
            # pushed for good: the thread's mode stack keeps it, inert after the trace
            _Counter(self).__enter__()  # type: ignore[no-untyped-call]

    def count(self) -> None:
        """One op on the current thread."""
        name = threading.current_thread().name
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + 1


class _Counter(TorchFunctionMode):
    """Counts the ops of one thread into ``watch`` while it is active."""

    def __init__(self, watch: OtherThreads) -> None:
        super().__init__()
        self.watch = watch

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if self.watch.active and op_info(func)[0] is not None:
            self.watch.count()
        return func(*args, **(kwargs or {}))
