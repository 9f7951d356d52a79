"""Ranks launched from a test (``run_ranks``), per-rank snapshots, ranks compared with
each other and with the serial model (``pytest_graphir.parallel``)."""

from __future__ import annotations

import copy
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest
import torch
import torch.distributed as dist
from models import MLP  # fixtures/models.py
from torch import nn
from workflow import run

from pytest_graphir import trace
from pytest_graphir.names import canonical_module_path
from pytest_graphir.parallel import (
    _ASYNC_EXC_SPINS,
    RankError,
    assert_parallel_equals_serial,
    assert_ranks_agree,
    run_ranks,
)
from pytest_graphir.serialize import dumps

TORCH = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])


def _all_reduce(rank: int, world: int) -> float:
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return float(t.item())


def _rank1_fails(rank: int, world: int) -> None:
    if rank == 1:
        raise ValueError("boom on purpose")
    dist.all_reduce(torch.ones(1))  # rank 0 would wait for ever: it is woken


def _rank1_skips(rank: int, world: int) -> int:
    if rank == 0:
        dist.all_reduce(torch.ones(1))  # rank 1 never joins
    return rank


def _mismatch(rank: int, world: int) -> None:
    t = torch.ones(4)
    if rank == 0:
        dist.all_reduce(t)
    else:
        dist.broadcast(t, 0)


def test_threaded_all_reduce_returns_each_ranks_result() -> None:
    threads, state = torch.get_num_threads(), torch.get_rng_state()
    assert run_ranks(_all_reduce) == [3.0, 3.0]
    assert run_ranks(_all_reduce, world_size=3) == [6.0, 6.0, 6.0]
    assert torch.get_num_threads() == threads  # the caller's settings are left alone
    assert torch.equal(torch.get_rng_state(), state)
    assert not dist.is_initialized()


def test_ranks_get_one_thread_a_seed_and_their_args() -> None:
    def probe(rank: int, world: int, scale: int) -> tuple[int, int, int]:
        return torch.get_num_threads(), dist.get_rank() * scale, world

    assert run_ranks(probe, args=(10,)) == [(1, 0, 2), (1, 10, 2)]
    seeded = run_ranks(lambda rank, world: torch.initial_seed(), backend="fake")
    assert seeded == [0, 0]


def _draws(rank: int, world: int) -> list[float]:
    first = torch.rand(2)
    dist.all_reduce(torch.ones(1))  # the other rank runs meanwhile
    return [*first.tolist(), *torch.rand(2).tolist()]


def test_threaded_ranks_draw_as_separate_processes_would() -> None:
    """Threaded ranks share the process's generator: each keeps its own state across
    the switches, so every rank draws what a process seeded with 0 draws."""
    torch.manual_seed(0)
    alone = torch.rand(4).tolist()
    assert run_ranks(_draws, world_size=3) == [alone] * 3
    assert run_ranks(_draws, backend="fake") == [alone] * 2


def test_an_error_names_its_rank_and_traceback() -> None:
    with pytest.raises(RankError) as info:
        run_ranks(_rank1_fails, timeout=30)
    error = info.value
    assert error.rank == 1 and not error.timed_out
    assert str(error).startswith(
        "run_ranks('threaded', world_size=2): rank 1 raised ValueError: boom on purpose; "
        "rank 0 stopped"
    )
    assert "in _rank1_fails" in error.tracebacks[1] and "--- rank 1 ---" in str(error)
    assert run_ranks(_all_reduce) == [3.0, 3.0]  # the threaded group works again


def _rank1_not_close(rank: int, world: int) -> None:
    if rank == 1:
        torch.testing.assert_close(torch.ones(3), torch.tensor([1.0, 2.0, 3.0]))


