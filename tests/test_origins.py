"""Drift traced to its origin (``compare/origins.py``) and grouped per module subtree
(``compare/groups.py``): in the comparison, the failure message and ``graphir diff``."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import snapshot_doc
from report_helpers import llama
from torch import nn

from pytest_graphir import trace
from pytest_graphir.cli import main
from pytest_graphir.compare import compare
from pytest_graphir.compare.groups import group_drift, subtree
from pytest_graphir.serialize import dumps, loads

pytest.importorskip("transformers")


def _out(mean: float = 0.5) -> dict[str, Any]:
    return {"shape": [4], "dtype": "float32", "mean": mean, "std": 1.0, "min": -3.0,
            "max": 3.0, "nan": 0, "inf": 0}  # fmt: skip


def _chain() -> dict[str, Any]:
    """x -> a/relu#0 -> b/relu#0 -> c/relu#0, and an independent d/relu#0 on x."""
    nodes = {
        "a/relu#0": {"op": "relu", "args": ["$x"], "out": [_out()]},
        "b/relu#0": {"op": "relu", "args": ["$a/relu#0"], "out": [_out()]},
        "c/relu#0": {"op": "relu", "args": ["$b/relu#0"], "out": [_out()]},
        "d/relu#0": {"op": "relu", "args": ["$x"], "out": [_out()]},
    }
    return {"meta": {}, "inputs": {"x": _out()}, "nodes": nodes, "outputs": {}}


def _roles(result: Any) -> dict[str, tuple[str, str]]:
    return {c.node: (c.role, c.cause) for c in result.changes if c.kind == "drift"}


def test_origin_is_the_first_drifting_node_with_unchanged_reads() -> None:
    a = _chain()
    b = copy.deepcopy(a)
    for name in ("b/relu#0", "c/relu#0", "d/relu#0"):
        b["nodes"][name]["out"][0]["mean"] = 0.9
    assert _roles(compare(a, b)) == {
        "b/relu#0": ("origin", "b/relu#0"),
        "c/relu#0": ("propagated", "b/relu#0"),
        "d/relu#0": ("origin", "d/relu#0"),
    }


def test_drift_behind_an_unchanged_node_is_still_propagated() -> None:
    """Statistics summarise: c reads b, whose statistics match, but a (upstream of b)
    drifts, so c's drift follows from a."""
    a = _chain()
    b = copy.deepcopy(a)
    for name in ("a/relu#0", "c/relu#0"):
        b["nodes"][name]["out"][0]["mean"] = 0.9
    assert _roles(compare(a, b))["c/relu#0"] == ("propagated", "a/relu#0")


def test_drift_follows_from_inputs_and_added_or_changed_nodes() -> None:
    a = _chain()
    b = copy.deepcopy(a)
    b["inputs"]["x"]["mean"] = 0.9
    b["nodes"]["c/relu#0"]["out"][0]["mean"] = 0.9
    result = compare(a, b)
    assert _roles(result)["c/relu#0"] == ("propagated", "inputs.x")
    lines = result.lines()
    assert lines[1] == (
        "  drift only: the inputs differ (inputs.x) and the drift follows from them"
    )
    b = copy.deepcopy(a)
    b["nodes"]["b/relu#0"]["op"] = "gelu"
    b["nodes"]["c/relu#0"]["out"][0]["mean"] = 0.9
    assert _roles(compare(a, b))["c/relu#0"] == ("propagated", "b/relu#0")
    b = copy.deepcopy(a)
    b["nodes"] = {"a/relu#0": a["nodes"]["a/relu#0"], "a.extra": {"module": "Extra", "out": []}}
    b["nodes"]["a.extra/tanh#0"] = {"op": "tanh", "args": ["$a/relu#0"], "out": [_out()]}
    b["nodes"].update({k: v for k, v in a["nodes"].items() if k != "a/relu#0"})
    b["nodes"]["b/relu#0"] = {"op": "relu", "args": ["$a.extra/tanh#0"], "out": [_out(0.9)]}
    assert _roles(compare(a, b))["b/relu#0"] == ("propagated", "a.extra")


