"""Compiled outputs and gradients against eager ones, leaf by leaf; the backward pass.

:func:`compare_outputs` walks both outputs as the trace does (tuples, lists,
mappings), and through the attributes of objects that hold tensors (a transformers
``DynamicCache``); floating tensors are compared with the
:class:`~pytest_graphir.compare.Tolerance` rule, everything else exactly.
:func:`compare_grads` applies the same rules to each parameter's gradient, from
:func:`run_backward`.

``compare_compiled(..., backward=True)`` runs a backward on the eager and on the
compiled model from the same parameters and buffers (:mod:`.numerics`). PyTorch's
notes on ``nn.Module`` hooks under ``torch.compile`` (``torch/_dynamo`` docs,
"Hooks"): a compiled graph runs as one autograd function whose backward produces all
its gradients at once, so backward hooks of a series of modules inside one graph fire
together after it, and the order may differ from eager.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.nn.parameter import is_lazy

from ..capture.stats.kinds import reference_stats
from ..compare import Tolerance
from ..leaves import flatten
from .compiled_report import NumericDiff

_PLAIN = (torch.Tensor, type(None), bool, int, float, complex, str, bytes)

MAX_OBJECT_DEPTH = 4
"""How many levels of output objects' attributes :func:`compare_outputs` walks."""

Grads = dict[str, torch.Tensor | None]
"""Parameter name -> gradient (a detached clone), None where none arrived."""


def grad_outputs(output: Any) -> list[torch.Tensor]:
    """The tensors of ``output`` (:func:`~pytest_graphir.leaves.flatten` order) that
    require grad; only floating and complex tensors can."""
    return [t for _, t in flatten(output, "") if isinstance(t, torch.Tensor) and t.requires_grad]


def default_loss(output: Any) -> torch.Tensor:
    """Sum of every output tensor that requires grad (``.float().sum()`` each).

    Raises:
        ValueError: no output tensor requires grad (the model ran under
            ``torch.no_grad()``, or its parameters are frozen): pass ``loss_fn``.
    """
    parts = [t.float().sum() for t in grad_outputs(output)]
    if not parts:
        raise ValueError(
            "compare_compiled(backward=True): no model output requires grad, so "
            "there is nothing to run backward on; enable grad and trainable "
            "parameters, or pass loss_fn=lambda out: ... returning a scalar"
        )
    return sum(parts[1:], parts[0])


def run_backward(
    model: torch.nn.Module, output: Any, loss_fn: Callable[[Any], torch.Tensor] | None
) -> Grads:
    """Run ``loss_fn(output).backward()`` and return the parameters' gradients.

    Gradients are cleared first (set to None) and left in place afterwards.
    """
    model.zero_grad(set_to_none=True)
    (loss_fn or default_loss)(output).backward()  # type: ignore[no-untyped-call]
    return {
        name: None if p.grad is None else p.grad.detach().clone()
        for name, p in model.named_parameters()
    }


def _leaves(value: Any) -> dict[str, Any]:
    """``path -> leaf`` of an output (:func:`~pytest_graphir.leaves.flatten`, objects
    walked :data:`MAX_OBJECT_DEPTH` deep); an object that is one leaf is compared by
    its type, as ``"<TypeName>"``."""
    return {
        path: leaf if isinstance(leaf, _PLAIN) else f"<{type(leaf).__name__}>"
        for path, leaf in flatten(value, "", objects=MAX_OBJECT_DEPTH)
    }


def compare_outputs(
    eager: Any, compiled: Any, tolerance: Tolerance, call: int = 1
) -> list[NumericDiff]:
    """Compare compiled outputs with eager ones, leaf by leaf.

    Floating tensors match when ``max |compiled - eager| <= atol + rtol * scale``,
    ``scale = max(|min|, |max|, std)`` of the eager tensor's finite values
    (:func:`~pytest_graphir.capture.stats.kinds.reference_stats`, the
    :class:`~pytest_graphir.compare.Tolerance` rule, applied element-wise); NaN and
    infinities must sit at the same places. Other tensors, and non-tensor leaves,
    must be equal.

    Returns:
        One :class:`~.compiled_report.NumericDiff` per differing leaf.
    """
    return _compare(_leaves(eager), _leaves(compiled), tolerance, call, _OUTPUTS)


def compare_grads(eager: Grads, compiled: Grads, tolerance: Tolerance) -> list[NumericDiff]:
    """Compare each parameter's gradient (``compare_outputs`` rules), call 1."""
    return _compare(eager, compiled, tolerance, 1, _GRADS)


_ABSENT = object()
# (the value of a missing leaf, path suffix, detail when only eager, when only compiled)
_OUTPUTS = (_ABSENT, "", "only in the eager outputs", "only in the compiled outputs")
_GRADS = (None, ".grad", "no gradient under compile", "no gradient eagerly")


