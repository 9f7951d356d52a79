"""Dynamo's process-wide state, and every private torch name ``compiled/`` reaches.

Each function below wraps one private Dynamo object, for want of a public API (listed
in ``docs/architecture.md``); ``tests/test_torch_internals.py`` pins each, so a torch
release that moves one fails there first. The rest of ``compiled/`` uses public torch:
``torch._dynamo.register_backend`` / ``lookup_backend`` / ``list_backends``,
``torch.compiler``, FX node and ``GraphModule`` metadata, ``functorch.compile``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._dynamo import output_graph, utils
from torch._dynamo.callback import callback_handler


def reset_dynamo() -> None:
    """Forget every compiled frame, guard, callback and counter.

    ``torch._dynamo.reset()``, then ``torch._dynamo.utils.counters.clear()``: ``reset``
    leaves the counters, which :func:`break_counts` reads (missing: a reset of
    Dynamo's statistics, or a per-compile record of graph breaks).
    """
    torch._dynamo.reset()
    utils.counters.clear()


def break_counts() -> tuple[dict[str, int], dict[str, int]]:
    """``(counters["graph_break"], counters["unimplemented"])``: reason -> count of the
    graph breaks Dynamo counted since :func:`reset_dynamo` (missing: a public record of
    counted graph breaks; ``torch._dynamo.explain`` compiles the model again)."""
    return dict(utils.counters["graph_break"]), dict(utils.counters["unimplemented"])


def on_compile(start: Callable[[Any], None], end: Callable[[Any], None]) -> None:
    """Call ``start``/``end`` at the start and end of every frame compile
    (``torch._dynamo.callback.callback_handler``; ``torch._dynamo.reset()`` drops them;
    missing: a public compile-event hook, with the compile id)."""
    callback_handler.register_start_callback(start)
    callback_handler.register_end_callback(end)


def break_reasons() -> list[Any]:
    """``torch._dynamo.output_graph.graph_break_reasons``: every ``GraphCompileReason``
    (``.reason``, ``.user_stack``) since the last reset, frames that produced no graph
    included (missing: a public per-break record with its user stack)."""
    return list(output_graph.graph_break_reasons)  # type: ignore[attr-defined]


def compilation_metrics() -> list[Any]:
    """``torch._dynamo.utils.get_compilation_metrics()``: one record per compile
    (``compile_id``, ``guard_count``, ``start_time``) (missing: a public guard count)."""
    return list(utils.get_compilation_metrics())


def guard_failures() -> list[Any]:
    """Every guard failure that caused a recompile, from
    ``torch._dynamo.utils.guard_failures`` (missing: a public recompile reason API)."""
    return [reason for reasons in utils.guard_failures.values() for reason in reasons]


TRACE_LOGGER = "torch.__trace"
"""``torch._logging``'s structured-trace logger (``trace_structured``): always at DEBUG,
never propagating, read by ``TORCH_TRACE`` / tlparse through torch's own handler."""


@contextlib.contextmanager
def quiet_trace_log() -> Iterator[None]:
    """Keep torch's structured-trace records out of every handler but torch's own.

    pytest attaches its capture handlers to each logger that does not propagate,
    ``torch.__trace`` included (always at DEBUG): every compile step would land in a
    test's captured log as an empty DEBUG line. For the duration, handlers whose class
    is defined outside ``torch`` are taken off that logger, and put back afterwards;
    torch's own handler (a ``TORCH_TRACE`` file) keeps every record.
    """
    trace_log = logging.getLogger(TRACE_LOGGER)
    foreign = [h for h in trace_log.handlers if type(h).__module__.split(".")[0] != "torch"]
    for handler in foreign:
        trace_log.removeHandler(handler)
    try:
        yield
    finally:
        for handler in foreign:
            trace_log.addHandler(handler)
