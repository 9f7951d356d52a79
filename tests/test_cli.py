"""Tests of the ``graphir`` command: show, diff (each exit status), html, git
revision specs and the git external diff driver in a real repository."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import float_out

from pytest_graphir.cli import main, plan_line
from pytest_graphir.compare.message import human_bytes
from pytest_graphir.parallel import run_ranks
from pytest_graphir.serialize import dumps


def _doc(act: str = "relu", mean: float = 0.5) -> dict[str, Any]:
    """A small document: module ``blk`` (params 12) running one op, output stats."""
    out = float_out([2, 4], mean=mean)
    return {
        "meta": {"model": "Tiny", "args": ["x"], "kwargs": [], "training": False},
        "inputs": {"x": float_out([2, 4], mean=0.0, min=-2.0, max=2.0)},
        "nodes": {
            "blk": {
                "module": "Block",
                "args": ["$x"],
                "params": 12,
                "out": [{"ref": f"$blk/{act}#0", "shape": [2, 4], "dtype": "float32"}],
            },
            f"blk/{act}#0": {"op": act, "args": ["$x"], "out": [out]},
            "blk.inner": {
                "module": "Identity",
                "args": [f"$blk/{act}#0"],
                "out": [{"ref": f"$blk/{act}#0", "shape": [2, 4], "dtype": "float32"}],
            },
        },
        "outputs": {"output": {"ref": f"$blk/{act}#0", "shape": [2, 4], "dtype": "float32"}},
    }


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(dumps(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize("value", ["inf", "1e999", "nan", "-1", "loose", "1e300", "1.5"])
def test_a_tolerance_flag_that_would_pass_everything_is_refused(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--rtol`` / ``--atol`` take what the ini options take: a number from 0 to 1
    (``1e300`` would pass every drift); anything else is a usage error naming the
    flag and the range."""
    a = _write(tmp_path / "a.graphir", _doc())
    drift = _write(tmp_path / "drift.graphir", _doc(mean=0.6))
    for flag in ("--rtol", "--atol"):
        with pytest.raises(SystemExit) as exit_info:
            main(["diff", str(a), str(drift), flag, value])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {flag}: '{value}': expected a number from 0 to 1\n" in err


def test_diff_exit_statuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """0 equal (drift inside the tolerance), 1 different, 2 bad file with file:line."""
    a = _write(tmp_path / "a.graphir", _doc())
    same = _write(tmp_path / "same.graphir", _doc(mean=0.5001))
    other = _write(tmp_path / "b.graphir", _doc(act="gelu"))
    assert main(["diff", str(a), str(same)]) == 0
    assert "no differences" in capsys.readouterr().out
    assert main(["diff", str(a), str(other)]) == 1
    out = capsys.readouterr().out
    assert "graphir: 1 added, 1 removed (rtol=0.001, atol=1e-05)" in out
    assert (
        "  added: blk/gelu#0 (op gelu), read in place of blk/relu#0 by 3 nodes: "
        "blk, blk.inner, outputs.output"
    ) in out
    assert "\x1b[" not in out  # not a terminal: no colour
    # tolerance flags: a drift of 0.1 fails by default and passes with --atol 0.2
    drift = _write(tmp_path / "drift.graphir", _doc(mean=0.6))
    assert main(["diff", str(a), str(drift)]) == 1
    assert "(tolerance 0.00301)" in capsys.readouterr().out
    assert main(["diff", str(a), str(drift), "--atol", "0.2"]) == 0
    capsys.readouterr()
    bad = tmp_path / "bad.graphir"
    bad.write_text(dumps(_doc()).replace("  blk.inner:", "  blk.inner: {module: [", 1))
    assert main(["diff", str(a), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"graphir: {bad}:"), err
    line = int(err.split(":")[2])  # where YAML noticed the unclosed bracket
    broken = next(
        i for i, x in enumerate(bad.read_text().splitlines(), 1) if "[" in x and "blk.inner" in x
    )
    assert line in (broken, broken + 1), err
    assert main(["diff", str(a), str(tmp_path / "missing.graphir")]) == 2
    assert "missing.graphir: no such file" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["show", "diff"])
