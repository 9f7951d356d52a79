"""Per-tensor statistics, computed on the tensor's device: :class:`StatsBatch`, the
facade the tracer calls for every new tensor it records.

The CPU path (:mod:`.cpu`), the device path (:mod:`.device`) and the kinds and
decoding they share (:mod:`.kinds`); docs/capture.md, "Statistics", says which tensor
takes which way. All torch calls here run under ``torch._C.DisableTorchFunction`` and
``torch.no_grad``, so they are never recorded as graph ops and never extend the
autograd graph.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ...ir import TensorMeta
from ..nested import nested_values
from . import cpu, device
from .cpu import cpu_stats, float_rows, fused_stats
from .device import RowBucket, batched_exactly, dense_flat
from .kinds import KINDS, StatsKind, decode, kind_of, nonfinite_counts, stats_kind, stats_tensors

if TYPE_CHECKING:
    import torch

try:  # the optional C extension (setup.py); without it, torch reductions only
    from .. import _moments
except ImportError:  # pragma: no cover - depends on how the package was built
    _moments = None  # type: ignore[assignment]

FUSED = _moments is not None
"""Whether the C extension ``pytest_graphir.capture._moments`` is built here: then dense
float32, float64 and bfloat16 CPU tensors get their statistics in one pass over their
memory (:func:`fused_stats`); otherwise (no C compiler when the package was installed)
with torch reductions, which give the same numbers within float rounding."""

__all__ = [
    "FUSED",
    "StatsBatch",
    "StatsKind",
    "decode",
    "dense_flat",
    "device_path_forced",
    "fused_stats",
    "nonfinite_counts",
    "stats_kind",
    "stats_tensors",
]


DEVICE_PATH_VARIABLE = "GRAPHIR_STATS_DEVICE_PATH"
"""The environment variable that, set to ``1``, sends every tensor down the device path
(:class:`.device.RowBucket`), the CPU's included: what ``StatsBatch(batched=True)``
does, for tests and benchmarks that run the device path where no GPU is."""


def device_path_forced() -> bool:
    """Whether :data:`DEVICE_PATH_VARIABLE` is ``1`` in the environment (read at each
    :class:`StatsBatch`, so a test can set it with ``monkeypatch.setenv``)."""
    return os.environ.get(DEVICE_PATH_VARIABLE) == "1"


class StatsBatch:
    """Computes statistics during a trace and fills each :class:`TensorMeta`.

    CPU tensors: small floating ones are held and computed in batches of one dtype
    and size (:func:`float_rows`) when :data:`.cpu.CPU_FLUSH_BYTES` are held, at
    :meth:`flush` and at :meth:`finish`; others at once. Other devices (CUDA):
    floating tensors go to a :class:`RowBucket` per device and accumulation dtype
    (large ones reduced at once where they lie, others held until
    :data:`FLUSH_BYTES`, :meth:`flush` or :meth:`finish`), and every result reaches
    the host at :meth:`finish`, with one copy per device (docs/capture.md, "Statistics").

    Args:
        batched: ``None`` (default): batch floating tensors on devices other than the
            CPU, where per-tensor reductions are launch-bound, and use the CPU path
            on the CPU (its own batching costs less there than a ``cat`` into
            rows); the environment variable ``GRAPHIR_STATS_DEVICE_PATH=1``
            (:func:`device_path_forced`) makes ``None`` mean ``True``. ``True``: the
            device path on every device (tests and benchmarks run it on the CPU this
            way); ``False``: never.

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
        settled: the tensors added now are not written before :meth:`finish` (the
            parameters, after the forward): on the device path a large one is then
            reduced without its NaN/Inf counts, which are taken at :meth:`finish`
            only where its min, max or mean is not finite.
    """

    def __init__(self, batched: bool | None = None) -> None:
        import torch

        if batched is None and device_path_forced():
            batched = True
        self._strided = torch.strided
        self._pending: list[tuple[Any, Any, TensorMeta, StatsKind, int]] = []
        self._batched = batched
        self._buckets: dict[tuple[Any, Any], RowBucket] = {}
        self._held: dict[tuple[Any, Any], list[tuple[Any, TensorMeta, int]]] = {}
        self._held_bytes = 0
        self.defer = True
        self.settled = False
        self.stale = 0

    def add(self, t: torch.Tensor, meta: TensorMeta) -> None:
        """Compute, hold (small CPU tensors) or queue (other devices) the statistics of
        ``t`` into ``meta``."""
        batched = self._batched
        if batched is not True and t.is_cpu:
            if _moments is not None:
                # the hot path: one pass of the C extension where it applies (FUSED) ...
                fused = fused_stats(t)
                if fused is not None:
                    meta.stats.update(fused)
                    return
        elif (
            batched is not False
            and KINDS.get(t.dtype) == "float"
            and t.layout is self._strided
            and not t.is_nested
            and not t.is_meta
            and t.numel()
        ):  # the device path's hot path: a floating tensor joins its bucket
            self._queue(t, meta, "float")
            return
        self.add_unfused(t, meta)

    def add_unfused(self, t: torch.Tensor, meta: TensorMeta) -> None:
        """:meth:`add` where the C extension does not apply or has declined ``t``
        (:func:`fused_stats` gave None)."""
        import torch

        if t.is_nested:  # its components' elements together, copied (capture/nested.py)
            t = nested_values(t)
        dtype = t.dtype
        if dtype not in KINDS:
            kind_of(t)  # fills KINDS, which the check below reads
        if (
            self.defer
            and KINDS.get(dtype) == "float"
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
            if 0 < numel <= cpu.DEFER_ELEMENTS and size <= cpu.DEFER_BYTES:
                key = (dtype, t.shape)
                group = self._held.get(key)
                if group is None:
                    group = self._held[key] = []
                group.append((t, meta, t._version))
                self._held_bytes += size
                if self._held_bytes >= cpu.CPU_FLUSH_BYTES:
                    self._cpu_flush()
                return
        kind = kind_of(t)
        if kind is None:
            return
        if t.is_cpu and not self._batched:
            with torch._C.DisableTorchFunction():
                meta.stats.update(cpu_stats(t.detach(), kind))
            return
        with torch._C.DisableTorchFunction():
            if self._batched is not False and (
                kind == "float" or (t.numel() < device.DIRECT_FROM and batched_exactly(dtype))
            ):
                self._queue(t, meta, kind)
                return
            with torch.no_grad():
                values = stats_tensors(t, kind)
                counts_t = nonfinite_counts(t) if kind == "float" else None
        self._pending.append((values, counts_t, meta, kind, t.numel()))

    def flush(self) -> None:
        """Take the statistics of every held tensor now, or a copy of it (before an op
        that may write into one of them in place, and at the end of the forward): CPU
        tensors are computed, device buckets copy what they hold
        (:meth:`.device.RowBucket.snapshot`)."""
        self._device_flush(final=False)
        self._cpu_flush()

    def _device_flush(self, final: bool) -> None:
        """Snapshot (``final`` False) or reduce (True) every device bucket."""
        if self._buckets:
            import torch

            with torch._C.DisableTorchFunction(), torch.no_grad():
                for bucket in self._buckets.values():
                    if final:
                        bucket.flush()
                    else:
                        bucket.snapshot()
                    self.stale += bucket.stale
                    bucket.stale = 0

    def _cpu_flush(self) -> None:
        """Compute the held CPU tensors' statistics (:func:`float_rows` per group)."""
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
                    rows = [cpu_stats(t.detach(), "float") for t in tensors]
                for (_, meta, _), row in zip(group, rows, strict=True):
                    meta.stats.update(row)

    def _queue(self, t: torch.Tensor, meta: TensorMeta, kind: StatsKind) -> None:
        """Hold ``t`` in its device bucket (or reduce it where it lies, if large): a
        non-empty strided tensor of a kind the buckets take (floats; integers and bools
        of :func:`.device.batched_exactly`)."""
        import torch

        key = (t.device, t.dtype)
        bucket = self._buckets.get(key)
        with torch._C.DisableTorchFunction():
            if bucket is None:
                bucket = self._buckets[key] = RowBucket(t.device, t.dtype, kind)
            bucket.add(t, meta, self.settled)
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

        self._device_flush(final=True)
        self._cpu_flush()
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
