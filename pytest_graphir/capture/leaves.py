"""Leaves of nested model inputs and outputs (tuples, lists, dicts, HF ``ModelOutput``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def flatten(obj: Any, prefix: str) -> list[tuple[str, Any]]:
    """Flatten nested tuples, lists and mappings (HF ``ModelOutput`` included) to leaves.

    Args:
        obj: any value.
        prefix: path of ``obj``; children get ``prefix.key`` / ``prefix.index``.

    Returns:
        ``[(path, leaf)]`` in iteration order; ``None`` values of mappings are
        skipped (``ModelOutput`` leaves unset fields as None).
    """
    if isinstance(obj, torch.Tensor):
        return [(prefix, obj)]
    if isinstance(obj, Mapping):
        out: list[tuple[str, Any]] = []
        for k, v in obj.items():
            if v is not None:
                out.extend(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(obj, (tuple, list)):
        out = []
        for i, v in enumerate(obj):
            out.extend(flatten(v, f"{prefix}.{i}" if prefix else str(i)))
        return out
    return [(prefix, obj)]