def test_a_snapshot_that_is_not_utf8_is_a_bad_file(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bytes that are not UTF-8 exit 2 naming the file and line, not a traceback."""
    a = _write(tmp_path / "a.graphir", _doc())
    bad = tmp_path / "latin1.graphir"
    text = dumps(_doc()).splitlines(keepends=True)
    bad.write_bytes("".join(text[:3]).encode() + b"# caf\xe9\n" + "".join(text[3:]).encode())
    argv = [command, str(bad)] if command == "show" else [command, str(a), str(bad)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"graphir: {bad}:4: "), err
    assert "UTF-8" in err and "Traceback" not in err, err


def test_diff_is_complete_unless_max_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """All changes by default (no 30-line cap), ``--max-lines`` cuts and says how many."""
    old, new = _doc(), _doc()
    for i in range(40):
        old["nodes"][f"blk/add#{i}"] = {"op": "add", "args": ["$x", i], "out": []}
        new["nodes"][f"blk/add#{i}"] = {"op": "add", "args": ["$x", i + 1], "out": []}
    a, b = _write(tmp_path / "a.graphir", old), _write(tmp_path / "b.graphir", new)
    assert main(["diff", str(a), str(b)]) == 1
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  changed:")]
    assert len(lines) == 40
    assert main(["diff", str(a), str(b), "--max-lines", "5"]) == 1
    out = capsys.readouterr().out
    assert out.count("  changed:") == 5
    assert "... and 35 more (35 changed); use --max-lines 0 to see them all" in out


def test_diff_max_lines_counts_the_lines_it_leaves_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Drift through four blocks, grouped one line per block: ``--max-lines 2`` leaves
    out 4 lines standing for 7 changes, and says 4 (the lines), then the 7."""

    def chain(mean: float) -> dict[str, Any]:
        doc = _doc()
        nodes, prev = {}, "$x"
        for b in range(4):
            out = [{"ref": f"$blk{b}/relu#1", "shape": [2, 4], "dtype": "float32"}]
            nodes[f"blk{b}"] = {"module": "Block", "args": [prev], "out": out}
            for i in range(2):
                nodes[f"blk{b}/relu#{i}"] = {
                    "op": "relu",
                    "args": [prev],
                    "out": [float_out([2, 4], mean=mean)],
                }
                prev = f"$blk{b}/relu#{i}"
        doc["nodes"] = nodes
        doc["outputs"] = {"output": {"ref": prev, "shape": [2, 4], "dtype": "float32"}}
        return doc

    a, b = _write(tmp_path / "a.graphir", chain(0.5)), _write(tmp_path / "b.graphir", chain(0.9))
    assert main(["diff", str(a), str(b)]) == 1
    every = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  ")]
    assert len(every) == 6  # the note, the origin, one line per block
    assert main(["diff", str(a), str(b), "--max-lines", "2"]) == 1
    shown = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  ")]
    assert shown[:2] == every[:2]
    assert shown[2] == ("  ... and 4 more (7 changes: 7 drift); use --max-lines 0 to see them all")


def test_colour_only_when_asked_or_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--color always`` colours by kind; ``NO_COLOR`` removes the colours."""
    a = _write(tmp_path / "a.graphir", _doc())
    b = _write(tmp_path / "b.graphir", _doc(act="gelu"))
    monkeypatch.delenv("NO_COLOR", raising=False)
    main(["--color", "always", "diff", str(a), str(b)])
    assert "\x1b[32m  added: blk/gelu#0" in capsys.readouterr().out
    monkeypatch.setenv("NO_COLOR", "1")
    main(["--color", "always", "diff", str(a), str(b)])
    out = capsys.readouterr().out
    assert "\x1b[32m" not in out and "\x1b[31m" not in out
    assert "  added: blk/gelu#0 (op gelu)" in out


def test_show_module_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Model, call, tree (indented child), op counts, output shapes, parameter counts
    (``# params``, apart from the ``params`` section's fingerprints), stats."""
    doc = _doc()
    doc["params"] = {"blk.weight": float_out([3, 4], mean=0.0, min=-1.0, max=1.0)}
    a = _write(tmp_path / "a.graphir", doc)
    assert main(["show", str(a), "--stats"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "call: Tiny(x: float32[2,4]) -> output: float32[2,4]"
    header = next(i for i, x in enumerate(out) if x.startswith("module "))
    assert "  # params  " in out[header]
    assert out[header].split() == [
        "module",
        "class",
        "ops",
        "output",
        "#",
        "params",
        "mean",
        "std",
        "min",
        "max",
    ]
    assert out[header + 1].split() == [
        "(model)",
        "Tiny",
        "1",
        "float32[2,4]",
        "12",
        "-",
        "-",
        "-",
        "-",
    ]
    assert out[header + 2].split() == [
        "blk",
        "Block",
        "1",
        "float32[2,4]",
        "12",
        "0.5",
        "1",
        "-3",
        "3",
    ]
    assert out[header + 2].startswith("  blk")
    assert out[header + 3].startswith("    blk.inner")  # nested one level deeper
    assert "2 module calls, 1 op call" in out  # a line of its own
    # one fingerprint of a [3, 4] weight: 12 values, as the module's count says
    assert "params section: 1 parameter fingerprint (shape, dtype, statistics), 12 values" in out
    assert not any(x.startswith("# params:") for x in out)  # the counts are recorded
    del doc["params"], doc["nodes"]["blk"]["params"]
    bare = _write(tmp_path / "bare.graphir", doc)
    assert main(["show", str(bare)]) == 0
    out_bare = capsys.readouterr().out
    assert "params section" not in out_bare
    lines = out_bare.splitlines()
    header = next(i for i, x in enumerate(lines) if x.startswith("module "))
    assert lines[header].split() == ["module", "class", "ops", "output"]  # no empty column
    assert lines[header + 2].split() == ["blk", "Block", "1", "float32[2,4]"]
    assert (
        "# params: per-module parameter counts, recorded in module-view snapshots "
        "(trace(view='modules'))"
    ) in out_bare
    assert main(["show", str(a), "--depth", "1"]) == 0
    out2 = capsys.readouterr().out
    assert "blk.inner" not in out2 and "(1 module call deeper than depth 1 not shown)" in out2


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e",
        "GIT_PAGER": "cat",
        "NO_COLOR": "1",
    }
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


@needs_git
def test_git_revision_spec_and_diff_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``graphir diff HEAD~1:path path`` reads git history; the documented diff driver
    (``*.graphir diff=graphir``, ``diff.graphir.command``) shows the semantic diff in
    ``git diff`` and ``git log -p --ext-diff``."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".gitattributes").write_text("*.graphir diff=graphir\n")
    command = f"{sys.executable} -m pytest_graphir.cli"
    _git(repo, "config", "diff.graphir.command", command)
    snap = _write(repo / "m.graphir", _doc())
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "first")
    _write(snap, _doc(act="gelu"))
    _git(repo, "commit", "-qam", "gelu")

    monkeypatch.chdir(repo)
    assert main(["diff", "HEAD~1:m.graphir", "m.graphir"]) == 1
    assert "  added: blk/gelu#0 (op gelu)" in capsys.readouterr().out
    assert main(["diff", "HEAD~5:m.graphir", "m.graphir"]) == 2
    assert "HEAD~5:m.graphir: `git show HEAD~5:m.graphir` failed" in capsys.readouterr().err

    shown = _git(repo, "diff", "HEAD~1", "HEAD")
    assert "graphir diff a/m.graphir b/m.graphir" in shown
    assert "  removed: blk/relu#0 (op relu)" in shown
    assert "@@" not in shown  # no line diff
    log = _git(repo, "log", "-p", "--ext-diff")
    assert "  added: blk/gelu#0 (op gelu)" in log
    assert "new snapshot: Tiny, 3 nodes (1 ops)" in log  # the first commit added it


def test_console_script_exit_statuses(pytester: pytest.Pytester) -> None:
    """The installed ``graphir`` script (``[project.scripts]``) exits 0, 1 and 2."""
    script = Path(sys.executable).with_name("graphir")
    if not script.exists():
        pytest.skip("graphir console script not installed (pip install -e .)")
    a = _write(pytester.path / "a.graphir", _doc())
    b = _write(pytester.path / "b.graphir", _doc(act="gelu"))
    assert pytester.run(script, "diff", a, a).ret == 0
    differ = pytester.run(script, "diff", a, b)
    assert differ.ret == 1
    differ.stdout.fnmatch_lines(["*removed: blk/relu#0 (op relu)"])
    bad = pytester.run(script, "diff", a, pytester.path / "nope.graphir")
    assert bad.ret == 2
    bad.stderr.fnmatch_lines(["graphir: *nope.graphir: no such file*"])


def test_html_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``graphir html OLD NEW -o out.html`` (``graphir diff``'s order) writes one
    self-contained page with the change; one FILE draws that snapshot alone."""
    from report_helpers import embedded_data

    a = _write(tmp_path / "a.graphir", _doc())
    b = _write(tmp_path / "b.graphir", _doc(act="gelu"))
    out = tmp_path / "out" / "r.html"
    assert main(["html", str(a), str(b), "-o", str(out)]) == 0
    assert f"graphir: wrote {out}" in capsys.readouterr().out
    page = out.read_text()
    assert "<script src=" not in page  # assets inlined
    data = embedded_data(page)
    status = {it[0]: it[4] for it in data["items"]}
    assert (status["blk/gelu#0"], status["blk/relu#0"]) == ("added", "removed")
    assert main(["html", str(a), "-o", str(tmp_path / "alone.html")]) == 0
    alone = embedded_data((tmp_path / "alone.html").read_text())
    assert "blk/relu#0" in {it[0] for it in alone["items"]} and not alone["changes"]
    assert main(["html", str(a), str(b), str(a), "-o", str(out)]) == 2
    assert main(["html", str(tmp_path / "nope.graphir"), "-o", str(out)]) == 2


def test_seven_arguments_are_git_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``diff.graphir.command = graphir`` (no subcommand) works: git's 7 arguments."""
    a = _write(tmp_path / "a.graphir", _doc())
    b = _write(tmp_path / "b.graphir", copy.deepcopy(_doc(act="gelu")))
    assert main(["m.graphir", str(a), "0" * 40, "100644", str(b), "1" * 40, "100644"]) == 0
    out = capsys.readouterr().out
    assert "graphir diff a/m.graphir b/m.graphir" in out and "added: blk/gelu#0" in out
    bad = tmp_path / "bad.graphir"
    bad.write_text("not a snapshot\n")
    assert main(["git-diff", "m.graphir", str(a), "0", "100644", str(bad), "1", "100644"]) == 0
    out = capsys.readouterr().out
    assert "showing a line diff" in out and "+not a snapshot" in out


def _tp_snapshot(rank: int, world: int) -> str:
    """The snapshot text of a traced tensor-parallel MLP (forward and backward) on
    this rank: fc0 plain, fc1 column-wise on a batch-sharded input (an all-gather
    forward, a reduce-scatter backward), fc2 row-wise, fc3 column-wise, fc4 row-wise
    (an all-reduce each forward, fc3's input gradient all-reduced backward)."""
    import torch
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    from pytest_graphir import trace

    model = nn.Sequential()
    for i, (a, b) in enumerate([(8, 8), (8, 16), (16, 8), (8, 16), (16, 8)]):
        model.add_module(f"fc{i}", nn.Linear(a, b))
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    plan = {
        "fc1": ColwiseParallel(input_layouts=Shard(0)),
        "fc2": RowwiseParallel(),
        "fc3": ColwiseParallel(),
        "fc4": RowwiseParallel(),
    }
    parallelize_module(model, mesh, plan)
    return dumps(trace(model, torch.randn(12, 8), backward=True))


def test_show_prints_the_plan_and_the_communication_table_of_a_parallel_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A TP model's snapshot (threaded ranks): one plan line per module path, and per
    module, phase, op and group, in the order each first fires, the calls and bytes
    the snapshot's own collective entries add up to (the forward's op nodes by their
    scope, the root's as ``(root)``; the ``collectives`` section by its ``module``)."""
    import re

    from pytest_graphir.serialize import loads

    text = run_ranks(_tp_snapshot, world_size=2, timeout=60)[0]
    doc = loads(text)
    path = tmp_path / "tp.graphir"
    path.write_text(text, encoding="utf-8")
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    plan = lines.index("plan: 4 modules")
    assert lines[plan + 1 : plan + 5] == [
        "  fc1  ColwiseParallel(input_layouts=[S(0)]); mesh tp: weight S(0), bias S(0)",
        "  fc2  RowwiseParallel; mesh tp: weight S(1), bias R",
        "  fc3  ColwiseParallel; mesh tp: weight S(0), bias S(0)",
        "  fc4  RowwiseParallel; mesh tp: weight S(1), bias R",
    ]
    totals: dict[tuple[str, str, str, str], list[int]] = {}
    forward = [
        (name.rpartition("/")[0] or "(root)", "forward", n["op"], n["kwargs"])
        for name, n in doc["nodes"].items()
        if "group_size" in n.get("kwargs", {})
    ]
    backward = [
        (e.get("module", "(root)"), e["phase"], e["op"], e) for e in doc["collectives"].values()
    ]
    for module, phase, op, attrs in forward + backward:
        total = totals.setdefault((module, phase, op, attrs["group"]), [0, 0])
        total[0] += 1
        total[1] += attrs["bytes"]
    # 12 rows a rank, 24 gathered: each collective moves a float32 [24, 8], 768 bytes;
    # fc1's input is gathered in its scope; fc2's and fc4's RowwiseParallel output
    # hooks reduce in theirs (after the global hook closed it); the backward runs
    # outside the modules: at the root
    assert totals == {
        ("fc1", "forward", "all_gather", "tp"): [1, 768],
        ("fc2", "forward", "all_reduce", "tp"): [1, 768],
        ("fc4", "forward", "all_reduce", "tp"): [1, 768],
        ("(root)", "backward", "all_reduce", "tp"): [1, 768],
        ("(root)", "backward", "reduce_scatter", "tp"): [1, 768],
    }
    units = {768: "768 B", 1536: "1.5 KiB", 768 * 5: "3.8 KiB"}
    assert f"collectives: 5 calls, {units[768 * 5]}" in lines
    head = lines.index(f"collectives: 5 calls, {units[768 * 5]}") + 1
    assert lines[head].split() == ["module", "phase", "op", "group", "calls", "bytes"]
    rows = lines[head + 1 :]
    assert len(rows) == len(totals)
    for row, ((module, phase, op, group), (calls, size)) in zip(rows, totals.items(), strict=True):
        pattern = rf"  {re.escape(module)} +{phase} +{op} +{group} +{calls}  +{units[size]}"
        assert re.fullmatch(pattern, row), row


def test_diff_lists_the_communication_rows_that_differ_under_the_collectives_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``graphir diff`` shows what the failure message shows: under the
    ``collectives`` line, the per-module rows that differ, the snapshot's then
    this run's."""
    doc = _doc()
    kwargs = {"group": "tp", "group_size": 2, "bytes": 64, "phase": "forward"}
    doc["nodes"]["blk/all_reduce#0"] = {"op": "all_reduce", "args": [], "kwargs": kwargs}
    bigger = copy.deepcopy(doc)
    bigger["nodes"]["blk/all_reduce#0"]["kwargs"]["bytes"] = 2048
    a, b = _write(tmp_path / "a.graphir", doc), _write(tmp_path / "b.graphir", bigger)
    assert main(["diff", str(a), str(b)]) == 1
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  changed: collectives "))
    assert lines[at + 1 : at + 4] == [
        "      module  phase    op          group  calls  bytes",
        "    - blk     forward  all_reduce  tp         1   64 B",
        "    + blk     forward  all_reduce  tp         1  2 KiB",
    ]


def test_show_of_a_model_that_is_not_parallel_has_no_plan_or_collectives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No ``plan`` and no ``collectives``: neither part is printed; an empty
    ``collectives`` section (a distributed trace that issued none) reads ``none``."""
    a = _write(tmp_path / "a.graphir", _doc())
    assert main(["show", str(a)]) == 0
    out = capsys.readouterr().out
    assert "plan:" not in out and "collectives:" not in out
    b = _write(tmp_path / "b.graphir", {**_doc(), "collectives": {}})
    assert main(["show", str(b)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "collectives: none"


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (3 * 1024**2, "3 MiB"),
        (3 * 1024**3 // 2, "1.5 GiB"),
    ],
)
def test_bytes_are_shown_in_binary_units(count: int, shown: str) -> None:
    assert human_bytes(count) == shown


def test_plan_lines_of_fsdp_units_wrappers_and_2d_meshes() -> None:
    """FSDP2 units, wrappers (entries as an FSDP2 + activation-checkpointing trace
    writes them), a 2-D mesh's placements, several styles and a key show does not
    know yet, each on its module's line."""
    assert plan_line({"fsdp": {"reshard_after_forward": False}}) == (
        "FSDP unit (reshard_after_forward=false)"
    )
    fsdp_ac = {
        "mesh": ["dp"],
        "params": {"weight": ["S(0)"], "bias": ["S(0)"]},
        "fsdp": {"reshard_after_forward": True, "param_dtype": "bfloat16"},
        "wrapper": "CheckpointWrapper",
    }
    assert plan_line(fsdp_ac) == (
        "mesh dp: weight S(0), bias S(0); "
        "FSDP unit (reshard_after_forward=true, param_dtype=bfloat16); wrapper CheckpointWrapper"
    )
    two_d = {
        "style": ["ColwiseParallel", "SequenceParallel"],
        "mesh": ["dp", "tp"],
        "params": {"weight": ["S(0)", "S(0)"], "bias": ["S(0)", "R"]},
        "pipeline": 1,
    }
    assert plan_line(two_d) == (
        "ColwiseParallel + SequenceParallel; mesh (dp, tp): weight (S(0), S(0)), "
        "bias (S(0), R); pipeline=1"
    )
    several = {  # PrepareModuleInputOutput registers two styles, each with its fields
        "style": ["PrepareModuleInput", "PrepareModuleOutput"],
        "PrepareModuleInput": {"input_layouts": ["S(0)"]},
        "PrepareModuleOutput": {"output_layouts": ["R"], "use_local_output": True},
    }
    assert plan_line(several) == (
        "PrepareModuleInput(input_layouts=[S(0)]) + "
        "PrepareModuleOutput(output_layouts=[R], use_local_output=true)"
    )
