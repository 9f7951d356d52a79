"""Hook firing order: the recorder's own events and the model's own hooks.

Events are ``"<module label> <event>"`` for the recorder's hooks and
``"<module label> <event> <hook qualname>"`` for hooks the model already had, in
firing order; ``<module label>`` is the module path with ``@i`` for a module's
i-th call (i >= 1), as in node names.

Where they come from (PyTorch's ``nn.Module`` hook machinery):

* ``forward_pre`` / ``forward``: the tracer's global forward pre-hook and forward
  hook (:class:`~pytest_graphir.capture.scope.ModuleScope`), which fire before the
  module's own hooks;
* ``backward_pre`` / ``backward``: when a module call's output gradients, then its
  input gradients, are known, only when a backward pass is traced. They come from
  :class:`~pytest_graphir.capture.backward.GradientTaps` (hooks on autograd nodes,
  no wrapping of the module's tensors, so in-place use of module outputs stays
  legal) and fire where PyTorch's full backward (pre-)hooks would; a module with
  backward hooks of its own gets the recorder's as its first full backward hooks.
  They check an ``active`` flag, as autograd may keep them past the trace;
* the model's own hooks (``_forward_pre_hooks``, ``_forward_hooks``,
  ``_backward_pre_hooks``, ``_backward_hooks``, state-dict hooks): each value is
  swapped for a recording wrapper under the same key for the duration of the trace,
  then put back. Keys, dict order and the flag dicts keyed by hook id
  (``with_kwargs``, ``always_call``) are untouched, so ``prepend`` order and flags
  are exactly as before.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..names import ROOT_LABEL, hook_event, hook_name, module_node_name
from .backward import GradientTaps

USER_HOOK_DICTS = {
    "_forward_pre_hooks": "forward_pre_hook",
    "_forward_hooks": "forward_hook",
    "_backward_pre_hooks": "backward_pre_hook",
    "_backward_hooks": "backward_hook",
    "_state_dict_pre_hooks": "state_dict_pre_hook",
    "_state_dict_hooks": "state_dict_hook",
    "_load_state_dict_pre_hooks": "load_state_dict_pre_hook",
    "_load_state_dict_post_hooks": "load_state_dict_post_hook",
}
"""``nn.Module`` attributes holding the model's own hooks, and their event names."""


class HookRecorder:
    """Records hook events of one traced run (see the module docstring).

    Args:
        names: module object -> module path, from ``model.named_modules()``.
        backward: also record backward events, with
            :class:`~pytest_graphir.capture.backward.GradientTaps`.
        on_backward: ``on_backward(label, module, grad_input, grad_output)`` from the
            full backward hook, for gradient statistics; may be None.

    Attributes:
        events: the events, in firing order.
        active: events are recorded only while True.
    """

    def __init__(
        self,
        names: dict[Any, str],
        backward: bool,
        on_backward: Callable[[str, Any, Any, Any], None] | None = None,
    ) -> None:
        self.names = names
        self.backward = backward
        self.on_backward = on_backward
        self.events: list[str] = []
        self.active = False
        self.forward_calls: dict[str, int] = {}
        self._backward_counts: dict[tuple[str, str], int] = {}
        self._last_label: dict[str, str] = {}
        self._wrapped: list[tuple[dict[Any, Any], Any, Any, Any]] = []
        self._taps: GradientTaps | None = None

    # -- events from the tracer's own hooks --------------------------------------------
    def forward_event(self, label: str, path: str, event: str) -> None:
        """Called by the scope hooks: ``forward_pre`` on entry, ``forward`` on exit."""
        if self.active:
            self._last_label[path] = label
            if event == "forward_pre":
                self.forward_calls[path] = self.forward_calls.get(path, 0) + 1
            self.events.append(hook_event(label, event))

    def _backward_label(self, path: str, event: str) -> str:
        """Label of the forward call a backward event belongs to: backward visits a
        reused module's calls last-first."""
        k = self._backward_counts.get((path, event), 0)
        self._backward_counts[(path, event)] = k + 1
        call = self.forward_calls.get(path, 1) - 1 - k
        return module_node_name(path, call)

    def _backward_event(self, module: Any, event: str) -> str | None:
        """Record a backward event of a traced module; return its label (None: ignored)."""
        path = self.names.get(module)
        if not self.active or path is None:
            return None
        path = path or ROOT_LABEL
        label = self._backward_label(path, event)
        self._last_label[path] = label
        self.events.append(hook_event(label, event))
        return label

    def _backward_pre(self, module: Any, grad_output: Any) -> None:
        self._backward_event(module, "backward_pre")

    def _backward_post(self, module: Any, grad_input: Any, grad_output: Any) -> None:
        label = self._backward_event(module, "backward")
        if label is not None and self.on_backward is not None:
            self.on_backward(label, module, grad_input, grad_output)

    # -- the model's own hooks ---------------------------------------------------------
    def _wrap(self, hook: Any, path: str, event: str) -> Any:
        name = hook_name(hook)
        recorder = self

        def recording_hook(*args: Any, **kwargs: Any) -> Any:
            if recorder.active:
                label = recorder._last_label.get(path, path)
                recorder.events.append(hook_event(label, event, name))
            return hook(*args, **kwargs)

        try:
            functools.update_wrapper(recording_hook, hook)
        except (AttributeError, TypeError):  # objects without __name__ and friends
            pass
        return recording_hook

    def install(self) -> None:
        """Wrap the model's own hooks and, for backward, install the gradient taps."""
        for module, path in self.names.items():
            for attr, event in USER_HOOK_DICTS.items():
                hooks = getattr(module, attr, None)
                if not hooks:
                    continue
                for key, hook in list(hooks.items()):
                    wrapper = self._wrap(hook, path or ROOT_LABEL, event)
                    hooks[key] = wrapper
                    self._wrapped.append((hooks, key, hook, wrapper))
        if self.backward:
            self._taps = GradientTaps(self.names, self._backward_pre, self._backward_post)
            self._taps.install()
        self.active = True

    def forward_done(self) -> None:
        """The traced forward is over: hook the autograd graph it built (see
        :meth:`GradientTaps.arm`)."""
        if self._taps is not None:
            self._taps.arm()

    def remove(self) -> None:
        """Put every wrapped hook back under its key and remove the gradient taps."""
        self.active = False
        for hooks, key, hook, wrapper in self._wrapped:
            if hooks.get(key) is wrapper:
                hooks[key] = hook
        self._wrapped.clear()
        if self._taps is not None:
            self._taps.remove()
            self._taps = None
