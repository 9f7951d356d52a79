"""Tests of ``pytest_graphir.opnames``: canonical op names for qualified names and callables."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import torch
import torch.nn.functional as F

from pytest_graphir import trace
from pytest_graphir.opnames import (
    _ALIAS,
    _DUNDER,
    PROPERTY_ATEN_OPS,
    canonical_from_qualname,
    canonical_op,
)


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
        # dtype casts are ops, whatever the target dtype
        ("torch.Tensor.int", "int"),
        ("torch.Tensor.bool", "bool"),
        ("torch.Tensor.float", "float"),
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


def _same_builtin_names() -> list[tuple[str, str]]:
    """Every pair of names one namespace of torch exposes one builtin under (the
    callables compare equal: ``torch.mm == torch.spmm``)."""
    import itertools

    pairs = []
    for space in (torch, torch.Tensor, torch.nn.functional, torch._C._nn, torch.linalg):
        groups: dict[object, list[str]] = {}
        for attr in dir(space):
            value = getattr(space, attr, None)
            if isinstance(value, (type(len), type(str.join))):
                groups.setdefault(value, []).append(attr)
        for names in groups.values():
            pairs += [
                (f"{space.__name__}.{a}", f"{space.__name__}.{b}")
                for a, b in itertools.combinations(names, 2)
            ]
    return pairs


@pytest.mark.parametrize(("first", "second"), _same_builtin_names())
def test_a_builtin_under_two_names_is_named_as_called(first: str, second: str) -> None:
    """Where torch exposes one builtin under two names, each name resolves to itself
    (``torch.mm`` is ``mm``, not ``spmm``), whichever of them was resolved first."""
    import importlib

    def lookup(dotted: str) -> object:
        head, _, attr = dotted.rpartition(".")
        owner = torch.Tensor if head == "Tensor" else importlib.import_module(head)
        return getattr(owner, attr)

    for name in (first, second, first):
        func = lookup(name)
        own = getattr(func, "__name__", "")
        attr = name.rpartition(".")[2]
        if own != attr:  # an alias whose builtin carries the other name: either is right
            continue
        assert canonical_op(func)[0] == canonical_from_qualname(f"torch.{attr}"), name


def test_dense_mm_is_recorded_as_mm_by_both_interceptors() -> None:
    """``torch.mm`` on dense tensors is the node ``mm#0``, not ``spmm#0`` or ``dsmm#0``,
    though ``torch.spmm`` and ``torch.dsmm`` are the same builtin and were resolved first."""
    from pytest_graphir import trace

    canonical_op(torch.spmm)  # the cache holds spmm's answer first

    class Mm(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.mm(a, b)

    # patch first: its wrappers name every alias of the builtin (torch.dsmm, torch.spmm),
    # and the mode's per-callable cache must not hand one alias's name to another
    for interceptor in ("patch", "mode"):
        graph = trace(Mm(), torch.ones(2, 3), torch.ones(3, 4), interceptor=interceptor)
        assert [n.name for n in graph.nodes if n.kind == "op"] == ["mm#0"], interceptor


def test_renaming_tables_are_one_lookup_apart() -> None:
    """``canonical_from_qualname`` renames with one lookup over the three tables: that
    is only right while they share no key and no name one gives is renamed by another."""
    tables: list[Mapping[str, str | None]] = [_DUNDER, _ALIAS, PROPERTY_ATEN_OPS]
    keys = [k for table in tables for k in table]
    assert len(keys) == len(set(keys))
    assert not {v for table in tables for v in table.values()} & set(keys)


class _Casts(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x > 0).int() * 2 + x.bool().long()


@pytest.mark.parametrize("interceptor", ["mode", "patch"])
def test_int_and_bool_casts_are_ops_on_the_edge(interceptor: str) -> None:
    """``x.int()`` and ``x.bool()`` are dtype casts, not metadata queries: each is an op
    node, and the op that reads the cast reads that node (the edge from ``gt`` goes
    through ``int``, not to an unlabelled tensor)."""
    g = trace(_Casts(), torch.randn(3), stats=False, interceptor=interceptor)  # type: ignore[arg-type]
    args = {n.name: n.args for n in g.nodes if n.kind == "op"}
    assert args["int#0"] == ["$gt#0"] and args["bool#0"] == ["$x"]
    assert args["mul#0"] == ["$int#0", 2] and args["long#0"] == ["$bool#0"]
