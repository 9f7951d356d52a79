"""What each benchmark prints first: which optional C extensions ran. Ratios from
different builds do not compare."""

from __future__ import annotations

from pytest_graphir.capture.stats import FUSED
from pytest_graphir.capture.tracer import FAST_RECORD


def extensions_line() -> str:
    """``"C extensions: statistics yes, recorder yes"``: whether ``_moments``
    (``stats.FUSED``) and ``_record`` (``tracer.FAST_RECORD``) were built here."""

    def yes(flag: bool) -> str:
        return "yes" if flag else "no"

    return f"C extensions: statistics {yes(FUSED)}, recorder {yes(FAST_RECORD)}"
