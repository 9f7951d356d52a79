"""Which statistics a tensor gets, and how raw per-tensor results become named ones.

Floating tensors: ``mean``, ``std`` (population), ``min``, ``max`` and the counts
``nan`` and ``inf``. Integer tensors: ``min``, ``max``, ``sum`` (exact int64). Bool
tensors: ``true``. Empty, complex, quantized, sparse and meta tensors: none.
"""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING, Any, Literal

from ...ir import STAT_KEYS_BOOL, STAT_KEYS_FLOAT, STAT_KEYS_INT

if TYPE_CHECKING:
    import torch

StatsKind = Literal["float", "int", "bool"]
"""Which statistics a tensor gets (:func:`stats_kind`)."""

CHUNK = 1 << 18
"""Elements per chunk of the variance pass over a large contiguous tensor."""


ROW_LENGTH = 1 << 12
"""Elements per row wherever a tensor is reduced along rows (the CPU one-pass path and
the device buckets): long enough that few rows travel to the host, short enough that a
float32 reduction along a row stays accurate (about 1e-7 relative; over millions of
elements, about 1e-4)."""


def stats_kind(t: torch.Tensor) -> StatsKind | None:
    """Return ``"float"``, ``"int"``, ``"bool"`` or None (no statistics) for a tensor."""
    import torch

    if t.numel() == 0 or t.is_sparse or t.is_quantized or t.device.type == "meta":
        return None
    if t.is_complex():
        return None
    if t.dtype == torch.bool:
        return "bool"
    if t.is_floating_point():
        return "float"
    return "int"


def stats_tensors(t: torch.Tensor, kind: StatsKind) -> torch.Tensor:
    """Return the raw statistics of ``t`` as one small 1-d tensor on ``t``'s device.

    Args:
        t: a non-empty tensor of the given kind (see :func:`stats_kind`).
        kind: ``"float"``: ``[mean, sum of squared deviations, min, max]`` in the
            tensor's float precision (float32 for half types); ``"int"``:
            ``[min, max, sum]`` as int64; ``"bool"``: ``[true count]`` as int64.

    The caller runs this under ``DisableTorchFunction`` and ``no_grad``.
    """
    import torch

    x = t.detach()
    if kind == "float":
        if x.dtype not in (torch.float32, torch.float64):
            x = x.float()  # half types: float32 keeps the sums from overflowing
        mean = x.mean()
        if x.numel() > CHUNK and x.is_contiguous():
            flat = x.view(-1)
            ssd = torch.zeros((), dtype=x.dtype, device=x.device)
            for start in range(0, flat.numel(), CHUNK):
                d = flat.narrow(0, start, min(CHUNK, flat.numel() - start)) - mean
                ssd += torch.dot(d, d)
        else:
            d = (x - mean).reshape(-1)  # keeps x's strides: a copy only if x is permuted
            ssd = torch.dot(d, d)
        mn, mx = torch.aminmax(x)
        return torch.stack([mean, ssd, mn, mx])
    if kind == "bool":
        return x.sum().reshape(1)
    mn, mx = torch.aminmax(x)
    return torch.stack([mn.long(), mx.long(), x.sum(dtype=torch.int64)])


def nonfinite_counts(t: torch.Tensor) -> torch.Tensor:
    """Return ``[nan count, inf count]`` of a floating tensor as an int64 tensor."""
    import torch

    x = t.detach()
    return torch.stack([torch.isnan(x).sum(), torch.isinf(x).sum()])


def decode(
    kind: StatsKind, numel: int, values: list[Any], counts: list[int] | None
) -> dict[str, float | int]:
    """Turn host copies of :func:`stats_tensors` (and counts) into named statistics.

    Returns:
        ``{"mean", "std", "min", "max", "nan", "inf"}`` for floats (population
        std), ``{"min", "max", "sum"}`` for integers, ``{"true"}`` for bools.
    """
    if kind == "float":
        mean, ssd, mn, mx = values
        var = ssd / numel
        std = math.sqrt(var) if var >= 0 else math.nan  # NaN stays NaN
        nan, inf = counts if counts is not None else (0, 0)
        out: tuple[Any, ...] = (mean, std, mn, mx, int(nan), int(inf))
        return dict(zip(STAT_KEYS_FLOAT, out, strict=True))
    if kind == "int":
        ints = (int(values[0]), int(values[1]), int(values[2]))
        return dict(zip(STAT_KEYS_INT, ints, strict=True))
    return dict(zip(STAT_KEYS_BOOL, (int(values[0]),), strict=True))


_INF = math.inf
FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite float32."""

FLOAT32_OVERFLOW = FLOAT32_MAX + 2.0**103
"""A float32 sum whose exact value is beyond this (half a unit in the last place past
the largest float32) rounds to Inf; below it, to a finite value."""


KINDS: dict[Any, StatsKind | None] = {}


def kind_of(t: torch.Tensor) -> StatsKind | None:
    """:func:`stats_kind` with the dtype's answer cached (the hot path: one dict
    lookup and three cheap checks per tensor)."""
    import torch

    dtype = t.dtype
    if dtype in KINDS:
        kind = KINDS[dtype]
    else:
        if dtype.is_complex or dtype in (torch.quint8, torch.qint8, torch.qint32, torch.quint4x2):
            kind = None
        elif dtype == torch.bool:
            kind = "bool"
        elif dtype.is_floating_point:
            kind = "float"
        else:
            kind = "int"
        KINDS[dtype] = kind
    if kind is None or t.layout is not torch.strided or t.numel() == 0 or t.is_meta:
        return None
    return kind


def to_float32(value: float) -> float:
    """Round a Python float to the nearest float32, as a float32 tensor op would."""
    return struct.unpack("<f", struct.pack("<f", value))[0]  # type: ignore[no-any-return]


def reference_stats(t: torch.Tensor) -> dict[str, float | int]:
    """The reference statistics of a tensor, in float64 over every element.

    ``x = t`` as float64; ``mean = sum(x) / n``, ``std = sqrt(sum((x - mean)^2) / n)``
    (population), ``min``, ``max``; ``nan`` and ``inf`` count those elements.
    """
    import torch

    x = t.detach().to(torch.float64)
    return {
        "mean": float(x.mean()),
        "std": float(x.std(correction=0)),
        "min": float(x.min()),
        "max": float(x.max()),
        "nan": int(torch.isnan(x).sum()),
        "inf": int(torch.isinf(x).sum()),
    }
