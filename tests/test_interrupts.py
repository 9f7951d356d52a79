"""Ctrl-C during ``trace(..., interceptor="patch", hooks=True)``: wherever the interrupt
lands, torch is left exactly as it was and the next trace works; and an exception other
than ``KeyboardInterrupt`` (a signal handler's) at any line of the patch interceptor's
enter and exit leaves nothing behind either.

The sweep is reproducible: a ``sys.settrace`` function counts the trace's events
(every Python call, and every line of ``pytest_graphir.capture``) and, at event N,
simulates a SIGINT with ``_thread.interrupt_main()``, which runs the installed SIGINT
handler at the next bytecode boundary as a real Ctrl-C does. N runs over the first and
last occurrence of every line of the capture code (sampled with a fixed seed) and
every line of the functions where a cut would leave state behind.
"""

from __future__ import annotations

import _thread
import os
import random
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import models
import pytest
import torch
import torch_state

from pytest_graphir import trace
from pytest_graphir.capture import interrupts, patch, threads
from pytest_graphir.serialize import dumps

CAPTURE = str(Path(interrupts.__file__).parent)

LINES = frozenset(
    {
        "__enter__",
        "__exit__",
        "_full_precision",
        "release",
        "flush_call_record",
        "_restore",
        "install",
        "remove",
        "trace",
        "register",
        "unregister",
        "_acquire",
        "_release",
        "deferred_sigint",
        "finish",
        "_interrupt",
        "_on_sigint",
        "poll",
        "_patch",
        "_set",
        "wrapper",
        "handle_torch_function",
        "add",
        "apply",
    }
)
"""Functions whose every line is a candidate point: installing, restoring, handing
over, recording; elsewhere (the model, the namespace scans) every call is one."""


@pytest.fixture(autouse=True, scope="module")
def _sigint_handled() -> Any:
    """A program started in a shell's background job (``cmd &``, ``nohup``) inherits
    SIGINT ignored: the guard then rightly passes a Ctrl-C on to no handler, and the
    simulated ones below would interrupt nothing. These tests run with Python's
    default handler, as an interactive pytest does; the handler found is put back."""
    found = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, found)


@pytest.fixture(autouse=True)
def _guard_left_clean() -> Any:
    """Each test leaves the interrupt guard as it found it (and a dirty one does not
    spill into the next test)."""
    yield
    g = interrupts._G
    state = (g.installed, g.users, g.depth, len(g.cleanups), g.pending)
    g.installed, g.users, g.depth, g.pending = False, 0, 0, None
    g.cleanups.clear()
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert state == (False, 0, 0, 0, None)


def _run(
    model: torch.nn.Module,
    x: torch.Tensor,
    at: int,
    log: list[tuple[str, str, int]] | None = None,
    codes: list[Any] | None = None,
) -> tuple[str, int]:
    """Trace with a simulated SIGINT at event ``at`` (0: none); return the outcome
    (``"interrupted"`` or ``"completed"``) and the number of events seen; ``log`` and
    ``codes`` get each event's site and code object."""
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        nonlocal count
        count += 1
        if log is not None:
            log.append((frame.f_code.co_name, event, frame.f_lineno))
        if codes is not None:
            codes.append(frame.f_code)
        if count == at:
            _thread.interrupt_main()
        if event == "call" and frame.f_code.co_name in LINES:
            return tracer  # line events here; only call events elsewhere
        return None

    outcome = "completed"
    try:
        sys.settrace(tracer)
        try:
            trace(model, x, interceptor="patch", hooks=True)
        finally:
            sys.settrace(None)
        for _ in range(100):  # a signal raised at the very end is handled here
            pass
    except KeyboardInterrupt:
        outcome = "interrupted"
    return outcome, count


def _points(log: list[tuple[str, str, int]]) -> list[int]:
    """The first and the last occurrence of every (function, event, line)."""
    first: dict[tuple[str, str, int], int] = {}
    last: dict[tuple[str, str, int], int] = {}
    for i, site in enumerate(log, 1):
        first.setdefault(site, i)
        last[site] = i
    return sorted(set(first.values()) | set(last.values()))


