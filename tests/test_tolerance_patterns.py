"""Per-node tolerance patterns and ignored nodes, in ``compare()`` and in the
``@pytest.mark.graphir`` marker (``tolerances=``, ``ignore=``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from helpers import float_out
from workflow import run

from pytest_graphir.compare import PatternError, Tolerance, compare


def _doc() -> dict[str, Any]:
    chain = [("body/linear#0", "linear", "$x"),
             ("body.dropout/dropout#0", "dropout", "$body/linear#0"),
             ("lm_head/linear#0", "linear", "$body.dropout/dropout#0")]  # fmt: skip
    return {
        "meta": {"model": "M"},
        "inputs": {"x": {"shape": [4], "dtype": "float32"}},
        "nodes": {name: {"op": op, "args": [arg], "out": [float_out()]} for name, op, arg in chain},
        "outputs": {},
    }


def test_pattern_tolerance_applies_to_matching_nodes_only() -> None:
    a = _doc()
    b = copy.deepcopy(a)
    for name in ("body/linear#0", "lm_head/linear#0"):
        b["nodes"][name]["out"][0]["mean"] = 0.52  # 0.02 off: beyond 1e-3 * 3
    result = compare(a, b, tolerances={"lm_head/*": {"rtol": 1e-2}})
    assert [c.node for c in result.changes] == ["body/linear#0"]
    drift = result.changes[0]
    assert drift.tolerance == pytest.approx(1e-5 + 1e-3 * 3)
    assert "own tolerance for 1 node pattern" in result.summary()
    # the first matching pattern wins; atol left out keeps the base atol
    tol = Tolerance.build(tolerances={"lm_head/*": {"rtol": 0.5}, "*": {"rtol": 0.0}})
    assert tol.for_node("lm_head/linear#0") == Tolerance(0.5, 1e-5)
    assert tol.for_node("body/linear#0") == Tolerance(0.0, 1e-5)
    assert compare(a, b, tol).counts()["drift"] == 1


def test_ignored_nodes_are_not_compared_on_either_side() -> None:
    a = _doc()
    b = copy.deepcopy(a)
    b["nodes"]["body.dropout/dropout#0"]["out"][0]["mean"] = 9.0
    del a["nodes"]["lm_head/linear#0"]
    assert {c.node for c in compare(a, b).changes} == {
        "body.dropout/dropout#0",
        "lm_head/linear#0",
    }
    result = compare(a, b, ignore=["*.dropout/*", "lm_head/*"])
    assert not result
    assert result.ignored == ["body.dropout/dropout#0", "lm_head/linear#0"]
    assert "2 nodes ignored" in result.summary()


@pytest.mark.parametrize(
    "tolerances, ignore, message",
    [
        ({"lm_head/*": {"rtl": 1e-2}}, None, "unknown key(s) rtl; valid: rtol, atol"),
        ({"lm_head/*": 1e-2}, None, "expected a node-name pattern (str) mapped to"),
        ({"lm_head/*": {"rtol": -1}}, None, "['rtol']=-1: expected a number from 0 to 1"),
        ({"lm_head/*": {"atol": float("inf")}}, None, "['atol']=inf: expected a number from"),
        ({"lm_head/*": {"rtol": 1e999}}, None, "['rtol']=inf: expected a number from 0 to 1"),
        ({"lm_head/*": {"rtol": float("nan")}}, None, "['rtol']=nan: expected a number from"),
        ({"lm_head/*": {"rtol": 1e300}}, None, "['rtol']=1e+300: expected a number from 0"),
        ({"lm_head/*": {"atol": "1e-2"}}, None, "['atol']='1e-2': expected a number from 0"),
        (["lm_head/*"], None, "expected a mapping of node-name pattern"),
        (None, [3], "ignore=[3]: expected a node-name pattern (str) or a list of them"),
        (None, 123, "ignore=123: expected a node-name pattern (str) or a list of them"),
    ],
)
def test_malformed_patterns_are_named(tolerances: Any, ignore: Any, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        compare(_doc(), _doc(), tolerances=tolerances, ignore=ignore)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    "value", [float("inf"), 1e999, float("nan"), -1, "loose", True, "1e9", "0.1", 1e300, 1.5]
)
def test_tolerance_that_is_no_number_or_switches_the_check_off_is_refused(value: Any) -> None:
    """``inf`` or ``1e300`` would pass every drift, a str is no number: refused naming
    the argument and the range, however the tolerance is built."""
    for key in ("rtol", "atol"):
        for build in (Tolerance.build, Tolerance):
            with pytest.raises(ValueError) as info:
                build(**{key: value})
            assert str(info.value) == f"{key}={value!r}: expected a number from 0 to 1"
        with pytest.raises(ValueError, match=r"\['lm_head/\*'\]\[.*expected a number from 0 to 1$"):
            compare(_doc(), _doc(), tolerances={"lm_head/*": {key: value}})
    assert Tolerance(rtol=1, atol=1) == Tolerance.build(rtol=1.0, atol=1.0)  # the bounds pass


@pytest.mark.parametrize(
    "tolerances, ignore, message",
    [
        ({"haed/*": {"rtol": 1e-2}}, None, "tolerances pattern 'haed/*' matches no node"),
        (None, ["*.droput/*"], "ignore pattern '*.droput/*' matches no node"),
        (None, ["*", "lm_head/*"], "ignore pattern 'lm_head/*'"),
    ],
)
def test_pattern_that_matches_no_node_is_refused_with_the_nearest(
    tolerances: Any, ignore: Any, message: str
) -> None:
    doc = _doc()
    doc["nodes"] = {n.replace("lm_head", "head"): v for n, v in doc["nodes"].items()}
    with pytest.raises(PatternError) as raised:
        compare(doc, copy.deepcopy(doc), tolerances=tolerances, ignore=ignore)
    text = str(raised.value)
    assert text.startswith(message), text
    nearest = {"haed/*": "head/*", "*.droput/*": "*.dropout/*", "lm_head/*": "head/*"}
    pattern = message.split("'")[1]
    assert f"nearest: {nearest[pattern]}" in text, text


@pytest.mark.parametrize("ignore", [["*"], ["body*", "lm_head*"], ["*linear#0", "*dropout*"], "*"])
def test_ignoring_every_node_is_refused(ignore: Any) -> None:
    """Else a ReLU -> GELU swap or any weight change passes with no output."""
    a = _doc()
    b = copy.deepcopy(a)
    b["nodes"]["body/linear#0"]["op"] = "gelu"
    with pytest.raises(PatternError, match="matches every node: nothing would be compared"):
        compare(a, b, ignore=ignore)


def test_header_counts_the_patterns_that_matched() -> None:
    a = _doc()
    b = copy.deepcopy(a)
    b["nodes"]["body/linear#0"]["out"][0]["mean"] = 0.52
    both = {"lm_head/*": {"rtol": 1e-2}, "body/*": {"atol": 1e-5}}
    assert "own tolerance for 2 node patterns" in compare(a, b, tolerances=both).summary()
    with pytest.raises(PatternError, match="'haed/\\*' matches no node"):
        compare(a, b, tolerances={**both, "haed/*": {"rtol": 1e-2}})


TEST_MARKED = """
import os
import models
import pytest
from pytest_graphir import trace

