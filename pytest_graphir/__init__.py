"""pytest-graphir: snapshot tests for PyTorch model graphs.

``from pytest_graphir import trace`` (or ``init_by_name``, ``compare_compiled``) imports
torch; importing the package itself (as pytest does when it loads the plugin) does not.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .ir import GraphIR, Node, TensorMeta

if TYPE_CHECKING:
    from .capture import trace
    from .compiled import compare_compiled
    from .weights import init_by_name

__all__ = ["GraphIR", "Node", "TensorMeta", "compare_compiled", "init_by_name", "trace"]
__version__ = "0.1.0"


_LAZY = {"trace": ".capture", "compare_compiled": ".compiled", "init_by_name": ".weights"}
"""The names that import torch, and the module each is loaded from on first use."""


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'pytest_graphir' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name], __name__), name)
