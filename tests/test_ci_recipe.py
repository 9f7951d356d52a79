"""The GitHub Actions recipe of docs/ci.md (docs/examples/graphir.yml) stays valid:
it parses, installs the project's pinned torch first, runs the gate with reports on,
and uploads the reports of failing tests."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "docs" / "examples" / "graphir.yml"


def _workflow() -> dict[Any, Any]:
    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _steps() -> list[dict[str, Any]]:
    (job,) = _workflow()["jobs"].values()
    assert job["runs-on"].startswith("ubuntu")
    return list(job["steps"])


def test_triggers_and_documented() -> None:
    data = _workflow()
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` as true
    assert "pull_request" in triggers
    assert "docs/examples/graphir.yml" in (ROOT / "docs" / "ci.md").read_text()


def test_pinned_torch_installed_before_the_project() -> None:
    """The torch pin is the one .ci/run installs, and it comes first."""
    pin = re.search(r"torch==([\w.+]+)", (ROOT / ".ci" / "run").read_text())
    assert pin is not None
    (job,) = _workflow()["jobs"].values()
    assert job["env"]["TORCH_VERSION"] == pin.group(1)
    runs = [str(s.get("run", "")) for s in _steps()]
    torch_step = next(i for i, r in enumerate(runs) if '"torch==${TORCH_VERSION}"' in r)
    project_step = next(i for i, r in enumerate(runs) if "-e " in r)
    assert torch_step < project_step
    assert "torch==${TORCH_VERSION}" in runs[project_step]  # pip may not move it


def test_gate_writes_reports_and_failure_uploads_them() -> None:
    steps = _steps()
    gate = next(s for s in steps if "pytest" in str(s.get("run", "")))
    argv = shlex.split(gate["run"])
    assert "--graphir-update" not in argv and "--snapshot-update" not in argv
    (report,) = [a.split("=", 1)[1] for a in argv if a.startswith("--graphir-report=")]
    upload = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    assert steps.index(upload) > steps.index(gate)
    assert upload["if"] == "failure()"
    paths = upload["with"]["path"].split()
    assert f"{report}/**/*.html" in paths and f"{report}/**/*.received" in paths
    for step in steps:
        uses = step.get("uses")
        assert uses is None or re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", uses), uses