def test_subtrees_and_sibling_ranges() -> None:
    assert subtree("model.layers.3.mlp/mul#0") == "model.layers.3"
    assert subtree("model.norm/mul#0") == "model.norm"
    assert subtree("lm_head/linear#0") == "lm_head"
    assert subtree("blocks.0@1/add#0") == "blocks.0"
    assert subtree("getitem#0") == "(model forward)"
    nodes = {}
    prev = "$x"
    for layer in range(6):
        name = f"model.layers.{layer}/add#0"
        nodes[name] = {"op": "add", "args": [prev, 1], "out": [_out()]}
        prev = f"${name}"
    nodes["lm_head/linear#0"] = {"op": "linear", "args": [prev], "out": [_out()]}
    a = {"meta": {}, "inputs": {"x": _out()}, "nodes": nodes, "outputs": {}}
    b = copy.deepcopy(a)
    for name in list(nodes)[1:]:
        if name != "model.layers.3/add#0":  # a gap: 2, then 4-5
            b["nodes"][name]["out"][0]["mean"] = 0.9
    result = compare(a, b)
    groups = [(g.label, g.cause, len(g.nodes)) for g in group_drift(result.changes)]
    assert groups == [
        ("model.layers.2", "model.layers.1/add#0", 1),
        ("model.layers.4-5", "model.layers.1/add#0", 2),
        ("lm_head", "model.layers.1/add#0", 1),
    ]
    assert result.lines()[2:] == [
        "  drift: model.layers.1/add#0 out[0].mean 0.5 -> 0.9 (tolerance 0.00301); "
        "starts here (1 value drifts, what it reads matches)",
        "  model.layers.2: 1 value in 1 node drifts downstream of model.layers.1/add#0",
        "  model.layers.4-5: 2 values in 2 nodes drift downstream of model.layers.1/add#0",
        "  lm_head: 1 value in 1 node drifts downstream of model.layers.1/add#0",
    ]


def test_top_level_sequential_children_group_into_ranges() -> None:
    """A plain ``nn.Sequential`` names its children ``0``, ``1``, ...: drift downstream
    of a change in child 1 reads as one range of children, not one line per child."""
    assert subtree("2.fc/linear#0") == "2"
    assert subtree("0/relu#0") == "0"
    torch.manual_seed(0)
    linears = [nn.Linear(8, 8) for _ in range(6)]
    model = nn.Sequential(*(nn.Sequential(lin, nn.Tanh()) for lin in linears)).eval()
    x = torch.randn(2, 8)
    before = trace(model, x)
    with torch.no_grad():
        linears[1].bias.add_(0.5)
    result = compare(loads(dumps(before)), loads(dumps(trace(model, x))))
    groups = [(g.label, g.cause) for g in group_drift(result.changes)]
    assert groups == [("1-5", "params.1.0.bias")], groups  # block 1's tanh, blocks 2-5
    assert any(line.strip().startswith("1-5: ") for line in result.lines()), result.lines()


# -- a 6-layer Llama built from a config ---------------------------------------------------


