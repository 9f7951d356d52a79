"""Tests of the ``.graphir`` text format: layout, determinism, round trip, safe loading."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import models
import pytest
import torch
from torch import nn

from pytest_graphir import trace
from pytest_graphir.compare import compare
from pytest_graphir.ir import FORMAT_VERSION, GraphIR
from pytest_graphir.serialize import (
    END,
    HEADER,
    MAX_DEPTH,
    SnapshotFormatError,
    decode,
    dumps,
    loads,
    upgrade,
)
from pytest_graphir.serialize.checks import MAX_DIGITS

ROOT = Path(__file__).resolve().parent.parent


class _Odd(nn.Module):
    """Ops whose arguments are awkward to write: device, generator, strings, -inf, slices."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.gen = torch.Generator().manual_seed(0)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        noise = torch.rand(4, generator=self.gen, device=x.device)
        h = torch.einsum("ij,jk->ik", self.lin(x), torch.eye(4)) + noise
        masked = h.masked_fill(h < 0, float("-inf"))
        return {"probs": masked[:, 1:].softmax(dim=-1), "first": h[..., 0]}


def _graph(seed: int = 0) -> GraphIR:
    torch.manual_seed(seed)
    model, inputs = models.tiny_transformer()
    return trace(model, *inputs, scale=2.0)


def _odd_graph() -> GraphIR:
    torch.manual_seed(0)
    return trace(_Odd(), torch.randn(3, 4))


# -- layout -----------------------------------------------------------------------------


def test_dumps_is_deterministic() -> None:
    """Two traces of the same seeded model give byte-identical text."""
    assert dumps(_graph()) == dumps(_graph())
    assert dumps(_odd_graph()) == dumps(_odd_graph())
    assert dumps(_graph(0)) != dumps(_graph(1))  # setup check: the text depends on the data


def test_layout_header_sections_one_node_per_line() -> None:
    """Header first, end line last; inputs, nodes, outputs, params in that order; a line
    per node and per parameter."""
    g = _graph()
    text = dumps(g)
    assert text.endswith("\n")
    lines = text.splitlines()
    assert lines[0] == f"# graphir-format: {FORMAT_VERSION}" == HEADER
    assert lines[-1] == END
    assert lines[2].startswith("meta: {")
    i_in, i_nodes, i_out = (lines.index(s) for s in ("inputs:", "nodes:", "outputs:"))
    assert 2 < i_in < i_nodes < i_out < len(lines) - 1
    node_lines = lines[i_nodes + 1 : i_out]
    assert len(node_lines) == len(g.nodes)
    for line, node in zip(node_lines, g.nodes, strict=True):
        assert line.startswith(f"  {node.name}: {{")
        assert line.endswith("}")
    assert [ln.split(":")[0].strip() for ln in lines[i_in + 1 : i_nodes]] == list(g.inputs)
    assert lines[-2].startswith("# provenance: {torch: ")  # where it was written: a comment
    i_params = lines.index("params:")  # then the parameters, one per line
    assert [ln.split(":")[0].strip() for ln in lines[i_out + 1 : i_params]] == list(g.outputs)
    assert [ln.split(":")[0].strip() for ln in lines[i_params + 1 : -2]] == list(
        g.sections["params"]
    )


def test_empty_sections_written_inline() -> None:
    """A model without inputs or nodes still gives a loadable document."""
    doc = {"meta": {"model": "M"}, "inputs": {}, "nodes": {}, "outputs": {"output": None}}
    text = dumps(doc)
    assert "inputs: {}" in text.splitlines()
    assert loads(text) == doc


