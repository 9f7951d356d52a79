"""``trace()``: run a model once under the recorders and build its :class:`GraphIR`."""

from __future__ import annotations

import contextlib
import enum
import inspect
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch.nn.parameter import is_lazy  # type: ignore[attr-defined]

from .. import provenance
from ..collector import collector_paused
from ..ir import GraphIR, Interceptor, Node, TensorMeta, View
from ..leaves import flatten
from ..names import REF_PREFIX, dtype_name, escape_constant, ref
from ..naming import RANDOM_OPS, TRAINING_RANDOM_OPS, UNINITIALISED_OPS, is_random_call
from .backward import autograd_types, gradients, make_loss
from .hooks import HookRecorder
from .identity import TensorLabels
from .interrupts import deferred_sigint
from .mode import RecordingMode
from .nested import nested_shape, shape_of
from .precision import FULL, effective_mode, float32_math
from .scope import ModuleScope
from .stats import StatsBatch

SAME_ELEMENTS = frozenset(
    {
        "view",
        "reshape",
        "transpose",
        "permute",
        "contiguous",
        "t",
        "flatten",
        "unflatten",
        "unsqueeze",
        "squeeze",
        "movedim",
        "detach",
        "clone",
        "view_as",
        "reshape_as",
        "to",
        "type_as",
        "float",
        "adjoint",
    }
)
"""Ops whose output holds exactly the input's elements (same multiset, same dtype when
numel and dtype match), so the output shares the input's statistics instead of
computing them again."""

_UNSTABLE = UNINITIALISED_OPS | RANDOM_OPS | frozenset(TRAINING_RANDOM_OPS)
"""Ops whose output values are not a function of their inputs (uninitialised memory,
random draws): one set lookup per recorded op decides whether to look closer."""

_SPECIAL = _UNSTABLE | {"setitem"}
"""Ops :meth:`_Trace.record_op` looks at more closely: one set lookup for the rest."""

_DTYPE, _DEVICE = type(torch.float32), type(torch.device("cpu"))

_PLAIN = frozenset({bool, int, float})
"""Argument types written as they are (exactly these types: subclasses, IntEnum
included, go through :meth:`_Trace.render`)."""

_TENSOR_TYPES: set[type] = {torch.Tensor, torch.nn.Parameter}
"""Types known to be ``torch.Tensor`` subclasses: a set lookup, where ``isinstance(2,
torch.Tensor)`` walks the class hierarchy of every non-tensor argument."""


def _is_tensor_type(kind: type) -> bool:
    """Whether ``kind`` is a ``torch.Tensor`` subclass (remembered in :data:`_TENSOR_TYPES`)."""
    if issubclass(kind, torch.Tensor):
        _TENSOR_TYPES.add(kind)
        return True
    return False


MAX_CONST_LIST = 64
"""Constant lists longer than this are written as ``<list len=N>``."""


def _mentions(value: Any, keys: Mapping[str, Any]) -> bool:
    """Whether a rendered value (strings, lists and dicts of them, constants) holds a
    string that is a key of ``keys``."""
    if isinstance(value, str):
        return value in keys
    if isinstance(value, list):
        return any(_mentions(v, keys) for v in value)
    if isinstance(value, dict):
        return any(_mentions(v, keys) for v in value.values())
    return False


