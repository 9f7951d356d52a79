"""Parallel models traced rank by rank with ``trace()``'s defaults, on 2 threaded ranks:
DTensor entries with their placements and local-shard statistics, edges through
``from_local`` / ``to_local``, FSDP2 units from a defined state, wrappers that rename
nothing, and the ``plan`` section that a failure names first."""

from __future__ import annotations

import contextlib
import functools
import sys
import types
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import workflow
from models import MLP  # fixtures/models.py

from pytest_graphir import trace
from pytest_graphir.capture.dtensor import fsdp_modules
from pytest_graphir.capture.options import FakeStatisticsWarning, stats_option
from pytest_graphir.compare import compare
from pytest_graphir.parallel import (
    assert_parallel_equals_serial,
    assert_ranks_agree,
    assert_serial_structure,
    run_ranks,
)
from pytest_graphir.serialize import dumps, loads

if not torch.distributed.is_available():  # pragma: no cover - every CI wheel has it
    pytest.skip("torch.distributed is not built into this torch", allow_module_level=True)

COLLECTIVE_OPS = frozenset({"all_gather", "all_reduce", "reduce_scatter", "all_to_all"})


def _mesh(world: int, name: str) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (world,), mesh_dim_names=(name,))


def _tp(model: MLP, world: int, fc2: str = "rowwise") -> MLP:
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    if fc2 == "rowwise":
        plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    else:  # the same numbers: both layers column-wise, each output gathered
        gathered = ColwiseParallel(output_layouts=Replicate())
        plan = {"fc1": gathered, "fc2": ColwiseParallel(output_layouts=Replicate())}
    parallelize_module(model, _mesh(world, "tp"), plan)
    return model


