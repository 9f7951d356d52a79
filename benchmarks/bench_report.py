"""Size and open time of the HTML report for a ~10,000-node snapshot.

Usage::

    .venv/bin/python benchmarks/bench_report.py                 # Llama, 140 layers
    .venv/bin/python benchmarks/bench_report.py --layers 8      # smaller, quicker
    .venv/bin/python benchmarks/bench_report.py --keep out.html # keep the report
    .venv/bin/python benchmarks/bench_report.py --stats         # with statistics

Builds a narrow transformers ``LlamaForCausalLM`` from a config (random weights,
hidden size 32, ``--layers`` decoder layers, default 140: 10,112 nodes; no download),
traces it with ``stats=False``, renders the report with two hand-made changes (an op
changed and a drift, both in the MLP of the last layer) and opens it in headless
Chromium (Debian's ``chromium`` + ``chromium-driver``, through Selenium).
Reported: node count, HTML size, render time in Python, time to first render in the
browser (``performance.mark('graphir-first-render')``, measured from
navigation start, so it includes parsing the HTML and the JSON), and the time to
reveal (open boxes, lay out, draw) the deepest change from the change list.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if TYPE_CHECKING:
    from pytest_graphir.compare import Change


def build(layers: int, stats: bool = False) -> tuple[Any, list[Change]]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pytest_graphir import trace
    from pytest_graphir.compare import Change

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ir = trace(model, ids, stats=stats)
    last = f"model.layers.{layers - 1}"
    ops = [n for n in ir.nodes if n.kind == "op" and n.name.startswith(last + ".mlp")]
    changes = [
        Change(
            "changed", ops[0].name, scope=last + ".mlp", field="op", old="matmul", new=ops[0].target
        ),
        Change(
            "drift",
            ops[-1].name,
            scope=last + ".mlp",
            field="out[0].mean",
            old=0.01,
            new=0.02,
            tolerance=0.001,
        ),
    ]
    return ir, changes


def open_time(path: Path, reveal: bool) -> dict[str, float]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,900",
        "--user-data-dir=" + tempfile.mkdtemp(prefix="graphir-chromium-"),
    ):
        opts.add_argument(a)
    driver = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
    try:
        driver.get(path.resolve().as_uri())
        first = driver.execute_script(
            "return performance.getEntriesByName('graphir-first-render')[0].startTime"
        )
        info = driver.execute_script("return window.graphirReport")
        out = {"first_render_ms": first, "layout_ms": info["layoutMs"], "drawn": info["drawn"]}
        if reveal:
            t = driver.execute_script("""
                var t0 = performance.now();
                document.querySelector('#changes .row[data-change="0"]').click();
                return performance.now() - t0;""")
            out["reveal_ms"] = t
            drawn = driver.find_elements(By.CSS_SELECTOR, "#viewport [data-i]")
            out["drawn_after_reveal"] = len(drawn)
        return out
    finally:
        driver.quit()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=140)
    ap.add_argument("--keep", type=Path, default=None, help="write the report here")
    ap.add_argument("--stats", action="store_true", help="trace with statistics (bigger)")
    args = ap.parse_args()
    from pytest_graphir.report import render_html

    t0 = time.perf_counter()
    ir, changes = build(args.layers, args.stats)
    t1 = time.perf_counter()
    html = render_html(ir, None, changes, title="bench")
    t2 = time.perf_counter()
    out = args.keep or Path(tempfile.mkdtemp()) / "report.html"
    out.write_text(html, encoding="utf-8")
    print(
        f"nodes: {len(ir.nodes)} ({sum(n.kind == 'op' for n in ir.nodes)} ops); "
        f"trace {t1 - t0:.1f} s; render_html {1000 * (t2 - t1):.0f} ms"
    )
    print(f"report: {out} {len(html.encode()) / 1e6:.2f} MB")
    for k, v in open_time(out, reveal=True).items():
        print(f"{k}: {v:.0f}" if isinstance(v, float) else f"{k}: {v}")


if __name__ == "__main__":
    main()
