"""Per-tensor statistics, computed on the tensor's device: :class:`StatsBatch`, the
facade the tracer calls for every new tensor it records.

The C kernel (:mod:`.cpu`), the device path (:mod:`.device`) and the kinds,
decoding and float64 reference they share (:mod:`.kinds`); docs/capture.md,
"Statistics", says which tensor takes which way. All torch calls here run under
``torch._C.DisableTorchFunction`` and ``torch.no_grad``, so they are never recorded
as graph ops and never extend the autograd graph.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ...ir import TensorMeta
from ..dtensor import PLAIN_TYPES, local_values
from ..nested import nested_values
from .cpu import _moments, copied_stats, fused_stats
from .device import EXACT_DTYPES, RowBucket, dense_flat
from .kinds import kind_of, reference_stats

FUSED = _moments is not None
"""Whether the C extension ``pytest_graphir.capture._moments`` is built here: then dense
float32, float64 and bfloat16 CPU tensors get their statistics in one pass over their
memory at record time (:func:`fused_stats`); every other tensor (and every tensor
where it is not built) takes the device path (:class:`.device.RowBucket`)."""

__all__ = ["FUSED", "StatsBatch", "dense_flat", "fused_stats", "reference_stats"]


DEVICE_PATH_VARIABLE = "GRAPHIR_STATS_DEVICE_PATH"
"""The environment variable that, set to ``1``, sends every tensor down the device path
(:class:`.device.RowBucket`), the CPU's included: what ``StatsBatch(batched=True)``
does, for tests and benchmarks that run the device path where no GPU is. Read at each
:class:`StatsBatch`, so a test can set it with ``monkeypatch.setenv``."""


class StatsBatch:
    """Computes statistics during a trace and fills each :class:`TensorMeta`.

    Two paths, each checked against :func:`.kinds.reference_stats`: the C kernel
    (:func:`fused_stats`) takes a float32, float64 or bfloat16 CPU tensor at once (a
    plain one that is not dense from a contiguous copy, :func:`.cpu.copied_stats`);
    every other tensor (other devices, other dtypes, integers, bools, a tensor
    the kernel declines, every tensor where the extension is not built) joins a
    :class:`RowBucket` per device and dtype, which holds it until a write may touch
    it (:meth:`flush`), reduces it in rows with others and hands every result to the
    host at :meth:`finish`, with one copy per device (docs/capture.md, "Statistics").

    Args:
        batched: ``None`` (default): the C kernel where it applies, else the device
            path; the environment variable ``GRAPHIR_STATS_DEVICE_PATH=1``
            (:data:`DEVICE_PATH_VARIABLE`) makes ``None`` mean ``True``. ``True``: the
            device path for every tensor, the CPU's included (tests and benchmarks
            run it on the CPU this way).

    Attributes:
        defer: hold tensors in the buckets (True, the default) or reduce each at once
            (after the forward, where no interceptor sees writes).
            The tracer holds them during the forward only, where every op that may
            write in place goes through its interceptor and triggers :meth:`flush`.
        stale: how many held tensors had their ``_version`` moved before their
            statistics were taken, by something no interceptor saw (a C++ extension
            writing in place; also ``ctx.mark_dirty`` in a custom autograd Function,
            which bumps the version after the write the tracer did see): their
            statistics may show the written values. The tracer warns when non-zero.
        settled: the tensors added now are not written before :meth:`finish` (the
            parameters, after the forward): a large one is then reduced without its
            NaN/Inf counts, which are taken at :meth:`finish` only where its min, max
            or mean is not finite.
    """

    def __init__(self, batched: bool | None = None) -> None:
        forced = batched is None and os.environ.get(DEVICE_PATH_VARIABLE) == "1"
        self._fused = not (batched or forced)
        self._buckets: dict[tuple[Any, Any], RowBucket] = {}
        self.defer = True
        self.settled = False
        self.stale = 0

    def add(self, t: torch.Tensor, meta: TensorMeta) -> None:
        """Compute (the C kernel) or queue (a bucket) the statistics of ``t`` into
        ``meta``; a tensor :func:`.kinds.kind_of` gives no kind for gets none.
        Runs under ``torch._C.DisableTorchFunction``: nothing here is recorded. A
        DTensor's statistics are its local shard's (:func:`..dtensor.local_values`)."""
        if type(t) not in PLAIN_TYPES:
            t = local_values(t)
        if self._fused and _moments is not None and t.is_cpu:
            fused = fused_stats(t) or copied_stats(t)  # the hot path: the C kernel
            if fused is not None:
                meta.stats.update(fused)
                return
        with torch._C.DisableTorchFunction():
            if t.is_nested:  # its components' elements together, copied (capture/nested.py)
                t = nested_values(t)
            kind = kind_of(t)
            if kind is None:
                return
            if kind == "int" and t.dtype not in EXACT_DTYPES:
                t = t.to(torch.int64)  # uint16/32/64 (uint64 beyond 2**63 wraps)
            key = (t.device, t.dtype)
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = self._buckets[key] = RowBucket(t.device, t.dtype, kind)
            bucket.add(t, meta, self.settled)
            if not self.defer:  # after the forward (gradients): no interceptor sees writes
                with torch.no_grad():
                    bucket.flush()

    def flush(self, final: bool = False) -> None:
        """Before an op that may write into a held tensor in place (and at the end of
        the forward): every bucket copies what it holds; ``final`` (from :meth:`finish`):
        every bucket reduces what it holds (:meth:`.device.RowBucket.flush`)."""
        if self._buckets:
            with torch._C.DisableTorchFunction(), torch.no_grad():
                for bucket in self._buckets.values():
                    bucket.flush(final)
                    self.stale += bucket.stale
                    bucket.stale = 0

    def finish(self) -> None:
        """Copy every bucket's results to the host (once per device) and fill the metas.

        Per device, the results of its buckets travel as the bytes of one
        ``torch.cat`` (``Tensor.view`` as uint8) and one ``.cpu()``: the trace's
        single synchronisation for statistics.
        """
        self.flush(final=True)
        with torch._C.DisableTorchFunction(), torch.no_grad():
            for device in dict.fromkeys(b.device for b in self._buckets.values()):
                buckets = [b for b in self._buckets.values() if b.device == device]
                results = [bucket.results() for bucket in buckets]  # none is empty
                flat = [x for part in results for x in part]
                host = torch.cat([x.reshape(-1).view(torch.uint8) for x in flat]).cpu()
                pieces = iter(torch.split(host, [x.numel() * x.element_size() for x in flat]))
                for bucket, part in zip(buckets, results, strict=True):
                    bucket.read([next(pieces).clone().view(x.dtype).view(x.shape) for x in part])
        self._buckets.clear()
