"""What each benchmark prints first: whether the optional C extension ran. Ratios from
different builds do not compare."""

from __future__ import annotations

from pytest_graphir.capture.stats import FUSED


def extensions_line() -> str:
    """``"C extension: statistics yes"``: whether ``_moments`` (``stats.FUSED``) was
    built here."""
    return f"C extension: statistics {'yes' if FUSED else 'no'}"