def test_nothing_machine_specific_in_text() -> None:
    """No memory addresses, paths or timestamps, even for odd arguments (device, generator)."""
    for g in (_graph(), _odd_graph()):
        # where the snapshot was written is one comment line, never compared
        (text,) = (t for t in [dumps(g)] if "\n# provenance: " in t)
        text = "".join(
            ln for ln in text.splitlines(keepends=True) if not ln.startswith("# provenance: ")
        )
        assert "0x" not in text
        assert not re.search(r"\bat 0x|object at|<function|<bound", text)
        assert str(ROOT) not in text and str(Path.home()) not in text
        assert ".py" not in text
        assert "cpu" not in text  # devices are written as <device>
        assert not re.search(r"\d{4}-\d{2}-\d{2}|\d{2}:\d{2}:\d{2}", text)
    odd = dumps(_odd_graph())
    assert '"device": "<device>"' in odd
    assert '"generator": "<Generator>"' in odd


def test_stats_rounded_to_six_significant_digits() -> None:
    """Float statistics are written with 6 significant digits; counts and ints exactly."""
    doc: dict[str, Any] = {
        "meta": {"model": "M"},
        "inputs": {
            "x": {
                "shape": [3],
                "dtype": "float32",
                "mean": 0.123456789,
                "std": 98765.4321,
                "min": -1.23456789e-7,
                "max": 3.0,
                "nan": 0,
                "inf": 0,
            },
            "ids": {
                "shape": [2],
                "dtype": "int64",
                "min": -5,
                "max": 123456789,
                "sum": 12345678901,
            },
        },
        "nodes": {
            "n/relu#0": {
                "op": "relu",
                "args": ["$x", 0.123456789],
                "out": [
                    {
                        "shape": [3],
                        "dtype": "float32",
                        "mean": 2.718281828,
                        "std": 1.0,
                        "min": 0.0,
                        "max": 1234567.89,
                        "nan": 1,
                        "inf": 12,
                    }
                ],
            }
        },
        "outputs": {},
    }
    back = loads(dumps(doc))
    x = back["inputs"]["x"]
    assert x["mean"] == 0.123457
    assert x["std"] == 98765.4
    assert x["min"] == -1.23457e-7
    assert x["max"] == 3.0
    assert back["inputs"]["ids"] == doc["inputs"]["ids"]  # integer stats exact
    out = back["nodes"]["n/relu#0"]["out"][0]
    assert out["mean"] == 2.71828
    assert out["max"] == 1234570.0
    assert (out["nan"], out["inf"]) == (1, 12)
    # constant arguments are not statistics and keep their full value
    assert back["nodes"]["n/relu#0"]["args"] == ["$x", 0.123456789]


# -- round trip ---------------------------------------------------------------------------


def _assert_same_doc(loaded: Any, original: Any, path: str = "") -> None:
    """Equal, except floats may differ by 6-significant-digit rounding; NaN equals NaN."""
    if isinstance(original, float) and isinstance(loaded, float):
        if math.isnan(original):
            assert math.isnan(loaded), path
        else:
            assert math.isclose(loaded, original, rel_tol=5e-6), (path, loaded, original)
        return
    assert type(loaded) is type(original), (path, loaded, original)
    if isinstance(original, dict):
        assert list(loaded) == list(original), path
        for k in original:
            _assert_same_doc(loaded[k], original[k], f"{path}.{k}")
    elif isinstance(original, list):
        assert len(loaded) == len(original), path
        for i, (a, b) in enumerate(zip(loaded, original, strict=True)):
            _assert_same_doc(a, b, f"{path}[{i}]")
    else:
        assert loaded == original, (path, loaded, original)