def _sweep(ignore: tuple[str, ...]) -> tuple[list[str], dict[str, int], int]:
    """Interrupt a patch trace at every chosen point; return the first point that
    left torch changed (beyond ``ignore``), the outcomes, and the number of points."""
    patch.warm_caches()
    model, (x,) = models.mlp()
    reference = dumps(trace(model, x, interceptor="patch", hooks=True))
    log: list[tuple[str, str, int]] = []
    assert _run(model, x, 0, log)[0] == "completed"
    points = _points(log)[::4]  # every fourth one: the CI budget
    failures: list[str] = []
    outcomes: dict[str, int] = {}
    for at in points:
        before = torch_state.snapshot()
        outcome, _ = _run(model, x, at)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        diff = torch_state.differences(before, ignore=ignore)
        torch.set_grad_enabled(before["grad_enabled"])
        if diff:
            failures.append(f"at event {at} {log[at - 1]}: {diff[:3]}")
            break  # the state is dirty: later points would only repeat it
    assert dumps(trace(model, x, interceptor="patch", hooks=True)) == reference
    return failures, outcomes, len(points)


def test_ctrl_c_anywhere_leaves_torch_as_it_was() -> None:
    """Namespaces (by identity), global hook dicts, TorchFunctionMode stack, the
    interceptor's state and the SIGINT handler: as before, at every point; every
    interrupt reaches the caller; the next trace gives the same snapshot. Failed on
    main: interrupts in the patch and restore loops left symbols patched (and the
    next patch trace refused, "already active"), in hook registration left global
    hooks."""
    failures, outcomes, n = _sweep(ignore=("grad_enabled",))
    assert n >= 100
    assert failures == []
    assert outcomes == {"interrupted": n}


def test_ctrl_c_anywhere_leaves_grad_mode_as_it_was() -> None:
    failures, _, _ = _sweep(ignore=())
    assert failures == []


def test_ctrl_c_anywhere_in_the_thread_watch_leaves_the_profile_as_it_was() -> None:
    """Every event of ``OtherThreads.__enter__`` and ``__exit__`` and the two after
    each (not sampled): threading's profile function (the one threads start with) and
    the thread's own are as before, and the interrupt reaches the caller. Failed on
    main: a Ctrl-C in ``__enter__`` left ``OtherThreads._start`` installed, so every
    later trace put it back on exit and threads started later ran it."""
    patch.warm_caches()
    model, (x,) = models.mlp()
    trace(model, x, interceptor="patch", hooks=True)
    log: list[tuple[str, str, int]] = []
    codes: list[Any] = []
    assert _run(model, x, 0, log, codes)[0] == "completed"
    points: list[int] = []
    for method in (threads.OtherThreads.__enter__, threads.OtherThreads.__exit__):
        hits = [i for i, code in enumerate(codes, 1) if code is method.__code__]
        points.extend(range(hits[0], hits[-1] + 3))
    assert len(points) >= 20
    profiles = (threading.getprofile(), sys.getprofile())
    for at in points:
        outcome, _ = _run(model, x, at)
        left = (threading.getprofile(), sys.getprofile())
        threading.setprofile(profiles[0])  # a leftover must not spill into the next test
        assert (outcome, left) == ("interrupted", profiles), f"at event {at} {log[at - 1]}"


def test_real_sigint_during_patch_trace() -> None:
    """A real SIGINT (``os.kill`` from a timer thread) at spread-out delays."""
    model, (x,) = models.mlp()
    patch.warm_caches()
    trace(model, x, interceptor="patch", hooks=True)
    rng = random.Random(0)
    seen = 0
    for _ in range(20):
        before = torch_state.snapshot()
        delay = rng.uniform(0.0, 0.03)
        timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
        try:
            timer.start()
            try:
                trace(model, x, interceptor="patch", hooks=True)
            finally:
                timer.join()
            for _ in range(10_000):
                pass
        except KeyboardInterrupt:
            seen += 1
        assert torch_state.differences(before) == []
    assert seen == 20