def _fsdp(model: MLP, world: int, checkpointing: bool = False) -> MLP:
    from torch.distributed.fsdp import fully_shard

    if checkpointing:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            checkpoint_wrapper,
        )

        model.fc1 = checkpoint_wrapper(model.fc1)  # type: ignore[assignment]
    mesh = _mesh(world, "dp")
    fully_shard(model.fc1, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _texts(rank: int, world: int, build: str, options: dict[str, Any] | None = None) -> list[str]:
    """Two traces of one parallel MLP on this rank, as snapshot texts (``build``:
    ``tp``, ``tp-colwise``, ``fsdp``, ``fsdp-ac``)."""
    options = options or {}
    model, x = MLP(out=8), torch.randn(2, 8)
    if build.startswith("tp"):
        _tp(model, world, "colwise" if build == "tp-colwise" else "rowwise")
    elif build.startswith("fsdp"):
        _fsdp(model, world, checkpointing=build == "fsdp-ac")
    return [dumps(trace(model, x, **options)) for _ in range(2)]


def _equals_serial(model: torch.nn.Module, serial: torch.nn.Module, x: torch.Tensor) -> None:
    """One forward and backward (of the output's sum) of each; outputs and gradients
    equal (:func:`assert_parallel_equals_serial`, its default tolerances)."""
    out, ref = model(x), serial(x)
    out.sum().backward()
    ref.sum().backward()
    assert_parallel_equals_serial(
        out,
        ref,
        parallel_grads={n: p.grad for n, p in model.named_parameters()},
        serial_grads={n: p.grad for n, p in serial.named_parameters()},
    )


def _nodes(text: str) -> dict[str, Any]:
    return loads(text)["nodes"]  # type: ignore[no-any-return]


def test_tensor_parallel_entries_edges_and_statistics() -> None:
    """Colwise/Rowwise MLP with statistics on: the DTensor outputs keep the logical
    shape and say their placements; the plain tensors after ``to_local()`` are marked
    local; the edges run through the parallel styles' ``from_local``/``to_local``;
    the parameters' statistics are their local shards'."""

    def run(rank: int, world: int) -> tuple[list[str], dict[str, float], str]:
        serial = dumps(trace(MLP(out=8), torch.randn(2, 8)))
        torch.manual_seed(0)  # the same weights and input again
        model, x = _tp(MLP(out=8), world), torch.randn(2, 8)
        texts = [dumps(trace(model, x)) for _ in range(2)]
        local = {n: float(p.to_local().mean()) for n, p in model.named_parameters()}  # type: ignore[attr-defined]
        return texts, local, serial

    results = run_ranks(run)
    for texts, local, serial in results:
        assert texts[0] == texts[1]  # two traces in a row
        assert_serial_structure(texts[0], serial)  # module tree, logical shapes
        doc = loads(texts[0])
        nodes = doc["nodes"]
        fc1 = nodes["fc1/linear#0"]
        assert fc1["args"] == ["$x", "$fc1.weight", "$fc1.bias"]
        assert fc1["out"][0]["shape"] == [2, 16]
        assert fc1["out"][0]["dist"] == {
            "placements": ["S(1)"],
            "mesh_dims": ["tp"],
            "local": [2, 8],
        }
        relu = nodes["act/relu#0"]
        assert relu["args"] == ["$fc1/linear#0"]  # through to_local()
        assert relu["out"][0]["shape"] == [2, 8] and relu["out"][0]["dist"] == "local"
        assert nodes["fc2/linear#0"]["args"][0] == "$act/relu#0"  # through from_local()
        assert nodes["fc2/linear#0"]["out"][0]["dist"]["placements"] == ["P(sum)"]
        params = doc["params"]
        assert params["fc2.weight"]["dist"] == {
            "placements": ["S(1)"],
            "mesh_dims": ["tp"],
            "local": [8, 8],
        }
        for name, mean in local.items():
            assert params[name]["mean"] == pytest.approx(mean, rel=1e-5, abs=1e-7)
        assert doc["plan"] == {
            "fc1": {
                "style": "ColwiseParallel",
                "mesh": ["tp"],
                "params": {"weight": ["S(0)"], "bias": ["S(0)"]},
            },
            "fc2": {
                "style": "RowwiseParallel",
                "mesh": ["tp"],
                "params": {"weight": ["S(1)"], "bias": ["R"]},
            },
        }
    assert_ranks_agree([texts[0] for texts, _, _ in results])
    assert run_ranks(run)[0][0] == results[0][0]  # and a second run
    # fc1/linear#0's output (the module line has no statistics after its dtype)
    old, new = '[2, 16], "dtype": "float32", "mean"', '[2, 32], "dtype": "float32", "mean"'
    wider = serial.replace(old, new, 1)
    assert wider != serial
    with pytest.raises(AssertionError, match=r"shape fc1/linear#0: \[2, 16\] -> \[2, 32\]"):
        assert_serial_structure(results[0][0][0], wider)


def test_hook_names_say_the_parallel_style() -> None:
    """The parallel styles' hooks (lambdas inside ``distribute_module``) are logged
    under the style's function, not ``<lambda>``."""
    events = loads(run_ranks(_texts, args=("tp", {"hooks": True}))[0][0])["hooks"]
    assert "fc1 forward_pre_hook ColwiseParallel._prepare_input_fn" in events
    assert "fc2 forward_hook RowwiseParallel._prepare_output_fn" in events
    assert not any("<lambda>" in e for e in events)


def test_a_plan_change_with_the_same_numbers_is_named_first() -> None:
    """fc2 Rowwise -> Colwise with a gathered output computes the same output; the
    comparison fails, and its first changes are the plan's: both layers' gathered
    ``output_layouts``, then fc2's style."""
    rowwise = run_ranks(_texts, args=("tp",))
    colwise = run_ranks(_texts, args=("tp-colwise",))
    for old, new in zip(rowwise, colwise, strict=True):
        result = compare(loads(old[0]), loads(new[0]))
        assert result
        first = result.changes[0]
        assert first.section == "plan" and first.field == "output_layouts"
        lines = result.lines()
        both = "output_layouts absent -> [R] (in 2 entries: plan.fc1, plan.fc2)"
        assert lines[1] == f"  changed: {both}"
        assert lines[2] == "  changed: plan.fc2 style RowwiseParallel -> ColwiseParallel"
        # then the collectives it changed, before the nodes that follow from it
        first_other = next(i for i, line in enumerate(lines[1:], 1) if "plan." not in line)
        assert lines[first_other].startswith(
            "  changed: collectives from the 1st of 1 (fc2/all_reduce#0, in fc2) "
            "all_reduce(tp, 64 B) -> all_gather(tp, "
        )
        out_old, out_new = loads(old[0])["outputs"], loads(new[0])["outputs"]
        assert out_old["output"]["shape"] == out_new["output"]["shape"] == [2, 8]


def _styled(rank: int, world: int, plan: str) -> str:
    """A trace of the MLP parallelised by the plan named ``plan`` (:func:`_plans`),
    without statistics (the plan is what these tests look at)."""
    model, x = MLP(out=8), torch.randn(2, 8)
    from torch.distributed.tensor.parallel import parallelize_module

    parallelize_module(model, _mesh(world, "tp"), _plans()[plan])
    return dumps(trace(model, x, stats=False))


def _plans() -> dict[str, Any]:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        PrepareModuleInputOutput,
        PrepareModuleOutput,
        RowwiseParallel,
    )

    return {
        "default": {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()},
        "fc1-shard1": {"fc1": ColwiseParallel(output_layouts=Shard(1)), "fc2": RowwiseParallel()},
        "fc2-shard1": {"fc1": ColwiseParallel(), "fc2": RowwiseParallel(output_layouts=Shard(1))},
        "input": {
            "fc1": ColwiseParallel(use_local_output=False),
            "act": PrepareModuleInput(input_layouts=Shard(1), desired_input_layouts=Shard(1)),
            "fc2": RowwiseParallel(),
        },
        "output": {
            "fc1": ColwiseParallel(use_local_output=False),
            "act": PrepareModuleOutput(output_layouts=Shard(1), desired_output_layouts=Shard(1)),
            "fc2": RowwiseParallel(),
        },
        "in-out": {
            "fc1": ColwiseParallel(output_layouts=Replicate()),
            "act": PrepareModuleInputOutput(
                input_layouts=Replicate(),
                desired_input_layouts=Replicate(),
                output_layouts=Replicate(),
                desired_output_layouts=Shard(1),
                use_local_output=False,
            ),
            "fc2": RowwiseParallel(input_layouts=Shard(1)),
        },
    }


