"""A newcomer's first hour (issue 14): no lost snapshots, no silent typos, the received
snapshot kept on failure, tracebacks that end in the user's code, dataclass outputs,
and a readable ``print(graph)``."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch
from torch import nn
from workflow import run

from pytest_graphir import trace
from pytest_graphir.leaves import flatten
from pytest_graphir.serialize import dumps

SNAP = "__snapshots__/test_mlp/test_mlp.graphir"

TEST_MLP = """
import os
import models
from pytest_graphir import trace

def test_mlp(graphir_snapshot):
    model, inputs = models.mlp(act=os.environ.get("ACT", "relu"))
    if os.environ.get("BOOM"):
        raise RuntimeError("broken before the assert")
    assert trace(model, *inputs) == graphir_snapshot

def test_other(graphir_snapshot):
    model, inputs = models.mlp()
    assert trace(model, *inputs) == graphir_snapshot
"""


# -- nothing lost ------------------------------------------------------------------------
CONFTEST_SETUP_ERROR = """
import os, pytest

@pytest.fixture(autouse=True)
def broken(request):
    if os.environ.get("SETUP_ERROR") and request.node.name == "test_other":
        raise RuntimeError("fixture broke")
"""


def test_snapshot_update_keeps_snapshots_of_tests_that_did_not_pass(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test that raises before its assert, one whose fixture errors and one never
    reached after ``-x`` keep their snapshots under ``--snapshot-update`` and are not
    reported as unused; the snapshot of a test that is gone is still deleted."""
    p = graphir_project
    p.makepyfile(test_mlp=TEST_MLP)
    p.makeconftest(CONFTEST_SETUP_ERROR)
    run(p, "--graphir-update").assert_outcomes(passed=2)
    snap, other = p.path / SNAP, p.path / "__snapshots__/test_mlp/test_other.graphir"
    text = snap.read_text()
    stale = p.path / "__snapshots__/test_mlp/test_gone.graphir"
    stale.write_text(text)

    monkeypatch.setenv("BOOM", "1")
    monkeypatch.setenv("SETUP_ERROR", "1")
    result = run(p, "--snapshot-update")
    result.assert_outcomes(failed=1, errors=1)
    out = result.stdout.str()
    assert snap.read_text() == text and other.exists(), out
    assert not stale.exists(), "the snapshot of a test that is gone is still deleted"
    assert "Deleted test_gone" in out and "Deleted test_mlp" not in out
    assert "Deleted test_other" not in out

    monkeypatch.delenv("SETUP_ERROR")
    result = run(p, "--snapshot-update", "-x")  # test_other is never run
    result.assert_outcomes(failed=1)
    assert snap.exists() and other.exists(), result.stdout.str()
    assert "unused" not in result.stdout.str()


