"""Nested tensors (``torch.nested``, strided and jagged layouts) in the IR.

A nested tensor has no dense shape: ``t.shape`` raises for the strided layout, and
for the jagged one holds a nested int (``j1``) numbered by a process-wide counter,
which would make the snapshot depend on what else the process built. So a trace
writes the shape of the components: their number, then each dimension's size where all
components share it and :data:`RAGGED` where they differ. Its statistics are those of
all the components' elements together (:func:`nested_values`).
"""

from __future__ import annotations

import torch

RAGGED = "ragged"
"""A dimension whose size differs between a nested tensor's components."""


def shape_of(t: torch.Tensor) -> list[int | str]:
    """``list(t.shape)``, or for a nested tensor :func:`nested_shape`."""
    return nested_shape(t) if t.is_nested else list(t.shape)


def nested_shape(t: torch.Tensor) -> list[int | str]:
    """The shape a trace writes for the nested tensor ``t``.

    Args:
        t: a nested tensor (``t.is_nested``), of either layout.

    Returns:
        ``[components, d1, ..., dn]``: ``dk`` is the size of dimension ``k`` of every
        component where they agree, :data:`RAGGED` where they do not (and for every
        dimension of a nested tensor without components). The components come from
        ``t.unbind()``, under ``DisableTorchFunction`` so that no mode records them.
    """
    with torch._C.DisableTorchFunction():
        sizes = [tuple(part.shape) for part in t.unbind()]
        dims = t.dim() - 1
    if not sizes:
        return [0, *([RAGGED] * dims)]
    columns = zip(*sizes, strict=True)  # per dimension, the sizes of all components
    return [len(sizes), *(c[0] if len(set(c)) == 1 else RAGGED for c in columns)]


def nested_values(t: torch.Tensor) -> torch.Tensor:
    """The elements of the nested tensor ``t``'s components, each flattened, in order,
    concatenated: a new 1-D tensor of ``t``'s dtype on ``t``'s device (empty without
    components). What its statistics are computed over; a copy, so a later write into
    ``t`` does not reach them. Computed under ``DisableTorchFunction`` and ``no_grad``."""
    with torch._C.DisableTorchFunction(), torch.no_grad():
        parts = [part.reshape(-1) for part in t.unbind()]
        if not parts:
            return torch.empty(0, dtype=t.dtype, device=t.device)
        return torch.cat(parts)
