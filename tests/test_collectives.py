"""Collectives as nodes: tensor parallelism and FSDP2 on 2 ranks of the ``threaded``
process group (:func:`pytest_graphir.parallel.run_ranks`), traced with ``stats=False``."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.distributed as dist
from models import MLP  # fixtures/models.py
from torch import nn

from pytest_graphir import trace
from pytest_graphir.capture.collectives import op_name
from pytest_graphir.compare import compare
from pytest_graphir.names import parse_peer, peer_name
from pytest_graphir.parallel import run_ranks
from pytest_graphir.serialize import dumps, loads

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="no torch.distributed")


def _mesh(name: str) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (2,), mesh_dim_names=(name,))


def _tp_mlp() -> MLP:
    """Colwise fc1, Rowwise fc2 over the 1-D mesh ``tp``; the same weights on each rank."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    torch.manual_seed(0)
    model = MLP(out=8)
    parallelize_module(model, _mesh("tp"), {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    return model


def _run(fn: Any) -> list[Any]:
    """``[fn(0), fn(1)]`` on 2 threaded ranks."""
    return run_ranks(lambda rank, world: fn(rank))


ALL_REDUCE = {"group": "tp", "group_size": 2, "reduce": "sum", "bytes": 64}
"""The TP MLP's all-reduce of fc2's partial [2, 8] float32 output."""


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("all_reduce", "all_reduce"),
        ("allreduce_", "all_reduce"),
        ("all_gather_into_tensor", "all_gather"),
        ("_allgather_base_", "all_gather"),
        ("all_gather_single", "all_gather"),
        ("reduce_scatter_tensor_out", "reduce_scatter"),
        ("_reduce_scatter_base_", "reduce_scatter"),
        ("all_to_all_single", "all_to_all"),
        ("alltoall_base_", "all_to_all"),
        ("shard_dim_alltoall", "all_to_all"),
        ("broadcast_", "broadcast"),
        ("isend", "send"),
        ("recv_any_source_", "recv"),
    ],
)
def test_op_name_is_the_same_for_every_implementation(name: str, expected: str) -> None:
    assert op_name(name) == expected


@pytest.mark.parametrize(
    ("peer", "rank", "size", "text"),
    [(1, 0, 2, "<rank+1>"), (0, 1, 2, "<rank+1>"), (3, 0, 4, "<rank-1>"), (2, 1, 4, "<rank+1>")],
)
def test_a_peer_is_written_relative_to_the_rank(peer: int, rank: int, size: int, text: str) -> None:
    assert peer_name(peer, rank, size) == text
    assert parse_peer(text) == int(text[5:-1])
    assert parse_peer("<rank>") is None and parse_peer("<rank+x>") is None
    assert parse_peer("<rank+\u00b2>") is None  # a digit to isdigit(), not to int()


def test_tp_forward_all_reduce_is_one_node_and_ranks_agree() -> None:
    def rank(r: int) -> tuple[str, str, Any]:
        model = _tp_mlp()
        torch.manual_seed(1)
        x = torch.randn(2, 8)
        first = trace(model, x, stats=False)
        return dumps(first), dumps(trace(model, x, stats=False)), first

    (text0, again0, graph), (text1, again1, _) = _run(rank)
    assert text0 == again0 == text1 == again1
    collectives = [n for n in graph.nodes if n.target == "all_reduce"]
    # fc2's RowwiseParallel output hook issues it, after fc2's scope closed: named in
    # fc2's call all the same
    assert [n.name for n in collectives] == ["fc2/all_reduce#0"]
    node = collectives[0]
    assert node.args == ["$fc2/linear#0"]  # the Partial DTensor whose local shard it reduces
    assert node.kwargs == {**ALL_REDUCE, "phase": "forward", "implicit": False}
    assert [(o.shape, o.dtype) for o in node.outputs] == [([2, 8], "float32")]
    assert graph.outputs["output"]["ref"] == "$fc2/all_reduce#0"
    assert not [n.name for n in graph.nodes if "c10d" in n.target or "distributed" in n.target]


