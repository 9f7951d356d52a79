"""Hook firing order: the recorder's own events and the model's own hooks.

Events are ``"<module label> <event>"`` for the recorder's hooks and
``"<module label> <event> <hook qualname>"`` for hooks the model already had, in
firing order; ``<module label>`` is the module path with ``@i`` for a module's
i-th call (i >= 1), as in node names.

Where they come from (PyTorch's ``nn.Module`` hook machinery):

* ``forward_pre`` / ``forward``: the tracer's global forward pre-hook and forward
  hook (:class:`~pytest_graphir.capture.scope.ModuleScope`), which fire before the
  module's own hooks (and also feed the gradient taps);
* ``backward_pre`` / ``backward``: when a module call's output gradients, then its
  input gradients, are known, only when a backward pass is traced. They come from
  :class:`~pytest_graphir.capture.backward.GradientTaps` (hooks on autograd nodes,
  no wrapping of the module's tensors, so in-place use of module outputs stays
  legal) and fire where PyTorch's full backward (pre-)hooks would; a module with
  backward hooks of its own gets the recorder's as its first full backward hooks.
  They check an ``active`` flag, as autograd may keep them past the trace;
* the model's own hooks (``_forward_pre_hooks``, ``_forward_hooks``,
  ``_backward_pre_hooks``, ``_backward_hooks``, state-dict hooks), wrapped by
  :class:`UserHooks` for the duration of the trace. ``compare_compiled`` logs them
  with the same class.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..names import ROOT_LABEL, hook_event, hook_name, module_node_name
from .backward import GradientTaps
from .scope import ModuleScope

USER_HOOK_DICTS = {
    "_forward_pre_hooks": "forward_pre",
    "_forward_hooks": "forward",
    "_backward_pre_hooks": "backward_pre",
    "_backward_hooks": "backward",
    "_state_dict_pre_hooks": "state_dict_pre",
    "_state_dict_hooks": "state_dict",
    "_load_state_dict_pre_hooks": "load_state_dict_pre",
    "_load_state_dict_post_hooks": "load_state_dict_post",
}
"""``nn.Module`` attributes holding the model's own hooks, and the kind of their events
(the event reads ``<kind>_hook``)."""
CALL_HOOK_DICTS = dict(list(USER_HOOK_DICTS.items())[:4])
"""The hook dicts a module call fires (``register_forward_(pre_)hook`` and
``register_full_backward_(pre_)hook``)."""


@dataclass(frozen=True)
class HookEvent:
    """One call of one of the model's own hooks.

    Attributes:
        module: module path (``""`` for the model itself).
        kind: ``"forward_pre"``, ``"forward"``, ``"backward_pre"``, ``"backward"`` (or a
            state-dict kind, :data:`USER_HOOK_DICTS`).
        hook: the hook's name (:func:`pytest_graphir.names.hook_name`).
    """

    module: str
    kind: str
    hook: str

    def __str__(self) -> str:
        """The one hook-event spelling (:func:`pytest_graphir.names.hook_event`), as in
        a trace's ``hooks`` section: ``fc1 forward_hook log_output``."""
        return hook_event(self.module, f"{self.kind}_hook", self.hook)


class UserHooks:
    """The model's own hooks, each swapped for a wrapper that reports its call first.

    Each value of a module's hook dicts is replaced under the same key, so keys, dict
    order and the flag dicts keyed by hook id (``with_kwargs``, ``always_call``) are
    untouched, and PyTorch calls the hooks exactly as before (``prepend`` order
    included). Under ``torch.compile`` Dynamo traces the wrapper like the hook
    itself (the list append is a side effect it replays), so the same log shows
    which hooks fired in a compiled call.

    Attributes:
        events: the events logged by :meth:`wrap`'s default ``on_call``, in order.
    """

    def __init__(self) -> None:
        self.events: list[HookEvent] = []
        self._wrapped: list[tuple[dict[Any, Any], Any, Any, Any]] = []
        self._originals: dict[int, Any] = {}

    def wrap(
        self,
        modules: Iterable[tuple[str, Any]],
        dicts: Mapping[str, str] = USER_HOOK_DICTS,
        on_call: Callable[[HookEvent], object] | None = None,
    ) -> list[HookEvent]:
        """Wrap every hook of ``modules`` (``(path, module)`` pairs) in the hook dicts
        ``dicts`` (attribute -> event kind) not wrapped yet; return their events.
        ``on_call(event)`` runs before each wrapped hook (default: append to
        :attr:`events`); only the wrappers hold it, so :meth:`restore` lets it go."""
        if on_call is None:
            events = self.events

            def on_call(event: HookEvent) -> None:  # a function: Dynamo inlines it
                events.append(event)

        new: list[HookEvent] = []
        for path, module in modules:
            for attr, kind in dicts.items():
                hooks = getattr(module, attr, None) or {}
                for key, hook in list(hooks.items()):
                    if id(hook) in self._originals:
                        continue
                    event = HookEvent(path, kind, hook_name(hook))
                    hooks[key] = wrapper = _wrapper(hook, event, on_call)
                    self._wrapped.append((hooks, key, hook, wrapper))
                    self._originals[id(wrapper)] = hook
                    new.append(event)
        return new

    def original(self, hook: Any) -> Any:
        """The hook a wrapper stands for (``hook`` itself when it is no wrapper)."""
        return self._originals.get(id(hook), hook)

    def take(self) -> list[HookEvent]:
        """Return the events logged since the last ``take`` and clear the log."""
        out = list(self.events)
        self.events.clear()
        return out

    def restore(self) -> None:
        """Put every original hook back under its key (hooks removed meanwhile stay
        removed)."""
        for hooks, key, hook, wrapper in self._wrapped:
            if hooks.get(key) is wrapper:
                hooks[key] = hook
        self._wrapped.clear()
        self._originals.clear()


