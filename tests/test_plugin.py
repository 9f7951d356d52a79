"""End-to-end tests of the pytest plugin with ``pytester``: the five-step workflow,
tolerance, xdist, malformed snapshots and syrupy's unused-snapshot traps."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
from workflow import check_workflow, run

from pytest_graphir.serialize import HEADER

ROOT = Path(__file__).resolve().parent.parent

TEST_MLP = """
import os
import models
from pytest_graphir import trace

def test_mlp(graphir_snapshot):
    model, inputs = models.mlp(act=os.environ.get("ACT", "relu"))
    noise = float(os.environ.get("NOISE", "0"))
    if noise:
        import torch
        with torch.no_grad():
            model.fc1.weight.mul_(1 + noise)
    assert trace(model, *inputs) == graphir_snapshot
"""

SNAP = "__snapshots__/test_mlp/test_mlp.graphir"


_run = run


def test_five_step_workflow(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    graphir_project.makepyfile(test_mlp=TEST_MLP)
    text = check_workflow(
        graphir_project,
        monkeypatch,
        snapshot=SNAP,
        change=("ACT", "tanh"),
        failure_lines=[
            "*graphir: 1 added, 1 removed, *changed*",
            "*added: act/tanh#0 (op tanh)*",
            "*removed: act/relu#0 (op relu)*",
            "*changed: act module ReLU -> Tanh*",
        ],
        snapshot_lines=('  fc1/linear#0: {"op": "linear"',),
    )
    assert "act/tanh#0" not in text
    assert "act/tanh#0" in (graphir_project.path / SNAP).read_text()


def test_drift_within_tolerance_passes_and_leaves_file(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = graphir_project
    p.makepyfile(test_mlp=TEST_MLP)
    _run(p, "--graphir-update").assert_outcomes(passed=1)
    snap = p.path / SNAP
    text = snap.read_text()

    monkeypatch.setenv("NOISE", "1e-5")  # changes printed digits, inside rtol=1e-3
    _run(p, "--graphir-update").assert_outcomes(passed=1)
    assert snap.read_text() == text

    monkeypatch.setenv("NOISE", "5e-2")  # beyond tolerance
    result = _run(p)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(  # the scaled weight first, then what drifts from it
        [
            "*drift: weights differ: 1 of 4 parameters (fc1.weight)*",
            "*fc1: * values in 1 node drift downstream of params.fc1.weight",
        ]
    )
    assert not list(p.path.rglob("*.received"))  # none without --graphir-report/-received


@pytest.mark.parametrize("assertion", ["graphir_snapshot", "graphir_snapshot.with_defaults()"])
def test_marker_overrides_tolerance(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, assertion: str
) -> None:
    """The marker's tolerance holds, also through syrupy's ``with_defaults`` (which
    builds a new assertion from syrupy's own fields)."""
    p = graphir_project
    source = TEST_MLP.replace(
        "def test_mlp", "import pytest\n@pytest.mark.graphir(rtol=0.5)\ndef test_mlp"
    )
    p.makepyfile(test_mlp=source.replace("== graphir_snapshot", f"== {assertion}"))
    _run(p, "--graphir-update").assert_outcomes(passed=1)
    monkeypatch.setenv("NOISE", "5e-2")
    _run(p).assert_outcomes(passed=1)


@pytest.mark.parametrize(
    "where, text, message",
    [
        ("marker", "rtol=1e300", "@pytest.mark.graphir(rtol=1e+300) on test_mlp.py::test_mlp: "),
        ("marker", "rtol='1e9'", "@pytest.mark.graphir(rtol='1e9') on test_mlp.py::test_mlp: "),
        ("marker", "atol=2", "@pytest.mark.graphir(atol=2) on test_mlp.py::test_mlp: "),
        (
            "marker",
            "tolerances={'fc1*': {'rtol': 1e300}}",
            "@pytest.mark.graphir on test_mlp.py::test_mlp: tolerances['fc1*']['rtol']=1e+300: ",
        ),
        ("ini", "graphir_rtol = 1e300", "ERROR: ini option graphir_rtol = 1e+300: "),
        ("-o", "graphir_atol=1e9", "ERROR: ini option graphir_atol = 1000000000.0: "),
    ],
)
def test_a_tolerance_that_would_pass_a_weight_change_is_refused(
    graphir_project: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
    text: str,
    message: str,
) -> None:
    """``rtol=1e300`` (or a str, which was read as a number) passed a weight scaled by
    11: every way a tolerance comes in refuses it, naming the option and the range."""
    p = graphir_project
    p.makepyfile(test_mlp=TEST_MLP)
    _run(p, "--graphir-update").assert_outcomes(passed=1)
    args: tuple[str, ...] = ()
    if where == "marker":
        marked = f"import pytest\n@pytest.mark.graphir({text})\ndef test_mlp"
        p.makepyfile(test_mlp=TEST_MLP.replace("def test_mlp", marked))
    elif where == "ini":
        p.makeini(f"[pytest]\n{text}\n")
    else:
        args = ("-o", text)
    monkeypatch.setenv("NOISE", "10")
    result = _run(p, *args)
    out = result.stdout.str() + result.stderr.str()
    assert message + "expected a number from 0 to 1" in out, out
    if where == "marker":
        result.assert_outcomes(errors=1)  # at set-up: the test body never compares
    else:
        assert result.ret == pytest.ExitCode.USAGE_ERROR


def test_ini_tolerance(graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    p = graphir_project
    p.makeini("[pytest]\ngraphir_rtol = 0.5\n")
    p.makepyfile(test_mlp=TEST_MLP)
    _run(p, "--graphir-update").assert_outcomes(passed=1)
    monkeypatch.setenv("NOISE", "5e-2")
    _run(p).assert_outcomes(passed=1)


MALFORMED = [  # (snapshot file content, the line the failing run prints; {snap}: its file)
    ("# graphir-format: 1\nmeta: {model: MLP\n", "invalid snapshot *{snap}:*"),
    ("", "{snap}:1: the file is empty*"),
    ("hello world\n", "{snap}:1: not a graphir snapshot*"),
    (
        "# graphir-format: 99\nmeta: {}\n# end of graphir snapshot\n",
        "{snap}:1: written in graphir format version 99*",
    ),
    (
        "!!python/object/apply:os.system ['echo PWNED > pwned.txt']\n",
        "{snap}:1: not a graphir snapshot*",
    ),
    (
        "# graphir-format: 1\n"
        "meta: !!python/object/apply:os.system ['echo PWNED > pwned.txt']\n"
        "inputs: {}\nnodes: {}\noutputs: {}\n# end of graphir snapshot\n",
        "{snap}:1: written in graphir format version 1 (YAML)*`graphir migrate*",
    ),
]


def test_malformed_snapshot_fails_with_file_and_fix(graphir_project: pytest.Pytester) -> None:
    """Each malformed snapshot (one test module each, all in one run) fails its own test
    naming the file, line and what is wrong, and the fix; no traceback, nothing the
    file says is executed, and ``--graphir-update`` rewrites every one."""
    p = graphir_project
    p.makepyfile(**{f"test_m{i}": TEST_MLP for i in range(len(MALFORMED))})
    _run(p, "--graphir-update").assert_outcomes(passed=len(MALFORMED))
    snaps = [p.path / f"__snapshots__/test_m{i}/test_mlp.graphir" for i in range(len(MALFORMED))]
    for snap, (content, _) in zip(snaps, MALFORMED, strict=True):
        snap.write_text(content)
    result = _run(p)
    result.assert_outcomes(failed=len(MALFORMED))
    out = result.stdout.str()
    assert "Traceback" not in out
    assert not (p.path / "pwned.txt").exists()
    # one failure section per module (every test is called test_mlp), found by the
    # traceback's "test_m<i>.py:<line>:" whatever order the tests ran in
    sections = re.split(r"\n_+ test_mlp _+\n", out)[1:]
    by_module = {int(re.findall(r"test_m(\d+)\.py:\d+: ", sec)[-1]): sec for sec in sections}
    assert sorted(by_module) == list(range(len(MALFORMED))), out
    for i, (_, message) in enumerate(MALFORMED):
        section = by_module[i]
        assert fnmatch.fnmatch(
            section, "*" + message.replace("{snap}", f"test_m{i}/test_mlp.graphir")
        ), section
        assert "fix: run `pytest --graphir-update`" in section, section
    _run(p, "--graphir-update").assert_outcomes(passed=len(MALFORMED))
    assert all(snap.read_text().startswith(HEADER + "\n") for snap in snaps)


def test_params_entry_stripped_of_statistics_is_an_invalid_snapshot(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting fc1.weight's statistics by hand no longer switches its check off: the
    run fails at that line (the weight is also changed, which would otherwise pass),
    and ``--graphir-update`` writes them back."""
    p = graphir_project
    p.makepyfile(test_mlp=TEST_MLP)
    _run(p, "--graphir-update").assert_outcomes(passed=1)
    snap = p.path / SNAP
    lines = snap.read_text().splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if line.startswith("  fc1.weight: "))
    lines[i] = re.sub(r', "mean".*}', "}", lines[i])
    snap.write_text("".join(lines))
    monkeypatch.setenv("NOISE", "5e-2")
    result = _run(p)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"*invalid snapshot *test_mlp.graphir:{i + 1}: params entry 'fc1.weight' lacks its*"]
    )
    _run(p, "--graphir-update").assert_outcomes(passed=1)
    assert '"mean"' in snap.read_text().splitlines()[i]


def test_truncated_snapshot_is_an_error(graphir_project: pytest.Pytester) -> None:
    p = graphir_project
    p.makepyfile(test_mlp=TEST_MLP)
    _run(p, "--graphir-update").assert_outcomes(passed=1)
    snap = p.path / SNAP
    lines = snap.read_text().splitlines(keepends=True)
    snap.write_text("".join(lines[:-2]))  # cut at a line boundary: still valid YAML
    result = _run(p)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_mlp.graphir:*: truncated*"])


def test_graphir_update_leaves_other_syrupy_snapshots(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = graphir_project
    p.makepyfile(
        test_mlp=TEST_MLP,
        test_other="""
import os
def test_other(snapshot):
    assert snapshot == {"value": os.environ.get("VALUE", "a")}
""",
    )
    _run(p, "--snapshot-update").assert_outcomes(passed=2)
    amber = p.path / "__snapshots__" / "test_other.ambr"
    before = amber.read_text()
    monkeypatch.setenv("VALUE", "b")
    monkeypatch.setenv("ACT", "gelu")
    result = _run(p, "--graphir-update")
    result.assert_outcomes(passed=1, failed=1)
    assert amber.read_text() == before
    assert "act/gelu#0" in (p.path / SNAP).read_text()


def test_module_level_skip_keeps_snapshots(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = graphir_project
    p.makepyfile(
        test_mlp=TEST_MLP.replace(
            "import os\n",
            "import os\nimport pytest\n"
            "if os.environ.get('SKIP'):\n    pytest.skip('no', allow_module_level=True)\n",
            1,
        ),
        test_plain="def test_ok():\n    pass\n",
    )
    _run(p, "--graphir-update").assert_outcomes(passed=2)
    snap = p.path / SNAP
    monkeypatch.setenv("SKIP", "1")
    plain = _run(p)
    assert plain.ret == 0, plain.stdout.str()
    assert "unused" not in plain.stdout.str()
    _run(p, "--snapshot-update").assert_outcomes(passed=1, skipped=1)
    assert snap.exists()
    _run(p, "--collect-only", "--snapshot-update")
    assert snap.exists()


def test_xdist_workflow(graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    p = graphir_project
    p.makepyfile(test_mlp=TEST_MLP, test_two=TEST_MLP.replace("test_mlp", "test_two"))
    first = _run(p, "-n", "2")
    first.assert_outcomes(failed=2)
    _run(p, "-n", "2", "--graphir-update").assert_outcomes(passed=2)
    assert (p.path / SNAP).exists()
    assert (p.path / "__snapshots__/test_two/test_two.graphir").exists()
    _run(p, "-n", "2").assert_outcomes(passed=2)
    monkeypatch.setenv("ACT", "gelu")
    changed = _run(p, "-n", "2")
    changed.assert_outcomes(failed=2)
    changed.stdout.fnmatch_lines(["*added: act/gelu#0*"])
    _run(p, "-n", "2", "--graphir-update").assert_outcomes(passed=2)
    _run(p, "-n", "2").assert_outcomes(passed=2)


def test_loading_the_plugin_does_not_import_torch(pytester: pytest.Pytester) -> None:
    """pytest loads every installed plugin for every suite: ours must stay light."""
    pytester.makeconftest("""
import sys

def pytest_sessionfinish(session):
    print("TORCH_LOADED=%s" % ("torch" in sys.modules))
""")
    pytester.makepyfile(test_plain="def test_ok():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s")
    result.assert_outcomes(passed=1)
    assert "graphir" in result.stdout.str()  # the plugin was loaded (plugins: line)
    result.stdout.fnmatch_lines(["*TORCH_LOADED=False*"])


def test_fixture_seeds_torch_before_each_test(graphir_project: pytest.Pytester) -> None:
    """Two tests draw the same random numbers: each starts from graphir_seed."""
    p = graphir_project
    p.makepyfile(
        test_seed="""
import torch

def test_a(graphir_snapshot):
    print("DRAW", torch.rand(3).tolist())

def test_b(graphir_snapshot):
    torch.rand(100)  # does not leak into the next test
    print("DRAW", torch.rand(3).tolist())

def test_c(graphir_snapshot):
    print("DRAW", torch.rand(3).tolist())
"""
    )
    result = _run(p, "-s")
    result.assert_outcomes(passed=3)
    import torch

    torch.manual_seed(0)
    expected = f"DRAW {torch.rand(3).tolist()}"
    draws = re.findall(r"DRAW \[[^\]]*\]", result.stdout.str())
    assert len(draws) == 3
    assert draws[0] == expected and draws[2] == expected
    assert draws[1] != expected  # test_b drew 100 numbers first


def test_syrupy_snapshot_update_also_writes(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = graphir_project
    p.makepyfile(test_mlp=TEST_MLP)
    _run(p, "--snapshot-update").assert_outcomes(passed=1)
    assert (p.path / SNAP).exists()
    monkeypatch.setenv("ACT", "gelu")
    _run(p, "--snapshot-update").assert_outcomes(passed=1)
    assert "act/gelu#0" in (p.path / SNAP).read_text()
    _run(p).assert_outcomes(passed=1)


def test_wrong_data_type_fails_clearly(graphir_project: pytest.Pytester) -> None:
    p = graphir_project
    p.makepyfile(
        test_bad="""
def test_bad(graphir_snapshot):
    assert {"not": "a graph"} == graphir_snapshot
"""
    )
    result = _run(p, "--graphir-update")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*graphir_snapshot compares graph IRs*trace(model, *inputs)*"])
    assert not (p.path / "__snapshots__" / "test_bad").exists()


def test_failed_update_keeps_old_snapshot(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that raises during --graphir-update leaves the old file whole."""
    p = graphir_project
    p.makepyfile(
        test_mlp=TEST_MLP.replace(
            "    assert trace(",
            "    if os.environ.get('BOOM'):\n"
            "        model.fc2.forward = None  # calling it raises TypeError\n    assert trace(",
        )
    )
    _run(p, "--graphir-update").assert_outcomes(passed=1)
    snap = p.path / SNAP
    before = snap.read_text()
    monkeypatch.setenv("BOOM", "1")
    _run(p, "--graphir-update").assert_outcomes(failed=1)
    assert snap.read_text() == before
    assert [f.name for f in snap.parent.iterdir()] == [snap.name]  # no temp file left


BAD_MARKERS = {
    "rtol='loose'": "rtol='loose') on test_bad.py::test_0: expected a number from 0 to 1",
    "rtol=float('inf')": "rtol=inf) on test_bad.py::test_1: expected a number from 0 to 1",
    "atol=1e999": "atol=inf) on test_bad.py::test_2: expected a number from 0 to 1",
    "atol=float('nan')": "atol=nan) on test_bad.py::test_3: expected a number from 0 to 1",
    "rtol=-1": "rtol=-1) on test_bad.py::test_4: expected a number from 0 to 1",
    "seed=2**70": "seed=1180591620717411303424) on test_bad.py::test_5: expected an integer "
    "from 0 to 2**64 - 1",
    "ignore=123": "on test_bad.py::test_6: ignore=123: expected a node-name pattern (str) or "
    "a list of them",
    "tolerances={'fc2/*': {'atol': float('inf')}}": "on test_bad.py::test_7: "
    "tolerances['fc2/*']['atol']=inf: expected a number from 0 to 1",
    "max_diff_lines=-3": "max_diff_lines=-3) on test_bad.py::test_8: expected an integer >= 0",
    "rtoll=1e-2": "on test_bad.py::test_9: unknown argument rtoll; valid: rtol, atol",
}


def test_bad_marker_value_is_one_message_naming_it(graphir_project: pytest.Pytester) -> None:
    """Each test errors at set-up with one line naming the argument and what it should
    be: no traceback through the plugin, no raw TypeError or OverflowError."""
    p = graphir_project
    tests = [
        f"@pytest.mark.graphir({marker})\ndef test_{i}(graphir_snapshot):\n    pass\n"
        for i, marker in enumerate(BAD_MARKERS)
    ]
    p.makepyfile(test_bad="import pytest\n\n" + "\n".join(tests))
    result = _run(p)
    result.assert_outcomes(errors=len(BAD_MARKERS))
    out = result.stdout.str()
    for message in BAD_MARKERS.values():
        assert f"\ngraphir: @pytest.mark.graphir{'' if message[0] == 'o' else '('}" in out
        assert message in out, message
    assert "pytest_graphir" not in out and "Traceback" not in out, out
    assert len(out.splitlines()) < 4 * len(BAD_MARKERS) + 20, out  # a few lines each


@pytest.mark.parametrize(
    "where, text, message",
    [
        ("toml", 'graphir_rtol = "loose"', "could not convert string to float: 'loose'"),
        ("ini", "graphir_rtol = inf", "graphir_rtol = inf: expected a number from 0 to 1"),
        ("ini", "graphir_atol = 1e999", "graphir_atol = inf: expected a number from 0 to 1"),
        ("ini", "graphir_atol = -1", "graphir_atol = -1.0: expected a number from 0 to 1"),
        ("-o", "graphir_rtol=nan", "graphir_rtol = nan: expected a number from 0 to 1"),
        ("ini", f"graphir_seed = {2**70}", f"graphir_seed = {2**70}: expected an integer from"),
        ("-o", "graphir_seed=-1", "graphir_seed = -1: expected an integer from 0 to 2**64 - 1"),
    ],
)
def test_bad_ini_option_stops_pytest_with_one_line_naming_it(
    pytester: pytest.Pytester, where: str, text: str, message: str
) -> None:
    """``graphir_rtol = "loose"`` in pyproject.toml gave 158 lines of traceback ending in
    ``could not convert string to float: 'loose'``, without the option's name."""
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    args: tuple[str, ...] = ()
    if where == "toml":
        pytester.makepyprojecttoml(f"[tool.pytest.ini_options]\n{text}\n")
    elif where == "ini":
        pytester.makeini(f"[pytest]\n{text}\n")
    else:
        args = ("-o", text)
    result = _run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    name = text.split("=")[0].strip()
    assert len(errors) == 1 and errors[0].startswith(f"ERROR: ini option {name}"), errors
    assert message in errors[0], errors


def test_collection_error_keeps_snapshots(graphir_project: pytest.Pytester) -> None:
    """A module that fails to import must not make --snapshot-update delete snapshots."""
    p = graphir_project
    p.makepyfile(test_mlp=TEST_MLP, test_two=TEST_MLP.replace("test_mlp", "test_two"))
    _run(p, "--graphir-update").assert_outcomes(passed=2)
    (p.path / "test_two.py").write_text("import does_not_exist\n")
    for args in ((), ("--continue-on-collection-errors",)):
        result = _run(p, "--snapshot-update", *args)
        assert result.ret != 0
        assert (p.path / SNAP).exists(), result.stdout.str()
        assert (p.path / "__snapshots__/test_two/test_two.graphir").exists()


def test_ini_options_accept_toml_numbers(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\ngraphir_rtol = 0.5\n")
    pytester.makepyfile(models=(ROOT / "fixtures" / "models.py").read_text(), test_mlp=TEST_MLP)
    _run(pytester, "--graphir-update").assert_outcomes(passed=1)
    monkeypatch.setenv("NOISE", "5e-2")
    _run(pytester).assert_outcomes(passed=1)


ISSUE_EXAMPLE = """
import os
import torch
from transformers import GPT2Config, GPT2LMHeadModel
from pytest_graphir import trace

def test_gpt2_architecture(graphir_snapshot):
    model = GPT2LMHeadModel(GPT2Config(n_layer=2,
        activation_function=os.environ.get("ACT", "gelu_new"))).eval()
    ids = torch.randint(0, 50257, (1, 16))
    noise = float(os.environ.get("NOISE", "0"))
    if noise:
        with torch.no_grad():
            model.lm_head.weight.mul_(1 + noise)
    graph = trace(model, ids)
    if os.environ.get("DUMP"):
        from pytest_graphir.serialize import HEADER, dumps
        open("received.graphir", "w").write(dumps(graph))
    assert graph == graphir_snapshot
"""


def test_issue_example_gpt2_end_to_end(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's GPT-2 test: write, pass, in-tolerance drift, architecture change."""
    pytester.makepyfile(test_models=ISSUE_EXAMPLE)
    snap = pytester.path / "__snapshots__/test_models/test_gpt2_architecture.graphir"
    _run(pytester).assert_outcomes(failed=1)
    _run(pytester, "--graphir-update").assert_outcomes(passed=1)
    text = snap.read_text()
    _run(pytester).assert_outcomes(passed=1)

    monkeypatch.setenv("NOISE", "1e-5")  # weights nudged: numbers move, within tolerance
    monkeypatch.setenv("DUMP", "1")
    _run(pytester, "--graphir-update").assert_outcomes(passed=1)
    assert snap.read_text() == text
    assert (pytester.path / "received.graphir").read_text() != text  # the digits did move
    monkeypatch.delenv("DUMP")

    monkeypatch.setenv("NOISE", "0")
    monkeypatch.setenv("ACT", "relu")
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*graphir: 2 added, 2 removed, *",
            "*added: transformer.h.0.mlp.act/relu#0 (op relu)*",
            "*removed: transformer.h.0.mlp.act/{mul#0,pow#0,mul#1,add#0,mul#2,tanh#0,add#1,mul#3}*",
        ]
    )
    assert snap.read_text() == text


TEST_HOOKS = """
import os
import models
from pytest_graphir import trace

class Observer:
    def __call__(self, module, args, output):
        return None

def capture(module, args, output):
    return None

def test_hooks(graphir_snapshot):
    model, inputs = models.mlp()
    model.fc1.register_forward_hook(capture)
    model.fc1.register_forward_hook(Observer(), prepend=bool(os.environ.get("PREPEND")))
    if os.environ.get("FREEZE"):
        model.fc2.requires_grad_(False)
    assert trace(model, *inputs, hooks=True, backward=True) == graphir_snapshot
"""


def test_hook_and_backward_sections_workflow(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = graphir_project
    p.makepyfile(test_hooks=TEST_HOOKS)
    snap = p.path / "__snapshots__/test_hooks/test_hooks.graphir"
    _run(p).assert_outcomes(failed=1)
    _run(p, "--graphir-update").assert_outcomes(passed=1)
    text = snap.read_text()
    assert '  - "fc1 forward_hook capture"\n' in text
    assert "grads:\n" in text and "autograd:\n" in text
    _run(p).assert_outcomes(passed=1)

    monkeypatch.setenv("PREPEND", "1")
    result = _run(p)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*changed: fc1 forward_hook 'Observer.__call__' fired before 'capture' (was after)*"]
    )
    monkeypatch.delenv("PREPEND")

    monkeypatch.setenv("FREEZE", "1")
    result = _run(p)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*changed: grads.fc2.weight *-> frozen*"])
    _run(p, "--graphir-update").assert_outcomes(passed=1)
    assert '  fc2.weight: "frozen"\n' in snap.read_text()
    _run(p).assert_outcomes(passed=1)


NAMES_TEST = """
import models
import pytest
from pytest_graphir import trace

LONG = "x" * 300

@pytest.mark.parametrize("name", ["a/b", "a\\\\b", "ab", "a:b", LONG, LONG + "y", "é" * 150],
                         ids=lambda name: name)
def test_named(name, graphir_snapshot):
    model, inputs = models.mlp(act={"a/b": "tanh", "a\\\\b": "gelu"}.get(name, "relu"))
    assert trace(model, *inputs) == graphir_snapshot
"""


def test_ids_never_share_a_file_and_long_ids_get_bounded_names(
    graphir_project: pytest.Pytester,
) -> None:
    """``a/b``, ``a\\b`` and ``ab`` differ only in characters a file name drops: each
    gets its own file (a hash is appended when cleaning changed the name); ids of
    300+ bytes get a bounded name (no ``File name too long`` from the temporary
    file); the next plain run passes and nothing is reported unused."""
    p = graphir_project
    p.makepyfile(test_names=NAMES_TEST)
    update = _run(p, "--graphir-update")
    update.assert_outcomes(passed=7)
    assert "File name too long" not in update.stdout.str()
    files = sorted((p.path / "__snapshots__" / "test_names").iterdir())
    assert len(files) == 7, [f.name for f in files]
    assert "test_named[ab].graphir" in [f.name for f in files]
    assert all(len(f.name.encode()) <= 210 for f in files)
    texts = {f.read_text() for f in files}
    assert any("tanh" in t for t in texts) and any("gelu" in t for t in texts)
    plain = _run(p)
    plain.assert_outcomes(passed=7)
    assert "unused" not in plain.stdout.str()
    # a missing long-id snapshot names its file and its test
    next(f for f in files if f.name.startswith("test_named[xxx") and "y" not in f.name).unlink()
    missing = _run(p)
    missing.assert_outcomes(passed=6, failed=1)
    missing.stdout.fnmatch_lines(
        [
            "*graphir: no snapshot at __snapshots__/test_names/test_named[[]xxxx*~*.graphir*",
            "*(the snapshot file of test_names.py::test_named[[]xxxx*",
        ]
    )


def test_ci_with_update_flag_warns_that_the_gate_is_off(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``CI=true`` plus ``--graphir-update`` or ``--snapshot-update`` (here through
    ``PYTEST_ADDOPTS``) passes every snapshot: say so loudly, at the end of the run."""
    pytester.makepyfile(test_plain="def test_ok():\n    pass\n")
    monkeypatch.setenv("CI", "true")
    for flag in ("--graphir-update", "--snapshot-update"):
        monkeypatch.setenv("PYTEST_ADDOPTS", flag)
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(
            [
                f"graphir: WARNING: CI is set and {flag} is given*",
                "*graphir: snapshot gate is OFF in this CI run*",
                f"CI='true' and {flag} is given (PYTEST_ADDOPTS='{flag}'): graph snapshots were "
                "rewritten*",
                f"Fix: remove {flag} from the CI command or PYTEST_ADDOPTS*",
            ]
        )
    monkeypatch.delenv("PYTEST_ADDOPTS")
    quiet = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert "gate is OFF" not in quiet.stdout.str()
    monkeypatch.setenv("CI", "false")
    off = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--graphir-update")
    assert "gate is OFF" not in off.stdout.str()


def test_size_limit_names_the_option_and_can_be_raised(graphir_project: pytest.Pytester) -> None:
    """A snapshot over graphir_max_snapshot_bytes fails unread, naming the limit and the
    ini option; raising the option makes it load."""
    p = graphir_project
    p.makepyfile(test_mlp=TEST_MLP)
    _run(p, "--graphir-update").assert_outcomes(passed=1)
    size = (p.path / SNAP).stat().st_size
    p.makeini(f"[pytest]\ngraphir_max_snapshot_bytes = {size - 1}\n")
    small = _run(p)
    small.assert_outcomes(failed=1)
    small.stdout.fnmatch_lines(
        [
            f"*graphir: cannot use snapshot {SNAP}: the file is {size:,} bytes, over the "
            f"{size - 1:,}-byte limit on snapshots (the ini option graphir_max_snapshot_bytes)",
            "*raise graphir_max_snapshot_bytes if the model really is that large*",
        ]
    )
    p.makeini(f"[pytest]\ngraphir_max_snapshot_bytes = {size}\n")
    _run(p).assert_outcomes(passed=1)
