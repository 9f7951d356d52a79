"""How far a statistic may drift: :class:`Tolerance` (with per-node patterns and
ignored nodes) and the per-statistic test."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any, TypeVar

from .. import defaults
from ..defaults import DEFAULT_ATOL as DEFAULT_ATOL
from ..defaults import DEFAULT_RTOL as DEFAULT_RTOL

_T = TypeVar("_T")


class PatternError(ValueError):
    """A tolerance or ignore pattern that matches no name, or ignore patterns that
    match every name: a mistake in the test's options, not a change of the model."""


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
        rtol: relative tolerance, fraction of the tensor's magnitude
            (default :data:`~pytest_graphir.defaults.DEFAULT_RTOL`).
        atol: absolute tolerance (default :data:`~pytest_graphir.defaults.DEFAULT_ATOL`).
        patterns: ``(pattern, rtol, atol)`` per node-name pattern (shell-style,
            :func:`fnmatch.fnmatchcase`: ``lm_head/*``, ``*.dropout/*``); the first
            pattern that matches a node's name sets its tolerance. Built from a
            mapping by :meth:`build`.
        ignore: node-name patterns whose nodes are not compared at all (neither
            added, removed, changed nor drifting). Both kinds of pattern also match
            parameter names where a snapshot records parameters.
    """

    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    patterns: tuple[tuple[str, float, float], ...] = ()
    ignore: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Refuse a tolerance that is no number or would switch the check off.

        Raises:
            ValueError: ``rtol``, ``atol`` or a pattern's is not an int or float from
                0 to :data:`~pytest_graphir.defaults.MAX_TOLERANCE`
                (:func:`~pytest_graphir.defaults.tolerance`, the one check of every
                tolerance: marker, ini option, CLI flag, ``compare()``); the message
                names it (``rtol=1e+300``, ``tolerances['lm_head/*']['atol']=...``).
        """
        for pattern, *values in [(None, self.rtol, self.atol), *self.patterns]:
            for key, value in zip(("rtol", "atol"), values, strict=True):
                name = key if pattern is None else f"tolerances[{pattern!r}][{key!r}]"
                _checked(name, value, defaults.tolerance)

    @classmethod
    def build(
        cls,
        rtol: float = DEFAULT_RTOL,
        atol: float = DEFAULT_ATOL,
        tolerances: Mapping[str, Mapping[str, float]] | None = None,
        ignore: Iterable[str] | str | None = None,
    ) -> Tolerance:
        """A tolerance with per-pattern overrides, as the marker and ``compare()`` take them.

        Args:
            rtol: relative tolerance for nodes no pattern matches.
            atol: absolute tolerance for nodes no pattern matches.
            tolerances: ``{"lm_head/*": {"rtol": 1e-2}}``: node-name pattern ->
                ``rtol`` and/or ``atol`` (a key left out keeps ``rtol``/``atol``).
            ignore: node-name patterns not compared (a single string is one pattern).

        Returns:
            The :class:`Tolerance`.

        Raises:
            ValueError: ``ignore`` is not a pattern or list of patterns, a
                ``tolerances`` entry is not a pattern (str) mapped to ``rtol``/``atol``,
                or a tolerance is refused (:meth:`__post_init__`); the message names
                the argument.
        """
        if tolerances is not None and not isinstance(tolerances, Mapping):
            raise ValueError(
                f"tolerances={tolerances!r}: expected a mapping of node-name pattern to "
                '{"rtol": ..., "atol": ...}, e.g. {"lm_head/*": {"rtol": 1e-2}}'
            )
        patterns: list[tuple[str, float, float]] = []
        for pattern, entry in (tolerances or {}).items():
            if not isinstance(pattern, str) or not isinstance(entry, Mapping):
                raise ValueError(
                    f"tolerances[{pattern!r}]={entry!r}: expected a node-name pattern (str) "
                    'mapped to {"rtol": ..., "atol": ...}'
                )
            if unknown := sorted(set(entry) - {"rtol", "atol"}):
                raise ValueError(
                    f"tolerances[{pattern!r}]: unknown key(s) {', '.join(map(str, unknown))}; "
                    "valid: rtol, atol"
                )
            patterns.append((pattern, entry.get("rtol", rtol), entry.get("atol", atol)))
        return cls(rtol, atol, tuple(patterns), _checked("ignore", ignore, defaults.patterns))

    def check_patterns(self, names: Collection[str]) -> None:
        """Refuse patterns that match none of ``names`` and ignore patterns that
        together match all of them (the comparison would pass any change).

        Args:
            names: the entry names patterns match (node and parameter names of both
                documents).

        Raises:
            PatternError: names the first such pattern with the nearest names
                (:func:`difflib.get_close_matches`), or the ignore patterns.
        """
        pairs = [("tolerances", p[0]) for p in self.patterns] + [("ignore", p) for p in self.ignore]
        for kind, pattern in pairs:
            if not any(fnmatchcase(n, pattern) for n in names):
                near = _nearest(pattern, names)
                raise PatternError(
                    f"{kind} pattern {pattern!r} matches no node or parameter name"
                    + (f"; nearest: {', '.join(near)}" if near else "")
                )
        if self.ignore and names and all(self.ignores(n) for n in names):
            raise PatternError(
                f"ignore={list(self.ignore)!r} matches every node: nothing would be "
                "compared; ignore only the nodes that vary"
            )

    def merged(self, other: Tolerance) -> Tolerance:
        """This tolerance with ``other``'s patterns tried first and its ignore patterns added."""
        return replace(
            self, patterns=other.patterns + self.patterns, ignore=self.ignore + other.ignore
        )

    def for_node(self, name: str) -> Tolerance:
        """The tolerance of node ``name``: the first matching pattern's, else this one."""
        return next((Tolerance(r, a) for p, r, a in self.patterns if fnmatchcase(name, p)), self)

    def ignores(self, name: str) -> bool:
        """True when node ``name`` matches an ``ignore`` pattern."""
        return any(fnmatchcase(name, p) for p in self.ignore)

    def allowed(self, stats: dict[str, Any]) -> float:
        """Return the absolute drift allowed for the statistics of one tensor."""
        finite = [abs(stats[k]) for k in ("min", "max", "std") if _finite(stats.get(k))]
        return self.atol + self.rtol * max(finite, default=0.0)


def _checked(name: str, value: Any, check: Callable[[Any], _T]) -> _T:
    """``check(value)``, its ValueError prefixed with ``name=``."""
    try:
        return check(value)
    except ValueError as exc:
        raise ValueError(f"{name}={value!r}: {exc}") from None


def _nearest(pattern: str, names: Collection[str]) -> list[str]:
    """Up to three names, or module patterns (``head/*``, ``*.dropout/*``) made from
    them, closest to ``pattern``."""
    candidates = set(names)
    for name in names:
        scope = name.partition("/")[0]
        candidates |= {f"{scope}/*", f"*.{scope.rpartition('.')[2]}/*", f"{scope}*"}
    return difflib.get_close_matches(pattern, sorted(candidates), n=3)


def both_nan(a: Any, b: Any) -> bool:
    """A constant NaN (model input or output) equals itself."""
    return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def equal_stat(a: Any, b: Any, allowed: float) -> bool:
    """True when a statistic moved from ``a`` to ``b`` by at most ``allowed`` (0 for
    the counts, :data:`~pytest_graphir.ir.COUNT_KEYS`: the caller's choice).

    Non-numbers compare exactly; NaN equals NaN; an infinity equals only itself.
    """
    if a == b or both_nan(a, b):
        return True
    return _finite(a) and _finite(b) and abs(a - b) <= allowed
