"""Tests of ``compare``: keyed structural diff, scale-aware tolerance, readable messages."""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

import models
import pytest
import torch
from helpers import change_lines as _lines
from helpers import float_out
from helpers import snapshot_doc as _doc
from torch import nn

from pytest_graphir import trace
from pytest_graphir.compare import Tolerance, compare
from pytest_graphir.defaults import MAX_TOLERANCE
from pytest_graphir.names import map_plain, parse_ref, rank_ref
from pytest_graphir.serialize import dumps, loads


def _mlp_doc(act: str = "relu") -> dict[str, Any]:
    torch.manual_seed(0)
    model, (x,) = models.mlp(act=act)
    return _doc(model, x)


def _stat_doc(**stats: Any) -> dict[str, Any]:
    """A one-node document whose output has the given float statistics."""
    return {
        "meta": {"model": "M"},
        "inputs": {},
        "nodes": {"blk/gelu#0": {"op": "gelu", "args": ["$x"], "out": [float_out(**stats)]}},
        "outputs": {},
    }


# -- equality and tolerance ----------------------------------------------------------------


def test_identical_is_falsy() -> None:
    """The same document (and a fresh trace of the same model) has no differences."""
    a = _mlp_doc()
    result = compare(a, copy.deepcopy(a))
    assert not result
    assert result.changes == []
    assert "no differences" in result.summary()
    assert not compare(a, _mlp_doc())


def test_drift_within_tolerance_passes() -> None:
    """A mean moved by 1e-4 on a tensor of magnitude 3 is inside rtol=1e-3."""
    assert not compare(_stat_doc(), _stat_doc(mean=0.5001))


def test_drift_beyond_tolerance_names_node_stat_old_new() -> None:
    """Beyond the tolerance: one ``drift:`` line with node, statistic, old -> new."""
    result = compare(_stat_doc(), _stat_doc(mean=0.6))
    assert result
    assert [c.kind for c in result.changes] == ["drift"]
    line = str(result.changes[0])
    assert line.startswith("drift: blk/gelu#0 out[0].mean 0.5 -> 0.6")


def test_tolerance_is_scale_aware_for_means_near_zero() -> None:
    """A mean of 1e-9 on a tensor spanning [-3, 3] tolerates 1e-6 of noise, even with
    atol=0, where a plain relative tolerance (1e-3 * |mean|) would fail."""
    old, new = 1e-9, 1e-9 + 1e-6
    rtol = 1e-3
    assert abs(new - old) > rtol * abs(old)  # plain relative tolerance: a failure
    tol = Tolerance(rtol=rtol, atol=0.0)
    assert not compare(_stat_doc(mean=old), _stat_doc(mean=new), tol)
    # scale is the tensor's magnitude: 1e-2 is beyond 1e-3 * 3
    assert compare(_stat_doc(mean=old), _stat_doc(mean=1e-2), tol)


def test_tolerance_allowed_formula() -> None:
    """allowed = atol + rtol * max(|min|, |max|, std), ignoring non-finite values."""
    tol = Tolerance(rtol=0.01, atol=0.5)
    assert tol.allowed({"min": -7.0, "max": 2.0, "std": 1.0}) == pytest.approx(0.5 + 0.07)
    assert tol.allowed({"min": float("-inf"), "max": 2.0, "std": float("nan")}) == (
        pytest.approx(0.5 + 0.02)
    )
    assert tol.allowed({}) == 0.5


@pytest.mark.parametrize(("key", "old", "new"), [("nan", 0, 1), ("inf", 2, 3), ("true", 5, 4)])
def test_counts_compare_exactly(key: str, old: int, new: int) -> None:
    """nan/inf/true counts differ -> drift, however large the tolerance."""
    huge = Tolerance(rtol=MAX_TOLERANCE, atol=MAX_TOLERANCE)
    if key == "true":
        a = {
            "meta": {},
            "inputs": {"m": {"shape": [9], "dtype": "bool", "true": old}},
            "nodes": {},
            "outputs": {},
        }
        b = copy.deepcopy(a)
        b["inputs"]["m"]["true"] = new
    else:
        a, b = _stat_doc(**{key: old}), _stat_doc(**{key: new})
    result = compare(a, b, huge)
    assert [c.kind for c in result.changes] == ["drift"]
    assert f"{key} {old} -> {new} (exact)" in str(result.changes[0])


