"""Leaves of nested model inputs and outputs: tuples, lists, dicts, HF ``ModelOutput``,
dataclasses, NamedTuples and attrs classes; optionally the attributes of other objects
that hold tensors.

One walk for the trace and the compiled check. ``torch.utils._pytree`` would know
transformers' registered ``ModelOutput``, but it drops ``None`` at tuple positions
(which a trace's ``outputs`` records), walks no unregistered dataclass or attrs
class, and spells paths otherwise (``[0]['logits']``)."""

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
    # by its type's fields: a dataclass or attrs class itself is a constant
    attrs = getattr(cls, "__attrs_attrs__", None)
    fields = dataclasses.fields(obj) if dataclasses.is_dataclass(cls) else attrs
    return None if fields is None else [(f.name, getattr(obj, f.name)) for f in fields]


def flatten(obj: Any, prefix: str, objects: int = 0) -> list[tuple[str, Any]]:
    """Flatten nested tuples, lists, mappings (HF ``ModelOutput`` included),
    dataclasses, NamedTuples and attrs instances to leaves.

    Args:
        obj: any value.
        prefix: path of ``obj``; children get ``prefix.key`` / ``prefix.index``;
            fields of a dataclass, NamedTuple or attrs instance ``prefix.field``.
        objects: how many levels of other objects (a transformers ``DynamicCache``)
            to walk through their attributes (``vars``, as a mapping); an object with
            no tensor inside stays one leaf.

    Returns:
        ``[(path, leaf)]`` in iteration (field declaration) order; ``None`` values of
        mappings and of fields are skipped (``ModelOutput`` and dataclass outputs leave
        unset fields as None).
    """
    if isinstance(obj, torch.Tensor):
        return [(prefix, obj)]
    kind = type(obj)
    if obj is None or kind is int or kind is float or kind is bool or kind is str:
        return [(prefix, obj)]
    if isinstance(obj, Mapping):
        items = [(str(k), v) for k, v in obj.items() if v is not None]
    elif kind is not tuple and kind is not list and (fields := _fields(obj)) is not None:
        items = [(k, v) for k, v in fields if v is not None]
    elif isinstance(obj, (tuple, list)):
        items = [(str(i), v) for i, v in enumerate(obj)]
    elif objects > 0 and isinstance(attrs := getattr(obj, "__dict__", None), dict):
        inner = flatten(attrs, prefix, objects - 1)
        return inner if any(isinstance(v, torch.Tensor) for _, v in inner) else [(prefix, obj)]
    else:
        return [(prefix, obj)]
    out: list[tuple[str, Any]] = []
    for k, v in items:
        out.extend(flatten(v, f"{prefix}.{k}" if prefix else k, objects))
    return out
