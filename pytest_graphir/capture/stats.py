"""Per-tensor statistics, computed on the tensor's device.

Hot path: called for every new tensor a trace records (ops that only reshape or
return their input share the statistics of that input instead).

Floating tensors: ``mean``, ``std`` (population), ``min``, ``max`` and the counts
``nan`` and ``inf``. NaN and Inf propagate into mean/std/min/max, so a tensor with
a NaN has ``mean: .nan``; the counts say how many. Integer tensors: ``min``,
``max``, ``sum`` (exact int64). Bool tensors: ``true`` (count of True). Empty,
complex, quantized, sparse and meta tensors get no statistics.

How they are computed:

* on the CPU, where the optional C extension is built (:data:`FUSED`), a dense
  float32, float64 or bfloat16 tensor at once, in one pass over its memory
  (:func:`fused_stats`); the others, and every tensor where it is not built, as follows;
* on the CPU (:meth:`StatsBatch.add`), a small floating tensor (at most
  :data:`DEFER_ELEMENTS` and :data:`DEFER_BYTES`) is held, not computed: the trace's
  Python cost per torch call (1-2 us) dominates the many small tensors a transformer
  layer produces. Held
  tensors of one dtype and shape are stacked into one ``(k, n)`` tensor
  (``torch.stack``) and reduced row by row, a handful of torch calls for all ``k``
  (:func:`float_rows`): ``sum``, ``vector_norm``, ``amin`` and ``amax`` along the
  rows (each faster than one ``aminmax`` over a dimension), the variance as
  ``E[x^2] - mean^2`` where :data:`ONE_PASS_RATIO` says it is accurate, and from the
  sum of ``(x - mean)**2`` in a second pass over the other rows. They
  are computed when :data:`CPU_FLUSH_BYTES` are held, before any call that may
  write into a tensor in place (:meth:`StatsBatch.flush`, called by the
  interceptors through :mod:`pytest_graphir.capture.writes`), and at the end of the
  forward. A row's numbers do not depend on how many rows share its batch: the
  reduction runs along each row separately (``TensorIterator`` gives each output
  element to one thread). Larger tensors, and every tensor after the forward
  (gradients), are computed at once (:func:`_cpu_stats`): contiguous ones of
  :data:`ONE_PASS_FROM` elements or more in one pass along rows
  (:func:`_one_pass`, ``E[x^2] - mean^2`` only where :data:`ONE_PASS_RATIO` says it
  is accurate), the others in two passes, chunked by :data:`CHUNK` elements so no
  full-size temporary is made;
* NaN/Inf counting writes a bool tensor per pass and costs more than everything
  else together; NaN and Inf always show up in min or max, so the counting passes
  run only when min or max is not finite;
* on other devices (CUDA), where a forward is launch-bound, kernel launches are what
  counts (:class:`_RowBucket`): a large float32/float64 tensor is reduced where it lies
  (:func:`tensor_stats`, six kernels); smaller ones are held, like small CPU tensors,
  then copied into rows of :data:`ROW_LENGTH` by one ``torch.cat`` and reduced row by
  row (:func:`row_table`). The results stay on the device until
  :meth:`StatsBatch.finish`, which copies them to the host with one ``.cpu()`` per
  device (the trace's single synchronisation for statistics) and combines each
  tensor's rows in float64.

The two devices' numbers agree within float rounding (the summation order differs),
far inside the default tolerance.

All torch calls here run under ``torch._C.DisableTorchFunction`` and
``torch.no_grad``, so they are never recorded as graph ops and never extend the
autograd graph.
"""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING, Any, Literal

from ..ir import STAT_KEYS_BOOL, STAT_KEYS_FLOAT, STAT_KEYS_INT, TensorMeta
from .nested import nested_values

if TYPE_CHECKING:
    import torch

try:  # the optional C extension (setup.py); without it, torch reductions only
    from . import _moments
except ImportError:  # pragma: no cover - depends on how the package was built
    _moments = None  # type: ignore[assignment]

FUSED = _moments is not None
"""Whether the C extension ``pytest_graphir.capture._moments`` is built here: then dense
float32, float64 and bfloat16 CPU tensors get their statistics in one pass over their
memory (:func:`fused_stats`); otherwise (no C compiler when the package was installed)
with torch reductions, which give the same numbers within float rounding."""

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


DEFER_ELEMENTS = 1 << 14
"""At most this many elements for a held tensor: below ``TensorIterator``'s grain size
(32768), so its row is reduced by one thread whatever the thread count."""

DEFER_BYTES = 64 << 10
"""A floating CPU tensor of at most this many bytes is held and computed with others
of its dtype and shape (:func:`float_rows`); a larger one is computed at once
(:func:`_cpu_stats`), where the per-call cost no longer dominates and the data is
still in cache."""

CPU_FLUSH_BYTES = 1 << 20
"""Bytes of held CPU tensors at which their statistics are computed: bounds the
memory a trace keeps alive. Measured on a 160-layer narrow Llama, one thread (trace
with statistics / plain forward): 512 KiB 3.9x, 1 MiB 3.7x, 2 MiB 3.8x, 4 MiB 4.2x;
smaller batches pay the per-call cost again, larger ones read their tensors back
from further out of the caches."""