@pytest.mark.parametrize("backend", ["threaded", "fake"])
def test_the_headline_names_the_exception_and_its_first_line(backend: str) -> None:
    """``assert_close`` ends its message with numbers: the headline is its type and
    first line, the numbers stay in the traceback below."""
    with pytest.raises(RankError) as info:
        run_ranks(_rank1_not_close, backend=backend, timeout=30)
    head = str(info.value).partition("\n")[0]
    assert head.startswith(
        f"run_ranks({backend!r}, world_size=2): rank 1 raised AssertionError: "
        "Tensor-likes are not close!; rank 0 "
    )
    assert "Greatest relative difference" in info.value.tracebacks[1]


def test_a_timeout_names_the_stuck_rank_and_its_collective() -> None:
    with pytest.raises(RankError) as info:
        run_ranks(_rank1_skips, timeout=1.0)
    assert info.value.timed_out and info.value.rank == 0
    assert str(info.value) == (
        "run_ranks('threaded', world_size=2): rank 0 still in all_reduce "
        "(torch/distributed/distributed_c10d.py) after 1 s; rank 1 finished"
    )
    assert run_ranks(_all_reduce) == [3.0, 3.0]


def _rank1_sleeps(rank: int, world: int) -> None:
    if rank == 1:
        time.sleep(30)  # stuck in user code, holding the threaded ranks' baton
    dist.all_reduce(torch.ones(1))


def _rank1_spins(rank: int, world: int) -> None:
    while rank == 1:
        pass
    dist.all_reduce(torch.ones(1))


@pytest.mark.parametrize("stuck", [_rank1_sleeps, _rank1_spins])
def test_a_rank_stuck_in_user_code_is_given_up_on_at_the_timeout(stuck: Any) -> None:
    """A rank thread stuck outside torch.distributed cannot be killed: the error comes
    within a second of the timeout, names it first, and the next run works at once."""
    if stuck is _rank1_spins and _ASYNC_EXC_SPINS and sys.gettrace() is not None:
        pytest.skip("CPython 3.11 under a trace function leaves a stuck rank running")
    before, start = set(threading.enumerate()), time.monotonic()
    with pytest.raises(RankError) as info:
        run_ranks(stuck, timeout=2)
    assert time.monotonic() - start < 3.0
    assert info.value.timed_out and info.value.rank == 1
    assert str(info.value).startswith(
        f"run_ranks('threaded', world_size=2): rank 1 still in {stuck.__name__} "
        "(test_parallel.py) after 2 s; rank 0 still in "
    )
    assert not dist.is_initialized()
    assert run_ranks(_all_reduce, timeout=5) == [3.0, 3.0]
    if stuck is _rank1_spins:  # a Python loop unwinds at once
        assert set(threading.enumerate()) <= before


_TRACED_STUCK_RANK = """
import sys, threading, time
import torch, torch.distributed as dist
from pytest_graphir.parallel import RankError, run_ranks

def tracer(frame, event, arg):  # as coverage or a debugger sets one
    return tracer

def sleeps(rank, world):
    if rank == 1:
        time.sleep(40)  # blocked in C: it would take the exception only when it wakes
    dist.all_reduce(torch.ones(1))

sys.settrace(tracer)
threading.settrace(tracer)
start = time.monotonic()
try:
    run_ranks(sleeps, timeout=2)
except RankError as exc:
    print("gave up" if exc.timed_out else "other", round(time.monotonic() - start, 1))
"""


def test_a_rank_asleep_is_given_up_on_under_a_trace_function(tmp_path: Path) -> None:
    """Under a trace function (coverage, a debugger) a rank blocked in C is given up on
    at the timeout too: on CPython 3.11 an asynchronous exception left waiting for it
    would keep the traced main thread spinning until the rank woke (40 s here)."""
    import subprocess

    script = tmp_path / "traced.py"
    script.write_text(_TRACED_STUCK_RANK)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    words = done.stdout.split()
    assert words[:2] == ["gave", "up"], done.stdout + done.stderr
    assert float(words[2]) < 8.0, done.stdout


