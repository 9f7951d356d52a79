"""Statistics on a device (CUDA, or any device where the batched path is forced): the
tensors of one device and dtype are held in a :class:`Bucket`, joined by one copy and
reduced along rows by a handful of kernels, whatever their number; the results stay on
the device until the trace ends.

docs/capture.md, "Statistics", says how and why.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ...ir import TensorMeta
from . import kinds
from .kinds import FLOAT32_OVERFLOW, StatsKind, decode

if TYPE_CHECKING:
    import torch

FLUSH_BYTES = 24 << 20
"""Bytes a bucket holds (tensors kept alive, and their copies taken before an in-place
write) before it joins and reduces them: bounds the extra device memory of a trace at
about twice this (the held bytes and their joined copy), and sets how often a bucket
pays its handful of kernels. Measured by ``benchmarks/bench_zoo.py`` (extra peak
memory, aten ops per traced node) and ``benchmarks/bench_device_buckets.py``; the
figures are in benchmarks/README.md."""

DIRECT_FROM = 1 << 20
"""A tensor of at least this many elements is reduced where it lies, on its own (its
rows viewed in place, no copy, the same kernels as a join); smaller ones are held and
reduced with the others. Bounds the copy a join makes of one tensor. Measured by
``benchmarks/bench_device_buckets.py`` (benchmarks/README.md)."""

MIN_ROW = 64
"""A tensor whose element count has no power-of-two factor of at least this many is
held as copies of itself (:data:`REPEAT_UP_TO`) or in a bucket of its own count
(:func:`own_rows`). A bucket's rows are as long as the largest power of two (at most
:data:`kinds.ROW_LENGTH`) that divides every held tensor's count, so each row holds one
tensor's values only; this bounds how short they get, and so how many results per
element stay on the device until the trace ends (at most six per this many)."""

REPEAT_UP_TO = 1 << 16
"""A floating or bool tensor whose element count has no power-of-two factor of
:data:`MIN_ROW` is held as that many copies of itself (references, no kernel; the
join copies each) that make the count a multiple of it, when that makes at most this
many elements: its statistics are those of the copies, with the counts divided by their
number. Bounds the memory the copies take; larger such tensors are reduced on their
own."""

_INT64 = 1 << 63

STAT_COUNT: dict[StatsKind, int] = {"float": 6, "int": 3, "bool": 1}
"""Results per row: floats mean, variance, min, max, NaN count, Inf count; integers
min, max, sum; bools the count of True."""


def own_rows(n: int, kind: StatsKind) -> bool:
    """Whether a tensor of ``n`` elements goes to a bucket of tensors of its own count,
    one row each (:class:`Bucket` with ``numel``): a count with no power-of-two
    factor of :data:`MIN_ROW`, below :data:`DIRECT_FROM`, of integers (their sums are
    not repeated) or too large to repeat (:data:`REPEAT_UP_TO`)."""
    row = row_length(n)
    if row >= MIN_ROW or n >= DIRECT_FROM or n < MIN_ROW:
        return False
    return kind == "int" or n * (MIN_ROW // row) > REPEAT_UP_TO


def row_length(n: int) -> int:
    """The largest power of two dividing ``n`` (``n >= 1``), at most
    :data:`kinds.ROW_LENGTH`."""
    return min(n & -n, kinds.ROW_LENGTH)


def row_stats(rows: torch.Tensor, kind: StatsKind) -> list[torch.Tensor]:
    """Statistics of each row of an ``(m, r)`` tensor, one kernel or two each.

    Args:
        rows: floats in their accumulation dtype (float32, or float64), integers or
            bools.
        kind: which statistics (:data:`STAT_COUNT`).

    Returns:
        ``STAT_COUNT[kind]`` 1-d tensors of ``m`` values on ``rows``' device. Floats:
        mean, variance (population; ``torch.var_mean``, Welford's update on CUDA,
        accurate when ``|mean| >> std``), min, max (``torch.aminmax``; NaN
        propagates), NaN count and Inf count, all in ``rows``' dtype (a count of at
        most :data:`kinds.ROW_LENGTH` is exact). Integers: min, max and the int64 sum.
        Bools: the int64 count of True.

    The caller runs this under ``DisableTorchFunction`` and ``no_grad``.
    """
    import torch

    if kind == "float":
        var, mean = torch.var_mean(rows, dim=1, correction=0)
        lo, hi = torch.aminmax(rows, dim=1)
        nan = torch.isnan(rows).sum(1, dtype=rows.dtype)
        inf = torch.isinf(rows).sum(1, dtype=rows.dtype)
        return [mean, var, lo, hi, nan, inf]
    total = rows.sum(1, dtype=torch.int64)
    if kind == "bool":
        return [total]
    lo, hi = torch.aminmax(rows, dim=1)
    return [lo, hi, total]


def dense_flat(t: torch.Tensor) -> torch.Tensor | None:
    """All elements of ``t`` as a 1-d view in memory order when ``t`` is dense in some
    order of its dimensions (contiguous, channels_last, transposed), else None
    (expanded or strided-slice tensors: a copy is needed). Statistics do not depend
    on the order of the elements.

    Args:
        t: any strided tensor.

    Returns:
        ``t.view(-1)`` when contiguous; else, when the strides sorted ascending are
        the running products of their sizes (size-1 dimensions ignored),
        ``t.as_strided((t.numel(),), (1,))`` at ``t``'s storage offset; else None.
    """
    if t.is_contiguous():
        return t.view(-1)
    expected = 1
    for size, stride in sorted(zip(t.shape, t.stride(), strict=True), key=lambda p: p[1]):
        if size == 1:
            continue
        if stride != expected:
            return None
        expected *= size
    return t.as_strided((t.numel(),), (1,))


class Bucket:
    """Tensors of one device and dtype, reduced together along rows; see
    :class:`pytest_graphir.capture.stats.StatsBatch`.

    A tensor of :data:`DIRECT_FROM` elements or more is reduced at once on its own
    (:meth:`_alone`). The others are held (a reference and their ``_version``; a count
    with no power-of-two factor of :data:`MIN_ROW` as a few references, see
    :data:`REPEAT_UP_TO`, or in a bucket of its own count, see :func:`own_rows`). Before
    any call that may write in place, :meth:`snapshot` copies the held tensors into one
    buffer (one ``torch._chunk_cat``: the tensors flattened and joined in one kernel)
    and lets them go. When :data:`FLUSH_BYTES` are held or copied, and at the end,
    :meth:`reduce` joins the copies and the held tensors (one more ``_chunk_cat``),
    views the result as rows of :func:`row_length` elements (the largest power of
    two dividing every count, so a row holds one tensor's values only) and reduces
    them (:func:`row_stats`). Each kernel runs once per join, whatever the number of
    tensors; only the results (six numbers per row at most) stay on the device until
    :meth:`read` combines them per tensor on the host, in float64 (Chan et al.'s
    pairwise update for the variance). Nothing is read on the host before then.

    Attributes:
        stale: held tensors whose ``_version`` moved before they were copied.
    """

    def __init__(self, device: Any, src: Any, kind: StatsKind, numel: int = 0) -> None:
        import torch

        self.device, self.src, self.kind = device, src, kind  # src: the tensors' dtype
        self.numel = numel  # a bucket of tensors of this many elements, one row each
        # (:func:`own_rows`), or 0
        self.dtype = src  # the dtype rows are reduced in
        if kind == "float" and src != torch.float64:
            self.dtype = torch.float32  # half types: float32 keeps the sums finite
        self.held: list[tuple[Any, int, int]] = []  # (tensor, version, copies)
        self.snaps: list[Any] = []  # joined copies of held tensors, taken before a write
        self.waiting: list[tuple[int, int]] = []  # (meta index, elements with copies)
        # held or copied, in join order
        self.copies: dict[int, int] = {}  # meta index -> copies held (see REPEAT_UP_TO)
        self.bytes = 0
        self.bases: set[int] = set()  # ids of the bases held views keep alive, counted
        self.row = kinds.ROW_LENGTH  # the row length of the waiting tensors
        self.stats: list[list[Any]] = [[] for _ in range(STAT_COUNT[kind])]
        self.layout: list[tuple[list[tuple[int, int]], int]] = []  # per reduction: runs
        # of (meta index, rows) in row order, and the row length
        self.metas: list[TensorMeta] = []
        self.numels: list[int] = []
        self.stale = 0

    def add(self, t: torch.Tensor, meta: TensorMeta) -> None:
        """Hold ``t`` (or reduce it at once, see the class) for ``meta``."""
        if t.dim() == 0:
            t = t.view(1)  # torch._chunk_cat takes no 0-d tensor (and crashes on all 0-d)
        index = len(self.metas)
        self.metas.append(meta)
        n = t.numel()
        self.numels.append(n)
        row, copies = row_length(n), 1
        if self.numel:
            row = n  # one row per tensor
        elif row < MIN_ROW and self.kind != "int":  # int64 sums of copies would wrap
            copies = MIN_ROW // row
        repeated_too_far = copies > 1 and n * copies > REPEAT_UP_TO
        if n >= DIRECT_FROM or row * copies < MIN_ROW or repeated_too_far:
            self._alone(t, index)
            return
        self.held.append((t, t._version, copies))
        self.waiting.append((index, n * copies))
        if copies > 1:
            self.copies[index] = copies
        self.row = n if self.numel else min(self.row, row * copies)
        size = n * copies * t.dtype.itemsize
        base = t._base  # a view keeps its base alive: count the base, once
        if base is not None and base.numel() > n and id(base) not in self.bases:
            self.bases.add(id(base))
            size += base.numel() * base.dtype.itemsize
        self.bytes += size
        if self.bytes >= FLUSH_BYTES:
            self.reduce()

    def _take_held(self) -> list[Any]:
        """The held tensors, each as many times as it is held (see
        :data:`REPEAT_UP_TO`), in join order; counts those written since."""
        held, self.held = self.held, []
        self.bases.clear()
        out = []
        for t, version, copies in held:
            if t._version != version:
                self.stale += 1
            out += [t] * copies
        return out

    def snapshot(self) -> None:
        """Copy the held tensors into one buffer and let them go (before a call that
        may write into one of them in place): one kernel, no reduction."""
        if not self.held:
            return
        import torch

        held = self._take_held()
        try:
            snap = torch._chunk_cat(held, 0, 1)
        except Exception:  # e.g. a tensor subclass it refuses: reduce them now
            self._fallback(held)
            return
        self.snaps.append(snap)
        self.bytes = sum(s.numel() for s in self.snaps) * self.src.itemsize

    def reduce(self) -> None:
        """Join the copies and held tensors (one ``torch._chunk_cat``), view them as
        rows and reduce them (:func:`row_stats`); the results stay on the device."""
        if not self.held and not self.snaps:
            return
        import torch

        joined = not self.held and len(self.snaps) == 1
        parts = self.snaps + self._take_held()
        self.snaps, self.bytes = [], 0
        if joined:
            flat = parts[0]  # one copy, already joined
        else:
            try:
                flat = torch._chunk_cat(parts, 0, 1)
            except Exception:  # e.g. a tensor subclass it refuses: each on its own
                self._fallback(parts)
                return
        del parts
        if flat.dtype != self.dtype:
            flat = flat.to(self.dtype)
        row, waiting = self.row, self.waiting
        self.row, self.waiting = kinds.ROW_LENGTH, []
        runs = [(i, n // row) for i, n in waiting]
        self._append(row_stats(flat.view(-1, row), self.kind), runs, row)

    def _fallback(self, parts: list[Any]) -> None:
        """Reduce each waiting tensor on its own, from ``parts`` (snapshot copies, then
        held tensors, in join order)."""
        waiting, self.waiting = self.waiting, []
        self.row, self.snaps, self.bytes = kinds.ROW_LENGTH, [], 0
        pending = iter(parts)
        flat, pos = None, 0
        for index, size in waiting:
            copies = self.copies.pop(index, 1)
            n, first = size // copies, None
            for _ in range(copies):  # held: a part each; copied: one after the other
                if flat is None or pos == flat.shape[0]:
                    flat, pos = next(pending).detach().reshape(-1), 0
                first = flat[pos : pos + n] if first is None else first
                pos += n
            assert first is not None
            self._alone(first, index)

    def _alone(self, t: torch.Tensor, index: int) -> None:
        """Reduce one tensor now, in place where :func:`dense_flat` allows (else a
        copy): as rows of :func:`row_length` elements when that is at least
        :data:`MIN_ROW`; else as one row when it is at most :data:`kinds.ROW_LENGTH`
        elements; else as whole rows of :data:`kinds.ROW_LENGTH` and one shorter row."""
        flat = dense_flat(t)
        if flat is None:
            flat = t.reshape(-1)  # expanded or sliced: copied, in its own dtype
        if flat.dtype != self.dtype:
            flat = flat.to(self.dtype)
        n = flat.shape[0]
        row = row_length(n)
        if row < MIN_ROW:
            row = n if n <= kinds.ROW_LENGTH else kinds.ROW_LENGTH
        m, r = divmod(n, row)
        if m:
            whole = flat[: m * row] if r else flat
            self._append(row_stats(whole.view(m, row), self.kind), [(index, m)], row)
        if r:
            rest = flat[m * row :]
            self._append(row_stats(rest.view(1, r), self.kind), [(index, 1)], r)

    def _append(self, results: list[Any], runs: list[tuple[int, int]], row: int) -> None:
        for column, result in zip(self.stats, results, strict=True):
            column.append(result)
        self.layout.append((runs, row))

    def results(self) -> tuple[list[torch.Tensor], Any]:
        """Every result of this bucket, statistic by statistic, as 1-d float32 device
        tensors to join with other buckets' (``torch.cat``) for the one host copy, and
        the dtype :meth:`read` views their host copy as. Float32 results travel as
        they are; others (float64, int64) as one ``torch.cat`` viewed as float32. Call
        after :meth:`reduce`."""
        import torch

        flat = [x for column in self.stats for x in column]
        if not flat or all(x.dtype == torch.float32 for x in flat):
            return flat, torch.float32
        joined = flat[0] if len(flat) == 1 else torch.cat(flat)  # ints: promoted to int64
        return [joined.view(torch.float32)], joined.dtype

    def read(self, host: torch.Tensor) -> None:
        """Combine the host copy of :meth:`results` (viewed as their dtype) per tensor
        and fill each meta's statistics.

        A tensor's rows are consecutive, and all of one length except the shorter last
        row of a tensor reduced on its own: each run of rows of one length is a
        segment, reduced by a few vectorised host calls (``torch.segment_reduce``: the
        mean of the row means, of the row variances, of the squared deviations of the
        row means from it, min, max, and the counts), and a tensor's segments are
        combined in Python (Chan et al.'s pairwise update) before the float32 and
        NaN/Inf rules (:func:`_float_stats`)."""
        import torch

        if not self.metas:
            return
        order: list[int] = []  # meta index of each segment, in row order
        lengths: list[int] = []  # rows per segment
        widths: list[int] = []  # elements per row of each segment
        for runs, row in self.layout:
            for index, count in runs:
                order.append(index)
                lengths.append(count)
                widths.append(row)
        table = host.view(len(self.stats), sum(lengths))
        if self.kind != "float":
            self._read_ints(table.tolist(), order, lengths)
            return
        table = table.double()
        seg = torch.tensor(lengths)
        means = torch.segment_reduce(table, "mean", lengths=seg.expand(6, -1), axis=1)
        d = table[0] - torch.repeat_interleave(means[0], seg)
        spread = torch.segment_reduce(d * d, "mean", lengths=seg)
        lo = torch.segment_reduce(table[2], "min", lengths=seg)
        hi = torch.segment_reduce(table[3], "max", lengths=seg)
        out = torch.stack([means[0], means[1], spread, lo, hi, means[4], means[5]], 1).tolist()
        float32 = self.dtype == torch.float32
        combined: dict[int, list[float]] = {}
        for index, rows, width, values in zip(order, lengths, widths, out, strict=True):
            mean, var, spread_, lo_, hi_, nan, inf = values
            size = float(rows * width)
            part = [size, mean, size * (var + spread_), lo_, hi_, nan * rows, inf * rows]
            if index in combined:  # a tensor's whole rows, then its shorter last row
                part = _combine(combined[index], part)
            combined[index] = part
        for index, (_, mean, m2, lo_, hi_, nan, inf) in combined.items():
            copies = self.copies.get(index, 1)  # held as copies of itself: same mean
            m2, nan, inf = m2 / copies, nan / copies, inf / copies
            counts = round(nan), round(inf)
            stats = _float_stats(self.numels[index], mean, m2, lo_, hi_, *counts, float32)
            self.metas[index].stats.update(stats)

    def _read_ints(self, table: list[list[Any]], order: list[int], lengths: list[int]) -> None:
        """Integers and bools: a tensor's segments (its whole rows, then its shorter
        last row) combined in Python, the sum wrapped as an int64 sum wraps."""
        parts: dict[int, list[Any]] = {}
        pos = 0
        for index, count in zip(order, lengths, strict=True):
            end = pos + count
            part = [sum(table[-1][pos:end])]
            if self.kind == "int":
                part += [min(table[0][pos:end]), max(table[1][pos:end])]
            if index in parts:
                before = parts[index]
                part[0] += before[0]
                if self.kind == "int":
                    part[1:] = [min(part[1], before[1]), max(part[2], before[2])]
            parts[index] = part
            pos = end
        for index, part in parts.items():
            total = part[0] // self.copies.get(index, 1)  # bools only are held as copies
            total = (total + _INT64) % (2 * _INT64) - _INT64
            if self.kind == "bool":
                values = [total]
            else:
                values = [part[1], part[2], total]
            self.metas[index].stats.update(decode(self.kind, self.numels[index], values, None))


def _combine(a: list[float], b: list[float]) -> list[float]:
    """Two parts ``[n, mean, sum of squared deviations, min, max, NaN, Inf]`` of one
    tensor as one (Chan et al.'s pairwise update; NaN propagates into min and max)."""
    n = a[0] + b[0]
    delta = b[1] - a[1]
    mean = a[1] + delta * b[0] / n
    m2 = a[2] + b[2] + delta * delta * a[0] * b[0] / n
    lo = a[3] if a[3] != a[3] or a[3] <= b[3] else b[3]
    hi = a[4] if a[4] != a[4] or a[4] >= b[4] else b[4]
    return [n, mean, m2, lo, hi, a[5] + b[5], a[6] + b[6]]


def _float_stats(
    n: int, mean: float, m2: float, lo: float, hi: float, nan: float, inf: float, float32: bool
) -> dict[str, float | int]:
    """Named statistics of one tensor from its rows combined in float64, with the rules
    the CPU path's plain float32 sums give: a sum beyond float32's range is +-Inf, so
    the mean is too and the std Inf (masks filled with ``finfo(float32).min``), and so
    is a sum of squared deviations beyond it; the mean of values with Inf is +-Inf
    (NaN with both signs) and their std NaN (Welford's update makes NaN of an Inf);
    NaN propagates into all four."""
    if float32:
        summed = mean * n
        if abs(summed) > FLOAT32_OVERFLOW:
            mean, m2 = math.copysign(math.inf, summed), math.inf
        elif m2 > FLOAT32_OVERFLOW:
            m2 = math.inf
    if inf > 0:
        if hi == math.inf:
            mean = math.nan if lo == -math.inf else math.inf
        else:
            mean = -math.inf
        m2 = math.nan
    if nan > 0:
        mean = m2 = lo = hi = math.nan
    return decode("float", n, [mean, m2, lo, hi], [int(nan), int(inf)])
