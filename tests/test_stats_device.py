"""The device statistics path, forced onto CPU tensors (``GRAPHIR_STATS_DEVICE_PATH=1``),
on every architecture of ``breadth_models.ARCHS``: it gives the CPU path's snapshot
within the default tolerance, and the same text on every run, so a snapshot written on
a GPU holds on the CPU and CUDA-only code is first run here.
"""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
from breadth_models import ARCHS, BY_NAME

from pytest_graphir import trace
from pytest_graphir.compare import compare
from pytest_graphir.serialize import dumps, loads

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow


@functools.cache
def _model(name: str) -> torch.nn.Module:
    return BY_NAME[name].build()


def _text(name: str) -> str:
    """The snapshot text of the architecture's seeded trace."""
    args, kwargs = BY_NAME[name].make_inputs()
    torch.manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' config and fallback notices
        return dumps(trace(_model(name), *args, **kwargs))


@pytest.mark.parametrize("name", [a.name for a in ARCHS])
def test_forced_device_path_gives_the_cpu_snapshot_every_run(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GRAPHIR_STATS_DEVICE_PATH", raising=False)
    cpu = _text(name)
    monkeypatch.setenv("GRAPHIR_STATS_DEVICE_PATH", "1")
    first, second = _text(name), _text(name)
    assert first == second, "the device path gave two texts for one model"
    result = compare(loads(cpu), loads(first))
    assert not result, "\n".join(result.lines())
