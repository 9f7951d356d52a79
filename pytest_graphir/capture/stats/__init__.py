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
from . import cpu
from .cpu import cpu_stats, float_rows, fused_stats
from .device import Bucket, dense_flat, own_rows
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
    "DEVICE_PATH_VARIABLE",
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
(:class:`.device.Bucket`), the CPU's included: what ``StatsBatch(batched=True)`` does,
for tests and benchmarks that run the device path where no GPU is."""


def device_path_forced() -> bool:
    """Whether :data:`DEVICE_PATH_VARIABLE` is ``1`` in the environment now."""
    return os.environ.get(DEVICE_PATH_VARIABLE) == "1"


class StatsBatch:
    """Computes statistics during a trace and fills each :class:`TensorMeta`.

    CPU tensors: small floating ones are held and computed in batches of one dtype
    and size (:func:`float_rows`) when :data:`.cpu.CPU_FLUSH_BYTES` are held, at
    :meth:`flush` and at :meth:`finish`; others at once. Other devices (CUDA): every
    tensor goes to the :class:`.device.Bucket` of its device and dtype, which holds it
    and reduces what it holds with a few kernels per :data:`.device.FLUSH_BYTES`; the
    results reach the host at :meth:`finish`, with one copy per device and no host
    read before (docs/capture.md, "Statistics").

    Args:
        batched: ``None`` (default): the device path on devices other than the CPU,
            where per-tensor reductions are launch-bound, and the CPU path on the CPU
            (its own batching costs less there than a join into rows), unless the
            environment sets ``GRAPHIR_STATS_DEVICE_PATH=1``
            (:data:`DEVICE_PATH_VARIABLE`, read when the batch is made), which means
            ``True``. ``True``: the device path on every device (tests and
            benchmarks run it on the CPU); ``False``: each device tensor reduced at
            once, nothing held.

    Attributes:
        defer: hold tensors (True, the default) or compute each at once (on a device:
            a few kernels per tensor). The tracer holds them during the forward
            only, where every op that may write in place goes through its
            interceptor and triggers :meth:`flush`.
        stale: how many held tensors had their ``_version`` moved before their
            statistics were computed, by something no interceptor saw (a C++
            extension writing in place; also ``ctx.mark_dirty`` in a custom autograd
            Function, which bumps the version after the write the tracer did see):
            their statistics may show the written values. The tracer warns when
            non-zero.
    """

    def __init__(self, batched: bool | None = None) -> None:
        if batched is None and device_path_forced():
            batched = True
        self._batched = batched
        self._buckets: dict[tuple[Any, Any, int], Bucket] = {}
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
                    self.flush()
                return
        kind = kind_of(t)
        if kind is None:
            return
        if t.is_cpu and not self._batched:
            with torch._C.DisableTorchFunction():
                meta.stats.update(cpu_stats(t.detach(), kind))
            return
        with torch._C.DisableTorchFunction():
            self._queue(t, meta, kind)

    def flush(self) -> None:
        """Take what every held tensor holds now (before an op that may write into one
        of them in place, and at the end of the forward): CPU tensors' statistics are
        computed; device buckets copy their held tensors into one buffer
        (:meth:`.device.Bucket.snapshot`: one kernel, no host read)."""
        if self._buckets:
            import torch

            with torch._C.DisableTorchFunction(), torch.no_grad():
                for bucket in self._buckets.values():
                    bucket.snapshot()
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
                    rows = [cpu_stats(t.detach(), "float") for t in tensors]
                for (_, meta, _), row in zip(group, rows, strict=True):
                    meta.stats.update(row)

    def _queue(self, t: torch.Tensor, meta: TensorMeta, kind: StatsKind) -> None:
        """Hold ``t`` in the bucket of its device and dtype (and count, for the counts
        :func:`.device.own_rows` names), or reduce it now: see :class:`.device.Bucket`."""
        import torch

        numel = t.numel()
        numel = numel if own_rows(numel, kind) else 0
        key = (t.device, t.dtype, numel)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = Bucket(t.device, t.dtype, kind, numel)
        with torch.no_grad():
            bucket.add(t, meta)
            if not self.defer or self._batched is False:
                # after the forward (gradients): no interceptor sees writes
                bucket.reduce()

    def finish(self) -> None:
        """Reduce what is held, copy every result to the host and fill the metas.

        Per device, the results of its buckets travel as one ``torch.cat`` of float32
        tensors (other dtypes viewed as float32) and one ``.cpu()``: the trace's only
        device-to-host copy and synchronisation for statistics.
        """
        import torch

        self.flush()
        with torch._C.DisableTorchFunction(), torch.no_grad():
            parts: dict[Any, list[tuple[list[Any], Any, Bucket]]] = {}
            for bucket in self._buckets.values():
                bucket.reduce()
                parts.setdefault(bucket.device, []).append((*bucket.results(), bucket))
            for items in parts.values():
                flat = [x for tensors, _, _ in items for x in tensors]
                host = (flat[0] if len(flat) == 1 else torch.cat(flat)).cpu()
                sizes = [sum(x.numel() for x in tensors) for tensors, _, _ in items]
                for piece, (_, dtype, bucket) in zip(host.split(sizes), items, strict=True):
                    bucket.read(piece if dtype == torch.float32 else piece.view(dtype))
        self._buckets.clear()
