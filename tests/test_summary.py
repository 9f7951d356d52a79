"""End-to-end (``pytester``) tests of what a failing graphir test prints at default
verbosity, of the HTML report written on failure (and linked from pytest-html), and of
the obsolete-snapshot cleanup of ``--graphir-update``, serially and under ``-n 2``."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from workflow import run

TEST_MODELS = """
import os
import models
from pytest_graphir import trace

def test_a(graphir_snapshot):
    if os.environ.get("ERR_A"):
        raise RuntimeError("broken before the assert")
    model, inputs = models.mlp(act=os.environ.get("ACT", "relu"))
    assert trace(model, *inputs) == graphir_snapshot

def test_b(graphir_snapshot):
    model, inputs = models.mlp(act=os.environ.get("ACT", "relu"))
    assert trace(model, *inputs) == graphir_snapshot
"""

TEST_OTHER = """
def test_other(snapshot):
    assert {"answer": 42} == snapshot

def test_gone(snapshot):
    assert {"answer": 0} == snapshot
"""

SNAPS = Path("__snapshots__/test_models")


def _summary_section(text: str) -> str:
    """The ``graphir snapshot failures`` section of pytest's output."""
    start = text.index("graphir snapshot failures")
    end = text.find("short test summary info", start)
    return text[start : end if end > 0 else None]


def test_default_verbosity_summary_and_report(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At default verbosity, with CI unset (where pytest cuts an assertion message after
    8 lines): the terminal summary section names the test, its counts, the change list
    as the message has it (structural changes, then the drift grouped), the snapshot,
    the report and how to accept; the report exists and shows the change."""
    p = graphir_project
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("BUILD_NUMBER", raising=False)
    p.makepyfile(test_models=TEST_MODELS)
    run(p, "--graphir-update").assert_outcomes(passed=2)
    monkeypatch.setenv("ACT", "tanh")
    result = run(p, "--graphir-report=reports", "-k", "test_b")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    section = _summary_section(text)
    snapshot = str(SNAPS / "test_b.graphir")
    report = Path("reports") / SNAPS / "test_b.graphir.html"
    report_line = f"  report: {report}"
    expected = [
        "test_models.py::test_b",
        "  graphir: 1 added, 1 removed, 1 changed, 4 drift (rtol=0.001, atol=1e-05)",
        "    added: act/tanh#0 (op tanh), read in place of act/relu#0 by 3 nodes: act, fc2, "
        "fc2/linear#0",
        "    removed: act/relu#0 (op relu)",
        "    changed: act module ReLU -> Tanh",
        "    fc2: 4 values in 1 node drift downstream of act/tanh#0",  # the 4 drift, grouped
        f"  snapshot: {snapshot}",
        report_line,
        "  to accept: pytest --graphir-update 'test_models.py::test_b'",
    ]
    lines = section.splitlines()[1 : 1 + len(expected)]
    assert lines == expected, section
    # the report line is in the assertion message too (second line, before the cut)
    assert re.search(rf"E\s+{re.escape(report_line.strip())}", text)
    page = (p.path / report).read_text()
    assert page.lstrip().lower().startswith("<!doctype html")
    assert "act/tanh#0" in page and "act/relu#0" in page
    # a passing run prints no section, and removes the page of the failure that is gone
    monkeypatch.delenv("ACT")
    (p.path / "reports" / "keep.html").write_text("not a page of ours")
    passed = run(p, "--graphir-report=reports", "-k", "test_b")
    passed.assert_outcomes(passed=1)
    assert "graphir snapshot failures" not in passed.stdout.str()
    assert not (p.path / report).exists()
    assert (p.path / "reports" / "keep.html").exists()


def test_an_invalid_snapshot_is_summarised_with_its_fix(graphir_project: pytest.Pytester) -> None:
    """A snapshot that does not load is no change to accept: the summary, as the
    message, names the file and line and says how to rewrite it."""
    p = graphir_project
    p.makepyfile(test_models=TEST_MODELS)
    run(p, "--graphir-update").assert_outcomes(passed=2)
    (p.path / SNAPS / "test_b.graphir").write_text("not a snapshot\n")
    result = run(p, "-k", "test_b")
    result.assert_outcomes(failed=1)
    section = _summary_section(result.stdout.str())
    assert f"invalid snapshot {SNAPS / 'test_b.graphir'}:1: " in section, section
    fix = "pytest --graphir-update 'test_models.py::test_b' to rewrite it from the current model"
    assert f"  fix: {fix}\n" in section, section
    assert "to accept" not in section, section


TWO_SNAPSHOTS = """
import os
import models
import pytest
from pytest_graphir import trace

@pytest.mark.parametrize("name", ["short", "x" * 300], ids=lambda name: name)
def test_two(name, graphir_snapshot):
    model, inputs = models.mlp()
    assert trace(model, *inputs) == graphir_snapshot
    if not os.environ.get("ONE"):
        assert trace(model, *inputs, stats=False) == graphir_snapshot
"""


def test_update_keeps_the_second_snapshot_of_a_test_that_exists(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test that ran without its second assertion still exists: ``--graphir-update``
    keeps its second snapshot (``<name>.1``) whether the name is short or long enough
    to be shortened and hashed (``<head>~<12 hex>``, one hash per snapshot name)."""
    p = graphir_project
    p.makepyfile(test_two=TWO_SNAPSHOTS)
    run(p, "--graphir-update").assert_outcomes(passed=2)
    folder = p.path / "__snapshots__" / "test_two"
    before = sorted(f.name for f in folder.iterdir())
    assert len(before) == 4 and sum("~" in name for name in before) == 2, before
    monkeypatch.setenv("ONE", "1")
    run(p, "--graphir-update").assert_outcomes(passed=2)
    assert sorted(f.name for f in folder.iterdir()) == before


def test_summary_starts_with_the_provenance_line_of_the_message(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot written with another torch: the never-cut summary opens the failure
    with the line the assertion message opens with (pytest may cut the message)."""
    p = graphir_project
    p.makepyfile(test_models=TEST_MODELS)
    run(p, "--graphir-update", "-k", "test_b").assert_outcomes(passed=1)
    path = p.path / SNAPS / "test_b.graphir"
    text = path.read_text()
    path.write_text(re.sub(r"(# provenance: \{torch: )[^,]+", r"\g<1>0.0.1", text))
    monkeypatch.setenv("ACT", "tanh")
    result = run(p, "-k", "test_b")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    note = re.search(r"E\s+(graphir: snapshot written with torch 0\.0\.1 .*)", out)
    assert note, out
    lines = _summary_section(out).splitlines()
    assert lines[1:3] == ["test_models.py::test_b", f"  {note.group(1)}"], lines
    assert lines[3].startswith("  graphir: 1 added"), lines


TEST_BLOCKS = """
import os
import torch
from torch import nn
from pytest_graphir import init_by_name, trace

class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("s", torch.ones(16))  # a buffer: no parameter differs

    def forward(self, x):
        return x * self.s

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.act = nn.GELU()
        self.scale = Scale()

    def forward(self, x):
        return x + self.scale(self.act(self.fc(x)))

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*[Block() for _ in range(6)])
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.blocks(x))

