"""The traced backward pass: loss, per-module and per-parameter gradients, autograd graph.

Gradients come from ``torch.autograd.grad`` rather than ``Tensor.backward``, so no
``.grad`` of the user's parameters or inputs is touched. Per-module gradients come
from the global full backward hook (:class:`~pytest_graphir.capture.hooks.HookRecorder`),
which PyTorch calls with ``grad_input`` and ``grad_output`` of each module call.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from .leaves import flatten

FROZEN = "frozen"
"""``grads`` entry of a parameter with ``requires_grad=False``."""
UNUSED = "no gradient"
"""``grads`` entry of a trainable parameter the loss does not depend on."""

_HOOK_ARTIFACTS = frozenset({"BackwardHookFunctionBackward"})
"""grad_fn types added by PyTorch's full backward hook machinery, not by the model."""


def default_loss(output: Any) -> tuple[torch.Tensor, str]:
    """Return ``(sum of the first floating output that requires grad, description)``.

    Raises:
        ValueError: no floating output tensor requires grad.
    """
    for path, leaf in flatten(output, ""):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.requires_grad:
            return leaf.sum(), f"sum({path or 'output'})"
    raise ValueError(
        "trace(backward=True) found no floating-point output that requires grad; pass "
        "backward=<callable(output) -> scalar tensor> to choose the loss"
    )


def make_loss(output: Any, backward: bool | Callable[[Any], Any]) -> tuple[torch.Tensor, str]:
    """Return the scalar to differentiate and how it is described in ``meta.backward``.

    Raises:
        RuntimeError: grad mode is off (the forward ran under ``torch.no_grad()``).
        ValueError: no usable output, or the callable did not return a scalar tensor
            that requires grad.
    """
    if not torch.is_grad_enabled():
        raise RuntimeError(
            "trace(backward=True) needs grad mode, but it is off: call trace outside "
            "torch.no_grad() / torch.inference_mode()"
        )
    with torch._C.DisableTorchFunction():
        if not callable(backward):
            return default_loss(output)
        loss = backward(output)
        name = getattr(backward, "__qualname__", type(backward).__qualname__)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.requires_grad:
        raise ValueError(
            f"trace(backward={name}) must return a one-element tensor that requires "
            f"grad, got {type(loss).__name__}"
            + (f" of shape {list(loss.shape)}, requires_grad={loss.requires_grad}"
               if isinstance(loss, torch.Tensor) else "")
        )
    return loss, name


def autograd_types(loss: torch.Tensor) -> list[str]:
    """Return the ``grad_fn`` type names reachable from ``loss``, depth-first preorder.

    Follows ``next_functions`` in order, each node once, so the list is
    deterministic. The full backward hook's own ``BackwardHookFunctionBackward``
    nodes are left out: they come from the recorder, not the model.
    """
    out: list[str] = []
    seen: set[int] = set()
    stack: list[Any] = [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        name = type(fn).__name__
        if name not in _HOOK_ARTIFACTS:
            out.append(name)
        stack.extend(reversed([nxt for nxt, _ in fn.next_functions]))
    return out


def gradients(loss: torch.Tensor, model: torch.nn.Module, inputs: list[torch.Tensor]
              ) -> tuple[list[tuple[str, torch.nn.Parameter]], list[Any]]:
    """Differentiate ``loss`` w.r.t. the trainable parameters (and inputs that require
    grad, which keep module backward hooks firing when every parameter is frozen).

    Returns:
        ``(named parameters, gradients)``: every named parameter, and for each either
        its gradient tensor, :data:`FROZEN` or :data:`UNUSED`.
    """
    named = list(model.named_parameters())
    trainable = [p for _, p in named if p.requires_grad]
    extra = [t for t in inputs if t.requires_grad]
    targets = trainable + extra
    grads: tuple[Any, ...] = ()
    with warnings.catch_warnings():
        # PyTorch warns when a full backward hook fires on a module none of whose
        # inputs require grad (the embedding of integer ids): expected here.
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        if targets:
            grads = torch.autograd.grad(loss, targets, allow_unused=True)
    by_param = {id(p): g for p, g in zip(trainable, grads[:len(trainable)], strict=True)}
    result: list[Any] = []
    for _, p in named:
        if not p.requires_grad:
            result.append(FROZEN)
        else:
            g = by_param.get(id(p))
            result.append(UNUSED if g is None else g)
    return named, result
