"""The options of ``graphir_snapshot``: one table of names, defaults and meanings.

Each is the ini option ``graphir_<name>``; those with ``marker`` set are also keywords
of ``@pytest.mark.graphir``; ``graphir diff`` / ``graphir html`` take ``--rtol`` and
``--atol`` with the same defaults. The comparison (:class:`~.compare.Tolerance`,
the failure message's length) and the snapshot reader use the ``DEFAULT_*`` names
below. Each kind of value has one check (:func:`tolerance`, :func:`seed`,
:func:`line_count`, :func:`byte_count`, :func:`patterns`), used by every place that
reads it: the ini options, the marker, per-pattern tolerances and ``compare()``.
Floor 1: imports only the standard library, so the pytest plugin reads the table when
pytest starts without loading the comparison code.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple


def _number(value: Any, cast: type[Any], expected: str, low: float, high: float = math.inf) -> Any:
    """``cast(value)`` for a number or numeric string in ``low <= x < high`` (so not
    NaN or infinite), else ``ValueError("expected <expected>")``. A bool is no
    number; a float is no integer (``int(1.5)`` would drop the half silently)."""
    kinds = (int, str) if cast is int else (int, float, str)
    if isinstance(value, kinds) and not isinstance(value, bool):
        try:
            number = cast(value)
        except (ValueError, OverflowError):
            pass
        else:
            if low <= number < high:
                return number
    raise ValueError(f"expected {expected}")


def tolerance(value: Any) -> float:
    """An ``rtol`` / ``atol``: a finite number >= 0 (``inf`` would pass every drift).

    Raises:
        ValueError: anything else (``"loose"``, ``inf``, ``1e999``, ``nan``, ``-1``,
            ``True``); the message gives the reason, the caller names the option.
    """
    return float(_number(value, float, "a finite number >= 0", 0))


def seed(value: Any) -> int:
    """A ``torch.manual_seed`` value. Raises ValueError outside ``0 .. 2**64 - 1``."""
    return int(_number(value, int, "an integer from 0 to 2**64 - 1", 0, 2**64))


def line_count(value: Any) -> int:
    """A number of lines (0 = all). Raises ValueError for anything but an integer >= 0."""
    return int(_number(value, int, "an integer >= 0 (0 = all)", 0))


def byte_count(value: Any) -> int:
    """A size in bytes. Raises ValueError for anything but an integer > 0."""
    return int(_number(value, int, "a positive number of bytes", 1))


def patterns(value: Any) -> tuple[str, ...]:
    """Node-name patterns (``ignore=``): one string, or a list or tuple of strings;
    None is none.

    Raises:
        ValueError: anything else (``123``, ``[1]``, a mapping).
    """
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(p, str) for p in value):
        return tuple(value)
    raise ValueError("expected a node-name pattern (str) or a list of them, e.g. ['*.dropout/*']")


class Option(NamedTuple):
    """One option: its default (its type is the ini option's type), the help text of
    ``pytest --help``, the check of a value (raises ValueError with the reason) and
    whether ``@pytest.mark.graphir`` may set it per test."""

    default: float | int
    help: str
    check: Callable[[Any], float | int]
    marker: bool = True


DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-5
DEFAULT_MAX_LINES = 30
DEFAULT_MAX_SNAPSHOT_BYTES = 32 * 2**20
"""32 MiB, more than ten times the largest real snapshot measured
(docs/snapshot-format.md)."""

OPTIONS: dict[str, Option] = {
    "rtol": Option(
        DEFAULT_RTOL,
        "relative tolerance of graphir statistics, as a fraction of each tensor's "
        "magnitude max(|min|, |max|, std)",
        tolerance,
    ),
    "atol": Option(DEFAULT_ATOL, "absolute tolerance of graphir statistics", tolerance),
    "seed": Option(
        0,
        "torch.manual_seed value set before each test using graphir_snapshot",
        seed,
    ),
    "max_diff_lines": Option(
        DEFAULT_MAX_LINES, "change lines shown in a graphir failure (0 = all)", line_count
    ),
    "max_snapshot_bytes": Option(
        DEFAULT_MAX_SNAPSHOT_BYTES,
        "largest .graphir file read, in bytes (default 32 MiB); a bigger one fails "
        "without being read",
        byte_count,
        marker=False,
    ),
}
"""Option name (without ``graphir_``) -> :class:`Option`."""

MARKER_OPTIONS = (*(name for name, o in OPTIONS.items() if o.marker), "tolerances", "ignore")
"""Keyword arguments of ``@pytest.mark.graphir``: the per-test options above, then
per-node-pattern tolerances and ignored node patterns (no ini option)."""