def test_nan_matches_nan() -> None:
    """NaN statistics on both sides match (after a text round trip too); NaN vs number fails."""
    nan = float("nan")
    a = _stat_doc(mean=nan, std=nan, nan=2)
    assert not compare(a, _stat_doc(mean=nan, std=nan, nan=2))
    assert not compare(loads(dumps(a)), loads(dumps(_stat_doc(mean=nan, std=nan, nan=2))))
    drift = compare(a, _stat_doc(mean=0.5, std=nan, nan=2))
    assert [str(c).split(" (")[0] for c in drift.changes] == [
        "drift: blk/gelu#0 out[0].mean nan -> 0.5"
    ]


def test_inf_statistic_matches_only_same_inf() -> None:
    """max=inf matches inf, not -inf nor a large finite number."""
    inf = float("inf")
    assert not compare(_stat_doc(max=inf, inf=1), _stat_doc(max=inf, inf=1))
    assert compare(
        _stat_doc(max=inf, inf=1), _stat_doc(max=1e30, inf=1), Tolerance(rtol=1.0, atol=1.0)
    )


# -- structure ------------------------------------------------------------------------------


class _Base(nn.Module):
    def __init__(self, extra: bool = False, scale: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 4)
        self.fc2 = nn.Linear(4, 2)
        self.scale = scale
        if extra:
            self.extra = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        if hasattr(self, "extra"):
            h = self.extra(h)
        if self.scale:
            h = h * 0.5
        return self.fc2(h)


def test_added_module_subtree_folds_into_one_change() -> None:
    """A new ``extra`` Sequential with 3 children and their ops is one ``added:`` line."""
    torch.manual_seed(0)
    base = _Base()
    torch.manual_seed(0)
    bigger = _Base(extra=True)
    bigger.fc1.load_state_dict(base.fc1.state_dict())
    bigger.fc2.load_state_dict(base.fc2.state_dict())
    x = torch.randn(3, 4)
    result = compare(_doc(base, x), _doc(bigger, x))
    added = [c for c in result.changes if c.kind == "added"]
    assert len(added) == 1, [str(c) for c in added]
    assert added[0].where == "extra"
    # extra.0, extra.0/linear#0, extra.1, extra.1/relu#0, extra.2, extra.2/linear#0
    assert "module Sequential" in added[0].detail
    assert "6 nodes inside" in added[0].detail
    assert result.counts()["removed"] == 0


def test_removed_module_subtree_folds_too() -> None:
    """The reverse direction: one ``removed:`` change for the whole subtree."""
    torch.manual_seed(0)
    big = _doc(_Base(extra=True), torch.ones(3, 4))
    torch.manual_seed(0)
    small = _doc(_Base(), torch.ones(3, 4))
    removed = [str(c) for c in compare(big, small).changes if c.kind == "removed"]
    assert len(removed) == 1
    assert removed[0].startswith("removed: extra (module Sequential")


def test_inserted_op_is_one_added_node_not_a_cascade() -> None:
    """One new root op (``mul``) adds one node; no node is renamed, removed or re-ordered."""
    torch.manual_seed(0)
    plain = _Base()
    torch.manual_seed(0)
    scaled = _Base(scale=True)
    x = torch.randn(3, 4)
    old, new = _doc(plain, x), _doc(scaled, x)
    result = compare(old, new)
    counts = result.counts()
    assert counts["added"] == 1 and counts["removed"] == 0
    assert str(result.changes[0]) == "added: mul#0 (op mul)"
    # only the consumers of the new node (fc2 and its linear op) see a new argument;
    # no other node of the old graph is named in any change
    untouched = set(old["nodes"]) - {"fc2", "fc2/linear#0", "relu#0"}
    for change in result.changes:
        tokens = set(re.split(r"[\s,()$:{}]+", str(change)))
        assert not tokens & untouched, str(change)
    assert len([c for c in result.changes if c.kind == "changed"]) <= 2


def test_changed_module_class() -> None:
    """ReLU -> Tanh: ``changed: act module ReLU -> Tanh`` plus the renamed op."""
    result = compare(_mlp_doc("relu"), _mlp_doc("tanh"))
    lines = [str(c) for c in result.changes]
    assert "changed: act module ReLU -> Tanh" in lines
    assert "removed: act/relu#0 (op relu)" in lines
    # the readers rewired from the old op to the new one: folded into the added line
    assert (
        "added: act/tanh#0 (op tanh), read in place of act/relu#0 by 3 nodes: "
        "act, fc2, fc2/linear#0" in lines
    )
    assert not any("$act/relu#0" in line for line in lines)