@pytest.mark.graphir(MARKER)
def test_mlp(graphir_snapshot):
    model, inputs = models.mlp()
    noise = float(os.environ.get("NOISE", "0"))
    if noise:
        import torch
        with torch.no_grad():
            model.fc2.weight.mul_(1 + noise)
    assert trace(model, *inputs) == graphir_snapshot
"""


@pytest.mark.parametrize(
    "marker, passes",
    [
        ("", False),
        ('tolerances={"fc2*": {"rtol": 0.5}}', True),  # fc2's ops, and fc2.weight where
        ('ignore=["fc2*"]', True),  # the snapshot records parameters
        ('tolerances={"fc1*": {"rtol": 0.5}}', False),
    ],
)
def test_marker_tolerances_and_ignore(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, marker: str, passes: bool
) -> None:
    """fc2's weight scaled by 5%: only fc2's nodes drift (its output is the model's)."""
    p = graphir_project
    p.makepyfile(test_mlp=TEST_MARKED.replace("MARKER", marker))
    run(p, "--graphir-update").assert_outcomes(passed=1)
    monkeypatch.setenv("NOISE", "5e-2")
    result = run(p)
    if passes:
        result.assert_outcomes(passed=1)
    else:
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines(["*fc2: 4 values in 1 node drift downstream of params.fc2*"])


def test_marker_with_a_malformed_pattern_is_a_usage_error(
    graphir_project: pytest.Pytester,
) -> None:
    p = graphir_project
    p.makepyfile(test_mlp=TEST_MARKED.replace("MARKER", 'tolerances={"fc2/*": {"rtoll": 1}}'))
    result = run(p, "--graphir-update")
    result.assert_outcomes(errors=1)
    out = result.stdout.str()
    assert (
        "graphir: @pytest.mark.graphir on test_mlp.py::test_mlp: tolerances['fc2/*']: "
        "unknown key(s) rtoll; valid: rtol, atol"
    ) in out
    assert "pytest_graphir" not in out and "Traceback" not in out, out  # no plugin frames


TEST_PATTERNS = """
import os
import models
import pytest
from pytest_graphir import trace

def mark(**patterns):
    return pytest.mark.graphir(**patterns if os.environ.get("PATTERNS") != "off" else {})

def check(graphir_snapshot):
    model, inputs = models.mlp(act=os.environ.get("ACT", "relu"))
    if os.environ.get("ACT"):
        import torch
        with torch.no_grad():
            model.fc1.weight.mul_(2)
    assert trace(model, *inputs) == graphir_snapshot

@mark(ignore=["*"])
def test_all(graphir_snapshot):
    check(graphir_snapshot)

@mark(ignore=["fc1*", "act*", "fc2*"])
def test_cover(graphir_snapshot):
    check(graphir_snapshot)

@mark(tolerances={"fcc2/*": {"rtol": 0.5}})
def test_tolerance_typo(graphir_snapshot):
    check(graphir_snapshot)

@mark(ignore=["*.actt/*"])
def test_ignore_typo(graphir_snapshot):
    check(graphir_snapshot)
"""


def test_patterns_that_switch_the_gate_off_fail_the_test(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ignoring every node, or a pattern that matches nothing, fails naming it, with
    no traceback, and writes nothing: on a snapshot's first write, and against stored
    snapshots after a ReLU -> GELU swap with a doubled weight."""
    p = graphir_project
    p.makepyfile(test_mlp=TEST_PATTERNS)

    def refused(result: pytest.RunResult) -> None:
        result.assert_outcomes(failed=4)
        out = result.stdout.str()
        for line in (
            "graphir: @pytest.mark.graphir on test_mlp.py::test_all: ignore=['*'] "
            "matches every node: nothing would be compared",
            "test_cover: ignore=['fc1*', 'act*', 'fc2*'] matches every node",
            "test_tolerance_typo: tolerances pattern 'fcc2/*' matches no node or "
            "parameter name; nearest: fc2/*, ",
            "test_ignore_typo: ignore pattern '*.actt/*' matches no node or parameter "
            "name; nearest: *.act/*, ",
        ):
            assert line in out, out
        assert "pytest_graphir" not in out and "Traceback" not in out, out

    refused(run(p, "--graphir-update"))  # the first write
    assert not list(p.path.rglob("*.graphir"))
    monkeypatch.setenv("PATTERNS", "off")  # the snapshots the patterns then meet
    run(p, "--graphir-update").assert_outcomes(passed=4)
    monkeypatch.delenv("PATTERNS")
    monkeypatch.setenv("ACT", "gelu")
    for args in ((), ("--graphir-update",)):
        refused(run(p, *args))
    assert "gelu" not in "".join(f.read_text() for f in p.path.rglob("*.graphir"))


def test_patterns_match_parameter_names_too() -> None:
    """Where a snapshot records parameters, ``fc2*`` also covers ``fc2.weight``."""
    a = _doc()
    a["params"] = {"lm_head.weight": {"shape": [4], "dtype": "float32", "mean": 0.5,
                                      "std": 1.0, "min": -3.0, "max": 3.0}}  # fmt: skip
    b = copy.deepcopy(a)
    b["params"]["lm_head.weight"]["mean"] = 0.52
    ignored = compare(a, b, ignore=["lm_head*"])
    assert "lm_head.weight" in ignored.ignored and not ignored