def test_a_layouts_only_change_is_named_by_its_plan_field() -> None:
    """``ColwiseParallel()`` -> ``ColwiseParallel(output_layouts=Shard(1))``: the
    first change names ``plan.fc1`` and the field, written with placement names;
    the default styles write no field."""
    default = run_ranks(_styled, args=("default",))
    changed = run_ranks(_styled, args=("fc1-shard1",))
    for old, new in zip(default, changed, strict=True):
        assert loads(old)["plan"]["fc1"] == {
            "style": "ColwiseParallel",
            "mesh": ["tp"],
            "params": {"weight": ["S(0)"], "bias": ["S(0)"]},
        }
        result = compare(loads(old), loads(new))
        assert result
        first = result.changes[0]
        assert (first.section, first.node, first.field) == ("plan", "fc1", "output_layouts")
        assert (first.old, first.new) == (None, ["S(1)"])
        assert result.lines()[1] == "  changed: plan.fc1 output_layouts absent -> [S(1)]"


def test_the_plan_writes_prepare_module_input_and_output_fields() -> None:
    """``PrepareModuleInput`` / ``PrepareModuleOutput`` are styles of the plan with
    their layouts (the required ones always, the others where not the default);
    ``PrepareModuleInputOutput``'s two halves each under its own name."""
    prepared = loads(run_ranks(_styled, args=("input",))[0])["plan"]
    assert prepared["fc1"]["use_local_output"] is False
    assert prepared["act"] == {
        "style": "PrepareModuleInput",
        "input_layouts": ["S(1)"],
        "desired_input_layouts": ["S(1)"],
    }
    assert loads(run_ranks(_styled, args=("output",))[0])["plan"]["act"] == {
        "style": "PrepareModuleOutput",
        "output_layouts": ["S(1)"],
        "desired_output_layouts": ["S(1)"],
    }
    both = loads(run_ranks(_styled, args=("in-out",))[1])["plan"]
    assert both["act"] == {
        "style": ["PrepareModuleInput", "PrepareModuleOutput"],
        "PrepareModuleInput": {"input_layouts": ["R"], "desired_input_layouts": ["R"]},
        "PrepareModuleOutput": {
            "output_layouts": ["R"],
            "desired_output_layouts": ["S(1)"],
            "use_local_output": False,
        },
    }
    assert both["fc2"]["input_layouts"] == ["S(1)"]


