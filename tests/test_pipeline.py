"""Pipeline parallelism: one rank's stage traced through a whole schedule step
(:func:`pytest_graphir.parallel.trace_schedule`), on 2 gloo processes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from pytest_graphir.parallel import run_ranks, trace_schedule
from pytest_graphir.serialize import dumps, loads

TORCH = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])
pytestmark = [
    pytest.mark.skipif(not dist.is_available(), reason="no torch.distributed"),
    pytest.mark.skipif(
        TORCH < (2, 13),
        reason="torch.distributed.pipelining on gloo aborts in torch 2.9.1 itself (its "
        "shape-inference handshake: 'Received data size doesn't match expected size', "
        "without the plugin); 2.10 to 2.12 not tried",
    ),
]

SCHEDULES = ("ScheduleGPipe", "Schedule1F1B")


def _stages(rank: int, world: int) -> dict[str, tuple[str, Any, Any]]:
    """Per schedule: the stage's trace text, the step's return and the serial
    model's output, for a 4-layer MLP cut in two ``nn.Sequential`` halves."""
    from torch.distributed import pipelining

    torch.manual_seed(0)
    model, x = (
        nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.Linear(16, 8)),
        torch.randn(4, 8),
    )
    half = nn.Sequential(*list(model)[:2]) if rank == 0 else nn.Sequential(*list(model)[2:])
    results = {}
    for name in SCHEDULES:
        stage = pipelining.PipelineStage(half, rank, world, torch.device("cpu"))
        schedule = getattr(pipelining, name)(stage, n_microbatches=2)
        returned: list[Any] = []
        ir = trace_schedule(schedule, stage, *((x,) if rank == 0 else ()), returned=returned)
        results[name] = (dumps(ir), returned[0], model(x).detach())
    target, last = torch.randn(4, 8), rank == world - 1
    for name in SCHEDULES:  # with a loss_fn: the step runs each microbatch's backward
        stage = pipelining.PipelineStage(half, rank, world, torch.device("cpu"))
        loss_fn = nn.functional.mse_loss
        schedule = getattr(pipelining, name)(stage, n_microbatches=2, loss_fn=loss_fn)
        losses: list[Any] = []
        ir = trace_schedule(
            schedule,
            stage,
            *((x,) if rank == 0 else ()),
            target=target if last else None,
            losses=losses if last else None,
        )
        results[f"{name}+loss"] = (dumps(ir), losses, None)
    return results


@pytest.fixture(scope="module")
def stages() -> list[dict[str, tuple[str, Any, Any]]]:
    return run_ranks(_stages, world_size=2, backend="gloo", timeout=60)  # type: ignore[no-any-return]


@pytest.mark.distributed
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_stage_traced_through_a_schedule_step(
    stages: list[dict[str, tuple[str, Any, Any]]], schedule: str
) -> None:
    """Each stage's blocks are module nodes, one call per microbatch (``0``,
    ``0@1``); its activations' ``send`` / ``recv`` are nodes whose peer is the stage
    it talks to (``next`` / ``prev``), never a rank; the schedule's own handshakes
    and shape inference add nothing; ``plan`` names the schedule."""
    first, last = (loads(rank[schedule][0]) for rank in stages)
    for doc in (first, last):
        assert doc["plan"] == {
            "<root>": {"pipeline": {"schedule": schedule, "microbatches": 2, "stages": 2}}
        }
    nodes = {
        n: (v.get("module") or v["op"], v.get("kwargs", {}).get("peer"))
        for n, v in first["nodes"].items()
    }
    assert [(n, m) for n, (m, _) in nodes.items() if "/" not in n] == [
        ("0", "Linear"), ("1", "ReLU"), ("send#0", "send"),
        ("0@1", "Linear"), ("1@1", "ReLU"), ("send#1", "send"),
    ]  # fmt: skip
    assert {p for _, p in nodes.values() if p} == {"next"}
    assert first["nodes"]["send#1"]["args"] == ["$1@1/relu#0"]  # what the stage sent
    assert first["nodes"]["0@1"]["args"] == ["$microbatch1.input"]
    assert list(first["inputs"]) == ["input", "microbatch0.input", "microbatch1.input"]
    assert first["inputs"]["microbatch0.input"]["shape"] == [2, 8]
    tops = [(n, v.get("module") or v["op"]) for n, v in last["nodes"].items() if "/" not in n]
    assert tops == [
        ("recv#0", "recv"), ("0", "Linear"), ("1", "Linear"),
        ("recv#1", "recv"), ("0@1", "Linear"), ("1@1", "Linear"),
    ]  # fmt: skip
    assert last["nodes"]["recv#0"]["kwargs"]["peer"] == "prev"
    assert last["nodes"]["0@1"]["args"] == ["$recv#1"]  # reads what it received
    # the received tensor is described by its values: what the first stage sent
    stats = {k: v for k, v in last["nodes"]["recv#1"]["out"][0].items() if k != "shape"}
    assert stats == {
        k: v for k, v in first["nodes"]["1@1/relu#0"]["out"][0].items() if k != "shape"
    }
    assert last["inputs"] == {} and first["outputs"] == {"output": None}
    assert last["outputs"]["output"]["shape"] == [4, 8]


@pytest.mark.distributed
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_the_last_stage_returns_the_serial_models_output(
    stages: list[dict[str, tuple[str, Any, Any]]], schedule: str
) -> None:
    """The step traced still computes the model: the last stage's merged output
    equals the serial model's on the whole batch."""
    (_, nothing, _), (_, output, serial) = (rank[schedule] for rank in stages)
    assert nothing is None
    torch.testing.assert_close(output, serial)


@pytest.mark.distributed
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_schedules_gradient_transfers_are_backward_entries(
    stages: list[dict[str, tuple[str, Any, Any]]], schedule: str
) -> None:
    """With a ``loss_fn`` the step also runs the backward: each microbatch's gradient
    goes back from the last stage to the first, a ``send`` to ``prev`` there and a
    ``recv`` from ``next`` here, in the ``collectives`` section (phase ``backward``),
    never as a node: the forward's nodes are those of the step without a loss. A
    step without a loss has no such section."""
    (plain0, _, _), (plain1, _, _) = (rank[schedule] for rank in stages)
    (first, _, _), (last, losses, _) = (rank[f"{schedule}+loss"] for rank in stages)
    first_doc, last_doc = loads(first), loads(last)
    assert len(losses) == 2  # one loss a microbatch: the backward ran
    assert "collectives" not in loads(plain0) and "collectives" not in loads(plain1)
    assert first_doc["nodes"] == loads(plain0)["nodes"]
    assert last_doc["nodes"] == loads(plain1)["nodes"]
    # a microbatch of 2 rows: the gradient of the first stage's [2, 16] float32 output
    shape, size = [2, 16], 2 * 16 * 4
    for doc, op, peer in ((first_doc, "recv", "next"), (last_doc, "send", "prev")):
        entries = doc["collectives"]
        assert list(entries) == [f"backward/{op}#0", f"backward/{op}#1"], entries
        for entry in entries.values():
            assert entry["op"] == op and entry["peer"] == peer and entry["phase"] == "backward"
            assert entry["bytes"] == size and entry["dtype"] == "float32"
            assert entry["in" if op == "send" else "out"] == [shape]


def test_only_single_stage_schedules_are_traced() -> None:
    """A schedule of several stages per rank (or anything else) is refused, naming
    what is supported."""
    with pytest.raises(TypeError, match="not a single-stage schedule"):
        trace_schedule(object(), None)