@pytest.fixture(scope="module")
def llama_pair() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(the 6-layer Llama, layer 2's act_fn swapped for ReLU, layer 2's down_proj
    weight scaled by 1.1), as snapshot documents."""
    model, ids = llama()
    base = snapshot_doc(model, ids)
    mlp: Any = model.get_submodule("model.layers.2.mlp")
    act = mlp.act_fn
    mlp.act_fn = nn.ReLU()
    swapped = snapshot_doc(model, ids)
    mlp.act_fn = act
    with torch.no_grad():
        mlp.down_proj.weight.mul_(1.1)
    return base, swapped, snapshot_doc(model, ids)


def test_llama_activation_swap_reads_as_one_change(llama_pair: Any) -> None:
    base, swapped, _ = llama_pair
    result = compare(base, swapped)
    lines = result.lines()
    assert len(lines) <= 12, "\n".join(lines)
    counts = result.counts()
    assert counts["drift"] > 300  # honest counts on the first line
    assert lines[0].startswith(f"graphir: 1 added, 1 removed, 1 changed, {counts['drift']} drift")
    head = "\n".join(lines[:4])
    assert "model.layers.2.mlp.act_fn/relu#0 (op relu)" in head
    assert "changed: model.layers.2.mlp.act_fn module SiLUActivation -> ReLU" in head
    cause = "downstream of model.layers.2.mlp.act_fn/relu#0"
    grouped = [line for line in lines if cause in line]
    assert grouped[0].startswith("  model.layers.2-5: ")
    assert any(line.startswith("  lm_head: ") for line in grouped)
    assert not any("model.embed_tokens" in line or "layers.1" in line for line in lines)


def test_llama_drift_only_failure_says_where_drift_starts(llama_pair: Any) -> None:
    base, _, scaled = llama_pair
    lines = compare(base, scaled).lines()
    text = "\n".join(lines)
    if any(c.section == "params" for c in compare(base, scaled).changes):
        # parameters recorded: the changed weight is where the drift starts
        start = "1 parameter differs (model.layers.2.mlp.down_proj.weight)"
        cause = "params.model.layers.2.mlp.down_proj.weight"
    else:
        start = "drift starts at 1 node: model.layers.2.mlp.down_proj/linear#0"
        cause = "model.layers.2.mlp.down_proj/linear#0"
        assert lines[2].startswith("  drift: model.layers.2.mlp.down_proj/linear#0 out[0].")
        assert "starts here" in lines[2]
    assert lines[1] == f"  drift only: the inputs are unchanged; {start}", text
    assert "  model.layers.2-5: " in text and f"downstream of {cause}" in text
    assert len(lines) <= 9, text


def test_graphir_diff_groups_and_all_lists_every_value(
    llama_pair: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, _, scaled = llama_pair
    old, new = tmp_path / "old.graphir", tmp_path / "new.graphir"
    old.write_text(dumps(base))
    new.write_text(dumps(scaled))
    assert main(["diff", str(old), str(new)]) == 1
    grouped = capsys.readouterr().out.splitlines()
    assert len(grouped) <= 10
    assert any("downstream of" in x and "model.layers.2.mlp.down_proj" in x for x in grouped)
    assert main(["diff", str(old), str(new), "--all"]) == 1
    every = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  drift: ")]
    assert len(every) == compare(base, scaled).counts()["drift"]


TEST_LLAMA = """
import os
import report_helpers
from torch import nn
from pytest_graphir import trace

def test_llama(graphir_snapshot):
    model, ids = report_helpers.llama()
    if os.environ.get("SWAP"):
        model.model.layers[2].mlp.act_fn = nn.ReLU()
    assert trace(model, ids) == graphir_snapshot
"""


def test_failure_message_of_an_activation_swap_is_short(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: the pytest failure of the swapped activation names its origin in
    the first lines and stays within 25 lines."""
    from workflow import run

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent), prepend=":")
    p = graphir_project
    p.makepyfile(test_llama=TEST_LLAMA)
    run(p, "--graphir-update").assert_outcomes(passed=1)
    monkeypatch.setenv("SWAP", "1")
    result = run(p)
    result.assert_outcomes(failed=1)
    out = result.stdout.lines
    start = next(i for i, x in enumerate(out) if x.startswith("E ") and "graphir: " in x)
    message = [x for x in out[start:] if x.startswith("E ")]
    assert len(message) <= 25, "\n".join(message)
    assert any("model.layers.2.mlp.act_fn" in x for x in message[:4]), "\n".join(message)


def test_changed_parameters_are_causes_not_origins() -> None:
    """Where a snapshot records parameters (a ``params`` section), a node reading a
    changed one is propagated from it, and a drift-only failure says so."""
    a = _chain()
    a["nodes"]["a/relu#0"]["args"] = ["$x", "$a.weight"]
    b = copy.deepcopy(a)
    b["nodes"]["b/relu#0"]["out"][0]["mean"] = 0.9
    a["params"] = {"a.weight": {"shape": [4], "dtype": "float32", "mean": 0.1}}
    b["params"] = {"a.weight": {"shape": [4], "dtype": "float32", "mean": 0.2}}
    result = compare(a, b)
    params = [c for c in result.changes if c.section == "params"]
    if not params:  # this build compares no params section: stand one in
        from pytest_graphir.compare import Change

        weights = Change("drift", section="params", nodes=["a.weight"], label="weights")
        result.changes.insert(0, weights)
        from pytest_graphir.compare.origins import trace_origins

        trace_origins(result.changes, b, [])
    assert _roles(result)["b/relu#0"] == ("propagated", "params.a.weight")
    lines = result.lines()
    assert "1 parameter differs (a.weight)" in lines[1]
    assert lines[2].startswith("  drift: weights")  # before the drift it explains
