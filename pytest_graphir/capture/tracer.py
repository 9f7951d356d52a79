"""``trace()``: run a model once under the recorders and build its :class:`GraphIR`,
one named step each (check the call, label the inputs, run the forward and backward
with every recorder installed, describe the outputs, warn about what was unseen).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

import torch

from .. import provenance
from ..gc_pause import gc_paused
from ..ir import GraphIR, Interceptor, View
from ..leaves import flatten
from ..names import ROOT_LABEL, ref
from .backward import autograd_types, gradients, make_loss
from .collectives import CollectiveRecorder
from .dtensor import (
    dtensor_metas,
    fsdp_modules,
    global_stats,
    module_class,
    plan_section,
    reshard,
)
from .fingerprints import parameter_entries
from .hooks import HookRecorder
from .interrupts import deferred_sigint, register, unregister
from .mode import RecordingMode
from .options import (
    checked_call,
    stats_option,
    warn_other_threads,
    warn_stale,
    warn_uncaptured,
)
from .options import granularity as granularity_of
from .precision import FULL, effective_mode, float32_math
from .state import Run, TraceState, ddp_wrapped, input_names
from .stats import StatsBatch
from .threads import OtherThreads

__all__ = ["Run", "trace", "trace_run"]


def trace(
    model: torch.nn.Module,
    *args: Any,
    stats: bool | None = None,
    hooks: bool = False,
    backward: bool | Callable[[Any], Any] = False,
    blackbox: Iterable[str | type] = (),
    depth: int | None = None,
    view: View = "ops",
    interceptor: Interceptor = "mode",
    float32_precision: str = FULL,
    dist_stats: str = "local",
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
            The default (``None``) is on, except where the default process group
            is torch's fake one (``backend="fake"``), whose numbers are
            uninitialised memory on ranks above 0: there it is off, and ``meta``
            says ``"stats_off": "fake process group"``.
        hooks: record the hook events of the run, forward and (with ``backward``)
            backward, the model's own hooks by name, in firing order: the ``hooks``
            section (see :mod:`pytest_graphir.capture.hooks`).
        backward: also run a backward pass, from the sum of the first floating output
            (``True``) or from ``backward(output)``, a callable returning a scalar
            tensor. Adds the ``backward`` (per-module ``grad_input``/``grad_output``
            statistics), ``grads`` (per-parameter gradient statistics, or
            ``frozen`` / ``no gradient``) and ``autograd`` (``grad_fn`` types) sections.
            Uses ``torch.autograd.grad``: no ``.grad`` is changed. The forward section
            is the same as without ``backward``. Where ``torch.distributed`` is
            initialised, also the ``collectives`` section: the backward's
            collectives in firing order. A model with FSDP2 units or a
            ``DistributedDataParallel`` runs ``loss.backward()`` instead, as a
            training step does, so ``grads`` are the reduced gradients (DDP's
            bucket all-reduces are in ``collectives``); each ``.grad`` is put back
            afterwards. A ``DistributedDataParallel`` model is named as the module
            it holds (no ``module.`` segment; ``plan`` says the wrapper).
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
        dist_stats: the statistics of a ``DTensor``: ``"local"`` (default), its local
            shard's, taken without any collective; ``"global"``: the logical
            tensor's, combined from every rank's after the trace in one
            ``all_gather_object`` (:func:`.dtensor.global_stats`; a ``Partial``
            tensor keeps its local summand's), so every rank writes the same
            statistics. ``dist.stats`` says which (``global`` / ``local``).
        model_kwargs: keyword arguments for the model whose names clash with this
            function's own (``stats``, ``hooks``, ``backward``, ``interceptor``,
            ``model_kwargs``).
        **kwargs: keyword arguments of the model call.

    Returns:
        The :class:`GraphIR`: meta (model class, argument names, ``training``,
        ``grad_enabled``), inputs, module and op nodes in firing order, outputs.
        Where ``torch.distributed`` is initialised, each collective of the forward
        is an op node (``all_reduce``, with its group, size, reduce op, bytes;
        :mod:`pytest_graphir.capture.collectives`).
        Tensors are not kept: only their shapes, dtypes and statistics.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
        ValueError: ``interceptor`` is not ``"mode"`` or ``"patch"``;
            ``float32_precision`` is not ``"highest"`` or ``"model"``; ``dist_stats``
            is not ``"local"`` or ``"global"``; ``view`` is not
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

    Warns:
        UncapturedCallsWarning: ``interceptor="patch"`` found references to torch
            functions taken before patching, whose calls are missing.
        UnseenWriteWarning: held statistics of a tensor written in place by a call no
            interceptor saw.
        OtherThreadWarning: the forward ran torch ops on a thread it started; they
            are not recorded (named per thread, with their count).
        FakeStatisticsWarning: ``stats=True`` on torch's fake process group.
    """
    __tracebackhide__ = True
    # the options by name, as trace_run takes them: read before anything else is bound
    options = {name: value for name, value in locals().items() if name in OPTIONS}
    root, kwargs = checked_call(model, kwargs, model_kwargs, view, trace)
    return trace_run(root, args, kwargs, None, **options)


