"""Shared by the report tests: a small real diff (the example MLP, ReLU swapped for
GELU) with its changes built by hand, and a reader for the data a report embeds."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import models

from pytest_graphir import trace
from pytest_graphir.ir import GraphIR


@dataclass
class Change:
    """Stand-in with the attributes of ``pytest_graphir.compare.Change`` the report reads."""

    kind: str
    node: str = ""
    scope: str = ""
    field: str = ""
    old: Any = None
    new: Any = None
    tolerance: Any = None
    section: str = "nodes"


def mlp_diff() -> tuple[GraphIR, GraphIR, list[Change]]:
    """``(new, old, changes)``: the MLP traced with GELU (new) and ReLU (old)."""
    old = trace(*_flat(models.mlp("relu")))
    new = trace(*_flat(models.mlp("gelu")))
    changes = [
        Change("changed", "act", "act", "module", "ReLU", "GELU"),
        Change("removed", "act/relu#0", "act", old=old.node("act/relu#0").to_data()),
        Change("added", "act/gelu#0", "act", new=new.node("act/gelu#0").to_data()),
        Change("drift", "fc2/linear#0", "fc2", "out[0].mean", -0.165429, -0.17, 0.001),
        Change("changed", "x", "", "shape", [2, 8], [2, 8], section="inputs"),
    ]
    return new, old, changes


def _flat(pair: tuple[Any, tuple[Any, ...]]) -> tuple[Any, ...]:
    return (pair[0], *pair[1])


_DATA = re.compile(r'<script type="application/json" id="graphir-data">(.*?)</script>', re.S)


def embedded_data(html: str) -> dict[str, Any]:
    """The JSON document a report carries, parsed the way the page parses it."""
    found = _DATA.findall(html)
    assert len(found) == 1, "exactly one data block"
    return json.loads(found[0])  # \u003c escapes decode to '<' as in JSON.parse
