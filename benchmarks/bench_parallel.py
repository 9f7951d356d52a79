"""Parallel: what ``trace(..., backward=True)`` costs on a tiny Llama on 2 threaded
ranks (FSDP2, and tensor parallelism), against what it costs on the same model serial.

The model: transformers' ``LlamaForCausalLM`` with hidden 64, intermediate 128, 2
layers, 4 heads (4 key-value heads), vocab 128, random weights (never downloaded),
token ids ``(1, 16)``. The step is a training step's forward and backward:

* ``plain``: ``model(ids).logits.sum().backward()``, then ``model.zero_grad()`` (the
  trace puts every ``.grad`` back as it found it, so the plain step leaves none
  either);
* ``stats``: ``trace(model, ids, backward=True)`` (the default statistics);
* ``struct``: ``trace(model, ids, backward=True, stats=False)``.

Serially the model is plain; in parallel it runs on 2 threaded ranks
(:func:`pytest_graphir.parallel.run_ranks`), FSDP2 (``fully_shard`` on each decoder
layer, then on the root) or tensor parallelism (``ColwiseParallel`` on the
attention's ``q/k/v_proj`` and the MLP's ``gate/up_proj``, ``RowwiseParallel`` on
``o_proj`` and ``down_proj``).

The clock is the process's CPU time (``time.process_time``), one thread
(``torch.set_num_threads(1)``). Threaded ranks run one at a time in this process,
passing the baton only while they wait in a collective (docs/parallel.md), so one
rank's thread CPU time would count that rank alone, and where one rank's step ends
the other's may not have. A parallel timing is taken on rank 0 between barriers
(``barrier; t0; barrier; n steps on every rank; barrier; t1; barrier``) and counts
both ranks' steps and nothing else. A barrier on each side of each clock read: after
a barrier whichever rank takes the baton first runs on to its next collective, so
with one barrier only rank 0's reading could count the other rank's next
``gc.collect()`` (a 15 ms step read as 170 ms). The serial timing reads the same
clock, so the two ratios compare; unlike the wall clock, it does not count the time
other processes hold the core on a shared machine (the wall-clock ratios are printed
beside, for reference).

Each round runs the serial and the parallel sides once each (which goes first
alternating each round), and within a side every variant once, its order rotated each
round, ``gc.collect()`` before each (as ``timing.interleaved``); each timing is
``--number`` steps after the side's two untimed steps of each variant. A parallel side
is one ``run_ranks`` call (its process group, model and sharding made anew, untimed).
Ratios are taken within a round, medians over rounds; the quotient parallel / serial
is taken round by round (target: at most :data:`TARGET`).

    .venv/bin/python benchmarks/bench_parallel.py               # 7 rounds, FSDP2 and TP
    .venv/bin/python benchmarks/bench_parallel.py --rounds 3 --only fsdp
    .venv/bin/python benchmarks/bench_parallel.py --profile out.prof  # + cProfile, rank 0
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from extensions import extensions_line

from pytest_graphir import trace
from pytest_graphir.parallel import run_ranks

TARGET = 1.1
"""Most a parallel ratio may be of the serial one (with statistics and without)."""

VARIANTS = ("plain", "stats", "struct")
SIDES = ("fsdp", "tp")
LABELS = {
    "serial": "serial",
    "fsdp": "FSDP2, 2 threaded ranks",
    "tp": "TP, 2 threaded ranks",
}
WORLD = 2
SEQUENCE = 16
WARMUP = 2
"""Untimed steps of each variant before a side's timings (as ``Timer.timeit`` makes
two): FSDP2's first step initialises its state, and a first trace costs about twice
a later one."""


def llama() -> tuple[torch.nn.Module, torch.Tensor]:
    """The tiny Llama (random weights from the current seed) and its token ids."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=128,
        max_position_embeddings=64,
    )
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, config.vocab_size, (1, SEQUENCE))
    return model, ids


def steps(model: torch.nn.Module, ids: torch.Tensor) -> dict[str, Callable[[], object]]:
    """The three variants of one step of ``model`` on ``ids``."""

    def plain() -> None:
        model(ids).logits.sum().backward()
        model.zero_grad(set_to_none=True)

    return {
        "plain": plain,
        "stats": lambda: trace(model, ids, backward=True),
        "struct": lambda: trace(model, ids, backward=True, stats=False),
    }


def shard(side: str, model: torch.nn.Module, world: int) -> None:
    """Make ``model`` FSDP2 (``side="fsdp"``) or tensor parallel (``"tp"``) in place."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp" if side == "fsdp" else "tp",))
    layers: Any = model.model.layers  # type: ignore[union-attr]
    if side == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for layer in layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    plan: dict[str, Any] = {}
    for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
        plan[name] = ColwiseParallel()
    plan["self_attn.o_proj"] = RowwiseParallel()
    plan["mlp.gate_proj"] = ColwiseParallel()
    plan["mlp.up_proj"] = ColwiseParallel()
    plan["mlp.down_proj"] = RowwiseParallel()
    for layer in layers:
        parallelize_module(layer, mesh, plan)


def rotated(r: int) -> list[str]:
    """The variants in round ``r``'s order."""
    k = r % len(VARIANTS)
    return list(VARIANTS[k:] + VARIANTS[:k])


