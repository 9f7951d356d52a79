"""``init_by_name``: weights that depend on the parameter's name only, so one more layer
adds a layer and moves nothing else (transformers models from configs, random
weights)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import torch
from helpers import snapshot_doc
from report_helpers import llama_model as llama  # the report tests' tiny Llama
from torch import nn

import pytest_graphir
from pytest_graphir import init_by_name
from pytest_graphir.compare import Comparison, compare
from pytest_graphir.weights import name_seed

transformers = pytest.importorskip("transformers")


IDS = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))


def _compare(old: Any, new: Any) -> Comparison:
    return compare(snapshot_doc(old, IDS), snapshot_doc(new, IDS))


def test_exported_at_the_top_level_without_importing_torch_eagerly() -> None:
    assert "init_by_name" in pytest_graphir.__all__
    assert pytest_graphir.init_by_name is init_by_name
    code = "import sys, pytest_graphir; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_parameter_depends_on_its_name_only() -> None:
    """Every parameter of the 6-layer model equals the 7-layer model's parameter of
    the same name (without init_by_name most of them differ)."""
    six, seven = dict(llama(6).named_parameters()), dict(llama(7).named_parameters())
    assert set(six) < set(seven)
    assert [n for n in six if not torch.equal(six[n], seven[n])] == []
    raw6 = dict(llama(6, init=False).named_parameters())
    raw7 = dict(llama(7, init=False).named_parameters())
    assert sum(not torch.equal(raw6[n], raw7[n]) for n in raw6) > len(raw6) // 2


def test_one_more_layer_reads_as_one_added_layer() -> None:
    """End to end: the +1-layer model fails with ``added: model.layers.6`` and no drift
    on the embeddings or layers 0-5 (only what reads layer 6's output drifts), and its
    parameter fingerprints match (without init_by_name, they differ)."""
    result = _compare(llama(6), llama(7))
    added = [c for c in result.changes if c.kind == "added"]
    assert [str(c).split(" (")[0] for c in added] == ["added: model.layers.6"]
    drifting = {c.node for c in result.changes if c.kind == "drift"}
    assert drifting, "the final norm and the head read the new layer"
    upstream = [
        n for n in drifting if n.startswith(("model.embed_tokens", "model.layers.", "inputs"))
    ]
    assert upstream == []
    assert {"model.norm/to#0", "lm_head/linear#0"} <= drifting
    assert not [c for c in result.changes if c.section == "params"]  # every weight the same
    without = _compare(llama(6, init=False), llama(7, init=False))
    assert [c.label for c in without.changes if c.section == "params"] == ["weights"]


def test_scale_kept_and_the_global_generator_untouched() -> None:
    """The Llama's linear weights keep transformers' N(0, initializer_range) scale, its
    norm weights stay ones, and the caller's random state is as it was."""
    model = llama(2, init=False)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    state = torch.get_rng_state()
    init_by_name(model, seed=3)
    assert torch.equal(torch.get_rng_state(), state)
    for name, p in model.named_parameters():
        if "norm" in name:
            assert torch.equal(p, torch.ones_like(p)), name
            continue
        assert not torch.equal(p, before[name]), name
        std = float(p.detach().std())
        assert 0.018 < std < 0.022, (name, std)  # initializer_range 0.02


def test_seed_changes_the_draw_and_is_stable() -> None:
    a = dict(init_by_name(nn.Linear(16, 16), seed=0).named_parameters())
    b = dict(init_by_name(nn.Linear(16, 16), seed=0).named_parameters())
    c = dict(init_by_name(nn.Linear(16, 16), seed=1).named_parameters())
    assert torch.equal(a["weight"], b["weight"]) and not torch.equal(a["weight"], c["weight"])
    assert name_seed(0, "weight") == 143123176086553664  # SHA-256 based: not salted per process


def test_tied_weights_stay_tied() -> None:
    model = llama(2, tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_buffers_and_constant_parameters_left_alone() -> None:
    """BatchNorm running statistics (also reset by BatchNorm's own
    ``reset_parameters``) are unchanged, LayerNorm weight and bias stay 1 and 0, a
    Linear weight is re-drawn at its init's scale, and a weight re-initialised by hand
    after construction keeps its own scale (mean and std)."""
    first, bn, ln, last = nn.Linear(8, 16), nn.BatchNorm1d(16), nn.LayerNorm(16), nn.Linear(16, 4)
    net = nn.Sequential(first, bn, ln, last)
    nn.init.normal_(last.weight, std=1e-3)
    net.train()
    net[:3](torch.randn(5, 8))
    assert bn.running_mean is not None and bn.running_var is not None
    running = (bn.running_mean.clone(), bn.running_var.clone())
    drawn = first.weight.detach().clone()
    init_by_name(net)
    assert torch.equal(bn.running_mean, running[0]) and torch.equal(bn.running_var, running[1])
    assert bn.num_batches_tracked is not None and int(bn.num_batches_tracked) == 1
    assert torch.equal(ln.weight, torch.ones(16)) and torch.equal(ln.bias, torch.zeros(16))
    assert torch.equal(bn.weight, torch.ones(16))
    assert not torch.equal(first.weight, drawn)
    bound = 1 / 8**0.5  # Linear.reset_parameters: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert float(first.weight.detach().abs().max()) <= bound
    assert 0.5e-3 < float(last.weight.detach().std()) < 2e-3


def test_rotary_buffer_unchanged() -> None:
    model = llama(2, init=False)
    inv_freq = model.model.rotary_emb.inv_freq.clone()
    init_by_name(model)
    assert torch.equal(model.model.rotary_emb.inv_freq, inv_freq)


def test_meta_model_has_nothing_to_draw() -> None:
    with torch.device("meta"):
        model = llama(2, init=False)
    assert init_by_name(model) is model
    assert all(p.is_meta for p in model.parameters())


def test_not_a_module() -> None:
    with pytest.raises(TypeError, match=r"init_by_name\(\) needs an nn.Module"):
        init_by_name("model")  # type: ignore[type-var]


def test_lazy_parameters_skipped() -> None:
    lazy = nn.LazyLinear(4)
    assert init_by_name(lazy) is lazy
    assert lazy(torch.ones(2, 3)).shape == (2, 4)


class _Custom(nn.Module):
    """A parameter no init draws (no reset_parameters): the mean-and-std path."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.randn(64, 8) * 3 + 1)


def _kinds() -> list[tuple[str, Any]]:
    tr = transformers
    return [
        ("mlp", lambda: nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))),
        ("conv", lambda: nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))),
        ("lstm", lambda: nn.LSTM(8, 16)),
        ("custom", _Custom),
        ("gpt2", lambda: tr.GPT2Model(tr.GPT2Config(n_layer=1, n_embd=32, n_head=2))),
        ("bert", lambda: tr.BertModel(tr.BertConfig(num_hidden_layers=1, hidden_size=32,
                                                    num_attention_heads=2, intermediate_size=64))),
        ("t5", lambda: tr.T5Model(tr.T5Config(num_layers=1, d_model=32, d_kv=8, d_ff=64,
                                              num_heads=2))),
    ]  # fmt: skip


@pytest.mark.parametrize(("kind", "build"), _kinds(), ids=[k for k, _ in _kinds()])
def test_a_second_call_gives_the_same_weights(kind: str, build: Any) -> None:
    """init_by_name is idempotent: a second (and third) call leaves every parameter
    as the first call drew it."""
    torch.manual_seed(0)
    model = init_by_name(build())
    first = {k: v.clone() for k, v in model.state_dict().items()}
    for _ in range(2):
        init_by_name(model)
        for key, value in model.state_dict().items():
            assert torch.equal(value, first[key]), (kind, key)
