"""Type stub of the optional C extension (``_moments.c``; see ``stats.fused_stats``)."""

def moments(address: int, numel: int, dtype: int, /) -> tuple[float, float, float, float]:
    """``(sum, sum of squares, min, max)`` of ``numel`` dense elements at ``address``;
    ``dtype``: 0 float32, 1 float64, 2 bfloat16. min/max ignore NaN (the sum does not).

    Raises:
        TypeError: not three arguments. ValueError: address 0, numel < 1, unknown dtype.
    """

def squared_deviations(address: int, numel: int, dtype: int, mean: float, /) -> float:
    """Sum of ``(x - mean)**2`` over the same elements, in float64.

    Raises:
        TypeError: not four arguments. ValueError: as :func:`moments`.
    """