def test_blocks(graphir_snapshot):
    torch.manual_seed(0)
    model = init_by_name(Net()).eval()
    if os.environ.get("SCALE"):
        with torch.no_grad():
            model.blocks[1].scale.s.mul_(1.5)
    x = torch.randn(2, 16, generator=torch.Generator().manual_seed(0))
    assert trace(model, x) == graphir_snapshot
"""


def test_summary_of_a_numeric_change_names_its_origin_and_groups_the_rest(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One buffer scaled in block 1 of 6: the drift starts at that block's ``mul`` and
    propagates through blocks 2-5 and the head. The summary section lists the origin
    first, then the propagated drift one line per module subtree, the same lines in the
    same order as the assertion message, never one line per drifting node; the values
    its lines count add up to the drift count of its first line."""
    p = graphir_project
    p.makepyfile(test_blocks=TEST_BLOCKS)
    run(p, "--graphir-update").assert_outcomes(passed=1)
    monkeypatch.setenv("SCALE", "1")
    result = run(p, "-vv")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    section = _summary_section(text).splitlines()
    head = section[2]
    assert head.startswith("  graphir: ") and " drift (rtol=" in head, head
    changes = [x for x in section[3:] if x.startswith("    ")]
    origin = "blocks.1.scale/mul#0"
    assert changes[0].startswith(f"    drift: {origin} out[0]."), changes
    assert "starts here" in changes[0], changes
    grouped = re.compile(
        r"    (?P<where>\S+): (?P<n>\d+) values? in \d+ nodes? drifts? downstream of "
        + re.escape(origin)
        + "$"
    )
    matched = [grouped.match(x) for x in changes[1:]]
    assert all(matched), changes
    assert [m["where"] for m in matched if m] == ["blocks.1-5", "head"]
    assert not any(x.startswith("    drift: blocks.2") for x in changes), changes
    assert not any("more in the assertion message" in x for x in changes), changes
    starts = re.search(r"starts here \((\d+) values? drifts?", changes[0])
    assert starts is not None
    counted = int(starts[1]) + sum(int(m["n"]) for m in matched if m)
    assert head == f"  graphir: {counted} drift (rtol=0.001, atol=1e-05)"
    # the assertion message (whole under -vv) has the same change lines in the same order
    message = [x[1:].rstrip() for x in text.splitlines() if x.startswith("E ")]
    first = next(i for i, x in enumerate(message) if x.strip().startswith(f"drift: {origin}"))
    assert [x.strip() for x in message[first : first + len(changes)]] == [
        x.strip() for x in changes
    ]


