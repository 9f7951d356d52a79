"""The ``params`` section: parameter fingerprints compared, and why activations drift.

Each parameter present on both sides is compared as a tensor entry (shape and dtype
exactly, statistics within the same :class:`~.tolerance.Tolerance` as activations).
Parameters whose statistics differ are reported together, as one ``drift`` change put
first among the drift, since they explain the activation drift that follows::

    drift: weights differ: 44 of 57 parameters (model.embed_tokens.weight, ...):
    random initialisation depends on the architecture; use init_by_name(model)

A snapshot without the section (written before it existed) is compared without it.
"""

from __future__ import annotations

from typing import Any

from ..ir import PARAMS_SECTION
from ..names import PATH_SEPARATORS, first_names
from .message import Change
from .nodes import Comparer, only_in, split_entry


def compare_params(cmp: Comparer, stored: dict[str, Any], received: dict[str, Any]) -> None:
    """Compare the ``params`` sections of two documents into ``cmp``.

    Args:
        cmp: the comparison's collector: shape and dtype changes
            (``changed: params.<name> shape [..] -> [..]``) and parameters present on
            one side only go to its structural changes, one merged ``weights differ``
            change to the front of its drift. It suggests ``init_by_name`` when
            parameters were added or removed and at least half of those compared
            differ (a trace does not record whether the model was built with it).
        stored: the snapshot document; nothing is compared when it or ``received``
            has no ``params`` section. A parameter of a module added or removed as a
            node is left to that node's ``added``/``removed`` change.
        received: this run's document.
    """
    old, new = stored.get(PARAMS_SECTION), received.get(PARAMS_SECTION)
    if old is None or new is None:
        return
    one_sided = only_in(PARAMS_SECTION, old, new)
    # module nodes of a first call (a module whose only later call, blk@1, is new was
    # there before) added or removed: their parameters are left to their lines
    nodes = only_in("nodes", stored.get("nodes", {}), received.get("nodes", {}))
    modules = [(c.kind, f"{c.node}.") for c in nodes if not set(PATH_SEPARATORS) & set(c.node)]
    cmp.structural += [
        c for c in one_sided if not any(c.kind == k and c.node.startswith(m) for k, m in modules)
    ]
    found = {n: cmp.diff((PARAMS_SECTION, n), "", v, new[n]) for n, v in old.items() if n in new}
    cmp.structural += [c for cs in found.values() for c in cs if c.kind != "drift"]
    # with statistics on both sides; else shape and dtype only
    compared = [n for n in found if split_entry(old[n])[1] and split_entry(new[n])[1]]
    if differ := [n for n in compared if found[n] and found[n][0].kind == "drift"]:
        # a trace does not record init_by_name: parameters added or removed and most
        # weights moved is the random stream an architecture change shifts
        why = (
            "random initialisation depends on the architecture; use init_by_name(model)"
            if one_sided and 2 * len(differ) >= len(compared)
            else "the weights were loaded, seeded or initialised differently"
        )
        note = f"differ: {len(differ)} of {len(compared)} parameters ({first_names(differ)}): {why}"
        weights = Change("drift", section=PARAMS_SECTION, nodes=differ, label="weights", note=note)
        cmp.drift.insert(0, weights)