def test_changed_op_same_name() -> None:
    """A node keeping its name but running another op: ``changed: <name> op a -> b``."""
    a = _stat_doc()
    b = copy.deepcopy(a)
    b["nodes"]["blk/gelu#0"]["op"] = "relu"
    assert _lines(a, b) == ["changed: blk/gelu#0 op gelu -> relu"]


def test_changed_argument_detail() -> None:
    """A changed argument names its position and both values."""
    a = _stat_doc()
    b = copy.deepcopy(a)
    b["nodes"]["blk/gelu#0"]["args"] = ["$y"]
    b["nodes"]["blk/gelu#0"]["kwargs"] = {"approximate": "tanh"}
    lines = _lines(a, b)
    assert "changed: blk/gelu#0 args[0] $x -> $y" in lines
    assert any(ln.startswith("changed: blk/gelu#0 kwargs") and "tanh" in ln for ln in lines)


def test_shape_change() -> None:
    """``out[0].shape [2,16] -> [2,32]``, reported as structure, not as drift."""
    a = _mlp_doc()
    b = copy.deepcopy(a)
    b["nodes"]["fc1/linear#0"]["out"][0]["shape"] = [2, 32]
    b["nodes"]["fc1/linear#0"]["out"][0]["mean"] += 1.0  # drift is a consequence: not shown
    assert _lines(a, b) == ["changed: fc1/linear#0 out[0].shape [2,16] -> [2,32]"]


def test_dtype_and_meta_changes() -> None:
    """dtype changes and meta changes (``training``) are named."""
    a = _mlp_doc()
    b = copy.deepcopy(a)
    b["nodes"]["fc2/linear#0"]["out"][0]["dtype"] = "float16"
    b["meta"]["training"] = True
    lines = _lines(a, b)
    assert lines[0] == "changed: meta.training false -> true"
    assert "changed: fc2/linear#0 out[0].dtype float32 -> float16" in lines


def test_summary_line_counts() -> None:
    """The summary gives per-kind counts and the tolerance."""
    a = _mlp_doc("relu")
    b = _mlp_doc("tanh")
    b["nodes"]["fc1/linear#0"]["out"][0]["std"] *= 2
    result = compare(a, b)
    counts = result.counts()
    summary = result.summary()
    assert summary == result.lines()[0]
    assert summary.startswith("graphir: ")
    for kind, n in counts.items():
        assert (f"{n} {kind}" in summary) == (n > 0)
    assert counts["added"] == 1 and counts["removed"] == 1 and counts["drift"] >= 1
    assert "rtol=0.001" in summary and "atol=1e-05" in summary


def test_long_diff_summarised_never_silently_truncated() -> None:
    """50 drifts with max_lines=30: the drift-only note and 29 lines shown, then
    '... and 21 more', nothing lost."""
    nodes: dict[str, Any] = {
        f"n/relu#{i}": {
            "op": "relu",
            "out": [
                {
                    "shape": [2],
                    "dtype": "float32",
                    "mean": 1.0,
                    "std": 1.0,
                    "min": 0.0,
                    "max": 2.0,
                    "nan": 0,
                    "inf": 0,
                }
            ],
        }
        for i in range(50)
    }
    a = {"meta": {}, "inputs": {}, "nodes": nodes, "outputs": {}}
    b = copy.deepcopy(a)
    for node in b["nodes"].values():
        node["out"][0]["mean"] = 5.0
    result = compare(a, b)
    assert len(result.changes) == 50
    lines = result.lines(max_lines=30)
    assert len(lines) == 1 + 30 + 1
    assert lines[1].startswith("  drift only: the inputs are unchanged; drift starts at 50 nodes")
    assert lines[-1].strip().startswith("... and 21 more (21 drift)")
    assert "graphir_max_diff_lines" in lines[-1]
    everything = result.lines(max_lines=0)
    assert len(everything) == 52
    assert not any(ln.strip().startswith("...") for ln in everything[1:])


