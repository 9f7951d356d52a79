"""Argument rendering: a call's arguments as a snapshot writes them.

Tensors become references (``$x``, ``$linear#0``) through the trace's
:class:`~.identity.TensorLabels`; ``None``, ``bool``, ``int`` and ``float`` stay as
they are; every other value becomes a constant (``slice(0, 2, None)``, ``float32``,
``<device>``, ``<list len=N>``, ``<ndarray float32[3]>``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from ..names import dtype_name, escape_constant
from .identity import TensorLabels

_PLAIN = frozenset({bool, int, float})
"""Argument types written as they are (exactly these types: subclasses, IntEnum
included, go through :meth:`ArgRenderer.render`)."""

_IS_TENSOR: dict[type, bool] = {torch.Tensor: True, torch.nn.Parameter: True}
"""Per argument type, whether it is a ``torch.Tensor`` subclass: one dict lookup,
where ``isinstance(2, torch.Tensor)`` walks the class hierarchy of every non-tensor
argument. Bounded by the number of argument types a process passes to torch."""


MAX_CONST_LIST = 64
"""Constant lists longer than this are written as ``<list len=N>``."""

_SEQUENCES = frozenset({tuple, list, torch.Size})
"""Sequence types rendered element by element at once (``x.view(x.size()[:-1] + (n,))``
passes a ``torch.Size``): one set lookup, not :meth:`ArgRenderer.render`'s chain
of checks for other values."""


def holds_tensor(value: Any) -> bool:
    """True when ``value`` is a tensor or a (nested) tuple, list or dict holding one."""
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(holds_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(holds_tensor(v) for v in value.values())
    return False


class ArgRenderer:
    """Renders call arguments against ``labels``: the base of the trace state, whose
    op and module callbacks render every argument they record.

    Args:
        labels: the trace's tensor labels; an unlabelled tensor is written as a
            constant (``<tensor float32[2, 3]>``).
    """

    def __init__(self, labels: TensorLabels) -> None:
        self.labels = labels

    def render(self, v: Any) -> Any:
        """Render an argument: tensors become references, other values constants."""
        if isinstance(v, torch.Tensor):
            return self.labels.ref(v)
        kind = type(v)
        if v is None or kind is bool or kind is int or kind is float:
            return v
        # exact types: none of these can be subclassed (nor can bool)
        if kind is slice:
            return f"slice({self.render(v.start)}, {self.render(v.stop)}, {self.render(v.step)})"
        if kind is torch.dtype:
            return dtype_name(v)
        if kind is torch.device:
            return "<device>"  # keep snapshots device-independent
        if v is Ellipsis:
            return "..."
        if kind is torch.memory_format or kind is torch.layout:
            return str(v).replace("torch.", "")
        if isinstance(v, str):
            return escape_constant(v)
        if isinstance(v, int):  # int subclasses, IntEnum: a plain int, as torch sees it
            return int(v)
        if isinstance(v, float):
            return float(v)
        if isinstance(v, enum.Enum):
            return f"{type(v).__name__}.{v.name}"
        if type(v).__module__ == "numpy":
            if getattr(v, "ndim", None) == 0:  # numpy scalars and 0-d arrays
                return self.render(v.item())
            return f"<ndarray {getattr(v, 'dtype', '?')}{list(getattr(v, 'shape', []))}>"
        if isinstance(v, (list, tuple)):
            return self._render_sequence(v)
        if isinstance(v, Mapping):
            return {str(k): self.render(x) for k, x in v.items()}
        return f"<{type(v).__name__}>"

    def _render_sequence(self, v: Any) -> Any:
        # a long list of constants is shortened; one holding tensors never is: each
        # element is an edge (torch.stack / torch.cat of many tensors)
        if len(v) > MAX_CONST_LIST and not any(isinstance(x, torch.Tensor) for x in v):
            return f"<{type(v).__name__} len={len(v)}>"
        return self._render_args(v)

    def _render_args(self, args: Iterable[Any]) -> list[Any]:
        """:meth:`render` of each element of ``args`` (positional arguments, a tuple or
        list argument, keyword arguments' values), tensors and plain scalars inline."""
        entries = self.labels.entries
        rendered: list[Any] = []
        append = rendered.append
        for a in args:
            kind = type(a)
            is_tensor = _IS_TENSOR.get(kind)
            if is_tensor is None:
                is_tensor = _IS_TENSOR[kind] = issubclass(kind, torch.Tensor)
            if is_tensor:
                entry = entries.get(id(a))
                append(entry[1] if entry is not None and entry[0]() is a else self.labels.ref(a))
            elif a is None or kind in _PLAIN:
                append(a)
            elif kind in _SEQUENCES:
                append(self._render_sequence(a))
            else:
                append(self.render(a))
        return rendered
