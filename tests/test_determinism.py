"""A snapshot changes only when the model does (issue 8): uninitialised memory, random
draws, state calls, backward capture with in-place ops, float32 math, provenance."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from report_helpers import llama_model
from torch import nn

from pytest_graphir import trace
from pytest_graphir.capture import precision
from pytest_graphir.compare import Tolerance, compare
from pytest_graphir.ir import GraphIR
from pytest_graphir.provenance import note, read
from pytest_graphir.serialize import dumps, loads


def _same(a: GraphIR, b: GraphIR) -> bool:
    return not compare(loads(dumps(a)), loads(dumps(b)), Tolerance())


def _stir_heap() -> None:
    """Leave freed memory full of fresh random bytes, as other code would."""
    for _ in range(4):
        torch.randn(64, 64).mul_(1e3)


# -- uninitialised memory ------------------------------------------------------------
class EmptyThenCopy(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        buf = torch.empty_like(x)
        buf.copy_(x * 2)
        return buf + 1


def test_empty_like_then_copy_gives_identical_text_in_five_traces() -> None:
    x = torch.randn(64, 64)
    texts = set()
    for _ in range(5):
        _stir_heap()
        texts.add(dumps(trace(EmptyThenCopy(), x)))
    assert len(texts) == 1
    graph = trace(EmptyThenCopy(), x)
    assert graph.node("empty_like#0").outputs[0].stats == {}  # shape and dtype only
    written = graph.node("copy_#0").outputs[0].stats  # the write keeps its statistics
    assert written["mean"] == pytest.approx((x * 2).mean().item(), rel=1e-5)


class PartlyWritten(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        buf = torch.empty(4, 8)
        buf[:2] = x  # rows 2 and 3 are never written, and then read
        return buf.sum(dim=1)


def test_memory_read_before_written_has_no_garbage_statistics() -> None:
    x = torch.randn(2, 8)
    graphs = []
    for _ in range(3):
        _stir_heap()
        graphs.append(trace(PartlyWritten(), x))
    assert len({dumps(g) for g in graphs}) == 1
    g = graphs[0]
    assert g.node("empty#0").outputs[0].stats == {}
    # the unwritten half reads as NaN (torch's fill_uninitialized_memory), the same
    # in every run: 16 of 32 elements, and two of the four row sums
    assert g.node("setitem#0").outputs[0].stats["nan"] == 16
    assert g.node("sum#0").outputs[0].stats["nan"] == 2


def test_structure_only_trace_leaves_empty_memory_alone() -> None:
    out = {}

    class Keep(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out["buf"] = torch.empty(3, dtype=torch.int64)
            return x

    trace(Keep(), torch.ones(1))
    assert out["buf"].tolist() == [torch.iinfo(torch.int64).max] * 3
    trace(Keep(), torch.ones(1), stats=False)  # nothing to make deterministic: no fill
    assert out["buf"].shape == (3,)


# -- random draws --------------------------------------------------------------------
class LayerDrop(nn.Module):
    """wav2vec2's encoder: draws ``torch.rand`` for layerdrop even in eval."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.rand([])
        if self.training and p < 0.1:
            return x
        return self.drop(self.layer(x))


def test_random_draw_in_eval_compares_equal_after_unrelated_rng_use() -> None:
    model = LayerDrop().eval()
    x = torch.randn(2, 8)
    first = trace(model, x)
    torch.rand(17)  # some other code draws from the generator
    second = trace(model, x)
    assert _same(first, second)
    out = first.node("rand#0").outputs[0]
    assert out.random and out.stats == {}
    assert (
        'rand#0: {"op": "rand", "args": [[]], "out": [{"shape": [], "dtype": "float32", '
        '"random": true}]}' in dumps(first)
    )
    assert not first.node("drop/dropout#0").outputs[0].random  # eval: no draw


def test_dropout_in_training_is_random_and_the_rest_is_not() -> None:
    model = LayerDrop().train()
    torch.manual_seed(1)  # p >= 0.1: the layer runs
    graph = trace(model, torch.randn(2, 8))
    assert graph.node("drop/dropout#0").outputs[0].random
    assert graph.node("drop/dropout#0").outputs[0].stats == {}
    assert graph.node("layer/linear#0").outputs[0].stats  # before the draw: kept


