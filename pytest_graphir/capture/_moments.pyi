"""Type stub of the optional C extension (``_moments.c``; see ``stats.fused_stats``)."""

from typing import Any

def configure(
    numel: Any,
    is_neg: Any,
    is_contiguous: Any,
    data_ptr: Any,
    size: Any,
    stride: Any,
    one_pass_ratio: float,
    float32_overflow: float,
    /,
) -> None:
    """Set the ``torch._C.TensorBase`` methods and the two constants
    :func:`tensor_stats` uses (``stats.cpu`` calls it once, on import).

    Raises:
        TypeError: not eight arguments, or a constant that is not a float.
    """

def tensor_stats(tensor: Any, dtype: int, /) -> dict[str, float | int] | None:
    """``stats.fused_stats`` in C: ``{"mean", "std", "min", "max", "nan", "inf"}`` of a dense
    CPU tensor (contiguous, or dense in another order of its dimensions, read in memory
    order), None where the extension does not apply (no elements, a negative view,
    expanded or sliced memory, no storage, NaN or Inf).

    Raises:
        RuntimeError: called before :func:`configure`. ValueError: unknown dtype code.
    """
