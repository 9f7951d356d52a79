"""What ``--graphir-update`` keeps: stored statistics within the tolerance of this run's,
so an accepted change rewrites only the lines it changed and the next run passes
(:func:`pytest_graphir.compare.keep.keep_within`)."""

from __future__ import annotations

import difflib
from typing import Any

import pytest
from helpers import float_out
from workflow import run

from pytest_graphir.compare import Tolerance, compare
from pytest_graphir.compare.keep import keep_within
from pytest_graphir.serialize import dumps

SNAP = "__snapshots__/test_mlp/test_mlp.graphir"


def _doc(**nodes: dict[str, Any]) -> dict[str, Any]:
    """A hand-built document of op nodes, ``name`` -> its one output entry."""
    return {
        "meta": {"model": "M", "args": ["x"], "kwargs": []},
        "inputs": {"x": float_out()},
        "nodes": {
            name: {"op": name.split("/")[-1].split("#")[0], "out": [o]} for name, o in nodes.items()
        },
        "outputs": {},
    }


def _changed_lines(old: str, new: str) -> list[str]:
    """The lines a git-style (unified) diff of ``old`` to ``new`` marks ``-`` or ``+``."""
    diff = difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=0)
    return [d for d in diff if d[:1] in "+-" and not d.startswith(("+++", "---"))]


def _count_changed(old: str, new: str) -> int:
    """Lines changed between two texts (a replaced block counts its longer side)."""
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    return sum(
        max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"
    )


def test_values_within_tolerance_keep_their_stored_value() -> None:
    stored = _doc(**{"a/relu#0": float_out(mean=0.5, max=3.0, nan=0)})
    received = _doc(**{"a/relu#0": float_out(mean=0.5001, max=3.5, nan=0)})
    out = keep_within(stored, received, Tolerance())["nodes"]["a/relu#0"]["out"][0]
    assert out["mean"] == 0.5  # 1e-4 from the stored value: within 1e-5 + 1e-3 * 3
    assert out["max"] == 3.5  # beyond: this run's value
    assert received["nodes"]["a/relu#0"]["out"][0]["mean"] == 0.5001  # not modified
    counts = keep_within(_doc(x=float_out(nan=0)), _doc(x=float_out(nan=1)), Tolerance())
    assert counts["nodes"]["x"]["out"][0]["nan"] == 1  # counts compare exactly


def test_an_entry_whose_kept_values_would_drift_takes_all_of_this_run() -> None:
    """The stored range scaled the tolerance; the new range is 100 times smaller, so
    the stored mean, within the old tolerance, is beyond the new one."""
    stored = _doc(n=float_out(mean=0.0009, std=0.5, min=-1.0, max=1.0))
    new = float_out(mean=0.0, std=0.005, min=-0.01, max=0.01)
    kept = keep_within(stored, _doc(n=new), Tolerance())
    assert kept["nodes"]["n"]["out"][0] == new
    assert not compare(kept, _doc(n=new))


def test_shape_change_and_one_sided_entries_are_this_runs() -> None:
    stored = _doc(n=float_out(), gone=float_out())
    received = _doc(n=float_out(shape=[8], mean=0.50001), new=float_out())
    kept = keep_within(stored, received, Tolerance())
    assert kept["nodes"] == received["nodes"]


def test_renumbered_nodes_keep_the_values_of_the_node_they_align_with() -> None:
    """An ``add`` inserted first: the stored ``add#0`` is this run's ``add#1``."""
    stored = _doc(**{"b/add#0": float_out(shape=[2], mean=0.25)})
    received = _doc(
        **{"b/add#0": float_out(shape=[3], mean=9.0), "b/add#1": float_out(shape=[2], mean=0.2501)}
    )
    kept = keep_within(stored, received, Tolerance())["nodes"]
    assert kept["b/add#1"]["out"][0]["mean"] == 0.25
    assert kept["b/add#0"]["out"][0]["mean"] == 9.0


def test_per_pattern_tolerance_decides_as_in_the_comparison() -> None:
    stored = _doc(**{"head/linear#0": float_out(mean=0.5), "body/linear#0": float_out(mean=0.5)})
    received = _doc(
        **{"head/linear#0": float_out(mean=0.53), "body/linear#0": float_out(mean=0.53)}
    )
    tol = Tolerance.build(tolerances={"head/*": {"rtol": 0.05}})
    kept = keep_within(stored, received, tol)
    assert kept["nodes"]["head/linear#0"]["out"][0]["mean"] == 0.5
    assert kept["nodes"]["body/linear#0"]["out"][0]["mean"] == 0.53
    assert not compare(kept, received, tol)


