"""Helpers more than one test module uses: a trace as the document a snapshot file
loads to, changes as text, a float output's statistics for hand-built documents, a
callable-object hook, and a model that raises from a nested submodule."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from pytest_graphir import trace
from pytest_graphir.compare import compare
from pytest_graphir.serialize import dumps, loads


def snapshot_doc(model: nn.Module, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """``trace(model, *args, **kwargs)`` as the document its snapshot file loads to
    (``loads(dumps(graph))``): what ``compare`` reads on the stored side."""
    return loads(dumps(trace(model, *args, **kwargs)))


def change_lines(stored: dict[str, Any], received: dict[str, Any], **options: Any) -> list[str]:
    """``compare(stored, received, **options)``'s changes, one ``str(change)`` each."""
    return [str(c) for c in compare(stored, received, **options).changes]


def float_out(shape: list[int] | None = None, **stats: Any) -> dict[str, Any]:
    """A float32 tensor entry of a hand-built document: ``shape`` (default ``[4]``),
    mean 0.5, std 1, min -3, max 3, no NaN or inf; ``stats`` replaces any of them."""
    out: dict[str, Any] = {
        "shape": [4] if shape is None else shape,
        "dtype": "float32",
        "mean": 0.5,
        "std": 1.0,
        "min": -3.0,
        "max": 3.0,
        "nan": 0,
        "inf": 0,
    }
    out.update(stats)
    return out


class Observer:
    """A callable-object forward hook, as a quantization observer is: counts its calls
    (``calls``), returns None; its hook name is ``Observer.__call__``."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, module: nn.Module, args: Any, output: Any) -> None:
        self.calls += 1


class Boom(Exception):
    """The exception test models and hooks raise on purpose."""


class _RaisesInside(nn.Module):
    def __init__(self, owner: Raising) -> None:
        super().__init__()
        self.raised, self.seen, self.probe = owner.raised, owner.seen, owner.probe

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.relu(x) + 1  # ops run before the raise
        if self.probe is not None:
            self.seen.update(self.probe())
        err = Boom("boom from inside forward")
        self.raised.append(err)
        raise err


class Raising(nn.Module):
    """Raises :class:`Boom` ("boom from inside forward") from a nested submodule
    (``outer.1``) after ``x * 2``, ``outer.0`` (a ``Linear(3, 3)``), a relu and an add
    ran; takes a (N, 3) input. Every exception it raises is appended to ``raised``; with
    ``probe``, the mapping it returns at the moment of raising is merged into ``seen``
    (what was patched inside the forward, say)."""

    def __init__(self, probe: Callable[[], dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.raised: list[BaseException] = []
        self.seen: dict[str, Any] = {}
        self.probe = probe
        self.outer = nn.Sequential(nn.Linear(3, 3), _RaisesInside(self))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.outer(x * 2)  # type: ignore[no-any-return]


def resolve_path(path: str) -> object:
    """The object at the dotted ``path`` (``torch._C._len_torch_function_stack``): the
    longest importable module, then attributes; for the tests that pin the private
    torch paths the package uses.

    Raises:
        ImportError: no prefix of ``path`` is importable.
        AttributeError: an attribute after the module is missing (torch moved it).
    """
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)