TEST_DEEP = """
import os
import torch
from torch import nn
from pytest_graphir import trace

ACTS = {"relu": nn.ReLU, "tanh": nn.Tanh}

def test_deep(graphir_snapshot):
    torch.manual_seed(0)
    act = ACTS[os.environ.get("ACT", "relu")]
    model = nn.Sequential(*[m for _ in range(5) for m in (nn.Linear(8, 8), act())]).eval()
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    assert trace(model, x) == graphir_snapshot
"""

MORE_HINT = "raise the ini option graphir_max_diff_lines (0 = no limit) to see them all"


@pytest.mark.parametrize(
    ("limit", "how"),
    [(3, "ini"), (12, "-o")],
    ids=["below-the-summary-ten-ini", "above-it-command-line"],
)
def test_summary_keeps_to_max_diff_lines_and_names_what_prints_the_rest(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, limit: int, how: str
) -> None:
    """Five activations swapped: 27 changes, 16 change lines. With
    ``graphir_max_diff_lines`` (the ini option, or ``-o`` on the command line) at 3 the
    summary lists at most 3 lines, never more than the assertion message it
    summarises; at 12 it lists its own ten. Either way the message itself is cut, so
    ``-vv`` does not print the rest (checked: the ``-vv`` message ends in its own cut
    line), and the summary's ``... and N more`` line says what does, in the message's
    words, and how many of the N the message leaves out too."""
    p = graphir_project
    p.makepyfile(test_deep=TEST_DEEP)
    run(p, "--graphir-update").assert_outcomes(passed=1)
    monkeypatch.setenv("ACT", "tanh")
    if how == "ini":
        p.makeini(f"[pytest]\ngraphir_max_diff_lines = {limit}\n")
        args: tuple[str, ...] = ("-vv",)
    else:
        args = ("-vv", "-o", f"graphir_max_diff_lines={limit}")
    result = run(p, *args)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    section = _summary_section(text).splitlines()
    changes = [x for x in section if x.startswith("    ") and not x.startswith("    ...")]
    assert len(changes) == min(limit, 10), section
    # -vv prints the message uncut by pytest, and it still ends in its own cut line
    message = [x[1:].strip() for x in text.splitlines() if x.startswith("E ")]
    cut = [x for x in message if x.startswith("... and ")]
    assert len(cut) == 1 and cut[0].endswith(f"; {MORE_HINT}"), message
    left_out = int(cut[0].split()[2])  # "... and <n> more (...)"
    more = [x for x in section if x.startswith("    ... and ")]
    assert len(more) == 1, section
    said = re.fullmatch(
        r"    \.\.\. and (\d+) more,(?: (\d+) of them)? left out of the assertion "
        r"message too: " + re.escape(MORE_HINT),
        more[0],
    )
    assert said is not None, more
    if limit <= 10:  # the summary shows all the message shows: the rest is cut from both
        assert said[2] is None and int(said[1]) == left_out
    else:  # some of the rest is in the message, some not
        assert int(said[2]) == left_out < int(said[1])
    # the lines the summary shows are the message's first lines, in its order
    first = message.index(changes[0].strip())
    assert message[first : first + len(changes)] == [x.strip() for x in changes]


MARKER_HINT = (
    "raise max_diff_lines in the test's @pytest.mark.graphir marker (0 = no limit) to see them all"
)