def _redistributed(rank: int, world: int) -> bool:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b"))
    full = torch.arange(35.0).reshape(5, 7)  # uneven shards along both dimensions
    x = distribute_tensor(full, mesh, [Shard(0), Shard(0)])
    local = x.redistribute(mesh, [Replicate(), Shard(1)]).to_local()
    return torch.equal(local, distribute_tensor(full, mesh, [Replicate(), Shard(1)]).to_local())


def test_threaded_ranks_of_a_2d_mesh_redistribute_their_own_shards() -> None:
    """Each rank thread's DeviceMesh is its own (torch tells them apart on the
    ``threaded`` backend only): DTensor's process-wide cache of redistribution plans
    never hands one rank another's, so uneven shards land where a process puts them."""
    assert run_ranks(_redistributed, world_size=4) == [True] * 4


def test_a_threaded_run_replaces_nothing_in_torch() -> None:
    """The threaded ranks run torch's own ``multi_threaded_pg`` code: its collectives'
    join and its store barrier are the same objects before, during and after a run."""
    from pytest_graphir.parallel import _threaded_pg

    mt = _threaded_pg()
    before = (mt.Collective.join, mt._store_based_barrier)
    during = run_ranks(lambda r, w: (mt.Collective.join, mt._store_based_barrier))
    assert during == [before, before]
    assert (mt.Collective.join, mt._store_based_barrier) == before


def test_fake_backend_runs_any_world_size() -> None:
    def structure(rank: int, world: int) -> tuple[int, int, list[int]]:
        t = torch.ones(2)
        dist.all_reduce(t)  # does nothing: numbers are meaningless
        return dist.get_rank(), dist.get_world_size(), list(t.shape)

    assert run_ranks(structure, world_size=4, backend="fake") == [(r, 4, [2]) for r in range(4)]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="backend='nccl2'"):
        run_ranks(_all_reduce, backend="nccl2")
    with pytest.raises(ValueError, match="world_size=0"):
        run_ranks(_all_reduce, world_size=0)
    with pytest.raises(TypeError, match="must be picklable"):
        run_ranks(lambda rank, world: rank, backend="gloo")


@pytest.mark.distributed
@pytest.mark.slow
def test_gloo_ranks_are_processes() -> None:
    assert run_ranks(_all_reduce, backend="gloo", timeout=60) == [3.0, 3.0]


@pytest.mark.distributed
@pytest.mark.slow
def test_gloo_reports_a_collective_mismatch_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller's ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` reaches the ranks: mismatched
    collectives fail, not hang."""
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
    with pytest.raises(RankError) as info:
        run_ranks(_mismatch, backend="gloo", timeout=60)
    assert not info.value.timed_out
    assert "Detected mismatch between collectives" in str(info.value)
    assert "Traceback (most recent call last)" in next(iter(info.value.tracebacks.values()))


def _rank1_fails_late(rank: int, world: int) -> None:
    dist.barrier()
    if rank == 1:
        time.sleep(1.0)
        raise ValueError("boom on purpose")
    dist.all_reduce(torch.ones(1))  # gloo's noise about rank 1 would follow


@pytest.mark.distributed
@pytest.mark.slow
def test_gloo_reports_the_first_failure_not_the_others_noise(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """torch.multiprocessing stops the other ranks at the first failure: the error is
    rank 1's, and rank 0's collective error about it is not there. The error file
    torch's ``start_processes`` had rank 1 write is removed, not left in the temp dir."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(RankError) as info:
        run_ranks(_rank1_fails_late, backend="gloo", timeout=30)
    assert not list(tmp_path.iterdir())
    assert info.value.rank == 1 and not info.value.timed_out
    assert str(info.value).startswith(
        "run_ranks('gloo', world_size=2): rank 1 raised ValueError: boom on purpose; "
        "rank 0 stopped\n--- rank 1 ---\nTraceback"
    )
    assert list(info.value.tracebacks) == [1]


