"""Which statistics a tensor gets, and how raw per-tensor results become named ones.

Floating tensors: ``mean``, ``std`` (population), ``min``, ``max`` and the counts
``nan`` and ``inf``. Integer tensors: ``min``, ``max``, ``sum`` (exact int64). Bool
tensors: ``true``. Empty, complex, quantized, sparse and meta tensors: none.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal

import torch

from ...ir import STAT_KEYS_BOOL, STAT_KEYS_FLOAT, STAT_KEYS_INT

StatsKind = Literal["float", "int", "bool"]
"""Which statistics a tensor gets (:func:`kind_of`)."""


def decode(kind: StatsKind, numel: int, values: list[Any]) -> dict[str, float | int]:
    """Turn a path's raw per-tensor results (with NaN/Inf counts) into named statistics.

    Args:
        kind: the tensor's :data:`StatsKind`.
        numel: its element count.
        values: floats ``[mean, sum of squared deviations, min, max, nan count, inf
            count]``; integers ``[min, max, sum]``; bools ``[true count]``.

    Returns:
        ``{"mean", "std", "min", "max", "nan", "inf"}`` for floats (population
        std), ``{"min", "max", "sum"}`` for integers, ``{"true"}`` for bools.
    """
    if kind == "float":
        mean, ssd, mn, mx, nan, inf = values
        var = ssd / numel
        std = math.sqrt(var) if var >= 0 else math.nan  # NaN stays NaN
        return dict(zip(STAT_KEYS_FLOAT, (mean, std, mn, mx, int(nan), int(inf)), strict=True))
    keys = STAT_KEYS_INT if kind == "int" else STAT_KEYS_BOOL
    return dict(zip(keys, map(int, values), strict=True))


FLOAT32_OVERFLOW = float(torch.finfo(torch.float32).max) + 2.0**103
"""A float32 sum whose exact value is beyond this (half a unit in the last place past
the largest float32) rounds to Inf; below it, to a finite value."""


_QUANTIZED = (torch.quint8, torch.qint8, torch.qint32, torch.quint4x2, torch.quint2x4)


@functools.cache
def _dtype_kind(dtype: torch.dtype) -> StatsKind | None:
    if dtype.is_complex or dtype in _QUANTIZED:
        return None
    if dtype == torch.bool:
        return "bool"
    return "float" if dtype.is_floating_point else "int"


def kind_of(t: torch.Tensor) -> StatsKind | None:
    """``"float"``, ``"int"``, ``"bool"``, or None (no statistics: complex, quantized,
    not strided, empty, meta) for a tensor; the dtype's answer cached (the hot path:
    one cached call and three cheap checks per tensor)."""
    kind = _dtype_kind(t.dtype)
    if kind is None or t.layout is not torch.strided or t.numel() == 0 or t.is_meta:
        return None
    return kind


def reference_stats(t: torch.Tensor) -> dict[str, float | int]:
    """The definition every statistics path is checked against, in float64.

    Args:
        t: a tensor for which :func:`kind_of` is not None (any device, any strides).

    Returns:
        Floats: ``{"mean", "std", "min", "max", "nan", "inf"}`` with the values ``x``
        widened to float64, ``mean = sum(x) / n``, ``std = sqrt(sum((x - mean)**2) /
        n)`` (population, two passes), ``min`` / ``max`` over all values, and the
        counts of NaN and of +-Inf. A NaN makes mean, std, min and max NaN; an Inf
        (and no NaN) makes the mean +-Inf (NaN when both signs occur) and the std NaN.
        Integers: ``{"min", "max", "sum"}`` (exact, the sum in int64). Bools:
        ``{"true"}``.

    The C kernel (:func:`.cpu.fused_stats`) and the device path
    (:class:`.device.RowBucket`) compute these in float32 or float64 by other
    formulas (one pass, rows combined by Chan et al.'s update); they agree with this
    to float32 rounding, except that a float32 sum beyond float32's range gives them
    Inf where this stays finite (docs/capture.md, "Statistics").
    """
    x = t.detach()
    kind = kind_of(x)
    if kind == "bool":
        return decode(kind, x.numel(), [int(x.sum().item())])
    if kind == "int":
        wide = x.to(torch.int64)
        values = [wide.min().item(), wide.max().item(), wide.sum().item()]
        return decode(kind, x.numel(), values)
    wide = x.to(torch.float64)
    mean = wide.mean()
    values = [mean.item(), ((wide - mean) ** 2).sum().item(), wide.min().item(), wide.max().item()]
    values += [int(torch.isnan(wide).sum().item()), int(torch.isinf(wide).sum().item())]
    return decode("float", x.numel(), values)
