"""Tests of ``pytest_graphir.compiled``: recording backends and the compiled-vs-eager check."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path
from typing import Any

import compiled_models
import pytest
import real_models
import torch
import torch._dynamo
from compiled_versions import SNAPSHOT_TORCH, TORCH
from torch import nn
from torch._dynamo.utils import counters

from pytest_graphir import trace
from pytest_graphir.compiled import (
    AotGraphRecorder,
    CompiledReport,
    GraphRecorder,
    compare_compiled,
    recording,
)
from pytest_graphir.compiled.backend import normalise_module_source
from pytest_graphir.compiled.dynamo_state import TRACE_LOGGER, quiet_trace_log
from pytest_graphir.compiled.watch import clean_reason
from pytest_graphir.opnames import canonical_from_qualname

ROOT = Path(__file__).resolve().parent.parent
MACHINE_SPECIFIC = re.compile(r"\.py\b|\bline \d|0x[0-9a-f]{4,}|/tmp/|/home/|/work/")


pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # tests/conftest.py


def machine_independent(data: Any) -> None:
    text = json.dumps(data)
    assert not MACHINE_SPECIFIC.search(text), MACHINE_SPECIFIC.search(text)


# -- real models: zero divergence ---------------------------------------------------------
def _only_transformers_compile_paths(report: CompiledReport) -> int:
    """Assert that every op divergence is a library compile path in transformers (on
    some torch releases its attention mask is built another way under compile; none
    on the release the snapshots were written with); return its compile-only ops."""
    assert report.failing_divergences == [], "\n".join(report.lines())
    paths = report.divergences
    assert all(d.category == "library" and d.source.startswith("transformers/") for d in paths)
    assert all(d.kind == "extra" for d in paths), [str(d) for d in paths]
    if TORCH == SNAPSHOT_TORCH:
        assert paths == []
    return sum(len(d.compiled) for d in paths)


def test_gpt2_compiles_with_zero_divergence() -> None:
    model, ids = real_models.gpt2(n_layer=2)
    report = compare_compiled(model, ids, backend="graphir")
    assert report.ok, "\n".join(report.lines())
    extra = _only_transformers_compile_paths(report)
    assert report.eager_ops == report.compiled_ops - extra == report.matched_ops > 90
    assert report.graph_count == 1 and report.breaks == []
    data = report.to_data()
    assert data["graphs"] == 1 and data["ops"]["divergent"] == 0
    assert data["per_graph"][0]["op_counts"]["scaled_dot_product_attention"] == 2
    machine_independent(data)
    assert "compiled matches eager" in report.lines()[0]


def test_bert_compiles_with_zero_divergence() -> None:
    model, ids = real_models.bert(num_hidden_layers=2)
    report = compare_compiled(model, ids, backend="graphir")
    assert report.ok, "\n".join(report.lines())
    extra = _only_transformers_compile_paths(report)
    assert report.breaks == []
    assert report.eager_ops == report.compiled_ops - extra > 50
    machine_independent(report.to_data(sequence=True))


# -- graph breaks on purpose ---------------------------------------------------------------
BREAKS = [
    ("data_dependent", {"gate"}, "Data-dependent branching", "Gate.forward: if h.sum() > 0:"),
    ("printing", {"blocks.0", "blocks.1"}, "`print`", "PrintingBlock.forward: print("),
    ("item_call", {"norm"}, "Tensor.item()", "MaxNorm.forward: scale = x.abs().max().item()"),
    ("tolist_call", {""}, "tolist()", "ToList.forward: rows = h.tolist()"),
]


@pytest.mark.parametrize(
    ("builder", "scopes", "reason", "location"), BREAKS, ids=[b[0] for b in BREAKS]
)
def test_graph_break_is_named_with_its_module(
    builder: str, scopes: set[str], reason: str, location: str
) -> None:
    model, inputs = getattr(compiled_models, builder)()
    report = compare_compiled(model, *inputs)
    assert not report.ok and not bool(report)
    assert {b.scope for b in report.breaks} == scopes
    assert all(reason in b.reason and b.location.startswith(location) for b in report.breaks)
    assert report.graph_count >= 2
    # the ops still line up across the breaks: the break is the only problem
    assert report.divergences == [] and report.numerics == [] and report.hook_problems == []
    lines = report.lines()
    for scope in scopes:
        where = scope or "<model>"
        assert any(
            line.startswith(f"  graph break in {where} (") and reason in line for line in lines
        ), lines
    data = report.to_data()
    assert {b["scope"] for b in data["graph_breaks"]} == scopes
    machine_independent(data)


def test_graph_breaks_can_be_allowed() -> None:
    model, inputs = compiled_models.data_dependent()
    report = compare_compiled(model, *inputs, allow_graph_breaks=True)
    assert report.ok
    assert len(report.breaks) == 1
    assert any("graph break (allowed) in gate" in line for line in report.lines())


def test_break_reason_has_no_paths_or_line_numbers() -> None:
    raw = (
        "Data-dependent branching\n  Explanation: Detected data-dependent branching.\n"
        '      # File "/home/me/model.py", line 9, in forward\n  Hint: use torch.cond\n'
        " For more details, visit: https://meta-pytorch.github.io/x/gb/gb0170.html"
    )
    assert clean_reason(raw) == (
        "Data-dependent branching: Detected data-dependent branching. [gb0170]"
    )
    assert clean_reason('Failed at "/tmp/a/b.py" line 12 in resume_in_forward_at_40') == (
        'Failed at "<file>" line <n> in resume_in_forward'
    )


def test_ops_outside_graphs_are_divergence() -> None:
    """A loop with a break makes Dynamo skip the outer frame: its ops run eagerly, in no
    graph, and the blocks' graph breaks are still placed in each block."""

    class Loop(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([compiled_models.PrintingBlock() for _ in range(2)])
            self.head = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = x * 0.5
            for block in self.blocks:
                h = block(h)
            return self.head(h)

    torch.manual_seed(0)
    report = compare_compiled(Loop().eval(), torch.randn(2, 8))
    missing = [e.name for d in report.divergences if d.kind == "missing" for e in d.eager]
    assert missing == ["mul#0", "head/linear#0"]
    assert "first divergent op: eager #0 mul#0 (mul in <model>)" in "\n".join(report.lines())
    assert sorted(s for b in report.breaks for s in b.scopes) == ["blocks.0", "blocks.1"]


# -- hooks --------------------------------------------------------------------------------
def test_hooks_registered_before_compile_fire_alike() -> None:
    model, inputs = compiled_models.hooked()
    report = compare_compiled(model, *inputs)
    assert report.ok, "\n".join(report.lines())
    assert [str(e) for e in report.hook_events["compiled"]] == ["fc1 forward_hook log_fc_output"]
    assert report.hook_events["eager"] == report.hook_events["compiled"]
    # the original hook is back in place
    assert next(iter(model.fc1._forward_hooks.values())) is compiled_models.log_fc_output


def test_late_hook_skipped_under_compile_is_named() -> None:
    model, inputs = compiled_models.hooked()
    report = compare_compiled(
        model, *inputs, after_first_call=lambda: compiled_models.add_late_hook(model)
    )
    assert not report.ok
    assert [(p.kind, str(p.event)) for p in report.hook_problems] == [
        ("late_skipped", "fc2 forward_hook late_probe")
    ]
    message = "\n".join(report.lines())
    assert "fc2 forward_hook late_probe did not fire under compile (second call)" in message
    assert "registered after the first compiled call" in message
    assert "skip_nnmodule_hook_guards=True" in message
    assert report.recompiles == 0
    assert next(iter(model.fc2._forward_hooks.values())) is compiled_models.late_probe


def test_late_hook_fires_when_dynamo_guards_hooks() -> None:
    model, inputs = compiled_models.hooked()
    with torch._dynamo.config.patch(skip_nnmodule_hook_guards=False):
        report = compare_compiled(
            model, *inputs, after_first_call=lambda: compiled_models.add_late_hook(model)
        )
    assert report.ok, "\n".join(report.lines())
    assert report.recompiles == 1
    assert "fc2 forward_hook late_probe" in [str(e) for e in report.hook_events["compiled_2"]]


# -- numerics -----------------------------------------------------------------------------
def test_perturbed_compiled_numerics_are_named() -> None:
    model, inputs = compiled_models.clean()
    report = compare_compiled(model, *inputs, backend=compiled_models.perturbing_backend)
    assert not report.ok
    assert report.divergences == [] and report.breaks == []
    assert [n.path for n in report.numerics] == ["output"]
    line = next(x for x in report.lines() if x.startswith("  numerics:"))
    assert re.match(
        r"  numerics: output output: max \|compiled - eager\| \S+ > allowed \S+$", line
    ), line
    assert report.to_data()["outputs_match"] is False
    # the same difference passes a looser tolerance (compare.Tolerance semantics)
    loose = compare_compiled(model, *inputs, backend=compiled_models.perturbing_backend, rtol=0.02)
    assert loose.ok


def test_model_output_objects_are_compared_by_their_tensors() -> None:
    model, ids = real_models.gpt2(n_layer=1, n_embd=64, n_head=2, vocab_size=100)
    report = compare_compiled(model, ids % 100, backend=compiled_models.perturbing_backend)
    paths = {n.path for n in report.numerics}
    assert "logits" in paths
    assert not any(p.startswith("past_key_values") for p in paths)  # untouched by the change


# -- recompiles, repeated checks, state -----------------------------------------------------
def test_second_shape_recompiles() -> None:
    model, inputs = compiled_models.clean()
    report = compare_compiled(model, *inputs, second_args=(torch.randn(3, 8),))
    assert report.ok
    assert report.recompiles == 1 and report.second_call
    assert any("size mismatch" in r for r in report.recompile_reasons)
    assert report.to_data()["recompiles"] == 1
    assert report.guards is not None and report.guards > 0


def test_check_twice_in_one_test_gives_the_same_report() -> None:
    model, inputs = compiled_models.data_dependent()
    first = compare_compiled(model, *inputs)
    second = compare_compiled(model, *inputs)
    assert first.to_data() == second.to_data()
    assert [b.count for b in first.breaks] == [b.count for b in second.breaks]
    assert first.guards == second.guards


def test_dynamo_state_is_reset_after_the_check() -> None:
    from torch._dynamo import output_graph
    from torch._dynamo.callback import callback_handler

    model, inputs = compiled_models.printing()
    n_start = len(callback_handler.start_callbacks)
    compare_compiled(model, *inputs)
    assert not any(counters[k] for k in ("graph_break", "stats", "frames"))
    assert output_graph.graph_break_reasons == []  # type: ignore[attr-defined]
    assert len(callback_handler.start_callbacks) == n_start
    # a compile after the check is counted from zero again
    recorder = GraphRecorder()
    torch.compile(lambda x: x + 1, backend=recorder)(torch.ones(2))
    assert counters["stats"]["unique_graphs"] == 1
    assert recorder.graphs[0].compile_id == "0/0"


def test_model_that_raises_leaves_torch_clean() -> None:
    class Boom(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    model = Boom()
    model.fc.register_forward_hook(compiled_models.log_fc_output)
    with pytest.raises(RuntimeError, match="boom"):
        compare_compiled(model, torch.ones(2))
    assert next(iter(model.fc._forward_hooks.values())) is compiled_models.log_fc_output
    assert not counters["frames"]


def test_not_a_module_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"compare_compiled\(\) needs an nn.Module"):
        compare_compiled(lambda x: x, torch.ones(1))  # type: ignore[arg-type]


def test_default_path_never_runs_inductor(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._inductor.compile_fx as compile_fx

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Inductor was invoked")

    monkeypatch.setattr(compile_fx, "compile_fx", refuse)
    model, inputs = compiled_models.clean()
    assert compare_compiled(model, *inputs).ok
    assert compare_compiled(model, *inputs, backend="aot_eager").ok


# -- naming ---------------------------------------------------------------------------------
class Awkward(nn.Module):
    """Properties, reflected operators, tuple results, in-place ops, shape arithmetic."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch._C._nn.linear(x, self.fc.weight, self.fc.bias)
        a, b = h.chunk(2, dim=-1)
        y = (2 - a) / (1 + b.abs())
        y = y @ y.T
        y += 1
        mask = ~(y > 0)
        y = y.masked_fill(mask, 0.0)
        n = y.size(0) * 2
        return torch.stack([y.mT, y]).sum(0) * n + 3 / (1 + y.abs())


def test_awkward_ops_align_under_canonical_names() -> None:
    torch.manual_seed(0)
    report = compare_compiled(Awkward().eval(), torch.randn(4, 8))
    assert report.ok, "\n".join(report.lines())
    ops = [op.target for op in report.graphs[0].ops]
    assert {"rsub", "rdiv", "t", "transpose", "add_", "bitwise_not", "linear"} <= set(ops)
    assert "size" not in ops and "mul" in ops


@pytest.mark.parametrize(
    ("prop", "aten"), [("T", "numpy_T"), ("mT", "mT"), ("H", "matrix_H"), ("mH", "mH")]
)
def test_property_reads_have_one_name_eager_and_compiled(prop: str, aten: str) -> None:
    """Newer Dynamo writes ``x.T`` as ``aten.numpy_T`` (older: ``getattr(x, "T")``); both
    spellings take the eager property read's canonical name."""
    eager = canonical_from_qualname(f"torch.Tensor.{prop}.__get__")
    assert eager is not None
    assert canonical_from_qualname(aten) == eager

    class Transposes(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return getattr(x, prop) * 2

    report = compare_compiled(Transposes(), torch.randn(3, 3))
    assert report.ok and report.divergences == [], "\n".join(report.lines())
    assert [op.target for op in report.graphs[0].ops] == [eager, "mul"]


@pytest.mark.parametrize(
    ("source", "path"),
    [
        ("L['self'].transformer.h[0].attn", "transformer.h.0.attn"),
        ("L['self']._modules['fc']", "fc"),
        ("L['self']", ""),
        ("getattr(L['self'].h, '1')", "h.1"),
        ("L['mod'].blocks[2].norm", "blocks.2.norm"),
    ],
)
def test_module_sources_are_normalised(source: str, path: str) -> None:
    assert normalise_module_source(source) == path


# -- an unregistered module: its ops belong to the registered module that calls it ----------
class _Rotary(nn.Module):
    """Held in a module-level global, as transformers' hub kernels are (kernels installed)."""

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return q.unsqueeze(1) * 2


_ROTARY = _Rotary()


class _Router(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + int(x.sum().item() > 0)  # a graph break, as MoE routers have


class _GlobalKernelAttn(nn.Module):
    def __init__(self, graph_break: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.router = _Router() if graph_break else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # after a break in the router, the rest runs in a resumed frame of this forward,
        # where Dynamo's nn_module_stack holds only the global module
        return _ROTARY(self.router(self.proj(x))).squeeze(1)


@pytest.mark.parametrize("graph_break", [False, True], ids=["one_graph", "resumed_frame"])
def test_unregistered_module_ops_belong_to_the_caller(graph_break: bool) -> None:
    model = nn.Sequential(_GlobalKernelAttn(graph_break), nn.ReLU())
    x = torch.randn(2, 8)
    eager = trace(model, x, stats=False)
    scopes = {n.name.split("/")[0] for n in eager.nodes if n.kind == "op"}
    assert {"0", "0.proj"} <= scopes and not any("rotary" in s.lower() for s in scopes), scopes
    report = compare_compiled(model, x, allow_graph_breaks=graph_break)
    assert report.ok, "\n".join(report.lines())
    assert report.failing_divergences == []
    scoped = [op for graph in report.graphs for op in graph.ops if op.target == "unsqueeze"]
    # statically the caller (one graph), or left to the frame's module at run time
    assert [op.scope for op in scoped] == ["0" if not graph_break else None], scoped


# -- the backends by name --------------------------------------------------------------------
def test_torch_compile_by_name_records() -> None:
    model, inputs = compiled_models.data_dependent()
    with recording(model=model) as rec:
        out = torch.compile(model, backend="graphir")(*inputs)
    torch.testing.assert_close(out, model(*inputs))
    assert len(rec.graphs) == 4
    assert rec.graphs[0].graph_break and "Data-dependent" in (rec.graphs[0].break_reason or "")
    assert [op.scope for op in rec.graphs[1].ops][:1] == ["gate.proj"]
    assert [(op.op, op.scope) for op in rec.executed_ops()] == [
        ("linear", "fc"),
        ("linear", "gate.proj"),
        ("sum", "gate"),
        ("gt", "gate"),
        ("mul", "gate"),
        ("relu", "gate"),
        ("linear", "head"),
    ]
    assert asdict(rec.graphs[0].inputs[0]) == {"shape": [2, 8], "dtype": "float32"}
    assert rec.graphs[0].outputs[0].shape == [2, 8]


def test_torch_compile_by_name_with_a_delegate() -> None:
    model, inputs = compiled_models.clean()
    with recording(model=model) as rec:
        compiled = torch.compile(model, backend="graphir", options={"delegate": "aot_eager"})
        torch.testing.assert_close(compiled(*inputs), model(*inputs))
    assert [op.target for op in rec.graphs[0].ops] == ["linear", "relu", "linear"]


def test_aot_recorder_records_forward_and_backward() -> None:
    model, (x,) = compiled_models.clean()
    with recording(model=model, aot=True) as rec:
        torch.compile(model, backend="graphir_aot")(x).sum().backward()
    assert isinstance(rec, AotGraphRecorder)
    kinds = [g.kind for g in rec.aten_graphs]
    assert kinds == ["forward", "backward"]
    assert "addmm" in rec.aten_graphs[0].ops and "mm" in rec.aten_graphs[1].ops
    with torch.no_grad():
        aot = AotGraphRecorder(model=model)
        torch.compile(model, backend=aot)(x)
    assert [g.kind for g in aot.aten_graphs] == ["inference"]
    assert aot.graphs[0].to_data()["op_counts"] == {"linear": 2, "relu": 1}


def test_entry_point_lines_register_the_backend(tmp_path: Path) -> None:
    """The pyproject lines work: a distribution declaring them makes ``backend="graphir"``
    resolve in a fresh interpreter that never imported pytest_graphir."""
    dist = tmp_path / "graphir_ep-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: graphir-ep\nVersion: 0\n")
    pyproject = (ROOT / "pyproject.toml").read_text()
    section = pyproject.split("[project.entry-points.torch_dynamo_backends]\n", 1)[1]
    lines = section.split("\n\n", 1)[0].replace('"', "")
    (dist / "entry_points.txt").write_text(f"[torch_dynamo_backends]\n{lines}\n")
    script = textwrap.dedent("""
        import sys, torch
        assert "pytest_graphir" not in sys.modules
        out = torch.compile(lambda x: torch.relu(x) + 1, backend="graphir")(torch.ones(3))
        assert out.tolist() == [2.0, 2.0, 2.0]
        from pytest_graphir.compiled.backend import default_recorder
        print([op.target for op in default_recorder.graphs[0].ops])
        torch.compile(lambda x: x * 2, backend="graphir_aot")(torch.ones(3))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "['relu', 'add']"


def test_report_is_plain_data() -> None:
    model, inputs = compiled_models.data_dependent()
    report = compare_compiled(model, *inputs)
    assert isinstance(report, CompiledReport)
    data = report.to_data(sequence=True)
    assert json.loads(json.dumps(data)) == data
    assert data["per_graph"][1]["sequence"] == ["gate.proj/linear", "gate/sum", "gate/gt"]
    assert data["graph_breaks"] == [
        {
            "reason": report.breaks[0].reason,
            "scope": "gate",
            "location": "Gate.forward: if h.sum() > 0:",
            "count": report.breaks[0].count,
        }
    ]
    assert "CompiledReport('graphir compiled: compiled diverges" in repr(report)
    with pytest.raises(AssertionError, match="graph break in gate"):
        report.assert_ok()


def test_compare_compiled_is_a_lazy_top_level_export() -> None:
    """``from pytest_graphir import compare_compiled`` works, and importing the package
    (as pytest does when it loads the plugin) still imports no torch."""
    script = textwrap.dedent("""
        import sys
        import pytest_graphir
        assert "torch" not in sys.modules, "import pytest_graphir imported torch"
        assert "compare_compiled" in pytest_graphir.__all__
        from pytest_graphir import compare_compiled
        from pytest_graphir.compiled import compare_compiled as same
        assert compare_compiled is same
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_failing_check_leaves_no_torch_trace_records_in_the_captured_log(
    pytester: pytest.Pytester,
) -> None:
    """pytest attaches its log capture to every non-propagating logger, torch's
    always-DEBUG ``torch.__trace`` included: a failing check's report carries none of
    its empty records, and a warning logged by the test itself is still captured."""
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(
        test_breaks=textwrap.dedent("""
            import logging
            import torch
            from torch import nn
            from pytest_graphir import compare_compiled

            class Gate(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(4, 4)

                def forward(self, x):
                    h = self.fc(x)
                    if h.sum() > 0:
                        return h * 2
                    return h - 1

            def test_compiled():
                logging.getLogger("user").warning("the test's own record")
                report = compare_compiled(Gate(), torch.ones(2, 4))
                assert report.ok, "\\n".join(report.lines())
        """)
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "graph break in" in out
    assert "the test's own record" in out  # the capture still works
    assert "torch.__trace" not in out


def test_trace_log_handlers_come_back_after_the_check() -> None:
    trace_log = logging.getLogger(TRACE_LOGGER)
    handler = logging.NullHandler()
    trace_log.addHandler(handler)
    try:
        with pytest.raises(RuntimeError), quiet_trace_log():
            assert handler not in trace_log.handlers
            raise RuntimeError("the model raised")
        assert handler in trace_log.handlers
    finally:
        trace_log.removeHandler(handler)


def test_one_optimized_module_check_for_trace_and_compare_compiled() -> None:
    """``original_module`` unwraps a ``torch.compile``'d module (an ``OptimizedModule``,
    by isinstance) and leaves any other module, or a look-alike class, alone."""
    from pytest_graphir.capture.options import original_module

    model = nn.Linear(2, 2)
    compiled = torch.compile(model, backend="eager")
    assert isinstance(compiled, nn.Module) and original_module(compiled) is model
    assert original_module(model) is model

    class OptimizedModule(nn.Module):  # only the name of torch's class
        _orig_mod = model

    fake = OptimizedModule()
    assert original_module(fake) is fake


def test_operator_names_follow_the_tensor_dunders() -> None:
    """Dynamo's ``operator.*`` nodes take the name eager records for the dunder."""
    import operator

    from pytest_graphir.compiled.backend import OPERATORS

    assert OPERATORS[operator.truediv] == "div"
    assert OPERATORS[operator.iadd] == "add_"
    assert OPERATORS[operator.inv] == OPERATORS[operator.invert] == "bitwise_not"
    assert OPERATORS[operator.getitem] == "getitem"
    assert OPERATORS[operator.mod] == "remainder"


def test_outputs_compared_through_objects_that_hold_tensors() -> None:
    """An output object holding tensors (a transformers ``DynamicCache``) is walked
    through its attributes (``leaves.flatten(objects=...)``); one holding none is
    compared by its type."""
    from pytest_graphir.compare import Tolerance
    from pytest_graphir.compiled.check import compare_outputs
    from pytest_graphir.leaves import flatten

    class Cache:
        def __init__(self, k: torch.Tensor) -> None:
            self.layers = [k]
            self.note = None

    class Empty:
        pass

    x = torch.ones(2)
    assert flatten({"a": Cache(x), "b": Empty()}, "", objects=4)[0] == ("a.layers.0", x)
    cache = Cache(x)
    assert flatten(cache, "") == [("", cache)]  # not walked by default
    same = compare_outputs((Cache(x), Empty()), (Cache(x.clone()), Empty()), Tolerance())
    assert same == []
    diff = compare_outputs((Cache(x),), (Cache(x + 1),), Tolerance())
    assert [d.path for d in diff] == ["0.layers.0"]