def test_a_styles_local_output_is_marked_local() -> None:
    """``RowwiseParallel(output_layouts=Shard(1))`` returns this rank's part of the
    reduce-scatter (``use_local_output``): marked ``dist: local``; the default
    ``RowwiseParallel``'s replicated output is the whole tensor and stays unmarked."""
    for text in run_ranks(_styled, args=("fc2-shard1",)):
        nodes = _nodes(text)
        scattered = nodes["fc2/reduce_scatter#0"]["out"][0]  # fc2's output hook's
        assert scattered["shape"] == [2, 4] and scattered["dist"] == "local"
        assert loads(text)["outputs"]["output"]["ref"] == "$fc2/reduce_scatter#0"
    for text in run_ranks(_styled, args=("default",)):
        assert "dist" not in _nodes(text)["fc2/all_reduce#0"]["out"][0]


def _stats_options(rank: int, world: int) -> list[tuple[bool, dict[str, Any]]]:
    """``stats_option`` of the default, ``False`` and ``True`` on this rank; ``True``
    must warn on the fake process group only."""
    fake = torch.distributed.get_backend() == "fake"
    with pytest.warns(FakeStatisticsWarning) if fake else _no_warning():
        explicit = stats_option(True)
    return [stats_option(None), stats_option(False), explicit]


@contextlib.contextmanager
def _no_warning() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def test_statistics_are_off_by_default_on_the_fake_process_group() -> None:
    """The default ``stats`` is off on torch's fake process group and says why;
    ``stats=True`` stays on there, with a warning; elsewhere the default is on."""
    off = (False, {"stats_off": "fake process group"})
    assert run_ranks(_stats_options, backend="fake") == [[off, (False, {}), (True, {})]] * 2
    on: list[tuple[bool, dict[str, Any]]] = [(True, {}), (False, {}), (True, {})]
    assert run_ranks(_stats_options) == [on] * 2
    assert stats_option(None) == (True, {})  # no process group


def test_a_fake_backend_trace_is_the_same_in_every_run() -> None:
    """2 ranks of the fake process group (rank 1's shards uninitialised memory):
    two runs give each rank the same text, without value statistics; the meta says
    why; ``stats=True`` there warns."""
    first = run_ranks(_texts, args=("tp",), backend="fake")
    second = run_ranks(_texts, args=("tp",), backend="fake")
    for (a, again), (b, _) in zip(first, second, strict=True):
        assert a == again == b
        doc = loads(a)
        assert doc["meta"]["stats"] is False
        assert doc["meta"]["stats_off"] == "fake process group"
        assert '"mean"' not in a and '"std"' not in a
    assert_ranks_agree([texts[0] for texts in first])
    with pytest.warns(FakeStatisticsWarning, match=r"stats=True\) on the fake process group"):
        run_ranks(_texts, args=("tp", {"stats": True}), backend="fake")


def test_fsdp2_traces_like_the_serial_model_from_a_defined_state() -> None:
    """FSDP2 per layer and root: the same nodes as the serial model (FSDP's own
    all-gather bookkeeping is not the model's; its collectives aside), classes
    without the ``FSDP`` prefix, parameters read by name; a trace after a training
    step's backward equals the first."""

    def run(rank: int, world: int) -> tuple[str, str, str]:
        serial = MLP(out=8)
        model, x = _fsdp(MLP(out=8), world), torch.randn(2, 8)
        first = dumps(trace(model, x))
        model(x).sum().backward()  # leaves the root unsharded, gradients set
        again = dumps(trace(model, x))
        return dumps(trace(serial, x)), first, again

    results = run_ranks(run)
    assert_ranks_agree([first for _, first, _ in results])  # no rank in any argument
    for serial, first, again in results:
        assert first == again
        assert_serial_structure(first, serial)
        nodes = {n: v for n, v in _nodes(first).items() if v.get("op") not in COLLECTIVE_OPS}
        serial_nodes = _nodes(serial)
        assert list(nodes) == list(serial_nodes)
        assert [v.get("module", v.get("op")) for v in nodes.values()] == [
            v.get("module", v.get("op")) for v in serial_nodes.values()
        ]
        assert nodes["fc1/linear#0"]["args"] == ["$x", "$fc1.weight", "$fc1.bias"]
        assert nodes["fc2/linear#0"]["args"] == ["$act/relu#0", "$fc2.weight", "$fc2.bias"]
        plan = loads(first)["plan"]
        assert plan["<root>"]["fsdp"] == {"reshard_after_forward": False}  # a root never does
        assert plan["fc1"]["fsdp"] == {"reshard_after_forward": True}
        assert plan["fc2"]["params"] == {"weight": ["S(0)"], "bias": ["S(0)"]}


