"""How far a statistic may drift: :class:`Tolerance` and the per-statistic test."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..ir import COUNT_KEYS

DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-5


@dataclass(frozen=True)
class Tolerance:
    """How far a statistic may drift and still match.

    A float statistic ``a`` (snapshot) matches ``b`` (received) when
    ``|a - b| <= atol + rtol * scale``, where ``scale`` is the tensor's own
    magnitude in the snapshot, ``max(|min|, |max|, std)``. Scaling by the range
    rather than by ``|a|`` keeps a mean of 1e-9 on a tensor spanning [-3, 3] from
    failing on noise. Counts (``nan``, ``inf``, ``true``) and the statistics of
    integer tensors (``min``, ``max``, ``sum``) compare exactly.

    Attributes:
        rtol: relative tolerance, fraction of the tensor's magnitude (default 1e-3).
        atol: absolute tolerance (default 1e-5).
    """

    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL

    def allowed(self, stats: dict[str, Any]) -> float:
        """Return the absolute drift allowed for the statistics of one tensor."""
        scale = 0.0
        for key in ("min", "max", "std"):
            v = stats.get(key)
            if isinstance(v, (int, float)) and math.isfinite(v):
                scale = max(scale, abs(v))
        return self.atol + self.rtol * scale


def both_nan(a: Any, b: Any) -> bool:
    """A constant NaN (model input or output) equals itself."""
    return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)


def equal_stat(a: Any, b: Any, allowed: float, key: str) -> bool:
    """True when statistic ``key`` moved from ``a`` to ``b`` by at most ``allowed``.

    Counts (:data:`~pytest_graphir.ir.COUNT_KEYS`) and non-numbers compare exactly;
    NaN equals NaN; an infinity equals only itself.
    """
    if a == b:
        return True
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return False
    if key in COUNT_KEYS:
        return False
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return False
    return abs(a - b) <= allowed
