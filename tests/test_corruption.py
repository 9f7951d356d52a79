"""A reproducible corruption campaign against the snapshot read/compare path (issue 12).

Several hundred corrupted versions of a valid snapshot (generated with a fixed seed)
go through what a plain run does (``GraphIRExtension.read_snapshot_data_from_location``,
``matches``, ``diff_lines``) and then through what ``--graphir-update`` does
(``write_snapshot_collection``). For every case: the outcome (loads fine, a
comparison failure, or a clean error), the file path and, for format errors, the
line in the message; no traceback, no raw control character, no raw file text;
bounded time; the plain path leaves the file byte-identical; the update repairs it.
A handful of end-to-end ``pytester`` runs cover each class of corruption through
pytest itself.
"""

from __future__ import annotations

import os
import random
import re
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from syrupy.data import Snapshot, SnapshotCollection
from workflow import run

from pytest_graphir.extension.files import SnapshotLocationError
from pytest_graphir.extension.syrupy_extension import GraphIRExtension, GraphIRSettings
from pytest_graphir.serialize import HEADER, dumps

ROOT = Path(__file__).resolve().parent.parent
CANARY = "AWS_SECRET_ACCESS_KEY=canary-7f3a9c"
Case = tuple[str, str, Any]  # (name, expected: ok | error | any, bytes or a setup callable)