# -- comparing ranks -------------------------------------------------------------------


def test_canonical_module_path_strips_wrappers() -> None:
    assert canonical_module_path("fc1._checkpoint_wrapped_module.weight") == "fc1.weight"
    assert canonical_module_path("_orig_mod.layers.0._fsdp_wrapped_module") == "layers.0"
    assert canonical_module_path("fc1.weight") == "fc1.weight"


def test_ranks_agree_in_structure_not_statistics() -> None:
    torch.manual_seed(0)
    model = MLP(out=8)
    shards = [trace(model, torch.randn(2, 8)) for _ in range(2)]  # other numbers
    assert_ranks_agree([shards[0], dumps(shards[1])])
    other = trace(MLP("gelu", out=8), torch.randn(2, 8))
    with pytest.raises(AssertionError) as info:
        assert_ranks_agree([shards[0], shards[1], other])
    lines = str(info.value).splitlines()
    assert lines[0] == "rank 0 and rank 2 differ in structure ('-' rank 0, '+' rank 2):"
    assert any("relu -> gelu" in line or "GELU" in line for line in lines[1:])


def _tp_rank(rank: int, world: int, serial: nn.Module, x: torch.Tensor,
             expected: torch.Tensor, grads: dict[str, torch.Tensor]) -> Any:  # fmt: skip
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    model = copy.deepcopy(serial)  # the ranks share args: each copies
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    parallelize_module(model, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    out = model(x)
    out.sum().backward()
    named = {n: p.grad for n, p in model.named_parameters()}
    assert_parallel_equals_serial(out, expected, parallel_grads=named, serial_grads=grads)
    full = {n: g.full_tensor() for n, g in named.items()}  # type: ignore[union-attr]
    return dumps(trace(model, x, stats=False)), out.wait().detach(), full


def test_tensor_parallel_mlp_equals_serial_and_ranks_agree() -> None:
    torch.manual_seed(0)
    serial, x = MLP(out=8), torch.randn(4, 8)
    expected = serial(x)
    expected.sum().backward()
    grads = {n: p.grad for n, p in serial.named_parameters()}
    results = run_ranks(_tp_rank, args=(serial, x, expected.detach(), grads), timeout=60)
    assert_ranks_agree([text for text, _, _ in results])
    assert '"op": "all_reduce"' in results[0][0] and '"group": "tp"' in results[0][0]
    _, out, full = results[1]
    assert_parallel_equals_serial(out, expected, parallel_grads=full, serial_grads=grads)
    with pytest.raises(AssertionError, match=r"parallel != serial: output output: "):
        assert_parallel_equals_serial(out, expected * 1.01)
    wrapped = {f"_orig_mod.{n}": g for n, g in full.items()}
    bent = {**grads, "fc2.weight": grads["fc2.weight"] + 1e-3}
    with pytest.raises(AssertionError, match=r"gradient of fc2\.weight: Tensor-likes"):
        assert_parallel_equals_serial(out, expected, parallel_grads=wrapped, serial_grads=bent)


class _SPBlock(nn.Module):
    """A Llama-style feed-forward block, run with sequence parallelism."""

    def __init__(self, d: int = 8, ff: int = 16) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, ff, bias=False), nn.SiLU())
        self.out = nn.Linear(ff, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.ffn(self.norm(x)))


def _sp_pair(rank: int, world: int, serial: nn.Module, x: torch.Tensor, drop: bool) -> Any:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    model = copy.deepcopy(serial)
    if drop:
        cast(nn.Sequential, model.ffn)[1] = nn.Identity()  # a layer missing in parallel
    plan = {
        "norm": SequenceParallel(),
        "ffn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "ffn.0": ColwiseParallel(),
        "out": RowwiseParallel(output_layouts=Shard(1)),
    }
    parallelize_module(model, init_device_mesh("cpu", (world,)), plan)
    part = x.chunk(world, dim=1)[rank]  # this rank's part of the sequence
    ir = trace(model, part)
    parts = [torch.empty_like(part) for _ in range(world)]
    dist.all_gather(parts, model(part).detach())
    return ir, trace(serial, x), torch.cat(parts, dim=1)


