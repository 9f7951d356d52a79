"""Real transformers models: committed snapshots pass on rerun, architecture changes
fail with a diff that names the changed nodes.

The ``test_*_snapshot`` tests are ordinary ``graphir_snapshot`` tests whose files are
committed under ``__snapshots__/test_real_models/``. The ``*_change_*`` tests trace a
modified model and compare it with that committed file through the same code the
fixture uses, to check the wording of the failure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import real_models
from helpers import Observer, snapshot_doc

from pytest_graphir import trace
from pytest_graphir.compare import Comparison, compare
from pytest_graphir.serialize import loads

SNAPSHOTS = Path(__file__).parent / "__snapshots__" / "test_real_models"


def _has(result: Comparison, node: str, text: str) -> bool:
    """True when a change about ``node`` says ``text``."""
    return any(c.mentions(node) and text in str(c) for c in result.changes)


def _against(snapshot_test: str, model: Any, *inputs: Any, **options: Any) -> Comparison:
    stored = loads((SNAPSHOTS / f"{snapshot_test}.graphir").read_text())
    return compare(stored, snapshot_doc(model, *inputs, **options))


def test_gpt2_snapshot(graphir_snapshot: Any) -> None:
    model, ids = real_models.gpt2()
    assert trace(model, ids) == graphir_snapshot


def test_bert_snapshot(graphir_snapshot: Any) -> None:
    model, ids = real_models.bert()
    assert trace(model, ids) == graphir_snapshot


def test_vit_snapshot(graphir_snapshot: Any) -> None:
    model, pixels = real_models.vit()
    assert trace(model, pixels) == graphir_snapshot


def test_resnet_snapshot(graphir_snapshot: Any) -> None:
    model, pixels = real_models.resnet()
    assert trace(model, pixels) == graphir_snapshot


@pytest.mark.slow
def test_gpt2_small_snapshot(graphir_snapshot: Any) -> None:
    """GPT-2 small, 12 layers: 529 ops."""
    model, ids = real_models.gpt2(n_layer=12)
    graph = trace(model, ids)
    assert len(graph.ops()) == 529
    assert graph == graphir_snapshot


def test_gpt2_same_model_matches_committed_snapshot() -> None:
    model, ids = real_models.gpt2()
    assert not _against("test_gpt2_snapshot", model, ids)


def test_gpt2_activation_change_names_nodes() -> None:
    model, ids = real_models.gpt2(activation_function="relu")
    result = _against("test_gpt2_snapshot", model, ids)
    lines = result.lines(max_lines=0)
    for layer in (0, 1):
        act = f"transformer.h.{layer}.mlp.act"
        assert _has(result, act, "module NewGELUActivation -> ReLU")
        # the MLP's output projection now reads the ReLU: said on the added line
        added = f"  added: {act}/relu#0 (op relu), read in place of {act}/mul#3 by 3 nodes: "
        assert any(line.startswith(added) for line in lines), lines
        assert _has(result, f"{act}/relu#0", f"transformer.h.{layer}.mlp.c_proj/view#0")
        assert (
            f"  removed: {act}/{{mul#0,pow#0,mul#1,add#0,mul#2,tanh#0,add#1,mul#3}} (8 ops)"
            in lines
        )
    counts = result.counts()
    assert counts["added"] == 2 and counts["removed"] == 2
    assert counts["drift"] > 0  # everything after the first MLP computes other values


def _nodes_inside(snapshot_test: str, module: str) -> int:
    doc = loads((SNAPSHOTS / f"{snapshot_test}.graphir").read_text())
    return sum(1 for n in doc["nodes"] if n.startswith((module + ".", module + "/")))


def test_gpt2_extra_layer_is_one_added_module() -> None:
    model, ids = real_models.gpt2(n_layer=3)
    result = _against("test_gpt2_snapshot", model, ids)
    added = [c for c in result.changes if c.kind == "added"]
    inside = _nodes_inside("test_gpt2_snapshot", "transformer.h.1")  # blocks are alike
    assert [str(c) for c in added] == [
        f"added: transformer.h.2 (module GPT2Block, and {inside} nodes inside it)"
    ]
    assert not [c for c in result.changes if c.kind == "removed"]
    # the final layer norm now reads the new block's output
    assert _has(
        result, "transformer.ln_f/layer_norm#0", "$transformer.h.1/add#1 -> $transformer.h.2/add#1"
    )


def test_gpt2_hidden_size_change_reports_shapes() -> None:
    model, ids = real_models.gpt2(n_embd=384, n_head=6)
    result = _against("test_gpt2_snapshot", model, ids)
    assert _has(result, "transformer.h.0.mlp.c_fc/addmm#0", "out[0].shape [16,3072] -> [16,1536]")
    assert _has(result, "transformer.wte/embedding#0", "out[*].shape [1,16,768] -> [1,16,384]")
    assert not [c for c in result.changes if c.kind in ("added", "removed")]


def test_bert_layer_count_change() -> None:
    model, ids = real_models.bert(num_hidden_layers=1)
    result = _against("test_bert_snapshot", model, ids)
    removed = [str(c) for c in result.changes if c.kind == "removed"]
    inside = _nodes_inside("test_bert_snapshot", "encoder.layer.1")
    assert inside > 30
    assert removed == [f"removed: encoder.layer.1 (module BertLayer, and {inside} nodes inside it)"]


def test_vit_activation_change() -> None:
    model, pixels = real_models.vit(hidden_act="relu")
    result = _against("test_vit_snapshot", model, pixels)
    text = [str(c) for c in result.changes]
    acts = [path for path, m in model.named_modules() if type(m).__name__ == "ReLU"]
    assert len(acts) == 2  # one per layer
    for path in acts:
        assert _has(result, path, "module GELUActivation -> ReLU")
        assert any(t.startswith(f"added: {path}/relu#0 (op relu), read in place of") for t in text)
        assert f"removed: {path}/gelu#0 (op gelu)" in text


def capture_hook(module: Any, args: Any, output: Any) -> None:
    return None


def _hooked_gpt2(where: str = "transformer.h.1.attn", prepend: bool = False) -> Any:
    model, ids = real_models.gpt2()
    target = model.get_submodule(where)
    target.register_forward_hook(capture_hook)
    target.register_forward_hook(Observer(), prepend=prepend)
    return model, ids


def _frozen_bert() -> Any:
    model, ids = real_models.bert()
    model.embeddings.requires_grad_(False)
    return model, ids


def test_gpt2_hooks_backward_snapshot(graphir_snapshot: Any) -> None:
    model, ids = _hooked_gpt2()
    assert trace(model, ids, hooks=True, backward=True) == graphir_snapshot


def test_bert_hooks_backward_snapshot(graphir_snapshot: Any) -> None:
    model, ids = _frozen_bert()
    graph = trace(model, ids, hooks=True, backward=True)
    frozen = [n for n, g in graph.sections["grads"].items() if g == "frozen"]
    assert frozen == [n for n, _ in model.embeddings.named_parameters(prefix="embeddings")]
    assert graph == graphir_snapshot


def test_gpt2_prepended_hook_names_the_event() -> None:
    model, ids = _hooked_gpt2(prepend=True)
    result = _against("test_gpt2_hooks_backward_snapshot", model, ids, hooks=True, backward=True)
    assert [str(c) for c in result.changes] == [
        "changed: transformer.h.1.attn forward_hook 'Observer.__call__' fired before "
        "'capture_hook' (was after)"
    ]


def test_gpt2_hook_moved_to_another_module() -> None:
    model, ids = _hooked_gpt2(where="transformer.h.0.attn")
    result = _against("test_gpt2_hooks_backward_snapshot", model, ids, hooks=True, backward=True)
    assert [str(c) for c in result.changes] == [
        "changed: transformer.h.0.attn forward_hook 'capture_hook' moved here from "
        "transformer.h.1.attn",
        "changed: transformer.h.0.attn forward_hook 'Observer.__call__' moved here from "
        "transformer.h.1.attn",
    ]


def test_bert_unfrozen_embeddings_reported() -> None:
    model, ids = real_models.bert()
    result = _against("test_bert_hooks_backward_snapshot", model, ids, hooks=True, backward=True)
    changed = [str(c) for c in result.changes if c.kind == "changed"]
    assert any(
        c.startswith("changed: grads.embeddings.word_embeddings.weight frozen -> ") for c in changed
    ), changed


def test_gpt2_blackbox_attention_snapshot(graphir_snapshot: Any) -> None:
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    model, ids = real_models.gpt2()
    assert trace(model, ids, blackbox=[GPT2Attention]) == graphir_snapshot


def test_gpt2_depth_snapshot(graphir_snapshot: Any) -> None:
    model, ids = real_models.gpt2()
    assert trace(model, ids, depth=3) == graphir_snapshot


def test_bert_blackbox_attention_snapshot(graphir_snapshot: Any) -> None:
    model, ids = real_models.bert()
    assert (
        trace(model, ids, blackbox=["encoder.layer.0.attention", "encoder.layer.1.attention"])
        == graphir_snapshot
    )


def test_bert_depth_snapshot(graphir_snapshot: Any) -> None:
    model, ids = real_models.bert()
    assert trace(model, ids, depth=2) == graphir_snapshot


def test_bert_module_view_snapshot(graphir_snapshot: Any) -> None:
    model, ids = real_models.bert()
    assert trace(model, ids, view="modules") == graphir_snapshot


def test_gpt2_depth_snapshot_against_full_graph_says_granularity() -> None:
    model, ids = real_models.gpt2()
    result = _against("test_gpt2_depth_snapshot", model, ids)
    assert [c.where for c in result.changes] == ["granularity"]
