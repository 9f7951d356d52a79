"""Hook firing order: the recorder's events, the model's own hooks, restoration,
cleanup when the forward or backward raises, and the sequence diff."""

from __future__ import annotations

import functools
from typing import Any

import models
import pytest
import torch
import torch.nn.modules.module as mm
from helpers import Boom, Observer, snapshot_doc
from torch import nn

from pytest_graphir import trace
from pytest_graphir.compare import compare, hook_order_changes

GLOBAL_DICTS = (
    "_global_forward_pre_hooks",
    "_global_forward_hooks",
    "_global_forward_hooks_always_called",
    "_global_forward_hooks_with_kwargs",
    "_global_backward_pre_hooks",
    "_global_backward_hooks",
)
MODULE_DICTS = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_backward_pre_hooks",
    "_backward_hooks",
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)


def _global_state() -> dict[str, Any]:
    state: dict[str, Any] = {name: list(getattr(mm, name).items()) for name in GLOBAL_DICTS}
    state["_global_is_full_backward_hook"] = mm._global_is_full_backward_hook
    return state


def _hook_state(model: nn.Module) -> list[tuple[str, str, list[tuple[Any, Any]]]]:
    """Every hook dict of every module: keys in order and the hook objects themselves."""
    return [
        (path, name, list(getattr(m, name).items()))
        for path, m in model.named_modules()
        for name in MODULE_DICTS
    ]


def scale_hook(module: nn.Module, args: Any, output: Any) -> torch.Tensor:
    return output * 2  # a hook that changes the output: must still take effect


def kw_pre_hook(module: nn.Module, args: Any, kwargs: Any) -> None:
    return None


def always_hook(module: nn.Module, args: Any, output: Any) -> None:
    return None


def bw_hook(module: nn.Module, grad_input: Any, grad_output: Any) -> None:
    return None


def bw_pre_hook(module: nn.Module, grad_output: Any) -> None:
    return None


def sd_hook(module: nn.Module, state_dict: Any, prefix: str, local_metadata: Any) -> None:
    return None


def _hooked_mlp() -> tuple[nn.Module, torch.Tensor, Observer]:
    torch.manual_seed(0)
    model, (x,) = models.mlp()
    observer = Observer()
    model.fc1.register_forward_hook(scale_hook)
    model.fc1.register_forward_hook(observer, prepend=True)
    model.fc1.register_forward_pre_hook(kw_pre_hook, with_kwargs=True)
    model.act.register_forward_hook(always_hook, always_call=True)
    model.fc2.register_full_backward_hook(bw_hook)
    model.fc2.register_full_backward_pre_hook(bw_pre_hook)
    model._register_state_dict_hook(sd_hook)
    return model, x, observer


def test_recorder_events_follow_module_calls() -> None:
    torch.manual_seed(0)
    model, (ids,) = models.tiny_transformer()
    events = trace(model, ids, hooks=True).sections["hooks"]
    expected = ["<root> forward_pre", "embed forward_pre", "embed forward"]
    for block in ("blocks.0", "blocks.1", "shared", "shared@1"):
        norm, proj = (
            (f"{block}.norm", f"{block}.proj")
            if "@" not in block
            else ("shared.norm@1", "shared.proj@1")
        )
        expected += [
            f"{block} forward_pre",
            f"{norm} forward_pre",
            f"{norm} forward",
            f"{proj} forward_pre",
            f"{proj} forward",
            f"{block} forward",
        ]
    expected += ["head forward_pre", "head forward", "<root> forward"]
    assert events == expected


def test_user_hooks_recorded_by_name_in_firing_order() -> None:
    model, x, observer = _hooked_mlp()
    graph = trace(model, x, hooks=True, backward=True)
    events = graph.sections["hooks"]
    fc1 = [e for e in events if e.startswith("fc1 ")]
    # global recorder first, then the module's own hooks: prepend=True before appended
    assert fc1[:4] == [
        "fc1 forward_pre",
        "fc1 forward_pre_hook kw_pre_hook",
        "fc1 forward",
        "fc1 forward_hook Observer.__call__",
    ]
    assert fc1[4] == "fc1 forward_hook scale_hook"
    assert "act forward_hook always_hook" in events
    fc2_bw = [e for e in events if e.startswith("fc2 backward")]
    assert fc2_bw == [
        "fc2 backward_pre",
        "fc2 backward_pre_hook bw_pre_hook",
        "fc2 backward",
        "fc2 backward_hook bw_hook",
    ]
    assert observer.calls == 1  # the wrapped hook really ran
    # scale_hook doubled fc1's output and the trace saw the doubled tensor flow on
    plain = model.fc2(model.act(model.fc1(x)))
    assert graph.node("fc2/linear#0").outputs[0].stats["mean"] == pytest.approx(
        plain.mean().item(), rel=1e-5
    )


def test_user_hooks_restored_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    model, x, _ = _hooked_mlp()
    # registering a global full backward hook sets this flag for good in PyTorch
    monkeypatch.setattr(mm, "_global_is_full_backward_hook", None)  # as in a new process
    before = _hook_state(model)
    glob = _global_state()
    trace(model, x, hooks=True, backward=True)
    assert mm._global_is_full_backward_hook is None
    after = _hook_state(model)
    assert [(p, n, [k for k, _ in items]) for p, n, items in after] == [
        (p, n, [k for k, _ in items]) for p, n, items in before
    ]
    for (_, _, old), (_, _, new) in zip(before, after, strict=True):
        assert all(a is b for (_, a), (_, b) in zip(old, new, strict=True))
    assert _global_state() == glob
    assert model.state_dict().keys()  # the state-dict hook still works


