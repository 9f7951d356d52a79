"""Statistics of CPU tensors by the optional C extension ``_moments`` (setup.py): one
pass over a dense float32, float64 or bfloat16 tensor's memory, at record time.

A tensor it declines (:func:`fused_stats` gives None) goes down the device path
(:mod:`.device`), as every CPU tensor does where the extension is not built.
"""

from __future__ import annotations

from typing import Any

import torch

from ..dtensor import PLAIN_TYPES
from .kinds import FLOAT32_OVERFLOW

try:  # the optional C extension (setup.py); without it, the device path only
    from .. import _moments as _moments  # also the stats package's
except ImportError:  # pragma: no cover - depends on how the package was built
    _moments = None  # type: ignore[assignment]

ONE_PASS_RATIO = 0.8
"""The C kernel takes the variance in one pass (``E[x^2] - mean^2``) only when
``mean^2 <= ONE_PASS_RATIO * E[x^2]``, so the variance is at least a fifth of
``E[x^2]`` and the cancellation loses at most a factor of 5 of float64 accuracy;
otherwise it sums ``(x - mean)**2`` in a second pass. An accuracy bound, not a speed
setting."""

FUSED_CODES: dict[Any, int] = {torch.float32: 0, torch.float64: 1, torch.bfloat16: 2}
"""torch dtype -> the extension's dtype code (empty where the extension is not built)."""

# the torch callables the hot path binds once; tensor queries from TensorBase, not
# torch.Tensor, whose methods the patch interceptor wraps
_Tensor, _strided, _disabled = torch.Tensor, torch.strided, torch._C.DisableTorchFunction
_mode_enabled = torch._C._is_torch_function_mode_enabled
_base = torch._C.TensorBase
_is_contiguous, _contiguous, _detach = _base.is_contiguous, _base.contiguous, _base.detach

if _moments is None:
    FUSED_CODES.clear()
else:  # hand the extension its tensor queries and constants
    queries = (_base.numel, _base.is_neg, _is_contiguous, _base.data_ptr, _base.size, _base.stride)
    _moments.configure(*queries, ONE_PASS_RATIO, FLOAT32_OVERFLOW)


def fused_stats(t: torch.Tensor) -> dict[str, float | int] | None:
    """Statistics of a floating CPU tensor in one pass over its memory, by the C
    extension (:data:`FUSED`); None when it does not apply, and the caller computes them
    with torch instead.

    Args:
        t: a strided floating CPU tensor.

    Returns:
        ``{"mean", "std", "min", "max", "nan", "inf"}`` (population std, counts 0), or
        None: extension not built, dtype other than float32/float64/bfloat16, no
        elements, not dense (:func:`.device.dense_flat`), a negative view, no data pointer (a
        wrapper subclass), a data pointer not aligned to the element size
        (``torch.frombuffer`` at an odd offset), or a NaN/Inf among the values or in
        the sums (the device path then gives the NaN and Inf semantics and counts).

    The extension sums in 16 float64 lanes combined in a fixed order: the same bits on
    every machine and at every thread count. The variance is ``E[x^2] - mean^2`` where
    :data:`ONE_PASS_RATIO` says it is accurate, else a second pass sums
    ``(x - mean)**2``. float32 and bfloat16 results that leave float32's range are
    reported as torch's float32 reductions give them (Inf).

    The extension's ``tensor_stats`` does the checks, the pass, the variance and the
    float32 rule, and reads a dense tensor that is not contiguous in memory order (the
    test of :func:`dense_flat`, in C). Its tensor queries go through
    ``torch._C.TensorBase`` (never the patch interceptor's wrappers on
    ``torch.Tensor``, which would record them or flush held statistics), under
    ``DisableTorchFunction`` where a mode or a subclass could intercept them.
    """
    code = FUSED_CODES.get(t.dtype)
    if code is None or t.layout is not _strided or t.is_nested:
        return None
    if type(t) is _Tensor and not _mode_enabled():
        return _moments.tensor_stats(t, code)
    with _disabled():
        return _moments.tensor_stats(t, code)


def copied_stats(t: torch.Tensor) -> dict[str, float | int] | None:
    """:func:`fused_stats` of a contiguous copy of ``t``, made here and freed on return,
    where ``t`` is a plain tensor (``torch.Tensor`` or ``nn.Parameter``) the kernel
    cannot read in place because it is not contiguous: a strided slice (GPT-2's
    ``split`` of ``c_attn``'s output), an expanded view. One copy and one pass at
    record time, where the device path would hold, copy and reduce it in rows
    (benchmarks/README.md, "Statistics constants").

    Returns:
        As :func:`fused_stats`; None where ``t`` is another type, contiguous, of
        another dtype or layout, or where the kernel declines the copy (NaN, Inf).
    """
    code = FUSED_CODES.get(t.dtype)
    if code is None or type(t) not in PLAIN_TYPES or t.layout is not _strided or t.is_nested:
        return None
    with _disabled():
        return None if _is_contiguous(t) else _moments.tensor_stats(_contiguous(_detach(t)), code)
