"""Shared by the report tests: a small real diff (the example MLP, ReLU swapped for
GELU) with its changes built by hand (``pytest_graphir.compare.Change``), and a
reader for the data a report embeds."""

from __future__ import annotations

import json
import re
from typing import Any

import models

from pytest_graphir import trace
from pytest_graphir.compare import Change
from pytest_graphir.ir import GraphIR


def mlp_diff() -> tuple[GraphIR, GraphIR, list[Change]]:
    """``(new, old, changes)``: the MLP traced with GELU (new) and ReLU (old)."""
    old = trace(*_flat(models.mlp("relu")))
    new = trace(*_flat(models.mlp("gelu")))
    changes = [
        Change("changed", "act", scope="act", field="module", old="ReLU", new="GELU"),
        Change("removed", "act/relu#0", scope="act", old=old.node("act/relu#0").to_data()),
        Change("added", "act/gelu#0", scope="act", new=new.node("act/gelu#0").to_data()),
        Change(
            "drift",
            "fc2/linear#0",
            scope="fc2",
            field="out[0].mean",
            old=-0.165429,
            new=-0.17,
            tolerance=0.001,
        ),
        Change("changed", "x", section="inputs", field="shape", old=[2, 8], new=[2, 8]),
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