def _compare(
    eager: dict[str, Any], compiled: dict[str, Any], tolerance: Tolerance, call: int, how: Any
) -> list[NumericDiff]:
    """One :class:`~.compiled_report.NumericDiff` per path whose leaves differ (``how``:
    :data:`_OUTPUTS` or :data:`_GRADS`), eager order first, compiled-only paths after."""
    missing, suffix, *absent = how
    out: list[NumericDiff] = []
    for path in {**eager, **compiled}:
        e, c = eager.get(path, missing), compiled.get(path, missing)
        if e is missing or c is missing:
            detail = None if e is c else absent[e is missing]
        else:
            detail = _difference(e, c, tolerance)
        if detail:
            out.append(NumericDiff(f"{path or 'output'}{suffix}", detail, call))
    return out


def _difference(e: Any, c: Any, tolerance: Tolerance) -> str | None:
    """What differs between an eager and a compiled leaf (:func:`compare_outputs`'
    rules), or None when they match."""
    if not isinstance(e, torch.Tensor) or not isinstance(c, torch.Tensor):
        return f"{e!r} -> {c!r}" if type(e) is not type(c) or e != c else None
    if e.shape != c.shape or e.dtype != c.dtype:
        return f"{e.dtype} {list(e.shape)} -> {c.dtype} {list(c.shape)}"
    e, c = e.detach(), c.detach().to(e.device)  # detached: no autograd graph is built
    if torch.equal(e, c):  # the common case, and cheap: no statistics needed
        return None
    if not (e.is_floating_point() or e.is_complex()):
        return f"{int((e != c).sum())} of {e.numel()} elements differ (exact compare)"
    infinities = torch.where(e.isinf(), e, 0), torch.where(c.isinf(), c, 0)
    if not (torch.equal(e.isnan(), c.isnan()) and torch.equal(*infinities)):
        return "NaN/Inf at different places"
    finite = torch.isfinite(e)
    if not bool(finite.any()):
        return None
    diff = float((c[finite].double() - e[finite].double()).abs().max())
    allowed = tolerance.allowed(reference_stats(e[finite]))
    if diff <= allowed:  # False for a NaN difference
        return None
    return f"max |compiled - eager| {diff:.6g} > allowed {allowed:.3g}"


class ModelState:
    """A model's buffers and gradients at one moment, its parameters' versions, and the
    default random generators' states (``torch.get_rng_state()`` and, once CUDA is
    initialised, ``torch.cuda.get_rng_state_all()``).

    Args:
        model: the module; ``named_buffers`` are saved with ``detach().clone()``,
            ``named_parameters`` by version; a lazy module's uninitialised
            parameters and buffers are skipped.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        cuda = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        self.rng = torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else None
        self.buffers = {
            name: (t, t._version, t.detach().clone())
            for name, t in model.named_buffers()
            if not is_lazy(t)
        }
        self.params = {
            name: (p, p._version, None if p.grad is None else p.grad.detach().clone())
            for name, p in model.named_parameters()
            if not is_lazy(p)
        }

    @property
    def changed(self) -> list[str]:
        """Parameters written in place since the snapshot (their old values are lost)."""
        return [name for name, (p, version, _) in self.params.items() if p._version != version]

    def restore(self, rng: bool = False) -> None:
        """Copy the saved buffers back into the model's current tensors (only those that
        changed: written in place, or replaced by the forward), and put the gradients
        (and with ``rng``, the random generators' states) back as saved."""
        if rng:  # the CPU generator's state, and every CUDA device's once CUDA is in use
            torch.set_rng_state(self.rng[0])
            if self.rng[1] is not None:
                torch.cuda.set_rng_state_all(self.rng[1])
        current = dict(self.model.named_buffers())
        with torch.no_grad():
            for name, (tensor, version, saved) in self.buffers.items():
                t = current.get(name)
                if t is None or (t is tensor and t._version == version):
                    continue
                if t.shape == saved.shape and t.dtype == saved.dtype:
                    t.copy_(saved)
                else:  # replaced by a tensor of another shape or dtype: put a copy back
                    owner, _, attr = name.rpartition(".")
                    self.model.get_submodule(owner)._buffers[attr] = t = saved.clone()
                self.buffers[name] = (t, t._version, saved)
            for name, p in self.model.named_parameters():
                grad = self.params.get(name, (p, 0, None))[2]
                if not is_lazy(p):
                    p.grad = None if grad is None else grad.clone()


def materialise_lazy(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Run one eager forward when a lazy module (``LazyLinear``) has uninitialised
    parameters or buffers (``is_lazy``, as ``LazyModuleMixin.has_uninitialized_params``
    reads them), so both sides compare the model and not its one-time initialisation
    (``LazyModuleMixin._infer_parameters``, a forward pre-hook that removes itself)."""
    if any(is_lazy(t) for t in (*model.parameters(), *model.buffers())):
        with torch.no_grad(), torch.compiler.set_stance("force_eager"):
            model(*args, **kwargs)
