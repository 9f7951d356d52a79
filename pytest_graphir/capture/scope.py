"""Module scope from PyTorch's global module hooks.

Uses ``torch.nn.modules.module.register_module_forward_pre_hook`` and
``register_module_forward_hook(..., with_kwargs=True, always_call=True)``: global
hooks fire for every ``nn.Module.__call__``, before the module's own hooks, and the
``always_call`` post hook also fires when the forward raises, so the scope stack
stays balanced. Modules that are not part of the traced model (Dynamo's
``OptimizedModule``, modules built on the fly, another model) are ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.modules.module as mm

from ..names import ROOT_LABEL, module_node_name


@dataclass(eq=False)
class ModuleScope:
    """Keeps the stack of traced module calls and reports enter/exit to the tracer.

    Args:
        names: module object -> module path (``""`` for the root), from
            ``model.named_modules()``.
        on_enter: ``on_enter(label, module, args)`` when a traced module call starts;
            ``label`` is the module path, with ``@i`` for its i-th call (i >= 1).
        on_exit: ``on_exit(label, module, kwargs, output)`` when it ends.
        on_event: optional ``on_event(label, path, event, module, value)`` with event
            ``forward_pre`` (``value`` the call's positional arguments) or
            ``forward`` (``value`` its output: on the exception path of the
            ``always_call`` hook what torch passes, None when the forward raised),
            for the hook-order recorder and its gradient taps
            (:class:`~.hooks.HookRecorder`); the root module is reported as
            ``<root>``.

    The root module gets no scope entry: ops in the root forward have scope ``""``.
    """

    names: dict[torch.nn.Module, str]
    on_enter: Callable[[str, Any, tuple[Any, ...]], None]
    on_exit: Callable[[str, Any, dict[str, Any], Any], None]
    on_event: Callable[[str, str, str, Any, Any], None] | None = None
    blackboxes: set[Any] = field(default_factory=set)
    """Modules recorded as one node with nothing inside (blackbox / depth)."""
    blackbox_paths: set[str] = field(default_factory=set)
    """Their module paths."""
    blackbox_depth: int = 0
    """Depth of module calls inside the current blackbox module (0: none)."""
    stack: list[str] = field(default_factory=list)
    calls: dict[str, int] = field(default_factory=dict)
    active: bool = False
    _handles: list[Any] = field(default_factory=list)

    def enter(self, module: Any, args: tuple[Any, ...]) -> None:
        """The global forward pre-hook: a call of ``module`` starts (recorded while
        :attr:`active`; a pipeline stage's counted call calls it itself)."""
        # Must return None: a non-None value would replace the module's args.
        if not self.active:
            return
        if self.blackbox_depth:  # a module inside a blackbox: not part of the graph
            self.blackbox_depth += 1
            return
        path = self.names.get(module)
        if not path:  # foreign module, or the root
            if path == "" and self.on_event is not None:
                self.on_event(ROOT_LABEL, ROOT_LABEL, "forward_pre", module, args)
            return
        if module in self.blackboxes:
            self.blackbox_depth = 1
        k = self.calls.get(path, 0)
        self.calls[path] = k + 1
        label = module_node_name(path, k)
        self.stack.append(label)
        if self.on_event is not None:
            self.on_event(label, path, "forward_pre", module, args)
        self.on_enter(label, module, args)

    def _post(self, module: Any, args: tuple[Any, ...], *rest: Any) -> None:
        # Called as (module, args, kwargs, output) normally, but as
        # (module, args, output) on the exception path of always_call hooks, so
        # accept both instead of raising a TypeError that torch turns into a warning.
        if not self.active:
            return
        if self.blackbox_depth > 1:
            self.blackbox_depth -= 1
            return
        self.blackbox_depth = 0
        path = self.names.get(module)
        if not path or not self.stack:
            if path == "" and self.on_event is not None:
                self.on_event(ROOT_LABEL, ROOT_LABEL, "forward", module, rest[-1])
            return
        label = self.stack.pop()
        if self.on_event is not None:
            self.on_event(label, path, "forward", module, rest[-1])
        if len(rest) == 2:
            self.on_exit(label, module, rest[0], rest[1])

    def __enter__(self) -> None:
        """Register the two global hooks (undo with :meth:`__exit__`). Run with SIGINT
        deferred, and with :meth:`__exit__` registered for a Ctrl-C
        (:func:`.interrupts.register`), as the tracer's clean-up stack does both: a
        Ctrl-C here would lose a handle."""
        post = mm.register_module_forward_hook(self._post, with_kwargs=True, always_call=True)
        self._handles += [mm.register_module_forward_pre_hook(self.enter), post]
        self.active = True

    def __exit__(self, *exc: object) -> None:
        """Remove the hooks and every entry they added to torch's global hook dicts;
        idempotent. Run with SIGINT deferred, as the tracer's clean-up stack runs it
        (a Ctrl-C here would leave hooks registered).

        ``RemovableHandle.remove`` leaves the id in
        ``torch.nn.modules.module._global_forward_hooks_with_kwargs``; it is popped
        here so the global state is exactly as before :meth:`__enter__`.
        """
        self.active = False
        for handle in self._handles:
            handle.remove()
            mm._global_forward_hooks_with_kwargs.pop(handle.id, None)
        self._handles.clear()
