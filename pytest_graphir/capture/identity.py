"""Tensor identity during a trace: which node (or input, or parameter) produced a tensor.

Raw ``id()`` is reused many times within one forward (186 reuses in GPT-2 small at
seq 64, ``shared/research/torch-notes.md`` Q3) and gives wrong edges as soon as one
producer is missed. Labels live in a :class:`torch.utils.weak.WeakIdKeyDictionary`:
keyed by object identity, holding the tensor only weakly, so the tracer never keeps
an intermediate alive and a dead tensor's id can never alias a new one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from ..ir import TensorMeta


class TensorLabels:
    """Maps live tensors to ``(reference, TensorMeta, version)`` without keeping them alive.

    ``reference`` is the IR's edge string (``$input_ids``, ``$lm_head/linear#0``);
    ``version`` is the tensor's ``_version`` when it was labelled, so an op that
    returns its input unchanged can reuse that tensor's statistics.
    """

    def __init__(self) -> None:
        from torch.utils.weak import WeakIdKeyDictionary

        self._labels: Any = WeakIdKeyDictionary()
        self._constants = 0

    def get(self, t: torch.Tensor) -> tuple[str, TensorMeta, int] | None:
        """Return the label entry of ``t``, or None if the trace has not seen it."""
        return self._labels.get(t)  # type: ignore[no-any-return]

    def set(self, t: torch.Tensor, ref: str, meta: TensorMeta) -> None:
        """Label ``t`` (replacing any older label: the newest producer wins)."""
        self._labels[t] = (ref, meta, t._version)

    def ref(self, t: torch.Tensor) -> str:
        """Return the reference of ``t``; an unseen tensor is a constant, described by
        dtype and shape."""
        entry = self._labels.get(t)
        if entry is not None:
            return entry[0]  # type: ignore[no-any-return]
        return f"<tensor {str(t.dtype)[6:]}{list(t.shape)}>"
