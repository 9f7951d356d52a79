"""Shared helpers: small models for unit tests, pytester project setup."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fixtures"))  # the bundled example models: fixtures/models.py


@pytest.fixture
def graphir_project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester project whose tests can import the example models (``import models``)."""
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(models=(ROOT / "fixtures" / "models.py").read_text())
    return pytester


@pytest.fixture(autouse=True)
def _inner_runs_are_not_xdist_workers(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pytester run started from an xdist worker inherits ``PYTEST_XDIST_WORKER``,
    and syrupy (``syrupy.utils.is_xdist_worker``) then takes the inner run for a worker
    and never deletes unused snapshots: the inner run must see the environment a
    user's ``pytest`` sees. Only for tests that use ``pytester``."""
    if "pytester" in request.fixturenames:
        for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    """Dynamo reset (``torch._dynamo.reset()``) and its counters cleared before and
    after the test, so graph and break counts are the test's own. The compiled test
    modules use it for every test (``pytestmark``)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()
    counters.clear()
