"""ATen graphs from AOT Autograd (``graphir_aot``) compared with the eager ATen trace.

:func:`compare_aten` runs the model once eagerly under a ``TorchDispatchMode`` that
logs each ATen op (``func.overloadpacket.__name__``: ``addmm``, ``native_layer_norm``,
``threshold_backward``), forward and backward, then once under ``torch.compile`` with an
:class:`~.backend.AotGraphRecorder`, whose forward and backward (or inference) ATen
graphs give the compiled sequences. Both backward passes start from the same
explicit output gradient (``torch.autograd.backward(outputs, grads)``), so no
loss op (``sum``, ``ones_like``, ``expand``) sits on one side only. The sequences are
aligned with ``difflib.SequenceMatcher`` after dropping :data:`IGNORED` ops (the
``detach`` calls autograd and AOT Autograd's functionalisation add at different
places).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .backend import AotGraphRecorder
from .dynamo_state import quiet_trace_log
from .model_state import ModelState
from .numerics import grad_outputs

IGNORED = frozenset({"detach", "alias", "lift_fresh", "lift_fresh_copy"})
"""ATen ops left out of both sequences: autograd and functionalisation bookkeeping."""


class _AtenLog(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Log the ATen op packet name of every dispatched call."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


@dataclass
class AtenDiff:
    """One stretch where the compiled ATen sequence departs from the eager one."""

    phase: str
    eager: list[str]
    compiled: list[str]
    eager_index: int

    def __str__(self) -> str:
        return (
            f"{self.phase} #{self.eager_index}: eager {', '.join(self.eager) or '-'} -> "
            f"compiled {', '.join(self.compiled) or '-'}"
        )


@dataclass
class AtenComparison:
    """Eager versus compiled ATen op sequences, forward and backward.

    Attributes:
        eager: ``{"forward": [...], "backward": [...]}`` eager ATen ops
            (:data:`IGNORED` left out).
        compiled: the same for the ATen graphs AOT Autograd compiled (``"forward"``
            holds the inference graphs when grad was off).
        diffs: where they differ; empty when they are the same op for op.
    """

    eager: dict[str, list[str]]
    compiled: dict[str, list[str]]
    diffs: list[AtenDiff] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every phase has the same ATen ops in the same order."""
        return not self.diffs

    def __bool__(self) -> bool:
        return self.ok

    def lines(self) -> list[str]:
        """A summary line per phase, then each difference."""
        return [
            f"graphir aten {phase}: {len(ops)} eager ops, "
            f"{len(self.compiled.get(phase, []))} compiled"
            for phase, ops in self.eager.items()
        ] + [f"  {d}" for d in self.diffs]


def _kept(ops: list[str]) -> list[str]:
    return [op for op in ops if op not in IGNORED]


def _diff(phase: str, eager: list[str], compiled: list[str]) -> list[AtenDiff]:
    matcher = difflib.SequenceMatcher(None, eager, compiled, autojunk=False)
    return [
        AtenDiff(phase, eager[i1:i2], compiled[j1:j2], i1)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


def compare_aten(
    model: torch.nn.Module, *args: Any, backward: bool = True, **kwargs: Any
) -> AtenComparison:
    """Compare the ATen graphs ``torch.compile`` (AOT Autograd) builds with eager's ATen ops.

    Relies on ``TorchDispatchMode`` (``torch.utils._python_dispatch``),
    ``torch._dynamo.backends.common.aot_autograd`` through
    :class:`~.backend.AotGraphRecorder`, and ``torch.autograd.backward``. Both runs
    start from the same parameters and buffers; Dynamo is reset before and after.

    Args:
        model: the module.
        *args: positional inputs.
        backward: also run a backward from the outputs that require grad (with
            gradients of ones) and compare the backward ATen graphs.
        **kwargs: keyword inputs.

    Returns:
        An :class:`AtenComparison`; ``bool()`` is True when forward and backward ATen
        sequences are the same op for op.

    Raises:
        ValueError: ``backward=True`` and no output requires grad.
    """
    torch._dynamo.reset()
    state = ModelState(model)
    try:
        with _AtenLog() as log:
            out = model(*args, **kwargs)
        eager = {"forward": _kept(log.ops)}
        if backward:
            outs = grad_outputs(out)
            if not outs:
                raise ValueError(
                    "compare_aten(backward=True): no output requires grad; "
                    "enable grad or pass backward=False"
                )
            seeds = [torch.ones_like(t) for t in outs]  # made outside any recording
            with _AtenLog() as log:
                torch.autograd.backward(outs, seeds)
            eager["backward"] = _kept(log.ops)
        state.restore()
        recorder = AotGraphRecorder(model=model)
        with quiet_trace_log():  # no torch.__trace records in a test's captured log
            compiled_out = torch.compile(model, backend=recorder)(*args, **kwargs)
            if backward:
                outs = grad_outputs(compiled_out)
                torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
        compiled: dict[str, list[str]] = {phase: [] for phase in eager}
        for graph in recorder.aten_graphs:
            phase = "backward" if graph.kind == "backward" else "forward"
            compiled.setdefault(phase, []).extend(_kept(graph.ops))
        diffs = [d for phase in eager for d in _diff(phase, eager[phase], compiled[phase])]
        return AtenComparison(eager, compiled, diffs)
    finally:
        state.restore()
        torch._dynamo.reset()
