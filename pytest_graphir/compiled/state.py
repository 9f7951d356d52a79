"""Snapshot and restore a model's parameters, buffers and gradients, in place.

``compare_compiled`` runs the model eagerly and then compiled. A forward that
updates a buffer (a step counter, BatchNorm running statistics) would start the
compiled run from another state than the eager one and show a numerics difference
where two copies of the model from the same state agree exactly.
:class:`ModelState` keeps a copy of every parameter and buffer (and ``.grad``) and
copies it back into the same tensor objects (``Tensor.copy_`` under
``torch.no_grad()``), so the module keeps its identity: hooks, compiled frames and
Dynamo's guards on the module stay valid, which a ``copy.deepcopy`` would not give.
"""

from __future__ import annotations

import torch


class ModelState:
    """The values of a model's parameters, buffers and gradients at one moment.

    Args:
        model: the module; ``named_parameters`` / ``named_buffers`` (shared tensors
            once) are saved with ``detach().clone()``.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        from torch.nn.parameter import is_lazy

        self.model = model
        with torch.no_grad():
            # a lazy module's parameters have no value before its first forward: skipped
            # (the eager run initialises them, the compiled run starts from that)
            self.tensors = {
                name: t.detach().clone()
                for name, t in [*model.named_parameters(), *model.named_buffers()]
                if not is_lazy(t)}
            self.grads = {name: (None if p.grad is None else p.grad.detach().clone())
                          for name, p in model.named_parameters() if not is_lazy(p)}

    def restore(self) -> None:
        """Copy the saved values back into the model's current tensors (a buffer the
        forward replaced with a new tensor gets its old value in the new tensor, or
        the saved tensor when the shapes differ); gradients are put back as saved."""
        from torch.nn.parameter import is_lazy

        current = dict([*self.model.named_parameters(), *self.model.named_buffers()])
        with torch.no_grad():
            for name, saved in self.tensors.items():
                t = current.get(name)
                if t is None:
                    continue
                if t.shape == saved.shape and t.dtype == saved.dtype:
                    t.copy_(saved)
                else:
                    owner_path, _, attr = name.rpartition(".")
                    owner = self.model.get_submodule(owner_path)
                    if attr in owner._buffers:
                        owner._buffers[attr] = saved.clone()
            for name, p in self.model.named_parameters():
                if is_lazy(p):
                    continue
                grad = self.grads.get(name)
                p.grad = None if grad is None else grad.clone()
