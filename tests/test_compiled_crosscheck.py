"""``compare_compiled`` checked against PyTorch's own instruments.

Each case is a small model with a known ground truth under ``torch.compile``. For
every case, ``torch._dynamo.explain`` (graph count, graph-break count, the reasons of
the graphs that ended at a break) and, for recompiles, a ``CompileCounter`` run on a
fresh copy of the model give the truth; ``compare_compiled`` must report the same, and
every graph break it reports names a module path and the source line (code and
``file:line``). CPU, ``backend="eager"``, each case well under a second.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch
import torch._dynamo
import torch.utils.checkpoint
from compiled_models import seeded
from compiled_versions import own_forward_if_reason
from models import MLP
from torch import nn
from torch._dynamo.testing import CompileCounter

from pytest_graphir.compiled import CompiledReport, compare_compiled
from pytest_graphir.compiled.watch import clean_reason, readable_path, readable_reason

THIS_FILE = "test_compiled_crosscheck.py"


pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # tests/conftest.py


# -- the models -------------------------------------------------------------------------


class Printing(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        print("crosscheck: printing")  # break: print
        return torch.tanh(h)


class ItemNorm(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / (x.abs().max().item() + 1.0)  # break: .item()


class ItemModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.norm = ItemNorm()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.fc(x))


class OwnIf(nn.Module):
    """The data-dependent ``if`` in the model's own forward (torch 2.13 counts it only
    under ``counters["unimplemented"]``)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if h.sum() > 0:  # break: data-dependent branching
            h = h * 2
        return torch.relu(h)


class IfBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if h.mean() > -10:  # break: data-dependent branching, once per loop step
            h = h + 1
        return h


