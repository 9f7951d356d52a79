"""The HTML report without a browser: self-contained page, embedded data, escaping,
hierarchy and edges, atomic writing. The page itself is driven in
``test_report_browser.py``."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import models
import pytest
from report_helpers import embedded_data, mlp_diff

from pytest_graphir import trace
from pytest_graphir.ir import GraphIR, Node, TensorMeta
from pytest_graphir.report import build_payload, render_html
from pytest_graphir.report.payload import CROWDED
from pytest_graphir.serialize import dumps, loads


def _items(data: dict[str, Any]) -> dict[str, list[Any]]:
    return {it[0]: it for it in data["items"]}


def test_page_is_self_contained() -> None:
    new, old, changes = mlp_diff()
    html = render_html(new, old, changes)
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"""\b(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert not re.search(r"<(link|iframe|img|object|embed)\b", html, re.I)
    assert "@import" not in html and "url(http" not in html
    assert "sourceMappingURL" not in html  # no devtools request for a map we don't ship
    assert "dagre" in html and "layout" in html  # the bundled layout library is inlined


def test_embedded_data_describes_the_diff() -> None:
    new, old, changes = mlp_diff()
    data = embedded_data(render_html(new, old, changes, title="t", tolerance_note="rtol 1e-4"))
    items = _items(data)
    assert data["title"] == "t" and data["tolerance_note"] == "rtol 1e-4"
    assert data["counts"] == {"removed": 1, "added": 1, "changed": 2, "reordered": 0, "drift": 1}
    # every node of the new graph, plus the removed one drawn from the old graph
    assert {n.name for n in new.nodes} | {"act/relu#0"} <= set(items)
    status = {name: it[4] for name, it in items.items() if it[4]}
    assert status == {
        "act": "changed",
        "act/relu#0": "removed",
        "act/gelu#0": "added",
        "fc2/linear#0": "drift",
        "x": "changed",
    }
    # ops sit in the box of the module call they ran in
    index = {it[0]: i for i, it in enumerate(data["items"])}
    assert items["act/gelu#0"][3] == index["act"] and items["act/relu#0"][3] == index["act"]
    assert items["act"][1] == "module" and items["act"][2] == "GELU"
    # edges from the $ref arguments: fc1's linear feeds both activations
    edges = {(data["items"][a][0], data["items"][b][0]) for a, b in data["edges"]}
    assert {
        ("fc1/linear#0", "act/gelu#0"),
        ("fc1/linear#0", "act/relu#0"),
        ("act/gelu#0", "fc2/linear#0"),
        ("x", "fc1/linear#0"),
        ("fc2/linear#0", "output"),
    } <= edges
    assert not any(a.startswith(("fc1", "act", "fc2")) and "/" not in a for a, _ in edges)
    drift = next(c for c in data["changes"] if c["kind"] == "drift")
    assert (drift["old"], drift["new"], drift["tolerance"]) == (-0.165429, -0.17, 0.001)
    assert data["items"][drift["item"]][0] == "fc2/linear#0"
    assert drift["field"] == "out[0].mean" and drift["scope"] == "fc2"


def test_script_end_tag_in_names_is_escaped() -> None:
    evil = "a</script><script>alert(1)</script><!--"
    ir = GraphIR(
        meta={"model": evil},
        inputs={"x": TensorMeta([2], "float32")},
        nodes=[
            Node(
                f"{evil}/add#0",
                "op",
                "add",
                args=["$x", "</ScRiPt>"],
                outputs=[TensorMeta([2], "float32", {"mean": float("nan")})],
            )
        ],
        outputs={"out": {"ref": f"${evil}/add#0", "shape": [2], "dtype": "float32"}},
    )
    html = render_html(ir, title=evil)
    # the three script elements (data, dagre, page script) close exactly once each
    assert len(re.findall(r"</script", html, re.I)) == 3
    assert "<!--" not in html
    assert "<title>a&lt;/script&gt;" in html
    data = embedded_data(html)
    assert data["title"] == evil
    detail = _items(data)[f"{evil}/add#0"][5]
    assert detail["args"] == ["$x", "</ScRiPt>"]
    assert detail["out"][0]["mean"] == "nan"  # valid JSON: no bare NaN


def test_change_without_its_node_points_at_its_scope() -> None:
    new, _old, changes = mlp_diff()
    # the removed node is only in `old`; without `old` the change jumps to its module box
    data = build_payload(new, None, changes)
    removed = next(c for c in data["changes"] if c["kind"] == "removed")
    assert data["items"][removed["item"]][0] == "act"
    assert "act/relu#0" not in _items(data)
    merged = SimpleNamespace(
        kind="added",
        node="",
        scope="",
        field="",
        old=None,
        new=None,
        tolerance=None,
        section="nodes",
        label="2 ops added in act",
        nodes=["act/gelu#0", "fc2/linear#0"],
        note="(2 nodes)",
    )
    row = build_payload(new, None, [merged])["changes"][0]
    assert row["node"] == "2 ops added in act" and row["note"] == "(2 nodes)"
    assert build_payload(new, None, [merged])["items"][row["item"]][0] == "act/gelu#0"


def test_snapshot_document_gives_the_same_picture_as_the_graph() -> None:
    new, old, changes = mlp_diff()
    from_docs = build_payload(loads(dumps(new)), loads(dumps(old)), changes)
    from_graphs = build_payload(new, old, changes)
    assert [it[:5] for it in from_docs["items"]] == [it[:5] for it in from_graphs["items"]]
    assert from_docs["edges"] == from_graphs["edges"]
    with pytest.raises(TypeError, match=r"GraphIR or a loaded \.graphir document"):
        build_payload({"meta": {}})


def test_module_calls_nest_by_call_and_uncalled_paths_become_groups() -> None:
    ir = trace(*_pair(models.tiny_transformer(2)))
    data = build_payload(ir)
    items, index = _items(data), {it[0]: i for i, it in enumerate(data["items"])}
    # the second call of the shared block holds the second call of its submodules
    assert items["shared.norm@1"][3] == index["shared@1"]
    assert items["shared.norm@1/layer_norm#0"][3] == index["shared.norm@1"]
    assert items["shared.norm/layer_norm#0"][3] == index["shared.norm"]
    # nn.ModuleList `blocks` is never called: a group box holds its blocks
    assert items["blocks"][1] == "group" and items["blocks.1"][3] == index["blocks"]
    assert items["mul#0"][3] == 0  # an op of the root forward sits in the root


def test_crowded_box_is_split_into_runs() -> None:
    n = 450
    nodes = [
        Node(
            f"add#{k}",
            "op",
            "add",
            args=[f"$add#{k - 1}" if k else "$x", 1.0],
            outputs=[TensorMeta([2], "float32")],
        )
        for k in range(n)
    ]
    ir = GraphIR({"model": "Flat"}, {"x": TensorMeta([2], "float32")}, nodes, {})
    data = build_payload(ir)
    children: dict[int, int] = {}
    for it in data["items"]:
        children[it[3]] = children.get(it[3], 0) + 1
    assert max(children.values()) <= CROWDED
    groups = [it for it in data["items"] if it[1] == "group"]
    assert [g[0] for g in groups] == [
        "Flat [1-100]",
        "Flat [101-200]",
        "Flat [201-300]",
        "Flat [301-400]",
        "Flat [401-451]",
    ]
    assert sum(it[1] == "op" for it in data["items"]) == n


def test_graphir_html_writes_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``graphir html`` writes through :func:`~pytest_graphir.extension.files.write_atomic`:
    a write that fails at the rename leaves the page an earlier run wrote, whole, and
    no temporary file."""
    from pytest_graphir.cli import main

    new, old, _ = mlp_diff()
    a, b = tmp_path / "a.graphir", tmp_path / "b.graphir"
    a.write_text(dumps(old))
    b.write_text(dumps(new))
    target = tmp_path / "reports" / "mlp.html"
    assert main(["html", str(a), str(b), "-o", str(target)]) == 0
    first = target.read_text("utf-8")
    assert embedded_data(first)["counts"]["added"] == 1

    def fail(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("pytest_graphir.extension.files.os.replace", fail)
    with pytest.raises(OSError, match="disk full"):
        main(["html", str(b), str(a), "-o", str(target)])
    assert target.read_text("utf-8") == first  # a failed write leaves the old report
    assert sorted(p.name for p in target.parent.iterdir()) == ["mlp.html"]  # no temp left


def _pair(pair):  # type: ignore[no-untyped-def]
    return (pair[0], *pair[1])


def test_bundled_layout_library_is_pinned_and_its_licence_recorded() -> None:
    from importlib import resources

    assets = resources.files("pytest_graphir.report").joinpath("assets")
    js = assets.joinpath("dagre.min.js").read_text("utf-8")
    readme = assets.joinpath("README.md").read_text("utf-8")
    version = re.search(r'var re="([0-9.]+)"', js)  # dagre's own `version` export
    assert version is not None and version.group(1) == "3.1.3"
    assert "`@dagrejs/dagre`" in readme and "| 3.1.3 |" in readme and "MIT" in readme
    assert "Chris Pettitt" in assets.joinpath("dagre.LICENSE").read_text("utf-8")
    assert "dagre" in render_html(GraphIR({"model": "M"}, {}, [], {}))


def test_change_objects_match_the_protocol() -> None:
    from pytest_graphir.compare import Change
    from pytest_graphir.report import ChangeLike

    assert isinstance(Change("drift", "fc2/linear#0"), ChangeLike)
    assert not isinstance(SimpleNamespace(kind="added"), ChangeLike)  # fields missing