def test_negative_zero_statistics_are_written_as_zero() -> None:
    """``min``/``max`` of a tensor holding both zeros is whichever one the reduction met
    first (lanes of the C extension, torch's vectorised and threaded ``amin``); the text
    writes ``0.0`` either way, so it does not depend on the way. A constant argument
    keeps its sign: that one is the model's."""

    class Zeros(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * -0.0

    graph = trace(Zeros(), torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    out = graph.node("mul#0").outputs[0]
    assert math.copysign(1.0, out.stats["min"]) == -1.0  # the case: all elements are -0.0
    text = dumps(graph)
    line = next(line for line in text.splitlines() if line.startswith("  mul#0:"))
    assert '"args": ["$x", -0.0]' in line
    assert '"min": 0.0' in line and '"max": 0.0' in line and '"mean": 0.0' in line
    assert '"min": -0.0' not in line and '"max": -0.0' not in line
    back = loads(text)["nodes"]["mul#0"]["out"][0]
    assert math.copysign(1.0, back["min"]) == 1.0


@pytest.mark.parametrize("make", [_graph, _odd_graph], ids=["transformer", "odd"])
def test_round_trip(make: Any) -> None:
    """loads(dumps(g)) gives g's document back (up to rounding), and dumps is a fixpoint."""
    g = make()
    text = dumps(g)
    back = loads(text)
    assert back.get("provenance") == g.provenance  # carried beside the document, never compared
    _assert_same_doc({k: v for k, v in back.items() if k != "provenance"}, g.to_data())
    assert dumps(back) == text  # a fixpoint, provenance comment included
    assert dumps(g.to_data()) == "".join(
        ln for ln in text.splitlines(keepends=True) if not ln.startswith("# provenance: ")
    )


def test_round_trip_awkward_strings_and_floats() -> None:
    """Keys and constants that YAML would reinterpret come back as the same strings."""
    doc = {
        "meta": {"model": "M", "note": "yes"},
        "inputs": {"on": 1.0, "null": "null", "a b: c": "#not a comment", "x.0": 2},
        "nodes": {
            "true/add#0": {
                "op": "add",
                "args": [
                    "$$literal",
                    "1.5",
                    "true",
                    "",
                    " lead",
                    float("inf"),
                    -float("inf"),
                    None,
                    True,
                ],
                "kwargs": {
                    "eq": "ij,jk->ik",
                    "s": "slice(None, 0, None)",
                    "yes": "no",
                    "hex": "0x10",
                    "exp": "1e5",
                    "tilde": "~",
                    "date": "2024-01-01",
                    "big": 1e20,
                    "tiny": -1e-20,
                },
                "out": [
                    {
                        "shape": [],
                        "dtype": "float32",
                        "mean": float("nan"),
                        "std": float("nan"),
                        "min": -float("inf"),
                        "max": float("inf"),
                        "nan": 1,
                        "inf": 2,
                    }
                ],
            },
        },
        "outputs": {"output": {"ref": "$true/add#0", "shape": [], "dtype": "float32"}},
    }
    back = loads(dumps(doc))
    _assert_same_doc(back, doc)


# -- loads rejects ------------------------------------------------------------------------


def _lines() -> list[str]:
    return dumps(_graph()).splitlines()


def _join(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def _v1_lines() -> list[str]:
    """The same snapshot as format 1 wrote it: each JSON value re-written as a YAML
    flow mapping by PyYAML (the tests of the YAML loader's guards and of reading old
    files)."""
    import json

    import yaml

    def flow(raw: str) -> str:
        text: str = yaml.safe_dump(
            json.loads(raw), default_flow_style=True, width=2**30, sort_keys=False
        )
        return text.removesuffix("...\n").rstrip("\n")

    out = []
    for ln in _lines():
        if ln.startswith("  - "):
            ln = "  - " + flow(ln[4:])
        elif ln.startswith("  ") or ln.startswith("meta: "):
            head, _, raw = ln.partition(": ")
            ln = f"{head}: {flow(raw)}"
        out.append(ln)
    out[0] = "# graphir-format: 1"
    return out


def test_format_1_files_are_refused_and_migrate_to_the_same_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A snapshot written before format 2 fails to load with the command that converts
    it; ``graphir migrate`` rewrites it as the current format writes the same document
    (mode kept), leaves a current file as it is, and stops at a file it cannot read,
    leaving it unchanged (exit 2, file and line named)."""
    from pytest_graphir.cli import main

    old, bad = tmp_path / "old.graphir", tmp_path / "bad.graphir"
    old.write_text(_join(_v1_lines()))
    old.chmod(0o640)
    with pytest.raises(SnapshotFormatError, match=r"version 1 .*`graphir migrate FILE`") as info:
        loads(old.read_text())
    assert info.value.line == 1
    assert main(["migrate", str(old)]) == 0
    assert old.read_text() == _join(_lines()) and old.stat().st_mode & 0o777 == 0o640
    assert main(["migrate", str(old)]) == 0 and old.read_text() == _join(_lines())
    bad.write_text(_join(_v1_lines()).replace("nodes:", "nodes: [", 1))
    assert main(["migrate", str(old), str(bad)]) == 2
    assert bad.read_text() == _join(_v1_lines()).replace("nodes:", "nodes: [", 1)
    out, err = capsys.readouterr()
    assert f"migrated {old} to format 2" in out and f"{old} is in format 2 already" in out
    assert err.startswith(f"graphir: {bad}:") and "invalid YAML" in err


def test_format_2_is_one_json_value_per_line() -> None:
    """Every entry line is ``  <name>: <JSON>`` and its JSON loads alone (diffable)."""
    import json

    lines = _lines()
    entries = [ln for ln in lines if ln.startswith("  ") and not ln.startswith("  - ")]
    assert len(entries) >= 5
    for ln in entries:
        name, _, value = ln[2:].partition(": ")
        assert name and ": " not in name
        json.loads(value)
    assert lines[2].startswith('meta: {"model": ')


def test_a_later_format_version_says_to_regenerate() -> None:
    lines = _lines()
    lines[0] = "# graphir-format: 99"
    with pytest.raises(SnapshotFormatError, match="regenerate it with `pytest --graphir-update`"):
        loads(_join(lines))


def test_loads_rejects_missing_header() -> None:
    """No header line: error on line 1."""
    with pytest.raises(SnapshotFormatError) as info:
        loads(_join(_lines()[1:]))
    assert info.value.line == 1
    assert "first line" in info.value.reason


def test_loads_rejects_other_version() -> None:
    """Another format version: error on line 1 naming both versions."""
    lines = _lines()
    lines[0] = f"# graphir-format: {FORMAT_VERSION + 1}"
    with pytest.raises(SnapshotFormatError) as info:
        loads(_join(lines))
    assert info.value.line == 1
    assert str(FORMAT_VERSION + 1) in info.value.reason and str(FORMAT_VERSION) in info.value.reason


def test_loads_rejects_truncated() -> None:
    """No end line (cut after a line, or in the middle of one): truncated, at the last line."""
    lines = _lines()
    cut = lines[:-1]
    with pytest.raises(SnapshotFormatError) as info:
        loads(_join(cut))
    assert "truncated" in info.value.reason
    assert info.value.line == len(cut)
    text = _join(lines)
    half = text[: len(text) // 2]
    with pytest.raises(SnapshotFormatError) as info:
        loads(half)
    assert "truncated" in info.value.reason
    assert info.value.line == half.count("\n") + 1  # the partial last line


def test_loads_rejects_duplicate_node_key() -> None:
    """A node written twice is an error on the second occurrence's line."""
    lines = _lines()
    i = lines.index("nodes:") + 3
    dup = [*lines[: i + 1], lines[i], *lines[i + 1 :]]
    with pytest.raises(SnapshotFormatError) as info:
        loads(_join(dup))
    assert info.value.line == i + 2  # 1-based line of the copy
    assert "duplicate" in info.value.reason
    assert lines[i].split(":")[0].strip() in info.value.reason


def test_loads_rejects_invalid_json_with_line() -> None:
    """A broken node line is reported at that line (and in a format-1 file that
    ``graphir migrate`` converts, as YAML)."""
    cases = (
        (_lines(), '"args": [', "invalid JSON", loads),
        (_v1_lines(), "args: [", "invalid YAML", upgrade),
    )
    for lines, args, what, read in cases:
        i = lines.index("nodes:") + 2
        assert args in lines[i]
        lines[i] = lines[i].replace(args, args + "[", 1)
        with pytest.raises(SnapshotFormatError) as info:
            read(_join(lines))
        assert info.value.line == i + 1
        assert what in info.value.reason
        assert str(info.value).startswith(f"line {i + 1}: ")


def test_loads_rejects_missing_section() -> None:
    """A document without ``outputs`` is refused, naming the section."""
    lines = _lines()
    i = lines.index("outputs:")
    with pytest.raises(SnapshotFormatError, match="outputs"):
        loads(_join(lines[:i] + lines[-1:]))


def test_loads_rejects_unknown_section_and_bad_node() -> None:
    """An extra top-level section, or a node without op/module, is refused at its line."""
    lines = _lines()
    extra = [*lines[:-1], "extra: {}", lines[-1]]
    with pytest.raises(SnapshotFormatError, match="extra") as info:
        loads(_join(extra))
    assert info.value.line == len(extra) - 1
    i = lines.index("nodes:") + 1
    bad = list(lines)
    bad[i] = '  broken: {"out": []}'
    with pytest.raises(SnapshotFormatError, match="broken") as info:
        loads(_join(bad))
    assert info.value.line == i + 1


@pytest.mark.parametrize("keep", [(), ("shape", "dtype", "mean")])
def test_params_entry_without_its_statistics_is_invalid(keep: tuple[str, ...]) -> None:
    """Deleting a weight's statistics by hand would switch its check off: where the
    other parameters have theirs, it is an invalid snapshot at that entry's line."""
    lines = _lines()
    i = next(n for n, line in enumerate(lines) if line.startswith("  embed.weight: "))
    entry = json.loads(lines[i].split(": ", 1)[1])
    edited = list(lines)
    edited[i] = "  embed.weight: " + json.dumps({k: entry[k] for k in ("shape", "dtype", *keep)})
    stripped = r"params entry 'embed\.weight' lacks its"
    with pytest.raises(SnapshotFormatError, match=stripped) as info:
        loads(_join(edited))
    assert info.value.line == i + 1
    assert "std, min, max, nan, inf" in info.value.reason


def test_params_without_statistics_anywhere_still_load() -> None:
    """A structure-only trace, a ``meta`` model, an empty or complex parameter: none."""
    torch.manual_seed(0)
    model, inputs = models.tiny_transformer()
    loads(dumps(trace(model, *inputs, stats=False)))
    with torch.device("meta"):
        meta_model = nn.Linear(4, 2)
    loads(dumps(trace(meta_model, torch.empty(1, 4, device="meta"))))
    odd = nn.Linear(4, 2)
    odd.empty = nn.Parameter(torch.zeros(0, 3))
    odd.wave = nn.Parameter(torch.ones(2, dtype=torch.complex64))
    text = dumps(trace(odd, torch.randn(1, 4)))
    assert '  empty: {"shape": [0, 3], "dtype": "float32"}' in text
    assert '  wave: {"shape": [2], "dtype": "complex64"}' in text
    loads(text)


@pytest.mark.parametrize("where", ["node", "meta"])
def test_loads_never_executes_python_tags(where: str, tmp_path: Path) -> None:
    """``!!python/object/apply`` is refused (as invalid JSON, or by ``graphir migrate``
    in a format-1 file as a YAML tag it cannot construct) and never run."""
    marker = tmp_path / "pwned"
    payload = f'!!python/object/apply:os.system ["touch {marker}"]'
    for lines, read in ((_lines(), loads), (_v1_lines(), upgrade)):
        if where == "node":
            i = lines.index("nodes:") + 1
            lines.insert(i, f"  evil: {payload}")
        else:
            i = 2
            lines[i] = f"meta: {payload}"
        with pytest.raises(SnapshotFormatError) as info:
            read(_join(lines))
        assert info.value.line == i + 1
        assert not marker.exists()


def test_snapshot_format_error_is_value_error() -> None:
    """Callers catching ValueError also catch format errors; message carries the line."""
    err = SnapshotFormatError("bad thing", 7)
    assert isinstance(err, ValueError)
    assert str(err) == "line 7: bad thing"
    assert str(SnapshotFormatError("no line")) == "no line"


@pytest.mark.parametrize(
    "yaml_text",
    [
        "meta: &m {model: M}",
        "  evil: {op: x, args: [&a [1, 2], *a, *a], out: []}",
        "  evil: {op: x, args: [*a], out: []}",
    ],
)
def test_migrate_rejects_anchors_and_aliases_with_line(yaml_text: str) -> None:
    """The format never writes anchors or aliases: a format-1 file holding one is
    refused at its line, before PyYAML builds it (issue 8; an alias bomb would
    expand to millions of elements in the migrated text). Format 2 is JSON, which has
    neither."""
    lines = _v1_lines()
    i = 2 if yaml_text.startswith("meta") else lines.index("nodes:") + 1
    if yaml_text.startswith("meta"):
        lines[i] = yaml_text
    else:
        lines.insert(i, yaml_text)
    with pytest.raises(SnapshotFormatError) as info:
        upgrade(_join(lines))
    assert info.value.line == i + 1
    assert "YAML anchor or alias: snapshots never use them" in info.value.reason


def test_migrate_refuses_an_alias_bomb_quickly() -> None:
    """Nine levels of nine aliases (387 million elements expanded) are refused at once."""
    lines = _v1_lines()
    i = lines.index("nodes:") + 1
    bomb = ["  l0: {op: x, args: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol], out: []}"]
    bomb += [
        f"  l{k}: {{op: x, args: &l{k} [{', '.join([f'*l{k - 1}'] * 9)}], out: []}}"
        for k in range(1, 10)
    ]
    with pytest.raises(SnapshotFormatError, match="anchor") as info:
        upgrade(_join(lines[:i] + bomb + lines[i:]))
    assert info.value.line == i + 1


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("key", ["nan", "inf", "mean", "std", "min", "max"])
def test_integer_beyond_a_floats_range_is_an_error_at_its_line(version: int, key: str) -> None:
    """A statistic of 4,000 digits raised a bare ``OverflowError`` in the comparison
    (issue 43): more than :data:`MAX_DIGITS` digits are refused at their line, by
    ``loads`` and by ``graphir migrate``'s ``upgrade``, and :data:`MAX_DIGITS` digits
    still load and compare as a drift."""
    lines = _v1_lines() if version == 1 else _lines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("  mul#0: "))
    stat = re.compile(f'("?{key}"?: )[-0-9.e]+')

    def with_stat(value: str) -> str:
        edited = stat.sub(lambda m: m[1] + value, lines[i], count=1)
        assert edited != lines[i]
        return _join([*lines[:i], edited, *lines[i + 1 :]])

    read = loads if version == 2 else lambda text: loads(upgrade(text))  # graphir migrate
    for digits in (MAX_DIGITS + 1, 4000, 5000):
        with pytest.raises(SnapshotFormatError) as info:
            read(with_stat("-" + "9" * digits))
        assert info.value.line == i + 1
        assert info.value.reason.startswith(f"an integer of more than {MAX_DIGITS} digits")
    stored, widest = read(_join(lines)), read(with_stat("9" * MAX_DIGITS))
    assert [c.kind for c in compare(stored, widest).changes] == ["drift"]
    assert [c.kind for c in compare(widest, stored).changes] == ["drift"]


@pytest.mark.parametrize("style", ["flow", "block"])
def test_loads_caps_nesting_depth_before_recursion(style: str) -> None:
    """Nesting deeper than anything a snapshot holds (10,000 levels in format 2; in
    format 1, YAML, which ``graphir migrate`` reads and where the block style exists,
    deeper than Python's recursion limit, whatever it is set to): a format error, not
    a RecursionError; with the line in format 2."""
    lines = _lines() if style == "flow" else _v1_lines()
    if style == "flow":
        lines[2] = "meta: " + "[" * 10_000 + "]" * 10_000
        with pytest.raises(SnapshotFormatError) as info:
            loads(_join(lines))
        assert f"nested deeper than {MAX_DEPTH} levels" in info.value.reason
        assert info.value.line == 3
    else:
        depth = sys.getrecursionlimit() + 100  # every level is a frame of PyYAML's or more
        lines[2:3] = ["meta:"] + [" " * (k + 2) + f"k{k}:" for k in range(depth)] + ["x: 1"]
        with pytest.raises(SnapshotFormatError, match="recursion depth"):
            upgrade(_join(lines))


def test_loads_skips_bom_and_reads_crlf() -> None:
    """A UTF-8 byte-order mark is skipped and CRLF line endings load (issue 8)."""
    text = dumps(_graph())
    expected = loads(text)
    assert loads("\ufeff" + text) == expected
    assert loads(text.replace("\n", "\r\n")) == expected
    assert loads(decode(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())) == expected


@pytest.mark.parametrize("char", ["\x1b", "\x00", "\x07", "\x7f", "\x9b", "\ufffe", "\r"])
def test_loads_reports_control_characters_by_line(char: str) -> None:
    """Control characters (a terminal escape among them) are reported by line and
    column, not by character position."""
    lines = _lines()
    i = lines.index("nodes:") + 2
    lines[i] = lines[i][:4] + char + lines[i][4:]
    with pytest.raises(SnapshotFormatError) as info:
        loads(_join(lines))
    assert info.value.line == i + 1
    assert "column 5" in info.value.reason
    assert "position" not in info.value.reason


def test_decode_reports_non_utf8_by_line() -> None:
    """Bytes that are not UTF-8: the line of the first bad byte, never a UnicodeDecodeError."""
    data = dumps(_graph()).encode()
    lines = data.split(b"\n")
    lines[5] = lines[5][:3] + b"\xff" + lines[5][3:]
    with pytest.raises(SnapshotFormatError) as info:
        decode(b"\n".join(lines))
    assert info.value.line == 6
    assert "not UTF-8" in info.value.reason and "0xff" in info.value.reason


def test_awkward_names_round_trip_through_the_character_check() -> None:
    """Whatever dumps writes passes the control-character check: names with every
    character of the first 0x3000 code points and a few astral ones round-trip."""
    graph = _graph()
    data = graph.to_data()
    # (not line breaks: dumps writes a key holding one unquoted-breakable; not ours)
    chars = (
        "".join(chr(c) for c in range(0x3000) if chr(c) not in "\n\u2028\u2029")
        + "\U0001f600\U0010fffd"
    )
    names = [chars[k : k + 100] for k in range(0, len(chars), 100)]  # YAML keys < 1024 chars
    entry = next(iter(data["inputs"].values()))
    data["inputs"] = {name: entry for name in names}
    assert list(loads(dumps(data))["inputs"]) == names


def test_non_string_node_key_is_a_format_error() -> None:
    text = (
        "# graphir-format: 1\nmeta: {}\ninputs: {}\nnodes:\n  1: {op: add, out: []}\n"
        "outputs: {}\n# end of graphir snapshot\n"
    )
    with pytest.raises(SnapshotFormatError, match="should be a string"):
        upgrade(text)


def test_loads_pauses_the_garbage_collector_and_restores_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The collector is off while a snapshot is parsed (its full collections would walk
    every object of a test process holding a model, on every other load of a large
    snapshot), back on afterwards, also when the text is refused; a caller's own
    gc.disable() is kept."""
    import gc

    from pytest_graphir import serialize

    seen: list[bool] = []
    parse = serialize._parse_lines

    def spy(text: str) -> Any:
        seen.append(gc.isenabled())
        return parse(text)

    monkeypatch.setattr(serialize, "_parse_lines", spy)
    text = dumps(_graph())
    assert gc.isenabled()
    assert loads(text)["nodes"]
    assert seen == [False] and gc.isenabled()
    broken = text.replace("\n  ", "\n  not an entry\n  ", 1)  # refused by the parser
    with pytest.raises(SnapshotFormatError):
        loads(broken)
    assert seen == [False, False] and gc.isenabled()
    gc.disable()
    try:
        loads(text)
        assert not gc.isenabled()  # a caller's own choice is kept
    finally:
        gc.enable()
