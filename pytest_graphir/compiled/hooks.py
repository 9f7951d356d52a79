"""Which of a model's own forward hooks fire, per module, in order.

:class:`HookLog` wraps every forward pre-hook and forward hook registered on the
model's modules (``module._forward_pre_hooks`` / ``module._forward_hooks``, the
dicts ``register_forward_pre_hook`` / ``register_forward_hook`` fill) in a function
that appends ``(module path, kind, hook name)`` to a list, then calls the hook. The
hook ids, their order and their ``with_kwargs`` / ``always_call`` flags are kept, so
PyTorch calls them exactly as before; :meth:`HookLog.restore` puts the original
functions back.

Under ``torch.compile`` Dynamo traces the wrapper like the hook itself (the list
append is a side effect it replays), so the same log shows which hooks fired in
the compiled call. A hook registered after the first compiled call is wrapped by a
second :meth:`HookLog.wrap` and reported as *late*: while
``torch._dynamo.config.skip_nnmodule_hook_guards`` is True, Dynamo installs no guard
on a module's hook dicts, reuses the graph compiled without the hook, and the hook
silently never fires (``docs/torch-notes.md``, *Module hooks under torch.compile*).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..names import hook_event, hook_name

KINDS = (
    ("_forward_pre_hooks", "forward_pre"),
    ("_forward_hooks", "forward"),
    ("_backward_pre_hooks", "backward_pre"),
    ("_backward_hooks", "backward"),
)
"""The module hook dicts that are logged, and the kind each event gets (the last two
are ``register_full_backward_pre_hook`` / ``register_full_backward_hook``)."""
BACKWARD_KINDS = frozenset({"backward_pre", "backward"})

_MARK = "__graphir_hook__"


@dataclass(frozen=True)
class HookEvent:
    """One hook call.

    Attributes:
        module: module path (``""`` for the model itself).
        kind: ``"forward_pre"`` or ``"forward"``.
        hook: the hook's name (:func:`pytest_graphir.names.hook_name`).
    """

    module: str
    kind: str
    hook: str

    def __str__(self) -> str:
        """The one hook-event spelling (:func:`pytest_graphir.names.hook_event`), as in
        a trace's ``hooks`` section: ``fc1 forward_hook log_output``."""
        return hook_event(self.module, f"{self.kind}_hook", self.hook)


class HookLog:
    """Log the calls of a model's forward pre-hooks and forward hooks (module docstring).

    Args:
        model: the model whose modules' hooks are logged.

    Attributes:
        events: the hook calls logged so far, in order.
        late: hooks wrapped by a :meth:`wrap` after the first, as ``HookEvent``s.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.events: list[HookEvent] = []
        self.late: list[HookEvent] = []
        self._wrapped: list[tuple[dict[int, Any], int, Any, Any]] = []
        self._calls = 0

    def wrap(self) -> list[HookEvent]:
        """Wrap every hook not wrapped yet; return them (from the second call on,
        they are also added to :attr:`late`)."""
        new: list[HookEvent] = []
        for path, module in self.model.named_modules():
            for attr, kind in KINDS:
                hooks: dict[int, Any] = getattr(module, attr)
                for hook_id, fn in list(hooks.items()):
                    if getattr(fn, _MARK, None) is not None:
                        continue
                    event = HookEvent(path, kind, hook_name(fn))
                    wrapper = self._wrapper(fn, event)
                    hooks[hook_id] = wrapper
                    self._wrapped.append((hooks, hook_id, fn, wrapper))
                    new.append(event)
        if self._calls:
            self.late.extend(new)
        self._calls += 1
        return new

    def _wrapper(self, fn: Callable[..., Any], event: HookEvent) -> Callable[..., Any]:
        log = self.events

        def logged(*args: Any, **kwargs: Any) -> Any:
            log.append(event)
            return fn(*args, **kwargs)

        setattr(logged, _MARK, fn)
        return logged

    def forward_hook_codes(self) -> dict[tuple[str, str], str]:
        """``(co_filename, co_name) -> module path`` of every wrapped forward hook: the
        code Dynamo's ``stack_trace`` names for an op run inside that hook."""
        out: dict[tuple[str, str], str] = {}
        for path, module in self.model.named_modules():
            for fn in module._forward_hooks.values():
                original = getattr(fn, _MARK, fn)
                inner = getattr(original, "func", original)
                code = getattr(inner, "__code__", None) or getattr(
                    vars(type(inner)).get("__call__"), "__code__", None
                )
                if code is not None:
                    out.setdefault((code.co_filename, code.co_name), path)
        return out

    def take(self) -> list[HookEvent]:
        """Return the events logged since the last ``take`` and clear the log."""
        out = list(self.events)
        self.events.clear()
        return out

    def restore(self) -> None:
        """Put every original hook function back (hooks removed meanwhile stay removed)."""
        for hooks, hook_id, fn, wrapper in reversed(self._wrapped):
            if hooks.get(hook_id) is wrapper:
                hooks[hook_id] = fn
        self._wrapped.clear()
