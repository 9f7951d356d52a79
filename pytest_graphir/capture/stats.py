"""Per-tensor statistics, computed on the tensor's device.

Hot path: called for every new tensor a trace records (ops that only reshape or
return their input share the statistics of that input instead).

Floating tensors: ``mean``, ``std`` (population), ``min``, ``max`` and the counts
``nan`` and ``inf``. NaN and Inf propagate into mean/std/min/max, so a tensor with
a NaN has ``mean: .nan``; the counts say how many. Integer tensors: ``min``,
``max``, ``sum`` (exact int64). Bool tensors: ``true`` (count of True). Empty,
complex, quantized, sparse and meta tensors get no statistics.

How they are computed (measured on GPT-2 small shapes, see ``benchmarks/``):

* two passes in the tensor's precision (float32 for half types): ``mean``, then
  the dot product of ``x - mean`` with itself, in chunks of :data:`CHUNK` elements
  for large contiguous tensors so no full-size temporary is made. ~2.5x cheaper
  than float64 sum + sum of squares, and unlike that one-pass form it stays
  accurate when ``|mean| >> std``;
* ``min``/``max`` from one ``torch.aminmax``;
* NaN/Inf counting writes a bool tensor per pass and costs more than everything
  else together; NaN and Inf always show up in ``aminmax``, so the counting passes
  run only when min or max is not finite.

Where the values go: on CPU there is no device to synchronise with, so each
tensor's few numbers are read out at once (one ``.tolist()``) and nothing is held.
On any other device (CUDA) the small result tensors stay on the device, and
:meth:`StatsBatch.finish` concatenates them and copies them to the host with one
``.tolist()`` per device: the trace's single synchronisation for statistics. There
the counts are always computed, on device, since branching on min/max would need
a synchronisation per tensor.

All torch calls here run under ``torch._C.DisableTorchFunction`` and
``torch.no_grad``, so they are never recorded as graph ops and never extend the
autograd graph.
"""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING, Any, Literal

from ..ir import STAT_KEYS_BOOL, STAT_KEYS_FLOAT, STAT_KEYS_INT, TensorMeta

if TYPE_CHECKING:
    import torch

StatsKind = Literal["float", "int", "bool"]
"""Which statistics a tensor gets (:func:`stats_kind`)."""

CHUNK = 1 << 18
"""Elements per chunk of the variance pass over a large contiguous tensor."""


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


class StatsBatch:
    """Computes statistics during a trace and fills each :class:`TensorMeta`.

    CPU tensors are filled at once; tensors on other devices at :meth:`finish`,
    with one host copy per device (see the module docstring).
    """

    def __init__(self) -> None:
        self._pending: list[tuple[Any, Any, TensorMeta, StatsKind, int]] = []

    def add(self, t: torch.Tensor, meta: TensorMeta) -> None:
        """Compute (CPU) or queue (other devices) the statistics of ``t`` into ``meta``."""
        import torch

        kind = _kind_of(t)
        if kind is None:
            return
        with torch._C.DisableTorchFunction():
            if t.device.type == "cpu":
                meta.stats.update(_cpu_stats(t.detach(), kind))
                return
            with torch.no_grad():
                values = stats_tensors(t, kind)
                counts_t = nonfinite_counts(t) if kind == "float" else None
        self._pending.append((values, counts_t, meta, kind, t.numel()))

    def finish(self) -> None:
        """Copy every queued result to the host (once per device) and fill the metas.

        Float results travel bit-for-bit as int64 (``Tensor.view``) next to the
        integer ones, so one ``cat`` + ``tolist`` per device carries all exactly.
        """
        import torch

        by_device: dict[Any, list[tuple[Any, Any, TensorMeta, StatsKind, int]]] = {}
        for item in self._pending:
            by_device.setdefault(item[0].device, []).append(item)
        with torch._C.DisableTorchFunction(), torch.no_grad():
            for items in by_device.values():
                parts: list[Any] = []
                codes: list[str] = []
                for values, counts, _, _, _ in items:
                    encoded, code = _as_int64(values)
                    parts.append(encoded)
                    codes.append(code)
                    if counts is not None:
                        parts.append(counts)
                flat = torch.cat(parts).tolist()
                pos = 0
                for (values, counts, meta, kind, numel), code in zip(items, codes, strict=True):
                    n = values.numel()
                    host = _decode_floats(flat[pos : pos + n], code)
                    pos += n
                    cnt = None
                    if counts is not None:
                        cnt = flat[pos : pos + 2]
                        pos += 2
                    meta.stats.update(decode(kind, numel, host, cnt))  # dict may be shared
        self._pending.clear()


