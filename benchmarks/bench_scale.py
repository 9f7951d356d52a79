"""Scale: a narrow transformers Llama at 10/40/80/160 layers (up to ~11.5k nodes).

For each depth, on the CPU with one thread: the node count; ``trace()`` with and
without statistics against a plain eager forward (interleaved rounds, median ratio);
``serialize.dumps`` / ``serialize.loads`` of its snapshot in seconds and against
``json.dumps`` / ``json.loads`` of the same document; ``compare`` of two separately
loaded copies of the unchanged snapshot; and ``compare`` after one decoder layer is
inserted in the middle (seconds, and that it reports the change). Random weights from
``LlamaConfig``; nothing is downloaded.

    .venv/bin/python benchmarks/bench_scale.py            # 10, 40, 80, 160 layers
    .venv/bin/python benchmarks/bench_scale.py --quick    # 10 and 40 layers, 3 rounds

Targets (issue 10, 160 layers): trace with statistics <= 3x the forward; dumps and
loads each <= 3x json.dumps / json.loads; compare unchanged <= 0.1 s.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from extensions import extensions_line
from timing import seconds
from transformers import LlamaConfig, LlamaForCausalLM

from pytest_graphir import trace
from pytest_graphir.compare import compare
from pytest_graphir.serialize import dumps, loads


def build(layers: int) -> tuple[torch.nn.Module, torch.Tensor]:
    """The narrow Llama (hidden 64, 4 heads, MLP 128) and a (1, 64) batch of token ids."""
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_hidden_layers=layers,
        vocab_size=1000,
        max_position_embeddings=128,
    )
    model = LlamaForCausalLM(config).eval()
    return model, torch.randint(0, 1000, (1, 64), generator=torch.Generator().manual_seed(1))


def best(fn: Any, repeats: int) -> tuple[float, Any]:
    """Fastest of ``repeats`` calls (seconds) and the last result."""
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def trace_ratios(model: torch.nn.Module, ids: torch.Tensor, rounds: int) -> tuple[float, ...]:
    """(plain forward seconds, median stats/plain, median structure/plain), interleaved."""

    timed = seconds  # torch.utils.benchmark.Timer

    plain, stats, structure = [], [], []
    with torch.no_grad():
        trace(model, ids)  # warm-up
        for _ in range(rounds):
            p = timed(lambda: model(ids))
            plain.append(p)
            stats.append(timed(lambda: trace(model, ids)) / p)
            structure.append(timed(lambda: trace(model, ids, stats=False)) / p)
    return statistics.median(plain), statistics.median(stats), statistics.median(structure)


def inserted_layer(
    doc: dict[str, Any], model: torch.nn.Module, ids: torch.Tensor, layers: int
) -> dict[str, Any]:
    """The snapshot of the same model with one more decoder layer in the middle."""
    import torch.nn as nn

    bigger = copy.deepcopy(model)
    blocks = list(bigger.model.layers)
    middle = layers // 2
    extra = copy.deepcopy(blocks[middle])
    bigger.model.layers = nn.ModuleList([*blocks[:middle], extra, *blocks[middle:]])
    for i, layer in enumerate(bigger.model.layers):
        layer.self_attn.layer_idx = i
    bigger.config.num_hidden_layers = layers + 1
    with torch.no_grad():
        return loads(dumps(trace(bigger, ids)))


def row(layers: int, rounds: int) -> str:
    """One table row: measure the model with ``layers`` decoder layers."""
    model, ids = build(layers)
    plain, r_stats, r_struct = trace_ratios(model, ids, rounds)
    with torch.no_grad():
        graph = trace(model, ids)
    doc = graph.to_data()
    t_dumps, text = best(lambda: dumps(graph), 3)
    t_json_dumps, js = best(lambda: json.dumps(doc), 3)
    t_loads, loaded = best(lambda: loads(text), 3)
    t_json_loads, _ = best(lambda: json.loads(js), 3)
    other = loads(text)
    t_same, same = best(lambda: compare(loaded, other), 3)
    assert not same, "an unchanged snapshot compared unequal"
    bigger = inserted_layer(loaded, model, ids, layers)
    t_insert, changed = best(lambda: compare(loaded, bigger), 1)
    assert changed, "an inserted layer was not reported"
    return (
        f"{layers:>6} {len(graph.nodes):>6} {plain * 1e3:>7.1f} {r_stats:>5.2f}x "
        f"{r_struct:>5.2f}x {len(text) / 1e6:>5.2f} {t_dumps:>8.3f} "
        f"{t_dumps / t_json_dumps:>4.1f}x {t_loads:>8.3f} {t_loads / t_json_loads:>4.1f}x "
        f"{t_same:>6.3f} {t_insert:>6.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 and 40 layers, 3 rounds")
    parser.add_argument(
        "--layers", default="", help="comma-separated depths (default 10,40,80,160)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved trace rounds")
    args = parser.parse_args()
    torch.set_num_threads(1)
    depths = [int(x) for x in args.layers.split(",") if x] or (
        [10, 40] if args.quick else [10, 40, 80, 160]
    )
    rounds = 3 if args.quick else args.rounds
    header = (
        f"{'layers':>6} {'nodes':>6} {'fwd ms':>7} {'stats':>6} {'struct':>6} "
        f"{'MB':>5} {'dumps s':>8} {'/json':>5} {'loads s':>8} {'/json':>5} "
        f"{'cmp=':>6} {'cmp+1':>6}"
    )
    print(extensions_line())
    print(header)
    for layers in depths:
        print(row(layers, rounds))
    print("targets at 160 layers: stats <= 3x; dumps, loads <= 3x json; cmp= <= 0.1 s")


if __name__ == "__main__":
    main()