@pytest.mark.parametrize("drop", [False, True])
def test_sequence_parallel_block_has_the_serial_structure(drop: bool) -> None:
    from pytest_graphir.parallel import assert_serial_structure

    torch.manual_seed(0)
    serial, x = _SPBlock(), torch.randn(2, 4, 8)
    (par, ser, out), _ = run_ranks(_sp_pair, args=(serial, x, drop), timeout=60)
    if not drop:
        torch.testing.assert_close(out, serial(x).detach())
        assert_serial_structure(par, ser)
        return
    with pytest.raises(AssertionError) as info:
        assert_serial_structure(par, ser)
    assert "module ffn.1: Identity -> SiLU" in str(info.value)


def _llama_sp_pair(rank: int, world: int) -> tuple[str, str]:
    """A tiny transformers Llama under a torchtitan-like tensor- and sequence-parallel
    plan (``PrepareModuleInput`` gathers the sequence before attention and the MLP),
    traced beside the serial model; the logits are checked equal first."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    serial = LlamaForCausalLM(config)
    x = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    shard: dict[str, Any] = {"use_local_output": False}
    plan: dict[str, Any] = {
        "model.embed_tokens": RowwiseParallel(
            input_layouts=Replicate(), output_layouts=Shard(1), **shard
        ),
        "model.norm": SequenceParallel(**shard),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }
    for i in range(config.num_hidden_layers):
        layer = f"model.layers.{i}"
        plan[f"{layer}.input_layernorm"] = SequenceParallel(**shard)
        plan[f"{layer}.post_attention_layernorm"] = SequenceParallel(**shard)
        plan[f"{layer}.self_attn"] = PrepareModuleInput(
            input_kwarg_layouts={"hidden_states": Shard(1)},
            desired_input_kwarg_layouts={"hidden_states": Replicate()},
        )
        plan[f"{layer}.mlp"] = PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
        )
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
            plan[f"{layer}.{name}"] = ColwiseParallel()
        for name in ("mlp.gate_proj", "mlp.up_proj"):
            plan[f"{layer}.{name}"] = ColwiseParallel()
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            plan[f"{layer}.{name}"] = RowwiseParallel(output_layouts=Shard(1), **shard)
    model = copy.deepcopy(serial)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    parallelize_module(model, mesh, plan)
    torch.testing.assert_close(model(x).logits, serial(x).logits, rtol=1e-4, atol=1e-5)
    return dumps(trace(model, x)), dumps(trace(serial, x))


def test_a_sequence_parallel_llama_has_the_serial_structure() -> None:
    """The redistribution ops ``PrepareModuleInput`` inserts in a scope (an
    all-gather's ``chunk``, ``cat``, ``contiguous``) are set aside, even where the
    model's own ops of those kinds follow (RoPE's ``cat`` in ``self_attn``): matched
    by position among ops of a kind, they were taken for the model's (``shape
    self_attn/cat#0: [2, 16, 64] -> [2, 4, 16, 16]``)."""
    pytest.importorskip("transformers")
    if TORCH < (2, 13):
        pytest.skip(
            "torch 2.9's DTensor has no sharding strategy for aten.alias (the Llama's slice)"
        )
    from pytest_graphir.parallel import assert_serial_structure

    (par, ser), _ = run_ranks(_llama_sp_pair, timeout=120)
    assert_serial_structure(par, ser)
    broken = par.replace('"module": "LlamaMLP"', '"module": "MLP"', 1)
    with pytest.raises(AssertionError, match=r"module model\.layers\.0\.mlp: MLP -> LlamaMLP"):
        assert_serial_structure(broken, ser)


# -- snapshots -------------------------------------------------------------------------