def test_forward_raising_restores_everything() -> None:
    model, x, _ = _hooked_mlp()

    def explode(module: nn.Module, args: Any, output: Any) -> None:
        raise Boom("in act")

    model.act.register_forward_hook(explode)
    before, glob = _hook_state(model), _global_state()
    with pytest.raises(Boom, match="in act"):
        trace(model, x, hooks=True, backward=True)
    assert [(p, n, [(k, id(h)) for k, h in i]) for p, n, i in _hook_state(model)] == [
        (p, n, [(k, id(h)) for k, h in i]) for p, n, i in before
    ]
    assert _global_state() == glob
    assert torch._C._len_torch_function_stack() == 0


def test_backward_raising_restores_everything() -> None:
    model, x, _ = _hooked_mlp()
    before, glob = _hook_state(model), _global_state()

    def bad_loss(output: Any) -> torch.Tensor:
        raise Boom("in loss")

    with pytest.raises(Boom, match="in loss"):
        trace(model, x, hooks=True, backward=bad_loss)

    def raise_in_backward(module: nn.Module, grad_input: Any, grad_output: Any) -> None:
        raise Boom("in backward")

    handle = model.fc1.register_full_backward_hook(raise_in_backward)
    with pytest.raises(Boom, match="in backward"):
        trace(model, x, hooks=True, backward=True)
    handle.remove()
    assert [(p, n, [(k, id(h)) for k, h in i]) for p, n, i in _hook_state(model)] == [
        (p, n, [(k, id(h)) for k, h in i]) for p, n, i in before
    ]
    assert _global_state() == glob


def test_recorder_inactive_after_trace() -> None:
    """PyTorch keeps backward hooks captured at forward time; ours check a flag."""
    model, x, _ = _hooked_mlp()
    graph = trace(model, x, hooks=True, backward=True)
    n_events = len(graph.sections["hooks"])
    model(x).sum().backward()  # plain forward and backward after the trace
    assert len(graph.sections["hooks"]) == n_events


def test_hook_names() -> None:
    from pytest_graphir.names import hook_name

    def local_hook(*args: Any) -> None:
        return None

    assert hook_name(scale_hook) == "scale_hook"
    assert hook_name(Observer()) == "Observer.__call__"
    assert hook_name(functools.partial(scale_hook)) == "scale_hook"
    assert hook_name(lambda *a: None) == "<lambda>"
    assert hook_name(local_hook) == "local_hook"  # no <locals>: a test rename is no change


def test_one_hook_name_and_one_event_spelling_in_trace_and_compiled() -> None:
    """The same hook reaches a trace's hooks section and the compiled check's hook
    events under one name and one spelling (torch's _WrappedHook unwrapped)."""
    from pytest_graphir.capture.hooks import CALL_HOOK_DICTS, UserHooks

    def local_hook(module: Any, args: Any, kwargs: Any, out: Any) -> None:
        return None

    torch.manual_seed(0)
    model, (x,) = models.mlp()
    model.fc1.register_forward_hook(local_hook, with_kwargs=True)
    traced = [e for e in trace(model, x, hooks=True).sections["hooks"] if "local" in e]
    log = UserHooks()
    log.wrap(model.named_modules(), CALL_HOOK_DICTS)
    try:
        model(x)
    finally:
        log.restore()
    compiled = [str(e) for e in log.take()]
    assert traced == compiled == ["fc1 forward_hook local_hook"]


def _doc(prepend: bool = False, module: str = "fc1", extra: bool = False) -> dict[str, Any]:
    torch.manual_seed(0)
    model, (x,) = models.mlp()
    target = getattr(model, module)
    target.register_forward_hook(scale_hook)
    target.register_forward_hook(Observer(), prepend=prepend)
    if extra:
        model.fc2.register_forward_hook(always_hook)
    return snapshot_doc(model, x, hooks=True)


def test_prepend_instead_of_append_names_the_moved_event() -> None:
    result = compare(_doc(), _doc(prepend=True))
    assert [str(c) for c in result.changes if c.kind != "drift"] == [
        "changed: fc1 forward_hook 'Observer.__call__' fired before 'scale_hook' (was after)"
    ]


def test_hook_moved_to_another_module() -> None:
    result = compare(_doc(module="fc1"), _doc(module="fc2"))
    structural = [str(c) for c in result.changes if c.kind != "drift"]
    assert "changed: fc2 forward_hook 'scale_hook' moved here from fc1" in structural
    assert "changed: fc2 forward_hook 'Observer.__call__' moved here from fc1" in structural


def test_hook_appeared_and_vanished() -> None:
    result = compare(_doc(), _doc(extra=True))
    assert [str(c) for c in result.changes if c.kind != "drift"] == [
        "added: hooks: fc2 forward_hook always_hook (appeared)"
    ]
    result = compare(_doc(extra=True), _doc())
    assert [str(c) for c in result.changes if c.kind != "drift"] == [
        "removed: hooks: fc2 forward_hook always_hook (vanished)"
    ]


def test_sequence_diff_of_identical_lists_is_empty() -> None:
    events = ["a forward_pre", "a forward"]
    assert hook_order_changes(events, list(events)) == []


def test_hook_diff_with_repeated_events_reports_what_vanished() -> None:
    old = ["A", "E", "E", "E"]
    new = ["E", "A"]
    text = [str(c) for c in hook_order_changes(old, new)]
    assert text.count("removed: hooks: E (vanished)") == 2
    assert any("fired" in t for t in text)
