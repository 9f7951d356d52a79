"""The ``params`` section: each parameter's shape, dtype and statistics, taken after the
forward (and the backward) in a trace step of its own.

A parameter fingerprint tells a reviewer why activations drift: when the weights
differ, every activation downstream of them does, and the comparison says so in one
line (:mod:`pytest_graphir.compare.params`).
"""

from __future__ import annotations

import torch
from torch.nn.parameter import is_lazy  # type: ignore[attr-defined]

from ..ir import TensorMeta
from ..names import canonical_module_path, dtype_name
from .dtensor import PLAIN_TYPES, dist_entry
from .interrupts import deferred_sigint
from .nested import shape_of
from .stats import StatsBatch


def parameter_entries(root: torch.nn.Module, stats: StatsBatch | None) -> dict[str, TensorMeta]:
    """The ``params`` section of a trace of ``root``.

    One entry per parameter of ``root.named_parameters()`` (a parameter shared by two
    modules, such as a tied ``lm_head``, once under its first name), in that order.
    Uninitialised lazy parameters (a lazy module never called) are left out.

    Args:
        root: the traced module.
        stats: the trace's statistics batch, after the forward; the parameters are
            held in it, which is left deferring and ``settled``: nothing writes them
            before its ``finish``, which comes next. So their statistics are computed
            in batches with the rest, a few kernels per bucket on a device rather
            than a reduction each; None for a trace without statistics (shape and
            dtype only).

    Returns:
        Parameter name -> :class:`~pytest_graphir.ir.TensorMeta` (statistics filled
        by ``stats`` as for any tensor: none for ``meta`` parameters).
    """
    entries: dict[str, TensorMeta] = {}
    if stats is not None:  # its last tensors: nothing writes them before its finish
        stats.defer = stats.settled = True
    with deferred_sigint():  # statistics run in no_grad blocks: a Ctrl-C would leave grad off
        for name, param in root.named_parameters():
            if is_lazy(param):
                continue
            meta = TensorMeta(shape_of(param), dtype_name(param.dtype))
            if type(param) not in PLAIN_TYPES:
                meta.dist = dist_entry(param)
            if stats is not None:
                stats.add(param, meta)
            entries[canonical_module_path(name)] = meta
    return entries
