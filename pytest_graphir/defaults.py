"""The options of ``graphir_snapshot``: one table of names, defaults and meanings.

Each is the ini option ``graphir_<name>``; those with ``marker`` set are also keywords
of ``@pytest.mark.graphir``; ``graphir diff`` / ``graphir html`` take ``--rtol`` and
``--atol`` with the same defaults. The comparison (:class:`~.compare.Tolerance`,
the failure message's length) and the snapshot reader use the ``DEFAULT_*`` names
below. Each kind of value has one check (:func:`tolerance`, :func:`seed`,
:func:`line_count`, :func:`byte_count`, :func:`patterns`), used by every place that
reads it: the ini options, the marker, per-pattern tolerances, the CLI flags and
every :class:`~.compare.Tolerance` built (``compare()``, ``compare_compiled()``).
Floor 1: imports only the standard library, so the pytest plugin reads the table when
pytest starts without loading the comparison code.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any, NamedTuple


def _number(value: Any, cast: type[Any], expected: str, low: float, high: float = math.inf) -> Any:
    """``cast(value)`` for a number in ``low <= x <= high`` (so not NaN), else
    ``ValueError("expected <expected>")``. A bool or a str is no number (pytest has
    converted the ini options; a marker's ``rtol="1e9"`` is a mistake); a float is
    no integer (``int(1.5)`` would drop the half silently)."""
    if isinstance(value, int if cast is int else (int, float)) and not isinstance(value, bool):
        with contextlib.suppress(ValueError, OverflowError):  # int(inf), int(nan)
            if low <= (number := cast(value)) <= high:
                return number
    raise ValueError(f"expected {expected}")


MAX_TOLERANCE = 1.0
"""Largest ``rtol`` and ``atol``. ``rtol`` is a fraction of a tensor's magnitude
``max(|min|, |max|, std)``, which bounds every statistic of the tensor: at 1 a mean
may already move from 0 to the maximum, and past it the gate passes any change of
that size (``rtol=1e300`` passed a changed weight). ``atol`` is the floor for
statistics near 0, where ``rtol`` gives none: 1 is a unit-scaled activation's whole
range. Looser than that is no numeric check: use ``ignore=`` to say so."""


def tolerance(value: Any) -> float:
    """An ``rtol`` / ``atol``: an int or float from 0 to :data:`MAX_TOLERANCE`.

    Raises:
        ValueError: anything else (``"1e-2"``, ``inf``, ``1e300``, ``nan``, ``-1``,
            ``True``): it would switch the numeric check off or is no number; the
            message gives the accepted range, the caller names the option.
    """
    return float(_number(value, float, f"a number from 0 to {MAX_TOLERANCE:g}", 0, MAX_TOLERANCE))


def seed(value: Any) -> int:
    """A ``torch.manual_seed`` value. Raises ValueError outside ``0 .. 2**64 - 1``."""
    return int(_number(value, int, "an integer from 0 to 2**64 - 1", 0, 2**64 - 1))


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
        "magnitude max(|min|, |max|, std), from 0 to 1 (looser is no numeric check)",
        tolerance,
    ),
    "atol": Option(DEFAULT_ATOL, "absolute tolerance of graphir statistics (0 to 1)", tolerance),
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
