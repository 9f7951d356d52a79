"""Breadth on CUDA: does a snapshot written on the CPU hold on a GPU?

For each architecture of ``tests/breadth_models.py`` (or an evenly spaced sample): the
model traced on the CPU, then moved to CUDA and traced twice there (the statistics take
the device path, as they do on any GPU), with TF32 off so that what differs is the
statistics path and the kernels, not a precision the user chose. Prints per
architecture whether the CUDA snapshot compares equal to the CPU one within the default
tolerance and whether the two CUDA traces give the same text, then the counts.

    python benchmarks/cuda_breadth.py                # every architecture
    python benchmarks/cuda_breadth.py --sample 60    # 60, spread over the families
    python benchmarks/cuda_breadth.py --zoo gpt2,resnet50   # zoo models (zoo.py) instead

The zoo models' tensors are of real sizes: they take the paths tiny architectures never
do (tensors reduced where they lie, parameters without their NaN/Inf counts).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_zoo import _to
from breadth_models import ARCHS
from zoo import build

from pytest_graphir import trace
from pytest_graphir.compare import compare
from pytest_graphir.serialize import dumps, loads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sample", type=int, default=0, help="architectures, spread (0: all)")
    parser.add_argument("--zoo", default="", help="comma-separated zoo models instead")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        parser.error("no CUDA device here")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cases: list[tuple[str, Any]] = [
        (arch.name, lambda arch=arch: (arch.build(), *arch.make_inputs())) for arch in ARCHS
    ]
    if args.zoo:
        cases = [(name, lambda name=name: build(name)) for name in args.zoo.split(",")]
    elif 0 < args.sample < len(cases):
        cases = [cases[i * len(cases) // args.sample] for i in range(args.sample)]
    differs, unstable, failed = [], [], []
    start = time.perf_counter()
    for name, make in cases:
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                model, a, k = make()
                model.eval()
                torch.manual_seed(1)
                cpu = dumps(trace(model, *a, **k))
                model, a, k = model.cuda(), _to(a, "cuda"), _to(k, "cuda")
                torch.manual_seed(1)
                one = dumps(trace(model, *a, **k))
                torch.manual_seed(1)
                two = dumps(trace(model, *a, **k))
        except Exception as error:
            failed.append(name)
            print(f"{name}: FAILED {error!r}"[:300], flush=True)
            continue
        result = compare(loads(cpu), loads(one))
        if result:
            differs.append(name)
            lines = result.lines()
            print(f"{name}: differs ({len(lines)} lines): " + " | ".join(lines[:3])[:400])
        if one != two:
            unstable.append(name)
            print(f"{name}: two CUDA traces differ in text", flush=True)
    print(
        f"{len(cases)} models in {time.perf_counter() - start:.0f} s: "
        f"{len(cases) - len(differs) - len(failed)} equal to the CPU snapshot; differ: "
        f"{', '.join(differs) or 'none'}; text unstable: {', '.join(unstable) or 'none'}; "
        f"failed: {', '.join(failed) or 'none'}"
    )


if __name__ == "__main__":
    main()