def test_change_lines_are_the_message_lines_cut_and_counted() -> None:
    """``Comparison.change_lines`` (what the terminal summary shows) is the message's
    change list, cut after ``max_lines`` lines; what it leaves out is counted in
    lines, as the message's ``... and N more`` counts them: two origins cut off, one
    drifting in two values, are 2 lines (3 changes)."""
    out: dict[str, Any] = {"shape": [2], "dtype": "float32", "mean": 1.0, "std": 1.0,
                           "min": 0.0, "max": 2.0, "nan": 0, "inf": 0}  # fmt: skip
    nodes = {f"n/relu#{i}": {"op": "relu", "out": [dict(out)]} for i in range(12)}
    a: dict[str, Any] = {"meta": {}, "inputs": {}, "nodes": nodes, "outputs": {}}
    b = copy.deepcopy(a)
    b["nodes"]["n/relu#0"]["op"] = "gelu"
    for i in range(1, 12):
        b["nodes"][f"n/relu#{i}"]["out"][0]["mean"] = 5.0
    b["nodes"]["n/relu#11"]["out"][0]["std"] = 3.0
    result = compare(a, b)
    shown, more = result.change_lines(10)
    assert shown[0] == "changed: n/relu#0 op relu -> gelu"
    assert [line.split(" ")[1] for line in shown[1:]] == [f"n/relu#{i}" for i in range(1, 10)]
    assert all(line.endswith("what it reads matches)") for line in shown[1:])
    assert more == 2
    cut = result.lines(max_lines=10)[-1].strip()
    assert cut.startswith("... and 2 more (3 changes: 3 drift); "), cut
    message = [line.strip() for line in result.lines(max_lines=0)[1:]]
    assert shown == message[:10]
    assert result.change_lines(0) == (message, 0)


def test_structural_changes_listed_before_drift() -> None:
    """Architecture changes come first even when drift happens in earlier nodes."""
    a = _mlp_doc("relu")
    b = _mlp_doc("tanh")
    b["inputs"]["x"]["mean"] += 1.0
    kinds = [c.kind for c in compare(a, b).changes]
    first_drift = kinds.index("drift")
    assert all(k == "drift" for k in kinds[first_drift:])


def test_keyed_compare_of_5000_nodes_names_the_two_changes() -> None:
    """5,000 nodes, one inserted and one drifted: exactly those two changes (the time
    compare takes at this size is measured by ``benchmarks/bench_scale.py``)."""

    def node(i: int) -> dict[str, Any]:
        return {
            "op": "add",
            "args": [f"$s{i % 7}/add#{i - 1}", 1.0],
            "out": [
                {
                    "shape": [4, 8],
                    "dtype": "float32",
                    "mean": i * 0.001,
                    "std": 1.0,
                    "min": -3.0,
                    "max": 3.0,
                    "nan": 0,
                    "inf": 0,
                }
            ],
        }

    names = [f"s{i % 7}/add#{i}" for i in range(5000)]
    a: dict[str, Any] = {
        "meta": {"model": "Big"},
        "inputs": {},
        "nodes": {n: node(i) for i, n in enumerate(names)},
        "outputs": {},
    }
    b = copy.deepcopy(a)
    items = list(b["nodes"].items())
    b["nodes"] = dict([*items[:2500], ("s0/mul#0", {"op": "mul", "out": []}), *items[2500:]])
    b["nodes"][names[4000]]["out"][0]["mean"] += 1.0
    result = compare(a, b)
    assert [str(c).split(" (")[0] for c in result.changes] == [
        "added: s0/mul#0",
        f"drift: {names[4000]} out[0].mean 4 -> 5",
    ]


def test_extra_block_is_one_added_change() -> None:
    """TinyTransformer depth 2 -> 3: one ``added: blocks.2`` change, nothing removed,
    and no node outside the new block and its consumer (``shared``) is renamed."""
    torch.manual_seed(0)
    small, (ids,) = models.tiny_transformer(2)
    torch.manual_seed(0)
    big, _ = models.tiny_transformer(3)
    big.load_state_dict(small.state_dict(), strict=False)  # same weights where both have them
    old, new = _doc(small, ids), _doc(big, ids)
    result = compare(old, new)
    added = [str(c) for c in result.changes if c.kind == "added"]
    assert added == ["added: blocks.2 (module Block, and 6 nodes inside it)"]
    assert result.counts()["removed"] == 0
    structural = [str(c) for c in result.changes if c.kind == "changed"]
    assert structural and all(
        "$blocks.1/add#0 -> $blocks.2/add#0" in s or "shared" in s for s in structural
    ), structural


