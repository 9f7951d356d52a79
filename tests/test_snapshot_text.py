"""Whatever the writer writes, the reader accepts, and a value the reader cannot take
is an error at its line: hostile model names, integers beyond Python's
string-conversion limit (and a float's range: tests/test_serialize.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pytest_graphir import trace
from pytest_graphir.serialize import SnapshotFormatError, dumps, loads

HOSTILE_NAMES = [
    "Line\nBreak",
    "Two\nnodes:\n  x: {}",
    "Ends\n# end of graphir snapshot",
    "Carriage\rReturn",
    "Escape\x1b[31mRed",
    "Separator\u2028Para\u2029Next\x85",
    "Tab\there",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=range(len(HOSTILE_NAMES)))
def test_model_class_name_round_trips(name: str) -> None:
    model = type(name, (nn.Linear,), {})(3, 2)
    graph = trace(model, torch.randn(1, 3))
    text = dumps(graph)
    doc = loads(text)
    assert doc["meta"]["model"] == name
    assert dumps(doc) == text


def test_plain_model_name_is_written_as_before() -> None:
    text = dumps(trace(nn.Linear(3, 2), torch.randn(1, 3)))
    assert text.splitlines()[1] == (
        "# pytest-graphir snapshot of Linear; regenerate with `pytest --graphir-update`"
    )


def test_integer_beyond_the_conversion_limit_is_an_error_at_its_line() -> None:
    text = dumps(trace(nn.Linear(3, 2), torch.randn(1, 3)))
    lines = text.splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines, 1) if line.startswith("  linear#0: "))
    lines[number - 1] = lines[number - 1].replace('"op"', f'"big": {"9" * 5000}, "op"', 1)
    with pytest.raises(SnapshotFormatError) as err:
        loads("".join(lines))
    assert err.value.line == number
    assert "more than 308 digits" in err.value.reason