@pytest.fixture(scope="module")
def valid() -> str:
    """A real snapshot: the tiny transformer of fixtures/models.py (43 lines)."""
    sys.path.insert(0, str(ROOT / "fixtures"))
    import models
    import torch

    from pytest_graphir import trace

    torch.manual_seed(0)
    model, inputs = models.tiny_transformer()
    return dumps(trace(model, *inputs))


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _cases(valid: str) -> Iterator[Case]:
    data = valid.encode()
    lines = valid.splitlines(keepends=True)
    n = len(lines)
    rng = random.Random(12)
    node = next(i for i, line in enumerate(lines) if line.startswith("  embed/embedding#0:"))

    def with_line(i: int, text: str) -> bytes:
        return "".join([*lines[:i], text, *lines[i + 1 :]]).encode()

    # truncations: at every line boundary, in the middle of every line, random bytes
    for i in range(1, n):
        yield f"truncate-line-{i}", "error", "".join(lines[:i]).encode()
    for i in range(n):
        cut = sum(map(len, lines[:i])) + len(lines[i]) // 2
        yield f"truncate-mid-{i}", "error", data[:cut]
    for k in range(30):
        yield f"truncate-byte-{k}", "error", data[: rng.randrange(1, len(data) - 1)]
    # flipped bytes (any outcome: a flipped digit is a drift, a flipped brace an error)
    for k in range(60):
        pos = rng.randrange(len(data))
        flipped = bytearray(data)
        flipped[pos] ^= 1 << rng.randrange(8)
        yield f"flip-{k}-at-{pos}", "any", bytes(flipped)
    # deleted, duplicated, swapped lines
    for i in range(n):
        yield f"delete-line-{i + 1}", "any", "".join(lines[:i] + lines[i + 1 :]).encode()
    for i in range(2, n - 1):
        yield f"duplicate-line-{i + 1}", "any", "".join(lines[: i + 1] + lines[i:]).encode()
    for i in range(n - 1):
        swapped = list(lines)
        swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
        yield f"swap-lines-{i + 1}", "any", "".join(swapped).encode()
    # not UTF-8
    for k, bad in enumerate(
        [
            b"\xff",
            b"\xfe",
            b"\x80",
            b"\xc3",
            b"\xe2\x82",
            b"\xed\xa0\x80",
            b"\xf8\x88\x80\x80\x80",
            b"\xc0\xaf",
        ]
    ):
        for where in (0, 3, node, n - 1):
            pos = sum(map(len, lines[:where])) + min(5, len(lines[where]) - 1)
            yield f"non-utf8-{k}-line-{where + 1}", "error", data[:pos] + bad + data[pos:]
    yield "latin-1-name", "error", valid.replace("embed", "embéd").encode("latin-1")
    yield "utf-16", "error", valid.encode("utf-16")
    for k in range(3):
        yield f"random-bytes-{k}", "error", random.Random(k).randbytes(4096)
    # encodings and line endings that must keep loading
    yield "bom", "ok", b"\xef\xbb\xbf" + data
    yield "crlf", "ok", valid.replace("\n", "\r\n").encode()
    yield "bom-crlf", "ok", b"\xef\xbb\xbf" + valid.replace("\n", "\r\n").encode()
    yield (
        "mixed-crlf",
        "ok",
        "".join(
            line.replace("\n", "\r\n") if i % 2 else line for i, line in enumerate(lines)
        ).encode(),
    )
    yield "cr-only", "error", valid.replace("\n", "\r").encode()
    yield "comment-edited", "ok", with_line(1, "# edited by hand\n")
    # empty and near-empty
    yield "empty", "error", b""
    yield "whitespace", "error", b"   \n\n"
    yield "header-only", "error", lines[0].encode()
    yield "header-and-end", "error", (lines[0] + lines[-1]).encode()
    # wrong and future headers
    for k, header in enumerate(
        [
            "# graphir-format: 3",
            "# graphir-format: 999",
            "# graphir-format: 0",
            "# graphir-format: 1.0",
            "# graphir-format:",
            "# GRAPHIR-FORMAT: 1",
            "graphir-format: 1",
            "# graphir-format: \x1b[31m1",
            "%YAML 1.2",
        ]
    ):
        yield f"header-{k}", "error", with_line(0, header + "\n")
    # YAML tags (never executed)
    for k, tag in enumerate(
        [
            "!!python/object/apply:os.system ['touch PWNED']",
            "!!python/name:os.system",
            "!!python/object:os.PathLike {}",
            "!!binary aGVsbG8=",
            "!!set {a}",
            "!!str x",
            "!custom x",
            "!<tag:yaml.org,2002:python/none> x",
        ]
    ):
        yield f"tag-{k}-node", "error", with_line(node, f"  evil: {tag}\n")
        yield f"tag-{k}-meta", "error", with_line(2, f"meta: {tag}\n")
    # duplicate keys
    yield "duplicate-node", "error", "".join(lines[: node + 1] + lines[node:]).encode()
    yield "duplicate-section", "error", "".join([*lines[:-1], "meta: {}\n", lines[-1]]).encode()
    yield (
        "duplicate-inner-key",
        "error",
        with_line(
            node, lines[node].replace('{"op": "embedding",', '{"op": "embedding", "op": "relu",')
        ),
    )
    # undefined references and odd values
    yield "undefined-ref", "any", valid.replace("$embed/embedding#0", "$nowhere#9").encode()
    yield "undefined-input-ref", "any", valid.replace('["$ids"]', '["$not_an_input"]').encode()
    for k, value in enumerate(
        [
            ".nan",
            ".inf",
            "-.inf",
            "nan",
            "'NaN'",
            "1e999",
            "'inf'",
            "null",
            "[]",
            "{}",
            "true",
            "'0.5'",
            "0x10",
            "1_000",
        ]
    ):
        yield f"stat-{k}", "any", valid.replace('"mean": -0.058964', f'"mean": {value}', 1).encode()
        yield (
            f"shape-{k}",
            "any",
            valid.replace('"shape": [1, 6, 16]', f'"shape": {value}', 1).encode(),
        )
    # integers beyond a float's range in every statistic (an OverflowError in the comparison)
    for key in ("nan", "inf", "mean", "std", "min", "max"):
        for digits in (309, 4000):
            yield (
                f"long-int-{key}-{digits}",
                "error",
                re.sub(f'"{key}": [-0-9.e]+', f'"{key}": {"7" * digits}', valid, count=1).encode(),
            )
    # deep nesting (10,000 levels), in flow and block style
    for k, (where, deep) in enumerate(
        [
            (node, f"  deep: {{op: x, args: {_nested(10_000)}, out: []}}\n"),
            (2, f"meta: {_nested(10_000)}\n"),
            (2, "meta: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n"),
            (node, f"  deep: {{op: x, args: {_nested(65)}, out: []}}\n"),
            (node, "  deep:\n" + "".join(" " * (i + 4) + "- \n" for i in range(2000))),
            (2, "meta:\n" + "".join(" " * (i + 2) + f"k{i}:\n" for i in range(3000))),
        ]
    ):
        yield f"deep-{k}", "error", with_line(where, deep)
    yield "deep-50-ok", "any", with_line(node, f"  deep: {{op: x, args: {_nested(50)}, out: []}}\n")
    # anchors and aliases: the billion laughs, an anchor alone, an undefined alias
    laughs = "".join(
        f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n"
        if i
        else "  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        for i in range(10)
    )
    yield "alias-bomb-meta", "error", with_line(2, "meta:\n" + laughs)
    yield (
        "alias-bomb-args",
        "error",
        with_line(
            node,
            f"  bomb: {{op: x, args: [&a [1, 2, 3, 4, 5, 6, 7, 8, 9], {', '.join(['*a'] * 9)}], "
            "out: []}\n" + lines[node],
        ),
    )
    yield "anchor-only", "error", with_line(node, lines[node].replace('{"op":', '&x {"op":', 1))
    yield "undefined-alias", "error", with_line(node, "  x: *nothing\n")
    # control characters and terminal escapes, raw in the file
    for k, char in enumerate(
        [
            "\x1b[31m",
            "\x00",
            "\x07",
            "\x08",
            "\x0b",
            "\x0c",
            "\x7f",
            "\x80",
            "\x90",
            "\x9f",
            "\x9b",
            "\ufffe",
        ]
    ):
        yield f"control-{k}-name", "error", valid.replace("mul#0", f"mul{char}#0", 1).encode()
        yield (
            f"control-{k}-meta",
            "error",
            with_line(2, lines[2].replace('"model":', f'"model{char}":')),
        )
    # size: a sparse 200 MB file is refused from its size alone, never read
    yield "oversize-200MB", "error", _sparse(200 * 2**20)
    yield "oversize-valid-lines", "error", _oversize_lines(lines, node)
    # not a regular file, symlinks
    yield "directory", "error", _directory
    yield "fifo", "error", _fifo
    yield "symlink-outside-canary", "error", _link_outside
    yield "symlink-dev-zero", "error", _link_to("/dev/zero")
    yield "symlink-dev-urandom", "error", _link_to("/dev/urandom")
    yield "symlink-proc-environ", "error", _link_to("/proc/self/environ")
    yield "symlink-dangling", "error", _link_to("missing.graphir", inside=True)
    yield "symlink-inside-repo", "ok", _link_inside