def test_inputs_added_and_constant_input_changed() -> None:
    """A new input is ``added: inputs.<name>``; a changed constant names both values."""
    a = {"meta": {}, "inputs": {"scale": 2.0}, "nodes": {}, "outputs": {}}
    b = {
        "meta": {},
        "inputs": {"scale": 1.0, "mask": {"shape": [1], "dtype": "bool", "true": 1}},
        "nodes": {},
        "outputs": {},
    }
    lines = _lines(a, b)
    assert "added: inputs.mask" in lines
    assert "changed: inputs.scale 2 -> 1" in lines


class _Adds(nn.Module):
    """Three adds in the root scope; ``extra`` inserts another add before them."""

    def __init__(self, extra: str) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.extra = extra

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.extra == "first":
            x = x + 1
        h = self.fc(x)
        a = h + x
        if self.extra == "middle":
            a = a + 2
        b = a + h
        return b * 2


def _adds_doc(extra: str) -> dict[str, Any]:
    torch.manual_seed(0)
    return _doc(_Adds(extra), torch.ones(2, 4))


@pytest.mark.parametrize("extra, added", [("first", "add#0"), ("middle", "add#1")])
def test_inserted_op_of_an_existing_type_renumbers_without_cascade(extra: str, added: str) -> None:
    """Inserting an ``add`` before other adds shifts their numbers (add#1 -> add#2);
    the report must still be one added node, named as in the new run, and one
    re-wiring line, not changed nodes for every shifted add."""
    result = compare(_adds_doc(""), _adds_doc(extra))
    structural = [c for c in result.changes if c.kind != "drift"]
    assert [str(c) for c in structural if c.kind == "added"] == [f"added: {added} (op add)"]
    assert not [c for c in structural if c.kind == "removed"]
    changed = [c for c in structural if c.kind == "changed"]
    assert len(changed) == 1
    assert str(changed[0]).endswith(f"-> ${added}") or f"-> ${added} (read by" in str(
        changed[0]
    )  # its consumers now read the new add