def test_a_style_hooks_collective_stays_out_of_a_blackbox_module() -> None:
    """A blackbox module holds no node: the output all-reduce of a blackbox fc2's
    RowwiseParallel hook is at the root, after fc2's one node, and reads its output."""

    def rank(r: int) -> Any:
        torch.manual_seed(1)
        return trace(_tp_mlp(), torch.randn(2, 8), stats=False, blackbox=["fc2"])

    for graph in _run(rank):
        names = [n.name for n in graph.nodes]
        assert not [n for n in names if n.startswith("fc2/")], names
        assert names[names.index("fc2") + 1] == "all_reduce#0", names
        assert graph.outputs["output"]["ref"] == "$all_reduce#0"


def test_tp_backward_collectives_section_in_firing_order() -> None:
    from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

    class Checkpointed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mlp = _tp_mlp()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with set_checkpoint_early_stop(False):  # recompute fc2's output hook too
                return checkpoint(self.mlp, x, use_reentrant=False)  # type: ignore[no-any-return]

    def rank(r: int) -> tuple[str, str]:
        torch.manual_seed(1)
        x = torch.randn(2, 8, requires_grad=True)
        plain = trace(_tp_mlp(), x, stats=False, backward=True)
        return dumps(plain), dumps(trace(Checkpointed(), x, stats=False, backward=True))

    (plain0, ac0), (plain1, ac1) = _run(rank)
    assert (plain0, ac0) == (plain1, ac1)
    attrs = {**ALL_REDUCE, "implicit": False, "dtype": "float32", "in": [[2, 8]], "out": [[2, 8]]}
    # ColwiseParallel's input: the gradient of the replicated x is summed over the ranks
    backward = {"op": "all_reduce", **attrs, "phase": "backward"}
    doc = loads(plain0)
    assert doc["collectives"] == {"backward/all_reduce#0": backward}
    assert list(doc)[list(doc).index("backward") + 1] == "collectives"
    recompute = {"op": "all_reduce", "module": "mlp.fc2", **attrs, "phase": "recompute"}
    assert list(loads(ac0)["collectives"].items()) == [
        ("recompute/all_reduce#0", recompute),
        ("backward/all_reduce#0", backward),
    ]


def test_implicit_redistribution_is_marked_and_an_explicit_one_is_not() -> None:
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    class MatMul(nn.Module):
        def __init__(self, mesh: Any) -> None:
            super().__init__()
            self.w = nn.Parameter(distribute_tensor(torch.randn(8, 8), mesh, [Shard(0)]))

        def forward(self, x: Any) -> Any:
            y = torch.mm(x, self.w)  # Shard(0) @ Shard(0): DTensor all-gathers w
            return y.redistribute(placements=[Replicate()])  # type: ignore[attr-defined]

    def rank(r: int) -> Any:
        torch.manual_seed(0)
        mesh = _mesh("tp")
        model = MatMul(mesh)
        x = distribute_tensor(torch.randn(4, 8), mesh, [Shard(0)])
        return trace(model, x, stats=False)

    graph, other = _run(rank)
    assert dumps(graph) == dumps(other)
    gathers = {n.name: n for n in graph.nodes if n.target == "all_gather"}
    assert list(gathers) == ["all_gather#0", "all_gather#1"]
    implicit, explicit = gathers.values()
    assert implicit.args == ["$w"]
    assert implicit.kwargs == {
        **{"group": "tp", "group_size": 2, "bytes": 256, "phase": "forward"},
        "implicit": True,
    }
    assert [n.name for n in graph.nodes].index("mm#0") == 1  # the gather runs inside mm
    assert explicit.args == ["$mm#0"]
    assert explicit.kwargs["implicit"] is False
    assert explicit.kwargs["bytes"] == 128  # the gathered [4, 8] float32