Setup = Callable[[Path, Path, str], None]


def _sparse(size: int) -> Setup:
    def setup(path: Path, root: Path, valid: str) -> None:
        with path.open("wb") as f:
            f.write(valid.encode())
            f.truncate(size)

    return setup


def _oversize_lines(lines: list[str], node: int) -> Setup:
    def setup(path: Path, root: Path, valid: str) -> None:
        body = "".join(lines[node].replace("embed/embedding#0", f"n{i}") for i in range(600))
        path.write_text("".join(lines[:node]) + body + "".join(lines[node:]))

    return setup


def _directory(path: Path, root: Path, valid: str) -> None:
    path.mkdir()
    (path / "keep.txt").write_text("mine")


def _fifo(path: Path, root: Path, valid: str) -> None:
    os.mkfifo(path)


def _link_outside(path: Path, root: Path, valid: str) -> None:
    secret = root.parent / "outside-secret.graphir"
    secret.write_text(valid.replace("# pytest-graphir", f"# {CANARY}"))
    path.symlink_to(secret)


def _link_to(target: str, inside: bool = False) -> Setup:
    def setup(path: Path, root: Path, valid: str) -> None:
        path.symlink_to(target if not inside else path.parent / target)

    return setup


def _link_inside(path: Path, root: Path, valid: str) -> None:
    real = root / "shared.graphir"
    real.write_text(valid)
    path.symlink_to(real)


