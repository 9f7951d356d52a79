"""Stock-model false alarms and library compile paths of ``compare_compiled``.

What Dynamo legitimately does differently from eager is not a divergence: state
calls that carry no tensor (``@torch.no_grad()``), results nobody uses (folded),
one odd op in a long sequence (the alignment goes on). What a library does
differently under compile is a *library compile path*, named at its source line and
failing only with ``strict=True``; the user's own code always fails.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import compiled_models
import compiled_versions
import pytest
import torch
import torch._dynamo
from compiled_models import seeded
from torch import nn

from pytest_graphir.compiled import compare_compiled
from pytest_graphir.compiled.check import align, is_library_file
from pytest_graphir.compiled.records import CompiledOp, EagerOp

HELPERS = Path(compiled_models.__file__).parent / "compiled_helpers" / "graphir_mask_helpers"


pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # tests/conftest.py


class Rotary(nn.Module):
    """A ``@torch.no_grad()`` method, as in Llama's rotary embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", torch.arange(8.0))

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.inv_freq).cos()


class WithRotary(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.rotary = Rotary()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        unused = x[:, 0]  # noqa: F841  (an indexing op whose result is never read)
        return self.fc(x) + self.rotary(x)


def test_no_grad_state_calls_and_unused_indexing_are_not_divergence() -> None:
    torch.manual_seed(0)
    report = compare_compiled(WithRotary().eval(), seeded(2, 8))
    assert report, "\n".join(report.lines())
    assert [e.name for e in report.folded] == ["getitem#0"]
    eager_ops = [n.target for n in report.eager.nodes if n.kind == "op"]  # type: ignore[union-attr]
    # whether or not the eager trace keeps the no_grad state calls, they do not count
    assert report.eager_ops == len(eager_ops) - eager_ops.count("_C._set_grad_enabled")


def test_one_odd_op_does_not_derail_the_alignment() -> None:
    names = ["linear", "relu", "linear", "add", "mul", "linear", "tanh", "sum"]
    eager = [EagerOp(f"{n}#{i}", n, "", index=i) for i, n in enumerate(names)]
    compiled = [CompiledOp(n, "", 0) for n in names]
    compiled.insert(2, CompiledOp("_odd_op", "", 0))
    divergences, folded = align(eager, compiled)
    assert [(d.kind, [c.op for c in d.compiled]) for d in divergences] == [("extra", ["_odd_op"])]
    assert not folded


def _import_helpers(directory: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Import ``graphir_mask_helpers`` from ``directory`` (its parent), registered in
    ``sys.modules`` through ``monkeypatch`` so it is gone after the test."""
    init = directory / HELPERS.name / "__init__.py"
    spec = importlib.util.spec_from_file_location(HELPERS.name, init)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, HELPERS.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def installed_helpers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``graphir_mask_helpers`` installed as its own package in a temporary
    ``site-packages`` directory."""
    site = tmp_path / "site-packages"
    shutil.copytree(HELPERS, site / HELPERS.name)
    module = _import_helpers(site, monkeypatch)
    assert is_library_file(module.__file__ or "", ())
    return module


def test_library_compile_path_is_named_and_does_not_fail(installed_helpers: ModuleType) -> None:
    model, inputs = compiled_models.library_masked(installed_helpers)
    report = compare_compiled(model, *inputs)
    text = "\n".join(report.lines())
    assert report, text
    (path,) = report.library_paths
    assert [c.op for c in path.compiled] == ["ones_like", "mul"]
    assert path.source.startswith(f"{HELPERS.name}/__init__.py:")
    assert path.source.endswith("in apply_mask")
    assert "library compile path (not failing; strict=True fails it)" in text
    assert report.to_data()["library_compile_paths"] == [
        {"kind": "extra", "category": "library", "eager": [], "compiled": ["ones_like", "mul"]}
    ]
    assert not compare_compiled(model, *inputs, strict=True)


def test_third_party_marks_a_package_outside_site_packages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    helpers = _import_helpers(HELPERS.parent, monkeypatch)
    model, inputs = compiled_models.library_masked(helpers)
    assert not compare_compiled(model, *inputs)  # the user's own tree: fails
    report = compare_compiled(model, *inputs, third_party=(HELPERS.name,))
    assert report, "\n".join(report.lines())
    assert len(report.library_paths) == 1


CLEAN_STOCK = ["llama", "gpt_neo", "bloom", "bart", "mamba", "gpt2"]


@pytest.mark.slow
@pytest.mark.parametrize("name", CLEAN_STOCK)
def test_stock_transformers_are_clean(name: str) -> None:
    """Tiny configs, random weights, CPU, ``backend="eager"``: no graph break, so the
    check passes (transformers' NumPy-free, break-free paths). Where a torch release
    breaks on a stock model (``compiled_versions.STOCK_BREAKS``), every break is that
    one, and the check passes with breaks allowed."""
    pytest.importorskip("transformers")
    model, inputs = compiled_models.tiny_transformer(name)
    expected = compiled_versions.stock_break(name)
    report = compare_compiled(model, *inputs, allow_graph_breaks=expected is not None)
    assert report, "\n".join(report.lines())
    if expected is None:
        assert report.graph_break_count == 0
    else:
        assert report.breaks and all(expected in b.reason for b in report.breaks), [
            b.reason for b in report.breaks
        ]


def test_bookkeeping_and_tensorless_fx_nodes_are_not_ops() -> None:
    """Compiled autograd's hook calls and ``_log_api_usage_once`` never count."""
    import torch._dynamo.external_utils as external_utils
    import torch.fx

    from pytest_graphir.compiled.backend import canonical_from_fx_node

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["example_value"] = torch.ones(2)
    hook = graph.call_function(external_utils.call_hook, (None, x))
    hook.meta["example_value"] = torch.ones(2)
    log = graph.call_function(torch._C._log_api_usage_once, ("python.nn_module",))
    log.meta["example_value"] = None
    relu = graph.call_function(torch.relu, (x,))
    relu.meta["example_value"] = torch.ones(2)
    assert canonical_from_fx_node(hook) is None
    assert canonical_from_fx_node(log) is None
    assert canonical_from_fx_node(relu) == "relu"


class MaskedAdapter(nn.Module):
    """X-MOD's language adapter: boolean-mask indexing (``nonzero``: a graph break on a
    dynamic shape), with ops Dynamo then runs outside the graphs."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        out = torch.zeros_like(x)
        out[mask] = self.fc(x[mask])
        return out + x


class MaskedBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.adapter = MaskedAdapter()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.adapter(x, x[..., 0] > 0))


def test_ops_between_graphs_at_an_allowed_break_do_not_fail() -> None:
    """With ``allow_graph_breaks``, eager ops that ran between two graph runs (around
    the break) are listed, not failed (X-MOD, LongT5, SwitchTransformers, JetMoE and
    LongCat-Flash once failed this way); without it the break fails the check."""
    torch.manual_seed(0)
    model, x = MaskedBlock().eval(), torch.randn(2, 5, 8)
    report = compare_compiled(model, x, allow_graph_breaks=True)
    assert report, "\n".join(report.lines())
    between = [d for d in report.divergences if d.category == "between"]
    assert between and all(d.kind == "missing" for d in between)
    assert report.graph_break_count > 0 and not report.failing_divergences
    assert any("outside the graphs at an allowed graph break" in line for line in report.lines())
    strict = compare_compiled(model, x)
    assert not strict and strict.failing_divergences  # breaks not allowed: they count


class Helper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))

    def combine(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.w
        torch._dynamo.graph_break()
        return y.relu()


class CallsAMethod(nn.Module):
    """JetMoE's ``self.experts.reduce(...)``: a submodule's method called directly, so
    eagerly its ops belong to this module; Dynamo compiles the method's frame after a
    break and names the submodule."""

    def __init__(self) -> None:
        super().__init__()
        self.helper = Helper()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.helper.combine(self.fc(x)) * 2


def test_a_submodule_method_called_directly_is_not_a_scope_divergence() -> None:
    torch.manual_seed(0)
    report = compare_compiled(CallsAMethod().eval(), seeded(2, 8), allow_graph_breaks=True)
    assert report, "\n".join(report.lines())
    assert report.matched_ops == report.eager_ops == 4


def test_missing_ops_inside_one_graph_run_stay_a_divergence() -> None:
    """Only a stretch between runs is ``between``: one inside a run is an op Dynamo
    dropped, and one before the first compiled op lies outside every run too."""
    names = ["linear", "relu", "linear", "add", "mul"]
    eager = [EagerOp(f"{n}#{i}", n, "", index=i) for i, n in enumerate(names)]
    one_run = [CompiledOp(n, "", 0, run=0) for n in names if n != "add"]
    (inside,), _ = align(eager, one_run)
    assert (inside.kind, inside.category) == ("missing", "divergence")
    two_runs = [CompiledOp(n, "", 0, run=0) for n in names[:3]]
    two_runs += [CompiledOp("mul", "", 1, run=1)]
    (between,), _ = align(eager, two_runs)
    assert (between.kind, between.category) == ("missing", "between")
    assert [e.name for e in between.eager] == ["add#3"]
    late = [CompiledOp(n, "", 0, run=0) for n in names[1:]]
    (first,), _ = align(eager, late)
    assert (first.kind, first.category) == ("missing", "between")


def test_eager_only_library_ops_next_to_a_submodule_call_are_a_library_path() -> None:
    """PEGASUS-X's decoder builds ``torch.ones`` for its mask only when not compiling
    (``is_torchdynamo_compiling()``), right after its ``embed_tokens`` call: the
    compiled neighbours are library code, one in a submodule of the eager ops' module;
    the user's own code there would still fail."""
    lib = (("/venv/lib/site-packages/transformers/model.py", 10, "forward", ""),)
    own = (("/home/me/project/model.py", 10, "forward", ""),)
    eager = [
        EagerOp("decoder.embed_tokens/embedding#0", "embedding", "decoder.embed_tokens", index=0),
        EagerOp("decoder/ones#0", "ones", "decoder", index=1),
        EagerOp("decoder/mul#0", "mul", "decoder", index=2),
    ]
    for frames, category in ((lib, "library"), (own, "divergence")):
        compiled = [
            CompiledOp("embedding", "decoder.embed_tokens", 0, frames, run=0),
            CompiledOp("mul", "decoder", 0, frames, run=0),
        ]
        (missing,), _ = align(eager, compiled)
        assert (missing.kind, missing.category) == ("missing", category)