def test_snapshot_update_keeps_snapshot_of_test_that_raised_under_xdist(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``-n 2`` the workers report the raising test to the controller, which
    keeps its snapshot."""
    p = graphir_project
    p.makepyfile(test_mlp=TEST_MLP)
    run(p, "--graphir-update").assert_outcomes(passed=2)
    snap = p.path / SNAP
    text = snap.read_text()
    monkeypatch.setenv("BOOM", "1")
    result = run(p, "--snapshot-update", "-n", "2")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "Deleted" not in out and "unused" not in out, out
    assert snap.read_text() == text


# -- no silent typos ---------------------------------------------------------------------
def test_marker_typo_is_a_usage_error(graphir_project: pytest.Pytester) -> None:
    p = graphir_project
    p.makepyfile(
        test_mlp=TEST_MLP.replace(
            "def test_mlp", "import pytest\n@pytest.mark.graphir(rtoll=1e-2)\ndef test_mlp"
        ).replace("def test_other", "@pytest.mark.graphir(1e-2)\ndef test_other")
    )
    result = run(p, "--graphir-update")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*test_mlp: unknown argument rtoll; valid: rtol, atol, seed, max_diff_lines, "
            "tolerances, ignore; did you mean rtol=?*",
            "*graphir(0.01,) on test_mlp.py::test_other: positional argument(s) are not "
            "accepted; valid: rtol, atol, seed, max_diff_lines, tolerances, ignore*",
        ]
    )
    assert not (p.path / "__snapshots__").exists()


class _KwargsModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return self.fc(x)


class _HookModel(_KwargsModel):
    def forward(self, x: torch.Tensor, hook: bool = False, **kwargs: Any) -> torch.Tensor:
        return self.fc(x) * 2 if hook else self.fc(x)


@pytest.mark.parametrize(
    "typo, option",
    [
        ("backwards", "backward"),
        ("hook", "hooks"),
        ("stat", "stats"),
        ("blackboxes", "blackbox"),
        ("float32_precison", "float32_precision"),
    ],
)
def test_trace_option_typo_is_a_type_error(typo: str, option: str) -> None:
    model, x = _KwargsModel(), torch.randn(1, 4)
    with pytest.raises(TypeError) as excinfo:
        trace(model, x, **{typo: True})  # type: ignore[arg-type]
    message = str(excinfo.value)
    assert f"{typo}=" in message and f"{option}=" in message
    assert f"model_kwargs={{'{typo}': ...}}" in message
    # the model really takes it: model_kwargs passes it through, no error
    graph = trace(model, x, model_kwargs={typo: True})
    assert typo in graph.meta["kwargs"]


def test_trace_close_name_declared_by_forward_is_legit() -> None:
    model, x = _HookModel(), torch.randn(1, 4)
    graph = trace(model, x, hook=True)
    assert graph.meta["kwargs"] == ["hook"]
    assert "mul" in graph.ops()
    trace(_KwargsModel(), x, attention_mask=None)  # far from every option: passed on


# -- what a failure leaves behind --------------------------------------------------------
def test_failure_writes_received_file_and_pass_cleans_it(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The received snapshot goes into ``--graphir-report`` (mirroring the snapshot's
    path) or beside the snapshot (ini ``graphir_received = beside``), is never taken
    for an unused snapshot, and is accepted by copying it over the snapshot; the next
    passing run removes it from both places."""
    p = graphir_project
    p.makeini("[pytest]\ngraphir_received = beside\n")
    p.makepyfile(
        test_mlp=TEST_MLP,
        test_amber="""
def test_amber(snapshot):
    assert snapshot == {"a": 1}
""",
    )
    run(p, "--snapshot-update").assert_outcomes(passed=3)
    snap = p.path / SNAP
    text = snap.read_text()
    in_report = p.path / "report" / (SNAP + ".received")
    beside = p.path / (SNAP + ".received")
    monkeypatch.setenv("ACT", "gelu")

    result = run(p, "--graphir-report=report", "--graphir-received=report", "-vv")
    result.assert_outcomes(passed=2, failed=1)
    assert in_report.is_file() and not beside.exists(), result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*received: report/__snapshots__/test_mlp/test_mlp.graphir"
            ".received (this run's snapshot; to accept without rerunning, copy it over*"
        ]
    )
    assert "act/gelu#0" in in_report.read_text() and snap.read_text() == text
    assert not (p.path / "report/__snapshots__/test_mlp/test_other.graphir.received").exists()

    plain = run(p)  # the ini option: beside the snapshot
    plain.assert_outcomes(passed=2, failed=1)
    assert beside.read_text() == in_report.read_text()
    assert "unused" not in plain.stdout.str()  # syrupy does not take it for a snapshot

    # a reviewer accepts the CI-only change by copying the file over the snapshot
    snap.write_text(in_report.read_text())
    run(p, "--graphir-report=report").assert_outcomes(passed=3)
    assert not in_report.exists() and not beside.exists()

    # a snapshot that does not load: the message names the received file written for it
    snap.write_text("hello world\n")
    broken = run(p, "--graphir-report=report", "--graphir-received=report", "-vv")
    broken.assert_outcomes(passed=2, failed=1)
    broken.stdout.fnmatch_lines(["*not a graphir snapshot*", "*received: report/" + SNAP + "*"])
    assert "act/gelu#0" in in_report.read_text()


def test_traceback_of_model_error_ends_in_user_code(graphir_project: pytest.Pytester) -> None:
    p = graphir_project
    p.makepyfile(
        test_boom="""
import torch
from torch import nn
from pytest_graphir import trace

class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        h = self.fc(x)
        return torch.matmul(h, torch.ones(3, 3))  # USER LINE: shapes do not match

def test_boom():
    trace(Broken(), torch.randn(1, 4))
"""
    )
    result = run(p)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "USER LINE" in out
    assert "mode.py" not in out and "tracer.py" not in out, out
    assert "Run ``model(*args, **kwargs)`` once" not in out
    result.stdout.fnmatch_lines(["*torch.matmul(h, torch.ones(3, 3))*", "E * RuntimeError*"])