def test_deferred_block_delivers_after_it() -> None:
    events: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.deferred_sigint():
            _thread.interrupt_main()
            for _ in range(1000):
                pass
            events.append("block finished")
    assert events == ["block finished"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_cleanup_runs_before_the_interrupt_goes_on() -> None:
    state = {"installed": True}

    def cleanup() -> None:
        state["installed"] = False

    assert interrupts.register(cleanup)
    try:
        with pytest.raises(KeyboardInterrupt):
            _thread.interrupt_main()
            for _ in range(1000):
                pass
        assert state == {"installed": False}
    finally:
        interrupts.unregister(cleanup)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_other_handler_that_does_not_raise_keeps_the_trace_going() -> None:
    """A program's own SIGINT handler (a graceful-stop flag) is called, and when it
    does not raise, the trace goes on unharmed."""
    calls: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: calls.append(signum))
    try:
        model, (x,) = models.mlp()
        events: list[str] = []

        def record(name: str, *rest: Any) -> None:
            events.append(name)
            if len(events) == 1:
                _thread.interrupt_main()

        with patch.PatchInterceptor(record):
            model(x)
            for _ in range(1000):
                pass
        assert events == ["linear", "relu", "linear"]
        assert calls == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is not None
    finally:
        signal.signal(signal.SIGINT, old)


def test_off_main_thread_nothing_installed() -> None:
    result: dict[str, Any] = {}

    def worker() -> None:
        result["registered"] = interrupts.register(lambda: None)
        with interrupts.deferred_sigint():
            result["handler"] = signal.getsignal(signal.SIGINT)
        model, (x,) = models.mlp()
        result["ops"] = trace(model, x, interceptor="patch").ops()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert result["registered"] is False
    assert result["handler"] is signal.default_int_handler
    assert result["ops"] == ["linear", "relu", "linear"]


class _Injected(Exception):
    """The exception a signal handler other than SIGINT's raises (pytest-timeout's
    signal method, a SIGALRM handler): not deferred, it lands at any line."""


def _inject_at(
    code: Any, event_index: int, kind: type[BaseException] = _Injected
) -> Callable[..., Any]:
    """A ``sys.settrace`` function that raises ``kind`` (:class:`_Injected`) at the
    ``event_index``-th line event (from 0) of ``code``'s frames: a line run twice
    (a ``with`` statement's line, again on exit) is hit on each visit (the state of
    ``fired`` says whether it did)."""

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and not tracer.fired:  # type: ignore[attr-defined]
            tracer.seen += 1  # type: ignore[attr-defined]
            if tracer.seen - 1 == event_index:  # type: ignore[attr-defined]
                tracer.fired = True  # type: ignore[attr-defined]
                raise kind(f"line event {event_index} (line {frame.f_lineno})")
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if event == "call" and frame.f_code is code else None

    tracer.fired = False  # type: ignore[attr-defined]
    tracer.seen = 0  # type: ignore[attr-defined]
    return tracer


def _line_events(code: Any, model: torch.nn.Module, x: torch.Tensor) -> int:
    """How many line events ``code`` runs in a plain patch trace."""
    seen = [0]

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            seen[0] += 1
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if event == "call" and frame.f_code is code else None

    sys.settrace(tracer)
    try:
        trace(model, x, interceptor="patch")
    finally:
        sys.settrace(None)
    return seen[0]


def _traced_with(tracer: Callable[..., Any], model: Any, x: torch.Tensor) -> BaseException | None:
    """Run a patch trace under ``tracer`` on a thread of its own and return what it
    raised; fails when it does not end within 60 s (a lock left held)."""
    raised: list[BaseException | None] = [None]

    def run() -> None:
        sys.settrace(tracer)
        try:
            trace(model, x, interceptor="patch")
        except BaseException as exc:  # the injected exception, or anything else
            raised[0] = exc
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the trace hangs: its clean-up waits for a lock left held"
    return raised[0]


@pytest.mark.parametrize("method", ["__enter__", "__exit__"])
def test_an_exception_at_any_line_of_enter_or_exit_leaves_nothing_patched(method: str) -> None:
    """An exception raised by a signal handler at any line event of
    ``PatchInterceptor.__enter__`` or ``__exit__`` (a ``with`` line on entry and on
    exit alike) surfaces as itself, never hangs the clean-up, leaves torch
    as it was (no symbol patched, the interceptor unregistered) and the next patch
    trace works and gives the same graph."""
    patch.warm_caches()
    model, (x,) = models.mlp()
    reference = dumps(trace(model, x, interceptor="patch"))
    code = getattr(patch.PatchInterceptor, method).__code__
    events = _line_events(code, model, x)
    assert events >= 3
    before = torch_state.snapshot()
    for k in range(events):
        tracer = _inject_at(code, k)
        raised = _traced_with(tracer, model, x)
        assert tracer.fired, k  # type: ignore[attr-defined]
        assert isinstance(raised, _Injected), (k, raised)
        assert torch_state.differences(before) == [], f"{method} line event {k}"
        assert dumps(trace(model, x, interceptor="patch")) == reference, f"{method} event {k}"


