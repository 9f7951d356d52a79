"""Tensor identity during a trace: which node (or input, or parameter) produced a tensor.

Raw ``id()`` alone is reused many times within one forward (``docs/torch-notes.md``,
*Tensor identity*) and gives wrong edges as soon as one producer is missed. Each entry
here is keyed by ``id()`` but holds a ``weakref.ref`` to the tensor, and a lookup only
succeeds while that weak reference still points at the very same object: a dead
tensor's id that Python hands to a new tensor is never mistaken for it, and the tracer
never keeps an intermediate alive.
This is what ``torch.utils.weak.WeakIdKeyDictionary`` guarantees, without building a
``WeakIdRef`` on every lookup (the hot path: ~2 lookups per recorded op).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.nn.parameter import is_lazy  # type: ignore[attr-defined]

from ..ir import TensorMeta
from ..names import dtype_name
from .dtensor import PLAIN_TYPES, inner
from .nested import shape_of


class TensorLabels:
    """Maps live tensors to ``(reference, TensorMeta, version)`` without keeping them alive.

    ``reference`` is the IR's edge string (``$input_ids``, ``$lm_head/linear#0``);
    ``version`` is the tensor's ``_version`` when it was labelled, so an op that
    returns its input unchanged can reuse that tensor's statistics. Entries of dead
    tensors stay until the trace ends (a few hundred bytes each), but never match.
    """

    def __init__(self) -> None:
        self.entries: dict[int, tuple[Any, str, TensorMeta, int]] = {}
        """``id(tensor) -> (weakref.ref(tensor), reference, meta, version)``; an entry
        counts only while its weak reference still points at the tensor. Read
        directly by the tracer's hot path (:meth:`TraceState.record_op`), which also
        writes it the way :meth:`set` does."""

    def get(self, t: torch.Tensor) -> tuple[str, TensorMeta, int] | None:
        """Return the label entry of ``t``, or None if the trace has not seen it."""
        entry = self.entries.get(id(t))
        if entry is None or entry[0]() is not t:
            return None
        return entry[1], entry[2], entry[3]

    def set(self, t: torch.Tensor, ref: str, meta: TensorMeta) -> None:
        """Label ``t`` (replacing any older label)."""
        self.entries[id(t)] = (weakref.ref(t), ref, meta, t._version)

    def ref(self, t: torch.Tensor) -> str:
        """Return the reference of ``t``; an unseen tensor is a constant, described by
        dtype and shape."""
        entry = self.entries.get(id(t))
        if entry is not None and entry[0]() is t:
            return entry[1]
        if is_lazy(t):  # a lazy module's parameter before materialisation: no shape yet
            return "<uninitialized>"
        local = inner(t) if type(t) not in PLAIN_TYPES else None
        if local is not None and (shard := self.get(local)) is not None:
            return shard[0]  # a DTensor wrapping a labelled shard (DTensor.from_local)
        return f"<tensor {dtype_name(t.dtype)}{shape_of(t)}>"
