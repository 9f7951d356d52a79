"""One backward pass, eager or compiled: the loss, the hook events and the gradients.

``compare_compiled(..., backward=True)`` runs a backward on the eager and on the
compiled model, from the same parameters and buffers (:mod:`.state`), and compares
the backward pre-hooks and full backward hooks that fired (per module, in order)
and each parameter's gradient. PyTorch's notes on ``nn.Module`` hooks under
``torch.compile`` (``torch/_dynamo`` docs, "Hooks"): a compiled graph runs as one
autograd function whose backward produces all its gradients at once, so backward
hooks of a series of modules inside one graph fire together after it, and the order
may differ from eager.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..leaves import flatten


def default_loss(output: Any) -> torch.Tensor:
    """Sum of every floating output tensor that requires grad (``.sum()`` each).

    Raises:
        ValueError: no output tensor requires grad (the model ran under
            ``torch.no_grad()``, or its parameters are frozen): pass ``loss_fn``.
    """
    parts = [
        leaf.float().sum()
        for _, leaf in flatten(output, "")
        if isinstance(leaf, torch.Tensor)
        and leaf.requires_grad
        and (leaf.is_floating_point() or leaf.is_complex())
    ]
    if not parts:
        raise ValueError(
            "compare_compiled(backward=True): no model output requires grad, so "
            "there is nothing to run backward on; enable grad and trainable "
            "parameters, or pass loss_fn=lambda out: ... returning a scalar"
        )
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


@dataclass
class BackwardResult:
    """What one backward gave.

    Attributes:
        grads: parameter name -> gradient (detached clone), None where none arrived.
    """

    grads: dict[str, torch.Tensor | None] = field(default_factory=dict)


def run_backward(
    model: torch.nn.Module, output: Any, loss_fn: Callable[[Any], torch.Tensor] | None
) -> BackwardResult:
    """Run ``loss_fn(output).backward()`` and collect the parameters' gradients.

    Gradients are cleared first (set to None) and left in place afterwards.
    """
    for p in model.parameters():
        p.grad = None
    loss = (loss_fn or default_loss)(output)
    loss.backward()  # type: ignore[no-untyped-call]
    return BackwardResult(
        {
            name: None if p.grad is None else p.grad.detach().clone()
            for name, p in model.named_parameters()
        }
    )