def test_model_error_is_raised_unchanged() -> None:
    class Broken(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise KeyError("mine", 3)

    with pytest.raises(KeyError) as excinfo:
        trace(Broken(), torch.randn(1))
    assert excinfo.value.args == ("mine", 3)
    assert excinfo.traceback[-1].name == "forward"


# -- outputs -----------------------------------------------------------------------------
@dataclasses.dataclass
class DataOut:
    logits: torch.Tensor
    hidden: torch.Tensor
    loss: torch.Tensor | None = None
    label: str = "x"


class TupleOut(NamedTuple):
    logits: torch.Tensor
    hidden: torch.Tensor


class _Structured(nn.Module):
    def __init__(self, wrap: Any) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.wrap = wrap

    def forward(self, x: torch.Tensor) -> Any:
        h = self.fc(x)
        return self.wrap(logits=h.relu(), hidden=h)


def _attrs_out() -> Any:
    attr = pytest.importorskip("attr", reason="attrs is not installed")

    @attr.define
    class AttrsOut:
        logits: torch.Tensor
        hidden: torch.Tensor

    return AttrsOut


@pytest.mark.parametrize("wrap", [DataOut, TupleOut, "attrs"])
def test_structured_outputs_are_recorded_by_field(wrap: Any) -> None:
    if wrap == "attrs":
        wrap = _attrs_out()
    graph = trace(_Structured(wrap), torch.randn(2, 4))
    assert list(graph.outputs)[:2] == ["logits", "hidden"]
    assert graph.outputs["logits"]["ref"] == "$relu#0"
    assert graph.outputs["hidden"]["ref"] == "$fc/linear#0"
    assert graph.outputs["logits"]["shape"] == [2, 3]
    if wrap is DataOut:
        assert "loss" not in graph.outputs  # None fields are left out, as in ModelOutput
        assert graph.outputs["label"] == "x"


def test_flatten_nested_dataclass_paths() -> None:
    t = torch.zeros(1)
    paths = [p for p, _ in flatten({"out": DataOut(t, t)}, "")]
    assert paths == ["out.logits", "out.hidden", "out.label"]
    assert [p for p, _ in flatten(DataOut, "cls")] == ["cls"]  # a class is a leaf


# -- print(graph) --------------------------------------------------------------------------
def test_repr_is_a_short_summary() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures"))
    import models

    model, inputs = models.tiny_transformer()
    graph = trace(model, *inputs)
    text = repr(graph)
    assert str(graph) == text
    lines = text.splitlines()
    assert 5 < len(lines) < 60
    assert lines[0] == "GraphIR of TinyTransformer"
    assert lines[1].startswith("call: TinyTransformer(ids: int64[1,6]) -> logits: float32[")
    module_calls = sum(1 for n in graph.nodes if n.kind == "module")
    op_calls = len(graph.nodes) - module_calls
    assert f"{module_calls} module calls, {op_calls} op calls" in text
    row = next(line for line in lines if line.lstrip(" │├└─").startswith("blocks.0.proj "))
    assert "Linear" in row and "float32[1,6,16]" in row
    assert any("shared@1" in line for line in lines)
    assert "blocks.0.proj" not in graph.summary(depth=1)  # the options of graphir show
    with_stats = graph.summary(stats=True).splitlines()
    assert any(line.split()[-4:] == ["mean", "std", "min", "max"] for line in with_stats)
    head = trace(model, *inputs, view="modules")
    head_row = next(line for line in repr(head).splitlines() if "head " in line)
    assert "850" in head_row  # 16 * 50 + 50 parameters


def test_update_removes_received_files(tmp_path: Path) -> None:
    """An updated (or created) comparison counts as success: its received files go."""
    from types import SimpleNamespace

    from pytest_graphir.extension.syrupy_extension import GraphIRExtension, GraphIRSettings

    snapshot = tmp_path / "__snapshots__/test_a/test_a.graphir"
    report = tmp_path / "report"
    ext = GraphIRExtension(
        GraphIRSettings(received=("report", tmp_path, report), report_dir=report, rootdir=tmp_path)
    )
    text = dumps(trace(nn.Linear(2, 2), torch.ones(1, 2)))
    failed = SimpleNamespace(
        success=False,
        exception=None,
        asserted_data=text,
        recalled_data=None,
        snapshot_location=str(snapshot),
    )
    ext.settle(failed)  # type: ignore[arg-type]
    in_report = report / "__snapshots__/test_a/test_a.graphir.received"
    assert in_report.read_text() == text
    beside = snapshot.with_name("test_a.graphir.received")
    beside.parent.mkdir(parents=True, exist_ok=True)
    beside.write_text("old")
    updated = SimpleNamespace(success=True, updated=True, snapshot_location=str(snapshot))
    ext.settle(updated)  # type: ignore[arg-type]
    assert not in_report.exists() and not beside.exists()


# -- docs ----------------------------------------------------------------------------------
def test_readme_quick_start_and_install_instructions() -> None:
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    quick = readme[readme.index("## Quick start") :]
    code = quick[quick.index("```python") : quick.index("```", quick.index("```python") + 3)]
    assert code.index("ids = ") < code.index("model = "), "inputs before the model"
    install = readme[readme.index("## Add it to your project") : readme.index("## Quick start")]
    assert install.index("pip install torch==") < install.index("pip install pytest-graphir")
    assert "[tool.pytest.ini_options]" in install
    comparison = (root / "docs" / "comparison.md").read_text()
    assert "## Why downstream statistics drift after any change" in comparison
