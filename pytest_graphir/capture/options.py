"""``trace()``'s options and warnings: the checks of a call before anything runs,
the granularity (blackbox, depth, view), and the warnings about what a trace could
not see.
"""

from __future__ import annotations

import difflib
import inspect
import pathlib
import sys
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import torch

from .dtensor import fake_process_group

if TYPE_CHECKING:
    from .state import TraceState


def check_option_typos(model: Any, kwargs: dict[str, Any], trace: Callable[..., Any]) -> None:
    """Reject a model keyword that looks like a misspelt ``trace()`` option.

    ``trace(model, ids, backwards=True)`` would otherwise pass ``backwards`` into a
    ``**kwargs`` forward and silently record no backward pass. A name is rejected when
    :func:`difflib.get_close_matches` finds an option for it and ``model.forward``
    does not declare a parameter of that name (then it is the model's own). The
    options are ``trace``'s keyword-only parameters, read from its
    ``__kwdefaults__`` (every option has a default; ``float32_precision`` and
    ``model_kwargs`` included); any other keyword goes to the model.

    Raises:
        TypeError: naming the argument, the option it resembles and ``model_kwargs``.
    """
    options = list(trace.__kwdefaults__ or ())  # its keyword-only parameters, in order
    close = {k: m[0] for k in kwargs if (m := difflib.get_close_matches(k, options, 1, 0.8))}
    if not close:
        return
    try:
        params = inspect.signature(model.forward).parameters.values()
        declared = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    except (AttributeError, TypeError, ValueError):
        declared = set()
    for key, option in close.items():
        if key not in declared:
            raise TypeError(
                f"trace() got {key}=, close to its option {option}=; if you meant the "
                f"option, write {option}=...; if {type(model).__name__}.forward takes "
                f"{key!r} through **kwargs, pass it as model_kwargs={{'{key}': ...}}"
            )


