"""Changes to models built of repeated blocks read as the change: a block inserted or
removed with the later blocks' weights moved along, a module renamed with its weights,
and one change repeated in every block folded into one line."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from helpers import snapshot_doc
from report_helpers import llama_model
from torch import nn

from pytest_graphir import init_by_name
from pytest_graphir.compare import compare

transformers = pytest.importorskip("transformers")

IDS = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))


def llama(layers: int) -> nn.Module:
    """A tiny random ``LlamaForCausalLM`` (hidden 32) with ``layers`` decoder layers,
    its weights as construction drew them (a checkpoint's stand-in)."""
    return llama_model(layers, init=False)  # type: ignore[no-any-return]


def with_layer_inserted(model: nn.Module, at: int) -> nn.Module:
    """A Llama one layer deeper holding ``model``'s weights, a fresh layer at ``at``:
    ``model``'s state_dict loaded with the keys of layers ``at`` and later renumbered
    up by one, as a checkpoint is ported."""
    bigger = llama(len(model.model.layers) + 1)  # type: ignore[arg-type]
    state = dict(bigger.state_dict())
    for key, value in model.state_dict().items():
        parts = key.split(".")
        if key.startswith("model.layers.") and int(parts[2]) >= at:
            parts[2] = str(int(parts[2]) + 1)
        state[".".join(parts)] = value
    bigger.load_state_dict(state)
    return bigger


def lines(stored: dict[str, Any], received: dict[str, Any]) -> list[str]:
    """The failure message's change lines, unindented, without the summary line."""
    return [line.strip() for line in compare(stored, received).lines(0)[1:]]


@pytest.fixture(scope="module")
def eight_and_nine() -> tuple[dict[str, Any], dict[str, Any]]:
    """An 8-layer Llama's document and that of the 9-layer one with a layer inserted
    at index 4 (the 8 layers' weights kept, moved along)."""
    model = llama(8)
    return snapshot_doc(model, IDS), snapshot_doc(with_layer_inserted(model, 4), IDS)


def test_inserted_layer_is_named_and_later_layers_renumbered(
    eight_and_nine: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """The inserted layer is named first, the later layers renumbered with their
    weights; no layer reads as added at the end and no weights as differing."""
    got = lines(*eight_and_nine)
    assert got[0] == (
        "inserted: model.layers.4 (LlamaDecoderLayer); "
        "model.layers.4-7 renumbered to 5-8, weights unchanged"
    ), got
    assert not [line for line in got if line.startswith("added:")], got
    assert not [line for line in got if "weights differ" in line], got
    assert "model.layers.5-8: " in got[1] and got[1].endswith("downstream of model.layers.4")


def test_removed_layer_is_named_and_later_layers_renumbered(
    eight_and_nine: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    """The same change read backwards: the removed layer, the later layers renumbered
    down, and the drift after it downstream of the removed layer."""
    nine, eight = eight_and_nine[1], eight_and_nine[0]
    got = lines(nine, eight)
    assert got[0] == (
        "removed: model.layers.4 (LlamaDecoderLayer); "
        "model.layers.5-8 renumbered to 4-7, weights unchanged"
    ), got
    assert got[1].startswith("model.layers.4-7: ") and got[1].endswith("of model.layers.4")


@pytest.mark.slow
def test_layer_inserted_in_a_deep_llama_is_named_first() -> None:
    """A 40-layer Llama with a layer inserted at index 20, the later layers' weights
    moved up by one: the insertion and the renumbering are named within the message's
    first 3 lines; no layer reads as added at the end and no weights as differing."""
    model = llama(40)
    stored = snapshot_doc(model, IDS)
    message = [
        line.strip()
        for line in compare(stored, snapshot_doc(with_layer_inserted(model, 20), IDS)).lines(0)
    ]
    assert (
        "inserted: model.layers.20 (LlamaDecoderLayer); "
        "model.layers.20-39 renumbered to 21-40, weights unchanged"
    ) in message[:3], message
    assert not [line for line in message if line.startswith("added:")], message
    assert not [line for line in message if "weights differ" in line], message


class Head(nn.Module):
    """A body and a head registered under ``name``."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.name = name
        self.add_module(name, nn.Linear(8, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        head: nn.Module = getattr(self, self.name)
        out: torch.Tensor = head(torch.relu(self.body(x)))
        return out


def test_renamed_module_with_its_weights_is_one_line() -> None:
    """A module renamed with its weights (old checkpoints no longer load) is one line,
    with hooks recorded too."""
    torch.manual_seed(0)
    old, new = Head("head").eval(), Head("out_proj").eval()
    new.load_state_dict({k.replace("head.", "out_proj."): v for k, v in old.state_dict().items()})
    x = torch.ones(2, 4)
    for hooks in (False, True):
        got = lines(snapshot_doc(old, x, hooks=hooks), snapshot_doc(new, x, hooks=hooks))
        assert got == ["renamed: head -> out_proj; state_dict keys head.* -> out_proj.*"]


def test_init_by_name_hint_only_when_most_weights_moved() -> None:
    """A model built with init_by_name, a layer added and one weight changed: the
    weights line does not tell it to use init_by_name."""

    def mlp(layers: int) -> nn.Sequential:
        return init_by_name(nn.Sequential(*[nn.Linear(4, 4) for _ in range(layers)]).eval())

    x = torch.ones(1, 4)
    stored = snapshot_doc(mlp(3), x)
    model = mlp(4)
    with torch.no_grad():
        model[1].weight.mul_(2)
    weights = [line for line in lines(stored, snapshot_doc(model, x)) if "weights" in line]
    assert weights == [
        "drift: weights differ: 1 of 6 parameters (1.weight): "
        "the weights were loaded, seeded or initialised differently"
    ]


# -- one change repeated in every block: one line ------------------------------------


def test_bfloat16_reads_as_one_dtype_change() -> None:
    """A 12-layer Llama switched to bfloat16: the dtype line first, the residual reads
    each layer's norm no longer aliases folded into one line each naming the range of
    all 12 layers, no layer's copy of them left; the message fits in 10 lines."""
    model = llama(12)
    stored = snapshot_doc(model, IDS)
    message = compare(stored, snapshot_doc(model.to(torch.bfloat16), IDS)).lines(0)
    assert len(message) <= 10, message
    assert message[1].startswith("  changed: out[*].dtype float32 -> bfloat16 (in "), message
    folded = [line for line in message if line.endswith("(in each of model.layers.0-11)")]
    assert len(folded) == 2, message
    assert [line.split(" args[0] ")[0] for line in folded] == [
        "  changed: model.layers.0/add#0",
        "  changed: model.layers.0/add#1",
    ], message
    per_layer = [line for line in message if re.search(r"model\.layers\.\d+/add#", line)]
    assert per_layer == folded, message


class Block(nn.Module):
    """Linear, then norm and activation in the order ``swapped`` says, residual."""

    def __init__(self, swapped: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.ReLU()
        self.norm = nn.LayerNorm(8)
        self.swapped = swapped

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        h = self.norm(self.act(h)) if self.swapped else self.act(self.norm(h))
        return x + h


class Blocks(nn.Module):
    """Four :class:`Block` in a ``ModuleList``."""

    def __init__(self, swapped: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(swapped) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def test_ops_swapped_in_a_repeated_block_read_as_one_reorder() -> None:
    """Two ops swapped in a block used four times: ``reordered:`` first, once for the
    four blocks, the hook order it implies not restated; 10 lines at most."""
    torch.manual_seed(0)
    old = Blocks(False).eval()
    new = Blocks(True).eval()
    new.load_state_dict(old.state_dict())
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    result = compare(snapshot_doc(old, x, hooks=True), snapshot_doc(new, x, hooks=True))
    message = result.lines(0)
    assert len(message) <= 10, message
    assert message[1] == (
        "  reordered: blocks.0.act and 1 node after it runs after blocks.0.fc/linear#0 "
        "(was after blocks.0.norm/layer_norm#0) (in each of blocks.0-3)"
    ), message
    assert [c.kind for c in result.changes].count("reordered") == 1
    assert not [c for c in result.changes if c.section == "hooks"], message
