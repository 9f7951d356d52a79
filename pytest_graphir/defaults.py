"""The options of ``graphir_snapshot``: one table of names, defaults and meanings.

Each is the ini option ``graphir_<name>``; those with ``marker`` set are also keywords
of ``@pytest.mark.graphir``; ``graphir diff`` / ``graphir html`` take ``--rtol`` and
``--atol`` with the same defaults. The comparison (:class:`~.compare.Tolerance`,
the failure message's length) and the snapshot reader use the ``DEFAULT_*`` names
below. Floor 1: imports nothing, so the pytest plugin reads the table when pytest
starts without loading the comparison code.
"""

from __future__ import annotations

from typing import NamedTuple


class Option(NamedTuple):
    """One option: its default (its type is the ini option's type), the help text of
    ``pytest --help`` and whether ``@pytest.mark.graphir`` may set it per test."""

    default: float | int
    help: str
    marker: bool = True


DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-5
DEFAULT_SEED = 0
DEFAULT_MAX_LINES = 30
DEFAULT_MAX_SNAPSHOT_BYTES = 32 * 2**20
"""32 MiB, more than ten times the largest real snapshot measured
(docs/snapshot-format.md)."""

OPTIONS: dict[str, Option] = {
    "rtol": Option(
        DEFAULT_RTOL,
        "relative tolerance of graphir statistics, as a fraction of each tensor's "
        "magnitude max(|min|, |max|, std)",
    ),
    "atol": Option(DEFAULT_ATOL, "absolute tolerance of graphir statistics"),
    "seed": Option(
        DEFAULT_SEED, "torch.manual_seed value set before each test using graphir_snapshot"
    ),
    "max_diff_lines": Option(
        DEFAULT_MAX_LINES, "change lines shown in a graphir failure (0 = all)"
    ),
    "max_snapshot_bytes": Option(
        DEFAULT_MAX_SNAPSHOT_BYTES,
        "largest .graphir file read, in bytes (default 32 MiB); a bigger one fails "
        "without being read",
        marker=False,
    ),
}
"""Option name (without ``graphir_``) -> :class:`Option`."""

MARKER_OPTIONS = (*(name for name, o in OPTIONS.items() if o.marker), "tolerances", "ignore")
"""Keyword arguments of ``@pytest.mark.graphir``: the per-test options above, then
per-node-pattern tolerances and ignored node patterns (no ini option)."""
