"""What the compiled tests expect where Dynamo differs between torch releases.

The tests assert the meaning (a break is named, at its module; a real model compiles
with no failing divergence); where Dynamo's own wording is the point, the expectation
is kept per release here. docs/compiled.md (*Torch versions*) lists the differences.
"""

from __future__ import annotations

import torch

_MAJOR, _MINOR = torch.__version__.split("+")[0].split(".")[:2]
TORCH = (int(_MAJOR), int(_MINOR))
"""The running torch as ``(major, minor)``."""

SNAPSHOT_TORCH = (2, 13)
"""The torch release the committed compiled snapshots were written with."""

OWN_FORWARD_IF_REASON: dict[tuple[int, int], str] = {(2, 9): "generic_jump TensorVariable()"}
"""Dynamo's reason for ``if tensor:`` in the compiled frame itself, per release;
releases not listed say ``Data-dependent branching``."""


def own_forward_if_reason() -> str:
    """What the break reason of a data-dependent ``if`` in the model's own forward
    contains on the running torch."""
    return OWN_FORWARD_IF_REASON.get(TORCH, "Data-dependent branching")


STOCK_BREAKS: dict[tuple[int, int], dict[str, str]] = {
    (2, 9): {"bart": "copy.deepcopy()"},
}
"""Graph breaks Dynamo takes in a stock transformers model on some releases only, per
release: model name -> what the break reason contains. On torch 2.9, Dynamo does not
trace ``copy.deepcopy`` (BART's decoder deep-copies its ``EncoderDecoderCache``)."""


def stock_break(name: str) -> str | None:
    """The break the stock model ``name`` takes on the running torch, or None."""
    return STOCK_BREAKS.get(TORCH, {}).get(name)