def timed(
    fns: dict[str, Callable[[], object]],
    r: int,
    number: int,
    fence: Callable[[], None] = lambda: None,
) -> dict[str, tuple[float, float]]:
    """Per variant: (process CPU seconds, wall seconds) per step over ``number`` steps,
    the variants in round ``r``'s order, after :data:`WARMUP` untimed steps of each.
    ``fence()`` stands on both sides of each clock read (see the module's doc)."""
    for _ in range(WARMUP):
        for name in VARIANTS:
            fns[name]()
    times: dict[str, tuple[float, float]] = {}
    for name in rotated(r):
        gc.collect()
        fence()
        cpu, wall = time.process_time(), time.perf_counter()
        fence()
        for _ in range(number):
            fns[name]()
        fence()
        times[name] = (
            (time.process_time() - cpu) / number,
            (time.perf_counter() - wall) / number,
        )
        fence()
    return times


def parallel_round(
    rank: int, world: int, side: str, r: int, number: int, profile: str | None
) -> dict[str, tuple[float, float]] | None:
    """One round of ``side`` on this rank: rank 0's times (None on the others)."""
    import torch.distributed as dist

    model, ids = llama()
    shard(side, model, world)
    fns = steps(model, ids)
    times = timed(fns, r, number, fence=dist.barrier)
    if profile is not None and rank == 0:
        profiler = cProfile.Profile(time.thread_time)  # not the time waiting for the baton
        profiler.enable()
        for _ in range(number):
            fns["stats"]()
        profiler.disable()
        profiler.dump_stats(profile)
    elif profile is not None:
        for _ in range(number):
            fns["stats"]()
    return times if rank == 0 else None


def serial_round(r: int, number: int) -> dict[str, tuple[float, float]]:
    """One round of the serial model."""
    torch.manual_seed(0)
    model, ids = llama()
    return timed(steps(model, ids), r, number)


def spread(values: list[float], unit: str = "x") -> str:
    """``median<unit> (min-max)``."""
    return f"{statistics.median(values):.3f}{unit} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    """Run the rounds and print the table (see the module's doc)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=10, help="steps per timing")
    parser.add_argument("--only", choices=SIDES, help="one parallel side (default: both)")
    parser.add_argument(
        "--profile",
        metavar="PATH",
        help="after the rounds, cProfile rank 0's FSDP2 traces with statistics (its "
        "thread's CPU time) into PATH; print the top functions by own time, and the "
        "plugin's by inclusive time",
    )
    ns = parser.parse_args()
    torch.set_num_threads(1)
    sides = [ns.only] if ns.only else list(SIDES)
    print(extensions_line())
    print(
        f"torch {torch.__version__}, load average {os.getloadavg()[0]:.2f} at the start; "
        f"tiny Llama (hidden 64, 2 layers, 4 heads, vocab 128), ids (1, {SEQUENCE}), "
        f"forward+backward, {ns.rounds} rounds of {ns.number} steps, 1 thread",
        flush=True,
    )
    # times[side][variant] = [(cpu, wall) per round]
    times: dict[str, dict[str, list[tuple[float, float]]]] = {
        s: {v: [] for v in VARIANTS} for s in ["serial", *sides]
    }
    for r in range(ns.rounds):
        order = ["serial", *sides] if r % 2 == 0 else [*sides, "serial"]
        for side in order:
            if side == "serial":
                row = serial_round(r, ns.number)
            else:
                row = run_ranks(parallel_round, WORLD, args=(side, r, ns.number, None))[0]
            for v in VARIANTS:
                times[side][v].append(row[v])
        line = "  ".join(
            f"{s} {times[s]['plain'][-1][0] * 1e3:.1f}/{times[s]['stats'][-1][0] * 1e3:.1f}"
            f"/{times[s]['struct'][-1][0] * 1e3:.1f}"
            for s in ["serial", *sides]
        )
        print(f"round {r + 1}/{ns.rounds} (plain/stats/struct ms): {line}", flush=True)

    def ratios(side: str, variant: str, clock: int = 0) -> list[float]:
        return [
            t[clock] / p[clock]
            for t, p in zip(times[side][variant], times[side]["plain"], strict=True)
        ]

    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    print("process CPU time; ratio to the plain step: median (min-max over rounds)")
    head = f"{'':26} {'plain ms':>9} {'with statistics':>20} {'structure only':>20}"
    print(head + f" {'wall: stats':>12} {'struct':>7}")
    for side in ["serial", *sides]:
        plain = statistics.median(t[0] for t in times[side]["plain"]) * 1e3
        print(
            f"{LABELS[side]:26} {plain:9.1f} {spread(ratios(side, 'stats')):>20} "
            f"{spread(ratios(side, 'struct')):>20} "
            f"{statistics.median(ratios(side, 'stats', 1)):11.2f}x "
            f"{statistics.median(ratios(side, 'struct', 1)):6.2f}x"
        )
    print(f"\nquotient parallel ratio / serial ratio, round by round (target <= {TARGET})")
    for side in sides:
        for variant, label in (("stats", "with statistics"), ("struct", "structure only")):
            q = [
                a / b for a, b in zip(ratios(side, variant), ratios("serial", variant), strict=True)
            ]
            verdict = "met" if statistics.median(q) <= TARGET else "NOT met"
            print(f"{LABELS[side]:26} {label:16} {spread(q, '')}  {verdict}")
    if ns.profile:
        run_ranks(parallel_round, WORLD, args=("fsdp", 0, ns.number, ns.profile))
        profile = pstats.Stats(ns.profile)
        profile.sort_stats("tottime").print_stats(25)
        profile.sort_stats("cumulative").print_stats("pytest_graphir", 20)


if __name__ == "__main__":
    main()
