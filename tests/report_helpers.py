"""Shared by the report tests: a small real diff (the example MLP, ReLU swapped for
GELU) with its changes built by hand (``pytest_graphir.compare.Change``), a reader
for the data a report embeds, and a Llama with weights seeded per parameter name."""

from __future__ import annotations

import json
import re
from typing import Any

import models
import torch
from torch import nn

from pytest_graphir import init_by_name, trace
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
    """The JSON document a report carries, parsed the way the page parses it, each
    item's detail unpacked as the page unpacks it (packed tensor entries expanded,
    the ``op``/``module`` key put back)."""
    found = _DATA.findall(html)
    assert len(found) == 1, "exactly one data block"
    data = json.loads(found[0])  # \u003c escapes decode to '<' as in JSON.parse
    keysets = data["keysets"]

    def unpack(v: Any) -> Any:
        if isinstance(v, list):
            return [unpack(x) for x in v]
        if isinstance(v, dict):
            if "~" in v:
                k, *values = v["~"]
                return dict(zip(keysets[k], map(unpack, values), strict=True))
            return {key: unpack(x) for key, x in v.items()}
        return v

    for item in data["items"]:
        detail = unpack(item[5])
        if item[1] in ("op", "module") and isinstance(detail, dict):
            detail = {item[1]: item[2], **detail}
        item[5] = detail
    return data


def llama_model(layers: int, *, init: bool = True, **config: Any) -> Any:
    """A Llama (transformers, hidden size 32, vocabulary 128) of ``layers`` layers built
    from a config (``config`` adds to it) with torch's generator seeded as the fixture
    does, in eval mode; with ``init``, its weights drawn by parameter name
    (:func:`pytest_graphir.init_by_name`)."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        **config,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    return init_by_name(model) if init else model


def llama(layers: int = 6) -> tuple[nn.Module, torch.Tensor]:
    """:func:`llama_model` with weights drawn by name, and 8 token ids."""
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    return llama_model(layers), ids
