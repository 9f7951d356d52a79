"""pytest-graphir: snapshot tests for PyTorch model graphs.

``from pytest_graphir import trace`` (or ``init_by_name``, ``compare_compiled``) imports
torch; importing the package itself (as pytest does when it loads the plugin) does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .ir import GraphIR, Node, TensorMeta

if TYPE_CHECKING:
    from .capture import trace
    from .compiled import compare_compiled
    from .weights import init_by_name

__all__ = ["GraphIR", "Node", "TensorMeta", "compare_compiled", "init_by_name", "trace"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "trace":
        from .capture import trace

        return trace
    if name == "compare_compiled":
        from .compiled import compare_compiled

        return compare_compiled
    if name == "init_by_name":
        from .weights import init_by_name

        return init_by_name
    raise AttributeError(f"module 'pytest_graphir' has no attribute {name!r}")
