"""The ``params`` section: each parameter's shape, dtype and statistics, compared with
the activations' tolerance; weights that differ reported in one line that says why
the activations drift; older snapshots without the section still pass."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest
import torch
from helpers import snapshot_doc
from torch import nn
from workflow import run

from pytest_graphir import init_by_name, trace
from pytest_graphir.compare import compare
from pytest_graphir.ir import OPTIONAL_SECTIONS, TensorMeta
from pytest_graphir.serialize import dumps, loads

ARCHITECTURE_HINT = "random initialisation depends on the architecture; use init_by_name(model)"


class Tied(nn.Module):
    """An embedding and a head sharing one weight, a LayerNorm and a BatchNorm."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, width)
        self.norm = nn.LayerNorm(width)
        self.bn = nn.BatchNorm1d(width)
        self.head = nn.Linear(width, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.embed(ids)).mean(1)
        return self.head(self.bn(h))


IDS = torch.tensor([[1, 2, 3], [4, 5, 6]])


def _model(seed: int = 0, **options: Any) -> nn.Module:
    torch.manual_seed(seed)
    return Tied(**options).eval()


def _doc(model: nn.Module, **options: Any) -> dict[str, Any]:
    return snapshot_doc(model, IDS, **options)


def test_section_records_each_parameter_once() -> None:
    """One entry per parameter, tied weights once under their first name, no buffers;
    shape, dtype and the statistics torch computes."""
    model = _model()
    params = trace(model, IDS).sections["params"]
    assert list(params) == ["embed.weight", "norm.weight", "norm.bias", "bn.weight", "bn.bias"]
    weight = params["embed.weight"]
    assert isinstance(weight, TensorMeta)
    assert weight.shape == [10, 8] and weight.dtype == "float32"
    w = model.embed.weight.detach()
    assert weight.stats["mean"] == pytest.approx(float(w.mean()), abs=1e-6)
    assert weight.stats["std"] == pytest.approx(float(w.std(correction=0)), rel=1e-5)
    assert weight.stats["min"] == float(w.min()) and weight.stats["max"] == float(w.max())
    assert params["norm.weight"].stats["min"] == params["norm.weight"].stats["max"] == 1.0


def test_written_after_outputs_and_read_back() -> None:
    """The section is the first optional one of a serial model (only a parallel
    model's ``plan`` comes before it), one parameter per line, and loads back to the
    same entries; the graph lints clean."""
    graph = trace(_model(), IDS)
    graph.lint(_model().state_dict().keys())
    text = dumps(graph)
    lines = text.splitlines()
    start = lines.index("params:")
    assert lines[start - 2] == "outputs:" and OPTIONAL_SECTIONS[:2] == ("plan", "params")
    assert lines[start + 1].startswith(
        '  embed.weight: {"shape": [10, 8], "dtype": "float32", "mean": '
    )
    doc = loads(text)
    assert list(doc["params"]) == list(graph.sections["params"])
    assert dumps(doc) == text


def test_without_statistics_shape_and_dtype_only() -> None:
    """``stats=False`` and the modules view: shape and dtype; a meta model likewise."""
    for options in ({"stats": False}, {"view": "modules"}):
        params = trace(_model(), IDS, **options).sections["params"]
        assert params["embed.weight"].to_data() == {"shape": [10, 8], "dtype": "float32"}
    with torch.device("meta"):
        meta_model = Tied().eval()
    params = trace(meta_model, IDS.to("meta")).sections["params"]
    assert params["embed.weight"].to_data() == {"shape": [10, 8], "dtype": "float32"}


def test_same_weights_no_change_and_old_snapshot_without_section_passes() -> None:
    doc = _doc(_model())
    assert not compare(doc, _doc(_model()))
    old = {k: v for k, v in doc.items() if k != "params"}
    assert not compare(old, _doc(_model()))  # written before the section existed
    assert not compare(_doc(_model()), old)


def test_weights_differ_within_tolerance_pass() -> None:
    """The same tolerance as activations: a 1e-5 relative change to every weight passes."""
    model = _model()
    doc = _doc(model)
    with torch.no_grad():
        model.embed.weight.mul_(1 + 1e-5)
    assert not compare(doc, _doc(model))


def test_weights_differ_with_the_same_architecture() -> None:
    """Another seed: one ``weights differ`` line, first among the drift, naming the
    parameters whose statistics moved (the constant norm weights did not)."""
    result = compare(_doc(_model(0)), _doc(_model(1)))
    drift = [c for c in result.changes if c.kind == "drift"]
    first = drift[0]
    assert first.section == "params" and first.nodes == ["embed.weight"]
    assert str(first) == (
        "drift: weights differ: 1 of 5 parameters (embed.weight): "
        "the weights were loaded, seeded or initialised differently"
    )
    assert sum(c.section == "params" for c in result.changes) == 1
    lines = result.lines(0)  # no structural change: the drift-only line, then this one
    assert lines[1] == "  drift only: the inputs are unchanged; 1 parameter differs (embed.weight)"
    assert lines[2] == f"  {first}"


