"""Python's cyclic garbage collector, paused while a trace or a snapshot load builds
many objects that hold no reference cycle (no torch import: serialize uses it too)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (:func:`gc.disable`) for one trace (or
    one snapshot load, :func:`pytest_graphir.serialize.loads`).

    A trace allocates a few objects per recorded op (node, argument lists, labels)
    and keeps them; each of CPython's full collections walks all of them, so with
    the collector on a trace's cost grows faster than its node count (docs/capture.md,
    "Cost"). Reference counting
    still frees every acyclic object at once; the collector's previous state is
    restored on the way out, also when the model raises.

    After a trace that returns, the objects allocated meanwhile (all still in the
    youngest generation: ~100k for 11.5k nodes) are moved to the oldest generation
    with :func:`gc.freeze` + :func:`gc.unfreeze`, two list splices, instead of being
    walked by the young collection the next allocation would start. They are walked by the
    next full collection, as any long-lived object is, and the graph is usually freed
    by reference counting long before. The trace's own state holds no reference cycle
    (:meth:`~.capture.state.TraceState.close`), so nothing of the model is kept alive
    by the promotion; cyclic garbage the model's forward itself made waits for that
    full collection.
    Not done when the trace raises (a traceback's frames may hold activations in a
    cycle), nor when the process has frozen objects of its own
    (``gc.get_freeze_count()``), which :func:`gc.unfreeze` would release.
    """
    was_enabled = gc.isenabled()
    promote = was_enabled and gc.get_freeze_count() == 0
    gc.disable()
    try:
        yield
        if promote and gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
    finally:
        if was_enabled:
            gc.enable()