class _Trace:
    """State of one trace: labels, node list, per-scope op counters, stats batch."""

    def __init__(self, model: torch.nn.Module, stats: bool, view: View = "ops") -> None:
        self.labels = TensorLabels()
        self.nodes: list[Node] = []
        self.module_nodes: dict[str, Node] = {}
        self.counters: dict[str, int] = {}  # calls so far per op_node_base
        self.stats = StatsBatch() if stats else None
        self.unqueued: set[int] = set()  # ids of parameter/buffer metas without statistics
        self.named: set[str] = set()  # references of inputs, parameters and buffers
        self.relabelled: dict[str, tuple[str, int]] = {}
        """reference -> (the reference the same tensor had before, ``len(nodes)`` when
        it took over): an op that wrote a tensor in place or returned it unchanged
        (:meth:`_took_over`). Read by :meth:`kwargs_at_entry`."""
        names: dict[torch.nn.Module, str] = {}
        # One walk of the module tree (named_parameters and named_buffers would each
        # walk it again); as there, a tensor shared by two modules keeps its first name.
        # Under DisableTorchFunction: nn.Parameter's own __torch_function__ makes each
        # `.shape` a Python round trip (4 us against 0.14 us, measured).
        with torch._C.DisableTorchFunction():
            self._name_tensors(model, names)
        self.scope = ModuleScope(names, self.enter_module, self.exit_module)
        self.backward_entries: dict[str, Any] = {}
        self.view = view

    def close(self) -> None:
        """Drop what ties the state to itself and to the model (the scope's callbacks
        are this state's bound methods; it names every module): the state, its labels
        and any held tensors are then freed by reference counting as soon as the trace
        returns, without waiting for the cyclic garbage collector."""
        self.scope.on_enter = self.scope.on_exit = _ignore
        self.scope.on_event = None
        self.scope.names = {}
        self.labels.entries.clear()
        self.stats = None

    def _name_tensors(self, model: torch.nn.Module, names: dict[torch.nn.Module, str]) -> None:
        """Fill ``names`` (module -> path) and label every parameter and buffer."""
        seen: set[int] = set()
        for path, module in model.named_modules():
            names[module] = path
            for tensors in (module._parameters, module._buffers):
                for tname, t in tensors.items():
                    if t is None or id(t) in seen or is_lazy(t):
                        continue  # lazy: no shape until the forward materialises it
                    seen.add(id(t))
                    qualified = f"{path}.{tname}" if path else tname
                    _check_not_inference(t, "parameter or buffer", qualified)
                    label = ref(qualified)
                    meta = TensorMeta(shape_of(t), dtype_name(t.dtype))
                    self.labels.set(t, label, meta)
                    self.named.add(label)
                    self.unqueued.add(id(meta))

    # -- values ---------------------------------------------------------------------
    def render(self, v: Any) -> Any:
        """Render an argument: tensors become references, other values constants."""
        if isinstance(v, torch.Tensor):
            return self.labels.ref(v)
        kind = type(v)
        if v is None or kind is bool or kind is int or kind is float:
            return v
        if kind is tuple or kind is list:
            return self._render_sequence(v)
        return self._render_other(v)

    def _render_sequence(self, v: Any) -> Any:
        # a long list of constants is shortened; one holding tensors never is: each
        # element is an edge (torch.stack / torch.cat of many tensors)
        if len(v) > MAX_CONST_LIST and not any(isinstance(x, torch.Tensor) for x in v):
            return f"<{type(v).__name__} len={len(v)}>"
        return self._render_args(v)

    def _render_other(self, v: Any) -> Any:
        kind = type(v)  # exact types first: none of these can be subclassed
        if kind is slice:
            return f"slice({self.render(v.start)}, {self.render(v.stop)}, {self.render(v.step)})"
        if kind is _DTYPE:
            return dtype_name(v)
        if kind is _DEVICE:
            return "<device>"  # keep snapshots device-independent
        if v is Ellipsis:
            return "..."
        if isinstance(v, str):
            return escape_constant(v)
        if isinstance(v, bool):
            return bool(v)
        if isinstance(v, int):  # int subclasses, IntEnum: a plain int, as torch sees it
            return int(v)
        if isinstance(v, float):
            return float(v)
        if isinstance(v, enum.Enum):
            return f"{type(v).__name__}.{v.name}"
        if type(v).__module__ == "numpy":
            if getattr(v, "ndim", None) == 0:  # numpy scalars and 0-d arrays
                return self.render(v.item())
            return f"<ndarray {getattr(v, 'dtype', '?')}{list(getattr(v, 'shape', []))}>"
        if isinstance(v, (list, tuple)):
            return self._render_sequence(v)
        if isinstance(v, Mapping):
            return {str(k): self.render(x) for k, x in v.items()}
        if isinstance(v, torch.dtype):
            return dtype_name(v)
        if isinstance(v, torch.device):
            return "<device>"  # keep snapshots device-independent
        if isinstance(v, slice):
            return f"slice({self.render(v.start)}, {self.render(v.stop)}, {self.render(v.step)})"
        if v is Ellipsis:
            return "..."
        if isinstance(v, (torch.memory_format, torch.layout)):
            return str(v).replace("torch.", "")
        return f"<{type(v).__name__}>"

    def known_meta(self, t: torch.Tensor, meta: TensorMeta) -> TensorMeta:
        """Return the meta of a tensor the trace has labelled; a parameter's or buffer's
        statistics are queued the first time an op hands it on (``w.t()``)."""
        if id(meta) in self.unqueued:
            self.unqueued.discard(id(meta))
            if self.stats is not None:
                with torch._C.DisableTorchFunction():  # t is often an nn.Parameter
                    self.stats.add(t, meta)
        return meta

    def new_meta(self, t: torch.Tensor, source: Any = None) -> TensorMeta:
        """Return the TensorMeta of a tensor an op returned, queueing its statistics.

        Args:
            t: the tensor.
            source: for ops in :data:`SAME_ELEMENTS`, the input tensor; when it has
                the same number of elements and dtype, ``t`` shares its statistics.
        """
        entry = self.labels.get(t)
        if entry is not None and entry[2] == t._version:
            return self.known_meta(t, entry[1])  # same tensor, unchanged: same statistics
        if isinstance(source, torch.Tensor):
            src = self.labels.get(source)
            if (
                src is not None
                and src[2] == source._version
                and source.dtype == t.dtype
                and source.numel() == t.numel()
            ):
                shared = self.known_meta(source, src[1])
                return TensorMeta(shape_of(t), shared.dtype, shared.stats)
        return self.stats_meta(t)

    def label(self, t: torch.Tensor, ref: str, meta: TensorMeta) -> None:
        """Make node output ``ref`` the producer of ``t``.

        An op may return a tensor it was given (``w.contiguous()`` on a contiguous
        ``w``, ``x.to(x.dtype)``, dropout in eval mode). A model input, parameter or
        buffer returned unchanged keeps its name (``$w``), since later code may use
        either object; an intermediate is taken over by the newest op, so
        ``self.drop(h)`` stays in the chain. An in-place write bumps ``_version``,
        and then the writing op is the producer in every case.
        """
        entry = self.labels.get(t)
        if entry is None or entry[0] not in self.named or entry[2] != t._version:
            if entry is not None:
                self._took_over(ref, entry[0])
            self.labels.set(t, ref, meta)

    def _took_over(self, new: str, old: str) -> None:
        """Note in :attr:`relabelled` that reference ``new`` took over the tensor that was
        ``old``."""
        self.relabelled[new] = (old, len(self.nodes))

    def tensor_outputs(self, name: str, out: Any, source: Any = None) -> list[Any]:
        """Label the tensor outputs of node ``name`` and return its ``out`` entries."""
        if isinstance(out, torch.Tensor):
            return [self._output_meta(out, ref(name), source)]
        return self._leaf_outputs(name, out, self.new_meta)

    def bare_outputs(self, name: str, out: Any, random: bool) -> list[Any]:
        """Label the tensor outputs of node ``name`` with shape and dtype only (no
        statistics): uninitialised memory, or (``random``) a random draw."""

        def bare(t: torch.Tensor) -> TensorMeta:
            return TensorMeta(shape_of(t), dtype_name(t.dtype), random=random)

        if isinstance(out, torch.Tensor):
            meta = bare(out)
            self.label(out, ref(name), meta)
            return [meta]
        return self._leaf_outputs(name, out, bare)

    def _leaf_outputs(
        self, name: str, out: Any, describe: Callable[[torch.Tensor], Any]
    ) -> list[Any]:
        leaves = flatten(out, "")
        tensors = [leaf for _, leaf in leaves if isinstance(leaf, torch.Tensor)]
        entries: list[Any] = []
        i = 0
        for _, leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                meta = describe(leaf)
                self.label(leaf, ref(name, None if len(tensors) == 1 else i), meta)
                entries.append(meta)
                i += 1
            else:
                entries.append(self.render(leaf))
        return entries

    def stats_meta(self, t: torch.Tensor) -> TensorMeta:
        """A new TensorMeta for ``t``, its statistics queued (op outputs, gradients)."""
        meta = TensorMeta(nested_shape(t) if t.is_nested else list(t.shape), dtype_name(t.dtype))
        if self.stats is not None:
            self.stats.add(t, meta)
        return meta

    def backward_stats(self, label: str, module: Any, grad_input: Any, grad_output: Any) -> None:
        """Full backward hook callback: statistics of one module call's gradients."""

        def metas(grads: Any) -> list[Any]:
            return [
                self.stats_meta(g) if isinstance(g, torch.Tensor) else None
                for g in (grads if isinstance(grads, (tuple, list)) else (grads,))
            ]

        self.backward_entries[label] = {
            "grad_output": metas(grad_output),
            "grad_input": metas(grad_input),
        }

    # -- callbacks --------------------------------------------------------------------
    def record_op(
        self, op: str, raw: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> None:
        """Interceptor callback: append one op node.

        The hot path of a trace (once per recorded op): the common case, a single
        tensor output, takes one label lookup (:meth:`_output_meta`); see
        ``benchmarks/bench_scale.py`` for what it costs per node.
        """
        scope = self.scope
        if scope.blackbox_depth:
            return  # inside a blackbox module
        if isinstance(out, torch.Tensor):
            if op == "view_as" and len(args) == 2 and args[0] is args[1]:
                # x.view_as(x): how a full backward hook wraps a module's inputs and
                # outputs (torch.utils.hooks.BackwardHook). Not a model op: the new
                # object stands for the same tensor.
                entry = self.labels.get(args[0])
                if entry is not None:
                    self.labels.set(out, entry[0], entry[1])
                    return
        elif not _holds_tensor((out, args, kwargs)):
            return  # a state call (torch._C._set_grad_enabled from @torch.no_grad())
        stack = scope.stack
        base = f"{stack[-1]}/{op}" if stack else op  # names.op_node_base
        counters = self.counters
        k = counters.get(base, 0)
        counters[base] = k + 1
        name = f"{base}#{k}"  # names.op_node_name(scope, op, k)
        node = Node(
            name,
            "op",
            op,
            self._render_args(args),
            {kk: self.render(v) for kk, v in kwargs.items()} if kwargs else {},
            raw=raw,
        )
        self.nodes.append(node)
        if op in _SPECIAL:
            if out is None and op == "setitem" and args and isinstance(args[0], torch.Tensor):
                out = args[0]  # in-place write: the target is this node's output from now on
            if op in _UNSTABLE and self._unstable(op, args, kwargs, out, node):
                return
        if isinstance(out, torch.Tensor):
            source = args[0] if op in SAME_ELEMENTS and args else None
            node.outputs = [self._output_meta(out, REF_PREFIX + name, source)]
        else:
            node.outputs = self._leaf_outputs(name, out, self.new_meta)

    def _render_args(self, args: tuple[Any, ...]) -> list[Any]:
        """:meth:`render` of each element of ``args`` (positional arguments, a tuple or
        list argument), tensors and plain scalars inline."""
        entries = self.labels.entries
        rendered: list[Any] = []
        append = rendered.append
        for a in args:
            kind = type(a)
            if kind in _TENSOR_TYPES or (kind not in _PLAIN and _is_tensor_type(kind)):
                entry = entries.get(id(a))
                append(entry[1] if entry is not None and entry[0]() is a else self.labels.ref(a))
            elif a is None or kind in _PLAIN:
                append(a)
            else:
                append(self.render(a))
        return rendered

    def _output_meta(self, t: torch.Tensor, label: str, source: Any) -> TensorMeta:
        """:meth:`new_meta` + :meth:`label` for an op's single tensor output, with one
        lookup of ``t``'s entry (and its weak reference reused when ``t`` is known)."""
        entries = self.labels.entries
        entry = entries.get(id(t))
        live = entry is not None and entry[0]() is t
        version = t._version
        if live and entry[3] == version:  # type: ignore[index]
            # the op returned a tensor it was given, unchanged: same statistics, and
            # an input, parameter or buffer keeps its name (see label())
            meta = self.known_meta(t, entry[2])  # type: ignore[index]
            if entry[1] not in self.named:  # type: ignore[index]
                self._took_over(label, entry[1])  # type: ignore[index]
                entries[id(t)] = (entry[0], label, meta, version)  # type: ignore[index]
            return meta
        meta = self.new_meta(t, source) if source is not None else self.stats_meta(t)
        if live:  # written in place
            self._took_over(label, entry[1])  # type: ignore[index]
        entries[id(t)] = (entry[0] if live else weakref.ref(t), label, meta, version)  # type: ignore[index]
        return meta

    def _unstable(
        self, op: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, node: Node
    ) -> bool:
        """Fill ``node.outputs`` for an op whose output values are not a function of its
        inputs; return False (nothing done) when this call is an ordinary one
        (dropout in eval mode).

        Uninitialised memory (:data:`~.naming.UNINITIALISED_OPS`): no statistics, and
        (when statistics are taken) the fresh memory of ``empty``-like ops is filled
        as ``torch.utils.deterministic.fill_uninitialized_memory`` does under
        ``torch.use_deterministic_algorithms(True)``: NaN for floating and complex
        dtypes, the largest value for integers. A model that reads memory it never
        wrote then shows it as NaN counts, the same in every run, instead of
        statistics of stale bytes. Random draws: no statistics, ``random: true``.
        """
        if op in UNINITIALISED_OPS:
            if self.stats is not None and op not in ("resize_", "resize_as_"):
                _fill_uninitialised(out)
            node.outputs = self.bare_outputs(node.name, out, random=False)
            return True
        if is_random_call(op, args, kwargs):
            node.outputs = self.bare_outputs(node.name, out, random=True)
            return True
        return False

    def enter_module(self, label: str, module: Any, args: tuple[Any, ...]) -> None:
        """Forward pre-hook callback: append a module node (args known, outputs not yet).

        Runs under ``DisableTorchFunction``, as does :meth:`exit_module`: the hooks fire
        while the mode is active, and every tensor property they read (``shape``,
        ``_version``) would otherwise be a ``__torch_function__`` round trip.
        """
        with torch._C.DisableTorchFunction():
            self._enter_module(label, module, args)

    def _enter_module(self, label: str, module: Any, args: tuple[Any, ...]) -> None:
        node = Node(label, "module", type(module).__name__, self._render_args(args))
        if self.view == "modules":
            node.params = sum(p.numel() for p in module.parameters())
        self.module_nodes[label] = node
        self.nodes.append(node)

    def exit_module(self, label: str, module: Any, kwargs: dict[str, Any], output: Any) -> None:
        """Forward hook callback: fill the module node's kwargs and outputs."""
        with torch._C.DisableTorchFunction():
            self._exit_module(label, module, kwargs, output)

    def _exit_module(self, label: str, module: Any, kwargs: dict[str, Any], output: Any) -> None:
        node = self.module_nodes.get(label)
        if node is None:
            return
        if kwargs:  # optional inputs left at None are not part of the call
            node.kwargs = self.kwargs_at_entry(
                node, {k: self.render(v) for k, v in kwargs.items() if v is not None}
            )
        if module in self.scope.blackboxes:
            node.outputs = self.blackbox_outputs(label, output)
        else:
            node.outputs = self.describe_outputs(output, label)

    def kwargs_at_entry(self, node: Node, rendered: dict[str, Any]) -> dict[str, Any]:
        """The module node ``node``'s rendered keyword arguments with the references
        their tensors had when the call began.

        torch's global forward pre-hooks get no keyword arguments
        (``register_module_forward_pre_hook``), so the forward hook renders them after
        the module ran. A tensor the module wrote in place, or passed through an op
        that returned it unchanged (XLNet's ``.type()``), has by then the reference of
        a node inside the call; :attr:`relabelled` leads back to the one it had before.

        Args:
            node: the module node (in :attr:`nodes`).
            rendered: its keyword arguments as :meth:`render` gave them.

        Returns:
            ``rendered`` itself where no reference in it was taken over inside the call
            (nothing is searched unless one was), else a copy with those replaced.
        """
        relabelled = self.relabelled
        if not relabelled or not _mentions(rendered, relabelled):
            return rendered
        nodes = self.nodes
        start = len(nodes) - 1
        while start >= 0 and nodes[start] is not node:
            start -= 1

        def before(value: Any) -> Any:
            if isinstance(value, str):
                while value in relabelled and relabelled[value][1] > start:
                    value = relabelled[value][0]
                return value
            if isinstance(value, list):
                return [before(v) for v in value]
            if isinstance(value, dict):
                return {k: before(v) for k, v in value.items()}
            return value

        return before(rendered)  # type: ignore[no-any-return]

    def blackbox_outputs(self, label: str, value: Any) -> list[Any]:
        """Outputs of a blackbox module: labelled as its own, with statistics, as an
        op's outputs are."""
        return self.tensor_outputs(label, value)

    def describe_outputs(self, value: Any, owner: str) -> list[Any]:
        """Describe a module's output leaves by reference, shape and dtype."""
        entries: list[Any] = []
        leaves = [("", value)] if isinstance(value, torch.Tensor) else flatten(value, "")
        for i, (_, leaf) in enumerate(leaves):
            if isinstance(leaf, torch.Tensor):
                entry = self.labels.get(leaf)
                if entry is None or entry[2] != leaf._version:  # produced by no recorded op
                    label = ref(owner, i)
                    if entry is not None:
                        self._took_over(label, entry[0])
                    self.labels.set(leaf, label, self.new_meta(leaf))
                entries.append(
                    {
                        "ref": self.labels.ref(leaf),
                        "shape": shape_of(leaf),
                        "dtype": dtype_name(leaf.dtype),
                    }
                )
            else:
                entries.append(self.render(leaf))
        return entries


def _ignore(*args: Any) -> None:
    """A callback that does nothing (a closed trace's scope)."""


def _holds_tensor(value: Any) -> bool:
    """True when ``value`` is a tensor or a (nested) tuple, list or dict holding one."""
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(_holds_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    return False


def _fill_uninitialised(out: Any) -> None:
    """Fill fresh ``empty`` memory deterministically (see :meth:`_Trace._unstable`)."""
    if not isinstance(out, torch.Tensor) or out.numel() == 0 or out.device.type == "meta":
        return
    with torch._C.DisableTorchFunction(), torch.no_grad():
        if out.is_floating_point() or out.is_complex():
            out.fill_(float("nan"))
        elif out.dtype != torch.bool:
            out.fill_(torch.iinfo(out.dtype).max)


def _input_names(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[tuple[str, Any]]:
    """Name the call's arguments after ``model.forward``'s parameters where it can."""
    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs)
    except (TypeError, ValueError):
        named = [(f"arg{i}", a) for i, a in enumerate(args)]
        return named + list(kwargs.items())
    named = []
    for pname, value in bound.arguments.items():
        kind = bound.signature.parameters[pname].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            named.extend((f"{pname}.{i}", v) for i, v in enumerate(value))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            named.extend(value.items())
        else:
            named.append((pname, value))
    return named


def _inside(path: str, boxes: set[str]) -> bool:
    """True when module ``path`` lies inside one of the blackbox modules ``boxes``."""
    return any(path.startswith(box + ".") for box in boxes)


class _NoInterceptor(contextlib.nullcontext[None]):
    active = False


def _granularity(
    state: _Trace, root: torch.nn.Module, blackbox: Iterable[str | type], depth: int | None
) -> dict[str, Any]:
    """Mark the blackbox modules in ``state.scope.blackboxes``; return the ``meta`` entries
    that record the granularity (none at the default granularity)."""
    out: dict[str, Any] = {}
    if state.view != "ops":
        out["view"] = state.view
    if depth is not None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"trace(depth={depth!r}): depth must be an int >= 1")
        out["depth"] = depth
    boxes = list(blackbox)
    if boxes:
        out["blackbox"] = sorted(b if isinstance(b, str) else b.__name__ for b in boxes)
    paths = {b for b in boxes if isinstance(b, str)}
    classes = tuple(b for b in boxes if isinstance(b, type))
    found: set[str] = set()
    for module, path in state.scope.names.items():
        if not path:
            continue
        if (
            path in paths
            or (classes and isinstance(module, classes))
            or (depth is not None and path.count(".") + 1 >= depth)
        ):
            state.scope.blackboxes.add(module)
            state.scope.blackbox_paths.add(path)
            found.add(path)
    missing = sorted(paths - found)
    if missing:
        raise ValueError(
            f"trace(blackbox=...): no module {missing[0]!r} in {type(root).__name__}; "
            "give module paths as in model.named_modules() or module classes"
        )
    return out


class UncapturedCallsWarning(UserWarning):
    """``trace(interceptor="patch")`` found import-time aliases it cannot see through
    (``self.act = nn.functional.gelu`` bound before patching): their calls are missing."""


class UnseenWriteWarning(UserWarning):
    """A tensor whose statistics were held back (small tensors on the CPU, and on
    other devices those below ``DIRECT_FROM`` elements; see
    :mod:`pytest_graphir.capture.stats`) was written in place by a call no interceptor
    saw before they were computed (its ``_version`` moved): its statistics show the
    written values."""


def _interceptor(
    name: str,
    record: Any,
    model: torch.nn.Module | None = None,
    before_write: Callable[[], None] | None = None,
) -> Any:
    """Return the op interceptor called ``name``: a context manager with an ``active``
    flag that calls ``record(op, raw, args, kwargs, out)`` for every recorded op and
    ``before_write()`` before every call that may write in place. The patch
    interceptor also scans ``model`` for import-time aliases."""
    if name == "mode":
        return RecordingMode(record, before_write)
    if name == "patch":
        from .patch import PatchInterceptor

        return PatchInterceptor(record, model=model, before_write=before_write)
    if name == "none":  # the module-level view records no ops
        return _NoInterceptor()
    raise ValueError(
        f"trace(interceptor={name!r}): use 'mode' (TorchFunctionMode, the "
        "default) or 'patch' (symbol patches)"
    )


TRACE_OPTIONS = (
    "stats",
    "hooks",
    "backward",
    "blackbox",
    "depth",
    "view",
    "interceptor",
    "model_kwargs",
)
"""``trace()``'s own keyword options; any other keyword goes to the model."""


def _check_option_typos(model: Any, kwargs: dict[str, Any]) -> None:
    """Reject a model keyword that looks like a misspelt ``trace()`` option.

    ``trace(model, ids, backwards=True)`` would otherwise pass ``backwards`` into a
    ``**kwargs`` forward and silently record no backward pass. A name is rejected when
    :func:`difflib.get_close_matches` finds an option for it and ``model.forward``
    does not declare a parameter of that name (then it is the model's own).

    Raises:
        TypeError: naming the argument, the option it resembles and ``model_kwargs``.
    """
    if not kwargs:
        return
    import difflib

    declared: set[str] | None = None
    for key in kwargs:
        close = difflib.get_close_matches(key, TRACE_OPTIONS, n=1, cutoff=0.8)
        if not close:
            continue
        if declared is None:
            try:
                params = inspect.signature(model.forward).parameters.values()
                declared = {
                    p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                }
            except (AttributeError, TypeError, ValueError):
                declared = set()
        if key not in declared:
            raise TypeError(
                f"trace() got {key}=, close to its option {close[0]}=; if you meant the "
                f"option, write {close[0]}=...; if {type(model).__name__}.forward takes "
                f"{key!r} through **kwargs, pass it as model_kwargs={{'{key}': ...}}"
            )


def trace(
    model: torch.nn.Module,
    *args: Any,
    stats: bool = True,
    hooks: bool = False,
    backward: bool | Callable[[Any], Any] = False,
    blackbox: Iterable[str | type] = (),
    depth: int | None = None,
    view: View = "ops",
    interceptor: Interceptor = "mode",
    float32_precision: str = FULL,
    model_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> GraphIR:
    """Run ``model(*args, **kwargs)`` once and return its graph IR.

    Module scope comes from PyTorch's global forward pre-hook and forward hook
    (``torch.nn.modules.module.register_module_forward_pre_hook`` /
    ``register_module_forward_hook``); ops from a ``torch.overrides.TorchFunctionMode``;
    tensor identity from ``id()`` checked by a weak reference
    (:class:`~pytest_graphir.capture.identity.TensorLabels`).

    Args:
        model: the ``nn.Module`` to run. For a ``torch.compile``'d model
            (``OptimizedModule``) its original module (``_orig_mod``) is called,
            eagerly: the trace is the eager one, and Dynamo compiles nothing.
        *args: positional arguments of the model call; named after
            ``model.forward``'s parameters in the IR (``input_ids``).
        stats: take per-tensor statistics (mean, std, min, max, NaN/Inf counts).
            ``False`` gives a structure-only trace (shapes and dtypes), cheaper.
        hooks: record the hook events of the run, forward and (with ``backward``)
            backward, the model's own hooks by name, in firing order: the ``hooks``
            section (see :mod:`pytest_graphir.capture.hooks`).
        backward: also run a backward pass, from the sum of the first floating output
            (``True``) or from ``backward(output)``, a callable returning a scalar
            tensor. Adds the ``backward`` (per-module ``grad_input``/``grad_output``
            statistics), ``grads`` (per-parameter gradient statistics, or
            ``frozen`` / ``no gradient``) and ``autograd`` (``grad_fn`` types) sections.
            Uses ``torch.autograd.grad``: no ``.grad`` is changed. The forward section
            is the same as without ``backward``.
        blackbox: module classes (``nn.MultiheadAttention``) or module paths
            (``"encoder.layer.0.attention"``) recorded as one node each, with their
            inputs and outputs (and output statistics) and nothing inside.
        depth: collapse the module tree below ``depth`` levels (torchinfo's
            ``depth``): a module at that depth or deeper (``transformer.h.0`` is depth
            3) is a blackbox, the outermost one called hiding the rest; this also
            covers children of containers that are never called themselves
            (``ModuleList``). At least 1.
        view: ``"ops"`` (default: module and op nodes) or ``"modules"``: module
            nodes only, each with its input/output shapes and parameter count, for
            teams that gate only on architecture; no statistics, no op interception.
            ``blackbox``, ``depth`` and ``view`` are written into ``meta``, and a
            snapshot taken at another granularity fails with a message that says so.
        interceptor: how functional ops are intercepted: ``"mode"`` (a
            ``TorchFunctionMode``, the default) or ``"patch"`` (symbol patches of
            ``torch``, ``torch.nn.functional`` and ``torch.Tensor``, see
            :mod:`pytest_graphir.capture.patch`). Both give the same IR.
        float32_precision: ``"highest"`` (default): run forward and backward with
            IEEE float32 math, TF32 off for matmul, cuDNN and oneDNN
            (:mod:`pytest_graphir.capture.precision`), so a snapshot written on CPU
            holds on a GPU; the user's settings are restored afterwards, also when
            the model raises. ``"model"``: keep the current settings (to snapshot
            the numerics the model really runs with); written into ``meta`` as
            ``float32_precision: model``.
        model_kwargs: keyword arguments for the model whose names clash with this
            function's own (``stats``, ``hooks``, ``backward``, ``interceptor``,
            ``model_kwargs``).
        **kwargs: keyword arguments of the model call.

    Returns:
        The :class:`GraphIR`: meta (model class, argument names, ``training``,
        ``grad_enabled``), inputs, module and op nodes in firing order, outputs.
        Tensors are not kept: only their shapes, dtypes and statistics.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
        ValueError: ``interceptor`` is not ``"mode"`` or ``"patch"``;
            ``float32_precision`` is not ``"highest"`` or ``"model"``; ``view`` is not
            ``"ops"`` or ``"modules"``; ``depth`` is below 1; a ``blackbox`` path names
            no module of the model; or, with
            ``backward``, no loss can be made (see :func:`.backward.make_loss`).
        RuntimeError: ``backward`` under ``torch.no_grad()``; a trace under
            ``torch.inference_mode()``, or of a model or input made under it (inference
            tensors have no version counter: use ``torch.no_grad()``).
        TypeError: a keyword argument is a near-miss of one of this function's
            options (``backwards=``, ``hook=``) and ``model.forward`` does not declare
            it; pass it in ``model_kwargs`` if the model really takes it.
        Exception: whatever the model's forward or backward raises, unchanged; the
            hooks, the mode and the model's own hooks are restored first, so torch
            and the model are left as they were. ``trace()``'s own frames carry
            ``__tracebackhide__``, so pytest's traceback ends in the model's code.
    """
    __tracebackhide__ = True
    with collector_paused():
        return _trace(
            model,
            args,
            kwargs,
            stats=stats,
            hooks=hooks,
            backward=backward,
            blackbox=blackbox,
            depth=depth,
            view=view,
            interceptor=interceptor,
            float32_precision=float32_precision,
            model_kwargs=model_kwargs,
        )


def _trace(
    model: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    stats: bool,
    hooks: bool,
    backward: bool | Callable[[Any], Any],
    blackbox: Iterable[str | type],
    depth: int | None,
    view: View,
    interceptor: Interceptor,
    float32_precision: str,
    model_kwargs: dict[str, Any] | None,
) -> GraphIR:
    """:func:`trace`'s body, run with the garbage collector paused: one named step each."""
    __tracebackhide__ = True
    root, kwargs = _checked_call(model, kwargs, model_kwargs, view)
    state = _Trace(root, stats and view == "ops", view)  # modules view: no statistics
    with contextlib.closing(state):  # no reference cycle outlives the trace
        call_meta = _call_meta(state, root, args, kwargs, blackbox, depth)
        inputs = _record_inputs(state, root, args, kwargs)
        precision = float32_math(float32_precision)  # checks the value before anything runs
        if float32_precision != FULL:
            call_meta["float32_precision"] = float32_precision
        written = provenance.collect(
            root,
            _device_type(root, inputs_of(args, kwargs)),
            FULL if float32_precision == FULL else effective_mode(),
            state.scope.names,  # every module of root, walked once by _Trace
        )
        recorder = _hook_recorder(state, hooks, backward)
        mode = _interceptor(
            interceptor if view == "ops" else "none",
            state.record_op,
            root,
            state.stats.flush if state.stats is not None else None,
        )
        out, sections = _run_model(state, root, args, kwargs, precision, mode, recorder, backward)
        if backward:
            call_meta["backward"] = sections.pop("loss")
        outputs = _record_outputs(state, out)
        _warn_uncaptured(mode, root)
        if recorder is not None and hooks:
            sections = {"hooks": recorder.events, **sections}
        if state.stats is not None:
            with deferred_sigint():  # no_grad blocks inside: a Ctrl-C would leave grad off
                state.stats.finish()
            _warn_stale(state.stats.stale, root)
        return GraphIR(
            meta=call_meta,
            inputs=inputs,
            nodes=state.nodes,
            outputs=outputs,
            sections=sections,
            provenance=written,
        )


def _checked_call(
    model: Any, kwargs: dict[str, Any], model_kwargs: dict[str, Any] | None, view: str
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Check the call (see :func:`trace`'s Raises); return the module to run (the
    original module of a ``torch.compile``'d one) and the model's keyword arguments."""
    __tracebackhide__ = True
    _check_option_typos(model, kwargs)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"trace() needs an nn.Module as its first argument, got {type(model).__name__}; "
            "call trace(model, *inputs)"
        )
    if model_kwargs:
        kwargs = {**kwargs, **model_kwargs}
    if view not in ("ops", "modules"):
        raise ValueError(f"trace(view={view!r}): use 'ops' (the default) or 'modules'")
    root = model
    if type(model).__name__ == "OptimizedModule" and hasattr(model, "_orig_mod"):
        root = model._orig_mod  # type: ignore[assignment]  # eager: nothing compiles
    if torch.is_inference_mode_enabled():
        raise RuntimeError(
            "trace() under torch.inference_mode(): inference tensors have no version "
            "counter, which the tracer reads to see in-place writes; trace under "
            "torch.no_grad() instead"
        )
    return root, kwargs


def _check_not_inference(t: torch.Tensor, what: str, name: str) -> None:
    """Raise a clear error for a tensor made under ``torch.inference_mode()`` (reading
    its ``_version`` would raise a bare RuntimeError deep inside the tracer); ``what``
    and ``name`` (``"input"``, ``"x"``) make its message, built only when it fails."""
    if t.is_inference():
        raise RuntimeError(
            f"trace(): {what} {name!r} was created under torch.inference_mode(), and inference "
            "tensors have no version counter, which the tracer reads to see in-place "
            "writes; create the model and its inputs outside inference_mode (under "
            "torch.no_grad() if you want no autograd graph)"
        )


def _call_meta(
    state: _Trace,
    root: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    blackbox: Iterable[str | type],
    depth: int | None,
) -> dict[str, Any]:
    """The ``meta`` section: model class, argument names, modes, granularity (marking
    the blackbox modules in ``state`` on the way, see :func:`_granularity`)."""
    granularity = _granularity(state, root, blackbox, depth)
    return {
        "model": type(root).__name__,
        "args": [n for n, _ in _input_names(root, args, {})],
        "kwargs": sorted(kwargs),
        "training": root.training,
        "grad_enabled": torch.is_grad_enabled(),
        "stats": state.stats is not None,
        **granularity,
    }


def _record_inputs(
    state: _Trace, root: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """Label the model's input tensors (``$input_ids``) and return the ``inputs`` section."""
    inputs: dict[str, Any] = {}
    with deferred_sigint():  # statistics run in no_grad blocks: a Ctrl-C would leave grad off
        for pname, value in _input_names(root, args, kwargs):
            for path, leaf in flatten(value, pname):
                if isinstance(leaf, torch.Tensor):
                    _check_not_inference(leaf, "input", path)
                    meta = state.new_meta(leaf)
                    state.labels.set(leaf, ref(path), meta)
                    state.named.add(ref(path))
                    inputs[path] = meta
                else:
                    inputs[path] = state.render(leaf)
    return inputs


def _hook_recorder(
    state: _Trace, hooks: bool, backward: bool | Callable[[Any], Any]
) -> HookRecorder | None:
    """The hook-event recorder for ``hooks`` / ``backward`` (None when neither), seeing
    every module outside the blackboxes."""
    if not (hooks or backward):
        return None
    visible = {
        m: p for m, p in state.scope.names.items() if not _inside(p, state.scope.blackbox_paths)
    }
    recorder = HookRecorder(
        visible, backward=bool(backward), on_backward=state.backward_stats if backward else None
    )
    state.scope.on_event = recorder.forward_event
    return recorder


def _run_model(
    state: _Trace,
    root: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    precision: Any,
    mode: Any,
    recorder: HookRecorder | None,
    backward: bool | Callable[[Any], Any],
) -> tuple[Any, dict[str, Any]]:
    """Run the forward (and backward) with every recorder installed; remove them all
    again, also when the model raises. Returns the model's output and the backward
    sections (with the ``loss`` description), ``{}`` without ``backward``."""
    __tracebackhide__ = True
    sections: dict[str, Any] = {}
    try:
        precision.__enter__()
        state.scope.install()
        if recorder is not None:
            recorder.install()
        with mode, warnings.catch_warnings():
            if backward:
                # with global backward hooks PyTorch warns for every module whose
                # output is not a tensor or tuple (HF ModelOutput): expected here
                warnings.filterwarnings("ignore", message="For backward hooks to be called")
            out = root(*args, **kwargs)
        mode.active = False
        # the forward is over: modules run again by the backward (activation
        # checkpointing) or by a loss callable are not part of the forward graph
        state.scope.active = False
        if state.stats is not None:
            # nothing intercepts writes from here on: hold no tensor back any more
            with deferred_sigint():
                state.stats.flush()
            state.stats.defer = False
        if recorder is not None:
            recorder.forward_done()
        if backward:
            sections = _run_backward(state, root, out, backward, inputs_of(args, kwargs))
    finally:
        mode.active = False
        state.scope.remove()
        if recorder is not None:
            recorder.remove()
        precision.__exit__(None, None, None)
    return out, sections


def _record_outputs(state: _Trace, out: Any) -> dict[str, Any]:
    """The ``outputs`` section: each output leaf by path, pointing at its producer."""
    outputs: dict[str, Any] = {}
    with deferred_sigint():  # as for the inputs: statistics in no_grad blocks
        for path, leaf in flatten(out, ""):
            key = path or "output"
            if isinstance(leaf, torch.Tensor):
                entry = state.labels.get(leaf)
                if entry is None:
                    state.labels.set(leaf, ref(key), state.new_meta(leaf))
                outputs[key] = {
                    "ref": state.labels.ref(leaf),
                    "shape": shape_of(leaf),
                    "dtype": dtype_name(leaf.dtype),
                }
            else:
                outputs[key] = state.render(leaf)
    return outputs


def _warn_uncaptured(mode: Any, root: torch.nn.Module) -> None:
    """Warn (:class:`UncapturedCallsWarning`) when the patch interceptor found aliases of
    torch functions taken before patching, whose calls are missing."""
    uncaptured = getattr(mode, "uncaptured", None)
    if uncaptured:
        warnings.warn(
            UncapturedCallsWarning(
                f"trace(interceptor='patch'): {len(uncaptured)} reference(s) in "
                f"{type(root).__name__} hold an original torch function taken before patching, "
                f"so their calls are missing from the graph: {'; '.join(uncaptured[:5])}"
                + (" ..." if len(uncaptured) > 5 else "")
                + ". Use the default interceptor='mode', which sees them."
            ),
            stacklevel=4,
        )


def _warn_stale(stale: int, root: torch.nn.Module) -> None:
    """Warn (:class:`UnseenWriteWarning`) when held tensors were written in place by
    something no interceptor saw before their statistics were computed."""
    if stale:
        warnings.warn(
            UnseenWriteWarning(
                f"trace(): {stale} tensor(s) of {type(root).__name__} changed version "
                "after they were recorded, through a call the interceptor did not see (a "
                "C++ extension writing in place, a function interceptor='patch' skips, or "
                "ctx.mark_dirty in a custom autograd Function), so their statistics may "
                "show values written later. Writes through torch calls (x.add_(), "
                "x[i] = v, out=, inplace=True) are seen: use interceptor='mode' (the "
                "default), or stats=False for this model."
            ),
            stacklevel=4,
        )


def _device_type(model: torch.nn.Module, inputs: list[torch.Tensor]) -> str:
    """The device type the model runs on: its first input tensor's, else its first
    parameter's or buffer's, else ``"cpu"``."""
    for t in inputs:
        return t.device.type
    for t in model.parameters():
        return t.device.type
    for t in model.buffers():
        return t.device.type
    return "cpu"


def inputs_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors among the call's arguments (nested ones included)."""
    return [leaf for _, leaf in flatten([list(args), kwargs], "") if isinstance(leaf, torch.Tensor)]


def _run_backward(
    state: _Trace,
    root: torch.nn.Module,
    out: Any,
    backward: bool | Callable[[Any], Any],
    inputs: list[torch.Tensor],
) -> dict[str, Any]:
    """Run the traced backward pass; return the ``loss`` description and the
    ``backward``, ``grads`` and ``autograd`` sections."""
    __tracebackhide__ = True
    loss, description = make_loss(out, backward)
    types = autograd_types(loss)
    named, grads = gradients(loss, root, inputs)
    grad_section: dict[str, Any] = {}
    for (name, _), g in zip(named, grads, strict=True):
        if isinstance(g, torch.Tensor):
            grad_section[name] = state.stats_meta(g)
        else:
            grad_section[name] = g
    return {
        "loss": description,
        "backward": state.backward_entries,
        "grads": grad_section,
        "autograd": types,
    }
