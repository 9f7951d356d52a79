"""The traced backward pass: loss, per-module and per-parameter gradients, autograd graph.

Gradients come from ``torch.autograd.grad`` rather than ``Tensor.backward``, so no
``.grad`` of the user's parameters or inputs is touched; a model whose gradients a
wrapper reduces as they accumulate (FSDP2, ``DistributedDataParallel``) runs
``Tensor.backward``'s engine call instead, and each ``.grad`` is put back afterwards.
Per-module gradients come from :class:`GradientTaps`: hooks on the autograd graph's
nodes that report each module call's ``grad_output`` and ``grad_input`` as a full
backward hook would, without wrapping the module's inputs and outputs (so in-place
use of them stays legal, as in plain autograd).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.autograd.graph import get_gradient_edge

from ..leaves import flatten
from ..names import canonical_module_path
from .state import ddp_wrapped

FROZEN = "frozen"
"""``grads`` entry of a parameter with ``requires_grad=False``."""
UNUSED = "no gradient"
"""``grads`` entry of a trainable parameter the loss does not depend on."""

_HOOK_ARTIFACTS = frozenset({"BackwardHookFunctionBackward"})
"""grad_fn types added by PyTorch's full backward hook machinery, not by the model."""


def make_loss(output: Any, backward: bool | Callable[[Any], Any]) -> tuple[torch.Tensor, str]:
    """Return the scalar to differentiate and how it is described in ``meta.backward``:
    ``backward(output)``, or (``backward=True``) the sum of the first floating output
    that requires grad, described as ``sum(<its path>)``.

    Raises:
        RuntimeError: grad mode is off (the forward ran under ``torch.no_grad()``).
        ValueError: no floating output tensor requires grad, or the callable did not
            return a scalar tensor that requires grad.
    """
    if not torch.is_grad_enabled():
        raise RuntimeError(
            "trace(backward=True) needs grad mode, but it is off: call trace outside "
            "torch.no_grad() / torch.inference_mode()"
        )
    with torch._C.DisableTorchFunction():
        if not callable(backward):
            for path, t in flatten(output, ""):
                if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad:
                    return t.sum(), f"sum({path or 'output'})"
            raise ValueError(
                "trace(backward=True) found no floating-point output that requires grad; pass "
                "backward=<callable(output) -> scalar tensor> to choose the loss"
            )
        loss = backward(output)
        name = getattr(backward, "__qualname__", type(backward).__qualname__)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.requires_grad:
        got = type(loss).__name__
        if isinstance(loss, torch.Tensor):
            got += f" of shape {list(loss.shape)}, requires_grad={loss.requires_grad}"
        raise ValueError(
            f"trace(backward={name}) must return a one-element tensor that requires grad, got {got}"
        )
    return loss, name