class LoopOfIf(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = IfBlock()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(2):
            x = self.block(x)
        return x


class NumpyCall(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return torch.from_numpy(np.tanh(h.detach().numpy()))


class ExplicitBreak(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        torch._dynamo.graph_break()  # break: explicit
        return h.sigmoid()


class TwoBreaks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        torch._dynamo.graph_break()  # first break
        h = self.fc2(h)
        print("crosscheck: second break")  # second break
        return h.relu()


class ToList(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        rows = h.tolist()  # break: tolist
        return h + float(len(rows))


class IntArg(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, k: int) -> torch.Tensor:
        return self.fc(x) * k


class SwapUnderCompile(nn.Module):
    """The user's own code takes another op under compile: a real divergence."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if torch.compiler.is_compiling():
            return torch.relu(h) * 1.0
        return torch.relu(h)


class StepCounter(nn.Module):
    """Updates a buffer in its forward: eager and compiled must start from one state."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps += 1  # type: ignore[assignment]  # a buffer
        return self.fc(x) * self.steps


def _scale_hook(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
    return output * 0.5


def _probe(module: nn.Module, args: Any, output: torch.Tensor) -> None:
    return None


def _state_hook(module: nn.Module, state: dict[str, Any], prefix: str, local: Any) -> None:
    state[prefix + "extra"] = torch.ones(1)


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 4)

    def _inner(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc1(x)) * 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.utils.checkpoint.checkpoint(self._inner, x, use_reentrant=False)
        return self.fc2(h)


class PrintBlocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Printing(), Printing()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


# -- the cases --------------------------------------------------------------------------


@dataclass
class Case:
    """One adversarial model and what is known about it."""

    build: Callable[[], nn.Module]
    args: tuple[Any, ...]
    second_args: tuple[Any, ...] | None = None
    after_first_call: Callable[[nn.Module], Callable[[], object]] | None = None
    ok: bool = True
    """Whether compare_compiled(..., allow_graph_breaks=True) passes."""
    breaks_at: list[tuple[str, str]] = field(default_factory=list)
    """(module path, code on the source line) of every break site."""
    recompiles: int | None = None


def _with_hook(model: nn.Module, path: str, hook: Any) -> nn.Module:
    model.get_submodule(path).register_forward_hook(hook)
    return model


def _late_hook(model: nn.Module) -> Callable[[], object]:
    return lambda: model.fc2.register_forward_hook(_probe)


def _remove_hooks(model: nn.Module) -> Callable[[], object]:
    def remove() -> None:
        model.fc2._forward_hooks.clear()

    return remove


def _state_dict_hooked() -> nn.Module:
    model = MLP()
    model._register_state_dict_hook(_state_hook)
    return model


X = seeded(2, 8)
CASES: dict[str, Case] = {
    "clean": Case(MLP, (X,)),
    "print": Case(Printing, (X,), breaks_at=[("", 'print("crosscheck: printing")')]),
    "item": Case(ItemModel, (X,), breaks_at=[("norm", "return x / (x.abs().max().item() + 1.0)")]),
    "own_if": Case(OwnIf, (X,), breaks_at=[("", "if h.sum() > 0:")]),
    "if_in_loop": Case(LoopOfIf, (X,), breaks_at=[("block", "if h.mean() > -10:")]),
    "numpy": Case(NumpyCall, (X,)),
    "graph_break": Case(ExplicitBreak, (X,), breaks_at=[("", "torch._dynamo.graph_break()")]),
    "two_breaks": Case(
        TwoBreaks,
        (X,),
        breaks_at=[("", "torch._dynamo.graph_break()"), ("", 'print("crosscheck: second break")')],
    ),
    "tolist": Case(ToList, (X,), breaks_at=[("", "rows = h.tolist()")]),
    "print_in_two_blocks": Case(
        PrintBlocks,
        (X,),
        breaks_at=[
            ("blocks.0", 'print("crosscheck: printing")'),
            ("blocks.1", 'print("crosscheck: printing")'),
        ],
    ),
    "new_shape": Case(MLP, (X,), second_args=(seeded(3, 8),), recompiles=1),
    "new_python_int": Case(IntArg, (X, 2), second_args=(X, 3), recompiles=1),
    "swap_under_compile": Case(SwapUnderCompile, (X,), ok=False),
    "buffer_update": Case(StepCounter, (X,)),
    "hook_op": Case(lambda: _with_hook(MLP(), "fc1", _scale_hook), (X,)),
    "hook_added_after_compile": Case(
        MLP, (X,), after_first_call=_late_hook, ok=False, recompiles=0
    ),
    "hook_removed_after_compile": Case(
        lambda: _with_hook(MLP(), "fc2", _probe), (X,), after_first_call=_remove_hooks, recompiles=1
    ),
    "state_dict_hook": Case(_state_dict_hooked, (X,)),
    "checkpoint": Case(Checkpointed, (X,)),
}


def _fresh(case: Case) -> nn.Module:
    torch.manual_seed(0)
    return case.build().eval()


def _explain(case: Case) -> Any:
    return torch._dynamo.explain(_fresh(case))(*case.args)


def _recompiles(case: Case) -> int:
    """Frames compiled by the second call, counted by Dynamo's ``CompileCounter``."""
    torch._dynamo.reset()
    model = _fresh(case)
    cnt = CompileCounter()
    compiled = torch.compile(model, backend=cnt)
    compiled(*case.args)
    first = cnt.frame_count
    if case.after_first_call is not None:
        case.after_first_call(model)()
    compiled(*(case.second_args or case.args))
    torch._dynamo.reset()
    return int(cnt.frame_count - first)


def _check(case: Case) -> CompiledReport:
    model = _fresh(case)
    after = case.after_first_call(model) if case.after_first_call else None
    return compare_compiled(
        model,
        *case.args,
        second_args=case.second_args,
        after_first_call=after,
        allow_graph_breaks=True,
    )


@pytest.mark.parametrize("name", list(CASES))
def test_compare_compiled_agrees_with_explain(name: str) -> None:
    case = CASES[name]
    truth = _explain(case)
    report = _check(case)
    message = "\n".join(report.lines(0))
    assert report.graph_count == truth.graph_count, message
    assert report.graph_break_count == truth.graph_break_count, message
    assert report.break_reasons == [clean_reason(r.reason) for r in truth.break_reasons], message
    assert bool(report) is case.ok, message
    if case.recompiles is not None:
        assert report.recompiles == _recompiles(case) == case.recompiles, message
    sites = [(b.scope, b.location.split(": ", 1)[-1]) for b in report.breaks]
    assert sorted(sites) == sorted(case.breaks_at), message
    for b in report.breaks:
        assert b.scope is not None and b.location, message
        assert f"{THIS_FILE}:" in b.source, message
        line = f"graph break (allowed) in {b.where()}"
        assert any(line in text for text in report.lines(0)), message


def test_a_break_fails_the_check_unless_allowed() -> None:
    """``if h.sum() > 0`` in the model's own forward once passed silently."""
    report = compare_compiled(_fresh(CASES["own_if"]), X)
    assert not report
    assert report.graph_break_count == 1
    assert "graph break in <model> (OwnIf.forward: if h.sum() > 0:" in "\n".join(report.lines())
    assert own_forward_if_reason() in report.breaks[0].reason


def test_buffer_update_is_not_a_numerics_difference() -> None:
    model = _fresh(CASES["buffer_update"])
    report = compare_compiled(model, X)
    assert report, "\n".join(report.lines())
    assert not report.numerics
    # the check leaves the model's buffers as it found them
    assert float(model.steps) == 0.0  # type: ignore[arg-type]  # a buffer
    # two copies from the same state agree, as compare_compiled says
    a, b = copy.deepcopy(_fresh(CASES["buffer_update"])), _fresh(CASES["buffer_update"])
    torch._dynamo.reset()
    assert torch.equal(a(X), torch.compile(b, backend="eager")(X))


def test_ops_in_a_forward_hook_are_placed_as_eager_places_them() -> None:
    report = compare_compiled(_fresh(CASES["hook_op"]), X)
    assert report, "\n".join(report.lines())
    assert not [d for d in report.divergences if d.kind == "scope"]


def test_numpy_round_trip_traced_into_torch_is_aligned_not_a_divergence() -> None:
    report = compare_compiled(_fresh(CASES["numpy"]), X)
    text = "\n".join(report.lines())
    assert report, text
    assert report.divergences == [], text
    (trip,) = report.rewrites
    assert [e.op for e in trip.eager] == ["numpy"]
    assert "numpy.tanh" in [c.op for c in trip.compiled]
    assert report.matched_ops == report.eager_ops
    assert "NumPy traced into torch ops (aligned): eager numpy#0" in text
    assert "divergence" not in text
    assert report.to_data()["ops"]["divergent"] == 0


def test_checkpoint_region_is_looked_inside() -> None:
    report = compare_compiled(_fresh(CASES["checkpoint"]), X)
    assert report, "\n".join(report.lines())
    ops = [op.target for g in report.graphs for op in g.ops]
    assert "tanh" in ops and not any("checkpoint" in op for op in ops)


def test_swap_in_user_code_names_its_source_line() -> None:
    report = compare_compiled(_fresh(CASES["swap_under_compile"]), X)
    assert not report
    (div,) = report.failing_divergences
    assert div.category == "divergence"
    assert f"{THIS_FILE}:" in div.source and "in forward" in div.source
    assert "compiled ops from" in "\n".join(report.lines())


def test_removed_hook_recompiles_and_stops_firing() -> None:
    """Dynamo guards the length of a module's hook dict even with
    ``skip_nnmodule_hook_guards``: removing a hook recompiles, and the hook is gone."""
    report = _check(CASES["hook_removed_after_compile"])
    assert report, "\n".join(report.lines())
    assert report.hook_events["compiled_2"] == report.hook_events["eager_2"] == []
    assert report.recompiles == 1
    assert "_forward_hooks" in report.recompile_reasons[0]


def test_lines_zero_lists_every_graph() -> None:
    report = compare_compiled(_fresh(CASES["two_breaks"]), X, allow_graph_breaks=True)
    assert report.graph_count == 3
    text = "\n".join(report.lines(0))
    assert all(f"graph #{i} " in text for i in range(3)), text


def test_recompile_reason_keeps_the_full_path() -> None:
    report = _check(CASES["new_python_int"])
    (reason,) = report.recompile_reasons
    assert "k == 2" in reason
    assert f"{THIS_FILE}:" in reason and "in forward" in reason
    assert "<file>" not in reason


def test_recompile_reason_without_a_user_stack_completes_the_cut_path() -> None:
    """torch 2.9 writes no ``User stack trace``, only the guard's comment, its path cut to
    the last characters: the loaded module whose file ends with it completes it."""
    cut = __file__[-24:]
    raw = f"0/0: k == 2          # return self.fc(x) * k  # {cut}:165 in forward"
    assert readable_reason(raw) == (
        f"0/0: k == 2 (return self.fc(x) * k; {readable_path(__file__)}:165 in forward)"
    )
    unknown = "0/0: k == 2   # return self.fc(x) * k  # mp/nowhere_at_all.py:7 in forward"
    assert readable_reason(unknown).endswith("; mp/nowhere_at_all.py:7 in forward)")


def test_lazy_module_is_compared_from_its_initialised_state() -> None:
    """The starting-state snapshot skips parameters a lazy module has not made yet."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU())
    report = compare_compiled(model, X)
    assert report, "\n".join(report.lines())
    assert model[0].weight.shape == (4, 8)


class WritesWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.fc.weight.mul_(0.5)  # a forward that writes a parameter in place
        return self.fc(x)


def test_parameter_written_in_place_is_reported() -> None:
    torch.manual_seed(0)
    report = compare_compiled(WritesWeight(), X)
    assert not report
    assert report.numerics[0].path == "fc.weight (parameter)"