_INF = math.inf
_FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite float32."""

_FLOAT32_OVERFLOW = _FLOAT32_MAX + 2.0**103
"""A float32 sum whose exact value is beyond this (half a unit in the last place past
the largest float32) rounds to Inf; below it, to a finite value."""


def float_rows(x: torch.Tensor) -> list[dict[str, float | int]]:
    """Statistics of each row of a 2-d floating CPU tensor, in a few torch calls.

    Args:
        x: a ``(k, n)`` contiguous tensor, ``n >= 1``; each row is one recorded tensor
            flattened. Half types are reduced in float32.

    Returns:
        ``k`` dicts ``{"mean", "std", "min", "max", "nan", "inf"}`` (population std).
        NaN and Inf propagate into mean/std/min/max; the counts are computed only for
        rows whose min or max is not finite.

    One pass of four reductions along the rows (``sum``, ``vector_norm``, ``amin``,
    ``amax``: four reads, no temporary), read out with one ``.tolist()``. The mean is
    the float32 quotient of the float32 sum (as ``Tensor.mean`` computes it on CPU);
    the variance is ``E[x^2] - mean^2`` where :data:`ONE_PASS_RATIO` says that is
    accurate (as :func:`_cpu_stats` decides for large tensors), and for the other rows
    (``|mean|`` large against the spread, or values not finite) the sum of
    ``(x - mean)**2`` in a second pass over those rows only.

    The caller runs this under ``DisableTorchFunction`` and ``no_grad``.
    """
    import torch

    if x.dtype not in (torch.float32, torch.float64):
        x = x.float()  # half types: float32 keeps the sums from overflowing
    n = x.shape[1]
    table = torch.stack(
        [x.sum(1), torch.linalg.vector_norm(x, dim=1), x.amin(1), x.amax(1)], 1
    ).tolist()
    exact = x.dtype == torch.float64
    sqrt = math.sqrt
    out: list[dict[str, float | int]] = []
    redo: list[int] = []  # rows whose squared deviations take a second pass
    for i, (total, norm, lo, hi) in enumerate(table):
        mean = total / n if exact else _float32(total / n)
        row: dict[str, float | int] = {"mean": mean, "std": 0.0, "min": lo, "max": hi}
        row["nan"] = row["inf"] = 0
        ex2 = norm * norm / n  # in float64: the square of a finite float32 norm is finite
        if -_INF < lo and hi < _INF and norm < _INF and mean * mean <= ONE_PASS_RATIO * ex2:
            row["std"] = sqrt((ex2 - mean * mean) if ex2 > mean * mean else 0.0)
        else:
            redo.append(i)
            if not (-_INF < lo and hi < _INF):  # NaN compares False: counted too
                row["nan"], row["inf"] = nonfinite_counts(x[i]).tolist()
        out.append(row)
    if redo:
        index = torch.tensor(redo)
        means = torch.tensor([out[i]["mean"] for i in redo], dtype=x.dtype)
        ssds = (x[index] - means.unsqueeze(1)).square_().sum(1).tolist()
        if not exact:  # the float32 rule, for rows of finite values and finite mean
            for j, i in enumerate(redo):
                row = out[i]
                if -_INF < row["min"] and row["max"] < _INF and -_INF < row["mean"] < _INF:
                    ssds[j] = _float32_ssd(x[i], ssds[j])
        for i, ssd in zip(redo, ssds, strict=True):
            out[i]["std"] = sqrt(ssd / n) if ssd >= 0 else math.nan  # NaN stays NaN
    return out


ROW_LENGTH = 1 << 12
"""Elements per row of a device bucket (:class:`_RowBucket`). Each row holds one
tensor's values only, so what else was recorded changes a tensor's numbers at most in
the last bits (on CUDA the reduction's block shape, and so the summation order within
a row, depends on how many rows are reduced together; on the CPU not at all), and a
given model gives the same bits run to run; long enough that few rows travel to the
host, short enough that a float32 reduction along a row stays accurate (~1e-7
relative)."""

FLUSH_BYTES = 16 << 20
"""Bytes of device tensors a bucket holds before it copies them into rows (one
``torch.cat``) and reduces them (:func:`row_table`): bounds the extra device memory
of a trace. Measured on an H100 (``benchmarks/bench_device_buckets.py``): a 1.1B
Llama's extra peak traced / plain 1.06x at 8 MiB, 1.10x at 16 MiB, 1.32x at 32 MiB
(issue 10's target: 1.2x); the time ratios of 8, 16 and 32 MiB were equal within
noise."""

DIRECT_FROM = 1 << 20
"""A float32/float64 device tensor of at least this many elements is reduced where it
lies, on its own (:func:`tensor_stats`: six kernels, no copy); smaller ones are held
and reduced with others (a share of one ``cat`` and a few kernels per bucket). With a
launch costing ~10 us of CPU time, six launches beat a copy from about this size;
256K, 1M and 4M elements gave equal time ratios within noise on an H100
(``benchmarks/bench_device_buckets.py``)."""

COUNT_CHUNK = 1 << 22
"""Elements per chunk when :func:`tensor_stats` counts NaN and Inf of a large contiguous
tensor: each count makes a bool temporary of that many bytes."""


def row_table(rows: torch.Tensor) -> torch.Tensor:
    """Statistics of each row of a ``(m, ROW_LENGTH)`` float tensor, in six kernels.

    Returns:
        An ``(m, 6)`` tensor of ``rows``' dtype on its device: mean, variance
        (population), min, max, NaN count, Inf count per row. The mean and variance
        come from ``torch.var_mean`` (one pass, Welford's update on CUDA: accurate
        when ``|mean| >> std``), min and max from ``torch.aminmax``.

    The caller runs this under ``DisableTorchFunction`` and ``no_grad``.
    """
    import torch

    var, mean = torch.var_mean(rows, dim=1, correction=0)
    lo, hi = torch.aminmax(rows, dim=1)
    nan = torch.isnan(rows).sum(1, dtype=rows.dtype)
    inf = torch.isinf(rows).sum(1, dtype=rows.dtype)
    return torch.stack([mean, var, lo, hi, nan, inf], 1)


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


def _rows_and_rest(t: torch.Tensor, row: int) -> tuple[Any, int, Any]:
    """``t``'s elements (in memory order where :func:`dense_flat` allows, else copied)
    as ``(whole rows or None, their count, remainder shorter than a row or None)``."""
    flat = dense_flat(t)
    if flat is None:
        flat = t.reshape(-1)  # expanded or sliced: copied, in its own dtype
    m, r = divmod(flat.shape[0], row)
    whole = (flat[: m * row] if r else flat) if m else None
    rest = (flat[m * row :] if m else flat) if r else None
    return whole, m, rest


def tensor_stats(x: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Statistics of one large float32/float64 tensor where it lies (any strides).

    Returns:
        ``([mean, variance, min, max], [nan count, inf count])`` as 0-d tensors on
        ``x``'s device (``torch.var_mean``, ``torch.aminmax``; counts as int64,
        chunked by :data:`COUNT_CHUNK` for a dense tensor, :func:`dense_flat`), for
        the caller to stack with others'.
    """
    import torch

    var, mean = torch.var_mean(x, correction=0)
    lo, hi = torch.aminmax(x)
    flat = dense_flat(x) if x.numel() > COUNT_CHUNK else None
    if flat is not None:
        chunks = torch.split(flat, COUNT_CHUNK)
        nan = torch.stack([torch.isnan(c).sum() for c in chunks]).sum()
        inf = torch.stack([torch.isinf(c).sum() for c in chunks]).sum()
    else:
        nan, inf = torch.isnan(x).sum(), torch.isinf(x).sum()
    return [mean, var, lo, hi], [nan, inf]


class _RowBucket:
    """Floating tensors of one device and dtype, reduced together in float32 (float64
    for float64 tensors); see :class:`StatsBatch`.

    A tensor of :data:`DIRECT_FROM` elements or more is reduced at once: where it
    lies (float32/float64, :func:`tensor_stats`), or widened in chunks (half types,
    :meth:`_stream`). Smaller ones are held
    (a reference and their ``_version``) until :data:`FLUSH_BYTES` are held (their
    share of the float buffer, plus once the base that held views keep alive) or
    :meth:`flush` is called (before any call that may write in place, and at the end
    of the forward); then one ``torch.cat`` copies their whole rows of
    :data:`ROW_LENGTH` elements into a fresh buffer, one more per distinct remainder
    length copies the remainders (a short tensor is all remainder) into a table of
    rows of that length, and each is reduced row by row (:func:`row_table`): a row
    holds one tensor's values only (see :data:`ROW_LENGTH`). Only the results (six
    numbers per row or tensor) stay on the device until :meth:`read` combines them
    per tensor on the host, in float64 (Chan et al.'s pairwise update for the
    variance).

    Attributes:
        stale: held tensors whose ``_version`` moved before they were copied.
    """

    def __init__(self, device: Any, src: Any) -> None:
        import torch

        self.device, self.src = device, src  # the dtype of the tensors it takes
        self.dtype = torch.float64 if src == torch.float64 else torch.float32
        self.held: list[tuple[Any, int, int]] = []  # (tensor, index, version)
        self.held_bytes = 0
        self.bases: set[int] = set()  # ids of the bases held views keep alive, counted
        self.tables: list[Any] = []  # row tables on the device
        self.layout: list[tuple[list[tuple[int, int]], int]] = []  # per table: runs of
        # (tensor index, rows) in row order, and the row length
        self.direct: list[int] = []  # tensors reduced where they lay, and their results
        self.direct_values: list[Any] = []
        self.direct_counts: list[Any] = []
        self.metas: list[TensorMeta] = []
        self.numels: list[int] = []
        self.stale = 0

    def add(self, t: torch.Tensor, meta: TensorMeta) -> None:
        index = len(self.metas)
        self.metas.append(meta)
        n = t.numel()
        self.numels.append(n)
        if n >= DIRECT_FROM:
            if self.src == self.dtype:
                self._direct(t, index)
            else:
                self._stream(t, index)
            return
        self.held.append((t, index, t._version))
        size = n * self.dtype.itemsize  # its part of the buffer the flush fills
        base = t._base  # a view keeps its base alive: count the base, once
        if base is not None and base.numel() > n and id(base) not in self.bases:
            self.bases.add(id(base))
            size += base.numel() * base.dtype.itemsize
        self.held_bytes += size
        if self.held_bytes >= FLUSH_BYTES:
            import torch

            with torch.no_grad():
                self.flush()

    def _direct(self, t: torch.Tensor, index: int) -> None:
        import torch

        with torch.no_grad():
            values, counts = tensor_stats(t)
        self.direct.append(index)
        self.direct_values += values
        self.direct_counts += counts

    def _stream(self, t: torch.Tensor, index: int) -> None:
        """A large half-type tensor, widened and reduced in chunks of at most
        :data:`FLUSH_BYTES` of float32 rows (a whole widened copy could be twice the
        tensor)."""
        import torch

        row = ROW_LENGTH
        whole, m, rest = _rows_and_rest(t, row)
        step = max(1, FLUSH_BYTES // (self.dtype.itemsize * row))  # rows per chunk
        with torch.no_grad():
            for start in range(0, m, step):
                rows = min(step, m - start)
                self._reduce([whole[start * row : (start + rows) * row]], [(index, rows)], row)
            if rest is not None:
                self._reduce([rest], [(index, 1)], rest.shape[0])

    def flush(self) -> None:
        """Copy the held tensors into rows and reduce them (results kept on the device).

        Each tensor's whole rows of :data:`ROW_LENGTH` go into one buffer (one
        ``torch.cat``); its remainder (the whole tensor, if shorter than a row) into a
        table of the remainders of that length (one ``torch.cat`` per distinct length).
        No padding, so no masks and nothing copied from the host. If the copy fails
        (a tensor subclass ``torch.cat`` refuses), each held tensor is reduced on its
        own (:func:`tensor_stats`, widened to the bucket's dtype).
        """
        if not self.held:
            return
        row = ROW_LENGTH
        held, self.held, self.held_bytes = self.held, [], 0
        self.bases.clear()
        pieces: list[Any] = []
        runs: list[tuple[int, int]] = []
        rests: dict[int, tuple[list[Any], list[tuple[int, int]]]] = {}
        for t, index, version in held:
            if t._version != version:
                self.stale += 1
            whole, m, rest = _rows_and_rest(t, row)
            if whole is not None:
                pieces.append(whole)
                runs.append((index, m))
            if rest is not None:
                group = rests.setdefault(rest.shape[0], ([], []))
                group[0].append(rest)
                group[1].append((index, 1))
        done = len(self.tables)
        try:
            if runs:
                self._reduce(pieces, runs, row)
            for r, (rest, rest_runs) in rests.items():
                self._reduce(rest, rest_runs, r)
        except Exception:  # e.g. a tensor subclass torch.cat refuses: each on its own
            del self.tables[done:], self.layout[done:]
            for t, index, _ in held:
                self._direct(t.detach().to(self.dtype), index)

    def _reduce(self, pieces: list[Any], runs: list[tuple[int, int]], row: int) -> None:
        import torch

        used = sum(rows for _, rows in runs)
        buf = torch.empty(used * row, dtype=self.dtype, device=self.device)
        if len(pieces) == 1:
            buf.copy_(pieces[0])
        elif self.src == self.dtype:
            torch.cat(pieces, out=buf)  # one copy for all
        else:  # cat copies input by input when dtypes differ: widen once after
            buf.copy_(torch.cat(pieces))
        self.tables.append(row_table(buf.view(used, row)))
        self.layout.append((runs, row))

    def results(self) -> list[torch.Tensor]:
        """The device tensors :meth:`read` needs, in its order (after :meth:`flush`)."""
        import torch

        out = [torch.cat(self.tables) if self.tables else torch.zeros(0, 6, device=self.device)]
        if self.direct:
            out += [torch.stack(self.direct_values), torch.stack(self.direct_counts)]
        return out

    def read(self, host: list[torch.Tensor]) -> None:
        """Combine the host copies of :meth:`results` per tensor, in float64, and fill
        each meta's statistics."""
        import torch

        k = len(self.metas)
        numel = torch.tensor(self.numels, dtype=torch.float64)
        out = torch.zeros(k, 6, dtype=torch.float64)
        table = host[0].double()
        if self.layout:
            index = [i for runs, _ in self.layout for i, _ in runs]
            counts = [c for runs, _ in self.layout for _, c in runs]
            seg = torch.repeat_interleave(torch.tensor(index), torch.tensor(counts))
            n_row = torch.repeat_interleave(
                torch.tensor([float(row) for _, row in self.layout], dtype=torch.float64),
                torch.tensor([sum(c for _, c in runs) for runs, _ in self.layout]),
            )
            mean_r, var_r, lo_r, hi_r, nan_r, inf_r = table.unbind(1)

            def total(values: torch.Tensor) -> torch.Tensor:
                return torch.zeros(k, dtype=torch.float64).index_add_(0, seg, values)

            mean = total(mean_r * n_row) / numel
            d = mean_r - mean[seg]
            out[:, 0] = mean
            out[:, 1] = total(var_r * n_row + n_row * d * d)  # sum of squared deviations
            lo = torch.full((k,), math.inf, dtype=torch.float64)
            out[:, 2] = lo.scatter_reduce_(0, seg, lo_r, "amin")
            hi = torch.full((k,), -math.inf, dtype=torch.float64)
            out[:, 3] = hi.scatter_reduce_(0, seg, hi_r, "amax")
            out[:, 4] = total(nan_r)
            out[:, 5] = total(inf_r)
        if self.direct:
            rows = torch.tensor(self.direct)
            values = host[1].double().view(-1, 4)
            out[rows, :4] = values
            out[rows, 1] = values[:, 1] * numel[rows]
            out[rows, 4:] = host[2].double().view(-1, 2)
        mean, m2, lo, hi, nan, inf = out.unbind(1)
        if self.dtype == torch.float32:
            # as the CPU path's float32 sum gives them (masks filled with
            # finfo(float32).min): a sum beyond float32's range is +-Inf, so the mean
            # is too, and every deviation from it, so the std is Inf
            summed = mean * numel
            over = summed.abs() > _FLOAT32_OVERFLOW
            mean = torch.where(over, torch.copysign(torch.tensor(math.inf), summed), mean)
            # and so is a sum of squared deviations beyond float32's range (_float32_ssd)
            m2 = torch.where(over | (m2 > _FLOAT32_OVERFLOW), math.inf, m2)
        # as a plain sum would give them (Welford's update makes NaN of an Inf): the
        # mean of values with Inf is +-Inf (NaN with both signs), their std NaN
        inf_mean = torch.where(hi == math.inf, math.inf, -math.inf)
        inf_mean = torch.where((hi == math.inf) & (lo == -math.inf), math.nan, inf_mean)
        mean = torch.where(inf > 0, inf_mean, mean)
        m2 = torch.where(inf > 0, math.nan, m2)
        nan_found = nan > 0  # NaN propagates into all four
        mean, m2, lo, hi = (torch.where(nan_found, math.nan, v) for v in (mean, m2, lo, hi))
        rows_out = torch.stack([mean, m2, lo, hi, nan, inf], 1).tolist()
        for meta, n, (mean_, m2_, lo_, hi_, nan_, inf_) in zip(
            self.metas, self.numels, rows_out, strict=True
        ):
            meta.stats.update(decode("float", n, [mean_, m2_, lo_, hi_], [nan_, inf_]))


class StatsBatch:
    """Computes statistics during a trace and fills each :class:`TensorMeta`.

    CPU tensors: small floating ones are held and computed in batches of one dtype
    and size (:func:`float_rows`) when :data:`CPU_FLUSH_BYTES` are held, at
    :meth:`flush` and at :meth:`finish`; others at once. Other devices (CUDA):
    floating tensors go to a :class:`_RowBucket` per device and accumulation dtype
    (large ones reduced at once where they lie, others held until
    :data:`FLUSH_BYTES`, :meth:`flush` or :meth:`finish`), and every result reaches
    the host at :meth:`finish`, with one copy per device (see the module docstring).

    Args:
        batched: ``None`` (default): batch floating tensors on devices other than the
            CPU, where per-tensor reductions are launch-bound, and use the CPU path
            on the CPU (its own batching costs less there than a ``cat`` into
            rows). ``True``: the device
            path on every device (used by the tests to run it on the CPU);
            ``False``: never.

    Attributes:
        defer: hold small tensors (True, the default) or compute each at once (on a
            device: copied into rows and reduced at once, eight kernels).
            The tracer holds them during the forward only, where every op that may
            write in place goes through its interceptor and triggers :meth:`flush`.
        stale: how many held tensors had their ``_version`` moved before their
            statistics were computed, by something no interceptor saw (a C++
            extension writing in place; also ``ctx.mark_dirty`` in a custom autograd
            Function, which bumps the version after the write the tracer did see):
            their statistics may show the written values. The tracer warns when
            non-zero.
    """

    def __init__(self, batched: bool | None = None) -> None:
        self._pending: list[tuple[Any, Any, TensorMeta, StatsKind, int]] = []
        self._batched = batched
        self._buckets: dict[tuple[Any, Any], _RowBucket] = {}
        self._held: dict[tuple[Any, Any], list[tuple[Any, TensorMeta, int]]] = {}
        self._held_bytes = 0
        self.defer = True
        self.stale = 0

    def add(self, t: torch.Tensor, meta: TensorMeta) -> None:
        """Compute, hold (small CPU tensors) or queue (other devices) the statistics of
        ``t`` into ``meta``."""
        if _moments is not None and self._batched is not True and t.is_cpu:
            # the hot path: one pass of the C extension where it applies (FUSED) ...
            fused = fused_stats(t)
            if fused is not None:
                meta.stats.update(fused)
                return
        self.add_unfused(t, meta)

    def add_unfused(self, t: torch.Tensor, meta: TensorMeta) -> None:
        """:meth:`add` where the C extension does not apply or has declined ``t``
        (:func:`fused_stats` gave None): the C recorder
        (``pytest_graphir.capture._record``) tries ``tensor_stats`` itself, then
        calls this."""
        import torch

        if t.is_nested:  # its components' elements together, copied (capture/nested.py)
            t = nested_values(t)
        dtype = t.dtype
        if dtype not in _KINDS:
            _kind_of(t)  # fills _KINDS, which the check below reads
        if (
            self.defer
            and _KINDS.get(dtype) == "float"
            and self._batched is None
            and t.is_cpu
            and t.layout is torch.strided
        ):
            # ... else, inline: a small floating CPU tensor is held
            numel = t.numel()
            size = numel * dtype.itemsize
            base = t._base  # a view keeps its base alive: count what is really held
            if base is not None and base.numel() > numel:
                size = base.numel() * base.dtype.itemsize
            if 0 < numel <= DEFER_ELEMENTS and size <= DEFER_BYTES:
                key = (dtype, t.shape)
                group = self._held.get(key)
                if group is None:
                    group = self._held[key] = []
                group.append((t, meta, t._version))
                self._held_bytes += size
                if self._held_bytes >= CPU_FLUSH_BYTES:
                    self.flush()
                return
        kind = _kind_of(t)
        if kind is None:
            return
        if t.is_cpu and not self._batched:
            with torch._C.DisableTorchFunction():
                meta.stats.update(_cpu_stats(t.detach(), kind))
            return
        with torch._C.DisableTorchFunction():
            if kind == "float" and self._batched is not False:
                self._queue(t, meta)
                return
            with torch.no_grad():
                values = stats_tensors(t, kind)
                counts_t = nonfinite_counts(t) if kind == "float" else None
        self._pending.append((values, counts_t, meta, kind, t.numel()))

    def flush(self) -> None:
        """Compute the statistics of every held tensor now (before an op that may write
        into one of them in place, and at the end of the forward)."""
        if self._buckets:
            import torch

            with torch._C.DisableTorchFunction(), torch.no_grad():
                for bucket in self._buckets.values():
                    bucket.flush()
                    self.stale += bucket.stale
                    bucket.stale = 0
        if not self._held:
            return
        import torch

        held, self._held, self._held_bytes = self._held, {}, 0
        with torch._C.DisableTorchFunction(), torch.no_grad():
            for group in held.values():
                tensors = [t for t, _, _ in group]
                for t, _, version in group:
                    if t._version != version:
                        self.stale += 1
                try:
                    rows = float_rows(torch.stack(tensors).reshape(len(tensors), -1))
                except Exception:  # e.g. a tensor subclass torch.stack refuses: one by one
                    rows = [_cpu_stats(t.detach(), "float") for t in tensors]
                for (_, meta, _), row in zip(group, rows, strict=True):
                    meta.stats.update(row)

    def _queue(self, t: torch.Tensor, meta: TensorMeta) -> None:
        """Hold ``t`` in its device bucket (or reduce it where it lies, if large)."""
        import torch

        key = (t.device, t.dtype)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _RowBucket(t.device, t.dtype)
        bucket.add(t, meta)
        if not self.defer:  # after the forward (gradients): no interceptor sees writes
            with torch.no_grad():
                bucket.flush()

    def finish(self) -> None:
        """Copy every queued result to the host (once per device) and fill the metas.

        Per device, the row tables of its buckets and the per-tensor results of the
        other kinds travel as the bytes of one ``torch.cat`` (``Tensor.view`` as
        uint8) and one ``.cpu()``: the trace's single synchronisation for statistics.
        """
        import torch

        self.flush()
        with torch._C.DisableTorchFunction(), torch.no_grad():
            parts: dict[Any, list[tuple[Any, Any]]] = {}
            for bucket in self._buckets.values():
                tensors = bucket.results()
                part = parts.setdefault(bucket.device, [])
                collect = _Collect(len(tensors), bucket.read)
                part += [(x, collect.take) for x in tensors]
            for values, counts, meta, kind, numel in self._pending:
                reader = _Reader(meta, kind, numel, counts is not None)
                part = parts.setdefault(values.device, [])
                part.append((values, reader.values))
                if counts is not None:
                    part.append((counts, reader.counts))
            for items in parts.values():
                host = torch.cat([x.reshape(-1).view(torch.uint8) for x, _ in items]).cpu()
                pos = 0
                for x, read in items:
                    size = x.numel() * x.element_size()
                    read(host[pos : pos + size].clone().view(x.dtype).view(x.shape))
                    pos += size
        self._pending.clear()
        self._buckets.clear()


class _Collect:
    """Gathers ``n`` host tensors, then calls ``read`` with the list."""

    def __init__(self, n: int, read: Any) -> None:
        self.n, self.read = n, read
        self.got: list[Any] = []

    def take(self, host: torch.Tensor) -> None:
        self.got.append(host)
        if len(self.got) == self.n:
            self.read(self.got)


class _Reader:
    """Fills one meta from its per-tensor values and (floats) NaN/Inf counts."""

    def __init__(self, meta: TensorMeta, kind: StatsKind, numel: int, counted: bool) -> None:
        self.meta, self.kind, self.numel, self.counted = meta, kind, numel, counted
        self._values: list[Any] | None = None

    def values(self, host: torch.Tensor) -> None:
        self._values = host.tolist()
        if not self.counted:
            self.meta.stats.update(decode(self.kind, self.numel, self._values, None))

    def counts(self, host: torch.Tensor) -> None:
        assert self._values is not None
        self.meta.stats.update(decode(self.kind, self.numel, self._values, host.tolist()))


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


ROW = 4096
"""Row length for a tensor whose length has no power-of-two factor of at least
:data:`MIN_ROW` (the remainder is reduced on its own; see :func:`_one_pass`)."""

MIN_ROW, MAX_ROW = 1 << 11, 1 << 14
"""Bounds of the row length :func:`_one_pass` picks: long enough that the Python
reduction over rows stays small, short enough that a float32 ``vector_norm`` along a
row stays accurate (~1e-7 relative at 4096 elements; ~1e-4 at millions)."""

FEW_ROWS = 64
"""Up to this many rows, :func:`_one_pass` combines the row results in Python (one
``.tolist()``); above, with torch reductions (no Python loop over thousands)."""

ONE_PASS_FROM = 1 << 15
"""Contiguous float tensors with at least this many elements get the variance in one
pass (``E[x^2] - mean^2``) where that is accurate (:func:`_cpu_stats`); below, the
fewer torch calls of two passes cost less (measured at 16k and 32k elements)."""

ONE_PASS_RATIO = 0.8
"""The one-pass variance is used only when ``mean^2 <= ONE_PASS_RATIO * E[x^2]``, so
the variance is at least a fifth of ``E[x^2]`` and the cancellation loses at most a
factor of 5 of float32 accuracy (~1e-6 relative); otherwise two passes."""


_FUSED_CODES: dict[Any, int] = {}
"""torch dtype -> the extension's dtype code (0 float32, 1 float64, 2 bfloat16); filled
on the first :func:`fused_stats` call (torch is imported only when a trace needs it),
with the torch callables the hot path binds once (below)."""

_Tensor: Any = None
_strided: Any = None
_mode_enabled: Any = None
_disabled: Any = None


def _fill_fused_codes() -> None:
    import torch

    global _Tensor, _strided, _mode_enabled, _disabled
    _Tensor, _strided, _disabled = torch.Tensor, torch.strided, torch._C.DisableTorchFunction
    _mode_enabled = torch._C._is_torch_function_mode_enabled
    if _moments is not None:
        base = torch._C.TensorBase  # not torch.Tensor: the patch interceptor wraps those
        _moments.configure(
            base.numel,
            base.is_neg,
            base.is_contiguous,
            base.data_ptr,
            base.size,
            base.stride,
            ONE_PASS_RATIO,
            _FLOAT32_OVERFLOW,
        )
    _FUSED_CODES.update({torch.float32: 0, torch.float64: 1, torch.bfloat16: 2})


def fused_entry() -> tuple[Any, dict[Any, int]]:
    """``(tensor_stats, dtype codes)`` for the C recorder (``tracer._Trace.op_recorder``):
    the extension's ``tensor_stats`` (None where it is not built) and
    :data:`_FUSED_CODES`, filled."""
    if _moments is None:
        return None, {}
    if not _FUSED_CODES:
        _fill_fused_codes()
    return _moments.tensor_stats, _FUSED_CODES


def fused_stats(t: torch.Tensor) -> dict[str, float | int] | None:
    """Statistics of a floating CPU tensor in one pass over its memory, by the C
    extension (:data:`FUSED`); None when it does not apply, and the caller computes them
    with torch instead.

    Args:
        t: a strided floating CPU tensor.

    Returns:
        ``{"mean", "std", "min", "max", "nan", "inf"}`` (population std, counts 0), or
        None: extension not built, dtype other than float32/float64/bfloat16, no
        elements, not dense (:func:`dense_flat`), a negative view, no data pointer (a
        wrapper subclass), a data pointer not aligned to the element size
        (``torch.frombuffer`` at an odd offset), or a NaN/Inf among the values or in
        the sums (torch then gives the exact NaN and Inf semantics and counts).

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
    if _moments is None:
        return None
    if not _FUSED_CODES:
        _fill_fused_codes()
    code = _FUSED_CODES.get(t.dtype)
    if code is None or t.layout is not _strided or t.is_nested:
        return None
    if type(t) is _Tensor and not _mode_enabled():
        return _moments.tensor_stats(t, code)
    with _disabled():
        return _moments.tensor_stats(t, code)


def _cpu_stats(x: torch.Tensor, kind: StatsKind) -> dict[str, float | int]:
    """Statistics of a detached CPU tensor, read out at once, with torch reductions (see
    the module docstring; :meth:`StatsBatch.add` tries :func:`fused_stats` first).

    Floats: for contiguous tensors of :data:`ONE_PASS_FROM` elements or more, sum, sum of
    squares, min and max along rows (:func:`_one_pass`), and the variance as
    ``E[x^2] - mean^2`` where :data:`ONE_PASS_RATIO` says it is accurate: a third of
    the memory traffic of two passes, on the large activations of convolutional
    models. Otherwise the mean is the float32 quotient of the float32 sum (as
    ``Tensor.mean`` computes it on CPU), min and max come from one ``torch.aminmax``,
    and the squared deviations take a second pass (``x - mean`` and a dot product, in
    chunks of :data:`CHUNK` for large contiguous tensors). Few torch calls, read out
    with one ``.tolist()``: the per-call overhead (1-2 us each) dominates small
    tensors. The caller runs this under ``DisableTorchFunction``; ``x`` is detached,
    so nothing joins an autograd graph.
    """
    import torch

    if kind == "bool":
        return decode(kind, 1, [x.sum().item()], None)
    n = x.numel()
    if kind == "int":
        mn_t, mx_t = torch.aminmax(x)
        return decode(kind, n, [mn_t.item(), mx_t.item(), x.sum(dtype=torch.int64).item()], None)
    with torch.no_grad():
        if x.dtype not in (torch.float32, torch.float64):
            x = x.float()  # half types: float32 keeps the sums from overflowing
        one_pass = n >= ONE_PASS_FROM and x.is_contiguous()
        if one_pass:
            total, squares, lo, hi = _one_pass(x.view(-1))
            mean = total / n
            ex2 = squares / n
        else:
            total, lo, hi = torch.stack([x.sum(), *torch.aminmax(x)]).tolist()
            mean = total / n if x.dtype == torch.float64 else _float32(total / n)
        finite = -_INF < lo and hi < _INF  # False for NaN too
        if x.dtype != torch.float64 and abs(total) > _FLOAT32_OVERFLOW:
            # a float32 sum beyond float32's range (masks of finfo(float32).min) is Inf,
            # though the one-pass path combines its rows in float64: as fused_stats and
            # the device path report it
            mean = math.copysign(_INF, total)
        # one pass only where its norm did not overflow (Inf - Inf would be NaN, where
        # the two passes give the std Inf, as Tensor.std does)
        if one_pass and finite and ex2 < _INF and mean * mean <= ONE_PASS_RATIO * ex2:
            ssd = (ex2 - mean * mean) * n
        else:
            ssd = _squared_deviations(x, mean)
        if x.dtype != torch.float64 and finite and -_INF < mean < _INF:
            ssd = _float32_ssd(x, ssd)
    counts = None if finite else nonfinite_counts(x).tolist()
    return decode(kind, n, [mean, ssd, lo, hi], counts)


def _row_length(n: int) -> int:
    """The largest power of two in [MIN_ROW, MAX_ROW] dividing ``n``, else :data:`ROW`."""
    row = MAX_ROW
    while row >= MIN_ROW:
        if n % row == 0:
            return row
        row //= 2
    return ROW


def _one_pass(flat: torch.Tensor) -> tuple[float, float, float, float]:
    """``(sum, sum of squares, min, max)`` of a 1-d contiguous float tensor of more
    than :data:`MAX_ROW` elements, as Python floats.

    Each is taken along rows of :func:`_row_length` elements (``sum``,
    ``vector_norm``, ``amin``, ``amax`` with ``dim=1``: about 0.2 ns per element on
    one core, against 0.5 for two passes), then over the rows in float64; a
    remainder shorter than a row is reduced on its own. NaN propagates into min and
    max, as in ``torch.aminmax``.
    """
    import torch

    n = flat.numel()
    row = _row_length(n)
    m = n // row
    rows = flat[: m * row].view(m, row)
    norms = torch.linalg.vector_norm(rows, dim=1)
    if m <= FEW_ROWS:  # few rows: combine them in Python, fewer torch calls
        table = torch.stack([rows.sum(1), norms, rows.amin(1), rows.amax(1)]).tolist()
        sums, row_norms, mins, maxs = table
        total = sum(sums)
        squares = sum(v * v for v in row_norms)
        nan = any(v != v for v in mins) or any(v != v for v in maxs)
        lo, hi = (math.nan, math.nan) if nan else (min(mins), max(maxs))
    else:
        norms = norms.double()
        total, squares, lo, hi = torch.stack(
            [
                rows.sum(1).double().sum(),
                torch.dot(norms, norms),
                rows.amin(1).min().double(),
                rows.amax(1).max().double(),
            ]
        ).tolist()
    if m * row < n:
        rest = flat[m * row :]
        r_total, r_norm, r_lo, r_hi = torch.stack(
            [rest.sum(), torch.linalg.vector_norm(rest), *torch.aminmax(rest)]
        ).tolist()
        total += r_total
        squares += r_norm * r_norm
        if lo != lo or hi != hi or r_lo != r_lo or r_hi != r_hi:  # NaN somewhere
            lo = hi = math.nan
        else:
            lo, hi = min(lo, r_lo), max(hi, r_hi)
    return total, squares, lo, hi


def _float32_ssd(x: torch.Tensor, ssd: float) -> float:
    """The float32 rule for the sum of squared deviations ``ssd`` of a float32 tensor
    ``x`` of finite values and finite mean: Inf when the exact sum is beyond float32's
    range (as the C extension, :func:`fused_stats`, and the device path report it:
    ``var * numel > FLT_MAX``), else the sum itself.

    A float32 pass (:func:`_squared_deviations`) that overflowed is redone in float64
    about the float64 mean (:func:`_squared_deviations_wide`): its squares can overflow
    when the exact sum does not, e.g. a constant tensor of -1e30 (RWKV's masks), whose
    float32 mean is one unit in the last place off its values (a deviation of 6e22,
    squared 4e45), where the exact sum is 0.
    """
    if not ssd < _INF:
        ssd = _squared_deviations_wide(x)
    return _INF if ssd > _FLOAT32_OVERFLOW else ssd


def _squared_deviations_wide(x: torch.Tensor) -> float:
    """Sum of ``(x - mean)**2`` in float64 about the float64 mean of ``x`` (float32
    values): in chunks of :data:`CHUNK` elements for a large contiguous tensor, so at
    most a chunk is widened at a time."""
    import torch

    n = x.numel()
    if n > CHUNK and x.is_contiguous():
        flat = x.view(-1)
        mean = flat.sum(dtype=torch.float64).item() / n
        ssd = 0.0
        for start in range(0, n, CHUNK):
            d = flat.narrow(0, start, min(CHUNK, n - start)).double() - mean
            ssd += torch.dot(d, d).item()
        return ssd
    d = x.double().reshape(-1)
    d -= d.mean()
    return float(torch.dot(d, d).item())


def _squared_deviations(x: torch.Tensor, mean: float) -> float:
    """Sum of ``(x - mean)**2`` in ``x``'s precision: in chunks of :data:`CHUNK`
    elements for a large contiguous tensor (no full-size temporary)."""
    import torch

    if x.numel() > CHUNK and x.is_contiguous():
        flat = x.view(-1)
        ssd = 0.0
        for start in range(0, flat.numel(), CHUNK):
            d = flat.narrow(0, start, min(CHUNK, flat.numel() - start)) - mean
            ssd += torch.dot(d, d).item()
        return ssd
    d = (x - mean).reshape(-1)  # keeps x's strides: a copy only if x is permuted
    return float(torch.dot(d, d).item())