def test_limit_set_by_the_marker_is_the_one_the_hint_names(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``@pytest.mark.graphir(max_diff_lines=3)`` wins over the ini option (here 50,
    which alone would show every line): the message and the summary both say to raise
    the marker's value, not the option, which would change nothing."""
    p = graphir_project
    marked = TEST_DEEP.replace(
        "def test_deep(", "import pytest\n\n@pytest.mark.graphir(max_diff_lines=3)\ndef test_deep("
    )
    p.makepyfile(test_deep=marked)
    p.makeini("[pytest]\ngraphir_max_diff_lines = 50\n")
    run(p, "--graphir-update").assert_outcomes(passed=1)
    monkeypatch.setenv("ACT", "tanh")
    result = run(p, "-vv")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    message = [x[1:].strip() for x in text.splitlines() if x.startswith("E ")]
    cut = [x for x in message if x.startswith("... and ")]
    assert len(cut) == 1 and cut[0].endswith(f"; {MARKER_HINT}"), message
    section = _summary_section(text).splitlines()
    changes = [x for x in section if x.startswith("    ") and not x.startswith("    ...")]
    assert len(changes) == 3, section
    more = [x for x in section if x.startswith("    ... and ")]
    assert len(more) == 1 and more[0].endswith(f"message too: {MARKER_HINT}"), section
    assert MORE_HINT not in text


@pytest.mark.skipif(
    importlib.util.find_spec("pytest_html") is None,
    reason="pytest-html is not installed (pip install pytest-html)",
)
def test_report_linked_from_pytest_html(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With pytest-html, its report links the graphir report, relative to itself."""
    p = graphir_project
    p.makepyfile(test_models=TEST_MODELS)
    run(p, "--graphir-update", "-k", "test_b").assert_outcomes(passed=1)
    monkeypatch.setenv("ACT", "tanh")
    result = run(
        p,
        "-k",
        "test_b",
        "--graphir-report=out/graphir",
        "--html=out/pytest.html",
        "--self-contained-html",
    )
    result.assert_outcomes(failed=1)
    html = (p.path / "out" / "pytest.html").read_text()
    link = "graphir/" + str(SNAPS / "test_b.graphir.html")
    assert link in html, "pytest-html report does not link the graphir report"
    assert (p.path / "out" / link).is_file()


@pytest.mark.slow
def test_xdist_summary_and_obsolete_cleanup(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``-n 2``: the workers' failure records reach the controller's summary;
    ``--graphir-update`` deletes the snapshot of a renamed test, and only it: not with
    ``-k`` or ``--collect-only``, not the snapshot of a test that errors before its
    assert, never another extension's snapshot."""
    p = graphir_project
    p.makepyfile(test_models=TEST_MODELS, test_other=TEST_OTHER)
    run(p, "-n", "2", "--snapshot-update").assert_outcomes(passed=4)
    amber = p.path / "__snapshots__" / "test_other.ambr"
    amber_text = amber.read_text()
    assert "test_gone" in amber_text
    assert (p.path / SNAPS / "test_b.graphir").is_file()

    monkeypatch.setenv("ACT", "tanh")
    failing = run(p, "-n", "2")
    failing.assert_outcomes(failed=2, passed=2)
    section = _summary_section(failing.stdout.str())
    for name in ("test_a", "test_b"):
        assert f"test_models.py::{name}\n" in section
        assert f"  snapshot: {SNAPS / (name + '.graphir')}\n" in section
        assert f"  to accept: pytest --graphir-update 'test_models.py::{name}'" in section
    assert section.count("added: act/tanh#0 (op tanh)") == 2
    monkeypatch.delenv("ACT")

    # rename test_b -> test_b2; remove test_gone (its amber entry becomes unused)
    p.makepyfile(
        test_models=TEST_MODELS.replace("def test_b(", "def test_b2("),
        test_other=TEST_OTHER.split("def test_gone")[0],
    )
    stale = p.path / SNAPS / "test_b.graphir"
    run(p, "--graphir-update", "-k", "test_a or test_b2")
    assert stale.is_file(), "deleted under -k deselection"
    run(p, "--graphir-update", "--collect-only")
    assert stale.is_file(), "deleted under --collect-only"

    monkeypatch.setenv("ERR_A", "1")  # test_a exists but fails before asserting
    result = run(p, "-n", "2", "--graphir-update")
    result.assert_outcomes(failed=1, passed=2)
    assert not stale.exists(), result.stdout.str()
    result.stdout.fnmatch_lines([f"graphir: deleted obsolete snapshot {SNAPS / 'test_b.graphir'}"])
    assert (p.path / SNAPS / "test_a.graphir").is_file()
    assert (p.path / SNAPS / "test_b2.graphir").is_file()
    assert amber.read_text() == amber_text  # the unused amber entry is syrupy's business


def test_obsolete_cleanup_serial_exit_status(graphir_project: pytest.Pytester) -> None:
    """Serially: after deleting the only unused snapshot, ``--graphir-update`` exits 0,
    and the next plain run has nothing unused."""
    p = graphir_project
    p.makepyfile(test_models=TEST_MODELS)
    run(p, "--graphir-update").assert_outcomes(passed=2)
    p.makepyfile(test_models=TEST_MODELS.replace("def test_b(", "def test_c("))
    plain = run(p)
    assert plain.ret == 1  # syrupy: 1 snapshot unused
    updated = run(p, "--graphir-update")
    assert updated.ret == 0, updated.stdout.str()
    assert not (p.path / SNAPS / "test_b.graphir").exists()
    assert sorted(f.name for f in (p.path / SNAPS).iterdir()) == [
        "test_a.graphir",
        "test_c.graphir",
    ]
    assert run(p).ret == 0