def checked_call(
    model: Any,
    kwargs: dict[str, Any],
    model_kwargs: dict[str, Any] | None,
    view: str,
    trace: Callable[..., Any],
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Check the call (see :func:`trace`'s Raises); return the module to run (the
    original module of a ``torch.compile``'d one) and the model's keyword arguments."""
    __tracebackhide__ = True
    check_option_typos(model, kwargs, trace)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"trace() needs an nn.Module as its first argument, got {type(model).__name__}; "
            "call trace(model, *inputs)"
        )
    if view not in ("ops", "modules"):
        raise ValueError(f"trace(view={view!r}): use 'ops' (the default) or 'modules'")
    if torch.is_inference_mode_enabled():
        raise RuntimeError(
            "trace() under torch.inference_mode(): inference tensors have no version "
            "counter, which the tracer reads to see in-place writes; trace under "
            "torch.no_grad() instead"
        )
    return original_module(model), {**kwargs, **(model_kwargs or {})}  # eager: nothing compiles


def original_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module a ``torch.compile``'d ``OptimizedModule`` wraps (its ``_orig_mod``), or
    ``model`` itself. ``torch._dynamo.eval_frame`` is not imported: where it is not
    loaded yet, nothing has been compiled."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    if eval_frame is not None and isinstance(model, eval_frame.OptimizedModule):
        return model._orig_mod  # type: ignore[no-any-return]
    return model


class FakeStatisticsWarning(UserWarning):
    """``trace(stats=True)`` on torch's fake process group: its collectives do
    nothing and a rank above 0 holds uninitialised shards, so the statistics differ
    from run to run and describe no model."""


def stats_option(stats: bool | None) -> tuple[bool, dict[str, Any]]:
    """``trace()``'s ``stats`` option resolved: ``None`` (the default) is on, except
    where the default process group is torch's fake one
    (:func:`~.dtensor.fake_process_group`), whose numbers are meaningless and
    differ between runs: there the trace is structure-only, as with
    ``stats=False``, and says why in ``meta``.

    Args:
        stats: ``trace()``'s ``stats`` argument (``True``, ``False`` or ``None``).

    Returns:
        Whether to take statistics, and the ``meta`` entries that record the choice:
        ``{"stats_off": "fake process group"}`` where the default was turned off,
        else ``{}``.

    Warns:
        FakeStatisticsWarning: ``stats=True`` on the fake process group.
    """
    if stats is None:
        return (False, {"stats_off": "fake process group"}) if fake_process_group() else (True, {})
    if stats and fake_process_group():
        _warn(
            FakeStatisticsWarning,
            "trace(stats=True) on the fake process group: its collectives do nothing "
            "and ranks above 0 hold uninitialised shards, so these statistics are "
            "meaningless and change from run to run; leave stats at its default (off "
            "there) or trace on the 'threaded' or 'gloo' backend for real numbers.",
        )
    return bool(stats), {}


def granularity(
    state: TraceState, root: torch.nn.Module, blackbox: Iterable[str | type], depth: int | None
) -> dict[str, Any]:
    """Mark the blackbox modules in ``state.scope.blackboxes``; return the ``meta`` entries
    that record the granularity (none at the default granularity)."""
    out: dict[str, Any] = {}
    if state.view != "ops":
        out["view"] = state.view
    if depth is not None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"trace(depth={depth!r}): depth must be an int >= 1")
        out["depth"] = depth
    boxes = list(blackbox)
    if boxes:
        out["blackbox"] = sorted(b if isinstance(b, str) else b.__name__ for b in boxes)
    paths = {b for b in boxes if isinstance(b, str)}
    classes = tuple(b for b in boxes if isinstance(b, type))
    for module, path in state.scope.names.items():
        if path and (
            path in paths
            or (classes and isinstance(module, classes))
            or (depth is not None and path.count(".") + 1 >= depth)
        ):
            state.scope.blackboxes.add(module)
            state.scope.blackbox_paths.add(path)
    if missing := sorted(paths - state.scope.blackbox_paths):
        raise ValueError(
            f"trace(blackbox=...): no module {missing[0]!r} in {type(root).__name__}; "
            "give module paths as in model.named_modules() or module classes"
        )
    return out


_PACKAGE = str(pathlib.Path(__file__).resolve().parents[1])
"""The ``pytest_graphir`` directory: a frame whose file is under it is not the user's."""


def _warn(category: type[UserWarning], message: str) -> None:
    """Warn at the first frame outside the package: the user's line that called
    ``trace()``, ``trace_schedule()`` or ``compare_compiled()``, however many of our
    frames lie between (``warnings.warn``'s ``stacklevel``, counted from here)."""
    frame, level = inspect.currentframe(), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(category(message), stacklevel=level)


class UncapturedCallsWarning(UserWarning):
    """``trace(interceptor="patch")`` found import-time aliases it cannot see through
    (``self.act = nn.functional.gelu`` bound before patching): their calls are missing."""


class UnseenWriteWarning(UserWarning):
    """A tensor whose statistics were held back (small tensors on the CPU, and on
    other devices those below ``DIRECT_FROM`` elements; see
    :mod:`pytest_graphir.capture.stats`) was written in place by a call no interceptor
    saw before they were computed (its ``_version`` moved): its statistics show the
    written values."""


def warn_uncaptured(mode: Any, root: torch.nn.Module) -> None:
    """Warn (:class:`UncapturedCallsWarning`) when the patch interceptor found aliases of
    torch functions taken before patching, whose calls are missing."""
    if uncaptured := getattr(mode, "uncaptured", None):
        _warn(
            UncapturedCallsWarning,
            f"trace(interceptor='patch'): {len(uncaptured)} reference(s) in "
            f"{type(root).__name__} hold an original torch function taken before patching, "
            f"so their calls are missing from the graph: {'; '.join(uncaptured[:5])}"
            + (" ..." if len(uncaptured) > 5 else "")
            + ". Use the default interceptor='mode', which sees them.",
        )


def warn_stale(stale: int, root: torch.nn.Module) -> None:
    """Warn (:class:`UnseenWriteWarning`) when held tensors were written in place by
    something no interceptor saw before their statistics were computed."""
    if stale:
        _warn(
            UnseenWriteWarning,
            f"trace(): {stale} tensor(s) of {type(root).__name__} changed version "
            "after they were recorded, through a call the interceptor did not see (a "
            "C++ extension writing in place, a function interceptor='patch' skips, or "
            "ctx.mark_dirty in a custom autograd Function), so their statistics may "
            "show values written later. Writes through torch calls (x.add_(), "
            "x[i] = v, out=, inplace=True) are seen: use interceptor='mode' (the "
            "default), or stats=False for this model.",
        )


class OtherThreadWarning(UserWarning):
    """Torch ops ran on another thread while the traced forward ran: no interceptor
    records them, so they are missing from the graph and their results enter it as
    constants.

    Seen on threads the forward starts, and, from Python 3.12 on
    (``threading.setprofile_all_threads``), on threads already running (a thread
    pool made before the trace). Before Python 3.12 ops handed to such a thread are
    missing without this warning: nothing lets one thread watch another that is
    already running (:mod:`.threads`)."""


def warn_other_threads(counts: dict[str, int], root: torch.nn.Module) -> None:
    """Warn (:class:`OtherThreadWarning`) naming each thread that ran torch ops during
    the forward and how many (``counts``, from :class:`~.threads.OtherThreads`)."""
    if counts:
        threads = ", ".join(f"{n} op(s) on thread {name!r}" for name, n in counts.items())
        _warn(
            OtherThreadWarning,
            f"trace(): the forward of {type(root).__name__} ran torch ops on other "
            f"threads, which are not recorded: {threads}. Their results enter the "
            "graph as constants (<tensor ...>). Run them on the thread that calls "
            "the model to have them in the graph.",
        )
