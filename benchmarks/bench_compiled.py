"""Cost of the compiled-vs-eager check against a bare ``torch.compile`` first call (GPT-2 small).

Usage::

    .venv/bin/python benchmarks/bench_compiled.py            # GPT-2 small, 1 warm-up + 3 rounds
    .venv/bin/python benchmarks/bench_compiled.py --quick    # n_layer=2, 1 round (< 30 s)
    .venv/bin/python benchmarks/bench_compiled.py --backward # with a backward on both sides

Each round times, in alternating order:

* ``baseline``: ``torch._dynamo.reset()``, then the first call of
  ``torch.compile(model, backend="eager")`` (Dynamo tracing, guards, one run);
* ``check``: ``compare_compiled(model, ids)`` (Dynamo reset, the eager trace
  without statistics, the first call compiled with the recording backend, the
  comparisons, the reset after).

Both run under ``torch.no_grad()`` with ``torch.set_num_threads(1)``. With
``--backward`` grad is on: the baseline adds ``logits.sum().backward()`` after the
first compiled call, the check is ``compare_compiled(model, ids, backward=True,
loss_fn=...)`` with the same loss (it also runs the eager backward and compares
hooks and gradients). The ratio is the median over rounds of ``check / baseline``
from the same round. Target: <= 1.3x (forward only).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch
import torch._dynamo

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from zoo import gpt2

from pytest_graphir.compiled import compare_compiled, reset_dynamo

TARGET = 1.3


def loss(output: Any) -> torch.Tensor:
    """The scalar both sides run backward on: the sum of the logits."""
    return output.logits.float().sum()  # type: ignore[no-any-return]


def baseline(model: torch.nn.Module, ids: torch.Tensor, backward: bool = False) -> float:
    """Seconds for the first call of ``torch.compile(model, backend="eager")`` (and its
    backward with ``backward``)."""
    reset_dynamo()
    compiled = torch.compile(model, backend="eager")
    t0 = time.perf_counter()
    out = compiled(ids)
    if backward:
        loss(out).backward()
    elapsed = time.perf_counter() - t0
    reset_dynamo()
    return elapsed


def check(model: torch.nn.Module, ids: torch.Tensor, backward: bool = False) -> float:
    """Seconds for ``compare_compiled(model, ids)``; fails loudly if the check fails."""
    t0 = time.perf_counter()
    report = (
        compare_compiled(model, ids, backward=True, loss_fn=loss)
        if backward
        else compare_compiled(model, ids)
    )
    elapsed = time.perf_counter() - t0
    if not report.ok:
        raise SystemExit("\n".join(report.lines()))
    return elapsed


def main() -> None:
    """Parse the options, run the rounds, print per-round times and the median ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n_layer=2, 1 round, no warm-up")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--seq", type=int, default=16, help="sequence length (default 16)")
    parser.add_argument(
        "--backward",
        action="store_true",
        help="grad on, a backward after the first call on both sides",
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.warmup = 1, 0
    torch.set_num_threads(1)
    model = gpt2(n_layer=2 if args.quick else 12)
    ids = torch.randint(0, 50257, (1, args.seq), generator=torch.Generator().manual_seed(0))
    label = "GPT-2 (n_layer=2)" if args.quick else "GPT-2 small"
    mode = "forward + backward" if args.backward else "forward, no_grad"
    print(f"{label}, ids (1, {args.seq}), {mode}, 1 thread, torch {torch.__version__}")
    ratios: list[float] = []
    base_times: list[float] = []
    check_times: list[float] = []
    grad = torch.enable_grad() if args.backward else torch.no_grad()
    with grad:
        for r in range(args.warmup + args.rounds):
            gc.collect()
            if r % 2 == 0:
                b = baseline(model, ids, args.backward)
                gc.collect()
                c = check(model, ids, args.backward)
            else:
                c = check(model, ids, args.backward)
                gc.collect()
                b = baseline(model, ids, args.backward)
            tag = "warm-up" if r < args.warmup else f"round {r - args.warmup + 1}/{args.rounds}"
            print(
                f"  {tag:12s} baseline {b:6.2f} s   check {c:6.2f} s   ratio {c / b:.2f}",
                flush=True,
            )
            if r >= args.warmup:
                ratios.append(c / b)
                base_times.append(b)
                check_times.append(c)
    ratio = statistics.median(ratios)
    verdict = "ok" if ratio <= TARGET else "OVER TARGET"
    print(
        f"torch.compile(backend='eager') first call: {statistics.median(base_times):.2f} s; "
        f"compare_compiled: {statistics.median(check_times):.2f} s; "
        f"ratio {ratio:.2f}x (target <= {TARGET}x: {verdict})"
    )


if __name__ == "__main__":
    main()
