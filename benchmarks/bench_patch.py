"""Cost of the symbol-patch interceptor (``trace(..., interceptor="patch")``), CPU.

Usage::

    .venv/bin/python benchmarks/bench_patch.py            # GPT-2 small, ~1 min
    .venv/bin/python benchmarks/bench_patch.py --quick    # smoke run, n_layer=2

Two numbers:

* **patch + restore**: wall time of ``PatchInterceptor.__enter__`` (collect the op
  symbols, patch them and the dispatch helpers) and ``__exit__`` (restore them all),
  median of ``--cycles`` fresh interceptors back to back, after one warm-up cycle
  (the first one in a process builds the wrappers and may import ``torch._dynamo``;
  printed separately). Measured without and with ``model=`` (the alias scan of
  GPT-2's modules). Right after a ``gc.collect()`` (cold caches) it takes about
  twice as long.
* **traced forward / plain forward** on GPT-2 (random weights) with ids ``(1, --seq)``,
  ``torch.set_num_threads(1)``, everything under ``torch.no_grad()``. Plain forward,
  ``trace`` with the mode and ``trace`` with the patch (both ``stats=False`` and with
  statistics) run interleaved round-robin, order rotated each round, ``gc.collect()``
  before each call; a ratio is the median over rounds of ``traced / plain`` from the
  same round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from timing import interleaved
from zoo import gpt2

from pytest_graphir import trace
from pytest_graphir.capture.patch import PatchInterceptor


def patch_times(model: torch.nn.Module | None, cycles: int) -> tuple[float, float, int]:
    """Median patch and restore seconds over ``cycles`` fresh interceptors, and the
    number of symbols patched."""
    patch_s, restore_s = [], []
    n = 0
    for _ in range(cycles):
        p = PatchInterceptor(lambda *a: None, model=model)
        with p:
            pass
        patch_s.append(p.patch_seconds)
        restore_s.append(p.restore_seconds)
        n = p.patched
    return statistics.median(patch_s), statistics.median(restore_s), n


def run_timing(
    model: torch.nn.Module, ids: torch.Tensor, rounds: int, warmup: int
) -> dict[str, list[float]]:
    """Each variant's seconds per round (:func:`timing.interleaved`), each round printed."""
    variants: dict[str, Callable[[], object]] = {
        "plain": lambda: model(ids),
        "mode_nostats": lambda: trace(model, ids, stats=False),
        "patch_nostats": lambda: trace(model, ids, stats=False, interceptor="patch"),
        "mode_stats": lambda: trace(model, ids),
        "patch_stats": lambda: trace(model, ids, interceptor="patch"),
    }

    def show(tag: str, row: dict[str, float]) -> None:
        print(
            f"  {tag:12s} " + "  ".join(f"{n}={t * 1e3:6.1f}ms" for n, t in row.items()), flush=True
        )

    return interleaved(variants, rounds, warmup, show)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="GPT2Config(n_layer=2), 3 rounds")
    p.add_argument("--rounds", type=int, default=None, help="measured rounds (default 11)")
    p.add_argument("--warmup", type=int, default=2, help="discarded rounds")
    p.add_argument("--seq", type=int, default=64, help="sequence length of the ids")
    p.add_argument("--cycles", type=int, default=21, help="patch+restore cycles (median)")
    args = p.parse_args()
    rounds = args.rounds if args.rounds is not None else (3 if args.quick else 11)
    torch.set_num_threads(1)

    model = gpt2(n_layer=2 if args.quick else 12)
    ids = torch.randint(0, 50257, (1, args.seq), generator=torch.Generator().manual_seed(1234))
    desc = "GPT-2 n_layer=2 (--quick)" if args.quick else "GPT-2 small"
    print(f"{desc}, random weights, CPU, torch {torch.__version__}, 1 thread")

    first = PatchInterceptor(lambda *a: None)
    t0 = time.perf_counter()
    with first:
        pass
    first_s = time.perf_counter() - t0
    bare = patch_times(None, args.cycles)
    scan = patch_times(model, args.cycles)

    print(
        f"timing: ids (1, {args.seq}), {args.warmup} warm-up + {rounds} rounds, "
        "round-robin, torch.no_grad()"
    )
    with torch.no_grad():
        times = run_timing(model, ids, rounds, args.warmup)
        n_ops = len(trace(model, ids, stats=False, interceptor="patch").ops())

    def ratio(num: str) -> float:
        return statistics.median(a / b for a, b in zip(times[num], times["plain"], strict=True))

    print()
    print(f"== results: {desc}, {n_ops} ops ==")
    print(
        f"first patch + restore in this process: {first_s * 1e3:.0f} ms "
        "(builds the wrappers; imports torch._dynamo if not yet imported)"
    )
    for label, (ps, rs, n) in (("patch + restore", bare), ("patch + restore, model=", scan)):
        print(
            f"{label:26s} {(ps + rs) * 1e3:6.1f} ms  (patch {ps * 1e3:.1f} ms, restore "
            f"{rs * 1e3:.1f} ms; {n} symbols; median of {args.cycles})"
        )
    print(f"{'config':28s}{'median ms':>11s}{'ratio':>8s}")
    print(f"{'plain forward':28s}{statistics.median(times['plain']) * 1e3:11.1f}{1.0:8.2f}")
    for name, label in (
        ("mode_nostats", "trace mode, stats=False"),
        ("patch_nostats", "trace patch, stats=False"),
        ("mode_stats", "trace mode, stats"),
        ("patch_stats", "trace patch, stats"),
    ):
        print(f"{label:28s}{statistics.median(times[name]) * 1e3:11.1f}{ratio(name):8.2f}")


if __name__ == "__main__":
    main()
