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
    # four stages, two a rank (0 and 2 here, 1 and 3 there), with and without a loss
    deep = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), *[nn.Linear(16, 16) for _ in range(2)])
    deep.append(nn.Linear(16, 8))
    parts = [deep[0:2], deep[2:3], deep[3:4], deep[4:5]]
    for with_loss in (False, True):
        mine: list[Any] = [
            pipelining.PipelineStage(parts[i], i, 4, torch.device("cpu")) for i in (rank, rank + 2)
        ]
        schedule = pipelining.ScheduleInterleaved1F1B(
            mine, n_microbatches=2, loss_fn=nn.functional.mse_loss if with_loss else None
        )
        returned, losses = [], []
        ir = trace_schedule(
            schedule,
            mine,
            *((x,) if rank == 0 else ()),
            target=target if last and with_loss else None,
            losses=losses if last and with_loss else None,
            returned=returned,
        )
        key = "ScheduleInterleaved1F1B" + ("+loss" if with_loss else "")
        results[key] = (dumps(ir), losses if with_loss else returned[0], deep(x).detach())
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


@pytest.mark.distributed
def test_a_schedule_of_several_stages_per_rank(
    stages: list[dict[str, tuple[str, Any, Any]]],
) -> None:
    """Interleaved 1F1B, four stages on two ranks: each rank's stages are module
    nodes ``stage<index>`` (``@1`` for the second microbatch) in the order the
    schedule runs them, each fed by the microbatch or the ``recv`` before it and
    followed by its output's ``send``; the peers are ``prev`` / ``next`` though both
    are the other rank. With a loss the nodes are the same, and the gradients flow
    back as ``backward`` entries: two per stage boundary a rank receives or sends
    across. The last stage returns the serial model's output."""
    name = "ScheduleInterleaved1F1B"
    docs = [loads(rank[name][0]) for rank in stages]
    tops = [[n for n in doc["nodes"] if "/" not in n and "." not in n] for doc in docs]
    assert tops == [
        ["stage0", "send#0", "stage0@1", "send#1", "recv#0", "stage2", "send#2",
         "recv#1", "stage2@1", "send#3"],
        ["recv#0", "stage1", "send#0", "recv#1", "stage1@1", "send#1",
         "recv#2", "stage3", "recv#3", "stage3@1"],
    ]  # fmt: skip
    first = docs[0]
    assert first["nodes"]["stage0@1"]["args"] == ["$microbatch1.input"]
    assert first["nodes"]["stage2"]["args"] == ["$recv#0"]
    assert first["nodes"]["send#2"]["args"] == ["$stage2.3/linear#0"]
    for doc in docs:
        transfers = [v for v in doc["nodes"].values() if v.get("op") in ("send", "recv")]
        assert {(v["op"], v["kwargs"]["peer"]) for v in transfers} == {
            ("send", "next"), ("recv", "prev"),
        }  # fmt: skip
        assert doc["plan"]["<root>"]["pipeline"] == {
            "schedule": name, "microbatches": 2, "stages": 4,
        }  # fmt: skip
        assert "collectives" not in doc
    (_, output, serial) = stages[1][name]
    torch.testing.assert_close(output, serial)
    assert stages[0][name][1] is None
    for doc, rank, (recvs, sends) in zip(docs, stages, ((4, 2), (2, 4)), strict=True):
        with_loss = loads(rank[f"{name}+loss"][0])
        assert with_loss["nodes"] == doc["nodes"]
        entries = list(with_loss["collectives"].values())
        assert [e["peer"] for e in entries if e["op"] == "recv"] == ["next"] * recvs
        assert [e["peer"] for e in entries if e["op"] == "send"] == ["prev"] * sends
        assert {e["phase"] for e in entries} == {"backward"}
    assert len(stages[1][f"{name}+loss"][1]) == 2  # one loss a microbatch


def test_what_is_no_schedule_or_stage_is_refused() -> None:
    """Anything but a pipeline schedule, or several stages for a single-stage
    schedule, is refused, naming what is supported."""
    with pytest.raises(TypeError, match="not a pipeline schedule"):
        trace_schedule(object(), None)
    from torch.distributed import pipelining

    schedule = pipelining.ScheduleGPipe.__new__(pipelining.ScheduleGPipe)
    with pytest.raises(TypeError, match="a list of this rank's stages"):
        trace_schedule(schedule, [None, None])
