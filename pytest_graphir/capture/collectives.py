"""Collectives as nodes: every ``torch.distributed`` collective a traced run issues,
whatever the implementation, with its group, size, reduce op, phase and origin.

The tracer builds a :class:`CollectiveRecorder` only where ``torch.distributed`` is
initialised (on this thread, for the ``threaded`` process group: ``TraceState.dist``
is set), so a plain model pays nothing and does not import ``torch.distributed``
either. :class:`CollectiveRecorder`, a
``TorchDispatchMode`` on the stack for the forward and the backward, sees the
ATen-level collectives: functional collectives (``_c10d_functional.all_reduce``,
``all_gather_into_tensor``, ..., what tensor parallelism and DTensor issue) and the
``c10d`` ops C++ process groups (gloo, NCCL) dispatch for every ``torch.distributed``
call (FSDP2's among them). As ``CommDebugMode``
(``torch/distributed/tensor/debug/_comm_mode.py``) does, it returns ``NotImplemented``
for a DTensor argument, so DTensor desugars first and the collectives of its sharding
propagation are seen on local tensors. An op is a collective by its schema
(:func:`collective_schema`: a process group or a group name among its arguments),
whatever its name, ``send`` and ``recv`` included.

A process group written in Python (the ``threaded`` ranks of
:func:`~pytest_graphir.parallel.run_ranks`) runs the ``torch.distributed`` calls
without any dispatcher op: its methods report each call to the same recorder
(:func:`group_call`). One collective nested in another is never recorded twice.

An asynchronous collective is waited for (``wait_tensor``, ``Work.wait``) before
its output is described. Each collective is named after what it does (:func:`op_name`),
its group after the ``DeviceMesh`` dimension whose process group it is (meshes of
the model's DTensor parameters and inputs, and of every DTensor an op meets; an
FSDP2 unit's sharded parameters are DTensors on its mesh), else the sorted global
ranks. ``bytes`` is the larger of the input and output sizes (an all-gather's
output, a reduce-scatter's input).
``implicit`` is true when DTensor's op dispatch issued it to redistribute an
operand (``torch/distributed/tensor/_dispatch.py`` on the Python stack before any
``DTensor.redistribute``). In the forward each collective is an op node
(:meth:`~.state.TraceState.record_collective`); in the backward (``phase``
``backward``, or ``recompute`` inside ``torch.utils.checkpoint``) an entry of the
``collectives`` section, keyed ``<phase>/<op>#<k>``.

The op interceptors' own records of the Python-level calls that make up a
collective (:data:`SKIPPED`) are dropped (:meth:`CollectiveRecorder.filter`), and
rank-valued op arguments written ``"<rank>"``, so every rank writes the same text.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
import traceback
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..leaves import flatten
from ..names import RANK, dtype_name, peer_name
from ..opnames import UNINITIALISED_OPS, is_random_call
from .protocol import Record
from .state import STEPPING, TraceState

COLLECTIVE = 4
"""A bit of :attr:`~.state.TraceState.hidden`: a collective runs, what it calls (a
nested collective, a Python process group's copies) is part of it
(:meth:`CollectiveRecorder.issue`)."""

SKIPPED = ("_c10d_functional", "c10d", "distributed.distributed_c10d.", "_dtensor.")
"""Canonical name prefixes of the Python-level calls a collective is made of (the
``torch.ops`` packets, the ``torch.distributed`` API): the recorder records the
collective itself, so the op interceptors record none of them."""

RANK_ARGS = frozenset({"rank", "group_rank", "global_rank"})
"""Schema argument names of ``torch.ops`` calls whose value is the calling rank
(``fsdp.all_gather_copy_in(..., rank)``)."""

_SUFFIXES = re.compile(r"_into_tensor|_tensor|_single|_base|_coalesced|_out|_any_source")
_SPELLING = {"allreduce": "all_reduce", "allgather": "all_gather", "alltoall": "all_to_all"}


def op_name(name: str) -> str:
    """The one name of a collective, whatever the implementation:
    ``_allgather_base_``, ``all_gather_into_tensor`` and ``all_gather_single`` are
    ``all_gather``; ``shard_dim_alltoall`` is ``all_to_all``; ``isend`` is ``send``."""
    name = _SUFFIXES.sub("", name.strip("_")).removeprefix("shard_dim_")
    return _SPELLING.get(name, name.removeprefix("i") if name in ("isend", "irecv") else name)


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in ``value`` (a tensor, or nested lists and tuples of them)."""
    return [t for _, t in flatten(value, "") if isinstance(t, torch.Tensor)]


_ACTIVE = threading.local()
"""``recorder``: the :class:`CollectiveRecorder` of the trace running on this thread."""


def group_call(pg: Any, name: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, the ``name`` method of the Python process group ``pg``
    (``allreduce``, ``all_gather_single``, ``barrier``, ...), recorded as a collective
    of the trace running on this thread (:meth:`CollectiveRecorder.called`); run
    unrecorded outside a trace's phases and inside another collective.

    Args:
        pg: the process group whose method runs.
        name: the method's name; its outputs are its first argument, its inputs its
            second when that holds tensors, else the first (in place); ``barrier``
            has none. ``opts.reduceOp`` names the reduce op.
        call: the method itself (the base class's).

    Returns:
        What ``call`` returned (a ``Work``). Whatever it raises goes on unchanged.
    """
    rec: CollectiveRecorder | None = getattr(_ACTIVE, "recorder", None)
    if rec is None or rec.state.hidden & COLLECTIVE or rec.phase is None:
        return call(*args, **kwargs)
    return rec.issue(call, args, kwargs, lambda out: rec.called(pg, name, args, kwargs))


class CollectiveRecorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Records the collectives of one trace (see the module docstring); the
    ``TorchDispatchMode`` that sees the collective ATen ops (:meth:`__torch_dispatch__`),
    which as a context manager also gets this thread's Python process-group calls
    (:func:`group_call`). ``phase`` (``"forward"``, ``"backward"``,
    None: record nothing) is set by the tracer around its steps.

    Args:
        state: the trace's state; forward collectives become its op nodes.
        model: the traced module; its DTensor parameters name the mesh dimensions
            (``fully_shard``'s sharded parameters are DTensors on the unit's mesh, or
            on the root mesh it is a dimension of, with TP).
        inputs: the model call's tensors (a DTensor input names its mesh too).
    """

    def __init__(self, state: TraceState, model: torch.nn.Module, inputs: list[Any]) -> None:
        import torch.distributed as dist
        from torch.distributed.tensor import DTensor

        super().__init__()  # type: ignore[no-untyped-call]
        self.state, self.dist, self.dtensor = state, dist, DTensor
        self.resolve: Any = dist.distributed_c10d._resolve_process_group  # type: ignore[attr-defined]
        assert state.dist is not None  # the tracer builds one only then
        self.dtensors = state.dist
        self.phase: str | None = None
        """``"forward"``, ``"backward"``, None (record nothing); set by the tracer,
        which ends the forward with :meth:`end_forward`."""
        self.transfers: list[tuple[Callable[[], Any], list[torch.Tensor], list[Any]]] = []
        """point-to-point transfers of the forward not waited for yet, with their
        received tensors and those tensors' metas (:meth:`end_forward`)"""
        self.section: dict[str, Any] = {}
        """The ``collectives`` section: backward and recompute collectives by key."""
        self.groups: dict[str, str] = {}  # process group name -> mesh dimension name
        self.meshes: set[int] = set()
        for t in [*model.parameters(), *inputs]:  # FSDP2 units' meshes among them
            if isinstance(t, DTensor):
                self.add_mesh(t.device_mesh)
        self._redistribute = DTensor.redistribute.__code__

    def __enter__(self) -> CollectiveRecorder:
        super().__enter__()  # type: ignore[no-untyped-call]
        _ACTIVE.recorder = self
        return self

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.recorder = None
        super().__exit__(*exc)  # type: ignore[no-untyped-call]

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        """The collective ATen ops (see the module docstring): a collective is run and
        recorded (:meth:`issue`, :meth:`dispatched`), any other op runs unseen; an op
        with a DTensor argument returns ``NotImplemented``, its mesh named first."""
        kwargs = kwargs or {}
        if self.dtensor in types:  # let DTensor desugar first; its meshes name groups
            for a in args:
                if isinstance(a, self.dtensor):
                    self.add_mesh(a.device_mesh)
            return NotImplemented
        if self.state.hidden & COLLECTIVE or self.phase is None:
            return func(*args, **kwargs)
        if collective_schema(func) is None:  # any other op: seen, if at all, at its call
            return _unintercepted(func, args, kwargs)
        return self.issue(func, args, kwargs, lambda out: self.dispatched(func, args, kwargs, out))

    def add_mesh(self, mesh: Any) -> None:
        """Name the process group of each dimension of ``mesh`` after the dimension."""
        if id(mesh) not in self.meshes:
            self.meshes.add(id(mesh))
            for dim, name in enumerate(mesh.mesh_dim_names or ()):  # a mesh without: none
                self.groups.setdefault(mesh.get_group(dim).group_name, name)

    def filter(self, record: Record) -> Record:
        """The op interceptors' callback: ``record`` without the calls in
        :data:`SKIPPED` (a wrapper one of them makes takes its argument's label,
        :meth:`wrapped`) and with rank-valued arguments of ``torch.ops`` calls written
        :data:`RANK`; the outputs of the node it adds, unless they are uninitialised
        or random (no statistics), are checked for local shapes
        (:meth:`~.dtensor.Distributed.mark_local`)."""
        nodes = self.state.nodes

        def filtered(
            name: str, raw: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
        ) -> None:
            if name.startswith(SKIPPED):
                if self.phase == "forward":
                    self.wrapped(args, out)
                return
            if positions := (_rank_args(name) if "." in name else ()):
                args = tuple(RANK if i in positions else a for i, a in enumerate(args))
            count = len(nodes)
            record(name, raw, args, kwargs, out)
            self.dtensors.label_result(out)
            if len(nodes) > count and not (
                name in UNINITIALISED_OPS or is_random_call(name, args, kwargs)
            ):
                self.dtensors.mark_local(args, nodes[-1].outputs)

        return filtered

    def wrapped(self, args: tuple[Any, ...], out: Any) -> None:
        """A tensor that a call of :data:`SKIPPED` made of an argument (a wrapper, as
        ``_wrap_tensor_autograd``'s ``AsyncCollectiveTensor``) takes its label."""
        labels = self.state.labels
        if isinstance(out, torch.Tensor) and labels.get(out) is None:
            for t in (getattr(out, "elem", None), *args):
                if isinstance(t, torch.Tensor) and (entry := labels.get(t)) is not None:
                    labels.set(out, entry[0], entry[1])
                    return

    def called(self, pg: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Record the ``name`` method of the Python process group ``pg`` (see
        :func:`group_call`), which has run: synchronous, nothing to wait for."""
        outs = [] if name == "barrier" else _tensors(args[0])
        ins = [] if name == "barrier" else _tensors(args[1:2]) or outs
        opts = kwargs.get("opts", args[-1] if args else None)
        reduce = getattr(getattr(getattr(opts, "reduceOp", None), "op", None), "name", None)
        single = name in ("all_to_all_single", "alltoall_base")  # its name before 2.13
        splits = _splits(args[3], args[2]) if single else None
        self.record(
            op_name(name), f"ProcessGroup.{name}", ins, outs, pg, reduce=reduce, splits=splits
        )

    def dispatched(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
    ) -> None:
        """Record a collective ATen op (:func:`collective_schema`) that returned ``out``.

        A ``c10d`` op (what a C++ process group dispatches) takes its outputs first,
        then its inputs (in place: the same tensors; ``send`` only an input) and a
        boxed process group, and returns a ``Work`` (alone or after its outputs),
        waited for here; a functional one takes its input first and a group name,
        and returns its output, waited for (``wait_tensor``). Either names its reduce
        op by its ``reduce_op`` argument (a ``c10d`` op's a boxed ``ReduceOp``,
        whose ``RedOpType`` names it). A point-to-point
        transfer is not waited for (two ranks that exchange would each wait for the
        other): its received tensors' statistics are taken when the forward ends
        (:meth:`end_forward`)."""
        names = collective_schema(func)
        call = dict(zip(names or (), args, strict=False)) | kwargs
        name = op_name(func._overloadpacket.__name__)
        group = call.get("process_group", call.get("group_name"))
        transfer = name in ("send", "recv")
        if isinstance(group, torch.ScriptObject):  # c10d: a boxed ProcessGroup
            pg = self.dist.ProcessGroup.unbox(group)
            outs = [] if name in ("send", "barrier") else _tensors(args[0])
            ins = [] if name == "barrier" else _tensors(args[1]) or _tensors(args[0])
            work = self.dist.Work.unbox(out if isinstance(out, torch.ScriptObject) else out[1])
            wait = functools.partial(_wait_work, work)
        else:  # functional: a group name
            pg = self.resolve(str(group))  # the group its name stands for (RESOLVE_GROUP)
            ins, outs = _tensors(args[0]), [] if name == "send" else _tensors(out)
            wait = functools.partial(_wait_tensors, outs)
        reduce = call.get("reduce_op")  # its name; a c10d op's a boxed ReduceOp
        if isinstance(reduce, torch.ScriptObject):  # torch 2.9's has no op(): unnamed
            op = reduce.op() if reduce._has_method("op") else None  # type: ignore[attr-defined]
            reduce = None if op is None else self.dist.ReduceOp.RedOpType(op).name
        if not transfer:
            wait()
        peer = call.get("dst", call.get("src")) if transfer else None
        splits = _splits(call.get("input_split_sizes"), call.get("output_split_sizes"))
        metas = self.record(name, str(func), ins, outs, pg, peer=peer, reduce=reduce, splits=splits)
        if transfer and metas:
            self.transfers.append((wait, outs, metas))

    def end_forward(self) -> None:
        """Record nothing more (``phase`` None), once the forward's point-to-point
        transfers are waited for (the model has normally waited for them already;
        none are left outside the forward) and their received tensors' statistics
        queued: a received tensor is described as the forward left it. The tracer
        calls it when the forward ends, and again, whatever happened, when it
        unwinds."""
        transfers, self.transfers = self.transfers, []
        for wait, outs, metas in transfers:
            wait()
            if self.state.batch is not None:
                for t, meta in zip(outs, metas, strict=True):
                    self.state.batch.add(t, meta)
        self.phase = None

    def issue(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        describe: Callable[[Any], None],
    ) -> Any:
        """Run one collective, the calls it makes unseen by the dispatch mode, by
        :func:`group_call` and by the op interceptors (a nested collective is not
        recorded twice), then ``describe(out)`` it, with torch functions disabled; return ``out``. A
        collective that cannot be described is named in a warning, never raised.

        Warns:
            UserWarning: the collective ran, but describing it failed (its node or
                entry is missing): names the op and the reason.
        """
        self.state.hidden |= COLLECTIVE
        try:
            out = _unintercepted(func, args, kwargs)
        finally:
            self.state.hidden &= ~COLLECTIVE
        with torch._C.DisableTorchFunction():  # no interceptor sees what this runs
            try:
                describe(out)
            except Exception as exc:  # the model's collective ran: the trace goes on
                warnings.warn(
                    f"graphir: collective {func} ran but is not recorded "
                    f"({type(exc).__name__}: {exc})",
                    stacklevel=2,
                )
        return out

    def record(
        self,
        op: str,
        raw: str,
        ins: list[torch.Tensor],
        outs: list[torch.Tensor],
        pg: Any,
        **given: Any,
    ) -> list[Any]:
        """A forward op node or a ``collectives`` entry for one collective, on process
        group ``pg``. ``given``, each written in this order where not None: ``peer``,
        the group rank a point-to-point op sends to or receives from (named by
        :attr:`~.state.TraceState.peers`, a pipeline stage's ``prev`` / ``next``,
        else written relative to this rank, :func:`~pytest_graphir.names.peer_name`);
        ``reduce``, the reduce op's name (written in lower case); ``splits``, an
        ``all_to_all_single``'s split sizes (:func:`_splits`). A ``send`` or
        ``recv`` is a transfer under way, whose outputs get statistics later
        (:meth:`end_forward`). A ``send`` or ``recv`` issued between a pipeline
        stage's calls goes to :meth:`~.state.TraceState.step_transfer`; another
        collective there (a schedule's own bookkeeping) is not recorded, nor DDP's
        bucket rebuild (:meth:`_context`). Returns the forward node's output metas
        (``[]`` outside the forward)."""
        implicit, recompute, module, layout = self._context()
        if layout:
            return []  # DDP's one-off bucket rebuild: the reducer's bookkeeping
        group = self.groups.get(pg.group_name) or sorted(self.dist.get_process_group_ranks(pg))
        attrs: dict[str, Any] = {"group": group, "group_size": pg.size()}
        attrs |= {k: v for k, v in given.items() if v is not None}
        if "peer" in attrs:
            attrs["peer"] = peer_name(attrs["peer"], pg.rank(), pg.size())
        if "reduce" in attrs:
            attrs["reduce"] = attrs["reduce"].lower()
        attrs["bytes"] = max(sum(t.numel() * t.element_size() for t in ts) for ts in (ins, outs))
        phase = "recompute" if recompute and self.phase == "backward" else self.phase
        attrs.update(phase=phase, implicit=implicit)
        transfer = op in ("send", "recv")
        if phase == "forward" and self.state.hidden & STEPPING:  # the schedule's own code
            if transfer:  # waited for by the caller before a call reads it
                self.state.step_transfer(op, raw, tuple(ins), attrs, outs)
            return []
        if phase == "forward":  # in the module whose forward or hooks issued it
            args = (op, raw, tuple(ins), attrs, outs, not transfer, module)
            return self.state.record_collective(*args)
        self._entry(op, module, attrs, ins, outs)
        return []

    def _entry(
        self, op: str, module: str | None, attrs: dict[str, Any], ins: Any, outs: Any
    ) -> None:
        """Add the ``collectives`` entry ``<phase>/<op>#k`` (``attrs["phase"]``)."""
        key = f"{attrs['phase']}/{op}"
        k = sum(1 for name in self.section if name.rpartition("#")[0] == key)
        entry: dict[str, Any] = {"op": op, **({"module": module} if module else {}), **attrs}
        if ins or outs:
            entry["dtype"] = dtype_name((ins or outs)[0].dtype)
        entry |= {"in": [list(t.shape) for t in ins], "out": [list(t.shape) for t in outs]}
        self.section[f"{key}#{k}"] = entry

    def end_step(self) -> None:
        """After a pipeline schedule's step (:attr:`~.state.TraceState.stepped`): each
        floating-point transfer left :attr:`~.state.TraceState.unread` ran against
        the activations' flow, a gradient of the schedule's backward (its
        ``loss_fn``): a ``backward`` entry, in firing order, sent to ``prev`` or
        received from ``next``. The others are the schedule's handshakes (integers,
        pickled shapes), not recorded."""
        for op, _, ins, attrs, outs in self.state.unread:
            if any(t.is_floating_point() or t.is_complex() for t in [*ins, *outs]):
                peer = "prev" if op == "send" else "next"
                self._entry(op, None, attrs | {"peer": peer, "phase": "backward"}, ins, outs)

    def _context(self) -> tuple[bool, bool, str | None, bool]:
        """From the Python stack, in one walk: whether DTensor's op dispatch issued the
        collective, whether it runs inside ``torch.utils.checkpoint`` (a recompute in
        the backward), the path of the innermost traced module whose ``__call__``
        runs (its forward, or its own hooks: a parallel style's), and
        whether ``DistributedDataParallel``'s forward issued it itself: the innermost
        frame outside this package (and the dispatch-mode call's ``_PASSED`` frames)
        is its ``_pre_forward``, which calls the reducer's bucket rebuild from C++
        (the new bucket layout broadcast once, in the second forward after
        construction); its buffer broadcasts run in Python functions of their own."""
        frames = [frame for frame, _ in traceback.walk_stack(sys._getframe())]
        codes = [frame.f_code for frame in frames]
        outside = (c for c in codes if not c.co_filename.startswith(_PACKAGE))
        caller: Any = next((c for c in outside if not c.co_filename.endswith(_PASSED)), None)
        ddp = caller is not None and caller.co_name == "_pre_forward"
        ddp = ddp and caller.co_filename.endswith(_DDP_FILE)
        # the innermost of DTensor.redistribute (explicit) and DTensor's op dispatch
        explicit = self._redistribute
        issuers = (c for c in codes if c is explicit or c.co_filename.endswith(_DISPATCH_FILE))
        implicit = next((code is not explicit for code in issuers), False)
        recompute = any(code.co_filename.endswith(_CHECKPOINT_FILE) for code in codes)
        names = self.state.scope.names
        owners = (f.f_locals.get("self") for f in frames if f.f_code.co_name == "_call_impl")
        named = (names[m] for m in owners if isinstance(m, torch.nn.Module) and m in names)
        return implicit, recompute, next(named, None), ddp


_DISPATCH_FILE = "/".join(("distributed", "tensor", "_dispatch.py"))
_DDP_FILE = "/".join(("nn", "parallel", "distributed.py"))
_PACKAGE = __file__.rpartition("/capture/")[0]
_PASSED = ("/".join(("torch", "_compile.py")), "/".join(("_dynamo", "eval_frame.py")))
"""Files of the frames between DDP's and the recorder besides this package's: the
``torch._disable_dynamo`` wrapper torch's call into a dispatch mode goes through."""


_CHECKPOINT_FILE = "/".join(("utils", "checkpoint.py"))


@functools.lru_cache(maxsize=1024)
def _rank_args(name: str) -> tuple[int, ...]:
    """Positions of the rank-valued arguments of the ``torch.ops`` call named ``name``
    (``fsdp.all_gather_copy_in``, which FSDP2 passes positionally); none for any
    other name."""
    namespace, _, op = name.partition(".")
    try:
        packet = getattr(getattr(torch.ops, namespace), op)
        schema = getattr(packet, packet.overloads()[0])._schema
    except Exception:  # not a torch.ops call
        return ()
    return tuple(i for i, a in enumerate(schema.arguments) if a.name in RANK_ARGS)


_NAMESPACES = frozenset({"c10d", "_c10d_functional", "_c10d_functional_autograd"})
_GROUP_ARGS = frozenset({"process_group", "group_name"})


@functools.lru_cache(maxsize=256)
def collective_schema(func: Any) -> tuple[str, ...] | None:
    """The argument names of a collective ATen op, None for any other op. A
    collective is an op of the ``c10d`` or functional-collective namespaces whose
    schema takes a process group (``c10d``) or a group name (functional), whatever
    its name: ``wait_tensor`` and ``_wrap_tensor_autograd`` are none."""
    if getattr(func, "namespace", None) not in _NAMESPACES:
        return None
    names = tuple(a.name for a in func._schema.arguments)
    return names if _GROUP_ARGS.intersection(names) else None


WAIT_TENSOR = "torch.ops._c10d_functional.wait_tensor"
"""The op that waits for a functional collective's output (no public name: the
functional collectives' own ``wait_tensor`` is in private
``torch.distributed._functional_collectives``); pinned by
``tests/test_torch_private_dist.py``."""
RESOLVE_GROUP = "torch.distributed.distributed_c10d._resolve_process_group"
"""A process group by the name a functional collective carries, from torch's
registry, where every group torch makes is (per rank thread on the ``threaded``
backend); torch has no public lookup by name. Pinned by
``tests/test_torch_private_dist.py``."""


def _splits(ins: Any, outs: Any) -> dict[str, list[int]] | None:
    """An ``all_to_all_single``'s split sizes along dim 0, ``{"in": [...], "out":
    [...]}`` (this rank's: an MoE layer's routing makes them differ between ranks, as
    its ``bytes`` then do); None where neither is given (even splits: ``None`` or
    ``[]``)."""
    if not ins and not outs:
        return None
    return {"in": [int(n) for n in ins or ()], "out": [int(n) for n in outs or ()]}


def _wait_tensors(tensors: list[torch.Tensor]) -> None:
    """Wait for a functional collective's outputs (:data:`WAIT_TENSOR`)."""
    for t in tensors:
        torch.ops._c10d_functional.wait_tensor(t)


def _wait_work(work: Any) -> None:
    """Wait for a c10d ``Work`` unless done: gloo's receive waits again for another
    message each time it is waited for."""
    if not work.is_completed():
        work.wait()


def _unintercepted(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)`` with torch functions disabled, below both op
    interceptors: a collective (the torch calls it makes, a Python process group's
    copies, are part of it) or an ATen op the dispatch mode hands on (the interceptors
    saw its call already). Ops are hidden from the trace by
    :attr:`~.state.TraceState.hidden` alone."""
    with torch._C.DisableTorchFunction():
        return func(*args, **kwargs)