def test_params_and_inputs_within_tolerance_are_kept() -> None:
    stored = {**_doc(), "inputs": {"x": float_out(mean=0.5)}, "params": {"w": float_out(std=1.0)}}
    received = {
        **_doc(),
        "inputs": {"x": float_out(mean=0.5002)},
        "params": {"w": float_out(std=1.0003)},
    }
    kept = keep_within(stored, received, Tolerance())
    assert kept["inputs"] == stored["inputs"] and kept["params"] == stored["params"]


TEST_MLP = """
import os
import models
from pytest_graphir import trace

def test_mlp(graphir_snapshot):
    model, inputs = models.mlp(act=os.environ.get("ACT", "relu"))
    import torch
    with torch.no_grad():
        model.fc1.weight.mul_(1 + float(os.environ.get("NOISE", "0")))
    assert trace(model, *inputs) == graphir_snapshot
"""


def test_accepted_change_rewrites_only_its_lines(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ReLU -> Tanh accepted on a run whose fc1 weights also moved within the tolerance
    (the printed digits change): the file's diff is the activation and what it moved
    beyond the tolerance; fc1's lines, its weight's and the input's keep their text;
    the next run passes and leaves the file alone."""
    p = graphir_project
    p.makepyfile(test_mlp=TEST_MLP)
    run(p, "--graphir-update").assert_outcomes(passed=1)
    snap = p.path / SNAP
    before = snap.read_text()

    monkeypatch.setenv("ACT", "tanh")
    monkeypatch.setenv("NOISE", "1e-5")
    run(p, "--graphir-update").assert_outcomes(passed=1)
    after = snap.read_text()
    changed = _changed_lines(before, after)
    keys = {line[1:].split(":")[0].strip() for line in changed}
    assert keys <= {"act", "act/relu#0", "act/tanh#0", "fc2", "fc2/linear#0"}, changed
    assert {"act/relu#0", "act/tanh#0"} <= keys
    for line in before.splitlines():
        if line.startswith(("  fc1", "  x:")):
            assert line in after.splitlines(), line

    run(p).assert_outcomes(passed=1)
    assert snap.read_text() == after


@pytest.mark.slow
def test_llama_activation_swap_rewrites_only_lines_beyond_tolerance() -> None:
    """A 12-layer Llama (hidden size 32) with SiLU -> GELU in one layer's MLP, the
    update accepted: the kept text changes exactly the swapped op's line (``silu#0``
    becomes ``gelu#0``), its module's line and the line of each node the comparison
    lists as drifting, one line apiece and nothing else, and it compares equal to this
    run, so the next run passes. A whole-text rewrite changes every line after the
    swap instead. Checked with the swap in an early, a middle and the last layer; the
    per-layer figures are in benchmarks/README.md."""
    import torch
    from report_helpers import llama, llama_model

    from pytest_graphir import trace
    from pytest_graphir.serialize import loads

    ids = llama(1)[1]
    old = dumps(trace(llama_model(12), ids))
    assert len(old.splitlines()) == 1017
    counts = {}
    for layer in (3, 5, 11):
        model = llama_model(12)
        model.model.layers[layer].mlp.act_fn = torch.nn.GELU()
        new = dumps(trace(model, ids))
        stored, received = loads(old), loads(new)
        kept = dumps(keep_within(stored, received, Tolerance()))
        assert not compare(loads(kept), received)

        result = compare(stored, received)
        drifting = {c.node for c in result.changes if c.kind == "drift"}
        module = f"model.layers.{layer}.mlp.act_fn"
        swap = {module, f"{module}/silu#0", f"{module}/gelu#0"}
        structural = {
            n for c in result.changes if c.kind != "drift" for n in (c.node, *c.nodes) if n
        }
        assert structural == swap, structural
        lines = _changed_lines(old, kept)
        removed = {line[1:].split(":")[0].strip() for line in lines if line[0] == "-"}
        added = {line[1:].split(":")[0].strip() for line in lines if line[0] == "+"}
        expected = drifting | {module, f"{module}/silu#0"}
        assert removed == expected, (layer, removed ^ expected)
        expected = drifting | {module, f"{module}/gelu#0"}
        assert added == expected, (layer, added ^ expected)
        assert len(lines) == 2 * len(removed)  # each key's line replaced once
        kept_changed = _count_changed(old, kept)
        assert kept_changed == len(drifting) + 2, (layer, kept_changed, len(drifting))
        counts[layer] = (_count_changed(old, new), kept_changed)
    assert counts[5][0] == 345, counts  # the whole text: every line after the swap
    assert counts[3][1] <= 60, counts
    assert all(kept < whole for whole, kept in counts.values()), counts