def _check_case(
    name: str,
    expected: str,
    content: Any,
    valid: str,
    base: Path,
    ext: GraphIRExtension | None = None,
) -> str:
    """Run one case through the plain path and the update path; return its outcome."""
    root = base / name / "repo"
    folder = root / "__snapshots__" / "test_models"
    folder.mkdir(parents=True)
    path = folder / "test_model.graphir"
    if callable(content):
        content(path, root, valid)
    else:
        path.write_bytes(content)
    before = (
        path.read_bytes()
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 2**20
        else None
    )

    limit = 64 * 2**10 if name == "oversize-valid-lines" else 32 * 2**20
    ext = ext or GraphIRExtension()
    ext.settings = GraphIRSettings(max_snapshot_bytes=limit, rootdir=root)
    start = time.perf_counter()
    read = ext.read_snapshot_data_from_location(
        snapshot_location=str(path), snapshot_name="test_model", session_id="0"
    )
    matched = read is not None and ext.matches(serialized_data=valid, snapshot_data=read)
    message = [] if matched else list(ext.diff_lines(valid, read or ""))
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"{name}: {elapsed:.2f} s"

    text = "\n".join(message)
    assert "Traceback" not in text and "site-packages" not in text, (name, text)
    assert CANARY not in text and "\x00" not in text, (name, text)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]", text), (name, text)
    if before is not None:
        assert path.read_bytes() == before, f"{name}: a plain run modified the file"
    if matched:
        outcome = "ok"
    elif message[0].startswith(("graphir: invalid snapshot", "graphir: cannot use snapshot")):
        outcome = "error"
        assert str(path) in message[0] or "test_models/test_model.graphir" in message[0], text
        if message[0].startswith("graphir: invalid snapshot"):
            assert re.search(r"test_model\.graphir:\d+: ", message[0]), (name, text)
        assert message[1].startswith("  fix: "), (name, text)
    else:
        outcome = "differs"
        assert "test_models/test_model.graphir" in message[-1], (name, text)
    if expected != "any":
        assert outcome == expected, (name, outcome, text)

    # --graphir-update: atomic replace from the current model, then a match
    collection = SnapshotCollection(location=str(path))
    collection.add(Snapshot(name="test_model", data=valid))
    if name == "directory":
        with pytest.raises(SnapshotLocationError, match="never deletes a directory"):
            GraphIRExtension.write_snapshot_collection(snapshot_collection=collection)
        assert (path / "keep.txt").read_text() == "mine"
        return outcome
    if not matched:
        GraphIRExtension.write_snapshot_collection(snapshot_collection=collection)
        assert path.is_file() and not path.is_symlink()
        assert sorted(p.name for p in folder.iterdir()) == ["test_model.graphir"]
    again = ext.read_snapshot_data_from_location(
        snapshot_location=str(path), snapshot_name="test_model", session_id="0"
    )
    assert ext.matches(serialized_data=valid, snapshot_data=again), name
    if name == "symlink-outside-canary":
        assert CANARY in (root.parent / "outside-secret.graphir").read_text()  # untouched
    return outcome