def _fsdp_imported(monkeypatch: pytest.MonkeyPatch) -> type:
    """A process that imported ``torch.distributed.fsdp`` (as ``transformers`` does)
    and never ran ``fully_shard``: its ``FSDPModule`` has no subclass yet."""
    unit = type("FSDPModule", (), {})
    fsdp = types.SimpleNamespace(FSDPModule=unit)
    monkeypatch.setitem(sys.modules, "torch.distributed.fsdp", fsdp)
    return unit


class _Unwalkable(torch.nn.Module):
    def named_modules(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("walked")


def test_fsdp_units_are_looked_for_once_fully_shard_derived_a_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a subclass of ``FSDPModule`` no module is a unit: the model is not
    walked; with one (``fully_shard`` derives ``FSDPLinear``), its units are found."""
    unit = _fsdp_imported(monkeypatch)
    assert fsdp_modules(_Unwalkable()) == []
    model = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(2, 2))
    model[1].__class__ = type("FSDPLinear", (unit, torch.nn.Linear), {})
    assert fsdp_modules(model) == [("1", model[1])]


def test_a_trace_walks_the_module_tree_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model that is neither sharded nor parallelised: its module tree is walked
    once per trace (names, parameters, plan), also where ``torch.distributed.fsdp``
    is imported."""
    _fsdp_imported(monkeypatch)
    walks: list[str] = []

    class Counted(MLP):
        def named_modules(self, *args: Any, **kwargs: Any) -> Any:
            if not args and not kwargs:
                walks.append("walk")
            return super().named_modules(*args, **kwargs)

    graph = trace(Counted(out=8), torch.randn(2, 8), stats=False)
    assert "plan" not in graph.sections
    assert walks == ["walk"]


def test_fsdp2_plan_names_units_and_mixed_precision() -> None:
    """The plan section holds each unit's ``reshard_after_forward`` and the dtypes of
    its ``MixedPrecisionPolicy``; the text is the same in a second run."""

    def run(rank: int, world: int) -> str:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        model, x = MLP(out=8), torch.randn(2, 8)
        mesh = _mesh(world, "dp")
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        fully_shard(model.fc1, mesh=mesh, reshard_after_forward=False, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        return dumps(trace(model, x))

    first = run_ranks(run)
    assert run_ranks(run) == first
    plan = loads(first[0])["plan"]
    assert plan["fc1"]["fsdp"] == {
        "reshard_after_forward": False,
        "param_dtype": "bfloat16",
        "reduce_dtype": "float32",
    }
    assert loads(first[0])["nodes"]["fc1/linear#0"]["out"][0]["dtype"] == "bfloat16"


def test_fsdp2_backward_records_the_sharded_gradients() -> None:
    """With ``backward=True`` every FSDP2 parameter has its gradient (the local shard
    of what the reduce-scatter left in ``.grad``), equal to a plain backward's, the
    reduce-scatters are in the ``collectives`` section, and ``.grad`` is left as it
    was."""

    def run(rank: int, world: int) -> tuple[str, dict[str, float], bool]:
        model, x = _fsdp(MLP(out=8), world), torch.randn(2, 8)
        text = dumps(trace(model, x, backward=True))
        untouched = all(p.grad is None for p in model.parameters())
        model(x).sum().backward()
        means = {n: float(p.grad.to_local().mean()) for n, p in model.named_parameters()}
        return text, means, untouched

    for text, means, untouched in run_ranks(run):
        assert untouched
        scatters = [e for e in loads(text)["collectives"].values() if e["op"] == "reduce_scatter"]
        assert [(e["group"], e["reduce"], e["in"]) for e in scatters] == [
            ("dp", "avg", [[136]]),  # the root's fc2 (8x16 + 8), then fc1 (16x8 + 16)
            ("dp", "avg", [[144]]),
        ]
        grads = loads(text)["grads"]
        assert set(grads) == set(means)
        for name, mean in means.items():
            assert grads[name]["dist"]["placements"] == ["S(0)"]
            assert grads[name]["mean"] == pytest.approx(mean, rel=1e-5, abs=1e-7)


def test_activation_checkpointing_is_one_plan_line() -> None:
    """Wrapping fc1 with ``checkpoint_wrapper`` renames no node and no parameter:
    the comparison with the unwrapped FSDP2 model changes the plan only."""
    plain = run_ranks(_texts, args=("fsdp",))
    wrapped = run_ranks(_texts, args=("fsdp-ac",))
    assert_ranks_agree([texts[0] for texts in wrapped])
    for old, new in zip(plain, wrapped, strict=True):
        assert list(_nodes(old[0])) == list(_nodes(new[0]))
        assert list(loads(old[0])["params"]) == list(loads(new[0])["params"])
        result = compare(loads(old[0]), loads(new[0]))
        assert [(c.section, c.node) for c in result.changes] == [("plan", "fc1")]
        assert loads(new[0])["plan"]["fc1"]["wrapper"] == "CheckpointWrapper"


def _placeholder_first(function: Any, *args: Any) -> Any:
    """A ``checkpoint_fn`` that makes a placeholder tensor before it runs the wrapped
    module, as ``torch.utils.checkpoint`` does on some torch releases."""
    torch.empty((0,), requires_grad=True)
    return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False)


@pytest.mark.parametrize("options", [{}, {"backward": True}, {"interceptor": "patch"}])
def test_an_activation_wrappers_own_ops_are_not_recorded(options: dict[str, Any]) -> None:
    """What a checkpoint wrapper runs before the module it wraps adds no node: the
    wrapped model's nodes are the plain model's, their statistics too; what follows
    the wrapper is recorded again."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    torch.manual_seed(0)
    model, x = MLP(out=8), torch.randn(2, 8)
    plain = loads(dumps(trace(model, x, **options)))
    model.fc1 = checkpoint_wrapper(model.fc1, checkpoint_fn=_placeholder_first)  # type: ignore[assignment]
    wrapped = loads(dumps(trace(model, x, **options)))
    assert wrapped.pop("plan") == {"fc1": {"wrapper": "CheckpointWrapper"}}
    assert wrapped == plain


def test_fsdp2_equals_serial() -> None:
    """The FSDP2 model's output and gradients equal the serial model's (same seed,
    same input on every rank: the averaging reduce-scatter gives the serial
    gradient)."""

    def run(rank: int, world: int) -> None:
        serial = MLP(out=8)
        model = MLP(out=8)
        model.load_state_dict(serial.state_dict())
        _fsdp(model, world)
        _equals_serial(model, serial, torch.randn(2, 8))

    run_ranks(run)


def _llama(world: int) -> tuple[torch.nn.Module, torch.nn.Module, torch.Tensor]:
    """torch's tiny Llama (``common_dtensor.Transformer``) with sequence parallelism on
    this rank, the serial model with the same weights, and token ids."""
    from torch.testing._internal.distributed._tensor.common_dtensor import (
        ModelArgs,
        Transformer,
    )

    args = ModelArgs(n_layers=1, dropout_p=0.0, vocab_size=16, max_seq_len=8, dim=16)
    serial = Transformer(args)
    model = Transformer(args)
    model.load_state_dict(serial.state_dict())
    # local attention outputs: CPU's flash attention has no DTensor sharding rule
    Transformer.parallelize(model, _mesh(world, "tp"), True, local_output_for_attn=True)
    return model, serial, torch.randint(0, 16, (1, 8))


def test_sequence_parallel_llama_block() -> None:
    """torch's tiny Llama with sequence parallelism: the default trace runs, is the
    same twice and on both ranks, and its plan names ``SequenceParallel``."""

    def run(rank: int, world: int) -> list[str]:
        model, _, ids = _llama(world)
        return [dumps(trace(model, ids)) for _ in range(2)]

    results = run_ranks(run)
    for texts in results:
        assert texts[0] == texts[1]
        plan = loads(texts[0])["plan"]
        assert plan["norm"]["style"] == "SequenceParallel"
    assert_ranks_agree([texts[0] for texts in results])


@pytest.mark.skipif(
    torch.__version__ < (2, 10),  # type: ignore[operator]
    reason="torch < 2.10: on threaded ranks (torch's multi_threaded_pg) the tiny Llama "
    "with sequence parallelism differs from its serial model without any trace (as "
    "gloo processes it agrees)",
)
def test_sequence_parallel_llama_equals_serial() -> None:
    """A trace leaves the tiny Llama's numerics alone: after two traces, its output
    and gradients equal the serial model's."""

    def run(rank: int, world: int) -> None:
        model, serial, ids = _llama(world)
        for _ in range(2):
            trace(model, ids)
        _equals_serial(model, serial, ids)

    run_ranks(run)


def test_global_statistics_are_the_logical_tensors() -> None:
    """``dist_stats="global"``: each DTensor's statistics are the whole tensor's (the
    serial model's parameters' here), the same on every rank; a ``Partial`` output
    keeps its local summand's and says so; a bad value is refused."""

    def run(rank: int, world: int) -> tuple[str, dict[str, dict[str, float]]]:
        serial = MLP(out=8)
        torch.manual_seed(0)
        model, x = _tp(MLP(out=8), world), torch.randn(2, 8)
        with pytest.raises(ValueError, match="dist_stats='everywhere'"):
            trace(model, x, dist_stats="everywhere")
        whole = {
            n: {"mean": float(p.mean()), "std": float(p.std(correction=0)), "max": float(p.max())}
            for n, p in serial.named_parameters()
        }
        return dumps(trace(model, x, dist_stats="global")), whole

    results = run_ranks(run)
    for text, whole in results:
        doc = loads(text)
        for name, expected in whole.items():
            entry = doc["params"][name]
            assert entry["dist"]["stats"] == "global"
            assert entry["mean"] == pytest.approx(expected["mean"], rel=1e-5, abs=1e-7)
            assert entry["std"] == pytest.approx(expected["std"], rel=1e-5)
            assert entry["max"] == pytest.approx(expected["max"], rel=1e-5)  # 6 digits written
        partial = doc["nodes"]["fc2/linear#0"]["out"][0]
        assert partial["dist"]["placements"] == ["P(sum)"] and partial["dist"]["stats"] == "local"
    assert loads(results[0][0])["params"] == loads(results[1][0])["params"]


def test_global_statistics_combine_along_the_dtensors_own_mesh() -> None:
    """On a 2-D ``dp x tp`` mesh with data differing per data-parallel rank, an
    activation sharded on the ``tp`` submesh is the logical tensor of this rank's own
    ``tp`` group: never combined with the other data-parallel group's activations."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    def run(rank: int, world: int) -> tuple[int, dict[str, Any], dict[str, float]]:
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        torch.manual_seed(0)
        serial = torch.nn.Sequential(torch.nn.Linear(8, 8))
        model = torch.nn.Sequential(torch.nn.Linear(8, 8))
        model.load_state_dict(serial.state_dict())
        parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(use_local_output=False)})
        dp = mesh.get_coordinate()[0]  # type: ignore[index]
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(dp)) * (dp + 1)
        whole = serial(x).detach()
        expected = {"mean": float(whole.mean()), "std": float(whole.std(correction=0))}
        out = loads(dumps(trace(model, x, dist_stats="global")))["nodes"]["0/linear#0"]["out"][0]
        return dp, out, expected

    results = run_ranks(run, world_size=4)
    for _dp, out, expected in results:
        assert out["dist"]["placements"] == ["S(1)"] and out["dist"]["stats"] == "global"
        assert out["mean"] == pytest.approx(expected["mean"], rel=1e-5, abs=1e-6)
        assert out["std"] == pytest.approx(expected["std"], rel=1e-5)
    by_dp = {dp: out["mean"] for dp, out, _ in results}
    assert by_dp[0] != pytest.approx(by_dp[1])  # the two groups' data differ


@pytest.mark.distributed
@pytest.mark.slow
def test_gloo_processes_trace_as_threaded_ranks_do() -> None:
    """The real transport (2 gloo processes) gives each rank the text the threaded
    process group gives it: the CI's threaded tests stand for gloo's."""
    threaded = run_ranks(_texts, args=("tp",))
    gloo = run_ranks(_texts, backend="gloo", args=("tp",), timeout=120)
    assert [texts[0] for texts in gloo] == [texts[0] for texts in threaded]


TEST_PLAN = """
import os
import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from pytest_graphir import trace
from pytest_graphir.parallel import assert_ranks_agree, run_ranks

def traced(rank, world):
    model = nn.Sequential()
    model.fc1, model.act, model.fc2 = nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("tp",))
    if os.environ.get("PLAN") == "colwise":  # the same numbers, other collectives
        gathered = dict(output_layouts=Replicate())
        plan = {"fc1": ColwiseParallel(**gathered), "fc2": ColwiseParallel(**gathered)}
    else:
        plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    return trace(parallelize_module(model, mesh, plan), torch.randn(2, 8))