@pytest.mark.parametrize(
    "call",
    [
        lambda x: torch.randn_like(x),
        lambda x: torch.bernoulli(x.sigmoid()),
        lambda x: torch.multinomial(x.softmax(-1), 2),
        lambda x: x.clone().uniform_(),
        lambda x: x.clone().normal_(),
        lambda x: x.clone().exponential_(),
        lambda x: torch.randint(0, 5, (3,)),
        lambda x: torch.randperm(4),
        lambda x: nn.functional.rrelu(x, training=True),
        lambda x: nn.functional.alpha_dropout(x, 0.2, training=True),
        lambda x: nn.functional.dropout2d(x[None, None], 0.2),
    ],
)
def test_random_ops_are_marked(call: Any) -> None:
    class Draw(nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return call(x)

    graph = trace(Draw(), torch.randn(3, 4))
    last = [n for n in graph.nodes if n.kind == "op"][-1]
    assert last.outputs[0].random and last.outputs[0].stats == {}, last.name


def test_eval_dropout_and_zero_p_are_not_random() -> None:
    class Calls(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = nn.functional.dropout(x, 0.5, training=False)
            b = torch.dropout(x, 0.0, True)
            return nn.functional.rrelu(a + b)  # rrelu's default: training=False

    graph = trace(Calls(), torch.randn(3, 4))
    assert not any(o.random for n in graph.nodes for o in n.outputs)


# -- state calls ---------------------------------------------------------------------
class Rotary(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    @torch.no_grad()
    def angles(self, x: torch.Tensor) -> torch.Tensor:
        return x.cos()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * self.angles(x)


def test_no_grad_inside_forward_adds_no_nodes() -> None:
    graph = trace(Rotary(), torch.randn(2, 4))
    assert graph.ops() == ["linear", "cos", "mul"]


@pytest.mark.slow
def test_llama_rotary_state_calls_are_not_nodes() -> None:
    pytest.importorskip("transformers")
    graph = trace(llama_model(1, init=False), torch.randint(0, 128, (1, 6)))
    assert not [n.name for n in graph.nodes if "grad_enabled" in n.target]
    assert "model.rotary_emb/cos#0" in [n.name for n in graph.nodes]


# -- backward with in-place ops ------------------------------------------------------
class Residual(nn.Module):
    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.inplace = inplace
        self.conv = nn.Linear(6, 6)
        self.norm = nn.LayerNorm(6)
        self.act = nn.ReLU(inplace=inplace)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.norm(self.conv(x))
        if self.inplace:
            out += x  # in place on a module's output, as transformers' ResNet does
        else:
            out = out + x
        return self.act(out)


def _reference_backward(model: nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """grad_input/grad_output means from PyTorch's own full backward hooks."""
    seen: dict[str, Any] = {}
    handles = []
    for name, m in model.named_modules():

        def hook(m: Any, gin: Any, gout: Any, name: str = name) -> None:
            seen[name or "<root>"] = (
                [None if g is None else g.double().mean().item() for g in gin],
                [None if g is None else g.double().mean().item() for g in gout],
            )

        handles.append(m.register_full_backward_hook(hook))
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
        model.zero_grad(set_to_none=True)
    return seen


def test_backward_with_inplace_residual_matches_full_backward_hooks() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(Residual(inplace=True), Residual(inplace=True)).train()
    x = torch.randn(3, 6, requires_grad=True)
    graph = trace(model, x, hooks=True, backward=True)  # raised before issue 8
    assert model.training and all(m.training for m in model.modules())
    assert all(p.grad is None for p in model.parameters()) and x.grad is None

    reference_model = nn.Sequential(Residual(inplace=False), Residual(inplace=False))
    reference_model.load_state_dict(model.state_dict())
    reference = _reference_backward(reference_model, x)
    entries = graph.sections["backward"]
    assert set(entries) == set(reference)
    for name, (gin, gout) in reference.items():
        got_in = [None if e is None else e.stats["mean"] for e in entries[name]["grad_input"]]
        got_out = [None if e is None else e.stats["mean"] for e in entries[name]["grad_output"]]
        assert got_in == pytest.approx(gin, rel=1e-4, abs=1e-7), name
        assert got_out == pytest.approx(gout, rel=1e-4, abs=1e-7), name
    events = graph.sections["hooks"]
    assert events.index("0 backward") > events.index("0.conv backward")  # inner first
    assert events.index("1 backward_pre") < events.index("1.act backward_pre")  # outer first


def test_transformers_resnet_backward_in_train_mode() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic"
    )
    model = transformers.ResNetModel(config).train()
    graph = trace(model, torch.randn(1, 3, 32, 32), hooks=True, backward=True)
    assert model.training and all(m.training for m in model.modules())
    assert all(p.grad is None for p in model.parameters())
    assert "encoder.stages.0.layers.0 backward" in graph.sections["hooks"]
    assert graph.sections["backward"]["embedder.embedder.convolution"]["grad_output"][0].stats
    # nothing left behind: a plain backward afterwards calls no recorder hook
    model(torch.randn(1, 3, 32, 32)).last_hidden_state.sum().backward()
    assert torch.nn.modules.module._global_backward_hooks == {}


# -- float32 math ------------------------------------------------------------------
@pytest.fixture
def loose_float32() -> Iterator[dict[str, Any]]:
    """The user's settings: TF32 on everywhere; put back after the test."""
    saved = precision._save()
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.conv.fp32_precision = "tf32"  # type: ignore[attr-defined]
    torch.backends.mkldnn.matmul.fp32_precision = "tf32"  # type: ignore[attr-defined]
    try:
        yield precision._save()
    finally:
        precision._restore(saved)


class Probe(nn.Module):
    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.seen: list[str] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen = [
            torch.backends.cuda.matmul.fp32_precision,
            torch.backends.cudnn.conv.fp32_precision,  # type: ignore[attr-defined]
            torch.backends.mkldnn.matmul.fp32_precision,  # type: ignore[attr-defined]
        ]
        if self.fail:
            raise RuntimeError("model failed")
        return x @ x.T


def test_full_precision_while_tracing_restored_after(loose_float32: dict[str, Any]) -> None:
    probe = Probe()
    graph = trace(probe, torch.randn(2, 2))
    assert probe.seen == ["ieee", "ieee", "ieee"]
    assert precision._save() == loose_float32
    assert "float32_precision" not in graph.meta  # the default
    assert graph.provenance is not None and graph.provenance["float32"] == "highest"

    failing = Probe(fail=True)
    with pytest.raises(RuntimeError, match="model failed"):
        trace(failing, torch.randn(2, 2))
    assert failing.seen == ["ieee", "ieee", "ieee"]
    assert precision._save() == loose_float32


def test_float32_precision_model_keeps_settings(loose_float32: dict[str, Any]) -> None:
    probe = Probe()
    graph = trace(probe, torch.randn(2, 2), float32_precision="model")
    assert probe.seen == ["tf32", "tf32", "tf32"]
    assert graph.meta["float32_precision"] == "model"
    assert graph.provenance is not None and "cuda.matmul=tf32" in graph.provenance["float32"]
    with pytest.raises(ValueError, match=r"float32_precision='fast'.*'highest'.*'model'"):
        trace(probe, torch.randn(2, 2), float32_precision="fast")
    assert precision._save() == loose_float32


# -- provenance ----------------------------------------------------------------------
def test_provenance_names_the_packages_the_model_ran() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        vocab_size=32,
    )
    graph = trace(transformers.BertModel(config).eval(), torch.randint(0, 32, (1, 4)))
    assert graph.provenance is not None
    assert graph.provenance["packages"] == {"transformers": transformers.__version__}
    assert graph.provenance["torch"] == torch.__version__
    assert graph.provenance["device"] == "cpu"
    text = dumps(graph)
    assert read(text) == graph.provenance
    lines = text.splitlines()
    assert lines[-2].startswith("# provenance: {torch: ")
    assert lines[-1] == "# end of graphir snapshot"
    # a comment, kept by loads beside the compared sections so dumps(loads(t)) == t
    assert loads(text)["provenance"] == graph.provenance
    assert (
        compare(loads(text), {k: v for k, v in loads(text).items() if k != "provenance"}).changes
        == []
    )


def test_provenance_note_names_what_differs() -> None:
    old = {
        "torch": "2.13.0",
        "python": "3.11.7",
        "device": "cpu",
        "float32": "highest",
        "packages": {"transformers": "5.23.0"},
    }
    new = {**old, "torch": "2.11.0", "device": "cuda"}
    assert note(old, new) == (
        "graphir: snapshot written with torch 2.13.0 on cpu; this run torch 2.11.0 on cuda: "
        "op-level differences may come from the upgrade"
    )
    assert note(old, {**old, "packages": {"transformers": "5.17.0"}}) == (
        "graphir: snapshot written with transformers 5.23.0 on cpu; this run transformers "
        "5.17.0 on cpu: op-level differences may come from the upgrade"
    )
    assert note(old, {**old, "device": "cuda"}) == (
        "graphir: snapshot written on cpu; this run on cuda: op-level differences may come "
        "from the device"
    )
    assert note(old, dict(old)) is None
    assert note(None, new) is None  # a snapshot from before provenance


TEST_MODEL = """
import os
import torch
from pytest_graphir import trace

def test_model(graphir_snapshot):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    if os.environ.get("CHANGE"):
        with torch.no_grad():
            model[0].weight.mul_(2)
    assert trace(model, torch.randn(2, 4)) == graphir_snapshot
"""
SNAP = "__snapshots__/test_model/test_model.graphir"


def test_failure_message_names_the_environment_first(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_model=TEST_MODEL)

    def run(*args: str) -> pytest.RunResult:  # in process: torch is imported already
        return pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)

    run("--graphir-update").assert_outcomes(passed=1)
    snap = Path(pytester.path / SNAP)
    written = snap.read_text()
    assert f"# provenance: {{torch: {torch.__version__}, " in written

    # written elsewhere, graph the same: passes and, updated, is not rewritten
    elsewhere = re.sub(
        r"# provenance: \{torch: [^,]*,(.*) device: cpu",
        r"# provenance: {torch: 2.11.0,\1 device: cuda",
        written,
    )
    assert elsewhere != written
    snap.write_text(elsewhere)
    run("--graphir-update").assert_outcomes(passed=1)
    assert snap.read_text() == elsewhere

    monkeypatch.setenv("CHANGE", "1")
    result = run("-vv")
    result.assert_outcomes(failed=1)
    graphir = [line for line in result.outlines if "graphir:" in line]
    assert graphir[0].endswith(
        f"graphir: snapshot written with torch 2.11.0 on cuda; this run torch "
        f"{torch.__version__} on cpu: op-level differences may come from the upgrade"
    )
    assert "drift" in graphir[1]


def test_snapshot_without_provenance_loads_and_fails_without_note() -> None:
    from pytest_graphir.extension.syrupy_extension import GraphIRExtension

    torch.manual_seed(0)
    model = nn.Linear(3, 3)
    x = torch.randn(2, 3)
    old = "".join(
        line
        for line in dumps(trace(model, x)).splitlines(keepends=True)
        if not line.startswith("# provenance:")
    )  # as written before issue 8
    assert read(old) is None
    ext = GraphIRExtension()
    assert ext.matches(serialized_data=dumps(trace(model, x)), snapshot_data=old)
    with torch.no_grad():
        model.weight.mul_(2)
    new = dumps(trace(model, x))
    assert not ext.matches(serialized_data=new, snapshot_data=old)
    lines = list(ext.diff_lines(new, old))
    assert lines[0].startswith("graphir: ") and "written with" not in " ".join(lines)


def test_cuda_trace_matches_cpu_with_tf32_enabled_by_the_user(
    loose_float32: dict[str, Any],
) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA: checks that TF32 is off while tracing on the GPU")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.Flatten(), nn.Linear(16 * 30 * 30, 64))
    x = torch.randn(2, 3, 32, 32) * 10
    on_cpu = trace(model, x)
    on_gpu = trace(model.cuda(), x.cuda())
    assert on_gpu.provenance is not None and on_gpu.provenance["device"] == "cuda"
    assert not compare(loads(dumps(on_cpu)), loads(dumps(on_gpu)), Tolerance())
    assert precision._save() == loose_float32