def test_parameter_shape_change_and_added_parameter() -> None:
    """A parameter of another shape is a structural change of the section; one added to
    a module that is not itself added is an ``added: params.<name>`` line."""
    old = _doc(_model())
    wider = _doc(_model(width=12))
    changed = [c for c in compare(old, wider).changes if c.section == "params"]
    assert "changed: params.embed.weight shape [10,8] -> [10,12]" in [str(c) for c in changed]
    assert not any(c.kind == "drift" for c in changed)  # a shape change, not drift

    model = _model()
    model.extra = nn.Parameter(torch.ones(3))  # type: ignore[assignment]
    changes = [str(c) for c in compare(old, _doc(model)).changes]
    assert any(c.startswith("added: params.extra") for c in changes), changes


def test_parameters_of_an_added_module_fold_into_it() -> None:
    """The parameters of an added module are the module's ``added`` line; the common
    weights that differ say the architecture moved the random stream."""

    def mlp(layers: int) -> nn.Sequential:
        torch.manual_seed(0)
        return nn.Sequential(*[nn.Linear(4, 4) for _ in range(layers)]).eval()

    x = torch.ones(1, 4)
    result = compare(loads(dumps(trace(mlp(2), x))), loads(dumps(trace(mlp(3), x))))
    assert not any(c.section == "params" and c.kind == "added" for c in result.changes)
    assert [str(c).split(" (")[0] for c in result.changes if c.kind == "added"] == ["added: 2"]
    assert not [c for c in result.changes if c.section == "params"]  # same stream order: same
    result = compare(loads(dumps(trace(mlp(3), x))), loads(dumps(trace(mlp(2), x))))
    assert [str(c).split(" (")[0] for c in result.changes if c.kind == "removed"] == ["removed: 2"]

    # a layer built first: every later weight is drawn from a moved stream
    def built_first(extra: bool) -> nn.Sequential:
        torch.manual_seed(0)
        layers = {"extra": nn.Linear(4, 4)} if extra else {}
        layers.update(a=nn.Linear(4, 4), b=nn.Linear(4, 4))
        return nn.Sequential(OrderedDict(layers)).eval()

    moved = compare(
        loads(dumps(trace(built_first(False), x))), loads(dumps(trace(built_first(True), x)))
    )
    weights = [c for c in moved.changes if c.section == "params"]
    assert [str(c) for c in weights] == [
        f"drift: weights differ: 4 of 4 parameters (a.weight, a.bias, b.weight, b.bias): "
        f"{ARCHITECTURE_HINT}"
    ]


# -- end to end: a Llama one layer deeper, without init_by_name ---------------------------

TEST_LLAMA = """
import os
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from pytest_graphir import trace

def test_llama(graphir_snapshot):
    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=128, max_position_embeddings=64,
        num_hidden_layers=int(os.environ.get("LAYERS", "6")),
    )
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    model = LlamaForCausalLM(config).eval()
    assert trace(model, ids) == graphir_snapshot
"""


def test_llama_one_more_layer_says_why_everything_drifts(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without init_by_name the +1-layer Llama's failure says, before the drift, that
    the weights differ and why (with it, tests/test_weights.py: no weights line)."""
    pytest.importorskip("transformers")
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_llama=TEST_LLAMA)
    run(pytester, "--graphir-update").assert_outcomes(passed=1)
    monkeypatch.setenv("LAYERS", "7")
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*added: model.layers.6 (module LlamaDecoderLayer*",
            "*drift: weights differ: 44 of 57 parameters (model.embed_tokens.weight, "
            f"model.layers.0.self_attn.q_proj.weight, *): {ARCHITECTURE_HINT}",
            "*model.embed_tokens: * drift downstream of params.model.embed_tokens.*",
        ]
    )


def test_old_snapshot_without_params_passes_and_is_not_rewritten(
    graphir_project: pytest.Pytester,
) -> None:
    """A snapshot written before the section existed passes against a trace that has
    it, and ``--graphir-update`` leaves it byte-identical (it matches)."""
    p = graphir_project
    p.makepyfile(
        test_mlp="""
import models
from pytest_graphir import trace

def test_mlp(graphir_snapshot):
    model, inputs = models.mlp()
    assert trace(model, *inputs) == graphir_snapshot
"""
    )
    run(p, "--graphir-update").assert_outcomes(passed=1)
    snap = p.path / "__snapshots__/test_mlp/test_mlp.graphir"
    lines = snap.read_text().splitlines(keepends=True)
    start = lines.index("params:\n")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("  "))
    old = "".join(lines[:start] + lines[end:])
    assert "params" not in old
    snap.write_text(old)
    run(p).assert_outcomes(passed=1)
    run(p, "--graphir-update").assert_outcomes(passed=1)
    assert snap.read_text() == old


def test_init_by_name_makes_params_independent_of_order() -> None:
    """Two modules built in the opposite order get the same weights by name."""

    class Two(nn.Module):
        def __init__(self, flip: bool) -> None:
            super().__init__()
            if flip:
                self.b = nn.Linear(3, 3)
                self.a = nn.Linear(3, 3)
            else:
                self.a = nn.Linear(3, 3)
                self.b = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x))

    x = torch.ones(1, 3)
    one = init_by_name(Two(False).eval())
    two = init_by_name(Two(True).eval())
    params = compare(loads(dumps(trace(one, x))), loads(dumps(trace(two, x))))
    assert not params, params.lines()


def test_lint_refuses_a_params_section_that_is_no_mapping() -> None:
    graph = trace(_model(), IDS)
    graph.sections["params"] = ["embed.weight"]
    assert "section params: not a mapping" in graph.lint_problems()
