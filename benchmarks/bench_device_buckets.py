"""Device statistics constants: ``FLUSH_BYTES`` and ``DIRECT_FROM`` of
``pytest_graphir.capture.stats`` against time and extra peak memory, on CUDA.

For each model: the structure-only ratio, then per variant the median ratio of a
traced forward with statistics over interleaved rounds (all variants in one process,
so one machine's numbers are comparable) and the extra peak memory traced / plain
(``torch.cuda.max_memory_allocated`` above the model's own). Needs a GPU.

    python benchmarks/bench_device_buckets.py gpt2 llama1b vit resnet50
    python benchmarks/bench_device_buckets.py llama1b --variants 8:1,16:1,16:4 --rounds 7

A variant ``F:D`` is FLUSH_BYTES = F MiB and DIRECT_FROM = D Mi elements (``D`` may be
a fraction: ``16:0.25``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from zoo import NAMES, build

from pytest_graphir import trace
from pytest_graphir.capture import stats as stats_module


def _sync(fn: Any) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(name: str, variants: dict[str, tuple[int, int]], rounds: int) -> str:
    """One model's line: structure-only ratio, then per variant the stats ratio and the
    extra peak memory traced / plain."""
    model, margs, kwargs = build(name)
    model = model.cuda()
    margs = tuple(a.cuda() if isinstance(a, torch.Tensor) else a for a in margs)

    def plain() -> Any:
        return model(*margs, **kwargs)

    def traced(stats: bool = True) -> Any:
        return trace(model, *margs, stats=stats, **kwargs)

    saved = stats_module.device.FLUSH_BYTES, stats_module.device.DIRECT_FROM
    try:
        with torch.no_grad():
            for _ in range(2):
                plain()
                traced()
            ratios: dict[str, list[float]] = {v: [] for v in variants}
            structure = []
            for _ in range(rounds):
                p = _sync(plain)
                structure.append(_sync(lambda: traced(False)) / p)
                for spec, (flush, direct) in variants.items():
                    stats_module.device.FLUSH_BYTES, stats_module.device.DIRECT_FROM = flush, direct
                    ratios[spec].append(_sync(traced) / p)
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            plain()
            plain_peak = max(torch.cuda.max_memory_allocated() - base, 1)
            line = [f"{name}: structure {statistics.median(structure):.2f}x"]
            for spec, (flush, direct) in variants.items():
                stats_module.device.FLUSH_BYTES, stats_module.device.DIRECT_FROM = flush, direct
                torch.cuda.reset_peak_memory_stats()
                traced()
                peak = (torch.cuda.max_memory_allocated() - base) / plain_peak
                line.append(f"{spec} {statistics.median(ratios[spec]):.2f}x mem {peak:.2f}x")
    finally:
        stats_module.device.FLUSH_BYTES, stats_module.device.DIRECT_FROM = saved
    return "  ".join(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="+", help="zoo names: " + ",".join(NAMES) + ",llama1b")
    parser.add_argument("--variants", default="8:1,16:1,32:1,16:0.25,16:4")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("needs a CUDA device")
    torch.set_num_threads(1)
    variants = {}
    for spec in args.variants.split(","):
        flush, direct = spec.split(":")
        variants[spec] = (int(float(flush) * (1 << 20)), int(float(direct) * (1 << 20)))
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {args.rounds} rounds")
    for name in args.models:
        print(measure(name, variants, args.rounds), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
