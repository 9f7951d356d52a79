"""``compare_compiled``: run a model eagerly and under ``torch.compile``, report the differences.

The check, in order:

1. ``torch._dynamo.reset()`` and ``counters.clear()``; the model's own forward
   and backward (pre-)hooks are wrapped to log their calls (:mod:`.check`).
2. Eager: :func:`pytest_graphir.capture.trace` (structure only, under
   ``torch.compiler.set_stance("force_eager")``) gives the op sequence with module
   scopes; a temporary forward hook on the model keeps its output.
3. Compiled: the parameters and buffers are put back as they were before the eager
   run (:class:`ModelState`), then ``torch.compile(model,
   backend=GraphRecorder(backend, model=model))`` is called with the same inputs (and
   the same RNG state), while a :class:`~.watch.CompileWatch` notes compile ids and
   graph-break sites. With ``backward=True`` both sides also run a backward
   (:func:`run_backward`): backward hooks and gradients are compared.
4. Optionally a second call: ``after_first_call()`` runs (register a hook there to
   test late registration), newly registered hooks are wrapped, then the model runs
   eagerly and compiled with ``second_args`` (or the same inputs).
5. The report: graphs and breaks as ``torch._dynamo.explain`` counts them (graphs
   ending at a break; reasons from ``counters["graph_break"]`` and
   ``["unimplemented"]``, located in the model), the eager op sequence aligned with
   the ops the compiled graphs ran (:func:`align`: folded ops, rewrites, library
   compile paths), hook events, outputs within the tolerance, recompiles (compile ids
   ``N/k``, ``guard_failures``), guard counts.
6. Hooks restored, ``torch._dynamo.reset()`` (which drops the callbacks) and
   ``counters.clear()`` again, whether the check passed, failed or raised.

Nothing here runs Inductor unless ``backend="inductor"`` is asked for.

This module orders the steps and compares hook events (:func:`compare_hooks`,
:func:`hook_scopes`), aligns the op sequences (:func:`align`, in the section *the op
alignment* below), compares outputs and gradients (:func:`compare_outputs`,
:func:`compare_grads`) and restores the model's state (:class:`ModelState`);
:mod:`.dynamo_state` resets Dynamo. :func:`compare_aten` compares AOT Autograd's ATen
graphs with eager's.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import sys
import sysconfig
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.parameter import is_lazy
from torch.utils._python_dispatch import TorchDispatchMode

from ..capture import trace
from ..capture.dtensor import distributed
from ..capture.hooks import CALL_HOOK_DICTS, HookEvent, UserHooks
from ..capture.options import original_module
from ..capture.stats.kinds import reference_stats
from ..compare import DEFAULT_ATOL, DEFAULT_RTOL, Tolerance
from ..compare.hooks import differing, unmatched
from ..ir import TensorMeta
from ..leaves import flatten
from ..names import module_path, op_scope, parent_path, refs_in
from .backend import AotGraphRecorder, Delegate, GraphRecorder
from .compiled_report import CompiledReport, HookProblem, NumericDiff
from .dynamo_state import quiet_trace_log, reset_dynamo
from .records import CompiledOp, EagerOp, OpDivergence
from .watch import CompileWatch, function_codes, readable_path, recompile_reasons, within


def compare_compiled(
    model: torch.nn.Module,
    *args: Any,
    backend: Delegate = "eager",
    second_args: tuple[Any, ...] | None = None,
    after_first_call: Callable[[], object] | None = None,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    allow_graph_breaks: bool = False,
    strict: bool = False,
    third_party: tuple[str, ...] = (),
    backward: bool = False,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    model_kwargs: dict[str, Any] | None = None,
    **kwargs: Any,
) -> CompiledReport:
    """Compile ``model`` with a recording backend and compare it with the model run eagerly.

    Relies on ``torch.compile``, ``torch._dynamo.reset``, ``torch._dynamo.utils.counters``
    (``graph_break``, ``unimplemented``), ``torch._dynamo.callback_handler``,
    ``torch._dynamo.output_graph.graph_break_reasons``, ``guard_failures``,
    ``get_compilation_metrics``, ``torch.compiler.set_stance`` and
    ``torch._dynamo.config.skip_nnmodule_hook_guards``; see the module docstring for
    the steps. Dynamo state is reset before and after, so the check may be called
    several times in one test, and compiled frames of earlier ``torch.compile`` calls
    are forgotten. The eager and the compiled run start from the same parameters and
    buffers (:class:`ModelState`), so a forward that updates a buffer does not
    show as a numerics difference; the model is left with the buffer values (and
    gradients) it had before the check. A parameter the forward writes in place is
    reported (its old value is not kept: copying every parameter would double the
    model's memory).

    Args:
        model: the ``nn.Module`` (a ``torch.compile``'d ``OptimizedModule`` is
            unwrapped to its original module).
        *args: positional inputs of the model call.
        backend: how the compiled graphs run: ``"eager"`` (``gm.forward``: Dynamo
            only, the default; never Inductor), a registered backend's name
            (``"aot_eager"``, ``"inductor"``) or a backend callable
            ``(gm, example_inputs) -> callable``.
        second_args: inputs of a second call (a tuple), made after the first on the
            compiled and the eager model: recompiles are counted, outputs compared.
        after_first_call: called after the first compiled call and before the second
            call (which then happens even without ``second_args``, with ``args``).
            Register a hook here to test that hooks added after compilation fire.
        rtol: relative tolerance for outputs and gradients (``compare.Tolerance``).
        atol: absolute tolerance for outputs and gradients.
        allow_graph_breaks: report graph breaks without failing the check on them.
        strict: fail on library compile paths too (op divergences whose compile-only
            ops come from code outside the user's package, with matching outputs).
        third_party: module names (imported) or directories whose code counts as
            library code besides site-packages, for library compile paths.
        backward: also run a backward (``loss_fn(output).backward()``) eagerly and
            compiled from the same state, and compare backward pre-hooks and full
            backward hooks (per module, in order) and each parameter's gradient.
        loss_fn: the scalar to run backward on (default: the sum of every floating
            output that requires grad).
        model_kwargs: keyword arguments of the model whose names clash with this
            function's own.
        **kwargs: keyword arguments of the model call (both calls).

    Returns:
        A :class:`~.compiled_report.CompiledReport`; ``bool(report)`` is ``report.ok``, and
        ``report.lines()`` explains what diverged.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
        ValueError: ``backward=True`` and no output requires grad (no ``loss_fn``);
            ``rtol`` or ``atol`` not a number from 0 to 1 (``compare.Tolerance``).
        torch._dynamo.exc.InvalidBackend: ``backend`` names no registered backend.
        RuntimeError: called on more than one ``threaded`` rank (threads of one
            process, :func:`refuse_threaded_ranks`), before anything runs; run the
            ranks as processes (``run_ranks(fn, backend="gloo")``).
        Exception: whatever the model raises, eagerly or compiled; hooks are
            restored and Dynamo is reset first.
    """
    refuse_threaded_ranks("compare_compiled")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            "compare_compiled() needs an nn.Module as its first argument, got "
            f"{type(model).__name__}; call compare_compiled(model, *inputs)"
        )
    model = original_module(model)
    kwargs = {**kwargs, **(model_kwargs or {})}
    second = second_args is not None or after_first_call is not None
    tolerance = Tolerance(rtol, atol)
    materialise_lazy(model, args, kwargs)
    with _session(model) as (start, hooks):
        watch, recorder = CompileWatch(model), GraphRecorder(backend, model=model)
        skip_guards = bool(torch._dynamo.config.skip_nnmodule_hook_guards)
        events: dict[str, list[HookEvent]] = {}
        problems: list[HookProblem] = []

        def compare(eager: str, compiled: str, call: int, late: list[HookEvent]) -> None:
            """Log the hook events since the last take as ``events[compiled]`` and
            compare them with ``events[eager]`` (a ``_backward`` pair: backward hooks)."""
            events[compiled] = new = hooks.take()
            phase = "backward" if eager.endswith("_backward") else "forward"
            problems.extend(compare_hooks(events[eager], new, late, call, phase))

        hooks.wrap(model.named_modules(), CALL_HOOK_DICTS)
        box: list[Any] = []  # the eager output, from a forward hook during the trace
        keep = model.register_forward_hook(lambda _m, _a, out: box.append(out))
        with keep, torch.compiler.set_stance("force_eager"):  # the handle removes the hook
            graph = trace(model, *args, stats=False, model_kwargs=kwargs)
        events["eager"] = hooks.take()
        if backward:  # the traced forward's output, as it came out of the model
            eager_grads = run_backward(model, box[-1], loss_fn)
            events["eager_backward"] = hooks.take()
        # parameters the eager runs wrote in place: their old value is not kept
        numerics = [NumericDiff(f"{n} (parameter)", _WRITTEN, 1) for n in start.changed]
        start.restore(rng=True)
        compiled = torch.compile(model, backend=recorder)
        out = compiled(*args, **kwargs)
        compare("eager", "compiled", 1, [])
        first_graphs, first_runs = len(recorder.graphs), len(recorder.runs)
        n_compiles = len(watch.compiles)
        numerics += compare_outputs(box[-1] if box else None, out, tolerance, 1)
        if backward:
            grads = run_backward(model, out, loss_fn)
            compare("eager_backward", "compiled_backward", 1, [])
        if second:  # after after_first_call, both again from one state
            if after_first_call is not None:
                after_first_call()
            late = hooks.wrap(model.named_modules(), CALL_HOOK_DICTS)  # not wrapped yet
            args2 = tuple(second_args) if second_args is not None else args
            state2 = ModelState(model)
            with torch.compiler.set_stance("force_eager"):
                eager_out = model(*args2, **kwargs)
            events["eager_2"] = hooks.take()
            state2.restore(rng=True)
            out = compiled(*args2, **kwargs)
            compare("eager_2", "compiled_2", 2, late if skip_guards else [])
            numerics += compare_outputs(eager_out, out, tolerance, 2)
        # the report: eager ops aligned with the compiled ones, breaks, recompiles
        executed = recorder.executed_ops(0, first_runs)
        hook_scopes(executed, model, hooks)
        eager_list = eager_ops(graph)
        aligned, folded = align(eager_list, executed, third_party)
        name = getattr(backend, "__name__", type(backend).__name__)
        return CompiledReport(
            backend=backend if isinstance(backend, str) else str(name),
            graphs=list(recorder.graphs),
            first_call_graphs=first_graphs,
            breaks=watch.breaks(recorder.graphs, recorder.runs),
            allow_graph_breaks=allow_graph_breaks,
            eager_ops=len(eager_list),
            compiled_ops=len(executed),
            divergences=[d for d in aligned if d.category != "rewrite"],
            hook_events=events,
            hook_problems=problems,
            numerics=numerics + (compare_grads(eager_grads, grads, tolerance) if backward else []),
            tolerance=tolerance,
            eager=graph,
            second_call=second,
            recompiles=len(watch.recompiles(n_compiles)),
            recompile_reasons=recompile_reasons() if second else [],
            guards=watch.guard_count(),
            folded=folded,
            rewrites=[d for d in aligned if d.category == "rewrite"],
            strict=strict,
            backward=backward,
        )


@contextlib.contextmanager
def _session(model: torch.nn.Module) -> Iterator[tuple[ModelState, UserHooks]]:
    """Reset Dynamo, save the model's state; yield it with a :class:`UserHooks` for the
    model's hooks. On the way out, whatever happened, restore the hooks and the state,
    and reset Dynamo again. No torch.__trace records reach a test's captured log
    meanwhile (:func:`~.dynamo_state.quiet_trace_log`)."""
    with quiet_trace_log():
        reset_dynamo()
        state, hooks = ModelState(model), UserHooks()
        try:
            yield state, hooks
        finally:
            hooks.restore()
            state.restore()
            reset_dynamo()


def refuse_threaded_ranks(check: str) -> None:
    """Refuse to check a model on ranks that are threads of one process.

    Dynamo's compiled frames, counters, graph-break records and compile callbacks are
    process-wide: on torch's ``threaded`` process group with more than one rank (the
    default of :func:`~pytest_graphir.parallel.run_ranks`) every rank thread shares
    them. The ranks switch while one waits in a collective, so one rank's
    ``torch._dynamo.reset()`` would drop the frames another rank is running, and each
    rank's report would count the others' graphs. Ranks of a single-rank group, or
    in processes of their own (``gloo``, NCCL), are checked as usual.

    Args:
        check: the name of the check, for the message (``"compare_compiled"``).

    Raises:
        RuntimeError: the default process group is ``threaded`` with more than one
            rank; the message names ``check`` and says to run the ranks as processes
            (``run_ranks(fn, backend="gloo")``, ``fn`` a module-level function).
    """
    if not distributed():
        return
    import torch.distributed as dist

    if dist.get_backend() == "threaded" and (world := dist.get_world_size()) > 1:
        raise RuntimeError(
            f"{check}() cannot check a model on {world} threaded "
            "ranks: Dynamo's compiled frames, counters and callbacks are shared by "
            "every thread of a process, so one rank's reset or compile would clobber "
            'another\'s. Run the ranks as processes: run_ranks(fn, backend="gloo") '
            "with fn a module-level function (mark the test @pytest.mark.distributed)"
        )


_WRITTEN = "written in place by the eager forward, so the compiled run started from another value"


def compare_hooks(
    eager: list[HookEvent], compiled: list[HookEvent], late: list[HookEvent], call: int, phase: str
) -> list[HookProblem]:
    """Compare the hook events of an eager and a compiled call.

    An event left unmatched on both sides (:func:`~pytest_graphir.compare.hooks.
    unmatched`) is ``order``; one only eager is ``skipped``, or ``late_skipped`` when
    its hook is in ``late``: hooks registered after the first compiled call, while
    ``skip_nnmodule_hook_guards`` was True (the caller passes none otherwise); one only
    compiled is ``extra``.
    """
    missing, extra = unmatched(eager, compiled)
    moved = Counter(missing) & Counter(extra)
    spare = Counter(extra) - moved
    out: list[HookProblem] = []
    for e in missing:
        moved[e] -= 1
        skip = "late_skipped" if e in late else "skipped"
        out.append(HookProblem("order" if moved[e] >= 0 else skip, e, call, phase))
    for c in extra:
        spare[c] -= 1
        out += [HookProblem("extra", c, call, phase)] if spare[c] >= 0 else []
    return out


def hook_scopes(executed: list[CompiledOp], model: torch.nn.Module, hooks: UserHooks) -> None:
    """Put ops run inside a module's forward hook where the eager trace puts them.

    Eager, a forward hook runs after the module's scope has closed, so its ops belong
    to the parent module; Dynamo's ``nn_module_stack`` still holds the hooked
    module. An op whose ``stack_trace`` passes through the code of a forward hook of
    module ``p`` of ``model`` (the original of the one ``hooks`` wrapped, a
    ``functools.partial``'s function or a callable object's ``__call__``) is moved
    from ``p`` to ``p``'s parent, and remembers ``p`` (``hook_of``): the alignment
    accepts either scope for it, whichever the eager trace chose.
    """
    codes: dict[tuple[str, str], str] = {}  # (co_filename, co_name) -> module path
    for path, module in model.named_modules():
        for fn in module._forward_hooks.values():
            inner = getattr(hooks.original(fn), "func", hooks.original(fn))
            call = vars(type(inner)).get("__call__")  # a callable object's
            for code in [*function_codes(inner), *function_codes(call)]:
                codes.setdefault((code.co_filename, code.co_name), path)
    for op in executed:
        for file, _line, function, _code in op.frames:
            path = codes.get((file, function))
            if path and within(op.scope, path):
                op.scope = parent_path(path)
                op.hook_of = path
                break


# -- the op alignment -------------------------------------------------------------------
#
# Align the eager op sequence with the ops the compiled graphs ran, and sort what differs.
#
# Both sides use canonical op names (:mod:`pytest_graphir.opnames`,
# :mod:`.backend`). :func:`align` matches them with ``difflib.SequenceMatcher`` (a
# sequence alignment, so one odd op never derails the rest), then looks at each
# stretch that did not match:
#
# * eager ops that carry no tensor (``_C._set_grad_enabled`` from ``@torch.no_grad()``,
#   ``_C._log_api_usage_once``) never take part: Dynamo runs them at trace time or
#   puts them in the graph as it likes (:func:`eager_ops` leaves them out, and
#   :func:`~.backend.canonical_from_fx_node` drops them on the compiled side);
# * eager ops whose result nothing used (an indexing op whose value is dropped,
#   a mask built and never read) are *folded*: Dynamo's dead-code elimination
#   removes them from the graph. In-place ops never fold;
# * a stretch whose ops are NumPy calls and the conversions around them (eager
#   ``numpy``/``from_numpy``, compiled ``numpy.tanh``, ``as_tensor``) is a *rewrite*:
#   Dynamo traced NumPy into torch ops;
# * a stretch whose compile-only ops were traced from code outside the user's own
#   package (site-packages, or a module named in ``third_party``) is a *library
#   compile path*: a library that takes another path under ``torch.compile``
#   (``torch.compiler.is_compiling()``), named at its source line; so is a stretch of
#   eager-only ops between compiled ops of library code in the same module (or its
#   submodules);
# * a stretch of eager-only ops between two graph runs (or before the first, or after
#   the last) ran *between* the graphs: what a graph break does, so it fails the check
#   only where no break happened or breaks are not allowed;
# * anything else is a divergence, and so are scope differences of matched ops, except
#   an op Dynamo places in a submodule of the eager op's module that no eager op ran
#   in: a method of the submodule called directly (not through ``__call__``, so no
#   module scope eagerly).

NUMPY_OPS = frozenset(
    "numpy from_numpy as_tensor view_as detach tensor asarray clone contiguous to".split()
)
"""Conversions around a NumPy call: eager ``Tensor.numpy`` / ``torch.from_numpy``, and
what Dynamo adds when it traces NumPy into torch ops."""


def _gives_tensor(outputs: list[Any]) -> bool:
    return any(isinstance(o, TensorMeta) or (isinstance(o, dict) and "ref" in o) for o in outputs)


def eager_ops(graph: Any) -> list[EagerOp]:
    """The eager trace's op nodes as :class:`~.records.EagerOp`, in run order.

    Ops that neither take nor give a tensor are left out. An op whose result
    reaches no model output through live ops (in-place ops are always live: they
    change a tensor others read) is marked ``dead``: Dynamo's dead-code elimination
    drops such ops, or evaluates them at trace time.

    Args:
        graph: a :class:`~pytest_graphir.ir.GraphIR` from ``trace(..., stats=False)``.
    """
    nodes = [n for n in graph.nodes if n.kind == "op"]
    live = set(refs_in(graph.outputs))
    for node in reversed(nodes):  # a result is live when a live op (or the output) uses it
        if node.name in live or node.target.endswith("_"):
            live.add(node.name)
            live.update(refs_in([node.args, node.kwargs]))
    kept = [n for n in nodes if _gives_tensor(n.outputs) or refs_in([n.args, n.kwargs])]
    return [
        EagerOp(n.name, n.target, module_path(op_scope(n.name)), dead=n.name not in live, index=i)
        for i, n in enumerate(kept)
    ]


def library_roots(third_party: Iterable[str] = ()) -> tuple[str, ...]:
    """Directories whose code counts as library code besides any ``site-packages`` /
    ``dist-packages`` directory (:func:`is_library_file` knows those by name): the
    standard library (``sysconfig``), and the directories of the modules or paths named
    in ``third_party``."""
    roots = [sysconfig.get_paths()["stdlib"]]
    for name in third_party:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None) if module is not None else name
        if path:  # a package's directory; a module's or directory's own path
            roots.append(os.path.dirname(path) if os.path.basename(path) == "__init__.py" else path)
    return tuple(os.path.abspath(r) for r in roots if r)


def is_library_file(filename: str, roots: tuple[str, ...]) -> bool:
    """True when ``filename`` lies under one of ``roots`` or in any ``site-packages`` /
    ``dist-packages`` directory."""
    path = os.path.abspath(filename)
    if {"site-packages", "dist-packages"} & set(path.replace("\\", "/").split("/")):
        return True
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _foldable(op: EagerOp) -> bool:
    return op.dead and not op.op.endswith("_") and op.op != "numpy"


def _classify(div: OpDivergence, roots: tuple[str, ...], neighbours: list[CompiledOp]) -> None:
    """Set ``div.category`` (and ``div.source``) for a non-matching stretch.

    ``neighbours`` are the compiled ops right before and after a stretch of missing
    eager ops: when both were traced from library code in the same module, the
    missing ops are that library's eager-only path.
    """
    names = [e.op for e in div.eager] + [c.op for c in div.compiled]
    if any(o in ("numpy", "from_numpy") or o.startswith("numpy.") for o in names) and all(
        o in NUMPY_OPS or o.startswith("numpy.") for o in names
    ):
        div.category = "rewrite"  # a NumPy call and the conversions around it
        return
    missing = div.kind == "missing"  # then: library code before and after, in its module
    ops = neighbours if missing else div.compiled
    scope = div.eager[0].scope if missing else ""  # "": any module
    library = all(c.frames and within(c.scope, scope) for c in ops)
    library = library and (not missing or any(c.scope == scope for c in ops))
    library = library and all(is_library_file(c.frames[-1][0], roots) for c in ops)
    traced = [c for c in ops if c.frames]
    if traced and (library or not missing):
        file, line, function, _ = traced[0].frames[-1]
        div.source = f"{readable_path(file)}:{line} in {function}"
    if library:
        div.category = "library"


def align(
    eager: list[EagerOp], compiled: list[CompiledOp], third_party: Iterable[str] = ()
) -> tuple[list[OpDivergence], list[EagerOp]]:
    """Align the eager op sequence with the compiled one (the section comment above).

    Args:
        eager: the eager ops (:func:`eager_ops`).
        compiled: the ops the compiled graphs ran, in run order.
        third_party: module names or paths whose code counts as library code, besides
            site-packages.

    Returns:
        ``(divergences, folded)``: differences in eager order, each with a
        ``category`` (``"divergence"``, ``"library"``, ``"rewrite"``, ``"between"``);
        and the eager ops
        Dynamo dropped because nothing used their result.
    """
    roots = library_roots(third_party)
    out: list[OpDivergence] = []
    folded: list[EagerOp] = []
    eager_scopes = {e.scope for e in eager}

    def match(
        e_ops: list[EagerOp], c_ops: list[CompiledOp], e_base: int, c_base: int, first: bool
    ) -> None:
        matcher = difflib.SequenceMatcher(
            None, [e.op for e in e_ops], [c.op for c in c_ops], autojunk=False
        )
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                for e, c in zip(e_ops[i1:i2], c_ops[j1:j2], strict=True):
                    # same scope, a forward hook's op, or a method of a submodule the eager
                    # forward called directly (JetMoE's ``self.experts.reduce(...)``: no
                    # __call__, so no module scope eagerly, where Dynamo's nn_module_stack
                    # names the submodule)
                    if e.scope not in (c.scope, c.hook_of) and (
                        c.scope in eager_scopes or not within(c.scope, e.scope)
                    ):
                        out.append(OpDivergence("scope", [e], [c], e.index))
                continue
            e_part, c_part = e_ops[i1:i2], c_ops[j1:j2]
            if first and any(_foldable(e) for e in e_part):
                folded.extend(e for e in e_part if _foldable(e))
                rest = [e for e in e_part if not _foldable(e)]  # both empty: no opcodes
                match(rest, c_part, e_part[0].index, c_base + j1, False)
                continue
            kind = "missing" if not c_part else "extra" if not e_part else "changed"
            div = OpDivergence(kind, e_part, c_part, e_part[0].index if e_part else e_base + i1)
            at = c_base + j1  # where the stretch lies in the whole compiled sequence
            _classify(div, roots, compiled[max(at - 1, 0) : at + 1])
            # outside every graph run: before the first compiled op, after the last, or
            # where one graph run (CompiledOp.run) ends and another begins
            between = at <= 0 or at >= len(compiled) or compiled[at - 1].run != compiled[at].run
            if kind == "missing" and div.category == "divergence" and between:
                div.category = "between"
            out.append(div)

    match(eager, compiled, 0, 0, True)
    out.sort(key=lambda d: d.eager_index)
    return out, folded


# -- outputs, gradients and the model's state ------------------------------------------
#
# compare_outputs walks both outputs as the trace does (tuples, lists, mappings), and
# through the attributes of objects that hold tensors (a transformers DynamicCache);
# floating tensors are compared with the compare.Tolerance rule, everything else
# exactly. compare_grads applies the same rules to each parameter's gradient, from
# run_backward. With backward=True, a backward runs on the eager and on the compiled
# model from the same parameters and buffers (ModelState). PyTorch's notes on
# nn.Module hooks under torch.compile (torch/_dynamo docs, "Hooks"): a compiled graph
# runs as one autograd function whose backward produces all its gradients at once, so
# backward hooks of a series of modules inside one graph fire together after it, and
# the order may differ from eager.

_PLAIN = (torch.Tensor, type(None), bool, int, float, complex, str, bytes)

MAX_OBJECT_DEPTH = 4
"""How many levels of output objects' attributes :func:`compare_outputs` walks."""

Grads = dict[str, torch.Tensor | None]
"""Parameter name -> gradient (a detached clone), None where none arrived."""


def grad_outputs(output: Any) -> list[torch.Tensor]:
    """The tensors of ``output`` (:func:`~pytest_graphir.leaves.flatten` order) that
    require grad; only floating and complex tensors can."""
    return [t for _, t in flatten(output, "") if isinstance(t, torch.Tensor) and t.requires_grad]


def default_loss(output: Any) -> torch.Tensor:
    """Sum of every output tensor that requires grad (``.float().sum()`` each).

    Raises:
        ValueError: no output tensor requires grad (the model ran under
            ``torch.no_grad()``, or its parameters are frozen): pass ``loss_fn``.
    """
    parts = [t.float().sum() for t in grad_outputs(output)]
    if not parts:
        raise ValueError(
            "compare_compiled(backward=True): no model output requires grad, so "
            "there is nothing to run backward on; enable grad and trainable "
            "parameters, or pass loss_fn=lambda out: ... returning a scalar"
        )
    return sum(parts[1:], parts[0])


def run_backward(
    model: torch.nn.Module, output: Any, loss_fn: Callable[[Any], torch.Tensor] | None
) -> Grads:
    """Run ``loss_fn(output).backward()`` and return the parameters' gradients.

    Gradients are cleared first (set to None) and left in place afterwards.
    """
    model.zero_grad(set_to_none=True)
    (loss_fn or default_loss)(output).backward()  # type: ignore[no-untyped-call]
    return {
        name: None if p.grad is None else p.grad.detach().clone()
        for name, p in model.named_parameters()
    }


def _leaves(value: Any) -> dict[str, Any]:
    """``path -> leaf`` of an output (:func:`~pytest_graphir.leaves.flatten`, objects
    walked :data:`MAX_OBJECT_DEPTH` deep); an object that is one leaf is compared by
    its type, as ``"<TypeName>"``."""
    return {
        path: leaf if isinstance(leaf, _PLAIN) else f"<{type(leaf).__name__}>"
        for path, leaf in flatten(value, "", objects=MAX_OBJECT_DEPTH)
    }


def compare_outputs(
    eager: Any, compiled: Any, tolerance: Tolerance, call: int = 1
) -> list[NumericDiff]:
    """Compare compiled outputs with eager ones, leaf by leaf.

    Floating tensors match when ``max |compiled - eager| <= atol + rtol * scale``,
    ``scale = max(|min|, |max|, std)`` of the eager tensor's finite values
    (:func:`~pytest_graphir.capture.stats.kinds.reference_stats`, the
    :class:`~pytest_graphir.compare.Tolerance` rule, applied element-wise); NaN and
    infinities must sit at the same places. Other tensors, and non-tensor leaves,
    must be equal.

    Returns:
        One :class:`~.compiled_report.NumericDiff` per differing leaf.
    """
    return _compare(_leaves(eager), _leaves(compiled), tolerance, call, _OUTPUTS)


def compare_grads(eager: Grads, compiled: Grads, tolerance: Tolerance) -> list[NumericDiff]:
    """Compare each parameter's gradient (``compare_outputs`` rules), call 1."""
    return _compare(eager, compiled, tolerance, 1, _GRADS)


_ABSENT = object()
# (the value of a missing leaf, path suffix, detail when only eager, when only compiled)
_OUTPUTS = (_ABSENT, "", "only in the eager outputs", "only in the compiled outputs")
_GRADS = (None, ".grad", "no gradient under compile", "no gradient eagerly")


def _compare(
    eager: dict[str, Any], compiled: dict[str, Any], tolerance: Tolerance, call: int, how: Any
) -> list[NumericDiff]:
    """One :class:`~.compiled_report.NumericDiff` per path whose leaves differ (``how``:
    :data:`_OUTPUTS` or :data:`_GRADS`), eager order first, compiled-only paths after."""
    missing, suffix, *absent = how
    out: list[NumericDiff] = []
    for path in {**eager, **compiled}:
        e, c = eager.get(path, missing), compiled.get(path, missing)
        if e is missing or c is missing:
            detail = None if e is c else absent[e is missing]
        else:
            detail = _difference(e, c, tolerance)
        if detail:
            out.append(NumericDiff(f"{path or 'output'}{suffix}", detail, call))
    return out


def _difference(e: Any, c: Any, tolerance: Tolerance) -> str | None:
    """What differs between an eager and a compiled leaf (:func:`compare_outputs`'
    rules), or None when they match."""
    if not isinstance(e, torch.Tensor) or not isinstance(c, torch.Tensor):
        return f"{e!r} -> {c!r}" if type(e) is not type(c) or e != c else None
    if e.shape != c.shape or e.dtype != c.dtype:
        return f"{e.dtype} {list(e.shape)} -> {c.dtype} {list(c.shape)}"
    e, c = e.detach(), c.detach().to(e.device)  # detached: no autograd graph is built
    if torch.equal(e, c):  # the common case, and cheap: no statistics needed
        return None
    if not (e.is_floating_point() or e.is_complex()):
        return f"{int((e != c).sum())} of {e.numel()} elements differ (exact compare)"
    infinities = torch.where(e.isinf(), e, 0), torch.where(c.isinf(), c, 0)
    if not (torch.equal(e.isnan(), c.isnan()) and torch.equal(*infinities)):
        return "NaN/Inf at different places"
    finite = torch.isfinite(e)
    if not bool(finite.any()):
        return None
    diff = float((c[finite].double() - e[finite].double()).abs().max())
    allowed = tolerance.allowed(reference_stats(e[finite]))
    if diff <= allowed:  # False for a NaN difference
        return None
    return f"max |compiled - eager| {diff:.6g} > allowed {allowed:.3g}"


class ModelState:
    """A model's buffers and gradients at one moment, its parameters' versions, and the
    default random generators' states (``torch.get_rng_state()`` and, once CUDA is
    initialised, ``torch.cuda.get_rng_state_all()``).

    Args:
        model: the module; ``named_buffers`` are saved with ``detach().clone()``,
            ``named_parameters`` by version; a lazy module's uninitialised
            parameters and buffers are skipped.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        cuda = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        self.rng = torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else None
        self.buffers = {
            name: (t, t._version, t.detach().clone())
            for name, t in model.named_buffers()
            if not is_lazy(t)
        }
        self.params = {
            name: (p, p._version, None if p.grad is None else p.grad.detach().clone())
            for name, p in model.named_parameters()
            if not is_lazy(p)
        }

    @property
    def changed(self) -> list[str]:
        """Parameters written in place since the snapshot (their old values are lost)."""
        return [name for name, (p, version, _) in self.params.items() if p._version != version]

    def restore(self, rng: bool = False) -> None:
        """Copy the saved buffers back into the model's current tensors (only those that
        changed: written in place, or replaced by the forward), and put the gradients
        (and with ``rng``, the random generators' states) back as saved."""
        if rng:  # the CPU generator's state, and every CUDA device's once CUDA is in use
            torch.set_rng_state(self.rng[0])
            if self.rng[1] is not None:
                torch.cuda.set_rng_state_all(self.rng[1])
        current = dict(self.model.named_buffers())
        with torch.no_grad():
            for name, (tensor, version, saved) in self.buffers.items():
                t = current.get(name)
                if t is None or (t is tensor and t._version == version):
                    continue
                if t.shape == saved.shape and t.dtype == saved.dtype:
                    t.copy_(saved)
                else:  # replaced by a tensor of another shape or dtype: put a copy back
                    owner, _, attr = name.rpartition(".")
                    self.model.get_submodule(owner)._buffers[attr] = t = saved.clone()
                self.buffers[name] = (t, t._version, saved)
            for name, p in self.model.named_parameters():
                grad = self.params.get(name, (p, 0, None))[2]
                if not is_lazy(p):
                    p.grad = None if grad is None else grad.clone()


def materialise_lazy(model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Run one eager forward when a lazy module (``LazyLinear``) has uninitialised
    parameters or buffers (``is_lazy``, as ``LazyModuleMixin.has_uninitialized_params``
    reads them), so both sides compare the model and not its one-time initialisation
    (``LazyModuleMixin._infer_parameters``, a forward pre-hook that removes itself)."""
    if any(is_lazy(t) for t in (*model.parameters(), *model.buffers())):
        with torch.no_grad(), torch.compiler.set_stance("force_eager"):
            model(*args, **kwargs)


# -- ATen graphs against eager's ATen ops ----------------------------------------------

IGNORED = frozenset({"detach", "alias", "lift_fresh", "lift_fresh_copy"})
"""ATen ops left out of both sequences: autograd and functionalisation bookkeeping."""


class _AtenLog(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Log the ATen op packet name of every dispatched call (:data:`IGNORED` left out)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if (name := str(func.overloadpacket.__name__)) not in IGNORED:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


@dataclass
class AtenDiff:
    """One stretch where the compiled ATen sequence departs from the eager one."""

    phase: str
    eager: list[str]
    compiled: list[str]
    eager_index: int

    def __str__(self) -> str:
        return (
            f"{self.phase} #{self.eager_index}: eager {', '.join(self.eager) or '-'} -> "
            f"compiled {', '.join(self.compiled) or '-'}"
        )


@dataclass
class AtenComparison:
    """Eager versus compiled ATen op sequences, forward and backward.

    Attributes:
        eager: ``{"forward": [...], "backward": [...]}`` eager ATen ops
            (:data:`IGNORED` left out).
        compiled: the same for the ATen graphs AOT Autograd compiled (``"forward"``
            holds the inference graphs when grad was off).
        diffs: where they differ; empty when they are the same op for op.
    """

    eager: dict[str, list[str]]
    compiled: dict[str, list[str]]
    diffs: list[AtenDiff] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every phase has the same ATen ops in the same order."""
        return not self.diffs

    def __bool__(self) -> bool:
        return self.ok

    def lines(self) -> list[str]:
        """A summary line per phase, then each difference."""
        return [
            f"graphir aten {phase}: {len(ops)} eager ops, "
            f"{len(self.compiled.get(phase, []))} compiled"
            for phase, ops in self.eager.items()
        ] + [f"  {d}" for d in self.diffs]


def _diff(phase: str, eager: list[str], compiled: list[str]) -> list[AtenDiff]:
    return [
        AtenDiff(phase, eager[i1:i2], compiled[j1:j2], i1)
        for i1, i2, j1, j2 in differing(eager, compiled)
    ]


def compare_aten(
    model: torch.nn.Module, *args: Any, backward: bool = True, **kwargs: Any
) -> AtenComparison:
    """Compare the ATen graphs ``torch.compile`` (AOT Autograd) builds with eager's ATen ops.

    Relies on ``TorchDispatchMode`` (``torch.utils._python_dispatch``),
    ``torch._dynamo.backends.common.aot_autograd`` through
    :class:`~.backend.AotGraphRecorder`, and ``torch.autograd.backward``. Both runs
    start from the same parameters and buffers (a lazy module's, initialised first by
    :func:`materialise_lazy`); Dynamo is reset before and after.

    Args:
        model: the module.
        *args: positional inputs.
        backward: also run a backward from the outputs that require grad (with
            gradients of ones) and compare the backward ATen graphs.
        **kwargs: keyword inputs.

    Returns:
        An :class:`AtenComparison`; ``bool()`` is True when forward and backward ATen
        sequences are the same op for op.

    Raises:
        ValueError: ``backward=True`` and no output requires grad.
        RuntimeError: called on more than one ``threaded`` rank
            (:func:`refuse_threaded_ranks`), before anything runs.
    """
    refuse_threaded_ranks("compare_aten")
    materialise_lazy(model, args, kwargs)
    with _session(model) as (state, _):
        with _AtenLog() as log:
            out = model(*args, **kwargs)
        eager = {"forward": log.ops}
        if backward:
            outs = grad_outputs(out)
            if not outs:
                raise ValueError(
                    "compare_aten(backward=True): no output requires grad; "
                    "enable grad or pass backward=False"
                )
            seeds = [torch.ones_like(t) for t in outs]  # made outside any recording
            with _AtenLog() as log:
                torch.autograd.backward(outs, seeds)
            eager["backward"] = log.ops
        state.restore()
        recorder = AotGraphRecorder(model=model)
        compiled_out = torch.compile(model, backend=recorder)(*args, **kwargs)
        if backward:
            outs = grad_outputs(compiled_out)
            torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
        compiled: dict[str, list[str]] = {phase: [] for phase in eager}
        for graph in recorder.aten_graphs:
            phase = "backward" if graph.kind == "backward" else "forward"
            compiled.setdefault(phase, []).extend(op for op in graph.ops if op not in IGNORED)
        diffs = [d for phase in eager for d in _diff(phase, eager[phase], compiled[phase])]
        return AtenComparison(eager, compiled, diffs)
