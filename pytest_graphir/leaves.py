"""Leaves of nested model inputs and outputs: tuples, lists, dicts, HF ``ModelOutput``,
dataclasses, NamedTuples and attrs classes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch


def _fields(obj: Any) -> list[tuple[str, Any]] | None:
    """``[(name, value)]`` of a dataclass, NamedTuple or attrs instance; else None.

    Read from ``dataclasses.fields``, ``NamedTuple._fields`` and attrs'
    ``__attrs_attrs__``, so attrs need not be importable.
    """
    cls = type(obj)
    if isinstance(obj, tuple):
        names = getattr(cls, "_fields", None)
        if isinstance(names, tuple) and len(names) == len(obj):
            return list(zip(names, obj, strict=True))
        return None
    if isinstance(obj, type):
        return None  # a dataclass or attrs class itself is a constant
    if dataclasses.is_dataclass(obj):
        return [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]
    attrs = getattr(cls, "__attrs_attrs__", None)
    if attrs is not None:
        return [(a.name, getattr(obj, a.name)) for a in attrs]
    return None


def flatten(obj: Any, prefix: str) -> list[tuple[str, Any]]:
    """Flatten nested tuples, lists, mappings (HF ``ModelOutput`` included),
    dataclasses, NamedTuples and attrs instances to leaves.

    Args:
        obj: any value.
        prefix: path of ``obj``; children get ``prefix.key`` / ``prefix.index``;
            fields of a dataclass, NamedTuple or attrs instance ``prefix.field``.

    Returns:
        ``[(path, leaf)]`` in iteration (field declaration) order; ``None`` values of
        mappings and of fields are skipped (``ModelOutput`` and dataclass outputs leave
        unset fields as None).
    """
    if isinstance(obj, torch.Tensor):
        return [(prefix, obj)]
    kind = type(obj)
    if kind is tuple or kind is list:
        out: list[tuple[str, Any]] = []
        for i, v in enumerate(obj):
            out.extend(flatten(v, f"{prefix}.{i}" if prefix else str(i)))
        return out
    if isinstance(obj, Mapping):
        out = []
        for k, v in obj.items():
            if v is not None:
                out.extend(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if obj is None or kind is int or kind is float or kind is bool or kind is str:
        return [(prefix, obj)]
    fields = _fields(obj)
    if fields is not None:
        out = []
        for k, v in fields:
            if v is not None:
                out.extend(flatten(v, f"{prefix}.{k}" if prefix else k))
        return out
    if isinstance(obj, (tuple, list)):
        out = []
        for i, v in enumerate(obj):
            out.extend(flatten(v, f"{prefix}.{i}" if prefix else str(i)))
        return out
    return [(prefix, obj)]
