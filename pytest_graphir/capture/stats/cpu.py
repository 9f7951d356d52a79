"""Statistics of CPU tensors: the C extension's one pass, held small tensors reduced
in batches of one dtype and shape, and larger tensors at once with torch reductions.

docs/capture.md, "Statistics", says which tensor takes which way and why.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .kinds import (
    CHUNK,
    FLOAT32_OVERFLOW,
    ROW_LENGTH,
    StatsKind,
    decode,
    nonfinite_counts,
    to_float32,
)

if TYPE_CHECKING:
    import torch

try:  # the optional C extension (setup.py); without it, torch reductions only
    from .. import _moments
except ImportError:  # pragma: no cover - depends on how the package was built
    _moments = None  # type: ignore[assignment]

_INF = math.inf

DEFER_ELEMENTS = 1 << 14
"""At most this many elements for a held tensor: below ``TensorIterator``'s grain size
(32768), so its row is reduced by one thread whatever the thread count."""

DEFER_BYTES = 64 << 10
"""A floating CPU tensor of at most this many bytes is held and computed with others
of its dtype and shape (:func:`float_rows`); a larger one is computed at once
(:func:`cpu_stats`), where the per-call cost no longer dominates and the data is
still in cache."""

CPU_FLUSH_BYTES = 1 << 20
"""Bytes of held CPU tensors at which their statistics are computed: bounds the
memory a trace keeps alive; smaller batches pay the per-call cost again, larger ones
read their tensors back from further out of the caches (measured in docs/capture.md,
"Cost")."""


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
    accurate (as :func:`cpu_stats` decides for large tensors), and for the other rows
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
        mean = total / n if exact else to_float32(total / n)
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


MIN_ROW, MAX_ROW = 1 << 11, 1 << 14
"""Bounds of the row length :func:`_one_pass` picks: long enough that the Python
reduction over rows stays small, short enough that a float32 ``vector_norm`` along a
row stays accurate (~1e-7 relative at 4096 elements; ~1e-4 at millions)."""

FEW_ROWS = 64
"""Up to this many rows, :func:`_one_pass` combines the row results in Python (one
``.tolist()``); above, with torch reductions (no Python loop over thousands)."""

ONE_PASS_FROM = 1 << 15
"""Contiguous float tensors with at least this many elements get the variance in one
pass (``E[x^2] - mean^2``) where that is accurate (:func:`cpu_stats`); below, the
fewer torch calls of two passes cost less (docs/capture.md, "Cost")."""

ONE_PASS_RATIO = 0.8
"""The one-pass variance is used only when ``mean^2 <= ONE_PASS_RATIO * E[x^2]``, so
the variance is at least a fifth of ``E[x^2]`` and the cancellation loses at most a
factor of 5 of float32 accuracy (~1e-6 relative); otherwise two passes."""


FUSED_CODES: dict[Any, int] = {}
"""torch dtype -> the extension's dtype code (0 float32, 1 float64, 2 bfloat16); filled
on the first :func:`fused_stats` call (torch is imported only when a trace needs it),
with the torch callables the hot path binds once (below)."""

_Tensor: Any = None
_strided: Any = None
_mode_enabled: Any = None
_disabled: Any = None


def fill_fused_codes() -> None:
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
            FLOAT32_OVERFLOW,
        )
    FUSED_CODES.update({torch.float32: 0, torch.float64: 1, torch.bfloat16: 2})


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
    if not FUSED_CODES:
        fill_fused_codes()
    code = FUSED_CODES.get(t.dtype)
    if code is None or t.layout is not _strided or t.is_nested:
        return None
    if type(t) is _Tensor and not _mode_enabled():
        return _moments.tensor_stats(t, code)
    with _disabled():
        return _moments.tensor_stats(t, code)


def cpu_stats(x: torch.Tensor, kind: StatsKind) -> dict[str, float | int]:
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
            mean = total / n if x.dtype == torch.float64 else to_float32(total / n)
        finite = -_INF < lo and hi < _INF  # False for NaN too
        if x.dtype != torch.float64 and abs(total) > FLOAT32_OVERFLOW:
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
    """The largest power of two in [MIN_ROW, MAX_ROW] dividing ``n``, else :data:`ROW_LENGTH`."""
    row = MAX_ROW
    while row >= MIN_ROW:
        if n % row == 0:
            return row
        row //= 2
    return ROW_LENGTH


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
    return _INF if ssd > FLOAT32_OVERFLOW else ssd


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