OPTIONS = {k: v for k, v in trace.__kwdefaults__.items() if k != "model_kwargs"}  # type: ignore[union-attr]
"""The options of :func:`trace` that :func:`trace_run` takes, with their defaults: its
keyword-only parameters, ``model_kwargs`` aside (one signature for both)."""


def trace_run(
    root: torch.nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    run: Run | None,
    **options: Any,
) -> GraphIR:
    """:func:`trace` of ``root`` (checked by :func:`~.options.checked_call`), its
    options by keyword, as :func:`trace` documents them.

    Args:
        root: the module traced: its modules are named, its parameters labelled.
        args: the call's positional arguments, named after ``root.forward``'s
            parameters (the ``inputs`` section).
        kwargs: the call's keyword arguments.
        run: None: the forward is ``root(*args, **kwargs)``. Else a :class:`Run`,
            whose ``call`` runs in its place: only the calls of ``root`` (or of
            ``run.called``) are recorded, each call's modules numbered on (``0``,
            ``0@1``, ...); the ops and collectives ``call`` runs between them are
            not, but the point-to-point transfers of the calls' inputs and outputs
            (:meth:`~.state.TraceState.step_transfer`) and the gradients it sends
            and receives (:meth:`~.collectives.CollectiveRecorder.end_step`). A
            tensor argument of the ``i``-th call of a module that no recorded op
            made (a microbatch cut by the caller's code) is an input named
            ``microbatch<i>.<parameter>``.
        **options: :func:`trace`'s options by name (:data:`OPTIONS`); one left out
            has its default there.

    Returns:
        The :class:`GraphIR`, as :func:`trace` returns it.

    Raises:
        TypeError: an option :func:`trace` does not have (``model_kwargs`` neither).
        As :func:`trace` otherwise.
    """
    __tracebackhide__ = True
    if unknown := options.keys() - OPTIONS:
        raise TypeError(f"trace_run() got an unexpected keyword argument {min(unknown)!r}")
    opt = SimpleNamespace(**{**OPTIONS, **options})
    if opt.dist_stats not in ("local", "global"):
        raise ValueError(f"trace(dist_stats={opt.dist_stats!r}): 'local' or 'global'")
    stats, stats_meta = stats_option(opt.stats)
    units = fsdp_modules(root)
    reshard(units)
    batch = StatsBatch() if stats and opt.view == "ops" else None  # modules view: no stats
    # the state is made with the collector paused, and closed: no reference cycle
    # outlives the trace
    with gc_paused(), contextlib.closing(TraceState(root, batch, opt.view, units)) as state:
        named = ddp_wrapped(root) or root  # what names the trace: a DDP's held module
        call_meta = {
            "model": module_class(named),
            "args": [n for n, _ in input_names(named, args, {})],
            "kwargs": sorted(kwargs),
            "training": root.training,
            "grad_enabled": torch.is_grad_enabled(),
            "stats": batch is not None,
            **stats_meta,
            # marks the blackbox modules in state.scope on the way
            **granularity_of(state, root, opt.blackbox, opt.depth),
        }
        plan = plan_section(state.planned, units, state.wrappers)
        with deferred_sigint():  # statistics in no_grad blocks: a Ctrl-C would leave grad off
            inputs = state.label_inputs(named, "", args, kwargs)
        state.stepped = run
        precision = float32_math(opt.float32_precision)  # checks it before anything runs
        if opt.float32_precision != FULL:
            call_meta["float32_precision"] = opt.float32_precision
        # the tensors among the call's arguments (nested ones included)
        tensors = [t for _, t in flatten([list(args), kwargs], "") if isinstance(t, torch.Tensor)]
        # the device the model runs on: its first input tensor's, else its first
        # parameter's or buffer's, else the CPU (lists, not generators: one left
        # unfinished is closed later, where a Ctrl-C is lost)
        on = tensors or [*root.parameters(), *root.buffers()]
        device = on[0].device.type if on else "cpu"
        float32 = FULL if opt.float32_precision == FULL else effective_mode()
        # state.scope.names: every module of root, walked once by TraceState
        written = provenance.collect(device, float32, state.scope.names)
        on_backward = state.backward_stats if opt.backward else None
        recorder = HookRecorder(state.scope, on_backward) if opt.hooks or opt.backward else None
        collectives = None  # unless torch.distributed is initialised on this thread
        if state.dist is not None and opt.view == "ops":
            collectives = CollectiveRecorder(state, root, tensors)
        # the op interceptor: a context manager with an `active` flag that calls record()
        # for every recorded op and flush() before every call that may write in place
        record = state.record_op if collectives is None else collectives.filter(state.record_op)
        flush = batch.flush if batch is not None else None
        mode: Any
        if opt.view != "ops":  # the module-level view records no ops
            mode = contextlib.nullcontext()
        elif opt.interceptor == "mode":
            mode = RecordingMode(record, flush)
        elif opt.interceptor == "patch":  # also scans the model for import-time aliases
            from .patch import PatchInterceptor

            mode = PatchInterceptor(record, model=root, before_write=flush)
        else:
            raise ValueError(
                f"trace(interceptor={opt.interceptor!r}): use 'mode' (TorchFunctionMode, the "
                "default) or 'patch' (symbol patches)"
            )
        # Run the forward (and backward) with every recorder installed, counting the
        # ops of threads it starts (OtherThreads), and remove them all again, also
        # when the model raises. Each install pushes its removal on one ExitStack, so
        # every removal runs, newest first, even when an earlier one raises (that
        # exception then goes on). SIGINT waits while installing and while
        # unwinding; a Ctrl-C anywhere between unwinds the stack before
        # KeyboardInterrupt goes on (interrupts.register).
        sections: dict[str, Any] = {}
        others = OtherThreads()
        stack = contextlib.ExitStack()
        try:
            with deferred_sigint():  # a Ctrl-C here would leave a hook or a mode behind
                register(stack.close)  # a Ctrl-C anywhere later unwinds the stack first
                stack.callback(unregister, stack.close)
                stack.enter_context(precision)
                stack.enter_context(state.scope)
                if recorder is not None:
                    stack.enter_context(recorder)
                # after: the hook log leaves them out
                for handle in state.watch_wrappers(root):
                    stack.callback(handle.remove)
                if collectives is not None:
                    stack.enter_context(collectives)
                    stack.callback(collectives.end_forward)
                    collectives.phase = "forward"
                if hasattr(mode, "release"):  # an exception inside the interceptor's __exit__
                    stack.callback(mode.release)
                stack.callback(setattr, mode, "active", False)
            with mode, warnings.catch_warnings(), others:
                if opt.backward:
                    # with global backward hooks PyTorch warns for every module whose
                    # output is not a tensor or tuple (HF ModelOutput): expected here
                    warnings.filterwarnings("ignore", message="For backward hooks to be called")
                out = root(*args, **kwargs) if run is None else run.call()
            mode.active = False
            if collectives is not None:
                collectives.end_forward()
            # the forward is over: modules run again by the backward (activation
            # checkpointing) or by a loss callable are not part of the forward graph
            state.scope.active = False
            if batch is not None:
                # nothing intercepts writes from here on: hold no tensor back any more
                with deferred_sigint():
                    batch.flush()
                batch.defer = False
            if recorder is not None:
                recorder.forward_done()
            if opt.backward:  # the backward sections; the loss's description in meta
                loss, call_meta["backward"] = make_loss(out, opt.backward)
                types = autograd_types(loss)
                if collectives is not None:
                    collectives.phase = "backward"
                sharded = state.dist.sharded if state.dist else None
                grads = gradients(loss, root, tensors, state.stats_meta, sharded)
                sections = {
                    "backward": state.backward_entries,
                    **({"collectives": collectives.section} if collectives is not None else {}),
                    "grads": grads,
                    "autograd": types,
                }
        finally:
            with deferred_sigint():  # a Ctrl-C here would cut the unwinding short
                stack.close()
        outputs = _record_outputs(state, out)
        if state.dist is not None:
            state.dist.rank_indexed(state.nodes, outputs)
        reshard(units)
        if run is not None and (entry := run.plan(max(state.calls.values(), default=0))):
            plan = {ROOT_LABEL: {**plan.get(ROOT_LABEL, {}), **entry}, **plan}
        if run is not None and collectives is not None:
            collectives.end_step()
            if collectives.section:  # a schedule's gradient transfers
                sections["collectives"] = collectives.section
        sections["params"] = parameter_entries(named, batch)
        if plan:
            sections = {"plan": plan, **sections}
        warn_uncaptured(mode, root)
        if opt.view == "ops":
            warn_other_threads(others.counts, root)
        if recorder is not None and opt.hooks:
            sections = {"hooks": recorder.events, **sections}
        if batch is not None:
            with deferred_sigint():  # no_grad blocks inside: a Ctrl-C would leave grad off
                batch.finish()
            warn_stale(batch.stale, root)
            if opt.dist_stats == "global":
                global_stats(dtensor_metas(inputs, state.nodes, outputs, sections))
        return GraphIR(call_meta, inputs, state.nodes, outputs, sections, provenance=written)


def _record_outputs(state: TraceState, out: Any) -> dict[str, Any]:
    """The ``outputs`` section: each output leaf by path, pointing at its producer."""
    outputs: dict[str, Any] = {}
    with deferred_sigint():  # as for the inputs: statistics in no_grad blocks
        for path, leaf in flatten(out, ""):
            key = path or "output"
            if isinstance(leaf, torch.Tensor):
                if state.labels.get(leaf) is None:
                    state.labels.set(leaf, ref(key), state.new_meta(leaf))
                outputs[key] = state.output_entry(leaf, state.labels.ref(leaf))
            else:
                outputs[key] = state.render(leaf)
    return outputs