def test_corruption_campaign(valid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every generated case: the expected outcome, file and line, bounded, repaired."""
    monkeypatch.chdir(tmp_path)
    cases = list(_cases(valid))
    assert len(cases) >= 400
    assert len({name for name, _, _ in cases}) == len(cases)
    outcomes: dict[str, int] = {}
    ext = GraphIRExtension()
    for name, expected, content in cases:
        outcome = _check_case(name, expected, content, valid, tmp_path, ext)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("error", 0) >= 300, outcomes
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize(
    "name",
    [
        "alias-bomb-meta",
        "alias-bomb-args",
        "deep-0",
        "deep-2",
        "deep-4",
        "oversize-200MB",
        "symlink-dev-zero",
    ],
)
def test_hostile_cases_bounded_in_memory(valid: str, tmp_path: Path, name: str) -> None:
    """The alias bombs, deep nesting and huge files are refused within a few MB."""
    cases = {case[0]: case for case in _cases(valid)}
    _, expected, content = cases[name]
    tracemalloc.start()
    try:
        outcome = _check_case(name, expected, content, valid, tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert outcome == "error"
    assert peak < 16 * 2**20, f"{name}: peak {peak / 2**20:.1f} MiB"


E2E_TEST = """
import collections
import os

import models
import pytest
import torch
from pytest_graphir import trace

CASES = %r


@pytest.mark.parametrize("case", CASES)
def test_case(case, graphir_snapshot):
    model, inputs = models.mlp()
    if case == "escape" and os.environ.get("EVIL"):
        model.act = torch.nn.Sequential(collections.OrderedDict(
            [("evil\\x1b[31m", torch.nn.Tanh())]))
    assert trace(model, *inputs) == graphir_snapshot
"""

# case -> (how the stored file is corrupted, the message's regex in a plain run or None)
E2E: dict[str, tuple[Callable[[Path, Path], object], str | None]] = {}


def _e2e(name: str, message: str | None) -> Callable[[Callable[[Path, Path], object]], Any]:
    def register(corrupt: Callable[[Path, Path], object]) -> Any:
        E2E[name] = (corrupt, message)
        return corrupt

    return register


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


_e2e("truncate", r":\d+: truncated")(
    lambda p, root: p.write_text("".join(p.read_text().splitlines(True)[:-2]))
)
_e2e("non_utf8", r":8: not UTF-8 text: byte 0xff")(
    lambda p, root: p.write_bytes(p.read_bytes().replace(b"fc1/linear#0:", b"fc1/lin\xffear#0:"))
)
_e2e("random_bytes", r":1: not UTF-8 text")(
    lambda p, root: p.write_bytes(random.Random(3).randbytes(2048))
)
_e2e("deep", r":3: nested deeper than 64 levels")(
    lambda p, root: _edit(p, "meta: {", "meta: " + _nested(10_000) + "\nx: {")
)


@_e2e("alias_bomb", r":1: written in graphir format version 1 \(YAML\).*`graphir migrate")
def _alias_bomb(p: Path, root: Path) -> None:
    """A format-1 file (YAML, no longer read: `graphir migrate` converts one) with an
    alias bomb: refused from its header, before PyYAML builds anything."""
    _edit(p, HEADER, "# graphir-format: 1")
    _edit(p, "meta: {", "meta: {bomb: [&a [1, 2, 3], " + ", ".join(["*a"] * 9) + "], ")


_e2e(
    "oversize",
    r": the file is 209,715,200 bytes, over the [\d,]+-byte limit on snapshots "
    r"\(the ini option graphir_max_snapshot_bytes\)",
)(lambda p, root: os.truncate(p, 200 * 2**20))
_e2e("control", r":8: the control character U\+001B")(
    lambda p, root: _edit(p, "fc1/linear#0:", "fc1/lin\x1b[31mear#0:")
)


@_e2e("tag", r":1: written in graphir format version 1 \(YAML\)")
def _yaml_tag(p: Path, root: Path) -> None:
    """A format-1 file (YAML) with a Python object tag: refused, never executed."""
    _edit(p, HEADER, "# graphir-format: 1")
    _edit(p, "meta: {", "meta: !!python/object/apply:os.system ['touch PWNED']\nx: {")


_e2e("duplicate_key", r":\d+: duplicate key 'fc1/linear#0'")(
    lambda p, root: p.write_text(
        "".join(
            (line * 2 if line.startswith("  fc1/linear#0:") else line)
            for line in p.read_text().splitlines(True)
        )
    )
)
_e2e("long_count", r":\d+: an integer of more than 308 digits")(
    lambda p, root: _edit(p, '"nan": 0', f'"nan": {"9" * 4000}')
)
_e2e("wrong_header", r":1: written in graphir format version 99")(
    lambda p, root: _edit(p, HEADER, "# graphir-format: 99")
)
_e2e("empty", r":1: the file is empty")(lambda p, root: p.write_bytes(b""))


@_e2e("symlink_canary", r": it is a symlink to .*outside the repository")
def _replace_by_outside_link(path: Path, root: Path) -> None:
    text = path.read_text()
    path.unlink()
    _link_outside(path, root, text)


@_e2e("dev_zero", r": it is a symlink to /dev/zero, outside the repository")
def _symlink_to_dev_zero(p: Path, root: Path) -> None:
    p.unlink()
    p.symlink_to("/dev/zero")


_e2e("drift_canary", r"graphir: 1 drift")(
    lambda p, root: p.write_text(
        re.sub(
            r'"mean": [-0-9.e]+',
            '"mean": 1000.0',
            p.read_text().replace("# pytest-graphir", f"# {CANARY}"),
            count=1,
        )
    )
)
_e2e("escape", r"added: act\.evil\\x1b\[31m \(module Tanh")(lambda p, root: None)
_e2e("bom", None)(lambda p, root: p.write_bytes(b"\xef\xbb\xbf" + p.read_bytes()))
_e2e("crlf", None)(lambda p, root: p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n")))


@_e2e("directory", r": a directory is there, not a snapshot file")
def _replace_with_directory(p: Path, root: Path) -> None:
    p.unlink()
    p.mkdir()
    (p / "keep.txt").write_text("mine")


def test_end_to_end_each_class(
    graphir_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through pytest: a plain run fails each corrupted snapshot with its file and line
    (no traceback, no raw text, escaped names), ``--graphir-update`` repairs all but
    the directory (never deleted), and the next plain run passes."""
    p = graphir_project
    p.makepyfile(test_models=E2E_TEST % list(E2E))
    run(p, "--graphir-update").assert_outcomes(passed=len(E2E))
    folder = p.path / "__snapshots__" / "test_models"
    for case, (corrupt, _) in E2E.items():
        corrupt(folder / f"test_case[{case}].graphir", p.path)
    before = {
        f.name: f.read_bytes()
        for f in folder.iterdir()
        if f.is_file() and not f.is_symlink() and f.stat().st_size < 2**20
    }
    monkeypatch.setenv("EVIL", "1")

    plain = run(p, "-l", "--snapshot-details")
    out = plain.stdout.str()
    failing = [case for case, (_, message) in E2E.items() if message is not None]
    plain.assert_outcomes(failed=len(failing), passed=len(E2E) - len(failing))
    for case, (_, message) in E2E.items():
        if message is not None:
            where = re.escape(f"test_case[{case}].graphir")
            assert re.search(where + message, out) or (
                re.search(message, out) and f"test_case[{case}].graphir" in out
            ), case
    assert "Traceback" not in out and "site-packages" not in out
    assert CANARY not in out and "PWNED" not in out, re.findall(".*(?:canary|PWNED).*", out)
    assert not [line for line in out.splitlines() if line.startswith("E ") and "\x1b" in line]
    assert "<graphir_snapshot __snapshots__/test_models/test_case[drift_canary].graphir>" in out
    assert not (p.path / "PWNED").exists()
    assert before == {f.name: f.read_bytes() for f in folder.iterdir() if f.name in before}

    update = run(p, "--graphir-update")
    update.assert_outcomes(passed=len(E2E) - 1, failed=1)
    update.stdout.fnmatch_lines(
        [
            "*graphir: cannot use snapshot *test_case?directory?.graphir: a directory is there*",
            "*fix: pytest-graphir never deletes a directory: move or remove it yourself*",
        ]
    )
    assert (folder / "test_case[directory].graphir" / "keep.txt").read_text() == "mine"
    assert "Traceback" not in update.stdout.str()
    assert CANARY in (p.path.parent / "outside-secret.graphir").read_text()  # not written

    again = run(p)
    again.assert_outcomes(passed=len(E2E) - 1, failed=1)
    for case in E2E:
        if case not in ("directory", "bom", "crlf"):  # loadable ones are left as they are
            path = folder / f"test_case[{case}].graphir"
            assert path.is_file() and not path.is_symlink(), case
            assert path.read_text().startswith(HEADER + "\n"), case