def test_tp(graphir_snapshot):
    irs = run_ranks(traced)
    assert_ranks_agree(irs)
    for rank, ir in enumerate(irs):
        assert ir == graphir_snapshot.rank(rank)
"""


def test_a_plan_change_fails_the_snapshot_test_plan_first(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: ``--graphir-update`` writes one snapshot per rank, a rerun passes,
    and the plan change with the same numbers fails, its message naming the plan,
    then the collectives with the rows of the communication table that differ
    (each gather in the module whose style's output hook issued it: fc1's 16 float32
    columns of 2 rows, 128 B, fc2's 8, 64 B), before the nodes."""
    pytester.makepyfile(test_tp=TEST_PLAN)
    # a subprocess: an in-process run drops the modules it imported first
    # (torch._dynamo among them), and their re-import registers torch ops twice
    run = functools.partial(workflow.run, pytester)
    run("--graphir-update").assert_outcomes(passed=1)
    files = sorted(p.name for p in pytester.path.rglob("*.graphir"))
    assert files == ["test_tp[rank0].graphir", "test_tp[rank1].graphir"]
    run().assert_outcomes(passed=1)
    monkeypatch.setenv("PLAN", "colwise")
    result = run("-vv")  # the whole message: pytest cuts it at 8 lines by default
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*graphir: * changed*",
            "*changed: output_layouts absent -> [[]R[]] (in 2 entries: plan.fc1, plan.fc2)",
            "*changed: plan.fc2 style RowwiseParallel -> ColwiseParallel",
            "*changed: plan.fc2 params.weight[[]0[]] S(1) -> S(0)",
            "*changed: plan.fc2 params.bias[[]0[]] R -> S(0)",
            "*changed: collectives from the 1st of 1 (fc2/all_reduce#0, in fc2) "
            "all_reduce(tp, 64 B) -> all_gather(tp, *",
            "*      module  phase    op          group  calls  bytes",
            "*    - fc2     forward  all_reduce  tp         1   64 B",
            "*    + fc1     forward  all_gather  tp         1  128 B",
            "*    + fc2     forward  all_gather  tp         1   64 B",
            "*added: *",
        ],
        consecutive=True,
    )


