"""Statistics on a device (CUDA, or any device where the batched path is forced):
large tensors reduced where they lie, the others held in buckets and reduced in rows.

docs/capture.md, "Statistics", says how and why.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ...ir import TensorMeta
from .kinds import FLOAT32_OVERFLOW, StatsKind, decode

# -- the path's tuned constants (benchmarks/README.md, "Statistics constants", gives
# each value's measurement) -----------------------------------------------------------

FLUSH_BYTES = 16 << 20
"""Bytes of tensors a bucket holds before it copies them into rows (one
``torch._chunk_cat``) and reduces them (:func:`row_table`): bounds the extra device
memory of a trace by about twice this (the held tensors and their copy)."""

DIRECT_FROM = 1 << 21
"""A float32/float64 tensor of at least this many elements is reduced where it lies,
on its own (``torch.var_mean``, ``torch.aminmax`` and its NaN/Inf counts: six
kernels, no copy); a settled one (a parameter, nothing writes it before the end of
the trace) from half this size, without its counts (two kernels). Smaller ones are
held and reduced with others (a share of one join and six kernels per bucket)."""

ROW_CLASSES = (1 << 12, 256, 64)
"""Row lengths of the joins of held tensors: a tensor joins the longest that divides
its element count, so a row holds one tensor's values only and no tensor is sliced.
The first is also the row length of the tensors no class divides (cut into rows and
a remainder) and of a widened half-type tensor's chunks: long enough that few rows
travel to the host, short enough that a float32 reduction along a row stays accurate
(about 1e-7 relative). Each class costs one copy and six kernels per flush."""

REPEAT_UP_TO = 1 << 19
"""A floating or bool tensor whose element count no row class divides joins the
shortest class as that many copies of itself (references, no kernel; the join copies
each) when that makes at most this many elements: its statistics are those of the
copies, with the counts divided by their number. Bounds the copy; larger such tensors
are cut into rows (:meth:`RowBucket._cut`)."""

ROW_LENGTH = ROW_CLASSES[0]
"""The row length of the cut tensors and of widened chunks (see :data:`ROW_CLASSES`)."""

SETTLED_FROM = DIRECT_FROM // 2
"""Settled tensors of at least this many elements are reduced where they lie (see
:data:`DIRECT_FROM`)."""

COUNT_CHUNK = FLUSH_BYTES // 4
"""Elements per chunk when a large dense tensor's NaN and Inf are counted: each count
makes a bool temporary of that many bytes, a quarter of :data:`FLUSH_BYTES`."""


def row_table(rows: torch.Tensor, kind: StatsKind = "float") -> torch.Tensor:
    """Statistics of each row of an ``(m, r)`` tensor: floats (``r`` is ``ROW_LENGTH``
    or a remainder's length) in six kernels, integers (:data:`EXACT_DTYPES`) and bools
    exactly, in two kernels or one.

    Returns:
        Floats: an ``(m, 6)`` tensor of ``rows``' dtype on its device: mean, variance
        (population), min, max, NaN count, Inf count per row. The mean and variance
        come from ``torch.var_mean`` (one pass, Welford's update on CUDA: accurate
        when ``|mean| >> std``), min and max from ``torch.aminmax``. Integers: an
        ``(m, 3)`` int64 tensor of min, max and sum per row; bools: an ``(m, 1)``
        int64 tensor of the count of True.

    The caller runs this under ``DisableTorchFunction`` and ``no_grad``.
    """
    if kind == "float":
        var, mean = torch.var_mean(rows, dim=1, correction=0)
        lo, hi = torch.aminmax(rows, dim=1)
        nan = torch.isnan(rows).sum(1, dtype=rows.dtype)
        inf = torch.isinf(rows).sum(1, dtype=rows.dtype)
        return torch.stack([mean, var, lo, hi, nan, inf], 1)
    total = rows.sum(1, dtype=torch.int64, keepdim=True)
    if kind == "bool":
        return total
    lo, hi = torch.aminmax(rows, dim=1, keepdim=True)
    return torch.cat([lo.long(), hi.long(), total], 1)


EXACT_DTYPES = frozenset({torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})
"""The integer dtypes the device buckets take as they are (reduced in int64, which holds
every value of these); other integer dtypes (``uint16``, ``uint32``, ``uint64``) are
converted to int64 first."""


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
        if size != 1 and stride != expected:
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


def nonfinite_counts_chunked(x: torch.Tensor) -> list[torch.Tensor]:
    """``[nan count, inf count]`` of ``x`` as 0-d int64 tensors on its device, chunked
    by :data:`COUNT_CHUNK` for a dense tensor (:func:`dense_flat`) so that no bool
    temporary is larger than that."""
    flat = dense_flat(x) if x.numel() > COUNT_CHUNK else None
    if flat is None:
        return [torch.isnan(x).sum(), torch.isinf(x).sum()]
    chunks = torch.split(flat, COUNT_CHUNK)
    return [torch.stack([f(c).sum() for c in chunks]).sum() for f in (torch.isnan, torch.isinf)]


def join_class(n: int, repeat: bool) -> tuple[int, int]:
    """``(row length, copies)`` a held tensor of ``n`` elements joins with: the longest
    of :data:`ROW_CLASSES` that divides ``n``; where none does and ``repeat`` (floats
    and bools, whose statistics copies do not change), the shortest class as ``copies``
    copies of itself when that makes at most :data:`REPEAT_UP_TO` elements; else
    ``(0, 1)`` (its rows are cut: :meth:`RowBucket._cut`)."""
    factor = n & -n
    row = next((row for row in ROW_CLASSES if factor >= row), 0)
    copies = ROW_CLASSES[-1] // factor
    if row == 0 and repeat and n * copies <= REPEAT_UP_TO:
        return ROW_CLASSES[-1], copies
    return row, 1


def combine_moments(
    owner: torch.Tensor, k: int, n: torch.Tensor, mean: torch.Tensor, m2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine parts' moments into their owners' (Chan, Golub and LeVeque's parallel
    formula): the one combination of the batched rows and of cross-rank statistics.

    Args:
        owner: ``[p]`` int64, the index in ``range(k)`` of the tensor each part is of.
        k: how many tensors.
        n, mean, m2: ``[p]`` float64, each part's element count, mean and sum of
            squared deviations from its mean.

    Returns:
        ``([k] mean, [k] sum of squared deviations)`` of each tensor's parts together,
        float64; NaN for a tensor without elements.
    """

    def total(values: torch.Tensor) -> torch.Tensor:
        return torch.zeros(k, dtype=torch.float64).index_add_(0, owner, values)

    combined = total(mean * n) / total(n)
    d = mean - combined[owner]
    return combined, total(m2 + n * d * d)


Runs = list[tuple[int, int]]
"""Which tensors the rows of a table hold, in row order: runs of ``(tensor index,
rows)``."""


class RowBucket:
    """Floating tensors of one device and dtype, reduced together in float32 (float64
    for float64 tensors); see :class:`StatsBatch`.

    A tensor of :data:`DIRECT_FROM` elements or more (a settled one, of
    :data:`SETTLED_FROM`) is reduced at once: where it lies (float32/float64,
    ``torch.var_mean`` and ``torch.aminmax``), or widened in chunks (half types,
    :meth:`_stream`). Smaller ones are held (a reference and their ``_version``) in the
    class of their row length (:func:`join_class`). Before any call that may write in
    place (:meth:`flush`, not ``final``) each class's held tensors are copied into one
    buffer by one ``torch._chunk_cat`` (flattened in their logical order, any strides) and let
    go. When :data:`FLUSH_BYTES` are held or copied (their share of the float buffer,
    plus once the base that held views keep alive), and at the end (:meth:`flush`),
    each class's copies and held tensors are joined by one more ``torch._chunk_cat``,
    viewed as rows of the class's length and reduced row by row (:func:`row_table`).
    Tensors whose count no class divides are cut into whole rows of
    :data:`ROW_LENGTH` and a remainder, copied by one ``torch.cat`` per distinct
    length, at each snapshot. Only the results (six numbers per row or tensor) stay on
    the device until :meth:`read` combines them per tensor on the host, in float64
    (Chan et al.'s pairwise update for the variance).

    Attributes:
        stale: held tensors whose ``_version`` moved before they were copied.
    """

    def __init__(self, device: Any, src: Any, kind: StatsKind = "float") -> None:
        self.device = device
        self.kind = kind  # floats, or integers (EXACT_DTYPES) and bools
        if kind == "float":  # src: the dtype of the tensors it takes
            self.dtype = torch.float64 if src == torch.float64 else torch.float32
        else:  # rows reduced in int64 (bools: as they are, summed in int64)
            self.dtype = torch.bool if kind == "bool" else torch.int64
        # floats of the rows' dtype, which var_mean reduces where they lie (no integers)
        self.in_place = kind == "float" and src == self.dtype
        self.itemsize = self.dtype.itemsize
        self.joins: dict[int, tuple[int, int]] = {}  # element count -> join_class's
        # answer: one lookup per held tensor
        self.held: dict[int, list[tuple[Any, int, int]]] = {}  # row length (0: none
        # divides) -> (tensor, index, version)
        # row length -> copies of held tensors, each with its runs
        self.snaps: dict[int, list[tuple[Any, Runs]]] = {}
        self.held_bytes = 0
        self.bases: set[int] = set()  # ids of the bases held views keep alive, counted
        # row tables on the device, each with its runs and row length
        self.tables: list[tuple[Any, Runs, int]] = []
        self.direct: list[tuple[int, Any]] = []  # (index, None) of the tensors reduced
        # where they lay, (index, tensor) of the settled ones (reduced without their
        # NaN/Inf counts: see add); their results, and the counts of the others
        self.direct_values: list[Any] = []
        self.direct_counts: list[Any] = []
        self.copies: dict[int, int] = {}  # tensor index -> how many times it is joined
        # (REPEAT_UP_TO)
        self.metas: list[TensorMeta] = []
        self.numels: list[int] = []
        self.stale = 0

    def add(self, t: torch.Tensor, meta: TensorMeta, settled: bool = False) -> None:
        """Take ``t`` for ``meta`` (see the class). ``settled``: nothing writes ``t``
        before :meth:`read` (the parameters after the forward), so a large one is
        reduced without its NaN/Inf counts, which :meth:`read` takes only where its
        min, max or mean is not finite."""
        index = len(self.metas)
        self.metas.append(meta)
        n = t.numel()
        self.numels.append(n)
        if n >= DIRECT_FROM or (settled and self.in_place and n >= SETTLED_FROM):
            if self.kind == "float" and not self.in_place:
                self._stream(t, index)
            else:
                self._alone(t, index, settled and self.in_place)
            return
        join = self.joins.get(n)
        if join is None:  # int64 sums of copies could wrap: integers are not repeated
            join = self.joins[n] = join_class(n, self.kind != "int")
        row, copies = join
        if copies > 1:
            self.copies[index] = copies
        if row and not t.dim():
            t = t.view(1)  # torch._chunk_cat takes no 0-d tensor
        self.held.setdefault(row, []).append((t, index, t._version))
        size = n * copies * self.itemsize  # its part of the buffer the flush fills
        base = t._base  # a view keeps its base alive: count the base, once
        if base is not None and base.numel() > n and id(base) not in self.bases:
            self.bases.add(id(base))
            size += base.numel() * base.dtype.itemsize
        self.held_bytes += size
        if self.held_bytes >= FLUSH_BYTES:
            with torch.no_grad():
                self.flush()

    def _stream(self, t: torch.Tensor, index: int) -> None:
        """A large half-type tensor, widened and reduced in chunks of at most
        :data:`FLUSH_BYTES` of float32 rows (a whole widened copy could be twice the
        tensor): :meth:`_cut` of each chunk, so the same rows as one cut would give."""
        flat = dense_flat(t)
        if flat is None:
            flat = t.reshape(-1)  # expanded or sliced: copied, in its own dtype
        step = max(1, FLUSH_BYTES // (self.itemsize * ROW_LENGTH)) * ROW_LENGTH  # chunk length
        with torch.no_grad():
            for chunk in torch.split(flat, step):
                self._cut([(chunk, index)])

    def _alone(self, t: torch.Tensor, index: int, settled: bool = False) -> None:
        """Reduce one tensor now, on its own (and once): floats where they lie
        (``torch.var_mean``, ``torch.aminmax``, :func:`nonfinite_counts_chunked`; a half
        type widened first), integers and bools as one row (a copy where they are not dense).
        ``settled`` (a float of the rows' dtype, see :meth:`add`): without its NaN/Inf
        counts, which :meth:`read` takes from the tensor kept, where needed."""
        if self.kind == "float":
            with torch.no_grad():
                t = t.to(self.dtype)
                var, mean = torch.var_mean(t, correction=0)  # any strides: two kernels
                self.direct_values += [mean, var, *torch.aminmax(t)]  # as read() takes them
                if not settled:
                    self.direct_counts += nonfinite_counts_chunked(t)
            self.direct.append((index, t if settled else None))
            return
        self.copies.pop(index, None)  # one row: its copies no longer count
        row = t.detach().reshape(1, -1)
        self.tables.append((row_table(row, self.kind), [(index, 1)], row.shape[1]))

    def flush(self, final: bool = True) -> None:
        """``final`` (the default: at the end, or when :data:`FLUSH_BYTES` are held):
        join each class's copies and held tensors (one ``torch._chunk_cat``, each
        tensor as many times as it is joined: :data:`REPEAT_UP_TO`), view them as rows
        and reduce them (results kept on the device). Not ``final`` (before a call that
        may write in place): copy each class's held tensors into one buffer (one
        ``torch._chunk_cat``) and let them go, reducing nothing. Either way the tensors
        no class divides are reduced (:meth:`_cut`), and the held tensors written since
        they were added are counted in :attr:`stale`. If a join or a cut fails (a tensor
        subclass ``torch._chunk_cat`` or ``torch.cat`` refuses), the copies are reduced as
        they are and each held tensor on its own (:meth:`_alone`)."""
        rows = set(self.held).union(self.snaps if final else ())
        for row in sorted(rows, reverse=True):
            held = self.held.pop(row, [])
            self.stale += sum(t._version != version for t, _, version in held)
            snaps = self.snaps.pop(row, []) if final else []  # none for row 0
            done = len(self.tables)
            try:  # a failure leaves no table of this row behind
                if row == 0:
                    self._cut(held)
                    continue
                parts: list[Any] = [copy for copy, _ in snaps]
                runs = [run for _, copy_runs in snaps for run in copy_runs]
                for t, index, _ in held:
                    copies = self.copies.get(index, 1)
                    parts += [t] * copies
                    runs.append((index, t.numel() * copies // row))
                if final:  # one join and one table
                    self._reduce(parts, runs, row, join=True)
                else:
                    self.snaps.setdefault(row, []).append((torch._chunk_cat(parts, 0, 1), runs))
            except Exception:  # e.g. a tensor subclass torch.cat refuses: each on its own
                del self.tables[done:]
                for copy, copy_runs in snaps:  # plain tensors: their rows as they are
                    table = row_table(copy.view(-1, row).to(self.dtype), self.kind)
                    self.tables.append((table, copy_runs, row))
                for t, index, _ in held:
                    self._alone(t, index)
        self.bases.clear()
        self.held_bytes = sum(c.nbytes for pairs in self.snaps.values() for c, _ in pairs)

    def _cut(self, held: list[tuple[Any, ...]]) -> None:
        """Reduce tensors no row class divides: each tensor's whole rows of
        :data:`ROW_LENGTH` go into one buffer (one ``torch.cat``); its remainder (the
        whole tensor, if shorter than a row) into a table of the remainders of that
        length (one ``torch.cat`` per distinct length). No padding, so no masks and
        nothing copied from the host."""
        # row length -> pieces and runs; the whole rows first, then each remainder length
        groups: dict[int, tuple[list[Any], Runs]] = {ROW_LENGTH: ([], [])}
        for t, index, *_ in held:  # (tensor, index, and from flush its version)
            whole, m, rest = _rows_and_rest(t, ROW_LENGTH)
            for piece, rows in ((whole, m), (rest, 1)):
                if piece is not None:
                    group = groups.setdefault(piece.shape[0] // rows, ([], []))
                    group[0].append(piece)
                    group[1].append((index, rows))
        for row, (pieces, runs) in groups.items():
            if runs:
                self._reduce(pieces, runs, row)

    def _reduce(self, pieces: list[Any], runs: Runs, row: int, join: bool = False) -> None:
        """Copy ``pieces`` into one buffer of ``row``-element rows (``join``: whole
        tensors or earlier copies, by ``torch._chunk_cat``; else 1-d pieces of whole
        rows, by ``torch.cat``) and reduce it (:func:`row_table`). One contiguous piece
        is reduced where it lies (widened first where its dtype is not the rows')."""
        if len(pieces) == 1 and pieces[0].is_contiguous():
            buf = pieces[0]  # one copy already joined, or one contiguous tensor or piece
        elif join:
            buf = torch._chunk_cat(pieces, 0, 1)
        else:  # cat copies input by input into an out= of another dtype: widen after
            buf = torch.cat(pieces)
        buf = buf.to(self.dtype)  # rows as they are where the dtype is the rows'
        self.tables.append((row_table(buf.view(-1, row), self.kind), runs, row))

    def results(self) -> list[torch.Tensor]:
        """The device tensors :meth:`read` needs, in its order (after :meth:`flush`):
        the row tables joined (one ``torch.cat``), then the per-tensor results."""
        tables = [table for table, _, _ in self.tables]
        out = [torch.cat(tables)] if len(tables) > 1 else tables
        if self.direct:
            out.append(torch.stack(self.direct_values))
        if self.direct_counts:
            out.append(torch.stack(self.direct_counts))
        return out

    def _row_owners(self) -> tuple[torch.Tensor, torch.Tensor]:
        """For each row of the joined tables, the index of the tensor it holds (int64)
        and its length (float64)."""
        runs = [(i, c, row) for _, runs, row in self.tables for i, c in runs]
        index, counts, lengths = (torch.tensor(column) for column in zip(*runs, strict=True))
        return index.repeat_interleave(counts), lengths.double().repeat_interleave(counts)

    def _copies(self, dtype: Any) -> torch.Tensor:
        """Per tensor, how many times its rows were joined (:data:`REPEAT_UP_TO`)."""
        return torch.tensor([self.copies.get(i, 1) for i in range(len(self.metas))], dtype=dtype)

    def read(self, host: list[torch.Tensor]) -> None:
        """Combine the host copies of :meth:`results` per tensor, in float64, and fill
        each meta's statistics."""
        if self.kind != "float":  # its tensors all in the row tables
            self._read_exact(host[0])
            return
        first = 1 if self.tables else 0  # the joined row tables, then the rest
        k = len(self.metas)
        numel = torch.tensor(self.numels, dtype=torch.float64)
        out = torch.zeros(k, 6, dtype=torch.float64)
        if self.tables:
            table = host[0].double()
            seg, n_row = self._row_owners()
            mean_r, var_r, lo_r, hi_r = table[:, :4].unbind(1)

            copies = self._copies(torch.float64)
            out[:, 0], deviations = combine_moments(seg, k, n_row, mean_r, var_r * n_row)
            out[:, 1] = deviations / copies  # sum of squared deviations, of one copy
            out[:, 2].scatter_reduce_(0, seg, lo_r, "amin", include_self=False)
            out[:, 3].scatter_reduce_(0, seg, hi_r, "amax", include_self=False)
            out[:, 4:].index_add_(0, seg, table[:, 4:]).div_(copies[:, None])  # NaN, Inf
        if self.direct:  # [mean, var, min, max] each (the variance as a sum of squared
            # deviations), then the counts of those not settled
            rows = torch.tensor([i for i, _ in self.direct])
            values = host[first].double().view(-1, 4)
            out[rows, :4] = values
            out[rows, 1] *= numel[rows]
            if self.direct_counts:
                counted = [i for i, t in self.direct if t is None]
                out[counted, 4:] = host[first + 1].double().view(-1, 2)
            unsure = (~torch.isfinite(values)).any(1).tolist()
            for (i, t), unknown in zip(self.direct, unsure, strict=True):
                if t is not None and unknown:  # NaN or Inf shows in a settled one's mean
                    out[i, 4:] = torch.stack(nonfinite_counts_chunked(t)).double()
        mean, m2, lo, hi, nan, inf = out.unbind(1)
        if self.dtype == torch.float32:
            # as the CPU path's float32 sum gives them (masks filled with
            # finfo(float32).min): a sum beyond float32's range is +-Inf, so the mean
            # is too, and every deviation from it, so the std is Inf
            summed = mean * numel
            over = summed.abs() > FLOAT32_OVERFLOW
            mean = torch.where(over, torch.copysign(torch.tensor(math.inf), summed), mean)
            # and so is a sum of squared deviations beyond float32's range (_float32_ssd)
            m2 = torch.where(over | (m2 > FLOAT32_OVERFLOW), math.inf, m2)
        # as a plain sum would give them (Welford's update makes NaN of an Inf): the
        # mean of values with Inf is +-Inf (NaN with both signs), their std NaN; with
        # an Inf among the values, max + min is the infinite one, or NaN for both signs
        mean = torch.where(inf > 0, hi + lo, mean)
        m2 = torch.where(inf > 0, math.nan, m2)
        nan_found = nan > 0  # NaN propagates into all four
        mean, m2, lo, hi = (torch.where(nan_found, math.nan, v) for v in (mean, m2, lo, hi))
        rows_out = torch.stack([mean, m2, lo, hi, nan, inf], 1).tolist()
        for meta, n, row in zip(self.metas, self.numels, rows_out, strict=True):
            meta.stats.update(decode("float", n, row))

    def _read_exact(self, table: torch.Tensor) -> None:
        """Integers and bools: each tensor's rows combined on the host, exactly (the
        int64 sum wraps as ``torch.sum`` in int64 does)."""
        k = len(self.metas)
        seg, _ = self._row_owners()
        total = torch.zeros(k, dtype=torch.int64).index_add_(0, seg, table[:, -1])
        if self.copies:  # bools joined as copies of themselves
            total //= self._copies(torch.int64)
        if self.kind == "bool":
            rows = total[:, None].tolist()
        else:
            lo = total.new_zeros(k).scatter_reduce_(0, seg, table[:, 0], "amin", include_self=False)
            hi = total.new_zeros(k).scatter_reduce_(0, seg, table[:, 1], "amax", include_self=False)
            rows = torch.stack([lo, hi, total], 1).tolist()
        for meta, n, values in zip(self.metas, self.numels, rows, strict=True):
            meta.stats.update(decode(self.kind, n, values))
