"""Snapshot and restore a model's buffers and gradients, in place; watch its parameters.

``compare_compiled`` runs the model eagerly and then compiled. A forward that
updates a buffer (a step counter, BatchNorm running statistics) would start the
compiled run from another state than the eager one and show a numerics difference
where two copies of the model from the same state agree exactly.
:class:`ModelState` keeps a copy of every buffer (and ``.grad``) and copies it back
into the same tensor objects (``Tensor.copy_`` under ``torch.no_grad()``), so the
module keeps its identity: hooks, compiled frames and Dynamo's guards on the module
stay valid, which a ``copy.deepcopy`` would not give.

Parameters are not copied (that would double the model's memory): a
forward does not change them. Their version counters (``Tensor._version``, bumped by
every in-place write) are kept instead, and :attr:`ModelState.changed` names a
parameter a forward did write in place, so the check can say so.

:func:`rng_state` and :func:`set_rng_state` give both runs the same random numbers;
:func:`materialise_lazy` initialises a lazy module before either run.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.parameter import is_lazy


class ModelState:
    """A model's buffers and gradients at one moment, and its parameters' versions.

    Args:
        model: the module; ``named_buffers`` are saved with ``detach().clone()``,
            ``named_parameters`` by version; a lazy module's uninitialised
            parameters and buffers are skipped.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
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

    def restore(self) -> None:
        """Copy the saved buffers back into the model's current tensors (only those that
        changed: written in place, or replaced by the forward), and put the gradients
        back as saved."""
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


RngState = tuple[torch.Tensor, "list[torch.Tensor] | None"]
"""The CPU generator's state, and every CUDA device's (None when CUDA is not in use)."""


def rng_state() -> RngState:
    """The default generators' states: ``torch.get_rng_state()`` and, once CUDA is
    initialised, ``torch.cuda.get_rng_state_all()``."""
    cuda = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else None


def set_rng_state(state: RngState) -> None:
    """Put the default generators back as :func:`rng_state` found them."""
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


def materialise_lazy(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Run one eager forward when a lazy module (``LazyLinear``) has uninitialised
    parameters, so both sides compare the model and not its one-time initialisation
    (``LazyModuleMixin._infer_parameters``, a forward pre-hook that removes itself)."""
    from torch.nn.modules.lazy import LazyModuleMixin

    if any(
        isinstance(m, LazyModuleMixin) and m.has_uninitialized_params() for m in model.modules()
    ):
        with torch.no_grad(), torch.compiler.set_stance("force_eager"):
            model(*args, **kwargs)