class _Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.o_proj = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.o_proj(self.q_proj(x))  # type: ignore[no-any-return]


def _edges(rank: int, world: int, build: str) -> dict[str, Any]:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        parallelize_module,
    )

    if build == "prepare":  # the input gathered along the sequence, then column-wise
        model: torch.nn.Module = torch.nn.Sequential(_Attention())
        layouts = PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
        )
        plan = {"0": layouts, "0.q_proj": ColwiseParallel(), "0.o_proj": RowwiseParallel()}
        parallelize_module(model, _mesh(world, "tp"), plan)
        x = torch.randn(1, 4, 16)
    else:  # two FSDP2 units: the second one's input requires a gradient
        from torch.distributed.fsdp import fully_shard

        model, x = torch.nn.Sequential(MLP(out=8), MLP(out=8)), torch.randn(2, 8)
        for module in (model[0], model[1], model):
            fully_shard(module, mesh=_mesh(world, "dp"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FSDP2's "returned a view tensor" on newer torch
        return _nodes(dumps(trace(model, x, stats=False)))


@pytest.mark.parametrize("build", ["prepare", "fsdp"])
def test_edges_run_through_prepare_module_input_and_fsdp2_units(build: str) -> None:
    """``q_proj`` after ``PrepareModuleInput`` reads the redistribution's last op
    (an ``AsyncCollectiveTensor``'s waited result), and an FSDP2 unit whose input
    requires a gradient reads the previous unit's output (FSDP2 hands it a
    stand-in): no edge becomes a constant."""
    nodes = run_ranks(_edges, args=(build,))[0]
    for name, node in nodes.items():
        if not name.endswith("all_gather#0"):  # FSDP2's flat shard: no node made it
            assert not [a for a in node["args"] if str(a).startswith("<tensor")], name
    if build == "prepare":
        read = nodes["0.q_proj/linear#0"]["args"][0]  # the gather's last op: contiguous
        assert read.startswith("$0/") and read[1:] in nodes, read  # (torch 2.13; cat on 2.9)
    else:
        assert nodes["1.fc1/linear#0"]["args"][0] == "$0.fc2/linear#0"
