"""The benchmarks' clock: ``torch.utils.benchmark.Timer`` for one timing, and the
interleaved rounds of ``benchmarks/README.md`` (every variant once a round, the order
rotated each round, ratios taken within a round, medians over rounds)."""

from __future__ import annotations

import gc
from collections.abc import Callable

import torch
from torch.utils.benchmark import Timer


def seconds(
    fn: Callable[[], object],
    number: int = 1,
    *,
    clock: Callable[[], float] | None = None,
    keep_result: bool = False,
) -> float:
    """Seconds per call of ``fn()`` over ``number`` back-to-back calls.

    Measured by ``torch.utils.benchmark.Timer.timeit``: its default clock synchronises
    an accelerator in use before each read; ``num_threads`` is torch's current thread
    count (the Timer's default would set 1); the cyclic garbage collector stays on as
    in the code measured (``setup="gc.enable()"``: ``timeit`` turns it off).

    Args:
        fn: the call to time.
        number: calls in the timing; the result is their mean.
        clock: replaces the wall clock (``time.thread_time``: this thread's CPU time,
            no accelerator synchronisation).
        keep_result: free ``fn``'s result after the clock stops (the last call's),
            not inside the timing.
    """
    stmt = "result = fn()" if keep_result else "fn()"
    extra = {} if clock is None else {"timer": clock}
    timer = Timer(
        stmt,
        setup="gc.enable()",
        globals={"fn": fn, "gc": gc},
        num_threads=torch.get_num_threads(),
        **extra,  # type: ignore[arg-type]
    )
    return float(timer.timeit(number).mean)


def interleaved(
    variants: dict[str, Callable[[], object]],
    rounds: int,
    warmup: int = 0,
    show: Callable[[str, dict[str, float]], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> dict[str, list[float]]:
    """Seconds of each variant in each of ``rounds`` rounds, after ``warmup`` rounds
    whose times are dropped.

    Each round runs every variant once (:func:`seconds`, ``keep_result=True``, after a
    ``gc.collect()``), starting one variant later than the round before, so no variant
    always runs first. ``show(tag, row)`` gets each round's times in the order of
    ``variants`` (``tag`` is ``"warm-up"`` or ``"round i/n"``).

    Returns:
        ``{variant: [seconds per kept round]}``, rounds in order: ratios of two
        variants are taken round by round.
    """
    names = list(variants)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(warmup + rounds):
        row: dict[str, float] = {}
        for name in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            row[name] = seconds(variants[name], clock=clock, keep_result=True)
        if r >= warmup:
            for n in names:
                times[n].append(row[n])
        if show is not None:
            tag = "warm-up" if r < warmup else f"round {r - warmup + 1}/{rounds}"
            show(tag, {n: row[n] for n in names})
    return times
