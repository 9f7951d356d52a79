"""Where a trace's host time goes: ``cProfile`` of a few traces of one zoo model.

Prints the plain forward's and the trace's wall time per call (synchronised on CUDA),
then the functions that take the most time of their own (``tottime``) over ``--calls``
traces, with statistics or structure-only. On a GPU the forward is bound by kernel
launches, so what the recorder costs per op shows directly.

    python benchmarks/profile_trace.py --model gpt2 --device cuda
    python benchmarks/profile_trace.py --model resnet50 --structure --top 30
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_zoo import _to
from zoo import NAMES, build

from pytest_graphir import trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="gpt2", choices=NAMES)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--structure", action="store_true", help="stats=False")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, a, k = build(args.model)
    model, a, k = model.to(args.device), _to(a, args.device), _to(k, args.device)
    options: dict[str, Any] = {"stats": False} if args.structure else {}

    def sync() -> None:
        if args.device == "cuda":
            torch.cuda.synchronize()

    def timed(fn: Any) -> float:
        sync()
        start = time.perf_counter()
        for _ in range(args.calls):
            fn()
        sync()
        return (time.perf_counter() - start) / args.calls * 1e3

    with torch.no_grad():
        graph = trace(model, *a, **k, **options)
        plain = timed(lambda: model(*a, **k))
        traced = timed(lambda: trace(model, *a, **k, **options))
        print(
            f"{args.model} on {args.device}, {len(graph.nodes)} nodes: forward {plain:.2f} ms, "
            f"trace {traced:.2f} ms ({traced / plain:.2f}x), "
            f"{(traced - plain) / len(graph.nodes) * 1e3:.1f} us per node"
        )
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.calls):
            trace(model, *a, **k, **options)
        sync()
        profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