def _wrapper(hook: Any, event: HookEvent, on_call: Callable[[HookEvent], object]) -> Any:
    def recording_hook(*args: Any, **kwargs: Any) -> Any:
        on_call(event)
        return hook(*args, **kwargs)

    with contextlib.suppress(AttributeError, TypeError):  # no __name__ and friends
        functools.update_wrapper(recording_hook, hook)
    return recording_hook


class HookRecorder:
    """Records hook events of one traced run (see the module docstring), of every
    module of ``scope`` outside its blackboxes; ``scope`` reports its forward events
    here.

    Args:
        scope: the trace's module scope (module names, blackbox paths).
        on_backward: ``on_backward(label, module, grad_input, grad_output)`` when a
            module call's input gradients are known, for gradient statistics; None:
            no backward events. Given, backward events are recorded too, with
            :class:`~pytest_graphir.capture.backward.GradientTaps`.

    Attributes:
        events: the events, in firing order.
        active: events are recorded only while True.
    """

    def __init__(
        self,
        scope: ModuleScope,
        on_backward: Callable[[str, Any, Any, Any], None] | None,
    ) -> None:
        boxes = scope.blackbox_paths
        self.names = {
            m: p for m, p in scope.names.items() if not any(p.startswith(b + ".") for b in boxes)
        }
        scope.on_event = self.forward_event
        self.on_backward = on_backward
        self.events: list[str] = []
        self.active = False
        self.forward_calls: dict[str, int] = {}
        self._backward_counts: dict[tuple[str, str], int] = {}
        self._last_label: dict[str, str] = {}
        self._user_hooks = UserHooks()
        self._taps: GradientTaps | None = None

    # -- events from the tracer's own hooks --------------------------------------------
    def forward_event(self, label: str, path: str, event: str, module: Any, value: Any) -> None:
        """Called by the scope hooks: ``forward_pre`` on entry, ``forward`` on exit
        (``value``: the call's positional arguments, its output); the gradient taps
        follow the same calls."""
        if self.active:
            self._last_label[path] = label
            if event == "forward_pre":
                self.forward_calls[path] = self.forward_calls.get(path, 0) + 1
            self.events.append(hook_event(label, event))
            if self._taps is not None:
                tap = self._taps.enter if event == "forward_pre" else self._taps.exit
                tap(module, value)

    def _backward_event(self, module: Any, event: str) -> str | None:
        """Record a backward event of a traced module; return its label (None: ignored).
        The label is the forward call's: backward visits a reused module's calls
        last-first."""
        path = self.names.get(module)
        if not self.active or path is None:
            return None
        path = path or ROOT_LABEL
        k = self._backward_counts.get((path, event), 0)
        self._backward_counts[(path, event)] = k + 1
        label = module_node_name(path, self.forward_calls.get(path, 1) - 1 - k)
        self._last_label[path] = label
        self.events.append(hook_event(label, event))
        return label

    def _backward_pre(self, module: Any, grad_output: Any) -> None:
        self._backward_event(module, "backward_pre")

    def _backward_post(self, module: Any, grad_input: Any, grad_output: Any) -> None:
        if (label := self._backward_event(module, "backward")) is not None:
            self.on_backward(label, module, grad_input, grad_output)  # type: ignore[misc]

    def _user_hook(self, event: HookEvent) -> None:
        """Record a call of one of the model's own hooks, under its module's label."""
        if self.active:
            label = self._last_label.get(event.module, event.module)
            self.events.append(hook_event(label, f"{event.kind}_hook", event.hook))

    def __enter__(self) -> None:
        """Wrap the model's own hooks and, for backward, install the gradient taps."""
        modules = ((path or ROOT_LABEL, m) for m, path in self.names.items())
        self._user_hooks.wrap(modules, on_call=self._user_hook)
        if self.on_backward is not None:
            self._taps = GradientTaps(self.names, self._backward_pre, self._backward_post)
            self._taps.install()
        self.active = True

    def forward_done(self) -> None:
        """The traced forward is over: hook the autograd graph it built (see
        :meth:`GradientTaps.arm`)."""
        if self._taps is not None:
            self._taps.arm()

    def __exit__(self, *exc: object) -> None:
        """Put every wrapped hook back under its key and remove the gradient taps."""
        self.active = False
        self._user_hooks.restore()
        if self._taps is not None:
            self._taps.remove()
            self._taps = None
