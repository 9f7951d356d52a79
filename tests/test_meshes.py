"""Parallel models on 2-D meshes, traced with ``trace()``'s defaults on 4 threaded
ranks: ``dp x tp`` (tensor parallelism inside each data-parallel group, FSDP2
across them) and HSDP (``fully_shard`` on a ``replicate x shard`` mesh). Each text
is the same on a second trace, the ranks agree in structure, edges never break into
constants, global statistics are the logical tensors', and the model still equals
the serial one."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from models import MLP  # fixtures/models.py

from pytest_graphir import trace
from pytest_graphir.parallel import assert_parallel_equals_serial, assert_ranks_agree, run_ranks
from pytest_graphir.serialize import dumps, loads

if not torch.distributed.is_available():  # pragma: no cover - every CI wheel has it
    pytest.skip("torch.distributed is not built into this torch", allow_module_level=True)


def _parallel(model: MLP, build: str) -> MLP:
    """``model`` on a 2x2 mesh: ``dp x tp`` (column- then row-wise on ``tp``, each
    layer and the root an FSDP2 unit on ``dp``) or ``hsdp`` (``fc1`` and the root
    units on ``replicate x shard``)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    if build == "dp x tp":
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
        parallelize_module(model, mesh["tp"], plan)
        units, mesh = [model.fc1, model.fc2, model], mesh["dp"]
    else:
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
        units = [model.fc1, model]
    for unit in units:
        fully_shard(unit, mesh=mesh)
    return model


def _traced(rank: int, world: int, build: str) -> tuple[list[str], dict[str, Any]]:
    """Two default traces of the parallel MLP on this rank, as texts; a global-statistics
    trace's ``params`` against the serial model's; then one step of each, whose
    outputs and gradients agree (:func:`assert_parallel_equals_serial`)."""
    serial = MLP(out=8)
    model = MLP(out=8)
    model.load_state_dict(serial.state_dict())
    _parallel(model, build)
    x = torch.randn(2, 8, requires_grad=True)  # the first unit's input needs a gradient
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FSDP2's "returned a view tensor" on newer torch
        texts = [dumps(trace(model, x)) for _ in range(2)]
        params = loads(dumps(trace(model, x, dist_stats="global")))["params"]
        for name, p in serial.named_parameters():
            entry = params[name]
            assert entry["dist"]["stats"] == "global", name
            assert entry["mean"] == pytest.approx(float(p.mean()), rel=1e-5, abs=1e-7), name
            assert entry["std"] == pytest.approx(float(p.std(correction=0)), rel=1e-5), name
        out, ref = model(x), serial(x)
        out.sum().backward()
        ref.sum().backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    serial_grads = {n: p.grad for n, p in serial.named_parameters()}
    assert_parallel_equals_serial(out, ref, parallel_grads=grads, serial_grads=serial_grads)
    return texts, params


@pytest.mark.parametrize("build", ["dp x tp", "hsdp"])
def test_two_dimensional_meshes_trace_stably_and_agree(build: str) -> None:
    """On 4 threaded ranks with the defaults: the same text twice, the same structure
    on every rank, every op's tensor arguments the edges of the nodes that made
    them (``fc1`` reads ``$x`` through the FSDP2 unit's stand-in and the
    tensor-parallel style's ``from_local``), each parameter's global statistics the
    serial model's and the same on every rank, and outputs and synchronised
    gradients the serial model's."""
    results = run_ranks(_traced, world_size=4, args=(build,))
    for texts, _ in results:
        assert texts[0] == texts[1]
    assert_ranks_agree([texts[0] for texts, _ in results])
    nodes = loads(results[0][0][0])["nodes"]
    assert nodes["fc1/linear#0"]["args"][0] == "$x"
    assert nodes["fc2/linear#0"]["args"][0] == "$act/relu#0"
    for name, node in nodes.items():
        if node.get("op") != "all_gather":  # FSDP2's flat shard: no node made it
            assert not [a for a in node["args"] if str(a).startswith("<tensor")], name
    assert all(params == results[0][1] for _, params in results)


class _OwnChunk(torch.nn.Module):
    """A hand-written column-parallel layer: every rank holds the whole weight and
    computes its own chunk of the output features, then gathers them."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dist = torch.distributed
        rank, world = dist.get_rank(), dist.get_world_size()
        weight = torch.chunk(self.proj.weight, world)[rank]
        bias = self.proj.bias.split(8 // world)[rank]
        part = torch.nn.functional.linear(x, weight, bias)
        parts = [torch.empty_like(part) for _ in range(world)]
        dist.all_gather(parts, part)
        return torch.cat(parts, dim=-1)


def test_a_ranks_own_chunk_reads_the_same_on_every_rank() -> None:
    """``torch.chunk(w, world)[rank]`` and ``split(...)[rank]``: each rank reads its
    own chunk, written ``$chunk#0[<rank>]``, so the ranks agree; the output is the
    serial layer's."""

    def run(rank: int, world: int) -> str:
        model, x = _OwnChunk(), torch.randn(2, 8)
        text = dumps(trace(model, x))
        torch.testing.assert_close(model(x), model.proj(x))
        return text

    texts = run_ranks(run)
    assert_ranks_agree(texts)
    linear = loads(texts[1])["nodes"]["linear#0"]
    assert linear["args"][1:] == ["$chunk#0[<rank>]", "$split#0[<rank>]"]


_OVERRIDE = {
    "model.layers.*.self_attn.q_proj": "colwise",
    "model.layers.*.self_attn.k_proj": "colwise",
    "model.layers.*.self_attn.v_proj": "colwise",
    "model.layers.*.self_attn.o_proj": "rowwise",
    "model.layers.*.mlp.gate_proj": "colwise_rep",
    "model.layers.*.mlp.up_proj": "colwise_rep",
    "model.layers.*.mlp.down_proj": "rowwise_split_input",  # takes its rank's chunk
}


def _loaded_with_a_plan(rank: int, world: int, folder: str) -> str:
    """A tiny Llama saved by the test, loaded with transformers' own tensor
    parallelism and a plan override, traced."""
    from transformers import DistributedConfig, LlamaForCausalLM

    config = DistributedConfig(tp_size=world, tp_plan=_OVERRIDE)
    model = LlamaForCausalLM.from_pretrained(folder, distributed_config=config)
    x = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    return dumps(trace(model, x))


@pytest.mark.distributed
@pytest.mark.slow
def test_a_transformers_plan_override_leaves_the_ranks_agreeing(tmp_path: Any) -> None:
    """``rowwise_split_input`` makes each rank read its own chunk of the replicated
    input (``chunk#0[rank]``): written ``<rank>``, the ranks agree (before: ``clone#0
    args[0] $...down_proj/chunk#0[0] -> ...chunk#0[1]``)."""
    pytest.importorskip("accelerate")  # transformers' tp loading needs it
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    texts = run_ranks(_loaded_with_a_plan, backend="gloo", timeout=120, args=(str(tmp_path),))
    assert_ranks_agree(texts)
    assert "chunk#0[<rank>]" in texts[0]
