"""Tests of ``pytest_graphir.opnames``: canonical op names for qualified names and callables."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pytest_graphir.opnames import canonical_from_qualname, canonical_op


@pytest.mark.parametrize(
    ("qualname", "expected"),
    [
        # namespaces stripped: the same op under every spelling
        ("torch.nn.functional.linear", "linear"),
        ("torch._C._nn.linear", "linear"),
        ("torch.relu", "relu"),
        ("torch.nn.functional.relu", "relu"),
        ("torch.Tensor.add", "add"),
        ("torch._C.TensorBase.add", "add"),
        # operator dunders
        ("torch.Tensor.__add__", "add"),
        ("torch.Tensor.__radd__", "add"),
        ("torch.Tensor.__iadd__", "add_"),
        ("torch.Tensor.__mul__", "mul"),
        ("torch.Tensor.__matmul__", "matmul"),
        ("torch.Tensor.__getitem__", "getitem"),
        ("torch.Tensor.__setitem__", "setitem"),
        ("torch.Tensor.__rsub__", "rsub"),
        ("torch.Tensor.__eq__", "eq"),
        # aliases
        ("torch.divide", "div"),
        ("torch.Tensor.divide", "div"),
        ("torch.true_divide", "div"),
        ("torch.concat", "cat"),
        ("torch.concatenate", "cat"),
        ("torch.swapaxes", "transpose"),
        ("torch.clip", "clamp"),
        # property getters that are ops
        ("torch.Tensor.T.__get__", "t"),
        ("torch.Tensor.mT.__get__", "transpose"),
        ("torch.Tensor.data.__get__", "detach"),
    ],
)
def test_canonical_names(qualname: str, expected: str) -> None:
    """Each spelling maps to the one canonical op name."""
    assert canonical_from_qualname(qualname) == expected


@pytest.mark.parametrize(
    "qualname",
    [
        "torch.Tensor.shape.__get__",
        "torch.Tensor.dtype.__get__",
        "torch.Tensor.device.__get__",
        "torch.Tensor.T.__set__",  # a property write is never an op
        "torch.Tensor.size",
        "torch.Tensor.dim",
        "torch.Tensor.numel",
        "torch.Tensor.item",
        "torch.Tensor.tolist",
        "torch.Tensor.__len__",
        "torch.Tensor.__bool__",
        "torch.Tensor.__repr__",
        "torch.Tensor.__format__",
        "torch.is_grad_enabled",
    ],
)
def test_metadata_queries_are_none(qualname: str) -> None:
    """Metadata queries and object-protocol calls are not graph ops."""
    assert canonical_from_qualname(qualname) is None


def test_inplace_and_out_of_place_stay_distinct() -> None:
    """``add_`` (in place) is not folded into ``add``: the graph must show the mutation."""
    assert canonical_from_qualname("torch.Tensor.add_") == "add_"
    assert canonical_from_qualname("torch.Tensor.add") == "add"


@pytest.mark.parametrize(
    ("func", "expected"),
    [
        (F.linear, "linear"),
        (torch._C._nn.linear, "linear"),
        (torch.Tensor.add, "add"),
        (torch.Tensor.__radd__, "add"),
        (torch.concat, "cat"),
        (torch.divide, "div"),
        (torch.Tensor.T.__get__, "t"),  # type: ignore[attr-defined]
        (torch.Tensor.mT.__get__, "transpose"),  # type: ignore[attr-defined]
        (torch.Tensor.shape.__get__, None),  # type: ignore[attr-defined]
        (torch.Tensor.size, None),
        (torch.Tensor.dim, None),
    ],
)
def test_canonical_op_on_callables(func: object, expected: str | None) -> None:
    """``canonical_op`` resolves real torch callables (property getters included)."""
    name, raw = canonical_op(func)
    assert name == expected
    assert raw  # the resolved qualified name is kept for debugging
    assert canonical_op(func) == (name, raw)  # cached lookup gives the same answer


def test_canonical_op_unknown_callable_falls_back_to_qualname() -> None:
    """A callable torch does not know is named from ``__module__.__qualname__``."""

    def my_op(x: object) -> object:
        return x

    name, raw = canonical_op(my_op)
    assert raw.endswith("my_op")
    assert name is not None and name.endswith("my_op")
