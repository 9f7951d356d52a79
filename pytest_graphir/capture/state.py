"""The state of one trace and the callbacks that fill it.

:class:`TraceState` holds the node list, the tensor labels, the per-scope op counters
and the statistics batch. The op interceptor calls :meth:`TraceState.record_op` once
per recorded op, the module scope :meth:`TraceState.enter_module` and
:meth:`TraceState.exit_module` around each traced module call, the collective
recorder (:mod:`.collectives`) :meth:`TraceState.record_collective` once per
collective of a distributed forward.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.parameter import is_lazy  # type: ignore[attr-defined]

from ..ir import Node, TensorMeta, View
from ..leaves import flatten
from ..names import (
    ACTIVATION_WRAPPER,
    REF_PREFIX,
    WRAPPER_ATTRIBUTES,
    canonical_module_path,
    check_module_path,
    dtype_name,
    map_plain,
    module_node_name,
    module_path,
    op_node_base,
    op_node_name,
    ref,
)
from ..opnames import RANDOM_OPS, TRAINING_RANDOM_OPS, UNINITIALISED_OPS, is_random_call
from .dtensor import PLAIN_TYPES, Distributed, distributed, inner, module_class
from .identity import TensorLabels
from .nested import nested_shape, shape_of
from .render import ArgRenderer, holds_tensor
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
"""Ops :meth:`TraceState.record_op` looks at more closely: one set lookup for the rest."""


_DTYPE_NAMES: dict[Any, str] = {
    d: dtype_name(d) for d in vars(torch).values() if isinstance(d, torch.dtype)
}
"""``torch.float32 -> "float32"`` for every dtype torch names: one dict lookup per
recorded tensor (:func:`~pytest_graphir.names.dtype_name` for any other)."""

_NO_OUTPUTS: list[Any] = []
"""The outputs an op node holds until :meth:`TraceState.record_op` sets its own
(never mutated)."""

WRAPPING = 2
"""A bit of :attr:`TraceState.hidden`: an activation wrapper runs its own code before
the module it wraps (:meth:`TraceState.watch_wrappers`); the distributed bits are
:data:`~.dtensor.UNSHARDING` and :data:`~.collectives.COLLECTIVE`."""

STEPPING = 8
"""A bit of :attr:`TraceState.hidden`: the code that calls the traced module (a
pipeline schedule's step, :attr:`TraceState.stepped`) runs its own ops between the
module's calls."""


class TraceState(ArgRenderer):
    """State of one trace: labels, node list, per-scope op counters, stats batch; its
    methods are the callbacks of the op interceptor (:meth:`record_op`) and of the
    module scope (:meth:`enter_module`, :meth:`exit_module`).

    Args:
        model: the module traced; its modules are named and its parameters and
            buffers labelled (``$encoder.weight``) here, once.
        batch: the statistics batch the recorded tensors go to; None: a
            structure-only trace.
        view: ``"ops"`` or ``"modules"`` (module nodes carry a parameter count).
        units: the model's FSDP2 units, ``(module path, module)``
            (:func:`~.dtensor.fsdp_modules`).

    Raises:
        RuntimeError: a parameter or buffer was made under ``torch.inference_mode()``.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        batch: StatsBatch | None,
        view: View = "ops",
        units: list[tuple[str, torch.nn.Module]] | None = None,
    ) -> None:
        super().__init__(TensorLabels())
        self.dist = Distributed(model, units or [], self.labels) if distributed() else None
        """What a distributed trace does besides (:class:`~.dtensor.Distributed`);
        None unless a process group is initialised: a serial trace pays one
        ``is not None`` test per recorded op for it (:meth:`stats_meta`)."""
        self.nodes: list[Node] = []
        self.module_nodes: dict[str, tuple[Node, int]] = {}  # label -> (node, its index)
        self.counters: dict[str, int] = {}  # calls so far per op_node_base
        self.batch = batch
        self.unqueued: set[int] = set()  # ids of parameter/buffer metas without statistics
        self.named: set[str] = set()  # references of inputs, parameters and buffers
        self.relabelled: dict[str, tuple[str, int]] = {}
        """reference -> (the reference the same tensor had before, ``len(nodes)`` when
        it took over): an op that wrote a tensor in place or returned it unchanged
        (:meth:`_leaf_outputs`). Read by :meth:`at_entry`."""
        names: dict[torch.nn.Module, str] = {}
        self.wrappers: dict[str, str] = {}
        """module path -> class of the wrapper around it (``CheckpointWrapper``):
        the wrapper's call is the node, written with the wrapped module's class"""
        self.activation_wrappers: list[tuple[torch.nn.Module, torch.nn.Module]] = []
        """``(wrapper, the module it wraps)`` of each activation wrapper
        (:data:`~pytest_graphir.names.ACTIVATION_WRAPPER`), for :meth:`watch_wrappers`"""
        self.planned: list[tuple[str, torch.nn.Module]] = []
        """``(module path as named_modules gives it, module)`` of every module that
        may have a ``plan`` entry (:func:`~.dtensor.plan_section`), in
        ``named_modules`` order: one with forward hooks (a ``ParallelStyle``'s), a
        parameter or buffer of a tensor subclass (a DTensor), an FSDP2 unit, a
        wrapper. Empty for a model with none: the plan then walks nothing."""
        # One walk of the module tree (named_parameters and named_buffers would each
        # walk it again); as there, a tensor shared by two modules keeps its first name.
        # Under DisableTorchFunction: nn.Parameter's own __torch_function__ makes each
        # `.shape` a Python round trip (docs/capture.md, "Cost").
        seen: set[int] = set()
        wrapped: set[torch.nn.Module] = set()
        unit_modules = {m for _, m in units} if units else ()
        held = ddp_wrapped(model)
        self.data_parallel = [] if held is None else [(model, held)]
        """``[(DDP, the module it holds)]`` for a traced DDP, else empty, for
        :meth:`watch_wrappers`"""
        self._held_output: Any = None
        if held is not None:  # a DDP root: paths as its module's, the call the root node
            names[model] = ""
            self.wrappers[""] = module_class(model, unwrap=False)
            self.planned.append(("", model))
            wrapped.add(held)
        with torch._C.DisableTorchFunction():
            for raw, module in (model if held is None else held).named_modules():
                check_module_path(raw)
                path = canonical_module_path(raw)
                hooked = module._forward_pre_hooks or module._forward_hooks
                planned = bool(hooked or module in unit_modules)
                if module not in wrapped:  # else it runs inside its wrapper's call, the node
                    names[module] = path
                    if not module._modules.keys().isdisjoint(WRAPPER_ATTRIBUTES):
                        # a wrapper: the node of the module it wraps, under its path
                        wrapped.update(module._modules.get(a) for a in WRAPPER_ATTRIBUTES)
                        self.wrappers[path] = module_class(module, unwrap=False)
                        planned = True
                        activation = module._modules.get(ACTIVATION_WRAPPER)
                        if activation is not None:
                            self.activation_wrappers.append((module, activation))
                for tname, t in [*module._parameters.items(), *module._buffers.items()]:
                    # a DTensor parameter: its placements
                    planned |= t is not None and type(t) not in PLAIN_TYPES
                    if t is None or id(t) in seen or is_lazy(t):
                        continue  # lazy: no shape until the forward materialises it
                    seen.add(id(t))
                    qualified = f"{path}.{tname}" if path else tname
                    check_not_inference(t, "parameter or buffer", qualified)
                    self.label_named(t, qualified)
                if planned:
                    self.planned.append((raw, module))
        self.scope = ModuleScope(names, self.enter_module, self.exit_module)
        self.hidden = 0
        """Bits (:data:`~.dtensor.UNSHARDING`, :data:`WRAPPING`,
        :data:`~.collectives.COLLECTIVE`) set while code that is not the model's runs,
        the one way ops are hidden besides a blackbox module: :meth:`record_op` records
        no op while any is set, the collective recorder no collective while
        :data:`~.collectives.COLLECTIVE` is."""
        self.backward_entries: dict[str, Any] = {}
        self.view = view
        self.stepped: Run | None = None
        """Set when the traced run calls the root any number of times (a pipeline
        schedule's step): only its counted calls (``stepped.counts()``) are recorded,
        the code around them is hidden (:data:`STEPPING`, :meth:`watch_wrappers`), and
        the tensors among the ``i``-th one's arguments that the trace has not labelled
        (a pipeline schedule's microbatch of the inputs) named
        ``$microbatch<i>.<parameter>`` (:meth:`label_inputs`)."""
        self.inputs: dict[str, Any] = {}
        """The ``inputs`` section (:meth:`label_inputs`)."""
        self.calls: dict[torch.nn.Module, int] = {}
        """The counted calls so far of each module :attr:`stepped` calls."""
        self.unread: list[tuple[str, str, tuple[Any, ...], dict[str, Any], list[Any]]] = []
        """The point-to-point transfers of a :attr:`stepped` run's own code, in
        firing order, that are no node: received tensors no counted call has read
        yet, and what else it sent (:meth:`step_transfer`)."""

    def label_named(self, t: torch.Tensor, qualified: str) -> None:
        """Label a parameter or buffer ``$<qualified name>``; its statistics are
        queued when an op first hands it on (:meth:`known_meta`)."""
        label = ref(qualified)
        meta = TensorMeta(shape_of(t), _DTYPE_NAMES.get(t.dtype) or dtype_name(t.dtype), {}, False)
        self.labels.set(t, label, meta)
        if self.dist is not None:  # a collective DTensor issues reads the shard
            self.dist.describe(t, meta, label)
        self.named.add(label)
        self.unqueued.add(id(meta))

    def label_inputs(
        self, root: torch.nn.Module, prefix: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        """Label the tensors of a call of ``root`` ``$<prefix><parameter>`` (after
        ``root.forward``'s parameters, :func:`input_names`: ``$input_ids``) and enter
        each in :attr:`inputs`, which is returned: with no ``prefix``, the model's
        inputs, its other values rendered (the ``inputs`` section); with one
        (``microbatch<i>.``, a pipeline schedule's microbatch cut by its own code,
        :attr:`stepped`), only the tensors the trace has not labelled."""
        for pname, value in input_names(root, args, kwargs):
            for path, leaf in flatten(value, prefix + pname):
                if not isinstance(leaf, torch.Tensor):
                    if not prefix:
                        self.inputs[path] = self.render(leaf)
                elif not prefix or self.labels.get(leaf) is None:
                    check_not_inference(leaf, "input", path)
                    meta = self.new_meta(leaf)
                    self.labels.set(leaf, ref(path), meta)
                    self.named.add(ref(path))
                    self.inputs[path] = meta
        return self.inputs

    def watch_wrappers(self, root: torch.nn.Module) -> list[Any]:
        """Register a forward pre-hook on each activation wrapper, after its other
        ones, and one on the module it wraps, before its other ones: what the wrapper
        runs in between for itself (``torch.utils.checkpoint``'s placeholder
        tensors) is not recorded, so wrapping a module adds no node; its collectives
        would be (:meth:`record_collective`). What the wrapped module runs, hooks
        included, is recorded as without the wrapper. A traced DDP's own code before
        and after the module it holds is not recorded either (the ``clone`` of its
        ``_DDPSink`` under ``find_unused_parameters``), its collectives are (the
        buffer ``broadcast`` s; the bucket rebuild's are left out by the recorder).
        Also the FSDP2 units' hooks (:meth:`~.dtensor.Distributed.watch`), and
        for a :attr:`stepped` run those on ``root`` that count its calls.

        Returns:
            The hooks' ``RemovableHandle`` s, for the caller to remove.
        """
        handles = self.dist.watch(self) if self.dist is not None else []
        if self.stepped is not None:  # hidden and unscoped up to the first counted call
            # (left so after the last one: nothing reads either once the run is over)
            self.hidden |= STEPPING
            self.scope.active = False
            for called in self.stepped.called or [root]:
                pre = called.register_forward_pre_hook(
                    self._step_call, with_kwargs=True, prepend=True
                )
                handles += [pre, called.register_forward_hook(self._step_return, always_call=True)]
        for wrapper, held in self.activation_wrappers + self.data_parallel:
            handles.append(wrapper.register_forward_pre_hook(self._wrapping))
            handles.append(held.register_forward_pre_hook(self._wrapped, prepend=True))
        for ddp, held in self.data_parallel:
            handles.append(held.register_forward_hook(self._wrapping))
            handles.append(ddp.register_forward_hook(self._wrapped, prepend=True))
        return handles

    def _step_call(self, module: torch.nn.Module, args: Any, kwargs: Any) -> None:
        assert self.stepped is not None  # registered only then
        if not self.stepped.counts():  # the caller's own call (shape inference): unseen
            return
        self.hidden &= ~STEPPING
        read = {id(t) for _, t in flatten([args, kwargs], "") if isinstance(t, torch.Tensor)}
        unread, self.unread = self.unread, []
        for op, raw, ins, attrs, outs in unread:
            if op == "recv" and read.intersection(map(id, outs)):  # what this call reads
                self.record_collective(op, raw, ins, attrs | {"peer": "prev"}, outs)
            else:
                self.unread.append((op, raw, ins, attrs, outs))
        # tensors of a microbatch cut by the caller's code
        k = self.calls.get(module, 0)
        with torch._C.DisableTorchFunction():
            self.label_inputs(ddp_wrapped(module) or module, f"microbatch{k}.", args, kwargs)
        self.calls[module] = k + 1
        self.scope.active = True  # the global pre-hook ran before this one, unscoped
        self.scope.enter(module, args)

    def _step_return(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        self.scope.active = False  # after the global forward hook, which closed the call
        self.hidden |= STEPPING

    def step_transfer(
        self,
        op: str,
        raw: str,
        args: tuple[Any, ...],
        attrs: dict[str, Any],
        outputs: list[torch.Tensor],
    ) -> None:
        """Collective recorder callback for a point-to-point transfer issued between
        the counted calls (:data:`STEPPING`), named for its role in a pipeline: a
        ``send`` of tensors the trace labelled (a counted call's outputs) is an op
        node now, its peer ``next``; a ``recv`` becomes one, its peer ``prev``, when
        a counted call reads what it received, just before that call's node. What is
        left in :attr:`unread` at the end ran against the activations' flow (a
        gradient of the schedule's backward) or is the caller's own handshake."""
        if op == "send" and args and all(self.labels.get(t) is not None for t in args):
            self.record_collective(op, raw, args, attrs | {"peer": "next"}, outputs)
        else:
            self.unread.append((op, raw, args, attrs, outputs))

    def _wrapping(self, module: torch.nn.Module, args: Any, output: Any = None) -> None:
        """The wrapper's own code runs: its forward pre-hook (up to the module it
        wraps), and a DDP's held module's forward hook (back in DDP's code after it,
        ``output`` the held module's, for :meth:`_wrapped`)."""
        self.hidden |= WRAPPING
        self._held_output = output

    def _wrapped(self, module: torch.nn.Module, args: Any, output: Any = None) -> None:
        """The wrapper's own code ends: the wrapped module's forward pre-hook, and a
        DDP's forward hook, when each output tensor DDP made of the held module's
        (its ``_DDPSink`` clones them) stands for that tensor, as ``view_as`` does
        (:meth:`carry_labels`)."""
        self.hidden &= ~WRAPPING
        held, self._held_output = self._held_output, None
        if held is not None:  # nothing to carry at a pre-hook
            self.carry_labels(held, output)

    def carry_labels(self, before: Any, after: Any) -> None:
        """Give each unlabelled tensor of ``after`` the label of the tensor at the same
        place in ``before`` (the values it replaced), when their shapes agree; a
        DTensor's unlabelled local shard likewise: FSDP2's pre-forward hands a unit
        stand-ins of its inputs that require a gradient
        (``RegisterPostBackwardFunction``), which a tensor-parallel style may then
        wrap (``from_local``) (:meth:`~.dtensor.Distributed.watch`); a DDP returns
        its ``_DDPSink``'s clones of the held module's outputs (:meth:`_wrapped`)."""
        old = dict(flatten(before, ""))
        for path, t in flatten(after, ""):
            was: Any = old.get(path)
            entry = self.labels.get(was) if isinstance(was, torch.Tensor) and was is not t else None
            if entry is None or not isinstance(t, torch.Tensor):
                continue
            for new in (t, inner(t) if type(t) not in PLAIN_TYPES else None):
                if new is not None and new.shape == was.shape and self.labels.get(new) is None:
                    self.labels.set(new, entry[0], entry[1])

    def close(self) -> None:
        """Drop what ties the state to itself and to the model (the scope, whose
        callbacks are this state's bound methods and which names every module): the
        state, its labels and any held tensors are then freed by reference counting
        as soon as the trace returns, without waiting for the cyclic garbage
        collector."""
        del self.scope
        self.labels.entries.clear()
        self.batch = None

    # -- values ---------------------------------------------------------------------
    def known_meta(self, t: torch.Tensor, meta: TensorMeta) -> TensorMeta:
        """Return the meta of a tensor the trace has labelled; a parameter's or buffer's
        statistics are queued the first time an op hands it on (``w.t()``)."""
        if id(meta) in self.unqueued:
            self.unqueued.discard(id(meta))
            if self.batch is not None:
                with torch._C.DisableTorchFunction():  # t is often an nn.Parameter
                    self.batch.add(t, meta)
        return meta

    def new_meta(self, t: torch.Tensor) -> TensorMeta:
        """Return the TensorMeta of a tensor an op or module returned, queueing its
        statistics; a labelled tensor returned unchanged keeps its own (an op's single
        tensor output is described by :meth:`_output_meta`)."""
        entry = self.labels.get(t)
        if entry is not None and entry[2] == t._version:
            return self.known_meta(t, entry[1])  # same tensor, unchanged: same statistics
        return self.stats_meta(t)

    def _leaf_outputs(
        self, name: str, out: Any, describe: Callable[[torch.Tensor], Any]
    ) -> list[Any]:
        """The outputs of op (or blackbox module) ``name``: each tensor leaf of ``out``
        described by ``describe`` and labelled as that output (``$name``, or
        ``$name#i`` for the ``i``-th of several), every other leaf rendered.

        An op may return a tensor it was given (``w.contiguous()`` on a contiguous
        ``w``, ``x.to(x.dtype)``, dropout in eval mode). A model input, parameter or
        buffer returned unchanged keeps its name (``$w``), since later code may use
        either object; an intermediate is taken over by the newest op, so
        ``self.drop(h)`` stays in the chain. An in-place write bumps ``_version``,
        and then the writing op is the producer in every case.
        """
        leaves = flatten(out, "")
        tensors = [leaf for _, leaf in leaves if isinstance(leaf, torch.Tensor)]
        entries: list[Any] = []
        i = 0
        for _, leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                meta = describe(leaf)
                label = ref(name, None if len(tensors) == 1 else i)
                entry = self.labels.get(leaf)
                if entry is None or entry[0] not in self.named or entry[2] != leaf._version:
                    if entry is not None:  # taken over: see relabelled
                        self.relabelled[label] = (entry[0], len(self.nodes))
                    self.labels.set(leaf, label, meta)
                    if self.dist is not None and meta.dist is not None:
                        self.dist.label_shard(leaf, label, meta)
                entries.append(meta)
                i += 1
            else:
                entries.append(self.render(leaf))
        return entries

    def stats_meta(self, t: torch.Tensor, label: str | None = None) -> TensorMeta:
        """A new TensorMeta for ``t``, its statistics queued (op outputs, gradients);
        ``label``: the reference ``t`` gets, which a DTensor's shard gets too
        (:meth:`~.dtensor.Distributed.describe`)."""
        shape: list[int | str] = nested_shape(t) if t.is_nested else list(t.shape)
        dtype = _DTYPE_NAMES.get(t.dtype) or dtype_name(t.dtype)
        # stats {} given, not the field's default factory: one call less per tensor
        meta = TensorMeta(shape, dtype, {}, False)
        if self.dist is not None:
            self.dist.describe(t, meta, label)
        if self.batch is not None:
            self.batch.add(t, meta)
        return meta

    def backward_stats(self, label: str, module: Any, grad_input: Any, grad_output: Any) -> None:
        """Full backward hook callback: statistics of one module call's gradients
        (``grad_input`` and ``grad_output`` are tuples, as full backward hooks get them)."""
        self.backward_entries[label] = {
            key: [self.stats_meta(g) if isinstance(g, torch.Tensor) else None for g in grads]
            for key, grads in (("grad_output", grad_output), ("grad_input", grad_input))
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
        if scope.blackbox_depth or self.hidden:
            if self.hidden == STEPPING and op == "detach" and isinstance(out, torch.Tensor):
                # a pipeline stage sends the detached output of its module
                entry = self.labels.get(args[0]) if args else None
                if entry is not None and entry[2] == args[0]._version:
                    self.labels.set(out, entry[0], entry[1])
            return  # inside a blackbox module, FSDP's all-gather, a wrapper's own code
        if isinstance(out, torch.Tensor):
            if op == "view_as" and len(args) == 2 and args[0] is args[1]:
                # x.view_as(x): how a full backward hook wraps a module's inputs and
                # outputs (torch.utils.hooks.BackwardHook), and DTensor.to_local()
                # its shard (which may be a collective's AsyncCollectiveTensor). Not
                # a model op: the new object stands for the same tensor.
                entry = self.labels.get(args[0])
                if entry is None and self.dist is not None:
                    entry = self.dist.shard_entry(args[0])
                if entry is not None:
                    self.labels.set(out, entry[0], entry[1])
                    return
        elif not holds_tensor((out, args, kwargs)):
            return  # a state call (torch._C._set_grad_enabled from @torch.no_grad())
        base = op_node_base(scope.stack[-1] if scope.stack else "", op)
        counters = self.counters
        k = counters.get(base, 0)
        counters[base] = k + 1
        name = op_node_name(base, k)
        rendered = (
            dict(zip(kwargs, self._render_args(kwargs.values()), strict=True)) if kwargs else {}
        )
        # outputs: _NO_OUTPUTS, replaced below (the field's default factory is a call)
        node = Node(name, "op", op, self._render_args(args), rendered, _NO_OUTPUTS, raw)
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

    def record_collective(
        self,
        op: str,
        raw: str,
        args: tuple[Any, ...],
        attrs: dict[str, Any],
        outputs: list[torch.Tensor],
        waited: bool = True,
        module: str | None = None,
    ) -> list[TensorMeta]:
        """Collective recorder callback (:mod:`.collectives`): append one op node, named
        and rendered as :meth:`record_op` does, with the collective's attributes
        (``group``, ``bytes``, ``phase`` ...) as its keyword arguments; also where
        the ops around it are hidden (FSDP's all-gather), and also without a tensor
        argument (``recv``). Each output is described afresh and labelled by this
        node, also when the collective wrote it in place (``all_reduce`` of a
        ``c10d`` process group); ``waited`` False (a transfer under way): without
        statistics, which the caller queues once it has waited. ``module``: the path
        of the module whose call issued it; where that call has ended (a module's own
        forward hooks run after the global one that closes its scope: a parallel
        style's output redistribution), the node is named in that call's scope, not
        its caller's, unless the module is a blackbox.

        Returns:
            The node's output metas; ``[]`` inside a blackbox module (no node).
        """
        scope = self.scope
        if scope.blackbox_depth:
            return []
        label = scope.stack[-1] if scope.stack else ""
        if module and module != module_path(label) and module not in scope.blackbox_paths:
            if calls := scope.calls.get(module):  # its latest call (a blackbox holds none)
                label = module_node_name(module, calls - 1)
        base = op_node_base(label, op)
        k = self.counters.get(base, 0)
        self.counters[base] = k + 1
        kwargs = {kk: self.render(v) for kk, v in attrs.items()}
        node = Node(op_node_name(base, k), "op", op, self._render_args(args), kwargs, [], raw)
        self.nodes.append(node)
        for i, t in enumerate(outputs):
            meta = self.stats_meta(t) if waited else TensorMeta(shape_of(t), dtype_name(t.dtype))
            self.labels.set(t, ref(node.name, i if len(outputs) > 1 else None), meta)
            node.outputs.append(meta)
        return node.outputs

    def _output_meta(self, t: torch.Tensor, label: str, source: Any) -> TensorMeta:
        """:meth:`new_meta` and the labelling of :meth:`_leaf_outputs` for an op's single
        tensor output ``t``, labelled ``label``, with one lookup of ``t``'s entry (and
        its weak reference reused when ``t`` is known). ``source``: for ops in
        :data:`SAME_ELEMENTS`, the input; when it has the same number of elements and
        dtype, ``t`` shares its statistics (a DTensor's shard gets ``label`` too,
        :meth:`~.dtensor.Distributed.describe`)."""
        entries = self.labels.entries
        entry = entries.get(id(t))
        live = entry is not None and entry[0]() is t
        version = t._version
        if live and entry[3] == version:  # type: ignore[index]
            # the op returned a tensor it was given, unchanged: same statistics, and
            # an input, parameter or buffer keeps its name (see _leaf_outputs)
            meta = self.known_meta(t, entry[2])  # type: ignore[index]
            if entry[1] not in self.named:  # type: ignore[index]
                self.relabelled[label] = (entry[1], len(self.nodes))  # type: ignore[index]
                entries[id(t)] = (entry[0], label, meta, version)  # type: ignore[index]
            return meta
        src = self.labels.get(source) if source is not None else None
        if (
            src is not None
            and src[2] == source._version
            and source.dtype == t.dtype
            and source.numel() == t.numel()
        ):  # the input's elements, unchanged: its statistics
            shared = self.known_meta(source, src[1])
            meta = TensorMeta(shape_of(t), shared.dtype, shared.stats)
            if self.dist is not None:
                self.dist.describe(t, meta, label)
        else:
            meta = self.stats_meta(t, label)
        if live:  # written in place
            self.relabelled[label] = (entry[1], len(self.nodes))  # type: ignore[index]
        entries[id(t)] = (entry[0] if live else weakref.ref(t), label, meta, version)  # type: ignore[index]
        return meta

    def _unstable(
        self, op: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, node: Node
    ) -> bool:
        """Fill ``node.outputs`` for an op whose output values are not a function of its
        inputs; return False (nothing done) when this call is an ordinary one
        (dropout in eval mode).

        Uninitialised memory (:data:`~.opnames.UNINITIALISED_OPS`): no statistics, and
        (when statistics are taken) the fresh memory of ``empty``-like ops is filled
        as ``torch.utils.deterministic.fill_uninitialized_memory`` does under
        ``torch.use_deterministic_algorithms(True)``: NaN for floating and complex
        dtypes, the largest value for integers. A model that reads memory it never
        wrote then shows it as NaN counts, the same in every run, instead of
        statistics of stale bytes. Random draws: no statistics, ``random: true``.
        """
        if op in UNINITIALISED_OPS:
            if self.batch is not None and op not in ("resize_", "resize_as_"):
                _fill_uninitialised(out)
            random = False
        elif is_random_call(op, args, kwargs):
            random = True
        else:
            return False

        def bare(t: torch.Tensor) -> TensorMeta:  # shape and dtype, no statistics
            return TensorMeta(shape_of(t), dtype_name(t.dtype), random=random)

        node.outputs = self._leaf_outputs(node.name, out, bare)
        return True

    def enter_module(self, label: str, module: Any, args: tuple[Any, ...]) -> None:
        """Forward pre-hook callback: append a module node (args known, outputs not yet).

        Runs under ``DisableTorchFunction``, as does :meth:`exit_module`: the hooks fire
        while the mode is active, and every tensor property they read (``shape``,
        ``_version``) would otherwise be a ``__torch_function__`` round trip.
        """
        with torch._C.DisableTorchFunction():
            node = Node(label, "module", module_class(module), self._render_args(args), {}, [])
            if self.view == "modules":
                node.params = sum(p.numel() for p in module.parameters())
            self.module_nodes[label] = node, len(self.nodes)
            self.nodes.append(node)

    def exit_module(self, label: str, module: Any, kwargs: dict[str, Any], output: Any) -> None:
        """Forward hook callback: fill the module node's kwargs and outputs (the scope
        calls it only for a call whose :meth:`enter_module` ran)."""
        node, start = self.module_nodes[label]
        with torch._C.DisableTorchFunction():
            if kwargs:  # optional inputs left at None are not part of the call
                node.kwargs = {k: self.render(v) for k, v in kwargs.items() if v is not None}
                if self.relabelled:  # the references their tensors had when the call began
                    node.kwargs = map_plain(node.kwargs, functools.partial(self.at_entry, start))
            if module in self.scope.blackboxes:  # its outputs are its own, as an op's
                node.outputs = self._leaf_outputs(label, output, self.new_meta)
            else:
                node.outputs = self.describe_outputs(output, label)

    def at_entry(self, start: int, value: Any) -> Any:
        """A rendered keyword argument of the module node ``nodes[start]`` (``start``
        its index in :attr:`nodes`) with the reference its tensor had when the call
        began.

        torch's global forward pre-hooks get no keyword arguments
        (``register_module_forward_pre_hook``), so the forward hook renders them after
        the module ran (:meth:`exit_module`). A tensor the module wrote in place, or
        passed through an op that returned it unchanged (XLNet's ``.type()``), has by
        then the reference of a node inside the call; :attr:`relabelled` leads back to
        the one it had before. Searched only once a reference of the trace was taken
        over.
        """
        relabelled = self.relabelled
        while isinstance(value, str) and value in relabelled and relabelled[value][1] > start:
            value = relabelled[value][0]
        return value

    def describe_outputs(self, value: Any, owner: str) -> list[Any]:
        """Describe a module's output leaves by reference, shape and dtype."""
        entries: list[Any] = []
        leaves: Any
        if isinstance(value, torch.Tensor):
            leaves = (value,)
        elif type(value) is tuple and all(v is None or isinstance(v, torch.Tensor) for v in value):
            leaves = value  # what flatten gives, without building paths
        else:
            leaves = [leaf for _, leaf in flatten(value, "")]
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, torch.Tensor):
                entry = self.labels.get(leaf)
                if entry is None or entry[2] != leaf._version:  # produced by no recorded op
                    reference = ref(owner, i)
                    if entry is not None:
                        self.relabelled[reference] = (entry[0], len(self.nodes))
                    self.labels.set(leaf, reference, self.new_meta(leaf))
                else:
                    reference = entry[0]
                entries.append(self.output_entry(leaf, reference))
            else:
                entries.append(self.render(leaf))
        return entries

    def output_entry(self, t: torch.Tensor, reference: str) -> dict[str, Any]:
        """How a module or model output names the labelled tensor ``t``: its
        ``reference`` (``labels.ref(t)``, which the caller has), shape and dtype."""
        return {"ref": reference, "shape": shape_of(t), "dtype": dtype_name(t.dtype)}


@dataclass
class Run:
    """What :func:`~.tracer.trace_run` runs in place of one call of the traced module: code
    that calls it any number of times (a pipeline schedule's step,
    :func:`pytest_graphir.parallel.trace_schedule`).

    Attributes:
        call: runs, once, with every recorder installed; returns the ``outputs``.
        called: the modules ``call`` calls, the traced module's children (a
            pipeline's stages on this rank); empty: the traced module itself.
        counts: whether the call starting now is one of the run's (a
            microbatch); one that is not (the caller's own shape inference on
            placeholder inputs) is not recorded.
        plan: ``plan(n)`` after ``call``, with ``n`` the most counted calls of one
            module: the ``plan`` section's entries for the root (``<root>``),
            merged into what the model's own plan says of it.
    """

    call: Callable[[], Any]
    called: list[torch.nn.Module] = field(default_factory=list)
    counts: Callable[[], bool] = lambda: True
    plan: Callable[[int], dict[str, Any]] = lambda n: {}


def ddp_wrapped(module: torch.nn.Module) -> torch.nn.Module | None:
    """The module a ``torch.nn.parallel.DistributedDataParallel`` holds (its attribute
    ``module``); None for any other module. A trace of a DDP names its modules,
    parameters and gradients as the held module's, without DDP's ``module.``
    segment (a user's submodule called ``module`` keeps its name), and writes the
    held module's class as the model's."""
    ddp = torch.nn.parallel.DistributedDataParallel
    return module.module if isinstance(module, ddp) else None  # type: ignore[return-value]


def input_names(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[tuple[str, Any]]:
    """Name the call's arguments after ``model.forward``'s parameters where it can."""
    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    named: list[tuple[str, Any]] = []
    for pname, value in bound.arguments.items():
        kind = bound.signature.parameters[pname].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            named.extend((f"{pname}.{i}", v) for i, v in enumerate(value))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            named.extend(value.items())
        else:
            named.append((pname, value))
    return named


def _fill_uninitialised(out: Any) -> None:
    """Fill fresh ``empty`` memory deterministically (see :meth:`TraceState._unstable`)."""
    if not isinstance(out, torch.Tensor) or out.numel() == 0 or out.device.type == "meta":
        return
    with torch._C.DisableTorchFunction(), torch.no_grad():
        if out.is_floating_point() or out.is_complex():
            out.fill_(float("nan"))
        elif out.dtype != torch.bool:
            out.fill_(torch.iinfo(out.dtype).max)


def check_not_inference(t: torch.Tensor, what: str, name: str) -> None:
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
