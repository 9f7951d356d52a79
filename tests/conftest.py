"""Shared helpers: small models for unit tests, pytester project setup."""

from __future__ import annotations

import sys
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