_KINDS: dict[Any, StatsKind | None] = {}


def _kind_of(t: torch.Tensor) -> StatsKind | None:
    """:func:`stats_kind` with the dtype's answer cached (the hot path: one dict
    lookup and three cheap checks per tensor)."""
    import torch

    dtype = t.dtype
    if dtype in _KINDS:
        kind = _KINDS[dtype]
    else:
        if dtype.is_complex or dtype in (torch.quint8, torch.qint8, torch.qint32, torch.quint4x2):
            kind = None
        elif dtype == torch.bool:
            kind = "bool"
        elif dtype.is_floating_point:
            kind = "float"
        else:
            kind = "int"
        _KINDS[dtype] = kind
    if kind is None or t.layout is not torch.strided or t.numel() == 0 or t.is_meta:
        return None
    return kind


def _float32(value: float) -> float:
    """Round a Python float to the nearest float32, as a float32 tensor op would."""
    return struct.unpack("<f", struct.pack("<f", value))[0]  # type: ignore[no-any-return]


def _cpu_stats(x: torch.Tensor, kind: StatsKind) -> dict[str, float | int]:
    """Statistics of a detached CPU tensor, read out at once (see the module docstring).

    The same numbers as :func:`stats_tensors` + :func:`decode`, bit for bit (the
    mean is the float32 quotient of the float32 sum, which is how ``Tensor.mean``
    computes it on CPU), with fewer torch calls: the per-call overhead (1-2 us each)
    dominates the small tensors a transformer layer produces. The caller runs this
    under ``DisableTorchFunction``; ``x`` is detached, so nothing joins an autograd
    graph.
    """
    import torch

    if kind == "bool":
        return decode(kind, 1, [x.sum().item()], None)
    n = x.numel()
    if kind == "int":
        mn_t, mx_t = torch.aminmax(x)
        return decode(kind, n, [mn_t.item(), mx_t.item(), x.sum(dtype=torch.int64).item()], None)
    if n > CHUNK or x.dtype not in (torch.float32, torch.float64):
        with torch.no_grad():
            host = stats_tensors(x, kind).tolist()
    else:
        total = x.sum().item()  # x's own layout: the summation order Tensor.mean uses
        mean = total / n if x.dtype == torch.float64 else _float32(total / n)
        d = (x - mean).reshape(-1)  # keeps x's strides: a copy only if x is permuted
        mn_t, mx_t = torch.aminmax(x)
        host = [mean, torch.dot(d, d).item(), mn_t.item(), mx_t.item()]
    counts = None
    if not (math.isfinite(host[2]) and math.isfinite(host[3])):
        counts = nonfinite_counts(x).tolist()
    return decode(kind, n, host, counts)


def _as_int64(t: torch.Tensor) -> tuple[torch.Tensor, str]:
    """Reinterpret a stats tensor as int64 for transport; the code says how to decode."""
    import torch

    if t.dtype == torch.float64:
        return t.view(torch.int64), "d"
    if t.dtype == torch.float32:
        return t.view(torch.int32).to(torch.int64), "f"
    return t.to(torch.int64), "q"


def _decode_floats(values: list[int], code: str) -> list[Any]:
    if code == "q":
        return values
    ints = "q" if code == "d" else "i"
    n = len(values)
    return list(struct.unpack(f"<{n}{code}", struct.pack(f"<{n}{ints}", *values)))
