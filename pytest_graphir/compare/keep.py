"""What an update keeps: the stored statistics that are still within the tolerance.

``pytest --graphir-update`` writes this run's document with every statistic that the
comparison would have let pass replaced by the stored one, so an accepted change
rewrites only the lines whose structure changed or whose values moved beyond the
tolerance, and the written file still matches the model. The test is the
comparison's own (:meth:`.nodes.Comparer.diff`, node alignment by
:func:`.nodes.renumbering`): there is no second tolerance rule.
"""

from __future__ import annotations

from typing import Any

from .nodes import Comparer, Place, paired, split_entry
from .tolerance import Tolerance


def keep_within(
    stored: dict[str, Any], received: dict[str, Any], tolerance: Tolerance
) -> dict[str, Any]:
    """``received`` with the statistics that are within ``tolerance`` of ``stored``'s
    replaced by ``stored``'s.

    Entries are paired as :func:`pytest_graphir.compare.compare` pairs them: by
    section and name, nodes after the renumbering of an inserted or removed op. In a
    tensor entry present on both sides with the same shape and dtype, each statistic
    that does not drift (per :meth:`.nodes.Comparer.diff`, with the node's own
    tolerance) keeps its stored value; when the statistics so mixed would drift from
    ``received``'s (a kept value outside the tolerance that the moved ``min``/
    ``max``/``std`` now scale), the entry takes all of ``received``'s. Everything
    else (structure, ``meta``, sequence sections, anything one-sided) is
    ``received``'s.

    Args:
        stored: the snapshot document (:func:`pytest_graphir.serialize.loads`).
        received: this run's document, in the same form; not modified.
        tolerance: the comparison's tolerance, patterns included.

    Returns:
        A new document: compared with ``received`` under ``tolerance`` it shows no
        drift, and serialized it repeats ``stored``'s text on every line whose
        statistics stayed within the tolerance and whose structure did not change.
    """
    cmp = Comparer(tolerance)
    stored, _ = paired(stored, received, cmp)
    out = dict(received)
    for section, entries in received.items():
        if isinstance(entries, dict) and isinstance(old := stored.get(section), dict):
            out[section] = {
                name: _walk(cmp, (section, name), old[name], value) if name in old else value
                for name, value in entries.items()
            }
    return out


def _walk(cmp: Comparer, where: Place, old: Any, new: Any) -> Any:
    """``new`` with the stored statistics kept, walked as :meth:`.nodes.Comparer.value`
    walks it (mappings by key, lists of one length by index, tensor entries)."""
    if old == new:
        return old
    if isinstance(old, dict) and isinstance(new, dict):
        if "dtype" not in new or "ref" in new:
            return {k: _walk(cmp, where, old[k], v) if k in old else v for k, v in new.items()}
        # a tensor entry: its statistics within the tolerance kept from ``old``
        shape_old, stats_old = split_entry(old)
        if shape_old != split_entry(new)[0] or not stats_old:
            return new
        # same shape and dtype: every change found is a statistic's drift
        moved = {c.field for c in cmp.diff(where, "", old, new)}
        kept = {k: old[k] if k in stats_old and k not in moved else v for k, v in new.items()}
        return new if moved and cmp.diff(where, "", kept, new) else kept
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [_walk(cmp, where, a, b) for a, b in zip(old, new, strict=True)]
    return new