def test_fsdp2_forward_all_gathers_name_the_mesh_and_not_the_rank() -> None:
    from torch.distributed.fsdp import fully_shard

    def rank(r: int) -> Any:
        torch.manual_seed(0)
        model = MLP(out=8)
        mesh = _mesh("dp")
        fully_shard(model.fc1, mesh=mesh)
        fully_shard(model, mesh=mesh)
        torch.manual_seed(1 + r)  # each rank its own batch
        return trace(model, torch.randn(2, 8), stats=False)

    graph, other = _run(rank)
    assert dumps(graph) == dumps(other)
    gathers = {n.name: n.kwargs for n in graph.nodes if n.target == "all_gather"}
    common = {"group": "dp", "group_size": 2, "phase": "forward", "implicit": False}
    # the root's parameters (fc2's, 8x16 + 8: 136 floats), then fc1's (16x8 + 16: 144)
    assert gathers == {
        "all_gather#0": {**common, "bytes": 136 * 4},
        "fc1/all_gather#0": {**common, "bytes": 144 * 4},
    }
    # FSDP's own bookkeeping around the all-gather (copy-in, views, split) is not the
    # model's: only the collective is a node
    assert not [n for n in graph.nodes if n.target.startswith("fsdp.")]


def test_a_rank_valued_argument_is_written_rank() -> None:
    """An op argument named ``rank`` in its schema (FSDP's copy-in, called here as a
    model would) is written ``<rank>``: the ranks' traces agree."""
    import torch.distributed.fsdp

    class CopyIn(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = torch.empty(2 * x.numel())
            rank = dist.get_rank()
            return torch.ops.fsdp.all_gather_copy_in([x], out, [x.numel()], x.numel(), rank)[0]

    graph, other = _run(lambda r: trace(CopyIn(), torch.ones(4), stats=False))
    assert dumps(graph) == dumps(other)
    (copy_in,) = [n for n in graph.nodes if n.target == "fsdp.all_gather_copy_in"]
    assert copy_in.args[-1] == "<rank>"


def test_patch_interceptor_gives_the_mode_s_text_on_a_tp_model() -> None:
    def rank(r: int, interceptor: str) -> str | None:
        model = _tp_mlp()
        torch.manual_seed(1)
        x = torch.randn(2, 8)
        if r == 1 and interceptor == "patch":
            model(x).wait()  # patches are process-wide: one patch trace at a time
            return None
        return dumps(trace(model, x, stats=False, interceptor=interceptor))  # type: ignore[arg-type]

    mode, _ = _run(lambda r: rank(r, "mode"))
    patch, _ = _run(lambda r: rank(r, "patch"))
    assert patch == mode
    assert "all_reduce#0" in mode


class _Api(nn.Module):
    """Calls each ``torch.distributed`` collective the threaded group implements."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rank = dist.get_rank()
        out = torch.zeros(4, 4)
        dist.all_gather_into_tensor(out, x)
        half = torch.zeros(1, 4)
        dist.reduce_scatter_tensor(half, x)
        dist.all_reduce(half)
        dist.broadcast(out, 0)
        dist.gather(x, [torch.zeros_like(x) for _ in range(2)] if rank == 0 else None, 0)
        part = torch.zeros_like(x)
        dist.scatter(part, [x, x + 1] if rank == 0 else None, 0)
        swapped = torch.zeros_like(x)
        dist.all_to_all_single(swapped, x)
        dist.barrier()
        return out.sum() + half.sum() + part + swapped


@pytest.mark.filterwarnings("ignore:`torch.distributed.*` is deprecated:FutureWarning")
def test_the_threaded_group_s_collectives_are_nodes_and_its_own_ops_none() -> None:
    """On threaded ranks (a Python process group, no dispatcher op) each
    ``torch.distributed`` call is one node, as on gloo: the barrier too, and none of
    the ops the group runs for it (its barrier's ``ones``, ``stack``, ``copy_``)."""

    def rank(r: int) -> tuple[str, Any]:
        torch.manual_seed(0)
        x = torch.randn(2, 4)
        graph = trace(_Api(), x)
        return dumps(graph), graph

    (text0, graph0), (text1, _) = _run(rank)
    ops = [n.target for n in graph0.nodes]
    assert ops == ["zeros", "all_gather", "zeros", "reduce_scatter", "all_reduce",
                   "broadcast", "zeros_like", "zeros_like", "gather", "zeros_like", "add",
                   "scatter", "zeros_like", "all_to_all", "barrier", "sum", "sum", "add",
                   "add", "add"]  # fmt: skip
    nodes = loads(text0)["nodes"]
    assert nodes["all_gather#0"]["args"] == ["$x"]
    assert nodes["reduce_scatter#0"]["kwargs"]["reduce"] == "sum"
    assert nodes["barrier#0"]["kwargs"] == {"group": [0, 1], "group_size": 2, "bytes": 0,
                                            "phase": "forward", "implicit": False}  # fmt: skip
    assert nodes["all_reduce#0"]["args"] == ["$reduce_scatter#0"]
    assert "barrier#0" in loads(text1)["nodes"]


def test_a_plain_model_gets_no_recorder() -> None:
    from pytest_graphir.capture.state import TraceState

    model = MLP(out=8)
    assert not dist.is_initialized()
    assert TraceState(model, None).dist is None  # what the tracer checks for a recorder
    graph = trace(model, torch.randn(2, 8), backward=True)
    assert "collectives" not in graph.sections
    assert "collectives" not in dumps(graph)


def test_collectives_section_round_trips_lints_and_compares() -> None:
    entry = {"op": "all_reduce", **ALL_REDUCE, "phase": "backward", "implicit": False}
    gather = {"op": "all_gather", "group": "tp", "group_size": 2, "bytes": 128}
    graph = trace(MLP(out=8), torch.randn(2, 8), stats=False, backward=True)
    graph.sections["collectives"] = {
        "backward/all_reduce#0": entry,
        "backward/all_gather#0": gather,
    }
    graph.lint()
    text = dumps(graph)
    assert text.index("\nbackward:") < text.index("\ncollectives:") < text.index("\ngrads:")
    stored = loads(text)
    assert stored["collectives"] == graph.sections["collectives"]
    assert not compare(stored, copy.deepcopy(stored))

    bigger = copy.deepcopy(stored)
    bigger["collectives"]["backward/all_reduce#0"]["bytes"] = 256
    changes = compare(stored, bigger).changes
    assert [(c.section, c.node, c.field, c.old, c.new) for c in changes] == [
        # the sequence line first (what a reviewer reads), then the entry
        ("collectives", "", "", "all_reduce(tp, 64 B)", "all_reduce(tp, 256 B)"),
        ("collectives", "backward/all_reduce#0", "bytes", 64, 256),
    ]

    swapped = copy.deepcopy(stored)
    swapped["collectives"] = dict(reversed(list(stored["collectives"].items())))
    changes = compare(stored, swapped).changes
    assert [(c.kind, c.section) for c in changes] == [
        ("changed", "collectives"),  # the sequence line
        ("reordered", "collectives"),
    ]

    graph.sections["collectives"] = ["backward/all_reduce#0"]
    assert graph.lint_problems() == ["section collectives: not a mapping"]


class _EveryOp(nn.Module):
    """A forward with every point-to-point op and the rooted collectives, on 2 ranks."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rank = dist.get_rank()
        other = 1 - rank
        y = self.fc(x)
        if rank == 0:  # blocking send and recv
            dist.send(y, 1)
        else:
            dist.recv(y, 0)
        got = torch.zeros_like(y)
        sent, received = dist.isend(y, other), dist.irecv(got, other)
        sent.wait()  # the recorder waits for no transfer: an exchange would deadlock
        received.wait()
        batch = torch.zeros_like(y)
        ops = [dist.P2POp(dist.isend, y * 2, other), dist.P2POp(dist.irecv, batch, other)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        dist.broadcast(got, 0)
        dist.reduce(batch, 0)
        dist.gather(y, [torch.zeros_like(y) for _ in range(2)] if rank == 0 else None, 0)
        part = torch.zeros_like(y)
        dist.scatter(part, [y, y + 1] if rank == 0 else None, 0)
        swapped = torch.zeros_like(y)
        dist.all_to_all_single(swapped, y)
        dist.barrier()
        return got + batch + part + swapped


def _every_op(rank: int, world: int) -> tuple[str, str, list[str]]:
    import warnings

    torch.manual_seed(0)
    model, x = _EveryOp(), torch.randn(2, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        texts = [dumps(trace(model, x)) for _ in range(2)]
    return texts[0], texts[1], [str(w.message) for w in caught]


@pytest.mark.distributed
@pytest.mark.slow
def test_point_to_point_and_rooted_collectives_are_nodes_on_gloo() -> None:
    """On 2 gloo processes every transfer of a forward is a node: ``send`` and
    ``recv`` (blocking, ``isend``/``irecv``, ``batch_isend_irecv``) with the peer
    relative to the rank, the rooted collectives and the barrier; nothing warns, and
    a second trace gives the same text."""
    (text0, again0, warned0), (text1, again1, warned1) = run_ranks(
        _every_op, backend="gloo", timeout=120
    )
    assert (text0, text1) == (again0, again1)
    assert warned0 == warned1 == []
    ops = {}
    for rank, text in enumerate((text0, text1)):
        nodes = loads(text)["nodes"]
        ops[rank] = [(n, v["kwargs"].get("peer")) for n, v in nodes.items()
                     if v.get("kwargs", {}).get("phase") == "forward"]  # fmt: skip
    tail = [("broadcast#0", None), ("reduce#0", None), ("gather#0", None),
            ("scatter#0", None), ("all_to_all#0", None), ("barrier#0", None)]  # fmt: skip
    peer = "<rank+1>"  # the other of 2 ranks: the next, as it is the previous
    assert ops[0] == [("send#0", peer), ("send#1", peer), ("recv#0", peer),
                      ("send#2", peer), ("recv#1", peer), *tail]  # fmt: skip
    assert ops[1] == [("recv#0", peer), ("send#0", peer), ("recv#1", peer),
                      ("send#1", peer), ("recv#2", peer), *tail]  # fmt: skip
    nodes0, nodes1 = loads(text0)["nodes"], loads(text1)["nodes"]
    sent = nodes0["send#0"]
    assert sent["out"] == [] and sent["kwargs"]["bytes"] == 32
    # the tensor rank 1 received is described by its values: rank 0's fc output
    stats = {k: v for k, v in nodes1["recv#0"]["out"][0].items() if k not in ("shape", "dtype")}
    assert stats and stats == {
        k: v for k, v in nodes0["fc/linear#0"]["out"][0].items() if k not in ("shape", "dtype")
    }
    assert nodes1["broadcast#0"]["args"] == ["$recv#1"]  # got: the irecv's output
    assert nodes0["barrier#0"] == {
        "op": "barrier",
        "kwargs": {"group": [0, 1], "group_size": 2, "bytes": 0, "phase": "forward",
                   "implicit": False},
        "out": [],
    }  # fmt: skip


class _Dispatch(nn.Module):
    """An MoE layer's dispatch: each token goes to the rank its gate picks; the
    counts are exchanged first, then the tokens with those split sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        picked = self.gate(x).argmax(-1)
        order = picked.argsort()
        sent = torch.bincount(picked, minlength=2)
        got = torch.zeros_like(sent)
        dist.all_to_all_single(got, sent)
        tokens = torch.zeros(int(got.sum()), 4)
        dist.all_to_all_single(tokens, x[order], got.tolist(), sent.tolist())
        return tokens


def test_all_to_all_single_records_its_split_sizes() -> None:
    """An ``all_to_all_single`` with split sizes writes them, this rank's (``in``: what
    it sends to each rank, ``out``: what it receives from each); one with even splits
    writes none."""

    def rank(r: int) -> tuple[dict[str, Any], list[int]]:
        torch.manual_seed(0)
        model, x = _Dispatch(), torch.randn(6, 4) + r
        nodes = loads(dumps(trace(model, x, stats=False)))["nodes"]
        return nodes, torch.bincount(model.gate(x).argmax(-1), minlength=2).tolist()

    results = _run(rank)
    for me, (nodes, sent) in enumerate(results):
        assert "splits" not in nodes["all_to_all#0"]["kwargs"]  # the counts: even
        splits = nodes["all_to_all#1"]["kwargs"]["splits"]
        assert splits == {"in": sent, "out": [other[me] for _, other in results]}
