"""Launch-bound proxy: trace() on models so narrow that each op costs its dispatch only.

On a GPU a forward is bound by kernel launches (5-10 us of CPU time each), so the
tracer's Python per op weighs as much as the op itself. On the CPU, a model of width 64
at sequence 8 is in the same regime: every op costs its dispatch, not its arithmetic.
Per model (transformers GPT-2, BERT and Llama from their configs, random weights), the
median over interleaved rounds of ``trace / plain forward``: structure only
(``stats=False``), statistics on the CPU path, statistics on the forced device path
(``GRAPHIR_STATS_DEVICE_PATH=1``), and what each costs in microseconds per traced node
beyond the plain forward (the device path's beyond the structure-only trace). Times are
CPU time of the tracing thread (``time.thread_time``; torch runs on that one thread), so
other jobs on the machine move them little.
The device path's ratio over-states a GPU's: its reductions run here, synchronously.

    .venv/bin/python benchmarks/bench_launch.py                 # 3 models, 7 rounds
    .venv/bin/python benchmarks/bench_launch.py --models gpt2 --rounds 11
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_zoo import forced_device_path
from extensions import extensions_line
from timing import seconds
from zoo import gpt2

from pytest_graphir import trace
from pytest_graphir.capture.stats import DEVICE_PATH_VARIABLE

VOCAB, SEQ, WIDTH = 512, 8, 64


def _build(name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    import transformers as tr

    configs: dict[str, Callable[[], Any]] = {
        "gpt2": lambda: gpt2(
            n_embd=WIDTH, n_head=4, vocab_size=VOCAB, bos_token_id=0, eos_token_id=0
        ),
        "bert": lambda: tr.BertModel(
            tr.BertConfig(
                hidden_size=WIDTH,
                num_attention_heads=4,
                intermediate_size=2 * WIDTH,
                vocab_size=VOCAB,
            )
        ),
        "llama": lambda: tr.LlamaForCausalLM(
            tr.LlamaConfig(
                hidden_size=WIDTH,
                intermediate_size=2 * WIDTH,
                num_hidden_layers=8,
                num_attention_heads=4,
                num_key_value_heads=4,
                vocab_size=VOCAB,
                bos_token_id=0,
                eos_token_id=0,
            )
        ),
    }
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(1))
    return configs[name]().eval(), ids


def measure(name: str, rounds: int) -> dict[str, float]:
    """Nodes, plain forward seconds, and median ratios (``struct``, ``cpu``,
    ``device``) for one model; each timing the mean of 3 calls."""
    model, ids = _build(name)

    def timed(fn: Any) -> float:
        return seconds(fn, 3, clock=time.thread_time)

    def forced() -> Any:
        with forced_device_path():
            return trace(model, ids)

    runs: dict[str, list[float]] = {"plain": [], "struct": [], "cpu": [], "device": []}
    with torch.no_grad():
        nodes = len(trace(model, ids).nodes)
        forced()
        for _ in range(rounds):
            runs["plain"].append(timed(lambda: model(ids)))
            runs["struct"].append(timed(lambda: trace(model, ids, stats=False)))
            runs["cpu"].append(timed(lambda: trace(model, ids)))
            runs["device"].append(timed(forced))
    med = {k: statistics.median(v) for k, v in runs.items()}
    return {"nodes": nodes, **med}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="gpt2,bert,llama")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    os.environ.pop(DEVICE_PATH_VARIABLE, None)
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    print(f"1 CPU thread, {args.rounds} rounds, torch {torch.__version__}, " + extensions_line())
    print(
        f"{'model':<7} {'nodes':>5} {'fwd ms':>7} {'struct':>7} {'us/node':>7} {'stats':>7}"
        f" {'device':>7} {'us/node':>7}"
    )
    for name in args.models.split(","):
        r = measure(name, args.rounds)
        n, p = r["nodes"], r["plain"]
        print(
            f"{name:<7} {int(n):>5} {p * 1e3:>7.2f} {r['struct'] / p:>6.2f}x "
            f"{(r['struct'] - p) / n * 1e6:>7.1f} {r['cpu'] / p:>6.2f}x {r['device'] / p:>6.2f}x "
            f"{(r['device'] - r['struct']) / n * 1e6:>7.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