TEST_RANKS = """
import torch
import torch.distributed as dist
from torch import nn
from pytest_graphir import trace
from pytest_graphir.parallel import run_ranks

def traced(rank, world):
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    x = torch.full((2, 4), float(rank + 1))
    dist.all_reduce(x)
    return trace(model, x)

def test_ranks(graphir_snapshot):
    irs = run_ranks(traced)
    for rank, ir in enumerate(irs):
        assert ir == graphir_snapshot.rank(rank)
"""
RANK_FILES = [Path(f"__snapshots__/test_ranks/test_ranks[rank{r}].graphir") for r in range(2)]


def _run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    # a subprocess: an in-process run drops the modules it imported first
    # (torch._dynamo among them), and their re-import registers torch ops twice
    return run(p, *args)


def test_each_rank_has_its_own_snapshot_file(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ranks=TEST_RANKS)
    _run(pytester, "--graphir-update").assert_outcomes(passed=1)
    assert all((pytester.path / f).is_file() for f in RANK_FILES)
    texts = [(pytester.path / f).read_text() for f in RANK_FILES]
    assert texts[0] == texts[1]  # the same all-reduced input on both ranks
    _run(pytester).assert_outcomes(passed=1)
    (pytester.path / RANK_FILES[1]).write_text(texts[1].replace('"ReLU"', '"GELU"'))
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_ranks?rank1?.graphir*"])


def test_a_launchers_rank_above_0_writes_no_snapshot(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_ranks=TEST_RANKS)
    monkeypatch.setenv("RANK", "1")
    result = _run(pytester, "--graphir-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["graphir: rank 1 (RANK=1) writes no snapshots; rank 0 does"])
    assert list(pytester.path.rglob("*.graphir")) == []  # (syrupy makes the directory)
    monkeypatch.setenv("RANK", "0")
    _run(pytester, "--graphir-update").assert_outcomes(passed=1)
    assert all((pytester.path / f).is_file() for f in RANK_FILES)
    monkeypatch.setenv("RANK", "1")
    _run(pytester).assert_outcomes(passed=1)  # compared on every rank


def test_a_launchers_rank_above_0_deletes_no_unused_snapshot(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under syrupy's ``--snapshot-update`` every rank of ``torchrun -m pytest`` runs
    the session: only rank 0 deletes a snapshot no test uses (the ranks do not race to
    delete it); a rank above 0 still reports it."""
    pytester.makepyfile(test_ranks=TEST_RANKS)
    _run(pytester, "--graphir-update").assert_outcomes(passed=1)
    stale = pytester.path / "__snapshots__/test_ranks/test_gone.graphir"
    stale.write_text((pytester.path / RANK_FILES[0]).read_text())
    monkeypatch.setenv("RANK", "1")
    result = _run(pytester, "--snapshot-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*1 snapshot unused*"])
    result.stdout.no_fnmatch_line("*not recommended*")
    assert stale.is_file()
    monkeypatch.setenv("RANK", "0")
    _run(pytester, "--snapshot-update").assert_outcomes(passed=1)
    assert not stale.exists()
    assert all((pytester.path / f).is_file() for f in RANK_FILES)


def test_the_launcher_s_rank_is_read_in_one_place_and_the_plugin_loads_no_launcher() -> None:
    """``RANK`` is read by :func:`pytest_graphir.names.launcher_rank` alone, and loading
    the plugin imports neither the rank launcher nor torch."""
    import pathlib
    import subprocess
    import sys

    package = pathlib.Path(__file__).parent.parent / "pytest_graphir"
    readers = [p.name for p in package.rglob("*.py") if '"RANK"' in p.read_text()]
    assert readers == ["names.py"]
    code = "import sys, pytest_graphir.plugin; print(sorted(set(sys.modules) & {%r, 'torch'}))"
    out = subprocess.run([sys.executable, "-c", code % "pytest_graphir.parallel"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "[]"