def _rank_refs(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with every whole-node reference in its nodes written as the output this
    rank picked (``$add#0[<rank>]``), as a traced DTensor or rank-chunked input is."""

    def picked(value: Any) -> Any:
        target = parse_ref(value)
        return rank_ref(target[0]) if target is not None and target[1] is None else value

    return {**doc, "nodes": {n: map_plain(v, picked) for n, v in doc["nodes"].items()}}


def test_renumbering_keeps_the_rank_of_a_reference() -> None:
    """Renaming the stored document to line up with the new one (an inserted op
    renumbers the adds after it) keeps each reference's ``[<rank>]``: the report is the
    one added node and one re-wiring line, as without ranks, and no reference of an
    unchanged node reads as changed."""
    result = compare(_rank_refs(_adds_doc("")), _rank_refs(_adds_doc("middle")))
    structural = [str(c) for c in result.changes if c.kind != "drift"]
    assert structural == [
        "added: add#1 (op add)",
        "changed: add#2 args[0] $add#0[<rank>] -> $add#1[<rank>]",
    ]


def test_removed_op_of_an_existing_type_is_one_removed_node() -> None:
    result = compare(_adds_doc("middle"), _adds_doc(""))
    structural = [c for c in result.changes if c.kind != "drift"]
    removed = [c for c in structural if c.kind == "removed"]
    assert len(removed) == 1 and removed[0].where == "add#1~old"
    assert not [c for c in structural if c.kind == "added"]


def test_integer_statistics_compare_exactly() -> None:
    """A changed token id is a changed input, whatever the tolerance."""

    def doc(ids_sum: int) -> dict[str, Any]:
        entry = {"shape": [1, 4], "dtype": "int64", "min": 3, "max": 49922, "sum": ids_sum}
        return {"meta": {}, "inputs": {"ids": entry}, "nodes": {}, "outputs": {}}

    result = compare(doc(414116), doc(414160), Tolerance(rtol=0.5, atol=1.0))
    assert [str(c) for c in result.changes] == ["drift: inputs.ids sum 414116 -> 414160 (exact)"]
    assert not compare(doc(414116), doc(414116), Tolerance(rtol=0.5, atol=1.0))


# -- the structured result (one source for the message, the CLI and the HTML report) ----


def test_drift_change_is_structured() -> None:
    """A drift carries node, scope, section, field, old, new and the allowed tolerance;
    the message line is rendered from those fields."""
    result = compare(_stat_doc(), _stat_doc(mean=0.6))
    (c,) = result.changes
    assert (c.kind, c.section, c.node, c.scope, c.field) == (
        "drift",
        "nodes",
        "blk/gelu#0",
        "blk",
        "out[0].mean",
    )
    assert (c.old, c.new) == (0.5, 0.6)
    assert c.tolerance == pytest.approx(1e-5 + 1e-3 * 3.0)
    assert str(c) == "drift: blk/gelu#0 out[0].mean 0.5 -> 0.6 (tolerance 0.00301)"
    c.new = 0.7  # the line follows the fields: nothing is cached as text
    assert "0.5 -> 0.7" in str(c)


def test_changed_op_and_section_entries_are_structured() -> None:
    """A swapped activation: the module node's class changed (field ``module``), the
    new op is added and the old one removed (field ``op``); an input entry change
    names its section."""
    a = _mlp_doc("relu")
    b = _mlp_doc("gelu")
    changes = compare(a, b).changes
    (module,) = [c for c in changes if c.field == "module"]
    assert (module.kind, module.section, module.node, module.scope) == (
        "changed",
        "nodes",
        "act",
        "act",
    )
    assert (module.old, module.new) == ("ReLU", "GELU")
    added = [(c.node, c.scope, c.field, c.old, c.new) for c in changes if c.kind == "added"]
    assert added == [("act/gelu#0", "act", "op", None, "gelu")]
    assert not [c for c in changes if c.nodes]  # the rewiring is folded into "added"
    c = copy.deepcopy(a)
    name = next(iter(c["inputs"]))
    c["inputs"][name]["shape"] = [99]
    (inp,) = compare(a, c).structural()
    assert (inp.section, inp.node, inp.field, inp.new) == ("inputs", name, "shape", [99])
    assert inp.where == f"inputs.{name}"
    assert (inp.scope, inp.tolerance) == ("", None)


def test_folded_and_merged_changes_list_their_nodes() -> None:
    """Several ops added in one scope are one change whose ``nodes`` lists each op, so
    the report can colour every one of them."""
    a = _stat_doc()
    b = copy.deepcopy(a)
    for i in range(2):
        b["nodes"][f"blk/relu#{i}"] = {"op": "relu", "args": ["$x"], "out": [{"ref": "$x"}]}
    (added,) = compare(a, b).changes
    assert added.kind == "added" and added.scope == "blk"
    assert added.nodes == ["blk/relu#0", "blk/relu#1"]
    assert str(added) == "added: blk/{relu#0,relu#1} (2 ops)"


def test_nan_constant_matches_itself() -> None:
    class Fill(nn.Module):
        def forward(self, x: torch.Tensor, fill: float) -> torch.Tensor:
            return x.nan_to_num(fill)

    doc = loads(dumps(trace(Fill(), torch.ones(2), float("nan"))))
    assert not compare(doc, loads(dumps(trace(Fill(), torch.ones(2), float("nan")))))


def test_graph_break_count_change_is_reported() -> None:
    def doc(count: int) -> dict[str, Any]:
        brk = {
            "reason": "Unsupported Tensor.item() call",
            "scope": "norm",
            "location": "MaxNorm.forward: s = x.max().item()",
            "count": count,
        }
        return {
            "meta": {},
            "inputs": {},
            "nodes": {},
            "outputs": {},
            "compiled": {"graphs": 2, "graph_breaks": [brk]},
        }

    changes = [str(c) for c in compare(doc(1), doc(3)).changes]
    assert changes == [
        "changed: graph break in norm (MaxNorm.forward: s = x.max().item()): "
        "Unsupported Tensor.item() call {count: 1} -> {count: 3}"
    ]


def test_message_wording_plural_absent_and_named_field() -> None:
    """``1 node``/``2 nodes``; a missing key reads ``absent`` (not ``null``); two
    ``autograd`` counts that change alike stay two lines, each naming its type."""
    from pytest_graphir.compare import message
    from pytest_graphir.names import plural

    assert (plural(1, "node"), plural(2, "node")) == ("1 node", "2 nodes")
    assert message.folded_module("Linear", 1) == "(module Linear, and 1 node inside it)"
    a = _stat_doc()
    b = copy.deepcopy(a)
    b["meta"]["training"] = True
    assert _lines(a, b) == ["changed: meta.training absent -> true"]
    a["autograd"] = ["AddBackward0", "MulBackward0", "AddBackward0", "MulBackward0"]
    b = copy.deepcopy(a)
    b["autograd"] = a["autograd"] + ["AddBackward0", "MulBackward0"]
    assert _lines(a, b) == [
        "changed: autograd AddBackward0 2 -> 3 nodes",
        "changed: autograd MulBackward0 2 -> 3 nodes",
    ]


def test_node_order_is_compared() -> None:
    """Two node lines swapped in a snapshot file, or two independent pure ops swapped
    in the model: ``reordered``, a change of its own kind."""
    a = _mlp_doc("relu")
    names = list(a["nodes"])
    i = names.index("act/relu#0")
    swapped = [*names[: i - 1], names[i], names[i - 1], *names[i + 1 :]]
    b = dict(a, nodes={n: a["nodes"][n] for n in swapped})
    result = compare(a, b)
    assert result.counts()["reordered"] == 1
    assert _lines(a, b) == [f"reordered: act/relu#0 runs after {names[i - 2]} (was after act)"]
    assert "1 reordered" in result.summary()
    assert compare(a, loads(dumps(b))).counts()["reordered"] == 1  # as read from a file

    class Two(nn.Module):
        def __init__(self, sin_first: bool) -> None:
            super().__init__()
            self.sin_first = sin_first

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.sin_first:
                s = torch.sin(x)
                c = torch.cos(x)
            else:
                c = torch.cos(x)
                s = torch.sin(x)
            return s + c

    x = torch.randn(3)
    result = compare(_doc(Two(True), x), _doc(Two(False), x))
    assert [str(c) for c in result.changes] == ["reordered: cos#0 runs first (was after sin#0)"]
    # a node inserted or removed moves no other node
    assert not compare(_mlp_doc("relu"), _mlp_doc("tanh")).counts()["reordered"]


# -- the collectives line ------------------------------------------------------------------


def _collective(op: str, size: int, *args: Any) -> dict[str, Any]:
    """An op node that issued a collective on the ``tp`` mesh dimension."""
    kwargs = {"group": "tp", "group_size": 2, "bytes": size, "phase": "forward"}
    return {"op": op, "args": list(args), "kwargs": kwargs, "out": [float_out()]}


def _collectives_doc(
    nodes: dict[str, Any], backward: dict[str, Any] | None = None
) -> dict[str, Any]:
    doc = {"meta": {"model": "M"}, "inputs": {}, "nodes": nodes, "outputs": {}}
    if backward:
        doc["collectives"] = {
            name: {"op": op, "group": "tp", "group_size": 2, "bytes": size, "phase": "backward"}
            for name, (op, size) in backward.items()
        }
    return doc


def _collectives_line(old: dict[str, Any], new: dict[str, Any]) -> str:
    return next(line for line in compare(old, new).lines(0) if "collectives" in line)


def test_the_collectives_line_says_where_in_the_sequence_and_who_issued_it() -> None:
    """The first differing run of collectives is placed in the snapshot's sequence
    (``from the 2nd of 3``) and named by the op node that issued its first one, with
    its module path (the call number dropped), or, at the root, the tensor it was
    given; a ``collectives`` section entry by its key."""
    nodes = {
        "fc1/all_gather#0": _collective("all_gather", 576, "<tensor float32[68]>"),
        "blocks.0@1/all_gather#0": _collective("all_gather", 288, "<tensor float32[36]>"),
    }
    old = _collectives_doc(nodes, {"backward/reduce_scatter#0": ("reduce_scatter", 544)})
    new = copy.deepcopy(old)
    new["nodes"]["blocks.0@1/all_gather#0"]["kwargs"]["bytes"] = 600
    assert _collectives_line(old, new) == (
        "  changed: collectives from the 2nd of 3 (blocks.0@1/all_gather#0, in blocks.0) "
        "all_gather(tp, 288 B) -> all_gather(tp, 600 B)"
    )
    del new["nodes"]["blocks.0@1/all_gather#0"], new["collectives"]
    assert _collectives_line(old, new) == (
        "  changed: collectives from the 2nd of 3 (blocks.0@1/all_gather#0, in blocks.0) "
        "all_gather(tp, 288 B), reduce_scatter(tp, 544 B) -> none"
    )
    new = copy.deepcopy(old)
    del new["nodes"]["fc1/all_gather#0"], new["collectives"]
    assert _collectives_line(old, new) == (
        "  changed: collectives from the 1st of 3 (fc1/all_gather#0, in fc1) "
        "all_gather(tp, 576 B) -> none (and 1 more runs)"
    )
    new = _collectives_doc(nodes, {"backward/reduce_scatter#0": ("reduce_scatter", 64)})
    assert _collectives_line(old, new) == (
        "  changed: collectives from the 3rd of 3 (collectives.backward/reduce_scatter#0) "
        "reduce_scatter(tp, 544 B) -> reduce_scatter(tp, 64 B)"
    )


def test_the_collectives_line_is_followed_by_the_communication_rows_that_differ() -> None:
    """Under the ``collectives`` line, the rows of the per-module communication table
    that differ, the snapshot's (``-``) then this run's (``+``), a module's calls of
    one op and group summed; rows that match are not shown, and past 10 rows the
    rest is counted. Every other line is the one without the table."""
    nodes = {
        "fc1/all_gather#0": _collective("all_gather", 576, "<tensor float32[68]>"),
        "all_reduce#0": _collective("all_reduce", 64, "$fc2/linear#0"),
    }
    old = _collectives_doc(nodes, {"backward/reduce_scatter#0": ("reduce_scatter", 544)})
    old["collectives"]["backward/reduce_scatter#0"]["module"] = "fc1"
    new = copy.deepcopy(old)
    del new["nodes"]["all_reduce#0"]
    new["nodes"] |= {
        f"all_gather#{i}": _collective("all_gather", size, f"$fc{i + 1}/linear#0")
        for i, size in enumerate((128, 64))
    }
    result = compare(old, new)
    lines = result.lines(0)
    at = lines.index(_collectives_line(old, new))
    assert lines[at + 1 : at + 4] == [
        "      module  phase    op          group  calls  bytes",
        "    - (root)  forward  all_reduce  tp         1   64 B",
        "    + (root)  forward  all_gather  tp         2  192 B",
    ]
    without = dataclasses.replace(result, communication=[]).lines(0)
    assert lines[: at + 1] + lines[at + 4 :] == without
    many = {f"m{i}/all_reduce#0": _collective("all_reduce", 64) for i in range(12)}
    more = copy.deepcopy(many)
    for node in list(more.values())[1:]:
        node["kwargs"]["bytes"] = 128
    rows = compare(_collectives_doc(many), _collectives_doc(more)).communication
    assert [r.split()[:2] for r in rows[1:11]] == [
        [sign, f"m{i}"] for i in range(1, 6) for sign in "-+"
    ]
    assert rows[11:] == ["(12 more)"]


def test_an_inserted_collective_is_named_by_this_runs_node() -> None:
    """A collective a parallel style's hook issues runs at the root: the line names
    the tensor it was given; an insertion says where, or that the snapshot has none."""
    reduce = _collective("all_reduce", 64, "$fc2/linear#0")
    gather = _collective("all_gather", 256, "$fc1/linear#0", 0)
    old = _collectives_doc({"all_reduce#0": reduce})
    new = _collectives_doc({"all_gather#0": gather, "all_reduce#0": reduce})
    assert _collectives_line(old, new) == (
        "  changed: collectives before the 1st of 1 (all_gather#0, at the root, on "
        "fc1/linear#0) none -> all_gather(tp, 256 B)"
    )
    new = _collectives_doc({"all_reduce#0": reduce, "all_gather#0": gather})
    assert _collectives_line(old, new).startswith(
        "  changed: collectives after the 1st of 1 (all_gather#0, at the root, on fc1/linear#0) "
    )
    assert _collectives_line(_collectives_doc({}), old) == (
        "  changed: collectives none in the snapshot (all_reduce#0, at the root, on "
        "fc2/linear#0) none -> all_reduce(tp, 64 B)"
    )
    # a long run of one collective (300: difflib's automatic junk heuristic would
    # treat it as junk past 200 entries and report the whole run as replaced)
    long = {f"m{i}/all_reduce#0": _collective("all_reduce", 64) for i in range(300)}
    first = {"all_gather#0": gather} | long
    assert _collectives_line(_collectives_doc(long), _collectives_doc(first)) == (
        "  changed: collectives before the 1st of 300 (all_gather#0, at the root, on "
        "fc1/linear#0) none -> all_gather(tp, 256 B)"
    )
    longer = {name: _collective("all_reduce", 128) for name in long}
    assert _collectives_line(_collectives_doc(long), _collectives_doc(longer)) == (
        "  changed: collectives from the 1st of 300 (m0/all_reduce#0, in m0) "
        + ", ".join(["all_reduce(tp, 64 B)"] * 4)
        + " and 296 more -> "
        + ", ".join(["all_reduce(tp, 128 B)"] * 4)
        + " and 296 more"
    )
