"""Granularity: blackbox modules, depth, the module-level view, and comparing
snapshots taken at different granularities."""

from __future__ import annotations

import models
import pytest
import real_models
import torch
from torch import nn
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

from pytest_graphir import trace
from pytest_graphir.compare import compare
from pytest_graphir.serialize import dumps, loads


def test_blackbox_class_hides_everything_inside() -> None:
    model, ids = real_models.gpt2()
    graph = trace(model, ids, blackbox=[GPT2Attention])
    names = [n.name for n in graph.nodes]
    for layer in (0, 1):
        attn = f"transformer.h.{layer}.attn"
        assert attn in names
        assert not [n for n in names if n.startswith((attn + ".", attn + "/", attn + "@"))]
        node = graph.node(attn)
        assert node.kind == "module" and node.target == "GPT2Attention"
        # the blackbox's output carries statistics, like an op's
        assert node.outputs[0].stats["std"] > 0
        # the residual add reads the blackbox's output
        assert f"${attn}" in graph.node(f"transformer.h.{layer}/add#0").args
    assert graph.meta["blackbox"] == ["GPT2Attention"]
    full = trace(model, ids)
    outside = [n.name for n in full.nodes if ".attn" not in n.name]
    assert [n for n in names if ".attn" not in n] == outside


def test_blackbox_path_and_unknown_path() -> None:
    model, ids = real_models.bert()
    graph = trace(model, ids, blackbox=["encoder.layer.0.attention"])
    names = [n.name for n in graph.nodes]
    assert "encoder.layer.0.attention" in names
    assert not [n for n in names if n.startswith("encoder.layer.0.attention.")]
    assert [n for n in names if n.startswith("encoder.layer.1.attention.")]  # only layer 0
    with pytest.raises(ValueError, match=r"no module 'encoder\.layer\.9'"):
        trace(model, ids, blackbox=["encoder.layer.9"])


def _levels(path: str) -> int:
    return path.split("@", 1)[0].count(".") + 1 if path else 0


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_depth_collapses_deeper_modules(depth: int) -> None:
    torch.manual_seed(0)
    model, (ids,) = models.tiny_transformer()
    graph = trace(model, ids, depth=depth)
    names = [n.name for n in graph.nodes]
    ops = [n for n in graph.nodes if n.kind == "op"]
    boxes = [n for n in graph.nodes if n.kind == "module" and _levels(n.name) >= depth]
    assert boxes
    for box in boxes:  # a box: nothing inside, and its outputs carry statistics
        assert not [
            n for n in names if n != box.name and n.startswith((box.name + ".", box.name + "/"))
        ]
        assert "std" in box.outputs[0].stats
    for op in ops:  # ops only in scopes shallower than depth
        assert _levels(op.name.split("/", 1)[0] if "/" in op.name else "") < depth, op.name
    expected_boxes = {
        1: {"embed", "blocks.0", "blocks.1", "shared", "shared@1", "head"},
        2: {
            "blocks.0",
            "blocks.1",  # level 2 themselves
            "shared.norm",
            "shared.proj",
            "shared.norm@1",
            "shared.proj@1",
        },
        3: set(),
    }
    if depth < 3:
        assert {b.name for b in boxes} == expected_boxes[depth]
    with pytest.raises(ValueError, match="depth must be an int >= 1"):
        trace(model, ids, depth=0)


def test_module_view() -> None:
    model, ids = real_models.bert()
    graph = trace(model, ids, view="modules")
    assert all(n.kind == "module" for n in graph.nodes)
    called = {name for name, _ in model.named_modules() if name}
    assert {n.name for n in graph.nodes} <= called
    for node in graph.nodes:
        assert node.params == sum(p.numel() for p in model.get_submodule(node.name).parameters())
    assert graph.meta["view"] == "modules" and graph.meta["stats"] is False
    with pytest.raises(ValueError, match="view='layers'"):
        trace(model, ids, view="layers")  # type: ignore[arg-type]


def test_other_granularity_is_one_clear_change() -> None:
    torch.manual_seed(0)
    model, (ids,) = models.tiny_transformer()
    full = loads(dumps(trace(model, ids)))
    for options in ({"depth": 1}, {"blackbox": ["blocks.0"]}, {"view": "modules"}):
        result = compare(full, loads(dumps(trace(model, ids, **options))))
        assert len(result.changes) == 1
        assert result.changes[0].where == "granularity"
        assert "another granularity" in result.changes[0].detail
        assert not compare(
            loads(dumps(trace(model, ids, **options))), loads(dumps(trace(model, ids, **options)))
        )


def test_blackbox_interior_absent_from_hooks_and_backward() -> None:
    torch.manual_seed(0)
    model = nn.Sequential()
    model.block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    model.head = nn.Linear(4, 2)
    model.block[0].register_forward_hook(lambda m, a, o: None)
    graph = trace(model, torch.randn(3, 4), hooks=True, backward=True, blackbox=["block"])
    assert not [e for e in graph.sections["hooks"] if e.startswith("block.")]
    assert not [k for k in graph.sections["backward"] if k.startswith("block.")]
    assert "block forward_pre" in graph.sections["hooks"]
