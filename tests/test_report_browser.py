"""The HTML report in a real browser: headless Chromium driven by Selenium over the
report of a small real diff (the example MLP with ReLU swapped for GELU).

Needs Debian's ``chromium`` and ``chromium-driver`` packages and the ``selenium``
package (``pip install -e '.[test]'``); ``.ci/run`` installs them. Without them the
tests are skipped with a message saying how to install them.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import models
import pytest
from report_helpers import mlp_diff

from pytest_graphir import trace
from pytest_graphir.report import render_html

INSTALL = (
    "apt-get install -y chromium chromium-driver (Debian/Ubuntu, as root) and "
    "pip install selenium (or pip install -e '.[test]'); .ci/run does both"
)
CHANGED = "rgb(191, 106, 2)"  # --changed in report.css
ADDED = "rgb(26, 127, 55)"


def _write(path: Path, *args: Any, **options: Any) -> Path:
    """``render_html(*args, **options)`` written to ``path``."""
    path.write_text(render_html(*args, **options), encoding="utf-8")
    return path


def _find(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


def missing_browser() -> str | None:
    """Why the browser tests cannot run here (with how to fix it), or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return f"selenium is not installed; to run the browser tests: {INSTALL}"
    if (
        _find("chromium", "chromium-browser", "google-chrome") is None
        or _find("chromedriver") is None
    ):
        return f"no chromium/chromedriver on PATH; to run the browser tests: {INSTALL}"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium under chromedriver, with the console log recorded."""
    reason = missing_browser()
    if reason:
        # a skip reason only shows with -rs; a warning shows in every run's summary
        warnings.warn(f"browser tests skipped: {reason}", UserWarning, stacklevel=1)
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = _find("chromium", "chromium-browser", "google-chrome")
    driver_path = _find("chromedriver")
    assert chromium is not None and driver_path is not None
    profile = tempfile.mkdtemp(prefix="graphir-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,900",
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(driver_path))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _open(driver: Any, path: Path) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(path.resolve().as_uri())
    WebDriverWait(driver, 20).until(
        lambda d: d.execute_script("return document.body.dataset.ready === '1'")
    )


def _node(driver: Any, name: str) -> Any:
    from selenium.webdriver.common.by import By

    found = [
        e
        for e in driver.find_elements(By.CSS_SELECTOR, "#viewport [data-name]")
        if e.get_attribute("data-name") == name
    ]
    return found[0] if found else None


def _stroke(driver: Any, element: Any) -> str:
    return str(
        driver.execute_script(
            "return getComputedStyle(arguments[0].querySelector(':scope > rect')).stroke", element
        )
    )


def _console_errors(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def test_mlp_diff_in_chromium(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    new, old, changes = mlp_diff()
    report = _write(
        tmp_path / "mlp.html",
        new,
        old,
        changes,
        open_depth=1,
        tolerance_note="rtol 1e-4, atol 1e-5",
    )
    _open(browser, report)
    assert (
        browser.execute_script("return performance.getEntriesByName('graphir-first-render').length")
        == 1
    )

    # changed nodes are highlighted: the boxes around changes open by themselves
    act, gelu, relu = (_node(browser, n) for n in ("act", "act/gelu#0", "act/relu#0"))
    assert "st-changed" in act.get_attribute("class")
    assert _stroke(browser, act) == CHANGED
    assert "st-added" in gelu.get_attribute("class") and _stroke(browser, gelu) == ADDED
    assert "st-removed" in relu.get_attribute("class")
    assert "st-drift" in _node(browser, "fc2/linear#0").get_attribute("class")

    # fc1 (unchanged, deeper than open_depth) starts closed; clicking opens it
    fc1 = _node(browser, "fc1")
    assert "collapsed" in fc1.get_attribute("class")
    assert _node(browser, "fc1/linear#0") is None
    fc1.click()
    assert _node(browser, "fc1/linear#0") is not None
    assert "cluster" in _node(browser, "fc1").get_attribute("class")

    # a change in the list: shows old -> new and the tolerance, selects its node
    drift_row = browser.find_element(By.CSS_SELECTOR, '#changes .row[data-change="3"]')
    drift_row.click()
    details = browser.find_element(By.ID, "details").text
    assert "out[0].mean" in details and "-0.165429" in details and "-0.17" in details
    assert "\u2192" in details and "tolerance: \u00b10.001" in details
    assert "selected" in _node(browser, "fc2/linear#0").get_attribute("class")

    # the search box lists nodes by name or op; Enter jumps to the first
    box = browser.find_element(By.ID, "search")
    box.send_keys("gelu", Keys.ENTER)  # matches the module GELU first, then its op
    hits = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#results .row")]
    assert hits == ["act GELU", "act/gelu#0 gelu"]
    assert "selected" in _node(browser, "act").get_attribute("class")
    browser.find_elements(By.CSS_SELECTOR, "#results .row")[1].click()
    assert "selected" in _node(browser, "act/gelu#0").get_attribute("class")
    assert "act/gelu#0" in browser.find_element(By.ID, "details").text

    # the details list what a node reads; following one reveals and selects it
    browser.find_element(By.CSS_SELECTOR, "#details [data-jump]").click()
    assert "selected" in _node(browser, "fc1/linear#0").get_attribute("class")

    # closing a box hides its ops again
    browser.find_element(By.CSS_SELECTOR, '.cluster[data-name="fc1"] > .head').click()
    assert _node(browser, "fc1/linear#0") is None

    shot = tmp_path / "mlp-report.png"
    drift_row.click()
    browser.find_element(By.ID, "fit").click()  # the whole picture, the change selected
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    assert _console_errors(browser) == []
    assert not browser.find_element(By.ID, "error").is_displayed()


def test_nested_calls_reveal_from_search(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    model, args = models.tiny_transformer(2)
    report = _write(tmp_path / "tiny.html", trace(model, *args), open_depth=0)
    _open(browser, report)
    target = "shared.norm@1/layer_norm#0"  # inside the second call of a reused block
    assert _node(browser, target) is None
    browser.find_element(By.ID, "search").send_keys(target, Keys.ENTER)
    node = _node(browser, target)
    assert node is not None and "selected" in node.get_attribute("class")
    for box in ("shared@1", "shared.norm@1"):
        assert "cluster" in _node(browser, box).get_attribute("class")
    assert _node(browser, "shared.norm/layer_norm#0") is None  # the first call stays closed
    assert _console_errors(browser) == []


def test_without_a_browser_the_skip_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    reason = missing_browser()
    assert reason is not None
    assert "apt-get install -y chromium chromium-driver" in reason and "selenium" in reason


def test_crowded_graph_and_toolbar(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    from pytest_graphir.compare import Change
    from pytest_graphir.ir import GraphIR, Node, TensorMeta

    nodes = [
        Node(
            f"add#{k}",
            "op",
            "add",
            args=[f"$add#{k - 1}" if k else "$x", 1.0],
            outputs=[TensorMeta([2], "float32")],
        )
        for k in range(450)
    ]
    ir = GraphIR({"model": "Flat"}, {"x": TensorMeta([2], "float32")}, nodes, {})
    report = _write(
        tmp_path / "flat.html",
        ir,
        None,
        [Change("drift", "add#420", field="out[0].max", old=1.0, new=2.0, tolerance=0.5)],
        open_depth=1,
    )
    _open(browser, report)
    # the last run (51 nodes) holds the change and opens; the other four stay closed
    assert len(browser.find_elements(By.CSS_SELECTOR, "#viewport .collapsed")) == 4
    assert "st-drift" in _node(browser, "add#420").get_attribute("class")
    assert _node(browser, "add#10") is None
    browser.find_element(By.ID, "collapse-all").click()
    assert _node(browser, "add#420") is None
    assert "has-changes" in _node(browser, "Flat [401-451]").get_attribute("class")
    browser.find_element(By.ID, "expand-changes").click()
    assert _node(browser, "add#420") is not None and _node(browser, "add#10") is None
    browser.find_element(By.ID, "collapse-all").click()
    browser.find_element(By.CSS_SELECTOR, '#changes .row[data-change="0"]').click()
    assert "selected" in _node(browser, "add#420").get_attribute("class")
    assert _console_errors(browser) == []


def _llama_report(tmp_path: Path, old_layers: int, new_layers: int, name: str) -> Path:
    """The report of a Llama with one more layer at the end (weights seeded per
    parameter name, so nothing before the new layer drifts), as ``graphir html``
    writes it from the two snapshot files."""
    from report_helpers import llama

    from pytest_graphir.cli import main
    from pytest_graphir.serialize import dumps

    files = []
    for layers in (old_layers, new_layers):
        model, ids = llama(layers)
        path = tmp_path / f"llama{layers}.graphir"
        path.write_text(dumps(trace(model, ids)))
        files.append(str(path))
    out = tmp_path / f"{name}.html"
    assert main(["html", *files, "-o", str(out)]) == 0
    return out


def test_added_layer_is_green_and_the_change_list_groups_drift(
    browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    pytest.importorskip("transformers")
    _open(browser, _llama_report(tmp_path, 6, 7, "llama7"))
    # the added decoder layer: green like an added op (not the orange of "holds changes")
    layer = _node(browser, "model.layers.6")
    assert "st-added" in layer.get_attribute("class")
    assert _stroke(browser, layer) == ADDED
    assert "st-" not in (_node(browser, "model.layers.5").get_attribute("class") or "")
    # the first view opens on it
    report = browser.execute_script("return window.graphirReport")
    assert report["focus"] == int(layer.get_attribute("data-i"))

    # propagated drift: one row per module subtree; clicking lists its values
    def rows(css: str) -> list[Any]:
        return list(browser.find_elements(By.CSS_SELECTOR, f"#changes {css}"))

    groups = rows(".row.group")
    assert groups and all("downstream of" not in g.text for g in groups)
    assert any("model.norm 31 values in 8 nodes" in g.text for g in groups), [
        g.text for g in groups
    ]
    assert "\u2193 model.layers.6" in groups[0].text
    assert not rows(".row.member")
    groups[0].click()
    assert rows(".row.member")

    # legend chips switch a kind off: its rows, colours and marked counts go
    chip = browser.find_element(By.CSS_SELECTOR, '#legend [data-kind="drift"]')

    def drawn(css: str) -> int:
        return len(browser.find_elements(By.CSS_SELECTOR, f"#viewport {css}"))

    assert drawn(".st-drift") + drawn(".has-drift") > 0
    chip.click()
    assert "off" in chip.get_attribute("class")
    assert not rows(".row.group") and not rows(".badge.drift")
    assert rows(".badge.added")
    assert drawn(".st-drift") + drawn(".has-drift") == 0
    browser.find_element(By.CSS_SELECTOR, '#legend [data-kind="added"]').click()
    assert not rows(".badge.added")
    assert "marked" not in browser.find_element(By.CSS_SELECTOR, "#viewport").text
    chip.click()
    browser.find_element(By.CSS_SELECTOR, '#legend [data-kind="added"]').click()
    assert rows(".row.group") and rows(".badge.added")
    assert _console_errors(browser) == []


@pytest.mark.slow
def test_141_layer_llama_report_is_small_and_opens_fast(browser: Any, tmp_path: Path) -> None:
    """A 140 -> 141 layer Llama (about 10,000 nodes): the file stays under 3 MB and
    the first render ends within 2 s of navigation, centred on the added layer."""
    pytest.importorskip("transformers")
    report = _llama_report(tmp_path, 140, 141, "llama141")
    size = report.stat().st_size
    _open(browser, report)
    info = browser.execute_script(
        "var r = window.graphirReport; return {ms: r.firstRenderMs, focus: r.focus, "
        "view: r.view(), at: r.where(r.focus), nodes: r.nodes}"
    )
    print(f"141-layer report: {size / 1e6:.2f} MB, {info['nodes']} items, "
          f"first render {info['ms']:.0f} ms")  # fmt: skip
    assert info["nodes"] > 10_000
    assert size < 3_000_000
    assert info["ms"] < 2000
    focus = _node(browser, "model.layers.140")
    assert focus is not None and int(focus.get_attribute("data-i")) == info["focus"]
    view, at = info["view"], info["at"]
    cx = view["x"] + (at["x"] + at["w"] / 2) * view["k"]
    cy = view["y"] + (at["y"] + at["h"] / 2) * view["k"]
    assert abs(cx - view["w"] / 2) < 5 and abs(cy - view["h"] / 2) < 5
    assert _console_errors(browser) == []


def _diff_report(tmp_path: Path, name: str, old: Any, new: Any, *inputs: Any) -> Path:
    """The report ``graphir html`` writes from the snapshot files of two models."""
    from pytest_graphir.cli import main
    from pytest_graphir.serialize import dumps

    files = []
    for tag, model in (("old", old), ("new", new)):
        path = tmp_path / f"{name}-{tag}.graphir"
        path.write_text(dumps(trace(model, *inputs)))
        files.append(str(path))
    out = tmp_path / f"{name}.html"
    assert main(["html", *files, "-o", str(out)]) == 0
    return out


def test_inserted_module_is_drawn_where_it_runs(browser: Any, tmp_path: Path) -> None:
    """A ``mid_norm`` run after block 5 of 12 (an ``nn.ModuleList``, never called
    itself) is drawn between blocks 5 and 6, not after the whole ``blocks`` box."""
    import torch
    from torch import nn

    from pytest_graphir import init_by_name

    class Net(nn.Module):
        def __init__(self, mid: bool) -> None:
            super().__init__()
            self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(12))
            self.mid_norm = nn.LayerNorm(8) if mid else None
            self.head = nn.Linear(8, 2)

        def forward(self, x: Any) -> Any:
            for k, block in enumerate(self.blocks):
                x = torch.relu(block(x))
                if k == 5 and self.mid_norm is not None:
                    x = self.mid_norm(x)
            return self.head(x)

    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    nets = [init_by_name(Net(mid)).eval() for mid in (False, True)]
    _open(browser, _diff_report(tmp_path, "mid", *nets, x))
    at = browser.execute_script(
        "var r = window.graphirReport, out = {};"
        "document.querySelectorAll('#viewport [data-name]').forEach(function (e) {"
        "  out[e.getAttribute('data-name')] = r.where(+e.getAttribute('data-i')); });"
        "return out;"
    )
    assert "st-added" in _node(browser, "mid_norm").get_attribute("class")
    assert at["blocks.5"]["y"] + at["blocks.5"]["h"] <= at["mid_norm"]["y"]
    assert at["mid_norm"]["y"] + at["mid_norm"]["h"] <= at["blocks.6"]["y"]
    assert _console_errors(browser) == []


def test_first_view_opens_at_the_first_change_readable(browser: Any, tmp_path: Path) -> None:
    """A 12-layer Llama switched to bfloat16: every layer changes, and the model box is
    far taller than the window. The page opens centred on the first change, in the
    failure message's order, that is drawn as a node (the viewport's centre lies inside
    that node), at a zoom where its title's font is at least 9 screen pixels, not the
    whole model shrunk to one column."""
    import torch

    pytest.importorskip("transformers")
    from report_helpers import embedded_data, llama

    from pytest_graphir.compare import compare
    from pytest_graphir.compare.message import entries
    from pytest_graphir.serialize import dumps, loads

    model, ids = llama(12)
    stored = loads(dumps(trace(model, ids)))
    received = loads(dumps(trace(model.to(torch.bfloat16), ids)))
    result = compare(stored, received)
    path = _write(tmp_path / "bf16.html", received, stored, result.changes)
    rows = embedded_data(path.read_text(encoding="utf-8"))["changes"]
    row_of = {id(c): k for k, c in enumerate(result.changes)}  # the page lists them in order
    # the item of each change, in the order the failure message lists them
    listed = [rows[row_of[id(c)]]["item"] for e in entries(result) for c in e.covers]
    _open(browser, path)
    at = browser.execute_script(
        "var svg = document.getElementById('graph'), s = svg.getBoundingClientRect(), out = [];"
        "arguments[0].forEach(function (i) {"
        "  var e = i >= 0 && document.querySelector('#viewport [data-i=\"' + i + '\"]');"
        "  if (!e || !e.classList.contains('node')) return;"
        "  var r = e.querySelector(':scope > rect').getBoundingClientRect(),"
        "    t = e.querySelector('text.title');"
        "  out.push({name: e.getAttribute('data-name'), x: r.left - s.left, y: r.top - s.top,"
        "    w: r.width, h: r.height, cx: s.width / 2, cy: s.height / 2,"
        "    px: parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a}); });"
        "return out;",
        listed,
    )
    assert at, "no change of the message is drawn as a node"
    first = at[0]  # here the message's first change is the model box, open, so passed over
    # the case tells orders apart: other changes are drawn as other nodes
    assert {n["name"] for n in at} - {first["name"]}, at

    def off_centre(n: dict[str, Any]) -> float:
        """Screen distance from the viewport's centre to node ``n`` (0: inside it)."""
        dx = max(n["x"] - n["cx"], 0, n["cx"] - n["x"] - n["w"])
        dy = max(n["y"] - n["cy"], 0, n["cy"] - n["y"] - n["h"])
        return float(math.hypot(dx, dy))

    nearest = min(at, key=off_centre)
    assert off_centre(first) == 0, (
        f"the view is not centred on {first['name']} but {off_centre(first):.0f} px from it; "
        f"the changed node nearest the centre is {nearest['name']}: {first}"
    )
    assert first["px"] >= 9, f"titles {first['px']:.1f} px tall on screen: {first}"
    assert _console_errors(browser) == []