def autograd_types(loss: torch.Tensor) -> list[str]:
    """Return the ``grad_fn`` type names reachable from ``loss``, depth-first preorder.

    Follows ``next_functions`` in order, each node once, so the list is
    deterministic. The full backward hook's own ``BackwardHookFunctionBackward``
    nodes are left out: they come from the recorder, not the model.

    The visited nodes are held until the walk ends: some torch releases hand out a
    fresh Python wrapper of an autograd node on each ``next_functions`` read and free
    it with its last reference, so an ``id()`` of a dropped wrapper can come back for
    another node (docs/torch-notes.md, "Autograd node wrappers").
    """
    seen: dict[int, Any] = {}  # id -> node, in visiting order: holding it keeps its id unique
    stack: list[Any] = [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen[id(fn)] = fn
        stack.extend(reversed([nxt for nxt, _ in fn.next_functions]))
    return [type(fn).__name__ for fn in seen.values() if type(fn).__name__ not in _HOOK_ARTIFACTS]


def gradients(
    loss: torch.Tensor,
    model: torch.nn.Module,
    inputs: list[torch.Tensor],
    describe: Callable[[torch.Tensor], Any],
    sharded: list[tuple[str, torch.nn.Parameter]] | None = None,
) -> dict[str, Any]:
    """Differentiate ``loss`` w.r.t. the trainable parameters (and inputs that require
    grad, which keep module backward hooks firing when every parameter is frozen).

    A model that is or holds a ``DistributedDataParallel`` runs ``loss.backward()``
    instead (:func:`_accumulated`): DDP's reducer averages the gradients over the
    ranks only as the engine accumulates them into ``.grad`` (its bucketed
    all-reduces are the backward's collectives), so the gradients read are the
    synchronised ones a training step uses; each ``.grad`` is then put back as it was.
    A DDP model's parameters are named as its held module's (:func:`.state.ddp_wrapped`).

    Args:
        describe: what a gradient tensor becomes in the ``grads`` section (its
            statistics), called in the order of the named parameters.
        sharded: for a model with FSDP2 units, its named parameters as the trace
            found them, sharded (:func:`.dtensor.reshard`). The forward never used
            them (it used the unsharded ones), so ``torch.autograd.grad`` cannot
            reach them: ``loss.backward()`` runs, FSDP2's post-backward hooks
            reduce-scatter the gradients into their ``.grad``, which are read and
            then put back as they were.

    Returns:
        Every named parameter -> its gradient described, :data:`FROZEN` or :data:`UNUSED`.
    """
    named = sharded or list((ddp_wrapped(model) or model).named_parameters())
    trainable = [p for _, p in named if p.requires_grad]
    targets = trainable + [t for t in inputs if t.requires_grad]
    grads: tuple[Any, ...] = ()
    with warnings.catch_warnings():
        # PyTorch warns when a full backward hook fires on a module none of whose
        # inputs require grad (the embedding of integer ids): expected here.
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        ddp = torch.nn.parallel.DistributedDataParallel
        if sharded or any(isinstance(m, ddp) for m in model.modules()):  # is or holds one
            grads = _accumulated(loss, trainable)
        elif targets:
            grads = torch.autograd.grad(loss, targets, allow_unused=True)
    by_param = {
        id(p): UNUSED if g is None else describe(g)
        for p, g in zip(trainable, grads[: len(trainable)], strict=True)
    }
    return {
        canonical_module_path(name): by_param[id(p)] if p.requires_grad else FROZEN
        for name, p in named
    }


def _accumulated(loss: torch.Tensor, params: list[torch.nn.Parameter]) -> tuple[Any, ...]:
    """``loss.backward()``, then each parameter's ``.grad`` (None where none came);
    the ``.grad`` each had before is restored.

    Runs the autograd engine directly (``Variable._execution_engine.run_backward``,
    what ``torch.autograd.backward`` ends in): ``torch.autograd.backward`` is itself
    a torch function, and a ``TorchFunctionMode`` is popped while it handles one, so
    the collective recorder's mode would miss the ``torch.distributed`` calls of
    FSDP2's post-backward hooks. DDP's reducer, whose hooks fire as ``.grad`` is
    accumulated, all-reduces its buckets on the way and copies the averaged
    gradients into ``.grad`` in a callback at the end of this backward."""
    saved = [p.grad for p in params]
    try:
        for p in params:
            p.grad = None
        engine = torch.autograd.Variable._execution_engine  # type: ignore[attr-defined]
        engine.run_backward((loss,), (torch.ones_like(loss),), False, False, (), True, True)
        return tuple(p.grad for p in params)
    finally:
        for p, g in zip(params, saved, strict=True):
            p.grad = g


@dataclass(slots=True)
class _Call:
    """One module call whose gradients are tapped (see :class:`GradientTaps`)."""

    module: Any
    n_inputs: int
    in_edges: dict[int, Any]  # input position -> GradientEdge at module entry
    in_specs: dict[int, Any]  # tensor input position -> (shape, dtype, device)
    start: int  # autograd sequence number at module entry
    out_edges: list[tuple[int, Any]] = field(default_factory=list)  # (output position, edge)
    taps: list[tuple[Any, int, int]] = field(default_factory=list)  # (node, edge index, input)
    expected: bool = False
    grad_out: list[Any] = field(default_factory=list)
    outs_left: int = 0
    taps_left: int = 0
    acc: dict[int, Any] = field(default_factory=dict)
    pre_done: bool = False


@dataclass(eq=False)
class GradientTaps:
    """Per-module ``grad_output`` / ``grad_input`` without wrapping any tensor.

    PyTorch's full backward hooks (``register_module_full_backward_hook``) pass a
    module's inputs and outputs through ``BackwardHookFunction``, whose outputs are
    views that may not be modified in place: ``hidden_state += residual`` on a
    module's output then fails (transformers' ResNet, RegNet, wav2vec2, HuBERT), where
    plain autograd works. Here nothing the model sees is replaced; the same two
    events are read from the autograd graph instead:

    * at module entry (:meth:`enter`, called from the module scope's global forward
      pre-hook through :class:`~.hooks.HookRecorder`), the ``GradientEdge`` of each
      positional tensor input that requires grad
      (``torch.autograd.graph.get_gradient_edge``) and the autograd sequence number;
    * at module exit (:meth:`exit`, from the scope's global forward hook), the
      gradient edges of the output
      tensors (a tensor or a tuple, as for full backward hooks), and the edges from
      the autograd nodes created inside the call to the inputs' edges: found by
      walking ``next_functions`` from the outputs through nodes whose
      ``_sequence_nr()`` is newer than the entry's;
    * after the forward (:meth:`arm`): a pre-hook on each output's autograd node
      (``Node.register_prehook``, in reverse call-exit order, so an outer module
      sharing an output with an inner one fires first, as nested full backward hooks
      do) gives ``grad_output``; a hook on each inside node with an edge to an input
      (``Node.register_hook``) gives that edge's gradient, and their sum per input is
      ``grad_input``: the gradient that flowed through the module, as the full
      backward hook reports it (a residual connection around the module is not in it).

    Hooks are bound to autograd nodes taken before any later in-place write, so a
    tensor modified in place after the module returned still reports the gradient
    of the value the module produced. Modules that have backward hooks of their own
    are wrapped by PyTorch anyway; for them ``on_pre``/``on_post`` are registered as
    the module's first full backward (pre-)hooks (``prepend=True``), which keeps
    their firing order against the model's hooks exactly as before.

    Args:
        names: traced module object -> module path.
        on_pre: ``on_pre(module, grad_output)``, when a module call's output
            gradients are all known (``backward_pre``).
        on_post: ``on_post(module, grad_input, grad_output)``, when its input
            gradients are (``backward``); ``grad_input`` has one entry per
            positional argument, None where no gradient flows.
    """

    names: dict[Any, str]
    on_pre: Callable[[Any, Any], None]
    on_post: Callable[[Any, Any, Any], None]
    _open: dict[Any, list[_Call]] = field(default_factory=dict)
    _closed: list[_Call] = field(default_factory=list)
    _handles: list[Any] = field(default_factory=list)  # module, then graph hooks
    _saved_flags: list[tuple[Any, Any]] = field(default_factory=list)
    _probe: torch.Tensor = field(default_factory=lambda: torch.zeros((), requires_grad=True))

    # -- forward ----------------------------------------------------------------------
    def enter(self, module: Any, args: tuple[Any, ...]) -> None:
        """A traced module call starts, with positional arguments ``args``."""
        if module not in self.names or not torch.is_grad_enabled():
            return
        with torch._C.DisableTorchFunction():  # tensor reads here are not model ops
            tensors = {i: a for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
            edges = {i: get_gradient_edge(a) for i, a in tensors.items() if a.requires_grad}
            specs = {i: (a.shape, a.dtype, a.device) for i, a in tensors.items()} if edges else {}
            # the autograd sequence number now: that of a new node (a view of a probe)
            start = int(self._probe.view(()).grad_fn._sequence_nr())  # type: ignore[union-attr]
            self._open.setdefault(module, []).append(_Call(module, len(args), edges, specs, start))

    def exit(self, module: Any, output: Any) -> None:
        """A traced module call ends, with ``output`` (None where its forward raised)."""
        stack = self._open.get(module)
        if not stack:
            return
        call = stack.pop()
        outs = (output,) if isinstance(output, torch.Tensor) else output
        if not isinstance(outs, tuple):
            return  # full backward hooks do not fire either (HF ModelOutput, dicts)

        with torch._C.DisableTorchFunction():
            call.out_edges = [
                (j, get_gradient_edge(t))
                for j, t in enumerate(outs)
                if isinstance(t, torch.Tensor) and t.requires_grad
            ]
            if not call.out_edges:
                return
            call.grad_out = [None] * len(outs)  # filled as the backward reaches them
            if call.in_edges:
                self._find_taps(call)
            self._closed.append(call)

    def _find_taps(self, call: _Call) -> None:
        """Collect the edges from nodes made inside ``call`` to its inputs' nodes."""
        inputs: dict[tuple[int, int], list[int]] = {}
        for i, edge in call.in_edges.items():
            inputs.setdefault((id(edge.node), edge.output_nr), []).append(i)
        seen: dict[int, Any] = {}  # id -> node, held so ids stay unique (autograd_types)
        stack: list[Any] = []
        for j, edge in call.out_edges:
            # a tap without a node: the module returned its input as is
            call.taps.extend((None, j, i) for i in inputs.get((id(edge.node), edge.output_nr), ()))
            stack.append(edge.node)
        while stack:
            node = stack.pop()
            if (
                node is None
                or id(node) in seen
                or type(node).__name__ == "AccumulateGrad"  # a leaf: not inside the call
                or node._sequence_nr() < call.start
            ):
                continue
            seen[id(node)] = node
            for k, (nxt, nr) in enumerate(node.next_functions):
                hit = inputs.get((id(nxt), nr))  # None for a None edge: skipped when popped
                if hit is not None:
                    call.taps.extend((node, k, i) for i in hit)
                else:
                    stack.append(nxt)

    # -- backward ---------------------------------------------------------------------
    def arm(self) -> None:
        """End of the forward: hook the autograd nodes found for each module call."""
        # an outer module's output hook fires before an inner one's on a shared node
        # (its full backward pre-hook would), an inner module's input tap before an
        # outer one's (the inner call's input gradient is complete first)
        for call in reversed(self._closed):
            for j, edge in call.out_edges:
                hook = functools.partial(self._output_grad, call, j, edge.output_nr)
                self._handles.append(edge.node.register_prehook(hook))
        for call in self._closed:
            for node, k, i in call.taps:
                if node is not None:
                    tap = functools.partial(self._tap_grad, call, k, i)
                    self._handles.append(node.register_hook(tap))
        self._closed.clear()
        self._open.clear()

    def _expect(self, call: _Call) -> None:
        """On a call's first backward activity: which of its hooks will fire."""
        if call.expected:
            return
        call.expected = True
        will = _will_execute
        outs = dict(call.out_edges)  # output position -> its gradient edge
        call.outs_left = sum(will(edge.node) for edge in outs.values())
        # a tap without a node: the module returned its input as is (see _find_taps)
        call.taps_left = sum(will(outs[k].node if n is None else n) for n, k, _ in call.taps)

    def _add(self, call: _Call, i: int, grad: Any) -> None:
        if isinstance(grad, torch.Tensor):
            with torch._C.DisableTorchFunction():
                call.acc[i] = grad if call.acc.get(i) is None else call.acc[i] + grad

    def _output_grad(self, call: _Call, j: int, nr: int, grads: Any) -> None:
        self._expect(call)
        g = grads[nr]
        call.grad_out[j] = g
        for node, k, i in call.taps:
            if node is None and k == j:
                self._add(call, i, g)
                call.taps_left -= 1
        call.outs_left -= 1
        if call.outs_left == 0:
            call.pre_done = True
            self.on_pre(call.module, tuple(call.grad_out))
            self._maybe_post(call)

    def _tap_grad(self, call: _Call, k: int, i: int, grad_inputs: Any, grad_outputs: Any) -> None:
        self._expect(call)
        self._add(call, i, grad_inputs[k])
        call.taps_left -= 1
        self._maybe_post(call)

    def _maybe_post(self, call: _Call) -> None:
        if not call.pre_done or call.taps_left > 0:
            return
        if call.in_edges and not call.taps:
            return  # no gradient reaches the inputs: the full backward hook stays silent
        call.pre_done = False  # fire once
        # each input's gradient through the call; as BackwardHookFunction materialises
        # them, zeros for a tensor input no gradient reached (one that does not require
        # grad, next to one that does)
        grad_input = [call.acc.get(i) for i in range(call.n_inputs)]
        for i, (shape, dtype, device) in call.in_specs.items():
            if grad_input[i] is None:
                with torch._C.DisableTorchFunction():
                    grad_input[i] = torch.zeros(shape, dtype=dtype, device=device)
        self.on_post(call.module, tuple(grad_input), tuple(call.grad_out))

    # -- install / remove -------------------------------------------------------------
    def install(self) -> None:
        """Register module-level full backward hooks (first in line) on modules that
        have backward hooks of their own, and leave the others to :meth:`enter` and
        :meth:`exit`."""
        for module in self.names:
            hooked = module._backward_hooks or module._backward_pre_hooks
            if hooked and module._is_full_backward_hook is not False:
                self._saved_flags.append((module, module._is_full_backward_hook))
                pre = module.register_full_backward_pre_hook(self.on_pre, prepend=True)
                self._handles.append(pre)
                self._handles.append(module.register_full_backward_hook(self.on_post, prepend=True))
        own = {m for m, _ in self._saved_flags}
        self.names = {m: p for m, p in self.names.items() if m not in own}

    def remove(self) -> None:
        """Remove every hook (module-level and on autograd nodes) and put each
        module's ``_is_full_backward_hook`` flag back."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for module, flag in self._saved_flags:
            module._is_full_backward_hook = flag
        self._saved_flags.clear()


def _will_execute(node: Any) -> bool:
    """Whether the running backward will execute autograd node ``node`` (and so fire its
    hooks): ``torch._C._will_engine_execute_node``, which raises ``RuntimeError`` for a
    leaf's ``AccumulateGrad`` under ``torch.autograd.grad``. That call captures a
    leaf's gradient and never runs its node, so False: a module output that is a leaf
    (GPT-NeoX-Japanese's attention returns its ``dense_bias`` parameter) gets no output
    gradient, where torch's own full backward hook would wrap it in a new node."""
    if type(node).__name__ == "AccumulateGrad":  # torch._C._functions.AccumulateGrad
        return False
    return bool(torch._C._will_engine_execute_node(node))
