"""Compiled outputs and gradients against eager ones, leaf by leaf.

:func:`compare_outputs` walks both outputs as the trace does (tuples, lists,
mappings), and through the attributes of objects that hold tensors (a transformers
``DynamicCache``); floating tensors are compared with the
:class:`~pytest_graphir.compare.Tolerance` rule, everything else exactly.
:func:`compare_grads` applies the same rules to each parameter's gradient.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..compare import Tolerance
from ..leaves import flatten
from .backward import BackwardResult
from .report import NumericDiff


def _scale_stats(t: torch.Tensor) -> dict[str, float]:
    finite = t[torch.isfinite(t)]
    if finite.numel() == 0:
        return {}
    f = finite.double()
    return {
        "min": float(f.min()),
        "max": float(f.max()),
        "std": float(f.std(unbiased=False)) if f.numel() > 1 else 0.0,
    }


_PLAIN = (type(None), bool, int, float, complex, str, bytes)

MAX_OBJECT_DEPTH = 4
"""How deep :func:`output_leaves` looks into the attributes of output objects."""


def output_leaves(value: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, Any]]:
    """Flatten a model output to ``(path, leaf)``: tensors and plain values.

    Tuples, lists and mappings (``ModelOutput``) are walked as in the trace; other
    objects that hold tensors (a transformers ``DynamicCache``) are walked through
    their attributes, up to :data:`MAX_OBJECT_DEPTH` levels; an object with no
    tensor inside is one leaf, compared by type.
    """
    out: list[tuple[str, Any]] = []
    for path, leaf in flatten(value, prefix):
        if isinstance(leaf, (torch.Tensor, *_PLAIN)) or depth >= MAX_OBJECT_DEPTH:
            out.append((path, leaf))
            continue
        attrs = getattr(leaf, "__dict__", None)
        inner = (
            []
            if not isinstance(attrs, dict)
            else output_leaves({k: v for k, v in attrs.items() if v is not None}, path, depth + 1)
        )
        if any(isinstance(v, torch.Tensor) for _, v in inner):
            out.extend(inner)
        else:
            out.append((path, f"<{type(leaf).__name__}>"))
    return out


def compare_outputs(
    eager: Any, compiled: Any, tolerance: Tolerance, call: int = 1
) -> list[NumericDiff]:
    """Compare compiled outputs with eager ones, leaf by leaf.

    Floating tensors match when ``max |compiled - eager| <= atol + rtol * scale``,
    ``scale = max(|min|, |max|, std)`` of the eager tensor's finite values (the
    :class:`~pytest_graphir.compare.Tolerance` rule, applied element-wise); NaN and
    infinities must sit at the same places. Other tensors, and non-tensor leaves,
    must be equal.

    Returns:
        One :class:`~.report.NumericDiff` per differing leaf.
    """
    out: list[NumericDiff] = []
    e_leaves = dict(output_leaves(eager))
    c_leaves = dict(output_leaves(compiled))
    for path in list(e_leaves) + [p for p in c_leaves if p not in e_leaves]:
        name = path or "output"
        if path not in c_leaves or path not in e_leaves:
            where = "compiled" if path not in e_leaves else "eager"
            out.append(NumericDiff(name, f"only in the {where} outputs", call))
            continue
        e, c = e_leaves[path], c_leaves[path]
        if not isinstance(e, torch.Tensor) or not isinstance(c, torch.Tensor):
            if type(e) is not type(c) or e != c:
                out.append(NumericDiff(name, f"{e!r} -> {c!r}", call))
            continue
        if e.shape != c.shape or e.dtype != c.dtype:
            out.append(
                NumericDiff(name, f"{e.dtype} {list(e.shape)} -> {c.dtype} {list(c.shape)}", call)
            )
            continue
        with torch.no_grad():
            e, c = e.detach(), c.detach().to(e.device)
            if torch.equal(e, c):  # the common case, and cheap: no statistics needed
                continue
            if not (e.is_floating_point() or e.is_complex()):
                if not torch.equal(e, c):
                    n = int((e != c).sum())
                    out.append(
                        NumericDiff(
                            name, f"{n} of {e.numel()} elements differ (exact compare)", call
                        )
                    )
                continue
            same_nonfinite = (
                torch.equal(torch.isnan(e), torch.isnan(c))
                and torch.equal(torch.isinf(e) & (e > 0), torch.isinf(c) & (c > 0))
                and torch.equal(torch.isinf(e) & (e < 0), torch.isinf(c) & (c < 0))
            )
            if not same_nonfinite:
                out.append(NumericDiff(name, "NaN/Inf at different places", call))
                continue
            finite = torch.isfinite(e)
            if not bool(finite.any()):
                continue
            diff = float((c[finite].double() - e[finite].double()).abs().max())
            allowed = tolerance.allowed(_scale_stats(e))
            if not diff <= allowed or math.isnan(diff):
                out.append(
                    NumericDiff(
                        name, f"max |compiled - eager| {diff:.6g} > allowed {allowed:.3g}", call
                    )
                )
    return out


def compare_grads(
    eager: BackwardResult, compiled: BackwardResult, tolerance: Tolerance
) -> list[NumericDiff]:
    """Compare each parameter's gradient (``compare_outputs`` rules), call 1."""
    out: list[NumericDiff] = []
    for name in eager.grads:
        e, c = eager.grads[name], compiled.grads.get(name)
        if e is None and c is None:
            continue
        if e is None or c is None:
            where = "eagerly" if c is None else "under compile"
            out.append(NumericDiff(f"{name}.grad", f"no gradient {where}", 1))
            continue
        out.extend(
            NumericDiff(f"{name}.grad", d.detail, 1) for d in compare_outputs(e, c, tolerance, 1)
        )
    return out