CLEAN_UP = ("__exit__", "release", "_restore", "_repair_new_modules")
"""What the patch interceptor runs to uninstall (``interrupts.unregister`` and
``deferred_sigint``, which it also calls, are swept by the trace-wide tests above)."""


@pytest.mark.parametrize("method", CLEAN_UP)
def test_ctrl_c_at_any_line_of_the_patch_clean_up_leaves_torch_as_it_was(method: str) -> None:
    """``KeyboardInterrupt`` raised at every line event of each clean-up method (not
    deferred, as from a handler other than the guard's) reaches the caller, and after
    the ``release()`` the tracer runs after the ``with`` block, torch is exactly as
    before: every symbol restored, TorchScript's builtin table without the wrappers'
    entries, nothing held; the next trace gives the same graph. Failed before: a cut
    ``_restore`` left the table's entries for good (once in 30 real Ctrl-Cs), since
    ``holds()`` no longer saw anything to release, and a cut ``release`` left the
    SIGINT guard installed."""
    patch.warm_caches()
    model, (x,) = models.mlp()
    reference = dumps(trace(model, x, interceptor="patch"))
    code = getattr(patch.PatchInterceptor, method).__code__
    before = torch_state.snapshot()

    def run(k: int) -> tuple[bool, int]:
        """Interrupt at line event ``k``: whether it fired, and the events seen."""
        interceptor = patch.PatchInterceptor(lambda *args: None)
        tracer = _inject_at(code, k, KeyboardInterrupt)
        sys.settrace(tracer)
        try:
            with interceptor:
                model(x)
        except KeyboardInterrupt:
            assert tracer.fired, k  # type: ignore[attr-defined]
        finally:
            sys.settrace(None)
        interceptor.release()  # as trace() does after the block
        return tracer.fired, tracer.seen  # type: ignore[attr-defined]

    n = run(10**9)[1]  # the restore loop runs a line per symbol: the first and last
    for k in sorted({*range(0, n, max(1, n // 40)), *range(max(0, n - 40), n)}):
        assert run(k)[0], k
        # an exception at the exit line of release's own `with deferred_sigint()`
        # skips that block's __exit__: the guard stays held (a real SIGINT waits
        # there); torch itself is restored, which is what this test asserts for it
        guard = ("sigint", "interrupt_guard") if method == "release" else ()
        assert torch_state.differences(before, ignore=guard) == [], f"{method} event {k} of {n}"
        if guard:
            interrupts._G.installed, interrupts._G.users, interrupts._G.depth = False, 0, 0
            interrupts._G.pending = None
            signal.signal(signal.SIGINT, signal.default_int_handler)
        assert dumps(trace(model, x, interceptor="patch")) == reference, f"{method} event {k}"


def test_a_clean_up_that_raises_leaves_the_others_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The interceptor's ``release()`` that the tracer runs after the ``with`` block
    (its second call) raises: the error reaches the caller, and every other removal
    still runs (scope hooks, gradient taps, the model's own hooks, float32 settings),
    so torch is exactly as before and the next trace gives the same graph. Failed
    before: the hand-written ``finally`` stopped at the raising call and left the
    scope's global hooks, its SIGINT registration and the float32 settings behind."""
    patch.warm_caches()
    model, (x,) = models.mlp()
    reference = dumps(trace(model, x, interceptor="patch", hooks=True, backward=True))
    real = patch.PatchInterceptor.release
    calls: list[int] = []

    def release(self: patch.PatchInterceptor) -> list[str]:
        errors = real(self)
        calls.append(len(calls))
        if len(calls) == 2:
            raise RuntimeError("release failed")
        return errors

    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        before = torch_state.snapshot()
        monkeypatch.setattr(patch.PatchInterceptor, "release", release)
        with pytest.raises(RuntimeError, match="release failed"):
            trace(model, x, interceptor="patch", hooks=True, backward=True)
        monkeypatch.undo()
        assert calls == [0, 1]
        assert torch_state.differences(before) == []
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(precision)
    assert dumps(trace(model, x, interceptor="patch", hooks=True, backward=True)) == reference
