"""Tests of ``GraphIR.lint``: well-formed traces pass, each kind of damage is named."""

from __future__ import annotations

import copy

import models
import pytest
import torch

from pytest_graphir import GraphIR, trace
from pytest_graphir.ir import IRLintError, Node, TensorMeta


def _graph() -> tuple[GraphIR, set[str]]:
    torch.manual_seed(0)
    model, (x,) = models.tiny_transformer()
    names = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    names |= {n for n, _ in model.named_buffers(remove_duplicate=False)}
    return trace(model, x, hooks=True), names


def test_a_trace_of_the_bundled_transformer_is_well_formed() -> None:
    graph, names = _graph()
    assert graph.lint_problems(names) == []
    graph.lint(names)  # does not raise


def _first_op(graph: GraphIR, with_ref: bool = True) -> Node:
    return next(
        n
        for n in graph.nodes
        if n.kind == "op"
        and (not with_ref or any(isinstance(a, str) and a.startswith("$") for a in n.args))
    )


def test_each_kind_of_damage_is_named() -> None:
    graph, names = _graph()
    cases: list[tuple[str, GraphIR, str]] = []

    g = copy.deepcopy(graph)
    g.nodes.append(copy.deepcopy(g.nodes[-1]))
    cases.append(("duplicate", g, "name used twice"))

    g = copy.deepcopy(graph)
    op = _first_op(g)
    op.args = ["$nowhere/add#7", *op.args[1:]]
    cases.append(("unknown node", g, "$nowhere/add#7 names no node"))

    g = copy.deepcopy(graph)
    op = _first_op(g)
    op.args = [f"${g.nodes[-1].name}", *op.args[1:]]
    cases.append(("later node", g, "which runs later"))

    g = copy.deepcopy(graph)
    op = _first_op(g)
    op.args = ["$not_a_parameter.weight"]
    cases.append(("unknown parameter", g, "names no input, node, parameter or buffer"))

    g = copy.deepcopy(graph)
    producer = _first_op(g, with_ref=False)
    consumer = next(n for n in g.nodes[g.nodes.index(producer) + 1 :] if n.kind == "op")
    consumer.args = [f"${producer.name}[3]"]
    cases.append(("index", g, "has no output 3"))

    g = copy.deepcopy(graph)
    op = _first_op(g)
    op.target = "something_else"
    cases.append(("target", g, "op 'something_else' under the name of"))

    g = copy.deepcopy(graph)
    g.nodes.insert(0, Node("ghost/relu#0", "op", "relu", outputs=[TensorMeta([1], "float32")]))
    cases.append(("scope", g, "scope ghost is no earlier module call"))

    g = copy.deepcopy(graph)
    g.sections["hooks"] = ["just-one-word"]
    cases.append(("hooks", g, "is not '<module> <kind>[ <hook>]'"))

    g = copy.deepcopy(graph)
    g.sections["grads"] = ["not", "a", "mapping"]
    cases.append(("grads", g, "section grads: not a mapping"))

    for label, damaged, expected in cases:
        problems = damaged.lint_problems(names)
        assert any(expected in p for p in problems), (label, problems)
        with pytest.raises(IRLintError, match="problem"):
            damaged.lint(names)


def test_without_parameter_names_only_node_references_are_checked() -> None:
    graph, _ = _graph()
    op = _first_op(graph)
    op.args = ["$not_a_parameter.weight"]
    assert graph.lint_problems() == []
